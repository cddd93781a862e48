/* cmd_record.c: attnscope record, and the recording loop that demo and bench share. The
 * compute thread preprocesses and runs the engine into a trace slot; the trace's writer thread
 * stores the previous slot meanwhile. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "../core/local.h"
#include "../core/mech.h"

/* The one mutable global: a signal handler can only talk through a sig_atomic_t. */
static volatile sig_atomic_t record_signal = 0;

static void on_signal(int sig) {
    record_signal = sig;
    signal(sig, SIG_DFL); /* a second Ctrl-C stops at once; the trace stays readable (SWMR) */
}

/* Inputs skipped as unreadable (--skip-bad), in input order. */
typedef struct {
    trace_skipped *v;
    long n, cap;
} skip_list;

static int skip_add(skip_list *k, long index, const char *path, const char *reason) {
    if (k->n == k->cap) {
        long cap = k->cap ? 2 * k->cap : 16;
        trace_skipped *v = realloc(k->v, (size_t)cap * sizeof *v);
        if (!v) return 0;
        k->v = v, k->cap = cap;
    }
    trace_skipped *t = &k->v[k->n++];
    t->input_index = index;
    snprintf(t->path, sizeof t->path, "%s", path);
    snprintf(t->reason, sizeof t->reason, "%s", reason);
    return 1;
}

/* --resume: the input where the run continues. The trace's images must be the inputs in order;
 * with --skip-bad, an input between two of them was skipped, so it must still fail to load (it
 * is listed again, with the reason it fails now). */
static as_status resume_position(const dataset *ds, const vit_config *c, long total, char (*done_paths)[1024],
                                 int done, int skip_bad, const char *out, skip_list *sk, long *next,
                                 as_error *err) {
    const size_t S = (size_t)c->img_size;
    float *x1 = NULL;
    unsigned char *rgb1 = NULL;
    long j = 0;
    as_status rc = AS_OK;
    for (int k = 0; k < done && done_paths && rc == AS_OK; k++, j++) {
        while (skip_bad && j < total && strcmp(done_paths[k], ds->paths[j]) != 0) {
            as_error e = {0};
            if (!x1) x1 = malloc((size_t)c->in_chans * S * S * sizeof *x1), rgb1 = malloc(S * S * 3);
            if (!x1 || !rgb1 || dataset_load(ds, (int)j, x1, rgb1, c, &e) == AS_OK) break;
            if (!skip_add(sk, j, ds->paths[j], e.msg)) {
                rc = as_fail(err, AS_ERR_NOMEM, "out of memory");
                break;
            }
            j++;
        }
        if (rc == AS_OK && (j >= total || strcmp(done_paths[k], ds->paths[j]) != 0))
            rc = as_fail(err, AS_ERR_ARG, "%s: --resume: image %d in the trace is %s but the input "
                         "list has %s there: resume with the same --images%s", out, k, done_paths[k],
                         j < total ? ds->paths[j] : "nothing", skip_bad ? " (and --skip-bad)" : "");
    }
    free(x1);
    free(rgb1);
    *next = j;
    return rc;
}

/* resume_position as the trace writer's check: before anything in the trace changes. */
typedef struct {
    const dataset *ds;
    const vit_config *c;
    long total, start;
    int skip_bad;
    const char *out;
    skip_list *sk;
} resume_ctx;

static as_status resume_check_images(void *ctx, int done, char (*done_paths)[1024], as_error *err) {
    resume_ctx *r = ctx;
    return resume_position(r->ds, r->c, r->total, done_paths, done, r->skip_bad, r->out, r->sk,
                           &r->start, err);
}

