/* model.c: checkpoint resolution (folder, file, config), strict tensor binding with shape hints,
 * dtype conversion and position-embedding resampling. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* realpath */
#include "paths.h"
#include "model.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/mech.h"
#include "../core/rng.h"
#include "../core/vitfam.h"
#include "atomic.h"
#include "../core/gemm.h"
#include "sha256.h"

/* 1 while model_config_apply_stored_json reads a config attnscope stored (a checkpoint's, a
 * trace's): settings that act nowhere are taken as they are, not refused (older versions wrote
 * them). */
static _Thread_local int g_stored_config;

char *model_read_text(const char *path, as_error *err) {
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
                as_fail(err, AS_ERR_FORMAT, "%s: over 16 MiB, not a JSON config", path);
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

/* ---- JSON config: the table of keys ---------------------------------------------------------- */

/* Every key a model config may hold is declared once here, with where it may sit, its type and
 * range, and what it does. The table drives the parsing, the "did you mean" for a key that is
 * not in it, and the key tables of docs/models.md (model_config_keys_markdown; a unit test
 * checks that the docs match). A key is used, accepted as metadata (it changes nothing
 * attnscope computes), or refused: with its name and a "did you mean", or as "not supported
 * yet" for timm options that would change the computation. */
typedef enum {
    MK_INT,    /* an integer in [lo, hi] into an int field */
    MK_BOOL,   /* true or false into an int field */
    MK_FLOAT,  /* a finite number in [lo, hi] into a float field */
    MK_VEC3,   /* three finite numbers in [lo, hi] into a float[3] field */
    MK_CHOICE, /* one of `values` ("a|b": the enum's names in order); `later`: timm's other values */
    MK_OWN,    /* read by its own code in config_from_json; `values` describes it for the docs */
    MK_FIXED,  /* a timm option attnscope runs at one value only: `values` (JSON text) or null */
    MK_META,   /* metadata: accepted, changes nothing */
} mk_type;

enum { MK_MODEL = 1, MK_PRETRAINED = 2 }; /* top level or model_args; inside pretrained_cfg */

typedef struct {
    const char *name;
    unsigned where;
    mk_type type;
    double lo, hi;
    long off; /* offsetof(vit_config, field), -1 when MK_OWN/MK_FIXED/MK_META */
    const char *values, *later;
    const char *doc;
    unsigned fam; /* the families the key applies to (MF_*); 0: every family */
} model_key;

/* Families a key applies to: keys of one family given to another are refused with the reason. */
enum { MF_VIT = 1u << VIT_FAMILY_VIT, MF_SWIN = 1u << VIT_FAMILY_SWIN, MF_PVT = 1u << VIT_FAMILY_PVT2 };
enum { MF_CAIT = 1u << VIT_FAMILY_CAIT }; /* CaiT's keys (cait_from_json) */
#define MF_ANY (MF_VIT | MF_SWIN | MF_PVT | MF_CAIT)

#define OFF(f) ((long)offsetof(vit_config, f))
#define FIXED(k, v, doc) {k, MK_MODEL, MK_FIXED, 0, 0, -1, v, NULL, doc, 0}
#define FIXED_V(k, v, doc) {k, MK_MODEL, MK_FIXED, 0, 0, -1, v, NULL, doc, MF_VIT}
#define FIXED_S(k, v, doc) {k, MK_MODEL, MK_FIXED, 0, 0, -1, v, NULL, doc, MF_SWIN}
#define META(k, w) {k, w, MK_META, 0, 0, -1, NULL, NULL, NULL, 0}
static const model_key model_keys[] = {
    {"architecture", MK_MODEL, MK_OWN, 0, 0, -1, "string", NULL,
     "a built-in name, one of timm's pretrained tags of it (`vit_small_patch16_224.dino`), or "
     "`\"custom\"`; the other keys override it", 0},
    {"arch", MK_MODEL, MK_OWN, 0, 0, -1, "string", NULL, "the same as `architecture`", 0},
    {"model_args", MK_MODEL, MK_OWN, 0, 0, -1, "object", NULL,
     "an object holding any key of this table (timm's keyword arguments); a key given here and "
     "at the top level must have the same value", 0},
    {"pretrained_cfg", MK_MODEL, MK_OWN, 0, 0, -1, "object", NULL, "the eval transform (table below)", 0},
    {"attention", MK_MODEL, MK_OWN, 0, 0, -1, "object or array", NULL, "per-block mechanisms (see below)", 0},
    {"img_size", MK_MODEL, MK_INT, 1, VIT_MAX_IMG, OFF(img_size), NULL, NULL, "input side in pixels", 0},
    {"patch_size", MK_MODEL, MK_INT, 1, VIT_MAX_IMG, OFF(patch_size), NULL, NULL, "patch side", 0},
    {"in_chans", MK_MODEL, MK_INT, 1, VIT_MAX_CHANS, OFF(in_chans), NULL, NULL, "input channels", 0},
    {"embed_dim", MK_MODEL, MK_INT, 1, VIT_MAX_DIM, OFF(embed_dim), NULL, NULL, "D", MF_VIT | MF_CAIT},
    {"embed_dim", MK_MODEL, MK_OWN, 1, VIT_MAX_DIM, -1, "integer 1..65536, or one per stage", NULL,
     "stage 0's width, doubled by every merge as in timm; or a list of the stage widths", MF_SWIN},
    {"depth", MK_MODEL, MK_INT, 1, VIT_MAX_DEPTH, OFF(depth), NULL, NULL, "blocks", MF_VIT},
    {"num_heads", MK_MODEL, MK_INT, 1, VIT_MAX_DIM, OFF(num_heads), NULL, NULL, "H, dividing D", MF_VIT | MF_CAIT},
    /* CaiT (timm's Cait keyword arguments; docs/models.md, CaiT) */
    {"depth", MK_MODEL, MK_OWN, 1, VIT_MAX_DEPTH, -1, "integer 1..255", NULL,
     "CaiT: self-attention blocks (stage 0)", MF_CAIT},
    {"depth_token_only", MK_MODEL, MK_OWN, 1, VIT_MAX_DEPTH, -1, "integer 1..255", NULL,
     "CaiT: class-attention blocks (stage 1; timm's default 2)", MF_CAIT},
    {"mlp_ratio_token_only", MK_MODEL, MK_OWN, 1.0 / 64, 64, -1, "number in [1/64, 64]", NULL,
     "CaiT: MLP ratio of the class-attention blocks (default: the base's, 4)", MF_CAIT},
    {"init_values", MK_MODEL, MK_OWN, 0, 1e6, -1, "number in (0, 1e6], or null", NULL,
     "CaiT: LayerScale's initial gamma (gamma_1, gamma_2 in every block); null: no LayerScale", MF_CAIT},
    {"talking_heads", MK_MODEL, MK_BOOL, 0, 1, OFF(talking_heads), NULL, NULL,
     "CaiT (attnscope's key): the self-attention blocks mix heads with attn.proj_l and "
     "attn.proj_w (timm's TalkingHeadAttn, default true); false: plain attention", MF_CAIT},
    {"mask_mix", MK_MODEL, MK_CHOICE, 0, 0, OFF(mask_mix), "before_mix|after_mix", NULL,
     "CaiT with MaiT blocks (attnscope's key): masks on each head's logits before proj_l "
     "(default) or on the mixed logits after it", MF_CAIT},
    {"mlp_ratio", MK_MODEL, MK_OWN, 1.0 / 64, 64, -1, "number in [1/64, 64]", NULL,
     "MLP width int(mlp_ratio x D) as timm; default 4 (the base architecture's ratio)", 0},
    {"mlp_hidden", MK_MODEL, MK_INT, 1, VIT_MAX_HIDDEN, OFF(mlp_hidden), NULL, NULL,
     "MLP width directly (with `mlp_ratio` too, they must agree)", MF_VIT},
    {"num_classes", MK_MODEL, MK_INT, 0, VIT_MAX_CLASSES, OFF(num_classes), NULL, NULL,
     "classifier outputs, 0 = no head; a checkpoint's own head size wins", 0},
    {"qkv_bias", MK_MODEL, MK_BOOL, 0, 1, OFF(qkv_bias), NULL, NULL, "bias of the q/k/v projections", 0},
    {"class_token", MK_MODEL, MK_BOOL, 0, 1, OFF(class_token), NULL, NULL, "prepend a class token", MF_VIT},
    {"distilled", MK_MODEL, MK_BOOL, 0, 1, OFF(distilled), NULL, NULL,
     "DeiT distillation token and `head_dist`", MF_VIT},
    {"global_pool", MK_MODEL, MK_CHOICE, 0, 0, OFF(global_pool), "token|avg|map", "|avgmax|max|prr",
     "pooling before the head (`map`: timm's attention pooling, `attn_pool.*`; ViT only)", 0},
    {"fc_norm", MK_MODEL, MK_BOOL, 0, 1, OFF(fc_norm), NULL, NULL,
     "final norm after pooling; null or absent: true exactly for `avg` (timm)", MF_VIT},
    {"ln_eps", MK_MODEL, MK_FLOAT, 1e-12, 1, OFF(ln_eps), NULL, NULL, "LayerNorm epsilon", 0},
    {"num_features", MK_MODEL, MK_OWN, 0, 0, -1, "integer", NULL,
     "timm's feature width; checked to equal `embed_dim` (Swin: the last stage's width)", 0},
    {"family", MK_MODEL, MK_CHOICE, 0, 0, OFF(family), "vit|swin|pvt_v2|cait", NULL,
     "the model family; a custom Swin, PVT v2 or CaiT needs it, an architecture name implies it", 0},
    {"depths", MK_MODEL, MK_OWN, 1, VIT_MAX_DEPTH, -1, "1 to 4 integers", NULL,
     "blocks per stage; a patch merging (Swin) or strided conv (PVT v2) starts every stage after the first",
     MF_SWIN | MF_PVT},
    {"num_heads", MK_MODEL, MK_OWN, 1, VIT_MAX_DIM, -1, "integers, one per stage", NULL,
     "heads per stage, each dividing that stage's width", MF_SWIN | MF_PVT},
    {"embed_dims", MK_MODEL, MK_OWN, 1, VIT_MAX_DIM, -1, "integers 1..65536, one per stage", NULL,
     "the stage widths", MF_PVT},
    {"mlp_ratios", MK_MODEL, MK_OWN, 1.0 / 64, 64, -1, "numbers in [1/64, 64], one per stage", NULL,
     "MixFFN width int(ratio x width) per stage", MF_PVT},
    {"sr_ratios", MK_MODEL, MK_OWN, 1, VIT_MAX_WINDOW, -1, "integers 1..64, one per stage", NULL,
     "spatial reduction R per stage: keys and values from a Conv2d(R x R, stride R) + LayerNorm of "
     "the grid (1: the grid itself); not with `linear`", MF_PVT},
    {"linear", MK_MODEL, MK_BOOL, 0, 1, OFF(sr_linear), NULL, NULL,
     "linear SRA (`pvt_v2_b2_li`): keys and values pooled to 7x7, 1x1 conv, LayerNorm, GELU; a "
     "ReLU after fc1", MF_PVT},
    {"patch_kernel", MK_MODEL, MK_INT, 1, VIT_MAX_IMG, OFF(patch_kernel), NULL, NULL,
     "the overlapping stem's kernel (stride `patch_size`, padding patch_kernel / 2); timm: 7", MF_PVT},
    {"conv_ln_eps", MK_MODEL, MK_FLOAT, 1e-12, 1, OFF(conv_ln_eps), NULL, NULL,
     "eps of the stem, downsample and SR LayerNorms (nn.LayerNorm: 1e-5); `ln_eps` (1e-6) is the "
     "blocks' and stage norms'", MF_PVT},
    {"attn_residual", MK_MODEL, MK_BOOL, 0, 1, OFF(attn_residual), NULL, NULL,
     "LaViT's attention residual (its Eqs. 6-7, attnscope's reading): every stage after the first "
     "adds gamma Conv1x1(Norm(DWConv2x2,s2(A))) of the previous stage's last map to its first "
     "block's scores (`stages.s.attn_residual.*`; docs/models.md, LaViT)", MF_PVT},
    {"ar_source", MK_MODEL, MK_CHOICE, 0, 0, OFF(ar_source), "scores|attn", NULL,
     "the attention residual's A: the previous stage's last pre-softmax scores (default; the "
     "paper's Eqs. 4-5 call them A) or its softmax maps", MF_PVT},
    {"ar_norm", MK_MODEL, MK_CHOICE, 0, 0, OFF(ar_norm), "layernorm|none", NULL,
     "the attention residual's Norm: a LayerNorm over each row's keys (default; the paper does not "
     "say which) or none", MF_PVT},
    {"stem", MK_MODEL, MK_OWN, 0, VIT_MAX_STEM, -1, "array of 0..6 convolution objects", NULL,
     "a convolutional stem that IS the patch embedding (Refined-ViT, ViT-LSLA's MPViT stem): "
     "objects {out, kernel, stride, padding (0), bias (true), bn (false), act (none|relu|relu6|"
     "hardswish), conv_name, bn_name} run in order, the last `out` the embedding width; "
     "`patch_size` becomes the strides' product (docs/models.md, Convolutional stems)", MF_VIT | MF_SWIN},
    {"bn_eps", MK_MODEL, MK_FLOAT, 1e-12, 1, OFF(bn_eps), NULL, NULL,
     "eps of the stem's BatchNorms and of refiner_shared blocks' (PyTorch: 1e-5)", MF_VIT | MF_SWIN},
    {"downsample", MK_MODEL, MK_OWN, 0, 0, -1, "\"merge\" or \"conv\"", NULL,
     "what starts every stage after the first: `merge`, Swin's PatchMerging (default), or `conv`, "
     "CSwin's Merge_Block (Conv2d k3 s2 p1 + LayerNorm, `layers.s.downsample.conv`/`.norm`; "
     "ViT-LSLA)", MF_SWIN},
    {"window_size", MK_MODEL, MK_OWN, 1, VIT_MAX_WINDOW, -1, "integer 1..64 (or [M, M])", NULL,
     "window side M of every stage (limit: M^2 x M^2 maps per head, (2M-1)^2 table rows)", MF_SWIN},
    {"scopes", MK_MODEL, MK_OWN, 0, 0, -1, "\"window\" or \"global\", one per stage", NULL,
     "how each stage's blocks attend: `window` (Swin's shifted windows, default) or `global` (every "
     "token of the stage's grid, no window, shift or relative table: H-MaiT's stages). With every stage "
     "global, `window_size`, `rel_pos_bias`, `pad_order` and `window_clamp` would do nothing and are "
     "refused; the config attnscope writes for such a model leaves them out", MF_SWIN},
    {"rel_pos_bias", MK_MODEL, MK_OWN, 0, 1, -1, "true/false", NULL,
     "each window block's relative position bias table (`attn.relative_position_bias_table`, "
     "default true); false: none, as ViT-LSLA, whose LSLA inner bias is that bias", MF_SWIN},
    {"patch_norm", MK_MODEL, MK_BOOL, 0, 1, OFF(patch_norm), NULL, NULL,
     "a LayerNorm after the patch embedding (`patch_embed.norm`)", MF_SWIN},
    {"pad_order", MK_MODEL, MK_CHOICE, 0, 0, OFF(pad_order), "pad_first|roll_first", NULL,
     "grids the window does not divide: `pad_first` (correct, torchvision; default) or "
     "`roll_first` (timm exactly, with its mask bug pytorch-image-models#2438)", MF_SWIN},
    {"window_clamp", MK_MODEL, MK_CHOICE, 0, 0, OFF(window_clamp), "timm|torchvision", NULL,
     "a grid no larger than the window: `timm` shrinks the window to the grid (default), "
     "`torchvision` keeps it and pads", MF_SWIN},
    FIXED_S("head_dim", "null", "a head width other than the stage width / num_heads"),
    FIXED_S("always_partition", "false", "window partition of grids smaller than the window"),
    FIXED_S("strict_img_size", "true", "inputs of other sizes"),
    FIXED_S("ape", "false", "an absolute position embedding"),
    FIXED_V("qk_norm", "false", "LayerNorm of q and k"),
    FIXED_V("scale_attn_norm", "false", "a norm inside attention"),
    FIXED_V("scale_mlp_norm", "false", "a norm inside the MLP"),
    FIXED_V("proj_bias", "true", "biases of the projections and the MLP"),
    /* the modern ViT family (core/vitfam.c) */
    {"init_values", MK_MODEL, MK_OWN, 0, 1e6, -1, "number in (0, 1e6], or null", NULL,
     "LayerScale: per-channel gammas `blocks.i.ls1.gamma`, `ls2.gamma` on both branches; null or "
     "absent: none", MF_VIT},
    /* the Refiner release's block and head (docs/models.md, "Refined-ViT as released") */
    {"adjust_ratio", MK_MODEL, MK_FLOAT, 1e-3, 1, OFF(adjust_ratio), NULL, NULL,
     "r: every block computes x += f(norm(r x)) / r on both branches (the Refiner release's 0.5); "
     "absent: 1", MF_VIT},
    {"mlp_scale", MK_MODEL, MK_FLOAT, 1e-12, 1e6, OFF(mlp_scale), NULL, NULL,
     "LayerScale on the MLP branch alone, `blocks.i.mlp.scale_channel` (D), with this initial value "
     "(the Refiner release's 1e-5); absent: none", MF_VIT},
    {"aux_head", MK_MODEL, MK_FLOAT, 1e-12, 1e6, OFF(aux_head), NULL, NULL,
     "w: logits = head(x_cls) + w max over the patch tokens of `aux_head`(x_t) after the final norm "
     "(the Refiner release's dense head, 0.5); absent: none", MF_VIT},
    {"reg_tokens", MK_MODEL, MK_INT, 0, VIT_MAX_REG, OFF(reg_tokens), NULL, NULL,
     "register tokens (`reg_token` (1, R, D)) after the class token", MF_VIT},
    {"no_embed_class", MK_MODEL, MK_BOOL, 0, 1, OFF(no_embed_class), NULL, NULL,
     "`pos_embed` covers the patches only, added before the prefix tokens are prepended", MF_VIT},
    {"pre_norm", MK_MODEL, MK_BOOL, 0, 1, OFF(pre_norm), NULL, NULL,
     "a LayerNorm `norm_pre` before the blocks; the patch embedding then has no bias (timm)", MF_VIT},
    {"act_layer", MK_MODEL, MK_CHOICE, 0, 0, OFF(act_layer), "gelu|quick_gelu",
     "gelu_tanh|relu|silu|swish|gelu_new", "the MLP activation (`quick_gelu`: x sigmoid(1.702 x))", MF_VIT},
    FIXED_V("pos_embed", "\"learn\"", "the kind of position embedding"),
    FIXED_V("final_norm", "true", "the final norm"),
    FIXED_V("pool_include_prefix", "false", "prefix tokens in avg pooling"),
    FIXED_V("dynamic_img_size", "false", "per-batch input sizes"),
    FIXED_V("dynamic_img_pad", "false", "padding to whole patches"),
    FIXED("drop_rate", "0", "dropout (training)"),
    FIXED_V("pos_drop_rate", "0", "dropout (training)"),
    FIXED_V("patch_drop_rate", "0", "patch dropout (training)"),
    FIXED("proj_drop_rate", "0", "dropout (training)"),
    FIXED("attn_drop_rate", "0", "dropout (training)"),
    FIXED("drop_path_rate", "0", "stochastic depth (training)"),
    FIXED("weight_init", "\"\"", "timm's init schemes (attnscope's own init is used)"),
    FIXED_V("fix_init", "false", "timm's init rescaling"),
    FIXED("norm_layer", "\"layernorm\"", "the norm layer"),
    FIXED_V("embed_norm_layer", "null", "a norm in the patch embedding"),
    FIXED_V("attn_layer", "\"attn\"", "the attention module (attnscope's is `attention`)"),
    FIXED("embed_layer", "null", "the patch embedding module"),
    FIXED_V("block_fn", "null", "the block module"),
    FIXED_V("mlp_layer", "null", "the MLP module"),
    META("cost", MK_MODEL), /* attnscope info --json's counts */
    META("label_names", MK_MODEL),
    META("label_descriptions", MK_MODEL),
    {"input_size", MK_PRETRAINED, MK_OWN, 1, VIT_MAX_IMG, -1, "[C, S, S], C 1..64, S 1..16384", NULL,
     "[C, S, S]: in_chans and img_size (square inputs; must agree with them when both are given)", 0},
    {"mean", MK_PRETRAINED, MK_VEC3, VIT_MIN_MEAN, VIT_MAX_MEAN, OFF(mean), NULL, NULL,
     "per channel, of pixels scaled to [0, 1]", 0},
    {"std", MK_PRETRAINED, MK_VEC3, VIT_MIN_STD, VIT_MAX_STD, OFF(std), NULL, NULL, "per channel", 0},
    {"crop_pct", MK_PRETRAINED, MK_FLOAT, VIT_MIN_CROP, 1, OFF(crop_pct), NULL, NULL,
     "resize the shorter side to floor(img_size / crop_pct), centre crop", 0},
    {"interpolation", MK_PRETRAINED, MK_CHOICE, 0, 0, OFF(interpolation), "bicubic|bilinear",
     "nearest|random", "the resize filter (PIL's)", 0},
    {"crop_mode", MK_PRETRAINED, MK_FIXED, 0, 0, -1, "\"center\"", NULL, "timm's crop mode", 0},
    {"num_classes", MK_PRETRAINED, MK_OWN, 0, VIT_MAX_CLASSES, -1, "integer 0..16777216", NULL,
     "used when the model keys give none", 0},
    META("url", MK_PRETRAINED), META("file", MK_PRETRAINED), META("state_dict", MK_PRETRAINED),
    META("hf_hub_id", MK_PRETRAINED), META("hf_hub_filename", MK_PRETRAINED),
    META("source", MK_PRETRAINED), META("architecture", MK_PRETRAINED), META("tag", MK_PRETRAINED),
    META("custom_load", MK_PRETRAINED), META("test_input_size", MK_PRETRAINED),
    META("min_input_size", MK_PRETRAINED), META("fixed_input_size", MK_PRETRAINED),
    META("test_crop_pct", MK_PRETRAINED), META("label_offset", MK_PRETRAINED),
    META("label_names", MK_PRETRAINED), META("label_descriptions", MK_PRETRAINED),
    META("pool_size", MK_PRETRAINED), META("test_pool_size", MK_PRETRAINED),
    META("first_conv", MK_PRETRAINED), META("classifier", MK_PRETRAINED),
    META("license", MK_PRETRAINED), META("description", MK_PRETRAINED),
    META("origin_url", MK_PRETRAINED), META("paper_name", MK_PRETRAINED),
    META("paper_ids", MK_PRETRAINED), META("notes", MK_PRETRAINED),
};
#undef FIXED
#undef FIXED_V
#undef FIXED_S
#undef META
#define MODEL_KEY_N ((int)(sizeof model_keys / sizeof model_keys[0]))

/* The key `name` at `where` for a model of the families in fam (MF_VIT | MF_SWIN: any). */
static const model_key *key_find_fam(const char *name, unsigned where, unsigned fam) {
    for (int i = 0; i < MODEL_KEY_N; i++)
        if ((model_keys[i].where & where) && strcmp(model_keys[i].name, name) == 0 &&
            (!model_keys[i].fam || (model_keys[i].fam & fam)))
            return &model_keys[i];
    return NULL;
}
static const model_key *key_find(const char *name, unsigned where) {
    return key_find_fam(name, where, MF_ANY);
}

/* Why a key of one family does not apply to the other, and what to do instead. */
static void key_other_family(char *msg, size_t n, const char *prefix, const char *key, unsigned fam) {
    static const struct {
        const char *key, *why;
    } swin_why[] = {
        {"depth", "Swin gives its blocks per stage: use \"depths\""},
        {"mlp_hidden", "each Swin stage's MLP is mlp_ratio x its width: use \"mlp_ratio\""},
        {"class_token", "Swin has no class token (it averages the final tokens)"},
        {"distilled", "Swin has no distillation token"},
        {"fc_norm", "Swin normalises before its average pooling (\"norm\")"},
    };
    if (fam & MF_CAIT) {
        snprintf(msg, n, "\"%s%.48s\" is not a CaiT key (timm's Cait has no such option or "
                 "attnscope fixes it: docs/models.md, CaiT): remove it", prefix, key);
    } else if (fam & MF_PVT) {
        static const struct {
            const char *key, *why;
        } pvt_why[] = {
            {"embed_dim", "give the stage widths in \"embed_dims\""},
            {"depth", "give its blocks per stage in \"depths\""},
            {"mlp_hidden", "give \"mlp_ratios\", one per stage"},
            {"class_token", "PVT v2 has no class token (it averages the final tokens)"},
        };
        const char *why = "timm's PyramidVisionTransformerV2 has no such option";
        for (size_t i = 0; i < sizeof pvt_why / sizeof pvt_why[0]; i++)
            if (strcmp(pvt_why[i].key, key) == 0) why = pvt_why[i].why;
        snprintf(msg, n, "\"%s%.48s\" is not a PVT v2 key: %s; remove it", prefix, key, why);
    } else if ((fam & MF_SWIN) && !(key_find_fam(key, MK_MODEL, MF_PVT) && !key_find_fam(key, MK_MODEL, MF_VIT))) {
        const char *why = "timm's SwinTransformer has no such option";
        for (size_t i = 0; i < sizeof swin_why / sizeof swin_why[0]; i++)
            if (strcmp(swin_why[i].key, key) == 0) why = swin_why[i].why;
        const int cait_only = key_find_fam(key, MK_MODEL, MF_CAIT) && !key_find_fam(key, MK_MODEL, MF_VIT);
        snprintf(msg, n, "\"%s%.48s\" is a %s key and this is a Swin model: %s; remove it", prefix,
                 key, cait_only ? "CaiT" : "ViT", why);
    } else if (key_find_fam(key, MK_MODEL, MF_PVT) && !key_find_fam(key, MK_MODEL, MF_SWIN | MF_VIT)) {
        snprintf(msg, n, "\"%s%.48s\" is a PVT v2 key and this is a %s model: add \"family\": "
                 "\"pvt_v2\" (or name a PVT v2 architecture) for a PVT v2, or remove it", prefix, key,
                 fam & MF_SWIN ? "Swin" : "ViT");
    } else {
        snprintf(msg, n, "\"%s%.48s\" is a Swin key and this is a ViT model: add \"family\": "
                 "\"swin\" (or name a Swin architecture) for a Swin, or remove it", prefix, key);
    }
}

/* Index of s in a "|"-separated list ("" is a valid entry), or -1. */
static int list_index(const char *list, const char *s) {
    if (!list) return -1;
    const size_t n = strlen(s);
    for (int i = 0;; i++) {
        const char *bar = strchr(list, '|');
        const size_t len = bar ? (size_t)(bar - list) : strlen(list);
        if (len == n && strncmp(list, s, n) == 0) return i;
        if (!bar) return -1;
        list = bar + 1;
    }
}

/* "\"a\", \"b\"" from "a|b". */
static void list_quoted(char *buf, size_t n, const char *list) {
    size_t u = 0;
    buf[0] = 0;
    while (list && u < n) {
        const char *bar = strchr(list, '|');
        const int len = bar ? (int)(bar - list) : (int)strlen(list);
        int w = snprintf(buf + u, n - u, "%s\"%.*s\"", u ? ", " : "", len, list);
        u += w > 0 ? (size_t)w : 0;
        list = bar ? bar + 1 : NULL;
    }
}

/* The error for a key that is not in the table at `where`: a "did you mean" from the keys of
 * that place, or where the key belongs instead. */
static void key_unknown(char *msg, size_t n, const char *prefix, const char *key, unsigned where,
                        unsigned fam) {
    const char *names[MODEL_KEY_N];
    int count = 0;
    for (int i = 0; i < MODEL_KEY_N; i++)
        if ((model_keys[i].where & where) && model_keys[i].type != MK_META &&
            (!model_keys[i].fam || (model_keys[i].fam & fam)))
            names[count++] = model_keys[i].name;
    const int near = vit_closest_name(key, names, count);
    const unsigned other = where == MK_PRETRAINED ? MK_MODEL : MK_PRETRAINED;
    if (near >= 0)
        snprintf(msg, n, "unknown key \"%s%.48s\": did you mean \"%s\"?", prefix, key, names[near]);
    else if (key_find(key, other))
        snprintf(msg, n, "\"%s%.48s\" belongs %s", prefix, key,
                 other == MK_PRETRAINED ? "inside \"pretrained_cfg\"" : "at the top level or in \"model_args\"");
    else
        snprintf(msg, n, "unknown key \"%s%.48s\": attnscope does not know it (docs/models.md lists "
                 "every key it reads)", prefix, key);
}

/* Every key of object o is in the table at `where`, for a model of family bit fam. */
static int keys_known(const cJSON *o, unsigned where, unsigned fam, const char *prefix, char *msg,
                      size_t n) {
    const cJSON *j;
    cJSON_ArrayForEach(j, o) {
        for (const cJSON *p = o->child; p != j; p = p->next)
            if (strcmp(p->string, j->string) == 0) { /* cJSON would silently use the first */
                snprintf(msg, n, "\"%s%.48s\" is given twice: keep one", prefix, j->string);
                return 0;
            }
        const model_key *k = key_find_fam(j->string, where, fam);
        if (!k && key_find(j->string, where)) {
            key_other_family(msg, n, prefix, j->string, fam);
            return 0;
        }
        if (!k) {
            key_unknown(msg, n, prefix, j->string, where, fam);
            return 0;
        }
        if (where == MK_MODEL && prefix[0] && (!strcmp(k->name, "architecture") || !strcmp(k->name, "arch") ||
            !strcmp(k->name, "model_args") || !strcmp(k->name, "pretrained_cfg"))) {
            snprintf(msg, n, "\"%s%s\" belongs at the top level, not in \"model_args\"", prefix, k->name);
            return 0;
        }
    }
    return 1;
}

/* One value of the table into c. Returns 0 with a message naming the key on error. */
static int key_apply(vit_config *c, const model_key *k, const cJSON *j, const char *prefix,
                     char *msg, size_t n) {
    void *field = k->off >= 0 ? (char *)c + k->off : NULL;
    char list[160];
    switch (k->type) {
    case MK_INT: {
        int v;
        if (!cJSON_IsNumber(j) || !as_double_to_int(j->valuedouble, (int)k->lo, (int)k->hi, &v)) {
            snprintf(msg, n, "\"%s%s\" must be an integer in %d..%d", prefix, k->name, (int)k->lo, (int)k->hi);
            return 0;
        }
        memcpy(field, &v, sizeof v);
        return 1;
    }
    case MK_BOOL: {
        if (!cJSON_IsBool(j) && !(cJSON_IsNumber(j) && (j->valuedouble == 0 || j->valuedouble == 1))) {
            snprintf(msg, n, "\"%s%s\" must be true or false", prefix, k->name);
            return 0;
        }
        const int v = cJSON_IsBool(j) ? cJSON_IsTrue(j) : j->valuedouble == 1;
        memcpy(field, &v, sizeof v);
        return 1;
    }
    case MK_FLOAT: {
        if (!cJSON_IsNumber(j) || !as_double_in(j->valuedouble, k->lo, k->hi)) {
            snprintf(msg, n, "\"%s%s\" must be a finite number in [%g, %g]", prefix, k->name, k->lo, k->hi);
            return 0;
        }
        const float v = (float)j->valuedouble;
        memcpy(field, &v, sizeof v);
        return 1;
    }
    case MK_VEC3: {
        float v[3];
        int ok = cJSON_IsArray(j) && cJSON_GetArraySize(j) == 3;
        for (int i = 0; ok && i < 3; i++) {
            const cJSON *e = cJSON_GetArrayItem(j, i);
            ok = cJSON_IsNumber(e) && as_double_in(e->valuedouble, k->lo, k->hi);
            if (ok) v[i] = (float)e->valuedouble;
        }
        if (!ok) {
            snprintf(msg, n, "\"%s%s\" must be 3 finite numbers in [%g, %g], one per channel",
                     prefix, k->name, k->lo, k->hi);
            return 0;
        }
        memcpy(field, v, sizeof v);
        return 1;
    }
    case MK_CHOICE: {
        const int i = cJSON_IsString(j) ? list_index(k->values, j->valuestring) : -1;
        if (i >= 0) {
            memcpy(field, &i, sizeof i);
            return 1;
        }
        list_quoted(list, sizeof list, k->values);
        if (cJSON_IsString(j) && list_index(k->later, j->valuestring) >= 0)
            snprintf(msg, n, "\"%s%s\": \"%.32s\" is not supported yet (attnscope implements %s)",
                     prefix, k->name, j->valuestring, list);
        else
            snprintf(msg, n, "\"%s%s\" must be one of %s", prefix, k->name, list);
        return 0;
    }
    case MK_FIXED: {
        cJSON *want = cJSON_Parse(k->values);
        const int ok = cJSON_IsNull(j) || (want && cJSON_Compare(j, want, 1));
        cJSON_Delete(want);
        if (ok) return 1;
        char *got = cJSON_PrintUnformatted(j);
        snprintf(msg, n, "\"%s%s\": %.40s is not supported yet (%s; attnscope implements only "
                 "%s %s): remove the key", prefix, k->name, got ? got : "this value", k->doc, k->name,
                 k->values);
        free(got);
        return 0;
    }
    default: return 1;
    }
}

void model_config_keys_markdown(FILE *f) {
    char list[200];
    for (int place = 0; place < 2; place++) {
        const unsigned where = place ? MK_PRETRAINED : MK_MODEL;
        fprintf(f, "| %s | value | |\n|---|---|---|\n", place ? "`pretrained_cfg` key" : "key");
        for (int i = 0; i < MODEL_KEY_N; i++) {
            const model_key *k = &model_keys[i];
            if (!(k->where & where) || k->type == MK_FIXED || k->type == MK_META) continue;
            char val[200]; /* list fits whole (-Wformat-truncation at -O2 with sanitizers) */
            switch (k->type) {
            case MK_INT: snprintf(val, sizeof val, "integer %.0f..%.0f", k->lo, k->hi); break;
            case MK_BOOL: snprintf(val, sizeof val, "true/false"); break;
            case MK_FLOAT: snprintf(val, sizeof val, "number in [%g, %g]", k->lo, k->hi); break;
            case MK_VEC3: snprintf(val, sizeof val, "3 numbers in [%g, %g]", k->lo, k->hi); break;
            case MK_CHOICE: list_quoted(list, sizeof list, k->values); snprintf(val, sizeof val, "%s", list); break;
            default: snprintf(val, sizeof val, "%s", k->values); break;
            }
            fprintf(f, "| `%s` | %s | %s%s |\n", k->name, val,
                    k->fam == MF_VIT ? "ViT: " : k->fam == MF_SWIN ? "Swin: " : k->fam == MF_PVT ? "PVT v2: "
                    : k->fam == (MF_SWIN | MF_PVT) ? "Swin, PVT v2: " : "", k->doc);
        }
        int first = 1;
        /* the options of both families, then each family's own */
        static const unsigned fams[3] = {0, MF_VIT, MF_SWIN};
        for (int g = 0; g < (place ? 1 : 3); g++) {
            fprintf(f, "%s%s accepted only at timm's default (another value is refused as \"not "
                    "supported yet\"):", g ? ".\n" : "\n", place ? "Inside `pretrained_cfg`," :
                    g == 0 ? "timm options of both families" : g == 1 ?
                    "timm's VisionTransformer options" : "timm's SwinTransformer options");
            first = 1;
            for (int i = 0; i < MODEL_KEY_N; i++)
                if ((model_keys[i].where & where) && model_keys[i].type == MK_FIXED &&
                    model_keys[i].fam == fams[g]) {
                    fprintf(f, "%s `%s` %s", first ? "" : ",", model_keys[i].name, model_keys[i].values);
                    first = 0;
                }
        }
        fprintf(f, ".\nMetadata, accepted and not used:");
        first = 1;
        for (int i = 0; i < MODEL_KEY_N; i++)
            if ((model_keys[i].where & where) && model_keys[i].type == MK_META) {
                fprintf(f, "%s `%s`", first ? "" : ",", model_keys[i].name);
                first = 0;
            }
        fprintf(f, ".\n%s", place ? "" : "\n");
    }
}

/* ---- per-block attention ("attention" key; docs/models.md) ---- */

/* Blocks named by an entry: an int, an array of ints, or a string "0-3,7". */
static int parse_blocks(const cJSON *j, int depth, unsigned char *sel, char *msg, size_t n) {
    memset(sel, 0, VIT_MAX_DEPTH);
    int bi;
    if (cJSON_IsNumber(j)) {
        if (!as_double_to_int(j->valuedouble, 0, depth - 1, &bi)) goto range;
        sel[bi] = 1;
        return 1;
    }
    if (cJSON_IsArray(j)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, j) {
            if (!cJSON_IsNumber(e) || !as_double_to_int(e->valuedouble, 0, depth - 1, &bi)) goto range;
            sel[bi] = 1;
        }
        return 1;
    }
    if (cJSON_IsString(j)) {
        const char *p = j->valuestring;
        while (*p) {
            char *end;
            long a = strtol(p, &end, 10), b = a;
            if (end == p) goto range;
            if (*end == '-') {
                p = end + 1;
                b = strtol(p, &end, 10);
                if (end == p) goto range;
            }
            if (a < 0 || b >= depth || a > b) goto range;
            for (long i = a; i <= b; i++) sel[i] = 1;
            p = *end == ',' ? end + 1 : end;
            if (*end && *end != ',') goto range;
        }
        return 1;
    }
range:
    snprintf(msg, n, "\"blocks\" must name blocks 0..%d as a number, an array or a string like "
             "\"0-3,7\"", depth - 1);
    return 0;
}

