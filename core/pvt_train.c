/* pvt_train.c: training PVT v2 (pvt.c's forward in reverse): the overlapping stem and the
 * strided-conv downsampling with their LayerNorms, spatial-reduction attention (the R x R
 * conv and its LayerNorm, or the linear variant's pool, 1x1 conv, LayerNorm and GELU), any
 * mechanism that runs over the reduced keys (vanilla, LMSA's compressed q/k, LaViT's
 * less-attention with its diagonality term on square maps), MixFFN (fc1, the linear variant's
 * ReLU, the depth-wise 3x3 conv, GELU, fc2), the stage norms and the mean-pooled head.
 *
 * The tape a training forward keeps (pvt.c fills it) and the backward pass, block by block in
 * reverse. A convolution's im2col is recomputed from the tape's input instead of kept. Threads
 * as train.c: weight gradients in kernels_gemm's fixed tiles or in fixed-order sums, so the
 * result does not depend on the thread count. */
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "mech.h"
#include "pvt.h"
#include "stage.h"
#include "train.h"


static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }

/* Block l reduces its keys' grid. */
static int reduces(const vit_config *c, const vit_geom *g) { return c->sr_linear || g->sr_ratio > 1; }

size_t pvt_tape_carve(const vit_config *c, int B, void *base, vit_tape *v) {
    char *p = base;
    size_t off = 0;
    const size_t b = (size_t)B;
    vit_geom g;
    for (int l = 0; l < c->depth; l++) {
        vit_block_geom(c, l, &g);
        vit_tape_block *k = &v->blk[l];
        const size_t TD = b * g.T * g.D, TH = b * g.T * g.Hm, KD = b * g.Tk * g.D, Q = (size_t)pvt_q_width(c, l);
        const size_t maps = b * g.H * g.T * g.Tk;
        vit_carve_floats(p, &off, TD, &k->x_in);
        vit_carve_floats(p, &off, TD, &k->xn1);
        if (Q) vit_carve_floats(p, &off, b * g.T * Q, &k->qkv);
        if (reduces(c, &g)) {
            vit_carve_floats(p, &off, KD, &k->xr_pre);
            vit_carve_floats(p, &off, KD, &k->xr);
            if (c->sr_linear) vit_carve_floats(p, &off, KD, &k->sr_ln);
        }
        vit_carve_floats(p, &off, b * g.Tk * (Q + (size_t)g.D), &k->kv);
        vit_carve_floats(p, &off, maps, &k->att);
        if (vit_mech_next_reuses(c, l) || (pvt_feeds_ar(c, l) && c->ar_source == VIT_AR_SCORES))
            vit_carve_floats(p, &off, maps, &k->keep);
        vit_carve_tape_tail(p, &off, k, b * g.T, (size_t)g.D, (size_t)g.Hm, 0);
        vit_carve_floats(p, &off, TH, &k->hdw); /* MixFFN's depth-wise conv output */
    }
    for (int s = 0; s < c->n_stages && s < VIT_MAX_STAGES; s++) {
        vit_stage_grid(c, s, &g);
        const size_t TD = b * g.T * g.D;
        if (s == 0) vit_carve_floats(p, &off, TD, &v->embed);
        if (s > 0) {
            vit_geom gp;
            vit_stage_grid(c, s - 1, &gp);
            vit_carve_floats(p, &off, b * gp.T * gp.D, &v->down_in[s]);
            vit_carve_floats(p, &off, TD, &v->down_pre[s]);
        }
        float **pre = v->stage_pre + s;
        vit_carve_floats(p, &off, TD, pre);
        if (s > 0 && c->attn_residual) { /* LaViT's residual: conv, norm, 1x1 conv outputs */
            const size_t TT = b * g.T * g.Tk;
            vit_carve_floats(p, &off, TT * c->stage[s - 1].num_heads, &v->ar_dw[s]);
            if (c->ar_norm == VIT_AR_LAYERNORM) vit_carve_floats(p, &off, TT * c->stage[s - 1].num_heads, &v->ar_ln[s]);
            vit_carve_floats(p, &off, TT * g.H, &v->ar_pw[s]);
        }
    }
    vit_block_geom(c, c->depth - 1, &g);
    vit_carve_floats(p, &off, b * g.T * g.D, &v->x_final);
    return off;
}

