/* test_swin_specs.c: the engine's Swin tensor list (vit_param_specs, written by the swin-engine
 * work of issue 16) against timm's module tree and against vit_config_cost; and the official and
 * torchvision layouts loaded end to end, binding the same values as timm's. This test passes
 * only once the engine's staged vit_param_specs is in: before that it fails, naming the first
 * tensor the engine does not list. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>

#include "../io/model.h"
#include "check.h"
#include "swin_names.h"

static as_error err;

/* The engine's tensors of cfg against swin_timm_tensors(a), as sets, and their sum against the
 * closed-form cost. */
static void check_specs(const char *what, const vit_config *cfg, const swin_arch *a) {
    vit_params p;
    const int n = vit_param_specs(cfg, &p, NULL, 0);
    vit_tensor_spec *s = malloc((size_t)(n > 0 ? n : 1) * sizeof *s);
    if (!s) return;
    vit_param_specs(cfg, &p, s, n);
    static swin_tensor want[1200];
    const int m = swin_timm_tensors(a, want);
    double total = 0;
    for (int i = 0; i < n; i++) total += (double)vit_tensor_numel(&s[i]);
    vit_cost cost;
    vit_config_cost(cfg, &cost);
    CHECK(total == cost.params_total, "%s: the engine's tensors hold %.0f values, the cost counts "
          "%.0f", what, total, cost.params_total);
    CHECK(n == m, "%s: the engine lists %d tensors, timm's module tree %d", what, n, m);
    int missing = 0;
    for (int k = 0; k < m && missing < 3; k++) {
        int found = 0;
        for (int i = 0; i < n && !found; i++) {
            if (strcmp(s[i].name, want[k].name) != 0) continue;
            found = s[i].ndim == want[k].ndim;
            for (int d = 0; found && d < s[i].ndim; d++) found = s[i].shape[d] == want[k].shape[d];
        }
        if (!found) missing++;
        CHECK(found, "%s: timm's %s is not in the engine's list with its shape", what, want[k].name);
    }
    free(s);
}

/* The LMSA paper's Swin models (001_437a81f61ef2391f.txt, Table 3: "Params(M)") as built-in
 * names: their parameters to the printed digit, every block's q/k width, and the count against
 * a closed form written here: Swin-T's with a 1x1 stem, less 2 (D - q) (D + 1) per block (the q
 * and k projections of width q instead of D, with their biases). */
static void test_lmsa_seeds(void) {
    static const struct {
        const char *name;
        double mparams;
        int classes, qk[4];
    } t[] = {
        {"swin_tiny_cifar10", 27.52, 10, {96, 192, 384, 768}},
        {"lmsa_swin_tiny_cifar10", 23.33, 10, {3, 6, 12, 24}},
        {"swin_tiny_cifar100", 27.59, 100, {96, 192, 384, 768}},
        {"lmsa_swin_tiny_cifar100", 25.43, 100, {48, 96, 192, 384}},
    };
    static const int depth[4] = {2, 2, 6, 2}, dim[4] = {96, 192, 384, 768};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        vit_config c;
        CHECK(vit_arch_resolve(t[i].name, &c, &err) == AS_OK && vit_config_validate(&c, &err) == AS_OK, "%s: %s",
              t[i].name, err.msg);
        CHECK(c.img_size == 32 && c.patch_size == 1 && c.num_classes == t[i].classes, "%s: %d px, patch %d, %d classes",
              t[i].name, c.img_size, c.patch_size, c.num_classes);
        vit_cost k;
        vit_config_cost(&c, &k);
        CHECK(round(k.params_total / 1e4) / 100 == t[i].mparams, "%s: %.4f M params, Table 3 prints %g", t[i].name,
              k.params_total / 1e6, t[i].mparams);
        double closed = 0;
        /* Swin-T (timm clamp: the last stage's 4 x 4 grid makes its window and table 4 x 4) */
        const int table[4] = {13 * 13, 13 * 13, 13 * 13, 7 * 7};
        closed += 3 * 96 + 96 + 2 * 96; /* 1x1 conv stem and its norm */
        for (int s = 0, l = 0; s < 4; s++) {
            const double D = dim[s], H = D / 32, q = t[i].qk[s];
            if (s) closed += 2 * 4 * D / 2 + 4 * (D / 2) * D; /* merge: LN(4C) and Linear(4C, 2C) */
            for (int j = 0; j < depth[s]; j++, l++) {
                closed += 4 * D + (3 * D * D + 3 * D) + table[s] * H + D * D + D + 2 * (4 * D * D) + 4 * D + D;
                closed -= 2 * (D - q) * (D + 1);
                CHECK((q == D ? c.attn[l].kind == VIT_ATTN_VANILLA : c.attn[l].kind == VIT_ATTN_LMSA && c.attn[l].qk_dim == q),
                      "%s: block %d: %s qk_dim %d, want %g", t[i].name, l, vit_attn_name(c.attn[l].kind), c.attn[l].qk_dim, q);
            }
        }
        closed += 2 * 768 + 768 * t[i].classes + t[i].classes;
        CHECK(k.params_total == closed, "%s: %.0f params, closed form %.0f", t[i].name, k.params_total, closed);
    }
}

