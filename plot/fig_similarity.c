/* fig_similarity.c: the L x L cross-layer similarity of attention maps (DeepViT Fig. 2, MaiT
 * appendix), head-averaged, under one definition. */
#include <stdio.h>
#include <stdlib.h>
#include "../analysis/analysis.h"
#include "figures.h"

extern const figure_recipe fig_similarity;

static as_status draw(plot_figure *f, const fig_opts *o, as_error *err) {
    const fig_source *s = &o->src[0];
    int di = fig_definition(o, &fig_similarity, err);
    if (di < 0) return err->status;
    double *m;
    long d[6];
    int nd, layers[256];
    if (fig_read(s, "similarity", "head_mean", "mean", &m, d, &nd, err) != AS_OK) return err->status;
    int L = (int)d[1];
    fig_labels(s, "similarity", "head_mean", "layer", layers, 256);
    plot_axes a = plot_axes_grid(f, 0, 0, 1, 1, 46);
    double lo, hi; /* from a nice value below the smallest similarity up to 1 */
    fig_range(m + (size_t)di * L * L, (size_t)L * L, &lo, &hi);
    hi = 1;
    plot_nice_range(&lo, &hi);
    if (lo < -1) lo = -1;
    char title[96];
    snprintf(title, sizeof title, "Cross-layer similarity (%s, head mean)", analysis_definition_name(di));
    int st[256], staged = L <= 256 && fig_layer_stages(s, st, L);
    if (staged) snprintf(title, sizeof title, "Cross-layer similarity (%s, head mean; lines: stages)",
                         analysis_definition_name(di));
    fig_heatmap(f, &a, m + (size_t)di * L * L, L, L, layers, layers, lo, 1,
                fig_cmap(o), title, "layer", "layer", "cosine similarity");
    if (staged) fig_heatmap_stages(f, &a, st, L, st, L);
    free(m);
    return AS_OK;
}

const figure_recipe fig_similarity = {
    .name = "similarity", .options = FIG_OPT_DEFINITION | FIG_OPT_CMAP, .metric = "similarity", .definition = "row", /* MaiT appendix Eq. 4 */
    .mirrors = "MaiT appendix Fig. 4-6 (rows, the default) / DeepViT (--definition deepvit): L x L attention similarity",
    .needs = "analysis/similarity (attnscope analyze --metrics similarity)",
    .summary = "L x L heatmap of cross-layer cosine similarity (--definition deepvit|row|map)",
    .width = PLOT_COLUMN, .height = 215, .max_sources = 1,
    .traces = FIG_TRACES_SINGLE_GRID | FIG_TRACES_STAGED, .draw = draw};
