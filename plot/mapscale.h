/* mapscale.h: how an attention map is coloured, one rule for the figures (plot/) and the viewer
 * (viewer/): the colour range, the uniform level 1/T marked on the colour bar, the peak over the
 * uniform level, and the share of attention that goes to the prefix tokens (class and
 * distillation token), which an overlay over the image patches cannot show.
 *
 * Usage:
 *     mapscale s;   // one query row of T keys, the first p of them prefix tokens; patches shown
 *     mapscale_make(&s, row, 1, T, p, p, MAPSCALE_ZERO);
 *     plot_overlay(f, &a, row + p, g, s.lo, s.hi, cm, 0.6);
 *     mapscale_colorbar(f, &a, &s, cm, "attention weight");
 *     mapscale_note(f, a.x, a.y + a.h + 3, a.w, 6, &s);   // the prefix share and the peak
 *
 * A map is a probability map when every row is non-negative and sums to 1 (within
 * MAPSCALE_SUM_TOL: float16 traces): softmax attention, LSLA's attn_softmax, LaViT's maps,
 * rollout rows. Then T is the number of keys of a row and 1/T the uniform level. Other maps
 * (scores, Refiner's expanded and convolved maps, LSLA's outer-biased attn) have no uniform
 * level, no ratio and no prefix share; the zero-based range still starts at 0 when they are
 * non-negative and spans min..max when they are signed. */
#ifndef AS_MAPSCALE_H
#define AS_MAPSCALE_H

#include "plot.h"

#define MAPSCALE_SUM_TOL 5e-3

typedef enum {
    MAPSCALE_ZERO = 0,  /* 0 .. max(peak, 1/T): the default; the colour says how much, and a
                           near-uniform map looks flat */
    MAPSCALE_MINMAX,    /* min .. max of the shown values: structure at any contrast */
    MAPSCALE_COUNT
} mapscale_range;

typedef struct {
    double lo, hi;          /* the colour range */
    double min, max;        /* of the shown values */
    int zero;               /* lo is 0 by the zero-based rule */
    int probability;        /* every row a distribution over its keys */
    int keys;               /* T: keys per row */
    int prefix;             /* prefix keys at the start of each row */
    double uniform;         /* 1/T when probability, else NaN */
    double ratio;           /* max / uniform when probability, else NaN */
    double prefix_share;    /* mean over rows of the prefix keys' total, NaN when unknown */
    double token_share[2];  /* the class and the distillation token's part, NaN when unknown */
    mapscale_range range;
    /* what the prefix tokens are (mapscale_name_prefix; all 0: unnamed, described as "prefix
     * tokens" unless there is exactly one, taken as the class token) */
    int named, cls, dist, regs;
    double reg_share;       /* mean over rows of the register keys' total, NaN when unknown */
} mapscale;

const char *mapscale_range_name(mapscale_range r);
int mapscale_range_parse(const char *s);   /* -1 when unknown */

/* The scale of m: rows x cols values (row-major), each row over cols keys whose first `prefix`
 * are prefix tokens; the values shown are columns shown_from..cols-1 of every row (an overlay:
 * shown_from = prefix; a whole map: 0). NaN values are ignored. */
void mapscale_make(mapscale *s, const double *m, int rows, int cols, int prefix, int shown_from,
                   mapscale_range r);
/* Marks s as no probability map whatever its values (CaiT's talking heads mix the heads after
 * the softmax: signed by construction, even where a row happens to be >= 0 and sum to 1): no
 * 1/T mark, no prefix shares, the colours from its min (or 0) to its max. */
void mapscale_not_probability(mapscale *s);
/* The same for a distribution over T keys of which only the P = T - prefix patch values are
 * stored (analysis/rollout/map): the prefix share is what the patches leave of 1. */
void mapscale_make_patches(mapscale *s, const double *patches, int P, int T, mapscale_range r);
/* Names s's prefix tokens: cls class + dist distillation + regs register tokens, in that order
 * (= s->prefix), and takes the registers' share from the same m as mapscale_make, so the text
 * says "class 2.0%, registers 31.0%, patches 67.0%" instead of treating any two prefix tokens as
 * class and distillation. */
void mapscale_name_prefix(mapscale *s, const double *m, int rows, int cols, int cls, int dist, int regs);

/* Widens s to cover o's values too: one shared scale over several maps, by the same rule over
 * the union of their values (zero-based: 0 .. the largest max(peak, 1/T); minmax: the smallest
 * min .. the largest max); probability (the 1/T mark) when either is. ratio is then the largest
 * peak's; prefix_share and token_share stay s's. */
void mapscale_widen(mapscale *s, const mapscale *o);

/* The colour bar right of a, with the uniform level marked "1/T" when s is a probability map. */
void mapscale_colorbar(plot_figure *f, const plot_axes *a, const mapscale *s, plot_cmap cm,
                       const char *label);
/* One line for a reader: "class token 3.1%, patches 96.9%; peak 12.4 x uniform" (compact 1:
 * "cls 3% | 12x"; compact 2, the narrowest: "12x"); a map that is no distribution says its
 * colours span min..max. */
void mapscale_text(const mapscale *s, int compact, char *buf, size_t n);
/* Under an overlay at (x, y), w wide: a bar split into the prefix share (dark) and the patches'
 * (light) when there are prefix tokens, and mapscale_text below it (more compact as w narrows;
 * never wider than w).
 * size: the font size in points. Returns the height used. */
double mapscale_note(plot_figure *f, double x, double y, double w, double size, const mapscale *s);

#endif
