/* cmd_experiment.c: attnscope experiment: a declarative JSON file (models, images, what to
 * record, which analyses, which figures) run as record -> analyze -> plot into a folder, with an
 * index page. Each step leaves a stamp (what it was made from) in OUT/.state; a step whose
 * stamp matches, and whose output exists, is skipped, so a rerun only redoes what changed.
 * docs/experiments.md describes the format. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../analysis/analysis.h"
#include "../io/atomic.h"
#include "../plot/figures.h"
#include "cli.h"

#define EXP_MAX_MODELS 8
#define EXP_MAX_FIGURES 64

typedef struct {
    char name[64];
    const cJSON *spec;
    char trace[1200];
    char stamp[8192];       /* what its analysed trace was made from */
} exp_model;

typedef struct {
    const char *file;       /* the experiment file, for messages */
    char dir[1024];         /* its folder: relative paths in it start there */
    char out[1024];
    char images[1200];
    exp_model models[EXP_MAX_MODELS];
    int n_models;
} exp_run;

/* Was this step made from exactly `stamp`, and does its output exist? */
static int up_to_date(const exp_run *x, const char *key, const char *stamp, const char *output) {
    char path[1400];
    snprintf(path, sizeof path, "%s/.state/%s", x->out, key);
    char *old = model_read_text(path, NULL);
    struct stat sb;
    int ok = old && strcmp(old, stamp) == 0 && stat(output, &sb) == 0;
    free(old);
    return ok;
}

static as_status stamp_write(const exp_run *x, const char *key, const char *stamp, as_error *err) {
    char path[1400];
    snprintf(path, sizeof path, "%s/.state/%s", x->out, key);
    atomic_file af;
    if (atomic_file_begin(&af, path, err) != AS_OK) return err->status;
    fputs(stamp, af.fp);
    return atomic_file_commit(&af, err);
}

static void resolve(const exp_run *x, const char *p, char *out, size_t n) {
    if (p[0] == '/' || !x->dir[0]) snprintf(out, n, "%s", p);
    else snprintf(out, n, "%s/%s", x->dir, p);
}

static const char *jstr(const cJSON *o, const char *k, const char *def) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(j) ? j->valuestring : def;
}
static int jint(const cJSON *o, const char *k, int def) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(j) ? j->valueint : def;
}
static double jnum(const cJSON *o, const char *k, double def) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(j) ? j->valuedouble : def;
}

/* The images: a path, or {"synthetic": N, "size": S, "seed": K} generated once into OUT. */
static as_status prepare_images(exp_run *x, const cJSON *root, char *stamp, size_t sn, as_error *err) {
    const cJSON *im = cJSON_GetObjectItemCaseSensitive(root, "images");
    if (cJSON_IsString(im)) {
        resolve(x, im->valuestring, x->images, sizeof x->images);
        snprintf(stamp, sn, "images=%s", x->images);
        return AS_OK;
    }
    if (!cJSON_IsObject(im) || !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(im, "synthetic")))
        return as_fail(err, AS_ERR_CONFIG, "%s: \"images\" must be a path or {\"synthetic\": N}", x->file);
    int n = jint(im, "synthetic", 16), size = jint(im, "size", 224), seed = jint(im, "seed", 7);
    if (n < 1 || n > 100000 || size < 16 || size > 4096)
        return as_fail(err, AS_ERR_CONFIG, "%s: synthetic images: give 1..100000 images of 16..4096 px", x->file);
    snprintf(x->images, sizeof x->images, "%s/images-%d-%d-%d", x->out, n, size, seed);
    snprintf(stamp, sn, "synthetic=%d,%d,%d", n, size, seed);
    struct stat sb;
    if (stat(x->images, &sb) == 0) return AS_OK;
    printf("  images     %d synthetic %dx%d images -> %s\n", n, size, size, x->images);
    return synth_write_images(x->images, n, size, (unsigned long long)seed, err);
}

