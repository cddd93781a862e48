/* vit.c: the ViT/DeiT forward pass exactly as timm's VisionTransformer computes it in eval mode.
 * Large GEMMs are threaded inside OpenBLAS (split over rows and columns, never over the
 * reduction, so the bits do not depend on the thread count); per-head attention GEMMs run
 * single-threaded with the (image, head) pairs spread over OpenMP threads (OpenBLAS's OpenMP
 * build runs serially inside a parallel region), so the two never oversubscribe the cores. */
#include "vit.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "attn_ops.h"
#include "resample.h"
#include "stage.h"

static float *rec_layer(float **arr, int l) { return arr ? arr[l] : NULL; }

static void spec_add(vit_tensor_spec *specs, int max, int *n, const float **slot, int ndim,
                     const int *shape, const char *fmt, int layer) {
    if (*n < max) {
        vit_tensor_spec *s = &specs[*n];
        snprintf(s->name, sizeof s->name, fmt, layer);
        s->ndim = ndim;
        for (int i = 0; i < 4; i++) s->shape[i] = i < ndim ? shape[i] : 0;
        s->slot = slot;
        s->is_pos_embed = 0;
    }
    (*n)++;
}

#define SPEC(slot, fmt, layer, ...)                                                   \
    do {                                                                              \
        const int shape_[] = {__VA_ARGS__};                                           \
        spec_add(specs, max, &n, (slot), (int)(sizeof shape_ / sizeof shape_[0]), shape_, \
                 (fmt), (layer));                                                     \
    } while (0)

int vit_param_specs(const vit_config *c, vit_params *p, vit_tensor_spec *specs, int max) {
    if (c->n_stages > 0) return vit_stage_param_specs(c, p, specs, max);
    const int D = c->embed_dim, P = c->patch_size, Hm = c->mlp_hidden, C = c->num_classes;
    int n = 0;
    memset(p, 0, sizeof *p);
    SPEC(&p->patch_w, "patch_embed.proj.weight", 0, D, c->in_chans, P, P);
    SPEC(&p->patch_b, "patch_embed.proj.bias", 0, D);
    if (c->class_token) SPEC(&p->cls_token, "cls_token", 0, 1, 1, D);
    if (c->distilled) SPEC(&p->dist_token, "dist_token", 0, 1, 1, D);
    SPEC(&p->pos_embed, "pos_embed", 0, 1, vit_num_tokens(c), D);
    if (n - 1 < max) specs[n - 1].is_pos_embed = 1;
    const int T = vit_num_tokens(c), H = c->num_heads, W = 2 * vit_grid(c) - 1;
    for (int l = 0; l < c->depth && l < VIT_MAX_DEPTH; l++) {
        vit_block_params *b = &p->blocks[l];
        const vit_attn *at = &c->attn[l];
        SPEC(&b->norm1_w, "blocks.%d.norm1.weight", l, D);
        SPEC(&b->norm1_b, "blocks.%d.norm1.bias", l, D);
        switch (at->kind) {
        case VIT_ATTN_LMSA:
            SPEC(&b->q_w, "blocks.%d.attn.q.weight", l, at->qk_dim, D);
            if (c->qkv_bias) SPEC(&b->q_b, "blocks.%d.attn.q.bias", l, at->qk_dim);
            SPEC(&b->k_w, "blocks.%d.attn.k.weight", l, at->qk_dim, D);
            if (c->qkv_bias) SPEC(&b->k_b, "blocks.%d.attn.k.bias", l, at->qk_dim);
            SPEC(&b->v_w, "blocks.%d.attn.v.weight", l, D, D);
            if (c->qkv_bias) SPEC(&b->v_b, "blocks.%d.attn.v.bias", l, D);
            break;
        case VIT_ATTN_LSLA:
            SPEC(&b->q_w, "blocks.%d.attn.q.weight", l, D, D);
            if (c->qkv_bias) SPEC(&b->q_b, "blocks.%d.attn.q.bias", l, D);
            if (at->value_proj) {
                SPEC(&b->v_w, "blocks.%d.attn.v.weight", l, D, D);
                if (c->qkv_bias) SPEC(&b->v_b, "blocks.%d.attn.v.bias", l, D);
            }
            if (at->dynamic_scale) SPEC(&b->ds, "blocks.%d.attn.ds", l, T, T);
            if (at->inner_bias == VIT_BIAS_FULL) SPEC(&b->inner_bias, "blocks.%d.attn.inner_bias", l, H, T, T);
            if (at->inner_bias == VIT_BIAS_RELATIVE)
                SPEC(&b->inner_bias, "blocks.%d.attn.inner_bias_table", l, W * W, H);
            if (at->outer_bias == VIT_BIAS_FULL) SPEC(&b->outer_bias, "blocks.%d.attn.outer_bias", l, H, T, T);
            if (at->outer_bias == VIT_BIAS_RELATIVE)
                SPEC(&b->outer_bias, "blocks.%d.attn.outer_bias_table", l, W * W, H);
            break;
        case VIT_ATTN_LESS:
            SPEC(&b->v_w, "blocks.%d.attn.v.weight", l, D, D);
            if (c->qkv_bias) SPEC(&b->v_b, "blocks.%d.attn.v.bias", l, D);
            SPEC(&b->theta, "blocks.%d.attn.theta.weight", l, T, T);
            SPEC(&b->psi, "blocks.%d.attn.psi.weight", l, T, T);
            break;
        default:
            SPEC(&b->qkv_w, "blocks.%d.attn.qkv.weight", l, 3 * D, D);
            if (c->qkv_bias) SPEC(&b->qkv_b, "blocks.%d.attn.qkv.bias", l, 3 * D);
            if (at->kind == VIT_ATTN_MAIT && at->mask_mode == VIT_MASK_SOFT)
                SPEC(&b->mask_alpha, "blocks.%d.attn.mask_alpha", l, H);
            if (at->kind == VIT_ATTN_REFINER) {
                const int E = at->expanded_heads, k = at->kernel_size;
                SPEC(&b->expand, "blocks.%d.attn.expand.weight", l, E, H);
                SPEC(&b->dla, "blocks.%d.attn.dla.weight", l, E, 1, k, k);
                SPEC(&b->reduce, "blocks.%d.attn.reduce.weight", l, H, E);
            }
            break;
        }
        if (!(at->kind == VIT_ATTN_LSLA && at->no_proj)) {
            SPEC(&b->proj_w, "blocks.%d.attn.proj.weight", l, D, D);
            SPEC(&b->proj_b, "blocks.%d.attn.proj.bias", l, D);
        }
        SPEC(&b->norm2_w, "blocks.%d.norm2.weight", l, D);
        SPEC(&b->norm2_b, "blocks.%d.norm2.bias", l, D);
        SPEC(&b->fc1_w, "blocks.%d.mlp.fc1.weight", l, Hm, D);
        SPEC(&b->fc1_b, "blocks.%d.mlp.fc1.bias", l, Hm);
        SPEC(&b->fc2_w, "blocks.%d.mlp.fc2.weight", l, D, Hm);
        SPEC(&b->fc2_b, "blocks.%d.mlp.fc2.bias", l, D);
    }
    SPEC(&p->norm_w, c->fc_norm ? "fc_norm.weight" : "norm.weight", 0, D);
    SPEC(&p->norm_b, c->fc_norm ? "fc_norm.bias" : "norm.bias", 0, D);
    if (C > 0) {
        SPEC(&p->head_w, "head.weight", 0, C, D);
        SPEC(&p->head_b, "head.bias", 0, C);
        if (c->distilled) {
            SPEC(&p->head_dist_w, "head_dist.weight", 0, C, D);
            SPEC(&p->head_dist_b, "head_dist.bias", 0, C);
        }
    }
    return n;
}

