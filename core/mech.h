/* mech.h: attention mechanisms as modules. Each mechanism (core/mech/<name>.c) exports one
 * vit_mech descriptor; core/mech/registry.c lists them, indexed by vit_attn_kind. The frame
 * (core/vit.c forward, core/train.c backward, core/config.c, io/model.c, io/trace.c) loops over
 * the descriptor's hooks and keeps what every mechanism shares in one place: the q k^T product,
 * the softmax, A v, the output projection, the bias helpers. Internal to core/ and io/.
 *
 * Usage (the frame's view of one block l):
 *     const vit_mech *m = vit_mech_of(c, l);
 *     m->specs(&blk, &sink);                 // "blocks.3" + ".attn.q.weight", ...
 *     vit_attn_problem p = {...};            // one head's queries over its keys
 *     m->scores(&blk, &p, S);                // after S = scale q k^T (or instead of it)
 *     kernels_softmax_rows(S, p.Tq, p.Tk);
 *     m->after_softmax(&blk, &p, S);
 * (a module with VIT_MECH_PLAIN has no hooks: the inference forward then runs the product, the
 * softmax and A v fused in kernels_attn_rows, core/attn_kernel.c).
 * Adding a mechanism: docs/models.md, "Adding a mechanism". */
#ifndef AS_MECH_H
#define AS_MECH_H

#include <stddef.h>

#include "config.h"
#include "local.h"
#include "train.h"
#include "vit.h"

/* ---- one attention problem -------------------------------------------------------------------
 * One head's Tq queries over Tk keys, wherever they come from: GLOBAL scope, the T tokens of an
 * image (Tq = Tk = T, grid = the patch grid); WINDOW scope, one M x M window (Tq = Tk = M^2,
 * grid M x M, no prefix) whose q/k/v rows the frame gathered into a contiguous block. Per-head
 * hooks see only this, never the whole model's token layout. */
typedef struct {
    int Tq, Tk;          /* queries and keys of the problem */
    int prefix;          /* class/distillation rows and columns ahead of the grid (0 in windows) */
    int gh, gw;          /* the query grid (MaiT's masks, relative tables: the window side) */
    int H, h;            /* heads of the block and this head */
    int dq;              /* q/k width per head (0 without keys) */
    float scale;         /* the scale the frame multiplied into q k^T */
    const float *q, *k, *v; /* this head's rows (NULL where the mechanism has none) */
    int ldq, ldk, ldv;   /* row strides of q, k, v */
    const float *prev;   /* reuses-scores mechanisms: the previous block's (Tq, Tk) scores; a
                          * carrying one: the carried map, or NULL (vit_mech_reads_prev) */
    float *keep;         /* (Tq, Tk) scores handed to a following reuse block (scratch for one),
                          * or a carrying block's map (VIT_MECH_CARRY), or NULL */
    float *extra[VIT_MAX_EXTRAS]; /* per-head extras to record ((Tq, Tk) each), or NULL */
    /* (Tq, Tk) terms the frame adds AFTER the mechanism's scores hook and before the softmax
     * (WINDOW scope: Swin's relative position bias of this head, then the window's shift mask),
     * or NULL. After the hook, so LSLA's DS multiplies q x^T alone and Swin's terms stay as
     * Swin adds them to a finished score. */
    const float *add_bias, *add_mask;
    /* SRA scope (PVT v2): the keys' grid kgh x kgw (Tk = kgh kgw, the queries' grid gh x gw);
     * 0 elsewhere (the keys are the queries' tokens) */
    int kgh, kgw;
} vit_attn_problem;

/* What a hook knows about its block besides the problem. */
typedef struct {
    const vit_config *c;
    int l;                     /* block index over the whole model */
    const vit_attn *at;        /* &c->attn[l] */
    const vit_block_params *bp; /* the block's weights (NULL where only shapes matter) */
    const vit_geom *g;         /* the block's geometry (scope, grid, problems) */
} vit_mech_block;

/* ---- projections and head views, as data ------------------------------------------------------
 * A mechanism lists its projections of the normalised input xn into the (rows, W) buffer qkv
 * (vit_widths' W) and where each head's q, k and v come from: a column of qkv or of xn itself
 * (LSLA's keys). The forward and the backward (gradients mirror the views) both read this. */
