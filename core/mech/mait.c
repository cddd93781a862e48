/* mait.c: MaiT's masked attention. Head h's scores get an R x R spatial mask around the query
 * patch (R = mask_size[h], 0 leaves the head unmasked), applied per mask_mode (config.h):
 * zero (the paper's M * (q k^T * scale)), soft (a learnable alpha per head) or neg_inf. */
#include "../mech.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* MaiT: applies head h's mask to its (T, T) scores, row by row: for the query patch (qy, qx),
 * key rows of the grid more than r away are masked whole, the others outside [qx - r, qx + r].
 * Prefix tokens' rows and columns are never masked (the class token aggregates globally; a
 * covering mask equals no mask). alpha is read in soft mode only. */
static void mait_apply(float *A, const vit_attn *at, const float *alpha, int h, int T, int prefix, int G) {
    const int r = at->mask_size[h] / 2;
    const int neg = at->mask_mode == VIT_MASK_NEG_INF;
    const float out = at->mask_mode == VIT_MASK_SOFT ? alpha[h] : 0.0f;
    for (int i = prefix; i < T; i++) {
        const int qy = (i - prefix) / G, qx = (i - prefix) % G;
        float *row = A + (size_t)i * T + prefix;
        for (int ky = 0; ky < G; ky++) {
            float *seg = row + (size_t)ky * G;
            const int near = ky >= qy - r && ky <= qy + r;
            const int x0 = near ? (qx - r > 0 ? qx - r : 0) : G, x1 = near ? (qx + r < G ? qx + r + 1 : G) : G;
            /* the columns left and right of the neighbourhood, as two plain loops (vectorised) */
            for (int kx = 0; kx < x0; kx++) seg[kx] = neg ? -INFINITY : seg[kx] * out;
            for (int kx = x1; kx < G; kx++) seg[kx] = neg ? -INFINITY : seg[kx] * out;
        }
    }
}

static const vit_mech_key keys[] = {
    {"mask_size", "an odd R for every head (or the heads listed in \"heads\"), or an array with one per head (0 = unmasked)"},
    {"heads", "with one mask_size: the head indices it applies to"},
    {"mask_mode", "\"zero\" (the paper, default), \"soft\" (learnable alpha per head) or \"neg_inf\""},
};


static int parse(vit_attn *a, const vit_mech_entry *e, int H, char *msg, size_t n) {
#define BAD(...) do { snprintf(msg, n, __VA_ARGS__); return 0; } while (0)
    const vit_mv *j;
    int iv;
    if ((j = vit_mech_get(e, "mask_mode"))) {
        int m = j->type == VIT_MV_STRING ? vit_mask_mode_parse(j->str) : -1;
        if (m < 0) BAD("\"mask_mode\" must be \"zero\" (the paper), \"soft\" or \"neg_inf\"");
        a->mask_mode = (vit_mask_mode)m;
    }
    if (H > VIT_MAX_MASK_HEADS) BAD("mait masks describe at most %d heads", VIT_MAX_MASK_HEADS);
    const vit_mv *ms = vit_mech_get(e, "mask_size"), *hs = vit_mech_get(e, "heads");
    if (ms && (ms->type == VIT_MV_NUMBERS || ms->type == VIT_MV_ARRAY)) {
        if (hs) BAD("give \"mask_size\" per head (an array of %d, 0 = unmasked) or one size "
                    "with \"heads\", not both", H);
        if (ms->count != H) BAD("\"mask_size\" has %d entries; the model has %d heads", ms->count, H);
        if (ms->type != VIT_MV_NUMBERS) BAD("\"mask_size\" entries must be 0 (unmasked) or odd sizes 1..255");
        for (int h = 0; h < H; h++) {
            if (!as_double_to_int(ms->nums[h], 0, 255, &iv))
                BAD("\"mask_size\" entries must be 0 (unmasked) or odd sizes 1..255");
            a->mask_size[h] = (unsigned char)iv;
        }
        return 1;
    }
    if (!vit_mv_int(ms, 1, 255, &iv))
        BAD("mait needs \"mask_size\": an odd R (3, 5, ...) or an array with one per head");
    const int R = iv;
    if (!hs) {
        for (int h = 0; h < H; h++) a->mask_size[h] = (unsigned char)R;
    } else if (hs->type == VIT_MV_NUMBERS || hs->type == VIT_MV_ARRAY) {
        for (int i = 0; i < hs->count; i++) {
            if (hs->type != VIT_MV_NUMBERS || !as_double_to_int(hs->nums[i], 0, H - 1, &iv))
                BAD("\"heads\" must list head indices 0..%d", H - 1);
            a->mask_size[iv] = (unsigned char)R;
        }
    } else {
        BAD("\"heads\" must be an array of head indices");
    }
    return 1;
#undef BAD
}

