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

#include "gemm.h"
#include "kernels.h"
#include "attn_ops.h"
#include "mech.h"
#include "resample.h"
#include "cait.h"
#include "stage.h"
#include "vitfam.h"
#include "stem.h"

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
        s->buffer = 0;
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
    if (c->n_stem) {
        vit_spec_sink sink = {specs, max, &n, ""};
        vit_stem_specs(c, p, &sink);
    } else {
        SPEC(&p->patch_w, "patch_embed.proj.weight", 0, D, c->in_chans, P, P);
        if (!c->pre_norm) SPEC(&p->patch_b, "patch_embed.proj.bias", 0, D); /* timm: bias=not pre_norm */
    }
    if (c->class_token) SPEC(&p->cls_token, "cls_token", 0, 1, 1, D);
    if (c->distilled) SPEC(&p->dist_token, "dist_token", 0, 1, 1, D);
    if (c->reg_tokens) SPEC(&p->reg_token, "reg_token", 0, 1, c->reg_tokens, D);
    SPEC(&p->pos_embed, "pos_embed", 0, 1, vit_pos_embed_len(c), D);
    if (n - 1 < max) specs[n - 1].is_pos_embed = 1;
    if (c->pre_norm) {
        SPEC(&p->norm_pre_w, "norm_pre.weight", 0, D);
        SPEC(&p->norm_pre_b, "norm_pre.bias", 0, D);
    }
    for (int l = 0; l < c->depth && l < VIT_MAX_DEPTH; l++) {
        vit_block_params *b = &p->blocks[l];
        const vit_attn *at = &c->attn[l];
        SPEC(&b->norm1_w, "blocks.%d.norm1.weight", l, D);
        SPEC(&b->norm1_b, "blocks.%d.norm1.bias", l, D);
        /* the mechanism's tensors under the block's prefix, then the output projection */
        const vit_mech *m = vit_mech_of(c, l);
        vit_spec_sink sink = {specs, max, &n, ""};
        snprintf(sink.prefix, sizeof sink.prefix, "blocks.%d", l);
        vit_geom g;
        vit_mech_block mb;
        vit_mech_block_at(&mb, c, l, NULL, &g);
        m->specs(&mb, b, &sink);
        if (!m->has_proj || m->has_proj(at)) {
            SPEC(&b->proj_w, "blocks.%d.attn.proj.weight", l, D, D);
            SPEC(&b->proj_b, "blocks.%d.attn.proj.bias", l, D);
        }
        if (c->init_values > 0) SPEC(&b->ls1, "blocks.%d.ls1.gamma", l, D);
        SPEC(&b->norm2_w, "blocks.%d.norm2.weight", l, D);
        SPEC(&b->norm2_b, "blocks.%d.norm2.bias", l, D);
        SPEC(&b->fc1_w, "blocks.%d.mlp.fc1.weight", l, Hm, D);
        SPEC(&b->fc1_b, "blocks.%d.mlp.fc1.bias", l, Hm);
        SPEC(&b->fc2_w, "blocks.%d.mlp.fc2.weight", l, D, Hm);
        SPEC(&b->fc2_b, "blocks.%d.mlp.fc2.bias", l, D);
        if (c->init_values > 0) SPEC(&b->ls2, "blocks.%d.ls2.gamma", l, D);
        if (c->mlp_scale > 0) SPEC(&b->ls2, "blocks.%d.mlp.scale_channel", l, D); /* Refiner release */
    }
    if (c->global_pool == VIT_POOL_MAP) { /* timm's AttentionPoolLatent (qkv_bias always) */
        SPEC(&p->pool.latent, "attn_pool.latent", 0, 1, 1, D);
        SPEC(&p->pool.q_w, "attn_pool.q.weight", 0, D, D);
        SPEC(&p->pool.q_b, "attn_pool.q.bias", 0, D);
        SPEC(&p->pool.kv_w, "attn_pool.kv.weight", 0, 2 * D, D);
        SPEC(&p->pool.kv_b, "attn_pool.kv.bias", 0, 2 * D);
        SPEC(&p->pool.proj_w, "attn_pool.proj.weight", 0, D, D);
        SPEC(&p->pool.proj_b, "attn_pool.proj.bias", 0, D);
        SPEC(&p->pool.norm_w, "attn_pool.norm.weight", 0, D);
        SPEC(&p->pool.norm_b, "attn_pool.norm.bias", 0, D);
        SPEC(&p->pool.fc1_w, "attn_pool.mlp.fc1.weight", 0, Hm, D);
        SPEC(&p->pool.fc1_b, "attn_pool.mlp.fc1.bias", 0, Hm);
        SPEC(&p->pool.fc2_w, "attn_pool.mlp.fc2.weight", 0, D, Hm);
        SPEC(&p->pool.fc2_b, "attn_pool.mlp.fc2.bias", 0, D);
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
        if (c->aux_head > 0) {
            SPEC(&p->aux_head_w, "aux_head.weight", 0, C, D);
            SPEC(&p->aux_head_b, "aux_head.bias", 0, C);
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
        vit_mech_layout lay;
        vit_mech_of(c, l)->layout(c, l, &lay);
        if ((size_t)lay.W > *W) *W = (size_t)lay.W;
        for (int i = 0; i < VIT_MAX_EXTRAS; i++) {
            vit_extra x;
            if (vit_extra_info(c, l, i, &x) && (size_t)x.heads > *E) *E = (size_t)x.heads;
        }
    }
}

