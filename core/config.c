/* config.c: the built-in timm architecture table, validation and closed-form cost counts. */
#include "config.h"
#include "cait.h"
#include "mech.h"
#include "pvt.h"
#include "stem.h"
#include "vitfam.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <threads.h>

#define IMAGENET_MEAN {0.485f, 0.456f, 0.406f}
#define IMAGENET_STD {0.229f, 0.224f, 0.225f}
#define INCEPTION_MEAN {0.5f, 0.5f, 0.5f}
#define INCEPTION_STD {0.5f, 0.5f, 0.5f}
#define CLIP_MEAN {0.48145466f, 0.4578275f, 0.40821073f} /* timm OPENAI_CLIP_MEAN */
#define CLIP_STD {0.26862954f, 0.26130258f, 0.27577711f}

/* timm's defaults (timm/models/vision_transformer.py and deit.py, _cfg): ViT checkpoints use
 * Inception mean/std, DeiT ImageNet mean/std; both crop 0.9 at 224 and 1.0 at 384, bicubic. */
#define VIT(nm, img, p, d, l, h, mean_, std_, crop, dist)                                     \
    {.name = nm, .img_size = img, .patch_size = p, .in_chans = 3, .embed_dim = d, .depth = l, \
     .num_heads = h, .mlp_hidden = 4 * (d), .num_classes = 1000, .qkv_bias = 1,               \
     .class_token = 1, .distilled = dist, .global_pool = VIT_POOL_TOKEN, .fc_norm = 0,        \
     .ln_eps = 1e-6f, .mean = mean_, .std = std_, .crop_pct = crop,                           \
     .interpolation = VIT_INTERP_BICUBIC}

/* timm's SwinTransformer (timm/models/swin_transformer.py): patch 4 with a LayerNorm, stages
 * of shifted-window blocks whose width doubles at every 2x2 patch merging (the merge sits at the
 * start of stages 1.., as in timm), mlp_ratio 4, qkv bias, every LayerNorm eps 1e-5, final norm
 * then average pooling; ImageNet mean/std, crop 0.9 at 224 and 1.0 at 384, bicubic. */
#define SWIN_STAGE(s, d, h, c0, m)                                                            \
    {.depth = d, .embed_dim = (c0) << (s), .num_heads = h, .mlp_hidden = 4 * ((c0) << (s)),  \
     .scope = VIT_SCOPE_WINDOW, .window = m, .down = (s) ? VIT_DOWN_MERGE : VIT_DOWN_NONE}
#define SWIN(nm, img, c0, d2, h0, m, crop)                                                    \
    {.name = nm, .img_size = img, .patch_size = 4, .in_chans = 3, .embed_dim = c0,            \
     .depth = 2 + 2 + (d2) + 2, .num_heads = h0, .mlp_hidden = 4 * (c0), .num_classes = 1000, \
     .qkv_bias = 1, .global_pool = VIT_POOL_AVG, .ln_eps = 1e-5f, .mean = IMAGENET_MEAN,     \
     .std = IMAGENET_STD, .crop_pct = crop, .interpolation = VIT_INTERP_BICUBIC,             \
     .family = VIT_FAMILY_SWIN, .n_stages = 4,                                                \
     .stage = {SWIN_STAGE(0, 2, h0, c0, m), SWIN_STAGE(1, 2, 2 * (h0), c0, m),              \
               SWIN_STAGE(2, d2, 4 * (h0), c0, m), SWIN_STAGE(3, 2, 8 * (h0), c0, m)},       \
     .patch_norm = 1, .shift_windows = 1, .pad_order = VIT_PAD_FIRST,                         \
     .window_clamp = VIT_CLAMP_TIMM}

/* timm's PyramidVisionTransformerV2 (timm/models/pvt_v2.py): the overlapping stem Conv2d(k7, s4,
 * p3) + LN, a Conv2d(k3, s2, p1) + LN before stages 1.., spatial-reduction attention with
 * sr_ratios (8, 4, 2, 1) (or, linear, a 7 x 7 pool), MixFFN, a LN closing every stage, mean
 * pooling and the head; heads (1, 2, 5, 8), qkv bias, no position embedding; block and stage
 * norms eps 1e-6, stem, downsample and SR norms 1e-5; ImageNet mean/std, crop 0.9, bicubic. */
#define PVT_STAGE(s, d, c, h, r, sr)                                                          \
    {.depth = d, .embed_dim = c, .num_heads = h, .mlp_hidden = (r) * (c), .scope = VIT_SCOPE_SRA, \
     .down = (s) ? VIT_DOWN_CONV : VIT_DOWN_NONE, .sr_ratio = sr}
#define PVT(nm, d0, d1, d2, d3, c0, c1, c2, c3, r0, r1, r2, r3, lin)                            \
    {.name = nm, .img_size = 224, .patch_size = 4, .in_chans = 3, .embed_dim = c0,              \
     .depth = (d0) + (d1) + (d2) + (d3), .num_heads = 1, .mlp_hidden = (r0) * (c0),             \
     .num_classes = 1000, .qkv_bias = 1, .global_pool = VIT_POOL_AVG, .ln_eps = 1e-6f,          \
     .mean = IMAGENET_MEAN, .std = IMAGENET_STD, .crop_pct = 0.9f,                              \
     .interpolation = VIT_INTERP_BICUBIC, .family = VIT_FAMILY_PVT2, .n_stages = 4,            \
     .stage = {PVT_STAGE(0, d0, c0, 1, r0, 8), PVT_STAGE(1, d1, c1, 2, r1, 4),                  \
               PVT_STAGE(2, d2, c2, 5, r2, 2), PVT_STAGE(3, d3, c3, 8, r3, 1)},                 \
     .patch_kernel = 7, .sr_linear = lin, .conv_ln_eps = 1e-5f}

/* The modern ViT family (timm/models/deit.py and vision_transformer.py model_args; the
 * defaults of each architecture's first pretrained tag, which timm applies when no tag is given:
 * DINOv2 and SigLIP have no head, DINOv2 runs at 518 px; CLIP is the .openai image tower, whose
 * head is its 512-d projection, not timm's first tag, the fine-tuned .laion2b_ft_in12k_in1k).
 * ls: init_values; nec: no_embed_class; reg: reg_tokens. */
#define VITFAM(nm, img, p, d, h, mean_, std_, crop, classes, ls, nec, reg, prenorm, act, pool, cls, eps) \
    {.name = nm, .img_size = img, .patch_size = p, .in_chans = 3, .embed_dim = d, .depth = 12,    \
     .num_heads = h, .mlp_hidden = 4 * (d), .num_classes = classes, .qkv_bias = 1,                \
     .class_token = cls, .global_pool = pool, .ln_eps = eps, .mean = mean_, .std = std_,           \
     .crop_pct = crop, .interpolation = VIT_INTERP_BICUBIC, .init_values = ls,                    \
     .no_embed_class = nec, .reg_tokens = reg, .pre_norm = prenorm, .act_layer = act}

/* timm's Cait (timm/models/cait.py): patch 16, no class slot in the position embedding, l
 * talking-heads self-attention blocks then 2 class-attention blocks (depth_token_only), mlp_ratio
 * 4 in both, qkv bias, LayerNorm eps 1e-6, LayerScale init 1e-5 (24 layers) or 1e-6 (36); the
 * class token after the final norm feeds the head. ImageNet mean/std, crop 1.0, bicubic. */
#define CAIT_STAGE(d, l, h, sc) \
    {.depth = l, .embed_dim = d, .num_heads = h, .mlp_hidden = 4 * (d), .scope = sc}
