/* rows.c: the row kernels of training on one thread: the row softmax (kernels_softmax_rows) on
 * (n, n) maps and the LayerNorm backward (kernels_layernorm_backward) on 4160 rows (a demo
 * model's batch of 64 x 65 tokens) of width d. Prints one line per shape: the best of 15 timed
 * repetitions in ns per element, and a 64-bit FNV-1a hash of every output's bits (two builds
 * print the same hash exactly when every output has the same bits). Built against one build's core library, so that bench/rows_ab.sh
 * can time two builds in alternating rounds; not built by meson:
 *
 *     gcc -O2 -fopenmp -Icore bench/rows.c build/libattnscope_core.a -lopenblas -lm -o /tmp/rows
 *     OMP_NUM_THREADS=1 /tmp/rows
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* FNV-1a over the bits of n floats, continuing from h */
static uint64_t fnv(uint64_t h, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        for (int b = 0; b < 4; b++) h = (h ^ ((u >> (8 * b)) & 0xffu)) * 1099511628211u;
    }
    return h;
}
#define FNV0 14695981039346656037u

static unsigned rng = 12345;
static float uniform(void) { /* [0, 1), the same stream on every build */
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 16777216.0f;
}

static void softmax(int n) {
    enum { MAPS = 256 };
    const size_t N = (size_t)MAPS * n * n;
    float *src = malloc(N * sizeof(float)), *x = malloc(N * sizeof(float));
    for (size_t i = 0; i < N; i++) src[i] = 8.0f * uniform() - 4.0f;
    double best = 1e30;
    for (int rep = 0; rep < 15; rep++) {
        memcpy(x, src, N * sizeof(float));
        const double t0 = now();
        for (int m = 0; m < MAPS; m++) kernels_softmax_rows(x + (size_t)m * n * n, n, n);
        const double t = now() - t0;
        best = t < best ? t : best;
    }
    printf("softmax (%d, %d) x %d: %.3f ns per element (bits %016llx)\n", n, n, MAPS, best / (double)N * 1e9,
           (unsigned long long)fnv(FNV0, x, N));
    free(src), free(x);
}

static void layernorm_backward(int d) {
    const int n = 4160;
    const size_t N = (size_t)n * d;
    float *x = malloc(N * sizeof(float)), *dy = malloc(N * sizeof(float)), *dx = malloc(N * sizeof(float));
    float *w = malloc((size_t)d * sizeof(float)), *dw = malloc((size_t)d * sizeof(float));
    float *db = malloc((size_t)d * sizeof(float));
    float *scratch = malloc((size_t)2 * d * (n / KERNELS_LN_BLOCK + 1) * sizeof(float));
    for (size_t i = 0; i < N; i++) x[i] = uniform(), dy[i] = uniform() - 0.5f;
    for (int i = 0; i < d; i++) w[i] = 1.0f + 0.01f * (float)i;
    double best = 1e30;
    for (int rep = 0; rep < 15; rep++) {
        memset(dx, 0, N * sizeof(float));
        memset(dw, 0, (size_t)d * sizeof(float));
        memset(db, 0, (size_t)d * sizeof(float));
        const double t0 = now();
        kernels_layernorm_backward(dx, dw, db, dy, x, w, scratch, n, d, 1e-6f);
        const double t = now() - t0;
        best = t < best ? t : best;
    }
    const uint64_t h = fnv(fnv(fnv(FNV0, dx, N), dw, (size_t)d), db, (size_t)d);
    printf("layernorm backward (%d, %d): %.3f ns per element (bits %016llx)\n", n, d, best / (double)N * 1e9,
           (unsigned long long)h);
    free(x), free(dy), free(dx), free(w), free(dw), free(db), free(scratch);
}

int main(void) {
    const int maps[] = {16, 17, 49, 65, 197};
    for (size_t i = 0; i < sizeof maps / sizeof *maps; i++) softmax(maps[i]);
    const int widths[] = {64, 128, 192, 256, 384, 768};
    for (size_t i = 0; i < sizeof widths / sizeof *widths; i++) layernorm_backward(widths[i]);
    return 0;
}
