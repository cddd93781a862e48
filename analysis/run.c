/* run.c: the analysis driver. Reads the trace one batch of images at a time (HDF5 from this
 * thread only), runs every metric on every image of the batch in parallel, then folds the
 * values into GSL running statistics in image order. Results are built in a temporary HDF5
 * file and only then renamed into place: to --out, or to the trace's results file beside it
 * (RUN.analysis.h5). The trace itself is never opened for writing, so no kill, crash or full
 * disk during analyze can damage what was recorded; results appear whole or not at all. */
#define _POSIX_C_SOURCE 200809L
#include "analysis.h"

#include <errno.h>
#include <fcntl.h>
#include <gsl/gsl_cdf.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_rstat.h>
#include <hdf5.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../io/atomic.h"
#include "../io/h5util.h"
#include "../io/trace.h"
#include "geometry.h"
#include "metric.h"

#define ANALYSIS_RESULTS_VERSION 1

#ifndef ATTNSCOPE_VERSION
#define ATTNSCOPE_VERSION "0.1.0"
#endif

typedef struct {
    analysis_ctx ctx;
    gsl_rstat_workspace **rs;     /* one per value */
    double *vals;                 /* (batch, n_vals) */
    unsigned char *scratch;       /* (batch, scratch_bytes) */
    hid_t per_image[ANALYSIS_MAX_OUTPUTS];
    size_t notes_shown;           /* length of ctx.notes printed after plan */
} metric_run;

static const char *const axis_names[] = {
    [ANALYSIS_AX_LAYER] = "layer",         [ANALYSIS_AX_LAYER2] = "layer2",
    [ANALYSIS_AX_HEAD] = "head",           [ANALYSIS_AX_THRESHOLD] = "threshold",
    [ANALYSIS_AX_PATCH] = "patch",         [ANALYSIS_AX_DEFINITION] = "definition",
    [ANALYSIS_AX_STAGE] = "stage"};
_Static_assert(sizeof axis_names / sizeof axis_names[0] == ANALYSIS_AX_COUNT, "axis names");

/* ---- layout -------------------------------------------------------------------------------- */

static as_status check_dims(const trace_reader *r, const char *name, const long *want, int n,
                            as_error *err) {
    long d[8];
    int nd = trace_dataset_dims(r, name, d, 8);
    int ok = nd == n;
    for (int i = 0; ok && i < n; i++) ok = d[i] == want[i];
    if (ok) return AS_OK;
    return as_fail(err, AS_ERR_FORMAT, "%s: %s is %s where the trace's attributes promise "
                   "(%ld, ...): the trace is corrupt; record it again", r->path, name,
                   nd < 0 ? "missing" : "of another shape", want[0]);
}

static as_status layout_from_reader(analysis_layout *lay, const trace_reader *r, as_error *err) {
    if (r->staged) return analysis_layout_staged(lay, r, err);
    memset(lay, 0, sizeof *lay);
    lay->cfg = r->cfg;
    lay->n_layers = r->n_layers;
    memcpy(lay->layers, r->layers, sizeof lay->layers);
    lay->n_heads = r->n_heads;
    memcpy(lay->heads, r->heads, sizeof lay->heads);
    lay->q_rows = r->q_rows;
    lay->tokens = r->num_tokens;
    lay->prefix = r->num_prefix;
    lay->grid = vit_grid(&r->cfg);
    lay->patches = vit_num_patches(&r->cfg);
    lay->patch_px = r->cfg.patch_size;
    lay->dim = r->cfg.embed_dim;
    lay->quantities = r->quantities;
    lay->n_images = r->n_images;
    if (lay->n_layers < 1 || lay->n_heads < 1)
        return as_fail(err, AS_ERR_FORMAT, "%s: the trace records no layers or heads", r->path);
    for (int li = 0; li < lay->n_layers; li++) {
        int l = lay->layers[li];
        char name[64];
        if (l < 0 || l >= r->cfg.depth)
            return as_fail(err, AS_ERR_FORMAT, "%s: layers attribute names layer %d of a %d-layer "
                           "model: the trace is corrupt", r->path, l, r->cfg.depth);
        for (int q = TRACE_Q_ATTN; q <= TRACE_Q_SCORES; q++)
            if (lay->quantities & (1u << q)) {
                snprintf(name, sizeof name, "layers/%02d/%s", l, q == TRACE_Q_ATTN ? "attn" : "scores");
                long want[3] = {lay->n_heads, lay->q_rows, lay->tokens};
                if (check_dims(r, name, want, 3, err) != AS_OK) return err->status;
            }
        if ((lay->quantities & (1u << TRACE_Q_Q)) && vit_has_keys(&r->cfg, l)) {
            lay->qk_width[li] = vit_qk_head_dim(&r->cfg, l);
            for (int w = 0; w < 2; w++) {
                snprintf(name, sizeof name, "layers/%02d/%s", l, w ? "k" : "q");
                long want[3] = {lay->n_heads, lay->tokens, lay->qk_width[li]};
                if (check_dims(r, name, want, 3, err) != AS_OK) return err->status;
            }
        }
        if (lay->quantities & (1u << TRACE_Q_TOKENS)) {
            snprintf(name, sizeof name, "layers/%02d/tokens", l);
            long want[2] = {lay->tokens, lay->dim};
            if (check_dims(r, name, want, 2, err) != AS_OK) return err->status;
        }
    }
    return AS_OK;
}

/* Results of a staged trace: each recorded layer's stage (layer_stage, in the order of the layer
 * axis) and the model's depth (model_depth), so figures draw stage boundaries and relative depth. */
