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
    check_tmp_remove();
    return check_finish("plot");
}
