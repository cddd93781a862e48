/* cait.c: CaiT's forward pass, weights, checks and costs (timm's cait.py names, eval order of
 * the design note's section 3.3). Talking heads need every head of an image at once, so a
 * self-attention block runs one job per image here instead of window.c's per-problem jobs. */
#include "cait.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels.h"
#include "stage.h"
#include "vitfam.h"

static const char *const mix_names[] = {[VIT_MASK_MIX_BEFORE] = "before_mix", [VIT_MASK_MIX_AFTER] = "after_mix"};
_Static_assert(sizeof mix_names / sizeof mix_names[0] == VIT_MASK_MIX_COUNT, "mask mix names");
const char *vit_mask_mix_name(vit_mask_mix m) { return (unsigned)m < VIT_MASK_MIX_COUNT ? mix_names[m] : "?"; }

int vit_cait_talking(const vit_config *c, int l) {
    return c->family == VIT_FAMILY_CAIT && c->talking_heads && c->n_stages > 0 && l >= 0 &&
           l < c->stage[0].depth;
}

/* ---- weights: timm's Cait names ---- */

static void put(vit_spec_sink *s, const float **slot, const char *suffix, int ndim, const int *shape) {
    vit_mech_spec(s, slot, suffix, ndim, shape);
}
#define PUT(sink, slot, suffix, ...)                                                           \
    do {                                                                                       \
        const int shape_[] = {__VA_ARGS__};                                                    \
        put((sink), (slot), (suffix), (int)(sizeof shape_ / sizeof shape_[0]), shape_);        \
    } while (0)

/* What both block kinds share after the attention's own tensors: proj, LayerScale, MLP. */
static void block_tail_specs(const vit_config *c, vit_block_params *b, vit_spec_sink *s, int D, int Hm) {
    PUT(s, &b->proj_w, ".attn.proj.weight", D, D);
    PUT(s, &b->proj_b, ".attn.proj.bias", D);
    if (c->init_values > 0) {
        PUT(s, &b->ls1, ".gamma_1", D);
        PUT(s, &b->ls2, ".gamma_2", D);
    }
    PUT(s, &b->norm2_w, ".norm2.weight", D);
    PUT(s, &b->norm2_b, ".norm2.bias", D);
    PUT(s, &b->fc1_w, ".mlp.fc1.weight", Hm, D);
    PUT(s, &b->fc1_b, ".mlp.fc1.bias", Hm);
    PUT(s, &b->fc2_w, ".mlp.fc2.weight", D, Hm);
    PUT(s, &b->fc2_b, ".mlp.fc2.bias", D);
}

