/* cli.h: the attnscope command line: subcommands and the helpers they share. */
#ifndef AS_CLI_H
#define AS_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "../core/gemm.h"
#include "../core/status.h"
#include "../io/dataset.h"
#include "../io/model.h"
#include "../io/trace.h"
#include "../io/traindata.h"

/* subcommands: each returns the process exit code (0 ok, 1 failure, 2 usage) */
int cmd_record(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
/* Sets analyze's option NAME (its long name: "fusion", "als-window", a metric choice's
 * "als-prefix", ...) to ARG, NULL for a flag (--per-image). Returns 1 when set, 0 when NAME is
 * no such option or one of a run rather than of the analysis (metrics, out, csv, threads,
 * quiet: the caller's), -1 with a one-line message in err when ARG is not one of its values. */
struct analysis_opts;
int analyze_option(struct analysis_opts *o, const char *name, const char *arg, as_error *err);
/* The names analyze_option takes, comma-separated, into buf. */
void analyze_option_names(char *buf, size_t n);
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
/* Prints "attnscope CMD: msg" on stderr (CMD: the running command); returns 1. */
int cli_error(const as_error *err);

/* The command line's conventions (cli/opts.c). Each command describes its options in ONE table,
 * one line per option; the getopt_long array, --help, the hidden --list-options, "did you
 * mean" for misspellings and the one-line usage errors all come from it. Usage:
 *
 *     static const cli_opt opts[] = {
 *         // key  alias  name       ARG     values        default   help
 *         {'o', 'o', "out",    "FILE", NULL,          "required", "the trace to write"},
 *         {'d', 0,   "dtype",  "T",    "f16|f32",     "f16",      "storage precision"},
 *         {'f', 0,   "force",  NULL,   NULL,          NULL,       "overwrite an existing trace"},
 *         {0}};
 *     static const cli_cmd cmd = {"record", "--out FILE [options]", "Records ...", opts, NULL};
 *     int ch;
 *     optind = 1;
 *     while ((ch = cli_opts_next(&cmd, argc, argv)) >= 0)
 *         switch (ch) { case 'o': out = optarg; break; ... }
 *     if (ch != CLI_END) return cli_opts_exit(ch);   // --help printed: 0; usage error: 2
 *
 * key is what cli_opts_next returns (a letter or any number 1..0x6fff); alias is the short
 * form (-o), 0 for none; arg is the value's name, NULL for a flag; values the allowed values
 * or range as users type them; def the default as users would type it ("required" for one
 * that must be given; NULL for flags and options whose absence means "not done"). */
typedef struct {
    int key;
    char alias;
    const char *name, *arg, *values, *def, *help;
} cli_opt;

typedef struct {
    const char *name;   /* "record" */
    const char *usage;  /* the synopsis after "attnscope record " */
    const char *about;  /* what the command does, before the option table */
    const cli_opt *opts;/* ends with {0} */
    const char *notes;  /* after the option table, or NULL */
} cli_cmd;

enum { CLI_END = -1, CLI_HELP = -2, CLI_USAGE = -3 };

/* The next option's key (optarg holds its value), or CLI_END (optind: the first operand),
 * CLI_HELP (--help or --list-options printed) or CLI_USAGE (a one-line error printed). */
int cli_opts_next(const cli_cmd *cmd, int argc, char **argv);
/* For a table built at run time (analyze: its own options, then one per metric choice):
 * appends o to the {0}-terminated table of cap entries, which stays terminated; returns the
 * count. A table too small is a programmer error. */
int cli_opts_add(cli_opt *table, int cap, cli_opt o);
/* The exit code for a cli_opts_next result below 0 other than CLI_END: 0 or 2. */
int cli_opts_exit(int ch);
void cli_opts_help(const cli_cmd *cmd, FILE *f);
/* "attnscope CMD: WHAT is required: the option's help" for an option ("--out FILE"), else
 * "missing WHAT (usage: attnscope CMD SYNOPSIS)" (an operand: "TRACE.h5, the trace to
 * analyse"); returns 2. */
int cli_missing(const cli_cmd *cmd, const char *what);
/* "attnscope CMD: --NAME "VALUE": give VALUES" for the option with that key; returns 2. */
int cli_bad_value(const cli_cmd *cmd, int key, const char *value);
/* "attnscope CMD: unexpected argument "WORD"" (with the synopsis); returns 2. */
int cli_extra(const cli_cmd *cmd, const char *word);
#define CLI_XSTR(x) #x
#define CLI_STR(x) CLI_XSTR(x) /* a macro's value as a string literal, for tables */
/* Prints "attnscope CMD: " and the message on stderr; returns code. */
int cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The command error lines name (main sets it once, before running a command). */
void cli_set_command(const char *name);
/* The closest of n names to word when close enough to be a likely misspelling, else NULL. */
const char *cli_closest(const char *word, const char *const *names, int n);
/* Columns terminal output fits in: 100, or the terminal's width when that is narrower (stdout's
 * terminal, else COLUMNS, else stderr's terminal, as in `attnscope info x | less`). */
int cli_width(void);
int cli_width_of(int fd); /* the same for another stream (progress lines: stderr) */
/* text wrapped to cli_width() on f: the first line after `first` characters already printed,
 * the following ones indented by `indent` spaces; ends with a newline. */
void cli_wrap(FILE *f, int first, int indent, const char *text);
/* printf into a line, then cli_wrap(stdout, 0, indent, line) (a trailing newline is dropped). */
void cli_printf_wrap(int indent, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

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
void runtime_set_threads(int n); /* n <= 0: OMP_NUM_THREADS, else all cores */
int runtime_threads(void);
/* The kernel OpenBLAS chose; *warn set with advice when it is not the CPU's best. */
void runtime_blas_info(char *core, size_t n, char *advice, size_t an, int *warn);
/* What computed a result, for reproducibility: bit-identical results need the same OpenBLAS
 * kernels and thread count (README). Printed by record/train/demo/bench, stored in traces and
 * checkpoints. */
typedef struct {
    char core[64];      /* the kernel set OpenBLAS runs ("SkylakeX", "Haswell") */
    char config[256];   /* openblas_get_config(): version, build options */
    char forced[128];   /* "OPENBLAS_CORETYPE=Haswell" when the environment chose the kernels; "" */
    int threads;        /* OpenMP and OpenBLAS threads */
    int slow;           /* not the CPU's fastest kernels (advice says what to do) */
    char advice[512];
    char software[32];  /* "attnscope 0.1.0" */
    char gemm[288];      /* what the products run on (vit_gemm_name, runtime_info_for_model) */
} runtime_info;
void runtime_get_info(runtime_info *ri);
/* Sets ri->gemm to what the products of model c with params of this pack run on: the linear
 * layers, and the blocks whose attention runs fused (vit_attn_fused_blocks); a params without a
 * pack (training, models made in memory) runs them on OpenBLAS whatever ATTNSCOPE_GEMM says. */
void runtime_info_for_model(runtime_info *ri, const vit_config *c, const vit_gemm_pack *pack);
/* "OpenBLAS SkylakeX kernels, 2 threads" (with the forcing variable when one is set), after
 * "linear layers on oneDNN 2.6.3 matmul, prepacked weights; " when they run there. */
void runtime_describe(const runtime_info *ri, char *buf, size_t n);
/* One warning ("attnscope CMD: warning: ...", wrapped at 100 columns) on stderr when OpenBLAS
 * runs slower kernels than the CPU's best, forced by OPENBLAS_CORETYPE or not; nothing otherwise.
 * Warnings are printed whatever --quiet says. */
void runtime_warn(const char *cmd);
/* Measured SGEMM GFLOP/s at the model's largest GEMM shape class, all threads. */
double runtime_gemm_ceiling(int m, int n, int k, double seconds);

/* --precision f32|bf16 (precision.c): *bf16 set; else 2 with err filled. */
int record_parse_precision(const char *s, int *bf16, as_error *err);
/* Puts m's linear layers on bfloat16 products (a new oneDNN pack); refused without oneDNN. */
as_status model_use_bf16(model *m, as_error *err);
/* Forwards image x (1, C, S, S) with m's products (bfloat16) and with float32 ones and fills out
 * with the difference: logits (features without a head) and the attn maps of every block (of the
 * first, middle and last when all would take more than 128 MB). */
as_status precision_check(const model *m, const float *x, trace_precision *out, as_error *err);
/* One line for info and record: what the check measured. */
void precision_describe(const trace_precision *p, char *buf, size_t n);

/* recording loop shared by record, demo and bench */
typedef struct {
    const char *out;
    trace_mode mode;
    trace_spec spec;  /* quantities, layers, heads, dtype, compression, batch */
    int quiet;        /* no summary lines (progress still follows the tty rule) */
    int max_images;   /* 0: all */
    int skip_bad;     /* unreadable inputs are listed in /skipped and passed over, not fatal */
    /* record's own --record: "internals" on a model without any is refused (an experiment's or
     * training's one list of quantities applies to models with and without them) */
    int refuse_idle_internals;
} record_opts;

typedef struct {
    long recorded;    /* images recorded by this run */
    long resumed;     /* images already in the trace */
    long skipped;     /* inputs skipped as unreadable (--skip-bad), earlier runs' included */
    double seconds;   /* wall time of the loop */
    double writer_cpu; /* CPU seconds of the trace's writer thread (conversion, HDF5, the kernel's copy) */
    double direct_bytes; /* of those written, the bytes written with O_DIRECT, past the page cache */
    int complete;
} record_result;

/* The quantities of a --record LIST ("attn,scores", "all") into *q (bits 1 << trace_quantity);
 * returns 0, or 2 with err filled, naming the option as flag ("--record", bench's
 * "--record-what"). */
int record_parse_quantities(const char *what, const char *flag, unsigned *q, as_error *err);
/* Fills o->spec's selection from the --record/--layers/--heads/--dtype/--compress/--query-rows
 * strings; returns 0, or 2 (usage error) with err filled. */
int record_parse_selection(record_opts *o, const vit_config *c, const char *what,
                           const char *layers, const char *heads, const char *dtype,
                           const char *compress, const char *rows, as_error *err);
/* --windows LIST into spec (after record_parse_selection chose the layers); 0, or 2 refused. */
int record_parse_windows(trace_spec *s, const vit_config *c, const char *list, as_error *err);
as_status record_run(const model *m, const dataset *ds, record_opts *o, record_result *res,
                     as_error *err);

/* training loop shared by train and demo (cmd_train.c; docs/training.md) */
typedef struct {
    const char *config;     /* architecture name or JSON config */
    int num_classes, img_size; /* > 0: override the config's (as record's --img-size) */
    const char *data;       /* traindata spec */
    const char *out;        /* checkpoint folder */
    int epochs, batch;
    float lr, min_lr, warmup_lr, warmup_epochs, weight_decay, clip, smoothing, dp_weight;
    int dp_loss;            /* LaViT's term: a vit_dp_loss (core/train.h), VIT_DP_HINGE by default */
    float val_fraction;
    int crop_pad;           /* -1 none; -2 default (S / 8) */
    int flip;
    unsigned long long seed;
    int record_every, record_images; /* traces of held-out images every N epochs (0: none) */
    const char *record_what;         /* --record quantities of those traces */
    int resume, keep;       /* keep: newest epoch checkpoints kept (0: all) */
    int quiet;              /* no per-epoch lines (progress still follows the tty rule) */
    const char *command_line;
    /* names the caller put in out before a fresh run (NULL-terminated; e.g. an experiment's
     * model.json): a fresh run refuses an out folder that holds anything else */
    const char *const *preexisting;
    int others_stay;        /* 1: the caller cleared the run's own names from out (demo --force); what
                             * else is there stays untouched beside a fresh run */
} train_opts;

typedef struct {
    int epochs_done;
    double train_loss, train_acc, val_loss, val_acc; /* of the last epoch */
    double train_ce, train_dp;                       /* train_loss's two terms */
    double total_seconds;   /* training time of the whole run, earlier (resumed) parts included */
    double seconds, img_per_s;                       /* training steps only */
    int n_train, n_val, n_classes;
    char checkpoint[1100];  /* the newest checkpoint folder */
    char last_trace[1100];  /* the newest trace, or "" */
    char heldout[1100];     /* the held-out images folder written for traces, or "" */
} train_result;

void train_opts_default(train_opts *o);
/* The first k held-out images of d as an ImageFolder tree dir/CLASS/NNNNN.png. */
as_status train_write_heldout(const traindata *d, int k, const char *dir, as_error *err);
/* Returns AS_OK, AS_ERR_INTERRUPTED (a checkpoint was saved; --resume continues) or an error. */
as_status train_run(const train_opts *o, train_result *res, as_error *err);

/* synthetic inputs for the demo, tests and benchmarks */
as_status synth_write_images(const char *dir, int count, int size, unsigned long long seed,
                             as_error *err);
void synth_fill_image(unsigned char *rgb, int w, int h, int kind, unsigned long long seed);
as_status synth_save_png(const char *path, const unsigned char *rgb, int w, int h, as_error *err);

#endif
