/* test_swin_model.c: Swin as a model users name and load (issue 16 items 3 and 7): the built-in
 * names and timm's tags, staged configs in JSON (read, refused with the key, written back),
 * validation, parameter and MAC counts against closed forms and the published table, and the
 * official and torchvision checkpoint layouts renamed to timm's (buffers dropped, a relative
 * table of the wrong window refused). Needs no forward pass and no PyTorch. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "../io/layout.h"
#include "../io/model.h"
#include "check.h"
#include "swin_names.h"
#include "configtest.h" /* after swin_names.h, whose locals are named err too */


static void refused(const char *json, const char *want1, const char *want2) {
    vit_config c;
    as_status rc = apply(&c, json);
    CHECK(rc != AS_OK && strstr(err.msg, want1) && (!want2 || strstr(err.msg, want2)) &&
              !strchr(err.msg, '\n'),
          "%s -> %s (want \"%s\"%s%s)", json, rc == AS_OK ? "accepted" : err.msg, want1,
          want2 ? " and " : "", want2 ? want2 : "");
}

/* The ref helper's tiny-Swin fixture config, verbatim in form. */
#define FIXTURE_ARGS                                                                             \
    "\"family\": \"swin\", \"img_size\": 32, \"patch_size\": 2, \"in_chans\": 3, \"embed_dim\": " \
    "16, \"depths\": [2, 2], \"num_heads\": [2, 4], \"window_size\": 4, \"mlp_ratio\": 4, "       \
    "\"qkv_bias\": true, \"patch_norm\": true, \"pad_order\": \"pad_first\", \"window_clamp\": "  \
    "\"timm\""
#define FIXTURE_JSON                                                                            \
    "{\"architecture\": \"custom\", \"num_classes\": 10, \"model_args\": {" FIXTURE_ARGS "}, "     \
    "\"pretrained_cfg\": {\"input_size\": [3, 32, 32], \"crop_pct\": 0.875, \"interpolation\": " \
    "\"bicubic\", \"mean\": [0.485, 0.456, 0.406], \"std\": [0.229, 0.224, 0.225]}}"

static const swin_arch tiny_arch = {32, 2, 3, 16, 2, {2, 2}, {2, 4}, 4, 10, 1};

/* ---- built-in names ---- */