static int staged_attrs(hid_t res, const analysis_layout *lay) {
    int st[VIT_MAX_DEPTH];
    for (int li = 0; li < lay->n_layers; li++) st[li] = lay->staged->l[li].stage;
    return h5u_attr_ints(res, "layer_stage", st, lay->n_layers) | h5u_attr_int(res, "model_depth", lay->cfg.depth);
}

/* Floats of one image's records that the metrics need, and where each lands. */
/* Floats of one image's attn (or scores), q (or k) and tokens of layer position li. */
static size_t map_floats(const analysis_layout *lay, int li) {
    if (lay->staged) return lay->staged->l[li].map_floats;
    return (size_t)lay->n_heads * lay->q_rows * lay->tokens;
}
/* w 0: q, 1: k (a staged SRA layer's k runs over its reduced keys) */
static size_t qk_floats(const analysis_layout *lay, int li, int w) {
    if (lay->staged) return w ? lay->staged->l[li].k_floats : lay->staged->l[li].qk_floats;
    return (size_t)lay->n_heads * lay->tokens * lay->qk_width[li];
}
static size_t tok_floats(const analysis_layout *lay, int li) {
    if (lay->staged) return lay->staged->l[li].tok_floats;
    return (size_t)lay->tokens * lay->dim;
}

static size_t image_floats(const analysis_layout *lay, unsigned needs) {
    size_t n = 0;
    for (int li = 0; li < lay->n_layers; li++) {
        if (needs & (1u << TRACE_Q_ATTN)) n += map_floats(lay, li);
        if (needs & (1u << TRACE_Q_SCORES)) n += map_floats(lay, li);
        if (needs & (1u << TRACE_Q_Q)) n += qk_floats(lay, li, 0) + qk_floats(lay, li, 1);
        if (needs & (1u << TRACE_Q_TOKENS)) n += tok_floats(lay, li);
    }
    return n;
}

static as_status read_image(const trace_reader *r, const analysis_layout *lay, unsigned needs,
                            long image, float *buf, analysis_image *im, as_error *err) {
    memset(im, 0, sizeof *im);
    im->index = image;
    for (int li = 0; li < lay->n_layers; li++) {
        char name[64];
        int l = lay->layers[li];
        if (needs & (1u << TRACE_Q_ATTN)) {
            snprintf(name, sizeof name, "layers/%02d/attn", l);
            if (trace_read_image_slab(r, name, image, buf, err) != AS_OK) return err->status;
            im->attn[li] = buf;
            buf += map_floats(lay, li);
        }
        if (needs & (1u << TRACE_Q_SCORES)) {
            snprintf(name, sizeof name, "layers/%02d/scores", l);
            if (trace_read_image_slab(r, name, image, buf, err) != AS_OK) return err->status;
            im->scores[li] = buf;
            buf += map_floats(lay, li);
        }
        if ((needs & (1u << TRACE_Q_Q)) && lay->qk_width[li]) {
            for (int w = 0; w < 2; w++) {
                snprintf(name, sizeof name, "layers/%02d/%s", l, w ? "k" : "q");
                if (trace_read_image_slab(r, name, image, buf, err) != AS_OK) return err->status;
                if (w) im->k[li] = buf;
                else im->q[li] = buf;
                buf += qk_floats(lay, li, w);
            }
        }
        if (needs & (1u << TRACE_Q_TOKENS)) {
            snprintf(name, sizeof name, "layers/%02d/tokens", l);
            if (trace_read_image_slab(r, name, image, buf, err) != AS_OK) return err->status;
            im->tokens[li] = buf;
            buf += tok_floats(lay, li);
        }
    }
    return AS_OK;
}

/* ---- writing results ----------------------------------------------------------------------- */

