/* figures.c: the recipe registry, sources, and the readers the recipes share. */
#define _POSIX_C_SOURCE 200809L
#include "figures.h"

#include <assert.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../analysis/analysis.h"
#include "../io/h5util.h"

extern const figure_recipe fig_als, fig_similarity, fig_adjacent, fig_qk, fig_evolution, fig_cka,
    fig_distance, fig_entropy, fig_attention, fig_grid, fig_rollout, fig_lsla;

static const figure_recipe *const recipes[] = {
    &fig_als,      &fig_similarity, &fig_adjacent, &fig_qk,   &fig_evolution, &fig_cka,
    &fig_distance, &fig_entropy,    &fig_attention, &fig_grid, &fig_rollout, &fig_lsla,
};
#define N_RECIPES ((int)(sizeof recipes / sizeof recipes[0]))

int figure_count(void) { return N_RECIPES; }
const figure_recipe *figure_get(int i) { return i >= 0 && i < N_RECIPES ? recipes[i] : NULL; }
const figure_recipe *figure_find(const char *name) {
    for (int i = 0; i < N_RECIPES; i++)
        if (strcmp(recipes[i]->name, name) == 0) return recipes[i];
    return NULL;
}

static void basename_noext(const char *path, char *out, size_t n) {
    const char *b = strrchr(path, '/');
    snprintf(out, n, "%.127s", b ? b + 1 : path);
    char *dot = strrchr(out, '.');
    if (dot && dot != out) *dot = 0;
}

as_status fig_source_open(fig_source *s, const char *path, const char *label, as_error *err) {
    memset(s, 0, sizeof *s);
    s->results = -1;
    snprintf(s->path, sizeof s->path, "%s", path);
    as_error terr = {0};
    if (trace_reader_open(&s->tr, path, &terr) == AS_OK) {
        s->is_trace = 1;
        s->file = s->tr.file_id;
        char arch[128];
        trace_read_attr_string(&s->tr, "model_arch", arch, sizeof arch);
        s->label_given = label != NULL;
        if (label) snprintf(s->label, sizeof s->label, "%s", label);
        else if (arch[0] && strcmp(arch, "custom") != 0) snprintf(s->label, sizeof s->label, "%s", arch);
        else basename_noext(path, s->label, sizeof s->label);
        s->results = analysis_results_open(path); /* beside the trace, or (older) inside it */
        return AS_OK;
    }
    h5u_quiet();
    hid_t f = H5Fis_hdf5(path) > 0 ? H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT) : -1;
    char fmt[64] = "";
    if (f >= 0) h5u_attr_read_str(f, "format", fmt, sizeof fmt);
    if (f < 0 || strcmp(fmt, ANALYSIS_RESULTS_FORMAT) != 0) {
        if (f >= 0) H5Fclose(f);
        return as_fail(err, terr.status ? terr.status : AS_ERR_FORMAT, "%s", terr.msg);
    }
    s->file = s->results = f;
    char src[1024];
    h5u_attr_read_str(f, "source_trace", src, sizeof src);
    s->label_given = label != NULL;
    if (label) snprintf(s->label, sizeof s->label, "%s", label);
    else basename_noext(src[0] ? src : path, s->label, sizeof s->label);
    return AS_OK;
}

void fig_source_close(fig_source *s) {
    if (s->is_trace && s->results > 0) H5Fclose((hid_t)s->results);
    if (s->is_trace) trace_reader_close(&s->tr);
    else if (s->file > 0) H5Fclose((hid_t)s->file);
    memset(s, 0, sizeof *s);
}

/* H5Lexists fails (negative) when an intermediate group is missing: that too means "absent". */
static int path_exists(hid_t f, const char *name) { return H5Lexists(f, name, H5P_DEFAULT) > 0; }

static as_status read_whole(const fig_source *s, hid_t f, const char *name, double **data, long *dims,
                            int *nd, as_error *err) {
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t sp = H5Dget_space(d);
    hsize_t hd[8];
    int n = H5Sget_simple_extent_ndims(sp);
    as_status rc = AS_OK;
    if (n < 0 || n > 6) {
        rc = as_fail(err, AS_ERR_FORMAT, "%s: %s has an unexpected shape", s->path, name);
    } else {
        H5Sget_simple_extent_dims(sp, hd, NULL);
        size_t total = 1;
        for (int i = 0; i < n; i++) {
            dims[i] = (long)hd[i];
            total *= hd[i];
        }
        *nd = n;
        *data = malloc((total ? total : 1) * sizeof **data);
        if (!*data) rc = as_fail(err, AS_ERR_NOMEM, "out of memory reading %s", name);
        else if (H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, *data) < 0) {
            free(*data);
            *data = NULL;
            rc = as_fail(err, AS_ERR_FORMAT, "%s: reading %s failed (corrupt?)", s->path, name);
        }
    }
    H5Sclose(sp);
    H5Dclose(d);
    return rc;
}

