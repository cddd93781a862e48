/* cmd_experiment.c: attnscope experiment: a declarative JSON file (models, images, what to
 * record, which analyses, which figures) run as [train ->] record -> analyze -> plot into a
 * folder, with an index page. Each step leaves a stamp (what it was made from) in OUT/.state; a
 * step whose stamp matches, and whose output exists, is skipped, so a rerun only redoes what
 * changed. Trained models live in a folder named by a hash of their config and budget, shared by
 * every experiment that trains the same model the same way. docs/experiments.md describes the
 * format. */
#define _DEFAULT_SOURCE /* realpath */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "../analysis/analysis.h"
#include "../core/train.h"
#include "../io/atomic.h"
#include "../plot/figures.h"
#include "cli.h"

#define EXP_MAX_MODELS 8
#define EXP_MAX_FIGURES 64

typedef struct {
    char name[64];
    const cJSON *spec;
    char trace[1200];
    char stamp[16384];      /* what its analysed trace was made from */
    int train;              /* trained by the experiment ("train": true) */
    char trained[1400];     /* then: its training folder (DIR/latest is the checkpoint) */
    char train_stamp[8192]; /* and what it was trained from */
    train_result result;    /* and how training went */
} exp_model;

typedef struct {
    const char *file;       /* the experiment file, for messages */
    char dir[1024];         /* its folder: relative paths in it start there */
    char out[1024];
    char images[1200];
    exp_model models[EXP_MAX_MODELS];
    int n_models;
    const cJSON *train;     /* the training budget ("train"), or NULL */
    char budget[1024];      /* that budget as JSON text, for stamps and the index page */
    char data[1200];        /* its "data", paths resolved */
    char trained_root[1024]; /* where trained models go (--trained; default OUT/../trained) */
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

/* FNV-1a, 64 bits: names a trained model's folder after what it was trained from (the folder
 * also keeps the full stamp, compared on reuse). */
static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The training budget: "train": {"data": ..., "epochs": ..., ...}, the options of attnscope
 * train that an experiment may set; any other key is refused. */
static const char *const budget_keys[] = {"data", "epochs", "batch", "seed", "lr", "warmup_epochs",
                                          "weight_decay", "dp_loss", "dp_weight", NULL};

static as_status budget_opts(const exp_run *x, train_opts *o, as_error *err);

static as_status parse_budget(exp_run *x, const cJSON *root, as_error *err) {
    x->train = cJSON_GetObjectItemCaseSensitive(root, "train");
    if (!x->train) return AS_OK;
    if (!cJSON_IsObject(x->train))
        return as_fail(err, AS_ERR_CONFIG, "%s: \"train\" must be an object such as {\"data\": \"shapes:4000\", "
                       "\"epochs\": 8} (docs/experiments.md)", x->file);
    for (const cJSON *e = x->train->child; e; e = e->next) {
        int known = 0;
        for (int k = 0; budget_keys[k]; k++) known |= strcmp(e->string, budget_keys[k]) == 0;
        if (!known)
            return as_fail(err, AS_ERR_CONFIG, "%s: \"train\": unknown key \"%s\"; the budget takes data, epochs, "
                           "batch, seed, lr, warmup_epochs, weight_decay, dp_loss, dp_weight", x->file, e->string);
        const int text = strcmp(e->string, "data") == 0 || strcmp(e->string, "dp_loss") == 0;
        if (text ? !cJSON_IsString(e) : !cJSON_IsNumber(e))
            return as_fail(err, AS_ERR_CONFIG, "%s: \"train\": \"%s\" must be a %s", x->file, e->string,
                           text ? "string" : "number");
    }
    const char *data = jstr(x->train, "data", NULL);
    if (!data) return as_fail(err, AS_ERR_CONFIG, "%s: \"train\" needs \"data\" (e.g. \"shapes:4000\")", x->file);
    if (strncmp(data, "shapes", 6) == 0) snprintf(x->data, sizeof x->data, "%s", data);
    else resolve(x, data, x->data, sizeof x->data);
    const char *dl = jstr(x->train, "dp_loss", NULL);
    if (dl && vit_dp_loss_parse(dl) < 0)
        return as_fail(err, AS_ERR_CONFIG, "%s: \"train\": dp_loss \"%s\": expected squared, hinge or flipped", x->file, dl);
    char *b = cJSON_PrintUnformatted(x->train);
    snprintf(x->budget, sizeof x->budget, "%s", b ? b : "");
    free(b);
    train_opts o;
    return budget_opts(x, &o, err);
}

/* attnscope train's options for the budget (the rest at its defaults). */
static as_status budget_opts(const exp_run *x, train_opts *o, as_error *err) {
    train_opts_default(o);
    const cJSON *t = x->train;
    o->data = x->data;
    o->epochs = jint(t, "epochs", o->epochs);
    o->batch = jint(t, "batch", o->batch);
    o->seed = (unsigned long long)jnum(t, "seed", 0);
    o->lr = (float)jnum(t, "lr", o->lr);
    o->warmup_epochs = (float)jnum(t, "warmup_epochs", o->warmup_epochs);
    o->weight_decay = (float)jnum(t, "weight_decay", o->weight_decay);
    o->dp_weight = (float)jnum(t, "dp_weight", o->dp_weight);
    const char *dl = jstr(t, "dp_loss", NULL);
    if (dl) o->dp_loss = vit_dp_loss_parse(dl);
    if (o->epochs < 1 || o->epochs > 100000 || o->batch < 1 || o->batch > 4096 || jnum(t, "seed", 0) < 0 ||
        !(o->lr > 0) || o->warmup_epochs < 0 || o->weight_decay < 0 || o->dp_weight < 0)
        return as_fail(err, AS_ERR_CONFIG, "%s: \"train\": epochs 1..100000, batch 1..4096, and seed, lr, "
                       "warmup_epochs, weight_decay, dp_weight not negative", x->file);
    o->keep = 1;
    o->quiet = 1;
    return AS_OK;
}

/* A model's config as text: an inline object, or the file (or built-in name) a string names. */
static char *config_text(const exp_run *x, const cJSON *cfgj, char *path, size_t pn) {
    path[0] = 0;
    if (cJSON_IsObject(cfgj)) return cJSON_PrintUnformatted(cfgj);
    if (!cJSON_IsString(cfgj)) return NULL;
    resolve(x, cfgj->valuestring, path, pn);
    struct stat sb;
    if (stat(path, &sb) != 0) { /* a built-in architecture name */
        snprintf(path, pn, "%s", cfgj->valuestring);
        return strdup(cfgj->valuestring);
    }
    return model_read_text(path, NULL);
}

/* Trains em with the experiment's budget into TRAINED/CONFIG-HASH/, or reuses (or, after an
 * interruption, resumes) the run already there: the folder's name hashes the config and the
 * budget, and its stamp must match them exactly. */
static as_status train_model(exp_run *x, exp_model *em, as_error *err) {
    char cpath[1200], key[160], dir[1300], stamp_path[1500], cfg_path[1500], latest[1500];
    char *ctext = config_text(x, cJSON_GetObjectItemCaseSensitive(em->spec, "config"), cpath, sizeof cpath);
    if (!ctext)
        return as_fail(err, AS_ERR_CONFIG, "%s: model \"%s\": \"train\": true needs a readable \"config\" (an "
                       "object, a config file or a built-in name)", x->file, em->name);
    train_opts o;
    /* the config as the user wrote it, so that a mistake names their file, not the copy made
     * for training (a built-in name is checked by training itself) */
    vit_config vc = {0};
    char what[256];
    snprintf(what, sizeof what, "%s (model %s)", x->file, em->name);
    as_status rc = cpath[0] && access(cpath, F_OK) == 0 ? model_config_from_arch(&vc, cpath, err)
                 : cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(em->spec, "config"))
                     ? model_config_apply_json(&vc, ctext, what, err) : AS_OK;
    if (rc == AS_OK) rc = budget_opts(x, &o, err);
    if (rc != AS_OK) {
        free(ctext);
        return rc;
    }
    /* the budget as written and every option as it takes effect: a changed default retrains */
    snprintf(em->train_stamp, sizeof em->train_stamp,
             "attnscope %s\nconfig %s\ntrain %s\noptions epochs=%d batch=%d seed=%llu lr=%g min_lr=%g warmup_lr=%g "
             "warmup_epochs=%g weight_decay=%g clip=%g smoothing=%g dp_loss=%s dp_weight=%g val_fraction=%g "
             "crop_pad=%d flip=%d\n", ATTNSCOPE_VERSION, ctext, x->budget, o.epochs, o.batch, o.seed, (double)o.lr,
             (double)o.min_lr, (double)o.warmup_lr, (double)o.warmup_epochs, (double)o.weight_decay, (double)o.clip,
             (double)o.smoothing, vit_dp_loss_name((vit_dp_loss)o.dp_loss), (double)o.dp_weight,
             (double)o.val_fraction, o.crop_pad, o.flip);
    /* the folder: the config file's name (or the model's), then the hash */
    const char *base = cpath[0] ? strrchr(cpath, '/') : NULL;
    base = cpath[0] ? (base ? base + 1 : cpath) : em->name;
    int bl = (int)strcspn(base, ".");
    snprintf(key, sizeof key, "%.*s-%016llx", bl > 64 ? 64 : bl, base, (unsigned long long)fnv1a(em->train_stamp));
    snprintf(dir, sizeof dir, "%s/%s", x->trained_root, key);
    snprintf(stamp_path, sizeof stamp_path, "%s/experiment-stamp", dir);
    snprintf(cfg_path, sizeof cfg_path, "%s/model.json", dir);
    snprintf(latest, sizeof latest, "%s/latest", dir);
    snprintf(em->trained, sizeof em->trained, "%s", dir);
    char *old = model_read_text(stamp_path, NULL);
    struct stat sb;
    const int have = stat(latest, &sb) == 0;
    if (old && strcmp(old, em->train_stamp) != 0)
        rc = as_fail(err, AS_ERR_EXISTS, "%s: made from another config or budget than model \"%s\" (its "
                     "experiment-stamp differs); move it away or pass another --trained", dir, em->name);
    else if (!old && have)
        rc = as_fail(err, AS_ERR_EXISTS, "%s: holds a training run without an experiment-stamp; move it away or "
                     "pass another --trained", dir);
    free(old);
    if (rc == AS_OK && cli_make_dirs(dir)) rc = as_fail(err, AS_ERR_IO, "%s: cannot create the folder", dir);
    atomic_file af;
    if (rc == AS_OK && !have) { /* the config train reads, then the stamp */
        if ((rc = atomic_file_begin(&af, cfg_path, err)) == AS_OK) {
            fputs(ctext, af.fp);
            rc = atomic_file_commit(&af, err);
        }
        if (rc == AS_OK && (rc = atomic_file_begin(&af, stamp_path, err)) == AS_OK) {
            fputs(em->train_stamp, af.fp);
            rc = atomic_file_commit(&af, err);
        }
    }
    free(ctext);
    if (rc != AS_OK) return rc;
    o.config = cfg_path;
    o.out = dir;
    o.resume = have;
    static const char *const made_here[] = {"model.json", "experiment-stamp", NULL}; /* above, before training */
    o.preexisting = made_here;
    char cl[1400];
    snprintf(cl, sizeof cl, "attnscope experiment %s (model %s)", x->file, em->name);
    o.command_line = cl;
    if (!have) {
        printf("  train      %-12s %d epoch%s on %s -> %s\n", em->name, o.epochs, o.epochs == 1 ? "" : "s", o.data, dir);
        fflush(stdout);
    }
    rc = train_run(&o, &em->result, err);
    if (rc == AS_ERR_INTERRUPTED)
        return as_fail(err, AS_ERR_INTERRUPTED, "%s: training of model \"%s\" interrupted; run the experiment again "
                       "to continue it", x->file, em->name);
    if (rc != AS_OK) return rc;
    const train_result *r = &em->result;
    if (r->seconds > 0 || !have)
        printf("  train      %-12s held-out accuracy %.1f%% (chance %.1f%%) after %.0f s\n", em->name,
               100 * r->val_acc, 100.0 / r->n_classes, r->total_seconds);
    else
        printf("  train      %-12s up to date (held-out accuracy %.1f%%, %s)\n", em->name, 100 * r->val_acc, dir);
    return AS_OK;
}