static hid_t group_create(hid_t loc, const char *name) {
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t g = H5Gcreate2(loc, name, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Pclose(lcpl);
    return g;
}

static void axes_string(const analysis_output *o, char *buf, size_t n) {
    buf[0] = 0;
    for (int i = 0; i < o->ndims; i++) {
        if (i) strncat(buf, ",", n - strlen(buf) - 1);
        strncat(buf, axis_names[o->axes[i]], n - strlen(buf) - 1);
    }
}

/* description, units, axes, and one label attribute per axis (layer indices, ...) */
static int output_attrs(hid_t obj, const analysis_output *o, const analysis_layout *lay,
                        const analysis_opts *opt) {
    char axes[128];
    axes_string(o, axes, sizeof axes);
    int bad = h5u_attr_str(obj, "description", o->description) | h5u_attr_str(obj, "units", o->units) |
              h5u_attr_str(obj, "axes", axes);
    for (int i = 0; i < o->ndims; i++) {
        const char *an = axis_names[o->axes[i]];
        switch (o->axes[i]) {
        case ANALYSIS_AX_LAYER:
        case ANALYSIS_AX_LAYER2: bad |= h5u_attr_ints(obj, an, lay->layers, lay->n_layers); break;
        case ANALYSIS_AX_HEAD: bad |= h5u_attr_ints(obj, an, lay->heads, lay->n_heads); break;
        case ANALYSIS_AX_THRESHOLD:
            bad |= h5u_attr_doubles(obj, an, opt->thresholds, opt->n_thresholds);
            break;
        case ANALYSIS_AX_PATCH: {
            int g[2] = {lay->patches / lay->grid, lay->grid};
            bad |= h5u_attr_ints(obj, "grid", g, 2);
            break;
        }
        case ANALYSIS_AX_DEFINITION: {
            const char *defs[ANALYSIS_N_DEFINITIONS];
            for (int d = 0; d < ANALYSIS_N_DEFINITIONS; d++) defs[d] = analysis_definition_name(d);
            bad |= h5u_attr_strs(obj, an, defs, ANALYSIS_N_DEFINITIONS);
            break;
        }
        case ANALYSIS_AX_STAGE: {
            int st[VIT_MAX_STAGES];
            for (int k = 0; k < lay->n_stages && k < VIT_MAX_STAGES; k++) st[k] = k;
            bad |= h5u_attr_ints(obj, an, st, lay->n_stages);
            break;
        }
        default: break;
        }
    }
    return bad;
}

static int write_dataset(hid_t loc, const char *name, hid_t mtype, const analysis_output *o,
                         const void *data) {
    hsize_t d[ANALYSIS_MAX_DIMS];
    for (int i = 0; i < o->ndims; i++) d[i] = (hsize_t)o->dims[i];
    hid_t s = H5Screate_simple(o->ndims, d, NULL);
    hid_t ds = H5Dcreate2(loc, name, mtype == H5T_NATIVE_DOUBLE ? H5T_IEEE_F64LE : H5T_STD_I64LE,
                          s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int bad = ds < 0 || H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0;
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(s);
    return bad;
}

static hid_t per_image_create(hid_t g, const analysis_output *o, long n_images) {
    hsize_t d[ANALYSIS_MAX_DIMS + 1], ch[ANALYSIS_MAX_DIMS + 1];
    d[0] = (hsize_t)n_images;
    ch[0] = 1;
    for (int i = 0; i < o->ndims; i++) d[i + 1] = ch[i + 1] = (hsize_t)o->dims[i];
    hid_t s = H5Screate_simple(o->ndims + 1, d, NULL);
    hid_t pl = H5Pcreate(H5P_DATASET_CREATE);
    if (n_images > 0) H5Pset_chunk(pl, o->ndims + 1, ch);
    hid_t ds = H5Dcreate2(g, "per_image", H5T_IEEE_F64LE, s, H5P_DEFAULT, pl, H5P_DEFAULT);
    H5Pclose(pl);
    H5Sclose(s);
    if (ds >= 0) h5u_attr_str(ds, "description", "every image's value; axis 0 is the trace's image index");
    return ds;
}

static int per_image_write(hid_t ds, const analysis_output *o, long start, int nb, const double *vals,
                           size_t stride, double *tmp) {
    for (int b = 0; b < nb; b++) memcpy(tmp + (size_t)b * o->count, vals + b * stride + o->offset,
                                        o->count * sizeof *tmp);
    hsize_t off[ANALYSIS_MAX_DIMS + 1] = {(hsize_t)start}, cnt[ANALYSIS_MAX_DIMS + 1] = {(hsize_t)nb};
    for (int i = 0; i < o->ndims; i++) cnt[i + 1] = (hsize_t)o->dims[i];
    hid_t fs = H5Dget_space(ds), ms = H5Screate_simple(o->ndims + 1, cnt, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, off, NULL, cnt, NULL);
    herr_t e = H5Dwrite(ds, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, tmp);
    H5Sclose(ms);
    H5Sclose(fs);
    return e < 0;
}

/* ---- CSV ------------------------------------------------------------------------------------ */

static void csv_label(FILE *f, const analysis_output *o, int axis, int i, const analysis_layout *lay,
                      const analysis_opts *opt) {
    switch (o->axes[axis]) {
    case ANALYSIS_AX_LAYER:
    case ANALYSIS_AX_LAYER2: fprintf(f, "%d", lay->layers[i]); break;
    case ANALYSIS_AX_HEAD: fprintf(f, "%d", lay->heads[i]); break;
    case ANALYSIS_AX_THRESHOLD: fprintf(f, "%.17g", opt->thresholds[i]); break;
    case ANALYSIS_AX_DEFINITION: fprintf(f, "%s", analysis_definition_name(i)); break;
    default: fprintf(f, "%d", i); break;
    }
}

/* One long-format table: the axes' labels, then the columns (mean, std, ... or value). */
static as_status csv_write(const char *dir, const char *metric, const analysis_output *o,
                           const analysis_layout *lay, const analysis_opts *opt, int ncols,
                           const char *const *col_names, const double *const *cols, as_error *err) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.%s.csv", dir, metric, o->name);
    atomic_file af;
    if (atomic_file_begin(&af, path, err) != AS_OK) return err->status;
    for (int a = 0; a < o->ndims; a++) fprintf(af.fp, "%s,", axis_names[o->axes[a]]);
    if (o->axes[0] == ANALYSIS_AX_PATCH || (o->ndims > 1 && o->axes[1] == ANALYSIS_AX_PATCH))
        fprintf(af.fp, "patch_row,patch_col,");
    for (int c = 0; c < ncols; c++) fprintf(af.fp, "%s%s", col_names[c], c + 1 < ncols ? "," : "\n");
    int idx[ANALYSIS_MAX_DIMS] = {0};
    for (size_t e = 0; e < o->count; e++) {
        size_t rem = e;
        for (int a = o->ndims - 1; a >= 0; a--) {
            idx[a] = (int)(rem % (size_t)o->dims[a]);
            rem /= (size_t)o->dims[a];
        }
        for (int a = 0; a < o->ndims; a++) {
            csv_label(af.fp, o, a, idx[a], lay, opt);
            fputc(',', af.fp);
        }
        for (int a = 0; a < o->ndims; a++)
            if (o->axes[a] == ANALYSIS_AX_PATCH)
                fprintf(af.fp, "%d,%d,", idx[a] / lay->grid, idx[a] % lay->grid);
        for (int c = 0; c < ncols; c++) fprintf(af.fp, "%.10g%s", cols[c][e], c + 1 < ncols ? "," : "\n");
    }
    return atomic_file_commit(&af, err);
}

/* ---- statistics and the per-metric results -------------------------------------------------- */

static as_status metric_write(metric_run *mr, hid_t root, hid_t scratch_g, long n_images,
                              const char *trace_path, as_error *err) {
    analysis_ctx *c = &mr->ctx;
    const analysis_layout *lay = c->lay;
    const analysis_opts *opt = c->opt;
    size_t n = c->n_vals;
    double *st = malloc(n * 5 * sizeof *st);
    int64_t *cnt = malloc(n * sizeof *cnt);
    if (!st || !cnt) {
        free(st);
        free(cnt);
        return as_fail(err, AS_ERR_NOMEM, "out of memory for the statistics");
    }
    double *mean = st, *sd = st + n, *lo = st + 2 * n, *hi = st + 3 * n, *cntd = st + 4 * n;
    for (size_t v = 0; v < n; v++) {
        size_t k = gsl_rstat_n(mr->rs[v]);
        cnt[v] = (int64_t)k;
        cntd[v] = (double)k;
        mean[v] = k ? gsl_rstat_mean(mr->rs[v]) : NAN;
        sd[v] = k > 1 ? gsl_rstat_sd(mr->rs[v]) : NAN;
        double half = k > 1 ? gsl_cdf_tdist_Pinv(0.975, (double)(k - 1)) * sd[v] / sqrt((double)k) : NAN;
        lo[v] = mean[v] - half;
        hi[v] = mean[v] + half;
    }
    as_status rc = AS_OK;
    if (c->metric->finish && (rc = c->metric->finish(c, mean, err)) != AS_OK) goto done;

    char gname[96];
    snprintf(gname, sizeof gname, "analysis/%s", c->metric->name);
    hid_t g = group_create(root, gname);
    if (g < 0) {
        rc = as_fail(err, AS_ERR_HDF5, "cannot create %s in the results (disk full?)", gname);
        goto done;
    }
    char now[32];
    h5u_iso_now(now, sizeof now);
    int bad = h5u_attr_str(g, "metric", c->metric->name) | h5u_attr_int(g, "version", c->metric->version) |
              h5u_attr_str(g, "definition", c->metric->definition) |
              h5u_attr_str(g, "summary", c->metric->summary) | h5u_attr_str(g, "parameters", c->params) |
              h5u_attr_int64(g, "images", n_images) | h5u_attr_str(g, "notes", c->notes) |
              h5u_attr_str(g, "report", c->report) | h5u_attr_str(g, "source_trace", trace_path) |
              h5u_attr_str(g, "created", now) | h5u_attr_str(g, "software", "attnscope " ATTNSCOPE_VERSION) |
              h5u_attr_str(g, "command_line", opt->command_line ? opt->command_line : "") |
              h5u_attr_str(g, "statistics", "mean; std = sample standard deviation (n-1); ci95 = "
                           "mean -/+ t(0.975, n-1) std / sqrt(n); count = images where the value "
                           "is defined (NaN values are left out)");
    for (int o = 0; o < c->n_out && !bad; o++) {
        const analysis_output *out = &c->out[o];
        hid_t og = group_create(g, out->name);
        if (og < 0) {
            bad = 1;
            break;
        }
        bad |= output_attrs(og, out, lay, opt);
        const char *names[] = {"mean", "std", "ci95_low", "ci95_high"};
        for (int s = 0; s < 4; s++)
            bad |= write_dataset(og, names[s], H5T_NATIVE_DOUBLE, out, st + (size_t)s * n + out->offset);
        bad |= write_dataset(og, "count", H5T_NATIVE_INT64, out, cnt + out->offset);
        if (opt->csv_dir && !bad) {
            const char *cn[] = {"mean", "std", "ci95_low", "ci95_high", "count"};
            const double *cols[5];
            for (int s = 0; s < 5; s++) cols[s] = st + (size_t)s * n + out->offset;
            if (csv_write(opt->csv_dir, c->metric->name, out, lay, opt, 5, cn, cols, err) != AS_OK) {
                H5Gclose(og);
                H5Gclose(g);
                rc = err->status;
                goto done;
            }
        }
        if (mr->per_image[o] >= 0) {
            /* the per-image dataset was built in a scratch group while the images streamed */
            char src[200];
            snprintf(src, sizeof src, "%s.%s/per_image", c->metric->name, out->name);
            bad |= H5Lmove(scratch_g, src, og, "per_image", H5P_DEFAULT, H5P_DEFAULT) < 0;
        }
        H5Gclose(og);
    }
    for (int d = 0; d < c->n_derived && !bad; d++) {
        const analysis_output *out = &c->derived[d];
        bad |= write_dataset(g, out->name, H5T_NATIVE_DOUBLE, out, out->derived);
        hid_t ds = H5Dopen2(g, out->name, H5P_DEFAULT);
        if (ds >= 0) {
            bad |= output_attrs(ds, out, lay, opt);
            H5Dclose(ds);
        }
        if (opt->csv_dir && !bad) {
            const char *cn[] = {"value"};
            const double *cols[1] = {out->derived};
            if (csv_write(opt->csv_dir, c->metric->name, out, lay, opt, 1, cn, cols, err) != AS_OK) {
                H5Gclose(g);
                rc = err->status;
                goto done;
            }
        }
    }
    H5Gclose(g);
    if (bad) rc = as_fail(err, AS_ERR_HDF5, "writing the %s results failed (disk full?)", c->metric->name);
done:
    free(st);
    free(cnt);
    return rc;
}

static void metric_free(metric_run *mr) {
    if (mr->rs)
        for (size_t v = 0; v < mr->ctx.n_vals; v++)
            if (mr->rs[v]) gsl_rstat_free(mr->rs[v]);
    free(mr->rs);
    free(mr->vals);
    free(mr->scratch);
    for (int d = 0; d < mr->ctx.n_derived; d++) free(mr->ctx.derived[d].derived);
    if (mr->ctx.metric && mr->ctx.metric->release) mr->ctx.metric->release(&mr->ctx);
    memset(mr, 0, sizeof *mr);
}

/* ---- committing ------------------------------------------------------------------------------ */

static int is_results_file(const char *path) {
    if (H5Fis_hdf5(path) <= 0) return 0;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return 0;
    char fmt[64];
    h5u_attr_read_str(f, "format", fmt, sizeof fmt);
    H5Fclose(f);
    return strcmp(fmt, ANALYSIS_RESULTS_FORMAT) == 0;
}

typedef struct {
    hid_t dst;
    int n_run;
    const metric_run *runs;
    int bad;
} copy_ctx;

static herr_t copy_old(hid_t g, const char *name, const H5L_info_t *info, void *ud) {
    copy_ctx *cc = ud;
    (void)info;
    for (int i = 0; i < cc->n_run; i++)
        if (strcmp(cc->runs[i].ctx.metric->name, name) == 0) return 0;
    char dst[96];
    snprintf(dst, sizeof dst, "analysis/%s", name);
    if (H5Lexists(cc->dst, dst, H5P_DEFAULT) > 0) return 0;
    if (H5Ocopy(g, name, cc->dst, dst, H5P_DEFAULT, H5P_DEFAULT) < 0) cc->bad = 1;
    return 0;
}

/* Where results of path live: path itself when it is a results file; else the trace's results
 * file beside it when that belongs to this very trace (same start_time: a trace recorded again
 * under the same name does not inherit the old one's results); else the trace itself (traces
 * analysed before results moved out held them in their own /analysis group). */
void analysis_results_path(const char *trace, char *out, size_t n) {
    size_t L = strlen(trace);
    if (L > 3 && strcmp(trace + L - 3, ".h5") == 0) snprintf(out, n, "%.*s.analysis.h5", (int)(L - 3), trace);
    else snprintf(out, n, "%s.analysis.h5", trace);
}

/* As trace_reader_open opens (so a second open of a file this process holds is compatible). */
static hid_t open_ro(const char *path) {
    if (H5Fis_hdf5(path) <= 0) return -1;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f >= 0) return f;
    hid_t fapl = h5u_swmr_read_fapl();
    f = H5Fopen(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl);
    H5Pclose(fapl);
    return f;
}

