/* test_gemm.c: the linear layers on oneDNN with prepacked weights (core/gemm.h) compute what
 * OpenBLAS computes, to float32 rounding, for every kind of model and product (monolithic ViT
 * with every mechanism, the separate projections that write slices of wider rows, Swin, PVT v2,
 * CaiT), at every batch size (one primitive per row count), and give the same bits at 1 and 2
 * threads; ATTNSCOPE_GEMM's values are checked. And the plain attention that runs fused with them
 * (core/attn_kernel.c) against OpenBLAS's, with every record. In a build without oneDNN the pack is NULL and
 * the comparisons are of OpenBLAS with itself, which the test says. */
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <stdint.h>

#include "../cli/cli.h"
#include "../core/gemm.h"
#include "../core/kernels.h"
#include "../core/rng.h"
#include "check.h"

/* logits and every layer's attention maps of n images, with params p, at the given threads */
typedef struct {
    float *logits, *maps;
    size_t nl, nm;
} result;

static void run(const model *m, const vit_params *p, const float *x, int n, int threads, result *r) {
    const vit_config *c = &m->cfg;
    omp_set_num_threads(threads);
    void *arena = aligned_alloc(64, vit_acts_carve(c, n, NULL, NULL));
    vit_acts a;
    vit_acts_carve(c, n, arena, &a);
    float *rec[VIT_MAX_DEPTH] = {0};
    size_t per[VIT_MAX_DEPTH], total = 0;
    for (int l = 0; l < c->depth; l++) {
        vit_geom g;
        vit_block_geom(c, l, &g);
        per[l] = (size_t)n * g.H * g.problems * g.Tq * g.Tk;
        total += per[l];
    }
    r->maps = malloc(total * sizeof(float));
    r->nm = total;
    total = 0;
    for (int l = 0; l < c->depth; l++) rec[l] = r->maps + total, total += per[l];
    vit_record rc = {.attn = rec};
    vit_forward(c, p, &a, x, n, &rc);
    r->nl = (size_t)n * (c->num_classes > 0 ? c->num_classes : c->embed_dim);
    r->logits = malloc(r->nl * sizeof(float));
    memcpy(r->logits, a.logits, r->nl * sizeof(float));
    free(arena);
}

static double max_rel(const float *a, const float *b, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (1e-3 + fabs((double)b[i]));
        e = d > e ? d : e;
    }
    return e;
}

