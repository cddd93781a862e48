/* plot.c: see plot.h. Cairo's status is sticky, so drawing calls check nothing and
 * plot_figure_end checks once. */
#define _POSIX_C_SOURCE 200809L
#include "plot.h"

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- colours --------------------------------------------------------------------------------- */

/* 11 stops each at t = 0, 0.1, ..., 1 (matplotlib's viridis and magma; ColorBrewer RdBu
 * reversed, blue for negative); linear interpolation between stops. */
static const uint32_t cmap_stops[PLOT_CMAP_COUNT][11] = {
    {0x440154, 0x482475, 0x414487, 0x355f8d, 0x2a788e, 0x21918c, 0x22a884, 0x44bf70, 0x7ad151,
     0xbddf26, 0xfde725},
    {0x000004, 0x140e36, 0x3b0f70, 0x641a80, 0x8c2981, 0xb73779, 0xde4968, 0xf7705c, 0xfe9f6d,
     0xfecf92, 0xfcfdbf},
    {0x053061, 0x2166ac, 0x4393c3, 0x92c5de, 0xd1e5f0, 0xf7f7f7, 0xfddbc7, 0xf4a582, 0xd6604d,
     0xb2182b, 0x67001f},
};
static const char *const cmap_names[] = {"viridis", "magma", "diverging"};
_Static_assert(sizeof cmap_names / sizeof cmap_names[0] == PLOT_CMAP_COUNT, "colour map names");

const char *plot_cmap_name(plot_cmap c) { return (unsigned)c < PLOT_CMAP_COUNT ? cmap_names[c] : "?"; }
int plot_cmap_parse(const char *s) {
    for (int i = 0; i < PLOT_CMAP_COUNT; i++)
        if (strcmp(s, cmap_names[i]) == 0) return i;
    return -1;
}

static plot_color hex(uint32_t v) {
    return (plot_color){((v >> 16) & 255) / 255.0, ((v >> 8) & 255) / 255.0, (v & 255) / 255.0};
}

plot_color plot_cmap_color(plot_cmap c, double t) {
    if (isnan(t)) return (plot_color){0.85, 0.85, 0.85};
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    double p = t * 10;
    int i = (int)p;
    if (i >= 10) i = 9;
    double u = p - i;
    plot_color a = hex(cmap_stops[c][i]), b = hex(cmap_stops[c][i + 1]);
    return (plot_color){a.r + u * (b.r - a.r), a.g + u * (b.g - a.g), a.b + u * (b.b - a.b)};
}

plot_color plot_series_color(int i) {
    static const uint32_t okabe_ito[] = {0x0072b2, 0xd55e00, 0x009e73, 0xcc79a7,
                                         0xe69f00, 0x56b4e9, 0x000000, 0xf0e442};
    return hex(okabe_ito[((i % 8) + 8) % 8]);
}

plot_marker plot_series_marker(int i) { return (plot_marker)(1 + ((i % 4) + 4) % 4); }

/* ---- figures --------------------------------------------------------------------------------- */

typedef enum { KIND_PDF, KIND_SVG, KIND_PNG, KIND_WRAP } kind;

struct plot_figure {
    cairo_surface_t *surface;
    cairo_t *cr;
    kind k;
    double w, h, dpi;
    char path[1024], tmp[1100];
    cairo_matrix_t base, base_inv;  /* the figure's points -> device, and back */
    plot_box *boxes;                /* every drawn string's ink box, in figure points */
    int n_boxes, cap_boxes;
    FILE *fp;      /* PDF/SVG: the temporary, written by cairo through stream_write */
    int write_err; /* errno of the first failed write or close, 0 if none */
};

/* The current transformation as the figure's own coordinates (text is kept inside them). */
static void base_set(plot_figure *f) {
    cairo_get_matrix(f->cr, &f->base);
    f->base_inv = f->base;
    if (cairo_matrix_invert(&f->base_inv) != CAIRO_STATUS_SUCCESS) cairo_matrix_init_identity(&f->base_inv);
}

/* Why our own stream: cairo's file output did not report every failed write (a PDF on a full
 * disk came out truncated with a success status); here every fwrite, the flush, the fsync and
 * the close are checked. */
static cairo_status_t stream_write(void *closure, const unsigned char *data, unsigned int length) {
    struct plot_figure *f = closure;
    if (!f->write_err && fwrite(data, 1, length, f->fp) != length) f->write_err = errno ? errno : EIO;
    return f->write_err ? CAIRO_STATUS_WRITE_ERROR : CAIRO_STATUS_SUCCESS;
}

/* Closes the temporary; 0, or the errno of the first failure. */
static int stream_close(struct plot_figure *f) {
    if (!f->fp) return f->write_err;
    if (!f->write_err && (fflush(f->fp) != 0 || fsync(fileno(f->fp)) != 0)) f->write_err = errno ? errno : EIO;
    if (fclose(f->fp) != 0 && !f->write_err) f->write_err = errno ? errno : EIO;
    f->fp = NULL;
    return f->write_err;
}

/* Files are written under PATH.tmpPID and renamed into place only once complete. */
static void tmp_name(char *out, size_t n, const char *path) {
    snprintf(out, n, "%s.tmp%ld", path, (long)getpid());
}

static as_status move_into_place(const char *tmp, const char *path, const char *what, as_error *err) {
    if (rename(tmp, path) == 0) return AS_OK;
    int e = errno;
    remove(tmp);
    return as_fail(err, AS_ERR_IO, "%s: cannot move the %s into place (%s)", path, what, strerror(e));
}

