/* test_mechanisms.c: the equivalences the papers imply (LMSA at full width, a covering MaiT
 * mask, an identity Refiner and an identity LaViT block all equal plain attention; LSLA's map is
 * softmax(q x^T * DS)), parameter counts against the engine's tensor lists, the JSON config
 * forms, and every bad configuration refused with the fix. */
#define _POSIX_C_SOURCE 200809L
#include "../cli/cli.h"
#include "../core/kernels.h"
#include "../core/rng.h"
#include "check.h"

enum { N_IMG = 2 };

/* A small custom model: 32 px, 8 px patches (4 x 4 grid), 3 heads of 8, depth 2. */
static vit_config small_cfg(int class_token) {
    vit_config c = {.name = "custom", .img_size = 32, .patch_size = 8, .in_chans = 3,
                    .embed_dim = 24, .depth = 2, .num_heads = 3, .mlp_hidden = 48,
                    .num_classes = 5, .qkv_bias = 1, .class_token = class_token,
                    .global_pool = class_token ? VIT_POOL_TOKEN : VIT_POOL_AVG,
                    .fc_norm = !class_token, .ln_eps = 1e-6f, .mean = {0.5f, 0.5f, 0.5f},
                    .std = {0.5f, 0.5f, 0.5f}, .crop_pct = 0.9f};
    return c;
}

/* Everything one forward pass records, per layer. */
typedef struct {
    float logits[N_IMG * 5];
    float *attn[2], *scores[2], *q[2], *k[2], *tokens[2], *x0[2];
} run;

static void run_free(run *r) {
    for (int l = 0; l < 2; l++) {
        free(r->attn[l]);
        free(r->scores[l]);
        free(r->q[l]);
        free(r->k[l]);
        free(r->tokens[l]);
        free(r->x0[l]);
    }
}

static void forward(const vit_config *c, const vit_params *p, run *r) {
    const size_t T = (size_t)vit_num_tokens(c), H = (size_t)c->num_heads, D = (size_t)c->embed_dim;
    memset(r, 0, sizeof *r);
    for (int l = 0; l < 2; l++) {
        vit_extra x;
        r->attn[l] = calloc(N_IMG * H * T * T, sizeof(float));
        r->scores[l] = calloc(N_IMG * H * T * T, sizeof(float));
        r->q[l] = calloc(N_IMG * H * T * D, sizeof(float));
        r->k[l] = calloc(N_IMG * H * T * D, sizeof(float));
        r->tokens[l] = calloc(N_IMG * T * D, sizeof(float));
        if (vit_extra_info(c, l, 0, &x)) r->x0[l] = calloc(N_IMG * (size_t)x.heads * T * T, sizeof(float));
    }
    vit_record rec = {.attn = r->attn, .scores = r->scores, .tokens = r->tokens,
                      .extra = {r->x0, NULL}};
    float *qs[2], *ks[2];
    for (int l = 0; l < 2; l++) {
        qs[l] = vit_has_keys(c, l) ? r->q[l] : NULL;
        ks[l] = vit_has_keys(c, l) ? r->k[l] : NULL;
    }
    rec.q = qs;
    rec.k = ks;
    size_t bytes = vit_acts_carve(c, N_IMG, NULL, NULL);
    void *arena = aligned_alloc(64, bytes);
    vit_acts a;
    vit_acts_carve(c, N_IMG, arena, &a);
    float x[N_IMG * 3 * 32 * 32];
    rng_state g = {7};
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = rng_normal(&g);
    vit_forward(c, p, &a, x, N_IMG, &rec);
    memcpy(r->logits, a.logits, sizeof r->logits);
    free(arena);
}

/* Compares the maps, scores and outputs of two runs of the same shapes. */
static void same_run(const char *what, const vit_config *c, const run *a, const run *b, double tol,
                     int layers_from) {
    const size_t T = (size_t)vit_num_tokens(c), H = (size_t)c->num_heads, D = (size_t)c->embed_dim;
    char label[160];
    snprintf(label, sizeof label, "%s: logits", what);
    check_close(label, a->logits, b->logits, N_IMG * 5, tol, tol);
    for (int l = layers_from; l < 2; l++) {
        snprintf(label, sizeof label, "%s: attn[%d]", what, l);
        check_close(label, a->attn[l], b->attn[l], N_IMG * H * T * T, tol, tol);
        snprintf(label, sizeof label, "%s: scores[%d]", what, l);
        check_close(label, a->scores[l], b->scores[l], N_IMG * H * T * T, tol, tol);
        snprintf(label, sizeof label, "%s: tokens[%d]", what, l);
        check_close(label, a->tokens[l], b->tokens[l], N_IMG * T * D, tol, tol);
    }
}

