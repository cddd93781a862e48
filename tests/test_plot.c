/* test_plot.c: the plotting module and the figure recipes: colour maps and ticks, a rendering
 * compared with a committed reference PNG, every recipe as valid PDF (font embedded), SVG and
 * PNG, and the errors a user meets. PLOT_UPDATE_REFERENCE=1 rewrites the reference (look at it
 * first: tests/fixtures/plot/reference.png). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../analysis/analysis.h"
#include "../io/image.h"
#include "../plot/figures.h"
#include "../plot/plot.h"
#include "analysed.h"
#include "check.h"


static void test_basics(void) {
    plot_color c = plot_cmap_color(PLOT_CMAP_VIRIDIS, 0);
    CHECK(lround(c.r * 255) == 0x44 && lround(c.g * 255) == 0x01 && lround(c.b * 255) == 0x54, "viridis(0)");
    c = plot_cmap_color(PLOT_CMAP_VIRIDIS, 1);
    CHECK(lround(c.r * 255) == 0xfd && lround(c.g * 255) == 0xe7 && lround(c.b * 255) == 0x25, "viridis(1)");
    c = plot_cmap_color(PLOT_CMAP_MAGMA, 2.0); /* clamped */
    CHECK(lround(c.r * 255) == 0xfc && lround(c.b * 255) == 0xbf, "magma clamps");
    c = plot_cmap_color(PLOT_CMAP_DIVERGING, 0.5);
    CHECK(lround(c.r * 255) == 0xf7 && lround(c.g * 255) == 0xf7, "diverging centre is neutral");
    /* perceptual order: lightness rises monotonically along viridis and magma */
    for (int m = 0; m < 2; m++) {
        double prev = -1;
        int mono = 1;
        for (int i = 0; i <= 100; i++) {
            plot_color k = plot_cmap_color((plot_cmap)m, i / 100.0);
            double y = 0.2126 * k.r + 0.7152 * k.g + 0.0722 * k.b;
            mono &= y >= prev - 1e-9;
            prev = y;
        }
        CHECK(mono, "%s lightness is monotonic", plot_cmap_name((plot_cmap)m));
    }
    double lo = 0.013, hi = 0.87;
    plot_nice_range(&lo, &hi);
    CHECK(fabs(lo - 0.0) < 1e-12 && fabs(hi - 1.0) < 1e-12, "nice range [%g, %g]", lo, hi);
    lo = 3.2;
    hi = 117;
    plot_nice_range(&lo, &hi);
    CHECK(lo == 0 && hi == 120, "nice range [%g, %g]", lo, hi);
    CHECK(plot_cmap_parse("magma") == PLOT_CMAP_MAGMA && plot_cmap_parse("jet") < 0, "cmap names");
}

