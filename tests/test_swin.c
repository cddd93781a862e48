/* test_swin.c: the staged (Swin) forward pass against identities that need no PyTorch. A Swin
 * block is recomputed here from its equations (LayerNorm, qkv, scale q k^T + bias, softmax,
 * A v, proj, MLP with the exact GELU), in double, over an explicit list of attention slots:
 *   (a) one window covering the grid = global attention plus the relative position bias;
 *   (b) window attention = global attention over all windows' slots, in window_token order,
 *       under a block-diagonal mask (shifted, pad slots, both pad orders, a merged stage);
 *   (c) a merge with an identity reduction = LayerNorm of the 2x2 gather in the order
 *       (0,0), (1,0), (0,1), (1,1) (column-major), an odd side padded with zeros;
 *   (d) 1 and 2 threads give the same bits;
 *   (e) parameter counts of Swin-T/S/B from closed forms and timm's published counts;
 * and bad stage configs are refused with a message naming the fix. */
#include <math.h>
#include <omp.h>
#include <stdint.h>

#include "../core/vit.h"
#include "check.h"

/* ---- a tiny Swin with random weights ---- */

typedef struct {
    vit_config c;
    vit_params p;
    float *w;
    size_t count;
} model_t;

static void tiny_config(vit_config *c, int img, int patch, int n_stages, const int *depth,
                        const int *dim, const int *heads, int window, int clamp, int pad) {
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "tiny_swin");
    c->img_size = img;
    c->patch_size = patch;
    c->in_chans = 3;
    c->num_classes = 5;
    c->qkv_bias = 1;
    c->global_pool = VIT_POOL_AVG;
    c->ln_eps = 1e-5f;
    c->crop_pct = 0.9f;
    for (int i = 0; i < 3; i++) {
        c->mean[i] = 0.5f;
        c->std[i] = 0.25f;
    }
    c->family = VIT_FAMILY_SWIN;
    c->n_stages = n_stages;
    c->patch_norm = 1;
    c->shift_windows = 1;
    c->pad_order = pad;
    c->window_clamp = clamp;
    for (int s = 0; s < n_stages; s++) {
        c->stage[s] = (vit_stage){.depth = depth[s], .embed_dim = dim[s], .num_heads = heads[s],
                                  .mlp_hidden = 2 * dim[s], .scope = VIT_SCOPE_WINDOW,
                                  .window = window, .down = s ? VIT_DOWN_MERGE : VIT_DOWN_NONE};
        c->depth += depth[s];
    }
    c->embed_dim = dim[0];
    c->num_heads = heads[0];
    c->mlp_hidden = 2 * dim[0];
}

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}
static float urand(uint32_t *s) { return (float)lcg(s) / (float)(1u << 24) * 2.0f - 1.0f; }

/* Weights uniform in +-0.5 (vectors: LayerNorm weights around 1), relative tables in +-2 so
 * that a misplaced bias entry shows. */
static int model_init_as(model_t *m, uint32_t seed, int validate) {
    as_error err;
    m->w = NULL;
    const as_status st = validate ? vit_config_validate(&m->c, &err) : AS_OK;
    CHECK(st == AS_OK, "a valid tiny Swin is refused: %s", err.msg);
    if (st != AS_OK) return 0;
    static vit_tensor_spec specs[VIT_MAX_TENSORS];
    const int n = vit_param_specs(&m->c, &m->p, specs, VIT_MAX_TENSORS);
    m->count = 0;
    for (int i = 0; i < n; i++) m->count += vit_tensor_numel(&specs[i]);
    m->w = malloc(m->count * sizeof(float));
    float *at = m->w;
    for (int i = 0; i < n; i++) {
        const size_t k = vit_tensor_numel(&specs[i]);
        const int ln = strstr(specs[i].name, "norm") && strstr(specs[i].name, "weight");
        const int rpb = strstr(specs[i].name, "relative_position_bias_table") != NULL;
        for (size_t e = 0; e < k; e++)
            at[e] = ln ? 1.0f + 0.3f * urand(&seed) : (rpb ? 2.0f : 0.5f) * urand(&seed);
        *specs[i].slot = at;
        at += k;
    }
    return 1;
}

static int model_init(model_t *m, uint32_t seed) { return model_init_as(m, seed, 1); }

static float *images(const vit_config *c, int n, uint32_t seed) {
    const size_t len = (size_t)n * 3 * c->img_size * c->img_size;
    float *x = calloc(len, sizeof(float));
    for (size_t i = 0; i < len; i++) x[i] = urand(&seed);
    return x;
}

/* Every record of every block, and the run. */
typedef struct {
    float *attn[VIT_MAX_DEPTH], *scores[VIT_MAX_DEPTH], *q[VIT_MAX_DEPTH], *k[VIT_MAX_DEPTH];
    float *tokens[VIT_MAX_DEPTH], *extra0[VIT_MAX_DEPTH]; /* extra0: a mechanism's extra 0, or NULL */
    size_t n_map[VIT_MAX_DEPTH], n_qk[VIT_MAX_DEPTH], n_tok[VIT_MAX_DEPTH];
    float *logits;
    vit_acts a;
    void *arena;
} run_t;

