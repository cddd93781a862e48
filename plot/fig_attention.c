/* fig_attention.c: one query's attention over the image, for one layer and head (the usual
 * attention-map figure; ViT Fig. 6 style). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "figures.h"
#include "keymap.h"
#include "../core/vitfam.h"

/* ---- staged traces (format 3): a layer's row placed by its own geometry (keymap.h) ---------- */

/* The position of model layer `layer` in the trace's layers, or -1. */
static int layer_pos(const trace_reader *r, int layer) {
    for (int li = 0; li < r->n_layers; li++)
        if (r->layers[li] == layer) return li;
    return -1;
}

int fig_staged_query(const fig_opts *o, const fig_source *s) {
    const trace_layer_geom *g0 = &s->tr.geom[0];
    return o->query >= 0 ? o->query : (g0->gh / 2) * g0->gw + g0->gw / 2;
}

as_status fig_staged_token(const fig_opts *o, const fig_source *s, int li, int *token, as_error *err) {
    const trace_reader *r = &s->tr;
    const trace_layer_geom *g0 = &r->geom[0], *g = &r->geom[li];
    const int N0 = g0->gh * g0->gw, S = r->cfg.img_size, q = fig_staged_query(o, s);
    if (q >= N0)
        return as_fail(err, AS_ERR_ARG, "%s: --query %d: a staged trace's query is a cell of its first "
                       "recorded layer's %d x %d grid, 0..%d (row-major); each layer takes the cell "
                       "under that cell's centre", s->path, q, g0->gh, g0->gw, N0 - 1);
    double lo, hi, py, px;
    keymap_cell_span(g0->offset_px, g0->stride_px, q / g0->gw, S, &lo, &hi);
    py = (lo + hi) / 2;
    keymap_cell_span(g0->offset_px, g0->stride_px, q % g0->gw, S, &lo, &hi);
    px = (lo + hi) / 2;
    *token = keymap_cell_at(py, g->offset_px, g->stride_px, g->gh) * g->gw +
             keymap_cell_at(px, g->offset_px, g->stride_px, g->gw);
    return AS_OK;
}

/* The row of (layer, head) for the query, and its scale by o's --range. */
static as_status staged_row(const fig_opts *o, const fig_source *s, int layer, int head, long image,
                            keymap_row *k, mapscale *scale, as_error *err) {
    const trace_reader *r = &s->tr;
    const int li = layer_pos(r, layer);
    int token = 0, ids[1024], nh;
    if (li < 0) return as_fail(err, AS_ERR_ARG, "%s: layer %d is not recorded", s->path, layer);
    nh = trace_layer_heads(r, layer, ids);
    int known = 0;
    for (int i = 0; i < nh; i++) known |= ids[i] == head;
    if (!known)
        return as_fail(err, AS_ERR_ARG, "%s: layer %d has no recorded head %d (it has %d: 0..%d)",
                       s->path, layer, head, nh, nh - 1);
    if (fig_staged_token(o, s, li, &token, err) != AS_OK) return err->status;
    if (keymap_row_read(s, li, image, head, token, k, err) != AS_OK) return err->status;
    mapscale_make(scale, k->keys, 1, k->n_keys, k->prefix, k->prefix, o->range);
    if (k->signed_map) mapscale_not_probability(scale);
    return AS_OK;
}

/* Reads row `query` of (layer, head)'s map for image: all T keys, prefix tokens first. */
static as_status query_row(const fig_source *s, int layer, int head, long image, int query,
                           double *row, as_error *err) {
    const trace_reader *r = &s->tr;
    int T = r->num_tokens;
    if (query < 0 || query >= r->q_rows)
        return as_fail(err, AS_ERR_ARG, "%s: --query %d: the trace holds query rows 0..%d%s", s->path,
                       query, r->q_rows - 1, r->q_rows < T ? " (recorded with --query-rows prefix)" : "");
    float *A = malloc((size_t)r->q_rows * T * sizeof *A);
    if (!A) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    as_status rc = trace_read_head(r, TRACE_Q_ATTN, image, layer, head, A, err);
    for (int j = 0; rc == AS_OK && j < T; j++) row[j] = A[(size_t)query * T + j];
    free(A);
    return rc;
}

