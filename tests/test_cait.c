/* test_cait.c: CaiT (core/cait.c): parameter counts against closed forms and the published table,
 * MACs as the paper counts them, the identities (talking heads with identity mixes and zero biases
 * = plain attention; LayerScale of ones = none) on the tiny fixture, and refusals with the fix. */
#define _POSIX_C_SOURCE 200809L
#include "../core/cait.h"
#include "../io/model.h"
#include "../io/trace.h"
#include "../viewer/view.h"
#include "../core/kernels.h"
#include "../core/stage.h"
#include "check.h"

/* Closed form of timm's Cait parameters: patch, cls, pos; per SA block LN x2, qkv, proj_l,
 * proj_w, proj, gammas, MLP; per CA block the same with q, k, v and no head mixes; norm, head. */
static double closed_params(int D, int H, int L, int N, int C) {
    const double d = D, m = 4.0 * D, mlp = 2 * d * m + m + d, tail = 4 * d + d * d + d + 2 * d + mlp;
    return 768 * d + d + d + N * d + L * (3 * d * d + 3 * d + 2 * (H * H + H) + tail) +
           2 * (3 * (d * d + d) + tail) + 2 * d + d * C + C;
}

static void test_counts(void) {
    static const struct {
        const char *name;
        int D, H, L;
        double params_m, gmacs;
    } t[] = {{"cait_xxs24_224", 192, 4, 24, 12.0, 2.5},  /* CaiT Table 3; MaiT Table 7 (CaiT-T) */
             {"cait_xxs36_224", 192, 4, 36, 17.3, 3.8},  /* CaiT Table 3 */
             {"cait_s24_224", 384, 8, 24, 46.9, 9.4}};   /* CaiT Table 3; MaiT Table 7 (CaiT-S) */
    for (int i = 0; i < 3; i++) {
        const vit_config *c = vit_arch_find(t[i].name);
        CHECK(c != NULL, "%s is a built-in", t[i].name);
        if (!c) continue;
        as_error err = {0};
        CHECK(vit_config_validate(c, &err) == AS_OK, "%s: %s", t[i].name, err.msg);
        vit_cost k;
        vit_config_cost(c, &k);
        CHECK(k.params_total == closed_params(t[i].D, t[i].H, t[i].L, 196, 1000), "%s: %.0f params, closed form %.0f",
              t[i].name, k.params_total, closed_params(t[i].D, t[i].H, t[i].L, 196, 1000));
        CHECK(round(k.params_total / 1e5) / 10 == t[i].params_m, "%s: %.2f M parameters, published %.1f", t[i].name,
              k.params_total / 1e6, t[i].params_m);
        const double paper = vit_cait_paper_macs(c);
        CHECK(round(paper / 1e8) / 10 == t[i].gmacs, "%s: %.3f GMACs as the paper counts, published %.1f",
              t[i].name, paper / 1e9, t[i].gmacs);
        /* the parts add up, and stage 1 is the two class-attention blocks */
        CHECK(fabs(k.stem.params_total + k.stage[0].params_total + k.stage[1].params_total + k.head.params_total -
                   k.params_total) < 0.5, "%s: parts add up", t[i].name);
    }
    /* the 384 figures of the deit repository's model zoo, from a custom config at 384 */
    vit_config s24 = *vit_arch_find("cait_s24_224");
    s24.img_size = 384;
    CHECK(round(vit_cait_paper_macs(&s24) / 1e8) / 10 == 32.2, "S24 at 384: %.3f, published 32.2",
          vit_cait_paper_macs(&s24) / 1e9);
    vit_config m48 = s24;
    m48.img_size = 448, m48.embed_dim = 768, m48.num_heads = 16, m48.mlp_hidden = 3072, m48.depth = 50;
    for (int s = 0; s < 2; s++)
        m48.stage[s].embed_dim = 768, m48.stage[s].num_heads = 16, m48.stage[s].mlp_hidden = 3072;
    m48.stage[0].depth = 48;
    CHECK(round(vit_cait_paper_macs(&m48) / 1e8) / 10 == 329.6, "M48 at 448: %.3f, published 329.6",
          vit_cait_paper_macs(&m48) / 1e9);
}

/* MaiT's models (003_0ebe6d202555ca79.txt): Table 7's parameters and FLOPs to the printed
 * digit, and the readings of docs/models.md ("MaiT's models") pinned: Sch.2 with layer 8 taking
 * one masked head (the paper prints "9-19"), Sch.3 soft in every head of layers 0-20 (T, and XT
 * after its distilled twin), Masked
 * CaiT's Sch.1 on head 0 of every self-attention block before the mix; a JSON config takes the
 * printed reading instead. */