static void test_builtins(void) {
    static const struct {
        const char *name;
        int C0, d2, h0, M, img;
        float crop;
    } b[] = {{"swin_tiny_patch4_window7_224", 96, 6, 3, 7, 224, 0.9f},
             {"swin_small_patch4_window7_224", 96, 18, 3, 7, 224, 0.9f},
             {"swin_base_patch4_window7_224", 128, 18, 4, 7, 224, 0.9f},
             {"swin_base_patch4_window12_384", 128, 18, 4, 12, 384, 1.0f}};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        vit_config c;
        memset(&err, 0, sizeof err);
        CHECK(vit_arch_resolve(b[i].name, &c, &err) == AS_OK && vit_config_validate(&c, &err) == AS_OK,
              "%s: %s", b[i].name, err.msg);
        const int depths[4] = {2, 2, b[i].d2, 2};
        CHECK(c.family == VIT_FAMILY_SWIN && c.n_stages == 4 && c.img_size == b[i].img &&
                  c.patch_size == 4 && c.embed_dim == b[i].C0 && c.depth == 6 + b[i].d2 &&
                  c.ln_eps == 1e-5f && c.global_pool == VIT_POOL_AVG && !c.class_token &&
                  c.patch_norm && c.shift_windows && c.qkv_bias && c.crop_pct == b[i].crop &&
                  c.num_classes == 1000 && fabsf(c.mean[0] - 0.485f) < 1e-6f &&
                  c.interpolation == VIT_INTERP_BICUBIC && c.pad_order == VIT_PAD_FIRST &&
                  c.window_clamp == VIT_CLAMP_TIMM,
              "%s: fields", b[i].name);
        for (int s = 0; s < 4; s++)
            CHECK(c.stage[s].depth == depths[s] && c.stage[s].embed_dim == b[i].C0 << s &&
                      c.stage[s].num_heads == b[i].h0 << s && c.stage[s].mlp_hidden == 4 * (b[i].C0 << s) &&
                      c.stage[s].window == b[i].M && c.stage[s].scope == VIT_SCOPE_WINDOW &&
                      c.stage[s].down == (s ? VIT_DOWN_MERGE : VIT_DOWN_NONE),
                  "%s stage %d", b[i].name, s);
    }
    /* timm's tags (default_cfgs): in22k heads have 21841 classes, 384 crops 1.0 */
    vit_config c;
    CHECK(vit_arch_resolve("swin_tiny_patch4_window7_224.ms_in22k", &c, &err) == AS_OK &&
              c.num_classes == 21841 && c.crop_pct == 0.9f && fabsf(c.std[2] - 0.225f) < 1e-6f &&
              c.family == VIT_FAMILY_SWIN, "ms_in22k: %d (%s)", c.num_classes, err.msg);
    CHECK(vit_arch_resolve("swin_base_patch4_window12_384.ms_in22k_ft_in1k", &c, &err) == AS_OK &&
              c.num_classes == 1000 && c.crop_pct == 1.0f && c.img_size == 384, "384 tag: %s", err.msg);
    CHECK(vit_arch_resolve("swin_small_patch4_window7_224.ms_in1k", &c, &err) == AS_OK, "%s", err.msg);
    CHECK(vit_arch_resolve("swin_tiny_patch4_window7_224.in1k", &c, &err) == AS_ERR_CONFIG &&
              strstr(err.msg, "ms_in1k") && strstr(err.msg, "ms_in22k_ft_in1k"), "unknown tag: %s", err.msg);
    /* the families that stay refused, Swin V2 among them */
    CHECK(vit_arch_resolve("swinv2_tiny_window8_256", &c, &err) == AS_ERR_UNSUPPORTED &&
              strstr(err.msg, "Swin Transformer V2"), "swinv2: %s", err.msg);
    CHECK(vit_arch_resolve("beit_base_patch16_224", &c, &err) == AS_ERR_UNSUPPORTED, "beit: %s", err.msg);
    CHECK(vit_arch_resolve("swin_tiny_patch4_window7_22", &c, &err) == AS_ERR_CONFIG &&
              strstr(err.msg, "did you mean \"swin_tiny_patch4_window7_224\""), "typo: %s", err.msg);
}

/* ---- costs ---- */

/* Closed forms written from the module tree, not from vit_config_cost. Params: per block 12C^2 +
 * 13C + (2M-1)^2 h (two norms, qkv, proj, fc1, fc2 with biases; the relative table); per merge
 * into width C: LN(2C) and the 2C -> C reduction; stem conv + norm; final norm and head. MACs
 * (fvcore: products and convolutions): q/k/v and proj over every padded window slot, the MLP
 * over the real tokens, q k^T and A v per window, the merge's Linear, the head. */
static void closed_form(const swin_arch *a, double *params, double *macs) {
    const double P2 = (double)a->patch * a->patch;
    double g = a->img / a->patch, C = a->C0;
    *params = P2 * a->in_chans * C + C + (a->patch_norm ? 2 * C : 0);
    *macs = g * g * P2 * a->in_chans * C;
    for (int s = 0; s < a->n_stages; s++) {
        if (s > 0) {
            g = ceil(g / 2);
            *params += 2 * (4 * C) + 4 * C * 2 * C; /* LN(4C) and the (2C, 4C) reduction, C = C_prev */
            *macs += g * g * 4 * C * 2 * C;
            C *= 2;
        }
        const double M = swin_stage_window(a, s), h = a->heads[s];
        const double nw = ceil(g / M) * ceil(g / M), Tp = nw * M * M;
        for (int j = 0; j < a->depths[s]; j++) {
            *params += 12 * C * C + 13 * C + (2 * M - 1) * (2 * M - 1) * h;
            *macs += Tp * 4 * C * C + g * g * 8 * C * C + 2 * nw * M * M * M * M * C;
        }
    }
    *params += 2 * C + C * a->K + a->K;
    *macs += C * a->K;
}

