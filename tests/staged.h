/* staged.h: staged (Swin-like) traces for the format version 3 tests, written through the real
 * trace writer with values from closed forms instead of an engine (which does not run stages in
 * this branch): test_trace3.c checks them through the reader, mktrace3 writes them for the shell
 * tests and the h5py recipe of docs/trace-format.md. Header-only: one including file per program.
 *
 * The model: 28 px input, 2 px patches, three window stages of two blocks (widths 8, 16, 32;
 * heads 1, 2, 4; window 4; a merge before stages 1 and 2): grids 14, 7 and 4, so stages 0 and 1
 * pad (14 -> 16, 7 -> 8) and shift their odd blocks by 2, and stage 2 is one window (timm's
 * clamp: never shifted). The maps are softmax(logit + shift mask) per window, with the logits
 * staged_logit gives (tests/test_slow_trace3.sh recomputes them in numpy from its own window
 * partition and compares). */
#ifndef AS_TESTS_STAGED_H
#define AS_TESTS_STAGED_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cli/cli.h"
#include "../core/kernels.h"

/* The staged model; pad: the pad order (both are recorded and must rebuild alike). */
static inline void staged_config(vit_config *c, vit_pad_order pad) {
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "custom");
    c->img_size = 28, c->patch_size = 2, c->in_chans = 3, c->num_classes = 5, c->qkv_bias = 1;
    c->global_pool = VIT_POOL_AVG, c->ln_eps = 1e-5f, c->crop_pct = 0.9f;
    for (int i = 0; i < 3; i++) c->mean[i] = 0.5f, c->std[i] = 0.25f;
    c->family = VIT_FAMILY_SWIN;
    c->n_stages = 3;
    for (int s = 0; s < 3; s++)
        c->stage[s] = (vit_stage){.depth = 2, .embed_dim = 8 << s, .num_heads = 1 << s,
                                  .mlp_hidden = 32 << s, .scope = VIT_SCOPE_WINDOW, .window = 4,
                                  .down = s ? VIT_DOWN_MERGE : VIT_DOWN_NONE};
    c->depth = 6, c->embed_dim = 8, c->num_heads = 1, c->mlp_hidden = 32;
    c->patch_norm = 1, c->shift_windows = 1, c->pad_order = pad, c->window_clamp = VIT_CLAMP_TIMM;
}

/* One stage, GLOBAL, over a grid of side `grid` (2 px patches). Not a model vit_config_validate
 * accepts (a Swin stage is windowed, and the config keys have no scope), so no trace can be
 * written for it: it only feeds record_parse_windows the staged model with global layers that
 * later scopes (PVT, CaiT) will bring. */
static inline void staged_config_global(vit_config *c, int grid) {
    staged_config(c, VIT_PAD_FIRST);
    c->img_size = 2 * grid;
    c->n_stages = 1;
    c->stage[0] = (vit_stage){.depth = 1, .embed_dim = 8, .num_heads = 1, .mlp_hidden = 32,
                              .scope = VIT_SCOPE_GLOBAL};
    c->depth = 1;
}

/* A monolithic ViT without a class token over a grid of side `grid` (2 px patches): one global
 * map of grid^2 tokens per head, the big maps that are chunked by query rows. */
static inline void staged_config_flat(vit_config *c, int grid) {
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "custom");
    c->img_size = 2 * grid, c->patch_size = 2, c->in_chans = 3, c->num_classes = 5, c->qkv_bias = 1;
    c->global_pool = VIT_POOL_AVG, c->ln_eps = 1e-6f, c->crop_pct = 0.9f;
    for (int i = 0; i < 3; i++) c->mean[i] = 0.5f, c->std[i] = 0.25f;
    c->depth = 1, c->embed_dim = 8, c->num_heads = 1, c->mlp_hidden = 32;
}

