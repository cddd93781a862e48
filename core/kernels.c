/* kernels.c: row and elementwise kernels. Loops are written so GCC vectorises them at -O2/-O3
 * without -ffast-math; OpenMP spreads rows over threads. */
#include "kernels.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KERNELS_X86 1
#endif

/* Row kernels are compiled for AVX-512, AVX2 and the baseline, picked at load time (GCC
 * function multi-versioning): the build stays portable while this CPU runs 16-wide. Reductions
 * keep LANES partial results in a fixed order, so every version (and every thread count) gives
 * bit-identical results; no -ffast-math reassociation is needed to vectorise them. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define KERNEL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KERNEL_CLONES
#endif
#define LANES 16
#define LN_G 4 /* rows of the LayerNorm backward that go together (ln_chains has 4 spelled out) */
#define LN_STRIP 256 /* and the columns of its vector loops */

static inline float lanes_sum(const float *x, int d) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= d; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += x[i + j];
    float s = 0.0f;
    for (int j = 0; j < LANES; j++) s += acc[j];
    for (; i < d; i++) s += x[i];
    return s;
}

static inline float lanes_max(const float *x, int d) {
    float acc[LANES];
    for (int j = 0; j < LANES; j++) acc[j] = -INFINITY;
    int i = 0;
    for (; i + LANES <= d; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    float m = -INFINITY;
    for (int j = 0; j < LANES; j++) m = acc[j] > m ? acc[j] : m;
    for (; i < d; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* sum of (x - mean)^2, lanes as above */
static inline float lanes_sqdev(const float *x, float mean, int d) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= d; i += LANES)
        for (int j = 0; j < LANES; j++) {
            float t = x[i + j] - mean;
            acc[j] += t * t;
        }
    float s = 0.0f;
    for (int j = 0; j < LANES; j++) s += acc[j];
    for (; i < d; i++) s += (x[i] - mean) * (x[i] - mean);
    return s;
}

/* A row's mean and 1 / sqrt(variance + eps), for the LayerNorm forward and backward: two passes
 * (mean, then centred variance) as PyTorch does; one-pass E[x^2]-E[x]^2 loses digits when the
 * mean is large against the spread. */
static inline void ln_stats(const float *x, int d, float eps, float *mean, float *rstd) {
    *mean = lanes_sum(x, d) / (float)d;
    *rstd = 1.0f / sqrtf(lanes_sqdev(x, *mean, d) / (float)d + eps);
}

/* The LayerNorm backward's input gradient of one row, given its sums a (of g = dy w) and b (of
 * g xhat): dx += rstd (g - a / d - xhat b / d). */
static inline void ln_dx_row(float *dr, const float *xr, const float *gr, const float *w, int d, float mean,
                             float rstd, float a, float b) {
    const float ma = a / (float)d, mb = b / (float)d;
    for (int i = 0; i < d; i++) dr[i] += rstd * (gr[i] * w[i] - ma - (xr[i] - mean) * rstd * mb);
}

KERNEL_CLONES static void layernorm_row(float *o, const float *x, const float *w, const float *b,
                                        int d, float eps) {
    float mean, rstd;
    ln_stats(x, d, eps, &mean, &rstd);
    for (int i = 0; i < d; i++) o[i] = (x[i] - mean) * rstd * w[i] + b[i];
}

void kernels_layernorm(float *out, const float *x, const float *w, const float *b, int n, int d,
                       float eps) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++)
        layernorm_row(out + (size_t)r * d, x + (size_t)r * d, w, b, d, eps);
}

/* Rational minimax approximation of erf on [-4, 4] (the form Eigen uses for float): erf is
 * +-1 to float precision beyond that. Why not erff: glibc's is scalar with branches, and GELU
 * runs on depth * tokens * mlp_hidden values per image (7.3 M for ViT-B), where it cost a fifth
 * of the forward pass; this form vectorises and stays within 4e-7 of the true erf
 * (tests/test_loaders.c checks it over [-6, 6]). */
static inline float erf_inline(float x) {
    x = x < -4.0f ? -4.0f : (x > 4.0f ? 4.0f : x);
    float x2 = x * x;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 + -2.10102402082508e-06f;
    p = p * x2 + -5.69250639462346e-05f;
    p = p * x2 + -7.34990630326855e-04f;
    p = p * x2 + -2.95459980854025e-03f;
    p = p * x2 + -1.60960333262415e-02f;
    p = p * x;
    float q = -1.45660718464996e-05f;
    q = q * x2 + -2.13374055278905e-04f;
    q = q * x2 + -1.68282697438203e-03f;
    q = q * x2 + -7.37332916720468e-03f;
    q = q * x2 + -1.42647390514189e-02f;
    return p / q;
}

float kernels_erf(float x) { return erf_inline(x); }

/* exp for float, branch-free so that loops over it vectorise (glibc's vector expf is only
 * declared under -ffast-math, which this project does not use). Range reduction
 * x = n ln2 + r with |r| <= ln2/2 (ln2 split in two for exactness), Cephes' polynomial for
 * e^r, and 2^n built in the exponent bits. Within 2 ulp of expf over [-87, 88]; inputs below
 * -87.3 give 0 (they underflow float anyway), above 88.7 give +inf-like large values. */
static inline float exp_inline(float x0) {
    float x = x0 < -87.3f ? -87.3f : (x0 > 88.7f ? 88.7f : x0);
    /* n = round(x / ln2) by the 1.5 * 2^23 trick: exact, and vectorises unlike rintf */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f; /* Cephes' split of ln 2: the first part is exact */
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    /* a NaN input (n NaN: converting it to int is undefined) takes 2^0; p is NaN and the result
     * p * scale is p's NaN, as with any scale */
    int32_t bits = ((int32_t)(n == n ? n : 0.0f) + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    /* a masked (-inf) score must weigh exactly 0, as in PyTorch */
    return x0 < -87.3f ? 0.0f : p * scale;
}

float kernels_exp(float x) { return exp_inline(x); }

KERNEL_CLONES static void gelu_block(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + erf_inline(v * 0.70710678118654752f));
    }
}

