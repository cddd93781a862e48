/* test_view.c: the viewer drawn offscreen from scripted events: what lies under the overlay's
 * brightest cell, the status line, colour-bar ranges, every mode and its clicks, the maps of
 * every mechanism, rollout against the analysis, lazy reads, export, a trace that grows while
 * it is viewed, and the real SDL window (dummy driver, and Xvfb when installed) with key and
 * mouse events and a screenshot.
 *     test_view --png-stats FILE.png   prints "W H distinct-colours" (for test_cli.sh) */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../analysis/analysis.h"
#include "../cli/cli.h"
#include "../core/rng.h"
#include "../viewer/view.h"
#include "analysed.h"
#include "check.h"

#define W 1200
#define H 760
#include "viewtest.h"

static cairo_surface_t *surface(void) { return cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H); }

static double luma(const double c[3]) { return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]; }

/* An event at the centre of cell (r, c) of panel p, in the view's logical points. */
static int at_cell(view *v, view_event_type type, int p, int r, int c) {
    const view_panel *pn = &v->panels[p];
    view_event e = {.type = type, .x = (pn->x + (c + 0.5) * pn->w / pn->cols) * v->zoom,
                    .y = (pn->y + (r + 0.5) * pn->h / pn->rows) * v->zoom};
    return view_handle(v, &e);
}

static int press(view *v, int key) {
    view_event e = {.type = VIEW_EV_KEY, .key = key};
    return view_handle(v, &e);
}

/* Opens a view; a failure is a failed check. */
static int open_view(view *v, const char *path) {
    as_error err = {0};
    int ok = view_open(v, path, &err) == AS_OK;
    CHECK(ok, "open %s: %s", path, err.msg);
    return ok;
}