/* Block l's own heads (a staged model's differ per stage: H-MaiT). */
static int block_heads(const vit_config *c, int l) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    return g.H < VIT_MAX_MASK_HEADS ? g.H : VIT_MAX_MASK_HEADS;
}

/* Soft masks: head_backward's dS * raw in X, its sum over the problem in scal. */
static int uses_ws_x(const vit_config *c, int l) { return c->attn[l].mask_mode == VIT_MASK_SOFT; }

/* A mait block that masks no head is plain attention under MaiT's name. */
static int no_effect(const vit_config *c, int l, char *msg, size_t n) {
    for (int h = 0; h < block_heads(c, l); h++)
        if (c->attn[l].mask_size[h]) return 0;
    snprintf(msg, n, "no head is masked (every \"mask_size\" is 0, or \"heads\" is empty): mask at "
             "least one head, or use \"type\": \"vanilla\" for plain attention");
    return 1;
}

static void write(const vit_config *c, int l, vit_mech_writer *w) {
    const vit_attn *a = &c->attn[l];
    double ms[VIT_MAX_MASK_HEADS];
    int H = 0;
    for (; H < block_heads(c, l); H++) ms[H] = a->mask_size[H];
    w->nums(w, "mask_size", ms, H);
    w->str(w, "mask_mode", vit_mask_mode_name(a->mask_mode));
}

static as_status validate(const vit_config *c, int l, const vit_geom *g, as_error *err) {
    const vit_attn *a = &c->attn[l];
    const char *n = vit_mech_model_name(c);
    const int H = g->H, G = g->gw;
    if (H > VIT_MAX_MASK_HEADS)
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d: mait masks describe at most %d "
                       "heads, the model has %d", n, l, VIT_MAX_MASK_HEADS, H);
    if ((unsigned)a->mask_mode >= VIT_MASK_COUNT)
        return as_fail(err, AS_ERR_CONFIG, "%s: block %d: unknown mask mode", n, l);
    for (int h = 0; h < VIT_MAX_MASK_HEADS; h++) {
        const int R = a->mask_size[h];
        if (R == 0) continue;
        if (h >= H)
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d: a mask for head %d, but the "
                           "model has %d heads", n, l, h, H);
        if (R % 2 == 0)
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d head %d: mask size %d is even: "
                           "use an odd size (3, 5, ...) centred on the query patch", n, l, h, R);
        if (R > 2 * G - 1)
            return as_fail(err, AS_ERR_CONFIG,
                           "%s: block %d head %d: mask size %d is larger than the %dx%d patch "
                           "grid: use at most %d (every patch then sees the whole grid), or "
                           "leave the head unmasked", n, l, h, R, G, G, 2 * G - 1);
    }
    return AS_OK;
}

static void describe(const vit_config *c, int l, char *buf, size_t n) {
    const vit_attn *a = &c->attn[l];
    size_t u = 0;
    int w;
#define PUT(...) do { if (u < n) { w = snprintf(buf + u, n - u, __VA_ARGS__); u += w > 0 ? (size_t)w : 0; } } while (0)
    vit_geom g; /* the block's own heads (a staged model's differ per stage) */
    vit_block_geom(c, l, &g);
    PUT(" R=[");
    for (int h = 0; h < g.H && h < VIT_MAX_MASK_HEADS; h++) PUT("%s%d", h ? "," : "", a->mask_size[h]);
    PUT("] %s", vit_mask_mode_name(a->mask_mode));
#undef PUT
}

static void specs(const vit_mech_block *b, vit_block_params *bp, vit_spec_sink *s) {
    vit_mech_fused_specs(b, bp, s);
    if (b->at->mask_mode == VIT_MASK_SOFT) VIT_MECH_SPEC(s, &bp->mask_alpha, ".attn.mask_alpha", b->g->H);
}

