/* config.c: the built-in timm architecture table, validation and closed-form cost counts. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#define IMAGENET_MEAN {0.485f, 0.456f, 0.406f}
#define IMAGENET_STD {0.229f, 0.224f, 0.225f}
#define INCEPTION_MEAN {0.5f, 0.5f, 0.5f}
#define INCEPTION_STD {0.5f, 0.5f, 0.5f}

/* timm's defaults: ViT augreg checkpoints use Inception mean/std and crop 0.9; DeiT uses
 * ImageNet mean/std and crop 0.875; both bicubic. */
#define VIT(nm, img, p, d, l, h, mean_, std_, crop, dist)                                     \
    {.name = nm, .img_size = img, .patch_size = p, .in_chans = 3, .embed_dim = d, .depth = l, \
     .num_heads = h, .mlp_hidden = 4 * (d), .num_classes = 1000, .qkv_bias = 1,               \
     .class_token = 1, .distilled = dist, .global_pool = VIT_POOL_TOKEN, .fc_norm = 0,        \
     .ln_eps = 1e-6f, .mean = mean_, .std = std_, .crop_pct = crop,                           \
     .interpolation = VIT_INTERP_BICUBIC}

static const vit_config vit_archs[] = {
    VIT("vit_tiny_patch16_224", 224, 16, 192, 12, 3, INCEPTION_MEAN, INCEPTION_STD, 0.9f, 0),
    VIT("vit_tiny_patch16_384", 384, 16, 192, 12, 3, INCEPTION_MEAN, INCEPTION_STD, 1.0f, 0),
    VIT("vit_small_patch16_224", 224, 16, 384, 12, 6, INCEPTION_MEAN, INCEPTION_STD, 0.9f, 0),
    VIT("vit_small_patch16_384", 384, 16, 384, 12, 6, INCEPTION_MEAN, INCEPTION_STD, 1.0f, 0),
    VIT("vit_small_patch32_224", 224, 32, 384, 12, 6, INCEPTION_MEAN, INCEPTION_STD, 0.9f, 0),
    VIT("vit_base_patch16_224", 224, 16, 768, 12, 12, INCEPTION_MEAN, INCEPTION_STD, 0.9f, 0),
    VIT("vit_base_patch16_384", 384, 16, 768, 12, 12, INCEPTION_MEAN, INCEPTION_STD, 1.0f, 0),
    VIT("vit_base_patch32_224", 224, 32, 768, 12, 12, INCEPTION_MEAN, INCEPTION_STD, 0.9f, 0),
    VIT("vit_base_patch32_384", 384, 32, 768, 12, 12, INCEPTION_MEAN, INCEPTION_STD, 1.0f, 0),
    VIT("vit_large_patch16_224", 224, 16, 1024, 24, 16, INCEPTION_MEAN, INCEPTION_STD, 0.9f, 0),
    VIT("vit_large_patch16_384", 384, 16, 1024, 24, 16, INCEPTION_MEAN, INCEPTION_STD, 1.0f, 0),
    VIT("vit_large_patch32_384", 384, 32, 1024, 24, 16, INCEPTION_MEAN, INCEPTION_STD, 1.0f, 0),
    VIT("deit_tiny_patch16_224", 224, 16, 192, 12, 3, IMAGENET_MEAN, IMAGENET_STD, 0.875f, 0),
    VIT("deit_small_patch16_224", 224, 16, 384, 12, 6, IMAGENET_MEAN, IMAGENET_STD, 0.875f, 0),
    VIT("deit_base_patch16_224", 224, 16, 768, 12, 12, IMAGENET_MEAN, IMAGENET_STD, 0.875f, 0),
    VIT("deit_base_patch16_384", 384, 16, 768, 12, 12, IMAGENET_MEAN, IMAGENET_STD, 1.0f, 0),
    VIT("deit_tiny_distilled_patch16_224", 224, 16, 192, 12, 3, IMAGENET_MEAN, IMAGENET_STD,
        0.875f, 1),
    VIT("deit_small_distilled_patch16_224", 224, 16, 384, 12, 6, IMAGENET_MEAN, IMAGENET_STD,
        0.875f, 1),
    VIT("deit_base_distilled_patch16_224", 224, 16, 768, 12, 12, IMAGENET_MEAN, IMAGENET_STD,
        0.875f, 1),
    VIT("deit_base_distilled_patch16_384", 384, 16, 768, 12, 12, IMAGENET_MEAN, IMAGENET_STD,
        1.0f, 1),
};
#define VIT_ARCH_N ((int)(sizeof vit_archs / sizeof vit_archs[0]))

