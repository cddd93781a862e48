/* train.c: the backward pass of vit.c's forward, layer by layer in reverse, over the
 * activations a training forward keeps in its tape; the losses; AdamW, the schedule, clipping.
 *
 * Threads: big GEMMs run in kernels_gemm's fixed tiles, one single-threaded GEMM per tile (never
 * OpenBLAS's own threading, whose blocking of a long reduction depends on the thread count); the
 * per-(image, head) work runs over OpenMP threads with single-threaded GEMMs, as in the forward.
 * Gradients of tensors shared by images (every weight) are never summed by racing threads:
 * either one GEMM tile over all rows, or per-image partials summed afterwards in image order, so
 * the result does not depend on the thread count. */
#include "train.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attn_ops.h"
#include "kernels.h"

/* Gradient tensors are bound like the weights (const float * in vit_params) but point into
 * memory the caller made writable. */
#define WR(ptr) ((float *)(uintptr_t)(ptr))

static size_t carve(char *base, size_t *off, size_t bytes_wanted, void **view) {
    size_t bytes = (bytes_wanted + 63) & ~(size_t)63;
    if (base && view) *view = base + *off;
    *off += bytes;
    return bytes;
}
#define CARVE_F(base, off, n, view) carve(base, off, (n) * sizeof(float), (void **)(view))

/* Floats of per-image partial gradients one block can need: Refiner's reduce, expand and
 * kernels. */
static size_t part_floats(const vit_config *c) {
    const size_t H = (size_t)c->num_heads;
    size_t most = 0;
    for (int l = 0; l < c->depth; l++) {
        const vit_attn *at = &c->attn[l];
        size_t need = 0;
        if (at->kind == VIT_ATTN_REFINER)
            need = 2 * (size_t)at->expanded_heads * H + (size_t)at->expanded_heads * at->kernel_size * at->kernel_size;
        if (need > most) most = need;
    }
    return most;
}

size_t vit_grad_ws_carve(const vit_config *c, int B, void *base, vit_grad_ws *ws) {
    const size_t T = (size_t)vit_num_tokens(c), D = (size_t)c->embed_dim, H = (size_t)c->num_heads;
    const size_t b = (size_t)B;
    size_t W, E;
    vit_widths(c, &W, &E);
    const size_t Hmax = E > H ? E : H;
    size_t off = 0;
    char *p = base;
    vit_grad_ws tmp;
    vit_grad_ws *v = ws ? ws : &tmp;
    if (base) {
        memset(v, 0, sizeof *v);
        v->B = B;
    }
    CARVE_F(p, &off, b * T * D, &v->dx);
    CARVE_F(p, &off, b * T * D, &v->dxn);
    CARVE_F(p, &off, b * T * D + 2 * D, &v->ln_scratch); /* >= 2 D ceil(B T / 64) */
    CARVE_F(p, &off, b * T * W, &v->dqkv);
    CARVE_F(p, &off, b * T * D, &v->dao);
    CARVE_F(p, &off, b * T * (size_t)c->mlp_hidden, &v->dhid);
    CARVE_F(p, &off, b * Hmax * T * T, &v->dA);
    CARVE_F(p, &off, b * Hmax * T * T, &v->dS);
    CARVE_F(p, &off, b * Hmax * T * T, &v->dX);
    const int less = vit_any_attn(c, VIT_ATTN_LESS);
    if (less || vit_any_attn(c, VIT_ATTN_LSLA)) CARVE_F(p, &off, b * H * T * T, &v->dY);
    if (less)
        for (int i = 0; i < 2; i++) CARVE_F(p, &off, b * H * T * T, &v->dkeep[i]);
    if (vit_any_attn(c, VIT_ATTN_REFINER)) /* E is then the largest H' */
        for (int i = 0; i < VIT_MAX_EXTRAS; i++) CARVE_F(p, &off, b * E * T * T, &v->dext[i]);
    const size_t part = part_floats(c);
    if (part) CARVE_F(p, &off, b * part, &v->part);
    carve(p, &off, b * H * sizeof(double), (void **)&v->scal);
    CARVE_F(p, &off, b * 2 * D, &v->dpool);
    CARVE_F(p, &off, b * T, &v->ones);
    if (base)
        for (size_t i = 0; i < b * T; i++) v->ones[i] = 1.0f;
    return off;
}

/* ---- small kernels ---- */

