/* evolution.c: how the token features evolve with depth (Refiner Fig. 2/4): token cosine to the
 * final block and to the previous block, and linear CKA with the unbiased HSIC estimator. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/trace.h"
#include "geometry.h"
#include "metric.h"

enum { OUT_COS_FINAL, OUT_COS_PREV, OUT_CKA, OUT_HSIC };
enum { HSIC_UNBIASED, HSIC_BIASED };

static const analysis_choice evo_choices[] = {
    {ANALYSIS_CH_CKA_HSIC, "cka-hsic", "hsic", {"unbiased", "biased"}, HSIC_UNBIASED,
     "unbiased: Song et al. 2012's HSIC1 (diagonals zeroed; Nguyen et al. 2021's minibatch CKA "
     "needs it); biased: tr(KHMH)/(n-1)^2, the centred HSIC of Kornblith et al. 2019 (their Eq. "
     "3, the CKA of their figures)"},
};

/* The image-example CKA (Kornblith et al. 2019, each image's whole block output as one example)
 * streams: a minibatch of m images' features is kept, its unbiased HSICs (Song et al. 2012)
 * are added up per layer pair, and the minibatch is dropped (Nguyen et al. 2021's minibatch
 * CKA). Memory: m x layers x T x D floats + layers x m^2 doubles, whatever the image count. */
typedef struct {
    int m, filled, batches;
    long dropped, planned; /* images left out of the last minibatch: counted, and foreseen at plan */
    size_t feat;        /* one image's block outputs of every layer: sum of T x D */
    size_t off[VIT_MAX_DEPTH + 1]; /* layer li's T x D start in them (staged widths differ) */
    float *x;           /* (m, feat) */
    double *gram;       /* (L, m, m) */
    double *rs, *tot;   /* (L, m) row sums, (L) totals */
    double *hsum;       /* (L, L) sum over minibatches of HSIC1 */
} cka_images;

/* HSIC of two symmetric n x n kernels from their row sums ra, rb and totals. Unbiased (HSIC1,
 * diagonals zeroed): [tr(KM) + 1'K1 1'M1 / ((n-1)(n-2)) - 2/(n-2) 1'KM1] / (n(n-3)); biased:
 * tr(KHMH) / (n-1)^2 = [tr(KM) - 2/n 1'KM1 + 1'K1 1'M1 / n^2] / (n-1)^2, H = I - 11'/n. */
static double hsic1(const double *Ka, const double *Kb, const double *ra, const double *rb,
                    double ta, double tb, int n, int biased) {
    double tr = 0, rr = 0, nn = n;
    for (size_t i = 0; i < (size_t)n * n; i++) tr += Ka[i] * Kb[i];
    for (int i = 0; i < n; i++) rr += ra[i] * rb[i];
    if (biased) return (tr - 2.0 * rr / nn + ta * tb / (nn * nn)) / ((nn - 1) * (nn - 1));
    return (tr + ta * tb / ((nn - 1) * (nn - 2)) - 2.0 * rr / (nn - 2)) / (nn * (nn - 3));
}

/* Zeroes K's diagonal (the unbiased estimator's kernel; biased keeps it) and fills its row
 * sums and total. */
static void kernel_prepare(double *K, int n, double *rs, double *tot, int biased) {
    *tot = 0;
    for (int i = 0; i < n && !biased; i++) K[(size_t)i * n + i] = 0;
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < n; j++) s += K[(size_t)i * n + j];
        rs[i] = s;
        *tot += s;
    }
}

