/* kernels.h: the elementwise and row kernels of the engine (LayerNorm, GELU, softmax, bias,
 * float16 packing). Plain functions over caller-owned buffers; none allocates. */
#ifndef AS_KERNELS_H
#define AS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* out[r,:] = (x[r,:] - mean) / sqrt(var + eps) * w + b for rows r < n.
 * out, x: (n, d), may alias; w, b: (d). */
void kernels_layernorm(float *out, const float *x, const float *w, const float *b, int n, int d,
                       float eps);

/* Exact (erf) GELU in place: x = 0.5 x (1 + erf(x / sqrt 2)). x: (n). */
void kernels_gelu(float *x, size_t n);
/* The same into y (y may be x). */
void kernels_gelu_to(float *y, const float *x, size_t n);

/* dh *= GELU'(x) for the exact GELU (the backward of kernels_gelu). dh, x: (n). */
void kernels_gelu_backward(float *dh, const float *x, size_t n);

/* erf for float, branch-free so that loops over it vectorise; within 4e-7 absolute of erf. */
float kernels_erf(float x);

/* exp for float, vectorisable; within 2 ulp of expf on [-87, 88]; 0 below -87.3. */
float kernels_exp(float x);

/* LayerNorm backward for out = LN(x) * w + b given dy (n, d): dx += the input gradient,
 * dw += sum_r dy * xhat, db += sum_r dy. Rows are taken in fixed blocks of KERNELS_LN_BLOCK whose
 * partial sums are added in order, so the result does not depend on the thread count.
 * scratch: 2 * d * ceil(n / KERNELS_LN_BLOCK) floats. */
#define KERNELS_LN_BLOCK 64
void kernels_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                                const float *w, float *scratch, int n, int d, float eps);

/* Softmax backward per row: dS = P * (dP - sum(P * dP)). dS may alias dP. (n, d) each. */
void kernels_softmax_backward_rows(float *dS, const float *P, const float *dP, int n, int d);

/* dst[i] = src[i] for i < n, in fixed pieces spread over the threads (the training tape's copies
 * of activations, a serial memcpy that kept one thread waiting). */
void kernels_copy(float *dst, const float *src, size_t n);

/* Row softmax in place. x: (n, d). */
void kernels_softmax_rows(float *x, int n, int d);

/* For tests: 1 makes this file's own AVX-512 paths (the row softmax, the depth-wise gradient's
 * 16-channel blocks) step aside for the portable loops they match bit for bit; 0 (the default)
 * uses them where the CPU has AVX-512F. Set it between parallel regions, not inside one. */
void kernels_force_portable(int on);

/* The calling thread's scratch buffer `which`, grown to at least `floats` and kept between calls
 * at its largest size (never freed: one per thread and use); NULL without memory, the buffer
 * then as it was. A buffer is valid until the same thread asks for the same one again. */
enum { KERNELS_SCRATCH_GEMM_SPLIT, KERNELS_SCRATCH_ATTN_ROWS, KERNELS_SCRATCH_ATTN_KEYS, KERNELS_SCRATCH_HEAD_MAPS,
       KERNELS_SCRATCH_COUNT };
float *kernels_scratch(int which, size_t floats);

/* One (image, head) problem of plain attention, fused by blocks of query rows (core/attn_kernel.c):
 * S = scale q k^T, A = softmax(S) by rows, o = A v. q (Tq, dq), v (Tk, dv) and o (Tq, dv) have
 * rows ldq, ldv, ldo apart; k comes packed (kernels_attn_pack_k). The optional records scores,
 * keep and A (float32) and a16 (binary16) are (Tq, Tk) row-major; NULL skips one. */
typedef struct {
    const float *q, *kT, *v; /* kT: k packed by kernels_attn_pack_k */
    int ldq, ldv, ldo;
    int Tq, Tk, dq, dv;
    float scale;
    float *o, *scores, *keep, *A;
    uint16_t *a16;
} kernels_attn;
/* kT (kernels_attn_kt_floats) = k (Tk, dq; rows ldk apart) transposed, each of its dq rows
 * zero padded to a multiple of 16 columns: once per problem, for all its rows. */
size_t kernels_attn_kt_floats(int Tk, int dq);
void kernels_attn_pack_k(float *kT, const float *k, int ldk, int Tk, int dq);
/* 1 when this CPU runs kernels_attn_rows (AVX-512F); 0 elsewhere. */
int kernels_attn_available(void);
/* Query rows [r0, r1) of problem a (any split of the rows gives the same bits). Returns 0 when
 * it cannot (no AVX-512F, or no memory for its scratch): nothing was written. */
int kernels_attn_rows(const kernels_attn *a, int r0, int r1);

/* Refiner's k x k depth-wise convolution of E (T, T) maps (Conv2d with groups E, zero padding
 * k / 2, no bias; k odd, at most 256): out (E, T, T) from in and w (E, k, k); each output adds its taps in
 * row-major order. Its backward: din (written) = the convolution's transpose of dout, the taps
 * in the same order; dw (E, k, k, written) = each tap's sum over the map, rows in float lanes
 * added in double. */
void kernels_maps_dwconv(float *out, const float *in, const float *w, int E, int T, int k);
void kernels_maps_dwconv_backward(float *din, float *dw, const float *dout, const float *in, const float *w,
                                  int E, int T, int k);
