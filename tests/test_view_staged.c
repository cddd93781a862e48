/* test_view_staged.c: the viewer on a staged trace (format 3, issue 16) drawn offscreen from
 * scripted events: the trace of tests/staged.h (three window stages, grids 14, 7 and 4, heads 1,
 * 2 and 4, shifted odd blocks, padded windows) through the real writer. Checks that the query is
 * an image point whose cell follows it across stages, that the overlay holds the trace's window
 * row scattered through window_token (computed here from the reader's table and map, not the
 * viewer's), exactly 0 outside the window, that the map panel is the query's window's map and
 * steps over windows, the hit testing at the layer's stride, the head grid per layer, and the
 * one-line refusals of what does not read staged traces yet. Writes the screenshots of a stage-0
 * and a last-stage query view (kept in $VIEW_STAGED_SHOTS when set). */
#define _POSIX_C_SOURCE 200809L
#include "staged.h"

#include "../plot/keymap.h"
#include "../viewer/view.h"
#include "analysed.h"
#include "check.h"

#define W 1200
#define H 760
#include "viewtest.h"

static int press(view *v, int key) {
    view_event e = {.type = VIEW_EV_KEY, .key = key};
    return view_handle(v, &e);
}

/* An event at the centre of cell (r, c) of panel p (window points). */
static int at_cell(view *v, view_event_type type, int p, int r, int c) {
    double x, y;
    view_panel_cell_centre(&v->panels[p], r, c, &x, &y);
    view_event e = {.type = type, .x = x * v->zoom, .y = y * v->zoom};
    return view_handle(v, &e);
}

/* An event at input pixel (py, px) of image panel p. */
static int at_pixel(view *v, view_event_type type, int p, double py, double px) {
    const view_panel *pn = &v->panels[p];
    view_event e = {.type = type, .x = (pn->x + px / pn->img * pn->w) * v->zoom,
                    .y = (pn->y + py / pn->img * pn->h) * v->zoom};
    return view_handle(v, &e);
}

/* What the overlay must hold for query token t of layer `layer`, head `head`, image `image`,
 * from the reader alone: window_token locates t (window w, row r); row r of window w's map is
 * scattered to the window's tokens (pad keys dropped), 0 elsewhere. in[] marks the window. */
typedef struct { int w, row, nw, R; } where;
static where expected_row(const trace_reader *r, long image, int layer, int head, int t, double *out,
                          int *in) {
    const trace_layer_geom *g = trace_layer(r, layer);
    where q = {-1, -1, g->nwh * g->nww, g->M * g->M};
    int *tok = malloc((size_t)q.nw * q.R * sizeof *tok);
    float *A = malloc((size_t)g->n_problems * g->Tq * g->Tk * sizeof *A);
    as_error err = {0};
    CHECK(tok && A && trace_read_window_tokens(r, layer, tok, &err) == AS_OK, "window tokens: %s", err.msg);
    CHECK(trace_read_head(r, TRACE_Q_ATTN, image, layer, head, A, &err) == AS_OK, "map: %s", err.msg);
    for (int i = 0; i < q.nw * q.R; i++)
        if (tok[i] == t) {
            q.w = i / q.R;
            q.row = i % q.R;
            break;
        }
    for (int i = 0; i < g->gh * g->gw; i++) out[i] = 0, in[i] = 0;
    for (int j = 0; q.w >= 0 && j < q.R; j++) {
        int u = tok[q.w * q.R + j];
        if (u < 0) continue;
        out[u] = A[((size_t)q.w * q.R + q.row) * q.R + j]; /* every window recorded: position = w */
        in[u] = 1;
    }
    free(tok);
    free(A);
    return q;
}

