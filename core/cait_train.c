/* cait_train.c: CaiT's backward pass (stage_train.c dispatches here for family "cait") over
 * the tape cait.c's forward fills: the class-attention blocks in reverse on the class token
 * alone (their keys and values take every row of [cls; x], so each adds to the patch rows'
 * gradient), then the talking-heads self-attention blocks, then the embedding.
 *
 * A talking-heads block mixes its heads twice, L' = W_l L + b_l before the softmax and
 * A' = W_w P + b_w after it, so one image's heads are coupled: its backward runs one job per
 * image, as the forward does. The mixes' weight gradients are per-image partials summed in
 * image order (thread-independent). MaiT's masks go through the mechanism's own hooks, on each
 * head's logits (mask_mix before_mix) or on the mixed ones (after_mix, with the mixed logits
 * handed to the hook as raw scores). */
#include <cblas.h>
#include <string.h>

#include "cait.h"
#include "kernels.h"
#include "mech.h"
#include "stage.h"
#include "train.h"

/* Rows of one image in a block (SA: the N patches; CA: [cls; x]) and the widest MLP. */
static void sizes(const vit_config *c, int *N, int *Hm) {
    const int G = c->img_size / c->patch_size;
    *N = G * G;
    *Hm = c->stage[0].mlp_hidden > c->stage[1].mlp_hidden ? c->stage[0].mlp_hidden : c->stage[1].mlp_hidden;
}

/* Floats per image of the talking-heads mixes' partial gradients: W_w, b_w, W_l, b_l. */
static size_t mix_part(int H) { return 2 * ((size_t)H * H + H); }

size_t cait_tape_carve(const vit_config *c, int B, void *base, vit_tape *v) {
    char *p = base;
    size_t off = 0;
    int N, Hmax;
    sizes(c, &N, &Hmax);
    const size_t b = (size_t)B, D = (size_t)c->embed_dim, T = (size_t)N + 1;
    const int ls = c->init_values > 0;
    for (int l = 0; l < c->depth; l++) {
        vit_geom g;
        vit_block_geom(c, l, &g);
        vit_tape_block *k = &v->blk[l];
        const size_t H = (size_t)g.H, Hm = (size_t)g.Hm;
        if (g.scope != VIT_SCOPE_CLASS) {
            const size_t rows = b * N, maps = b * H * N * N;
            vit_carve_floats(p, &off, rows * D, &k->x_in);
            vit_carve_floats(p, &off, rows * D, &k->xn1);
            vit_carve_floats(p, &off, rows * 3 * D, &k->qkv);
            vit_carve_floats(p, &off, maps, &k->att);
            for (int i = 0; i < 2 && vit_cait_talking(c, l); i++) vit_carve_floats(p, &off, maps, &k->ext[i]);
            vit_carve_tape_tail(p, &off, k, rows, D, Hm, ls);
            continue;
        }
        vit_carve_floats(p, &off, b * T * D, &k->x_in);
        vit_carve_floats(p, &off, b * T * D, &k->xn1);
        vit_carve_floats(p, &off, b * T * 2 * D, &k->qkv);
        vit_carve_floats(p, &off, b * D, &k->cq);
        vit_carve_floats(p, &off, b * H * T, &k->att);
        vit_carve_tape_tail(p, &off, k, b, D, Hm, ls); /* the class token's row per image */
    }
    vit_carve_floats(p, &off, b * D, &v->x_final);
    return off;
}

size_t cait_grad_ws_carve(const vit_config *c, int B, void *base, vit_grad_ws *ws) {
    char *p = base;
    size_t off = 0;
    int N, Hm;
    sizes(c, &N, &Hm);
    const size_t b = (size_t)B, D = (size_t)c->embed_dim, T = (size_t)N + 1, H = (size_t)c->num_heads;
    const size_t maps = b * H * N * N, W = 3 * (size_t)N > 2 * T ? 3 * (size_t)N : 2 * T;
    vit_carve_floats(p, &off, b * T * D, &ws->dx);
    vit_carve_floats(p, &off, b * T * D, &ws->dxn);
    vit_carve_floats(p, &off, vit_ln_scratch_floats(b * T, D), &ws->ln_scratch);
    vit_carve_floats(p, &off, b * W * D, &ws->dqkv);
    vit_carve_floats(p, &off, b * T * D, &ws->dao);
    vit_carve_floats(p, &off, b * T * (size_t)Hm, &ws->dhid);
    vit_carve_floats(p, &off, maps > b * H * T ? maps : b * H * T, &ws->dA); /* SA maps, or CA rows (N = 1) */
    vit_carve_floats(p, &off, maps, &ws->dS);
    vit_carve_floats(p, &off, maps, &ws->dX);
    vit_carve_floats(p, &off, b * mix_part((int)H), &ws->part);
    float *scal = NULL; /* (B * H) doubles */
    vit_carve_floats(p, &off, 2 * b * H, &scal);
    ws->scal = (double *)(void *)scal;
    vit_carve_floats(p, &off, b * 2 * D, &ws->dpool);
    vit_carve_floats(p, &off, b * D, &ws->dcls);
    vit_carve_floats(p, &off, b * D, &ws->dcq);
    vit_carve_floats(p, &off, b * T, &ws->ones);
    if (base)
        for (size_t i = 0; i < b * T; i++) ws->ones[i] = 1.0f;
    return off;
}

