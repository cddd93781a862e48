/* config.c: the built-in timm architecture table, validation and closed-form cost counts. */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define IMAGENET_MEAN {0.485f, 0.456f, 0.406f}
#define IMAGENET_STD {0.229f, 0.224f, 0.225f}
#define INCEPTION_MEAN {0.5f, 0.5f, 0.5f}
#define INCEPTION_STD {0.5f, 0.5f, 0.5f}

/* timm's defaults (timm/models/vision_transformer.py and deit.py, _cfg): ViT checkpoints use
 * Inception mean/std, DeiT ImageNet mean/std; both crop 0.9 at 224 and 1.0 at 384, bicubic. */
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
};
#define VIT_ARCH_N ((int)(sizeof vit_archs / sizeof vit_archs[0]))

static const char *const vit_component_names[] = {
    [VIT_COMP_PATCH_EMBED] = "patch_embed", [VIT_COMP_TOKENS] = "tokens+pos_embed",
    [VIT_COMP_NORM] = "layernorm",          [VIT_COMP_QKV] = "attn.qkv",
    [VIT_COMP_ATTN_SCORES] = "attn.scores", [VIT_COMP_ATTN_MAPS] = "attn.maps",
    [VIT_COMP_ATTN_VALUES] = "attn.values",
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

static const char *const vit_attn_names[] = {
    [VIT_ATTN_VANILLA] = "vanilla", [VIT_ATTN_LMSA] = "lmsa", [VIT_ATTN_LSLA] = "lsla",
    [VIT_ATTN_LESS] = "less",       [VIT_ATTN_MAIT] = "mait", [VIT_ATTN_REFINER] = "refiner"};
_Static_assert(sizeof vit_attn_names / sizeof vit_attn_names[0] == VIT_ATTN_COUNT, "attn names");
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
    return (unsigned)k < VIT_ATTN_COUNT ? vit_attn_names[k] : "?";
}
const char *vit_bias_name(vit_bias_kind b) {
    return (unsigned)b < VIT_BIAS_COUNT ? vit_bias_names[b] : "?";
}
const char *vit_mask_mode_name(vit_mask_mode m) {
    return (unsigned)m < VIT_MASK_COUNT ? vit_mask_names[m] : "?";
}
int vit_attn_parse(const char *s) { return name_index(vit_attn_names, VIT_ATTN_COUNT, s); }
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

int vit_arch_count(void) { return VIT_ARCH_N; }
const vit_config *vit_arch_get(int i) { return i >= 0 && i < VIT_ARCH_N ? &vit_archs[i] : NULL; }

const vit_config *vit_arch_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < VIT_ARCH_N; i++)
        if (strcmp(vit_archs[i].name, name) == 0) return &vit_archs[i];
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

/* timm's pretrained tags of the built-in architectures with what differs from the base entry:
 * the head size, mean/std and crop of each tag's pretrained_cfg, copied from default_cfgs in
 * timm/models/vision_transformer.py and timm/models/deit.py (timm's _cfg defaults there: 1000
 * classes, crop 0.9, bicubic; ViT Inception mean/std, DeiT ImageNet mean/std). A tag that is not
 * here is refused rather than guessed. */
typedef struct {
    const char *arch, *tag;
    int num_classes;
    int imagenet_norm; /* 1: ImageNet mean/std, 0: Inception (0.5) */
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
};
#define VIT_TAG_N ((int)(sizeof vit_tags / sizeof vit_tags[0]))

/* timm families attnscope does not run yet, by name pattern: what each needs that the engine
 * lacks. Checked in order; the first whose pattern occurs in the name wins. */
