/* cmd_demo.c: attnscope demo: the README's main job end to end with no download: a small ViT
 * trained on the built-in shapes dataset (about two minutes on 2 cores), its held-out attention
 * recorded before, during and after training, the analyses, and the figure set. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* readlink */
#include <dirent.h>
#include <getopt.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../analysis/analysis.h"
#include "../io/atomic.h"
#include "../io/checkpoint.h"
#include "../plot/figures.h"
#include "cli.h"

/* The demo's model: experiments/models/vit_shapes.json. */
static const char demo_model[] =
    "{\"architecture\": \"custom\",\n"
    " \"img_size\": 32, \"patch_size\": 4, \"in_chans\": 3,\n"
    " \"embed_dim\": 64, \"depth\": 4, \"num_heads\": 4, \"mlp_ratio\": 2,\n"
    " \"num_classes\": 6, \"qkv_bias\": true, \"class_token\": true, \"global_pool\": \"token\"}\n";

/* /analysis/METRIC/head_mean/mean of a trace's results (one value per layer); 0 when absent. */
static int head_means(const char *trace, const char *metric, double *out, int max) {
    char name[128];
    snprintf(name, sizeof name, "/analysis/%s/head_mean/mean", metric);
    hid_t f = (hid_t)analysis_results_open(trace);
    if (f < 0) return 0;
    int n = 0;
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    if (d >= 0) {
        hid_t s = H5Dget_space(d);
        hsize_t dims[1] = {0};
        if (H5Sget_simple_extent_ndims(s) == 1 && H5Sget_simple_extent_dims(s, dims, NULL) == 1 &&
            dims[0] <= (hsize_t)max && H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0)
            n = (int)dims[0];
        H5Sclose(s);
        H5Dclose(d);
    }
    H5Fclose(f);
    return n;
}

/* ---- an earlier demo's files -------------------------------------------------------------------
 * The demo refuses a folder that holds anything; with --force it removes what a demo writes, by
 * name, and nothing else: an --out pointed at a folder of the user's own loses none of it. */

