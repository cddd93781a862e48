/* model.c: checkpoint resolution (folder, file, config), strict tensor binding with shape hints,
 * dtype conversion and position-embedding resampling. */
#define _POSIX_C_SOURCE 200809L
#include "model.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/rng.h"
#include "atomic.h"

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}
static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static char *read_text(const char *path, as_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        as_fail(err, AS_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            if (cap > (16u << 20)) { /* a config is never this large */
                free(buf);
                fclose(f);
                as_fail(err, AS_ERR_FORMAT, "%s: over 16 MiB, not a model config", path);
                return NULL;
            }
            cap = cap ? 2 * cap : 8192;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                as_fail(err, AS_ERR_NOMEM, "%s: out of memory", path);
                return NULL;
            }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, cap - len - 1, f);
        len += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        as_fail(err, AS_ERR_IO, "%s: read error", path);
        return NULL;
    }
    buf[len] = 0;
    return buf;
}

/* ---- JSON config ---------------------------------------------------------------------------- */

static int json_int(const cJSON *o, const char *key, int *out, int *bad) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j || cJSON_IsNull(j)) return 0;
    if (cJSON_IsBool(j)) {
        *out = cJSON_IsTrue(j);
        return 1;
    }
    if (!cJSON_IsNumber(j) || j->valuedouble != (double)(int)j->valuedouble) {
        *bad = 1;
        return 0;
    }
    *out = (int)j->valuedouble;
    return 1;
}

static void apply_object(vit_config *c, const cJSON *o, int *bad, const char **badkey) {
    static const struct {
        const char *key;
        size_t off;
    } ints[] = {
        {"img_size", offsetof(vit_config, img_size)},
        {"patch_size", offsetof(vit_config, patch_size)},
        {"in_chans", offsetof(vit_config, in_chans)},
        {"embed_dim", offsetof(vit_config, embed_dim)},
        {"depth", offsetof(vit_config, depth)},
        {"num_heads", offsetof(vit_config, num_heads)},
        {"num_classes", offsetof(vit_config, num_classes)},
        {"qkv_bias", offsetof(vit_config, qkv_bias)},
        {"class_token", offsetof(vit_config, class_token)},
        {"distilled", offsetof(vit_config, distilled)},
        {"fc_norm", offsetof(vit_config, fc_norm)},
        {"mlp_hidden", offsetof(vit_config, mlp_hidden)},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int b = 0;
        json_int(o, ints[i].key, (int *)((char *)c + ints[i].off), &b);
        if (b) {
            *bad = 1;
            *badkey = ints[i].key;
        }
    }
    const cJSON *j;
    if ((j = cJSON_GetObjectItemCaseSensitive(o, "mlp_ratio")) && cJSON_IsNumber(j))
        c->mlp_hidden = (int)(c->embed_dim * j->valuedouble);
    if ((j = cJSON_GetObjectItemCaseSensitive(o, "ln_eps")) && cJSON_IsNumber(j))
        c->ln_eps = (float)j->valuedouble;
    if ((j = cJSON_GetObjectItemCaseSensitive(o, "global_pool")) && cJSON_IsString(j)) {
        if (strcmp(j->valuestring, "token") == 0) c->global_pool = VIT_POOL_TOKEN;
        else if (strcmp(j->valuestring, "avg") == 0) c->global_pool = VIT_POOL_AVG;
        else {
            *bad = 1;
            *badkey = "global_pool (\"token\" or \"avg\")";
        }
        /* timm: fc_norm defaults to true exactly when pooling is avg */
        if (!cJSON_GetObjectItemCaseSensitive(o, "fc_norm")) c->fc_norm = c->global_pool == VIT_POOL_AVG;
    }
}