/* The keys every entry may have (the frame's); each mechanism adds its own (core/mech/). */
static const char *const frame_keys[] = {"type", "blocks", "scale"};
enum { N_FRAME_KEYS = sizeof frame_keys / sizeof frame_keys[0] };

/* Whether mechanism m takes key (frame keys included). */
static int mech_takes(const vit_mech *m, const char *key) {
    if (strcmp(key, "scale") == 0) return !(m->flags & VIT_MECH_NO_SCALE);
    for (int i = 0; i < N_FRAME_KEYS; i++)
        if (strcmp(frame_keys[i], key) == 0) return 1;
    for (int i = 0; i < m->n_keys; i++)
        if (strcmp(m->keys[i].name, key) == 0) return 1;
    return 0;
}

/* A cJSON value as core's vit_mv; arrays of numbers go into nums (room for count doubles). */
static vit_mv mv_of(const cJSON *j, double *nums) {
    vit_mv v = {.type = VIT_MV_OTHER};
    if (cJSON_IsNumber(j)) v = (vit_mv){.type = VIT_MV_NUMBER, .num = j->valuedouble};
    else if (cJSON_IsBool(j)) v = (vit_mv){.type = VIT_MV_BOOL, .boolean = cJSON_IsTrue(j)};
    else if (cJSON_IsString(j)) v = (vit_mv){.type = VIT_MV_STRING, .str = j->valuestring};
    else if (cJSON_IsArray(j)) {
        const cJSON *x;
        int k = 0, numbers = 1;
        cJSON_ArrayForEach(x, j) {
            numbers &= cJSON_IsNumber(x);
            if (cJSON_IsNumber(x)) nums[k] = x->valuedouble;
            k++;
        }
        v = (vit_mv){.type = numbers ? VIT_MV_NUMBERS : VIT_MV_ARRAY, .nums = nums, .count = k};
    }
    return v;
}

