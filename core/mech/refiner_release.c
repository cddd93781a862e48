/* refiner_release.c: Refined-ViT's blocks as its code was released (zhoudaquan/Refiner_ViT
 * @b11ebb8: models/refined_transformer.py, Refined_Attention; models/refiner_utils.py, DLA),
 * which is not the paper's Refiner (refiner.c; docs/models.md, "Refined-ViT as released"). Two
 * mechanisms hand one map C from block to block (VIT_MECH_CARRY), s = the score scale:
 *   refiner_release (share_atten False): A = softmax(s q k^T) + s C, or the softmax alone where
 *     nothing is carried in (the first block); A multiplies the values and is carried on.
 *   refiner_shared (share_atten True): the qkv Linear makes v alone; no q, k or softmax;
 *     A = s adapt_bn(DLA(C)), DLA(X) = X + bn3(conv_pro(relu6(bn2(dw(relu6(bn1(conv_exp(X))))))))
 *     over the (H, T, T) maps as an H-channel image, class row and column included; C is carried
 *     on unchanged.
 * Every BatchNorm is in eval mode (running statistics; training keeps them frozen and trains the
 * affine), eps = the config's bn_eps. */
#include "../kernels.h"
#include "../mech.h"

#include <cblas.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

enum { BN1, BN2, BN3, BN_ADAPT }; /* bp->dla_bn[i]: {weight, bias, running_mean, running_var} */

/* Channel ch of BatchNorm i as y = a x + c (kernels_bn_fold), with its running mean for the
 * gradients. */
typedef struct {
    float a, c, mean, inv;
} bn_ch;
static bn_ch bn_at(const vit_mech_block *b, int i, int ch) {
    const float *const *bn = b->bp->dla_bn[i];
    const kernels_bn_affine f = kernels_bn_fold(bn[0][ch], bn[1][ch], bn[2][ch], bn[3][ch], b->c->bn_eps);
    return (bn_ch){f.a, f.c, bn[2][ch], f.inv};
}

static int scope_check(const vit_config *c, int l, const char *name, as_error *err) {
    if (c->n_stages == 0) return 1;
    as_fail(err, AS_ERR_CONFIG, "%s: block %d: %s is the Refiner release's block of a plain ViT; a "
            "staged model (%s) cannot carry its maps from block to block: use it in a ViT config",
            vit_mech_model_name(c), l, name, vit_family_name(c->family));
    return 0;
}

/* The block whose map block l receives as C (the last refiner_release before it: shared blocks
 * pass it on), or -1 where nothing is carried in. */
static int carried_from(const vit_config *c, int l) {
    if (!vit_mech_reads_prev(c, l)) return -1;
    int j = l - 1;
    while (j > 0 && c->attn[j].kind == VIT_ATTN_REFINER_SHARED) j--;
    return j;
}

/* The trace's record of where C comes from, and s for shared blocks (which have no q k^T). */
static void carry_attrs(const vit_config *c, int l, vit_mech_writer *w) {
    if (carried_from(c, l) >= 0) w->num(w, "carried_from", carried_from(c, l));
    if (c->attn[l].kind == VIT_ATTN_REFINER_SHARED) {
        const float s = vit_attn_scale(c, l);
        w->floats(w, "scale", &s, 1);
    }
}

/* ---- refiner_release: softmax + s C ---- */

static as_status release_validate(const vit_config *c, int l, const vit_geom *g, as_error *err) {
    (void)g;
    return scope_check(c, l, "refiner_release", err) ? AS_OK : AS_ERR_CONFIG;
}

static void release_describe(const vit_config *c, int l, char *buf, size_t n) {
    snprintf(buf, n, vit_mech_reads_prev(c, l) ? " (+ the carried map)" : " (starts the carried map)");
}

static void release_after_softmax(const vit_mech_block *b, const vit_attn_problem *p, float *A) {
    const size_t TT = (size_t)p->Tq * p->Tk;
    if (p->extra[0]) memcpy(p->extra[0], A, TT * sizeof(float));
    if (p->prev)
        for (size_t e = 0; e < TT; e++) A[e] += p->scale * p->prev[e];
    if (p->keep) memcpy(p->keep, A, TT * sizeof(float));
    (void)b;
}

