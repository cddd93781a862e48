/* vit.h: the ViT/DeiT forward pass over caller-owned weights and activations, recording any
 * layer's attention maps, pre-softmax scores, Q/K and block outputs into caller buffers. */
#ifndef AS_VIT_H
#define AS_VIT_H

#include <stdint.h>

#include "config.h"

/* Usage:
 *     vit_params p;  vit_tensor_spec specs[VIT_MAX_TENSORS];
 *     int n = vit_param_specs(&cfg, &p, specs, VIT_MAX_TENSORS);  // names, shapes, slots
 *     ... point every *specs[i].slot at its weights (io/model.c does this) ...
 *     size_t bytes = vit_acts_carve(&cfg, B, NULL, NULL);          // measure only
 *     vit_acts a; vit_acts_carve(&cfg, B, arena, &a);              // one allocation per run
 *     vit_record rec = {.attn = maps};     // maps[l]: (B,H,T,T) or NULL to skip layer l
 *     vit_forward(&cfg, &p, &a, images, B, &rec);  // images: (B,3,S,S); logits in a.logits
 * Shapes: B images, T tokens (prefix + patches), D embed_dim, H heads, hd = D/H. A staged model
 * (cfg.n_stages > 0: Swin) uses the same calls; each block has its own T, D, H and attention
 * problems (vit_block_geom), and docs/stages.md describes the computation. */

#define VIT_MAX_TENSORS 4096
#define VIT_TENSOR_NAME_MAX 96
#define VIT_MAX_EXTRAS 2 /* intermediate maps a mechanism can have (vit_extra_info) */

typedef struct {
    const float *norm1_w, *norm1_b; /* (D) */
    const float *qkv_w, *qkv_b;     /* (3D, D), (3D) or NULL without qkv_bias */
    /* separate projections (LMSA: q, k (Q, D) and v; LSLA: q and v; less-attention: v) */
    const float *q_w, *q_b, *k_w, *k_b, *v_w, *v_b;
    const float *ds;                /* LSLA: (T, T) dynamic scale */
    const float *inner_bias, *outer_bias; /* LSLA: (H, T, T) full or ((2M-1)^2, H) relative */
    const float *theta, *psi;       /* less-attention: (T, T) each, applied as Linear(T, T) */
    const float *mask_alpha;        /* MaiT soft masks: (H) */
    const float *expand, *dla, *reduce; /* Refiner: (H', H), (H', 1, k, k), (H, H'); the release's
                                           shared blocks: DLA.conv_exp, depth_sep_conv, conv_pro */
    /* the release's shared blocks: DLA.bn1 (H'), DLA.bn2 (H'), DLA.bn3 (H), adapt_bn (H), each
     * {weight, bias, running_mean, running_var} (eval-mode BatchNorm, statistics frozen) */
    const float *dla_bn[4][4];
    const float *proj_w, *proj_b;   /* (D, D), (D); NULL for LSLA's NP */
    const float *norm2_w, *norm2_b; /* (D) */
    const float *fc1_w, *fc1_b;     /* (Hm, D), (Hm) */
    const float *fc2_w, *fc2_b;     /* (D, Hm), (D) */
    const float *rpb_table;         /* WINDOW: ((2M-1)^2, H) relative position bias, M clamped */
    const float *ls1, *ls2;         /* LayerScale (c->init_values > 0): (D) gammas of the
                                       attention and MLP branches (kernels_scaled_add) */
    /* PVT v2 (SRA scope; q_w, q_b above are attn.q): attn.kv (2D, D) [k | v]; attn.sr
     * (D, D, R, R) or (D, D, 1, 1) (linear) and its LayerNorm attn.norm (D); MixFFN's
     * mlp.dwconv (Hm, 1, 3, 3), (Hm) */
    const float *kv_w, *kv_b, *sr_w, *sr_b, *sr_norm_w, *sr_norm_b, *dw_w, *dw_b;
    /* CaiT talking heads (c->talking_heads, stage 0): attn.proj_l mixes the heads' logits,
     * attn.proj_w their softmax maps: (H, H) weights, (H) biases. A class-attention block uses
     * q_w .. v_b above (attn.q, attn.k, attn.v). */
    const float *thl_w, *thl_b, *thw_w, *thw_b;
} vit_block_params;

