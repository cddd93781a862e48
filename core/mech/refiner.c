/* refiner.c: Refiner's attention refinement. After the softmax, the H maps of an image are
 * expanded to H' (a linear map across heads), each convolved with its own k x k kernel
 * (distributed local attention) and reduced back to H; the reduced maps multiply the values. */
#include "../kernels.h"
#include "../mech.h"

#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>


static const vit_mech_key keys[] = {
    {"expanded_heads", "H', the heads after expansion (1..4096; required)"},
    {"kernel_size", "k, the odd side of each expanded map's convolution (default 3)"},
};

static void defaults(vit_attn *a) { a->kernel_size = 3; }

static int parse(vit_attn *a, const vit_mech_entry *e, int H, char *msg, size_t n) {
    int iv;
    if (!vit_mv_int(vit_mech_get(e, "expanded_heads"), 1, 4096, &iv))
        return snprintf(msg, n, "refiner needs \"expanded_heads\", H' (an integer in 1..4096)"), 0;
    a->expanded_heads = iv;
    const vit_mv *k = vit_mech_get(e, "kernel_size");
    if (k) {
        if (!vit_mv_int(k, 1, VIT_MAX_KERNEL, &iv))
            return snprintf(msg, n, "\"kernel_size\" must be an odd integer in 1..%d", VIT_MAX_KERNEL), 0;
        a->kernel_size = iv;
    }
    return 1;
}

static void write(const vit_config *c, int l, vit_mech_writer *w) {
    w->num(w, "expanded_heads", c->attn[l].expanded_heads);
    w->num(w, "kernel_size", c->attn[l].kernel_size);
}

static as_status validate(const vit_config *c, int l, const vit_geom *g, as_error *err) {
    const vit_attn *a = &c->attn[l];
    const char *n = vit_mech_model_name(c);
    if (a->expanded_heads < 1 || a->expanded_heads > 4096)
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d: refiner expanded_heads must be "
                       "1..4096 (got %d)", n, l, a->expanded_heads);
    if (a->kernel_size < 1 || a->kernel_size % 2 == 0 || a->kernel_size > 2 * g->Tq ||
        a->kernel_size > VIT_MAX_KERNEL)
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d: refiner kernel_size %d must be odd "
                       "and at most twice the token count and %d (1 is a per-head scale)", n, l,
                       a->kernel_size, VIT_MAX_KERNEL);
    return AS_OK;
}

static void describe(const vit_config *c, int l, char *buf, size_t n) {
    snprintf(buf, n, " H'=%d k=%d", c->attn[l].expanded_heads, c->attn[l].kernel_size);
}

static int map_heads(const vit_config *c, int l) {
    const int E = c->attn[l].expanded_heads;
    return E > c->num_heads ? E : c->num_heads;
}

static void specs(const vit_mech_block *b, vit_block_params *bp, vit_spec_sink *s) {
    const int E = b->at->expanded_heads, k = b->at->kernel_size, H = b->g->H;
    vit_mech_fused_specs(b, bp, s);
    VIT_MECH_SPEC(s, &bp->expand, ".attn.expand.weight", E, H);
    VIT_MECH_SPEC(s, &bp->dla, ".attn.dla.weight", E, 1, k, k);
    VIT_MECH_SPEC(s, &bp->reduce, ".attn.reduce.weight", H, E);
}

/* One image's maps: expanded[e] = sum_h W_e[e, h] A[h]; convolved[e] = the k x k
 * cross-correlation of expanded[e] with dla[e] (zero padding k/2, as Conv2d with groups = H');
 * A[h] = sum_e W_r[h, e] convolved[e]. */
static void maps(const vit_mech_block *b, float *A, float *const *ext, int Tq, int Tk) {
    const vit_block_params *bp = b->bp;
    const int E = b->at->expanded_heads, k = b->at->kernel_size, H = b->g->H, T = Tq;
    const size_t TT = (size_t)T * T;
    float *expanded = ext[0], *convolved = ext[1];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, E, (int)TT, H, 1.0f, bp->expand, H, A,
                (int)TT, 0.0f, expanded, (int)TT);
    kernels_maps_dwconv(convolved, expanded, bp->dla, E, T, k);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, H, (int)TT, E, 1.0f, bp->reduce, E,
                convolved, (int)TT, 0.0f, A, (int)TT);
}

static size_t part_floats(const vit_config *c, int l) {
    const vit_attn *at = &c->attn[l];
    return 2 * (size_t)at->expanded_heads * (size_t)c->num_heads +
           (size_t)at->expanded_heads * at->kernel_size * at->kernel_size;
}

/* One image: from dA (H, TT) = the gradient of the reduced maps, the gradients of reduce, the
 * kernels and expand (into part: reduce (H, E), expand (E, H), dla (E, k, k)) and of the softmax
 * maps (written over dA). */
static void refine_backward(float *dA, float *dEx, float *dCv, float *part, const float *P,
                            const float *Ex, const float *Cv, const vit_block_params *bp,
                            const vit_attn *at, int H, int T) {
    const int E = at->expanded_heads, k = at->kernel_size, TT = T * T;
    float *dred = part, *dexp = part + (size_t)H * E, *ddla = part + 2 * (size_t)H * E;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, H, E, TT, 1.0f, dA, TT, Cv, TT, 0.0f, dred, E);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, E, TT, H, 1.0f, bp->reduce, E, dA, TT, 0.0f, dCv, TT);
    kernels_maps_dwconv_backward(dEx, ddla, dCv, Ex, bp->dla, E, T, k);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, E, H, TT, 1.0f, dEx, TT, P, TT, 0.0f, dexp, H);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, H, TT, E, 1.0f, bp->expand, H, dEx, TT, 0.0f, dA, TT);
}