/* y = f(y, x) elementwise in blocks of 4096 spread over the threads; f is a block kernel (its
 * clones vectorise the inline erf and exp). */
static void blocked(void (*f)(float *, const float *, size_t), float *y, const float *x, size_t n) {
    const size_t block = 4096;
    const long long nb = (long long)((n + block - 1) / block);
#pragma omp parallel for schedule(static)
    for (long long k = 0; k < nb; k++) {
        size_t i = (size_t)k * block;
        f(y + i, x + i, n - i < block ? n - i : block);
    }
}

void kernels_gelu_to(float *y, const float *x, size_t n) { blocked(gelu_block, y, x, n); }

void kernels_gelu(float *x, size_t n) { kernels_gelu_to(x, x, n); }

/* dh *= GELU'(x) = 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi). */
KERNEL_CLONES static void gelu_backward_block(float *dh, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float v = x[i];
        const float cdf = 0.5f * (1.0f + erf_inline(v * 0.70710678118654752f));
        const float pdf = 0.39894228040143268f * exp_inline(-0.5f * v * v);
        dh[i] *= cdf + v * pdf;
    }
}

void kernels_gelu_backward(float *dh, const float *x, size_t n) { blocked(gelu_backward_block, dh, x, n); }

/* sum of a[i] * b[i], lanes as above */
static inline float lanes_dot(const float *a, const float *b, int d) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= d; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += a[i + j] * b[i + j];
    float s = 0.0f;
    for (int j = 0; j < LANES; j++) s += acc[j];
    for (; i < d; i++) s += a[i] * b[i];
    return s;
}

/* a[q] += tg[q][i], b[q] += tb[q][i] for i = 0, 1, ..., n - 1 and the 4 rows q: 8 independent
 * chains of additions, interleaved, in registers (locals: a and b might alias the strips). */
static void ln_chains(float *a, float *b, float (*tg)[LN_STRIP], float (*tb)[LN_STRIP], int n) {
    float a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], b0 = b[0], b1 = b[1], b2 = b[2], b3 = b[3];
    for (int i = 0; i < n; i++) {
        a0 += tg[0][i], a1 += tg[1][i], a2 += tg[2][i], a3 += tg[3][i];
        b0 += tb[0][i], b1 += tb[1][i], b2 += tb[2][i], b3 += tb[3][i];
#if defined(__x86_64__) && defined(__GNUC__) /* one by one: vectorised across q, the compiler gathers */
        __asm__("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(b0), "+x"(b1), "+x"(b2), "+x"(b3));
#endif
    }
    a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3, b[0] = b0, b[1] = b1, b[2] = b2, b[3] = b3;
}

/* LN_G = 4 rows of the LayerNorm backward (dx += ...; pw, pb += their dy xhat and dy). The
 * per-column work runs as vector loops over a strip of LN_STRIP columns: the terms g = dy w and
 * g xhat into the strip, pw[i] and pb[i] taking the rows' terms in row order. What must stay
 * sequential, each row's sums a (of g) and b (of g xhat) in column order, then runs for the 4
 * rows together (ln_chains), so that their chains of dependent additions overlap. The same
 * operations in the same order as a row at a time, column by column: the same bits. */
__attribute__((always_inline)) static inline void layernorm_backward_group(float *dx, float *pw, float *pb,
                                                                           const float *dy, const float *x,
                                                                           const float *w, int d, float eps) {
    float mean[LN_G], rstd[LN_G], a[LN_G], b[LN_G];
    float tg[LN_G][LN_STRIP], tb[LN_G][LN_STRIP];
    for (int q = 0; q < LN_G; q++) {
        ln_stats(x + (size_t)q * d, d, eps, &mean[q], &rstd[q]);
        a[q] = b[q] = 0.0f;
    }
    for (int i0 = 0; i0 < d; i0 += LN_STRIP) {
        const int n = d - i0 < LN_STRIP ? d - i0 : LN_STRIP;
        for (int q = 0; q < LN_G; q++) {
            const float *xr = x + (size_t)q * d + i0, *gr = dy + (size_t)q * d + i0;
            float *pwi = pw + i0, *pbi = pb + i0, *g = tg[q], *gx = tb[q];
            const float mq = mean[q], rq = rstd[q];
            for (int i = 0; i < n; i++) {
                const float xh = (xr[i] - mq) * rq;
                g[i] = gr[i] * w[i0 + i];
                gx[i] = g[i] * xh;
                pwi[i] += gr[i] * xh;
                pbi[i] += gr[i];
            }
        }
        ln_chains(a, b, tg, tb, n);
    }
    for (int q = 0; q < LN_G; q++)
        ln_dx_row(dx + (size_t)q * d, x + (size_t)q * d, dy + (size_t)q * d, w, d, mean[q], rstd[q], a[q], b[q]);
}

/* One block of rows of the LayerNorm backward: dx += ..., and the block's own partial sums of
 * dy * xhat and dy into pw and pb (d each). */
KERNEL_CLONES static void layernorm_backward_block(float *dx, float *pw, float *pb, const float *dy,
                                                   const float *x, const float *w, int rows, int d,
                                                   float eps) {
    for (int i = 0; i < d; i++) pw[i] = pb[i] = 0.0f;
    int r = 0;
    /* 4 rows together where their x and dy stay in L1 for dx's pass (at d = 384 and more the
     * groups measured slower than a row at a time: 1.0x at 384, 0.73x at 768; 1.3x at 64-256) */
    for (; d <= LN_STRIP && r + LN_G <= rows; r += LN_G)
        layernorm_backward_group(dx + (size_t)r * d, pw, pb, dy + (size_t)r * d, x + (size_t)r * d, w, d, eps);
    for (; r < rows; r++) { /* a row at a time: the same operations in the same order */
        const float *xr = x + (size_t)r * d, *gr = dy + (size_t)r * d;
        float mean, rstd, a = 0.0f, b = 0.0f;
        ln_stats(xr, d, eps, &mean, &rstd);
        for (int i = 0; i < d; i++) {
            const float xh = (xr[i] - mean) * rstd, g = gr[i] * w[i];
            a += g;
            b += g * xh;
            pw[i] += gr[i] * xh;
            pb[i] += gr[i];
        }
        ln_dx_row(dx + (size_t)r * d, xr, gr, w, d, mean, rstd, a, b);
    }
}