/* A simple known plot: a line with a band, a scatter, bars, a heatmap with a colour bar. */
static as_status known_plot(const char *path, as_error *err) {
    plot_figure *f;
    if (plot_figure_begin(&f, path, PLOT_DOUBLE, 170, 100, err) != AS_OK) return err->status;
    plot_axes a = plot_axes_grid(f, 0, 0, 3, 1, 0), b = plot_axes_grid(f, 1, 0, 3, 1, 0),
              c = plot_axes_grid(f, 2, 0, 3, 1, 46);
    double x[12], y[12], lo[12], hi[12], y2[12];
    for (int i = 0; i < 12; i++) {
        x[i] = i;
        y[i] = 0.2 + 0.06 * i;
        lo[i] = y[i] - 0.05;
        hi[i] = y[i] + 0.05;
        y2[i] = 0.9 - 0.05 * i;
    }
    plot_axes_range(&a, 0, 11, 0, 1);
    plot_line(f, &a, x, y, 12, plot_series_color(0), PLOT_MARK_CIRCLE, lo, hi);
    plot_line(f, &a, x, y2, 12, plot_series_color(1), PLOT_MARK_SQUARE, NULL, NULL);
    plot_axes_draw(f, &a, "Lines", "layer", "value");
    const char *names[] = {"rising", "falling"};
    plot_color cols[] = {plot_series_color(0), plot_series_color(1)};
    plot_marker marks[] = {PLOT_MARK_CIRCLE, PLOT_MARK_SQUARE};
    plot_legend(f, &a, names, 2, cols, marks, PLOT_LEGEND_INSIDE_RIGHT);
    double v[8] = {0.3, 0.6, 0.5, 0.8, 0.2, 0.4, 0.9, 0.1};
    plot_color bc[2] = {plot_cmap_color(PLOT_CMAP_VIRIDIS, 0.2), plot_cmap_color(PLOT_CMAP_VIRIDIS, 0.8)};
    b.xcat = 1;
    plot_axes_range(&b, -0.5, 3.5, 0, 1);
    plot_bars(f, &b, v, NULL, 4, 2, bc);
    plot_axes_draw(f, &b, "Bars", "group", NULL);
    double h[36];
    for (int i = 0; i < 36; i++) h[i] = (i % 6) * 0.2 - (i / 6) * 0.1;
    fig_heatmap(f, &c, h, 6, 6, NULL, NULL, -0.5, 1.0, PLOT_CMAP_DIVERGING, "Heatmap", "column", "row", "value");
    return plot_figure_end(f, err);
}

