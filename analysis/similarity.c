/* similarity.c: cross-layer similarity of attention maps ("attention saturation", DeepViT and
 * LaViT), under three definitions, per head and head-averaged, and the adjacent-layer curve. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../io/trace.h"
#include "metric.h"

enum { DEF_DEEPVIT, DEF_ROW, DEF_MAP, N_DEFS };
static const char *const def_names[] = {"deepvit", "row", "map"};
_Static_assert(sizeof def_names / sizeof def_names[0] == N_DEFS && N_DEFS == ANALYSIS_N_DEFINITIONS,
               "definition names");

const char *analysis_definition_name(int i) { return i >= 0 && i < N_DEFS ? def_names[i] : "?"; }
int analysis_definition_parse(const char *s) {
    for (int i = 0; i < N_DEFS; i++)
        if (strcmp(s, def_names[i]) == 0) return i;
    return -1;
}
enum { OUT_HEAD, OUT_MEAN, OUT_ADJ };

static as_status sim_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    int L = lay->n_layers, H = lay->n_heads, Q = lay->q_rows, T = lay->tokens;
    int d4[4] = {N_DEFS, H, L, L}, d3[3] = {N_DEFS, L, L}, d2[2] = {N_DEFS, L};
    analysis_axis a4[4] = {ANALYSIS_AX_DEFINITION, ANALYSIS_AX_HEAD, ANALYSIS_AX_LAYER, ANALYSIS_AX_LAYER2};
    analysis_axis a3[3] = {ANALYSIS_AX_DEFINITION, ANALYSIS_AX_LAYER, ANALYSIS_AX_LAYER2};
    analysis_output_add(c, "per_head", "cosine similarity of head h's maps in two layers", "", 4, d4, a4);
    analysis_output_add(c, "head_mean", "per_head averaged over the recorded heads", "", 3, d3, a3);
    analysis_output_add(c, "adjacent", "head_mean of layer l against layer l-1 (NaN when l-1 "
                        "was not recorded)", "", 2, d2, a3);
    /* norms (row Q, column T, total) per layer and head, then a row and a column accumulator */
    c->scratch_bytes = ((size_t)L * H * (Q + T + 1) + Q + T) * sizeof(double);
    snprintf(c->params, sizeof c->params, "definitions=deepvit,row,map; map=attn");
    if (Q < 2) analysis_note(c, "similarity: the trace holds only prefix query rows, so the "
                             "deepvit (key column) definition is undefined (NaN)");
    (void)err;
    return AS_OK;
}

