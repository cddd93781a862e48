/* stage.c: the forward pass of a staged model (Swin v1 as timm computes it in eval mode): patch
 * embedding and its LayerNorm, per stage a patch merge and blocks whose attention runs as
 * independent problems (window.c), then the final norm, the mean over tokens and the head. */
#include <assert.h>
#include <cblas.h>
#include <omp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "attn_ops.h"
#include "cait.h"
#include "kernels.h"
#include "pvt.h"
#include "local.h"
#include "stage.h"
#include "stem.h"

/* ---- weights: timm's SwinTransformer names ---- */

static void spec_put(vit_tensor_spec *specs, int max, int *n, const float **slot, int ndim,
                     const int *shape, const char *fmt, ...) {
    if (*n < max) {
        vit_tensor_spec *s = &specs[*n];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->name, sizeof s->name, fmt, ap);
        va_end(ap);
        s->ndim = ndim;
        for (int i = 0; i < 4; i++) s->shape[i] = i < ndim ? shape[i] : 0;
        s->slot = slot;
        s->is_pos_embed = 0;
        s->buffer = 0;
    }
    (*n)++;
}

#define PUT(slot, shape, ...) \
    spec_put(specs, max, &n, (slot), (int)(sizeof shape / sizeof shape[0]), shape, __VA_ARGS__)

/* The merge of stage s >= 1 sits at the START of stage s (timm: layers.s.downsample); the
 * official checkpoints and torchvision keep it at the end of stage s - 1 (docs/models.md gives
 * the renames). A WINDOW block's relative table is ((2M - 1)^2, H) for its CLAMPED window M. */