/* Backward of y (M, N; rows ldy apart) = x (M, K; rows ldx apart) W^T + b:
 * dW (N, K) += dy^T x, db += column sums of dy, dx (M, K) = (or +=) dy W. */
static void linear_backward(float *dW, float *db, float *dx, int dx_accumulate, const float *dy,
                            int ldy, const float *x, int ldx, const float *W, int M, int N, int K,
                            const float *ones) {
    kernels_gemm(1, 0, N, K, M, 1.0f, dy, ldy, x, ldx, 1.0f, dW, K);
    if (db) kernels_colsum_add(db, dy, M, N, ldy, 1.0f, ones);
    if (dx)
        kernels_gemm(0, 0, M, K, N, 1.0f, dy, ldy, W, K, dx_accumulate ? 1.0f : 0.0f, dx, K);
}

/* A bias table's gradient from the summed (T, T) gradient of head h (see vit_add_bias). */
static void bias_backward(float *gb, const float *g, vit_bias_kind kind, int H, int h, int T, int M) {
    if (kind == VIT_BIAS_FULL) {
        float *gh = gb + (size_t)h * T * T;
        for (size_t i = 0; i < (size_t)T * T; i++) gh[i] += g[i];
    } else if (kind == VIT_BIAS_RELATIVE) {
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++) {
                const int yi = i / M, xi = i % M, yj = j / M, xj = j % M;
                const size_t idx = (size_t)(yi - yj + M - 1) * (2 * M - 1) + (size_t)(xi - xj + M - 1);
                gb[idx * H + h] += g[(size_t)i * T + j];
            }
    }
}

/* ---- losses ---- */

double vit_loss_ce(const float *logits, const int *labels, int n, int C, float eps,
                   float *dlogits, int *correct) {
    double total = 0;
    int right = 0;
    for (int b = 0; b < n; b++) {
        const float *z = logits + (size_t)b * C;
        int arg = 0;
        for (int k = 1; k < C; k++) if (z[k] > z[arg]) arg = k;
        right += arg == labels[b];
        double s = 0;
        for (int k = 0; k < C; k++) s += exp((double)z[k] - z[arg]);
        const double lse = z[arg] + log(s);
        double loss = 0;
        for (int k = 0; k < C; k++) {
            const double target = (k == labels[b] ? 1.0 - eps : 0.0) + (double)eps / C;
            loss -= target * ((double)z[k] - lse);
            if (dlogits) dlogits[(size_t)b * C + k] = (float)((exp((double)z[k] - lse) - target) / n);
        }
        total += loss;
    }
    if (correct) *correct = right;
    return total / n;
}

static int is_less(const vit_config *c, int l) { return c->attn[l].kind == VIT_ATTN_LESS; }

static int less_blocks(const vit_config *c) {
    int k = 0;
    for (int l = 0; l < c->depth; l++) k += is_less(c, l);
    return k;
}

static const char *const dp_loss_names[] = {"squared", "hinge", "flipped"};
_Static_assert(sizeof dp_loss_names / sizeof *dp_loss_names == VIT_DP_COUNT, "one name per vit_dp_loss");

const char *vit_dp_loss_name(vit_dp_loss k) {
    return (unsigned)k < VIT_DP_COUNT ? dp_loss_names[k] : "?";
}

int vit_dp_loss_parse(const char *s) {
    for (int k = 0; k < VIT_DP_COUNT; k++)
        if (s && strcmp(s, dp_loss_names[k]) == 0) return k;
    return -1;
}

/* LaViT's diagonality-preserving term of one (T, T) softmax map A and its gradient, in the
 * reading `kind` (train.h), with d_ij = A_ij - A_ji and e_ij = max(0, A_ij - A_ii), j != i:
 *   squared: sum_{i,j} d_ij^2 + sum_i sum_{j != i} e_ij^2
 *   hinge:   sum_{i,j} |d_ij| + sum_i sum_{j != i} e_ij
 *   flipped: sum_{i,j} |d_ij| - sum_i ((T - 1) A_ii - sum_{j != i} A_ij)
 * Returns the term and adds coef times its gradient to dA: the symmetry sum's is 4 d_ij
 * (squared) or 2 sign(d_ij) (each pair appears twice); a hinge pair's is +g on A_ij and -g on
 * A_ii with g = 2 e_ij (squared) or 1 where e_ij > 0; the flipped sum's is +1 off the diagonal
 * and -(T - 1) on it. The gradients of |x| and max(0, x) at 0 are taken as 0, as PyTorch does. */