/* What runs before a stage's blocks (staged models, s >= 1): Swin's PatchMerging. */
typedef struct {
    const float *down_norm_w, *down_norm_b; /* (4 C_{s-1}) LayerNorm of the 2x2 gather */
    const float *down_w;                    /* (C_s, 4 C_{s-1}) reduction, no bias */
    /* PVT v2: down_w is the Conv2d (C_s, C_{s-1}, 3, 3) with bias down_b, down_norm_* its
     * LayerNorm (C_s); stage_norm_* the LayerNorm closing the stage (C_s) */
    const float *down_b, *stage_norm_w, *stage_norm_b;
    /* LaViT's attention residual into this stage (attn_residual; stages.s.attn_residual.*): the
     * depth-wise 2x2 conv (h', 1, 2, 2) and bias (h'), the LayerNorm over the keys (T'), the 1x1
     * conv across heads (h, h', 1, 1) and bias (h), LayerScale's gamma (h) */
    const float *ar_dw_w, *ar_dw_b, *ar_norm_w, *ar_norm_b, *ar_pw_w, *ar_pw_b, *ar_gamma;
} vit_stage_params;

/* One stem convolution's tensors (vit_conv): weight (out, in, k, k), bias (out) or NULL, and
 * its BatchNorm's weight, bias, running mean and variance (out) each, or NULL without one. */
typedef struct {
    const float *w, *b, *bn_w, *bn_b, *bn_mean, *bn_var;
} vit_conv_params;

typedef struct {
    const float *patch_w, *patch_b;       /* (D, C, P, P), (D); NULL with a stem */
    vit_conv_params stem[VIT_MAX_STEM];   /* the convolutional stem (c->n_stem) */
    const float *patch_norm_w, *patch_norm_b; /* staged models with patch_norm: (C_0) */
    const float *cls_token, *dist_token;  /* (D) each, or NULL */
    const float *pos_embed;               /* (T, D) at the config's img_size (resampled); (Np, D)
                                             with no_embed_class */
    vit_block_params blocks[VIT_MAX_DEPTH];
    vit_stage_params stages[VIT_MAX_STAGES];
    const float *norm_w, *norm_b;         /* final norm (or fc_norm when cfg->fc_norm) (D) */
    const float *head_w, *head_b;         /* (C, D), (C) */
    const float *head_dist_w, *head_dist_b;
    const float *aux_head_w, *aux_head_b; /* the Refiner release's dense head (c->aux_head): (C, D), (C) */
    /* ---- the modern ViT family (vitfam, core/vitfam.c); NULL when unused ---- */
    const float *reg_token;               /* (R, D) register tokens */
    const float *norm_pre_w, *norm_pre_b; /* (D) pre_norm */
    struct {                              /* global_pool "map": timm's AttentionPoolLatent */
        const float *latent;              /* (D) the learnt query */
        const float *q_w, *q_b;           /* (D, D), (D) */
        const float *kv_w, *kv_b;         /* (2D, D), (2D): k rows then v rows, head-major */
        const float *proj_w, *proj_b;     /* (D, D), (D) */
        const float *norm_w, *norm_b;     /* (D) */
        const float *fc1_w, *fc1_b;       /* (Hm, D), (Hm) */
        const float *fc2_w, *fc2_b;       /* (D, Hm), (D) */
    } pool;
    /* The weights' prepacked copies for the linear layers (core/gemm.h), or NULL (OpenBLAS):
     * made by model_load for weights that stay as loaded; never in training. */
    struct vit_gemm_pack *pack;
} vit_params;

/* One expected checkpoint tensor: timm's name, its shape, and where its pointer goes. */
typedef struct {
    char name[VIT_TENSOR_NAME_MAX];
    int ndim;
    int shape[4];
    const float **slot;
    int is_pos_embed; /* may come at another grid size and be resampled */
    int buffer;       /* a BatchNorm running statistic: loaded and saved, never trained (its
                         gradient stays zero) and not counted as a parameter */
} vit_tensor_spec;

/* Fills specs (at most max) with every tensor the config needs; returns the count. */
int vit_param_specs(const vit_config *c, vit_params *p, vit_tensor_spec *specs, int max);
/* Elements of one expected tensor. */
size_t vit_tensor_numel(const vit_tensor_spec *s);

/* What a training forward keeps per block for the backward pass (core/train.h). Each block's
 * buffers are its own, so nothing a later block computes overwrites them. */