static void apply_pretrained(vit_config *c, const cJSON *pc, int *bad, const char **badkey) {
    const cJSON *j;
    if ((j = cJSON_GetObjectItemCaseSensitive(pc, "input_size")) && cJSON_IsArray(j) &&
        cJSON_GetArraySize(j) == 3) {
        int h = (int)cJSON_GetArrayItem(j, 1)->valuedouble, w = (int)cJSON_GetArrayItem(j, 2)->valuedouble;
        if (h != w) {
            *bad = 1;
            *badkey = "pretrained_cfg.input_size (only square inputs are supported)";
        }
        c->img_size = h;
        c->in_chans = (int)cJSON_GetArrayItem(j, 0)->valuedouble;
    }
    const char *vec[2] = {"mean", "std"};
    float *dst[2] = {c->mean, c->std};
    for (int v = 0; v < 2; v++)
        if ((j = cJSON_GetObjectItemCaseSensitive(pc, vec[v])) && cJSON_IsArray(j)) {
            if (cJSON_GetArraySize(j) != 3) {
                *bad = 1;
                *badkey = vec[v];
                continue;
            }
            for (int i = 0; i < 3; i++) dst[v][i] = (float)cJSON_GetArrayItem(j, i)->valuedouble;
        }
    if ((j = cJSON_GetObjectItemCaseSensitive(pc, "crop_pct")) && cJSON_IsNumber(j))
        c->crop_pct = (float)j->valuedouble;
    if ((j = cJSON_GetObjectItemCaseSensitive(pc, "interpolation")) && cJSON_IsString(j)) {
        if (strcmp(j->valuestring, "bicubic") == 0) c->interpolation = VIT_INTERP_BICUBIC;
        else if (strcmp(j->valuestring, "bilinear") == 0) c->interpolation = VIT_INTERP_BILINEAR;
        else {
            *bad = 1;
            *badkey = "interpolation (\"bicubic\" or \"bilinear\")";
        }
    }
}

/* A custom model starts from timm's VisionTransformer defaults. */
static const vit_config custom_defaults = {
    .name = "custom", .img_size = 224, .patch_size = 16, .in_chans = 3, .embed_dim = 768,
    .depth = 12, .num_heads = 12, .mlp_hidden = 3072, .num_classes = 1000, .qkv_bias = 1,
    .class_token = 1, .global_pool = VIT_POOL_TOKEN, .ln_eps = 1e-6f,
    .mean = {0.485f, 0.456f, 0.406f}, .std = {0.229f, 0.224f, 0.225f}, .crop_pct = 0.9f,
    .interpolation = VIT_INTERP_BICUBIC};

as_status model_config_apply_json(vit_config *cfg, const char *json, const char *name,
                                  as_error *err) {
    cJSON *root = cJSON_Parse(json);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return as_fail(err, AS_ERR_FORMAT, "%s: not a JSON object (syntax error near byte %ld): "
                       "fix the JSON", name,
                       cJSON_GetErrorPtr() ? (long)(cJSON_GetErrorPtr() - json) : 0L);
    }
    vit_config c = *cfg;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architecture");
    if (!arch) arch = cJSON_GetObjectItemCaseSensitive(root, "arch");
    if (cJSON_IsString(arch) && strcmp(arch->valuestring, "custom") != 0) {
        const vit_config *base = vit_arch_find(arch->valuestring);
        if (!base) {
            char list[2048];
            vit_arch_list(list, sizeof list);
            cJSON_Delete(root);
            return as_fail(err, AS_ERR_CONFIG, "%s: unknown architecture \"%.64s\"; known: %s; or "
                           "describe the model with \"architecture\": \"custom\" and its sizes "
                           "(docs/models.md)", name, arch->valuestring, list);
        }
        c = *base;
    } else if (cJSON_IsString(arch) || cJSON_GetObjectItemCaseSensitive(root, "embed_dim")) {
        if (!cfg->name[0] || strcmp(cfg->name, "custom") != 0) c = custom_defaults;
    }
    int bad = 0;
    const char *badkey = "";
    apply_object(&c, root, &bad, &badkey);
    const cJSON *ma = cJSON_GetObjectItemCaseSensitive(root, "model_args");
    if (cJSON_IsObject(ma)) apply_object(&c, ma, &bad, &badkey);
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(root, "pretrained_cfg");
    if (cJSON_IsObject(pc)) apply_pretrained(&c, pc, &bad, &badkey);
    cJSON_Delete(root);
    if (bad)
        return as_fail(err, AS_ERR_CONFIG, "%s: bad value for \"%s\": see docs/models.md for the "
                       "accepted keys", name, badkey);
    if (!c.name[0]) snprintf(c.name, sizeof c.name, "custom");
    as_status rc = vit_config_validate(&c, err);
    if (rc == AS_OK) *cfg = c; /* a failing call leaves *cfg untouched */
    return rc;
}

