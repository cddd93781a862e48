/* keymap.h: one query's row of a staged layer (format 3 traces: Swin's windows, PVT v2's reduced
 * keys, CaiT's class rows, global stage layers) placed on the input image in pixels, for the
 * figures; and the pixel geometry of a layer's cells, shared with the viewer.
 *
 * Usage:
 *     keymap_row k;
 *     keymap_row_read(src, li, image, head, token, &k, err);   // li: position in tr.layers
 *     mapscale_make(&ms, k.keys, 1, k.n_keys, k.prefix, k.prefix, MAPSCALE_ZERO);
 *     keymap_row_draw(f, &a, &k, ms.lo, ms.hi, cm, 0.6);        // a: the image's axes
 *     keymap_row_free(&k);
 *
 * A cell of an axis of n tokens centred at off + stride * i covers [off + stride (i - 1/2),
 * off + stride (i + 1/2)) clipped to the image (a merge pads odd grids, so the last cells can
 * reach past it). A spatial-reduction key covers the tokens it reduces (vit_sra_key_tokens); a
 * pooled key is drawn over the i-th of P equal parts of the grid's pixels, which is its bin when
 * P divides the grid and keeps every key visible, in order, when bins overlap. */
#ifndef AS_KEYMAP_H
#define AS_KEYMAP_H

#include "figures.h"

/* The cell of an axis (n cells centred at off + stride * i) that holds pixel p, clamped. */
int keymap_cell_at(double p, double off, double stride, int n);
/* Pixels [lo, hi) of cell i of an axis, clipped to [0, img). */
void keymap_cell_span(double off, double stride, int i, int img, double *lo, double *hi);
/* Pixels [lo, hi) where key i of spatial-reduction layer g is drawn along an axis of n tokens. */
void keymap_key_span(const trace_layer_geom *g, int n, int i, int img, double *lo, double *hi);

typedef struct {
    double x0, y0, x1, y1;   /* input pixels */
    double v;                /* the key's weight; 0 for a token outside the query's window */
    int outside;             /* a token outside the query's window: exactly 0, not a key */
} keymap_cell;

typedef struct {
    int layer, scope;        /* model block, vit_scope */
    int token;               /* the query token on the layer's grid (-1: a class row) */
    int window, n_windows;   /* WINDOW: the query's window and the layer's count (else -1, 0) */
    int n_keys, prefix;      /* the row's keys (prefix: the class key of a class row) */
    double *keys;            /* (n_keys) the row as recorded, for the colour scale */
    int n;                   /* cells drawn */
    keymap_cell *cell;
    double q[4];             /* the query token's cell x0, y0, x1, y1 (a class row: none) */
    int n_pieces;            /* the query's window: up to 4 pieces where a shifted window wraps */
    double piece[4][4];
    int signed_map;          /* CaiT's talking heads: not a probability map */
} keymap_row;

/* Row `token` (flat index on layer position li's grid; ignored for a class row) of head `head`
 * (a model head of the layer) of image `image`'s attn map. */
as_status keymap_row_read(const fig_source *s, int li, long image, int head, int token,
                          keymap_row *out, as_error *err);
void keymap_row_free(keymap_row *k);
/* The cells over the image drawn in axes a (the image's S x S pixels fill a), coloured lo..hi by
 * cm at alpha; tokens outside the query's window washed out; the window's outline and the query
 * cell's. */
void keymap_row_draw(plot_figure *f, const plot_axes *a, const keymap_row *k, int S, double lo,
                     double hi, plot_cmap cm, double alpha);
/* "stage 1, window 5 of 16" / "stage 2, keys 7 x 7 (sr 2)" / "class row". */
void keymap_row_describe(const fig_source *s, int li, const keymap_row *k, char *buf, size_t n);

#endif