static void test_costs(void) {
    static const struct {
        const char *name;
        swin_arch a;
        double params;  /* timm's exact count */
        double gmacs;   /* the published figure, to the printed digit */
    } t[] = {
        {"swin_tiny_patch4_window7_224", {224, 4, 3, 96, 4, {2, 2, 6, 2}, {3, 6, 12, 24}, 7, 1000, 1}, 28288354, 4.5},
        {"swin_small_patch4_window7_224", {224, 4, 3, 96, 4, {2, 2, 18, 2}, {3, 6, 12, 24}, 7, 1000, 1}, 49606258, 8.7},
        {"swin_base_patch4_window7_224", {224, 4, 3, 128, 4, {2, 2, 18, 2}, {4, 8, 16, 32}, 7, 1000, 1}, 87768224, 15.4},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        vit_cost c;
        vit_config_cost(vit_arch_find(t[i].name), &c);
        double p, m;
        closed_form(&t[i].a, &p, &m);
        CHECK(c.params_total == t[i].params && p == t[i].params, "%s: %.0f params, closed form %.0f, "
              "timm %.0f", t[i].name, c.params_total, p, t[i].params);
        CHECK(fabs(round(c.macs_total / 1e8) / 10 - t[i].gmacs) < 1e-9 && c.macs_total == m,
              "%s: %.4f GMACs, closed form %.4f, published %.1f", t[i].name, c.macs_total / 1e9,
              m / 1e9, t[i].gmacs);
        /* the same tensors enumerated one by one */
        static swin_tensor ts[1200];
        const int n = swin_timm_tensors(&t[i].a, ts);
        double numel = 0;
        for (int k = 0; k < n; k++) {
            double e = 1;
            for (int d = 0; d < ts[k].ndim; d++) e *= (double)ts[k].shape[d];
            numel += e;
        }
        CHECK(numel == t[i].params, "%s: %d tensors of %.0f elements", t[i].name, n, numel);
        /* the parts (stem, stages, head) add up to the whole, and so do the components */
        double ps = c.stem.params_total + c.head.params_total, ms = c.stem.macs_total + c.head.macs_total;
        for (int s = 0; s < c.n_stages; s++) ps += c.stage[s].params_total, ms += c.stage[s].macs_total;
        double pc = 0;
        for (int k = 0; k < VIT_COMP_COUNT; k++) pc += c.params[k];
        CHECK(c.n_stages == 4 && ps == c.params_total && fabs(ms - c.macs_total) < 1 && pc == c.params_total,
              "%s: parts %.0f / %.0f", t[i].name, ps, ms);
        /* stage 2 of Swin-T alone: the merge into 384 and six blocks of width 384, 12 heads */
        if (i == 0)
            CHECK(c.stage[2].params_total == 2 * 768 + 384.0 * 768 + 6 * (12.0 * 384 * 384 + 13 * 384 + 169 * 12) &&
                      c.stage[2].params[VIT_COMP_DOWNSAMPLE] == 384.0 * 768,
                  "Swin-T stage 2: %.0f", c.stage[2].params_total);
    }
    /* grids the window does not divide (padded windows count in full) and the clamp: Swin-T at
     * 256 (grids 64..8, padded to multiples of 7) and at 192 (the last 6x6 grid: timm shrinks the
     * window to 6, torchvision keeps 7 and pads) */
    const int sizes[2] = {256, 192};
    for (int i = 0; i < 2; i++)
        for (int clamp = 0; clamp < VIT_CLAMP_COUNT; clamp++) {
            vit_config c = *vit_arch_find("swin_tiny_patch4_window7_224");
            c.img_size = sizes[i];
            c.window_clamp = (vit_window_clamp)clamp;
            CHECK(vit_config_validate(&c, &err) == AS_OK, "%d: %s", sizes[i], err.msg);
            vit_cost k;
            vit_config_cost(&c, &k);
            swin_arch a = {sizes[i], 4, 3, 96, 4, {2, 2, 6, 2}, {3, 6, 12, 24}, 7, 1000, 1};
            double p, m;
            closed_form(&a, &p, &m);
            if (clamp == VIT_CLAMP_TORCHVISION && sizes[i] == 192) {
                /* the last stage keeps M = 7 on a 6x6 grid: one padded 7x7 window */
                p += 2 * (169.0 - 121) * 24;
                m += 2 * ((49.0 - 36) * 4 * 768 * 768 + 2 * (49.0 * 49 - 36 * 36) * 768);
            }
            CHECK(k.params_total == p && k.macs_total == m, "Swin-T at %d, clamp %s: %.0f / %.0f "
                  "params, %.0f / %.0f MACs", sizes[i], vit_window_clamp_name(c.window_clamp),
                  k.params_total, p, k.macs_total, m);
        }
    /* the monolithic ViT keeps its counts: one stage, no downsample */
    vit_cost d;
    vit_config_cost(vit_arch_find("deit_tiny_patch16_224"), &d);
    CHECK(d.params_total == 5717416 && d.n_stages == 1 && d.params[VIT_COMP_DOWNSAMPLE] == 0 &&
              d.stem.params_total + d.stage[0].params_total + d.head.params_total == 5717416,
          "DeiT-Tiny: %.0f", d.params_total);
}

