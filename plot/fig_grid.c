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
            rc = fig_attention_panel(f, &a, s, r->layers[li], r->heads[hi], image, query, rgb, S, 0, NULL, err);
            if (li == 0) {
                snprintf(t, sizeof t, "h%d", r->heads[hi]);
                plot_text(f, 18, a.y + cell / 2, 6, 1, t);
            }
        }
    }
    char title[160];
    int p = r->num_prefix, g = vit_grid(&r->cfg);
    if (query < p) snprintf(title, sizeof title, "Image %ld: the %s token's attention in every layer and head "
                            "(each map scaled from its minimum to its maximum)", image, query == 0 ? "class" : "distillation");
    else snprintf(title, sizeof title, "Image %ld: attention of patch (%d, %d) in every layer and head",
                  image, (query - p) / g, (query - p) % g);
    plot_text(f, 20, 9, 7, 0, title);
    free(rgb);
    return rc;
}

const figure_recipe fig_grid = {
    .name = "grid", .mirrors = "layers x heads small multiples of one query's attention",
    .needs = "a trace with attn (--image, --query)",
    .summary = "the query's attention over the image for every recorded layer (columns) and head (rows)",
    .width = PLOT_DOUBLE, .height = 150, .max_sources = 1, .draw = draw};
