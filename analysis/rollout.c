/* rollout.c: attention rollout (Abnar & Zuidema 2020) through every layer. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../io/trace.h"
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
    .traces = ANALYSIS_TRACES_SINGLE_GRID,
    .plan = roll_plan,
    .image = roll_image,
    .finish = roll_finish,
};
