/* distance.c: mean attention distance in pixels (the ViT paper's Fig. 7). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/trace.h"
#include "metric.h"

enum { OUT_DIST, OUT_MEAN, OUT_NEG }; /* OUT_NEG + 1: dropped_rows */
enum { DIST_PIXEL, DIST_CENTRE };

static const analysis_choice dist_choices[] = {
    {ANALYSIS_CH_DISTANCE, "distance", "distance", {"pixel", "centre"}, DIST_PIXEL,
     "pixel: ViT's definition (Fig. 7: the distance between the query pixel and all other pixels): the mean distance between every pixel of the "
     "query patch and every pixel of the key patch (8.3 px for a 16 px patch and itself); centre: "
     "the distance between patch centres (keras-io's; 0 for a patch and itself)"},
};

/* Mean Euclidean distance, in pixels, between the pixels of two p x p patches dy, dx patches
 * apart: the pixel offsets (dy p + a, dx p + b) with a, b in -(p-1)..p-1 occur (p-|a|)(p-|b|)
 * times among the p^4 pixel pairs, so the exact average is a (2p-1)^2 term sum. */
static double pixel_mean_distance(int dy, int dx, int p) {
    double s = 0;
    for (int a = -(p - 1); a < p; a++)
        for (int b = -(p - 1); b < p; b++)
            s += (double)(p - abs(a)) * (p - abs(b)) * hypot((double)dy * p + a, (double)dx * p + b);
    return s / ((double)p * p * p * p);
}

static as_status dist_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    if (lay->q_rows != lay->tokens)
        return as_fail(err, AS_ERR_ARG, "distance needs the patch query rows, but the trace holds "
                       "only the prefix rows: record with --query-rows all");
    int P = lay->patches, g = lay->grid;
    double *d = malloc((size_t)P * P * sizeof *d), *off = malloc((size_t)g * g * sizeof *off);
    if (!d || !off) {
        free(d);
        free(off);
        return as_fail(err, AS_ERR_NOMEM, "out of memory for the distance table");
    }
    int pixel = analysis_choice_of(c, ANALYSIS_CH_DISTANCE) == DIST_PIXEL;
    for (int dy = 0; dy < g; dy++) /* by |offset| in patches: g^2 sums, not P^2 */
        for (int dx = 0; dx < g; dx++)
            off[dy * g + dx] = pixel ? pixel_mean_distance(dy, dx, lay->patch_px)
                                     : lay->patch_px * hypot(dy, dx);
    for (int i = 0; i < P; i++)
        for (int j = 0; j < P; j++) d[(size_t)i * P + j] = off[abs(i / g - j / g) * g + abs(i % g - j % g)];
    free(off);
    c->state = d;
    int dims[2] = {lay->n_layers, lay->n_heads};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_HEAD};
    analysis_output_add(c, "distance", pixel ? "attention-weighted mean pixel-to-pixel distance "
                        "between query and key patches, averaged over patch queries" :
                        "attention-weighted distance between patch centres, averaged over patch "
                        "queries", "pixels", 2, dims, ax);
    analysis_output_add(c, "head_mean", "distance averaged over the recorded heads", "pixels", 1, dims, ax);
    analysis_rows_outputs_add(c);
    snprintf(c->params, sizeof c->params, "prefix_keys=%s; patch_size=%d",
             c->opt->distance_renorm ? "renormalise" : "drop", lay->patch_px);
    analysis_params_choices(c);
    return AS_OK;
}

static void dist_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    const double *dt = c->state;
    int T = lay->tokens, P = lay->patches, H = lay->n_heads, p = lay->prefix;
    double *out = vals + c->out[OUT_DIST].offset, *hm = vals + c->out[OUT_MEAN].offset;
    double *neg = vals + c->out[OUT_NEG].offset, *drop = vals + c->out[OUT_NEG + 1].offset;
    for (int li = 0; li < lay->n_layers; li++) {
        double hs = 0;
        /* Fig. 7 weights distances by attention: negative weights are none */
        neg[li] = analysis_layer_negative(lay, im->attn[li]);
        for (int hi = 0; hi < H; hi++) {
            const float *A = im->attn[li] + (size_t)hi * lay->q_rows * T;
            double s = 0;
            int n = 0, dropped = 0;
            if (neg[li]) {
                out[li * H + hi] = drop[li * H + hi] = NAN;
                hs = NAN;
                continue;
            }
            for (int i = 0; i < P; i++) {
                const float *row = A + (size_t)(p + i) * T + p;
                const double *di = dt + (size_t)i * P;
                double w, m = analysis_dot_fd(row, di, P, &w);
                if (c->opt->distance_renorm) {
                    if (w <= 0) {
                        dropped++;
                        continue;
                    }
                    m /= w;
                }
                s += m;
                n++;
            }
            out[li * H + hi] = n ? s / n : NAN;
            drop[li * H + hi] = dropped;
            hs += out[li * H + hi];
        }
        hm[li] = hs / H;
    }
}

static as_status dist_finish(analysis_ctx *c, const double *mean, as_error *err) {
    const analysis_layout *lay = c->lay;
    const double *hm = mean + c->out[OUT_MEAN].offset, *d = mean + c->out[OUT_DIST].offset;
    analysis_report_add(c, "  layer  mean distance (px): head mean [min, max over heads]\n");
    for (int li = 0; li < lay->n_layers; li++) {
        double lo = INFINITY, hi = -INFINITY;
        for (int h = 0; h < lay->n_heads; h++) {
            lo = fmin(lo, d[li * lay->n_heads + h]);
            hi = fmax(hi, d[li * lay->n_heads + h]);
        }
        if (isnan(hm[li])) analysis_report_add(c, "  %5d  left out (negative map entries: notes)\n", lay->layers[li]);
        else analysis_report_add(c, "  %5d  %6.2f [%.2f, %.2f]\n", lay->layers[li], hm[li], lo, hi);
    }
    analysis_rows_note(c, mean, OUT_NEG, NULL);
    (void)err;
    return AS_OK;
}

static void dist_release(analysis_ctx *c) {
    free(c->state);
    c->state = NULL;
}

const analysis_metric analysis_metric_distance = {
    .name = "distance",
    .version = 3,
    .summary = "mean attention distance in pixels per layer and head (ViT Fig. 7)",
    .definition = "for patch query i: sum over patch keys j of A[i,j] * d(i,j); d(i,j) = the mean "
                  "of |u - v| over every pixel u of patch i and pixel v of patch j "
                  "(distance=pixel, ViT) or patch_size * |centre(i) - centre(j)| (distance=centre); "
                  "prefix keys are dropped (their weight counts for nothing) or, with renormalise, "
                  "the patch weights are divided by their sum (rows whose patch weights sum to 0 or "
                  "less are left out, counted in dropped_rows); averaged over patch queries; a "
                  "layer whose patch query rows hold a negative entry (not probability rows) is "
                  "left out for that image (NaN, negative_maps = 1)",
    .needs = 1u << TRACE_Q_ATTN,
    .traces = ANALYSIS_TRACES_SINGLE_GRID,
    .plan = dist_plan,
    .image = dist_image,
    .finish = dist_finish,
    .release = dist_release,
    .choices = dist_choices,
    .n_choices = sizeof dist_choices / sizeof dist_choices[0],
};
