/* local.c: local-plus-background attention rows (local.h). */
#include "local.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "mech.h"

int vit_local_head(const vit_config *c, int l, int h, vit_local *out) {
    const vit_mech *m = vit_mech_of(c, l);
    if (!m || !m->local || c->n_stages == 0 || c->family == VIT_FAMILY_CAIT) return 0;
    vit_geom g;
    vit_block_geom(c, l, &g);
    if (g.scope != VIT_SCOPE_GLOBAL || g.prefix != 0 || h < 0 || h >= g.H) return 0;
    vit_local loc;
    if (!m->local(c, l, h, &loc) || loc.side > VIT_LOCAL_MAX_SIDE) return 0;
    assert(loc.side >= 1 && loc.side % 2 == 1);
    if (out) *out = loc;
    return 1;
}

int vit_local_side(const vit_config *c, int l) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    int side = 0;
    for (int h = 0; h < g.H; h++) {
        vit_local loc;
        if (!vit_local_head(c, l, h, &loc)) return 0;
        if (loc.side > side) side = loc.side;
    }
    return side;
}

/* The cells [*lo, *hi] of [0, n) within r of position q: a neighbourhood cut at the edge. */
static void span(int q, int r, int n, int *lo, int *hi) {
    *lo = q - r > 0 ? q - r : 0;
    *hi = q + r < n - 1 ? q + r : n - 1;
}

/* Cells of [0, n) within r of each position, summed over positions. */
static double line_pairs(int n, int r) {
    double s = 0;
    for (int i = 0; i < n; i++) {
        int lo, hi;
        span(i, r, n, &lo, &hi);
        s += hi - lo + 1;
    }
    return s;
}

double vit_local_pairs(int gh, int gw, int side) {
    return line_pairs(gh, side / 2) * line_pairs(gw, side / 2);
}

void vit_local_forward(const vit_local_job *j) {
    const int gh = j->gh, gw = j->gw, T = gh * gw, dq = j->dq, dv = j->dv, r = j->loc.side / 2;
    const int S = j->rec_side, rs = S / 2, slots = S * S;
    const double bg = j->loc.background;
    double *vsum = j->acc, *num = j->acc + dv;
    assert(!(j->att_local || j->scores_local) || (S >= j->loc.side && S % 2 == 1));
    for (int c = 0; c < dv; c++) vsum[c] = 0;
    for (int t = 0; t < T; t++) {
        const float *vt = j->v + (size_t)t * j->ldv;
        for (int c = 0; c < dv; c++) vsum[c] += vt[c];
    }
    double sc[VIT_LOCAL_MAX_SIDE * VIT_LOCAL_MAX_SIDE], ex[VIT_LOCAL_MAX_SIDE * VIT_LOCAL_MAX_SIDE];
    assert(j->loc.side <= VIT_LOCAL_MAX_SIDE);
    for (int qy = 0; qy < gh; qy++)
        for (int qx = 0; qx < gw; qx++) {
            const int i = qy * gw + qx;
            int y0, y1, x0, x1;
            span(qy, r, gh, &y0, &y1);
            span(qx, r, gw, &x0, &x1);
            const int nx = x1 - x0 + 1, inside = (y1 - y0 + 1) * nx, outside = T - inside;
            const float *qi = j->q + (size_t)i * j->ldq;
            double m = outside > 0 ? bg : -INFINITY;
            for (int y = y0, e = 0; y <= y1; y++)
                for (int x = x0; x <= x1; x++, e++) {
                    const float *kj = j->k + (size_t)(y * gw + x) * j->ldk;
                    double d = 0;
                    for (int c = 0; c < dq; c++) d += (double)qi[c] * kj[c];
                    sc[e] = (double)((float)d * j->scale); /* the dense path's float score */
                    if (sc[e] > m) m = sc[e];
                }
            const double eb = outside > 0 ? exp(bg - m) : 0.0;
            double Z = outside * eb;
            for (int e = 0; e < inside; e++) Z += ex[e] = exp(sc[e] - m);
            /* sum_W E_j v_j + e_b (vsum - sum_W v_j) */
            for (int c = 0; c < dv; c++) num[c] = eb * vsum[c];
            for (int y = y0, e = 0; y <= y1; y++)
                for (int x = x0; x <= x1; x++, e++) {
                    const float *vj = j->v + (size_t)(y * gw + x) * j->ldv;
                    const double w = ex[e] - eb;
                    for (int c = 0; c < dv; c++) num[c] += w * vj[c];
                }
            float *o = j->out + (size_t)i * j->ldo;
            for (int c = 0; c < dv; c++) o[c] = (float)(num[c] / Z);
            for (int e = 0; e < inside; e++) ex[e] /= Z;
            const float wb = (float)(eb / Z), sb = (float)bg;
            const double *src[2] = {ex, sc};
            float *dense[2] = {j->att, j->scores}, *loc[2] = {j->att_local, j->scores_local};
            const float outer[2] = {wb, sb};
            for (int k = 0; k < 2; k++) { /* the map, then the scores */
                if (dense[k]) {
                    float *row = dense[k] + (size_t)i * T;
                    for (int t = 0; t < T; t++) row[t] = outer[k];
                    for (int y = y0, e = 0; y <= y1; y++)
                        for (int x = x0; x <= x1; x++, e++) row[y * gw + x] = (float)src[k][e];
                }
                if (loc[k]) {
                    float *row = loc[k] + (size_t)i * (slots + 1);
                    for (int dy = -rs, e = 0; dy <= rs; dy++)
                        for (int dx = -rs; dx <= rs; dx++, e++) {
                            const int y = qy + dy, x = qx + dx;
                            row[e] = y < 0 || y >= gh || x < 0 || x >= gw ? 0.0f
                                   : y < y0 || y > y1 || x < x0 || x > x1 ? outer[k]
                                   : (float)src[k][(y - y0) * nx + (x - x0)];
                        }
                    row[slots] = outer[k];
                }
            }
        }
}

