/* fig_entropy.c: attention entropy per layer (head mean, 95% band), several models. */
#include <math.h>

#include "figures.h"

static as_status draw(plot_figure *f, const fig_opts *o, as_error *err) {
    plot_axes a = plot_axes_grid(f, 0, 0, 1, 1, o->n_sources > 1 ? PLOT_LEGEND_PAD : 0);
    return fig_layer_curves(f, &a, o, "entropy", "head_mean", 0, -1, 1, 0.0, NAN,
                            "Attention entropy", "entropy (head mean)", 1, err);
}

const figure_recipe fig_entropy = {
    .name = "entropy", .options = FIG_OPT_LABELS, .metric = "entropy", .mirrors = "attention entropy per layer (as in DeepViT/LaViT analyses)",
    .needs = "analysis/entropy of each input",
    .summary = "entropy per layer, head mean with 95% bands, one line per model",
    .width = PLOT_COLUMN, .height = 170, .max_sources = FIG_MAX_SOURCES,
    .traces = FIG_TRACES_SINGLE_GRID | FIG_TRACES_STAGED, .draw = draw};
