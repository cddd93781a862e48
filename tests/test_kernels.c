/* test_kernels.c: the map kernels Refiner's blocks run on (core/kernels.h) against references
 * written from their definitions: the k x k depth-wise convolution of (T, T) maps and its two
 * gradients, the small-K mixing of maps across heads, and a frozen BatchNorm's backward; at
 * sizes that reach every path (blocks of 16 and 64 columns, the moved-back last block, the
 * edges, kernels wider than the map). The convolution's documented order (taps row-major from
 * zero, in float) is checked to the bit, since the mechanism digests rely on it.
 * And the fused attention of the inference forward (kernels_attn_rows) against softmax(s q k^T) v
 * in double, at widths that reach its blocks of 64 and 16 columns, its masked last values and its
 * short last row block; any split of the rows, and recording or not, give the same bits.
 * And kernels_gemm, the products of every linear layer and convolution in training, against
 * op(A) op(B) in double at every transposition, for shapes of one tile, many tiles and a long
 * inner dimension (cut into pieces): the same bits at 1 and 2 threads. The row softmax (an AVX-512 path with a masked last block) against exp in
 * double, with masked (-inf) scores. The depth-wise 3x3 convolution's weight and bias gradients
 * (full blocks of 16 channels on AVX-512, the rest portable) against double sums. */
#include <omp.h>
#include <stdint.h>

#include "../core/kernels.h"
#include "check.h"

static uint32_t seed = 12345;
static float urand(void) {
    seed = seed * 1664525u + 1013904223u;
    return (float)((seed >> 8) / 16777216.0) - 0.5f;
}
static float *rnd(size_t n) {
    float *x = calloc(n ? n : 1, sizeof *x); /* calloc: GCC 12 warns of malloc'd memory that a loop of n = 0 would leave unset */
    for (size_t i = 0; i < n; i++) x[i] = urand();
    return x;
}

/* out[e][i][j] = sum over (u, v) in row-major order of w[e][u][v] in[e][i + u - h][j + v - h],
 * terms outside the map left out, summed in float from zero (the documented order) */
static void conv_ref(float *out, const float *in, const float *w, int E, int T, int k) {
    const int h = k / 2;
    for (int e = 0; e < E; e++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++) {
                float s = 0.0f;
                for (int u = 0; u < k; u++)
                    for (int v = 0; v < k; v++) {
                        const int r = i + u - h, c = j + v - h;
                        if (r >= 0 && r < T && c >= 0 && c < T)
                            s += w[(e * k + u) * k + v] * in[((size_t)e * T + r) * T + c];
                    }
                out[((size_t)e * T + i) * T + j] = s;
            }
}

/* the gradients by the chain rule on the definition: din[r][c] collects w[u][v] dout[i][j] for
 * every (i, j, u, v) with (i + u - h, j + v - h) = (r, c), in (u, v) order; dw in double */
static void conv_grad_ref(float *din, double *dw, const float *dout, const float *in, const float *w, int E, int T,
                          int k) {
    const int h = k / 2;
    for (int e = 0; e < E; e++)
        for (int r = 0; r < T; r++)
            for (int c = 0; c < T; c++) {
                float s = 0.0f;
                for (int u = 0; u < k; u++)
                    for (int v = 0; v < k; v++) {
                        const int i = r - (u - h), j = c - (v - h);
                        if (i >= 0 && i < T && j >= 0 && j < T)
                            s += w[(e * k + u) * k + v] * dout[((size_t)e * T + i) * T + j];
                    }
                din[((size_t)e * T + r) * T + c] = s;
            }
    for (int e = 0; e < E; e++)
        for (int u = 0; u < k; u++)
            for (int v = 0; v < k; v++) {
                double s = 0;
                for (int i = 0; i < T; i++)
                    for (int j = 0; j < T; j++) {
                        const int r = i + u - h, c = j + v - h;
                        if (r >= 0 && r < T && c >= 0 && c < T)
                            s += (double)dout[((size_t)e * T + i) * T + j] * in[((size_t)e * T + r) * T + c];
                    }
                dw[(e * k + u) * k + v] = s;
            }
}

