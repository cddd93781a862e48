/* test_train.c: the backward pass against PyTorch autograd (tools/make_train_fixtures.py):
 * the loss and the gradient of every parameter tensor of every fixture model, which together
 * hold every mechanism (vanilla, LMSA, LSLA full and relative biases with and without DS,
 * QXX/QXV and NP, MaiT zero/soft/-inf, LaViT less-attention chains with both readings of the
 * diagonality term (squared, hinge, flipped),
 * Refiner), class/distillation/no prefix tokens, token and average pooling, fc_norm, and Swin
 * (tools/make_stage_train_fixtures.py: shifted windows, padded windows, both clamps). Then
 * AdamW steps with clipping against torch.optim.AdamW, the schedule, thread independence. */
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <stdint.h>

#include "../core/train.h"
#include "../io/checkpoint.h"
#include "../io/dataset.h"
#include "../io/traindata.h"
#include "check.h"

/* One training step's loss and gradients (in t->g) for the fixture inputs. */
typedef struct {
    double ce, dp;
    float *logits;
} step_out;

static void train_step(trainable *t, const float *x, const int *labels, int n, float smoothing,
                       float dp_weight, vit_dp_loss dp_loss, step_out *o) {
    const vit_config *c = &t->cfg;
    vit_tape tape;
    void *ta = aligned_alloc(64, vit_tape_carve(c, n, NULL, NULL));
    void *aa = aligned_alloc(64, vit_acts_carve(c, n, NULL, NULL));
    void *wa = aligned_alloc(64, vit_grad_ws_carve(c, n, NULL, NULL));
    vit_acts a;
    vit_grad_ws ws;
    vit_tape_carve(c, n, ta, &tape);
    vit_acts_carve(c, n, aa, &a);
    vit_grad_ws_carve(c, n, wa, &ws);
    a.tape = &tape;
    vit_forward(c, &t->p, &a, x, n, NULL);
    float *dl = malloc((size_t)n * c->num_classes * sizeof(float));
    o->ce = vit_loss_ce(a.logits, labels, n, c->num_classes, smoothing, dl, NULL);
    o->logits = malloc((size_t)n * c->num_classes * sizeof(float));
    memcpy(o->logits, a.logits, (size_t)n * c->num_classes * sizeof(float));
    memset(t->g, 0, t->count * sizeof(float));
    o->dp = vit_backward(c, &t->p, &t->gp, &a, &ws, dl, n, dp_weight, dp_loss);
    free(dl);
    free(ta);
    free(aa);
    free(wa);
}