static int differs(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (fabsf(a[i] - b[i]) > 1e-4f) return 1;
    return 0;
}

static void test_lmsa_full_width(void) {
    vit_config c = small_cfg(1);
    model m;
    as_error err = {0};
    CHECK(model_init_random(&m, &c, 1, &err) == AS_OK, "%s", err.msg);
    run van, lm;
    forward(&c, &m.params, &van);
    /* LMSA with qk_dim = D and q, k, v taken from the fused qkv rows is plain attention */
    vit_config c2 = c;
    vit_params p2 = m.params;
    const int D = c.embed_dim;
    for (int l = 0; l < 2; l++) {
        c2.attn[l] = (vit_attn){.kind = VIT_ATTN_LMSA, .qk_dim = D};
        vit_block_params *b = &p2.blocks[l];
        b->q_w = b->qkv_w, b->k_w = b->qkv_w + (size_t)D * D, b->v_w = b->qkv_w + 2 * (size_t)D * D;
        b->q_b = b->qkv_b, b->k_b = b->qkv_b + D, b->v_b = b->qkv_b + 2 * D;
    }
    CHECK(vit_config_validate(&c2, &err) == AS_OK, "%s", err.msg);
    forward(&c2, &p2, &lm);
    same_run("lmsa qk_dim = dim vs vanilla", &c, &van, &lm, 1e-5, 0);
    /* and a narrower q/k changes the maps: the test can fail */
    run narrow;
    vit_config c3 = c2;
    c3.attn[0].qk_dim = c3.attn[1].qk_dim = 3; /* the extreme: one channel per head */
    forward(&c3, &p2, &narrow);
    const size_t T = (size_t)vit_num_tokens(&c);
    CHECK(differs(narrow.attn[0], van.attn[0], N_IMG * 3 * T * T), "qk_dim 3 must change the maps");
    CHECK(vit_qk_head_dim(&c3, 0) == 1, "one q/k channel per head");
    run_free(&van);
    run_free(&lm);
    run_free(&narrow);
    model_free(&m);
}

static void test_mait_cover(void) {
    for (int cls = 0; cls < 2; cls++) {
        vit_config c = small_cfg(cls);
        model m;
        as_error err = {0};
        CHECK(model_init_random(&m, &c, 2, &err) == AS_OK, "%s", err.msg);
        run van;
        forward(&c, &m.params, &van);
        const float alpha[3] = {0.3f, 0.5f, 0.7f};
        for (int mode = 0; mode < VIT_MASK_COUNT; mode++) {
            vit_config c2 = c;
            vit_params p2 = m.params;
            for (int l = 0; l < 2; l++) {
                c2.attn[l] = (vit_attn){.kind = VIT_ATTN_MAIT, .mask_mode = (vit_mask_mode)mode};
                for (int h = 0; h < 3; h++) c2.attn[l].mask_size[h] = 2 * vit_grid(&c) - 1;
                p2.blocks[l].mask_alpha = alpha;
            }
            CHECK(vit_config_validate(&c2, &err) == AS_OK, "%s", err.msg);
            run mt;
            forward(&c2, &p2, &mt);
            char what[96];
            snprintf(what, sizeof what, "mait covering mask (%s, %s) vs vanilla",
                     vit_mask_mode_name((vit_mask_mode)mode), cls ? "cls" : "no cls");
            same_run(what, &c, &van, &mt, 0, 0);
            run_free(&mt);
            /* a 3 x 3 mask on one head changes that head only, and keeps the class row */
            c2.attn[0].mask_size[0] = 3;
            c2.attn[0].mask_size[1] = c2.attn[0].mask_size[2] = 0;
            forward(&c2, &p2, &mt);
            const size_t T = (size_t)vit_num_tokens(&c);
            CHECK(differs(mt.scores[0], van.scores[0], T * T), "R = 3 changes head 0 (%s)", what);
            CHECK(!differs(mt.scores[0] + T * T, van.scores[0] + T * T, 2 * T * T), "heads 1, 2 unmasked (%s)", what);
            if (cls) CHECK(!differs(mt.scores[0], van.scores[0], T), "class row unmasked (%s)", what);
            /* the paper's zero mask: a masked score is exactly 0 (it still weighs e^0) */
            if (mode == VIT_MASK_ZERO) {
                const int P = vit_num_prefix(&c);
                const size_t far = (size_t)P * T + (size_t)(P + 15); /* patch 0 -> patch 15 */
                CHECK(mt.scores[0][far] == 0.0f && mt.attn[0][far] > 0.0f,
                      "masked entry: score %g, weight %g", (double)mt.scores[0][far], (double)mt.attn[0][far]);
            }
            if (mode == VIT_MASK_NEG_INF) {
                const int P = vit_num_prefix(&c);
                const size_t far = (size_t)P * T + (size_t)(P + 15);
                CHECK(mt.attn[0][far] == 0.0f, "-inf mask removes the key: weight %g", (double)mt.attn[0][far]);
            }
            run_free(&mt);
        }
        run_free(&van);
        model_free(&m);
    }
}

