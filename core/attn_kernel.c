/* attn_kernel.c: plain softmax attention of one (image, head) problem, fused by blocks of query
 * rows: the scores of a few rows, their softmax, their records (scores, the float32 map, its
 * binary16 copy) and their product with the values, while the rows are in L1. OpenBLAS's path
 * (core/mech/registry.c, then core/vit.c's attn_values) writes the whole (Tq, Tk) map, reads it
 * back for the softmax, again for the binary16 copy and again, packed, for the product with V:
 * at DINOv2's 1370 tokens that is a 7.5 MB map per head through memory four times. Here the map is
 * written once (and not at all when nobody records it), and neither product packs or zeroes.
 *
 * The products are AVX-512 micro-kernels (4 rows x 64 columns of accumulators) over the keys
 * packed once per problem (kernels_attn_pack_k); the softmax evaluates the same polynomial as
 * core/kernels.c with fused multiply-adds. Each output is a fused multiply-add chain over the
 * inner dimension in its natural order, whatever the row block, the chunk of rows or the thread
 * that computes it, so the bits do not depend on the thread count, nor on what is recorded.
 * They are not OpenBLAS's bits: the inference forward uses this kernel with the oneDNN linear
 * layers (core/gemm.h), ATTNSCOPE_GEMM=openblas keeps OpenBLAS's products for both, and training
 * stays on OpenBLAS. CPUs without AVX-512F get OpenBLAS (kernels_attn_available). */
#include "kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define AK_X86 1
#endif

#ifdef AK_X86

int kernels_attn_available(void) {
    /* read per call (a table filled at load time), not cached in a static that threads write */
    return __builtin_cpu_supports("avx512f") != 0;
}

#define AK_TARGET __attribute__((target("avx512f")))
#define AK_INLINE __attribute__((always_inline)) static inline
enum { AK_R = 4, AK_W = 64 }; /* rows and columns of a register block */

/* S (AK_R rows, Tkp apart) = scale * q kT for the AK_R query rows q[r] (kT: dq x Tkp, zero
 * padded to a multiple of 16 columns). */
AK_TARGET static void qk_block(float *S, int Tkp, const float *const q[AK_R], const float *kT, int dq, float scale) {
    const __m512 s = _mm512_set1_ps(scale);
    int j = 0;
    for (; j + AK_W <= Tkp; j += AK_W) {
        __m512 acc[AK_R][4];
        for (int r = 0; r < AK_R; r++)
            for (int c = 0; c < 4; c++) acc[r][c] = _mm512_setzero_ps();
        for (int d = 0; d < dq; d++) {
            const float *b = kT + (size_t)d * Tkp + j;
            const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32),
                         b3 = _mm512_loadu_ps(b + 48);
            for (int r = 0; r < AK_R; r++) {
                const __m512 a = _mm512_set1_ps(q[r][d]);
                acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
                acc[r][2] = _mm512_fmadd_ps(a, b2, acc[r][2]);
                acc[r][3] = _mm512_fmadd_ps(a, b3, acc[r][3]);
            }
        }
        for (int r = 0; r < AK_R; r++)
            for (int c = 0; c < 4; c++) _mm512_storeu_ps(S + (size_t)r * Tkp + j + 16 * c, _mm512_mul_ps(acc[r][c], s));
    }
    for (; j < Tkp; j += 16) {
        __m512 acc[AK_R];
        for (int r = 0; r < AK_R; r++) acc[r] = _mm512_setzero_ps();
        for (int d = 0; d < dq; d++) {
            const __m512 b = _mm512_loadu_ps(kT + (size_t)d * Tkp + j);
            for (int r = 0; r < AK_R; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r][d]), b, acc[r]);
        }
        for (int r = 0; r < AK_R; r++) _mm512_storeu_ps(S + (size_t)r * Tkp + j, _mm512_mul_ps(acc[r], s));
    }
}

