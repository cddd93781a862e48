/* fig_attention.c: one query's attention over the image, for one layer and head (the usual
 * attention-map figure; ViT Fig. 6 style). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "figures.h"

/* Reads row `query` of (layer, head)'s map for image; fills the g x g patch map. */
static as_status query_map(const fig_source *s, int layer, int head, long image, int query,
                           double *patch, as_error *err) {
    const trace_reader *r = &s->tr;
    int T = r->num_tokens, p = r->num_prefix, g = vit_grid(&r->cfg);
    if (query < 0 || query >= r->q_rows)
        return as_fail(err, AS_ERR_ARG, "%s: --query %d: the trace holds query rows 0..%d%s", s->path,
                       query, r->q_rows - 1, r->q_rows < T ? " (recorded with --query-rows prefix)" : "");
    float *A = malloc((size_t)r->q_rows * T * sizeof *A);
    if (!A) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    as_status rc = trace_read_head(r, TRACE_Q_ATTN, image, layer, head, A, err);
    for (int j = 0; rc == AS_OK && j < g * g; j++) patch[j] = A[(size_t)query * T + p + j];
    free(A);
    return rc;
}

void fig_attention_colorbar(plot_figure *f, const plot_axes *a, double lo, double hi) {
    plot_colorbar(f, a, lo, hi, PLOT_CMAP_MAGMA, "attention weight");
}

/* The patch map of (layer, head) and the colour range it gets on its own. */
static as_status panel_map(const fig_source *s, int layer, int head, long image, int query,
                           double *patch, double *lo, double *hi, as_error *err) {
    int g = vit_grid(&s->tr.cfg);
    if (g * g > 4096) return as_fail(err, AS_ERR_UNSUPPORTED, "grid too large to draw");
    if (query_map(s, layer, head, image, query, patch, err) != AS_OK) return err->status;
    fig_range(patch, (size_t)g * g, lo, hi);
    return AS_OK;
}

as_status fig_attention_range(const fig_source *s, int layer, int head, long image, int query,
                              double *lo, double *hi, as_error *err) {
    double patch[4096];
    return panel_map(s, layer, head, image, query, patch, lo, hi, err);
}

as_status fig_attention_panel(plot_figure *f, plot_axes *a, const fig_source *s, int layer, int head,
                              long image, int query, const uint8_t *rgb, int S, int colorbar,
                              const double *range, const char *title, as_error *err) {
    int g = vit_grid(&s->tr.cfg), p = s->tr.num_prefix;
    double patch[4096], lo, hi;
    if (panel_map(s, layer, head, image, query, patch, &lo, &hi, err) != AS_OK) return err->status;
    if (range) { /* a scale shared with other panels */
        lo = range[0];
        hi = range[1];
    }
    plot_image(f, a, rgb, S, S);
    if (!(hi > lo)) hi = lo + 1e-9;
    plot_overlay(f, a, patch, g, lo, hi, PLOT_CMAP_MAGMA, 0.6); /* min..max: structure shows */
    plot_patch_grid(f, a, g, query >= p ? query - p : -1);
    if (title) plot_text(f, a->x + a->w / 2, a->y - 3, 6.5, 0.5, title);
    if (colorbar) fig_attention_colorbar(f, a, lo, hi);
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
    double side = fmin(plot_width(f) - 70, plot_height(f) - 24);
    plot_axes a = {.x = 8, .y = 16, .w = side, .h = side};
    char title[160], q[48];
    int p = r->num_prefix, g = vit_grid(&r->cfg);
    if (query < p) snprintf(q, sizeof q, "%s token", query == 0 ? "class" : "distillation");
    else snprintf(q, sizeof q, "patch (%d, %d)", (query - p) / g, (query - p) % g);
    snprintf(title, sizeof title, "image %ld, layer %d, head %d, query: %s", image, layer, head, q);
    as_status rc = fig_attention_panel(f, &a, s, layer, head, image, query, rgb, S, 1, NULL, title, err);
    free(rgb);
    return rc;
}

const figure_recipe fig_attention = {
    .name = "attention", .mirrors = "the attention map of one query over the image (ViT Fig. 6)",
    .needs = "a trace with attn (--layer, --head, --image, --query: token index, 0 = class)",
    .summary = "one query's attention over the input image with the patch grid",
    .width = PLOT_COLUMN, .height = 200, .max_sources = 1, .draw = draw};