typedef enum { VIT_SRC_NONE = 0, VIT_SRC_QKV, VIT_SRC_X } vit_mech_src;
typedef struct {
    size_t w, b;  /* offsetof the weight (out, D) and bias (out) pointers in vit_block_params */
    int col, out; /* first column in qkv and output width */
} vit_mech_proj;
typedef struct {
    int W;                /* qkv row width */
    int n_proj;
    vit_mech_proj proj[3];
    vit_mech_src src[3];  /* q, k, v */
    int col[3];           /* their first column (head h adds h * width) */
} vit_mech_layout;

/* A projection's weight or bias pointer in bp by its offset (vit_mech_proj's w, b). */
static inline const float *vit_mech_weight(const vit_block_params *bp, size_t off) {
    return *(const float *const *)(const void *)((const char *)bp + off);
}

/* ---- config keys -------------------------------------------------------------------------------
 * A key's value as io/model.c hands it over (core knows no JSON library). */
typedef enum { VIT_MV_NUMBER = 0, VIT_MV_BOOL, VIT_MV_STRING, VIT_MV_NUMBERS, VIT_MV_ARRAY, VIT_MV_OTHER } vit_mv_type;
typedef struct {
    vit_mv_type type;
    double num;          /* NUMBER */
    int boolean;         /* BOOL */
    const char *str;     /* STRING */
    const double *nums;  /* NUMBERS: an array of numbers only */
    int count;           /* NUMBERS, ARRAY (an array holding something else) */
} vit_mv;
/* The keys of one "attention" entry: vit_mech_get(e, "qk_dim") or NULL when absent. */
typedef struct {
    int n;
    const char *const *keys;
    const vit_mv *values;
} vit_mech_entry;
const vit_mv *vit_mech_get(const vit_mech_entry *e, const char *key);
typedef struct {
    const char *name, *doc; /* doc: one line for docs and help */
} vit_mech_key;
/* Where a mechanism writes its settings back (io/model.c: JSON; io/trace.c: HDF5 attributes,
 * where num and nums are integers). */
typedef struct vit_mech_writer {
    void *ctx;
    int failed;  /* set by a writer that could not write */
    void (*num)(struct vit_mech_writer *w, const char *key, double v);
    void (*floats)(struct vit_mech_writer *w, const char *key, const float *v, int n);
    void (*boolean)(struct vit_mech_writer *w, const char *key, int v);
    void (*str)(struct vit_mech_writer *w, const char *key, const char *v);
    void (*nums)(struct vit_mech_writer *w, const char *key, const double *v, int n);
} vit_mech_writer;

/* ---- parameter specs -------------------------------------------------------------------------
 * The frame gives the block's name prefix ("blocks.3" today, "layers.1.blocks.0" for Swin); a
 * mechanism appends its suffixes (".attn.q.weight"). */
typedef struct {
    vit_tensor_spec *specs;
    int max, *n;
    char prefix[64];
} vit_spec_sink;
void vit_mech_spec(vit_spec_sink *s, const float **slot, const char *suffix, int ndim, const int *shape);
/* A BatchNorm2d's four tensors "<name>.weight", ".bias", ".running_mean", ".running_var" (C each;
 * the statistics as buffers) into bn[0..3]. */
void vit_mech_bn_specs(vit_spec_sink *s, const float **bn, const char *name, int C);
#define VIT_MECH_SPEC(sink, slot, suffix, ...)                                                 \
    do {                                                                                       \
        const int shape_[] = {__VA_ARGS__};                                                    \
        vit_mech_spec((sink), (slot), (suffix), (int)(sizeof shape_ / sizeof shape_[0]), shape_); \
    } while (0)

/* ---- backward of one head --------------------------------------------------------------------
 * In: dS, the gradient of the scores that entered the softmax. A hook either leaves in dR and s
 * the gradient of the raw product q k^T and its scale (the frame then forms dq and dk), or sets
 * dR NULL when it handled everything (reuse mechanisms without keys). */