static void test_query_view(const char *trace) {
    view v;
    as_error err = {0};
    if (!open_view(&v, trace)) return;
    const trace_reader *r = &v.src.tr;
    int g = vit_grid(&r->cfg), p = r->num_prefix, T = r->num_tokens, P = g * g;
    int layer = r->layers[r->n_layers - 2], head = r->heads[0], query = p + 2 * g + 1;
    CHECK(view_select(&v, 1, layer, head, query, &err) == AS_OK, "select: %s", err.msg);
    v.opacity = 1; /* pure colour-map colours: the brightest cell is the largest value */
    cairo_surface_t *s = surface();
    draw(&v, s);
    CHECK(v.n_panels == 2 && v.panels[0].kind == VIEW_PANEL_IMAGE && v.panels[1].kind == VIEW_PANEL_MAP,
          "query view: image + map panels (%d)", v.n_panels);
    CHECK(v.reads == 1, "one map read for the first frame, not %ld", v.reads);
    float *A = malloc((size_t)T * T * sizeof *A);
    CHECK(trace_read_head(r, TRACE_Q_ATTN, 1, layer, head, A, &err) == AS_OK, "%s", err.msg);
    const float *row = A + (size_t)query * T + p;
    int best = 0;
    double lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < P; j++) {
        if (row[j] > row[best]) best = j;
        lo = fmin(lo, row[j]);
        hi = fmax(hi, row[j]);
    }
    /* the overlay's brightest cell is the map's argmax for that query */
    const view_panel *ip = &v.panels[0];
    int bright = -1;
    double bl = -1, col[3];
    for (int j = 0; j < P; j++) {
        pixel(&v, s, ip->x + (j % g + 0.5) * ip->w / g, ip->y + (j / g + 0.5) * ip->h / g, col);
        if (luma(col) > bl) {
            bl = luma(col);
            bright = j;
        }
    }
    CHECK(bright == best, "brightest overlay cell %d, map argmax %d", bright, best);
    pixel(&v, s, ip->x + (best % g + 0.5) * ip->w / g, ip->y + (best / g + 0.5) * ip->h / g, col);
    plot_color top = plot_cmap_color(v.cmap, 1);
    CHECK(fabs(col[0] - top.r) < 0.02 && fabs(col[1] - top.g) < 0.02 && fabs(col[2] - top.b) < 0.02,
          "the argmax cell has the colour map's top colour");
    int same = 1;
    for (int j = 0; j < P; j++) same &= ip->values[j] == (double)row[j];
    CHECK(same, "overlay values are the query's row over the patches");
    /* colour bars: from 0 to the row's peak (or 1/T when the patches get less), and the whole
     * map's; 'z': from the minimum */
    double mlo = INFINITY, mhi = -INFINITY;
    for (int i = 0; i < T * T; i++) {
        mlo = fmin(mlo, A[i]);
        mhi = fmax(mhi, A[i]);
    }
    CHECK(v.n_cbars == 2 && v.cbars[0].lo == 0 && fabs(v.cbars[0].hi - fmax(hi, 1.0 / T)) < 1e-12,
          "overlay colour bar [%g, %g], row peak %g, 1/T %g", v.cbars[0].lo, v.cbars[0].hi, hi, 1.0 / T);
    CHECK(v.cbars[1].lo == 0 && fabs(v.cbars[1].hi - mhi) < 1e-12, "map colour bar [%g, %g]",
          v.cbars[1].lo, v.cbars[1].hi);
    CHECK(ip->scale.probability && fabs(ip->scale.ratio - hi * T) < 1e-9, "peak over uniform %g, want %g",
          ip->scale.ratio, hi * T);
    press(&v, 'z');
    draw(&v, s);
    CHECK(v.n_cbars == 2 && fabs(v.cbars[0].lo - lo) < 1e-12 && fabs(v.cbars[0].hi - hi) < 1e-12,
          "min-max overlay colour bar [%g, %g], row range [%g, %g]", v.cbars[0].lo, v.cbars[0].hi, lo, hi);
    CHECK(fabs(v.cbars[1].lo - mlo) < 1e-12 && fabs(v.cbars[1].hi - mhi) < 1e-12, "min-max map colour bar [%g, %g]",
          v.cbars[1].lo, v.cbars[1].hi);
    /* an image without a label says so */
    draw(&v, s);
    if (v.label < 0)
        CHECK(strstr(v.status, "unlabelled") && !strstr(v.status, "label -1"), "unlabelled: %s", v.status);
    /* the status names the map shown, also after Tab */
    CHECK(strstr(v.status, "attn head") != NULL, "status names the map: %s", v.status);
    long before_tab = v.reads; /* the other maps Tab shows (scores, in traces that hold them) */
    if (press(&v, VIEW_KEY_TAB) && v.ds != 0) {
        draw(&v, s);
        char want[64];
        snprintf(want, sizeof want, "%s %s", view_map_name(v.ds), v.ds < 3 ? "head" : "map");
        CHECK(strstr(v.status, want) != NULL, "after Tab the status names %s: %s", want, v.status);
        while (v.ds != 0) press(&v, VIEW_KEY_TAB);
    }
    const long tab_reads = v.reads - before_tab;
    /* the status line */
    char want[128];
    snprintf(want, sizeof want, "layer %d", layer);
    CHECK(strstr(v.status, "image 1/") && strstr(v.status, want), "status: %s", v.status);
    snprintf(want, sizeof want, "head %d", head);
    CHECK(strstr(v.status, want) && strstr(v.status, "query patch (2, 1) (fixed)"), "status: %s", v.status);
    /* the value under the cursor */
    CHECK(at_cell(&v, VIEW_EV_MOTION, 0, 3, 2) & VIEW_REDRAW, "hover redraws");
    CHECK(v.query == query, "a fixed query stays under the hover");
    draw(&v, s);
    snprintf(want, sizeof want, "attn at patch (3, 2): %.4g", row[3 * g + 2]);
    CHECK(strstr(v.status, want) != NULL, "status has the hovered value: %s (want %s)", v.status, want);
    at_cell(&v, VIEW_EV_MOTION, 1, 5, 7);
    draw(&v, s);
    snprintf(want, sizeof want, "attn[5, 7]: %.4g", A[5 * T + 7]);
    CHECK(strstr(v.status, want) != NULL, "status over the map: %s (want %s)", v.status, want);
    CHECK(v.reads - tab_reads == 1, "redraws read nothing again (%ld reads)", v.reads - tab_reads);
    /* global normalisation: over every head of the layer for this query */
    press(&v, 'o');
    draw(&v, s);
    double glo = INFINITY, ghi = -INFINITY;
    for (int k = 0; k < r->n_heads; k++) {
        trace_read_head(r, TRACE_Q_ATTN, 1, layer, r->heads[k], A, &err);
        for (int j = 0; j < P; j++) {
            glo = fmin(glo, A[(size_t)query * T + p + j]);
            ghi = fmax(ghi, A[(size_t)query * T + p + j]);
        }
    }
    CHECK(fabs(v.cbars[0].lo - glo) < 1e-12 && fabs(v.cbars[0].hi - ghi) < 1e-12,
          "global colour bar [%g, %g], all heads [%g, %g]", v.cbars[0].lo, v.cbars[0].hi, glo, ghi);
    CHECK(v.reads - tab_reads == r->n_heads, "global range reads each head once (%ld)", v.reads - tab_reads);
    /* log scale: four decades below the maximum */
    press(&v, 'o');
    press(&v, 'l');
    draw(&v, s);
    CHECK(fabs(v.cbars[0].hi - log10(hi)) < 1e-12 && fabs(v.cbars[0].lo - log10(fmax(lo, hi * 1e-4))) < 1e-12 &&
          strstr(v.cbars[0].label, "log10"), "log colour bar [%g, %g] %s", v.cbars[0].lo, v.cbars[0].hi, v.cbars[0].label);
    press(&v, 'l');
    /* navigation */
    int li = v.li, hi0 = v.hi;
    press(&v, VIEW_KEY_RIGHT);
    CHECK(v.hi == hi0 + 1, "Right: next head");
    press(&v, VIEW_KEY_LEFT);
    press(&v, VIEW_KEY_DOWN);
    CHECK(v.li == li + 1 && v.hi == hi0, "Down: next layer");
    view_event wh = {.type = VIEW_EV_WHEEL, .wheel = 1};
    view_handle(&v, &wh);
    CHECK(v.li == li, "wheel up: previous layer");
    wh.mods = VIEW_MOD_SHIFT;
    view_handle(&v, &wh);
    CHECK(v.hi == 0, "shift+wheel: previous head, and no further");
    wh.mods = VIEW_MOD_CTRL;
    view_handle(&v, &wh);
    CHECK(v.image == 0, "ctrl+wheel up: previous image");
    press(&v, VIEW_KEY_PAGEDOWN);
    press(&v, VIEW_KEY_PAGEDOWN);
    CHECK(v.image == 2, "PageDown: next image (%ld)", v.image);
    press(&v, VIEW_KEY_END);
    CHECK(v.image == v.n_images - 1, "End: last image");
    for (int k = 0; k < 40; k++) press(&v, VIEW_KEY_UP);
    CHECK(v.li == 0, "layers stop at the first");
    press(&v, '?');
    CHECK(v.help, "? shows the help");
    press(&v, VIEW_KEY_ESCAPE);
    CHECK(!v.help, "Esc closes it");
    CHECK(press(&v, 'q') & VIEW_QUIT, "q quits");
    free(A);
    cairo_surface_destroy(s);
    view_close(&v);
}