as_status record_run(const model *m, const dataset *ds, record_opts *o, record_result *res,
                     as_error *err) {
    const vit_config *c = &m->cfg;
    trace_spec *s = &o->spec;
    memset(res, 0, sizeof *res);
    s->cfg = *c;
    s->params = &m->params;
    s->model_source = m->source;
    s->model_sha256 = m->sha256;
    runtime_info ri;
    runtime_get_info(&ri);
    runtime_info_for_model(&ri, &m->cfg, m->params.pack); /* what these weights' products run on */
    s->blas_core = ri.core;
    s->blas_config = ri.config;
    s->blas_forced = ri.forced;
    s->gemm = ri.gemm;
    s->threads = ri.threads;
    s->weights_dtype = m->weights_dtype;
    s->n_class_names = ds->n_classes;
    s->class_names = ds->classes;
    const int B = s->batch, S = c->img_size;
    /* --limit N: N images in the trace (those of a resumed run included), skipping bad inputs as
     * needed; the loop reads inputs until it has them or the inputs run out */
    const long total = ds->count, want = o->max_images > 0 ? o->max_images : -1;

    as_status rc = dataset_check(ds, c, err);
    if (rc != AS_OK) return rc;
    s->bf16 = vit_gemm_pack_precision(m->params.pack) == VIT_GEMM_BF16;
    memset(&s->precision, 0, sizeof s->precision);
    struct stat sb;
    if (s->bf16 && !(o->mode == TRACE_RESUME && stat(o->out, &sb) == 0)) {
        /* a new trace keeps what bfloat16 did to its first readable image (a resumed one has it) */
        float *x1 = malloc((size_t)c->in_chans * S * S * sizeof *x1);
        as_error e1 = {0};
        for (long i = 0; x1 && i < total && i < 16 && !s->precision.checked; i++)
            if (dataset_load(ds, (int)i, x1, NULL, c, &e1) == AS_OK &&
                (rc = precision_check(m, x1, &s->precision, err)) != AS_OK)
                break;
        free(x1);
        if (rc != AS_OK) return rc;
    }
    trace_writer *w = NULL;
    int done = 0;
    skip_list sk = {0};
    resume_ctx rx = {ds, c, total, 0, o->skip_bad, o->out, &sk};
    /* a refused resume (other images among them) leaves the trace as it was */
    rc = trace_writer_open(&w, o->out, s, o->mode, &done, NULL, resume_check_images, &rx, err);
    if (rc != AS_OK) {
        free(sk.v);
        return rc;
    }
    const long start = rx.start;
    res->resumed = done;

    size_t act_bytes = vit_acts_carve(c, B, NULL, NULL);
    void *arena = aligned_alloc(64, act_bytes);
    float *x = aligned_alloc(64, ((size_t)B * c->in_chans * S * S * 4 + 63) & ~(size_t)63);
    as_error *item_errs = calloc((size_t)B, sizeof *item_errs);
    if (!arena || !x || !item_errs) {
        free(arena);
        free(x);
        free(item_errs);
        free(sk.v);
        trace_writer_close(w, 0, "out of memory", NULL);
        return as_fail(err, AS_ERR_NOMEM, "out of memory for activations (%.1f MB): lower --batch",
                       act_bytes / 1e6);
    }
    memset(arena, 0, act_bytes); /* fault the pages in before the clock starts */
    vit_acts acts;
    vit_acts_carve(c, B, arena, &acts);

    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    record_signal = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    progress pg;
    /* with --limit, progress counts the images recorded; otherwise the inputs read */
    progress_init(&pg, "record", want > 0 ? (want < total ? want : total) : total, want > 0 ? done : start);
    const double t0 = cli_now();
    long i = start, stored = 0;
    as_status loop_rc = AS_OK;
    const size_t img = (size_t)c->in_chans * S * S, img_rgb = (size_t)S * S * 3;
    while (i < total && (want < 0 || done + stored < want) && !record_signal) {
        if (trace_writer_failed(w, NULL)) break;
        trace_slot *sl = trace_writer_acquire(w);
        long n_ = total - i < B ? total - i : B;
        if (want > 0 && want - done - stored < n_) n_ = want - done - stored;
        const int n = (int)n_;
        /* decoding and resizing are independent per image: spread them over the threads */
#pragma omp parallel for schedule(dynamic, 1)
        for (int b = 0; b < n; b++)
            item_errs[b].status = dataset_load(ds, (int)(i + b), x + b * img, sl->rgb + (size_t)b * img_rgb, c, &item_errs[b]);
        /* without --skip-bad the first bad input stops the run; with it, the bad ones are listed
         * and the good ones close ranks */
        int kept = 0, first_bad = -1;
        for (int b = 0; b < n; b++) {
            if (item_errs[b].status != AS_OK) {
                if (first_bad < 0) first_bad = b;
                if (o->skip_bad && !skip_add(&sk, i + b, ds->paths[i + b], item_errs[b].msg)) {
                    item_errs[b] = (as_error){0};
                    as_fail(&item_errs[b], AS_ERR_NOMEM, "out of memory for the list of skipped inputs");
                    first_bad = b;
                    break;
                }
                if (o->skip_bad) continue;
                break;
            }
            if (kept != b) {
                memcpy(x + kept * img, x + b * img, img * sizeof *x);
                memcpy(sl->rgb + (size_t)kept * img_rgb, sl->rgb + (size_t)b * img_rgb, img_rgb);
            }
            snprintf(sl->paths[kept], sizeof sl->paths[kept], "%s", ds->paths[i + b]);
            sl->labels[kept] = ds->labels[i + b];
            kept++;
        }
        if (first_bad >= 0 && (!o->skip_bad || item_errs[first_bad].status == AS_ERR_NOMEM)) {
            sl->n = 0;
            trace_writer_submit(w, sl); /* an empty slot goes back untouched */
            loop_rc = item_errs[first_bad].status;
            *err = item_errs[first_bad];
            break;
        }
        if (kept > 0) {
            vit_forward(c, &m->params, &acts, x, kept, &sl->rec);
            if (c->num_classes > 0)
                memcpy(sl->logits, acts.logits, (size_t)kept * c->num_classes * sizeof(float));
        }
        sl->n = kept;
        trace_writer_submit(w, sl);
        i += n;
        stored += kept;
        progress_update(&pg, want > 0 ? done + stored : i);
    }
    progress_finish(&pg);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);

    const int interrupted = record_signal != 0;
    const char *reason = interrupted ? (record_signal == SIGINT ? "SIGINT" : "SIGTERM")
                         : loop_rc != AS_OK ? "input error" : NULL;
    as_error close_err = {0};
    const int finished = i == total || (want > 0 && done + stored >= want);
    trace_writer_wait(w); /* every batch written: what the writer did, whole */
    res->writer_cpu = trace_writer_cpu_seconds(w);
    res->direct_bytes = trace_writer_direct_bytes(w);
    as_status crc = trace_writer_close(w, reason == NULL && finished, reason, &close_err);
    res->seconds = cli_now() - t0;
    res->recorded = stored;
    res->skipped = sk.n;
    res->complete = reason == NULL && crc == AS_OK && finished;
    free(arena);
    free(x);
    free(item_errs);
    /* a new trace that holds nothing is no use to anyone: do not leave it behind */
    const int empty = done == 0 && stored == 0;
    if (empty && (crc != AS_OK || loop_rc != AS_OK || interrupted || sk.n > 0)) remove(o->out);
    else if (o->skip_bad && crc == AS_OK) crc = trace_write_skipped(o->out, sk.v, sk.n, &close_err);
    if (empty && crc == AS_OK && loop_rc == AS_OK && !interrupted && sk.n > 0) {
        loop_rc = as_fail(err, AS_ERR_FORMAT, "%s: none of the %ld inputs could be read (the first: "
                          "%.600s); no trace was written: fix the files or point --images at readable "
                          "images, then run again", o->out, sk.n, sk.v[0].reason);
        free(sk.v);
        return loop_rc;
    }
    free(sk.v);
    if (crc != AS_OK) {
        *err = close_err;
        return crc;
    }
    if (loop_rc != AS_OK) {
        /* append the recovery advice to the loader's one-line message */
        size_t L = strlen(err->msg);
        if (done + stored > 0)
            snprintf(err->msg + L, sizeof err->msg - L, "; the trace keeps the %ld images before "
                     "it: fix or remove the file (or add --skip-bad), then run again with --resume",
                     done + stored);
        else
            snprintf(err->msg + L, sizeof err->msg - L, "; nothing was recorded: fix or remove "
                     "the file (or add --skip-bad) and run again");
        return loop_rc;
    }
    if (interrupted)
        return as_fail(err, AS_ERR_INTERRUPTED, "%s: interrupted (%s) after reading %ld of %ld inputs; "
                       "the trace holds them and is marked incomplete: continue with --resume",
                       o->out, reason, i, total);
    return AS_OK;
}