typedef struct {
    const vit_attn_problem *p;
    float *dA;       /* (Tq, Tk) gradient of the map after softmax and any map work */
    float *dS;       /* (Tq, Tk) gradient of the scores */
    float *X, *Y;    /* (Tq, Tk) scratch of this head's slot, kept for the block hook */
    double *scal;    /* this head's slot of ws->scal */
    float *dprev;    /* reuse mechanisms: (Tq, Tk) gradient of the previous scores */
    const float *raw; /* (Tq, Tk) the scores as the forward's scores hook received them, where
                       * they are not scale q k^T (CaiT's mixed logits); NULL: scale q k^T */
    const float *dR; /* out: gradient of the raw q k^T product */
    float s;         /* out: its scale */
} vit_mech_head_bwd;

/* Flags. */
enum {
    VIT_MECH_REUSES_SCORES = 1 << 0, /* reads the previous block's scores (LaViT's less) */
    VIT_MECH_DP_TERM = 1 << 1,       /* LaViT's diagonality term applies to its maps in training */
    VIT_MECH_WS_DY = 1 << 2,         /* its backward uses ws->dY */
    VIT_MECH_NO_SCALE = 1 << 3,      /* the "scale" key does not apply */
    VIT_MECH_SOFTMAX_EXTRA0 = 1 << 4, /* after_softmax changes the map; extra 0 keeps the softmax */
    /* A map carried from block to block (the Refiner release): the block reads, as p->prev, the
     * keep of the block before when that one carries too (none after any other block or in the
     * first), and leaves its own in p->keep for the next. */
    VIT_MECH_CARRY = 1 << 5,
    VIT_MECH_NO_SOFTMAX = 1 << 6, /* the scores hook makes the map itself: no softmax (dS = dA) */
    VIT_MECH_KEEPS_MAP = 1 << 7,  /* p->keep is the block's final map, not its scores: the next
                                     block's gradient of it joins dA, before the softmax's backward */
    /* Its problems are plain softmax(scale q k^T) v (no scores, after_softmax or maps hook, none
     * of the flags above that carry or reuse maps): an inference forward may run them fused in
     * core/attn_kernel.c instead of the frame's per-problem step (vit_mech_plain). Opt-in, so
     * that a new hook never runs fused by accident. */
    VIT_MECH_PLAIN = 1 << 8,
    /* Its params_backward reads no problem's ws->dA or ws->dS (only ws->scal): in training each
     * problem's dA and dS may then live in a per-thread buffer that stays in cache, instead of
     * the whole batch's (vit_attn_backward, where its caller does not read them either).
     * Mechanisms without params_backward need no flag. */
    VIT_MECH_PARAMS_NO_MAPS = 1 << 9,
};

