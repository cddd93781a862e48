/* similarity.c: cross-layer similarity of attention maps ("attention saturation", DeepViT and
 * LaViT), under three definitions, per head and head-averaged, and the adjacent-layer curve. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "../io/trace.h"
#include "geometry.h"
#include "metric.h"

enum { DEF_DEEPVIT, DEF_ROW, DEF_MAP, N_DEFS };
static const char *const def_names[] = {"deepvit", "row", "map"};
_Static_assert(sizeof def_names / sizeof def_names[0] == N_DEFS && N_DEFS == ANALYSIS_N_DEFINITIONS,
               "definition names");

const char *analysis_definition_name(int i) { return i >= 0 && i < N_DEFS ? def_names[i] : "?"; }
int analysis_definition_parse(const char *s) {
    for (int i = 0; i < N_DEFS; i++)
        if (strcmp(s, def_names[i]) == 0) return i;
    return -1;
}
enum { OUT_HEAD, OUT_MEAN, OUT_ADJ };

static as_status sim_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    int L = lay->n_layers, H = lay->n_heads, Q = lay->q_rows, T = lay->tokens;
    int d4[4] = {N_DEFS, H, L, L}, d3[3] = {N_DEFS, L, L}, d2[2] = {N_DEFS, L};
    analysis_axis a4[4] = {ANALYSIS_AX_DEFINITION, ANALYSIS_AX_HEAD, ANALYSIS_AX_LAYER, ANALYSIS_AX_LAYER2};
    analysis_axis a3[3] = {ANALYSIS_AX_DEFINITION, ANALYSIS_AX_LAYER, ANALYSIS_AX_LAYER2};
    analysis_output_add(c, "per_head", "cosine similarity of head h's maps in two layers", "", 4, d4, a4);
    analysis_output_add(c, "head_mean", "per_head averaged over the recorded heads", "", 3, d3, a3);
    analysis_output_add(c, "adjacent", "head_mean of layer l against layer l-1 (NaN when l-1 "
                        "was not recorded)", "", 2, d2, a3);
    /* norms (row Q, column T, total) per layer and head, then a row and a column accumulator */
    c->scratch_bytes = ((size_t)L * H * (Q + T + 1) + Q + T) * sizeof(double);
    snprintf(c->params, sizeof c->params, "definitions=deepvit,row,map; map=attn");
    if (Q < 2) analysis_note(c, "similarity: the trace holds only prefix query rows, so the "
                             "deepvit (key column) definition is undefined (NaN)");
    (void)err;
    return AS_OK;
}

