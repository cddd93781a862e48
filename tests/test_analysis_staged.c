/* test_analysis_staged.c: hand-made staged traces (format 3) that pin the geometry of the
 * stage-aware metrics (docs/analysis.md, "Staged traces"), each with a known answer:
 *   1. one window over a whole grid is global attention: a stage-2 layer of tests/staged.h
 *      (4 x 4 tokens every 8 px, one 4 x 4 window) gives the single-grid metrics of a ViT whose
 *      4 x 4 patches of 8 px hold the same map (distance, entropy, ALS, diag);
 *   2. identity maps through two merges (14 -> 7 -> 4, the second padded): rollout is the
 *      merges' transfer alone, each merged token the mean of its children;
 *   3. a query on a shifted window's wrapped piece (stage 1: 7 x 7 padded to 8, shift 2: rows 0
 *      and 1 wrap below row 6 inside one window) that attends to a key across the seam: its
 *      distance is the grid distance (6 rows, 24 px), not the 2 rows the window shows, and the
 *      key is no R x R neighbour even for R = 5. */
#define _POSIX_C_SOURCE 200809L
#include <hdf5.h>

#include "../analysis/analysis.h"
#include "check.h"
#include "staged.h"

#define tmp check_tmp

static vit_config g_staged; /* the staged model of every fill below */

/* ---- results -------------------------------------------------------------------------------- */

static as_status analyse(const char *trace, const char *out, const char *metrics, int als_window,
                         int centre, as_error *err) {
    analysis_opts o;
    analysis_opts_default(&o);
    o.metrics = analysis_metric_mask(metrics, err);
    o.explicit_metrics = 1;
    o.quiet = 1;
    o.threads = 1;
    o.als_window = als_window;
    o.entropy_normalize = 1;
    o.choice[ANALYSIS_CH_DIAG_MAP] = 1; /* attn */
    o.choice[ANALYSIS_CH_DISTANCE] = centre;
    analysis_report rep;
    return analysis_run(trace, out, &o, &rep, err);
}

/* out[0..n) = the results dataset name ("analysis/distance/distance/mean"). */
static int result(const char *file, const char *name, double *out, size_t n) {
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return 0;
    hid_t d = H5Lexists(f, "analysis", H5P_DEFAULT) > 0 && H5Oexists_by_name(f, name, H5P_DEFAULT) > 0
              ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
    int ok = 0;
    if (d >= 0) {
        hid_t s = H5Dget_space(d);
        ok = (size_t)H5Sget_simple_extent_npoints(s) == n &&
             H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0;
        H5Sclose(s);
        H5Dclose(d);
    }
    H5Fclose(f);
    return ok;
}

/* ---- 1. one window = global ----------------------------------------------------------------- */

/* A ViT without prefix tokens whose 4 x 4 patches are 8 px: stage 2's grid and stride. */
static void flat_config(vit_config *c) {
    staged_config_flat(c, 4);
    c->img_size = 32, c->patch_size = 8;
}

/* Block 0 of the flat model holds head 0 of staged block 4's (one window) map. */
static void fill_flat(const vit_config *c, int l, long b, float *attn, float *scores, float *q,
                      float *k, float *tokens) {
    (void)c, (void)l, (void)q, (void)k, (void)tokens;
    const size_t n = staged_floats(&g_staged, 4, TRACE_Q_ATTN);
    float *a = malloc(n * sizeof *a), *s = malloc(n * sizeof *s);
    if (!a || !s) abort();
    staged_fill(&g_staged, 4, b, a, s, NULL, NULL, NULL);
    if (attn) memcpy(attn, a, 256 * sizeof *a); /* head 0, window 0: 16 x 16 */
    if (scores) memcpy(scores, s, 256 * sizeof *s);
    free(a);
    free(s);
}

