/* check.h: the test harness: checks count, failures print what differed (first mismatches and
 * the largest error), and check_finish() returns a non-zero exit code if anything failed. */
#ifndef AS_CHECK_H
#define AS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int check_count, check_failed;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        check_count++;                                                          \
        if (!(cond)) {                                                          \
            check_failed++;                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
        }                                                                       \
    } while (0)

/* |got - want| <= atol + rtol * |want| elementwise; prints the first 5 mismatches and the max. */
static inline int check_close(const char *what, const float *got, const float *want, size_t n,
                              double atol, double rtol) {
    double max_err = 0;
    size_t bad = 0, worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)want[i]);
        int nan = isnan(got[i]) != isnan(want[i]);
        if (e > max_err || nan) {
            max_err = nan ? INFINITY : e;
            worst = i;
        }
        if (nan || e > atol + rtol * fabs((double)want[i])) {
            if (bad < 5)
                fprintf(stderr, "  %s[%zu]: got %.8g want %.8g (err %.3g)\n", what, i,
                        (double)got[i], (double)want[i], e);
            bad++;
        }
    }
    check_count++;
    if (bad) {
        check_failed++;
        fprintf(stderr, "FAIL %s: %zu of %zu values differ; max error %.3g at %zu (atol %.1g, "
                "rtol %.1g)\n", what, bad, n, max_err, worst, atol, rtol);
        return 0;
    }
    if (getenv("CHECK_VERBOSE")) fprintf(stderr, "ok   %s: %zu values, max error %.3g\n", what, n, max_err);
    return 1;
}

/* A committed fixture: $FIXTURES/name (meson sets FIXTURES), else tests/fixtures/name. The
 * last four results stay valid. */
static inline const char *fx(const char *name) {
    static char buf[4][1024];
    static int k;
    const char *dir = getenv("FIXTURES");
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir ? dir : "tests/fixtures", name);
    return buf[k];
}

/* A private scratch folder per test program: check_tmp("x.h5") names a file in it. */
static char check_tmpdir[256];

static inline void check_tmp_init(const char *suite) {
    snprintf(check_tmpdir, sizeof check_tmpdir, "%s/attnscope-test-%s-%ld",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", suite, (long)getpid());
    mkdir(check_tmpdir, 0777);
}

static inline const char *check_tmp(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", check_tmpdir, name);
    return buf[k];
}

/* Copies a file; 1 on success. */
static inline int check_copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[65536];
    size_t n;
    int ok = a && b;
    while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0) ok = fwrite(buf, 1, n, b) == n;
    if (a) fclose(a);
    if (b) ok &= fclose(b) == 0;
    return ok;
}

static inline void check_tmp_remove(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", check_tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", check_tmpdir);
}

static inline int check_finish(const char *suite) {
    printf("%s: %d passed, %d failed\n", suite, check_count - check_failed, check_failed);
    return check_failed ? 1 : 0;
}

#endif