as_status plot_figure_begin(plot_figure **out, const char *path, double width, double height,
                            double dpi, as_error *err) {
    *out = NULL;
    const char *ext = strrchr(path, '.');
    kind k;
    if (ext && strcmp(ext, ".pdf") == 0) k = KIND_PDF;
    else if (ext && strcmp(ext, ".svg") == 0) k = KIND_SVG;
    else if (ext && strcmp(ext, ".png") == 0) k = KIND_PNG;
    else return as_fail(err, AS_ERR_ARG, "%s: unknown figure format: end the name in .pdf, .svg or .png", path);
    if (!(width > 0 && height > 0 && width < 20000 && height < 20000))
        return as_fail(err, AS_ERR_ARG, "%s: figure size %.0f x %.0f points is out of range", path, width, height);
    if (k == KIND_PNG && !(dpi >= 10 && dpi <= 2400))
        return as_fail(err, AS_ERR_ARG, "%s: --dpi %g: give 10..2400", path, dpi);
    if (k == KIND_PNG) { /* cairo's image surfaces stop at 32767 pixels a side */
        const double px = ceil(width * dpi / 72), py = ceil(height * dpi / 72);
        if (px > 32767 || py > 32767)
            return as_fail(err, AS_ERR_ARG, "%s: a PNG of %.0f x %.0f points at %g dpi would be %.0f x %.0f pixels, "
                           "over the 32767 a side a PNG can have: lower --dpi or the size", path, width, height,
                           dpi, px, py);
    }
    plot_figure *f = calloc(1, sizeof *f);
    if (!f) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    f->k = k;
    f->w = width;
    f->h = height;
    f->dpi = dpi;
    snprintf(f->path, sizeof f->path, "%s", path);
    tmp_name(f->tmp, sizeof f->tmp, path);
    if (k != KIND_PNG && !(f->fp = fopen(f->tmp, "wbx"))) {
        as_status rc = as_fail(err, AS_ERR_IO, "%s: cannot create the figure (%s): check the folder "
                               "exists and is writable", path, strerror(errno));
        f->tmp[0] = 0;
        plot_figure_abort(f);
        return rc;
    }
    if (k == KIND_PDF) {
        f->surface = cairo_pdf_surface_create_for_stream(stream_write, f, width, height);
        cairo_pdf_surface_set_metadata(f->surface, CAIRO_PDF_METADATA_CREATOR, "attnscope");
    } else if (k == KIND_SVG) {
        f->surface = cairo_svg_surface_create_for_stream(stream_write, f, width, height);
        cairo_svg_surface_set_document_unit(f->surface, CAIRO_SVG_UNIT_PT);
    } else {
        f->surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)ceil(width * dpi / 72),
                                                (int)ceil(height * dpi / 72));
    }
    f->cr = cairo_create(f->surface);
    if (cairo_status(f->cr) != CAIRO_STATUS_SUCCESS) {
        as_status rc = k == KIND_PNG /* nothing is written before the end: the image itself failed */
            ? as_fail(err, AS_ERR_NOMEM, "%s: cannot make a %.0f x %.0f pixel image (%s): lower --dpi or the "
                      "size", path, ceil(width * dpi / 72), ceil(height * dpi / 72),
                      cairo_status_to_string(cairo_status(f->cr)))
            : as_fail(err, AS_ERR_IO, "%s: cannot create the figure (%s): check the folder exists and is "
                      "writable", path, cairo_status_to_string(cairo_status(f->cr)));
        plot_figure_abort(f);
        return rc;
    }
    if (k == KIND_PNG) cairo_scale(f->cr, dpi / 72, dpi / 72);
    base_set(f);
    cairo_set_source_rgb(f->cr, 1, 1, 1);
    cairo_paint(f->cr);
    cairo_select_font_face(f->cr, PLOT_FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    *out = f;
    return AS_OK;
}

