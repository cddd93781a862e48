/* distance.c: mean attention distance in pixels (the ViT paper's Fig. 7). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/trace.h"
#include "geometry.h"
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

static const analysis_metric dist_staged; /* staged traces (below) */

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
    .traces = ANALYSIS_TRACES_SINGLE_GRID | ANALYSIS_TRACES_STAGED,
    .staged = &dist_staged,
    .plan = dist_plan,
    .image = dist_image,
    .finish = dist_finish,
    .release = dist_release,
    .choices = dist_choices,
    .n_choices = sizeof dist_choices / sizeof dist_choices[0],
};

/* ---- staged traces (format 3): docs/analysis.md, "Staged traces" ---------------------------- */

enum { SOUT_DIST, SOUT_MEAN, SOUT_NEG, SOUT_DROP, SOUT_PLESS, SOUT_STAGE };

/* An SRA layer's (T, Tk) table: d(t, key j) in px. pixel: the mean distance between every pixel of
 * t's footprint and every pixel of the key's, the union of the equal footprints of the tokens it
 * reduces, so the mean over those tokens u of d(t, u); centre: between t's centre and the key's
 * (the mean of its tokens' centres). */
static double *reduced_table(const analysis_lgeom *g, int pixel) {
    const int T = g->gh * g->gw, K = g->kgh * g->kgw, *kb = g->kb;
    double *d = malloc((size_t)T * K * sizeof *d), *pm = NULL;
    if (!d) return NULL;
    if (pixel) { /* the token-to-token table by offsets, once */
        if (!(pm = malloc((size_t)g->gh * g->gw * sizeof *pm))) {
            free(d);
            return NULL;
        }
        for (int dy = 0; dy < g->gh; dy++)
            for (int dx = 0; dx < g->gw; dx++) pm[dy * g->gw + dx] = pixel_mean_distance(dy, dx, (int)g->stride);
    }
    for (int t = 0; t < T; t++) {
        const int ty = t / g->gw, tx = t % g->gw;
        for (int j = 0; j < K; j++) {
            const int r = j / g->kgw, c = j % g->kgw;
            if (!pixel) {
                d[(size_t)t * K + j] = hypot(g->offset + g->stride * ty - g->kcy[r], g->offset + g->stride * tx - g->kcx[c]);
                continue;
            }
            double sum = 0;
            int n = 0;
            for (int y = kb[r]; y < kb[g->kgh + r]; y++)
                for (int x = kb[2 * g->kgh + c]; x < kb[2 * g->kgh + g->kgw + c]; x++, n++)
                    sum += pm[abs(y - ty) * g->gw + abs(x - tx)];
            d[(size_t)t * K + j] = sum / n;
        }
    }
    free(pm);
    return d;
}

/* state: per layer position, d(dy, dx) in px for grid offsets 0..gh-1 x 0..gw-1 (SRA layers:
 * reduced_table's (T, Tk) table) */
