/* geom.c: where each block's tokens are and how they group into attention problems (stages,
 * windows, the shift and its mask). Everything here is derived from the config; nothing is
 * stored in checkpoints. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "stage.h"

static const char *const family_names[] = {[VIT_FAMILY_VIT] = "vit", [VIT_FAMILY_SWIN] = "swin"};
_Static_assert(sizeof family_names / sizeof family_names[0] == VIT_FAMILY_COUNT, "family names");
static const char *const scope_names[] = {[VIT_SCOPE_GLOBAL] = "global", [VIT_SCOPE_WINDOW] = "window"};
_Static_assert(sizeof scope_names / sizeof scope_names[0] == VIT_SCOPE_COUNT, "scope names");
static const char *const pad_names[] = {[VIT_PAD_FIRST] = "pad_first",
                                        [VIT_PAD_ROLL_FIRST] = "roll_first"};
_Static_assert(sizeof pad_names / sizeof pad_names[0] == VIT_PAD_COUNT, "pad order names");
static const char *const clamp_names[] = {[VIT_CLAMP_TIMM] = "timm",
                                          [VIT_CLAMP_TORCHVISION] = "torchvision"};
_Static_assert(sizeof clamp_names / sizeof clamp_names[0] == VIT_CLAMP_COUNT, "clamp names");

const char *vit_family_name(vit_family f) { return (unsigned)f < VIT_FAMILY_COUNT ? family_names[f] : "?"; }
const char *vit_scope_name(vit_scope s) { return (unsigned)s < VIT_SCOPE_COUNT ? scope_names[s] : "?"; }
const char *vit_pad_order_name(vit_pad_order p) { return (unsigned)p < VIT_PAD_COUNT ? pad_names[p] : "?"; }
const char *vit_window_clamp_name(vit_window_clamp k) {
    return (unsigned)k < VIT_CLAMP_COUNT ? clamp_names[k] : "?";
}

int vit_num_stages(const vit_config *c) { return c->n_stages > 0 ? c->n_stages : 1; }

int vit_stage_first_block(const vit_config *c, int s) {
    int l = 0;
    for (int i = 0; i < s && i < c->n_stages; i++) l += c->stage[i].depth;
    return l;
}

void vit_block_geom(const vit_config *c, int l, vit_geom *g) {
    memset(g, 0, sizeof *g);
    const int P = c->patch_size;
    int grid = c->img_size / P;
    float stride = (float)P, offset = 0.5f * (float)P;
    g->scope = VIT_SCOPE_GLOBAL;
    g->j = l;
    g->D = c->embed_dim;
    g->H = c->num_heads;
    g->Hm = c->mlp_hidden;
    g->prefix = vit_num_prefix(c);
    if (c->n_stages > 0) {
        int s = 0, first = 0;
        while (s + 1 < c->n_stages && l >= first + c->stage[s].depth) first += c->stage[s++].depth;
        for (int i = 1; i <= s; i++)
            if (c->stage[i].down != VIT_DOWN_NONE) { /* a 2x2 merge pads an odd side by one */
                grid = (grid + 1) / 2;
                offset += 0.5f * stride;
                stride *= 2.0f;
            }
        const vit_stage *st = &c->stage[s];
        g->stage = s;
        g->j = l - first;
        g->scope = st->scope;
        g->D = st->embed_dim;
        g->H = st->num_heads;
        g->Hm = st->mlp_hidden;
        g->prefix = 0;
    }
    g->gh = g->gw = grid;
    g->T = g->prefix + grid * grid;
    g->ph = g->pw = grid;
    g->nwh = g->nww = g->problems = 1;
    g->Tq = g->Tk = g->T;
    g->stride_px = stride;
    g->offset_px = offset;
    if (g->scope != VIT_SCOPE_WINDOW) return;
    const int M0 = c->stage[g->stage].window, odd = c->shift_windows && (g->j & 1);
    int M = M0, shift = 0;
    if (c->window_clamp == VIT_CLAMP_TIMM) {
        if (grid <= M0) M = grid; /* one window, never shifted */
        else if (odd) shift = M / 2;
    } else {
        const int padded = (grid + M - 1) / M * M;
        if (odd && M < padded) shift = M / 2;
    }
    g->M = M;
    g->shift = shift;
    g->ph = g->pw = (grid + M - 1) / M * M;
    g->nwh = g->nww = g->ph / M;
    g->problems = g->nwh * g->nww;
    g->Tq = g->Tk = M * M;
}