/* out (H, NN) (+)= W^T (H, H) in (H, NN): a mix's backward over the head axis. */
static void mix_back(float *out, const float *W, const float *in, int H, size_t NN) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, H, (int)NN, H, 1.0f, W, H, in, (int)NN, 0.0f, out, (int)NN);
}

/* A mix's weight and bias gradients from one image: dW (H, H) = dy (H, NN) x^T, db = row sums. */
static void mix_grads(float *dW, float *db, const float *dy, const float *x, int H, size_t NN) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, H, H, (int)NN, 1.0f, dy, (int)NN, x, (int)NN, 0.0f, dW, H);
    for (int g = 0; g < H; g++) {
        double s = 0;
        for (size_t e = 0; e < NN; e++) s += dy[(size_t)g * NN + e];
        db[g] = (float)s;
    }
}

/* The attention of SA block l, from ws->dao (n, N, D) to ws->dqkv (n, N, 3D). */
static void sa_attention_backward(const vit_config *c, int l, const vit_block_params *bp, const vit_block_params *gb,
                                  const vit_tape *tape, vit_grad_ws *ws, int n) {
    const vit_tape_block *t = &tape->blk[l];
    vit_geom g;
    vit_mech_block mb;
    vit_mech_block_at(&mb, c, l, bp, &g);
    const vit_mech *m = vit_mech_of(c, l);
    const int N = g.T, D = g.D, H = g.H, hd = D / H, W = 3 * D, th = vit_cait_talking(c, l);
    const int after = th && c->mask_mix == VIT_MASK_MIX_AFTER;
    const size_t NN = (size_t)N * N, map = (size_t)H * NN, part = mix_part(H);
    const float scale = vit_attn_scale(c, l);
#pragma omp parallel for schedule(dynamic, 1)
    for (int b = 0; b < n; b++) {
        const float *qkv = t->qkv + (size_t)b * N * W, *A = t->att + b * map, *dao = ws->dao + (size_t)b * N * D;
        float *dqkv = ws->dqkv + (size_t)b * N * W;
        float *dA = ws->dA + b * map, *dS = ws->dS + b * map, *X = ws->dX + b * map;
        float *pt = ws->part + b * part;
        /* out_g = A'_g v_g: dA'_g = dout_g v_g^T, dv_g = A'_g^T dout_g */
        for (int h = 0; h < H; h++) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, hd, 1.0f, dao + (size_t)h * hd, D,
                        qkv + 2 * D + (size_t)h * hd, W, 0.0f, dA + h * NN, N);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, hd, N, 1.0f, A + h * NN, N, dao + (size_t)h * hd, D,
                        0.0f, dqkv + 2 * D + (size_t)h * hd, W);
        }
        vit_attn_problem p = {.Tq = N, .Tk = N, .prefix = 0, .gh = g.gh, .gw = g.gw, .H = H, .dq = hd,
                              .scale = scale, .ldq = W, .ldk = W, .ldv = W};
        vit_mech_head_bwd x = {.p = &p};
        float *dR = dS; /* the gradient of the raw logits L = scale q k^T */
        if (th) {
            const float *P = t->ext[1] + b * map, *L = t->ext[0] + b * map;
            mix_grads(pt, pt + H * H, dA, P, H, NN); /* A' = W_w P + b_w */
            mix_back(dS, bp->thw_w, dA, H, NN);
            kernels_softmax_backward_rows(dS, P, dS, H * N, N);
            if (m->head_backward && after) { /* masks on the mixed logits W_l L + b_l */
                vit_cait_head_mix(dA, bp->thl_w, bp->thl_b, L, H, NN); /* dA is free: the forward's */
                for (int h = 0; h < H; h++) {
                    p.h = h, p.q = p.k = NULL;
                    x = (vit_mech_head_bwd){.p = &p, .dS = dS + h * NN, .X = X + h * NN, .raw = dA + h * NN,
                                            .scal = ws->scal + (size_t)b * H + h};
                    m->head_backward(&mb, &x);
                }
            }
            const size_t wl = (size_t)H * H + H; /* L' = W_l L + b_l */
            mix_grads(pt + wl, pt + wl + H * H, dS, L, H, NN);
            mix_back(dA, bp->thl_w, dS, H, NN);
            dR = dA;
        } else {
            kernels_softmax_backward_rows(dS, A, dA, H * N, N);
        }
        if (m->head_backward && !after) /* masks on each head's own logits */
            for (int h = 0; h < H; h++) {
                p.h = h, p.q = qkv + (size_t)h * hd, p.k = qkv + D + (size_t)h * hd, p.v = qkv + 2 * D + (size_t)h * hd;
                x = (vit_mech_head_bwd){.p = &p, .dS = dR + h * NN, .X = X + h * NN, .scal = ws->scal + (size_t)b * H + h};
                m->head_backward(&mb, &x);
            }
        for (int h = 0; h < H; h++) { /* dq_h = s dR_h k_h, dk_h = s dR_h^T q_h */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, hd, N, scale, dR + h * NN, N,
                        qkv + D + (size_t)h * hd, W, 0.0f, dqkv + (size_t)h * hd, W);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, hd, N, scale, dR + h * NN, N, qkv + (size_t)h * hd,
                        W, 0.0f, dqkv + D + (size_t)h * hd, W);
        }
    }
    if (th) { /* the mixes' gradients, summed over images in order */
        float *dst[4] = {WR(gb->thw_w), WR(gb->thw_b), WR(gb->thl_w), WR(gb->thl_b)};
        const size_t len[4] = {(size_t)H * H, (size_t)H, (size_t)H * H, (size_t)H};
        for (size_t i = 0, o = 0; i < 4; o += len[i], i++)
            for (size_t e = 0; e < len[i]; e++) {
                double s = 0;
                for (int b = 0; b < n; b++) s += ws->part[b * part + o + e];
                dst[i][e] += (float)s;
            }
    }
    if (m->params_backward) m->params_backward(&mb, gb, tape, ws, n, N, N);
}