size_t vit_tensor_numel(const vit_tensor_spec *s) {
    size_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= (size_t)s->shape[d];
    return n;
}

void vit_widths(const vit_config *c, size_t *W, size_t *E) {
    const size_t D = (size_t)c->embed_dim;
    *W = 3 * D;
    *E = 0;
    for (int l = 0; l < c->depth; l++) {
        const vit_attn *at = &c->attn[l];
        if (at->kind == VIT_ATTN_LMSA && 2 * (size_t)at->qk_dim + D > *W) *W = 2 * (size_t)at->qk_dim + D;
        for (int i = 0; i < VIT_MAX_EXTRAS; i++) {
            vit_extra x;
            if (vit_extra_info(c, l, i, &x) && (size_t)x.heads > *E) *E = (size_t)x.heads;
        }
    }
}

/* Rounds every view up to 64 bytes so that each starts on a cache line. */
static size_t carve(char *base, size_t *off, size_t nfloats, float **view) {
    size_t bytes = (nfloats * sizeof(float) + 63) & ~(size_t)63;
    if (base && view) *view = (float *)(base + *off);
    *off += bytes;
    return bytes;
}

size_t vit_acts_carve(const vit_config *c, int B, void *base, vit_acts *a) {
    if (c->n_stages > 0) return vit_stage_acts_carve(c, B, base, a);
    const size_t T = (size_t)vit_num_tokens(c), D = (size_t)c->embed_dim, H = (size_t)c->num_heads;
    const size_t Np = (size_t)vit_num_patches(c);
    const size_t K = (size_t)c->in_chans * c->patch_size * c->patch_size;
    const size_t b = (size_t)B;
    size_t off = 0;
    char *p = base;
    vit_acts tmp;
    vit_acts *v = a ? a : &tmp;
    if (base) {
        memset(v, 0, sizeof *v); /* the staged-only views stay NULL */
        v->B = B;
        v->tape = NULL;
    }
    carve(p, &off, b * Np * K, &v->patches);
    carve(p, &off, b * T * D, &v->x);
    carve(p, &off, b * T * D, &v->xn);
    size_t W, E;
    vit_widths(c, &W, &E);
    carve(p, &off, b * T * W, &v->qkv);
    carve(p, &off, b * H * T * T, &v->att);
    const int less = vit_any_attn(c, VIT_ATTN_LESS);
    for (int i = 0; i < 2; i++) {
        v->keep[i] = v->ext[i] = NULL;
        if (less) carve(p, &off, b * H * T * T, &v->keep[i]);
        if (E) carve(p, &off, b * E * T * T, &v->ext[i]);
    }
    carve(p, &off, b * T * D, &v->ao);
    carve(p, &off, b * T * (size_t)c->mlp_hidden, &v->hid);
    carve(p, &off, b * 2 * D, &v->pooled);
    carve(p, &off, b * (size_t)(c->num_classes > 0 ? c->num_classes : 1), &v->logits);
    return off;
}

