/* vit.c: the ViT/DeiT forward pass exactly as timm's VisionTransformer computes it in eval mode.
 * Large GEMMs are threaded inside OpenBLAS; per-head attention GEMMs run single-threaded with
 * the (image, head) pairs spread over OpenMP threads (OpenBLAS's OpenMP build runs serially
 * inside a parallel region), so the two never oversubscribe the cores. */
#include "vit.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "resample.h"

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
    const int D = c->embed_dim, P = c->patch_size, Hm = c->mlp_hidden, C = c->num_classes;
    int n = 0;
    memset(p, 0, sizeof *p);
    SPEC(&p->patch_w, "patch_embed.proj.weight", 0, D, c->in_chans, P, P);
    SPEC(&p->patch_b, "patch_embed.proj.bias", 0, D);
    if (c->class_token) SPEC(&p->cls_token, "cls_token", 0, 1, 1, D);
    if (c->distilled) SPEC(&p->dist_token, "dist_token", 0, 1, 1, D);
    SPEC(&p->pos_embed, "pos_embed", 0, 1, vit_num_tokens(c), D);
    if (n - 1 < max) specs[n - 1].is_pos_embed = 1;
    for (int l = 0; l < c->depth && l < VIT_MAX_DEPTH; l++) {
        vit_block_params *b = &p->blocks[l];
        SPEC(&b->norm1_w, "blocks.%d.norm1.weight", l, D);
        SPEC(&b->norm1_b, "blocks.%d.norm1.bias", l, D);
        SPEC(&b->qkv_w, "blocks.%d.attn.qkv.weight", l, 3 * D, D);
        if (c->qkv_bias) SPEC(&b->qkv_b, "blocks.%d.attn.qkv.bias", l, 3 * D);
        SPEC(&b->proj_w, "blocks.%d.attn.proj.weight", l, D, D);
        SPEC(&b->proj_b, "blocks.%d.attn.proj.bias", l, D);
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

/* Rounds every view up to 64 bytes so that each starts on a cache line. */
static size_t carve(char *base, size_t *off, size_t nfloats, float **view) {
    size_t bytes = (nfloats * sizeof(float) + 63) & ~(size_t)63;
    if (base && view) *view = (float *)(base + *off);
    *off += bytes;
    return bytes;
}

size_t vit_acts_carve(const vit_config *c, int B, void *base, vit_acts *a) {
    const size_t T = (size_t)vit_num_tokens(c), D = (size_t)c->embed_dim, H = (size_t)c->num_heads;
    const size_t Np = (size_t)vit_num_patches(c);
    const size_t K = (size_t)c->in_chans * c->patch_size * c->patch_size;
    const size_t b = (size_t)B;
    size_t off = 0;
    char *p = base;
    vit_acts tmp;
    vit_acts *v = a ? a : &tmp;
    if (base) v->B = B;
    carve(p, &off, b * Np * K, &v->patches);
    carve(p, &off, b * T * D, &v->x);
    carve(p, &off, b * T * D, &v->xn);
    carve(p, &off, b * T * 3 * D, &v->qkv);
    carve(p, &off, b * H * T * T, &v->att);
    carve(p, &off, b * T * D, &v->ao);
    carve(p, &off, b * T * (size_t)c->mlp_hidden, &v->hid);
    carve(p, &off, b * 2 * D, &v->pooled);
    carve(p, &off, b * (size_t)(c->num_classes > 0 ? c->num_classes : 1), &v->logits);
    return off;
}

/* y (M,N) = x (M,K) @ w^T (N,K) + bias, y = beta*y + ... : a Linear layer over M rows. */
static void linear(float *y, const float *x, const float *w, const float *bias, int M, int N,
                   int K, int accumulate) {
    if (accumulate) {
        if (bias) kernels_add_rows(y, bias, M, N);
    } else if (bias) {
        kernels_fill_rows(y, bias, M, N);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, w, K,
                (accumulate || bias) ? 1.0f : 0.0f, y, N);
}

/* im2col for a stride = kernel convolution. patches: (n, Np, C*P*P) in (c, ky, kx) order, the
 * order of the flattened conv weight. images: (n, C, S, S). */
static void patchify(float *patches, const float *images, int n, int C, int S, int P) {
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

/* Multi-head attention core for n images, given qkv (n, T, 3D) laid out as timm's
 * reshape(B, T, 3, H, hd). Writes ao (n, T, D) and att (n, H, T, T) probabilities; scores, q, k
 * (each NULL or as vit_record) receive copies. */
static void attention(float *ao, float *att, float *scores, float *q_out, float *k_out,
                      const float *qkv, int n, int T, int D, int H) {
    const int hd = D / H, ld = 3 * D;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < n * H; bh++) {
        const int b = bh / H, h = bh % H;
        const float *q = qkv + (size_t)b * T * ld + (size_t)h * hd;
        const float *k = q + D;
        const float *v = q + 2 * D;
        float *A = att + (size_t)bh * T * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, scale, q, ld, k, ld, 0.0f,
                    A, T);
        if (scores) memcpy(scores + (size_t)bh * T * T, A, (size_t)T * T * sizeof(float));
        if (q_out || k_out)
            for (int t = 0; t < T; t++) {
                if (q_out) memcpy(q_out + ((size_t)bh * T + t) * hd, q + (size_t)t * ld, (size_t)hd * sizeof(float));
                if (k_out) memcpy(k_out + ((size_t)bh * T + t) * hd, k + (size_t)t * ld, (size_t)hd * sizeof(float));
            }
        kernels_softmax_rows(A, T, T);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, A, T, v, ld, 0.0f,
                    ao + (size_t)b * T * D + (size_t)h * hd, D);
    }
}

