/* cmd_demo.c: attnscope demo: the README's main job end to end with no download: a small ViT
 * trained on the built-in shapes dataset (about two minutes on 2 cores), its held-out attention
 * recorded before, during and after training, the analyses, and the figure set. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* readlink */
#include <getopt.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../analysis/analysis.h"
#include "../io/atomic.h"
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

static void print_series(const char *what, const double *a, const double *b, int n, const char *unit) {
    printf("               %-24s", what);
    for (int l = 0; l < n; l++) printf(" %5.2f->%-5.2f", a[l], b[l]);
    printf(" %s\n", unit);
}

int cmd_demo(int argc, char **argv) {
    static const struct option opts[] = {{"out", required_argument, 0, 'o'},
                                         {"epochs", required_argument, 0, 'e'},
                                         {"train-images", required_argument, 0, 'n'},
                                         {"images", required_argument, 0, 'i'},
                                         {"threads", required_argument, 0, 't'},
                                         {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *dir = "attnscope-demo";
    int epochs = 12, train_images = 8000, count = 64, threads = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'o': dir = optarg; break;
        case 'e':
            if (!cli_parse_int(optarg, 1, 1000, &epochs)) return 2;
            break;
        case 'n':
            if (!cli_parse_int(optarg, 120, 10000000, &train_images)) return 2;
            break;
        case 'i':
            if (!cli_parse_int(optarg, 1, 10000, &count)) return 2;
            break;
        case 't':
            if (!cli_parse_int(optarg, 1, 1024, &threads)) return 2;
            break;
        case 'h':
            printf("usage: attnscope demo [--out DIR] [--epochs 12] [--train-images 8000] [--images 64]\n"
                   "                      [--threads N]\n"
                   "Trains a small ViT (DIR/model.json) on the built-in shapes dataset (6 classes) with\n"
                   "attnscope train, recording the attention of N held-out images before, half-way and\n"
                   "after training; then records every map, score, Q/K and block output of the trained\n"
                   "model into DIR/run.h5, runs every analysis and writes the figure set. No download;\n"
                   "about two minutes on 2 cores.\n");
            return 0;
        default: return 2;
        }
    }
    runtime_set_threads(threads);
    as_error err = {0};
    if (cli_make_dirs(dir)) return 1;
    char cfg_path[1100], train_dir[1100], out[1100], heldout[1200];
    snprintf(cfg_path, sizeof cfg_path, "%s/model.json", dir);
    snprintf(train_dir, sizeof train_dir, "%s/train", dir);
    snprintf(out, sizeof out, "%s/run.h5", dir);
    printf("attnscope demo: everything goes into %s/\n", dir);

    /* 1. train: a fresh run each time (the demo is re-entrant) */
    atomic_file af;
    if (atomic_file_begin(&af, cfg_path, &err) != AS_OK) return cli_error(&err);
    fputs(demo_model, af.fp);
    if (atomic_file_commit(&af, &err) != AS_OK) return cli_error(&err);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", train_dir);
    if (strchr(train_dir, '\'') || system(cmd) != 0) {
        fprintf(stderr, "attnscope: %s: cannot remove the previous demo run\n", train_dir);
        return 1;
    }
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
    printf("  1. train   %s: 4 blocks x 4 heads, dim 64, 4x4 patches of 32x32 images (141,766\n"
           "             parameters) on the built-in shapes (circle, square, triangle, cross, ring,\n"
           "             diamond on textured backgrounds), %d training images, %d epoch%s\n",
           cfg_path, train_images, epochs, epochs == 1 ? "" : "s");
    fflush(stdout);
    train_result tr;
    as_status rc = train_run(&to, &tr, &err);
    if (rc != AS_OK) return cli_error(&err);
    char when[64];
    if (to.record_every < epochs) snprintf(when, sizeof when, "0, %d and %d", to.record_every, epochs);
    else snprintf(when, sizeof when, "0 and %d", epochs);
    printf("             held-out accuracy %.1f%% (chance %.1f%%) on %d images, %.0f img/s, %.0f s;\n"
           "             checkpoint %s/latest, traces of %d held-out images at epochs %s\n",
           100 * tr.val_acc, 100.0 / tr.n_classes, tr.n_val, tr.img_per_s, tr.seconds, train_dir, count,
           when);

    /* 2. the trained model over the held-out images, everything recorded */
    snprintf(heldout, sizeof heldout, "%s/heldout", train_dir);
    char latest[1200];
    snprintf(latest, sizeof latest, "%s/latest", train_dir);
    model m;
    if (model_load(&m, latest, NULL, 0, &err) != AS_OK) return cli_error(&err);
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
    if (rc != AS_OK) return cli_error(&err);

    trace_reader r;
    if (trace_reader_open(&r, out, &err) != AS_OK) return cli_error(&err);
    double fb, db;
    trace_sizes(&r, &fb, &db);
    printf("  2. record  %s: the trained model over %ld held-out images, every map of %d layers x\n"
           "             %d heads (%dx%d), scores, Q/K and block outputs (float16, %.1f MB), %.0f img/s\n",
           out, r.n_images, r.n_layers, r.n_heads, r.num_tokens, r.num_tokens, fb / 1e6,
           res.recorded / res.seconds);
    trace_reader_close(&r);

    /* 3. the analyses, into the trace's /analysis group; distance and entropy also over the
     *    traces taken during training, to show what training changed */
    analysis_opts ao;
    analysis_opts_default(&ao);
    ao.quiet = 1;
    ao.command_line = "attnscope demo";
    ao.threads = runtime_threads();
    analysis_report rep;
    if (analysis_run(out, NULL, &ao, &rep, &err) != AS_OK) return cli_error(&err);
    printf("  3. analyze %d metrics over %ld images in %.2f s into %s:/analysis (ALS, cross-layer\n"
           "             similarity, Q/K, feature evolution, distance, entropy, rollout, LaViT's\n"
           "             diagonality; docs/analysis.md)\n", rep.metrics_run, rep.images, rep.seconds, out);
    char first[1200], last[1200];
    snprintf(first, sizeof first, "%s/trace-epoch-000.h5", train_dir);
    snprintf(last, sizeof last, "%s/trace-epoch-%03d.h5", train_dir, epochs);
    if ((ao.metrics = analysis_metric_mask("distance,entropy", &err)) == 0) return cli_error(&err);
    ao.explicit_metrics = 1;
    ao.entropy_normalize = 1;
    if (analysis_run(first, NULL, &ao, &rep, &err) != AS_OK || analysis_run(last, NULL, &ao, &rep, &err) != AS_OK)
        return cli_error(&err);
    double d0[VIT_MAX_DEPTH], d1[VIT_MAX_DEPTH], e0[VIT_MAX_DEPTH], e1[VIT_MAX_DEPTH];
    const int nd = head_means(first, "distance", d0, VIT_MAX_DEPTH), nd1 = head_means(last, "distance", d1, VIT_MAX_DEPTH);
    const int ne = head_means(first, "entropy", e0, VIT_MAX_DEPTH), ne1 = head_means(last, "entropy", e1, VIT_MAX_DEPTH);
    if (nd && nd == nd1 && ne && ne == ne1) {
        printf("             what training changed, per layer (held-out images, epoch 0 -> %d):\n", epochs);
        print_series("mean attention distance", d0, d1, nd, "px");
        print_series("entropy / log T", e0, e1, ne, "");
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
    for (int i = 0; i < figure_count(); i++) {
        char path[1300];
        if (figure_get(i)->applies && !figure_get(i)->applies(&fo.src[0])) continue;
        snprintf(path, sizeof path, "%s/%s.pdf", figdir, figure_get(i)->name);
        if (figure_render(figure_get(i), &fo, path, &err) != AS_OK) {
            fig_source_close(&fo.src[0]);
            return cli_error(&err);
        }
        nfig++;
    }
    fig_source_close(&fo.src[0]);
    printf("  4. figures %s/: %d PDFs (ALS, similarity, Q/K, evolution, CKA, distance, entropy,\n"
           "             attention, layers x heads grid, rollout; docs/figures.md)\n", figdir, nfig);
    /* name the program as the user can type it: relative to here when below here */
    char exe[1024] = "attnscope", cwd[1024];
    ssize_t L = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (L > 0) exe[L] = 0;
    else snprintf(exe, sizeof exe, "attnscope");
    const char *prog = exe;
    if (getcwd(cwd, sizeof cwd) && strncmp(exe, cwd, strlen(cwd)) == 0 && exe[strlen(cwd)] == '/')
        prog = exe + strlen(cwd) + 1;
    printf("\nnext:\n"
           "  %s view %s   (the viewer: hover a patch; ? lists the keys)\n"
           "  %s info %s\n"
           "  %s analyze %s --metrics als,similarity   (the numbers; --csv DIR for tables)\n"
           "  %s plot attention %s --layer 3 --head 1 --query 0 -o att.png   (attnscope plot --list)\n"
           "  %s view %s/trace-epoch-000.h5   (the same images before training)\n"
           "  %s train --config experiments/models/lavit_shapes.json --data shapes --out lavit\n"
           "      (another mechanism: lmsa, lsla, lavit, mait, refiner; docs/training.md)\n"
           "  h5dump -H %s | less\n"
           "  python3 -c \"import h5py; f = h5py.File('%s'); print(f['layers/03/attn'].shape)\"\n",
           prog, out, prog, out, prog, out, prog, out, prog, train_dir, prog, out, out);
    return 0;
}