static void sim_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    int L = lay->n_layers, H = lay->n_heads, Q = lay->q_rows, T = lay->tokens;
    size_t per = (size_t)Q + T + 1;
    double *norms = scratch, *rowdot = norms + (size_t)L * H * per, *coldot = rowdot + Q;
    for (int li = 0; li < L; li++)
        for (int hi = 0; hi < H; hi++) {
            const float *A = im->attn[li] + (size_t)hi * Q * T;
            double *rn = norms + ((size_t)li * H + hi) * per, *cn = rn + Q, *tn = cn + T;
            memset(rn, 0, per * sizeof *rn);
            for (int i = 0; i < Q; i++) {
                const float *row = A + (size_t)i * T;
                rn[i] = analysis_rowdot(cn, row, row, T);
                *tn += rn[i];
            }
        }
    double *ph = vals + c->out[OUT_HEAD].offset, *hm = vals + c->out[OUT_MEAN].offset;
    for (int la = 0; la < L; la++)
        for (int lb = 0; lb <= la; lb++)
            for (int hi = 0; hi < H; hi++) {
                const float *A = im->attn[la] + (size_t)hi * Q * T, *B = im->attn[lb] + (size_t)hi * Q * T;
                const double *ra = norms + ((size_t)la * H + hi) * per, *rb = norms + ((size_t)lb * H + hi) * per;
                memset(coldot, 0, (size_t)T * sizeof *coldot);
                double tot = 0;
                for (int i = 0; i < Q; i++) {
                    rowdot[i] = analysis_rowdot(coldot, A + (size_t)i * T, B + (size_t)i * T, T);
                    tot += rowdot[i];
                }
                double v[N_DEFS], sum = 0;
                int n = 0;
                for (int t = 0; t < T && Q >= 2; t++)
                    if (ra[Q + t] > 0 && rb[Q + t] > 0) {
                        sum += coldot[t] / sqrt(ra[Q + t] * rb[Q + t]);
                        n++;
                    }
                v[DEF_DEEPVIT] = n ? sum / n : NAN;
                sum = 0;
                n = 0;
                for (int i = 0; i < Q; i++)
                    if (ra[i] > 0 && rb[i] > 0) {
                        sum += rowdot[i] / sqrt(ra[i] * rb[i]);
                        n++;
                    }
                v[DEF_ROW] = n ? sum / n : NAN;
                v[DEF_MAP] = ra[Q + T] > 0 && rb[Q + T] > 0 ? tot / sqrt(ra[Q + T] * rb[Q + T]) : NAN;
                for (int d = 0; d < N_DEFS; d++) {
                    ph[(((size_t)d * H + hi) * L + la) * L + lb] = v[d];
                    ph[(((size_t)d * H + hi) * L + lb) * L + la] = v[d];
                }
            }
    for (int d = 0; d < N_DEFS; d++)
        for (int la = 0; la < L; la++)
            for (int lb = 0; lb < L; lb++) {
                double s = 0;
                int n = 0;
                for (int hi = 0; hi < H; hi++) {
                    double x = ph[(((size_t)d * H + hi) * L + la) * L + lb];
                    if (!isnan(x)) {
                        s += x;
                        n++;
                    }
                }
                hm[((size_t)d * L + la) * L + lb] = n ? s / n : NAN;
            }
    double *adj = vals + c->out[OUT_ADJ].offset;
    for (int d = 0; d < N_DEFS; d++)
        for (int li = 0; li < L; li++) {
            int prev = analysis_layer_pos(lay, lay->layers[li] - 1);
            adj[d * L + li] = prev < 0 ? NAN : hm[((size_t)d * L + li) * L + prev];
        }
}

static as_status sim_finish(analysis_ctx *c, const double *mean, as_error *err) {
    const analysis_layout *lay = c->lay;
    const double *adj = mean + c->out[OUT_ADJ].offset;
    int L = lay->n_layers;
    analysis_report_add(c, "  (every definition is stored; plot similarity and view default to row, MaiT's\n"
                           "  appendix; plot adjacent to map, LaViT Fig. 3; DeepViT: deepvit)\n");
    analysis_report_add(c, "  adjacent layers, head mean (layer against the layer before it):\n"
                           "  %5s  %7s  %7s  %7s\n", "layer", "deepvit", "row", "map");
    for (int li = 0; li < L; li++) {
        if (isnan(adj[DEF_ROW * L + li])) continue;
        analysis_report_add(c, "  %5d  %7.4f  %7.4f  %7.4f\n", lay->layers[li],
                            adj[DEF_DEEPVIT * L + li], adj[DEF_ROW * L + li], adj[DEF_MAP * L + li]);
    }
    (void)err;
    return AS_OK;
}

static const analysis_metric sim_staged; /* staged traces (below) */

const analysis_metric analysis_metric_similarity = {
    .name = "similarity",
    .version = 1,
    .summary = "cross-layer cosine similarity of attention maps (DeepViT, LaViT), L x L and adjacent",
    .definition = "per head h and layers p,q: deepvit = mean over key columns t of cos(A_p[:,t], "
                  "A_q[:,t]); row = mean over query rows i of cos(A_p[i,:], A_q[i,:]); map = "
                  "cos(vec A_p, vec A_q); zero vectors are left out of the means; head_mean "
                  "averages the heads; adjacent[l] = head_mean(l, l-1)",
    .needs = 1u << TRACE_Q_ATTN,
    .traces = ANALYSIS_TRACES_SINGLE_GRID | ANALYSIS_TRACES_STAGED,
    .staged = &sim_staged,
    .plan = sim_plan,
    .image = sim_image,
    .finish = sim_finish,
};

/* ---- staged traces (format 3): docs/analysis.md, "Staged traces" ---------------------------- */

enum { SOUT_HEAD, SOUT_MEAN, SOUT_ADJ, SOUT_POOLED };

/* state: per layer position, the coarse cell of each grid token and the tokens per cell */
typedef struct {
    int *cell[VIT_MAX_DEPTH];
    int *n[VIT_MAX_DEPTH];
    int *kcell[VIT_MAX_DEPTH];  /* (P, Tk): the coarse cell of each key slot (analysis_key_cell) */
    int tc;                     /* cells of the coarsest recorded grid */
    int tk;                     /* the most key slots of a problem */
} ssim_state;