char *model_config_to_json(const vit_config *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "architecture", c->name);
    cJSON_AddNumberToObject(o, "img_size", c->img_size);
    cJSON_AddNumberToObject(o, "patch_size", c->patch_size);
    cJSON_AddNumberToObject(o, "in_chans", c->in_chans);
    cJSON_AddNumberToObject(o, "embed_dim", c->embed_dim);
    cJSON_AddNumberToObject(o, "depth", c->depth);
    cJSON_AddNumberToObject(o, "num_heads", c->num_heads);
    cJSON_AddNumberToObject(o, "mlp_hidden", c->mlp_hidden);
    cJSON_AddNumberToObject(o, "num_classes", c->num_classes);
    cJSON_AddBoolToObject(o, "qkv_bias", c->qkv_bias);
    cJSON_AddBoolToObject(o, "class_token", c->class_token);
    cJSON_AddBoolToObject(o, "distilled", c->distilled);
    cJSON_AddStringToObject(o, "global_pool", vit_pool_name(c->global_pool));
    cJSON_AddBoolToObject(o, "fc_norm", c->fc_norm);
    cJSON_AddNumberToObject(o, "ln_eps", c->ln_eps);
    cJSON *pc = cJSON_AddObjectToObject(o, "pretrained_cfg");
    cJSON *is = cJSON_AddArrayToObject(pc, "input_size");
    int sz[3] = {c->in_chans, c->img_size, c->img_size};
    for (int i = 0; i < 3; i++) cJSON_AddItemToArray(is, cJSON_CreateNumber(sz[i]));
    cJSON *mean = cJSON_AddArrayToObject(pc, "mean"), *std = cJSON_AddArrayToObject(pc, "std");
    for (int i = 0; i < 3; i++) {
        cJSON_AddItemToArray(mean, cJSON_CreateNumber(c->mean[i]));
        cJSON_AddItemToArray(std, cJSON_CreateNumber(c->std[i]));
    }
    cJSON_AddNumberToObject(pc, "crop_pct", c->crop_pct);
    cJSON_AddStringToObject(pc, "interpolation", vit_interp_name(c->interpolation));
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

as_status model_config_from_arch(vit_config *cfg, const char *arch, as_error *err) {
    size_t al = strlen(arch);
    if (al > 5 && strcmp(arch + al - 5, ".json") == 0) {
        char *json = read_text(arch, err);
        if (!json) return err ? err->status : AS_ERR_IO;
        as_status rc = model_config_apply_json(cfg, json, arch, err);
        free(json);
        return rc;
    }
    const vit_config *base = vit_arch_find(arch);
    if (!base) {
        char list[2048];
        vit_arch_list(list, sizeof list);
        return as_fail(err, AS_ERR_CONFIG, "unknown architecture \"%s\"; known: %s; or give a "
                       "JSON model config (docs/models.md)", arch, list);
    }
    *cfg = *base;
    return AS_OK;
}

/* ---- binding -------------------------------------------------------------------------------- */

