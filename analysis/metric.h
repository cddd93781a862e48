/* metric.h: what a metric is, for the files of analysis/ (not a public header).
 *
 * A metric is a descriptor: plan() checks that the trace holds what it needs and declares its
 * outputs (named arrays over named axes); image() turns one image's records into the values of
 * every output (float64, NaN where undefined); finish() may add derived results computed from
 * the means over images. image() runs on several images at once, so it writes only into vals
 * and its scratch. Adding a metric = one file defining an analysis_metric + one registry line. */
#ifndef AS_ANALYSIS_METRIC_H
#define AS_ANALYSIS_METRIC_H

#include <stddef.h>

#include "../core/config.h"
#include "../core/status.h"
#include "analysis.h"

struct analysis_staged; /* geometry.h */

/* What the trace holds, as the metrics see it. Positions index the recorded layers/heads. */
typedef struct {
    vit_config cfg;
    int n_layers, layers[VIT_MAX_DEPTH];   /* recorded layers (model indices), ascending */
    int n_heads, heads[1024];              /* recorded heads (model indices), ascending */
    int q_rows;                            /* query rows per map: T, or the prefix tokens */
    int tokens, prefix, grid, patches;     /* T, prefix tokens, patches per side, grid^2 */
    int patch_px;                          /* patch side in pixels */
    int dim;                               /* D */
    int qk_width[VIT_MAX_DEPTH];           /* q/k width per head per layer position, 0: none */
    unsigned quantities;                   /* bit (1 << trace_quantity) */
    long n_images;
    /* staged traces (format 3): every layer's own geometry (geometry.h), NULL for single-grid
     * ones. n_heads/heads are then the head axis (the most heads of a layer; a layer with fewer
     * is NaN beyond its own), tokens/prefix/q_rows/dim the first recorded layer's, grid/patches
     * the first recorded layer's grid (gw and gh * gw) */
    struct analysis_staged *staged;
    int n_stages;                          /* staged: the stage axis (0..n_stages-1) */
} analysis_layout;

/* One image's records as float32; NULL where the trace lacks them. */
typedef struct {
    long index;
    const float *attn[VIT_MAX_DEPTH];      /* per layer position: (n_heads, q_rows, tokens) */
    const float *scores[VIT_MAX_DEPTH];    /* (n_heads, q_rows, tokens) pre-softmax scores */
    const float *q[VIT_MAX_DEPTH];         /* (n_heads, tokens, qk_width) */
    const float *k[VIT_MAX_DEPTH];
    const float *tokens[VIT_MAX_DEPTH];    /* (tokens, dim) */
} analysis_image;

typedef enum {
    ANALYSIS_AX_LAYER = 0,  /* labels: recorded layer indices */
    ANALYSIS_AX_LAYER2,     /* the second layer of a pair */
    ANALYSIS_AX_HEAD,       /* recorded head indices */
    ANALYSIS_AX_THRESHOLD,  /* opts thresholds */
    ANALYSIS_AX_PATCH,      /* patch index, row-major over the grid */
    ANALYSIS_AX_DEFINITION, /* similarity definitions */
    ANALYSIS_AX_STAGE,      /* staged traces: stage indices */
    ANALYSIS_AX_COUNT
} analysis_axis;

#define ANALYSIS_MAX_DIMS 4
#define ANALYSIS_MAX_OUTPUTS 8

typedef struct {
    const char *name;        /* dataset group name under /analysis/METRIC */
    const char *description;
    const char *units;       /* "" for pure numbers */
    int ndims;
    int dims[ANALYSIS_MAX_DIMS];
    analysis_axis axes[ANALYSIS_MAX_DIMS];
    int keep_images;         /* always store per-image values (rollout maps) */
    size_t offset, count;    /* in the metric's value vector (set by analysis_output_add) */
    double *derived;         /* for derived results: the values (owned), no statistics */
} analysis_output;

typedef struct analysis_metric analysis_metric;

/* What a metric can read (analysis_metric.traces): single-grid traces (ViT/DeiT, format 1 and
 * 2), and/or staged ones (format 3: stages, windows); analyze refuses the others in one line. */
enum { ANALYSIS_TRACES_SINGLE_GRID = 1, ANALYSIS_TRACES_STAGED = 2 };

typedef struct {
    const analysis_metric *metric;
    const analysis_layout *lay;
    const analysis_opts *opt;
    int n_out;
    analysis_output out[ANALYSIS_MAX_OUTPUTS];
    size_t n_vals;           /* sum of the outputs' counts */
    int n_derived;
    analysis_output derived[ANALYSIS_MAX_OUTPUTS];
    size_t scratch_bytes;    /* per image in flight */
    size_t state_bytes;      /* plan(): what the metric holds across images (its minibatch) */
    char params[512];        /* "window=3; ..." stored with the results */
    char notes[1024];        /* what was skipped and why, for the user */
    char report[4096];       /* finish(): a few lines for the terminal (stored as an attribute) */
    void *state;             /* the metric's tables, freed by release() */
    unsigned needs;          /* plan(): quantities this run reads (the metric's needs by default) */
} analysis_ctx;