/* Rounds every view up to 64 bytes so that each starts on a cache line. */
size_t vit_carve_floats(char *base, size_t *off, size_t nfloats, float **view) {
    size_t bytes = (nfloats * sizeof(float) + 63) & ~(size_t)63;
    if (base && view) *view = (float *)(base + *off);
    *off += bytes;
    return bytes;
}

void vit_carve_tape_tail(char *base, size_t *off, vit_tape_block *k, size_t rows, size_t D, size_t Hm, int ls) {
    vit_carve_floats(base, off, rows * D, &k->ao);
    vit_carve_floats(base, off, rows * D, &k->x_mid);
    vit_carve_floats(base, off, rows * D, &k->xn2);
    vit_carve_floats(base, off, rows * Hm, &k->hpre);
    vit_carve_floats(base, off, rows * Hm, &k->hid);
    for (int i = 0; i < 2 && ls; i++) vit_carve_floats(base, off, rows * D, &k->branch[i]);
}

size_t vit_acts_carve(const vit_config *c, int B, void *base, vit_acts *a) {
    if (c->n_stages > 0) return vit_stage_acts_carve(c, B, base, a);
    const size_t T = (size_t)vit_num_tokens(c), D = (size_t)c->embed_dim, H = (size_t)c->num_heads;
    const size_t Np = (size_t)vit_num_patches(c);
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
    vit_stem_need z;
    vit_stem_need_of(c, &z);
    const size_t K = (size_t)c->in_chans * c->patch_size * c->patch_size;
    vit_carve_floats(p, &off, c->n_stem ? b * z.col0 : b * Np * K, &v->patches);
    vit_stem_acts_carve(c, B, p, &off, v);
    vit_carve_floats(p, &off, b * T * D, &v->x);
    vit_carve_floats(p, &off, b * T * D, &v->xn);
    size_t W, E;
    vit_widths(c, &W, &E);
    vit_carve_floats(p, &off, b * T * W, &v->qkv);
    vit_carve_floats(p, &off, b * H * T * T, &v->att);
    const int less = vit_mech_any(c, VIT_MECH_REUSES_SCORES | VIT_MECH_CARRY);
    for (int i = 0; i < 2; i++) {
        v->keep[i] = v->ext[i] = NULL;
        if (less) vit_carve_floats(p, &off, b * H * T * T, &v->keep[i]);
        if (E) vit_carve_floats(p, &off, b * E * T * T, &v->ext[i]);
    }
    vit_carve_floats(p, &off, b * T * D, &v->ao);
    vit_carve_floats(p, &off, b * T * (size_t)c->mlp_hidden, &v->hid);
    vit_carve_floats(p, &off, b * 2 * D, &v->pooled);
    vit_carve_floats(p, &off, b * (size_t)(c->num_classes > 0 ? c->num_classes : 1), &v->logits);
    if (c->global_pool == VIT_POOL_MAP) vit_carve_floats(p, &off, vitfam_map_scratch(c), &v->scratch); /* one image's pool */
    if (c->aux_head > 0) vit_carve_floats(p, &off, vitfam_aux_scratch(c), &v->scratch); /* one image's aux scores */
    return off;
}

