/* figures.h: named figure recipes over traces and analysis results (attnscope plot). Each recipe
 * is one file plot/fig_NAME.c defining a figure_recipe plus one line in figures.c. */
#ifndef AS_FIGURES_H
#define AS_FIGURES_H

#include "../core/status.h"
#include "../io/trace.h"
#include "mapscale.h"
#include "plot.h"

#define FIG_MAX_SOURCES 8

/* One input: a trace (maps, images, and its /analysis) or an analyze --out results file. */
typedef struct {
    char path[1024];
    char label[128];          /* legend entry: --labels, else the model name, else the file name
                                 (figure_draw makes equal ones distinct: fig_sources_distinct) */
    int label_given;          /* label came from the caller (--labels) */
    int64_t file;             /* hid_t of the file given (the trace's own handle for a trace) */
    int64_t results;          /* hid_t of its analysis results (analysis_results_open), or -1 */
    int is_trace;
    trace_reader tr;          /* when is_trace */
} fig_source;

typedef struct {
    int layer, head, image, query;  /* -1: the recipe's default */
    const char *definition;         /* similarity: deepvit, row or map (default: the recipe's) */
    plot_cmap cmap;
    int cmap_set;
    mapscale_range range;           /* attention maps over the image: MAPSCALE_ZERO (default) */
    int range_set, labels_set, dpi_set; /* given by the user: refused where a recipe ignores them */
    double width, height, dpi;      /* 0: the recipe's default size; dpi for PNG */
    int n_sources;
    fig_source src[FIG_MAX_SOURCES];
} fig_opts;

/* The per-figure options a recipe uses (figure_recipe.options); figure_render refuses any other
 * that was given, with its name. --width/--height/--column/--double apply to every figure,
 * --dpi to PNG output. */
enum {
    FIG_OPT_LAYER = 1 << 0, FIG_OPT_HEAD = 1 << 1, FIG_OPT_IMAGE = 1 << 2, FIG_OPT_QUERY = 1 << 3,
    FIG_OPT_DEFINITION = 1 << 4, FIG_OPT_CMAP = 1 << 5, FIG_OPT_RANGE = 1 << 6,
    FIG_OPT_LABELS = 1 << 7
};

/* What a recipe can draw from (figure_recipe.traces): single-grid traces (ViT/DeiT, format 1
 * and 2) and their results, and/or staged traces (format 3: stages, windows); figure_render
 * refuses the others in one line. */
enum { FIG_TRACES_SINGLE_GRID = 1, FIG_TRACES_STAGED = 2 };

typedef struct {
    const char *name;
    unsigned options;         /* FIG_OPT_* it uses */
    const char *mirrors;      /* the paper figure it reproduces */
    const char *needs;        /* what the inputs must hold */
    const char *summary;
    const char *metric;       /* the analysis behind it (NULL: recorded data only) */
    const char *definition;   /* similarity recipes: the paper's definition, the default of
                                 --definition (NULL: ANALYSIS_DEFAULT_DEFINITION, row) */
    double width, height;     /* default size in points */
    int max_sources;          /* 1, or several models on one figure */
    unsigned traces;          /* the traces it draws from: FIG_TRACES_* (every recipe says) */
    /* Optional: the default height for this width and input (NULL: height). */
    double (*height_for)(const fig_opts *o, double width);
    /* Optional: whether the figure can be drawn from this input at all (NULL: always). */
    int (*applies)(const fig_source *s);
    as_status (*draw)(plot_figure *f, const fig_opts *o, as_error *err);
} figure_recipe;

int figure_count(void);
/* The options recipe r takes, as "--layer, --head, ..." ("" when none). */
void figure_options_text(const figure_recipe *r, char *buf, size_t n);
const figure_recipe *figure_get(int i);
const figure_recipe *figure_find(const char *name);

/* Opens a trace or results file as a source; closes it. */
as_status fig_source_open(fig_source *s, const char *path, const char *label, as_error *err);
void fig_source_close(fig_source *s);
/* Refuses, before any input is opened, every option in o that recipe r does not use (naming
 * it and the ones r takes), a --definition r does not know, and --dpi for a path that is not a
 * PNG (path NULL: no file). attnscope experiment checks its figures with it before it runs. */
as_status figure_check_options(const figure_recipe *r, const fig_opts *o, const char *path, as_error *err);
/* Renders recipe r from o into path (format from the extension). */
as_status figure_render(const figure_recipe *r, const fig_opts *o, const char *path, as_error *err);
/* Draws recipe r from o into f (figure_render without the file: tests inspect f afterwards). */
as_status figure_draw(const figure_recipe *r, const fig_opts *o, plot_figure *f, as_error *err);
/* The size recipe r draws o at by default (o's width and height where set). */
void figure_size(const figure_recipe *r, const fig_opts *o, double *width, double *height);
/* Legend labels that tell the inputs apart: inputs whose labels are equal (two traces of one
 * model, files of one name in different folders) are named by the shortest whole-word part of
 * their paths that differs ("epoch-000", "epoch-012"). Labels the caller gave stay as given. */
