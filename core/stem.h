/* stem.h: the convolutional stem (config.h's vit_conv list; core/stem.c): its geometry, weights,
 * cost, forward and backward, shared by the monolithic ViT (vit.c, train.c) and Swin (stage.c,
 * stage_train.c). Internal to core/. */
#ifndef AS_STEM_H
#define AS_STEM_H

#include "mech.h"
#include "train.h"
#include "vit.h"

/* The token grid side and where the tokens sit in pixels: token y's receptive field is centred
 * on pixel coordinate offset + stride y (the composition of every conv's k, s, p). */
void vit_stem_geom(const vit_config *c, int *grid, float *stride_px, float *offset_px);
/* The checks of vit_config_validate: sizes, limits, the last conv's width = width. */
as_status vit_stem_validate(const vit_config *c, int width, as_error *err);
/* The stem's tensor names against each other and the model's other tensors (a config's
 * conv_name / bn_name could repeat one): AS_OK, or a one-line refusal naming both. Runs on a
 * config vit_config_validate has otherwise accepted. */
as_status vit_stem_names_check(const vit_config *c, as_error *err);
/* The stem's tensors, in order (conv weight, bias, BatchNorm weight, bias, running mean and
 * variance; the running statistics are spec'd as buffers). */
void vit_stem_specs(const vit_config *c, vit_params *p, vit_spec_sink *k);
/* Parameters (buffers excluded) and MACs of the convs; the BatchNorm affine and activation as
 * plain flops. */
void vit_stem_cost(const vit_config *c, vit_cost_part *o);

/* Rows per block of the backward's per-channel partial sums: fixed, so that the sums' order,
 * and their bits, do not depend on the thread count. */
#define VIT_STEM_ROWS 64

/* Floats per image: conv 0's im2col (vit_acts' patches), the largest later im2col and the
 * largest conv output. */
typedef struct {
    size_t col0, col, map;
} vit_stem_need;
void vit_stem_need_of(const vit_config *c, vit_stem_need *z);
/* vit_acts' stem_col and stem_map (after patches, which the caller sizes with col0). */
void vit_stem_acts_carve(const vit_config *c, int B, char *base, size_t *off, vit_acts *a);
void vit_stem_tape_carve(const vit_config *c, int B, char *base, size_t *off, vit_tape *t);
void vit_stem_ws_carve(const vit_config *c, int B, char *base, size_t *off, vit_grad_ws *ws);

/* The stem on images (n, C, S, S): the tokens (G^2, C_last) of image b at out + b out_stride.
 * A training forward (a->tape) keeps each conv's output before its BatchNorm and after its
 * activation in the tape. */
void vit_stem_forward(const vit_config *c, const vit_params *p, vit_acts *a, const float *images, int n,
                      float *out, size_t out_stride);
/* In reverse, from dy, the tokens' gradient (image b's (G^2, C_last) at dy + b dy_stride): adds
 * every conv's weight and bias gradient and its BatchNorm's weight and bias gradient into g (the
 * running statistics get none). Reads the forward's tape and a->patches; uses a->stem_col. */
void vit_stem_backward(const vit_config *c, const vit_params *p, const vit_params *g, vit_acts *a,
                       vit_grad_ws *ws, const float *dy, size_t dy_stride, int n);

#endif