static as_status read_doubles(const fig_source *s, const char *name, const char *metric,
                              double **data, long *dims, int *nd, as_error *err) {
    if (s->results < 0 || !path_exists((hid_t)s->results, name))
        return as_fail(err, AS_ERR_ARG, "%s has no %s: run attnscope analyze %s --metrics %s first",
                       s->path, name, s->path, metric);
    return read_whole(s, (hid_t)s->results, name, data, dims, nd, err);
}

as_status fig_read_any(const fig_source *s, const char *name, const char *what, double **data,
                       long *dims, int *nd, as_error *err) {
    if (!path_exists((hid_t)s->file, name))
        return as_fail(err, AS_ERR_ARG, "%s has no %s: %s", s->path, name, what);
    return read_whole(s, (hid_t)s->file, name, data, dims, nd, err);
}

as_status fig_read(const fig_source *s, const char *metric, const char *output, const char *what,
                   double **data, long *dims, int *nd, as_error *err) {
    char name[256];
    snprintf(name, sizeof name, "analysis/%s/%s/%s", metric, output, what);
    return read_doubles(s, name, metric, data, dims, nd, err);
}

as_status fig_read_derived(const fig_source *s, const char *metric, const char *nm, double **data,
                           long *dims, int *nd, as_error *err) {
    char name[256];
    snprintf(name, sizeof name, "analysis/%s/%s", metric, nm);
    return read_doubles(s, name, metric, data, dims, nd, err);
}

int fig_labels(const fig_source *s, const char *metric, const char *output, const char *axis,
               int *out, int max) {
    char name[256];
    snprintf(name, sizeof name, "analysis/%s/%s", metric, output);
    hid_t f = (hid_t)s->results;
    if (f < 0 || !path_exists(f, name)) return 0;
    hid_t o = H5Oopen(f, name, H5P_DEFAULT);
    int n = h5u_attr_read_int(o, axis, out, max);
    H5Oclose(o);
    return n < 0 ? 0 : n;
}

int fig_source_depth(const fig_source *s, const int *layers, int n) {
    int d = 0;
    if (s->results >= 0 && h5u_attr_read_int((hid_t)s->results, "model_depth", &d, 1) == 1 && d > 0) return d;
    if (s->is_trace && s->tr.cfg.depth > 0) return s->tr.cfg.depth;
    return n > 0 ? layers[n - 1] + 1 : 1; /* results of a single-grid trace: its last layer */
}

int fig_layer_stages(const fig_source *s, int *stage, int n) {
    if (s->results < 0 || n < 1) return 0;
    int k = h5u_attr_read_int((hid_t)s->results, "layer_stage", stage, n);
    return k == n;
}

int fig_relative_depth(const fig_opts *o, int (*layers)[256], const int *n) {
    for (int i = 1; i < o->n_sources; i++)
        if (fig_source_depth(&o->src[i], layers[i], n[i]) != fig_source_depth(&o->src[0], layers[0], n[0])) return 1;
    return 0;
}

void fig_depth_x(const fig_source *s, const int *layers, int n, int relative, double *x) {
    const int depth = fig_source_depth(s, layers, n);
    for (int l = 0; l < n; l++) x[l] = relative ? (depth > 1 ? (double)layers[l] / (depth - 1) : 0) : layers[l];
}

void fig_depth_axis(plot_axes *a, int relative, double lmax, double ylo, double yhi) {
    if (relative) {
        plot_axes_range(a, -0.04, 1.04, ylo, yhi);
        return;
    }
    plot_axes_range(a, -0.5, lmax + 0.5, ylo, yhi);
    a->xcat = 1;
    a->xstep = lmax > 16 ? 2 : 1;
}