static void check_model(const char *name, int packed_expected) {
    model m;
    as_error err = {0};
    if (model_load(&m, fx(name), NULL, 0, &err) != AS_OK) {
        CHECK(0, "%s: %s", name, err.msg);
        return;
    }
    CHECK((m.params.pack != NULL) == packed_expected, "%s: loaded weights %s prepacked", name,
          packed_expected ? "are not" : "are");
    const vit_config *c = &m.cfg;
    const int n = 3;
    const size_t per = (size_t)c->in_chans * c->img_size * c->img_size;
    float *x = malloc(per * n * sizeof(float));
    uint32_t s = 7;
    for (size_t i = 0; i < per * n; i++) s = s * 1664525u + 1013904223u, x[i] = (float)(s >> 8) / (1 << 24) - 0.5f;
    vit_params plain = m.params;
    plain.pack = NULL;
    result p1, p2, q2, one;
    run(&m, &m.params, x, n, 1, &p1);
    run(&m, &m.params, x, n, 2, &p2);
    run(&m, &plain, x, n, 2, &q2);
    run(&m, &m.params, x + per, 1, 2, &one); /* another row count: image 1 alone */
    /* the products went through the pack: each block's projections at least, 4 runs */
    CHECK(!packed_expected || vit_gemm_pack_products(m.params.pack) >= 4L * 2 * c->depth,
          "%s: the pack computed %ld products", name, vit_gemm_pack_products(m.params.pack));
    CHECK(memcmp(p1.logits, p2.logits, p1.nl * 4) == 0 && memcmp(p1.maps, p2.maps, p1.nm * 4) == 0,
          "%s: prepacked products differ between 1 and 2 threads", name);
    const double el = max_rel(p2.logits, q2.logits, p2.nl), em = max_rel(p2.maps, q2.maps, p2.nm);
    CHECK(el < 1e-4 && em < 1e-4, "%s: prepacked against OpenBLAS: logits %.2e, maps %.2e (relative)", name, el, em);
    const size_t C = p2.nl / n;
    const double e1 = max_rel(one.logits, p2.logits + C, C);
    CHECK(e1 < 1e-4, "%s: image 1 alone against in a batch of 3: %.2e", name, e1);
    printf("%-14s prepacked vs OpenBLAS: logits %.1e, maps %.1e; batch 1 vs 3: %.1e\n", name, el, em, e1);
    /* more row counts than a weight keeps primitives for (8): the least recently used makes room,
     * and image 1 alone gives the same bits after them all */
    int stays = 1;
    for (int k = 2; k <= 10 && stays; k++) {
        float *xs = malloc(per * k * sizeof(float));
        for (int b = 0; b < k; b++) memcpy(xs + per * b, x + per * (b % n), per * sizeof(float));
        result rk;
        run(&m, &m.params, xs, k, 2, &rk);
        stays = memcmp(rk.logits + C, p2.logits + C, C * 4) == 0 || !packed_expected;
        free(rk.logits), free(rk.maps), free(xs);
    }
    result again;
    run(&m, &m.params, x + per, 1, 2, &again);
    CHECK(stays && memcmp(again.logits, one.logits, C * 4) == 0,
          "%s: after batches of 2..10 images, image 1's logits changed", name);
    free(again.logits), free(again.maps);
    result *all[] = {&p1, &p2, &q2, &one};
    for (int i = 0; i < 4; i++) free(all[i]->logits), free(all[i]->maps);
    free(x);
    model_free(&m);
}

/* max |a - b| over the largest |b|: records with values near zero (q, k, scores) compared at
 * their own scale. */
static double max_scaled(const float *a, const float *b, size_t n) {
    double e = 0, big = 0;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)a[i] - b[i]));
        big = fmax(big, fabs((double)b[i]));
    }
    return e / (big > 0 ? big : 1.0);
}

/* The fused attention's glue in core/vit.c: vit_cls at 96 px (145 tokens, so each problem is
 * three chunks of rows spread over the threads), forwards that record everything (float32 maps,
 * scores, q, k), only binary16 maps, or nothing: the logits have the same bits in all three and at
 * 1 and 2 threads; the binary16 maps are the float32 maps converted; and each record agrees with
 * OpenBLAS's path (the same weights without a pack) to float32 rounding. */