#define CAIT(nm, d, l, h, ls)                                                                 \
    {.name = nm, .img_size = 224, .patch_size = 16, .in_chans = 3, .embed_dim = d,            \
     .depth = (l) + 2, .num_heads = h, .mlp_hidden = 4 * (d), .num_classes = 1000,            \
     .qkv_bias = 1, .class_token = 1, .global_pool = VIT_POOL_TOKEN, .ln_eps = 1e-6f,         \
     .mean = IMAGENET_MEAN, .std = IMAGENET_STD, .crop_pct = 1.0f,                            \
     .interpolation = VIT_INTERP_BICUBIC, .family = VIT_FAMILY_CAIT, .n_stages = 2,          \
     .stage = {CAIT_STAGE(d, l, h, VIT_SCOPE_GLOBAL), CAIT_STAGE(d, 2, h, VIT_SCOPE_CLASS)},  \
     .init_values = ls, .talking_heads = 1}

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
    VIT("deit_tiny_patch16_224", 224, 16, 192, 12, 3, IMAGENET_MEAN, IMAGENET_STD, 0.9f, 0),
    VIT("deit_small_patch16_224", 224, 16, 384, 12, 6, IMAGENET_MEAN, IMAGENET_STD, 0.9f, 0),
    VIT("deit_base_patch16_224", 224, 16, 768, 12, 12, IMAGENET_MEAN, IMAGENET_STD, 0.9f, 0),
    VIT("deit_base_patch16_384", 384, 16, 768, 12, 12, IMAGENET_MEAN, IMAGENET_STD, 1.0f, 0),
    VIT("deit_tiny_distilled_patch16_224", 224, 16, 192, 12, 3, IMAGENET_MEAN, IMAGENET_STD,
        0.9f, 1),
    VIT("deit_small_distilled_patch16_224", 224, 16, 384, 12, 6, IMAGENET_MEAN, IMAGENET_STD,
        0.9f, 1),
    VIT("deit_base_distilled_patch16_224", 224, 16, 768, 12, 12, IMAGENET_MEAN, IMAGENET_STD,
        0.9f, 1),
    VIT("deit_base_distilled_patch16_384", 384, 16, 768, 12, 12, IMAGENET_MEAN, IMAGENET_STD,
        1.0f, 1),
    /* DeiT III: LayerScale 1e-6, position embedding without the class slot */
    VITFAM("deit3_small_patch16_224", 224, 16, 384, 6, IMAGENET_MEAN, IMAGENET_STD, 0.9f, 1000,
           1e-6f, 1, 0, 0, VIT_ACT_GELU, VIT_POOL_TOKEN, 1, 1e-6f),
    VITFAM("deit3_base_patch16_224", 224, 16, 768, 12, IMAGENET_MEAN, IMAGENET_STD, 0.9f, 1000,
           1e-6f, 1, 0, 0, VIT_ACT_GELU, VIT_POOL_TOKEN, 1, 1e-6f),
    /* DINOv2 (.lvd142m): LayerScale 1e-5, patch 14 at 518 px, no head; with 4 registers the
     * position embedding loses its class slot */
    VITFAM("vit_small_patch14_dinov2", 518, 14, 384, 6, IMAGENET_MEAN, IMAGENET_STD, 1.0f, 0,
           1e-5f, 0, 0, 0, VIT_ACT_GELU, VIT_POOL_TOKEN, 1, 1e-6f),
    VITFAM("vit_base_patch14_dinov2", 518, 14, 768, 12, IMAGENET_MEAN, IMAGENET_STD, 1.0f, 0,
           1e-5f, 0, 0, 0, VIT_ACT_GELU, VIT_POOL_TOKEN, 1, 1e-6f),
    VITFAM("vit_small_patch14_reg4_dinov2", 518, 14, 384, 6, IMAGENET_MEAN, IMAGENET_STD, 1.0f, 0,
           1e-5f, 1, 4, 0, VIT_ACT_GELU, VIT_POOL_TOKEN, 1, 1e-6f),
    VITFAM("vit_base_patch14_reg4_dinov2", 518, 14, 768, 12, IMAGENET_MEAN, IMAGENET_STD, 1.0f, 0,
           1e-5f, 1, 4, 0, VIT_ACT_GELU, VIT_POOL_TOKEN, 1, 1e-6f),
    /* CLIP image towers: norm_pre (no patch bias), torch's LayerNorm eps 1e-5, OpenAI mean/std,
     * head = the 512-d image projection (.openai); the quickgelu variant as OpenAI trained it */
    VITFAM("vit_base_patch16_clip_224", 224, 16, 768, 12, CLIP_MEAN, CLIP_STD, 0.9f, 512,
           0.0f, 0, 0, 1, VIT_ACT_GELU, VIT_POOL_TOKEN, 1, 1e-5f),
    VITFAM("vit_base_patch16_clip_quickgelu_224", 224, 16, 768, 12, CLIP_MEAN, CLIP_STD, 0.9f, 512,
           0.0f, 0, 0, 1, VIT_ACT_QUICK_GELU, VIT_POOL_TOKEN, 1, 1e-5f),
    /* SigLIP: no class token, attention pooling (MAP), no head, Inception mean/std */
    VITFAM("vit_base_patch16_siglip_224", 224, 16, 768, 12, INCEPTION_MEAN, INCEPTION_STD, 0.9f, 0,
           0.0f, 0, 0, 0, VIT_ACT_GELU, VIT_POOL_MAP, 0, 1e-6f),
    SWIN("swin_tiny_patch4_window7_224", 224, 96, 6, 3, 7, 0.9f),
    SWIN("swin_small_patch4_window7_224", 224, 96, 18, 3, 7, 0.9f),
    SWIN("swin_base_patch4_window7_224", 224, 128, 18, 4, 7, 0.9f),
    SWIN("swin_base_patch4_window12_384", 384, 128, 18, 4, 12, 1.0f),
    PVT("pvt_v2_b0", 2, 2, 2, 2, 32, 64, 160, 256, 8, 8, 4, 4, 0),
    PVT("pvt_v2_b1", 2, 2, 2, 2, 64, 128, 320, 512, 8, 8, 4, 4, 0),
    PVT("pvt_v2_b2", 3, 4, 6, 3, 64, 128, 320, 512, 8, 8, 4, 4, 0),
    PVT("pvt_v2_b2_li", 3, 4, 6, 3, 64, 128, 320, 512, 8, 8, 4, 4, 1),
    PVT("pvt_v2_b3", 3, 4, 18, 3, 64, 128, 320, 512, 8, 8, 4, 4, 0),
    PVT("pvt_v2_b4", 3, 8, 27, 3, 64, 128, 320, 512, 8, 8, 4, 4, 0),
    PVT("pvt_v2_b5", 3, 6, 40, 3, 64, 128, 320, 512, 4, 4, 4, 4, 0),
    CAIT("cait_xxs24_224", 192, 24, 4, 1e-5f),
    CAIT("cait_xxs36_224", 192, 36, 4, 1e-6f),
    CAIT("cait_s24_224", 384, 24, 8, 1e-5f),
};
#define VIT_ARCH_N ((int)(sizeof vit_archs / sizeof vit_archs[0]))

static const char *const vit_component_names[] = {
    [VIT_COMP_PATCH_EMBED] = "patch_embed", [VIT_COMP_TOKENS] = "tokens+pos_embed",
    [VIT_COMP_NORM] = "layernorm",          [VIT_COMP_QKV] = "attn.qkv",
    [VIT_COMP_ATTN_SCORES] = "attn.scores", [VIT_COMP_ATTN_MAPS] = "attn.maps",
    [VIT_COMP_ATTN_VALUES] = "attn.values",
    [VIT_COMP_PROJ] = "attn.proj",          [VIT_COMP_MLP] = "mlp",
    [VIT_COMP_DOWNSAMPLE] = "downsample",   [VIT_COMP_HEAD] = "head",
    [VIT_COMP_SR] = "attn.sr",
};
_Static_assert(sizeof vit_component_names / sizeof vit_component_names[0] == VIT_COMP_COUNT,
               "every component needs a name");

static const char *const vit_pool_names[] = {[VIT_POOL_TOKEN] = "token", [VIT_POOL_AVG] = "avg", [VIT_POOL_MAP] = "map"};
_Static_assert(sizeof vit_pool_names / sizeof vit_pool_names[0] == VIT_POOL_COUNT, "pool names");
static const char *const vit_interp_names[] = {[VIT_INTERP_BICUBIC] = "bicubic",
                                               [VIT_INTERP_BILINEAR] = "bilinear"};
_Static_assert(sizeof vit_interp_names / sizeof vit_interp_names[0] == VIT_INTERP_COUNT,
               "interpolation names");

static const char *const vit_bias_names[] = {
    [VIT_BIAS_NONE] = "none", [VIT_BIAS_FULL] = "full", [VIT_BIAS_RELATIVE] = "relative"};
_Static_assert(sizeof vit_bias_names / sizeof vit_bias_names[0] == VIT_BIAS_COUNT, "bias names");
static const char *const vit_mask_names[] = {
    [VIT_MASK_ZERO] = "zero", [VIT_MASK_SOFT] = "soft", [VIT_MASK_NEG_INF] = "neg_inf"};
_Static_assert(sizeof vit_mask_names / sizeof vit_mask_names[0] == VIT_MASK_COUNT, "mask names");

static int name_index(const char *const *names, int n, const char *s) {
    for (int i = 0; s && i < n; i++)
        if (strcmp(names[i], s) == 0) return i;
    return -1;
}

const char *vit_attn_name(vit_attn_kind k) {
    const vit_mech *m = vit_mech_get_kind(k);
    return m ? m->name : "?";
}
const char *vit_bias_name(vit_bias_kind b) {
    return (unsigned)b < VIT_BIAS_COUNT ? vit_bias_names[b] : "?";
}
const char *vit_mask_mode_name(vit_mask_mode m) {
    return (unsigned)m < VIT_MASK_COUNT ? vit_mask_names[m] : "?";
}
int vit_attn_parse(const char *s) {
    for (int k = 0; s && k < vit_mech_count(); k++)
        if (strcmp(vit_mech_get_kind((vit_attn_kind)k)->name, s) == 0) return k;
    return -1;
}
int vit_bias_parse(const char *s) { return name_index(vit_bias_names, VIT_BIAS_COUNT, s); }
int vit_mask_mode_parse(const char *s) { return name_index(vit_mask_names, VIT_MASK_COUNT, s); }

const char *vit_component_name(vit_component c) {
    return (unsigned)c < VIT_COMP_COUNT ? vit_component_names[c] : "?";
}
const char *vit_pool_name(vit_pool p) {
    return (unsigned)p < VIT_POOL_COUNT ? vit_pool_names[p] : "?";
}
const char *vit_interp_name(vit_interp i) {
    return (unsigned)i < VIT_INTERP_COUNT ? vit_interp_names[i] : "?";
}

/* The papers' own models (issue 18) as built-in names: a built-in architecture with another
 * input, stem or head, and a mechanism per stage. One line each; vit_arch_get builds them. */
typedef struct {
    const char *name, *base;
    int img_size, patch_size, num_classes; /* 0: the base's */
    vit_attn_kind kind;                     /* every block's attention */
    int qk_dim[VIT_MAX_STAGES];             /* lmsa: the q/k width of each stage's blocks */
    int depths[VIT_MAX_STAGES];             /* blocks per stage; {0}: the base's */
    /* LaViT (Table 1's N_LA): the block of each stage, counted from 1, from which blocks are
     * less-attention, 0 for none; and its attention residual between stages */
    int less_from[VIT_MAX_STAGES];
    int attn_residual;
    /* MaiT (003_0ebe6d202555ca79.txt): another width and head count (0: the base's), LayerScale
     * (0: the base's), and up to three spans of blocks [from, to] whose first `heads` heads
     * (negative: H + heads; VIT_SEED_ALL_HEADS: all) take 3 x 3 masks in `mode` */
    int embed_dim, num_heads;
    float init_values;
    struct {
        int from, to, heads;
        vit_mask_mode mode;
    } mait[3];
    /* what the fields above cannot say (a convolutional stem, conv merges, per-block options):
     * applied last, after the attention of every block is set */
    void (*finish)(vit_config *c);
} vit_seed;

/* ViT-LSLA (000_db5d1934b82953a9.txt, "Overall Architecture"): "a stem block consisting of two
 * 3x3 convolutional layers ... H/4 x W/4 x 96" following MPViT (its Conv2d_BN + Hardswish, no
 * conv bias), "four stages referring to Swin", "the patch merging layer following CSwin"
 * (Conv2d k3 s2 p1 + LayerNorm), LSLA in every block's 7 x 7 windows with its dynamic scale and
 * inner and outer relative position biases (Table 5), the outer bias kept off the pairs Swin's
 * shift mask separates. The MLP ratio 2 and the depths are attnscope's reading of the paper's
 * counts (docs/models.md, "ViT-LSLA"). keys_k / values_v / proj: Table 4's QXX (x, x, proj), QXV
 * (x, v, no proj), QXX+NP (x, x, no proj) and QKV (k, v, proj: SLA on ordinary attention). */
