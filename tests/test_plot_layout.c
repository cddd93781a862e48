/* test_plot_layout.c: what a figure must never do, checked on every recipe at every size preset:
 * text cut at the canvas edge (each string's ink box, and every pixel drawn outside the
 * canvas), legend labels that do not tell the inputs apart, a grid that leaves most of its
 * canvas empty or has no colour bar, a zoomed value axis that does not say so. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../io/image.h"
#include "../plot/figures.h"
#include "../plot/plot.h"
#include "analysed.h"
#include "check.h"

#define MARGIN 24.0 /* points of canvas drawn around the figure to catch what spills out */
#define PX 2.0      /* pixels per point */

/* Draws recipe r from o at w x h inside a larger white surface; checks that every text box
 * and every drawn pixel lies inside the w x h canvas. */
static void check_inside(const figure_recipe *r, const fig_opts *o, double w, double h, const char *what) {
    int pw = (int)ceil((w + 2 * MARGIN) * PX), ph = (int)ceil((h + 2 * MARGIN) * PX);
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, pw, ph);
    cairo_t *cr = cairo_create(s);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_scale(cr, PX, PX);
    cairo_translate(cr, MARGIN, MARGIN);
    plot_figure *f = plot_figure_wrap(cr, w, h);
    as_error err = {0};
    as_status rc = figure_draw(r, o, f, &err);
    CHECK(rc == AS_OK, "%s %s: %s", r->name, what, err.msg);
    const plot_box *b;
    int n = plot_text_boxes(f, &b), bad = 0;
    for (int i = 0; i < n; i++) {
        int in = b[i].x0 >= 0 && b[i].y0 >= 0 && b[i].x1 <= w && b[i].y1 <= h;
        if (!in && bad++ < 3)
            fprintf(stderr, "  %s %s: text box [%.1f, %.1f] x [%.1f, %.1f] outside %.0f x %.0f\n",
                    r->name, what, b[i].x0, b[i].x1, b[i].y0, b[i].y1, w, h);
    }
    CHECK(rc != AS_OK || (n > 0 && bad == 0), "%s %s: %d of %d strings cross the canvas edge", r->name, what, bad, n);
    plot_figure_abort(f);
    cairo_destroy(cr);
    cairo_surface_flush(s);
    /* pixels: nothing at all may be drawn in the margin (1 px of antialiasing allowed) */
    const unsigned char *px = cairo_image_surface_get_data(s);
    int stride = cairo_image_surface_get_stride(s), spill = 0, fx0 = -1, fy0 = -1;
    int x0 = (int)(MARGIN * PX) - 1, y0 = (int)(MARGIN * PX) - 1;
    int x1 = (int)ceil((MARGIN + w) * PX) + 1, y1 = (int)ceil((MARGIN + h) * PX) + 1;
    for (int y = 0; y < ph; y++)
        for (int x = 0; x < pw; x++) {
            if (x >= x0 && x < x1 && y >= y0 && y < y1) continue;
            uint32_t p;
            memcpy(&p, px + (size_t)y * stride + 4 * (size_t)x, 4);
            if ((p & 0xffffff) != 0xffffff && spill++ == 0) {
                fx0 = x;
                fy0 = y;
            }
        }
    CHECK(spill == 0, "%s %s: %d pixels drawn outside the canvas (first at %.1f, %.1f pt)", r->name,
          what, spill, fx0 / PX - MARGIN, fy0 / PX - MARGIN);
    cairo_surface_destroy(s);
}

static void test_every_recipe(void) {
    /* two traces whose file names differ only in the epoch, in one folder */
    char a[600], b[600], dir[512];
    snprintf(dir, sizeof dir, "%s", check_tmp("runs"));
    mkdir(dir, 0777);
    snprintf(a, sizeof a, "%s/trace-epoch-000.h5", dir);
    snprintf(b, sizeof b, "%s/trace-epoch-012.h5", dir);
    analysed_copy("mech_cls", a);
    analysed_copy("mech_cls", b);
    const double sizes[][2] = {{0, 0}, {PLOT_COLUMN, 0}, {PLOT_DOUBLE, 0}, {PLOT_COLUMN, 120},
                               {180, 150}, {PLOT_DOUBLE, 300}};
    const char *names[] = {"default", "--column", "--double", "column x 120", "180 x 150", "double x 300"};
    as_error err = {0};
    for (int i = 0; i < figure_count(); i++) {
        const figure_recipe *r = figure_get(i);
        fig_opts o;
        memset(&o, 0, sizeof o);
        o.layer = o.head = o.image = o.query = -1;
        int n = r->max_sources > 1 ? 2 : 1;
        for (int k = 0; k < n; k++)
            if (fig_source_open(&o.src[o.n_sources], k ? b : a, NULL, &err) == AS_OK) o.n_sources++;
            else CHECK(0, "open: %s", err.msg);
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
            o.width = sizes[z][0];
            o.height = sizes[z][1];
            double w, h;
            figure_size(r, &o, &w, &h);
            check_inside(r, &o, w, h, names[z]);
        }
        for (int k = 0; k < o.n_sources; k++) fig_source_close(&o.src[k]);
    }
}