static as_status cka_plan(analysis_ctx *c, as_error *err);

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
                        "blocks (HSIC: parameters)", "", 2, d2, ax);
    analysis_output_add(c, "hsic", "HSIC of the linear token kernels (unbiased: Song et al. 2012; "
                        "biased: Kornblith et al. 2019; parameters say which)", "", 2, d2, ax);
    c->scratch_bytes = ((size_t)lay->tokens * lay->dim + (size_t)L * lay->tokens * lay->tokens +
                        (size_t)L * (lay->tokens + 1)) * sizeof(double);
    if (cka_plan(c, err) != AS_OK) return err->status;
    int last = lay->layers[L - 1];
    snprintf(c->params, sizeof c->params, "final=%d; cka_examples=tokens,images; cka_batch=%d",
             last, ((cka_images *)c->state)->m);
    analysis_params_choices(c);
    if (last != lay->cfg.depth - 1)
        analysis_note(c, "evolution: the final block (%d) was not recorded: cos_final compares with "
                      "block %d", lay->cfg.depth - 1, last);
    return AS_OK;
}

/* The image-example CKA's state (c->state): the minibatch of m images' block outputs. */
static as_status cka_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    int L = lay->n_layers;
    int m = c->opt->cka_batch;
    long n_img = c->opt->max_images > 0 && c->opt->max_images < lay->n_images ? c->opt->max_images : lay->n_images;
    if (m < 4) return as_fail(err, AS_ERR_ARG, "--cka-batch %d: the unbiased HSIC needs minibatches of "
                              "at least 4 images", m);
    if (m > n_img) m = (int)n_img; /* one minibatch of every image: the exact estimator */
    cka_images *ck = calloc(1, sizeof *ck);
    if (!ck) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    c->state = ck;
    ck->m = m;
    for (int li = 0; li < L; li++) /* staged: each layer's own T x D */
        ck->off[li + 1] = ck->off[li] + (lay->staged ? lay->staged->l[li].tok_floats : (size_t)lay->tokens * lay->dim);
    ck->feat = ck->off[L];
    if (m >= 4) {
        ck->x = malloc((size_t)m * ck->feat * sizeof *ck->x);
        ck->gram = malloc((size_t)L * m * m * sizeof *ck->gram);
        ck->rs = malloc((size_t)L * (m + 1) * sizeof *ck->rs);
        ck->hsum = calloc((size_t)L * L, sizeof *ck->hsum);
        if (!ck->x || !ck->gram || !ck->rs || !ck->hsum)
            return as_fail(err, AS_ERR_NOMEM, "out of memory for the image-example CKA's minibatch "
                           "of %d images (%.0f MB): use a smaller --cka-batch", m,
                           (double)m * ck->feat * 4 / 1e6);
        ck->tot = ck->rs + (size_t)L * m;
        c->state_bytes = (size_t)m * ck->feat * sizeof *ck->x + (size_t)L * m * m * sizeof *ck->gram;
        ck->planned = n_img % m < 4 ? n_img % m : 0;
        if (ck->planned) /* said here, where notes still reach the terminal */
            analysis_note(c, "evolution: %ld image%s at the end (fewer than 4) %s left out of the "
                          "image-example CKA", ck->planned, ck->planned == 1 ? "" : "s",
                          ck->planned == 1 ? "is" : "are");
    } else {
        analysis_note(c, "evolution: %ld images are too few for the image-example CKA (needs 4)", n_img);
    }
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
    int biased = analysis_choice_of(c, ANALYSIS_CH_CKA_HSIC) == HSIC_BIASED;
    double *X = scratch, *K = X + (size_t)T * D, *rs = K + (size_t)L * TT, *tot = rs + (size_t)L * T;
    for (int li = 0; li < L; li++) {
        const float *x = im->tokens[li];
        for (size_t i = 0; i < (size_t)T * D; i++) X[i] = x[i];
        double *Kl = K + li * TT;
        cblas_dsyrk(CblasRowMajor, CblasUpper, CblasNoTrans, T, D, 1.0, X, D, 0.0, Kl, T);
        for (int i = 0; i < T; i++)
            for (int j = 0; j < i; j++) Kl[(size_t)i * T + j] = Kl[(size_t)j * T + i];
        kernel_prepare(Kl, T, rs + (size_t)li * T, &tot[li], biased);
    }
    double *hsic = vals + c->out[OUT_HSIC].offset, *cka = vals + c->out[OUT_CKA].offset;
    for (int a = 0; a < L; a++)
        for (int b = 0; b <= a; b++)
            hsic[a * L + b] = hsic[b * L + a] = hsic1(K + a * TT, K + b * TT, rs + (size_t)a * T,
                                                      rs + (size_t)b * T, tot[a], tot[b], T, biased);
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