static void lsla_stages(vit_config *c, int keys_k, int values_v, int proj) {
    c->no_rel_pos_bias = 1; /* LSLA's inner bias is the windows' relative position bias */
    static const vit_conv stem = {.kernel = 3, .stride = 2, .padding = 1, .bn = 1, .act = VIT_STEM_ACT_HARDSWISH};
    c->n_stem = 2;
    c->stem[0] = c->stem[1] = stem;
    c->stem[0].out = c->stage[0].embed_dim / 2;
    c->stem[1].out = c->stage[0].embed_dim;
    c->bn_eps = 1e-5f;
    c->patch_size = 4;
    c->patch_norm = 0; /* MPViT's stem ends in BatchNorm + Hardswish */
    for (int s = 0; s < c->n_stages; s++) {
        c->stage[s].mlp_hidden = 2 * c->stage[s].embed_dim;
        if (s > 0) c->stage[s].down = VIT_DOWN_CONV;
    }
    c->mlp_hidden = c->stage[0].mlp_hidden;
    for (int l = 0; l < c->depth; l++) {
        vit_attn *a = &c->attn[l];
        a->dynamic_scale = 1;
        a->inner_bias = a->outer_bias = VIT_BIAS_RELATIVE;
        a->key_proj = keys_k;
        a->value_proj = values_v;
        a->no_proj = !proj;
        a->outer_unmasked = 0;
    }
}
static void finish_vit_lsla(vit_config *c) { lsla_stages(c, 0, 0, 1); }
static void finish_vit_lsla_qxv(vit_config *c) { lsla_stages(c, 0, 1, 0); }
static void finish_vit_lsla_np(vit_config *c) { lsla_stages(c, 0, 0, 0); }
static void finish_vit_lsla_qkv(vit_config *c) { lsla_stages(c, 1, 1, 1); }

/* H-MaiT (003_0ebe6d202555ca79.txt, section 5.4 "Hierarchical MaiT"): Swin-T/S's stages, widths,
 * depths and heads with "masked attention instead of window-based attention": every stage attends
 * globally over its grid, and [3, 6, 4, 0] heads of the stages' [3, 6, 12, 24] take 3 x 3 masks,
 * "Hard Masking" (the zero mode; docs/models.md, "H-MaiT"). */
static void finish_hmait(vit_config *c) {
    static const int masked[VIT_MAX_STAGES] = {3, 6, 4, 0};
    for (int s = 0, l = 0; s < c->n_stages; s++) {
        c->stage[s].scope = VIT_SCOPE_GLOBAL;
        for (int j = 0; j < c->stage[s].depth; j++, l++) {
            vit_attn *a = &c->attn[l];
            memset(a, 0, sizeof *a);
            if (!masked[s]) continue; /* plain global attention */
            a->kind = VIT_ATTN_MAIT;
            a->mask_mode = VIT_MASK_ZERO;
            for (int h = 0; h < masked[s] && h < VIT_MAX_MASK_HEADS; h++) a->mask_size[h] = 3;
        }
    }
}

/* Refined-ViT (004_4bd122a74db07fb9.txt; docs/models.md, "Refined-ViT"): Refiner in every block
 * (expansion ratio 3, the released models' value, and 3 x 3 DLA kernels), MLP ratio 3, and the
 * released code's convolutional stem (PatchEmbed_cnn: conv7 s2 p3 + BN + ReLU, two conv3 + BN +
 * ReLU to 128 channels, an 8 x 8 stride-8 projection: 14 x 14 tokens at 224), with its names. */
static void finish_refined_vit(vit_config *c) {
    static const vit_conv stem[4] = {
        {32, 7, 2, 3, 0, 1, VIT_STEM_ACT_RELU, "patch_embed.conv1", "patch_embed.bn1"},
        {64, 3, 1, 1, 0, 1, VIT_STEM_ACT_RELU, "patch_embed.conv2", "patch_embed.bn2"},
        {128, 3, 1, 1, 0, 1, VIT_STEM_ACT_RELU, "patch_embed.conv3", "patch_embed.bn3"},
        {0, 8, 8, 0, 1, 0, VIT_STEM_ACT_NONE, "patch_embed.proj", ""}};
    c->n_stem = 4;
    memcpy(c->stem, stem, sizeof stem);
    c->stem[3].out = c->embed_dim;
    c->bn_eps = 1e-5f;
    c->patch_size = 16;
    c->mlp_hidden = 3 * c->embed_dim;
    for (int i = 0; i < 3; i++) c->mean[i] = c->std[i] = 0.5f;
    for (int l = 0; l < c->depth; l++) {
        c->attn[l].expanded_heads = 3 * c->num_heads;
        c->attn[l].kernel_size = 3;
    }
}
/* Refined-ViT as its code was released (zhoudaquan/Refiner_ViT @b11ebb8, Refiner_ViT_S/M/L;
 * docs/models.md, "Refined-ViT as released"): the same stem and widths, blocks alternating
 * refiner_release and refiner_shared (its share = [False, True] x 8 or x 16), DLA with H' = 3 H
 * (its DLA's default expand_ratio: S's head_expand 6 reaches no module), adjust_ratio 0.5,
 * LayerScale 1e-5 on the MLP branch alone, the dense head at 0.5, qkv bias, LayerNorm eps 1e-6,
 * crop 0.9 / 1.0 / 1.0 (L's 1.13 pads a smaller resize with zeros: outside [0.25, 1]). */
static void finish_refiner_release(vit_config *c) {
    finish_refined_vit(c);
    for (int l = 0; l < c->depth; l++) {
        vit_attn *a = &c->attn[l];
        memset(a, 0, sizeof *a);
        a->kind = l % 2 ? VIT_ATTN_REFINER_SHARED : VIT_ATTN_REFINER_RELEASE;
        if (l % 2) {
            a->expanded_heads = 3 * c->num_heads;
            a->kernel_size = 3;
        }
    }
    c->adjust_ratio = 0.5f;
    c->mlp_scale = 1e-5f;
    c->aux_head = 0.5f;
    c->qkv_bias = 1;
    c->ln_eps = 1e-6f;
    c->crop_pct = c->depth == 16 ? 0.9f : 1.0f;
}
#define VIT_SEED_ALL_HEADS 99