/* One entry's settings into *a: the frame's keys ("type", "scale"), then the mechanism's
 * (core/mech/<name>.c declares them). Returns 0 with a message naming the key on error. */
static int parse_attn_entry(const cJSON *e, int H, vit_attn *a, char *msg, size_t n) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "type");
    int kind = cJSON_IsString(t) ? vit_attn_parse(t->valuestring) : -1;
    if (!t) { /* a misspelt "type" is named as such, not reported as a missing type */
        static const char *const type_key[] = {"type"};
        const cJSON *j;
        cJSON_ArrayForEach(j, e) if (vit_closest_name(j->string, type_key, 1) == 0) {
            snprintf(msg, n, "unknown key \"%.48s\": did you mean \"type\"?", j->string);
            return 0;
        }
    }
    if (kind < 0) {
        char list[128] = "";
        size_t u = 0;
        for (int k = 0; k < vit_mech_count() && u < sizeof list; k++) {
            int w = snprintf(list + u, sizeof list - u, "%s%s", k ? ", " : "", vit_attn_name((vit_attn_kind)k));
            u += w > 0 ? (size_t)w : 0;
        }
        snprintf(msg, n, "\"type\" must be one of %s%s%.32s%s", list,
                 cJSON_IsString(t) ? " (got \"" : "", cJSON_IsString(t) ? t->valuestring : "",
                 cJSON_IsString(t) ? "\")" : "");
        return 0;
    }
    const vit_mech *m = vit_mech_get_kind((vit_attn_kind)kind);
    memset(a, 0, sizeof *a);
    a->kind = (vit_attn_kind)kind;
    if (m->defaults) m->defaults(a);
    /* the keys are checked before any value, so that a misspelt key is reported as such and
     * not through a default it would have changed */
    const cJSON *j;
    int count = 0, nums = 0;
    cJSON_ArrayForEach(j, e) {
        count++;
        if (cJSON_IsArray(j)) nums += cJSON_GetArraySize(j);
        if (mech_takes(m, j->string)) continue;
        char users[128] = "";
        size_t u = 0;
        for (int k = 0; k < vit_mech_count() && u < sizeof users; k++)
            if (mech_takes(vit_mech_get_kind((vit_attn_kind)k), j->string)) {
                int w = snprintf(users + u, sizeof users - u, "%s%s", u ? ", " : "", vit_attn_name((vit_attn_kind)k));
                u += w > 0 ? (size_t)w : 0;
            }
        if (users[0]) {
            snprintf(msg, n, "\"%s\" does not apply to %s attention: remove it (it is a key of %s)",
                     j->string, vit_attn_name(a->kind), users);
            return 0;
        }
        const char *names[64];
        int nn = 0;
        for (int i = 0; i < N_FRAME_KEYS; i++) names[nn++] = frame_keys[i];
        for (int k = 0; k < vit_mech_count(); k++) {
            const vit_mech *o = vit_mech_get_kind((vit_attn_kind)k);
            for (int i = 0; i < o->n_keys && nn < 64; i++) names[nn++] = o->keys[i].name;
        }
        const int near = vit_closest_name(j->string, names, nn);
        if (near >= 0)
            snprintf(msg, n, "unknown key \"%.48s\": did you mean \"%s\"?", j->string, names[near]);
        else
            snprintf(msg, n, "unknown key \"%.48s\" (docs/models.md lists each type's keys)", j->string);
        return 0;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(e, "scale"))) {
        if (!cJSON_IsNumber(j) || !as_double_in(j->valuedouble, 1e-12, 1e6)) {
            snprintf(msg, n, "\"scale\" must be a finite number in (0, 1e6]");
            return 0;
        }
        a->scale = (float)j->valuedouble;
    }
    if (!m->parse) return 1;
    /* the mechanism's keys, handed over as core's values */
    const char **keys = malloc((size_t)(count ? count : 1) * sizeof *keys);
    vit_mv *values = malloc((size_t)(count ? count : 1) * sizeof *values);
    double *buf = malloc((size_t)(nums ? nums : 1) * sizeof *buf);
    int ok = 0;
    if (!keys || !values || !buf) {
        snprintf(msg, n, "out of memory reading the attention entry");
    } else {
        int i = 0, used = 0;
        cJSON_ArrayForEach(j, e) {
            keys[i] = j->string;
            values[i] = mv_of(j, buf + used);
            if (cJSON_IsArray(j)) used += cJSON_GetArraySize(j);
            i++;
        }
        const vit_mech_entry entry = {count, keys, values};
        ok = m->parse(a, &entry, H, msg, n);
    }
    free(keys);
    free(values);
    free(buf);
    return ok;
}

/* One entry applied to c: its "blocks", or without them block `only` (-1: every block).
 * Returns 0 with a message on error. */
/* The entry is parsed with each block's own head count (a staged model's stages differ), once
 * per run of blocks with the same count. */
static int apply_attn_entry(vit_config *c, const cJSON *e, int only, char *msg, size_t n) {
    unsigned char sel[VIT_MAX_DEPTH];
    vit_attn a;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "blocks");
    if (b && !parse_blocks(b, c->depth, sel, msg, n)) return 0;
    int parsed_H = 0;
    for (int l = 0; l < c->depth; l++) {
        if (!(b ? sel[l] : only < 0 || l == only)) continue;
        vit_geom g;
        vit_block_geom(c, l, &g);
        if (g.H != parsed_H) {
            if (!parse_attn_entry(e, g.H, &a, msg, n)) {
                if (c->n_stages > 0) { /* name the stage whose head count the entry met */
                    char m[200];
                    snprintf(m, sizeof m, "%s", msg);
                    snprintf(msg, n, "stage %d (%d heads): %.199s", g.stage, g.H, m);
                }
                return 0;
            }
            parsed_H = g.H;
        }
        c->attn[l] = a;
    }
    if (!parsed_H) return parse_attn_entry(e, c->num_heads, &a, msg, n); /* no block: still checked */
    return 1;
}

/* "attention": one object for every block, an array of depth objects, or an array of objects
 * with "blocks" (later entries win). Returns 0 with a message on error. */