void kernels_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                                const float *w, float *scratch, int n, int d, float eps) {
    const int nb = (n + KERNELS_LN_BLOCK - 1) / KERNELS_LN_BLOCK;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < nb; k++) {
        const size_t r0 = (size_t)k * KERNELS_LN_BLOCK;
        const int rows = n - (int)r0 < KERNELS_LN_BLOCK ? n - (int)r0 : KERNELS_LN_BLOCK;
        layernorm_backward_block(dx + r0 * d, scratch + (size_t)k * 2 * d, scratch + ((size_t)k * 2 + 1) * d,
                                 dy + r0 * d, x + r0 * d, w, rows, d, eps);
    }
    /* the blocks' partial sums in block order: the same for any thread count */
    for (int k = 0; k < nb; k++)
        for (int i = 0; i < d; i++) {
            dw[i] += scratch[(size_t)k * 2 * d + i];
            db[i] += scratch[((size_t)k * 2 + 1) * d + i];
        }
}

KERNEL_CLONES void kernels_softmax_backward_rows(float *dS, const float *P, const float *dP, int n, int d) {
    for (int r = 0; r < n; r++) {
        const float *pr = P + (size_t)r * d, *gr = dP + (size_t)r * d;
        float *sr = dS + (size_t)r * d;
        const float dot = lanes_dot(pr, gr, d);
        for (int i = 0; i < d; i++) sr[i] = pr[i] * (gr[i] - dot);
    }
}

/* Refiner's maps convolution and its input gradient share one loop: row i of out adds, for each
 * tap (u, v) in row-major order from zero, wt[u][v] src[i + sy (u - h)][j + sx (v - h)] where the
 * index is inside the map (sy = sx = 1: the convolution; -1: its transpose). Columns that every
 * tap reaches are done 16 at a time in registers, the edges one by one; both add the same taps
 * in the same order, so the bits are those of a tap-at-a-time loop. */
#define MAPS_GROUP 4 /* blocks of 16 summed together: independent chains of adds */
#define MAPS_MAX_K 256 /* callers check k <= VIT_MAX_KERNEL (255) */
/* 16 floats as one AVX-512 register (four SSE ones in the baseline clone): GCC's vector
 * extension, so the sums stay in registers; each lane adds its terms in the scalar order. */
typedef float v16f __attribute__((vector_size(64)));
KERNEL_CLONES static void maps_taps_row(float *o, const float *src, const float *wt, int T, int k, int i,
                                        int sgn) {
    const int h = k / 2;
    int rows[MAPS_MAX_K], taps[MAPS_MAX_K], nr = 0;
    for (int u = 0; u < k; u++) {
        const int r = i + sgn * (u - h);
        if (r >= 0 && r < T) rows[nr] = r, taps[nr++] = u;
    }
    /* blocks of 16 at h, h + 16, ..., the last one moved back to end at T - h (it recomputes
     * some columns, to the same bits), MAPS_GROUP at a time */
    const int nb = T - 2 * h >= 16 ? (T - 2 * h + 15) / 16 : 0;
    for (int b0 = 0; b0 < nb; b0 += MAPS_GROUP) {
        const int ng = nb - b0 < MAPS_GROUP ? nb - b0 : MAPS_GROUP;
        int col[MAPS_GROUP];
        v16f acc[MAPS_GROUP];
        for (int g = 0; g < MAPS_GROUP; g++) {
            const int b = b0 + (g < ng ? g : ng - 1); /* a short group repeats its last block */
            col[g] = b == nb - 1 ? T - h - 16 : h + b * 16;
            acc[g] = (v16f){0};
        }
        for (int a = 0; a < nr; a++)
            for (int v = 0; v < k; v++) {
                const float w = wt[taps[a] * k + v], *x = src + (size_t)rows[a] * T + sgn * (v - h);
                for (int g = 0; g < MAPS_GROUP; g++) {
                    v16f t;
                    memcpy(&t, x + col[g], sizeof t);
                    acc[g] += w * t;
                }
            }
        for (int g = 0; g < ng; g++) memcpy(o + col[g], &acc[g], sizeof acc[g]);
    }
    /* the rest one by one, each over the taps that stay inside the row: column c + sgn (v - h)
     * in [0, T) */
    for (int c = 0; c < T; c++) {
        if (c == h && nb > 0) c = T - h; /* the blocks did [h, T - h) */
        if (c >= T) break;
        int v0 = sgn > 0 ? h - c : c - T + 1 + h, v1 = sgn > 0 ? T - 1 - c + h : c + h;
        v0 = v0 < 0 ? 0 : v0;
        v1 = v1 > k - 1 ? k - 1 : v1;
        float acc = 0.0f;
        for (int a = 0; a < nr; a++) {
            const float *w = wt + taps[a] * k, *x = src + (size_t)rows[a] * T + c - sgn * h;
            for (int v = v0; v <= v1; v++) acc += w[v] * x[sgn * v];
        }
        o[c] = acc;
    }
}

void kernels_maps_dwconv(float *out, const float *in, const float *w, int E, int T, int k) {
    const size_t TT = (size_t)T * T;
    for (int e = 0; e < E; e++)
        for (int i = 0; i < T; i++)
            maps_taps_row(out + (size_t)e * TT + (size_t)i * T, in + (size_t)e * TT, w + (size_t)e * k * k, T, k, i, 1);
}