static as_status ssim_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    const analysis_staged *S = lay->staged;
    const analysis_lgeom *gc = &S->l[S->coarse];
    int L = lay->n_layers, H = lay->n_heads;
    ssim_state *st = calloc(1, sizeof *st);
    if (!st) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    c->state = st;
    st->tc = gc->gh * gc->gw;
    for (int li = 0; li < L; li++) {
        const analysis_lgeom *g = &S->l[li];
        st->cell[li] = malloc((size_t)g->gh * (size_t)g->gw * sizeof(int));
        st->n[li] = malloc((size_t)st->tc * sizeof(int));
        if (!st->cell[li] || !st->n[li]) return as_fail(err, AS_ERR_NOMEM, "out of memory");
        analysis_cells(st->cell[li], st->n[li], g, gc);
        if (!(st->kcell[li] = malloc((size_t)g->P * g->Tk * sizeof(int)))) return as_fail(err, AS_ERR_NOMEM, "out of memory");
        for (int w = 0; w < g->P; w++)
            for (int j = 0; j < g->Tk; j++) st->kcell[li][(size_t)w * g->Tk + j] = analysis_key_cell(g, w, j, gc);
        if (g->Tk > st->tk) st->tk = g->Tk;
    }
    int d4[4] = {N_DEFS, H, L, L}, d3[3] = {N_DEFS, L, L}, d2[2] = {N_DEFS, L};
    analysis_axis a4[4] = {ANALYSIS_AX_DEFINITION, ANALYSIS_AX_HEAD, ANALYSIS_AX_LAYER, ANALYSIS_AX_LAYER2};
    analysis_axis a3[3] = {ANALYSIS_AX_DEFINITION, ANALYSIS_AX_LAYER, ANALYSIS_AX_LAYER2};
    analysis_output_add(c, "per_head", "cosine similarity of head h's maps in two layers of the same "
                        "support (same stage, scope, windows and shift: W with W, SW with SW); NaN "
                        "for other pairs", "", 4, d4, a4);
    analysis_output_add(c, "head_mean", "per_head averaged over the layers' heads", "", 3, d3, a3);
    analysis_output_add(c, "adjacent", "head_mean of layer l against the nearest earlier recorded "
                        "layer of the same support (l-2 in Swin; NaN when there is none)", "", 2, d2, a3);
    analysis_output_add(c, "pooled", "every pair of layers: the heads' mean map in grid space, "
                        "pooled onto the coarsest recorded grid (query rows averaged, key columns "
                        "summed over each cell's tokens), then the definition's cosine", "", 3, d3, a3);
    c->scratch_bytes = ((size_t)L * st->tc * st->tc + 3 * (size_t)st->tk + 2 * (size_t)st->tc) * sizeof(double);
    snprintf(c->params, sizeof c->params, "definitions=deepvit,row,map; map=attn; pairs=same support "
             "(W with W, SW with SW); pad slots dropped; pooled=heads mean, grid %dx%d (layer %d)",
             gc->gh, gc->gw, gc->layer);
    analysis_note(c, "similarity: on staged traces only layers of the same support are compared "
                  "(shifted and unshifted windows have disjoint supports); pooled compares every "
                  "pair on the %dx%d grid", gc->gh, gc->gw);
    return AS_OK;
}

