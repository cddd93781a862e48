/* mapscale.c: see mapscale.h. Accumulation in double; the decisions depend on the values only,
 * so the figure and the viewer colour the same map alike. */
#include "mapscale.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const range_names[] = {"zero", "minmax"};
_Static_assert(sizeof range_names / sizeof range_names[0] == MAPSCALE_COUNT, "range names");

const char *mapscale_range_name(mapscale_range r) {
    return (unsigned)r < MAPSCALE_COUNT ? range_names[r] : "?";
}

int mapscale_range_parse(const char *s) {
    for (int i = 0; i < MAPSCALE_COUNT; i++)
        if (strcmp(s, range_names[i]) == 0) return i;
    return -1;
}

/* The colour range from min/max and what the map is. */
static void finish(mapscale *s) {
    if (s->min > s->max) s->min = s->max = 0; /* nothing shown (all NaN) */
    s->uniform = s->probability ? 1.0 / s->keys : NAN;
    s->ratio = s->probability ? s->max / s->uniform : NAN;
    s->zero = s->range == MAPSCALE_ZERO && s->min >= 0;
    s->lo = s->zero ? 0 : s->min;
    /* zero-based probability maps reach at least 1/T: the uniform level is always on the bar,
     * and a map whose patches get (almost) nothing stays dark instead of a 0..1e-9 range */
    s->hi = s->zero && s->probability ? fmax(s->max, s->uniform) : s->max;
    if (!(s->hi > s->lo)) s->hi = s->lo + (s->probability ? s->uniform : fabs(s->lo) > 0 ? fabs(s->lo) : 1);
}

static void start(mapscale *s, int cols, int prefix, mapscale_range r) {
    memset(s, 0, sizeof *s);
    s->range = r;
    s->keys = cols;
    s->prefix = prefix;
    s->min = INFINITY;
    s->max = -INFINITY;
    s->prefix_share = s->token_share[0] = s->token_share[1] = s->reg_share = NAN;
}

void mapscale_name_prefix(mapscale *s, const double *m, int rows, int cols, int cls, int dist, int regs) {
    if (cls + dist + regs != s->prefix || regs < 0) return; /* not this map's prefix: stays unnamed */
    s->named = 1;
    s->cls = cls;
    s->dist = dist;
    s->regs = regs;
    if (isnan(s->prefix_share) || regs == 0) return;
    double sum = 0;
    for (int i = 0; i < rows; i++)
        for (int j = cls + dist; j < s->prefix && j < cols; j++) sum += m[(size_t)i * cols + j];
    s->reg_share = sum / rows;
}

void mapscale_make(mapscale *s, const double *m, int rows, int cols, int prefix, int shown_from,
                   mapscale_range r) {
    start(s, cols, prefix, r);
    int prob = rows > 0 && cols > 0;
    double share = 0, tok[2] = {0, 0};
    for (int i = 0; i < rows; i++) {
        const double *row = m + (size_t)i * cols;
        double sum = 0, pre = 0;
        for (int j = 0; j < cols; j++) {
            double x = row[j];
            if (isnan(x)) {
                prob = 0;
                continue;
            }
            if (x < -1e-6) prob = 0;
            sum += x;
            if (j < prefix) pre += x;
            if (j < prefix && j < 2) tok[j] += x;
            if (j >= shown_from) {
                s->min = fmin(s->min, x);
                s->max = fmax(s->max, x);
            }
        }
        if (fabs(sum - 1) > MAPSCALE_SUM_TOL) prob = 0;
        share += pre;
    }
    s->probability = prob;
    if (prob && prefix > 0) {
        s->prefix_share = share / rows;
        for (int k = 0; k < 2 && k < prefix; k++) s->token_share[k] = tok[k] / rows;
    }
    finish(s);
}

void mapscale_not_probability(mapscale *s) {
    s->probability = 0;
    s->prefix_share = s->token_share[0] = s->token_share[1] = s->reg_share = NAN;
    finish(s);
}

void mapscale_make_patches(mapscale *s, const double *patches, int P, int T, mapscale_range r) {
    start(s, T, T - P, r);
    double sum = 0;
    int prob = P > 0 && T >= P;
    for (int j = 0; j < P; j++) {
        double x = patches[j];
        if (isnan(x)) {
            prob = 0;
            continue;
        }
        if (x < -1e-6) prob = 0;
        sum += x;
        s->min = fmin(s->min, x);
        s->max = fmax(s->max, x);
    }
    if (sum > 1 + MAPSCALE_SUM_TOL || (T == P && fabs(sum - 1) > MAPSCALE_SUM_TOL)) prob = 0;
    s->probability = prob;
    if (prob && T > P) {
        s->prefix_share = fmax(0, 1 - sum);
        if (T - P == 1) s->token_share[0] = s->prefix_share;
    }
    finish(s);
}

