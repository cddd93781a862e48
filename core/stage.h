/* stage.h: the staged forward pass (stem, Swin's patch merging, blocks whose attention runs as
 * independent problems: windows, or one global problem) and the pieces of vit.c it shares.
 * Internal to core/; vit.h's functions dispatch here when c->n_stages > 0. */
#ifndef AS_STAGE_H
#define AS_STAGE_H

#include "mech.h"
#include "train.h"
#include "vit.h"

/* vit_param_specs, vit_acts_carve and vit_forward of a staged model (stage.c). */
int vit_stage_param_specs(const vit_config *c, vit_params *p, vit_tensor_spec *specs, int max);
size_t vit_stage_acts_carve(const vit_config *c, int B, void *base, vit_acts *a);
void vit_stage_forward(const vit_config *c, const vit_params *p, vit_acts *a, const float *images,
                       int n, const vit_record *rec);

/* Training a staged model (stage_train.c; vit_tape_carve, vit_grad_ws_carve and vit_backward
 * dispatch here; train.h's vit_stage_untrainable says what it covers). */
size_t vit_stage_tape_carve(const vit_config *c, int B, void *base, vit_tape *t);
size_t vit_stage_grad_ws_carve(const vit_config *c, int B, void *base, vit_grad_ws *ws);
double vit_stage_backward(const vit_config *c, const vit_params *p, const vit_params *g, vit_acts *a,
                          vit_grad_ws *ws, const float *dlogits, int n, float dp_weight, vit_dp_loss dp_loss);
/* The geometry of stage s's first block (its grid, width, heads; stage.c). */
void vit_stage_grid(const vit_config *c, int s, vit_geom *g);
/* The mean-pooled head in reverse (stage_train.c): head_w, head_b += their gradients, ws->dpool
 * (n, D) = the pooled features' gradient, and dtok (n, T, D) = its share of each of the T
 * tokens averaged. */
void vit_stage_head_backward(const vit_config *c, const vit_params *p, const vit_params *g, const vit_acts *a,
                             vit_grad_ws *ws, const float *dlogits, int n, int T, int D, float *dtok);
/* A block's tail backward (train.c), over rows rows of width D (the tape's block t):
 * (D wide, Hm hidden):
 * vit_mlp_backward: x_out = x_mid + [gamma2 *] fc2(act(fc1(norm2(x_mid)))), from dx,
 *   the gradient of x_out, to x_mid's (in place), with ws->dao, dxn and dhid as scratch;
 * vit_proj_backward: x_mid = x_in + [gamma1 *] proj(ao), from dx, the gradient of x_mid, to ao's
 *   in ws->dao, with ws->dxn as scratch (x_in's residual share stays in dx).
 * Both add the branch's weight gradients (LayerScale's gamma included) into gb. */
void vit_mlp_backward(const vit_config *c, const vit_block_params *bp, const vit_block_params *gb,
                      const vit_tape_block *t, vit_grad_ws *ws, float *dx, int rows, int D, int Hm);
void vit_proj_backward(const vit_config *c, const vit_block_params *bp, const vit_block_params *gb,
                       const vit_tape_block *t, vit_grad_ws *ws, const float *dx, int rows, int D);
/* kernels_layernorm_backward's scratch floats for rows of width d. */
size_t vit_ln_scratch_floats(size_t rows, size_t d);
/* train.c's Linear backward: dW (N, K) += dy^T x, db += column sums of dy, dx (M, K) = (or +=)
 * dy W, with the rows of dy ldy and of x ldx floats apart. */
void vit_linear_backward(float *dW, float *db, float *dx, int dx_accumulate, const float *dy, int ldy,
                         const float *x, int ldx, const float *W, int M, int N, int K, const float *ones);

/* Head h of image b of an (n, rows, ld) buffer starts at base + (b rows) ld + h width. */
typedef struct {
    float *base; /* NULL: no such view */
    int rows, ld, width;
} vit_hview;

/* One block's attention backward from ws->dao (n, Tq, D) to the gradients of its q, k and v
 * views, for Tq queries over Tk keys per image (Tq = Tk = T in a ViT; PVT v2: T queries over
 * the T' reduced keys), the shared steps of every mechanism (train.c): dA = dao v^T,
 * dv = A^T dao, the map work's backward, the softmax backward, the gradient handed back by a
 * following score-reuse block, the mechanism's hook, dq = s dR k and dk = s dR^T q, and the
 * mechanism's small tensors. gk_add / gv_add: add into those views (they share rows with
 * another gradient) instead of writing them. LaViT's diagonality term applies where the
 * mechanism has it, dp_coef != 0 and the maps are square (Tq = Tk); returns its sum over the
 * block's maps before dp_coef, 0 otherwise. */