size_t vit_tape_carve(const vit_config *c, int B, void *base, vit_tape *t) {
    if (c->n_stages > 0) return vit_stage_tape_carve(c, B, base, t); /* core/stage_train.c */
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
        const vit_mech *m = vit_mech_of(c, l);
        vit_carve_floats(p, &off, BTD, &k->x_in);
        vit_carve_floats(p, &off, BTD, &k->xn1);
        vit_carve_floats(p, &off, b * T * W, &k->qkv);
        vit_carve_floats(p, &off, maps, &k->att);
        if (m->maps) vit_carve_floats(p, &off, maps, &k->soft);
        for (int i = 0; i < VIT_MAX_EXTRAS; i++) {
            vit_extra x;
            if (vit_extra_info(c, l, i, &x)) vit_carve_floats(p, &off, b * (size_t)x.heads * T * T, &k->ext[i]);
        }
        if (vit_mech_reads_prev(c, l) || vit_mech_next_reuses(c, l)) vit_carve_floats(p, &off, maps, &k->keep);
        vit_carve_tape_tail(p, &off, k, b * T, (size_t)D, (size_t)c->mlp_hidden, vitfam_branch_kept(c));
    }
    if (c->pre_norm) vit_carve_floats(p, &off, BTD, &v->embed);
    vit_carve_floats(p, &off, BTD, &v->x_final);
    vit_carve_floats(p, &off, b * 2 * D, &v->pool_pre);
    vit_stem_tape_carve(c, B, p, &off, v);
    return off;
}

/* y (M,N) = x (M,K) @ w^T (N,K) + bias: a Linear layer over M rows; y's rows are ldy apart.
 * accumulate adds to y (the residual stream) instead of overwriting it. */
static void linear_ld(float *y, int ldy, const float *x, const float *w, const float *bias, int M,
                      int N, int K, int accumulate) {
    if (vit_gemm_linear(y, ldy, x, w, bias, M, N, K, accumulate)) return; /* prepacked weights */
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
    /* kernels_gemm's fixed tiles, not OpenBLAS's own threading: that gives other bits at other
     * thread counts for inner dimensions over its GEMM_Q (384 with the Cooperlake/SkylakeX
     * kernels: PVT v2's 3x3 downsampling of 48 channels has 432) and at every size with
     * OPENBLAS_CORETYPE=Haswell (tests/test_threads.c). */
    kernels_gemm(0, 1, M, N, K, 1.0f, x, K, w, K, (accumulate || bias) ? 1.0f : 0.0f, y, ldy);
}

static void linear(float *y, const float *x, const float *w, const float *bias, int M, int N,
                   int K, int accumulate) {
    linear_ld(y, N, x, w, bias, M, N, K, accumulate);
}

void vit_linear(float *y, const float *x, const float *w, const float *bias, int M, int N, int K,
                int accumulate) {
    linear_ld(y, N, x, w, bias, M, N, K, accumulate);
}

void vit_linear_ld(float *y, int ldy, const float *x, const float *w, const float *bias, int M, int N,
                   int K, int accumulate) {
    linear_ld(y, ldy, x, w, bias, M, N, K, accumulate);
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

float vit_bias_at(const float *bias, vit_bias_kind kind, int H, int h, int T, int M, int i, int j) {
    if (kind == VIT_BIAS_FULL) return bias[((size_t)h * T + i) * T + j];
    if (kind != VIT_BIAS_RELATIVE) return 0.0f;
    const int yi = i / M, xi = i % M, yj = j / M, xj = j % M;
    return bias[((size_t)(yi - yj + M - 1) * (2 * M - 1) + (size_t)(xi - xj + M - 1)) * H + h];
}

void vit_add_bias_backward(float *gbias, const float *g, vit_bias_kind kind, int H, int h, int T, int M) {
    if (kind == VIT_BIAS_FULL) {
        float *gh = gbias + (size_t)h * T * T;
        for (size_t i = 0; i < (size_t)T * T; i++) gh[i] += g[i];
    } else if (kind == VIT_BIAS_RELATIVE) {
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++) {
                const int yi = i / M, xi = i % M, yj = j / M, xj = j % M;
                const size_t idx = (size_t)(yi - yj + M - 1) * (2 * M - 1) + (size_t)(xi - xj + M - 1);
                gbias[idx * H + h] += g[(size_t)i * T + j];
            }
    }
}