static void test_reference_png(void) {
    as_error err = {0};
    char ref[512];
    snprintf(ref, sizeof ref, "%s/plot/reference.png", fixtures());
    const char *out = getenv("PLOT_UPDATE_REFERENCE") ? ref : check_tmp("known.png");
    CHECK(known_plot(out, &err) == AS_OK, "known plot: %s", err.msg);
    image got, want;
    if (image_load(&got, out, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    if (image_load(&want, ref, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        image_free(&got);
        return;
    }
    CHECK(got.w == want.w && got.h == want.h, "size %dx%d, reference %dx%d", got.w, got.h, want.w, want.h);
    if (got.w == want.w && got.h == want.h) {
        size_t n = (size_t)got.w * got.h * 3, far = 0;
        double sum = 0;
        for (size_t i = 0; i < n; i++) {
            int d = abs((int)got.rgb[i] - (int)want.rgb[i]);
            sum += d;
            far += d > 48;
        }
        /* text antialiasing may differ slightly between cairo/freetype builds; shapes may not */
        CHECK(sum / n < 1.0 && far < n / 500, "rendering differs from the reference: mean |diff| %.3f, "
              "%zu values off by > 48", sum / n, far);
        fprintf(stderr, "reference PNG %dx%d: mean |diff| %.4f, %zu values off by > 48\n", got.w, got.h, sum / n, far);
    }
    image_free(&got);
    image_free(&want);
}

static int file_has(const char *path, const char *needle, const unsigned char *magic, size_t mlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    int ok = buf && fread(buf, 1, (size_t)n, f) == (size_t)n;
    fclose(f);
    if (ok) {
        buf[n] = 0;
        ok = (size_t)n >= mlen && memcmp(buf, magic, mlen) == 0;
        if (ok && needle) {
            ok = 0;
            for (long i = 0; i + (long)strlen(needle) <= n && !ok; i++)
                ok = memcmp(buf + i, needle, strlen(needle)) == 0;
        }
    }
    free(buf);
    return ok;
}

/* The map scale (plot/mapscale.c), from values worked by hand. */
static void test_mapscale(void) {
    enum { T = 65 };
    double row[T], m[2 * T];
    mapscale s;
    /* uniform: the colours span 0 .. 1/T, the peak is 1 x uniform */
    for (int j = 0; j < T; j++) row[j] = 1.0 / T;
    mapscale_make(&s, row, 1, T, 1, 1, MAPSCALE_ZERO);
    CHECK(s.probability && s.zero && s.lo == 0 && fabs(s.hi - 1.0 / T) < 1e-15 && fabs(s.ratio - 1) < 1e-12 &&
          fabs(s.prefix_share - 1.0 / T) < 1e-15, "uniform: [%g, %g] ratio %g share %g", s.lo, s.hi, s.ratio, s.prefix_share);
    /* an untrained model's row: 0.0147 .. 0.0162 (uniform 0.01538): from 0, not min..max */
    for (int j = 0; j < T; j++) row[j] = 0.0147 + 0.0015 * (j % 2);
    double sum = 0;
    for (int j = 0; j < T; j++) sum += row[j];
    for (int j = 0; j < T; j++) row[j] /= sum;
    double mx = 0.0162 / sum;
    mapscale_make(&s, row, 1, T, 1, 1, MAPSCALE_ZERO);
    CHECK(s.lo == 0 && fabs(s.hi - mx) < 1e-15 && fabs(s.ratio - mx * T) < 1e-12, "near uniform: [%g, %g] ratio %g",
          s.lo, s.hi, s.ratio);
    mapscale_make(&s, row, 1, T, 1, 1, MAPSCALE_MINMAX);
    CHECK(!s.zero && fabs(s.lo - 0.0147 / sum) < 1e-15 && fabs(s.hi - mx) < 1e-15, "min-max: [%g, %g]", s.lo, s.hi);
    /* a class-token sink: the patches get nothing; the range still reaches 1/T, the share is 1 */
    memset(row, 0, sizeof row);
    row[0] = 1;
    mapscale_make(&s, row, 1, T, 1, 1, MAPSCALE_ZERO);
    CHECK(s.probability && s.lo == 0 && fabs(s.hi - 1.0 / T) < 1e-15 && s.prefix_share == 1 && s.token_share[0] == 1 &&
          s.ratio == 0, "sink: [%g, %g] share %g", s.lo, s.hi, s.prefix_share);
    char t[160];
    mapscale_text(&s, 0, t, sizeof t);
    CHECK(strstr(t, "class token 100.0%") && strstr(t, "patches 0.0%"), "sink text: %s", t);
    mapscale_text(&s, 1, t, sizeof t);
    CHECK(strstr(t, "cls 100%") != NULL, "compact: %s", t);
    mapscale_make(&s, row, 1, T, 1, 1, MAPSCALE_MINMAX);
    CHECK(s.lo == 0 && fabs(s.hi - 1.0 / T) < 1e-15, "sink min-max: a readable range [%g, %g], not 0..1e-9", s.lo, s.hi);
    /* distilled: two prefix tokens, two rows: the mean shares */
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < T; j++) m[i * T + j] = j == 0 ? 0.5 - 0.25 * i : j == 1 ? 0.25 : 0.25 / (T - 2) * (1 + i);
    mapscale_make(&s, m, 2, T, 2, 0, MAPSCALE_ZERO);
    CHECK(s.probability && fabs(s.prefix_share - 0.625) < 1e-12 && fabs(s.token_share[0] - 0.375) < 1e-12 &&
          fabs(s.token_share[1] - 0.25) < 1e-12 && fabs(s.max - 0.5) < 1e-15, "distilled: share %g (%g, %g) max %g",
          s.prefix_share, s.token_share[0], s.token_share[1], s.max);
    mapscale_name_prefix(&s, m, 2, T, 1, 1, 0);
    mapscale_text(&s, 0, t, sizeof t);
    CHECK(strstr(t, "class 37.5%, distillation 25.0%, patches 37.5%") != NULL, "distilled text: %s", t);
    /* the same two prefix columns as a class token and a register (a reg1 model): not
     * "distillation", and the register's share is its own */
    mapscale_make(&s, m, 2, T, 2, 0, MAPSCALE_ZERO);
    mapscale_name_prefix(&s, m, 2, T, 1, 0, 1);
    mapscale_text(&s, 0, t, sizeof t);
    CHECK(strstr(t, "class 37.5%, registers 25.0%, patches 37.5%") != NULL && !strstr(t, "distillation"),
          "class + register text: %s", t);
    /* unnamed, two prefix tokens are not guessed to be class and distillation */
    mapscale_make(&s, m, 2, T, 2, 0, MAPSCALE_ZERO);
    mapscale_text(&s, 0, t, sizeof t);
    CHECK(strstr(t, "prefix tokens 62.5%") != NULL && !strstr(t, "distillation"), "unnamed text: %s", t);
    /* registers only (no class token) */
    mapscale_make(&s, m, 2, T, 2, 0, MAPSCALE_ZERO);
    mapscale_name_prefix(&s, m, 2, T, 0, 0, 2);
    mapscale_text(&s, 0, t, sizeof t);
    CHECK(strstr(t, "registers 62.5%, patches 37.5%") != NULL, "registers text: %s", t);
    /* scores: signed, no distribution: min..max, no uniform level, no share */
    for (int j = 0; j < T; j++) row[j] = j - 20.0;
    mapscale_make(&s, row, 1, T, 1, 1, MAPSCALE_ZERO);
    CHECK(!s.probability && !s.zero && s.lo == -19 && s.hi == 44 && isnan(s.ratio) && isnan(s.prefix_share),
          "scores: [%g, %g]", s.lo, s.hi);
    mapscale_text(&s, 0, t, sizeof t);
    CHECK(strstr(t, "min..max") != NULL, "scores text: %s", t);
    /* non-negative but not a distribution (Refiner's expanded maps): from 0, no 1/T */
    for (int j = 0; j < T; j++) row[j] = 0.5 + 0.01 * j;
    mapscale_make(&s, row, 1, T, 1, 0, MAPSCALE_ZERO);
    CHECK(!s.probability && s.zero && s.lo == 0 && fabs(s.hi - 1.14) < 1e-12 && isnan(s.uniform), "expanded: [%g, %g]",
          s.lo, s.hi);
    /* its note says what is drawn: 0..max, not min..max */
    mapscale_text(&s, 0, t, sizeof t);
    CHECK(strstr(t, "colours span 0..max") != NULL, "expanded text: %s", t);
    /* stored patches only (rollout): the prefix share is what they leave of 1 */
    double pt[64];
    for (int j = 0; j < 64; j++) pt[j] = 0.9 / 64;
    pt[3] = 0.9 / 64 + 0.05;
    mapscale_make_patches(&s, pt, 64, 65, MAPSCALE_ZERO);
    CHECK(s.probability && fabs(s.prefix_share - 0.05) < 1e-12 && fabs(s.ratio - pt[3] * 65) < 1e-12,
          "patches: share %g ratio %g", s.prefix_share, s.ratio);
    /* widening: one range over several maps */
    mapscale a, b;
    for (int j = 0; j < T; j++) row[j] = 1.0 / T;
    mapscale_make(&a, row, 1, T, 1, 1, MAPSCALE_ZERO);
    memset(row, 0, sizeof row);
    row[5] = 1;
    mapscale_make(&b, row, 1, T, 1, 1, MAPSCALE_ZERO);
    mapscale_widen(&a, &b);
    CHECK(a.lo == 0 && a.hi == 1 && a.max == 1, "widened [%g, %g]", a.lo, a.hi);
    CHECK(mapscale_range_parse("zero") == MAPSCALE_ZERO && mapscale_range_parse("minmax") == MAPSCALE_MINMAX &&
          mapscale_range_parse("log") < 0, "range names");

    /* the colour bar's 1/T mark: a white line across the bar at its level */
    cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 800, 800);
    cairo_t *cr = cairo_create(img);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_scale(cr, 4, 4); /* 4 pixels a point: the 0.6 pt line has pure pixels */
    plot_figure *f = plot_figure_wrap(cr, 200, 200);
    plot_axes ax = {.x = 10, .y = 20, .w = 100, .h = 100};
    plot_colorbar_extra x = {.has_mark = 1, .mark = 0.25, .mark_label = "1/T"};
    plot_colorbar_ex(f, &ax, 0, 1, PLOT_CMAP_VIRIDIS, "w", &x);
    plot_figure_abort(f);
    cairo_destroy(cr);
    cairo_surface_flush(img);
    const unsigned char *d = cairo_image_surface_get_data(img);
    int stride = cairo_image_surface_get_stride(img), n_light = 0, first = -1;
    for (int y = 80; y < 480; y++) { /* pixel rows of the bar; the mark at 4 * (20 + 75) = 380 */
        uint32_t p;
        memcpy(&p, d + (size_t)y * stride + 4 * 480, 4);
        if ((p >> 16 & 255) > 230 && (p >> 8 & 255) > 230 && (p & 255) > 230) {
            n_light++;
            if (first < 0) first = y;
        }
    }
    CHECK(n_light >= 1 && n_light <= 3 && first >= 378 && first <= 381, "the mark: %d light pixel rows from %d",
          n_light, first);
    cairo_surface_destroy(img);
}

/* Options a recipe does not use are refused; --range, --labels and --dpi where they apply. */
static void test_options(const char *path) {
    char trace[512]; /* check_tmp's buffers rotate */
    snprintf(trace, sizeof trace, "%s", path);
    as_error err = {0};
    struct { const char *fig, *out; int range, labels, dpi, cmap; int ok; const char *msg; } c[] = {
        {"attention", "a.png", 1, 0, 1, -1, 1, NULL},
        {"als", "a.pdf", 1, 0, 0, -1, 0, "--range"},
        {"als", "a.pdf", 0, 1, 0, -1, 0, "--labels"},
        {"entropy", "a.pdf", 0, 1, 0, -1, 1, NULL},
        {"als", "a.pdf", 0, 0, 1, -1, 0, "--dpi applies to PNG"},
        {"attention", "a.pdf", 0, 0, 0, PLOT_CMAP_DIVERGING, 0, "signed"},
        {"similarity", "a.pdf", 0, 0, 0, PLOT_CMAP_DIVERGING, 1, NULL},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        fig_opts o;
        memset(&o, 0, sizeof o);
        o.layer = o.head = o.image = o.query = -1;
        o.dpi = 100;
        o.range = c[i].range ? MAPSCALE_MINMAX : MAPSCALE_ZERO;
        o.range_set = c[i].range;
        o.labels_set = c[i].labels;
        o.dpi_set = c[i].dpi;
        o.cmap_set = c[i].cmap >= 0;
        o.cmap = c[i].cmap >= 0 ? (plot_cmap)c[i].cmap : PLOT_CMAP_DEFAULT;
        CHECK(fig_source_open(&o.src[0], trace, "m", &err) == AS_OK, "%s", err.msg);
        o.n_sources = 1;
        as_status rc = figure_render(figure_find(c[i].fig), &o, check_tmp(c[i].out), &err);
        if (c[i].ok) CHECK(rc == AS_OK, "case %zu (%s): %s", i, c[i].fig, err.msg);
        else CHECK(rc == AS_ERR_ARG && strstr(err.msg, c[i].msg), "case %zu (%s): %s", i, c[i].fig,
                   rc == AS_OK ? "accepted" : err.msg);
        fig_source_close(&o.src[0]);
    }
    /* the panel's scale is the scale of the row it draws */
    fig_opts o;
    memset(&o, 0, sizeof o);
    fig_source s;
    CHECK(fig_source_open(&s, trace, NULL, &err) == AS_OK, "%s", err.msg);
    const trace_reader *r = &s.tr;
    int T = r->num_tokens, p = r->num_prefix, layer = r->layers[1], q = p + 3;
    uint8_t *rgb;
    int S;
    CHECK(fig_read_rgb(&s, 0, &rgb, &S, &err) == AS_OK, "%s", err.msg);
    cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 300, 300);
    cairo_t *cr = cairo_create(img);
    plot_figure *f = plot_figure_wrap(cr, 300, 300);
    plot_axes a = {.x = 10, .y = 10, .w = 200, .h = 230};
    mapscale got, want;
    CHECK(fig_attention_panel(f, &a, &o, &s, layer, r->heads[0], 0, q, rgb, S, 1, NULL, "t", &got, &err) == AS_OK, "%s", err.msg);
    CHECK(a.w == a.h && a.w <= 200 && a.w > 180, "the image is square above the note: %g x %g", a.w, a.h);
    float *A = malloc((size_t)T * T * sizeof *A);
    double row[4096];
    CHECK(trace_read_head(r, TRACE_Q_ATTN, 0, layer, r->heads[0], A, &err) == AS_OK, "%s", err.msg);
    for (int j = 0; j < T; j++) row[j] = A[(size_t)q * T + j];
    mapscale_make(&want, row, 1, T, p, p, MAPSCALE_ZERO);
    CHECK(got.lo == want.lo && got.hi == want.hi && got.ratio == want.ratio && got.prefix_share == want.prefix_share,
          "panel scale [%g, %g] ratio %g, row [%g, %g] ratio %g", got.lo, got.hi, got.ratio, want.lo, want.hi, want.ratio);
    free(A);
    free(rgb);
    plot_figure_abort(f);
    cairo_destroy(cr);
    cairo_surface_destroy(img);
    fig_source_close(&s);
}


