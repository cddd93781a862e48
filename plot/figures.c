/* figures.c: the recipe registry, sources, and the readers the recipes share. */
#define _POSIX_C_SOURCE 200809L
#include "figures.h"

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
        plot_axes_range(a, -0.5, lmax + 0.5, vlo, vhi);
        a->xcat = 1;
        a->xstep = lmax > 16 ? 2 : 1;
        const char *names[FIG_MAX_SOURCES];
        plot_color cols[FIG_MAX_SOURCES];
        plot_marker marks[FIG_MAX_SOURCES];
        for (int i = 0; i < o->n_sources; i++) {
            double x[256];
            size_t off = row >= 0 ? (size_t)row * nl[i] : 0;
            for (int l = 0; l < nl[i]; l++) x[l] = layers[i][l];
            cols[i] = plot_series_color(i);
            marks[i] = plot_series_marker(i);
            names[i] = o->src[i].label;
            plot_line(f, a, x, m[i] + off, nl[i], cols[i], marks[i], lo[i] ? lo[i] + off : NULL,
                      hi[i] ? hi[i] + off : NULL);
        }
        plot_axes_draw(f, a, title, "layer", ylabel);
        if (legend && o->n_sources > 1) plot_legend(f, a, names, o->n_sources, cols, marks, PLOT_LEGEND_OUTSIDE);
    }
    for (int i = 0; i < FIG_MAX_SOURCES; i++) {
        free(m[i]);
        free(lo[i]);
        free(hi[i]);
    }
    return rc;
}

int fig_definition(const fig_opts *o, as_error *err) {
    if (!o->definition) return analysis_definition_parse("row");
    int d = analysis_definition_parse(o->definition);
    if (d < 0) as_fail(err, AS_ERR_ARG, "--definition %s: use deepvit, row or map", o->definition);
    return d;
}

int fig_query(const fig_opts *o, const fig_source *s) {
    if (o->query >= 0) return o->query;
    int p = s->tr.num_prefix, g = vit_grid(&s->tr.cfg);
    return p > 0 ? 0 : (g / 2) * g + g / 2;
}

as_status figure_render(const figure_recipe *r, const fig_opts *o, const char *path, as_error *err) {
    if (o->n_sources < 1)
        return as_fail(err, AS_ERR_ARG, "the %s figure needs a trace or results file", r->name);
    if (o->n_sources > r->max_sources)
        return as_fail(err, AS_ERR_ARG, "the %s figure takes %d input%s, not %d", r->name,
                       r->max_sources, r->max_sources == 1 ? "" : "s", o->n_sources);
    plot_figure *f;
    as_status rc = plot_figure_begin(&f, path, o->width > 0 ? o->width : r->width,
                                     o->height > 0 ? o->height : r->height, o->dpi > 0 ? o->dpi : 300, err);
    if (rc != AS_OK) return rc;
    if ((rc = r->draw(f, o, err)) != AS_OK) {
        plot_figure_abort(f);
        return rc;
    }
    return plot_figure_end(f, err);
}
