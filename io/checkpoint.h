/* checkpoint.h: a model's weights as one flat trainable vector (with gradients and AdamW
 * moments laid out alike), and training checkpoints: a folder that `attnscope record --model`
 * loads as any timm-layout folder (config.json + model.safetensors), plus optimizer.safetensors
 * (the AdamW moments under the weights' names, prefixed "m." and "v.") and state.json (where
 * training stands). docs/training.md describes the files. */
#ifndef AS_CHECKPOINT_H
#define AS_CHECKPOINT_H

#include "model.h"

/* Usage:
 *     trainable t;
 *     trainable_init(&t, &m, &err);           // copies m's weights (random or loaded)
 *     vit_forward(&t.cfg, &t.p, ...);  vit_backward(&t.cfg, &t.p, &t.gp, ...);  // grads in t.g
 *     checkpoint_save(&t, "out/epoch-001", state_json, &err);
 *     trainable_free(&t);
 * Weight decay applies to tensors of two or more dimensions except the class, distillation
 * and position embeddings (timm's no_weight_decay). */
typedef struct {
    vit_config cfg;
    int n;                   /* tensors */
    vit_tensor_spec *specs;  /* [n] names and shapes, in vit_param_specs order */
    size_t *offset;          /* [n] where each starts in the flat vectors */
    size_t count;            /* floats in each flat vector */
    float *w, *g, *m, *v;    /* weights, gradients, AdamW first and second moments */
    unsigned char *decay;    /* [count] 1 where weight decay applies */
    vit_params p, gp;        /* bound into w and g */
} trainable;

as_status trainable_init(trainable *t, const model *m, as_error *err);
void trainable_free(trainable *t);
/* Index of a tensor by name, or -1. */
int trainable_find(const trainable *t, const char *name);

/* Writes dir (created, or replaced as a whole): config.json, model.safetensors,
 * optimizer.safetensors and state.json. The folder is built under a temporary name and
 * renamed into place, so a crash leaves either the old folder or the new one. */
as_status checkpoint_save(const trainable *t, const char *dir, const char *state_json, as_error *err);
/* Removes a checkpoint folder: its four known files, then the folder if that left it empty
 * (nothing else in it is touched). */
void checkpoint_remove(const char *dir);
/* Reads optimizer.safetensors of dir into t->m and t->v (shapes checked) and returns
 * state.json's text (caller frees) in *state_json. */
as_status checkpoint_load_optimizer(trainable *t, const char *dir, char **state_json, as_error *err);

#endif
