/* evolution.c: how the token features evolve with depth (Refiner Fig. 2/4): token cosine to the
 * final block and to the previous block, and linear CKA with the unbiased HSIC estimator. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../io/trace.h"
#include "metric.h"

enum { OUT_COS_FINAL, OUT_COS_PREV, OUT_CKA, OUT_HSIC };

static as_status evo_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    if (!(lay->quantities & (1u << TRACE_Q_TOKENS)))
        return as_fail(err, AS_ERR_ARG, "evolution needs the block outputs, which this trace lacks: "
                       "record with --record attn,tokens (or --record all)");
    if (lay->tokens < 4)
        return as_fail(err, AS_ERR_ARG, "evolution: the unbiased HSIC needs at least 4 tokens, the "
                       "model has %d", lay->tokens);
    int L = lay->n_layers, d1[1] = {L}, d2[2] = {L, L};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_LAYER2};
    analysis_output_add(c, "cos_final", "mean over tokens of cos(x_l[t], x_final[t])", "", 1, d1, ax);
    analysis_output_add(c, "cos_prev", "mean over tokens of cos(x_l[t], x_(l-1)[t]); NaN when "
                        "block l-1 was not recorded", "", 1, d1, ax);
    analysis_output_add(c, "cka", "linear CKA of one image's tokens (examples) between two "
                        "blocks, unbiased HSIC", "", 2, d2, ax);
    analysis_output_add(c, "hsic", "unbiased HSIC of the linear token kernels (Song et al. 2012)",
                        "", 2, d2, ax);
    c->scratch_bytes = ((size_t)lay->tokens * lay->dim + (size_t)L * lay->tokens * lay->tokens +
                        (size_t)L * (lay->tokens + 1)) * sizeof(double);
    int last = lay->layers[L - 1];
    snprintf(c->params, sizeof c->params, "final=%d; cka_examples=tokens; hsic=unbiased", last);
    if (last != lay->cfg.depth - 1)
        analysis_note(c, "evolution: the final block (%d) was not recorded: cos_final compares with "
                      "block %d", lay->cfg.depth - 1, last);
    return AS_OK;
}

static double token_cosine(const analysis_layout *lay, const float *a, const float *b) {
    double s = 0;
    int n = 0;
    for (int t = 0; t < lay->tokens; t++) {
        double v = analysis_cosine(a + (size_t)t * lay->dim, b + (size_t)t * lay->dim, (size_t)lay->dim);
        if (!isnan(v)) {
            s += v;
            n++;
        }
    }
    return n ? s / n : NAN;
}

static void evo_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    int L = lay->n_layers, T = lay->tokens, D = lay->dim;
    size_t TT = (size_t)T * T;
    double *X = scratch, *K = X + (size_t)T * D, *rs = K + (size_t)L * TT, *tot = rs + (size_t)L * T;
    for (int li = 0; li < L; li++) {
        const float *x = im->tokens[li];
        for (size_t i = 0; i < (size_t)T * D; i++) X[i] = x[i];
        double *Kl = K + li * TT;
        cblas_dsyrk(CblasRowMajor, CblasUpper, CblasNoTrans, T, D, 1.0, X, D, 0.0, Kl, T);
        tot[li] = 0;
        for (int i = 0; i < T; i++) {
            Kl[(size_t)i * T + i] = 0; /* the unbiased estimator uses the kernel off its diagonal */
            for (int j = 0; j < i; j++) Kl[(size_t)i * T + j] = Kl[(size_t)j * T + i];
        }
        for (int i = 0; i < T; i++) {
            double s = 0;
            for (int j = 0; j < T; j++) s += Kl[(size_t)i * T + j];
            rs[(size_t)li * T + i] = s;
            tot[li] += s;
        }
    }
    double n = T, *hsic = vals + c->out[OUT_HSIC].offset, *cka = vals + c->out[OUT_CKA].offset;
    for (int a = 0; a < L; a++)
        for (int b = 0; b <= a; b++) {
            const double *Ka = K + a * TT, *Kb = K + b * TT, *ra = rs + (size_t)a * T, *rb = rs + (size_t)b * T;
            double tr = 0, rr = 0;
            for (size_t i = 0; i < TT; i++) tr += Ka[i] * Kb[i];
            for (int i = 0; i < T; i++) rr += ra[i] * rb[i];
            double h = (tr + tot[a] * tot[b] / ((n - 1) * (n - 2)) - 2.0 * rr / (n - 2)) / (n * (n - 3));
            hsic[a * L + b] = hsic[b * L + a] = h;
        }
    for (int a = 0; a < L; a++)
        for (int b = 0; b < L; b++) {
            double ha = hsic[a * L + a], hb = hsic[b * L + b];
            cka[a * L + b] = ha > 0 && hb > 0 ? hsic[a * L + b] / sqrt(ha * hb) : NAN;
        }
    double *cf = vals + c->out[OUT_COS_FINAL].offset, *cp = vals + c->out[OUT_COS_PREV].offset;
    for (int li = 0; li < L; li++) {
        cf[li] = token_cosine(lay, im->tokens[li], im->tokens[L - 1]);
        int prev = analysis_layer_pos(lay, lay->layers[li] - 1);
        cp[li] = prev < 0 ? NAN : token_cosine(lay, im->tokens[li], im->tokens[prev]);
    }
}