static as_status sdist_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    const analysis_staged *S = lay->staged;
    int pixel = analysis_choice_of(c, ANALYSIS_CH_DISTANCE) == DIST_PIXEL;
    for (int li = 0; li < S->n_layers; li++) {
        const analysis_lgeom *g = &S->l[li];
        if (g->scope == VIT_SCOPE_GLOBAL && g->Tq != g->T)
            return as_fail(err, AS_ERR_ARG, "distance needs the grid tokens' query rows, but layer %d "
                           "holds only the prefix rows: record with --query-rows all", g->layer);
        if (pixel && (g->stride < 1 || g->stride != floor(g->stride) || g->stride > 4096))
            return as_fail(err, AS_ERR_ARG, "distance=pixel averages over whole pixels, but layer %d's "
                           "tokens are %g px apart: use --distance centre", g->layer, g->stride);
    }
    double **tab = calloc(VIT_MAX_DEPTH, sizeof *tab);
    if (!tab) return as_fail(err, AS_ERR_NOMEM, "out of memory for the distance tables");
    c->state = tab;
    for (int li = 0; li < S->n_layers; li++) {
        const analysis_lgeom *g = &S->l[li];
        if (analysis_reduced(g)) { /* d(t, key j) for every token and reduced key: (T, Tk) */
            if (!(tab[li] = reduced_table(g, pixel)))
                return as_fail(err, AS_ERR_NOMEM, "out of memory for the distance tables");
            continue;
        }
        if (!(tab[li] = malloc((size_t)g->gh * (size_t)g->gw * sizeof **tab)))
            return as_fail(err, AS_ERR_NOMEM, "out of memory for the distance tables");
        for (int dy = 0; dy < g->gh; dy++)
            for (int dx = 0; dx < g->gw; dx++)
                tab[li][dy * g->gw + dx] = pixel ? pixel_mean_distance(dy, dx, (int)g->stride)
                                                 : g->stride * hypot(dy, dx);
    }
    int dims[2] = {lay->n_layers, lay->n_heads};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_HEAD};
    analysis_output_add(c, "distance", pixel ? "attention-weighted mean pixel-to-pixel distance "
                        "between the query token's and the key token's footprints, averaged over "
                        "the grid tokens (NaN beyond a layer's own heads)" :
                        "attention-weighted distance between token centres in pixels, averaged "
                        "over the grid tokens (NaN beyond a layer's own heads)", "pixels", 2, dims, ax);
    analysis_output_add(c, "head_mean", "distance averaged over the layer's recorded heads", "pixels", 1, dims, ax);
    analysis_rows_outputs_add(c);
    analysis_output_add(c, "positionless_mass", "weight of the keys without a position (pad slots "
                        "of padded windows, prefix tokens), averaged over the grid tokens", "", 2, dims, ax);
    analysis_stage_output_add(c, "stage_mean", "head_mean averaged over the stage's recorded layers", "pixels");
    snprintf(c->params, sizeof c->params, "positionless_keys=%s; stride_px=per layer; queries=grid "
             "tokens of the recorded windows", c->opt->distance_renorm ? "renormalise" : "drop");
    analysis_params_choices(c);
    return AS_OK;
}

static void sdist_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    const analysis_staged *S = lay->staged;
    double *const *tab = c->state;
    int Hx = lay->n_heads;
    double *out = vals + c->out[SOUT_DIST].offset, *hm = vals + c->out[SOUT_MEAN].offset;
    double *neg = vals + c->out[SOUT_NEG].offset, *drop = vals + c->out[SOUT_DROP].offset;
    double *pl = vals + c->out[SOUT_PLESS].offset;
    (void)scratch;
    for (int li = 0; li < S->n_layers; li++) {
        const analysis_lgeom *g = &S->l[li];
        for (int hi = 0; hi < Hx; hi++) out[li * Hx + hi] = drop[li * Hx + hi] = pl[li * Hx + hi] = NAN;
        neg[li] = analysis_staged_negative(g, im->attn[li]);
        if (neg[li]) {
            hm[li] = NAN;
            continue;
        }
        for (int hi = 0; hi < g->H; hi++) {
            double s = 0, pm = 0;
            int n = 0, nq = 0, dropped = 0;
            for (int w = 0; w < g->P; w++)
                for (int i = 0; i < g->Tq; i++) {
                    int q = analysis_grid_of(g, g->qtok[(size_t)w * g->Tq + i]);
                    if (q < 0) continue; /* pad or prefix query rows */
                    const float *row = im->attn[li] + (((size_t)hi * g->P + w) * g->Tq + i) * g->Tk;
                    const int *kt = g->ktok + (size_t)w * g->Tk;
                    double m = 0, wpos = 0, wless = 0;
                    if (analysis_reduced(g)) { /* every reduced key has a place */
                        for (int j = 0; j < g->Tk; j++) {
                            m += row[j] * tab[li][(size_t)q * g->Tk + j];
                            wpos += row[j];
                        }
                    } else {
                        for (int j = 0; j < g->Tk; j++) {
                            int u = kt[j] < 0 ? -1 : analysis_grid_of(g, kt[j]);
                            if (u < 0) {
                                wless += row[j];
                                continue;
                            }
                            m += row[j] * tab[li][abs(q / g->gw - u / g->gw) * g->gw + abs(q % g->gw - u % g->gw)];
                            wpos += row[j];
                        }
                    }
                    nq++;
                    pm += wless;
                    if (c->opt->distance_renorm) {
                        if (wpos <= 0) {
                            dropped++;
                            continue;
                        }
                        m /= wpos;
                    }
                    s += m;
                    n++;
                }
            out[li * Hx + hi] = n ? s / n : NAN;
            drop[li * Hx + hi] = dropped;
            pl[li * Hx + hi] = nq ? pm / nq : NAN;
        }
        hm[li] = analysis_heads_mean(out + li * Hx, g->H);
    }
    analysis_stage_means(lay, hm, vals + c->out[SOUT_STAGE].offset);
}