static void scores(const vit_mech_block *b, const vit_attn_problem *p, float *A) {
    if (p->h < VIT_MAX_MASK_HEADS && b->at->mask_size[p->h])
        mait_apply(A, b->at, b->bp->mask_alpha, p->h, p->Tq, p->prefix, p->gw);
}

static void head_backward(const vit_mech_block *b, vit_mech_head_bwd *x) {
    const vit_attn_problem *p = x->p;
    const vit_attn *at = b->at;
    const int h = p->h, T = p->Tq;
    const size_t TT = (size_t)p->Tq * p->Tk;
    if (!(h < VIT_MAX_MASK_HEADS && at->mask_size[h])) return;
    if (at->mask_mode == VIT_MASK_SOFT) {
        /* d alpha = sum over masked entries of dS * raw; raw = scale q k^T unless given */
        if (x->raw) memcpy(x->X, x->raw, TT * sizeof(float));
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->Tq, p->Tk, p->dq, p->scale, p->q, p->ldq,
                        p->k, p->ldk, 0.0f, x->X, p->Tk);
        double all = 0, kept = 0;
        for (size_t i = 0; i < TT; i++) all += (double)(x->X[i] *= x->dS[i]);
        vit_attn z = *at;
        z.mask_mode = VIT_MASK_ZERO;
        mait_apply(x->X, &z, NULL, h, T, p->prefix, p->gw);
        for (size_t i = 0; i < TT; i++) kept += x->X[i];
        *x->scal = all - kept;
    }
    vit_attn m = *at;
    if (m.mask_mode == VIT_MASK_NEG_INF) m.mask_mode = VIT_MASK_ZERO;
    mait_apply(x->dS, &m, b->bp->mask_alpha, h, T, p->prefix, p->gw);
}

static void params_backward(const vit_mech_block *b, const vit_block_params *gb, const vit_tape *tape,
                            vit_grad_ws *ws, int n, int Tq, int Tk) {
    const vit_attn *at = b->at;
    const int H = b->g->H;
    if (at->mask_mode != VIT_MASK_SOFT) return;
    for (int h = 0; h < H && h < VIT_MAX_MASK_HEADS; h++) {
        if (!at->mask_size[h]) continue;
        double s = 0;
        for (int bi = 0; bi < n; bi++) s += ws->scal[(size_t)bi * H + h];
        WR(gb->mask_alpha)[h] += (float)s;
    }
}

/* Zero and neg_inf masks leave a neighbourhood of real scores and one constant outside it. */
static int local(const vit_config *c, int l, int h, vit_local *out) {
    const vit_attn *at = &c->attn[l];
    if (h >= VIT_MAX_MASK_HEADS || !at->mask_size[h] || at->mask_mode == VIT_MASK_SOFT) return 0;
    *out = (vit_local){at->mask_size[h], at->mask_mode == VIT_MASK_ZERO ? 0.0f : -INFINITY};
    return 1;
}

static void cost(const vit_config *c, int l, const vit_geom *g, vit_cost_part *o) {
    const vit_attn *a = &c->attn[l];
    const double H = g->H, P = vit_mech_score_entries(g);
    vit_mech_fused_cost(c, l, g, o);
    double masked = 0; /* the dense path applies the mask; a local head has none to apply */
    for (int h = 0; h < H && h < VIT_MAX_MASK_HEADS; h++) masked += a->mask_size[h] > 0 && !vit_local_head(c, l, h, NULL);
    vit_cost_add(o, VIT_COMP_ATTN_SCORES, a->mask_mode == VIT_MASK_SOFT ? H : 0, 0, masked * P);
}

static int statics(const vit_config *c, int l, vit_static *v) {
    vit_geom g; /* the block's own tokens (CaiT's SA blocks have no class token) */
    vit_block_geom(c, l, &g);
    const int T = g.T, H = g.H, S = vit_local_side(c, l);
    int n = 0;
    if (S) /* every head local (H-MaiT): the same pattern around every query, not (H, T, T) */
        v[n++] = (vit_static){"mask_local", 3, {H, S, S}, "1 where the key at (y + dy, x + dx) of query "
                              "(y, x) is kept, at [h, dy + S/2, dx + S/2], 0 where the mask applies (see "
                              "mask_mode); the keys beyond S/2 are masked"};
    else
        v[n++] = (vit_static){"mask", 3, {H, T, T}, "1 where the score is kept, 0 where the mask applies (see mask_mode)"};
    if (c->attn[l].mask_mode == VIT_MASK_SOFT) v[n++] = (vit_static){"mask_alpha", 1, {H, 0, 0}, "soft mask value per head"};
    return n;
}