static void check_conv(int E, int T, int k) {
    const size_t n = (size_t)E * T * T;
    float *in = rnd(n), *dout = rnd(n), *w = rnd((size_t)E * k * k);
    float *got = malloc(n * 4), *want = calloc(n, 4), *dw = malloc((size_t)E * k * k * 4);
    double *dw_ref = malloc((size_t)E * k * k * sizeof(double));
    kernels_maps_dwconv(got, in, w, E, T, k);
    conv_ref(want, in, w, E, T, k);
    CHECK(memcmp(got, want, n * 4) == 0, "conv E=%d T=%d k=%d: not the taps in row-major order", E, T, k);
    kernels_maps_dwconv_backward(got, dw, dout, in, w, E, T, k);
    conv_grad_ref(want, dw_ref, dout, in, w, E, T, k);
    CHECK(memcmp(got, want, n * 4) == 0, "conv backward E=%d T=%d k=%d: din not the taps in order", E, T, k);
    double worst = 0;
    for (int i = 0; i < E * k * k; i++) {
        /* against the sum of |terms|: float rows summed in double */
        const double d = fabs(dw[i] - dw_ref[i]) / ((double)T * T * 0.25 + 1e-30);
        worst = d > worst ? d : worst;
    }
    CHECK(worst < 1e-6, "conv backward E=%d T=%d k=%d: dw off by %.3g of the terms' scale", E, T, k, worst);
    free(in), free(dout), free(w), free(got), free(want), free(dw), free(dw_ref);
}

/* C (M, N) = alpha A B (+ C), in double */
static void check_mix(int M, int K, size_t N, int trans, int accumulate) {
    float *A = rnd((size_t)M * K), *B = rnd((size_t)K * N), *C = rnd((size_t)M * N), *C0 = malloc((size_t)M * N * 4);
    memcpy(C0, C, (size_t)M * N * 4);
    const size_t am = trans ? 1 : (size_t)K, ak = trans ? (size_t)M : 1;
    const float alpha = 0.75f;
    kernels_mix_rows(C, A, am, ak, B, M, K, N, alpha, accumulate);
    double worst = 0;
    for (int m = 0; m < M; m++)
        for (size_t j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)A[m * am + k * ak] * B[k * N + j];
            const double want = alpha * s + (accumulate ? C0[m * N + j] : 0.0);
            const double d = fabs(C[m * N + j] - want) / (K + 1.0);
            worst = d > worst ? d : worst;
        }
    CHECK(worst < 1e-6, "mix M=%d K=%d N=%zu trans=%d acc=%d: off by %.3g", M, K, N, trans, accumulate, worst);
    free(A), free(B), free(C), free(C0);
}

/* kernels_gemm: C = alpha op(A) op(B) + beta C against double sums, and the same bits at 1 and 2
 * threads. */
static void check_gemm(int M, int N, int K, int ta, int tb, float beta) {
    const int lda = ta ? M : K, ldb = tb ? K : N;
    float *A = rnd((size_t)M * K), *B = rnd((size_t)K * N), *C0 = rnd((size_t)M * N);
    float *C[2];
    const float alpha = 0.5f;
    for (int t = 0; t < 2; t++) {
        C[t] = malloc((size_t)M * N * sizeof(float));
        memcpy(C[t], C0, (size_t)M * N * sizeof(float));
        omp_set_num_threads(t + 1);
        kernels_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C[t], N);
    }
    CHECK(memcmp(C[0], C[1], (size_t)M * N * sizeof(float)) == 0, "gemm %dx%dx%d t%d%d: other bits at 2 threads",
          M, N, K, ta, tb);
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                     (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
            const double want = alpha * s + (double)beta * C0[(size_t)i * N + j];
            const double d = fabs(C[0][(size_t)i * N + j] - want) / (K + 1.0);
            worst = d > worst ? d : worst;
        }
    CHECK(worst < 1e-6, "gemm %dx%dx%d t%d%d beta %g: off by %.3g", M, N, K, ta, tb, (double)beta, worst);
    free(A), free(B), free(C0), free(C[0]), free(C[1]);
}

/* kernels_softmax_rows against exp in double: rows of n columns, every fifth score masked
 * (-inf, a weight of exactly 0), the others spread wide. */