static double dp_term_backward(float *dA, const float *A, int T, float coef, vit_dp_loss kind) {
    const int sq = kind == VIT_DP_SQUARED;
    double sym = 0, diag = 0;
    for (int i = 0; i < T; i++) {
        const float *row = A + (size_t)i * T, aii = row[i];
        float *drow = dA + (size_t)i * T;
        double off = 0;
        float gdiag = 0;
        for (int j = 0; j < T; j++) {
            const float a = row[j], d = a - A[(size_t)j * T + i];
            sym += sq ? (double)d * d : fabs((double)d);
            float grad = sq ? 4.0f * d : 2.0f * (float)((d > 0) - (d < 0));
            if (j != i) {
                if (kind == VIT_DP_FLIPPED) {
                    off += a;
                    grad += 1.0f;
                } else if (a > aii) {
                    const float e = a - aii, g = sq ? 2.0f * e : 1.0f;
                    off += sq ? (double)e * e : (double)e;
                    grad += g;
                    gdiag += g;
                }
            }
            drow[j] += coef * grad;
        }
        if (kind == VIT_DP_FLIPPED) {
            diag -= (double)(T - 1) * aii - off;
            drow[i] -= coef * (float)(T - 1);
        } else {
            diag += off;
            drow[i] -= coef * gdiag;
        }
    }
    return sym + diag;
}

/* ---- attention ---- */

/* Where head h of image b of a (n, T, ld) buffer starts. */
typedef struct {
    float *base;
    int ld, width;
} hview;

static float *hat(const hview *v, int T, int b, int h) {
    return v->base + (size_t)b * T * v->ld + (size_t)h * v->width;
}

/* Refiner, one image: from dA (H, TT) = the gradient of the reduced maps, the gradients of
 * reduce, the kernels and expand (into part: reduce (H, E), expand (E, H), dla (E, k, k)) and
 * of the softmax maps (written over dA). */
static void refine_backward(float *dA, float *dEx, float *dCv, float *part, const float *P,
                            const float *Ex, const float *Cv, const vit_block_params *bp,
                            const vit_attn *at, int H, int T) {
    const int E = at->expanded_heads, k = at->kernel_size, TT = T * T;
    float *dred = part, *dexp = part + (size_t)H * E, *ddla = part + 2 * (size_t)H * E;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, H, E, TT, 1.0f, dA, TT, Cv, TT, 0.0f, dred, E);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, E, TT, H, 1.0f, bp->reduce, E, dA, TT, 0.0f, dCv, TT);
    memset(dEx, 0, (size_t)E * TT * sizeof(float));
    for (int e = 0; e < E; e++) {
        const float *in = Ex + (size_t)e * TT, *go = dCv + (size_t)e * TT, *w = bp->dla + (size_t)e * k * k;
        float *gi = dEx + (size_t)e * TT;
        for (int u = 0; u < k; u++)
            for (int v = 0; v < k; v++) {
                const float wt = w[u * k + v];
                const vit_conv_tap c = vit_conv_tap_at(T, k, u, v);
                double acc = 0;
                for (int i = c.i0; i < c.i1; i++) {
                    const float *orow = go + (size_t)i * T;
                    const float *irow = in + (size_t)(i + c.dy) * T + c.dx;
                    float *grow = gi + (size_t)(i + c.dy) * T + c.dx;
                    for (int j = c.j0; j < c.j1; j++) {
                        acc += (double)orow[j] * irow[j];
                        grow[j] += wt * orow[j];
                    }
                }
                ddla[(size_t)e * k * k + u * k + v] = (float)acc;
            }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, E, H, TT, 1.0f, dEx, TT, P, TT, 0.0f, dexp, H);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, H, TT, E, 1.0f, bp->expand, H, dEx, TT, 0.0f, dA, TT);
}

/* One block's attention backward: from ws->dao to ws->dxn (the gradient of norm1's output),
 * adding every attention weight's gradient into gb. A less-attention block with dp_coef != 0
 * also takes LaViT's term and returns its sum over the block's maps (else 0). */