static void test_recipes(void) {
    char a[512], b[512], bare[512], src[512];
    snprintf(a, sizeof a, "%s", check_tmp("mech_cls.h5"));
    snprintf(b, sizeof b, "%s", check_tmp("deit_dist.h5"));
    snprintf(bare, sizeof bare, "%s", check_tmp("bare.h5"));
    analysed_copy("mech_cls", a);
    analysed_copy("deit_dist", b);
    snprintf(src, sizeof src, "%s/analysis/vit_gap.h5", fixtures());
    check_copy_file(src, bare);
    const unsigned char pdf[] = "%PDF", png[] = "\x89PNG", svg[] = "<?xml";
    as_error err = {0};
    for (int i = 0; i < figure_count(); i++) {
        const figure_recipe *r = figure_get(i);
        fig_opts o;
        memset(&o, 0, sizeof o);
        o.layer = o.head = o.image = o.query = -1;
        o.dpi = 120;
        int n = r->max_sources > 1 ? 2 : 1;
        for (int k = 0; k < n; k++)
            if (fig_source_open(&o.src[o.n_sources], k ? b : a, NULL, &err) == AS_OK) o.n_sources++;
            else CHECK(0, "open: %s", err.msg);
        const char *ext[] = {"pdf", "svg", "png"};
        for (int e = 0; e < 3; e++) {
            char out[600];
            snprintf(out, sizeof out, "%s.%s", check_tmp(r->name), ext[e]);
            as_status rc = figure_render(r, &o, out, &err);
            CHECK(rc == AS_OK, "%s.%s: %s", r->name, ext[e], err.msg);
            if (rc != AS_OK) continue;
            if (e == 0) /* vector with the font embedded (cairo subsets it as a FontFile) */
                CHECK(file_has(out, "/FontFile", pdf, 4), "%s: not a PDF with an embedded font", out);
            if (e == 1) CHECK(file_has(out, "<svg", svg, 5) && file_has(out, "glyph", svg, 5),
                              "%s: not an SVG with its glyphs", out);
            if (e == 2) {
                CHECK(file_has(out, NULL, png, 4), "%s: not a PNG", out);
                image im;
                if (image_load(&im, out, &err) == AS_OK) {
                    /* not blank: many colours, some dark (text, axes) */
                    int dark = 0, colours = 0;
                    unsigned seen[64] = {0};
                    for (size_t p = 0; p < (size_t)im.w * im.h; p++) {
                        const uint8_t *q = im.rgb + 3 * p;
                        dark += q[0] + q[1] + q[2] < 150;
                        unsigned key = (q[0] >> 6) << 4 | (q[1] >> 6) << 2 | (q[2] >> 6);
                        if (!seen[key]++) colours++;
                    }
                    CHECK(dark > 100 && colours >= 4, "%s looks blank: %d dark pixels, %d colour bins", out, dark, colours);
                    image_free(&im);
                } else {
                    CHECK(0, "%s", err.msg);
                }
            }
        }
        for (int k = 0; k < o.n_sources; k++) fig_source_close(&o.src[k]);
    }

    /* errors: missing analysis names the command; a results file cannot give images; bad names */
    fig_opts o;
    memset(&o, 0, sizeof o);
    o.layer = o.head = o.image = o.query = -1;
    CHECK(fig_source_open(&o.src[0], bare, NULL, &err) == AS_OK, "%s", err.msg);
    o.n_sources = 1;
    CHECK(figure_render(figure_find("als"), &o, check_tmp("x.pdf"), &err) == AS_ERR_ARG &&
          strstr(err.msg, "attnscope analyze") && strstr(err.msg, "--metrics als"), "no analysis: %s", err.msg);
    CHECK(access(check_tmp("x.pdf"), F_OK) != 0, "a failed figure leaves no file");
    CHECK(figure_render(figure_find("attention"), &o, check_tmp("x.svg"), &err) == AS_OK, "attention without analysis: %s", err.msg);
    CHECK(figure_render(figure_find("lsla"), &o, check_tmp("l.pdf"), &err) == AS_ERR_ARG &&
          strstr(err.msg, "LSLA layer"), "lsla on a model without LSLA: %s", err.msg);
    o.query = 999;
    CHECK(figure_render(figure_find("attention"), &o, check_tmp("x.png"), &err) == AS_ERR_ARG &&
          strstr(err.msg, "--query"), "bad query: %s", err.msg);
    o.query = -1;
    CHECK(figure_render(figure_find("als"), &o, check_tmp("x.gif"), &err) == AS_ERR_ARG &&
          strstr(err.msg, ".pdf, .svg or .png"), "extension: %s", err.msg);
    CHECK(figure_render(figure_find("attention"), &o, "/nonexistent/dir/x.pdf", &err) == AS_ERR_IO,
          "unwritable: %s", err.msg);
    fig_source_close(&o.src[0]);
    const char *res = check_tmp("res.h5");
    analysis_opts ao;
    analysis_opts_default(&ao);
    ao.quiet = 1;
    analysis_report rep;
    CHECK(analysis_run(bare, res, &ao, &rep, &err) == AS_OK, "%s", err.msg);
    memset(&o, 0, sizeof o);
    o.layer = o.head = o.image = o.query = -1;
    CHECK(fig_source_open(&o.src[0], res, "gap", &err) == AS_OK, "results file as a source: %s", err.msg);
    o.n_sources = 1;
    CHECK(figure_render(figure_find("similarity"), &o, check_tmp("s.pdf"), &err) == AS_OK, "from results: %s", err.msg);
    CHECK(figure_render(figure_find("rollout"), &o, check_tmp("r.pdf"), &err) == AS_ERR_ARG &&
          strstr(err.msg, "give the trace"), "rollout from results: %s", err.msg);
    fig_source_close(&o.src[0]);
}

int main(void) {
    check_tmp_init("plot");
    test_basics();
    test_reference_png();
    test_recipes();
    test_mapscale();
    test_options(check_tmp("mech_cls.h5"));
    check_tmp_remove();
    return check_finish("plot");
}