static void test_mait_seeds(void) {
    static const struct {
        const char *name;
        int D, H, ls, soft; /* soft: Sch.3, else Sch.2 */
        double params_m, gmacs; /* Table 7 */
    } t[] = {{"mait_xt", 144, 3, 1, 1, 6.3, 1.5}, {"mait_t", 192, 3, 0, 1, 11.0, 2.5},
             {"mait_xs", 288, 3, 1, 0, 24.5, 5.3}, {"mait_s", 384, 6, 1, 0, 43.3, 9.1}};
    as_error err = {0};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        vit_config c;
        if (vit_arch_resolve(t[i].name, &c, &err) != AS_OK || vit_config_validate(&c, &err) != AS_OK) {
            CHECK(0, "%s: %s", t[i].name, err.msg);
            continue;
        }
        CHECK(c.depth == 24 && c.embed_dim == t[i].D && c.num_heads == t[i].H && c.mlp_hidden == 4 * t[i].D &&
              (c.init_values == 1e-5f) == t[i].ls && (c.init_values == 0) == !t[i].ls, "%s: shape", t[i].name);
        vit_cost k;
        vit_config_cost(&c, &k);
        /* a DeiT: patch, cls, pos; per block LN x2, qkv, proj, MLP (+ LayerScale); norm, head */
        const double d = t[i].D, blk = 4 * d + 3 * d * d + 3 * d + d * d + d + 8 * d * d + 5 * d + (t[i].ls ? 2 * d : 0);
        const double closed = 768 * d + d + d + 197 * d + 24 * blk + 2 * d + 1000 * d + 1000 +
                              (c.attn[0].mask_mode == VIT_MASK_SOFT ? 21 * 3 : 0); /* soft alphas */
        CHECK(k.params_total == closed, "%s: %.0f params, closed form %.0f", t[i].name, k.params_total, closed);
        CHECK(fabs(k.params_total / 1e6 - t[i].params_m) < 0.07, "%s: %.2f M params, Table 7 %.1f", t[i].name,
              k.params_total / 1e6, t[i].params_m);
        CHECK(round(k.macs_total / 1e8) / 10 == t[i].gmacs, "%s: %.3f GMACs, Table 7 %.1f", t[i].name,
              k.macs_total / 1e9, t[i].gmacs);
        for (int l = 0; l < 24; l++) {
            int masked = 0;
            for (int h = 0; h < c.num_heads; h++) masked += c.attn[l].mask_size[h] == 3;
            const int soft = c.attn[l].mask_mode == VIT_MASK_SOFT;
            const int want = t[i].soft ? (l <= 20 ? c.num_heads : 0) : l <= 7 ? c.num_heads - 1 : l <= 19 ? 1 : 0;
            CHECK(masked == want && (c.attn[l].kind == VIT_ATTN_MAIT) == (want > 0) && soft == (t[i].soft && want > 0) &&
                  (want == 0 || c.attn[l].mask_size[0] == 3),
                  "%s: block %d has %d masked heads (%s), want %d", t[i].name, l, masked, soft ? "soft" : "hard", want);
        }
    }
    /* the printed reading of Sch.2: layer 8 unmasked, by a JSON config over the built-in */
    vit_config c;
    CHECK(vit_arch_resolve("mait_xs", &c, &err) == AS_OK, "%s", err.msg);
    CHECK(model_config_apply_json(&c, "{\"attention\": [{\"blocks\": \"0-7\", \"type\": \"mait\", \"mask_size\": 3, "
                                      "\"heads\": [0, 1]}, {\"blocks\": \"8\", \"type\": \"vanilla\"}, {\"blocks\": \"9-19\", "
                                      "\"type\": \"mait\", \"mask_size\": 3, \"heads\": [0]}, {\"blocks\": \"20-23\", "
                                      "\"type\": \"vanilla\"}]}", "printed", &err) == AS_OK,
          "%s", err.msg);
    CHECK(c.attn[8].kind == VIT_ATTN_VANILLA && c.attn[9].kind == VIT_ATTN_MAIT && c.init_values == 1e-5f,
          "the printed reading of Sch.2");
    /* Masked CaiT: CaiT's counts, head 0 masked in the 24 self-attention blocks, before the mix */
    static const char *const mc[2][2] = {{"masked_cait_xxs24", "cait_xxs24_224"}, {"masked_cait_s24", "cait_s24_224"}};
    for (int i = 0; i < 2; i++) {
        vit_config m, b;
        CHECK(vit_arch_resolve(mc[i][0], &m, &err) == AS_OK && vit_arch_resolve(mc[i][1], &b, &err) == AS_OK &&
              vit_config_validate(&m, &err) == AS_OK, "%s: %s", mc[i][0], err.msg);
        static const double gmacs[2] = {2.5, 9.4}; /* Table 7, Masked CaiT and Masked CaiT-S */
        CHECK(round(vit_cait_paper_macs(&m) / 1e8) / 10 == gmacs[i], "%s: %.3f GMACs as CaiT counts, Table 7 %.1f",
              mc[i][0], vit_cait_paper_macs(&m) / 1e9, gmacs[i]);
        vit_cost km, kb;
        vit_config_cost(&m, &km);
        vit_config_cost(&b, &kb);
        CHECK(km.params_total == kb.params_total, "%s: CaiT's parameters", mc[i][0]);
        CHECK(m.mask_mix == VIT_MASK_MIX_BEFORE, "%s: masks before the mix", mc[i][0]);
        for (int l = 0; l < m.depth; l++)
            CHECK(l < 24 ? m.attn[l].kind == VIT_ATTN_MAIT && m.attn[l].mask_size[0] == 3 && m.attn[l].mask_size[1] == 0 &&
                               m.attn[l].mask_mode == VIT_MASK_ZERO
                         : m.attn[l].kind == VIT_ATTN_VANILLA,
                  "%s: block %d", mc[i][0], l);
    }
}

