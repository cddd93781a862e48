/* lsla.c: ViT-LSLA's light self-limited attention. Keys (and with "values": "x", values) are
 * the normalised input x itself; scores (q x^T) * DS (a learnable N x N dynamic scale, or the
 * fixed scale) + inner bias; after the softmax an outer bias; "proj": false drops the output
 * projection (the paper's NP). Biases: full (H, N, N) tables or Swin-style relative tables. */
#include "../mech.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>

#include "../attn_ops.h"


static const vit_mech_key keys[] = {
    {"dynamic_scale", "true (default): a learnable N x N DS multiplies q x^T; false: the fixed scale"},
    {"inner_bias", "\"none\", \"full\" (default) or \"relative\": added before the softmax"},
    {"outer_bias", "\"none\", \"full\" (default) or \"relative\": added after the softmax"},
    {"keys", "\"x\" (default): keys are x (LSA); \"k\": a key projection (with values \"v\": Table 4's QKV)"},
    {"values", "\"x\" (QXX, default): values are x; \"v\" (QXV): a value projection"},
    {"proj", "true (default): the output projection; false: none (NP)"},
    {"outer_bias_masked", "true (default): in a shifted window the outer bias skips the pairs the shift "
                          "mask separates; false: it is added to every pair of the window"},
};

static void defaults(vit_attn *a) { /* the paper's Algorithm 1 */
    a->dynamic_scale = 1;
    a->inner_bias = a->outer_bias = VIT_BIAS_FULL;
}

static int parse(vit_attn *a, const vit_mech_entry *e, int H, char *msg, size_t n) {
    const vit_mv *j;
    if ((j = vit_mech_get(e, "dynamic_scale"))) {
        if (j->type != VIT_MV_BOOL) return snprintf(msg, n, "\"dynamic_scale\" must be true or false"), 0;
        a->dynamic_scale = j->boolean;
    }
    if ((j = vit_mech_get(e, "outer_bias_masked"))) {
        if (j->type != VIT_MV_BOOL) return snprintf(msg, n, "\"outer_bias_masked\" must be true or false"), 0;
        a->outer_unmasked = !j->boolean;
    }
    if ((j = vit_mech_get(e, "proj"))) {
        if (j->type != VIT_MV_BOOL) return snprintf(msg, n, "\"proj\" must be true or false"), 0;
        a->no_proj = !j->boolean;
    }
    const char *bk[2] = {"inner_bias", "outer_bias"};
    vit_bias_kind *bv[2] = {&a->inner_bias, &a->outer_bias};
    for (int i = 0; i < 2; i++)
        if ((j = vit_mech_get(e, bk[i]))) {
            int b = j->type == VIT_MV_STRING ? vit_bias_parse(j->str)
                    : j->type == VIT_MV_BOOL && !j->boolean ? 0 : -1;
            if (b < 0) return snprintf(msg, n, "\"%s\" must be \"none\", \"full\" or \"relative\"", bk[i]), 0;
            *bv[i] = (vit_bias_kind)b;
        }
    if ((j = vit_mech_get(e, "keys"))) {
        if (j->type != VIT_MV_STRING || (strcmp(j->str, "x") && strcmp(j->str, "k")))
            return snprintf(msg, n, "\"keys\" must be \"x\" (the paper's LSA) or \"k\" (a key projection: "
                            "with \"values\": \"v\", Table 4's QKV)"), 0;
        a->key_proj = j->str[0] == 'k';
    }
    if ((j = vit_mech_get(e, "values"))) {
        if (j->type != VIT_MV_STRING || (strcmp(j->str, "x") && strcmp(j->str, "v")))
            return snprintf(msg, n, "\"values\" must be \"x\" (QXX) or \"v\" (QXV, a value projection)"), 0;
        a->value_proj = j->str[0] == 'v';
    }
    return 1;
}

static void write(const vit_config *c, int l, vit_mech_writer *w) {
    const vit_attn *a = &c->attn[l];
    w->boolean(w, "dynamic_scale", a->dynamic_scale);
    w->str(w, "inner_bias", vit_bias_name(a->inner_bias));
    w->str(w, "outer_bias", vit_bias_name(a->outer_bias));
    w->str(w, "keys", a->key_proj ? "k" : "x");
    w->str(w, "values", a->value_proj ? "v" : "x");
    w->boolean(w, "proj", !a->no_proj);
    w->boolean(w, "outer_bias_masked", !a->outer_unmasked);
}

