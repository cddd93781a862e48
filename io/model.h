/* model.h: turn a checkpoint on disk (timm layout folder, bare .safetensors, JSON config) into
 * a validated vit_config plus bound vit_params. Strict: every mismatch is named with a fix. */
#ifndef AS_MODEL_H
#define AS_MODEL_H

#include <stdio.h>

#include "../core/config.h"
#include "../core/vit.h"
#include "layout.h"
#include "safetensors.h"

/* Usage:
 *     model m;
 *     if (model_load(&m, "ckpt_dir", NULL, 0, &err) != AS_OK) { print err.msg; }
 *     vit_forward(&m.cfg, &m.params, ...);
 *     model_free(&m);
 * path: a folder with config.json + model.safetensors (Hugging Face timm layout), or a
 * .safetensors file (its folder's config.json is used if present). arch: a built-in name or a
 * JSON config file; overrides the folder's config. img_size > 0 runs at another input size
 * (position embeddings are resampled bicubically as timm does). */
typedef struct {
    vit_config cfg;
    vit_params params;
    safetensors st;
    float *owned;            /* converted, resampled or random weights */
    char source[1024];       /* the weights file's resolved path (no links), or "random(seed=N)" */
    char sha256[65];         /* SHA-256 of the weights file (hex); "" for random weights */
    char weights_dtype[8];   /* F32, F16, BF16 or mixed */
    size_t n_tensors;
    layout_kind layout;      /* the names the file used (Swin: official and torchvision renamed) */
    int n_ignored;           /* buffers dropped (relative_position_index, attn_mask): computed */
} model;

as_status model_load(model *m, const char *path, const char *arch, int img_size, as_error *err);
/* The same, also writing every tensor that does not match (one per line) to report. */
as_status model_load_report(model *m, const char *path, const char *arch, int img_size,
                            FILE *report, as_error *err);
/* Deterministic random weights (timm-like init scale) for benchmarks and tests. */
as_status model_init_random(model *m, const vit_config *cfg, unsigned long long seed, as_error *err);
void model_free(model *m);
/* What the loader did to the checkpoint's names, in a line for info and logs ("torchvision's
 * names (features.*), renamed to timm's; 12 buffers ignored (relative_position_index,
 * attn_mask): attnscope computes them"); "" for a ViT. */
void model_layout_note(const model *m, char *buf, size_t n);

/* Applies a JSON config (timm config.json or attnscope's own; see docs/models.md) on top of
 * *cfg. name is the file name for messages. */
/* The same for a config attnscope stored with a checkpoint or a trace: settings that act nowhere
 * in the model (an all-global Swin's window keys, vit_mech.no_effect), which older versions
 * wrote, are taken as they are instead of refused. */
as_status model_config_apply_stored_json(vit_config *cfg, const char *json, const char *name, as_error *err);
as_status model_config_apply_json(vit_config *cfg, const char *json, const char *name,
                                  as_error *err);
/* A small text file (model configs, experiment files; at most 16 MiB) as a NUL-terminated
 * string (caller frees), or NULL with err filled (err may be NULL). */
char *model_read_text(const char *path, as_error *err);
/* cfg from a built-in architecture name or a JSON config file (ends in .json). */
as_status model_config_from_arch(vit_config *cfg, const char *arch, as_error *err);
/* The key tables of docs/models.md ("JSON model config"), written from the table that the
 * parser uses; tests/test_config.c checks that the docs hold exactly this text. */
void model_config_keys_markdown(FILE *f);
/* The full config as JSON (caller frees); what traces record. */
char *model_config_to_json(const vit_config *cfg);

/* Writes m's weights as a timm-layout folder (config.json + model.safetensors). */
as_status model_save_dir(const model *m, const char *dir, safetensors_dtype dtype, as_error *err);

#endif