KERNEL_CLONES void kernels_maps_dwconv_backward(float *din, float *dw, const float *dout, const float *in,
                                                const float *w, int E, int T, int k) {
    const size_t TT = (size_t)T * T;
    const int h = k / 2;
    for (int e = 0; e < E; e++) {
        const float *x = in + (size_t)e * TT, *go = dout + (size_t)e * TT;
        /* din[r][c] = sum over taps (u, v) in order of w[u][v] dout[r - dy][c - dx] */
        for (int r = 0; r < T; r++)
            maps_taps_row(din + (size_t)e * TT + (size_t)r * T, go, w + (size_t)e * k * k, T, k, r, -1);
        /* dw[u][v] = sum_i,j dout[i][j] in[i + dy][j + dx]: rows in lanes, summed in double */
        for (int u = 0; u < k; u++)
            for (int v = 0; v < k; v++) {
                const int dy = u - h, dx = v - h;
                const int i0 = dy < 0 ? -dy : 0, i1 = dy > 0 ? T - dy : T;
                const int j0 = dx < 0 ? -dx : 0, j1 = dx > 0 ? T - dx : T;
                double acc = 0;
                for (int i = i0; i < i1; i++)
                    acc += lanes_dot(go + (size_t)i * T + j0, x + (size_t)(i + dy) * T + j0 + dx, j1 - j0);
                dw[(size_t)e * k * k + u * k + v] = (float)acc;
            }
    }
}

/* 64 columns at a time (16 at the end, then one by one): the K rows of B's block stay in L1
 * while every row of C takes its sum in registers, k in order. */
KERNEL_CLONES void kernels_mix_rows(float *C, const float *A, size_t am, size_t ak, const float *B, int M, int K,
                                    size_t N, float alpha, int accumulate) {
    static const int groups[2] = {MAPS_GROUP, 1}; /* registers of 16 per row: 64 columns, then 16 */
    size_t j = 0;
    for (int w = 0; w < 2; w++)
        for (const int ng = groups[w]; j + 16 * (size_t)ng <= N; j += 16 * (size_t)ng)
            for (int m = 0; m < M; m++) {
                v16f acc[MAPS_GROUP] = {{0}};
                for (int k = 0; k < K; k++) {
                    const float a = A[m * am + k * ak], *b = B + k * N + j;
                    for (int g = 0; g < MAPS_GROUP; g++) {
                        if (g >= ng) break;
                        v16f t;
                        memcpy(&t, b + 16 * g, sizeof t);
                        acc[g] += a * t;
                    }
                }
                float *c = C + m * N + j;
                for (int g = 0; g < ng; g++) {
                    v16f t = alpha * acc[g];
                    if (accumulate) {
                        v16f old;
                        memcpy(&old, c + 16 * g, sizeof old);
                        t = old + t;
                    }
                    memcpy(c + 16 * g, &t, sizeof t);
                }
            }
    for (; j < N; j++)
        for (int m = 0; m < M; m++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc += A[m * am + k * ak] * B[k * N + j];
            C[m * N + j] = accumulate ? C[m * N + j] + alpha * acc : alpha * acc;
        }
}

KERNEL_CLONES void kernels_bn_backward(float *dy, const float *x, float mean, float inv, float a, size_t n,
                                       float *gw, float *gb) {
    v16f sw = {0}, sb = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f d, v;
        memcpy(&d, dy + i, sizeof d);
        memcpy(&v, x + i, sizeof v);
        sw += d * (v - mean);
        sb += d;
    }
    double w = 0, b = 0;
    for (; i < n; i++) {
        w += dy[i] * (x[i] - mean);
        b += dy[i];
    }
    for (int j = 0; j < 16; j++) {
        w += sw[j];
        b += sb[j];
    }
    *gw = (float)(w * inv);
    *gb = (float)b;
    for (i = 0; i < n; i++) dy[i] *= a;
}

kernels_bn_affine kernels_bn_fold(float weight, float bias, float mean, float var, float eps) {
    const float inv = 1.0f / sqrtf(var + eps), a = weight * inv;
    return (kernels_bn_affine){a, bias - mean * a, inv};
}

#ifdef KERNELS_X86
/* exp_inline on 16 lanes: the same operations in the same order (no fused multiply-adds), so
 * the same bits as the scalar function. */
__attribute__((target("avx512f"))) static inline __m512 exp16(__m512 x0) {
    const __mmask16 lo = _mm512_cmp_ps_mask(x0, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
    const __mmask16 hi = _mm512_cmp_ps_mask(x0, _mm512_set1_ps(88.7f), _CMP_GT_OQ);
    __m512 x = _mm512_mask_blend_ps(lo, x0, _mm512_set1_ps(-87.3f));
    x = _mm512_mask_blend_ps(hi, x, _mm512_set1_ps(88.7f));
    const __m512 big = _mm512_set1_ps(12582912.0f);
    const __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), big), big);
    __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693359375f)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(-2.12194440e-4f)));
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), r), r), _mm512_set1_ps(1.0f));
    const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps((__mmask16)~lo, p, _mm512_castsi512_ps(bits));
}

/* kernels_softmax_rows on AVX-512 with a masked last block: the scalar version's loops, lane
 * for lane (its LANES partial maxima and sums, reduced in the same order), so the same bits;
 * the win is the tail (65 columns: one masked block instead of a scalar exp). G rows go through
 * each step together: their reductions are chains of dependent scalar operations (16 maxima, 16
 * and more additions), and G independent chains overlap where one waited on itself. */
