/* stage_train.c: training a staged model (Swin v1: patch embedding and its LayerNorm, window
 * attention with the shift mask and the relative position bias, patch merging, the mean-pooled
 * head): the tape a training forward keeps (stage.c fills it) and the backward pass, block by
 * block in reverse, over the same problem tables as the forward. PVT v2 goes to pvt_train.c.
 *
 * Threads, as train.c: big GEMMs in kernels_gemm's fixed tiles; one OpenMP job per (image,
 * window) with single-threaded GEMMs inside; every gradient shared by windows or images (the
 * relative table, the qkv bias through the pad slots, LSLA's DS and bias tables) is summed
 * afterwards in a fixed order, so the result does not depend on the thread count. */
#include <cblas.h>
#include <omp.h>
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "attn_ops.h"
#include "cait.h"
#include "kernels.h"
#include "local.h"
#include "mech.h"
#include "pvt.h"
#include "stage.h"
#include "stem.h"
#include "train.h"


static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }

/* The grid of stage s and the merge's row count (n images) and width; 0 without a merge. */
static size_t merge_floats(const vit_config *c, int s, int n) {
    if (s == 0 || c->stage[s].down != VIT_DOWN_MERGE) return 0;
    vit_geom g;
    vit_block_geom(c, vit_stage_first_block(c, s), &g);
    return (size_t)n * g.T * 4 * c->stage[s - 1].embed_dim;
}

/* A mechanism the window backward covers: per-head hooks on the scores and the map (lmsa's own
 * projections, lsla's keys and values from x, its dynamic scale and biases), but no map work
 * across heads (refiner) and no scores kept across blocks (less). */
static int window_trainable(const vit_config *c, int l) {
    const vit_mech *m = vit_mech_of(c, l);
    vit_mech_layout lay;
    m->layout(c, l, &lay);
    return !m->maps && !m->maps_backward && !(m->flags & VIT_MECH_REUSES_SCORES) && !vit_mech_next_reuses(c, l) &&
           lay.src[0] == VIT_SRC_QKV;
}

/* The block's projection row width (vanilla: 3D; lmsa: 2 qk_dim + D). */
static int row_width(const vit_config *c, int l) {
    vit_mech_layout lay;
    vit_mech_of(c, l)->layout(c, l, &lay);
    return lay.W;
}

const char *vit_stage_untrainable(const vit_config *c) {
    if (c->family == VIT_FAMILY_PVT2) return NULL; /* pvt_train.c: every mechanism of its SRA scope */
    if (c->family == VIT_FAMILY_CAIT) return NULL; /* cait_train.c: vanilla, and MaiT's masks in SA blocks */
    for (int l = 0; l < c->depth; l++)
        if (!window_trainable(c, l)) return "an attention mechanism with map work across heads or blocks inside windows";
    return NULL;
}