/* The sidecar of trace t (open) when it belongs to t, else -1. */
static hid_t open_sidecar(const char *trace, hid_t t) {
    char side[1100], want[64], have[64], fmt[64];
    analysis_results_path(trace, side, sizeof side);
    hid_t f = access(side, F_OK) == 0 ? open_ro(side) : -1;
    if (f < 0) return -1;
    h5u_attr_read_str(f, "format", fmt, sizeof fmt);
    h5u_attr_read_str(t, "start_time", want, sizeof want);
    h5u_attr_read_str(f, "trace_start_time", have, sizeof have);
    if (strcmp(fmt, ANALYSIS_RESULTS_FORMAT) != 0 || strcmp(want, have) != 0) {
        H5Fclose(f);
        return -1;
    }
    return f;
}

int64_t analysis_results_open(const char *path) {
    h5u_quiet();
    hid_t f = open_ro(path);
    if (f < 0) return -1;
    char fmt[64];
    h5u_attr_read_str(f, "format", fmt, sizeof fmt);
    if (strcmp(fmt, ANALYSIS_RESULTS_FORMAT) == 0) return f;
    hid_t side = open_sidecar(path, f);
    if (side >= 0) {
        H5Fclose(f);
        return side;
    }
    return f;
}

void analysis_results_where(const char *path, char *out, size_t n) {
    out[0] = 0;
    hid_t f = (hid_t)analysis_results_open(path);
    if (f < 0) return;
    if (H5Fget_name(f, out, n) < 0) out[0] = 0;
    H5Fclose(f);
}

