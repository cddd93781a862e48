/* pvt.c: PVT v2 on the stage frame (timm's pvt_v2.py in eval mode, docs/models.md "PVT v2"):
 * the overlapping stem and the strided-conv downsampling (one im2col + GEMM convolution for
 * both and for the spatial reduction), spatial-reduction attention (every token queries the keys
 * and values of a reduced grid), MixFFN and the stage norms; their weights, costs and geometry.
 * stage.c calls these with a line each. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "kernels.h"
#include "pvt.h"

static const char *const ar_source_names[] = {[VIT_AR_SCORES] = "scores", [VIT_AR_ATTN] = "attn"};
static const char *const ar_norm_names[] = {[VIT_AR_LAYERNORM] = "layernorm", [VIT_AR_NONE] = "none"};
const char *vit_ar_source_name(vit_ar_source s) { return (unsigned)s < VIT_AR_SOURCE_COUNT ? ar_source_names[s] : "?"; }
const char *vit_ar_norm_name(vit_ar_norm s) { return (unsigned)s < VIT_AR_NORM_COUNT ? ar_norm_names[s] : "?"; }

/* ---- geometry ---- */

void vit_sra_key_tokens(int sr_ratio, int sr_pool, int n, int i, int *lo, int *hi) {
    if (sr_pool > 0) {
        *lo = i * n / sr_pool;
        *hi = ((i + 1) * n + sr_pool - 1) / sr_pool;
    } else {
        const int R = sr_ratio > 0 ? sr_ratio : 1;
        *lo = R * i;
        *hi = R * i + R;
    }
}

void vit_sra_geom(const vit_config *c, vit_geom *g) {
    const vit_stage *st = &c->stage[g->stage];
    if (c->sr_linear) { /* pooled to 7 x 7 whatever the grid */
        g->sr_ratio = 0;
        g->sr_pool = VIT_SR_POOL;
        g->kgh = g->kgw = VIT_SR_POOL;
        const float bin = (float)g->gh / VIT_SR_POOL; /* equal bins when 7 divides the grid */
        g->key_stride_px = g->stride_px * bin;
        g->key_offset_px = g->offset_px + g->stride_px * 0.5f * (bin - 1.0f);
    } else {
        const int R = st->sr_ratio > 0 ? st->sr_ratio : 1;
        g->sr_ratio = R;
        g->kgh = (g->gh - R) / R + 1; /* Conv2d(k = R, s = R, p = 0) */
        g->kgw = (g->gw - R) / R + 1;
        g->key_stride_px = g->stride_px * (float)R; /* key y covers tokens R y .. R y + R - 1 */
        g->key_offset_px = g->offset_px + g->stride_px * 0.5f * (float)(R - 1);
    }
    g->Tk = g->kgh * g->kgw;
}

float vit_sra_key_centre(const vit_geom *g, int i, int axis) {
    const int n = axis ? g->gw : g->gh;
    if (!g->sr_pool) return g->key_offset_px + g->key_stride_px * (float)i;
    /* the mean of the bin's token centres */
    int lo, hi;
    vit_sra_key_tokens(0, VIT_SR_POOL, n, i, &lo, &hi);
    return g->offset_px + g->stride_px * 0.5f * (float)(lo + hi - 1);
}

int pvt_q_width(const vit_config *c, int l) {
    if (!vit_has_keys(c, l)) return 0;
    vit_geom g;
    vit_block_geom(c, l, &g);
    return g.H * vit_qk_head_dim(c, l);
}

/* ---- weights: timm's PyramidVisionTransformerV2 names ---- */

static void put(vit_spec_sink *k, const float **slot, const char *fmt, int a, int b, int ndim, const int *shape) {
    char suffix[96];
    snprintf(suffix, sizeof suffix, fmt, a, b);
    vit_mech_spec(k, slot, suffix, ndim, shape);
}
#define PUT(slot, shape, fmt, a, b) put(&k, (slot), (fmt), (a), (b), (int)(sizeof shape / sizeof shape[0]), shape)

