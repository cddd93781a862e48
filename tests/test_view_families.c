/* test_view_families.c: the viewer on PVT v2 and CaiT traces, drawn offscreen.
 *
 * PVT v2 (spatial-reduction layers: T queries over a reduced key grid), recorded by `attnscope
 * record` from the tiny fixtures pvt_tiny (58 px, a 15 x 15 grid reduced by a 4 x 4 conv to 3 x 3
 * keys, which leave the last 3 tokens of each axis out, then R = 2 and R = 1) and pvt_li (linear
 * SRA: a 10 x 10 and a 5 x 5 grid pooled to 7 x 7 keys, with unequal and overlapping bins). For
 * query points on every layer it checks, from the reader alone: the query token is the cell under
 * the point at the layer's stride; the image panel's cells are the key grid and hold the query
 * token's row; a conv key's cell covers the pixels of the tokens it reduces; the brightest cell is
 * the row's argmax in the colour map's top colour; the map panel is the T x T' map; the status bar
 * and the hover text name the key grid.
 *
 * CaiT (cait_tiny): a class-attention layer shows the class token's row over the patches (the
 * class token's own weight in the scale, not on the image), its 1 x (1 + N) map, no query cell;
 * a talking-heads layer's signed map is drawn on a min..max scale, never as probabilities.
 * Screenshots go to $VIEW_FAMILIES_SHOTS when set. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "../cli/cli.h"
#include "../viewer/view.h"
#include "check.h"

#define W 1200
#define H 760
#include "viewtest.h"

/* attnscope record as main calls it: cmd_record(argc - 1, argv + 1), the program name before. */
static int record(const char *fixture, const char *inputs, const char *out) {
    char dir[512], images[512], path[512], a[9][16] = {"attnscope", "record", "--model", "--images", "--out",
                                                          "--record", "all", "--dtype", "f32"}, q[16] = "--quiet";
    snprintf(dir, sizeof dir, "%s", fx(fixture));
    snprintf(images, sizeof images, "%s", fx(inputs));
    snprintf(path, sizeof path, "%s", out);
    char *argv[] = {a[0], a[1], a[2], dir, a[3], images, a[4], path, a[5], a[6], a[7], a[8], q, NULL};
    return cmd_record(12, argv + 1);
}

/* The token of the cell that holds pixel p along an axis of n tokens centred at off + stride i. */
static int cell(double p, double off, double stride, int n) {
    int c = (int)floor((p - off) / stride + 0.5);
    return c < 0 ? 0 : c >= n ? n - 1 : c;
}

