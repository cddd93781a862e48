/* lmsa.c: low-relation MSA (LMSA): q and k projected to qk_dim in total (qk_dim / H per head),
 * v at full width; separate q, k, v Linear layers. */
#include "../mech.h"

#include <stdio.h>

static const vit_mech_key keys[] = {
    {"qk_dim", "total q/k width, split over the heads (a positive multiple of num_heads)"},
};

static int parse(vit_attn *a, const vit_mech_entry *e, int H, char *msg, size_t n) {
    const vit_mv *v = vit_mech_get(e, "qk_dim");
    int iv;
    if (!v) {
        snprintf(msg, n, "lmsa needs \"qk_dim\", the total q/k width (num_heads = %d is the extreme setting)", H);
        return 0;
    }
    if (!vit_mv_int(v, 1, VIT_MAX_DIM, &iv)) {
        snprintf(msg, n, "\"qk_dim\" must be an integer in 1..%d", VIT_MAX_DIM);
        return 0;
    }
    a->qk_dim = iv;
    return 1;
}

static void write(const vit_config *c, int l, vit_mech_writer *w) {
    w->num(w, "qk_dim", c->attn[l].qk_dim);
}

static as_status validate(const vit_config *c, int l, const vit_geom *g, as_error *err) {
    const vit_attn *a = &c->attn[l];
    const int H = g->H;
    if (a->qk_dim < H || a->qk_dim % H != 0)
        return as_fail(err, AS_ERR_CONFIG,
                       "%s: block %d: lmsa qk_dim %d is not a positive multiple of num_heads "
                       "%d: use a multiple of %d (%d is the extreme setting, 1 per head)",
                       vit_mech_model_name(c), l, a->qk_dim, H, H, H);
    return AS_OK;
}

/* Per head of the block's own heads (a staged block's stage heads). */
static int qk_head_dim(const vit_config *c, int l) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    return c->attn[l].qk_dim / g.H;
}

static void describe(const vit_config *c, int l, char *buf, size_t n) {
    snprintf(buf, n, " qk_dim=%d (%d per head)", c->attn[l].qk_dim, qk_head_dim(c, l));
}

static void layout(const vit_config *c, int l, vit_mech_layout *out) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    const int D = g.D, Q = c->attn[l].qk_dim;
    *out = (vit_mech_layout){
        .W = 2 * Q + D,
        .n_proj = 3,
        .proj = {{offsetof(vit_block_params, q_w), offsetof(vit_block_params, q_b), 0, Q},
                 {offsetof(vit_block_params, k_w), offsetof(vit_block_params, k_b), Q, Q},
                 {offsetof(vit_block_params, v_w), offsetof(vit_block_params, v_b), 2 * Q, D}},
        .src = {VIT_SRC_QKV, VIT_SRC_QKV, VIT_SRC_QKV},
        .col = {0, Q, 2 * Q},
    };
}

static void specs(const vit_mech_block *b, vit_block_params *bp, vit_spec_sink *s) {
    const int D = b->g->D, Q = b->at->qk_dim, bias = b->c->qkv_bias;
    VIT_MECH_SPEC(s, &bp->q_w, ".attn.q.weight", Q, D);
    if (bias) VIT_MECH_SPEC(s, &bp->q_b, ".attn.q.bias", Q);
    VIT_MECH_SPEC(s, &bp->k_w, ".attn.k.weight", Q, D);
    if (bias) VIT_MECH_SPEC(s, &bp->k_b, ".attn.k.bias", Q);
    VIT_MECH_SPEC(s, &bp->v_w, ".attn.v.weight", D, D);
    if (bias) VIT_MECH_SPEC(s, &bp->v_b, ".attn.v.bias", D);
}

static void cost(const vit_config *c, int l, const vit_geom *g, vit_cost_part *o) {
    const double D = g->D, H = g->H, T = vit_mech_rows(g), P = vit_mech_score_entries(g), Q = c->attn[l].qk_dim;
    const double bias = c->qkv_bias ? 1 : 0, maps = H * P, softmax = 5 * maps;
    vit_cost_add(o, VIT_COMP_QKV, (2 * Q + D) * (D + bias), T * D * (2 * Q + D), T * (2 * Q + D) * bias);
    vit_cost_add(o, VIT_COMP_ATTN_SCORES, 0, P * Q, maps + softmax);
}

static void trace_attrs(const vit_config *c, const vit_params *p, int l, vit_mech_writer *w) {
    w->num(w, "qk_dim", c->attn[l].qk_dim);
}

const vit_mech vit_mech_lmsa = {
    .name = "lmsa",
    .summary = "low-relation MSA: q and k projected to qk_dim in total",
    .flags = VIT_MECH_PLAIN,
    .scopes = 1u << VIT_SCOPE_GLOBAL | 1u << VIT_SCOPE_WINDOW | 1u << VIT_SCOPE_SRA, /* SRA: core/pvt.c's
                                      attn.q (qk_dim, C) and attn.kv (qk_dim + C, C) over the reduced keys */
    .keys = keys,
    .n_keys = sizeof keys / sizeof keys[0],
    .parse = parse,
    .write = write,
    .validate = validate,
    .describe = describe,
    .qk_head_dim = qk_head_dim,
    .layout = layout,
    .specs = specs,
    .cost = cost,
    .trace_attrs = trace_attrs,
};
