/* diag.c: LaViT's diagonality-preserving terms (its Eq. 8 and 9) measured on recorded maps:
 * how symmetric each map is, and how much its diagonal dominates. */
#include <math.h>
#include <stdio.h>

#include "../io/trace.h"
#include "geometry.h"
#include "metric.h"

enum { OUT_SYM, OUT_DIAG, OUT_SYM_MEAN, OUT_DIAG_MEAN };
enum { DIAG_SCORES, DIAG_ATTN };

static const analysis_choice diag_choices[] = {
    {ANALYSIS_CH_DIAG_MAP, "diag-map", "map", {"scores", "attn"}, DIAG_SCORES,
     "scores: LaViT's definition (3.2/3.4): the pre-softmax scores A^l of the less-attention "
     "(transformation) layers, where its loss acts (other layers NaN; needs --record attn,scores); "
     "attn: the softmax maps of every layer (a descriptive variant)"},
};

static int on_scores(const analysis_ctx *c) { return analysis_choice_of(c, ANALYSIS_CH_DIAG_MAP) == DIAG_SCORES; }

/* diag=scores (LaViT's definition): the trace must record a less-attention layer and its scores. */
static as_status need_less_scores(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    int n = 0;
    for (int li = 0; li < lay->n_layers; li++) n += lay->cfg.attn[lay->layers[li]].kind == VIT_ATTN_LESS;
    if (!n)
        return as_fail(err, AS_ERR_ARG, "diag: LaViT defines its terms on the pre-softmax scores "
                       "of less-attention layers, and this trace records none: use --diag-map "
                       "attn for the softmax-map variant");
    if (!(lay->quantities & (1u << TRACE_Q_SCORES)))
        return as_fail(err, AS_ERR_ARG, "diag needs the pre-softmax scores of the less-attention "
                       "layers, which this trace lacks: record with --record attn,scores (or "
                       "--diag-map attn for the softmax-map variant)");
    c->needs = 1u << TRACE_Q_SCORES;
    return AS_OK;
}

static as_status diag_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    if (lay->q_rows != lay->tokens)
        return as_fail(err, AS_ERR_ARG, "diag needs square maps, but the trace holds only the prefix "
                       "query rows: record with --query-rows all");
    if (on_scores(c)) {
        if (need_less_scores(c, err) != AS_OK) return err->status;
        analysis_note(c, "diag: layers that are not less-attention are NaN (--diag-map attn "
                      "measures every layer's map)");
    }
    int dims[2] = {lay->n_layers, lay->n_heads};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_HEAD};
    analysis_output_add(c, "symmetry", "sum over i,j of |A[i,j] - A[j,i]| (0 = symmetric)", "", 2, dims, ax);
    analysis_output_add(c, "diagonality", "sum over i of ((T-1) A[i,i] - sum_{j!=i} A[i,j]) "
                        "(> 0: the diagonal dominates)", "", 2, dims, ax);
    analysis_output_add(c, "symmetry_head_mean", "symmetry averaged over heads", "", 1, dims, ax);
    analysis_output_add(c, "diagonality_head_mean", "diagonality averaged over heads", "", 1, dims, ax);
    c->params[0] = 0;
    analysis_params_choices(c);
    c->scratch_bytes = (size_t)lay->tokens * lay->tokens * sizeof(float); /* a transposed map */
    (void)err;
    return AS_OK;
}