plot_figure *plot_figure_wrap(cairo_t *cr, double width, double height) {
    plot_figure *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->k = KIND_WRAP;
    f->cr = cr;
    f->w = width;
    f->h = height;
    base_set(f);
    cairo_select_font_face(cr, PLOT_FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    return f;
}

as_status plot_write_png(cairo_surface_t *s, const char *path, as_error *err) {
    char tmp[1100];
    tmp_name(tmp, sizeof tmp, path);
    cairo_surface_flush(s);
    cairo_status_t st = cairo_surface_status(s);
    if (st == CAIRO_STATUS_SUCCESS) st = cairo_surface_write_to_png(s, tmp);
    if (st != CAIRO_STATUS_SUCCESS) {
        remove(tmp);
        return as_fail(err, AS_ERR_IO, "%s: writing the PNG failed (%s): check the folder exists, "
                       "is writable and has space", path, cairo_status_to_string(st));
    }
    return move_into_place(tmp, path, "PNG", err);
}

void plot_figure_abort(plot_figure *f) {
    if (!f) return;
    free(f->boxes);
    if (f->k == KIND_WRAP) { /* the caller's context: not ours to destroy */
        free(f);
        return;
    }
    if (f->cr) cairo_destroy(f->cr);
    if (f->surface) {
        cairo_surface_finish(f->surface);
        cairo_surface_destroy(f->surface);
    }
    stream_close(f);
    if (f->tmp[0]) remove(f->tmp);
    free(f);
}

as_status plot_figure_end(plot_figure *f, as_error *err) {
    cairo_status_t st = cairo_status(f->cr);
    if (st == CAIRO_STATUS_SUCCESS) {
        cairo_show_page(f->cr);
        if (f->k == KIND_PNG) st = cairo_surface_write_to_png(f->surface, f->tmp);
        cairo_surface_finish(f->surface);
        if (st == CAIRO_STATUS_SUCCESS) st = cairo_surface_status(f->surface);
    }
    int e = stream_close(f);
    as_status rc = AS_OK;
    if (e)
        rc = as_fail(err, AS_ERR_IO, "%s: writing failed (%s): free disk space or choose another "
                     "folder; nothing was written", f->path, strerror(e));
    else if (st != CAIRO_STATUS_SUCCESS)
        rc = as_fail(err, AS_ERR_IO, "%s: drawing or writing failed (%s; disk full?)", f->path,
                     cairo_status_to_string(st));
    else
        rc = move_into_place(f->tmp, f->path, "figure", err);
    plot_figure_abort(f); /* frees; the temporary is gone (renamed or removed) */
    return rc;
}

cairo_t *plot_cairo(plot_figure *f) { return f->cr; }
double plot_width(const plot_figure *f) { return f->w; }
double plot_height(const plot_figure *f) { return f->h; }

/* ---- text ------------------------------------------------------------------------------------ */

/* Every string goes through text_fit: measured with cairo, then shrunk (to 0.6 of its size or 5 pt at
 * most), shortened with an ellipsis and moved, in that order, until its ink lies inside the
 * given length and the canvas. So no recipe, size or window can clip a label; the boxes are
 * kept for tests (plot_text_boxes). */
#define TEXT_MIN_SCALE 0.6   /* shrinking stops at 0.6 x the size or TEXT_MIN_SIZE */
#define TEXT_MIN_SIZE 5.0    /* points: still legible in print */
#define TEXT_PAD 0.5         /* points kept clear at the canvas edge */

static double min_size(double size) { return fmin(size, fmax(size * TEXT_MIN_SCALE, TEXT_MIN_SIZE)); }

static void to_base(const plot_figure *f, double *x, double *y) {
    cairo_user_to_device(f->cr, x, y);
    cairo_matrix_transform_point(&f->base_inv, x, y);
}

static void box_add(plot_figure *f, plot_box b) {
    if (f->n_boxes == f->cap_boxes) {
        int cap = f->cap_boxes ? 2 * f->cap_boxes : 64;
        plot_box *m = realloc(f->boxes, (size_t)cap * sizeof *m);
        if (!m) return; /* the boxes are for checking only: drawing goes on */
        f->boxes = m;
        f->cap_boxes = cap;
    }
    f->boxes[f->n_boxes++] = b;
}

static double advance(cairo_t *cr, const char *s) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    return e.x_advance;
}

/* s shortened to fit maxw at the current font size: the end (or the middle, keeping both ends,
 * when middle is set) replaced by an ellipsis, cut at UTF-8 character boundaries. */
static void ellipsize(cairo_t *cr, const char *s, double maxw, int middle, char *out, size_t n) {
    size_t len = strlen(s);
    for (size_t keep = len; keep > 0; keep--) {
        size_t head = middle ? (keep + 1) / 2 : keep, tail = middle ? keep - head : 0;
        while (head > 0 && (s[head] & 0xc0) == 0x80) head--;          /* start of a character */
        const char *t = s + len - tail;
        while (tail > 0 && (*t & 0xc0) == 0x80) { t++; tail--; }
        snprintf(out, n, "%.*s\u2026%s", (int)head, s, t);
        if (advance(cr, out) <= maxw) return;
    }
    snprintf(out, n, "\u2026");
}

static double text_fit(plot_figure *f, double x, double y, double size, double align,
                       double maxw, int middle, const char *s) {
    if (!s || !s[0]) return 0;
    cairo_t *cr = f->cr;
    /* the canvas length along the baseline, in user units */
    double ox = x, oy = y, ux = x + 1, uy = y;
    to_base(f, &ox, &oy);
    to_base(f, &ux, &uy);
    double dx = ux - ox, dy = uy - oy, k = hypot(dx, dy);
    double lim = ((fabs(dx) >= fabs(dy) ? f->w : f->h) - 2 * TEXT_PAD) / (k > 0 ? k : 1);
    if (!(maxw > 0) || maxw > lim) maxw = lim;
    cairo_set_font_size(cr, size);
    double adv = advance(cr, s);
    char buf[1024];
    const char *t = s;
    if (adv > maxw) {
        /* hinted advances do not scale exactly with the size: step down until it fits */
        double lo = min_size(size);
        size = fmax(lo, size * maxw / adv);
        for (;;) {
            cairo_set_font_size(cr, size);
            if ((adv = advance(cr, s)) <= maxw || size <= lo) break;
            size = fmax(lo, size * 0.97);
        }
        if (adv > maxw) {
            ellipsize(cr, s, maxw, middle, buf, sizeof buf);
            t = buf;
            adv = advance(cr, t);
        }
    }
    cairo_text_extents_t e;
    cairo_text_extents(cr, t, &e);
    /* the ink box in base units, then the shift that brings it inside the canvas */
    double cx[4] = {x - align * adv + e.x_bearing, 0, 0, 0}, cy[4] = {y + e.y_bearing, 0, 0, 0};
    cx[1] = cx[0] + e.width; cy[1] = cy[0];
    cx[2] = cx[0]; cy[2] = cy[0] + e.height;
    cx[3] = cx[1]; cy[3] = cy[2];
    plot_box b = {INFINITY, INFINITY, -INFINITY, -INFINITY};
    for (int i = 0; i < 4; i++) {
        to_base(f, &cx[i], &cy[i]);
        b.x0 = fmin(b.x0, cx[i]);
        b.y0 = fmin(b.y0, cy[i]);
        b.x1 = fmax(b.x1, cx[i]);
        b.y1 = fmax(b.y1, cy[i]);
    }
    double sx = b.x0 < TEXT_PAD ? TEXT_PAD - b.x0 : b.x1 > f->w - TEXT_PAD ? f->w - TEXT_PAD - b.x1 : 0;
    double sy = b.y0 < TEXT_PAD ? TEXT_PAD - b.y0 : b.y1 > f->h - TEXT_PAD ? f->h - TEXT_PAD - b.y1 : 0;
    b = (plot_box){b.x0 + sx, b.y0 + sy, b.x1 + sx, b.y1 + sy};
    cairo_matrix_transform_distance(&f->base, &sx, &sy);
    cairo_device_to_user_distance(cr, &sx, &sy);
    cairo_move_to(cr, x - align * adv + sx, y + sy);
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_show_text(cr, t);
    if (e.width > 0) box_add(f, b);
    return adv;
}