/* The logit of query token t over key token u (flat grid indices of a gw-wide grid; -1: a pad
 * slot) in layer l, image b, head h. Pad keys take a constant, as Swin's zero-padded tokens
 * have keys of their own; pad query rows are uniform before the mask. */
static inline double staged_logit(int l, long b, int h, int gw, int t, int u) {
    if (t < 0) return 0.0;
    if (u < 0) return -0.5;
    const double yt = t / gw, xt = t % gw, yu = u / gw, xu = u % gw;
    return -((yt - yu) * (yt - yu) + (xt - xu) * (xt - xu)) / (1.0 + h + 0.5 * l) + 0.05 * xu -
           0.03 * yu + 0.02 * (double)b * (xu + yu);
}

/* Fills one image's engine record of block l (vit_record's layout): attn/scores (H, problems,
 * Tq, Tk), q/k (H, T, dq), tokens (T, D); NULL pointers are skipped. */
static inline void staged_fill(const vit_config *c, int l, long b, float *attn, float *scores, float *q,
                        float *k, float *tokens) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    const size_t N = (size_t)g.Tq * g.Tk;
    int *tok = malloc((size_t)g.problems * g.Tq * sizeof *tok);
    float *mask = malloc((size_t)g.problems * N * sizeof *mask);
    if (!tok || !mask) abort();
    if (g.scope == VIT_SCOPE_WINDOW) {
        vit_window_tokens(c, &g, tok);
        vit_shift_mask(c, &g, mask);
    } else {
        for (int i = 0; i < g.T; i++) tok[i] = i;
        memset(mask, 0, N * sizeof *mask);
    }
    for (int h = 0; h < g.H && (attn || scores); h++)
        for (int w = 0; w < g.problems; w++)
            for (int i = 0; i < g.Tq; i++) {
                const size_t row = (((size_t)h * g.problems + w) * g.Tq + i) * g.Tk;
                double e[4096], z = 0, mx = -1e300;
                for (int j = 0; j < g.Tk; j++) {
                    e[j] = staged_logit(l, b, h, g.gw, tok[w * g.Tq + i], tok[w * g.Tq + j]) +
                           mask[((size_t)w * g.Tq + i) * g.Tk + j];
                    mx = e[j] > mx ? e[j] : mx;
                    if (scores) scores[row + j] = (float)e[j];
                }
                for (int j = 0; j < g.Tk; j++) z += e[j] = exp(e[j] - mx);
                for (int j = 0; attn && j < g.Tk; j++) attn[row + j] = (float)(e[j] / z);
            }
    const int dq = g.D / g.H;
    for (int h = 0; h < g.H; h++)
        for (int t = 0; t < g.T; t++)
            for (int ch = 0; ch < dq; ch++) {
                const size_t i = ((size_t)h * g.T + t) * dq + ch;
                const float a = 0.3f * (float)t + 0.7f * (float)ch + (float)h + 0.1f * (float)l + 0.01f * (float)b;
                if (q) q[i] = sinf(a);
                if (k) k[i] = cosf(a);
            }
    for (int t = 0; tokens && t < g.T; t++)
        for (int d = 0; d < g.D; d++)
            tokens[(size_t)t * g.D + d] = 0.001f * (float)t - 0.01f * (float)d + (float)l + 0.1f * (float)b;
    free(tok);
    free(mask);
}

/* Floats of one image's engine record of quantity q in block l. */
static inline size_t staged_floats(const vit_config *c, int l, trace_quantity q) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    if (q == TRACE_Q_TOKENS) return (size_t)g.T * g.D;
    if (q == TRACE_Q_Q || q == TRACE_Q_K) return (size_t)g.H * g.T * (g.D / g.H);
    return (size_t)g.H * g.problems * g.Tq * g.Tk;
}

/* What fills one image's record of block l: staged_fill's arguments. */
typedef void (*staged_fill_fn)(const vit_config *c, int l, long b, float *attn, float *scores,
                               float *q, float *k, float *tokens);