/* One minibatch of the image-example CKA: Gram matrices of the images' whole block outputs
 * (float64 sums in a fixed order), their unbiased HSICs added per layer pair. */
static void cka_flush(analysis_ctx *c) {
    cka_images *ck = c->state;
    int L = c->lay->n_layers, n = ck->filled, biased = analysis_choice_of(c, ANALYSIS_CH_CKA_HSIC) == HSIC_BIASED;
    if (n < 4) {
        ck->dropped += n;
        ck->filled = 0;
        return;
    }
    for (int li = 0; li < L; li++) {
        double *G = ck->gram + (size_t)li * n * n;
        for (int a = 0; a < n; a++)
            for (int b = 0; b <= a; b++) {
                const float *xa = ck->x + (size_t)a * ck->feat + ck->off[li], *xb = ck->x + (size_t)b * ck->feat + ck->off[li];
                double s = 0;
                for (size_t k = 0; k < ck->off[li + 1] - ck->off[li]; k++) s += (double)xa[k] * xb[k];
                G[(size_t)a * n + b] = G[(size_t)b * n + a] = s;
            }
        kernel_prepare(G, n, ck->rs + (size_t)li * n, &ck->tot[li], biased);
    }
    for (int a = 0; a < L; a++)
        for (int b = 0; b < L; b++)
            ck->hsum[a * L + b] += hsic1(ck->gram + (size_t)a * n * n, ck->gram + (size_t)b * n * n,
                                         ck->rs + (size_t)a * n, ck->rs + (size_t)b * n, ck->tot[a],
                                         ck->tot[b], n, biased);
    ck->batches++;
    ck->filled = 0;
}

static void evo_accumulate(analysis_ctx *c, const analysis_image *im) {
    cka_images *ck = c->state;
    if (!ck->x) return;
    for (int li = 0; li < c->lay->n_layers; li++)
        memcpy(ck->x + (size_t)ck->filled * ck->feat + ck->off[li], im->tokens[li],
               (ck->off[li + 1] - ck->off[li]) * sizeof(float));
    if (++ck->filled == ck->m) cka_flush(c);
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
    cka_images *ck = c->state;
    double *ci = NULL, *cif = NULL;
    if (ck->x) {
        cka_flush(c);
        if (ck->dropped != ck->planned) /* fewer images than planned (an interrupted trace) */
            analysis_note(c, "evolution: %ld image%s at the end (fewer than 4) %s left out of the "
                          "image-example CKA", ck->dropped, ck->dropped == 1 ? "" : "s",
                          ck->dropped == 1 ? "is" : "are");
        ci = analysis_derived_add(c, "cka_images", "linear CKA with images as the examples "
                                  "(Kornblith et al.): each image's block output flattened (T x D), "
                                  "HSIC summed over minibatches of cka_batch images", "",
                                  2, d2, ax);
        cif = analysis_derived_add(c, "cka_images_final", "cka_images of each block with the final "
                                   "block (Refiner Fig. 2/4)", "", 1, d1, ax);
        if (!ci || !cif) return as_fail(err, AS_ERR_NOMEM, "out of memory");
        for (int a = 0; a < L; a++)
            for (int b = 0; b < L; b++) {
                double ha = ck->hsum[a * L + a], hb = ck->hsum[b * L + b];
                ci[a * L + b] = ck->batches && ha > 0 && hb > 0 ? ck->hsum[a * L + b] / sqrt(ha * hb) : NAN;
            }
        for (int li = 0; li < L; li++) cif[li] = ci[li * L + L - 1];
    }
    const double *cf = mean + c->out[OUT_COS_FINAL].offset, *cp = mean + c->out[OUT_COS_PREV].offset;
    analysis_report_add(c, "  layer  cos to final  cos to previous  CKA to final: tokens (minibatch)  images\n");
    for (int li = 0; li < L; li++) {
        fin[li] = mb[li * L + L - 1];
        analysis_report_add(c, "  %5d  %12.4f  %15.4f  %27.4f  %6.4f\n", lay->layers[li], cf[li],
                            cp[li], fin[li], cif ? cif[li] : NAN);
    }
    return AS_OK;
}

