/* keymap.c: a staged layer's query row on the input image (keymap.h). */
#include "keymap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/config.h"

int keymap_cell_at(double p, double off, double stride, int n) {
    int c = (int)floor((p - off) / stride + 0.5);
    return c < 0 ? 0 : c >= n ? n - 1 : c;
}

void keymap_cell_span(double off, double stride, int i, int img, double *lo, double *hi) {
    *lo = fmax(0, off + stride * (i - 0.5));
    *hi = fmin(img, off + stride * (i + 0.5));
}

void keymap_key_span(const trace_layer_geom *g, int n, int i, int img, double *lo, double *hi) {
    double l, h;
    if (g->sr_pool > 0) {
        double a0, b1;
        keymap_cell_span(g->offset_px, g->stride_px, 0, img, &a0, &h);
        keymap_cell_span(g->offset_px, g->stride_px, n - 1, img, &l, &b1);
        *lo = a0 + (b1 - a0) * i / g->sr_pool;
        *hi = a0 + (b1 - a0) * (i + 1) / g->sr_pool;
        return;
    }
    int a, b;
    vit_sra_key_tokens(g->sr_ratio, g->sr_pool, n, i, &a, &b);
    keymap_cell_span(g->offset_px, g->stride_px, a, img, lo, &h);
    keymap_cell_span(g->offset_px, g->stride_px, b - 1, img, &l, hi);
}

/* Token t's cell of layer g. */
static keymap_cell token_cell(const trace_layer_geom *g, int t, int S, double v) {
    keymap_cell c = {.v = v};
    keymap_cell_span(g->offset_px, g->stride_px, t / g->gw, S, &c.y0, &c.y1);
    keymap_cell_span(g->offset_px, g->stride_px, t % g->gw, S, &c.x0, &c.x1);
    return c;
}

/* The runs of set entries of in[0..n): starts and ends (inclusive); returns their count (<= 2 for
 * a window of a cyclically shifted grid, more only for a corrupt table: capped at 2). */
static int runs(const unsigned char *in, int n, int *a, int *b) {
    int k = 0;
    for (int i = 0; i < n && k < 2; i++) {
        if (!in[i] || (i > 0 && in[i - 1])) continue;
        int j = i;
        while (j + 1 < n && in[j + 1]) j++;
        a[k] = i, b[k] = j, k++;
    }
    return k;
}

/* WINDOW: the query's window, its row of keys, every grid token as a cell (outside the window:
 * exactly 0) and the window's pieces. */
static as_status window_row(const fig_source *s, const trace_layer_geom *g, const float *A, int t,
                            keymap_row *k, as_error *err) {
    const trace_reader *r = &s->tr;
    const int R = g->M * g->M, W = g->nwh * g->nww, N = g->gh * g->gw, S = r->cfg.img_size;
    int *tok = malloc((size_t)W * R * sizeof *tok);
    if (!tok) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    if (trace_read_window_tokens(r, g->layer, tok, err) != AS_OK) {
        free(tok);
        return err->status;
    }
    int w = -1, row = -1;
    for (int i = 0; i < W * R && w < 0; i++)
        if (tok[i] == t) w = i / R, row = i % R;
    int pos = w;
    if (w >= 0 && r->n_windows > 0) {
        pos = -1;
        for (int i = 0; i < r->n_windows; i++)
            if (r->windows[i] == w) pos = i;
    }
    if (w < 0 || pos < 0) {
        free(tok);
        return as_fail(err, AS_ERR_ARG, "%s: layer %d: the query token %d lies in window %d, which "
                       "the trace does not hold (recorded with --windows): choose another --query or "
                       "record that window", r->path, g->layer, t, w);
    }
    k->window = w;
    k->n_windows = W;
    k->n_keys = R;
    k->keys = malloc((size_t)R * sizeof *k->keys);
    k->cell = malloc((size_t)N * sizeof *k->cell);
    unsigned char *in = calloc((size_t)N + g->gh + g->gw, 1);
    if (!k->keys || !k->cell || !in) {
        free(tok);
        free(in);
        return as_fail(err, AS_ERR_NOMEM, "out of memory");
    }
    const float *rw = A + ((size_t)pos * R + row) * R;
    for (int j = 0; j < R; j++) k->keys[j] = rw[j];
    for (int i = 0; i < N; i++) {
        k->cell[i] = token_cell(g, i, S, 0);
        k->cell[i].outside = 1;
    }
    unsigned char *ys = in + N, *xs = ys + g->gh;
    for (int j = 0; j < R; j++) {
        const int u = tok[(size_t)w * R + j];
        if (u < 0) continue; /* a pad slot: a key with weight, but no place on the image */
        k->cell[u].v = rw[j];
        k->cell[u].outside = 0;
        ys[u / g->gw] = xs[u % g->gw] = 1;
    }
    k->n = N;
    int ya[2], yb[2], xa[2], xb[2];
    const int ny = runs(ys, g->gh, ya, yb), nx = runs(xs, g->gw, xa, xb);
    double l, h;
    for (int i = 0; i < ny; i++)
        for (int j = 0; j < nx; j++) {
            double *p = k->piece[k->n_pieces++];
            keymap_cell_span(g->offset_px, g->stride_px, ya[i], S, &p[1], &h);
            keymap_cell_span(g->offset_px, g->stride_px, yb[i], S, &l, &p[3]);
            keymap_cell_span(g->offset_px, g->stride_px, xa[j], S, &p[0], &h);
            keymap_cell_span(g->offset_px, g->stride_px, xb[j], S, &l, &p[2]);
        }
    free(tok);
    free(in);
    return AS_OK;
}