static double attention_backward(const vit_config *c, int l, const vit_block_params *bp,
                               const vit_block_params *gb, const vit_tape *tape, vit_grad_ws *ws,
                               int n, float dp_coef, vit_dp_loss dp_loss) {
    const vit_attn *at = &c->attn[l];
    const vit_tape_block *t = &tape->blk[l];
    const int D = c->embed_dim, H = c->num_heads, T = vit_num_tokens(c), M = n * T, hd = D / H;
    const int prefix = vit_num_prefix(c), G = vit_grid(c), dq = vit_qk_head_dim(c, l);
    const size_t TT = (size_t)T * T;
    const float scale = vit_attn_scale(c, l);
    const int lsla = at->kind == VIT_ATTN_LSLA, less = at->kind == VIT_ATTN_LESS;
    const int refiner = at->kind == VIT_ATTN_REFINER, mait = at->kind == VIT_ATTN_MAIT;
    const int dyn = lsla && at->dynamic_scale;
    /* forward views (q, k, v) and their gradients, laid out alike */
    hview q = {0}, k = {0}, v, gq = {0}, gk = {0}, gv;
    int W;
    switch (at->kind) {
    case VIT_ATTN_LMSA: {
        const int Q = at->qk_dim;
        W = 2 * Q + D;
        q = (hview){t->qkv, W, Q / H};
        k = (hview){t->qkv + Q, W, Q / H};
        v = (hview){t->qkv + 2 * Q, W, hd};
        break;
    }
    case VIT_ATTN_LSLA:
        W = at->value_proj ? 2 * D : D;
        q = (hview){t->qkv, W, hd};
        k = (hview){t->xn1, D, hd};
        v = at->value_proj ? (hview){t->qkv + D, W, hd} : k;
        break;
    case VIT_ATTN_LESS:
        W = D;
        v = (hview){t->qkv, D, hd};
        break;
    default:
        W = 3 * D;
        q = (hview){t->qkv, W, hd};
        k = (hview){t->qkv + D, W, hd};
        v = (hview){t->qkv + 2 * D, W, hd};
        break;
    }
    /* gradients mirror the views: into dqkv, or into dxn where the view is xn1 itself */
    const ptrdiff_t qoff = q.base ? q.base - t->qkv : 0, voff = v.base - t->qkv;
    if (q.base) gq = (hview){ws->dqkv + qoff, W, q.width};
    if (lsla) {
        memset(ws->dxn, 0, (size_t)M * D * sizeof(float));
        gk = (hview){ws->dxn, D, hd};
    } else if (k.base) {
        gk = (hview){ws->dqkv + (k.base - t->qkv), W, k.width};
    }
    gv = (lsla && !at->value_proj) ? gk : (hview){ws->dqkv + voff, W, hd};
    const hview gao = {ws->dao, D, hd};

    /* 1. dA = dao v^T and dv = A^T dao per (image, head) */
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < n * H; bh++) {
        const int b = bh / H, h = bh % H;
        const float *A = t->att + (size_t)bh * TT;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, hat(&gao, T, b, h), D,
                    hat(&v, T, b, h), v.ld, 0.0f, ws->dA + (size_t)bh * TT, T);
        /* LSLA's QXX: v is x, whose gradient the keys also add to (same head, same task) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, A, T, hat(&gao, T, b, h), D,
                    (lsla && !at->value_proj) ? 1.0f : 0.0f, hat(&gv, T, b, h), gv.ld);
    }
    /* 2. Refiner: back through reduction, convolution and expansion to the softmax maps */
    const size_t part = part_floats(c);
    if (refiner) {
        const size_t E = (size_t)at->expanded_heads;
#pragma omp parallel for schedule(dynamic, 1)
        for (int b = 0; b < n; b++)
            refine_backward(ws->dA + (size_t)b * H * TT, ws->dext[0] + (size_t)b * E * TT,
                            ws->dext[1] + (size_t)b * E * TT, ws->part + (size_t)b * part,
                            t->soft + (size_t)b * H * TT, t->ext[0] + (size_t)b * E * TT,
                            t->ext[1] + (size_t)b * E * TT, bp, at, H, T);
        const int k2 = at->kernel_size * at->kernel_size;
        for (int b = 0; b < n; b++) {
            const float *pb = ws->part + (size_t)b * part;
            for (size_t i = 0; i < (size_t)H * E; i++) {
                WR(gb->reduce)[i] += pb[i];
                WR(gb->expand)[i] += pb[H * E + i];
            }
            for (size_t i = 0; i < E * k2; i++) WR(gb->dla)[i] += pb[2 * H * E + i];
        }
    }
    /* 3. per (image, head): softmax backward, the scores' own gradient from a following
     *    less-attention block, then back to q and k (or Theta, Psi and the previous scores) */
    const float *P = lsla ? t->ext[0] : refiner ? t->soft : t->att;
    const float *dnext = (l + 1 < c->depth && is_less(c, l + 1)) ? ws->dkeep[(l + 1) & 1] : NULL;
    float *dprev = less ? ws->dkeep[l & 1] : NULL;
    const float *prev = less ? tape->blk[l - 1].keep : NULL;
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < n * H; bh++) {
        const int b = bh / H, h = bh % H;
        float *dA = ws->dA + (size_t)bh * TT, *dS = ws->dS + (size_t)bh * TT, *X = ws->dX + (size_t)bh * TT;
        if (less && dp_coef != 0.0f) ws->scal[bh] = dp_term_backward(dA, t->att + (size_t)bh * TT, T, dp_coef, dp_loss);
        kernels_softmax_backward_rows(dS, P + (size_t)bh * TT, dA, T, T);
        if (dnext)
            for (size_t i = 0; i < TT; i++) dS[i] += dnext[(size_t)bh * TT + i];
        if (less) {
            /* S = Psi A1, A1 = prev Theta^T: X = A1, dA1 (into dA) = Psi^T dS, dprev = dA1 Theta */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, T, 1.0f, prev + (size_t)bh * TT, T,
                        bp->theta, T, 0.0f, X, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, T, T, 1.0f, bp->psi, T, dS, T, 0.0f, dA, T);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, T, T, 1.0f, dA, T, bp->theta, T,
                        0.0f, dprev + (size_t)bh * TT, T);
            continue;
        }
        const float *qh = hat(&q, T, b, h), *kh = hat(&k, T, b, h);
        float *dR = dS; /* gradient of the raw product q k^T (after its scale) */
        if (mait && h < VIT_MAX_MASK_HEADS && at->mask_size[h]) {
            if (at->mask_mode == VIT_MASK_SOFT) {
                /* d alpha = sum over masked entries of dS * raw; raw = scale q k^T */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, dq, scale, qh, q.ld, kh, k.ld,
                            0.0f, X, T);
                double all = 0, kept = 0;
                for (size_t i = 0; i < TT; i++) all += (double)(X[i] *= dS[i]);
                vit_attn z = *at;
                z.mask_mode = VIT_MASK_ZERO;
                vit_mait_apply(X, &z, NULL, h, T, prefix, G);
                for (size_t i = 0; i < TT; i++) kept += X[i];
                ws->scal[bh] = all - kept;
            }
            vit_attn m = *at;
            if (m.mask_mode == VIT_MASK_NEG_INF) m.mask_mode = VIT_MASK_ZERO;
            vit_mait_apply(dS, &m, bp->mask_alpha, h, T, prefix, G);
        }
        float s = scale;
        if (lsla) {
            if (dyn) {
                /* S = (q x^T) * DS + B: X = dS * (q x^T) for DS, dR = dS * DS */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, dq, 1.0f, qh, q.ld, kh, k.ld,
                            0.0f, X, T);
                for (size_t i = 0; i < TT; i++) X[i] *= dS[i];
                dR = ws->dY + (size_t)bh * TT; /* dA stays for the outer bias, dS for the inner */
                for (size_t i = 0; i < TT; i++) dR[i] = dS[i] * bp->ds[i];
                s = 1.0f;
            }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, dq, T, s, dR, T, kh, k.ld, 0.0f,
                    hat(&gq, T, b, h), gq.ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, dq, T, s, dR, T, qh, q.ld,
                    lsla ? 1.0f : 0.0f, hat(&gk, T, b, h), gk.ld);
    }
    /* 4. the small tensors' gradients, summed over images in order */
    double dp = 0;
    if (less && dp_coef != 0.0f)
        for (int bh = 0; bh < n * H; bh++) dp += ws->scal[bh];
    if (less) {
        /* dPsi += sum dS A1^T: per image over its heads (in parallel, into dY), then the images
         * in order */
#pragma omp parallel for schedule(static)
        for (int b = 0; b < n; b++)
            for (int h = 0; h < H; h++) {
                const size_t bh = (size_t)b * H + h;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, T, 1.0f, ws->dS + bh * TT, T,
                            ws->dX + bh * TT, T, h ? 1.0f : 0.0f, ws->dY + (size_t)b * TT, T);
            }
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < TT; i++) {
            float s = 0.0f;
            for (int b = 0; b < n; b++) s += ws->dY[(size_t)b * TT + i];
            WR(gb->psi)[i] += s;
        }
        /* dTheta += sum dA1^T prev: one GEMM over all (image, head) rows */
        kernels_gemm(1, 0, T, T, n * H * T, 1.0f, ws->dA, T, prev, T, 1.0f, WR(gb->theta), T);
    }
    if (mait && at->mask_mode == VIT_MASK_SOFT)
        for (int h = 0; h < H && h < VIT_MAX_MASK_HEADS; h++) {
            if (!at->mask_size[h]) continue;
            double s = 0;
            for (int b = 0; b < n; b++) s += ws->scal[(size_t)b * H + h];
            WR(gb->mask_alpha)[h] += (float)s;
        }
    if (lsla) {
        const size_t nt = TT;
        if (dyn) /* dDS = sum over (image, head) of dS * (q x^T), in dX */
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < nt; i++) {
                double s = 0;
                for (int bh = 0; bh < n * H; bh++) s += ws->dX[(size_t)bh * TT + i];
                WR(gb->ds)[i] += (float)s;
            }
        /* bias tables: the (T, T) gradient of head h summed over images (into dX, free now),
         * then into the table's parametrisation. Inner: dS; outer: dA (added after the softmax) */
        for (int which = 0; which < 2; which++) {
            const vit_bias_kind kind = which ? at->outer_bias : at->inner_bias;
            if (!kind) continue;
            const float *src = which ? ws->dA : ws->dS;
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < (size_t)H * nt; i++) {
                const size_t h = i / nt, e = i % nt;
                double s = 0;
                for (int b = 0; b < n; b++) s += src[((size_t)b * H + h) * nt + e];
                ws->dX[i] = (float)s;
            }
            float *table = WR(which ? gb->outer_bias : gb->inner_bias);
            for (int h = 0; h < H; h++) bias_backward(table, ws->dX + (size_t)h * nt, kind, H, h, T, G);
        }
    }
    /* 5. back through the projections into dxn */
    float *xn = t->xn1;
    switch (at->kind) {
    case VIT_ATTN_LMSA: {
        const int Q = at->qk_dim;
        linear_backward(WR(gb->q_w), gb->q_b ? WR(gb->q_b) : NULL, ws->dxn, 0, ws->dqkv, W, xn, D, bp->q_w, M, Q, D, ws->ones);
        linear_backward(WR(gb->k_w), gb->k_b ? WR(gb->k_b) : NULL, ws->dxn, 1, ws->dqkv + Q, W, xn, D, bp->k_w, M, Q, D, ws->ones);
        linear_backward(WR(gb->v_w), gb->v_b ? WR(gb->v_b) : NULL, ws->dxn, 1, ws->dqkv + 2 * Q, W, xn, D, bp->v_w, M, D, D, ws->ones);
        break;
    }
    case VIT_ATTN_LSLA:
        linear_backward(WR(gb->q_w), gb->q_b ? WR(gb->q_b) : NULL, ws->dxn, 1, ws->dqkv, W, xn, D, bp->q_w, M, D, D, ws->ones);
        if (at->value_proj)
            linear_backward(WR(gb->v_w), gb->v_b ? WR(gb->v_b) : NULL, ws->dxn, 1, ws->dqkv + D, W, xn, D, bp->v_w, M, D, D, ws->ones);
        break;
    case VIT_ATTN_LESS:
        linear_backward(WR(gb->v_w), gb->v_b ? WR(gb->v_b) : NULL, ws->dxn, 0, ws->dqkv, D, xn, D, bp->v_w, M, D, D, ws->ones);
        break;
    default:
        linear_backward(WR(gb->qkv_w), gb->qkv_b ? WR(gb->qkv_b) : NULL, ws->dxn, 0, ws->dqkv, W, xn, D, bp->qkv_w, M, 3 * D, D, ws->ones);
        break;
    }
    return dp;
}