static void diag_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    int T = lay->tokens, H = lay->n_heads;
    int sc = on_scores(c);
    for (int li = 0; li < lay->n_layers; li++) {
        double ms = 0, md = 0;
        if (sc && lay->cfg.attn[lay->layers[li]].kind != VIT_ATTN_LESS) {
            for (int hi = 0; hi < H; hi++)
                vals[c->out[OUT_SYM].offset + (size_t)li * H + hi] =
                    vals[c->out[OUT_DIAG].offset + (size_t)li * H + hi] = NAN;
            vals[c->out[OUT_SYM_MEAN].offset + li] = vals[c->out[OUT_DIAG_MEAN].offset + li] = NAN;
            continue;
        }
        for (int hi = 0; hi < H; hi++) {
            const float *A = (sc ? im->scores[li] : im->attn[li]) + (size_t)hi * T * T;
            float *At = scratch;
            for (int i0 = 0; i0 < T; i0 += 32) /* blocked transpose */
                for (int j0 = 0; j0 < T; j0 += 32)
                    for (int i = i0; i < i0 + 32 && i < T; i++)
                        for (int j = j0; j < j0 + 32 && j < T; j++) At[(size_t)j * T + i] = A[(size_t)i * T + j];
            double sym = 0, dg = 0;
            for (int i = 0; i < T; i++) {
                const float *row = A + (size_t)i * T;
                sym += analysis_absdiff(row, At + (size_t)i * T, T);
                dg += T * (double)row[i] - analysis_sum(row, T); /* (T-1) A_ii - sum_{j!=i} A_ij */
            }
            vals[c->out[OUT_SYM].offset + (size_t)li * H + hi] = sym;
            vals[c->out[OUT_DIAG].offset + (size_t)li * H + hi] = dg;
            ms += sym;
            md += dg;
        }
        vals[c->out[OUT_SYM_MEAN].offset + li] = ms / H;
        vals[c->out[OUT_DIAG_MEAN].offset + li] = md / H;
    }
}

static as_status diag_finish(analysis_ctx *c, const double *mean, as_error *err) {
    const analysis_layout *lay = c->lay;
    analysis_report_add(c, "  layer  symmetry  diagonality (head means)\n");
    for (int li = 0; li < lay->n_layers; li++)
        if (!isnan(mean[c->out[OUT_SYM_MEAN].offset + li]))
        analysis_report_add(c, "  %5d  %8.3f  %11.3f\n", lay->layers[li],
                            mean[c->out[OUT_SYM_MEAN].offset + li], mean[c->out[OUT_DIAG_MEAN].offset + li]);
    (void)err;
    return AS_OK;
}

static const analysis_metric diag_staged; /* staged traces (below) */

const analysis_metric analysis_metric_diag = {
    .name = "diag",
    .version = 2,
    .summary = "LaViT's symmetry and diagonality terms (its Eq. 8/9) per layer and head",
    .definition = "symmetry = sum_{i,j} |S[i,j] - S[j,i]|; diagonality = sum_i ((T-1) S[i,i] - "
                  "sum_{j!=i} S[i,j]) (> 0 when the diagonal dominates, the property of Eq. 8; "
                  "this measures, it is not the training loss); S = the pre-softmax scores of "
                  "the less-attention layers (map=scores; other layers NaN) or the T x T map that "
                  "multiplies the values of every layer (map=attn)",
    .needs = 1u << TRACE_Q_ATTN,
    .traces = ANALYSIS_TRACES_SINGLE_GRID | ANALYSIS_TRACES_STAGED,
    .staged = &diag_staged,
    .plan = diag_plan,
    .image = diag_image,
    .finish = diag_finish,
    .choices = diag_choices,
    .n_choices = sizeof diag_choices / sizeof diag_choices[0],
};

/* ---- staged traces (format 3): docs/analysis.md, "Staged traces" ---------------------------- */

/* A layer without a square map: class attention (one class row), or spatial reduction unless its
 * keys are its tokens (sr_ratio 1, or a 7 x 7 pool of a 7 x 7 grid: bins of one token). */
static int sdiag_not_square(const analysis_lgeom *g) {
    if (g->scope == VIT_SCOPE_CLASS) return 1;
    return analysis_reduced(g) &&
           !(g->kgh == g->gh && g->kgw == g->gw && g->kb[g->kgh] == 1 && g->kb[2 * g->kgh + g->kgw] == 1);
}