/* threads > 0: the arena is carved at 2 threads and the forward runs at that many */
static void run_model(run_t *r, const model_t *m, const float *x, int B, int threads) {
    const vit_config *c = &m->c;
    vit_record rec = {r->attn, r->scores, r->q, r->k, r->tokens, {r->extra0, NULL}, NULL, NULL, 0, 0};
    for (int l = 0; l < c->depth; l++) {
        vit_geom g;
        vit_block_geom(c, l, &g);
        r->n_map[l] = (size_t)B * g.H * g.problems * g.Tq * g.Tk;
        r->n_qk[l] = (size_t)B * g.T * g.H * vit_qk_head_dim(c, l);
        r->n_tok[l] = (size_t)B * g.T * g.D;
        r->attn[l] = malloc(r->n_map[l] * sizeof(float));
        r->scores[l] = malloc(r->n_map[l] * sizeof(float));
        r->q[l] = malloc(r->n_qk[l] * sizeof(float));
        r->k[l] = malloc(r->n_qk[l] * sizeof(float));
        r->tokens[l] = malloc(r->n_tok[l] * sizeof(float));
        r->extra0[l] = vit_extra_info(c, l, 0, NULL) ? malloc(r->n_map[l] * sizeof(float)) : NULL;
    }
    if (threads) omp_set_num_threads(2);
    const size_t bytes = vit_acts_carve(c, B, NULL, NULL);
    r->arena = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    vit_acts_carve(c, B, r->arena, &r->a);
    if (threads) omp_set_num_threads(threads);
    vit_forward(c, &m->p, &r->a, x, B, &rec);
    r->logits = malloc((size_t)B * c->num_classes * sizeof(float));
    memcpy(r->logits, r->a.logits, (size_t)B * c->num_classes * sizeof(float));
}

static void run_free(run_t *r, const vit_config *c) {
    for (int l = 0; l < c->depth; l++) {
        free(r->attn[l]);
        free(r->scores[l]);
        free(r->q[l]);
        free(r->k[l]);
        free(r->tokens[l]);
        free(r->extra0[l]);
    }
    free(r->logits);
    free(r->arena);
}

/* ---- the reference block, from the equations ---- */

static void ref_layernorm(double *out, const float *x, const float *w, const float *b, int D, float eps) {
    double mean = 0, var = 0;
    for (int i = 0; i < D; i++) mean += x[i];
    mean /= D;
    for (int i = 0; i < D; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= D;
    for (int i = 0; i < D; i++) out[i] = (x[i] - mean) / sqrt(var + (double)eps) * w[i] + b[i];
}

/* y (n) = W (n, k) x (k) + b */
static void ref_linear(double *y, const double *x, const float *W, const float *b, int n, int k) {
    for (int o = 0; o < n; o++) {
        double s = b ? b[o] : 0.0;
        for (int i = 0; i < k; i++) s += (double)W[(size_t)o * k + i] * x[i];
        y[o] = s;
    }
}

/* The relative position bias of head h between rows a and b of an M x M window (row-major):
 * table[((ya - yb) + M - 1) (2M - 1) + (xa - xb) + M - 1][h], Swin's Eq. (4) indexing. */
static double rel_bias(const float *table, int H, int h, int M, int a, int b) {
    const int dy = a / M - b / M, dx = a % M - b % M;
    return table[((size_t)(dy + M - 1) * (2 * M - 1) + (size_t)(dx + M - 1)) * H + h];
}

/* A bias table entry of head h between window rows i and j (N = M^2 rows): a full (H, N, N)
 * table or a relative ((2M - 1)^2, H) one (LSLA's, indexed as Swin's). */
static double mech_bias(const float *table, vit_bias_kind kind, int H, int h, int M, int i, int j) {
    const int N = M * M;
    if (kind == VIT_BIAS_FULL) return table[((size_t)h * N + i) * N + j];
    return kind == VIT_BIAS_RELATIVE ? rel_bias(table, H, h, M, i, j) : 0.0;
}

/* One block on one image: xin (T, D) -> out (T, D). Attention runs over S slots; slot i holds
 * grid token tok[i] or a pad (-1: its normalised input is zero). bias (H, S, S) is added to the
 * scores (-INFINITY blocks a pair). S_out, A_out, P_out (H, S, S) get the scores, the maps
 * and the softmax (the map before LSLA's outer bias);
 * q_out, k_out (H, T, dq) the unscaled q and k of the grid tokens. The mechanism (at; NULL:
 * vanilla), from the papers' equations, with window side M (its tensors are per window, and
 * slots i, j of one window are i % M^2, j % M^2 there):
 *   vanilla  q, k, v = slices of qkv(x); S = q k^T / sqrt(hd) + bias
 *   lmsa     q = Wq x, k = Wk x (qk_dim / H per head), v = Wv x; S = q k^T / sqrt(dq) + bias
 *   lsla     q = Wq x, k = x, v = x or Wv x; S = (q k^T) * DS (or * scale) + B_inner + bias;
 *            A = softmax(S) + B_outer (inside the window); NP: no output projection. */
/* The shift mask of the block ref_block computes (per window (N, N), window after window: row i
 * of the whole slot list starts at i N), or NULL for an unshifted block. */
static const float *ref_shift_mask;

static void ref_block(double *out, double *S_out, double *A_out, double *P_out, double *q_out, double *k_out,
                      const float *xin, const vit_block_params *bp, int T, int D, int H, int Hm,
                      float eps, const int *tok, int S, const double *bias, const vit_attn *at, int M) {
    const vit_attn_kind kind = at ? at->kind : VIT_ATTN_VANILLA;
    const int hd = D / H, N = M * M, Wq = kind == VIT_ATTN_LMSA ? at->qk_dim : D, dq = Wq / H;
    double scale = 1.0 / sqrt((double)dq);
    if (kind == VIT_ATTN_LSLA && at->dynamic_scale) scale = 1.0;
    double *xn = calloc((size_t)T * D, sizeof(double));
    double *q = calloc((size_t)S * Wq, sizeof(double)), *k = calloc((size_t)S * Wq, sizeof(double));
    double *v = calloc((size_t)S * D, sizeof(double)), *qkv = calloc((size_t)3 * D, sizeof(double));
    double *ao = calloc((size_t)T * D, sizeof(double));
    double *row = malloc((size_t)S * sizeof(double));
    for (int t = 0; t < T; t++) ref_layernorm(xn + (size_t)t * D, xin + (size_t)t * D, bp->norm1_w, bp->norm1_b, D, eps);
    double *zero = calloc((size_t)D, sizeof(double));
    for (int i = 0; i < S; i++) {
        const double *x = tok[i] >= 0 ? xn + (size_t)tok[i] * D : zero;
        double *qi = q + (size_t)i * Wq, *ki = k + (size_t)i * Wq, *vi = v + (size_t)i * D;
        if (kind == VIT_ATTN_VANILLA) {
            ref_linear(qkv, x, bp->qkv_w, bp->qkv_b, 3 * D, D);
            memcpy(qi, qkv, (size_t)D * sizeof(double));
            memcpy(ki, qkv + D, (size_t)D * sizeof(double));
            memcpy(vi, qkv + 2 * D, (size_t)D * sizeof(double));
        } else if (kind == VIT_ATTN_LMSA) {
            ref_linear(qi, x, bp->q_w, bp->q_b, Wq, D);
            ref_linear(ki, x, bp->k_w, bp->k_b, Wq, D);
            ref_linear(vi, x, bp->v_w, bp->v_b, D, D);
        } else { /* lsla */
            ref_linear(qi, x, bp->q_w, bp->q_b, D, D);
            memcpy(ki, x, (size_t)D * sizeof(double));
            if (at->value_proj) ref_linear(vi, x, bp->v_w, bp->v_b, D, D);
            else memcpy(vi, x, (size_t)D * sizeof(double));
        }
    }
    for (int i = 0; i < S; i++)
        for (int h = 0; h < H && tok[i] >= 0; h++)
            for (int c = 0; c < dq; c++) {
                q_out[((size_t)h * T + tok[i]) * dq + c] = q[(size_t)i * Wq + h * dq + c];
                k_out[((size_t)h * T + tok[i]) * dq + c] = k[(size_t)i * Wq + h * dq + c];
            }
    for (int h = 0; h < H; h++)
        for (int i = 0; i < S; i++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < S; j++) {
                double s = 0;
                for (int c = 0; c < dq; c++) s += q[(size_t)i * Wq + h * dq + c] * k[(size_t)j * Wq + h * dq + c];
                s *= scale;
                if (kind == VIT_ATTN_LSLA) {
                    if (at->dynamic_scale) s *= bp->ds[(size_t)(i % N) * N + j % N];
                    s += mech_bias(bp->inner_bias, at->inner_bias, H, h, M, i % N, j % N);
                }
                row[j] = s + bias[((size_t)h * S + i) * S + j];
                S_out[((size_t)h * S + i) * S + j] = row[j];
                if (row[j] > mx) mx = row[j];
            }
            for (int j = 0; j < S; j++) sum += row[j] = exp(row[j] - mx);
            for (int j = 0; j < S; j++) {
                row[j] /= sum;
                P_out[((size_t)h * S + i) * S + j] = row[j];
                /* B_outer inside the window; by default not on the pairs the shift mask separates */
                if (kind == VIT_ATTN_LSLA && i / N == j / N &&
                    (at->outer_unmasked || !ref_shift_mask || ref_shift_mask[((size_t)i * N) + j % N] == 0.0f))
                    row[j] += mech_bias(bp->outer_bias, at->outer_bias, H, h, M, i % N, j % N);
                A_out[((size_t)h * S + i) * S + j] = row[j];
            }
            if (tok[i] < 0) continue;
            for (int c = 0; c < hd; c++) {
                double o = 0;
                for (int j = 0; j < S; j++) o += row[j] * v[(size_t)j * D + h * hd + c];
                ao[(size_t)tok[i] * D + h * hd + c] = o;
            }
        }
    double *t1 = malloc((size_t)Hm * sizeof(double)), *t2 = malloc((size_t)Hm * sizeof(double));
    float *x1 = malloc((size_t)D * sizeof(float));
    for (int t = 0; t < T; t++) {
        if (bp->proj_w) ref_linear(t1, ao + (size_t)t * D, bp->proj_w, bp->proj_b, D, D);
        else memcpy(t1, ao + (size_t)t * D, (size_t)D * sizeof(double));
        for (int c = 0; c < D; c++) x1[c] = (float)(xin[(size_t)t * D + c] + t1[c]);
        ref_layernorm(t2, x1, bp->norm2_w, bp->norm2_b, D, eps);
        ref_linear(t1, t2, bp->fc1_w, bp->fc1_b, Hm, D);
        for (int c = 0; c < Hm; c++) t1[c] = 0.5 * t1[c] * (1.0 + erf(t1[c] / sqrt(2.0)));
        ref_linear(t2, t1, bp->fc2_w, bp->fc2_b, D, Hm);
        for (int c = 0; c < D; c++) out[(size_t)t * D + c] = (double)x1[c] + t2[c];
    }
    free(xn);
    free(q);
    free(k);
    free(v);
    free(qkv);
    free(ao);
    free(row);
    free(zero);
    free(t1);
    free(t2);
    free(x1);
}

