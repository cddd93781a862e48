/* cmd_demo.c: attnscope demo: the README's main job end to end with no download: a synthetic
 * model saved and reloaded as a timm checkpoint, generated images, a trace, a summary. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* readlink */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../analysis/analysis.h"
#include "../plot/figures.h"
#include "cli.h"

int cmd_demo(int argc, char **argv) {
    static const struct option opts[] = {{"out", required_argument, 0, 'o'},
                                         {"images", required_argument, 0, 'n'},
                                         {"threads", required_argument, 0, 't'},
                                         {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *dir = "attnscope-demo";
    int count = 32, threads = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'o': dir = optarg; break;
        case 'n':
            if (!cli_parse_int(optarg, 1, 100000, &count)) return 2;
            break;
        case 't':
            if (!cli_parse_int(optarg, 1, 1024, &threads)) return 2;
            break;
        case 'h':
            printf("usage: attnscope demo [--out DIR] [--images N] [--threads N]\n"
                   "Writes a synthetic DeiT-Tiny-sized checkpoint and N generated images into DIR,\n"
                   "records every attention map and block output into DIR/run.h5, and prints a\n"
                   "summary. No download. The model has random weights (no trained model ships\n"
                   "yet), so its maps show an untrained network's attention.\n");
            return 0;
        default: return 2;
        }
    }
    runtime_set_threads(threads);
    as_error err = {0};
    if (cli_make_dirs(dir)) return 1;
    char images[1100], model_dir[1100], out[1100];
    snprintf(images, sizeof images, "%s/images", dir);
    snprintf(model_dir, sizeof model_dir, "%s/model", dir);
    snprintf(out, sizeof out, "%s/run.h5", dir);
    printf("attnscope demo: everything goes into %s/\n", dir);
    printf("  note: the model is SYNTHETIC (DeiT-Tiny architecture, 4 classes, deterministic random\n"
           "        weights): its maps show an untrained network, not learned attention.\n");

    /* 1. a checkpoint in the Hugging Face timm layout, written and read back like any other */
    vit_config cfg = *vit_arch_find("deit_tiny_patch16_224");
    cfg.num_classes = 4;
    model gen;
    if (model_init_random(&gen, &cfg, 2026, &err) != AS_OK) return cli_error(&err);
    as_status rc = model_save_dir(&gen, model_dir, SAFETENSORS_F32, &err);
    model_free(&gen);
    if (rc != AS_OK) return cli_error(&err);
    printf("  model   %s/ (config.json + model.safetensors)\n", model_dir);

    /* 2. images: shapes of 4 kinds as an ImageFolder tree, so labels come from folder names */
    if (synth_write_images(images, count, 256, 7, &err) != AS_OK) return cli_error(&err);
    printf("  images  %s/ (%d generated PNGs in 4 class folders)\n", images, count);

    model m;
    if (model_load(&m, model_dir, NULL, 0, &err) != AS_OK) return cli_error(&err);
    dataset ds;
    if (dataset_open(&ds, images, &err) != AS_OK) {
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
    /* a first look: where the class token attends in the last layer, head 0, first image */
    const int T = r.num_tokens, g = vit_grid(&r.cfg);
    float *map = malloc((size_t)T * T * sizeof *map);
    int best = -1;
    float bestv = -1, clsself = 0;
    if (map && trace_read_head(&r, TRACE_Q_ATTN, 0, r.cfg.depth - 1, 0, map, &err) == AS_OK) {
        clsself = map[0];
        for (int t = r.num_prefix; t < T; t++)
            if (map[t] > bestv) bestv = map[t], best = t - r.num_prefix;
    }
    free(map);
    printf("  trace   %s: %ld images x %d layers x %d heads of %dx%d maps, plus scores, Q/K and\n"
           "          block outputs (float16): %.1f MB\n", out, r.n_images, r.n_layers, r.n_heads,
           T, T, fb / 1e6);
    printf("  speed   %.1f img/s recording everything on %d threads (%.2f s)\n",
           res.recorded / res.seconds, runtime_threads(), res.seconds);
    if (best >= 0)
        printf("  look    image 0, last layer, head 0: the class token keeps %.3f on itself and "
               "attends most to patch (%d, %d) with %.4f\n", (double)clsself, best / g, best % g,
               (double)bestv);
    trace_reader_close(&r);

    /* 3. the analyses, into the trace's /analysis group */
    analysis_opts ao;
    analysis_opts_default(&ao);
    ao.quiet = 1;
    ao.command_line = "attnscope demo";
    ao.threads = runtime_threads();
    analysis_report rep;
    if (analysis_run(out, NULL, &ao, &rep, &err) != AS_OK) return cli_error(&err);
    printf("  analyze %d metrics over %ld images in %.2f s into %s:/analysis (ALS, cross-layer\n"
           "          similarity, Q/K, feature evolution, distance, entropy, rollout, LaViT's\n"
           "          diagonality; docs/analysis.md)\n", rep.metrics_run, rep.images, rep.seconds, out);

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
    printf("  figures %s/: %d PDFs (ALS, similarity, Q/K, evolution, CKA, distance, entropy,\n"
           "          attention, layers x heads grid, rollout; docs/figures.md)\n", figdir, nfig);
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
           "  %s plot attention %s --layer 5 --head 1 --query 0 -o att.png   (attnscope plot --list)\n"
           "  h5dump -H %s | less\n"
           "  python3 -c \"import h5py; f = h5py.File('%s'); print(f['layers/11/attn'].shape)\"\n"
           "  %s record --model DIR --images YOUR_IMAGES --out run.h5   (real checkpoints)\n",
           prog, out, prog, out, prog, out, prog, out, out, out, prog);
    return 0;
}