size_t vit_tape_carve(const vit_config *c, int B, void *base, vit_tape *t) {
    if (c->n_stages > 0) { /* staged models do not train yet (train_run refuses them) */
        if (t) memset(t, 0, sizeof *t);
        return 0;
    }
    const size_t T = (size_t)vit_num_tokens(c), D = (size_t)c->embed_dim, H = (size_t)c->num_heads;
    const size_t b = (size_t)B, BTD = b * T * D, maps = b * H * T * T;
    size_t off = 0, W, E;
    char *p = base;
    vit_tape tmp;
    vit_tape *v = t ? t : &tmp;
    if (base) memset(v, 0, sizeof *v);
    vit_widths(c, &W, &E);
    for (int l = 0; l < c->depth; l++) {
        vit_tape_block *k = &v->blk[l];
        const vit_attn *at = &c->attn[l];
        carve(p, &off, BTD, &k->x_in);
        carve(p, &off, BTD, &k->xn1);
        carve(p, &off, b * T * W, &k->qkv);
        carve(p, &off, maps, &k->att);
        if (at->kind == VIT_ATTN_REFINER) carve(p, &off, maps, &k->soft);
        for (int i = 0; i < VIT_MAX_EXTRAS; i++) {
            vit_extra x;
            if (vit_extra_info(c, l, i, &x)) carve(p, &off, b * (size_t)x.heads * T * T, &k->ext[i]);
        }
        if (at->kind == VIT_ATTN_LESS || (l + 1 < c->depth && c->attn[l + 1].kind == VIT_ATTN_LESS))
            carve(p, &off, maps, &k->keep);
        carve(p, &off, BTD, &k->ao);
        carve(p, &off, BTD, &k->x_mid);
        carve(p, &off, BTD, &k->xn2);
        carve(p, &off, b * T * (size_t)c->mlp_hidden, &k->hpre);
        carve(p, &off, b * T * (size_t)c->mlp_hidden, &k->hid);
    }
    carve(p, &off, BTD, &v->x_final);
    carve(p, &off, b * 2 * D, &v->pool_pre);
    return off;
}

/* y (M,N) = x (M,K) @ w^T (N,K) + bias: a Linear layer over M rows; y's rows are ldy apart.
 * accumulate adds to y (the residual stream) instead of overwriting it. */
static void linear_ld(float *y, int ldy, const float *x, const float *w, const float *bias, int M,
                      int N, int K, int accumulate) {
    if (bias && ldy == N) {
        if (accumulate) kernels_add_rows(y, bias, M, N);
        else kernels_fill_rows(y, bias, M, N);
    } else if (bias) { /* a slice of wider rows: LMSA's and LSLA's separate projections */
#pragma omp parallel for schedule(static)
        for (int r = 0; r < M; r++) {
            float *yr = y + (size_t)r * ldy;
            for (int i = 0; i < N; i++) yr[i] = accumulate ? yr[i] + bias[i] : bias[i];
        }
    }
    /* OpenBLAS splits a forward product over M and N only, never over K, so its threaded GEMM
     * gives the same bits at any thread count here (tests/test_threads.c checks it); only the
     * backward's reductions over the batch need kernels_gemm's fixed tiles, which cost the
     * forward 8-11% (repacking the weights per tile). */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, w, K,
                (accumulate || bias) ? 1.0f : 0.0f, y, ldy);
}

static void linear(float *y, const float *x, const float *w, const float *bias, int M, int N,
                   int K, int accumulate) {
    linear_ld(y, N, x, w, bias, M, N, K, accumulate);
}

void vit_linear(float *y, const float *x, const float *w, const float *bias, int M, int N, int K,
                int accumulate) {
    linear_ld(y, N, x, w, bias, M, N, K, accumulate);
}

/* im2col for a stride = kernel convolution. patches: (n, Np, C*P*P) in (c, ky, kx) order, the
 * order of the flattened conv weight. images: (n, C, S, S). */
void vit_patchify(float *patches, const float *images, int n, int C, int S, int P) {
    const int G = S / P, K = C * P * P;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int gy = 0; gy < G; gy++)
            for (int gx = 0; gx < G; gx++) {
                float *dst = patches + ((size_t)b * G * G + (size_t)gy * G + gx) * K;
                for (int ch = 0; ch < C; ch++)
                    for (int ky = 0; ky < P; ky++) {
                        const float *src = images + (((size_t)b * C + ch) * S + (size_t)gy * P + ky) * S + (size_t)gx * P;
                        memcpy(dst + ((size_t)ch * P + ky) * P, src, (size_t)P * sizeof(float));
                    }
            }
}

/* Where one block's per-head q, k and v live: head h of image b starts at
 * base + b * T * ld + h * width, rows ld apart. */
typedef struct {
    const float *base;
    int ld, width;
} head_view;

static const float *head_at(const head_view *v, int T, int b, int h) {
    return v->base + (size_t)b * T * v->ld + (size_t)h * v->width;
}