/* Logits of model m (config c) on the fixture inputs. */
static void logits_of(const vit_config *c, const vit_params *p, const float *x, int n, float *out) {
    size_t bytes = vit_acts_carve(c, n, NULL, NULL);
    void *arena = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    vit_acts a;
    vit_acts_carve(c, n, arena, &a);
    vit_forward(c, p, &a, x, n, NULL);
    memcpy(out, a.logits, (size_t)n * c->num_classes * sizeof(float));
    free(arena);
}

static void test_identities(void) {
    model m;
    as_error err = {0};
    if (model_load(&m, fx("cait_tiny"), NULL, 0, &err) != AS_OK) {
        CHECK(0, "cait_tiny: %s", err.msg);
        return;
    }
    const vit_config *c = &m.cfg;
    const int n = 2, S = c->img_size, H = c->num_heads, D = c->embed_dim, C = c->num_classes;
    float *x = malloc((size_t)n * 3 * S * S * sizeof *x), y0[16], y1[16];
    for (size_t i = 0; i < (size_t)n * 3 * S * S; i++) x[i] = (float)sin(0.37 * (double)i);
    float eye[64], zero[64], ones[64];
    for (int i = 0; i < 64; i++) eye[i] = (i % (H + 1)) == 0 && i < H * H, zero[i] = 0, ones[i] = 1;
    /* talking heads with identity mixes and zero biases = plain attention */
    vit_params p = m.params;
    for (int l = 0; l < c->stage[0].depth; l++)
        p.blocks[l].thl_w = p.blocks[l].thw_w = eye, p.blocks[l].thl_b = p.blocks[l].thw_b = zero;
    vit_config plain = *c;
    plain.talking_heads = 0;
    logits_of(c, &p, x, n, y0);
    logits_of(&plain, &p, x, n, y1);
    check_close("talking heads (identity mixes) vs plain", y0, y1, (size_t)n * C, 1e-5, 1e-5);
    /* ... and the fixture's own mixes do change the logits */
    logits_of(c, &m.params, x, n, y1);
    double d = 0;
    for (int i = 0; i < n * C; i++) d = fmax(d, fabs(y0[i] - y1[i]));
    CHECK(d > 1e-3, "the fixture's mixes change the logits (%g)", d);
    /* LayerScale of ones = none */
    p = m.params;
    for (int l = 0; l < c->depth; l++) p.blocks[l].ls1 = p.blocks[l].ls2 = ones;
    logits_of(c, &p, x, n, y0);
    vit_config nols = *c;
    nols.init_values = 0;
    for (int l = 0; l < c->depth; l++) p.blocks[l].ls1 = p.blocks[l].ls2 = NULL;
    logits_of(&nols, &p, x, n, y1);
    check_close("LayerScale of ones vs none", y0, y1, (size_t)n * C, 1e-6, 1e-6);
    (void)D;
    free(x);
    model_free(&m);
}