/* The overlay of the current layer and head against expected_row; returns the window. */
static int check_overlay(view *v, const char *what) {
    const trace_reader *r = &v->src.tr;
    const trace_layer_geom *g = trace_layer(r, view_layer(v));
    const view_panel *ip = &v->panels[0];
    double want[256];
    int in[256];
    where q = expected_row(r, v->image, view_layer(v), view_head(v), v->query, want, in);
    CHECK(ip->kind == VIEW_PANEL_IMAGE && ip->rows == g->gh && ip->cols == g->gw,
          "%s: image panel %d x %d, layer grid %d x %d", what, ip->rows, ip->cols, g->gh, g->gw);
    int same = 1, states = 1, outside_zero = 1;
    for (int i = 0; i < g->gh * g->gw; i++) {
        same &= ip->values[i] == want[i];
        states &= (ip->key_state[i] != VIEW_KEY_OUTSIDE) == in[i];
        if (!in[i]) outside_zero &= ip->values[i] == 0;
    }
    CHECK(same, "%s: overlay = the window row scattered through window_token", what);
    CHECK(states && outside_zero, "%s: tokens outside window %d are marked outside and exactly 0", what, q.w);
    int row, n;
    CHECK(view_query_window(v, &row, &n) == q.w && row == q.row && n == q.nw && ip->window == q.w,
          "%s: query window %d row %d of %d, want %d row %d of %d", what, view_query_window(v, NULL, NULL),
          row, n, q.w, q.row, q.nw);
    /* the map panel: that window's M^2 x M^2 map, the query's row outlined */
    const view_panel *mp = &v->panels[1];
    float *A = malloc((size_t)g->n_problems * g->Tq * g->Tk * sizeof *A);
    as_error err = {0};
    trace_read_head(r, TRACE_Q_ATTN, v->image, view_layer(v), view_head(v), A, &err);
    int msame = mp->kind == VIEW_PANEL_MAP && mp->rows == q.R && mp->cols == q.R && mp->window == q.w;
    for (int i = 0; msame && i < q.R * q.R; i++) msame &= mp->values[i] == A[(size_t)q.w * q.R * q.R + i];
    CHECK(msame, "%s: the map panel is window %d's map", what, q.w);
    free(A);
    char s[64];
    snprintf(s, sizeof s, "window %d (of %d), grid %d x %d, M %d, shift %d", q.w, q.nw, g->gh, g->gw, g->M, g->shift);
    CHECK(strstr(v->status, s) != NULL, "%s: status says \"%s\": %s", what, s, v->status);
    return q.w;
}

