/* geometry.c: the per-layer geometry of staged traces (format 3) for the stage-aware metrics:
 * which token every map slot holds, the shift masks, token centres, and the cells a finer grid's
 * tokens fall in on a coarser grid (the merges' token transfer). */
#include "geometry.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/h5util.h"

/* The dataset's dimensions after the image axis must be want (n of them). */
static as_status check_dims(const trace_reader *r, const char *name, const long *want, int n,
                            as_error *err) {
    long d[8];
    int nd = trace_dataset_dims(r, name, d, 8), ok = nd == n;
    for (int i = 0; ok && i < n; i++) ok = d[i] == want[i];
    return ok ? AS_OK : as_fail(err, AS_ERR_FORMAT, "%s: %s is %s where the layer's geometry "
                                "attributes promise (%ld, ...): the trace is corrupt; record it "
                                "again", r->path, name, nd < 0 ? "missing" : "of another shape", want[0]);
}

/* layers/LL/params/shift_mask (nW, M^2, M^2) into all (nW * M^4 floats). */
static as_status read_mask(const trace_reader *r, const analysis_lgeom *g, float *all, as_error *err) {
    char name[64];
    snprintf(name, sizeof name, "layers/%02d/params/shift_mask", g->layer);
    hid_t d = H5Dopen2((hid_t)r->file_id, name, H5P_DEFAULT);
    if (d < 0) return as_fail(err, AS_ERR_FORMAT, "%s: %s is missing: the trace is corrupt", r->path, name);
    hid_t sp = H5Dget_space(d);
    hsize_t dims[3] = {0, 0, 0};
    int nd = H5Sget_simple_extent_ndims(sp);
    if (nd == 3) H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    const hsize_t N = (hsize_t)g->M * g->M;
    herr_t e = nd == 3 && dims[0] == (hsize_t)g->n_windows && dims[1] == N && dims[2] == N
               ? H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, all) : -1;
    H5Dclose(d);
    return e < 0 ? as_fail(err, AS_ERR_FORMAT, "%s: %s is not a (%d, %d, %d) table: the trace is "
                           "corrupt", r->path, name, g->n_windows, (int)N, (int)N) : AS_OK;
}

/* The tokens each reduced key of an SRA layer averages, per axis of n tokens
 * (vit_sra_key_tokens), and the key's centre, the mean of those tokens' centres. */
static void key_axis(const trace_layer_geom *t, int n, int k, int *lo, int *hi, double *centre, double off,
                     double stride) {
    for (int i = 0; i < k; i++) {
        vit_sra_key_tokens(t->sr_ratio, t->sr_pool, n, i, &lo[i], &hi[i]);
        centre[i] = off + stride * 0.5 * (lo[i] + hi[i] - 1);
    }
}

static as_status reduced_keys(analysis_lgeom *g, const trace_layer_geom *t, const char *path, as_error *err) {
    g->kgh = t->kgh, g->kgw = t->kgw;
    const int sane = t->kgh * t->kgw == g->Tk && g->prefix == 0 && g->Tq == g->T &&
                     (t->sr_pool ? t->kgh == t->sr_pool && t->kgw == t->sr_pool
                                 : t->sr_ratio >= 1 && t->sr_ratio <= g->gh && t->sr_ratio <= g->gw &&
                                       t->kgh == (g->gh - t->sr_ratio) / t->sr_ratio + 1 &&
                                       t->kgw == (g->gw - t->sr_ratio) / t->sr_ratio + 1);
    if (!sane)
        return as_fail(err, AS_ERR_FORMAT, "%s: layer %d's key grid %d x %d does not follow from its %d x %d "
                       "grid and its sr_ratio %d / sr_pool %d: the trace is corrupt", path, t->layer,
                       t->kgh, t->kgw, g->gh, g->gw, t->sr_ratio, t->sr_pool);
    g->kb = malloc(2 * (size_t)(g->kgh + g->kgw) * sizeof *g->kb);
    g->kcy = malloc((size_t)g->kgh * sizeof *g->kcy);
    g->kcx = malloc((size_t)g->kgw * sizeof *g->kcx);
    if (!g->kb || !g->kcy || !g->kcx) return as_fail(err, AS_ERR_NOMEM, "out of memory for layer %d's keys", t->layer);
    key_axis(t, g->gh, g->kgh, g->kb, g->kb + g->kgh, g->kcy, g->offset, g->stride);
    key_axis(t, g->gw, g->kgw, g->kb + 2 * g->kgh, g->kb + 2 * g->kgh + g->kgw, g->kcx, g->offset, g->stride);
    return AS_OK;
}