void fig_sources_distinct(fig_source *src, int n);

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
/* White lines across a heatmap drawn by fig_heatmap (axes a) between rows (and columns, when
 * col_stage is not NULL) of different stages: row_stage[i] is row i's stage (NULL: none). */
void fig_heatmap_stages(plot_figure *f, const plot_axes *a, const int *row_stage, int rows,
                        const int *col_stage, int cols);
/* One curve per source over the layers: analysis/METRIC/OUTPUT mean (row `row` of its first
 * axis when row >= 0), with the 95% interval as a band when band is set; derived: a derived
 * dataset (no band). ylo/yhi NaN: fit the data. legend: one entry per source outside right
 * when there are several. */
/* Depth and stages of the models on a figure against depth. fig_source_depth: the model's depth
 * (the results' model_depth, the trace's config, else the last recorded layer + 1);
 * fig_layer_stages: 1 and each layer-axis entry's stage for results of a staged trace (their
 * layer_stage), else 0; fig_relative_depth: 1 when the inputs' models differ in depth, so their
 * layers are drawn at layer / (depth - 1); fig_depth_x: each entry's x that way; fig_depth_axis:
 * the x range and ticks; fig_stage_bounds: a dashed line and "stage s" between stages. */
int fig_source_depth(const fig_source *s, const int *layers, int n);
int fig_layer_stages(const fig_source *s, int *stage, int n);
int fig_relative_depth(const fig_opts *o, int (*layers)[256], const int *n);
void fig_depth_x(const fig_source *s, const int *layers, int n, int relative, double *x);
void fig_depth_axis(plot_axes *a, int relative, double lmax, double ylo, double yhi);
void fig_stage_bounds(plot_figure *f, const plot_axes *a, const fig_source *s, const double *x, int n);
as_status fig_layer_curves(plot_figure *f, plot_axes *a, const fig_opts *o, const char *metric,
                           const char *output, int derived, int row, int band, double ylo,
                           double yhi, const char *title, const char *ylabel, int legend,
                           as_error *err);
/* The similarity definition of o (--definition; default r's, else row) as its index, or -1 with err
 * filled for an unknown name. */
int fig_definition(const fig_opts *o, const figure_recipe *r, as_error *err);
/* The query token of o (default: the first prefix token, else the centre patch). */
int fig_query(const fig_opts *o, const fig_source *s);
/* The sequential colour map of o: --cmap, else PLOT_CMAP_DEFAULT. */
plot_cmap fig_cmap(const fig_opts *o);
/* The scale the query's attention (layer, head) takes on its own by o's --range (mapscale.h).
 * Panels on one shared scale widen one of these by the others' (mapscale_widen): zero-based,
 * 0 .. the largest max(peak, 1/T); minmax, the union of their ranges (fig_attention.c). */
as_status fig_attention_scale(const fig_opts *o, const fig_source *s, int layer, int head,
                              long image, int query, mapscale *scale, as_error *err);
/* The height fig_attention_panel needs under its w-wide image for the note. */
double fig_attention_note_height(const fig_source *s, double w);
/* Image `image` of a trace with the query's attention (layer, head) over it, coloured by o's
 * --cmap and on shared's range (NULL: the map's own scale by --range), the patch grid and the
 * query patch outlined; a colour bar with the 1/T mark when colorbar is set; under the image
 * the map's own prefix share and peak over uniform (mapscale_note), for which a->h must leave
 * room: the image is a->w square at the top of a. scale (may be NULL) receives the map's own
 * scale. */
as_status fig_attention_panel(plot_figure *f, plot_axes *a, const fig_opts *o, const fig_source *s,
                              int layer, int head, long image, int query, const uint8_t *rgb,
                              int S, int colorbar, const mapscale *shared, const char *title,
                              mapscale *scale, as_error *err);
/* A staged trace (format 3): these two read the query as a point, the centre of cell --query
 * (default: the centre cell) of the first recorded layer's grid, and place each layer's row by
 * its own geometry (keymap.h): a window layer's keys over the query's window, every other token
 * washed out (exactly 0), the window outlined (a shifted window: its wrapped pieces); reduced
 * keys over the tokens they reduce; a class-attention layer's class row over the patches.
 * fig_staged_query: that cell (row-major; not checked against the grid); fig_staged_token: the
 * query's token on the grid of layer position li. */
int fig_staged_query(const fig_opts *o, const fig_source *s);
as_status fig_staged_token(const fig_opts *o, const fig_source *s, int li, int *token, as_error *err);
/* Min and max over the non-NaN values. */
void fig_range(const double *v, size_t n, double *lo, double *hi);

#endif