/* Class attention = row 0 of global attention on [cls; x]: block L0's recorded map against a full
 * (1 + N) x (1 + N) softmax(scale Q K^T) per head, Q and K from every row of LN1([cls; x]). */
static void test_class_row(void) {
    model m;
    as_error err = {0};
    if (model_load(&m, fx("cait_tiny"), NULL, 0, &err) != AS_OK) {
        CHECK(0, "cait_tiny: %s", err.msg);
        return;
    }
    const vit_config *c = &m.cfg;
    const int S = c->img_size, D = c->embed_dim, H = c->num_heads, hd = D / H, L0 = c->stage[0].depth;
    const int T = 1 + (S / c->patch_size) * (S / c->patch_size);
    float *x = malloc((size_t)3 * S * S * sizeof *x), *att = malloc((size_t)H * T * sizeof *att);
    float *tok = malloc((size_t)(T - 1) * D * sizeof *tok), *u = malloc((size_t)T * D * sizeof *u);
    float *Q = malloc((size_t)T * D * sizeof *Q), *K = malloc((size_t)T * D * sizeof *K), *A = malloc((size_t)T * T * sizeof *A);
    for (int i = 0; i < 3 * S * S; i++) x[i] = (float)cos(0.11 * i);
    float *attn[64] = {0}, *tokens[64] = {0};
    attn[L0] = att;
    tokens[L0 - 1] = tok;
    vit_record rec = {.attn = attn, .tokens = tokens};
    size_t bytes = vit_acts_carve(c, 1, NULL, NULL);
    void *arena = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    vit_acts a;
    vit_acts_carve(c, 1, arena, &a);
    vit_forward(c, &m.params, &a, x, 1, &rec);
    const vit_block_params *bp = &m.params.blocks[L0];
    memcpy(u, m.params.cls_token, (size_t)D * sizeof *u);
    memcpy(u + D, tok, (size_t)(T - 1) * D * sizeof *u);
    kernels_layernorm(u, u, bp->norm1_w, bp->norm1_b, T, D, c->ln_eps);
    vit_linear(Q, u, bp->q_w, bp->q_b, T, D, D, 0);
    vit_linear(K, u, bp->k_w, bp->k_b, T, D, D, 0);
    double worst = 0;
    for (int h = 0; h < H; h++) {
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++) {
                double s = 0;
                for (int e = 0; e < hd; e++) s += (double)Q[i * D + h * hd + e] * K[j * D + h * hd + e];
                A[i * T + j] = (float)(s / sqrt(hd));
            }
        kernels_softmax_rows(A, T, T);
        for (int j = 0; j < T; j++) worst = fmax(worst, fabs(A[j] - att[h * T + j]));
    }
    CHECK(worst < 1e-5, "class attention vs row 0 of global attention on [cls; x]: %g", worst);
    free(arena);
    free(x), free(att), free(tok), free(u), free(Q), free(K), free(A);
    model_free(&m);
}

/* A recorded CaiT trace: the CLASS layers read back with their layout, the talking-heads layers
 * marked signed, and the viewer opening both (drawn as test_view_families.c checks). */