enum { SM_G = 8 };
__attribute__((target("avx512f"), always_inline)) static inline void softmax_group(float *x, int d, const int G) {
    const int full = d - d % LANES;
    const __mmask16 tail = (__mmask16)((1u << (d - full)) - 1);
    float lanes[SM_G][LANES], m[SM_G], s[SM_G];
    for (int q = 0; q < G; q++) {
        const float *row = x + (size_t)q * d;
        __m512 acc = _mm512_set1_ps(-INFINITY);
        for (int i = 0; i < full; i += LANES) acc = _mm512_max_ps(_mm512_loadu_ps(row + i), acc);
        _mm512_storeu_ps(lanes[q], acc);
        m[q] = -INFINITY;
    }
    for (int j = 0; j < LANES; j++)
        for (int q = 0; q < G; q++) m[q] = lanes[q][j] > m[q] ? lanes[q][j] : m[q];
    __m512 vm[SM_G], sum[SM_G];
    for (int q = 0; q < G; q++) {
        const float *row = x + (size_t)q * d;
        for (int i = full; i < d; i++) m[q] = row[i] > m[q] ? row[i] : m[q];
        vm[q] = _mm512_set1_ps(m[q]);
        sum[q] = _mm512_setzero_ps();
    }
    for (int i = 0; i < full; i += LANES) /* the G rows' exps in flight together */
        for (int q = 0; q < G; q++) {
            float *row = x + (size_t)q * d;
            const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + i), vm[q]));
            _mm512_storeu_ps(row + i, e);
            sum[q] = _mm512_add_ps(sum[q], e);
        }
    for (int q = 0; q < G; q++) {
        float *row = x + (size_t)q * d;
        if (tail) _mm512_mask_storeu_ps(row + full, tail, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, row + full), vm[q])));
        _mm512_storeu_ps(lanes[q], sum[q]);
        s[q] = 0.0f;
    }
    for (int j = 0; j < LANES; j++)
        for (int q = 0; q < G; q++) s[q] += lanes[q][j];
    for (int q = 0; q < G; q++) {
        float *row = x + (size_t)q * d;
        for (int i = full; i < d; i++) s[q] += row[i];
        const __m512 inv = _mm512_set1_ps(1.0f / s[q]);
        for (int i = 0; i < full; i += LANES) _mm512_storeu_ps(row + i, _mm512_mul_ps(_mm512_loadu_ps(row + i), inv));
        if (tail) _mm512_mask_storeu_ps(row + full, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + full), inv));
    }
}

__attribute__((target("avx512f"))) static void softmax_rows16(float *x, int n, int d) {
    int r = 0;
    for (; r + SM_G <= n; r += SM_G) softmax_group(x + (size_t)r * d, d, SM_G);
    for (; r < n; r++) softmax_group(x + (size_t)r * d, d, 1);
}
#endif

KERNEL_CLONES static void softmax_rows_any(float *x, int n, int d) {
    for (int r = 0; r < n; r++) {
        float *row = x + (size_t)r * d;
        const float m = lanes_max(row, d);
        for (int i = 0; i < d; i++) row[i] = exp_inline(row[i] - m);
        const float inv = 1.0f / lanes_sum(row, d);
        for (int i = 0; i < d; i++) row[i] *= inv;
    }
}

static int g_portable;

void kernels_force_portable(int on) { g_portable = on != 0; }

/* This file's AVX-512 paths run (read per call: __builtin_cpu_supports reads a table filled at
 * load time, and nothing here is written from two threads). */
static int own_avx512(void) {
#ifdef KERNELS_X86
    return !g_portable && __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

void kernels_softmax_rows(float *x, int n, int d) {
#ifdef KERNELS_X86
    if (own_avx512()) {
        softmax_rows16(x, n, d);
        return;
    }
#endif
    softmax_rows_any(x, n, d);
}

void kernels_copy(float *dst, const float *src, size_t n) {
    enum { PIECE = 1 << 16 };
    const long pieces = (long)((n + PIECE - 1) / PIECE);
#pragma omp parallel for schedule(static) if (pieces > 1)
    for (long i = 0; i < pieces; i++) {
        const size_t o = (size_t)i * PIECE;
        memcpy(dst + o, src + o, (n - o < PIECE ? n - o : PIECE) * sizeof(float));
    }
}

void kernels_fill_rows(float *y, const float *bias, int n, int d) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) memcpy(y + (size_t)r * d, bias, (size_t)d * sizeof *y);
}

/* One image row y of a depth-wise 3x3 conv (pad 1) over channels [c0, c0 + nc): wt[t][c] are the
 * taps' weights gathered for the block, so the inner loop runs over contiguous channels and keeps
 * each output in a register over the 9 taps (a tap outside the map reads zeros). */
#define DW_BLOCK 64
static const float dw_zeros[DW_BLOCK];
KERNEL_CLONES static void dwconv3_row(float *restrict out, const float *restrict in, const float wt[9][DW_BLOCK],
                                      const float *bias, int y, int gh, int gw, int C, int nc) {
    for (int x = 0; x < gw; x++) {
        const float *src[9];
        for (int t = 0; t < 9; t++) {
            const int iy = y + t / 3 - 1, ix = x + t % 3 - 1;
            src[t] = iy < 0 || iy >= gh || ix < 0 || ix >= gw ? dw_zeros : in + ((size_t)iy * gw + ix) * C;
        }
        float *restrict o = out + (size_t)x * C;
        for (int ch = 0; ch < nc; ch++) {
            float acc = bias[ch];
            for (int t = 0; t < 9; t++) acc += wt[t][ch] * src[t][ch];
            o[ch] = acc;
        }
    }
}

void kernels_dwconv3(float *out, const float *in, const float *w, const float *bias, int n, int gh, int gw,
                     int C) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int y = 0; y < gh; y++)
            for (int c0 = 0; c0 < C; c0 += DW_BLOCK) {
                const int nc = C - c0 < DW_BLOCK ? C - c0 : DW_BLOCK;
                float wt[9][DW_BLOCK];
                for (int t = 0; t < 9; t++)
                    for (int ch = 0; ch < nc; ch++) wt[t][ch] = w[(size_t)(c0 + ch) * 9 + t];
                const size_t img = (size_t)b * gh * gw * C;
                dwconv3_row(out + img + (size_t)y * gw * C + c0, in + img + c0, (const float(*)[DW_BLOCK])wt,
                            bias + c0, y, gh, gw, C, nc);
            }
}