int vit_stage_param_specs(const vit_config *c, vit_params *p, vit_tensor_spec *specs, int max) {
    if (c->family == VIT_FAMILY_PVT2) return pvt_param_specs(c, p, specs, max);
    if (c->family == VIT_FAMILY_CAIT) return vit_cait_param_specs(c, p, specs, max);
    int n = 0;
    memset(p, 0, sizeof *p);
    const int C0 = c->stage[0].embed_dim, P = c->patch_size;
    if (c->n_stem) {
        vit_spec_sink sink = {specs, max, &n, ""};
        vit_stem_specs(c, p, &sink);
    } else {
        PUT(&p->patch_w, ((int[]){C0, c->in_chans, P, P}), "patch_embed.proj.weight");
        PUT(&p->patch_b, ((int[]){C0}), "patch_embed.proj.bias");
    }
    if (c->patch_norm) {
        PUT(&p->patch_norm_w, ((int[]){C0}), "patch_embed.norm.weight");
        PUT(&p->patch_norm_b, ((int[]){C0}), "patch_embed.norm.bias");
    }
    for (int s = 0; s < c->n_stages; s++) {
        const vit_stage *st = &c->stage[s];
        if (s > 0 && st->down == VIT_DOWN_MERGE) {
            const int in = 4 * c->stage[s - 1].embed_dim;
            vit_stage_params *sp = &p->stages[s];
            PUT(&sp->down_norm_w, ((int[]){in}), "layers.%d.downsample.norm.weight", s);
            PUT(&sp->down_norm_b, ((int[]){in}), "layers.%d.downsample.norm.bias", s);
            PUT(&sp->down_w, ((int[]){st->embed_dim, in}), "layers.%d.downsample.reduction.weight", s);
        }
        if (s > 0 && st->down == VIT_DOWN_CONV) { /* CSwin's Merge_Block: Conv2d(k3, s2, p1), LayerNorm */
            const int Ci = c->stage[s - 1].embed_dim, C = st->embed_dim;
            vit_stage_params *sp = &p->stages[s];
            PUT(&sp->down_w, ((int[]){C, Ci, 3, 3}), "layers.%d.downsample.conv.weight", s);
            PUT(&sp->down_b, ((int[]){C}), "layers.%d.downsample.conv.bias", s);
            PUT(&sp->down_norm_w, ((int[]){C}), "layers.%d.downsample.norm.weight", s);
            PUT(&sp->down_norm_b, ((int[]){C}), "layers.%d.downsample.norm.bias", s);
        }
        const int first = vit_stage_first_block(c, s);
        for (int j = 0; j < st->depth && first + j < VIT_MAX_DEPTH; j++) {
            vit_block_params *b = &p->blocks[first + j];
            vit_geom g;
            vit_block_geom(c, first + j, &g);
            const int D = g.D, Hm = g.Hm, W = 2 * g.M - 1;
            PUT(&b->norm1_w, ((int[]){D}), "layers.%d.blocks.%d.norm1.weight", s, j);
            PUT(&b->norm1_b, ((int[]){D}), "layers.%d.blocks.%d.norm1.bias", s, j);
            /* the mechanism's tensors (vanilla: attn.qkv), Swin's table, the projection */
            const vit_mech *m = vit_mech_of(c, first + j);
            vit_spec_sink sink = {specs, max, &n, ""};
            snprintf(sink.prefix, sizeof sink.prefix, "layers.%d.blocks.%d", s, j);
            vit_geom mg;
            vit_mech_block mb;
            vit_mech_block_at(&mb, c, first + j, NULL, &mg);
            m->specs(&mb, b, &sink);
            if (g.scope == VIT_SCOPE_WINDOW && !c->no_rel_pos_bias)
                PUT(&b->rpb_table, ((int[]){W * W, g.H}), "layers.%d.blocks.%d.attn.relative_position_bias_table", s, j);
            if (!m->has_proj || m->has_proj(&c->attn[first + j])) {
                PUT(&b->proj_w, ((int[]){D, D}), "layers.%d.blocks.%d.attn.proj.weight", s, j);
                PUT(&b->proj_b, ((int[]){D}), "layers.%d.blocks.%d.attn.proj.bias", s, j);
            }
            PUT(&b->norm2_w, ((int[]){D}), "layers.%d.blocks.%d.norm2.weight", s, j);
            PUT(&b->norm2_b, ((int[]){D}), "layers.%d.blocks.%d.norm2.bias", s, j);
            PUT(&b->fc1_w, ((int[]){Hm, D}), "layers.%d.blocks.%d.mlp.fc1.weight", s, j);
            PUT(&b->fc1_b, ((int[]){Hm}), "layers.%d.blocks.%d.mlp.fc1.bias", s, j);
            PUT(&b->fc2_w, ((int[]){D, Hm}), "layers.%d.blocks.%d.mlp.fc2.weight", s, j);
            PUT(&b->fc2_b, ((int[]){D}), "layers.%d.blocks.%d.mlp.fc2.bias", s, j);
        }
    }
    const int CL = c->stage[c->n_stages - 1].embed_dim, K = c->num_classes;
    PUT(&p->norm_w, ((int[]){CL}), "norm.weight");
    PUT(&p->norm_b, ((int[]){CL}), "norm.bias");
    if (K > 0) {
        PUT(&p->head_w, ((int[]){K, CL}), "head.fc.weight");
        PUT(&p->head_b, ((int[]){K}), "head.fc.bias");
    }
    return n;
}
#undef PUT

/* ---- activations and problem tables ---- */

static size_t carve_bytes(char *base, size_t *off, size_t bytes, void **view) {
    bytes = (bytes + 63) & ~(size_t)63;
    if (base && view) *view = base + *off;
    *off += bytes;
    return bytes;
}


/* Two blocks share their tables when their problems are laid out alike. */
static int same_tables(const vit_geom *a, const vit_geom *b) {
    return a->scope == b->scope && a->gh == b->gh && a->gw == b->gw && a->M == b->M &&
           a->shift == b->shift;
}

/* The grid of stage s (tokens gh x gw); s = 0: the patch grid. */
void vit_stage_grid(const vit_config *c, int s, vit_geom *g) {
    vit_block_geom(c, vit_stage_first_block(c, s), g);
}

