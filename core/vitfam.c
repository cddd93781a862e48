/* vitfam.c: the modern ViT family's options in the monolithic ViT, as timm's VisionTransformer
 * computes them in eval mode (vit.c calls these at the embedding, the MLP and the head). */
#include "vitfam.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels.h"
#include "mech.h"
#include "train.h"

static const char *const act_names[] = {[VIT_ACT_GELU] = "gelu", [VIT_ACT_QUICK_GELU] = "quick_gelu"};
_Static_assert(sizeof act_names / sizeof act_names[0] == VIT_ACT_COUNT, "activation names");

const char *vit_act_name(vit_act a) { return (unsigned)a < VIT_ACT_COUNT ? act_names[a] : "?"; }

int vit_act_parse(const char *s) {
    for (int i = 0; s && i < VIT_ACT_COUNT; i++)
        if (strcmp(act_names[i], s) == 0) return i;
    return -1;
}

/* CaiT's position embedding has no class slot: the class token joins at the class-attention
 * blocks, after the patches took their positions. */
int vit_pos_embed_prefix(const vit_config *c) {
    return c->no_embed_class || c->family == VIT_FAMILY_CAIT ? 0 : vit_num_prefix(c);
}
int vit_pos_embed_len(const vit_config *c) { return vit_pos_embed_prefix(c) + vit_num_patches(c); }

void vit_prefix_names(const vit_config *c, char *buf, size_t n) {
    size_t u = 0;
    if (!n) return;
    buf[0] = 0;
    if (c->class_token) u += (size_t)snprintf(buf + u, n - u, "cls");
    if (c->distilled && u < n) u += (size_t)snprintf(buf + u, n - u, "%sdist", u ? "," : "");
    for (int r = 0; r < c->reg_tokens && u < n; r++)
        u += (size_t)snprintf(buf + u, n - u, "%sreg%d", u ? "," : "", r);
}

void vit_prefix_label(const vit_config *c, int i, char *buf, size_t n) {
    if (c->class_token && i-- == 0) snprintf(buf, n, "class token");
    else if (c->distilled && i-- == 0) snprintf(buf, n, "distillation token");
    else snprintf(buf, n, "register %d", i);
}

as_status vitfam_validate(const vit_config *c, as_error *err) {
    const char *n = c->name[0] ? c->name : "model";
    if ((unsigned)c->act_layer >= VIT_ACT_COUNT)
        return as_fail(err, AS_ERR_CONFIG, "%s: unknown act_layer %d: use \"gelu\" or \"quick_gelu\"", n,
                       (int)c->act_layer);
    if (!(c->init_values >= 0.0f) || isinf(c->init_values))
        return as_fail(err, AS_ERR_CONFIG, "%s: \"init_values\" must be a positive number (LayerScale) "
                       "or null (none)", n);
    if (c->reg_tokens < 0 || c->reg_tokens > VIT_MAX_REG)
        return as_fail(err, AS_ERR_CONFIG, "%s: \"reg_tokens\" %d is outside 0..%d", n, c->reg_tokens,
                       VIT_MAX_REG);
    const int staged = c->family != VIT_FAMILY_VIT || c->n_stages != 0;
    const char *opt = c->reg_tokens ? "reg_tokens" : c->no_embed_class ? "no_embed_class"
                      : c->pre_norm ? "pre_norm" : c->act_layer != VIT_ACT_GELU ? "act_layer"
                      : c->global_pool == VIT_POOL_MAP ? "global_pool \"map\"" : NULL;
    if (staged && opt)
        return as_fail(err, AS_ERR_CONFIG, "%s: %s is an option of the plain ViT and this is a %s "
                       "model: remove it", n, opt, vit_family_name(c->family));
    if (c->distilled && c->reg_tokens)
        return as_fail(err, AS_ERR_CONFIG, "%s: a distilled model with register tokens is not a timm "
                       "model (VisionTransformerDistilled has no registers): remove \"reg_tokens\" or "
                       "\"distilled\"", n);
    const char *rel = c->adjust_ratio != 0 ? "adjust_ratio" : c->mlp_scale != 0 ? "mlp_scale"
                      : c->aux_head != 0 ? "aux_head" : NULL;
    if (staged && rel)
        return as_fail(err, AS_ERR_CONFIG, "%s: \"%s\" is an option of the plain ViT (the Refiner "
                       "release's) and this is a %s model: remove it", n, rel, vit_family_name(c->family));
    if (!(c->adjust_ratio == 0.0f || (c->adjust_ratio >= 1e-3f && c->adjust_ratio <= 1.0f)))
        return as_fail(err, AS_ERR_CONFIG, "%s: \"adjust_ratio\" must be in [0.001, 1] (the Refiner "
                       "release's 0.5) or absent", n);
    if (!(c->mlp_scale >= 0.0f) || isinf(c->mlp_scale))
        return as_fail(err, AS_ERR_CONFIG, "%s: \"mlp_scale\" must be a positive number (the MLP "
                       "branch's LayerScale) or absent", n);
    if (c->mlp_scale > 0 && c->init_values > 0)
        return as_fail(err, AS_ERR_CONFIG, "%s: \"mlp_scale\" and \"init_values\" both scale the MLP "
                       "branch: keep one (init_values: LayerScale on both branches)", n);
    if (!(c->aux_head >= 0.0f) || isinf(c->aux_head))
        return as_fail(err, AS_ERR_CONFIG, "%s: \"aux_head\" must be a positive number (the weight of "
                       "the patch tokens' max, the Refiner release's 0.5) or absent", n);
    if (c->aux_head > 0 && (c->global_pool != VIT_POOL_TOKEN || !c->class_token || c->distilled ||
                            c->fc_norm || c->num_classes <= 0))
        return as_fail(err, AS_ERR_CONFIG, "%s: \"aux_head\" adds the patch tokens' max to the class "
                       "token's logits: it needs a class token, global_pool \"token\", classes, no "
                       "fc_norm and no distillation token", n);
    if (c->distilled && c->global_pool == VIT_POOL_MAP)
        return as_fail(err, AS_ERR_CONFIG, "%s: a distilled model pools its class and distillation "
                       "tokens: use global_pool \"token\", not \"map\"", n);
    return AS_OK;
}

