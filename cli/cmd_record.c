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

/* The one mutable global: a signal handler can only talk through a sig_atomic_t. */
static volatile sig_atomic_t record_signal = 0;

static void on_signal(int sig) {
    record_signal = sig;
    signal(sig, SIG_DFL); /* a second Ctrl-C stops at once; the trace stays readable (SWMR) */
}

as_status record_run(const model *m, const dataset *ds, record_opts *o, record_result *res,
                     as_error *err) {
    const vit_config *c = &m->cfg;
    trace_spec *s = &o->spec;
    memset(res, 0, sizeof *res);
    s->cfg = *c;
    s->params = &m->params;
    s->model_source = m->source;
    s->weights_dtype = m->weights_dtype;
    s->n_class_names = ds->n_classes;
    s->class_names = ds->classes;
    const int B = s->batch, S = c->img_size;
    const long total = o->max_images > 0 && o->max_images < ds->count ? o->max_images : ds->count;

    as_status rc = dataset_check(ds, c, err);
    if (rc != AS_OK) return rc;
    trace_writer *w = NULL;
    int done = 0;
    char(*done_paths)[1024] = NULL;
    rc = trace_writer_open(&w, o->out, s, o->mode, &done, &done_paths, err);
    if (rc != AS_OK) return rc;
    for (int i = 0; i < done && done_paths; i++)
        if (i >= total || strcmp(done_paths[i], ds->paths[i]) != 0) {
            as_fail(err, AS_ERR_ARG, "%s: --resume: image %d in the trace is %s but the input "
                    "list has %s there: resume with the same --images", o->out, i,
                    done_paths[i], i < total ? ds->paths[i] : "nothing");
            free(done_paths);
            trace_writer_close(w, 0, "resume mismatch", NULL);
            return AS_ERR_ARG;
        }
    free(done_paths);
    res->resumed = done;

    size_t act_bytes = vit_acts_carve(c, B, NULL, NULL);
    void *arena = aligned_alloc(64, act_bytes);
    float *x = aligned_alloc(64, ((size_t)B * c->in_chans * S * S * 4 + 63) & ~(size_t)63);
    if (!arena || !x) {
        free(arena);
        free(x);
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
    progress_init(&pg, "record", total, done);
    const double t0 = cli_now();
    long i = done;
    as_status loop_rc = AS_OK;
    as_error item_err = {0};
    while (i < total && !record_signal) {
        if (trace_writer_failed(w, NULL)) break;
        trace_slot *sl = trace_writer_acquire(w);
        const int n = (int)(total - i < B ? total - i : B);
        int bad = -1;
        /* decoding and resizing are independent per image: spread them over the threads */
#pragma omp parallel for schedule(dynamic, 1)
        for (int b = 0; b < n; b++) {
            as_error e = {0};
            const size_t img = (size_t)c->in_chans * S * S;
            if (dataset_load(ds, (int)(i + b), x + b * img, sl->rgb + (size_t)b * S * S * 3, c, &e) != AS_OK) {
#pragma omp critical
                if (bad < 0 || b < bad) {
                    bad = b;
                    item_err = e;
                }
            }
        }
        if (bad >= 0) {
            sl->n = 0;
            trace_writer_submit(w, sl); /* an empty slot goes back untouched */
            loop_rc = item_err.status;
            *err = item_err;
            break;
        }
        vit_forward(c, &m->params, &acts, x, n, &sl->rec);
        if (c->num_classes > 0)
            memcpy(sl->logits, acts.logits, (size_t)n * c->num_classes * sizeof(float));
        for (int b = 0; b < n; b++) {
            snprintf(sl->paths[b], sizeof sl->paths[b], "%s", ds->paths[i + b]);
            sl->labels[b] = ds->labels[i + b];
        }
        sl->n = n;
        trace_writer_submit(w, sl);
        i += n;
        progress_update(&pg, trace_writer_done(w));
    }
    progress_finish(&pg);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);

    const int interrupted = record_signal != 0;
    const char *reason = interrupted ? (record_signal == SIGINT ? "SIGINT" : "SIGTERM")
                         : loop_rc != AS_OK ? "input error" : NULL;
    as_error close_err = {0};
    long before_close = i;
    as_status crc = trace_writer_close(w, reason == NULL && i == total, reason, &close_err);
    res->seconds = cli_now() - t0;
    res->recorded = before_close - done;
    res->complete = reason == NULL && crc == AS_OK && i == total;
    free(arena);
    free(x);
    /* a new trace that holds nothing is no use to anyone: do not leave it behind */
    if (done == 0 && i == 0 && (crc != AS_OK || loop_rc != AS_OK || interrupted)) remove(o->out);
    if (crc != AS_OK) {
        *err = close_err;
        return crc;
    }
    if (loop_rc != AS_OK) {
        /* append the recovery advice to the loader's one-line message */
        size_t L = strlen(err->msg);
        if (i > 0)
            snprintf(err->msg + L, sizeof err->msg - L, "; the trace keeps the %ld images before "
                     "it: fix or remove the file, then run again with --resume", i);
        else
            snprintf(err->msg + L, sizeof err->msg - L, "; nothing was recorded: fix or remove "
                     "the file and run again");
        return loop_rc;
    }
    if (interrupted)
        return as_fail(err, AS_ERR_INTERRUPTED, "%s: interrupted (%s) after %ld of %ld images; "
                       "the trace holds them and is marked incomplete: continue with --resume",
                       o->out, reason, i, total);
    return AS_OK;
}