static void set_src(fig_source *s, const char *path, const char *label, int given) {
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    snprintf(s->label, sizeof s->label, "%s", label);
    s->label_given = given;
}

static void test_labels(void) {
    fig_source s[4];
    /* file names differing in the epoch: the epoch, with its word */
    set_src(&s[0], "out/train/trace-epoch-000.h5", "trace-epoch-000", 0);
    set_src(&s[1], "out/train/trace-epoch-012.h5", "trace-epoch-012", 0);
    fig_sources_distinct(s, 2);
    CHECK(strcmp(s[0].label, "epoch-000") == 0 && strcmp(s[1].label, "epoch-012") == 0,
          "epochs: \"%s\", \"%s\"", s[0].label, s[1].label);
    /* one model name twice (the label came from the trace): the folders that differ */
    set_src(&s[0], "runs/lavit/train/trace.h5", "custom_model", 0);
    set_src(&s[1], "runs/vit/train/trace.h5", "custom_model", 0);
    fig_sources_distinct(s, 2);
    CHECK(strcmp(s[0].label, "lavit") == 0 && strcmp(s[1].label, "vit") == 0,
          "folders: \"%s\", \"%s\"", s[0].label, s[1].label);
    /* two of three equal: those two keep the name and add what differs */
    set_src(&s[0], "a/run1.h5", "vit_small", 0);
    set_src(&s[1], "a/run2.h5", "vit_small", 0);
    set_src(&s[2], "a/run3.h5", "deit_small", 0);
    fig_sources_distinct(s, 3);
    CHECK(strcmp(s[0].label, "vit_small run1") == 0 && strcmp(s[1].label, "vit_small run2") == 0 &&
          strcmp(s[2].label, "deit_small") == 0, "mixed: \"%s\", \"%s\", \"%s\"", s[0].label,
          s[1].label, s[2].label);
    /* the caller's labels stay; one file twice still gets two names */
    set_src(&s[0], "x/t.h5", "mine", 1);
    set_src(&s[1], "x/t.h5", "t", 0);
    set_src(&s[2], "x/t.h5", "t", 0);
    fig_sources_distinct(s, 3);
    CHECK(strcmp(s[0].label, "mine") == 0 && strcmp(s[1].label, s[2].label) != 0,
          "same file: \"%s\", \"%s\", \"%s\"", s[0].label, s[1].label, s[2].label);
    /* ... named after the file, not after a piece of its extension ("h5", "h5 (3)") */
    CHECK(strcmp(s[1].label, "t") == 0 && strcmp(s[2].label, "t (3)") == 0, "same file twice: \"%s\", \"%s\"",
          s[1].label, s[2].label);
    /* whatever the inputs, the labels differ pairwise */
    const char *paths[] = {"r/a-1.h5", "r/a-1.h5", "q/a-1.h5", "r/b.h5"};
    for (int i = 0; i < 4; i++) set_src(&s[i], paths[i], "m", 0);
    fig_sources_distinct(s, 4);
    for (int i = 0; i < 4; i++)
        for (int k = i + 1; k < 4; k++)
            CHECK(strcmp(s[i].label, s[k].label) != 0, "labels %d and %d are both \"%s\"", i, k, s[i].label);
}

/* Labels the user gave twice are refused (a legend with two equal entries tells nothing). */
static void test_given_labels(void) {
    char t[600];
    snprintf(t, sizeof t, "%s", check_tmp("gap2.h5"));
    analysed_copy("vit_gap", t);
    fig_opts o;
    memset(&o, 0, sizeof o);
    o.layer = o.head = o.image = o.query = -1;
    as_error err = {0};
    for (int k = 0; k < 2; k++)
        if (fig_source_open(&o.src[k], t, "same", &err) == AS_OK) o.n_sources++;
    CHECK(figure_render(figure_find("entropy"), &o, check_tmp("e.svg"), &err) == AS_ERR_ARG &&
          strstr(err.msg, "--labels") && strstr(err.msg, "\"same\""), "equal --labels: %s", err.msg);
    for (int k = 0; k < o.n_sources; k++) fig_source_close(&o.src[k]);
}