/* The expected tensors of cfg, bound to *p (caller frees); NULL when out of memory. */
static vit_tensor_spec *specs_new(const vit_config *cfg, vit_params *p, int *n) {
    *n = vit_param_specs(cfg, p, NULL, 0);
    vit_tensor_spec *s = malloc((size_t)(*n > 0 ? *n : 1) * sizeof *s);
    if (s) vit_param_specs(cfg, p, s, *n);
    return s;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t u = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && u < n; i++)
        u += (size_t)snprintf(buf + u, n - u, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (u < n) snprintf(buf + u, n - u, "]");
}

/* Is the tensor st's t of the spec's shape? pos_embed may differ in its token count. */
static int shape_matches(const vit_tensor_spec *s, const safetensors_tensor *t, int prefix) {
    if (t->ndim != s->ndim) return 0;
    for (int i = 0; i < s->ndim; i++) {
        if (s->is_pos_embed && i == 1) {
            long long np = t->shape[1] - prefix, g = 0;
            while ((g + 1) * (g + 1) <= np) g++;
            if (np <= 0 || g * g != np) return 0;
            continue;
        }
        if (t->shape[i] != s->shape[i]) return 0;
    }
    return 1;
}

/* Number of spec mismatches of cfg against the file (missing, wrong shape, unexpected). */
static int count_mismatches(const vit_config *cfg, const safetensors *st) {
    vit_params p;
    int n, bad = 0;
    vit_tensor_spec *specs = specs_new(cfg, &p, &n);
    if (!specs) return 1 << 20;
    for (int i = 0; i < n; i++) {
        const safetensors_tensor *t = safetensors_find(st, specs[i].name);
        if (!t || !shape_matches(&specs[i], t, vit_num_prefix(cfg))) bad++;
    }
    free(specs);
    return bad + (st->count > n ? st->count - n : 0);
}

/* "is this a deit_small_patch16_224 checkpoint? try --arch deit_small_patch16_224" or "". */
static void arch_hint(char *buf, size_t n, const vit_config *cfg, const safetensors *st) {
    buf[0] = 0;
    const safetensors_tensor *head = safetensors_find(st, "head.weight");
    for (int i = 0; i < vit_arch_count(); i++) {
        vit_config c = *vit_arch_get(i);
        if (strcmp(c.name, cfg->name) == 0) continue;
        c.num_classes = head && head->ndim == 2 ? (int)head->shape[0] : 0;
        if (count_mismatches(&c, st) == 0) {
            snprintf(buf, n, ": is this a %s checkpoint? try --arch %s", c.name, c.name);
            return;
        }
    }
    snprintf(buf, n, ": check --arch or the folder's config.json");
}

/* One binding problem: into the one-line list (first three of a kind) and the report. */
static void problem(char *list, size_t cap, int *count, FILE *report, const char *kind,
                    const char *name, const char *detail) {
    size_t used = strlen(list);
    if (*count < 3 && used < cap)
        snprintf(list + used, cap - used, "%s%s%s", *count ? ", " : "", name, detail);
    (*count)++;
    if (report) fprintf(report, "%-12s %s%s\n", kind, name, detail);
}

static as_status bind_specs(model *m, const vit_tensor_spec *specs, int n, FILE *report,
                            as_error *err);

static as_status bind(model *m, FILE *report, as_error *err) {
    vit_config *cfg = &m->cfg;
    safetensors *st = &m->st;
    int n;
    vit_tensor_spec *specs = specs_new(cfg, &m->params, &n);
    if (!specs) return as_fail(err, AS_ERR_NOMEM, "%s: out of memory", st->path);
    as_status rc = bind_specs(m, specs, n, report, err);
    free(specs);
    return rc;
}