as_status keymap_row_read(const fig_source *s, int li, long image, int head, int token,
                          keymap_row *k, as_error *err) {
    const trace_reader *r = &s->tr;
    const trace_layer_geom *g = &r->geom[li];
    const int S = r->cfg.img_size, N = g->gh * g->gw;
    memset(k, 0, sizeof *k);
    k->layer = g->layer;
    k->scope = g->scope;
    k->window = -1;
    k->token = g->scope == VIT_SCOPE_CLASS ? -1 : token;
    k->signed_map = g->attn_signed;
    if (g->scope != VIT_SCOPE_CLASS && (token < 0 || token >= N))
        return as_fail(err, AS_ERR_ARG, "%s: layer %d: query token %d is not on its %d x %d grid",
                       r->path, g->layer, token, g->gh, g->gw);
    if (g->scope != VIT_SCOPE_CLASS && g->scope != VIT_SCOPE_WINDOW && (g->prefix > 0 || g->Tq != N))
        return as_fail(err, AS_ERR_UNSUPPORTED, "%s: layer %d holds %s: the map figures draw "
                       "staged layers whose query rows are their grid tokens", r->path, g->layer,
                       g->prefix > 0 ? "prefix tokens" : "prefix query rows only");
    const size_t n = (size_t)g->n_problems * g->Tq * g->Tk;
    float *A = malloc(n * sizeof *A);
    if (!A) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    as_status rc = trace_read_head(r, TRACE_Q_ATTN, image, g->layer, head, A, err);
    if (rc == AS_OK && g->scope == VIT_SCOPE_WINDOW) {
        rc = window_row(s, g, A, token, k, err);
    } else if (rc == AS_OK) {
        const int cls = g->scope == VIT_SCOPE_CLASS, sra = g->scope == VIT_SCOPE_SRA;
        const float *rw = A + (cls ? 0 : (size_t)token * g->Tk);
        k->n_keys = g->Tk;
        k->prefix = cls;
        k->n = sra ? g->kgh * g->kgw : N;
        k->keys = malloc((size_t)g->Tk * sizeof *k->keys);
        k->cell = malloc((size_t)k->n * sizeof *k->cell);
        if (!k->keys || !k->cell) rc = as_fail(err, AS_ERR_NOMEM, "out of memory");
        for (int j = 0; rc == AS_OK && j < g->Tk; j++) k->keys[j] = rw[j];
        for (int i = 0; rc == AS_OK && i < k->n; i++) {
            if (!sra) {
                k->cell[i] = token_cell(g, i, S, rw[cls + i]);
                continue;
            }
            keymap_cell c = {.v = rw[i]};
            keymap_key_span(g, g->gh, i / g->kgw, S, &c.y0, &c.y1);
            keymap_key_span(g, g->gw, i % g->kgw, S, &c.x0, &c.x1);
            k->cell[i] = c;
        }
    }
    free(A);
    if (rc == AS_OK && k->token >= 0) {
        keymap_cell q = token_cell(g, k->token, S, 0);
        k->q[0] = q.x0, k->q[1] = q.y0, k->q[2] = q.x1, k->q[3] = q.y1;
    }
    if (rc != AS_OK) keymap_row_free(k);
    return rc;
}

