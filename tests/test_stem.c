/* test_stem.c: convolutional stems and the models built on them (docs/models.md, "Convolutional
 * stems", "ViT-LSLA", "Refined-ViT"): the JSON keys and every refusal, the config written back,
 * the token geometry against the conv arithmetic worked out by hand, and the built-in models'
 * parameter counts against closed forms written here from the papers' descriptions. The
 * forward and the gradients against PyTorch are tests/test_train.c's (vit_stem, swin_stem). */
#include <math.h>
#include <string.h>

#include "../core/config.h"
#include "../io/model.h"
#include "check.h"

static as_error err;

static int apply(vit_config *c, const char *json) {
    memset(c, 0, sizeof *c);
    err.msg[0] = 0;
    return model_config_apply_json(c, json, "t.json", &err) == AS_OK && vit_config_validate(c, &err) == AS_OK;
}

#define VIT_ANY "\"architecture\": \"custom\", \"embed_dim\": 24, \"depth\": 2, \"num_heads\": 3, \"num_classes\": 5"
#define VIT_BASE VIT_ANY ", \"img_size\": 32"
#define STEM2 "\"stem\": [{\"out\": 8, \"kernel\": 3, \"stride\": 2, \"padding\": 1, \"bn\": true, \"act\": \"hardswish\"}, " \
              "{\"out\": 24, \"kernel\": 3, \"stride\": 2, \"padding\": 1, \"bias\": false, \"bn\": true}]"