typedef struct {
    float *x_in;    /* (B, T, D) block input */
    float *xn1;     /* (B, T, D) norm1 output */
    float *qkv;     /* (B, T, W) projections */
    float *att;     /* (B, H, T, T) the map that multiplies the values */
    float *soft;    /* Refiner: (B, H, T, T) the softmax before refinement, else NULL */
    float *ext[VIT_MAX_EXTRAS]; /* LSLA: [0] the softmax; Refiner: expanded, convolved */
    float *keep;    /* (B, H, T, T) scores handed to a following less-attention block, or NULL */
    float *ao;      /* (B, T, D) attention output before proj */
    float *x_mid;   /* (B, T, D) after the attention residual */
    float *xn2;     /* (B, T, D) norm2 output */
    float *hpre;    /* (B, T, Hm) fc1 output before GELU */
    float *hid;     /* (B, T, Hm) after GELU */
    /* LayerScale (init_values > 0): the attention branch's proj output and the MLP's fc2
     * output before their gamma, (B, T, D) each (CaiT's class-attention blocks: (B, 1, D)) */
    float *branch[2];
    /* PVT v2 (core/pvt_train.c): qkv holds q alone (B, T, Q); the reduced grid before its
     * LayerNorm (xr_pre: the conv's, or the linear variant's 1x1 conv's output) and the keys'
     * input after it (xr; linear: after the GELU), (B, T', D) each, or NULL without a
     * reduction; the linear variant's LayerNorm output (sr_ln); the k | v rows (B, T', Q + D);
     * MixFFN's depth-wise conv output before the GELU (hdw, (B, T, Hm); hpre is its input,
     * fc1's output after the linear variant's ReLU). */
    float *xr_pre, *xr, *kv, *sr_ln, *hdw;
    /* CaiT (core/cait_train.c): a talking-heads block keeps its raw logits in ext[0] and its
     * softmax in ext[1]; a class-attention block its input [cls; x] in x_in, its k | v rows in
     * qkv (B, T, 2D), the class token's query in cq (B, D), its maps (B, H, T) and the tail's
     * rows (ao, x_mid, xn2, hpre, hid, branch) for the class token alone. */
    float *cq;
} vit_tape_block;

typedef struct {
    vit_tape_block blk[VIT_MAX_DEPTH];
    float *x_final;  /* (B, T, D) the last block's output, before the final norm (CaiT: (B, D), its
                      * class token) */
    float *pool_pre; /* (B, 2, D) pooled rows before fc_norm (fc_norm configs) */
    /* Staged models (Swin, core/stage_train.c): the patch embedding before patch_norm
     * (B, T_0, C_0) (a ViT with pre_norm: the embedded tokens before norm_pre), and for each stage s >= 1 with a patch merge its 2x2 gather before
     * (merge_in) and after (merge_ln) the merge's LayerNorm, (B, T_s, 4 C_{s-1}) each. Block
     * buffers are block l's own sizes (vit_block_geom); att is (B, H, problems, Tq, Tk). */
    float *embed;
    float *merge_in[VIT_MAX_STAGES], *merge_ln[VIT_MAX_STAGES];
    /* PVT v2: the stem's conv output before its LayerNorm is embed; per stage s >= 1 the
     * downsampling conv's input (down_in, the previous stage's normed grid) and its output
     * before the LayerNorm (down_pre); per stage the last block's output before the stage norm
     * (stage_pre). */
    float *down_in[VIT_MAX_STAGES], *down_pre[VIT_MAX_STAGES], *stage_pre[VIT_MAX_STAGES];
    /* LaViT's attention residual into stage s: its depth-wise conv output, norm output (NULL
     * without a norm) and 1x1 conv output before gamma */
    float *ar_dw[VIT_MAX_STAGES], *ar_ln[VIT_MAX_STAGES], *ar_pw[VIT_MAX_STAGES];
    /* The convolutional stem (core/stem.c): conv i's output before its BatchNorm (stem_z) and
     * after its activation (stem_y, the next conv's input; NULL for the last conv, whose output
     * is the tokens), (B, G_i^2, C_i) each. Conv 0's im2col stays in vit_acts' patches. */
    float *stem_z[VIT_MAX_STEM], *stem_y[VIT_MAX_STEM];
} vit_tape;

/* The widest projection row of any block (W of acts->qkv: 3D, or LMSA's 2 qk_dim + D) and the
 * most maps any block's mechanism keeps (Refiner's H'; 0 without). */
void vit_widths(const vit_config *c, size_t *W, size_t *E);