static void maps_backward(const vit_mech_block *b, const vit_block_params *gb, const vit_tape_block *t,
                          vit_grad_ws *ws, int n, int Tq, int Tk) {
    const vit_attn *at = b->at;
    const int H = b->g->H, T = Tq;
    const size_t E = (size_t)at->expanded_heads, TT = (size_t)Tq * Tk;
    const size_t stride = vit_mech_part_floats(b->c);
#pragma omp parallel for schedule(dynamic, 1)
    for (int bi = 0; bi < n; bi++)
        refine_backward(ws->dA + (size_t)bi * H * TT, ws->dext[0] + (size_t)bi * E * TT,
                        ws->dext[1] + (size_t)bi * E * TT, ws->part + (size_t)bi * stride,
                        t->soft + (size_t)bi * H * TT, t->ext[0] + (size_t)bi * E * TT,
                        t->ext[1] + (size_t)bi * E * TT, b->bp, at, H, T);
    const int k2 = at->kernel_size * at->kernel_size;
    for (int bi = 0; bi < n; bi++) {
        const float *pb = ws->part + (size_t)bi * stride;
        for (size_t i = 0; i < (size_t)H * E; i++) {
            WR(gb->reduce)[i] += pb[i];
            WR(gb->expand)[i] += pb[H * E + i];
        }
        for (size_t i = 0; i < E * k2; i++) WR(gb->dla)[i] += pb[2 * H * E + i];
    }
}

static void cost(const vit_config *c, int l, const vit_geom *g, vit_cost_part *o) {
    const vit_attn *a = &c->attn[l];
    const double H = g->H, P = vit_mech_score_entries(g), E = a->expanded_heads, k = a->kernel_size;
    vit_mech_fused_cost(c, l, g, o);
    vit_cost_add(o, VIT_COMP_ATTN_MAPS, E * H + E * k * k + H * E, (E * H + E * k * k + H * E) * P, 0);
}

static int extra(const vit_config *c, int l, int i, vit_extra *out) {
    const int E = c->attn[l].expanded_heads;
    vit_extra x;
    if (i == 0) x = (vit_extra){"attn_expanded", E, "expansion: expand.weight (H', H) applied across the heads' softmax maps"};
    else if (i == 1) x = (vit_extra){"attn_convolved", E, "the expanded maps after the head-wise k x k convolution (dla.weight)"};
    else return 0;
    if (out) *out = x;
    return 1;
}

static int statics(const vit_config *c, int l, vit_static *v) {
    const int H = c->num_heads, E = c->attn[l].expanded_heads, k = c->attn[l].kernel_size;
    v[0] = (vit_static){"expand", 2, {E, H, 0}, "attention expansion (H', H)"};
    v[1] = (vit_static){"dla", 3, {E, k, k}, "head-wise convolution kernels (distributed local attention)"};
    v[2] = (vit_static){"reduce", 2, {H, E, 0}, "attention reduction (H, H')"};
    return 3;
}

void vit_mech_dla_static_fill(const vit_config *c, const vit_params *p, int l, int i, float *out) {
    const vit_block_params *bp = &p->blocks[l];
    const size_t H = (size_t)c->num_heads, E = (size_t)c->attn[l].expanded_heads, k = (size_t)c->attn[l].kernel_size;
    if (i == 0) memcpy(out, bp->expand, E * H * sizeof(float));
    if (i == 1) memcpy(out, bp->dla, E * k * k * sizeof(float));
    if (i == 2) memcpy(out, bp->reduce, H * E * sizeof(float));
}

static void trace_attrs(const vit_config *c, const vit_params *p, int l, vit_mech_writer *w) {
    w->num(w, "expanded_heads", c->attn[l].expanded_heads);
    w->num(w, "kernel_size", c->attn[l].kernel_size);
}

static const char *not_stochastic(const vit_config *c, int l) {
    (void)c, (void)l;
    return "Refiner refines the softmax maps, so rows sum to anything";
}

const vit_mech vit_mech_refiner = {
    .name = "refiner",
    .summary = "Refiner: head expansion, k x k convolution of the maps, reduction",
    .scopes = 1u << VIT_SCOPE_GLOBAL,
    .keys = keys,
    .n_keys = sizeof keys / sizeof keys[0],
    .defaults = defaults,
    .parse = parse,
    .write = write,
    .validate = validate,
    .describe = describe,
    .map_heads = map_heads,
    .layout = vit_mech_fused_layout,
    .specs = specs,
    .maps = maps,
    .maps_backward = maps_backward,
    .part_floats = part_floats,
    .cost = cost,
    .extra = extra,
    .statics = statics,
    .static_fill = vit_mech_dla_static_fill,
    .trace_attrs = trace_attrs,
    .attn_doc = "the reduced maps (H after expansion and convolution): the map that multiplies the values",
    .not_stochastic = not_stochastic,
};