int vit_cait_param_specs(const vit_config *c, vit_params *p, vit_tensor_spec *specs, int max) {
    int n = 0;
    memset(p, 0, sizeof *p);
    const int D = c->embed_dim, P = c->patch_size, G = c->img_size / P;
    vit_spec_sink top = {specs, max, &n, ""};
    PUT(&top, &p->patch_w, "patch_embed.proj.weight", D, c->in_chans, P, P);
    PUT(&top, &p->patch_b, "patch_embed.proj.bias", D);
    PUT(&top, &p->cls_token, "cls_token", 1, 1, D);
    PUT(&top, &p->pos_embed, "pos_embed", 1, G * G, D); /* no class slot (vit_pos_embed_prefix 0) */
    if (n - 1 < max) specs[n - 1].is_pos_embed = 1;    /* --img-size resamples it, as a ViT's */
    for (int l = 0; l < c->depth && l < VIT_MAX_DEPTH; l++) {
        vit_block_params *b = &p->blocks[l];
        vit_geom g;
        vit_mech_block mb;
        vit_mech_block_at(&mb, c, l, NULL, &g);
        vit_spec_sink s = {specs, max, &n, ""};
        const int ca = g.scope == VIT_SCOPE_CLASS;
        snprintf(s.prefix, sizeof s.prefix, ca ? "blocks_token_only.%d" : "blocks.%d", ca ? g.j : l);
        PUT(&s, &b->norm1_w, ".norm1.weight", D);
        PUT(&s, &b->norm1_b, ".norm1.bias", D);
        if (ca) {
            const float **w[3] = {&b->q_w, &b->k_w, &b->v_w}, **bb[3] = {&b->q_b, &b->k_b, &b->v_b};
            static const char *const nm[3] = {"q", "k", "v"};
            for (int i = 0; i < 3; i++) {
                char suf[32];
                snprintf(suf, sizeof suf, ".attn.%s.weight", nm[i]);
                PUT(&s, w[i], suf, D, D);
                snprintf(suf, sizeof suf, ".attn.%s.bias", nm[i]);
                if (c->qkv_bias) PUT(&s, bb[i], suf, D);
            }
        } else {
            vit_mech_of(c, l)->specs(&mb, b, &s); /* attn.qkv (and MaiT's alphas) */
            if (c->talking_heads) {
                PUT(&s, &b->thl_w, ".attn.proj_l.weight", g.H, g.H);
                PUT(&s, &b->thl_b, ".attn.proj_l.bias", g.H);
                PUT(&s, &b->thw_w, ".attn.proj_w.weight", g.H, g.H);
                PUT(&s, &b->thw_b, ".attn.proj_w.bias", g.H);
            }
        }
        block_tail_specs(c, b, &s, D, g.Hm);
    }
    PUT(&top, &p->norm_w, "norm.weight", D);
    PUT(&top, &p->norm_b, "norm.bias", D);
    if (c->num_classes > 0) {
        PUT(&top, &p->head_w, "head.weight", c->num_classes, D);
        PUT(&top, &p->head_b, "head.bias", c->num_classes);
    }
    return n;
}
#undef PUT

size_t vit_cait_scratch_floats(const vit_config *c) {
    if (c->family != VIT_FAMILY_CAIT || !c->talking_heads || c->n_stages < 1) return 0;
    const size_t N = (size_t)(c->img_size / c->patch_size) * (c->img_size / c->patch_size);
    return 3 * (size_t)c->stage[0].num_heads * N * N;
}

/* ---- forward ---- */

static float *rec_at(float **arr, int l) { return arr ? arr[l] : NULL; }

/* q and k of every token, per head (n, H, T, hd) each (q: rows rq of T; NULL skips), from rows
 * W apart with q at column cq and k at ck. */
static void record_heads(float *out, const float *src, int n, int T, int H, int hd, int W, int col) {
    if (!out) return;
    for (int b = 0; b < n; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++)
                memcpy(out + (((size_t)b * H + h) * T + t) * hd, src + ((size_t)b * T + t) * W + col + (size_t)h * hd,
                       (size_t)hd * sizeof(float));
}

void vit_cait_head_mix(float *out, const float *W, const float *bias, const float *in, int H, size_t NN) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, H, (int)NN, H, 1.0f, W, H, in, (int)NN, 0.0f, out,
                (int)NN);
    for (int g = 0; g < H; g++)
        if (bias)
            for (size_t e = 0; e < NN; e++) out[(size_t)g * NN + e] += bias[g];
}

/* What both block kinds end with, on rows rows of x (n, rows, D) given the attention output
 * ao: x += gamma_1 proj(ao); x += gamma_2 fc2(gelu(fc1(LN2(x)))). With a tape t the block's
 * intermediates land in it (branch[]: the branches before their gamma). */
static void block_tail(const vit_config *c, const vit_block_params *bp, vit_acts *a, const vit_tape_block *t,
                       const float *ao, int rows, int D, int Hm) {
    float *y0 = t && t->branch[0] ? t->branch[0] : a->xn, *y1 = t && t->branch[1] ? t->branch[1] : a->xn;
    float *xn2 = t ? t->xn2 : a->xn, *hpre = t ? t->hpre : a->hid, *hid = t ? t->hid : a->hid;
    vit_linear(y0, ao, bp->proj_w, bp->proj_b, rows, D, D, 0);
    kernels_scaled_add(a->x, y0, bp->ls1, 1.0f, rows, D);
    if (t) memcpy(t->x_mid, a->x, (size_t)rows * D * sizeof(float));
    kernels_layernorm(xn2, a->x, bp->norm2_w, bp->norm2_b, rows, D, c->ln_eps);
    vit_linear(hpre, xn2, bp->fc1_w, bp->fc1_b, rows, Hm, D, 0);
    vitfam_act(c, hid, hpre, (size_t)rows * Hm);
    vit_linear(y1, hid, bp->fc2_w, bp->fc2_b, rows, D, Hm, 0);
    kernels_scaled_add(a->x, y1, bp->ls2, 1.0f, rows, D);
}