/* Minibatch CKA (Nguyen et al. 2021): each image is one minibatch of T token examples; the
 * HSICs are averaged over images before the ratio is taken. */
static as_status evo_finish(analysis_ctx *c, const double *mean, as_error *err) {
    const analysis_layout *lay = c->lay;
    int L = lay->n_layers, d1[1] = {L}, d2[2] = {L, L};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_LAYER2};
    double *mb = analysis_derived_add(c, "cka_minibatch", "sum over images of HSIC(l,m) / sqrt(sum "
                                      "HSIC(l,l) * sum HSIC(m,m)): minibatch CKA, one image per "
                                      "minibatch", "", 2, d2, ax);
    double *fin = analysis_derived_add(c, "cka_minibatch_final", "cka_minibatch of each block with "
                                       "the final block", "", 1, d1, ax);
    if (!mb || !fin) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    const double *h = mean + c->out[OUT_HSIC].offset;
    for (int a = 0; a < L; a++)
        for (int b = 0; b < L; b++) {
            double ha = h[a * L + a], hb = h[b * L + b];
            mb[a * L + b] = ha > 0 && hb > 0 ? h[a * L + b] / sqrt(ha * hb) : NAN;
        }
    const double *cf = mean + c->out[OUT_COS_FINAL].offset, *cp = mean + c->out[OUT_COS_PREV].offset;
    analysis_report_add(c, "  layer  cos to final  cos to previous  CKA to final (minibatch)\n");
    for (int li = 0; li < L; li++) {
        fin[li] = mb[li * L + L - 1];
        analysis_report_add(c, "  %5d  %12.4f  %15.4f  %12.4f\n", lay->layers[li], cf[li], cp[li], fin[li]);
    }
    return AS_OK;
}

const analysis_metric analysis_metric_evolution = {
    .name = "evolution",
    .version = 1,
    .summary = "feature evolution: token cosine to final/previous block, linear CKA (Refiner Fig. 2/4)",
    .definition = "cos_final[l] = mean_t cos(x_l[t], x_L[t]); cos_prev[l] = mean_t cos(x_l[t], "
                  "x_(l-1)[t]); with K = X X^T over one image's T tokens and its diagonal zeroed, "
                  "HSIC1(K,M) = [tr(KM) + 1'K1 1'M1/((T-1)(T-2)) - 2/(T-2) 1'KM1] / (T(T-3)); "
                  "cka = HSIC1(K,M)/sqrt(HSIC1(K,K) HSIC1(M,M)); cka_minibatch uses the HSICs "
                  "averaged over images",
    .needs = 1u << TRACE_Q_TOKENS,
    .plan = evo_plan,
    .image = evo_image,
    .finish = evo_finish,
};