/* Does block l store quantity q (as io/trace.c's q_in_layer: q/k not in less-attention blocks,
 * internals per mechanism)? */
static int record_q_in_layer(const vit_config *c, int q, int l) {
    if (q == TRACE_Q_Q || q == TRACE_Q_K) return vit_has_keys(c, l);
    if (q == TRACE_Q_X0 || q == TRACE_Q_X1) return vit_extra_info(c, l, q - TRACE_Q_X0, NULL);
    return 1;
}

/* Is some recorded quantity of s kept per model head (--heads), a map (--query-rows: of a global
 * block; --windows: of a window block)? what: 0 heads, 1 query rows, 2 windows. */
static int record_selects(const trace_spec *s, const vit_config *c, int what) {
    for (int li = 0; li < s->n_layers; li++) {
        const int l = s->layers[li];
        vit_geom g;
        vit_block_geom(c, l, &g);
        for (int q = 0; q < TRACE_Q_COUNT; q++) {
            if (!(s->quantities & (1u << q)) || q == TRACE_Q_TOKENS || !record_q_in_layer(c, q, l)) continue;
            const int map = q != TRACE_Q_Q && q != TRACE_Q_K;
            if (what == 0 && !((q == TRACE_Q_X0 || q == TRACE_Q_X1) && vit_mech_of(c, l)->maps)) return 1;
            if (what == 1 && map && g.scope == VIT_SCOPE_GLOBAL) return 1;
            if (what == 2 && map && g.scope == VIT_SCOPE_WINDOW) return 1;
        }
    }
    return 0;
}