size_t vit_stage_tape_carve(const vit_config *c, int B, void *base, vit_tape *t) {
    char *p = base;
    size_t off = 0;
    vit_tape tmp;
    vit_tape *v = t ? t : &tmp;
    if (base) memset(v, 0, sizeof *v);
    if (vit_stage_untrainable(c)) return 0; /* train_run refuses it first */
    if (c->family == VIT_FAMILY_PVT2) return pvt_tape_carve(c, B, base, v);
    if (c->family == VIT_FAMILY_CAIT) return cait_tape_carve(c, B, base, v);
    const size_t b = (size_t)B;
    vit_geom g;
    for (int l = 0; l < c->depth; l++) {
        vit_block_geom(c, l, &g);
        vit_tape_block *k = &v->blk[l];
        const size_t TD = b * g.T * g.D;
        vit_carve_floats(p, &off, TD, &k->x_in);
        vit_carve_floats(p, &off, TD, &k->xn1);
        vit_carve_floats(p, &off, b * g.T * (size_t)row_width(c, l), &k->qkv);
        const size_t S = (size_t)vit_local_side(c, l); /* local records (core/local.h), not maps */
        vit_carve_floats(p, &off, b * g.H * g.problems * g.Tq * (S ? S * S + 1 : (size_t)g.Tk), &k->att);
        for (int i = 0; i < VIT_MAX_EXTRAS; i++) { /* lsla: the softmax before its outer bias */
            vit_extra x;
            if (vit_extra_info(c, l, i, &x))
                vit_carve_floats(p, &off, b * (size_t)x.heads * g.problems * g.Tq * g.Tk, &k->ext[i]);
        }
        vit_carve_tape_tail(p, &off, k, b * g.T, (size_t)g.D, (size_t)g.Hm, 0);
    }
    for (int s = 1; s < c->n_stages; s++) {
        if (c->stage[s].down == VIT_DOWN_CONV) { /* CSwin's merge: its input, its conv's output */
            vit_geom gp, gs;
            vit_stage_grid(c, s - 1, &gp);
            vit_stage_grid(c, s, &gs);
            vit_carve_floats(p, &off, b * gp.T * gp.D, &v->down_in[s]);
            vit_carve_floats(p, &off, b * gs.T * gs.D, &v->down_pre[s]);
        }
        const size_t m = merge_floats(c, s, B);
        if (!m) continue;
        vit_carve_floats(p, &off, m, &v->merge_in[s]);
        vit_carve_floats(p, &off, m, &v->merge_ln[s]);
    }
    vit_block_geom(c, 0, &g);
    if (c->patch_norm) vit_carve_floats(p, &off, b * g.T * g.D, &v->embed);
    vit_block_geom(c, c->depth - 1, &g);
    vit_carve_floats(p, &off, b * g.T * g.D, &v->x_final);
    vit_stem_tape_carve(c, B, p, &off, v);
    return off;
}

/* Floats of one thread's window slot: q, k and their gradients (N, Wq) each, v, the output's
 * gradient and v's (N, D) each (the maps' gradients are the workspace's, per problem). */
static size_t slot_floats(int N, int D, int Wq) { /* + a local head's 2 dv doubles */
    return (4 * (size_t)N * Wq + 3 * (size_t)N * D + 4 * (size_t)D + 2 + 15) & ~(size_t)15;
}

size_t vit_ln_scratch_floats(size_t rows, size_t d) { return 2 * d * ((rows + KERNELS_LN_BLOCK - 1) / KERNELS_LN_BLOCK); }

