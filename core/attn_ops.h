/* attn_ops.h: the frame's bias helper that mechanism modules (core/mech/) share (LSLA's inner
 * and outer biases today, Swin's relative position bias next). Internal to core/. */
#ifndef AS_ATTN_OPS_H
#define AS_ATTN_OPS_H

#include "config.h"

/* A (T, T) += head h's bias: a full (H, T, T) table, or a Swin relative ((2M-1)^2, H) table
 * for an M x M window of tokens. */
void vit_add_bias(float *A, const float *bias, vit_bias_kind kind, int H, int h, int T, int M);
/* Entry (i, j) of head h's bias, as vit_add_bias adds it (0 for VIT_BIAS_NONE). */
float vit_bias_at(const float *bias, vit_bias_kind kind, int H, int h, int T, int M, int i, int j);
/* Its backward: gbias (laid out as bias) += head h's (T, T) gradient g through the same map. */
void vit_add_bias_backward(float *gbias, const float *g, vit_bias_kind kind, int H, int h, int T, int M);

#endif