/* Every key takes effect or is refused with its name. */
static void test_json(void) {
    vit_config c;
    CHECK(apply(&c, "{" VIT_BASE ", " STEM2 "}"), "%s", err.msg);
    CHECK(c.n_stem == 2 && c.patch_size == 4 && vit_grid(&c) == 8 && c.bn_eps == 1e-5f, "n_stem %d patch %d grid %d eps %g",
          c.n_stem, c.patch_size, vit_grid(&c), (double)c.bn_eps);
    CHECK(c.stem[0].bias == 1 && c.stem[1].bias == 0 && c.stem[0].act == VIT_STEM_ACT_HARDSWISH &&
          c.stem[1].act == VIT_STEM_ACT_NONE && c.stem[0].padding == 1, "entry fields");
    /* the config written back reads back the same */
    char *js = model_config_to_json(&c);
    vit_config d;
    memset(&d, 0, sizeof d);
    CHECK(js && model_config_apply_json(&d, js, "back.json", &err) == AS_OK && vit_config_validate(&d, &err) == AS_OK,
          "%s", err.msg);
    CHECK(d.n_stem == 2 && memcmp(d.stem, c.stem, sizeof c.stem) == 0 && d.bn_eps == c.bn_eps, "round trip");
    free(js);
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {"{" VIT_BASE ", \"stem\": [{\"out\": 24, \"kernel\": 4, \"stride\": 4, \"dilation\": 2}]}", "unknown key \"dilation\""},
        {"{" VIT_BASE ", \"stem\": [{\"out\": 24, \"kernel\": 4}]}", "stride must be an integer"},
        {"{" VIT_BASE ", \"stem\": [{\"out\": 24, \"kernel\": 4, \"stride\": 4, \"act\": \"gelu\"}]}", "hardswish"},
        {"{" VIT_BASE ", \"stem\": [{\"out\": 24, \"kernel\": 4, \"stride\": 4, \"bn\": \"yes\"}]}", "bn must be true or false"},
        {"{" VIT_BASE ", \"stem\": [{\"out\": 24, \"kernel\": 4, \"stride\": 4, \"bn_name\": \"x.bn\"}]}", "add \"bn\": true"},
        {"{" VIT_BASE ", \"stem\": [{\"out\": 24, \"kernel\": 4, \"stride\": 4, \"conv_name\": \"a b\"}]}", "tensor name prefix"},
        {"{" VIT_BASE ", \"stem\": [{\"out\": 16, \"kernel\": 4, \"stride\": 4}]}", "make the last \"out\" 24"},
        {"{" VIT_BASE ", \"patch_size\": 8, \"stem\": [{\"out\": 24, \"kernel\": 4, \"stride\": 4}]}", "total stride 4"},
        {"{" VIT_BASE ", \"stem\": [{\"out\": 24, \"kernel\": 4, \"stride\": 4, \"padding\": 4}]}", "padding 0..kernel-1"},
        {"{" VIT_ANY ", \"img_size\": 3, \"stem\": [{\"out\": 24, \"kernel\": 7, \"stride\": 2}]}", "smaller than its kernel"},
        {"{" VIT_BASE ", \"bn_eps\": 1e-3}", "no \"stem\" convolution has"},
        {"{" VIT_BASE ", \"bn_eps\": 1e-3, \"stem\": [{\"out\": 24, \"kernel\": 4, \"stride\": 4}]}", "no \"stem\" convolution has"},
        {"{" VIT_BASE ", \"stem\": {\"out\": 24}}", "must be an array"},
        {"{\"architecture\": \"custom\", \"family\": \"pvt_v2\", \"stem\": []}", "stem"},
        {"{\"architecture\": \"custom\", \"family\": \"swin\", \"downsample\": \"pool\"}", "\"downsample\" must be"},
        {"{\"architecture\": \"custom\", \"family\": \"swin\", \"rel_pos_bias\": 0}", "\"rel_pos_bias\" must be"},
        /* names: two stem tensors alike, or a stem tensor named as a block's */
        {"{" VIT_BASE ", \"stem\": [{\"out\": 8, \"kernel\": 2, \"stride\": 2, \"conv_name\": \"pe.x\", \"bn\": true, "
         "\"bn_name\": \"pe.x\"}, {\"out\": 24, \"kernel\": 2, \"stride\": 2}]}", "\"pe.x.weight\" has the name of another"},
        {"{" VIT_BASE ", \"stem\": [{\"out\": 24, \"kernel\": 4, \"stride\": 4, \"conv_name\": \"blocks.0.attn.qkv\"}]}",
         "\"blocks.0.attn.qkv.weight\" has the name"},
        {"{\"architecture\": \"custom\", \"family\": \"swin\", \"depths\": [2], \"num_heads\": [3], \"downsample\": \"conv\"}",
         "this Swin has one stage"},
        /* a base's stem no longer ends in the width */
        {"{\"architecture\": \"refined_vit_s\", \"embed_dim\": 192}", "give the whole \"stem\" with its last \"out\" 192"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(!apply(&c, bad[i].json) && strstr(err.msg, bad[i].needle), "%s: got \"%s\", want \"%s\"", bad[i].json,
              err.msg, bad[i].needle);
        CHECK(!strchr(err.msg, '\n'), "one line: %s", err.msg);
    }
    /* a base whose blocks share one attention keeps it on every block of new depths */
    CHECK(apply(&c, "{\"architecture\": \"vit_lsla\", \"depths\": [2, 2, 10, 2], \"num_heads\": [3, 6, 12, 24]}") &&
              c.depth == 16 && c.attn[15].kind == VIT_ATTN_LSLA && c.attn[15].inner_bias == VIT_BIAS_RELATIVE,
          "vit_lsla deeper: %s, block 15 %s", err.msg, vit_attn_name(c.attn[15].kind));
    CHECK(apply(&c, "{\"architecture\": \"refined_vit_s\", \"depth\": 20}") && c.attn[19].kind == VIT_ATTN_REFINER,
          "refined_vit_s deeper: %s", err.msg);
    /* a base with per-block attention keeps it stage by stage: LaViT-T's stage 3 grown to 3 blocks
     * is vanilla, then less-attention from its block 2 on (N_LA = 2), as its other blocks */
    CHECK(apply(&c, "{\"architecture\": \"lavit_t\", \"depths\": [2, 2, 2, 3], \"num_heads\": [1, 2, 5, 8]}") &&
              c.attn[6].kind == VIT_ATTN_VANILLA && c.attn[7].kind == VIT_ATTN_LESS && c.attn[8].kind == VIT_ATTN_LESS,
          "lavit_t deeper: %s; blocks 6-8 %s %s %s", err.msg, vit_attn_name(c.attn[6].kind), vit_attn_name(c.attn[7].kind),
          vit_attn_name(c.attn[8].kind));
    /* [] removes a base's stem; the stem-less model then needs its patch size back */
    CHECK(apply(&c, "{\"architecture\": \"refined_vit_s\", \"stem\": [], \"patch_size\": 16}") && c.n_stem == 0 &&
              vit_grid(&c) == 14, "%s", err.msg);
}