/* ---- the whole model ---- */

double vit_backward(const vit_config *c, const vit_params *p, const vit_params *g, vit_acts *a,
                    vit_grad_ws *ws, const float *dlogits, int n, float dp_weight, vit_dp_loss dp_loss) {
    const vit_tape *tape = a->tape;
    const int D = c->embed_dim, T = vit_num_tokens(c), Np = vit_num_patches(c), H = c->num_heads;
    const int prefix = vit_num_prefix(c), M = n * T, Hm = c->mlp_hidden, C = c->num_classes;
    const int K = c->in_chans * c->patch_size * c->patch_size;
    const int nout = c->distilled ? 2 : 1, token = c->global_pool == VIT_POOL_TOKEN;
    const float eps = c->ln_eps;
    const size_t MD = (size_t)M * D;

    /* head: logits = head(pooled[0]) (distilled: the mean of both heads) */
    memset(ws->dpool, 0, (size_t)n * 2 * D * sizeof(float));
    if (C > 0) {
        const float f = c->distilled ? 0.5f : 1.0f;
        for (int i = 0; i < nout; i++) {
            const float *hw = i ? p->head_dist_w : p->head_w;
            float *ghw = WR(i ? g->head_dist_w : g->head_w), *ghb = WR(i ? g->head_dist_b : g->head_b);
            kernels_gemm(1, 0, C, D, n, f, dlogits, C, a->pooled + (size_t)i * D, 2 * D, 1.0f, ghw, D);
            kernels_colsum_add(ghb, dlogits, n, C, C, f, ws->ones);
            kernels_gemm(0, 0, n, D, C, f, dlogits, C, hw, D, 0.0f, ws->dpool + (size_t)i * D, 2 * D);
        }
    }
    /* pooling and the final norm, back to the last block's output */
    memset(ws->dx, 0, MD * sizeof(float));
    const int rows = token ? nout : 1;
    float *xs = ws->dqkv, *dys = ws->dqkv + (size_t)n * 2 * D, *dxs = ws->dqkv + (size_t)n * 4 * D;
    if (token || c->fc_norm) {
        /* LayerNorm over the pooled rows (n * rows of them), gathered contiguously */
        for (int b = 0; b < n; b++) {
            const float *src = c->fc_norm ? tape->pool_pre + (size_t)b * 2 * D : tape->x_final + (size_t)b * T * D;
            memcpy(xs + (size_t)b * rows * D, src, (size_t)rows * D * sizeof(float));
            memcpy(dys + (size_t)b * rows * D, ws->dpool + (size_t)b * 2 * D, (size_t)rows * D * sizeof(float));
        }
        memset(dxs, 0, (size_t)n * rows * D * sizeof(float));
        kernels_layernorm_backward(dxs, WR(g->norm_w), WR(g->norm_b), dys, xs, p->norm_w, ws->ln_scratch, n * rows, D, eps);
        for (int b = 0; b < n; b++) {
            const float *src = dxs + (size_t)b * rows * D;
            float *xb = ws->dx + (size_t)b * T * D;
            if (token) memcpy(xb, src, (size_t)rows * D * sizeof(float));
            else
                for (int t = prefix; t < T; t++)
                    for (int i = 0; i < D; i++) xb[(size_t)t * D + i] = src[i] / (float)Np;
        }
    } else {
        /* average of the normalised patch rows */
        memset(ws->dxn, 0, MD * sizeof(float));
        for (int b = 0; b < n; b++)
            for (int t = prefix; t < T; t++)
                for (int i = 0; i < D; i++)
                    ws->dxn[((size_t)b * T + t) * D + i] = ws->dpool[(size_t)b * 2 * D + i] / (float)Np;
        kernels_layernorm_backward(ws->dx, WR(g->norm_w), WR(g->norm_b), ws->dxn, tape->x_final, p->norm_w,
                               ws->ln_scratch, M, D, eps);
    }

    const int nl = less_blocks(c);
    const double dp_norm = nl ? dp_weight / ((double)nl * n * H * T) : 0.0;
    const float dp_coef = (float)dp_norm;
    double dp = 0;
    for (int l = c->depth - 1; l >= 0; l--) {
        const vit_block_params *bp = &p->blocks[l], *gb = &g->blocks[l];
        const vit_tape_block *t = &tape->blk[l];
        /* x_out = x_mid + fc2(gelu(fc1(norm2(x_mid)))) */
        linear_backward(WR(gb->fc2_w), WR(gb->fc2_b), ws->dhid, 0, ws->dx, D, t->hid, Hm, bp->fc2_w, M, D, Hm, ws->ones);
        kernels_gelu_backward(ws->dhid, t->hpre, (size_t)M * Hm);
        linear_backward(WR(gb->fc1_w), WR(gb->fc1_b), ws->dxn, 0, ws->dhid, Hm, t->xn2, D, bp->fc1_w, M, Hm, D, ws->ones);
        kernels_layernorm_backward(ws->dx, WR(gb->norm2_w), WR(gb->norm2_b), ws->dxn, t->x_mid, bp->norm2_w,
                               ws->ln_scratch, M, D, eps);
        /* x_mid = x_in + proj(attention(norm1(x_in))) */
        if (bp->proj_w)
            linear_backward(WR(gb->proj_w), WR(gb->proj_b), ws->dao, 0, ws->dx, D, t->ao, D, bp->proj_w, M, D, D, ws->ones);
        else
            memcpy(ws->dao, ws->dx, MD * sizeof(float));
        dp += attention_backward(c, l, bp, gb, tape, ws, n, dp_coef, dp_loss);
        kernels_layernorm_backward(ws->dx, WR(gb->norm1_w), WR(gb->norm1_b), ws->dxn, t->x_in, bp->norm1_w,
                               ws->ln_scratch, M, D, eps);
    }

    /* x0 = [cls, dist, patches W^T + b] + pos_embed */
    const size_t TD = (size_t)T * D;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < TD; i++) {
        double s = 0;
        for (int b = 0; b < n; b++) s += ws->dx[(size_t)b * TD + i];
        WR(g->pos_embed)[i] += (float)s;
        if (c->class_token && i < (size_t)D) WR(g->cls_token)[i] += (float)s;
        if (c->distilled && i >= (size_t)D && i < 2 * (size_t)D) WR(g->dist_token)[i - D] += (float)s;
    }
    for (int b = 0; b < n; b++)
        memcpy(ws->dxn + (size_t)b * Np * D, ws->dx + (size_t)b * TD + (size_t)prefix * D,
               (size_t)Np * D * sizeof(float));
    linear_backward(WR(g->patch_w), WR(g->patch_b), NULL, 0, ws->dxn, D, a->patches, K, p->patch_w,
                    n * Np, D, K, ws->ones);
    return dp * dp_norm;
}

