/* trace.h: the HDF5 trace. A writer that records batches from a bounded queue on its own
 * thread (SWMR, so readers follow a run live and a crash keeps every completed image), and a
 * small reader. docs/trace-format.md specifies the layout for readers without our code. */
#ifndef AS_TRACE_H
#define AS_TRACE_H

#include <stdint.h>

#include "../core/config.h"
#include "../core/status.h"
#include "../core/vit.h"

/* Usage (writer):
 *     trace_writer *w;  int done;
 *     trace_writer_open(&w, "run.h5", &spec, TRACE_CREATE, &done, &err);
 *     for each batch:
 *         trace_slot *s = trace_writer_acquire(w);        // blocks while the queue is full
 *         vit_forward(cfg, params, acts, x, n, &s->rec);  // maps land in the slot
 *         ... fill s->logits, s->rgb, s->paths, s->labels; s->n = n ...
 *         trace_writer_submit(w, s);                       // the writer thread stores it
 *     trace_writer_close(w, 1, NULL, &err);               // 1 = complete
 */

#define TRACE_MAX_BATCH 256
#define TRACE_MAX_WINDOWS 4096 /* windows a --windows list can name (Swin-T stage 1: 64 at 224 px) */

/* Engine buffers (vit_record) per block l, with g = vit_block_geom(cfg, l): maps are
 * (B, g.H, g.problems, g.Tq, g.Tk), which is (B, H, T, T) for a GLOBAL block; q/k (B, g.H, g.T,
 * dq) in unshifted grid order; tokens (B, g.T, g.D). */
typedef enum {
    TRACE_Q_ATTN = 0, /* softmax probabilities */
    TRACE_Q_SCORES,   /* scaled pre-softmax scores */
    TRACE_Q_Q,        /* per-head queries */
    TRACE_Q_K,        /* per-head keys */
    TRACE_Q_TOKENS,   /* block outputs */
    TRACE_Q_X0,       /* the mechanism's intermediate maps (vit_extra_info), */
    TRACE_Q_X1,       /* selected together as "internals" */
    TRACE_Q_COUNT
} trace_quantity;

typedef enum { TRACE_COMPRESS_NONE = 0, TRACE_COMPRESS_LZ4, TRACE_COMPRESS_DEFLATE,
               TRACE_COMPRESS_COUNT } trace_compress;

typedef enum { TRACE_CREATE = 0, TRACE_FORCE, TRACE_RESUME } trace_mode;

const char *trace_quantity_name(trace_quantity q);
const char *trace_compress_name(trace_compress c);

/* What bfloat16 products did to one image against float32 products (record --precision bf16,
 * cli/precision.c): the first image the run reads, forwarded both ways. */
typedef struct {
    int checked;             /* 1: the fields below hold a measurement */
    int n_layers, layers[VIT_MAX_DEPTH]; /* blocks whose attn maps were compared */
    double out_max_abs;      /* logits (features without a head): max |bf16 - f32| */
    double out_max;          /* ... and max |f32| */
    double attn_max_abs, attn_mean_abs; /* attn maps: max and mean |bf16 - f32| */
    int top1_same;           /* the argmax of the logits agrees (models with a head; else -1) */
} trace_precision;