void vit_window_tokens(const vit_config *c, const vit_geom *g, int *tok) {
    const int M = g->M, s = g->shift;
    for (int wy = 0; wy < g->nwh; wy++)
        for (int wx = 0; wx < g->nww; wx++)
            for (int ry = 0; ry < M; ry++)
                for (int rx = 0; rx < M; rx++) {
                    /* position in the shifted, padded grid, and where its token came from */
                    const int py = wy * M + ry, px = wx * M + rx;
                    int oy, ox;
                    if (c->pad_order == VIT_PAD_ROLL_FIRST) { /* roll the grid, then pad it */
                        oy = py < g->gh ? (py + s) % g->gh : -1;
                        ox = px < g->gw ? (px + s) % g->gw : -1;
                    } else { /* pad the grid, then roll the padded grid */
                        oy = (py + s) % g->ph;
                        ox = (px + s) % g->pw;
                        if (oy >= g->gh || ox >= g->gw) oy = ox = -1;
                    }
                    tok[((wy * g->nww + wx) * M + ry) * M + rx] = oy < 0 || ox < 0 ? -1 : oy * g->gw + ox;
                }
}

/* Region of a padded-grid coordinate: Swin's slices (0, -M), (-M, -s), (-s, None). */
static int region(int p, int n, int M, int s) { return p < n - M ? 0 : p < n - s ? 1 : 2; }

void vit_shift_mask(const vit_config *c, const vit_geom *g, float *mask) {
    (void)c;
    const int M = g->M, s = g->shift, N = M * M;
    for (int wy = 0; wy < g->nwh; wy++)
        for (int wx = 0; wx < g->nww; wx++) {
            float *m = mask + (size_t)(wy * g->nww + wx) * N * N;
            for (int i = 0; i < N; i++)
                for (int j = 0; j < N; j++) {
                    if (!s) {
                        m[(size_t)i * N + j] = 0.0f;
                        continue;
                    }
                    const int yi = wy * M + i / M, xi = wx * M + i % M;
                    const int yj = wy * M + j / M, xj = wx * M + j % M;
                    const int li = 3 * region(yi, g->ph, M, s) + region(xi, g->pw, M, s);
                    const int lj = 3 * region(yj, g->ph, M, s) + region(xj, g->pw, M, s);
                    m[(size_t)i * N + j] = li == lj ? 0.0f : VIT_SHIFT_MASK_VALUE;
                }
        }
}

/* ---- validation of the stage fields ---- */