/* The images: a path, or {"synthetic": N, "size": S, "seed": K} generated once into OUT, or
 * {"heldout": N}: the first N held-out images of the training data, at the trained models'
 * size, written once into OUT. */
static as_status prepare_images(exp_run *x, const cJSON *root, char *stamp, size_t sn, as_error *err) {
    const cJSON *im = cJSON_GetObjectItemCaseSensitive(root, "images");
    if (cJSON_IsString(im)) {
        resolve(x, im->valuestring, x->images, sizeof x->images);
        snprintf(stamp, sn, "images=%s", x->images);
        return AS_OK;
    }
    if (cJSON_IsObject(im) && cJSON_GetObjectItemCaseSensitive(im, "heldout")) {
        const int n = jint(im, "heldout", 0);
        const exp_model *tm = NULL;
        for (int i = 0; i < x->n_models && !tm; i++)
            if (x->models[i].train) tm = &x->models[i];
        if (!tm || n < 1 || n > 100000)
            return as_fail(err, AS_ERR_CONFIG, "%s: \"images\": {\"heldout\": N} takes 1..100000 held-out images of "
                           "the training data, and needs a model with \"train\": true", x->file);
        char cfg_path[1500], safe[64];
        snprintf(cfg_path, sizeof cfg_path, "%s/model.json", tm->trained);
        vit_config cfg = {0};
        as_status rc = model_config_from_arch(&cfg, cfg_path, err);
        if (rc != AS_OK) return rc;
        int k = 0;
        for (const char *p = x->data; *p && k < (int)sizeof safe - 1; p++)
            safe[k++] = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ? *p : '-';
        safe[k] = 0;
        snprintf(x->images, sizeof x->images, "%s/heldout-%d-%s-%d", x->out, n, safe, cfg.img_size);
        snprintf(stamp, sn, "heldout=%d of %s at %d", n, x->data, cfg.img_size);
        struct stat sb;
        if (stat(x->images, &sb) == 0) return AS_OK;
        traindata d;
        if ((rc = traindata_open(&d, x->data, &cfg, 0.1f, err)) != AS_OK) return rc;
        char tmp[1300];
        snprintf(tmp, sizeof tmp, "%s.partial", x->images);
        printf("  images     the first %d held-out images of %s -> %s\n", n < d.n_val ? n : d.n_val, x->data, x->images);
        rc = train_write_heldout(&d, n, tmp, err);
        traindata_free(&d);
        if (rc == AS_OK && rename(tmp, x->images) != 0)
            rc = as_fail(err, AS_ERR_IO, "%s: cannot rename it to %s (%s)", tmp, x->images, strerror(errno));
        return rc;
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

static as_status build_model(const exp_run *x, const exp_model *em, model *m, as_error *err) {
    const cJSON *spec = em->spec;
    if (em->train) {
        char latest[1500];
        snprintf(latest, sizeof latest, "%s/latest", em->trained);
        return model_load(m, latest, NULL, 0, err);
    }
    const char *path = jstr(spec, "model", NULL);
    if (path) {
        char p[1200];
        resolve(x, path, p, sizeof p);
        return model_load(m, p, jstr(spec, "arch", NULL), 0, err);
    }
    const cJSON *cfgj = cJSON_GetObjectItemCaseSensitive(spec, "config");
    vit_config c;
    memset(&c, 0, sizeof c);
    as_status rc;
    if (cJSON_IsString(cfgj)) { /* a config file or a built-in name */
        char p[1200];
        resolve(x, cfgj->valuestring, p, sizeof p);
        struct stat sb;
        rc = model_config_from_arch(&c, stat(p, &sb) == 0 ? p : cfgj->valuestring, err);
        if (rc == AS_OK) rc = model_init_random(m, &c, (unsigned long long)jint(spec, "seed", 1), err);
        return rc;
    }
    if (!cJSON_IsObject(cfgj))
        return as_fail(err, AS_ERR_CONFIG, "%s: model \"%s\": give \"model\" (a checkpoint) or \"config\" "
                       "(a model config, random weights)", x->file, jstr(spec, "name", "?"));
    char *json = cJSON_PrintUnformatted(cfgj);
    char what[256];
    snprintf(what, sizeof what, "%s (model %s)", x->file, jstr(spec, "name", "?"));
    rc = json ? model_config_apply_json(&c, json, what, err) : as_fail(err, AS_ERR_NOMEM, "out of memory");
    free(json);
    if (rc == AS_OK) rc = model_init_random(m, &c, (unsigned long long)jint(spec, "seed", 1), err);
    return rc;
}

/* The "analyze" object: "metrics" (the caller's), and any of attnscope analyze's options about
 * the analysis by its long name with '_' for '-' ("als_window": 5, "fusion": "max",
 * "qk_thresholds": [0.25, 1.5], "entropy_normalize": true, "als_prefix": "include"), each
 * parsed as analyze parses the option; any other key, or a value the option does not take, is
 * refused with the file, the key and the fix. */
static as_status analyze_opts(const cJSON *a, analysis_opts *o, const char *file, as_error *err) {
    analysis_opts_default(o);
    if (!a) return AS_OK;
    if (!cJSON_IsObject(a))
        return as_fail(err, AS_ERR_CONFIG, "%s: \"analyze\" must be an object such as {\"metrics\": \"als,entropy\"}", file);
    for (const cJSON *e = a->child; e; e = e->next) {
        if (strcmp(e->string, "metrics") == 0) {
            if (!cJSON_IsString(e))
                return as_fail(err, AS_ERR_CONFIG, "%s: analyze: \"metrics\" must be a string such as \"als,entropy\"", file);
            continue;
        }
        char name[64], arg[512] = "";
        snprintf(name, sizeof name, "%s", e->string);
        for (char *c = name; *c; c++) *c = *c == '_' ? '-' : *c;
        int ok = 1;
        if (cJSON_IsString(e)) snprintf(arg, sizeof arg, "%s", e->valuestring);
        else if (cJSON_IsNumber(e)) snprintf(arg, sizeof arg, "%.17g", e->valuedouble);
        else if (cJSON_IsArray(e)) {
            size_t k = 0;
            for (const cJSON *v = e->child; v && ok; v = v->next) {
                ok = cJSON_IsNumber(v);
                k += (size_t)snprintf(arg + k, k < sizeof arg ? sizeof arg - k : 0, "%s%.17g", k ? "," : "", v->valuedouble);
            }
            ok = ok && k > 0 && k < sizeof arg;
        } else ok = cJSON_IsBool(e);
        as_error e2 = {0};
        analysis_opts scratch = *o;
        /* true sets a flag; false leaves it at its default (a flag has no other value) */
        const int r = !ok ? -1
                      : cJSON_IsBool(e) ? analyze_option(cJSON_IsTrue(e) ? o : &scratch, name, NULL, &e2)
                                        : analyze_option(o, name, arg, &e2);
        if (r == 0) {
            char names[1024];
            analyze_option_names(names, sizeof names);
            for (char *c = names; *c; c++) *c = *c == '-' ? '_' : *c;
            return as_fail(err, AS_ERR_CONFIG, "%s: analyze: unknown key \"%s\"; it takes metrics and %s "
                           "(attnscope analyze's options, '_' for '-')", file, e->string, names);
        }
        if (r < 0)
            return as_fail(err, AS_ERR_CONFIG, "%s: analyze: %s: %s", file, e->string,
                           ok ? e2.msg : "give a string, a number, a list of numbers, or true for a flag");
    }
    const char *ms = jstr(a, "metrics", NULL);
    as_error e2 = {0};
    if (ms && !(o->metrics = analysis_metric_mask(ms, &e2)))
        return as_fail(err, AS_ERR_CONFIG, "%s: analyze: \"metrics\": %s", file, e2.msg);
    o->explicit_metrics = ms != NULL;
    /* an option of metrics that "metrics" leaves out would do nothing (analysis_run refuses it) */
    for (int i = 0; ms && i < o->n_given; i++)
        if (o->given[i].metrics && !(o->given[i].metrics & o->metrics)) {
            char key[64];
            snprintf(key, sizeof key, "%s", o->given[i].name);
            for (char *c = key; *c; c++) *c = *c == '-' ? '_' : *c;
            return as_fail(err, AS_ERR_CONFIG, "%s: analyze: \"%s\" has no effect: its metric is not in \"metrics\" "
                           "(\"%s\"): add the metric, or remove \"%s\" (attnscope analyze --help says which "
                           "metric each option is for)", file, key, ms, key);
        }
    return AS_OK;
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
    if (path || em->train) { /* a checkpoint: its size and time, so a retrained one is picked up */
        char p[1500], w[1600];
        if (em->train) snprintf(p, sizeof p, "%s/latest", em->trained);
        else resolve(x, path, p, sizeof p);
        snprintf(w, sizeof w, "%s/model.safetensors", p);
        if (stat(w, &sb) == 0 || stat(p, &sb) == 0)
            snprintf(wstamp, sizeof wstamp, "%lld@%lld", (long long)sb.st_size, (long long)sb.st_mtime);
    }
    char rstamp[12288];
    snprintf(rstamp, sizeof rstamp, "attnscope %s\nmodel %s %s\n%s%s\nrecord %s limit %d\n", ATTNSCOPE_VERSION,
             spec ? spec : "", wstamp, em->train_stamp, img_stamp, rec, limit);
    free(spec);
    char key[128];
    snprintf(key, sizeof key, "%s.record", em->name);
    as_status rc = AS_OK;
    if (up_to_date(x, key, rstamp, em->trace)) {
        printf("  record     %-12s up to date (%s)\n", em->name, em->trace);
    } else {
        model m;
        if ((rc = build_model(x, em, &m, err)) != AS_OK) return rc;
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
    char results[1100]; /* analyze writes MODEL.analysis.h5 beside the trace */
    analysis_results_path(em->trace, results, sizeof results);
    if (up_to_date(x, key, em->stamp, results)) {
        printf("  analyze    %-12s up to date\n", em->name);
        return AS_OK;
    }
    analysis_opts ao;
    if (analyze_opts(a, &ao, x->file, err) != AS_OK) return err->status;
    ao.quiet = 1;
    ao.command_line = "attnscope experiment";
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

/* ---- the file's keys and values, checked before anything runs ----------------------------- */

static const char *const top_keys[] = {"name", "description", "train", "images", "limit", "record",
                                       "models", "analyze", "figures", NULL};
static const char *const model_keys[] = {"name", "model", "arch", "config", "seed", "train", NULL};
static const char *const figure_keys[] = {"figure", "models", "name", "formats", "layer", "head", "image",
                                          "query", "definition", "cmap", "range", "width", "height",
                                          "dpi", NULL};
static const char *const synthetic_keys[] = {"synthetic", "size", "seed", NULL};
static const char *const heldout_keys[] = {"heldout", NULL};

/* Refuses a key of object o that is not in keys: "FILE: WHERE: unknown key "K"; did you mean
 * "L"? (WHERE takes ...)". where is "" for the top level. */
static as_status keys_known(const cJSON *o, const char *const *keys, const char *file, const char *where,
                            as_error *err) {
    for (const cJSON *e = o->child; e; e = e->next) {
        int n = 0, known = 0;
        for (; keys[n]; n++) known |= strcmp(e->string, keys[n]) == 0;
        for (const cJSON *d = o->child; known && d != e; d = d->next)
            if (strcmp(d->string, e->string) == 0) /* cJSON would read the first only */
                return as_fail(err, AS_ERR_CONFIG, "%s: %s%s\"%.64s\" is given twice: keep one", file, where,
                               where[0] ? ": " : "", e->string);
        if (known) continue;
        char list[512] = "";
        for (int k = 0; keys[k]; k++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", keys[k]);
        const char *near = cli_closest(e->string, keys, n);
        char hint[160] = "";
        if (near) snprintf(hint, sizeof hint, "; did you mean \"%s\"?", near);
        return as_fail(err, AS_ERR_CONFIG, "%s: %s%sunknown key \"%.64s\"%s (%s takes %s; docs/experiments.md)",
                       file, where, where[0] ? ": " : "", e->string, hint, where[0] ? where : "the file", list);
    }
    return AS_OK;
}

/* j, when present, is a whole number in lo..hi (not a string, not 1.9). */
static as_status int_in(const cJSON *o, const char *key, double lo, double hi, const char *file,
                        const char *where, as_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j) return AS_OK;
    if (cJSON_IsNumber(j) && j->valuedouble == (double)(long long)j->valuedouble && j->valuedouble >= lo &&
        j->valuedouble <= hi)
        return AS_OK;
    char v[64];
    if (cJSON_IsNumber(j)) snprintf(v, sizeof v, "%g", j->valuedouble);
    else snprintf(v, sizeof v, "%s", cJSON_IsString(j) ? "a string" : "not a number");
    return as_fail(err, AS_ERR_CONFIG, "%s: %s%s\"%s\": %s: give a whole number in %.0f..%.0f (no quotes)", file,
                   where, where[0] ? ": " : "", key, v, lo, hi);
}

/* j, when present, is a number in (lo, hi) or [lo, hi] (closed). */
static as_status num_in(const cJSON *o, const char *key, double lo, double hi, int closed, const char *file,
                        const char *where, as_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j) return AS_OK;
    const double v = cJSON_IsNumber(j) ? j->valuedouble : 0;
    if (cJSON_IsNumber(j) && (closed ? v >= lo && v <= hi : v > lo && v < hi)) return AS_OK;
    char s[64];
    if (cJSON_IsNumber(j)) snprintf(s, sizeof s, "%g", v);
    else snprintf(s, sizeof s, "%s", cJSON_IsString(j) ? "a string" : "not a number");
    return as_fail(err, AS_ERR_CONFIG, "%s: %s: \"%s\": %s: give a number %s%g..%g%s (no quotes)", file, where, key, s,
                   closed ? "in " : "in (", lo, hi, closed ? "" : ")");
}

/* j, when present, is a string. */
static as_status str_is(const cJSON *o, const char *key, const char *file, const char *where, as_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j || cJSON_IsString(j)) return AS_OK;
    return as_fail(err, AS_ERR_CONFIG, "%s: %s%s\"%s\" must be a string (in quotes)", file, where,
                   where[0] ? ": " : "", key);
}

#define EXP_SEED_MAX 2000000000.0 /* attnscope train --seed's range */

static as_status check_images(const cJSON *root, const char *file, as_error *err) {
    const cJSON *im = cJSON_GetObjectItemCaseSensitive(root, "images");
    if (!im)
        return as_fail(err, AS_ERR_CONFIG, "%s: needs \"images\": a path, {\"synthetic\": N, \"size\": S, "
                       "\"seed\": K} or {\"heldout\": N} (docs/experiments.md)", file);
    if (cJSON_IsString(im)) return AS_OK;
    if (!cJSON_IsObject(im))
        return as_fail(err, AS_ERR_CONFIG, "%s: \"images\" must be a path, {\"synthetic\": N, \"size\": S, "
                       "\"seed\": K} or {\"heldout\": N} (docs/experiments.md)", file);
    const int held = cJSON_GetObjectItemCaseSensitive(im, "heldout") != NULL;
    if (keys_known(im, held ? heldout_keys : synthetic_keys, file, "images", err) != AS_OK) return err->status;
    if (held) return int_in(im, "heldout", 1, 100000, file, "images", err);
    if (!cJSON_GetObjectItemCaseSensitive(im, "synthetic"))
        return as_fail(err, AS_ERR_CONFIG, "%s: \"images\" needs \"synthetic\": N (or \"heldout\": N, or a path)", file);
    if (int_in(im, "synthetic", 1, 100000, file, "images", err) != AS_OK ||
        int_in(im, "size", 16, 4096, file, "images", err) != AS_OK ||
        int_in(im, "seed", 0, EXP_SEED_MAX, file, "images", err) != AS_OK)
        return err->status;
    return AS_OK;
}

static as_status check_budget(const cJSON *root, const char *file, as_error *err) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "train");
    if (!cJSON_IsObject(t)) return AS_OK; /* parse_budget says what it must be */
    if (keys_known(t, budget_keys, file, "train", err) != AS_OK) return err->status;
    if (int_in(t, "epochs", 1, 100000, file, "train", err) != AS_OK ||
        int_in(t, "batch", 1, 4096, file, "train", err) != AS_OK ||
        int_in(t, "seed", 0, EXP_SEED_MAX, file, "train", err) != AS_OK)
        return err->status;
    return AS_OK;
}

