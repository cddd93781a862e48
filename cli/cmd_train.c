/* cmd_train.c: attnscope train: a ViT of any mechanism trained on the CPU (core/train.h), with
 * evaluation each epoch, checkpoints that `record` and PyTorch load, exact resume, and traces of
 * held-out images as training goes. docs/training.md is the user's page. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* realpath */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/rng.h"
#include "../core/train.h"
#include "../core/vitfam.h"
#include "../io/atomic.h"
#include "../io/checkpoint.h"
#include "../io/sha256.h"
#include "../io/traindata.h"
#include "cli.h"

void train_opts_default(train_opts *o) {
    memset(o, 0, sizeof *o);
    o->epochs = 20;
    o->batch = 128;
    o->lr = 1e-3f;
    o->min_lr = 1e-5f;
    o->warmup_lr = 1e-6f;
    o->warmup_epochs = 1;
    o->weight_decay = 0.05f;
    o->clip = 1.0f;
    o->smoothing = 0.1f;
    o->dp_weight = 0.1f;
    o->dp_loss = VIT_DP_SQUARED;
    o->val_fraction = 0.1f;
    o->crop_pad = -2;
    o->flip = 1;
    o->record_images = 64;
    o->record_what = "attn";
    o->keep = 2;
}

static volatile sig_atomic_t train_signal;
static void on_signal(int sig) { train_signal = sig; }

/* Where training stands, as state.json holds it. */
typedef struct {
    long epoch;      /* epochs completed */
    long batch;      /* batches of epoch + 1 already taken (a mid-epoch checkpoint) */
    long step;       /* optimizer steps */
    double loss_sum; /* the running epoch's sums (mid-epoch checkpoints) */
    double dp_sum;   /* the diagonality term's part of loss_sum */
    long correct, seen;
    double seconds;  /* training time so far */
    cJSON *history;  /* array of per-epoch objects */
    cJSON *trained_from; /* what the run started from (state.json "trained_from") */
    char run[17];        /* the run's stamp in each of its checkpoints ("" in runs from before it) */
} train_state;

/* Written into --out as a fresh run starts (before any checkpoint), holding its stamp: a run
 * stopped before its first checkpoint (no DIR/latest) starts again there as the same run. */
#define TRAIN_MARKER ".attnscope-train"

/* The stamp of the run that began in dir (its TRAIN_MARKER): 1 with id filled, else 0. */
static int marker_read(const char *dir, char id[17]) {
    char p[1200];
    snprintf(p, sizeof p, "%s/" TRAIN_MARKER, dir);
    char *text = model_read_text(p, NULL);
    const size_t n = text ? strspn(text + (strncmp(text, "run ", 4) == 0 ? 4 : 0), "0123456789abcdef") : 0;
    const int got = text && strncmp(text, "run ", 4) == 0 && n == 16;
    if (got) snprintf(id, 17, "%.16s", text + 4);
    free(text);
    return got;
}

static as_status marker_write(const char *dir, const char *id, as_error *err) {
    char p[1200];
    snprintf(p, sizeof p, "%s/" TRAIN_MARKER, dir);
    atomic_file af;
    as_status rc = atomic_file_begin(&af, p, err);
    if (rc != AS_OK) return rc;
    fprintf(af.fp, "run %s\nattnscope train writes this folder; --resume continues the run in it\n", id);
    return atomic_file_commit(&af, err);
}

/* A fresh run's stamp: what prune and save_point recognise as this run's own checkpoints. */
static void new_run_id(const char *out, char id[17]) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char real[PATH_MAX], buf[PATH_MAX + 96], hex[SHA256_HEX];
    int n = snprintf(buf, sizeof buf, "%lld.%09ld %ld %s", (long long)ts.tv_sec, (long)ts.tv_nsec, (long)getpid(),
                     realpath(out, real) ? real : out);
    sha256_hex(buf, n < (int)sizeof buf ? (size_t)n : sizeof buf - 1, hex);
    snprintf(id, 17, "%.16s", hex);
}

/* The options a resumed run must share with the run it continues. */
static cJSON *opts_json(const train_opts *o) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "config", o->config);
    cJSON_AddStringToObject(j, "data", o->data);
    if (o->num_classes > 0) cJSON_AddNumberToObject(j, "num_classes", o->num_classes);
    if (o->img_size > 0) cJSON_AddNumberToObject(j, "img_size", o->img_size);
    cJSON_AddNumberToObject(j, "epochs", o->epochs);
    cJSON_AddNumberToObject(j, "batch", o->batch);
    cJSON_AddNumberToObject(j, "lr", o->lr);
    cJSON_AddNumberToObject(j, "min_lr", o->min_lr);
    cJSON_AddNumberToObject(j, "warmup_lr", o->warmup_lr);
    cJSON_AddNumberToObject(j, "warmup_epochs", o->warmup_epochs);
    cJSON_AddNumberToObject(j, "weight_decay", o->weight_decay);
    cJSON_AddNumberToObject(j, "clip", o->clip);
    cJSON_AddNumberToObject(j, "smoothing", o->smoothing);
    cJSON_AddNumberToObject(j, "dp_weight", o->dp_weight);
    cJSON_AddStringToObject(j, "dp_loss", vit_dp_loss_name((vit_dp_loss)o->dp_loss));
    cJSON_AddNumberToObject(j, "val_fraction", o->val_fraction);
    cJSON_AddNumberToObject(j, "crop_pad", o->crop_pad);
    cJSON_AddBoolToObject(j, "flip", o->flip);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", o->seed);
    cJSON_AddStringToObject(j, "seed", seed);
    return j;
}

static char *state_text(const train_opts *o, const train_state *s, const optim_adamw *opt) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "attnscope-train-state");
    cJSON_AddNumberToObject(j, "version", 1);
    if (s->run[0]) cJSON_AddStringToObject(j, "run", s->run);
    cJSON_AddNumberToObject(j, "epoch", (double)s->epoch);
    cJSON_AddNumberToObject(j, "batch", (double)s->batch);
    cJSON_AddNumberToObject(j, "step", (double)s->step);
    cJSON_AddNumberToObject(j, "adamw_step", (double)opt->step);
    cJSON_AddNumberToObject(j, "epoch_loss_sum", s->loss_sum);
    cJSON_AddNumberToObject(j, "epoch_dp_sum", s->dp_sum);
    cJSON_AddNumberToObject(j, "epoch_correct", (double)s->correct);
    cJSON_AddNumberToObject(j, "epoch_seen", (double)s->seen);
    cJSON_AddNumberToObject(j, "seconds", s->seconds);
    cJSON_AddItemToObject(j, "options", opts_json(o));
    cJSON_AddItemReferenceToObject(j, "history", s->history);
    if (s->trained_from) cJSON_AddItemReferenceToObject(j, "trained_from", s->trained_from);
    char *t = cJSON_Print(j);
    cJSON_Delete(j);
    return t;
}