static void test_query(const char *trace, const char *shots) {
    view v;
    as_error err = {0};
    CHECK(view_open(&v, trace, &err) == AS_OK, "a staged trace opens: %s", err.msg);
    if (err.status) return;
    const trace_reader *r = &v.src.tr;
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
    /* layer 1: stage 0, shifted; token (0, 0) lies in the wrapped corner window */
    CHECK(view_select(&v, 1, 1, 0, 0, &err) == AS_OK, "select: %s", err.msg);
    v.opacity = 1;
    draw(&v, s);
    CHECK(v.n_panels == 2, "query view: 2 panels, not %d", v.n_panels);
    int w0 = check_overlay(&v, "layer 1, token (0, 0)");
    CHECK(w0 == 15, "token (0, 0) of a shifted 14 x 14 grid (M 4, shift 2) is in the last window, not %d", w0);
    CHECK(strstr(v.status, "stage 0, block 1,") != NULL, "status: %s", v.status);
    /* the brightest in-window cell is the row's largest weight, in the colour map's top colour */
    {
        const view_panel *ip = &v.panels[0];
        int best = -1;
        for (int i = 0; i < ip->rows * ip->cols; i++)
            if (ip->key_state[i] != VIEW_KEY_OUTSIDE && (best < 0 || ip->values[i] > ip->values[best])) best = i;
        double x, y, c[3];
        view_panel_cell_centre(ip, best / ip->cols, best % ip->cols, &x, &y);
        pixel(&v, s, x + 1.2, y + 1.2, c); /* beside the query's cross-free centre */
        plot_color top = plot_cmap_color(v.cmap, 1);
        CHECK(fabs(c[0] - top.r) < 0.03 && fabs(c[1] - top.g) < 0.03 && fabs(c[2] - top.b) < 0.03,
              "the row's peak cell has the colour map's top colour (%.2f %.2f %.2f)", c[0], c[1], c[2]);
    }
    /* hovering a cell of the window: the value under the cursor is the trace's */
    {
        double want[256];
        int in[256];
        expected_row(r, 1, 1, 0, 0, want, in);
        v.query_locked = 1;
        at_cell(&v, VIEW_EV_MOTION, 0, 1, 0);
        draw(&v, s);
        char t[64];
        snprintf(t, sizeof t, "attn at token (1, 0): %.4g", want[1 * 14 + 0]);
        CHECK(strstr(v.status, t) != NULL, "hover (1, 0): want \"%s\": %s", t, v.status);
        at_cell(&v, VIEW_EV_MOTION, 0, 7, 7);
        draw(&v, s);
        CHECK(strstr(v.status, "attn at token (7, 7): 0 (outside the query's window)") != NULL,
              "hover outside the window: %s", v.status);
        v.query_locked = 0;
    }
    /* hovering moves the query to the cell under the pointer */
    at_cell(&v, VIEW_EV_MOTION, 0, 6, 9);
    draw(&v, s);
    CHECK(v.query == 6 * 14 + 9, "hover (6, 9): query %d", v.query);
    check_overlay(&v, "layer 1, token (6, 9)");
    if (shots) {
        char p[1024];
        snprintf(p, sizeof p, "%s/staged-stage0-layer1.png", shots);
        cairo_surface_write_to_png(s, p);
    }
    /* window stepping: '.' and ',' move the query to the same row of the next / previous window */
    {
        int row, nw, w = view_query_window(&v, &row, &nw);
        press(&v, '.');
        draw(&v, s);
        int row2, w2 = view_query_window(&v, &row2, NULL);
        CHECK(w2 == (w + 1) % nw && v.query_locked, "'.': window %d -> %d (of %d)", w, w2, nw);
        CHECK(check_overlay(&v, "after '.'") == w2, "overlay follows the window");
        press(&v, ',');
        press(&v, ',');
        draw(&v, s);
        CHECK(view_query_window(&v, NULL, NULL) == (w + nw - 1) % nw, "',' twice: window %d", view_query_window(&v, NULL, NULL));
        check_overlay(&v, "after ','");
        /* every window of the layer in turn, wrapping around */
        int seen = 0;
        for (int k = 0; k < nw; k++) {
            press(&v, '.');
            seen |= 1 << view_query_window(&v, NULL, NULL);
        }
        CHECK(seen == (1 << nw) - 1, "'.' visits every window: %x", seen);
    }
    /* clicking a row of the map makes that row's token the query */
    {
        draw(&v, s);
        int w = view_query_window(&v, NULL, NULL);
        int *tok = malloc(16 * 16 * sizeof *tok);
        trace_read_window_tokens(r, 1, tok, &err);
        int j = 0;
        while (tok[w * 16 + j] < 0) j++;
        at_cell(&v, VIEW_EV_CLICK, 1, j, 0);
        CHECK(v.query == tok[w * 16 + j] && view_query_window(&v, NULL, NULL) == w,
              "map row %d click: query %d, want %d", j, v.query, tok[w * 16 + j]);
        free(tok);
    }
    /* stage crossing keeps the image point: each layer's query cell contains it */
    {
        at_pixel(&v, VIEW_EV_CLICK, 0, 13.0, 21.0); /* fixes the query at input pixel (13, 21) */
        view_select(&v, -1, 0, -1, -1, &err);
        for (int li = 0; li < r->n_layers; li++) {
            draw(&v, s);
            const trace_layer_geom *g = trace_layer(r, view_layer(&v));
            int y = v.query / g->gw, x = v.query % g->gw;
            double s2 = g->stride_px / 2;
            int inside = 13.0 >= g->offset_px + g->stride_px * y - s2 && 13.0 < g->offset_px + g->stride_px * y + s2 &&
                         21.0 >= g->offset_px + g->stride_px * x - s2 && 21.0 < g->offset_px + g->stride_px * x + s2;
            CHECK(inside && fabs(v.qpt[0] - 13.0) < 1e-9 && fabs(v.qpt[1] - 21.0) < 1e-9, "layer %d: query (%d, %d) at stride %g holds pixel (13, 21)",
                  view_layer(&v), y, x, g->stride_px);
            char st[32];
            snprintf(st, sizeof st, "stage %d, block %d,", g->stage, view_layer(&v) % 2);
            CHECK(strstr(v.status, st) != NULL, "status \"%s\": %s", st, v.status);
            check_overlay(&v, "stepping layers");
            press(&v, VIEW_KEY_DOWN);
        }
    }
    /* the last stage: one 4 x 4 window over a grid whose last cells reach past the image (28 px,
     * stride 8): hit testing follows the pixels, not equal divisions of the panel */
    view_select(&v, -1, r->layers[r->n_layers - 1], -1, -1, &err);
    draw(&v, s);
    v.query_locked = 0;
    at_pixel(&v, VIEW_EV_MOTION, 0, 23.0, 23.0); /* token (2, 2) spans [16, 24) */
    draw(&v, s);
    CHECK(v.query == 2 * 4 + 2, "pixel (23, 23) at stride 8 is token (2, 2), not %d", v.query);
    at_pixel(&v, VIEW_EV_MOTION, 0, 25.0, 1.0);
    draw(&v, s);
    CHECK(v.query == 3 * 4 + 0, "pixel (25, 1) is token (3, 0), not %d", v.query);
    check_overlay(&v, "last stage");
    for (int h = 0; h < 4; h++) { /* every head of the last stage */
        view_select(&v, -1, -1, h, -1, &err);
        draw(&v, s);
        CHECK(view_head(&v) == h, "head %d selected (%d)", h, view_head(&v));
        check_overlay(&v, "last-stage heads");
    }
    if (shots) {
        char p[1024];
        snprintf(p, sizeof p, "%s/staged-stage2-layer5.png", shots);
        cairo_surface_write_to_png(s, p);
    }
    cairo_surface_destroy(s);
    view_close(&v);
}