/* Hovering moves the query; a click fixes it, a second click frees it. */
static void test_hover_click(const char *trace) {
    view v;
    if (!open_view(&v, trace)) return;
    int g = vit_grid(&v.src.tr.cfg), p = v.src.tr.num_prefix;
    cairo_surface_t *s = surface();
    draw(&v, s);
    at_cell(&v, VIEW_EV_MOTION, 0, 1, 2);
    CHECK(v.query == p + g + 2 && !v.query_locked, "hover makes patch (1, 2) the query (%d)", v.query);
    draw(&v, s);
    at_cell(&v, VIEW_EV_CLICK, 0, 3, 3);
    CHECK(v.query == p + 3 * g + 3 && v.query_locked, "click fixes (3, 3)");
    draw(&v, s);
    at_cell(&v, VIEW_EV_MOTION, 0, 0, 0);
    CHECK(v.query == p + 3 * g + 3, "hover leaves a fixed query");
    at_cell(&v, VIEW_EV_CLICK, 0, 3, 3);
    CHECK(!v.query_locked, "a second click frees it");
    if (p > 0) {
        press(&v, 'c');
        CHECK(v.row == VIEW_ROW_CLASS && v.query == 0, "c: the class token's row");
        draw(&v, s);
        at_cell(&v, VIEW_EV_MOTION, 0, 1, 1);
        CHECK(v.query == 0, "hover keeps the class token");
        press(&v, 'c');
    }
    /* clicking a map row makes that token the query */
    draw(&v, s);
    at_cell(&v, VIEW_EV_CLICK, 1, 4, 0);
    CHECK(v.query == 4 && v.query_locked, "clicking map row 4 (query %d)", v.query);
    cairo_surface_destroy(s);
    view_close(&v);
}