static const struct {
    const char *pattern, *family, *needs;
} vit_families_later[] = {
    {"dinov2", "DINOv2", "register tokens, LayerScale and patch 14 at 518 px"},
    {"_reg", "ViT with registers", "register tokens"},
    {"clip", "CLIP image towers", "a pre-norm and QuickGELU variants"},
    {"siglip", "SigLIP", "attention pooling (global_pool \"map\")"},
    {"deit3", "DeiT III", "LayerScale and position embeddings without the class token"},
    {"swin", "Swin Transformer", "shifted windows and hierarchical stages"},
    {"cait", "CaiT", "class-attention layers and LayerScale"},
    {"pvt_v2", "PVT v2", "spatial-reduction attention and hierarchical stages"},
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
                           "%s); the ViT/DeiT family runs: %s; or describe a ViT with a JSON model "
                           "config (docs/models.md)", name, vit_families_later[i].family,
                           vit_families_later[i].needs, list);
    const char *names[VIT_ARCH_N];
    for (int i = 0; i < VIT_ARCH_N; i++) names[i] = vit_archs[i].name;
    const int near = vit_closest_name(name, names, VIT_ARCH_N);
    if (near >= 0)
        return as_fail(err, AS_ERR_CONFIG, "unknown architecture \"%.96s\": did you mean \"%s\"?",
                       name, names[near]);
    char later[512] = "";
    size_t u = 0;
    for (size_t i = 0; i < sizeof vit_families_later / sizeof vit_families_later[0] && u < sizeof later; i++) {
        int w = snprintf(later + u, sizeof later - u, "%s%s", i ? ", " : "", vit_families_later[i].family);
        u += w > 0 ? (size_t)w : 0;
    }
    return as_fail(err, AS_ERR_CONFIG, "unknown architecture \"%.96s\"; known: %s (and timm's "
                   "pretrained tags of them, e.g. vit_base_patch16_224.augreg_in21k); not supported "
                   "yet: %s; or describe a ViT with a JSON model config (docs/models.md)", name, list,
                   later);
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
    memcpy(c.mean, t->imagenet_norm ? imagenet_mean : inception_mean, sizeof c.mean);
    memcpy(c.std, t->imagenet_norm ? imagenet_std : inception_std, sizeof c.std);
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

int vit_grid(const vit_config *c) { return c->img_size / c->patch_size; }
int vit_num_patches(const vit_config *c) { return vit_grid(c) * vit_grid(c); }
int vit_num_prefix(const vit_config *c) { return (c->class_token ? 1 : 0) + (c->distilled ? 1 : 0); }
int vit_num_tokens(const vit_config *c) { return vit_num_prefix(c) + vit_num_patches(c); }
int vit_head_dim(const vit_config *c) { return c->embed_dim / c->num_heads; }

int vit_has_keys(const vit_config *c, int l) { return c->attn[l].kind != VIT_ATTN_LESS; }

int vit_qk_head_dim(const vit_config *c, int l) {
    if (!vit_has_keys(c, l)) return 0;
    if (c->n_stages > 0) { /* staged blocks run vanilla attention (vit_config_validate) */
        vit_geom g;
        vit_block_geom(c, l, &g);
        return g.D / g.H;
    }
    return c->attn[l].kind == VIT_ATTN_LMSA ? c->attn[l].qk_dim / c->num_heads : vit_head_dim(c);
}

int vit_attn_heads(const vit_config *c, int l) {
    const vit_attn *a = &c->attn[l];
    if (c->n_stages > 0) {
        vit_geom g;
        vit_block_geom(c, l, &g);
        return g.H;
    }
    return a->kind == VIT_ATTN_REFINER && a->expanded_heads > c->num_heads ? a->expanded_heads
                                                                          : c->num_heads;
}

int vit_any_attn(const vit_config *c, vit_attn_kind k) {
    for (int l = 0; l < c->depth && l < VIT_MAX_DEPTH; l++)
        if (c->attn[l].kind == k) return 1;
    return 0;
}

float vit_attn_scale(const vit_config *c, int l) {
    if (c->attn[l].scale > 0.0f) return c->attn[l].scale;
    const int d = vit_qk_head_dim(c, l);
    return 1.0f / sqrtf((float)(d > 0 ? d : vit_head_dim(c)));
}