/* Writes n images filled by fill (tests/test_analysis_staged.c: hand-made maps) to path with
 * the record options given as the command line would (--layers, --heads, --windows, --dtype). */
static inline as_status staged_write_fill(const char *path, const vit_config *c, const char *layers,
                                          const char *heads, const char *windows, const char *dtype,
                                          long n, staged_fill_fn fill, as_error *err) {
    record_opts o;
    memset(&o, 0, sizeof o);
    if (record_parse_selection(&o, c, "all", layers, heads, dtype, "none", "all", err) ||
        record_parse_windows(&o.spec, c, windows, err))
        return err->status;
    trace_spec *s = &o.spec;
    s->cfg = *c;
    s->batch = 2;
    s->command_line = "staged_write (tests/staged.h)";
    s->model_source = "closed forms of tests/staged.h";
    s->weights_dtype = "F32";
    s->blas_core = s->blas_config = s->blas_forced = "";
    s->threads = 1;
    trace_writer *w;
    int done;
    as_status rc = trace_writer_open(&w, path, s, TRACE_CREATE, &done, NULL, NULL, NULL, err);
    if (rc != AS_OK) return rc;
    const int S = c->img_size;
    for (long b0 = 0; b0 < n; b0 += s->batch) {
        trace_slot *sl = trace_writer_acquire(w);
        const int m = n - b0 < s->batch ? (int)(n - b0) : s->batch;
        for (int b = 0; b < m; b++) {
            const long img = b0 + b;
            for (int li = 0; li < s->n_layers; li++) {
                const int l = s->layers[li];
                float *ptr[5] = {sl->rec.attn[l], sl->rec.scores[l], sl->rec.q[l], sl->rec.k[l], sl->rec.tokens[l]};
                for (int qi = 0; qi < 5; qi++)
                    if (ptr[qi]) ptr[qi] += (size_t)b * staged_floats(c, l, (trace_quantity)qi);
                /* a float16 trace of a monolithic model takes binary16 maps from the engine */
                uint16_t *a16 = sl->rec.attn16 ? sl->rec.attn16[l] : NULL;
                const size_t fa = staged_floats(c, l, TRACE_Q_ATTN);
                float *tmp16 = a16 ? malloc(fa * sizeof *tmp16) : NULL;
                if (a16 && !tmp16) abort();
                fill(c, l, img, a16 ? tmp16 : ptr[0], ptr[1], ptr[2], ptr[3], ptr[4]);
                /* heads attn16_stride apart when the writer pads them for O_DIRECT */
                vit_geom g16;
                vit_block_geom(c, l, &g16);
                const size_t H16 = (size_t)g16.H, per = fa / (H16 ? H16 : 1),
                             st = sl->rec.attn16_stride ? sl->rec.attn16_stride : per;
                for (size_t h = 0; a16 && h < H16; h++)
                    kernels_f32_to_f16_array(a16 + ((size_t)b * H16 + h) * st, tmp16 + h * per, per);
                free(tmp16);
            }
            for (int i = 0; i < S * S * 3; i++) sl->rgb[(size_t)b * S * S * 3 + i] = (uint8_t)((i * 7 + img) & 255);
            for (int k = 0; k < c->num_classes; k++) sl->logits[b * c->num_classes + k] = (float)((k + img) % 5);
            snprintf(sl->paths[b], sizeof sl->paths[b], "fixture[%ld]", img);
            sl->labels[b] = (int)(img % 5);
        }
        sl->n = m;
        trace_writer_submit(w, sl);
    }
    return trace_writer_close(w, 1, NULL, err);
}

/* Writes n images of the config's closed forms (staged_fill) to path. */
static inline as_status staged_write(const char *path, const vit_config *c, const char *layers,
                              const char *heads, const char *windows, const char *dtype, long n,
                              as_error *err) {
    return staged_write_fill(path, c, layers, heads, windows, dtype, n, staged_fill, err);
}

#endif
