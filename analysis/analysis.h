/* analysis.h: metrics over recorded traces (attnscope analyze). Each metric is one file in
 * analysis/ plus one line in registry.c; docs/analysis.md defines every number exactly.
 *
 * Usage:
 *     analysis_opts o;
 *     analysis_opts_default(&o);
 *     o.metrics = analysis_metric_mask("als,similarity", &err);   // 0 on a bad name
 *     analysis_report rep;
 *     if (analysis_run("run.h5", NULL, &o, &rep, &err) != AS_OK) ... // NULL: into run.analysis.h5
 *
 * The run streams the trace one batch of images at a time (the batch is --threads images), so
 * memory stays at about batch x one image's recorded data in float32, whatever the trace size.
 * Per image every metric produces its values in float64; the run keeps GSL running statistics
 * (mean, sample standard deviation, 95% t interval) per value, in image order, so results do
 * not depend on the thread count. */
#ifndef AS_ANALYSIS_H
#define AS_ANALYSIS_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/config.h"
#include "../core/status.h"

#define ANALYSIS_MAX_THRESHOLDS 16

#define ANALYSIS_MAX_GIVEN 24
typedef enum { ANALYSIS_FUSE_MEAN = 0, ANALYSIS_FUSE_MAX, ANALYSIS_FUSE_MIN } analysis_fusion;

/* The named choices where the papers leave a definition open (docs/analysis.md says which
 * setting reproduces which paper figure). Each metric declares its own in its file
 * (analysis_metric.choices); analysis_choice_get lists them all for the command line, and the
 * chosen value is part of every result's stored parameters. Values index the choice's names. */
typedef enum {
    ANALYSIS_CH_ALS_PREFIX = 0, /* als: prefix columns: exclude (neighbours only) | include (M of Eq. 3) */
    ANALYSIS_CH_ALS_ROWS,       /* als: rows not summing to 1: normalise | raw | refuse */
    ANALYSIS_CH_ALS_MAP,        /* als: attn (recorded map) | softmax (of the recorded scores) */
    ANALYSIS_CH_ALS_RULE,       /* als: which recommendation is printed: search | per-head */
    ANALYSIS_CH_DISTANCE,       /* distance: pixel (ViT) | centre (keras-io) */
    ANALYSIS_CH_QK_SCALE,       /* qk: q as the product sees it (scaled) | as projected (raw) */
    ANALYSIS_CH_DIAG_MAP,       /* diag: scores of less-attention layers | attn of every layer */
    ANALYSIS_CH_CKA_HSIC,       /* evolution: unbiased (Song et al. 2012) | biased (Kornblith) HSIC */
    ANALYSIS_CH_COUNT
} analysis_choice_id;

typedef struct {
    analysis_choice_id id;
    const char *option;          /* command-line option without "--" */
    const char *param;           /* its name in the stored parameters */
    const char *values[4];       /* names; the stored value is the index */
    int def;                     /* default index */
    const char *help;            /* one line per value and the default's reason, for --help */
} analysis_choice;

typedef struct analysis_opts {
    unsigned metrics;            /* bit i = registry entry i; 0 = every metric the trace supports */
    int explicit_metrics;        /* 1: the user named them, so one that cannot run is an error */
    int als_window;              /* R (odd); 0 (default): a masked head's own mask size, else 3 */
    double als_low, als_high;    /* mask-placement thresholds, default 0.35 / 0.65 */
    int n_thresholds;            /* Q/K magnitudes, default 0.1 0.5 1 2 */
    double thresholds[ANALYSIS_MAX_THRESHOLDS];
    analysis_fusion fusion;      /* rollout head fusion, default mean */
    double discard;              /* rollout discard ratio in [0, 1), default 0 */
    int entropy_normalize;       /* divide entropies by log T */
    int distance_renorm;         /* mean distance: renormalise over patch keys (default: drop prefix keys) */
    int choice[ANALYSIS_CH_COUNT]; /* analysis_choice values (analysis_opts_default: each default) */
    int cka_batch;               /* images per minibatch of the image-example CKA, default 8 */
    int per_image;               /* also store every image's values */
    int threads;                 /* images analysed at once; <= 0: all cores */
    const char *csv_dir;         /* NULL: no CSV */
    const char *command_line;
    int quiet;                   /* no notes on stderr */
    const char *who;             /* starts each note on stderr ("attnscope analyze"); NULL: "attnscope" */
    long max_images;             /* 0: all */
    FILE *report;                /* each metric's short summary (stdout in the CLI), or NULL */
    void (*progress)(void *ud, long done, long total);  /* or NULL */
    void *progress_ud;
    volatile sig_atomic_t *stop; /* set by a signal handler: stop, write nothing; or NULL */
    /* the options the user gave that belong to some metrics (analysis_opts_given): with
     * explicit_metrics, one whose metrics are all left out would do nothing and is refused */
    struct {
        char name[40];
        unsigned metrics;
    } given[ANALYSIS_MAX_GIVEN];
    int n_given;
} analysis_opts;

/* Notes that option NAME (without "--") was given and acts only in the metrics named in the
 * comma-separated list (registry names), for analysis_run's check. */
void analysis_opts_given(analysis_opts *o, const char *name, const char *metrics);
/* The same for one of the metrics' named choices: the metric that declares it. */
void analysis_choice_given(analysis_opts *o, const char *option);
/* 0 (err filled) when an option of analysis_opts_given belongs only to metrics that an explicit
 * --metrics leaves out. analysis_run checks it first. */