static int close_d(const char *what, const float *got, const double *want, size_t n, double tol) {
    float *w = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) w[i] = (float)want[i];
    const int ok = check_close(what, got, w, n, tol, tol);
    free(w);
    return ok;
}

/* Block l of image b of a run, against ref_block over the given slots and bias. The engine's
 * maps of problem w are the (w, w) blocks of the reference's (S, S) maps. */
static void check_block(const char *name, const model_t *m, const run_t *r, int l, int B,
                        const int *tok, int S, const double *bias) {
    const vit_config *c = &m->c;
    vit_geom g;
    vit_block_geom(c, l, &g);
    const int T = g.T, D = g.D, H = g.H, N = g.Tq, P = g.problems;
    double *out = malloc((size_t)T * D * sizeof(double)), *Sr = malloc((size_t)H * S * S * sizeof(double));
    const size_t QK = (size_t)T * H * vit_qk_head_dim(c, l); /* q/k floats of one image */
    double *Ar = malloc((size_t)H * S * S * sizeof(double)), *qr = malloc(QK * sizeof(double));
    double *kr = malloc(QK * sizeof(double));
    double *Sw = malloc((size_t)H * P * N * N * sizeof(double)), *Aw = malloc((size_t)H * P * N * N * sizeof(double));
    double *Pr = malloc((size_t)H * S * S * sizeof(double)), *Pw = malloc((size_t)H * P * N * N * sizeof(double));
    char what[384];
    for (int b = 0; b < B; b++) {
        ref_block(out, Sr, Ar, Pr, qr, kr, r->tokens[l - 1] + (size_t)b * T * D, &m->p.blocks[l], T, D, H, g.Hm,
                  c->ln_eps, tok, S, bias, &c->attn[l], g.M > 0 ? g.M : g.gw);
        double off = 0; /* what the reference puts outside the diagonal blocks */
        for (int h = 0; h < H; h++)
            for (int i = 0; i < S; i++)
                for (int j = 0; j < S; j++) {
                    const double a = Ar[((size_t)h * S + i) * S + j];
                    if (i / N == j / N) {
                        const size_t at = (((size_t)h * P + i / N) * N + i % N) * N + j % N;
                        Aw[at] = a;
                        Sw[at] = Sr[((size_t)h * S + i) * S + j];
                        Pw[at] = Pr[((size_t)h * S + i) * S + j];
                    } else if (a > off) {
                        off = a;
                    }
                }
        CHECK(off == 0.0, "%s: the reference leaks %g across windows", name, off);
        const size_t maps = (size_t)H * P * N * N;
        snprintf(what, sizeof what, "%s block %d image %d attn", name, l, b);
        CHECK(close_d(what, r->attn[l] + b * maps, Aw, maps, 1e-5), "%s", what);
        if (r->extra0[l]) {
            snprintf(what, sizeof what, "%s block %d image %d extra 0 (softmax)", name, l, b);
            CHECK(close_d(what, r->extra0[l] + b * maps, Pw, maps, 1e-5), "%s", what);
        }
        snprintf(what, sizeof what, "%s block %d image %d scores", name, l, b);
        CHECK(close_d(what, r->scores[l] + b * maps, Sw, maps, 1e-4), "%s", what);
        snprintf(what, sizeof what, "%s block %d image %d q", name, l, b);
        CHECK(close_d(what, r->q[l] + b * QK, qr, QK, 1e-4), "%s", what);
        snprintf(what, sizeof what, "%s block %d image %d k", name, l, b);
        CHECK(close_d(what, r->k[l] + b * QK, kr, QK, 1e-4), "%s", what);
        snprintf(what, sizeof what, "%s block %d image %d tokens", name, l, b);
        CHECK(close_d(what, r->tokens[l] + (size_t)b * T * D, out, (size_t)T * D, 1e-4), "%s", what);
    }
    free(out);
    free(Sr);
    free(Ar);
    free(qr);
    free(kr);
    free(Sw);
    free(Aw);
    free(Pr);
    free(Pw);
}