static const vit_seed vit_seeds[] = {
    /* LMSA, Table 3 (001_437a81f61ef2391f.txt): Swin-T on CIFAR, "the Patches Embedding stage of
     * the model is replaced by Conv 1x1" (patch 1, 32 x 32 grid); q/k at 1 channel per head (the
     * extreme setting, CIFAR-10) or halved (CIFAR-100), and their MSA baselines */
    {"swin_tiny_cifar10", "swin_tiny_patch4_window7_224", 32, 1, 10, VIT_ATTN_VANILLA, .qk_dim = {0}},
    {"lmsa_swin_tiny_cifar10", "swin_tiny_patch4_window7_224", 32, 1, 10, VIT_ATTN_LMSA, .qk_dim = {3, 6, 12, 24}},
    {"swin_tiny_cifar100", "swin_tiny_patch4_window7_224", 32, 1, 100, VIT_ATTN_VANILLA, .qk_dim = {0}},
    {"lmsa_swin_tiny_cifar100", "swin_tiny_patch4_window7_224", 32, 1, 100, VIT_ATTN_LMSA, .qk_dim = {48, 96, 192, 384}},
    /* the extreme setting on the ImageNet Swin-T */
    {"lmsa_swin_tiny_patch4_window7_224", "swin_tiny_patch4_window7_224", 0, 0, 0, VIT_ATTN_LMSA, .qk_dim = {3, 6, 12, 24}},
    /* LaViT, Table 1 (002_684a320be87a6fbb.txt): PVT v2 stages (its "w/o LA" baseline, Table 6,
     * is PVTv2-b1 / b2) with channels [64, 128, 320, 512] and heads [1, 2, 5, 8], less-attention
     * from block N_LA of each stage (0: none), the attention residual into every stage after the
     * first; docs/models.md, "LaViT", has the readings and the parameter counts */
    {"lavit_t", "pvt_v2_b1", 0, 0, 0, VIT_ATTN_VANILLA, .depths = {2, 2, 2, 2}, .less_from = {0, 0, 2, 2}, .attn_residual = 1},
    {"lavit_s", "pvt_v2_b2", 0, 0, 0, VIT_ATTN_VANILLA, .depths = {3, 4, 6, 3}, .less_from = {0, 0, 3, 2}, .attn_residual = 1},
    {"lavit_b", "pvt_v2_b2", 0, 0, 0, VIT_ATTN_VANILLA, .depths = {3, 3, 18, 3}, .less_from = {0, 2, 4, 3}, .attn_residual = 1},
    /* MaiT, Table 7: 24-layer DeiTs (Table 2's widths and heads). XT, XS and S (starred) add
     * LayerScale (init 1e-5, CaiT's for 24 layers: the paper gives none). XS and S use masking
     * Sch.2 (Table 5: "Sch.2 with LayerScale"): H - 1 masked heads in layers 0-7, one in 8-19
     * (the paper prints "9-19", leaving layer 8 out: docs/models.md, "MaiT's models"), none
     * after. T is Table 4's Sch.3 (soft masks in every head of layers 0-20) without LayerScale;
     * XT's masks are printed only for its distilled twin ("With Soft Masking", section 5.5):
     * Sch.3 with LayerScale */
    {"mait_xt", "deit_tiny_patch16_224", 0, 0, 0, VIT_ATTN_VANILLA, .depths = {24}, .embed_dim = 144,
     .num_heads = 3, .init_values = 1e-5f, .mait = {{0, 20, VIT_SEED_ALL_HEADS, VIT_MASK_SOFT}}},
    {"mait_t", "deit_tiny_patch16_224", 0, 0, 0, VIT_ATTN_VANILLA, .depths = {24},
     .mait = {{0, 20, VIT_SEED_ALL_HEADS, VIT_MASK_SOFT}}},
    {"mait_xs", "deit_tiny_patch16_224", 0, 0, 0, VIT_ATTN_VANILLA, .depths = {24}, .embed_dim = 288,
     .num_heads = 3, .init_values = 1e-5f, .mait = {{0, 7, -1, VIT_MASK_ZERO}, {8, 19, 1, VIT_MASK_ZERO}}},
    {"mait_s", "deit_small_patch16_224", 0, 0, 0, VIT_ATTN_VANILLA, .depths = {24}, .init_values = 1e-5f,
     .mait = {{0, 7, -1, VIT_MASK_ZERO}, {8, 19, 1, VIT_MASK_ZERO}}},
    /* Masked CaiT, Table 7: CaiT-XXS24 ("CaiT-T", 12 M, 2.5 G) and CaiT-S24 with masks; the
     * placement is not printed: Sch.1, the quick search's initialisation (head 0 of every
     * self-attention block, 3 x 3, hard), on each head's logits before the mix */
    {"masked_cait_xxs24", "cait_xxs24_224", 0, 0, 0, VIT_ATTN_VANILLA, .mait = {{0, 23, 1, VIT_MASK_ZERO}}},
    {"masked_cait_s24", "cait_s24_224", 0, 0, 0, VIT_ATTN_VANILLA, .mait = {{0, 23, 1, VIT_MASK_ZERO}}},
    /* ViT-LSLA (Tables 1, 4): Swin-T's widths and heads at 102 classes (IP102, where the paper
     * counts its parameters: Swin-T 27.6 M there), depths [2, 2, 9, 2] (docs/models.md) */
    {"vit_lsla", "swin_tiny_patch4_window7_224", 0, 0, 102, VIT_ATTN_LSLA, .depths = {2, 2, 9, 2},
     .finish = finish_vit_lsla},
    {"vit_lsla_qxv", "swin_tiny_patch4_window7_224", 0, 0, 102, VIT_ATTN_LSLA, .depths = {2, 2, 9, 2},
     .finish = finish_vit_lsla_qxv},
    {"vit_lsla_np", "swin_tiny_patch4_window7_224", 0, 0, 102, VIT_ATTN_LSLA, .depths = {2, 2, 9, 2},
     .finish = finish_vit_lsla_np},
    {"vit_lsla_qkv", "swin_tiny_patch4_window7_224", 0, 0, 102, VIT_ATTN_LSLA, .depths = {2, 2, 9, 2},
     .finish = finish_vit_lsla_qkv},
    /* H-MaiT-T/S (Table 5): Swin-T's and Swin-S's architecture with masked global attention */
    {"hmait_t", "swin_tiny_patch4_window7_224", 0, 0, 0, VIT_ATTN_VANILLA, .finish = finish_hmait},
    {"hmait_s", "swin_small_patch4_window7_224", 0, 0, 0, VIT_ATTN_VANILLA, .finish = finish_hmait},
    /* Refined-ViT-S/M/L (Table 2's widths; the released configs: 16/32/32 blocks, D 384/420/512,
     * H 12/12/16) */
    {"refined_vit_s", "deit_small_patch16_224", 0, 0, 0, VIT_ATTN_REFINER, .depths = {16}, .embed_dim = 384,
     .num_heads = 12, .finish = finish_refined_vit},
    {"refined_vit_m", "deit_small_patch16_224", 0, 0, 0, VIT_ATTN_REFINER, .depths = {32}, .embed_dim = 420,
     .num_heads = 12, .finish = finish_refined_vit},
    {"refined_vit_l", "deit_small_patch16_224", 0, 0, 0, VIT_ATTN_REFINER, .depths = {32}, .embed_dim = 512,
     .num_heads = 16, .finish = finish_refined_vit},
    /* the released code's Refiner_ViT_S/M/L, its own family of blocks */
    {"refiner_release_s", "deit_small_patch16_224", 0, 0, 0, VIT_ATTN_VANILLA, .depths = {16}, .embed_dim = 384,
     .num_heads = 12, .finish = finish_refiner_release},
    {"refiner_release_m", "deit_small_patch16_224", 0, 0, 0, VIT_ATTN_VANILLA, .depths = {32}, .embed_dim = 420,
     .num_heads = 12, .finish = finish_refiner_release},
    {"refiner_release_l", "deit_small_patch16_224", 0, 0, 0, VIT_ATTN_VANILLA, .depths = {32}, .embed_dim = 512,
     .num_heads = 16, .finish = finish_refiner_release},
};
#define VIT_SEED_N ((int)(sizeof vit_seeds / sizeof vit_seeds[0]))

static const vit_config *base_arch(const char *name) {
    for (int i = 0; i < VIT_ARCH_N; i++)
        if (strcmp(vit_archs[i].name, name) == 0) return &vit_archs[i];
    return NULL;
}

static void seed_build(const vit_seed *s, vit_config *c) {
    *c = *base_arch(s->base);
    snprintf(c->name, sizeof c->name, "%s", s->name);
    if (s->img_size) {
        c->img_size = s->img_size;
        c->crop_pct = 1.0f; /* CIFAR-size images pass unchanged */
    }
    if (s->patch_size) c->patch_size = s->patch_size;
    if (s->num_classes) c->num_classes = s->num_classes;
    if (s->depths[0] && c->n_stages == 0) c->depth = s->depths[0];
    if (s->depths[0] && c->n_stages > 0) {
        c->depth = 0;
        for (int st = 0; st < c->n_stages; st++) c->depth += c->stage[st].depth = s->depths[st];
    }
    if (s->embed_dim) {
        c->embed_dim = s->embed_dim;
        c->mlp_hidden = 4 * s->embed_dim; /* DeiT's MLP ratio */
    }
    if (s->num_heads) c->num_heads = s->num_heads;
    if (s->init_values > 0) c->init_values = s->init_values;
    c->attn_residual = s->attn_residual;
    const int stages = c->n_stages > 0 ? c->n_stages : 1;
    for (int st = 0, l = 0; st < stages; st++)
        for (int j = 0; j < (c->n_stages > 0 ? c->stage[st].depth : c->depth); j++, l++) {
            vit_attn *a = &c->attn[l];
            memset(a, 0, sizeof *a);
            int span = -1, heads = 0;
            for (int k = 0; k < 3; k++) {
                const int h = s->mait[k].heads < 0 ? c->num_heads + s->mait[k].heads : s->mait[k].heads;
                if (h > 0 && l >= s->mait[k].from && l <= s->mait[k].to) span = k, heads = h;
            }
            a->kind = span >= 0 ? VIT_ATTN_MAIT : s->less_from[st] && j + 1 >= s->less_from[st] ? VIT_ATTN_LESS : s->kind;
            const vit_mech *m = vit_mech_get_kind(a->kind);
            if (m && m->defaults) m->defaults(a);
            if (a->kind == VIT_ATTN_LMSA) a->qk_dim = s->qk_dim[st];
            if (span < 0) continue;
            a->mask_mode = s->mait[span].mode;
            for (int h = 0; h < c->num_heads && h < heads; h++) a->mask_size[h] = 3;
        }
    if (s->finish) s->finish(c);
}

static vit_config seed_configs[VIT_SEED_N];
static once_flag seeds_once = ONCE_FLAG_INIT;
static void seeds_build(void) {
    for (int k = 0; k < VIT_SEED_N; k++) seed_build(&vit_seeds[k], &seed_configs[k]);
}

int vit_arch_count(void) { return VIT_ARCH_N + VIT_SEED_N; }
const vit_config *vit_arch_get(int i) {
    if (i >= 0 && i < VIT_ARCH_N) return &vit_archs[i];
    if (i < 0 || i >= VIT_ARCH_N + VIT_SEED_N) return NULL;
    call_once(&seeds_once, seeds_build); /* built once, whichever thread asks first */
    return &seed_configs[i - VIT_ARCH_N];
}

const vit_config *vit_arch_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < vit_arch_count(); i++)
        if (strcmp(vit_arch_get(i)->name, name) == 0) return vit_arch_get(i);
    return NULL;
}

void vit_arch_list(char *buf, size_t n) {
    size_t used = 0;
    if (n == 0) return;
    buf[0] = 0;
    for (int i = 0; i < vit_arch_count() && used < n; i++) {
        int w = snprintf(buf + used, n - used, "%s%s", i ? ", " : "", vit_arch_get(i)->name);
        if (w < 0) break;
        used += (size_t)w;
    }
}

/* timm's pretrained tags of the built-in architectures with what differs from the base entry:
 * the head size, mean/std and crop of each tag's pretrained_cfg, copied from default_cfgs in
 * timm/models/vision_transformer.py and timm/models/deit.py (timm's _cfg defaults there: 1000
 * classes, crop 0.9, bicubic; ViT Inception mean/std, DeiT ImageNet mean/std). A tag that is not
 * here is refused rather than guessed. */
typedef struct {
    const char *arch, *tag;
    int num_classes;
    int imagenet_norm; /* 1: ImageNet mean/std, 0: Inception (0.5), 2: OpenAI CLIP */
    float crop_pct;
} vit_tag;