size_t vit_stage_acts_carve(const vit_config *c, int B, void *base, vit_acts *a) {
    const size_t b = (size_t)B;
    size_t off = 0, TD = 0, TW = 0, TH = 0, maps = 0, rpb = 0, merge = 0, slot = 0, Dmax = 0;
    char *p = base;
    vit_acts tmp;
    vit_acts *v = a ? a : &tmp;
    if (base) {
        memset(v, 0, sizeof *v);
        v->B = B;
    }
    for (int l = 0; l < c->depth; l++) {
        vit_geom g;
        vit_block_geom(c, l, &g);
        const size_t T = (size_t)g.T, D = (size_t)g.D, N = (size_t)g.Tq;
        if (T * D > TD) TD = T * D;
        vit_mech_layout lay;
        vit_mech_of(c, l)->layout(c, l, &lay);
        const size_t W = (size_t)lay.W > 3 * D ? (size_t)lay.W : 3 * D;
        if (T * W > TW) TW = T * W;
        if (T * (size_t)g.Hm > TH) TH = T * (size_t)g.Hm;
        if ((size_t)g.H * g.problems * N * g.Tk > maps && !vit_local_side(c, l)) /* local: none */
            maps = (size_t)g.H * g.problems * N * g.Tk;
        if (g.scope == VIT_SCOPE_WINDOW && (size_t)g.H * N * N > rpb) rpb = (size_t)g.H * N * N;
        const size_t need = vit_window_scratch_floats(g.Tq, g.D, g.H, vit_qk_head_dim(c, l));
        if (need > slot) slot = need;
        if (D > Dmax) Dmax = D;
    }
    for (int s = 1; s < c->n_stages; s++) {
        vit_geom g;
        vit_stage_grid(c, s, &g);
        /* the 2x2 gather of a merge, or a conv downsample's 3x3 im2col */
        const size_t m = (size_t)g.T * (c->stage[s].down == VIT_DOWN_MERGE ? 4 : 9) * c->stage[s - 1].embed_dim;
        if (c->stage[s].down != VIT_DOWN_NONE && m > merge) merge = m;
    }
    vit_geom g0;
    vit_stage_grid(c, 0, &g0);
    size_t K = (size_t)c->in_chans * c->patch_size * c->patch_size;
    pvt_need pz = {0};
    if (c->family == VIT_FAMILY_PVT2) { /* the convs' im2col buffers (patches, merge) */
        pvt_acts_need(c, &pz);
        K = pz.stem_col / (size_t)g0.T;
        merge = pz.down_col;
    }
    vit_stem_need z;
    vit_stem_need_of(c, &z);
    vit_carve_floats(p, &off, c->n_stem ? b * z.col0 : b * g0.T * K, &v->patches);
    vit_stem_acts_carve(c, B, p, &off, v);
    vit_carve_floats(p, &off, b * TD, &v->x);
    vit_carve_floats(p, &off, b * TD, &v->xn);
    vit_carve_floats(p, &off, b * TW, &v->qkv);
    vit_carve_floats(p, &off, b * maps, &v->att);
    if (vit_mech_any(c, VIT_MECH_REUSES_SCORES)) /* scores handed on to less-attention (PVT v2) */
        for (int i = 0; i < 2; i++) vit_carve_floats(p, &off, b * maps, &v->keep[i]);
    vit_carve_floats(p, &off, b * TD, &v->ao);
    vit_carve_floats(p, &off, b * TH, &v->hid);
    if (merge) vit_carve_floats(p, &off, b * merge, &v->merge);
    if (rpb) vit_carve_floats(p, &off, rpb, &v->rpb);
    vit_carve_floats(p, &off, b * Dmax, &v->pooled);
    vit_carve_floats(p, &off, b * (size_t)(c->num_classes > 0 ? c->num_classes : 1), &v->logits);
    if (pz.hid2) {
        vit_carve_floats(p, &off, b * pz.sr_col, &v->sr_col);
        vit_carve_floats(p, &off, b * pz.xr, &v->xr);
        vit_carve_floats(p, &off, b * pz.kv, &v->kv);
        vit_carve_floats(p, &off, b * pz.hid2, &v->hid2);
    }
    if (pz.ar_src) { /* LaViT's attention residual */
        vit_carve_floats(p, &off, b * pz.ar_src, &v->ar_src);
        vit_carve_floats(p, &off, b * pz.ar_mid, &v->ar_dw);
        vit_carve_floats(p, &off, b * pz.ar_mid, &v->ar_ln);
        vit_carve_floats(p, &off, b * pz.ar_out, &v->ar_out);
    }
    if (vit_cait_scratch_floats(c)) vit_carve_floats(p, &off, b * vit_cait_scratch_floats(c), &v->cait);
    /* thread-local window scratch for the threads a forward may use; more threads than were
     * counted here just run with fewer (the result does not depend on it) */
    const int slots = omp_get_max_threads();
    if (base) {
        v->slots = slots;
        v->slot_floats = (slot + 15) & ~(size_t)15;
    }
    vit_carve_floats(p, &off, (size_t)slots * ((slot + 15) & ~(size_t)15), &v->scratch);
    /* problem tables, once per distinct geometry */
    for (int l = 0; l < c->depth; l++) {
        vit_geom g, h;
        vit_block_geom(c, l, &g);
        int same = -1;
        for (int e = 0; e < l && same < 0; e++) {
            vit_block_geom(c, e, &h);
            if (same_tables(&g, &h)) same = e;
        }
        if (same >= 0) {
            if (base) {
                v->tok[l] = v->tok[same];
                v->mask[l] = v->mask[same];
            }
            continue;
        }
        void *tok = NULL;
        float *mask = NULL;
        carve_bytes(p, &off, (size_t)g.problems * g.Tq * sizeof(int), base ? &tok : NULL);
        if (g.shift) vit_carve_floats(p, &off, (size_t)g.problems * g.Tq * g.Tk, base ? &mask : NULL);
        if (!base) continue;
        if (g.scope == VIT_SCOPE_WINDOW) {
            vit_window_tokens(c, &g, tok);
        } else {
            for (int t = 0; t < g.Tq; t++) ((int *)tok)[t] = t; /* CLASS: the one cls row */
        }
        if (mask) vit_shift_mask(c, &g, mask);
        v->tok[l] = tok;
        v->mask[l] = mask;
    }
    return off;
}

