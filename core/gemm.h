/* gemm.h: the Linear layers' products y = x W^T + b of an inference forward through oneDNN's
 * matmul primitive, with each weight matrix reordered once into the layout the primitive asks
 * for ("prepacked"). OpenBLAS repacks constant weights on every call; on this project's 2-core
 * AVX-512 machines the prepacked product is 1.1-1.9x OpenBLAS's on a ViT's four GEMM shapes
 * (bench/gemm_onednn.c, docs/performance.md), and it gives the same bits at any thread count.
 *
 * Usage (io/model.c and bench do this; training never does, its weights change every step):
 *     p->pack = vit_gemm_pack_new();     // NULL without oneDNN or with ATTNSCOPE_GEMM=openblas
 *     vit_forward(...);                   // the forward calls vit_gemm_use(p->pack) itself
 *     vit_gemm_pack_free(p->pack);
 * A pack belongs to one vit_params: entries are keyed by the weight's address and filled at the
 * first product that uses them, so the weights must not change (or move) while the pack lives.
 * Without oneDNN (built without libdnnl-dev) every function below is a no-op and products stay
 * OpenBLAS's. */
#ifndef AS_GEMM_H
#define AS_GEMM_H

#include <stddef.h>

typedef struct vit_gemm_pack vit_gemm_pack;

/* The products' precision: float32 (the default), or bfloat16 (opt-in: x and W rounded to
 * bfloat16, round to nearest even; sums, bias and y in float32), which runs on AVX512-BF16
 * (oneDNN's brg:avx512_core_bf16) at about 1.9x the float32 product on this project's machines
 * (bench/gemm_onednn.c); docs/performance.md gives its error. */
typedef enum { VIT_GEMM_F32 = 0, VIT_GEMM_BF16 } vit_gemm_precision;

/* A new, empty pack; NULL when linear layers run on OpenBLAS (see vit_gemm_select). */
vit_gemm_pack *vit_gemm_pack_new(void);
/* The same with the products in the given precision. */
vit_gemm_pack *vit_gemm_pack_new_precision(vit_gemm_precision precision);
vit_gemm_precision vit_gemm_pack_precision(const vit_gemm_pack *pk);
/* 1 when oneDNN can make bfloat16 products on this CPU (a bfloat16 pack never falls back to
 * OpenBLAS's float32: a product it cannot compute aborts with a one-line message). */
int vit_gemm_bf16_available(void);
/* What the pack's products run on: vit_gemm_name's, with the precision ("OpenBLAS" for NULL). */
const char *vit_gemm_pack_name(const vit_gemm_pack *pk);
void vit_gemm_pack_free(vit_gemm_pack *pk);

/* Products the pack has computed so far (0 for NULL): tests check that it is used. */
long vit_gemm_pack_products(const vit_gemm_pack *pk);

/* Makes pk the pack the calling thread's linear layers use (NULL: OpenBLAS). Returns the one it
 * replaces, for the caller to put back. */
vit_gemm_pack *vit_gemm_use(vit_gemm_pack *pk);

/* 1 when the calling thread has a pack (an inference forward of a loaded model) and the CPU runs
 * core/attn_kernel.c: the plain attention of a monolithic ViT's blocks then runs fused in it
 * rather than on OpenBLAS (vit_attn_fused_blocks). 0 in training, with ATTNSCOPE_GEMM=openblas
 * and without oneDNN. */
int vit_gemm_attention_fused(void);

/* y (M, N; rows ldy apart) = x (M, K) W^T (W: (N, K) row-major) + bias, or y += that with
 * accumulate, with the calling thread's pack. Returns 0 when there is no pack (or oneDNN refused
 * the shape): the caller computes the product itself. */
int vit_gemm_linear(float *y, int ldy, const float *x, const float *w, const float *bias, int M, int N,
                    int K, int accumulate);

/* Chooses what linear layers run on, by name: "onednn" (the default when built with it) or
 * "openblas". Returns 0 and a message naming the values when name is neither, or "onednn" in a
 * build without it. */
int vit_gemm_select(const char *name, char *msg, size_t n);
/* What linear layers run on now: "oneDNN 2.6.3 matmul, prepacked weights" or "OpenBLAS". */
const char *vit_gemm_name(void);

#endif