/* o[r][c0, c0 + 16 NV) = P[r] (Tk) v (Tk rows, ldv apart): NV vectors of columns, the last one
 * masked by last. */
AK_TARGET AK_INLINE void av_cols(float *const o[AK_R], const float *const P[AK_R], const float *v, int ldv, int Tk,
                                 int c0, const int NV, __mmask16 last) {
    __m512 acc[AK_R][4];
    for (int r = 0; r < AK_R; r++)
        for (int c = 0; c < NV; c++) acc[r][c] = _mm512_setzero_ps();
    for (int t = 0; t < Tk; t++) {
        const float *vr = v + (size_t)t * ldv + c0;
        __m512 b[4];
        for (int c = 0; c < NV; c++) b[c] = _mm512_maskz_loadu_ps(c == NV - 1 ? last : (__mmask16)0xffff, vr + 16 * c);
        for (int r = 0; r < AK_R; r++) {
            const __m512 a = _mm512_set1_ps(P[r][t]);
            for (int c = 0; c < NV; c++) acc[r][c] = _mm512_fmadd_ps(a, b[c], acc[r][c]);
        }
    }
    for (int r = 0; r < AK_R; r++)
        for (int c = 0; c < NV; c++)
            _mm512_mask_storeu_ps(o[r] + c0 + 16 * c, c == NV - 1 ? last : (__mmask16)0xffff, acc[r][c]);
}

AK_TARGET static void av_block(float *const o[AK_R], const float *const P[AK_R], const float *v, int ldv, int Tk,
                               int dv) {
    for (int c0 = 0; c0 < dv; c0 += AK_W) {
        const int w = dv - c0 < AK_W ? dv - c0 : AK_W, nv = (w + 15) / 16;
        const __mmask16 last = (__mmask16)(w % 16 ? (1u << (w % 16)) - 1 : 0xffffu);
        switch (nv) {
        case 1: av_cols(o, P, v, ldv, Tk, c0, 1, last); break;
        case 2: av_cols(o, P, v, ldv, Tk, c0, 2, last); break;
        case 3: av_cols(o, P, v, ldv, Tk, c0, 3, last); break;
        default: av_cols(o, P, v, ldv, Tk, c0, 4, last); break;
        }
    }
}

/* row[0, Tk) = softmax(row[0, Tk)) in place. exp is Cephes' single-precision polynomial (the one
 * core/kernels.c's exp_inline evaluates without contraction) with fused multiply-adds, 2^n by
 * scalef; a difference below -87.3 weighs 0, a NaN makes the row NaN (as on OpenBLAS's path).
 * The sum runs in 16 lanes, added in a fixed order. */
AK_TARGET static void softmax_row(float *row, int Tk) {
    const __mmask16 tail = (__mmask16)(Tk % 16 ? (1u << (Tk % 16)) - 1 : 0xffffu);
    const int nv = (Tk + 15) / 16;
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int v = 0; v < nv; v++)
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, v == nv - 1 ? tail : (__mmask16)0xffff, row + 16 * v));
    const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    const __m512 lo = _mm512_set1_ps(-87.3f), log2e = _mm512_set1_ps(1.44269504088896341f),
                 c1 = _mm512_set1_ps(0.693359375f), c2 = _mm512_set1_ps(-2.12194440e-4f), one = _mm512_set1_ps(1.0f);
    __m512 sum = _mm512_setzero_ps();
    for (int v = 0; v < nv; v++) {
        const __mmask16 k = v == nv - 1 ? tail : (__mmask16)0xffff;
        const __m512 x0 = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + 16 * v), m);
        const __m512 x = _mm512_max_ps(lo, x0); /* max_ps returns its second operand for a NaN */
        const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_fnmadd_ps(n, c1, x);
        r = _mm512_fnmadd_ps(n, c2, r);
        __m512 p = _mm512_set1_ps(1.9875691500e-4f);
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
        p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), one);
        const __mmask16 keep = _mm512_mask_cmp_ps_mask(k, x0, lo, _CMP_NLT_UQ);
        const __m512 e = _mm512_maskz_scalef_ps(keep, p, n);
        sum = _mm512_add_ps(sum, e);
        _mm512_mask_storeu_ps(row + 16 * v, k, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (int v = 0; v < nv; v++) {
        const __mmask16 k = v == nv - 1 ? tail : (__mmask16)0xffff;
        _mm512_mask_storeu_ps(row + 16 * v, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, row + 16 * v), inv));
    }
}