/* entry is name, or name.tmpPID (a temporary an interrupted atomic write left) */
static int demo_is(const char *entry, const char *name) {
    const size_t n = strlen(name);
    if (strncmp(entry, name, n) != 0) return 0;
    if (entry[n] == 0) return 1;
    if (strncmp(entry + n, ".tmp", 4) != 0) return 0;
    for (const char *p = entry + n + 4; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

/* "PREFIX" + exactly `digits` digits + SUFFIX (then optionally .tmpPID) */
static int demo_is_numbered(const char *entry, const char *prefix, int digits, const char *suffix) {
    const size_t n = strlen(prefix);
    if (strncmp(entry, prefix, n) != 0) return 0;
    for (int i = 0; i < digits; i++)
        if (entry[n + (size_t)i] < '0' || entry[n + (size_t)i] > '9') return 0;
    return demo_is(entry + n + (size_t)digits, suffix);
}

static int demo_empty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n == 0;
}

/* Removes the files of dir that match(name) returns 1 for; 2: a checkpoint folder; 3: a
 * subfolder of held-out images. */
static void demo_remove_matching(const char *dir, int (*match)(const char *)) {
    DIR *d = opendir(dir);
    if (!d) return;
    char p[2300];
    for (struct dirent *e; (e = readdir(d));) {
        const int kind = match(e->d_name);
        if (!kind) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (kind == 2) checkpoint_remove(p);
        else if (kind == 3) {
            DIR *s = opendir(p);
            char q[2600];
            for (struct dirent *f; s && (f = readdir(s));)
                if (demo_is_numbered(f->d_name, "", 5, ".png")) {
                    snprintf(q, sizeof q, "%s/%s", p, f->d_name);
                    unlink(q);
                }
            if (s) closedir(s);
            rmdir(p);
        } else unlink(p);
    }
    closedir(d);
}

static int demo_top_file(const char *e) {
    return demo_is(e, "model.json") || demo_is(e, "run.h5") || demo_is(e, "run.analysis.h5");
}
static int demo_figure(const char *e) {
    char name[128];
    for (int i = 0; i < figure_count(); i++) {
        snprintf(name, sizeof name, "%s.pdf", figure_get(i)->name);
        if (demo_is(e, name)) return 1;
    }
    return 0;
}
static int demo_train_file(const char *e) {
    if (demo_is_numbered(e, "epoch-", 3, "") || demo_is_numbered(e, "step-", 7, "")) return 2;
    if (demo_is_numbered(e, "epoch-", 3, ".tmp") || demo_is_numbered(e, "epoch-", 3, ".old") ||
        demo_is_numbered(e, "step-", 7, ".tmp") || demo_is_numbered(e, "step-", 7, ".old")) return 2;
    return demo_is(e, "latest") || demo_is(e, ".latest.tmp") || demo_is(e, ".attnscope-train") ||
           demo_is(e, "log.csv") ||
           demo_is_numbered(e, "trace-epoch-", 3, ".h5") || demo_is_numbered(e, "trace-epoch-", 3, ".analysis.h5");
}
static int demo_heldout_class(const char *e) {
    static const char *const classes[] = {"circle", "square", "triangle", "cross", "ring", "diamond"};
    for (size_t i = 0; i < sizeof classes / sizeof *classes; i++)
        if (strcmp(e, classes[i]) == 0) return 3;
    return 0;
}

/* The files an earlier demo run wrote into dir; what remains is someone else's and stays. */
static void demo_clear(const char *dir) {
    char p[1300], q[1400];
    demo_remove_matching(dir, demo_top_file);
    snprintf(p, sizeof p, "%s/figures", dir);
    demo_remove_matching(p, demo_figure);
    rmdir(p);
    snprintf(p, sizeof p, "%s/train", dir);
    demo_remove_matching(p, demo_train_file);
    snprintf(q, sizeof q, "%s/heldout", p);
    demo_remove_matching(q, demo_heldout_class);
    rmdir(q);
    rmdir(p);
}

/* Ctrl-C: the demo has no --resume; its partial run stays for the user to look at. */
static int demo_interrupted(const char *dir) {
    const int dflt = strcmp(dir, "attnscope-demo") == 0;
    return cli_fail(130, "interrupted; %s holds a partial run: attnscope demo --force%s%s starts again", dir,
                    dflt ? "" : " --out ", dflt ? "" : dir);
}

/* One step of the summary, wrapped under its text column. */
#define step(...) cli_printf_wrap(13, __VA_ARGS__)

/* A command to try and what it does: beside it when that fits, else below it. */
static void next_line(const char *cmd, const char *what) {
    if (!what) printf("  %s\n", cmd);
    else if (2 + (int)strlen(cmd) + 3 + (int)strlen(what) + 2 <= cli_width()) printf("  %s   (%s)\n", cmd, what);
    else printf("  %s\n      (%s)\n", cmd, what);
}

static void print_series(const char *what, const double *a, const double *b, int n, const char *unit) {
    printf("               %-24s", what);
    for (int l = 0; l < n; l++) printf(" %5.2f->%-5.2f", a[l], b[l]);
    printf(" %s\n", unit);
}

static const cli_opt demo_opts_table[] = {
    /* key alias name           ARG    values           default           help */
    {'o', 'o', "out",           "DIR", NULL,            "attnscope-demo", "where everything goes; it must be new or empty"},
    {'e', 0,   "epochs",        "N",   "1..1000",       "12",             "training epochs"},
    {'n', 0,   "train-images",  "N",   "120..10000000", "8000",           "built-in shapes images to train on"},
    {'i', 0,   "images",        "N",   "1..10000",      "64",             "held-out images recorded and analysed"},
    {'t', 0,   "threads",       "N",   "1..1024",       "$OMP_NUM_THREADS, else all cores",      "threads"},
    {'f', 0,   "force",         NULL,  NULL,            NULL,
     "replace an earlier demo's files in DIR (only the files a demo writes are removed; anything else in DIR stays)"},
    {0}};

static const cli_cmd demo_cmd = {
    "demo", "[--out DIR] [options]",
    "Trains a small ViT (DIR/model.json) on the built-in shapes dataset (6 classes) with attnscope train, "
    "recording the attention of the held-out images before, half-way and after training; then records "
    "every map, score, Q/K and block output of the trained model into DIR/run.h5, runs every analysis and "
    "writes the figure set. No download; about two minutes on 2 cores.",
    demo_opts_table, NULL};

int cmd_demo(int argc, char **argv) {
    const char *dir = "attnscope-demo";
    int epochs = 12, train_images = 8000, count = 64, threads = 0, force = 0, ch;
    optind = 1;
    while ((ch = cli_opts_next(&demo_cmd, argc, argv)) >= 0) {
        int ok = 1;
        switch (ch) {
        case 'o': dir = optarg; break;
        case 'e': ok = cli_parse_int(optarg, 1, 1000, &epochs); break;
        case 'n': ok = cli_parse_int(optarg, 120, 10000000, &train_images); break;
        case 'i': ok = cli_parse_int(optarg, 1, 10000, &count); break;
        case 't': ok = cli_parse_int(optarg, 1, 1024, &threads); break;
        case 'f': force = 1; break;
        }
        if (!ok) return cli_bad_value(&demo_cmd, ch, optarg);
    }
    if (ch != CLI_END) return cli_opts_exit(ch);
    if (optind < argc) return cli_extra(&demo_cmd, argv[optind]);
    runtime_set_threads(threads);
    as_error err = {0};
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "attnscope demo: %s: exists and is not a folder; pass --out DIR for a new folder\n", dir);
        return 1;
    }
    if (!demo_empty(dir)) {
        if (!force)
            return cli_fail(1, "%s: already exists and is not empty (an earlier demo?); pass --force to replace "
                            "the demo's files in it, or --out DIR for a new folder", dir);
        demo_clear(dir);
    }
    if (cli_make_dirs(dir)) return 1;
    char cfg_path[1100], train_dir[1100], out[1100], heldout[1200];
    snprintf(cfg_path, sizeof cfg_path, "%s/model.json", dir);
    snprintf(train_dir, sizeof train_dir, "%s/train", dir);
    snprintf(out, sizeof out, "%s/run.h5", dir);
    runtime_info ri;
    runtime_get_info(&ri);
    char blas[256], gemm[288];
    snprintf(gemm, sizeof gemm, "%s", ri.gemm); /* the recording's; training runs on OpenBLAS */
    runtime_info_for_model(&ri, NULL, NULL);
    runtime_describe(&ri, blas, sizeof blas);
    if (strcmp(gemm, "OpenBLAS") != 0)
        step("attnscope demo: everything goes into %s/ (%s; the recording's linear layers on %s)", dir, blas, gemm);
    else
        step("attnscope demo: everything goes into %s/ (%s)", dir, blas);
    if (!demo_empty(dir)) step("               (files in %s that a demo does not write stay as they were)", dir);
    fflush(stdout);
    runtime_warn("demo");

    /* 1. train into a folder that is new or was cleared above */
    atomic_file af;
    if (atomic_file_begin(&af, cfg_path, &err) != AS_OK) return cli_error(&err);
    fputs(demo_model, af.fp);
    if (atomic_file_commit(&af, &err) != AS_OK) return cli_error(&err);
    char data[64];
    snprintf(data, sizeof data, "shapes:%d", train_images);
    train_opts to;
    train_opts_default(&to);
    to.config = cfg_path;
    to.data = data;
    to.out = train_dir;
    to.epochs = epochs;
    to.batch = 64;
    to.record_every = epochs >= 2 ? epochs / 2 : 1;
    to.record_images = count;
    to.keep = 1;
    to.command_line = "attnscope demo";
    to.others_stay = 1; /* --force cleared the demo's files above; the user's stay beside the run */
    step("  1. train   %s: 4 blocks x 4 heads, dim 64, 4x4 patches of 32x32 images (141,766 "
         "parameters) on the built-in shapes (circle, square, triangle, cross, ring, diamond on textured "
         "backgrounds), %d training images, %d epoch%s",
           cfg_path, train_images, epochs, epochs == 1 ? "" : "s");
    fflush(stdout);
    train_result tr;
    as_status rc = train_run(&to, &tr, &err);
    if (rc == AS_ERR_INTERRUPTED) return demo_interrupted(dir);
    if (rc != AS_OK) return cli_error(&err);
    char when[64];
    if (to.record_every < epochs) snprintf(when, sizeof when, "0, %d and %d", to.record_every, epochs);
    else snprintf(when, sizeof when, "0 and %d", epochs);
    step("             held-out accuracy %.1f%% (chance %.1f%%) on %d images, %.0f img/s, %.0f s; "
         "checkpoint %s, traces of %d held-out images at epochs %s",
         100 * tr.val_acc, 100.0 / tr.n_classes, tr.n_val, tr.img_per_s, tr.seconds, tr.checkpoint, count, when);

    /* 2. the trained model over the held-out images, everything recorded */
    snprintf(heldout, sizeof heldout, "%s/heldout", train_dir);
    /* the checkpoint this run wrote, not train/latest: a link can later point elsewhere */
    model m;
    if (model_load(&m, tr.checkpoint, NULL, 0, &err) != AS_OK) return cli_error(&err);
    dataset ds;
    if (dataset_open(&ds, heldout, &err) != AS_OK) {
        model_free(&m);
        return cli_error(&err);
    }
    record_opts o;
    memset(&o, 0, sizeof o);
    o.out = out;
    o.mode = TRACE_FORCE;
    o.spec.batch = 8;
    o.spec.command_line = "attnscope demo";
    if (record_parse_selection(&o, &m.cfg, "attn,scores,qk,tokens", "all", "all", "f16", "none",
                               "all", &err)) {
        dataset_free(&ds);
        model_free(&m);
        return cli_error(&err);
    }
    record_result res;
    rc = record_run(&m, &ds, &o, &res, &err);
    dataset_free(&ds);
    model_free(&m);
    if (rc == AS_ERR_INTERRUPTED) return demo_interrupted(dir);
    if (rc != AS_OK) return cli_error(&err);

    trace_reader r;
    if (trace_reader_open(&r, out, &err) != AS_OK) return cli_error(&err);
    double fb, db;
    trace_sizes(&r, &fb, &db);
    step("  2. record  the trained model over %ld held-out images, every map of %d layers x %d heads "
         "(%dx%d), scores, Q/K and block outputs (float16, %.1f MB), %.0f img/s, into %s", r.n_images,
         r.n_layers, r.n_heads, r.num_tokens, r.num_tokens, fb / 1e6, res.recorded / res.seconds, out);
    trace_reader_close(&r);

    /* 3. the analyses, into the results file beside each trace (run.analysis.h5); distance and entropy also over the
     *    traces taken during training, to show what training changed */
    analysis_opts ao;
    analysis_opts_default(&ao);
    ao.quiet = 1;
    ao.command_line = "attnscope demo";
    ao.threads = runtime_threads();
    /* the demo's ViT has no less-attention layers, where LaViT's terms are defined: the map variant */
    analysis_choice_set(&ao, "diag-map", "attn", &err);
    analysis_report rep;
    if (analysis_run(out, NULL, &ao, &rep, &err) != AS_OK) return cli_error(&err);
    char side[1200];
    analysis_results_path(out, side, sizeof side);
    step("  3. analyze %d metric%s over %ld images in %.2f s into %s (docs/analysis.md)",
         rep.metrics_run, rep.metrics_run == 1 ? "" : "s", rep.images, rep.seconds, side);
    char first[1200], last[1200];
    snprintf(first, sizeof first, "%s/trace-epoch-000.h5", train_dir);
    snprintf(last, sizeof last, "%s/trace-epoch-%03d.h5", train_dir, epochs);
    if ((ao.metrics = analysis_metric_mask("distance,entropy", &err)) == 0) return cli_error(&err);
    ao.explicit_metrics = 1;
    ao.entropy_normalize = 0; /* nats, as the entropy figure plots them */
    if (analysis_run(first, NULL, &ao, &rep, &err) != AS_OK || analysis_run(last, NULL, &ao, &rep, &err) != AS_OK)
        return cli_error(&err);
    double d0[VIT_MAX_DEPTH], d1[VIT_MAX_DEPTH], e0[VIT_MAX_DEPTH], e1[VIT_MAX_DEPTH];
    const int nd = head_means(first, "distance", d0, VIT_MAX_DEPTH), nd1 = head_means(last, "distance", d1, VIT_MAX_DEPTH);
    const int ne = head_means(first, "entropy", e0, VIT_MAX_DEPTH), ne1 = head_means(last, "entropy", e1, VIT_MAX_DEPTH);
    if (nd && nd == nd1 && ne && ne == ne1) {
        printf("             what training changed, per layer (held-out images, epoch 0 -> %d):\n", epochs);
        print_series("mean attention distance", d0, d1, nd, "px");
        print_series("attention entropy", e0, e1, ne, "nats");
        trace_reader tr0;
        if (trace_reader_open(&tr0, first, &err) == AS_OK) { /* the scale the entropies move on */
            printf("               (uniform attention over all %d tokens: log T = %.2f nats)\n", tr0.num_tokens,
                   log((double)tr0.num_tokens));
            trace_reader_close(&tr0);
        }
    }

    /* 4. the figure set: every single-input recipe as PDF */
    char figdir[1200];
    snprintf(figdir, sizeof figdir, "%s/figures", dir);
    if (cli_make_dirs(figdir)) return 1;
    fig_opts fo;
    memset(&fo, 0, sizeof fo);
    fo.layer = fo.head = fo.image = fo.query = -1;
    if (fig_source_open(&fo.src[0], out, NULL, &err) != AS_OK) return cli_error(&err);
    fo.n_sources = 1;
    int nfig = 0;
    char names[1024] = "";
    for (int i = 0; i < figure_count(); i++) {
        char path[1300];
        if (figure_get(i)->applies && !figure_get(i)->applies(&fo.src[0])) continue;
        snprintf(path, sizeof path, "%s/%s.pdf", figdir, figure_get(i)->name);
        if (figure_render(figure_get(i), &fo, path, &err) != AS_OK) {
            fig_source_close(&fo.src[0]);
            return cli_error(&err);
        }
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", nfig++ ? ", " : "",
                 figure_get(i)->name);
    }
    fig_source_close(&fo.src[0]);
    step("  4. figures %s/: %d PDF%s: %s (docs/figures.md)", figdir, nfig, nfig == 1 ? "" : "s", names);
    /* name the program as the user can type it: relative to here when below here */
    char exe[1024] = "attnscope", cwd[1024];
    ssize_t L = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (L > 0) exe[L] = 0;
    else snprintf(exe, sizeof exe, "attnscope");
    const char *prog = exe;
    if (getcwd(cwd, sizeof cwd) && strncmp(exe, cwd, strlen(cwd)) == 0 && exe[strlen(cwd)] == '/')
        prog = exe + strlen(cwd) + 1;
    char next[2600];
    printf("\nnext:\n");
    snprintf(next, sizeof next, "%s view %s", prog, out);
    next_line(next, "the viewer: hover a patch; ? lists the keys");
    snprintf(next, sizeof next, "%s info %s", prog, out);
    next_line(next, NULL);
    snprintf(next, sizeof next, "%s analyze %s --metrics als,similarity", prog, out);
    next_line(next, "the numbers; --csv DIR for tables");
    snprintf(next, sizeof next, "%s plot attention %s --layer 3 --head 1 --query 0 -o att.png", prog, out);
    next_line(next, "attnscope plot --list");
    snprintf(next, sizeof next, "%s view %s/trace-epoch-000.h5", prog, train_dir);
    next_line(next, "the same images before training");
    snprintf(next, sizeof next, "%s train --config experiments/models/lavit_shapes.json --data shapes --out lavit", prog);
    next_line(next, "one config per mechanism and model: experiments/models/; docs/training.md");
    snprintf(next, sizeof next, "h5dump -H %s | less", out);
    next_line(next, NULL);
    snprintf(next, sizeof next, "python3 -c \"import h5py; f = h5py.File('%s'); print(f['layers/03/attn'].shape)\"", out);
    next_line(next, NULL);
    return 0;
}