static void test_one_window(void) {
    as_error err = {0};
    vit_geom g;
    vit_block_geom(&g_staged, 4, &g);
    CHECK(g.problems == 1 && g.Tq == 16 && g.gh == 4 && g.stride_px == 8.0f, "stage 2 of staged.h is one "
          "4 x 4 window every 8 px (%d problems, %d rows, grid %d, stride %g)", g.problems, g.Tq, g.gh, g.stride_px);
    const char *st = tmp("one.h5"), *fl = tmp("flat.h5"), *rs = tmp("one.res.h5"), *rf = tmp("flat.res.h5");
    vit_config flat;
    flat_config(&flat);
    CHECK(staged_write(st, &g_staged, "all", "all", "all", "f32", 3, &err) == AS_OK, "%s", err.msg);
    CHECK(staged_write_fill(fl, &flat, "all", "all", "all", "f32", 3, fill_flat, &err) == AS_OK, "%s", err.msg);
    for (int centre = 0; centre < 2; centre++) {
        CHECK(analyse(st, rs, "distance,entropy,als,diag", 0, centre, &err) == AS_OK, "staged: %s", err.msg);
        CHECK(analyse(fl, rf, "distance,entropy,als,diag", 0, centre, &err) == AS_OK, "flat: %s", err.msg);
        const char *names[] = {"analysis/distance/distance/mean", "analysis/entropy/entropy/mean",
                               "analysis/als/score/mean", "analysis/diag/symmetry/mean",
                               "analysis/diag/diagonality/mean", "analysis/distance/distance/per_image"};
        for (int k = 0; k < 5; k++) {
            double s[6 * 4] = {0}, f[1] = {0};
            int ok = result(rs, names[k], s, 24) && result(rf, names[k], f, 1);
            double got = s[4 * 4 + 0]; /* layer 4, head 0 */
            CHECK(ok && fabs(got - f[0]) <= 1e-12 * fmax(1, fabs(f[0])), "%s (%s): one window %.15g, "
                  "global %.15g", names[k], centre ? "centre" : "pixel", ok ? got : NAN, ok ? f[0] : NAN);
        }
    }
}

/* ---- 2. identity maps through merges --------------------------------------------------------- */

static void fill_identity(const vit_config *c, int l, long b, float *attn, float *scores, float *q,
                          float *k, float *tokens) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    staged_fill(c, l, b, NULL, NULL, q, k, tokens);
    for (int h = 0; h < g.H; h++)
        for (int w = 0; w < g.problems; w++)
            for (int i = 0; i < g.Tq; i++)
                for (int j = 0; j < g.Tk; j++) {
                    size_t e = (((size_t)h * g.problems + w) * g.Tq + i) * g.Tk + j;
                    if (attn) attn[e] = i == j;
                    if (scores) scores[e] = i == j ? 0.0f : -100.0f;
                }
}

static void test_identity_rollout(void) {
    as_error err = {0};
    const char *tr = tmp("id.h5"), *res = tmp("id.res.h5");
    CHECK(staged_write_fill(tr, &g_staged, "all", "all", "all", "f32", 2, fill_identity, &err) == AS_OK, "%s", err.msg);
    CHECK(analyse(tr, res, "rollout", 0, 0, &err) == AS_OK, "%s", err.msg);
    double map[6 * 196] = {0};
    CHECK(result(res, "analysis/rollout/map/mean", map, 6 * 196), "no rollout map");
    double worst = 0;
    for (int l = 0; l < 6; l++)
        for (int t = 0; t < 196; t++) {
            int y = t / 14, x = t % 14, want_n;
            /* e = the mean of layer l's tokens; back through each merge a cell's weight is shared
             * equally by its children: 4 from 7 x 7 to 14 x 14 (even), and from 4 x 4 to 7 x 7
             * 2 per axis except the last row/column (7 is odd: one child, the other is padding) */
            double want;
            if (l < 2) want = 1.0 / 196;
            else if (l < 4) want = 1.0 / 49 / 4;
            else {
                int py = y / 2, px = x / 2;
                want_n = (py / 2 == 3 ? 1 : 2) * (px / 2 == 3 ? 1 : 2);
                want = 1.0 / 16 / want_n / 4;
            }
            worst = fmax(worst, fabs(map[l * 196 + t] - want));
        }
    CHECK(worst < 1e-15, "identity maps: rollout differs from the merges' transfer by %.3g", worst);
}

/* ---- 3. a query on a shifted window's wrapped piece ----------------------------------------- */

static int g_w, g_qi, g_kj; /* layer 3: the window, the query slot and the key slot */