int pvt_param_specs(const vit_config *c, vit_params *p, vit_tensor_spec *specs, int max) {
    int n = 0;
    vit_spec_sink k = {specs, max, &n, ""};
    memset(p, 0, sizeof *p);
    const int C0 = c->stage[0].embed_dim, K = c->patch_kernel;
    PUT(&p->patch_w, ((int[]){C0, c->in_chans, K, K}), "patch_embed.proj.weight", 0, 0);
    PUT(&p->patch_b, ((int[]){C0}), "patch_embed.proj.bias", 0, 0);
    PUT(&p->patch_norm_w, ((int[]){C0}), "patch_embed.norm.weight", 0, 0);
    PUT(&p->patch_norm_b, ((int[]){C0}), "patch_embed.norm.bias", 0, 0);
    for (int s = 0; s < c->n_stages; s++) {
        const vit_stage *st = &c->stage[s];
        vit_stage_params *sp = &p->stages[s];
        const int C = st->embed_dim;
        if (s > 0 && c->attn_residual) { /* LaViT's Eqs. 6-7 (attnscope's names) */
            vit_geom g;
            vit_block_geom(c, vit_stage_first_block(c, s), &g);
            const int hp = c->stage[s - 1].num_heads, h = st->num_heads;
            PUT(&sp->ar_dw_w, ((int[]){hp, 1, 2, 2}), "stages.%d.attn_residual.dw.weight", s, 0);
            PUT(&sp->ar_dw_b, ((int[]){hp}), "stages.%d.attn_residual.dw.bias", s, 0);
            if (c->ar_norm == VIT_AR_LAYERNORM) {
                PUT(&sp->ar_norm_w, ((int[]){g.Tk}), "stages.%d.attn_residual.norm.weight", s, 0);
                PUT(&sp->ar_norm_b, ((int[]){g.Tk}), "stages.%d.attn_residual.norm.bias", s, 0);
            }
            PUT(&sp->ar_pw_w, ((int[]){h, hp, 1, 1}), "stages.%d.attn_residual.pw.weight", s, 0);
            PUT(&sp->ar_pw_b, ((int[]){h}), "stages.%d.attn_residual.pw.bias", s, 0);
            PUT(&sp->ar_gamma, ((int[]){h}), "stages.%d.attn_residual.gamma", s, 0);
        }
        if (s > 0) {
            const int Ci = c->stage[s - 1].embed_dim;
            PUT(&sp->down_w, ((int[]){C, Ci, 3, 3}), "stages.%d.downsample.proj.weight", s, 0);
            PUT(&sp->down_b, ((int[]){C}), "stages.%d.downsample.proj.bias", s, 0);
            PUT(&sp->down_norm_w, ((int[]){C}), "stages.%d.downsample.norm.weight", s, 0);
            PUT(&sp->down_norm_b, ((int[]){C}), "stages.%d.downsample.norm.bias", s, 0);
        }
        const int first = vit_stage_first_block(c, s);
        for (int j = 0; j < st->depth && first + j < VIT_MAX_DEPTH; j++) {
            vit_block_params *b = &p->blocks[first + j];
            vit_geom g;
            vit_block_geom(c, first + j, &g);
            const int Hm = g.Hm, R = c->sr_linear ? 1 : g.sr_ratio, Q = pvt_q_width(c, first + j);
            const char *blk = "stages.%d.blocks.%d.";
            char f[128];
#define BPUT(slot, shape, suffix)                                 \
    do {                                                          \
        snprintf(f, sizeof f, "%s%s", blk, suffix);               \
        PUT(slot, shape, f, s, j);                                \
    } while (0)
            BPUT(&b->norm1_w, ((int[]){C}), "norm1.weight");
            BPUT(&b->norm1_b, ((int[]){C}), "norm1.bias");
            if (vit_has_keys(c, first + j)) {
                BPUT(&b->q_w, ((int[]){Q, C}), "attn.q.weight");
                if (c->qkv_bias) BPUT(&b->q_b, ((int[]){Q}), "attn.q.bias");
                BPUT(&b->kv_w, ((int[]){Q + C, C}), "attn.kv.weight");
                if (c->qkv_bias) BPUT(&b->kv_b, ((int[]){Q + C}), "attn.kv.bias");
            } else { /* less-attention: the module's attn.v over the reduced keys, Theta, Psi */
                vit_spec_sink sink = {specs, max, &n, ""};
                snprintf(sink.prefix, sizeof sink.prefix, "stages.%d.blocks.%d", s, j);
                vit_geom mg;
                vit_mech_block mb;
                vit_mech_block_at(&mb, c, first + j, NULL, &mg);
                vit_mech_of(c, first + j)->specs(&mb, b, &sink);
            }
            if (c->sr_linear || R > 1) {
                BPUT(&b->sr_w, ((int[]){C, C, R, R}), "attn.sr.weight");
                BPUT(&b->sr_b, ((int[]){C}), "attn.sr.bias");
                BPUT(&b->sr_norm_w, ((int[]){C}), "attn.norm.weight");
                BPUT(&b->sr_norm_b, ((int[]){C}), "attn.norm.bias");
            }
            BPUT(&b->proj_w, ((int[]){C, C}), "attn.proj.weight");
            BPUT(&b->proj_b, ((int[]){C}), "attn.proj.bias");
            BPUT(&b->norm2_w, ((int[]){C}), "norm2.weight");
            BPUT(&b->norm2_b, ((int[]){C}), "norm2.bias");
            BPUT(&b->fc1_w, ((int[]){Hm, C}), "mlp.fc1.weight");
            BPUT(&b->fc1_b, ((int[]){Hm}), "mlp.fc1.bias");
            BPUT(&b->dw_w, ((int[]){Hm, 1, 3, 3}), "mlp.dwconv.weight");
            BPUT(&b->dw_b, ((int[]){Hm}), "mlp.dwconv.bias");
            BPUT(&b->fc2_w, ((int[]){C, Hm}), "mlp.fc2.weight");
            BPUT(&b->fc2_b, ((int[]){C}), "mlp.fc2.bias");
#undef BPUT
        }
        PUT(&sp->stage_norm_w, ((int[]){C}), "stages.%d.norm.weight", s, 0);
        PUT(&sp->stage_norm_b, ((int[]){C}), "stages.%d.norm.bias", s, 0);
    }
    const int CL = c->stage[c->n_stages - 1].embed_dim, NC = c->num_classes;
    if (NC > 0) {
        PUT(&p->head_w, ((int[]){NC, CL}), "head.weight", 0, 0);
        PUT(&p->head_b, ((int[]){NC}), "head.bias", 0, 0);
    }
    return n;
}
#undef PUT