/* The three cosines of head hi's maps in layers a, b of the same support (pad slots dropped). */
static void ssim_pair(const analysis_lgeom *g, const float *A, const float *B, int hi, double *v,
                      double *col) {
    double *ca = col + g->Tk, *cb = ca + g->Tk, rs = 0, cs = 0, dot = 0, na = 0, nb = 0;
    int rn = 0, cn = 0;
    for (int w = 0; w < g->P; w++) {
        const int *qt = g->qtok + (size_t)w * g->Tq, *kt = g->ktok + (size_t)w * g->Tk;
        memset(col, 0, 3 * (size_t)g->Tk * sizeof *col);
        for (int i = 0; i < g->Tq; i++) {
            if (qt[i] < 0) continue;
            const size_t o = (((size_t)hi * g->P + w) * g->Tq + i) * g->Tk;
            double d = 0, x = 0, y = 0;
            for (int j = 0; j < g->Tk; j++) {
                if (kt[j] < 0) continue;
                double p = A[o + j], q = B[o + j];
                d += p * q, x += p * p, y += q * q;
                col[j] += p * q, ca[j] += p * p, cb[j] += q * q;
            }
            if (x > 0 && y > 0) rs += d / sqrt(x * y), rn++;
            dot += d, na += x, nb += y;
        }
        for (int j = 0; j < g->Tk && g->Tq >= 2; j++)
            if (kt[j] >= 0 && ca[j] > 0 && cb[j] > 0) cs += col[j] / sqrt(ca[j] * cb[j]), cn++;
    }
    v[DEF_DEEPVIT] = cn ? cs / cn : NAN;
    v[DEF_ROW] = rn ? rs / rn : NAN;
    v[DEF_MAP] = na > 0 && nb > 0 ? dot / sqrt(na * nb) : NAN;
}

/* The three cosines of two dense n x n maps. */
static void ssim_dense(const double *A, const double *B, int n, double *v) {
    double rs = 0, cs = 0, dot = 0, na = 0, nb = 0;
    int rn = 0, cn = 0;
    for (int i = 0; i < n; i++) {
        double d = 0, x = 0, y = 0, e = 0, p = 0, q = 0;
        for (int j = 0; j < n; j++) {
            d += A[(size_t)i * n + j] * B[(size_t)i * n + j];
            x += A[(size_t)i * n + j] * A[(size_t)i * n + j];
            y += B[(size_t)i * n + j] * B[(size_t)i * n + j];
            e += A[(size_t)j * n + i] * B[(size_t)j * n + i];
            p += A[(size_t)j * n + i] * A[(size_t)j * n + i];
            q += B[(size_t)j * n + i] * B[(size_t)j * n + i];
        }
        if (x > 0 && y > 0) rs += d / sqrt(x * y), rn++;
        if (p > 0 && q > 0) cs += e / sqrt(p * q), cn++;
        dot += d, na += x, nb += y;
    }
    v[DEF_DEEPVIT] = cn && n >= 2 ? cs / cn : NAN;
    v[DEF_ROW] = rn ? rs / rn : NAN;
    v[DEF_MAP] = na > 0 && nb > 0 ? dot / sqrt(na * nb) : NAN;
}

static void ssim_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    const analysis_staged *S = lay->staged;
    const ssim_state *st = c->state;
    int L = lay->n_layers, H = lay->n_heads, tc = st->tc;
    double *pool = scratch, *col = pool + (size_t)L * tc * tc;
    double *ph = vals + c->out[SOUT_HEAD].offset, *hm = vals + c->out[SOUT_MEAN].offset;
    for (size_t e = 0; e < c->out[SOUT_HEAD].count; e++) ph[e] = NAN;
    for (int la = 0; la < L; la++)
        for (int lb = 0; lb <= la; lb++) {
            const analysis_lgeom *g = &S->l[la];
            if (!analysis_same_support(g, &S->l[lb])) continue;
            for (int hi = 0; hi < g->H && hi < S->l[lb].H; hi++) {
                double v[N_DEFS];
                ssim_pair(g, im->attn[la], im->attn[lb], hi, v, col);
                for (int d = 0; d < N_DEFS; d++)
                    ph[(((size_t)d * H + hi) * L + la) * L + lb] = ph[(((size_t)d * H + hi) * L + lb) * L + la] = v[d];
            }
        }
    for (int d = 0; d < N_DEFS; d++)
        for (int la = 0; la < L; la++)
            for (int lb = 0; lb < L; lb++) {
                double s = 0;
                int n = 0;
                for (int hi = 0; hi < H; hi++) {
                    double x = ph[(((size_t)d * H + hi) * L + la) * L + lb];
                    if (!isnan(x)) s += x, n++;
                }
                hm[((size_t)d * L + la) * L + lb] = n ? s / n : NAN;
            }
    double *adj = vals + c->out[SOUT_ADJ].offset;
    for (int li = 0; li < L; li++) {
        int prev = -1;
        for (int k = li - 1; k >= 0 && prev < 0; k--)
            if (analysis_same_support(&S->l[li], &S->l[k])) prev = k;
        for (int d = 0; d < N_DEFS; d++) adj[d * L + li] = prev < 0 ? NAN : hm[((size_t)d * L + li) * L + prev];
    }
    /* pooled: U F D^T on the coarsest grid, F the heads' mean map in grid space */
    for (int li = 0; li < L; li++) {
        const analysis_lgeom *g = &S->l[li];
        double *Pm = pool + (size_t)li * tc * tc;
        memset(Pm, 0, (size_t)tc * tc * sizeof *Pm);
        for (int w = 0; w < g->P; w++)
            for (int i = 0; i < g->Tq; i++) {
                int q = analysis_grid_of(g, g->qtok[(size_t)w * g->Tq + i]);
                int cq = q < 0 ? -1 : st->cell[li][q];
                if (cq < 0) continue;
                for (int j = 0; j < g->Tk; j++) {
                    /* a token's coarse cell, or a reduced key's: the cell of its centre */
                    int ck = st->kcell[li][(size_t)w * g->Tk + j];
                    if (ck < 0) continue;
                    double f = 0;
                    for (int hi = 0; hi < g->H; hi++)
                        f += im->attn[li][(((size_t)hi * g->P + w) * g->Tq + i) * g->Tk + j];
                    Pm[(size_t)cq * tc + ck] += f / g->H / st->n[li][cq];
                }
            }
    }
    double *po = vals + c->out[SOUT_POOLED].offset;
    for (int la = 0; la < L; la++)
        for (int lb = 0; lb <= la; lb++) {
            double v[N_DEFS];
            ssim_dense(pool + (size_t)la * tc * tc, pool + (size_t)lb * tc * tc, tc, v);
            for (int d = 0; d < N_DEFS; d++)
                po[((size_t)d * L + la) * L + lb] = po[((size_t)d * L + lb) * L + la] = v[d];
        }
}

