/* util.c: small command-line helpers (lists, numbers, time, errors). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"

int cli_parse_int(const char *s, int lo, int hi, int *out) {
    if (!s || !*s) return 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

int cli_parse_list(const char *s, int limit, int *out, int max_n, const char *what, as_error *err) {
    char *mark = calloc((size_t)(limit > 0 ? limit : 1), 1);
    if (!mark) return as_fail(err, AS_ERR_NOMEM, "out of memory"), -1;
    int ok = 1;
    if (strcmp(s, "all") == 0) {
        memset(mark, 1, (size_t)limit);
    } else {
        const char *p = s;
        while (*p && ok) {
            char *end;
            long a = strtol(p, &end, 10), b = a;
            if (end == p) ok = 0;
            p = end;
            if (ok && *p == '-') {
                const char *q = p + 1;
                b = strtol(q, &end, 10);
                if (end == q) ok = 0;
                p = end;
            }
            if (ok && (a < 0 || b < a || b >= limit)) ok = 0;
            for (long i = a; ok && i <= b; i++) mark[i] = 1;
            if (ok && *p == ',') p++;
            else if (ok && *p) ok = 0;
        }
    }
    int n = 0;
    for (int i = 0; ok && i < limit; i++)
        if (mark[i] && n < max_n) out[n++] = i;
    free(mark);
    if (!ok || n == 0) {
        as_fail(err, AS_ERR_ARG, "%s \"%s\": give indices in 0..%d as a list like 0,2,5-7 or all",
                what, s, limit - 1);
        return -1;
    }
    return n;
}

void cli_command_line(int argc, char **argv, char *buf, size_t n) {
    size_t u = 0;
    buf[0] = 0;
    for (int i = 0; i < argc && u + 1 < n; i++) {
        int w = snprintf(buf + u, n - u, "%s%s", i ? " " : "", argv[i]);
        if (w < 0) break;
        u += (size_t)w;
    }
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_error(const as_error *err) {
    return cli_fail(1, "%s", err->msg[0] ? err->msg : as_status_string(err->status));
}

int cli_make_dirs(const char *path) {
    char p[1200];
    snprintf(p, sizeof p, "%s", path);
    for (char *q = p;; q++) { /* every prefix that ends at a '/', then the whole path */
        if (*q != '/' && *q) continue;
        char c = *q;
        *q = 0;
        if (p[0] && mkdir(p, 0777) != 0 && errno != EEXIST) {
            return cli_fail(1, "%s: cannot create folder (%s)", p, strerror(errno));
        }
        *q = c;
        if (!c) return 0;
    }
}
