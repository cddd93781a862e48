/* fig_evolution.c: feature evolution, several models (Refiner Fig. 2/4): token cosine of each
 * block to the final block with 95% bands, and CKA to the final block with images as the
 * examples (the only CKA that compares ViT blocks with ResNet blocks, as Refiner's figures do). */
#include <math.h>

#include "figures.h"

static as_status draw(plot_figure *f, const fig_opts *o, as_error *err) {
    /* one legend, outside the right panel */
    plot_axes a = plot_axes_grid(f, 0, 0, 2, 1, 0);
    plot_axes b = plot_axes_grid(f, 1, 0, 2, 1, o->n_sources > 1 ? PLOT_LEGEND_PAD : 0);
    if (fig_layer_curves(f, &a, o, "evolution", "cos_final", 0, -1, 1, NAN, 1.0,
                         "Token cosine to the final block", "cosine", 0, err) != AS_OK)
        return err->status;
    return fig_layer_curves(f, &b, o, "evolution", "cka_images_final", 1, -1, 0, NAN, 1.0,
                            "Linear CKA to the final block", "CKA (images as examples)", 1, err);
}

const figure_recipe fig_evolution = {
    .name = "evolution", .options = FIG_OPT_LABELS, .metric = "evolution", .mirrors = "Refiner Fig. 2/4: feature evolution with depth",
    .needs = "analysis/evolution of each input (record with --record attn,tokens)",
    .summary = "token cosine and CKA of each block to the final block, one line per model",
    .width = PLOT_DOUBLE, .height = 170, .max_sources = FIG_MAX_SOURCES,
    .traces = FIG_TRACES_SINGLE_GRID | FIG_TRACES_STAGED, .draw = draw};