size_t vit_stage_grad_ws_carve(const vit_config *c, int B, void *base, vit_grad_ws *ws) {
    char *p = base;
    size_t off = 0;
    vit_grad_ws tmp;
    vit_grad_ws *v = ws ? ws : &tmp;
    if (base) {
        memset(v, 0, sizeof *v);
        v->B = B;
    }
    if (c->family == VIT_FAMILY_PVT2) return pvt_grad_ws_carve(c, B, base, v);
    if (c->family == VIT_FAMILY_CAIT) return cait_grad_ws_carve(c, B, base, v);
    const size_t b = (size_t)B;
    size_t TD = 0, TW = 0, TH = 0, maps = 0, rpb = 0, pads = 0, slot = 0, ln = 0, rows = 0, dy = 0, dx = 0, scal = 0;
    vit_geom g;
    for (int l = 0; l < c->depth; l++) {
        vit_block_geom(c, l, &g);
        const size_t W = (size_t)row_width(c, l);
        TD = max_z(TD, b * g.T * g.D);
        TW = max_z(TW, b * g.T * W);
        TH = max_z(TH, b * g.T * g.Hm);
        if (!vit_local_side(c, l)) maps = max_z(maps, b * g.H * g.problems * g.Tq * g.Tk); /* local: none */
        rpb = max_z(rpb, (size_t)g.H * g.Tq * g.Tk);
        const vit_mech *m = vit_mech_of(c, l);
        if (m->flags & VIT_MECH_WS_DY) dy = max_z(dy, b * g.H * g.problems * g.Tq * g.Tk);
        if (m->uses_ws_x && m->uses_ws_x(c, l) && !vit_local_side(c, l)) {
            dx = max_z(dx, b * g.H * g.problems * g.Tq * g.Tk);
            scal = max_z(scal, b * g.H * g.problems);
        }
        pads = max_z(pads, b * g.problems * W);
        slot = max_z(slot, slot_floats(g.Tq, g.D, g.H * vit_qk_head_dim(c, l)));
        ln = max_z(ln, vit_ln_scratch_floats(b * g.T, g.D));
        rows = max_z(rows, b * g.T);
    }
    size_t col = 0; /* a conv downsample's 3x3 im2col (CSwin's merge) */
    for (int s = 1; s < c->n_stages; s++) {
        const size_t m = merge_floats(c, s, B);
        vit_block_geom(c, vit_stage_first_block(c, s), &g);
        if (c->stage[s].down == VIT_DOWN_CONV) col = max_z(col, b * g.T * 9 * c->stage[s - 1].embed_dim);
        TD = max_z(TD, m);
        if (m) ln = max_z(ln, vit_ln_scratch_floats(m / (4 * (size_t)c->stage[s - 1].embed_dim), 4 * (size_t)c->stage[s - 1].embed_dim));
    }
    vit_block_geom(c, c->depth - 1, &g);
    const size_t Dl = (size_t)g.D;
    vit_carve_floats(p, &off, TD, &v->dx);
    vit_carve_floats(p, &off, TD, &v->dxn);
    vit_carve_floats(p, &off, TD, &v->dao);
    vit_carve_floats(p, &off, ln, &v->ln_scratch);
    vit_carve_floats(p, &off, TW, &v->dqkv);
    vit_carve_floats(p, &off, TH, &v->dhid);
    vit_carve_floats(p, &off, maps, &v->dS);
    vit_carve_floats(p, &off, max_z(maps, rpb), &v->dA); /* the maps' dA, then the relative table's sum */
    /* lsla's dynamic scale: dS * (q x^T) in dX, dS * DS in dY; MaiT's soft masks: dS * raw in dX,
     * its sum per problem in scal */
    if (max_z(dy, dx)) vit_carve_floats(p, &off, max_z(dy, dx), &v->dX);
    if (dy) vit_carve_floats(p, &off, dy, &v->dY);
    if (scal) {
        float *s = NULL;
        vit_carve_floats(p, &off, 2 * scal, &s); /* doubles */
        v->scal = (double *)(void *)s;
    }
    vit_carve_floats(p, &off, pads, &v->padg);
    vit_carve_floats(p, &off, b * Dl, &v->dpool);
    vit_carve_floats(p, &off, rows, &v->ones);
    const int slots = omp_get_max_threads();
    vit_carve_floats(p, &off, (size_t)slots * slot, &v->slot);
    if (col) {
        vit_carve_floats(p, &off, col, &v->col);
        vit_carve_floats(p, &off, col, &v->dcol);
    }
    vit_stem_ws_carve(c, B, p, &off, v);
    if (base) {
        v->slots = slots;
        v->slot_floats = slot;
        for (size_t i = 0; i < rows; i++) v->ones[i] = 1.0f;
    }
    return off;
}

/* ---- window attention ---- */

typedef struct {
    const vit_tape_block *t;
    const vit_mech_layout *lay;
    const vit_mech *m;
    const vit_mech_block *mb;
    const vit_block_params *bp; /* the projections' biases: what a pad slot's columns are */
    const int *tok;      /* (P, N) grid token of each window row, -1 for a pad slot */
    const float *mask;   /* (P, N, N) the shift mask, NULL in an unshifted block */
    const float *dao;    /* (n, T, D) gradient of the attention output */
    float *dqkv;         /* (n, T, W) out: gradient of the projections */
    float *dxn;          /* (n, T, D) out (added): gradient of views that are x itself (lsla) */
    vit_grad_ws *ws;     /* dA, dS (and dX, dY) per problem ((image, window), head), out */
    float *padg;         /* (n, P, W) out: the pad slots' summed projection gradient per window */
    int n, T, D, H, P, N, M, dq;
    int side;            /* vit_local_side: every head local, the tape holds its records */
    float scale;
} window_bwd;

/* One (image, window) job. Per head h, with A the tape's map, P the softmax (A itself but for
 * lsla's outer bias) and S the scores (the mechanism's, + relative bias + shift mask):
 *   dA = dO V^T,  dV = A^T dO,  dS = P * (dA - rowsum(P * dA)),
 * then the mechanism's own step back through its scores (lsla: the dynamic scale), and
 *   dQ = s dR K,  dK = s dR^T Q  (dR = dS, or the mechanism's).
 * Real rows scatter to their token's row (a token sits in one window of a block): of dqkv, or
 * added to dxn for a view that is x; pad rows' projection gradients add up into the window's
 * padg entry (x's pad rows are zero, constants). The problem's maps go to the ws arrays at
 * ((b P + w) H + h) N^2: windows are the mechanism's images. */
