/* stem.c: the convolutional stem (Refined-ViT's PatchEmbed_cnn, MPViT's stem in ViT-LSLA): a
 * list of Conv2d(k, s, p) [+ bias], BatchNorm2d in eval mode (running statistics), activation,
 * in order, the last one's output the token grid. Each conv is an im2col (core/pvt.c) and one
 * GEMM; the BatchNorm is the per-channel affine (x - mean) / sqrt(var + eps) * w + b, as
 * PyTorch evaluates it. Training keeps the statistics fixed ("frozen" BatchNorm: the affine
 * trains, mean and variance are buffers) and reduces every per-channel sum in one fixed order,
 * so the gradients do not depend on the thread count. */
#include "stem.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "pvt.h"
#include "stage.h"

static const char *const act_names[] = {[VIT_STEM_ACT_NONE] = "none", [VIT_STEM_ACT_RELU] = "relu",
                                        [VIT_STEM_ACT_RELU6] = "relu6",
                                        [VIT_STEM_ACT_HARDSWISH] = "hardswish"};
_Static_assert(sizeof act_names / sizeof act_names[0] == VIT_STEM_ACT_COUNT, "stem activation names");

const char *vit_stem_act_name(vit_stem_act a) { return (unsigned)a < VIT_STEM_ACT_COUNT ? act_names[a] : "?"; }

int vit_stem_act_parse(const char *s) {
    for (int i = 0; i < VIT_STEM_ACT_COUNT; i++)
        if (strcmp(s, act_names[i]) == 0) return i;
    return -1;
}

/* ---- geometry ---- */

static int conv_side(int in, const vit_conv *cv) { return (in + 2 * cv->padding - cv->kernel) / cv->stride + 1; }

int vit_stem_side(const vit_config *c, int i) {
    int side = c->img_size;
    for (int j = 0; j <= i && j < c->n_stem; j++) side = conv_side(side, &c->stem[j]);
    return side;
}

int vit_stem_in_chans(const vit_config *c, int i) { return i <= 0 ? c->in_chans : c->stem[i - 1].out; }

void vit_stem_geom(const vit_config *c, int *grid, float *stride_px, float *offset_px) {
    /* pixel x's centre is x + 0.5; a conv's output y covers its input [s y - p, s y - p + k),
     * centred on input position s y - p + (k - 1) / 2 */
    double stride = 1, offset = 0.5;
    for (int i = 0; i < c->n_stem; i++) {
        const vit_conv *cv = &c->stem[i];
        offset += stride * (0.5 * (cv->kernel - 1) - cv->padding);
        stride *= cv->stride;
    }
    *grid = vit_stem_side(c, c->n_stem - 1);
    *stride_px = (float)stride;
    *offset_px = (float)offset;
}