void vit_relative_bias_expand(float *out, const float *table, int H, int M) {
    const size_t NN = (size_t)M * M * M * M;
    memset(out, 0, (size_t)H * NN * sizeof(float));
    for (int h = 0; h < H; h++) vit_add_bias(out + (size_t)h * NN, table, VIT_BIAS_RELATIVE, H, h, M * M, M);
}

/* Everything one block's attention needs besides its weights. */
typedef struct {
    const vit_mech *m;
    const vit_mech_block *mb;
    int n, T, D, H, prefix, gh, gw, dq;
    float scale;           /* of q k^T */
    head_view q, k, v;     /* q.base NULL without keys (less-attention) */
    float *att;            /* (n, H, T, T) maps that multiply the values */
    int att_recorded;      /* att is the float32 record (not scratch) */
    float *kT;             /* fused problems: (n, H) keys packed by kernels_attn_pack_k */
    uint16_t *att16;       /* (n, H, T, T) their binary16 record, or NULL; heads att16_stride apart */
    size_t att16_stride;
    float *scores, *q_out, *k_out, *extra[VIT_MAX_EXTRAS]; /* records, or NULL */
    const float *prev;     /* reuse mechanisms: the previous block's scores */
    float *keep;           /* scores for the next reuse block, or NULL */
    float *ao;             /* (n, T, D) output before proj */
} attn_job;

/* The q and k records of tokens [t0, t1) of problem (b, h), where they are asked for. */
static void record_qk_rows(const attn_job *j, int b, int h, int t0, int t1) {
    const int T = j->T, dq = j->dq;
    const size_t bh = (size_t)b * j->H + h;
    const float *q = head_at(&j->q, T, b, h), *k = head_at(&j->k, T, b, h);
    for (int t = t0; t < t1 && (j->q_out || j->k_out); t++) {
        if (j->q_out) memcpy(j->q_out + (bh * T + t) * dq, q + (size_t)t * j->q.ld, (size_t)dq * sizeof(float));
        if (j->k_out) memcpy(j->k_out + (bh * T + t) * dq, k + (size_t)t * j->k.ld, (size_t)dq * sizeof(float));
    }
}

/* GLOBAL scope: the problem of image b, head h (all T tokens), its q/k records, then the
 * frame's per-problem step. The mechanism's hooks run per problem, never per element.
 * Single-threaded BLAS: the problems are spread over OpenMP threads. */
static void attn_head(const attn_job *j, int b, int h) {
    const vit_mech *m = j->m;
    const int T = j->T, H = j->H, dq = j->dq;
    const size_t bh = (size_t)b * H + h, TT = (size_t)T * T;
    float *A = j->att + bh * TT;
    vit_attn_problem p = {.Tq = T, .Tk = T, .prefix = j->prefix, .gh = j->gh, .gw = j->gw,
                          .H = H, .h = h, .dq = dq, .scale = j->scale,
                          .v = head_at(&j->v, T, b, h), .ldq = j->q.ld, .ldk = j->k.ld, .ldv = j->v.ld,
                          .prev = j->prev ? j->prev + bh * TT : NULL,
                          .keep = j->keep ? j->keep + bh * TT : NULL};
    for (int i = 0; i < VIT_MAX_EXTRAS && !m->maps; i++) /* per-head extras (not map work's) */
        p.extra[i] = j->extra[i] ? j->extra[i] + bh * TT : NULL;
    if (j->q.base) {
        p.q = head_at(&j->q, T, b, h);
        p.k = head_at(&j->k, T, b, h);
        record_qk_rows(j, b, h, 0, T);
    }
    vit_mech_problem_forward(m, j->mb, &p, A, j->scores ? j->scores + bh * TT : NULL);
}