/* dC = s dA (dA: the gradient of A, the carried-on map's included) */
static void release_head_backward(const vit_mech_block *b, vit_mech_head_bwd *x) {
    const size_t TT = (size_t)x->p->Tq * x->p->Tk;
    for (size_t e = 0; x->dprev && e < TT; e++) x->dprev[e] = x->p->scale * x->dA[e];
    (void)b;
}

static void release_trace_attrs(const vit_config *c, const vit_params *p, int l, vit_mech_writer *w) {
    (void)p;
    carry_attrs(c, l, w);
}

static void release_cost(const vit_config *c, int l, const vit_geom *g, vit_cost_part *o) {
    vit_mech_fused_cost(c, l, g, o);
    if (vit_mech_reads_prev(c, l)) /* + s C: a multiply-add per entry */
        vit_cost_add(o, VIT_COMP_ATTN_MAPS, 0, 0, 2 * g->H * vit_mech_score_entries(g));
}

static int release_extra(const vit_config *c, int l, int i, vit_extra *out) {
    if (i != 0) return 0;
    if (out) *out = (vit_extra){"attn_softmax", c->num_heads, "softmax(s q k^T), before the carried map is added"};
    return 1;
}

static const char *release_not_stochastic(const vit_config *c, int l) {
    return vit_mech_reads_prev(c, l) ? "the Refiner release adds the carried map to the softmax" : NULL;
}

const vit_mech vit_mech_refiner_release = {
    .name = "refiner_release",
    .summary = "the Refiner release's attention: softmax(s q k^T) + s x the map carried from the block before",
    .flags = VIT_MECH_CARRY | VIT_MECH_KEEPS_MAP | VIT_MECH_SOFTMAX_EXTRA0,
    .scopes = 1u << VIT_SCOPE_GLOBAL,
    .validate = release_validate,
    .describe = release_describe,
    .layout = vit_mech_fused_layout,
    .specs = vit_mech_fused_specs,
    .after_softmax = release_after_softmax,
    .head_backward = release_head_backward,
    .cost = release_cost,
    .extra = release_extra,
    .trace_attrs = release_trace_attrs,
    .attn_doc = "softmax(s q k^T) + s C, C the attn of layer carried_from (absent: none, the chain's "
                "first block): multiplies the values and is carried on; rows sum to 1 + s (C's row sums)",
    .not_stochastic = release_not_stochastic,
};

/* ---- refiner_shared: s adapt_bn(DLA(C)) ---- */

static const vit_mech_key keys[] = {
    {"expanded_heads", "H', the heads conv_exp expands to (1..4096; default 3 H, the release's every model)"},
    {"kernel_size", "k, the odd side of the depth-wise convolution (default 3)"},
};

static void shared_defaults(vit_attn *a) { a->kernel_size = 3; }

static int shared_parse(vit_attn *a, const vit_mech_entry *e, int H, char *msg, size_t n) {
    int iv;
    const vit_mv *x = vit_mech_get(e, "expanded_heads");
    if (x && !vit_mv_int(x, 1, 4096, &iv))
        return snprintf(msg, n, "\"expanded_heads\" must be an integer in 1..4096"), 0;
    a->expanded_heads = x ? iv : 3 * H;
    if ((x = vit_mech_get(e, "kernel_size")) && !vit_mv_int(x, 1, VIT_MAX_KERNEL, &iv))
        return snprintf(msg, n, "\"kernel_size\" must be an odd integer in 1..%d", VIT_MAX_KERNEL), 0;
    if (x) a->kernel_size = iv;
    return 1;
}

static void shared_write(const vit_config *c, int l, vit_mech_writer *w) {
    w->num(w, "expanded_heads", c->attn[l].expanded_heads);
    w->num(w, "kernel_size", c->attn[l].kernel_size);
}

static as_status shared_validate(const vit_config *c, int l, const vit_geom *g, as_error *err) {
    const vit_attn *a = &c->attn[l];
    const char *n = vit_mech_model_name(c);
    if (!scope_check(c, l, "refiner_shared", err)) return AS_ERR_CONFIG;
    if (!vit_mech_reads_prev(c, l))
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d is refiner_shared, which refines the map "
                       "carried to it, but %s: put a refiner_release block before it", n, l,
                       l == 0 ? "it is the first block" : "the block before is neither refiner_release nor refiner_shared");
    if (a->expanded_heads < 1 || a->expanded_heads > 4096)
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d: refiner_shared expanded_heads must be "
                       "1..4096 (got %d)", n, l, a->expanded_heads);
    const int kmax = 2 * g->Tq - 1 < VIT_MAX_KERNEL ? 2 * g->Tq - 1 : VIT_MAX_KERNEL;
    if (a->kernel_size < 1 || a->kernel_size % 2 == 0 || a->kernel_size > kmax)
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d: refiner_shared kernel_size %d must be odd "
                       "and at most %d (2 T - 1 for the map's T = %d tokens, and at most %d)", n, l,
                       a->kernel_size, kmax, g->Tq, VIT_MAX_KERNEL);
    return AS_OK;
}