/* ---- forward ---- */

static float *rec_at(float **arr, int l) { return arr ? arr[l] : NULL; }

/* Swin's PatchMerging gather: out (n, gh', gw', 4C) with gh' = ceil(gh / 2); the 4C vector
 * concatenates the children (dy, dx) in the order (0,0), (1,0), (0,1), (1,1) (column-major, as
 * timm's reshape(.., 2, .., 2, C).permute(0, 1, 3, 4, 2, 5)); an odd side is padded with zeros.
 * x: (n, gh, gw, C). */
static void merge_gather(float *out, const float *x, int n, int gh, int gw, int C) {
    const int h2 = (gh + 1) / 2, w2 = (gw + 1) / 2;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int y = 0; y < h2; y++)
            for (int xx = 0; xx < w2; xx++) {
                float *o = out + (((size_t)b * h2 + y) * w2 + xx) * 4 * C;
                for (int k = 0; k < 4; k++) {
                    const int sy = 2 * y + (k & 1), sx = 2 * xx + (k >> 1);
                    if (sy < gh && sx < gw)
                        memcpy(o + (size_t)k * C, x + (((size_t)b * gh + sy) * gw + sx) * C, (size_t)C * sizeof(float));
                    else
                        memset(o + (size_t)k * C, 0, (size_t)C * sizeof(float));
                }
            }
}

/* q and k of every grid token, per head, in grid order (unscaled): (n, H, T, dq) each, from the
 * mechanism's views (columns of qkv, rows W apart, or of xn, rows D apart). */
static void record_qk(float *q, float *k, const vit_mech_layout *lay, const float *qkv, const float *xn,
                      int n, int T, int D, int H, int dq) {
    float *out[2] = {q, k};
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++)
                for (int i = 0; i < 2; i++) {
                    if (!out[i] || lay->src[i] == VIT_SRC_NONE) continue;
                    const float *row = lay->src[i] == VIT_SRC_X ? xn + ((size_t)b * T + t) * D
                                                                : qkv + ((size_t)b * T + t) * lay->W;
                    memcpy(out[i] + (((size_t)b * H + h) * T + t) * dq, row + lay->col[i] + (size_t)h * dq,
                           (size_t)dq * sizeof(float));
                }
}

/* Vanilla's path (window.c's fused gather, q scaled before q k^T as timm does): the fused qkv
 * projection and no hooks. Every other mechanism runs its hooks on gathered rows. */
static int fused_plain(const vit_mech *m, const vit_mech_layout *lay, int D) {
    return !m->scores && !m->after_softmax && !m->maps && !m->product_scale && lay->n_proj == 1 &&
           lay->proj[0].w == offsetof(vit_block_params, qkv_w) && lay->W == 3 * D &&
           lay->src[0] == VIT_SRC_QKV && lay->col[1] == D && lay->col[2] == 2 * D;
}

/* One block on n images: x (n, T, D) in place. A training forward (a->tape) keeps the block's
 * activations in its tape buffers instead of the shared scratch. */