static as_status ssim_finish(analysis_ctx *c, const double *mean, as_error *err) {
    const analysis_layout *lay = c->lay;
    const double *adj = mean + c->out[SOUT_ADJ].offset;
    int L = lay->n_layers;
    analysis_report_add(c, "  layer against the previous layer of the same support (W with W, SW "
                           "with SW), head mean:\n  %5s  %5s  %7s  %7s  %7s\n", "layer", "stage",
                        "deepvit", "row", "map");
    for (int li = 0; li < L; li++) {
        if (isnan(adj[DEF_ROW * L + li])) continue;
        analysis_report_add(c, "  %5d  %5d  %7.4f  %7.4f  %7.4f\n", lay->layers[li], lay->staged->l[li].stage,
                            adj[DEF_DEEPVIT * L + li], adj[DEF_ROW * L + li], adj[DEF_MAP * L + li]);
    }
    (void)err;
    return AS_OK;
}

static void ssim_release(analysis_ctx *c) {
    ssim_state *st = c->state;
    for (int li = 0; st && li < VIT_MAX_DEPTH; li++) {
        free(st->cell[li]);
        free(st->n[li]);
        free(st->kcell[li]);
    }
    free(st);
    c->state = NULL;
}

static const analysis_metric sim_staged = {
    .name = "similarity",
    .version = 1,
    .summary = "cross-layer cosine similarity of attention maps within a stage, and pooled across stages",
    .definition = "staged traces: a layer's map in grid space is its window maps placed at their "
                  "tokens (pad slots dropped, rows and columns); for layers p,q of the same support "
                  "(same stage, scope, window partition and shift: shifted and unshifted windows "
                  "have disjoint supports, so W is compared with W and SW with SW) and head h: "
                  "deepvit = mean over key tokens of the column cosine, row = mean over query "
                  "tokens of the row cosine, map = the cosine of the whole maps (zero vectors left "
                  "out); other pairs NaN; adjacent[l] = head_mean(l, l') with l' the nearest "
                  "earlier recorded layer of the same support; pooled (every pair): F = the mean "
                  "over the layer's heads of its grid-space map, pooled onto the coarsest recorded "
                  "grid as U F D^T (U averages the query rows of the tokens whose centres fall in "
                  "a cell, D sums their key columns, so rows stay sums of attention), then the "
                  "three cosines on the pooled maps",
    .needs = 1u << TRACE_Q_ATTN,
    .traces = ANALYSIS_TRACES_STAGED,
    .plan = ssim_plan,
    .image = ssim_image,
    .finish = ssim_finish,
    .release = ssim_release,
};