static as_status layer_open(analysis_lgeom *g, const trace_reader *r, int li, as_error *err) {
    const trace_layer_geom *t = &r->geom[li];
    int ids[1024];
    memset(g, 0, sizeof *g);
    /* reduced keys (SRA: a key grid of its own) and class attention (one class row over [cls;
     * patches]) need their own key geometry here: refused rather than read as global maps */
    if (t->scope == VIT_SCOPE_CLASS && !(t->Tq == 1 && t->prefix == 1 && t->Tk == t->T))
        return as_fail(err, AS_ERR_FORMAT, "%s: layer %d's class attention is %d x %d over %d tokens "
                       "with %d prefix tokens, not the class row over [cls; patches]: the trace is "
                       "corrupt", r->path, t->layer, t->Tq, t->Tk, t->T, t->prefix);
    g->layer = t->layer, g->stage = t->stage, g->scope = t->scope;
    g->gh = t->gh, g->gw = t->gw, g->prefix = t->prefix, g->T = t->T, g->D = t->D;
    g->H = trace_layer_heads(r, t->layer, ids);
    g->P = t->n_problems, g->Tq = t->Tq, g->Tk = t->Tk;
    g->stride = t->stride_px, g->offset = t->offset_px;
    g->n_windows = t->scope == VIT_SCOPE_WINDOW ? t->nwh * t->nww : 1;
    g->every_problem = g->P == g->n_windows;
    g->signed_maps = t->attn_signed;
    if (t->scope == VIT_SCOPE_WINDOW) g->M = t->M, g->shift = t->shift;
    char name[64];
    snprintf(name, sizeof name, "layers/%02d", t->layer);
    hid_t grp = H5Gopen2((hid_t)r->file_id, name, H5P_DEFAULT);
    if (grp >= 0) {
        if (h5u_attr_read_floats(grp, "scale", &g->scale, 1) != 1) g->scale = 0;
        H5Gclose(grp);
    }
    if (g->H < 1) return as_fail(err, AS_ERR_FORMAT, "%s: layer %d records no heads", r->path, t->layer);
    if (!(g->stride > 0 && g->stride < 1e6 && fabs(g->offset) < 1e6)) /* centres and cells divide by it */
        return as_fail(err, AS_ERR_FORMAT, "%s: layer %d's token_stride_px %g / token_offset_px %g "
                       "are not a token spacing: the trace is corrupt", r->path, t->layer, g->stride, g->offset);
    g->map_floats = (size_t)g->H * g->P * g->Tq * g->Tk;
    g->tok_floats = (size_t)g->T * g->D;
    /* the recorded datasets must have the shapes the geometry promises */
    for (int q = TRACE_Q_ATTN; q <= TRACE_Q_SCORES; q++)
        if (r->quantities & (1u << q)) {
            snprintf(name, sizeof name, "layers/%02d/%s", t->layer, q == TRACE_Q_ATTN ? "attn" : "scores");
            long w4[4] = {g->H, g->P, g->Tq, g->Tk}, w3[3] = {g->H, g->Tq, g->Tk};
            int win = t->scope == VIT_SCOPE_WINDOW;
            if (check_dims(r, name, win ? w4 : w3, win ? 4 : 3, err) != AS_OK) return err->status;
        }
    snprintf(name, sizeof name, "layers/%02d/q", t->layer);
    const int kr = t->scope == VIT_SCOPE_SRA ? g->Tk : g->T; /* k's rows: an SRA layer's reduced keys */
    const int qr = t->scope == VIT_SCOPE_CLASS ? 1 : g->T;   /* q's rows: a class layer's class token */
    if ((r->quantities & (1u << TRACE_Q_Q)) && trace_dataset_dims(r, name, (long[4]){0}, 4) >= 0) {
        g->qk = t->qk_dim;
        for (int w = 0; w < 2; w++) {
            snprintf(name, sizeof name, "layers/%02d/%s", t->layer, w ? "k" : "q");
            long want[3] = {g->H, w ? kr : qr, g->qk};
            if (check_dims(r, name, want, 3, err) != AS_OK) return err->status;
        }
        g->qk_floats = (size_t)g->H * qr * g->qk;
        g->k_floats = (size_t)g->H * kr * g->qk;
    }
    if (r->quantities & (1u << TRACE_Q_TOKENS)) {
        snprintf(name, sizeof name, "layers/%02d/tokens", t->layer);
        long want[2] = {g->T, g->D};
        if (check_dims(r, name, want, 2, err) != AS_OK) return err->status;
    }
    g->qtok = malloc((size_t)g->P * g->Tq * sizeof *g->qtok);
    g->ktok = malloc((size_t)g->P * g->Tk * sizeof *g->ktok);
    if (!g->qtok || !g->ktok) return as_fail(err, AS_ERR_NOMEM, "out of memory for layer %d's geometry", t->layer);
    if (t->scope != VIT_SCOPE_WINDOW) { /* one problem: rows are tokens 0..Tq-1, keys all T (or the reduced keys) */
        for (int i = 0; i < g->Tq; i++) g->qtok[i] = i;
        for (int j = 0; j < g->Tk; j++) g->ktok[j] = j;
        return t->scope == VIT_SCOPE_SRA ? reduced_keys(g, t, r->path, err) : AS_OK;
    }
    const size_t N = (size_t)g->M * g->M;
    int *tok = malloc((size_t)g->n_windows * N * sizeof *tok);
    float *all = malloc((size_t)g->n_windows * N * N * sizeof *all);
    g->mask = malloc((size_t)g->P * N * N * sizeof *g->mask);
    as_status rc = AS_OK;
    if (!tok || !all || !g->mask) rc = as_fail(err, AS_ERR_NOMEM, "out of memory for layer %d's windows", t->layer);
    if (rc == AS_OK) rc = trace_read_window_tokens(r, t->layer, tok, err);
    if (rc == AS_OK) rc = read_mask(r, g, all, err);
    for (int p = 0; rc == AS_OK && p < g->P; p++) {
        const int w = r->n_windows > 0 ? r->windows[p] : p; /* the recorded windows, ascending */
        memcpy(g->qtok + p * N, tok + w * N, N * sizeof *tok);
        memcpy(g->ktok + p * N, tok + w * N, N * sizeof *tok);
        memcpy(g->mask + p * N * N, all + w * N * N, N * N * sizeof *all);
    }
    free(tok);
    free(all);
    return rc;
}

