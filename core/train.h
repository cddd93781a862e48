/* train.h: the backward pass of the ViT forward (every layer and mechanism of vit.c), the
 * training losses, and AdamW with a cosine schedule and gradient clipping. Plain functions over
 * caller-owned buffers, as vit.h; nothing here allocates.
 *
 * Usage (one step; cmd_train.c is the whole loop):
 *     vit_acts a;  vit_acts_carve(&cfg, B, arena, &a);   a.tape = &tape;   // vit_tape_carve
 *     vit_grad_ws ws;  vit_grad_ws_carve(&cfg, B, arena2, &ws);
 *     vit_forward(&cfg, &p, &a, x, n, NULL);                 // keeps every block in the tape
 *     double loss = vit_loss_ce(a.logits, y, n, C, 0.1f, dlogits, &correct);
 *     memset(grad_flat, 0, ...);                              // backward adds into grads
 *     loss += vit_backward(&cfg, &p, &g, &a, &ws, dlogits, n, 0.1f, VIT_DP_SQUARED); // + LaViT's
 *     float norm = optim_clip(grad_flat, count, 1.0f);
 *     optim_adamw_step(&opt, w, grad_flat, m, v, decay_mask, count, optim_lr(&sched, step));
 * g is a vit_params whose pointers point into writable gradient memory laid out like p
 * (vit_param_specs binds both). */
#ifndef AS_TRAIN_H
#define AS_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "vit.h"

/* Gradient tensors are bound like the weights (const float * in vit_params) but point into
 * memory the caller made writable: WR(g->x) is the writable view. */
#define WR(ptr) ((float *)(uintptr_t)(ptr))

/* Scratch for one backward pass over up to B images. */
typedef struct {
    int B;
    float *dx;      /* (B, T, D) gradient of the residual stream */
    float *dxn;     /* (B, T, D) gradient of a norm's output */
    float *ln_scratch; /* LayerNorm backward's per-block partial sums (kernels_layernorm_backward) */
    float *dqkv;    /* (B, T, W) gradient of the projections, laid out as the tape's qkv */
    float *dao;     /* (B, T, D) */
    float *dhid;    /* (B, T, Hm) */
    float *dA, *dS, *dX;  /* (B, max(H, H'), T, T) map gradients and scratch */
    float *dY;            /* (B, H, T, T) LSLA: the gradient of q x^T; LaViT: per-image dPsi */
    float *dkeep[2];      /* (B, H, T, T) gradient of scores handed to a less-attention block */
    float *dext[VIT_MAX_EXTRAS]; /* Refiner: (B, H', T, T) expanded and convolved gradients */
    float *part;    /* (B, P) per-image partial gradients of the small mechanism tensors */
    double *scal;   /* (B * H) per-(image, head) partial sums (MaiT soft alpha) */
    float *dpool;   /* (B, 2, D) */
    float *ones;    /* (B * T) ones: column sums as GEMVs */
    /* Staged models (core/stage_train.c): per-thread slots for one window's gathered rows and
     * their gradients, and per (image, window) the gradient of the pad slots' q, k, v (their
     * rows are the qkv bias), summed into the bias in window order afterwards. */
    float *slot;
    int slots;
    size_t slot_floats;
    float *padg;    /* (B, problems, W): W the block's projection row width (3D; lmsa 2 qk_dim + D) */
    /* PVT v2 (core/pvt_train.c): the gradient of the k | v rows (B, T', Q + D), of the reduced
     * grid after and before its LayerNorm (B, T', D) each, a convolution's im2col (recomputed
     * from the tape) and its gradient, and the depth-wise conv input's gradient (B, T, Hm) */
    float *dkv, *dxr[2], *col, *dcol, *dhid2;
    /* LaViT's attention residual: the gradient of its source (B, h', Tq', T'), handed to the
     * previous stage's last block, and of its 1x1 conv's and norm's outputs (B, h, Tq, T') */
    float *ar_dsrc, *ar_d[2];
    /* CaiT (core/cait_train.c): the class token's gradient and its query's, (B, D) each */
    float *dcls, *dcq;
    /* The convolutional stem (core/stem.c): a later conv's im2col gradient (B, G_i^2,
     * C_{i-1} k_i^2) and two map gradients (B, G_i^2, C_i) in turn */
    float *stem_dcol, *stem_d[2];
    double *stem_part; /* per block of VIT_STEM_ROWS rows: its channels' partial sums (3 C) */
} vit_grad_ws;

size_t vit_grad_ws_carve(const vit_config *c, int B, void *base, vit_grad_ws *ws);

/* What the backward of a staged model (n_stages > 0, core/stage_train.c, core/pvt_train.c) does
 * not cover yet, in words ("CaiT (talking heads, class attention)", ...), or NULL when it
 * trains: Swin v1 with vanilla or lmsa window attention (shift mask, relative position bias,
 * padding, patch merging, patch_norm), or PVT v2 with any mechanism of its SRA scope. A config
 * it names gets a tape of no bytes and must not train. */