/* 1 when some block of c runs LSLA with an outer bias in shifted windows: the only pairs
 * "outer_bias_masked": false acts on are those Swin's shift mask separates. */
static int outer_mask_acts(const vit_config *c) {
    for (int k = 0; k < c->depth; k++) {
        if (c->attn[k].kind != VIT_ATTN_LSLA || c->attn[k].outer_bias == VIT_BIAS_NONE) continue;
        vit_geom gk;
        vit_block_geom(c, k, &gk);
        if (gk.scope == VIT_SCOPE_WINDOW && gk.shift) return 1;
    }
    return 0;
}

static int no_effect(const vit_config *c, int l, char *msg, size_t n) {
    if (!c->attn[l].outer_unmasked || outer_mask_acts(c)) return 0;
    snprintf(msg, n, "\"outer_bias_masked\": false has no effect: no block runs lsla with an outer bias in "
             "shifted windows, where alone the shift mask separates pairs: remove it");
    return 1;
}

static as_status validate(const vit_config *c, int l, const vit_geom *g, as_error *err) {
    const vit_attn *a = &c->attn[l];
    const char *n = vit_mech_model_name(c);
    if (a->scale > 0.0f && a->dynamic_scale)
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d: \"scale\" has no effect on lsla with a "
                       "dynamic scale (the learnable DS replaces it): remove it, or set "
                       "\"dynamic_scale\": false to use it as the fixed scale", n, l);
    if ((unsigned)a->inner_bias >= VIT_BIAS_COUNT || (unsigned)a->outer_bias >= VIT_BIAS_COUNT)
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d: unknown lsla bias kind", n, l);
    if ((a->inner_bias == VIT_BIAS_RELATIVE || a->outer_bias == VIT_BIAS_RELATIVE) && g->prefix)
        return as_fail(err, AS_ERR_CONFIG,
                       "%s: block %d: relative position biases need the %d tokens to form a "
                       "square M x M window, but %d of them are class/distillation tokens: "
                       "use \"full\" bias tables, or class_token false with global_pool "
                       "\"avg\"", n, l, g->T, g->prefix);
    return AS_OK;
}

static void describe(const vit_config *c, int l, char *buf, size_t n) {
    const vit_attn *a = &c->attn[l];
    snprintf(buf, n, " %s, inner %s, outer %s, Q%c%c%s%s", a->dynamic_scale ? "DS" : "fixed scale",
             vit_bias_name(a->inner_bias), vit_bias_name(a->outer_bias), a->key_proj ? 'K' : 'X', a->value_proj ? 'V' : 'X',
             a->no_proj ? ", NP" : "", a->outer_unmasked && a->outer_bias ? ", outer bias unmasked" : "");
}

static int has_proj(const vit_attn *a) { return !a->no_proj; }

static float product_scale(const vit_config *c, int l) {
    return c->attn[l].dynamic_scale ? 1.0f : vit_attn_scale(c, l);
}

static void layout(const vit_config *c, int l, vit_mech_layout *out) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    const int D = g.D, kp = c->attn[l].key_proj, vp = c->attn[l].value_proj;
    /* q, then k and v where they are projected (columns in that order); x itself otherwise */
    *out = (vit_mech_layout){
        .W = (1 + kp + vp) * D,
        .n_proj = 1,
        .proj = {{offsetof(vit_block_params, q_w), offsetof(vit_block_params, q_b), 0, D}},
        .src = {VIT_SRC_QKV, kp ? VIT_SRC_QKV : VIT_SRC_X, vp ? VIT_SRC_QKV : VIT_SRC_X},
        .col = {0, kp ? D : 0, vp ? (1 + kp) * D : 0},
    };
    if (kp) out->proj[out->n_proj++] = (vit_mech_proj){offsetof(vit_block_params, k_w), offsetof(vit_block_params, k_b), D, D};
    if (vp) out->proj[out->n_proj++] = (vit_mech_proj){offsetof(vit_block_params, v_w), offsetof(vit_block_params, v_b),
                                                       (1 + kp) * D, D};
}

