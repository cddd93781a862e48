/* less.c: LaViT's less-attention. No q or k: the scores are the previous block's scores
 * transformed, S = Psi(Theta(A_prev)^T)^T = Psi A_prev Theta^T with Linear(T, T) maps Theta and
 * Psi; values from a v projection. In training LaViT's diagonality term applies to its maps. */
#include "../mech.h"

#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../kernels.h"


static as_status validate(const vit_config *c, int l, const vit_geom *g, as_error *err) {
    const char *n = vit_mech_model_name(c);
    const int H = g->H;
    if (g->j == 0)
        return as_fail(err, AS_ERR_CONFIG,
                       "%s: block %d is a less-attention block, but no vanilla block comes "
                       "before it in its stage to compute the scores it reuses: make block %d "
                       "vanilla", n, l, l);
    const vit_attn_kind prev = c->attn[l - 1].kind;
    /* the Refiner release's blocks keep the map they carry on, not q k^T scores */
    const vit_mech *pm = vit_mech_get_kind(prev);
    if (prev == VIT_ATTN_LSLA || prev == VIT_ATTN_REFINER || (pm && (pm->flags & VIT_MECH_CARRY)))
        return as_fail(err, AS_ERR_CONFIG,
                       "%s: block %d: a less-attention block transforms the previous block's "
                       "q k^T scores, but block %d is %s, which has none of that shape: put a "
                       "vanilla (or lmsa, mait, less) block before it", n, l, l - 1,
                       vit_attn_name(prev));
    /* Theta and Psi mix the entries of a row: one -inf makes the whole row NaN */
    if (prev == VIT_ATTN_MAIT && c->attn[l - 1].mask_mode == VIT_MASK_NEG_INF)
        for (int h = 0; h < H && h < VIT_MAX_MASK_HEADS; h++)
            if (c->attn[l - 1].mask_size[h])
                return as_fail(err, AS_ERR_CONFIG,
                               "%s: block %d: a less-attention block transforms the previous "
                               "block's scores, but block %d is mait in \"neg_inf\" mode, whose "
                               "masked scores are -inf (Theta and Psi would make them NaN): use "
                               "mask_mode \"zero\" or \"soft\" there, or put a vanilla block "
                               "between", n, l, l - 1);
    return AS_OK;
}

static void describe(const vit_config *c, int l, char *buf, size_t n) {
    snprintf(buf, n, " (reuses the previous block's scores)");
}

static void layout(const vit_config *c, int l, vit_mech_layout *out) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    const int D = g.D; /* in SRA scope (core/pvt.c) v runs over the reduced keys */
    *out = (vit_mech_layout){
        .W = D,
        .n_proj = 1,
        .proj = {{offsetof(vit_block_params, v_w), offsetof(vit_block_params, v_b), 0, D}},
        .src = {VIT_SRC_NONE, VIT_SRC_NONE, VIT_SRC_QKV},
        .col = {0, 0, 0},
    };
}

/* Theta acts on a score row (over the keys), Psi on a column (over the queries): (Tk, Tk) and
 * (Tq, Tq); both (T, T) in GLOBAL scope, (T', T') and (T, T) over PVT's reduced keys. */
static void specs(const vit_mech_block *b, vit_block_params *bp, vit_spec_sink *s) {
    const int D = b->g->D, Tq = b->g->Tq, Tk = b->g->Tk;
    VIT_MECH_SPEC(s, &bp->v_w, ".attn.v.weight", D, D);
    if (b->c->qkv_bias) VIT_MECH_SPEC(s, &bp->v_b, ".attn.v.bias", D);
    VIT_MECH_SPEC(s, &bp->theta, ".attn.theta.weight", Tk, Tk);
    VIT_MECH_SPEC(s, &bp->psi, ".attn.psi.weight", Tq, Tq);
}

/* A^l = Psi(Theta(A^{l-1})^T)^T = Psi A^{l-1} Theta^T: (Tq, Tq) (Tq, Tk) (Tk, Tk) */
static void scores(const vit_mech_block *b, const vit_attn_problem *p, float *A) {
    const int Tq = p->Tq, Tk = p->Tk;
    float *S = p->keep;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, Tk, 1.0f, p->prev, Tk, b->bp->theta, Tk,
                0.0f, A, Tk);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, Tk, Tq, 1.0f, b->bp->psi, Tq, A, Tk, 0.0f,
                S, Tk);
    memcpy(A, S, (size_t)Tq * Tk * sizeof(float));
}

/* S = Psi A1, A1 = prev Theta^T (Tq, Tk): X = A1, dA1 (into dA) = Psi^T dS, dprev = dA1 Theta.
 * GLOBAL scope: Tq = Tk = T; SRA (PVT v2): T queries over T' reduced keys. */