static void check_softmax(int d, float spread) {
    const int n = 3;
    float *x = rnd((size_t)n * d);
    for (int i = 0; i < n * d; i++) x[i] = i % 5 == 3 ? -INFINITY : x[i] * spread;
    double *want = malloc((size_t)n * d * sizeof(double));
    for (int r = 0; r < n; r++) {
        double m = -INFINITY, s = 0;
        for (int i = 0; i < d; i++) m = x[r * d + i] > m ? x[r * d + i] : m;
        for (int i = 0; i < d; i++) {
            want[r * d + i] = exp((double)x[r * d + i] - m);
            s += want[r * d + i];
        }
        for (int i = 0; i < d; i++) want[r * d + i] /= s;
    }
    kernels_softmax_rows(x, n, d);
    double worst = 0;
    int zeros = 1;
    for (int i = 0; i < n * d; i++) {
        const double e = fabs(x[i] - want[i]);
        worst = e > worst ? e : worst;
        if (want[i] == 0 && x[i] != 0.0f) zeros = 0;
    }
    CHECK(worst < 2e-6, "softmax d=%d spread %g: off by %.3g", d, (double)spread, worst);
    CHECK(zeros, "softmax d=%d: a masked score got a weight", d);
    free(x), free(want);
}

/* The LayerNorm backward takes 4 rows together where d <= 256 (their sums' chains overlap): each
 * row's dx must have the bits of the row alone (a call with n = 1 takes the row-at-a-time path),
 * within one block of rows dw and db the bits of the rows added one after another, and dw, db
 * the sums of dy xhat and dy (double reference; xhat from a double mean and variance). */
static void check_ln_backward(int n, int d) {
    float *x = rnd((size_t)n * d), *dy = rnd((size_t)n * d), *w = rnd((size_t)d);
    float *dx = calloc((size_t)n * d, sizeof(float)), *dx1 = calloc((size_t)n * d, sizeof(float));
    float *dw = calloc((size_t)d, sizeof(float)), *db = calloc((size_t)d, sizeof(float));
    float *dw1 = calloc((size_t)d, sizeof(float)), *db1 = calloc((size_t)d, sizeof(float));
    float *scratch = malloc((size_t)2 * d * (n / KERNELS_LN_BLOCK + 1) * sizeof(float));
    for (int i = 0; i < n * d; i++) x[i] = 3.0f * x[i] + 0.5f;
    kernels_layernorm_backward(dx, dw, db, dy, x, w, scratch, n, d, 1e-6f);
    for (int r = 0; r < n; r++)
        kernels_layernorm_backward(dx1 + (size_t)r * d, dw1, db1, dy + (size_t)r * d, x + (size_t)r * d, w, scratch, 1,
                                   d, 1e-6f);
    CHECK(memcmp(dx, dx1, (size_t)n * d * sizeof(float)) == 0, "layernorm backward n=%d d=%d: dx of a row in a group of rows has other bits than alone", n, d);
    if (n <= KERNELS_LN_BLOCK) /* one block: its partial sums from 0, row after row, as the rows alone add them */
        CHECK(memcmp(dw, dw1, (size_t)d * sizeof(float)) == 0 && memcmp(db, db1, (size_t)d * sizeof(float)) == 0,
              "layernorm backward n=%d d=%d: dw/db of grouped rows have other bits than row after row", n, d);
    double worst = 0, scale = 0;
    for (int i = 0; i < d; i++) {
        double sw = 0, sb = 0;
        for (int r = 0; r < n; r++) {
            const float *xr = x + (size_t)r * d;
            double m = 0, v = 0;
            for (int j = 0; j < d; j++) m += xr[j];
            m /= d;
            for (int j = 0; j < d; j++) v += (xr[j] - m) * (xr[j] - m);
            const double xh = (xr[i] - m) / sqrt(v / d + 1e-6);
            sw += dy[(size_t)r * d + i] * xh;
            sb += dy[(size_t)r * d + i];
        }
        worst = fmax(worst, fmax(fabs(dw[i] - sw), fabs(db[i] - sb)));
        scale = fmax(scale, fmax(fabs(sw), fabs(sb)));
    }
    CHECK(worst <= 1e-5 * scale + 1e-6, "layernorm backward n=%d d=%d: dw/db off by %.3g (largest %.3g)", n, d, worst, scale);
    free(x), free(dy), free(w), free(dx), free(dx1), free(dw), free(db), free(dw1), free(db1), free(scratch);
}

/* The row softmax's AVX-512 path against the portable loops, bit for bit (the training results
 * rest on their rounding), with NaN, +inf, all-masked rows and gaps beyond exp's range. */
