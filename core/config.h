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

/* MAP: timm's attention pooling (global_pool "map", SigLIP): a learnt latent query attends over
 * the tokens, then a LayerNorm and an MLP (AttentionPoolLatent). */
typedef enum { VIT_POOL_TOKEN = 0, VIT_POOL_AVG, VIT_POOL_MAP, VIT_POOL_COUNT } vit_pool;
/* The MLP activation: GELU (erf form), or QuickGELU x * sigmoid(1.702 x) (OpenAI CLIP). */
typedef enum { VIT_ACT_GELU = 0, VIT_ACT_QUICK_GELU, VIT_ACT_COUNT } vit_act;

#define VIT_MAX_DEPTH 256      /* vit_config_validate enforces it */
#define VIT_MAX_MASK_HEADS 64  /* heads a MaiT layer can describe (any head count without masks) */
/* Limits vit_config_validate enforces so that every size product in the engine fits an int
 * (and the T x T x H maps stay under 2e9 entries); docs/models.md lists them. */
#define VIT_MAX_IMG 16384          /* img_size, patch_size */
#define VIT_MAX_CHANS 64           /* in_chans */
#define VIT_MAX_DIM 65536          /* embed_dim, num_heads, lmsa qk_dim */
#define VIT_MAX_HIDDEN (1 << 20)   /* mlp_hidden; in_chans x patch^2 */
#define VIT_MAX_CLASSES (1 << 24)  /* num_classes */
#define VIT_MAX_KERNEL 255         /* refiner kernel_size */
#define VIT_MAX_REG 64             /* reg_tokens */
#define VIT_MIN_CROP 0.25          /* crop_pct in [0.25, 1] */
#define VIT_MIN_STD 1e-3           /* std in [1e-3, 10] */
#define VIT_MAX_STD 10.0
#define VIT_MIN_MEAN -1.0          /* mean in [-1, 2] (pixels are scaled to [0, 1] first) */
#define VIT_MAX_MEAN 2.0

/* The attention mechanism of one block (docs/models.md gives each one's equations and weight
 * names). A zeroed vit_attn is timm's multi-head attention. */
typedef enum {
    VIT_ATTN_VANILLA = 0, /* softmax(q k^T * scale) v */
    VIT_ATTN_LMSA,        /* q, k projected to qk_dim in total (low-relation MSA) */
    VIT_ATTN_LSLA,        /* ViT-LSLA: keys and values are x itself; DS, inner and outer biases */
    VIT_ATTN_LESS,        /* LaViT less-attention: scores = Psi(Theta(A_prev)^T)^T */
    VIT_ATTN_MAIT,        /* MaiT: R x R spatial masks multiplied into the scores */
    VIT_ATTN_REFINER,     /* Refiner: head expansion, k x k convolution of the maps, reduction */
    VIT_ATTN_REFINER_RELEASE, /* the Refiner release's blocks: softmax + scale x the carried map */
    VIT_ATTN_REFINER_SHARED,  /* ... its shared blocks: scale x BN(DLA(the carried map)), v only */
    VIT_ATTN_COUNT
} vit_attn_kind;

typedef enum { VIT_BIAS_NONE = 0, VIT_BIAS_FULL, VIT_BIAS_RELATIVE, VIT_BIAS_COUNT } vit_bias_kind;

/* MaiT: what a masked entry becomes. ZERO is the paper's M * (q k^T * scale) (an unselected key
 * still weighs e^0); SOFT multiplies by a learnable per-head alpha in (0, 1); NEG_INF is the
 * common reading that removes the key from the softmax. */
typedef enum { VIT_MASK_ZERO = 0, VIT_MASK_SOFT, VIT_MASK_NEG_INF, VIT_MASK_COUNT } vit_mask_mode;