static const char *const vit_component_names[] = {
    [VIT_COMP_PATCH_EMBED] = "patch_embed", [VIT_COMP_TOKENS] = "tokens+pos_embed",
    [VIT_COMP_NORM] = "layernorm",          [VIT_COMP_QKV] = "attn.qkv",
    [VIT_COMP_ATTN_SCORES] = "attn.scores", [VIT_COMP_ATTN_VALUES] = "attn.values",
    [VIT_COMP_PROJ] = "attn.proj",          [VIT_COMP_MLP] = "mlp",
    [VIT_COMP_HEAD] = "head",
};
_Static_assert(sizeof vit_component_names / sizeof vit_component_names[0] == VIT_COMP_COUNT,
               "every component needs a name");

static const char *const vit_pool_names[] = {[VIT_POOL_TOKEN] = "token", [VIT_POOL_AVG] = "avg"};
_Static_assert(sizeof vit_pool_names / sizeof vit_pool_names[0] == VIT_POOL_COUNT, "pool names");
static const char *const vit_interp_names[] = {[VIT_INTERP_BICUBIC] = "bicubic",
                                               [VIT_INTERP_BILINEAR] = "bilinear"};
_Static_assert(sizeof vit_interp_names / sizeof vit_interp_names[0] == VIT_INTERP_COUNT,
               "interpolation names");

const char *vit_component_name(vit_component c) {
    return (unsigned)c < VIT_COMP_COUNT ? vit_component_names[c] : "?";
}
const char *vit_pool_name(vit_pool p) {
    return (unsigned)p < VIT_POOL_COUNT ? vit_pool_names[p] : "?";
}
const char *vit_interp_name(vit_interp i) {
    return (unsigned)i < VIT_INTERP_COUNT ? vit_interp_names[i] : "?";
}

int vit_arch_count(void) { return VIT_ARCH_N; }
const vit_config *vit_arch_get(int i) { return i >= 0 && i < VIT_ARCH_N ? &vit_archs[i] : NULL; }

const vit_config *vit_arch_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < VIT_ARCH_N; i++)
        if (strcmp(vit_archs[i].name, name) == 0) return &vit_archs[i];
    /* timm's pretrained tags ("vit_base_patch16_224.augreg2_in21k_ft_in1k") name the same
     * architecture: match on the part before the dot. */
    const char *dot = strchr(name, '.');
    if (dot) {
        size_t n = (size_t)(dot - name);
        for (int i = 0; i < VIT_ARCH_N; i++)
            if (strlen(vit_archs[i].name) == n && strncmp(vit_archs[i].name, name, n) == 0)
                return &vit_archs[i];
    }
    return NULL;
}

void vit_arch_list(char *buf, size_t n) {
    size_t used = 0;
    if (n == 0) return;
    buf[0] = 0;
    for (int i = 0; i < VIT_ARCH_N && used < n; i++) {
        int w = snprintf(buf + used, n - used, "%s%s", i ? ", " : "", vit_archs[i].name);
        if (w < 0) break;
        used += (size_t)w;
    }
}

int vit_grid(const vit_config *c) { return c->img_size / c->patch_size; }
int vit_num_patches(const vit_config *c) { return vit_grid(c) * vit_grid(c); }
int vit_num_prefix(const vit_config *c) { return (c->class_token ? 1 : 0) + (c->distilled ? 1 : 0); }
int vit_num_tokens(const vit_config *c) { return vit_num_prefix(c) + vit_num_patches(c); }
int vit_head_dim(const vit_config *c) { return c->embed_dim / c->num_heads; }

