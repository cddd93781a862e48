/* rollout.c: attention rollout (Abnar & Zuidema 2020) through every layer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/trace.h"
#include "geometry.h"
#include "metric.h"

static const char *const fusion_names[] = {"mean", "max", "min"};

static as_status roll_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    if (lay->n_layers != lay->cfg.depth)
        return as_fail(err, AS_ERR_ARG, "rollout multiplies every layer's map, but the trace holds "
                       "%d of %d layers: record with --layers all", lay->n_layers, lay->cfg.depth);
    if (lay->q_rows != lay->tokens)
        return as_fail(err, AS_ERR_ARG, "rollout needs every query row, but the trace holds only the "
                       "prefix rows: record with --query-rows all");
    if (!(c->opt->discard >= 0 && c->opt->discard < 1))
        return as_fail(err, AS_ERR_ARG, "--discard %g: the discard ratio must be in [0, 1)", c->opt->discard);
    if (lay->n_heads < lay->cfg.num_heads)
        analysis_note(c, "rollout: fusing the %d recorded heads of %d", lay->n_heads, lay->cfg.num_heads);
    int dims[2] = {lay->n_layers, lay->patches};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_PATCH};
    const int cls = lay->prefix > lay->cfg.reg_tokens; /* a class token leads; registers alone do not */
    int o = analysis_output_add(c, "map", cls ? "rollout through layer l: the class "
                                "token's row over the patches" : "rollout through layer l: the "
                                "mean of all rows over the patches", "", 2, dims, ax);
    c->out[o].keep_images = 1;
    size_t TT = (size_t)lay->tokens * lay->tokens;
    c->scratch_bytes = ((size_t)lay->n_layers * TT + (3 + (size_t)lay->n_layers) * lay->tokens) *
                       sizeof(double) + TT * sizeof(int);
    snprintf(c->params, sizeof c->params, "head_fusion=%s; discard_ratio=%g; identity=added; "
             "rows=renormalised; source=%s", fusion_names[c->opt->fusion], c->opt->discard,
             cls ? "prefix token 0" : "mean of all tokens");
    return AS_OK;
}

/* (value, index) order: a strict total order, so the discarded set is unique even with ties. */
static int before(const double *F, int a, int b) { return F[a] < F[b] || (F[a] == F[b] && a < b); }

/* Moves the m smallest entries of idx[0..n) (by F) into idx[0..m). */
static void select_smallest(const double *F, int *idx, int n, int m) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int pivot = idx[lo + (hi - lo) / 2], i = lo, j = hi;
        while (i <= j) {
            while (before(F, idx[i], pivot)) i++;
            while (before(F, pivot, idx[j])) j--;
            if (i <= j) {
                int t = idx[i];
                idx[i++] = idx[j];
                idx[j--] = t;
            }
        }
        if (m - 1 <= j) hi = j;
        else if (m - 1 >= i) lo = i;
        else break;
    }
}

void analysis_rollout_layers(double *a, const float *const *attn, int L, int H, int T,
                             analysis_fusion fusion, double discard, int *idx) {
    size_t TT = (size_t)T * T;
    int m = (int)floor(discard * (double)TT);
    /* layers are independent (the viewer's new image: 12 T x T fusions); inside the analysis's
     * own parallel region this runs on the calling thread (no nesting) */
#pragma omp parallel for schedule(static) if (L > 1 && m == 0)
    for (int li = 0; li < L; li++) {
        double *F = a + li * TT;
        const float *A = attn[li];
        /* head by head over contiguous maps (vectorised); per element the same order as
         * f = A_0 + A_1 + ... , so the result is unchanged */
        for (size_t e = 0; e < TT; e++) F[e] = A[e];
        for (int hi = 1; hi < H; hi++) {
            const float *B = A + hi * TT;
            if (fusion == ANALYSIS_FUSE_MEAN)
                for (size_t e = 0; e < TT; e++) F[e] += B[e];
            else if (fusion == ANALYSIS_FUSE_MAX)
                for (size_t e = 0; e < TT; e++) F[e] = fmax(F[e], B[e]);
            else
                for (size_t e = 0; e < TT; e++) F[e] = fmin(F[e], B[e]);
        }
        if (fusion == ANALYSIS_FUSE_MEAN)
            for (size_t e = 0; e < TT; e++) F[e] /= H;
        if (m > 0) { /* vit-explain: choose the m smallest, then spare [0,0] if chosen (m - 1 zeroed) */
            for (size_t e = 0; e < TT; e++) idx[e] = (int)e;
            select_smallest(F, idx, (int)TT, m);
            for (int k = 0; k < m; k++)
                if (idx[k] != 0) F[idx[k]] = 0;
        }
        for (int i = 0; i < T; i++) {
            double *row = F + (size_t)i * T, s = 0;
            row[i] += 1.0;
            for (int j = 0; j < T; j++) s += row[j];
            for (int j = 0; j < T; j++) row[j] /= s;
        }
    }
}

