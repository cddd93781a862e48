/* test_maps.c: attention maps are not misleading, in the figures and the viewer alike: --cmap
 * takes effect in every map figure and every recipe refuses the options it does not use; a
 * map's colours start at 0 by default (a near-uniform map does not look structured); attention
 * that goes to the class token shows beside the overlay; the colour map default is the same in
 * plot and view, and the viewer's plot command carries the colour map it shows.
 * Written against the figure and view interfaces only, so it runs on older builds too. */
#define _POSIX_C_SOURCE 200809L
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../viewer/view.h"
#include "analysed.h"
#include "check.h"

/* Renders recipe `name` of trace to a PNG and returns its pixels (RGB24, w x h), or NULL. */
static unsigned char *render(const char *trace, const char *name, const fig_opts *base, int *w, int *h,
                             as_error *err) {
    fig_opts o = *base;
    if (fig_source_open(&o.src[0], trace, NULL, err) != AS_OK) return NULL;
    o.n_sources = 1;
    const char *png = check_tmp("r.png");
    as_status rc = figure_render(figure_find(name), &o, png, err);
    fig_source_close(&o.src[0]);
    if (rc != AS_OK) return NULL;
    cairo_surface_t *s = cairo_image_surface_create_from_png(png);
    unsigned char *px = NULL;
    if (cairo_surface_status(s) == CAIRO_STATUS_SUCCESS) {
        *w = cairo_image_surface_get_width(s);
        *h = cairo_image_surface_get_height(s);
        int stride = cairo_image_surface_get_stride(s);
        px = malloc((size_t)*w * *h * 3);
        const unsigned char *d = cairo_image_surface_get_data(s);
        for (int y = 0; px && y < *h; y++)
            for (int x = 0; x < *w; x++) {
                uint32_t p;
                memcpy(&p, d + (size_t)y * stride + 4 * (size_t)x, 4);
                unsigned char *q = px + ((size_t)y * *w + x) * 3;
                q[0] = p >> 16 & 255;
                q[1] = p >> 8 & 255;
                q[2] = p & 255;
            }
    }
    cairo_surface_destroy(s);
    return px;
}

static fig_opts defaults(void) {
    fig_opts o;
    memset(&o, 0, sizeof o);
    o.layer = o.head = o.image = o.query = -1;
    o.dpi = 100;
    return o;
}

/* --cmap changes the map figures; the default is the viewer's default. */
static void test_cmap(const char *trace) {
    as_error err = {0};
    view v;
    CHECK(view_open(&v, trace, &err) == AS_OK, "%s", err.msg);
    plot_cmap view_default = v.cmap;
    view_close(&v);
    const char *names[] = {"attention", "grid", "rollout", "similarity", "als", "cka"};
    for (int i = 0; i < 6; i++) {
        fig_opts o = defaults();
        int w[3], h[3];
        unsigned char *px[3];
        px[0] = render(trace, names[i], &o, &w[0], &h[0], &err);
        CHECK(px[0] != NULL, "%s: %s", names[i], err.msg);
        o.cmap_set = 1;
        o.cmap = view_default;
        px[1] = render(trace, names[i], &o, &w[1], &h[1], &err);
        o.cmap = view_default == PLOT_CMAP_MAGMA ? PLOT_CMAP_VIRIDIS : PLOT_CMAP_MAGMA;
        px[2] = render(trace, names[i], &o, &w[2], &h[2], &err);
        if (px[0] && px[1] && px[2]) {
            size_t n = (size_t)w[0] * h[0] * 3;
            CHECK(memcmp(px[0], px[1], n) == 0, "%s: the default colour map is not the viewer's (%s)",
                  names[i], plot_cmap_name(view_default));
            size_t differ = 0;
            for (size_t k = 0; k < n; k++) differ += px[1][k] != px[2][k];
            CHECK(differ > n / 50, "%s: --cmap %s changes %zu of %zu values", names[i],
                  plot_cmap_name(o.cmap), differ, n);
        }
        for (int k = 0; k < 3; k++) free(px[k]);
    }
}

/* Each recipe refuses an option it does not use, by name; the ones it uses it accepts. The
 * table is what each figure draws (docs/figures.md), not the recipes' own declarations. */