static void check_softmax_bits(int d) {
    const int n = 19; /* two groups of 8 rows (rows 1-5 special) and 3 alone (softmax_rows16) */
    float *x = rnd((size_t)n * d), *y = malloc((size_t)n * d * sizeof(float));
    for (int i = 0; i < n * d; i++) {
        const int r = i / d;
        x[i] *= r == 1 ? 300.0f : 8.0f;
        if (r == 2 && i % 7 == 0) x[i] = NAN;
        if (r == 3 && i % 9 == 0) x[i] = INFINITY;
        if (r == 4 || (r == 5 && i % 3)) x[i] = -INFINITY;
    }
    memcpy(y, x, (size_t)n * d * sizeof(float));
    kernels_softmax_rows(x, n, d);
    kernels_force_portable(1);
    kernels_softmax_rows(y, n, d);
    kernels_force_portable(0);
    CHECK(memcmp(x, y, (size_t)n * d * sizeof(float)) == 0, "softmax d=%d: other bits than the portable loops", d);
    free(x), free(y);
}

/* kernels_dwconv3_backward's weight and bias gradients (NHWC maps, pad 1) against double sums. */
static void check_dwconv_grad(int n, int gh, int gw, int C) {
    const size_t px = (size_t)n * gh * gw;
    float *dout = rnd(px * C), *in = rnd(px * C), *w = rnd((size_t)C * 9), *dw = rnd((size_t)C * 9), *db = rnd(C);
    float *dw0 = malloc((size_t)C * 9 * sizeof(float)), *db0 = malloc((size_t)C * sizeof(float));
    memcpy(dw0, dw, (size_t)C * 9 * sizeof(float));
    memcpy(db0, db, (size_t)C * sizeof(float));
    kernels_dwconv3_backward(NULL, dw, db, dout, in, w, n, gh, gw, C);
    double worst = 0;
    for (int ch = 0; ch < C; ch++) {
        double sb = 0, st[9] = {0};
        for (int b = 0; b < n; b++)
            for (int y = 0; y < gh; y++)
                for (int x = 0; x < gw; x++) {
                    const double g = dout[(((size_t)b * gh + y) * gw + x) * C + ch];
                    sb += g;
                    for (int t = 0; t < 9; t++) {
                        const int iy = y + t / 3 - 1, ix = x + t % 3 - 1;
                        if (iy >= 0 && iy < gh && ix >= 0 && ix < gw)
                            st[t] += g * in[(((size_t)b * gh + iy) * gw + ix) * C + ch];
                    }
                }
        for (int t = 0; t < 9; t++) {
            const double e = fabs(dw[ch * 9 + t] - (dw0[ch * 9 + t] + st[t]));
            worst = e > worst ? e : worst;
        }
        const double e = fabs(db[ch] - (db0[ch] + sb));
        worst = e > worst ? e : worst;
    }
    CHECK(worst < 1e-5, "dwconv3 gradient n=%d %dx%d C=%d: off by %.3g", n, gh, gw, C, worst);
    /* and the bits of the portable blocks (AVX-512 runs the full blocks of 16 channels) */
    float *pw = malloc((size_t)C * 9 * sizeof(float)), *pb = malloc((size_t)C * sizeof(float));
    memcpy(pw, dw0, (size_t)C * 9 * sizeof(float));
    memcpy(pb, db0, (size_t)C * sizeof(float));
    kernels_force_portable(1);
    kernels_dwconv3_backward(NULL, pw, pb, dout, in, w, n, gh, gw, C);
    kernels_force_portable(0);
    CHECK(!memcmp(pw, dw, (size_t)C * 9 * sizeof(float)) && !memcmp(pb, db, (size_t)C * sizeof(float)),
          "dwconv3 gradient C=%d: other bits than the portable blocks", C);
    free(pw), free(pb);
    free(dout), free(in), free(w), free(dw), free(db), free(dw0), free(db0);
}

/* kernels_gemm_pair: the bits of the two products one after the other, at 1 and 2 threads; one
 * of each pair a single tile (a small layer's dW), the other many tiles or a split product. */