static int apply_attention(vit_config *c, const cJSON *att, char *msg, size_t n) {
    char m[256];
    if (c->depth < 1 || c->depth > VIT_MAX_DEPTH || c->num_heads < 1) {
        snprintf(msg, n, "\"attention\" needs a valid depth and num_heads first");
        return 0;
    }
    if (cJSON_IsObject(att)) {
        if (apply_attn_entry(c, att, -1, m, sizeof m)) return 1;
        snprintf(msg, n, "attention: %s", m);
        return 0;
    }
    if (!cJSON_IsArray(att)) {
        snprintf(msg, n, "\"attention\" must be an object or an array of objects");
        return 0;
    }
    const int count = cJSON_GetArraySize(att);
    int i = 0, with_blocks = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, att) {
        if (!cJSON_IsObject(e)) {
            snprintf(msg, n, "attention[%d]: not an object", i);
            return 0;
        }
        const int b = cJSON_GetObjectItemCaseSensitive(e, "blocks") != NULL;
        if (with_blocks < 0) with_blocks = b;
        if (b != with_blocks) {
            snprintf(msg, n, "attention[%d]: give \"blocks\" in every entry or in none (then one "
                     "entry per block)", i);
            return 0;
        }
        if (!b && count != c->depth) {
            snprintf(msg, n, "\"attention\" has %d entries without \"blocks\"; the model has %d "
                     "blocks: give one per block, or say which with \"blocks\"", count, c->depth);
            return 0;
        }
        if (!apply_attn_entry(c, e, i, m, sizeof m)) {
            snprintf(msg, n, "attention[%d]: %s", i, m);
            return 0;
        }
        i++;
    }
    return 1;
}

static void json_num(vit_mech_writer *w, const char *key, double v) { cJSON_AddNumberToObject(w->ctx, key, v); }
static void json_bool(vit_mech_writer *w, const char *key, int v) { cJSON_AddBoolToObject(w->ctx, key, v); }
static void json_str(vit_mech_writer *w, const char *key, const char *v) { cJSON_AddStringToObject(w->ctx, key, v); }
static void json_nums(vit_mech_writer *w, const char *key, const double *v, int n) {
    cJSON *arr = cJSON_AddArrayToObject(w->ctx, key);
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(v[i]));
}
static void json_floats(vit_mech_writer *w, const char *key, const float *v, int n) {
    cJSON *arr = cJSON_AddArrayToObject(w->ctx, key);
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(v[i]));
}

static cJSON *attention_to_json(const vit_config *c) {
    cJSON *arr = cJSON_CreateArray();
    for (int l = 0; l < c->depth; l++) {
        const vit_attn *a = &c->attn[l];
        const vit_mech *m = vit_mech_of(c, l);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, e);
        cJSON_AddStringToObject(e, "type", vit_attn_name(a->kind));
        if (a->scale > 0) cJSON_AddNumberToObject(e, "scale", a->scale);
        vit_mech_writer w = {.ctx = e, .num = json_num, .floats = json_floats, .boolean = json_bool, .str = json_str, .nums = json_nums};
        if (m && m->write) m->write(c, l, &w);
    }
    return arr;
}

/* A custom model starts from timm's VisionTransformer defaults. */
static const vit_config custom_defaults = {
    .name = "custom", .img_size = 224, .patch_size = 16, .in_chans = 3, .embed_dim = 768,
    .depth = 12, .num_heads = 12, .mlp_hidden = 3072, .num_classes = 1000, .qkv_bias = 1,
    .class_token = 1, .global_pool = VIT_POOL_TOKEN, .ln_eps = 1e-6f,
    .mean = {0.485f, 0.456f, 0.406f}, .std = {0.229f, 0.224f, 0.225f}, .crop_pct = 0.9f,
    .interpolation = VIT_INTERP_BICUBIC};

/* The value of a model key: from model_args or the top level (equal when both are given). */
static const cJSON *model_value(const cJSON *root, const cJSON *ma, const char *key) {
    const cJSON *j = ma ? cJSON_GetObjectItemCaseSensitive(ma, key) : NULL;
    return j ? j : cJSON_GetObjectItemCaseSensitive(root, key);
}

static int vit_mlp_from_json(vit_config *c, const cJSON *root, const cJSON *ma, int base_dim,
                             int base_hidden, char *msg, size_t n);
static int pretrained_from_json(vit_config *c, const cJSON *root, const cJSON *ma, const cJSON *pc,
                                char *msg, size_t n);

/* A JSON array of 1..max integers in [lo, hi] into v; the count, or 0 with a message. */
static int int_list(const cJSON *j, const char *key, int max, int lo, int hi, int *v, char *msg, size_t n) {
    int count = 0;
    const cJSON *e;
    if (cJSON_IsArray(j) && cJSON_GetArraySize(j) >= 1 && cJSON_GetArraySize(j) <= max)
        cJSON_ArrayForEach(e, j) {
            if (!cJSON_IsNumber(e) || !as_double_to_int(e->valuedouble, lo, hi, &v[count])) break;
            count++;
        }
    if (count >= 1 && count == cJSON_GetArraySize(j)) return count;
    snprintf(msg, n, "\"%s\" must be an array of 1 to %d integers in %d..%d, one per stage", key,
             max, lo, hi);
    return 0;
}

/* Swin's stage keys into c: depths, num_heads, window_size and mlp_ratio, with the stages rebuilt
 * from embed_dim, which doubles at every merge. What is not given keeps c's (the architecture's
 * or timm's defaults); without mlp_ratio the MLP keeps the base's ratio (base_hidden / base_dim,
 * 4 for every Swin), so it follows embed_dim. */
static int swin_from_json(vit_config *c, const cJSON *root, const cJSON *ma, int base_dim,
                          int base_hidden, char *msg, size_t n) {
    int ns = c->n_stages, depths[VIT_MAX_STAGES], heads[VIT_MAX_STAGES], M = c->stage[0].window;
    vit_down down = c->n_stages > 1 ? c->stage[1].down : VIT_DOWN_MERGE; /* the base's */
    vit_scope scope_of[VIT_MAX_STAGES]; /* the base's stage scopes, kept unless "scopes" says */
    for (int s = 0; s < VIT_MAX_STAGES; s++) scope_of[s] = s < c->n_stages ? c->stage[s].scope : VIT_SCOPE_WINDOW;
    const cJSON *jrpb = model_value(root, ma, "rel_pos_bias");
    if (jrpb && !cJSON_IsNull(jrpb)) {
        if (!cJSON_IsBool(jrpb)) {
            snprintf(msg, n, "\"rel_pos_bias\" must be true (Swin's relative position bias in every window "
                     "block) or false (none)");
            return 0;
        }
        c->no_rel_pos_bias = !cJSON_IsTrue(jrpb);
    }
    const cJSON *jdown = model_value(root, ma, "downsample");
    if (jdown && !cJSON_IsNull(jdown)) {
        const int d = cJSON_IsString(jdown) ? list_index("merge|conv", jdown->valuestring) : -1;
        if (d < 0) {
            snprintf(msg, n, "\"downsample\" must be \"merge\" (Swin's PatchMerging) or \"conv\" "
                     "(CSwin's Merge_Block: Conv2d k3 s2 p1 + LayerNorm)");
            return 0;
        }
        down = d ? VIT_DOWN_CONV : VIT_DOWN_MERGE;
    }
    const int jdown_given = jdown && !cJSON_IsNull(jdown);
    for (int s = 0; s < ns; s++) {
        depths[s] = c->stage[s].depth;
        heads[s] = c->stage[s].num_heads;
    }
    const cJSON *jd = model_value(root, ma, "depths"), *jh = model_value(root, ma, "num_heads");
    const cJSON *jw = model_value(root, ma, "window_size"), *jr = model_value(root, ma, "mlp_ratio");
    const cJSON *nf = model_value(root, ma, "num_features");
    if (jd && !cJSON_IsNull(jd) && !(ns = int_list(jd, "depths", VIT_MAX_STAGES, 1, VIT_MAX_DEPTH, depths, msg, n)))
        return 0;
    if (jh && !cJSON_IsNull(jh)) {
        int nh = int_list(jh, "num_heads", VIT_MAX_STAGES, 1, VIT_MAX_DIM, heads, msg, n);
        if (!nh) return 0;
        if (nh != ns) {
            snprintf(msg, n, "\"num_heads\" has %d entries and \"depths\" %d: give one head count "
                     "per stage", nh, ns);
            return 0;
        }
    } else if (ns != c->n_stages) {
        snprintf(msg, n, "\"depths\" gives %d stages: give \"num_heads\" too, one per stage", ns);
        return 0;
    }
    if (jw && !cJSON_IsNull(jw)) {
        int w[2] = {0, 0}, ok = 0;
        if (cJSON_IsNumber(jw)) ok = as_double_to_int(jw->valuedouble, 1, VIT_MAX_IMG, &w[0]);
        else if (cJSON_IsArray(jw) && cJSON_GetArraySize(jw) == 2)
            ok = cJSON_IsNumber(cJSON_GetArrayItem(jw, 0)) && cJSON_IsNumber(cJSON_GetArrayItem(jw, 1)) &&
                 as_double_to_int(cJSON_GetArrayItem(jw, 0)->valuedouble, 1, VIT_MAX_IMG, &w[0]) &&
                 as_double_to_int(cJSON_GetArrayItem(jw, 1)->valuedouble, 1, VIT_MAX_IMG, &w[1]) &&
                 w[0] == w[1];
        if (!ok) {
            snprintf(msg, n, "\"window_size\" must be an integer 1..%d (attnscope's limit), or [M, M]: "
                     "only square windows", VIT_MAX_WINDOW);
            return 0;
        }
        M = w[0];
    }
    const model_key *rk = key_find("mlp_ratio", MK_MODEL);
    const int has_ratio = jr && !cJSON_IsNull(jr);
    if (has_ratio && (!cJSON_IsNumber(jr) || !as_double_in(jr->valuedouble, rk->lo, rk->hi))) {
        snprintf(msg, n, "\"mlp_ratio\" must be a finite number in [%g, %g]", rk->lo, rk->hi);
        return 0;
    }
    /* stage widths: embed_dim doubled at every merge, a list of widths, or the base's */
    long long widths[VIT_MAX_STAGES];
    const cJSON *je = model_value(root, ma, "embed_dim");
    int ne = 0, wl[VIT_MAX_STAGES];
    if (je && !cJSON_IsNull(je) && cJSON_IsArray(je)) {
        if (!(ne = int_list(je, "embed_dim", VIT_MAX_STAGES, 1, VIT_MAX_DIM, wl, msg, n))) return 0;
        if (ne != ns) {
            snprintf(msg, n, "\"embed_dim\" lists %d widths and \"depths\" %d stages: give one width "
                     "per stage, or one number (doubled by every merge)", ne, ns);
            return 0;
        }
        for (int s = 0; s < ns; s++) widths[s] = wl[s];
    } else if (je && !cJSON_IsNull(je)) {
        int e0;
        if (!cJSON_IsNumber(je) || !as_double_to_int(je->valuedouble, 1, VIT_MAX_DIM, &e0)) {
            snprintf(msg, n, "\"embed_dim\" must be an integer in 1..%d, or a list of one per stage",
                     VIT_MAX_DIM);
            return 0;
        }
        for (int s = 0; s < ns; s++) widths[s] = (long long)e0 << s;
    } else {
        for (int s = 0; s < ns; s++)
            widths[s] = ns == c->n_stages ? c->stage[s].embed_dim : (long long)c->stage[0].embed_dim << s;
    }
    if (base_dim < 1) {
        snprintf(msg, n, "\"embed_dim\" must be an integer in 1..%d", VIT_MAX_DIM);
        return 0;
    }
    int depth = 0;
    for (int s = 0; s < ns; s++) {
        vit_stage *st = &c->stage[s];
        const long long C = widths[s];
        const double w = has_ratio ? floor(jr->valuedouble * (double)C) : (double)base_hidden * (double)C / base_dim;
        int width;
        if (!as_double_to_int(floor(w), 1, VIT_MAX_HIDDEN, &width)) {
            snprintf(msg, n, "\"mlp_ratio\" x stage %d's width %lld gives an MLP width outside 1..%d",
                     s, C, VIT_MAX_HIDDEN);
            return 0;
        }
        *st = (vit_stage){.depth = depths[s], .embed_dim = (int)(C < INT_MAX ? C : INT_MAX),
                          .num_heads = heads[s], .mlp_hidden = width, .scope = VIT_SCOPE_WINDOW,
                          .window = M, .down = s ? down : VIT_DOWN_NONE};
        depth += depths[s];
    }
    for (int s = ns; s < VIT_MAX_STAGES; s++) memset(&c->stage[s], 0, sizeof c->stage[s]);
    const cJSON *jsc = model_value(root, ma, "scopes");
    if (jsc && !cJSON_IsNull(jsc)) {
        const cJSON *e;
        int k = 0, ok = cJSON_IsArray(jsc) && cJSON_GetArraySize(jsc) == ns;
        cJSON_ArrayForEach(e, jsc) {
            if (!ok || k >= ns) break;
            const int sc = cJSON_IsString(e) ? list_index("window|global", e->valuestring) : -1;
            ok = sc >= 0;
            if (ok) c->stage[k++].scope = sc ? VIT_SCOPE_GLOBAL : VIT_SCOPE_WINDOW;
        }
        if (!ok) {
            snprintf(msg, n, "\"scopes\" must list \"window\" or \"global\" for each of the %d stages", ns);
            return 0;
        }
    } else {
        for (int s = 0; s < ns; s++) c->stage[s].scope = scope_of[s];
    }
    if (jdown_given && ns == 1) {
        snprintf(msg, n, "\"downsample\" is what starts every stage after the first and this Swin has one "
                 "stage: remove it, or give more stages in \"depths\"");
        return 0;
    }
    c->n_stages = ns;
    c->depth = depth;
    c->embed_dim = c->stage[0].embed_dim;
    c->num_heads = heads[0];
    c->mlp_hidden = c->stage[0].mlp_hidden;
    const long long last = widths[ns - 1];
    if (nf && !cJSON_IsNull(nf) && !(cJSON_IsNumber(nf) && nf->valuedouble == (double)last)) {
        snprintf(msg, n, "\"num_features\" must equal the last stage's width %lld (timm's feature "
                 "width)", last);
        return 0;
    }
    int windows = g_stored_config; /* keys of the windows: nothing to act on when every stage is
                                      global (read as they are from stored configs: older
                                      versions wrote them for every Swin) */
    for (int s = 0; s < ns; s++) windows += c->stage[s].scope == VIT_SCOPE_WINDOW;
    static const char *const window_keys[] = {"window_size", "rel_pos_bias", "pad_order", "window_clamp"};
    for (size_t i = 0; !windows && i < sizeof window_keys / sizeof window_keys[0]; i++) {
        const cJSON *j = model_value(root, ma, window_keys[i]);
        if (j && !cJSON_IsNull(j)) {
            snprintf(msg, n, "\"%s\" has no effect: every stage is global (\"scopes\"), with no window, "
                     "shift or relative table; remove it", window_keys[i]);
            return 0;
        }
    }
    return 1;
}

/* PVT v2's stage keys into c: depths, embed_dims, num_heads, mlp_ratios, sr_ratios (timm's
 * PyramidVisionTransformerV2 keyword arguments), one entry per stage; what is not given keeps the
 * base's (the architecture's, or timm's defaults), and a list of another stage count needs the
 * others too. */
