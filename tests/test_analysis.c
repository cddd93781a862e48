/* test_analysis.c: the metrics of analysis/ on hand-computed cases, against the independent
 * numpy implementation (tools/analysis_ref.py wrote tests/fixtures/analysis/), and the run's
 * behaviour: thread independence, results into the trace or --out, errors, interruption. */
#define _POSIX_C_SOURCE 200809L
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../analysis/analysis.h"
#include "../analysis/metric.h"
#include "../io/trace.h"
#include "check.h"

static const char *fixtures(void) { return getenv("FIXTURES") ? getenv("FIXTURES") : "tests/fixtures"; }

/* ---- hand-computed cases --------------------------------------------------------------------- */

static analysis_layout make_layout(int grid, int prefix, int L, int H, int D) {
    analysis_layout lay;
    memset(&lay, 0, sizeof lay);
    lay.cfg.depth = L;
    lay.cfg.num_heads = H;
    lay.cfg.embed_dim = D;
    lay.cfg.patch_size = 8;
    lay.cfg.img_size = grid * 8;
    lay.n_layers = L;
    lay.n_heads = H;
    for (int i = 0; i < L; i++) lay.layers[i] = i;
    for (int i = 0; i < H; i++) lay.heads[i] = i;
    lay.prefix = prefix;
    lay.grid = grid;
    lay.patches = grid * grid;
    lay.tokens = lay.q_rows = prefix + grid * grid;
    lay.patch_px = 8;
    lay.dim = D;
    lay.quantities = (1u << TRACE_Q_ATTN) | (1u << TRACE_Q_Q) | (1u << TRACE_Q_K) | (1u << TRACE_Q_TOKENS);
    for (int i = 0; i < L; i++) lay.qk_width[i] = D / H;
    lay.n_images = 1;
    return lay;
}

typedef struct {
    analysis_ctx c;
    double *vals;
    void *scratch;
} one_run;

static int run_one(one_run *r, const analysis_metric *m, const analysis_layout *lay,
                   const analysis_opts *o, const analysis_image *im) {
    memset(r, 0, sizeof *r);
    r->c.metric = m;
    r->c.lay = lay;
    r->c.opt = o;
    as_error err = {0};
    if (m->plan(&r->c, &err) != AS_OK) {
        CHECK(0, "%s plan: %s", m->name, err.msg);
        return 0;
    }
    r->vals = malloc(r->c.n_vals * sizeof *r->vals);
    r->scratch = malloc(r->c.scratch_bytes + 1);
    m->image(&r->c, im, r->vals, r->scratch);
    return 1;
}

static const double *out_vals(const one_run *r, const char *name) {
    for (int i = 0; i < r->c.n_out; i++)
        if (strcmp(r->c.out[i].name, name) == 0) return r->vals + r->c.out[i].offset;
    CHECK(0, "no output %s", name);
    static double nan_buf[4096];
    for (int i = 0; i < 4096; i++) nan_buf[i] = NAN;
    return nan_buf;
}

static void one_free(one_run *r) {
    if (r->c.metric && r->c.metric->release) r->c.metric->release(&r->c);
    free(r->vals);
    free(r->scratch);
}

#define NEAR(got, want, tol, what) \
    CHECK(fabs((got) - (want)) <= (tol), "%s: got %.12g want %.12g", what, (double)(got), (double)(want))

/* Maps for L layers x H heads: fill(kind) with 0 = identity, 1 = uniform, 2 = all to patch 0. */
static float *maps(const analysis_layout *lay, const int *kinds) {
    int T = lay->tokens;
    float *a = calloc((size_t)lay->n_layers * lay->n_heads * T * T, sizeof *a);
    for (int l = 0; l < lay->n_layers; l++)
        for (int h = 0; h < lay->n_heads; h++) {
            float *A = a + ((size_t)l * lay->n_heads + h) * T * T;
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++)
                    A[i * T + j] = kinds[l] == 0 ? (i == j) : kinds[l] == 1 ? 1.0f / T : (j == lay->prefix);
        }
    return a;
}

static void image_of(analysis_image *im, const analysis_layout *lay, const float *a) {
    memset(im, 0, sizeof *im);
    for (int l = 0; l < lay->n_layers; l++) im->attn[l] = a + (size_t)l * lay->n_heads * lay->tokens * lay->tokens;
}