static double num(const cJSON *j, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Whether --config names what the run started from: a file with the same content (by any path),
 * or the same built-in name. saved: state.json's options; tf: its trained_from. */
static as_status check_config(const cJSON *saved, const cJSON *tf, const train_opts *o, const char *path,
                              as_error *err) {
    char now[SHA256_HEX], real[PATH_MAX];
    const int is_file = sha256_file(o->config, now, NULL) == AS_OK;
    const cJSON *was = cJSON_GetObjectItemCaseSensitive(saved, "config");
    const cJSON *was_sha = cJSON_GetObjectItemCaseSensitive(tf, "config_sha256");
    const cJSON *was_real = cJSON_GetObjectItemCaseSensitive(tf, "config");
    const char *name = cJSON_IsString(was) ? was->valuestring : "(unset)";
    if (cJSON_IsString(was_sha)) {
        if (!is_file)
            return as_fail(err, AS_ERR_ARG, "%s: the run was started with the config file %s, not %s; resume "
                           "with that file (or train into another --out)", path, name, o->config);
        if (strcmp(was_sha->valuestring, now) != 0)
            return as_fail(err, AS_ERR_ARG, "%s: changed since the run in %s started (sha256 %.12s then, %.12s "
                           "now); put back the config the run started with, or train the new one into another "
                           "--out", o->config, o->out, was_sha->valuestring, now);
        return AS_OK;
    }
    /* no hash: a built-in name, or a run from before the hash was kept (its file by realpath) */
    if (cJSON_IsString(was) && strcmp(was->valuestring, o->config) == 0) return AS_OK;
    if (is_file && cJSON_IsString(was_real) && realpath(o->config, real) && strcmp(real, was_real->valuestring) == 0)
        return AS_OK;
    return as_fail(err, AS_ERR_ARG, "%s: the run was started with --config %s, not %s; resume with the same "
                   "config (or train into another --out)", path, name, o->config);
}

/* Reads state.json into s and checks that o continues the same run. */
static as_status state_parse(const char *text, const char *path, const train_opts *o, train_state *s,
                             optim_adamw *opt, as_error *err) {
    cJSON *j = cJSON_Parse(text);
    const cJSON *f = j ? cJSON_GetObjectItemCaseSensitive(j, "format") : NULL;
    if (!cJSON_IsString(f) || strcmp(f->valuestring, "attnscope-train-state") != 0 || isnan(num(j, "step"))) {
        cJSON_Delete(j);
        return as_fail(err, AS_ERR_FORMAT, "%s: not an attnscope training state; the checkpoint is damaged, "
                       "start again without --resume", path);
    }
    cJSON *saved = cJSON_GetObjectItemCaseSensitive(j, "options"), *now = opts_json(o);
    /* runs from before the choice existed used the flipped reading of LaViT's Eq. 9 */
    if (cJSON_IsObject(saved) && !cJSON_GetObjectItemCaseSensitive(saved, "dp_loss"))
        cJSON_AddStringToObject(saved, "dp_loss", vit_dp_loss_name(VIT_DP_FLIPPED));
    as_status crc = check_config(saved, cJSON_GetObjectItemCaseSensitive(j, "trained_from"), o, path, err);
    if (crc != AS_OK) {
        cJSON_Delete(now);
        cJSON_Delete(j);
        return crc;
    }
    int no_less = -1; /* the model has no less-attention blocks: LaViT's term's options do nothing */
    for (const cJSON *e = now->child; e; e = e->next) {
        if (strcmp(e->string, "config") == 0) continue; /* by content, above */
        if (strncmp(e->string, "dp_", 3) == 0) {
            if (no_less < 0) {
                vit_config cfg = {0};
                as_error ignored;
                no_less = model_config_from_arch(&cfg, o->config, &ignored) == AS_OK && !vit_any_attn(&cfg, VIT_ATTN_LESS);
            }
            if (no_less) continue;
        }
        const cJSON *was = cJSON_GetObjectItemCaseSensitive(saved, e->string);
        if (!was || !cJSON_Compare(was, e, 1)) {
            char *a = was ? cJSON_PrintUnformatted(was) : NULL, *b = cJSON_PrintUnformatted(e), flag[64];
            snprintf(flag, sizeof flag, "%s", e->string); /* the state's key as the flag: min_lr -> --min-lr */
            for (char *q = flag; *q; q++) *q = *q == '_' ? '-' : *q;
            as_fail(err, AS_ERR_ARG, "%s: the run was started with --%s %s, not %s; resume with the same "
                    "options (or train into another --out)", path, flag, a ? a : "(unset)", b);
            free(a);
            free(b);
            cJSON_Delete(now);
            cJSON_Delete(j);
            return AS_ERR_ARG;
        }
    }
    cJSON_Delete(now);
    s->epoch = (long)num(j, "epoch");
    s->batch = (long)num(j, "batch");
    s->step = (long)num(j, "step");
    opt->step = (long)num(j, "adamw_step");
    s->loss_sum = num(j, "epoch_loss_sum");
    s->dp_sum = isnan(num(j, "epoch_dp_sum")) ? 0 : num(j, "epoch_dp_sum");
    s->correct = (long)num(j, "epoch_correct");
    s->seen = (long)num(j, "epoch_seen");
    s->seconds = num(j, "seconds");
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(j, "run");
    snprintf(s->run, sizeof s->run, "%s", cJSON_IsString(run) ? run->valuestring : "");
    cJSON *tf = cJSON_DetachItemFromObjectCaseSensitive(j, "trained_from");
    if (cJSON_IsObject(tf)) {
        cJSON_Delete(s->trained_from);
        s->trained_from = tf;
    } else {
        cJSON_Delete(tf);
    }
    cJSON *h = cJSON_DetachItemFromObjectCaseSensitive(j, "history");
    cJSON_Delete(s->history);
    s->history = cJSON_IsArray(h) ? h : cJSON_CreateArray();
    if (!cJSON_IsArray(h)) cJSON_Delete(h);
    cJSON_Delete(j);
    return AS_OK;
}

/* dir/latest -> name, replaced atomically. */
static as_status point_latest(const char *dir, const char *name, as_error *err) {
    char link[1100], tmp[1120];
    snprintf(link, sizeof link, "%s/latest", dir);
    snprintf(tmp, sizeof tmp, "%s/.latest.tmp", dir);
    unlink(tmp);
    if (symlink(name, tmp) != 0 || rename(tmp, link) != 0)
        return as_fail(err, AS_ERR_IO, "%s: cannot point it at %s (%s)", link, name, strerror(errno));
    return AS_OK;
}

/* The files of a checkpoint folder: all that checkpoint_remove deletes. */
static const char *const ckpt_files[] = {"config.json", "model.safetensors", "optimizer.safetensors", "state.json",
                                         NULL};

/* Whether dir is a folder of checkpoint files only (partial: or the atomic writer's temporaries of
 * them, as a stopped save leaves), so that removing it loses nothing else. */
static int only_checkpoint_files(const char *dir, int partial) {
    DIR *dh = opendir(dir);
    if (!dh) return 0;
    int only = 1;
    for (struct dirent *e = readdir(dh); only && e; e = readdir(dh)) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        int known = 0;
        for (int i = 0; ckpt_files[i] && !known; i++) {
            const size_t n = strlen(ckpt_files[i]);
            known = strcmp(e->d_name, ckpt_files[i]) == 0 ||
                    (partial && strncmp(e->d_name, ckpt_files[i], n) == 0 && strncmp(e->d_name + n, ".tmp", 4) == 0);
        }
        only = known;
    }
    closedir(dh);
    return only;
}

/* Whether dir is a checkpoint this run wrote: checkpoint files only, and a state.json with the
 * run's stamp (a run from before the stamp: none, and the same trained_from). */