/* The grid and the receptive-field centres, composed by hand: conv k s p maps output y to input
 * window [s y - p, s y - p + k), centred on s y - p + (k - 1) / 2; pixel x is centred on x + 0.5. */
static void test_geometry(void) {
    vit_config c;
    /* Refined-ViT at 224: 7/2/3 -> 112 (centre 2y + 0.5), 3/1/1 twice -> 112, 8/8/0 -> 14:
     * token y covers stem pixels 8y .. 8y + 7, centred on 2 (8y + 3.5) + 0.5 = 16y + 7.5 */
    CHECK(apply(&c, "{\"architecture\": \"refined_vit_s\"}"), "%s", err.msg);
    vit_geom g;
    vit_block_geom(&c, 0, &g);
    CHECK(g.gh == 14 && g.T == 197 && g.stride_px == 16.0f && g.offset_px == 7.5f, "refined: grid %d T %d stride %g offset %g",
          g.gh, g.T, (double)g.stride_px, (double)g.offset_px);
    /* ViT-LSLA: 3/2/1 twice -> 112 -> 56, centres 2y + 0.5 then 2 (2y) + 0.5 = 4y + 0.5; a conv
     * merge 3/2/1 -> 28, centre 4 (2y) + 0.5 = 8y + 0.5 */
    CHECK(apply(&c, "{\"architecture\": \"vit_lsla\"}"), "%s", err.msg);
    vit_block_geom(&c, 0, &g);
    CHECK(g.gh == 56 && g.M == 7 && g.stride_px == 4.0f && g.offset_px == 0.5f, "vit_lsla stage 0: grid %d stride %g offset %g",
          g.gh, (double)g.stride_px, (double)g.offset_px);
    vit_block_geom(&c, 2, &g);
    CHECK(g.gh == 28 && g.stride_px == 8.0f && g.offset_px == 0.5f, "vit_lsla stage 1: grid %d stride %g offset %g", g.gh,
          (double)g.stride_px, (double)g.offset_px);
    /* Swin's merges need the stem's grid, not img_size / patch_size: 30 -> 15 -> 8 takes 3 merges */
    CHECK(apply(&c, "{\"architecture\": \"vit_lsla\", \"img_size\": 30}") && vit_grid(&c) == 8, "vit_lsla at 30: %s",
          err.msg);
    /* an odd input: 33 -> (33 + 2 - 3) / 2 + 1 = 17 -> 9 */
    CHECK(apply(&c, "{" VIT_ANY ", \"img_size\": 33, " STEM2 "}") && vit_grid(&c) == 9, "odd: %s grid %d", err.msg,
          vit_grid(&c));
}

/* conv k x k, cin -> cout: weights, bias, BatchNorm's affine (running statistics are buffers) */
static double conv_params(double cin, double cout, double k, int bias, int bn) {
    return cin * cout * k * k + (bias ? cout : 0) + (bn ? 2 * cout : 0);
}