static void window_problem_bwd(const window_bwd *j, int b, int w, float *scr) {
    const int N = j->N, D = j->D, H = j->H, hd = D / H, dq = j->dq, Wq = H * dq, W = j->lay->W;
    const size_t NQ = (size_t)N * Wq, ND = (size_t)N * D, NN = (size_t)N * N;
    float *Q = scr, *K = Q + NQ, *dQ = K + NQ, *dK = dQ + NQ, *V = dK + NQ, *dO = V + ND, *dV = dO + ND;
    const int *tok = j->tok + (size_t)w * N;
    const int *col = j->lay->col;
    const vit_grad_ws *ws = j->ws;
    for (int r = 0; r < N; r++) {
        float *dst[3] = {Q + (size_t)r * Wq, K + (size_t)r * Wq, V + (size_t)r * D};
        const int width[3] = {Wq, Wq, D};
        for (int i = 0; i < 3; i++)
            vit_window_view_row(j->lay, j->bp, j->t->qkv, j->t->xn1, j->T, D, i, b, tok[r], width[i], dst[i]);
        if (tok[r] >= 0) memcpy(dO + (size_t)r * D, j->dao + ((size_t)b * j->T + tok[r]) * D, (size_t)D * sizeof(float));
        else memset(dO + (size_t)r * D, 0, (size_t)D * sizeof(float)); /* a pad query's output is dropped */
    }
    const float *soft = (j->m->flags & VIT_MECH_SOFTMAX_EXTRA0) ? j->t->ext[0] : j->t->att;
    const int side = j->side;
    for (int h = 0; h < H && side; h++) { /* every head local: O(N R^2) (core/local.h) */
        vit_local loc;
        const int local = vit_local_head(j->mb->c, j->mb->l, h, &loc);
        assert(local && j->P == 1 && !j->mask);
        (void)local;
        const size_t o = (size_t)h * hd, oq = (size_t)h * dq, S2 = (size_t)side * side + 1;
        const uintptr_t acc = ((uintptr_t)(dV + ND) + 7) & ~(uintptr_t)7;
        const vit_local_bwd_job lj = {
            .gh = j->mb->g->gh, .gw = j->mb->g->gw, .dq = dq, .dv = hd, .scale = j->scale, .q = Q + oq,
            .k = K + oq, .v = V + o, .dout = dO + o, .ldq = Wq, .ldk = Wq, .ldv = D, .ldo = D, .loc = loc,
            .att_local = j->t->att + ((size_t)b * H + h) * N * S2, .rec_side = side, .dq_out = dQ + oq,
            .dk_out = dK + oq, .dv_out = dV + o, .acc = (double *)acc};
        vit_local_backward(&lj);
    }
    for (int h = 0; h < H && !side; h++) {
        const size_t map = (((size_t)b * H + h) * j->P + w) * NN, prob = ((size_t)b * j->P + w) * H + h;
        const float *A = j->t->att + map;
        float *dA = ws->dA + prob * NN, *dS = ws->dS + prob * NN;
        const size_t o = (size_t)h * hd, oq = (size_t)h * dq;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, hd, 1.0f, dO + o, D, V + o, D, 0.0f, dA, N);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, hd, N, 1.0f, A, N, dO + o, D, 0.0f, dV + o, D);
        kernels_softmax_backward_rows(dS, soft + map, dA, N, N);
        const vit_attn_problem p = {.Tq = N, .Tk = N, .gh = j->M, .gw = j->M, .H = H, .h = h, .dq = dq,
                                    .scale = j->scale, .q = Q + oq, .k = K + oq, .v = V + o, .ldq = Wq,
                                    .ldk = Wq, .ldv = D, .add_mask = j->mask ? j->mask + (size_t)w * NN : NULL};
        vit_mech_head_bwd x = {.p = &p, .dA = dA, .dS = dS, .X = ws->dX ? ws->dX + prob * NN : NULL,
                               .Y = ws->dY ? ws->dY + prob * NN : NULL, .scal = ws->scal ? ws->scal + prob : NULL,
                               .dR = dS, .s = j->scale};
        if (j->m->head_backward) j->m->head_backward(j->mb, &x);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, dq, N, x.s, x.dR, N, K + oq, Wq, 0.0f, dQ + oq, Wq);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, dq, N, x.s, x.dR, N, Q + oq, Wq, 0.0f, dK + oq, Wq);
    }
    float *pg = j->padg + ((size_t)b * j->P + w) * W;
    memset(pg, 0, (size_t)W * sizeof(float));
    for (int r = 0; r < N; r++) {
        const float *g[3] = {dQ + (size_t)r * Wq, dK + (size_t)r * Wq, dV + (size_t)r * D};
        const int width[3] = {Wq, Wq, D};
        for (int i = 0; i < 3; i++) {
            if (j->lay->src[i] == VIT_SRC_X) { /* x's pad rows are zeros, not parameters */
                float *dx = tok[r] >= 0 ? j->dxn + ((size_t)b * j->T + tok[r]) * D : NULL;
                for (int c = 0; dx && c < width[i]; c++) dx[c] += g[i][c];
            } else if (tok[r] >= 0)
                memcpy(j->dqkv + ((size_t)b * j->T + tok[r]) * W + col[i], g[i], (size_t)width[i] * sizeof(float));
            else
                for (int c = 0; c < width[i]; c++) pg[col[i] + c] += g[i][c];
        }
    }
}

