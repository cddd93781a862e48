/* fig_cka.c: the L x L minibatch CKA matrix of block outputs (Refiner, Raghu et al.). */
#include <stdlib.h>

#include "figures.h"

static as_status draw(plot_figure *f, const fig_opts *o, as_error *err) {
    const fig_source *s = &o->src[0];
    double *m;
    long d[6];
    int nd, layers[256];
    if (fig_read_derived(s, "evolution", "cka_minibatch", &m, d, &nd, err) != AS_OK) return err->status;
    int L = (int)d[0];
    fig_labels(s, "evolution", "cka_minibatch", "layer", layers, 256);
    plot_axes a = plot_axes_grid(f, 0, 0, 1, 1, 46);
    double lo, hi; /* from a nice value below the smallest similarity up to 1 */
    fig_range(m, (size_t)L * L, &lo, &hi);
    hi = 1;
    plot_nice_range(&lo, &hi);
    if (lo < -1) lo = -1;
    int st[256], staged = L <= 256 && fig_layer_stages(s, st, L);
    fig_heatmap(f, &a, m, L, L, layers, layers, lo, 1, fig_cmap(o),
                staged ? "Linear CKA between blocks (lines: stages)" : "Linear CKA between blocks",
                "block", "block", "CKA (minibatch)");
    if (staged) fig_heatmap_stages(f, &a, st, L, st, L);
    free(m);
    return AS_OK;
}

const figure_recipe fig_cka = {
    .name = "cka", .options = FIG_OPT_CMAP, .metric = "evolution", .mirrors = "Refiner / Raghu et al. Fig. 1: CKA between layers",
    .needs = "analysis/evolution (record with --record attn,tokens)",
    .summary = "L x L heatmap of minibatch linear CKA between block outputs",
    .width = PLOT_COLUMN, .height = 215, .max_sources = 1,
    .traces = FIG_TRACES_SINGLE_GRID | FIG_TRACES_STAGED, .draw = draw};