typedef struct {
    const vit_config *c;
    int l;
    const vit_block_params *bp, *gb;
    const vit_tape *tape;
    vit_grad_ws *ws;
    int n, Tq, Tk;
    vit_hview q, k, v;    /* the forward's views (the tape's) */
    vit_hview gq, gk, gv; /* their gradients */
    int gk_add, gv_add;
    float dp_coef;
    vit_dp_loss dp_loss;
    /* (n, H, Tq, Tk) gradients a later consumer of this block's maps (dA_add) or scores
     * (dS_add) hands back, or NULL: LaViT's attention residual reading them in the next stage */
    const float *dA_add, *dS_add;
    /* 1 when the caller reads neither ws->dA nor ws->dS after the call (PVT v2's attention
     * residual reads ws->dS): each problem's may then stay in a per-thread buffer, in cache */
    int maps_unread;
} vit_attn_bwd;
double vit_attn_backward(const vit_attn_bwd *j);

/* vit.c's carving of one buffer into 64-byte aligned float arrays: *view = base + *off when
 * both are given (base NULL only counts), *off advances by nfloats rounded up to 64 bytes,
 * which it returns. */
size_t vit_carve_floats(char *base, size_t *off, size_t nfloats, float **view);
/* The same for a training tape's block tail over `rows` rows: ao, x_mid, xn2 (rows, D), hpre, hid
 * (rows, Hm), and with LayerScale (ls) the two branch outputs (rows, D). */
void vit_carve_tape_tail(char *base, size_t *off, vit_tape_block *k, size_t rows, size_t D, size_t Hm, int ls);

/* vit.c's Linear over M rows (y (M, N) = x (M, K) w^T (N, K) + bias, accumulate adds to y)
 * and the stride = kernel patch im2col (patches (n, (S/P)^2, C P P), images (n, C, S, S)). */
void vit_linear(float *y, const float *x, const float *w, const float *bias, int M, int N, int K,
                int accumulate);
void vit_patchify(float *patches, const float *images, int n, int C, int S, int P);

/* One block's attention as problems (window.c): every (image, problem) pair is a job; a job
 * gathers its rows' q, k and v through tok (a pad slot, tok < 0, takes the qkv bias: its LN1
 * output is zero), computes per head S = scale q k^T + rpb_h + mask_w, the softmax, A v, and
 * scatters the output rows of real tokens to ao (pad rows are dropped). Jobs are independent,
 * so the bits do not depend on the thread count. */
typedef struct {
    int n, T, D, H;          /* images, tokens per image, width, heads (head width D / H) */
    int P, N;                /* problems per image, rows per problem (Tq = Tk = N) */
    const int *tok;          /* (P, N) grid token of each row, -1 for a pad slot */
    const float *mask;       /* (P, N, N) added after the bias, or NULL */
    const float *rpb;        /* (H, N, N) relative position bias, or NULL */
    const float *qkv;        /* (n, T, 3D) rows [q | k | v], each head-major */
    const float *qkv_b;      /* (3D) what a pad slot's row is, or NULL (zeros) */
    float scale;
    float *att;              /* (n, H, P, N, N) the softmax maps; NULL only where every head is
                                local (vit_local_side) and nothing wants the maps */
    float *scores;           /* (n, H, P, N, N) what entered the softmax, or NULL */
    int att_side;            /* S > 0: att and scores hold local records (n, H, N, S^2 + 1)
                                (local.h; every head is local); 0: dense maps */
    float *ao;               /* (n, T, D) attention output before proj */
    float *scratch;          /* slots x slot_floats (vit_window_scratch_floats) */
    int slots;
    size_t slot_floats;
    /* Any other mechanism (m not NULL): its layout says where q, k, v come from (columns of
     * qkv, rows lay->W apart, or of xn itself, rows D apart); each head runs through
     * vit_mech_problem_forward on the gathered rows with Tq = Tk = N, grid M x M, the bias and
     * mask as p.add_bias / p.add_mask. A pad slot's projected columns are that projection's
     * bias (its LN1 output is zero), its xn columns zero. NULL: vanilla's fused path above. */
    const vit_mech *m;
    const vit_mech_block *mb;
    const vit_mech_layout *lay;
    const vit_block_params *bp; /* the projections' biases, for pad slots */
    const float *xn;         /* (n, T, D) the LN1 output */
    int M, dq;               /* window side; q/k width per head */
    float *extra[VIT_MAX_EXTRAS]; /* (n, H, P, N, N) the mechanism's per-head extras, or NULL */
} vit_window_job;
/* Floats of one thread's slot for N rows of width D and q/k width per head dq. */
size_t vit_window_scratch_floats(int N, int D, int H, int dq);
/* vit.c's Linear into every ldy-th float (a projection's columns of a wider buffer). */
void vit_linear_ld(float *y, int ldy, const float *x, const float *w, const float *bias, int M, int N,
                   int K, int accumulate);
void vit_window_attention(const vit_window_job *j);
/* Row of view i (q, k or v of lay; cols wide from the view's first column) for grid token t of
 * image b, into dst: from qkv (rows lay->W apart) or xn (rows D apart), T tokens per image; a
 * pad slot (t < 0) has its LN1 output zero, so its projected columns are the biases of the
 * projections covering them and its xn columns zero. The forward's gather and the backward's
 * (stage_train.c) both read rows through it. */
void vit_window_view_row(const vit_mech_layout *lay, const vit_block_params *bp, const float *qkv,
                         const float *xn, int T, int D, int i, int b, int t, int cols, float *dst);

#endif