void fig_stage_bounds(plot_figure *f, const plot_axes *a, const fig_source *s, const double *x, int n) {
    int st[256];
    if (n > 256 || !fig_layer_stages(s, st, n)) return;
    cairo_t *cr = plot_cairo(f);
    cairo_save(cr);
    cairo_set_source_rgba(cr, 0.45, 0.45, 0.45, 0.9);
    cairo_set_line_width(cr, 0.5);
    const double dash[2] = {2.0, 2.0};
    cairo_set_dash(cr, dash, 2, 0);
    for (int l = 1; l < n; l++) {
        if (st[l] == st[l - 1]) continue;
        const double xb = plot_x(a, (x[l - 1] + x[l]) / 2);
        cairo_move_to(cr, xb, a->y);
        cairo_line_to(cr, xb, a->y + a->h);
        cairo_stroke(cr);
        char t[24];
        snprintf(t, sizeof t, "stage %d", st[l]);
        plot_text(f, xb + 1.5, a->y + 7, 5.5, 0, t);
    }
    cairo_restore(cr);
}

int fig_label_doubles(const fig_source *s, const char *metric, const char *output,
                      const char *axis, double *out, int max) {
    char name[256];
    snprintf(name, sizeof name, "analysis/%s/%s", metric, output);
    hid_t f = (hid_t)s->results;
    if (f < 0 || !path_exists(f, name)) return 0;
    hid_t o = H5Oopen(f, name, H5P_DEFAULT);
    int n = 0;
    if (H5Aexists(o, axis) > 0) {
        hid_t a = H5Aopen(o, axis, H5P_DEFAULT), sp = H5Aget_space(a);
        n = (int)H5Sget_simple_extent_npoints(sp);
        if (n > max || H5Aread(a, H5T_NATIVE_DOUBLE, out) < 0) n = 0;
        H5Sclose(sp);
        H5Aclose(a);
    }
    H5Oclose(o);
    return n;
}

as_status fig_need_trace(const fig_source *s, const char *recipe, as_error *err) {
    if (s->is_trace) return AS_OK;
    return as_fail(err, AS_ERR_ARG, "%s: the %s figure draws recorded maps and images: give the "
                   "trace, not a results file", s->path, recipe);
}

as_status fig_read_rgb(const fig_source *s, long image, uint8_t **rgb, int *size, as_error *err) {
    int S = s->tr.cfg.img_size;
    float *tmp = malloc((size_t)S * S * 3 * sizeof *tmp);
    *rgb = malloc((size_t)S * S * 3);
    if (!tmp || !*rgb) {
        free(tmp);
        free(*rgb);
        *rgb = NULL;
        return as_fail(err, AS_ERR_NOMEM, "out of memory");
    }
    as_status rc = trace_read_image_slab(&s->tr, "images/rgb", image, tmp, err);
    for (size_t i = 0; rc == AS_OK && i < (size_t)S * S * 3; i++) (*rgb)[i] = (uint8_t)lrintf(tmp[i]);
    free(tmp);
    if (rc != AS_OK) {
        free(*rgb);
        *rgb = NULL;
    }
    *size = S;
    return rc;
}

void fig_range(const double *v, size_t n, double *lo, double *hi) {
    *lo = INFINITY;
    *hi = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (!isnan(v[i])) {
            *lo = fmin(*lo, v[i]);
            *hi = fmax(*hi, v[i]);
        }
    if (*lo > *hi) *lo = *hi = 0;
}

void fig_heatmap(plot_figure *f, plot_axes *a, const double *v, int rows, int cols,
                 const int *row_ids, const int *col_ids, double vmin, double vmax, plot_cmap cm,
                 const char *title, const char *xlabel, const char *ylabel, const char *cbar) {
    static char rl[1024][12], cl[1024][12];
    static const char *rp[1024], *cp[1024];
    for (int i = 0; i < rows && i < 1024; i++) {
        snprintf(rl[i], sizeof rl[i], "%d", row_ids ? row_ids[i] : i);
        rp[i] = rl[i];
    }
    for (int i = 0; i < cols && i < 1024; i++) {
        snprintf(cl[i], sizeof cl[i], "%d", col_ids ? col_ids[i] : i);
        cp[i] = cl[i];
    }
    a->xcat = a->ycat = 1;
    a->ydown = 1;
    a->xlabels = cp;
    a->ylabels = rp;
    a->xstep = cols > 16 ? (cols + 11) / 12 : 1;
    a->ystep = rows > 16 ? (rows + 11) / 12 : 1;
    plot_axes_range(a, -0.5, cols - 0.5, -0.5, rows - 0.5);
    plot_heatmap(f, a, v, rows, cols, vmin, vmax, cm);
    plot_axes_draw(f, a, title, xlabel, ylabel);
    plot_colorbar(f, a, vmin, vmax, cm, cbar);
}

