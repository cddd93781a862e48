/* fig_distance.c: mean attention distance of every head against depth (ViT Fig. 7). */
#include <math.h>
#include <stdlib.h>

#include <hdf5.h>
#include <string.h>

#include "../io/h5util.h"
#include "figures.h"

/* Which distance the analysis used (its stored parameters; results before v2 used centres). */
static const char *distance_kind(const fig_source *s) {
    char params[512] = "";
    hid_t g = s->results >= 0 && H5Lexists((hid_t)s->results, "analysis/distance", H5P_DEFAULT) > 0
                  ? H5Gopen2((hid_t)s->results, "analysis/distance", H5P_DEFAULT) : -1;
    if (g >= 0) {
        h5u_attr_read_str(g, "parameters", params, sizeof params);
        H5Gclose(g);
    }
    return strstr(params, "distance=pixel") ? "pixel" : "centre";
}

static as_status draw(plot_figure *f, const fig_opts *o, as_error *err) {
    double *m[FIG_MAX_SOURCES] = {0};
    long d[FIG_MAX_SOURCES][6];
    int nd, layers[FIG_MAX_SOURCES][256];
    double lo = 0, hi = 0, lmax = 1;
    as_status rc = AS_OK;
    const char *kind = o->n_sources ? distance_kind(&o->src[0]) : "pixel";
    for (int i = 1; i < o->n_sources; i++)
        if (strcmp(distance_kind(&o->src[i]), kind) != 0)
            return as_fail(err, AS_ERR_ARG, "%s and %s were analysed with different --distance "
                           "(%s, %s): analyse both with the same", o->src[0].path, o->src[i].path,
                           kind, distance_kind(&o->src[i]));
    for (int i = 0; i < o->n_sources && rc == AS_OK; i++) {
        rc = fig_read(&o->src[i], "distance", "distance", "mean", &m[i], d[i], &nd, err);
        if (rc != AS_OK) break;
        fig_labels(&o->src[i], "distance", "distance", "layer", layers[i], 256);
        double a, b;
        fig_range(m[i], (size_t)(d[i][0] * d[i][1]), &a, &b);
        hi = fmax(hi, b);
        lmax = fmax(lmax, layers[i][d[i][0] - 1]);
    }
    if (rc == AS_OK) {
        plot_axes a = plot_axes_grid(f, 0, 0, 1, 1, o->n_sources > 1 ? PLOT_LEGEND_PAD : 0);
        plot_nice_range(&lo, &hi);
        int nl[FIG_MAX_SOURCES];
        for (int i = 0; i < o->n_sources; i++) nl[i] = (int)d[i][0];
        /* models of different depths (ViT against Swin): against relative depth */
        const int rel = fig_relative_depth(o, layers, nl);
        fig_depth_axis(&a, rel, lmax, 0, hi);
        const char *names[FIG_MAX_SOURCES];
        plot_color cols[FIG_MAX_SOURCES];
        plot_marker marks[FIG_MAX_SOURCES];
        double x0[256];
        for (int i = 0; i < o->n_sources; i++) {
            int L = (int)d[i][0], H = (int)d[i][1];
            cols[i] = plot_series_color(i);
            marks[i] = plot_series_marker(i);
            names[i] = o->src[i].label;
            fig_depth_x(&o->src[i], layers[i], L, rel, x0);
            const double spread = rel ? 0.006 : 0.18;
            for (int h = 0; h < H; h++) { /* a staged layer's heads beyond its own are NaN: not drawn */
                double x[256], y[256];
                for (int l = 0; l < L; l++) {
                    /* spread the heads of a model a little, models apart */
                    x[l] = x0[l] + (o->n_sources > 1 ? (i - (o->n_sources - 1) / 2.0) * spread : 0);
                    y[l] = m[i][l * H + h];
                }
                plot_scatter(f, &a, x, y, L, cols[i], marks[i], 1.5);
            }
            if (o->n_sources == 1) fig_stage_bounds(f, &a, &o->src[0], x0, L);
        }
        plot_axes_draw(f, &a, "Mean attention distance per head", rel ? "relative depth (layer / (layers - 1))" : "layer",
                       strcmp(kind, "pixel") == 0 ? "pixel-to-pixel distance (pixels)"
                                                  : "patch-centre distance (pixels)");
        if (o->n_sources > 1 || o->labels_set) /* one input: a legend only when --labels names it */
            plot_legend(f, &a, names, o->n_sources, cols, marks,
                        o->n_sources > 1 ? PLOT_LEGEND_OUTSIDE : PLOT_LEGEND_INSIDE_RIGHT);
    }
    for (int i = 0; i < FIG_MAX_SOURCES; i++) free(m[i]);
    return rc;
}

const figure_recipe fig_distance = {
    .name = "distance", .options = FIG_OPT_LABELS, .metric = "distance", .mirrors = "ViT Fig. 7 (right): mean attention distance per head vs depth",
    .needs = "analysis/distance of each input",
    .summary = "every head's mean attention distance in pixels against its layer",
    .width = PLOT_COLUMN, .height = 180, .max_sources = FIG_MAX_SOURCES,
    .traces = FIG_TRACES_SINGLE_GRID | FIG_TRACES_STAGED, .draw = draw};