/* A self-attention block on x (n, N, D): LN1, qkv, per image all heads: L_h = scale q_h k_h^T,
 * [MaiT before the mix], L' = proj_l(L), [MaiT after the mix], P = softmax(L'),
 * A' = proj_w(P), out_g = A'_g v_g; x += gamma_1 proj(out); x += gamma_2 MLP(LN2(x)). Without
 * talking heads L' = L and A' = P. */
static void sa_block(const vit_config *c, int l, const vit_geom *g, const vit_block_params *bp, vit_acts *a,
                     int n, const vit_record *rec) {
    const int N = g->T, D = g->D, H = g->H, hd = D / H, M = n * N, W = 3 * D;
    const size_t NN = (size_t)N * N, map = (size_t)H * NN, MD = (size_t)M * D * sizeof(float);
    const int th = vit_cait_talking(c, l);
    const vit_mech *m = vit_mech_of(c, l);
    vit_geom mg;
    vit_mech_block mb;
    vit_mech_block_at(&mb, c, l, bp, &mg);
    const float scale = vit_attn_scale(c, l);
    /* a training forward keeps the block in its tape (t); inference reuses the acts */
    const vit_tape_block *t = a->tape ? &a->tape->blk[l] : NULL;
    float *xn = t ? t->xn1 : a->xn, *qkv_all = t ? t->qkv : a->qkv, *ao = t ? t->ao : a->ao;
    float *att_all = t ? t->att : a->att;
    if (t) memcpy(t->x_in, a->x, MD);
    kernels_layernorm(xn, a->x, bp->norm1_w, bp->norm1_b, M, D, c->ln_eps);
    vit_linear(qkv_all, xn, bp->qkv_w, bp->qkv_b, M, W, D, 0);
    float *att = rec_at(rec->attn, l), *sc = rec_at(rec->scores, l);
    float *x0 = th ? rec_at(rec->extra[0], l) : NULL, *x1 = th ? rec_at(rec->extra[1], l) : NULL;
    if (t && th) x0 = t->ext[0], x1 = t->ext[1]; /* the backward's raw logits and softmax */
#pragma omp parallel for schedule(dynamic, 1)
    for (int b = 0; b < n; b++) {
        float *scr = a->cait ? a->cait + (size_t)b * 3 * map : NULL;
        const float *qkv = qkv_all + (size_t)b * N * W;
        float *L = x0 ? x0 + b * map : th ? scr : att_all + b * map;          /* raw logits */
        float *Lm = th ? (sc ? sc + b * map : scr + map) : L;                /* into the softmax */
        float *P = th ? (x1 ? x1 + b * map : scr + 2 * map) : NULL;          /* softmax */
        float *A = att ? att + b * map : att_all + b * map;                  /* multiplies v */
        vit_attn_problem p = {.Tq = N, .Tk = N, .prefix = 0, .gh = g->gh, .gw = g->gw, .H = H, .dq = hd,
                              .scale = scale, .ldq = W, .ldk = W, .ldv = W};
        for (int h = 0; h < H; h++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, hd, scale, qkv + (size_t)h * hd, W,
                        qkv + D + (size_t)h * hd, W, 0.0f, L + h * NN, N);
        /* the mechanism's per-head hook (MaiT's masks): on each head's own logits, or on the
         * mixed ones (c->mask_mix) */
        const int after = th && c->mask_mix == VIT_MASK_MIX_AFTER;
        if (m->scores && !after)
            for (int h = 0; h < H; h++) {
                p.h = h, p.q = qkv + (size_t)h * hd, p.k = qkv + D + (size_t)h * hd, p.v = qkv + 2 * D + (size_t)h * hd;
                m->scores(&mb, &p, L + h * NN);
            }
        if (th) {
            vit_cait_head_mix(Lm, bp->thl_w, bp->thl_b, L, H, NN);
            if (m->scores && after)
                for (int h = 0; h < H; h++) {
                    p.h = h, p.q = p.k = NULL, p.v = qkv + 2 * D + (size_t)h * hd;
                    m->scores(&mb, &p, Lm + h * NN);
                }
            memcpy(P, Lm, map * sizeof(float));
            kernels_softmax_rows(P, H * N, N);
            vit_cait_head_mix(A, bp->thw_w, bp->thw_b, P, H, NN);
        } else {
            if (sc) memcpy(sc + b * map, L, map * sizeof(float));
            if (A != L) memcpy(A, L, map * sizeof(float));
            kernels_softmax_rows(A, H * N, N);
        }
        if (t && A != att_all + b * map) memcpy(att_all + b * map, A, map * sizeof(float));
        for (int h = 0; h < H; h++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, hd, N, 1.0f, A + h * NN, N,
                        qkv + 2 * D + (size_t)h * hd, W, 0.0f, ao + (size_t)b * N * D + (size_t)h * hd, D);
    }
    record_heads(rec_at(rec->q, l), qkv_all, n, N, H, hd, W, 0);
    record_heads(rec_at(rec->k, l), qkv_all, n, N, H, hd, W, D);
    block_tail(c, bp, a, t, ao, M, D, g->Hm);
    float *tok = rec_at(rec->tokens, l);
    if (tok) memcpy(tok, a->x, (size_t)M * D * sizeof(float));
}