void fig_heatmap_stages(plot_figure *f, const plot_axes *a, const int *row_stage, int rows,
                        const int *col_stage, int cols) {
    cairo_t *cr = plot_cairo(f);
    cairo_save(cr);
    cairo_set_line_width(cr, 1.2);
    cairo_set_source_rgb(cr, 1, 1, 1);
    for (int i = 1; row_stage && i < rows; i++)
        if (row_stage[i] != row_stage[i - 1]) {
            cairo_move_to(cr, plot_x(a, -0.5), plot_y(a, i - 0.5));
            cairo_line_to(cr, plot_x(a, cols - 0.5), plot_y(a, i - 0.5));
        }
    for (int j = 1; col_stage && j < cols; j++)
        if (col_stage[j] != col_stage[j - 1]) {
            cairo_move_to(cr, plot_x(a, j - 0.5), plot_y(a, -0.5));
            cairo_line_to(cr, plot_x(a, j - 0.5), plot_y(a, rows - 0.5));
        }
    cairo_stroke(cr);
    cairo_restore(cr);
}

as_status fig_layer_curves(plot_figure *f, plot_axes *a, const fig_opts *o, const char *metric,
                           const char *output, int derived, int row, int band, double ylo,
                           double yhi, const char *title, const char *ylabel, int legend,
                           as_error *err) {
    double *m[FIG_MAX_SOURCES] = {0}, *lo[FIG_MAX_SOURCES] = {0}, *hi[FIG_MAX_SOURCES] = {0};
    int layers[FIG_MAX_SOURCES][256], nl[FIG_MAX_SOURCES];
    double vlo = INFINITY, vhi = -INFINITY, lmax = 1;
    as_status rc = AS_OK;
    for (int i = 0; i < o->n_sources && rc == AS_OK; i++) {
        long d[6];
        int nd;
        const fig_source *s = &o->src[i];
        rc = derived ? fig_read_derived(s, metric, output, &m[i], d, &nd, err)
                     : fig_read(s, metric, output, "mean", &m[i], d, &nd, err);
        if (rc == AS_OK && band && !derived) {
            rc = fig_read(s, metric, output, "ci95_low", &lo[i], d, &nd, err);
            if (rc == AS_OK) rc = fig_read(s, metric, output, "ci95_high", &hi[i], d, &nd, err);
        }
        if (rc != AS_OK) break;
        nl[i] = fig_labels(s, metric, output, "layer", layers[i], 256);
        long L = d[nd - 1];
        if (nl[i] != L) {
            rc = as_fail(err, AS_ERR_FORMAT, "%s: analysis/%s/%s lacks its layer labels", s->path, metric, output);
            break;
        }
        size_t off = row >= 0 ? (size_t)row * L : 0;
        double a0, a1;
        fig_range(m[i] + off, (size_t)L, &a0, &a1);
        if (lo[i]) {
            double b0, b1;
            fig_range(lo[i] + off, (size_t)L, &b0, &b1);
            a0 = fmin(a0, b0);
            fig_range(hi[i] + off, (size_t)L, &b0, &b1);
            a1 = fmax(a1, b1);
        }
        vlo = fmin(vlo, a0);
        vhi = fmax(vhi, a1);
        lmax = fmax(lmax, layers[i][L - 1]);
    }
    if (rc == AS_OK) {
        if (!isnan(ylo)) vlo = ylo;
        if (!isnan(yhi)) vhi = yhi;
        if (isnan(ylo) || isnan(yhi)) plot_nice_range(&vlo, &vhi);
        /* models of different depths: against relative depth; a staged model: stage boundaries */
        const int rel = fig_relative_depth(o, layers, nl);
        fig_depth_axis(a, rel, lmax, vlo, vhi);
        const char *names[FIG_MAX_SOURCES];
        plot_color cols[FIG_MAX_SOURCES];
        plot_marker marks[FIG_MAX_SOURCES];
        double x[FIG_MAX_SOURCES][256];
        for (int i = 0; i < o->n_sources; i++) {
            size_t off = row >= 0 ? (size_t)row * nl[i] : 0;
            fig_depth_x(&o->src[i], layers[i], nl[i], rel, x[i]);
            cols[i] = plot_series_color(i);
            marks[i] = plot_series_marker(i);
            names[i] = o->src[i].label;
            plot_line(f, a, x[i], m[i] + off, nl[i], cols[i], marks[i], lo[i] ? lo[i] + off : NULL,
                      hi[i] ? hi[i] + off : NULL);
        }
        if (o->n_sources == 1) fig_stage_bounds(f, a, &o->src[0], x[0], nl[0]);
        plot_axes_draw(f, a, title, rel ? "relative depth (layer / (layers - 1))" : "layer", ylabel);
        /* one input has no legend unless --labels names it (inside: no room was kept outside) */
        if (legend && (o->n_sources > 1 || o->labels_set))
            plot_legend(f, a, names, o->n_sources, cols, marks,
                        o->n_sources > 1 ? PLOT_LEGEND_OUTSIDE : PLOT_LEGEND_INSIDE_RIGHT);
    }
    for (int i = 0; i < FIG_MAX_SOURCES; i++) {
        free(m[i]);
        free(lo[i]);
        free(hi[i]);
    }
    return rc;
}

