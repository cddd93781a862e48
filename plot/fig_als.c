/* fig_als.c: ALS per layer and head with MaiT's mask recommendation (MaiT's ALS figure). */
#include <math.h>
#include <stdlib.h>

#include "figures.h"

static as_status draw(plot_figure *f, const fig_opts *o, as_error *err) {
    const fig_source *s = &o->src[0];
    double *m = NULL, *rec = NULL;
    long d[6], d2[6];
    int nd, nd2, layers[256], heads[1024];
    if (fig_read(s, "als", "score", "mean", &m, d, &nd, err) != AS_OK) return err->status;
    as_error e2 = {0};
    fig_read_derived(s, "als", "recommendation", &rec, d2, &nd2, &e2);
    int L = (int)d[0], H = (int)d[1];
    fig_labels(s, "als", "score", "layer", layers, 256);
    fig_labels(s, "als", "score", "head", heads, 1024);
    plot_axes a = plot_axes_grid(f, 0, 0, 1, 1, 46);
    a.h -= 8; /* room for the key below */
    double lo, hi;
    fig_range(m, (size_t)L * H, &lo, &hi);
    lo = 0;
    plot_nice_range(&lo, &hi);
    if (hi > 1) hi = 1;
    int st[256], staged = L <= 256 && fig_layer_stages(s, st, L);
    fig_heatmap(f, &a, m, L, H, layers, heads, 0, hi, fig_cmap(o),
                staged ? "Attention locality score (lines: stages)" : "Attention locality score",
                "head", "layer", "ALS (mean)");
    if (staged) fig_heatmap_stages(f, &a, st, L, NULL, H);
    if (rec) { /* white dot: mask (ALS >= high); ring: candidate */
        cairo_t *cr = plot_cairo(f);
        double r = fmin(a.w / H, a.h / L) * 0.14;
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                double code = rec[l * H + h];
                if (code < 1) continue;
                cairo_new_sub_path(cr);
                cairo_arc(cr, plot_x(&a, h), plot_y(&a, l), r, 0, 2 * PLOT_PI);
                cairo_set_source_rgb(cr, 1, 1, 1);
                if (code >= 2) cairo_fill(cr);
                else {
                    cairo_set_line_width(cr, 0.6);
                    cairo_stroke(cr);
                }
            }
        plot_text(f, a.x, plot_height(f) - 3, 6, 0, "filled dot: mask the head (MaiT, ALS >= high); ring: candidate");
    }
    free(m);
    free(rec);
    return AS_OK;
}

const figure_recipe fig_als = {
    .name = "als", .options = FIG_OPT_CMAP, .metric = "als", .mirrors = "MaiT Fig. 2 (ALS per layer/head) and its mask placement",
    .needs = "analysis/als (attnscope analyze --metrics als)",
    .summary = "heatmap of ALS, layers x heads, dots on the heads to mask",
    .width = PLOT_COLUMN, .height = 220, .max_sources = 1,
    .traces = FIG_TRACES_SINGLE_GRID | FIG_TRACES_STAGED, .draw = draw};
