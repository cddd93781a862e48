/* attn_ops.h: the pieces of the attention mechanisms that the forward pass (vit.c) and the
 * backward pass (train.c) share. Internal to core/. */
#ifndef AS_ATTN_OPS_H
#define AS_ATTN_OPS_H

#include "config.h"

/* A (T, T) += head h's bias: a full (H, T, T) table, or a Swin relative ((2M-1)^2, H) table
 * for an M x M window of tokens. */
void vit_add_bias(float *A, const float *bias, vit_bias_kind kind, int H, int h, int T, int M);

/* MaiT: head h's mask applied to A (T, T): entries outside the R x R neighbourhood of the query
 * patch become 0 (zero), alpha[h] * A (soft) or -inf (neg_inf). Prefix rows and columns stay. */
void vit_mait_apply(float *A, const vit_attn *at, const float *alpha, int h, int T, int prefix,
                    int G);

#endif