void plot_text(plot_figure *f, double x, double y, double size, double align, const char *s) {
    text_fit(f, x, y, size, align, 0, 0, s);
}

void plot_text_fit(plot_figure *f, double x, double y, double size, double align, double maxw,
                   const char *s) {
    text_fit(f, x, y, size, align, maxw, 0, s);
}

/* Greedy line breaking at spaces; a word longer than a line gets a line of its own (and is
 * shrunk or shortened there). Draws when draw is set; returns the number of lines. */
int plot_text_wrap(plot_figure *f, double x, double y, double size, double align, double maxw,
                   int draw, const char *s) {
    cairo_set_font_size(f->cr, size);
    char line[1024];
    int lines = 0;
    const char *p = s;
    while (*p) {
        while (*p == ' ') p++;
        if (!*p) break;
        size_t n = 0, best = 0;
        for (;;) { /* extend word by word while the line fits */
            size_t end = n;
            while (p[end] == ' ') end++;
            while (p[end] && p[end] != ' ') end++;
            if (end == n) break;
            snprintf(line, sizeof line, "%.*s", (int)end, p);
            if (best > 0 && advance(f->cr, line) > maxw) break;
            best = n = end;
            if (!p[end]) break;
        }
        snprintf(line, sizeof line, "%.*s", (int)best, p);
        if (draw) text_fit(f, x, y + lines * size * 1.2, size, align, maxw, 0, line);
        cairo_set_font_size(f->cr, size);
        lines++;
        p += best;
    }
    return lines;
}

int plot_text_boxes(const plot_figure *f, const plot_box **boxes) {
    *boxes = f->boxes;
    return f->n_boxes;
}

static double text_width(plot_figure *f, double size, const char *s) {
    cairo_set_font_size(f->cr, size);
    return advance(f->cr, s);
}

static void text_vertical(plot_figure *f, double x, double y, double size, double maxw, const char *s) {
    cairo_save(f->cr);
    cairo_translate(f->cr, x, y);
    cairo_rotate(f->cr, -PLOT_PI / 2);
    text_fit(f, 0, 0, size, 0.5, maxw, 0, s);
    cairo_restore(f->cr);
}

/* ---- axes ------------------------------------------------------------------------------------ */

#define TICK_FONT 6.5
#define LABEL_FONT 7.5
#define TITLE_FONT 8.0

plot_axes plot_axes_grid(const plot_figure *f, int col, int row, int cols, int rows, double right_pad) {
    const double left = 38, bottom = 26, top = 14, right = 6 + right_pad;
    double cw = f->w / cols, ch = f->h / rows;
    plot_axes a;
    memset(&a, 0, sizeof a);
    a.x = col * cw + left;
    a.y = row * ch + top;
    a.w = cw - left - right;
    a.h = ch - top - bottom;
    if (a.w < 10) a.w = 10;
    if (a.h < 10) a.h = 10;
    a.xmin = a.ymin = 0;
    a.xmax = a.ymax = 1;
    a.xstep = a.ystep = 1;
    return a;
}

void plot_axes_range(plot_axes *a, double xmin, double xmax, double ymin, double ymax) {
    a->xmin = xmin;
    a->xmax = xmax > xmin ? xmax : xmin + 1;
    a->ymin = ymin;
    a->ymax = ymax > ymin ? ymax : ymin + 1;
}

