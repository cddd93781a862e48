/* test_local.c: local-plus-background attention rows (core/local.h; H-MaiT's masked heads in
 * O(T R^2)). The kernel against a dense softmax written here from MaiT's definition (a score
 * outside the R x R neighbourhood is 0 in zero mode, -inf in neg_inf mode), on grids that are not
 * square, neighbourhoods cut by the edges and ones that cover the grid; then a staged model whose
 * global stages mix local and dense heads: its recorded maps against the same definition applied
 * to its recorded q and k, the local records against the dense ones, the backward against the
 * dense one, the logits the same bits
 * whichever form is recorded, and the scratch map the local stages no longer need. The model
 * against PyTorch (forward and gradients) is tests/test_train.c's fixture swin_hmait. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../core/config.h"
#include "../core/local.h"
#include "../core/mech.h"
#include "../core/vit.h"
#include "../io/model.h"
#include "check.h"

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}
static float urand(uint32_t *s) { return (float)lcg(s) / (float)(1u << 24) * 2.0f - 1.0f; }

/* MaiT's masked softmax, dense, in double: row i of the (T, T) map and scores for query (qy, qx). */
static void dense_row(const float *q, const float *k, int T, int gw, int d, double scale, int R, double bg,
                      int i, double *score, double *map) {
    const int qy = i / gw, qx = i % gw;
    double mx = -INFINITY, z = 0;
    for (int j = 0; j < T; j++) {
        const int ky = j / gw, kx = j % gw;
        double s = 0;
        for (int c = 0; c < d; c++) s += (double)q[(size_t)i * d + c] * k[(size_t)j * d + c];
        const int kept = abs(ky - qy) <= R / 2 && abs(kx - qx) <= R / 2;
        score[j] = kept ? s * scale : bg;
        if (score[j] > mx) mx = score[j];
    }
    for (int j = 0; j < T; j++) z += map[j] = exp(score[j] - mx);
    for (int j = 0; j < T; j++) map[j] /= z;
}

static void test_pairs(void) {
    const int sizes[][3] = {{1, 1, 1}, {5, 7, 3}, {6, 6, 5}, {3, 9, 13}, {56, 56, 3}};
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        const int gh = sizes[t][0], gw = sizes[t][1], R = sizes[t][2];
        double n = 0;
        for (int i = 0; i < gh * gw; i++)
            for (int j = 0; j < gh * gw; j++) n += abs(i / gw - j / gw) <= R / 2 && abs(i % gw - j % gw) <= R / 2;
        CHECK(vit_local_pairs(gh, gw, R) == n, "%dx%d R=%d: %g pairs, counted %g", gh, gw, R,
              vit_local_pairs(gh, gw, R), n);
    }
}

/* The kernel: output rows, dense map and scores, local records (also wider than the
 * neighbourhood) and their expansion, against dense_row. */
/* One case: a gh x gw grid, neighbourhood R, records of side S, background 0 or -inf. */
typedef struct {
    int gh, gw, R, S;
    float bg;
} lcase;

/* Runs fn on every grid, neighbourhood and record side, in both modes (zero, neg_inf). */
static void each_case(void (*fn)(const lcase *c, uint32_t *seed), uint32_t seed) {
    static const int cases[][4] = {/* gh, gw, R, S: cut by the edges, R < S, covering the grid */
                                   {5, 7, 3, 3}, {5, 7, 3, 5}, {6, 6, 1, 1}, {6, 6, 1, 3},
                                   {4, 3, 7, 9}, {1, 1, 3, 3}, {8, 5, 5, 5}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++)
        for (int mode = 0; mode < 2; mode++) {
            const lcase c = {cases[t][0], cases[t][1], cases[t][2], cases[t][3], mode ? -INFINITY : 0.0f};
            fn(&c, &seed);
        }
}