static void check_gemm_pair(int M, int N, int K, int M2, int N2, int K2) {
    float *A = rnd((size_t)K * M), *B = rnd((size_t)K * N), *A2 = rnd((size_t)M2 * K2), *B2 = rnd((size_t)K2 * N2);
    float *C0 = rnd((size_t)M * N), *D0 = rnd((size_t)M2 * N2);
    float *C = malloc((size_t)M * N * 4), *D = malloc((size_t)M2 * N2 * 4), *Cw = malloc((size_t)M * N * 4),
          *Dw = malloc((size_t)M2 * N2 * 4);
    memcpy(Cw, C0, (size_t)M * N * 4);
    memcpy(Dw, D0, (size_t)M2 * N2 * 4);
    kernels_gemm(1, 0, M, N, K, 1.0f, A, M, B, N, 1.0f, Cw, N);
    kernels_gemm(0, 0, M2, N2, K2, 0.5f, A2, K2, B2, N2, 0.0f, Dw, N2);
    for (int t = 1; t <= 2; t++) {
        memcpy(C, C0, (size_t)M * N * 4);
        memcpy(D, D0, (size_t)M2 * N2 * 4);
        omp_set_num_threads(t);
        kernels_gemm_pair(1, 0, M, N, K, 1.0f, A, M, B, N, 1.0f, C, N, 0, 0, M2, N2, K2, 0.5f, A2, K2, B2, N2, 0.0f, D, N2);
        CHECK(!memcmp(C, Cw, (size_t)M * N * 4) && !memcmp(D, Dw, (size_t)M2 * N2 * 4),
              "gemm pair %dx%dx%d + %dx%dx%d at %d threads: other bits than one after the other", M, N, K, M2, N2, K2, t);
    }
    free(A), free(B), free(A2), free(B2), free(C0), free(D0), free(C), free(D), free(Cw), free(Dw);
}

static void check_bn(size_t n, float a) {
    float *dy = rnd(n), *x = rnd(n), *dy0 = malloc(n * 4), gw, gb;
    memcpy(dy0, dy, n * 4);
    const float mean = 0.3f, inv = 1.7f;
    kernels_bn_backward(dy, x, mean, inv, a, n, &gw, &gb);
    double w = 0, b = 0, worst = 0;
    for (size_t i = 0; i < n; i++) {
        w += (double)dy0[i] * ((double)x[i] - mean) * inv;
        b += dy0[i];
        worst = fmax(worst, fabs(dy[i] - (double)dy0[i] * a));
    }
    CHECK(fabs(gw - w) < 1e-5 * (n + 1.0) && fabs(gb - b) < 1e-5 * (n + 1.0), "bn n=%zu: (%g, %g) want (%g, %g)", n,
          gw, gb, w, b);
    CHECK(worst <= 1e-7, "bn n=%zu: input gradient off by %g", n, worst);
    free(dy), free(x), free(dy0);
}

/* One problem (T queries and keys, widths dq and dv, rows of q, k, v strided as in a qkv buffer)
 * against the equations in double; then the same rows in three uneven pieces, and without any
 * record, must give the same bits. */
