/* test_reference.c: the engine against PyTorch on the committed fixtures (tools/make_fixtures.py):
 * logits, every attention map, scores, Q/K and block outputs within 1e-4; F16/BF16 weights;
 * position embeddings at other input sizes; preprocessing against PIL; thread independence. */
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <stdint.h>

#include "../cli/cli.h"
#include "../io/image.h"
#include "check.h"

/* Runs m on all images of the input tensor file, recording everything of every layer. */
enum { RQ = 7 }; /* attn, scores, q, k, tokens, extra 0, extra 1 */
typedef struct {
    int n, L;
    float *logits;
    float *features; /* (n, D) the pooled features (models without a head: what they give) */
    float *q[RQ][64]; /* [quantity][layer], NULL where the layer has none */
    float *pool_attn; /* (n, H, Np) the attention pooling's map (global_pool "map"), else NULL */
    const vit_config *cfg;
    void *mem;
} run_out;

static size_t per_image(const vit_config *c, int q, int l) {
    vit_geom g; /* a block's own sizes: every window of a staged block, or one T x T map */
    vit_block_geom(c, l, &g);
    const size_t T = (size_t)g.T, H = (size_t)g.H, maps = (size_t)g.problems * g.Tq * g.Tk;
    vit_extra x;
    switch (q) {
    case 0: case 1: return H * maps;
    case 2: return H * T * (size_t)vit_qk_head_dim(c, l);
    case 3: return H * (g.scope == VIT_SCOPE_SRA ? (size_t)g.Tk : T) * (size_t)vit_qk_head_dim(c, l);
    case 4: return T * (size_t)g.D;
    default: return vit_extra_info(c, l, q - 5, &x) ? (size_t)x.heads * maps : 0;
    }
}

static int run_model(const model *m, const char *inputs, run_out *o) {
    as_error err = {0};
    dataset ds;
    if (dataset_open(&ds, inputs, &err) != AS_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 0;
    }
    const vit_config *c = &m->cfg;
    const int n = ds.count, S = c->img_size;
    const size_t pool = c->global_pool == VIT_POOL_MAP ? (size_t)n * c->num_heads * vit_num_patches(c) : 0;
    size_t total = (size_t)n * c->num_classes + (size_t)n * c->embed_dim + pool;
    for (int q = 0; q < RQ; q++)
        for (int l = 0; l < c->depth; l++) total += per_image(c, q, l) * n;
    memset(o, 0, sizeof *o);
    o->n = n;
    o->L = c->depth;
    o->cfg = c;
    float *mem = malloc(total * sizeof(float));
    o->mem = mem;
    o->logits = mem;
    mem += (size_t)n * c->num_classes;
    o->features = mem;
    mem += (size_t)n * c->embed_dim;
    o->pool_attn = pool ? mem : NULL;
    mem += pool;
    for (int q = 0; q < RQ; q++)
        for (int l = 0; l < c->depth; l++) {
            const size_t f = per_image(c, q, l) * n;
            o->q[q][l] = f ? mem : NULL;
            mem += f;
        }
    vit_record rec = {.attn = o->q[0], .scores = o->q[1], .q = o->q[2], .k = o->q[3],
                      .tokens = o->q[4], .extra = {o->q[5], o->q[6]}, .pool_attn = o->pool_attn};
    size_t bytes = vit_acts_carve(c, n, NULL, NULL);
    void *arena = aligned_alloc(64, bytes);
    vit_acts a;
    vit_acts_carve(c, n, arena, &a);
    float *x = malloc((size_t)n * 3 * S * S * sizeof(float));
    for (int i = 0; i < n; i++) dataset_load(&ds, i, x + (size_t)i * 3 * S * S, NULL, c, &err);
    vit_forward(c, &m->params, &a, x, n, &rec);
    memcpy(o->logits, a.logits, (size_t)n * c->num_classes * sizeof(float));
    for (int i = 0; c->n_stages == 0 && i < n; i++) /* pooled rows are (n, 2, D): row 0 */
        memcpy(o->features + (size_t)i * c->embed_dim, a.pooled + (size_t)i * 2 * c->embed_dim,
               (size_t)c->embed_dim * sizeof(float));
    free(x);
    free(arena);
    dataset_free(&ds);
    return 1;
}