size_t pvt_grad_ws_carve(const vit_config *c, int B, void *base, vit_grad_ws *v) {
    char *p = base;
    size_t off = 0;
    const size_t b = (size_t)B;
    size_t TD = 0, TQ = 0, KV = 0, KD = 0, TH = 0, maps = 0, sq = 0, ln = 0, rows = 0, col = 0, H = 0;
    vit_geom g;
    for (int l = 0; l < c->depth; l++) {
        vit_block_geom(c, l, &g);
        const size_t T = (size_t)g.T, D = (size_t)g.D, Tk = (size_t)g.Tk, Q = (size_t)pvt_q_width(c, l);
        TD = max_z(TD, T * D);
        TQ = max_z(TQ, T * Q);
        KV = max_z(KV, Tk * (Q + D));
        KD = max_z(KD, Tk * D);
        TH = max_z(TH, T * g.Hm);
        maps = max_z(maps, (size_t)g.H * T * Tk);
        if (vit_mech_of(c, l)->flags & VIT_MECH_WS_DY) sq = max_z(sq, T * T); /* less: per-image dPsi */
        /* rows: the T tokens, or the linear variant's 49 pooled keys, more than a grid under 7 x 7 has */
        const size_t R = max_z(T, Tk);
        ln = max_z(ln, vit_ln_scratch_floats(b * R, D));
        rows = max_z(rows, R);
        H = max_z(H, (size_t)g.H);
        /* the reduction's im2col (R^2 D per key) or pooled grid, and the pool's gradient */
        col = max_z(col, c->sr_linear ? R * D : Tk * D * (size_t)g.sr_ratio * g.sr_ratio);
    }
    size_t ar_src = 0, ar_mid = 0;
    for (int s = 1; s < c->n_stages; s++) {
        vit_stage_grid(c, s, &g);
        col = max_z(col, (size_t)g.T * 9 * c->stage[s - 1].embed_dim);
        if (!c->attn_residual) continue;
        vit_geom gp;
        vit_block_geom(c, vit_stage_first_block(c, s) - 1, &gp);
        ar_src = max_z(ar_src, (size_t)gp.H * gp.T * gp.Tk);
        ar_mid = max_z(ar_mid, (size_t)max_z((size_t)gp.H, (size_t)g.H) * g.T * g.Tk);
        ln = max_z(ln, vit_ln_scratch_floats(b * gp.H * g.T, (size_t)g.Tk));
    }
    vit_carve_floats(p, &off, b * TD, &v->dx);
    vit_carve_floats(p, &off, b * TD, &v->dxn);
    vit_carve_floats(p, &off, b * TD, &v->dao);
    vit_carve_floats(p, &off, ln, &v->ln_scratch);
    vit_carve_floats(p, &off, b * TQ, &v->dqkv);
    vit_carve_floats(p, &off, b * KV, &v->dkv);
    for (int i = 0; i < 2; i++) vit_carve_floats(p, &off, b * KD, &v->dxr[i]);
    vit_carve_floats(p, &off, b * col, &v->col);
    vit_carve_floats(p, &off, b * col, &v->dcol);
    vit_carve_floats(p, &off, b * TH, &v->dhid);
    vit_carve_floats(p, &off, b * TH, &v->dhid2);
    vit_carve_floats(p, &off, b * maps, &v->dA);
    vit_carve_floats(p, &off, b * maps, &v->dS);
    vit_carve_floats(p, &off, b * maps, &v->dX);
    if (vit_mech_any(c, VIT_MECH_WS_DY)) vit_carve_floats(p, &off, b * max_z(maps, sq), &v->dY);
    if (vit_mech_any(c, VIT_MECH_REUSES_SCORES))
        for (int i = 0; i < 2; i++) vit_carve_floats(p, &off, b * maps, &v->dkeep[i]);
    const size_t part = vit_mech_part_floats(c);
    if (part) vit_carve_floats(p, &off, b * part, &v->part);
    if (ar_src) {
        vit_carve_floats(p, &off, b * ar_src, &v->ar_dsrc);
        for (int i = 0; i < 2; i++) vit_carve_floats(p, &off, b * ar_mid, &v->ar_d[i]);
    }
    float *scal = NULL; /* (B H) doubles */
    vit_carve_floats(p, &off, b * H * (sizeof(double) / sizeof(float)), &scal);
    if (base) v->scal = (double *)(void *)scal;
    vit_block_geom(c, c->depth - 1, &g);
    vit_carve_floats(p, &off, b * g.D, &v->dpool);
    vit_carve_floats(p, &off, b * rows, &v->ones);
    if (base)
        for (size_t i = 0; i < b * rows; i++) v->ones[i] = 1.0f;
    return off;
}

