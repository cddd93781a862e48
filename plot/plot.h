/* plot.h: a small plotting module on cairo for paper figures (attnscope plot, experiments) and
 * the viewer. Sizes are in points (1/72 inch): a LaTeX single column is PLOT_COLUMN wide, a
 * double column PLOT_DOUBLE. PDF and SVG are vector with the font embedded; PNG is rendered at
 * the chosen DPI. Text is DejaVu Sans (Debian's fonts-dejavu-core), so figures look the same
 * everywhere.
 *
 * Usage:
 *     plot_figure *f;
 *     if (plot_figure_begin(&f, "fig.pdf", PLOT_COLUMN, 180, 300, &err) != AS_OK) ...
 *     plot_axes ax = plot_axes_at(f, 0, 0, 1, 1);        // the whole figure, with margins
 *     plot_axes_range(&ax, 0, 11, 0, 1);
 *     plot_axes_draw(f, &ax, "title", "layer", "ALS");
 *     plot_line(f, &ax, x, y, n, plot_series_color(0), PLOT_MARK_CIRCLE, lo, hi);
 *     return plot_figure_end(f, &err);                    // written atomically, status checked
 */
#ifndef AS_PLOT_H
#define AS_PLOT_H

#include <cairo.h>
#include <stdint.h>

#include "../core/status.h"

#define PLOT_COLUMN 243.0   /* points: a single LaTeX column (3.37 in) */
#define PLOT_DOUBLE 505.0   /* points: a double column / \textwidth (7.0 in) */
#define PLOT_FONT "DejaVu Sans"
#define PLOT_PI 3.14159265358979323846

typedef struct { double r, g, b; } plot_color;

typedef enum { PLOT_CMAP_VIRIDIS = 0, PLOT_CMAP_MAGMA, PLOT_CMAP_DIVERGING, PLOT_CMAP_COUNT } plot_cmap;
/* The sequential colour map every command uses unless told otherwise (plot, experiment, demo,
 * view): matplotlib's default, perceptually uniform and colour-blind safe. */
#define PLOT_CMAP_DEFAULT PLOT_CMAP_VIRIDIS
typedef enum { PLOT_MARK_NONE = 0, PLOT_MARK_CIRCLE, PLOT_MARK_SQUARE, PLOT_MARK_TRIANGLE,
               PLOT_MARK_DIAMOND, PLOT_MARK_COUNT } plot_marker;

const char *plot_cmap_name(plot_cmap c);
int plot_cmap_parse(const char *s);            /* -1 when unknown */
/* The colour of t in [0, 1] (clamped); NaN gives light grey. */
plot_color plot_cmap_color(plot_cmap c, double t);
/* Okabe-Ito, colour-blind safe; i wraps around. */
plot_color plot_series_color(int i);
plot_marker plot_series_marker(int i);

typedef struct plot_figure plot_figure;

/* Starts a figure of width x height points; the format comes from path's extension (.pdf,
 * .svg, .png); dpi matters for PNG only. */
as_status plot_figure_begin(plot_figure **f, const char *path, double width, double height,
                            double dpi, as_error *err);
/* Finishes, checks cairo's status, and moves the file into place; frees f either way. */
as_status plot_figure_end(plot_figure *f, as_error *err);
/* Frees f and removes its temporary file without writing anything. */
void plot_figure_abort(plot_figure *f);
/* A figure drawing into the caller's cairo context (the viewer's window): width x height in
 * the context's user units. Free with plot_figure_abort, which leaves cr alone. NULL when out
 * of memory. */
plot_figure *plot_figure_wrap(cairo_t *cr, double width, double height);
/* Writes an image surface as PNG under a temporary name and renames it into place. */
as_status plot_write_png(cairo_surface_t *s, const char *path, as_error *err);
cairo_t *plot_cairo(plot_figure *f);
double plot_width(const plot_figure *f);
double plot_height(const plot_figure *f);

/* Axes: a data rectangle placed on the figure. */
typedef struct {
    double x, y, w, h;              /* the plotting area in points (y downwards) */
    double xmin, xmax, ymin, ymax;  /* data range */
    int xcat, ycat;                 /* categorical: ticks at integers with labels */
    const char *const *xlabels;     /* categorical labels (or NULL: the integers) */
    const char *const *ylabels;
    int xstep, ystep;               /* categorical: label every n-th */
    int ydown;                      /* heatmaps: row 0 at the top */
} plot_axes;

/* Cell (col, row) of a cols x rows grid of axes on the figure, leaving room for tick labels,
 * axis labels and a title; right_pad extra points on the right (a colour bar). */