/* bias (T, T) of head h: a full (H, T, T) table, or a Swin relative ((2M-1)^2, H) table for
 * an M x M window: entry (i, j) is table[idx * H + h] with
 * idx = (yi - yj + M - 1) * (2M - 1) + (xi - xj + M - 1), Swin's relative_position_index. */
void vit_add_bias(float *A, const float *bias, vit_bias_kind kind, int H, int h, int T, int M) {
    if (kind == VIT_BIAS_FULL) {
        const float *bh = bias + (size_t)h * T * T;
        for (size_t i = 0; i < (size_t)T * T; i++) A[i] += bh[i];
    } else if (kind == VIT_BIAS_RELATIVE) {
        for (int i = 0; i < T; i++) {
            const int yi = i / M, xi = i % M;
            for (int yj = 0; yj < M; yj++) {
                /* along a key row idx falls by 1 per step in xj */
                const float *t = bias + ((size_t)(yi - yj + M - 1) * (2 * M - 1) + (size_t)(xi + M - 1)) * H + h;
                float *row = A + (size_t)i * T + (size_t)yj * M;
                for (int xj = 0; xj < M; xj++) row[xj] += t[-(ptrdiff_t)xj * H];
            }
        }
    }
}

/* MaiT: applies head h's mask to its (T, T) scores, row by row: for the query patch (qy, qx),
 * key rows of the grid more than r away are masked whole, the others outside [qx - r, qx + r].
 * Prefix tokens' rows and columns are never masked (the class token aggregates globally; a
 * covering mask equals no mask). alpha is read in soft mode only. */
void vit_mait_apply(float *A, const vit_attn *at, const float *alpha, int h, int T, int prefix,
                       int G) {
    const int r = at->mask_size[h] / 2;
    const int neg = at->mask_mode == VIT_MASK_NEG_INF;
    const float out = at->mask_mode == VIT_MASK_SOFT ? alpha[h] : 0.0f;
    for (int i = prefix; i < T; i++) {
        const int qy = (i - prefix) / G, qx = (i - prefix) % G;
        float *row = A + (size_t)i * T + prefix;
        for (int ky = 0; ky < G; ky++) {
            float *seg = row + (size_t)ky * G;
            const int near = ky >= qy - r && ky <= qy + r;
            const int x0 = near ? (qx - r > 0 ? qx - r : 0) : G, x1 = near ? (qx + r < G ? qx + r + 1 : G) : G;
            for (int kx = 0; kx < G; kx++) {
                if (kx >= x0 && kx < x1) continue;
                seg[kx] = neg ? -INFINITY : seg[kx] * out;
            }
        }
    }
}

/* Refiner on one image's maps: expanded[e] = sum_h W_e[e, h] A[h]; convolved[e] = the k x k
 * cross-correlation of expanded[e] with dla[e] (zero padding k/2, as Conv2d with groups = H');
 * A[h] = sum_e W_r[h, e] convolved[e]. */
static void refine(float *A, float *expanded, float *convolved, const vit_block_params *bp,
                   const vit_attn *at, int H, int T) {
    const int E = at->expanded_heads, k = at->kernel_size;
    const size_t TT = (size_t)T * T;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, E, (int)TT, H, 1.0f, bp->expand, H, A,
                (int)TT, 0.0f, expanded, (int)TT);
    /* the convolution tap by tap: each is a shifted axpy over contiguous row segments */
    for (int e = 0; e < E; e++) {
        const float *in = expanded + (size_t)e * TT, *w = bp->dla + (size_t)e * k * k;
        float *o = convolved + (size_t)e * TT;
        memset(o, 0, TT * sizeof(float));
        for (int u = 0; u < k; u++)
            for (int v = 0; v < k; v++) {
                const float wt = w[u * k + v];
                const vit_conv_tap c = vit_conv_tap_at(T, k, u, v);
                for (int i = c.i0; i < c.i1; i++) {
                    float *orow = o + (size_t)i * T;
                    const float *irow = in + (size_t)(i + c.dy) * T + c.dx;
                    for (int j = c.j0; j < c.j1; j++) orow[j] += wt * irow[j];
                }
            }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, H, (int)TT, E, 1.0f, bp->reduce, E,
                convolved, (int)TT, 0.0f, A, (int)TT);
}

/* Everything one block's attention needs besides its weights. */
typedef struct {
    int n, T, D, H, prefix, G;
    head_view q, k, v;     /* q.base NULL for less-attention */
    float *att;            /* (n, H, T, T) maps that multiply the values */
    float *scores, *q_out, *k_out, *extra[VIT_MAX_EXTRAS]; /* records, or NULL */
    const float *prev;     /* less-attention: the previous block's scores */
    float *keep;           /* scores for the next less-attention block, or NULL */
    float *soft;           /* Refiner in training: the softmax maps before refinement, or NULL */
    float *ao;             /* (n, T, D) output before proj */
} attn_job;

/* Scores to softmax of one (image, head) pair, leaving the map that multiplies the values in
 * A. Single-threaded BLAS: the pairs are spread over OpenMP threads. */
