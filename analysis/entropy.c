/* entropy.c: attention entropy per layer and head, in nats (or normalised by log T). */
#include <math.h>
#include <stdio.h>

#include "../io/trace.h"
#include "metric.h"

enum { OUT_ENT, OUT_MEAN };

static as_status ent_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    int dims[2] = {lay->n_layers, lay->n_heads};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_HEAD};
    const char *u = c->opt->entropy_normalize ? "" : "nats";
    analysis_output_add(c, "entropy", "entropy of each recorded query row, averaged over rows", u, 2, dims, ax);
    analysis_output_add(c, "head_mean", "entropy averaged over the recorded heads", u, 1, dims, ax);
    snprintf(c->params, sizeof c->params, "normalize=%s; rows=%s",
             c->opt->entropy_normalize ? "log(T)" : "none",
             lay->q_rows == lay->tokens ? "all" : "prefix");
    (void)err;
    return AS_OK;
}

/* Rows are renormalised over their non-negative entries: stored float16 rows do not sum to 1
 * exactly, and LSLA's outer bias or Refiner's convolution can leave a few negatives. */
static void ent_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    int T = lay->tokens, Q = lay->q_rows, H = lay->n_heads;
    double norm = c->opt->entropy_normalize ? 1.0 / log((double)T) : 1.0;
    double *out = vals + c->out[OUT_ENT].offset, *hm = vals + c->out[OUT_MEAN].offset;
    for (int li = 0; li < lay->n_layers; li++) {
        double hs = 0;
        for (int hi = 0; hi < H; hi++) {
            const float *A = im->attn[li] + (size_t)hi * Q * T;
            double s = 0;
            int n = 0;
            for (int i = 0; i < Q; i++) {
                const float *row = A + (size_t)i * T;
                double S, alog = analysis_xlogx(row, T, &S);
                if (S <= 0) continue;
                s += log(S) - alog / S; /* -sum p log p with p = a / S */
                n++;
            }
            out[li * H + hi] = n ? s / n * norm : NAN;
            hs += out[li * H + hi];
        }
        hm[li] = hs / H;
    }
}

static as_status ent_finish(analysis_ctx *c, const double *mean, as_error *err) {
    const analysis_layout *lay = c->lay;
    const double *hm = mean + c->out[OUT_MEAN].offset;
    analysis_report_add(c, "  layer  entropy (%s), head mean\n", c->opt->entropy_normalize ? "/ log T" : "nats");
    for (int li = 0; li < lay->n_layers; li++)
        analysis_report_add(c, "  %5d  %.4f\n", lay->layers[li], hm[li]);
    (void)err;
    return AS_OK;
}

const analysis_metric analysis_metric_entropy = {
    .name = "entropy",
    .version = 1,
    .summary = "attention entropy per layer and head (nats, or / log T with --entropy-normalize)",
    .definition = "for each recorded query row a: p = max(a,0) / sum max(a,0), H = -sum p log p "
                  "(0 log 0 = 0); averaged over rows; divided by log T when normalised",
    .needs = 1u << TRACE_Q_ATTN,
    .traces = ANALYSIS_TRACES_SINGLE_GRID,
    .plan = ent_plan,
    .image = ent_image,
    .finish = ent_finish,
};
