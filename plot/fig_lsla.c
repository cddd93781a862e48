/* fig_lsla.c: for one query of an LSLA layer, the dynamic scale and the inner bias against the
 * key's distance, and the attention weights without and with the outer bias (ViT-LSLA
 * Fig. 3/4). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "figures.h"

static as_status draw(plot_figure *f, const fig_opts *o, as_error *err) {
    const fig_source *s = &o->src[0];
    if (fig_need_trace(s, "lsla", err) != AS_OK) return err->status;
    const trace_reader *r = &s->tr;
    const vit_config *c = &r->cfg;
    int layer = o->layer;
    if (layer < 0)
        for (int i = 0; i < r->n_layers && layer < 0; i++)
            if (c->attn[r->layers[i]].kind == VIT_ATTN_LSLA) layer = r->layers[i];
    if (layer < 0 || layer >= c->depth || c->attn[layer].kind != VIT_ATTN_LSLA)
        return as_fail(err, AS_ERR_ARG, "%s: %s: the lsla figure needs an LSLA layer (--layer)", s->path,
                       layer < 0 ? "no recorded layer uses LSLA" : "that layer is not LSLA");
    int T = r->num_tokens, p = r->num_prefix, g = vit_grid(c), H = c->num_heads;
    int head = o->head >= 0 ? o->head : r->heads[0];
    int query = o->query >= 0 ? o->query : p + (g / 2) * g + g / 2;
    long image = o->image >= 0 ? o->image : 0;
    if (query < p || query >= T || head >= H)
        return as_fail(err, AS_ERR_ARG, "%s: --query must be a patch token (%d..%d) and --head below %d",
                       s->path, p, T - 1, H);
    char name[96], fix[160];
    snprintf(fix, sizeof fix, "record an LSLA model with attnscope record (its learnt tensors are "
             "stored under layers/%02d/params)", layer);
    double *ds = NULL, *ib = NULL;
    long d[6];
    int nd;
    as_error e2 = {0};
    snprintf(name, sizeof name, "layers/%02d/params/ds", layer);
    fig_read_any(s, name, fix, &ds, d, &nd, &e2);
    snprintf(name, sizeof name, "layers/%02d/params/inner_bias", layer);
    fig_read_any(s, name, fix, &ib, d, &nd, &e2);
    float *A = malloc((size_t)T * T * sizeof *A), *B = malloc((size_t)T * T * sizeof *B);
    as_status rc = !A || !B ? as_fail(err, AS_ERR_NOMEM, "out of memory") : AS_OK;
    if (rc == AS_OK) rc = trace_read_map(r, "attn", image, layer, head, A, err);
    if (rc == AS_OK && trace_read_map(r, "attn_softmax", image, layer, head, B, err) != AS_OK)
        rc = as_fail(err, AS_ERR_ARG, "%s: layer %d has no attn_softmax map: record with --record "
                     "attn,internals", s->path, layer);
    if (rc == AS_OK) {
        int P = g * g;
        double *x = malloc((size_t)P * sizeof *x), *y[4];
        for (int k = 0; k < 4; k++) y[k] = malloc((size_t)P * sizeof **y);
        int qr = (query - p) / g, qc = (query - p) % g;
        for (int j = 0; j < P; j++) {
            x[j] = hypot(j / g - qr, j % g - qc);
            size_t e = (size_t)query * T + p + j;
            y[0][j] = ds ? ds[e] : NAN;
            y[1][j] = ib ? ib[(size_t)head * T * T + e] : NAN;
            y[2][j] = B[e];
            y[3][j] = A[e];
        }
        double xmax = 0;
        for (int j = 0; j < P; j++) xmax = fmax(xmax, x[j]);
        const char *titles[2] = {"Dynamic scale and inner bias", "Weights without / with outer bias"};
        const char *names[2][2] = {{"DS", "inner bias"}, {"softmax only", "with outer bias"}};
        for (int panel = 0; panel < 2; panel++) {
            plot_axes a = plot_axes_grid(f, panel, 0, 2, 1, 0);
            a.h -= 8; /* room for the key line below */
            double lo = INFINITY, hi = -INFINITY;
            for (int k = 0; k < 2; k++) {
                double a0, a1;
                fig_range(y[2 * panel + k], (size_t)P, &a0, &a1);
                if (a0 < a1 || a0 != 0) {
                    lo = fmin(lo, a0);
                    hi = fmax(hi, a1);
                }
            }
            if (!(lo <= hi)) lo = 0, hi = 1;
            plot_nice_range(&lo, &hi);
            plot_axes_range(&a, -0.2, xmax + 0.2, lo, hi);
            plot_color cols[2] = {plot_series_color(2 * panel), plot_series_color(2 * panel + 1)};
            plot_marker marks[2] = {PLOT_MARK_CIRCLE, PLOT_MARK_TRIANGLE};
            for (int k = 0; k < 2; k++) plot_scatter(f, &a, x, y[2 * panel + k], P, cols[k], marks[k], 1.6);
            plot_axes_draw(f, &a, titles[panel], "key distance from the query (patches)", panel ? "weight" : "value");
            plot_legend(f, &a, names[panel], 2, cols, marks, PLOT_LEGEND_INSIDE_RIGHT);
        }
        char t[160];
        snprintf(t, sizeof t, "layer %d, head %d, query patch (%d, %d), image %ld%s%s", layer, head, qr, qc,
                 image, ds ? "" : "; no DS (fixed scale)", ib ? "" : "; no inner bias");
        plot_text(f, 4, plot_height(f) - 3, 6, 0, t);
        free(x);
        for (int k = 0; k < 4; k++) free(y[k]);
    }
    free(A);
    free(B);
    free(ds);
    free(ib);
    return rc;
}

static int applies(const fig_source *s) {
    return s->is_trace && vit_any_attn(&s->tr.cfg, VIT_ATTN_LSLA);
}

const figure_recipe fig_lsla = {
    .name = "lsla", .options = FIG_OPT_LAYER | FIG_OPT_HEAD | FIG_OPT_IMAGE | FIG_OPT_QUERY, .mirrors = "ViT-LSLA Fig. 3/4: DS, inner bias and outer bias for one query",
    .needs = "a trace of an LSLA model recorded with --record attn,internals (--layer, --head, --query)",
    .summary = "DS and inner bias against key distance; weights without and with the outer bias",
    .width = PLOT_DOUBLE, .height = 180, .max_sources = 1,
    .traces = FIG_TRACES_SINGLE_GRID, .draw = draw,
    .applies = applies};
