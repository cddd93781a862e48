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

#include "kernels.h"
#include "mech.h"
#include "stage.h"
#include "stem.h"
#include "vitfam.h"


static size_t carve(char *base, size_t *off, size_t bytes_wanted, void **view) {
    size_t bytes = (bytes_wanted + 63) & ~(size_t)63;
    if (base && view) *view = base + *off;
    *off += bytes;
    return bytes;
}
#define CARVE_F(base, off, n, view) carve(base, off, (n) * sizeof(float), (void **)(view))

/* Some block's mechanism works on whole maps (Refiner): its gradients need dext. */
static int any_maps(const vit_config *c) {
    for (int l = 0; l < c->depth; l++)
        if (vit_mech_of(c, l)->maps) return 1;
    return 0;
}

size_t vit_grad_ws_carve(const vit_config *c, int B, void *base, vit_grad_ws *ws) {
    if (c->n_stages > 0) return vit_stage_grad_ws_carve(c, B, base, ws);
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
    if (vit_mech_any(c, VIT_MECH_WS_DY)) CARVE_F(p, &off, b * H * T * T, &v->dY);
    if (vit_mech_any(c, VIT_MECH_REUSES_SCORES | VIT_MECH_CARRY))
        for (int i = 0; i < 2; i++) CARVE_F(p, &off, b * H * T * T, &v->dkeep[i]);
    if (any_maps(c)) /* E is then the largest map work's heads */
        for (int i = 0; i < VIT_MAX_EXTRAS; i++) CARVE_F(p, &off, b * E * T * T, &v->dext[i]);
    const size_t part = vit_mech_part_floats(c);
    if (part) CARVE_F(p, &off, b * part, &v->part);
    carve(p, &off, b * H * sizeof(double), (void **)&v->scal);
    CARVE_F(p, &off, b * 2 * D, &v->dpool);
    CARVE_F(p, &off, b * T, &v->ones);
    if (base)
        for (size_t i = 0; i < b * T; i++) v->ones[i] = 1.0f;
    vit_stem_ws_carve(c, B, p, &off, base ? v : NULL);
    return off;
}

/* ---- small kernels ---- */

/* Backward of y (M, N; rows ldy apart) = x (M, K; rows ldx apart) W^T + b:
 * dW (N, K) += dy^T x, db += column sums of dy, dx (M, K) = (or +=) dy W. */
void vit_linear_backward(float *dW, float *db, float *dx, int dx_accumulate, const float *dy, int ldy,
                         const float *x, int ldx, const float *W, int M, int N, int K, const float *ones) {
    if (dx) /* both at once: a small layer's dW is one tile, which alone keeps one thread idle */
        kernels_gemm_pair(1, 0, N, K, M, 1.0f, dy, ldy, x, ldx, 1.0f, dW, K,
                          0, 0, M, K, N, 1.0f, dy, ldy, W, K, dx_accumulate ? 1.0f : 0.0f, dx, K);
    else
        kernels_gemm(1, 0, N, K, M, 1.0f, dy, ldy, x, ldx, 1.0f, dW, K);
    if (db) kernels_colsum_add(db, dy, M, N, ldy, 1.0f, ones);
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

/* Blocks LaViT's diagonality term applies to. */
static int dp_blocks(const vit_config *c) {
    int k = 0;
    for (int l = 0; l < c->depth; l++) k += (vit_mech_of(c, l)->flags & VIT_MECH_DP_TERM) != 0;
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

static float *hat(const vit_hview *v, int b, int h) {
    return v->base + (size_t)b * v->rows * v->ld + (size_t)h * v->width;
}

/* The view of layout entry i over the tape's qkv (rows W apart) or xn (rows D apart), or its
 * gradient's over dqkv or dxn; T rows per image. */
static vit_hview layout_view(const vit_mech_layout *lay, int i, float *qkv, float *xn, int T, int D, int width) {
    if (lay->src[i] == VIT_SRC_NONE) return (vit_hview){NULL, 0, 0, 0};
    return lay->src[i] == VIT_SRC_X ? (vit_hview){xn + lay->col[i], T, D, width}
                                    : (vit_hview){qkv + lay->col[i], T, lay->W, width};
}

/* What one (image, head) problem's backward reads: vit_attn_backward's for its steps 1 and 3. */
typedef struct {
    const vit_attn_bwd *j;
    const vit_mech *m;
    const vit_mech_block *mb;
    const vit_tape_block *t;
    const vit_geom *g;
    int H, hd, dq, gh, gw, dp_term, keeps_map;
    size_t TT;
    float scale;
    const float *P, *dnext, *prev;
    float *dprev;
    int local; /* dA and dS of each problem in the thread's scratch (one pass, nothing reads them later) */
} head_bwd;

/* Where problem bh's dA and dS go: the batch's ws->dA and ws->dS, or the calling thread's
 * scratch (x->local), which stays in cache from step 1 to step 3; the workspace without memory
 * for it. The same values either way. */
static void head_maps(const head_bwd *x, int bh, float **dA, float **dS) {
    float *s = x->local ? kernels_scratch(KERNELS_SCRATCH_HEAD_MAPS, 2 * x->TT) : NULL;
    *dA = s ? s : x->j->ws->dA + (size_t)bh * x->TT;
    *dS = s ? s + x->TT : x->j->ws->dS + (size_t)bh * x->TT;
}

/* Step 1 of problem bh: dA = dao v^T and dv = A^T dao (values that are x: the keys' gradient
 * adds to the same rows, same head, same task). */
static void head_values_bwd(const head_bwd *x, int bh, float *dA) {
    const vit_attn_bwd *j = x->j;
    const int b = bh / x->H, h = bh % x->H, Tq = j->Tq, Tk = j->Tk, D = x->g->D;
    const vit_hview gao = {j->ws->dao, Tq, D, x->hd};
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, x->hd, 1.0f, hat(&gao, b, h), D,
                hat(&j->v, b, h), j->v.ld, 0.0f, dA, Tk);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, x->hd, Tq, 1.0f, x->t->att + (size_t)bh * x->TT, Tk,
                hat(&gao, b, h), D, j->gv_add ? 1.0f : 0.0f, hat(&j->gv, b, h), j->gv.ld);
}