typedef struct {
    vit_attn_kind kind;
    float scale;            /* score scale; 0 means 1/sqrt(q/k head width) */
    int qk_dim;             /* LMSA: total q/k width, split over the heads */
    int dynamic_scale;      /* LSLA: learnable N x N DS (1) or the fixed scale (0) */
    vit_bias_kind inner_bias, outer_bias; /* LSLA: before the softmax, after it */
    int value_proj;         /* LSLA: QXV, a value projection (1), or QXX (0) */
    int key_proj;           /* LSLA: a key projection (1: with value_proj, Table 4's QKV), or x (0) */
    int no_proj;            /* LSLA: no final projection (the paper's NP) */
    int outer_unmasked;     /* LSLA in shifted windows: B_outer also on the pairs Swin's shift mask
                               separates (1), or only on those it keeps (0, "outer_bias_masked": true) */
    vit_mask_mode mask_mode;                      /* MaiT */
    unsigned char mask_size[VIT_MAX_MASK_HEADS];  /* MaiT: R per head; 0 leaves the head unmasked */
    int expanded_heads;     /* Refiner: H' */
    int kernel_size;        /* Refiner: k, odd */
} vit_attn;
/* MaiT in CaiT's talking-heads blocks: where the masks apply (the paper's "Masked CaiT" does
 * not say; docs/models.md "CaiT"): BEFORE the head mix, on each head's own q k^T logits, or AFTER
 * it, on the mixed logits that enter the softmax. */
typedef enum { VIT_MASK_MIX_BEFORE = 0, VIT_MASK_MIX_AFTER, VIT_MASK_MIX_COUNT } vit_mask_mix;
/* LaViT's attention residual (docs/models.md, "LaViT"): what A_{m-1}^last of its Eq. 6 is (the
 * pre-softmax scores, as its Eqs. 4-5 name "A", or the softmax maps) and its Norm. */
typedef enum { VIT_AR_SCORES = 0, VIT_AR_ATTN, VIT_AR_SOURCE_COUNT } vit_ar_source;
typedef enum { VIT_AR_LAYERNORM = 0, VIT_AR_NONE, VIT_AR_NORM_COUNT } vit_ar_norm;
const char *vit_mask_mix_name(vit_mask_mix m); /* "before_mix", "after_mix" */
const char *vit_ar_source_name(vit_ar_source s); /* "scores", "attn" */
const char *vit_ar_norm_name(vit_ar_norm s);     /* "layernorm", "none" */
typedef enum { VIT_INTERP_BICUBIC = 0, VIT_INTERP_BILINEAR, VIT_INTERP_COUNT } vit_interp;

/* ---- Stages: a model is a stem, stages of blocks and a head ----
 * A monolithic ViT/DeiT has n_stages = 0: the top-level embed_dim, depth, num_heads and
 * mlp_hidden describe its one GLOBAL stage, so every existing config, checkpoint and trace keeps
 * its meaning. A staged model (Swin) lists its stages; then depth is the total block count, and
 * embed_dim, num_heads and mlp_hidden are stage 0's. Block l (0..depth-1) is counted over all
 * stages; attn[l] is its mechanism and vit_block_geom(c, l) its derived geometry (never stored). */
#define VIT_MAX_STAGES 4
#define VIT_MAX_WINDOW 64  /* window side M: a problem's M^2 x M^2 maps stay per-thread sized */
typedef enum { VIT_FAMILY_VIT = 0, VIT_FAMILY_SWIN, VIT_FAMILY_PVT2, VIT_FAMILY_CAIT, VIT_FAMILY_COUNT } vit_family;
/* How a block's tokens are grouped into independent attention problems: GLOBAL, one T x T
 * problem per image; WINDOW, Swin's M x M windows (shifted on odd blocks of a stage); SRA, PVT
 * v2's spatial reduction: every token queries the keys and values of a reduced grid (T x T');
 * CLASS, CaiT's class attention: the class token alone queries [cls; patches] (1 x (1 + N))
 * and only it is updated. */
typedef enum { VIT_SCOPE_GLOBAL = 0, VIT_SCOPE_WINDOW, VIT_SCOPE_SRA, VIT_SCOPE_CLASS, VIT_SCOPE_COUNT } vit_scope;
/* What runs before a stage's blocks (stage > 0): MERGE, Swin's PatchMerging (2x2 gather in the
 * order (0,0),(1,0),(0,1),(1,1), LayerNorm(4C), Linear(4C, 2C) without bias); CONV, PVT v2's
 * Conv2d(k3, s2, p1) and LayerNorm. */
typedef enum { VIT_DOWN_NONE = 0, VIT_DOWN_MERGE, VIT_DOWN_CONV, VIT_DOWN_COUNT } vit_down;
/* Grids the window does not divide: PAD_FIRST pads, then rolls (torchvision and the official
 * segmentation code: the shift mask separates the wrapped rows, the correct behaviour and the
 * default); ROLL_FIRST rolls, then pads (timm, whose mask misses the wrap:
 * huggingface/pytorch-image-models#2438). Identical when the window divides every grid. */