void mapscale_widen(mapscale *s, const mapscale *o) {
    s->min = fmin(s->min, o->min);
    s->max = fmax(s->max, o->max);
    /* the 1/T level is marked when any of the maps has it */
    s->probability = s->probability || o->probability;
    /* the range by the same rule over the union of the values (not of the ranges: a flat map's
     * padded range would stretch everyone's) */
    finish(s);
}

void mapscale_colorbar(plot_figure *f, const plot_axes *a, const mapscale *s, plot_cmap cm,
                       const char *label) {
    plot_colorbar_extra x = {.has_mark = s->probability, .mark = s->uniform, .mark_label = "1/T"};
    plot_colorbar_ex(f, a, s->lo, s->hi, cm, label, &x);
}

/* "12.4" / "1.05": three significant digits, never scientific. */
static void ratio_text(double r, char *buf, size_t n) {
    snprintf(buf, n, r >= 100 ? "%.0f" : r >= 10 ? "%.1f" : "%.2f", r);
}

void mapscale_text(const mapscale *s, int compact, char *buf, size_t n) {
    char r[32];
    if (!s->probability) {
        /* from 0 when the range asks for it and nothing is below 0 (finish()) */
        const char *span = s->zero ? "0..max" : "min..max";
        if (compact) snprintf(buf, n, "%s", span);
        else snprintf(buf, n, "not a probability map: colours span %s", span);
        return;
    }
    ratio_text(s->ratio, r, sizeof r);
    size_t k = 0;
    buf[0] = 0;
    if (s->prefix > 0 && !isnan(s->prefix_share) && compact < 2) {
        double pct = 100 * s->prefix_share;
        const int one_cls = s->prefix == 1 && (!s->named || s->cls); /* unnamed: ViT's class token */
        if (compact)
            k = (size_t)snprintf(buf, n, "%s %.0f%% | ", one_cls ? "cls" : s->named && !s->cls && !s->dist ? "reg" : "prefix", pct);
        else if (s->named && s->regs > 0 && !isnan(s->reg_share) && s->cls)
            k = (size_t)snprintf(buf, n, "class %.1f%%, registers %.1f%%, patches %.1f%%; ",
                                 100 * (s->prefix_share - s->reg_share), 100 * s->reg_share, 100 - pct);
        else if (s->named && s->regs > 0 && !isnan(s->reg_share))
            k = (size_t)snprintf(buf, n, "registers %.1f%%, patches %.1f%%; ", 100 * s->reg_share, 100 - pct);
        else if (s->prefix == 2 && s->named && s->cls && s->dist && !isnan(s->token_share[1]))
            k = (size_t)snprintf(buf, n, "class %.1f%%, distillation %.1f%%, patches %.1f%%; ",
                                 100 * s->token_share[0], 100 * s->token_share[1], 100 - pct);
        else if (one_cls)
            k = (size_t)snprintf(buf, n, "class token %.1f%%, patches %.1f%%; ", pct, 100 - pct);
        else
            k = (size_t)snprintf(buf, n, "prefix tokens %.1f%%, patches %.1f%%; ", pct, 100 - pct);
    }
    if (k < n) snprintf(buf + k, n - k, compact ? "%s\xc3\x97" : "peak %s \xc3\x97 1/T", r);
}

static double width_of(cairo_t *cr, double size, const char *t) {
    cairo_set_font_size(cr, size);
    cairo_text_extents_t e;
    cairo_text_extents(cr, t, &e);
    return e.x_advance;
}

double mapscale_note(plot_figure *f, double x, double y, double w, double size, const mapscale *s) {
    cairo_t *cr = plot_cairo(f);
    double bar = fmax(1.5, size * 0.45), used = 0;
    if (s->prefix > 0 && !isnan(s->prefix_share)) {
        double split = w * fmin(1, fmax(0, s->prefix_share));
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        cairo_rectangle(cr, x, y, split, bar);
        cairo_fill(cr);
        cairo_set_source_rgb(cr, 0.86, 0.86, 0.86);
        cairo_rectangle(cr, x + split, y, w - split, bar);
        cairo_fill(cr);
        used = bar + 1;
    }
    char t[160];
    mapscale_text(s, 0, t, sizeof t);
    double sz = size;
    /* shorter forms until it fits the panel (down to 3 pt); the peak alone goes last, the bar
     * above still shows the prefix share */
    for (int compact = 1; compact <= 2 && width_of(cr, sz, t) > w; compact++) {
        mapscale_text(s, compact, t, sizeof t);
        double tw = width_of(cr, sz, t);
        if (tw > w) sz = fmax(3, sz * w / tw);
    }
    plot_text_fit(f, x, y + used + sz * 0.85, sz, 0, w, t); /* kept inside the panel */
    return used + sz * 1.1;
}