static void head_backward(const vit_mech_block *b, vit_mech_head_bwd *x) {
    const int Tq = x->p->Tq, Tk = x->p->Tk;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, Tk, 1.0f, x->p->prev, Tk, b->bp->theta, Tk,
                0.0f, x->X, Tk);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tq, Tk, Tq, 1.0f, b->bp->psi, Tq, x->dS, Tk, 0.0f,
                x->dA, Tk);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, Tk, Tk, 1.0f, x->dA, Tk, b->bp->theta, Tk,
                0.0f, x->dprev, Tk);
    x->dR = NULL;
}

static void params_backward(const vit_mech_block *b, const vit_block_params *gb, const vit_tape *tape,
                            vit_grad_ws *ws, int n, int Tq, int Tk) {
    const int H = b->g->H;
    const size_t TT = (size_t)Tq * Tk, QQ = (size_t)Tq * Tq;
    /* dPsi (Tq, Tq) += sum dS A1^T: per image over its heads (in parallel, into dY), then the
     * images in order */
#pragma omp parallel for schedule(static)
    for (int bi = 0; bi < n; bi++)
        for (int h = 0; h < H; h++) {
            const size_t bh = (size_t)bi * H + h;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tq, Tk, 1.0f, ws->dS + bh * TT, Tk,
                        ws->dX + bh * TT, Tk, h ? 1.0f : 0.0f, ws->dY + (size_t)bi * QQ, Tq);
        }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < QQ; i++) {
        float s = 0.0f;
        for (int bi = 0; bi < n; bi++) s += ws->dY[(size_t)bi * QQ + i];
        WR(gb->psi)[i] += s;
    }
    /* dTheta (Tk, Tk) += sum dA1^T prev: one GEMM over all (image, head, query) rows */
    kernels_gemm(1, 0, Tk, Tk, n * H * Tq, 1.0f, ws->dA, Tk, tape->blk[b->l - 1].keep, Tk, 1.0f, WR(gb->theta), Tk);
}

/* v over the rows the keys come from (the reduced grid in SRA scope); Theta then Psi: per head
 * (Tq x Tk) @ (Tk x Tk) and (Tq x Tq) @ (Tq x Tk) */
static void cost(const vit_config *c, int l, const vit_geom *g, vit_cost_part *o) {
    const double D = g->D, H = g->H, P = vit_mech_score_entries(g), Tq = g->Tq, Tk = g->Tk;
    const double V = g->scope == VIT_SCOPE_SRA ? (double)g->problems * Tk : vit_mech_rows(g);
    const double bias = c->qkv_bias ? 1 : 0, softmax = 5 * H * P;
    vit_cost_add(o, VIT_COMP_QKV, D * (D + bias), V * D * D, V * D * bias);
    vit_cost_add(o, VIT_COMP_ATTN_MAPS, Tq * Tq + Tk * Tk, H * P * (Tq + Tk), 0);
    vit_cost_add(o, VIT_COMP_ATTN_SCORES, 0, 0, softmax);
}

static int statics(const vit_config *c, int l, vit_static *v) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    v[0] = (vit_static){"theta", 2, {g.Tk, g.Tk, 0}, "Theta: Linear(Tk, Tk) applied to the previous scores' rows"};
    v[1] = (vit_static){"psi", 2, {g.Tq, g.Tq, 0}, "Psi: Linear(Tq, Tq) applied to the columns after Theta"};
    return 2;
}

static void static_fill(const vit_config *c, const vit_params *p, int l, int i, float *out) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    const size_t n = i ? (size_t)g.Tq * g.Tq : (size_t)g.Tk * g.Tk;
    if (i == 0 || i == 1) memcpy(out, i ? p->blocks[l].psi : p->blocks[l].theta, n * sizeof(float));
}

static void trace_attrs(const vit_config *c, const vit_params *p, int l, vit_mech_writer *w) {
    w->num(w, "scores_from_layer", l - 1);
}

const vit_mech vit_mech_less = {
    .name = "less",
    .summary = "LaViT's less-attention: scores = Psi(Theta(A_prev)^T)^T, no q or k",
    .flags = VIT_MECH_REUSES_SCORES | VIT_MECH_DP_TERM | VIT_MECH_WS_DY | VIT_MECH_NO_SCALE,
    .scopes = 1u << VIT_SCOPE_GLOBAL | 1u << VIT_SCOPE_SRA, /* SRA: core/pvt.c; queries x reduced keys */
    .validate = validate,
    .describe = describe,
    .layout = layout,
    .specs = specs,
    .scores = scores,
    .head_backward = head_backward,
    .params_backward = params_backward,
    .cost = cost,
    .statics = statics,
    .static_fill = static_fill,
    .trace_attrs = trace_attrs,
    .scores_doc = "Psi(Theta(previous scores)^T)^T, before the softmax",
};