static void check_fused(void) {
    model m;
    as_error err = {0};
    if (model_load(&m, fx("vit_cls"), NULL, 96, &err) != AS_OK) {
        CHECK(0, "vit_cls at 96 px: %s", err.msg);
        return;
    }
    const vit_config *c = &m.cfg;
    if (!m.params.pack || vit_attn_fused_blocks(c) != c->depth) {
        printf("fused attention: not in this build or on this CPU (%d blocks)\n", vit_attn_fused_blocks(c));
        model_free(&m);
        return;
    }
    const int n = 2, T = vit_num_tokens(c), H = c->num_heads, L = c->depth, dq = c->embed_dim / H;
    CHECK(T > 128, "vit_cls at 96 px has %d tokens: fewer than three chunks", T);
    const size_t maps = (size_t)n * H * T * T, qk = (size_t)n * H * T * dq, per = (size_t)c->in_chans * 96 * 96;
    float *x = malloc(per * n * sizeof(float));
    uint32_t s = 11;
    for (size_t i = 0; i < per * n; i++) s = s * 1664525u + 1013904223u, x[i] = (float)(s >> 8) / (1 << 24) - 0.5f;
    enum { ALL, F16, NONE, OPENBLAS, RUNS };
    float *rec[RUNS][4][VIT_MAX_DEPTH] = {{{0}}}, *logits[RUNS];
    uint16_t *a16[VIT_MAX_DEPTH];
    vit_params plain = m.params;
    plain.pack = NULL;
    const size_t C = (size_t)c->num_classes;
    void *arena = aligned_alloc(64, vit_acts_carve(c, n, NULL, NULL));
    for (int r = 0; r < RUNS; r++) {
        vit_record rc = {0};
        if (r == ALL || r == OPENBLAS)
            for (int l = 0; l < L; l++)
                for (int q = 0; q < 4; q++) rec[r][q][l] = malloc((q < 2 ? maps : qk) * sizeof(float));
        if (r == ALL || r == OPENBLAS) rc.attn = rec[r][0], rc.scores = rec[r][1], rc.q = rec[r][2], rc.k = rec[r][3];
        if (r == F16) {
            for (int l = 0; l < L; l++) a16[l] = malloc(maps * 2);
            rc.attn16 = a16;
        }
        omp_set_num_threads(r == F16 ? 1 : 2);
        vit_acts a;
        vit_acts_carve(c, n, arena, &a);
        vit_forward(c, r == OPENBLAS ? &plain : &m.params, &a, x, n, &rc);
        logits[r] = malloc(n * C * sizeof(float));
        memcpy(logits[r], a.logits, n * C * sizeof(float));
    }
    CHECK(memcmp(logits[ALL], logits[F16], n * C * 4) == 0 && memcmp(logits[ALL], logits[NONE], n * C * 4) == 0,
          "fused attention: the logits depend on what is recorded or on the thread count");
    double worst[5] = {0};
    int f16_same = 1;
    uint16_t *want = malloc(maps * 2);
    for (int l = 0; l < L; l++) {
        kernels_f32_to_f16_array(want, rec[ALL][0][l], maps);
        f16_same &= memcmp(want, a16[l], maps * 2) == 0;
        for (int q = 0; q < 4; q++) {
            const double e = max_scaled(rec[ALL][q][l], rec[OPENBLAS][q][l], q < 2 ? maps : qk);
            worst[q] = e > worst[q] ? e : worst[q];
        }
    }
    worst[4] = max_scaled(logits[ALL], logits[OPENBLAS], n * C);
    CHECK(f16_same, "fused attention: binary16 maps are not the float32 maps converted");
    CHECK(worst[0] < 1e-4 && worst[1] < 1e-4 && worst[2] < 1e-4 && worst[3] < 1e-4 && worst[4] < 1e-4,
          "fused attention against OpenBLAS: maps %.1e, scores %.1e, q %.1e, k %.1e, logits %.1e (of the largest)",
          worst[0], worst[1], worst[2], worst[3], worst[4]);
    printf("fused attention (%d tokens) vs OpenBLAS: maps %.1e, scores %.1e, logits %.1e\n", T, worst[0], worst[1],
           worst[4]);
    for (int r = 0; r < RUNS; r++) {
        free(logits[r]);
        for (int l = 0; l < L; l++)
            for (int q = 0; q < 4; q++) free(rec[r][q][l]);
    }
    for (int l = 0; l < L; l++) free(a16[l]);
    free(want), free(arena), free(x);
    model_free(&m);
}

/* x rounded to bfloat16, round to nearest even (its upper 16 bits), as a float. */
static float to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* --precision bf16's products: y = x W^T + b with x and W rounded to bfloat16 and the sums in
 * float32, against the same rounding done here and summed in double (so a float32 product, or
 * another rounding, fails), for a batch of rows whose count needs its own primitive, with and
 * without accumulation. */
