/* geom.c: where each block's tokens are and how they group into attention problems (stages,
 * windows, the shift and its mask). Everything here is derived from the config; nothing is
 * stored in checkpoints. */
#include "config.h"
#include "stem.h"

#include <string.h>

static const char *const family_names[] = {[VIT_FAMILY_VIT] = "vit", [VIT_FAMILY_SWIN] = "swin",
                                            [VIT_FAMILY_PVT2] = "pvt_v2", [VIT_FAMILY_CAIT] = "cait"};
_Static_assert(sizeof family_names / sizeof family_names[0] == VIT_FAMILY_COUNT, "family names");
static const char *const scope_names[] = {[VIT_SCOPE_GLOBAL] = "global", [VIT_SCOPE_WINDOW] = "window",
                                           [VIT_SCOPE_SRA] = "sra", [VIT_SCOPE_CLASS] = "class"};
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
    if (c->n_stem > 0) { /* a convolutional stem: its composed grid and receptive-field centres */
        vit_stem_geom(c, &grid, &stride, &offset);
    } else if (c->patch_kernel > 0) { /* PVT's overlapping stem: k, stride P, pad k / 2 */
        const int k = c->patch_kernel, pad = k / 2;
        grid = (c->img_size + 2 * pad - k) / P + 1;
        offset = 0.5f * (float)k - (float)pad; /* output y spans pixels [P y - pad, P y - pad + k) */
    }
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
                grid = (grid + 1) / 2; /* CONV k3 s2 p1 too: (g + 2 - 3) / 2 + 1 */
                if (c->stage[i].down == VIT_DOWN_MERGE) offset += 0.5f * stride; /* the mean of 2x2 */
                stride *= 2.0f; /* CONV: output y is centred on input 2y, c' (y) = c (2y) */
            }
        const vit_stage *st = &c->stage[s];
        g->stage = s;
        g->j = l - first;
        g->scope = st->scope;
        g->D = st->embed_dim;
        g->H = st->num_heads;
        g->Hm = st->mlp_hidden;
        g->prefix = st->scope == VIT_SCOPE_CLASS; /* CaiT: [cls; patches] */
    }
    g->gh = g->gw = grid;
    g->T = g->prefix + grid * grid;
    g->ph = g->pw = grid;
    g->nwh = g->nww = g->problems = 1;
    g->Tq = g->Tk = g->T;
    g->stride_px = stride;
    g->offset_px = offset;
    g->kgh = g->gh;
    g->kgw = g->gw;
    g->key_stride_px = stride;
    g->key_offset_px = offset;
    if (g->scope == VIT_SCOPE_SRA) vit_sra_geom(c, g);
    if (g->scope == VIT_SCOPE_CLASS) g->Tq = 1; /* the class token alone queries */
    /* a config still being read (img_size below the patch, window 0) is refused by validation
     * later; until then its windows are one token, not a division by zero */
    if (g->scope != VIT_SCOPE_WINDOW) return;
    const int M0 = c->stage[g->stage].window > 0 ? c->stage[g->stage].window : 1, odd = c->shift_windows && (g->j & 1);
    int M = M0, shift = 0;
    if (c->window_clamp == VIT_CLAMP_TIMM) {
        if (grid <= M0) M = grid > 0 ? grid : 1; /* one window, never shifted */
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
