/* progress.c: one self-overwriting line (count, rate, ETA) on a terminal; nothing in a pipe. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <unistd.h>

#include "cli.h"

void progress_init(progress *p, const char *what, long total, long base) {
    p->what = what;
    p->total = total;
    p->base = base;
    p->t0 = p->last = cli_now();
    p->tty = isatty(fileno(stderr));
}

static void fmt_time(char *buf, size_t n, double s) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

void progress_update(progress *p, long done) { progress_update_note(p, done, NULL); }

void progress_update_note(progress *p, long done, const char *note) {
    if (!p->tty) return;
    double now = cli_now();
    if (now - p->last < 0.2 && done < p->total) return;
    p->last = now;
    double rate = (done - p->base) / (now - p->t0 > 1e-9 ? now - p->t0 : 1e-9);
    char eta[32] = "?";
    if (rate > 0) fmt_time(eta, sizeof eta, (double)(p->total - done) / rate);
    char line[512];
    snprintf(line, sizeof line, "%s: %ld/%ld  %.1f/s  ETA %s  %s", p->what, done, p->total, rate, eta,
             note ? note : "");
    /* one column short of the width, padded over what the last update left: a wrapped line
     * would make every later \r rewrite the second row */
    const int w = cli_width_of(fileno(stderr)) - 1;
    fprintf(stderr, "\r%-*.*s", w, w, line);
    fflush(stderr);
}

void progress_finish(progress *p) {
    if (p->tty) {
        fprintf(stderr, "\r%*s\r", cli_width_of(fileno(stderr)) - 1, "");
        fflush(stderr);
    }
}

void progress_callback(void *ud, long done, long total) {
    progress *p = ud;
    p->total = total;
    progress_update(p, done);
}