static void test_seed_counts(void) {
    /* ViT-LSLA: MPViT's stem, 4 Swin stages with LSLA (q projection with bias, a 49 x 49 DS, two
     * 13^2 x h relative tables, the projection unless NP, key and value projections for QKV and
     * QXV), MLP 2,
     * CSwin's conv merges (3x3 with bias, LayerNorm), final norm, 102-class head */
    static const struct {
        const char *name;
        int k, v, proj;
    } lsla[] = {{"vit_lsla", 0, 0, 1}, {"vit_lsla_qxv", 0, 1, 0}, {"vit_lsla_np", 0, 0, 0}, {"vit_lsla_qkv", 1, 1, 1}};
    static const int depth[4] = {2, 2, 9, 2}, dim[4] = {96, 192, 384, 768}, heads[4] = {3, 6, 12, 24};
    for (size_t i = 0; i < sizeof lsla / sizeof lsla[0]; i++) {
        vit_config c;
        CHECK(vit_arch_resolve(lsla[i].name, &c, &err) == AS_OK && vit_config_validate(&c, &err) == AS_OK, "%s: %s",
              lsla[i].name, err.msg);
        double closed = conv_params(3, 48, 3, 0, 1) + conv_params(48, 96, 3, 0, 1);
        for (int s = 0; s < 4; s++) {
            const double D = dim[s];
            if (s) closed += conv_params(dim[s - 1], D, 3, 1, 0) + 2 * D;
            for (int j = 0; j < depth[s]; j++) {
                closed += 2 * D + (D * D + D) + 49 * 49 + 2 * 169 * heads[s] + 2 * D + (D * 2 * D + 2 * D) + (2 * D * D + D);
                if (lsla[i].k) closed += D * D + D;
                if (lsla[i].v) closed += D * D + D;
                if (lsla[i].proj) closed += D * D + D;
            }
        }
        closed += 2 * 768 + 768 * 102 + 102;
        vit_cost k;
        vit_config_cost(&c, &k);
        CHECK(k.params_total == closed, "%s: %.0f params, closed form %.0f", lsla[i].name, k.params_total, closed);
        CHECK(c.no_rel_pos_bias && c.n_stem == 2 && c.stage[1].down == VIT_DOWN_CONV && !c.patch_norm, "%s: structure",
              lsla[i].name);
    }
    /* Refined-ViT: PatchEmbed_cnn (three convs without bias, with BatchNorm; an 8 x 8 proj with
     * bias), cls token, 197 position embeddings, refiner blocks (qkv with bias; expansion 3H x H
     * and reduction H x 3H; a 3 x 3 kernel per expanded head), MLP 3, final norm, 1000 classes */
    static const struct {
        const char *name;
        int depth, D, H;
    } ref[] = {{"refined_vit_s", 16, 384, 12}, {"refined_vit_m", 32, 420, 12}, {"refined_vit_l", 32, 512, 16}};
    for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
        vit_config c;
        CHECK(vit_arch_resolve(ref[i].name, &c, &err) == AS_OK && vit_config_validate(&c, &err) == AS_OK, "%s: %s",
              ref[i].name, err.msg);
        const double D = ref[i].D, H = ref[i].H, Hx = 3 * H;
        double closed = conv_params(3, 32, 7, 0, 1) + conv_params(32, 64, 3, 0, 1) + conv_params(64, 128, 3, 0, 1) +
                        conv_params(128, D, 8, 1, 0) + D + 197 * D;
        closed += ref[i].depth * (4 * D + 3 * D * D + 3 * D + 2 * Hx * H + Hx * 9 + D * D + D + 2 * 3 * D * D + 3 * D + D);
        closed += 2 * D + 1000 * D + 1000;
        vit_cost k;
        vit_config_cost(&c, &k);
        CHECK(k.params_total == closed, "%s: %.0f params, closed form %.0f", ref[i].name, k.params_total, closed);
        CHECK(c.depth == ref[i].depth && c.mlp_hidden == 3 * ref[i].D && c.attn[c.depth - 1].kind == VIT_ATTN_REFINER &&
                  c.attn[0].expanded_heads == 3 * ref[i].H,
              "%s: structure", ref[i].name);
    }
}

/* H-MaiT-T/S: Swin-T/S with every stage global (no window tables: Swin's parameters less one
 * 13^2 x H relative table per block) and 3 x 3 zero-mode masks on [3, 6, 4, 0] heads per stage */