static int own_checkpoint(const char *dir, const train_state *st) {
    if (!only_checkpoint_files(dir, 0)) return 0;
    char p[1200];
    snprintf(p, sizeof p, "%s/state.json", dir);
    char *text = model_read_text(p, NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "format"), *run = cJSON_GetObjectItemCaseSensitive(j, "run");
    const cJSON *tf = cJSON_GetObjectItemCaseSensitive(j, "trained_from");
    int own = cJSON_IsString(f) && strcmp(f->valuestring, "attnscope-train-state") == 0;
    if (own && st->run[0]) own = cJSON_IsString(run) && strcmp(run->valuestring, st->run) == 0;
    else if (own) own = !run && (!tf || !st->trained_from || cJSON_Compare(tf, st->trained_from, 1));
    cJSON_Delete(j);
    return own;
}

/* checkpoint_save replaces ckpt and clears ckpt.tmp and ckpt.old: only when they are this run's. */
static as_status check_target(const char *ckpt, const train_state *st, as_error *err) {
    struct stat sb;
    if (lstat(ckpt, &sb) == 0 && !(S_ISDIR(sb.st_mode) && own_checkpoint(ckpt, st)))
        return as_fail(err, AS_ERR_EXISTS, "%s: exists and is not a checkpoint of this run; move it out of the "
                       "--out folder, then continue with --resume", ckpt);
    static const char *const aside[] = {".tmp", ".old"};
    for (int i = 0; i < 2; i++) {
        char p[1200];
        snprintf(p, sizeof p, "%s%s", ckpt, aside[i]);
        if (lstat(p, &sb) == 0 && !(S_ISDIR(sb.st_mode) && only_checkpoint_files(p, 1)))
            return as_fail(err, AS_ERR_EXISTS, "%s: holds files that are not a checkpoint's; move it out of the "
                           "--out folder, then continue with --resume", p);
    }
    return AS_OK;
}

/* DIR/name: a checkpoint of where training stands, and DIR/latest pointing at it. */
static as_status save_point(const trainable *t, const train_opts *o, const train_state *st,
                            const optim_adamw *opt, const char *name, char *ckpt, size_t cn, as_error *err) {
    snprintf(ckpt, cn, "%s/%s", o->out, name);
    as_status crc = check_target(ckpt, st, err);
    if (crc != AS_OK) return crc;
    char *text = state_text(o, st, opt);
    as_status rc = text ? checkpoint_save(t, ckpt, text, err) : as_fail(err, AS_ERR_NOMEM, "out of memory");
    free(text);
    return rc == AS_OK ? point_latest(o->out, name, err) : rc;
}

/* Evaluation over the held-out set: mean CE (with the same smoothing) and accuracy. */
static void evaluate(const trainable *t, const traindata *d, vit_acts *a, float *x, int *labels,
                     int B, float smoothing, double *loss, double *acc) {
    const vit_config *c = &t->cfg;
    vit_tape *tape = a->tape;
    a->tape = NULL;
    int *idx = malloc((size_t)B * sizeof(int));
    double lsum = 0;
    long right = 0;
    for (int i = 0; i < d->n_val; i += B) {
        const int n = d->n_val - i < B ? d->n_val - i : B;
        for (int b = 0; b < n; b++) idx[b] = i + b;
        traindata_batch(d, 1, idx, n, x, labels, NULL, c);
        vit_forward(c, &t->p, a, x, n, NULL);
        int r;
        lsum += vit_loss_ce(a->logits, labels, n, c->num_classes, smoothing, NULL, &r) * n;
        right += r;
    }
    free(idx);
    a->tape = tape;
    *loss = lsum / d->n_val;
    *acc = (double)right / d->n_val;
}

/* The first k held-out images as an ImageFolder tree (dir/CLASS/NNNNN.png): what the traces
 * record, and what `attnscope record --images` reads back identically. */
as_status train_write_heldout(const traindata *d, int k, const char *dir, as_error *err) {
    char p[1400];
    if (cli_make_dirs(dir)) return as_fail(err, AS_ERR_IO, "%s: cannot create the folder", dir);
    for (int c = 0; c < d->n_classes; c++) {
        snprintf(p, sizeof p, "%s/%s", dir, d->classes[c]);
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return as_fail(err, AS_ERR_IO, "%s: cannot create (%s)", p, strerror(errno));
    }
    const size_t px = (size_t)d->size * d->size * 3;
    for (int i = 0; i < k && i < d->n_val; i++) {
        snprintf(p, sizeof p, "%s/%s/%05d.png", dir, d->classes[d->val_labels[i]], i);
        as_status rc = synth_save_png(p, d->val + i * px, d->size, d->size, err);
        if (rc != AS_OK) return rc;
    }
    return AS_OK;
}

/* The checkpoint folder ckpt's weights file as a trace names it: resolved path and hash (the
 * folder may be a link such as latest, and older epochs are pruned; the hash still says which
 * weights these were). NULL ckpt: the random initialisation. */
static as_status identify_weights(model *m, const char *ckpt, unsigned long long seed, as_error *err) {
    if (!ckpt) {
        snprintf(m->source, sizeof m->source, "random(seed=%llu)", seed);
        m->sha256[0] = 0;
        return AS_OK;
    }
    char weights[1200], real[PATH_MAX];
    snprintf(weights, sizeof weights, "%s/model.safetensors", ckpt);
    const char *src = realpath(weights, real) && strlen(real) < sizeof m->source ? real : weights;
    snprintf(m->source, sizeof m->source, "%.*s", (int)sizeof m->source - 1, src);
    return sha256_file(weights, m->sha256, err);
}

static as_status record_epoch(const trainable *t, const train_opts *o, const char *heldout, long epoch,
                              const char *ckpt, char *trace_path, size_t tn, as_error *err) {
    model m = {0};
    m.cfg = t->cfg;
    m.params = t->p;
    snprintf(m.weights_dtype, sizeof m.weights_dtype, "F32");
    as_status rc = identify_weights(&m, ckpt, o->seed, err);
    if (rc != AS_OK) return rc;
    dataset ds;
    rc = dataset_open(&ds, heldout, err);
    if (rc != AS_OK) return rc;
    snprintf(trace_path, tn, "%s/trace-epoch-%03ld.h5", o->out, epoch);
    record_opts ro;
    memset(&ro, 0, sizeof ro);
    ro.out = trace_path;
    ro.mode = TRACE_FORCE;
    ro.quiet = 1;
    ro.spec.batch = 16;
    ro.spec.command_line = o->command_line ? o->command_line : "attnscope train";
    /* the training settings, LaViT's loss reading among them, as state.json holds them */
    cJSON *tj = opts_json(o);
    cJSON_AddNumberToObject(tj, "epoch", (double)epoch);
    char *training = cJSON_PrintUnformatted(tj);
    cJSON_Delete(tj);
    ro.spec.training = training;
    if (record_parse_selection(&ro, &m.cfg, o->record_what, "all", "all", "f16", "none", "all", err)) {
        dataset_free(&ds);
        free(training);
        return AS_ERR_ARG;
    }
    record_result res;
    rc = record_run(&m, &ds, &ro, &res, err);
    dataset_free(&ds);
    free(training);
    return rc;
}

/* After epoch's checkpoint: mid-epoch (interrupt) checkpoints are superseded, and epoch
 * checkpoints older than the newest keep (0: all kept) go; only this run's own (own_checkpoint). */
static void prune(const char *dir, long epoch, int keep, const train_state *st) {
    DIR *dh = opendir(dir);
    for (struct dirent *e = dh ? readdir(dh) : NULL; e; e = readdir(dh)) {
        long k;
        char end;
        const int old = keep > 0 && sscanf(e->d_name, "epoch-%ld%c", &k, &end) == 1 && k <= epoch - keep;
        if (strncmp(e->d_name, "step-", 5) == 0 || old) {
            char p[1400];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            if (own_checkpoint(p, st)) checkpoint_remove(p);
        }
    }
    if (dh) closedir(dh);
}