void analysis_rollout_rows(double *out, const double *a, const double *e, int L, int T,
                           double *u, double *v) {
    /* row through layer l = e^T a_l a_(l-1) ... a_0: vector-matrix products, no T^3 */
    size_t TT = (size_t)T * T;
    for (int l = 0; l < L; l++) {
        memcpy(u, e, (size_t)T * sizeof *u);
        for (int k = l; k >= 0; k--) {
            const double *ak = a + k * TT;
            memset(v, 0, (size_t)T * sizeof *v);
            for (int i = 0; i < T; i++) {
                double ui = u[i];
                if (ui == 0) continue;
                analysis_axpy(v, ui, ak + (size_t)i * T, T);
            }
            memcpy(u, v, (size_t)T * sizeof *u);
        }
        memcpy(out + (size_t)l * T, u, (size_t)T * sizeof *u);
    }
}

static void roll_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    int T = lay->tokens, L = lay->n_layers;
    size_t TT = (size_t)T * T;
    double *a = scratch, *e = a + (size_t)L * TT, *u = e + T, *v = u + T, *rows = v + T;
    int *idx = (int *)(rows + (size_t)L * T);
    analysis_rollout_layers(a, (const float *const *)im->attn, L, lay->n_heads, T, c->opt->fusion,
                            c->opt->discard, idx);
    const int cls = lay->prefix > lay->cfg.reg_tokens; /* a class token leads the prefix */
    for (int i = 0; i < T; i++) e[i] = cls ? (i == 0) : 1.0 / T;
    analysis_rollout_rows(rows, a, e, L, T, u, v);
    double *out = vals + c->out[0].offset;
    for (int l = 0; l < L; l++)
        for (int j = 0; j < lay->patches; j++)
            out[(size_t)l * lay->patches + j] = rows[(size_t)l * T + lay->prefix + j];
}

static as_status roll_finish(analysis_ctx *c, const double *mean, as_error *err) {
    const analysis_layout *lay = c->lay;
    const double *last = mean + c->out[0].offset + (size_t)(lay->n_layers - 1) * lay->patches;
    int best = 0;
    double tot = 0;
    for (int j = 0; j < lay->patches; j++) {
        tot += last[j];
        if (last[j] > last[best]) best = j;
    }
    analysis_report_add(c, "  mean rollout through the last layer: %.3f of the mass on patches;\n"
                        "  peak at patch %d (row %d, column %d): %.4f\n", tot, best,
                        best / lay->grid, best % lay->grid, last[best]);
    (void)err;
    return AS_OK;
}

static const analysis_metric roll_staged; /* staged traces (below) */

const analysis_metric analysis_metric_rollout = {
    .name = "rollout",
    .version = 1,
    .summary = "attention rollout through each layer (Abnar & Zuidema), per-image maps kept",
    .definition = "F_l = fusion over recorded heads (mean/max/min) of A_l; the set S of the "
                  "floor(r T^2) smallest entries of F_l (ties by flat index) is chosen first, then "
                  "every entry of S except [0,0] is set to 0, so one entry fewer is zeroed when "
                  "[0,0] is in S (vit-explain's rule; Abnar & Zuidema discard nothing, r = 0); "
                  "a_l = F_l + I with each row divided by its sum; map[l] = e^T a_l ... a_0 over "
                  "the patch columns, e = first prefix token (or the mean of all tokens)",
    .needs = 1u << TRACE_Q_ATTN,
    .traces = ANALYSIS_TRACES_SINGLE_GRID | ANALYSIS_TRACES_STAGED,
    .staged = &roll_staged,
    .plan = roll_plan,
    .image = roll_image,
    .finish = roll_finish,
};

/* ---- staged traces (format 3): docs/analysis.md, "Staged traces" ---------------------------- */

/* The plan: for each layer position k > 0 whose grid differs from layer k-1's (a merge between
 * them), the cell of layer k holding each grid token of layer k-1 and the tokens per cell. */
struct analysis_sroll {
    const analysis_staged *S;
    analysis_fusion fusion;
    int *cell[VIT_MAX_DEPTH], *n[VIT_MAX_DEPTH];
    int tmax, tsum, kmax;
};