/* Step 3 of problem bh: softmax backward, the scores' own gradient from a following reuse block,
 * the mechanism's score gradient, then back to q and k. */
static void head_scores_bwd(const head_bwd *x, int bh, float *dA, float *dS) {
    const vit_attn_bwd *j = x->j;
    const vit_mech *m = x->m;
    vit_grad_ws *ws = j->ws;
    const int b = bh / x->H, h = bh % x->H, Tq = j->Tq, Tk = j->Tk;
    const size_t TT = x->TT;
    float *X = ws->dX + (size_t)bh * TT;
    if (x->dp_term) ws->scal[bh] = dp_term_backward(dA, x->t->att + (size_t)bh * TT, Tq, j->dp_coef, j->dp_loss);
    if (j->dA_add)
        for (size_t i = 0; i < TT; i++) dA[i] += j->dA_add[(size_t)bh * TT + i];
    if (x->dnext && x->keeps_map) /* the next block read this map itself */
        for (size_t i = 0; i < TT; i++) dA[i] += x->dnext[(size_t)bh * TT + i];
    if (m->flags & VIT_MECH_NO_SOFTMAX) memcpy(dS, dA, TT * sizeof(float));
    else kernels_softmax_backward_rows(dS, x->P + (size_t)bh * TT, dA, Tq, Tk);
    if (x->dnext && !x->keeps_map)
        for (size_t i = 0; i < TT; i++) dS[i] += x->dnext[(size_t)bh * TT + i];
    if (j->dS_add)
        for (size_t i = 0; i < TT; i++) dS[i] += j->dS_add[(size_t)bh * TT + i];
    const vit_attn_problem p = {.Tq = Tq, .Tk = Tk, .prefix = x->g->prefix, .gh = x->gh, .gw = x->gw, .H = x->H,
                                .h = h, .dq = x->dq, .scale = x->scale,
                                .q = j->q.base ? hat(&j->q, b, h) : NULL,
                                .k = j->k.base ? hat(&j->k, b, h) : NULL, .v = hat(&j->v, b, h),
                                .ldq = j->q.ld, .ldk = j->k.ld, .ldv = j->v.ld, .kgh = x->g->kgh, .kgw = x->g->kgw,
                                .prev = x->prev ? x->prev + (size_t)bh * TT : NULL};
    vit_mech_head_bwd hb = {.p = &p, .dA = dA, .dS = dS, .X = X,
                            .Y = ws->dY ? ws->dY + (size_t)bh * TT : NULL, .scal = ws->scal + bh,
                            .dprev = x->dprev ? x->dprev + (size_t)bh * TT : NULL, .dR = dS, .s = x->scale};
    if (m->head_backward) m->head_backward(x->mb, &hb);
    if (!hb.dR) return; /* the mechanism had no q or k */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, x->dq, Tk, hb.s, hb.dR, Tk, p.k, j->k.ld, 0.0f,
                hat(&j->gq, b, h), j->gq.ld);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, x->dq, Tq, hb.s, hb.dR, Tk, p.q, j->q.ld,
                j->gk_add ? 1.0f : 0.0f, hat(&j->gk, b, h), j->gk.ld);
}