/* The head grid adapts to each layer's heads; what cannot read staged traces refuses in one line. */
static void test_modes(const char *trace) {
    view v;
    as_error err = {0};
    CHECK(view_open(&v, trace, &err) == AS_OK, "open: %s", err.msg);
    if (err.status) return;
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
    press(&v, 'g');
    const int heads[6] = {1, 1, 2, 2, 4, 4};
    for (int l = 0; l < 6; l++) {
        CHECK(view_select(&v, -1, l, -1, -1, &err) == AS_OK, "%s", err.msg);
        draw(&v, s);
        int ok = v.mode == VIEW_MODE_GRID && v.n_panels == heads[l];
        for (int i = 0; ok && i < v.n_panels; i++) ok = v.panels[i].head == i && v.panels[i].layer == l;
        CHECK(ok, "layer %d: the grid shows its %d heads (%d panels)", l, heads[l], v.n_panels);
    }
    press(&v, 'd');
    draw(&v, s);
    CHECK(v.mode == VIEW_MODE_DEPTH && v.n_panels == 6, "depth strip: a panel per layer (%d)", v.n_panels);
    for (int i = 0; i < v.n_panels; i++) {
        const trace_layer_geom *g = trace_layer(&v.src.tr, v.panels[i].layer);
        CHECK(v.panels[i].rows == g->gh && v.panels[i].stride_px == g->stride_px,
              "strip panel %d at its layer's grid %d and stride %g", i, g->gh, g->stride_px);
    }
    press(&v, VIEW_KEY_ESCAPE);
    /* one-line refusals, and nothing drawn instead */
    struct { int key; view_mode mode; view_row row; const char *says; } no[] = {
        {'s', VIEW_MODE_QUERY, VIEW_ROW_QUERY, "no similarity results in this trace: run attnscope analyze"},
        {'a', VIEW_MODE_QUERY, VIEW_ROW_QUERY, "no als results in this trace: run attnscope analyze"},
        {'c', VIEW_MODE_QUERY, VIEW_ROW_QUERY, "no class token"},
    };
    for (size_t k = 0; k < sizeof no / sizeof no[0]; k++) {
        press(&v, no[k].key);
        draw(&v, s);
        CHECK(v.mode == no[k].mode && v.row == no[k].row && strstr(v.message, no[k].says) &&
              !strchr(v.message, '\n') && v.n_panels == 2,
              "'%c': \"%s\" (mode %d, row %d, %d panels)", no[k].key, v.message, v.mode, v.row, v.n_panels);
    }
    CHECK(view_mode_missing(&v, VIEW_MODE_SIMILARITY, &err) && strstr(err.msg, "--metrics similarity"), "%s", err.msg);
    /* the figure of the view: its query as the cell of the first (14 x 14) grid under the point */
    char cmd[512], want[96];
    view_plot_command(&v, "x", cmd, sizeof cmd);
    const trace_layer_geom *g0 = trace_layer(&v.src.tr, 0);
    snprintf(want, sizeof want, "--layer %d --head %d --query %d ", view_layer(&v), view_head(&v),
             keymap_cell_at(v.qpt[0], g0->offset_px, g0->stride_px, g0->gh) * g0->gw +
                 keymap_cell_at(v.qpt[1], g0->offset_px, g0->stride_px, g0->gw));
    CHECK(strstr(cmd, "attnscope plot attention ") && strstr(cmd, want), "plot command: %s (want %s)", cmd, want);
    /* Tab: the scores of the same window */
    press(&v, VIEW_KEY_TAB);
    draw(&v, s);
    CHECK(v.ds == 1 && v.panels[1].ds == 1 && strstr(v.status, "scores head"), "Tab: scores (%s)", v.status);
    /* --query names a token of the selected layer's grid */
    CHECK(view_select(&v, -1, 2, -1, 7 * 7, &err) != AS_OK && strstr(err.msg, "tokens 0..48"), "%s", err.msg);
    CHECK(view_select(&v, -1, 2, -1, 3 * 7 + 5, &err) == AS_OK && v.query == 26, "--query 26 on 7 x 7: %d", v.query);
    cairo_surface_destroy(s);
    view_close(&v);
}