typedef enum { VIT_PAD_FIRST = 0, VIT_PAD_ROLL_FIRST, VIT_PAD_COUNT } vit_pad_order;
/* A grid no larger than the window: TIMM shrinks the window to the grid and does not shift
 * (_calc_window_shift); TORCHVISION keeps M, pads, and does not shift when M >= padded grid.
 * Identical at 224 (the last Swin stage is one 7 x 7 window that never shifts). */
typedef enum { VIT_CLAMP_TIMM = 0, VIT_CLAMP_TORCHVISION, VIT_CLAMP_COUNT } vit_window_clamp;

/* ---- A convolutional stem (Refined-ViT, ViT-LSLA's MPViT stem; core/stem.c) ----
 * When n_stem > 0 the stem IS the patch embedding: its convolutions run on the image in order,
 * each Conv2d(k, s, p) [+ bias], then an optional BatchNorm2d with its running statistics (eval
 * mode; training keeps them fixed and trains the affine), then an activation; the last one's
 * output grid is the token grid and its width the embedding width. patch_size is then the
 * product of the strides (bookkeeping; the grid is the composed conv arithmetic). */
#define VIT_MAX_STEM 6
#define VIT_STEM_NAME 48
typedef enum { VIT_STEM_ACT_NONE = 0, VIT_STEM_ACT_RELU, VIT_STEM_ACT_RELU6, VIT_STEM_ACT_HARDSWISH,
               VIT_STEM_ACT_COUNT } vit_stem_act;
typedef struct {
    int out, kernel, stride, padding;
    int bias;       /* the conv has a bias */
    int bn;         /* BatchNorm2d after the conv */
    vit_stem_act act;
    /* weight name prefixes: "<conv>.weight", "<conv>.bias", "<bn>.{weight,bias,running_mean,
     * running_var}"; "" means attnscope's "stem.<i>.conv" and "stem.<i>.bn" (MPViT's names) */
    char conv_name[VIT_STEM_NAME], bn_name[VIT_STEM_NAME];
} vit_conv;
const char *vit_stem_act_name(vit_stem_act a); /* "none", "relu", "relu6", "hardswish" */
int vit_stem_act_parse(const char *s);         /* -1 when unknown */