static void shared_describe(const vit_config *c, int l, char *buf, size_t n) {
    snprintf(buf, n, " H'=%d k=%d (refines the carried map)", c->attn[l].expanded_heads, c->attn[l].kernel_size);
}

static int shared_map_heads(const vit_config *c, int l) {
    const int E = c->attn[l].expanded_heads;
    return E > c->num_heads ? E : c->num_heads;
}

static void shared_layout(const vit_config *c, int l, vit_mech_layout *out) {
    const int D = c->embed_dim;
    (void)l;
    *out = (vit_mech_layout){
        .W = D,
        .n_proj = 1,
        .proj = {{offsetof(vit_block_params, v_w), offsetof(vit_block_params, v_b), 0, D}},
        .src = {VIT_SRC_NONE, VIT_SRC_NONE, VIT_SRC_QKV},
        .col = {0, 0, 0},
    };
}

/* The release's names: its shared blocks keep "qkv" for the v-only Linear(D, D). */
static void shared_specs(const vit_mech_block *b, vit_block_params *bp, vit_spec_sink *s) {
    const int D = b->g->D, H = b->g->H, E = b->at->expanded_heads, k = b->at->kernel_size;
    VIT_MECH_SPEC(s, &bp->v_w, ".attn.qkv.weight", D, D);
    if (b->c->qkv_bias) VIT_MECH_SPEC(s, &bp->v_b, ".attn.qkv.bias", D);
    VIT_MECH_SPEC(s, &bp->expand, ".attn.DLA.conv_exp.weight", E, H, 1, 1);
    vit_mech_bn_specs(s, bp->dla_bn[BN1], ".attn.DLA.bn1", E);
    VIT_MECH_SPEC(s, &bp->dla, ".attn.DLA.depth_sep_conv.weight", E, 1, k, k);
    vit_mech_bn_specs(s, bp->dla_bn[BN2], ".attn.DLA.bn2", E);
    VIT_MECH_SPEC(s, &bp->reduce, ".attn.DLA.conv_pro.weight", H, E, 1, 1);
    vit_mech_bn_specs(s, bp->dla_bn[BN3], ".attn.DLA.bn3", H);
    vit_mech_bn_specs(s, bp->dla_bn[BN_ADAPT], ".attn.adapt_bn", H);
}

/* No keys: the map starts as the carried one, which is carried on as it is. */
static void shared_scores(const vit_mech_block *b, const vit_attn_problem *p, float *A) {
    const size_t TT = (size_t)p->Tq * p->Tk;
    memcpy(A, p->prev, TT * sizeof(float));
    if (p->keep) memcpy(p->keep, p->prev, TT * sizeof(float));
    (void)b;
}

static float relu6(float x) { return x < 0.0f ? 0.0f : x > 6.0f ? 6.0f : x; }

/* y[ch] = relu6(a x + c) over each channel's TT entries, in place */
static void bn_relu6(const vit_mech_block *b, int i, float *x, int C, size_t TT) {
    for (int ch = 0; ch < C; ch++) {
        const bn_ch n = bn_at(b, i, ch);
        float *r = x + (size_t)ch * TT;
        for (size_t e = 0; e < TT; e++) r[e] = relu6(n.a * r[e] + n.c);
    }
}

/* One image: X = A (H, T, T) in; ext[0] = relu6(bn1(conv_exp X)), ext[1] = relu6(bn2(dw ext[0]))
 * (H', T, T) each; A = s adapt_bn(X + bn3(conv_pro ext[1])) out. */