static void test_hand_maps(void) {
    analysis_opts o;
    analysis_opts_default(&o);
    analysis_layout lay = make_layout(4, 1, 3, 2, 8);
    int kinds[3] = {0, 1, 2};
    float *a = maps(&lay, kinds);
    analysis_image im;
    image_of(&im, &lay, a);
    const int T = lay.tokens, L = 3, H = 2;
    one_run r;

    /* ALS: one-hot self-attention gives 1; uniform gives the mean neighbourhood size / T
     * (4x4 grid, R=3: 4 corners of 4, 8 edges of 6, 4 inner of 9 = 100 / 16) */
    if (run_one(&r, &analysis_metric_als, &lay, &o, &im)) {
        const double *s = out_vals(&r, "score");
        NEAR(s[0 * H + 0], 1.0, 1e-12, "ALS one-hot");
        NEAR(s[1 * H + 1], 100.0 / 16 / T, 1e-7, "ALS uniform R=3");
        /* all attention on patch 0: it is a neighbour of the queries at (0..1, 0..1) */
        NEAR(s[2 * H + 0], 4.0 / 16, 1e-12, "ALS to patch 0");
        one_free(&r);
    }
    o.als_window = 1;
    if (run_one(&r, &analysis_metric_als, &lay, &o, &im)) {
        NEAR(out_vals(&r, "score")[1 * H], 1.0 / T, 1e-7, "ALS uniform R=1");
        one_free(&r);
    }
    o.als_window = 2;
    as_error err = {0};
    memset(&r, 0, sizeof r);
    r.c.metric = &analysis_metric_als;
    r.c.lay = &lay;
    r.c.opt = &o;
    CHECK(analysis_metric_als.plan(&r.c, &err) == AS_ERR_ARG && strstr(err.msg, "odd"), "even window: %s", err.msg);
    analysis_opts_default(&o);

    /* similarity: a layer with itself is 1 under every definition; identity vs uniform is
     * 1/sqrt(T) for rows, columns and whole maps */
    if (run_one(&r, &analysis_metric_similarity, &lay, &o, &im)) {
        const double *ph = out_vals(&r, "per_head"), *adj = out_vals(&r, "adjacent");
        for (int d = 0; d < 3; d++)
            for (int l = 0; l < L; l++) NEAR(ph[((d * H + 1) * L + l) * L + l], 1.0, 1e-12, "self similarity");
        for (int d = 0; d < 3; d++) {
            NEAR(ph[((d * H + 0) * L + 0) * L + 1], 1.0 / sqrt(T), 1e-7, "identity vs uniform");
            NEAR(adj[d * L + 1], 1.0 / sqrt(T), 1e-7, "adjacent curve");
        }
        CHECK(isnan(adj[0]), "layer 0 has no previous layer: %g", adj[0]);
        one_free(&r);
    }

    /* entropy: one-hot 0, uniform log T (1 when normalised) */
    if (run_one(&r, &analysis_metric_entropy, &lay, &o, &im)) {
        const double *e = out_vals(&r, "entropy");
        NEAR(e[0], 0.0, 1e-12, "entropy one-hot");
        NEAR(e[1 * H], log((double)T), 1e-6, "entropy uniform");
        one_free(&r);
    }
    o.entropy_normalize = 1;
    if (run_one(&r, &analysis_metric_entropy, &lay, &o, &im)) {
        NEAR(out_vals(&r, "entropy")[1 * H], 1.0, 1e-6, "normalised entropy uniform");
        one_free(&r);
    }
    analysis_opts_default(&o);

    /* distance (centre): self-attention 0; everything on patch 0 = mean distance of the grid to it */
    as_error cerr = {0};
    CHECK(analysis_choice_set(&o, "distance", "centre", &cerr) == 1, "--distance centre");
    if (run_one(&r, &analysis_metric_distance, &lay, &o, &im)) {
        const double *d = out_vals(&r, "distance");
        double want = 0;
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 4; x++) want += 8.0 * hypot(y, x);
        NEAR(d[0], 0.0, 1e-12, "distance self");
        NEAR(d[2 * H + 1], want / 16, 1e-9, "distance to patch 0");
        /* uniform with the prefix key dropped vs renormalised: the renormalised is T/P larger */
        double drop = d[1 * H];
        one_free(&r);
        o.distance_renorm = 1;
        if (run_one(&r, &analysis_metric_distance, &lay, &o, &im)) {
            NEAR(out_vals(&r, "distance")[1 * H], drop * T / 16.0, 1e-6, "renormalised distance");
            one_free(&r);
        }
        o.distance_renorm = 0;
    }
    analysis_opts_default(&o);

    /* distance (pixel, ViT): self-attention is the mean distance between two pixels of one
     * 8 px patch, counted here over all 64 x 64 pixel pairs */
    if (run_one(&r, &analysis_metric_distance, &lay, &o, &im)) {
        double self = 0, to0 = 0;
        for (int u = 0; u < 64; u++)
            for (int v = 0; v < 64; v++) self += hypot(u / 8 - v / 8, u % 8 - v % 8);
        self /= 64.0 * 64.0;
        for (int q = 0; q < 16; q++) /* every patch to patch 0, pixel by pixel */
            for (int u = 0; u < 64; u++)
                for (int v = 0; v < 64; v++)
                    to0 += hypot((q / 4) * 8 + u / 8 - v / 8, (q % 4) * 8 + u % 8 - v % 8) / (64.0 * 64.0 * 16);
        NEAR(out_vals(&r, "distance")[0], self, 1e-9, "pixel distance self (8 px patch)");
        NEAR(out_vals(&r, "distance")[2 * H + 1], to0, 1e-9, "pixel distance to patch 0");
        CHECK(self > 4.0 && self < 4.3, "an 8 px patch's pixels are %.3f px apart on average", self);
        one_free(&r);
    }
    /* a 16 px patch attending to itself: about 8.3 px under ViT's definition (0 between centres) */
    analysis_layout l16 = make_layout(1, 0, 1, 1, 8);
    l16.patch_px = l16.cfg.patch_size = 16;
    float one = 1.0f;
    analysis_image im16;
    memset(&im16, 0, sizeof im16);
    im16.attn[0] = &one;
    if (run_one(&r, &analysis_metric_distance, &l16, &o, &im16)) {
        double v = out_vals(&r, "distance")[0];
        CHECK(v > 8.2 && v < 8.4, "16 px patch to itself: %.4f px, want about 8.3", v);
        one_free(&r);
    }

    /* diag (attn): identity is symmetric with diagonality T (T-1); uniform 0 and 0 */
    analysis_choice_set(&o, "diag-map", "attn", &cerr);
    if (run_one(&r, &analysis_metric_diag, &lay, &o, &im)) {
        NEAR(out_vals(&r, "symmetry")[0], 0.0, 1e-12, "identity symmetry");
        NEAR(out_vals(&r, "diagonality")[0], (double)T * (T - 1), 1e-9, "identity diagonality");
        NEAR(out_vals(&r, "diagonality")[1 * H], 0.0, 1e-5, "uniform diagonality");
        /* all to patch 0: |A_i,p - A_p,i| = 1 for every i != p, twice */
        NEAR(out_vals(&r, "symmetry")[2 * H], 2.0 * (T - 1), 1e-9, "column map symmetry");
        one_free(&r);
    }
    analysis_opts_default(&o);
    /* diag (scores, LaViT's): only less-attention layers, on their pre-softmax scores; the
     * uniform map (layer 1) made a less layer whose scores are 2 I: diagonality 2 T (T-1), where
     * its softmax map would give a different value */
    memset(&r, 0, sizeof r);
    r.c.metric = &analysis_metric_diag;
    r.c.lay = &lay;
    r.c.opt = &o;
    CHECK(analysis_metric_diag.plan(&r.c, &cerr) == AS_ERR_ARG && strstr(cerr.msg, "--diag-map attn"),
          "diag on a model without less-attention layers: %s", cerr.msg);
    analysis_layout lless = lay;
    lless.cfg.attn[1].kind = VIT_ATTN_LESS;
    CHECK(!(memset(&r, 0, sizeof r), r.c.metric = &analysis_metric_diag, r.c.lay = &lless, r.c.opt = &o,
            analysis_metric_diag.plan(&r.c, &cerr) == AS_OK) && strstr(cerr.msg, "--record attn,scores"),
          "diag without scores: %s", cerr.msg);
    lless.quantities |= 1u << TRACE_Q_SCORES;
    float *sc = calloc((size_t)L * H * T * T, sizeof *sc);
    for (int i = 0; i < L * H * T; i++) sc[(size_t)i * T + i % T] = 2.0f; /* 2 I in every map */
    for (int l = 0; l < L; l++) im.scores[l] = sc + (size_t)l * H * T * T;
    if (run_one(&r, &analysis_metric_diag, &lless, &o, &im)) {
        NEAR(out_vals(&r, "diagonality")[1 * H], 2.0 * T * (T - 1), 1e-9, "diagonality of the scores 2 I");
        NEAR(out_vals(&r, "symmetry")[1 * H + 1], 0.0, 1e-12, "symmetry of the scores 2 I");
        CHECK(isnan(out_vals(&r, "diagonality")[0]) && isnan(out_vals(&r, "symmetry_head_mean")[2]),
              "layers that are not less-attention are NaN");
        CHECK(r.c.needs == 1u << TRACE_Q_SCORES, "diag reads the scores");
        one_free(&r);
    }
    free(sc);
    for (int l = 0; l < L; l++) im.scores[l] = NULL;
    free(a);

    /* rollout: identity maps keep all mass on the class token (0 on patches); one uniform
     * layer: (U + I) / 2, so each patch gets 1 / (2T) */
    analysis_layout l1 = make_layout(4, 1, 1, 2, 8);
    int k1[1] = {1};
    a = maps(&l1, k1);
    image_of(&im, &l1, a);
    if (run_one(&r, &analysis_metric_rollout, &l1, &o, &im)) {
        const double *m = out_vals(&r, "map");
        for (int j = 0; j < 16; j++) NEAR(m[j], 1.0 / (2 * T), 1e-8, "rollout uniform");
        one_free(&r);
    }
    free(a);
    int k2[3] = {0, 0, 0};
    a = maps(&lay, k2);
    image_of(&im, &lay, a);
    if (run_one(&r, &analysis_metric_rollout, &lay, &o, &im)) {
        const double *m = out_vals(&r, "map");
        double mx = 0;
        for (int j = 0; j < 3 * 16; j++) mx = fmax(mx, fabs(m[j]));
        NEAR(mx, 0.0, 1e-12, "rollout identity");
        one_free(&r);
    }
    free(a);
}