void analysis_sroll_free(analysis_sroll *R) {
    for (int li = 0; R && li < VIT_MAX_DEPTH; li++) {
        free(R->cell[li]);
        free(R->n[li]);
    }
    free(R);
}

as_status analysis_sroll_new(analysis_sroll **out, const analysis_staged *S, int depth, analysis_fusion fusion,
                             as_error *err) {
    *out = NULL;
    if (S->n_layers != depth)
        return as_fail(err, AS_ERR_ARG, "rollout multiplies every layer's map, but the trace holds "
                       "%d of %d layers: record with --layers all", S->n_layers, depth);
    for (int li = 0; li < S->n_layers; li++) {
        const analysis_lgeom *g = &S->l[li];
        if (!g->every_problem || (g->scope == VIT_SCOPE_GLOBAL && g->Tq != g->T))
            return as_fail(err, AS_ERR_ARG, "rollout needs every query row of every window, but layer "
                           "%d holds %s: record with --windows all --query-rows all", g->layer,
                           g->every_problem ? "only the prefix rows" : "a subset of its windows");
        if (g->signed_maps)
            return as_fail(err, AS_ERR_ARG, "rollout composes row-stochastic maps, but layer %d's are "
                           "signed (CaiT's talking heads mix the heads after the softmax): not defined "
                           "there; a CaiT without talking heads (\"talking_heads\": false) rolls out", g->layer);
        /* CaiT: the class token joins at its first class-attention block (prefix 0 -> 1) */
        const int joins = li > 0 && g->scope == VIT_SCOPE_CLASS && S->l[li - 1].prefix == 0 && g->prefix == 1;
        if (li > 0 && g->prefix != S->l[li - 1].prefix && !joins)
            return as_fail(err, AS_ERR_ARG, "rollout: layer %d has %d prefix tokens and layer %d %d: "
                           "a transfer between them is not defined yet", g->layer, g->prefix,
                           S->l[li - 1].layer, S->l[li - 1].prefix);
    }
    analysis_sroll *R = calloc(1, sizeof *R);
    if (!R) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    R->S = S;
    R->fusion = fusion;
    for (int li = 0; li < S->n_layers; li++) {
        const analysis_lgeom *g = &S->l[li];
        if (g->T > R->tmax) R->tmax = g->T;
        R->tsum += g->T;
        if (analysis_reduced(g) && g->Tk > R->kmax) R->kmax = g->Tk;
        if (li == 0 || (g->gh == S->l[li - 1].gh && g->gw == S->l[li - 1].gw && g->stride == S->l[li - 1].stride))
            continue;
        const analysis_lgeom *f = &S->l[li - 1];
        R->cell[li] = malloc((size_t)f->gh * (size_t)f->gw * sizeof(int));
        R->n[li] = malloc((size_t)g->gh * (size_t)g->gw * sizeof(int));
        if (!R->cell[li] || !R->n[li]) {
            analysis_sroll_free(R);
            return as_fail(err, AS_ERR_NOMEM, "out of memory");
        }
        analysis_cells(R->cell[li], R->n[li], f, g);
    }
    *out = R;
    return AS_OK;
}

/* scratch: every layer's row sums (tsum), u and v (tmax each), the reduced keys' z (kmax), and
 * the caller's start vector (tmax) */
size_t analysis_sroll_doubles(const analysis_sroll *R) { return (size_t)R->tsum + 3 * (size_t)R->tmax + (size_t)R->kmax; }
double *analysis_sroll_start(const analysis_sroll *R, double *scratch) {
    return scratch + R->tsum + 2 * (size_t)R->tmax + R->kmax;
}

/* The heads' fused entry (w, i, j) of layer g's maps A. */
static double sroll_fused(const analysis_lgeom *g, const float *A, analysis_fusion fusion, int w, int i, int j) {
    const size_t o = ((size_t)w * g->Tq + i) * g->Tk + j, per = (size_t)g->P * g->Tq * g->Tk;
    double f = A[o];
    for (int h = 1; h < g->H; h++) {
        double x = A[o + h * per];
        if (fusion == ANALYSIS_FUSE_MEAN) f += x;
        else if (fusion == ANALYSIS_FUSE_MAX) f = fmax(f, x);
        else f = fmin(f, x);
    }
    return fusion == ANALYSIS_FUSE_MEAN ? f / g->H : f;
}

/* v = u a, a = (F + I) / rowsum in grid space (pad keys dropped): one pass over the windows. A
 * spatial-reduction layer's F is its T x T' map spread back onto the tokens, F S with S (T' x T)
 * giving each reduced key's weight to the tokens it reduces in equal parts (1/R^2, or 1/#bin);
 * its rows keep their sums. z: T' doubles of scratch. */