/* The spatial reduction in reverse: ws->dxr[0] (n, T', D), the gradient of the keys' input,
 * back to xn1's gradient, added into ws->dxn. */
static void sra_backward(const vit_config *c, const vit_geom *g, const vit_block_params *bp,
                         const vit_block_params *gb, const vit_tape_block *t, vit_grad_ws *ws, int n) {
    const int D = g->D, Tk = g->Tk, rows = n * Tk;
    float *dxr = ws->dxr[0], *dpre = ws->dxr[1];
    if (c->sr_linear) kernels_gelu_backward(dxr, t->sr_ln, (size_t)rows * D);
    memset(dpre, 0, (size_t)rows * D * sizeof(float));
    kernels_layernorm_backward(dpre, WR(gb->sr_norm_w), WR(gb->sr_norm_b), dxr, t->xr_pre, bp->sr_norm_w,
                               ws->ln_scratch, rows, D, c->conv_ln_eps);
    if (c->sr_linear) { /* x' = pool(xn1) W^T + b: back through the 1x1 conv, then the pool */
        pvt_adaptive_pool(ws->col, t->xn1, n, g->gh, g->gw, D, 0);
        vit_linear_backward(WR(gb->sr_w), WR(gb->sr_b), dxr, 0, dpre, D, ws->col, D, bp->sr_w, rows, D, D, ws->ones);
        pvt_adaptive_pool(ws->dcol, dxr, n, g->gh, g->gw, D, 1);
        kernels_scaled_add(ws->dxn, ws->dcol, NULL, 1.0f, n * g->T, D);
        return;
    }
    const int R = g->sr_ratio, K = D * R * R;
    pvt_im2col(ws->col, t->xn1, n, g->gh, g->gw, D, (size_t)g->T * D, (size_t)g->gw * D, (size_t)D, 1, R, R, 0);
    vit_linear_backward(WR(gb->sr_w), WR(gb->sr_b), ws->dcol, 0, dpre, D, ws->col, K, bp->sr_w, rows, D, K, ws->ones);
    pvt_col2im(ws->dxn, ws->dcol, n, g->gh, g->gw, D, R, R, 0, 1);
}

/* LaViT's attention residual into stage s in reverse, from ws->dS (n, H, Tq, T'), the gradient
 * of the first block's scores it was added to, into its weights' gradients and ws->ar_dsrc
 * (n, h', Tq', T'), the gradient of its source. Every sum over images and positions runs in a
 * fixed order. */
