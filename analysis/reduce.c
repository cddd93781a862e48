/* reduce.c: the inner loops of the metrics. Every sum keeps ANALYSIS_LANES partial sums in a
 * fixed order, so the compiler can vectorise it without -ffast-math and every build, CPU and
 * thread count gives the same bits (the style of core/kernels.c). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "metric.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif
#define LANES 8

static double lanes_total(const double *acc) {
    double s = 0;
    for (int k = 0; k < LANES; k++) s += acc[k];
    return s;
}

CLONES double analysis_rowdot(double *restrict col, const float *restrict a, const float *restrict b, int n) {
    double acc[LANES] = {0};
    int t = 0;
    for (; t + LANES <= n; t += LANES)
        for (int k = 0; k < LANES; k++) {
            double p = (double)a[t + k] * b[t + k];
            col[t + k] += p;
            acc[k] += p;
        }
    for (; t < n; t++) {
        double p = (double)a[t] * b[t];
        col[t] += p;
        acc[t % LANES] += p;
    }
    return lanes_total(acc);
}

CLONES double analysis_dot_fd(const float *restrict a, const double *restrict d, int n, double *sum_a) {
    double acc[LANES] = {0}, sa[LANES] = {0};
    int t = 0;
    for (; t + LANES <= n; t += LANES)
        for (int k = 0; k < LANES; k++) {
            acc[k] += a[t + k] * d[t + k];
            sa[k] += a[t + k];
        }
    for (; t < n; t++) {
        acc[t % LANES] += a[t] * d[t];
        sa[t % LANES] += a[t];
    }
    if (sum_a) *sum_a = lanes_total(sa);
    return lanes_total(acc);
}

/* log(x) for a positive float x, in double, branch-free so that it vectorises: x = m 2^e with
 * m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(z), z = (m-1)/(m+1), |z| < 0.172, by its series
 * to z^21 (truncation < 1e-17 relative). Float subnormals are scaled by 2^24 first. */
static inline double log_pos(float x) {
    int sub = x < 1.17549435e-38f;
    float xs = x * (sub ? 16777216.0f : 1.0f);
    uint32_t u;
    memcpy(&u, &xs, 4);
    int e = (int)((u >> 23) & 0xff) - 127 - 24 * sub;
    uint32_t mu = (u & 0x7fffffu) | 0x3f800000u;
    float mf;
    memcpy(&mf, &mu, 4);
    double m = mf;
    int big = m > 1.4142135623730951;
    m *= big ? 0.5 : 1.0;
    e += big;
    double z = (m - 1.0) / (m + 1.0), z2 = z * z;
    double p = 2.0 / 21;
    p = p * z2 + 2.0 / 19;
    p = p * z2 + 2.0 / 17;
    p = p * z2 + 2.0 / 15;
    p = p * z2 + 2.0 / 13;
    p = p * z2 + 2.0 / 11;
    p = p * z2 + 2.0 / 9;
    p = p * z2 + 2.0 / 7;
    p = p * z2 + 2.0 / 5;
    p = p * z2 + 2.0 / 3;
    p = p * z2 + 2.0;
    return e * 0.69314718055994530942 + z * p;
}

CLONES double analysis_xlogx(const float *restrict a, int n, double *sum) {
    double acc[LANES] = {0}, s[LANES] = {0};
    int t = 0;
    for (; t + LANES <= n; t += LANES)
#pragma GCC unroll 8
        for (int k = 0; k < LANES; k++) {
            float x = a[t + k];
            float xp = x > 0 ? x : 1.0f; /* log 1 = 0: no branch */
            double v = x > 0 ? (double)x : 0.0;
            acc[k] += v * log_pos(xp);
            s[k] += v;
        }
    for (; t < n; t++) {
        float x = a[t];
        if (x > 0) {
            acc[t % LANES] += (double)x * log_pos(x);
            s[t % LANES] += x;
        }
    }
    *sum = lanes_total(s);
    return lanes_total(acc);
}

CLONES double analysis_absdiff(const float *restrict a, const float *restrict b, int n) {
    double acc[LANES] = {0};
    int t = 0;
    for (; t + LANES <= n; t += LANES)
        for (int k = 0; k < LANES; k++) acc[k] += fabs((double)a[t + k] - (double)b[t + k]);
    for (; t < n; t++) acc[t % LANES] += fabs((double)a[t] - (double)b[t]);
    return lanes_total(acc);
}

CLONES void analysis_axpy(double *restrict y, double a, const double *restrict x, int n) {
    for (int t = 0; t < n; t++) y[t] += a * x[t];
}

CLONES double analysis_sum(const float *restrict a, int n) {
    double acc[LANES] = {0};
    int t = 0;
    for (; t + LANES <= n; t += LANES)
        for (int k = 0; k < LANES; k++) acc[k] += a[t + k];
    for (; t < n; t++) acc[t % LANES] += a[t];
    return lanes_total(acc);
}

int analysis_any_negative(const float *a, int n) {
    int neg = 0;
    for (int t = 0; t < n; t++) neg |= a[t] < 0;
    return neg;
}
