/* fig_grid.c: one query's attention over the image for every recorded layer and head, as small
 * multiples (layers along the long side). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "figures.h"

static as_status draw(plot_figure *f, const fig_opts *o, as_error *err) {
    const fig_source *s = &o->src[0];
    if (fig_need_trace(s, "grid", err) != AS_OK) return err->status;
    const trace_reader *r = &s->tr;
    int L = r->n_layers, H = r->n_heads, query = fig_query(o, s), S;
    long image = o->image >= 0 ? o->image : 0;
    uint8_t *rgb;
    if (fig_read_rgb(s, image, &rgb, &S, err) != AS_OK) return err->status;
    /* layers as columns, heads as rows */
    double cell = fmin((plot_width(f) - 22) / L, (plot_height(f) - 26) / H);
    as_status rc = AS_OK;
    for (int li = 0; li < L && rc == AS_OK; li++) {
        char t[32];
        snprintf(t, sizeof t, "L%d", r->layers[li]);
        plot_text(f, 20 + cell * (li + 0.5), 21, 6, 0.5, t);
        for (int hi = 0; hi < H && rc == AS_OK; hi++) {
            plot_axes a = {.x = 20 + cell * li + 0.6, .y = 24 + cell * hi + 0.6, .w = cell - 1.2, .h = cell - 1.2};
            rc = fig_attention_panel(f, &a, o, s, r->layers[li], r->heads[hi], image, query, rgb, S, 0, NULL,
                                     NULL, err);
            if (li == 0) {
                snprintf(t, sizeof t, "h%d", r->heads[hi]);
                plot_text(f, 18, a.y + cell / 2, 6, 1, t);
            }
        }
    }
    char title[256];
    int p = r->num_prefix, g = vit_grid(&r->cfg);
    char who[64];
    if (query < p) snprintf(who, sizeof who, "the %s token's attention", query == 0 ? "class" : "distillation");
    else snprintf(who, sizeof who, "attention of patch (%d, %d)", (query - p) / g, (query - p) % g);
    snprintf(title, sizeof title, "Image %ld: %s in every layer and head (each map %s; under it: %s"
             "peak / uniform 1/T)", image, who, o->range == MAPSCALE_MINMAX ? "from its min to its max"
             : "from 0 to its peak", p > 0 ? "prefix share | " : "");
    plot_text(f, 20, 9, 7, 0, title);
    free(rgb);
    return rc;
}

const figure_recipe fig_grid = {
    .name = "grid", .options = FIG_OPT_IMAGE | FIG_OPT_QUERY | FIG_OPT_CMAP | FIG_OPT_RANGE,
    .mirrors = "layers x heads small multiples of one query's attention",
    .needs = "a trace with attn (--image, --query)",
    .summary = "the query's attention over the image for every recorded layer (columns) and head (rows)",
    .width = PLOT_DOUBLE, .height = 150, .max_sources = 1, .draw = draw};