static void ar_backward(const vit_config *c, int s, const vit_params *p, const vit_params *g, const vit_tape *tape,
                        vit_grad_ws *ws, int n) {
    const vit_stage_params *sp = &p->stages[s], *gs = &g->stages[s];
    vit_geom gp, gq;
    const int first = vit_stage_first_block(c, s);
    vit_block_geom(c, first - 1, &gp);
    vit_block_geom(c, first, &gq);
    const int hp = gp.H, H = gq.H, Tq = gq.T, Tk = gq.Tk, gw = gq.gw, pw = gp.gw;
    const size_t TT = (size_t)Tq * Tk, TTp = (size_t)gp.T * Tk;
    const float *dS = ws->dS, *pwo = tape->ar_pw[s], *dw_out = tape->ar_dw[s];
    const float *ln = tape->ar_ln[s] ? tape->ar_ln[s] : dw_out;
    const float *src = c->ar_source == VIT_AR_SCORES ? tape->blk[first - 1].keep : tape->blk[first - 1].att;
    float *dpw = ws->ar_d[0], *dln = ws->ar_d[1];
    /* out = gamma * pw, pw = W ln + bias: dgamma, pw's gradient and the bias's (its sum) */
#pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        double acc = 0, bias = 0;
        for (int b = 0; b < n; b++) {
            const size_t o = ((size_t)b * H + h) * TT;
            for (size_t e = 0; e < TT; e++) {
                acc += (double)dS[o + e] * pwo[o + e];
                bias += dpw[o + e] = sp->ar_gamma[h] * dS[o + e];
            }
        }
        WR(gs->ar_gamma)[h] += (float)acc;
        WR(gs->ar_pw_b)[h] += (float)bias;
    }
    /* pw_b (H, TT) = W (H, h') ln_b (h', TT) + bias: W's gradient and ln's */
    for (int b = 0; b < n; b++) {
        const float *db = dpw + (size_t)b * H * TT;
        kernels_gemm(0, 1, H, hp, (int)TT, 1.0f, db, (int)TT, ln + (size_t)b * hp * TT, (int)TT, 1.0f,
                     WR(gs->ar_pw_w), hp);
        kernels_gemm(1, 0, hp, (int)TT, H, 1.0f, sp->ar_pw_w, hp, db, (int)TT, 0.0f, dln + (size_t)b * hp * TT, (int)TT);
    }
    /* the norm over each row's keys (its gradient into dpw, free now) */
    const float *ddw = dln;
    if (c->ar_norm == VIT_AR_LAYERNORM) {
        memset(dpw, 0, (size_t)n * hp * TT * sizeof(float));
        kernels_layernorm_backward(dpw, WR(gs->ar_norm_w), WR(gs->ar_norm_b), dln, dw_out, sp->ar_norm_w,
                                   ws->ln_scratch, n * hp * Tq, Tk, 1e-5f);
        ddw = dpw;
    }
    /* the depth-wise 2x2 stride-2 conv: its weights' gradient per head, and the source's (each
     * source entry feeds one output: a scatter) */
#pragma omp parallel for schedule(static)
    for (int h = 0; h < hp; h++) {
        double acc[5] = {0};
        for (int b = 0; b < n; b++) {
            const float *x = src + ((size_t)b * hp + h) * TTp, *dy = ddw + ((size_t)b * hp + h) * TT;
            float *dx = ws->ar_dsrc + ((size_t)b * hp + h) * TTp;
            for (int q = 0; q < Tq; q++) {
                const int oy = q / gw, ox = q % gw;
                for (int k = 0; k < 4; k++) {
                    const size_t r = ((size_t)(2 * oy + k / 2) * pw + 2 * ox + k % 2) * Tk;
                    const float w = sp->ar_dw_w[(size_t)h * 4 + k];
                    for (int j = 0; j < Tk; j++) {
                        acc[k] += (double)dy[(size_t)q * Tk + j] * x[r + j];
                        dx[r + j] = w * dy[(size_t)q * Tk + j];
                    }
                }
                for (int j = 0; j < Tk; j++) acc[4] += dy[(size_t)q * Tk + j];
            }
        }
        for (int k = 0; k < 4; k++) WR(gs->ar_dw_w)[(size_t)h * 4 + k] += (float)acc[k];
        WR(gs->ar_dw_b)[h] += (float)acc[4];
    }
}

/* One block in reverse: ws->dx holds the gradient of the block's output and leaves with its
 * input's. x_mid = x_in + proj(SRA(LN1(x_in))); x_out = x_mid + fc2(GELU(dw(fc1(LN2(x_mid))))).
 * Returns LaViT's term of the block's maps (before dp_coef). */
