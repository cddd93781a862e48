/* fig_grid.c: one query's attention over the image for every recorded layer and head, as small
 * multiples (layers in columns, heads in rows) on one colour scale with its bar: mapscale's rule
 * over all panels (zero-based: 0 .. the largest max(peak, 1/T); minmax: the union), the 1/T
 * level marked; under each panel its own prefix share and peak over uniform. The default
 * height follows the grid's shape, so the panels fill the figure at any width. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "figures.h"
#include "../core/vitfam.h"

#define GRID_LEFT 16.0    /* the head labels */
#define GRID_BAR 48.0     /* the colour bar with its ticks and label */
#define GRID_HEAD 9.0     /* the layer labels */
#define GRID_TITLE 7.0    /* title size; it wraps to the figure's width */
#define GRID_MAX_CELL 90.0     /* a few layers still make a figure, not a poster */

typedef struct {
    double x0, y0, cell; /* the first panel's corner and the images' side (the column pitch) */
    double pitch;        /* the row pitch: an image and its note */
    double title_h;
    int flip;            /* layers in rows, heads in columns (few layers, many heads) */
} grid_layout;

/* The heads of layer position li (a staged trace: each layer's own, 3/6/12/24 on Swin-T). */
static int grid_heads(const trace_reader *r, int li, int *ids) {
    return trace_layer_heads(r, r->layers[li], ids);
}

/* Rows (or columns) of heads: the most any layer has. */
static int max_heads(const trace_reader *r) {
    int ids[1024], m = 0;
    for (int li = 0; li < r->n_layers; li++) {
        int n = grid_heads(r, li, ids);
        m = n > m ? n : m;
    }
    return m;
}

/* zero: the shared scale starts at 0 (mapscale's zero-based rule held for every panel) */
static void grid_title(const fig_opts *o, int flip, int zero, char *out, size_t n) {
    const fig_source *s = &o->src[0];
    const trace_reader *r = &s->tr;
    int query = fig_query(o, s), p = r->num_prefix, g = vit_grid(&r->cfg);
    long image = o->image >= 0 ? o->image : 0;
    char q[100], label[48];
    if (r->staged) {
        const trace_layer_geom *g0 = &r->geom[0];
        const int q0 = fig_staged_query(o, s);
        snprintf(q, sizeof q, "cell (%d, %d) of the %d x %d grid (each layer: the cell under it)",
                 q0 / g0->gw, q0 % g0->gw, g0->gh, g0->gw);
    } else if (query < p) { /* class, distillation, register k */
        vit_prefix_label(&r->cfg, query, label, sizeof label);
        snprintf(q, sizeof q, "the %s", label);
    }
    else snprintf(q, sizeof q, "patch (%d, %d)", (query - p) / g, (query - p) % g);
    snprintf(out, n, "Image %ld: attention of %s in every layer (%s) and head (%s), on one colour "
             "scale (%s); under each map: %speak / uniform 1/T", image, q, flip ? "rows" : "columns",
             flip ? "columns" : "rows", zero ? "from 0 to the highest peak" : "min to max over all maps",
             p > 0 ? "prefix share | " : "");
}

/* Where the panels go on a width x height figure (height 0: as tall as the grid needs). */
static void grid_place(plot_figure *f, const fig_opts *o, double width, double height, grid_layout *g) {
    const trace_reader *r = &o->src[0].tr;
    char title[400];
    int lines = 0;
    for (int zero = 0; zero < 2; zero++) { /* the scale is not known yet: room for either */
        grid_title(o, 0, zero, title, sizeof title);
        int n = plot_text_wrap(f, 0, 0, GRID_TITLE, 0, width - 8, 0, title);
        lines = n > lines ? n : lines;
    }
    g->title_h = 3 + lines * GRID_TITLE * 1.2;
    /* without a height the figure may grow to 0.9 x its width (a page, not a poster) */
    double room_h = (height > 0 ? height : fmax(150, 0.9 * width)) - g->title_h - GRID_HEAD - 4;
    /* each row holds the images and their notes; the note is no taller under a smaller image */
    double note = fig_attention_note_height(&o->src[0], GRID_MAX_CELL), cells[2];
    for (int k = 0; k < 2; k++) {
        int cols = k ? max_heads(r) : r->n_layers, rows = k ? r->n_layers : max_heads(r);
        cells[k] = fmin(fmin((width - GRID_LEFT - GRID_BAR - 4) / cols, GRID_MAX_CELL),
                        room_h / rows - note);
    }
    /* layers in columns reads like the papers: turn only for clearly larger panels, or for
     * equally large ones in a shorter figure */
    g->flip = cells[1] > 1.25 * cells[0] ||
              (cells[1] >= cells[0] && r->n_layers < max_heads(r));
    g->cell = cells[g->flip];
    if (g->cell < 4) g->cell = 4;
    g->pitch = g->cell + fig_attention_note_height(&o->src[0], g->cell);
    int cols = g->flip ? max_heads(r) : r->n_layers;
    double used = GRID_LEFT + g->cell * cols + GRID_BAR;
    g->x0 = GRID_LEFT + fmax(0, (width - 4 - used) / 2);
    g->y0 = g->title_h + GRID_HEAD;
}