int main(void) {
    test_lmsa_seeds();
    static const struct {
        const char *name;
        swin_arch a;
    } b[] = {
        {"swin_tiny_patch4_window7_224", {224, 4, 3, 96, 4, {2, 2, 6, 2}, {3, 6, 12, 24}, 7, 1000, 1}},
        {"swin_small_patch4_window7_224", {224, 4, 3, 96, 4, {2, 2, 18, 2}, {3, 6, 12, 24}, 7, 1000, 1}},
        {"swin_base_patch4_window7_224", {224, 4, 3, 128, 4, {2, 2, 18, 2}, {4, 8, 16, 32}, 7, 1000, 1}},
        {"swin_base_patch4_window12_384", {384, 4, 3, 128, 4, {2, 2, 18, 2}, {4, 8, 16, 32}, 12, 1000, 1}},
    };
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) check_specs(b[i].name, vit_arch_find(b[i].name), &b[i].a);
    /* the tiny fixture form at a clamped size, without patch norm or head */
    vit_config c;
    memset(&c, 0, sizeof c);
    CHECK(model_config_apply_json(&c, "{\"architecture\": \"custom\", \"num_classes\": 0, \"model_args\": "
                                      "{\"family\": \"swin\", \"img_size\": 24, \"patch_size\": 2, "
                                      "\"embed_dim\": 16, \"depths\": [2, 2], \"num_heads\": [2, 4], "
                                      "\"window_size\": 8, \"patch_norm\": false}}", "tiny.json", &err) == AS_OK,
          "%s", err.msg);
    const swin_arch tiny0 = {24, 2, 3, 16, 2, {2, 2}, {2, 4}, 8, 0, 0};
    check_specs("tiny Swin at 24, window 8", &c, &tiny0);

    /* the three layouts of one checkpoint load and bind the same values */
    char tmp[] = "/tmp/attnscope-swinspecs.XXXXXX";
    if (!mkdtemp(tmp)) return 1;
    static const char *const lname[3] = {"timm", "official", "torchvision"};
    const swin_arch tiny = {32, 2, 3, 16, 2, {2, 2}, {2, 4}, 4, 10, 1};
    model m[3];
    int loaded[3] = {0, 0, 0};
    for (int l = 0; l < 3; l++) {
        char dir[128], path[160];
        snprintf(dir, sizeof dir, "%s/%s", tmp, lname[l]);
        mkdir(dir, 0777);
        snprintf(path, sizeof path, "%s/config.json", dir);
        FILE *f = fopen(path, "w");
        if (f) fputs("{\"architecture\": \"custom\", \"num_classes\": 10, \"model_args\": {\"family\": "
                     "\"swin\", \"img_size\": 32, \"patch_size\": 2, \"embed_dim\": 16, \"depths\": [2, 2], "
                     "\"num_heads\": [2, 4], \"window_size\": 4}}", f), fclose(f);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        CHECK(swin_write_layout(path, l, &tiny, 0) > 0, "write %s", path);
        memset(&err, 0, sizeof err);
        loaded[l] = model_load(&m[l], dir, NULL, 0, &err) == AS_OK;
        CHECK(loaded[l] && m[l].layout == (layout_kind)l, "%s layout: %s", lname[l], err.msg);
        if (loaded[l]) {
            char note[512];
            model_layout_note(&m[l], note, sizeof note);
            CHECK(strstr(note, layout_describe((layout_kind)l)) && (l == 0 || strstr(note, "attnscope computes them")),
                  "%s note: %s", lname[l], note);
        }
    }
    if (loaded[0] && loaded[1] && loaded[2]) {
        vit_params p;
        const int n = vit_param_specs(&m[0].cfg, &p, NULL, 0);
        vit_tensor_spec *s = malloc((size_t)(n > 0 ? n : 1) * sizeof *s);
        if (s) vit_param_specs(&m[0].cfg, &p, s, n);
        for (int i = 0; s && i < n; i++) {
            const size_t off = (size_t)((const char *)s[i].slot - (const char *)&p);
            const float *v[3];
            for (int l = 0; l < 3; l++) v[l] = *(const float *const *)((const char *)&m[l].params + off);
            const size_t numel = vit_tensor_numel(&s[i]);
            CHECK(v[0] && v[1] && v[2] && memcmp(v[0], v[1], numel * sizeof(float)) == 0 &&
                      memcmp(v[0], v[2], numel * sizeof(float)) == 0,
                  "%s: the layouts bind different values", s[i].name);
        }
        free(s);
    }
    for (int l = 0; l < 3; l++)
        if (loaded[l]) model_free(&m[l]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return check_finish("swin_specs");
}