static void check_layer(view *v, cairo_surface_t *s, int layer, double py, double px, const char *shots) {
    const trace_reader *r = &v->src.tr;
    const trace_layer_geom *g = trace_layer(r, layer);
    as_error err = {0};
    CHECK(view_select(v, 0, layer, 0, 0, &err) == AS_OK, "select layer %d: %s", layer, err.msg);
    v->qpt[0] = py, v->qpt[1] = px;
    v->query_locked = 1;
    v->opacity = 1;
    draw(v, s);
    const int t = cell(py, g->offset_px, g->stride_px, g->gh) * g->gw + cell(px, g->offset_px, g->stride_px, g->gw);
    const int K = g->kgh * g->kgw, T = g->gh * g->gw;
    char what[96];
    snprintf(what, sizeof what, "layer %d, point (%.1f, %.1f), token %d", layer, py, px, t);
    CHECK(g->scope == VIT_SCOPE_SRA && g->Tq == T && g->Tk == K, "%s: an SRA layer of %d x %d", what, T, K);
    CHECK(v->query == t, "%s: the viewer's query is token %d", what, v->query);
    float *A = malloc((size_t)T * K * sizeof *A);
    CHECK(trace_read_head(r, TRACE_Q_ATTN, 0, layer, 0, A, &err) == AS_OK, "%s: %s", what, err.msg);
    const view_panel *ip = &v->panels[0], *mp = &v->panels[1];
    CHECK(v->n_panels == 2 && ip->kind == VIEW_PANEL_IMAGE && ip->rows == g->kgh && ip->cols == g->kgw && ip->kspan,
          "%s: the image panel's cells are the %d x %d keys (%d x %d)", what, g->kgh, g->kgw, ip->rows, ip->cols);
    int same = 1, best = 0;
    for (int j = 0; j < K; j++) {
        same &= ip->values[j] == (double)A[(size_t)t * K + j];
        if (A[(size_t)t * K + j] > A[(size_t)t * K + best]) best = j;
    }
    CHECK(same, "%s: the overlay holds the query token's row over the keys", what);
    /* a conv key covers the pixels of its R x R tokens (clipped to the image) */
    if (g->sr_ratio > 0) {
        const double k = ip->w / ip->img, R = g->sr_ratio;
        int spans = 1;
        for (int a = 0; a < g->kgh; a++) {
            double x, y, w, h;
            view_panel_cell_centre(ip, a, a < g->kgw ? a : 0, &x, &y);
            const double lo = fmax(0, g->offset_px + g->stride_px * (R * a - 0.5));
            const double hi = fmin(ip->img, g->offset_px + g->stride_px * (R * a + R - 0.5));
            y = (y - ip->y) / k;
            (void)w, (void)h;
            spans &= fabs(y - (lo + hi) / 2) < 1e-6;
        }
        CHECK(spans, "%s: conv key rows centred on the pixels of their %g x %g tokens", what, R, R);
    }
    double x, y, c[3];
    view_panel_cell_centre(ip, best / ip->cols, best % ip->cols, &x, &y);
    pixel(v, s, x + 0.7, y + 0.7, c);
    plot_color top = plot_cmap_color(v->cmap, 1);
    CHECK(fabs(c[0] - top.r) < 0.03 && fabs(c[1] - top.g) < 0.03 && fabs(c[2] - top.b) < 0.03,
          "%s: the row's argmax key (%d) is drawn in the colour map's top colour (%.2f %.2f %.2f)", what, best,
          c[0], c[1], c[2]);
    int brightest = 0;
    for (int j = 1; j < K; j++)
        if (ip->values[j] > ip->values[brightest]) brightest = j;
    CHECK(brightest == best, "%s: brightest cell %d, map argmax %d", what, brightest, best);
    int msame = mp->kind == VIEW_PANEL_MAP && mp->rows == T && mp->cols == K;
    for (int i = 0; msame && i < T * K; i++) msame &= mp->values[i] == (double)A[i];
    CHECK(msame, "%s: the map panel is the %d x %d map", what, T, K);
    char st[96];
    snprintf(st, sizeof st, "spatial reduction, grid %d x %d, keys %d x %d", g->gh, g->gw, g->kgh, g->kgw);
    CHECK(strstr(v->status, st) != NULL, "%s: status says \"%s\": %s", what, st, v->status);
    /* hovering key (0, 1): the value and the tokens it reduces */
    view_panel_cell_centre(ip, 0, 1, &x, &y);
    view_event e = {.type = VIEW_EV_MOTION, .x = x * v->zoom, .y = y * v->zoom};
    view_handle(v, &e);
    draw(v, s);
    char hv[128];
    const int b = g->sr_pool ? g->gw : 0; /* a pool's bin 1 along x: tokens floor(n/7) .. ceil(2n/7) - 1 */
    if (g->sr_pool)
        snprintf(hv, sizeof hv, "attn at key (0, 1) of %d x %d (the mean of tokens y 0-%d, x %d-%d): %.4g", g->kgh,
                 g->kgw, (g->gh + 6) / 7 - 1, b / 7, (2 * b + 6) / 7 - 1, A[(size_t)t * K + 1]);
    else
        snprintf(hv, sizeof hv, "attn at key (0, 1) of %d x %d (a conv over tokens y 0-%d, x %d-%d): %.4g", g->kgh,
                 g->kgw, g->sr_ratio - 1, g->sr_ratio, 2 * g->sr_ratio - 1, A[(size_t)t * K + 1]);
    CHECK(strstr(v->status, hv) != NULL, "%s: hover text \"%s\": %s", what, hv, v->status);
    CHECK(v->query == t, "%s: a locked query stays when the pointer moves", what);
    if (shots) {
        char path[600];
        snprintf(path, sizeof path, "%s/pvt_layer%d.png", shots, layer);
        cairo_surface_write_to_png(s, path);
    }
    free(A);
}