typedef struct {
    int depth, embed_dim, num_heads, mlp_hidden;
    vit_scope scope;
    int window;     /* WINDOW: M as configured (before the clamp) */
    vit_down down;  /* before this stage's blocks; NONE for stage 0 */
    /* PVT v2 (family pvt_v2, scope SRA): keys and values come from a Conv2d(R x R, stride R) and
     * LayerNorm of the grid (R = sr_ratio > 1), from the grid itself (R = 1), or, with the
     * config's sr_linear, from its average pool to VIT_SR_POOL x VIT_SR_POOL (core/pvt.c) */
    int sr_ratio;
} vit_stage;

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
    vit_attn attn[VIT_MAX_DEPTH]; /* per block; all zero (vanilla) in the built-in table */
    /* stages (see "Stages" above); all zero for a monolithic ViT */
    vit_family family;
    int n_stages;
    vit_stage stage[VIT_MAX_STAGES];
    int patch_norm;             /* LayerNorm after the patch embedding (Swin) */
    int shift_windows;          /* WINDOW stages shift odd blocks by M/2 (Swin: 1) */
    int no_rel_pos_bias;        /* WINDOW blocks have no relative position bias table (JSON
                                   "rel_pos_bias": false; ViT-LSLA, whose LSLA inner bias is it) */
    vit_pad_order pad_order;
    vit_window_clamp window_clamp;
    /* LayerScale (DeiT III, DINOv2, CaiT): when > 0 every block has per-channel gammas ls1, ls2
     * (vit_block_params) multiplying the attention and MLP branches before the residual adds;
     * the value is timm's init_values (the gammas' initial value in training). */
    float init_values;
    /* PVT v2 (family pvt_v2; docs/models.md "PVT v2"): the stem is Conv2d(k = patch_kernel,
     * s = patch_size, p = patch_kernel / 2) + LayerNorm (timm's OverlapPatchEmbed, k 7 s 4 p 3),
     * every later stage starts with VIT_DOWN_CONV, blocks attend in SRA scope, the MLP is MixFFN
     * (fc1, depth-wise 3x3 conv with bias, GELU, fc2) and every stage ends with a LayerNorm. */
    int patch_kernel;   /* 0: the stem is k = s = patch_size */
    int sr_linear;      /* timm's `linear`: pooled SRA (AdaptiveAvgPool2d(7), 1x1 conv, LN, GELU)
                           and a ReLU after fc1 */
    float conv_ln_eps;  /* eps of the stem, downsample and SR LayerNorms (nn.LayerNorm: 1e-5);
                           ln_eps (1e-6) serves norm1, norm2 and the stage norms */
    /* LaViT's attention residual (its Eqs. 6-7; core/pvt.c): every stage s >= 1's first block adds
     * gamma * Conv1x1_heads(Norm(DWConv_2x2,s2(A))) to its scores, A the previous stage's last
     * block's ar_source, the depth-wise conv striding over the query grid (the keys' grid must be
     * the same in both stages), Norm a LayerNorm (eps 1e-5) over each row's keys or none. */
    int attn_residual;
    vit_ar_source ar_source;
    vit_ar_norm ar_norm;
    /* ---- the modern ViT family (vitfam: DeiT III, DINOv2, registers, CLIP, SigLIP; monolithic
     * ViT only, core/vitfam.c). All zero is timm's plain ViT. ---- */
    int reg_tokens;       /* R register tokens (timm reg_token (1, R, D)) right after the class
                             token; prefix tokens: cls, dist, reg0..reg{R-1} */
    int no_embed_class;   /* pos_embed covers the patches only ((1, Np, D)) and is added to them
                             before the prefix tokens are concatenated (DeiT III, big_vision) */
    int pre_norm;         /* norm_pre: a LayerNorm after the embedding, before the blocks (CLIP);
                             the patch embedding then has no bias, as in timm */
    vit_act act_layer;    /* the MLP activation of the blocks and of the MAP pool's MLP */
    /* The Refiner release's block and head (zhoudaquan/Refiner_ViT, docs/models.md "Refined-ViT
     * as released"); all zero: none. */
    float adjust_ratio;   /* r: every block computes x += f(norm(r x)) / r for both branches
                             (its Block.adjust_ratio, 0.5); 0 or 1: none */
    float mlp_scale;      /* LayerScale on the MLP branch alone, blocks.i.mlp.scale_channel (its
                             Mlp), with this initial value; 0: none */
    float aux_head;       /* w: logits = head(x_cls) + w max_t aux_head(x_t) over the patch tokens
                             after the final norm (its return_dense eval output, w 0.5); 0: none */
    /* CaiT (family "cait", core/cait.c, docs/models.md "CaiT"): stage 0 holds the self-attention
     * blocks over the patch tokens alone, stage 1 the class-attention blocks (scope CLASS). */
    int talking_heads;       /* SA blocks mix the heads' logits (attn.proj_l) before the softmax
                                and the maps (attn.proj_w) after it; 0: plain attention */
    vit_mask_mix mask_mix;   /* MaiT masks in talking-heads blocks: on the per-head logits
                                before proj_l (default) or on the mixed logits after it */
    /* the convolutional stem (see vit_conv above; ViT and Swin families) */
    int n_stem;
    vit_conv stem[VIT_MAX_STEM];
    float bn_eps;            /* the stem's BatchNorm epsilon (PyTorch: 1e-5) */
} vit_config;
/* Output side of stem conv i (i = -1: the image side), and its input channels (core/stem.c). */
int vit_stem_side(const vit_config *c, int i);
int vit_stem_in_chans(const vit_config *c, int i);
#define VIT_SR_POOL 7 /* linear SRA's AdaptiveAvgPool2d output side (timm, fixed) */

/* Compute and parameter counts of one forward pass for one image, per component. FLOPs count a
 * multiply-add as 2; papers' "FLOPs" are usually MACs = flops / 2. */
typedef enum {
    VIT_COMP_PATCH_EMBED = 0,
    VIT_COMP_TOKENS,      /* class/dist tokens and position embedding */
    VIT_COMP_NORM,        /* every LayerNorm */
    VIT_COMP_QKV,
    VIT_COMP_ATTN_SCORES, /* Q K^T and softmax */
    VIT_COMP_ATTN_MAPS,   /* work on the maps between softmax and values: LaViT's Theta/Psi,
                             Refiner's expansion/convolution/reduction, LSLA's outer bias */
    VIT_COMP_ATTN_VALUES, /* A V */
    VIT_COMP_PROJ,
    VIT_COMP_MLP,
    VIT_COMP_DOWNSAMPLE,  /* staged models: Swin's patch merging (2x2 gather, Linear 4C -> 2C);
                             its LayerNorm counts under VIT_COMP_NORM */
    VIT_COMP_HEAD,
    VIT_COMP_SR,          /* PVT v2's spatial reduction before k | v: the R x R conv, or the linear
                             variant's pool and 1x1 conv (and GELU); its LayerNorm counts under
                             VIT_COMP_NORM */
    VIT_COMP_COUNT
} vit_component;