static float max_abs(const float *x, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

/* One model's loss and gradients under one reading of LaViT's term against the fixture:
 * grad.NAME for the default (squared), READING.grad.NAME for another where the model has
 * less-attention blocks (elsewhere the term is 0 and the readings share grad.NAME). */
static void test_model_reading(const char *name, const float *x, int n, vit_dp_loss reading) {
    char dir[1024], path[1100], key[64];
    snprintf(dir, sizeof dir, "%s", fx(name));
    as_error err = {0};
    model m;
    if (model_load(&m, dir, NULL, 0, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    trainable t;
    CHECK(trainable_init(&t, &m, &err) == AS_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/grads.safetensors", dir);
    safetensors st;
    if (safetensors_open(&st, path, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    const char *rname = vit_dp_loss_name(reading);
    char prefix[32] = "";
    char first[192];
    snprintf(first, sizeof first, "%s.grad.%s", rname, t.specs[0].name);
    if (reading != VIT_DP_SQUARED && safetensors_find(&st, first)) snprintf(prefix, sizeof prefix, "%s.", rname);
    CHECK(reading == VIT_DP_SQUARED || prefix[0] || !vit_any_attn(&t.cfg, VIT_ATTN_LESS),
          "%s: no %s gradients in the fixture (rerun tools/make_train_fixtures.py)", name, rname);
    float ref[4];
    int labels[8];
    safetensors_read_f32(&st, safetensors_find(&st, "labels"), ref, &err);
    for (int i = 0; i < n; i++) labels[i] = (int)ref[i];
    float ce_ref = NAN, dp_ref = NAN;
    snprintf(key, sizeof key, "loss.dp.%s", rname);
    const safetensors_tensor *ct = safetensors_find(&st, "loss.ce"), *dt = safetensors_find(&st, key);
    CHECK(ct && dt, "%s: loss.ce or %s missing from the fixture", name, key);
    if (ct) safetensors_read_f32(&st, ct, &ce_ref, &err);
    if (dt) safetensors_read_f32(&st, dt, &dp_ref, &err);

    /* the training forward gives the inference forward's logits */
    const vit_config *c = &t.cfg;
    void *aa = aligned_alloc(64, vit_acts_carve(c, n, NULL, NULL));
    vit_acts a;
    vit_acts_carve(c, n, aa, &a);
    vit_forward(c, &t.p, &a, x, n, NULL);

    step_out o;
    train_step(&t, x, labels, n, 0.1f, 0.5f, reading, &o);
    check_close("training-forward logits", o.logits, a.logits, (size_t)n * c->num_classes, 0, 0);
    CHECK(fabs(o.ce - ce_ref) < 1e-5 * fabs(ce_ref) + 1e-6, "%s: ce %.8g want %.8g", name, o.ce, (double)ce_ref);
    CHECK(fabs(o.dp - dp_ref) < 1e-5 * fabs(dp_ref) + 1e-6, "%s: dp (%s) %.8g want %.8g", name, rname, o.dp,
          (double)dp_ref);
    int seen = 0;
    double worst = 0;
    for (int i = 0; i < t.n; i++) {
        char gname[192];
        if (t.specs[i].buffer) { /* BatchNorm's running statistics: never trained */
            const size_t numel = vit_tensor_numel(&t.specs[i]);
            size_t nonzero = 0;
            for (size_t e = 0; e < numel; e++) nonzero += t.g[t.offset[i] + e] != 0.0f;
            CHECK(nonzero == 0, "%s: buffer %s got %zu nonzero gradients", name, t.specs[i].name, nonzero);
            seen++;
            continue;
        }
        snprintf(gname, sizeof gname, "%sgrad.%s", prefix, t.specs[i].name);
        const safetensors_tensor *gt = safetensors_find(&st, gname);
        const size_t numel = vit_tensor_numel(&t.specs[i]);
        CHECK(gt && gt->numel == numel, "%s: %s missing from the fixture", name, gname);
        if (!gt || gt->numel != numel) continue;
        float *want = malloc(numel * sizeof(float));
        safetensors_read_f32(&st, gt, want, &err);
        const float scale = max_abs(want, numel);
        char what[300];
        snprintf(what, sizeof what, "%s (%s) %s", name, rname, gname);
        /* within 1e-4 of the tensor's largest gradient (norm-wise relative) */
        /* a floor for tensors whose true gradient is 0 (LMSA's key bias, the attention
         * residual's conv bias: softmax ignores a constant per row), where float32 leaves
         * ~1e-8, or 1.6e-7 summed over a residual's every map entry */
        check_close(what, t.g + t.offset[i], want, numel, 1e-4 * scale + 5e-7, 0);
        seen++;
        if (scale < 1e-6f) {
            free(want);
            continue;
        }
        for (size_t e = 0; e < numel; e++) {
            const double d = fabs((double)t.g[t.offset[i] + e] - want[e]) / (scale + 1e-30);
            worst = d > worst ? d : worst;
        }
        free(want);
    }
    CHECK(seen == t.n, "%s: %d of %d tensors compared", name, seen, t.n);
    printf("%-10s %-7s %3d tensors, loss %.6f (dp %.6f), worst gradient error %.2e of the tensor's max\n",
           name, rname, seen, o.ce + o.dp, o.dp, worst);

    /* the same gradients with one thread, bit for bit (these 2 images are too few for
     * OpenBLAS's thread-dependent blocking: test_threads.c covers batches where it mattered) */
    float *g2 = malloc(t.count * sizeof(float));
    memcpy(g2, t.g, t.count * sizeof(float));
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    step_out o1;
    train_step(&t, x, labels, n, 0.1f, 0.5f, reading, &o1);
    omp_set_num_threads(threads);
    double tdiff = 0, gmax = max_abs(g2, t.count);
    for (size_t e = 0; e < t.count; e++) tdiff = fmax(tdiff, fabs((double)t.g[e] - g2[e]));
    CHECK(tdiff == 0, "%s: 1 thread vs %d: gradients differ by %.3g (largest %.3g)", name, threads, tdiff, gmax);
    free(g2);
    free(o.logits);
    free(o1.logits);
    free(aa);
    safetensors_close(&st);
    trainable_free(&t);
    model_free(&m);
}

/* The fixture's logits (its reference's forward, expected.safetensors) from the forward. */
static void check_logits(const char *name, const float *x, int n) {
    char path[1100];
    as_error err = {0};
    model m;
    if (model_load(&m, fx(name), NULL, 0, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    snprintf(path, sizeof path, "%s/expected.safetensors", fx(name));
    safetensors st;
    if (safetensors_open(&st, path, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        model_free(&m);
        return;
    }
    const int C = m.cfg.num_classes;
    const safetensors_tensor *lt = safetensors_find(&st, "logits");
    CHECK(lt && lt->numel == (size_t)n * C, "%s: no logits of %d images in expected.safetensors", name, n);
    void *aa = aligned_alloc(64, vit_acts_carve(&m.cfg, n, NULL, NULL));
    float *want = malloc((size_t)n * C * sizeof(float));
    if (lt && lt->numel == (size_t)n * C && aa && want && safetensors_read_f32(&st, lt, want, &err) == AS_OK) {
        vit_acts a;
        vit_acts_carve(&m.cfg, n, aa, &a);
        vit_forward(&m.cfg, &m.params, &a, x, n, NULL);
        char what[128];
        snprintf(what, sizeof what, "%s logits against its reference", name);
        check_close(what, a.logits, want, (size_t)n * C, 1e-4, 1e-4);
    }
    free(want);
    free(aa);
    safetensors_close(&st);
    model_free(&m);
}

static void test_model(const char *name, const float *x, int n) {
    for (int k = 0; k < VIT_DP_COUNT; k++) test_model_reading(name, x, n, (vit_dp_loss)k);
}

/* The readings' names round-trip; an unknown name is refused. */
static void test_dp_names(void) {
    for (int k = 0; k < VIT_DP_COUNT; k++)
        CHECK(vit_dp_loss_parse(vit_dp_loss_name((vit_dp_loss)k)) == k, "reading %d", k);
    CHECK(vit_dp_loss_parse("printed") == -1 && vit_dp_loss_parse(NULL) == -1, "unknown readings are refused");
    CHECK(strcmp(vit_dp_loss_name((vit_dp_loss)0), "squared") == 0, "the default is the squared reading");
}

/* AdamW with clipping against torch.optim.AdamW + clip_grad_norm_ (adamw.safetensors). */
static void test_adamw(void) {
    as_error err = {0};
    safetensors st;
    if (safetensors_open(&st, fx("adamw.safetensors"), &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    float w[35], g[35], m[35] = {0}, v[35] = {0}, want[35], lr[5], norm;
    unsigned char decay[35];
#define RD(nm, dst) safetensors_read_f32(&st, safetensors_find(&st, nm), dst, &err)
    RD("w0", w);
    RD("b0", w + 30);
    RD("lr", lr);
    for (int i = 0; i < 35; i++) decay[i] = i < 30;
    optim_adamw o = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.05f};
    for (int s = 0; s < 5; s++) {
        char nm[16];
        snprintf(nm, sizeof nm, "gw%d", s);
        RD(nm, g);
        snprintf(nm, sizeof nm, "gb%d", s);
        RD(nm, g + 30);
        float want_norm;
        snprintf(nm, sizeof nm, "norm%d", s);
        RD(nm, &want_norm);
        norm = optim_clip(g, 35, 1.0f);
        CHECK(fabsf(norm - want_norm) < 1e-5f * want_norm, "step %d: norm %g want %g", s, (double)norm, (double)want_norm);
        optim_adamw_step(&o, w, g, m, v, decay, 35, lr[s]);
        snprintf(nm, sizeof nm, "w%d", s + 1);
        RD(nm, want);
        snprintf(nm, sizeof nm, "b%d", s + 1);
        RD(nm, want + 30);
        snprintf(nm, sizeof nm, "adamw step %d", s + 1);
        check_close(nm, w, want, 35, 1e-6, 1e-5);
    }
#undef RD
    CHECK(o.step == 5, "steps %ld", o.step);
    safetensors_close(&st);
}

static void test_schedule(void) {
    optim_schedule s = {.lr = 1e-3f, .min_lr = 1e-5f, .warmup_lr = 1e-6f, .warmup = 10, .total = 110};
    CHECK(fabsf(optim_lr(&s, 0) - 1e-6f) < 1e-12f, "start %g", (double)optim_lr(&s, 0));
    CHECK(fabsf(optim_lr(&s, 5) - (1e-6f + 0.5f * (1e-3f - 1e-6f))) < 1e-9f, "mid warm-up %g", (double)optim_lr(&s, 5));
    CHECK(fabsf(optim_lr(&s, 10) - 1e-3f) < 1e-9f, "peak %g", (double)optim_lr(&s, 10));
    CHECK(fabsf(optim_lr(&s, 60) - 0.5f * (1e-3f + 1e-5f)) < 1e-9f, "half-way %g", (double)optim_lr(&s, 60));
    CHECK(fabsf(optim_lr(&s, 110) - 1e-5f) < 1e-12f, "end %g", (double)optim_lr(&s, 110));
    float prev = 1;
    int mono = 1;
    for (long k = 10; k <= 110; k++) {
        mono &= optim_lr(&s, k) <= prev;
        prev = optim_lr(&s, k);
    }
    CHECK(mono, "the cosine part decreases");
}

/* Label smoothing by hand: two classes, logits (0, 0): loss log 2 whatever eps. */
static void test_ce(void) {
    const float z[4] = {0, 0, 2, -1};
    const int y[2] = {0, 1};
    float d[4];
    int right;
    const double l = vit_loss_ce(z, y, 2, 2, 0.2f, d, &right);
    /* row 2: p = softmax(2, -1); targets (0.1, 0.9) */
    const double lse = log(exp(2.0) + exp(-1.0));
    const double want = (log(2.0) + (-(0.1 * (2 - lse) + 0.9 * (-1 - lse)))) / 2;
    CHECK(fabs(l - want) < 1e-7, "ce %.10g want %.10g", l, want);
    CHECK(right == 1, "row 1: argmax class 0 (first of a tie) = label; row 2: argmax 0, label 1; got %d", right);
    /* row 1: p = (0.5, 0.5), targets (0.9, 0.1); gradients of the mean over 2 rows */
    CHECK(fabsf(d[0] + 0.2f) < 1e-7f && fabsf(d[1] - 0.2f) < 1e-7f, "dlogits row 1 %g %g", (double)d[0], (double)d[1]);
    CHECK(fabsf(d[2] - (float)((exp(2 - lse) - 0.1) / 2)) < 1e-7f, "dlogits row 2 %g", (double)d[2]);
}

/* A checkpoint written and read back: weights, both AdamW moments and the state text, bit
 * for bit; a damaged optimizer file is refused with the file named. */
static void test_checkpoint(void) {
    as_error err = {0};
    model m;
    if (model_load(&m, fx("mech_cls"), NULL, 0, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    trainable t, u;
    CHECK(trainable_init(&t, &m, &err) == AS_OK, "%s", err.msg);
    model_free(&m);
    for (int k = 0; k < t.n; k++) /* tensors only: the padding between them is not stored */
        for (size_t e = 0, i = t.offset[k]; e < vit_tensor_numel(&t.specs[k]); e++, i++) {
            t.m[i] = (float)sin((double)i);
            t.v[i] = (float)(i % 97) * 1e-3f;
        }
    const char *dir = check_tmp("ckpt");
    CHECK(checkpoint_save(&t, dir, "{\"format\": \"x\"}\n", &err) == AS_OK, "%s", err.msg);
    /* saving again over it replaces the folder whole */
    CHECK(checkpoint_save(&t, dir, "{\"format\": \"attnscope-train-state\"}\n", &err) == AS_OK, "%s", err.msg);
    model m2;
    CHECK(model_load(&m2, dir, NULL, 0, &err) == AS_OK, "reload: %s", err.msg);
    CHECK(trainable_init(&u, &m2, &err) == AS_OK, "%s", err.msg);
    model_free(&m2);
    char *state = NULL;
    CHECK(checkpoint_load_optimizer(&u, dir, &state, &err) == AS_OK, "%s", err.msg);
    CHECK(state && strstr(state, "attnscope-train-state"), "state %s", state ? state : "(null)");
    free(state);
    CHECK(u.count == t.count && memcmp(u.w, t.w, t.count * 4) == 0, "weights round-trip");
    CHECK(memcmp(u.m, t.m, t.count * 4) == 0 && memcmp(u.v, t.v, t.count * 4) == 0, "moments round-trip");
    CHECK(memcmp(u.decay, t.decay, t.count) == 0, "decay mask");
    const int pe = trainable_find(&t, "pos_embed"), qkv = trainable_find(&t, "blocks.0.attn.qkv.weight");
    const int nb = trainable_find(&t, "blocks.0.norm1.bias");
    CHECK(pe >= 0 && !t.decay[t.offset[pe]] && qkv >= 0 && t.decay[t.offset[qkv]] && nb >= 0 && !t.decay[t.offset[nb]],
          "weight decay on matrices only");
    /* a truncated optimizer file */
    char p[1200];
    snprintf(p, sizeof p, "%s/optimizer.safetensors", dir);
    CHECK(truncate(p, 1000) == 0, "truncate");
    state = NULL;
    as_status rc = checkpoint_load_optimizer(&u, dir, &state, &err);
    CHECK(rc != AS_OK && strstr(err.msg, "optimizer.safetensors"), "truncated: %s", err.msg);
    free(state);
    trainable_free(&t);
    trainable_free(&u);
}

/* The training transform: identity without augmentation; a flip mirrors; a crop shifts with
 * the edge replicated; the draw depends on (seed, epoch, image) only. The procedural dataset
 * is balanced and drawn the same way every time. */
static void test_data(void) {
    vit_config cfg = *vit_arch_find("deit_tiny_patch16_224");
    cfg.img_size = 32;
    cfg.patch_size = 4;
    cfg.num_classes = TRAINDATA_SHAPES;
    as_error err = {0};
    traindata d, e;
    CHECK(traindata_open(&d, "shapes:60", &cfg, 0.1f, &err) == AS_OK, "%s", err.msg);
    CHECK(traindata_open(&e, "shapes:60", &cfg, 0.1f, &err) == AS_OK, "%s", err.msg);
    CHECK(d.n_train == 60 && d.n_val == 120 && d.size == 32 && d.n_classes == 6, "sizes %d %d", d.n_train, d.n_val);
    CHECK(memcmp(d.train, e.train, (size_t)60 * 32 * 32 * 3) == 0, "shapes are drawn the same way each time");
    int per[6] = {0};
    for (int i = 0; i < d.n_train; i++) per[d.train_labels[i]]++;
    CHECK(per[0] == 10 && per[5] == 10, "balanced classes %d %d", per[0], per[5]);
    CHECK(strcmp(d.classes[2], "triangle") == 0, "class names");
    /* no two images alike, and every image uses many colours (texture, anti-aliasing) */
    CHECK(memcmp(d.train, d.train + 32 * 32 * 3, 32 * 32 * 3) != 0, "images differ");
    const int S = 32, P = S * S;
    float *x = malloc((size_t)3 * P * sizeof(float)), *y = malloc((size_t)3 * P * sizeof(float));
    int idx = 7, lab;
    traindata_batch(&d, 0, &idx, 1, x, &lab, NULL, &cfg);
    CHECK(lab == d.train_labels[7], "label");
    const uint8_t *im = d.train + (size_t)7 * P * 3;
    double worst = 0;
    for (int c = 0; c < 3; c++)
        for (int p = 0; p < P; p++) {
            const double want = (im[p * 3 + c] / 255.0 - cfg.mean[c]) / cfg.std[c];
            worst = fmax(worst, fabs(x[c * P + p] - want));
        }
    CHECK(worst < 1e-5, "normalisation: %g", worst);
    /* a flip without a crop is the mirror image, for the images whose draw says flip */
    traindata_aug flip = {.crop_pad = 0, .flip = 1, .seed = 3, .epoch = 0};
    int flipped = 0, same = 0;
    for (int i = 0; i < 20; i++) {
        idx = i;
        traindata_batch(&d, 0, &idx, 1, y, &lab, &flip, &cfg);
        traindata_batch(&d, 0, &idx, 1, x, &lab, NULL, &cfg);
        int mirror = 1, ident = 1;
        for (int c = 0; c < 3; c++)
            for (int r = 0; r < S; r++)
                for (int q = 0; q < S; q++) {
                    mirror &= y[c * P + r * S + q] == x[c * P + r * S + (S - 1 - q)];
                    ident &= y[c * P + r * S + q] == x[c * P + r * S + q];
                }
        flipped += mirror && !ident;
        same += ident;
    }
    CHECK(flipped >= 4 && same >= 4 && flipped + same == 20, "flips: %d mirrored, %d unchanged of 20", flipped, same);
    /* a crop is a shift with the edge replicated: every output pixel is some input pixel of the
     * same row offset, and the draws change with the epoch */
    traindata_aug crop = {.crop_pad = 4, .flip = 0, .seed = 3, .epoch = 0};
    idx = 11;
    traindata_batch(&d, 0, &idx, 1, x, &lab, NULL, &cfg);
    traindata_batch(&d, 0, &idx, 1, y, &lab, &crop, &cfg);
    int found = 0;
    for (int oy = -4; oy <= 4 && !found; oy++)
        for (int ox = -4; ox <= 4 && !found; ox++) {
            int ok = 1;
            for (int r = 0; r < S && ok; r++)
                for (int q = 0; q < S && ok; q++) {
                    int sy = r + oy, sx = q + ox;
                    sy = sy < 0 ? 0 : sy >= S ? S - 1 : sy;
                    sx = sx < 0 ? 0 : sx >= S ? S - 1 : sx;
                    ok = y[r * S + q] == x[sy * S + sx];
                }
            found = ok;
        }
    CHECK(found, "the crop is a shift of at most 4 pixels with the edge replicated");
    float *z = malloc((size_t)3 * P * sizeof(float));
    traindata_batch(&d, 0, &idx, 1, z, &lab, &crop, &cfg);
    CHECK(memcmp(y, z, (size_t)3 * P * sizeof(float)) == 0, "same seed, epoch and image: same draw");
    int differ = 0;
    for (long ep = 1; ep < 6; ep++) {
        crop.epoch = ep;
        traindata_batch(&d, 0, &idx, 1, z, &lab, &crop, &cfg);
        differ += memcmp(y, z, (size_t)3 * P * sizeof(float)) != 0;
    }
    CHECK(differ >= 3, "other epochs draw other crops (%d of 5)", differ);
    free(x);
    free(y);
    free(z);
    traindata_free(&d);
    traindata_free(&e);
    /* errors name the fix */
    CHECK(traindata_open(&d, "shapes:5", &cfg, 0.1f, &err) == AS_ERR_ARG && strstr(err.msg, "COUNT"), "%s", err.msg);
    cfg.img_size = 48;
    CHECK(traindata_open(&d, "shapes:60:32", &cfg, 0.1f, &err) == AS_ERR_SHAPE && strstr(err.msg, "\"img_size\": 32"), "%s", err.msg);
}

int main(void) {
    check_tmp_init("train");
    as_error err = {0};
    dataset ds;
    if (dataset_open(&ds, fx("inputs.npy"), &err) != AS_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const int n = ds.count;
    float *x = malloc((size_t)n * 3 * 32 * 32 * sizeof(float));
    memcpy(x, ds.tensor, (size_t)n * 3 * 32 * 32 * sizeof(float));
    dataset_free(&ds);
    static const char *models[] = {"vit_cls", "deit_dist", "vit_gap", "mech_cls", "mech_gap", "mech_dist"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) test_model(models[i], x, n);
    free(x);
    /* staged models (Swin: windows, shift mask, relative bias, pad slots, patch merging) */
    /* PVT v2 (overlapping convs on odd grids, R = 4 / 2 / 1 reductions, the linear variant,
     * LMSA's compressed q/k, LaViT's less-attention over reduced keys with its term on the
     * square maps of stage 1, in every reading) */
    static const struct {
        const char *name, *inputs;
        int readings; /* LaViT's term: every reading (less-attention with square maps) or the default */
    } staged[] = {
        {"swin_tiny", "inputs.npy", 1}, {"swin_pad", "inputs16_1.npy", 1}, {"swin_pad_tv", "inputs16_1.npy", 1},
        {"swin_lmsa", "inputs.npy", 1}, {"swin_odd", "inputs28.npy", 1},
        /* LSLA in shifted, padded windows: DS, full inner and relative outer bias (masked by the
         * shift mask); fixed scale, relative inner, full outer bias on every pair, QXV, NP */
        {"swin_lsla", "inputs.npy", 1}, {"swin_lsla_alt", "inputs.npy", 1},
        /* Table 4's QKV: LSLA on projected keys and values, no Swin table of its own */
        {"swin_lsla_qkv", "inputs.npy", 1},
        /* H-MaiT's stages: global attention over each stage's grid with MaiT's hard masks */
        {"swin_hmait", "inputs28.npy", 1},
        /* and with MaiT's soft masks (a learnt alpha per head on the masked scores) */
        {"swin_hmait_soft", "inputs28.npy", 1},
        {"pvt_tiny", "pvt_tiny/inputs58.npy", 1},
        {"pvt_li", "pvt_li/inputs40.npy", 1}, {"pvt_lmsa", "inputs.npy", 1},
        {"pvt_less", "inputs.npy", VIT_DP_COUNT}, {"pvt_lavit", "inputs.npy", VIT_DP_COUNT},
        {"pvt_lavit_alt", "inputs.npy", VIT_DP_COUNT}, {"pvt_lavit_d1", "inputs.npy", VIT_DP_COUNT},
        /* the modern ViT family (tools/make_family_train_fixtures.py): LayerScale with
         * no_embed_class, pre_norm with QuickGELU, registers under avg pooling, patch 14 */
        {"vf_deit3", "inputs.npy", 1}, {"vf_clip", "inputs.npy", 1}, {"vf_regavg", "inputs.npy", 1},
        {"vf_p14", "inputs42.npy", 1},
        /* CaiT: talking heads, class attention, LayerScale; MaiT's masks before and after the mix,
         * zero and soft (after the mix the hook gets the mixed logits as its raw scores) */
        {"cait_tiny", "inputs.npy", 1}, {"cait_mait_before", "inputs.npy", 1}, {"cait_mait_after", "inputs.npy", 1},
        {"cait_mait_soft", "inputs.npy", 1},
        /* convolutional stems (tools/make_stem_fixtures.py): Refined-ViT's shape (BN + ReLU,
         * ReLU6, a biased strided proj; custom names) with Refiner blocks, and ViT-LSLA's (MPViT's
         * stem with Hardswish, LSLA in shifted windows, CSwin's conv merges) */
        {"vit_stem", "inputs.npy", 1}, {"swin_stem", "inputs.npy", 1},
        /* Refined-ViT as released (tools/make_refiner_release_fixtures.py): a map carried through
         * refiner_release and refiner_shared blocks, DLA with BatchNorms and ReLU6s, the 0.5
         * adjust ratio, LayerScale on the MLP alone, the dense head's max */
        {"refiner_release", "inputs.npy", 1},
        /* 65 tokens: the maps convolution's register blocks; H' = 4 with 5 x 5; no ViT options */
        {"refiner_release_wide", "inputs.npy", 1}};
    for (size_t i = 0; i < sizeof staged / sizeof *staged; i++) {
        if (dataset_open(&ds, fx(staged[i].inputs), &err) != AS_OK) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        for (int r = 0; r < staged[i].readings; r++)
            test_model_reading(staged[i].name, ds.tensor, ds.count, (vit_dp_loss)r);
        check_logits(staged[i].name, ds.tensor, ds.count);
        dataset_free(&ds);
    }
    test_dp_names();
    test_adamw();
    test_schedule();
    test_ce();
    test_checkpoint();
    test_data();
    check_tmp_remove();
    return check_finish("train");
}
