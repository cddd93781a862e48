/* fig_qk.c: Q/K signal efficiency per layer and threshold, models side by side (LMSA Fig. 4). */
#include <stdio.h>
#include <stdlib.h>

#include "figures.h"

static as_status draw(plot_figure *f, const fig_opts *o, as_error *err) {
    int n = o->n_sources;
    for (int i = 0; i < n; i++)
        for (int w = 0; w < 2; w++) {
            const fig_source *s = &o->src[i];
            const char *out = w ? "k_fraction" : "q_fraction";
            double *m = NULL, th[16];
            long d[6];
            int nd, layers[256];
            if (fig_read(s, "qk", out, "mean", &m, d, &nd, err) != AS_OK) return err->status;
            int L = (int)d[0], T = (int)d[1] < 16 ? (int)d[1] : 16;
            fig_labels(s, "qk", out, "layer", layers, 256);
            int nt = fig_label_doubles(s, "qk", out, "threshold", th, 16);
            char name[16][32];
            const char *names[16];
            plot_color cols[16];
            for (int t = 0; t < T; t++) {
                cols[t] = plot_cmap_color(PLOT_CMAP_DEFAULT, T > 1 ? 0.1 + 0.75 * t / (T - 1) : 0.5);
                snprintf(name[t], sizeof name[t], "t = %g", t < nt ? th[t] : (double)t);
                names[t] = name[t];
            }
            char ll[256][8];
            const char *lp[256];
            for (int l = 0; l < L && l < 256; l++) {
                snprintf(ll[l], sizeof ll[l], "%d", layers[l]);
                lp[l] = ll[l];
            }
            plot_axes a = plot_axes_grid(f, i, w, n, 2, i == n - 1 ? 44 : 0);
            a.xcat = 1;
            a.xlabels = lp;
            a.xstep = L > 12 ? 2 : 1;
            plot_axes_range(&a, -0.5, L - 0.5, 0, 1);
            plot_bars(f, &a, m, NULL, L, (int)d[1] < 16 ? (int)d[1] : 16, cols);
            char title[160];
            snprintf(title, sizeof title, "%s: %s", s->label, w ? "keys" : "queries");
            plot_axes_draw(f, &a, title, w ? "layer" : NULL,
                           i == 0 ? (w ? "fraction |k| > t" : "fraction |q| > t") : NULL);
            if (i == n - 1 && w == 0) plot_legend(f, &a, names, T, cols, NULL, PLOT_LEGEND_OUTSIDE);
            free(m);
        }
    return AS_OK;
}

const figure_recipe fig_qk = {
    .name = "qk", .options = FIG_OPT_LABELS, .metric = "qk", .mirrors = "LMSA Fig. 4: Q/K signal efficiency per threshold and layer",
    .needs = "analysis/qk of each input (record with --record attn,q,k)",
    .summary = "bars of the fraction of |q| and |k| above each threshold per layer, models side by side",
    .width = PLOT_DOUBLE, .height = 250, .max_sources = 4,
    .traces = FIG_TRACES_SINGLE_GRID | FIG_TRACES_STAGED, .draw = draw};
