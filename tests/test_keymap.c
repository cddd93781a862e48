/* test_keymap.c: plot/keymap.c, one query's row of a staged layer placed on the image (what
 * `plot attention` and `plot grid` draw for Swin, PVT v2 and CaiT traces), against the closed
 * forms of tests/staged.h and window arithmetic written here from Swin's definition (pad the
 * grid to a multiple of M, roll it by -shift, cut M x M windows; the shift mask's regions),
 * not from the trace's window tables. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../plot/keymap.h"
#include "check.h"
#include "staged.h"

/* The window of token (y, x) after padding to p and rolling by -shift: its window row and column
 * and its place in the rolled grid. */
static void window_of(int y, int x, int M, int ph, int pw, int shift, int *wy, int *wx, int *ys, int *xs) {
    *ys = (y - shift + ph) % ph;
    *xs = (x - shift + pw) % pw;
    *wy = *ys / M;
    *wx = *xs / M;
}

/* Swin's shift-mask region of a rolled coordinate: [0, p - M), [p - M, p - shift), [p - shift, p). */
static int region(int v, int p, int M, int shift) { return !shift ? 0 : v < p - M ? 0 : v < p - shift ? 1 : 2; }

/* Checks layer l's rows for every query token of image `image`, head 0; returns how many
 * queries' windows wrap into 4 pieces. */
static long check_layer(const fig_source *src, const vit_config *c, int li, long image) {
    const trace_layer_geom *g = &src->tr.geom[li];
    const int M = g->M, ph = g->ph, pw = g->pw, sh = g->shift, gw = g->gw, gh = g->gh, l = g->layer;
    long bad_out = 0, bad_v = 0, bad_piece = 0, bad_max = 0, wrapped4 = 0, rows = 0;
    double worst = 0;
    for (int t = 0; t < gh * gw; t++) {
        keymap_row k;
        as_error err = {0};
        if (keymap_row_read(src, li, image, 0, t, &k, &err) != AS_OK) {
            CHECK(0, "layer %d token %d: %s", l, t, err.msg);
            return 0;
        }
        int qwy, qwx, qys, qxs;
        window_of(t / gw, t % gw, M, ph, pw, sh, &qwy, &qwx, &qys, &qxs);
        const int qreg = region(qys, ph, M, sh) * 3 + region(qxs, pw, M, sh);
        /* the expected row: softmax over the window's M^2 slots (pads included) of logit + mask */
        double e[1024], z = 0;
        int slot_tok[1024], n = 0;
        for (int ys = qwy * M; ys < qwy * M + M; ys++)
            for (int xs = qwx * M; xs < qwx * M + M; xs++) {
                const int y = (ys + sh) % ph, x = (xs + sh) % pw; /* back to the padded grid */
                const int u = y < gh && x < gw ? y * gw + x : -1;
                const double mask = region(ys, ph, M, sh) * 3 + region(xs, pw, M, sh) != qreg ? -100 : 0;
                e[n] = exp(staged_logit(l, image, 0, gw, t, u) + mask);
                slot_tok[n++] = u;
                z += e[n - 1];
            }
        double want[4096];
        for (int u = 0; u < gh * gw; u++) want[u] = 0;
        for (int i = 0; i < n; i++)
            if (slot_tok[i] >= 0) want[slot_tok[i]] = e[i] / z;
        int in_any = 0, best = -1, wbest = -1;
        for (int u = 0; u < gh * gw; u++) {
            int wy, wx, ys, xs;
            window_of(u / gw, u % gw, M, ph, pw, sh, &wy, &wx, &ys, &xs);
            const int inside = wy == qwy && wx == qwx;
            const keymap_cell *cl = &k.cell[u];
            bad_out += cl->outside == inside || (!inside && cl->v != 0);
            const double d = fabs(cl->v - want[u]);
            worst = d > worst ? d : worst;
            bad_v += d > 1e-6;
            /* the window's pieces hold exactly the window's cells */
            const double cx = (cl->x0 + cl->x1) / 2, cy = (cl->y0 + cl->y1) / 2;
            int covered = 0;
            for (int p = 0; p < k.n_pieces; p++)
                covered |= cx > k.piece[p][0] && cx < k.piece[p][2] && cy > k.piece[p][1] && cy < k.piece[p][3];
            bad_piece += covered != inside;
            in_any += inside;
            if (inside && (best < 0 || cl->v > k.cell[best].v)) best = u;
            if (wbest < 0 || want[u] > want[wbest]) wbest = u;
        }
        bad_max += best != wbest;
        wrapped4 += k.n_pieces == 4;
        CHECK(in_any > 0 && k.window >= 0 && k.token == t, "layer %d token %d: in a window", l, t);
        rows++;
        keymap_row_free(&k);
    }
    CHECK(bad_out == 0, "layer %d: %ld cells with the wrong inside/outside state (outside must be "
          "exactly 0)", l, bad_out);
    CHECK(bad_v == 0, "layer %d: %ld cells off the closed form (worst %g)", l, bad_v, worst);
    CHECK(bad_piece == 0, "layer %d: %ld cells where the window's outline and its cells disagree", l, bad_piece);
    CHECK(bad_max == 0, "layer %d: %ld rows whose brightest cell is not the map's argmax", l, bad_max);
    if (!sh) CHECK(wrapped4 == 0, "layer %d: an unshifted window is one piece", l);
    CHECK(rows == gh * gw, "layer %d: %ld rows", l, rows);
    return wrapped4;
}