static int pvt_from_json(vit_config *c, const cJSON *root, const cJSON *ma, char *msg, size_t n) {
    int ns = c->n_stages, v[5][VIT_MAX_STAGES];
    double ratios[VIT_MAX_STAGES];
    static const char *const keys[5] = {"depths", "embed_dims", "num_heads", "sr_ratios", "mlp_ratios"};
    static const int hi[4] = {VIT_MAX_DEPTH, VIT_MAX_DIM, VIT_MAX_DIM, VIT_MAX_WINDOW};
    for (int s = 0; s < ns; s++) {
        v[0][s] = c->stage[s].depth;
        v[1][s] = c->stage[s].embed_dim;
        v[2][s] = c->stage[s].num_heads;
        v[3][s] = c->stage[s].sr_ratio;
        ratios[s] = (double)c->stage[s].mlp_hidden / c->stage[s].embed_dim;
    }
    const cJSON *one = model_value(root, ma, "mlp_ratio");
    if (one && !cJSON_IsNull(one)) {
        snprintf(msg, n, "\"mlp_ratio\": PVT v2 has one MLP ratio per stage: give \"mlp_ratios\"");
        return 0;
    }
    static const char *const ar_keys[2] = {"ar_source", "ar_norm"};
    for (int k = 0; k < 2 && !c->attn_residual; k++) {
        const cJSON *j = model_value(root, ma, ar_keys[k]);
        if (j && !cJSON_IsNull(j)) {
            snprintf(msg, n, "\"%s\" has no effect without \"attn_residual\": true: remove it, or turn "
                     "the attention residual on", ar_keys[k]);
            return 0;
        }
    }
    const cJSON *jsr = model_value(root, ma, "sr_ratios");
    if (c->sr_linear && jsr && !cJSON_IsNull(jsr)) {
        snprintf(msg, n, "\"sr_ratios\" has no effect with \"linear\": true (the keys are pooled to "
                 "%dx%d in every stage): remove it", VIT_SR_POOL, VIT_SR_POOL);
        return 0;
    }
    int given[5] = {0};
    for (int k = 0; k < 5; k++) {
        const cJSON *j = model_value(root, ma, keys[k]);
        if (!j || cJSON_IsNull(j)) continue;
        int cnt = 0;
        if (k < 4) {
            if (!(cnt = int_list(j, keys[k], VIT_MAX_STAGES, 1, hi[k], v[k], msg, n))) return 0;
        } else {
            const model_key *rk = key_find("mlp_ratios", MK_MODEL);
            const cJSON *e;
            int ok = cJSON_IsArray(j) && cJSON_GetArraySize(j) >= 1 && cJSON_GetArraySize(j) <= VIT_MAX_STAGES;
            cJSON_ArrayForEach(e, j) {
                if (!ok) break;
                ok = cJSON_IsNumber(e) && as_double_in(e->valuedouble, rk->lo, rk->hi);
                if (ok) ratios[cnt++] = e->valuedouble;
            }
            if (!ok) {
                snprintf(msg, n, "\"mlp_ratios\" must be an array of 1 to %d numbers in [%g, %g], one "
                         "per stage", VIT_MAX_STAGES, rk->lo, rk->hi);
                return 0;
            }
        }
        given[k] = cnt;
    }
    if (given[0]) ns = given[0];
    for (int k = 1; k < 5; k++)
        if ((given[k] && given[k] != ns) || (!given[k] && ns != c->n_stages && !(k == 3 && c->sr_linear))) {
            snprintf(msg, n, "\"%s\" %s and \"depths\" %d stages: give one entry per stage", keys[k],
                     given[k] ? "has another count" : "is not given", ns);
            return 0;
        }
    int depth = 0;
    for (int s = 0; s < ns; s++) {
        int width;
        if (!as_double_to_int(floor(ratios[s] * v[1][s]), 1, VIT_MAX_HIDDEN, &width)) {
            snprintf(msg, n, "\"mlp_ratios\"[%d] x width %d gives an MLP width outside 1..%d", s, v[1][s],
                     VIT_MAX_HIDDEN);
            return 0;
        }
        c->stage[s] = (vit_stage){.depth = v[0][s], .embed_dim = v[1][s], .num_heads = v[2][s],
                                  .mlp_hidden = width, .scope = VIT_SCOPE_SRA,
                                  .down = s ? VIT_DOWN_CONV : VIT_DOWN_NONE,
                                  .sr_ratio = c->sr_linear && !given[3] && s >= c->n_stages ? 1 : v[3][s]};
        depth += v[0][s];
    }
    for (int s = ns; s < VIT_MAX_STAGES; s++) memset(&c->stage[s], 0, sizeof c->stage[s]);
    c->n_stages = ns;
    c->depth = depth;
    c->embed_dim = c->stage[0].embed_dim;
    c->num_heads = c->stage[0].num_heads;
    c->mlp_hidden = c->stage[0].mlp_hidden;
    const cJSON *nf = model_value(root, ma, "num_features");
    if (nf && !cJSON_IsNull(nf) && !(cJSON_IsNumber(nf) && nf->valuedouble == (double)v[1][ns - 1])) {
        snprintf(msg, n, "\"num_features\" must equal the last stage's width %d (timm's feature width)",
                 v[1][ns - 1]);
        return 0;
    }
    return 1;
}

/* A number key in [lo, hi] into *v (left as it is when absent or null); 0 with a message. */
static int json_number(const cJSON *root, const cJSON *ma, const char *key, double lo, double hi, double *v,
                       char *msg, size_t n) {
    const cJSON *j = model_value(root, ma, key);
    if (!j || cJSON_IsNull(j)) return 1;
    if (!cJSON_IsNumber(j) || !as_double_in(j->valuedouble, lo, hi)) {
        snprintf(msg, n, "\"%s\" must be a finite number in [%g, %g]", key, lo, hi);
        return 0;
    }
    *v = j->valuedouble;
    return 1;
}

/* CaiT's stage keys into c: depth (self-attention blocks), depth_token_only, mlp_ratio and
 * mlp_ratio_token_only, with both stages rebuilt from embed_dim and num_heads. What is not given
 * keeps the base's (the architecture's, or cait_xxs24_224 for a custom model). */
static int cait_from_json(vit_config *c, const cJSON *root, const cJSON *ma, int base_dim, int base_hidden,
                          char *msg, size_t n) {
    double d0 = c->stage[0].depth, d1 = c->stage[1].depth;
    double r0 = (double)base_hidden / base_dim, r1 = (double)c->stage[1].mlp_hidden / base_dim;
    if (!json_number(root, ma, "depth", 1, VIT_MAX_DEPTH - 1, &d0, msg, n) ||
        !json_number(root, ma, "depth_token_only", 1, VIT_MAX_DEPTH - 1, &d1, msg, n) ||
        !json_number(root, ma, "mlp_ratio", 1.0 / 64, 64, &r0, msg, n) ||
        !json_number(root, ma, "mlp_ratio_token_only", 1.0 / 64, 64, &r1, msg, n))
        return 0;
    if (d0 != floor(d0) || d1 != floor(d1) || d0 + d1 > VIT_MAX_DEPTH) {
        snprintf(msg, n, "\"depth\" and \"depth_token_only\" must be integers adding up to at most %d",
                 VIT_MAX_DEPTH);
        return 0;
    }
    const double h0 = floor(r0 * c->embed_dim), h1 = floor(r1 * c->embed_dim);
    if (!(h0 >= 1 && h0 <= VIT_MAX_HIDDEN && h1 >= 1 && h1 <= VIT_MAX_HIDDEN)) {
        snprintf(msg, n, "\"mlp_ratio\" or \"mlp_ratio_token_only\" x embed_dim %d gives an MLP width "
                 "outside 1..%d", c->embed_dim, VIT_MAX_HIDDEN);
        return 0;
    }
    for (int s = 0; s < 2; s++)
        c->stage[s] = (vit_stage){.depth = (int)(s ? d1 : d0), .embed_dim = c->embed_dim,
                                  .num_heads = c->num_heads, .mlp_hidden = (int)(s ? h1 : h0),
                                  .scope = s ? VIT_SCOPE_CLASS : VIT_SCOPE_GLOBAL};
    c->n_stages = 2;
    c->depth = (int)(d0 + d1);
    c->mlp_hidden = (int)h0;
    const cJSON *nf = model_value(root, ma, "num_features");
    if (nf && !cJSON_IsNull(nf) && !(cJSON_IsNumber(nf) && nf->valuedouble == c->embed_dim)) {
        snprintf(msg, n, "\"num_features\" must equal embed_dim %d (timm's feature width)", c->embed_dim);
        return 0;
    }
    return 1;
}

/* The convolutional stem's keys into c ("stem", "bn_eps"); 0 with a message. An absent "stem"
 * keeps the base's; [] removes it. Without "patch_size", a stem sets it to its strides' product. */
static int stem_from_json(vit_config *c, const cJSON *root, const cJSON *ma, char *msg, size_t n) {
    const cJSON *js = model_value(root, ma, "stem");
    const cJSON *jp = model_value(root, ma, "patch_size");
    if (js && !cJSON_IsNull(js)) {
        const int count = cJSON_IsArray(js) ? cJSON_GetArraySize(js) : -1;
        if (count < 0 || count > VIT_MAX_STEM) {
            snprintf(msg, n, "\"stem\" must be an array of 0 to %d convolution objects "
                     "({\"out\", \"kernel\", \"stride\", ...}; docs/models.md)", VIT_MAX_STEM);
            return 0;
        }
        static const char *const known[] = {"out", "kernel", "stride", "padding", "bias", "bn", "act",
                                            "conv_name", "bn_name"};
        int i = 0, stride = 1;
        const cJSON *e;
        cJSON_ArrayForEach(e, js) {
            vit_conv cv = {.bias = 1};
            if (!cJSON_IsObject(e)) {
                snprintf(msg, n, "\"stem\"[%d] must be an object {\"out\", \"kernel\", \"stride\", ...}", i);
                return 0;
            }
            const cJSON *k;
            cJSON_ArrayForEach(k, e) {
                size_t w = 0;
                while (w < sizeof known / sizeof known[0] && strcmp(known[w], k->string)) w++;
                if (w == sizeof known / sizeof known[0]) {
                    snprintf(msg, n, "\"stem\"[%d]: unknown key \"%.40s\": give out, kernel, stride, padding, "
                             "bias, bn, act, conv_name or bn_name", i, k->string);
                    return 0;
                }
            }
            static const struct { const char *key; int lo, hi, required; size_t off; } ints[] = {
                {"out", 1, VIT_MAX_DIM, 1, offsetof(vit_conv, out)},
                {"kernel", 1, VIT_MAX_KERNEL, 1, offsetof(vit_conv, kernel)},
                {"stride", 1, VIT_MAX_KERNEL, 1, offsetof(vit_conv, stride)},
                {"padding", 0, VIT_MAX_KERNEL, 0, offsetof(vit_conv, padding)},
            };
            for (size_t w = 0; w < sizeof ints / sizeof ints[0]; w++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, ints[w].key);
                int *dst = (int *)(void *)((char *)&cv + ints[w].off);
                if (!v && !ints[w].required) continue;
                if (!v || !cJSON_IsNumber(v) || !as_double_to_int(v->valuedouble, ints[w].lo, ints[w].hi, dst)) {
                    snprintf(msg, n, "\"stem\"[%d].%s must be an integer in %d..%d%s", i, ints[w].key, ints[w].lo,
                             ints[w].hi, v ? "" : " (required)");
                    return 0;
                }
            }
            static const char *const flags[] = {"bias", "bn"};
            for (int w = 0; w < 2; w++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, flags[w]);
                if (!v) continue;
                if (!cJSON_IsBool(v)) {
                    snprintf(msg, n, "\"stem\"[%d].%s must be true or false", i, flags[w]);
                    return 0;
                }
                *(w ? &cv.bn : &cv.bias) = cJSON_IsTrue(v);
            }
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "act");
            if (a && (!cJSON_IsString(a) || vit_stem_act_parse(a->valuestring) < 0)) {
                snprintf(msg, n, "\"stem\"[%d].act must be \"none\", \"relu\", \"relu6\" or \"hardswish\"", i);
                return 0;
            }
            if (a) cv.act = (vit_stem_act)vit_stem_act_parse(a->valuestring);
            static const char *const names[] = {"conv_name", "bn_name"};
            for (int w = 0; w < 2; w++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, names[w]);
                if (!v) continue;
                char *dst = w ? cv.bn_name : cv.conv_name;
                int ok = cJSON_IsString(v) && v->valuestring[0] && strlen(v->valuestring) < VIT_STEM_NAME;
                for (const char *ch = ok ? v->valuestring : ""; *ch && ok; ch++)
                    ok = isalnum((unsigned char)*ch) || *ch == '_' || *ch == '.';
                if (!ok) {
                    snprintf(msg, n, "\"stem\"[%d].%s must be a tensor name prefix of 1..%d letters, digits, "
                             "'_' and '.' (\"patch_embed.conv1\")", i, names[w], VIT_STEM_NAME - 1);
                    return 0;
                }
                snprintf(dst, VIT_STEM_NAME, "%s", v->valuestring);
            }
            if (cv.bn_name[0] && !cv.bn) {
                snprintf(msg, n, "\"stem\"[%d] names a BatchNorm (\"bn_name\") but has none: add \"bn\": true "
                         "or remove bn_name", i);
                return 0;
            }
            c->stem[i++] = cv;
            stride = stride * cv.stride > VIT_MAX_IMG ? VIT_MAX_IMG + 1 : stride * cv.stride;
        }
        c->n_stem = count;
        for (int k = count; k < VIT_MAX_STEM; k++) memset(&c->stem[k], 0, sizeof c->stem[k]);
        if (count && (!jp || cJSON_IsNull(jp))) c->patch_size = stride;
    }
    const int width = c->n_stages > 0 ? c->stage[0].embed_dim : c->embed_dim;
    if ((!js || cJSON_IsNull(js)) && c->n_stem && c->stem[c->n_stem - 1].out != width) {
        snprintf(msg, n, "the width %d is not the one the base's stem (%d convolutions) ends in, %d: give the "
                 "whole \"stem\" with its last \"out\" %d (attnscope info --json %s prints the base's)", width,
                 c->n_stem, c->stem[c->n_stem - 1].out, width, c->name);
        return 0;
    }
    return 1;
}

/* Some BatchNorm uses bn_eps: a stem convolution's, or the Refiner release's DLA. */
static int model_uses_bn(const vit_config *c) {
    int any = 0;
    for (int i = 0; i < c->n_stem; i++) any |= c->stem[i].bn;
    for (int l = 0; l < c->depth && l < VIT_MAX_DEPTH; l++) any |= c->attn[l].kind == VIT_ATTN_REFINER_SHARED;
    return any;
}

/* "bn_eps" only where a BatchNorm uses it (after "stem" and "attention"); 1e-5 by default. */
static int bn_eps_from_json(vit_config *c, const cJSON *root, const cJSON *ma, char *msg, size_t n) {
    const cJSON *je = model_value(root, ma, "bn_eps");
    if (je && !cJSON_IsNull(je) && !model_uses_bn(c)) {
        snprintf(msg, n, "\"bn_eps\" is the BatchNorm epsilon of the stem and of refiner_shared blocks, and "
                 "no \"stem\" convolution has \"bn\": true and no block is refiner_shared: remove it");
        return 0;
    }
    if ((c->n_stem || model_uses_bn(c)) && !(c->bn_eps > 0)) c->bn_eps = 1e-5f;
    return 1;
}

/* The base's per-block attention (base, its stages' depths) on c's blocks, stage by stage: block
 * j of stage s takes the base's block min(j, last) of stage min(s, last), so a deeper stage
 * repeats its last block's attention (vit_lsla's LSLA, LaViT's less-attention from N_LA on, MaiT's
 * unmasked tail) instead of leaving new blocks vanilla. Unchanged depths change nothing. */
