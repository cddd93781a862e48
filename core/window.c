/* window.c: a block's attention as independent problems (Swin's windows, or one global
 * problem), each gathered through a token table into per-thread scratch, computed per head and
 * scattered back. No allocation; one OpenMP job per (image, problem). */
#include <assert.h>
#include <cblas.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "mech.h"
#include "stage.h"

/* Per slot: vanilla: q (N, D) already scaled, k^T (D, N), v (N, D) and one head's output
 * (N, D / H); another mechanism: q and k (N, H dq), v (N, D) and the output (N, D / H). */
size_t vit_window_scratch_floats(int N, int D, int H, int dq) {
    const size_t qk = (size_t)H * dq > (size_t)D ? (size_t)H * dq : (size_t)D;
    return (2 * qk + 2 * (size_t)D) * N + 4 * (size_t)D + 2; /* + a local head's 2 dv doubles */
}

/* Why per-head BLAS calls after all: Swin-T's stage 1 has 64 windows x 3 heads per image of
 * 49 x 49 x 32 products, which the design note expected to be too small for BLAS. Measured on
 * a Swin-T forward (batch 8, 1 thread, perf): these products took 7-8% of the time in a
 * register-blocked vector kernel of ours (RB 4 x 32 columns, with or without FMA) but 3.5% in
 * OpenBLAS 0.3.21, whose small-matrix path (sgemm_small_kernel_*, no packing) serves exactly
 * these sizes (for op(A) op(B) = A B only: k is gathered transposed for it). Inside the OpenMP region OpenBLAS runs single-threaded, each product belongs to
 * one job, so the bits do not depend on the thread count. */

/* Gather: rows r of problem w of image b into q (scaled), k^T and v. A pad slot's LN1 output is
 * zero, so its q, k, v are the qkv bias. */
static void window_gather(const vit_window_job *j, int b, int w, float *Q, float *Kt, float *V) {
    const int N = j->N, D = j->D;
    const int *tok = j->tok + (size_t)w * N;
    for (int r = 0; r < N; r++) {
        const float *src = tok[r] >= 0 ? j->qkv + ((size_t)b * j->T + tok[r]) * 3 * D : j->qkv_b;
        float *q = Q + (size_t)r * D, *v = V + (size_t)r * D;
        if (!src) {
            memset(q, 0, (size_t)D * sizeof(float));
            memset(v, 0, (size_t)D * sizeof(float));
            for (int c = 0; c < D; c++) Kt[(size_t)c * N + r] = 0.0f;
            continue;
        }
        for (int c = 0; c < D; c++) q[c] = src[c] * j->scale; /* timm scales q before q k^T */
        for (int c = 0; c < D; c++) Kt[(size_t)c * N + r] = src[D + c];
        memcpy(v, src + 2 * D, (size_t)D * sizeof(float));
    }
}

/* Scores of one head: A (N, N) = q_h k_h^T (q scaled) + rpb_h, then + mask (Swin's order).
 * Q: head h's columns (rows D apart); Kt: head h's rows of k^T (N apart). */
static void head_scores(float *A, const float *Q, const float *Kt, const float *rpb,
                        const float *mask, int N, int D, int hd) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, hd, 1.0f, Q, D, Kt, N, 0.0f, A, N);
    if (rpb)
        for (size_t e = 0; e < (size_t)N * N; e++) A[e] += rpb[e];
    if (mask)
        for (size_t e = 0; e < (size_t)N * N; e++) A[e] += mask[e];
}

/* One head's output rows O (N, hd) scattered: query i's row goes to its token's row of ao
 * (already offset to head h's columns); a pad query's is dropped. */
static void head_scatter(float *ao, const float *O, const int *tok, int N, int D, int hd) {
    for (int i = 0; i < N; i++)
        if (tok[i] >= 0) memcpy(ao + (size_t)tok[i] * D, O + (size_t)i * hd, (size_t)hd * sizeof(float));
}

/* Values of one head into O (N, hd), then scattered. V: head h's columns. */
static void head_values(float *ao, float *O, const int *tok, const float *A, const float *V, int N,
                        int D, int hd) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, hd, N, 1.0f, A, N, V, D, 0.0f, O, hd);
    head_scatter(ao, O, tok, N, D, hd);
}

/* One (image, problem) job: gather, then per head scores -> softmax -> values and scatter. */
static void window_problem(const vit_window_job *j, int b, int w, float *scr) {
    const int N = j->N, D = j->D, H = j->H, hd = D / H;
    const size_t NN = (size_t)N * N, ND = (size_t)N * D;
    float *Q = scr, *Kt = Q + ND, *V = Kt + ND, *O = V + ND;
    window_gather(j, b, w, Q, Kt, V);
    const float *mask = j->mask ? j->mask + (size_t)w * NN : NULL;
    for (int h = 0; h < H; h++) {
        const size_t map = (((size_t)b * H + h) * j->P + w) * NN;
        float *A = j->att + map;
        head_scores(A, Q + (size_t)h * hd, Kt + (size_t)h * hd * N, j->rpb ? j->rpb + (size_t)h * NN : NULL,
                    mask, N, D, hd);
        if (j->scores) memcpy(j->scores + map, A, NN * sizeof(float));
        kernels_softmax_rows(A, N, N);
        head_values(j->ao + (size_t)b * j->T * D + (size_t)h * hd, O, j->tok + (size_t)w * N, A,
                    V + (size_t)h * hd, N, D, hd);
    }
}