/* Head grid, depth strip, similarity -> pair, ALS -> head, and their plot commands. */
static void test_modes(const char *trace) {
    view v;
    as_error err = {0};
    if (!open_view(&v, trace)) return;
    const trace_reader *r = &v.src.tr;
    cairo_surface_t *s = surface();
    char cmd[4096];
    press(&v, 'g');
    draw(&v, s);
    CHECK(v.mode == VIEW_MODE_GRID && v.n_panels == r->n_heads, "grid: %d panels for %d heads", v.n_panels, r->n_heads);
    /* per-map scales: every panel carries its own colour bar (the first 8 are recorded) */
    CHECK(v.n_cbars == (r->n_heads < 8 ? r->n_heads : 8) && v.cbars[0].lo == v.panels[0].lo &&
          v.cbars[0].hi == v.panels[0].hi, "grid: %d colour bars for %d per-map panels", v.n_cbars, v.n_panels);
    CHECK(strstr(v.status, "grid view") != NULL, "grid status names the mode: %s", v.status);
    view_plot_command(&v, "x", cmd, sizeof cmd);
    CHECK(strstr(cmd, "attnscope plot grid") != NULL, "grid command: %s", cmd);
    at_cell(&v, VIEW_EV_CLICK, 2, 1, 1);
    CHECK(v.mode == VIEW_MODE_QUERY && view_head(&v) == r->heads[2], "clicking head 2 opens it");
    press(&v, 'd');
    draw(&v, s);
    CHECK(v.mode == VIEW_MODE_DEPTH && v.n_panels == r->n_layers, "depth strip: %d panels", v.n_panels);
    CHECK(v.n_cbars >= 1, "depth strip: %d colour bars", v.n_cbars);
    for (int i = 0; i < v.n_panels; i++)
        CHECK(v.panels[i].layer == r->layers[i] && v.panels[i].head == view_head(&v), "depth panel %d", i);
    at_cell(&v, VIEW_EV_CLICK, 3, 0, 0);
    CHECK(v.mode == VIEW_MODE_QUERY && v.li == 3, "clicking layer 3 opens it");
    /* global normalisation in the grid: one shared colour bar */
    press(&v, 'o');
    press(&v, 'g');
    draw(&v, s);
    CHECK(v.n_cbars == 1 && v.panels[0].lo == v.panels[1].lo && v.panels[0].hi == v.panels[r->n_heads - 1].hi,
          "global grid: one range");
    press(&v, 'o');
    press(&v, VIEW_KEY_ESCAPE);
    /* similarity: a click opens the pair of layers */
    CHECK(v.sim && v.als, "the analysed trace has similarity and ALS results");
    press(&v, 's');
    draw(&v, s);
    CHECK(v.mode == VIEW_MODE_SIMILARITY && v.n_panels == 1 && v.panels[0].rows == r->n_layers, "similarity panel");
    int L = r->n_layers;
    CHECK(fabs(v.panels[0].values[2 * L + 2] - 1) < 1e-9, "similarity diagonal is 1");
    view_plot_command(&v, "x", cmd, sizeof cmd);
    CHECK(strstr(cmd, "plot similarity") && strstr(cmd, "--definition row"), "similarity command: %s", cmd);
    press(&v, VIEW_KEY_TAB);
    view_plot_command(&v, "x", cmd, sizeof cmd);
    CHECK(strstr(cmd, "--definition map") != NULL, "Tab: next definition: %s", cmd);
    at_cell(&v, VIEW_EV_CLICK, 0, 1, 4);
    CHECK(v.mode == VIEW_MODE_PAIR && v.pair[0] == 1 && v.pair[1] == 4, "click (1, 4): pair view");
    draw(&v, s);
    CHECK(v.n_panels == 4 && v.panels[0].layer == r->layers[1] && v.panels[2].layer == r->layers[4],
          "pair: layers %d and %d side by side", v.panels[0].layer, v.panels[2].layer);
    press(&v, VIEW_KEY_ESCAPE);
    press(&v, 'a');
    draw(&v, s);
    CHECK(v.mode == VIEW_MODE_ALS && v.panels[0].rows == v.als_l && v.panels[0].cols == v.als_h, "ALS panel");
    at_cell(&v, VIEW_EV_CLICK, 0, 2, 1);
    CHECK(v.mode == VIEW_MODE_QUERY && view_layer(&v) == v.als_layers[2] && view_head(&v) == v.als_heads[1],
          "ALS click opens layer %d head %d", view_layer(&v), view_head(&v));
    /* rollout from the class token equals the analysis's rollout */
    press(&v, 'c');
    press(&v, 'c'); /* back to the query row, the query stays 0 */
    press(&v, 'r');
    CHECK(v.row == VIEW_ROW_ROLLOUT, "r: rollout");
    /* the mode drawn is the mode named, and the map beside the overlay is the layer's factor
     * of the rollout (head mean + identity, T x T), not one head's map */
    draw(&v, s);
    CHECK(strstr(v.status, "rollout view") && strstr(v.status, "rollout (attn, head mean)") &&
          !strstr(v.status, "query view"), "rollout status: %s", v.status);
    int T = r->num_tokens;
    CHECK(v.n_panels == 2 && v.panels[1].rows == T && v.panels[1].cols == T, "rollout: a %d x %d map", T, T);
    if (v.n_panels == 2) {
        double e = 0;
        for (size_t i = 0; i < (size_t)T * T; i++)
            e = fmax(e, fabs(v.panels[1].values[i] - v.rollout[(size_t)v.li * T * T + i]));
        CHECK(e < 1e-6, "rollout map is the layer's fused map: max difference %.3g", e);
    }
    double *m;
    long d[6];
    int nd;
    if (fig_read(&v.src, "rollout", "map", "per_image", &m, d, &nd, &err) == AS_OK) {
        for (int li = 0; li < L; li += L - 1) {
            v.li = li;
            v.query = 0;
            draw(&v, s);
            const double *want = m + ((size_t)v.image * L + li) * d[2];
            double e = 0;
            for (int j = 0; j < d[2]; j++) e = fmax(e, fabs(v.panels[0].values[j] - want[j]));
            CHECK(e < 1e-12, "rollout through layer %d: max difference to analyze's %.3g", li, e);
        }
        free(m);
    } else {
        CHECK(0, "%s", err.msg);
    }
    view_plot_command(&v, "x", cmd, sizeof cmd);
    CHECK(strstr(cmd, "attnscope plot rollout") != NULL, "rollout command: %s", cmd);
    cairo_surface_destroy(s);
    view_close(&v);
}

/* Every map dataset a mechanism records (LSLA softmax, Refiner's expanded/convolved) via Tab. */
static void test_internals(const char *trace) {
    view v;
    if (!open_view(&v, trace)) return;
    cairo_surface_t *s = surface();
    int seen[VIEW_N_MAPS] = {0};
    for (int li = 0; li < v.src.tr.n_layers; li++) {
        v.li = li;
        v.ds = 0;
        for (int k = 0; k < VIEW_N_MAPS; k++) {
            seen[v.ds] = 1;
            draw(&v, s);
            CHECK(v.n_panels == 2 && v.panels[1].ds == v.ds && v.panels[1].cols == v.src.tr.num_tokens,
                  "layer %d %s drawn", view_layer(&v), view_map_name(v.ds));
            CHECK(v.n_panels < 2 || (v.panels[0].hi >= v.panels[0].lo && isfinite(v.panels[0].hi)), "finite range");
            if (v.ds == 3) {
                int hh = v.dims[li][3][0];
                for (int k2 = 0; k2 < hh + 2; k2++) press(&v, VIEW_KEY_RIGHT);
                CHECK(v.hi == hh - 1 && hh == v.src.tr.cfg.attn[view_layer(&v)].expanded_heads,
                      "expanded maps: %d heads (H')", hh);
            }
            press(&v, VIEW_KEY_TAB);
            if (v.ds == 0) break;
        }
    }
    CHECK(seen[2] && seen[3] && seen[4], "Tab reached attn_softmax, attn_expanded, attn_convolved");
    cairo_surface_destroy(s);
    view_close(&v);
}

