/* window.c: a block's attention as independent problems (Swin's windows, or one global
 * problem), each gathered through a token table into per-thread scratch, computed per head and
 * scattered back. No allocation; one OpenMP job per (image, problem). */
#include <omp.h>
#include <string.h>

#include "kernels.h"
#include "stage.h"

/* Register blocks of the two products: RB rows by WB columns (one AVX-512 vector, two AVX2). */
#define RB 4
#define WB 16

static int padded(int N) { return (N + WB - 1) / WB * WB; }

/* Per slot: q (N, D) already scaled, k^T (D, Np) zero-padded to whole column blocks (head h's
 * rows h hd .. h hd + hd - 1), v (N, D). */
size_t vit_window_scratch_floats(int N, int D) { return (2 * (size_t)N + (size_t)padded(N)) * D; }

/* Why a fixed kernel and not BLAS: Swin-T's stage 1 has 64 windows x 3 heads per image of
 * 49 x 49 x 32 products, where a BLAS call per head costs about as much in call and packing
 * overhead as the arithmetic. The kernels below keep an RB x WB block of outputs in registers
 * over the whole inner dimension; every output sums its products in a fixed order, so the bits
 * depend on neither the thread count nor the instruction set (C11 mode does not fuse a * b + c). */

/* Gather: rows r of problem w of image b into q (scaled), k^T and v. A pad slot's LN1 output
 * is zero, so its q, k, v are the qkv bias. */
static void window_gather(const vit_window_job *j, int b, int w, float *Q, float *Kt, float *V) {
    const int N = j->N, D = j->D, Np = padded(N);
    const int *tok = j->tok + (size_t)w * N;
    for (int r = 0; r < N; r++) {
        const float *src = tok[r] >= 0 ? j->qkv + ((size_t)b * j->T + tok[r]) * 3 * D : j->qkv_b;
        float *q = Q + (size_t)r * D, *v = V + (size_t)r * D;
        if (!src) {
            memset(q, 0, (size_t)D * sizeof(float));
            memset(v, 0, (size_t)D * sizeof(float));
            for (int c = 0; c < D; c++) Kt[(size_t)c * Np + r] = 0.0f;
            continue;
        }
        for (int c = 0; c < D; c++) q[c] = src[c] * j->scale; /* timm scales q before q k^T */
        for (int c = 0; c < D; c++) Kt[(size_t)c * Np + r] = src[D + c];
        memcpy(v, src + 2 * D, (size_t)D * sizeof(float));
    }
    for (int c = 0; c < D; c++)
        for (int r = N; r < Np; r++) Kt[(size_t)c * Np + r] = 0.0f;
}

/* Scores of one head: A (N, N) = q_h k_h^T (q scaled) + rpb_h, then + mask (Swin's order).
 * Q: head h's columns of q (rows D apart); kt: head h's rows of k^T (Np apart). */
KERNELS_CLONES static void head_scores(float *restrict A, const float *restrict Q,
                                       const float *restrict kt, const float *rpb,
                                       const float *mask, int N, int D, int hd) {
    const int Np = padded(N);
    for (int i0 = 0; i0 < N; i0 += RB) {
        const int rows = N - i0 < RB ? N - i0 : RB;
        const float *q[RB];
        for (int r = 0; r < RB; r++) q[r] = Q + (size_t)(i0 + (r < rows ? r : 0)) * D;
        for (int x0 = 0; x0 < N; x0 += WB) {
            float acc[RB][WB] = {{0}};
            for (int c = 0; c < hd; c++) {
                const float *kr = kt + (size_t)c * Np + x0;
                for (int r = 0; r < RB; r++) {
                    const float qv = q[r][c];
                    for (int l = 0; l < WB; l++) acc[r][l] += qv * kr[l];
                }
            }
            const int w = N - x0 < WB ? N - x0 : WB;
            for (int r = 0; r < rows; r++) memcpy(A + (size_t)(i0 + r) * N + x0, acc[r], (size_t)w * sizeof(float));
        }
    }
    if (rpb)
        for (size_t e = 0; e < (size_t)N * N; e++) A[e] += rpb[e];
    if (mask)
        for (size_t e = 0; e < (size_t)N * N; e++) A[e] += mask[e];
}

/* Values of one head, scattered: the output row of query i goes to its token's row of ao
 * (already offset to head h's columns), a pad query's is dropped. V: head h's columns of v. */
KERNELS_CLONES static void head_values(float *restrict ao, const int *tok, const float *restrict A,
                                       const float *restrict V, int N, int D, int hd) {
    for (int i0 = 0; i0 < N; i0 += RB) {
        const int rows = N - i0 < RB ? N - i0 : RB;
        const float *a[RB];
        for (int r = 0; r < RB; r++) a[r] = A + (size_t)(i0 + (r < rows ? r : 0)) * N;
        for (int c0 = 0; c0 < hd; c0 += WB) {
            float acc[RB][WB] = {{0}};
            const int w = hd - c0 < WB ? hd - c0 : WB;
            if (w == WB) {
                for (int x = 0; x < N; x++) {
                    const float *v = V + (size_t)x * D + c0;
                    for (int r = 0; r < RB; r++) {
                        const float av = a[r][x];
                        for (int l = 0; l < WB; l++) acc[r][l] += av * v[l];
                    }
                }
            } else { /* a head width that is no multiple of WB: the last columns */
                for (int x = 0; x < N; x++) {
                    const float *v = V + (size_t)x * D + c0;
                    for (int r = 0; r < RB; r++)
                        for (int l = 0; l < w; l++) acc[r][l] += a[r][x] * v[l];
                }
            }
            for (int r = 0; r < rows; r++)
                if (tok[i0 + r] >= 0) memcpy(ao + (size_t)tok[i0 + r] * D + c0, acc[r], (size_t)w * sizeof(float));
        }
    }
}

/* One (image, problem) job: gather, then per head scores -> softmax -> values and scatter. */
static void window_problem(const vit_window_job *j, int b, int w, float *scr) {
    const int N = j->N, D = j->D, H = j->H, hd = D / H;
    const size_t NN = (size_t)N * N;
    float *Q = scr, *Kt = scr + (size_t)N * D, *V = Kt + (size_t)padded(N) * D;
    window_gather(j, b, w, Q, Kt, V);
    const float *mask = j->mask ? j->mask + (size_t)w * NN : NULL;
    for (int h = 0; h < H; h++) {
        const size_t map = (((size_t)b * H + h) * j->P + w) * NN;
        float *A = j->att + map;
        head_scores(A, Q + (size_t)h * hd, Kt + (size_t)h * hd * padded(N), j->rpb ? j->rpb + (size_t)h * NN : NULL,
                    mask, N, D, hd);
        if (j->scores) memcpy(j->scores + map, A, NN * sizeof(float));
        kernels_softmax_rows(A, N, N);
        head_values(j->ao + (size_t)b * j->T * D + (size_t)h * hd, j->tok + (size_t)w * N, A,
                    V + (size_t)h * hd, N, D, hd);
    }
}

void vit_window_attention(const vit_window_job *j) {
    const int jobs = j->n * j->P, max = omp_get_max_threads();
    const int slots = j->slots < max ? j->slots : max;
#pragma omp parallel num_threads(slots)
    {
        float *scr = j->scratch + (size_t)omp_get_thread_num() * j->slot_floats;
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < jobs; i++) window_problem(j, i / j->P, i % j->P, scr);
    }
}