static float *rec_layer(float **arr, int l) { return arr ? arr[l] : NULL; }

void vit_forward(const vit_config *c, const vit_params *p, vit_acts *a, const float *images,
                 int n, const vit_record *rec) {
    assert(n >= 1 && n <= a->B);
    const int D = c->embed_dim, H = c->num_heads, T = vit_num_tokens(c), Np = vit_num_patches(c);
    const int P = c->patch_size, Cin = c->in_chans, K = Cin * P * P, Hm = c->mlp_hidden;
    const int prefix = vit_num_prefix(c), M = n * T;
    const vit_record none = {0};
    if (!rec) rec = &none;

    /* patch embedding: a GEMM per image so its rows land after the prefix tokens */
    patchify(a->patches, images, n, Cin, c->img_size, P);
    for (int b = 0; b < n; b++) {
        float *xb = a->x + (size_t)b * T * D;
        linear(xb + (size_t)prefix * D, a->patches + (size_t)b * Np * K, p->patch_w, p->patch_b,
               Np, D, K, 0);
        if (c->class_token) memcpy(xb, p->cls_token, (size_t)D * sizeof(float));
        if (c->distilled) memcpy(xb + D, p->dist_token, (size_t)D * sizeof(float));
        for (int i = 0; i < T * D; i++) xb[i] += p->pos_embed[i];
    }

    for (int l = 0; l < c->depth; l++) {
        const vit_block_params *bp = &p->blocks[l];
        float *att = rec_layer(rec->attn, l);
        kernels_layernorm(a->xn, a->x, bp->norm1_w, bp->norm1_b, M, D, c->ln_eps);
        linear(a->qkv, a->xn, bp->qkv_w, bp->qkv_b, M, 3 * D, D, 0);
        attention(a->ao, att ? att : a->att, rec_layer(rec->scores, l), rec_layer(rec->q, l),
                  rec_layer(rec->k, l), a->qkv, n, T, D, H);
        linear(a->x, a->ao, bp->proj_w, bp->proj_b, M, D, D, 1); /* x += proj(ao) */
        kernels_layernorm(a->xn, a->x, bp->norm2_w, bp->norm2_b, M, D, c->ln_eps);
        linear(a->hid, a->xn, bp->fc1_w, bp->fc1_b, M, Hm, D, 0);
        kernels_gelu(a->hid, (size_t)M * Hm);
        linear(a->x, a->hid, bp->fc2_w, bp->fc2_b, M, D, Hm, 1); /* x += fc2(gelu(fc1(xn))) */
        float *tok = rec_layer(rec->tokens, l);
        if (tok) memcpy(tok, a->x, (size_t)M * D * sizeof(float));
    }

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
        if (c->fc_norm) kernels_layernorm(pb, pb, p->norm_w, p->norm_b, 1, D, c->ln_eps);
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
