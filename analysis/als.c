/* als.c: MaiT's attention locality score (its Eq. 3) and the mask placement built on it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../io/trace.h"
#include "metric.h"

enum { OUT_SCORE, OUT_MEAN };

static as_status als_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    int R = c->opt->als_window;
    if (R < 1 || R % 2 == 0)
        return as_fail(err, AS_ERR_ARG, "--als-window %d: the window must be odd (3, 5, ...)", R);
    if (lay->q_rows != lay->tokens)
        return as_fail(err, AS_ERR_ARG, "als needs every query row, but the trace holds only the "
                       "prefix rows: record with --query-rows all");
    if (!(c->opt->als_low < c->opt->als_high))
        return as_fail(err, AS_ERR_ARG, "--als-thresholds: the low threshold must be below the high one");
    int dims[2] = {lay->n_layers, lay->n_heads};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_HEAD};
    analysis_output_add(c, "score", "attention a patch query gives to its R x R patch "
                        "neighbourhood (clipped at the grid edge), averaged over patch queries",
                        "", 2, dims, ax);
    analysis_output_add(c, "head_mean", "score averaged over the recorded heads", "", 1, dims, ax);
    snprintf(c->params, sizeof c->params, "window=%d; low=%g; high=%g", R, c->opt->als_low,
             c->opt->als_high);
    if (R > lay->grid)
        analysis_note(c, "als: window %d exceeds the %dx%d grid, so every patch is a neighbour",
                      R, lay->grid, lay->grid);
    return AS_OK;
}

static void als_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    int T = lay->tokens, g = lay->grid, h = c->opt->als_window / 2, H = lay->n_heads;
    double *score = vals + c->out[OUT_SCORE].offset, *hmean = vals + c->out[OUT_MEAN].offset;
    for (int li = 0; li < lay->n_layers; li++) {
        double hs = 0;
        for (int hi = 0; hi < H; hi++) {
            const float *A = im->attn[li] + (size_t)hi * lay->q_rows * T;
            double s = 0;
            for (int r = 0; r < g; r++)
                for (int col = 0; col < g; col++) {
                    const float *row = A + (size_t)analysis_patch_token(lay, r, col) * T;
                    int r0 = r - h < 0 ? 0 : r - h, r1 = r + h >= g ? g - 1 : r + h;
                    int c0 = col - h < 0 ? 0 : col - h, c1 = col + h >= g ? g - 1 : col + h;
                    for (int rr = r0; rr <= r1; rr++) {
                        const float *seg = row + analysis_patch_token(lay, rr, 0);
                        for (int cc = c0; cc <= c1; cc++) s += seg[cc];
                    }
                }
            score[li * H + hi] = s / lay->patches;
            hs += score[li * H + hi];
        }
        hmean[li] = hs / H;
    }
}

/* MaiT masks the heads that are local anyway: a head whose mean ALS reaches the high threshold
 * is masked with an R x R window, one at or below the low threshold stays global, and the heads
 * in between are candidates worth a trial. The suggestion is an "attention" entry for the
 * model config (docs/models.md) that masks the first kind. */
static as_status als_finish(analysis_ctx *c, const double *mean, as_error *err) {
    const analysis_layout *lay = c->lay;
    int H = lay->n_heads, dims[2] = {lay->n_layers, H};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_HEAD};
    double *rec = analysis_derived_add(c, "recommendation", "2 = mask (mean ALS >= high), 1 = "
                                       "candidate, 0 = keep global (mean ALS <= low)", "", 2,
                                       dims, ax);
    if (!rec) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    const double *score = mean + c->out[OUT_SCORE].offset;
    char json[2048] = "";
    size_t jn = 0;
    analysis_report_add(c, "  ALS per head\n  layer ");
    for (int hi = 0; hi < H; hi++) { /* right-aligned over each head's value, before its mark */
        char h[16];
        snprintf(h, sizeof h, "h%d", lay->heads[hi]);
        analysis_report_add(c, " %5s ", h);
    }
    analysis_report_add(c, "\n");
    for (int li = 0; li < lay->n_layers; li++) {
        char line[1024];
        int n = snprintf(line, sizeof line, "  %5d ", lay->layers[li]);
        int any = 0, masks[1024] = {0};
        for (int hi = 0; hi < H && n < (int)sizeof line - 16; hi++) {
            double s = score[li * H + hi];
            int code = isnan(s) ? 0 : s >= c->opt->als_high ? 2 : s > c->opt->als_low ? 1 : 0;
            rec[li * H + hi] = code;
            n += snprintf(line + n, sizeof line - (size_t)n, " %5.3f%c", s, " ?*"[code]);
            if (code == 2) {
                masks[lay->heads[hi]] = c->opt->als_window;
                any = 1;
            }
        }
        analysis_report_add(c, "%s\n", line);
        if (any && jn < sizeof json - 256) {
            jn += (size_t)snprintf(json + jn, sizeof json - jn, "%s{\"blocks\": %d, \"type\": \"mait\", "
                                   "\"mask_size\": [", jn ? ", " : "", lay->layers[li]);
            for (int h = 0; h < lay->cfg.num_heads && jn < sizeof json - 16; h++)
                jn += (size_t)snprintf(json + jn, sizeof json - jn, "%s%d", h ? ", " : "", masks[h]);
            jn += (size_t)snprintf(json + jn, sizeof json - jn, "]}");
        }
    }
    analysis_report_add(c, "  (* mask: ALS >= %g; ? candidate; thresholds from MaiT)\n", c->opt->als_high);
    if (jn) analysis_report_add(c, "  suggested \"attention\": [%s]\n", json);
    else analysis_report_add(c, "  no head reaches ALS %g: no mask suggested\n", c->opt->als_high);
    if (H < lay->cfg.num_heads)
        analysis_note(c, "als: only heads of the recorded subset can be recommended");
    return AS_OK;
}

const analysis_metric analysis_metric_als = {
    .name = "als",
    .version = 1,
    .summary = "attention locality score per layer and head (MaiT Eq. 3), mask placement",
    .definition = "ALS(l,h) = (1/P) sum over patch queries i of sum over patches j in the R x R "
                  "window centred on i (clipped at the grid edge) of A[i,j]; prefix tokens are "
                  "neither queries nor neighbours; P = number of patches",
    .needs = 1u << TRACE_Q_ATTN,
    .plan = als_plan,
    .image = als_image,
    .finish = als_finish,
};