/* ---- optimisation ---- */

void optim_adamw_step(optim_adamw *o, float *w, const float *g, float *m, float *v,
                      const unsigned char *decay, size_t n, float lr) {
    o->step++;
    const double bc1 = 1.0 - pow(o->beta1, (double)o->step), bc2 = 1.0 - pow(o->beta2, (double)o->step);
    const float b1 = o->beta1, b2 = o->beta2, eps = o->eps;
    const float step = (float)(lr / bc1), rbc2 = (float)(1.0 / sqrt(bc2));
    const float shrink = 1.0f - lr * o->weight_decay;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        if (decay[i]) w[i] *= shrink;
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        w[i] -= step * m[i] / (sqrtf(v[i]) * rbc2 + eps);
    }
}

float optim_clip(float *g, size_t n, float max_norm) {
    /* 256 fixed chunks summed in order: the same norm for any thread count */
    enum { CHUNKS = 256 };
    double part[CHUNKS];
    const size_t len = (n + CHUNKS - 1) / CHUNKS;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < CHUNKS; k++) {
        double s = 0;
        const size_t b = (size_t)k * len, e = b + len < n ? b + len : n;
        for (size_t i = b; i < e; i++) s += (double)g[i] * g[i];
        part[k] = s;
    }
    double total = 0;
    for (int k = 0; k < CHUNKS; k++) total += part[k];
    const float norm = (float)sqrt(total);
    if (max_norm > 0 && norm > max_norm) {
        const float f = max_norm / (norm + 1e-6f);
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) g[i] *= f;
    }
    return norm;
}

float optim_lr(const optim_schedule *s, long step) {
    if (step < s->warmup) return s->warmup_lr + (float)step * (s->lr - s->warmup_lr) / (float)s->warmup;
    const long span = s->total - s->warmup;
    if (span <= 0 || step >= s->total) return s->min_lr;
    const double f = 0.5 * (1.0 + cos(3.14159265358979323846 * (double)(step - s->warmup) / (double)span));
    return (float)(s->min_lr + (s->lr - s->min_lr) * f);
}