/* Class-attention block l in reverse: ws->dcls (n, D) holds the gradient of the class token
 * after the block and leaves with the one before it; the keys' and values' share of the patch
 * rows adds to rows 1.. of ws->dx (n, T, D). */
static void ca_backward(const vit_config *c, int l, const vit_block_params *bp, const vit_block_params *gb,
                        const vit_tape_block *t, vit_grad_ws *ws, int n) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    const int T = g.T, D = g.D, H = g.H, hd = D / H, W = 2 * D;
    const float scale = vit_attn_scale(c, l);
    vit_mlp_backward(c, bp, gb, t, ws, ws->dcls, n, D, g.Hm);
    vit_proj_backward(c, bp, gb, t, ws, ws->dcls, n, D);
    /* per (image, head): a = softmax(s q k^T) (1, T), o = a v */
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < n * H; bh++) {
        const int b = bh / H, h = bh % H;
        const float *kv = t->qkv + (size_t)b * T * W, *a = t->att + (size_t)bh * T;
        const float *dout = ws->dao + (size_t)b * D + (size_t)h * hd, *q = t->cq + (size_t)b * D + (size_t)h * hd;
        float *dkv = ws->dqkv + (size_t)b * T * W, *da = ws->dA + (size_t)bh * T;
        cblas_sgemv(CblasRowMajor, CblasNoTrans, T, hd, 1.0f, kv + D + (size_t)h * hd, W, dout, 1, 0.0f, da, 1);
        for (int r = 0; r < T; r++) /* dv_r = a_r dout */
            for (int i = 0; i < hd; i++) dkv[(size_t)r * W + D + (size_t)h * hd + i] = a[r] * dout[i];
        kernels_softmax_backward_rows(da, a, da, 1, T);
        /* dq = s sum_r ds_r k_r, dk_r = s ds_r q */
        cblas_sgemv(CblasRowMajor, CblasTrans, T, hd, scale, kv + (size_t)h * hd, W, da, 1, 0.0f,
                    ws->dcq + (size_t)b * D + (size_t)h * hd, 1);
        for (int r = 0; r < T; r++)
            for (int i = 0; i < hd; i++) dkv[(size_t)r * W + (size_t)h * hd + i] = scale * da[r] * q[i];
    }
    /* k, v from every row of LN1(u); q from row 0 */
    const int rows = n * T;
    vit_linear_backward(WR(gb->k_w), gb->k_b ? WR(gb->k_b) : NULL, ws->dxn, 0, ws->dqkv, W, t->xn1, D, bp->k_w, rows,
                        D, D, ws->ones);
    vit_linear_backward(WR(gb->v_w), gb->v_b ? WR(gb->v_b) : NULL, ws->dxn, 1, ws->dqkv + D, W, t->xn1, D, bp->v_w,
                        rows, D, D, ws->ones);
    vit_linear_backward(WR(gb->q_w), gb->q_b ? WR(gb->q_b) : NULL, ws->dao, 0, ws->dcq, D, t->xn1, T * D, bp->q_w,
                        n, D, D, ws->ones);
    for (int b = 0; b < n; b++)
        for (int i = 0; i < D; i++) ws->dxn[(size_t)b * T * D + i] += ws->dao[(size_t)b * D + i];
    /* u's gradient: row 0 to the class token's residual, the rest to the patches' */
    for (int b = 0; b < n; b++) memset(ws->dx + (size_t)b * T * D, 0, (size_t)D * sizeof(float));
    kernels_layernorm_backward(ws->dx, WR(gb->norm1_w), WR(gb->norm1_b), ws->dxn, t->x_in, bp->norm1_w,
                               ws->ln_scratch, rows, D, c->ln_eps);
    for (int b = 0; b < n; b++)
        for (int i = 0; i < D; i++) ws->dcls[(size_t)b * D + i] += ws->dx[(size_t)b * T * D + i];
}