float vitfam_block_eps(const vit_config *c) {
    const float r = c->adjust_ratio;
    return r > 0 && r != 1.0f ? c->ln_eps / (r * r) : c->ln_eps;
}
float vitfam_branch_scale(const vit_config *c) { return c->adjust_ratio > 0 ? 1.0f / c->adjust_ratio : 1.0f; }
int vitfam_branch_kept(const vit_config *c) {
    return c->init_values > 0 || c->mlp_scale > 0 || vitfam_branch_scale(c) != 1.0f;
}

size_t vitfam_aux_scratch(const vit_config *c) {
    return c->aux_head > 0 ? (size_t)vit_num_patches(c) * (size_t)(c->num_classes > 0 ? c->num_classes : 1) : 0;
}

/* S (Np, C) = xn aux_head_w^T + aux_head_b; per class the first row of the largest score */
static void aux_scores(const vit_config *c, const vit_params *p, const float *xn, int Np, float *S) {
    const int C = c->num_classes, D = c->embed_dim;
    kernels_fill_rows(S, p->aux_head_b, Np, C);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Np, C, D, 1.0f, xn, D, p->aux_head_w, D, 1.0f, S, C);
}
static int aux_arg(const float *S, int Np, int C, int k) {
    int t = 0;
    for (int u = 1; u < Np; u++)
        if (S[(size_t)u * C + k] > S[(size_t)t * C + k]) t = u;
    return t;
}

void vitfam_aux_head(const vit_config *c, const vit_params *p, const float *xn, int Np, float *logits,
                     float *scratch) {
    const int C = c->num_classes;
    aux_scores(c, p, xn, Np, scratch);
    for (int k = 0; k < C; k++) logits[k] += c->aux_head * scratch[(size_t)aux_arg(scratch, Np, C, k) * C + k];
}

void vitfam_aux_head_backward(const vit_config *c, const vit_params *p, const vit_params *g, const float *xn,
                              int Np, const float *dlogits, float *dxn, float *scratch) {
    const int C = c->num_classes, D = c->embed_dim;
    aux_scores(c, p, xn, Np, scratch);
    for (int k = 0; k < C; k++) {
        const int t = aux_arg(scratch, Np, C, k);
        const float d = c->aux_head * dlogits[k];
        const float *x = xn + (size_t)t * D, *w = p->aux_head_w + (size_t)k * D;
        float *gw = WR(g->aux_head_w) + (size_t)k * D, *dx = dxn + (size_t)t * D;
        WR(g->aux_head_b)[k] += d;
        for (int i = 0; i < D; i++) {
            gw[i] += d * x[i];
            dx[i] += d * w[i];
        }
    }
}