/* ---- sizes ---- */

void pvt_acts_need(const vit_config *c, pvt_need *z) {
    memset(z, 0, sizeof *z);
    vit_geom g;
    vit_block_geom(c, 0, &g);
    z->stem_col = (size_t)g.gh * g.gw * c->in_chans * c->patch_kernel * c->patch_kernel;
    for (int s = 1; s < c->n_stages; s++) {
        vit_block_geom(c, vit_stage_first_block(c, s), &g);
        const size_t m = (size_t)g.gh * g.gw * 9 * c->stage[s - 1].embed_dim;
        if (m > z->down_col) z->down_col = m;
    }
    for (int l = 0; l < c->depth; l++) {
        vit_block_geom(c, l, &g);
        const size_t D = (size_t)g.D, Tk = (size_t)g.Tk;
        /* the conv's gathered input, or the pooled grid (linear) */
        const size_t col = c->sr_linear ? Tk * D : g.sr_ratio > 1 ? Tk * D * g.sr_ratio * g.sr_ratio : 0;
        if (col > z->sr_col) z->sr_col = col;
        if (Tk * D > z->xr) z->xr = Tk * D;
        const size_t kvw = Tk * ((size_t)pvt_q_width(c, l) + D); /* [k (Q) | v (D)] rows */
        if (kvw > z->kv) z->kv = kvw;
        if ((size_t)g.T * g.Hm > z->hid2) z->hid2 = (size_t)g.T * g.Hm;
    }
    for (int s = 1; s < c->n_stages && c->attn_residual; s++) {
        vit_geom gp;
        vit_block_geom(c, vit_stage_first_block(c, s) - 1, &gp);
        vit_block_geom(c, vit_stage_first_block(c, s), &g);
        const size_t TT = (size_t)g.T * g.Tk;
        if ((size_t)gp.H * gp.T * gp.Tk > z->ar_src) z->ar_src = (size_t)gp.H * gp.T * gp.Tk;
        if ((size_t)gp.H * TT > z->ar_mid) z->ar_mid = (size_t)gp.H * TT;
        if ((size_t)g.H * TT > z->ar_out) z->ar_out = (size_t)g.H * TT;
    }
}

/* ---- LaViT's attention residual ---- */

int pvt_feeds_ar(const vit_config *c, int l) {
    if (!c->attn_residual) return 0;
    for (int s = 1; s < c->n_stages; s++)
        if (l == vit_stage_first_block(c, s) - 1) return 1;
    return 0;
}

void pvt_attn_residual(const vit_config *c, int s, const vit_params *p, vit_acts *a, int n) {
    const vit_stage_params *sp = &p->stages[s];
    vit_geom gp, g;
    vit_block_geom(c, vit_stage_first_block(c, s) - 1, &gp);
    vit_block_geom(c, vit_stage_first_block(c, s), &g);
    const int hp = gp.H, H = g.H, Tk = g.Tk, gw = g.gw, pw = gp.gw, Tq = g.T;
    const size_t TT = (size_t)Tq * Tk, TTp = (size_t)gp.T * Tk;
    vit_tape *t = a->tape;
    float *dw = t ? t->ar_dw[s] : a->ar_dw, *out = t ? t->ar_pw[s] : a->ar_out;
    float *ln = c->ar_norm == VIT_AR_NONE ? dw : t ? t->ar_ln[s] : a->ar_ln;
    /* the depth-wise 2x2 stride-2 conv over the query grid, every key on its own */
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int h = 0; h < hp; h++) {
            const float *src = a->ar_src + ((size_t)b * hp + h) * TTp, *w = sp->ar_dw_w + (size_t)h * 4;
            float *o = dw + ((size_t)b * hp + h) * TT;
            for (int q = 0; q < Tq; q++) {
                const int oy = q / gw, ox = q % gw;
                const float *r[4];
                for (int k = 0; k < 4; k++) r[k] = src + ((size_t)(2 * oy + k / 2) * pw + 2 * ox + k % 2) * Tk;
                for (int j = 0; j < Tk; j++)
                    o[(size_t)q * Tk + j] = sp->ar_dw_b[h] + w[0] * r[0][j] + w[1] * r[1][j] + w[2] * r[2][j] + w[3] * r[3][j];
            }
        }
    if (c->ar_norm == VIT_AR_LAYERNORM)
        kernels_layernorm(ln, dw, sp->ar_norm_w, sp->ar_norm_b, n * hp * Tq, Tk, 1e-5f);
    /* the 1x1 conv across heads: out_b (H, Tq T') = W (H, h') ln_b (h', Tq T') + bias, per image */
#pragma omp parallel for schedule(static)
    for (int b = 0; b < n; b++) {
        float *ob = out + (size_t)b * H * TT;
        for (int h = 0; h < H; h++)
            for (size_t e = 0; e < TT; e++) ob[(size_t)h * TT + e] = sp->ar_pw_b[h];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, H, (int)TT, hp, 1.0f, sp->ar_pw_w, hp,
                    ln + (size_t)b * hp * TT, (int)TT, 1.0f, ob, (int)TT);
    }
    /* LayerScale */
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int h = 0; h < H; h++) {
            const size_t o = ((size_t)b * H + h) * TT;
            for (size_t e = 0; e < TT; e++) a->ar_out[o + e] = sp->ar_gamma[h] * out[o + e];
        }
}

