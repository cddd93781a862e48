/* figures.h: named figure recipes over traces and analysis results (attnscope plot). Each recipe
 * is one file plot/fig_NAME.c defining a figure_recipe plus one line in figures.c. */
#ifndef AS_FIGURES_H
#define AS_FIGURES_H

#include "../core/status.h"
#include "../io/trace.h"
#include "plot.h"

#define FIG_MAX_SOURCES 8

/* One input: a trace (maps, images, and its /analysis) or an analyze --out results file. */
typedef struct {
    char path[1024];
    char label[128];          /* legend entry: --labels, else the model name, else the file name */
    int64_t file;             /* hid_t of the file given (the trace's own handle for a trace) */
    int64_t results;          /* hid_t of its analysis results (analysis_results_open), or -1 */
    int is_trace;
    trace_reader tr;          /* when is_trace */
} fig_source;

typedef struct {
    int layer, head, image, query;  /* -1: the recipe's default */
    const char *definition;         /* similarity: deepvit, row (default) or map */
    plot_cmap cmap;
    int cmap_set;
    double width, height, dpi;      /* 0: the recipe's default size; dpi for PNG */
    int n_sources;
    fig_source src[FIG_MAX_SOURCES];
} fig_opts;

typedef struct {
    const char *name;
    const char *mirrors;      /* the paper figure it reproduces */
    const char *needs;        /* what the inputs must hold */
    const char *summary;
    const char *metric;       /* the analysis behind it (NULL: recorded data only) */
    double width, height;     /* default size in points */
    int max_sources;          /* 1, or several models on one figure */
    /* Optional: whether the figure can be drawn from this input at all (NULL: always). */
    int (*applies)(const fig_source *s);
    as_status (*draw)(plot_figure *f, const fig_opts *o, as_error *err);
} figure_recipe;

int figure_count(void);
const figure_recipe *figure_get(int i);
const figure_recipe *figure_find(const char *name);

/* Opens a trace or results file as a source; closes it. */
as_status fig_source_open(fig_source *s, const char *path, const char *label, as_error *err);
void fig_source_close(fig_source *s);
/* Renders recipe r from o into path (format from the extension). */
as_status figure_render(const figure_recipe *r, const fig_opts *o, const char *path, as_error *err);

/* ---- for the recipes ------------------------------------------------------------------------ */

/* analysis/METRIC/OUTPUT/WHAT ("mean", "ci95_low", "per_image", ...) as doubles; *dims and *nd
 * receive the shape. Missing: an error naming the analyze command that provides it. */
as_status fig_read(const fig_source *s, const char *metric, const char *output, const char *what,
                   double **data, long *dims, int *nd, as_error *err);
/* Any dataset of the file as doubles (the trace's params/, ...); what names the fix. */
as_status fig_read_any(const fig_source *s, const char *name, const char *what, double **data,
                       long *dims, int *nd, as_error *err);
/* A derived result analysis/METRIC/NAME. */
as_status fig_read_derived(const fig_source *s, const char *metric, const char *name,
                           double **data, long *dims, int *nd, as_error *err);
/* Integer label attribute of analysis/METRIC/OUTPUT ("layer", "head"); returns the count. */
int fig_labels(const fig_source *s, const char *metric, const char *output, const char *axis,
               int *out, int max);
/* Float label attribute ("threshold"); returns the count. */
int fig_label_doubles(const fig_source *s, const char *metric, const char *output,
                      const char *axis, double *out, int max);
/* The source must be a trace (maps and images). */
as_status fig_need_trace(const fig_source *s, const char *recipe, as_error *err);
/* The preprocessed input image (S x S x 3) of a trace; malloc'ed. */
as_status fig_read_rgb(const fig_source *s, long image, uint8_t **rgb, int *size, as_error *err);
/* A labelled heatmap panel: rows x cols values, row 0 at the top, with a colour bar.
 * row_ids/col_ids label the ticks (NULL: 0..n-1). */
void fig_heatmap(plot_figure *f, plot_axes *a, const double *v, int rows, int cols,
                 const int *row_ids, const int *col_ids, double vmin, double vmax, plot_cmap cm,
                 const char *title, const char *xlabel, const char *ylabel, const char *cbar);
/* One curve per source over the layers: analysis/METRIC/OUTPUT mean (row `row` of its first
 * axis when row >= 0), with the 95% interval as a band when band is set; derived: a derived
 * dataset (no band). ylo/yhi NaN: fit the data. legend: one entry per source outside right
 * when there are several. */
as_status fig_layer_curves(plot_figure *f, plot_axes *a, const fig_opts *o, const char *metric,
                           const char *output, int derived, int row, int band, double ylo,
                           double yhi, const char *title, const char *ylabel, int legend,
                           as_error *err);
/* The similarity definition of o (--definition; default row) as its index, or -1 with err
 * filled for an unknown name. */
int fig_definition(const fig_opts *o, as_error *err);
/* The query token of o (default: the first prefix token, else the centre patch). */
int fig_query(const fig_opts *o, const fig_source *s);
/* Image `image` of a trace with the query's attention (layer, head) over it, the patch grid
 * and the query patch outlined; a colour bar when colorbar is set (fig_attention.c). */
as_status fig_attention_panel(plot_figure *f, plot_axes *a, const fig_source *s, int layer,
                              int head, long image, int query, const uint8_t *rgb, int S,
                              int colorbar, const char *title, as_error *err);
/* Min and max over the non-NaN values. */
void fig_range(const double *v, size_t n, double *lo, double *hi);

#endif