static void stage_block(const vit_config *c, int l, const vit_geom *g, const vit_block_params *bp,
                        vit_acts *a, int n, const vit_record *rec) {
    const int T = g->T, D = g->D, Hm = g->Hm, M = n * T;
    const size_t MD = (size_t)M * D; /* floats of the residual stream */
    const vit_tape_block *t = a->tape ? &a->tape->blk[l] : NULL;
    float *xn = t ? t->xn1 : a->xn, *qkv = t ? t->qkv : a->qkv, *ao = t ? t->ao : a->ao;
    float *xn2 = t ? t->xn2 : a->xn, *hpre = t ? t->hpre : a->hid, *hid = t ? t->hid : a->hid;
    const vit_mech *m = vit_mech_of(c, l);
    vit_mech_layout lay;
    m->layout(c, l, &lay);
    if (t) kernels_copy(t->x_in, a->x, MD);
    kernels_layernorm(xn, a->x, bp->norm1_w, bp->norm1_b, M, D, c->ln_eps);
    for (int i = 0; i < lay.n_proj; i++) {
        const vit_mech_proj *pr = &lay.proj[i];
        vit_linear_ld(qkv + pr->col, lay.W, xn, vit_mech_weight(bp, pr->w), vit_mech_weight(bp, pr->b),
                      M, pr->out, D, 0);
    }
    const int rpb = g->scope == VIT_SCOPE_WINDOW && bp->rpb_table; /* "rel_pos_bias": false has none */
    if (rpb) vit_relative_bias_expand(a->rpb, bp->rpb_table, g->H, g->M);
    float *att = rec_at(rec->attn, l);
    const int local = vit_local_side(c, l); /* every head local: no scratch map (local.h) */
    vit_geom mg;
    vit_mech_block mb;
    vit_mech_block_at(&mb, c, l, bp, &mg);
    const int plain = fused_plain(m, &lay, D), dq = vit_qk_head_dim(c, l);
    vit_window_job j = {
        .n = n, .T = T, .D = D, .H = g->H, .P = g->problems, .N = g->Tq, .tok = a->tok[l],
        .mask = a->mask[l], .rpb = rpb ? a->rpb : NULL, .qkv = qkv,
        .qkv_b = bp->qkv_b, .scale = m->product_scale ? m->product_scale(c, l) : vit_attn_scale(c, l),
        .att = att ? att : t ? t->att : local ? NULL : a->att, .scores = rec_at(rec->scores, l), .ao = ao,
        .att_side = local && (t || rec->local_maps) ? local : 0, /* a tape keeps local records */
        .scratch = a->scratch, .slots = a->slots, .slot_floats = a->slot_floats};
    if (!plain) {
        vit_mech_problem_grid(g, &j.M, &j.M);
        j.m = m;
        j.mb = &mb;
        j.lay = &lay;
        j.bp = bp;
        j.xn = xn;
        j.dq = dq;
        for (int i = 0; i < VIT_MAX_EXTRAS; i++) /* per-head extras (LSLA's softmax before B_outer) */
            j.extra[i] = !vit_extra_info(c, l, i, NULL) ? NULL : t ? t->ext[i] : rec_at(rec->extra[i], l);
    }
    vit_window_attention(&j);
    if (rec_at(rec->q, l) || rec_at(rec->k, l))
        record_qk(rec_at(rec->q, l), rec_at(rec->k, l), &lay, qkv, xn, n, T, D, g->H, dq);
    if (bp->proj_w) vit_linear(a->x, ao, bp->proj_w, bp->proj_b, M, D, D, 1); /* x += proj(ao) */
    else for (size_t i = 0; i < (size_t)M * D; i++) a->x[i] += ao[i];       /* LSLA's NP */
    if (t) kernels_copy(t->x_mid, a->x, MD);
    kernels_layernorm(xn2, a->x, bp->norm2_w, bp->norm2_b, M, D, c->ln_eps);
    vit_linear(hpre, xn2, bp->fc1_w, bp->fc1_b, M, Hm, D, 0);
    if (t) kernels_gelu_to(hid, hpre, (size_t)M * Hm); /* training keeps fc1's output */
    else kernels_gelu(hid, (size_t)M * Hm);
    vit_linear(a->x, hid, bp->fc2_w, bp->fc2_b, M, D, Hm, 1); /* x += fc2(gelu(fc1(xn))) */
    float *tok = rec_at(rec->tokens, l);
    if (tok) memcpy(tok, a->x, MD * sizeof(float));
}

