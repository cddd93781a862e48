/* fig_attention.c: one query's attention over the image, for one layer and head (the usual
 * attention-map figure; ViT Fig. 6 style). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "figures.h"
#include "../core/vitfam.h"

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
    double row[MAX_KEYS];
    return row_scale(o, s, layer, head, image, query, row, scale, err);
}

/* The note's font size under a w-wide image. */
static double note_size(double w) { return fmin(6, fmax(3.5, w / 30)); }

double fig_attention_note_height(const fig_source *s, double w) {
    double ns = note_size(w);
    return (s->tr.num_prefix > 0 ? fmax(1.5, ns * 0.45) + 1 : 0) + ns * 1.1 + 2;
}

as_status fig_attention_panel(plot_figure *f, plot_axes *a, const fig_opts *o, const fig_source *s,
                              int layer, int head, long image, int query, const uint8_t *rgb,
                              int S, int colorbar, const mapscale *shared, const char *title,
                              mapscale *scale, as_error *err) {
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
    if (title) plot_text(f, a->x + a->w / 2, a->y - 3, 6.5, 0.5, title);
    if (colorbar) mapscale_colorbar(f, a, cs, cm, "attention weight");
    mapscale_note(f, a->x, a->y + side + 2, side, ns, &ms);
    if (scale) *scale = ms;
    return AS_OK;
}

static as_status draw(plot_figure *f, const fig_opts *o, as_error *err) {
    const fig_source *s = &o->src[0];
    if (fig_need_trace(s, "attention", err) != AS_OK) return err->status;
    const trace_reader *r = &s->tr;
    int layer = o->layer >= 0 ? o->layer : r->layers[r->n_layers - 1];
    int head = o->head >= 0 ? o->head : r->heads[0];
    long image = o->image >= 0 ? o->image : 0;
    int query = fig_query(o, s), S;
    uint8_t *rgb;
    if (fig_read_rgb(s, image, &rgb, &S, err) != AS_OK) return err->status;
    plot_axes a = {.x = 8, .y = 16, .w = plot_width(f) - 70, .h = plot_height(f) - 18};
    char title[160], q[48];
    int p = r->num_prefix, g = vit_grid(&r->cfg);
    if (query < p) vit_prefix_label(&r->cfg, query, q, sizeof q); /* class, distillation, register k */
    else snprintf(q, sizeof q, "patch (%d, %d)", (query - p) / g, (query - p) % g);
    snprintf(title, sizeof title, "image %ld, layer %d, head %d, query: %s", image, layer, head, q);
    as_status rc = fig_attention_panel(f, &a, o, s, layer, head, image, query, rgb, S, 1, NULL,
                                       title, NULL, err);
    free(rgb);
    return rc;
}

const figure_recipe fig_attention = {
    .name = "attention",
    .options = FIG_OPT_LAYER | FIG_OPT_HEAD | FIG_OPT_IMAGE | FIG_OPT_QUERY | FIG_OPT_CMAP | FIG_OPT_RANGE,
    .mirrors = "the attention map of one query over the image (ViT Fig. 6)",
    .needs = "a trace with attn (--layer, --head, --image, --query: token index, 0 = class)",
    .summary = "one query's attention over the input image with the patch grid",
    .width = PLOT_COLUMN, .height = 200, .max_sources = 1,
    .traces = FIG_TRACES_SINGLE_GRID, .draw = draw};