/* ---- JSON ---- */

static void test_json(void) {
    vit_config c, d;
    CHECK(apply(&c, FIXTURE_JSON) == AS_OK, "fixture config: %s", err.msg);
    CHECK(c.family == VIT_FAMILY_SWIN && c.n_stages == 2 && c.depth == 4 && c.img_size == 32 &&
              c.patch_size == 2 && c.embed_dim == 16 && c.num_heads == 2 && c.num_classes == 10 &&
              c.stage[1].embed_dim == 32 && c.stage[1].num_heads == 4 && c.stage[1].mlp_hidden == 128 &&
              c.stage[0].window == 4 && c.stage[1].down == VIT_DOWN_MERGE && c.patch_norm &&
              c.ln_eps == 1e-5f && c.global_pool == VIT_POOL_AVG && c.crop_pct == 0.875f &&
              c.pad_order == VIT_PAD_FIRST && c.window_clamp == VIT_CLAMP_TIMM && !c.fc_norm,
          "fixture fields");
    /* written back (what traces and checkpoints store) and read again: the same config */
    const char *variants[] = {
        FIXTURE_JSON,
        "{\"architecture\": \"swin_base_patch4_window12_384.ms_in22k\"}",
        "{\"architecture\": \"custom\", \"family\": \"swin\", \"embed_dim\": 24, \"depths\": [1, 3, 2], "
        "\"num_heads\": [1, 2, 4], \"window_size\": 5, \"mlp_ratio\": 4.3, \"img_size\": 60, "
        "\"patch_size\": 3, \"pad_order\": \"roll_first\", \"window_clamp\": \"torchvision\", "
        "\"patch_norm\": false, \"qkv_bias\": false, \"global_pool\": \"avg\", \"num_classes\": 0}",
        /* timm's per-stage widths (embed_dim as a list), not doubling */
        "{\"family\": \"swin\", \"img_size\": 40, \"patch_size\": 4, \"embed_dim\": [8, 24], "
        "\"depths\": [1, 2], \"num_heads\": [2, 3], \"window_size\": 3, \"num_classes\": 5}",
    };
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        CHECK(apply(&c, variants[v]) == AS_OK, "variant %zu: %s", v, err.msg);
        char *json = model_config_to_json(&c);
        CHECK(json && apply(&d, json) == AS_OK, "variant %zu written back: %s", v, err.msg);
        int same = json && strcmp(c.name, d.name) == 0 && c.family == d.family && c.n_stages == d.n_stages &&
                   c.depth == d.depth && c.img_size == d.img_size && c.patch_size == d.patch_size &&
                   c.embed_dim == d.embed_dim && c.num_heads == d.num_heads && c.mlp_hidden == d.mlp_hidden &&
                   c.num_classes == d.num_classes && c.qkv_bias == d.qkv_bias && c.patch_norm == d.patch_norm &&
                   c.pad_order == d.pad_order && c.window_clamp == d.window_clamp && c.ln_eps == d.ln_eps &&
                   c.shift_windows == d.shift_windows && c.crop_pct == d.crop_pct &&
                   memcmp(c.mean, d.mean, sizeof c.mean) == 0 && memcmp(c.std, d.std, sizeof c.std) == 0 &&
                   memcmp(c.stage, d.stage, sizeof c.stage) == 0;
        CHECK(same, "variant %zu does not round-trip: %s", v, json ? json : "(null)");
        free(json);
    }
    /* mlp_ratio 4.3: each stage's width is int(4.3 x width), as timm */
    CHECK(apply(&c, variants[2]) == AS_OK && c.stage[0].mlp_hidden == 103 && c.stage[1].mlp_hidden == 206 &&
              c.stage[2].mlp_hidden == 412 && c.depth == 6 && c.stage[2].embed_dim == 96,
          "mlp_ratio 4.3: %d %d %d", c.stage[0].mlp_hidden, c.stage[1].mlp_hidden, c.stage[2].mlp_hidden);
    CHECK(apply(&c, variants[3]) == AS_OK && c.stage[1].embed_dim == 24 && c.stage[1].mlp_hidden == 96 &&
              c.embed_dim == 8, "embed_dim list: %s", err.msg);
    refused("{\"family\": \"swin\", \"embed_dim\": [8, 16, 32], \"depths\": [1, 1], \"num_heads\": [1, 1]}",
            "\"embed_dim\" lists 3 widths", NULL);
    /* an architecture's keys override it; timm's Hugging Face config.json for Swin */
    CHECK(apply(&c, "{\"architecture\": \"swin_tiny_patch4_window7_224\", \"num_classes\": 1000, "
                    "\"num_features\": 768, \"global_pool\": \"avg\", \"pretrained_cfg\": {\"tag\": "
                    "\"ms_in1k\", \"custom_load\": false, \"input_size\": [3, 224, 224], "
                    "\"fixed_input_size\": true, \"interpolation\": \"bicubic\", \"crop_pct\": 0.9, "
                    "\"crop_mode\": \"center\", \"mean\": [0.485, 0.456, 0.406], \"std\": [0.229, "
                    "0.224, 0.225], \"num_classes\": 1000, \"pool_size\": [7, 7], \"first_conv\": "
                    "\"patch_embed.proj\", \"classifier\": \"head.fc\"}}") == AS_OK &&
              !c.fc_norm && c.n_stages == 4, "HF config: %s (fc_norm %d)", err.msg, c.fc_norm);
    CHECK(apply(&c, "{\"architecture\": \"swin_tiny_patch4_window7_224\", \"window_size\": [8, 8], "
                    "\"img_size\": 256}") == AS_OK && c.stage[3].window == 8, "window pair: %s", err.msg);
    /* the per-block "attention" key counts blocks over all stages */
    CHECK(apply(&c, "{\"architecture\": \"swin_tiny_patch4_window7_224\", \"attention\": "
                    "[{\"blocks\": \"0-11\", \"type\": \"vanilla\", \"scale\": 0.5}]}") == AS_OK &&
              c.attn[11].scale == 0.5f, "attention over 12 blocks: %s", err.msg);
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"attention\": {\"blocks\": [12], "
            "\"type\": \"vanilla\"}}", "blocks 0..11", NULL);
    /* mechanisms declare their scopes (core/mech): lmsa runs in windows, mait does not; an
     * entry's per-head keys are sized by its blocks' own heads (stage 2: 12) */
    CHECK(apply(&c, "{\"architecture\": \"swin_tiny_patch4_window7_224\", \"attention\": {\"blocks\": [5], "
                    "\"type\": \"lmsa\", \"qk_dim\": 12}}") == AS_OK && c.attn[5].kind == VIT_ATTN_LMSA &&
              vit_qk_head_dim(&c, 5) == 1 && vit_qk_head_dim(&c, 0) == 32,
          "lmsa in a window: %s", err.msg);
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"attention\": {\"blocks\": [5], "
            "\"type\": \"lmsa\", \"qk_dim\": 18}}", "block 5: lmsa qk_dim 18 is not a positive multiple of num_heads 12", NULL);
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"attention\": {\"blocks\": [5], "
            "\"type\": \"mait\", \"mask_size\": [3, 3, 3]}}", "stage 2 (12 heads)", "has 3 entries");
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"attention\": {\"blocks\": [5], "
            "\"type\": \"mait\", \"mask_size\": [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3]}}",
            "block 5 (stage 2, block 1 there): mait attention cannot run in window scope", "use one of vanilla, lmsa, lsla");
    /* keys of the other family, typos, and Swin's own refusals */
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"depth\": 12}", "\"depth\" is a ViT key", "\"depths\"");
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"model_args\": {\"class_token\": true}}",
            "model_args.class_token", "no class token");
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"mlp_hidden\": 384}", "mlp_hidden", "mlp_ratio");
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"init_values\": 0.1}", "init_values", "ViT key");
    refused("{\"architecture\": \"deit_tiny_patch16_224\", \"window_size\": 7}", "\"window_size\" is a Swin key",
            "\"family\": \"swin\"");
    refused("{\"architecture\": \"custom\", \"embed_dim\": 32, \"depths\": [2], \"num_heads\": [2]}",
            "\"depths\" is a Swin key", NULL);
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"depths\": [2, 2, 6]}", "\"num_heads\" too", NULL);
    refused("{\"family\": \"swin\", \"depths\": [2, 2], \"num_heads\": [2]}", "\"num_heads\" has 1 entries", NULL);
    refused("{\"family\": \"swin\", \"depths\": [2, 2, 2, 2, 2], \"num_heads\": [1, 1, 1, 1, 1]}", "\"depths\"", "1 to 4");
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"windw_size\": 7}", "did you mean \"window_size\"", NULL);
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"global_pool\": \"token\"}", "global_pool", "use \"avg\"");
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"family\": \"vit\"}", "disagrees", NULL);
    refused("{\"family\": \"pvt\"}", "\"family\" must be one of", NULL);
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"pad_order\": \"roll\"}", "pad_order", "pad_first");
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"window_clamp\": 1}", "window_clamp", "torchvision");
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"window_size\": [7, 8]}", "square", NULL);
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"num_features\": 96}", "num_features", "768");
    refused("{\"architecture\": \"swin_tiny_patch4_window7_224\", \"head_dim\": 16}", "head_dim", "not supported yet");
}