static void attn_head(const attn_job *j, const vit_config *c, int l, const vit_block_params *bp,
                      int b, int h) {
    const vit_attn *at = &c->attn[l];
    const int T = j->T, H = j->H, dq = vit_qk_head_dim(c, l);
    const size_t bh = (size_t)b * H + h, TT = (size_t)T * T;
    float *A = j->att + bh * TT;
    if (at->kind == VIT_ATTN_LESS) {
        /* A^l = Psi(Theta(A^{l-1})^T)^T = Psi A^{l-1} Theta^T, with Linear(T, T) maps */
        float *S = j->keep + bh * TT;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, T, 1.0f, j->prev + bh * TT, T,
                    bp->theta, T, 0.0f, A, T);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, T, T, 1.0f, bp->psi, T, A, T,
                    0.0f, S, T);
        memcpy(A, S, TT * sizeof(float));
    } else {
        const float *q = head_at(&j->q, T, b, h), *k = head_at(&j->k, T, b, h);
        const int dyn = at->kind == VIT_ATTN_LSLA && at->dynamic_scale;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, dq, dyn ? 1.0f : vit_attn_scale(c, l),
                    q, j->q.ld, k, j->k.ld, 0.0f, A, T);
        if (dyn)
            for (size_t i = 0; i < TT; i++) A[i] *= bp->ds[i];
        if (at->kind == VIT_ATTN_LSLA) vit_add_bias(A, bp->inner_bias, at->inner_bias, H, h, T, j->G);
        if (at->kind == VIT_ATTN_MAIT && h < VIT_MAX_MASK_HEADS && at->mask_size[h])
            vit_mait_apply(A, at, bp->mask_alpha, h, T, j->prefix, j->G);
        if (j->keep) memcpy(j->keep + bh * TT, A, TT * sizeof(float));
        for (int t = 0; t < T && (j->q_out || j->k_out); t++) {
            if (j->q_out) memcpy(j->q_out + (bh * T + t) * dq, q + (size_t)t * j->q.ld, (size_t)dq * sizeof(float));
            if (j->k_out) memcpy(j->k_out + (bh * T + t) * dq, k + (size_t)t * j->k.ld, (size_t)dq * sizeof(float));
        }
    }
    if (j->scores) memcpy(j->scores + bh * TT, A, TT * sizeof(float));
    kernels_softmax_rows(A, T, T);
    if (at->kind == VIT_ATTN_LSLA) {
        if (j->extra[0]) memcpy(j->extra[0] + bh * TT, A, TT * sizeof(float));
        vit_add_bias(A, bp->outer_bias, at->outer_bias, H, h, T, j->G);
    }
}

static void attn_values(const attn_job *j, int b, int h) {
    const int T = j->T, dv = j->D / j->H;
    const float *A = j->att + ((size_t)b * j->H + h) * T * T;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, dv, T, 1.0f, A, T,
                head_at(&j->v, T, b, h), j->v.ld, 0.0f, j->ao + (size_t)b * T * j->D + (size_t)h * dv, j->D);
}

/* One block's attention for n images: projections of xn into acts->qkv, the mechanism, and
 * the output before proj in acts->ao. */
static void attention(const vit_config *c, int l, const vit_block_params *bp, vit_acts *a,
                      int n, const vit_record *rec, int next_is_less) {
    const vit_attn *at = &c->attn[l];
    const int D = c->embed_dim, H = c->num_heads, T = vit_num_tokens(c), M = n * T, hd = D / H;
    attn_job j = {.n = n, .T = T, .D = D, .H = H, .prefix = vit_num_prefix(c), .G = vit_grid(c),
                  .ao = a->ao};
    switch (at->kind) {
    case VIT_ATTN_LMSA: {
        const int Q = at->qk_dim, W = 2 * Q + D;
        linear_ld(a->qkv, W, a->xn, bp->q_w, bp->q_b, M, Q, D, 0);
        linear_ld(a->qkv + Q, W, a->xn, bp->k_w, bp->k_b, M, Q, D, 0);
        linear_ld(a->qkv + 2 * Q, W, a->xn, bp->v_w, bp->v_b, M, D, D, 0);
        j.q = (head_view){a->qkv, W, Q / H};
        j.k = (head_view){a->qkv + Q, W, Q / H};
        j.v = (head_view){a->qkv + 2 * Q, W, hd};
        break;
    }
    case VIT_ATTN_LSLA: {
        const int W = at->value_proj ? 2 * D : D;
        linear_ld(a->qkv, W, a->xn, bp->q_w, bp->q_b, M, D, D, 0);
        if (at->value_proj) linear_ld(a->qkv + D, W, a->xn, bp->v_w, bp->v_b, M, D, D, 0);
        j.q = (head_view){a->qkv, W, hd};
        j.k = (head_view){a->xn, D, hd}; /* keys are x itself, split into heads */
        j.v = at->value_proj ? (head_view){a->qkv + D, W, hd} : j.k;
        break;
    }
    case VIT_ATTN_LESS:
        linear(a->qkv, a->xn, bp->v_w, bp->v_b, M, D, D, 0);
        j.v = (head_view){a->qkv, D, hd};
        j.prev = a->keep[(l + 1) & 1];
        break;
    default:
        linear(a->qkv, a->xn, bp->qkv_w, bp->qkv_b, M, 3 * D, D, 0);
        j.q = (head_view){a->qkv, 3 * D, hd};
        j.k = (head_view){a->qkv + D, 3 * D, hd};
        j.v = (head_view){a->qkv + 2 * D, 3 * D, hd};
        break;
    }
    float *att = rec_layer(rec->attn, l);
    j.att = att ? att : a->att;
    j.scores = rec_layer(rec->scores, l);
    j.q_out = rec_layer(rec->q, l);
    j.k_out = rec_layer(rec->k, l);
    const int refiner = at->kind == VIT_ATTN_REFINER;
    for (int i = 0; i < VIT_MAX_EXTRAS; i++) {
        float *r = rec_layer(rec->extra[i], l);
        /* Refiner needs its intermediate maps; LSLA's copy is only made when recorded */
        j.extra[i] = vit_extra_info(c, l, i, NULL) ? (r ? r : (refiner || a->tape) ? a->ext[i] : NULL) : NULL;
    }
    if (next_is_less || at->kind == VIT_ATTN_LESS) j.keep = a->keep[l & 1];
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < n * H; bh++) {
        attn_head(&j, c, l, bp, bh / H, bh % H);
        if (!refiner) attn_values(&j, bh / H, bh % H);
    }
    if (!refiner) return;
    const size_t E = (size_t)at->expanded_heads, TT = (size_t)T * T;
    if (a->tape) memcpy(a->tape->blk[l].soft, j.att, (size_t)n * H * TT * sizeof(float));