/* A class-attention block on u = x (n, T = 1 + N, D), cls in row 0: un = LN1(u), q from un's
 * row 0, k and v from all T rows, per head a = softmax(scale q k^T) (1 x T), cls += gamma_1
 * proj(concat a v), cls += gamma_2 MLP(LN2(cls)). The patch rows are left as they are. */
static void ca_block(const vit_config *c, int l, const vit_geom *g, const vit_block_params *bp, vit_acts *a,
                     int n, const vit_record *rec) {
    const int T = g->T, D = g->D, H = g->H, hd = D / H, W = 2 * D;
    const float scale = vit_attn_scale(c, l);
    const vit_tape_block *t = a->tape ? &a->tape->blk[l] : NULL;
    /* compact (n, D) rows: the class token's query, the attention output, the class token (in
     * acts->ao after the output's rows: ao holds n T D floats, T >= 2) */
    float *q = t ? t->cq : a->pooled, *o = t ? t->ao : a->ao, *cls = a->ao + (size_t)n * D;
    float *xn = t ? t->xn1 : a->xn, *kv_all = t ? t->qkv : a->qkv, *att_all = t ? t->att : a->att;
    if (t) memcpy(t->x_in, a->x, (size_t)n * T * D * sizeof(float));
    kernels_layernorm(xn, a->x, bp->norm1_w, bp->norm1_b, n * T, D, c->ln_eps);
    vit_linear_ld(kv_all, W, xn, bp->k_w, bp->k_b, n * T, D, D, 0);
    vit_linear_ld(kv_all + D, W, xn, bp->v_w, bp->v_b, n * T, D, D, 0);
    for (int b = 0; b < n; b++) memcpy(o + (size_t)b * D, xn + (size_t)b * T * D, (size_t)D * sizeof(float));
    vit_linear(q, o, bp->q_w, bp->q_b, n, D, D, 0);
    float *att = rec_at(rec->attn, l), *sc = rec_at(rec->scores, l);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < n * H; bh++) {
        const int b = bh / H, h = bh % H;
        const float *kv = kv_all + (size_t)b * T * W;
        float *A = (att ? att : att_all) + (size_t)bh * T;
        cblas_sgemv(CblasRowMajor, CblasNoTrans, T, hd, scale, kv + (size_t)h * hd, W, q + (size_t)b * D + (size_t)h * hd,
                    1, 0.0f, A, 1);
        if (sc) memcpy(sc + (size_t)bh * T, A, (size_t)T * sizeof(float));
        kernels_softmax_rows(A, 1, T);
        if (t && att) memcpy(att_all + (size_t)bh * T, A, (size_t)T * sizeof(float));
        cblas_sgemv(CblasRowMajor, CblasTrans, T, hd, 1.0f, kv + D + (size_t)h * hd, W, A, 1, 0.0f,
                    o + (size_t)b * D + (size_t)h * hd, 1);
    }
    record_heads(rec_at(rec->q, l), q, n, 1, H, hd, D, 0);
    record_heads(rec_at(rec->k, l), kv_all, n, T, H, hd, W, 0);
    /* the tail on the class tokens alone, gathered (the patch rows stay as they are) */
    for (int b = 0; b < n; b++) memcpy(cls + (size_t)b * D, a->x + (size_t)b * T * D, (size_t)D * sizeof(float));
    vit_acts la = *a;
    la.x = cls;
    block_tail(c, bp, &la, t, o, n, D, g->Hm);
    for (int b = 0; b < n; b++) memcpy(a->x + (size_t)b * T * D, cls + (size_t)b * D, (size_t)D * sizeof(float));
    float *tok = rec_at(rec->tokens, l);
    if (tok) memcpy(tok, a->x, (size_t)n * T * D * sizeof(float));
}