static void evo_release(analysis_ctx *c) {
    cka_images *ck = c->state;
    if (ck) {
        free(ck->x);
        free(ck->gram);
        free(ck->rs);
        free(ck->hsum);
    }
    free(ck);
    c->state = NULL;
}

static const analysis_metric evo_staged; /* staged traces (below) */

const analysis_metric analysis_metric_evolution = {
    .name = "evolution",
    .version = 2,
    .summary = "feature evolution: token cosine to final/previous block, linear CKA (Refiner Fig. 2/4)",
    .definition = "cos_final[l] = mean_t cos(x_l[t], x_L[t]); cos_prev[l] = mean_t cos(x_l[t], "
                  "x_(l-1)[t]); with K = X X^T over one image's T tokens and its diagonal zeroed, "
                  "HSIC1(K,M) = [tr(KM) + 1'K1 1'M1/((T-1)(T-2)) - 2/(T-2) 1'KM1] / (T(T-3)) "
                  "(hsic=unbiased), or with hsic=biased and the diagonal kept, HSIC1(K,M) = "
                  "tr(KHMH)/(T-1)^2, H = I - 11'/T; "
                  "cka = HSIC1(K,M)/sqrt(HSIC1(K,K) HSIC1(M,M)); cka_minibatch uses the HSICs "
                  "averaged over images; cka_images: images as the examples (K = X X^T over "
                  "cka_batch images, each image's T x D output one vector), HSIC1 summed over "
                  "consecutive minibatches (the last one kept if it has >= 4 images), then the "
                  "ratio",
    .needs = 1u << TRACE_Q_TOKENS,
    .traces = ANALYSIS_TRACES_SINGLE_GRID | ANALYSIS_TRACES_STAGED,
    .staged = &evo_staged,
    .plan = evo_plan,
    .image = evo_image,
    .finish = evo_finish,
    .accumulate = evo_accumulate,
    .release = evo_release,
    .choices = evo_choices,
    .n_choices = sizeof evo_choices / sizeof evo_choices[0],
};

/* ---- staged traces (format 3): docs/analysis.md, "Staged traces" ---------------------------- */

/* The token examples of every layer are the cells of the coarsest recorded grid: cell[li] holds
 * each grid token's cell (analysis_cells); the image-example CKA's state comes first, so
 * evo_accumulate, evo_finish and evo_release take this state as theirs. */
typedef struct {
    cka_images ck;              /* first: release() frees it as evo_release does */
    int *cell[VIT_MAX_DEPTH], *n[VIT_MAX_DEPTH];
    int tc, dmax;
} sevo_state;