/* ---- validation ---- */

static void invalid(vit_config c, const char *want, const char *what) {
    memset(&err, 0, sizeof err);
    as_status st = vit_config_validate(&c, &err);
    CHECK(st == AS_ERR_CONFIG && strstr(err.msg, want) && !strchr(err.msg, '\n'), "%s: %s", what,
          st == AS_OK ? "accepted" : err.msg);
}

static void test_validate(void) {
    const vit_config base = *vit_arch_find("swin_tiny_patch4_window7_224");
    vit_config c = base;
    for (int s = 0; s < 4; s++) c.stage[s].window = 65;
    invalid(c, "\"window_size\" 65 is outside 1..64", "window over the limit");
    invalid(c, "M^2 x M^2", "the limit's reason");
    c = base;
    c.stage[2].num_heads = 5;
    invalid(c, "\"num_heads\"[2] = 5: stage 2's width 384 is not divisible by it", "heads");
    c = base;
    c.attn[4].kind = VIT_ATTN_MAIT;
    invalid(c, "block 4 (stage 2, block 0 there): mait attention cannot run in window scope", "mait in a window");
    c = base;
    c.img_size = 16;
    invalid(c, "too small for 3 merges", "grid too small");
    c = base;
    c.img_size = 230;
    invalid(c, "not a multiple of patch_size 4", "img_size");
    c = base;
    c.class_token = 1;
    invalid(c, "no class or distillation token", "class token");
    c = base;
    c.n_stages = 5;
    invalid(c, "give 1 to 4", "five stages");
    c = base;
    c.family = VIT_FAMILY_VIT;
    invalid(c, "set \"family\" to \"swin\"", "stages without the family");
    /* windows larger than the grid are fine: the clamp makes one window */
    c = base;
    for (int s = 0; s < 4; s++) c.stage[s].window = 64;
    CHECK(vit_config_validate(&c, &err) == AS_OK, "window 64: %s", err.msg);
}