/* ---- any other mechanism: its layout's views, its hooks per (window, head) ---- */

void vit_window_view_row(const vit_mech_layout *lay, const vit_block_params *bp, const float *qkv,
                         const float *xn, int T, int D, int i, int b, int t, int cols, float *dst) {
    const int col = lay->col[i];
    if (t >= 0) {
        const float *src = lay->src[i] == VIT_SRC_X ? xn + ((size_t)b * T + t) * D + col
                                                    : qkv + ((size_t)b * T + t) * lay->W + col;
        memcpy(dst, src, (size_t)cols * sizeof(float));
        return;
    }
    memset(dst, 0, (size_t)cols * sizeof(float));
    if (lay->src[i] != VIT_SRC_QKV) return;
    for (int p = 0; p < lay->n_proj; p++) { /* the bias of each projection these columns cross */
        const vit_mech_proj *pr = &lay->proj[p];
        const float *bias = vit_mech_weight(bp, pr->b);
        for (int c = 0; c < cols && bias; c++)
            if (col + c >= pr->col && col + c < pr->col + pr->out) dst[c] = bias[col + c - pr->col];
    }
}

static void view_row(const vit_window_job *j, int i, int b, int t, int cols, float *dst) {
    vit_window_view_row(j->lay, j->bp, j->qkv, j->xn, j->T, j->D, i, b, t, cols, dst);
}

static void mech_problem(const vit_window_job *j, int b, int w, float *scr) {
    const int N = j->N, D = j->D, H = j->H, hd = D / H, dq = j->dq, Wq = H * dq;
    const size_t NN = (size_t)N * N;
    const int keys = j->lay->src[0] != VIT_SRC_NONE;
    float *Q = scr, *K = Q + (size_t)N * Wq, *V = K + (size_t)N * Wq, *O = V + (size_t)N * D;
    const int *tok = j->tok + (size_t)w * N;
    for (int r = 0; r < N; r++) {
        if (keys) {
            view_row(j, 0, b, tok[r], Wq, Q + (size_t)r * Wq);
            view_row(j, 1, b, tok[r], Wq, K + (size_t)r * Wq);
        }
        view_row(j, 2, b, tok[r], D, V + (size_t)r * D);
    }
    const float *mask = j->mask ? j->mask + (size_t)w * NN : NULL;
    for (int h = 0; h < H; h++) {
        const size_t map = (((size_t)b * H + h) * j->P + w) * NN;
        vit_local loc;
        if (vit_local_head(j->mb->c, j->mb->l, h, &loc)) { /* O(N R^2), no N x N map (local.h) */
            assert(j->P == 1 && !mask && !j->rpb && keys);
            const size_t S = (size_t)j->att_side, lmap = ((size_t)b * H + h) * N * (S * S + 1);
            const uintptr_t acc = ((uintptr_t)(O + (size_t)N * hd) + 7) & ~(uintptr_t)7;
            vit_local_job lj = {.gh = j->mb->g->gh, .gw = j->mb->g->gw, .dq = dq, .dv = hd,
                                .scale = j->scale, .q = Q + (size_t)h * dq, .k = K + (size_t)h * dq,
                                .v = V + (size_t)h * hd, .ldq = Wq, .ldk = Wq, .ldv = D, .loc = loc,
                                .out = O, .ldo = hd, .acc = (double *)acc, .rec_side = j->att_side};
            if (S) {
                lj.att_local = j->att ? j->att + lmap : NULL;
                lj.scores_local = j->scores ? j->scores + lmap : NULL;
            } else {
                lj.att = j->att ? j->att + map : NULL;
                lj.scores = j->scores ? j->scores + map : NULL;
            }
            vit_local_forward(&lj);
            head_scatter(j->ao + (size_t)b * j->T * D + (size_t)h * hd, O, tok, N, D, hd);
            continue;
        }
        vit_attn_problem p = {.Tq = N, .Tk = N, .prefix = 0, .gh = j->M, .gw = j->M, .H = H, .h = h,
                              .dq = keys ? dq : 0, .scale = j->scale,
                              .q = keys ? Q + (size_t)h * dq : NULL, .k = keys ? K + (size_t)h * dq : NULL,
                              .v = V + (size_t)h * hd, .ldq = Wq, .ldk = Wq, .ldv = D,
                              .add_bias = j->rpb ? j->rpb + (size_t)h * NN : NULL, .add_mask = mask};
        for (int i = 0; i < VIT_MAX_EXTRAS; i++) p.extra[i] = j->extra[i] ? j->extra[i] + map : NULL;
        float *A = j->att + map;
        vit_mech_problem_forward(j->m, j->mb, &p, A, j->scores ? j->scores + map : NULL);
        head_values(j->ao + (size_t)b * j->T * D + (size_t)h * hd, O, tok, A, V + (size_t)h * hd, N, D, hd);
    }
}

void vit_window_attention(const vit_window_job *j) {
    const int jobs = j->n * j->P, max = omp_get_max_threads();
    const int slots = j->slots < max ? j->slots : max;
#pragma omp parallel num_threads(slots)
    {
        float *scr = j->scratch + (size_t)omp_get_thread_num() * j->slot_floats;
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < jobs; i++) {
            if (j->m) mech_problem(j, i / j->P, i % j->P, scr);
            else window_problem(j, i / j->P, i % j->P, scr);
        }
    }
}