/* Staged models: head counts differ between stages. "all" keeps each layer's own heads; a list
 * must name heads that every recorded layer has. */
static int record_parse_staged_heads(trace_spec *s, const vit_config *c, const char *heads,
                                     as_error *err) {
    s->heads_all = strcmp(heads, "all") == 0;
    s->n_heads = 0;
    if (s->heads_all) return 0;
    if ((s->n_heads = cli_parse_list(heads, 1024, s->heads, 1024, "--heads", err)) < 0) return 1;
    for (int li = 0; li < s->n_layers; li++) {
        vit_geom g;
        vit_block_geom(c, s->layers[li], &g);
        if (s->heads[s->n_heads - 1] >= g.H) {
            as_fail(err, AS_ERR_ARG, "--heads %s: layer %d (stage %d) has %d heads (0..%d): name "
                    "heads every recorded layer has, record the stages apart with --layers, or "
                    "give --heads all (each layer's own)", heads, s->layers[li], g.stage, g.H, g.H - 1);
            return 1;
        }
    }
    return 0;
}

/* --windows: the windows a WINDOW layer records (indices row-major over its shifted, padded
 * window grid); they must exist in every recorded window layer. "all" records every one. */
int record_parse_windows(trace_spec *s, const vit_config *c, const char *list, as_error *err) {
    s->n_windows = 0;
    if (strcmp(list, "all") == 0) return 0;
    int fewest = -1, at = -1;
    for (int li = 0; li < s->n_layers; li++) {
        vit_geom g;
        vit_block_geom(c, s->layers[li], &g);
        if (g.scope == VIT_SCOPE_WINDOW && (fewest < 0 || g.problems < fewest)) fewest = g.problems, at = li;
    }
    if (fewest < 0) {
        as_fail(err, AS_ERR_ARG, "--windows %s: no recorded layer uses window attention (%s): "
                "leave --windows out%s", list, c->family == VIT_FAMILY_PVT2 ? "PVT v2's attention is "
                "spatial reduction, one map per head" : c->n_stages > 0 ? "the --layers chosen are global"
                : "this model's attention is global", c->n_stages > 0 && c->family != VIT_FAMILY_PVT2
                ? " or record window layers" : "");
        return 2;
    }
    if ((s->n_windows = cli_parse_list(list, TRACE_MAX_WINDOWS, s->windows, TRACE_MAX_WINDOWS,
                                       "--windows", err)) < 0) {
        s->n_windows = 0;
        return 2;
    }
    if (s->windows[s->n_windows - 1] >= fewest) {
        vit_geom g;
        vit_block_geom(c, s->layers[at], &g);
        as_fail(err, AS_ERR_ARG, "--windows %s: layer %d (stage %d) has %d window%s (0..%d, "
                "%dx%d): name windows every recorded window layer has, or record the stages apart "
                "with --layers", list, s->layers[at], g.stage, fewest, fewest == 1 ? "" : "s",
                fewest - 1, g.nwh, g.nww);
        s->n_windows = 0;
        return 2;
    }
    if (!record_selects(s, c, 2)) {
        as_fail(err, AS_ERR_ARG, "--windows %s: no recorded quantity is kept per window (only the "
                "maps are: attn, scores, internals; tokens, q and k are whole): leave --windows out "
                "or record attn or scores", list);
        s->n_windows = 0;
        return 2;
    }
    return 0;
}