/* Records fixture `name` over tests/fixtures/img.png into a trace and opens it. */
static int record_fixture(const char *name, fig_source *src) {
    const char *fxd = getenv("FIXTURES") ? getenv("FIXTURES") : "tests/fixtures";
    char path[512];
    model m;
    dataset ds;
    memset(&ds, 0, sizeof ds);
    as_error err = {0};
    snprintf(path, sizeof path, "%s/%s", fxd, name);
    if (model_load(&m, path, NULL, 0, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return 0;
    }
    snprintf(path, sizeof path, "%s/img.png", fxd);
    int ok = dataset_open(&ds, path, &err) == AS_OK;
    CHECK(ok, "%s", err.msg);
    char out[64];
    snprintf(out, sizeof out, "%s.h5", name);
    record_opts o;
    memset(&o, 0, sizeof o);
    o.out = check_tmp(out);
    o.mode = TRACE_FORCE;
    o.spec.batch = 1;
    o.spec.command_line = "test_keymap";
    o.quiet = 1;
    record_result res;
    ok = ok && record_parse_selection(&o, &m.cfg, "attn", "all", "all", "f32", "none", "all", &err) == 0 &&
         record_run(&m, &ds, &o, &res, &err) == AS_OK && fig_source_open(src, o.out, NULL, &err) == AS_OK;
    CHECK(ok, "%s: %s", name, err.msg);
    if (ds.count) dataset_free(&ds);
    model_free(&m);
    return ok;
}

/* PVT v2's reduced keys: kgh x kgw cells, each over the R x R tokens it reduces (from the
 * layer's grid arithmetic: tokens [i R, i R + R) of each axis), with the row's weights. */
static void test_sra(void) {
    fig_source src;
    if (!record_fixture("pvt_tiny", &src)) return;
    long bad_rect = 0, bad_v = 0, checked = 0;
    for (int li = 0; li < src.tr.n_layers; li++) {
        const trace_layer_geom *g = &src.tr.geom[li];
        if (g->scope != VIT_SCOPE_SRA || g->sr_pool) continue;
        const int R = g->sr_ratio, S = src.tr.cfg.img_size, t = (g->gh / 2) * g->gw + g->gw / 2;
        float *A = malloc((size_t)g->Tq * g->Tk * sizeof *A);
        as_error err = {0};
        keymap_row k;
        if (!A || trace_read_head(&src.tr, TRACE_Q_ATTN, 0, g->layer, 0, A, &err) != AS_OK ||
            keymap_row_read(&src, li, 0, 0, t, &k, &err) != AS_OK) {
            CHECK(0, "%s", err.msg);
            free(A);
            continue;
        }
        CHECK(k.n == g->kgh * g->kgw && k.n_keys == g->Tk && k.n_pieces == 0, "layer %d: %d cells for %d x %d keys",
              g->layer, k.n, g->kgh, g->kgw);
        for (int i = 0; i < k.n; i++, checked++) {
            const int ky = i / g->kgw, kx = i % g->kgw;
            const double y0 = fmax(0, g->offset_px + g->stride_px * (ky * R - 0.5)),
                         y1 = fmin(S, g->offset_px + g->stride_px * (ky * R + R - 0.5)),
                         x0 = fmax(0, g->offset_px + g->stride_px * (kx * R - 0.5)),
                         x1 = fmin(S, g->offset_px + g->stride_px * (kx * R + R - 0.5));
            const keymap_cell *c = &k.cell[i];
            bad_rect += fabs(c->y0 - y0) > 1e-9 || fabs(c->y1 - y1) > 1e-9 || fabs(c->x0 - x0) > 1e-9 ||
                        fabs(c->x1 - x1) > 1e-9;
            bad_v += c->v != A[(size_t)t * g->Tk + i] || c->outside;
        }
        keymap_row_free(&k);
        free(A);
    }
    CHECK(checked > 0 && bad_rect == 0 && bad_v == 0, "reduced keys: %ld of %ld cells off their tokens' "
          "pixels, %ld off the map's row", bad_rect, checked, bad_v);
    fig_source_close(&src);
}

/* CaiT's class-attention layers: the class row over [cls; patches], the class key apart, the
 * patches over the grid; the query is no cell. */
static void test_class_rows(void) {
    fig_source src;
    if (!record_fixture("cait_tiny", &src)) return;
    long rows = 0, bad = 0;
    for (int li = 0; li < src.tr.n_layers; li++) {
        const trace_layer_geom *g = &src.tr.geom[li];
        if (g->scope != VIT_SCOPE_CLASS) continue;
        float *A = malloc((size_t)g->Tk * sizeof *A);
        as_error err = {0};
        keymap_row k;
        if (!A || trace_read_head(&src.tr, TRACE_Q_ATTN, 0, g->layer, 1, A, &err) != AS_OK ||
            keymap_row_read(&src, li, 0, 1, 12345, &k, &err) != AS_OK) {
            CHECK(0, "%s", err.msg);
            free(A);
            continue;
        }
        bad += k.token != -1 || k.prefix != 1 || k.n != g->gh * g->gw || k.n_keys != 1 + g->gh * g->gw ||
               k.keys[0] != A[0];
        for (int i = 0; i < k.n && i < g->Tk - 1; i++) bad += k.cell[i].v != A[1 + i];
        rows++;
        keymap_row_free(&k);
        free(A);
    }
    CHECK(rows > 0 && bad == 0, "class rows: %ld wrong in %ld", bad, rows);
    fig_source_close(&src);
}

int main(void) {
    check_tmp_init("keymap");
    vit_config c;
    staged_config(&c, VIT_PAD_FIRST);
    as_error err = {0};
    const char *path = check_tmp("s.h5");
    CHECK(staged_write(path, &c, "all", "all", "all", "f32", 2, &err) == AS_OK, "%s", err.msg);
    fig_source src;
    if (fig_source_open(&src, path, NULL, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return check_finish("keymap");
    }
    /* stage 1 (7 -> 8, shift 2) has windows whose real tokens wrap both ways: rows {6, 0, 1};
     * stage 0's wrapped part (14 -> 16) is padding only */
    long wrapped = 0;
    for (int li = 0; li < src.tr.n_layers; li++) wrapped += check_layer(&src, &c, li, 1);
    CHECK(wrapped > 0, "some shifted window wraps into 4 pieces on the image");
    /* cells tile the image: the query's own cell holds its pixel centre */
    keymap_row k;
    CHECK(keymap_row_read(&src, 1, 0, 0, 5 * 14 + 9, &k, &err) == AS_OK, "%s", err.msg);
    CHECK(fabs((k.q[0] + k.q[2]) / 2 - (9 * 2 + 1)) < 1e-9 && fabs((k.q[1] + k.q[3]) / 2 - (5 * 2 + 1)) < 1e-9,
          "query cell (5, 9) at pixels x %g..%g, y %g..%g", k.q[0], k.q[2], k.q[1], k.q[3]);
    keymap_row_free(&k);
    /* a head the layer does not have, a token off the grid: refused in one line */
    CHECK(keymap_row_read(&src, 0, 0, 0, 14 * 14, &k, &err) == AS_ERR_ARG && strstr(err.msg, "grid"),
          "off-grid token: %s", err.msg);
    CHECK(keymap_row_read(&src, 0, 0, 3, 0, &k, &err) != AS_OK && strstr(err.msg, "head"),
          "layer 0 has 1 head, not 4: %s", err.msg);
    fig_source_close(&src);
    test_sra();
    test_class_rows();
    check_tmp_remove();
    return check_finish("keymap");
}
