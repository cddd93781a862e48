/* test_vitfam.c: the modern ViT family (core/vitfam.c; issue 17 item 3). Identities (LayerScale
 * of ones = none; registers change the prefix count everywhere), the built-ins' parameters and
 * MACs against timm's published figures, config round trips, refusals with the fix. The
 * computations themselves are compared with the PyTorch reference in test_reference.c. */
#define _POSIX_C_SOURCE 200809L
#include "../core/vitfam.h"
#include "../io/model.h"
#include "check.h"
#include "configtest.h"


/* forward of n random images through (c, p): logits or features into out */
static void run(const vit_config *c, const vit_params *p, int n, float *out, int seed) {
    const int S = c->img_size, D = c->embed_dim;
    size_t bytes = vit_acts_carve(c, n, NULL, NULL);
    void *arena = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    vit_acts a;
    vit_acts_carve(c, n, arena, &a);
    float *x = malloc((size_t)n * 3 * S * S * sizeof *x);
    unsigned s = (unsigned)seed;
    for (size_t i = 0; i < (size_t)n * 3 * S * S; i++) {
        s = s * 1103515245u + 12345u;
        x[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    vit_forward(c, p, &a, x, n, NULL);
    if (c->num_classes > 0) memcpy(out, a.logits, (size_t)n * c->num_classes * sizeof *out);
    else
        for (int i = 0; i < n; i++) memcpy(out + (size_t)i * D, a.pooled + (size_t)i * 2 * D, (size_t)D * sizeof *out);
    free(x);
    free(arena);
}

#define TINY "\"architecture\":\"custom\",\"img_size\":32,\"patch_size\":8,\"embed_dim\":32,\"depth\":2,\"num_heads\":2"

/* LayerScale with gammas of ones is the plain block; the residual adds then differ only by
 * rounding (gamma * y then + x, against the GEMM's x + y). */
static void test_layerscale_ones(void) {
    vit_config a, b;
    CHECK(apply(&a, "{" TINY ",\"num_classes\":5,\"init_values\":1e-5}") == AS_OK, "%s", err.msg);
    CHECK(apply(&b, "{" TINY ",\"num_classes\":5}") == AS_OK, "%s", err.msg);
    model ma;
    if (model_init_random(&ma, &a, 7, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    float ones[32];
    for (int i = 0; i < 32; i++) ones[i] = 1.0f;
    vit_params pa = ma.params, pb = ma.params;
    for (int l = 0; l < a.depth; l++) {
        CHECK(pa.blocks[l].ls1 && pa.blocks[l].ls2, "block %d has its gammas", l);
        pa.blocks[l].ls1 = pa.blocks[l].ls2 = ones;
        pb.blocks[l].ls1 = pb.blocks[l].ls2 = NULL;
    }
    float la[10], lb[10];
    run(&a, &pa, 2, la, 1);
    run(&b, &pb, 2, lb, 1);
    check_close("LayerScale(1) = none", la, lb, 10, 1e-5, 1e-5);
    /* and gammas that are not ones change the result (the test can fail) */
    run(&a, &ma.params, 2, la, 1);
    double d = 0;
    for (int i = 0; i < 10; i++) d = fmax(d, fabs(la[i] - lb[i]));
    CHECK(d > 1e-3, "random gammas change the logits (max diff %g)", d);
    model_free(&ma);
}

/* Registers change the prefix count everywhere: tokens, geometry, names, tensor shapes. */
static void test_registers(void) {
    vit_config c;
    CHECK(apply(&c, "{" TINY ",\"num_classes\":0,\"reg_tokens\":3,\"no_embed_class\":true}") == AS_OK, "%s", err.msg);
    CHECK(vit_num_prefix(&c) == 4 && vit_num_tokens(&c) == 20 && vit_pos_embed_len(&c) == 16 &&
          vit_pos_embed_prefix(&c) == 0, "prefix %d tokens %d pos %d", vit_num_prefix(&c), vit_num_tokens(&c),
          vit_pos_embed_len(&c));
    vit_geom g;
    vit_block_geom(&c, 1, &g);
    CHECK(g.prefix == 4 && g.T == 20 && g.gh == 4, "geom: prefix %d T %d grid %d", g.prefix, g.T, g.gh);
    char names[128];
    vit_prefix_names(&c, names, sizeof names);
    CHECK(strcmp(names, "cls,reg0,reg1,reg2") == 0, "names %s", names);
    char lab[32];
    vit_prefix_label(&c, 0, lab, sizeof lab);
    CHECK(!strcmp(lab, "class token"), "label 0: %s", lab);
    vit_prefix_label(&c, 2, lab, sizeof lab);
    CHECK(!strcmp(lab, "register 1"), "label 2: %s (not a distillation token)", lab);
    c.class_token = 0, c.global_pool = VIT_POOL_AVG;
    vit_prefix_names(&c, names, sizeof names);
    CHECK(strcmp(names, "reg0,reg1,reg2") == 0 && vit_num_prefix(&c) == 3, "names %s", names);
    /* the tensors: reg_token (1, R, D), pos_embed over the patches */
    vit_params p;
    vit_tensor_spec s[64];
    CHECK(apply(&c, "{" TINY ",\"num_classes\":0,\"reg_tokens\":3,\"no_embed_class\":true}") == AS_OK, "%s", err.msg);
    int n = vit_param_specs(&c, &p, s, 64), reg = 0, pos = 0;
    for (int i = 0; i < n && i < 64; i++) {
        if (!strcmp(s[i].name, "reg_token")) reg = s[i].shape[1] == 3 && s[i].shape[2] == 32;
        if (!strcmp(s[i].name, "pos_embed")) pos = s[i].shape[1] == 16;
    }
    CHECK(reg && pos, "reg_token (1, 3, 32): %d, pos_embed (1, 16, 32): %d", reg, pos);
    /* without no_embed_class the position embedding has the prefix rows */
    CHECK(apply(&c, "{" TINY ",\"num_classes\":0,\"reg_tokens\":3}") == AS_OK, "%s", err.msg);
    CHECK(vit_pos_embed_len(&c) == 20, "pos %d", vit_pos_embed_len(&c));
}

/* Every key written back and read again gives the same config. */
static void test_round_trip(void) {
    const char *archs[] = {"deit3_small_patch16_224", "vit_small_patch14_reg4_dinov2",
                           "vit_base_patch16_clip_quickgelu_224", "vit_base_patch16_siglip_224"};
    for (int i = 0; i < 4; i++) {
        vit_config a, b;
        CHECK(vit_arch_resolve(archs[i], &a, &err) == AS_OK, "%s", err.msg);
        char *json = model_config_to_json(&a);
        memset(&b, 0, sizeof b);
        CHECK(model_config_apply_json(&b, json, archs[i], &err) == AS_OK, "%s: %s", archs[i], err.msg);
        CHECK(b.init_values == a.init_values && b.reg_tokens == a.reg_tokens && b.no_embed_class == a.no_embed_class &&
              b.pre_norm == a.pre_norm && b.act_layer == a.act_layer && b.global_pool == a.global_pool &&
              b.class_token == a.class_token && b.ln_eps == a.ln_eps && b.num_classes == a.num_classes &&
              b.img_size == a.img_size && b.patch_size == a.patch_size,
              "%s: round trip differs:\n%s", archs[i], json);
        free(json);
    }
    vit_config c;
    CHECK(apply(&c, "{\"architecture\":\"deit3_small_patch16_224\",\"init_values\":null}") == AS_OK &&
          c.init_values == 0, "init_values null: no LayerScale (%g) %s", (double)c.init_values, err.msg);
    CHECK(apply(&c, "{\"architecture\":\"vit_base_patch16_clip_224.openai\"}") == AS_OK && c.num_classes == 512 &&
          fabsf(c.mean[0] - 0.48145466f) < 1e-7f && c.pre_norm, "clip tag: %s", err.msg);
}

/* Bad combinations: one line with the key and the fix. */
static void test_refusals(void) {
    vit_config c;
    static const struct {
        const char *json, *want1, *want2;
    } bad[] = {
        {"{" TINY ",\"distilled\":true,\"reg_tokens\":2}", "reg_tokens", "remove"},
        {"{" TINY ",\"distilled\":true,\"global_pool\":\"map\"}", "map", "token"},
        {"{" TINY ",\"reg_tokens\":-1}", "reg_tokens", "0..64"},
        {"{" TINY ",\"act_layer\":\"gelu_tanh\"}", "act_layer", "not supported yet"},
        {"{" TINY ",\"init_values\":\"big\"}", "init_values", "null (none)"},
        {"{\"architecture\":\"swin_tiny_patch4_window7_224\",\"reg_tokens\":4}", "reg_tokens", "ViT key"},
        {"{" TINY ",\"class_token\":false,\"global_pool\":\"token\",\"reg_tokens\":1}", "global_pool", "class token"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        as_status rc = apply(&c, bad[i].json);
        CHECK(rc != AS_OK && strstr(err.msg, bad[i].want1) && strstr(err.msg, bad[i].want2) && !strchr(err.msg, '\n'),
              "%s -> %s", bad[i].json, rc == AS_OK ? "accepted" : err.msg);
    }
    /* training refuses attention pooling, naming it; the other options train */
    CHECK(apply(&c, "{" TINY ",\"num_classes\":3,\"class_token\":false,\"global_pool\":\"map\"}") == AS_OK, "%s", err.msg);
    const char *why = vitfam_untrainable(&c);
    CHECK(why && strstr(why, "map"), "untrainable: %s", why ? why : "(null)");
    CHECK(apply(&c, "{" TINY ",\"num_classes\":3,\"init_values\":1e-5,\"reg_tokens\":2}") == AS_OK &&
          !vitfam_untrainable(&c), "LayerScale with registers trains");
    CHECK(apply(&c, "{" TINY ",\"num_classes\":3}") == AS_OK && !vitfam_untrainable(&c), "plain ViT trains");
}

/* Parameters and MACs of the built-ins against timm's published figures (to the printed digit).
 * Sources are the timm model cards on the Hugging Face hub and the hub's safetensors
 * "Model size" (the parameter count of the stored tensors). timm's cards count MACs with
 * fvcore, which adds 5 per LayerNorm element (norm_flop_counter) to the products attnscope
 * counts, and which does not see torch's fused attention (F.scaled_dot_product_attention): cards
 * made with it (registers, Oct/Nov 2023) leave out q k^T and A v; the DINOv2 cards of May 2023
 * count them. FV_ALL: attnscope's MACs + 5 per LayerNorm element; FV_SDPA: the same without
 * attn.scores and attn.values. (DINOv2-L/14: 506.80 + 0.34 = 507.15 G, card 507.1; with
 * registers 415.76 + 0.34 = 416.10 G, card 416.1; ViT-S/14 registers 29.48 + 0.07 = 29.55 G,
 * card 29.6.) docs/models.md says so. */
enum { FV_NONE = 0, FV_ALL, FV_SDPA };
static void test_published(void) {
    static const struct {
        const char *arch;  /* a built-in, or a JSON config */
        int img;           /* 0: the built-in's */
        double params_m;   /* published, in millions, as printed */
        double gmacs;      /* published (0: none found) */
        int fvcore;        /* how the card counted */
        const char *source;
    } pub[] = {
        {"vit_small_patch14_reg4_dinov2", 0, 22.1, 29.6, FV_SDPA,
         "huggingface.co/timm/vit_small_patch14_reg4_dinov2.lvd142m README: Params (M) 22.1, GMACs 29.6, 518 x 518"},
        {"{\"architecture\": \"vit_small_patch14_dinov2\", \"embed_dim\": 1024, \"depth\": 24, \"num_heads\": 16}",
         0, 304.4, 507.1, FV_ALL,
         "huggingface.co/timm/vit_large_patch14_dinov2.lvd142m README (May 2023): Params (M) 304.4, GMACs 507.1, 518 x 518"},
        {"{\"architecture\": \"vit_small_patch14_reg4_dinov2\", \"embed_dim\": 1024, \"depth\": 24, \"num_heads\": 16}",
         0, 304.4, 416.1, FV_SDPA,
         "huggingface.co/timm/vit_large_patch14_reg4_dinov2.lvd142m README: Params (M) 304.4, GMACs 416.1, 518 x 518"},
        {"vit_base_patch16_clip_224", 0, 86.2, 0, FV_NONE,
         "huggingface.co/timm/vit_base_patch16_clip_224.laion400m_e32: safetensors model size 86.2M params"},
        {"vit_base_patch16_siglip_224", 256, 92.9, 0, FV_NONE,
         "huggingface.co/timm/vit_base_patch16_siglip_256.webli: safetensors model size 92.9M params"},
    };
    for (size_t i = 0; i < sizeof pub / sizeof pub[0]; i++) {
        vit_config c;
        if (pub[i].arch[0] == '{') CHECK(apply(&c, pub[i].arch) == AS_OK, "%s", err.msg);
        else CHECK(vit_arch_resolve(pub[i].arch, &c, &err) == AS_OK, "%s", err.msg);
        if (pub[i].img) c.img_size = pub[i].img;
        vit_cost k;
        vit_config_cost(&c, &k);
        CHECK(round(k.params_total / 1e5) / 10 == pub[i].params_m, "%s: %.0f params, published %g M (%s)",
              pub[i].arch, k.params_total, pub[i].params_m, pub[i].source);
        if (pub[i].gmacs > 0) {
            const double ln = (2.0 * c.depth + 1 + c.pre_norm) * vit_num_tokens(&c) * c.embed_dim;
            double macs = k.macs_total + 5 * ln;
            if (pub[i].fvcore == FV_SDPA) macs -= k.macs[VIT_COMP_ATTN_SCORES] + k.macs[VIT_COMP_ATTN_VALUES];
            CHECK(round(macs / 1e8) / 10 == pub[i].gmacs, "%s: %.4f GMACs as fvcore counts, published %g (%s)",
                  pub[i].arch, macs / 1e9, pub[i].gmacs, pub[i].source);
        }
    }
    /* exact counts from the tensor list (closed forms = what the checkpoint holds) */
    const char *all[] = {"deit3_small_patch16_224", "deit3_base_patch16_224", "vit_small_patch14_dinov2",
                         "vit_base_patch14_dinov2", "vit_small_patch14_reg4_dinov2", "vit_base_patch14_reg4_dinov2",
                         "vit_base_patch16_clip_224", "vit_base_patch16_clip_quickgelu_224",
                         "vit_base_patch16_siglip_224"};
    for (int i = 0; i < 9; i++) {
        vit_config c;
        CHECK(vit_arch_resolve(all[i], &c, &err) == AS_OK, "%s", err.msg);
        vit_cost k;
        vit_config_cost(&c, &k);
        vit_params p;
        static vit_tensor_spec s[VIT_MAX_TENSORS];
        const int n = vit_param_specs(&c, &p, s, VIT_MAX_TENSORS);
        double numel = 0;
        for (int t = 0; t < n; t++) numel += (double)vit_tensor_numel(&s[t]);
        CHECK(numel == k.params_total, "%s: cost %.0f params, tensors %.0f", all[i], k.params_total, numel);
    }
}

int main(void) {
    test_layerscale_ones();
    test_registers();
    test_round_trip();
    test_refusals();
    test_published();
    return check_finish("vitfam");
}
