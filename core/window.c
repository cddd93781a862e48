/* window.c: a block's attention as independent problems (Swin's windows, or one global
 * problem), each gathered through a token table into per-thread scratch, computed per head and
 * scattered back. No allocation; one OpenMP job per (image, problem). */
#include <omp.h>
#include <string.h>

#include "kernels.h"
#include "stage.h"

/* Per slot: q (N, D) already scaled, k^T (D, N) (head h's rows h hd .. h hd + hd - 1), v (N, D). */
size_t vit_window_scratch_floats(int N, int D) { return 3 * (size_t)N * D; }

/* Why a fixed kernel and not BLAS: Swin-T's stage 1 has 64 windows x 3 heads per image of
 * 49 x 49 x 32 products. One sgemm call per head costs about as much in call and packing overhead
 * as the arithmetic; with k transposed into the scratch, the loops below run over j (scores) and
 * over the head width (values) in unit stride, so they vectorise without reassociating any sum
 * (no -ffast-math needed) and every entry sums its products in a fixed order. */
/* Gather: rows r of problem w of image b into q (scaled), k^T and v. A pad slot's LN1 output
 * is zero, so its q, k, v are the qkv bias. */
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

/* Scores of one head: A (N, N) = q_h k_h^T (q scaled) + rpb_h, then + mask (Swin's order). */
static void head_scores(float *A, const float *Q, const float *kt, const float *rpb,
                        const float *mask, int N, int D, int hd) {
    for (int i = 0; i < N; i++) {
        float *row = A + (size_t)i * N;
        const float *qi = Q + (size_t)i * D;
        for (int x = 0; x < N; x++) row[x] = qi[0] * kt[x];
        for (int c = 1; c < hd; c++) {
            const float qc = qi[c], *kr = kt + (size_t)c * N;
            for (int x = 0; x < N; x++) row[x] += qc * kr[x];
        }
        if (rpb)
            for (int x = 0; x < N; x++) row[x] += rpb[(size_t)i * N + x];
        if (mask)
            for (int x = 0; x < N; x++) row[x] += mask[(size_t)i * N + x];
    }
}

/* Values of one head, scattered: the output row of query i goes to its token's row of ao
 * (columns h hd ..), a pad query's is dropped. V points at head h's columns. */
static void head_values(float *ao, const int *tok, const float *A, const float *V, int N, int D,
                        int hd) {
    for (int i = 0; i < N; i++) {
        if (tok[i] < 0) continue;
        float *o = ao + (size_t)tok[i] * D;
        const float *row = A + (size_t)i * N;
        for (int c = 0; c < hd; c++) o[c] = row[0] * V[c];
        for (int x = 1; x < N; x++) {
            const float a = row[x], *v = V + (size_t)x * D;
            for (int c = 0; c < hd; c++) o[c] += a * v[c];
        }
    }
}

/* One (image, problem) job: gather, then per head scores -> softmax -> values and scatter. */
static void window_problem(const vit_window_job *j, int b, int w, float *scr) {
    const int N = j->N, D = j->D, H = j->H, hd = D / H;
    const size_t NN = (size_t)N * N;
    float *Q = scr, *Kt = scr + (size_t)N * D, *V = Kt + (size_t)N * D;
    window_gather(j, b, w, Q, Kt, V);
    const float *mask = j->mask ? j->mask + (size_t)w * NN : NULL;
    for (int h = 0; h < H; h++) {
        const size_t map = (((size_t)b * H + h) * j->P + w) * NN;
        float *A = j->att + map;
        head_scores(A, Q + (size_t)h * hd, Kt + (size_t)h * hd * N, j->rpb ? j->rpb + (size_t)h * NN : NULL,
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