static void test_hmait(void) {
    static const char *const pairs[][2] = {{"hmait_t", "swin_tiny_patch4_window7_224"},
                                           {"hmait_s", "swin_small_patch4_window7_224"}};
    for (size_t i = 0; i < 2; i++) {
        vit_config h, w;
        CHECK(vit_arch_resolve(pairs[i][0], &h, &err) == AS_OK && vit_config_validate(&h, &err) == AS_OK, "%s: %s",
              pairs[i][0], err.msg);
        CHECK(vit_arch_resolve(pairs[i][1], &w, &err) == AS_OK, "%s", err.msg);
        vit_cost kh, kw;
        vit_config_cost(&h, &kh);
        vit_config_cost(&w, &kw);
        double tables = 0;
        for (int l = 0; l < w.depth; l++) {
            vit_geom g;
            vit_block_geom(&w, l, &g);
            tables += (2.0 * g.M - 1) * (2 * g.M - 1) * g.H;
        }
        CHECK(kh.params_total == kw.params_total - tables, "%s: %.0f params, want %s's %.0f less its tables %.0f",
              pairs[i][0], kh.params_total, pairs[i][1], kw.params_total, tables);
        static const int masked[4] = {3, 6, 4, 0};
        for (int l = 0; l < h.depth; l++) {
            vit_geom g;
            vit_block_geom(&h, l, &g);
            int n = 0;
            for (int k = 0; k < g.H; k++) n += h.attn[l].mask_size[k] == 3;
            CHECK(g.scope == VIT_SCOPE_GLOBAL && g.problems == 1 && n == masked[g.stage] &&
                      (n == 0 ? h.attn[l].kind == VIT_ATTN_VANILLA
                              : h.attn[l].kind == VIT_ATTN_MAIT && h.attn[l].mask_mode == VIT_MASK_ZERO),
                  "%s: block %d: scope %s, %d masked heads", pairs[i][0], l, vit_scope_name(g.scope), n);
        }
    }
    vit_config c;
    CHECK(!apply(&c, "{\"architecture\": \"hmait_t\", \"scopes\": [\"global\"]}") && strstr(err.msg, "\"scopes\" must list"),
          "scopes of another length: %s", err.msg);
    /* every stage global: the windows' keys would do nothing, so they are refused, and the
     * config attnscope writes for such a model (a checkpoint's) leaves them out and reads back */
    static const char *const window_keys[] = {"\"window_size\": 8", "\"rel_pos_bias\": true",
                                              "\"pad_order\": \"roll_first\"", "\"window_clamp\": \"torchvision\""};
    for (int i = 0; i < 4; i++) {
        char js[256];
        snprintf(js, sizeof js, "{\"architecture\": \"hmait_t\", %s}", window_keys[i]);
        CHECK(!apply(&c, js) && strstr(err.msg, "has no effect: every stage is global"), "%s: %s", js, err.msg);
        snprintf(js, sizeof js, "{\"architecture\": \"hmait_t\", \"scopes\": [\"window\", \"global\", \"global\", "
                 "\"global\"], \"attention\": [{\"blocks\": \"0-1\", \"type\": \"vanilla\"}], %s}", window_keys[i]);
        CHECK(apply(&c, js), "%s with a window stage: %s", window_keys[i], err.msg);
    }
    CHECK(apply(&c, "{\"architecture\": \"hmait_t\"}"), "hmait_t: %s", err.msg);
    char *back = model_config_to_json(&c);
    CHECK(back && !strstr(back, "window_size") && !strstr(back, "pad_order") && !strstr(back, "window_clamp"),
          "an all-global model's config names the windows' keys: %s", back ? back : "(null)");
    vit_config d;
    CHECK(back && apply(&d, back) && d.n_stages == c.n_stages && d.stage[2].scope == VIT_SCOPE_GLOBAL,
          "an all-global model's config reads back: %s", err.msg);
    free(back);
    /* a config attnscope stored (a checkpoint's, a trace's) that an older version wrote with the
     * windows' keys reads as it is */
    for (int i = 0; i < 4; i++) {
        char js[256];
        snprintf(js, sizeof js, "{\"architecture\": \"hmait_t\", %s}", window_keys[i]);
        memset(&d, 0, sizeof d);
        CHECK(model_config_apply_stored_json(&d, js, "config.json", &err) == AS_OK && d.n_stages == 4,
              "stored %s: %s", js, err.msg);
    }
}