static void test_hand_qk_cka(void) {
    analysis_opts o;
    analysis_opts_default(&o);
    analysis_layout lay = make_layout(2, 2, 3, 1, 4); /* T = 6 tokens, D = 4 */
    const int T = lay.tokens, D = 4, L = 3;
    as_error cerr = {0};
    analysis_choice_set(&o, "qk-scale", "raw", &cerr);
    float q[6 * 4], k[6 * 4];
    for (int i = 0; i < T * D; i++) {
        q[i] = (float)(i % 4) * 0.4f;  /* 0, .4, .8, 1.2: above 0.1: 3/4, 0.5: 2/4, 1: 1/4, 2: 0 */
        k[i] = i % 2 ? -3.0f : 0.0f;   /* half at |3| */
    }
    analysis_image im;
    memset(&im, 0, sizeof im);
    for (int l = 0; l < L; l++) {
        im.q[l] = q;
        im.k[l] = k;
    }
    lay.qk_width[1] = 0; /* a less-attention block */
    im.q[1] = im.k[1] = NULL;
    one_run r;
    if (run_one(&r, &analysis_metric_qk, &lay, &o, &im)) {
        const double *qf = out_vals(&r, "q_fraction"), *kf = out_vals(&r, "k_fraction");
        const double want[4] = {0.75, 0.5, 0.25, 0};
        for (int t = 0; t < 4; t++) {
            NEAR(qf[t], want[t], 1e-12, "q fraction");
            NEAR(kf[2 * 4 + t], 0.5, 1e-12, "k fraction");
        }
        CHECK(isnan(qf[1 * 4]), "a block without q/k gives NaN: %g", qf[4]);
        one_free(&r);
    }
    /* scaled (the default): q meets k^T times 1/sqrt(4) = 0.5, so 0, .2, .4, .6: above 0.1: 3/4,
     * 0.5: 1/4, 1: 0; keys unchanged */
    analysis_opts_default(&o);
    if (run_one(&r, &analysis_metric_qk, &lay, &o, &im)) {
        const double *qf = out_vals(&r, "q_fraction"), *kf = out_vals(&r, "k_fraction");
        const double want[4] = {0.75, 0.25, 0, 0};
        for (int t = 0; t < 4; t++) {
            NEAR(qf[t], want[t], 1e-12, "scaled q fraction");
            NEAR(kf[2 * 4 + t], 0.5, 1e-12, "k fraction (never scaled)");
        }
        CHECK(strstr(r.c.params, "q=scaled") && strstr(r.c.params, "q_scale=0.5,0,0.5"), "params: %s", r.c.params);
        one_free(&r);
    }

    /* CKA: a representation with itself is 1, and so is a rotated and scaled copy; the HSIC
     * equals the U-statistic definition summed over every ordered 4-tuple of distinct tokens */
    float X[3][6 * 4];
    unsigned long long s = 12345;
    for (int i = 0; i < T * D; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        X[0][i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        X[2][i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
    }
    const double th = 0.7, cs = cos(th), sn = sin(th);
    for (int t = 0; t < T; t++) /* rotate channels 0,1 and scale by 3 */
        for (int d = 0; d < D; d++) {
            const float *x = X[0] + t * D;
            double v = d == 0 ? cs * x[0] - sn * x[1] : d == 1 ? sn * x[0] + cs * x[1] : x[d];
            X[1][t * D + d] = (float)(3.0 * v);
        }
    for (int l = 0; l < L; l++) im.tokens[l] = X[l];
    lay.quantities |= 1u << TRACE_Q_TOKENS;
    if (run_one(&r, &analysis_metric_evolution, &lay, &o, &im)) {
        const double *cka = out_vals(&r, "cka"), *hs = out_vals(&r, "hsic");
        NEAR(cka[0], 1.0, 1e-12, "CKA self");
        NEAR(cka[0 * L + 1], 1.0, 1e-5, "CKA rotated and scaled");
        double K[2][6][6];
        for (int m = 0; m < 2; m++)
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++) {
                    double v = 0;
                    for (int d = 0; d < D; d++) v += (double)X[m * 2][i * D + d] * X[m * 2][j * D + d];
                    K[m][i][j] = v;
                }
        double u = 0;
        long n4 = 0;
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++)
                for (int q2 = 0; q2 < T; q2++)
                    for (int r2 = 0; r2 < T; r2++) {
                        if (i == j || i == q2 || i == r2 || j == q2 || j == r2 || q2 == r2) continue;
                        u += K[0][i][j] * K[1][i][j] + K[0][i][j] * K[1][q2][r2] - 2 * K[0][i][j] * K[1][i][q2];
                        n4++;
                    }
        NEAR(hs[0 * L + 2], u / n4, 1e-9, "unbiased HSIC = U-statistic");
        const double *cf = out_vals(&r, "cos_final");
        NEAR(cf[2], 1.0, 1e-12, "cos of the final block with itself");
        one_free(&r);
    }
}