int record_parse_quantities(const char *what, const char *flag, unsigned *q, as_error *err) {
    *q = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", what);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (strcmp(tok, "attn") == 0) *q |= 1u << TRACE_Q_ATTN;
        else if (strcmp(tok, "scores") == 0) *q |= 1u << TRACE_Q_SCORES;
        else if (strcmp(tok, "qk") == 0) *q |= 1u << TRACE_Q_Q | 1u << TRACE_Q_K;
        else if (strcmp(tok, "q") == 0) *q |= 1u << TRACE_Q_Q;
        else if (strcmp(tok, "k") == 0) *q |= 1u << TRACE_Q_K;
        else if (strcmp(tok, "tokens") == 0) *q |= 1u << TRACE_Q_TOKENS;
        else if (strcmp(tok, "internals") == 0) *q |= 1u << TRACE_Q_X0 | 1u << TRACE_Q_X1;
        else if (strcmp(tok, "all") == 0) *q |= (1u << TRACE_Q_COUNT) - 1;
        else {
            as_fail(err, AS_ERR_ARG, "%s \"%s\": unknown quantity; use attn, scores, qk, q, "
                    "k, tokens, internals or all", flag, tok);
            return 2;
        }
    }
    if (!*q) {
        as_fail(err, AS_ERR_ARG, "%s: name at least one of attn, scores, qk, tokens", flag);
        return 2;
    }
    return 0;
}

int record_parse_selection(record_opts *o, const vit_config *c, const char *what,
                                  const char *layers, const char *heads, const char *dtype,
                                  const char *compress, const char *rows, as_error *err) {
    trace_spec *s = &o->spec;
    if (record_parse_quantities(what, "--record", &s->quantities, err)) return 2;
    int named_internals = 0; /* "internals" itself, not through "all" */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", what);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) named_internals |= strcmp(tok, "internals") == 0;
    if ((s->n_layers = cli_parse_list(layers, c->depth, s->layers, VIT_MAX_DEPTH, "--layers", err)) < 0) return 2;
    if (c->n_stages > 0) {
        if (record_parse_staged_heads(s, c, heads, err)) return 2;
    } else if ((s->n_heads = cli_parse_list(heads, c->num_heads, s->heads, 1024, "--heads", err)) < 0) {
        return 2;
    }
    if (named_internals && o->refuse_idle_internals) {
        int any = 0;
        for (int l = 0; l < c->depth && !any; l++)
            any = record_q_in_layer(c, TRACE_Q_X0, l) || record_q_in_layer(c, TRACE_Q_X1, l);
        if (!any) {
            as_fail(err, AS_ERR_ARG, "--record internals: no block of this model (%s) has a "
                    "mechanism with intermediate maps (LSLA's and Refiner's blocks have them): leave "
                    "internals out", s->model_source ? s->model_source : c->name);
            return 2;
        }
    }
    if (strcmp(heads, "all") != 0 && !record_selects(s, c, 0)) {
        as_fail(err, AS_ERR_ARG, "--heads %s: no recorded quantity is kept per head of the model "
                "(tokens are whole blocks' outputs; Refiner's internals keep their own heads): leave "
                "--heads out or record attn, scores, q or k", heads);
        return 2;
    }
    if (strcmp(dtype, "f16") == 0 || strcmp(dtype, "float16") == 0) s->f16 = 1;
    else if (strcmp(dtype, "f32") == 0 || strcmp(dtype, "float32") == 0) s->f16 = 0;
    else {
        as_fail(err, AS_ERR_ARG, "--dtype \"%s\": use f16 or f32", dtype);
        return 2;
    }
    s->level = 1;
    if (strcmp(compress, "none") == 0) s->compress = TRACE_COMPRESS_NONE;
    else if (strcmp(compress, "lz4") == 0) s->compress = TRACE_COMPRESS_LZ4;
    else if (strncmp(compress, "deflate", 7) == 0 || strncmp(compress, "gzip", 4) == 0) {
        s->compress = TRACE_COMPRESS_DEFLATE;
        const char *colon = strchr(compress, ':');
        if (colon && !cli_parse_int(colon + 1, 1, 9, &s->level)) {
            as_fail(err, AS_ERR_ARG, "--compress %s: deflate level must be 1..9", compress);
            return 2;
        }
    } else {
        as_fail(err, AS_ERR_ARG, "--compress \"%s\": use none, lz4 or deflate[:1-9]", compress);
        return 2;
    }
    if (strcmp(rows, "all") == 0) s->prefix_rows_only = 0;
    else if (strcmp(rows, "prefix") == 0 || strcmp(rows, "cls") == 0) {
        if (vit_num_prefix(c) == 0) {
            as_fail(err, AS_ERR_ARG, "--query-rows prefix: this model has no class token; use all");
            return 2;
        }
        if (c->family == VIT_FAMILY_CAIT) { /* the SA blocks have no class token; CA layers are cls rows */
            as_fail(err, AS_ERR_ARG, "--query-rows prefix: CaiT's self-attention layers have no class "
                    "token and its class-attention layers hold only the class token's rows already: "
                    "use all (and --layers to keep the class-attention layers)");
            return 2;
        }
        s->prefix_rows_only = 1;
        if (!record_selects(s, c, 1)) {
            as_fail(err, AS_ERR_ARG, "--query-rows %s: it selects the query rows of the attention "
                    "maps (attn, scores, internals) and none is recorded (tokens, q and k keep every "
                    "token): leave --query-rows out or record attn or scores", rows);
            return 2;
        }
    } else {
        as_fail(err, AS_ERR_ARG, "--query-rows \"%s\": use all or prefix (cls: the same)", rows);
        return 2;
    }
    return 0;
}

