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

/* Refiner's k x k convolution of a (T, T) map with zero padding k / 2, one tap (u, v) at a
 * time: out[i][j] += w[u][v] * in[i + dy][j + dx] for i in [i0, i1), j in [j0, j1). */
typedef struct {
    int dy, dx, i0, i1, j0, j1;
} vit_conv_tap;

static inline vit_conv_tap vit_conv_tap_at(int T, int k, int u, int v) {
    const int dy = u - k / 2, dx = v - k / 2;
    return (vit_conv_tap){dy, dx, dy < 0 ? -dy : 0, dy > 0 ? T - dy : T, dx < 0 ? -dx : 0, dx > 0 ? T - dx : T};
}

#endif