static void attn_restage(vit_config *c, const vit_attn *base, const int *base_depths, int base_ns) {
    const int ns = c->n_stages > 0 ? c->n_stages : 1;
    int same = ns == base_ns;
    for (int st = 0; st < ns && same; st++) same = (c->n_stages > 0 ? c->stage[st].depth : c->depth) == base_depths[st];
    if (same) return;
    for (int st = 0, l = 0; st < ns; st++) {
        const int bs = st < base_ns ? st : base_ns - 1, depth = c->n_stages > 0 ? c->stage[st].depth : c->depth;
        int first = 0;
        for (int k = 0; k < bs; k++) first += base_depths[k];
        for (int j = 0; j < depth && l < VIT_MAX_DEPTH; j++, l++)
            c->attn[l] = base[first + (j < base_depths[bs] ? j : base_depths[bs] - 1)];
    }
}

/* Everything of the config into *c (which holds the base); 0 with a message on error. The keys
 * are checked before any value, so a typo is reported as a typo and not as what its default
 * did to some other key. */
static int config_from_json(vit_config *c, const cJSON *root, char *msg, size_t n) {
    const cJSON *ma = cJSON_GetObjectItemCaseSensitive(root, "model_args");
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(root, "pretrained_cfg");
    if (ma && !cJSON_IsObject(ma)) {
        snprintf(msg, n, "\"model_args\" must be an object");
        return 0;
    }
    if (pc && !cJSON_IsObject(pc)) {
        snprintf(msg, n, "\"pretrained_cfg\" must be an object");
        return 0;
    }
    const unsigned fam = 1u << c->family;
    if (!keys_known(root, MK_MODEL, fam, "", msg, n) ||
        (ma && !keys_known(ma, MK_MODEL, fam, "model_args.", msg, n)) ||
        (pc && !keys_known(pc, MK_PRETRAINED, fam, "pretrained_cfg.", msg, n)))
        return 0;
    const cJSON *j;
    if (ma)
        cJSON_ArrayForEach(j, ma) {
            const cJSON *top = cJSON_GetObjectItemCaseSensitive(root, j->string);
            if (top && !cJSON_Compare(top, j, 1)) {
                snprintf(msg, n, "\"%s\" is given at the top level and in \"model_args\" with "
                         "different values: keep one", j->string);
                return 0;
            }
        }
    const int base_dim = c->embed_dim, base_hidden = c->mlp_hidden, base_heads = c->num_heads;
    /* the base's blocks, so that a config changing the depths without "attention" keeps each
     * stage's attention (attn_restage) */
    vit_attn base_attn[VIT_MAX_DEPTH];
    int base_depths[VIT_MAX_STAGES] = {0}, base_ns = c->n_stages > 0 ? c->n_stages : 1;
    for (int st = 0; st < base_ns; st++) base_depths[st] = c->n_stages > 0 ? c->stage[st].depth : c->depth;
    memcpy(base_attn, c->attn, sizeof base_attn);
    for (int i = 0; i < MODEL_KEY_N; i++) {
        const model_key *k = &model_keys[i];
        const int pre = k->where == MK_PRETRAINED;
        if (k->type == MK_OWN || k->type == MK_META || (k->fam && !(k->fam & fam))) continue;
        if (!(j = pre ? (pc ? cJSON_GetObjectItemCaseSensitive(pc, k->name) : NULL) : model_value(root, ma, k->name)))
            continue;
        if (cJSON_IsNull(j) && k->type != MK_FIXED) continue; /* timm's None: the default */
        if (!key_apply(c, k, j, pre ? "pretrained_cfg." : "", msg, n)) return 0;
    }
    if (c->family == VIT_FAMILY_PVT2) {
        if (!pvt_from_json(c, root, ma, msg, n)) return 0;
    } else if (c->family == VIT_FAMILY_SWIN) {
        if (!swin_from_json(c, root, ma, base_dim, base_hidden, msg, n)) return 0;
    } else if (c->family == VIT_FAMILY_CAIT) {
        if (!cait_from_json(c, root, ma, base_dim, base_hidden, msg, n)) return 0;
    } else if (!vit_mlp_from_json(c, root, ma, base_dim, base_hidden, msg, n)) {
        return 0;
    }
    if (!pretrained_from_json(c, root, ma, pc, msg, n)) return 0;
    if ((c->family == VIT_FAMILY_VIT || c->family == VIT_FAMILY_SWIN) && !stem_from_json(c, root, ma, msg, n))
        return 0;
    const cJSON *iv = model_value(root, ma, "init_values"); /* timm's None: no LayerScale */
    if (iv && !cJSON_IsNull(iv) && (!cJSON_IsNumber(iv) || !(iv->valuedouble > 0) || !(iv->valuedouble <= 1e6))) {
        snprintf(msg, n, "\"init_values\" must be a number in (0, 1e6] (LayerScale) or null (none)");
        return 0;
    }
    if (iv) c->init_values = cJSON_IsNull(iv) ? 0.0f : (float)iv->valuedouble;
    const cJSON *att = model_value(root, ma, "attention");
    if (!att || cJSON_IsNull(att)) {
        attn_restage(c, base_attn, base_depths, base_ns);
        /* the Refiner release's H' is 3 H (docs/models.md): it follows a new "num_heads" */
        for (int l = 0; l < c->depth && c->num_heads != base_heads; l++)
            if (c->attn[l].kind == VIT_ATTN_REFINER_SHARED && c->attn[l].expanded_heads == 3 * base_heads)
                c->attn[l].expanded_heads = 3 * c->num_heads;
    } else if (!apply_attention(c, att, msg, n)) return 0;
    return c->family == VIT_FAMILY_PVT2 || c->family == VIT_FAMILY_CAIT || bn_eps_from_json(c, root, ma, msg, n);
}

/* A ViT's MLP width and feature width. */
static int vit_mlp_from_json(vit_config *c, const cJSON *root, const cJSON *ma, int base_dim,
                             int base_hidden, char *msg, size_t n) {
    /* timm: fc_norm None means true exactly for the averaging pools */
    const cJSON *fc = model_value(root, ma, "fc_norm");
    if ((!fc || cJSON_IsNull(fc)) && model_value(root, ma, "global_pool"))
        c->fc_norm = c->global_pool == VIT_POOL_AVG;
    /* MLP width: timm's int(embed_dim * mlp_ratio), with the base's ratio when none is given,
     * so that it follows embed_dim */
    const cJSON *ratio = model_value(root, ma, "mlp_ratio"), *hidden = model_value(root, ma, "mlp_hidden");
    const model_key *rk = key_find("mlp_ratio", MK_MODEL);
    if (ratio && !cJSON_IsNull(ratio) && (!cJSON_IsNumber(ratio) || !as_double_in(ratio->valuedouble, rk->lo, rk->hi))) {
        snprintf(msg, n, "\"mlp_ratio\" must be a finite number in [%g, %g]", rk->lo, rk->hi);
        return 0;
    }
    const int has_ratio = ratio && !cJSON_IsNull(ratio), has_hidden = hidden && !cJSON_IsNull(hidden);
    if (has_ratio && c->embed_dim > 0) {
        const double r = ratio->valuedouble;
        int width;
        if (!as_double_to_int(floor(r * c->embed_dim), 1, VIT_MAX_HIDDEN, &width)) {
            snprintf(msg, n, "\"mlp_ratio\" %g x embed_dim %d gives an MLP width outside 1..%d", r,
                     c->embed_dim, VIT_MAX_HIDDEN);
            return 0;
        }
        if (has_hidden && width != c->mlp_hidden) {
            snprintf(msg, n, "\"mlp_ratio\" %g x embed_dim %d = %d disagrees with \"mlp_hidden\" %d: "
                     "give one of them", r, c->embed_dim, width, c->mlp_hidden);
            return 0;
        }
        c->mlp_hidden = width;
    } else if (!has_hidden && c->embed_dim != base_dim && base_dim > 0) {
        /* the base's ratio (4 for every timm ViT) at the new width, in integers: exact */
        const long long w = (long long)base_hidden * c->embed_dim / base_dim;
        c->mlp_hidden = w >= 1 && w <= VIT_MAX_HIDDEN ? (int)w : 0; /* 0: validate names it */
    }
    const cJSON *nf = model_value(root, ma, "num_features");
    if (nf && !cJSON_IsNull(nf) && !(cJSON_IsNumber(nf) && nf->valuedouble == c->embed_dim)) {
        snprintf(msg, n, "\"num_features\" must equal embed_dim %d (timm's feature width)", c->embed_dim);
        return 0;
    }
    return 1;
}

/* pretrained_cfg's input size and classes. */
static int pretrained_from_json(vit_config *c, const cJSON *root, const cJSON *ma, const cJSON *pc,
                                char *msg, size_t n) {
    if (pc) {
        const cJSON *is = cJSON_GetObjectItemCaseSensitive(pc, "input_size");
        if (is && !cJSON_IsNull(is)) {
            int v[3];
            int ok = cJSON_IsArray(is) && cJSON_GetArraySize(is) == 3;
            for (int i = 0; ok && i < 3; i++) {
                const cJSON *e = cJSON_GetArrayItem(is, i);
                ok = cJSON_IsNumber(e) && as_double_to_int(e->valuedouble, 1, i ? VIT_MAX_IMG : VIT_MAX_CHANS, &v[i]);
            }
            if (!ok) {
                snprintf(msg, n, "\"pretrained_cfg.input_size\" must be [channels 1..%d, height, "
                         "width 1..%d]", VIT_MAX_CHANS, VIT_MAX_IMG);
                return 0;
            }
            if (v[1] != v[2]) {
                snprintf(msg, n, "\"pretrained_cfg.input_size\" is %dx%d: only square inputs are "
                         "supported", v[1], v[2]);
                return 0;
            }
            const cJSON *isz = model_value(root, ma, "img_size"), *ich = model_value(root, ma, "in_chans");
            if ((isz && !cJSON_IsNull(isz) && v[1] != c->img_size) || (ich && !cJSON_IsNull(ich) && v[0] != c->in_chans)) {
                snprintf(msg, n, "\"pretrained_cfg.input_size\" [%d, %d, %d] disagrees with in_chans "
                         "%d, img_size %d: make them equal", v[0], v[1], v[2], c->in_chans, c->img_size);
                return 0;
            }
            c->in_chans = v[0];
            c->img_size = v[1];
        }
        const cJSON *pn = cJSON_GetObjectItemCaseSensitive(pc, "num_classes");
        if (pn && !cJSON_IsNull(pn)) {
            int v;
            if (!cJSON_IsNumber(pn) || !as_double_to_int(pn->valuedouble, 0, VIT_MAX_CLASSES, &v)) {
                snprintf(msg, n, "\"pretrained_cfg.num_classes\" must be an integer in 0..%d", VIT_MAX_CLASSES);
                return 0;
            }
            const cJSON *top = model_value(root, ma, "num_classes");
            if (!top || cJSON_IsNull(top)) c->num_classes = v;
        }
    }
    return 1;
}

/* The "family" key (top level or model_args) into *family, -1 when absent. */
static as_status json_family(const cJSON *root, const char *name, int *family, as_error *err) {
    const cJSON *ma = cJSON_GetObjectItemCaseSensitive(root, "model_args");
    const cJSON *f = model_value(root, cJSON_IsObject(ma) ? ma : NULL, "family");
    *family = -1;
    if (!f || cJSON_IsNull(f)) return AS_OK;
    for (int i = 0; cJSON_IsString(f) && i < VIT_FAMILY_COUNT; i++)
        if (strcmp(f->valuestring, vit_family_name((vit_family)i)) == 0) {
            *family = i;
            return AS_OK;
        }
    char list[64] = "";
    for (int i = 0; i < VIT_FAMILY_COUNT; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"", i ? ", " : "",
                 vit_family_name((vit_family)i));
    return as_fail(err, AS_ERR_CONFIG, "%s: \"family\" must be one of %s (the others are not "
                   "supported yet)", name, list);
}

/* A setting that acts nowhere in c, a valid config (vit_mech.no_effect), for configs a user
 * writes: as_fail. */
static as_status no_effect_settings(const vit_config *c, const char *name, as_error *err) {
    for (int l = 0; l < c->depth; l++) {
        const vit_mech *m = vit_mech_of(c, l);
        char msg[300];
        if (m && m->no_effect && m->no_effect(c, l, msg, sizeof msg))
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d (%s): %s", name, l, m->name, msg);
    }
    return AS_OK;
}

as_status model_config_apply_stored_json(vit_config *cfg, const char *json, const char *name, as_error *err) {
    g_stored_config = 1;
    const as_status rc = model_config_apply_json(cfg, json, name, err);
    g_stored_config = 0;
    return rc;
}

as_status model_config_apply_json(vit_config *cfg, const char *json, const char *name,
                                  as_error *err) {
    const char *end = NULL; /* one object and nothing after it but white space */
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root) {
        const long at = end ? (long)(end - json) : 0L;
        cJSON *alone = cJSON_Parse(json); /* parses: the object is followed by more text */
        cJSON_Delete(alone);
        return as_fail(err, AS_ERR_FORMAT, alone ? "%s: text after the JSON object at byte %ld: give one object"
                                                 : "%s: not a JSON object (syntax error near byte %ld): fix the JSON",
                       name, at);
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return as_fail(err, AS_ERR_FORMAT, "%s: the top level is not a JSON object: write the config "
                       "as {\"key\": value, ...}", name);
    }
    vit_config c = *cfg;
    int family = -1;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architecture");
    if (!arch) arch = cJSON_GetObjectItemCaseSensitive(root, "arch");
    as_status rc = AS_OK;
    char msg[512];
    if (cJSON_GetObjectItemCaseSensitive(root, "architecture") && cJSON_GetObjectItemCaseSensitive(root, "arch")) {
        rc = as_fail(err, AS_ERR_CONFIG, "%s: \"arch\" and \"architecture\" are the same key: keep one", name);
    } else if (arch && !cJSON_IsString(arch)) {
        rc = as_fail(err, AS_ERR_CONFIG, "%s: \"architecture\" must be a string", name);
    } else if ((rc = json_family(root, name, &family, err)) != AS_OK) {
        /* err names the key */
    } else if (cJSON_IsString(arch) && strcmp(arch->valuestring, "custom") != 0) {
        as_error aerr = {0};
        if ((rc = vit_arch_resolve(arch->valuestring, &c, &aerr)) != AS_OK)
            as_fail(err, rc, "%s: %s", name, aerr.msg);
        else if (family >= 0 && family != (int)c.family)
            rc = as_fail(err, AS_ERR_CONFIG, "%s: \"family\": \"%s\" disagrees with \"architecture\" "
                         "%s, a %s: remove \"family\"", name, vit_family_name((vit_family)family),
                         arch->valuestring, vit_family_name(c.family));
    } else if (cJSON_IsString(arch) || cJSON_GetObjectItemCaseSensitive(root, "embed_dim") ||
               (family >= 0 && family != (int)c.family)) {
        /* a custom model starts from timm's defaults of its family (a custom base stays) */
        const vit_family f = family >= 0 ? (vit_family)family : VIT_FAMILY_VIT;
        if (!cfg->name[0] || strcmp(cfg->name, "custom") != 0 || cfg->family != f) {
            if (f == VIT_FAMILY_SWIN || f == VIT_FAMILY_CAIT) {
                c = *vit_arch_find(f == VIT_FAMILY_SWIN ? "swin_tiny_patch4_window7_224" : "cait_xxs24_224");
                snprintf(c.name, sizeof c.name, "custom");
            } else if (f == VIT_FAMILY_PVT2) { /* timm's class defaults: b2 with stage 2 at 256 / 4 */
                c = *vit_arch_find("pvt_v2_b2");
                c.stage[2].embed_dim = 256;
                c.stage[2].num_heads = 4;
                c.stage[2].mlp_hidden = 4 * 256;
                snprintf(c.name, sizeof c.name, "custom");
            } else {
                c = custom_defaults;
            }
        }
    }
    if (rc == AS_OK && !config_from_json(&c, root, msg, sizeof msg))
        rc = as_fail(err, AS_ERR_CONFIG, "%s: %s", name, msg);
    cJSON_Delete(root); /* after the messages: they quote the tree's strings */
    if (rc != AS_OK) return rc;
    if (!c.name[0]) snprintf(c.name, sizeof c.name, "custom");
    as_error verr = {0};
    rc = vit_config_validate(&c, &verr);
    if (rc != AS_OK) return as_fail(err, rc, "%s: %s", name, verr.msg);
    if (!g_stored_config && (rc = no_effect_settings(&c, name, err)) != AS_OK) return rc;
    *cfg = c; /* a failing call leaves *cfg untouched */
    return AS_OK;
}