void analysis_staged_free(analysis_staged *s) {
    if (!s) return;
    for (int li = 0; li < s->n_layers; li++) {
        free(s->l[li].qtok);
        free(s->l[li].ktok);
        free(s->l[li].mask);
        free(s->l[li].kb);
        free(s->l[li].kcy);
        free(s->l[li].kcx);
    }
    free(s);
}

as_status analysis_staged_open(analysis_staged **out, const trace_reader *r, as_error *err) {
    analysis_staged *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    s->n_layers = r->n_layers;
    s->n_stages = r->cfg.n_stages > 0 ? r->cfg.n_stages : 1;
    for (int li = 0; li < r->n_layers; li++) {
        if (layer_open(&s->l[li], r, li, err) != AS_OK) {
            analysis_staged_free(s);
            return err->status;
        }
        if (s->l[li].stage >= s->n_stages) s->n_stages = s->l[li].stage + 1;
        if (s->l[li].gh * s->l[li].gw < s->l[s->coarse].gh * s->l[s->coarse].gw) s->coarse = li;
    }
    *out = s;
    return AS_OK;
}

int analysis_cell_of(const analysis_lgeom *fine, int gi, const analysis_lgeom *coarse) {
    /* strides r apart (r a whole number): per axis the cell t / r, so every fine token falls in
     * exactly one cell: a Swin merge's 2 x 2 children, and PVT's strided conv, whose output y is
     * centred on fine token 2y (a centre rule would put fine token 2y - 1 in cell y, leave cell 0
     * one child and the last fine row in no cell) */
    const double ratio = coarse->stride / fine->stride;
    const int r = (int)lround(ratio);
    if (r >= 1 && fabs(ratio - r) < 1e-9) {
        const int y = gi / fine->gw / r, x = gi % fine->gw / r;
        return y < coarse->gh && x < coarse->gw ? y * coarse->gw + x : -1;
    }
    return analysis_point_cell(coarse, fine->offset + fine->stride * (gi / fine->gw),
                               fine->offset + fine->stride * (gi % fine->gw));
}

int analysis_point_cell(const analysis_lgeom *coarse, double cy, double cx) {
    /* cell c spans [offset + stride c - stride / 2, offset + stride c + stride / 2) */
    const double fy = floor((cy - coarse->offset) / coarse->stride + 0.5);
    const double fx = floor((cx - coarse->offset) / coarse->stride + 0.5);
    if (fy < 0 || fx < 0 || fy >= coarse->gh || fx >= coarse->gw) return -1;
    return (int)fy * coarse->gw + (int)fx;
}