void vit_cait_forward(const vit_config *c, const vit_params *p, vit_acts *a, const float *images, int n,
                      const vit_record *rec) {
    const int P = c->patch_size, G = c->img_size / P, N = G * G, D = c->embed_dim, K = c->in_chans * P * P;
    vit_patchify(a->patches, images, n, c->in_chans, c->img_size, P);
    vit_linear(a->x, a->patches, p->patch_w, p->patch_b, n * N, D, K, 0);
    for (int b = 0; b < n; b++) /* x = patch_embed + pos_embed (no class slot) */
        for (size_t i = 0; i < (size_t)N * D; i++) a->x[(size_t)b * N * D + i] += p->pos_embed[i];
    const int L0 = c->stage[0].depth;
    vit_geom g;
    for (int l = 0; l < L0; l++) {
        vit_block_geom(c, l, &g);
        sa_block(c, l, &g, &p->blocks[l], a, n, rec);
    }
    /* u = [cls; x]: each image's rows move down by one (last image first: no overlap) */
    const int T = N + 1;
    for (int b = n - 1; b >= 0; b--) {
        memmove(a->x + ((size_t)b * T + 1) * D, a->x + (size_t)b * N * D, (size_t)N * D * sizeof(float));
        memcpy(a->x + (size_t)b * T * D, p->cls_token, (size_t)D * sizeof(float));
    }
    for (int l = L0; l < c->depth; l++) {
        vit_block_geom(c, l, &g);
        ca_block(c, l, &g, &p->blocks[l], a, n, rec);
    }
    /* the final norm on [cls; x] is per row: only row 0 reaches the head */
    for (int b = 0; b < n && a->tape; b++)
        memcpy(a->tape->x_final + (size_t)b * D, a->x + (size_t)b * T * D, (size_t)D * sizeof(float));
    for (int b = 0; b < n; b++)
        kernels_layernorm(a->pooled + (size_t)b * D, a->x + (size_t)b * T * D, p->norm_w, p->norm_b, 1, D, c->ln_eps);
    const int C = c->num_classes;
    for (int b = 0; b < n && C > 0; b++) {
        float *lg = a->logits + (size_t)b * C;
        memcpy(lg, p->head_b, (size_t)C * sizeof(float));
        cblas_sgemv(CblasRowMajor, CblasNoTrans, C, D, 1.0f, p->head_w, D, a->pooled + (size_t)b * D, 1, 1.0f, lg, 1);
    }
}

/* ---- checks ---- */