static as_status build_model(const exp_run *x, const cJSON *spec, model *m, as_error *err) {
    const char *path = jstr(spec, "model", NULL);
    if (path) {
        char p[1200];
        resolve(x, path, p, sizeof p);
        return model_load(m, p, jstr(spec, "arch", NULL), 0, err);
    }
    const cJSON *cfgj = cJSON_GetObjectItemCaseSensitive(spec, "config");
    if (!cJSON_IsObject(cfgj))
        return as_fail(err, AS_ERR_CONFIG, "%s: model \"%s\": give \"model\" (a checkpoint) or \"config\" "
                       "(a model config, random weights)", x->file, jstr(spec, "name", "?"));
    char *json = cJSON_PrintUnformatted(cfgj);
    vit_config c;
    memset(&c, 0, sizeof c);
    char what[256];
    snprintf(what, sizeof what, "%s (model %s)", x->file, jstr(spec, "name", "?"));
    as_status rc = json ? model_config_apply_json(&c, json, what, err) : as_fail(err, AS_ERR_NOMEM, "out of memory");
    free(json);
    if (rc == AS_OK) rc = model_init_random(m, &c, (unsigned long long)jint(spec, "seed", 1), err);
    return rc;
}

static void analyze_opts(const cJSON *a, analysis_opts *o) {
    analysis_opts_default(o);
    if (!a) return;
    o->als_window = jint(a, "als_window", o->als_window);
    o->discard = jnum(a, "discard", o->discard);
    o->entropy_normalize = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "entropy_normalize"));
    o->distance_renorm = strncmp(jstr(a, "distance_prefix", "drop"), "renorm", 6) == 0;
    const char *fu = jstr(a, "fusion", "mean");
    o->fusion = strcmp(fu, "max") == 0 ? ANALYSIS_FUSE_MAX : strcmp(fu, "min") == 0 ? ANALYSIS_FUSE_MIN : ANALYSIS_FUSE_MEAN;
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(a, "qk_thresholds");
    if (cJSON_IsArray(th)) {
        o->n_thresholds = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, th) if (cJSON_IsNumber(t) && o->n_thresholds < ANALYSIS_MAX_THRESHOLDS)
            o->thresholds[o->n_thresholds++] = t->valuedouble;
    }
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(a, "als_thresholds");
    if (cJSON_IsArray(al) && cJSON_GetArraySize(al) == 2) {
        o->als_low = cJSON_GetArrayItem(al, 0)->valuedouble;
        o->als_high = cJSON_GetArrayItem(al, 1)->valuedouble;
    }
}

/* record and analyze one model, each only when its stamp changed */
static as_status run_model(exp_run *x, exp_model *em, const cJSON *root, const char *img_stamp,
                           as_error *err) {
    const char *rec = jstr(root, "record", "attn");
    int limit = jint(root, "limit", 0);
    char *spec = cJSON_PrintUnformatted(em->spec);
    struct stat sb;
    char wstamp[256] = "";
    const char *path = jstr(em->spec, "model", NULL);
    if (path) { /* a checkpoint: its size and time, so a retrained one is picked up */
        char p[1200], w[1300];
        resolve(x, path, p, sizeof p);
        snprintf(w, sizeof w, "%s/model.safetensors", p);
        if (stat(w, &sb) == 0 || stat(p, &sb) == 0)
            snprintf(wstamp, sizeof wstamp, "%lld@%lld", (long long)sb.st_size, (long long)sb.st_mtime);
    }
    char rstamp[4096];
    snprintf(rstamp, sizeof rstamp, "attnscope %s\nmodel %s %s\n%s\nrecord %s limit %d\n", ATTNSCOPE_VERSION,
             spec ? spec : "", wstamp, img_stamp, rec, limit);
    free(spec);
    char key[128];
    snprintf(key, sizeof key, "%s.record", em->name);
    as_status rc = AS_OK;
    if (up_to_date(x, key, rstamp, em->trace)) {
        printf("  record     %-12s up to date (%s)\n", em->name, em->trace);
    } else {
        model m;
        if ((rc = build_model(x, em->spec, &m, err)) != AS_OK) return rc;
        dataset ds;
        if ((rc = dataset_open(&ds, x->images, err)) != AS_OK) {
            model_free(&m);
            return rc;
        }
        record_opts o;
        memset(&o, 0, sizeof o);
        o.out = em->trace;
        o.mode = TRACE_FORCE;
        o.quiet = 1;
        o.max_images = limit;
        o.spec.batch = 8;
        char cl[512];
        snprintf(cl, sizeof cl, "attnscope experiment %s (model %s)", x->file, em->name);
        o.spec.command_line = cl;
        if (record_parse_selection(&o, &m.cfg, rec, "all", "all", "f16", "none", "all", err)) rc = err->status;
        record_result res;
        if (rc == AS_OK) rc = record_run(&m, &ds, &o, &res, err);
        dataset_free(&ds);
        model_free(&m);
        if (rc != AS_OK) return rc;
        printf("  record     %-12s %ld images in %.2f s -> %s\n", em->name, res.recorded, res.seconds, em->trace);
        if ((rc = stamp_write(x, key, rstamp, err)) != AS_OK) return rc;
    }
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "analyze");
    char *aj = a ? cJSON_PrintUnformatted(a) : NULL;
    snprintf(em->stamp, sizeof em->stamp, "%sanalyze %s\n", rstamp, aj ? aj : "{}");
    free(aj);
    snprintf(key, sizeof key, "%s.analyze", em->name);
    if (up_to_date(x, key, em->stamp, em->trace)) {
        printf("  analyze    %-12s up to date\n", em->name);
        return AS_OK;
    }
    analysis_opts ao;
    analyze_opts(a, &ao);
    ao.quiet = 1;
    ao.command_line = "attnscope experiment";
    const char *ms = a ? jstr(a, "metrics", NULL) : NULL;
    if (ms && !(ao.metrics = analysis_metric_mask(ms, err))) return err->status;
    ao.explicit_metrics = ms != NULL;
    progress pg;
    progress_init(&pg, "analyze", 0, 0);
    ao.progress = progress_callback;
    ao.progress_ud = &pg;
    analysis_report rep;
    rc = analysis_run(em->trace, NULL, &ao, &rep, err);
    progress_finish(&pg);
    if (rc != AS_OK) return rc;
    printf("  analyze    %-12s %d metrics over %ld images in %.2f s\n", em->name, rep.metrics_run, rep.images, rep.seconds);
    return stamp_write(x, key, em->stamp, err);
}