/* record --windows 0,3: the query's window unrecorded says so in one line; ',' and '.' step over
 * the recorded windows only, whose maps sit at their positions among them. */
static void test_window_subset(const char *path) {
    vit_config c;
    staged_config(&c, VIT_PAD_FIRST);
    as_error err = {0};
    CHECK(staged_write(path, &c, "0,1,2,3", "all", "0,3", "f32", 1, &err) == AS_OK, "write: %s", err.msg);
    view v;
    CHECK(view_open(&v, path, &err) == AS_OK, "open: %s", err.msg);
    if (err.status) return;
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
    CHECK(view_select(&v, 0, 0, 0, 7 * 14 + 7, &err) == AS_OK, "%s", err.msg); /* window 5 */
    draw(&v, s);
    CHECK(v.n_panels == 0 && strstr(v.message, "window 5, which holds the query, was not recorded") &&
          !strchr(v.message, '\n'), "unrecorded window: %d panels, \"%s\"", v.n_panels, v.message);
    int seen[4] = {0}, n = 0;
    for (int k = 0; k < 4; k++) {
        press(&v, '.');
        draw(&v, s);
        int w = view_query_window(&v, NULL, NULL);
        if (n < 4) seen[n++] = w;
        CHECK(v.n_panels == 2 && v.panels[1].window == w, "window %d drawn", w);
        /* the map panel is the window's map at its position among the recorded windows */
        float *A = malloc(2 * 16 * 16 * sizeof *A);
        trace_read_head(&v.src.tr, TRACE_Q_ATTN, 0, 0, 0, A, &err);
        int same = 1;
        for (int i = 0; i < 256; i++) same &= v.panels[1].values[i] == A[(w == 3 ? 256 : 0) + i];
        CHECK(same, "window %d's map read at its recorded position", w);
        free(A);
    }
    CHECK(seen[0] == 0 && seen[1] == 3 && seen[2] == 0 && seen[3] == 3, "'.' visits 0, 3, 0, 3: %d %d %d %d",
          seen[0], seen[1], seen[2], seen[3]);
    /* rollout needs every layer (and every window): refused in one line naming the fix */
    press(&v, 'r');
    CHECK(v.row != VIEW_ROW_ROLLOUT && strstr(v.message, "record with --layers all") && !strchr(v.message, '\n'),
          "rollout on a window subset: \"%s\"", v.message);
    cairo_surface_destroy(s);
    view_close(&v);
}

/* Moves the pointer to cell (r, c) of panel i, or clicks there, and draws. */
static void hover(view *v, cairo_surface_t *s, int i, int r, int c) {
    at_cell(v, VIEW_EV_MOTION, i, r, c);
    draw(v, s);
}