/* macs counts only the multiply-accumulates of matrix products and convolutions (what fvcore
 * and the papers print as "FLOPs": 1.25 G for DeiT-Tiny); flops counts everything, a
 * multiply-add as 2. */
typedef struct {
    double params[VIT_COMP_COUNT];
    double flops[VIT_COMP_COUNT];
    double macs[VIT_COMP_COUNT];
    double params_total, flops_total, macs_total;
} vit_cost_part;
/* The whole model's counts, and the same split into its parts: the stem (patch embedding, its
 * norm, class tokens and position embedding), each stage (its downsample and its blocks; a
 * monolithic ViT has one) and the head (final norm, pooling, classifier). The parts add up to
 * the whole. */
typedef struct {
    double params[VIT_COMP_COUNT];
    double flops[VIT_COMP_COUNT];
    double macs[VIT_COMP_COUNT];
    double params_total, flops_total, macs_total;
    int n_stages; /* vit_num_stages */
    vit_cost_part stem, stage[VIT_MAX_STAGES], head;
} vit_cost;

const char *vit_component_name(vit_component c);
const char *vit_pool_name(vit_pool p);
const char *vit_interp_name(vit_interp i);
const char *vit_attn_name(vit_attn_kind k);   /* "vanilla", "lmsa", "lsla", "less", "mait", "refiner" */
const char *vit_bias_name(vit_bias_kind b);   /* "none", "full", "relative" */
const char *vit_mask_mode_name(vit_mask_mode m); /* "zero", "soft", "neg_inf" */
/* Name to enum; -1 when unknown. */
int vit_attn_parse(const char *s);
/* Why block l's attn maps are not row-stochastic by construction ("Refiner refines the softmax
 * maps, so rows sum to anything"), or NULL where they are; whether its map comes from a softmax
 * of its scores (0: refiner_shared, whose recorded scores are the map it refines). */
const char *vit_attn_not_stochastic(const vit_config *c, int l);
int vit_attn_has_softmax(const vit_config *c, int l);
int vit_bias_parse(const char *s);
int vit_mask_mode_parse(const char *s);

/* Built-in architectures. find takes an exact name and returns NULL for any other. */
int vit_arch_count(void);
const vit_config *vit_arch_get(int i);
const vit_config *vit_arch_find(const char *name);
/* A built-in name or one of timm's pretrained tags of it ("vit_small_patch16_224.dino"), with
 * that tag's own num_classes, mean, std and crop (the name keeps the tag). An unknown name or
 * tag fails with the known ones listed, a "did you mean", or the family that is not supported
 * yet (swin, cait, deit3, dinov2, clip, ...: AS_ERR_UNSUPPORTED). */
as_status vit_arch_resolve(const char *name, vit_config *out, as_error *err);
int vit_tag_count(void);
const char *vit_tag_name(int i, char *buf, size_t n); /* "arch.tag"; NULL past the end */
/* Writes "a, b, c" of every known name into buf (for error messages). */
void vit_arch_list(char *buf, size_t n);
/* Index of the name in names[n] that s is a typo of (at most 2 edits, fewer than a third of
 * s), or -1: the "did you mean" of config keys and architecture names. */
int vit_closest_name(const char *s, const char *const *names, int n);
/* Optimal string alignment distance (an adjacent swap costs 1); large for names of 64+ chars. */
int vit_edit_distance(const char *a, const char *b);

/* Token bookkeeping. */
int vit_grid(const vit_config *c);         /* patches per side */
int vit_num_patches(const vit_config *c);  /* grid^2 */
int vit_num_prefix(const vit_config *c);   /* class + distillation + register tokens */
int vit_num_tokens(const vit_config *c);   /* prefix + patches */
int vit_head_dim(const vit_config *c);
/* Per-block attention shapes. */
int vit_qk_head_dim(const vit_config *c, int l);  /* q/k width per head; 0 without q/k */
int vit_has_keys(const vit_config *c, int l);     /* block l computes q and k (not LaViT's less) */
int vit_attn_heads(const vit_config *c, int l);   /* heads of the widest map (H' for Refiner) */
int vit_any_attn(const vit_config *c, vit_attn_kind k);
float vit_attn_scale(const vit_config *c, int l);
/* Block l's mechanism and settings in a line ("mait R=[3,3,0] zero"); same text for equal
 * settings, so consecutive blocks can be grouped. */