void vit_attn_describe(const vit_config *c, int l, char *buf, size_t n) {
    const vit_attn *a = &c->attn[l];
    int w = snprintf(buf, n, "%s", vit_attn_name(a->kind));
    size_t u = w > 0 ? (size_t)w : 0;
#define PUT(...) do { if (u < n) { w = snprintf(buf + u, n - u, __VA_ARGS__); u += w > 0 ? (size_t)w : 0; } } while (0)
    switch (a->kind) {
    case VIT_ATTN_LMSA: PUT(" qk_dim=%d (%d per head)", a->qk_dim, a->qk_dim / c->num_heads); break;
    case VIT_ATTN_LSLA:
        PUT(" %s, inner %s, outer %s, %s%s", a->dynamic_scale ? "DS" : "fixed scale",
            vit_bias_name(a->inner_bias), vit_bias_name(a->outer_bias), a->value_proj ? "QXV" : "QXX",
            a->no_proj ? ", NP" : "");
        break;
    case VIT_ATTN_LESS: PUT(" (reuses the previous block's scores)"); break;
    case VIT_ATTN_MAIT:
        PUT(" R=[");
        for (int h = 0; h < c->num_heads && h < VIT_MAX_MASK_HEADS; h++) PUT("%s%d", h ? "," : "", a->mask_size[h]);
        PUT("] %s", vit_mask_mode_name(a->mask_mode));
        break;
    case VIT_ATTN_REFINER: PUT(" H'=%d k=%d", a->expanded_heads, a->kernel_size); break;
    default: break;
    }
    if (a->scale > 0) PUT(" scale=%g", (double)a->scale);
#undef PUT
}

/* The square side of the token set, or 0 when the tokens do not form an M x M window. */
static int token_window(const vit_config *c) {
    return vit_num_prefix(c) == 0 ? vit_grid(c) : 0;
}