as_status vit_config_validate(const vit_config *c, as_error *err) {
    const char *n = c->name[0] ? c->name : "model";
    if (c->img_size <= 0 || c->patch_size <= 0 || c->in_chans <= 0 || c->embed_dim <= 0 ||
        c->depth <= 0 || c->num_heads <= 0 || c->mlp_hidden <= 0 || c->num_classes < 0)
        return as_fail(err, AS_ERR_CONFIG,
                       "%s: sizes must be positive (img_size %d, patch_size %d, in_chans %d, "
                       "embed_dim %d, depth %d, num_heads %d, mlp hidden %d, num_classes %d)",
                       n, c->img_size, c->patch_size, c->in_chans, c->embed_dim, c->depth,
                       c->num_heads, c->mlp_hidden, c->num_classes);
    if (c->depth > 256)
        return as_fail(err, AS_ERR_CONFIG, "%s: depth %d is over the engine's limit of 256", n,
                       c->depth);
    if (c->img_size % c->patch_size != 0)
        return as_fail(err, AS_ERR_CONFIG,
                       "%s: img_size %d is not a multiple of patch_size %d: use an input size "
                       "such as %d", n, c->img_size, c->patch_size,
                       (c->img_size / c->patch_size) * c->patch_size);
    if (c->embed_dim % c->num_heads != 0)
        return as_fail(err, AS_ERR_CONFIG,
                       "%s: embed_dim %d is not divisible by num_heads %d: choose a head count "
                       "that divides it", n, c->embed_dim, c->num_heads);
    if (c->distilled && !c->class_token)
        return as_fail(err, AS_ERR_CONFIG,
                       "%s: a distilled model needs a class token: set class_token true", n);
    if (c->global_pool == VIT_POOL_TOKEN && !c->class_token)
        return as_fail(err, AS_ERR_CONFIG,
                       "%s: global_pool \"token\" needs a class token: set class_token true or "
                       "global_pool \"avg\"", n);
    if ((unsigned)c->global_pool >= VIT_POOL_COUNT || (unsigned)c->interpolation >= VIT_INTERP_COUNT)
        return as_fail(err, AS_ERR_CONFIG, "%s: unknown pooling or interpolation", n);
    if (!(c->ln_eps > 0.0f) || !(c->crop_pct > 0.0f && c->crop_pct <= 1.0f))
        return as_fail(err, AS_ERR_CONFIG,
                       "%s: ln_eps must be > 0 and crop_pct in (0, 1] (got %g, %g)", n,
                       (double)c->ln_eps, (double)c->crop_pct);
    for (int i = 0; i < 3; i++)
        if (!(c->std[i] > 0.0f))
            return as_fail(err, AS_ERR_CONFIG, "%s: std[%d] must be > 0 (got %g)", n, i,
                           (double)c->std[i]);
    /* A limit that keeps every activation size in int range for BLAS calls. */
    if ((double)vit_num_tokens(c) * vit_num_tokens(c) * c->num_heads > 2e9)
        return as_fail(err, AS_ERR_CONFIG, "%s: %d tokens x %d heads is too large for one image",
                       n, vit_num_tokens(c), c->num_heads);
    return AS_OK;
}

void vit_config_cost(const vit_config *c, vit_cost *out) {
    double D = c->embed_dim, L = c->depth, H = c->num_heads, Hd = D / H, Hm = c->mlp_hidden;
    double T = vit_num_tokens(c), Np = vit_num_patches(c), K = (double)c->in_chans * c->patch_size * c->patch_size;
    double C = c->num_classes, heads = c->distilled ? 2 : 1;
    double *p = out->params, *f = out->flops;
    for (int i = 0; i < VIT_COMP_COUNT; i++) p[i] = f[i] = 0;

    p[VIT_COMP_PATCH_EMBED] = K * D + D;
    f[VIT_COMP_PATCH_EMBED] = 2 * Np * K * D + Np * D;
    p[VIT_COMP_TOKENS] = vit_num_prefix(c) * D + T * D;
    f[VIT_COMP_TOKENS] = T * D;
    /* two norms per block plus the final norm; ~8 flops per element (mean, var, scale, shift) */
    p[VIT_COMP_NORM] = (2 * L + 1) * 2 * D;
    f[VIT_COMP_NORM] = (2 * L + 1) * 8 * T * D;
    p[VIT_COMP_QKV] = L * (3 * D * D + (c->qkv_bias ? 3 * D : 0));
    f[VIT_COMP_QKV] = L * 2 * T * D * 3 * D;
    /* scores: H * T * T * Hd MACs; softmax ~5 flops per entry (max, sub, exp, sum, div) */
    f[VIT_COMP_ATTN_SCORES] = L * (2 * H * T * T * Hd + 5 * H * T * T);
    f[VIT_COMP_ATTN_VALUES] = L * 2 * H * T * T * Hd;
    p[VIT_COMP_PROJ] = L * (D * D + D);
    f[VIT_COMP_PROJ] = L * 2 * T * D * D;
    p[VIT_COMP_MLP] = L * (2 * D * Hm + Hm + D);
    /* two GEMMs, GELU (~8 flops per element) and the two residual adds */
    f[VIT_COMP_MLP] = L * (4 * T * D * Hm + 8 * T * Hm + 2 * T * D);
    p[VIT_COMP_HEAD] = C > 0 ? heads * (D * C + C) : 0;
    f[VIT_COMP_HEAD] = C > 0 ? heads * 2 * D * C : 0;

    out->params_total = out->flops_total = 0;
    for (int i = 0; i < VIT_COMP_COUNT; i++) {
        out->params_total += p[i];
        out->flops_total += f[i];
    }
}