static void test_trace_view(void) {
    const char *exe = getenv("ATTNSCOPE");
    if (!exe) {
        fprintf(stderr, "ATTNSCOPE not set: skipping the trace test (meson sets it)\n");
        return;
    }
    char dir[] = "/tmp/as_cait_XXXXXX", cmd[2048], path[256];
    CHECK(mkdtemp(dir) != NULL, "temp dir");
    static const char *const layers[2] = {"0,2", "2,3"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/t%d.h5", dir, k);
        snprintf(cmd, sizeof cmd, "'%s' record --model '%s' --images '%s/img.png' --out '%s' --layers %s "
                 "--record attn,scores,q,k,internals >/dev/null 2>&1", exe, fx("cait_tiny"), getenv("FIXTURES"),
                 path, layers[k]);
        CHECK(system(cmd) == 0, "%s", cmd);
        trace_reader r;
        as_error err = {0};
        if (trace_reader_open(&r, path, &err) != AS_OK) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        const trace_layer_geom *g = trace_layer(&r, 2);
        CHECK(g && g->scope == VIT_SCOPE_CLASS && g->Tq == 1 && g->Tk == 17 && g->prefix == 1 && !g->attn_signed,
              "layer 2 is a CLASS layer of 1 x 17");
        if (k == 0) CHECK(trace_layer(&r, 0) && trace_layer(&r, 0)->attn_signed, "layer 0's map is marked signed");
        trace_reader_close(&r);
        view v; /* tests/test_view_families.c checks what it draws */
        const as_status st = view_open(&v, path, &err);
        CHECK(st == AS_OK, "view opens talking-heads and class-attention layers: %s", err.msg);
        if (st == AS_OK) view_close(&v);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/p.h5", dir);
    snprintf(cmd, sizeof cmd, "'%s' record --model '%s' --images '%s/img.png' --out '%s' --query-rows prefix "
             "2>&1 | grep -q 'CaiT.s self-attention layers have no class token'", exe, fx("cait_tiny"),
             getenv("FIXTURES"), path);
    CHECK(system(cmd) == 0 && access(path, F_OK) != 0, "--query-rows prefix is refused on CaiT");
    rmdir(dir);
}

/* MaiT's keep mask in CaiT's SA blocks is over the N patches (no class token there). */
static void test_mait_static(void) {
    model m;
    as_error err = {0};
    if (model_load(&m, fx("cait_mait_after"), NULL, 0, &err) != AS_OK) {
        CHECK(0, "cait_mait_after: %s", err.msg);
        return;
    }
    vit_static st;
    CHECK(vit_static_info(&m.cfg, 0, 0, &st) && st.ndim == 3 && st.shape[0] == 3 && st.shape[1] == 16 &&
          st.shape[2] == 16, "mask shape (%d, %d, %d)", st.shape[0], st.shape[1], st.shape[2]);
    float keep[3 * 256];
    vit_static_fill(&m.cfg, &m.params, 0, 0, keep);
    double s0 = 0, s1 = 0;
    for (int i = 0; i < 256; i++) s0 += keep[i], s1 += keep[256 + i];
    CHECK(s0 == 100 && s1 == 256, "R = 3 on a 4 x 4 grid keeps 100 of 256 (%g), head 1 all (%g)", s0, s1);
    model_free(&m);
}

static void refused(const char *json, const char *want) {
    vit_config c = *vit_arch_find("cait_xxs24_224");
    as_error err = {0};
    const as_status st = model_config_apply_json(&c, json, "cfg.json", &err);
    CHECK(st != AS_OK && strstr(err.msg, want) && !strchr(err.msg, '\n'), "%s: %s", json, err.msg);
}

static void test_refusals(void) {
    refused("{\"attention\": {\"type\": \"lmsa\", \"qk_dim\": 64}}", "use \"type\": \"vanilla\"");
    refused("{\"attention\": {\"type\": \"mait\", \"blocks\": [24], \"mask_size\": 3}}", "vanilla");
    refused("{\"attention\": {\"type\": \"mait\", \"blocks\": [0], \"mask_size\": 3, \"mask_mode\": "
            "\"neg_inf\"}}", "\"mask_mix\": \"after_mix\"");
    refused("{\"mask_mix\": \"after_mix\"}", "remove the key");
    refused("{\"class_token\": false}", "is not a CaiT key");
    refused("{\"depth_token_only\": 0}", "depth_token_only");
    refused("{\"global_pool\": \"avg\"}", "\"global_pool\" must be \"token\"");
    /* a custom CaiT round-trips through model_config_to_json */
    vit_config c = *vit_arch_find("cait_xxs24_224"), back;
    as_error err = {0};
    CHECK(model_config_apply_json(&c, "{\"architecture\": \"custom\", \"family\": \"cait\", \"embed_dim\": 48, "
                                  "\"num_heads\": 3, \"depth\": 3, \"depth_token_only\": 1, \"init_values\": 0.5, "
                                  "\"mlp_ratio_token_only\": 2, \"talking_heads\": false}", "c.json", &err) == AS_OK,
          "custom: %s", err.msg);
    char *js = model_config_to_json(&c);
    back = *vit_arch_find("deit_tiny_patch16_224");
    CHECK(js && model_config_apply_json(&back, js, "back.json", &err) == AS_OK, "round trip: %s", err.msg);
    CHECK(back.depth == 4 && back.stage[0].depth == 3 && back.stage[1].depth == 1 && back.stage[1].mlp_hidden == 96 &&
          back.stage[0].mlp_hidden == 192 && back.init_values == 0.5f && !back.talking_heads &&
          back.family == VIT_FAMILY_CAIT, "round trip keeps the CaiT keys");
    free(js);
}

int main(void) {
    test_counts();
    test_mait_seeds();
    test_identities();
    test_refusals();
    test_class_row();
    test_mait_static();
    test_trace_view();
    return check_finish("cait");
}