/* ---- convolution: im2col + GEMM ---- */

void pvt_im2col(float *col, const float *x, int n, int H, int W, int C, size_t sb, size_t sy, size_t sx,
                size_t sc, int k, int s, int p) {
    const int Ho = (H + 2 * p - k) / s + 1, Wo = (W + 2 * p - k) / s + 1, kk = k * k, K = C * kk;
    enum { TAPS = 1024 }; /* kernels up to 32 x 32 */
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int oy = 0; oy < Ho; oy++) {
            /* each tap's offset in the image, or -1 in the padding: found once per position,
             * not once per channel */
            ptrdiff_t off[TAPS];
            for (int ox = 0; ox < Wo; ox++) {
                float *dst = col + (((size_t)b * Ho + oy) * Wo + ox) * K;
                const float *xb = x + b * sb;
                for (int ky = 0; ky < k; ky++) {
                    const int iy = oy * s - p + ky;
                    for (int kx = 0; kx < k; kx++) {
                        const int ix = ox * s - p + kx;
                        const int in = iy >= 0 && iy < H && ix >= 0 && ix < W;
                        if (kk <= TAPS) off[ky * k + kx] = in ? (ptrdiff_t)((size_t)iy * sy + (size_t)ix * sx) : -1;
                        else /* larger kernels: each tap as it comes */
                            for (int ch = 0; ch < C; ch++)
                                dst[((size_t)ch * k + ky) * k + kx] = in ? xb[(size_t)iy * sy + (size_t)ix * sx + (size_t)ch * sc] : 0.0f;
                    }
                }
                if (kk > TAPS) continue;
                for (int ch = 0; ch < C; ch++) {
                    const float *xc = xb + (size_t)ch * sc;
                    float *d = dst + (size_t)ch * kk;
                    for (int t = 0; t < kk; t++) d[t] = off[t] >= 0 ? xc[off[t]] : 0.0f;
                }
            }
        }
}

void pvt_col2im(float *dx, const float *dcol, int n, int H, int W, int C, int k, int s, int p, int accumulate) {
    const int Ho = (H + 2 * p - k) / s + 1, Wo = (W + 2 * p - k) / s + 1, K = C * k * k;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int iy = 0; iy < H; iy++)
            for (int ix = 0; ix < W; ix++) {
                float *o = dx + (((size_t)b * H + iy) * W + ix) * C;
                if (!accumulate) memset(o, 0, (size_t)C * sizeof(float));
                for (int ky = 0; ky < k; ky++) {
                    const int ty = iy + p - ky; /* = oy s */
                    if (ty < 0 || ty % s || ty / s >= Ho) continue;
                    for (int kx = 0; kx < k; kx++) {
                        const int tx = ix + p - kx;
                        if (tx < 0 || tx % s || tx / s >= Wo) continue;
                        const float *src = dcol + (((size_t)b * Ho + ty / s) * Wo + tx / s) * K + (size_t)ky * k + kx;
                        for (int ch = 0; ch < C; ch++) o[ch] += src[(size_t)ch * k * k];
                    }
                }
            }
}

/* y (n Ho Wo, Cout) = Conv2d(x NHWC (n, H, W, C); w (Cout, C, k, k) as PyTorch stores it) */
static void conv_nhwc(float *y, float *col, const float *x, const float *w, const float *b, int n, int H,
                      int W, int C, int Cout, int k, int s, int p) {
    const int Ho = (H + 2 * p - k) / s + 1, Wo = (W + 2 * p - k) / s + 1;
    pvt_im2col(col, x, n, H, W, C, (size_t)H * W * C, (size_t)W * C, (size_t)C, 1, k, s, p);
    vit_linear(y, col, w, b, n * Ho * Wo, Cout, C * k * k, 0);
}

void pvt_stem(const vit_config *c, const vit_params *p, vit_acts *a, const float *images, int n) {
    const int S = c->img_size, Cin = c->in_chans, k = c->patch_kernel, P = c->patch_size;
    const int G = (S + 2 * (k / 2) - k) / P + 1, C0 = c->stage[0].embed_dim;
    pvt_im2col(a->patches, images, n, S, S, Cin, (size_t)Cin * S * S, (size_t)S, 1, (size_t)S * S, k, P, k / 2);
    vit_linear(a->x, a->patches, p->patch_w, p->patch_b, n * G * G, C0, Cin * k * k, 0);
    if (a->tape) memcpy(a->tape->embed, a->x, (size_t)n * G * G * C0 * sizeof(float));
    kernels_layernorm(a->x, a->x, p->patch_norm_w, p->patch_norm_b, n * G * G, C0, c->conv_ln_eps);
}

void pvt_downsample(const vit_config *c, int s, const vit_params *p, vit_acts *a, int n, int gh, int gw) {
    const vit_stage_params *sp = &p->stages[s];
    const int Ci = c->stage[s - 1].embed_dim, C = c->stage[s].embed_dim;
    const int rows = n * ((gh - 1) / 2 + 1) * ((gw - 1) / 2 + 1);
    vit_tape *t = a->tape;
    if (t) memcpy(t->down_in[s], a->x, (size_t)n * gh * gw * Ci * sizeof(float));
    float *y = t ? t->down_pre[s] : a->xn;
    conv_nhwc(y, a->merge, a->x, sp->down_w, sp->down_b, n, gh, gw, Ci, C, 3, 2, 1);
    kernels_layernorm(a->x, y, sp->down_norm_w, sp->down_norm_b, rows, C, pvt_down_eps(c));
}