static double nice_step(double range, int target) {
    double raw = range / target, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

void plot_nice_range(double *lo, double *hi) {
    if (!isfinite(*lo) || !isfinite(*hi)) {
        *lo = 0;
        *hi = 1;
        return;
    }
    if (*hi <= *lo) {
        double c = *lo;
        *lo = c - (fabs(c) > 0 ? fabs(c) * 0.1 : 0.5);
        *hi = c + (fabs(c) > 0 ? fabs(c) * 0.1 : 0.5);
    }
    double s = nice_step(*hi - *lo, 5);
    *lo = floor(*lo / s + 1e-9) * s;
    *hi = ceil(*hi / s - 1e-9) * s;
}

double plot_x(const plot_axes *a, double x) { return a->x + (x - a->xmin) / (a->xmax - a->xmin) * a->w; }
double plot_y(const plot_axes *a, double y) {
    double t = (y - a->ymin) / (a->ymax - a->ymin);
    return a->ydown ? a->y + t * a->h : a->y + a->h - t * a->h;
}

static void tick_label(char *buf, size_t n, double v, double step) {
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (fabs(v) < step * 1e-6) v = 0;
    if (fabs(v) >= 1e5 || (fabs(v) > 0 && fabs(v) < 1e-3)) snprintf(buf, n, "%.1e", v);
    else snprintf(buf, n, "%.*f", dec, v);
}

/* The rule for value axes and colour bars: a range that excludes 0 and spans less than a
 * quarter of its distance from 0 is a zoom, and is marked as one. */
static int range_zoomed(double lo, double hi) {
    if (!(hi > lo) || (lo <= 0 && hi >= 0)) return 0;
    return hi - lo < 0.25 * fmax(fabs(lo), fabs(hi));
}

int plot_axes_zoomed(const plot_axes *a) {
    return !a->ycat && !a->ydown && range_zoomed(a->ymin, a->ymax);
}

/* An axis break: a white gap with two slashes across a spine at (x, y), half-width r. */
static void break_mark(cairo_t *cr, double x, double y, double r) {
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_rectangle(cr, x - r, y - 1.2, 2 * r, 2.4);
    cairo_fill(cr);
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 0.6);
    for (int k = -1; k <= 1; k += 2) {
        cairo_move_to(cr, x - r - 0.5, y + k * 1.2 + 1.2);
        cairo_line_to(cr, x + r + 0.5, y + k * 1.2 - 1.2);
    }
    cairo_stroke(cr);
}

/* The zoom mark: a break across the value axis near its foot and the range in words. */
static void zoom_mark(plot_figure *f, const plot_axes *a, double step) {
    cairo_t *cr = f->cr;
    break_mark(cr, a->x, a->y + a->h - 5, 3);
    char lo[32], hi[32], note[96];
    tick_label(lo, sizeof lo, a->ymin, step);
    tick_label(hi, sizeof hi, a->ymax, step);
    snprintf(note, sizeof note, "zoomed: %s to %s, not from 0", lo, hi);
    double size = 5.5;
    if (text_width(f, size, note) > a->w - 8) snprintf(note, sizeof note, "zoomed, not from 0");
    double w = fmin(text_width(f, size, note), a->w - 8);
    cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
    cairo_rectangle(cr, a->x + 3, a->y + a->h - size - 4, w + 4, size + 2.5);
    cairo_fill(cr);
    text_fit(f, a->x + 5, a->y + a->h - 3.5, size, 0, a->w - 8, 0, note);
}

void plot_axes_draw(plot_figure *f, const plot_axes *a, const char *title, const char *xlabel,
                    const char *ylabel) {
    cairo_t *cr = f->cr;
    char buf[64];
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 0.6);
    cairo_rectangle(cr, a->x, a->y, a->w, a->h);
    cairo_stroke(cr);
    /* x ticks */
    double maxw = 0;
    if (a->xcat) {
        for (int i = (int)ceil(a->xmin); i <= (int)floor(a->xmax); i += a->xstep) {
            double px = plot_x(a, i);
            cairo_move_to(cr, px, a->y + a->h);
            cairo_line_to(cr, px, a->y + a->h + 2.5);
            cairo_stroke(cr);
            if (a->xlabels) snprintf(buf, sizeof buf, "%s", a->xlabels[i]);
            else snprintf(buf, sizeof buf, "%d", i);
            plot_text(f, px, a->y + a->h + 9, TICK_FONT, 0.5, buf);
        }
    } else {
        double s = nice_step(a->xmax - a->xmin, a->w > 150 ? 6 : 4);
        for (double v = ceil(a->xmin / s - 1e-9) * s; v <= a->xmax + s * 1e-9; v += s) {
            double px = plot_x(a, v);
            cairo_move_to(cr, px, a->y + a->h);
            cairo_line_to(cr, px, a->y + a->h + 2.5);
            cairo_stroke(cr);
            tick_label(buf, sizeof buf, v, s);
            plot_text(f, px, a->y + a->h + 9, TICK_FONT, 0.5, buf);
        }
    }
    /* y ticks */
    if (a->ycat) {
        for (int i = (int)ceil(a->ymin); i <= (int)floor(a->ymax); i += a->ystep) {
            double py = plot_y(a, i);
            cairo_move_to(cr, a->x, py);
            cairo_line_to(cr, a->x - 2.5, py);
            cairo_stroke(cr);
            if (a->ylabels) snprintf(buf, sizeof buf, "%s", a->ylabels[i]);
            else snprintf(buf, sizeof buf, "%d", i);
            maxw = fmax(maxw, text_width(f, TICK_FONT, buf));
            plot_text(f, a->x - 4, py + 2.2, TICK_FONT, 1, buf);
        }
    } else {
        double s = nice_step(a->ymax - a->ymin, a->h > 120 ? 5 : 3);
        for (double v = ceil(a->ymin / s - 1e-9) * s; v <= a->ymax + s * 1e-9; v += s) {
            double py = plot_y(a, v);
            cairo_move_to(cr, a->x, py);
            cairo_line_to(cr, a->x - 2.5, py);
            cairo_stroke(cr);
            tick_label(buf, sizeof buf, v, s);
            maxw = fmax(maxw, text_width(f, TICK_FONT, buf));
            plot_text(f, a->x - 4, py + 2.2, TICK_FONT, 1, buf);
        }
        if (plot_axes_zoomed(a)) zoom_mark(f, a, s);
    }
    /* labels may reach into the margins a little, never past the axes' neighbours */
    if (xlabel) text_fit(f, a->x + a->w / 2, a->y + a->h + 19, LABEL_FONT, 0.5, a->w + 20, 0, xlabel);
    if (ylabel) text_vertical(f, a->x - maxw - 9, a->y + a->h / 2, LABEL_FONT, a->h + 20, ylabel);
    if (title) text_fit(f, a->x + a->w / 2, a->y - 5, TITLE_FONT, 0.5, a->w + 30, 0, title);
}