typedef struct {
    vit_config cfg;
    const vit_params *params;    /* for the mechanisms' learnt maps under layers/LL/params; may be NULL */
    const char *model_source;    /* the weights file's resolved path, or "random(seed=N)" */
    const char *model_sha256;    /* SHA-256 of that file (hex); NULL or "" for random weights */
    const char *weights_dtype;
    /* how it was computed: results are bit-identical only with the same kernels and threads */
    const char *blas_core;       /* OpenBLAS's kernel set ("SkylakeX") */
    const char *blas_config;     /* openblas_get_config() */
    const char *blas_forced;     /* "OPENBLAS_CORETYPE=..." when the environment chose it, or "" */
    const char *gemm;            /* what the linear layers ran on (vit_gemm_name), or NULL */
    int bf16;                    /* the linear layers' products in bfloat16 (--precision bf16) */
    trace_precision precision;   /* with bf16: the measured difference to float32 */
    int threads;
    unsigned quantities;         /* bit (1 << trace_quantity) */
    int n_layers, layers[VIT_MAX_DEPTH];  /* recorded layers, ascending */
    int n_heads, heads[1024];             /* recorded heads, ascending */
    int heads_all;               /* staged models: every head of each layer (their counts differ);
                                    n_heads/heads are then unused */
    int n_windows, windows[TRACE_MAX_WINDOWS]; /* WINDOW layers: recorded windows, ascending;
                                                  0: all of them */
    int prefix_rows_only;        /* attn/scores: only the prefix-token query rows */
    int dense_maps;              /* attn/scores of blocks whose heads are all local (core/local.h:
                                    H-MaiT's masked stages) as dense (T, T) maps, not attn_local /
                                    scores_local records (record --dense-maps) */
    int f16;                     /* store maps/scores/q/k/tokens as float16 */
    trace_compress compress;
    int level;                   /* deflate level 1..9 */
    int compress_given;          /* record --compress was given: --resume refuses a trace stored
                                    otherwise; without it a resume keeps the trace's storage */
    int batch;                   /* images per slot, 1..TRACE_MAX_BATCH */
    long direct_min;             /* uncompressed records of at least this many bytes per chunk are
                                    written with O_DIRECT where the file system allows it; 0: the
                                    default (1 MiB), < 0: never (tests set it to reach the path) */
    const char *command_line;
    const char *training;        /* JSON: the training options of a trace that attnscope train
                                    writes (the root attribute "training"), or NULL */
    int n_class_names;
    char **class_names;
} trace_spec;

/* One batch in flight: the engine writes into rec's buffers (full heads, all rows). */
typedef struct {
    int n;                        /* images in this batch */
    vit_record rec;
    float *logits;                /* (B, C) */
    uint8_t *rgb;                 /* (B, S, S, 3) */
    char (*paths)[1024];          /* [B] */
    int *labels;                  /* [B] */
} trace_slot;

typedef struct trace_writer trace_writer;

/* --resume: the caller's check of the images already in the trace (done of them, their paths,
 * or NULL when they could not be read), called before anything in the file changes; a status
 * other than AS_OK (with err set) refuses the resume and leaves the file as it was. */
typedef as_status (*trace_resume_check)(void *ctx, int done, char (*done_paths)[1024], as_error *err);

/* Creates (or with TRACE_RESUME reopens) the trace; *done receives the number of completed
 * images already in it (0 for a new trace). done_paths, if not NULL, receives them
 * ((*done) strings of 1024 bytes; free with free()). A resume that is refused (another spec,
 * other weights, storage or check's verdict) leaves the file byte for byte as it was. */
as_status trace_writer_open(trace_writer **w, const char *path, const trace_spec *spec,
                            trace_mode mode, int *done, char (**done_paths)[1024],
                            trace_resume_check check, void *check_ctx, as_error *err);
/* Before any work: whether trace_writer_open(path, mode) may write path. An existing path is
 * refused for TRACE_CREATE ("pass --force"), and for TRACE_FORCE/TRACE_RESUME unless it is a
 * regular file that is a trace (or, for TRACE_FORCE, empty); a new path needs an existing,
 * writable folder. Messages name path as --out. */
as_status trace_out_check(const char *path, trace_mode mode, as_error *err);
/* Bytes of engine buffers per slot (for messages and --dry-run). */
size_t trace_slot_bytes(const trace_spec *spec);
trace_slot *trace_writer_acquire(trace_writer *w);
void trace_writer_submit(trace_writer *w, trace_slot *s);
/* Non-zero once the writer has failed (disk full, ...); err receives the message. */
int trace_writer_failed(trace_writer *w, as_error *err);
/* Images stored so far (completed). */
long trace_writer_done(trace_writer *w);
/* Returns once every submitted batch is written (or failed). */
void trace_writer_wait(trace_writer *w);
/* CPU seconds the writer thread has used so far (bench: what recording costs a core). */
double trace_writer_cpu_seconds(trace_writer *w);
/* Bytes written so far with O_DIRECT, past the page cache (see TRACE_DIRECT_MIN in trace.c). */
double trace_writer_direct_bytes(trace_writer *w);
/* Drains the queue, then records the end state: complete (1), or interrupted with a reason. */
as_status trace_writer_close(trace_writer *w, int complete, const char *reason, as_error *err);