float pvt_down_eps(const vit_config *c) { return c->family == VIT_FAMILY_PVT2 ? c->conv_ln_eps : c->ln_eps; }

void pvt_stage_end(const vit_config *c, int s, const vit_params *p, vit_acts *a, int n, int T) {
    const vit_stage_params *sp = &p->stages[s];
    if (a->tape) memcpy(a->tape->stage_pre[s], a->x, (size_t)n * T * c->stage[s].embed_dim * sizeof(float));
    kernels_layernorm(a->x, a->x, sp->stage_norm_w, sp->stage_norm_b, n * T, c->stage[s].embed_dim, c->ln_eps);
}

/* ---- the block ---- */

/* The buffers of one block's forward: the shared scratch of vit_acts, or (training) the
 * block's own tape buffers, which the backward reads (vit.h's vit_tape_block). */
typedef struct {
    float *xn1, *xn2, *q, *col, *xr_pre, *sr_ln, *xr, *kv, *att, *ao, *hpre, *hdw, *hid;
    float *keep;       /* scores kept for a following less-attention block, or NULL */
    const float *prev; /* the previous block's kept scores (less-attention), or NULL */
} pvt_bufs;

/* The reduced grid of n images into b->xr (n, T', D): R x R stride R conv + LN, or the linear
 * variant's 7 x 7 average pool, 1x1 conv, LN and GELU; R = 1: none (the keys are xn1). */
static const float *sra_reduce(const vit_config *c, const vit_geom *g, const vit_block_params *bp,
                               const pvt_bufs *f, int n) {
    const int D = g->D, Tk = g->Tk;
    if (c->sr_linear) {
        pvt_adaptive_pool(f->col, f->xn1, n, g->gh, g->gw, D, 0);
        vit_linear(f->xr_pre, f->col, bp->sr_w, bp->sr_b, n * Tk, D, D, 0);
        kernels_layernorm(f->sr_ln, f->xr_pre, bp->sr_norm_w, bp->sr_norm_b, n * Tk, D, c->conv_ln_eps);
        kernels_gelu_to(f->xr, f->sr_ln, (size_t)n * Tk * D);
        return f->xr;
    }
    if (g->sr_ratio <= 1) return f->xn1;
    const int R = g->sr_ratio;
    conv_nhwc(f->xr_pre, f->col, f->xn1, bp->sr_w, bp->sr_b, n, g->gh, g->gw, D, D, R, R, 0);
    kernels_layernorm(f->xr, f->xr_pre, bp->sr_norm_w, bp->sr_norm_b, n * Tk, D, c->conv_ln_eps);
    return f->xr;
}

void pvt_adaptive_pool(float *out, const float *x, int n, int gh, int gw, int D, int backward) {
    const int B = VIT_SR_POOL;
    if (!backward) {
#pragma omp parallel for collapse(2) schedule(static)
        for (int b = 0; b < n; b++)
            for (int i = 0; i < B * B; i++) {
                int y0, y1, x0, x1;
                vit_sra_key_tokens(0, B, gh, i / B, &y0, &y1);
                vit_sra_key_tokens(0, B, gw, i % B, &x0, &x1);
                float *o = out + ((size_t)b * B * B + i) * D;
                for (int ch = 0; ch < D; ch++) {
                    double sum = 0;
                    for (int y = y0; y < y1; y++)
                        for (int xx = x0; xx < x1; xx++) sum += x[(((size_t)b * gh + y) * gw + xx) * D + ch];
                    o[ch] = (float)(sum / ((y1 - y0) * (x1 - x0)));
                }
            }
        return;
    }
    /* out (n, gh, gw, D) = each token's share of the bins covering it (bins overlap when the
     * grid is smaller than 2 x 7), x (n, 49, D) the bins' gradient: a gather per token */
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int y = 0; y < gh; y++)
            for (int xx = 0; xx < gw; xx++) {
                float *o = out + (((size_t)b * gh + y) * gw + xx) * D;
                memset(o, 0, (size_t)D * sizeof(float));
                for (int py = 0; py < B; py++) {
                    int y0, y1;
                    vit_sra_key_tokens(0, B, gh, py, &y0, &y1);
                    if (y < y0 || y >= y1) continue;
                    for (int px = 0; px < B; px++) {
                        int x0, x1;
                        vit_sra_key_tokens(0, B, gw, px, &x0, &x1);
                        if (xx < x0 || xx >= x1) continue;
                        const float w = 1.0f / (float)((y1 - y0) * (x1 - x0));
                        const float *g = x + ((size_t)b * B * B + py * B + px) * D;
                        for (int ch = 0; ch < D; ch++) o[ch] += w * g[ch];
                    }
                }
            }
}