typedef struct vit_mech {
    const char *name;    /* as in configs and traces: "lsla" */
    const char *summary; /* one line: what it computes (docs, and the frame's messages) */
    unsigned flags;
    unsigned scopes;     /* bit (1 << vit_scope) for each scope it can run in */
    const vit_mech_key *keys; /* its own config keys ("type", "blocks", "scale" are the frame's) */
    int n_keys;

    /* Settings: defaults before the keys, then the keys of one entry into a (0 with a one-line
     * message naming the key), and back out. H is the block's head count. */
    void (*defaults)(vit_attn *a);
    int (*parse)(vit_attn *a, const vit_mech_entry *e, int H, char *msg, size_t n);
    void (*write)(const vit_config *c, int l, vit_mech_writer *w);
    /* Everything its forward relies on, for block l in geometry g; the message names the fix.
     * The frame has checked the scope, the kind and "scale" already. */
    as_status (*validate)(const vit_config *c, int l, const vit_geom *g, as_error *err);
    /* A setting of block l that acts nowhere in c (a valid config): 1 and what to remove in msg.
     * Checked on configs a user writes (model_config_apply_json), not on those attnscope stored
     * with a checkpoint or trace, which older versions wrote with such settings. NULL: none. */
    int (*no_effect)(const vit_config *c, int l, char *msg, size_t n);
    /* 1 when block l's head_backward uses x->X (a problem's (Tq, Tk) scratch, ws->dX) and x->scal
     * (ws->scal): the monolithic ViT and CaiT always carve them, the window frame only where this
     * says so. NULL: never. */
    int (*uses_ws_x)(const vit_config *c, int l);
    /* Appends its settings to buf after the name (" qk_dim=8 (2 per head)"). */
    void (*describe)(const vit_config *c, int l, char *buf, size_t n);
    /* Shapes. */
    int (*qk_head_dim)(const vit_config *c, int l); /* NULL: D / H (0 when the layout has no keys) */
    int (*map_heads)(const vit_config *c, int l);   /* widest map; NULL: H */
    int (*has_proj)(const vit_attn *a);             /* output projection; NULL: yes */
    float (*product_scale)(const vit_config *c, int l); /* scale of q k^T; NULL: vit_attn_scale */
    void (*layout)(const vit_config *c, int l, vit_mech_layout *out);
    /* Its tensors (before the frame's proj). */
    void (*specs)(const vit_mech_block *b, vit_block_params *bp, vit_spec_sink *s);

    /* Head h of block l gives every query an R x R neighbourhood of scale q k^T scores and one
     * constant score outside it (MaiT's zero and neg_inf masks): 1 and *out, else 0. The frame
     * then computes a staged model's GLOBAL problem in O(T R^2) (core/local.h) without the
     * scores hook, and records the map in its local form. NULL: never. */
    int (*local)(const vit_config *c, int l, int h, vit_local *out);

    /* Forward, per problem: scores (after the frame's scale q k^T when it has keys, else
     * instead of it), then after the softmax. NULL: nothing. */
    void (*scores)(const vit_mech_block *b, const vit_attn_problem *p, float *S);
    void (*after_softmax)(const vit_mech_block *b, const vit_attn_problem *p, float *A);
    /* Forward, per image, on all heads' maps after the softmax (Refiner): A (H, Tq, Tk) in and
     * out, ext[i] (map_heads, Tq, Tk) its extras. NULL: none; with one, training keeps the
     * softmax maps in the tape's soft. */
    void (*maps)(const vit_mech_block *b, float *A, float *const *ext, int Tq, int Tk);

    /* Backward. maps_backward: the whole block's map work (n images) from ws->dA back to the
     * softmax maps' gradient, weight gradients into gb. head_backward: per problem (see
     * vit_mech_head_bwd). params_backward: the block's small tensors' gradients from the slots
     * head_backward left, summed over images in order. NULL: nothing. */
    void (*maps_backward)(const vit_mech_block *b, const vit_block_params *gb, const vit_tape_block *t,
                          vit_grad_ws *ws, int n, int Tq, int Tk);
    void (*head_backward)(const vit_mech_block *b, vit_mech_head_bwd *x);
    void (*params_backward)(const vit_mech_block *b, const vit_block_params *gb, const vit_tape *tape,
                            vit_grad_ws *ws, int n, int Tq, int Tk);
    size_t (*part_floats)(const vit_config *c, int l); /* per-image floats of ws->part */

    /* Cost of one block (projections, scores, map work) per image; the frame adds A v and proj. */
    void (*cost)(const vit_config *c, int l, const vit_geom *g, vit_cost_part *o);
    /* Recorded internals: extra i (vit_extra_info), static tensors (vit_static_info/fill), value
     * checks (vit_params_check). Return 0 past the last. */
    int (*extra)(const vit_config *c, int l, int i, vit_extra *out);
    int (*statics)(const vit_config *c, int l, vit_static *out); /* fills up to 4, returns count */
    void (*static_fill)(const vit_config *c, const vit_params *p, int l, int i, float *out);
    int (*check)(const vit_config *c, const vit_params *p, int l, char *msg, size_t n);
    /* Trace: its layer attributes (through w, as keys) and what its records mean (NULL: the
     * frame's text). */
    void (*trace_attrs)(const vit_config *c, const vit_params *p, int l, vit_mech_writer *w);
    const char *attn_doc, *scores_doc, *k_doc;
    /* Why block l's maps (attn) are not row-stochastic by construction, for an analysis's note
     * ("Refiner refines the softmax maps"), or NULL where they are. NULL hook: they are. */
    const char *(*not_stochastic)(const vit_config *c, int l);
} vit_mech;

