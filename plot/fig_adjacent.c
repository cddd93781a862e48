/* fig_adjacent.c: similarity of each layer's maps to the previous layer's, several models on
 * one axes (LaViT Fig. 3, "attention saturation"). */
#include <math.h>
#include <stdio.h>

#include "../analysis/analysis.h"
#include "figures.h"

extern const figure_recipe fig_adjacent;

static as_status draw(plot_figure *f, const fig_opts *o, as_error *err) {
    int di = fig_definition(o, &fig_adjacent, err);
    if (di < 0) return err->status;
    plot_axes a = plot_axes_grid(f, 0, 0, 1, 1, o->n_sources > 1 ? PLOT_LEGEND_PAD : 0);
    char ylabel[64];
    snprintf(ylabel, sizeof ylabel, "cosine similarity (%s)", analysis_definition_name(di));
    return fig_layer_curves(f, &a, o, "similarity", "adjacent", 0, di, 1, NAN, 1.0,
                            "Similarity to the previous layer", ylabel, 1, err);
}

const figure_recipe fig_adjacent = {
    .name = "adjacent", .options = FIG_OPT_DEFINITION | FIG_OPT_LABELS, .metric = "similarity", .definition = "map", /* LaViT 4.6: cosine of the maps */
    .mirrors = "LaViT Fig. 3: adjacent-layer attention similarity (whole-map cosine)",
    .needs = "analysis/similarity of each input",
    .summary = "curve of layer l vs l-1 similarity with 95% bands, one line per model",
    .width = PLOT_COLUMN, .height = 170, .max_sources = FIG_MAX_SOURCES,
    .traces = FIG_TRACES_SINGLE_GRID | FIG_TRACES_STAGED, .draw = draw};