int analysis_opts_check_given(const analysis_opts *o, as_error *err);

typedef struct {
    long images;                 /* images analysed */
    int metrics_run, metrics_skipped;
    double seconds;
    double batch_bytes;          /* the working set of one batch (the memory bound) */
} analysis_report;

void analysis_opts_default(analysis_opts *o);
/* "als,similarity" (or "all") into a registry bit mask; 0 with err filled for an unknown name. */
unsigned analysis_metric_mask(const char *list, as_error *err);
/* The similarity metric's definitions, in the order of its definition axis: "deepvit", "row",
 * "map"; parse returns the index or -1. */
#define ANALYSIS_N_DEFINITIONS 3
const char *analysis_definition_name(int i);
int analysis_definition_parse(const char *s);
/* The root "format" attribute of an analyze --out results file. */
#define ANALYSIS_RESULTS_FORMAT "attnscope-analysis"

/* The rollout metric's arithmetic, for callers that roll out from any start vector (the
 * viewer). layers: attn[l] (H, T, T) per layer -> a (L, T, T): heads fused, the floor(discard
 * T^2) smallest entries chosen (ties by flat index) and all of them but [0,0] set to 0 (one
 * fewer when [0,0] is chosen, as vit-explain does), identity added, rows
 * renormalised; idx: T*T ints of scratch. rows: out (L, T) = e^T a_l ... a_0 for each l, with
 * e (T) the start vector; u, v: T doubles of scratch each. */
void analysis_rollout_layers(double *a, const float *const *attn, int L, int H, int T,
                             analysis_fusion fusion, double discard, int *idx);
void analysis_rollout_rows(double *out, const double *a, const double *e, int L, int T,
                           double *u, double *v);

/* The same on a staged trace (windows, merges, reduced keys, class attention; docs/analysis.md,
 * "Staged traces"), from any start vector (the viewer): new checks that the trace holds every
 * layer (depth) with every query row of every window and row-stochastic maps (the message names
 * the fix); per image, rowsums fills the first part of scratch (analysis_sroll_doubles) from
 * attn[k], layer k's recorded maps (H, P, Tq, Tk); row then writes out (layer 0's gh gw grid
 * tokens) = e^T a_l ... U a_k ... a_0 for e over layer l's T_l tokens (prefix first), which may
 * live in scratch's start slot (analysis_sroll_start: room for any layer's tokens). */
struct analysis_staged;
typedef struct analysis_sroll analysis_sroll;
as_status analysis_sroll_new(analysis_sroll **out, const struct analysis_staged *S, int depth,
                             analysis_fusion fusion, as_error *err);
size_t analysis_sroll_doubles(const analysis_sroll *R);
double *analysis_sroll_start(const analysis_sroll *R, double *scratch);
void analysis_sroll_rowsums(const analysis_sroll *R, const float *const *attn, double *scratch);
void analysis_sroll_row(const analysis_sroll *R, const float *const *attn, int l, const double *e, double *out,
                        double *scratch);
void analysis_sroll_free(analysis_sroll *R);

/* The similarity definition figures and the viewer use when none is named ("row"); recipes that
 * mirror a paper default to that paper's (docs/analysis.md). */
#define ANALYSIS_DEFAULT_DEFINITION 1

/* Every metric's choices, for --help and the command line; NULL past the end. */
const analysis_choice *analysis_choice_get(int i);
/* The choice's values as users type them, "a, b, c", into buf. */
void analysis_choice_values(const analysis_choice *c, char *buf, size_t n);
/* Sets --OPTION VALUE if OPTION is a choice; returns 1 when set, 0 when OPTION is not a choice,
 * -1 with err naming the values when VALUE is not one of them. */
int analysis_choice_set(analysis_opts *o, const char *option, const char *value, as_error *err);

/* The registry, for --help and docs. */
int analysis_metric_count(void);
const char *analysis_metric_name(int i);
const char *analysis_metric_summary(int i);

/* Analyses trace_path; results go to the trace's results file beside it (out_path NULL:
 * analysis_results_path) or into out_path (a new results file, or one written before: its other
 * metrics are kept). The trace is never written, and results appear only once complete. */
as_status analysis_run(const char *trace_path, const char *out_path, const analysis_opts *o,
                       analysis_report *rep, as_error *err);

/* The results file beside a trace: "run.h5" -> "run.analysis.h5" (else PATH.analysis.h5). */
void analysis_results_path(const char *trace, char *out, size_t n);
/* An HDF5 file id (hid_t) whose /analysis holds path's results, or -1: path itself when it is a
 * results file, else the results file beside the trace when it belongs to this trace, else the
 * trace (older attnscope stored results inside it). Close it with H5Fclose. */
int64_t analysis_results_open(const char *path);
/* The name of that file into out ("" when there is none). */
void analysis_results_where(const char *path, char *out, size_t n);

/* One line per metric stored under path's /analysis ("als v1, 16 images, DATE (params)") into
 * buf; returns how many there are (0 when none or unreadable). */
int analysis_list(const char *path, char *buf, size_t n);

/* The terminal summary stored with /analysis/METRIC of path; 0 when there is none. */
int analysis_report_text(const char *path, const char *metric, char *buf, size_t n);

#endif