static void test_refiner_identity(void) {
    vit_config c = small_cfg(1);
    model m;
    as_error err = {0};
    CHECK(model_init_random(&m, &c, 3, &err) == AS_OK, "%s", err.msg);
    run van, rf;
    forward(&c, &m.params, &van);
    float eye[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, delta[3 * 9] = {0};
    for (int e = 0; e < 3; e++) delta[e * 9 + 4] = 1.0f;
    vit_config c2 = c;
    vit_params p2 = m.params;
    for (int l = 0; l < 2; l++) {
        c2.attn[l] = (vit_attn){.kind = VIT_ATTN_REFINER, .expanded_heads = 3, .kernel_size = 3};
        p2.blocks[l].expand = eye, p2.blocks[l].reduce = eye, p2.blocks[l].dla = delta;
    }
    CHECK(vit_config_validate(&c2, &err) == AS_OK, "%s", err.msg);
    forward(&c2, &p2, &rf);
    same_run("refiner identity + delta kernel vs vanilla", &c, &van, &rf, 1e-6, 0);
    const size_t T = (size_t)vit_num_tokens(&c);
    check_close("refiner identity: expanded maps = softmax maps", rf.x0[0], van.attn[0], N_IMG * 3 * T * T, 1e-6, 1e-6);
    /* a kernel with a neighbour tap spreads each map along its rows */
    delta[3] = 0.5f;
    run_free(&rf);
    forward(&c2, &p2, &rf);
    CHECK(differs(rf.attn[0], van.attn[0], 3 * T * T), "a 2-tap kernel changes head 0's map");
    CHECK(!differs(rf.attn[0] + T * T, van.attn[0] + T * T, 2 * T * T), "heads 1, 2 keep their maps");
    run_free(&van);
    run_free(&rf);
    model_free(&m);
}

static void test_less_identity(void) {
    vit_config c = small_cfg(1);
    c.attn[1] = (vit_attn){.kind = VIT_ATTN_LESS};
    model m;
    as_error err = {0};
    CHECK(model_init_random(&m, &c, 4, &err) == AS_OK, "%s", err.msg);
    const int T = vit_num_tokens(&c);
    float *eye = calloc((size_t)T * T, sizeof *eye);
    for (int i = 0; i < T; i++) eye[(size_t)i * T + i] = 1.0f;
    vit_params p = m.params;
    p.blocks[1].theta = p.blocks[1].psi = eye;
    run r;
    forward(&c, &p, &r);
    const size_t n = N_IMG * 3 * (size_t)T * T;
    check_close("less with identity Theta, Psi: scores = previous scores", r.scores[1], r.scores[0], n, 0, 0);
    check_close("less with identity Theta, Psi: maps = previous maps", r.attn[1], r.attn[0], n, 0, 0);
    /* a non-identity Theta transforms them */
    float *theta = malloc((size_t)T * T * sizeof *theta);
    memcpy(theta, eye, (size_t)T * T * sizeof *theta);
    theta[1] = 0.5f;
    p.blocks[1].theta = theta;
    run r2;
    forward(&c, &p, &r2);
    CHECK(differs(r2.scores[1], r2.scores[0], n), "Theta != I changes the scores");
    /* scores[1] = Psi A Theta^T: column 0 gains 0.5 x column 1 */
    CHECK(fabsf(r2.scores[1][0] - (r2.scores[0][0] + 0.5f * r2.scores[0][1])) < 1e-5f,
          "Theta acts on rows: %g vs %g", (double)r2.scores[1][0],
          (double)(r2.scores[0][0] + 0.5f * r2.scores[0][1]));
    run_free(&r);
    run_free(&r2);
    free(eye);
    free(theta);
    model_free(&m);
}

static void test_lsla_map(void) {
    vit_config c = small_cfg(1);
    c.attn[1] = (vit_attn){.kind = VIT_ATTN_LSLA, .dynamic_scale = 1, .inner_bias = VIT_BIAS_FULL};
    model m;
    as_error err = {0};
    CHECK(model_init_random(&m, &c, 5, &err) == AS_OK, "%s", err.msg);
    const int T = vit_num_tokens(&c), D = c.embed_dim, H = 3, hd = 8;
    float *zero = calloc((size_t)H * T * T, sizeof *zero);
    vit_params p = m.params;
    p.blocks[1].inner_bias = zero;
    run r;
    forward(&c, &p, &r);
    /* keys are x = norm1(block 0's output) split into heads */
    float *xn = malloc((size_t)N_IMG * T * D * sizeof *xn);
    kernels_layernorm(xn, r.tokens[0], p.blocks[1].norm1_w, p.blocks[1].norm1_b, N_IMG * T, D, c.ln_eps);
    double kerr = 0, aerr = 0;
    for (int b = 0; b < N_IMG; b++)
        for (int h = 0; h < H; h++) {
            const float *q = r.q[1] + ((size_t)b * H + h) * T * hd, *k = r.k[1] + ((size_t)b * H + h) * T * hd;
            for (int t = 0; t < T; t++)
                for (int d = 0; d < hd; d++)
                    kerr = fmax(kerr, fabs(k[t * hd + d] - xn[((size_t)b * T + t) * D + h * hd + d]));
            /* softmax(q x^T * DS) in double */
            for (int i = 0; i < T; i++) {
                double s[64], mx = -1e300, z = 0;
                for (int j = 0; j < T; j++) {
                    double dot = 0;
                    for (int d = 0; d < hd; d++) dot += (double)q[i * hd + d] * xn[((size_t)b * T + j) * D + h * hd + d];
                    s[j] = dot * p.blocks[1].ds[(size_t)i * T + j];
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j < T; j++) z += exp(s[j] - mx);
                for (int j = 0; j < T; j++) {
                    double want = exp(s[j] - mx) / z;
                    aerr = fmax(aerr, fabs(want - r.attn[1][(((size_t)b * H + h) * T + i) * T + j]));
                }
            }
        }
    CHECK(kerr < 1e-5, "lsla keys = norm1(x): max error %g", kerr);
    CHECK(aerr < 1e-5, "lsla map = softmax(q x^T * DS): max error %g", aerr);
    check_close("lsla without outer bias: softmax map = attn", r.x0[1], r.attn[1], N_IMG * 3 * (size_t)T * T, 0, 0);
    run_free(&r);
    free(xn);
    free(zero);
    model_free(&m);
}

/* cost's parameter count = the elements of the tensors the engine binds, for every mechanism */
static void test_param_counts(void) {
    const vit_config *base = vit_arch_find("deit_tiny_patch16_224");
    vit_attn kinds[] = {
        {.kind = VIT_ATTN_LMSA, .qk_dim = 3},
        {.kind = VIT_ATTN_LSLA, .dynamic_scale = 1, .inner_bias = VIT_BIAS_FULL, .outer_bias = VIT_BIAS_FULL},
        {.kind = VIT_ATTN_LSLA, .value_proj = 1, .no_proj = 1},
        {.kind = VIT_ATTN_MAIT, .mask_mode = VIT_MASK_SOFT, .mask_size = {3, 3, 0}},
        {.kind = VIT_ATTN_REFINER, .expanded_heads = 6, .kernel_size = 3},
        {.kind = VIT_ATTN_LESS},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        vit_config c = *base;
        for (int l = kinds[i].kind == VIT_ATTN_LESS ? 1 : 0; l < c.depth; l++) c.attn[l] = kinds[i];
        as_error err = {0};
        CHECK(vit_config_validate(&c, &err) == AS_OK, "%s", err.msg);
        vit_cost cost;
        vit_config_cost(&c, &cost);
        vit_params p;
        int n = vit_param_specs(&c, &p, NULL, 0);
        vit_tensor_spec *s = malloc((size_t)n * sizeof *s);
        vit_param_specs(&c, &p, s, n);
        double total = 0;
        for (int k = 0; k < n; k++) total += (double)vit_tensor_numel(&s[k]);
        free(s);
        CHECK(total == cost.params_total, "%s: tensors %.0f vs cost %.0f",
              vit_attn_name(kinds[i].kind), total, cost.params_total);
    }
    /* fvcore-style MACs: DeiT-Tiny 1.25 G (the paper's "1.3 G FLOPs") */
    vit_cost c;
    vit_config_cost(base, &c);
    CHECK(fabs(c.macs_total / 1e9 - 1.2537) < 0.0005, "DeiT-Tiny %.4f GMACs", c.macs_total / 1e9);
}

static void expect_invalid(vit_config c, const char *needle, const char *what) {
    as_error err = {0};
    as_status st = vit_config_validate(&c, &err);
    CHECK(st == AS_ERR_CONFIG && strstr(err.msg, needle), "%s: got \"%s\"", what, err.msg);
}

static void test_bad_configs(void) {
    vit_config c = small_cfg(1), b;
    b = c;
    b.attn[0] = (vit_attn){.kind = VIT_ATTN_MAIT, .mask_size = {9}};
    expect_invalid(b, "use at most 7", "mask larger than the grid");
    b.attn[0].mask_size[0] = 4;
    expect_invalid(b, "use an odd size", "even mask");
    b = c;
    b.attn[1] = (vit_attn){.kind = VIT_ATTN_LMSA, .qk_dim = 4};
    expect_invalid(b, "use a multiple of 3", "qk_dim not divisible");
    b = c;
    b.attn[0] = (vit_attn){.kind = VIT_ATTN_LESS};
    expect_invalid(b, "make block 0 vanilla", "less-attention first");
    b = c;
    b.attn[0] = (vit_attn){.kind = VIT_ATTN_REFINER, .expanded_heads = 3, .kernel_size = 3};
    b.attn[1] = (vit_attn){.kind = VIT_ATTN_LESS};
    expect_invalid(b, "put a vanilla", "less-attention after refiner");
    b = c;
    b.attn[0] = (vit_attn){.kind = VIT_ATTN_LSLA, .inner_bias = VIT_BIAS_RELATIVE};
    expect_invalid(b, "square M x M window", "relative table with a class token");
    b = c;
    b.attn[0] = (vit_attn){.kind = VIT_ATTN_REFINER, .expanded_heads = 3, .kernel_size = 4};
    expect_invalid(b, "must be odd", "even refiner kernel");
    /* without a class token the 4 x 4 tokens are a window: relative tables are fine */
    b = small_cfg(0);
    b.attn[0] = (vit_attn){.kind = VIT_ATTN_LSLA, .inner_bias = VIT_BIAS_RELATIVE, .outer_bias = VIT_BIAS_RELATIVE};
    as_error err = {0};
    CHECK(vit_config_validate(&b, &err) == AS_OK, "relative without prefix: %s", err.msg);
}

static void json_expect(const char *json, const char *needle) {
    vit_config c = small_cfg(1);
    as_error err = {0};
    as_status st = model_config_apply_json(&c, json, "cfg.json", &err);
    CHECK(st == AS_ERR_CONFIG && strstr(err.msg, needle) && strstr(err.msg, "cfg.json"),
          "%s: got \"%s\"", json, err.msg);
}

static void test_json(void) {
    /* one object for every block, then entries with "blocks" (later entries win) */
    vit_config c = small_cfg(1);
    as_error err = {0};
    CHECK(model_config_apply_json(&c, "{\"attention\": {\"type\": \"mait\", \"mask_size\": 3, "
                                      "\"heads\": [1]}}", "a.json", &err) == AS_OK, "%s", err.msg);
    CHECK(c.attn[0].kind == VIT_ATTN_MAIT && c.attn[1].kind == VIT_ATTN_MAIT &&
          c.attn[0].mask_size[0] == 0 && c.attn[0].mask_size[1] == 3, "object form");
    c = small_cfg(1);
    CHECK(model_config_apply_json(&c, "{\"depth\": 4, \"attention\": ["
                                      "{\"blocks\": \"0-3\", \"type\": \"lmsa\", \"qk_dim\": 3},"
                                      "{\"blocks\": [2], \"type\": \"less\"},"
                                      "{\"blocks\": 3, \"type\": \"lsla\", \"values\": \"v\", \"proj\": false, "
                                      "\"inner_bias\": \"none\", \"dynamic_scale\": false}]}",
                                  "b.json", &err) == AS_OK, "%s", err.msg);
    CHECK(c.attn[0].kind == VIT_ATTN_LMSA && c.attn[1].qk_dim == 3 && c.attn[2].kind == VIT_ATTN_LESS &&
          c.attn[3].kind == VIT_ATTN_LSLA && c.attn[3].value_proj && c.attn[3].no_proj &&
          !c.attn[3].dynamic_scale && c.attn[3].inner_bias == VIT_BIAS_NONE &&
          c.attn[3].outer_bias == VIT_BIAS_FULL, "blocks form");
    /* the config survives the trip through JSON (what traces store) */
    char *js = model_config_to_json(&c);
    vit_config back = small_cfg(1);
    CHECK(js && model_config_apply_json(&back, js, "trace", &err) == AS_OK, "%s", err.msg);
    CHECK(memcmp(back.attn, c.attn, sizeof c.attn) == 0, "attention round trip");
    free(js);
    /* a scale on vanilla blocks only is a setting too (it was dropped on the way out) */
    c = small_cfg(1);
    CHECK(model_config_apply_json(&c, "{\"attention\": {\"type\": \"vanilla\", \"scale\": 0.25}}", "s.json",
                                  &err) == AS_OK, "%s", err.msg);
    js = model_config_to_json(&c);
    back = small_cfg(1);
    CHECK(js && model_config_apply_json(&back, js, "trace", &err) == AS_OK, "%s", err.msg);
    CHECK(back.attn[0].scale == 0.25f && back.attn[1].scale == 0.25f, "vanilla scale round trip: %g",
          (double)back.attn[0].scale);
    free(js);

    json_expect("{\"attention\": {\"type\": \"lmsx\"}}", "\"type\" must be one of");
    json_expect("{\"attention\": {\"type\": \"lmsa\"}}", "lmsa needs \"qk_dim\"");
    json_expect("{\"attention\": {\"type\": \"lmsa\", \"qk_dim\": 4}}", "use a multiple of 3");
    json_expect("{\"attention\": {\"type\": \"mait\", \"qk_dim\": 4, \"mask_size\": 3}}",
                "\"qk_dim\" does not apply to mait");
    json_expect("{\"attention\": {\"type\": \"mait\", \"mask_size\": 3, \"heds\": [0]}}", "unknown key \"heds\"");
    json_expect("{\"attention\": {\"type\": \"mait\", \"mask_size\": 9}}", "larger than the 4x4");
    json_expect("{\"attention\": [{\"type\": \"vanilla\"}]}", "has 1 entries");
    json_expect("{\"attention\": [{\"blocks\": \"0-5\", \"type\": \"vanilla\"}]}", "name blocks 0..1");
    json_expect("{\"attention\": {\"type\": \"less\"}}", "make block 0 vanilla");
    json_expect("{\"attention\": {\"type\": \"lsla\", \"inner_bias\": \"relative\"}}", "square M x M");
    json_expect("{\"attention\": {\"type\": \"mait\", \"mask_size\": [3, 3]}}", "has 2 entries; the model has 3 heads");
    json_expect("{\"attention\": {\"type\": \"refiner\"}}", "needs \"expanded_heads\"");
}

/* A checkpoint whose soft-mask alphas leave (0, 1) is refused at load. */
static void test_alpha_check(void) {
    vit_config c = small_cfg(1);
    c.attn[0] = (vit_attn){.kind = VIT_ATTN_MAIT, .mask_mode = VIT_MASK_SOFT, .mask_size = {3, 3, 3}};
    model m;
    as_error err = {0};
    CHECK(model_init_random(&m, &c, 6, &err) == AS_OK, "%s", err.msg);
    char msg[256];
    CHECK(vit_params_check(&c, &m.params, msg, sizeof msg), "random alphas are in range");
    const float bad[3] = {0.5f, 1.5f, 0.5f};
    m.params.blocks[0].mask_alpha = bad;
    CHECK(!vit_params_check(&c, &m.params, msg, sizeof msg) && strstr(msg, "mask_alpha[1]"), "%s", msg);
    model_free(&m);
}

int main(void) {
    runtime_set_threads(0);
    test_lmsa_full_width();
    test_mait_cover();
    test_refiner_identity();
    test_less_identity();
    test_lsla_map();
    test_param_counts();
    test_bad_configs();
    test_json();
    test_alpha_check();
    return check_finish("mechanisms");
}