static const vit_tag vit_tags[] = {
    {"vit_tiny_patch16_224", "augreg_in21k_ft_in1k", 1000, 0, 0.9f},
    {"vit_tiny_patch16_224", "augreg_in21k", 21843, 0, 0.9f},
    {"vit_tiny_patch16_384", "augreg_in21k_ft_in1k", 1000, 0, 1.0f},
    {"vit_small_patch16_224", "augreg_in21k_ft_in1k", 1000, 0, 0.9f},
    {"vit_small_patch16_224", "augreg_in1k", 1000, 0, 0.9f},
    {"vit_small_patch16_224", "augreg_in21k", 21843, 0, 0.9f},
    {"vit_small_patch16_224", "dino", 0, 1, 0.9f},
    {"vit_small_patch16_384", "augreg_in21k_ft_in1k", 1000, 0, 1.0f},
    {"vit_small_patch16_384", "augreg_in1k", 1000, 0, 1.0f},
    {"vit_small_patch32_224", "augreg_in21k_ft_in1k", 1000, 0, 0.9f},
    {"vit_small_patch32_224", "augreg_in21k", 21843, 0, 0.9f},
    {"vit_base_patch16_224", "augreg2_in21k_ft_in1k", 1000, 0, 0.9f},
    {"vit_base_patch16_224", "augreg_in21k_ft_in1k", 1000, 0, 0.9f},
    {"vit_base_patch16_224", "orig_in21k_ft_in1k", 1000, 0, 0.9f},
    {"vit_base_patch16_224", "augreg_in1k", 1000, 0, 0.9f},
    {"vit_base_patch16_224", "orig_in21k", 0, 0, 0.9f},
    {"vit_base_patch16_224", "augreg_in21k", 21843, 0, 0.9f},
    {"vit_base_patch16_224", "sam_in1k", 1000, 0, 0.9f},
    {"vit_base_patch16_224", "dino", 0, 1, 0.9f},
    {"vit_base_patch16_224", "mae", 0, 1, 0.9f},
    {"vit_base_patch16_384", "augreg_in21k_ft_in1k", 1000, 0, 1.0f},
    {"vit_base_patch16_384", "orig_in21k_ft_in1k", 1000, 0, 1.0f},
    {"vit_base_patch16_384", "augreg_in1k", 1000, 0, 1.0f},
    {"vit_base_patch32_224", "augreg_in21k_ft_in1k", 1000, 0, 0.9f},
    {"vit_base_patch32_224", "augreg_in1k", 1000, 0, 0.9f},
    {"vit_base_patch32_224", "orig_in21k", 0, 0, 0.9f},
    {"vit_base_patch32_224", "augreg_in21k", 21843, 0, 0.9f},
    {"vit_base_patch32_224", "sam_in1k", 1000, 0, 0.9f},
    {"vit_base_patch32_384", "augreg_in21k_ft_in1k", 1000, 0, 1.0f},
    {"vit_base_patch32_384", "augreg_in1k", 1000, 0, 1.0f},
    {"vit_large_patch16_224", "augreg_in21k_ft_in1k", 1000, 0, 0.9f},
    {"vit_large_patch16_224", "orig_in21k", 0, 0, 0.9f},
    {"vit_large_patch16_224", "augreg_in21k", 21843, 0, 0.9f},
    {"vit_large_patch16_224", "mae", 0, 1, 0.9f},
    {"vit_large_patch16_384", "augreg_in21k_ft_in1k", 1000, 0, 1.0f},
    {"vit_large_patch32_384", "orig_in21k_ft_in1k", 1000, 0, 1.0f},
    {"deit_tiny_patch16_224", "fb_in1k", 1000, 1, 0.9f},
    {"deit_small_patch16_224", "fb_in1k", 1000, 1, 0.9f},
    {"deit_base_patch16_224", "fb_in1k", 1000, 1, 0.9f},
    {"deit_base_patch16_384", "fb_in1k", 1000, 1, 1.0f},
    {"deit_tiny_distilled_patch16_224", "fb_in1k", 1000, 1, 0.9f},
    {"deit_small_distilled_patch16_224", "fb_in1k", 1000, 1, 0.9f},
    {"deit_base_distilled_patch16_224", "fb_in1k", 1000, 1, 0.9f},
    {"deit_base_distilled_patch16_384", "fb_in1k", 1000, 1, 1.0f},
    /* timm/models/deit.py and vision_transformer.py default_cfgs of the modern ViT family */
    {"deit3_small_patch16_224", "fb_in1k", 1000, 1, 0.9f},
    {"deit3_small_patch16_224", "fb_in22k_ft_in1k", 1000, 1, 1.0f},
    {"deit3_base_patch16_224", "fb_in1k", 1000, 1, 0.9f},
    {"deit3_base_patch16_224", "fb_in22k_ft_in1k", 1000, 1, 1.0f},
    {"vit_small_patch14_dinov2", "lvd142m", 0, 1, 1.0f},
    {"vit_base_patch14_dinov2", "lvd142m", 0, 1, 1.0f},
    {"vit_small_patch14_reg4_dinov2", "lvd142m", 0, 1, 1.0f},
    {"vit_base_patch14_reg4_dinov2", "lvd142m", 0, 1, 1.0f},
    {"vit_base_patch16_clip_224", "openai", 512, 2, 0.9f},
    {"vit_base_patch16_clip_224", "laion2b", 512, 2, 1.0f},
    {"vit_base_patch16_clip_224", "laion400m_e32", 512, 2, 1.0f},
    {"vit_base_patch16_clip_224", "datacompxl", 512, 2, 1.0f},
    {"vit_base_patch16_clip_224", "dfn2b", 512, 2, 1.0f},
    {"vit_base_patch16_clip_224", "metaclip_2pt5b", 512, 2, 1.0f},
    {"vit_base_patch16_clip_224", "metaclip_400m", 512, 2, 1.0f},
    {"vit_base_patch16_clip_224", "openai_ft_in12k", 11821, 2, 0.9f},
    {"vit_base_patch16_clip_quickgelu_224", "openai", 512, 2, 0.9f},
    {"vit_base_patch16_clip_quickgelu_224", "metaclip_2pt5b", 512, 2, 1.0f},
    {"vit_base_patch16_clip_quickgelu_224", "metaclip_400m", 512, 2, 1.0f},
    {"vit_base_patch16_siglip_224", "webli", 0, 0, 0.9f},
    {"vit_base_patch16_siglip_224", "v2_webli", 0, 0, 0.9f},
    /* timm/models/swin_transformer.py default_cfgs: ImageNet mean/std; in22k heads 21841 */
    {"swin_tiny_patch4_window7_224", "ms_in1k", 1000, 1, 0.9f},
    {"swin_tiny_patch4_window7_224", "ms_in22k_ft_in1k", 1000, 1, 0.9f},
    {"swin_tiny_patch4_window7_224", "ms_in22k", 21841, 1, 0.9f},
    {"swin_small_patch4_window7_224", "ms_in22k_ft_in1k", 1000, 1, 0.9f},
    {"swin_small_patch4_window7_224", "ms_in1k", 1000, 1, 0.9f},
    {"swin_small_patch4_window7_224", "ms_in22k", 21841, 1, 0.9f},
    {"swin_base_patch4_window7_224", "ms_in22k_ft_in1k", 1000, 1, 0.9f},
    {"swin_base_patch4_window7_224", "ms_in1k", 1000, 1, 0.9f},
    {"swin_base_patch4_window7_224", "ms_in22k", 21841, 1, 0.9f},
    {"swin_base_patch4_window12_384", "ms_in22k_ft_in1k", 1000, 1, 1.0f},
    {"swin_base_patch4_window12_384", "ms_in1k", 1000, 1, 1.0f},
    {"swin_base_patch4_window12_384", "ms_in22k", 21841, 1, 1.0f},
    /* timm/models/pvt_v2.py default_cfgs: ImageNet mean/std, crop 0.9 */
    {"pvt_v2_b0", "in1k", 1000, 1, 0.9f},
    {"pvt_v2_b1", "in1k", 1000, 1, 0.9f},
    {"pvt_v2_b2", "in1k", 1000, 1, 0.9f},
    {"pvt_v2_b2_li", "in1k", 1000, 1, 0.9f},
    {"pvt_v2_b3", "in1k", 1000, 1, 0.9f},
    {"pvt_v2_b4", "in1k", 1000, 1, 0.9f},
    {"pvt_v2_b5", "in1k", 1000, 1, 0.9f},
    /* timm/models/cait.py default_cfgs (distilled ImageNet-1k training, crop 1.0) */
    {"cait_xxs24_224", "fb_dist_in1k", 1000, 1, 1.0f},
    {"cait_xxs36_224", "fb_dist_in1k", 1000, 1, 1.0f},
    {"cait_s24_224", "fb_dist_in1k", 1000, 1, 1.0f},
};
#define VIT_TAG_N ((int)(sizeof vit_tags / sizeof vit_tags[0]))

/* timm families attnscope does not run yet, by name pattern: what each needs that the engine
 * lacks. Checked in order; the first whose pattern occurs in the name wins. */
static const struct {
    const char *pattern, *family, *needs;
} vit_families_later[] = {
    {"swinv2", "Swin Transformer V2", "scaled cosine attention and a log-spaced continuous position bias"},
    {"swin_s3", "Swin S3 (AutoFormerV2)", "a different window size per stage"},
    {"beit", "BEiT", "relative position biases and LayerScale"},
    {"eva", "EVA", "rotary embeddings and SwiGLU"},
    {"xcit", "XCiT", "cross-covariance attention"},
    {"levit", "LeViT", "convolutional stages and attention biases"},
    {"twins", "Twins", "locally-grouped attention"},
    {"crossvit", "CrossViT", "two-branch cross attention"},
    {"convit", "ConViT", "gated positional attention"},
    {"pit_", "PiT", "pooling stages"},
    {"tnt_", "TNT", "nested inner transformers"},
    {"mvitv2", "MViTv2", "pooling attention"},
    {"flexivit", "FlexiViT", "resampled patch embeddings"},
    {"samvit", "SAM ViT", "windowed attention with relative positions"},
    {"dinov2", "DINOv2 beyond ViT-S/B", "only the small and base sizes are built in: describe "
     "the others with a JSON config (init_values, reg_tokens, no_embed_class)"},
    {"_reg", "ViT with registers beyond the DINOv2 ones", "a JSON config with reg_tokens (its other "
     "options may be missing)"},
    {"clip", "CLIP image towers beyond ViT-B/16", "a JSON config with pre_norm and act_layer"},
    {"siglip", "SigLIP beyond ViT-B/16 at 224", "a JSON config with global_pool \"map\" (gelu_tanh "
     "and other sizes are not built in)"},
    {"deit3", "DeiT III beyond small and base at 224", "a JSON config with init_values and "
     "no_embed_class"},
};

static const vit_tag *tag_find(const char *arch, size_t arch_len, const char *tag) {
    for (int i = 0; i < VIT_TAG_N; i++)
        if (strlen(vit_tags[i].arch) == arch_len && strncmp(vit_tags[i].arch, arch, arch_len) == 0 &&
            strcmp(vit_tags[i].tag, tag) == 0)
            return &vit_tags[i];
    return NULL;
}

/* The error for a name that is no built-in: a "did you mean", the family not supported yet, or
 * the list of known names. */