as_status vit_cait_validate(const vit_config *c, as_error *err) {
    const char *nm = c->name[0] ? c->name : "model";
    const vit_stage *sa = &c->stage[0], *ca = &c->stage[1];
    if (c->n_stages != 2 || sa->scope != VIT_SCOPE_GLOBAL || ca->scope != VIT_SCOPE_CLASS ||
        sa->down != VIT_DOWN_NONE || ca->down != VIT_DOWN_NONE)
        return as_fail(err, AS_ERR_CONFIG, "%s: a CaiT is two stages, self-attention blocks then "
                       "class-attention blocks: describe it with \"depth\" and \"depth_token_only\" "
                       "(docs/models.md, CaiT)", nm);
    if (sa->depth < 1 || ca->depth < 1 || sa->depth + ca->depth != c->depth)
        return as_fail(err, AS_ERR_CONFIG, "%s: \"depth\" %d and \"depth_token_only\" %d: each "
                       "needs at least 1 block (and together at most %d)", nm, sa->depth, ca->depth,
                       VIT_MAX_DEPTH);
    for (int s = 0; s < 2; s++)
        if (c->stage[s].embed_dim != c->embed_dim || c->stage[s].num_heads != c->num_heads ||
            c->stage[s].mlp_hidden < 1 || c->stage[s].mlp_hidden > VIT_MAX_HIDDEN)
            return as_fail(err, AS_ERR_CONFIG, "%s: both CaiT stages have the model's embed_dim "
                           "and num_heads and an MLP width in 1..%d: check \"mlp_ratio\" and "
                           "\"mlp_ratio_token_only\"", nm, VIT_MAX_HIDDEN);
    if (!c->class_token || c->distilled)
        return as_fail(err, AS_ERR_CONFIG, "%s: a CaiT has one class token and no distillation "
                       "token: remove \"class_token\" and \"distilled\"", nm);
    if (c->global_pool != VIT_POOL_TOKEN || c->fc_norm || c->patch_norm)
        return as_fail(err, AS_ERR_CONFIG, "%s: CaiT classifies the class token after its final "
                       "norm: \"global_pool\" must be \"token\" (timm's other pools are not "
                       "supported), without \"fc_norm\" or \"patch_norm\"", nm);
    if (!(c->init_values >= 0.0f) || isinf(c->init_values))
        return as_fail(err, AS_ERR_CONFIG, "%s: \"init_values\" must be a number >= 0 (LayerScale's "
                       "initial gamma; 0 or null: no LayerScale)", nm);
    if (c->talking_heads != 0 && c->talking_heads != 1)
        return as_fail(err, AS_ERR_CONFIG, "%s: \"talking_heads\" must be true or false", nm);
    if ((unsigned)c->mask_mix >= VIT_MASK_MIX_COUNT)
        return as_fail(err, AS_ERR_CONFIG, "%s: \"mask_mix\" must be \"before_mix\" or \"after_mix\"", nm);
    const double N = (double)(c->img_size / c->patch_size) * (c->img_size / c->patch_size);
    if ((N + 1) * (N + 1) * c->num_heads > 2e9 || 3.0 * N * N * c->num_heads > 2e9)
        return as_fail(err, AS_ERR_CONFIG, "%s: %.0f tokens x %d heads is too large for one image: "
                       "use a smaller img_size", nm, N, c->num_heads);
    for (int l = 0; l < c->depth; l++) {
        const vit_attn_kind k = c->attn[l].kind;
        if (k == VIT_ATTN_VANILLA || (k == VIT_ATTN_MAIT && l < sa->depth)) continue;
        /* the SA path applies a mechanism's per-head scores hook and nothing else; a mechanism
         * with its own projections, map work or reused scores would be silently skipped */
        if (l < sa->depth)
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d: %s attention does not run in CaiT's "
                           "talking-heads blocks (they apply only a mechanism's per-head score "
                           "masks): use \"type\": \"vanilla\" or \"mait\" there", nm, l, vit_attn_name(k));
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d: %s attention does not run in CaiT's "
                       "class-attention blocks (one query row, no spatial grid): use \"type\": "
                       "\"vanilla\" there", nm, l, vit_attn_name(k));
    }
    for (int l = 0; c->talking_heads && c->mask_mix == VIT_MASK_MIX_BEFORE && l < sa->depth; l++)
        if (c->attn[l].kind == VIT_ATTN_MAIT && c->attn[l].mask_mode == VIT_MASK_NEG_INF)
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d: MaiT's neg_inf masks before the "
                           "talking-heads mix would make mixed logits infinite (or NaN): use "
                           "\"mask_mode\" zero or soft, or \"mask_mix\": \"after_mix\"", nm, l);
    if (c->mask_mix != VIT_MASK_MIX_BEFORE && (!c->talking_heads || !vit_any_attn(c, VIT_ATTN_MAIT)))
        return as_fail(err, AS_ERR_CONFIG, "%s: \"mask_mix\": \"%s\" places MaiT's masks relative "
                       "to the talking-heads mix, but the model has %s: remove the key", nm,
                       vit_mask_mix_name(c->mask_mix), c->talking_heads ? "no mait blocks" : "no talking heads");
    return AS_OK;
}