void vit_attn_describe(const vit_config *c, int l, char *buf, size_t n);

/* One block's derived geometry. Token centres are in input pixels, pixel i spanning [i, i+1):
 * patch embedding k = s = P puts grid index y at P y + P/2; a 2x2 merge takes its children's
 * mean (stride doubles, offset grows by half the old stride). */
typedef struct {
    int stage, j;        /* stage and block within the stage */
    vit_scope scope;
    int gh, gw;          /* token grid (rows, columns), prefix tokens not counted */
    int prefix;          /* class/distillation tokens ahead of the grid (0 in staged models) */
    int T;               /* tokens per image: prefix + gh * gw */
    int D, H, Hm;        /* width, heads, MLP hidden of the block */
    int M, shift;        /* WINDOW: window side and cyclic shift after the clamp (else 0) */
    int ph, pw;          /* WINDOW: padded grid, multiples of M (else gh, gw) */
    int nwh, nww;        /* WINDOW: windows down and across the padded grid (else 1, 1) */
    int problems;        /* independent attention problems per image: 1, or nwh * nww */
    int Tq, Tk;          /* queries and keys of one problem: T and T, or M^2 and M^2 */
    float stride_px, offset_px; /* centre of grid index i along an axis: offset + stride * i */
    /* SRA (PVT v2): the keys' grid kgh x kgw (Tk = kgh * kgw); sr_ratio R of the reducing conv
     * (1: the keys are the tokens), or sr_pool (linear SRA: 7, else 0); a key's centre is
     * key_offset_px + key_stride_px * i, exact for the conv and for a pool whose bins are equal
     * (grid a multiple of 7); vit_sra_key_centre gives every pool bin's centre */
    int kgh, kgw, sr_ratio, sr_pool;
    float key_stride_px, key_offset_px;
} vit_geom;
int vit_num_stages(const vit_config *c);      /* n_stages, or 1 for a monolithic ViT */
int vit_stage_first_block(const vit_config *c, int s);
void vit_block_geom(const vit_config *c, int l, vit_geom *g);
/* SRA: fills g's key grid from its query grid (core/pvt.c; vit_block_geom calls it), and the
 * centre in pixels of key index i along axis 0 (rows) or 1 (columns). */
void vit_sra_geom(const vit_config *c, vit_geom *g);
float vit_sra_key_centre(const vit_geom *g, int i, int axis);
/* The tokens [*lo, *hi) along an axis of n tokens that key i reduces: R i .. R i + R - 1 for the
 * R x R stride-R conv (sr_ratio R; 1: the token itself), or adaptive pooling's bin
 * floor(i n / P) .. ceil((i + 1) n / P) - 1 (sr_pool P, PyTorch's AdaptiveAvgPool2d; bins overlap
 * where P does not divide n). The engine, analysis/ and the viewer share it. */
void vit_sra_key_tokens(int sr_ratio, int sr_pool, int n, int i, int *lo, int *hi);
/* WINDOW: tok[w * M^2 + r] = the flat grid token (y * gw + x, prefix not counted) at row r
 * (row-major inside the window) of window w (row-major over the shifted, padded grid), or -1
 * for a pad slot; roll and pad folded in per c->pad_order. tok has problems * M^2 entries. */
void vit_window_tokens(const vit_config *c, const vit_geom *g, int *tok);
/* WINDOW: Swin's shift mask, mask[(w * M^2 + i) * M^2 + j] = 0 when rows i and j of window w
 * come from the same region of the shifted, padded grid, else -100 (Swin's value, not -inf);
 * all 0 without a shift. */
#define VIT_SHIFT_MASK_VALUE (-100.0f)
void vit_shift_mask(const vit_config *c, const vit_geom *g, float *mask);
const char *vit_family_name(vit_family f);          /* "vit", "swin" */
const char *vit_scope_name(vit_scope s);            /* "global", "window" */
const char *vit_pad_order_name(vit_pad_order p);    /* "pad_first", "roll_first" */
const char *vit_window_clamp_name(vit_window_clamp k); /* "timm", "torchvision" */

/* Every constraint a forward pass relies on; the message says what to change. */
as_status vit_config_validate(const vit_config *c, as_error *err);
void vit_config_cost(const vit_config *c, vit_cost *out);

#endif