static void find_wrapped(void) {
    vit_geom g;
    vit_block_geom(&g_staged, 3, &g);
    int *tok = malloc((size_t)g.problems * g.Tq * sizeof *tok);
    if (!tok) abort();
    vit_window_tokens(&g_staged, &g, tok);
    g_w = -1;
    for (int w = 0; w < g.problems && g_w < 0; w++)
        for (int i = 0; i < g.Tq && g_w < 0; i++)
            for (int j = 0; j < g.Tq && g_w < 0; j++) {
                int a = tok[w * g.Tq + i], b = tok[w * g.Tq + j];
                if (a >= 0 && b >= 0 && a % g.gw == b % g.gw && b / g.gw - a / g.gw >= g.M)
                    g_w = w, g_qi = i, g_kj = j; /* a in the wrapped piece (top rows), b far below */
            }
    free(tok);
}

static void fill_wrapped(const vit_config *c, int l, long b, float *attn, float *scores, float *q,
                         float *k, float *tokens) {
    fill_identity(c, l, b, attn, scores, q, k, tokens);
    vit_geom g;
    vit_block_geom(c, l, &g);
    if (l != 3 || !attn) return;
    for (int h = 0; h < g.H; h++) {
        float *row = attn + (((size_t)h * g.problems + g_w) * g.Tq + g_qi) * g.Tk;
        for (int j = 0; j < g.Tk; j++) row[j] = j == g_kj;
    }
}

static void test_wrapped(void) {
    as_error err = {0};
    find_wrapped();
    CHECK(g_w >= 0, "stage 1's shifted layer has no window holding both sides of the wrap");
    if (g_w < 0) return;
    vit_geom g;
    vit_block_geom(&g_staged, 3, &g);
    int *tok = malloc((size_t)g.problems * g.Tq * sizeof *tok);
    if (!tok) abort();
    vit_window_tokens(&g_staged, &g, tok);
    int a = tok[g_w * g.Tq + g_qi], b = tok[g_w * g.Tq + g_kj];
    free(tok);
    CHECK(a / g.gw <= 1 && b / g.gw == 6 && g_kj / g.M < g_qi / g.M, "the query (%d, %d) sits in the "
          "wrapped piece below the key (%d, %d) inside the window", a / g.gw, a % g.gw, b / g.gw, b % g.gw);
    const char *tr = tmp("wrap.h5"), *res = tmp("wrap.res.h5");
    CHECK(staged_write_fill(tr, &g_staged, "all", "all", "all", "f32", 2, fill_wrapped, &err) == AS_OK, "%s", err.msg);
    double want = 4.0 * abs(b / g.gw - a / g.gw) / 49; /* 24 px across the seam, once in 49 queries */
    double d[6 * 4] = {0}, s[6 * 4] = {0};
    for (int R = 3; R <= 5; R += 2) {
        CHECK(analyse(tr, res, "distance,als", R, 1, &err) == AS_OK, "%s", err.msg);
        CHECK(result(res, "analysis/distance/distance/mean", d, 24) && result(res, "analysis/als/score/mean", s, 24), "results");
        for (int h = 0; h < 2; h++) {
            CHECK(fabs(d[3 * 4 + h] - want) < 1e-12, "head %d: distance %.15g, want %.15g (the grid's, "
                  "not the window's %.15g)", h, d[3 * 4 + h], want, want / 3);
            CHECK(fabs(s[3 * 4 + h] - 48.0 / 49) < 1e-12, "R %d, head %d: ALS %.15g, want 48/49: the key "
                  "across the seam is no neighbour", R, h, s[3 * 4 + h]);
            CHECK(d[2 * 4 + h] == 0 && s[2 * 4 + h] == 1, "layer 2 (identity): distance %g, ALS %g", d[2 * 4 + h], s[2 * 4 + h]);
        }
        CHECK(isnan(d[3 * 4 + 2]) && isnan(d[3 * 4 + 3]), "stage 1 has 2 heads: NaN beyond them");
    }
}

int main(void) {
    check_tmp_init("analysis_staged");
    staged_config(&g_staged, VIT_PAD_FIRST);
    test_one_window();
    test_identity_rollout();
    test_wrapped();
    check_tmp_remove();
    return check_finish("analysis_staged");
}