static void kernel_case(const lcase *lc, uint32_t *sp) {
    const int gh = lc->gh, gw = lc->gw, R = lc->R, S = lc->S, T = gh * gw, mode = isinf(lc->bg);
    const int dq = 5, dv = 3, slots = S * S + 1;
    const float scale = 0.7f, bg = lc->bg;
    uint32_t seed = *sp;
    float *q = malloc(sizeof(float) * T * dq), *k = malloc(sizeof(float) * T * dq);
    float *v = malloc(sizeof(float) * T * dv), *out = malloc(sizeof(float) * T * dv);
    float *att = malloc(sizeof(float) * T * T), *sc = malloc(sizeof(float) * T * T);
    float *al = malloc(sizeof(float) * T * slots), *sl = malloc(sizeof(float) * T * slots);
    float *ex = malloc(sizeof(float) * T * T), *want = malloc(sizeof(float) * T * T);
    float *wants = malloc(sizeof(float) * T * T), *wout = malloc(sizeof(float) * T * dv);
    double *srow = malloc(sizeof(double) * T), *mrow = malloc(sizeof(double) * T), acc[6];
    for (int i = 0; i < T * dq; i++) q[i] = 2 * urand(&seed), k[i] = 2 * urand(&seed);
    for (int i = 0; i < T * dv; i++) v[i] = urand(&seed);
    for (int i = 0; i < T; i++) {
        dense_row(q, k, T, gw, dq, scale, R, bg, i, srow, mrow);
        for (int c = 0; c < dv; c++) {
            double o = 0;
            for (int j = 0; j < T; j++) o += mrow[j] * v[(size_t)j * dv + c];
            wout[(size_t)i * dv + c] = (float)o;
        }
        for (int j = 0; j < T; j++) want[(size_t)i * T + j] = (float)mrow[j], wants[(size_t)i * T + j] = (float)srow[j];
    }
    vit_local_job j = {.gh = gh, .gw = gw, .dq = dq, .dv = dv, .scale = scale, .q = q, .k = k, .v = v,
                       .ldq = dq, .ldk = dq, .ldv = dv, .loc = {R, bg}, .out = out, .ldo = dv,
                       .acc = acc, .att = att, .scores = sc, .att_local = al, .scores_local = sl,
                       .rec_side = S};
    vit_local_forward(&j);
    char what[64];
    snprintf(what, sizeof what, "%dx%d R=%d S=%d %s out", gh, gw, R, S, mode ? "neg_inf" : "zero");
    CHECK(check_close(what, out, wout, (size_t)T * dv, 1e-6, 1e-5), "%s", what);
    CHECK(check_close("map", att, want, (size_t)T * T, 1e-7, 1e-5), "%s: map", what);
    CHECK(check_close("scores", sc, wants, (size_t)T * T, 1e-6, 1e-5), "%s: scores", what);
    vit_local_expand(al, gh, gw, S, ex);
    CHECK(memcmp(ex, att, sizeof(float) * T * T) == 0, "%s: the local map does not expand to the dense one", what);
    vit_local_expand(sl, gh, gw, S, ex);
    CHECK(check_close("local scores", ex, sc, (size_t)T * T, 0, 0), "%s: local scores", what);
    /* the documented layout: the last slot is the weight of a key outside; off-grid slots 0 */
    const int far = T > R * R && gh > R / 2 && gw > R / 2; /* query 0 has keys outside */
    if (far) CHECK(al[slots - 1] == att[T - 1] || abs((T - 1) / gw) <= R / 2, "%s: background slot", what);
    if (S > 1) CHECK(al[0] == 0.0f, "%s: slot (-S/2, -S/2) of query (0, 0) is off the grid: %g", what, (double)al[0]);
    free(q), free(k), free(v), free(out), free(att), free(sc), free(al), free(sl), free(ex);
    free(want), free(wants), free(wout), free(srow), free(mrow);
    *sp = seed;
}

/* The backward against the dense one written from the definition: dA = dO V^T, dS = A (dA -
 * rowsum(A dA)) where the score is a function of q and k (the neighbourhood) and 0 where it is
 * the constant background, dq = scale dS K, dk = scale dS^T Q, dv = A^T dO. */