as_status vit_stem_validate(const vit_config *c, int width, as_error *err) {
    const char *n = c->name[0] ? c->name : "model";
    if (c->n_stem < 0 || c->n_stem > VIT_MAX_STEM)
        return as_fail(err, AS_ERR_CONFIG, "%s: \"stem\" has %d convolutions; attnscope takes 1..%d", n,
                       c->n_stem, VIT_MAX_STEM);
    if (!c->n_stem) return AS_OK;
    if (c->family != VIT_FAMILY_VIT && c->family != VIT_FAMILY_SWIN)
        return as_fail(err, AS_ERR_CONFIG, "%s: a convolutional \"stem\" is for the vit and swin families "
                       "(PVT v2 has its overlapping patch_kernel stem, CaiT its patch embedding): remove it", n);
    if (!(c->bn_eps > 0.0f && c->bn_eps <= 1.0f))
        return as_fail(err, AS_ERR_CONFIG, "%s: \"bn_eps\" %g is outside (0, 1]: PyTorch's BatchNorm uses 1e-5",
                       n, (double)c->bn_eps);
    int side = c->img_size, stride = 1;
    for (int i = 0; i < c->n_stem; i++) {
        const vit_conv *cv = &c->stem[i];
        const int in = vit_stem_in_chans(c, i);
        if (cv->out < 1 || cv->out > VIT_MAX_DIM || cv->kernel < 1 || cv->kernel > VIT_MAX_KERNEL ||
            cv->stride < 1 || cv->stride > VIT_MAX_KERNEL || cv->padding < 0 || cv->padding >= cv->kernel ||
            (unsigned)cv->act >= VIT_STEM_ACT_COUNT)
            return as_fail(err, AS_ERR_CONFIG, "%s: stem[%d]: out %d, kernel %d, stride %d, padding %d: give "
                           "out 1..%d, kernel and stride 1..%d, padding 0..kernel-1", n, i, cv->out, cv->kernel,
                           cv->stride, cv->padding, VIT_MAX_DIM, VIT_MAX_KERNEL);
        if ((double)in * cv->kernel * cv->kernel > VIT_MAX_HIDDEN)
            return as_fail(err, AS_ERR_CONFIG, "%s: stem[%d]: %d channels x kernel %d^2 is over attnscope's "
                           "limit of %d values per output", n, i, in, cv->kernel, VIT_MAX_HIDDEN);
        const int out = conv_side(side, cv);
        if (side + 2 * cv->padding < cv->kernel || out < 1)
            return as_fail(err, AS_ERR_CONFIG, "%s: stem[%d]: a %dx%d input is smaller than its kernel %d "
                           "(padding %d): use a larger img_size", n, i, side, side, cv->kernel, cv->padding);
        const double per_image = (double)out * out * (in * cv->kernel * cv->kernel > cv->out ? in * cv->kernel * cv->kernel : cv->out);
        if (per_image > 1e9)
            return as_fail(err, AS_ERR_CONFIG, "%s: stem[%d]: a %dx%d output of %d channels is too large for "
                           "one image: use a smaller img_size", n, i, out, out, cv->out);
        side = out;
        stride *= cv->stride;
        if (stride > VIT_MAX_IMG) stride = VIT_MAX_IMG + 1;
    }
    if (c->stem[c->n_stem - 1].out != width)
        return as_fail(err, AS_ERR_CONFIG, "%s: the stem's last convolution has %d channels and the "
                       "embedding is %d wide: make the last \"out\" %d", n, c->stem[c->n_stem - 1].out,
                       width, width);
    if (c->patch_size != stride)
        return as_fail(err, AS_ERR_CONFIG, "%s: patch_size %d is not the stem's total stride %d: leave "
                       "\"patch_size\" out (a stem sets it) or give %d", n, c->patch_size, stride, stride);
    if (c->patch_kernel)
        return as_fail(err, AS_ERR_CONFIG, "%s: \"stem\" and \"patch_kernel\" are two patch embeddings: "
                       "keep one", n);
    return AS_OK;
}

/* ---- weights ---- */

