/* registry.c: the table of attention mechanisms (one line each, indexed by vit_attn_kind) and
 * the pieces every module shares: spec naming, the fused qkv projection, cost bookkeeping. */
#include "../mech.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>

#include "../kernels.h"

extern const vit_mech vit_mech_vanilla, vit_mech_lmsa, vit_mech_lsla, vit_mech_less, vit_mech_mait,
    vit_mech_refiner, vit_mech_refiner_release, vit_mech_refiner_shared;

static const vit_mech *const registry[] = {
    [VIT_ATTN_VANILLA] = &vit_mech_vanilla,
    [VIT_ATTN_LMSA] = &vit_mech_lmsa,
    [VIT_ATTN_LSLA] = &vit_mech_lsla,
    [VIT_ATTN_LESS] = &vit_mech_less,
    [VIT_ATTN_MAIT] = &vit_mech_mait,
    [VIT_ATTN_REFINER] = &vit_mech_refiner,
    [VIT_ATTN_REFINER_RELEASE] = &vit_mech_refiner_release,
    [VIT_ATTN_REFINER_SHARED] = &vit_mech_refiner_shared,
};
_Static_assert(sizeof registry / sizeof registry[0] == VIT_ATTN_COUNT,
               "every vit_attn_kind needs its line in the mechanism registry");

int vit_mech_count(void) { return VIT_ATTN_COUNT; }

const vit_mech *vit_mech_get_kind(vit_attn_kind k) {
    return (unsigned)k < VIT_ATTN_COUNT ? registry[k] : NULL;
}

const vit_mech *vit_mech_of(const vit_config *c, int l) { return vit_mech_get_kind(c->attn[l].kind); }

void vit_mech_block_at(vit_mech_block *b, const vit_config *c, int l, const vit_block_params *bp,
                       vit_geom *g) {
    vit_block_geom(c, l, g);
    *b = (vit_mech_block){.c = c, .l = l, .at = &c->attn[l], .bp = bp, .g = g};
}

int vit_mech_any(const vit_config *c, unsigned f) {
    for (int l = 0; l < c->depth && l < VIT_MAX_DEPTH; l++) {
        const vit_mech *m = vit_mech_of(c, l);
        if (m && (m->flags & f)) return 1;
    }
    return 0;
}

const char *vit_attn_not_stochastic(const vit_config *c, int l) {
    const vit_mech *m = vit_mech_of(c, l);
    return m && m->not_stochastic ? m->not_stochastic(c, l) : NULL;
}

int vit_attn_has_softmax(const vit_config *c, int l) {
    const vit_mech *m = vit_mech_of(c, l);
    return m && !(m->flags & VIT_MECH_NO_SOFTMAX);
}

int vit_mech_reads_prev(const vit_config *c, int l) {
    const vit_mech *m = l >= 0 && l < c->depth ? vit_mech_of(c, l) : NULL;
    if (!m || !(m->flags & (VIT_MECH_REUSES_SCORES | VIT_MECH_CARRY))) return 0;
    if (m->flags & VIT_MECH_REUSES_SCORES) return 1;
    const vit_mech *before = l > 0 ? vit_mech_of(c, l - 1) : NULL;
    return before && (before->flags & VIT_MECH_CARRY) && c->n_stages == 0;
}

int vit_mech_next_reuses(const vit_config *c, int l) { return vit_mech_reads_prev(c, l + 1); }

size_t vit_mech_part_floats(const vit_config *c) {
    size_t most = 0;
    for (int l = 0; l < c->depth; l++) {
        const vit_mech *m = vit_mech_of(c, l);
        const size_t need = m && m->part_floats ? m->part_floats(c, l) : 0;
        if (need > most) most = need;
    }
    return most;
}

const vit_mv *vit_mech_get(const vit_mech_entry *e, const char *key) {
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->keys[i], key) == 0) return &e->values[i];
    return NULL;
}

int vit_mv_int(const vit_mv *v, int lo, int hi, int *out) {
    return v && v->type == VIT_MV_NUMBER && as_double_to_int(v->num, lo, hi, out);
}

const char *vit_mech_model_name(const vit_config *c) { return c->name[0] ? c->name : "model"; }

void vit_mech_spec(vit_spec_sink *s, const float **slot, const char *suffix, int ndim, const int *shape) {
    if (*s->n < s->max) {
        vit_tensor_spec *t = &s->specs[*s->n];
        snprintf(t->name, sizeof t->name, "%s%s", s->prefix, suffix);
        t->ndim = ndim;
        for (int i = 0; i < 4; i++) t->shape[i] = i < ndim ? shape[i] : 0;
        t->slot = slot;
        t->is_pos_embed = 0;
        t->buffer = 0;
    }
    (*s->n)++;
}