static as_status check_model(const cJSON *m, int i, const char *file, as_error *err) {
    char where[128];
    snprintf(where, sizeof where, "models[%d] (\"%.64s\")", i, jstr(m, "name", "?"));
    if (!cJSON_IsObject(m))
        return as_fail(err, AS_ERR_CONFIG, "%s: models[%d] must be an object such as {\"name\": \"a\", \"config\": "
                       "\"vit_tiny_patch16_224\"}", file, i);
    if (keys_known(m, model_keys, file, where, err) != AS_OK) return err->status;
    const int has_model = cJSON_GetObjectItemCaseSensitive(m, "model") != NULL;
    const int has_config = cJSON_GetObjectItemCaseSensitive(m, "config") != NULL;
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
    const int trains = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "train"));
    const char *why = NULL;
    if (has_model && has_config) why = "give \"model\" (a checkpoint) or \"config\" (a model config), not both";
    else if (!has_model && !has_config) why = "give \"model\" (a checkpoint) or \"config\" (a model config)";
    else if (cJSON_GetObjectItemCaseSensitive(m, "arch") && !has_model)
        why = "\"arch\" names a checkpoint's architecture: it goes with \"model\"; a \"config\" says its own";
    else if (has_config && !cJSON_IsString(cfg) && !cJSON_IsObject(cfg))
        why = "\"config\" must be an object, a config file or a built-in name";
    else if (cJSON_GetObjectItemCaseSensitive(m, "seed") && has_model)
        why = "\"seed\" seeds random weights: a checkpoint has its own; leave it out";
    else if (cJSON_GetObjectItemCaseSensitive(m, "seed") && trains)
        why = "\"seed\" seeds random weights: a trained model takes the budget's \"seed\"; leave it out";
    if (why) return as_fail(err, AS_ERR_CONFIG, "%s: %s: %s (docs/experiments.md)", file, where, why);
    if (str_is(m, "model", file, where, err) != AS_OK || str_is(m, "arch", file, where, err) != AS_OK ||
        int_in(m, "seed", 0, EXP_SEED_MAX, file, where, err) != AS_OK)
        return err->status;
    return AS_OK;
}