static void log_line(FILE *f, const cJSON *h) {
    fprintf(f, "%g,%g,%.6f,%.6f,%.6f,%.6f,%.6f,%.2f,%.2f", num(h, "epoch"), num(h, "step"), num(h, "lr"),
            num(h, "train_loss"), num(h, "train_acc"), num(h, "val_loss"), num(h, "val_acc"),
            num(h, "img_per_s"), num(h, "seconds"));
    /* epochs of runs resumed from before the terms were kept apart leave them empty */
    if (isnan(num(h, "train_ce"))) fprintf(f, ",,\n");
    else fprintf(f, ",%.6f,%.6f\n", num(h, "train_ce"), num(h, "train_dp"));
}

/* The loss terms of a progress or epoch line: "ce 1.234 dp -0.056" where LaViT's term applies,
 * else "ce 1.234" (the loss is then the cross-entropy alone). */
static void loss_terms(char *buf, size_t n, double loss, double dp, int has_dp) {
    if (has_dp) snprintf(buf, n, "ce %.3f dp %.3f", loss - dp, dp);
    else snprintf(buf, n, "ce %.3f", loss);
}

/* Held-out accuracy within three binomial standard deviations (at least 2 points) of chance. */
static int at_chance(double acc, int n_classes, int n_val) {
    const double p = 1.0 / n_classes, sd = sqrt(p * (1 - p) / (n_val > 0 ? n_val : 1));
    return acc < p + fmax(0.02, 3 * sd);
}

enum { TRAIN_CHANCE_EPOCHS = 3 }; /* epochs at chance in a row before the warning */

/* Trailing epochs of the history whose held-out accuracy is at chance. */
static int chance_streak(const cJSON *history, int n_classes, int n_val) {
    int k = 0;
    for (const cJSON *h = history->child; h; h = h->next)
        k = at_chance(num(h, "val_acc"), n_classes, n_val) ? k + 1 : 0;
    return k;
}

/* Advice for a run that is not learning, by which loss terms it has and how large the
 * diagonality term is against the cross-entropy (ce, dp: the epoch's means). */
static const char *not_learning_fix(const train_opts *o, int has_dp, double ce, double dp) {
    if (has_dp && o->dp_loss == VIT_DP_FLIPPED)
        return "the flipped diagonality term rewards identity maps: use --dp-loss squared or --dp-weight 0";
    if (has_dp && fabs(dp) > 0.1 * ce) return "the diagonality term is large: try a smaller --dp-weight";
    return "check the labels and --lr, or train longer (small models can sit at chance for a few hundred steps)";
}

#define TRAIN_LOG_HEADER "epoch,step,lr,train_loss,train_acc,val_loss,val_acc,img_per_s,seconds"

/* log.csv from the history, rewritten whole each epoch (so a resumed run's log is complete); a
 * log.csv that does not start with the run's header is someone else's and stays. */
static as_status write_log(const char *dir, const cJSON *history, as_error *err) {
    char p[1200], first[256] = "";
    snprintf(p, sizeof p, "%s/log.csv", dir);
    FILE *old = fopen(p, "rb");
    if (old) {
        const int read = fgets(first, sizeof first, old) != NULL;
        fclose(old);
        if (!read || strncmp(first, TRAIN_LOG_HEADER, strlen(TRAIN_LOG_HEADER)) != 0)
            return as_fail(err, AS_ERR_EXISTS, "%s: not the log attnscope train writes (its first line is not \"%s,"
                           "...\"); move it out of the --out folder, then continue with --resume", p, TRAIN_LOG_HEADER);
    }
    atomic_file af;
    as_status rc = atomic_file_begin(&af, p, err);
    if (rc != AS_OK) return rc;
    fprintf(af.fp, TRAIN_LOG_HEADER ",train_ce,train_dp\n");
    for (const cJSON *h = history->child; h; h = h->next) log_line(af.fp, h);
    return atomic_file_commit(&af, err);
}

/* state.json's "trained_from": a fresh run starts from seeded random weights; the config file's
 * hash pins what --config named (a file can change under the same name). */
static cJSON *trained_from_json(const train_opts *o) {
    cJSON *j = cJSON_CreateObject();
    char init[64], hex[SHA256_HEX], real[PATH_MAX];
    snprintf(init, sizeof init, "random(seed=%llu)", o->seed);
    cJSON_AddStringToObject(j, "init", init);
    cJSON_AddStringToObject(j, "config", realpath(o->config, real) ? real : o->config);
    if (sha256_file(o->config, hex, NULL) == AS_OK) cJSON_AddStringToObject(j, "config_sha256", hex);
    cJSON_AddStringToObject(j, "data", o->data);
    return j;
}

/* The first entry of dir that is not in allowed (NULL-terminated, or NULL): 1 with its name, 0
 * when there is none (or no folder). */
static int foreign_entry(const char *dir, const char *const *allowed, char *name, size_t n) {
    DIR *dh = opendir(dir);
    int found = 0;
    for (struct dirent *e = dh ? readdir(dh) : NULL; e && !found; e = readdir(dh)) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        found = 1;
        for (int i = 0; allowed && allowed[i] && found; i++) found = strcmp(e->d_name, allowed[i]) != 0;
        if (found) snprintf(name, n, "%s", e->d_name);
    }
    if (dh) closedir(dh);
    return found;
}

/* DIR/heldout before a run (re)writes it: absent, or only what train_write_heldout writes
 * (CLASS/NNNNN.png: the same images again), never anyone else's files. */
static as_status check_heldout(const char *dir, const traindata *d, as_error *err) {
    DIR *dh = opendir(dir);
    char bad[1400] = "";
    for (struct dirent *e = dh ? readdir(dh) : NULL; e && !bad[0]; e = readdir(dh)) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        int cls = 0;
        for (int c = 0; c < d->n_classes && !cls; c++) cls = strcmp(e->d_name, d->classes[c]) == 0;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        DIR *ch = cls ? opendir(p) : NULL;
        if (!ch) snprintf(bad, sizeof bad, "%s", p);
        for (struct dirent *f = ch ? readdir(ch) : NULL; f && !bad[0]; f = readdir(ch)) {
            const char *q = f->d_name;
            if (strcmp(q, ".") == 0 || strcmp(q, "..") == 0) continue;
            int digits = 0;
            while (digits < 5 && q[digits] >= '0' && q[digits] <= '9') digits++;
            const int png = digits == 5 && strncmp(q + 5, ".png", 4) == 0 && (!q[9] || strncmp(q + 9, ".tmp", 4) == 0);
            if (!png) snprintf(bad, sizeof bad, "%.700s/%.600s", p, q);
        }
        if (ch) closedir(ch);
    }
    if (dh) closedir(dh);
    if (bad[0])
        return as_fail(err, AS_ERR_EXISTS, "%s: not a held-out image that attnscope train writes; move it out of "
                       "%s (or train into another --out)", bad, dir);
    return AS_OK;
}