int fig_definition(const fig_opts *o, const figure_recipe *r, as_error *err) {
    if (!o->definition)
        return r->definition ? analysis_definition_parse(r->definition) : ANALYSIS_DEFAULT_DEFINITION;
    int d = analysis_definition_parse(o->definition);
    if (d < 0) as_fail(err, AS_ERR_ARG, "--definition %s: use deepvit, row or map", o->definition);
    return d;
}

int fig_query(const fig_opts *o, const fig_source *s) {
    if (o->query >= 0) return o->query;
    int p = s->tr.num_prefix, g = vit_grid(&s->tr.cfg);
    return p > 0 ? 0 : (g / 2) * g + g / 2;
}

plot_cmap fig_cmap(const fig_opts *o) { return o->cmap_set ? o->cmap : PLOT_CMAP_DEFAULT; }

static const struct { unsigned bit; const char *name; } fig_options[] = {
    {FIG_OPT_LAYER, "--layer"}, {FIG_OPT_HEAD, "--head"}, {FIG_OPT_IMAGE, "--image"},
    {FIG_OPT_QUERY, "--query"}, {FIG_OPT_DEFINITION, "--definition"}, {FIG_OPT_CMAP, "--cmap"},
    {FIG_OPT_RANGE, "--range"}, {FIG_OPT_LABELS, "--labels"}};
#define N_FIG_OPTIONS (sizeof fig_options / sizeof fig_options[0])

void figure_options_text(const figure_recipe *r, char *buf, size_t n) {
    buf[0] = 0;
    for (size_t i = 0; i < N_FIG_OPTIONS; i++)
        if (r->options & fig_options[i].bit) {
            snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", buf[0] ? ", " : "", fig_options[i].name);
            if (fig_options[i].bit == FIG_OPT_DEFINITION && r->definition) /* the paper's, not row */
                snprintf(buf + strlen(buf), n - strlen(buf), " (default %s)", r->definition);
        }
}

/* Refuses every option given that recipe r does not use, naming it and the ones r takes, and
 * --dpi for an output path (NULL: no file, as in figure_draw) that is not a PNG. */
static as_status check_options(const figure_recipe *r, const fig_opts *o, const char *path,
                               as_error *err) {
    int given[] = {o->layer >= 0, o->head >= 0, o->image >= 0, o->query >= 0, o->definition != NULL,
                   o->cmap_set, o->range_set, o->labels_set};
    _Static_assert(sizeof given / sizeof given[0] == N_FIG_OPTIONS, "one flag per option");
    char takes[160];
    figure_options_text(r, takes, sizeof takes);
    for (size_t i = 0; i < N_FIG_OPTIONS; i++)
        if (given[i] && !(r->options & fig_options[i].bit))
            return as_fail(err, AS_ERR_ARG, "the %s figure does not use %s: leave it out (it takes %s)",
                           r->name, fig_options[i].name, takes[0] ? takes : "none of the figure options");
    if (o->cmap_set && o->cmap == PLOT_CMAP_DIVERGING && (r->options & FIG_OPT_RANGE))
        return as_fail(err, AS_ERR_ARG, "the %s figure colours non-negative weights: --cmap diverging "
                       "is for signed values; use viridis or magma", r->name);
    const char *ext = path ? strrchr(path, '.') : NULL;
    if (path && o->dpi_set && !(ext && strcmp(ext, ".png") == 0))
        return as_fail(err, AS_ERR_ARG, "%s: --dpi applies to PNG output only (PDF and SVG are "
                       "vector): leave it out or write .png", path);
    return AS_OK;
}