#define MAX_KEYS (4096 + 8)

/* The query's row (MAX_KEYS room) and the scale it takes on its own by o's --range. */
static as_status row_scale(const fig_opts *o, const fig_source *s, int layer, int head, long image,
                           int query, double *row, mapscale *scale, as_error *err) {
    int p = s->tr.num_prefix, T = s->tr.num_tokens;
    if (T > MAX_KEYS) return as_fail(err, AS_ERR_UNSUPPORTED, "grid too large to draw");
    if (query_row(s, layer, head, image, query, row, err) != AS_OK) return err->status;
    mapscale_make(scale, row, 1, T, p, p, o->range);
    const vit_config *c = &s->tr.cfg; /* the prefix tokens by name: cls, dist, registers */
    mapscale_name_prefix(scale, row, 1, T, c->class_token, c->distilled, c->reg_tokens);
    return AS_OK;
}

as_status fig_attention_scale(const fig_opts *o, const fig_source *s, int layer, int head,
                              long image, int query, mapscale *scale, as_error *err) {
    if (s->tr.staged) {
        keymap_row k;
        as_status rc = staged_row(o, s, layer, head, image, &k, scale, err);
        if (rc == AS_OK) keymap_row_free(&k);
        return rc;
    }
    double row[MAX_KEYS];
    return row_scale(o, s, layer, head, image, query, row, scale, err);
}

/* The note's font size under a w-wide image. */
static double note_size(double w) { return fmin(6, fmax(3.5, w / 30)); }

double fig_attention_note_height(const fig_source *s, double w) {
    double ns = note_size(w);
    int prefix = s->tr.num_prefix > 0; /* staged: a class-attention layer has the class key */
    for (int li = 0; s->tr.staged && li < s->tr.n_layers; li++) prefix |= s->tr.geom[li].scope == VIT_SCOPE_CLASS;
    return (prefix ? fmax(1.5, ns * 0.45) + 1 : 0) + ns * 1.1 + 2;
}

/* fig_attention_panel for a staged layer's row k, its own scale ms. */
static void staged_panel(plot_figure *f, plot_axes *a, const fig_opts *o, const fig_source *s,
                         const keymap_row *k, const mapscale *ms, const uint8_t *rgb, int S, int colorbar,
                         const mapscale *shared, const char *title) {
    const mapscale *cs = shared ? shared : ms;
    double ns = note_size(a->w), side = fmax(4, fmin(a->w, a->h - fig_attention_note_height(s, a->w)));
    a->w = a->h = side;
    plot_cmap cm = fig_cmap(o);
    plot_image(f, a, rgb, S, S);
    keymap_row_draw(f, a, k, S, cs->lo, cs->hi, cm, 0.6);
    if (title) plot_text_fit(f, a->x + a->w / 2, a->y - 3, 6.5, 0.5, a->w + 14, title);
    if (colorbar) mapscale_colorbar(f, a, cs, cm, "attention weight");
    mapscale_note(f, a->x, a->y + side + 2, side, ns, ms);
}

as_status fig_attention_panel(plot_figure *f, plot_axes *a, const fig_opts *o, const fig_source *s,
                              int layer, int head, long image, int query, const uint8_t *rgb,
                              int S, int colorbar, const mapscale *shared, const char *title,
                              mapscale *scale, as_error *err) {
    if (s->tr.staged) {
        keymap_row k;
        mapscale ms;
        if (staged_row(o, s, layer, head, image, &k, &ms, err) != AS_OK) return err->status;
        staged_panel(f, a, o, s, &k, &ms, rgb, S, colorbar, shared, title);
        if (scale) *scale = ms;
        keymap_row_free(&k);
        return AS_OK;
    }
    int g = vit_grid(&s->tr.cfg), p = s->tr.num_prefix;
    double row[MAX_KEYS];
    mapscale ms; /* the map's own: its note; its colours too unless the scale is shared */
    if (row_scale(o, s, layer, head, image, query, row, &ms, err) != AS_OK) return err->status;
    const mapscale *cs = shared ? shared : &ms;
    /* the image is square at the top of a; the prefix share and the peak go under it */
    double ns = note_size(a->w), side = fmax(4, fmin(a->w, a->h - fig_attention_note_height(s, a->w)));
    a->w = a->h = side;
    plot_cmap cm = fig_cmap(o);
    plot_image(f, a, rgb, S, S);
    plot_overlay(f, a, row + p, g, cs->lo, cs->hi, cm, 0.6);
    plot_patch_grid(f, a, g, query >= p ? query - p : -1);
    if (title) plot_text_fit(f, a->x + a->w / 2, a->y - 3, 6.5, 0.5, a->w + 14, title);
    if (colorbar) mapscale_colorbar(f, a, cs, cm, "attention weight");
    mapscale_note(f, a->x, a->y + side + 2, side, ns, &ms);
    if (scale) *scale = ms;
    return AS_OK;
}