/* The grid of a 2-layer, 4-head model fills its figure and has a colour bar. */
static void test_grid_fills(void) {
    char t[600];
    snprintf(t, sizeof t, "%s", check_tmp("gap.h5"));
    analysed_copy("vit_gap", t);
    fig_opts o;
    memset(&o, 0, sizeof o);
    o.layer = o.head = o.image = o.query = -1;
    o.dpi = 72;
    as_error err = {0};
    CHECK(fig_source_open(&o.src[0], t, NULL, &err) == AS_OK, "%s", err.msg);
    o.n_sources = 1;
    const double widths[] = {0, PLOT_COLUMN};
    for (int k = 0; k < 2; k++) {
        o.width = widths[k];
        const char *out = check_tmp("grid.png");
        CHECK(figure_render(figure_find("grid"), &o, out, &err) == AS_OK, "grid: %s", err.msg);
        image im;
        if (image_load(&im, out, &err) != AS_OK) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        /* the bounding box of everything that is not white, against the canvas */
        int bx0 = im.w, by0 = im.h, bx1 = -1, by1 = -1, bar = 0;
        for (int y = 0; y < im.h; y++)
            for (int x = 0; x < im.w; x++) {
                const uint8_t *p = im.rgb + 3 * ((size_t)y * im.w + x);
                if (p[0] + p[1] + p[2] < 3 * 245) {
                    bx0 = x < bx0 ? x : bx0;
                    by0 = y < by0 ? y : by0;
                    bx1 = x > bx1 ? x : bx1;
                    by1 = y > by1 ? y : by1;
                }
            }
        double fill = bx1 < 0 ? 0 : (double)(bx1 - bx0 + 1) * (by1 - by0 + 1) / ((double)im.w * im.h);
        /* a colour bar: a column right of the panels whose colour runs through the map */
        for (int x = im.w / 2; x < im.w && !bar; x++) {
            int run = 0, distinct = 0, prev = -1;
            for (int y = 0; y < im.h; y++) {
                const uint8_t *p = im.rgb + 3 * ((size_t)y * im.w + x);
                int sat = abs(p[0] - p[2]) > 40 || abs(p[0] - p[1]) > 40;
                run = sat ? run + 1 : 0;
                int key = p[0] >> 4 << 8 | p[1] >> 4 << 4 | p[2] >> 4;
                distinct += sat && key != prev;
                prev = key;
                if (run > im.h / 2 && distinct > 20) bar = 1;
            }
        }
        fprintf(stderr, "grid %s: %dx%d, drawing covers %.0f%% of the canvas, colour bar %s\n",
                k ? "--column" : "default", im.w, im.h, 100 * fill, bar ? "found" : "missing");
        CHECK(fill > 0.8, "grid: the drawing covers %.0f%% of the canvas", 100 * fill);
        CHECK(bar, "grid: no colour bar");
        image_free(&im);
    }
    fig_source_close(&o.src[0]);
}

/* A value axis zoomed far from zero says so; one that includes zero does not. */
static void test_zoomed_axis(void) {
    int boxes[2];
    for (int k = 0; k < 2; k++) {
        plot_figure *f;
        as_error err = {0};
        CHECK(plot_figure_begin(&f, check_tmp("zoom.svg"), PLOT_COLUMN, 160, 72, &err) == AS_OK, "%s", err.msg);
        plot_axes a = plot_axes_grid(f, 0, 0, 1, 1, 0);
        /* the same span and so the same ticks: [0.994, 1.000] and [0, 0.006] */
        plot_axes_range(&a, 0, 11, k ? 0.994 : 0, k ? 1.0 : 0.006);
        CHECK(plot_axes_zoomed(&a) == k, "range %g..%g zoomed %d", a.ymin, a.ymax, plot_axes_zoomed(&a));
        plot_axes_draw(f, &a, "t", "layer", "cosine similarity");
        const plot_box *b;
        boxes[k] = plot_text_boxes(f, &b);
        CHECK(plot_figure_end(f, &err) == AS_OK, "%s", err.msg);
    }
    CHECK(boxes[1] == boxes[0] + 1, "the zoomed axis adds its note: %d strings, unzoomed %d", boxes[1], boxes[0]);
    /* a colour bar on a zoomed range says so in its (rotated) label: a longer box */
    double len[2];
    for (int k = 0; k < 2; k++) {
        plot_figure *f;
        as_error err = {0};
        CHECK(plot_figure_begin(&f, check_tmp("zoomc.svg"), PLOT_COLUMN, 200, 72, &err) == AS_OK, "%s", err.msg);
        plot_axes a = plot_axes_grid(f, 0, 0, 1, 1, 46);
        plot_colorbar(f, &a, k ? 0.994 : 0, k ? 1.0 : 0.006, PLOT_CMAP_VIRIDIS, "CKA");
        const plot_box *b;
        int n = plot_text_boxes(f, &b);
        len[k] = n > 0 ? b[n - 1].y1 - b[n - 1].y0 : 0; /* the label is drawn last */
        CHECK(plot_figure_end(f, &err) == AS_OK, "%s", err.msg);
    }
    CHECK(len[1] > 3 * len[0], "the zoomed colour bar's label says so: %.1f pt long, unzoomed %.1f", len[1], len[0]);
    plot_axes a = {.ymin = -1, .ymax = 1};
    CHECK(!plot_axes_zoomed(&a), "a range through zero is not zoomed");
    a = (plot_axes){.ymin = 0.5, .ymax = 1};
    CHECK(!plot_axes_zoomed(&a), "0.5..1 is half its distance from zero: not zoomed");
    a = (plot_axes){.ymin = -1.0, .ymax = -0.99};
    CHECK(plot_axes_zoomed(&a), "negative values far from zero are zoomed too");
}

int main(void) {
    check_tmp_init("plot_layout");
    test_labels();
    test_given_labels();
    test_zoomed_axis();
    test_grid_fills();
    test_every_recipe();
    check_tmp_remove();
    return check_finish("plot_layout");
}