static int has_png(const cJSON *fj) {
    const cJSON *fm = cJSON_GetObjectItemCaseSensitive(fj, "formats"), *f;
    if (!fm) return 1; /* pdf and png */
    cJSON_ArrayForEach(f, fm) if (cJSON_IsString(f) && strcmp(f->valuestring, "png") == 0) return 1;
    return 0;
}

/* A figure entry's plot options into o (o->src untouched), each checked as attnscope plot checks
 * its flag; fj's keys and types were checked by check_figure. */
static as_status figure_opts_of(const cJSON *fj, const char *file, const char *where, fig_opts *o, as_error *err) {
    o->layer = jint(fj, "layer", -1);
    o->head = jint(fj, "head", -1);
    o->image = jint(fj, "image", -1);
    o->query = jint(fj, "query", -1);
    o->definition = jstr(fj, "definition", NULL);
    o->width = jnum(fj, "width", 0);
    o->height = jnum(fj, "height", 0);
    o->dpi = jnum(fj, "dpi", 200);
    o->dpi_set = 0; /* "dpi" applies to the PNG among the formats */
    const char *cm = jstr(fj, "cmap", NULL);
    if (cm && plot_cmap_parse(cm) < 0)
        return as_fail(err, AS_ERR_CONFIG, "%s: %s: cmap \"%s\": use viridis, magma or diverging", file, where, cm);
    if (cm) {
        o->cmap = (plot_cmap)plot_cmap_parse(cm);
        o->cmap_set = 1;
    }
    const char *rg = jstr(fj, "range", NULL);
    if (rg && mapscale_range_parse(rg) < 0)
        return as_fail(err, AS_ERR_CONFIG, "%s: %s: range \"%s\": use zero or minmax", file, where, rg);
    if (rg) {
        o->range = (mapscale_range)mapscale_range_parse(rg);
        o->range_set = 1;
    }
    return AS_OK;
}