static as_status bind_specs(model *m, const vit_tensor_spec *specs, int n, FILE *report,
                            as_error *err) {
    vit_config *cfg = &m->cfg;
    safetensors *st = &m->st;
    const int prefix = vit_num_prefix(cfg), D = cfg->embed_dim;

    /* 1. name the problems in one line: counts per kind, the first few of each by name; with a
     * report stream, every problem on a line of its own */
    enum { WRONG = 0, MISSING, UNEXPECTED, BADTYPE, KINDS };
    static const char *const kind_name[KINDS] = {"of wrong shape", "missing", "unexpected",
                                                 "of a non-float dtype"};
    char lists[KINDS][400] = {{0}};
    int counts[KINDS] = {0};
    char *seen = calloc((size_t)st->count + 1, 1);
    if (!seen) return as_fail(err, AS_ERR_NOMEM, "%s: out of memory", st->path);
    for (int i = 0; i < n; i++) {
        const safetensors_tensor *t = safetensors_find(st, specs[i].name);
        if (!t) {
            problem(lists[MISSING], sizeof lists[MISSING], &counts[MISSING], report, "missing",
                    specs[i].name, "");
            continue;
        }
        seen[t - st->tensors] = 1;
        if (!shape_matches(&specs[i], t, prefix)) {
            char want[96], got[96], detail[220];
            int64_t w64[4];
            for (int d = 0; d < 4; d++) w64[d] = specs[i].shape[d];
            shape_str(want, sizeof want, specs[i].ndim, w64);
            shape_str(got, sizeof got, t->ndim, t->shape);
            snprintf(detail, sizeof detail, " expected %s, found %s", want, got);
            problem(lists[WRONG], sizeof lists[WRONG], &counts[WRONG], report, "wrong shape",
                    specs[i].name, detail);
        } else if (t->dtype != SAFETENSORS_F32 && t->dtype != SAFETENSORS_F16 &&
                   t->dtype != SAFETENSORS_BF16) {
            char detail[64];
            snprintf(detail, sizeof detail, " is %s", safetensors_dtype_name(t->dtype));
            problem(lists[BADTYPE], sizeof lists[BADTYPE], &counts[BADTYPE], report, "bad dtype",
                    specs[i].name, detail);
        }
    }
    for (int i = 0; i < st->count; i++)
        if (!seen[i])
            problem(lists[UNEXPECTED], sizeof lists[UNEXPECTED], &counts[UNEXPECTED], report,
                    "unexpected", st->tensors[i].name, "");
    free(seen);
    int problems = 0;
    char msg[4 * sizeof lists[0] + 256] = "";
    for (int k = 0; k < KINDS; k++) {
        if (!counts[k]) continue;
        size_t u = strlen(msg);
        snprintf(msg + u, sizeof msg - u, "%s%d %s (%s%s)", problems ? "; " : "", counts[k],
                 kind_name[k], lists[k], counts[k] > 3 ? ", ..." : "");
        problems += counts[k];
    }
    if (problems) {
        char hint[256];
        arch_hint(hint, sizeof hint, cfg, st);
        return as_fail(err, AS_ERR_SHAPE, "%s: does not match %s: %s%s%s", st->path, cfg->name, msg,
                       hint, report ? "" : " (attnscope info lists every mismatch)");
    }

    /* 2. convert what cannot be used in place: F16/BF16, unaligned F32, resampled pos_embed */
    size_t owned = 0;
    const size_t T = (size_t)vit_num_tokens(cfg);
    int dt_seen = 0;
    for (int i = 0; i < n; i++) {
        const safetensors_tensor *t = safetensors_find(st, specs[i].name);
        dt_seen |= 1 << t->dtype;
        int aligned = ((uintptr_t)t->data & 3u) == 0;
        if (t->dtype != SAFETENSORS_F32 || !aligned || specs[i].is_pos_embed) owned += t->numel;
        if (specs[i].is_pos_embed) owned += T * (size_t)D;
    }
    snprintf(m->weights_dtype, sizeof m->weights_dtype, "%s",
             dt_seen == 1 << SAFETENSORS_F32 ? "F32" : dt_seen == 1 << SAFETENSORS_F16 ? "F16"
             : dt_seen == 1 << SAFETENSORS_BF16 ? "BF16" : "mixed");
    m->owned = owned ? malloc(owned * sizeof(float)) : NULL;
    if (owned && !m->owned)
        return as_fail(err, AS_ERR_NOMEM, "%s: out of memory converting %zu weights", st->path, owned);
    float *cursor = m->owned;
    for (int i = 0; i < n; i++) {
        const safetensors_tensor *t = safetensors_find(st, specs[i].name);
        int aligned = ((uintptr_t)t->data & 3u) == 0;
        if (t->dtype == SAFETENSORS_F32 && aligned && !specs[i].is_pos_embed) {
            *specs[i].slot = (const float *)(const void *)t->data;
            continue;
        }
        as_status rc = safetensors_read_f32(st, t, cursor, err);
        if (rc != AS_OK) return rc;
        const float *val = cursor;
        cursor += t->numel;
        if (specs[i].is_pos_embed) {
            int gs_in = 0, np = (int)t->shape[1] - prefix;
            while ((gs_in + 1) * (gs_in + 1) <= np) gs_in++;
            if (!vit_resample_pos_embed(cursor, val, prefix, gs_in, vit_grid(cfg), D))
                return as_fail(err, AS_ERR_NOMEM, "%s: out of memory resampling pos_embed", st->path);
            val = cursor;
            cursor += T * (size_t)D;
        }
        *specs[i].slot = val;
    }
    m->n_tensors = (size_t)n;
    return AS_OK;
}