static void specs(const vit_mech_block *b, vit_block_params *bp, vit_spec_sink *s) {
    const vit_attn *at = b->at;
    const int D = b->g->D, H = b->g->H, Tq = b->g->Tq, Tk = b->g->Tk, bias = b->c->qkv_bias;
    int gh, gw;
    vit_mech_problem_grid(b->g, &gh, &gw);
    const int W = 2 * gw - 1;
    VIT_MECH_SPEC(s, &bp->q_w, ".attn.q.weight", D, D);
    if (bias) VIT_MECH_SPEC(s, &bp->q_b, ".attn.q.bias", D);
    if (at->key_proj) {
        VIT_MECH_SPEC(s, &bp->k_w, ".attn.k.weight", D, D);
        if (bias) VIT_MECH_SPEC(s, &bp->k_b, ".attn.k.bias", D);
    }
    if (at->value_proj) {
        VIT_MECH_SPEC(s, &bp->v_w, ".attn.v.weight", D, D);
        if (bias) VIT_MECH_SPEC(s, &bp->v_b, ".attn.v.bias", D);
    }
    if (at->dynamic_scale) VIT_MECH_SPEC(s, &bp->ds, ".attn.ds", Tq, Tk);
    if (at->inner_bias == VIT_BIAS_FULL) VIT_MECH_SPEC(s, &bp->inner_bias, ".attn.inner_bias", H, Tq, Tk);
    if (at->inner_bias == VIT_BIAS_RELATIVE) VIT_MECH_SPEC(s, &bp->inner_bias, ".attn.inner_bias_table", W * W, H);
    if (at->outer_bias == VIT_BIAS_FULL) VIT_MECH_SPEC(s, &bp->outer_bias, ".attn.outer_bias", H, Tq, Tk);
    if (at->outer_bias == VIT_BIAS_RELATIVE) VIT_MECH_SPEC(s, &bp->outer_bias, ".attn.outer_bias_table", W * W, H);
}

static void scores(const vit_mech_block *b, const vit_attn_problem *p, float *A) {
    const size_t TT = (size_t)p->Tq * p->Tk;
    if (b->at->dynamic_scale)
        for (size_t i = 0; i < TT; i++) A[i] *= b->bp->ds[i];
    vit_add_bias(A, b->bp->inner_bias, b->at->inner_bias, p->H, p->h, p->Tq, p->gw);
}

/* The outer bias after the softmax. In a shifted window (p->add_mask) the shift mask's -100 has
 * taken the separated pairs to ~0 weight, but B_outer is added after the softmax: the paper's
 * Algorithm 1 per window would give them B_outer[i, j] of weight, from tokens on the far side of
 * the image. By default ("outer_bias_masked": true) those pairs get none; false adds it everywhere. */
static void after_softmax(const vit_mech_block *b, const vit_attn_problem *p, float *A) {
    const size_t TT = (size_t)p->Tq * p->Tk;
    if (p->extra[0]) memcpy(p->extra[0], A, TT * sizeof(float));
    if (!p->add_mask || b->at->outer_unmasked || b->at->outer_bias == VIT_BIAS_NONE) {
        vit_add_bias(A, b->bp->outer_bias, b->at->outer_bias, p->H, p->h, p->Tq, p->gw);
        return;
    }
    for (size_t e = 0; e < TT; e++) /* the kept pairs take their bias, the others keep their map */
        if (p->add_mask[e] == 0.0f) A[e] += vit_bias_at(b->bp->outer_bias, b->at->outer_bias, p->H, p->h, p->Tq,
                                                         p->gw, (int)(e / (size_t)p->Tk), (int)(e % (size_t)p->Tk));
}

/* S = (q x^T) * DS + B: X = dS * (q x^T) for DS, dR = dS * DS (dA stays for the outer bias, dS
 * for the inner; in a shifted window with the outer bias masked, dA without the pairs it skips) */