static double block_backward(const vit_config *c, int l, const vit_params *p, const vit_params *gp,
                             const vit_tape *tape, vit_grad_ws *ws, int n, float dp_coef, vit_dp_loss dp_loss) {
    const vit_block_params *bp = &p->blocks[l], *gb = &gp->blocks[l];
    const vit_tape_block *t = &tape->blk[l];
    vit_geom g;
    vit_block_geom(c, l, &g);
    const int D = g.D, Hm = g.Hm, H = g.H, M = n * g.T, Tk = g.Tk, Q = pvt_q_width(c, l), KV = Q + D;
    const int dq = vit_qk_head_dim(c, l), hd = D / H;
    const float eps = c->ln_eps;
    /* MixFFN */
    vit_linear_backward(WR(gb->fc2_w), WR(gb->fc2_b), ws->dhid, 0, ws->dx, D, t->hid, Hm, bp->fc2_w, M, D, Hm, ws->ones);
    kernels_gelu_backward(ws->dhid, t->hdw, (size_t)M * Hm);
    kernels_dwconv3_backward(ws->dhid2, WR(gb->dw_w), WR(gb->dw_b), ws->dhid, t->hpre, bp->dw_w, n, g.gh, g.gw, Hm);
    if (c->sr_linear) /* ReLU: through where its output is positive */
        for (size_t i = 0; i < (size_t)M * Hm; i++) ws->dhid2[i] = t->hpre[i] > 0.0f ? ws->dhid2[i] : 0.0f;
    vit_linear_backward(WR(gb->fc1_w), WR(gb->fc1_b), ws->dxn, 0, ws->dhid2, Hm, t->xn2, D, bp->fc1_w, M, Hm, D, ws->ones);
    kernels_layernorm_backward(ws->dx, WR(gb->norm2_w), WR(gb->norm2_b), ws->dxn, t->x_mid, bp->norm2_w,
                               ws->ln_scratch, M, D, eps);
    /* attention over the reduced keys */
    vit_proj_backward(c, bp, gb, t, ws, ws->dx, M, D);
    vit_attn_bwd j = {
        .c = c, .l = l, .bp = bp, .gb = gb, .tape = tape, .ws = ws, .n = n, .Tq = g.T, .Tk = Tk,
        .q = {Q ? t->qkv : NULL, g.T, Q, dq}, .k = {Q ? t->kv : NULL, Tk, KV, dq}, .v = {t->kv + Q, Tk, KV, hd},
        .gq = {Q ? ws->dqkv : NULL, g.T, Q, dq}, .gk = {Q ? ws->dkv : NULL, Tk, KV, dq},
        .gv = {ws->dkv + Q, Tk, KV, hd}, .dp_coef = dp_coef, .dp_loss = dp_loss};
    if (pvt_feeds_ar(c, l)) { /* the next stage's residual read this block's scores or maps */
        if (c->ar_source == VIT_AR_SCORES) j.dS_add = ws->ar_dsrc;
        else j.dA_add = ws->ar_dsrc;
    }
    const double dp = vit_attn_backward(&j);
    if (c->attn_residual && g.stage > 0 && l == vit_stage_first_block(c, g.stage))
        ar_backward(c, g.stage, p, gp, tape, ws, n); /* ws->dS: this block's score gradient */
    /* q = xn1 Wq^T + b; [k | v] = x' Wkv^T + b with x' the reduced grid, or xn1 (R = 1) */
    if (Q) vit_linear_backward(WR(gb->q_w), WR(gb->q_b), ws->dxn, 0, ws->dqkv, Q, t->xn1, D, bp->q_w, M, Q, D, ws->ones);
    else memset(ws->dxn, 0, (size_t)M * D * sizeof(float));
    const float *kv_w = Q ? bp->kv_w : bp->v_w;
    float *gkv_w = WR(Q ? gb->kv_w : gb->v_w), *gkv_b = WR(Q ? gb->kv_b : gb->v_b);
    if (reduces(c, &g)) {
        vit_linear_backward(gkv_w, gkv_b, ws->dxr[0], 0, ws->dkv, KV, t->xr, D, kv_w, n * Tk, KV, D, ws->ones);
        sra_backward(c, &g, bp, gb, t, ws, n);
    } else {
        vit_linear_backward(gkv_w, gkv_b, ws->dxn, 1, ws->dkv, KV, t->xn1, D, kv_w, n * Tk, KV, D, ws->ones);
    }
    kernels_layernorm_backward(ws->dx, WR(gb->norm1_w), WR(gb->norm1_b), ws->dxn, t->x_in, bp->norm1_w,
                               ws->ln_scratch, M, D, eps);
    return dp;
}

/* Blocks whose maps take LaViT's term: less-attention with square maps (T' = T: R = 1). */
static int dp_square(const vit_config *c, int l) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    return (vit_mech_of(c, l)->flags & VIT_MECH_DP_TERM) && g.Tq == g.Tk;
}