/* The mlp_ratio that gives every stage's MLP width back through floor(r x width): the smallest
 * ratio of the stages, nudged up past rounding. 0 when no single ratio does. */
static double swin_mlp_ratio(const vit_config *c) {
    double r = 0;
    for (int s = 0; s < c->n_stages; s++) {
        const double q = (double)c->stage[s].mlp_hidden / c->stage[s].embed_dim;
        if (q > r) r = q;
    }
    for (int tries = 0; tries < 4; tries++, r = nextafter(r, INFINITY)) {
        int ok = 1;
        for (int s = 0; s < c->n_stages; s++)
            ok &= floor(r * c->stage[s].embed_dim) == c->stage[s].mlp_hidden;
        if (ok) return r;
    }
    return 0;
}

/* The convolutional stem's keys (model_config_to_json): every field, names when not attnscope's. */
static void stem_to_json(const vit_config *c, cJSON *o) {
    if (c->n_stem) {
        cJSON *a = cJSON_AddArrayToObject(o, "stem");
        for (int i = 0; i < c->n_stem; i++) {
            const vit_conv *cv = &c->stem[i];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "out", cv->out);
            cJSON_AddNumberToObject(e, "kernel", cv->kernel);
            cJSON_AddNumberToObject(e, "stride", cv->stride);
            cJSON_AddNumberToObject(e, "padding", cv->padding);
            cJSON_AddBoolToObject(e, "bias", cv->bias);
            cJSON_AddBoolToObject(e, "bn", cv->bn);
            cJSON_AddStringToObject(e, "act", vit_stem_act_name(cv->act));
            if (cv->conv_name[0]) cJSON_AddStringToObject(e, "conv_name", cv->conv_name);
            if (cv->bn_name[0]) cJSON_AddStringToObject(e, "bn_name", cv->bn_name);
            cJSON_AddItemToArray(a, e);
        }
    }
    /* the stem's BatchNorms or refiner_shared blocks' (a model without a stem has those too) */
    if (model_uses_bn(c)) cJSON_AddNumberToObject(o, "bn_eps", c->bn_eps);
}

/* Swin's own keys (model_config_to_json). */
static void swin_to_json(const vit_config *c, cJSON *o) {
    cJSON_AddStringToObject(o, "family", vit_family_name(c->family));
    cJSON_AddNumberToObject(o, "img_size", c->img_size);
    cJSON_AddNumberToObject(o, "patch_size", c->patch_size);
    cJSON_AddNumberToObject(o, "in_chans", c->in_chans);
    int doubling = 1;
    for (int s = 1; s < c->n_stages && s < VIT_MAX_STAGES; s++)
        doubling &= c->stage[s].embed_dim == c->stage[s - 1].embed_dim * 2;
    if (doubling) {
        cJSON_AddNumberToObject(o, "embed_dim", c->embed_dim);
    } else {
        cJSON *e = cJSON_AddArrayToObject(o, "embed_dim");
        for (int s = 0; s < c->n_stages && s < VIT_MAX_STAGES; s++)
            cJSON_AddItemToArray(e, cJSON_CreateNumber(c->stage[s].embed_dim));
    }
    cJSON *d = cJSON_AddArrayToObject(o, "depths"), *h = cJSON_AddArrayToObject(o, "num_heads");
    for (int s = 0; s < c->n_stages && s < VIT_MAX_STAGES; s++) {
        cJSON_AddItemToArray(d, cJSON_CreateNumber(c->stage[s].depth));
        cJSON_AddItemToArray(h, cJSON_CreateNumber(c->stage[s].num_heads));
    }
    int global = 0, windows = 0;
    for (int s = 0; s < c->n_stages; s++) {
        global |= c->stage[s].scope == VIT_SCOPE_GLOBAL;
        windows |= c->stage[s].scope == VIT_SCOPE_WINDOW;
    }
    if (windows) cJSON_AddNumberToObject(o, "window_size", c->stage[0].window);
    cJSON_AddNumberToObject(o, "mlp_ratio", swin_mlp_ratio(c));
    cJSON_AddNumberToObject(o, "num_classes", c->num_classes);
    cJSON_AddBoolToObject(o, "qkv_bias", c->qkv_bias);
    cJSON_AddBoolToObject(o, "patch_norm", c->patch_norm);
    cJSON_AddStringToObject(o, "global_pool", vit_pool_name(c->global_pool));
    cJSON_AddNumberToObject(o, "ln_eps", c->ln_eps);
    if (windows) {
        cJSON_AddStringToObject(o, "pad_order", vit_pad_order_name(c->pad_order));
        cJSON_AddStringToObject(o, "window_clamp", vit_window_clamp_name(c->window_clamp));
    }
    if (c->n_stages > 1 && c->stage[1].down == VIT_DOWN_CONV) cJSON_AddStringToObject(o, "downsample", "conv");
    if (c->no_rel_pos_bias && windows) cJSON_AddBoolToObject(o, "rel_pos_bias", 0);
    if (global) {
        cJSON *a = cJSON_AddArrayToObject(o, "scopes");
        for (int s = 0; s < c->n_stages && s < VIT_MAX_STAGES; s++)
            cJSON_AddItemToArray(a, cJSON_CreateString(vit_scope_name(c->stage[s].scope)));
    }
    stem_to_json(c, o);
}

/* PVT v2's keys (model_config_to_json): timm's keyword arguments, one entry per stage. */
static void pvt_to_json(const vit_config *c, cJSON *o) {
    cJSON_AddStringToObject(o, "family", vit_family_name(c->family));
    cJSON_AddNumberToObject(o, "img_size", c->img_size);
    cJSON_AddNumberToObject(o, "patch_size", c->patch_size);
    cJSON_AddNumberToObject(o, "patch_kernel", c->patch_kernel);
    cJSON_AddNumberToObject(o, "in_chans", c->in_chans);
    cJSON *l[5];
    static const char *const keys[5] = {"depths", "embed_dims", "num_heads", "mlp_ratios", "sr_ratios"};
    for (int k = 0; k < 5; k++) l[k] = k < 4 || !c->sr_linear ? cJSON_AddArrayToObject(o, keys[k]) : NULL;
    for (int s = 0; s < c->n_stages && s < VIT_MAX_STAGES; s++) {
        const vit_stage *st = &c->stage[s];
        double r = (double)st->mlp_hidden / st->embed_dim; /* the ratio floor(r C) gives back */
        for (int t = 0; t < 4 && floor(r * st->embed_dim) != st->mlp_hidden; t++) r = nextafter(r, INFINITY);
        const double val[5] = {st->depth, st->embed_dim, st->num_heads, r, st->sr_ratio};
        for (int k = 0; k < 5; k++)
            if (l[k]) cJSON_AddItemToArray(l[k], cJSON_CreateNumber(val[k]));
    }
    cJSON_AddBoolToObject(o, "linear", c->sr_linear);
    cJSON_AddNumberToObject(o, "num_classes", c->num_classes);
    cJSON_AddBoolToObject(o, "qkv_bias", c->qkv_bias);
    cJSON_AddStringToObject(o, "global_pool", vit_pool_name(c->global_pool));
    cJSON_AddNumberToObject(o, "ln_eps", c->ln_eps);
    cJSON_AddNumberToObject(o, "conv_ln_eps", c->conv_ln_eps);
    if (c->attn_residual) {
        cJSON_AddBoolToObject(o, "attn_residual", 1);
        cJSON_AddStringToObject(o, "ar_source", vit_ar_source_name(c->ar_source));
        cJSON_AddStringToObject(o, "ar_norm", vit_ar_norm_name(c->ar_norm));
    }
}

/* CaiT's keys (model_config_to_json). */
static void cait_to_json(const vit_config *c, cJSON *o) {
    cJSON_AddStringToObject(o, "family", vit_family_name(c->family));
    cJSON_AddNumberToObject(o, "img_size", c->img_size);
    cJSON_AddNumberToObject(o, "patch_size", c->patch_size);
    cJSON_AddNumberToObject(o, "in_chans", c->in_chans);
    cJSON_AddNumberToObject(o, "embed_dim", c->embed_dim);
    cJSON_AddNumberToObject(o, "depth", c->stage[0].depth);
    cJSON_AddNumberToObject(o, "depth_token_only", c->stage[1].depth);
    cJSON_AddNumberToObject(o, "num_heads", c->num_heads);
    /* the ratios that give the widths back through floor(r x embed_dim) */
    const double r0 = (double)c->stage[0].mlp_hidden / c->embed_dim, r1 = (double)c->stage[1].mlp_hidden / c->embed_dim;
    cJSON_AddNumberToObject(o, "mlp_ratio", floor(r0 * c->embed_dim) == c->stage[0].mlp_hidden ? r0 : nextafter(r0, INFINITY));
    cJSON_AddNumberToObject(o, "mlp_ratio_token_only", floor(r1 * c->embed_dim) == c->stage[1].mlp_hidden ? r1 : nextafter(r1, INFINITY));
    cJSON_AddNumberToObject(o, "num_classes", c->num_classes);
    cJSON_AddBoolToObject(o, "qkv_bias", c->qkv_bias);
    cJSON_AddStringToObject(o, "global_pool", vit_pool_name(c->global_pool));
    cJSON_AddNumberToObject(o, "ln_eps", c->ln_eps);
    cJSON_AddNumberToObject(o, "init_values", c->init_values);
    cJSON_AddBoolToObject(o, "talking_heads", c->talking_heads);
    cJSON_AddStringToObject(o, "mask_mix", vit_mask_mix_name(c->mask_mix));
}

/* A ViT's keys (model_config_to_json). */
static void vit_to_json(const vit_config *c, cJSON *o) {
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
    /* the modern ViT family: written when set */
    if (c->init_values > 0) cJSON_AddNumberToObject(o, "init_values", c->init_values);
    if (c->reg_tokens) cJSON_AddNumberToObject(o, "reg_tokens", c->reg_tokens);
    if (c->no_embed_class) cJSON_AddBoolToObject(o, "no_embed_class", 1);
    if (c->pre_norm) cJSON_AddBoolToObject(o, "pre_norm", 1);
    if (c->act_layer != VIT_ACT_GELU) cJSON_AddStringToObject(o, "act_layer", vit_act_name(c->act_layer));
    /* the Refiner release's: written when set */
    if (c->adjust_ratio > 0) cJSON_AddNumberToObject(o, "adjust_ratio", c->adjust_ratio);
    if (c->mlp_scale > 0) cJSON_AddNumberToObject(o, "mlp_scale", c->mlp_scale);
    if (c->aux_head > 0) cJSON_AddNumberToObject(o, "aux_head", c->aux_head);
    stem_to_json(c, o);
}

char *model_config_to_json(const vit_config *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "architecture", c->name);
    if (c->family == VIT_FAMILY_PVT2) pvt_to_json(c, o);
    else if (c->family == VIT_FAMILY_CAIT) cait_to_json(c, o);
    else if (c->family != VIT_FAMILY_VIT) swin_to_json(c, o);
    else vit_to_json(c, o);
    int mixed = 0;
    for (int l = 0; l < c->depth && l < VIT_MAX_DEPTH; l++)
        mixed |= c->attn[l].kind != VIT_ATTN_VANILLA || c->attn[l].scale > 0; /* a vanilla scale too */
    if (mixed) cJSON_AddItemToObject(o, "attention", attention_to_json(c));
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
        char *json = model_read_text(arch, err);
        if (!json) return err ? err->status : AS_ERR_IO;
        as_status rc = model_config_apply_json(cfg, json, arch, err);
        free(json);
        return rc;
    }
    return vit_arch_resolve(arch, cfg, err);
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
            if (np > VIT_MAX_IMG * (long long)VIT_MAX_IMG) return 0; /* no input has such a grid; bounds the loop */
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
        if (!t || !shape_matches(&specs[i], t, vit_pos_embed_prefix(cfg))) bad++;
    }
    free(specs);
    return bad + (st->count > n ? st->count - n : 0);
}