/* Runs finish() on one image's values (as the means) and returns derived result name. */
static const double *derived_of(one_run *r, const char *name) {
    as_error err = {0};
    if (r->c.n_derived == 0 && r->c.metric->finish(&r->c, r->vals, &err) != AS_OK) CHECK(0, "finish: %s", err.msg);
    for (int i = 0; i < r->c.n_derived; i++)
        if (strcmp(r->c.derived[i].name, name) == 0) return r->c.derived[i].derived;
    CHECK(0, "no derived %s", name);
    static double nan_buf[256];
    for (int i = 0; i < 256; i++) nan_buf[i] = NAN;
    return nan_buf;
}

static void one_free_all(one_run *r) {
    for (int d = 0; d < r->c.n_derived; d++) free(r->c.derived[d].derived);
    one_free(r);
}

/* The readings MaiT's Eq. 3 leaves open, each on a map where they differ by a known amount. */
static void test_hand_als(void) {
    analysis_opts o;
    analysis_opts_default(&o);
    as_error err = {0};
    analysis_layout lay = make_layout(4, 1, 2, 2, 8); /* T = 17, P = 16 */
    const int T = lay.tokens, H = 2;
    float *a = calloc((size_t)2 * H * T * T, sizeof *a);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++) {
            a[((size_t)0 * H + h) * T * T + (size_t)i * T + 0] = 1.0f;            /* layer 0: one-hot on the class column */
            a[((size_t)1 * H + h) * T * T + (size_t)i * T + i] = 3.0f;            /* layer 1: Refiner-like, rows sum to 3 */
        }
    analysis_image im;
    image_of(&im, &lay, a);
    one_run r;
    /* class column: 0 without it (the default), 1 with it */
    if (run_one(&r, &analysis_metric_als, &lay, &o, &im)) {
        NEAR(out_vals(&r, "score")[0], 0.0, 1e-12, "ALS one-hot class column, prefix excluded");
        NEAR(out_vals(&r, "score")[1 * H], 1.0, 1e-12, "ALS rows of 3, normalised");
        CHECK(strstr(r.c.params, "prefix_columns=exclude") && strstr(r.c.params, "rows=normalise") &&
              strstr(r.c.params, "window=own mask or 3"), "params: %s", r.c.params);
        one_free(&r);
    }
    analysis_choice_set(&o, "als-prefix", "include", &err);
    analysis_choice_set(&o, "als-rows", "raw", &err);
    if (run_one(&r, &analysis_metric_als, &lay, &o, &im)) {
        NEAR(out_vals(&r, "score")[0], 1.0, 1e-12, "ALS one-hot class column, prefix included");
        NEAR(out_vals(&r, "score")[1 * H], 3.0, 1e-12, "ALS rows of 3, raw");
        one_free(&r);
    }
    /* refuse: a Refiner layer stops the metric, naming the map to analyse instead */
    analysis_opts_default(&o);
    analysis_choice_set(&o, "als-rows", "refuse", &err);
    analysis_layout lref = lay;
    lref.cfg.attn[1].kind = VIT_ATTN_REFINER;
    memset(&r, 0, sizeof r);
    r.c.metric = &analysis_metric_als;
    r.c.lay = &lref;
    r.c.opt = &o;
    CHECK(analysis_metric_als.plan(&r.c, &err) == AS_ERR_ARG && strstr(err.msg, "layer 1") &&
          strstr(err.msg, "--als-map softmax"), "refuse: %s", err.msg);
    CHECK(analysis_choice_set(&o, "als-rows", "sometimes", &err) == -1 && strstr(err.msg, "normalise, raw, refuse"),
          "a bad choice names the values: %s", err.msg);
    free(a);

    /* per-head window: everything on patch 0 reaches the queries within R/2 of it: 4 of 16
     * with R = 3, 9 of 16 with R = 5; head 0 masked at 5 x 5 uses its own window unless
     * --als-window is given; softmax of scores that are 0 on patch 0 and -inf elsewhere is
     * the same map */
    analysis_opts_default(&o);
    analysis_layout lm = make_layout(4, 1, 1, 2, 8);
    lm.cfg.attn[0].kind = VIT_ATTN_MAIT;
    lm.cfg.attn[0].mask_size[0] = 5;
    a = calloc((size_t)H * T * T, sizeof *a);
    float *sc = malloc((size_t)H * T * T * sizeof *sc);
    for (int i = 0; i < H * T; i++)
        for (int j = 0; j < T; j++) {
            a[(size_t)i * T + j] = j == 1;
            sc[(size_t)i * T + j] = j == 1 ? 0.0f : -INFINITY;
        }
    image_of(&im, &lm, a);
    im.scores[0] = sc;
    if (run_one(&r, &analysis_metric_als, &lm, &o, &im)) {
        NEAR(out_vals(&r, "score")[0], 9.0 / 16, 1e-12, "masked head at its own 5x5");
        NEAR(out_vals(&r, "score")[1], 4.0 / 16, 1e-12, "unmasked head at 3x3");
        NEAR(derived_of(&r, "window")[0], 5, 0, "stored window of the masked head");
        /* MaiT search, step 3 here (a layer whose masked head is head 0 only: step 2): ALS^{0,0}
         * = 0.5625 in [0.35, 0.65]: keep head 0's mask, add no more */
        const double *srch = derived_of(&r, "search");
        CHECK(srch[0] == 5 && srch[1] == 0, "search step 2b: %g %g", srch[0], srch[1]);
        CHECK(strstr(r.c.report, "step 2b"), "report names the step: %s", r.c.report);
        one_free_all(&r);
    }
    o.als_high = 0.5; /* now ALS^{0,0} > high: step 2a masks every head */
    if (run_one(&r, &analysis_metric_als, &lm, &o, &im)) {
        const double *srch = derived_of(&r, "search");
        CHECK(srch[0] == 5 && srch[1] == 5, "search step 2a: %g %g", srch[0], srch[1]);
        one_free_all(&r);
    }
    o.als_high = 0.65;
    o.als_low = 0.6; /* ALS^{0,0} = 0.5625 < low: step 2c removes head 0's mask */
    if (run_one(&r, &analysis_metric_als, &lm, &o, &im)) {
        const double *srch = derived_of(&r, "search");
        CHECK(srch[0] == 0 && srch[1] == 0 && strstr(r.c.report, "step 2c"), "search step 2c: %g %g", srch[0], srch[1]);
        one_free_all(&r);
    }
    o.als_low = 0.35;
    o.als_window = 3;
    if (run_one(&r, &analysis_metric_als, &lm, &o, &im)) {
        NEAR(out_vals(&r, "score")[0], 4.0 / 16, 1e-12, "--als-window 3 overrides the mask size");
        one_free(&r);
    }
    o.als_window = 0;
    analysis_choice_set(&o, "als-map", "softmax", &err);
    memset(&r, 0, sizeof r);
    r.c.metric = &analysis_metric_als;
    r.c.lay = &lm;
    r.c.opt = &o;
    CHECK(analysis_metric_als.plan(&r.c, &err) == AS_ERR_ARG && strstr(err.msg, "--record attn,scores"),
          "softmax without scores: %s", err.msg);
    lm.quantities |= 1u << TRACE_Q_SCORES;
    if (run_one(&r, &analysis_metric_als, &lm, &o, &im)) {
        NEAR(out_vals(&r, "score")[0], 9.0 / 16, 1e-12, "softmax of the scores");
        CHECK(r.c.needs == 1u << TRACE_Q_SCORES, "reads the scores");
        one_free(&r);
    }
    /* no mask anywhere: step 1 masks head 0 of every layer */
    analysis_opts_default(&o);
    lm.cfg.attn[0].kind = VIT_ATTN_VANILLA;
    lm.cfg.attn[0].mask_size[0] = 0;
    if (run_one(&r, &analysis_metric_als, &lm, &o, &im)) {
        const double *srch = derived_of(&r, "search");
        CHECK(srch[0] == 3 && srch[1] == 0 && strstr(r.c.report, "step 1"), "search step 1: %g %g", srch[0], srch[1]);
        one_free_all(&r);
    }
    /* a layer with every head masked: step 3 removes the masks of heads below low */
    lm.cfg.attn[0].kind = VIT_ATTN_MAIT;
    lm.cfg.attn[0].mask_size[0] = lm.cfg.attn[0].mask_size[1] = 3;
    o.als_low = 0.3; /* both heads score 4/16 = 0.25 < 0.3 */
    if (run_one(&r, &analysis_metric_als, &lm, &o, &im)) {
        const double *srch = derived_of(&r, "search");
        CHECK(srch[0] == 0 && srch[1] == 0 && strstr(r.c.report, "step 3"), "search step 3: %g %g", srch[0], srch[1]);
        one_free_all(&r);
    }
    free(a);
    free(sc);
}