void pvt_block(const vit_config *c, int l, const vit_geom *g, const vit_block_params *bp, vit_acts *a,
               int n, const vit_record *rec) {
    const int T = g->T, D = g->D, H = g->H, hd = D / H, Hm = g->Hm, Tk = g->Tk, M = n * T;
    /* q (Q), kv rows [k (Q) | v (D)]; less-attention: no q or k, kv rows are v (D) */
    const int keys = vit_has_keys(c, l), Q = pvt_q_width(c, l), dq = keys ? Q / H : 0, KV = Q + D;
    const vit_mech *m = vit_mech_of(c, l);
    const int reuses = (m->flags & VIT_MECH_REUSES_SCORES) != 0, hands_on = vit_mech_next_reuses(c, l);
    pvt_bufs f = {a->xn, a->xn, a->qkv, a->sr_col, a->xr, a->xr, a->xr, a->kv, a->att, a->ao, a->hid, a->hid2,
                  a->hid2, NULL, NULL};
    /* scores handed from block to block for less-attention (both in this stage: same T x T') */
    const int feeds = pvt_feeds_ar(c, l), ar_scores = feeds && c->ar_source == VIT_AR_SCORES;
    const int takes_ar = c->attn_residual && g->stage > 0 && l == vit_stage_first_block(c, g->stage);
    if (reuses || hands_on) f.keep = a->keep[l & 1];
    if (ar_scores) f.keep = a->ar_src; /* the residual's A: this block's scores */
    if (reuses) f.prev = a->keep[(l + 1) & 1];
    const vit_tape_block *t = a->tape ? &a->tape->blk[l] : NULL;
    if (t) {
        kernels_copy(t->x_in, a->x, (size_t)M * D);
        f = (pvt_bufs){t->xn1, t->xn2, t->qkv, a->sr_col, t->xr_pre ? t->xr_pre : a->xr, t->sr_ln, t->xr ? t->xr : a->xr,
                       t->kv, t->att, t->ao, t->hpre, t->hdw, t->hid, hands_on ? t->keep : NULL,
                       reuses ? a->tape->blk[l - 1].keep : NULL};
        if (reuses && !hands_on) f.keep = a->keep[l & 1]; /* the hook's scratch */
        if (ar_scores) f.keep = t->keep;
    }
    kernels_layernorm(f.xn1, a->x, bp->norm1_w, bp->norm1_b, M, D, c->ln_eps);
    if (keys) vit_linear(f.q, f.xn1, bp->q_w, bp->q_b, M, Q, D, 0);
    const float *src = sra_reduce(c, g, bp, &f, n);
    vit_linear(f.kv, src, keys ? bp->kv_w : bp->v_w, keys ? bp->kv_b : bp->v_b, n * Tk, KV, D, 0);
    float *att = rec->attn && rec->attn[l] ? rec->attn[l] : f.att;
    float *scores = rec->scores ? rec->scores[l] : NULL;
    vit_mech_block mb;
    vit_geom mg;
    vit_mech_block_at(&mb, c, l, bp, &mg);
    const float scale = vit_attn_scale(c, l);
    const size_t TT = (size_t)T * Tk;
    /* one job per (image, head): Tq = T queries over the Tk reduced keys */
#pragma omp parallel for schedule(dynamic, 1)
    for (int job = 0; job < n * H; job++) {
        const int b = job / H, h = job % H;
        const float *kv = f.kv + (size_t)b * Tk * KV;
        vit_attn_problem pr = {.Tq = T, .Tk = Tk, .prefix = 0, .gh = g->gh, .gw = g->gw, .H = H, .h = h,
                               .dq = dq, .scale = scale, .v = kv + Q + (size_t)h * hd, .ldq = Q, .ldk = KV,
                               .ldv = KV, .kgh = g->kgh, .kgw = g->kgw,
                               .prev = f.prev ? f.prev + ((size_t)b * H + h) * TT : NULL,
                               .keep = f.keep ? f.keep + ((size_t)b * H + h) * TT : NULL,
                               .add_bias = takes_ar ? a->ar_out + ((size_t)b * H + h) * TT : NULL};
        if (keys) {
            pr.q = f.q + (size_t)b * T * Q + (size_t)h * dq;
            pr.k = kv + (size_t)h * dq;
        }
        float *A = att + ((size_t)b * H + h) * TT;
        vit_mech_problem_forward(m, &mb, &pr, A, scores ? scores + ((size_t)b * H + h) * TT : NULL);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, Tk, 1.0f, A, Tk, pr.v, KV, 0.0f,
                    f.ao + (size_t)b * T * D + (size_t)h * hd, D);
    }
    if (feeds && (t || !ar_scores)) /* the next stage's residual reads a->ar_src */
        memcpy(a->ar_src, ar_scores ? f.keep : att, (size_t)n * H * TT * sizeof(float));
    float *rq = rec->q ? rec->q[l] : NULL, *rk = rec->k ? rec->k[l] : NULL;
    if (keys && (rq || rk)) { /* q over the T tokens, k over the T' reduced ones, (n, H, rows, hd) */
#pragma omp parallel for collapse(2) schedule(static)
        for (int b = 0; b < n; b++)
            for (int h = 0; h < H; h++) {
                for (int tq = 0; rq && tq < T; tq++)
                    memcpy(rq + (((size_t)b * H + h) * T + tq) * dq, f.q + ((size_t)b * T + tq) * Q + (size_t)h * dq,
                           (size_t)dq * sizeof(float));
                for (int tk = 0; rk && tk < Tk; tk++)
                    memcpy(rk + (((size_t)b * H + h) * Tk + tk) * dq,
                           f.kv + ((size_t)b * Tk + tk) * KV + (size_t)h * dq, (size_t)dq * sizeof(float));
            }
    }
    vit_linear(a->x, f.ao, bp->proj_w, bp->proj_b, M, D, D, 1); /* x += proj(ao) */
    if (t) kernels_copy(t->x_mid, a->x, (size_t)M * D);
    /* MixFFN: fc1 -> [ReLU (linear)] -> depth-wise 3x3 -> GELU -> fc2 */
    kernels_layernorm(f.xn2, a->x, bp->norm2_w, bp->norm2_b, M, D, c->ln_eps);
    vit_linear(f.hpre, f.xn2, bp->fc1_w, bp->fc1_b, M, Hm, D, 0);
    if (c->sr_linear) /* in place: the backward's ReLU mask is its output > 0, as PyTorch's */
        for (size_t i = 0; i < (size_t)M * Hm; i++) f.hpre[i] = f.hpre[i] > 0.0f ? f.hpre[i] : 0.0f;
    kernels_dwconv3(f.hdw, f.hpre, bp->dw_w, bp->dw_b, n, g->gh, g->gw, Hm);
    kernels_gelu_to(f.hid, f.hdw, (size_t)M * Hm);
    vit_linear(a->x, f.hid, bp->fc2_w, bp->fc2_b, M, D, Hm, 1);
    float *tok = rec->tokens ? rec->tokens[l] : NULL;
    if (tok) memcpy(tok, a->x, (size_t)M * D * sizeof(float));
}