const char *vit_stage_untrainable(const vit_config *c);

/* Mean cross-entropy of n rows of C logits against labels with label smoothing eps (targets
 * (1 - eps) on the label plus eps / C everywhere, as torch's label_smoothing). Writes
 * dlogits = d(mean loss)/d(logits) (n, C) when not NULL and the number of rows whose argmax
 * is the label to *correct when not NULL. Sums in double. */
double vit_loss_ce(const float *logits, const int *labels, int n, int C, float eps,
                   float *dlogits, int *correct);

/* LaViT's diagonality-preserving loss (its Eq. 9), in one of three readings. The paper prints
 * Eq. 9 with "+ sum_i ((N-1) A_ii - sum_{j != i} A_ij)", which minimising would drive away from
 * the diagonality its own Eq. 8 asks for (A_ii > A_ij); docs/training.md quotes the passage.
 * Per (T, T) softmax map A, with d_ij = A_ij - A_ji and e_ij = max(0, A_ij - A_ii), j != i:
 *   VIT_DP_SQUARED sum_{i,j} d_ij^2 + sum_i sum_{j != i} e_ij^2   (the default)
 *       zero exactly when A satisfies Eq. 8 (symmetric, no entry of a row above its diagonal);
 *       bounded (0 <= term <= 3T) and never rewards sharpening the diagonal once Eq. 8 holds;
 *       its gradient shrinks with the violation, so small asymmetries of near-uniform maps
 *       cannot outweigh the cross-entropy's gradient (with Adam, direction counts, not size).
 *   VIT_DP_HINGE   sum_{i,j} |d_ij| + sum_i sum_{j != i} e_ij
 *       the same feasible set with Eq. 9's absolute values: bounded too, but its gradient keeps
 *       full size at any violation, and on the shapes models it holds LaViT at chance.
 *   VIT_DP_FLIPPED sum_{i,j} |d_ij| - sum_i ((T - 1) A_ii - sum_{j != i} A_ij)
 *       Eq. 9 with the second sum's sign flipped (attnscope's first reading, kept for
 *       comparison): = sym - sum_i (T A_ii - 1), unbounded below as T grows, minimised by
 *       identity maps (-T (T - 1)); at weight 0.1 it outweighs the cross-entropy and collapses
 *       the less-attention maps onto the identity. */
typedef enum { VIT_DP_SQUARED = 0, VIT_DP_HINGE, VIT_DP_FLIPPED, VIT_DP_COUNT } vit_dp_loss;

const char *vit_dp_loss_name(vit_dp_loss k);  /* "squared", "hinge", "flipped" */
/* The reading named s, or -1. */
int vit_dp_loss_parse(const char *s);

/* Adds the gradients of (mean CE with dlogits given) + LaViT's diagonality-preserving term for
 * the n images of the last training forward into g, and returns that term's value:
 *     weight / (blocks * n * H * T) * sum_{less-attention blocks, images, heads} term(A)
 * over the softmax maps A, term as dp_loss reads it (above); 0 without less-attention blocks or
 * with weight 0. The result does not depend on the thread count beyond BLAS's own rounding:
 * every reduction over images runs in image order. */
double vit_backward(const vit_config *c, const vit_params *p, const vit_params *g, vit_acts *a,
                    vit_grad_ws *ws, const float *dlogits, int n, float dp_weight, vit_dp_loss dp_loss);

/* ---- optimisation ---- */

/* AdamW (Loshchilov & Hutter; torch.optim.AdamW): m = b1 m + (1 - b1) g,
 * v = b2 v + (1 - b2) g^2, w -= lr * wd * w (decoupled, only where decay[i]) and
 * w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps). t counts from 1. */
typedef struct {
    float beta1, beta2, eps, weight_decay;
    long step; /* steps taken */
} optim_adamw;

void optim_adamw_step(optim_adamw *o, float *w, const float *g, float *m, float *v,
                      const unsigned char *decay, size_t n, float lr);

/* Scales g so that its global L2 norm is at most max_norm (no change when max_norm <= 0);
 * returns the norm before clipping (torch.nn.utils.clip_grad_norm_ with its 1e-6). */
float optim_clip(float *g, size_t n, float max_norm);

/* Linear warm-up from warmup_lr to lr over warmup steps, then cosine decay to min_lr at total
 * steps (timm's CosineLRScheduler, stepped per update):
 *     step < warmup: warmup_lr + step * (lr - warmup_lr) / warmup
 *     else:          min_lr + (lr - min_lr) (1 + cos(pi (step - warmup) / (total - warmup))) / 2 */
typedef struct {
    float lr, min_lr, warmup_lr;
    long warmup, total;
} optim_schedule;

float optim_lr(const optim_schedule *s, long step);

#endif