static void shared_maps(const vit_mech_block *b, float *A, float *const *ext, int Tq, int Tk) {
    const vit_block_params *bp = b->bp;
    const int E = b->at->expanded_heads, k = b->at->kernel_size, H = b->g->H, T = Tq;
    const size_t TT = (size_t)Tq * Tk;
    const float s = vit_attn_scale(b->c, b->l);
    kernels_mix_rows(ext[0], bp->expand, H, 1, A, E, H, TT, 1.0f, 0);
    bn_relu6(b, BN1, ext[0], E, TT);
    kernels_maps_dwconv(ext[1], ext[0], bp->dla, E, T, k);
    bn_relu6(b, BN2, ext[1], E, TT);
    for (int h = 0; h < H; h++) {
        const bn_ch n3 = bn_at(b, BN3, h), n4 = bn_at(b, BN_ADAPT, h);
        float *r = A + (size_t)h * TT;
        for (size_t e = 0; e < TT; e++) r[e] += n3.c;
        /* r += a3 (conv_pro ext[1])[h] */
        kernels_mix_rows(r, bp->reduce + (size_t)h * E, E, 1, ext[1], 1, E, TT, n3.a, 1);
        for (size_t e = 0; e < TT; e++) r[e] = s * (n4.a * r[e] + n4.c);
    }
}

/* Per-image gradients in part: conv_pro (H, E), conv_exp (E, H), the kernels (E, k, k), then
 * each BatchNorm's weight and bias (bn1, bn2: E each; bn3, adapt_bn: H each). */
typedef struct {
    float *pro, *exp, *dw, *bn[4][2];
} shared_part;
static shared_part part_at(float *p, int H, int E, int k) {
    shared_part q = {p, p + (size_t)H * E, p + 2 * (size_t)H * E, {{0}}};
    float *o = q.dw + (size_t)E * k * k;
    const int C[4] = {E, E, H, H};
    for (int i = 0; i < 4; i++) {
        q.bn[i][0] = o;
        q.bn[i][1] = o + C[i];
        o += 2 * C[i];
    }
    return q;
}
static size_t shared_part_floats(const vit_config *c, int l) {
    const size_t H = (size_t)c->num_heads, E = (size_t)c->attn[l].expanded_heads, k = (size_t)c->attn[l].kernel_size;
    return 2 * H * E + E * k * k + 2 * (2 * E + 2 * H);
}

/* BatchNorm i's weight and bias gradients from dy (its output's gradient) and its input x over
 * channel ch's TT entries; dy becomes the input's gradient a dy. */
static void bn_backward(const vit_mech_block *b, int i, int ch, float *dy, const float *x, size_t TT,
                        shared_part *q) {
    const bn_ch n = bn_at(b, i, ch);
    kernels_bn_backward(dy, x, n.mean, n.inv, n.a, TT, &q->bn[i][0][ch], &q->bn[i][1][ch]);
}

/* One image. G (H, TT): the gradient of A in, of X out. X: the carried map (the tape's soft),
 * e1, e2: ext[0], ext[1]. Scratch: y (H, TT), u (E, TT), d1, d2 (E, TT) each. The products
 * before each BatchNorm are formed again (conv_exp X, dw e1, conv_pro e2). */