static as_status arch_unknown(const char *name, as_error *err) {
    char list[2048];
    vit_arch_list(list, sizeof list);
    for (size_t i = 0; i < sizeof vit_families_later / sizeof vit_families_later[0]; i++)
        if (strstr(name, vit_families_later[i].pattern))
            return as_fail(err, AS_ERR_UNSUPPORTED,
                           "\"%.96s\" looks like %s, which attnscope does not support yet (it needs "
                           "%s); these run: %s; or describe a ViT or Swin with a JSON model "
                           "config (docs/models.md)", name, vit_families_later[i].family,
                           vit_families_later[i].needs, list);
    const char *names[VIT_ARCH_N + VIT_SEED_N];
    for (int i = 0; i < vit_arch_count(); i++) names[i] = vit_arch_get(i)->name;
    const int near = vit_closest_name(name, names, vit_arch_count());
    if (near >= 0)
        return as_fail(err, AS_ERR_CONFIG, "unknown architecture \"%.96s\": did you mean \"%s\"?",
                       name, names[near]);
    char later[512] = "";
    size_t u = 0;
    for (size_t i = 0; i < sizeof vit_families_later / sizeof vit_families_later[0] && u < sizeof later; i++) {
        int w = snprintf(later + u, sizeof later - u, "%s%s", i ? ", " : "", vit_families_later[i].family);
        u += w > 0 ? (size_t)w : 0;
    }
    /* the long list last: a message cut at AS_ERROR_MSG_MAX loses only names --list-archs gives */
    return as_fail(err, AS_ERR_CONFIG, "unknown architecture \"%.96s\"; not supported yet: %s; or "
                   "describe a ViT or Swin with a JSON model config (docs/models.md); known (attnscope "
                   "info --list-archs): %s (and timm's pretrained tags of them, e.g. "
                   "vit_base_patch16_224.augreg_in21k)", name, later, list);
}

as_status vit_arch_resolve(const char *name, vit_config *out, as_error *err) {
    const vit_config *base = vit_arch_find(name);
    if (base) {
        *out = *base;
        return AS_OK;
    }
    const char *dot = name ? strchr(name, '.') : NULL;
    if (!name || !dot) return arch_unknown(name ? name : "", err);
    const size_t n = (size_t)(dot - name);
    char arch[64];
    snprintf(arch, sizeof arch, "%.*s", (int)(n < sizeof arch ? n : sizeof arch - 1), name);
    if (!(base = vit_arch_find(arch))) return arch_unknown(name, err);
    const vit_tag *t = tag_find(name, n, dot + 1);
    if (!t) {
        char tags[1024] = "";
        size_t u = 0;
        for (int i = 0; i < VIT_TAG_N && u < sizeof tags; i++)
            if (strcmp(vit_tags[i].arch, arch) == 0) {
                int w = snprintf(tags + u, sizeof tags - u, "%s%s", u ? ", " : "", vit_tags[i].tag);
                u += w > 0 ? (size_t)w : 0;
            }
        return as_fail(err, AS_ERR_CONFIG, "%.96s: attnscope does not know the pretrained tag "
                       "\"%.64s\" of %s, so not its classes, mean, std or crop: use one of %s, or "
                       "the checkpoint folder with its config.json", name, dot + 1, arch,
                       tags[0] ? tags : "(none)");
    }
    vit_config c = *base;
    static const float imagenet_mean[3] = IMAGENET_MEAN, imagenet_std[3] = IMAGENET_STD;
    static const float inception_mean[3] = INCEPTION_MEAN, inception_std[3] = INCEPTION_STD;
    static const float clip_mean[3] = CLIP_MEAN, clip_std[3] = CLIP_STD;
    memcpy(c.mean, t->imagenet_norm == 2 ? clip_mean : t->imagenet_norm ? imagenet_mean : inception_mean, sizeof c.mean);
    memcpy(c.std, t->imagenet_norm == 2 ? clip_std : t->imagenet_norm ? imagenet_std : inception_std, sizeof c.std);
    c.num_classes = t->num_classes;
    c.crop_pct = t->crop_pct;
    snprintf(c.name, sizeof c.name, "%s.%s", t->arch, t->tag);
    *out = c;
    return AS_OK;
}

int vit_tag_count(void) { return VIT_TAG_N; }
const char *vit_tag_name(int i, char *buf, size_t n) {
    if (i < 0 || i >= VIT_TAG_N) return NULL;
    snprintf(buf, n, "%s.%s", vit_tags[i].arch, vit_tags[i].tag);
    return buf;
}

/* Optimal string alignment distance (a transposition counts 1), for "did you mean". */
int vit_edit_distance(const char *a, const char *b) {
    enum { MAXL = 64 };
    const size_t la = strlen(a), lb = strlen(b);
    if (la >= MAXL || lb >= MAXL) return 1 << 20;
    int d[MAXL + 1][MAXL + 1];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

int vit_closest_name(const char *s, const char *const *names, int n) {
    int best = -1, bd = 1 << 20;
    for (int i = 0; i < n; i++) {
        const int dd = vit_edit_distance(s, names[i]);
        if (dd < bd) {
            bd = dd;
            best = i;
        }
    }
    /* a typo, not another word: at most 2 edits, and fewer than a third of the name */
    const int len = (int)strlen(s);
    return best >= 0 && bd <= 2 && 3 * bd <= len ? best : -1;
}

int vit_grid(const vit_config *c) { return c->n_stem > 0 ? vit_stem_side(c, c->n_stem - 1) : c->img_size / c->patch_size; }
int vit_num_patches(const vit_config *c) { return vit_grid(c) * vit_grid(c); }
int vit_num_prefix(const vit_config *c) {
    return (c->class_token ? 1 : 0) + (c->distilled ? 1 : 0) + c->reg_tokens;
}
int vit_num_tokens(const vit_config *c) { return vit_num_prefix(c) + vit_num_patches(c); }
int vit_head_dim(const vit_config *c) { return c->embed_dim / c->num_heads; }

int vit_has_keys(const vit_config *c, int l) {
    const vit_mech *m = vit_mech_of(c, l);
    vit_mech_layout lay;
    if (!m) return 0; /* an unknown kind: vit_config_validate refuses it */
    m->layout(c, l, &lay);
    return lay.src[0] != VIT_SRC_NONE;
}

/* The block's own head width D / H (a staged block's stage width and heads). */
static int block_head_dim(const vit_config *c, int l) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    return g.H > 0 ? g.D / g.H : 0;
}

int vit_qk_head_dim(const vit_config *c, int l) {
    if (!vit_has_keys(c, l)) return 0;
    const vit_mech *m = vit_mech_of(c, l);
    return m->qk_head_dim ? m->qk_head_dim(c, l) : block_head_dim(c, l); /* has keys: m is known */
}

int vit_attn_heads(const vit_config *c, int l) {
    const vit_mech *m = vit_mech_of(c, l);
    if (m && m->map_heads) return m->map_heads(c, l);
    vit_geom g;
    vit_block_geom(c, l, &g);
    return g.H;
}

int vit_any_attn(const vit_config *c, vit_attn_kind k) {
    for (int l = 0; l < c->depth && l < VIT_MAX_DEPTH; l++)
        if (c->attn[l].kind == k) return 1;
    return 0;
}

float vit_attn_scale(const vit_config *c, int l) {
    if (c->attn[l].scale > 0.0f) return c->attn[l].scale;
    const int d = vit_qk_head_dim(c, l);
    return 1.0f / sqrtf((float)(d > 0 ? d : block_head_dim(c, l)));
}

void vit_attn_describe(const vit_config *c, int l, char *buf, size_t n) {
    const vit_attn *a = &c->attn[l];
    const vit_mech *m = vit_mech_of(c, l);
    int w = snprintf(buf, n, "%s", vit_attn_name(a->kind));
    size_t u = w > 0 ? (size_t)w : 0;
    if (m && m->describe && u < n) {
        m->describe(c, l, buf + u, n - u);
        u += strlen(buf + u);
    }
    if (a->scale > 0 && u < n) snprintf(buf + u, n - u, " scale=%g", (double)a->scale);
}

/* The frame's checks of block l's attention (kind, scope, scale), then the mechanism's own. */
static as_status validate_attn(const vit_config *c, int l, as_error *err) {
    const char *n = c->name[0] ? c->name : "model";
    const vit_attn *a = &c->attn[l];
    const vit_mech *m = vit_mech_get_kind(a->kind);
    if (!m)
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d: unknown attention kind %d", n, l, (int)a->kind);
    vit_geom g;
    vit_block_geom(c, l, &g);
    if (!(m->scopes & (1u << g.scope))) {
        char ok[128] = "";
        size_t u = 0;
        for (int k = 0; k < vit_mech_count() && u < sizeof ok; k++)
            if (vit_mech_get_kind((vit_attn_kind)k)->scopes & (1u << g.scope)) {
                int w = snprintf(ok + u, sizeof ok - u, "%s%s", u ? ", " : "", vit_attn_name((vit_attn_kind)k));
                u += w > 0 ? (size_t)w : 0;
            }
        char where[64] = "";
        if (c->n_stages > 0) snprintf(where, sizeof where, " (stage %d, block %d there)", g.stage, g.j);
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d%s: %s attention cannot run in %s scope%s: "
                       "use one of %s there (\"type\" in \"attention\")", n, l, where, m->name,
                       vit_scope_name(g.scope), g.scope == VIT_SCOPE_SRA ? " (its queries and keys "
                       "live on different grids, T x T' maps, and its q/k tensors and hooks are written "
                       "for keys that are the queries' own tokens)" : "", ok);
    }
    if (!(a->scale >= 0.0f) || isinf(a->scale))
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d: scale must be a positive number, or "
                       "absent for 1/sqrt(head width)", n, l);
    if (a->scale > 0.0f && (m->flags & VIT_MECH_NO_SCALE))
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d: \"scale\" has no effect on %s (%s): "
                       "remove it", n, l, m->name, m->summary);
    return m->validate ? m->validate(c, l, &g, err) : AS_OK;
}

/* A staged model (Swin): the stages, their windows and the mechanisms in them. Each message
 * names the JSON key to change (docs/models.md, "Swin"). */
static as_status validate_swin_head(const vit_config *c, as_error *err) {
    const char *n = c->name[0] ? c->name : "model";
    if (c->class_token || c->distilled)
        return as_fail(err, AS_ERR_CONFIG, "%s: a Swin model has no class or distillation token: "
                       "remove \"class_token\" and \"distilled\"", n);
    if (c->global_pool != VIT_POOL_AVG)
        return as_fail(err, AS_ERR_CONFIG, "%s: \"global_pool\": \"%s\" needs a class token, which "
                       "Swin has not: use \"avg\" (timm's Swin averages the final tokens)", n,
                       vit_pool_name(c->global_pool));
    if (c->fc_norm)
        return as_fail(err, AS_ERR_CONFIG, "%s: \"fc_norm\": Swin normalises before pooling (its "
                       "final \"norm\"): remove the key", n);
    return AS_OK;
}