/* Inputs a run skipped as unreadable (record --skip-bad): written after trace_writer_close as
 * /skipped/{path, reason, input_index} and the root attribute num_skipped, replacing an earlier
 * list (a resumed run passes the whole list again). */
typedef struct {
    long input_index;            /* position in the input list */
    char path[1024];
    char reason[1024];           /* the loader's one-line message */
} trace_skipped;
as_status trace_write_skipped(const char *path, const trace_skipped *items, long n, as_error *err);

/* ---- reading -------------------------------------------------------------------------------- */

/* One recorded layer as the trace describes it (version 3: its attributes; versions 1 and 2: the
 * one grid of the model). Maps of a layer are (n_problems, Tq, Tk) per head and image. */
typedef struct {
    int layer;              /* model block index */
    int stage;              /* 0 in monolithic traces */
    vit_scope scope;
    int gh, gw;             /* token grid (rows, columns), prefix tokens not counted */
    int prefix;             /* class/distillation tokens ahead of the grid */
    int T, D, H;            /* tokens, width, model heads of the block */
    int M, shift;           /* WINDOW: window side and cyclic shift (else 0) */
    int ph, pw;             /* WINDOW: padded grid (else gh, gw) */
    int nwh, nww;           /* WINDOW: windows down and across (else 1, 1) */
    int n_problems;         /* recorded problems per head and image: 1, or the recorded windows */
    int Tq, Tk;             /* recorded query rows and keys of one problem */
    int qk_dim;             /* q/k width per head (0: none) */
    float stride_px, offset_px; /* centre of grid index i along an axis: offset + stride * i */
    /* SRA (PVT v2): the keys' grid (Tk = kgh kgw), sr_ratio R or sr_pool (linear: 7), and the
     * centre of key index i: key_offset_px + key_stride_px * i (exact for a conv; a pool's bins
     * are in the layer's key_centre_px attribute). Else kgh, kgw = gh, gw and the token centres. */
    int kgh, kgw, sr_ratio, sr_pool;
    float key_stride_px, key_offset_px;
    int attn_signed;        /* CaiT talking heads: attn is signed and not row-stochastic */
    int local_side;         /* S > 0: attn and scores are stored as local records attn_local /
                               scores_local (H, Tq, S^2 + 1); the readers below expand them to
                               (Tq, Tk) maps. 0: dense */
} trace_layer_geom;

typedef struct {
    int64_t file_id;       /* hid_t */
    char path[1024];
    int swmr;              /* opened while a writer holds it (or after a crash) */
    int complete;
    long n_images;         /* completed images */
    vit_config cfg;
    char *model_config;    /* JSON */
    unsigned quantities;
    int n_layers, layers[VIT_MAX_DEPTH];
    int n_heads, heads[1024];
    int prefix_rows_only, f16;
    int num_tokens, num_prefix, q_rows; /* staged traces: those of the first recorded layer */
    char compression[64];
    int version;           /* format_version: 1, 2, or 3 (staged) */
    int staged;            /* version 3: layers differ in grid, width or heads, or are windowed;
                              analysis/, plot/ and viewer/ read single-grid traces only so far */
    int heads_all;         /* staged: each layer recorded all its heads (n_heads/heads unused) */
    int n_windows, windows[TRACE_MAX_WINDOWS]; /* recorded windows of WINDOW layers; 0: all */
    trace_layer_geom geom[VIT_MAX_DEPTH]; /* per position in layers */
    int has_pool_attn;     /* /pool/attn: the attention pooling's map (global_pool "map") */
} trace_reader;