struct analysis_metric {
    const char *name;
    int version;             /* bumped whenever a number would change */
    const char *summary;     /* one line for --help */
    const char *definition;  /* stored with the results: the exact formula in words */
    unsigned needs;          /* quantities read per image: bit (1 << trace_quantity) */
    unsigned traces;         /* the traces it reads: ANALYSIS_TRACES_* (every metric says) */
    /* Checks the layout; declares outputs with analysis_output_add; fills params and notes.
     * AS_ERR_ARG (message in err) when the trace cannot support the metric. */
    as_status (*plan)(analysis_ctx *c, as_error *err);
    /* One image: vals (n_vals) receives every output; scratch holds scratch_bytes. */
    void (*image)(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch);
    /* Optional: called once per image in image order from one thread, after image(): for
     * statistics across images (the image-example CKA). May use c->state. */
    void (*accumulate)(analysis_ctx *c, const analysis_image *im);
    /* Optional: derived results from the means over images (mean, n_vals entries). */
    as_status (*finish)(analysis_ctx *c, const double *mean, as_error *err);
    void (*release)(analysis_ctx *c);   /* optional */
    const analysis_choice *choices;     /* the metric's named choices (analysis.h), or NULL */
    int n_choices;
    /* The metric on staged traces (format 3; .traces has ANALYSIS_TRACES_STAGED): a descriptor
     * with the same name and choices whose plan/image/finish read lay->staged's geometry. */
    const analysis_metric *staged;
};

/* "param=value; ..." of the metric's choices, appended to c->params. */
void analysis_params_choices(analysis_ctx *c);
/* The chosen value of choice id. */
static inline int analysis_choice_of(const analysis_ctx *c, analysis_choice_id id) {
    return c->opt->choice[id];
}

/* Declares an output of shape dims over axes; returns its index. */
int analysis_output_add(analysis_ctx *c, const char *name, const char *description,
                        const char *units, int ndims, const int *dims, const analysis_axis *axes);
/* Declares a derived result (no statistics); returns its values (zeroed) or NULL. */
double *analysis_derived_add(analysis_ctx *c, const char *name, const char *description,
                             const char *units, int ndims, const int *dims,
                             const analysis_axis *axes);
/* Appends "fmt" to c->notes ("; " separated). */
void analysis_note(analysis_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends "fmt" to c->report. */
void analysis_report_add(analysis_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Shared helpers over maps */
/* Layer position of model layer l, or -1. */
int analysis_layer_pos(const analysis_layout *lay, int l);
/* cos(a, b) in float64 over n floats; NaN when either is zero. */
double analysis_cosine(const float *a, const float *b, size_t n);
/* Patch token (r, c) -> token index. */
static inline int analysis_patch_token(const analysis_layout *lay, int r, int c) {
    return lay->prefix + r * lay->grid + c;
}

/* Inner loops (reduce.c), float64 sums in a fixed lane order: bit-identical everywhere. */
/* col[t] += a[t] b[t]; returns sum_t a[t] b[t] */
double analysis_rowdot(double *col, const float *a, const float *b, int n);
/* sum_t a[t] d[t]; *sum_a (if not NULL) receives sum_t a[t] */
double analysis_dot_fd(const float *a, const double *d, int n, double *sum_a);
/* sum over a[t] > 0 of a[t] log a[t]; *sum receives the sum of those a[t] */
double analysis_xlogx(const float *a, int n, double *sum);
/* sum_t |a[t] - b[t]| */
double analysis_absdiff(const float *a, const float *b, int n);
/* sum_t a[t] */
double analysis_sum(const float *a, int n);
/* 1 when any a[t] < 0 (a map that is not a probability row) */
int analysis_any_negative(const float *a, int n);
/* y += a x */
void analysis_axpy(double *y, double a, const double *x, int n);

/* Metrics defined on probability rows (als, distance). Declares the outputs negative_maps
 * (layer) and dropped_rows (layer, head) and returns the first's index; the second follows. */
int analysis_rows_outputs_add(analysis_ctx *c);
/* 1 when one of the layer's patch query rows (maps: n_heads x q_rows x tokens) has an entry < 0 */
int analysis_layer_negative(const analysis_layout *lay, const float *maps);
/* finish(): notes naming the layers left out for negative entries (with the fix) and the rows
 * dropped, from the means of those outputs (out: analysis_rows_outputs_add's index). */
void analysis_rows_note(analysis_ctx *c, const double *mean, int out, const char *fix);

/* The registry (registry.c) */
extern const analysis_metric analysis_metric_als, analysis_metric_similarity, analysis_metric_qk,
    analysis_metric_evolution, analysis_metric_distance, analysis_metric_entropy,
    analysis_metric_rollout, analysis_metric_diag;
const analysis_metric *analysis_metric_get(int i);

#endif