static as_status validate_attn(const vit_config *c, int l, as_error *err) {
    const char *n = c->name[0] ? c->name : "model";
    const vit_attn *a = &c->attn[l];
    const int H = c->num_heads, G = vit_grid(c);
    if ((unsigned)a->kind >= VIT_ATTN_COUNT)
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d: unknown attention kind %d", n, l, (int)a->kind);
    if (!(a->scale >= 0.0f) || isinf(a->scale))
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d: scale must be a positive number, or "
                       "absent for 1/sqrt(head width)", n, l);
    if (a->scale > 0.0f && (a->kind == VIT_ATTN_LESS || (a->kind == VIT_ATTN_LSLA && a->dynamic_scale)))
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d: \"scale\" has no effect on %s: %s", n,
                       l, a->kind == VIT_ATTN_LESS ? "less-attention (it reuses the previous "
                       "block's scores)" : "lsla with a dynamic scale (the learnable DS replaces it)",
                       a->kind == VIT_ATTN_LESS ? "remove it" : "remove it, or set \"dynamic_scale\": "
                       "false to use it as the fixed scale");
    switch (a->kind) {
    case VIT_ATTN_LMSA:
        if (a->qk_dim < H || a->qk_dim % H != 0)
            return as_fail(err, AS_ERR_CONFIG,
                           "%s: block %d: lmsa qk_dim %d is not a positive multiple of num_heads "
                           "%d: use a multiple of %d (%d is the extreme setting, 1 per head)",
                           n, l, a->qk_dim, H, H, H);
        break;
    case VIT_ATTN_LSLA:
        if ((unsigned)a->inner_bias >= VIT_BIAS_COUNT || (unsigned)a->outer_bias >= VIT_BIAS_COUNT)
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d: unknown lsla bias kind", n, l);
        if ((a->inner_bias == VIT_BIAS_RELATIVE || a->outer_bias == VIT_BIAS_RELATIVE) &&
            !token_window(c))
            return as_fail(err, AS_ERR_CONFIG,
                           "%s: block %d: relative position biases need the %d tokens to form a "
                           "square M x M window, but %d of them are class/distillation tokens: "
                           "use \"full\" bias tables, or class_token false with global_pool "
                           "\"avg\"", n, l, vit_num_tokens(c), vit_num_prefix(c));
        break;
    case VIT_ATTN_LESS: {
        const vit_attn_kind prev = l > 0 ? c->attn[l - 1].kind : VIT_ATTN_COUNT;
        if (l == 0)
            return as_fail(err, AS_ERR_CONFIG,
                           "%s: block 0 is a less-attention block, but no vanilla block comes "
                           "before it in its stage to compute the scores it reuses: make block 0 "
                           "vanilla", n);
        if (prev == VIT_ATTN_LSLA || prev == VIT_ATTN_REFINER)
            return as_fail(err, AS_ERR_CONFIG,
                           "%s: block %d: a less-attention block transforms the previous block's "
                           "q k^T scores, but block %d is %s, which has none of that shape: put a "
                           "vanilla (or lmsa, mait, less) block before it", n, l, l - 1,
                           vit_attn_name(prev));
        /* Theta and Psi mix the entries of a row: one -inf makes the whole row NaN */
        if (prev == VIT_ATTN_MAIT && c->attn[l - 1].mask_mode == VIT_MASK_NEG_INF)
            for (int h = 0; h < H && h < VIT_MAX_MASK_HEADS; h++)
                if (c->attn[l - 1].mask_size[h])
                    return as_fail(err, AS_ERR_CONFIG,
                                   "%s: block %d: a less-attention block transforms the previous "
                                   "block's scores, but block %d is mait in \"neg_inf\" mode, whose "
                                   "masked scores are -inf (Theta and Psi would make them NaN): use "
                                   "mask_mode \"zero\" or \"soft\" there, or put a vanilla block "
                                   "between", n, l, l - 1);
        break;
    }
    case VIT_ATTN_MAIT:
        if (H > VIT_MAX_MASK_HEADS)
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d: mait masks describe at most %d "
                           "heads, the model has %d", n, l, VIT_MAX_MASK_HEADS, H);
        if ((unsigned)a->mask_mode >= VIT_MASK_COUNT)
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d: unknown mask mode", n, l);
        for (int h = 0; h < VIT_MAX_MASK_HEADS; h++) {
            const int R = a->mask_size[h];
            if (R == 0) continue;
            if (h >= H)
                return as_fail(err, AS_ERR_CONFIG, "%s: block %d: a mask for head %d, but the "
                               "model has %d heads", n, l, h, H);
            if (R % 2 == 0)
                return as_fail(err, AS_ERR_CONFIG, "%s: block %d head %d: mask size %d is even: "
                               "use an odd size (3, 5, ...) centred on the query patch", n, l, h, R);
            if (R > 2 * G - 1)
                return as_fail(err, AS_ERR_CONFIG,
                               "%s: block %d head %d: mask size %d is larger than the %dx%d patch "
                               "grid: use at most %d (every patch then sees the whole grid), or "
                               "leave the head unmasked", n, l, h, R, G, G, 2 * G - 1);
        }
        break;
    case VIT_ATTN_REFINER:
        if (a->expanded_heads < 1 || a->expanded_heads > 4096)
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d: refiner expanded_heads must be "
                           "1..4096 (got %d)", n, l, a->expanded_heads);
        if (a->kernel_size < 1 || a->kernel_size % 2 == 0 || a->kernel_size > 2 * vit_num_tokens(c) ||
            a->kernel_size > VIT_MAX_KERNEL)
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d: refiner kernel_size %d must be odd "
                           "and at most twice the token count and %d (1 is a per-head scale)", n, l,
                           a->kernel_size, VIT_MAX_KERNEL);
        break;
    default: break;
    }
    return AS_OK;
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