/* ---- cost ---- */

void pvt_stem_cost(const vit_config *c, vit_cost_part *o) {
    vit_geom g;
    vit_block_geom(c, 0, &g);
    const double T = (double)g.gh * g.gw, C = g.D, K = (double)c->in_chans * c->patch_kernel * c->patch_kernel;
    vit_cost_add(o, VIT_COMP_PATCH_EMBED, K * C + C, T * K * C, T * C);
    vit_cost_add(o, VIT_COMP_NORM, 2 * C, 0, 8 * T * C);
}

void pvt_downsample_cost(const vit_config *c, int s, vit_cost_part *o) {
    vit_geom g;
    vit_stage_grid(c, s, &g);
    const double C = g.D, T = (double)g.gh * g.gw, Ci = c->stage[s - 1].embed_dim;
    vit_cost_add(o, VIT_COMP_DOWNSAMPLE, 9 * Ci * C + C, T * 9 * Ci * C, T * C); /* Conv2d(k3, s2, p1) */
    vit_cost_add(o, VIT_COMP_NORM, 2 * C, 0, 8 * T * C);                         /* its LayerNorm */
}

void pvt_stage_cost(const vit_config *c, int s, vit_cost_part *o) {
    const int first = vit_stage_first_block(c, s);
    vit_geom g;
    vit_block_geom(c, first, &g);
    const double C = g.D, T = (double)g.gh * g.gw;
    if (s > 0) pvt_downsample_cost(c, s, o);
    for (int l = first; l < first + c->stage[s].depth; l++) {
        vit_block_geom(c, l, &g);
        const double H = g.H, Hm = g.Hm, Tk = g.Tk, hd = C / H, maps = H * T * Tk, bias = c->qkv_bias ? 1 : 0;
        const double Q = pvt_q_width(c, l), dq = Q / H; /* LMSA: compressed q | k */
        vit_cost_add(o, VIT_COMP_NORM, 2 * 2 * C, 0, 2 * 8 * T * C);
        /* q over T tokens, k | v over T' keys; the reduction before them under attn.sr */
        if (vit_has_keys(c, l)) {
            vit_cost_add(o, VIT_COMP_QKV, Q * (C + bias) + (Q + C) * (C + bias), T * C * Q + Tk * (Q + C) * C,
                         (T * Q + Tk * (Q + C)) * bias);
            vit_cost_add(o, VIT_COMP_ATTN_SCORES, 0, maps * dq, maps + 5 * maps);
        } else {
            vit_mech_of(c, l)->cost(c, l, &g, o); /* less-attention: v over T', Theta and Psi */
        }
        if (c->sr_linear) { /* pool (T adds per channel), 1x1 conv, GELU; then the LN */
            vit_cost_add(o, VIT_COMP_SR, C * C + C, Tk * C * C, T * C + Tk * C + 8 * Tk * C);
            vit_cost_add(o, VIT_COMP_NORM, 2 * C, 0, 8 * Tk * C);
        } else if (g.sr_ratio > 1) {
            const double R2 = (double)g.sr_ratio * g.sr_ratio;
            vit_cost_add(o, VIT_COMP_SR, R2 * C * C + C, Tk * R2 * C * C, Tk * C);
            vit_cost_add(o, VIT_COMP_NORM, 2 * C, 0, 8 * Tk * C);
        }
        vit_cost_add(o, VIT_COMP_ATTN_VALUES, 0, maps * hd, 0);
        vit_cost_add(o, VIT_COMP_PROJ, C * C + C, T * C * C, T * C + T * C);
        /* fc1, the depth-wise 3x3 with bias, GELU, fc2 */
        vit_cost_add(o, VIT_COMP_MLP, 2 * C * Hm + Hm + C + 9 * Hm + Hm, 2 * T * C * Hm + 9 * T * Hm,
                     T * Hm + T * C + T * Hm + 8 * T * Hm + T * C + (c->sr_linear ? T * Hm : 0));
    }
    vit_cost_add(o, VIT_COMP_NORM, 2 * C, 0, 8 * T * C); /* the stage norm */
    if (s > 0 && c->attn_residual) { /* LaViT's residual: 2x2 conv, norm, 1x1 conv over heads, gamma, add */
        vit_geom gp;
        vit_block_geom(c, first - 1, &gp);
        const double hp = gp.H, H = g.H, TT = (double)g.T * g.Tk, Tk = g.Tk;
        const int ln = c->ar_norm == VIT_AR_LAYERNORM;
        vit_cost_add(o, VIT_COMP_ATTN_MAPS, 5 * hp + (ln ? 2 * Tk : 0) + H * hp + 2 * H,
                     hp * TT * 4 + H * hp * TT, hp * TT + (ln ? 8 * hp * TT : 0) + H * TT + 2 * H * TT);
    }
}