static as_status sdiag_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    const analysis_staged *S = lay->staged;
    int left_out = 0;
    for (int li = 0; li < S->n_layers; li++) {
        if (sdiag_not_square(&S->l[li])) {
            left_out++;
            continue;
        }
        if (S->l[li].Tq != S->l[li].Tk)
            return as_fail(err, AS_ERR_ARG, "diag needs square maps, but layer %d's are %d x %d "
                           "(prefix rows only): record with --query-rows all", S->l[li].layer,
                           S->l[li].Tq, S->l[li].Tk);
    }
    if (left_out)
        analysis_note(c, "diag: %d layer%s without a square map left out (NaN): spatial-reduction layers "
                      "with fewer keys than queries (T x T' maps; one with sr_ratio 1 has its tokens as keys "
                      "and is kept) and class-attention layers (one class row)", left_out, left_out > 1 ? "s" : "");
    if (on_scores(c)) {
        if (need_less_scores(c, err) != AS_OK) return err->status;
    }
    int dims[2] = {lay->n_layers, lay->n_heads};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_HEAD};
    analysis_output_add(c, "symmetry", "per window: sum over its tokens i,j of |S[i,j] - S[j,i]|; "
                        "the mean over the recorded windows", "", 2, dims, ax);
    analysis_output_add(c, "diagonality", "per window of n tokens: sum over i of ((n-1) S[i,i] - "
                        "sum_{j!=i} S[i,j]); the mean over the recorded windows", "", 2, dims, ax);
    analysis_output_add(c, "symmetry_head_mean", "symmetry averaged over the layer's heads", "", 1, dims, ax);
    analysis_output_add(c, "diagonality_head_mean", "diagonality averaged over the layer's heads", "", 1, dims, ax);
    snprintf(c->params, sizeof c->params, "problems=per window, then the mean; pad slots excluded");
    analysis_params_choices(c);
    return AS_OK;
}

static void sdiag_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    const analysis_staged *S = lay->staged;
    int Hx = lay->n_heads, sc = on_scores(c);
    double *sym = vals + c->out[OUT_SYM].offset, *dg = vals + c->out[OUT_DIAG].offset;
    (void)scratch;
    for (int li = 0; li < S->n_layers; li++) {
        const analysis_lgeom *g = &S->l[li];
        for (int hi = 0; hi < Hx; hi++) sym[li * Hx + hi] = dg[li * Hx + hi] = NAN;
        int off = (sc && lay->cfg.attn[g->layer].kind != VIT_ATTN_LESS) || sdiag_not_square(g);
        for (int hi = 0; hi < g->H && !off; hi++) {
            double ms = 0, md = 0;
            int nw = 0;
            for (int w = 0; w < g->P; w++) {
                const float *A = (sc ? im->scores[li] : im->attn[li]) + ((size_t)hi * g->P + w) * g->Tq * g->Tk;
                const int *qt = g->qtok + (size_t)w * g->Tq;
                double s = 0, d = 0;
                int n = 0;
                for (int i = 0; i < g->Tq; i++) n += qt[i] >= 0;
                if (!n) continue;
                for (int i = 0; i < g->Tq; i++) {
                    if (qt[i] < 0) continue;
                    for (int j = 0; j < g->Tk; j++) {
                        if (qt[j] < 0) continue; /* square: key slot j is query slot j */
                        double a = A[(size_t)i * g->Tk + j];
                        s += fabs(a - A[(size_t)j * g->Tk + i]);
                        d += j == i ? (n - 1) * a : -a;
                    }
                }
                ms += s;
                md += d;
                nw++;
            }
            sym[li * Hx + hi] = nw ? ms / nw : NAN;
            dg[li * Hx + hi] = nw ? md / nw : NAN;
        }
        vals[c->out[OUT_SYM_MEAN].offset + li] = off ? NAN : analysis_heads_mean(sym + li * Hx, g->H);
        vals[c->out[OUT_DIAG_MEAN].offset + li] = off ? NAN : analysis_heads_mean(dg + li * Hx, g->H);
    }
}

static const analysis_metric diag_staged = {
    .name = "diag",
    .version = 2,
    .summary = "LaViT's symmetry and diagonality terms (its Eq. 8/9) per window, layer and head",
    .definition = "staged traces: for each recorded problem (a window, or the global map) of n "
                  "tokens (pad slots excluded, rows and columns), symmetry = sum_{i,j} |S[i,j] - "
                  "S[j,i]| and diagonality = sum_i ((n-1) S[i,i] - sum_{j!=i} S[i,j]), then the "
                  "mean over the recorded problems (one window over the whole grid gives the "
                  "global value); S = the pre-softmax scores of the less-attention layers "
                  "(map=scores; other layers NaN) or the recorded map (map=attn)",
    .needs = 1u << TRACE_Q_ATTN,
    .traces = ANALYSIS_TRACES_STAGED,
    .plan = sdiag_plan,
    .image = sdiag_image,
    .finish = diag_finish,
    .choices = diag_choices,
    .n_choices = sizeof diag_choices / sizeof diag_choices[0],
};