void vit_stage_forward(const vit_config *c, const vit_params *p, vit_acts *a, const float *images,
                       int n, const vit_record *rec) {
    assert(n >= 1 && n <= a->B);
    vit_tape *tape = a->tape; /* a training forward (Swin; core/stage_train.c) */
    assert(!tape || !rec);
    const vit_record none = {0};
    if (!rec) rec = &none;
    if (c->family == VIT_FAMILY_CAIT) {
        vit_cait_forward(c, p, a, images, n, rec);
        return;
    }
    vit_geom g;
    vit_stage_grid(c, 0, &g);
    const int P = c->patch_size, Cin = c->in_chans, K = Cin * P * P;
    int D = g.D, gh = g.gh, gw = g.gw;
    /* stem: patches, Conv2d(k = s = P) as one GEMM, then LayerNorm; no position embedding */
    if (c->n_stem) {
        vit_stem_forward(c, p, a, images, n, a->x, (size_t)gh * gw * D);
    } else if (c->patch_kernel > 0) {
        pvt_stem(c, p, a, images, n); /* PVT v2: overlapping, LN eps conv_ln_eps */
    } else {
        vit_patchify(a->patches, images, n, Cin, c->img_size, P);
        vit_linear(a->x, a->patches, p->patch_w, p->patch_b, n * gh * gw, D, K, 0);
    }
    if (tape && c->patch_norm) memcpy(tape->embed, a->x, (size_t)n * gh * gw * D * sizeof(float));
    if (c->patch_norm)
        kernels_layernorm(a->x, a->x, p->patch_norm_w, p->patch_norm_b, n * gh * gw, D, c->ln_eps);
    for (int s = 0; s < c->n_stages; s++) {
        const int first = vit_stage_first_block(c, s);
        vit_stage_grid(c, s, &g);
        if (s > 0 && c->stage[s].down == VIT_DOWN_MERGE) {
            const vit_stage_params *sp = &p->stages[s];
            const int rows = n * g.gh * g.gw;
            float *in = tape ? tape->merge_in[s] : a->merge, *ln = tape ? tape->merge_ln[s] : a->merge;
            merge_gather(in, a->x, n, gh, gw, D);
            kernels_layernorm(ln, in, sp->down_norm_w, sp->down_norm_b, rows, 4 * D, c->ln_eps);
            vit_linear(a->x, ln, sp->down_w, NULL, rows, g.D, 4 * D, 0);
        }
        if (s > 0 && c->attn_residual) pvt_attn_residual(c, s, p, a, n); /* LaViT: into this stage's first block */
        if (s > 0 && c->stage[s].down == VIT_DOWN_CONV) pvt_downsample(c, s, p, a, n, gh, gw);
        D = g.D;
        gh = g.gh;
        gw = g.gw;
        for (int l = first; l < first + c->stage[s].depth; l++) {
            vit_block_geom(c, l, &g);
            if (g.scope == VIT_SCOPE_SRA) pvt_block(c, l, &g, &p->blocks[l], a, n, rec);
            else stage_block(c, l, &g, &p->blocks[l], a, n, rec);
        }
        if (p->stages[s].stage_norm_w) pvt_stage_end(c, s, p, a, n, gh * gw);
    }
    /* head: the final norm on every token, the mean over tokens (in double), the classifier */
    const int T = gh * gw;
    if (tape) memcpy(tape->x_final, a->x, (size_t)n * T * D * sizeof(float));
    if (p->norm_w) kernels_layernorm(a->x, a->x, p->norm_w, p->norm_b, n * T, D, c->ln_eps);
    for (int b = 0; b < n; b++) {
        const float *xb = a->x + (size_t)b * T * D;
        float *pb = a->pooled + (size_t)b * D;
        for (int i = 0; i < D; i++) {
            double sum = 0;
            for (int t = 0; t < T; t++) sum += xb[(size_t)t * D + i];
            pb[i] = (float)(sum / T);
        }
    }
    const int C = c->num_classes;
    for (int b = 0; b < n && C > 0; b++) {
        float *lg = a->logits + (size_t)b * C;
        memcpy(lg, p->head_b, (size_t)C * sizeof(float));
        cblas_sgemv(CblasRowMajor, CblasNoTrans, C, D, 1.0f, p->head_w, D, a->pooled + (size_t)b * D, 1, 1.0f, lg, 1);
    }
}
