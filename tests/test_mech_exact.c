/* test_mech_exact.c: the mechanisms as modules (core/mech/) give the same bits as the engine
 * before the move: every record of the committed mixed-mechanism fixtures (logits, maps, scores,
 * q, k, block outputs, internals) against SHA-256 digests of what the binary of main at 1a6c192
 * recorded (tests/fixtures/mech_exact.txt, tools/mech_digests.py). And the registry's contract:
 * names, keys, and the scopes each mechanism accepts or refuses with the fix. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "../cli/cli.h"
#include "../core/mech.h"
#include "../io/sha256.h"
#include "check.h"

char *openblas_get_corename(void);

enum { RQ = 8 }; /* attn, scores, q, k, tokens, extra 0, extra 1, logits */
static const char *const rq_names[5] = {"attn", "scores", "q", "k", "tokens"};

/* Floats of record q of layer l for one image. */
static size_t per_image(const vit_config *c, int q, int l) {
    const size_t T = (size_t)vit_num_tokens(c), H = (size_t)c->num_heads;
    vit_extra x;
    if (q == 0 || q == 1) return H * T * T;
    if (q == 2 || q == 3) return H * T * (size_t)vit_qk_head_dim(c, l);
    if (q == 4) return T * (size_t)c->embed_dim;
    return vit_extra_info(c, l, q - 5, &x) ? (size_t)x.heads * T * T : 0;
}

/* Runs fixture `name` on inputs.npy recording everything, and checks each digest line of that
 * model. Returns the number of records compared. */
static int check_model(const char *name, char lines[][160], int nlines) {
    model m;
    as_error err = {0};
    dataset ds;
    if (model_load(&m, fx(name), NULL, 0, &err) != AS_OK || dataset_open(&ds, fx("inputs.npy"), &err) != AS_OK) {
        CHECK(0, "%s: %s", name, err.msg);
        return 0;
    }
    const vit_config *c = &m.cfg;
    const int n = ds.count, S = c->img_size, L = c->depth;
    float **rec[RQ - 1];
    size_t floats[RQ - 1][VIT_MAX_DEPTH];
    for (int q = 0; q < RQ - 1; q++) {
        rec[q] = calloc((size_t)L, sizeof *rec[q]);
        for (int l = 0; l < L; l++) {
            floats[q][l] = per_image(c, q, l) * (size_t)n;
            rec[q][l] = floats[q][l] ? malloc(floats[q][l] * sizeof(float)) : NULL;
        }
    }
    vit_record r = {.attn = rec[0], .scores = rec[1], .q = rec[2], .k = rec[3], .tokens = rec[4],
                    .extra = {rec[5], rec[6]}};
    const size_t bytes = vit_acts_carve(c, n, NULL, NULL);
    void *arena = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    vit_acts a;
    vit_acts_carve(c, n, arena, &a);
    float *x = malloc((size_t)n * c->in_chans * S * S * sizeof(float));
    for (int i = 0; i < n; i++) dataset_load(&ds, i, x + (size_t)i * c->in_chans * S * S, NULL, c, &err);
    vit_forward(c, &m.params, &a, x, n, &r);

    int compared = 0;
    for (int i = 0; i < nlines; i++) {
        char mod[64], what[64], want[SHA256_HEX], got[SHA256_HEX] = "";
        if (sscanf(lines[i], "%63s %63s %64s", mod, what, want) != 3 || strcmp(mod, name) != 0) continue;
        const float *buf = NULL;
        size_t count = 0;
        int l = -1;
        char qn[48] = "";
        if (strcmp(what, "logits") == 0) {
            buf = a.logits;
            count = (size_t)n * c->num_classes;
        } else if (sscanf(what, "%d/%47s", &l, qn) == 2 && l >= 0 && l < L) {
            for (int q = 0; q < RQ - 1 && !buf; q++) {
                vit_extra e;
                const char *nm = q < 5 ? rq_names[q] : vit_extra_info(c, l, q - 5, &e) ? e.name : NULL;
                if (nm && strcmp(nm, qn) == 0) {
                    buf = rec[q][l];
                    count = floats[q][l];
                }
            }
        }
        CHECK(buf != NULL, "%s %s: the engine has no such record", name, what);
        if (!buf) continue;
        sha256_hex(buf, count * sizeof(float), got);
        CHECK(strcmp(got, want) == 0, "%s %s: the bytes differ from the engine before the "
              "mechanisms became modules (sha256 %.16s..., want %.16s...)", name, what, got, want);
        compared++;
    }
    free(x);
    free(arena);
    for (int q = 0; q < RQ - 1; q++) {
        for (int l = 0; l < L; l++) free(rec[q][l]);
        free(rec[q]);
    }
    dataset_free(&ds);
    model_free(&m);
    return compared;
}