void keymap_row_free(keymap_row *k) {
    free(k->keys);
    free(k->cell);
    k->keys = NULL;
    k->cell = NULL;
    k->n = k->n_keys = 0;
}

void keymap_row_draw(plot_figure *f, const plot_axes *a, const keymap_row *k, int S, double lo,
                     double hi, plot_cmap cm, double alpha) {
    cairo_t *cr = plot_cairo(f);
    const double z = a->w / S;
    cairo_save(cr);
    cairo_rectangle(cr, a->x, a->y, a->w, a->h);
    cairo_clip(cr);
    for (int i = 0; i < k->n; i++) {
        const keymap_cell *c = &k->cell[i];
        cairo_rectangle(cr, a->x + c->x0 * z, a->y + c->y0 * z, (c->x1 - c->x0) * z, (c->y1 - c->y0) * z);
        if (c->outside) { /* exactly 0: washed out rather than coloured as a low weight */
            cairo_set_source_rgba(cr, 1, 1, 1, 0.5);
        } else {
            plot_color col = plot_cmap_color(cm, hi > lo ? fmin(1, fmax(0, (c->v - lo) / (hi - lo))) : 0);
            cairo_set_source_rgba(cr, col.r, col.g, col.b, alpha);
        }
        cairo_fill(cr);
    }
    cairo_set_source_rgba(cr, 1, 1, 1, 0.35); /* the cells' edges */
    cairo_set_line_width(cr, fmin(0.3, 0.05 * z * (k->n ? k->cell[0].x1 - k->cell[0].x0 : 1)));
    for (int i = 0; i < k->n; i++) {
        const keymap_cell *c = &k->cell[i];
        cairo_rectangle(cr, a->x + c->x0 * z, a->y + c->y0 * z, (c->x1 - c->x0) * z, (c->y1 - c->y0) * z);
    }
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 1, 0.6, 0.05); /* the window: each wrapped piece */
    cairo_set_line_width(cr, 1.0);
    for (int i = 0; i < k->n_pieces; i++) {
        const double *p = k->piece[i];
        cairo_rectangle(cr, a->x + p[0] * z, a->y + p[1] * z, (p[2] - p[0]) * z, (p[3] - p[1]) * z);
    }
    cairo_stroke(cr);
    if (k->token >= 0) { /* the query's cell */
        cairo_set_source_rgb(cr, 1, 0.15, 0.1);
        cairo_set_line_width(cr, 0.9);
        cairo_rectangle(cr, a->x + k->q[0] * z, a->y + k->q[1] * z, (k->q[2] - k->q[0]) * z, (k->q[3] - k->q[1]) * z);
        cairo_stroke(cr);
    }
    cairo_restore(cr);
}

void keymap_row_describe(const fig_source *s, int li, const keymap_row *k, char *buf, size_t n) {
    const trace_layer_geom *g = &s->tr.geom[li];
    if (k->scope == VIT_SCOPE_CLASS)
        snprintf(buf, n, "stage %d, class row over [cls; %d patches]", g->stage, g->gh * g->gw);
    else if (k->scope == VIT_SCOPE_WINDOW)
        snprintf(buf, n, "stage %d, cell (%d, %d) of %d x %d, window %d of %d", g->stage, k->token / g->gw,
                 k->token % g->gw, g->gh, g->gw, k->window, k->n_windows);
    else if (k->scope == VIT_SCOPE_SRA)
        snprintf(buf, n, "stage %d, cell (%d, %d) of %d x %d, keys %d x %d", g->stage, k->token / g->gw,
                 k->token % g->gw, g->gh, g->gw, g->kgh, g->kgw);
    else
        snprintf(buf, n, "stage %d, cell (%d, %d) of %d x %d", g->stage, k->token / g->gw, k->token % g->gw,
                 g->gh, g->gw);
}