as_status trace_reader_open(trace_reader *r, const char *path, as_error *err);
void trace_reader_close(trace_reader *r);
/* 1 when no process has path open for writing (the superblock's consistency flags are clear):
 * a live reader then reopens it to see the final trace. 0 while a writer runs, or when one was
 * killed (h5clear -s or record --resume clear its mark). A run's writer closes its SWMR handle
 * and reopens briefly to stamp the end state, so see 1 twice, a moment apart, before reopening. */
int trace_writer_finished(const char *path);

/* The geometry of recorded layer `layer` (model index), or NULL when it was not recorded. */
const trace_layer_geom *trace_layer(const trace_reader *r, int layer);
/* The model heads recorded in layer `layer` (ids: up to 1024); returns their count, 0 if none. */
int trace_layer_heads(const trace_reader *r, int layer, int *ids);
/* A WINDOW layer's token table (layers/LL/params/window_token): tok[w * M^2 + i] = the flat grid
 * token (y * gw + x, prefix not counted) at row i of window w, or -1 for a pad slot; all
 * nwh * nww windows, whichever were recorded. */
as_status trace_read_window_tokens(const trace_reader *r, int layer, int *tok, as_error *err);
/* One line for refusing a staged trace: "PATH is a staged trace (swin, 4 stages, window
 * layers; format 3)". */
void trace_describe_staged(const trace_reader *r, char *buf, size_t n);

/* Re-reads the image count of a live trace. */
as_status trace_reader_refresh(trace_reader *r, as_error *err);
/* One head's map of one image and layer, as float: attn or scores (q_rows, T), q/k (T, hd);
 * in a staged trace (n_problems, Tq, Tk) and (T, qk_dim) of trace_layer(r, layer).
 * layer and head are model indices; they must have been recorded. */
as_status trace_read_head(const trace_reader *r, trace_quantity q, long image, int layer,
                          int head, float *out, as_error *err);
/* Any per-head map dataset of a layer by name (attn, scores, attn_softmax, attn_expanded, ...):
 * one head's (rows, T) map; head is a model head index when the dataset follows the --heads
 * selection, else its position. */
as_status trace_read_map(const trace_reader *r, const char *name, long image, int layer,
                         int head, float *out, as_error *err);
/* Everything one image holds in a dataset ("layers/03/attn"): (H_rec, Q, T) for maps, (H_rec,
 * T, d) for q/k, (T, D) for tokens, as float. */
as_status trace_read_image_slab(const trace_reader *r, const char *name, long image, float *out,
                                as_error *err);
/* The dataset's dimensions after the image axis; returns their count, or -1 when it is absent. */
int trace_dataset_dims(const trace_reader *r, const char *name, long *dims, int max);
/* The attention pooling's map of one image (global_pool "map"): (H, Np) floats, per head the
 * learnt latent query's weights over the patch tokens (row-major grid; prefix tokens excluded). */
as_status trace_read_pool_attn(const trace_reader *r, long image, float *out, as_error *err);
/* Block output tokens (T, D) of one image and layer. */
as_status trace_read_tokens(const trace_reader *r, long image, int layer, float *out,
                            as_error *err);
/* Per-image records: logits (C), label, prediction. */
as_status trace_read_image_info(const trace_reader *r, long image, char *path, size_t path_n,
                                int *label, int *pred, float *logits, as_error *err);
/* The class name of a label (ImageFolder inputs: /images class_names); empty when unknown. */
void trace_class_name(const trace_reader *r, int label, char *out, size_t n);
/* Total bytes of the file on disk and the raw bytes of recorded data. */
as_status trace_sizes(const trace_reader *r, double *file_bytes, double *data_bytes);
/* Inputs skipped as unreadable (0 when none, or a trace without the list). */
long trace_num_skipped(const trace_reader *r);
/* Root attribute as a string (vlen or fixed); empty if missing. */
void trace_read_attr_string(const trace_reader *r, const char *name, char *out, size_t n);

#endif