/* Experiment, model and figure names become file and folder names under the output folder:
 * one path component each, so no name can write outside it ("../../x", "/etc/x") or onto the
 * folder's own state (".state"). */
static int exp_name_ok(const char *s, size_t max) {
    if (!s || !s[0] || strlen(s) >= max || s[0] == '.') return 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p == '/' || *p == '\\' || *p < 0x20 || *p == 0x7f) return 0;
    return 1;
}

as_status experiment_check(const char *text, const char *file, as_error *err) {
    cJSON *root = cJSON_Parse(text);
    as_status rc = AS_OK;
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(root, "models"), *m, *f;
    const char *name = cJSON_IsObject(root) ? jstr(root, "name", NULL) : NULL;
    if (!cJSON_IsObject(root)) {
        rc = as_fail(err, AS_ERR_CONFIG, "%s: not valid JSON: see docs/experiments.md", file);
    } else if (!name || !cJSON_IsArray(models) || cJSON_GetArraySize(models) < 1) {
        rc = as_fail(err, AS_ERR_CONFIG, "%s: needs \"name\" and a non-empty \"models\" list: see "
                     "docs/experiments.md", file);
    } else if (!exp_name_ok(name, 256)) {
        rc = as_fail(err, AS_ERR_CONFIG, "%s: \"name\": \"%s\" is not a plain folder name: use "
                     "letters, digits, '-' or '_' (no '/', no leading '.')", file, name);
    }
    int i = 0;
    const cJSON *mlist = rc == AS_OK ? models : NULL;
    cJSON_ArrayForEach(m, mlist) {
        const char *mn = jstr(m, "name", NULL);
        int dup = 0, j = 0;
        for (const cJSON *o = models->child; o && j < i; o = o->next, j++) dup |= mn && strcmp(jstr(o, "name", ""), mn) == 0;
        if (!exp_name_ok(mn, 64) || dup || i >= EXP_MAX_MODELS) {
            rc = as_fail(err, AS_ERR_CONFIG, "%s: models[%d]: every model needs a unique \"name\" that "
                         "is a plain file name (no '/', no leading '.', under 64 bytes; at most %d "
                         "models)", file, i, EXP_MAX_MODELS);
            break;
        }
        i++;
    }
    const cJSON *figs = rc == AS_OK ? cJSON_GetObjectItemCaseSensitive(root, "figures") : NULL;
    int k = 0;
    if (!cJSON_IsArray(figs)) figs = NULL;
    cJSON_ArrayForEach(f, figs) {
        const char *fname = jstr(f, "figure", "");
        const char *base = jstr(f, "name", fname);
        if (!figure_find(fname)) {
            rc = as_fail(err, AS_ERR_CONFIG, "%s: figures[%d]: unknown figure \"%s\" (attnscope plot "
                         "--list)", file, k, fname);
        } else if (!exp_name_ok(base, 96)) {
            rc = as_fail(err, AS_ERR_CONFIG, "%s: figures[%d]: name \"%s\" is not a plain file name: "
                         "use letters, digits, '-' or '_' (no '/', no leading '.')", file, k, base);
        }
        if (rc != AS_OK) break;
        k++;
    }
    cJSON_Delete(root);
    return rc;
}