/* Data on disk before the rename makes the name point at it (a power cut keeps old or new). */
static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* ---- the run --------------------------------------------------------------------------------- */

/* A staged trace (format 3): the metrics in mask that declare single-grid traces only
 * (analysis_metric.traces) are refused together, in one line. Why all of analyze: the layout
 * above is one grid for every layer; a stage-aware metric comes with a stage-aware layout. */
static as_status staged_refusal(const trace_reader *r, unsigned mask, as_error *err) {
    char names[512] = "", what[1200];
    int n = 0;
    for (int i = 0; i < analysis_metric_count(); i++) {
        const analysis_metric *m = analysis_metric_get(i);
        if (!(mask & (1u << i)) || (m->traces & ANALYSIS_TRACES_STAGED)) continue;
        size_t u = strlen(names);
        snprintf(names + u, sizeof names - u, "%s%s", n++ ? ", " : "", m->name);
    }
    if (!n) return AS_OK;
    trace_describe_staged(r, what, sizeof what);
    return as_fail(err, AS_ERR_UNSUPPORTED, "stage-aware support is not there yet for the metric%s "
                   "%s: %s, and %s single-grid (ViT/DeiT) traces only; docs/trace-format.md shows "
                   "how to read its window maps with h5py", n == 1 ? "" : "s", names, what,
                   n == 1 ? "it reads" : "they read");
}