static void backward_case(const lcase *lc, uint32_t *sp) {
    const int gh = lc->gh, gw = lc->gw, R = lc->R, S = lc->S, T = gh * gw, mode = isinf(lc->bg);
    const int dq = 4, dv = 3, slots = S * S + 1;
    const float scale = 0.8f, bg = lc->bg;
    uint32_t seed = *sp;
    float *q = malloc(sizeof(float) * T * dq), *k = malloc(sizeof(float) * T * dq), *v = malloc(sizeof(float) * T * dv);
    float *dO = malloc(sizeof(float) * T * dv), *out = malloc(sizeof(float) * T * dv), *al = malloc(sizeof(float) * T * slots);
    float *gq = malloc(sizeof(float) * T * dq), *gk = malloc(sizeof(float) * T * dq), *gv = malloc(sizeof(float) * T * dv);
    float *wq = calloc((size_t)T * dq, sizeof(float)), *wk = calloc((size_t)T * dq, sizeof(float)), *wv = calloc((size_t)T * dv, sizeof(float));
    double *A = malloc(sizeof(double) * T * T), *srow = malloc(sizeof(double) * T), acc[6];
    for (int i = 0; i < T * dq; i++) q[i] = 2 * urand(&seed), k[i] = 2 * urand(&seed);
    for (int i = 0; i < T * dv; i++) v[i] = urand(&seed), dO[i] = urand(&seed);
    for (int i = 0; i < T; i++) dense_row(q, k, T, gw, dq, scale, R, bg, i, srow, A + (size_t)i * T);
    for (int i = 0; i < T; i++) {
        double dA[256], rs = 0;
        for (int j = 0; j < T; j++) {
            dA[j] = 0;
            for (int c = 0; c < dv; c++) dA[j] += (double)dO[i * dv + c] * v[j * dv + c];
            rs += A[(size_t)i * T + j] * dA[j];
            for (int c = 0; c < dv; c++) wv[j * dv + c] += (float)(A[(size_t)i * T + j] * dO[i * dv + c]);
        }
        for (int j = 0; j < T; j++) {
            if (abs(i / gw - j / gw) > R / 2 || abs(i % gw - j % gw) > R / 2) continue; /* constant */
            const double dS = A[(size_t)i * T + j] * (dA[j] - rs) * scale;
            for (int c = 0; c < dq; c++) wq[i * dq + c] += (float)(dS * k[j * dq + c]), wk[j * dq + c] += (float)(dS * q[i * dq + c]);
        }
    }
    vit_local_job f = {.gh = gh, .gw = gw, .dq = dq, .dv = dv, .scale = scale, .q = q, .k = k, .v = v, .ldq = dq,
                       .ldk = dq, .ldv = dv, .loc = {R, bg}, .out = out, .ldo = dv, .acc = acc, .att_local = al,
                       .rec_side = S};
    vit_local_forward(&f);
    vit_local_bwd_job b = {.gh = gh, .gw = gw, .dq = dq, .dv = dv, .scale = scale, .q = q, .k = k, .v = v, .dout = dO,
                           .ldq = dq, .ldk = dq, .ldv = dv, .ldo = dv, .loc = {R, bg}, .att_local = al,
                           .rec_side = S, .dq_out = gq, .dk_out = gk, .dv_out = gv, .acc = acc};
    vit_local_backward(&b);
    char what[64];
    snprintf(what, sizeof what, "backward %dx%d R=%d S=%d %s", gh, gw, R, S, mode ? "neg_inf" : "zero");
    CHECK(check_close("dq", gq, wq, (size_t)T * dq, 1e-6, 1e-4), "%s: dq", what);
    CHECK(check_close("dk", gk, wk, (size_t)T * dq, 1e-6, 1e-4), "%s: dk", what);
    CHECK(check_close("dv", gv, wv, (size_t)T * dv, 1e-6, 1e-4), "%s: dv", what);
    free(q), free(k), free(v), free(dO), free(out), free(al), free(gq), free(gk), free(gv);
    free(wq), free(wk), free(wv), free(A), free(srow);
    *sp = seed;
}

/* ---- a staged model with local and dense heads ---- */

#define STAGED "{\"architecture\": \"custom\", \"family\": \"swin\", \"img_size\": 24, \"patch_size\": 2, " \
    "\"in_chans\": 3, \"embed_dim\": 8, \"depths\": [1, 1], \"num_heads\": [2, 4], " \
    "\"mlp_ratio\": 2, \"num_classes\": 5, \"scopes\": [\"global\", \"global\"], \"attention\": [" \
    "{\"blocks\": \"0\", \"type\": \"mait\", \"mask_size\": [3, 5], \"mask_mode\": \"neg_inf\"}, " \
    "{\"blocks\": \"1\", \"type\": \"mait\", \"mask_size\": [3, 0, 0, 5], \"mask_mode\": \"zero\"}]}"

typedef struct {
    vit_config c;
    vit_params p;
    float *w;
} model_t;