plot_axes plot_axes_grid(const plot_figure *f, int col, int row, int cols, int rows, double right_pad);
void plot_axes_range(plot_axes *a, double xmin, double xmax, double ymin, double ymax);
/* Extends [lo, hi] to nice tick values (1, 2, 5 x 10^k). */
void plot_nice_range(double *lo, double *hi);
/* Whether a's value (y) axis is zoomed: its range excludes 0 and spans less than a quarter of
 * its distance from 0 (0.994-1.000 stretched over the whole plot). plot_axes_draw marks such an
 * axis with a break on the spine and says "zoomed: LO to HI, not from 0" inside the axes, so
 * small differences are never shown as large ones unannounced. */
int plot_axes_zoomed(const plot_axes *a);
/* Frame, ticks with labels, axis labels and title (any may be NULL). */
void plot_axes_draw(plot_figure *f, const plot_axes *a, const char *title, const char *xlabel,
                    const char *ylabel);
double plot_x(const plot_axes *a, double x);  /* data -> figure points */
double plot_y(const plot_axes *a, double y);

/* A line through (x, y) with markers; lo/hi (may be NULL) draw a shaded band. NaN breaks the
 * line. */
void plot_line(plot_figure *f, const plot_axes *a, const double *x, const double *y, int n,
               plot_color c, plot_marker m, const double *lo, const double *hi);
/* Points only. */
void plot_scatter(plot_figure *f, const plot_axes *a, const double *x, const double *y, int n,
                  plot_color c, plot_marker m, double size);
/* Grouped bars: bar g of group i at x = i, heights v[i * groups + g]; err (may be NULL) draws
 * whiskers. */
void plot_bars(plot_figure *f, const plot_axes *a, const double *v, const double *err, int n,
               int groups, const plot_color *colors);
/* rows x cols values as cells, row 0 at the top; vmin/vmax map to the ends of the colour map. */
void plot_heatmap(plot_figure *f, const plot_axes *a, const double *v, int rows, int cols,
                  double vmin, double vmax, plot_cmap cm);
/* A vertical colour bar right of a with its label; a zoomed range (plot_axes_zoomed's rule)
 * gets a break at its foot and "zoomed, not from 0" in its label. */
void plot_colorbar(plot_figure *f, const plot_axes *a, double vmin, double vmax, plot_cmap cm,
                   const char *label);
/* Extras of a colour bar (zero-initialise, then set what is wanted). */
typedef struct {
    int has_mark;             /* draw a marked level: a line across the bar, labelled in the
                                 tick column (numeric ticks that would collide are left out) */
    double mark;              /* in the bar's units (the uniform attention 1/T) */
    const char *mark_label;   /* "1/T" */
} plot_colorbar_extra;
/* plot_colorbar with extras (x may be NULL: plot_colorbar). */
void plot_colorbar_ex(plot_figure *f, const plot_axes *a, double vmin, double vmax, plot_cmap cm,
                      const char *label, const plot_colorbar_extra *x);
/* An RGB image (h x w x 3) filling a. */
void plot_image(plot_figure *f, const plot_axes *a, const uint8_t *rgb, int w, int h);
/* A g x g map over a (patches), alpha in [0, 1]; and the patch grid lines. */
void plot_overlay(plot_figure *f, const plot_axes *a, const double *map, int g, double vmin,
                  double vmax, plot_cmap cm, double alpha);
void plot_patch_grid(plot_figure *f, const plot_axes *a, int g, int highlight);
typedef enum { PLOT_LEGEND_INSIDE_RIGHT = 0, PLOT_LEGEND_INSIDE_LEFT, PLOT_LEGEND_OUTSIDE } plot_legend_at;
/* A legend box in a's top-right or top-left corner, or outside right of a (leave room with
 * plot_axes_grid's right_pad: PLOT_LEGEND_PAD). */
void plot_legend(plot_figure *f, const plot_axes *a, const char *const *names, int n,
                 const plot_color *colors, const plot_marker *marks, plot_legend_at where);
#define PLOT_LEGEND_PAD 62.0
/* Text: align 0 left, 0.5 centre, 1 right; size in points. Every string is measured and kept
 * whole inside the canvas: moved in when it would cross an edge, shrunk (to 0.6 of size or
 * 5 pt at most) and then shortened with an ellipsis when it is longer than the canvas allows. */
void plot_text(plot_figure *f, double x, double y, double size, double align, const char *s);
/* The same, no longer than maxw points along its baseline. */
void plot_text_fit(plot_figure *f, double x, double y, double size, double align, double maxw,
                   const char *s);
/* s broken at spaces into lines of at most maxw points, 1.2 x size apart, the first baseline at
 * y; draws only when draw is set (0: measure for a layout). Returns the number of lines. */
int plot_text_wrap(plot_figure *f, double x, double y, double size, double align, double maxw,
                   int draw, const char *s);
/* The ink box of every string drawn so far, in figure points (for tests: all lie inside). */
typedef struct { double x0, y0, x1, y1; } plot_box;
int plot_text_boxes(const plot_figure *f, const plot_box **boxes);

#endif