/* (a) a block whose one window covers the grid: slots are the grid tokens in order, the bias is
 * the relative table on the grid. */
static void test_one_window(void) {
    model_t m;
    const int depth[] = {2}, dim[] = {16}, heads[] = {2};
    /* grid 5 < window 7: timm's clamp makes it one 5 x 5 window that never shifts */
    tiny_config(&m.c, 20, 4, 1, depth, dim, heads, 7, VIT_CLAMP_TIMM, VIT_PAD_FIRST);
    if (!model_init(&m, 11)) return;
    vit_geom g;
    vit_block_geom(&m.c, 1, &g);
    CHECK(g.M == 5 && g.shift == 0 && g.problems == 1, "clamp: M %d shift %d problems %d", g.M, g.shift, g.problems);
    const int B = 2, T = 25, H = 2;
    float *x = images(&m.c, B, 3);
    run_t r;
    run_model(&r, &m, x, B, 0);
    int tok[25];
    double *bias = malloc((size_t)H * T * T * sizeof(double));
    for (int t = 0; t < T; t++) tok[t] = t;
    for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++)
                bias[((size_t)h * T + i) * T + j] = rel_bias(m.p.blocks[1].rpb_table, H, h, 5, i, j);
    check_block("one window", &m, &r, 1, B, tok, T, bias);
    run_free(&r, &m.c);
    free(m.w);
    /* the same stage with global scope: plain attention over the grid, no bias, no table. The
     * engine runs it (H-MaiT's masked global stages will need it); validation still refuses
     * staged models other than Swin's, so this model skips it. */
    tiny_config(&m.c, 20, 4, 1, depth, dim, heads, 0, VIT_CLAMP_TIMM, VIT_PAD_FIRST);
    m.c.stage[0].scope = VIT_SCOPE_GLOBAL;
    if (model_init_as(&m, 12, 0)) {
        CHECK(!m.p.blocks[1].rpb_table, "a global block has no relative table");
        run_model(&r, &m, x, B, 0);
        memset(bias, 0, (size_t)H * T * T * sizeof(double));
        check_block("global stage", &m, &r, 1, B, tok, T, bias);
        run_free(&r, &m.c);
    }
    free(m.w);
    free(bias);
    free(x);
}

/* (b) block l of a model against global attention over every window's slots in window_token
 * order: the relative bias and the shift mask inside a window, -inf across windows. */
static void window_vs_global(const char *name, model_t *m, int B, const int *blocks, int nb) {
    float *x = images(&m->c, B, 5);
    run_t r;
    run_model(&r, m, x, B, 0);
    for (int e = 0; e < nb; e++) {
        const int l = blocks[e];
        vit_geom g;
        vit_block_geom(&m->c, l, &g);
        const int N = g.Tq, S = g.problems * N, H = g.H;
        int *tok = malloc((size_t)S * sizeof(int));
        float *mask = malloc((size_t)S * N * sizeof(float));
        vit_window_tokens(&m->c, &g, tok);
        vit_shift_mask(&m->c, &g, mask);
        double *bias = malloc((size_t)H * S * S * sizeof(double));
        int pads = 0;
        for (int i = 0; i < S; i++) pads += tok[i] < 0;
        for (int h = 0; h < H; h++)
            for (int i = 0; i < S; i++)
                for (int j = 0; j < S; j++)
                    bias[((size_t)h * S + i) * S + j] =
                        i / N != j / N ? -INFINITY
                                       : rel_bias(m->p.blocks[l].rpb_table, H, h, g.M, i % N, j % N) +
                                             mask[((size_t)(i / N) * N + i % N) * N + j % N];
        char what[256];
        snprintf(what, sizeof what, "%s (grid %d, M %d, shift %d, %d pad slots)", name, g.gh, g.M, g.shift, pads);
        ref_shift_mask = g.shift ? mask : NULL;
        check_block(what, m, &r, l, B, tok, S, bias);
        ref_shift_mask = NULL;
        free(bias);
        free(mask);
        free(tok);
    }
    free(x);
    run_free(&r, &m->c);
}