static as_status sevo_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    const analysis_staged *S = lay->staged;
    const analysis_lgeom *gc = &S->l[S->coarse];
    int L = lay->n_layers, tc = gc->gh * gc->gw;
    if (!(lay->quantities & (1u << TRACE_Q_TOKENS)))
        return as_fail(err, AS_ERR_ARG, "evolution needs the block outputs, which this trace lacks: "
                       "record with --record attn,tokens (or --record all)");
    if (tc < 4)
        return as_fail(err, AS_ERR_ARG, "evolution: the unbiased HSIC needs at least 4 token examples, "
                       "and the coarsest recorded grid (layer %d) has %d cells", gc->layer, tc);
    if (cka_plan(c, err) != AS_OK) {
        evo_release(c);
        return err->status;
    }
    /* the minibatch state becomes the head of a larger one: move it */
    sevo_state *st = calloc(1, sizeof *st);
    if (!st) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    st->ck = *(cka_images *)c->state;
    free(c->state);
    c->state = st;
    st->tc = tc;
    for (int li = 0; li < L; li++) {
        const analysis_lgeom *g = &S->l[li];
        st->cell[li] = malloc((size_t)g->gh * (size_t)g->gw * sizeof(int));
        st->n[li] = malloc((size_t)tc * sizeof(int));
        if (!st->cell[li] || !st->n[li]) return as_fail(err, AS_ERR_NOMEM, "out of memory");
        analysis_cells(st->cell[li], st->n[li], g, gc);
        if (g->D > st->dmax) st->dmax = g->D;
    }
    int d1[1] = {L}, d2[2] = {L, L};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_LAYER2};
    analysis_output_add(c, "cos_final", "mean over tokens of cos(x_l[t], x_final[t]); NaN where the "
                        "layer's grid or width differs from the final recorded layer's", "", 1, d1, ax);
    analysis_output_add(c, "cos_prev", "mean over tokens of cos(x_l[t], x_(l-1)[t]); NaN when block "
                        "l-1 was not recorded or its grid or width differs (a merge between)", "", 1, d1, ax);
    analysis_output_add(c, "cka", "linear CKA between two blocks, the examples being the cells of "
                        "the coarsest recorded grid (each block's tokens averaged per cell)", "", 2, d2, ax);
    analysis_output_add(c, "hsic", "HSIC of the linear kernels over those cells (parameters say "
                        "which estimator)", "", 2, d2, ax);
    c->scratch_bytes = ((size_t)tc * st->dmax + (size_t)L * tc * tc + (size_t)L * (tc + 1)) * sizeof(double);
    int last = lay->layers[L - 1];
    snprintf(c->params, sizeof c->params, "final=%d; cka_examples=cells of the %dx%d grid (layer %d; "
             "tokens averaged per cell),images; cka_batch=%d", last, gc->gh, gc->gw, gc->layer, st->ck.m);
    analysis_params_choices(c);
    if (last != lay->cfg.depth - 1)
        analysis_note(c, "evolution: the final block (%d) was not recorded: cos_final compares with "
                      "block %d", lay->cfg.depth - 1, last);
    return AS_OK;
}

/* mean_t cos(a[t], b[t]) over T tokens of width D (zero vectors left out) */
static double sevo_cosine(const float *a, const float *b, int T, int D) {
    double s = 0;
    int n = 0;
    for (int t = 0; t < T; t++) {
        double v = analysis_cosine(a + (size_t)t * D, b + (size_t)t * D, (size_t)D);
        if (!isnan(v)) s += v, n++;
    }
    return n ? s / n : NAN;
}

static int sevo_alike(const analysis_lgeom *a, const analysis_lgeom *b) {
    return a->T == b->T && a->D == b->D && a->gh == b->gh && a->gw == b->gw;
}