#pragma omp parallel for schedule(dynamic, 1)
    for (int b = 0; b < n; b++)
        refine(j.att + (size_t)b * H * TT, j.extra[0] + (size_t)b * E * TT,
               j.extra[1] + (size_t)b * E * TT, bp, at, H, T);
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < n * H; bh++) attn_values(&j, bh / H, bh % H);
}


void vit_forward(const vit_config *c, const vit_params *p, vit_acts *a, const float *images,
                 int n, const vit_record *rec) {
    if (c->n_stages > 0) {
        vit_stage_forward(c, p, a, images, n, rec);
        return;
    }
    assert(n >= 1 && n <= a->B);
    const int D = c->embed_dim, T = vit_num_tokens(c), Np = vit_num_patches(c);
    const int P = c->patch_size, Cin = c->in_chans, K = Cin * P * P, Hm = c->mlp_hidden;
    const int prefix = vit_num_prefix(c), M = n * T;
    const vit_record none = {0};
    if (!rec) rec = &none;

    /* patch embedding: a GEMM per image so its rows land after the prefix tokens */
    vit_patchify(a->patches, images, n, Cin, c->img_size, P);
    for (int b = 0; b < n; b++) {
        float *xb = a->x + (size_t)b * T * D;
        linear(xb + (size_t)prefix * D, a->patches + (size_t)b * Np * K, p->patch_w, p->patch_b,
               Np, D, K, 0);
        if (c->class_token) memcpy(xb, p->cls_token, (size_t)D * sizeof(float));
        if (c->distilled) memcpy(xb + D, p->dist_token, (size_t)D * sizeof(float));
        for (size_t i = 0; i < (size_t)T * D; i++) xb[i] += p->pos_embed[i];
    }

    const size_t MD = (size_t)M * D * sizeof(float);
    assert(!a->tape || rec == &none);
    for (int l = 0; l < c->depth; l++) {
        const vit_block_params *bp = &p->blocks[l];
        /* a training forward gives every block its own buffers (the tape) */
        vit_acts la = *a;
        float *hpre = a->hid, *xn2 = a->xn;
        if (a->tape) {
            const vit_tape_block *t = &a->tape->blk[l];
            memcpy(t->x_in, a->x, MD);
            la.xn = t->xn1;
            la.qkv = t->qkv;
            la.att = t->att;
            la.ao = t->ao;
            for (int i = 0; i < VIT_MAX_EXTRAS; i++) la.ext[i] = t->ext[i];
            la.keep[l & 1] = t->keep;
            la.keep[(l + 1) & 1] = l > 0 ? a->tape->blk[l - 1].keep : NULL;
            hpre = t->hpre;
            xn2 = t->xn2;
        }
        kernels_layernorm(la.xn, a->x, bp->norm1_w, bp->norm1_b, M, D, c->ln_eps);
        attention(c, l, bp, &la, n, rec, l + 1 < c->depth && c->attn[l + 1].kind == VIT_ATTN_LESS);
        if (bp->proj_w) linear(a->x, la.ao, bp->proj_w, bp->proj_b, M, D, D, 1); /* x += proj(ao) */
        else for (size_t i = 0; i < (size_t)M * D; i++) a->x[i] += la.ao[i];   /* LSLA's NP */
        if (a->tape) memcpy(a->tape->blk[l].x_mid, a->x, MD);
        kernels_layernorm(xn2, a->x, bp->norm2_w, bp->norm2_b, M, D, c->ln_eps);
        linear(hpre, xn2, bp->fc1_w, bp->fc1_b, M, Hm, D, 0);
        float *hid = a->tape ? a->tape->blk[l].hid : a->hid; /* training keeps fc1's output */
        kernels_gelu_to(hid, hpre, (size_t)M * Hm);
        linear(a->x, hid, bp->fc2_w, bp->fc2_b, M, D, Hm, 1); /* x += fc2(gelu(fc1(xn))) */
        float *tok = rec_layer(rec->tokens, l);
        if (tok) memcpy(tok, a->x, (size_t)M * D * sizeof(float));
    }
    if (a->tape) memcpy(a->tape->x_final, a->x, MD);

    /* head: timm's forward_head. Pool, with the final norm before (norm) or after (fc_norm). */
    const int nout = c->distilled ? 2 : 1;
    for (int b = 0; b < n; b++) {
        float *xb = a->x + (size_t)b * T * D, *pb = a->pooled + (size_t)b * 2 * D;
        if (c->global_pool == VIT_POOL_TOKEN) {
            if (c->fc_norm) memcpy(pb, xb, (size_t)nout * D * sizeof(float));
            else kernels_layernorm(pb, xb, p->norm_w, p->norm_b, nout, D, c->ln_eps);
        } else {
            if (!c->fc_norm) kernels_layernorm(xb, xb, p->norm_w, p->norm_b, T, D, c->ln_eps);
            for (int i = 0; i < D; i++) {
                double s = 0;
                for (int t = prefix; t < T; t++) s += xb[(size_t)t * D + i];
                pb[i] = (float)(s / Np);
            }
        }
        if (c->fc_norm) {
            const int rows = c->global_pool == VIT_POOL_TOKEN ? nout : 1;
            if (a->tape) memcpy(a->tape->pool_pre + (size_t)b * 2 * D, pb, (size_t)rows * D * sizeof(float));
            kernels_layernorm(pb, pb, p->norm_w, p->norm_b, rows, D, c->ln_eps);
        }
    }
    const int C = c->num_classes;
    if (C <= 0) return;
    /* pooled rows are (B, 2, D): the class token's row, then the distillation token's */
    for (int b = 0; b < n; b++) {
        float *lg = a->logits + (size_t)b * C;
        const float *pb = a->pooled + (size_t)b * 2 * D;
        if (!c->distilled) {
            memcpy(lg, p->head_b, (size_t)C * sizeof(float));
            cblas_sgemv(CblasRowMajor, CblasNoTrans, C, D, 1.0f, p->head_w, D, pb, 1, 1.0f, lg, 1);
            continue;
        }
        /* timm's VisionTransformerDistilled in eval: (head(x_cls) + head_dist(x_dist)) / 2 */
        for (int i = 0; i < C; i++) lg[i] = 0.5f * (p->head_b[i] + p->head_dist_b[i]);
        cblas_sgemv(CblasRowMajor, CblasNoTrans, C, D, 0.5f, p->head_w, D, pb, 1, 1.0f, lg, 1);
        cblas_sgemv(CblasRowMajor, CblasNoTrans, C, D, 0.5f, p->head_dist_w, D, pb + D, 1, 1.0f,
                    lg, 1);
    }
}