static void test_trace(const char *fixture, const char *inputs, const char *name, const char *shots) {
    const char *trace = check_tmp(name);
    CHECK(record(fixture, inputs, trace) == 0, "record %s", fixture);
    view v;
    as_error err = {0};
    CHECK(view_open(&v, trace, &err) == AS_OK, "%s: a PVT v2 trace opens: %s", fixture, err.msg);
    if (err.status) return;
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
    const trace_reader *r = &v.src.tr;
    const double img = r->cfg.img_size;
    const double pts[3][2] = {{0.5 * img, 0.5 * img}, {2.0, img - 1.0}, {img - 2.0, 0.3 * img}};
    for (int li = 0; li < r->n_layers; li++)
        for (int k = 0; k < 3; k++) check_layer(&v, s, r->layers[li], pts[k][0], pts[k][1], k == 0 ? shots : NULL);
    /* clicking the image moves the query to the token under the point, not to a key cell */
    CHECK(view_select(&v, 0, r->layers[0], 0, 0, &err) == AS_OK, "select: %s", err.msg);
    v.query_locked = 0;
    draw(&v, s);
    const view_panel *ip = &v.panels[0];
    const trace_layer_geom *g = trace_layer(r, r->layers[0]);
    view_event e = {.type = VIEW_EV_CLICK, .x = (ip->x + 0.9 * ip->w) * v.zoom, .y = (ip->y + 0.1 * ip->h) * v.zoom};
    view_handle(&v, &e);
    draw(&v, s);
    const int want = cell(0.1 * img, g->offset_px, g->stride_px, g->gh) * g->gw + cell(0.9 * img, g->offset_px, g->stride_px, g->gw);
    CHECK(v.query == want && v.query_locked, "%s: a click sets the query token %d (got %d)", fixture, want, v.query);
    /* the depth strip draws every layer over its own key grid */
    view_event d = {.type = VIEW_EV_KEY, .key = 'd'};
    view_handle(&v, &d);
    draw(&v, s);
    int strip = v.n_panels == r->n_layers;
    for (int i = 0; strip && i < v.n_panels; i++) {
        const trace_layer_geom *gl = trace_layer(r, v.panels[i].layer);
        strip = v.panels[i].kind == VIEW_PANEL_IMAGE && v.panels[i].rows == gl->kgh && v.panels[i].cols == gl->kgw;
    }
    CHECK(strip, "%s: the depth strip has one key-grid panel per layer (%d panels)", fixture, v.n_panels);
    cairo_surface_destroy(s);
    view_close(&v);
}