static const cli_opt record_opts_table[] = {
    /* key alias name       ARG      values                               default     help */
    {'m', 'm', "model",     "PATH",  NULL, "required", "timm-layout folder (config.json + model.safetensors) or .safetensors file"},
    {'a', 'a', "arch",      "NAME",  "attnscope info --list-archs, or a CONFIG.json", "config.json beside the weights",
     "architecture; needed for a bare .safetensors without config.json"},
    {'i', 'i', "images",    "PATH",  NULL, "required", "an image, a folder (recursive), an ImageFolder tree (class sub-folders give "
     "labels), a .txt list (one path [label] per line), or a .npy / .safetensors tensor (N,3,H,W) of preprocessed float32 images"},
    {'o', 'o', "out",       "FILE",  NULL, "required", "the trace (HDF5); never overwritten without --force"},
    {'r', 0,   "record",    "LIST",  "attn, scores, qk, q, k, tokens, internals, all (comma-separated)", "attn",
     "what to record: attention maps, pre-softmax scores, queries/keys, block outputs; internals: a mechanism's "
     "intermediate maps (LSLA's softmax before the outer bias, Refiner's expanded and convolved maps); all: every one"},
    {'L', 0,   "layers",    "LIST",  "0-11, 0,5,11 or all", "all", "layers to record"},
    {'H', 0,   "heads",     "LIST",  "0-2, 0,2 or all", "all", "heads to record (staged models: all keeps each "
     "layer's own heads; a list must name heads every recorded layer has)"},
    {'W', 0,   "windows",   "LIST",  "0-63, 0,5-7 or all", "all", "windows to record in window-attention layers "
     "(Swin): indices row-major over the layer's shifted, padded window grid (attnscope info TRACE shows "
     "it); every recorded window layer must have them; refused for models without window layers"},
    {'R', 0,   "query-rows", "R",    "all, prefix (or cls, the same)", "all", "query rows of the recorded maps (attn, scores, "
     "internals): every token's, or prefix: only the class/distillation tokens'; tokens, q and k keep every token"},
    {'D', 0,   "dense-maps", NULL,   NULL, NULL, "store the maps of layers whose heads are all local (H-MaiT's "
     "masked stages: an R x R neighbourhood plus one background weight per query) as dense T x T maps "
     "instead of their local form (attn_local, scores_local); every reader expands either"},
    {'d', 0,   "dtype",     "T",     "f16, f32", "f16", "storage precision of the records"},
    {'c', 0,   "compress",  "C",     "none, lz4 (hdf5-filter-plugin), deflate[:1-9] (gzip+shuffle)", "none", "compression"},
    {'b', 0,   "batch",     "N",     "1.." CLI_STR(TRACE_MAX_BATCH), "8", "images per batch"},
    {'X', 0,   "precision", "P",     "f32, bf16", "f32", "the linear layers' products: float32, or bf16: inputs and "
     "weights rounded to bfloat16 with float32 sums, about 1.9x faster per product on AVX512-BF16 CPUs (oneDNN); "
     "the trace records bf16 and what it did to the first image against float32 (attnscope info shows it)"},
    {'s', 0,   "img-size",  "N",     "1..16384", "the model's", "run at another input size (position embeddings resampled)"},
    {'t', 0,   "threads",   "N",     "1..1024", "$OMP_NUM_THREADS, else all cores", "threads"},
    {'n', 0,   "limit",     "N",     "1 or more", "all images", "record only the first N images (skipped inputs do not count)"},
    {'P', 0,   "max-image-pixels", "N", "1..1073741824", "178956970",
     "refuse images of more than N pixels (PIL's decompression-bomb limit, 2 x Image.MAX_IMAGE_PIXELS)"},
    {'u', 0,   "resume",    NULL,    NULL, NULL, "continue an interrupted trace"},
    {'f', 0,   "force",     NULL,    NULL, NULL, "replace an existing trace (only a regular file that is a "
     "trace, or an empty file: never a folder, a device or a symlink's target)"},
    {'S', 0,   "skip-bad",  NULL,    NULL, NULL, "skip inputs that cannot be read (listed with the reason in the "
     "trace's /skipped group and counted in the summary); without it the first bad input stops the run"},
    {'q', 'q', "quiet",     NULL,    NULL, NULL, "no summary"},
    {0}};