/* din row y of image b: each input takes the taps of the outputs it fed, w[c][ky][kx] for the
 * output (y - ky + 1, x - kx + 1) */
KERNEL_CLONES static void dwconv3_din_row(float *restrict din, const float *restrict dout, const float *w, int y,
                                          int gh, int gw, int C) {
    for (int x = 0; x < gw; x++) {
        float *o = din + (size_t)x * C;
        for (int ch = 0; ch < C; ch++) o[ch] = 0.0f;
        for (int ky = 0; ky < 3; ky++) {
            const int oy = y - ky + 1;
            if (oy < 0 || oy >= gh) continue;
            for (int kx = 0; kx < 3; kx++) {
                const int ox = x - kx + 1;
                if (ox < 0 || ox >= gw) continue;
                const float *g = dout + ((size_t)oy * gw + ox) * C;
                for (int ch = 0; ch < C; ch++) o[ch] += w[(size_t)ch * 9 + ky * 3 + kx] * g[ch];
            }
        }
    }
}

#define DWB_BLOCK 16
/* dw and db of channels c0 .. c0 + nc over every image and position, in double */
KERNEL_CLONES static void dwconv3_dw_block(float *dw, float *db, const float *dout, const float *in, int n, int gh,
                                           int gw, int C, int c0, int nc) {
    double acc[9][DWB_BLOCK] = {{0}}, bacc[DWB_BLOCK] = {0};
    for (int b = 0; b < n; b++)
        for (int y = 0; y < gh; y++)
            for (int x = 0; x < gw; x++) {
                const size_t img = (size_t)b * gh * gw * C;
                const float *g = dout + img + ((size_t)y * gw + x) * C + c0;
                for (int ch = 0; ch < nc; ch++) bacc[ch] += g[ch];
                for (int ky = 0; ky < 3; ky++) {
                    const int iy = y + ky - 1;
                    if (iy < 0 || iy >= gh) continue;
                    for (int kx = 0; kx < 3; kx++) {
                        const int ix = x + kx - 1;
                        if (ix < 0 || ix >= gw) continue;
                        const float *v = in + img + ((size_t)iy * gw + ix) * C + c0;
                        for (int ch = 0; ch < nc; ch++) acc[ky * 3 + kx][ch] += (double)g[ch] * v[ch];
                    }
                }
            }
    for (int ch = 0; ch < nc; ch++) {
        for (int t = 0; t < 9; t++) dw[(size_t)(c0 + ch) * 9 + t] += (float)acc[t][ch];
        if (db) db[c0 + ch] += (float)bacc[ch];
    }
}

#ifdef KERNELS_X86
/* dwconv3_dw_block for a full block of 16 channels on AVX-512, the 9 taps' and the bias's
 * accumulators in registers: the same double sums in the same (image, row, column) order per
 * tap and channel, so the same bits (a float x float product is exact in double, so the fused
 * multiply-add rounds as the multiply and add do). */
__attribute__((target("avx512f"))) static void dwconv3_dw_block16(float *dw, float *db, const float *dout,
                                                                 const float *in, int n, int gh, int gw, int C,
                                                                 int c0) {
    __m512d acc[9][2], bacc[2];
    for (int t = 0; t < 9; t++) acc[t][0] = acc[t][1] = _mm512_setzero_pd();
    bacc[0] = bacc[1] = _mm512_setzero_pd();
    for (int b = 0; b < n; b++)
        for (int y = 0; y < gh; y++)
            for (int x = 0; x < gw; x++) {
                const size_t img = (size_t)b * gh * gw * C;
                const float *g = dout + img + ((size_t)y * gw + x) * C + c0;
                const __m512d g0 = _mm512_cvtps_pd(_mm256_loadu_ps(g)), g1 = _mm512_cvtps_pd(_mm256_loadu_ps(g + 8));
                bacc[0] = _mm512_add_pd(bacc[0], g0);
                bacc[1] = _mm512_add_pd(bacc[1], g1);
#pragma GCC unroll 9
                for (int t = 0; t < 9; t++) {
                    const int iy = y + t / 3 - 1, ix = x + t % 3 - 1;
                    if (iy < 0 || iy >= gh || ix < 0 || ix >= gw) continue;
                    const float *v = in + img + ((size_t)iy * gw + ix) * C + c0;
                    acc[t][0] = _mm512_fmadd_pd(g0, _mm512_cvtps_pd(_mm256_loadu_ps(v)), acc[t][0]);
                    acc[t][1] = _mm512_fmadd_pd(g1, _mm512_cvtps_pd(_mm256_loadu_ps(v + 8)), acc[t][1]);
                }
            }
    double a[9][16], ba[16];
    for (int t = 0; t < 9; t++) {
        _mm512_storeu_pd(a[t], acc[t][0]);
        _mm512_storeu_pd(a[t] + 8, acc[t][1]);
    }
    _mm512_storeu_pd(ba, bacc[0]);
    _mm512_storeu_pd(ba + 8, bacc[1]);
    for (int ch = 0; ch < 16; ch++) {
        for (int t = 0; t < 9; t++) dw[(size_t)(c0 + ch) * 9 + t] += (float)a[t][ch];
        if (db) db[c0 + ch] += (float)ba[ch];
    }
}
#endif

void kernels_dwconv3_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                              const float *w, int n, int gh, int gw, int C) {
    if (din) {
#pragma omp parallel for collapse(2) schedule(static)
        for (int b = 0; b < n; b++)
            for (int y = 0; y < gh; y++) {
                const size_t img = (size_t)b * gh * gw * C;
                dwconv3_din_row(din + img + (size_t)y * gw * C, dout + img, w, y, gh, gw, C);
            }
    }
    const int blocks = (C + DWB_BLOCK - 1) / DWB_BLOCK;
#ifdef KERNELS_X86
    const int avx512 = own_avx512();
#endif
#pragma omp parallel for schedule(dynamic, 1)
    for (int k = 0; k < blocks; k++) {
        const int c0 = k * DWB_BLOCK, nc = C - c0 < DWB_BLOCK ? C - c0 : DWB_BLOCK;
#ifdef KERNELS_X86
        if (nc == 16 && avx512) {
            dwconv3_dw_block16(dw, db, dout, in, n, gh, gw, C, c0);
            continue;
        }
#endif
        dwconv3_dw_block(dw, db, dout, in, n, gh, gw, C, c0, nc);
    }
}