void vit_mech_bn_specs(vit_spec_sink *s, const float **bn, const char *name, int C) {
    static const char *const part[4] = {"weight", "bias", "running_mean", "running_var"};
    for (int i = 0; i < 4; i++) {
        char suffix[VIT_TENSOR_NAME_MAX];
        snprintf(suffix, sizeof suffix, "%s.%s", name, part[i]);
        const int n0 = *s->n;
        vit_mech_spec(s, &bn[i], suffix, 1, &C);
        if (i >= 2 && n0 < s->max) s->specs[n0].buffer = 1; /* statistics: loaded, never trained */
    }
}

void vit_mech_problem_forward(const vit_mech *m, const vit_mech_block *b, const vit_attn_problem *p,
                              float *A, float *scores) {
    const size_t TT = (size_t)p->Tq * p->Tk;
    if (p->q) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->Tq, p->Tk, p->dq, p->scale, p->q,
                    p->ldq, p->k, p->ldk, 0.0f, A, p->Tk);
        if (m->scores) m->scores(b, p, A);
        if (p->add_bias)
            for (size_t e = 0; e < TT; e++) A[e] += p->add_bias[e];
        if (p->add_mask)
            for (size_t e = 0; e < TT; e++) A[e] += p->add_mask[e];
        if (p->keep) memcpy(p->keep, A, TT * sizeof(float));
    } else {
        m->scores(b, p, A); /* no keys: the mechanism makes the scores */
        for (size_t e = 0; p->add_bias && e < TT; e++) A[e] += p->add_bias[e];
        for (size_t e = 0; p->add_mask && e < TT; e++) A[e] += p->add_mask[e];
    }
    if (scores) memcpy(scores, A, TT * sizeof(float));
    if (!(m->flags & VIT_MECH_NO_SOFTMAX)) kernels_softmax_rows(A, p->Tq, p->Tk);
    if (m->after_softmax) m->after_softmax(b, p, A);
}

int vit_mech_plain(const vit_mech *m) {
    return (m->flags & VIT_MECH_PLAIN) && !m->scores && !m->after_softmax && !m->maps &&
           !(m->flags & (VIT_MECH_REUSES_SCORES | VIT_MECH_CARRY | VIT_MECH_NO_SOFTMAX | VIT_MECH_KEEPS_MAP |
                         VIT_MECH_SOFTMAX_EXTRA0));
}

void vit_cost_add(vit_cost_part *o, vit_component k, double params, double macs, double other) {
    o->params[k] += params;
    o->macs[k] += macs;
    o->flops[k] += 2 * macs + other;
}

void vit_mech_fused_layout(const vit_config *c, int l, vit_mech_layout *out) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    const int D = g.D;
    *out = (vit_mech_layout){
        .W = 3 * D,
        .n_proj = 1,
        .proj = {{offsetof(vit_block_params, qkv_w), offsetof(vit_block_params, qkv_b), 0, 3 * D}},
        .src = {VIT_SRC_QKV, VIT_SRC_QKV, VIT_SRC_QKV},
        .col = {0, D, 2 * D},
    };
}

void vit_mech_fused_specs(const vit_mech_block *b, vit_block_params *bp, vit_spec_sink *s) {
    const int D = b->g->D;
    VIT_MECH_SPEC(s, &bp->qkv_w, ".attn.qkv.weight", 3 * D, D);
    if (b->c->qkv_bias) VIT_MECH_SPEC(s, &bp->qkv_b, ".attn.qkv.bias", 3 * D);
}

double vit_mech_head_entries(const vit_config *c, int l, const vit_geom *g) {
    double e = 0;
    for (int h = 0; h < g->H; h++) {
        vit_local loc;
        e += vit_local_head(c, l, h, &loc) ? vit_local_pairs(g->gh, g->gw, loc.side) : vit_mech_score_entries(g);
    }
    return e;
}

void vit_mech_fused_cost(const vit_config *c, int l, const vit_geom *g, vit_cost_part *o) {
    const double D = g->D, H = g->H, T = vit_mech_rows(g), Hd = D / H;
    const double bias = c->qkv_bias ? 1 : 0, maps = vit_mech_head_entries(c, l, g), softmax = 5 * maps;
    vit_cost_add(o, VIT_COMP_QKV, 3 * D * (D + bias), T * D * 3 * D, T * 3 * D * bias);
    vit_cost_add(o, VIT_COMP_ATTN_SCORES, 0, maps * Hd, maps + softmax);
}