as_status model_load(model *m, const char *path, const char *arch, int img_size, as_error *err) {
    return model_load_report(m, path, arch, img_size, NULL, err);
}

as_status model_load_report(model *m, const char *path, const char *arch, int img_size,
                            FILE *report, as_error *err) {
    memset(m, 0, sizeof *m);
    char weights[1024], cfgpath[1024];
    as_status rc = AS_OK;
    if (is_dir(path)) {
        snprintf(weights, sizeof weights, "%s/model.safetensors", path);
        snprintf(cfgpath, sizeof cfgpath, "%s/config.json", path);
        if (!is_file(weights))
            return as_fail(err, AS_ERR_IO, "%s: no model.safetensors in this folder: give a "
                           "timm-layout folder (config.json + model.safetensors) or the file", path);
    } else if (is_file(path)) {
        snprintf(weights, sizeof weights, "%s", path);
        const char *slash = strrchr(path, '/');
        if (slash) snprintf(cfgpath, sizeof cfgpath, "%.*s/config.json", (int)(slash - path), path);
        else snprintf(cfgpath, sizeof cfgpath, "config.json");
        if (!is_file(cfgpath)) cfgpath[0] = 0;
    } else {
        return as_fail(err, AS_ERR_IO, "%s: no such file or folder: give a checkpoint folder or a "
                       ".safetensors file", path);
    }
    vit_config cfg = {0};
    char *json = NULL;
    if (cfgpath[0] && is_file(cfgpath)) {
        if (!(json = read_text(cfgpath, err))) return err ? err->status : AS_ERR_IO;
        rc = model_config_apply_json(&cfg, json, cfgpath, err);
        free(json);
        json = NULL;
        if (rc != AS_OK) return rc;
    }
    if (arch && arch[0]) {
        int classes = cfg.name[0] ? cfg.num_classes : -1;
        if ((rc = model_config_from_arch(&cfg, arch, err)) != AS_OK) return rc;
        if (classes >= 0) cfg.num_classes = classes;
    }
    if (!cfg.name[0])
        return as_fail(err, AS_ERR_CONFIG, "%s: no config.json beside the weights: say what model "
                       "it is with --arch NAME (attnscope info --list-archs) or --arch config.json",
                       weights);
    if (img_size > 0) cfg.img_size = img_size;
    if ((rc = vit_config_validate(&cfg, err)) != AS_OK) return rc;
    if ((rc = safetensors_open(&m->st, weights, err)) != AS_OK) return rc;
    /* a checkpoint's own head size wins over the table's 1000 (fine-tuned models) */
    const safetensors_tensor *head = safetensors_find(&m->st, "head.weight");
    if (head && head->ndim == 2 && head->shape[1] == cfg.embed_dim && head->shape[0] > 0 &&
        head->shape[0] < (1 << 24))
        cfg.num_classes = (int)head->shape[0];
    else if (!head && !safetensors_find(&m->st, "head.bias"))
        cfg.num_classes = 0;
    m->cfg = cfg;
    snprintf(m->source, sizeof m->source, "%s", weights);
    if ((rc = bind(m, report, err)) != AS_OK) {
        model_free(m);
        return rc;
    }
    return AS_OK;
}