void pvt_downsample_backward(const vit_config *c, int s, const vit_params *p, const vit_params *g,
                             const vit_tape *tape, vit_grad_ws *ws, int n) {
    /* x_s = LN(Conv2d(k3, s2, p1)(x_{s-1})) */
    vit_geom gp, gs;
    vit_stage_grid(c, s - 1, &gp);
    vit_stage_grid(c, s, &gs);
    const vit_stage_params *sp = &p->stages[s], *gsp = &g->stages[s];
    const int Ci = gp.D, K = 9 * Ci, C = gs.D, rows = n * gs.gh * gs.gw;
    memset(ws->dao, 0, (size_t)rows * C * sizeof(float));
    kernels_layernorm_backward(ws->dao, WR(gsp->down_norm_w), WR(gsp->down_norm_b), ws->dx, tape->down_pre[s],
                               sp->down_norm_w, ws->ln_scratch, rows, C, pvt_down_eps(c));
    pvt_im2col(ws->col, tape->down_in[s], n, gp.gh, gp.gw, Ci, (size_t)gp.gh * gp.gw * Ci, (size_t)gp.gw * Ci,
               (size_t)Ci, 1, 3, 2, 1);
    vit_linear_backward(WR(gsp->down_w), WR(gsp->down_b), ws->dcol, 0, ws->dao, C, ws->col, K, sp->down_w, rows, C,
                        K, ws->ones);
    pvt_col2im(ws->dx, ws->dcol, n, gp.gh, gp.gw, Ci, 3, 2, 1, 0);
}

double pvt_backward(const vit_config *c, const vit_params *p, const vit_params *g, vit_acts *a,
                    vit_grad_ws *ws, const float *dlogits, int n, float dp_weight, vit_dp_loss dp_loss) {
    const vit_tape *tape = a->tape;
    const int S = c->n_stages;
    vit_geom gs;
    vit_stage_grid(c, S - 1, &gs);
    /* head: logits = head(mean_t x) (the last stage's norm is the model's) */
    vit_stage_head_backward(c, p, g, a, ws, dlogits, n, gs.T, gs.D, ws->dx);
    int nl = 0;
    for (int l = 0; l < c->depth; l++) nl += dp_square(c, l);
    double dp = 0;
    for (int s = S - 1; s >= 0; s--) {
        vit_stage_grid(c, s, &gs);
        const vit_stage_params *sp = &p->stages[s], *gsp = &g->stages[s];
        const int rows = n * gs.T, C = gs.D;
        memcpy(ws->dxn, ws->dx, (size_t)rows * C * sizeof(float));
        memset(ws->dx, 0, (size_t)rows * C * sizeof(float));
        kernels_layernorm_backward(ws->dx, WR(gsp->stage_norm_w), WR(gsp->stage_norm_b), ws->dxn, tape->stage_pre[s],
                                   sp->stage_norm_w, ws->ln_scratch, rows, C, c->ln_eps);
        const int first = vit_stage_first_block(c, s);
        for (int l = first + c->stage[s].depth - 1; l >= first; l--) {
            vit_geom gl;
            vit_block_geom(c, l, &gl);
            const double coef = dp_square(c, l) ? dp_weight / ((double)nl * n * gl.H * gl.T) : 0.0;
            dp += coef * block_backward(c, l, p, g, tape, ws, n, (float)coef, dp_loss);
        }
        if (s == 0) break;
        pvt_downsample_backward(c, s, p, g, tape, ws, n);
    }
    /* stem: x0 = LN(Conv2d(k, s = patch, p = k / 2)(images)) */
    vit_stage_grid(c, 0, &gs);
    const int rows = n * gs.T, K = c->in_chans * c->patch_kernel * c->patch_kernel;
    memset(ws->dxn, 0, (size_t)rows * gs.D * sizeof(float));
    kernels_layernorm_backward(ws->dxn, WR(g->patch_norm_w), WR(g->patch_norm_b), ws->dx, tape->embed,
                               p->patch_norm_w, ws->ln_scratch, rows, gs.D, c->conv_ln_eps);
    vit_linear_backward(WR(g->patch_w), WR(g->patch_b), NULL, 0, ws->dxn, gs.D, a->patches, K, p->patch_w, rows,
                        gs.D, K, ws->ones);
    return dp;
}