as_status train_run(const train_opts *o, train_result *res, as_error *err) {
    memset(res, 0, sizeof *res);
    vit_config cfg = {0}; /* model_config_from_arch layers a JSON on a "custom" base it is given */
    as_status rc = model_config_from_arch(&cfg, o->config, err);
    if (rc != AS_OK) return rc;
    if (o->num_classes > 0) cfg.num_classes = o->num_classes;
    if (o->img_size > 0) cfg.img_size = o->img_size;
    cfg.crop_pct = 1.0f; /* images at the training size pass record's preprocessing unchanged */
    if (cfg.num_classes <= 0)
        return as_fail(err, AS_ERR_CONFIG, "%s: num_classes is 0; training needs a classifier head", o->config);
    if ((rc = vit_config_validate(&cfg, err)) != AS_OK) return rc;
    const char *staged = cfg.n_stages > 0 ? vit_stage_untrainable(&cfg) : NULL;
    if (staged) /* issue 18 trains the rest of the stage frame */
        return as_fail(err, AS_ERR_UNSUPPORTED, "%s: training a staged model with %s is not supported yet: "
                       "train a Swin (vanilla or lmsa attention), PVT v2 or ViT/DeiT config, or run this one with "
                       "record", o->config, staged);
    const char *fam = vitfam_untrainable(&cfg); /* issue 18 trains the modern ViT family */
    if (fam)
        return as_fail(err, AS_ERR_UNSUPPORTED, "%s: training with %s is not supported yet: remove "
                       "it from the config, or run this model with record", o->config, fam);
    traindata d;
    if ((rc = traindata_open(&d, o->data, &cfg, o->val_fraction, err)) != AS_OK) return rc;
    res->n_train = d.n_train;
    res->n_val = d.n_val;
    res->n_classes = d.n_classes;
    const int B = o->batch < d.n_train ? o->batch : d.n_train;
    if (o->batch > d.n_train) /* every image each step: one step per epoch */
        fprintf(stderr, "attnscope train: note: batch %d is more than the %d training images of %s; each step "
                "takes all %d\n", o->batch, d.n_train, o->data, d.n_train);
    const long per_epoch = d.n_train / B, total_steps = per_epoch * o->epochs;
    const int pad = o->crop_pad == -2 ? d.size / 8 : o->crop_pad;

    /* the model: from the latest checkpoint (--resume) or random (seeded) */
    char latest[1100];
    snprintf(latest, sizeof latest, "%s/latest", o->out);
    struct stat sb;
    const int have = stat(latest, &sb) == 0;
    if (have && !o->resume) {
        traindata_free(&d);
        return as_fail(err, AS_ERR_EXISTS, "%s: already holds a training run; add --resume to continue it "
                       "or choose another --out", o->out);
    }
    if (!have && o->resume) {
        traindata_free(&d);
        return as_fail(err, AS_ERR_IO, "%s: no checkpoint to resume (%s is missing); run without --resume "
                       "to start", o->out, latest);
    }
    char other[256], run[17] = "";
    const int began = !have && marker_read(o->out, run); /* a fresh run stopped before its first checkpoint */
    /* never anyone else's files: a fresh run needs an empty folder (or one its own start left) */
    if (!have && !began && !o->others_stay && foreign_entry(o->out, o->preexisting, other, sizeof other)) {
        traindata_free(&d);
        return as_fail(err, AS_ERR_EXISTS, "%s: not empty (it holds %s) and not a training run; train into a new "
                       "or empty --out folder (or add --resume to continue an attnscope run there)", o->out, other);
    }
    if (cli_make_dirs(o->out)) {
        traindata_free(&d);
        return as_fail(err, AS_ERR_IO, "%s: cannot create the output folder", o->out);
    }
    if (!have && !began) new_run_id(o->out, run);
    if (!have && !began && (rc = marker_write(o->out, run, err)) != AS_OK) {
        traindata_free(&d);
        return rc;
    }
    model m;
    rc = have ? model_load(&m, latest, NULL, 0, err) : model_init_random(&m, &cfg, o->seed, err);
    if (rc != AS_OK) {
        traindata_free(&d);
        return rc;
    }
    trainable t;
    rc = trainable_init(&t, &m, err);
    model_free(&m);
    if (rc != AS_OK) {
        traindata_free(&d);
        return rc;
    }
    t.cfg.crop_pct = 1.0f;
    train_state st = {0};
    st.history = cJSON_CreateArray();
    runtime_info ri;
    runtime_get_info(&ri);
    runtime_info_for_model(&ri, NULL, NULL); /* training never packs: its weights change every step */
    if (!have) {
        st.trained_from = trained_from_json(o);
        snprintf(st.run, sizeof st.run, "%s", run);
    }
    optim_adamw opt = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = o->weight_decay};
    if (have) {
        char *text = NULL;
        rc = checkpoint_load_optimizer(&t, latest, &text, err);
        if (rc == AS_OK) rc = state_parse(text, latest, o, &st, &opt, err);
        free(text);
        if (!st.trained_from) { /* a checkpoint from before provenance was recorded */
            st.trained_from = cJSON_CreateObject();
            cJSON_AddStringToObject(st.trained_from, "init", "unknown (checkpoint written before attnscope recorded it)");
        }
    }
    /* buffers: activations with the training tape, gradient scratch, one batch of input */
    const vit_config *c = &t.cfg;
    const size_t ab = vit_acts_carve(c, B, NULL, NULL), tb = vit_tape_carve(c, B, NULL, NULL);
    const size_t wb = vit_grad_ws_carve(c, B, NULL, NULL);
    void *arena = rc == AS_OK ? aligned_alloc(64, ab + tb + wb) : NULL;
    float *x = malloc((size_t)B * 3 * d.size * d.size * sizeof(float));
    float *dlogits = malloc((size_t)B * c->num_classes * sizeof(float));
    int *labels = malloc((size_t)B * sizeof(int)), *perm = malloc((size_t)d.n_train * sizeof(int));
    if (rc == AS_OK && (!arena || !x || !dlogits || !labels || !perm))
        rc = as_fail(err, AS_ERR_NOMEM, "out of memory for training buffers (%.0f MB for batch %d); lower --batch",
                     (ab + tb + wb) / 1e6, B);
    vit_acts a;
    vit_tape tape;
    vit_grad_ws ws;
    if (rc == AS_OK) {
        vit_acts_carve(c, B, arena, &a);
        vit_tape_carve(c, B, (char *)arena + ab, &tape);
        vit_grad_ws_carve(c, B, (char *)arena + ab + tb, &ws);
        a.tape = &tape;
    }
    optim_schedule sched = {.lr = o->lr, .min_lr = o->min_lr, .warmup_lr = o->warmup_lr,
                            .warmup = (long)(o->warmup_epochs * per_epoch), .total = total_steps};
    char heldout[1100] = "", ckpt[1100] = "", name[64];
    if (rc == AS_OK && o->record_every > 0) {
        snprintf(heldout, sizeof heldout, "%s/heldout", o->out);
        rc = check_heldout(heldout, &d, err);
        if (rc == AS_OK) rc = train_write_heldout(&d, o->record_images, heldout, err);
        snprintf(res->heldout, sizeof res->heldout, "%s", heldout);
    }
    if (rc == AS_OK && !o->quiet) {
        char blas[256], line[1024];
        runtime_describe(&ri, blas, sizeof blas);
        snprintf(line, sizeof line, "train: %s on %s (%d train, %d held out: %s), %d classes, %ld step%s of %d "
                 "in %d epoch%s, %s", c->name, d.kind, d.n_train, d.n_val, d.val_source, d.n_classes,
                 total_steps, total_steps == 1 ? "" : "s", B, o->epochs, o->epochs == 1 ? "" : "s", blas);
        cli_wrap(stdout, 0, 7, line);
        fflush(stdout);
    }
    if (rc == AS_OK) runtime_warn("train"); /* --quiet drops the summary, never a warning */
    /* the untrained model's attention, the start of the series; on a resume at an epoch's end
     * whose trace was due, that trace again (a stop during it leaves it incomplete) */
    if (rc == AS_OK && o->record_every > 0 && st.step == 0)
        rc = record_epoch(&t, o, heldout, 0, NULL, res->last_trace, sizeof res->last_trace, err);
    else if (rc == AS_OK && o->record_every > 0 && st.batch == 0 && st.epoch > 0 &&
             (st.epoch % o->record_every == 0 || st.epoch == o->epochs))
        rc = record_epoch(&t, o, heldout, st.epoch, latest, res->last_trace, sizeof res->last_trace, err);

    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    train_signal = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    progress pg;
    const long done0 = st.step * B;
    progress_init(&pg, "train", total_steps * B, done0);
    double t_run = 0;
    /* LaViT's term applies (and is shown) only with less-attention blocks and a weight */
    const int has_dp = vit_any_attn(c, VIT_ATTN_LESS) && o->dp_weight > 0;
    int warned_negative = 0, warned_chance = 0;
    while (rc == AS_OK && st.epoch < o->epochs) {
        /* this epoch's order, from the seed and the epoch alone */
        rng_state r = {o->seed * 0x9e3779b97f4a7c15ull + (unsigned long long)st.epoch * 0x632be59bd9b4e019ull + 1};
        for (int i = 0; i < d.n_train; i++) perm[i] = i;
        for (int i = d.n_train - 1; i > 0; i--) {
            const int j = (int)(rng_next(&r) % (uint64_t)(i + 1)), tmp = perm[i];
            perm[i] = perm[j];
            perm[j] = tmp;
        }
        const traindata_aug aug = {.crop_pad = pad, .flip = o->flip, .seed = o->seed, .epoch = st.epoch};
        const double t_epoch = cli_now();
        while (st.batch < per_epoch && !train_signal) {
            const double t0 = cli_now();
            traindata_batch(&d, 0, perm + st.batch * B, B, x, labels, &aug, c);
            vit_forward(c, &t.p, &a, x, B, NULL);
            int right;
            double loss = vit_loss_ce(a.logits, labels, B, c->num_classes, o->smoothing, dlogits, &right);
            memset(t.g, 0, t.count * sizeof(float));
            const double dp = vit_backward(c, &t.p, &t.gp, &a, &ws, dlogits, B, o->dp_weight,
                                           (vit_dp_loss)o->dp_loss);
            loss += dp;
            optim_clip(t.g, t.count, o->clip);
            optim_adamw_step(&opt, t.w, t.g, t.m, t.v, t.decay, t.count, optim_lr(&sched, st.step));
            st.step++;
            st.batch++;
            st.loss_sum += loss * B;
            st.dp_sum += dp * B;
            st.correct += right;
            st.seen += B;
            const double dt = cli_now() - t0;
            st.seconds += dt;
            t_run += dt;
            if (!isfinite(loss)) {
                rc = as_fail(err, AS_ERR_ARG, "%s: the loss became %g at step %ld; lower --lr (now %g) or raise "
                             "--warmup-epochs", o->out, loss, st.step, (double)o->lr);
                break;
            }
            if (st.loss_sum < 0 && !warned_negative) {
                /* the cross-entropy is never negative: another term outweighs it */
                progress_finish(&pg);
                fprintf(stderr, "attnscope train: warning: epoch %ld: the total loss is negative (%.3f = ce %.3f + "
                        "dp %.3f); %s\n", st.epoch + 1, st.loss_sum / st.seen, (st.loss_sum - st.dp_sum) / st.seen,
                        st.dp_sum / st.seen,
                        not_learning_fix(o, has_dp, (st.loss_sum - st.dp_sum) / st.seen, st.dp_sum / st.seen));
                warned_negative = 1;
            }
            char note[160], terms[64];
            loss_terms(terms, sizeof terms, st.loss_sum / st.seen, st.dp_sum / st.seen, has_dp);
            snprintf(note, sizeof note, "epoch %ld/%d  %s  acc %.1f%%", st.epoch + 1, o->epochs, terms,
                     100.0 * st.correct / st.seen);
            progress_update_note(&pg, st.step * B, note);
        }
        if (rc != AS_OK) break;
        if (train_signal) {
            /* a checkpoint at this step; --resume takes the next batch */
            progress_finish(&pg);
            snprintf(name, sizeof name, "step-%07ld", st.step);
            rc = save_point(&t, o, &st, &opt, name, ckpt, sizeof ckpt, err);
            if (rc == AS_OK)
                rc = as_fail(err, AS_ERR_INTERRUPTED, "%s: interrupted at epoch %ld, step %ld; checkpoint saved in "
                             "%s; continue with the same command and --resume", o->out, st.epoch + 1, st.step, ckpt);
            break;
        }
        const double epoch_seconds = cli_now() - t_epoch;
        double vl, va;
        evaluate(&t, &d, &a, x, labels, B, o->smoothing, &vl, &va);
        st.epoch++;
        cJSON *h = cJSON_CreateObject();
        cJSON_AddNumberToObject(h, "epoch", (double)st.epoch);
        cJSON_AddNumberToObject(h, "step", (double)st.step);
        cJSON_AddNumberToObject(h, "lr", optim_lr(&sched, st.step - 1));
        cJSON_AddNumberToObject(h, "train_loss", st.loss_sum / st.seen);
        cJSON_AddNumberToObject(h, "train_ce", (st.loss_sum - st.dp_sum) / st.seen);
        cJSON_AddNumberToObject(h, "train_dp", st.dp_sum / st.seen);
        cJSON_AddNumberToObject(h, "train_acc", (double)st.correct / st.seen);
        cJSON_AddNumberToObject(h, "val_loss", vl);
        cJSON_AddNumberToObject(h, "val_acc", va);
        cJSON_AddNumberToObject(h, "img_per_s", st.seen / (epoch_seconds > 0 ? epoch_seconds : 1));
        cJSON_AddNumberToObject(h, "seconds", st.seconds);
        /* per epoch: a resumed run may continue on other kernels or threads */
        cJSON_AddStringToObject(h, "software", ri.software);
        cJSON_AddStringToObject(h, "blas_core", ri.core);
        cJSON_AddStringToObject(h, "blas_forced_by", ri.forced);
        cJSON_AddNumberToObject(h, "threads", ri.threads);
        cJSON_AddItemToArray(st.history, h);
        st.batch = 0;
        st.loss_sum = st.dp_sum = 0;
        st.correct = st.seen = 0;
        snprintf(name, sizeof name, "epoch-%03ld", st.epoch);
        rc = save_point(&t, o, &st, &opt, name, ckpt, sizeof ckpt, err);
        if (rc == AS_OK) rc = write_log(o->out, st.history, err);
        if (rc == AS_OK) prune(o->out, st.epoch, o->keep, &st);
        progress_finish(&pg);
        if (rc == AS_OK && !o->quiet) {
            /* the held-out loss is the cross-entropy alone */
            char terms[64], line[512];
            loss_terms(terms, sizeof terms, num(h, "train_loss"), num(h, "train_dp"), has_dp);
            snprintf(line, sizeof line, "epoch %3ld/%d  train %s acc %5.1f%%  held-out ce %.3f acc %5.1f%%  lr %.1e  "
                     "%.0f img/s", st.epoch, o->epochs, terms, 100 * num(h, "train_acc"), vl, 100 * va,
                     num(h, "lr"), num(h, "img_per_s"));
            cli_wrap(stdout, 0, 13, line); /* within the terminal, continued under the numbers */
            fflush(stdout);
        }
        const int streak = chance_streak(st.history, d.n_classes, d.n_val);
        if (rc == AS_OK && streak >= TRAIN_CHANCE_EPOCHS && !warned_chance) {
            fprintf(stderr, "attnscope train: warning: held-out accuracy has stayed at chance (%.1f%%) for %d "
                    "epochs (step %ld, now %.1f%%): the model is not learning; %s\n", 100.0 / d.n_classes, streak, st.step, 100 * va,
                    not_learning_fix(o, has_dp, num(h, "train_ce"), num(h, "train_dp")));
            warned_chance = 1;
        }
        if (streak == 0) warned_chance = 0;
        if (rc == AS_OK && o->record_every > 0 && (st.epoch % o->record_every == 0 || st.epoch == o->epochs))
            rc = record_epoch(&t, o, heldout, st.epoch, ckpt, res->last_trace, sizeof res->last_trace, err);
        if (rc == AS_ERR_INTERRUPTED) /* during a trace: the epoch's checkpoint is already saved */
            as_fail(err, AS_ERR_INTERRUPTED, "%s: interrupted after epoch %ld; continue with the same command and "
                    "--resume", o->out, st.epoch);
    }
    progress_finish(&pg);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    /* the last finished epoch, whether this run or an earlier one finished it */
    const cJSON *last = cJSON_GetArrayItem(st.history, cJSON_GetArraySize(st.history) - 1);
    if (last) {
        res->train_loss = num(last, "train_loss");
        res->train_ce = num(last, "train_ce");
        res->total_seconds = num(last, "seconds");
        res->train_dp = num(last, "train_dp");
        res->train_acc = num(last, "train_acc");
        res->val_loss = num(last, "val_loss");
        res->val_acc = num(last, "val_acc");
    }
    res->epochs_done = (int)st.epoch;
    res->seconds = t_run;
    res->img_per_s = t_run > 0 ? (st.step * B - done0) / t_run : 0;
    snprintf(res->checkpoint, sizeof res->checkpoint, "%s", ckpt[0] ? ckpt : latest);
    cJSON_Delete(st.history);
    cJSON_Delete(st.trained_from);
    free(arena);
    free(x);
    free(dlogits);
    free(labels);
    free(perm);
    trainable_free(&t);
    traindata_free(&d);
    return rc;
}