/* Rows [r0, r1) of problem (b, h) of a plain mechanism in kernels_attn_rows: the q/k records of
 * those tokens, scores, softmax, the map's records and the product with the values. The map is
 * written only when recorded in float32. Returns 0 when the kernel could not run (no memory). */
static int attn_rows_fused(const attn_job *j, int b, int h, int r0, int r1) {
    const int T = j->T, H = j->H, dq = j->dq;
    const size_t bh = (size_t)b * H + h, TT = (size_t)T * T;
    record_qk_rows(j, b, h, r0, r1);
    const int dv = j->D / H;
    kernels_attn x = {.q = head_at(&j->q, T, b, h), .kT = j->kT + bh * kernels_attn_kt_floats(T, dq), .v = head_at(&j->v, T, b, h),
                      .ldq = j->q.ld, .ldv = j->v.ld,
                      .ldo = j->D, .Tq = T, .Tk = T, .dq = dq, .dv = dv, .scale = j->scale,
                      .o = j->ao + (size_t)b * T * j->D + (size_t)h * dv,
                      .scores = j->scores ? j->scores + bh * TT : NULL, .keep = j->keep ? j->keep + bh * TT : NULL,
                      .A = j->att_recorded ? j->att + bh * TT : NULL,
                      .a16 = j->att16 ? j->att16 + bh * j->att16_stride : NULL};
    return kernels_attn_rows(&x, r0, r1);
}

/* The product of problem (b, h)'s final map with the values, and the map's binary16 record
 * while the map is still in cache. */
static void attn_values(const attn_job *j, int b, int h) {
    const int T = j->T, dv = j->D / j->H;
    const size_t at = ((size_t)b * j->H + h) * T * T;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, dv, T, 1.0f, j->att + at, T,
                head_at(&j->v, T, b, h), j->v.ld, 0.0f, j->ao + (size_t)b * T * j->D + (size_t)h * dv, j->D);
    if (j->att16)
        kernels_f32_to_f16_array(j->att16 + ((size_t)b * j->H + h) * j->att16_stride, j->att + at, (size_t)T * T);
}

/* Block l of a monolithic ViT runs in kernels_attn_rows in an inference forward with a pack. */
static int fused_block(const vit_config *c, int l) {
    const vit_mech *m = vit_mech_of(c, l);
    vit_mech_layout lay;
    m->layout(c, l, &lay);
    return c->n_stages == 0 && lay.src[0] != VIT_SRC_NONE && lay.src[1] != VIT_SRC_NONE && vit_mech_plain(m);
}

int vit_attn_fused_blocks(const vit_config *c) {
    int n = 0;
    for (int l = 0; l < c->depth && kernels_attn_available(); l++) n += fused_block(c, l);
    return n;
}

int vit_attn16_ok(const vit_config *c, int l) {
    return c->n_stages == 0 && l >= 0 && l < c->depth;
}

/* Head views of a mechanism's layout over the qkv buffer (rows W apart) or xn (rows D apart). */
static head_view layout_view(const vit_mech_layout *lay, int i, float *qkv, float *xn, int D, int width) {
    if (lay->src[i] == VIT_SRC_NONE) return (head_view){NULL, 0, 0};
    return lay->src[i] == VIT_SRC_X ? (head_view){xn + lay->col[i], D, width}
                                    : (head_view){qkv + lay->col[i], lay->W, width};
}

/* One block's attention for n images: the mechanism's projections of xn into acts->qkv, its
 * problems (one per image and head in GLOBAL scope), and the output before proj in acts->ao. */