/* One figure entry: its keys, their types and ranges (those of attnscope plot's flags), its
 * formats, its models (names in models), and the options its recipe takes. */
static as_status check_figure(const cJSON *fj, int idx, const cJSON *models, const char *file, as_error *err) {
    char where[128];
    snprintf(where, sizeof where, "figures[%d]", idx);
    if (!cJSON_IsObject(fj))
        return as_fail(err, AS_ERR_CONFIG, "%s: %s must be an object such as {\"figure\": \"entropy\"}", file, where);
    if (keys_known(fj, figure_keys, file, where, err) != AS_OK) return err->status;
    const char *strs[] = {"figure", "name", "definition", "cmap", "range"};
    for (int i = 0; i < 5; i++)
        if (str_is(fj, strs[i], file, where, err) != AS_OK) return err->status;
    const char *ints[] = {"layer", "head", "image", "query"};
    for (int i = 0; i < 4; i++)
        if (int_in(fj, ints[i], 0, 1 << 30, file, where, err) != AS_OK) return err->status;
    if (num_in(fj, "width", 0, 20000, 0, file, where, err) != AS_OK ||
        num_in(fj, "height", 0, 20000, 0, file, where, err) != AS_OK ||
        num_in(fj, "dpi", 10, 2400, 1, file, where, err) != AS_OK)
        return err->status;
    const figure_recipe *r = figure_find(jstr(fj, "figure", ""));
    if (!r) {
        const char *names[64];
        int n = 0;
        for (int i = 0; i < figure_count() && n < 64; i++) names[n++] = figure_get(i)->name;
        const char *near = cli_closest(jstr(fj, "figure", ""), names, n);
        char hint[96] = "";
        if (near) snprintf(hint, sizeof hint, "; did you mean \"%s\"?", near);
        return as_fail(err, AS_ERR_CONFIG, "%s: %s: unknown figure \"%s\"%s (attnscope plot --list)", file, where,
                       jstr(fj, "figure", ""), hint);
    }
    const cJSON *fm = cJSON_GetObjectItemCaseSensitive(fj, "formats"), *f;
    if (fm) {
        int nf = 0;
        if (!cJSON_IsArray(fm) || cJSON_GetArraySize(fm) < 1)
            return as_fail(err, AS_ERR_CONFIG, "%s: %s: \"formats\" must be a list such as [\"pdf\", \"png\"]",
                           file, where);
        cJSON_ArrayForEach(f, fm) {
            const char *v = cJSON_IsString(f) ? f->valuestring : "";
            if (strcmp(v, "pdf") && strcmp(v, "png") && strcmp(v, "svg"))
                return as_fail(err, AS_ERR_CONFIG, "%s: %s: format \"%s\": use pdf, png or svg", file, where,
                               cJSON_IsString(f) ? v : "(not a string)");
            int k = 0;
            for (const cJSON *g = fm->child; g != f; g = g->next, k++)
                if (strcmp(g->valuestring, v) == 0)
                    return as_fail(err, AS_ERR_CONFIG, "%s: %s: format \"%s\" is listed twice: give it once",
                                   file, where, v);
            nf++;
        }
    }
    if (cJSON_GetObjectItemCaseSensitive(fj, "dpi") && !has_png(fj))
        return as_fail(err, AS_ERR_CONFIG, "%s: %s: \"dpi\" applies to PNG output only (PDF and SVG are vector): "
                       "leave it out or add \"png\" to \"formats\"", file, where);
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(fj, "models"), *m;
    if (ms) {
        if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) < 1)
            return as_fail(err, AS_ERR_CONFIG, "%s: %s: \"models\" must be a non-empty list of model names such "
                           "as [\"a\", \"b\"]", file, where);
        if (cJSON_GetArraySize(ms) > r->max_sources)
            return as_fail(err, AS_ERR_CONFIG, "%s: %s: the %s figure takes %d model%s, not %d", file, where,
                           r->name, r->max_sources, r->max_sources == 1 ? "" : "s", cJSON_GetArraySize(ms));
        cJSON_ArrayForEach(m, ms) {
            int found = 0;
            const cJSON *mm;
            cJSON_ArrayForEach(mm, models) found |= cJSON_IsString(m) && strcmp(jstr(mm, "name", ""), m->valuestring) == 0;
            if (!found)
                return as_fail(err, AS_ERR_CONFIG, "%s: %s: unknown model %s%s%s: use a name of \"models\"", file,
                               where, cJSON_IsString(m) ? "\"" : "", cJSON_IsString(m) ? m->valuestring : "(not a string)",
                               cJSON_IsString(m) ? "\"" : "");
        }
    }
    fig_opts *o = calloc(1, sizeof *o);
    if (!o) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    as_error e2 = {0};
    as_status rc = figure_opts_of(fj, file, where, o, err);
    if (rc == AS_OK && figure_check_options(r, o, NULL, &e2) != AS_OK) {
        char msg[AS_ERROR_MSG_MAX]; /* the keys of the file, not the flags of attnscope plot */
        size_t k = 0;
        for (const char *p = e2.msg; *p && k + 1 < sizeof msg; p++) {
            if (p[0] == '-' && p[1] == '-' && (p == e2.msg || p[-1] == ' ' || p[-1] == '(')) p += 2;
            msg[k++] = *p;
        }
        msg[k] = 0;
        rc = as_fail(err, AS_ERR_CONFIG, "%s: %s: %s", file, where, msg);
    }
    free(o);
    return rc;
}