void kernels_scaled_add(float *x, const float *y, const float *gamma, float s, int n, int d) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        float *xr = x + (size_t)r * d;
        const float *yr = y + (size_t)r * d;
        if (gamma && s == 1.0f)
            for (int i = 0; i < d; i++) xr[i] += gamma[i] * yr[i];
        else if (gamma) /* (gamma y) s, as PyTorch rounds gamma * y before the division by r */
            for (int i = 0; i < d; i++) xr[i] += gamma[i] * yr[i] * s;
        else
            for (int i = 0; i < d; i++) xr[i] += s * yr[i];
    }
}

void kernels_scaled_add_backward(float *df, float *dgamma, const float *dy, const float *f, const float *gamma,
                                 float s, int n, int d) {
    enum { COLS = 16 };
    /* dgamma: per column a double over the rows in order (column blocks over threads) */
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < (dgamma ? d : 0); c0 += COLS) {
        const int w = d - c0 < COLS ? d - c0 : COLS;
        double acc[COLS] = {0};
        for (int r = 0; r < n; r++) {
            const float *a = dy + (size_t)r * d + c0, *b = f + (size_t)r * d + c0;
            for (int i = 0; i < w; i++) acc[i] += (double)a[i] * b[i];
        }
        for (int i = 0; i < w; i++) dgamma[c0 + i] += (float)(s * acc[i]);
    }
    if (!df) return;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++)
        for (int i = 0; i < d; i++) df[(size_t)r * d + i] = (gamma ? gamma[i] * s : s) * dy[(size_t)r * d + i];
}

void kernels_add_rows(float *y, const float *bias, int n, int d) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        float *yr = y + (size_t)r * d;
        for (int i = 0; i < d; i++) yr[i] += bias[i];
    }
}

uint16_t kernels_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {                                   /* subnormal or zero in half */
        if (ax < 0x33000000u) return (uint16_t)sign;         /* below half the smallest */
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t hm = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (hm & 1u))) hm++;
        return (uint16_t)(sign | hm);
    }
    uint32_t h = ((ax - 0x38000000u) >> 13);
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

float kernels_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0) {
        if (m == 0) {
            x = sign;
        } else { /* subnormal: normalise */
            e = 113;
            while (!(m & 0x400u)) {
                m <<= 1;
                e--;
            }
            x = sign | (e << 23) | ((m & 0x3ffu) << 13);
        }
    } else if (e == 31) {
        x = sign | 0x7f800000u | (m << 13);
    } else {
        x = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

float kernels_bf16_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

#ifdef KERNELS_X86
__attribute__((target("f16c,avx"))) static void f32_to_f16_f16c(uint16_t *dst, const float *src,
                                                                 size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(src + i);
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) dst[i] = kernels_f32_to_f16(src[i]);
}
#endif

#ifdef KERNELS_X86
__attribute__((target("f16c,avx"))) static void f16_to_f32_f16c(float *dst, const uint16_t *src,
                                                                 size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = kernels_f16_to_f32(src[i]);
}
#endif

#ifdef KERNELS_X86
/* clang before 15 knows no "f16c" feature string (the fuzz build uses clang): every CPU with
 * AVX2 has F16C, so AVX2 stands in for it there. */
#if defined(__clang__) && __clang_major__ < 15
#define KERNELS_HAS_F16C() (__builtin_cpu_supports("avx2"))
#else
#define KERNELS_HAS_F16C() (__builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx"))
#endif
#endif