/* ---- marks ----------------------------------------------------------------------------------- */

static void clip_to(plot_figure *f, const plot_axes *a) {
    cairo_save(f->cr);
    cairo_rectangle(f->cr, a->x, a->y, a->w, a->h);
    cairo_clip(f->cr);
}

static void marker(cairo_t *cr, plot_marker m, double x, double y, double r) {
    switch (m) {
    case PLOT_MARK_CIRCLE: cairo_new_sub_path(cr); cairo_arc(cr, x, y, r, 0, 2 * PLOT_PI); break;
    case PLOT_MARK_SQUARE: cairo_rectangle(cr, x - r * 0.9, y - r * 0.9, 1.8 * r, 1.8 * r); break;
    case PLOT_MARK_TRIANGLE:
        cairo_move_to(cr, x, y - 1.2 * r);
        cairo_line_to(cr, x + 1.1 * r, y + 0.8 * r);
        cairo_line_to(cr, x - 1.1 * r, y + 0.8 * r);
        cairo_close_path(cr);
        break;
    case PLOT_MARK_DIAMOND:
        cairo_move_to(cr, x, y - 1.3 * r);
        cairo_line_to(cr, x + r, y);
        cairo_line_to(cr, x, y + 1.3 * r);
        cairo_line_to(cr, x - r, y);
        cairo_close_path(cr);
        break;
    default: break;
    }
}

void plot_line(plot_figure *f, const plot_axes *a, const double *x, const double *y, int n,
               plot_color c, plot_marker m, const double *lo, const double *hi) {
    cairo_t *cr = f->cr;
    clip_to(f, a);
    if (lo && hi) { /* the band, one polygon per run of defined values */
        cairo_set_source_rgba(cr, c.r, c.g, c.b, 0.22);
        for (int i = 0; i < n;) {
            while (i < n && (isnan(lo[i]) || isnan(hi[i]))) i++;
            int j = i;
            while (j < n && !isnan(lo[j]) && !isnan(hi[j])) j++;
            if (j - i >= 2) {
                cairo_move_to(cr, plot_x(a, x[i]), plot_y(a, hi[i]));
                for (int k = i + 1; k < j; k++) cairo_line_to(cr, plot_x(a, x[k]), plot_y(a, hi[k]));
                for (int k = j - 1; k >= i; k--) cairo_line_to(cr, plot_x(a, x[k]), plot_y(a, lo[k]));
                cairo_close_path(cr);
                cairo_fill(cr);
            }
            i = j;
        }
    }
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
    cairo_set_line_width(cr, 1.1);
    int pen = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(y[i])) {
            pen = 0;
            continue;
        }
        if (pen) cairo_line_to(cr, plot_x(a, x[i]), plot_y(a, y[i]));
        else cairo_move_to(cr, plot_x(a, x[i]), plot_y(a, y[i]));
        pen = 1;
    }
    cairo_stroke(cr);
    cairo_restore(cr);
    if (m != PLOT_MARK_NONE) plot_scatter(f, a, x, y, n, c, m, 1.8);
}

void plot_scatter(plot_figure *f, const plot_axes *a, const double *x, const double *y, int n,
                  plot_color c, plot_marker m, double size) {
    cairo_t *cr = f->cr;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i]) || isnan(y[i])) continue;
        double px = plot_x(a, x[i]), py = plot_y(a, y[i]);
        if (px < a->x - 0.5 || px > a->x + a->w + 0.5 || py < a->y - 0.5 || py > a->y + a->h + 0.5) continue;
        marker(cr, m, px, py, size);
        cairo_set_source_rgb(cr, c.r, c.g, c.b);
        cairo_fill_preserve(cr);
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_set_line_width(cr, 0.35);
        cairo_stroke(cr);
    }
}

void plot_bars(plot_figure *f, const plot_axes *a, const double *v, const double *err, int n,
               int groups, const plot_color *colors) {
    cairo_t *cr = f->cr;
    clip_to(f, a);
    double bw = 0.8 / groups, base = a->ymin > 0 ? a->ymin : a->ymax < 0 ? a->ymax : 0;
    for (int i = 0; i < n; i++)
        for (int g = 0; g < groups; g++) {
            double val = v[i * groups + g];
            if (isnan(val)) continue;
            double x0 = plot_x(a, i - 0.4 + g * bw), x1 = plot_x(a, i - 0.4 + (g + 1) * bw);
            double y0 = plot_y(a, base), y1 = plot_y(a, val);
            cairo_rectangle(cr, x0, fmin(y0, y1), x1 - x0, fabs(y1 - y0));
            cairo_set_source_rgb(cr, colors[g].r, colors[g].g, colors[g].b);
            cairo_fill(cr);
            if (err && !isnan(err[i * groups + g])) {
                double xm = (x0 + x1) / 2, e = err[i * groups + g];
                cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
                cairo_set_line_width(cr, 0.5);
                cairo_move_to(cr, xm, plot_y(a, val - e));
                cairo_line_to(cr, xm, plot_y(a, val + e));
                cairo_stroke(cr);
            }
        }
    cairo_restore(cr);
}