static void test_refusals(const char *trace) {
    static const struct { const char *name; const char *uses; } fig[] = {
        {"als", "cmap"}, {"similarity", "definition cmap"}, {"adjacent", "definition"},
        {"qk", ""}, {"evolution", ""}, {"cka", "cmap"}, {"distance", ""}, {"entropy", ""},
        {"attention", "layer head image query cmap"}, {"grid", "image query cmap"},
        {"rollout", "layer image cmap"}, {"lsla", "layer head image query"}};
    static const char *const opt[] = {"layer", "head", "image", "query", "definition", "cmap"};
    const vit_config *c;
    as_error err = {0};
    fig_source s;
    if (fig_source_open(&s, trace, NULL, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    c = &s.tr.cfg;
    int last = s.tr.layers[s.tr.n_layers - 1], lsla = -1, p = s.tr.num_prefix, g = vit_grid(c);
    for (int i = 0; i < s.tr.n_layers; i++)
        if (c->attn[s.tr.layers[i]].kind == VIT_ATTN_LSLA) lsla = s.tr.layers[i];
    fig_source_close(&s);
    for (size_t f = 0; f < sizeof fig / sizeof fig[0]; f++)
        for (int k = 0; k < 6; k++) {
            fig_opts o = defaults();
            int lay = strcmp(fig[f].name, "lsla") == 0 ? lsla : last;
            if (k == 0) o.layer = lay;
            if (k == 1) o.head = 0;
            if (k == 2) o.image = 0;
            if (k == 3) o.query = p + g + 1; /* a patch: the lsla figure wants one */
            if (k == 4) o.definition = "row";
            if (k == 5) o.cmap_set = 1, o.cmap = PLOT_CMAP_MAGMA;
            CHECK(fig_source_open(&o.src[0], trace, NULL, &err) == AS_OK, "%s", err.msg);
            o.n_sources = 1;
            char want[32];
            snprintf(want, sizeof want, "--%s", opt[k]);
            as_status rc = figure_render(figure_find(fig[f].name), &o, check_tmp("o.pdf"), &err);
            int uses = strstr(fig[f].uses, opt[k]) != NULL;
            if (uses)
                CHECK(rc == AS_OK, "%s %s: %s", fig[f].name, want, err.msg);
            else
                CHECK(rc == AS_ERR_ARG && strstr(err.msg, want) && strstr(err.msg, fig[f].name),
                      "%s ignores %s instead of refusing it (%s)", fig[f].name, want,
                      rc == AS_OK ? "drawn" : err.msg);
            fig_source_close(&o.src[0]);
        }
}

/* Sets row `query` of (image, layer, head)'s attn to row(key, T) for every key of its T; returns
 * T. */
static int write_row(const char *path, long image, int layer, int head, int query,
                     float (*row_of)(int key, int T)) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    char name[64];
    snprintf(name, sizeof name, "layers/%02d/attn", layer);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT), sp = H5Dget_space(d);
    hsize_t dims[4];
    H5Sget_simple_extent_dims(sp, dims, NULL);
    float row[4096] = {0};
    for (int j = 0; j < (int)dims[3] && j < 4096; j++) row[j] = row_of(j, (int)dims[3]);
    hsize_t start[4] = {(hsize_t)image, (hsize_t)head, (hsize_t)query, 0}, count[4] = {1, 1, 1, dims[3]};
    H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, count, NULL);
    hid_t mem = H5Screate_simple(4, count, NULL);
    CHECK(H5Dwrite(d, H5T_NATIVE_FLOAT, mem, sp, H5P_DEFAULT, row) >= 0, "write the sink row");
    H5Sclose(mem);
    H5Sclose(sp);
    H5Dclose(d);
    H5Fclose(f);
    return (int)dims[3];
}

static int sink_key;
static float sink_row(int key, int T) { return key == sink_key; }

/* Sets row `query` of (image, layer, head)'s attn to all weight on key `key`: an attention sink
 * on the class token, as LaViT's collapsed layers have. */
static void write_sink(const char *path, long image, int layer, int head, int query, int key) {
    sink_key = key;
    write_row(path, image, layer, head, query, sink_row);
}

static float uniform_row(int key, int T) { return 1.0f / T; }
/* A peaked row with no zero: half the keys 0.5/T, the other half 1.5/T (T even). */
static float peaked_row(int key, int T) { return (key % 2 ? 1.5f : 0.5f) / T; }

/* The grid shares one scale over its panels by mapscale's rule, in the chosen colour map: every
 * panel uniform but one peaked (0.5/T .. 1.5/T). Against all panels uniform, each uniform
 * panel's overlay changes by alpha x (cmap(before) - cmap(after)), whatever image lies under
 * it: zero-based, from cmap(1) (0 .. 1/T) to cmap(2/3) (0 .. 1.5/T); minmax, from cmap(0) (a
 * flat range) to cmap(1/2) (0.5/T .. 1.5/T). Panels on their own range would not change, a
 * union of ranges under zero would give minmax's colours. */