static void sroll_apply(const analysis_lgeom *g, const float *A, analysis_fusion fusion,
                        const double *rowsum, const double *u, double *v, double *z) {
    memset(v, 0, (size_t)g->T * sizeof *v);
    if (g->scope == VIT_SCOPE_CLASS) /* a class-attention block passes the other tokens on: identity rows */
        for (int t = 1; t < g->T; t++) v[t] = u[t];
    if (analysis_reduced(g)) {
        memset(z, 0, (size_t)g->Tk * sizeof *z);
        for (int t = 0; t < g->T; t++) {
            if (u[t] == 0) continue;
            double cf = u[t] / rowsum[t];
            v[t] += cf;
            for (int j = 0; j < g->Tk; j++) z[j] += cf * sroll_fused(g, A, fusion, 0, t, j);
        }
        for (int j = 0; j < g->Tk; j++) {
            const int r = j / g->kgw, c = j % g->kgw, *kb = g->kb;
            const int y0 = kb[r], y1 = kb[g->kgh + r], x0 = kb[2 * g->kgh + c], x1 = kb[2 * g->kgh + g->kgw + c];
            const double share = z[j] / ((y1 - y0) * (x1 - x0));
            for (int y = y0; y < y1; y++)
                for (int x = x0; x < x1; x++) v[y * g->gw + x] += share;
        }
        return;
    }
    for (int w = 0; w < g->P; w++)
        for (int i = 0; i < g->Tq; i++) {
            int t = g->qtok[(size_t)w * g->Tq + i];
            if (t < 0 || u[t] == 0) continue;
            double cf = u[t] / rowsum[t];
            v[t] += cf;
            for (int j = 0; j < g->Tk; j++) {
                int k = g->ktok[(size_t)w * g->Tk + j];
                if (k >= 0) v[k] += cf * sroll_fused(g, A, fusion, w, i, j);
            }
        }
}

void analysis_sroll_rowsums(const analysis_sroll *R, const float *const *attn, double *scratch) {
    const analysis_staged *S = R->S;
    double *rowsum = scratch;
    for (int k = 0; k < S->n_layers; k++) {
        const analysis_lgeom *g = &S->l[k];
        for (int t = 0; t < g->T; t++) rowsum[t] = 1.0;
        for (int w = 0; w < g->P; w++)
            for (int i = 0; i < g->Tq; i++) {
                int t = g->qtok[(size_t)w * g->Tq + i];
                if (t < 0) continue;
                for (int j = 0; j < g->Tk; j++)
                    if (g->ktok[(size_t)w * g->Tk + j] >= 0) rowsum[t] += sroll_fused(g, attn[k], R->fusion, w, i, j);
            }
        rowsum += g->T;
    }
}

void analysis_sroll_row(const analysis_sroll *R, const float *const *attn, int l, const double *e, double *out,
                        double *scratch) {
    const analysis_staged *S = R->S;
    const double *rowsum[VIT_MAX_DEPTH];
    double *next = scratch;
    for (int k = 0; k < S->n_layers; k++) {
        rowsum[k] = next;
        next += S->l[k].T;
    }
    double *u = next, *v = u + R->tmax, *z = v + R->tmax;
    memcpy(u, e, (size_t)S->l[l].T * sizeof *u);
    for (int k = l; k >= 0; k--) {
        const analysis_lgeom *g = &S->l[k];
        sroll_apply(g, attn[k], R->fusion, rowsum[k], u, v, z);
        if (k > 0 && g->prefix != S->l[k - 1].prefix) { /* CaiT: below the class token's first
                                                          * block its share ends (a parameter) */
            const analysis_lgeom *f = &S->l[k - 1];
            for (int t = 0; t < f->T; t++) u[t] = v[g->prefix + t];
        } else if (k > 0 && R->cell[k]) { /* back across the merge: each cell to its children */
            const analysis_lgeom *f = &S->l[k - 1];
            for (int t = 0; t < f->prefix; t++) u[t] = v[t];
            for (int gi = 0; gi < f->gh * f->gw; gi++) {
                int cl = R->cell[k][gi];
                u[f->prefix + gi] = cl < 0 ? 0 : v[g->prefix + cl] / R->n[k][cl];
            }
        } else {
            memcpy(u, v, (size_t)g->T * sizeof *u);
        }
    }
    const analysis_lgeom *g0 = &S->l[0];
    memcpy(out, u + g0->prefix, (size_t)g0->gh * g0->gw * sizeof *out);
}