/* Every choice id is declared by exactly one metric, with a default among its values. */
static void test_choices_table(void) {
    int seen[ANALYSIS_CH_COUNT] = {0};
    for (int i = 0; analysis_choice_get(i); i++) {
        const analysis_choice *c = analysis_choice_get(i);
        CHECK(c->id >= 0 && c->id < ANALYSIS_CH_COUNT, "choice %s: id %d", c->option, (int)c->id);
        if (c->id >= 0 && c->id < ANALYSIS_CH_COUNT) seen[c->id]++;
        CHECK(c->def >= 0 && c->def < 4 && c->values[c->def], "choice %s: default %d", c->option, c->def);
    }
    for (int i = 0; i < ANALYSIS_CH_COUNT; i++) CHECK(seen[i] == 1, "choice id %d declared %d times", i, seen[i]);
    analysis_opts o;
    analysis_opts_default(&o);
    as_error err = {0};
    CHECK(analysis_choice_set(&o, "no-such-choice", "x", &err) == 0, "an unknown option is not a choice");
}

/* Rollout's discard: the floor(r T^2) smallest entries are chosen first, then [0,0] is spared,
 * so one entry fewer is zeroed when [0,0] is among them (vit-explain's rule). */
static void test_hand_rollout_discard(void) {
    const int T = 3;
    /* [0,0] is the smallest entry; the next smallest is [1,2] */
    float A[9] = {0.01f, 0.5f, 0.49f, 0.3f, 0.68f, 0.02f, 0.33f, 0.33f, 0.34f};
    const float *layers[1] = {A};
    double out[9];
    int idx[9];
    analysis_rollout_layers(out, layers, 1, 1, T, ANALYSIS_FUSE_MEAN, 1.0 / 9, idx); /* m = 1: [0,0] only */
    NEAR(out[0], (0.01 + 1) / 2.0, 1e-7, "[0,0] chosen and spared: nothing zeroed");
    NEAR(out[5], 0.02 / 2.0, 1e-7, "[1,2] kept when m = 1");
    analysis_rollout_layers(out, layers, 1, 1, T, ANALYSIS_FUSE_MEAN, 2.0 / 9 + 1e-9, idx); /* m = 2 */
    NEAR(out[5], 0.0, 0, "[1,2] zeroed when m = 2 (one entry, not two)");
    NEAR(out[3], 0.3 / (0.3 + 1.68), 1e-7, "[1,0] kept when m = 2");
    CHECK(strstr(analysis_metric_rollout.definition, "one entry fewer"), "the definition says which");
}