const char *vitfam_untrainable(const vit_config *c) {
    if (c->global_pool == VIT_POOL_MAP) return "global_pool \"map\" (attention pooling)";
    return NULL;
}

void vitfam_embed(const vit_config *c, const vit_params *p, float *xb) {
    const int D = c->embed_dim, T = vit_num_tokens(c), prefix = vit_num_prefix(c);
    int row = 0;
    if (c->class_token) memcpy(xb + (size_t)D * row++, p->cls_token, (size_t)D * sizeof(float));
    if (c->distilled) memcpy(xb + (size_t)D * row++, p->dist_token, (size_t)D * sizeof(float));
    if (c->reg_tokens) memcpy(xb + (size_t)D * row, p->reg_token, (size_t)c->reg_tokens * D * sizeof(float));
    /* no_embed_class: the embedding covers the patches only (timm adds it before the concat,
     * so the prefix tokens get none); otherwise one row per token */
    const size_t from = c->no_embed_class ? (size_t)prefix * D : 0;
    for (size_t i = from; i < (size_t)T * D; i++) xb[i] += p->pos_embed[i - from];
}

void vitfam_embed_backward(const vit_config *c, const vit_params *g, const float *dx, int n) {
    const int D = c->embed_dim, T = vit_num_tokens(c), prefix = vit_num_prefix(c);
    const int cls = c->class_token != 0, dist = c->distilled != 0;
    const size_t TD = (size_t)T * D, from = c->no_embed_class ? (size_t)prefix * D : 0;
    float *pos = WR(g->pos_embed);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < TD; i++) {
        double s = 0;
        for (int b = 0; b < n; b++) s += dx[(size_t)b * TD + i];
        const int t = (int)(i / D);
        const size_t e = i % D;
        if (i >= from) pos[i - from] += (float)s;
        if (t >= prefix) continue;
        if (cls && t == 0) WR(g->cls_token)[e] += (float)s;
        else if (dist && t == cls) WR(g->dist_token)[e] += (float)s;
        else WR(g->reg_token)[(size_t)(t - cls - dist) * D + e] += (float)s;
    }
}

void vitfam_act(const vit_config *c, float *y, const float *x, size_t n) {
    if (c->act_layer != VIT_ACT_QUICK_GELU) {
        kernels_gelu_to(y, x, n);
        return;
    }
    /* QuickGELU (OpenAI CLIP): x * sigmoid(1.702 x) */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + expf(-1.702f * x[i]));
}

size_t vitfam_map_scratch(const vit_config *c) {
    const size_t D = (size_t)c->embed_dim, N = (size_t)vit_num_patches(c);
    return N * 2 * D + (size_t)c->num_heads * N + 2 * D + (size_t)c->mlp_hidden;
}

