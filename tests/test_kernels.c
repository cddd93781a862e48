/* test_kernels.c: the map kernels Refiner's blocks run on (core/kernels.h) against references
 * written from their definitions: the k x k depth-wise convolution of (T, T) maps and its two
 * gradients, the small-K mixing of maps across heads, and a frozen BatchNorm's backward; at
 * sizes that reach every path (blocks of 16 and 64 columns, the moved-back last block, the
 * edges, kernels wider than the map). The convolution's documented order (taps row-major from
 * zero, in float) is checked to the bit, since the mechanism digests rely on it. */
#include <stdint.h>

#include "../core/kernels.h"
#include "check.h"

static uint32_t seed = 12345;
static float urand(void) {
    seed = seed * 1664525u + 1013904223u;
    return (float)((seed >> 8) / 16777216.0) - 0.5f;
}
static float *rnd(size_t n) {
    float *x = malloc(n * sizeof *x);
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
    float *got = malloc(n * 4), *want = malloc(n * 4), *dw = malloc((size_t)E * k * k * 4);
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
    for (size_t n = 1; n < 70; n += 3) check_bn(n, n % 2 ? 0.5f : 1.0f);
    check_bn(4225, -2.0f);
    return check_finish("kernels");
}