/* CaiT: the class row of layer `layer` (class attention) and a talking-heads layer 0 */
static void test_cait(const char *shots) {
    const char *trace = check_tmp("cait.h5");
    CHECK(record("cait_tiny", "inputs.npy", trace) == 0, "record cait_tiny");
    view v;
    as_error err = {0};
    CHECK(view_open(&v, trace, &err) == AS_OK, "a CaiT trace opens: %s", err.msg);
    if (err.status) return;
    const trace_reader *r = &v.src.tr;
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
    const int layer = 2;
    const trace_layer_geom *g = trace_layer(r, layer);
    CHECK(g->scope == VIT_SCOPE_CLASS && g->Tq == 1 && g->prefix == 1, "layer 2 is class attention");
    CHECK(view_select(&v, 1, layer, 1, 0, &err) == AS_OK, "select: %s", err.msg);
    v.opacity = 1;
    draw(&v, s);
    const int T = g->T, P = g->gh * g->gw;
    float *A = malloc((size_t)T * sizeof *A);
    CHECK(trace_read_head(r, TRACE_Q_ATTN, 1, layer, 1, A, &err) == AS_OK, "%s", err.msg);
    const view_panel *ip = &v.panels[0], *mp = &v.panels[1];
    int same = ip->rows == g->gh && ip->cols == g->gw && ip->query < 0, best = 0;
    for (int i = 0; same && i < P; i++) {
        same &= ip->values[i] == (double)A[1 + i];
        if (A[1 + i] > A[1 + best]) best = i;
    }
    CHECK(same, "class row: the image panel holds the class token's row over the %d patches, no query cell", P);
    double x, y, c[3];
    view_panel_cell_centre(ip, best / ip->cols, best % ip->cols, &x, &y);
    pixel(&v, s, x + 0.7, y + 0.7, c);
    plot_color top = plot_cmap_color(v.cmap, 1);
    CHECK(A[1 + best] > A[0] ? fabs(c[0] - top.r) < 0.03 && fabs(c[1] - top.g) < 0.03 && fabs(c[2] - top.b) < 0.03 : 1,
          "class row: its largest patch weight in the top colour (%.2f %.2f %.2f)", c[0], c[1], c[2]);
    int msame = mp->kind == VIEW_PANEL_MAP && mp->rows == 1 && mp->cols == T;
    for (int j = 0; msame && j < T; j++) msame &= mp->values[j] == (double)A[j];
    CHECK(msame, "class row: the map panel is the 1 x %d row", T);
    CHECK(ip->scale.probability && fabs(ip->scale.prefix_share - A[0]) < 1e-6,
          "class row: a probability row whose class-token share is %.4f (%.4f)", A[0], ip->scale.prefix_share);
    CHECK(strstr(v.status, "class attention over [cls; 4 x 4 patches]") && strstr(v.status, "query class token"),
          "class row: status %s", v.status);
    if (shots) {
        char path[600];
        snprintf(path, sizeof path, "%s/cait_class.png", shots);
        cairo_surface_write_to_png(s, path);
    }
    /* a click on the map's one row keeps the class token as the query, with a note */
    view_panel_cell_centre(mp, 0, 3, &x, &y);
    view_event e = {.type = VIEW_EV_CLICK, .x = x * v.zoom, .y = y * v.zoom};
    view_handle(&v, &e);
    CHECK(strstr(v.message, "its one query is the class token") != NULL, "class row click: %s", v.message);
    /* layer 0: talking heads, a signed map on a min..max scale, never probabilities */
    CHECK(view_select(&v, 1, 0, 0, 0, &err) == AS_OK, "select: %s", err.msg);
    v.qpt[0] = v.qpt[1] = 13;
    v.query_locked = 1;
    draw(&v, s);
    const trace_layer_geom *g0 = trace_layer(r, 0);
    float *B = malloc((size_t)g0->T * g0->T * sizeof *B);
    CHECK(trace_read_head(r, TRACE_Q_ATTN, 1, 0, 0, B, &err) == AS_OK, "%s", err.msg);
    const int t = v.query;
    int neg = 0, bsame = v.panels[0].rows == g0->gh;
    for (int j = 0; j < g0->T; j++) {
        neg |= B[(size_t)t * g0->T + j] < 0;
        bsame &= v.panels[0].values[j] == (double)B[(size_t)t * g0->T + j];
    }
    CHECK(g0->attn_signed && bsame, "talking heads: the overlay is the query token's signed row");
    CHECK(!v.panels[0].scale.probability && (!neg || v.panels[0].scale.lo < 0),
          "talking heads: not drawn as probabilities (lo %g)", v.panels[0].scale.lo);
    free(A);
    free(B);
    cairo_surface_destroy(s);
    view_close(&v);
}

int main(void) {
    check_tmp_init("view_families");
    const char *shots = getenv("VIEW_FAMILIES_SHOTS");
    test_trace("pvt_tiny", "pvt_tiny/inputs58.npy", "tiny.h5", shots);
    test_trace("pvt_li", "pvt_li/inputs40.npy", "li.h5", NULL);
    test_cait(shots);
    check_tmp_remove();
    return check_finish("view_families");
}