void vitfam_map_pool(const vit_config *c, const vit_params *p, const float *x, int N, float *out,
                     float *scratch, float *attn) {
    const int D = c->embed_dim, H = c->num_heads, hd = D / H, Hm = c->mlp_hidden;
    float *kv = scratch, *att = kv + (size_t)N * 2 * D, *q = att + (size_t)H * N, *o = q + D, *hid = o + D;
    /* q = latent W_q^T + b_q; kv = x W_kv^T + b_kv (k: columns 0..D-1, v: D..2D-1) */
    memcpy(q, p->pool.q_b, (size_t)D * sizeof(float));
    cblas_sgemv(CblasRowMajor, CblasNoTrans, D, D, 1.0f, p->pool.q_w, D, p->pool.latent, 1, 1.0f, q, 1);
    kernels_fill_rows(kv, p->pool.kv_b, N, 2 * D);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, 2 * D, D, 1.0f, x, D, p->pool.kv_w, D, 1.0f, kv, 2 * D);
    const float scale = 1.0f / sqrtf((float)hd);
    for (int h = 0; h < H; h++) { /* softmax(q_h k_h^T * scale) v_h */
        float *a = att + (size_t)h * N;
        cblas_sgemv(CblasRowMajor, CblasNoTrans, N, hd, scale, kv + (size_t)h * hd, 2 * D, q + (size_t)h * hd, 1,
                    0.0f, a, 1);
        kernels_softmax_rows(a, 1, N);
        if (attn) memcpy(attn + (size_t)h * N, a, (size_t)N * sizeof(float));
        cblas_sgemv(CblasRowMajor, CblasTrans, N, hd, 1.0f, kv + D + (size_t)h * hd, 2 * D, a, 1, 0.0f,
                    o + (size_t)h * hd, 1);
    }
    /* out = proj(o); out += fc2(act(fc1(norm(out)))) */
    memcpy(out, p->pool.proj_b, (size_t)D * sizeof(float));
    cblas_sgemv(CblasRowMajor, CblasNoTrans, D, D, 1.0f, p->pool.proj_w, D, o, 1, 1.0f, out, 1);
    kernels_layernorm(o, out, p->pool.norm_w, p->pool.norm_b, 1, D, c->ln_eps);
    memcpy(hid, p->pool.fc1_b, (size_t)Hm * sizeof(float));
    cblas_sgemv(CblasRowMajor, CblasNoTrans, Hm, D, 1.0f, p->pool.fc1_w, D, o, 1, 1.0f, hid, 1);
    vitfam_act(c, hid, hid, (size_t)Hm);
    for (int i = 0; i < D; i++) out[i] += p->pool.fc2_b[i];
    cblas_sgemv(CblasRowMajor, CblasNoTrans, D, Hm, 1.0f, p->pool.fc2_w, Hm, hid, 1, 1.0f, out, 1);
}

void vitfam_cost(const vit_config *c, vit_cost *out) {
    const double D = c->embed_dim, L = c->depth, T = vit_num_tokens(c), Np = vit_num_patches(c);
    const double Hm = c->mlp_hidden;
    if (c->pre_norm) vit_cost_add(&out->stem, VIT_COMP_NORM, 2 * D, 0, 8 * T * D);
    if (c->init_values > 0) { /* the gammas multiply each branch: elementwise, no MACs */
        vit_cost_add(&out->stage[0], VIT_COMP_PROJ, L * D, 0, L * T * D);
        vit_cost_add(&out->stage[0], VIT_COMP_MLP, L * D, 0, L * T * D);
    }
    if (c->mlp_scale > 0) vit_cost_add(&out->stage[0], VIT_COMP_MLP, L * D, 0, L * T * D);
    if (vitfam_branch_scale(c) != 1.0f) /* 1 / r on both branches */
        vit_cost_add(&out->stage[0], VIT_COMP_PROJ, 0, 0, 2 * L * T * D);
    if (c->aux_head > 0) { /* the aux head on every patch token, its max and the weighted add */
        const double C = c->num_classes;
        vit_cost_add(&out->head, VIT_COMP_HEAD, C * D + C, Np * C * D, Np * C + 2 * C);
        vit_cost_add(&out->head, VIT_COMP_NORM, 0, 0, 8 * Np * D); /* the final norm on every token */
    }
    if (c->global_pool == VIT_POOL_MAP) { /* one latent query over the Np patch tokens */
        vit_cost_part *h = &out->head;
        vit_cost_add(h, VIT_COMP_TOKENS, D, 0, 0);
        vit_cost_add(h, VIT_COMP_QKV, 3 * (D * D + D), D * D + Np * 2 * D * D, D + Np * 2 * D);
        vit_cost_add(h, VIT_COMP_ATTN_SCORES, 0, Np * D, 5 * Np * c->num_heads);
        vit_cost_add(h, VIT_COMP_ATTN_VALUES, 0, Np * D, 0);
        vit_cost_add(h, VIT_COMP_PROJ, D * D + D, D * D, D);
        vit_cost_add(h, VIT_COMP_NORM, 2 * D, 0, 8 * D);
        vit_cost_add(h, VIT_COMP_MLP, 2 * D * Hm + Hm + D, 2 * D * Hm, Hm + D + 8 * Hm + D);
    }
}

void vitfam_act_backward(const vit_config *c, float *dh, const float *x, size_t n) {
    if (c->act_layer != VIT_ACT_QUICK_GELU) {
        kernels_gelu_backward(dh, x, n);
        return;
    }
    /* d/dx x s(1.702 x) = s + 1.702 x s (1 - s) */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float s = 1.0f / (1.0f + expf(-1.702f * x[i]));
        dh[i] *= s + 1.702f * x[i] * s * (1.0f - s);
    }
}