double vit_attn_backward(const vit_attn_bwd *j) {
    const vit_config *c = j->c;
    const int l = j->l, n = j->n, Tq = j->Tq;
    const vit_mech *m = vit_mech_of(c, l);
    const vit_tape_block *t = &j->tape->blk[l];
    vit_grad_ws *ws = j->ws;
    vit_geom g;
    vit_mech_block mb;
    vit_mech_block_at(&mb, c, l, j->bp, &g);
    const int H = g.H, reuses = vit_mech_reads_prev(c, l);
    head_bwd x = {.j = j, .m = m, .mb = &mb, .t = t, .g = &g, .H = H, .hd = g.D / H, .dq = vit_qk_head_dim(c, l),
                  .dp_term = (m->flags & VIT_MECH_DP_TERM) && j->dp_coef != 0.0f && Tq == j->Tk,
                  .keeps_map = (m->flags & VIT_MECH_KEEPS_MAP) != 0, .TT = (size_t)Tq * j->Tk,
                  .scale = m->product_scale ? m->product_scale(c, l) : vit_attn_scale(c, l),
                  /* 3's softmax maps: the maps that multiplied the values, unless map work came after */
                  .P = (m->flags & VIT_MECH_SOFTMAX_EXTRA0) ? t->ext[0] : m->maps ? t->soft : t->att,
                  .dnext = vit_mech_next_reuses(c, l) ? ws->dkeep[(l + 1) & 1] : NULL,
                  .dprev = reuses ? ws->dkeep[l & 1] : NULL, .prev = reuses ? j->tape->blk[l - 1].keep : NULL};
    vit_mech_problem_grid(&g, &x.gh, &x.gw);
    /* Steps 1 and 3 run per problem in one pass while the problem's maps are in cache, unless map
     * work (2) comes between them or a gradient adds to rows another problem also writes (values
     * or keys that are x: the heads' columns may overlap). The same operations on each problem in
     * the same order: the same bits either way. */
    const int one_pass = !m->maps_backward && !j->gv_add && !j->gk_add;
    x.local = one_pass && j->maps_unread && (!m->params_backward || (m->flags & VIT_MECH_PARAMS_NO_MAPS));
    /* 1. dA = dao v^T and dv = A^T dao per (image, head) */
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < n * H; bh++) {
        float *dA, *dS;
        head_maps(&x, bh, &dA, &dS);
        head_values_bwd(&x, bh, dA);
        if (one_pass) head_scores_bwd(&x, bh, dA, dS);
    }
    /* 2. map work (Refiner): back to the softmax maps */
    if (m->maps_backward) m->maps_backward(&mb, j->gb, t, ws, n, Tq, j->Tk);
    /* 3. per (image, head), when not done above */
    if (!one_pass) {
#pragma omp parallel for schedule(dynamic, 1)
        for (int bh = 0; bh < n * H; bh++) head_scores_bwd(&x, bh, ws->dA + (size_t)bh * x.TT, ws->dS + (size_t)bh * x.TT);
    }
    /* 4. the small tensors' gradients, summed over images in order */
    double dp = 0;
    if (x.dp_term)
        for (int bh = 0; bh < n * H; bh++) dp += ws->scal[bh];
    if (m->params_backward) m->params_backward(&mb, j->gb, j->tape, ws, n, Tq, j->Tk);
    return dp;
}

/* One block's attention backward: from ws->dao to ws->dxn (the gradient of norm1's output),
 * adding every attention weight's gradient into gb. A block LaViT's term applies to, with
 * dp_coef != 0, also takes the term and returns its sum over the block's maps (else 0). */