static int parse_float(const char *s, float lo, float hi, float *out, const char *what) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= lo && v <= hi)) {
        cli_fail(2, "%s %s: expected a number in [%g, %g]", what, s, (double)lo, (double)hi);
        return 0;
    }
    *out = (float)v;
    return 1;
}

/* Keys of the options without a short letter. */
enum { K_LR = 1, K_MIN_LR, K_WARMUP, K_WD, K_CLIP, K_SMOOTH, K_DP, K_VAL, K_CROP, K_NOFLIP, K_SEED,
       K_REC_EVERY, K_REC_IMAGES, K_RECORD, K_RESUME, K_KEEP, K_NUM_CLASSES, K_IMG_SIZE, K_DP_LOSS };

static const cli_opt train_opts_table[] = {
    /* key         alias name            ARG     values        default        help */
    {'c',          'c', "config",        "MODEL.json|ARCH", NULL, "required", "the model: a JSON config (docs/models.md) "
     "or a built-in architecture name"},
    {'d',          'd', "data",          "DATA", NULL, "required", "shapes[:COUNT[:SIZE]] (built in, 6 classes), a "
     "CIFAR-10/100 binary folder or .bin file, an MNIST folder of IDX files, or an ImageFolder tree (CLASS/ "
     "folders, or train/ and val/ each with CLASS/ folders)"},
    {'o',          'o', "out",           "DIR",  NULL, "required", "checkpoint folder: new or empty (another "
     "folder is refused), or the run to continue with --resume"},
    {K_NUM_CLASSES, 0,  "num-classes",   "C",    "1..1048576", "the config's", "override the config's classes (e.g. "
     "a built-in architecture such as deit_tiny_patch16_224 on shapes: --num-classes 6 --img-size 32)"},
    {K_IMG_SIZE,   0,   "img-size",      "S",    "1..16384", "the config's", "override the config's input size"},
    {'e',          'e', "epochs",        "N",    "1..100000", "20", "epochs"},
    {'b',          'b', "batch",         "N",    "1..4096", "128", "images per optimizer step (above the "
     "training images: all of them, with a note on stderr)"},
    {K_LR,         0,   "lr",            "LR",   "0..10", "1e-3", "peak learning rate (after warm-up; cosine decay to --min-lr)"},
    {K_MIN_LR,     0,   "min-lr",        "LR",   "0..10", "1e-5", "learning rate at the end of the cosine decay "
     "(at most --lr)"},
    {K_WARMUP,     0,   "warmup-epochs", "E",    "0..1000", "1", "linear warm-up from 1e-6, in epochs (given: "
     "fewer than --epochs)"},
    {K_WD,         0,   "weight-decay",  "W",    "0..10", "0.05", "AdamW's decoupled weight decay"},
    {K_CLIP,       0,   "clip",          "C",    "0..1e6", "1", "gradient clipping by global norm"},
    {K_SMOOTH,     0,   "smoothing",     "S",    "0..0.99", "0.1", "label smoothing of the cross-entropy"},
    {K_DP,         0,   "dp-weight",     "W",    "0..1000", "0.1", "weight of LaViT's diagonality-preserving loss on "
     "less-attention blocks (refused for models without them)"},
    {K_DP_LOSS,    0,   "dp-loss",       "R",    "squared, hinge, flipped", "squared", "reading of LaViT's Eq. 8/9 "
     "(docs/training.md): squared, zero once maps are symmetric with dominant diagonals; hinge, the same with "
     "absolute values, which can hold LaViT at chance; flipped, Eq. 9 with its sign flipped, which rewards "
     "identity maps (refused for models without less-attention blocks)"},
    {K_VAL,        0,   "val-fraction",  "F",    "0.001..0.9", "0.1", "share of the data held out for evaluation "
     "(when the data has no val/ split)"},
    {K_CROP,       0,   "crop-pad",      "P",    "-1..512 (-1: no random crop)", "S/8", "pad by P pixels, then take a "
     "random crop of the input size"},
    {K_NOFLIP,     0,   "no-flip",       NULL,   NULL, NULL, "no random horizontal flips"},
    {K_SEED,       0,   "seed",          "S",    "0..2000000000", "0", "initialisation and data order"},
    {K_REC_EVERY,  0,   "record-every",  "N",    "1..100000", "no traces", "record DIR/trace-epoch-NNN.h5 of held-out "
     "images before training and every N epochs"},
    {K_REC_IMAGES, 0,   "record-images", "K",    "1..100000", "64", "held-out images in those traces (saved in "
     "DIR/heldout/; needs --record-every)"},
    {K_RECORD,     0,   "record",        "LIST", "as record --record", "attn", "quantities in those traces "
     "(needs --record-every)"},
    {K_RESUME,     0,   "resume",        NULL,   NULL, NULL, "continue the run in DIR exactly where it stopped"},
    {K_KEEP,       0,   "keep",          "K",    "0..100000 (0: all)", "2", "newest epoch checkpoints kept; the run's "
     "older ones are deleted"},
    {'t',          't', "threads",       "N",    "1..1024", "$OMP_NUM_THREADS, else all cores", "threads"},
    {'q',          'q', "quiet",         NULL,   NULL, NULL, "no per-epoch lines"},
    {0}};