static as_status draw(plot_figure *f, const fig_opts *o, as_error *err) {
    const fig_source *s = &o->src[0];
    if (fig_need_trace(s, "attention", err) != AS_OK) return err->status;
    const trace_reader *r = &s->tr;
    int layer = o->layer >= 0 ? o->layer : r->layers[r->n_layers - 1], ids[1024];
    if (r->staged && trace_layer_heads(r, layer, ids) <= 0)
        return as_fail(err, AS_ERR_ARG, "%s: --layer %d is not recorded", s->path, layer);
    int head = o->head >= 0 ? o->head : r->staged ? ids[0] : r->heads[0];
    long image = o->image >= 0 ? o->image : 0;
    int query = fig_query(o, s), S;
    uint8_t *rgb;
    if (fig_read_rgb(s, image, &rgb, &S, err) != AS_OK) return err->status;
    plot_axes a = {.x = 8, .y = 16, .w = plot_width(f) - 70, .h = plot_height(f) - 18};
    char title[200], q[120];
    int p = r->num_prefix, g = vit_grid(&r->cfg);
    if (r->staged) { /* the row, read once: its place names the title, which wraps (it is longer) */
        keymap_row k;
        mapscale ms;
        if (staged_row(o, s, layer, head, image, &k, &ms, err) != AS_OK) {
            free(rgb);
            return err->status;
        }
        keymap_row_describe(s, layer_pos(r, layer), &k, q, sizeof q);
        snprintf(title, sizeof title, "image %ld, layer %d, head %d: %s", image, layer, head, q);
        const double w = plot_width(f) - 8;
        const int lines = plot_text_wrap(f, 4, 0, 6.5, 0, w, 0, title);
        plot_text_wrap(f, 4 + w / 2, 8, 6.5, 0.5, w, 1, title);
        a.y += (lines - 1) * 6.5 * 1.2;
        a.h -= (lines - 1) * 6.5 * 1.2;
        staged_panel(f, &a, o, s, &k, &ms, rgb, S, 1, NULL, NULL);
        keymap_row_free(&k);
        free(rgb);
        return AS_OK;
    }
    if (query < p) vit_prefix_label(&r->cfg, query, q, sizeof q); /* class, distillation, register k */
    else snprintf(q, sizeof q, "patch (%d, %d)", (query - p) / g, (query - p) % g);
    snprintf(title, sizeof title, "image %ld, layer %d, head %d, query: %s", image, layer, head, q);
    as_status rc = fig_attention_panel(f, &a, o, s, layer, head, image, query, rgb, S, 1, NULL, title,
                                       NULL, err);
    free(rgb);
    return rc;
}

const figure_recipe fig_attention = {
    .name = "attention",
    .options = FIG_OPT_LAYER | FIG_OPT_HEAD | FIG_OPT_IMAGE | FIG_OPT_QUERY | FIG_OPT_CMAP | FIG_OPT_RANGE,
    .mirrors = "the attention map of one query over the image (ViT Fig. 6)",
    .needs = "a trace with attn (--layer, --head, --image, --query: token index, 0 = class; staged "
             "traces: a cell of the first recorded layer's grid, each layer taking the cell under it)",
    .summary = "one query's attention over the input image with the patch grid",
    .width = PLOT_COLUMN, .height = 200, .max_sources = 1,
    .traces = FIG_TRACES_SINGLE_GRID | FIG_TRACES_STAGED, .draw = draw};