static void test_grid_shared(const char *trace) {
    as_error err = {0};
    fig_source s;
    if (fig_source_open(&s, trace, NULL, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    int L = s.tr.n_layers, H = s.tr.n_heads, layers[64], heads[64];
    for (int i = 0; i < L && i < 64; i++) layers[i] = s.tr.layers[i];
    for (int i = 0; i < H && i < 64; i++) heads[i] = s.tr.heads[i];
    fig_source_close(&s);
    for (int mode = 0; mode < 2; mode++) {
        unsigned char *px[2] = {NULL, NULL};
        int w[2], h[2];
        fig_opts o = defaults();
        o.query = 0;
        o.cmap_set = 1;
        o.cmap = mode ? PLOT_CMAP_VIRIDIS : PLOT_CMAP_MAGMA; /* the bar follows either */
        o.range = mode ? MAPSCALE_MINMAX : MAPSCALE_ZERO;
        o.range_set = 1;
        for (int k = 0; k < 2; k++) {
            for (int li = 0; li < L; li++)
                for (int hi = 0; hi < H; hi++)
                    write_row(trace, 0, layers[li], heads[hi], 0, k && li == 0 && hi == 0 ? peaked_row : uniform_row);
            px[k] = render(trace, "grid", &o, &w[k], &h[k], &err);
            CHECK(px[k] != NULL, "grid: %s", err.msg);
        }
        if (px[0] && px[1] && w[0] == w[1] && h[0] == h[1]) {
            double t0 = mode ? 0 : 1, t1 = mode ? 0.5 : 2.0 / 3;
            plot_color c0 = plot_cmap_color(o.cmap, t0), c1 = plot_cmap_color(o.cmap, t1);
            double want[3] = {0.6 * 255 * (c1.r - c0.r), 0.6 * 255 * (c1.g - c0.g), 0.6 * 255 * (c1.b - c0.b)};
            size_t changed = 0, match = 0, bar = 0;
            plot_color top = plot_cmap_color(o.cmap, 0.97);
            for (size_t i = 0; i < (size_t)w[0] * h[0]; i++) {
                const unsigned char *a = px[0] + 3 * i, *b = px[1] + 3 * i;
                int d[3] = {b[0] - a[0], b[1] - a[1], b[2] - a[2]};
                if (abs(d[0]) > 2 || abs(d[1]) > 2 || abs(d[2]) > 2) {
                    changed++;
                    match += fabs(d[0] - want[0]) <= 4 && fabs(d[1] - want[1]) <= 4 && fabs(d[2] - want[2]) <= 4;
                }
                /* the colour bar's top end, unblended: the chosen map */
                bar += abs(b[0] - (int)(255 * top.r)) <= 3 && abs(b[1] - (int)(255 * top.g)) <= 3 &&
                       abs(b[2] - (int)(255 * top.b)) <= 3;
            }
            fprintf(stderr, "grid --range %s: %zu pixels changed, %zu by the shared scale's step; bar %zu px\n",
                    mode ? "minmax" : "zero", changed, match, bar);
            CHECK(match > changed / 2, "grid --range %s: uniform panels not on the shared scale (%zu of %zu "
                  "changed pixels moved by (%.0f, %.0f, %.0f))", mode ? "minmax" : "zero", match, changed,
                  want[0], want[1], want[2]);
            CHECK(bar > 0, "grid: no colour bar in the chosen map (%s)", plot_cmap_name(o.cmap));
        }
        free(px[0]);
        free(px[1]);
    }
}

#define VW 1200
#define VH 760

static void draw(view *v, cairo_surface_t *s) {
    cairo_t *cr = cairo_create(s);
    view_draw(v, cr, VW, VH);
    cairo_destroy(cr);
    cairo_surface_flush(s);
}

/* The pixel at (x, y) view points. */
static void pixel(const view *v, cairo_surface_t *s, double x, double y, int rgb[3]) {
    int px = (int)(x * v->zoom), py = (int)(y * v->zoom);
    uint32_t p;
    memcpy(&p, cairo_image_surface_get_data(s) + (size_t)py * cairo_image_surface_get_stride(s) + 4 * (size_t)px, 4);
    rgb[0] = p >> 16 & 255;
    rgb[1] = p >> 8 & 255;
    rgb[2] = p & 255;
}

/* Colour ranges start at 0 and reach the uniform level; a class-token sink shows under the
 * overlay instead of a blank 0 .. 1e-9 map. */
static void test_view_scale(const char *trace, const char *sink) {
    as_error err = {0};
    view v;
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, VW, VH);
    if (view_open(&v, trace, &err) == AS_OK) {
        int T = v.src.tr.num_tokens;
        CHECK(view_select(&v, 0, v.src.tr.layers[0], -1, v.src.tr.num_prefix + 5, &err) == AS_OK, "%s", err.msg);
        draw(&v, s);
        CHECK(v.n_cbars >= 2 && v.cbars[0].lo == 0 && v.cbars[0].hi >= 1.0 / T - 1e-12,
              "overlay colours span [%g, %g]: want 0 .. at least 1/T = %g", v.cbars[0].lo, v.cbars[0].hi, 1.0 / T);
        CHECK(v.n_cbars >= 2 && v.cbars[1].lo == 0, "the full map's colours start at %g, not 0", v.cbars[1].lo);
        char cmd[4096], want[64];
        view_plot_command(&v, "x", cmd, sizeof cmd);
        snprintf(want, sizeof want, "--cmap %s", plot_cmap_name(v.cmap));
        CHECK(strstr(cmd, want) != NULL, "export command lacks %s: %s", want, cmd);
        v.cmap = v.cmap == PLOT_CMAP_MAGMA ? PLOT_CMAP_VIRIDIS : PLOT_CMAP_MAGMA;
        view_plot_command(&v, "x", cmd, sizeof cmd);
        snprintf(want, sizeof want, "--cmap %s", plot_cmap_name(v.cmap));
        CHECK(strstr(cmd, want) != NULL, "export command lacks %s: %s", want, cmd);
        view_close(&v);
    } else {
        CHECK(0, "%s", err.msg);
    }
    if (view_open(&v, sink, &err) == AS_OK) {
        int T = v.src.tr.num_tokens;
        CHECK(view_select(&v, 0, 1, 0, 0, &err) == AS_OK, "%s", err.msg);
        draw(&v, s);
        CHECK(v.n_cbars >= 1 && v.cbars[0].hi >= 1.0 / T - 1e-12,
              "a class-token sink: colours span [%g, %g], want up to 1/T = %g", v.cbars[0].lo, v.cbars[0].hi, 1.0 / T);
        /* under the overlay, its full width: the share going to the class token (all of it) */
        const view_panel *ip = &v.panels[0];
        int dark = 0, rgb[3];
        for (int k = 1; k < 20; k++) {
            int best = 0;
            for (double dy = 0.5; dy < 8; dy += 0.5) {
                pixel(&v, s, ip->x + ip->w * k / 20.0, ip->y + ip->h + dy, rgb);
                best |= rgb[0] < 90 && rgb[1] < 90 && rgb[2] < 90;
            }
            dark += best;
        }
        CHECK(dark == 19, "the class token's share is not shown under the overlay (%d of 19 samples dark)", dark);
        view_close(&v);
    } else {
        CHECK(0, "%s", err.msg);
    }
    cairo_surface_destroy(s);
}

/* The attention figure of the sink: a dark bar as wide as the image under it. */
static void test_figure_sink(const char *sink) {
    as_error err = {0};
    fig_opts o = defaults();
    o.layer = 1;
    o.head = 0;
    o.image = 0;
    o.query = 0;
    o.dpi = 144;
    int w, h;
    unsigned char *px = render(sink, "attention", &o, &w, &h, &err);
    CHECK(px != NULL, "%s", err.msg);
    if (!px) return;
    /* the longest run of the share bar's dark grey in any row of the lower half (the overlay
     * over the image is never that flat), against the widest run of non-white pixels (the
     * image) */
    int run_dark = 0, run_img = 0;
    for (int y = h / 2; y < h; y++)
        for (int x = 0, a = 0; x < w; x++) {
            const unsigned char *q = px + ((size_t)y * w + x) * 3;
            a = abs(q[0] - 51) <= 4 && abs(q[1] - 51) <= 4 && abs(q[2] - 51) <= 4 ? a + 1 : 0; /* 20% grey */
            run_dark = a > run_dark ? a : run_dark;
        }
    for (int x = 0, y = h / 2, a = 0; x < w; x++) { /* the image across the middle */
        const unsigned char *q = px + ((size_t)y * w + x) * 3;
        a = q[0] < 245 || q[1] < 245 || q[2] < 245 ? a + 1 : 0;
        run_img = a > run_img ? a : run_img;
    }
    CHECK(run_img > 0 && run_dark > 0.9 * run_img,
          "no bar for the class token's 100%% share under the image (dark run %d px, image %d px)", run_dark, run_img);
    free(px);
}

int main(void) {
    check_tmp_init("maps");
    char a[512], sink[512], gap[512];
    snprintf(a, sizeof a, "%s", check_tmp("mech_cls.h5"));
    snprintf(sink, sizeof sink, "%s", check_tmp("sink.h5"));
    analysed_copy("mech_cls", a);
    analysed_copy("mech_cls", sink);
    snprintf(gap, sizeof gap, "%s", check_tmp("gap.h5"));
    analysed_copy("vit_gap", gap);
    write_sink(sink, 0, 1, 0, 0, 0);
    test_cmap(a);
    test_refusals(a);
    test_view_scale(a, sink);
    test_figure_sink(sink);
    test_grid_shared(gap);
    check_tmp_remove();
    return check_finish("maps");
}