/* Returns the bytes a tape for B images needs; with base != NULL carves it into *t. */
size_t vit_tape_carve(const vit_config *c, int B, void *base, vit_tape *t);

/* Activations for up to B images, carved from one buffer. */
typedef struct {
    int B;
    float *patches; /* (B, Np, C*P*P) im2col of the input */
    float *x;       /* (B, T, D) residual stream */
    float *xn;      /* (B, T, D) normalised */
    float *qkv;     /* (B, T, W): the block's projections, W = 3D or its mechanism's width */
    float *att;     /* (B, H, T, T) scratch maps for layers not recorded (staged: the largest
                       (B, H, problems, Tq, Tk) of any block) */
    float *keep[2]; /* (B, H, T, T) scores handed to the next less-attention block, or NULL */
    float *ext[2];  /* (B, H', T, T) scratch for mechanism maps not recorded, or NULL */
    float *ao;      /* (B, T, D) attention output before proj */
    float *hid;     /* (B, T, Hm) MLP hidden */
    float *pooled;  /* (B, 2, D) pooled features (and distillation token); staged: (B, D_last) */
    float *logits;  /* (B, C) final logits (distilled: mean of both heads) */
    vit_tape *tape; /* NULL, or where a training forward keeps every block's activations */
    /* Staged models (n_stages > 0) only; NULL for a monolithic ViT. Sizes are maxima over the
     * blocks (T_l, D_l, H_l, problems_l, Tq_l, Tk_l of vit_block_geom). */
    float *merge;   /* (B, T_s, 4 C_{s-1}) the 2x2 gather of a patch merge */
    float *rpb;     /* (H, Tq, Tk) the block's relative position bias, expanded */
    float *scratch; /* slots x slot_floats: one window problem's gathered q, k^T, v per thread */
    int slots;      /* threads the window scratch serves (omp_get_max_threads() when carved) */
    size_t slot_floats;
    /* Block l's problem tables, computed once when carved and shared by equal geometries:
     * tok[l] (problems, Tq) the grid token of each row (vit_window_tokens; the identity for a
     * GLOBAL block), mask[l] (problems, Tq, Tk) Swin's shift mask, or NULL without a shift. */
    const int *tok[VIT_MAX_DEPTH];
    const float *mask[VIT_MAX_DEPTH];
    /* PVT v2 (core/pvt.c): the SR input gathered per key (B, T', C R^2), the reduced grid
     * (B, T', C), its k | v rows (B, T', 2C), and MixFFN's depth-wise conv output (B, T, Hm) */
    float *sr_col, *xr, *kv, *hid2;
    /* LaViT's attention residual (attn_residual): the previous stage's last scores or maps
     * (B, h', Tq', T'), its depth-wise conv and norm outputs (B, h', Tq, T') and the residual
     * added to the first block's scores (B, h, Tq, T') */
    float *ar_src, *ar_dw, *ar_ln, *ar_out;
    /* CaiT: (B, 3, H, N, N) per image the talking-heads blocks' raw logits, mixed logits and
     * softmax maps when they are not recorded (core/cait.c) */
    float *cait;
    /* The convolutional stem: patches holds conv 0's im2col; stem_col the later convs'
     * (B, G_i^2, C_{i-1} k_i^2) and stem_map[2] their outputs (B, G_i^2, C_i) in turn */
    float *stem_col, *stem_map[2];
    float *stem_aff; /* (3, C_max): a conv's BatchNorm as a per-channel scale, shift and 1/std */
} vit_acts;

/* Returns the bytes needed for B images; with base != NULL also carves it into *a. base must
 * be 64-byte aligned. */
size_t vit_acts_carve(const vit_config *c, int B, void *base, vit_acts *a);

/* What to record; every pointer may be NULL, and each array has depth entries (NULL skips).
 * Shapes are block l's (vit_block_geom: T, D, H, problems, Tq, Tk). A GLOBAL block has one
 * problem of T x T, so a monolithic ViT's maps are (B, H, T, T) as always. A WINDOW block has
 * problems = windows (row-major over the shifted, padded grid) of Tq = Tk = M^2 rows, row r of
 * window w being grid token acts.tok[l][w * M^2 + r] (or a pad slot, -1: its q, k, v are the
 * qkv bias; pad keys are not masked and receive weight, pad query rows are kept in the map).
 * q, k and tokens are per grid token in the UNSHIFTED row-major order t = y * gw + x. */

