/* fig_lsla.c: for one query of an LSLA layer, the dynamic scale and the inner bias against the
 * key's distance, and the attention weights without and with the outer bias (ViT-LSLA
 * Fig. 3/4), over one grid or, in a window layer (ViT-LSLA's Swin), over the query's window. */
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
    /* the query's row and its keys: one grid (its patch tokens), or in a WINDOW layer of a
     * staged trace (Swin, ViT-LSLA) the window the query's token sits in, keys at their offset
     * within the window */
    const trace_layer_geom *lg = r->staged ? trace_layer(r, layer) : NULL;
    const int win = lg && lg->scope == VIT_SCOPE_WINDOW;
    if (r->staged && !win)
        return as_fail(err, AS_ERR_ARG, "%s: layer %d is not a window layer: the lsla figure reads one grid or "
                       "a window layer of a staged trace", s->path, layer);
    const int H = win ? lg->H : c->num_heads, p = win ? 0 : r->num_prefix, g = win ? lg->gw : vit_grid(c);
    const int gh = win ? lg->gh : g, T = win ? lg->Tk : r->num_tokens, N = win ? lg->M : g;
    const int rows = win ? lg->n_problems * lg->Tq : r->q_rows > 0 ? r->q_rows : T;
    int head = o->head >= 0 ? o->head : win ? 0 : r->heads[0];
    int query = o->query >= 0 ? o->query : p + (gh / 2) * g + g / 2;
    long image = o->image >= 0 ? o->image : 0;
    if (query < p || query >= p + gh * g || head >= H)
        return as_fail(err, AS_ERR_ARG, "%s: --query must be a %s token (%d..%d) and --head below %d", s->path,
                       win ? "grid" : "patch", p, p + gh * g - 1, H);
    int qrow = query, key0 = p, slot = -1; /* map row of the query; the window's first key */
    if (win) {
        int *tok = malloc((size_t)lg->nwh * lg->nww * T * sizeof *tok);
        if (!tok) return as_fail(err, AS_ERR_NOMEM, "out of memory");
        if (trace_read_window_tokens(r, layer, tok, err) != AS_OK) {
            free(tok);
            return err->status;
        }
        int w = -1;
        for (int e = 0; e < lg->nwh * lg->nww * T && w < 0; e++)
            if (tok[e] == query) w = e / T, slot = e % T;
        free(tok);
        int pos = r->n_windows ? -1 : w; /* its place among the recorded windows */
        for (int k = 0; k < r->n_windows && pos < 0; k++)
            if (r->windows[k] == w) pos = k;
        if (w < 0 || pos < 0)
            return as_fail(err, AS_ERR_ARG, "%s: layer %d: the query's window %d was not recorded: record it "
                           "(attnscope record --windows)", s->path, layer, w);
        qrow = pos * T + slot;
        key0 = 0;
    }
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
    float *A = malloc((size_t)rows * T * sizeof *A), *B = malloc((size_t)rows * T * sizeof *B);
    as_status rc = !A || !B ? as_fail(err, AS_ERR_NOMEM, "out of memory") : AS_OK;
    if (rc == AS_OK) rc = trace_read_map(r, "attn", image, layer, head, A, err);
    if (rc == AS_OK && trace_read_map(r, "attn_softmax", image, layer, head, B, err) != AS_OK)
        rc = as_fail(err, AS_ERR_ARG, "%s: layer %d has no attn_softmax map: record with --record "
                     "attn,internals", s->path, layer);
    if (rc == AS_OK) {
        const int P = win ? T : g * g, drow = win ? slot : query; /* keys; the query's row in DS and B_inner */
        double *x = malloc((size_t)P * sizeof *x), *y[4];
        for (int k = 0; k < 4; k++) y[k] = malloc((size_t)P * sizeof **y);
        int qr = (query - p) / g, qc = (query - p) % g;
        const int sr = win ? slot / N : qr, sc = win ? slot % N : qc; /* the query in its grid or window */
        for (int j = 0; j < P; j++) {
            x[j] = hypot(j / N - sr, j % N - sc);
            const size_t e = (size_t)drow * T + key0 + j, m = (size_t)qrow * T + key0 + j;
            y[0][j] = ds ? ds[e] : NAN;
            y[1][j] = ib ? ib[(size_t)head * T * T + e] : NAN;
            y[2][j] = B[m];
            y[3][j] = A[m];
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
            plot_axes_draw(f, &a, titles[panel], win ? "key distance from the query (tokens, in its window)"
                                                    : "key distance from the query (patches)", panel ? "weight" : "value");
            plot_legend(f, &a, names[panel], 2, cols, marks, PLOT_LEGEND_INSIDE_RIGHT);
        }
        char t[224];
        char at[64] = "";
        if (win) snprintf(at, sizeof at, ", at (%d, %d) of its window", sr, sc);
        snprintf(t, sizeof t, "layer %d, head %d, query %s (%d, %d)%s, image %ld%s%s", layer, head, win ? "token" : "patch",
                 qr, qc, at, image, ds ? "" : "; no DS (fixed scale)", ib ? "" : "; no inner bias");
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
    .needs = "a trace of an LSLA model recorded with --record attn,internals (--layer, --head, --query; in "
             "windows: the query's window)",
    .summary = "DS and inner bias against key distance; weights without and with the outer bias",
    .width = PLOT_DOUBLE, .height = 180, .max_sources = 1,
    .traces = FIG_TRACES_SINGLE_GRID | FIG_TRACES_STAGED, .draw = draw,
    .applies = applies};