static void check_bf16(void) {
    vit_gemm_pack *pk = vit_gemm_pack_new_precision(VIT_GEMM_BF16);
    if (!pk) {
        printf("note: no oneDNN: bfloat16 products not checked\n");
        return;
    }
    CHECK(vit_gemm_pack_precision(pk) == VIT_GEMM_BF16 && strstr(vit_gemm_pack_name(pk), "bfloat16"),
          "the pack says bfloat16: %s", vit_gemm_pack_name(pk));
    enum { M = 37, N = 48, K = 200 };
    float *x = malloc(M * K * 4), *w = malloc(N * K * 4), *b = malloc(N * 4), *y = malloc(M * N * 4);
    rng_state rs = {3};
    for (int i = 0; i < M * K; i++) x[i] = rng_normal(&rs);
    for (int i = 0; i < N * K; i++) w[i] = rng_normal(&rs) * 0.1f;
    for (int i = 0; i < N; i++) b[i] = rng_normal(&rs);
    vit_gemm_pack *old = vit_gemm_use(pk);
    for (int acc = 0; acc < 2; acc++) {
        for (int i = 0; i < M * N; i++) y[i] = acc ? 0.5f * (float)i / (M * N) : 0.0f;
        CHECK(vit_gemm_linear(y, N, x, w, b, M, N, K, acc), "bf16 product ran (acc %d)", acc);
        double worst = 0, f32_gap = 0;
        for (int r = 0; r < M; r++)
            for (int c = 0; c < N; c++) {
                double want = b[c] + (acc ? 0.5 * (float)(r * N + c) / (M * N) : 0), exact = want, scale = 0;
                for (int k = 0; k < K; k++) {
                    want += (double)to_bf16(x[r * K + k]) * to_bf16(w[c * K + k]);
                    exact += (double)x[r * K + k] * w[c * K + k];
                    scale += fabs((double)x[r * K + k] * w[c * K + k]);
                }
                const double e = fabs(y[r * N + c] - want) / (scale + 1e-30);
                worst = e > worst ? e : worst;
                const double g = fabs(y[r * N + c] - exact) / (scale + 1e-30);
                f32_gap = g > f32_gap ? g : f32_gap;
            }
        /* float32 sums of K products: a few float32 ulps of the products' magnitude */
        CHECK(worst < 1e-5, "acc %d: bfloat16 product off the bf16-rounded sum by %g (relative to sum |x w|)", acc, worst);
        CHECK(f32_gap > 1e-4, "acc %d: the product is bfloat16's, not float32's (gap to the exact sum %g)", acc, f32_gap);
    }
    vit_gemm_use(old);
    vit_gemm_pack_free(pk);
    free(x), free(w), free(b), free(y);
}

int main(void) {
    check_tmp_init("gemm");
    char msg[256];
    CHECK(!vit_gemm_select("mkl", msg, sizeof msg) && strstr(msg, "openblas"), "unknown value: %s", msg);
    CHECK(vit_gemm_select("openblas", msg, sizeof msg), "openblas is always a value");
    CHECK(vit_gemm_pack_new() == NULL && strcmp(vit_gemm_name(), "OpenBLAS") == 0, "openblas: no packs");
    const int dnnl = vit_gemm_select("onednn", msg, sizeof msg);
    vit_gemm_pack *pk = vit_gemm_pack_new();
    CHECK(dnnl == (pk != NULL), "onednn selected (%d) but pack %p", dnnl, (void *)pk);
    vit_gemm_pack_free(pk);
    printf("linear layers: %s\n", vit_gemm_name());
    if (!dnnl) printf("note: built without oneDNN (%s): OpenBLAS compared with itself\n", msg);
    const char *models[] = {"vit_cls", "mech_cls", "vit_gap", "swin_tiny", "pvt_tiny", "pvt_li", "cait_tiny"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) check_model(models[i], dnnl);
    check_bf16();
    if (dnnl) check_fused();
    check_tmp_remove();
    return check_finish("gemm");
}