typedef struct {
    float **attn;   /* [l]: (B, H, problems, Tq, Tk) the map that multiplies the values (or x) */
    float **scores; /* [l]: (B, H, problems, Tq, Tk) what enters the softmax (WINDOW: scale q k^T
                       + relative position bias + shift mask, -100 across regions) */
    float **q;      /* [l]: (B, H, T, dq) dq = vit_qk_head_dim (0: block has none); unscaled */
    float **k;      /* [l]: (B, H, T, dq) keys (x itself for LSLA) */
    float **tokens; /* [l]: (B, T, D) block output */
    float **extra[VIT_MAX_EXTRAS]; /* [i][l]: (B, heads, T, T), see vit_extra_info */
    uint16_t **attn16; /* [l]: attn's map as IEEE binary16, converted by the engine as soon as
                          each problem's map is final, while it is in cache; only where
                          vit_attn16_ok(c, l), and attn[l] must then be NULL */
    float *pool_attn; /* (B, H, Np): the attention pooling's map (global_pool "map"), its learnt
                         latent query over the Np patch tokens; NULL skips */
    size_t attn16_stride; /* values from one head's binary16 map to the next (0: T * T, packed);
                             the trace writer pads each map to a 4096-byte boundary so that it
                             can be written to disk without the page cache (O_DIRECT) */
    int local_maps;   /* 1: blocks where every head is local (vit_local_side, core/local.h) record
                         attn and scores as local records (B, H, T, S^2 + 1); 0: dense maps */
} vit_record;

/* How many blocks' attention an inference forward with a pack (core/gemm.h) runs fused in
 * core/attn_kernel.c on this CPU: a monolithic ViT's blocks of plain mechanisms (vit_mech_plain);
 * 0 without AVX-512F. Their bits are that kernel's, not OpenBLAS's (traces say so: linear_gemm). */
int vit_attn_fused_blocks(const vit_config *c);

/* 1 when the forward can record block l's attn map as binary16 itself (vit_record.attn16):
 * the blocks of a monolithic ViT; the staged forwards (Swin, PVT v2, CaiT) record float32. */
int vit_attn16_ok(const vit_config *c, int l);

/* The mechanism's intermediate maps of block l (LSLA: the softmax before the outer bias;
 * Refiner: the expanded and the convolved maps). Returns 0 when block l has no extra i. */
typedef struct {
    const char *name;
    int heads;
    const char *description;
} vit_extra;
int vit_extra_info(const vit_config *c, int l, int i, vit_extra *out);

/* A mechanism's learnt tensors of block l as figures want them (LSLA biases expanded to full
 * (H, T, T) tables whatever their parametrisation, MaiT's 0/1 keep mask, ...). Returns 0 when
 * block l has no static i; out may be NULL to ask for the shape. */
typedef struct {
    const char *name;
    int ndim;
    int shape[3];
    const char *description;
} vit_static;
int vit_static_info(const vit_config *c, int l, int i, vit_static *out);
void vit_static_fill(const vit_config *c, const vit_params *p, int l, int i, float *out);

/* Checks values the shapes cannot (MaiT alphas in (0, 1)). Returns 0 and names the problem in
 * msg when one is wrong. */
int vit_params_check(const vit_config *c, const vit_params *p, char *msg, size_t n);

/* Runs n <= a->B images: (n, C, S, S) normalised float input; logits land in a->logits.
 * With a->tape set (training), every block's activations land in the tape and rec must be
 * NULL. */
void vit_forward(const vit_config *c, const vit_params *p, vit_acts *a, const float *images,
                 int n, const vit_record *rec);

/* timm's resample_abs_pos_embed: F.interpolate(mode="bicubic", antialias=True) of the patch
 * part from a gs_in x gs_in to a gs_out x gs_out grid; prefix rows are copied.
 * out: (prefix + gs_out^2, D); in: (prefix + gs_in^2, D). Returns 0 when out of memory (it
 * allocates a (gs_in, gs_out, D) intermediate: a load-time function, not a kernel). */
int vit_resample_pos_embed(float *out, const float *in, int prefix, int gs_in, int gs_out, int D);

/* Swin's relative position bias of an M x M window, as every head adds it to its scores:
 * out (H, M^2, M^2)[h][i][j] = table[(yi - yj + M - 1)(2M - 1) + (xi - xj + M - 1)][h] for
 * window rows i = yi M + xi; table is the block's ((2M - 1)^2, H) relative_position_bias_table. */
void vit_relative_bias_expand(float *out, const float *table, int H, int M);

#endif