as_status figure_check_options(const figure_recipe *r, const fig_opts *o, const char *path, as_error *err) {
    if (check_options(r, o, path, err) != AS_OK) return err->status;
    if (o->definition && fig_definition(o, r, err) < 0) return err->status;
    return AS_OK;
}

static int is_sep(char c) { return c == '/' || c == '-' || c == '_' || c == '.' || c == ' '; }

/* The distinguishing part of path i among paths[0..n): the characters between the longest
 * common prefix and suffix, widened to whole words; a bare number keeps the word before it
 * ("epoch-012", not "012"). */
static void distinct_part(const char *const *paths, int n, int i, char *out, size_t cap) {
    size_t pre = strlen(paths[0]), suf = pre;
    for (int k = 1; k < n; k++) {
        size_t a = strlen(paths[0]), b = strlen(paths[k]), p = 0, q = 0;
        while (p < a && p < b && paths[0][p] == paths[k][p]) p++;
        while (q < a && q < b && paths[0][a - 1 - q] == paths[k][b - 1 - q]) q++;
        pre = p < pre ? p : pre;
        suf = q < suf ? q : suf;
    }
    const char *s = paths[i];
    size_t len = strlen(s);
    if (pre + suf > len) suf = len - pre;
    size_t b = pre, e = len - suf;
    int same = 1; /* one path given more than once: nothing differs (widening would give "h5") */
    for (int k = 1; k < n; k++) same &= strcmp(paths[k], paths[0]) == 0;
    if (same) {
        out[0] = 0;
        return;
    }
    while (b > 0 && !is_sep(s[b - 1])) b--;        /* whole words */
    while (e < len && !is_sep(s[e])) e++;
    int digits = e > b;
    for (size_t k = b; k < e; k++) digits &= s[k] >= '0' && s[k] <= '9';
    if (digits && b > 1) { /* a number alone says little: keep the word before it */
        b--;
        while (b > 0 && !is_sep(s[b - 1])) b--;
    }
    while (b < e && is_sep(s[b])) b++;
    while (e > b && is_sep(s[e - 1])) e--;
    snprintf(out, cap, "%.*s", (int)(e - b), s + b);
}

void fig_sources_distinct(fig_source *src, int n) {
    int done[FIG_MAX_SOURCES] = {0};
    if (n > FIG_MAX_SOURCES) n = FIG_MAX_SOURCES;
    /* labels made from file names say only what differs ("trace-epoch-000" and
     * "trace-epoch-012" become "epoch-000" and "epoch-012") */
    const char *fpaths[FIG_MAX_SOURCES];
    int fidx[FIG_MAX_SOURCES], nf = 0;
    for (int i = 0; i < n; i++) {
        char b[128];
        basename_noext(src[i].path, b, sizeof b);
        if (!src[i].label_given && strcmp(b, src[i].label) == 0) {
            fidx[nf] = i;
            fpaths[nf++] = src[i].path;
        }
    }
    for (int j = 0; nf > 1 && j < nf; j++) {
        char part[128];
        distinct_part(fpaths, nf, j, part, sizeof part);
        if (part[0]) snprintf(src[fidx[j]].label, sizeof src[fidx[j]].label, "%s", part);
    }
    int all_same = 1;
    for (int i = 1; i < n; i++) all_same &= strcmp(src[i].label, src[0].label) == 0;
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        int members[FIG_MAX_SOURCES], m = 0;
        const char *paths[FIG_MAX_SOURCES];
        for (int k = i; k < n; k++)
            if (!done[k] && strcmp(src[k].label, src[i].label) == 0) {
                members[m] = k;
                paths[m++] = src[k].path;
                done[k] = 1;
            }
        if (m < 2) continue;
        char base[128];
        snprintf(base, sizeof base, "%s", src[i].label);
        for (int j = 0; j < m; j++) {
            fig_source *s = &src[members[j]];
            if (s->label_given) continue; /* the caller's words */
            char part[128];
            distinct_part(paths, m, j, part, sizeof part);
            if (!part[0]) continue; /* one file twice: the input number below */
            if (all_same) snprintf(s->label, sizeof s->label, "%s", part);
            else snprintf(s->label, sizeof s->label, "%.60s %.60s", base, part);
        }
    }
    /* whatever is still equal (a given label equal to a derived one) gets its input number */
    for (int i = 0; i < n; i++)
        for (int k = i + 1; k < n; k++)
            if (strcmp(src[i].label, src[k].label) == 0 && !src[k].label_given) {
                char t[128];
                snprintf(t, sizeof t, "%.110s (%d)", src[k].label, k + 1);
                snprintf(src[k].label, sizeof src[k].label, "%s", t);
            }
}