/* ---- costs per image ---- */

/* paper: count the self-attention blocks over N + 1 tokens, as CaiT's table does (see
 * vit_cait_paper_macs). */
static void cait_cost(const vit_config *c, vit_cost *out, int paper) {
    const double D = c->embed_dim, P = c->patch_size, G = c->img_size / c->patch_size, N = G * G, T = N + 1;
    const double K = c->in_chans * P * P, C = c->num_classes, bias = c->qkv_bias ? 1 : 0;
    const double ls = c->init_values > 0 ? D : 0;
    vit_cost_add(&out->stem, VIT_COMP_PATCH_EMBED, K * D + D, N * K * D, N * D);
    vit_cost_add(&out->stem, VIT_COMP_TOKENS, D + N * D, 0, N * D);
    for (int l = 0; l < c->depth; l++) {
        vit_geom g;
        vit_block_geom(c, l, &g);
        const double H = g.H, Hm = g.Hm, hd = D / H;
        vit_cost_part *o = &out->stage[g.stage];
        if (g.scope == VIT_SCOPE_CLASS) { /* LN1 over T rows, q from one row, k and v from T */
            vit_cost_add(o, VIT_COMP_NORM, 2 * 2 * D, 0, 8 * T * D + 8 * D);
            vit_cost_add(o, VIT_COMP_QKV, 3 * D * (D + bias), D * D + 2 * T * D * D, (1 + 2 * T) * D * bias);
            vit_cost_add(o, VIT_COMP_ATTN_SCORES, 0, H * T * hd, 6 * H * T);
            vit_cost_add(o, VIT_COMP_ATTN_VALUES, 0, H * T * hd, 0);
            vit_cost_add(o, VIT_COMP_PROJ, D * D + D + ls, D * D, D + (ls ? D : 0));
            vit_cost_add(o, VIT_COMP_MLP, 2 * D * Hm + Hm + D + ls, 2 * D * Hm, 9 * Hm + 2 * D + (ls ? D : 0));
            continue;
        }
        const double maps = H * N * N;
        vit_cost_add(o, VIT_COMP_NORM, 2 * 2 * D, 0, 2 * 8 * N * D);
        if (paper) g.T = g.Tq = g.Tk = (int)N + 1;
        vit_mech_of(c, l)->cost(c, l, &g, o); /* qkv, q k^T, softmax, MaiT's masks */
        if (c->talking_heads) /* proj_l and proj_w: H x H over every map entry, and the biases */
            vit_cost_add(o, VIT_COMP_ATTN_MAPS, 2 * (H * H + H), 2 * H * maps, 2 * maps);
        vit_cost_add(o, VIT_COMP_ATTN_VALUES, 0, maps * hd, 0);
        vit_cost_add(o, VIT_COMP_PROJ, D * D + D + ls, N * D * D, N * D + (ls ? N * D : 0));
        vit_cost_add(o, VIT_COMP_MLP, 2 * D * Hm + Hm + D + ls, 2 * N * D * Hm,
                     N * Hm + N * D + 8 * N * Hm + 2 * N * D + (ls ? N * D : 0));
        if (paper) { /* the same terms over the one more row and column */
            const double S = N + 1, m2 = H * S * S;
            vit_cost_add(o, VIT_COMP_ATTN_MAPS, 0, c->talking_heads ? 2 * H * (m2 - maps) : 0, 0);
            vit_cost_add(o, VIT_COMP_ATTN_VALUES, 0, (m2 - maps) * hd, 0);
            vit_cost_add(o, VIT_COMP_PROJ, 0, D * D, 0);
            vit_cost_add(o, VIT_COMP_MLP, 0, 2 * D * Hm, 0);
        }
    }
    vit_cost_add(&out->head, VIT_COMP_NORM, 2 * D, 0, 8 * T * D);
    vit_cost_add(&out->head, VIT_COMP_HEAD, C > 0 ? D * C + C : 0, C * D, C);
}