static void usage(FILE *f) {
    fprintf(f,
"usage: attnscope record --model DIR_OR_FILE [--arch NAME|CONFIG.json] --images PATH --out run.h5\n"
"                        [options]\n"
"Runs a ViT/DeiT checkpoint over images and records attention into an HDF5 trace.\n\n"
"  --model PATH       timm-layout folder (config.json + model.safetensors) or .safetensors file\n"
"  --arch NAME        architecture (attnscope info --list-archs) or a JSON model config;\n"
"                     needed for a bare .safetensors without config.json\n"
"  --images PATH      an image, a folder (recursive), an ImageFolder tree (class sub-folders\n"
"                     give labels), a .txt list (one path [label] per line), or a .npy /\n"
"                     .safetensors tensor (N,3,H,W) of preprocessed float32 images\n"
"  --out FILE         the trace (HDF5); never overwritten without --force\n"
"  --record LIST      what to record: attn,scores,qk,q,k,tokens,internals (default attn);\n"
"                     internals: a mechanism's intermediate maps (LSLA's softmax before the\n"
"                     outer bias, Refiner's expanded and convolved maps)\n"
"  --layers LIST      layers to record, e.g. 0-11 or 0,5,11 (default all)\n"
"  --heads LIST       heads to record (default all)\n"
"  --query-rows R     all (default) or prefix: only the class/distillation tokens' rows\n"
"  --dtype T          f16 (default) or f32 storage\n"
"  --compress C       none (default), lz4 (hdf5-filter-plugin) or deflate[:LEVEL] (gzip+shuffle)\n"
"  --batch N          images per batch (default 8, at most %d)\n"
"  --img-size N       run at another input size (position embeddings resampled)\n"
"  --threads N        threads (default: all cores)\n"
"  --limit N          record only the first N images\n"
"  --max-image-pixels N  refuse images of more than N pixels (default 178956970, PIL's\n"
"                     decompression-bomb limit: 2 x Image.MAX_IMAGE_PIXELS)\n"
"  --resume           continue an interrupted trace\n"
"  --force            overwrite an existing trace\n"
"  -q, --quiet        no summary\n"
"Progress shows on a terminal; Ctrl-C stops after the current batch, keeping every completed\n"
"image (then --resume continues).\n", TRACE_MAX_BATCH);
}

int record_parse_selection(record_opts *o, const vit_config *c, const char *what,
                                  const char *layers, const char *heads, const char *dtype,
                                  const char *compress, const char *rows, as_error *err) {
    trace_spec *s = &o->spec;
    s->quantities = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", what);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (strcmp(tok, "attn") == 0) s->quantities |= 1u << TRACE_Q_ATTN;
        else if (strcmp(tok, "scores") == 0) s->quantities |= 1u << TRACE_Q_SCORES;
        else if (strcmp(tok, "qk") == 0) s->quantities |= 1u << TRACE_Q_Q | 1u << TRACE_Q_K;
        else if (strcmp(tok, "q") == 0) s->quantities |= 1u << TRACE_Q_Q;
        else if (strcmp(tok, "k") == 0) s->quantities |= 1u << TRACE_Q_K;
        else if (strcmp(tok, "tokens") == 0) s->quantities |= 1u << TRACE_Q_TOKENS;
        else if (strcmp(tok, "internals") == 0) s->quantities |= 1u << TRACE_Q_X0 | 1u << TRACE_Q_X1;
        else if (strcmp(tok, "all") == 0) s->quantities |= (1u << TRACE_Q_COUNT) - 1;
        else {
            as_fail(err, AS_ERR_ARG, "--record \"%s\": unknown quantity; use attn, scores, qk, q, "
                    "k, tokens, internals or all", tok);
            return 2;
        }
    }
    if (!s->quantities) {
        as_fail(err, AS_ERR_ARG, "--record: name at least one of attn, scores, qk, tokens");
        return 2;
    }
    if ((s->n_layers = cli_parse_list(layers, c->depth, s->layers, VIT_MAX_DEPTH, "--layers", err)) < 0) return 2;
    if ((s->n_heads = cli_parse_list(heads, c->num_heads, s->heads, 1024, "--heads", err)) < 0) return 2;
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
        s->prefix_rows_only = 1;
    } else {
        as_fail(err, AS_ERR_ARG, "--query-rows \"%s\": use all or prefix", rows);
        return 2;
    }
    return 0;
}