void figure_size(const figure_recipe *r, const fig_opts *o, double *width, double *height) {
    *width = o->width > 0 ? o->width : r->width;
    *height = o->height > 0 ? o->height : r->height_for ? r->height_for(o, *width) : r->height;
}

/* Refuses a staged trace (format 3) as an input of a recipe that draws single-grid traces only. */
static as_status check_traces(const figure_recipe *r, const fig_opts *o, as_error *err) {
    assert(r->traces); /* each recipe says what it draws from */
    for (int i = 0; i < o->n_sources; i++) {
        const fig_source *s = &o->src[i];
        int v = 0; /* a results file of a staged trace (analyze writes source_format_version 3) */
        if (!s->is_trace && !(r->traces & FIG_TRACES_STAGED) && s->results >= 0 &&
            h5u_attr_read_int((hid_t)s->results, "source_format_version", &v, 1) == 1 && v >= 3)
            return as_fail(err, AS_ERR_UNSUPPORTED, "stage-aware support is not there yet for the %s "
                           "figure: %s holds results of a staged trace, and it draws single-grid "
                           "(ViT/DeiT) results only", r->name, s->path);
        if (!s->is_trace || !s->tr.staged || (r->traces & FIG_TRACES_STAGED)) continue;
        char what[1200];
        trace_describe_staged(&s->tr, what, sizeof what);
        return as_fail(err, AS_ERR_UNSUPPORTED, "stage-aware support is not there yet for the %s "
                       "figure: %s, and it draws single-grid (ViT/DeiT) traces only; "
                       "docs/trace-format.md shows how to read its window maps with h5py", r->name, what);
    }
    return AS_OK;
}

as_status figure_draw(const figure_recipe *r, const fig_opts *o, plot_figure *f, as_error *err) {
    if (check_options(r, o, NULL, err) != AS_OK || check_traces(r, o, err) != AS_OK) return err->status;
    if (o->n_sources < 1)
        return as_fail(err, AS_ERR_ARG, "the %s figure needs a trace or results file", r->name);
    if (o->n_sources > r->max_sources)
        return as_fail(err, AS_ERR_ARG, "the %s figure takes %d input%s, not %d", r->name,
                       r->max_sources, r->max_sources == 1 ? "" : "s", o->n_sources);
    for (int i = 0; i < o->n_sources; i++)
        for (int k = i + 1; k < o->n_sources; k++)
            if (o->src[i].label_given && o->src[k].label_given && strcmp(o->src[i].label, o->src[k].label) == 0)
                return as_fail(err, AS_ERR_ARG, "--labels: \"%s\" names inputs %d and %d: give each "
                               "input its own label", o->src[i].label, i + 1, k + 1);
    /* a copy whose labels are distinct; its sources share o's open handles */
    fig_opts *c = malloc(sizeof *c);
    if (!c) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    *c = *o;
    fig_sources_distinct(c->src, c->n_sources);
    as_status rc = r->draw(f, c, err);
    free(c);
    return rc;
}

as_status figure_render(const figure_recipe *r, const fig_opts *o, const char *path, as_error *err) {
    /* options are refused before a file is begun; figure_draw checks the inputs, and a failure
     * removes the file begun */
    if (check_options(r, o, path, err) != AS_OK || check_traces(r, o, err) != AS_OK) return err->status;
    plot_figure *f;
    double w, h;
    figure_size(r, o, &w, &h);
    as_status rc = plot_figure_begin(&f, path, w, h, o->dpi > 0 ? o->dpi : 300, err);
    if (rc != AS_OK) return rc;
    if ((rc = figure_draw(r, o, f, err)) != AS_OK) {
        plot_figure_abort(f);
        return rc;
    }
    return plot_figure_end(f, err);
}