/* Every key of the file and the values this file can check without the models: unknown keys
 * (with a "did you mean"), types, ranges, formats, duplicate figure names, each figure's
 * options, the record quantities. */
static as_status check_schema(const cJSON *root, const char *file, as_error *err) {
    if (keys_known(root, top_keys, file, "", err) != AS_OK) return err->status;
    if (str_is(root, "description", file, "", err) != AS_OK || str_is(root, "record", file, "", err) != AS_OK ||
        int_in(root, "limit", 0, 2147483647.0, file, "", err) != AS_OK)
        return err->status;
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(root, "models"), *m, *f;
    int i = 0;
    cJSON_ArrayForEach(m, models) if (check_model(m, i++, file, err) != AS_OK) return err->status;
    if (check_images(root, file, err) != AS_OK || check_budget(root, file, err) != AS_OK) return err->status;
    const cJSON *figs = cJSON_GetObjectItemCaseSensitive(root, "figures");
    if (figs && !cJSON_IsArray(figs))
        return as_fail(err, AS_ERR_CONFIG, "%s: \"figures\" must be a list such as [{\"figure\": \"entropy\"}]", file);
    i = 0;
    cJSON_ArrayForEach(f, figs) {
        if (check_figure(f, i, models, file, err) != AS_OK) return err->status;
        const char *base = jstr(f, "name", jstr(f, "figure", ""));
        int k = 0;
        for (const cJSON *g = figs->child; g != f; g = g->next, k++)
            if (strcmp(jstr(g, "name", jstr(g, "figure", "")), base) == 0)
                return as_fail(err, AS_ERR_CONFIG, "%s: figures[%d] and figures[%d] are both named \"%s\" and would "
                               "overwrite each other: give one a \"name\"", file, k, i, base);
        i++;
    }
    const char *rec = jstr(root, "record", NULL);
    if (rec) {
        record_opts *ro = calloc(1, sizeof *ro);
        if (!ro) return as_fail(err, AS_ERR_NOMEM, "out of memory");
        vit_config c;
        memset(&c, 0, sizeof c);
        c.depth = c.num_heads = 1;
        as_error e2 = {0};
        const int bad = record_parse_selection(ro, &c, rec, "all", "all", "f16", "none", "all", &e2);
        free(ro);
        if (bad) return as_fail(err, AS_ERR_CONFIG, "%s: \"record\": %s", file, e2.msg);
    }
    return AS_OK;
}

as_status experiment_check(const char *text, const char *file, as_error *err) {
    cJSON *root = cJSON_ParseWithOpts(text, NULL, 1);
    as_status rc = AS_OK;
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(root, "models"), *m, *f;
    const char *name = cJSON_IsObject(root) ? jstr(root, "name", NULL) : NULL;
    if (!cJSON_IsObject(root)) {
        rc = as_fail(err, AS_ERR_CONFIG, "%s: not valid JSON (or text after its object): see docs/experiments.md", file);
    } else if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(root, "name")) && cJSON_GetObjectItemCaseSensitive(root, "name")) {
        rc = as_fail(err, AS_ERR_CONFIG, "%s: \"name\" must be a string (in quotes)", file);
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
    if (rc == AS_OK) rc = check_schema(root, file, err);
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
    /* the analysis options and metric names, before anything is trained or recorded */
    const cJSON *an = rc == AS_OK ? cJSON_GetObjectItemCaseSensitive(root, "analyze") : NULL;
    analysis_opts scratch;
    if (an) rc = analyze_opts(an, &scratch, file, err); /* its metrics too */
    cJSON_Delete(root);
    return rc;
}

/* Files in OUT the experiment may replace: only those it wrote itself, which have a stamp in
 * OUT/.state (a figure's is written before the figure is begun). index.md, written before its
 * stamp was kept, is also recognised by its "Reproduce everything" line. */
static int stamped(const exp_run *x, const char *key) {
    char path[1400];
    snprintf(path, sizeof path, "%s/.state/%s", x->out, key);
    return access(path, F_OK) == 0;
}

static int our_index(const exp_run *x, const char *path) {
    if (stamped(x, "index")) return 1;
    char *t = model_read_text(path, NULL);
    const int ours = t && strncmp(t, "# ", 2) == 0 && strstr(t, "Reproduce everything: `attnscope experiment ");
    free(t);
    return ours;
}

static as_status foreign(const exp_run *x, const char *path, as_error *err) {
    return as_fail(err, AS_ERR_EXISTS, "%s: exists and was not written by this experiment (no stamp in "
                   "%s/.state): move it away or choose another --out", path, x->out);
}

/* A model's config without its weights (cheap: nothing is built), for checks before anything
 * runs: 1 when known, 0 for a checkpoint (its config is read when it is loaded), or an error. */
static int model_config_of(const exp_run *x, const exp_model *em, vit_config *c, as_error *err) {
    memset(c, 0, sizeof *c);
    const cJSON *cfgj = cJSON_GetObjectItemCaseSensitive(em->spec, "config");
    if (cJSON_IsString(cfgj)) {
        char p[1200];
        resolve(x, cfgj->valuestring, p, sizeof p);
        struct stat sb;
        return model_config_from_arch(c, stat(p, &sb) == 0 ? p : cfgj->valuestring, err) == AS_OK ? 1 : -1;
    }
    if (!cJSON_IsObject(cfgj)) return 0;
    char *json = cJSON_PrintUnformatted(cfgj), what[256];
    snprintf(what, sizeof what, "%s (model %s)", x->file, em->name);
    as_status rc = json ? model_config_apply_json(c, json, what, err) : as_fail(err, AS_ERR_NOMEM, "out of memory");
    free(json);
    return rc == AS_OK ? 1 : -1;
}

/* Before anything runs: each figure's "layer" (and "head") within every model it draws whose
 * config is known (all are recorded whole). */