double cait_backward(const vit_config *c, const vit_params *p, const vit_params *g, vit_acts *a, vit_grad_ws *ws,
                     const float *dlogits, int n) {
    const vit_tape *tape = a->tape;
    int N, Hm;
    sizes(c, &N, &Hm);
    const int D = c->embed_dim, T = N + 1, L0 = c->stage[0].depth, M = n * N;
    /* head: logits = head(LN(cls)) */
    vit_stage_head_backward(c, p, g, a, ws, dlogits, n, 1, D, ws->dxn);
    memset(ws->dcls, 0, (size_t)n * D * sizeof(float));
    kernels_layernorm_backward(ws->dcls, WR(g->norm_w), WR(g->norm_b), ws->dxn, tape->x_final, p->norm_w,
                               ws->ln_scratch, n, D, c->ln_eps);
    memset(ws->dx, 0, (size_t)n * T * D * sizeof(float));
    for (int l = c->depth - 1; l >= L0; l--) ca_backward(c, l, &p->blocks[l], &g->blocks[l], &tape->blk[l], ws, n);
    for (int i = 0; i < D; i++) { /* u = [cls_token; x] */
        double s = 0;
        for (int b = 0; b < n; b++) s += ws->dcls[(size_t)b * D + i];
        WR(g->cls_token)[i] += (float)s;
    }
    for (int b = 0; b < n; b++) /* the patch rows, packed (n, N, D); first image first: no overlap */
        memmove(ws->dx + (size_t)b * N * D, ws->dx + ((size_t)b * T + 1) * D, (size_t)N * D * sizeof(float));
    for (int l = L0 - 1; l >= 0; l--) {
        const vit_block_params *bp = &p->blocks[l], *gb = &g->blocks[l];
        const vit_tape_block *t = &tape->blk[l];
        vit_geom gl;
        vit_block_geom(c, l, &gl);
        vit_mlp_backward(c, bp, gb, t, ws, ws->dx, M, D, gl.Hm);
        vit_proj_backward(c, bp, gb, t, ws, ws->dx, M, D);
        sa_attention_backward(c, l, bp, gb, tape, ws, n);
        vit_linear_backward(WR(gb->qkv_w), gb->qkv_b ? WR(gb->qkv_b) : NULL, ws->dxn, 0, ws->dqkv, 3 * D, t->xn1, D,
                            bp->qkv_w, M, 3 * D, D, ws->ones);
        kernels_layernorm_backward(ws->dx, WR(gb->norm1_w), WR(gb->norm1_b), ws->dxn, t->x_in, bp->norm1_w,
                                   ws->ln_scratch, M, D, c->ln_eps);
    }
    /* x = patches W^T + b + pos_embed */
    for (size_t i = 0; i < (size_t)N * D; i++) {
        double s = 0;
        for (int b = 0; b < n; b++) s += ws->dx[(size_t)b * N * D + i];
        WR(g->pos_embed)[i] += (float)s;
    }
    const int K = c->in_chans * c->patch_size * c->patch_size;
    vit_linear_backward(WR(g->patch_w), WR(g->patch_b), NULL, 0, ws->dx, D, a->patches, K, p->patch_w, M, D, K,
                        ws->ones);
    return 0;
}