static const cli_cmd train_cmd = {
    "train", "--config MODEL.json|ARCH --data DATA --out DIR [options]",
    "AdamW with decoupled weight decay, linear warm-up then cosine decay per step, gradient clipping by "
    "global norm, cross-entropy with label smoothing, LaViT's diagonality term on less-attention blocks. "
    "Random crop and horizontal flip. Each epoch: held-out evaluation, DIR/epoch-NNN/ (loads in `attnscope "
    "record --model`), DIR/latest, DIR/log.csv. Ctrl-C saves a checkpoint; --resume continues exactly. "
    "Deterministic given --seed and --threads. See docs/training.md.",
    train_opts_table, NULL};

/* Options that would take no effect together, refused (exit 2) with the fix; given[K]: the
 * option with key K was on the command line. */
static int check_combination(const train_opts *o, const unsigned char *given) {
    const char *rec = given[K_REC_IMAGES] ? "record-images" : "record";
    if (!o->record_every && (given[K_REC_IMAGES] || given[K_RECORD]))
        return cli_fail(2, "--%s: traces are recorded only with --record-every N; add it, or drop --%s", rec, rec);
    if (o->min_lr > o->lr)
        return cli_fail(2, "--min-lr %g%s is above --lr %g%s: the cosine decay would raise the learning rate; give "
                        "--min-lr at most --lr", (double)o->min_lr, given[K_MIN_LR] ? "" : " (the default)",
                        (double)o->lr, given[K_LR] ? "" : " (the default)");
    if (given[K_WARMUP] && o->warmup_epochs > 0 && o->warmup_epochs >= (float)o->epochs)
        return cli_fail(2, "--warmup-epochs %g is not below --epochs %d: the learning rate would still be warming up "
                        "at the last step, never reaching --lr; give fewer warm-up epochs (0: none) or more --epochs",
                        (double)o->warmup_epochs, o->epochs);
    if (given[K_DP] || given[K_DP_LOSS]) {
        vit_config cfg = {0};
        as_error err = {0};
        const char *flag = given[K_DP] ? "--dp-weight" : "--dp-loss";
        /* a config that does not load is train_run's to report */
        if (model_config_from_arch(&cfg, o->config, &err) == AS_OK && !vit_any_attn(&cfg, VIT_ATTN_LESS))
            return cli_fail(2, "%s: %s has no less-attention blocks, so LaViT's diagonality term has no effect; "
                            "drop %s (it applies to LaViT models only)", flag, o->config, flag);
    }
    return 0;
}