static int model_make(model_t *m, const char *json) {
    as_error err = {0};
    memset(m, 0, sizeof *m);
    if (model_config_apply_json(&m->c, json, "t.json", &err) != AS_OK || vit_config_validate(&m->c, &err) != AS_OK) {
        CHECK(0, "config refused: %s", err.msg);
        return 0;
    }
    static vit_tensor_spec specs[VIT_MAX_TENSORS];
    const int n = vit_param_specs(&m->c, &m->p, specs, VIT_MAX_TENSORS);
    size_t count = 0;
    for (int i = 0; i < n; i++) count += vit_tensor_numel(&specs[i]);
    m->w = malloc(count * sizeof(float));
    uint32_t seed = 11;
    float *at = m->w;
    for (int i = 0; i < n; i++) {
        const size_t k = vit_tensor_numel(&specs[i]);
        const int ln = strstr(specs[i].name, "norm") && strstr(specs[i].name, "weight");
        for (size_t e = 0; e < k; e++) at[e] = ln ? 1.0f + 0.3f * urand(&seed) : 0.6f * urand(&seed);
        *specs[i].slot = at;
        at += k;
    }
    return 1;
}

typedef struct {
    float *attn[VIT_MAX_DEPTH], *scores[VIT_MAX_DEPTH], *q[VIT_MAX_DEPTH], *k[VIT_MAX_DEPTH];
    float logits[64];
} rec_t;

/* One forward of n images; recording (local: local records where every head is local). */
static void forward(const model_t *m, const float *x, int n, int record, int local, rec_t *r) {
    const vit_config *c = &m->c;
    vit_record rec = {0};
    rec.attn = r->attn, rec.scores = r->scores, rec.q = r->q, rec.k = r->k, rec.local_maps = local;
    for (int l = 0; l < c->depth; l++) {
        vit_geom g;
        vit_block_geom(c, l, &g);
        const int S = local ? vit_local_side(c, l) : 0;
        const size_t maps = (size_t)n * g.H * g.T * (S ? S * S + 1 : g.T), qk = (size_t)n * g.H * g.T * vit_qk_head_dim(c, l);
        r->attn[l] = record ? malloc(maps * sizeof(float)) : NULL;
        r->scores[l] = record ? malloc(maps * sizeof(float)) : NULL;
        r->q[l] = record ? malloc(qk * sizeof(float)) : NULL;
        r->k[l] = record ? malloc(qk * sizeof(float)) : NULL;
    }
    const size_t bytes = vit_acts_carve(c, n, NULL, NULL);
    void *arena = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    vit_acts a;
    vit_acts_carve(c, n, arena, &a);
    vit_forward(c, &m->p, &a, x, n, record ? &rec : NULL);
    memcpy(r->logits, a.logits, (size_t)n * c->num_classes * sizeof(float));
    free(arena);
}

static void rec_free(rec_t *r, int depth) {
    for (int l = 0; l < depth; l++) free(r->attn[l]), free(r->scores[l]), free(r->q[l]), free(r->k[l]);
}