/* ---- checkpoint layouts ---- */

static char tmp[256];

static void test_layouts(void) {
    vit_config cfg;
    CHECK(apply(&cfg, FIXTURE_JSON) == AS_OK, "%s", err.msg);
    static swin_tensor want[64];
    const int n = swin_timm_tensors(&tiny_arch, want);
    safetensors st[3];
    const char *lname[3] = {"timm", "official", "torchvision"};
    for (int layout = 0; layout < 3; layout++) {
        char path[320];
        snprintf(path, sizeof path, "%s/%s.safetensors", tmp, lname[layout]);
        const int written = swin_write_layout(path, layout, &tiny_arch, 0);
        CHECK(written > 0, "%s: write failed", path);
        CHECK(safetensors_open(&st[layout], path, &err) == AS_OK, "%s", err.msg);
        layout_info li;
        CHECK(layout_to_timm(&st[layout], &cfg, &li, &err) == AS_OK, "%s: %s", lname[layout], err.msg);
        CHECK(li.layout == (layout_kind)layout && strcmp(layout_name(li.layout), lname[layout]) == 0,
              "%s detected as %s", lname[layout], layout_name(li.layout));
        CHECK(li.n_ignored == written - n && st[layout].count == n, "%s: %d ignored of %d, %d left",
              lname[layout], li.n_ignored, written, st[layout].count);
        /* every timm tensor present with its shape and the values written for it */
        for (int i = 0; i < n; i++) {
            const safetensors_tensor *t = safetensors_find(&st[layout], want[i].name);
            int ok = t && t->ndim == want[i].ndim;
            for (int d = 0; ok && d < t->ndim; d++) ok = t->shape[d] == want[i].shape[d];
            float v[2] = {0, 0};
            if (ok) {
                float *all = malloc(t->numel * sizeof *all);
                ok = all && safetensors_read_f32(&st[layout], t, all, &err) == AS_OK;
                if (ok) v[0] = all[0], v[1] = all[t->numel - 1];
                ok = ok && v[0] == (float)i && v[1] == (float)i + 0.001f * (float)(t->numel - 1);
                free(all);
            }
            CHECK(ok, "%s: %s missing, misshapen or with another tensor's values", lname[layout], want[i].name);
        }
    }
    for (int layout = 0; layout < 3; layout++) safetensors_close(&st[layout]);
    /* names alone: the renames of hierarchical.md 3.1 */
    char out[160];
    const struct { layout_kind k; const char *from, *to; } names[] = {
        {LAYOUT_OFFICIAL, "layers.2.downsample.reduction.weight", "layers.3.downsample.reduction.weight"},
        {LAYOUT_OFFICIAL, "head.bias", "head.fc.bias"},
        {LAYOUT_TORCHVISION, "features.0.2.bias", "patch_embed.norm.bias"},
        {LAYOUT_TORCHVISION, "features.5.17.mlp.3.weight", "layers.2.blocks.17.mlp.fc2.weight"},
        {LAYOUT_TORCHVISION, "features.7.1.attn.relative_position_bias_table", "layers.3.blocks.1.attn.relative_position_bias_table"},
        {LAYOUT_TORCHVISION, "features.6.norm.weight", "layers.3.downsample.norm.weight"},
        {LAYOUT_TIMM, "layers.1.downsample.norm.bias", "layers.1.downsample.norm.bias"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        CHECK(layout_timm_name(names[i].k, names[i].from, out, sizeof out) && strcmp(out, names[i].to) == 0,
              "%s -> %s (want %s)", names[i].from, out, names[i].to);
    CHECK(!layout_timm_name(LAYOUT_TORCHVISION, "features.1.0.attn.relative_position_index", out, sizeof out) &&
              !layout_timm_name(LAYOUT_OFFICIAL, "layers.0.blocks.1.attn_mask", out, sizeof out),
          "buffers are dropped");
}

/* model_load: a checkpoint whose relative table is of another window is refused with the window
 * it implies and the fix; so is one whose window the timm clamp shrank. */
static void test_wrong_table(void) {
    char dir[320], path[400];
    snprintf(dir, sizeof dir, "%s/wrong", tmp);
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (f) fputs(FIXTURE_JSON, f), fclose(f);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(swin_write_layout(path, 0, &tiny_arch, 169) > 0, "write"); /* stage 1 saved with 7x7 windows */
    model m;
    memset(&err, 0, sizeof err);
    CHECK(model_load(&m, dir, NULL, 0, &err) == AS_ERR_SHAPE && strstr(err.msg, "layers.1.blocks.0.attn.relative_position_bias_table") &&
              strstr(err.msg, "a 7x7 window") && strstr(err.msg, "runs 4x4 windows") &&
              strstr(err.msg, "set \"window_size\": 7") && !strchr(err.msg, '\n'),
          "wrong table: %s", err.msg);
    /* the torchvision layout says the same under timm's name */
    CHECK(swin_write_layout(path, 2, &tiny_arch, 169) > 0, "write");
    CHECK(model_load(&m, dir, NULL, 0, &err) == AS_ERR_SHAPE && strstr(err.msg, "a 7x7 window"),
          "wrong table (torchvision): %s", err.msg);
    /* window 8 at img 24: stage 1 is a 6x6 grid, which timm's clamp makes one 6x6 window */
    swin_arch a = tiny_arch;
    a.img = 24;
    a.window = 8;
    snprintf(path, sizeof path, "%s/config.json", dir);
    f = fopen(path, "w");
    if (f) fputs("{\"architecture\": \"custom\", \"num_classes\": 10, \"model_args\": {\"family\": \"swin\", "
                 "\"img_size\": 24, \"patch_size\": 2, \"embed_dim\": 16, \"depths\": [2, 2], \"num_heads\": "
                 "[2, 4], \"window_size\": 8}}", f), fclose(f);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(swin_write_layout(path, 0, &a, 225) > 0, "write"); /* saved with the unclamped 8x8 table */
    CHECK(model_load(&m, dir, NULL, 0, &err) == AS_ERR_SHAPE && strstr(err.msg, "an 8x8 window") == NULL &&
              strstr(err.msg, "a 8x8 window") && strstr(err.msg, "clamped to the 6x6 grid") &&
              strstr(err.msg, "\"window_clamp\": \"torchvision\""),
          "clamped table: %s", err.msg);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/attnscope-swinmodel.XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    test_builtins();
    test_costs();
    test_json();
    test_validate();
    test_layouts();
    test_wrong_table();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return check_finish("swin_model");
}