static void test_window_vs_global(void) {
    const int d1[] = {2}, dim1[] = {16}, h1[] = {2};
    const int blocks1[] = {1};
    for (int pad = 0; pad < VIT_PAD_COUNT; pad++) {
        model_t m;
        /* grid 8, window 4, shift 2: the window divides the grid */
        tiny_config(&m.c, 32, 4, 1, d1, dim1, h1, 4, VIT_CLAMP_TIMM, pad);
        if (model_init(&m, 21)) window_vs_global(pad ? "divisible, roll first" : "divisible, pad first", &m, 2, blocks1, 1);
        free(m.w);
        /* grid 10, window 4: padded to 12, shifted by 2 */
        tiny_config(&m.c, 40, 4, 1, d1, dim1, h1, 4, VIT_CLAMP_TIMM, pad);
        if (model_init(&m, 22)) window_vs_global(pad ? "grid 10, roll first" : "grid 10, pad first", &m, 2, blocks1, 1);
        free(m.w);
    }
    /* two stages: grid 14 (window 3, pad to 15) then 7 after the merge (pad to 9), both shifted */
    const int d2[] = {2, 2}, dim2[] = {8, 16}, h2[] = {2, 4}, blocks2[] = {1, 3};
    model_t m;
    tiny_config(&m.c, 56, 4, 2, d2, dim2, h2, 3, VIT_CLAMP_TIMM, VIT_PAD_FIRST);
    if (model_init(&m, 23)) window_vs_global("two stages", &m, 2, blocks2, 2);
    free(m.w);
    /* torchvision's clamp: grid 3 < window 4 keeps M = 4, pads to 4 and never shifts */
    const int d3[] = {2}, dim3[] = {8}, h3[] = {2};
    tiny_config(&m.c, 12, 4, 1, d3, dim3, h3, 4, VIT_CLAMP_TORCHVISION, VIT_PAD_FIRST);
    if (model_init(&m, 24)) window_vs_global("torchvision clamp", &m, 1, blocks1, 1);
    free(m.w);
}

/* (b2) lmsa and lsla inside Swin windows: every block of the model runs the mechanism; the
 * checked blocks are shifted, over padded grids, against the reference's equations over every
 * window's slots (block-diagonal, window_token order). */
static void set_mech(vit_config *c, const vit_attn *a) {
    for (int l = 0; l < c->depth; l++) c->attn[l] = *a;
}

static void test_window_mechs(void) {
    static const struct {
        const char *name;
        vit_attn a;
    } v[] = {
        {"lmsa qk_dim 4", {.kind = VIT_ATTN_LMSA, .qk_dim = 4}},
        {"lmsa qk_dim 2D", {.kind = VIT_ATTN_LMSA, .qk_dim = 32}},
        {"lsla DS, full biases, QXX", {.kind = VIT_ATTN_LSLA, .dynamic_scale = 1, .inner_bias = VIT_BIAS_FULL,
                                       .outer_bias = VIT_BIAS_FULL}},
        {"lsla fixed scale, relative biases, QXV, NP",
         {.kind = VIT_ATTN_LSLA, .inner_bias = VIT_BIAS_RELATIVE, .outer_bias = VIT_BIAS_RELATIVE,
          .value_proj = 1, .no_proj = 1}},
        {"lsla DS, relative inner, no outer", {.kind = VIT_ATTN_LSLA, .dynamic_scale = 1,
                                               .inner_bias = VIT_BIAS_RELATIVE}},
        /* the printed Algorithm 1 per window: B_outer also on the pairs the shift mask separates */
        {"lsla DS, full biases, outer bias unmasked", {.kind = VIT_ATTN_LSLA, .dynamic_scale = 1,
                                                        .inner_bias = VIT_BIAS_FULL, .outer_bias = VIT_BIAS_FULL,
                                                        .outer_unmasked = 1}},
        {"lsla relative biases, outer bias unmasked", {.kind = VIT_ATTN_LSLA, .dynamic_scale = 1,
                                                        .inner_bias = VIT_BIAS_RELATIVE,
                                                        .outer_bias = VIT_BIAS_RELATIVE, .outer_unmasked = 1}},
    };
    const int d1[] = {2}, dim1[] = {16}, h1[] = {2}, blocks1[] = {1};
    const int d2[] = {2, 2}, dim2[] = {8, 16}, h2[] = {2, 4}, blocks2[] = {1, 3};
    char name[128];
    for (size_t e = 0; e < sizeof v / sizeof v[0]; e++) {
        model_t m;
        for (int pad = 0; pad < VIT_PAD_COUNT; pad++) { /* grid 10, window 4: padded to 12, shift 2 */
            tiny_config(&m.c, 40, 4, 1, d1, dim1, h1, 4, VIT_CLAMP_TIMM, pad);
            set_mech(&m.c, &v[e].a);
            snprintf(name, sizeof name, "%s, grid 10, %s", v[e].name, pad ? "roll first" : "pad first");
            if (model_init(&m, 31 + (uint32_t)e)) window_vs_global(name, &m, 2, blocks1, 1);
            free(m.w);
        }
        /* two stages: grid 14 (window 3, padded to 15) then 7 (padded to 9), both shifted */
        if (v[e].a.kind == VIT_ATTN_LMSA && v[e].a.qk_dim == 32) continue; /* 2D is 16 in stage 0 */
        tiny_config(&m.c, 56, 4, 2, d2, dim2, h2, 3, VIT_CLAMP_TIMM, VIT_PAD_FIRST);
        set_mech(&m.c, &v[e].a);
        snprintf(name, sizeof name, "%s, two stages", v[e].name);
        if (model_init(&m, 41 + (uint32_t)e)) window_vs_global(name, &m, 2, blocks2, 2);
        free(m.w);
    }
}