static void test_model(void) {
    model_t m;
    if (!model_make(&m, STAGED)) return;
    const vit_config *c = &m.c;
    CHECK(vit_local_side(c, 0) == 5 && vit_local_side(c, 1) == 0, "local sides %d %d (want 5: every head "
          "masked; 0: dense heads in block 1)", vit_local_side(c, 0), vit_local_side(c, 1));
    vit_local loc;
    CHECK(vit_local_head(c, 1, 0, &loc) && loc.side == 3 && loc.background == 0.0f && !vit_local_head(c, 1, 1, NULL),
          "block 1: head 0 local (R 3, zero), head 1 dense");
    CHECK(vit_local_head(c, 0, 1, &loc) && loc.side == 5 && isinf(loc.background) && loc.background < 0,
          "block 0 head 1: R 5, neg_inf");
    const int n = 2;
    uint32_t seed = 5;
    float *x = malloc(sizeof(float) * n * 3 * 24 * 24);
    for (int i = 0; i < n * 3 * 24 * 24; i++) x[i] = urand(&seed);
    rec_t dense, local, none;
    forward(&m, x, n, 1, 0, &dense);
    forward(&m, x, n, 1, 1, &local);
    forward(&m, x, n, 0, 0, &none);
    CHECK(memcmp(dense.logits, local.logits, sizeof(float) * n * c->num_classes) == 0 &&
          memcmp(dense.logits, none.logits, sizeof(float) * n * c->num_classes) == 0,
          "the logits depend on what is recorded");
    for (int l = 0; l < c->depth; l++) {
        vit_geom g;
        vit_block_geom(c, l, &g);
        const int T = g.T, dq = vit_qk_head_dim(c, l), S = vit_local_side(c, l), slots = S * S + 1;
        double *srow = malloc(sizeof(double) * T), *mrow = malloc(sizeof(double) * T);
        float *want = malloc(sizeof(float) * T * T), *wants = malloc(sizeof(float) * T * T), *ex = malloc(sizeof(float) * T * T);
        for (int b = 0; b < n; b++)
            for (int h = 0; h < g.H; h++) {
                const size_t bh = (size_t)b * g.H + h;
                const int R = c->attn[l].mask_size[h];
                const double bg = c->attn[l].mask_mode == VIT_MASK_NEG_INF ? -INFINITY : 0.0;
                for (int i = 0; i < T; i++) {
                    dense_row(dense.q[l] + bh * T * dq, dense.k[l] + bh * T * dq, T, g.gw, dq,
                              vit_attn_scale(c, l), R ? R : 2 * g.gw + 1, bg, i, srow, mrow);
                    for (int j = 0; j < T; j++) want[(size_t)i * T + j] = (float)mrow[j], wants[(size_t)i * T + j] = (float)srow[j];
                }
                char what[48];
                snprintf(what, sizeof what, "block %d image %d head %d", l, b, h);
                CHECK(check_close(what, dense.attn[l] + bh * T * T, want, (size_t)T * T, 1e-6, 1e-4), "%s: map", what);
                CHECK(check_close(what, dense.scores[l] + bh * T * T, wants, (size_t)T * T, 1e-5, 1e-4), "%s: scores", what);
                if (!S) {
                    CHECK(memcmp(local.attn[l] + bh * T * T, dense.attn[l] + bh * T * T, sizeof(float) * T * T) == 0,
                          "%s: a dense block's map differs with local_maps", what);
                    continue;
                }
                vit_local_expand(local.attn[l] + bh * T * slots, g.gh, g.gw, S, ex);
                CHECK(memcmp(ex, dense.attn[l] + bh * T * T, sizeof(float) * T * T) == 0, "%s: local map", what);
                vit_local_expand(local.scores[l] + bh * T * slots, g.gh, g.gw, S, ex);
                CHECK(check_close(what, ex, dense.scores[l] + bh * T * T, (size_t)T * T, 0, 0), "%s: local scores", what);
            }
        free(srow), free(mrow), free(want), free(wants), free(ex);
    }
    /* no T x T scratch for block 0 (every head local): the arena is what the widest dense map
     * needs (block 1's, 6 x 6 tokens), not block 0's 12 x 12 */
    vit_config soft = *c;
    soft.attn[0].mask_mode = VIT_MASK_SOFT;
    const size_t with = vit_acts_carve(c, 4, NULL, NULL), without = vit_acts_carve(&soft, 4, NULL, NULL);
    CHECK(without - with >= (size_t)4 * 2 * 144 * 144 * sizeof(float) - 4 * 4 * 36 * 36 * sizeof(float),
          "arena %zu bytes with local block 0, %zu with a dense one", with, without);
    rec_free(&dense, c->depth), rec_free(&local, c->depth), rec_free(&none, c->depth);
    free(x);
    free(m.w);
}

/* info's counts: a local head's scores and values count its neighbourhoods' pairs. */
static void test_cost(void) {
    model_t m;
    if (!model_make(&m, STAGED)) return;
    vit_geom g;
    vit_block_geom(&m.c, 1, &g);
    const double P = (double)g.T * g.T;
    CHECK(vit_mech_head_entries(&m.c, 1, &g) == vit_local_pairs(6, 6, 3) + 2 * P + vit_local_pairs(6, 6, 5),
          "block 1 entries %g", vit_mech_head_entries(&m.c, 1, &g));
    free(m.w);
}

int main(void) {
    test_pairs();
    each_case(kernel_case, 7);
    each_case(backward_case, 9);
    test_model();
    test_cost();
    return check_finish("local");
}