static void compare_expected(const char *label, const run_out *o, const char *expected, int all,
                             double tol) {
    safetensors st;
    as_error err = {0};
    if (safetensors_open(&st, expected, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    static const char *names[5] = {"attn", "scores", "q", "k", "tokens"};
    char what[128];
    int matched = 0;
    for (int i = 0; i < st.count; i++) {
        const safetensors_tensor *t = &st.tensors[i];
        float *want = malloc(t->numel * sizeof(float));
        safetensors_read_f32(&st, t, want, &err);
        const float *got = NULL;
        if (strcmp(t->name, "logits") == 0) got = o->logits;
        if (strcmp(t->name, "features") == 0) got = o->features;
        if (strcmp(t->name, "pool_attn") == 0) got = o->pool_attn;
        const char *dot = strrchr(t->name, '.');
        const int l = dot ? atoi(dot + 1) : -1;
        for (int q = 0; q < RQ && !got && dot && l >= 0 && l < o->L; q++) {
            vit_extra x;
            const char *nm = q < 5 ? names[q] : vit_extra_info(o->cfg, l, q - 5, &x) ? x.name : NULL;
            if (nm && strlen(nm) == (size_t)(dot - t->name) && strncmp(t->name, nm, strlen(nm)) == 0)
                got = o->q[q][l];
        }
        matched += got != NULL;
        snprintf(what, sizeof what, "%s %s", label, t->name);
        CHECK(got != NULL, "%s: no engine output for this tensor", what);
        if (got && (all || strcmp(t->name, "logits") == 0)) check_close(what, got, want, t->numel, tol, tol);
        free(want);
    }
    CHECK(matched == st.count && (!all || st.count > 1), "%s: %d of %d reference tensors compared",
          label, matched, st.count);
    safetensors_close(&st);
}

/* Each fixture model on the shared inputs.npy against its expected.safetensors. */
static void test_fixtures(const char *const *models, int n) {
    for (int i = 0; i < n; i++) {
        model m;
        as_error err = {0};
        int ok = model_load(&m, fx(models[i]), NULL, 0, &err) == AS_OK;
        CHECK(ok, "%s: %s", models[i], err.msg);
        if (!ok) continue;
        run_out o;
        if (run_model(&m, fx("inputs.npy"), &o)) {
            char exp[256];
            snprintf(exp, sizeof exp, "%s/expected.safetensors", models[i]);
            compare_expected(models[i], &o, fx(exp), 1, 1e-4);
            free(o.mem);
        }
        model_free(&m);
    }
}

/* CaiT (tools/make_cait_fixtures.py, tools/cait_ref.py): talking heads with the maps before and
 * after the mix, class attention, LayerScale; MaiT masks (zero) before and after the mix, soft after it. */
static void test_cait(void) {
    static const char *const models[] = {"cait_tiny", "cait_mait_before", "cait_mait_after", "cait_mait_soft"};
    test_fixtures(models, (int)(sizeof models / sizeof *models));
    /* --img-size 48: the 4 x 4 position embedding (no class slot) resampled to 6 x 6 as a ViT's
     * (tools/vitfam_ref.py resample_grid; tools/make_cait_fixtures.py) */
    model m;
    as_error err = {0};
    int ok = model_load(&m, fx("cait_tiny"), NULL, 48, &err) == AS_OK;
    CHECK(ok, "cait_tiny @48: %s", err.msg);
    run_out o;
    if (ok && run_model(&m, fx("inputs48.npy"), &o)) {
        compare_expected("cait_tiny@48", &o, fx("cait_tiny/expected48.safetensors"), 1, 1e-4);
        free(o.mem);
    }
    if (ok) model_free(&m);
}

static void test_models(void) {
    static const char *const models[] = {"vit_cls", "deit_dist", "vit_gap", "mech_cls", "mech_gap", "mech_dist"};
    test_fixtures(models, 6);
}

/* Swin (tools/make_swin_fixtures.py: torchvision's SwinTransformer, timm's names): logits,
 * every window map, scores, q, k and tokens, in both pad orders and both clamps; and the
 * window tables of core/geom.c against the ones tools/swin_ref.py built. */
static void test_swin(void) {
    static const struct {
        const char *dir, *inputs, *expected, *windows;
        vit_pad_order order;
    } t[] = {
        {"swin_tiny", "inputs.npy", "expected.safetensors", "windows.safetensors", VIT_PAD_FIRST},
        {"swin_pad", "inputs16_1.npy", "expected.safetensors", "windows.safetensors", VIT_PAD_FIRST},
        {"swin_pad", "inputs16_1.npy", "expected_roll_first.safetensors", "windows_roll_first.safetensors", VIT_PAD_ROLL_FIRST},
        {"swin_pad_tv", "inputs16_1.npy", "expected.safetensors", "windows.safetensors", VIT_PAD_FIRST},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        model m;
        as_error err = {0};
        int ok = model_load(&m, fx(t[i].dir), NULL, 0, &err) == AS_OK;
        CHECK(ok, "%s: %s", t[i].dir, err.msg);
        if (!ok) continue;
        m.cfg.pad_order = t[i].order;
        char path[256], label[128];
        snprintf(label, sizeof label, "%s/%s", t[i].dir, t[i].expected);
        run_out o;
        if (run_model(&m, fx(t[i].inputs), &o)) {
            snprintf(path, sizeof path, "%s/%s", t[i].dir, t[i].expected);
            compare_expected(label, &o, fx(path), 1, 1e-4);
            free(o.mem);
        }
        safetensors st;
        snprintf(path, sizeof path, "%s/%s", t[i].dir, t[i].windows);
        if (safetensors_open(&st, fx(path), &err) != AS_OK) {
            CHECK(0, "%s", err.msg);
            model_free(&m);
            continue;
        }
        for (int k = 0; k < st.count; k++) {
            const safetensors_tensor *x = &st.tensors[k];
            const char *dot = strrchr(x->name, '.');
            const int l = dot ? atoi(dot + 1) : -1;
            CHECK(l >= 0 && l < m.cfg.depth, "%s: %s names no block", label, x->name);
            if (l < 0 || l >= m.cfg.depth) continue;
            float *want = malloc(x->numel * sizeof(float));
            safetensors_read_f32(&st, x, want, &err);
            vit_geom g;
            vit_block_geom(&m.cfg, l, &g);
            if (strncmp(x->name, "geom.", 5) == 0) {
                const int got[8] = {g.stage, g.j, g.gh, g.gw, g.M, g.shift, g.ph, g.pw};
                int same = x->numel == 8;
                for (int e = 0; same && e < 8; e++) same = got[e] == (int)want[e];
                CHECK(same, "%s: %s: stage, j, grid, M, shift, padded grid differ", label, x->name);
            } else {
                const size_t n = (size_t)g.problems * g.M * g.M;
                int *tok = malloc(n * sizeof *tok);
                vit_window_tokens(&m.cfg, &g, tok);
                size_t bad = x->numel == n ? 0 : 1;
                for (size_t e = 0; !bad && e < n; e++) bad += tok[e] != (int)want[e];
                CHECK(!bad, "%s: %s differs from vit_window_tokens", label, x->name);
                free(tok);
            }
            free(want);
        }
        safetensors_close(&st);
        model_free(&m);
    }
}

/* PVT v2 (tools/make_pvt_fixtures.py: tools/pvt_ref.py from the equations, timm's names): logits,
 * every queries x reduced keys map, scores, q, k over the reduced keys and tokens; R > 1 and
 * R = 1 stages at 58 px (no multiple of the stride), linear SRA with unequal and overlapping pool
 * bins, LMSA's compressed q/k in SRA blocks (R = 2 and R = 1), LaViT's less-attention over
 * reduced keys (Theta T' x T', Psi T x T, chained, in both stages), LaViT's attention residual
 * into stage 1's first block (the previous stage's scores, LayerNorm; its softmax maps, no
 * norm, from a vanilla block: pvt_lavit_alt; a one-block stage that takes and feeds it:
 * pvt_lavit_d1); the key grids and the token and key centres the script derived from the conv arithmetic. */
static void test_pvt(void) {
    static const char *const t[][2] = {{"pvt_tiny", "pvt_tiny/inputs58.npy"}, {"pvt_li", "pvt_li/inputs40.npy"},
                                       {"pvt_lmsa", "inputs.npy"}, {"pvt_less", "inputs.npy"},
                                       {"pvt_lavit", "inputs.npy"}, {"pvt_lavit_alt", "inputs.npy"},
                                       {"pvt_lavit_d1", "inputs.npy"}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        model m;
        as_error err = {0};
        int ok = model_load(&m, fx(t[i][0]), NULL, 0, &err) == AS_OK;
        CHECK(ok, "%s: %s", t[i][0], err.msg);
        if (!ok) continue;
        char path[256];
        run_out o;
        if (run_model(&m, fx(t[i][1]), &o)) {
            snprintf(path, sizeof path, "%s/expected.safetensors", t[i][0]);
            compare_expected(t[i][0], &o, fx(path), 1, 1e-4);
            free(o.mem);
        }
        safetensors st;
        snprintf(path, sizeof path, "%s/geom.safetensors", t[i][0]);
        if (safetensors_open(&st, fx(path), &err) != AS_OK) {
            CHECK(0, "%s", err.msg);
            model_free(&m);
            continue;
        }
        for (int k = 0; k < st.count; k++) {
            const safetensors_tensor *x = &st.tensors[k];
            const char *dot = strrchr(x->name, '.');
            const int l = dot ? atoi(dot + 1) : -1;
            if (l < 0 || l >= m.cfg.depth) {
                CHECK(0, "%s: %s names no block", t[i][0], x->name);
                continue;
            }
            float *want = malloc(x->numel * sizeof(float));
            safetensors_read_f32(&st, x, want, &err);
            vit_geom g;
            vit_block_geom(&m.cfg, l, &g);
            size_t bad = 0;
            if (strncmp(x->name, "key_grid.", 9) == 0) {
                bad = x->numel != 3 || g.kgh != (int)want[0] || g.kgw != (int)want[1] || g.gh != (int)want[2] ||
                      g.Tk != g.kgh * g.kgw || g.Tq != g.T;
            } else if (strncmp(x->name, "key_centre.", 11) == 0) {
                bad = x->numel != (size_t)g.kgh;
                for (size_t e = 0; !bad && e < x->numel; e++)
                    bad += fabsf(vit_sra_key_centre(&g, (int)e, 0) - want[e]) > 1e-4f ||
                           fabsf(vit_sra_key_centre(&g, (int)e, 1) - want[e]) > 1e-4f;
            } else {
                bad = x->numel != (size_t)g.gh;
                for (size_t e = 0; !bad && e < x->numel; e++)
                    bad += fabsf(g.offset_px + g.stride_px * (float)e - want[e]) > 1e-4f;
            }
            CHECK(!bad, "%s: %s differs from vit_block_geom (kgh %d, kgw %d, stride %g, offset %g, key "
                  "stride %g, key offset %g)", t[i][0], x->name, g.kgh, g.kgw, (double)g.stride_px,
                  (double)g.offset_px, (double)g.key_stride_px, (double)g.key_offset_px);
            free(want);
        }
        safetensors_close(&st);
        model_free(&m);
    }
}

static void test_reduced_precision(void) {
    const char *kinds[2][2] = {{"vit_cls/model_f16.safetensors", "vit_cls/expected_f16.safetensors"},
                               {"vit_cls/model_bf16.safetensors", "vit_cls/expected_bf16.safetensors"}};
    for (int i = 0; i < 2; i++) {
        model m;
        as_error err = {0};
        int ok = model_load(&m, fx(kinds[i][0]), NULL, 0, &err) == AS_OK;
        CHECK(ok, "%s: %s", kinds[i][0], err.msg);
        if (!ok) continue;
        CHECK(strcmp(m.weights_dtype, i ? "BF16" : "F16") == 0, "dtype %s", m.weights_dtype);
        run_out o;
        if (run_model(&m, fx("inputs.npy"), &o)) {
            compare_expected(kinds[i][0], &o, fx(kinds[i][1]), 0, 1e-4);
            free(o.mem);
        }
        model_free(&m);
    }
}

static void test_other_sizes(void) {
    int sizes[2] = {48, 16};
    for (int i = 0; i < 2; i++) {
        model m;
        as_error err = {0};
        int ok = model_load(&m, fx("vit_cls"), NULL, sizes[i], &err) == AS_OK;
        CHECK(ok, "img_size %d: %s", sizes[i], err.msg);
        if (!ok) continue;
        char in[64], exp[64], label[64];
        snprintf(in, sizeof in, "inputs%d.npy", sizes[i]);
        snprintf(exp, sizeof exp, "vit_cls/expected%d.safetensors", sizes[i]);
        snprintf(label, sizeof label, "vit_cls@%d", sizes[i]);
        run_out o;
        if (run_model(&m, fx(in), &o)) {
            compare_expected(label, &o, fx(exp), 1, 1e-4);
            free(o.mem);
        }
        model_free(&m);
    }
    /* a size that is not a multiple of the patch is refused with the fix */
    model m;
    as_error err = {0};
    CHECK(model_load(&m, fx("vit_cls"), NULL, 30, &err) == AS_ERR_CONFIG && strstr(err.msg, "multiple"),
          "img_size 30: %s", err.msg);
}

/* 1 and 2 threads agree bit for bit, plain and with every mechanism */
static void test_threads(void) {
    const char *models[] = {"deit_dist", "mech_cls"};
    for (int i = 0; i < 2; i++) {
        model m;
        as_error err = {0};
        if (model_load(&m, fx(models[i]), NULL, 0, &err) != AS_OK) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        run_out a, b;
        runtime_set_threads(1);
        int ok = run_model(&m, fx("inputs.npy"), &a);
        runtime_set_threads(2);
        ok &= run_model(&m, fx("inputs.npy"), &b);
        CHECK(ok, "runs");
        if (ok) {
            char what[96];
            snprintf(what, sizeof what, "%s threads 1 vs 2 logits", models[i]);
            check_close(what, a.logits, b.logits, (size_t)a.n * m.cfg.num_classes, 0, 0);
            const int T = vit_num_tokens(&m.cfg);
            for (int l = 0; l < m.cfg.depth; l++) {
                snprintf(what, sizeof what, "%s threads 1 vs 2 attn[%d]", models[i], l);
                check_close(what, a.q[0][l], b.q[0][l], (size_t)a.n * m.cfg.num_heads * T * T, 0, 0);
            }
        }
        free(a.mem);
        free(b.mem);
        model_free(&m);
    }
    runtime_set_threads(0);
}

static void test_preprocess(void) {
    safetensors st;
    as_error err = {0};
    if (safetensors_open(&st, fx("preprocess_expected.safetensors"), &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    const char *files[4][2] = {{"img.png", "png"}, {"img.jpg", "jpg"}, {"img_gray.png", "gray"},
                               {"img_rgba.png", "rgba"}};
    vit_config cfg = {.name = "t", .img_size = 32, .patch_size = 8, .in_chans = 3, .embed_dim = 8,
                      .depth = 1, .num_heads = 1, .mlp_hidden = 8, .num_classes = 1,
                      .class_token = 1, .ln_eps = 1e-6f, .mean = {0.485f, 0.456f, 0.406f},
                      .std = {0.229f, 0.224f, 0.225f}, .crop_pct = 0.875f};
    for (int f = 0; f < 4; f++) {
        image im;
        int ok = image_load(&im, fx(files[f][0]), &err) == AS_OK;
        CHECK(ok, "%s: %s", files[f][0], err.msg);
        if (!ok) continue;
        char key[64];
        snprintf(key, sizeof key, "decoded.%s", files[f][1]);
        const safetensors_tensor *t = safetensors_find(&st, key);
        CHECK(t && t->numel == (size_t)im.w * im.h * 3, "%s: size %dx%d", key, im.w, im.h);
        if (t && t->numel == (size_t)im.w * im.h * 3) {
            size_t diff = 0;
            for (size_t i = 0; i < t->numel; i++) diff += t->data[i] != im.rgb[i];
            CHECK(diff == 0, "%s: %zu of %zu bytes differ from PIL", key, diff, t->numel);
        }
        for (int interp = 0; interp < 2; interp++) {
            cfg.interpolation = interp ? VIT_INTERP_BILINEAR : VIT_INTERP_BICUBIC;
            float x[3 * 32 * 32];
            uint8_t rgb[32 * 32 * 3];
            CHECK(image_preprocess(x, rgb, &im, &cfg, &err) == AS_OK, "%s", err.msg);
            snprintf(key, sizeof key, "crop.%s.%s", files[f][1], interp ? "bilinear" : "bicubic");
            t = safetensors_find(&st, key);
            CHECK(t && t->numel == sizeof rgb, "%s missing", key);
            if (!t) continue;
            int maxd = 0;
            size_t diff = 0;
            for (size_t i = 0; i < sizeof rgb; i++) {
                int d = abs((int)t->data[i] - (int)rgb[i]);
                diff += d != 0;
                maxd = d > maxd ? d : maxd;
            }
            CHECK(diff == 0, "%s: %zu of %zu bytes differ from PIL (max %d)", key, diff, sizeof rgb, maxd);
            /* normalisation as torchvision: (v / 255 - mean) / std */
            float want = ((float)rgb[0] / 255.0f - cfg.mean[0]) / cfg.std[0];
            CHECK(fabsf(x[0] - want) < 1e-6f, "normalise: %g vs %g", (double)x[0], (double)want);
        }
        image_free(&im);
    }
    safetensors_close(&st);
}

/* The modern ViT family (tools/make_vitfam_fixtures.py, tools/vitfam_ref.py written from the
 * equations): LayerScale, registers, no_embed_class, norm_pre, QuickGELU, MAP pooling, features
 * only, patch 14 with resampled position embeddings; logits or features, every map, scores,
 * q, k and block output within 1e-4, at the trained size and at the resampled ones. */
static void test_vitfam(void) {
    static const struct {
        const char *name;
        int sizes[3]; /* 0: the fixture's own */
    } fx_models[] = {{"vf_deit3", {0}}, {"vf_reg", {0, 48}}, {"vf_clip", {0}}, {"vf_map", {0}},
                     {"vf_map_reg", {0}}, {"vf_regavg", {0}}, {"vf_p14", {0, 28, 56}}};
    for (size_t i = 0; i < sizeof fx_models / sizeof fx_models[0]; i++)
        for (int k = 0; k < 3 && (k == 0 || fx_models[i].sizes[k]); k++) {
            const int S = fx_models[i].sizes[k];
            model m;
            as_error err = {0};
            int ok = model_load(&m, fx(fx_models[i].name), NULL, S, &err) == AS_OK;
            CHECK(ok, "%s @%d: %s", fx_models[i].name, S, err.msg);
            if (!ok) continue;
            char in[64], exp[128], label[96];
            snprintf(in, sizeof in, m.cfg.img_size == 32 ? "inputs.npy" : "inputs%d.npy", m.cfg.img_size);
            if (S) snprintf(exp, sizeof exp, "%s/expected%d.safetensors", fx_models[i].name, S);
            else snprintf(exp, sizeof exp, "%s/expected.safetensors", fx_models[i].name);
            snprintf(label, sizeof label, "%s@%d", fx_models[i].name, m.cfg.img_size);
            run_out o;
            if (run_model(&m, fx(in), &o)) {
                compare_expected(label, &o, fx(exp), 1, 1e-4);
                free(o.mem);
            }
            model_free(&m);
        }
}

int main(void) {
    test_swin();
    test_pvt();
    test_cait();
    runtime_set_threads(0);
    test_models();
    test_reduced_precision();
    test_other_sizes();
    test_vitfam();
    test_threads();
    test_preprocess();
    return check_finish("reference");
}