/* (b3) lmsa with qk_dim = D and q, k, v weights equal to vanilla's qkv slices is vanilla: the
 * same maps, scores and tokens in shifted, padded windows. */
static void test_lmsa_is_vanilla(void) {
    const int d2[] = {2, 2}, dim2[] = {8, 16}, h2[] = {2, 4};
    model_t va, lm;
    tiny_config(&va.c, 56, 4, 2, d2, dim2, h2, 3, VIT_CLAMP_TIMM, VIT_PAD_FIRST);
    if (!model_init(&va, 51)) return;
    tiny_config(&lm.c, 56, 4, 2, d2, dim2, h2, 3, VIT_CLAMP_TIMM, VIT_PAD_FIRST);
    for (int l = 0; l < lm.c.depth; l++) {
        vit_geom g;
        vit_block_geom(&lm.c, l, &g);
        lm.c.attn[l] = (vit_attn){.kind = VIT_ATTN_LMSA, .qk_dim = g.D};
    }
    if (!model_init(&lm, 52)) {
        free(va.w);
        return;
    }
    /* every tensor of lm from va: the same name, or q/k/v as rows of qkv (model_init lays the
     * tensors out in spec order) */
    static vit_tensor_spec sv[VIT_MAX_TENSORS], sl[VIT_MAX_TENSORS];
    vit_params pv, pl;
    const int nv = vit_param_specs(&va.c, &pv, sv, VIT_MAX_TENSORS), nl = vit_param_specs(&lm.c, &pl, sl, VIT_MAX_TENSORS);
    int copied = 0;
    size_t at_l = 0;
    for (int i = 0; i < nl; at_l += vit_tensor_numel(&sl[i]), i++) {
        char want[VIT_TENSOR_NAME_MAX + 16];
        snprintf(want, sizeof want, "%.*s", VIT_TENSOR_NAME_MAX - 1, sl[i].name);
        int part = -1;
        static const char *const qkv[3] = {".attn.q.", ".attn.k.", ".attn.v."};
        for (int p = 0; p < 3; p++) {
            char *at = strstr(want, qkv[p]);
            if (!at) continue;
            part = p;
            char tail[64];
            snprintf(tail, sizeof tail, "%s", at + strlen(qkv[p]));
            snprintf(at, sizeof want - (size_t)(at - want), ".attn.qkv.%s", tail);
        }
        size_t at_v = 0;
        for (int k = 0; k < nv; at_v += vit_tensor_numel(&sv[k]), k++) {
            if (strcmp(sv[k].name, want)) continue;
            const size_t n = vit_tensor_numel(&sl[i]);
            memcpy(lm.w + at_l, va.w + at_v + (part > 0 ? (size_t)part * n : 0), n * sizeof(float));
            copied++;
        }
    }
    CHECK(copied == nl, "lmsa as vanilla: %d of %d tensors found in vanilla's", copied, nl);
    float *x = images(&va.c, 2, 7);
    run_t rv, rl;
    run_model(&rv, &va, x, 2, 0);
    run_model(&rl, &lm, x, 2, 0);
    char what[96];
    for (int l = 0; l < va.c.depth; l++) {
        snprintf(what, sizeof what, "lmsa qk_dim = D as vanilla: block %d attn", l);
        CHECK(check_close(what, rl.attn[l], rv.attn[l], rv.n_map[l], 1e-5, 1e-5), "%s", what);
        snprintf(what, sizeof what, "lmsa qk_dim = D as vanilla: block %d scores", l);
        CHECK(check_close(what, rl.scores[l], rv.scores[l], rv.n_map[l], 1e-5, 1e-5), "%s", what);
        snprintf(what, sizeof what, "lmsa qk_dim = D as vanilla: block %d q", l);
        CHECK(check_close(what, rl.q[l], rv.q[l], rv.n_qk[l], 1e-6, 1e-6), "%s", what);
        snprintf(what, sizeof what, "lmsa qk_dim = D as vanilla: block %d tokens", l);
        CHECK(check_close(what, rl.tokens[l], rv.tokens[l], rv.n_tok[l], 1e-5, 1e-5), "%s", what);
    }
    run_free(&rv, &va.c);
    run_free(&rl, &lm.c);
    free(x);
    free(va.w);
    free(lm.w);
}

/* (c) the merge: identity reduction, LayerNorm weight 1 and bias 0, and a first stage-1 block
 * whose branches add nothing (proj and fc2 zero), so that block's output is the merge's. */
/* A writable view of a weight of m (all of them live in m->w). */
static float *mut(model_t *m, const float *w) { return m->w + (w - m->w); }