static const exp_model *find_model(const exp_run *x, const char *name) {
    for (int i = 0; i < x->n_models; i++)
        if (strcmp(x->models[i].name, name) == 0) return &x->models[i];
    return NULL;
}

/* One figure entry: its inputs, options, files and the command that redraws it. */
static as_status run_figure(exp_run *x, const cJSON *fj, int idx, FILE *index, as_error *err) {
    const char *fname = jstr(fj, "figure", "");
    const figure_recipe *r = figure_find(fname);
    if (!r) return as_fail(err, AS_ERR_CONFIG, "%s: figures[%d]: unknown figure \"%s\" (attnscope plot --list)",
                           x->file, idx, fname);
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(fj, "models"), *m;
    const exp_model *use[FIG_MAX_SOURCES];
    int n = 0;
    if (cJSON_IsArray(ms)) {
        cJSON_ArrayForEach(m, ms) {
            const exp_model *em = cJSON_IsString(m) ? find_model(x, m->valuestring) : NULL;
            if (!em) return as_fail(err, AS_ERR_CONFIG, "%s: figures[%d]: unknown model %s", x->file, idx,
                                    cJSON_IsString(m) ? m->valuestring : "(not a string)");
            if (n < FIG_MAX_SOURCES) use[n++] = em;
        }
    } else {
        use[n++] = &x->models[0];
    }
    fig_opts o;
    memset(&o, 0, sizeof o);
    o.layer = jint(fj, "layer", -1);
    o.head = jint(fj, "head", -1);
    o.image = jint(fj, "image", -1);
    o.query = jint(fj, "query", -1);
    o.definition = jstr(fj, "definition", NULL);
    o.width = jnum(fj, "width", 0);
    o.height = jnum(fj, "height", 0);
    o.dpi = jnum(fj, "dpi", 200);
    const char *cm = jstr(fj, "cmap", NULL);
    if (cm && plot_cmap_parse(cm) >= 0) {
        o.cmap = (plot_cmap)plot_cmap_parse(cm);
        o.cmap_set = 1;
    }
    char base[96];
    if (!exp_name_ok(jstr(fj, "name", fname), sizeof base))
        return as_fail(err, AS_ERR_CONFIG, "%s: figures[%d]: name \"%s\" is not a plain file name: "
                       "use letters, digits, '-' or '_' (no '/', no leading '.')", x->file, idx,
                       jstr(fj, "name", fname));
    snprintf(base, sizeof base, "%s", jstr(fj, "name", fname));
    char *fjs = cJSON_PrintUnformatted(fj);
    char fstamp[16384];
    int k = snprintf(fstamp, sizeof fstamp, "figure %s\n", fjs ? fjs : "");
    free(fjs);
    for (int i = 0; i < n && k < (int)sizeof fstamp; i++)
        k += snprintf(fstamp + k, sizeof fstamp - (size_t)k, "%s", use[i]->stamp);
    const cJSON *fm = cJSON_GetObjectItemCaseSensitive(fj, "formats");
    const char *formats[3];
    int nf = 0;
    if (cJSON_IsArray(fm)) {
        cJSON_ArrayForEach(m, fm) if (cJSON_IsString(m) && nf < 3) formats[nf++] = m->valuestring;
    } else {
        formats[nf++] = "pdf";
        formats[nf++] = "png";
    }
    char labels[1024] = "", srcs[4096] = "";
    for (int i = 0; i < n; i++) {
        snprintf(labels + strlen(labels), sizeof labels - strlen(labels), "%s%s", i ? "," : "", use[i]->name);
        snprintf(srcs + strlen(srcs), sizeof srcs - strlen(srcs), " %s", use[i]->trace);
    }
    as_status rc = AS_OK;
    int opened = 0, drawn = 0;
    char png[1300] = "", files[2048] = "";
    for (int f = 0; f < nf && rc == AS_OK; f++) {
        char path[1300], key[160];
        snprintf(path, sizeof path, "%s/%s.%s", x->out, base, formats[f]);
        snprintf(key, sizeof key, "figure.%s.%s", base, formats[f]);
        snprintf(files + strlen(files), sizeof files - strlen(files), "%s[%s](%s.%s)", f ? " · " : "",
                 formats[f], base, formats[f]);
        if (strcmp(formats[f], "png") == 0) snprintf(png, sizeof png, "%s.png", base);
        if (up_to_date(x, key, fstamp, path)) continue;
        for (; opened < n && rc == AS_OK; opened++)
            rc = fig_source_open(&o.src[opened], use[opened]->trace, use[opened]->name, err);
        o.n_sources = opened;
        if (rc == AS_OK) rc = figure_render(r, &o, path, err);
        if (rc == AS_OK) rc = stamp_write(x, key, fstamp, err);
        drawn++;
    }
    for (int i = 0; i < opened; i++) fig_source_close(&o.src[i]);
    if (rc != AS_OK) return rc;
    printf("  figure     %-12s %s\n", base, drawn ? "drawn" : "up to date");
    /* the index entry: the figure, the numbers behind it, the command that redraws it */
    fprintf(index, "## %s\n\n%s. Mirrors %s.\n\n", base, r->summary, r->mirrors);
    if (png[0]) fprintf(index, "![%s](%s)\n\n", base, png);
    fprintf(index, "Files: %s\n\n", files);
    if (r->metric) {
        for (int i = 0; i < n; i++) {
            char rep[4096];
            if (analysis_report_text(use[i]->trace, r->metric, rep, sizeof rep))
                fprintf(index, "Numbers (%s, `%s`):\n\n```\n%s```\n\n", use[i]->name, r->metric, rep);
        }
    }
    fprintf(index, "Redraw:\n\n```sh\nattnscope plot %s%s --labels %s", fname, srcs, labels);
    const char *ints[] = {"layer", "head", "image", "query"};
    for (int i = 0; i < 4; i++)
        if (jint(fj, ints[i], -1) >= 0) fprintf(index, " --%s %d", ints[i], jint(fj, ints[i], -1));
    if (o.definition) fprintf(index, " --definition %s", o.definition);
    if (cm) fprintf(index, " --cmap %s", cm);
    fprintf(index, " -o %s/%s.pdf\n```\n\n", x->out, base);
    return AS_OK;
}