as_status model_init_random(model *m, const vit_config *cfg, unsigned long long seed, as_error *err) {
    memset(m, 0, sizeof *m);
    as_status rc = vit_config_validate(cfg, err);
    if (rc != AS_OK) return rc;
    m->cfg = *cfg;
    int n;
    vit_tensor_spec *specs = specs_new(cfg, &m->params, &n);
    if (!specs) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < specs[i].ndim; d++) numel *= (size_t)specs[i].shape[d];
        total += numel;
    }
    m->owned = malloc(total * sizeof(float));
    if (!m->owned) {
        free(specs);
        return as_fail(err, AS_ERR_NOMEM, "out of memory for %zu random weights", total);
    }
    rng_state r = {seed};
    float *cur = m->owned;
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < specs[i].ndim; d++) numel *= (size_t)specs[i].shape[d];
        const char *nm = specs[i].name;
        size_t len = strlen(nm);
        int is_norm_w = strstr(nm, "norm") && len > 7 && strcmp(nm + len - 7, ".weight") == 0;
        /* LayerNorm weights near 1, everything else with std 0.02 as timm's init; the
         * perturbations keep every tensor distinct so that a wrong binding changes the output */
        for (size_t k = 0; k < numel; k++)
            cur[k] = is_norm_w ? 1.0f + 0.1f * rng_normal(&r) : 0.02f * rng_normal(&r);
        *specs[i].slot = cur;
        cur += numel;
    }
    free(specs);
    m->n_tensors = (size_t)n;
    snprintf(m->source, sizeof m->source, "random(seed=%llu)", seed);
    snprintf(m->weights_dtype, sizeof m->weights_dtype, "F32");
    return AS_OK;
}

void model_free(model *m) {
    safetensors_close(&m->st);
    free(m->owned);
    memset(m, 0, sizeof *m);
}

as_status model_save_dir(const model *m, const char *dir, safetensors_dtype dtype, as_error *err) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return as_fail(err, AS_ERR_IO, "%s: cannot create folder (%s)", dir, strerror(errno));
    vit_params p;
    int n;
    vit_tensor_spec *specs = specs_new(&m->cfg, &p, &n);
    safetensors_entry *e = calloc((size_t)n, sizeof *e);
    if (!e || !specs) {
        free(e);
        free(specs);
        return as_fail(err, AS_ERR_NOMEM, "out of memory");
    }
    /* specs point into the local p; read the values from m->params at the same offsets */
    for (int i = 0; i < n; i++) {
        e[i].name = specs[i].name;
        e[i].ndim = specs[i].ndim;
        for (int d = 0; d < specs[i].ndim; d++) e[i].shape[d] = specs[i].shape[d];
        size_t off = (size_t)((const char *)specs[i].slot - (const char *)&p);
        e[i].data = *(const float *const *)((const char *)&m->params + off);
    }
    char path[1100];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    as_status rc = safetensors_write(path, e, n, dtype, err);
    free(e);
    free(specs);
    if (rc != AS_OK) return rc;
    char *json = model_config_to_json(&m->cfg);
    if (!json) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    snprintf(path, sizeof path, "%s/config.json", dir);
    atomic_file af;
    if ((rc = atomic_file_begin(&af, path, err)) == AS_OK) {
        fputs(json, af.fp);
        fputc('\n', af.fp);
        rc = atomic_file_commit(&af, err);
    }
    free(json);
    return rc;
}