int vit_resample_pos_embed(float *out, const float *in, int prefix, int gs_in, int gs_out, int D) {
    memcpy(out, in, (size_t)prefix * D * sizeof(float));
    const float *src = in + (size_t)prefix * D;
    float *dst = out + (size_t)prefix * D;
    int *b;
    double *w;
    const int ks = resample_weights(gs_in, gs_out, VIT_INTERP_BICUBIC, &b, &w);
    float *tmp = malloc((size_t)gs_in * gs_out * D * sizeof *tmp); /* (gs_in, gs_out, D) */
    if (!ks || !tmp) {
        free(tmp);
        if (ks) {
            free(b);
            free(w);
        }
        return 0;
    }
    /* width first, then height, as PyTorch's separable kernel; accumulate in double */
    for (int y = 0; y < gs_in; y++)
        for (int x = 0; x < gs_out; x++)
            for (int d = 0; d < D; d++) {
                double s = 0;
                for (int j = 0; j < b[2 * x + 1]; j++)
                    s += w[(size_t)x * ks + j] * src[((size_t)y * gs_in + b[2 * x] + j) * D + d];
                tmp[((size_t)y * gs_out + x) * D + d] = (float)s;
            }
    for (int y = 0; y < gs_out; y++)
        for (int x = 0; x < gs_out; x++)
            for (int d = 0; d < D; d++) {
                double s = 0;
                for (int j = 0; j < b[2 * y + 1]; j++)
                    s += w[(size_t)y * ks + j] * tmp[((size_t)(b[2 * y] + j) * gs_out + x) * D + d];
                dst[((size_t)y * gs_out + x) * D + d] = (float)s;
            }
    free(tmp);
    free(b);
    free(w);
    return 1;
}

int vit_extra_info(const vit_config *c, int l, int i, vit_extra *out) {
    const vit_attn *at = &c->attn[l];
    vit_extra x = {0};
    if (at->kind == VIT_ATTN_LSLA && i == 0)
        x = (vit_extra){"attn_softmax", c->num_heads,
                        "softmax of the scores, before the outer bias is added"};
    else if (at->kind == VIT_ATTN_REFINER && i == 0)
        x = (vit_extra){"attn_expanded", at->expanded_heads,
                        "expansion: expand.weight (H', H) applied across the heads' softmax maps"};
    else if (at->kind == VIT_ATTN_REFINER && i == 1)
        x = (vit_extra){"attn_convolved", at->expanded_heads,
                        "the expanded maps after the head-wise k x k convolution (dla.weight)"};
    else
        return 0;
    if (out) *out = x;
    return 1;
}