static as_status check_figure_layers(const exp_run *x, const cJSON *root, as_error *err) {
    static vit_config cfg[EXP_MAX_MODELS];
    int known[EXP_MAX_MODELS];
    for (int i = 0; i < x->n_models; i++)
        if ((known[i] = model_config_of(x, &x->models[i], &cfg[i], err)) < 0) return err->status;
    const cJSON *figs = cJSON_GetObjectItemCaseSensitive(root, "figures"), *fj, *m;
    int idx = 0;
    cJSON_ArrayForEach(fj, figs) {
        const int layer = jint(fj, "layer", -1), head = jint(fj, "head", -1);
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(fj, "models");
        for (int i = 0; i < x->n_models; i++) {
            int used = !ms && i == 0;
            cJSON_ArrayForEach(m, ms) used |= strcmp(m->valuestring, x->models[i].name) == 0;
            if (!used || known[i] != 1) continue;
            const vit_config *c = &cfg[i];
            if (layer >= c->depth)
                return as_fail(err, AS_ERR_CONFIG, "%s: figures[%d]: \"layer\": %d: model \"%s\" has layers 0..%d",
                               x->file, idx, layer, x->models[i].name, c->depth - 1);
            if (c->n_stages == 0 && head >= c->num_heads)
                return as_fail(err, AS_ERR_CONFIG, "%s: figures[%d]: \"head\": %d: model \"%s\" has heads 0..%d",
                               x->file, idx, head, x->models[i].name, c->num_heads - 1);
        }
        idx++;
    }
    return AS_OK;
}

/* Before anything runs: every figure file and index.md that exists in OUT must be the
 * experiment's own. */
static as_status check_outputs(const exp_run *x, const cJSON *root, as_error *err) {
    struct stat sb;
    char path[1300], key[160];
    const cJSON *figs = cJSON_GetObjectItemCaseSensitive(root, "figures"), *fj, *f;
    cJSON_ArrayForEach(fj, figs) {
        const char *base = jstr(fj, "name", jstr(fj, "figure", ""));
        const char *def[] = {"pdf", "png"};
        const cJSON *fm = cJSON_GetObjectItemCaseSensitive(fj, "formats");
        int nf = 0;
        const char *formats[3];
        if (fm) {
            cJSON_ArrayForEach(f, fm) if (nf < 3) formats[nf++] = f->valuestring;
        } else {
            formats[nf++] = def[0];
            formats[nf++] = def[1];
        }
        for (int i = 0; i < nf; i++) {
            snprintf(path, sizeof path, "%s/%s.%s", x->out, base, formats[i]);
            snprintf(key, sizeof key, "figure.%s.%s", base, formats[i]);
            if (lstat(path, &sb) == 0 && !stamped(x, key)) return foreign(x, path, err);
        }
    }
    snprintf(path, sizeof path, "%s/index.md", x->out);
    if (lstat(path, &sb) == 0 && !our_index(x, path)) return foreign(x, path, err);
    return AS_OK;
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
    struct stat sb;
    char where[64];
    snprintf(where, sizeof where, "figures[%d]", idx);
    if (figure_opts_of(fj, x->file, where, &o, err) != AS_OK) return err->status;
    const char *cm = jstr(fj, "cmap", NULL), *rg = jstr(fj, "range", NULL);
    char base[96];
    if (!exp_name_ok(jstr(fj, "name", fname), sizeof base))
        return as_fail(err, AS_ERR_CONFIG, "%s: figures[%d]: name \"%s\" is not a plain file name: "
                       "use letters, digits, '-' or '_' (no '/', no leading '.')", x->file, idx,
                       jstr(fj, "name", fname));
    snprintf(base, sizeof base, "%s", jstr(fj, "name", fname));
    char *fjs = cJSON_PrintUnformatted(fj);
    char fstamp[65536];
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
        if (rc == AS_OK && stat(path, &sb) != 0) rc = stamp_write(x, key, "", err); /* ours from now on */
        as_error e2 = {0};
        if (rc == AS_OK && figure_render(r, &o, path, &e2) != AS_OK) /* name the experiment and the figure */
            rc = as_fail(err, e2.status, "%s: %s (\"%s\"): %s", x->file, where, base, e2.msg);
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
    fprintf(index, "Redraw:\n\n```sh\nattnscope plot %s%s", fname, srcs);
    if (r->options & FIG_OPT_LABELS) fprintf(index, " --labels %s", labels); /* others refuse it */
    const char *ints[] = {"layer", "head", "image", "query"};
    for (int i = 0; i < 4; i++)
        if (jint(fj, ints[i], -1) >= 0) fprintf(index, " --%s %d", ints[i], jint(fj, ints[i], -1));
    if (o.definition) fprintf(index, " --definition %s", o.definition);
    if (cm) fprintf(index, " --cmap %s", cm);
    if (rg) fprintf(index, " --range %s", rg);
    if (o.width > 0) fprintf(index, " --width %g", o.width);
    if (o.height > 0) fprintf(index, " --height %g", o.height);
    fprintf(index, " -o %s/%s.pdf --force\n```\n\n", x->out, base); /* the experiment's own figure */
    return AS_OK;
}

static const cli_opt experiment_opts_table[] = {
    /* key alias name     ARG    values     default         help */
    {'o', 'o', "out",     "DIR", NULL,      "results/NAME", "the experiment's folder (NAME: the file's \"name\")"},
    {'T', 0,   "trained", "TDIR", NULL,     "DIR/../trained", "where models marked \"train\" are trained, one "
     "folder per config and budget, shared by experiments"},
    {'t', 0,   "threads", "N",   "1..1024", "$OMP_NUM_THREADS, else all cores", "threads"},
    {0}};

static const cli_cmd experiment_cmd = {
    "experiment", "EXPERIMENT.json [--out DIR] [--trained TDIR] [--threads N]",
    "Runs an experiment file (models, images, what to record, which analyses, which figures): trains the "
    "models marked \"train\" with the file's budget, records each "
    "model into DIR/MODEL.h5, analyses it, draws the figures into DIR and writes DIR/index.md with every "
    "figure, the numbers behind it and the command that redraws it. A rerun redoes only the steps whose "
    "inputs changed. The format: docs/experiments.md; examples: experiments/*.json.",
    experiment_opts_table, NULL};