void vit_local_backward(const vit_local_bwd_job *j) {
    const int gh = j->gh, gw = j->gw, T = gh * gw, dq = j->dq, dv = j->dv, r = j->loc.side / 2;
    const int S = j->rec_side, rs = S / 2, slots = S * S;
    double *vsum = j->acc, *G = j->acc + dv;
    assert(S >= j->loc.side && S % 2 == 1);
    for (int c = 0; c < dv; c++) vsum[c] = G[c] = 0;
    for (int t = 0; t < T; t++) {
        const float *vt = j->v + (size_t)t * j->ldv, *dt = j->dout + (size_t)t * j->ldo;
        const double bt = j->att_local[(size_t)t * (slots + 1) + slots];
        for (int c = 0; c < dv; c++) vsum[c] += vt[c], G[c] += bt * dt[c];
    }
    for (int t = 0; t < T; t++) {
        float *dqt = j->dq_out + (size_t)t * j->ldq, *dkt = j->dk_out + (size_t)t * j->ldk;
        float *dvt = j->dv_out + (size_t)t * j->ldv;
        for (int c = 0; c < dq; c++) dqt[c] = dkt[c] = 0.0f;
        for (int c = 0; c < dv; c++) dvt[c] = (float)G[c];
    }
    double dA[VIT_LOCAL_MAX_SIDE * VIT_LOCAL_MAX_SIDE];
    for (int qy = 0; qy < gh; qy++)
        for (int qx = 0; qx < gw; qx++) {
            const int i = qy * gw + qx;
            int y0, y1, x0, x1;
            span(qy, r, gh, &y0, &y1);
            span(qx, r, gw, &x0, &x1);
            const float *rec = j->att_local + (size_t)i * (slots + 1), *doi = j->dout + (size_t)i * j->ldo;
            const double b = rec[slots];
            double dsum = 0, local = 0, all = 0; /* sum_W dA_ij, sum_W a_ij dA_ij, dO_i . sum_all v */
            for (int c = 0; c < dv; c++) all += doi[c] * vsum[c];
            for (int y = y0, e = 0; y <= y1; y++)
                for (int x = x0; x <= x1; x++, e++) {
                    const float *vj = j->v + (size_t)(y * gw + x) * j->ldv;
                    double d = 0;
                    for (int c = 0; c < dv; c++) d += (double)doi[c] * vj[c];
                    dA[e] = d;
                    dsum += d;
                    local += rec[(y - qy + rs) * S + (x - qx + rs)] * d;
                }
            const double delta = local + b * (all - dsum);
            const float *qi = j->q + (size_t)i * j->ldq;
            float *dqi = j->dq_out + (size_t)i * j->ldq;
            for (int y = y0, e = 0; y <= y1; y++)
                for (int x = x0; x <= x1; x++, e++) {
                    const int t = y * gw + x;
                    const double a = rec[(y - qy + rs) * S + (x - qx + rs)];
                    const float ds = (float)(a * (dA[e] - delta)) * j->scale, w = (float)(a - b);
                    const float *kt = j->k + (size_t)t * j->ldk;
                    float *dkt = j->dk_out + (size_t)t * j->ldk, *dvt = j->dv_out + (size_t)t * j->ldv;
                    for (int c = 0; c < dq; c++) dqi[c] += ds * kt[c], dkt[c] += ds * qi[c];
                    for (int c = 0; c < dv; c++) dvt[c] += w * doi[c];
                }
        }
}

void vit_local_expand(const float *loc, int gh, int gw, int side, float *dense) {
    const int T = gh * gw, rs = side / 2, slots = side * side;
    for (int qy = 0; qy < gh; qy++)
        for (int qx = 0; qx < gw; qx++) {
            const float *src = loc + (size_t)(qy * gw + qx) * (slots + 1);
            float *row = dense + (size_t)(qy * gw + qx) * T;
            for (int t = 0; t < T; t++) row[t] = src[slots];
            for (int dy = -rs, e = 0; dy <= rs; dy++)
                for (int dx = -rs; dx <= rs; dx++, e++) {
                    const int y = qy + dy, x = qx + dx;
                    if (y >= 0 && y < gh && x >= 0 && x < gw) row[y * gw + x] = src[e];
                }
        }
}
