/* test_threads.c: results do not depend on the thread count, bit for bit. For every model of
 * experiments/models/NAME_shapes.json (the configs the experiments train): two AdamW steps on 16
 * and on 32 images at 1 and at 2 threads give identical weights, and the inference forward
 * gives identical logits and attention maps. 16 images (1040 rows in every weight gradient's
 * reduction) are where OpenBLAS 0.3.21's GEMM blocks the reduction differently with 2 threads;
 * 32 images are where its GEMV splits LMSA's 2080-row key/query bias sums (16 columns) over the
 * threads: both changed the weights with the thread count before kernels_gemm. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <omp.h>
#include <stdint.h>

#include "../core/train.h"
#include "../io/checkpoint.h"
#include "check.h"

static float *rand_images(const vit_config *c, int n, uint32_t seed) {
    const size_t len = (size_t)n * c->in_chans * c->img_size * c->img_size;
    float *x = malloc(len * sizeof(float));
    for (size_t i = 0; i < len; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
    }
    return x;
}

/* Two training steps (forward, loss, backward, clipping, AdamW) from the initial weights w0 at
 * the given thread count; the weights after them are left in t->w. */
static void two_steps(trainable *t, const float *w0, const float *x, const int *labels, int n, int threads) {
    const vit_config *c = &t->cfg;
    omp_set_num_threads(threads);
    memcpy(t->w, w0, t->count * sizeof(float));
    memset(t->m, 0, t->count * sizeof(float));
    memset(t->v, 0, t->count * sizeof(float));
    vit_tape tape;
    vit_acts a;
    vit_grad_ws ws;
    void *ta = aligned_alloc(64, vit_tape_carve(c, n, NULL, NULL));
    void *aa = aligned_alloc(64, vit_acts_carve(c, n, NULL, NULL));
    void *wa = aligned_alloc(64, vit_grad_ws_carve(c, n, NULL, NULL));
    vit_tape_carve(c, n, ta, &tape);
    vit_acts_carve(c, n, aa, &a);
    vit_grad_ws_carve(c, n, wa, &ws);
    a.tape = &tape;
    float *dl = malloc((size_t)n * c->num_classes * sizeof(float));
    optim_adamw o = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.05f};
    for (int s = 0; s < 2; s++) {
        vit_forward(c, &t->p, &a, x, n, NULL);
        vit_loss_ce(a.logits, labels, n, c->num_classes, 0.1f, dl, NULL);
        memset(t->g, 0, t->count * sizeof(float));
        vit_backward(c, &t->p, &t->gp, &a, &ws, dl, n, 0.1f, VIT_DP_SQUARED);
        optim_clip(t->g, t->count, 1.0f);
        optim_adamw_step(&o, t->w, t->g, t->m, t->v, t->decay, t->count, 1e-3f);
    }
    free(dl);
    free(ta);
    free(aa);
    free(wa);
}

/* The inference forward with every layer's attention maps recorded; logits and maps in out. */
/* Floats of block l's maps for n images: (n, H, problems, Tq, Tk). */
static size_t map_floats(const vit_config *c, int l, int n) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    return (size_t)n * g.H * g.problems * g.Tq * g.Tk;
}

/* Floats of record's output: the logits, then every block's maps. */
static size_t record_floats(const vit_config *c, int n) {
    size_t len = (size_t)n * c->num_classes;
    for (int l = 0; l < c->depth; l++) len += map_floats(c, l, n);
    return len;
}

static void record(const trainable *t, const float *x, int n, int threads, float *out) {
    const vit_config *c = &t->cfg;
    omp_set_num_threads(threads);
    float *maps[VIT_MAX_DEPTH];
    size_t off = (size_t)n * c->num_classes;
    for (int l = 0; l < c->depth; l++) {
        maps[l] = out + off;
        off += map_floats(c, l, n);
    }
    vit_record rec = {.attn = maps};
    vit_acts a;
    void *aa = aligned_alloc(64, vit_acts_carve(c, n, NULL, NULL));
    vit_acts_carve(c, n, aa, &a);
    vit_forward(c, &t->p, &a, x, n, &rec);
    memcpy(out, a.logits, (size_t)n * c->num_classes * sizeof(float));
    free(aa);
}