as_status analysis_run(const char *trace_path, const char *out_path, const analysis_opts *opt,
                       analysis_report *rep, as_error *err) {
    gsl_set_error_handler_off();
    h5u_quiet();
    memset(rep, 0, sizeof *rep);
    if (!analysis_opts_check_given(opt, err)) return err->status;
    trace_reader r;
    as_status rc = trace_reader_open(&r, trace_path, err);
    if (rc != AS_OK) return rc;

    analysis_layout lay;
    memset(&lay, 0, sizeof lay);
    metric_run runs[32];
    int n_run = 0;
    float *img_buf = NULL;
    double *tmp_rows = NULL;
    analysis_image *ims = NULL;
    hid_t res = -1, scratch_g = -1;
    char tmp[1200] = "";
    memset(runs, 0, sizeof runs);

    unsigned mask = opt->metrics ? opt->metrics : (1u << analysis_metric_count()) - 1;
    if (r.staged && (rc = staged_refusal(&r, mask, err)) != AS_OK) goto fail;
    if ((rc = layout_from_reader(&lay, &r, err)) != AS_OK) goto fail;
    /* results of the trace itself go to the results file beside it */
    char side[1100];
    const int beside = !out_path;
    if (beside) {
        analysis_results_path(trace_path, side, sizeof side);
        out_path = side;
    }
    if (access(out_path, F_OK) == 0 && !is_results_file(out_path)) {
        rc = as_fail(err, AS_ERR_EXISTS, "%s: exists and is not an attnscope analysis file: "
                     "choose another --out (a trace's results go into it without --out)", out_path);
        goto fail;
    }
    long N = lay.n_images;
    if (opt->max_images > 0 && opt->max_images < N) N = opt->max_images;
    if (N < 1) {
        rc = as_fail(err, AS_ERR_ARG, "%s: the trace holds no complete image yet", trace_path);
        goto fail;
    }
    if (!r.complete && opt->report)
        fprintf(stderr, "%s: %s is %s: analysing its %ld complete images\n", opt->who ? opt->who : "attnscope", trace_path,
                r.swmr ? "still being recorded (or was killed)" : "incomplete (interrupted run)", N);

    /* plan every metric */
    unsigned needs = 0;
    char skipped[2048] = "";
    for (int i = 0; i < analysis_metric_count(); i++) {
        if (!(mask & (1u << i))) continue;
        metric_run *mr = &runs[n_run];
        mr->ctx.metric = analysis_metric_get(i);
        if (r.staged) mr->ctx.metric = mr->ctx.metric->staged; /* staged_refusal: it has one */
        mr->ctx.lay = &lay;
        mr->ctx.opt = opt;
        for (int o = 0; o < ANALYSIS_MAX_OUTPUTS; o++) mr->per_image[o] = -1;
        mr->ctx.needs = mr->ctx.metric->needs;
        as_error e = {0};
        if (!(lay.quantities & (1u << TRACE_Q_ATTN)) && (mr->ctx.metric->needs & (1u << TRACE_Q_ATTN))) {
            as_fail(&e, AS_ERR_ARG, "%s needs attention maps, which this trace lacks: record with "
                    "--record attn", mr->ctx.metric->name);
        } else if (mr->ctx.metric->plan(&mr->ctx, &e) == AS_OK) {
            needs |= mr->ctx.needs;
            /* each image's scratch starts on a 64-byte boundary (doubles, ints, vectors) */
            mr->ctx.scratch_bytes = (mr->ctx.scratch_bytes + 63) & ~(size_t)63;
            n_run++;
            continue;
        }
        metric_free(mr);
        if (opt->explicit_metrics) {
            rc = as_fail(err, e.status, "%s: %s", trace_path, e.msg);
            goto fail;
        }
        rep->metrics_skipped++;
        size_t u = strlen(skipped);
        snprintf(skipped + u, sizeof skipped - u, "%s%s", u ? "; " : "", e.msg);
    }
    if (!n_run) {
        rc = as_fail(err, AS_ERR_ARG, "%s: no metric can run on this trace: %s", trace_path, skipped);
        goto fail;
    }
    if (skipped[0] && !opt->quiet) fprintf(stderr, "%s: skipped: %s\n", opt->who ? opt->who : "attnscope", skipped);
    if (!opt->quiet)
        for (int m = 0; m < n_run; m++)
            if (runs[m].ctx.notes[0]) fprintf(stderr, "  note: %s\n", runs[m].ctx.notes);
    for (int m = 0; m < n_run; m++) runs[m].notes_shown = strlen(runs[m].ctx.notes);

    /* buffers for one batch */
    int threads = opt->threads > 0 ? opt->threads : omp_get_max_threads();
    int B = threads < N ? threads : (int)N;
    size_t per_img = image_floats(&lay, needs), max_count = 1;
    ims = calloc((size_t)B, sizeof *ims);
    img_buf = malloc((size_t)B * per_img * sizeof *img_buf + 1);
    double batch_bytes = (double)B * per_img * sizeof(float);
    int bad_alloc = !ims || !img_buf;
    for (int m = 0; m < n_run && !bad_alloc; m++) {
        metric_run *mr = &runs[m];
        mr->rs = calloc(mr->ctx.n_vals, sizeof *mr->rs);
        mr->vals = malloc((size_t)B * mr->ctx.n_vals * sizeof *mr->vals);
        mr->scratch = malloc((size_t)B * mr->ctx.scratch_bytes + 1);
        bad_alloc |= !mr->rs || !mr->vals || !mr->scratch;
        for (size_t v = 0; v < mr->ctx.n_vals && !bad_alloc; v++) bad_alloc |= !(mr->rs[v] = gsl_rstat_alloc());
        for (int o = 0; o < mr->ctx.n_out; o++)
            if (mr->ctx.out[o].count > max_count) max_count = mr->ctx.out[o].count;
        batch_bytes += (double)B * (mr->ctx.n_vals * sizeof(double) + mr->ctx.scratch_bytes) +
                       (double)mr->ctx.state_bytes;
    }
    tmp_rows = bad_alloc ? NULL : malloc((size_t)B * max_count * sizeof *tmp_rows);
    if (bad_alloc || !tmp_rows) {
        rc = as_fail(err, AS_ERR_NOMEM, "out of memory for a batch of %d images (%.0f MB): use "
                     "--threads 1", B, batch_bytes / 1e6);
        goto fail;
    }
    rep->batch_bytes = batch_bytes;

    /* the results file, built under a temporary name */
    /* a killed run's temporaries (named after a process that no longer runs) go first */
    atomic_sweep(out_path, ".analysis-tmp");
    atomic_sweep(trace_path, ".analysis-tmp");
    atomic_tmp_name(tmp, sizeof tmp, out_path, ".analysis-tmp");
    /* HDF5's default (oldest) format, on purpose: in the latest one a metric's many attributes
     * go to dense storage, and HDF5 1.10.8's H5Ocopy of dense variable-length string attributes
     * (which keeping earlier metrics needs) calls a null conversion function */
    res = H5Fcreate(tmp, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    if (res < 0) {
        rc = as_fail(err, AS_ERR_IO, "%s: cannot create a results file next to it (%s): check the "
                     "folder is writable", tmp, strerror(errno));
        goto fail;
    }
    scratch_g = group_create(res, "per_image_scratch");
    for (int m = 0; m < n_run; m++)
        for (int o = 0; o < runs[m].ctx.n_out; o++)
            if (opt->per_image || runs[m].ctx.out[o].keep_images) {
                char nm[96];
                snprintf(nm, sizeof nm, "%s.%s", runs[m].ctx.metric->name, runs[m].ctx.out[o].name);
                hid_t g = group_create(scratch_g, nm);
                runs[m].per_image[o] = g < 0 ? -1 : per_image_create(g, &runs[m].ctx.out[o], N);
                if (g >= 0) H5Gclose(g);
                if (runs[m].per_image[o] < 0) {
                    rc = as_fail(err, AS_ERR_HDF5, "%s: cannot create per-image results (disk full?)", tmp);
                    goto fail;
                }
            }

    /* the loop */
    double t0 = omp_get_wtime();
    long done = 0;
    for (long start = 0; start < N; start += B) {
        int nb = (int)(N - start < B ? N - start : B);
        for (int b = 0; b < nb; b++)
            if ((rc = read_image(&r, &lay, needs, start + b, img_buf + (size_t)b * per_img, &ims[b], err)) != AS_OK)
                goto fail;
        int n_tasks = nb * n_run;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (int t = 0; t < n_tasks; t++) {
            int b = t / n_run, m = t % n_run;
            metric_run *mr = &runs[m];
            mr->ctx.metric->image(&mr->ctx, &ims[b], mr->vals + (size_t)b * mr->ctx.n_vals,
                                  mr->scratch + (size_t)b * mr->ctx.scratch_bytes);
        }
        for (int m = 0; m < n_run; m++) {
            metric_run *mr = &runs[m];
            for (int b = 0; b < nb && mr->ctx.metric->accumulate; b++) mr->ctx.metric->accumulate(&mr->ctx, &ims[b]);
            for (int b = 0; b < nb; b++) {
                const double *v = mr->vals + (size_t)b * mr->ctx.n_vals;
                for (size_t k = 0; k < mr->ctx.n_vals; k++)
                    if (!isnan(v[k])) gsl_rstat_add(v[k], mr->rs[k]);
            }
            for (int o = 0; o < mr->ctx.n_out; o++)
                if (mr->per_image[o] >= 0 &&
                    per_image_write(mr->per_image[o], &mr->ctx.out[o], start, nb, mr->vals,
                                    mr->ctx.n_vals, tmp_rows)) {
                    rc = as_fail(err, AS_ERR_HDF5, "%s: writing per-image results failed (disk full?)", tmp);
                    goto fail;
                }
        }
        done += nb;
        if (opt->progress) opt->progress(opt->progress_ud, done, N);
        if (opt->stop && *opt->stop) {
            rc = as_fail(err, AS_ERR_INTERRUPTED, "%s: interrupted after %ld of %ld images; no "
                         "results were written", trace_path, done, N);
            goto fail;
        }
    }
    rep->seconds = omp_get_wtime() - t0;
    rep->images = N;

    /* results */
    char start[64];
    trace_read_attr_string(&r, "start_time", start, sizeof start);
    if (h5u_attr_str(res, "format", ANALYSIS_RESULTS_FORMAT) | h5u_attr_int(res, "format_version", ANALYSIS_RESULTS_VERSION) |
        h5u_attr_str(res, "source_trace", trace_path) | h5u_attr_str(res, "trace_start_time", start) |
        h5u_attr_str(res, "software", "attnscope " ATTNSCOPE_VERSION) |
        /* results of a staged trace say so: readers of single-grid results refuse them */
        (lay.staged ? h5u_attr_int(res, "source_format_version", r.version) | staged_attrs(res, &lay) : 0)) {
        rc = as_fail(err, AS_ERR_HDF5, "%s: cannot write results (disk full?)", tmp);
        goto fail;
    }
    if (opt->csv_dir && mkdir(opt->csv_dir, 0777) != 0 && errno != EEXIST) {
        rc = as_fail(err, AS_ERR_IO, "--csv %s: cannot create the folder (%s)", opt->csv_dir, strerror(errno));
        goto fail;
    }
    for (int m = 0; m < n_run; m++)
        if ((rc = metric_write(&runs[m], res, scratch_g, N, trace_path, err)) != AS_OK) goto fail;
    for (int m = 0; m < n_run; m++)
        for (int o = 0; o < ANALYSIS_MAX_OUTPUTS; o++)
            if (runs[m].per_image[o] >= 0) {
                H5Dclose(runs[m].per_image[o]);
                runs[m].per_image[o] = -1;
            }
    H5Gclose(scratch_g);
    scratch_g = -1;
    H5Ldelete(res, "per_image_scratch", H5P_DEFAULT);
    {
        /* keep the metrics an earlier run wrote: into this results file, or (results beside a
         * trace) into the trace's own /analysis by attnscope before results moved out */
        hid_t old = -1;
        if (beside) old = open_sidecar(trace_path, (hid_t)r.file_id);
        else if (access(out_path, F_OK) == 0) old = open_ro(out_path);
        if (old < 0 && beside) old = open_ro(trace_path);
        copy_ctx cc = {.dst = res, .n_run = n_run, .runs = runs};
        if (old >= 0 && H5Lexists(old, "analysis", H5P_DEFAULT) > 0) {
            hid_t g = H5Gopen2(old, "analysis", H5P_DEFAULT);
            H5Literate(g, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, copy_old, &cc);
            H5Gclose(g);
        }
        if (old >= 0) H5Fclose(old);
        if (cc.bad) {
            rc = as_fail(err, AS_ERR_HDF5, "%s: copying its earlier results failed (disk full?)", tmp);
            goto fail;
        }
    }
    herr_t ce = H5Fclose(res);
    res = -1;
    if (ce < 0) {
        rc = as_fail(err, AS_ERR_IO, "%s: closing the results failed (disk full?)", tmp);
        goto fail;
    }
    trace_reader_close(&r);
    if (fsync_path(tmp) != 0 || rename(tmp, out_path) != 0) {
        rc = as_fail(err, AS_ERR_IO, "%s: cannot move the results into place (%s): free space or "
                     "choose another --out", out_path, strerror(errno));
        remove(tmp);
        goto fail_closed;
    }
    rep->metrics_run = n_run;
    for (int m = 0; m < n_run && !opt->quiet; m++) { /* the notes finish() added ("; " joined) */
        const char *more = runs[m].ctx.notes + runs[m].notes_shown;
        if (*more) fprintf(stderr, "  note: %s\n", more + (runs[m].notes_shown ? 2 : 0));
    }
    if (opt->report)
        for (int m = 0; m < n_run; m++) { /* within 100 columns: a long summary goes below */
            char head[96];
            int k = snprintf(head, sizeof head, "%s (%ld images):", runs[m].ctx.metric->name, N);
            int wide = k + 1 + (int)strlen(runs[m].ctx.metric->summary) > 100;
            fprintf(opt->report, "%s%s%s\n%s", head, wide ? "\n  " : " ", runs[m].ctx.metric->summary,
                    runs[m].ctx.report);
        }
    for (int m = 0; m < n_run; m++) metric_free(&runs[m]);
    analysis_staged_free(lay.staged);
    free(ims);
    free(img_buf);
    free(tmp_rows);
    return AS_OK;

fail:
    if (scratch_g >= 0) H5Gclose(scratch_g);
    for (int m = 0; m < n_run; m++)
        for (int o = 0; o < ANALYSIS_MAX_OUTPUTS; o++)
            if (runs[m].per_image[o] >= 0) H5Dclose(runs[m].per_image[o]);
    if (res >= 0) H5Fclose(res);
    if (tmp[0]) remove(tmp);
    trace_reader_close(&r);
fail_closed:
    for (int m = 0; m < n_run; m++) metric_free(&runs[m]);
    analysis_staged_free(lay.staged);
    free(ims);
    free(img_buf);
    free(tmp_rows);
    return rc;
}

/* ---- listing ------------------------------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t n;
} list_ctx;

static herr_t list_one(hid_t g, const char *name, const H5L_info_t *info, void *ud) {
    list_ctx *lc = ud;
    (void)info;
    hid_t m = H5Gopen2(g, name, H5P_DEFAULT);
    if (m < 0) return 0;
    char params[512], created[32];
    int version = 0;
    long long images = 0;
    h5u_attr_read_int(m, "version", &version, 1);
    if (H5Aexists(m, "images") > 0) {
        hid_t a = H5Aopen(m, "images", H5P_DEFAULT);
        H5Aread(a, H5T_NATIVE_LLONG, &images);
        H5Aclose(a);
    }
    h5u_attr_read_str(m, "parameters", params, sizeof params);
    h5u_attr_read_str(m, "created", created, sizeof created);
    size_t u = strlen(lc->buf);
    snprintf(lc->buf + u, lc->n - u, "%s%s v%d, %lld images, %s (%s)", u ? "\n" : "", name, version,
             images, created, params);
    H5Gclose(m);
    return 0;
}

int analysis_list(const char *path, char *buf, size_t n) {
    h5u_quiet();
    buf[0] = 0;
    hid_t f = (hid_t)analysis_results_open(path);
    if (f < 0) return 0;
    int count = 0;
    if (H5Lexists(f, "analysis", H5P_DEFAULT) > 0) {
        hid_t g = H5Gopen2(f, "analysis", H5P_DEFAULT);
        hsize_t k = 0;
        H5G_info_t gi;
        if (H5Gget_info(g, &gi) >= 0) count = (int)gi.nlinks;
        list_ctx lc = {buf, n};
        H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &k, list_one, &lc);
        H5Gclose(g);
    }
    H5Fclose(f);
    return count;
}

int analysis_report_text(const char *path, const char *metric, char *buf, size_t n) {
    h5u_quiet();
    buf[0] = 0;
    hid_t f = (hid_t)analysis_results_open(path);
    if (f < 0) return 0;
    char name[128];
    snprintf(name, sizeof name, "analysis/%s", metric);
    int ok = H5Lexists(f, name, H5P_DEFAULT) > 0; /* negative too when /analysis is missing */
    if (ok) {
        hid_t g = H5Gopen2(f, name, H5P_DEFAULT);
        h5u_attr_read_str(g, "report", buf, n);
        H5Gclose(g);
    }
    H5Fclose(f);
    return ok;
}