static double attention_backward(const vit_config *c, int l, const vit_block_params *bp,
                               const vit_block_params *gb, const vit_tape *tape, vit_grad_ws *ws,
                               int n, float dp_coef, vit_dp_loss dp_loss) {
    const vit_mech *m = vit_mech_of(c, l);
    const vit_tape_block *t = &tape->blk[l];
    const int D = c->embed_dim, H = c->num_heads, T = vit_num_tokens(c), M = n * T, hd = D / H;
    const int dq = vit_qk_head_dim(c, l);
    vit_mech_layout lay;
    m->layout(c, l, &lay);
    /* forward views (q, k, v) and their gradients, laid out alike: into dqkv, or into dxn where
     * the view is xn1 itself (then the other gradients add to it) */
    const int k_x = lay.src[1] == VIT_SRC_X, v_x = lay.src[2] == VIT_SRC_X;
    if (k_x || v_x) memset(ws->dxn, 0, (size_t)M * D * sizeof(float));
    const vit_attn_bwd j = {
        .c = c, .l = l, .bp = bp, .gb = gb, .tape = tape, .ws = ws, .n = n, .Tq = T, .Tk = T,
        .q = layout_view(&lay, 0, t->qkv, t->xn1, T, D, dq), .k = layout_view(&lay, 1, t->qkv, t->xn1, T, D, dq),
        .v = layout_view(&lay, 2, t->qkv, t->xn1, T, D, hd),
        .gq = layout_view(&lay, 0, ws->dqkv, ws->dxn, T, D, dq), .gk = layout_view(&lay, 1, ws->dqkv, ws->dxn, T, D, dq),
        .gv = layout_view(&lay, 2, ws->dqkv, ws->dxn, T, D, hd), .gk_add = k_x, .gv_add = v_x,
        .dp_coef = dp_coef, .dp_loss = dp_loss, .maps_unread = 1};
    const double dp = vit_attn_backward(&j);
    /* 5. back through the projections into dxn (adding to what x's own views left there) */
    for (int i = 0; i < lay.n_proj; i++) {
        const vit_mech_proj *pr = &lay.proj[i];
        const float *gbias = vit_mech_weight(gb, pr->b);
        vit_linear_backward(WR(vit_mech_weight(gb, pr->w)), gbias ? WR(gbias) : NULL, ws->dxn,
                        i > 0 || k_x || v_x, ws->dqkv + pr->col, lay.W, t->xn1, D,
                        vit_mech_weight(bp, pr->w), M, pr->out, D, ws->ones);
    }
    return dp;
}

/* ---- the block's tail: LayerScale, proj, MLP ---- */

void vit_mlp_backward(const vit_config *c, const vit_block_params *bp, const vit_block_params *gb,
                      const vit_tape_block *t, vit_grad_ws *ws, float *dx, int rows, int D, int Hm) {
    /* x_out = x_mid + [gamma2 *] fc2(act(fc1(norm2(x_mid)))); dao is free until the attention's turn */
    const float *dy = dx;
    const float bs = vitfam_branch_scale(c);
    if (bp->ls2 || bs != 1.0f) {
        kernels_scaled_add_backward(ws->dao, bp->ls2 ? WR(gb->ls2) : NULL, dx, t->branch[1], bp->ls2, bs, rows, D);
        dy = ws->dao;
    }
    vit_linear_backward(WR(gb->fc2_w), WR(gb->fc2_b), ws->dhid, 0, dy, D, t->hid, Hm, bp->fc2_w, rows, D, Hm, ws->ones);
    vitfam_act_backward(c, ws->dhid, t->hpre, (size_t)rows * Hm);
    vit_linear_backward(WR(gb->fc1_w), WR(gb->fc1_b), ws->dxn, 0, ws->dhid, Hm, t->xn2, D, bp->fc1_w, rows, Hm, D, ws->ones);
    kernels_layernorm_backward(dx, WR(gb->norm2_w), WR(gb->norm2_b), ws->dxn, t->x_mid, bp->norm2_w, ws->ln_scratch,
                               rows, D, vitfam_block_eps(c));
}