/* Draws an image surface of cols x rows cells into data rectangle [x0,x1] x [y0,y1] without
 * smoothing: crisp cells in PDF, SVG and PNG alike. */
static void paint_cells(plot_figure *f, cairo_surface_t *img, int cols, int rows, double px0,
                        double py0, double pw, double ph, double alpha) {
    cairo_t *cr = f->cr;
    cairo_save(cr);
    cairo_translate(cr, px0, py0);
    cairo_scale(cr, pw / cols, ph / rows);
    cairo_set_source_surface(cr, img, 0, 0);
    cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
    cairo_rectangle(cr, 0, 0, cols, rows);
    cairo_clip(cr);
    if (alpha < 1) cairo_paint_with_alpha(cr, alpha);
    else cairo_paint(cr);
    cairo_restore(cr);
}

static cairo_surface_t *cells_surface(const double *v, int rows, int cols, double vmin, double vmax,
                                      plot_cmap cm) {
    cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, cols, rows);
    if (cairo_surface_status(img) != CAIRO_STATUS_SUCCESS) return img;
    cairo_surface_flush(img);
    unsigned char *px = cairo_image_surface_get_data(img);
    int stride = cairo_image_surface_get_stride(img);
    double span = vmax > vmin ? vmax - vmin : 1;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            plot_color col = plot_cmap_color(cm, (v[(size_t)r * cols + c] - vmin) / span);
            uint32_t p = (uint32_t)lround(col.r * 255) << 16 | (uint32_t)lround(col.g * 255) << 8 |
                         (uint32_t)lround(col.b * 255);
            memcpy(px + (size_t)r * stride + 4 * (size_t)c, &p, 4);
        }
    cairo_surface_mark_dirty(img);
    return img;
}

void plot_heatmap(plot_figure *f, const plot_axes *a, const double *v, int rows, int cols,
                  double vmin, double vmax, plot_cmap cm) {
    cairo_surface_t *img = cells_surface(v, rows, cols, vmin, vmax, cm);
    double x0 = plot_x(a, -0.5), x1 = plot_x(a, cols - 0.5);
    double y0 = plot_y(a, -0.5), y1 = plot_y(a, rows - 0.5);
    paint_cells(f, img, cols, rows, x0, fmin(y0, y1), x1 - x0, fabs(y1 - y0), 1);
    cairo_surface_destroy(img);
}

void plot_colorbar(plot_figure *f, const plot_axes *a, double vmin, double vmax, plot_cmap cm,
                   const char *label) {
    plot_colorbar_ex(f, a, vmin, vmax, cm, label, NULL);
}

void plot_colorbar_ex(plot_figure *f, const plot_axes *a, double vmin, double vmax, plot_cmap cm,
                      const char *label, const plot_colorbar_extra *x) {
    cairo_t *cr = f->cr;
    const int n = 256;
    double v[256];
    for (int i = 0; i < n; i++) v[i] = vmax - (vmax - vmin) * i / (n - 1);
    cairo_surface_t *img = cells_surface(v, n, 1, vmin, vmax, cm);
    double bx = a->x + a->w + 7, w = 7;
    paint_cells(f, img, 1, n, bx, a->y, w, a->h, 1);
    cairo_surface_destroy(img);
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 0.5);
    cairo_rectangle(cr, bx, a->y, w, a->h);
    cairo_stroke(cr);
    double lo = vmin, hi = vmax, span = hi - lo > 0 ? hi - lo : 1, s = nice_step(span, 4), maxw = 0;
    int mark = x && x->has_mark && isfinite(x->mark) && x->mark >= lo - span * 1e-9 && x->mark <= hi + span * 1e-9;
    double my = mark ? a->y + a->h - (x->mark - lo) / span * a->h : 0;
    char buf[64];
    for (double t = ceil(lo / s - 1e-9) * s; t <= hi + s * 1e-9; t += s) {
        double py = a->y + a->h - (t - lo) / span * a->h;
        cairo_move_to(cr, bx + w, py);
        cairo_line_to(cr, bx + w + 2, py);
        cairo_stroke(cr);
        if (mark && fabs(py - my) < TICK_FONT * 1.15) continue; /* the mark's label goes there */
        tick_label(buf, sizeof buf, t, s);
        maxw = fmax(maxw, text_width(f, TICK_FONT, buf));
        plot_text(f, bx + w + 3.5, py + 2.2, TICK_FONT, 0, buf);
    }
    if (mark) { /* black under white: visible on the dark and the bright end of any map */
        for (int k = 0; k < 2; k++) {
            cairo_set_source_rgb(cr, k, k, k);
            cairo_set_line_width(cr, k ? 0.6 : 1.6);
            cairo_move_to(cr, bx - (k ? 1.5 : 2), my);
            cairo_line_to(cr, bx + w + (k ? 1.5 : 2.5), my);
            cairo_stroke(cr);
        }
        const char *ml = x->mark_label ? x->mark_label : "";
        maxw = fmax(maxw, text_width(f, TICK_FONT, ml));
        plot_text(f, bx + w + 3.5, my + 2.2, TICK_FONT, 0, ml);
    }
    char zl[192]; /* a zoomed scale says so in its label (the rule of plot_axes_zoomed) */
    if (range_zoomed(vmin, vmax)) {
        break_mark(cr, bx + w / 2, a->y + a->h - 5, w / 2 + 1);
        snprintf(zl, sizeof zl, "%s%szoomed, not from 0", label ? label : "", label ? ": " : "");
        label = zl;
    }
    if (label) {
        cairo_save(cr);
        cairo_translate(cr, bx + w + 6 + maxw + 4, a->y + a->h / 2);
        cairo_rotate(cr, PLOT_PI / 2);
        text_fit(f, 0, 0, LABEL_FONT, 0.5, a->h + 30, 0, label);
        cairo_restore(cr);
    }
}

