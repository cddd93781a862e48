/* fig_rollout.c: attention rollout over the input image (Abnar & Zuidema Fig. 3 style). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "figures.h"

static as_status draw(plot_figure *f, const fig_opts *o, as_error *err) {
    const fig_source *s = &o->src[0];
    if (fig_need_trace(s, "rollout", err) != AS_OK) return err->status;
    double *m;
    long d[6];
    int nd, layers[256];
    if (fig_read(s, "rollout", "map", "per_image", &m, d, &nd, err) != AS_OK) return err->status;
    long N = d[0];
    int L = (int)d[1], P = (int)d[2], g = (int)lround(sqrt(P));
    fig_labels(s, "rollout", "map", "layer", layers, 256);
    long image = o->image >= 0 ? o->image : 0;
    int li = L - 1;
    if (o->layer >= 0)
        for (li = 0; li < L && layers[li] != o->layer; li++) {}
    as_status rc = AS_OK;
    if (image >= N) rc = as_fail(err, AS_ERR_ARG, "%s: --image %ld: the rollout covers images 0..%ld", s->path, image, N - 1);
    else if (li >= L) rc = as_fail(err, AS_ERR_ARG, "%s: --layer %d was not analysed", s->path, o->layer);
    uint8_t *rgb = NULL;
    int S;
    if (rc == AS_OK && fig_read_rgb(s, image, &rgb, &S, err) == AS_OK) {
        const double *map = m + ((size_t)image * L + li) * P;
        mapscale ms; /* rollout rows are renormalised: a distribution over the T tokens */
        mapscale_make_patches(&ms, map, P, s->tr.num_tokens, o->range);
        double ns = 6, nh = (P < s->tr.num_tokens ? 4 : 0) + ns * 1.1 + 2;
        double side = fmin(plot_width(f) - 70, plot_height(f) - 18 - nh);
        plot_axes a = {.x = 8, .y = 16, .w = side, .h = side};
        plot_cmap cm = fig_cmap(o);
        plot_image(f, &a, rgb, S, S);
        plot_overlay(f, &a, map, g, ms.lo, ms.hi, cm, 0.6);
        plot_patch_grid(f, &a, g, -1);
        char title[128];
        int st[256];
        if (L <= 256 && fig_layer_stages(s, st, L)) /* a staged trace: back to its first grid */
            snprintf(title, sizeof title, "image %ld: rollout through layer %d (stage %d)", image, layers[li], st[li]);
        else snprintf(title, sizeof title, "image %ld: rollout through layer %d", image, layers[li]);
        plot_text(f, a.x + a.w / 2, a.y - 3, 6.5, 0.5, title);
        mapscale_colorbar(f, &a, &ms, cm, "rollout weight");
        mapscale_note(f, a.x, a.y + side + 2, side, ns, &ms);
        free(rgb);
    } else if (rc == AS_OK) {
        rc = err->status;
    }
    free(m);
    return rc;
}

const figure_recipe fig_rollout = {
    .name = "rollout", .options = FIG_OPT_LAYER | FIG_OPT_IMAGE | FIG_OPT_CMAP | FIG_OPT_RANGE,
    .metric = "rollout", .mirrors = "Abnar & Zuidema 2020 Fig. 3: attention rollout over the image",
    .needs = "a trace analysed with --metrics rollout (--image, --layer)",
    .summary = "the rollout map through a layer (default the last) over the input image",
    .width = PLOT_COLUMN, .height = 200, .max_sources = 1,
    .traces = FIG_TRACES_SINGLE_GRID | FIG_TRACES_STAGED, .draw = draw};