int cmd_train(int argc, char **argv) {
    train_opts o;
    train_opts_default(&o);
    int threads = 0, ch, v;
    unsigned char given[K_DP_LOSS + 1] = {0};
    optind = 1;
    while ((ch = cli_opts_next(&train_cmd, argc, argv)) >= 0) {
        int ok = 1;
        if (ch > 0 && ch <= K_DP_LOSS) given[ch] = 1;
        switch (ch) {
        case 'c': o.config = optarg; break;
        case 'd': o.data = optarg; break;
        case 'o': o.out = optarg; break;
        case 'e': ok = cli_parse_int(optarg, 1, 100000, &o.epochs); break;
        case 'b': ok = cli_parse_int(optarg, 1, 4096, &o.batch); break;
        case K_LR: if (!parse_float(optarg, 0, 10, &o.lr, "--lr")) return 2; break;
        case K_MIN_LR: if (!parse_float(optarg, 0, 10, &o.min_lr, "--min-lr")) return 2; break;
        case K_WARMUP: if (!parse_float(optarg, 0, 1000, &o.warmup_epochs, "--warmup-epochs")) return 2; break;
        case K_WD: if (!parse_float(optarg, 0, 10, &o.weight_decay, "--weight-decay")) return 2; break;
        case K_CLIP: if (!parse_float(optarg, 0, 1e6f, &o.clip, "--clip")) return 2; break;
        case K_SMOOTH: if (!parse_float(optarg, 0, 0.99f, &o.smoothing, "--smoothing")) return 2; break;
        case K_DP: if (!parse_float(optarg, 0, 1e3f, &o.dp_weight, "--dp-weight")) return 2; break;
        case K_VAL: if (!parse_float(optarg, 0.001f, 0.9f, &o.val_fraction, "--val-fraction")) return 2; break;
        case K_CROP: ok = cli_parse_int(optarg, -1, 512, &o.crop_pad); break;
        case K_NOFLIP: o.flip = 0; break;
        case K_SEED:
            if ((ok = cli_parse_int(optarg, 0, 2000000000, &v))) o.seed = (unsigned long long)v;
            break;
        case K_REC_EVERY: ok = cli_parse_int(optarg, 1, 100000, &o.record_every); break;
        case K_REC_IMAGES: ok = cli_parse_int(optarg, 1, 100000, &o.record_images); break;
        case K_RECORD: o.record_what = optarg; break;
        case K_RESUME: o.resume = 1; break;
        case K_KEEP: ok = cli_parse_int(optarg, 0, 100000, &o.keep); break;
        case K_NUM_CLASSES: ok = cli_parse_int(optarg, 1, 1 << 20, &o.num_classes); break;
        case K_IMG_SIZE: ok = cli_parse_int(optarg, 1, 16384, &o.img_size); break;
        case 't': ok = cli_parse_int(optarg, 1, 1024, &threads); break;
        case K_DP_LOSS: ok = (o.dp_loss = vit_dp_loss_parse(optarg)) >= 0; break;
        case 'q': o.quiet = 1; break;
        }
        if (!ok) return cli_bad_value(&train_cmd, ch, optarg);
    }
    if (ch != CLI_END) return cli_opts_exit(ch);
    if (optind < argc) return cli_extra(&train_cmd, argv[optind]);
    if (!o.config) return cli_missing(&train_cmd, "--config MODEL.json|ARCH");
    if (!o.data) return cli_missing(&train_cmd, "--data DATA");
    if (!o.out) return cli_missing(&train_cmd, "--out DIR");
    /* a resumed run takes the options it was started with (state_parse compares them), which an
     * older attnscope may have accepted in combinations refused now: they are not checked again */
    const int bad = o.resume ? 0 : check_combination(&o, given);
    if (bad) return bad;
    runtime_set_threads(threads);
    char cmdline[2048];
    cli_command_line(argc, argv, cmdline, sizeof cmdline);
    o.command_line = cmdline;
    as_error err = {0};
    train_result res;
    as_status rc = train_run(&o, &res, &err);
    if (rc != AS_OK) {
        cli_error(&err);
        return rc == AS_ERR_INTERRUPTED ? 130 : 1;
    }
    if (!o.quiet) {
        char line[2600];
        snprintf(line, sizeof line, "done: held-out accuracy %.1f%% (chance %.1f%%), %.0f img/s; checkpoint %s",
                 100 * res.val_acc, 100.0 / res.n_classes, res.img_per_s, res.checkpoint);
        cli_wrap(stdout, 0, 6, line);
        if (res.last_trace[0]) {
            snprintf(line, sizeof line, "traces: %s/trace-epoch-*.h5 (latest %s)", o.out, res.last_trace);
            cli_wrap(stdout, 0, 8, line);
        }
    }
    return 0;
}