static void head_backward(const vit_mech_block *b, vit_mech_head_bwd *x) {
    const vit_attn_problem *p = x->p;
    const size_t TT = (size_t)p->Tq * p->Tk;
    /* dA is the outer bias's gradient from here on: none where after_softmax did not add it */
    if (p->add_mask && !b->at->outer_unmasked && b->at->outer_bias != VIT_BIAS_NONE)
        for (size_t i = 0; i < TT; i++)
            if (p->add_mask[i] != 0.0f) x->dA[i] = 0.0f;
    if (!b->at->dynamic_scale) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->Tq, p->Tk, p->dq, 1.0f, p->q, p->ldq, p->k,
                p->ldk, 0.0f, x->X, p->Tk);
    for (size_t i = 0; i < TT; i++) x->X[i] *= x->dS[i];
    for (size_t i = 0; i < TT; i++) x->Y[i] = x->dS[i] * b->bp->ds[i];
    x->dR = x->Y;
    x->s = 1.0f;
}

static void params_backward(const vit_mech_block *b, const vit_block_params *gb, const vit_tape *tape,
                            vit_grad_ws *ws, int n, int Tq, int Tk) {
    const vit_attn *at = b->at;
    const int H = b->g->H, T = Tq;
    const size_t nt = (size_t)Tq * Tk, TT = nt;
    int gh, gw;
    vit_mech_problem_grid(b->g, &gh, &gw);
    if (at->dynamic_scale) /* dDS = sum over (image, head) of dS * (q x^T), in dX */
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < nt; i++) {
            double s = 0;
            for (int bh = 0; bh < n * H; bh++) s += ws->dX[(size_t)bh * TT + i];
            WR(gb->ds)[i] += (float)s;
        }
    /* bias tables: the (T, T) gradient of head h summed over images (into dX, free now), then
     * into the table's parametrisation. Inner: dS; outer: dA (added after the softmax) */
    for (int which = 0; which < 2; which++) {
        const vit_bias_kind kind = which ? at->outer_bias : at->inner_bias;
        if (!kind) continue;
        const float *src = which ? ws->dA : ws->dS;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < (size_t)H * nt; i++) {
            const size_t h = i / nt, e = i % nt;
            double s = 0;
            for (int bi = 0; bi < n; bi++) s += src[((size_t)bi * H + h) * nt + e];
            ws->dX[i] = (float)s;
        }
        float *table = WR(which ? gb->outer_bias : gb->inner_bias);
        for (int h = 0; h < H; h++) vit_add_bias_backward(table, ws->dX + (size_t)h * nt, kind, H, h, T, gw);
    }
}

static void cost(const vit_config *c, int l, const vit_geom *g, vit_cost_part *o) {
    const vit_attn *a = &c->attn[l];
    const double D = g->D, H = g->H, T = vit_mech_rows(g), P = vit_mech_score_entries(g), N2 = (double)g->Tq * g->Tk;
    const double bias = c->qkv_bias ? 1 : 0, maps = H * P, softmax = 5 * maps;
    int gh, gw;
    vit_mech_problem_grid(g, &gh, &gw);
    const double W = g->prefix == 0 ? 2.0 * gw - 1 : 0; /* relative table side */
    vit_cost_add(o, VIT_COMP_QKV, D * (D + bias), T * D * D, T * D * bias);
    if (a->key_proj) vit_cost_add(o, VIT_COMP_QKV, D * (D + bias), T * D * D, T * D * bias);
    if (a->value_proj) vit_cost_add(o, VIT_COMP_QKV, D * (D + bias), T * D * D, T * D * bias);
    /* q x^T, then DS (one problem's N x N, shared by the heads) or the fixed scale, then the
     * inner bias */
    vit_cost_add(o, VIT_COMP_ATTN_SCORES, a->dynamic_scale ? N2 : 0, P * D, maps + softmax);
    const vit_bias_kind b[2] = {a->inner_bias, a->outer_bias};
    for (int i = 0; i < 2; i++) {
        if (b[i] == VIT_BIAS_NONE) continue;
        const double p = b[i] == VIT_BIAS_FULL ? H * N2 : W * W * H;
        vit_cost_add(o, i == 0 ? VIT_COMP_ATTN_SCORES : VIT_COMP_ATTN_MAPS, p, 0, maps);
    }
}

static int extra(const vit_config *c, int l, int i, vit_extra *out) {
    if (i != 0) return 0;
    vit_geom g;
    vit_block_geom(c, l, &g);
    if (out) *out = (vit_extra){"attn_softmax", g.H, "softmax of the scores, before the outer bias is added"};
    return 1;
}