static as_status sroll_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    const analysis_staged *S = lay->staged;
    if (c->opt->discard != 0)
        return as_fail(err, AS_ERR_ARG, "--discard %g: on staged traces vit-explain's rule would rank "
                       "the structural zeros of window maps (keys outside the window) first: use "
                       "--discard 0", c->opt->discard);
    analysis_sroll *R;
    if (analysis_sroll_new(&R, S, lay->cfg.depth, c->opt->fusion, err) != AS_OK) return err->status;
    c->state = R;
    if (lay->n_heads > S->l[0].H) analysis_note(c, "rollout: each layer fuses its own recorded heads");
    int dims[2] = {lay->n_layers, lay->patches};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_PATCH};
    const int late = !lay->prefix && S->l[S->n_layers - 1].prefix; /* CaiT: the class token joins later */
    int o = analysis_output_add(c, "map", lay->prefix ? "rollout through layer l back to the first "
                                "grid: the first prefix token's row over the first layer's grid "
                                "tokens" : late ? "rollout through layer l back to the first grid: the "
                                "class token's row where layer l has it (class attention), else the mean "
                                "of layer l's rows, over the first layer's grid tokens" : "rollout through "
                                "layer l back to the first grid: the mean of layer l's rows over the first "
                                "layer's grid tokens", "", 2, dims, ax);
    c->out[o].keep_images = 1;
    c->scratch_bytes = analysis_sroll_doubles(R) * sizeof(double);
    snprintf(c->params, sizeof c->params, "head_fusion=%s; discard_ratio=0; identity=added; "
             "rows=renormalised; pad_keys=dropped; merge=children mean (U[c,t] = 1/#children of c); "
             "source=%s; grid=%dx%d (layer %d)", fusion_names[c->opt->fusion],
             lay->prefix ? "prefix token 0"
             : S->l[S->n_layers - 1].prefix ? "prefix token 0 where the layer has one, else the mean of all tokens"
                                            : "mean of all tokens", S->l[0].gh, S->l[0].gw, S->l[0].layer);
    return AS_OK;
}

static void sroll_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    const analysis_staged *S = lay->staged;
    const analysis_sroll *R = c->state;
    double *sc = scratch, *e = analysis_sroll_start(R, sc);
    analysis_sroll_rowsums(R, (const float *const *)im->attn, sc);
    double *out = vals + c->out[0].offset;
    for (int l = 0; l < S->n_layers; l++) {
        const analysis_lgeom *gl = &S->l[l];
        for (int t = 0; t < gl->T; t++) e[t] = gl->prefix ? (t == 0) : 1.0 / gl->T;
        analysis_sroll_row(R, (const float *const *)im->attn, l, e, out + (size_t)l * lay->patches, sc);
    }
}

static void sroll_release(analysis_ctx *c) {
    analysis_sroll_free(c->state);
    c->state = NULL;
}

static const analysis_metric roll_staged = {
    .name = "rollout",
    .version = 1,
    .summary = "attention rollout through windows and merges back to the first grid, per-image maps kept",
    .definition = "staged traces: per layer k, F_k = the fusion over the layer's recorded heads "
                  "(mean/max/min) of its map in grid space (window maps placed at their tokens, "
                  "pad keys and pad query rows dropped; no discarding); a_k = F_k + I with each "
                  "row divided by its sum; across a merge between layers k-1 and k the token "
                  "transfer U_k (T_k x T_(k-1)) has U_k[c,t] = 1/n_c for the n_c grid tokens t of "
                  "layer k-1 whose centres fall in cell c of layer k (a Swin merge: the 2x2 "
                  "children, fewer at a padded edge), so every merged token is the mean of its "
                  "children; map[l] = e^T a_l ... U a_k ... a_0 over the first layer's grid tokens, "
                  "computed from e down to layer 0 as a row vector (memory O(tokens)); e = the first "
                  "prefix token, or the mean of layer l's tokens; a spatial-reduction layer's F is "
                  "its T x T' map times S (T' x T), S[j,u] = 1/n_j for the n_j tokens u key j reduces "
                  "(its R x R block or pool bin); a strided-conv downsampling (PVT v2) transfers like a "
                  "merge, by the cells the finer tokens' centres fall in; a class-attention layer "
                  "(CaiT) has its class row and identity rows for the patches it passes on, and below "
                  "the first one the class token's share ends (it enters there as a parameter), so "
                  "the class row is composed with the self-attention rollout of the patches",
    .needs = 1u << TRACE_Q_ATTN,
    .traces = ANALYSIS_TRACES_STAGED,
    .plan = sroll_plan,
    .image = sroll_image,
    .finish = roll_finish,
    .release = sroll_release,
};