/* A two-stage Swin-like config whose blocks all run mechanism k in WINDOW scope. */
static vit_config window_config(vit_attn_kind k) {
    vit_config c = {.name = "swin_test", .img_size = 32, .patch_size = 4, .in_chans = 3, .embed_dim = 32,
                    .depth = 4, .num_heads = 2, .mlp_hidden = 128, .num_classes = 10, .qkv_bias = 1,
                    .global_pool = VIT_POOL_AVG, .ln_eps = 1e-5f, .mean = {0.5f, 0.5f, 0.5f},
                    .std = {0.5f, 0.5f, 0.5f}, .crop_pct = 0.9f, .family = VIT_FAMILY_SWIN,
                    .n_stages = 2, .patch_norm = 1, .shift_windows = 1};
    c.stage[0] = (vit_stage){.depth = 2, .embed_dim = 32, .num_heads = 2, .mlp_hidden = 128,
                             .scope = VIT_SCOPE_WINDOW, .window = 4, .down = VIT_DOWN_NONE};
    c.stage[1] = (vit_stage){.depth = 2, .embed_dim = 64, .num_heads = 4, .mlp_hidden = 256,
                             .scope = VIT_SCOPE_WINDOW, .window = 4, .down = VIT_DOWN_MERGE};
    for (int l = 0; l < c.depth; l++) {
        vit_attn *a = &c.attn[l];
        const vit_mech *m = vit_mech_get_kind(k);
        a->kind = k;
        if (m->defaults) m->defaults(a);
        a->qk_dim = 8;
        a->expanded_heads = 4;
        a->mask_size[0] = a->mask_size[1] = 3; /* stage 0 has 2 heads */
    }
    if (k == VIT_ATTN_LESS) c.attn[0].kind = c.attn[2].kind = VIT_ATTN_VANILLA; /* scores to reuse */
    if (k == VIT_ATTN_REFINER_SHARED) c.attn[0].kind = VIT_ATTN_REFINER_RELEASE; /* a map to refine */
    return c;
}

static void test_scopes(void) {
    /* the seeds run LSLA and LMSA inside Swin windows; MaiT, Refiner and less are global only */
    static const int window_ok[VIT_ATTN_COUNT] = {
        [VIT_ATTN_VANILLA] = 1, [VIT_ATTN_LMSA] = 1, [VIT_ATTN_LSLA] = 1};
    for (int k = 0; k < VIT_ATTN_COUNT; k++) {
        vit_config c = window_config((vit_attn_kind)k);
        as_error err = {0};
        const as_status st = vit_config_validate(&c, &err);
        if (window_ok[k]) {
            CHECK(st == AS_OK, "%s in window scope: refused: %s", vit_attn_name((vit_attn_kind)k), err.msg);
        } else {
            CHECK(st == AS_ERR_CONFIG && strstr(err.msg, "cannot run in window scope") &&
                      strstr(err.msg, "use one of vanilla, lmsa, lsla"),
                  "%s in window scope: want a refusal naming the scope and the fix, got \"%s\"",
                  vit_attn_name((vit_attn_kind)k), err.msg);
            CHECK(!strchr(err.msg, '\n'), "one line: %s", err.msg);
        }
        /* the same mechanism in a global model is fine */
        vit_config g = c;
        g.n_stages = 0;
        g.family = VIT_FAMILY_VIT;
        g.depth = 4;
        g.mlp_hidden = 64;
        CHECK(vit_config_validate(&g, &err) == AS_OK, "%s in global scope: %s",
              vit_attn_name((vit_attn_kind)k), err.msg);
    }
}