as_status vit_stages_validate(const vit_config *c, as_error *err) {
    const char *n = c->name[0] ? c->name : "model";
    if (c->n_stages < 0 || c->n_stages > VIT_MAX_STAGES)
        return as_fail(err, AS_ERR_CONFIG, "%s: %d stages: a staged model has 1 to %d", n, c->n_stages,
                       VIT_MAX_STAGES);
    if ((unsigned)c->family >= VIT_FAMILY_COUNT || (unsigned)c->pad_order >= VIT_PAD_COUNT ||
        (unsigned)c->window_clamp >= VIT_CLAMP_COUNT)
        return as_fail(err, AS_ERR_CONFIG, "%s: unknown family, pad order or window clamp", n);
    if (c->n_stages == 0) {
        if (c->family != VIT_FAMILY_VIT || c->patch_norm || c->shift_windows ||
            c->pad_order != VIT_PAD_FIRST || c->window_clamp != VIT_CLAMP_TIMM)
            return as_fail(err, AS_ERR_CONFIG, "%s: family, patch_norm, shift_windows, pad_order and "
                           "window_clamp describe staged models, and this model has no stages: "
                           "list its stages, or remove them", n);
        return AS_OK;
    }
    if (c->family != VIT_FAMILY_SWIN)
        return as_fail(err, AS_ERR_CONFIG, "%s: staged models of family %s are not supported yet: "
                       "use family swin", n, vit_family_name(c->family));
    if (c->class_token || c->distilled || c->global_pool != VIT_POOL_AVG || c->fc_norm)
        return as_fail(err, AS_ERR_CONFIG, "%s: a swin model has no class or distillation token and "
                       "pools the mean after the final norm: set class_token false, distilled false, "
                       "global_pool \"avg\" and fc_norm false", n);
    const vit_stage *s0 = &c->stage[0];
    if (s0->embed_dim != c->embed_dim || s0->num_heads != c->num_heads ||
        s0->mlp_hidden != c->mlp_hidden)
        return as_fail(err, AS_ERR_CONFIG, "%s: embed_dim, num_heads and mlp hidden (%d, %d, %d) must "
                       "be stage 0's (%d, %d, %d)", n, c->embed_dim, c->num_heads, c->mlp_hidden,
                       s0->embed_dim, s0->num_heads, s0->mlp_hidden);
    int total = 0;
    for (int s = 0; s < c->n_stages; s++) {
        const vit_stage *st = &c->stage[s];
        if (st->depth < 1 || st->embed_dim < 1 || st->num_heads < 1 || st->mlp_hidden < 1 ||
            st->embed_dim > VIT_MAX_DIM || st->num_heads > VIT_MAX_DIM || st->mlp_hidden > VIT_MAX_HIDDEN ||
            st->depth > VIT_MAX_DEPTH)
            return as_fail(err, AS_ERR_CONFIG, "%s: stage %d: depth, embed_dim, num_heads and mlp "
                           "hidden must be positive and within attnscope's limits (got %d, %d, %d, %d)",
                           n, s, st->depth, st->embed_dim, st->num_heads, st->mlp_hidden);
        if (st->embed_dim % st->num_heads)
            return as_fail(err, AS_ERR_CONFIG, "%s: stage %d: embed_dim %d is not divisible by "
                           "num_heads %d: choose a head count that divides it", n, s, st->embed_dim,
                           st->num_heads);
        if ((unsigned)st->scope >= VIT_SCOPE_COUNT || (unsigned)st->down >= VIT_DOWN_COUNT)
            return as_fail(err, AS_ERR_CONFIG, "%s: stage %d: unknown scope or downsampling", n, s);
        if (s == 0 && st->down != VIT_DOWN_NONE)
            return as_fail(err, AS_ERR_CONFIG, "%s: stage 0 cannot downsample (the patch embedding "
                           "does): remove its merge", n);
        if (s > 0 && st->down == VIT_DOWN_NONE && st->embed_dim != c->stage[s - 1].embed_dim)
            return as_fail(err, AS_ERR_CONFIG, "%s: stage %d changes the width from %d to %d without "
                           "a patch merge: add the merge, or keep the width", n, s,
                           c->stage[s - 1].embed_dim, st->embed_dim);
        if (st->scope == VIT_SCOPE_WINDOW && (st->window < 1 || st->window > VIT_MAX_WINDOW))
            return as_fail(err, AS_ERR_CONFIG, "%s: stage %d: window %d is outside 1..%d: use a "
                           "window such as 7 (Swin at 224) or 12 (at 384)", n, s, st->window,
                           VIT_MAX_WINDOW);
        if (st->scope == VIT_SCOPE_GLOBAL && st->window)
            return as_fail(err, AS_ERR_CONFIG, "%s: stage %d: a window of %d has no effect on "
                           "global attention: remove it, or use the window scope", n, s, st->window);
        total += st->depth;
    }
    if (total != c->depth)
        return as_fail(err, AS_ERR_CONFIG, "%s: depth %d is not the sum of the stage depths (%d)", n,
                       c->depth, total);
    for (int l = 0; l < c->depth; l++) {
        vit_geom g;
        vit_block_geom(c, l, &g);
        const vit_attn *a = &c->attn[l];
        /* only vanilla runs as problems yet; lmsa and lsla in windows come with core/mech */
        if (a->kind != VIT_ATTN_VANILLA)
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d (stage %d, %s scope): the %s mechanism "
                           "does not run in a staged model yet: use vanilla there", n, l, g.stage,
                           vit_scope_name(g.scope), vit_attn_name(a->kind));
        if (!(a->scale >= 0.0f) || isinf(a->scale))
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d: scale must be a positive number, or "
                           "absent for 1/sqrt(head width)", n, l);
        const double maps = (double)g.H * g.problems * g.Tq * g.Tk;
        const double rows = (double)g.T * (3.0 * g.D > g.Hm ? 3.0 * g.D : g.Hm);
        if (maps > 2e9 || rows > 2e9)
            return as_fail(err, AS_ERR_CONFIG, "%s: block %d: %d tokens, %d heads and %d x %d maps "
                           "are too large for one image: use a smaller img_size or window", n, l,
                           g.T, g.H, g.Tq, g.Tk);
    }
    return AS_OK;
}