static void click_cell(view *v, cairo_surface_t *s, int i, int r, int c) {
    at_cell(v, VIEW_EV_CLICK, i, r, c);
    draw(v, s);
}

/* The similarity and ALS panels of an analysed staged trace: layers of other supports (shifted
 * and unshifted windows, other stages) are not compared and say so; a stage's missing heads
 * are no cells to open; a compared pair and a present head open as in a single-grid trace. */
static void test_results(const char *trace) {
    as_error err = {0};
    analyse_all(trace);
    view v;
    if (view_open(&v, trace, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1280, 800);
    draw(&v, s);
    press(&v, 's');
    draw(&v, s);
    CHECK(v.mode == VIEW_MODE_SIMILARITY && v.n_panels == 1 && v.panels[0].kind == VIEW_PANEL_SIMILARITY &&
          v.panels[0].rows == 6 && v.panels[0].cols == 6, "similarity: one 6 x 6 panel (mode %d, %d panels)",
          v.mode, v.n_panels);
    hover(&v, s, 0, 0, 1); /* block 0 unshifted, block 1 shifted */
    CHECK(strstr(v.status, "layers 0 and 1: not compared (their maps have different supports"),
          "hover over layers 0 and 1: %s", v.status);
    hover(&v, s, 0, 0, 0);
    CHECK(strstr(v.status, "similarity of layers 0 and 0: 1.0000"), "hover over layers 0 and 0: %s", v.status);
    click_cell(&v, s, 0, 3, 3);
    CHECK(v.mode == VIEW_MODE_PAIR && v.pair[0] == 3 && v.pair[1] == 3 && v.n_panels >= 2,
          "a click opens the pair (mode %d, %d panels)", v.mode, v.n_panels);
    press(&v, VIEW_KEY_ESCAPE);
    /* a pair of a 1-head and a 4-head layer: each column shows the head it has, the export names
     * it, and the head chosen before comes back */
    CHECK(view_select(&v, -1, 5, 3, -1, &err) == AS_OK, "%s", err.msg);
    press(&v, 's');
    draw(&v, s);
    click_cell(&v, s, 0, 0, 5);
    char cmd[600];
    view_plot_command(&v, "x", cmd, sizeof cmd);
    CHECK(v.mode == VIEW_MODE_PAIR && strstr(cmd, "--layer 0 --head 0 ") && strstr(cmd, "--layer 5 --head 3 "),
          "pair of layers 0 and 5: %s", cmd);
    press(&v, VIEW_KEY_ESCAPE);
    draw(&v, s);
    CHECK(view_layer(&v) == 5 && view_head(&v) == 3, "back from the pair: layer %d head %d", view_layer(&v),
          view_head(&v));
    press(&v, 'a');
    draw(&v, s);
    CHECK(v.mode == VIEW_MODE_ALS && v.panels[0].kind == VIEW_PANEL_ALS && v.panels[0].rows == 6 &&
          v.panels[0].cols == 4, "ALS: 6 layers x 4 heads (the most any stage has)");
    hover(&v, s, 0, 0, 3);
    CHECK(strstr(v.status, "layer 0 has no head 3"), "hover over a stage's missing head: %s", v.status);
    click_cell(&v, s, 0, 0, 3);
    CHECK(v.mode == VIEW_MODE_ALS && strstr(v.message, "layer 0 has no head 3"), "a click on a missing head "
          "stays (mode %d): %s", v.mode, v.message);
    click_cell(&v, s, 0, 5, 3);
    CHECK(v.mode == VIEW_MODE_QUERY && view_layer(&v) == 5 && view_head(&v) == 3,
          "a click on layer 5 head 3 opens it (layer %d head %d)", view_layer(&v), view_head(&v));
    cairo_surface_destroy(s);
    view_close(&v);
}

/* Rollout on a staged trace: from the query point's token of the selected layer back to layer
 * 0's 14 x 14 grid (the rollout metric's staged arithmetic, tested against
 * tools/analysis_ref.py by the reference suite). By linearity, the mean of the rows started
 * from each token of layer l is the metric's map[l] (started from the mean of layer l's
 * tokens), which pins the viewer's plumbing: the token under the point, the layer, the image,
 * the grid drawn. Every row sums to 1; the depth strip draws one rollout per layer, each on
 * layer 0's grid; Escape... r again turns it off. */
static void test_rollout(const char *trace) {
    as_error err = {0};
    view v;
    if (view_open(&v, trace, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
    draw(&v, s);
    press(&v, 'r');
    draw(&v, s);
    const trace_layer_geom *g0 = trace_layer(&v.src.tr, 0);
    const int n0 = g0->gh * g0->gw, L = v.src.tr.n_layers;
    CHECK(v.row == VIEW_ROW_ROLLOUT && v.n_panels >= 1 && v.panels[0].rows == g0->gh && v.panels[0].cols == g0->gw &&
          v.panels[0].stride_px == g0->stride_px, "r: rollout over layer 0's %d x %d grid (%s)", g0->gh, g0->gw,
          v.message);
    double *m;
    long d[6];
    int nd;
    if (fig_read(&v.src, "rollout", "map", "per_image", &m, d, &nd, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
    } else {
        for (int li = 0; li < L; li += 2) {
            const trace_layer_geom *g = trace_layer(&v.src.tr, li);
            double *mean = calloc((size_t)n0, sizeof *mean), worst_sum = 0;
            for (int t = 0; t < g->gh * g->gw; t++) {
                CHECK(view_select(&v, 0, li, -1, t, &err) == AS_OK, "%s", err.msg);
                draw(&v, s);
                double sum = 0;
                for (int j = 0; j < n0; j++) {
                    mean[j] += v.panels[0].values[j] / (g->gh * g->gw);
                    sum += v.panels[0].values[j];
                }
                worst_sum = fmax(worst_sum, fabs(sum - 1));
            }
            const double *want = m + (size_t)li * d[2]; /* image 0 */
            double e = 0;
            for (int j = 0; j < n0; j++) e = fmax(e, fabs(mean[j] - want[j]));
            CHECK(e < 1e-12, "layer %d: the mean of its tokens' rollouts is analyze's map (max difference %.3g)", li, e);
            CHECK(worst_sum < 1e-9, "layer %d: every rollout row sums to 1 (off by %.3g)", li, worst_sum);
            free(mean);
        }
        free(m);
    }
    press(&v, 'd');
    draw(&v, s);
    int ok = v.mode == VIEW_MODE_DEPTH && v.n_panels == L;
    for (int i = 0; ok && i < v.n_panels; i++) ok = v.panels[i].rows == g0->gh && v.panels[i].stride_px == g0->stride_px;
    CHECK(ok, "depth strip in rollout: %d panels, each on layer 0's grid", v.n_panels);
    if (getenv("VIEW_STAGED_SHOTS")) {
        char path[600];
        snprintf(path, sizeof path, "%s/rollout_depth.png", getenv("VIEW_STAGED_SHOTS"));
        cairo_surface_write_to_png(s, path);
        press(&v, VIEW_KEY_ESCAPE);
        CHECK(view_select(&v, 0, 4, -1, 5, &err) == AS_OK, "%s", err.msg);
        draw(&v, s);
        snprintf(path, sizeof path, "%s/rollout_query.png", getenv("VIEW_STAGED_SHOTS"));
        cairo_surface_write_to_png(s, path);
    }
    press(&v, 'r');
    draw(&v, s);
    CHECK(v.row != VIEW_ROW_ROLLOUT, "r again: rollout off");
    cairo_surface_destroy(s);
    view_close(&v);
}

int main(void) {
    check_tmp_init("view_staged");
    const char *trace = check_tmp("s.h5");
    vit_config c;
    staged_config(&c, VIT_PAD_FIRST);
    as_error err = {0};
    CHECK(staged_write(trace, &c, "all", "all", "all", "f32", 3, &err) == AS_OK, "write: %s", err.msg);
    runtime_set_threads(1);
    test_query(trace, getenv("VIEW_STAGED_SHOTS"));
    test_modes(trace);
    test_window_subset(check_tmp("w.h5"));
    test_results(trace);
    test_rollout(trace); /* after test_results: analysed */
    check_tmp_remove();
    return check_finish("view_staged");
}