void plot_image(plot_figure *f, const plot_axes *a, const uint8_t *rgb, int w, int h) {
    cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
    if (cairo_surface_status(img) == CAIRO_STATUS_SUCCESS) {
        cairo_surface_flush(img);
        unsigned char *px = cairo_image_surface_get_data(img);
        int stride = cairo_image_surface_get_stride(img);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                const uint8_t *s = rgb + ((size_t)y * w + x) * 3;
                uint32_t p = (uint32_t)s[0] << 16 | (uint32_t)s[1] << 8 | s[2];
                memcpy(px + (size_t)y * stride + 4 * (size_t)x, &p, 4);
            }
        cairo_surface_mark_dirty(img);
    }
    cairo_t *cr = f->cr;
    cairo_save(cr);
    cairo_translate(cr, a->x, a->y);
    cairo_scale(cr, a->w / w, a->h / h);
    cairo_set_source_surface(cr, img, 0, 0);
    cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_GOOD);
    /* smoothing samples beyond the edge: repeat the edge pixels there, not transparency
     * (which fades the border to the background) */
    cairo_pattern_set_extend(cairo_get_source(cr), CAIRO_EXTEND_PAD);
    cairo_rectangle(cr, 0, 0, w, h);
    cairo_clip(cr);
    cairo_paint(cr);
    cairo_restore(cr);
    cairo_surface_destroy(img);
}

void plot_overlay(plot_figure *f, const plot_axes *a, const double *map, int g, double vmin,
                  double vmax, plot_cmap cm, double alpha) {
    cairo_surface_t *img = cells_surface(map, g, g, vmin, vmax, cm);
    paint_cells(f, img, g, g, a->x, a->y, a->w, a->h, alpha);
    cairo_surface_destroy(img);
}

void plot_patch_grid(plot_figure *f, const plot_axes *a, int g, int highlight) {
    cairo_t *cr = f->cr;
    cairo_set_source_rgba(cr, 1, 1, 1, 0.35);
    cairo_set_line_width(cr, 0.25);
    for (int i = 1; i < g; i++) {
        cairo_move_to(cr, a->x + a->w * i / g, a->y);
        cairo_line_to(cr, a->x + a->w * i / g, a->y + a->h);
        cairo_move_to(cr, a->x, a->y + a->h * i / g);
        cairo_line_to(cr, a->x + a->w, a->y + a->h * i / g);
    }
    cairo_stroke(cr);
    if (highlight >= 0 && highlight < g * g) {
        cairo_set_source_rgb(cr, 1, 0.15, 0.1);
        cairo_set_line_width(cr, 1.0);
        cairo_rectangle(cr, a->x + a->w * (highlight % g) / g, a->y + a->h * (highlight / g) / g, a->w / g, a->h / g);
        cairo_stroke(cr);
    }
}

void plot_legend(plot_figure *f, const plot_axes *a, const char *const *names, int n,
                 const plot_color *colors, const plot_marker *marks, plot_legend_at where) {
    if (n <= 0) return;
    cairo_t *cr = f->cr;
    double tw = 0, lh = 9, fs = TICK_FONT;
    for (int i = 0; i < n; i++) tw = fmax(tw, text_width(f, fs, names[i]));
    /* the room there: labels shrink, then lose their middles (the ends tell files apart) */
    double room = (where == PLOT_LEGEND_OUTSIDE ? f->w - (a->x + a->w + 4) - 1 : a->w - 8) - 22;
    if (tw > room) {
        fs = fmax(min_size(fs), fs * room / tw);
        tw = fmin(tw * fs / TICK_FONT, fmax(room, 8));
    }
    double bw = tw + 22, bh = n * lh + 4;
    double x = where == PLOT_LEGEND_INSIDE_LEFT ? a->x + 4
             : where == PLOT_LEGEND_OUTSIDE ? a->x + a->w + 4 : a->x + a->w - bw - 4;
    double y = where == PLOT_LEGEND_OUTSIDE ? a->y : a->y + 4;
    cairo_rectangle(cr, x, y, bw, bh);
    cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.6, 0.6, 0.6);
    cairo_set_line_width(cr, 0.4);
    cairo_stroke(cr);
    for (int i = 0; i < n; i++) {
        double ly = y + 2 + lh * i + lh / 2;
        cairo_set_source_rgb(cr, colors[i].r, colors[i].g, colors[i].b);
        if (!marks) { /* bars: a swatch */
            cairo_rectangle(cr, x + 5, ly - 3, 8, 6);
            cairo_fill(cr);
        } else {
            cairo_set_line_width(cr, 1.1);
            cairo_move_to(cr, x + 3, ly);
            cairo_line_to(cr, x + 15, ly);
            cairo_stroke(cr);
        }
        if (marks && marks[i] != PLOT_MARK_NONE) {
            marker(cr, marks[i], x + 9, ly, 1.8);
            cairo_fill(cr);
        }
        text_fit(f, x + 18, ly + 2.3, fs, 0, tw + 0.01, 1, names[i]);
    }
}