/* Back through a window block's attention: ws->dao -> ws->dqkv (and ws->dxn for views of x), the
 * mechanism's own tensors, the relative table's gradient and the pad slots' share of the
 * projections' biases. */
static void window_backward(const vit_config *c, int l, const vit_geom *g, const vit_mech_layout *lay,
                            const vit_block_params *bp, const vit_block_params *gb, const vit_tape *tape,
                            const vit_acts *a, vit_grad_ws *ws, int n) {
    const int P = g->problems, N = g->Tq, H = g->H, W = lay->W;
    const size_t NN = (size_t)N * N;
    const vit_mech *m = vit_mech_of(c, l);
    vit_geom mg;
    vit_mech_block mb;
    vit_mech_block_at(&mb, c, l, bp, &mg);
    int M, M2;
    vit_mech_problem_grid(g, &M, &M2);
    const window_bwd j = {.t = &tape->blk[l], .lay = lay, .m = m, .mb = &mb, .bp = bp, .tok = a->tok[l],
                          .mask = a->mask[l], .dao = ws->dao, .dqkv = ws->dqkv, .dxn = ws->dxn, .ws = ws,
                          .padg = ws->padg, .n = n, .T = g->T, .D = g->D, .H = H, .P = P, .N = N, .M = M,
                          .dq = vit_qk_head_dim(c, l), .side = vit_local_side(c, l),
                          .scale = m->product_scale ? m->product_scale(c, l) : vit_attn_scale(c, l)};
    const int jobs = n * P, max = omp_get_max_threads(), slots = ws->slots < max ? ws->slots : max;
#pragma omp parallel num_threads(slots)
    {
        float *scr = ws->slot + (size_t)omp_get_thread_num() * ws->slot_floats;
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < jobs; i++) window_problem_bwd(&j, i / P, i % P, scr);
    }
    /* the mechanism's tensors (lsla's DS and biases), summed over its images: (image, window) */
    if (m->params_backward) m->params_backward(&mb, gb, tape, ws, n * P, N, N);
    /* the relative table: each head's score gradient summed over images and windows in order,
     * then through the relative index */
    if (g->scope == VIT_SCOPE_WINDOW && gb->rpb_table) {
        float *sum = ws->dA; /* (H, N, N); the maps' dA are used */
#pragma omp parallel for schedule(static)
        for (size_t e = 0; e < (size_t)H * NN; e++) {
            const size_t h = e / NN, i = e % NN;
            float s = 0;
            for (int b = 0; b < n; b++)
                for (int w = 0; w < P; w++) s += ws->dS[(((size_t)b * P + w) * H + h) * NN + i];
            sum[e] = s;
        }
        for (int h = 0; h < H; h++)
            vit_add_bias_backward(WR(gb->rpb_table), sum + (size_t)h * NN, VIT_BIAS_RELATIVE, H, h, N, g->M);
    }
    /* pad slots take the projections' biases: their gradients, window by window */
    for (int p = 0; p < lay->n_proj; p++) {
        const vit_mech_proj *pr = &lay->proj[p];
        float *gbias = WR(vit_mech_weight(gb, pr->b));
        for (int k = 0; k < jobs && gbias; k++) {
            const float *pg = ws->padg + (size_t)k * W + pr->col;
            for (int i = 0; i < pr->out; i++) gbias[i] += pg[i];
        }
    }
}