static void sim_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    int L = lay->n_layers, H = lay->n_heads, Q = lay->q_rows, T = lay->tokens;
    size_t per = (size_t)Q + T + 1;
    double *norms = scratch, *rowdot = norms + (size_t)L * H * per, *coldot = rowdot + Q;
    for (int li = 0; li < L; li++)
        for (int hi = 0; hi < H; hi++) {
            const float *A = im->attn[li] + (size_t)hi * Q * T;
            double *rn = norms + ((size_t)li * H + hi) * per, *cn = rn + Q, *tn = cn + T;
            memset(rn, 0, per * sizeof *rn);
            for (int i = 0; i < Q; i++) {
                const float *row = A + (size_t)i * T;
                rn[i] = analysis_rowdot(cn, row, row, T);
                *tn += rn[i];
            }
        }
    double *ph = vals + c->out[OUT_HEAD].offset, *hm = vals + c->out[OUT_MEAN].offset;
    for (int la = 0; la < L; la++)
        for (int lb = 0; lb <= la; lb++)
            for (int hi = 0; hi < H; hi++) {
                const float *A = im->attn[la] + (size_t)hi * Q * T, *B = im->attn[lb] + (size_t)hi * Q * T;
                const double *ra = norms + ((size_t)la * H + hi) * per, *rb = norms + ((size_t)lb * H + hi) * per;
                memset(coldot, 0, (size_t)T * sizeof *coldot);
                double tot = 0;
                for (int i = 0; i < Q; i++) {
                    rowdot[i] = analysis_rowdot(coldot, A + (size_t)i * T, B + (size_t)i * T, T);
                    tot += rowdot[i];
                }
                double v[N_DEFS], sum = 0;
                int n = 0;
                for (int t = 0; t < T && Q >= 2; t++)
                    if (ra[Q + t] > 0 && rb[Q + t] > 0) {
                        sum += coldot[t] / sqrt(ra[Q + t] * rb[Q + t]);
                        n++;
                    }
                v[DEF_DEEPVIT] = n ? sum / n : NAN;
                sum = 0;
                n = 0;
                for (int i = 0; i < Q; i++)
                    if (ra[i] > 0 && rb[i] > 0) {
                        sum += rowdot[i] / sqrt(ra[i] * rb[i]);
                        n++;
                    }
                v[DEF_ROW] = n ? sum / n : NAN;
                v[DEF_MAP] = ra[Q + T] > 0 && rb[Q + T] > 0 ? tot / sqrt(ra[Q + T] * rb[Q + T]) : NAN;
                for (int d = 0; d < N_DEFS; d++) {
                    ph[(((size_t)d * H + hi) * L + la) * L + lb] = v[d];
                    ph[(((size_t)d * H + hi) * L + lb) * L + la] = v[d];
                }
            }
    for (int d = 0; d < N_DEFS; d++)
        for (int la = 0; la < L; la++)
            for (int lb = 0; lb < L; lb++) {
                double s = 0;
                int n = 0;
                for (int hi = 0; hi < H; hi++) {
                    double x = ph[(((size_t)d * H + hi) * L + la) * L + lb];
                    if (!isnan(x)) {
                        s += x;
                        n++;
                    }
                }
                hm[((size_t)d * L + la) * L + lb] = n ? s / n : NAN;
            }
    double *adj = vals + c->out[OUT_ADJ].offset;
    for (int d = 0; d < N_DEFS; d++)
        for (int li = 0; li < L; li++) {
            int prev = analysis_layer_pos(lay, lay->layers[li] - 1);
            adj[d * L + li] = prev < 0 ? NAN : hm[((size_t)d * L + li) * L + prev];
        }
}

static as_status sim_finish(analysis_ctx *c, const double *mean, as_error *err) {
    const analysis_layout *lay = c->lay;
    const double *adj = mean + c->out[OUT_ADJ].offset;
    int L = lay->n_layers;
    analysis_report_add(c, "  (every definition is stored; plot similarity and view default to row, MaiT's\n"
                           "  appendix; plot adjacent to map, LaViT Fig. 3; DeepViT: deepvit)\n");
    analysis_report_add(c, "  adjacent layers, head mean (layer against the layer before it):\n"
                           "  %5s  %7s  %7s  %7s\n", "layer", "deepvit", "row", "map");
    for (int li = 0; li < L; li++) {
        if (isnan(adj[DEF_ROW * L + li])) continue;
        analysis_report_add(c, "  %5d  %7.4f  %7.4f  %7.4f\n", lay->layers[li],
                            adj[DEF_DEEPVIT * L + li], adj[DEF_ROW * L + li], adj[DEF_MAP * L + li]);
    }
    (void)err;
    return AS_OK;
}

const analysis_metric analysis_metric_similarity = {
    .name = "similarity",
    .version = 1,
    .summary = "cross-layer cosine similarity of attention maps (DeepViT, LaViT), L x L and adjacent",
    .definition = "per head h and layers p,q: deepvit = mean over key columns t of cos(A_p[:,t], "
                  "A_q[:,t]); row = mean over query rows i of cos(A_p[i,:], A_q[i,:]); map = "
                  "cos(vec A_p, vec A_q); zero vectors are left out of the means; head_mean "
                  "averages the heads; adjacent[l] = head_mean(l, l-1)",
    .needs = 1u << TRACE_Q_ATTN,
    .traces = ANALYSIS_TRACES_SINGLE_GRID,
    .plan = sim_plan,
    .image = sim_image,
    .finish = sim_finish,
};