static as_status sdist_finish(analysis_ctx *c, const double *mean, as_error *err) {
    const analysis_layout *lay = c->lay;
    const double *hm = mean + c->out[SOUT_MEAN].offset, *st = mean + c->out[SOUT_STAGE].offset;
    analysis_report_add(c, "  layer  stage  mean distance (px), head mean\n");
    int cls = 0;
    for (int li = 0; li < lay->n_layers; li++) {
        if (lay->staged->l[li].scope == VIT_SCOPE_CLASS) {
            analysis_report_add(c, "  %5d  %5d  no grid-token query (class attention)\n", lay->layers[li],
                                lay->staged->l[li].stage);
            cls++;
        } else if (isnan(hm[li])) analysis_report_add(c, "  %5d  %5d  left out (negative map entries: notes)\n",
                                               lay->layers[li], lay->staged->l[li].stage);
        else analysis_report_add(c, "  %5d  %5d  %6.2f\n", lay->layers[li], lay->staged->l[li].stage, hm[li]);
    }
    for (int s = 0; s < lay->n_stages; s++)
        if (!isnan(st[s])) analysis_report_add(c, "  stage %d: %.2f px\n", s, st[s]);
    analysis_rows_note(c, mean, SOUT_NEG, NULL);
    if (cls)
        analysis_note(c, "distance: %d class-attention layer%s (CaiT) left out (NaN): their one query is "
                      "the class token, which has no place on the grid", cls, cls > 1 ? "s" : "");
    (void)err;
    return AS_OK;
}

static void sdist_release(analysis_ctx *c) {
    double **tab = c->state;
    for (int li = 0; tab && li < c->lay->staged->n_layers; li++) free(tab[li]);
    free(tab);
    c->state = NULL;
}

static const analysis_metric dist_staged = {
    .name = "distance",
    .version = 3,
    .summary = "mean attention distance in pixels per layer and head (ViT Fig. 7), per stage",
    .definition = "staged traces: for each grid token t of layer l (the query of one slot of one "
                  "recorded window, or of the global map): sum over the key slots j holding grid "
                  "token u of A[i,j] * d(t,u), in input pixels; d(t,u) = the mean of |a - b| over "
                  "every pixel a of t's footprint and b of u's footprint (stride x stride squares "
                  "around the token centres offset + stride (y,x); distance=pixel) or stride * "
                  "|(y_t,x_t) - (y_u,x_u)| (distance=centre); keys without a position (pad slots, "
                  "prefix tokens) are dropped, or with renormalise the weights are divided by the "
                  "positioned keys' sum (rows whose sum is 0 or less are left out, dropped_rows); "
                  "averaged over the grid tokens; a layer whose grid-token rows hold a negative "
                  "entry is left out for that image (NaN, negative_maps = 1); spatial-reduction "
                  "layers: u is a reduced key, its footprint the union of the footprints of the "
                  "tokens it reduces (so d is the mean of d(t,v) over those tokens v; centre: from "
                  "the mean of their centres); stage_mean = head_mean averaged over the stage's layers",
    .needs = 1u << TRACE_Q_ATTN,
    .traces = ANALYSIS_TRACES_STAGED,
    .plan = sdist_plan,
    .image = sdist_image,
    .finish = sdist_finish,
    .release = sdist_release,
    .choices = dist_choices,
    .n_choices = sizeof dist_choices / sizeof dist_choices[0],
};