static void test_merge(void) {
    const int depth[] = {1, 1}, dim[] = {4, 16}, heads[] = {1, 2};
    model_t m;
    tiny_config(&m.c, 20, 4, 2, depth, dim, heads, 2, VIT_CLAMP_TIMM, VIT_PAD_FIRST); /* grid 5 -> 3 */
    if (!model_init(&m, 31)) return;
    const int C = 4, C4 = 16;
    vit_stage_params *sp = &m.p.stages[1];
    float *red = mut(&m, sp->down_w), *nw = mut(&m, sp->down_norm_w), *nb = mut(&m, sp->down_norm_b);
    for (int o = 0; o < C4; o++) {
        nw[o] = 1.0f;
        nb[o] = 0.0f;
        for (int i = 0; i < C4; i++) red[o * C4 + i] = o == i ? 1.0f : 0.0f;
    }
    vit_block_params *bp = &m.p.blocks[1];
    memset(mut(&m, bp->proj_w), 0, (size_t)C4 * C4 * sizeof(float));
    memset(mut(&m, bp->proj_b), 0, (size_t)C4 * sizeof(float));
    memset(mut(&m, bp->fc2_w), 0, (size_t)C4 * 2 * C4 * sizeof(float));
    memset(mut(&m, bp->fc2_b), 0, (size_t)C4 * sizeof(float));
    const int B = 2;
    float *x = images(&m.c, B, 7);
    run_t r;
    run_model(&r, &m, x, B, 0);
    /* the documented order of the children (dy, dx) */
    static const int order[4][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
    const float ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, zeros[16] = {0};
    double *want = malloc((size_t)B * 9 * C4 * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int y = 0; y < 3; y++)
            for (int xx = 0; xx < 3; xx++) {
                float cat[16];
                for (int k = 0; k < 4; k++) {
                    const int sy = 2 * y + order[k][0], sx = 2 * xx + order[k][1];
                    for (int ch = 0; ch < C; ch++)
                        cat[k * C + ch] = sy < 5 && sx < 5 ? r.tokens[0][(((size_t)b * 5 + sy) * 5 + sx) * C + ch] : 0.0f;
                }
                ref_layernorm(want + (((size_t)b * 3 + y) * 3 + xx) * C4, cat, ones, zeros, C4, m.c.ln_eps);
            }
    CHECK(close_d("merge", r.tokens[1], want, (size_t)B * 9 * C4, 1e-5), "merge order");
    free(want);
    free(x);
    run_free(&r, &m.c);
    free(m.w);
}

/* (d) the same bits at 1 and 2 threads (the arena carved for 2) */
static void threads_one(const vit_attn *a) {
    const int depth[] = {2, 2}, dim[] = {8, 16}, heads[] = {2, 4};
    model_t m;
    tiny_config(&m.c, 40, 4, 2, depth, dim, heads, 3, VIT_CLAMP_TIMM, VIT_PAD_FIRST);
    if (a) set_mech(&m.c, a);
    if (!model_init(&m, 41)) return;
    const int B = 3;
    float *x = images(&m.c, B, 9);
    run_t r[2];
    for (int t = 0; t < 2; t++) run_model(&r[t], &m, x, B, t + 1);
    omp_set_num_threads(2);
    const char *nm = a ? vit_attn_name(a->kind) : "vanilla";
    CHECK(!memcmp(r[0].logits, r[1].logits, (size_t)B * m.c.num_classes * sizeof(float)), "%s: logits differ with the thread count", nm);
    for (int l = 0; l < m.c.depth; l++) {
        CHECK(!memcmp(r[0].attn[l], r[1].attn[l], r[0].n_map[l] * sizeof(float)), "%s: block %d attn differs", nm, l);
        CHECK(!memcmp(r[0].scores[l], r[1].scores[l], r[0].n_map[l] * sizeof(float)), "%s: block %d scores differ", nm, l);
        CHECK(!memcmp(r[0].tokens[l], r[1].tokens[l], r[0].n_tok[l] * sizeof(float)), "%s: block %d tokens differ", nm, l);
        CHECK(!memcmp(r[0].q[l], r[1].q[l], r[0].n_qk[l] * sizeof(float)) &&
              !memcmp(r[0].k[l], r[1].k[l], r[0].n_qk[l] * sizeof(float)), "%s: block %d q or k differ", nm, l);
    }
    run_free(&r[0], &m.c);
    run_free(&r[1], &m.c);
    free(x);
    free(m.w);
}

/* vanilla, and lmsa and lsla through the mechanism path */
static void test_threads(void) {
    const vit_attn lmsa = {.kind = VIT_ATTN_LMSA, .qk_dim = 4};
    const vit_attn lsla = {.kind = VIT_ATTN_LSLA, .dynamic_scale = 1, .inner_bias = VIT_BIAS_RELATIVE,
                           .outer_bias = VIT_BIAS_FULL, .value_proj = 1};
    threads_one(NULL);
    threads_one(&lmsa);
    threads_one(&lsla);
}

/* (e) parameter counts. Closed form of one Swin v1 at 224 (window 7, so every relative table is
 * 13 x 13, the last stage's included) with 1000 classes; timm prints the same totals. */
static double swin_params(int C0, const int *depth, const int *heads) {
    double n = 3.0 * 16 * C0 + C0 + 2.0 * C0; /* proj, its bias, the patch norm */
    for (int s = 0; s < 4; s++) {
        const double C = (double)C0 * (1 << s);
        if (s > 0) n += 2 * (2 * C) + C * (2 * C); /* LN(4 C_{s-1}) and the reduction */
        const double block = 2 * C + (3 * C * C + 3 * C) + 169.0 * heads[s] + (C * C + C) + 2 * C +
                             (4 * C * C + 4 * C) + (4 * C * C + C);
        n += depth[s] * block;
    }
    const double CL = C0 * 8.0;
    return n + 2 * CL + 1000 * CL + 1000;
}

static void test_param_counts(void) {
    static const struct {
        const char *name;
        int C, depth[4], heads[4];
        double timm;
    } t[] = {{"swin_tiny", 96, {2, 2, 6, 2}, {3, 6, 12, 24}, 28288354},
             {"swin_small", 96, {2, 2, 18, 2}, {3, 6, 12, 24}, 49606258},
             {"swin_base", 128, {2, 2, 18, 2}, {4, 8, 16, 32}, 87768224}};
    for (int i = 0; i < 3; i++) {
        vit_config c;
        const int dim[4] = {t[i].C, 2 * t[i].C, 4 * t[i].C, 8 * t[i].C};
        tiny_config(&c, 224, 4, 4, t[i].depth, dim, t[i].heads, 7, VIT_CLAMP_TIMM, VIT_PAD_FIRST);
        c.num_classes = 1000;
        for (int s = 0; s < 4; s++) c.stage[s].mlp_hidden = 4 * dim[s];
        c.mlp_hidden = 4 * dim[0];
        as_error err;
        CHECK(vit_config_validate(&c, &err) == AS_OK, "%s: %s", t[i].name, err.msg);
        static vit_tensor_spec specs[VIT_MAX_TENSORS];
        vit_params p;
        const int n = vit_param_specs(&c, &p, specs, VIT_MAX_TENSORS);
        double total = 0;
        for (int k = 0; k < n; k++) total += (double)vit_tensor_numel(&specs[k]);
        const double closed = swin_params(t[i].C, t[i].depth, t[i].heads);
        CHECK(closed == t[i].timm, "%s: the closed form gives %.0f, timm %.0f", t[i].name, closed, t[i].timm);
        CHECK(total == t[i].timm, "%s: the specs hold %.0f parameters, timm %.0f", t[i].name, total, t[i].timm);
        /* names as timm's state dict */
        int found = 0;
        for (int k = 0; k < n; k++)
            found += !strcmp(specs[k].name, "layers.2.blocks.5.attn.relative_position_bias_table") &&
                     specs[k].shape[0] == 169 && specs[k].shape[1] == t[i].heads[2];
        for (int k = 0; k < n; k++)
            found += !strcmp(specs[k].name, "layers.1.downsample.reduction.weight") &&
                     specs[k].shape[0] == 2 * t[i].C && specs[k].shape[1] == 4 * t[i].C;
        for (int k = 0; k < n; k++) found += !strcmp(specs[k].name, "head.fc.weight") || !strcmp(specs[k].name, "patch_embed.norm.bias");
        CHECK(found == 4, "%s: timm's names (%d of 4 found)", t[i].name, found);
    }
    /* timm's clamp at 160: grids 40, 20, 10, 5, so the last stage's window is 5 (table 9 x 9) */
    vit_config c;
    const int depth[4] = {2, 2, 6, 2}, dim[4] = {96, 192, 384, 768}, heads[4] = {3, 6, 12, 24};
    tiny_config(&c, 160, 4, 4, depth, dim, heads, 7, VIT_CLAMP_TIMM, VIT_PAD_FIRST);
    static vit_tensor_spec specs[VIT_MAX_TENSORS];
    vit_params p;
    const int n = vit_param_specs(&c, &p, specs, VIT_MAX_TENSORS);
    int ok = 0;
    for (int k = 0; k < n; k++)
        if (!strcmp(specs[k].name, "layers.3.blocks.1.attn.relative_position_bias_table"))
            ok = specs[k].shape[0] == 81 && specs[k].shape[1] == 24;
    CHECK(ok, "the last stage's table at 160 is (81, 24) under timm's clamp");
    c.window_clamp = VIT_CLAMP_TORCHVISION;
    vit_param_specs(&c, &p, specs, VIT_MAX_TENSORS);
    ok = 0;
    for (int k = 0; k < n; k++)
        if (!strcmp(specs[k].name, "layers.3.blocks.1.attn.relative_position_bias_table"))
            ok = specs[k].shape[0] == 169;
    CHECK(ok, "the last stage's table at 160 is (169, 24) under torchvision's clamp");
}

/* bad stage configs: refused in one line that names the fix */
static void test_refusals(void) {
    const int depth[] = {2, 2}, dim[] = {8, 16}, heads[] = {2, 4};
    vit_config c;
    as_error err;
    tiny_config(&c, 32, 4, 2, depth, dim, heads, VIT_MAX_WINDOW + 1, VIT_CLAMP_TIMM, VIT_PAD_FIRST);
    CHECK(vit_config_validate(&c, &err) == AS_ERR_CONFIG && strstr(err.msg, "window") && !strchr(err.msg, '\n'),
          "window too large: %s", err.msg);
    tiny_config(&c, 32, 4, 2, depth, dim, heads, 4, VIT_CLAMP_TIMM, VIT_PAD_FIRST);
    c.attn[3].kind = VIT_ATTN_LMSA;
    c.attn[3].qk_dim = 4;
    CHECK(vit_config_validate(&c, &err) == AS_OK, "lmsa in a window runs: %s", err.msg);
    static const vit_attn_kind global_only[] = {VIT_ATTN_MAIT, VIT_ATTN_REFINER, VIT_ATTN_LESS};
    for (int k = 0; k < 3; k++) {
        tiny_config(&c, 32, 4, 2, depth, dim, heads, 4, VIT_CLAMP_TIMM, VIT_PAD_FIRST);
        c.attn[3].kind = global_only[k];
        const char *nm = vit_attn_name(global_only[k]);
        CHECK(vit_config_validate(&c, &err) == AS_ERR_CONFIG && strstr(err.msg, nm) &&
                  strstr(err.msg, "window") && strstr(err.msg, "lmsa, lsla"),
              "%s in a window: %s", nm, err.msg);
    }
    tiny_config(&c, 32, 4, 2, depth, dim, heads, 4, VIT_CLAMP_TIMM, VIT_PAD_FIRST);
    c.depth = 3;
    CHECK(vit_config_validate(&c, &err) == AS_ERR_CONFIG && strstr(err.msg, "depth"), "depth sum: %s", err.msg);
    tiny_config(&c, 32, 4, 2, depth, dim, heads, 4, VIT_CLAMP_TIMM, VIT_PAD_FIRST);
    c.class_token = 1;
    CHECK(vit_config_validate(&c, &err) == AS_ERR_CONFIG && strstr(err.msg, "class_token"), "class token: %s", err.msg);
    tiny_config(&c, 32, 4, 2, depth, dim, heads, 4, VIT_CLAMP_TIMM, VIT_PAD_FIRST);
    c.stage[1].num_heads = 3;
    CHECK(vit_config_validate(&c, &err) == AS_ERR_CONFIG && strstr(err.msg, "divisible"), "heads: %s", err.msg);
    c = *vit_arch_find("deit_tiny_patch16_224");
    CHECK(vit_config_validate(&c, &err) == AS_OK, "deit_tiny: %s", err.msg);
}

int main(void) {
    test_one_window();
    test_window_vs_global();
    test_window_mechs();
    test_lmsa_is_vanilla();
    test_merge();
    test_threads();
    test_param_counts();
    test_refusals();
    return check_finish("swin");
}