/* A trace with only the class token's rows: non-square maps, no rollout, hover ignored. */
static void test_prefix_rows(const char *dir) {
    model M;
    as_error err = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/vit_cls", fixtures());
    if (model_load(&M, path, NULL, 0, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    const int S = M.cfg.img_size, n = 3;
    float *t = malloc(3 * (size_t)S * S * n * sizeof *t);
    rng_state rs = {7};
    for (size_t i = 0; i < 3 * (size_t)S * S * n; i++) t[i] = rng_normal(&rs);
    dataset ds;
    dataset_from_memory(&ds, t, n, 3, S, "mem", &err);
    record_opts o;
    memset(&o, 0, sizeof o);
    snprintf(path, sizeof path, "%s/prefix.h5", dir);
    o.out = path;
    o.spec.batch = 2;
    o.spec.command_line = "test_view";
    o.quiet = 1;
    record_parse_selection(&o, &M.cfg, "attn", "all", "all", "f16", "none", "prefix", &err);
    record_result res;
    CHECK(record_run(&M, &ds, &o, &res, &err) == AS_OK, "%s", err.msg);
    dataset_free(&ds);
    model_free(&M);
    view v;
    if (view_open(&v, path, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    cairo_surface_t *s = surface();
    draw(&v, s);
    CHECK(v.n_panels == 2 && v.panels[1].rows == 1 && v.panels[1].cols == v.src.tr.num_tokens,
          "prefix rows: a 1 x T map (%d x %d)", v.panels[1].rows, v.panels[1].cols);
    at_cell(&v, VIEW_EV_MOTION, 0, 2, 2);
    CHECK(v.query == 0, "hover cannot pick a row that was not recorded");
    press(&v, 'r');
    CHECK(v.row != VIEW_ROW_ROLLOUT && strstr(v.message, "--query-rows all"), "rollout refused: %s", v.message);
    CHECK(view_select(&v, -1, -1, -1, 5, &err) == AS_ERR_ARG && strstr(err.msg, "prefix"), "query 5: %s", err.msg);
    cairo_surface_destroy(s);
    view_close(&v);
}

static void test_errors(const char *dir, const char *trace) {
    view v;
    as_error err = {0};
    CHECK(view_open(&v, "/nonexistent/x.h5", &err) != AS_OK && strstr(err.msg, "no such file"), "%s", err.msg);
    char png[512];
    snprintf(png, sizeof png, "%s/plot/reference.png", fixtures());
    CHECK(view_open(&v, png, &err) != AS_OK && strstr(err.msg, "not an HDF5"), "%s", err.msg);
    char res[512];
    snprintf(res, sizeof res, "%s/results.h5", dir);
    analysis_opts o;
    analysis_opts_default(&o);
    o.quiet = 1;
    o.metrics = analysis_metric_mask("entropy", &err);
    analysis_report rep;
    CHECK(analysis_run(trace, res, &o, &rep, &err) == AS_OK, "%s", err.msg);
    CHECK(view_open(&v, res, &err) != AS_OK && strstr(err.msg, "view the trace"), "results file: %s", err.msg);
    if (view_open(&v, trace, &err) == AS_OK) {
        CHECK(view_select(&v, 99, -1, -1, -1, &err) == AS_ERR_ARG && strstr(err.msg, "--image 99"), "%s", err.msg);
        CHECK(view_select(&v, -1, 77, -1, -1, &err) == AS_ERR_ARG && strstr(err.msg, "--layer 77"), "%s", err.msg);
        CHECK(view_select(&v, -1, -1, 50, -1, &err) == AS_ERR_ARG && strstr(err.msg, "--head 50"), "%s", err.msg);
        /* an export into a missing folder fails and leaves nothing */
        cairo_surface_t *s = surface();
        draw(&v, s);
        char path[1200], cmd[4096];
        CHECK(view_export(&v, "/nonexistent-dir", path, sizeof path, cmd, sizeof cmd, &err) == AS_ERR_IO &&
              strstr(err.msg, "writable"), "export to a missing folder: %s", err.msg);
        CHECK(view_export(&v, dir, path, sizeof path, cmd, sizeof cmd, &err) == AS_OK, "%s", err.msg);
        cairo_surface_t *back = cairo_image_surface_create_from_png(path);
        CHECK(cairo_surface_status(back) == CAIRO_STATUS_SUCCESS, "the exported PNG reads back (%s)", path);
        if (cairo_surface_status(back) == CAIRO_STATUS_SUCCESS) {
            /* the panels at 300 dpi, cropped: their extent in pixels, no status bar grey */
            int bw = cairo_image_surface_get_width(back), bh = cairo_image_surface_get_height(back);
            double x1 = 0, y1 = 0, x0 = 1e9, y0 = 1e9;
            for (int i = 0; i < v.n_panels; i++) {
                x0 = fmin(x0, v.panels[i].x);
                y0 = fmin(y0, v.panels[i].y);
                x1 = fmax(x1, v.panels[i].x + v.panels[i].w);
                y1 = fmax(y1, v.panels[i].y + v.panels[i].h);
            }
            double k = VIEW_EXPORT_DPI / 72.0;
            CHECK(bw >= (x1 - x0) * k && bw < (x1 - x0 + 200) * k && bh >= (y1 - y0) * k &&
                  bh < (y1 - y0 + 80) * k, "export is %d x %d px for panels of %.0f x %.0f pt", bw, bh,
                  x1 - x0, y1 - y0);
            const unsigned char *d = cairo_image_surface_get_data(back);
            long grey = 0;
            for (int y = 0; y < bh; y++) {
                int run = 0;
                for (int x = 0; x < bw; x++) {
                    uint32_t q;
                    memcpy(&q, d + (size_t)y * cairo_image_surface_get_stride(back) + 4 * (size_t)x, 4);
                    run = (q & 0xffffff) == 0xededed ? run + 1 : 0;
                    grey += run == bw / 2; /* half a row of the status bar's grey */
                }
            }
            CHECK(grey == 0, "export holds the status bar (%ld rows of its grey)", grey);
        }
        cairo_surface_destroy(back);
        char want[128];
        snprintf(want, sizeof want, "--layer %d --head %d --query %d", view_layer(&v), view_head(&v), v.query);
        CHECK(strstr(cmd, "attnscope plot attention") && strstr(cmd, want), "export command: %s", cmd);
        cairo_surface_destroy(s);
        view_close(&v);
    }
    /* a view on results without analysis says which command makes them */
    snprintf(res, sizeof res, "%s/plain.h5", dir);
    snprintf(png, sizeof png, "%s/analysis/vit_gap.h5", fixtures());
    check_copy_file(png, res);
    if (view_open(&v, res, &err) == AS_OK) {
        CHECK(!v.sim && !v.als, "no analysis in a plain trace");
        press(&v, 's');
        CHECK(v.mode == VIEW_MODE_QUERY && strstr(v.message, "--metrics similarity"), "s: %s", v.message);
        press(&v, 'c');
        CHECK(strstr(v.message, "no class token") != NULL, "GAP model: %s", v.message);
        view_close(&v);
    }
}

/* ---- live: a child process records batch by batch while the view polls ------------------------ */

static void live_child(const char *path, int to_parent, int from_parent) {
    model M;
    as_error err = {0};
    char mp[512];
    snprintf(mp, sizeof mp, "%s/vit_cls", fixtures());
    if (model_load(&M, mp, NULL, 0, &err) != AS_OK) _exit(3);
    const vit_config *c = &M.cfg;
    record_opts o;
    memset(&o, 0, sizeof o);
    if (record_parse_selection(&o, c, "attn", "all", "all", "f16", "none", "all", &err)) _exit(3);
    trace_spec *s = &o.spec;
    s->batch = 2;
    s->command_line = "test_view live";
    s->cfg = *c;
    s->params = &M.params;
    s->model_source = M.source;
    s->weights_dtype = M.weights_dtype;
    trace_writer *w;
    int done;
    if (trace_writer_open(&w, path, s, TRACE_CREATE, &done, NULL, NULL, NULL, &err) != AS_OK) _exit(4);
    const int S = c->img_size, B = 2;
    size_t ab = vit_acts_carve(c, B, NULL, NULL);
    void *arena = aligned_alloc(64, (ab + 63) & ~(size_t)63);
    float *x = aligned_alloc(64, ((size_t)B * 3 * S * S * 4 + 63) & ~(size_t)63);
    vit_acts acts;
    vit_acts_carve(c, B, arena, &acts);
    rng_state rs = {3};
    char byte = 'x';
    for (int b = 0; b < 3; b++) {
        for (int i = 0; i < B * 3 * S * S; i++) x[i] = rng_normal(&rs);
        trace_slot *sl = trace_writer_acquire(w);
        vit_forward(c, &M.params, &acts, x, B, &sl->rec);
        memcpy(sl->logits, acts.logits, (size_t)B * c->num_classes * sizeof(float));
        memset(sl->rgb, 90 + 40 * b, (size_t)B * S * S * 3);
        for (int i = 0; i < B; i++) {
            snprintf(sl->paths[i], sizeof sl->paths[i], "live_%d.png", b * B + i);
            sl->labels[i] = i;
        }
        sl->n = B;
        trace_writer_submit(w, sl);
        while (trace_writer_done(w) < (b + 1) * B) nanosleep(&(struct timespec){0, 2000000}, NULL);
        if (write(to_parent, &byte, 1) != 1 || read(from_parent, &byte, 1) != 1) _exit(5);
    }
    trace_writer_close(w, 1, NULL, &err);
    if (write(to_parent, &byte, 1) != 1) _exit(5);
    free(arena);
    free(x);
    model_free(&M);
    _exit(0);
}

static void test_live(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/live.h5", dir);
    int up[2], down[2];
    if (pipe(up) || pipe(down)) {
        CHECK(0, "pipe");
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        live_child(path, up[1], down[0]);
    }
    close(up[1]);
    close(down[0]);
    char byte;
    CHECK(read(up[0], &byte, 1) == 1, "the first batch");
    view v;
    as_error err = {0};
    if (view_open(&v, path, &err) != AS_OK) {
        CHECK(0, "open live: %s", err.msg);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return;
    }
    cairo_surface_t *s = surface();
    CHECK(v.live && v.follow && v.n_images == 2, "live trace: %ld images, live %d", v.n_images, v.live);
    draw(&v, s);
    CHECK(strstr(v.status, "live: 2 images") != NULL, "status: %s", v.status);
    CHECK(view_poll(&v) == 0, "nothing new yet");
    for (int b = 1; b < 3; b++) {
        CHECK(write(down[1], &byte, 1) == 1 && read(up[0], &byte, 1) == 1, "batch %d", b);
        CHECK(view_poll(&v) & VIEW_REDRAW, "poll sees batch %d", b);
        CHECK(v.n_images == 2 * (b + 1) && v.image == v.n_images - 1, "following: image %ld of %ld", v.image, v.n_images);
        draw(&v, s);
        CHECK(v.n_panels == 2 && v.panels[0].values, "the new image draws");
    }
    press(&v, VIEW_KEY_HOME);
    CHECK(!v.follow && v.image == 0, "Home stops following");
    CHECK(write(down[1], &byte, 1) == 1 && read(up[0], &byte, 1) == 1, "the run ends");
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child exit %d", WEXITSTATUS(st));
    CHECK(view_poll(&v) == 0, "one poll without a writer is not yet the end (it may reopen)");
    CHECK(view_poll(&v) & VIEW_REDRAW, "the second poll notices the end of the run");
    CHECK(!v.live && v.complete && v.n_images == 6, "reopened complete: live %d complete %d, %ld images",
          v.live, v.complete, v.n_images);
    draw(&v, s);
    CHECK(strstr(v.status, "complete") != NULL, "status: %s", v.status);
    close(up[0]);
    close(down[1]);
    cairo_surface_destroy(s);
    view_close(&v);
}

/* ---- the SDL window --------------------------------------------------------------------------- */

/* Width, height and distinct colours of a PNG; -1 when it does not read. */
static long png_stats(const char *path, int *w, int *h) {
    cairo_surface_t *s = cairo_image_surface_create_from_png(path);
    if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(s);
        return -1;
    }
    *w = cairo_image_surface_get_width(s);
    *h = cairo_image_surface_get_height(s);
    int stride = cairo_image_surface_get_stride(s);
    const unsigned char *d = cairo_image_surface_get_data(s);
    /* a 4096-bucket histogram of 12-bit colours: enough to tell a drawing from a blank */
    static unsigned char seen[4096];
    memset(seen, 0, sizeof seen);
    long distinct = 0;
    for (int y = 0; y < *h; y++)
        for (int x = 0; x < *w; x++) {
            uint32_t p;
            memcpy(&p, d + (size_t)y * stride + 4 * (size_t)x, 4);
            int k = (p >> 20 & 0xf) << 8 | (p >> 12 & 0xf) << 4 | (p >> 4 & 0xf);
            if (!seen[k]) {
                seen[k] = 1;
                distinct++;
            }
        }
    cairo_surface_destroy(s);
    return distinct;
}

static void test_window(const char *dir, const char *trace) {
    const char *bin = getenv("ATTNSCOPE");
    if (!bin) {
        fprintf(stderr, "ATTNSCOPE not set: skipping the window test (meson sets it)\n");
        return;
    }
    char script[512], shot[512], last[512], cmd[4096];
    snprintf(script, sizeof script, "%s/events.txt", dir);
    snprintf(shot, sizeof shot, "%s/query.png", dir);
    snprintf(last, sizeof last, "%s/last.png", dir);
    FILE *f = fopen(script, "w");
    fprintf(f, "move-cell 0 1 2\nkey Right\nkey Down\nwheel 1\nclick-cell 0 2 2\nscreenshot %s\n"
               "key g\nclick-cell 1 0 0\nkey ?\nkey Escape\nkey s\nresize 900 600\nkey a\n", shot);
    fclose(f);
    const char *drivers[] = {"dummy", "x11"};
    for (int k = 0; k < 2; k++) {
        if (k == 1 && access("/usr/bin/xvfb-run", X_OK) != 0) {
            fprintf(stderr, "xvfb-run not installed: the window ran under SDL's dummy driver only\n");
            break;
        }
        remove(shot);
        remove(last);
        /* under Xvfb, SDL loads X11 and D-Bus modules at run time and unloads them at exit:
         * LeakSanitizer then reports their allocations from "unknown modules" it cannot
         * suppress by name. Our own code's leaks are checked by the dummy-driver run. */
        snprintf(cmd, sizeof cmd, "%s env %sSDL_VIDEODRIVER=%s %s view %s --script %s --screenshot %s > %s/out.txt 2>&1",
                 k ? "xvfb-run -a -s '-screen 0 1280x1024x24'" : "", k ? "ASAN_OPTIONS=detect_leaks=0 " : "", drivers[k], bin, trace, script, last, dir);
        int rc = system(cmd);
        CHECK(rc == 0, "%s: exit %d", drivers[k], rc);
        int w = 0, h = 0;
        long n1 = png_stats(shot, &w, &h);
        /* 1280 x 800 asked for, shrunk to 95% of the screen where that is smaller: SDL's dummy
         * display is 1024 x 768, the Xvfb screen 1280 x 1024 */
        int sw = k ? 1280 : 1024, sh = k ? 1024 : 768;
        CHECK(n1 > 20 && w <= 0.95 * sw + 1 && h <= 0.95 * sh + 1 && fabs((double)w / h - 1.6) < 0.02,
              "%s: query screenshot %d x %d with %ld colours", drivers[k], w, h, n1);
        long n2 = png_stats(last, &w, &h);
        CHECK(n2 > 20 && w == 900 && h == 600, "%s: last frame after resize %d x %d with %ld colours", drivers[k], w, h, n2);
    }
    /* a UI scale of 2 (HiDPI without a pixel ratio from the system): twice the pixels (the
     * earlier screenshot removed: --screenshot never overwrites) */
    remove(last);
    snprintf(cmd, sizeof cmd, "env SDL_VIDEODRIVER=dummy %s view %s --scale 2 --script /dev/null --screenshot %s > %s/out.txt 2>&1",
             bin, trace, last, dir);
    CHECK(system(cmd) == 0, "--scale 2 run");
    int w = 0, h = 0;
    long n3 = png_stats(last, &w, &h);
    /* the interface doubles inside a window that still fits the (1024 x 768) screen */
    CHECK(n3 > 20 && w <= 1024 && h <= 768, "--scale 2: %d x %d with %ld colours", w, h, n3);
    /* no display at all: one line that says what to do, at once (it used to wait forever) */
    char out[600];
    snprintf(out, sizeof out, "%s/nodisplay.txt", dir);
    snprintf(cmd, sizeof cmd, "env -u DISPLAY -u WAYLAND_DISPLAY -u SDL_VIDEODRIVER timeout 20 %s view %s > %s 2>&1",
             bin, trace, out);
    int rc = system(cmd);
    FILE *fo = fopen(out, "r");
    char line[1024] = "", extra[64] = "";
    int lines = 0;
    if (fo) {
        if (fgets(line, sizeof line, fo)) lines++;
        while (fgets(extra, sizeof extra, fo)) lines++;
        fclose(fo);
    }
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) != 0 && WEXITSTATUS(rc) != 124 && lines == 1 &&
          strstr(line, "xvfb-run") && strstr(line, "SDL_VIDEODRIVER=dummy"),
          "no display: exit %d, %d lines: %s", WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, lines, line);
}

/* Keys that change nothing in the view drawn say why (review of issue 14): Tab where the view
 * draws attn whatever the map (rollout, depth strip), r in the head grid (rollout fuses heads). */
static void test_keys_that_do_not_apply(const char *trace) {
    view v;
    if (!open_view(&v, trace)) return;
    v.li = 0;
    press(&v, 'r');
    CHECK(v.row == VIEW_ROW_ROLLOUT, "r: rollout on (%s)", v.message);
    press(&v, VIEW_KEY_TAB);
    CHECK(strstr(v.message, "rollout multiplies attn") != NULL, "Tab in rollout: \"%s\"", v.message);
    press(&v, 'r');
    v.ds = 0;
    press(&v, 'd');
    press(&v, VIEW_KEY_TAB);
    CHECK(strstr(v.message, "depth strip shows attn") != NULL, "Tab in the depth strip: \"%s\"", v.message);
    press(&v, 'g');
    press(&v, 'r');
    CHECK(v.mode == VIEW_MODE_GRID && strstr(v.message, "rollout fuses the heads") != NULL, "r in the grid: \"%s\"",
          v.message);
    view_close(&v);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--png-stats") == 0) {
        int w, h;
        long n = png_stats(argv[2], &w, &h);
        if (n < 0) return 1;
        printf("%d %d %ld\n", w, h, n);
        return 0;
    }
    check_tmp_init("view");
    const char *mech = check_tmp("mech.h5"), *dist = check_tmp("dist.h5");
    analysed_copy("mech_cls", mech);
    analysed_copy("deit_dist", dist);
    runtime_set_threads(1);
    test_query_view(mech);
    test_query_view(dist);
    test_hover_click(dist);
    test_modes(mech);
    test_internals(mech);
    test_keys_that_do_not_apply(mech);
    test_prefix_rows(check_tmpdir);
    test_errors(check_tmpdir, mech);
    test_live(check_tmpdir);
    test_window(check_tmpdir, mech);
    check_tmp_remove();
    return check_finish("view");
}