static void check_attn(int T, int dq, int dv, float gain) {
    const int ld = 3 * (dq > dv ? dq : dv) + 5;
    float *q = rnd((size_t)T * ld), *k = rnd((size_t)T * ld), *v = rnd((size_t)T * ld);
    const float scale = 3.0f * gain / sqrtf((float)dq); /* peaked rows as well as flat ones */
    float *kT = malloc(kernels_attn_kt_floats(T, dq) * sizeof(float));
    kernels_attn_pack_k(kT, k, ld, T, dq);
    const size_t TT = (size_t)T * T;
    float *o = calloc((size_t)T * (dv + 3), 4), *A = malloc(TT * 4), *S = malloc(TT * 4), *keep = malloc(TT * 4);
    uint16_t *a16 = malloc(TT * 2), *want16 = malloc(TT * 2);
    kernels_attn a = {.q = q, .kT = kT, .v = v, .ldq = ld, .ldv = ld, .ldo = dv + 3, .Tq = T, .Tk = T, .dq = dq,
                      .dv = dv, .scale = scale, .o = o, .scores = S, .keep = keep, .A = A, .a16 = a16};
    if (!kernels_attn_available()) {
        CHECK(kernels_attn_rows(&a, 0, T) == 0, "no AVX-512F, yet the fused kernel ran");
        free(q), free(k), free(v), free(kT), free(o), free(A), free(S), free(keep), free(a16), free(want16);
        return;
    }
    CHECK(kernels_attn_rows(&a, 0, T), "T=%d: the kernel refused", T);
    double es = 0, ea = 0, eo = 0;
    int zeros = 1; /* a weight whose score is more than 88 below its row's largest is exactly 0 */
    double *p = malloc((size_t)T * sizeof(double));
    for (int i = 0; i < T; i++) {
        double m = -INFINITY, z = 0;
        for (int j = 0; j < T; j++) {
            double dot = 0, mag = 0;
            for (int d = 0; d < dq; d++) {
                dot += (double)q[(size_t)i * ld + d] * k[(size_t)j * ld + d];
                mag += fabs((double)q[(size_t)i * ld + d] * k[(size_t)j * ld + d]);
            }
            p[j] = scale * dot;
            es = fmax(es, fabs(S[(size_t)i * T + j] - p[j]) / (scale * mag + 1e-30));
            m = fmax(m, p[j]);
        }
        for (int j = 0; j < T; j++) zeros &= p[j] - m > -88.0 || A[(size_t)i * T + j] == 0.0f;
        for (int j = 0; j < T; j++) z += p[j] = exp(p[j] - m);
        for (int j = 0; j < T; j++) p[j] /= z, ea = fmax(ea, fabs(A[(size_t)i * T + j] - p[j]));
        for (int c = 0; c < dv; c++) {
            double y = 0;
            for (int j = 0; j < T; j++) y += p[j] * v[(size_t)j * ld + c];
            eo = fmax(eo, fabs(o[(size_t)i * (dv + 3) + c] - y));
        }
        for (int c = dv; c < dv + 3; c++) CHECK(o[(size_t)i * (dv + 3) + c] == 0.0f, "T=%d dv=%d: wrote past dv", T, dv);
    }
    /* with gain g the scores' own float32 rounding (2e-7 of magnitudes up to ~g) moves the map by
     * up to ~g 1e-7 */
    const double tol = 1e-6 * (gain > 1 ? 0.5 * gain : 1.0);
    CHECK(es < 1e-6 && ea < tol && eo < 2 * tol && zeros,
          "attn T=%d dq=%d dv=%d gain %g: scores %.1e (of their magnitude), map %.1e, out %.1e, zeros %d", T, dq, dv,
          gain, es, ea, eo, zeros);
    kernels_f32_to_f16_array(want16, A, TT);
    CHECK(memcmp(S, keep, TT * 4) == 0 && memcmp(a16, want16, TT * 2) == 0, "T=%d: keep or binary16 record differs", T);
    /* three uneven pieces of rows; then no records at all */
    float *o2 = calloc((size_t)T * (dv + 3), 4), *A2 = malloc(TT * 4), *S2 = malloc(TT * 4);
    uint16_t *b16 = malloc(TT * 2);
    kernels_attn b = a;
    b.o = o2, b.A = A2, b.scores = S2, b.keep = NULL, b.a16 = b16;
    const int cut1 = T / 3, cut2 = T - T / 5;
    CHECK(kernels_attn_rows(&b, 0, cut1) && kernels_attn_rows(&b, cut1, cut2) && kernels_attn_rows(&b, cut2, T),
          "T=%d: pieces refused", T);
    CHECK(memcmp(o, o2, (size_t)T * (dv + 3) * 4) == 0 && memcmp(A, A2, TT * 4) == 0 && memcmp(S, S2, TT * 4) == 0 &&
              memcmp(a16, b16, TT * 2) == 0, "T=%d dq=%d dv=%d: rows in pieces give other bits", T, dq, dv);
    memset(o2, 0, (size_t)T * (dv + 3) * 4);
    b.A = NULL, b.scores = NULL, b.a16 = NULL;
    CHECK(kernels_attn_rows(&b, 0, T) && memcmp(o, o2, (size_t)T * (dv + 3) * 4) == 0,
          "T=%d dq=%d dv=%d: the output depends on what is recorded", T, dq, dv);
    free(p), free(o2), free(A2), free(S2), free(b16);
    free(q), free(k), free(v), free(kT), free(o), free(A), free(S), free(keep), free(a16), free(want16);
}

/* A NaN in one query makes its row of the map and of the output NaN, as softmax does on
 * OpenBLAS's path, and leaves the other rows alone. */