int cmd_record(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"arch", required_argument, 0, 'a'},
        {"images", required_argument, 0, 'i'}, {"out", required_argument, 0, 'o'},
        {"record", required_argument, 0, 'r'}, {"layers", required_argument, 0, 'L'},
        {"heads", required_argument, 0, 'H'}, {"dtype", required_argument, 0, 'd'},
        {"compress", required_argument, 0, 'c'}, {"batch", required_argument, 0, 'b'},
        {"threads", required_argument, 0, 't'}, {"img-size", required_argument, 0, 's'},
        {"limit", required_argument, 0, 'n'}, {"query-rows", required_argument, 0, 'R'},
        {"resume", no_argument, 0, 'u'}, {"force", no_argument, 0, 'f'},
        {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'},
        {"max-image-pixels", required_argument, 0, 'P'}, {0, 0, 0, 0}};
    const char *model_path = NULL, *arch = NULL, *images = NULL, *out = NULL, *what = "attn";
    int max_pixels = 0;
    const char *layers = "all", *heads = "all", *dtype = "f16", *compress = "none", *rows = "all";
    int batch = 8, threads = 0, img_size = 0, limit = 0, resume = 0, force = 0, quiet = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "m:a:i:o:qh", opts, NULL)) != -1) {
        int ok = 1;
        switch (ch) {
        case 'm': model_path = optarg; break;
        case 'a': arch = optarg; break;
        case 'i': images = optarg; break;
        case 'o': out = optarg; break;
        case 'r': what = optarg; break;
        case 'L': layers = optarg; break;
        case 'H': heads = optarg; break;
        case 'd': dtype = optarg; break;
        case 'c': compress = optarg; break;
        case 'R': rows = optarg; break;
        case 'b': ok = cli_parse_int(optarg, 1, TRACE_MAX_BATCH, &batch); break;
        case 't': ok = cli_parse_int(optarg, 1, 1024, &threads); break;
        case 's': ok = cli_parse_int(optarg, 1, 16384, &img_size); break;
        case 'n': ok = cli_parse_int(optarg, 1, 1 << 30, &limit); break;
        case 'P': ok = cli_parse_int(optarg, 1, 1 << 30, &max_pixels); break;
        case 'u': resume = 1; break;
        case 'f': force = 1; break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (!ok) {
            fprintf(stderr, "attnscope record: bad value \"%s\" (attnscope record --help)\n",
                    optarg);
            return 2;
        }
    }
    if (!model_path || !images || !out) {
        fprintf(stderr, "attnscope record: --model, --images and --out are required (attnscope "
                        "record --help)\n");
        return 2;
    }
    if (resume && force) {
        fprintf(stderr, "attnscope record: --resume and --force exclude each other\n");
        return 2;
    }
    runtime_set_threads(threads);
    as_error err = {0};
    model m;
    if (model_load(&m, model_path, arch, img_size, &err) != AS_OK) return cli_error(&err);
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
    o.max_images = limit;
    o.quiet = quiet;
    int rc = record_parse_selection(&o, &m.cfg, what, layers, heads, dtype, compress, rows, &err);
    if (rc) {
        dataset_free(&ds);
        model_free(&m);
        cli_error(&err);
        return rc;
    }
    record_result res;
    as_status st = record_run(&m, &ds, &o, &res, &err);
    if (st == AS_OK && !quiet) {
        printf("recorded %ld images%s into %s in %.1f s (%.1f img/s, %d threads)\n", res.recorded,
               res.resumed ? " more" : "", out, res.seconds,
               res.seconds > 0 ? res.recorded / res.seconds : 0.0, runtime_threads());
        if (res.resumed) printf("resumed after %ld images already in the trace\n", res.resumed);
        printf("next: attnscope info %s\n", out);
    }
    dataset_free(&ds);
    model_free(&m);
    if (st != AS_OK) return cli_error(&err);
    return 0;
}