static void usage(FILE *f) {
    fprintf(f,
"usage: attnscope experiment EXPERIMENT.json [--out DIR] [--threads N]\n"
"Runs an experiment file (models, images, what to record, which analyses, which figures):\n"
"records each model into DIR/MODEL.h5, analyses it, draws the figures into DIR and writes\n"
"DIR/index.md with every figure, the numbers behind it and the command that redraws it.\n"
"A rerun redoes only the steps whose inputs changed. DIR defaults to results/NAME.\n"
"The format: docs/experiments.md; examples: experiments/*.json.\n");
}

int cmd_experiment(int argc, char **argv) {
    static const struct option opts[] = {{"out", required_argument, 0, 'o'},
                                         {"threads", required_argument, 0, 't'},
                                         {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *out = NULL;
    int threads = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'o': out = optarg; break;
        case 't':
            if (!cli_parse_int(optarg, 1, 1024, &threads)) return 2;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc - 1) {
        usage(stderr);
        return 2;
    }
    runtime_set_threads(threads);
    static exp_run x;
    memset(&x, 0, sizeof x);
    x.file = argv[optind];
    as_error err = {0};
    char *text = model_read_text(x.file, &err);
    if (!text) return cli_error(&err);
    cJSON *root = cJSON_Parse(text);
    if (!cJSON_IsObject(root)) { /* the error pointer points into text: report before freeing */
        fprintf(stderr, "attnscope: %s: not valid JSON (near \"%.30s\"): see docs/experiments.md\n", x.file,
                cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "");
        free(text);
        cJSON_Delete(root);
        return 1;
    }
    /* every name and reference checked before anything is recorded or written */
    if (experiment_check(text, x.file, &err) != AS_OK) {
        free(text);
        cJSON_Delete(root);
        return cli_error(&err);
    }
    free(text);
    const char *slash = strrchr(x.file, '/');
    if (slash) snprintf(x.dir, sizeof x.dir, "%.*s", (int)(slash - x.file), x.file);
    const char *name = jstr(root, "name", NULL);
    int rc = 0;
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(root, "models"), *m;
    if (!name || !cJSON_IsArray(models) || cJSON_GetArraySize(models) < 1) {
        fprintf(stderr, "attnscope: %s: needs \"name\" and a non-empty \"models\" list: see docs/experiments.md\n", x.file);
        cJSON_Delete(root);
        return 1;
    }
    if (!exp_name_ok(name, 256)) {
        fprintf(stderr, "attnscope: %s: \"name\": \"%s\" is not a plain folder name: use letters, "
                "digits, '-' or '_' (no '/', no leading '.')\n", x.file, name);
        cJSON_Delete(root);
        return 1;
    }
    if (out) snprintf(x.out, sizeof x.out, "%s", out);
    else snprintf(x.out, sizeof x.out, "results/%s", name);
    char state[1100];
    snprintf(state, sizeof state, "%s/.state", x.out);
    if (cli_make_dirs(state)) { /* OUT and OUT/.state */
        cJSON_Delete(root);
        return 1;
    }
    cJSON_ArrayForEach(m, models) {
        const char *mn = jstr(m, "name", NULL);
        if (!exp_name_ok(mn, 64) || x.n_models == EXP_MAX_MODELS || find_model(&x, mn)) {
            fprintf(stderr, "attnscope: %s: every model needs a unique \"name\" that is a plain file "
                    "name (no '/', no leading '.', under 64 bytes; at most %d models)\n",
                    x.file, EXP_MAX_MODELS);
            cJSON_Delete(root);
            return 1;
        }
        exp_model *em = &x.models[x.n_models++];
        snprintf(em->name, sizeof em->name, "%s", mn);
        em->spec = m;
        snprintf(em->trace, sizeof em->trace, "%s/%s.h5", x.out, mn);
    }
    printf("attnscope experiment %s -> %s/\n", name, x.out);
    char img_stamp[1400];
    double t0 = cli_now();
    if (prepare_images(&x, root, img_stamp, sizeof img_stamp, &err) != AS_OK) rc = cli_error(&err);
    for (int i = 0; i < x.n_models && !rc; i++)
        if (run_model(&x, &x.models[i], root, img_stamp, &err) != AS_OK) rc = cli_error(&err);
    if (!rc) {
        char ipath[1200];
        snprintf(ipath, sizeof ipath, "%s/index.md", x.out);
        atomic_file af;
        if (atomic_file_begin(&af, ipath, &err) != AS_OK) {
            rc = cli_error(&err);
        } else {
            fprintf(af.fp, "# %s\n\n%s\n\n", name, jstr(root, "description", ""));
            fprintf(af.fp, "Reproduce everything: `attnscope experiment %s --out %s`\n\n", x.file, x.out);
            fprintf(af.fp, "| model | source | trace |\n|---|---|---|\n");
            for (int i = 0; i < x.n_models; i++) {
                const char *src = jstr(x.models[i].spec, "model", NULL);
                char *cj = src ? NULL : cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(x.models[i].spec, "config"));
                fprintf(af.fp, "| %s | %s%s%s | %s.h5 |\n", x.models[i].name, src ? src : "random weights, config `",
                        src ? "" : (cj ? cj : ""), src ? "" : "`", x.models[i].name);
                free(cj);
            }
            fprintf(af.fp, "\n");
            const cJSON *figs = cJSON_GetObjectItemCaseSensitive(root, "figures"), *fj;
            int idx = 0;
            cJSON_ArrayForEach(fj, figs) {
                if (rc) break;
                if (run_figure(&x, fj, idx++, af.fp, &err) != AS_OK) rc = cli_error(&err);
            }
            if (rc) atomic_file_abort(&af);
            else if (atomic_file_commit(&af, &err) != AS_OK) rc = cli_error(&err);
        }
        if (!rc) printf("done in %.1f s: %s\n", cli_now() - t0, ipath);
    }
    cJSON_Delete(root);
    return rc;
}