static void check_attn_nan(void) {
    const int T = 37, d = 16;
    float *q = rnd((size_t)T * d), *k = rnd((size_t)T * d), *v = rnd((size_t)T * d);
    q[5 * d + 3] = NAN;
    float *kT = malloc(kernels_attn_kt_floats(T, d) * sizeof(float)), *o = malloc((size_t)T * d * 4),
          *A = malloc((size_t)T * T * 4);
    kernels_attn_pack_k(kT, k, d, T, d);
    kernels_attn a = {.q = q, .kT = kT, .v = v, .ldq = d, .ldv = d, .ldo = d, .Tq = T, .Tk = T, .dq = d, .dv = d,
                      .scale = 0.25f, .o = o, .A = A};
    if (kernels_attn_rows(&a, 0, T)) {
        int nan_row = 1, finite_rest = 1;
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++) {
                const float x = A[(size_t)i * T + j], y = j < d ? o[(size_t)i * d + j] : 0.0f;
                if (i == 5) nan_row &= isnan(x) && (j >= d || isnan(y));
                else finite_rest &= isfinite(x) && isfinite(y);
            }
        CHECK(nan_row && finite_rest, "a NaN query: its row NaN %d, the others finite %d", nan_row, finite_rest);
    }
    free(q), free(k), free(v), free(kT), free(o), free(A);
}

int main(void) {
    for (int k = 1; k <= 9; k += 2)
        for (int T = 1; T <= 70; T += (T < 20 ? 1 : 7)) check_conv(2, T, k);
    check_conv(3, 197, 3); /* a ViT-B/16 map with its class token */
    const size_t Ns[] = {1, 15, 16, 17, 63, 64, 65, 80, 129, 4225};
    for (size_t i = 0; i < sizeof Ns / sizeof *Ns; i++)
        for (int t = 0; t < 2; t++)
            for (int acc = 0; acc < 2; acc++) {
                check_mix(4, 12, Ns[i], t, acc);
                check_mix(12, 4, Ns[i], t, acc);
                check_mix(1, 1, Ns[i], t, acc);
            }
    const int gs[][3] = {{1, 1, 1}, {5, 7, 3}, {96, 48, 1024}, {128, 256, 64}, {129, 33, 100}, {40, 600, 17},
                         {300, 200, 2100}, {17, 31, 5000}};
    const int lnd[] = {1, 5, 16, 64, 100, 256, 257, 300};
    for (size_t i = 0; i < sizeof lnd / sizeof *lnd; i++) {
        check_ln_backward(67, lnd[i]);
        check_ln_backward(63, lnd[i]);
        check_ln_backward(3, lnd[i]);
    }
    for (int d = 1; d <= 130; d += (d < 34 ? 1 : 13)) {
        check_softmax(d, 1.0f);
        check_softmax(d, 200.0f); /* score gaps beyond exp's range: weights of exactly 0 */
        check_softmax_bits(d);
    }
    const int dwc[] = {1, 15, 16, 24, 48, 64};
    for (size_t i = 0; i < sizeof dwc / sizeof *dwc; i++) {
        check_dwconv_grad(2, 5, 7, dwc[i]);
        check_dwconv_grad(1, 1, 1, dwc[i]);
    }
    const int threads = omp_get_max_threads();
    for (size_t i = 0; i < sizeof gs / sizeof *gs; i++)
        for (int t = 0; t < 4; t++) check_gemm(gs[i][0], gs[i][1], gs[i][2], t & 1, t >> 1, t == 3 ? 1.0f : 0.0f);
    check_gemm_pair(96, 48, 1024, 1024, 48, 96);  /* a stage-1 dW beside its dx */
    check_gemm_pair(64, 32, 3000, 3000, 32, 64);  /* the dW is split: one after the other */
    check_gemm_pair(7, 5, 3, 300, 130, 17);
    omp_set_num_threads(threads);
    for (size_t n = 1; n < 70; n += 3) check_bn(n, n % 2 ? 0.5f : 1.0f);
    check_bn(4225, -2.0f);
    const int Ts[] = {1, 2, 5, 16, 17, 63, 64, 65, 129, 197}, dqs[] = {1, 3, 16, 64, 72}, dvs[] = {1, 16, 24, 64, 80, 130};
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++)
        for (size_t a = 0; a < sizeof dqs / sizeof *dqs; a++) check_attn(Ts[i], dqs[a], dvs[(i + a) % 6], 1.0f);
    for (size_t b = 0; b < sizeof dvs / sizeof *dvs; b++) check_attn(70, 64, dvs[b], 1.0f);
    check_attn(70, 64, 64, 2000.0f); /* score gaps far beyond exp's range: weights of exactly 0 */
    check_attn_nan();
    printf("fused attention: %s\n", kernels_attn_available() ? "checked (AVX-512F)" : "not on this CPU (no AVX-512F)");
    return check_finish("kernels");
}