/* The registry (core/mech/registry.c). */
const vit_mech *vit_mech_get_kind(vit_attn_kind k); /* NULL for an unknown kind */
const vit_mech *vit_mech_of(const vit_config *c, int l);
int vit_mech_count(void);
/* Some block's mechanism has flag f / block l + 1 reads block l's keep (vit_mech_reads_prev). */
int vit_mech_any(const vit_config *c, unsigned f);
int vit_mech_next_reuses(const vit_config *c, int l);
/* Block l reads the previous block's keep (p->prev): less-attention, or a carrying block after
 * another one. */
int vit_mech_reads_prev(const vit_config *c, int l);
/* The most per-image floats of ws->part any block needs (the stride of ws->part). */
size_t vit_mech_part_floats(const vit_config *c);
void vit_mech_block_at(vit_mech_block *b, const vit_config *c, int l, const vit_block_params *bp,
                       vit_geom *g);

/* The query grid of one problem of block geometry g: the patch grid (GLOBAL) or the window. */
static inline void vit_mech_problem_grid(const vit_geom *g, int *gh, int *gw) {
    *gh = g->scope == VIT_SCOPE_WINDOW ? g->M : g->gh;
    *gw = g->scope == VIT_SCOPE_WINDOW ? g->M : g->gw;
}

/* ---- the frame's per-problem step (any scope) -------------------------------------------------
 * One problem from q, k to the map that multiplies the values, in A (Tq, Tk): the scaled q k^T
 * (when the mechanism has keys; p->scale), the mechanism's scores hook, p->add_bias and
 * p->add_mask (in that order, when not NULL), a copy to p->keep, the
 * pre-softmax scores to `scores` when not NULL, the softmax, the after_softmax hook. GLOBAL
 * blocks call it per (image, head); WINDOW blocks per (window, head) on gathered rows. */
void vit_mech_problem_forward(const vit_mech *m, const vit_mech_block *b, const vit_attn_problem *p,
                              float *A, float *scores);
/* 1 when m says its problems are plain softmax(scale q k^T) v (VIT_MECH_PLAIN) and has none of
 * the hooks or flags that would contradict it. Such problems may run in kernels_attn_rows
 * instead of vit_mech_problem_forward (the inference forward does). */
int vit_mech_plain(const vit_mech *m);

/* ---- shared pieces the modules use (the frame's, written once) ------------------------------ */
/* Score entries of one head over all problems of an image (T^2 in GLOBAL scope): what costs
 * per map entry multiply. */
static inline double vit_mech_score_entries(const vit_geom *g) { return (double)g->problems * g->Tq * g->Tk; }
/* Rows the projections of an image run over (what per-token costs multiply): T in GLOBAL scope,
 * every window slot, padding included, in WINDOW scope (timm pads before the projection). */
static inline double vit_mech_rows(const vit_geom *g) { return (double)g->problems * g->Tq; }
/* o[k] += params, macs; flops += 2 macs + other. */
void vit_cost_add(vit_cost_part *o, vit_component k, double params, double macs, double other);
/* Score entries of all heads of block l over an image: H x vit_mech_score_entries, except
 * that a local head (vit_local_head) has only its neighbourhoods' (vit_local_pairs). */
double vit_mech_head_entries(const vit_config *c, int l, const vit_geom *g);
/* The fused qkv projection: its layout, specs and cost (vanilla, MaiT, Refiner). */
void vit_mech_fused_layout(const vit_config *c, int l, vit_mech_layout *out);
void vit_mech_fused_specs(const vit_mech_block *b, vit_block_params *bp, vit_spec_sink *s);
void vit_mech_fused_cost(const vit_config *c, int l, const vit_geom *g, vit_cost_part *o);
/* The statics of a Refiner block (refiner, refiner_shared): i = 0 expand (H', H), 1 the dla
 * kernels (H', k, k), 2 reduce (H, H'), copied from block l's weights. */
void vit_mech_dla_static_fill(const vit_config *c, const vit_params *p, int l, int i, float *out);
/* "%s: block %d: " prefix helper: the model's name for messages. */
const char *vit_mech_model_name(const vit_config *c);
/* An integer value in [lo, hi] into *out. */
int vit_mv_int(const vit_mv *v, int lo, int hi, int *out);

#endif