void vit_cait_cost(const vit_config *c, vit_cost *out) { cait_cost(c, out, 0); }

double vit_cait_paper_macs(const vit_config *c) {
    vit_cost k;
    memset(&k, 0, sizeof k);
    cait_cost(c, &k, 1);
    double sum = 0;
    vit_cost_part *parts[VIT_MAX_STAGES + 2] = {&k.stem, &k.head, &k.stage[0], &k.stage[1]};
    for (int p = 0; p < 4; p++)
        for (int i = 0; i < VIT_COMP_COUNT; i++) sum += parts[p]->macs[i];
    return sum;
}

/* ---- trace ---- */

int vit_cait_extra(const vit_config *c, int l, int i, vit_extra *out) {
    if (!vit_cait_talking(c, l) || i < 0 || i > 1) return 0;
    if (out) {
        vit_geom g;
        vit_block_geom(c, l, &g);
        *out = i == 0 ? (vit_extra){"scores_qk", g.H, "each head's own logits q_h k_h^T * scale before "
                                    "the talking-heads mix proj_l (with MaiT masks when mask_mix is "
                                    "before_mix)"}
                      : (vit_extra){"attn_softmax", g.H, "softmax(scores) per mixed head, before the "
                                    "talking-heads mix proj_w: row-stochastic, not the map that "
                                    "multiplies the values"};
    }
    return 1;
}

const char *vit_cait_attn_doc(const vit_config *c, int l) {
    if (c->family != VIT_FAMILY_CAIT) return NULL;
    if (vit_cait_talking(c, l))
        return "proj_w(softmax(scores)): the talking-heads map that multiplies the values, "
               "A'_g = sum_h W_w[g,h] P_h + b_w[g]: signed and not row-stochastic";
    vit_geom g;
    vit_block_geom(c, l, &g);
    return g.scope == VIT_SCOPE_CLASS ? "softmax(scores): the class token's row over [cls; patches] "
                                        "(key 0 is the class token)" : NULL;
}

const char *vit_cait_scores_doc(const vit_config *c, int l) {
    if (!vit_cait_talking(c, l)) return NULL;
    return "proj_l(scale q k^T): the mixed logits that enter the softmax, L'_g = sum_h W_l[g,h] "
           "L_h + b_l[g] (with MaiT masks applied after the mix when mask_mix is after_mix)";
}

void vit_cait_trace_attrs(const vit_config *c, int l, vit_mech_writer *w) {
    if (c->family != VIT_FAMILY_CAIT) return;
    vit_geom g;
    vit_block_geom(c, l, &g);
    const int th = vit_cait_talking(c, l);
    w->boolean(w, "talking_heads", th);
    w->boolean(w, "attn_row_stochastic", !th);
    w->boolean(w, "attn_signed", th);
    w->str(w, "query_rows", g.scope == VIT_SCOPE_CLASS ? "cls" : "all");
    if (g.scope != VIT_SCOPE_CLASS) w->str(w, "block_kind", "self_attention");
    else w->str(w, "block_kind", "class_attention");
    if (th && c->attn[l].kind == VIT_ATTN_MAIT) w->str(w, "mask_mix", vit_mask_mix_name(c->mask_mix));
    if (c->init_values > 0) w->floats(w, "init_values", &c->init_values, 1);
}