static const cli_cmd record_cmd = {
    "record", "--model PATH --images PATH --out FILE [options]",
    "Runs a ViT/DeiT checkpoint over images and records attention into an HDF5 trace.",
    record_opts_table,
    "Progress shows on a terminal; Ctrl-C stops after the current batch, keeping every completed image "
    "(then --resume continues)."};

/* --dense-maps: only where some recorded layer would store local maps. */
static int record_dense_maps(trace_spec *s, const vit_config *c, as_error *err) {
    int local = 0;
    for (int li = 0; li < s->n_layers; li++) local |= vit_local_side(c, s->layers[li]) > 0;
    if (!local || s->prefix_rows_only || !(s->quantities & (1u << TRACE_Q_ATTN | 1u << TRACE_Q_SCORES))) {
        as_fail(err, AS_ERR_ARG, "--dense-maps: no recorded layer stores its attn or scores in local "
                "form (only layers whose heads are all local do: MaiT's zero or neg_inf masks on "
                "every head of a staged model's global stage, as in H-MaiT); leave the option out");
        return 2;
    }
    s->dense_maps = 1;
    return 0;
}

int cmd_record(int argc, char **argv) {
    const char *model_path = NULL, *arch = NULL, *images = NULL, *out = NULL, *what = "attn";
    int max_pixels = 0;
    const char *layers = "all", *heads = "all", *dtype = "f16", *compress = "none", *rows = "all";
    const char *windows = "all", *precision = "f32";
    int batch = 8, threads = 0, img_size = 0, limit = 0, resume = 0, force = 0, quiet = 0, skip_bad = 0, ch;
    int dense_maps = 0, compress_given = 0;
    optind = 1;
    while ((ch = cli_opts_next(&record_cmd, argc, argv)) >= 0) {
        int ok = 1;
        switch (ch) {
        case 'm': model_path = optarg; break;
        case 'a': arch = optarg; break;
        case 'i': images = optarg; break;
        case 'o': out = optarg; break;
        case 'r': what = optarg; break;
        case 'L': layers = optarg; break;
        case 'H': heads = optarg; break;
        case 'W': windows = optarg; break;
        case 'd': dtype = optarg; break;
        case 'c': compress = optarg, compress_given = 1; break;
        case 'X': precision = optarg; break;
        case 'R': rows = optarg; break;
        case 'b': ok = cli_parse_int(optarg, 1, TRACE_MAX_BATCH, &batch); break;
        case 't': ok = cli_parse_int(optarg, 1, 1024, &threads); break;
        case 's': ok = cli_parse_int(optarg, 1, 16384, &img_size); break;
        case 'n': ok = cli_parse_int(optarg, 1, 1 << 30, &limit); break;
        case 'P': ok = cli_parse_int(optarg, 1, 1 << 30, &max_pixels); break;
        case 'u': resume = 1; break;
        case 'f': force = 1; break;
        case 'S': skip_bad = 1; break;
        case 'q': quiet = 1; break;
        case 'D': dense_maps = 1; break;
        }
        if (!ok) return cli_bad_value(&record_cmd, ch, optarg);
    }
    if (ch != CLI_END) return cli_opts_exit(ch);
    if (optind < argc) return cli_extra(&record_cmd, argv[optind]);
    if (!model_path) return cli_missing(&record_cmd, "--model PATH");
    if (!images) return cli_missing(&record_cmd, "--images PATH");
    if (!out) return cli_missing(&record_cmd, "--out FILE");
    if (resume && force) return cli_fail(2, "--resume and --force exclude each other: give one");
    runtime_set_threads(threads);
    as_error err = {0};
    int bf16 = 0;
    if (record_parse_precision(precision, &bf16, &err)) {
        cli_error(&err);
        return 2;
    }
    model m;
    if (model_load(&m, model_path, arch, img_size, &err) != AS_OK) return cli_error(&err);
    if (bf16 && model_use_bf16(&m, &err) != AS_OK) {
        model_free(&m);
        return cli_error(&err);
    }
    dataset ds;
    if (dataset_open(&ds, images, &err) != AS_OK) {
        model_free(&m);
        return cli_error(&err);
    }
    ds.max_pixels = max_pixels;
    record_opts o;
    memset(&o, 0, sizeof o);
    char cmdline[4096];
    cli_command_line(argc + 1, argv - 1, cmdline, sizeof cmdline);
    o.out = out;
    o.mode = resume ? TRACE_RESUME : force ? TRACE_FORCE : TRACE_CREATE;
    o.spec.batch = batch;
    o.spec.command_line = cmdline;
    o.spec.model_source = m.source; /* for messages; record_run sets it again */
    o.max_images = limit;
    o.quiet = quiet;
    o.skip_bad = skip_bad;
    o.refuse_idle_internals = 1;
    int rc = record_parse_selection(&o, &m.cfg, what, layers, heads, dtype, compress, rows, &err);
    o.spec.compress_given = compress_given;
    if (!rc) rc = record_parse_windows(&o.spec, &m.cfg, windows, &err);
    if (!rc && dense_maps) rc = record_dense_maps(&o.spec, &m.cfg, &err);
    if (rc) {
        dataset_free(&ds);
        model_free(&m);
        cli_error(&err);
        return rc;
    }
    record_result res;
    as_status st = record_run(&m, &ds, &o, &res, &err);
    if (st == AS_OK && !quiet) {
        runtime_info ri;
        char blas[256];
        runtime_get_info(&ri);
        runtime_info_for_model(&ri, &m.cfg, m.params.pack);
        runtime_describe(&ri, blas, sizeof blas);
        char line[2048];
        snprintf(line, sizeof line, "recorded %ld images%s into %s in %.1f s (%.1f img/s; %s)", res.recorded,
                 res.resumed ? " more" : "", out, res.seconds, res.seconds > 0 ? res.recorded / res.seconds : 0.0,
                 blas);
        cli_wrap(stdout, 0, 9, line);
        if (res.resumed) printf("resumed after %ld images already in the trace\n", res.resumed);
        if (o.spec.precision.checked) {
            precision_describe(&o.spec.precision, line, sizeof line);
            cli_wrap(stdout, 0, 4, line);
        }
        if (res.skipped)
        {
            snprintf(line, sizeof line, "skipped %ld unreadable input%s (listed with the reason in %s:/skipped)",
                     res.skipped, res.skipped == 1 ? "" : "s", out);
            cli_wrap(stdout, 0, 8, line);
        }
        printf("next: attnscope info %s\n", out);
    }
    /* after the run, so that an error stays one line */
    if (st == AS_OK) runtime_warn("record");
    dataset_free(&ds);
    model_free(&m);
    if (st != AS_OK) return cli_error(&err);
    return 0;
}