static void attention(const vit_config *c, int l, const vit_block_params *bp, vit_acts *a,
                      int n, const vit_record *rec, int next_reuses) {
    const vit_mech *m = vit_mech_of(c, l);
    const int D = c->embed_dim, H = c->num_heads, T = vit_num_tokens(c), M = n * T, hd = D / H;
    vit_geom g;
    vit_mech_block mb;
    vit_mech_block_at(&mb, c, l, bp, &g);
    vit_mech_layout lay;
    m->layout(c, l, &lay);
    for (int i = 0; i < lay.n_proj; i++) {
        const vit_mech_proj *pr = &lay.proj[i];
        linear_ld(a->qkv + pr->col, lay.W, a->xn, vit_mech_weight(bp, pr->w), vit_mech_weight(bp, pr->b),
                  M, pr->out, D, 0);
    }
    const int dq = vit_qk_head_dim(c, l);
    attn_job j = {.m = m, .mb = &mb, .n = n, .T = T, .D = D, .H = H, .prefix = g.prefix,
                  .dq = dq, .ao = a->ao,
                  .scale = m->product_scale ? m->product_scale(c, l) : vit_attn_scale(c, l),
                  .q = layout_view(&lay, 0, a->qkv, a->xn, D, dq),
                  .k = layout_view(&lay, 1, a->qkv, a->xn, D, dq),
                  .v = layout_view(&lay, 2, a->qkv, a->xn, D, hd)};
    vit_mech_problem_grid(&g, &j.gh, &j.gw);
    const int reuses = vit_mech_reads_prev(c, l);
    if (reuses) j.prev = a->keep[(l + 1) & 1];
    float *att = rec_layer(rec->attn, l);
    j.att = att ? att : a->att;
    j.att16 = rec->attn16 ? rec->attn16[l] : NULL;
    j.att16_stride = rec->attn16_stride ? rec->attn16_stride : (size_t)T * T;
    assert(j.att16_stride >= (size_t)T * T);
    assert(!(att && j.att16));
    j.scores = rec_layer(rec->scores, l);
    j.q_out = rec_layer(rec->q, l);
    j.k_out = rec_layer(rec->k, l);
    for (int i = 0; i < VIT_MAX_EXTRAS; i++) {
        float *r = rec_layer(rec->extra[i], l);
        /* map work needs its intermediate maps; per-head copies are made only when recorded */
        j.extra[i] = vit_extra_info(c, l, i, NULL) ? (r ? r : (m->maps || a->tape) ? a->ext[i] : NULL) : NULL;
    }
    if (next_reuses || reuses) j.keep = a->keep[l & 1];
    j.att_recorded = att != NULL;
    if (!a->tape && fused_block(c, l) && vit_gemm_attention_fused()) {
        /* inference of a plain mechanism: problems cut into chunks of rows that depend on T
         * alone, so that few heads still keep every thread busy */
        enum { CH = 64 };
        const int chunks = (T + CH - 1) / CH;
        const size_t kt = kernels_attn_kt_floats(T, dq);
        /* the calling thread's buffer; its workers only read it */
        if ((j.kT = kernels_scratch(KERNELS_SCRATCH_ATTN_KEYS, (size_t)n * H * kt))) {
            int failed = 0;
#pragma omp parallel for schedule(static)
            for (int bh = 0; bh < n * H; bh++)
                kernels_attn_pack_k(j.kT + bh * kt, head_at(&j.k, T, bh / H, bh % H), j.k.ld, T, dq);
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed)
            for (int u = 0; u < n * H * chunks; u++) {
                const int bh = u / chunks, r0 = u % chunks * CH, r1 = r0 + CH < T ? r0 + CH : T;
                failed |= !attn_rows_fused(&j, bh / H, bh % H, r0, r1);
            }
            if (!failed) return;
        } /* without memory for the fused kernel's buffers: OpenBLAS, below */
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < n * H; bh++) {
        attn_head(&j, bh / H, bh % H);
        if (!m->maps) attn_values(&j, bh / H, bh % H);
    }
    if (!m->maps) return;
    const size_t TT = (size_t)T * T;
    size_t E[VIT_MAX_EXTRAS] = {0}; /* each extra's heads: its stride per image */
    for (int i = 0; i < VIT_MAX_EXTRAS; i++) {
        vit_extra x;
        if (vit_extra_info(c, l, i, &x)) E[i] = (size_t)x.heads;
    }
    if (a->tape) kernels_copy(a->tape->blk[l].soft, j.att, (size_t)n * H * TT);