/* One block in reverse: ws->dx holds the gradient of the block's output and leaves with its
 * input's. x_mid = x_in + proj(attn(LN1(x_in))); x_out = x_mid + fc2(GELU(fc1(LN2(x_mid)))). */
static void block_backward(const vit_config *c, int l, const vit_block_params *bp, const vit_block_params *gb,
                           const vit_tape *tape, const vit_acts *a, vit_grad_ws *ws, int n) {
    const vit_tape_block *t = &tape->blk[l];
    vit_geom g;
    vit_block_geom(c, l, &g);
    const int D = g.D, Hm = g.Hm, M = n * g.T;
    const float eps = c->ln_eps;
    vit_mlp_backward(c, bp, gb, t, ws, ws->dx, M, D, Hm);
    vit_proj_backward(c, bp, gb, t, ws, ws->dx, M, D);
    vit_mech_layout lay;
    vit_mech_of(c, l)->layout(c, l, &lay);
    const int of_x = lay.src[1] == VIT_SRC_X || lay.src[2] == VIT_SRC_X; /* lsla: keys (values) are x */
    if (of_x) memset(ws->dxn, 0, (size_t)M * D * sizeof(float));
    window_backward(c, l, &g, &lay, bp, gb, tape, a, ws, n);
    for (int i = 0; i < lay.n_proj; i++) { /* back through the projections into dxn */
        const vit_mech_proj *pr = &lay.proj[i];
        const float *gbias = vit_mech_weight(gb, pr->b);
        vit_linear_backward(WR(vit_mech_weight(gb, pr->w)), gbias ? WR(gbias) : NULL, ws->dxn, i > 0 || of_x,
                            ws->dqkv + pr->col, lay.W, t->xn1, D, vit_mech_weight(bp, pr->w), M, pr->out, D, ws->ones);
    }
    kernels_layernorm_backward(ws->dx, WR(gb->norm1_w), WR(gb->norm1_b), ws->dxn, t->x_in, bp->norm1_w,
                               ws->ln_scratch, M, D, eps);
}

/* The inverse of stage.c's merge gather: dx (n, gh, gw, C) = each child's slice of the merged
 * rows' gradient dm (n, ceil(gh/2), ceil(gw/2), 4C), children in the order (0,0), (1,0), (0,1),
 * (1,1) as (dy, dx); the zero padding of an odd side takes no gradient. */
static void merge_scatter(float *dx, const float *dm, int n, int gh, int gw, int C) {
    const int h2 = (gh + 1) / 2, w2 = (gw + 1) / 2;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int y = 0; y < gh; y++)
            for (int x = 0; x < gw; x++) {
                const int k = (y & 1) | ((x & 1) << 1);
                memcpy(dx + (((size_t)b * gh + y) * gw + x) * C,
                       dm + (((size_t)b * h2 + y / 2) * w2 + x / 2) * 4 * C + (size_t)k * C, (size_t)C * sizeof(float));
            }
}

void vit_stage_head_backward(const vit_config *c, const vit_params *p, const vit_params *g, const vit_acts *a,
                             vit_grad_ws *ws, const float *dlogits, int n, int T, int D, float *dtok) {
    const int Cn = c->num_classes;
    kernels_gemm(1, 0, Cn, D, n, 1.0f, dlogits, Cn, a->pooled, D, 1.0f, WR(g->head_w), D);
    kernels_colsum_add(WR(g->head_b), dlogits, n, Cn, Cn, 1.0f, ws->ones);
    kernels_gemm(0, 0, n, D, Cn, 1.0f, dlogits, Cn, p->head_w, D, 0.0f, ws->dpool, D);
    for (int b = 0; b < n; b++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < D; i++) dtok[((size_t)b * T + t) * D + i] = ws->dpool[(size_t)b * D + i] / (float)T;
}