/* ---- validation ---- */

as_status pvt_validate(const vit_config *c, as_error *err) {
    const char *n = c->name[0] ? c->name : "model";
    if (c->class_token || c->distilled)
        return as_fail(err, AS_ERR_CONFIG, "%s: PVT v2 has no class or distillation token: remove "
                       "\"class_token\" and \"distilled\"", n);
    if (c->global_pool != VIT_POOL_AVG)
        return as_fail(err, AS_ERR_CONFIG, "%s: \"global_pool\": \"%s\": PVT v2 averages its final "
                       "tokens: use \"avg\"", n, vit_pool_name(c->global_pool));
    if (c->fc_norm || c->patch_norm || c->shift_windows)
        return as_fail(err, AS_ERR_CONFIG, "%s: fc_norm, patch_norm and window shifts are not PVT v2 "
                       "settings (its norms are fixed): remove them", n);
    if (c->patch_kernel < c->patch_size || c->patch_kernel > 4 * c->patch_size + 1)
        return as_fail(err, AS_ERR_CONFIG, "%s: the stem kernel %d must be in patch_size %d .. 4 x "
                       "patch_size + 1 (timm: 7 with stride 4): set \"patch_kernel\"", n,
                       c->patch_kernel, c->patch_size);
    if (!(c->conv_ln_eps > 0.0f && c->conv_ln_eps <= 1.0f))
        return as_fail(err, AS_ERR_CONFIG, "%s: \"conv_ln_eps\" must be in (0, 1] (timm: 1e-5)", n);
    for (int s = 1; s < c->n_stages && c->attn_residual; s++) { /* LaViT's residual, read on the grids */
        vit_geom gp, g;
        const int first = vit_stage_first_block(c, s);
        vit_block_geom(c, first - 1, &gp);
        vit_block_geom(c, first, &g);
        if (gp.gh != 2 * g.gh || gp.gw != 2 * g.gw || gp.kgh != g.kgh || gp.kgw != g.kgw)
            return as_fail(err, AS_ERR_CONFIG, "%s: \"attn_residual\": stage %d has %dx%d queries over %dx%d keys "
                           "and stage %d %dx%d over %dx%d; its 2x2 stride-2 conv needs the query grid halved and the "
                           "same keys (docs/models.md, LaViT): use an img_size whose grids halve evenly and "
                           "sr_ratios that keep the key grid", n, s - 1, gp.gh, gp.gw, gp.kgh, gp.kgw, s, g.gh,
                           g.gw, g.kgh, g.kgw);
        if (!vit_has_keys(c, first))
            return as_fail(err, AS_ERR_CONFIG, "%s: \"attn_residual\": stage %d's first block (block %d) is "
                           "a less-attention block; the residual is added to a vanilla block's scores (LaViT's "
                           "Eq. 7): start less-attention later in the stage", n, s, first);
    }
    for (int s = 0; s < c->n_stages; s++) {
        const vit_stage *st = &c->stage[s];
        if (st->scope != VIT_SCOPE_SRA || (s == 0) != (st->down == VIT_DOWN_NONE) ||
            (s > 0 && st->down != VIT_DOWN_CONV))
            return as_fail(err, AS_ERR_CONFIG, "%s: stage %d is not a PVT v2 stage (a strided conv "
                           "before every stage but the first, spatial-reduction attention): describe "
                           "it with the PVT v2 keys of docs/models.md", n, s);
        if (st->sr_ratio < 1 || st->sr_ratio > VIT_MAX_WINDOW)
            return as_fail(err, AS_ERR_CONFIG, "%s: \"sr_ratios\"[%d] = %d: give 1..%d (1: the keys "
                           "are the tokens)", n, s, st->sr_ratio, VIT_MAX_WINDOW);
        vit_geom g;
        vit_block_geom(c, vit_stage_first_block(c, s), &g);
        if (!c->sr_linear && (g.gh < st->sr_ratio || g.gw < st->sr_ratio))
            return as_fail(err, AS_ERR_CONFIG, "%s: stage %d's %dx%d grid is smaller than its "
                           "\"sr_ratios\" %d, so the reducing conv has no output: use img_size >= %d "
                           "or a smaller ratio", n, s, g.gh, g.gw, st->sr_ratio,
                           (int)(st->sr_ratio * g.stride_px));
    }
    return AS_OK;
}