/* "is this a deit_small_patch16_224 checkpoint? try --arch deit_small_patch16_224" or "". */
static void arch_hint(char *buf, size_t n, const vit_config *cfg, const safetensors *st) {
    buf[0] = 0;
    const safetensors_tensor *head = safetensors_find(st, "head.weight");
    if (!head) head = safetensors_find(st, "head.fc.weight"); /* Swin */
    for (int i = 0; i < vit_arch_count(); i++) {
        vit_config c = *vit_arch_get(i);
        if (strcmp(c.name, cfg->name) == 0) continue;
        c.num_classes = head && head->ndim == 2 && head->shape[0] > 0 && head->shape[0] <= VIT_MAX_CLASSES
                            ? (int)head->shape[0] : 0;
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

/* The index of the first NaN or infinity of x[0..n), or n. Blocks spread over the threads: a
 * ViT-B's 86 M weights are read at memory speed. */
static size_t first_non_finite(const float *x, size_t n) {
    const size_t blk = (size_t)1 << 16, nb = (n + blk - 1) / blk;
    size_t first = n;
#pragma omp parallel for schedule(static) reduction(min : first)
    for (size_t b = 0; b < nb; b++) {
        const size_t e = (b + 1) * blk < n ? (b + 1) * blk : n;
        int bad = 0;
        for (size_t i = b * blk; i < e; i++) bad |= !(fabsf(x[i]) <= FLT_MAX);
        for (size_t i = b * blk; bad && i < e; i++)
            if (!(fabsf(x[i]) <= FLT_MAX)) {
                first = i < first ? i : first;
                break;
            }
    }
    return first;
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
    const int prefix = vit_pos_embed_prefix(cfg), D = cfg->embed_dim; /* pos_embed's rows before the grid */

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
    for (int i = 0; i < st->count; i++) { /* a BatchNorm's step count: unused in eval mode */
        const char *nm = st->tensors[i].name;
        const size_t len = strlen(nm), suf = strlen(".num_batches_tracked");
        if (seen[i] || len <= suf || strcmp(nm + len - suf, ".num_batches_tracked") != 0) continue;
        char mean[VIT_TENSOR_NAME_MAX + 16];
        snprintf(mean, sizeof mean, "%.*s.running_mean", (int)(len - suf), nm);
        for (int k = 0; k < n && !seen[i]; k++)
            if (specs[k].buffer && strcmp(specs[k].name, mean) == 0) seen[i] = 1;
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
    const size_t T = (size_t)vit_pos_embed_len(cfg);
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
    /* 3. every value finite: a NaN or inf weight (a damaged file, or one saved after training
     * diverged) would give NaN maps and logits in a trace marked complete */
    for (int i = 0; i < n; i++) {
        const safetensors_tensor *t = safetensors_find(st, specs[i].name);
        const size_t count = specs[i].is_pos_embed ? T * (size_t)D : t->numel;
        const size_t at = first_non_finite(*specs[i].slot, count);
        if (at < count)
            return as_fail(err, AS_ERR_FORMAT, "%s: tensor %s holds %s at index %zu: the weights are damaged, or were "
                           "saved after training diverged; use another checkpoint", st->path, specs[i].name,
                           isnan((*specs[i].slot)[at]) ? "NaN" : "an infinity", at);
    }
    m->n_tensors = (size_t)n;
    return AS_OK;
}

/* What a trace or checkpoint says it was made from: the file behind any link (a checkpoint's
 * "latest" moves on) and the hash of its bytes. The file is mapped and the forward pass reads
 * every page of it anyway, so hashing here costs the hash's compute only (docs/trace-format.md
 * gives the measured rate); files of 32 MB and more have their hash remembered while they stay
 * unchanged (sha256_cached). */
static void model_identify(model *m, const char *weights) {
    char real[PATH_MAX];
    const char *src = realpath(weights, real) && strlen(real) < sizeof m->source ? real : weights;
    snprintf(m->source, sizeof m->source, "%.*s", (int)sizeof m->source - 1, src);
    sha256_cached(m->source, &m->st.file, m->st.map, m->st.map_size, (size_t)32 << 20, m->sha256);
}

/* What a file given as weights is when it is plainly not a safetensors file (whose first 8 bytes
 * are its header's length and whose header starts with '{'), or NULL. */
static const char *not_weights(const char *path) {
    unsigned char b[9] = {0};
    FILE *f = fopen(path, "rb");
    const size_t got = f ? fread(b, 1, sizeof b, f) : 0;
    if (f) fclose(f);
    if (!f) return NULL; /* the loader says why it cannot be read */
    if (got == sizeof b && b[8] == '{') return NULL;
    if (got >= 4 && memcmp(b, "\x89PNG", 4) == 0) return "a PNG image";
    if (got >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return "a JPEG image";
    if (got >= 6 && memcmp(b, "\x93NUMPY", 6) == 0) return "a .npy array";
    if (got >= 4 && memcmp(b, "\x89HDF", 4) == 0) return "an HDF5 file: a trace or results file, which attnscope info reads";
    if (got >= 2 && b[0] == '{') return "a JSON file: a model config is given with --arch, or in a checkpoint folder as config.json";
    return "its first bytes are not a safetensors header";
}

as_status model_load(model *m, const char *path, const char *arch, int img_size, as_error *err) {
    return model_load_report(m, path, arch, img_size, NULL, err);
}

as_status model_load_report(model *m, const char *path, const char *arch, int img_size,
                            FILE *report, as_error *err) {
    memset(m, 0, sizeof *m);
    char weights[1024], cfgpath[1024];
    as_status rc = AS_OK;
    if (path_is_dir(path)) {
        snprintf(weights, sizeof weights, "%s/model.safetensors", path);
        snprintf(cfgpath, sizeof cfgpath, "%s/config.json", path);
        if (!path_is_file(weights))
            return as_fail(err, AS_ERR_IO, "%s: no model.safetensors in this folder: give a "
                           "timm-layout folder (config.json + model.safetensors) or the file", path);
    } else if (path_is_file(path)) {
        const char *what = not_weights(path);
        if (what)
            return as_fail(err, AS_ERR_FORMAT, "%s: not a model's weights (%s): give a checkpoint folder (config.json + "
                           "model.safetensors) or a .safetensors file", path, what);
        snprintf(weights, sizeof weights, "%s", path);
        const char *slash = strrchr(path, '/');
        if (slash) snprintf(cfgpath, sizeof cfgpath, "%.*s/config.json", (int)(slash - path), path);
        else snprintf(cfgpath, sizeof cfgpath, "config.json");
        if (!path_is_file(cfgpath)) cfgpath[0] = 0;
    } else {
        vit_config named;
        as_error aerr = {0};
        if (!strchr(path, '/') && !strstr(path, ".safetensors")) { /* a name, not a path */
            if (vit_arch_resolve(path, &named, &aerr) != AS_OK) return as_fail(err, aerr.status, "%s", aerr.msg);
            return as_fail(err, AS_ERR_IO, "%s: names an architecture, not weights: give its "
                           "checkpoint folder (config.json + model.safetensors) or a .safetensors "
                           "file with --arch %s", path, path);
        }
        return as_fail(err, AS_ERR_IO, "%s: no such file or folder: give a checkpoint folder or a "
                       ".safetensors file", path);
    }
    vit_config cfg = {0};
    char *json = NULL;
    if (cfgpath[0] && path_is_file(cfgpath)) {
        if (!(json = model_read_text(cfgpath, err))) return err ? err->status : AS_ERR_IO;
        rc = model_config_apply_stored_json(&cfg, json, cfgpath, err);
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
    if (img_size > 0 && img_size != cfg.img_size) {
        /* only the position embedding has a resampling rule: any other tensor whose shape
         * follows the token count (a mechanism's N x N maps) is refused */
        vit_config at = cfg;
        at.img_size = img_size;
        if ((rc = vit_config_validate(&at, err)) != AS_OK) return rc;
        vit_tensor_spec *sa = malloc(2 * VIT_MAX_TENSORS * sizeof *sa), *sb = sa + VIT_MAX_TENSORS;
        vit_params *pa = malloc(sizeof *pa);
        if (!sa || !pa) {
            free(sa);
            free(pa);
            return as_fail(err, AS_ERR_NOMEM, "%s: out of memory", weights);
        }
        const int na = vit_param_specs(&cfg, pa, sa, VIT_MAX_TENSORS);
        const int nb = vit_param_specs(&at, pa, sb, VIT_MAX_TENSORS);
        int tied = -1;
        for (int i = 0; i < na && i < nb && i < VIT_MAX_TENSORS && tied < 0; i++)
            if (!sa[i].is_pos_embed && memcmp(sa[i].shape, sb[i].shape, sizeof sa[i].shape) != 0) tied = i;
        char name[VIT_TENSOR_NAME_MAX];
        if (tied >= 0) snprintf(name, sizeof name, "%s", sa[tied].name);
        free(sa);
        free(pa);
        if (tied >= 0)
            return as_fail(err, AS_ERR_CONFIG,
                           "%s: --img-size %d: %s is tied to the %d tokens of img_size %d (DS, "
                           "position biases or Theta/Psi) and has no rule to resample it: run at %d",
                           weights, img_size, name, vit_num_tokens(&cfg), cfg.img_size, cfg.img_size);
        cfg.img_size = img_size;
    }
    if ((rc = vit_config_validate(&cfg, err)) != AS_OK) return rc;
    if ((rc = safetensors_open(&m->st, weights, err)) != AS_OK) return rc;
    const int timm_swin = cfg.n_stages > 0 && cfg.family != VIT_FAMILY_CAIT; /* CaiT: timm's names only */
    if (timm_swin) { /* Swin: the official and torchvision names, renamed to timm's */
        layout_info li;
        if ((rc = layout_to_timm(&m->st, &cfg, &li, err)) != AS_OK) {
            model_free(m);
            return rc;
        }
        m->layout = li.layout;
        m->n_ignored = li.n_ignored;
    }
    /* a checkpoint's own head size wins over the table's 1000 (fine-tuned models) */
    vit_geom last;
    vit_block_geom(&cfg, cfg.depth - 1, &last);
    const int fc = cfg.family == VIT_FAMILY_SWIN; /* Swin's head.fc */
    const char *hw = fc ? "head.fc.weight" : "head.weight";
    const char *hb = fc ? "head.fc.bias" : "head.bias";
    const safetensors_tensor *head = safetensors_find(&m->st, hw);
    if (head && head->ndim == 2 && head->shape[1] == last.D && head->shape[0] > 0 &&
        head->shape[0] < (1 << 24))
        cfg.num_classes = (int)head->shape[0];
    else if (!head && !safetensors_find(&m->st, hb))
        cfg.num_classes = 0;
    m->cfg = cfg;
    model_identify(m, weights);
    if ((rc = bind(m, report, err)) != AS_OK) {
        model_free(m);
        return rc;
    }
    char msg[256];
    if (!vit_params_check(&m->cfg, &m->params, msg, sizeof msg)) {
        model_free(m);
        return as_fail(err, AS_ERR_FORMAT, "%s: %s: fix the checkpoint", weights, msg);
    }
    m->params.pack = vit_gemm_pack_new(); /* loaded weights stay as they are: prepack them */
    return AS_OK;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* LayerNorm weights near 1, everything else with std 0.02 as timm's init; the mechanisms'
 * maps start near what makes them a plain attention (identity Theta/Psi/expansion/reduction,
 * a delta kernel, DS at the usual scale, alphas at 0.5). The perturbations keep every tensor
 * distinct so that a wrong binding changes the output. */
static void random_fill(float *x, const vit_tensor_spec *s, const vit_config *c, rng_state *r) {
    const int head_dim = vit_head_dim(c);
    const size_t numel = vit_tensor_numel(s);
    const char *nm = s->name;
    const int rows = s->shape[0], cols = s->ndim > 1 ? s->shape[1] : 1;
    const int eye = ends_with(nm, "theta.weight") || ends_with(nm, "psi.weight") ||
                    ends_with(nm, "expand.weight") || ends_with(nm, "reduce.weight");
    /* PVT v2's depth-wise, reducing and downsampling convolutions and LaViT's residual 2x2 conv
     * as timm initialises PVT v2's (its _init_weights: normal with std sqrt(2 / fan_out),
     * fan_out = k k C_out / groups); the depth-wise 3x3 of MixFFN has no norm after it, so 0.02
     * would all but silence the MLP branch at the start. The stem and the residual's 1x1 conv
     * keep 0.02 (a LayerNorm follows the stem; LayerScale scales the residual). */
    const int conv_w = s->ndim == 4 && (ends_with(nm, "dwconv.weight") || ends_with(nm, "attn.sr.weight") ||
                                        ends_with(nm, "downsample.proj.weight") ||
                                        ends_with(nm, "attn_residual.dw.weight"));
    const float conv = conv_w ? sqrtf(2.0f / (float)(s->shape[2] * s->shape[3] * (s->shape[1] == 1 ? 1 : rows))) : 0.0f;
    for (size_t k = 0; k < numel; k++) {
        const float e = 0.02f * rng_normal(r);
        if (strstr(nm, "norm") && ends_with(nm, ".weight")) x[k] = 1.0f + 0.1f * rng_normal(r);
        else if (ends_with(nm, "attn.ds")) x[k] = (1.0f + 5 * e) / sqrtf((float)head_dim);
        else if (ends_with(nm, "mask_alpha")) x[k] = 0.5f + 10 * e;
        else if (eye) x[k] = (int)(k / (size_t)cols) % (rows < cols ? rows : cols) == (int)(k % (size_t)cols) ? 1.0f + e : e;
        else if (conv) x[k] = rng_normal(r) * conv;
        else if (ends_with(nm, "attn_residual.gamma")) x[k] = 0.1f; /* LayerScale (CaiT's init, shallow) */
        else if (ends_with(nm, "ls1.gamma") || ends_with(nm, "ls2.gamma") || ends_with(nm, ".gamma_1") ||
                 ends_with(nm, ".gamma_2"))
            x[k] = c->init_values; /* LayerScale's gamma, as timm (DeiT III, CaiT) */
        else if (ends_with(nm, "mlp.scale_channel")) x[k] = c->mlp_scale; /* the Refiner release's LayerScale */
        else if (strstr(nm, "DLA.bn") || strstr(nm, "adapt_bn")) /* BatchNorm: identity statistics */
            x[k] = ends_with(nm, ".weight") || ends_with(nm, ".running_var") ? 1.0f + e : e;
        else if (ends_with(nm, "dla.weight")) x[k] = k % (size_t)(s->shape[2] * s->shape[3]) == (size_t)(s->shape[2] * s->shape[3]) / 2 ? 1.0f + e : e;
        else x[k] = e;
    }
}

/* The convolutional stem's tensors (their names are the config's, so they are found by their
 * slots): conv weights normal with std sqrt(2 / fan_out) (He, as timm and torchvision start
 * convolutions followed by BatchNorm), conv biases near 0, BatchNorm weights near 1 and biases
 * near 0, running means near 0 and variances near 1 (distinct values: a wrong binding shows). */
static void stem_fill(float *x, const vit_tensor_spec *s, const vit_params *p, rng_state *r) {
    for (int i = 0; i < VIT_MAX_STEM; i++) {
        const vit_conv_params *sp = &p->stem[i];
        const size_t numel = vit_tensor_numel(s);
        if (s->slot == &sp->w) {
            const float std = sqrtf(2.0f / (float)((size_t)s->shape[0] * s->shape[2] * s->shape[3]));
            for (size_t k = 0; k < numel; k++) x[k] = std * rng_normal(r);
        } else if (s->slot == &sp->bn_w || s->slot == &sp->bn_var) {
            for (size_t k = 0; k < numel; k++) x[k] = 1.0f + 0.05f * fabsf(rng_normal(r));
        } else if (s->slot == &sp->b || s->slot == &sp->bn_b || s->slot == &sp->bn_mean) {
            for (size_t k = 0; k < numel; k++) x[k] = 0.02f * rng_normal(r);
        }
    }
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
    for (int i = 0; i < n; i++) total += vit_tensor_numel(&specs[i]);
    m->owned = malloc(total * sizeof(float));
    if (!m->owned) {
        free(specs);
        return as_fail(err, AS_ERR_NOMEM, "out of memory for %zu random weights", total);
    }
    rng_state r = {seed};
    float *cur = m->owned;
    for (int i = 0; i < n; i++) {
        random_fill(cur, &specs[i], cfg, &r);
        stem_fill(cur, &specs[i], &m->params, &r);
        *specs[i].slot = cur;
        cur += vit_tensor_numel(&specs[i]);
    }
    free(specs);
    m->n_tensors = (size_t)n;
    snprintf(m->source, sizeof m->source, "random(seed=%llu)", seed);
    snprintf(m->weights_dtype, sizeof m->weights_dtype, "F32");
    return AS_OK;
}

void model_layout_note(const model *m, char *buf, size_t n) {
    if (n) buf[0] = 0;
    if (m->cfg.n_stages == 0 || m->cfg.family == VIT_FAMILY_CAIT || !m->source[0] || strncmp(m->source, "random", 6) == 0) return;
    const char *words = m->cfg.family != VIT_FAMILY_PVT2 ? layout_describe(m->layout)
                      : m->layout == LAYOUT_OFFICIAL ? "whai362/PVT's official names (patch_embed1..4, "
                        "block1..4, norm1..4, mlp.dwconv.dwconv), renamed to timm's" : "timm's names";
    snprintf(buf, n, "%s; %d buffer%s ignored%s", words, m->n_ignored,
             m->n_ignored == 1 ? "" : "s", m->n_ignored ? " (relative_position_index, attn_mask: "
             "attnscope computes them)" : "");
}

void model_free(model *m) {
    vit_gemm_pack_free(m->params.pack);
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