double vit_stage_backward(const vit_config *c, const vit_params *p, const vit_params *g, vit_acts *a,
                          vit_grad_ws *ws, const float *dlogits, int n, float dp_weight, vit_dp_loss dp_loss) {
    if (c->family == VIT_FAMILY_PVT2) return pvt_backward(c, p, g, a, ws, dlogits, n, dp_weight, dp_loss);
    if (c->family == VIT_FAMILY_CAIT) return cait_backward(c, p, g, a, ws, dlogits, n);
    const vit_tape *tape = a->tape;
    const float eps = c->ln_eps;
    vit_geom gl;
    vit_block_geom(c, c->depth - 1, &gl);
    int T = gl.T, D = gl.D;
    /* head: logits = head(mean_t LN(x_final)) */
    vit_stage_head_backward(c, p, g, a, ws, dlogits, n, T, D, ws->dxn);
    memset(ws->dx, 0, (size_t)n * T * D * sizeof(float));
    kernels_layernorm_backward(ws->dx, WR(g->norm_w), WR(g->norm_b), ws->dxn, tape->x_final, p->norm_w,
                               ws->ln_scratch, n * T, D, eps);
    for (int s = c->n_stages - 1; s >= 0; s--) {
        const int first = vit_stage_first_block(c, s);
        for (int l = first + c->stage[s].depth - 1; l >= first; l--)
            block_backward(c, l, &p->blocks[l], &g->blocks[l], tape, a, ws, n);
        if (s == 0) break;
        if (c->stage[s].down == VIT_DOWN_CONV) { /* CSwin's merge: x_s = LN(Conv2d(k3, s2, p1)(x_{s-1})) */
            pvt_downsample_backward(c, s, p, g, tape, ws, n);
            continue;
        }
        /* the merge: x_s = LN(gather(x_{s-1})) down_w^T, back to the previous stage's grid */
        vit_geom gp, gs;
        vit_block_geom(c, first - 1, &gp);
        vit_block_geom(c, first, &gs);
        const vit_stage_params *sp = &p->stages[s], *gs_p = &g->stages[s];
        const int rows = n * gs.T, W = 4 * gp.D;
        vit_linear_backward(WR(gs_p->down_w), NULL, ws->dxn, 0, ws->dx, gs.D, tape->merge_ln[s], W, sp->down_w,
                            rows, gs.D, W, ws->ones);
        memset(ws->dao, 0, (size_t)rows * W * sizeof(float));
        kernels_layernorm_backward(ws->dao, WR(gs_p->down_norm_w), WR(gs_p->down_norm_b), ws->dxn, tape->merge_in[s],
                                   sp->down_norm_w, ws->ln_scratch, rows, W, eps);
        merge_scatter(ws->dx, ws->dao, n, gp.gh, gp.gw, gp.D);
    }
    /* stem: x0 = LN(patches W^T + b) */
    vit_block_geom(c, 0, &gl);
    T = gl.T;
    D = gl.D;
    const float *dy = ws->dx;
    if (c->patch_norm) {
        memset(ws->dxn, 0, (size_t)n * T * D * sizeof(float));
        kernels_layernorm_backward(ws->dxn, WR(g->patch_norm_w), WR(g->patch_norm_b), ws->dx, tape->embed,
                                   p->patch_norm_w, ws->ln_scratch, n * T, D, eps);
        dy = ws->dxn;
    }
    if (c->n_stem) {
        vit_stem_backward(c, p, g, a, ws, dy, (size_t)T * D, n);
        return 0;
    }
    const int K = c->in_chans * c->patch_size * c->patch_size;
    vit_linear_backward(WR(g->patch_w), WR(g->patch_b), NULL, 0, dy, D, a->patches, K, p->patch_w, n * T, D, K,
                        ws->ones);
    return 0;
}