static void put(vit_spec_sink *k, const float **slot, int buffer, int ndim, const int *shape,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void put(vit_spec_sink *k, const float **slot, int buffer, int ndim, const int *shape,
                const char *fmt, ...) {
    char name[VIT_TENSOR_NAME_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    vit_mech_spec(k, slot, name, ndim, shape);
    if (*k->n - 1 < k->max) k->specs[*k->n - 1].buffer = buffer;
}

void vit_stem_specs(const vit_config *c, vit_params *p, vit_spec_sink *k) {
    for (int i = 0; i < c->n_stem; i++) {
        const vit_conv *cv = &c->stem[i];
        vit_conv_params *sp = &p->stem[i];
        char conv[VIT_STEM_NAME + 16], bn[VIT_STEM_NAME + 16];
        if (cv->conv_name[0]) snprintf(conv, sizeof conv, "%s", cv->conv_name);
        else snprintf(conv, sizeof conv, "stem.%d.conv", i);
        if (cv->bn_name[0]) snprintf(bn, sizeof bn, "%s", cv->bn_name);
        else snprintf(bn, sizeof bn, "stem.%d.bn", i);
        const int C = cv->out, shape_w[] = {C, vit_stem_in_chans(c, i), cv->kernel, cv->kernel}, shape_c[] = {C};
        put(k, &sp->w, 0, 4, shape_w, "%s.weight", conv);
        if (cv->bias) put(k, &sp->b, 0, 1, shape_c, "%s.bias", conv);
        if (!cv->bn) continue;
        put(k, &sp->bn_w, 0, 1, shape_c, "%s.weight", bn);
        put(k, &sp->bn_b, 0, 1, shape_c, "%s.bias", bn);
        put(k, &sp->bn_mean, 1, 1, shape_c, "%s.running_mean", bn);
        put(k, &sp->bn_var, 1, 1, shape_c, "%s.running_var", bn);
    }
}

as_status vit_stem_names_check(const vit_config *c, as_error *err) {
    vit_tensor_spec *specs = calloc(VIT_MAX_TENSORS, sizeof *specs);
    vit_params *p = malloc(sizeof *p);
    if (!specs || !p) {
        free(specs);
        free(p);
        return as_fail(err, AS_ERR_NOMEM, "out of memory");
    }
    const int n = vit_param_specs(c, p, specs, VIT_MAX_TENSORS);
    as_status rc = AS_OK;
    for (int i = 0; i < n && i < VIT_MAX_TENSORS && rc == AS_OK; i++) {
        int in_stem = 0; /* the stem's own tensors are the ones bound into p->stem */
        for (int k = 0; k < c->n_stem && !in_stem; k++)
            in_stem = (const char *)specs[i].slot >= (const char *)&p->stem[k] &&
                      (const char *)specs[i].slot < (const char *)(&p->stem[k] + 1);
        for (int j = 0; j < n && j < VIT_MAX_TENSORS && in_stem && rc == AS_OK; j++)
            if (j != i && strcmp(specs[i].name, specs[j].name) == 0)
                rc = as_fail(err, AS_ERR_CONFIG, "%s: the stem's tensor \"%s\" has the name of another tensor of "
                             "the model: give each stem convolution its own \"conv_name\" and \"bn_name\"",
                             c->name[0] ? c->name : "model", specs[i].name);
    }
    free(specs);
    free(p);
    return rc;
}

void vit_stem_cost(const vit_config *c, vit_cost_part *o) {
    for (int i = 0; i < c->n_stem; i++) {
        const vit_conv *cv = &c->stem[i];
        const double side = vit_stem_side(c, i), rows = side * side, C = cv->out;
        const double K = (double)vit_stem_in_chans(c, i) * cv->kernel * cv->kernel;
        const double act = cv->act == VIT_STEM_ACT_NONE ? 0 : cv->act == VIT_STEM_ACT_HARDSWISH ? 5 : 1;
        vit_cost_add(o, VIT_COMP_PATCH_EMBED, C * K + (cv->bias ? C : 0) + (cv->bn ? 2 * C : 0), rows * C * K,
                     rows * C * ((cv->bias ? 1 : 0) + (cv->bn ? 2 : 0) + act));
    }
}

/* ---- buffers ---- */

void vit_stem_need_of(const vit_config *c, vit_stem_need *z) {
    memset(z, 0, sizeof *z);
    for (int i = 0; i < c->n_stem; i++) {
        const vit_conv *cv = &c->stem[i];
        const size_t side = (size_t)vit_stem_side(c, i), rows = side * side;
        const size_t col = rows * (size_t)vit_stem_in_chans(c, i) * cv->kernel * cv->kernel;
        if (i == 0) z->col0 = col;
        else if (col > z->col) z->col = col;
        if (rows * (size_t)cv->out > z->map) z->map = rows * (size_t)cv->out;
    }
}

static size_t max_channels(const vit_config *c) {
    size_t m = 0;
    for (int i = 0; i < c->n_stem; i++) m = (size_t)c->stem[i].out > m ? (size_t)c->stem[i].out : m;
    return m;
}

void vit_stem_acts_carve(const vit_config *c, int B, char *base, size_t *off, vit_acts *a) {
    if (!c->n_stem) return;
    vit_stem_need z;
    vit_stem_need_of(c, &z);
    const size_t b = (size_t)B;
    vit_carve_floats(base, off, b * z.col, a ? &a->stem_col : NULL);
    for (int i = 0; i < 2; i++) vit_carve_floats(base, off, b * z.map, a ? &a->stem_map[i] : NULL);
    vit_carve_floats(base, off, 3 * max_channels(c), a ? &a->stem_aff : NULL);
}

void vit_stem_tape_carve(const vit_config *c, int B, char *base, size_t *off, vit_tape *t) {
    for (int i = 0; i < c->n_stem; i++) {
        const size_t side = (size_t)vit_stem_side(c, i), m = (size_t)B * side * side * c->stem[i].out;
        vit_carve_floats(base, off, m, t ? &t->stem_z[i] : NULL);
        if (i + 1 < c->n_stem) vit_carve_floats(base, off, m, t ? &t->stem_y[i] : NULL);
    }
}

void vit_stem_ws_carve(const vit_config *c, int B, char *base, size_t *off, vit_grad_ws *ws) {
    if (!c->n_stem) return;
    vit_stem_need z;
    vit_stem_need_of(c, &z);
    const size_t b = (size_t)B;
    if (z.col) vit_carve_floats(base, off, b * z.col, ws ? &ws->stem_dcol : NULL);
    for (int i = 0; i < 2; i++) vit_carve_floats(base, off, b * z.map, ws ? &ws->stem_d[i] : NULL);
    size_t part = 0; /* 3 doubles per channel per block of rows */
    for (int i = 0; i < c->n_stem; i++) {
        const size_t side = (size_t)vit_stem_side(c, i), blocks = (b * side * side + VIT_STEM_ROWS - 1) / VIT_STEM_ROWS;
        if (blocks * 3 * c->stem[i].out > part) part = blocks * 3 * c->stem[i].out;
    }
    float *view = NULL;
    vit_carve_floats(base, off, 2 * part, ws ? &view : NULL);
    if (ws) ws->stem_part = (double *)(void *)view;
}

/* ---- forward ---- */

static float act_fwd(vit_stem_act a, float u) {
    switch (a) {
    case VIT_STEM_ACT_RELU: return u > 0.0f ? u : 0.0f;
    case VIT_STEM_ACT_RELU6: return u > 0.0f ? (u < 6.0f ? u : 6.0f) : 0.0f;
    case VIT_STEM_ACT_HARDSWISH: { /* x relu6(x + 3) / 6, in PyTorch's order */
        const float r = u + 3.0f;
        return u * (r > 0.0f ? (r < 6.0f ? r : 6.0f) : 0.0f) / 6.0f;
    }
    default: return u;
    }
}

/* d act / du at u, as PyTorch's backward formulas (relu: u > 0; relu6 = hardtanh(0, 6): 0 < u < 6;
 * hardswish: 0 below -3, u / 3 + 1/2 up to 3, 1 above) */
static float act_grad(vit_stem_act a, float u) {
    switch (a) {
    case VIT_STEM_ACT_RELU: return u > 0.0f ? 1.0f : 0.0f;
    case VIT_STEM_ACT_RELU6: return u > 0.0f && u < 6.0f ? 1.0f : 0.0f;
    case VIT_STEM_ACT_HARDSWISH: return u < -3.0f ? 0.0f : u <= 3.0f ? u / 3.0f + 0.5f : 1.0f;
    default: return 1.0f;
    }
}

/* The BatchNorm as u = z sc + sh per channel (PyTorch's eval-mode alpha = w / sqrt(var + eps),
 * beta = b - mean alpha) into aff: sc (C), then sh (C), then 1 / sqrt(var + eps) (C); the
 * identity without a BatchNorm. */
static void bn_affine(const vit_conv *cv, const vit_conv_params *sp, float eps, int C, float *aff) {
    for (int ch = 0; ch < C; ch++) {
        const kernels_bn_affine f = cv->bn ? kernels_bn_fold(sp->bn_w[ch], sp->bn_b[ch], sp->bn_mean[ch],
                                                             sp->bn_var[ch], eps)
                                           : (kernels_bn_affine){1.0f, 0.0f, 1.0f};
        aff[ch] = f.a;
        aff[C + ch] = f.c;
        aff[2 * C + ch] = f.inv; /* the backward's (z - mean) / sqrt(var + eps) */
    }
}

/* y = act(z sc + sh) over n images of rows x C, image b's rows at y + b ystride */
static void bn_act(const vit_conv *cv, const float *aff, const float *z, float *y, size_t ystride, int n,
                   size_t rows, int C) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (long r = 0; r < (long)rows; r++) {
            const float *zr = z + ((size_t)b * rows + (size_t)r) * C;
            float *yr = y + (size_t)b * ystride + (size_t)r * C;
            for (int ch = 0; ch < C; ch++) yr[ch] = act_fwd(cv->act, zr[ch] * aff[ch] + aff[C + ch]);
        }
}

/* conv i's im2col of its input (images NCHW for i = 0, else the previous output NHWC) */
static void stem_im2col(const vit_config *c, int i, float *col, const float *in, int n) {
    const vit_conv *cv = &c->stem[i];
    const int side = vit_stem_side(c, i - 1), C = vit_stem_in_chans(c, i);
    if (i == 0)
        pvt_im2col(col, in, n, side, side, C, (size_t)C * side * side, (size_t)side, 1, (size_t)side * side,
                   cv->kernel, cv->stride, cv->padding);
    else
        pvt_im2col(col, in, n, side, side, C, (size_t)side * side * C, (size_t)side * C, (size_t)C, 1,
                   cv->kernel, cv->stride, cv->padding);
}

void vit_stem_forward(const vit_config *c, const vit_params *p, vit_acts *a, const float *images, int n,
                      float *out, size_t out_stride) {
    vit_tape *t = a->tape;
    const float *in = images;
    for (int i = 0; i < c->n_stem; i++) {
        const vit_conv *cv = &c->stem[i];
        const vit_conv_params *sp = &p->stem[i];
        const int side = vit_stem_side(c, i), C = cv->out, K = vit_stem_in_chans(c, i) * cv->kernel * cv->kernel;
        const size_t rows = (size_t)side * side;
        float *col = i == 0 ? a->patches : a->stem_col;
        stem_im2col(c, i, col, in, n);
        float *z = t ? t->stem_z[i] : a->stem_map[i & 1];
        vit_linear(z, col, sp->w, sp->b, n * (int)rows, C, K, 0);
        const int last = i + 1 == c->n_stem;
        float *y = last ? out : t ? t->stem_y[i] : z;
        bn_affine(cv, sp, c->bn_eps, C, a->stem_aff);
        bn_act(cv, a->stem_aff, z, y, last ? out_stride : rows * C, n, rows, C);
        in = y;
    }
}

/* ---- backward ---- */

void vit_stem_backward(const vit_config *c, const vit_params *p, const vit_params *g, vit_acts *a,
                       vit_grad_ws *ws, const float *dy, size_t dy_stride, int n) {
    const vit_tape *t = a->tape;
    for (int i = c->n_stem - 1; i >= 0; i--) {
        const vit_conv *cv = &c->stem[i];
        const vit_conv_params *sp = &p->stem[i], *gp = &g->stem[i];
        const int side = vit_stem_side(c, i), C = cv->out, Cin = vit_stem_in_chans(c, i);
        const int K = Cin * cv->kernel * cv->kernel;
        const size_t rows = (size_t)side * side, all = (size_t)n * rows;
        const float *z = t->stem_z[i];
        float *dz = ws->stem_d[i & 1];
        /* In one pass over fixed blocks of rows: du = dy act'(u) with u = z sc + sh, the
         * BatchNorm's partial sums of du (z - mean) / sqrt(var + eps) and du, dz = du sc
         * (in place when dy is dz) and the conv bias's partial sum of dz; then the blocks'
         * partials in block order, so the sums do not depend on the thread count. */
        float *aff = a->stem_aff;
        bn_affine(cv, sp, c->bn_eps, C, aff);
        const long blocks = (long)((all + VIT_STEM_ROWS - 1) / VIT_STEM_ROWS);
        double *part = ws->stem_part;
#pragma omp parallel for schedule(static)
        for (long k = 0; k < blocks; k++) {
            double *pw = part + (size_t)k * 3 * C, *pb = pw + C, *pbias = pb + C;
            for (int ch = 0; ch < 3 * C; ch++) pw[ch] = 0;
            const size_t end = (size_t)(k + 1) * VIT_STEM_ROWS < all ? (size_t)(k + 1) * VIT_STEM_ROWS : all;
            for (size_t r = (size_t)k * VIT_STEM_ROWS; r < end; r++) {
                const size_t b = r / rows, o = r * C;
                const float *dr = dy + b * dy_stride + (r - b * rows) * C;
                for (int ch = 0; ch < C; ch++) {
                    const float zv = z[o + ch], du = dr[ch] * act_grad(cv->act, zv * aff[ch] + aff[C + ch]);
                    const float d = du * aff[ch];
                    if (cv->bn) {
                        pw[ch] += (double)du * ((zv - sp->bn_mean[ch]) * aff[2 * C + ch]);
                        pb[ch] += du;
                    }
                    pbias[ch] += d;
                    dz[o + ch] = d;
                }
            }
        }
#pragma omp parallel for schedule(static)
        for (int ch = 0; ch < C; ch++) {
            double dw = 0, db = 0, dbias = 0;
            for (long k = 0; k < blocks; k++) {
                const double *pk = part + (size_t)k * 3 * C;
                dw += pk[ch];
                db += pk[C + ch];
                dbias += pk[2 * C + ch];
            }
            if (cv->bn) {
                WR(gp->bn_w)[ch] += (float)dw;
                WR(gp->bn_b)[ch] += (float)db;
            }
            if (cv->bias) WR(gp->b)[ch] += (float)dbias;
        }
        /* the conv: dW += dz^T col; the input's gradient dcol = dz W, gathered back (col2im) */
        float *col = a->patches;
        if (i > 0) {
            col = a->stem_col;
            stem_im2col(c, i, col, t->stem_y[i - 1], n);
        }
        vit_linear_backward(WR(gp->w), NULL, i > 0 ? ws->stem_dcol : NULL, 0, dz, C, col, K, sp->w, (int)all,
                            C, K, NULL);
        if (i == 0) break;
        const int in_side = vit_stem_side(c, i - 1);
        float *dprev = ws->stem_d[(i - 1) & 1];
        pvt_col2im(dprev, ws->stem_dcol, n, in_side, in_side, Cin, cv->kernel, cv->stride, cv->padding, 0);
        dy = dprev;
        dy_stride = (size_t)in_side * in_side * Cin;
    }
}