static as_status validate_stages(const vit_config *c, as_error *err) {
    const char *n = c->name[0] ? c->name : "model";
    if ((unsigned)c->family >= VIT_FAMILY_COUNT || c->family == VIT_FAMILY_VIT)
        return as_fail(err, AS_ERR_CONFIG, "%s: stages are given but the family is not one with "
                       "stages: set \"family\": \"swin\" (the only staged family so far)", n);
    if (c->n_stages < 1 || c->n_stages > VIT_MAX_STAGES)
        return as_fail(err, AS_ERR_CONFIG, "%s: \"depths\" lists %d stages: give 1 to %d (one "
                       "block count per stage)", n, c->n_stages, VIT_MAX_STAGES);
    if ((unsigned)c->pad_order >= VIT_PAD_COUNT || (unsigned)c->window_clamp >= VIT_CLAMP_COUNT)
        return as_fail(err, AS_ERR_CONFIG, "%s: unknown pad_order or window_clamp", n);
    const int G = c->img_size / c->patch_size;
    if (G < 1 << (c->n_stages - 1))
        return as_fail(err, AS_ERR_CONFIG, "%s: img_size %d / patch_size %d is a %dx%d grid, too "
                       "small for %d patch mergings (each halves it): use img_size >= %d, or fewer "
                       "stages in \"depths\"", n, c->img_size, c->patch_size, G, G,
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
        if ((s == 0) != (st->down == VIT_DOWN_NONE) || (st->down != VIT_DOWN_NONE && st->down != VIT_DOWN_MERGE) ||
            st->scope != VIT_SCOPE_WINDOW)
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
        if (st->window < 1 || st->window > VIT_MAX_WINDOW)
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
    for (int l = 0; l < c->depth; l++) {
        vit_geom g;
        vit_block_geom(c, l, &g);
        const vit_attn *a = &c->attn[l];
        /* window attention runs the vanilla mechanism only, until mechanisms declare scopes */
        if (g.scope == VIT_SCOPE_WINDOW && a->kind != VIT_ATTN_VANILLA)
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d (stage %d, block %d there): %s "
                           "attention cannot run in window scope yet (only vanilla does): use "
                           "\"type\": \"vanilla\" for blocks 0-%d in \"attention\"", n, l, g.stage,
                           g.j, vit_attn_name(a->kind), c->depth - 1);
        if (!(a->scale >= 0.0f) || isinf(a->scale))
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d: scale must be a positive number, or "
                           "absent for 1/sqrt(head width)", n, l);
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

as_status vit_config_validate(const vit_config *c, as_error *err) {
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
    if (c->img_size % c->patch_size != 0)
        return as_fail(err, AS_ERR_CONFIG,
                       "%s: img_size %d is not a multiple of patch_size %d: use an input size "
                       "such as %d", n, c->img_size, c->patch_size,
                       (c->img_size / c->patch_size) * c->patch_size);
    if ((double)c->in_chans * c->patch_size * c->patch_size > VIT_MAX_HIDDEN)
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

/* Closed-form counts. Each entry adds params, MACs (products and convolutions only) and the
 * remaining elementwise flops of one piece of the forward pass. */
static void cost_add(vit_cost *o, vit_component k, double params, double macs, double other) {
    o->params[k] += params;
    o->macs[k] += macs;
    o->flops[k] += 2 * macs + other;
}

/* One block's attention: projections, scores, map work, values, output projection. */
static void cost_attn(const vit_config *c, int l, vit_cost *o) {
    const vit_attn *a = &c->attn[l];
    const double D = c->embed_dim, H = c->num_heads, T = vit_num_tokens(c), Hd = D / H;
    const double bias = c->qkv_bias ? 1 : 0, maps = H * T * T, softmax = 5 * maps;
    const double W = token_window(c) ? 2.0 * token_window(c) - 1 : 0; /* relative table side */
    switch (a->kind) {
    case VIT_ATTN_LMSA: {
        const double Q = a->qk_dim;
        cost_add(o, VIT_COMP_QKV, (2 * Q + D) * (D + bias), T * D * (2 * Q + D), T * (2 * Q + D) * bias);
        cost_add(o, VIT_COMP_ATTN_SCORES, 0, T * T * Q, maps + softmax);
        break;
    }
    case VIT_ATTN_LSLA: {
        cost_add(o, VIT_COMP_QKV, D * (D + bias), T * D * D, T * D * bias);
        if (a->value_proj) cost_add(o, VIT_COMP_QKV, D * (D + bias), T * D * D, T * D * bias);
        /* q x^T, then DS (T x T, shared by the heads) or the fixed scale, then the inner bias */
        cost_add(o, VIT_COMP_ATTN_SCORES, a->dynamic_scale ? T * T : 0, T * T * D, maps + softmax);
        const vit_bias_kind b[2] = {a->inner_bias, a->outer_bias};
        for (int i = 0; i < 2; i++) {
            if (b[i] == VIT_BIAS_NONE) continue;
            const double p = b[i] == VIT_BIAS_FULL ? maps : W * W * H;
            cost_add(o, i == 0 ? VIT_COMP_ATTN_SCORES : VIT_COMP_ATTN_MAPS, p, 0, maps);
        }
        break;
    }
    case VIT_ATTN_LESS:
        cost_add(o, VIT_COMP_QKV, D * (D + bias), T * D * D, T * D * bias);
        /* Theta then Psi: two (T x T) @ (T x T) products per head */
        cost_add(o, VIT_COMP_ATTN_MAPS, 2 * T * T, 2 * H * T * T * T, 0);
        cost_add(o, VIT_COMP_ATTN_SCORES, 0, 0, softmax);
        break;
    default: {
        cost_add(o, VIT_COMP_QKV, 3 * D * (D + bias), T * D * 3 * D, T * 3 * D * bias);
        cost_add(o, VIT_COMP_ATTN_SCORES, 0, H * T * T * Hd, maps + softmax);
        if (a->kind == VIT_ATTN_MAIT) {
            double masked = 0;
            for (int h = 0; h < H && h < VIT_MAX_MASK_HEADS; h++) masked += a->mask_size[h] > 0;
            cost_add(o, VIT_COMP_ATTN_SCORES, a->mask_mode == VIT_MASK_SOFT ? H : 0, 0,
                     masked * T * T);
        } else if (a->kind == VIT_ATTN_REFINER) {
            const double E = a->expanded_heads, k = a->kernel_size;
            cost_add(o, VIT_COMP_ATTN_MAPS, E * H + E * k * k + H * E,
                     (E * H + E * k * k + H * E) * T * T, 0);
        }
        break;
    }
    }
    cost_add(o, VIT_COMP_ATTN_VALUES, 0, H * T * T * Hd, 0);
    if (!(a->kind == VIT_ATTN_LSLA && a->no_proj)) cost_add(o, VIT_COMP_PROJ, D * D + D, T * D * D, T * D);
}

void vit_config_cost(const vit_config *c, vit_cost *out) {
    const double D = c->embed_dim, L = c->depth, Hm = c->mlp_hidden, T = vit_num_tokens(c);
    const double Np = vit_num_patches(c), K = (double)c->in_chans * c->patch_size * c->patch_size;
    const double C = c->num_classes, heads = c->distilled ? 2 : 1;
    memset(out, 0, sizeof *out);
    cost_add(out, VIT_COMP_PATCH_EMBED, K * D + D, Np * K * D, Np * D);
    cost_add(out, VIT_COMP_TOKENS, vit_num_prefix(c) * D + T * D, 0, T * D);
    /* two norms per block plus the final norm; ~8 flops per element (mean, var, scale, shift) */
    cost_add(out, VIT_COMP_NORM, (2 * L + 1) * 2 * D, 0, (2 * L + 1) * 8 * T * D);
    for (int l = 0; l < c->depth; l++) cost_attn(c, l, out);
    /* two GEMMs, their biases, GELU (~8 flops per element) and the two residual adds */
    cost_add(out, VIT_COMP_MLP, L * (2 * D * Hm + Hm + D), L * 2 * T * D * Hm,
             L * (T * Hm + T * D + 8 * T * Hm + 2 * T * D));
    if (C > 0) cost_add(out, VIT_COMP_HEAD, heads * (D * C + C), heads * D * C, heads * C);
    for (int i = 0; i < VIT_COMP_COUNT; i++) {
        out->params_total += out->params[i];
        out->flops_total += out->flops[i];
        out->macs_total += out->macs[i];
    }
}