static void static_fill(const vit_config *c, const vit_params *p, int l, int i, float *out) {
    const vit_attn *at = &c->attn[l];
    vit_geom g;
    vit_block_geom(c, l, &g);
    const int T = g.T, H = g.H;
    const size_t TT = (size_t)T * T;
    if (i == 1 && at->mask_mode == VIT_MASK_SOFT) {
        memcpy(out, p->blocks[l].mask_alpha, (size_t)H * sizeof(float));
        return;
    }
    if (i != 0) return;
    const int S = vit_local_side(c, l);
    if (S) { /* every head local: its S x S pattern around any query */
        for (int h = 0; h < H; h++) {
            const int r = at->mask_size[h] / 2;
            for (int y = 0; y < S; y++)
                for (int x = 0; x < S; x++)
                    out[((size_t)h * S + y) * S + x] = abs(y - S / 2) <= r && abs(x - S / 2) <= r;
        }
        return;
    }
    /* the rule the scores get, applied to ones in the paper's zero mode */
    vit_attn zero = *at;
    zero.mask_mode = VIT_MASK_ZERO;
    for (size_t e = 0; e < (size_t)H * TT; e++) out[e] = 1.0f;
    for (int h = 0; h < H && h < VIT_MAX_MASK_HEADS; h++)
        if (at->mask_size[h]) mait_apply(out + (size_t)h * TT, &zero, NULL, h, T, g.prefix, g.gw);
}

static int check(const vit_config *c, const vit_params *p, int l, char *msg, size_t n) {
    const float *al = p->blocks[l].mask_alpha;
    if (!al) return 1;
    for (int h = 0; h < block_heads(c, l); h++)
        if (!(al[h] > 0.0f && al[h] < 1.0f)) {
            snprintf(msg, n, "blocks.%d.attn.mask_alpha[%d] = %g is outside (0, 1): soft "
                     "masks scale masked scores by a value strictly between 0 and 1", l, h,
                     (double)al[h]);
            return 0;
        }
    return 1;
}

static void trace_attrs(const vit_config *c, const vit_params *p, int l, vit_mech_writer *w) {
    const vit_attn *a = &c->attn[l];
    double ms[VIT_MAX_MASK_HEADS];
    const int H = block_heads(c, l);
    for (int h = 0; h < H; h++) ms[h] = a->mask_size[h];
    w->nums(w, "mask_size", ms, H);
    w->str(w, "mask_mode", vit_mask_mode_name(a->mask_mode));
    w->str(w, "mask_rule", "patch rows and columns outside the R x R neighbourhood; "
                           "prefix-token rows and columns are never masked");
    if (a->mask_mode == VIT_MASK_SOFT && p && p->blocks[l].mask_alpha)
        w->floats(w, "mask_alpha", p->blocks[l].mask_alpha, H);
}

const vit_mech vit_mech_mait = {
    .name = "mait",
    .summary = "MaiT: R x R spatial masks around the query patch, per head",
    .flags = VIT_MECH_PARAMS_NO_MAPS, /* params_backward sums ws->scal */
    .scopes = 1u << VIT_SCOPE_GLOBAL,
    .keys = keys,
    .n_keys = sizeof keys / sizeof keys[0],
    .parse = parse,
    .write = write,
    .validate = validate,
    .no_effect = no_effect,
    .uses_ws_x = uses_ws_x,
    .describe = describe,
    .layout = vit_mech_fused_layout,
    .specs = specs,
    .scores = scores,
    .head_backward = head_backward,
    .params_backward = params_backward,
    .local = local,
    .cost = cost,
    .statics = statics,
    .static_fill = static_fill,
    .check = check,
    .trace_attrs = trace_attrs,
    .scores_doc = "mask applied to q k^T * scale (see mask_mode), before the softmax",
};
