/* entropy.c: attention entropy per layer and head, in nats (or normalised by log T). */
#include <math.h>
#include <stdio.h>

#include "../io/trace.h"
#include "geometry.h"
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

static const analysis_metric ent_staged; /* staged traces (below) */

const analysis_metric analysis_metric_entropy = {
    .name = "entropy",
    .version = 1,
    .summary = "attention entropy per layer and head (nats, or / log T with --entropy-normalize)",
    .definition = "for each recorded query row a: p = max(a,0) / sum max(a,0), H = -sum p log p "
                  "(0 log 0 = 0); averaged over rows; divided by log T when normalised",
    .needs = 1u << TRACE_Q_ATTN,
    .traces = ANALYSIS_TRACES_SINGLE_GRID | ANALYSIS_TRACES_STAGED,
    .staged = &ent_staged,
    .plan = ent_plan,
    .image = ent_image,
    .finish = ent_finish,
};

/* ---- staged traces (format 3): docs/analysis.md, "Staged traces" ---------------------------- */

enum { SOUT_ENT, SOUT_MEAN, SOUT_VALID, SOUT_NEG, SOUT_DROP, SOUT_STAGE };

static as_status sent_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    int dims[2] = {lay->n_layers, lay->n_heads};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_HEAD};
    const char *u = c->opt->entropy_normalize ? "" : "nats";
    analysis_output_add(c, "entropy", "entropy of each token's query row over its valid keys, "
                        "averaged over the rows (NaN beyond a layer's own heads)", u, 2, dims, ax);
    analysis_output_add(c, "head_mean", "entropy averaged over the layer's recorded heads", u, 1, dims, ax);
    analysis_output_add(c, "valid_keys", "valid keys per query row, averaged over the rows", "", 1, dims, ax);
    analysis_rows_outputs_add(c); /* negative_maps, dropped_rows */
    analysis_stage_output_add(c, "stage_mean", "head_mean averaged over the stage's recorded layers", u);
    snprintf(c->params, sizeof c->params, "normalize=%s; valid_keys=tokens not masked (pad slots "
             "and shift-masked keys excluded); rows=tokens",
             c->opt->entropy_normalize ? "log(valid keys of the row)" : "none");
    (void)err;
    return AS_OK;
}

static void sent_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    const analysis_staged *S = lay->staged;
    int Hx = lay->n_heads, norm = c->opt->entropy_normalize;
    double *out = vals + c->out[SOUT_ENT].offset, *hm = vals + c->out[SOUT_MEAN].offset;
    double *nv = vals + c->out[SOUT_VALID].offset;
    double *neg = vals + c->out[SOUT_NEG].offset, *drop = vals + c->out[SOUT_DROP].offset;
    (void)scratch;
    for (int li = 0; li < S->n_layers; li++) {
        const analysis_lgeom *g = &S->l[li];
        double vs = 0;
        int vn = 0;
        for (int hi = 0; hi < Hx; hi++) out[li * Hx + hi] = drop[li * Hx + hi] = NAN;
        /* a signed map (CaiT's talking heads, LSLA's outer bias) is no distribution over keys */
        neg[li] = analysis_staged_negative(g, im->attn[li]);
        if (neg[li]) {
            hm[li] = nv[li] = NAN;
            continue;
        }
        for (int hi = 0; hi < g->H; hi++) {
            double s = 0;
            int n = 0, dropped = 0;
            for (int w = 0; w < g->P; w++)
                for (int i = 0; i < g->Tq; i++) {
                    if (g->qtok[(size_t)w * g->Tq + i] < 0) continue; /* pad query rows */
                    const float *row = im->attn[li] + (((size_t)hi * g->P + w) * g->Tq + i) * g->Tk;
                    double S1 = 0, alog = 0;
                    int k = 0;
                    for (int j = 0; j < g->Tk; j++) {
                        if (!analysis_key_valid(g, w, i, j)) continue;
                        k++;
                        if (row[j] > 0) {
                            S1 += row[j];
                            alog += row[j] * log((double)row[j]);
                        }
                    }
                    if (hi == 0) {
                        vs += k;
                        vn++;
                    }
                    if (S1 <= 0) dropped++;
                    if (S1 <= 0 || (norm && k < 2)) continue;
                    double H = log(S1) - alog / S1; /* -sum p log p with p = a / S1 */
                    s += norm ? H / log((double)k) : H;
                    n++;
                }
            out[li * Hx + hi] = n ? s / n : NAN;
            drop[li * Hx + hi] = dropped;
        }
        hm[li] = analysis_heads_mean(out + li * Hx, g->H);
        nv[li] = vn ? vs / vn : NAN;
    }
    analysis_stage_means(lay, hm, vals + c->out[SOUT_STAGE].offset);
}

static as_status sent_finish(analysis_ctx *c, const double *mean, as_error *err) {
    const analysis_layout *lay = c->lay;
    const double *hm = mean + c->out[SOUT_MEAN].offset, *nv = mean + c->out[SOUT_VALID].offset;
    analysis_report_add(c, "  layer  stage  entropy (%s), head mean  valid keys per row\n",
                        c->opt->entropy_normalize ? "/ log valid keys" : "nats");
    for (int li = 0; li < lay->n_layers; li++) {
        if (isnan(hm[li]) && isnan(nv[li])) analysis_report_add(c, "  %5d  %5d  left out (negative map entries: notes)\n",
                                                                  lay->layers[li], lay->staged->l[li].stage);
        else analysis_report_add(c, "  %5d  %5d  %.4f  %.2f\n", lay->layers[li], lay->staged->l[li].stage, hm[li], nv[li]);
    }
    analysis_rows_note(c, mean, SOUT_NEG, NULL);
    (void)err;
    return AS_OK;
}

static const analysis_metric ent_staged = {
    .name = "entropy",
    .version = 1,
    .summary = "attention entropy per layer and head over each row's valid keys, per stage",
    .definition = "staged traces: for each query row of a token (pad query rows skipped) of every "
                  "recorded window or global map: its valid keys are the key slots that hold a "
                  "token (pad slots are not valid) and whose shift-mask entry is 0 (keys across a "
                  "shifted window's seam, masked with -100, are not valid); p = max(a,0) / sum "
                  "max(a,0) over the valid keys, H = -sum p log p (0 log 0 = 0), divided by "
                  "log(#valid keys of the row) when normalised (rows with one valid key are then "
                  "left out); averaged over the rows; a layer whose grid-token rows hold a negative "
                  "entry (CaiT's talking heads, LSLA's outer bias) is left out for that image "
                  "(NaN, negative_maps = 1); valid_keys = the mean count per row; "
                  "stage_mean = head_mean averaged over the stage's layers",
    .needs = 1u << TRACE_Q_ATTN,
    .traces = ANALYSIS_TRACES_STAGED,
    .plan = sent_plan,
    .image = sent_image,
    .finish = sent_finish,
};