/* Per problem (a Swin window's M^2 tokens in WINDOW scope), the block's heads. */
static int statics(const vit_config *c, int l, vit_static *v) {
    const vit_attn *at = &c->attn[l];
    vit_geom g;
    vit_block_geom(c, l, &g);
    const int T = g.Tq, H = g.H;
    int n = 0;
    if (at->dynamic_scale) v[n++] = (vit_static){"ds", 2, {T, T, 0}, "dynamic scale DS multiplying q x^T (shared by the heads)"};
    if (at->inner_bias) v[n++] = (vit_static){"inner_bias", 3, {H, T, T}, "B_inner added before the softmax, as a full table per head"};
    if (at->outer_bias) v[n++] = (vit_static){"outer_bias", 3, {H, T, T}, "B_outer added after the softmax, as a full table per head"};
    return n;
}

static void static_fill(const vit_config *c, const vit_params *p, int l, int i, float *out) {
    const vit_block_params *bp = &p->blocks[l];
    const vit_attn *at = &c->attn[l];
    vit_geom g;
    vit_block_geom(c, l, &g);
    int gh, G;
    vit_mech_problem_grid(&g, &gh, &G); /* the relative tables' side: the window's in WINDOW scope */
    const int T = g.Tq, H = g.H;
    const size_t TT = (size_t)T * T;
    vit_static v[4];
    if (i < 0 || i >= statics(c, l, v)) return;
    if (strcmp(v[i].name, "ds") == 0) {
        memcpy(out, bp->ds, TT * sizeof(float));
        return;
    }
    const int inner = strcmp(v[i].name, "inner_bias") == 0;
    memset(out, 0, (size_t)H * TT * sizeof(float));
    for (int h = 0; h < H; h++) /* full (H, T, T) tables of either parametrisation */
        vit_add_bias(out + (size_t)h * TT, inner ? bp->inner_bias : bp->outer_bias,
                     inner ? at->inner_bias : at->outer_bias, H, h, T, G);
}

static void trace_attrs(const vit_config *c, const vit_params *p, int l, vit_mech_writer *w) {
    const vit_attn *a = &c->attn[l];
    const float scale = vit_attn_scale(c, l);
    if (!a->dynamic_scale) w->floats(w, "scale", &scale, 1);
    w->str(w, "scale_mode", a->dynamic_scale ? "dynamic" : "fixed");
    w->str(w, "inner_bias", vit_bias_name(a->inner_bias));
    w->str(w, "outer_bias", vit_bias_name(a->outer_bias));
    w->str(w, "keys", a->key_proj ? "k (a key projection)" : "x");
    w->str(w, "values", a->value_proj ? "v (QXV)" : "x (QXX)");
    w->num(w, "proj", !a->no_proj);
    w->num(w, "outer_bias_masked", !a->outer_unmasked);
}

static const char *not_stochastic(const vit_config *c, int l) {
    return c->attn[l].outer_bias ? "LSLA adds its outer bias after the softmax" : NULL;
}

const vit_mech vit_mech_lsla = {
    .name = "lsla",
    .summary = "ViT-LSLA: keys (and values) are x itself; dynamic scale, inner and outer biases",
    .flags = VIT_MECH_WS_DY | VIT_MECH_SOFTMAX_EXTRA0,
    .scopes = 1u << VIT_SCOPE_GLOBAL | 1u << VIT_SCOPE_WINDOW,
    .keys = keys,
    .n_keys = sizeof keys / sizeof keys[0],
    .defaults = defaults,
    .parse = parse,
    .write = write,
    .validate = validate,
    .no_effect = no_effect,
    .describe = describe,
    .has_proj = has_proj,
    .product_scale = product_scale,
    .layout = layout,
    .specs = specs,
    .scores = scores,
    .after_softmax = after_softmax,
    .head_backward = head_backward,
    .params_backward = params_backward,
    .cost = cost,
    .extra = extra,
    .statics = statics,
    .static_fill = static_fill,
    .trace_attrs = trace_attrs,
    .attn_doc = "softmax(scores) + outer bias: the map that multiplies x (or v)",
    .scores_doc = "(q x^T) * DS (or scale) + inner bias, before the softmax",
    .k_doc = "per-head keys: the normalised block input x itself",
    .not_stochastic = not_stochastic,
};