void vit_proj_backward(const vit_config *c, const vit_block_params *bp, const vit_block_params *gb,
                       const vit_tape_block *t, vit_grad_ws *ws, const float *dx, int rows, int D) {
    /* x_mid = x_in + [gamma1 *] proj(ao); dxn is free until the attention's turn */
    const float *dy = dx;
    const float bs = vitfam_branch_scale(c);
    if (bp->ls1 || bs != 1.0f) {
        kernels_scaled_add_backward(ws->dxn, bp->ls1 ? WR(gb->ls1) : NULL, dx, bp->proj_w ? t->branch[0] : t->ao,
                                    bp->ls1, bs, rows, D);
        dy = ws->dxn;
    }
    if (bp->proj_w)
        vit_linear_backward(WR(gb->proj_w), WR(gb->proj_b), ws->dao, 0, dy, D, t->ao, D, bp->proj_w, rows, D, D, ws->ones);
    else
        memcpy(ws->dao, dy, (size_t)rows * D * sizeof(float));
}

/* ---- the whole model ---- */

double vit_backward(const vit_config *c, const vit_params *p, const vit_params *g, vit_acts *a,
                    vit_grad_ws *ws, const float *dlogits, int n, float dp_weight, vit_dp_loss dp_loss) {
    if (c->n_stages > 0) return vit_stage_backward(c, p, g, a, ws, dlogits, n, dp_weight, dp_loss);
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
    if (c->aux_head > 0) {
        /* the Refiner release's dense head: the class row's gradient and each class's arg-max
         * patch row's, through the final norm of every token (normalised again into dqkv) */
        float *xn = ws->dqkv;
        kernels_layernorm(xn, tape->x_final, p->norm_w, p->norm_b, M, D, eps);
        memset(ws->dxn, 0, MD * sizeof(float));
        for (int b = 0; b < n; b++) {
            const size_t row = (size_t)b * T * D;
            memcpy(ws->dxn + row, ws->dpool + (size_t)b * 2 * D, (size_t)D * sizeof(float));
            vitfam_aux_head_backward(c, p, g, xn + row + (size_t)prefix * D, Np, dlogits + (size_t)b * C,
                                     ws->dxn + row + (size_t)prefix * D, a->scratch);
        }
        kernels_layernorm_backward(ws->dx, WR(g->norm_w), WR(g->norm_b), ws->dxn, tape->x_final, p->norm_w,
                                   ws->ln_scratch, M, D, eps);
    } else if (token || c->fc_norm) {
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

    const int nl = dp_blocks(c);
    const double dp_norm = nl ? dp_weight / ((double)nl * n * H * T) : 0.0;
    const float dp_coef = (float)dp_norm;
    double dp = 0;
    for (int l = c->depth - 1; l >= 0; l--) {
        const vit_block_params *bp = &p->blocks[l], *gb = &g->blocks[l];
        const vit_tape_block *t = &tape->blk[l];
        vit_mlp_backward(c, bp, gb, t, ws, ws->dx, M, D, Hm);
        vit_proj_backward(c, bp, gb, t, ws, ws->dx, M, D);
        dp += attention_backward(c, l, bp, gb, tape, ws, n, dp_coef, dp_loss);
        kernels_layernorm_backward(ws->dx, WR(gb->norm1_w), WR(gb->norm1_b), ws->dxn, t->x_in, bp->norm1_w,
                               ws->ln_scratch, M, D, vitfam_block_eps(c));
    }

    /* x0 = [norm_pre]([cls, dist, registers, patches W^T + b] + pos_embed) */
    if (c->pre_norm) {
        memset(ws->dxn, 0, MD * sizeof(float));
        kernels_layernorm_backward(ws->dxn, WR(g->norm_pre_w), WR(g->norm_pre_b), ws->dx, tape->embed, p->norm_pre_w,
                                   ws->ln_scratch, M, D, eps);
        memcpy(ws->dx, ws->dxn, MD * sizeof(float));
    }
    vitfam_embed_backward(c, g, ws->dx, n);
    const size_t TD = (size_t)T * D;
    if (c->n_stem) { /* the convolutional stem, from the patch rows' gradients in place */
        vit_stem_backward(c, p, g, a, ws, ws->dx + (size_t)prefix * D, TD, n);
        return dp * dp_norm;
    }
    for (int b = 0; b < n; b++)
        memcpy(ws->dxn + (size_t)b * Np * D, ws->dx + (size_t)b * TD + (size_t)prefix * D,
               (size_t)Np * D * sizeof(float));
    vit_linear_backward(WR(g->patch_w), g->patch_b ? WR(g->patch_b) : NULL, NULL, 0, ws->dxn, D, a->patches, K, p->patch_w,
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