static as_status validate_blocks(const vit_config *c, as_error *err);

static as_status validate_stages(const vit_config *c, as_error *err) {
    const char *n = c->name[0] ? c->name : "model";
    if (c->family == VIT_FAMILY_CAIT) {
        as_status st = vit_cait_validate(c, err);
        return st != AS_OK ? st : validate_blocks(c, err);
    }
    if ((unsigned)c->family >= VIT_FAMILY_COUNT || c->family == VIT_FAMILY_VIT)
        return as_fail(err, AS_ERR_CONFIG, "%s: stages are given but the family is not one with "
                       "stages: set \"family\" to \"swin\", \"pvt_v2\" or \"cait\"", n);
    if (c->n_stages < 1 || c->n_stages > VIT_MAX_STAGES)
        return as_fail(err, AS_ERR_CONFIG, "%s: \"depths\" lists %d stages: give 1 to %d (one "
                       "block count per stage)", n, c->n_stages, VIT_MAX_STAGES);
    if ((unsigned)c->pad_order >= VIT_PAD_COUNT || (unsigned)c->window_clamp >= VIT_CLAMP_COUNT)
        return as_fail(err, AS_ERR_CONFIG, "%s: unknown pad_order or window_clamp", n);
    const int G = vit_grid(c);
    /* Swin's merges halve a k = s = P grid (or a stem's); PVT v2's convolutions never reach an
     * empty grid (pvt_validate checks each stage's grid against its sr_ratio with the conv
     * arithmetic) */
    if (c->family == VIT_FAMILY_SWIN && G < 1 << (c->n_stages - 1))
        return as_fail(err, AS_ERR_CONFIG, "%s: img_size %d makes a %dx%d grid (%s %d), too small for %d "
                       "merges (each halves it): use img_size >= %d, or fewer stages in \"depths\"", n,
                       c->img_size, G, G, c->n_stem ? "stem stride" : "patch_size", c->patch_size,
                       c->n_stages - 1, c->patch_size << (c->n_stages - 1));
    int total = 0;
    for (int s = 0; s < c->n_stages; s++) {
        const vit_stage *st = &c->stage[s];
        if (st->depth < 1 || st->depth > VIT_MAX_DEPTH)
            return as_fail(err, AS_ERR_CONFIG, "%s: \"depths\"[%d] = %d: each stage needs 1..%d "
                           "blocks", n, s, st->depth, VIT_MAX_DEPTH);
        total += st->depth;
        if (st->embed_dim < 1 || st->embed_dim > VIT_MAX_DIM)
            return as_fail(err, AS_ERR_CONFIG, "%s: stage %d's width %d (\"embed_dim\", doubled by "
                           "every merge) is outside 1..%d, attnscope's limit: use a smaller "
                           "embed_dim or fewer stages", n, s, st->embed_dim, VIT_MAX_DIM);
        if (c->family == VIT_FAMILY_SWIN &&
            ((s == 0) != (st->down == VIT_DOWN_NONE) || (s > 0 && st->down != c->stage[1].down) || st->down >= VIT_DOWN_COUNT ||
             (st->scope != VIT_SCOPE_WINDOW && st->scope != VIT_SCOPE_GLOBAL)))
            return as_fail(err, AS_ERR_CONFIG, "%s: stage %d is not a Swin stage (a patch merging "
                           "before every stage but the first, window attention): describe it with "
                           "the Swin keys of docs/models.md", n, s);
        if (st->num_heads < 1 || st->num_heads > VIT_MAX_DIM || st->embed_dim % st->num_heads)
            return as_fail(err, AS_ERR_CONFIG, "%s: \"num_heads\"[%d] = %d: stage %d's width %d is "
                           "not divisible by it: choose a divisor of %d", n, s, st->num_heads, s,
                           st->embed_dim, st->embed_dim);
        if (st->mlp_hidden < 1 || st->mlp_hidden > VIT_MAX_HIDDEN)
            return as_fail(err, AS_ERR_CONFIG, "%s: stage %d's MLP width %d (mlp_ratio x %d) is "
                           "outside 1..%d: change \"mlp_ratio\"", n, s, st->mlp_hidden,
                           st->embed_dim, VIT_MAX_HIDDEN);
        if (c->family == VIT_FAMILY_SWIN && (st->window < 1 || st->window > VIT_MAX_WINDOW))
            return as_fail(err, AS_ERR_CONFIG, "%s: \"window_size\" %d is outside 1..%d, attnscope's "
                           "limit: a window's maps are M^2 x M^2 per head (%d x %d at M = %d) and its "
                           "relative position table has (2M-1)^2 rows; use a window of at most %d",
                           n, st->window, VIT_MAX_WINDOW, VIT_MAX_WINDOW * VIT_MAX_WINDOW,
                           VIT_MAX_WINDOW * VIT_MAX_WINDOW, VIT_MAX_WINDOW, VIT_MAX_WINDOW);
    }
    if (total != c->depth)
        return as_fail(err, AS_ERR_CONFIG, "%s: depth %d is not the sum %d of \"depths\": give the "
                       "blocks per stage in \"depths\" only", n, c->depth, total);
    if (c->embed_dim != c->stage[0].embed_dim || c->num_heads != c->stage[0].num_heads ||
        c->mlp_hidden != c->stage[0].mlp_hidden)
        return as_fail(err, AS_ERR_CONFIG, "%s: embed_dim, num_heads and the MLP width must be "
                       "stage 0's", n);
    return validate_blocks(c, err);
}

/* Every block of a staged model: its mechanism in its scope, and its sizes. */
static as_status validate_blocks(const vit_config *c, as_error *err) {
    const char *n = c->name[0] ? c->name : "model";
    for (int l = 0; l < c->depth; l++) {
        vit_geom g;
        vit_block_geom(c, l, &g);
        as_status ast = validate_attn(c, l, err);
        if (ast != AS_OK) return ast;
        /* every size product of a block fits an int: the activations (T x MLP width) and the
         * maps of all windows of an image */
        const double maps = (double)g.problems * g.Tq * g.Tk * g.H;
        if ((double)g.ph * g.pw * g.Hm > 2e9 || maps > 2e9)
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d: a %dx%d grid of width %d (%.3g map "
                           "entries) is too large for one image: use a smaller img_size", n, l,
                           g.gh, g.gw, g.Hm, maps);
    }
    return AS_OK;
}


static as_status validate_config(const vit_config *c, as_error *err);

as_status vit_config_validate(const vit_config *c, as_error *err) {
    as_status st = validate_config(c, err);
    /* a stem's tensors take the names its config gives: none may be another tensor's */
    return st == AS_OK && c->n_stem ? vit_stem_names_check(c, err) : st;
}

static as_status validate_config(const vit_config *c, as_error *err) {
    const char *n = c->name[0] ? c->name : "model";
    if (c->img_size <= 0 || c->patch_size <= 0 || c->in_chans <= 0 || c->embed_dim <= 0 ||
        c->depth <= 0 || c->num_heads <= 0 || c->mlp_hidden <= 0 || c->num_classes < 0)
        return as_fail(err, AS_ERR_CONFIG,
                       "%s: sizes must be positive (img_size %d, patch_size %d, in_chans %d, "
                       "embed_dim %d, depth %d, num_heads %d, mlp hidden %d, num_classes %d)",
                       n, c->img_size, c->patch_size, c->in_chans, c->embed_dim, c->depth,
                       c->num_heads, c->mlp_hidden, c->num_classes);
    /* Upper limits first: every later product of sizes (tokens, 3 D, the relative table side,
     * T x T x H) then fits an int, and nothing below can overflow. */
    static const struct {
        const char *key;
        size_t off;
        int max;
    } limits[] = {
        {"img_size", offsetof(vit_config, img_size), VIT_MAX_IMG},
        {"patch_size", offsetof(vit_config, patch_size), VIT_MAX_IMG},
        {"in_chans", offsetof(vit_config, in_chans), VIT_MAX_CHANS},
        {"embed_dim", offsetof(vit_config, embed_dim), VIT_MAX_DIM},
        {"num_heads", offsetof(vit_config, num_heads), VIT_MAX_DIM},
        {"mlp_hidden", offsetof(vit_config, mlp_hidden), VIT_MAX_HIDDEN},
        {"num_classes", offsetof(vit_config, num_classes), VIT_MAX_CLASSES},
    };
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        const int v = *(const int *)(const void *)((const char *)c + limits[i].off);
        if (v > limits[i].max)
            return as_fail(err, AS_ERR_CONFIG, "%s: %s %d is over attnscope's limit of %d", n,
                           limits[i].key, v, limits[i].max);
    }
    if (c->depth > VIT_MAX_DEPTH)
        return as_fail(err, AS_ERR_CONFIG, "%s: depth %d is over the engine's limit of %d", n,
                       c->depth, VIT_MAX_DEPTH);
    if (c->n_stem) {
        as_status st = vit_stem_validate(c, c->n_stages > 0 ? c->stage[0].embed_dim : c->embed_dim, err);
        if (st != AS_OK) return st;
    }
    if (c->img_size % c->patch_size != 0 && c->patch_kernel == 0 && c->n_stem == 0)
        return as_fail(err, AS_ERR_CONFIG,
                       "%s: img_size %d is not a multiple of patch_size %d: use an input size "
                       "such as %d", n, c->img_size, c->patch_size,
                       (c->img_size / c->patch_size > 0 ? c->img_size / c->patch_size : 1) * c->patch_size);
    if ((double)c->in_chans * c->patch_size * c->patch_size > VIT_MAX_HIDDEN && c->n_stem == 0)
        return as_fail(err, AS_ERR_CONFIG, "%s: in_chans %d x patch_size %d^2 is over attnscope's "
                       "limit of %d values per patch", n, c->in_chans, c->patch_size,
                       VIT_MAX_HIDDEN);
    if (c->embed_dim % c->num_heads != 0)
        return as_fail(err, AS_ERR_CONFIG,
                       "%s: embed_dim %d is not divisible by num_heads %d: choose a head count "
                       "that divides it", n, c->embed_dim, c->num_heads);
    if (c->family == VIT_FAMILY_SWIN) {
        as_status st = validate_swin_head(c, err);
        if (st != AS_OK) return st;
    }
    if (c->family == VIT_FAMILY_PVT2 || c->patch_kernel || c->sr_linear) {
        as_status st = c->family == VIT_FAMILY_PVT2 && c->n_stages > 0 ? pvt_validate(c, err)
                     : as_fail(err, AS_ERR_CONFIG, "%s: patch_kernel and linear are PVT v2 settings: "
                               "set \"family\": \"pvt_v2\" with its stage keys, or remove them", n);
        if (st != AS_OK) return st;
    }
    if (c->distilled && !c->class_token)
        return as_fail(err, AS_ERR_CONFIG,
                       "%s: a distilled model needs a class token: set class_token true", n);
    as_status fam = vitfam_validate(c, err);
    if (fam != AS_OK) return fam;
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
    if (!(c->ln_eps <= 1.0f) || !(c->crop_pct >= VIT_MIN_CROP))
        return as_fail(err, AS_ERR_CONFIG, "%s: ln_eps must be in (0, 1] and crop_pct in [%g, 1] "
                       "(got %g, %g)", n, VIT_MIN_CROP, (double)c->ln_eps, (double)c->crop_pct);
    for (int i = 0; i < 3; i++) {
        if (!(c->std[i] >= VIT_MIN_STD && c->std[i] <= VIT_MAX_STD))
            return as_fail(err, AS_ERR_CONFIG, "%s: std[%d] must be in [%g, %g] (got %g)", n, i,
                           VIT_MIN_STD, VIT_MAX_STD, (double)c->std[i]);
        if (!(c->mean[i] >= VIT_MIN_MEAN && c->mean[i] <= VIT_MAX_MEAN))
            return as_fail(err, AS_ERR_CONFIG, "%s: mean[%d] must be in [%g, %g] (pixels are scaled "
                           "to [0, 1] first; got %g)", n, i, VIT_MIN_MEAN, VIT_MAX_MEAN,
                           (double)c->mean[i]);
    }
    if (c->family != VIT_FAMILY_VIT || c->n_stages != 0) return validate_stages(c, err);
    /* A limit that keeps every activation size in int range for BLAS calls. */
    if ((double)vit_num_tokens(c) * vit_num_tokens(c) * c->num_heads > 2e9)
        return as_fail(err, AS_ERR_CONFIG, "%s: %d tokens x %d heads is too large for one image",
                       n, vit_num_tokens(c), c->num_heads);
    for (int l = 0; l < c->depth; l++) {
        as_status st = validate_attn(c, l, err);
        if (st != AS_OK) return st;
        if ((double)vit_num_tokens(c) * vit_num_tokens(c) * vit_attn_heads(c, l) > 2e9)
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d: %d tokens x %d heads is too large "
                           "for one image", n, l, vit_num_tokens(c), vit_attn_heads(c, l));
    }
    return AS_OK;
}

