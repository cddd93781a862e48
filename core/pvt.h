/* pvt.h: PVT v2's pieces of the staged forward (core/pvt.c), called from stage.c and config.c.
 * Internal to core/. */
#ifndef AS_PVT_H
#define AS_PVT_H

#include "mech.h"
#include "stage.h"

/* Floats per image of PVT v2's buffers (maxima over the stages and blocks). */
typedef struct {
    size_t stem_col;  /* the stem's im2col (T0, in_chans k^2) */
    size_t down_col;  /* a downsample's im2col (T_s, 9 C_{s-1}) */
    size_t sr_col, xr, kv, hid2; /* vit_acts' PVT buffers */
    size_t ar_src, ar_mid, ar_out; /* LaViT's attention residual: source, conv/norm, output */
} pvt_need;
void pvt_acts_need(const vit_config *c, pvt_need *z);

/* im2col of a convolution (kernel k, stride s, zero pad p) over x, element (b, y, x, ch) at
 * b sb + y sy + x sx + ch sc (NHWC or NCHW alike): col (n Ho Wo, C k k) in PyTorch's (ch, ky, kx)
 * order, so a (Cout, C, k, k) weight multiplies it as it is stored. */
void pvt_im2col(float *col, const float *x, int n, int H, int W, int C, size_t sb, size_t sy, size_t sx,
                size_t sc, int k, int s, int p);

/* The inverse gather of pvt_im2col over an NHWC x (n, H, W, C): dx = the sum, for each input
 * element, of the col entries that copied it (written, or added with accumulate). Each element
 * sums its own taps in order, so the result does not depend on the thread count. */
void pvt_col2im(float *dx, const float *dcol, int n, int H, int W, int C, int k, int s, int p, int accumulate);
/* The linear variant's AdaptiveAvgPool2d(7) of x (n, gh, gw, D) into out (n, 49, D); with
 * backward, x is the bins' gradient (n, 49, D) and out (n, gh, gw, D) each token's (written). */
void pvt_adaptive_pool(float *out, const float *x, int n, int gh, int gw, int D, int backward);

/* Block l's total q/k width: C, or LMSA's compressed qk_dim (heads x vit_qk_head_dim); 0 for a
 * block without keys (less-attention: its kv rows are v alone). */
int pvt_q_width(const vit_config *c, int l);

int pvt_param_specs(const vit_config *c, vit_params *p, vit_tensor_spec *specs, int max);
/* Stem (Conv2d k, s = patch_size, p = k / 2, then LN) of images (n, C, S, S) into a->x. */
void pvt_stem(const vit_config *c, const vit_params *p, vit_acts *a, const float *images, int n);
/* Stage s's Conv2d(k3, s2, p1) + LN of a->x (n, gh, gw, C_{s-1}) into a->x (PVT v2, and CSwin's
 * Merge_Block in a Swin: stage.c), the LN's eps pvt_down_eps: conv_ln_eps (PVT v2) or ln_eps. */
float pvt_down_eps(const vit_config *c);
void pvt_downsample(const vit_config *c, int s, const vit_params *p, vit_acts *a, int n, int gh, int gw);
/* One SRA block on a->x (n, T, D) in place, recording into rec. */
void pvt_block(const vit_config *c, int l, const vit_geom *g, const vit_block_params *bp, vit_acts *a,
               int n, const vit_record *rec);
/* LaViT's attention residual into stage s >= 1 (c->attn_residual): a->ar_out (n, h, Tq, T')
 * from the previous stage's last block's scores or maps in a->ar_src (n, h', Tq', T'). A
 * training forward keeps its intermediates in the tape. */
void pvt_attn_residual(const vit_config *c, int s, const vit_params *p, vit_acts *a, int n);
/* Block l is the last of a stage whose successor takes the attention residual. */
int pvt_feeds_ar(const vit_config *c, int l);

/* The LayerNorm closing stage s (T tokens per image). */
void pvt_stage_end(const vit_config *c, int s, const vit_params *p, vit_acts *a, int n, int T);

/* Training (pvt_train.c; stage_train.c dispatches here for PVT v2). */
size_t pvt_tape_carve(const vit_config *c, int B, void *base, vit_tape *t);
size_t pvt_grad_ws_carve(const vit_config *c, int B, void *base, vit_grad_ws *ws);
double pvt_backward(const vit_config *c, const vit_params *p, const vit_params *g, vit_acts *a,
                    vit_grad_ws *ws, const float *dlogits, int n, float dp_weight, vit_dp_loss dp_loss);

/* Stage s's downsampling (pvt_downsample) in reverse: from ws->dx, the gradient of stage s's
 * input grid (n, T_s, C_s), to the previous grid's (n, T_{s-1}, C_{s-1}) in ws->dx (written),
 * adding the conv's and LayerNorm's weight gradients; uses ws->dao, col, dcol, ones and the
 * tape's down_in and down_pre. */
void pvt_downsample_backward(const vit_config *c, int s, const vit_params *p, const vit_params *g,
                             const vit_tape *tape, vit_grad_ws *ws, int n);

void pvt_stem_cost(const vit_config *c, vit_cost_part *o);
/* Stage s's downsampling conv and LayerNorm (PVT v2's, and CSwin's merge in a Swin). */
void pvt_downsample_cost(const vit_config *c, int s, vit_cost_part *o);
void pvt_stage_cost(const vit_config *c, int s, vit_cost_part *o);
as_status pvt_validate(const vit_config *c, as_error *err);

#endif