static void test_registry(void) {
    CHECK(vit_mech_count() == VIT_ATTN_COUNT, "registry size %d", vit_mech_count());
    for (int k = 0; k < VIT_ATTN_COUNT; k++) {
        const vit_mech *m = vit_mech_get_kind((vit_attn_kind)k);
        CHECK(m && m->name && m->summary && m->layout && m->specs && m->cost && m->scopes,
              "mechanism %d lacks a required part", k);
        if (!m) continue;
        CHECK(vit_attn_parse(m->name) == k, "%s: the name does not parse back", m->name);
        CHECK((m->n_keys == 0) == (m->parse == NULL), "%s: keys without a parser or back", m->name);
        for (int i = 0; i < m->n_keys; i++)
            CHECK(m->keys[i].name && m->keys[i].doc && m->keys[i].doc[0], "%s: key %d undocumented", m->name, i);
        CHECK((m->maps == NULL) == (m->maps_backward == NULL), "%s: map work without its backward", m->name);
        CHECK(m->statics == NULL || m->static_fill != NULL, "%s: statics without fill", m->name);
        CHECK(!(m->flags & VIT_MECH_PLAIN) || vit_mech_plain(m), "%s: says plain but has hooks or carries maps",
              m->name);
    }
    CHECK(vit_mech_get_kind(VIT_ATTN_COUNT) == NULL && vit_attn_parse("flash") == -1, "unknown kinds");
    /* the inference forward fuses exactly these (core/attn_kernel.c) */
    for (int k = 0; k < VIT_ATTN_COUNT; k++) {
        const vit_mech *m = vit_mech_get_kind(k);
        if (!m) continue;
        const int want = strcmp(m->name, "vanilla") == 0 || strcmp(m->name, "lmsa") == 0;
        CHECK(vit_mech_plain(m) == want, "%s: plain %d, expected %d", m->name, vit_mech_plain(m), want);
    }
}

int main(int argc, char **argv) {
    /* OpenBLAS picks its kernels when it loads: a core forced from the environment (some set
     * OPENBLAS_CORETYPE=Haswell) would turn the exact comparison into a skip on the very machine
     * the digests come from, so the test reruns itself once with the CPU's own choice */
    (void)argc;
    const char *forced = getenv("OPENBLAS_CORETYPE");
    if (forced && !getenv("AS_MECH_EXACT_RERUN")) {
        printf("mech_exact: OPENBLAS_CORETYPE=%s from the environment: rerun with the CPU's own core\n", forced);
        fflush(stdout);
        if (unsetenv("OPENBLAS_CORETYPE") == 0 && setenv("AS_MECH_EXACT_RERUN", "1", 1) == 0)
            execv("/proc/self/exe", argv);
        CHECK(0, "cannot rerun without OPENBLAS_CORETYPE");
        return check_finish("mech_exact");
    }
    /* the digests are of OpenBLAS's products (the linear layers before oneDNN, core/gemm.h) */
    char msg[256];
    CHECK(vit_gemm_select("openblas", msg, sizeof msg), "%s", msg);
    test_registry();
    test_scopes();
    FILE *f = fopen(fx("mech_exact.txt"), "r");
    CHECK(f != NULL, "cannot open %s", fx("mech_exact.txt"));
    if (!f) return check_finish("mech_exact");
    static char lines[512][160];
    int n = 0;
    char cores[160] = ""; /* the kinds of core the digests were made (or checked) on */
    while (n < 512 && fgets(lines[n], sizeof lines[n], f)) {
        if (strncmp(lines[n], "# openblas core: ", 17) == 0) snprintf(cores, sizeof cores, " %s", lines[n] + 17);
        if (lines[n][0] == '#') continue;
        n++;
    }
    fclose(f);
    const size_t len = strcspn(cores, "\n");
    if (cores[0] && len + 2 <= sizeof cores) cores[len] = ' ', cores[len + 1] = '\0'; /* " A B " */
    /* OpenBLAS picks its kernels by CPU, and kernels of other widths round differently: the
     * digests hold on the kinds of core they were made on */
    const char *here = openblas_get_corename();
    char word[80];
    snprintf(word, sizeof word, " %s ", here ? here : "");
    if (cores[0] && here && !strstr(cores, word)) {
        const char *core = cores + 1;
        printf("mech_exact: digests from an OpenBLAS %.*s core, this is %s: exact comparison "
               "skipped (tests/fixtures/mech_exact.txt says how to remake them)\n", (int)strlen(core) - 1, core, here);
        check_finish("mech_exact");
        return check_failed ? 1 : 77;
    }
    int total = 0;
    static const char *const models[] = {"mech_cls", "mech_gap", "mech_dist", "vit_cls"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) total += check_model(models[i], lines, n);
    CHECK(total == n && n > 90, "%d of %d digests compared", total, n);
    return check_finish("mech_exact");
}
