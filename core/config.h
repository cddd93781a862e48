/* config.h: what a ViT-family model is (sizes, tokens, pooling, preprocessing) and the built-in
 * table of timm architecture names; parameter and FLOP counts per component. No I/O here. */
#ifndef AS_CONFIG_H
#define AS_CONFIG_H

#include "status.h"

/* Usage:
 *     const vit_config *c = vit_arch_find("deit_tiny_patch16_224");
 *     vit_config cfg = *c;  cfg.img_size = 384;          // any field may be changed
 *     if (vit_config_validate(&cfg, &err) != AS_OK) ...
 *     vit_cost cost; vit_config_cost(&cfg, &cost);         // params and FLOPs per image
 * Field names follow timm's VisionTransformer keyword arguments so JSON configs read the same. */

typedef enum { VIT_POOL_TOKEN = 0, VIT_POOL_AVG, VIT_POOL_COUNT } vit_pool;
typedef enum { VIT_INTERP_BICUBIC = 0, VIT_INTERP_BILINEAR, VIT_INTERP_COUNT } vit_interp;

typedef struct {
    char name[64];      /* timm architecture name, or "custom" */
    int img_size;       /* input side in pixels (square inputs) */
    int patch_size;     /* conv kernel = stride */
    int in_chans;       /* 3 */
    int embed_dim;      /* D */
    int depth;          /* number of blocks L */
    int num_heads;      /* H; head width D/H */
    int mlp_hidden;     /* MLP hidden width (mlp_ratio * D) */
    int num_classes;    /* classifier outputs; 0 means no head (features only) */
    int qkv_bias;       /* fused qkv Linear has a bias */
    int class_token;    /* prepend a class token */
    int distilled;      /* DeiT distillation token and head_dist */
    vit_pool global_pool;
    int fc_norm;        /* final LayerNorm applied after pooling (timm fc_norm) instead of before */
    float ln_eps;       /* LayerNorm epsilon, 1e-6 in timm ViTs */
    /* eval transform (timm pretrained_cfg) */
    float mean[3], std[3];
    float crop_pct;
    vit_interp interpolation;
} vit_config;

/* Compute and parameter counts of one forward pass for one image, per component. FLOPs count a
 * multiply-add as 2; papers' "FLOPs" are usually MACs = flops / 2. */
typedef enum {
    VIT_COMP_PATCH_EMBED = 0,
    VIT_COMP_TOKENS,      /* class/dist tokens and position embedding */
    VIT_COMP_NORM,        /* every LayerNorm */
    VIT_COMP_QKV,
    VIT_COMP_ATTN_SCORES, /* Q K^T and softmax */
    VIT_COMP_ATTN_VALUES, /* A V */
    VIT_COMP_PROJ,
    VIT_COMP_MLP,
    VIT_COMP_HEAD,
    VIT_COMP_COUNT
} vit_component;

typedef struct {
    double params[VIT_COMP_COUNT];
    double flops[VIT_COMP_COUNT];
    double params_total, flops_total;
} vit_cost;

const char *vit_component_name(vit_component c);
const char *vit_pool_name(vit_pool p);
const char *vit_interp_name(vit_interp i);

/* Built-in architectures. find returns NULL for an unknown name. */
int vit_arch_count(void);
const vit_config *vit_arch_get(int i);
const vit_config *vit_arch_find(const char *name);
/* Writes "a, b, c" of every known name into buf (for error messages). */
void vit_arch_list(char *buf, size_t n);

/* Token bookkeeping. */
int vit_grid(const vit_config *c);         /* patches per side */
int vit_num_patches(const vit_config *c);  /* grid^2 */
int vit_num_prefix(const vit_config *c);   /* class + distillation tokens */
int vit_num_tokens(const vit_config *c);   /* prefix + patches */
int vit_head_dim(const vit_config *c);

/* Every constraint a forward pass relies on; the message says what to change. */
as_status vit_config_validate(const vit_config *c, as_error *err);
void vit_config_cost(const vit_config *c, vit_cost *out);

#endif