static void sevo_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    const analysis_staged *S = lay->staged;
    const sevo_state *st = c->state;
    int L = lay->n_layers, tc = st->tc;
    size_t TT = (size_t)tc * tc;
    int biased = analysis_choice_of(c, ANALYSIS_CH_CKA_HSIC) == HSIC_BIASED;
    double *X = scratch, *K = X + (size_t)tc * st->dmax, *rs = K + (size_t)L * TT, *tot = rs + (size_t)L * tc;
    for (int li = 0; li < L; li++) {
        const analysis_lgeom *g = &S->l[li];
        const float *x = im->tokens[li];
        int D = g->D;
        memset(X, 0, (size_t)tc * D * sizeof *X);
        for (int gi = 0; gi < g->gh * g->gw; gi++) { /* U: the mean of each cell's tokens */
            int cl = st->cell[li][gi];
            if (cl < 0) continue;
            for (int d = 0; d < D; d++) X[(size_t)cl * D + d] += x[(size_t)(g->prefix + gi) * D + d] / st->n[li][cl];
        }
        double *Kl = K + li * TT;
        cblas_dsyrk(CblasRowMajor, CblasUpper, CblasNoTrans, tc, D, 1.0, X, D, 0.0, Kl, tc);
        for (int i = 0; i < tc; i++)
            for (int j = 0; j < i; j++) Kl[(size_t)i * tc + j] = Kl[(size_t)j * tc + i];
        kernel_prepare(Kl, tc, rs + (size_t)li * tc, &tot[li], biased);
    }
    double *hsic = vals + c->out[OUT_HSIC].offset, *cka = vals + c->out[OUT_CKA].offset;
    for (int a = 0; a < L; a++)
        for (int b = 0; b <= a; b++)
            hsic[a * L + b] = hsic[b * L + a] = hsic1(K + a * TT, K + b * TT, rs + (size_t)a * tc,
                                                      rs + (size_t)b * tc, tot[a], tot[b], tc, biased);
    for (int a = 0; a < L; a++)
        for (int b = 0; b < L; b++) {
            double ha = hsic[a * L + a], hb = hsic[b * L + b];
            cka[a * L + b] = ha > 0 && hb > 0 ? hsic[a * L + b] / sqrt(ha * hb) : NAN;
        }
    double *cf = vals + c->out[OUT_COS_FINAL].offset, *cp = vals + c->out[OUT_COS_PREV].offset;
    for (int li = 0; li < L; li++) {
        const analysis_lgeom *g = &S->l[li], *gf = &S->l[L - 1];
        cf[li] = sevo_alike(g, gf) ? sevo_cosine(im->tokens[li], im->tokens[L - 1], g->T, g->D) : NAN;
        int prev = analysis_layer_pos(lay, lay->layers[li] - 1);
        cp[li] = prev >= 0 && sevo_alike(g, &S->l[prev]) ? sevo_cosine(im->tokens[li], im->tokens[prev], g->T, g->D) : NAN;
    }
}

static void sevo_release(analysis_ctx *c) {
    sevo_state *st = c->state;
    for (int li = 0; st && li < VIT_MAX_DEPTH; li++) {
        free(st->cell[li]);
        free(st->n[li]);
    }
    evo_release(c); /* st is its cka_images (the first member) */
}

static const analysis_metric evo_staged = {
    .name = "evolution",
    .version = 2,
    .summary = "feature evolution across stages: token cosine where widths agree, CKA on pooled cells and images",
    .definition = "staged traces: cos_final[l] and cos_prev[l] as on single-grid traces where the "
                  "two blocks have the same grid and width, else NaN (a merge between them); cka "
                  "and hsic: the token examples are the cells of the coarsest recorded grid, each "
                  "block's output averaged over the grid tokens whose centres fall in a cell "
                  "(the merges' U; prefix tokens dropped), so blocks of any grid and width are "
                  "compared (linear CKA compares the cells' Gram matrices); the HSIC estimator, "
                  "cka_minibatch and cka_images (each image's whole T_l x D_l output one vector) "
                  "as on single-grid traces",
    .needs = 1u << TRACE_Q_TOKENS,
    .traces = ANALYSIS_TRACES_STAGED,
    .plan = sevo_plan,
    .image = sevo_image,
    .finish = evo_finish,
    .accumulate = evo_accumulate,
    .release = sevo_release,
    .choices = evo_choices,
    .n_choices = sizeof evo_choices / sizeof evo_choices[0],
};