#pragma omp parallel for schedule(dynamic, 1)
    for (int b = 0; b < n; b++) {
        float *ext[VIT_MAX_EXTRAS];
        for (int i = 0; i < VIT_MAX_EXTRAS; i++) ext[i] = j.extra[i] ? j.extra[i] + (size_t)b * E[i] * TT : NULL;
        m->maps(&mb, j.att + (size_t)b * H * TT, ext, T, T);
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < n * H; bh++) attn_values(&j, bh / H, bh % H);
}


static void forward_monolithic(const vit_config *c, const vit_params *p, vit_acts *a, const float *images,
                               int n, const vit_record *rec);

void vit_forward(const vit_config *c, const vit_params *p, vit_acts *a, const float *images,
                 int n, const vit_record *rec) {
    /* the linear layers use the weights' prepacked copies, except in training */
    vit_gemm_pack *old = vit_gemm_use(a->tape ? NULL : p->pack);
    if (c->n_stages > 0) vit_stage_forward(c, p, a, images, n, rec);
    else forward_monolithic(c, p, a, images, n, rec);
    vit_gemm_use(old);
}

static void forward_monolithic(const vit_config *c, const vit_params *p, vit_acts *a, const float *images,
                               int n, const vit_record *rec) {
    assert(n >= 1 && n <= a->B);
    const int D = c->embed_dim, T = vit_num_tokens(c), Np = vit_num_patches(c);
    const int P = c->patch_size, Cin = c->in_chans, K = Cin * P * P, Hm = c->mlp_hidden;
    const int prefix = vit_num_prefix(c), M = n * T;
    const vit_record none = {0};
    if (!rec) rec = &none;

    /* patch embedding (a GEMM per image so its rows land after the prefix tokens), or the
     * convolutional stem writing them there */
    if (c->n_stem) vit_stem_forward(c, p, a, images, n, a->x + (size_t)prefix * D, (size_t)T * D);
    else vit_patchify(a->patches, images, n, Cin, c->img_size, P);
    for (int b = 0; b < n; b++) {
        float *xb = a->x + (size_t)b * T * D;
        if (!c->n_stem)
            linear(xb + (size_t)prefix * D, a->patches + (size_t)b * Np * K, p->patch_w, p->patch_b, Np, D, K, 0);
        vitfam_embed(c, p, xb); /* prefix tokens and position embedding */
    }
    const size_t MD = (size_t)M * D; /* floats of the residual stream */
    if (c->pre_norm) {
        if (a->tape) kernels_copy(a->tape->embed, a->x, MD);
        kernels_layernorm(a->x, a->x, p->norm_pre_w, p->norm_pre_b, M, D, c->ln_eps);
    }

    assert(!a->tape || rec == &none);
    const float eps_b = vitfam_block_eps(c), bs = vitfam_branch_scale(c); /* the Refiner release's r */
    for (int l = 0; l < c->depth; l++) {
        const vit_block_params *bp = &p->blocks[l];
        /* a training forward gives every block its own buffers (the tape) */
        vit_acts la = *a;
        float *hpre = a->hid, *xn2 = a->xn;
        if (a->tape) {
            const vit_tape_block *t = &a->tape->blk[l];
            kernels_copy(t->x_in, a->x, MD);
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
        kernels_layernorm(la.xn, a->x, bp->norm1_w, bp->norm1_b, M, D, eps_b);
        attention(c, l, bp, &la, n, rec, vit_mech_next_reuses(c, l));
        float *branch0 = a->tape ? a->tape->blk[l].branch[0] : xn2, *branch1 = a->tape ? a->tape->blk[l].branch[1] : xn2;
        if (bp->ls1 || bs != 1.0f) { /* LayerScale: x += gamma1 * proj(ao) (xn2 is free until norm2) */
            if (bp->proj_w) linear(branch0, la.ao, bp->proj_w, bp->proj_b, M, D, D, 0);
            kernels_scaled_add(a->x, bp->proj_w ? branch0 : la.ao, bp->ls1, bs, M, D);
        } else if (bp->proj_w) linear(a->x, la.ao, bp->proj_w, bp->proj_b, M, D, D, 1); /* x += proj(ao) */
        else for (size_t i = 0; i < (size_t)M * D; i++) a->x[i] += la.ao[i];   /* LSLA's NP */
        if (a->tape) kernels_copy(a->tape->blk[l].x_mid, a->x, MD);
        kernels_layernorm(xn2, a->x, bp->norm2_w, bp->norm2_b, M, D, eps_b);
        linear(hpre, xn2, bp->fc1_w, bp->fc1_b, M, Hm, D, 0);
        float *hid = a->tape ? a->tape->blk[l].hid : a->hid; /* training keeps fc1's output */
        vitfam_act(c, hid, hpre, (size_t)M * Hm);
        if (bp->ls2 || bs != 1.0f) { /* x += gamma2 * fc2(act(fc1(xn))) */
            linear(branch1, hid, bp->fc2_w, bp->fc2_b, M, D, Hm, 0);
            kernels_scaled_add(a->x, branch1, bp->ls2, bs, M, D);
        } else {
            linear(a->x, hid, bp->fc2_w, bp->fc2_b, M, D, Hm, 1); /* x += fc2(gelu(fc1(xn))) */
        }
        float *tok = rec_layer(rec->tokens, l);
        if (tok) memcpy(tok, a->x, MD * sizeof(float));
    }
    if (a->tape) kernels_copy(a->tape->x_final, a->x, MD);

    /* head: timm's forward_head. Pool, with the final norm before (norm) or after (fc_norm). */
    const int nout = c->distilled ? 2 : 1;
    for (int b = 0; b < n; b++) {
        float *xb = a->x + (size_t)b * T * D, *pb = a->pooled + (size_t)b * 2 * D;
        if (c->global_pool == VIT_POOL_TOKEN && c->aux_head > 0) { /* every token normalised */
            kernels_layernorm(xb, xb, p->norm_w, p->norm_b, T, D, c->ln_eps);
            memcpy(pb, xb, (size_t)D * sizeof(float));
        } else if (c->global_pool == VIT_POOL_TOKEN) {
            if (c->fc_norm) memcpy(pb, xb, (size_t)nout * D * sizeof(float));
            else kernels_layernorm(pb, xb, p->norm_w, p->norm_b, nout, D, c->ln_eps);
        } else {
            if (!c->fc_norm) kernels_layernorm(xb, xb, p->norm_w, p->norm_b, T, D, c->ln_eps);
            if (c->global_pool == VIT_POOL_MAP) /* attention pooling over the patch tokens */
                vitfam_map_pool(c, p, xb + (size_t)prefix * D, Np, pb, a->scratch,
                                rec && rec->pool_attn ? rec->pool_attn + (size_t)b * c->num_heads * Np : NULL);
            for (int i = 0; i < D && c->global_pool == VIT_POOL_AVG; i++) {
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
            if (c->aux_head > 0) /* the Refiner release: + w max over the patch tokens */
                vitfam_aux_head(c, p, a->x + ((size_t)b * T + prefix) * D, Np, lg, a->scratch);
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
    const vit_mech *m = vit_mech_of(c, l);
    vit_extra x = {0};
    if (vit_cait_talking(c, l)) return vit_cait_extra(c, l, i, out); /* proj_l / proj_w internals */
    if (!m || !m->extra || i < 0 || i >= VIT_MAX_EXTRAS || !m->extra(c, l, i, &x)) return 0;
    if (out) *out = x;
    return 1;
}

int vit_static_info(const vit_config *c, int l, int i, vit_static *out) {
    const vit_mech *m = vit_mech_of(c, l);
    vit_static v[4];
    const int n = m && m->statics ? m->statics(c, l, v) : 0;
    if (i < 0 || i >= n) return 0;
    if (out) *out = v[i];
    return 1;
}

void vit_static_fill(const vit_config *c, const vit_params *p, int l, int i, float *out) {
    if (vit_static_info(c, l, i, NULL)) vit_mech_of(c, l)->static_fill(c, p, l, i, out);
}

int vit_params_check(const vit_config *c, const vit_params *p, char *msg, size_t n) {
    for (int l = 0; l < c->depth; l++) {
        const vit_mech *m = vit_mech_of(c, l);
        if (m && m->check && !m->check(c, p, l, msg, n)) return 0;
    }
    return 1;
}