/* Config text that is not one JSON object, keys in the message of their own family, and a MaiT
 * entry that masks nothing. */
static void test_config_text(void) {
    vit_config c;
    CHECK(!apply(&c, "{" VIT_BASE "}{\"depth\": 99}") && strstr(err.msg, "text after the JSON object"),
          "trailing object: %s", err.msg);
    CHECK(!apply(&c, "[]") && strstr(err.msg, "top level is not a JSON object"), "array: %s", err.msg);
    CHECK(!apply(&c, "{" VIT_BASE ",}") && strstr(err.msg, "syntax error"), "syntax: %s", err.msg);
    CHECK(apply(&c, "{" VIT_BASE "}\n\n"), "trailing white space: %s", err.msg);
    CHECK(!apply(&c, "{\"architecture\": \"swin_tiny_patch4_window7_224\", \"talking_heads\": true}") &&
              strstr(err.msg, "is a CaiT key and this is a Swin model"), "talking_heads on Swin: %s", err.msg);
    CHECK(!apply(&c, "{" VIT_BASE ", \"attention\": [{\"blocks\": \"0-1\", \"type\": \"mait\", \"mask_size\": 3, \"heads\": []}]}") &&
              strstr(err.msg, "no head is masked"), "mait, no heads: %s", err.msg);
    CHECK(!apply(&c, "{" VIT_BASE ", \"attention\": [{\"blocks\": \"0-1\", \"type\": \"mait\", \"mask_size\": [0, 0, 0]}]}") &&
              strstr(err.msg, "no head is masked"), "mait, zero sizes: %s", err.msg);
    CHECK(apply(&c, "{" VIT_BASE ", \"attention\": [{\"blocks\": \"0-1\", \"type\": \"mait\", \"mask_size\": [0, 3, 0]}]}"),
          "mait, one head: %s", err.msg);
    /* LSLA's outer bias unmasked acts only where a shift mask separates pairs */
    CHECK(!apply(&c, "{" VIT_BASE ", \"attention\": {\"type\": \"lsla\", \"outer_bias_masked\": false}}") &&
              strstr(err.msg, "\"outer_bias_masked\": false has no effect"), "lsla in a ViT, unmasked: %s", err.msg);
    CHECK(apply(&c, "{" VIT_BASE ", \"attention\": {\"type\": \"lsla\", \"outer_bias_masked\": true}}"),
          "lsla in a ViT, masked (the default, as attnscope writes it): %s", err.msg);
    CHECK(apply(&c, "{\"architecture\": \"swin_tiny_patch4_window7_224\", \"attention\": {\"type\": \"lsla\", "
                    "\"outer_bias_masked\": false}}"), "lsla in shifted windows, unmasked: %s", err.msg);
    CHECK(!apply(&c, "{\"architecture\": \"swin_tiny_patch4_window7_224\", \"attention\": {\"type\": \"lsla\", "
                     "\"outer_bias\": \"none\", \"outer_bias_masked\": false}}") &&
              strstr(err.msg, "has no effect"), "lsla without an outer bias, unmasked: %s", err.msg);
    /* stored configs (older versions wrote these): taken as they are */
    memset(&c, 0, sizeof c);
    CHECK(model_config_apply_stored_json(&c, "{" VIT_BASE ", \"attention\": {\"type\": \"lsla\", \"outer_bias_masked\": "
                                         "false}}", "config.json", &err) == AS_OK, "stored lsla: %s", err.msg);
    memset(&c, 0, sizeof c);
    CHECK(model_config_apply_stored_json(&c, "{" VIT_BASE ", \"attention\": [{\"blocks\": \"0-1\", \"type\": \"mait\", "
                                         "\"mask_size\": [0, 0, 0]}]}", "config.json", &err) == AS_OK,
          "stored mait, no head masked: %s", err.msg);
}

int main(void) {
    test_hmait();
    test_config_text();
    test_json();
    test_geometry();
    test_seed_counts();
    return check_finish("stem");
}