static size_t first_diff(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof(float))) return i;
    return n;
}

static void test_config(const char *path, const char *name) {
    as_error err = {0};
    vit_config cfg;
    if (model_config_from_arch(&cfg, path, &err) != AS_OK || vit_config_validate(&cfg, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    model m;
    trainable t;
    if (model_init_random(&m, &cfg, 7, &err) != AS_OK || trainable_init(&t, &m, &err) != AS_OK) {
        CHECK(0, "%s: %s", name, err.msg);
        return;
    }
    float *w0 = malloc(t.count * sizeof(float)), *w1 = malloc(t.count * sizeof(float));
    memcpy(w0, t.w, t.count * sizeof(float));
    const int sizes[] = {16, 32};
    for (int k = 0; k < 2; k++) {
        const int n = sizes[k];
        float *x = rand_images(&cfg, n, 11u + (uint32_t)n);
        int labels[32];
        for (int i = 0; i < n; i++) labels[i] = i % cfg.num_classes;
        two_steps(&t, w0, x, labels, n, 1);
        memcpy(w1, t.w, t.count * sizeof(float));
        two_steps(&t, w0, x, labels, n, 2);
        const size_t d = first_diff(w1, t.w, t.count);
        int ti = 0;
        while (ti + 1 < t.n && t.offset[ti + 1] <= d) ti++;
        CHECK(d == t.count, "%s, %d images: the weights after two steps differ between 1 and 2 threads, first in %s "
              "(%.9g vs %.9g)", name, n, t.specs[ti].name, d < t.count ? (double)w1[d] : 0.0,
              d < t.count ? (double)t.w[d] : 0.0);
        if (k == 0) {
            /* the forward from the trained weights, as record runs it */
            const size_t len = record_floats(&cfg, n);
            float *r1 = malloc(len * sizeof(float)), *r2 = malloc(len * sizeof(float));
            record(&t, x, n, 1, r1);
            record(&t, x, n, 2, r2);
            const size_t rd = first_diff(r1, r2, len);
            CHECK(rd == len, "%s: the forward's %s differ between 1 and 2 threads (float %zu)", name,
                  rd < (size_t)n * cfg.num_classes ? "logits" : "attention maps", rd);
            free(r1);
            free(r2);
        }
        printf("%-22s %2d images: weights after two steps %s at 1 and 2 threads\n", name, n,
               d == t.count ? "identical" : "DIFFER");
        free(x);
    }
    free(w0);
    free(w1);
    trainable_free(&t);
    model_free(&m);
}

int main(void) {
    const int threads = omp_get_max_threads();
    char dir[1100];
    const char *f = getenv("FIXTURES");
    snprintf(dir, sizeof dir, "%s/../../experiments/models", f ? f : "tests/fixtures");
    DIR *dp = opendir(dir);
    CHECK(dp, "%s: cannot open", dir);
    int seen = 0;
    for (struct dirent *e; dp && (e = readdir(dp));) {
        const size_t len = strlen(e->d_name);
        if (len < 12 || strcmp(e->d_name + len - 12, "_shapes.json")) continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        test_config(path, e->d_name);
        seen++;
    }
    if (dp) closedir(dp);
    /* and mechanisms in windows no shipped config trains: LSLA in shifted, padded windows; the
     * convolutional stems' per-channel sums (BatchNorm, conv bias) */
    static const char *const fixtures[] = {"swin_lsla", "swin_lsla_alt", "swin_lsla_qkv", "swin_hmait", "swin_hmait_soft", "vit_stem", "swin_stem"};
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) {
        char path[1400];
        snprintf(path, sizeof path, "%s/%s/config.json", f ? f : "tests/fixtures", fixtures[i]);
        test_config(path, fixtures[i]);
    }
    CHECK(seen >= 6, "%d *_shapes.json configs in %s, want the six of experiments/models", seen, dir);
    omp_set_num_threads(threads);
    return check_finish("threads");
}
