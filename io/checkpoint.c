/* checkpoint.c: the flat trainable vector and training checkpoints. */
#define _POSIX_C_SOURCE 200809L
#include "checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic.h"

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

as_status trainable_init(trainable *t, const model *m, as_error *err) {
    memset(t, 0, sizeof *t);
    t->cfg = m->cfg;
    t->specs = calloc(VIT_MAX_TENSORS, sizeof *t->specs);
    if (!t->specs) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    t->n = vit_param_specs(&t->cfg, &t->p, t->specs, VIT_MAX_TENSORS);
    t->offset = calloc((size_t)t->n, sizeof *t->offset);
    if (!t->offset) {
        trainable_free(t);
        return as_fail(err, AS_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < t->n; i++) {
        t->offset[i] = t->count;
        t->count += (vit_tensor_numel(&t->specs[i]) + 15) & ~(size_t)15; /* 64-byte starts */
    }
    const size_t bytes = t->count * sizeof(float);
    t->w = aligned_alloc(64, bytes);
    t->g = aligned_alloc(64, bytes);
    t->m = aligned_alloc(64, bytes);
    t->v = aligned_alloc(64, bytes);
    t->decay = calloc(t->count, 1);
    if (!t->w || !t->g || !t->m || !t->v || !t->decay) {
        trainable_free(t);
        return as_fail(err, AS_ERR_NOMEM, "out of memory for %zu trainable weights", t->count);
    }
    memset(t->w, 0, bytes);
    memset(t->g, 0, bytes);
    memset(t->m, 0, bytes);
    memset(t->v, 0, bytes);
    /* read m's weights through its own bindings at the same offsets within vit_params */
    for (int i = 0; i < t->n; i++) {
        const vit_tensor_spec *s = &t->specs[i];
        const size_t off = (size_t)((const char *)s->slot - (const char *)&t->p);
        const float *src = *(const float *const *)((const char *)&m->params + off);
        const size_t numel = vit_tensor_numel(s);
        memcpy(t->w + t->offset[i], src, numel * sizeof(float));
        *s->slot = t->w + t->offset[i];
        *(const float **)((char *)&t->gp + off) = t->g + t->offset[i];
        const int decays = s->ndim >= 2 && !ends_with(s->name, "cls_token") &&
                           !ends_with(s->name, "dist_token") && !ends_with(s->name, "pos_embed") &&
                           !ends_with(s->name, "relative_position_bias_table"); /* timm's no_weight_decay */
        if (decays) memset(t->decay + t->offset[i], 1, numel);
    }
    return AS_OK;
}

void trainable_free(trainable *t) {
    free(t->specs);
    free(t->offset);
    free(t->w);
    free(t->g);
    free(t->m);
    free(t->v);
    free(t->decay);
    memset(t, 0, sizeof *t);
}

int trainable_find(const trainable *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->specs[i].name, name) == 0) return i;
    return -1;
}

static as_status write_text(const char *path, const char *text, as_error *err) {
    atomic_file af;
    as_status rc = atomic_file_begin(&af, path, err);
    if (rc != AS_OK) return rc;
    fputs(text, af.fp);
    return atomic_file_commit(&af, err);
}

void checkpoint_remove(const char *dir) {
    static const char *files[] = {"config.json", "model.safetensors", "optimizer.safetensors", "state.json"};
    char p[1200];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

as_status checkpoint_save(const trainable *t, const char *dir, const char *state_json, as_error *err) {
    char tmp[1100], old[1100], path[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    snprintf(old, sizeof old, "%s.old", dir);
    checkpoint_remove(tmp);
    if (mkdir(tmp, 0777) != 0)
        return as_fail(err, AS_ERR_IO, "%s: cannot create checkpoint folder (%s); check the --out folder", tmp, strerror(errno));
    model m = {0};
    m.cfg = t->cfg;
    m.params = t->p;
    as_status rc = model_save_dir(&m, tmp, SAFETENSORS_F32, err);
    safetensors_entry *e = rc == AS_OK ? calloc(2 * (size_t)t->n, sizeof *e) : NULL;
    char (*names)[VIT_TENSOR_NAME_MAX + 2] = e ? calloc(2 * (size_t)t->n, sizeof *names) : NULL;
    if (rc == AS_OK && (!e || !names)) rc = as_fail(err, AS_ERR_NOMEM, "out of memory");
    if (rc == AS_OK) {
        for (int k = 0; k < 2 * t->n; k++) {
            const int i = k % t->n;
            const vit_tensor_spec *s = &t->specs[i];
            snprintf(names[k], sizeof names[k], "%s.%s", k < t->n ? "m" : "v", s->name);
            e[k].name = names[k];
            e[k].ndim = s->ndim;
            for (int d = 0; d < s->ndim; d++) e[k].shape[d] = s->shape[d];
            e[k].data = (k < t->n ? t->m : t->v) + t->offset[i];
        }
        snprintf(path, sizeof path, "%s/optimizer.safetensors", tmp);
        rc = safetensors_write(path, e, 2 * t->n, SAFETENSORS_F32, err);
    }
    free(e);
    free(names);
    if (rc == AS_OK) {
        snprintf(path, sizeof path, "%s/state.json", tmp);
        rc = write_text(path, state_json, err);
    }
    if (rc != AS_OK) {
        checkpoint_remove(tmp);
        return rc;
    }
    /* swap in: an existing folder of that name moves aside first, then goes */
    checkpoint_remove(old);
    struct stat sb;
    const int had = stat(dir, &sb) == 0;
    if ((had && rename(dir, old) != 0) || rename(tmp, dir) != 0) {
        rc = as_fail(err, AS_ERR_IO, "%s: cannot move the checkpoint into place (%s)", dir, strerror(errno));
        checkpoint_remove(tmp);
        return rc;
    }
    if (had) checkpoint_remove(old);
    return AS_OK;
}

as_status checkpoint_load_optimizer(trainable *t, const char *dir, char **state_json, as_error *err) {
    char path[1200];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    safetensors st;
    as_status rc = safetensors_open(&st, path, err);
    if (rc != AS_OK) return rc;
    char name[VIT_TENSOR_NAME_MAX + 2];
    for (int k = 0; k < 2 * t->n && rc == AS_OK; k++) {
        const int i = k % t->n;
        const vit_tensor_spec *s = &t->specs[i];
        snprintf(name, sizeof name, "%s.%s", k < t->n ? "m" : "v", s->name);
        const safetensors_tensor *x = safetensors_find(&st, name);
        if (!x || x->numel != vit_tensor_numel(s))
            rc = as_fail(err, AS_ERR_SHAPE, "%s: %s %s; the checkpoint was written for another model "
                         "(resume with the same --config)", path, name, x ? "has another size" : "is missing");
        else
            rc = safetensors_read_f32(&st, x, (k < t->n ? t->m : t->v) + t->offset[i], err);
    }
    safetensors_close(&st);
    if (rc != AS_OK) return rc;
    snprintf(path, sizeof path, "%s/state.json", dir);
    *state_json = model_read_text(path, err);
    return *state_json ? AS_OK : err->status;
}