/* C (M, N) = alpha A B (+ C when accumulate) for a small K: A's entry (m, k) at A[m am + k ak]
 * (am = K, ak = 1: A as stored; am = 1, ak = M: A transposed), B (K, N). For mixing maps across
 * heads (1 x 1 convolutions over (heads, T, T)), where K is a few heads and N a map's T T
 * entries: a GEMM library's packing and zeroing of C cost more there than the products. The
 * same bits for any thread count (it has none). */
void kernels_mix_rows(float *C, const float *A, size_t am, size_t ak, const float *B, int M, int K, size_t N,
                      float alpha, int accumulate);
/* A frozen (eval-mode) BatchNorm channel as y = a x + c, PyTorch's fold: inv = 1 / sqrt(var + eps),
 * a = weight inv, c = bias - mean a (the stems and the Refiner release's DLA). */
typedef struct {
    float a, c, inv;
} kernels_bn_affine;
kernels_bn_affine kernels_bn_fold(float weight, float bias, float mean, float var, float eps);
/* A frozen BatchNorm's backward over one channel's n entries, y = a x + c as kernels_bn_fold:
 * *gw = inv sum dy (x - mean), *gb = sum dy (lanes of float added in double); then dy *= a, the
 * input's gradient. */
void kernels_bn_backward(float *dy, const float *x, float mean, float inv, float a, size_t n, float *gw,
                         float *gb);
/* y[r,:] = bias for rows r < n: the starting value of a GEMM with beta = 1. y: (n, d). */
void kernels_fill_rows(float *y, const float *bias, int n, int d);
/* y[r,:] += bias. y: (n, d). */
void kernels_add_rows(float *y, const float *bias, int n, int d);
/* Depth-wise 3x3 convolution, padding 1, with bias, of NHWC maps: out, in (n, gh, gw, C); w
 * (C, 1, 3, 3) as PyTorch stores it (MixFFN's mlp.dwconv). Each output sums bias, then the taps
 * row-major, in float. */
void kernels_dwconv3(float *out, const float *in, const float *w, const float *bias, int n, int gh, int gw,
                     int C);
/* Backward of kernels_dwconv3 given its output's gradient dout and its input in: din (written,
 * NULL: skipped) the input's gradient; dw (C, 9) and db (C, NULL: none) += the sums over every
 * image and position, per channel in double in image, row, column order, so the result does
 * not depend on the thread count. */
void kernels_dwconv3_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                              const float *w, int n, int gh, int gw, int C);
/* x[r,:] += s gamma * y[r,:] (LayerScale's residual add; gamma NULL: x += s y; s is the
 * Refiner release's 1 / adjust_ratio, else 1). x, y: (n, d). */
void kernels_scaled_add(float *x, const float *y, const float *gamma, float s, int n, int d);
/* Its backward given dy (n, d), the gradient of x after the add: dgamma (d) += s sum_r dy * y
 * (per column in double, rows in order: thread-independent; dgamma NULL: skip) and
 * df = s gamma * dy (NULL: skip). */
void kernels_scaled_add_backward(float *df, float *dgamma, const float *dy, const float *y, const float *gamma,
                                 float s, int n, int d);

/* IEEE binary16 conversions, round to nearest even; NaN and infinities are kept. */
uint16_t kernels_f32_to_f16(float f);
float kernels_f16_to_f32(uint16_t h);
float kernels_bf16_to_f32(uint16_t h);
/* dst[i] = f16(src[i]) for i < n; uses F16C instructions when the CPU has them. */
void kernels_f32_to_f16_array(uint16_t *dst, const float *src, size_t n);
/* dst[i] = float(src[i]) for i < n, exactly; F16C when the CPU has it. */
void kernels_f16_to_f32_array(float *dst, const uint16_t *src, size_t n);

/* C (M, N; rows ldc apart) = alpha op(A) op(B) + beta C, as cblas_sgemm in row-major order
 * (transa/transb nonzero: op = transpose), in fixed tiles of C (KERNELS_GEMM_ROWS x
 * KERNELS_GEMM_COLS, whatever the thread count), each one single-threaded GEMM over the whole
 * inner dimension, the tiles spread over OpenMP threads. OpenBLAS's own threading changes its
 * blocking of a long inner dimension (and a GEMV's split of a long reduction) with the thread
 * count, so its rounding does too; this gives the same bits for any thread count. */
#define KERNELS_GEMM_ROWS 128
#define KERNELS_GEMM_COLS 256
/* A product of fewer than 4 such tiles whose inner dimension is at least twice this is cut into
 * pieces of it along the inner dimension, computed in parallel and added in order. */
#define KERNELS_GEMM_SPLIT 1024
void kernels_gemm(int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc);

/* Two independent products (C and C2 do not overlap, neither writes what the other reads), the
 * bits of kernels_gemm on each: their tiles share one loop over the threads, so that a product
 * of one tile (a small layer's weight gradient) runs beside the other's instead of alone. */
void kernels_gemm_pair(int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc,
                       int transa2, int transb2, int M2, int N2, int K2, float alpha2, const float *A2, int lda2,
                       const float *B2, int ldb2, float beta2, float *C2, int ldc2);

/* out[j] += alpha sum_{r < M} x[r * ld + j] for j < N (ones: M floats of 1), the same bits for
 * any thread count. */
void kernels_colsum_add(float *out, const float *x, int M, int N, int ld, float alpha, const float *ones);

#endif