/* One block's attention: the mechanism's projections, scores and map work, then the frame's
 * A v and output projection, over every row the block projects (vit_mech_rows: window slots,
 * padding included, in WINDOW scope). */
static void cost_attn(const vit_config *c, int l, vit_cost_part *o) {
    const vit_mech *m = vit_mech_of(c, l);
    vit_geom g;
    vit_block_geom(c, l, &g);
    const double D = g.D, H = g.H, T = vit_mech_rows(&g), Hd = D / H;
    m->cost(c, l, &g, o);
    vit_cost_add(o, VIT_COMP_ATTN_VALUES, 0, vit_mech_head_entries(c, l, &g) * Hd, 0);
    if (!m->has_proj || m->has_proj(&c->attn[l])) vit_cost_add(o, VIT_COMP_PROJ, D * D + D, T * D * D, T * D);
}

/* A staged model's stage s: its patch merging and blocks, over the windows each block runs in
 * (padded windows count in full, as timm computes them: q/k/v and proj over every window slot,
 * the MLP over the real tokens). The attention is the mechanism's (cost_attn); a WINDOW block
 * adds the frame's relative position bias and shift mask. */
static void cost_stage(const vit_config *c, int s, vit_cost_part *o) {
    if (c->family == VIT_FAMILY_PVT2) {
        pvt_stage_cost(c, s, o);
        return;
    }
    const vit_stage *st = &c->stage[s];
    const int first = vit_stage_first_block(c, s);
    vit_geom g;
    vit_block_geom(c, first, &g);
    const double C = g.D, T = (double)g.gh * g.gw;
    if (st->down == VIT_DOWN_MERGE) {
        /* LayerNorm(4C') then Linear(4C' -> C) without bias, on the merged grid */
        const double Cin = c->stage[s - 1].embed_dim;
        vit_cost_add(o, VIT_COMP_NORM, 2 * 4 * Cin, 0, 8 * T * 4 * Cin);
        vit_cost_add(o, VIT_COMP_DOWNSAMPLE, 4 * Cin * C, T * 4 * Cin * C, 0);
    } else if (st->down == VIT_DOWN_CONV) {
        pvt_downsample_cost(c, s, o); /* CSwin's merge: PVT v2's Conv2d(k3, s2, p1) and LayerNorm */
    }
    for (int l = first; l < first + st->depth; l++) {
        vit_block_geom(c, l, &g);
        const double H = g.H, Hm = g.Hm, maps = H * vit_mech_score_entries(&g), W = 2.0 * g.M - 1;
        vit_cost_add(o, VIT_COMP_NORM, 2 * 2 * C, 0, 2 * 8 * T * C);
        cost_attn(c, l, o);
        /* the relative position bias table and its add, the shift mask */
        if (g.scope == VIT_SCOPE_WINDOW)
            vit_cost_add(o, VIT_COMP_ATTN_SCORES, c->no_rel_pos_bias ? 0 : W * W * H, 0,
                         (c->no_rel_pos_bias ? 0 : maps) + (g.shift ? maps : 0));
        vit_cost_add(o, VIT_COMP_MLP, 2 * C * Hm + Hm + C, 2 * T * C * Hm,
                     T * Hm + T * C + 8 * T * Hm + 2 * T * C);
    }
}

static void cost_sum(vit_cost_part *p) {
    p->params_total = p->flops_total = p->macs_total = 0;
    for (int i = 0; i < VIT_COMP_COUNT; i++) {
        p->params_total += p->params[i];
        p->flops_total += p->flops[i];
        p->macs_total += p->macs[i];
    }
}

void vit_config_cost(const vit_config *c, vit_cost *out) {
    const double D = c->embed_dim, L = c->depth, Hm = c->mlp_hidden, T = vit_num_tokens(c);
    const double Np = vit_num_patches(c), K = (double)c->in_chans * c->patch_size * c->patch_size;
    const double C = c->num_classes, heads = c->distilled ? 2 : 1;
    memset(out, 0, sizeof *out);
    out->n_stages = vit_num_stages(c);
    if (c->family == VIT_FAMILY_CAIT) {
        vit_cait_cost(c, out);
    } else if (c->n_stages > 0) {
        if (c->family == VIT_FAMILY_PVT2) pvt_stem_cost(c, &out->stem);
        else if (c->n_stem) vit_stem_cost(c, &out->stem);
        else vit_cost_add(&out->stem, VIT_COMP_PATCH_EMBED, K * D + D, Np * K * D, Np * D);
        if (c->patch_norm) vit_cost_add(&out->stem, VIT_COMP_NORM, 2 * D, 0, 8 * Np * D);
        for (int s = 0; s < c->n_stages; s++) cost_stage(c, s, &out->stage[s]);
        /* final norm and average pooling over the last grid, then the classifier */
        vit_geom g;
        vit_block_geom(c, c->depth - 1, &g);
        const double Cl = g.D, Tl = (double)g.gh * g.gw;
        if (c->family != VIT_FAMILY_PVT2) vit_cost_add(&out->head, VIT_COMP_NORM, 2 * Cl, 0, 8 * Tl * Cl);
        vit_cost_add(&out->head, VIT_COMP_HEAD, C > 0 ? Cl * C + C : 0, C * Cl, Tl * Cl + C);
    } else {
        if (c->n_stem) vit_stem_cost(c, &out->stem);
        else vit_cost_add(&out->stem, VIT_COMP_PATCH_EMBED, K * D + (c->pre_norm ? 0 : D), Np * K * D, Np * D);
        const double pos = vit_pos_embed_len(c);
        vit_cost_add(&out->stem, VIT_COMP_TOKENS, vit_num_prefix(c) * D + pos * D, 0, pos * D);
        /* two norms per block plus the final norm; ~8 flops per element (mean, var, scale, shift) */
        vit_cost_add(&out->stage[0], VIT_COMP_NORM, 2 * L * 2 * D, 0, 2 * L * 8 * T * D);
        vit_cost_add(&out->head, VIT_COMP_NORM, 2 * D, 0, 8 * T * D);
        for (int l = 0; l < c->depth; l++) cost_attn(c, l, &out->stage[0]);
        /* two GEMMs, their biases, GELU (~8 flops per element) and the two residual adds */
        vit_cost_add(&out->stage[0], VIT_COMP_MLP, L * (2 * D * Hm + Hm + D), L * 2 * T * D * Hm,
                 L * (T * Hm + T * D + 8 * T * Hm + 2 * T * D));
        if (C > 0) vit_cost_add(&out->head, VIT_COMP_HEAD, heads * (D * C + C), heads * D * C, heads * C);
        vitfam_cost(c, out); /* norm_pre, LayerScale, attention pooling */
    }
    vit_cost_part *parts[VIT_MAX_STAGES + 2] = {&out->stem, &out->head};
    for (int s = 0; s < out->n_stages; s++) parts[2 + s] = &out->stage[s];
    for (int p = 0; p < 2 + out->n_stages; p++) {
        cost_sum(parts[p]);
        for (int i = 0; i < VIT_COMP_COUNT; i++) {
            out->params[i] += parts[p]->params[i];
            out->flops[i] += parts[p]->flops[i];
            out->macs[i] += parts[p]->macs[i];
        }
    }
    for (int i = 0; i < VIT_COMP_COUNT; i++) {
        out->params_total += out->params[i];
        out->flops_total += out->flops[i];
        out->macs_total += out->macs[i];
    }
}