static double height_for(const fig_opts *o, double width) {
    if (o->n_sources < 1 || !o->src[0].is_trace) return 150;
    /* a scratch figure to measure the title with */
    cairo_surface_t *sf = cairo_image_surface_create(CAIRO_FORMAT_A8, 1, 1);
    cairo_t *cr = cairo_create(sf);
    plot_figure *f = plot_figure_wrap(cr, width, 1e4);
    double h = 150;
    if (f) {
        grid_layout g;
        grid_place(f, o, width, 0, &g);
        h = g.y0 + g.pitch * (g.flip ? o->src[0].tr.n_layers : max_heads(&o->src[0].tr)) + 4;
        plot_figure_abort(f);
    }
    cairo_destroy(cr);
    cairo_surface_destroy(sf);
    return h;
}

static as_status draw(plot_figure *f, const fig_opts *o, as_error *err) {
    const fig_source *s = &o->src[0];
    if (fig_need_trace(s, "grid", err) != AS_OK) return err->status;
    const trace_reader *r = &s->tr;
    int L = r->n_layers, H = max_heads(r), query = r->staged ? -1 : fig_query(o, s), S, ids[1024];
    long image = o->image >= 0 ? o->image : 0;
    /* one scale for every panel: each panel's own by --range, widened over all of them */
    mapscale shared;
    for (int li = 0, first = 1; li < L; li++)
        for (int hi = 0, nh = grid_heads(r, li, ids); hi < nh; hi++, first = 0) {
            mapscale ms;
            if (fig_attention_scale(o, s, r->layers[li], ids[hi], image, query, &ms, err) != AS_OK)
                return err->status;
            if (first) shared = ms;
            else mapscale_widen(&shared, &ms);
        }
    uint8_t *rgb;
    if (fig_read_rgb(s, image, &rgb, &S, err) != AS_OK) return err->status;
    grid_layout g;
    grid_place(f, o, plot_width(f), plot_height(f), &g);
    char title[400];
    grid_title(o, g.flip, shared.zero, title, sizeof title);
    plot_text_wrap(f, 4, 2 + GRID_TITLE, GRID_TITLE, 0, plot_width(f) - 8, 1, title);
    double lab = fmin(6, fmax(4.5, g.cell * 0.4)); /* label size follows the panels */
    as_status rc = AS_OK;
    char t[32];
    for (int li = 0; li < L && rc == AS_OK; li++)
        for (int hi = 0, nh = grid_heads(r, li, ids); hi < H && rc == AS_OK; hi++) {
            int col = g.flip ? hi : li, row = g.flip ? li : hi;
            if (hi >= nh) continue; /* a stage with fewer heads: no panel */
            double pad = fmin(0.6, g.cell * 0.03);
            plot_axes a = {.x = g.x0 + g.cell * col + pad, .y = g.y0 + g.pitch * row + pad,
                           .w = g.cell - 2 * pad, .h = g.pitch - 2 * pad};
            rc = fig_attention_panel(f, &a, o, s, r->layers[li], ids[hi], image, query, rgb, S,
                                     0, &shared, NULL, NULL, err);
        }
    /* column labels on top, row labels on the left; the heads of the layer that has the most */
    int most = 0, hid[1024];
    for (int li = 0; li < L; li++)
        if (grid_heads(r, li, ids) > grid_heads(r, most, hid)) most = li;
    grid_heads(r, most, hid);
    for (int k = 0; rc == AS_OK && k < (g.flip ? H : L); k++) {
        snprintf(t, sizeof t, g.flip ? "h%d" : "L%d", g.flip ? hid[k] : r->layers[k]);
        plot_text_fit(f, g.x0 + g.cell * (k + 0.5), g.y0 - 2.5, lab, 0.5, g.cell, t);
    }
    for (int k = 0; rc == AS_OK && k < (g.flip ? L : H); k++) {
        snprintf(t, sizeof t, g.flip ? "L%d" : "h%d", g.flip ? r->layers[k] : hid[k]);
        plot_text_fit(f, g.x0 - 2, g.y0 + g.pitch * k + g.cell / 2 + lab * 0.35, lab, 1, GRID_LEFT - 2, t);
    }
    if (rc == AS_OK) {
        int cols = g.flip ? H : L, rows = g.flip ? L : H;
        /* from the top of the first row's images to the foot of the last row's */
        plot_axes bar = {.x = g.x0 + g.cell * cols - 3, .y = g.y0, .w = 0,
                         .h = g.pitch * (rows - 1) + g.cell};
        mapscale_colorbar(f, &bar, &shared, fig_cmap(o), "attention weight");
    }
    free(rgb);
    return rc;
}

const figure_recipe fig_grid = {
    .name = "grid", .options = FIG_OPT_IMAGE | FIG_OPT_QUERY | FIG_OPT_CMAP | FIG_OPT_RANGE,
    .mirrors = "layers x heads small multiples of one query's attention",
    .needs = "a trace with attn (--image, --query)",
    .summary = "the query's attention over the image for every recorded layer (columns) and head "
               "(rows), one colour scale",
    .width = PLOT_DOUBLE, .height = 150, .height_for = height_for, .max_sources = 1,
    .traces = FIG_TRACES_SINGLE_GRID | FIG_TRACES_STAGED, .draw = draw};