int analysis_key_cell(const analysis_lgeom *g, int w, int j, const analysis_lgeom *coarse) {
    if (analysis_reduced(g)) return analysis_point_cell(coarse, g->kcy[j / g->kgw], g->kcx[j % g->kgw]);
    const int kt = g->ktok[(size_t)w * g->Tk + j], u = kt < 0 ? -1 : analysis_grid_of(g, kt);
    return u < 0 ? -1 : analysis_cell_of(g, u, coarse);
}

void analysis_cells(int *cell, int *n, const analysis_lgeom *fine, const analysis_lgeom *coarse) {
    if (n) memset(n, 0, (size_t)coarse->gh * coarse->gw * sizeof *n);
    for (int gi = 0; gi < fine->gh * fine->gw; gi++) {
        cell[gi] = analysis_cell_of(fine, gi, coarse);
        if (n && cell[gi] >= 0) n[cell[gi]]++;
    }
}

int analysis_same_support(const analysis_lgeom *a, const analysis_lgeom *b) {
    if (a->scope != b->scope || a->gh != b->gh || a->gw != b->gw || a->prefix != b->prefix ||
        a->P != b->P || a->Tq != b->Tq || a->Tk != b->Tk || a->M != b->M || a->shift != b->shift)
        return 0;
    return memcmp(a->qtok, b->qtok, (size_t)a->P * a->Tq * sizeof *a->qtok) == 0 &&
           memcmp(a->ktok, b->ktok, (size_t)a->P * a->Tk * sizeof *a->ktok) == 0;
}

as_status analysis_layout_staged(analysis_layout *lay, const trace_reader *r, as_error *err) {
    memset(lay, 0, sizeof *lay);
    if (r->n_layers < 1) return as_fail(err, AS_ERR_FORMAT, "%s: the trace records no layers", r->path);
    analysis_staged *s;
    if (analysis_staged_open(&s, r, err) != AS_OK) return err->status;
    lay->staged = s;
    lay->n_stages = s->n_stages;
    lay->cfg = r->cfg;
    lay->n_layers = r->n_layers;
    memcpy(lay->layers, r->layers, sizeof lay->layers);
    const analysis_lgeom *g0 = &s->l[0];
    for (int li = 0; li < s->n_layers; li++) {
        const analysis_lgeom *g = &s->l[li];
        if (g->H > lay->n_heads) lay->n_heads = g->H;
        lay->qk_width[li] = g->qk;
    }
    /* the head axis: each layer's own heads 0..H-1 (--heads all), or the list every layer has */
    for (int k = 0; k < lay->n_heads; k++) lay->heads[k] = r->heads_all ? k : r->heads[k];
    lay->q_rows = g0->Tq, lay->tokens = g0->T, lay->prefix = g0->prefix, lay->dim = g0->D;
    lay->grid = g0->gw, lay->patches = g0->gh * g0->gw;
    lay->patch_px = r->cfg.patch_size;
    lay->quantities = r->quantities;
    lay->n_images = r->n_images;
    return AS_OK;
}

int analysis_staged_negative(const analysis_lgeom *g, const float *maps) {
    int neg = 0;
    for (int h = 0; h < g->H && !neg; h++)
        for (int w = 0; w < g->P && !neg; w++)
            for (int i = 0; i < g->Tq && !neg; i++)
                if (analysis_grid_of(g, g->qtok[(size_t)w * g->Tq + i]) >= 0)
                    neg = analysis_any_negative(maps + (((size_t)h * g->P + w) * g->Tq + i) * g->Tk, g->Tk);
    return neg;
}

int analysis_stage_output_add(analysis_ctx *c, const char *name, const char *description,
                              const char *units) {
    int dims[1] = {c->lay->n_stages};
    analysis_axis ax[1] = {ANALYSIS_AX_STAGE};
    return analysis_output_add(c, name, description, units, 1, dims, ax);
}

void analysis_stage_means(const analysis_layout *lay, const double *per_layer, double *out) {
    for (int s = 0; s < lay->n_stages; s++) {
        double sum = 0;
        int n = 0;
        for (int li = 0; li < lay->n_layers; li++)
            if (lay->staged->l[li].stage == s && !isnan(per_layer[li])) {
                sum += per_layer[li];
                n++;
            }
        out[s] = n ? sum / n : NAN;
    }
}

double analysis_heads_mean(const double *v, int n) {
    double s = 0;
    for (int h = 0; h < n; h++) s += v[h];
    return n ? s / n : NAN;
}