void kernels_f16_to_f32_array(float *dst, const uint16_t *src, size_t n) {
#ifdef KERNELS_X86
    if (KERNELS_HAS_F16C()) {
        f16_to_f32_f16c(dst, src, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = kernels_f16_to_f32(src[i]);
}

void kernels_f32_to_f16_array(uint16_t *dst, const float *src, size_t n) {
#ifdef KERNELS_X86
    /* Why the dispatch: the build targets baseline x86-64, but nearly every CPU since 2013 has
     * F16C, which converts 8 values per instruction instead of ~20 scalar operations each. */
    if (KERNELS_HAS_F16C()) {
        f32_to_f16_f16c(dst, src, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = kernels_f32_to_f16(src[i]);
}

float *kernels_scratch(int which, size_t floats) {
    static _Thread_local float *buf[KERNELS_SCRATCH_COUNT];
    static _Thread_local size_t cap[KERNELS_SCRATCH_COUNT];
    if (floats > cap[which]) {
        float *nb = realloc(buf[which], floats * sizeof(float));
        if (!nb) return NULL;
        buf[which] = nb;
        cap[which] = floats;
    }
    return buf[which];
}

typedef struct {
    int transa, transb, M, N, K;
    float alpha, beta;
    const float *A, *B;
    int lda, ldb, ldc;
    float *C;
} gemm_job;

static int job_tiles(const gemm_job *g) {
    return ((g->M + KERNELS_GEMM_ROWS - 1) / KERNELS_GEMM_ROWS) * ((g->N + KERNELS_GEMM_COLS - 1) / KERNELS_GEMM_COLS);
}

/* The whole of job g in one single-threaded OpenBLAS call (inside an OpenMP region OpenBLAS runs
 * one thread per call, as it does with a team of one). */
static void job_call(const gemm_job *g) {
    cblas_sgemm(CblasRowMajor, g->transa ? CblasTrans : CblasNoTrans, g->transb ? CblasTrans : CblasNoTrans, g->M,
                g->N, g->K, g->alpha, g->A, g->lda, g->B, g->ldb, g->beta, g->C, g->ldc);
}

/* Tile t of job g: rows and columns of C (KERNELS_GEMM_ROWS x KERNELS_GEMM_COLS) over the whole
 * inner dimension. */
static void job_tile(const gemm_job *g, int t) {
    enum { TM = KERNELS_GEMM_ROWS, TN = KERNELS_GEMM_COLS };
    const int tn = (g->N + TN - 1) / TN, i0 = t / tn * TM, j0 = t % tn * TN;
    gemm_job s = *g;
    s.M = g->M - i0 < TM ? g->M - i0 : TM;
    s.N = g->N - j0 < TN ? g->N - j0 : TN;
    s.A = g->A + (g->transa ? (size_t)i0 : (size_t)i0 * g->lda);
    s.B = g->B + (g->transb ? (size_t)j0 * g->ldb : (size_t)j0);
    s.C = g->C + (size_t)i0 * g->ldc + j0;
    job_call(&s);
}

/* Piece p of job g's inner dimension (KERNELS_GEMM_SPLIT long), into the same C. */
static gemm_job job_piece(const gemm_job *g, int p) {
    const int k0 = p * KERNELS_GEMM_SPLIT;
    gemm_job s = *g;
    s.K = g->K - k0 < KERNELS_GEMM_SPLIT ? g->K - k0 : KERNELS_GEMM_SPLIT;
    s.A = g->A + (g->transa ? (size_t)k0 * g->lda : (size_t)k0);
    s.B = g->B + (g->transb ? (size_t)k0 : (size_t)k0 * g->ldb);
    return s;
}

/* The tiles of one or two independent products in one loop over the threads. The tiles stay
 * KERNELS_GEMM_ROWS x KERNELS_GEMM_COLS even where a product has only one or two (a small
 * stage's weight gradient over fewer than 2048 rows): OpenBLAS rounds a tile's product
 * differently from its pieces', and smaller tiles measured +5-8% on lavit_pvt_shapes but changed
 * six stage models' trained weights (docs/training.md, "Speed"); kernels_gemm_pair runs such a
 * product beside an independent one instead. Each tile is the same call whichever thread runs
 * it and whatever runs beside it, so the bits are those of the products one after the other. */
static void gemm_tiles_jobs(const gemm_job *g, int njobs) {
    const int t0 = job_tiles(&g[0]), total = t0 + (njobs > 1 ? job_tiles(&g[1]) : 0);
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < total; t++) {
        if (t < t0) job_tile(&g[0], t);
        else job_tile(&g[1], t - t0);
    }
}

/* A product of few tiles over a long inner dimension (a small layer's weight gradient, summed
 * over every row of the batch) would run on one thread. It is cut into KERNELS_GEMM_SPLIT-long
 * pieces of the inner dimension instead, each piece's product into its own buffer (in parallel),
 * and the pieces added in order: how it is cut depends on K alone, so the bits do not depend on
 * the thread count. The buffer is the calling thread's, kept between calls at its largest size
 * (pieces x M x N floats: 19 MB for lmsa_swin_tiny_cifar10's stage-0 MLP at batch 128). Without
 * memory for it, the pieces are added into C one after the other instead: other bits than the
 * buffered sum, but still the same at any thread count. */
static void gemm_split(const gemm_job *g) {
    const int M = g->M, N = g->N, pieces = (g->K + KERNELS_GEMM_SPLIT - 1) / KERNELS_GEMM_SPLIT;
    const size_t MN = (size_t)M * N, need = (size_t)pieces * MN;
    float *part = kernels_scratch(KERNELS_SCRATCH_GEMM_SPLIT, need);
    if (!part) {
        for (int p = 0; p < pieces; p++) {
            gemm_job s = job_piece(g, p);
            s.beta = p ? 1.0f : g->beta;
            gemm_tiles_jobs(&s, 1);
        }
        return;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int p = 0; p < pieces; p++) {
        gemm_job s = job_piece(g, p);
        s.beta = 0.0f;
        s.C = part + (size_t)p * MN;
        s.ldc = N;
        job_call(&s);
    }
#pragma omp parallel for schedule(static)
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float sum = 0;
            for (int p = 0; p < pieces; p++) sum += part[(size_t)p * MN + (size_t)i * N + j];
            float *c = g->C + (size_t)i * g->ldc + j;
            *c = g->beta == 0.0f ? sum : g->beta * *c + sum;
        }
}

static int job_splits(const gemm_job *g) { return job_tiles(g) < 4 && g->K >= 2 * KERNELS_GEMM_SPLIT; }

/* Job g cut into pieces (gemm_split) or tiles. */
static void gemm_run(const gemm_job *g) {
    if (job_splits(g)) gemm_split(g);
    else gemm_tiles_jobs(g, 1);
}

void kernels_gemm(int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc) {
    const gemm_job g = {transa, transb, M, N, K, alpha, beta, A, B, lda, ldb, ldc, C};
    gemm_run(&g);
}

void kernels_gemm_pair(int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc,
                       int transa2, int transb2, int M2, int N2, int K2, float alpha2, const float *A2, int lda2,
                       const float *B2, int ldb2, float beta2, float *C2, int ldc2) {
    const gemm_job g[2] = {{transa, transb, M, N, K, alpha, beta, A, B, lda, ldb, ldc, C},
                           {transa2, transb2, M2, N2, K2, alpha2, beta2, A2, B2, lda2, ldb2, ldc2, C2}};
    if (job_splits(&g[0]) || job_splits(&g[1])) { /* a split product is parallel on its own */
        gemm_run(&g[0]);
        gemm_run(&g[1]);
    } else
        gemm_tiles_jobs(g, 2);
}

void kernels_colsum_add(float *out, const float *x, int M, int N, int ld, float alpha, const float *ones) {
    kernels_gemm(0, 0, 1, N, M, alpha, ones, M, x, ld, 1.0f, out, N);
}