/* CKA with images as the examples (Kornblith): invariant to rotating and scaling the features,
 * streamed in minibatches; a last minibatch under 4 images is left out and said so. */
static void test_hand_cka_images(void) {
    analysis_opts o;
    analysis_opts_default(&o);
    o.cka_batch = 4;
    analysis_layout lay = make_layout(2, 1, 3, 1, 4); /* T = 5, D = 4 */
    lay.n_images = 5;
    const int T = lay.tokens, D = 4, N = 5;
    float X[5][3][5 * 4];
    unsigned long long s = 99;
    for (int n = 0; n < N; n++)
        for (int i = 0; i < T * D; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            X[n][0][i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            X[n][2][i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
        }
    for (int n = 0; n < N; n++) /* channels reversed and scaled: an orthogonal map times -2 */
        for (int i = 0; i < T * D; i++) X[n][1][i] = -2.0f * X[n][0][(i / D) * D + (D - 1 - i % D)];
    one_run r;
    memset(&r, 0, sizeof r);
    r.c.metric = &analysis_metric_evolution;
    r.c.lay = &lay;
    r.c.opt = &o;
    as_error err = {0};
    if (analysis_metric_evolution.plan(&r.c, &err) != AS_OK) {
        CHECK(0, "evolution plan: %s", err.msg);
        return;
    }
    r.vals = calloc(r.c.n_vals, sizeof *r.vals);
    r.scratch = malloc(r.c.scratch_bytes + 1);
    for (int n = 0; n < N; n++) {
        analysis_image im;
        memset(&im, 0, sizeof im);
        for (int l = 0; l < 3; l++) im.tokens[l] = X[n][l];
        analysis_metric_evolution.image(&r.c, &im, r.vals, r.scratch);
        analysis_metric_evolution.accumulate(&r.c, &im);
    }
    const double *ci = derived_of(&r, "cka_images");
    NEAR(ci[0 * 3 + 1], 1.0, 1e-9, "image-example CKA of a rotated, scaled copy");
    NEAR(ci[0], 1.0, 1e-12, "image-example CKA with itself");
    CHECK(fabs(ci[0 * 3 + 2]) < 0.99, "independent features: %g", ci[2]);
    CHECK(strstr(r.c.notes, "1 image at the end (fewer than 4) is left out"), "notes: %s", r.c.notes);
    CHECK(strstr(r.c.params, "cka_batch=4"), "params: %s", r.c.params);
    one_free_all(&r);
}

/* ---- against numpy ------------------------------------------------------------------------- */

typedef struct {
    hid_t res;
    int compared, missing;
    double worst;
    const char *what;
} cmp_ctx;

static herr_t cmp_visit(hid_t g, const char *name, const H5O_info_t *info, void *ud) {
    cmp_ctx *c = ud;
    if (info->type != H5O_TYPE_DATASET) return 0;
    hid_t de = H5Dopen2(g, name, H5P_DEFAULT);
    hid_t dr = H5Lexists(c->res, name, H5P_DEFAULT) > 0 ? H5Dopen2(c->res, name, H5P_DEFAULT) : -1;
    if (dr < 0) {
        c->missing++;
        CHECK(0, "%s: results lack %s", c->what, name);
        H5Dclose(de);
        return 0;
    }
    hid_t se = H5Dget_space(de), sr = H5Dget_space(dr);
    hssize_t ne = H5Sget_simple_extent_npoints(se), nr = H5Sget_simple_extent_npoints(sr);
    CHECK(ne == nr, "%s %s: %lld values, want %lld", c->what, name, (long long)nr, (long long)ne);
    if (ne == nr && ne > 0) {
        double *e = malloc((size_t)ne * sizeof *e), *r = malloc((size_t)ne * sizeof *r);
        H5Dread(de, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, e);
        H5Dread(dr, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, r);
        int bad = 0;
        for (hssize_t i = 0; i < ne; i++) {
            int nan = isnan(e[i]) != isnan(r[i]);
            double err = isnan(e[i]) ? 0 : fabs(r[i] - e[i]) / fmax(1.0, fabs(e[i]));
            if (nan || err > 1e-6) {
                if (bad++ < 3) fprintf(stderr, "  %s %s[%lld]: got %.12g want %.12g\n", c->what, name,
                                       (long long)i, r[i], e[i]);
            }
            if (!nan) c->worst = fmax(c->worst, err);
        }
        CHECK(!bad, "%s %s: %d of %lld values differ from numpy", c->what, name, bad, (long long)ne);
        c->compared++;
        free(e);
        free(r);
    }
    H5Sclose(se);
    H5Sclose(sr);
    H5Dclose(de);
    H5Dclose(dr);
    return 0;
}

/* The variant options; tools/analysis_ref.py's VARIANT sets the same. */
static void variant_opts(analysis_opts *o) {
    o->als_window = 5;
    o->als_low = 0.3;
    o->als_high = 0.5;
    o->n_thresholds = 2;
    o->thresholds[0] = 0.25;
    o->thresholds[1] = 1.5;
    o->fusion = ANALYSIS_FUSE_MAX;
    o->discard = 0.3;
    o->entropy_normalize = 1;
    o->distance_renorm = 1;
    as_error err = {0};
    analysis_choice_set(o, "als-prefix", "include", &err);
    analysis_choice_set(o, "als-rows", "raw", &err);
    analysis_choice_set(o, "distance", "centre", &err);
    analysis_choice_set(o, "qk-scale", "raw", &err);
    analysis_choice_set(o, "diag-map", "attn", &err);
    analysis_choice_set(o, "cka-hsic", "biased", &err);
    o->cka_batch = 4;
}

/* ALS_SOFTMAX in tools/analysis_ref.py: the als metric on softmax(scores), prefix columns in */
static void als_softmax_opts(analysis_opts *o) {
    as_error err = {0};
    o->metrics = analysis_metric_mask("als", &err);
    analysis_choice_set(o, "als-map", "softmax", &err);
    analysis_choice_set(o, "als-prefix", "include", &err);
}

static void test_reference(const char *model, int has_less) {
    static const char *const groups[] = {"default", "variant", "als_softmax"};
    for (int v = 0; v < 3; v++) {
        char trace[512], expected[512], group[16], what[64];
        snprintf(trace, sizeof trace, "%s/analysis/%s.h5", fixtures(), model);
        snprintf(expected, sizeof expected, "%s/analysis/%s.expected.h5", fixtures(), model);
        snprintf(group, sizeof group, "%s", groups[v]);
        snprintf(what, sizeof what, "%s/%s", model, group);
        const char *out = check_tmp(v ? "variant.h5" : "default.h5");
        remove(out);
        analysis_opts o;
        analysis_opts_default(&o);
        if (v == 1) variant_opts(&o);
        if (v == 2) als_softmax_opts(&o);
        o.per_image = 1;
        o.quiet = 1;
        analysis_report rep;
        as_error err = {0};
        if (analysis_run(trace, out, &o, &rep, &err) != AS_OK) {
            CHECK(0, "%s: %s", what, err.msg);
            continue;
        }
        /* diag's default (scores of less-attention layers) needs a LaViT model */
        int want = v == 2 ? 1 : v == 0 && !has_less ? 7 : 8;
        CHECK(rep.metrics_run == want, "%s: %d metrics ran, want %d", what, rep.metrics_run, want);
        hid_t fe = H5Fopen(expected, H5F_ACC_RDONLY, H5P_DEFAULT), fr = H5Fopen(out, H5F_ACC_RDONLY, H5P_DEFAULT);
        if (fe < 0 || fr < 0) {
            CHECK(0, "%s: cannot open %s or %s", what, expected, out);
            continue;
        }
        hid_t g = H5Gopen2(fe, group, H5P_DEFAULT);
        cmp_ctx c = {.res = fr, .what = what};
        H5Ovisit(g, H5_INDEX_NAME, H5_ITER_INC, cmp_visit, &c);
        CHECK(c.compared > (v == 2 ? 10 : 100), "%s: only %d datasets compared", what, c.compared);
        fprintf(stderr, "numpy reference %-18s %4d datasets, max relative error %.2g\n", what, c.compared, c.worst);
        H5Gclose(g);
        H5Fclose(fe);
        H5Fclose(fr);
    }
}

/* ---- the run ------------------------------------------------------------------------------- */

static int read_all(const char *file, const char *dset, double *out, size_t n) {
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return 0;
    hid_t d = H5Lexists(f, dset, H5P_DEFAULT) > 0 ? H5Dopen2(f, dset, H5P_DEFAULT) : -1;
    int ok = 0;
    if (d >= 0) {
        hid_t s = H5Dget_space(d);
        ok = (size_t)H5Sget_simple_extent_npoints(s) == n &&
             H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0;
        H5Sclose(s);
        H5Dclose(d);
    }
    H5Fclose(f);
    return ok;
}

static void test_run(void) {
    char trace[512];
    snprintf(trace, sizeof trace, "%s/analysis/mech_cls.h5", fixtures());
    analysis_opts o;
    analysis_report rep;
    as_error err = {0};

    /* 1 and 2 threads give identical numbers (image order is kept) */
    double one[9 * 9 * 3 * 3], two[9 * 9 * 3 * 3];
    for (int t = 1; t <= 2; t++) {
        analysis_opts_default(&o);
        o.quiet = 1;
        o.threads = t;
        const char *out = check_tmp(t == 1 ? "t1.h5" : "t2.h5");
        remove(out);
        CHECK(analysis_run(trace, out, &o, &rep, &err) == AS_OK, "threads %d: %s", t, err.msg);
        CHECK(read_all(out, "analysis/similarity/per_head/std", t == 1 ? one : two, sizeof one / sizeof one[0]),
              "read similarity from %s", out);
    }
    CHECK(memcmp(one, two, sizeof one) == 0, "results differ between 1 and 2 threads");

    /* into the trace: /analysis appears, recorded data is unchanged, a later run of one metric
     * replaces that metric only */
    const char *copy = check_tmp("copy.h5");
    CHECK(check_copy_file(trace, copy), "copy the fixture trace");
    trace_reader r;
    float before[3 * 17 * 17], after[3 * 17 * 17];
    if (trace_reader_open(&r, copy, &err) == AS_OK) {
        trace_read_image_slab(&r, "layers/04/attn", 2, before, &err);
        trace_reader_close(&r);
    }
    analysis_opts_default(&o);
    o.quiet = 1;
    o.metrics = analysis_metric_mask("als,entropy", &err);
    CHECK(analysis_run(copy, NULL, &o, &rep, &err) == AS_OK, "beside the trace: %s", err.msg);
    double als1[9 * 3], ent[9 * 3];
    char side[1100];
    analysis_results_path(copy, side, sizeof side);
    CHECK(read_all(side, "analysis/als/score/mean", als1, 27) && read_all(side, "analysis/entropy/entropy/mean", ent, 27),
          "results in %s /analysis", side);
    o.metrics = analysis_metric_mask("als", &err);
    o.als_window = 5;
    CHECK(analysis_run(copy, NULL, &o, &rep, &err) == AS_OK, "again: %s", err.msg);
    double als2[9 * 3];
    CHECK(read_all(side, "analysis/als/score/mean", als2, 27) && als2[0] > als1[0], "ALS R=5 %g > R=3 %g", als2[0], als1[0]);
    CHECK(read_all(side, "analysis/entropy/entropy/mean", ent, 27), "the other metric's results stay");
    if (trace_reader_open(&r, copy, &err) == AS_OK) {
        trace_read_image_slab(&r, "layers/04/attn", 2, after, &err);
        CHECK(memcmp(before, after, sizeof before) == 0 && r.n_images == 5 && r.complete,
              "recorded data unchanged (%ld images)", r.n_images);
        trace_reader_close(&r);
    } else {
        CHECK(0, "the trace opens after analysis: %s", err.msg);
    }

    /* --out merges with an earlier results file */
    const char *out = check_tmp("merged.h5");
    remove(out);
    analysis_opts_default(&o);
    o.quiet = 1;
    o.metrics = analysis_metric_mask("qk", &err);
    CHECK(analysis_run(trace, out, &o, &rep, &err) == AS_OK, "qk: %s", err.msg);
    o.metrics = analysis_metric_mask("diag", &err);
    CHECK(analysis_run(trace, out, &o, &rep, &err) == AS_OK, "diag: %s", err.msg);
    double tmp[9 * 4];
    CHECK(read_all(out, "analysis/qk/q_fraction/mean", tmp, 36) && read_all(out, "analysis/diag/symmetry_head_mean/mean", tmp, 9),
          "both metrics in the merged results");

    /* interrupted: nothing is written */
    volatile sig_atomic_t stop = 1;
    const char *never = check_tmp("never.h5");
    remove(never);
    analysis_opts_default(&o);
    o.quiet = 1;
    o.threads = 1;
    o.stop = &stop;
    CHECK(analysis_run(trace, never, &o, &rep, &err) == AS_ERR_INTERRUPTED && strstr(err.msg, "no results"),
          "interrupted: %s", err.msg);
    CHECK(access(never, F_OK) != 0, "an interrupted run leaves no results file");

    /* errors: the wrong file kinds and missing quantities, each one line naming the fix */
    char expected[512];
    snprintf(expected, sizeof expected, "%s/analysis/mech_cls.expected.h5", fixtures());
    analysis_opts_default(&o);
    o.quiet = 1;
    CHECK(analysis_run(expected, out, &o, &rep, &err) == AS_ERR_FORMAT && strstr(err.msg, "not an attnscope trace"),
          "non-trace HDF5: %s", err.msg);
    CHECK(analysis_run(trace, trace, &o, &rep, &err) == AS_ERR_EXISTS && strstr(err.msg, "--out"),
          "--out onto a trace: %s", err.msg);
    const char *cut = check_tmp("cut.h5");
    FILE *a = fopen(trace, "rb"), *b = fopen(cut, "wb");
    char buf[65536];
    size_t n = a ? fread(buf, 1, sizeof buf, a) : 0;
    if (b) fwrite(buf, 1, n, b);
    if (a) fclose(a);
    if (b) fclose(b);
    as_status rc = analysis_run(cut, check_tmp("cut-out.h5"), &o, &rep, &err);
    CHECK(rc != AS_OK && strchr(err.msg, '\n') == NULL && strstr(err.msg, "cut.h5"), "truncated trace: %s", err.msg);
    CHECK(access(check_tmp("cut-out.h5"), F_OK) != 0, "no results from a truncated trace");
}

int main(void) {
    check_tmp_init("analysis");
    test_hand_maps();
    test_hand_qk_cka();
    test_hand_als();
    test_hand_rollout_discard();
    test_hand_cka_images();
    test_choices_table();
    test_reference("mech_cls", 1);
    test_reference("deit_dist", 0);
    test_reference("vit_gap", 0);
    test_run();
    check_tmp_remove();
    return check_finish("analysis");
}