size_t kernels_attn_kt_floats(int Tk, int dq) {
    return (size_t)dq * (size_t)((Tk + 15) / 16 * 16);
}

void kernels_attn_pack_k(float *kT, const float *k, int ldk, int Tk, int dq) {
    const int Tkp = (Tk + 15) / 16 * 16;
    enum { B = 16 }; /* 16 x 16 tiles: both sides stay in a few cache lines */
    for (int t0 = 0; t0 < Tk; t0 += B)
        for (int d0 = 0; d0 < dq; d0 += B)
            for (int d = d0; d < d0 + B && d < dq; d++)
                for (int t = t0; t < t0 + B && t < Tk; t++) kT[(size_t)d * Tkp + t] = k[(size_t)t * ldk + d];
    for (int d = 0; d < dq; d++)
        for (int t = Tk; t < Tkp; t++) kT[(size_t)d * Tkp + t] = 0.0f;
}

int kernels_attn_rows(const kernels_attn *a, int r0, int r1) {
    if (!kernels_attn_available()) return 0;
    const int Tk = a->Tk, dq = a->dq, Tkp = (Tk + 15) / 16 * 16;
    /* AK_R score rows, and a discard row of outputs for a block past the last row */
    float *S = kernels_scratch(KERNELS_SCRATCH_ATTN_ROWS, (size_t)AK_R * Tkp + (size_t)a->dv);
    if (!S) return 0;
    float *discard = S + (size_t)AK_R * Tkp;
    const float *kT = a->kT;
    for (int i0 = r0; i0 < r1; i0 += AK_R) {
        const int nr = r1 - i0 < AK_R ? r1 - i0 : AK_R;
        const float *q[AK_R], *P[AK_R];
        float *o[AK_R];
        for (int r = 0; r < AK_R; r++) { /* a short block repeats its first row, and drops it */
            q[r] = a->q + (size_t)(r < nr ? i0 + r : i0) * a->ldq;
            P[r] = S + (size_t)(r < nr ? r : 0) * Tkp;
            o[r] = r < nr ? a->o + (size_t)(i0 + r) * a->ldo : discard;
        }
        qk_block(S, Tkp, q, kT, dq, a->scale);
        for (int r = 0; r < nr; r++) {
            float *row = S + (size_t)r * Tkp;
            const size_t at = (size_t)(i0 + r) * Tk;
            if (a->scores) memcpy(a->scores + at, row, (size_t)Tk * sizeof(float));
            if (a->keep) memcpy(a->keep + at, row, (size_t)Tk * sizeof(float));
            softmax_row(row, Tk);
            if (a->A) memcpy(a->A + at, row, (size_t)Tk * sizeof(float));
            if (a->a16) kernels_f32_to_f16_array(a->a16 + at, row, (size_t)Tk);
        }
        av_block(o, P, a->v, a->ldv, Tk, a->dv);
    }
    return 1;
}

#else

int kernels_attn_available(void) {
    return 0;
}

size_t kernels_attn_kt_floats(int Tk, int dq) {
    return (size_t)dq * (size_t)((Tk + 15) / 16 * 16);
}

void kernels_attn_pack_k(float *kT, const float *k, int ldk, int Tk, int dq) {
    (void)kT, (void)k, (void)ldk, (void)Tk, (void)dq;
}

int kernels_attn_rows(const kernels_attn *a, int r0, int r1) {
    (void)a, (void)r0, (void)r1;
    return 0;
}

#endif