static void shared_backward_image(const vit_mech_block *b, float *G, const float *X, const float *e1,
                                  const float *e2, float *y, float *u, float *d1, float *d2, shared_part *q,
                                  int T) {
    const vit_block_params *bp = b->bp;
    const int E = b->at->expanded_heads, k = b->at->kernel_size, H = b->g->H;
    const size_t TT = (size_t)T * T;
    const float s = vit_attn_scale(b->c, b->l);
    /* y = conv_pro e2; D = X + bn3(y); A = s adapt_bn(D) */
    kernels_mix_rows(y, bp->reduce, E, 1, e2, H, E, TT, 1.0f, 0);
    for (int h = 0; h < H; h++) {
        const bn_ch n3 = bn_at(b, BN3, h);
        float *g = G + (size_t)h * TT, *yr = y + (size_t)h * TT;
        const float *xr = X + (size_t)h * TT;
        for (size_t e = 0; e < TT; e++) {
            g[e] *= s;
            d1[e] = xr[e] + n3.a * yr[e] + n3.c; /* D, in scratch for adapt_bn's gradient */
        }
        bn_backward(b, BN_ADAPT, h, g, d1, TT, q); /* G = dD: X's gradient through the identity */
        memcpy(d1, g, TT * sizeof(float));
        bn_backward(b, BN3, h, d1, yr, TT, q);
        memcpy(yr, d1, TT * sizeof(float)); /* y = dy */
    }
    /* conv_pro: its gradient and de2 = conv_pro^T dy, masked by relu6 */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, H, E, (int)TT, 1.0f, y, (int)TT, e2, (int)TT, 0.0f, q->pro, E);
    kernels_mix_rows(d2, bp->reduce, 1, E, y, E, H, TT, 1.0f, 0);
    kernels_maps_dwconv(u, e1, bp->dla, E, T, k); /* bn2's input */
    for (int ch = 0; ch < E; ch++) {
        float *g = d2 + (size_t)ch * TT;
        const float *o = e2 + (size_t)ch * TT;
        for (size_t e = 0; e < TT; e++)
            if (!(o[e] > 0.0f && o[e] < 6.0f)) g[e] = 0.0f;
        bn_backward(b, BN2, ch, g, u + (size_t)ch * TT, TT, q);
    }
    kernels_maps_dwconv_backward(d1, q->dw, d2, e1, bp->dla, E, T, k); /* d1 = de1 */
    kernels_mix_rows(u, bp->expand, H, 1, X, E, H, TT, 1.0f, 0); /* bn1's input */
    for (int ch = 0; ch < E; ch++) {
        float *g = d1 + (size_t)ch * TT;
        const float *o = e1 + (size_t)ch * TT;
        for (size_t e = 0; e < TT; e++)
            if (!(o[e] > 0.0f && o[e] < 6.0f)) g[e] = 0.0f;
        bn_backward(b, BN1, ch, g, u + (size_t)ch * TT, TT, q);
    }
    /* conv_exp: its gradient, and X's through it added to the identity's */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, E, H, (int)TT, 1.0f, d1, (int)TT, X, (int)TT, 0.0f, q->exp, H);
    kernels_mix_rows(G, bp->expand, 1, H, d1, H, E, TT, 1.0f, 1);
}

static void shared_maps_backward(const vit_mech_block *b, const vit_block_params *gb, const vit_tape_block *t,
                                 vit_grad_ws *ws, int n, int Tq, int Tk) {
    const int H = b->g->H, E = b->at->expanded_heads, k = b->at->kernel_size;
    const size_t TT = (size_t)Tq * Tk, Hmax = (size_t)(E > H ? E : H), stride = vit_mech_part_floats(b->c);
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n; i++) {
        shared_part q = part_at(ws->part + (size_t)i * stride, H, E, k);
        shared_backward_image(b, ws->dA + (size_t)i * H * TT, t->soft + (size_t)i * H * TT,
                              t->ext[0] + (size_t)i * E * TT, t->ext[1] + (size_t)i * E * TT,
                              ws->dX + (size_t)i * Hmax * TT, ws->dS + (size_t)i * Hmax * TT,
                              ws->dext[0] + (size_t)i * E * TT, ws->dext[1] + (size_t)i * E * TT, &q, Tq);
    }
    /* summed over images in order: the same for any thread count */
    shared_part g = {WR(gb->reduce), WR(gb->expand), WR(gb->dla), {{0}}};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++) g.bn[i][j] = WR(gb->dla_bn[i][j]);
    const int C[4] = {E, E, H, H};
    for (int i = 0; i < n; i++) {
        const shared_part q = part_at(ws->part + (size_t)i * stride, H, E, k);
        for (size_t e = 0; e < (size_t)H * E; e++) {
            g.pro[e] += q.pro[e];
            g.exp[e] += q.exp[e];
        }
        for (size_t e = 0; e < (size_t)E * k * k; e++) g.dw[e] += q.dw[e];
        for (int j = 0; j < 4; j++)
            for (int ch = 0; ch < C[j]; ch++) {
                g.bn[j][0][ch] += q.bn[j][0][ch];
                g.bn[j][1][ch] += q.bn[j][1][ch];
            }
    }
}

/* dC: the map's gradient back through DLA (in dS, the next block's share of C added) */
static void shared_head_backward(const vit_mech_block *b, vit_mech_head_bwd *x) {
    const size_t TT = (size_t)x->p->Tq * x->p->Tk;
    if (x->dprev) memcpy(x->dprev, x->dS, TT * sizeof(float));
    x->dR = NULL;
    (void)b;
}