/* How a static tensor is made: a copy of a block weight, or computed from the config. */
typedef enum { STATIC_COPY, STATIC_MASK, STATIC_INNER, STATIC_OUTER } static_how;
typedef struct {
    vit_static pub;
    static_how how;
    size_t weight; /* STATIC_COPY: offsetof the const float * in vit_block_params */
} static_entry;

/* Every static tensor of block l, in order; returns the count (at most 4). */
static int statics_of(const vit_config *c, int l, static_entry *v) {
    const vit_attn *at = &c->attn[l];
    const int T = vit_num_tokens(c), H = c->num_heads, E = at->expanded_heads, k = at->kernel_size;
    int n = 0;
#define ST(how, field, nm, d, s0, s1, s2, desc) \
    v[n++] = (static_entry){{nm, d, {s0, s1, s2}, desc}, how, offsetof(vit_block_params, field)}
    switch (at->kind) {
    case VIT_ATTN_LSLA:
        if (at->dynamic_scale) ST(STATIC_COPY, ds, "ds", 2, T, T, 0, "dynamic scale DS multiplying q x^T (shared by the heads)");
        if (at->inner_bias) ST(STATIC_INNER, inner_bias, "inner_bias", 3, H, T, T, "B_inner added before the softmax, as a full table per head");
        if (at->outer_bias) ST(STATIC_OUTER, outer_bias, "outer_bias", 3, H, T, T, "B_outer added after the softmax, as a full table per head");
        break;
    case VIT_ATTN_LESS:
        ST(STATIC_COPY, theta, "theta", 2, T, T, 0, "Theta: Linear(T, T) applied to the previous scores' rows");
        ST(STATIC_COPY, psi, "psi", 2, T, T, 0, "Psi: Linear(T, T) applied to the columns after Theta");
        break;
    case VIT_ATTN_MAIT:
        ST(STATIC_MASK, mask_alpha, "mask", 3, H, T, T, "1 where the score is kept, 0 where the mask applies (see mask_mode)");
        if (at->mask_mode == VIT_MASK_SOFT) ST(STATIC_COPY, mask_alpha, "mask_alpha", 1, H, 0, 0, "soft mask value per head");
        break;
    case VIT_ATTN_REFINER:
        ST(STATIC_COPY, expand, "expand", 2, E, H, 0, "attention expansion (H', H)");
        ST(STATIC_COPY, dla, "dla", 3, E, k, k, "head-wise convolution kernels (distributed local attention)");
        ST(STATIC_COPY, reduce, "reduce", 2, H, E, 0, "attention reduction (H, H')");
        break;
    default: break;
    }
#undef ST
    return n;
}

int vit_static_info(const vit_config *c, int l, int i, vit_static *out) {
    static_entry v[4];
    const int n = statics_of(c, l, v);
    if (i < 0 || i >= n) return 0;
    if (out) *out = v[i].pub;
    return 1;
}

void vit_static_fill(const vit_config *c, const vit_params *p, int l, int i, float *out) {
    static_entry v[4];
    if (i < 0 || i >= statics_of(c, l, v)) return;
    const vit_block_params *bp = &p->blocks[l];
    const vit_attn *at = &c->attn[l];
    const int T = vit_num_tokens(c), H = c->num_heads, G = vit_grid(c);
    const size_t TT = (size_t)T * T;
    size_t count = 1;
    for (int d = 0; d < v[i].pub.ndim; d++) count *= (size_t)v[i].pub.shape[d];
    switch (v[i].how) {
    case STATIC_COPY:
        memcpy(out, *(const float *const *)(const void *)((const char *)bp + v[i].weight), count * sizeof(float));
        break;
    case STATIC_MASK: { /* the rule the scores get, applied to ones in the paper's zero mode */
        vit_attn zero = *at;
        zero.mask_mode = VIT_MASK_ZERO;
        for (size_t e = 0; e < count; e++) out[e] = 1.0f;
        for (int h = 0; h < H && h < VIT_MAX_MASK_HEADS; h++)
            if (at->mask_size[h]) vit_mait_apply(out + (size_t)h * TT, &zero, NULL, h, T, vit_num_prefix(c), G);
        break;
    }
    default: { /* full (H, T, T) tables of either parametrisation */
        const int inner = v[i].how == STATIC_INNER;
        memset(out, 0, count * sizeof(float));
        for (int h = 0; h < H; h++)
            vit_add_bias(out + (size_t)h * TT, inner ? bp->inner_bias : bp->outer_bias,
                     inner ? at->inner_bias : at->outer_bias, H, h, T, G);
        break;
    }
    }
}

int vit_params_check(const vit_config *c, const vit_params *p, char *msg, size_t n) {
    for (int l = 0; l < c->depth; l++) {
        const float *al = p->blocks[l].mask_alpha;
        if (c->attn[l].kind != VIT_ATTN_MAIT || !al) continue;
        for (int h = 0; h < c->num_heads; h++)
            if (!(al[h] > 0.0f && al[h] < 1.0f)) {
                snprintf(msg, n, "blocks.%d.attn.mask_alpha[%d] = %g is outside (0, 1): soft "
                         "masks scale masked scores by a value strictly between 0 and 1", l, h,
                         (double)al[h]);
                return 0;
            }
    }
    return 1;
}