int cmd_experiment(int argc, char **argv) {
    const char *out = NULL, *trained = NULL;
    int threads = 0, ch;
    optind = 1;
    while ((ch = cli_opts_next(&experiment_cmd, argc, argv)) >= 0) {
        switch (ch) {
        case 'o': out = optarg; break;
        case 'T': trained = optarg; break;
        case 't':
            if (!cli_parse_int(optarg, 1, 1024, &threads)) return cli_bad_value(&experiment_cmd, ch, optarg);
            break;
        }
    }
    if (ch != CLI_END) return cli_opts_exit(ch);
    if (optind >= argc) return cli_missing(&experiment_cmd, "EXPERIMENT.json, the experiment file to run");
    if (optind + 1 < argc) return cli_extra(&experiment_cmd, argv[optind + 1]);
    runtime_set_threads(threads);
    static exp_run x;
    memset(&x, 0, sizeof x);
    x.file = argv[optind];
    as_error err = {0};
    char *text = model_read_text(x.file, &err);
    if (!text) return cli_error(&err);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1); /* nothing may follow the object */
    if (!cJSON_IsObject(root)) { /* the error pointer points into text: report before freeing */
        cJSON *head = root ? NULL : cJSON_ParseWithOpts(text, &end, 0);
        const char *near = cJSON_IsObject(head) ? (end ? end + strspn(end, " \t\r\n") : "")
                           : cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "";
        const int nl = (int)strcspn(near, "\r\n"); /* one line */
        if (cJSON_IsObject(head))
            cli_fail(1, "%s: text after the JSON object (near \"%.*s\"): the file holds one object; remove "
                     "the rest (docs/experiments.md)", x.file, nl < 30 ? nl : 30, near);
        else
            cli_fail(1, "%s: not valid JSON (near \"%.*s\"): see docs/experiments.md", x.file, nl < 30 ? nl : 30, near);
        cJSON_Delete(head);
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
        cli_fail(1, "%s: needs \"name\" and a non-empty \"models\" list: see docs/experiments.md", x.file);
        cJSON_Delete(root);
        return 1;
    }
    if (!exp_name_ok(name, 256)) {
        cli_fail(1, "%s: \"name\": \"%s\" is not a plain folder name: use letters, digits, '-' or '_' "
                 "(no '/', no leading '.')", x.file, name);
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
    if (parse_budget(&x, root, &err) != AS_OK) {
        cJSON_Delete(root);
        return cli_error(&err);
    }
    if (x.train) { /* an absolute path: a resumed training checks it against the one it started with */
        char t[1100], *slash2;
        if (trained) snprintf(t, sizeof t, "%s", trained);
        else if ((slash2 = strrchr(x.out, '/'))) snprintf(t, sizeof t, "%.*s/trained", (int)(slash2 - x.out), x.out);
        else snprintf(t, sizeof t, "trained");
        char *abs = cli_make_dirs(t) ? NULL : realpath(t, NULL);
        if (abs) snprintf(x.trained_root, sizeof x.trained_root, "%s", abs);
        free(abs);
        if (!abs) {
            cli_fail(1, "%s: cannot create the folder for trained models; pass --trained DIR", t);
            cJSON_Delete(root);
            return 1;
        }
    }
    cJSON_ArrayForEach(m, models) {
        const char *mn = jstr(m, "name", NULL);
        if (!exp_name_ok(mn, 64) || x.n_models == EXP_MAX_MODELS || find_model(&x, mn)) {
            cli_fail(1, "%s: every model needs a unique \"name\" that is a plain file name (no '/', no "
                     "leading '.', under 64 bytes; at most %d models)", x.file, EXP_MAX_MODELS);
            cJSON_Delete(root);
            return 1;
        }
        exp_model *em = &x.models[x.n_models++];
        snprintf(em->name, sizeof em->name, "%s", mn);
        em->spec = m;
        snprintf(em->trace, sizeof em->trace, "%s/%s.h5", x.out, mn);
        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(m, "train");
        em->train = cJSON_IsTrue(tr);
        const char *why = NULL;
        if (tr && !cJSON_IsBool(tr)) why = "\"train\" must be true or false";
        else if (em->train && !x.train) why = "\"train\": true needs the experiment's \"train\" budget";
        else if (em->train && jstr(m, "model", NULL)) why = "\"train\": true trains a \"config\", not a \"model\"";
        if (why) {
            cli_fail(1, "%s: model \"%s\": %s (docs/experiments.md)", x.file, mn, why);
            cJSON_Delete(root);
            return 1;
        }
    }
    if (check_figure_layers(&x, root, &err) != AS_OK || check_outputs(&x, root, &err) != AS_OK) {
        cJSON_Delete(root);
        return cli_error(&err);
    }
    int trains = 0;
    for (int i = 0; i < x.n_models; i++) trains += x.models[i].train;
    if (x.train && !trains) {
        cli_fail(1, "%s: a \"train\" budget but no model with \"train\": true; mark the models "
                 "to train or remove the budget (docs/experiments.md)", x.file);
        cJSON_Delete(root);
        return 1;
    }
    const cJSON *imj = cJSON_GetObjectItemCaseSensitive(root, "images");
    if (!trains && cJSON_IsObject(imj) && cJSON_GetObjectItemCaseSensitive(imj, "heldout")) {
        cli_fail(1, "%s: \"images\": {\"heldout\": N} takes held-out images of the training data: it needs the "
                 "\"train\" budget and a model with \"train\": true (docs/experiments.md)", x.file);
        cJSON_Delete(root);
        return 1;
    }
    printf("attnscope experiment %s -> %s/\n", name, x.out);
    char img_stamp[1400];
    double t0 = cli_now();
    for (int i = 0; i < x.n_models && !rc; i++) {
        const as_status s = x.models[i].train ? train_model(&x, &x.models[i], &err) : AS_OK;
        if (s != AS_OK) rc = s == AS_ERR_INTERRUPTED ? (cli_error(&err), 130) : cli_error(&err);
    }
    if (!rc && prepare_images(&x, root, img_stamp, sizeof img_stamp, &err) != AS_OK) rc = cli_error(&err);
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
            if (x.train) {
                train_opts bo;
                budget_opts(&x, &bo, &err);
                fprintf(af.fp, "**Training budget** (`\"train\"`: `%s`): the models marked trained were trained by "
                        "`attnscope train` for %d epoch%s of batch %d on `%s`, seed %llu, lr %g, warm-up %g epochs, "
                        "weight decay %g, LaViT's diagonality term `%s` at weight %g, every other option at its "
                        "default (docs/training.md). Held-out accuracy is measured on the data's held-out images, "
                        "which training never sees.\n\n", x.budget, bo.epochs, bo.epochs == 1 ? "" : "s", bo.batch, bo.data, bo.seed,
                        (double)bo.lr, (double)bo.warmup_epochs, (double)bo.weight_decay,
                        vit_dp_loss_name((vit_dp_loss)bo.dp_loss), (double)bo.dp_weight);
            }
            fprintf(af.fp, "| model | source | held-out accuracy | trace |\n|---|---|---|---|\n");
            for (int i = 0; i < x.n_models; i++) {
                const exp_model *em = &x.models[i];
                const char *src = jstr(em->spec, "model", NULL);
                const cJSON *cj = cJSON_GetObjectItemCaseSensitive(em->spec, "config");
                char *cs = src ? NULL : cJSON_IsString(cj) ? strdup(cj->valuestring) : cJSON_PrintUnformatted(cj);
                char acc[128] = "not measured";
                if (em->train)
                    snprintf(acc, sizeof acc, "%.1f%% (chance %.1f%%, %d images)", 100 * em->result.val_acc,
                             100.0 / em->result.n_classes, em->result.n_val);
                if (src) fprintf(af.fp, "| %s | checkpoint %s | %s | %s.h5 |\n", em->name, src, acc, em->name);
                else if (em->train)
                    fprintf(af.fp, "| %s | config `%s`, trained (%.0f s; %s) | %s | %s.h5 |\n", em->name,
                            cs ? cs : "", em->result.total_seconds, em->trained, acc, em->name);
                else
                    fprintf(af.fp, "| %s | config `%s`, random weights (seed %d) | %s | %s.h5 |\n", em->name,
                            cs ? cs : "", jint(em->spec, "seed", 1), acc, em->name);
                free(cs);
            }
            fprintf(af.fp, "\n");
            const cJSON *figs = cJSON_GetObjectItemCaseSensitive(root, "figures"), *fj;
            int idx = 0;
            cJSON_ArrayForEach(fj, figs) {
                if (rc) break;
                if (run_figure(&x, fj, idx++, af.fp, &err) != AS_OK) rc = cli_error(&err);
            }
            if (!rc && !stamped(&x, "index") && stamp_write(&x, "index", "index.md\n", &err) != AS_OK)
                rc = cli_error(&err); /* ours before it is in place */
            if (rc) atomic_file_abort(&af);
            else if (atomic_file_commit(&af, &err) != AS_OK) rc = cli_error(&err);
        }
        if (!rc) printf("done in %.1f s: %s\n", cli_now() - t0, ipath);
    }
    cJSON_Delete(root);
    return rc;
}