static void shared_cost(const vit_config *c, int l, const vit_geom *g, vit_cost_part *o) {
    const double D = g->D, H = g->H, P = vit_mech_score_entries(g), E = c->attn[l].expanded_heads;
    const double k2 = (double)c->attn[l].kernel_size * c->attn[l].kernel_size, bias = c->qkv_bias ? 1 : 0;
    const double rows = vit_mech_rows(g);
    vit_cost_add(o, VIT_COMP_QKV, D * (D + bias), rows * D * D, rows * D * bias);
    /* conv_exp, the depth-wise conv, conv_pro; each BatchNorm (an affine: 2 flops) and ReLU6,
     * the identity and s */
    vit_cost_add(o, VIT_COMP_ATTN_MAPS, 2 * E * H + E * k2 + 2 * (2 * E + 2 * H), /* BN: weight, bias */
                 (2 * E * H + E * k2) * P, (4 * E + 2 * E + 2 * H + 2 * H + 2 * H) * P);
}

static int shared_extra(const vit_config *c, int l, int i, vit_extra *out) {
    const int E = c->attn[l].expanded_heads;
    vit_extra x;
    if (i == 0) x = (vit_extra){"attn_expanded", E, "relu6(bn1(conv_exp C)): the carried map expanded across heads"};
    else if (i == 1) x = (vit_extra){"attn_convolved", E, "relu6(bn2(depth_sep_conv of attn_expanded)): the k x k local attention"};
    else return 0;
    if (out) *out = x;
    return 1;
}

static int shared_statics(const vit_config *c, int l, vit_static *v) {
    const int H = c->num_heads, E = c->attn[l].expanded_heads, k = c->attn[l].kernel_size;
    v[0] = (vit_static){"expand", 2, {E, H, 0}, "DLA.conv_exp (H', H): the 1 x 1 expansion across heads"};
    v[1] = (vit_static){"dla", 3, {E, k, k}, "DLA.depth_sep_conv: the head-wise k x k kernels"};
    v[2] = (vit_static){"reduce", 2, {H, E, 0}, "DLA.conv_pro (H, H'): the 1 x 1 reduction"};
    return 3;
}

static int shared_check(const vit_config *c, const vit_params *p, int l, char *msg, size_t n) {
    static const char *const names[4] = {"DLA.bn1", "DLA.bn2", "DLA.bn3", "adapt_bn"};
    const int E = c->attn[l].expanded_heads, C[4] = {E, E, c->num_heads, c->num_heads};
    for (int i = 0; i < 4; i++)
        for (int ch = 0; ch < C[i]; ch++)
            if (!(p->blocks[l].dla_bn[i][3][ch] + c->bn_eps > 0.0f)) {
                snprintf(msg, n, "blocks.%d.attn.%s.running_var[%d] is %g, so the BatchNorm divides by "
                         "the square root of a value <= 0: the weights are corrupt", l, names[i], ch,
                         (double)p->blocks[l].dla_bn[i][3][ch]);
                return 0;
            }
    return 1;
}

static void shared_trace_attrs(const vit_config *c, const vit_params *p, int l, vit_mech_writer *w) {
    (void)p;
    shared_write(c, l, w);
    carry_attrs(c, l, w);
}

static const char *shared_not_stochastic(const vit_config *c, int l) {
    (void)c, (void)l;
    return "the Refiner release's shared blocks refine the carried map through DLA and BatchNorms";
}

const vit_mech vit_mech_refiner_shared = {
    .name = "refiner_shared",
    .summary = "the Refiner release's shared block: s x adapt_bn(DLA(the carried map)) on v alone",
    .flags = VIT_MECH_CARRY | VIT_MECH_NO_SOFTMAX,
    .scopes = 1u << VIT_SCOPE_GLOBAL,
    .keys = keys,
    .n_keys = sizeof keys / sizeof keys[0],
    .defaults = shared_defaults,
    .parse = shared_parse,
    .write = shared_write,
    .validate = shared_validate,
    .describe = shared_describe,
    .map_heads = shared_map_heads,
    .layout = shared_layout,
    .specs = shared_specs,
    .scores = shared_scores,
    .maps = shared_maps,
    .maps_backward = shared_maps_backward,
    .head_backward = shared_head_backward,
    .part_floats = shared_part_floats,
    .cost = shared_cost,
    .extra = shared_extra,
    .statics = shared_statics,
    .static_fill = vit_mech_dla_static_fill,
    .check = shared_check,
    .trace_attrs = shared_trace_attrs,
    .attn_doc = "s adapt_bn(DLA(C)), C the attn of layer carried_from: signed, rows need not sum to 1; "
                "multiplies the values (C is carried on unchanged)",
    .scores_doc = "no scores of its own: C, the carried map DLA refines (the attn of layer carried_from)",
    .not_stochastic = shared_not_stochastic,
};
