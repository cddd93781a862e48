/* cli.h: the attnscope command line: subcommands and the helpers they share. */
#ifndef AS_CLI_H
#define AS_CLI_H

#include <stddef.h>

#include "../core/status.h"
#include "../io/dataset.h"
#include "../io/model.h"
#include "../io/trace.h"

/* subcommands: each returns the process exit code (0 ok, 1 failure, 2 usage) */
int cmd_record(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_experiment(int argc, char **argv);
/* Checks an experiment file's text (JSON, names, references) without running anything: the
 * fuzz entry point, and cmd_experiment's first step. file is for messages. */
as_status experiment_check(const char *text, const char *file, as_error *err);
int cmd_view(int argc, char **argv);
int cmd_train(int argc, char **argv);

/* "3", "0-11", "0,2,5-7" or "all" into ascending unique values < limit; returns the count or
 * -1 with err filled. what names the option in messages ("--layers"). */
int cli_parse_list(const char *s, int limit, int *out, int max_n, const char *what, as_error *err);
/* argv joined with spaces, for the trace's command_line attribute. */
void cli_command_line(int argc, char **argv, char *buf, size_t n);
double cli_now(void); /* monotonic seconds */
int cli_parse_int(const char *s, int lo, int hi, int *out);
/* mkdir -p; prints a one-line error and returns 1 when a folder cannot be made, else 0. */
int cli_make_dirs(const char *path);
/* Prints "attnscope: msg" on stderr; returns 1. */
int cli_error(const as_error *err);

/* progress line on a terminal (stderr), silent in pipes */
typedef struct {
    const char *what;
    long total, base;
    double t0, last;
    int tty;
} progress;
void progress_init(progress *p, const char *what, long total, long base);
void progress_update(progress *p, long done);
/* The same with a note after the ETA ("loss 0.41  acc 87%"). */
void progress_update_note(progress *p, long done, const char *note);
void progress_finish(progress *p);
/* For a library's progress hook (ud = a progress *): sets the total, then updates. */
void progress_callback(void *ud, long done, long total);

/* threads and OpenBLAS */
void runtime_set_threads(int n); /* n <= 0: all cores */
int runtime_threads(void);
/* The kernel OpenBLAS chose; *warn set with advice when it is not the CPU's best. */
void runtime_blas_info(char *core, size_t n, char *advice, size_t an, int *warn);
/* Measured SGEMM GFLOP/s at the model's largest GEMM shape class, all threads. */
double runtime_gemm_ceiling(int m, int n, int k, double seconds);

/* recording loop shared by record, demo and bench */
typedef struct {
    const char *out;
    trace_mode mode;
    trace_spec spec;  /* quantities, layers, heads, dtype, compression, batch */
    int quiet;        /* no summary lines (progress still follows the tty rule) */
    int max_images;   /* 0: all */
} record_opts;

typedef struct {
    long recorded;    /* images recorded by this run */
    long resumed;     /* images already in the trace */
    double seconds;   /* wall time of the loop */
    int complete;
} record_result;

/* Fills o->spec's selection from the --record/--layers/--heads/--dtype/--compress/--query-rows
 * strings; returns 0, or 2 (usage error) with err filled. */
int record_parse_selection(record_opts *o, const vit_config *c, const char *what,
                           const char *layers, const char *heads, const char *dtype,
                           const char *compress, const char *rows, as_error *err);
as_status record_run(const model *m, const dataset *ds, record_opts *o, record_result *res,
                     as_error *err);

/* training loop shared by train and demo (cmd_train.c; docs/training.md) */
typedef struct {
    const char *config;     /* architecture name or JSON config */
    const char *data;       /* traindata spec */
    const char *out;        /* checkpoint folder */
    int epochs, batch;
    float lr, min_lr, warmup_lr, warmup_epochs, weight_decay, clip, smoothing, dp_weight;
    float val_fraction;
    int crop_pad;           /* -1 none; -2 default (S / 8) */
    int flip;
    unsigned long long seed;
    int record_every, record_images; /* traces of held-out images every N epochs (0: none) */
    const char *record_what;         /* --record quantities of those traces */
    int resume, keep;       /* keep: newest epoch checkpoints kept (0: all) */
    int quiet;              /* no per-epoch lines (progress still follows the tty rule) */
    const char *command_line;
} train_opts;

typedef struct {
    int epochs_done;
    double train_loss, train_acc, val_loss, val_acc; /* of the last epoch */
    double seconds, img_per_s;                       /* training steps only */
    int n_train, n_val, n_classes;
    char checkpoint[1100];  /* the newest checkpoint folder */
    char last_trace[1100];  /* the newest trace, or "" */
    char heldout[1100];     /* the held-out images folder written for traces, or "" */
} train_result;

void train_opts_default(train_opts *o);
/* Returns AS_OK, AS_ERR_INTERRUPTED (a checkpoint was saved; --resume continues) or an error. */
as_status train_run(const train_opts *o, train_result *res, as_error *err);

/* synthetic inputs for the demo, tests and benchmarks */
as_status synth_write_images(const char *dir, int count, int size, unsigned long long seed,
                             as_error *err);
void synth_fill_image(unsigned char *rgb, int w, int h, int kind, unsigned long long seed);
as_status synth_save_png(const char *path, const unsigned char *rgb, int w, int h, as_error *err);

#endif
