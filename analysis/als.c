/* als.c: MaiT's attention locality score (its Eq. 3), its mask search (section 4.3, "quick
 * empirical search") and a per-head mask placement rule. The choices Eq. 3 leaves open (the
 * prefix columns, rows that do not sum to 1, which map) are named options (docs/analysis.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/trace.h"
#include "geometry.h"
#include "metric.h"

enum { OUT_SCORE, OUT_MEAN, OUT_NEG }; /* OUT_NEG + 1: dropped_rows */
enum { PREFIX_EXCLUDE, PREFIX_INCLUDE };
enum { ROWS_NORMALISE, ROWS_RAW, ROWS_REFUSE };
enum { MAP_ATTN, MAP_SOFTMAX };
enum { RULE_SEARCH, RULE_PER_HEAD };

static const analysis_choice als_choices[] = {
    {ANALYSIS_CH_ALS_PREFIX, "als-prefix", "prefix_columns", {"exclude", "include"}, PREFIX_EXCLUDE,
     "exclude: only the R x R patch neighbours count (MaiT 4.2: \"the probability of focusing on "
     "local neighbors\"); include: also the prefix (class) columns, which attnscope's mask M keeps "
     "for patch rows (Eq. 3 read literally as sum_i (M . A)_{n,i})"},
    {ANALYSIS_CH_ALS_ROWS, "als-rows", "rows", {"normalise", "raw", "refuse"}, ROWS_NORMALISE,
     "normalise: divide each row's window sum by the row's sum (Eq. 3 assumes rows of 1; Refiner "
     "and LSLA's outer bias break it); raw: as recorded; refuse: stop on layers whose maps are "
     "not row-stochastic (Refiner, LSLA outer bias) and name the map to analyse"},
    {ANALYSIS_CH_ALS_MAP, "als-map", "map", {"attn", "softmax"}, MAP_ATTN,
     "attn: the recorded map that multiplies the values; softmax: softmax of the recorded scores "
     "(the map before Refiner's refinement or LSLA's outer bias; needs --record attn,scores)"},
    {ANALYSIS_CH_ALS_RULE, "als-rule", "rule", {"search", "per-head"}, RULE_SEARCH,
     "which recommendation the report prints: search (MaiT 4.3's quick empirical search, the step "
     "this model is at) or per-head (mask every head whose ALS reaches the high threshold)"},
};

typedef struct {
    int *window;    /* (n_layers, n_heads) R per recorded head */
} als_state;

/* Block l's maps are not row-stochastic by construction: what to analyse instead. */

/* The fix a note on left-out layers names: the softmax of the scores, where every layer has one. */
static const char *rows_fix(const analysis_layout *lay) {
    for (int li = 0; li < lay->n_layers; li++)
        if (!vit_attn_has_softmax(&lay->cfg, lay->layers[li]))
            return "their maps have no probability rows to analyse (refiner_shared: no softmax); the "
                   "softmax of the recorded scores (--als-map softmax, --record attn,scores) serves the "
                   "other layers, recorded without those (record --layers)";
    return "analyse the softmax of the recorded scores (--als-map softmax, needs --record attn,scores)";
}

/* --als-map softmax: the recorded scores, and every recorded layer's map a softmax of them. */
static as_status softmax_map_check(analysis_ctx *c, const analysis_layout *lay, as_error *err) {
    for (int li = 0; li < lay->n_layers; li++)
        if (!vit_attn_has_softmax(&lay->cfg, lay->layers[li]))
            return as_fail(err, AS_ERR_ARG, "als --als-map softmax: layer %d (%s) has no softmax (its "
                           "recorded scores are the map it refines): analyse its attn with --als-rows "
                           "normalise, or record without it (record --layers)", lay->layers[li],
                           vit_attn_name(lay->cfg.attn[lay->layers[li]].kind));
    if (!(lay->quantities & (1u << TRACE_Q_SCORES)))
        return as_fail(err, AS_ERR_ARG, "als --als-map softmax needs the pre-softmax scores, "
                       "which this trace lacks: record with --record attn,scores");
    c->needs = 1u << TRACE_Q_SCORES;
    return AS_OK;
}

static int head_mask(const vit_config *cfg, int l, int h) {
    const vit_attn *at = &cfg->attn[l];
    return at->kind == VIT_ATTN_MAIT && h < VIT_MAX_MASK_HEADS ? at->mask_size[h] : 0;
}

/* A MaiT mask replaces the block's mechanism ("type": "mait"), so only plain and MaiT blocks can
 * take one: suggesting it for LSLA, LMSA, Refiner or less-attention blocks would silently swap
 * their mechanism. */
static int maskable(const vit_config *cfg, int l) {
    return cfg->attn[l].kind == VIT_ATTN_VANILLA || cfg->attn[l].kind == VIT_ATTN_MAIT;
}

/* Names the recorded blocks that cannot take a mask in the report, once. */
static void report_unmaskable(analysis_ctx *c) {
    const analysis_layout *lay = c->lay;
    char ls[256] = "", kinds[512] = "";
    int n = 0;
    for (int li = 0; li < lay->n_layers; li++) {
        int l = lay->layers[li];
        if (maskable(&lay->cfg, l)) continue;
        size_t a = strlen(ls), b = strlen(kinds);
        snprintf(ls + a, sizeof ls - a, "%s%d", n ? ", " : "", l);
        snprintf(kinds + b, sizeof kinds - b, "%s%s", n ? ", " : "", vit_attn_name(lay->cfg.attn[l].kind));
        n++;
    }
    if (n)
        analysis_report_add(c, "  layer%s %s (%s) cannot take a MaiT mask\n  (a block has one "
                            "mechanism): left out of the suggestion\n", n > 1 ? "s" : "", ls, kinds);
}

static as_status als_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    int R = c->opt->als_window;
    if (R < 0 || (R && R % 2 == 0))
        return as_fail(err, AS_ERR_ARG, "--als-window %d: the window must be odd (3, 5, ...)", R);
    if (lay->q_rows != lay->tokens)
        return as_fail(err, AS_ERR_ARG, "als needs every query row, but the trace holds only the "
                       "prefix rows: record with --query-rows all");
    if (!(c->opt->als_low < c->opt->als_high))
        return as_fail(err, AS_ERR_ARG, "--als-thresholds: the low threshold must be below the high one");
    int map = analysis_choice_of(c, ANALYSIS_CH_ALS_MAP), rows = analysis_choice_of(c, ANALYSIS_CH_ALS_ROWS);
    if (map == MAP_SOFTMAX) {
        if (softmax_map_check(c, lay, err) != AS_OK) return AS_ERR_ARG;
    } else if (rows == ROWS_REFUSE) {
        for (int li = 0; li < lay->n_layers; li++) {
            const char *why = vit_attn_not_stochastic(&lay->cfg, lay->layers[li]);
            if (why)
                return as_fail(err, AS_ERR_ARG, "als: layer %d: %s, but MaiT's Eq. 3 assumes rows "
                               "summing to 1: analyse the softmax maps (--als-map softmax, with "
                               "--record attn,scores) or --als-rows normalise (layers with "
                               "negative entries are then left out)",
                               lay->layers[li], why);
        }
    }
    als_state *st = calloc(1, sizeof *st);
    if (st) st->window = malloc((size_t)lay->n_layers * lay->n_heads * sizeof *st->window);
    if (!st || !st->window) {
        free(st);
        return as_fail(err, AS_ERR_NOMEM, "out of memory");
    }
    c->state = st;
    int own = 0, wmax = 0;
    for (int li = 0; li < lay->n_layers; li++)
        for (int hi = 0; hi < lay->n_heads; hi++) {
            int m = head_mask(&lay->cfg, lay->layers[li], lay->heads[hi]);
            int w = R ? R : m ? m : 3;
            own += !R && m;
            st->window[li * lay->n_heads + hi] = w;
            if (w > wmax) wmax = w;
        }
    int dims[2] = {lay->n_layers, lay->n_heads};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_HEAD};
    analysis_output_add(c, "score", "attention a patch query gives to its R x R patch "
                        "neighbourhood (clipped at the grid edge), averaged over patch queries; R "
                        "per head: derived/window", "", 2, dims, ax);
    analysis_output_add(c, "head_mean", "score averaged over the recorded heads", "", 1, dims, ax);
    analysis_rows_outputs_add(c);
    if (R) snprintf(c->params, sizeof c->params, "window=%d", R);
    else snprintf(c->params, sizeof c->params, "window=own mask or 3");
    size_t u = strlen(c->params);
    snprintf(c->params + u, sizeof c->params - u, "; low=%g; high=%g", c->opt->als_low, c->opt->als_high);
    analysis_params_choices(c);
    if (!lay->prefix && analysis_choice_of(c, ANALYSIS_CH_ALS_PREFIX) == PREFIX_INCLUDE)
        analysis_note(c, "als: the model has no prefix tokens, so --als-prefix include changes nothing");
    if (lay->n_heads < lay->cfg.num_heads) analysis_note(c, "als: only heads of the recorded subset can be recommended");
    if (lay->n_layers < lay->cfg.depth) analysis_note(c, "als: the suggestion covers the recorded layers only");
    if (own) analysis_note(c, "als: %d masked head%s scored with %s own mask size (--als-window "
                           "overrides)", own, own == 1 ? "" : "s", own == 1 ? "its" : "their");
    /* the window reaches every patch from every query (corners included) only when R/2 >= g-1 */
    if (wmax >= 2 * lay->grid - 1)
        analysis_note(c, "als: window %d covers the whole %dx%d grid from every patch, so every "
                      "patch is a neighbour", wmax, lay->grid, lay->grid);
    if (map == MAP_ATTN && rows == ROWS_NORMALISE) {
        char which[256] = "", why[512] = "";
        int n_ns = 0;
        for (int li = 0; li < lay->n_layers; li++) {
            const char *r = vit_attn_not_stochastic(&lay->cfg, lay->layers[li]);
            if (!r) continue;
            size_t wn = strlen(which), yn = strlen(why);
            snprintf(which + wn, sizeof which - wn, "%s%d", n_ns++ ? ", " : "", lay->layers[li]);
            if (!strstr(why, r)) snprintf(why + yn, sizeof why - yn, "%s%s", yn ? "; " : "", r); /* each reason once */
        }
        if (n_ns)
            analysis_note(c, "als: layer%s %s: rows do not sum to 1 (%s); each row's window sum "
                          "is divided by the row's sum; layers with negative entries and rows without "
                          "positive sum are left out (--als-rows)", n_ns > 1 ? "s" : "", which, why);
    }
    return AS_OK;
}

static void als_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    const als_state *st = c->state;
    int T = lay->tokens, g = lay->grid, H = lay->n_heads, p = lay->prefix;
    int prefix = analysis_choice_of(c, ANALYSIS_CH_ALS_PREFIX) == PREFIX_INCLUDE;
    int norm = analysis_choice_of(c, ANALYSIS_CH_ALS_ROWS) == ROWS_NORMALISE;
    int soft = analysis_choice_of(c, ANALYSIS_CH_ALS_MAP) == MAP_SOFTMAX;
    double *score = vals + c->out[OUT_SCORE].offset, *hmean = vals + c->out[OUT_MEAN].offset;
    double *neg = vals + c->out[OUT_NEG].offset, *drop = vals + c->out[OUT_NEG + 1].offset;
    (void)scratch;
    for (int li = 0; li < lay->n_layers; li++) {
        double hs = 0;
        /* Eq. 3 sums probabilities: a map with negative entries has none (softmax has none) */
        neg[li] = !soft && analysis_layer_negative(lay, im->attn[li]);
        for (int hi = 0; hi < H; hi++) {
            const float *A = (soft ? im->scores[li] : im->attn[li]) + (size_t)hi * lay->q_rows * T;
            int h = st->window[li * H + hi] / 2, n = 0, dropped = 0;
            if (neg[li]) {
                score[li * H + hi] = drop[li * H + hi] = NAN;
                hs = NAN;
                continue;
            }
            double s = 0;
            for (int r = 0; r < g; r++)
                for (int col = 0; col < g; col++) {
                    const float *row = A + (size_t)analysis_patch_token(lay, r, col) * T;
                    /* softmax of the scores: exp(s - max) / Z, so -inf (masked) scores give 0 */
                    double mx = 0, z = 1, w = 0;
                    if (soft) {
                        mx = -INFINITY;
                        for (int j = 0; j < T; j++) mx = fmax(mx, row[j]);
                        z = 0;
                        for (int j = 0; j < T; j++) z += exp(row[j] - mx);
                    }
#define ALS_ENTRY(j) (soft ? exp(row[j] - mx) : (double)row[j])
                    int r0 = r - h < 0 ? 0 : r - h, r1 = r + h >= g ? g - 1 : r + h;
                    int c0 = col - h < 0 ? 0 : col - h, c1 = col + h >= g ? g - 1 : col + h;
                    for (int rr = r0; rr <= r1; rr++)
                        for (int cc = c0; cc <= c1; cc++) w += ALS_ENTRY(analysis_patch_token(lay, rr, cc));
                    for (int j = 0; j < p && prefix; j++) w += ALS_ENTRY(j);
#undef ALS_ENTRY
                    if (soft) w /= z;
                    else if (norm) {
                        double tot = analysis_sum(row, T);
                        if (!(tot > 0)) { /* a row without mass has no locality */
                            dropped++;
                            continue;
                        }
                        w /= tot;
                    }
                    s += w;
                    n++;
                }
            score[li * H + hi] = n ? s / n : NAN;
            drop[li * H + hi] = dropped;
            hs += score[li * H + hi];
        }
        hmean[li] = hs / H;
    }
}

/* Appends an "attention" config entry (docs/models.md) for the layers of masks (n_layers x
 * num_heads mask sizes) that have any mask, one layer a line (the report stays within 100
 * columns). */
static void masks_json(const analysis_layout *lay, const int *masks, char *json, size_t n) {
    size_t jn = 0;
    json[0] = 0;
    int NH = lay->cfg.num_heads;
    for (int li = 0; li < lay->n_layers && jn < n - 256; li++) {
        int any = 0;
        for (int h = 0; h < NH; h++) any |= masks[li * NH + h] > 0;
        if (!any) continue;
        jn += (size_t)snprintf(json + jn, n - jn, "%s{\"blocks\": %d, \"type\": \"mait\", \"mask_size\": [",
                               jn ? ",\n     " : "", lay->layers[li]);
        for (int h = 0; h < NH && jn < n - 16; h++)
            jn += (size_t)snprintf(json + jn, n - jn, "%s%d", h ? ", " : "", masks[li * NH + h]);
        jn += (size_t)snprintf(json + jn, n - jn, "]");
        const vit_attn *at = &lay->cfg.attn[lay->layers[li]];
        if (at->kind == VIT_ATTN_MAIT) /* keep the layer's mask mode */
            jn += (size_t)snprintf(json + jn, n - jn, ", \"mask_mode\": \"%s\"", vit_mask_mode_name(at->mask_mode));
        jn += (size_t)snprintf(json + jn, n - jn, "}");
    }
}

/* MaiT 4.3, quick empirical search, as one step from the masks this model has: step 1 (no mask
 * anywhere) masks head 0 of every layer; step 2 (a layer with only head 0 masked) judges
 * ALS^{0,l}: above high, mask every head (then step 3 after training); between, keep; below
 * low, remove; step 3 (a layer with several masked heads) removes each mask whose head's ALS is
 * below low. out: (n_layers, num_heads) mask sizes after the step. */
static void mait_search(analysis_ctx *c, const double *score, int *out) {
    const analysis_layout *lay = c->lay;
    int H = lay->n_heads, NH = lay->cfg.num_heads, any = 0;
    double lo = c->opt->als_low, high = c->opt->als_high;
    int Rnew = c->opt->als_window ? c->opt->als_window : 3;
    for (int l = 0; l < lay->cfg.depth; l++)
        for (int h = 0; h < NH; h++) any |= head_mask(&lay->cfg, l, h) > 0;
    int h0 = -1; /* position of model head 0 among the recorded heads */
    for (int hi = 0; hi < H; hi++)
        if (lay->heads[hi] == 0) h0 = hi;
    if (!any) {
        for (int li = 0; li < lay->n_layers; li++)
            for (int h = 0; h < NH; h++)
                out[li * NH + h] = h == 0 && maskable(&lay->cfg, lay->layers[li]) ? Rnew : 0;
        analysis_report_add(c, "  MaiT search, step 1 (initialisation): no head is masked, so mask head 0 of "
                            "every layer\n  (%dx%d); train, record and analyse again for step 2\n",
                            Rnew, Rnew);
        return;
    }
    for (int li = 0; li < lay->n_layers; li++) {
        int l = lay->layers[li], nm = 0;
        for (int h = 0; h < NH; h++) {
            out[li * NH + h] = head_mask(&lay->cfg, l, h);
            nm += out[li * NH + h] > 0;
        }
        char line[1024];
        int w = snprintf(line, sizeof line, "  layer %2d: ", l);
        if (nm == 0) {
            snprintf(line + w, sizeof line - (size_t)w, "no mask (removed at step 2c, or never set): stays unmasked");
        } else if (nm == 1 && out[li * NH] > 0) {
            double a = h0 < 0 ? NAN : score[li * H + h0];
            if (isnan(a)) snprintf(line + w, sizeof line - (size_t)w, "step 2: head 0 was not recorded: unchanged");
            else if (a > high) {
                for (int h = 1; h < NH; h++) out[li * NH + h] = out[li * NH];
                snprintf(line + w, sizeof line - (size_t)w, "step 2a: ALS^{0,%d} = %.3f > %g: mask every "
                         "head (step 3 after training)", l, a, high);
            } else if (a >= lo)
                snprintf(line + w, sizeof line - (size_t)w, "step 2b: ALS^{0,%d} = %.3f in [%g, %g]: keep "
                         "head 0's mask, add no more", l, a, lo, high);
            else {
                out[li * NH] = 0;
                snprintf(line + w, sizeof line - (size_t)w, "step 2c: ALS^{0,%d} = %.3f < %g: remove the mask",
                         l, a, lo);
            }
        } else {
            int removed = 0, unknown = 0;
            for (int h = 0; h < NH; h++) {
                if (!out[li * NH + h]) continue;
                int hi_pos = -1;
                for (int k = 0; k < H; k++)
                    if (lay->heads[k] == h) hi_pos = k;
                double a = hi_pos < 0 ? NAN : score[li * H + hi_pos];
                if (isnan(a)) unknown++;
                else if (a < lo) {
                    out[li * NH + h] = 0;
                    removed++;
                }
            }
            snprintf(line + w, sizeof line - (size_t)w, "step 3 (calibration): %d masked head%s, %d "
                     "with ALS^{h,%d} < %g removed%s", nm, nm == 1 ? "" : "s", removed, l, lo,
                     unknown ? "\n            (heads not recorded are kept)" : "");
        }
        analysis_report_add(c, "%s\n", line);
    }
}

/* The per-head rule: a head whose mean ALS reaches the high threshold is local anyway and can
 * take a mask of its window; one at or below the low threshold stays global; the heads in
 * between are candidates worth a trial. */
static as_status als_finish(analysis_ctx *c, const double *mean, as_error *err) {
    const analysis_layout *lay = c->lay;
    const als_state *st = c->state;
    int H = lay->n_heads, NH = lay->cfg.num_heads, L = lay->n_layers, dims[2] = {L, H};
    int sdims[2] = {L, NH};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_HEAD};
    double *rec = analysis_derived_add(c, "recommendation", "per-head rule: 2 = mask (mean ALS >= "
                                       "high), 1 = candidate, 0 = keep global (mean ALS <= low)",
                                       "", 2, dims, ax);
    double *win = analysis_derived_add(c, "window", "R of each head's neighbourhood (its own mask "
                                       "size for masked heads unless --als-window is given)", "",
                                       2, dims, ax);
    double *srch = analysis_derived_add(c, "search", "mask size of every model head (all heads, "
                                        "0 = none) after this model's step of MaiT's quick "
                                        "empirical search (section 4.3)", "", 2, sdims, ax);
    int *rule = calloc((size_t)L * NH, sizeof *rule), *search = calloc((size_t)L * NH, sizeof *search);
    if (!rec || !win || !srch || !rule || !search) {
        free(rule);
        free(search);
        return as_fail(err, AS_ERR_NOMEM, "out of memory");
    }
    const double *score = mean + c->out[OUT_SCORE].offset;
    analysis_report_add(c, "  ALS per head\n  layer ");
    for (int hi = 0; hi < H; hi++) { /* right-aligned over each head's value, before its mark */
        char h[16];
        snprintf(h, sizeof h, "h%d", lay->heads[hi]);
        analysis_report_add(c, " %5s ", h);
    }
    analysis_report_add(c, "\n");
    for (int li = 0; li < L; li++) {
        char line[1024];
        int n = snprintf(line, sizeof line, "  %5d ", lay->layers[li]);
        for (int hi = 0; hi < H && n < (int)sizeof line - 16; hi++) {
            double s = score[li * H + hi];
            int code = isnan(s) ? 0 : s >= c->opt->als_high ? 2 : s > c->opt->als_low ? 1 : 0;
            rec[li * H + hi] = code;
            win[li * H + hi] = st->window[li * H + hi];
            n += snprintf(line + n, sizeof line - (size_t)n, " %5.3f%c", s, " ?*"[code]);
            if (code == 2 && lay->heads[hi] < NH && maskable(&lay->cfg, lay->layers[li])) rule[li * NH + lay->heads[hi]] = st->window[li * H + hi];
        }
        analysis_report_add(c, "%s\n", line);
    }
    /* the marks' key under the table, then the search's steps and the suggestion */
    int by_search = analysis_choice_of(c, ANALYSIS_CH_ALS_RULE) == RULE_SEARCH;
    if (by_search)
        analysis_report_add(c, "  (* ALS >= %g, ? candidate: the per-head rule, --als-rule per-head)\n",
                            c->opt->als_high);
    else
        analysis_report_add(c, "  (* mask: ALS >= %g; ? candidate; thresholds from MaiT; the "
                            "paper's search: --als-rule search)\n", c->opt->als_high);
    mait_search(c, score, search);
    for (size_t i = 0; i < (size_t)L * NH; i++) srch[i] = search[i];
    report_unmaskable(c);
    char json[4096];
    if (by_search) {
        masks_json(lay, search, json, sizeof json);
        if (json[0]) analysis_report_add(c, "  suggested \"attention\" (MaiT search):\n    [%s]\n", json);
        else analysis_report_add(c, "  MaiT search leaves no head masked: no mask suggested\n");
    } else {
        masks_json(lay, rule, json, sizeof json);
        if (json[0]) analysis_report_add(c, "  suggested \"attention\" (per-head rule):\n    [%s]\n", json);
        else analysis_report_add(c, "  no head reaches ALS %g: no mask suggested\n", c->opt->als_high);
    }
    free(rule);
    free(search);
    analysis_rows_note(c, mean, OUT_NEG, rows_fix(lay));
    return AS_OK;
}

static void als_release(analysis_ctx *c) {
    als_state *st = c->state;
    if (st) free(st->window);
    free(st);
    c->state = NULL;
}

static const analysis_metric als_staged; /* staged traces (below) */

const analysis_metric analysis_metric_als = {
    .name = "als",
    .version = 3,
    .summary = "attention locality score per layer and head (MaiT Eq. 3), MaiT's mask search",
    .definition = "ALS(l,h) = (1/P) sum over patch queries i of w_i, w_i = sum over patches j in "
                  "the R x R window centred on i (clipped at the grid edge) of A[i,j], plus the "
                  "prefix columns with prefix_columns=include; a layer whose patch query rows hold "
                  "a negative entry (not probability rows) is left out for that image (NaN, "
                  "negative_maps = 1); with rows=normalise w_i is divided by sum_j A[i,j] (rows "
                  "without positive mass are left out and counted in dropped_rows); map=softmax uses "
                  "softmax of the recorded scores; R = the head's own mask size for masked heads "
                  "(unless --als-window), else 3; P = number of patches",
    .needs = 1u << TRACE_Q_ATTN,
    .traces = ANALYSIS_TRACES_SINGLE_GRID | ANALYSIS_TRACES_STAGED,
    .staged = &als_staged,
    .plan = als_plan,
    .image = als_image,
    .finish = als_finish,
    .release = als_release,
    .choices = als_choices,
    .n_choices = sizeof als_choices / sizeof als_choices[0],
};

/* ---- staged traces (format 3): docs/analysis.md, "Staged traces" ---------------------------- */

enum { SOUT_SCORE, SOUT_MEAN, SOUT_NEG, SOUT_DROP, SOUT_STAGE };

static as_status sals_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    const analysis_staged *S = lay->staged;
    int R = c->opt->als_window;
    if (R < 0 || (R && R % 2 == 0))
        return as_fail(err, AS_ERR_ARG, "--als-window %d: the window must be odd (3, 5, ...)", R);
    int map = analysis_choice_of(c, ANALYSIS_CH_ALS_MAP), rows = analysis_choice_of(c, ANALYSIS_CH_ALS_ROWS);
    for (int li = 0; li < S->n_layers; li++) {
        const analysis_lgeom *g = &S->l[li];
        if (g->scope == VIT_SCOPE_GLOBAL && g->Tq != g->T)
            return as_fail(err, AS_ERR_ARG, "als needs every query row, but layer %d holds only the "
                           "prefix rows: record with --query-rows all", g->layer);
        const char *why = vit_attn_not_stochastic(&lay->cfg, g->layer);
        if (map == MAP_ATTN && rows == ROWS_REFUSE && why)
            return as_fail(err, AS_ERR_ARG, "als: layer %d: %s, but MaiT's Eq. 3 assumes rows "
                           "summing to 1: analyse the softmax maps (--als-map softmax, with "
                           "--record attn,scores) or --als-rows normalise", g->layer, why);
    }
    if (map == MAP_SOFTMAX && softmax_map_check(c, lay, err) != AS_OK) return AS_ERR_ARG;
    int dims[2] = {lay->n_layers, lay->n_heads};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_HEAD};
    analysis_output_add(c, "score", "attention a grid token gives to the keys in its R x R "
                        "neighbourhood on its stage's grid (clipped at the grid edge and to its "
                        "window), averaged over the grid tokens (NaN beyond a layer's own heads)",
                        "", 2, dims, ax);
    analysis_output_add(c, "head_mean", "score averaged over the layer's recorded heads", "", 1, dims, ax);
    analysis_rows_outputs_add(c);
    analysis_stage_output_add(c, "stage_mean", "head_mean averaged over the stage's recorded layers", "");
    snprintf(c->params, sizeof c->params, "window=%d; neighbourhood=stage grid, clipped to the "
             "window", R ? R : 3);
    analysis_params_choices(c);
    analysis_note(c, "als: MaiT's mask search and the per-head rule are for single-grid ViTs: not "
                  "computed on staged traces");
    return AS_OK;
}

/* An SRA layer's key j: the share of the tokens it reduces that lie within h of (y, x) on both
 * axes (1 when the key is a token there, 0 when none of its tokens is): ALS of the map spread
 * back onto the tokens, F S, as rollout reads it. */
static double sra_share(const analysis_lgeom *g, int j, int y, int x, int h) {
    const int r = j / g->kgw, c = j % g->kgw, *kb = g->kb;
    const int y0 = kb[r], y1 = kb[g->kgh + r], x0 = kb[2 * g->kgh + c], x1 = kb[2 * g->kgh + g->kgw + c];
    const int iy = (y1 < y + h + 1 ? y1 : y + h + 1) - (y0 > y - h ? y0 : y - h);
    const int ix = (x1 < x + h + 1 ? x1 : x + h + 1) - (x0 > x - h ? x0 : x - h);
    return iy > 0 && ix > 0 ? (double)iy * ix / ((double)(y1 - y0) * (x1 - x0)) : 0.0;
}

static void sals_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    const analysis_staged *S = lay->staged;
    int Hx = lay->n_heads, h = (c->opt->als_window ? c->opt->als_window : 3) / 2;
    int prefix = analysis_choice_of(c, ANALYSIS_CH_ALS_PREFIX) == PREFIX_INCLUDE;
    int norm = analysis_choice_of(c, ANALYSIS_CH_ALS_ROWS) == ROWS_NORMALISE;
    int soft = analysis_choice_of(c, ANALYSIS_CH_ALS_MAP) == MAP_SOFTMAX;
    double *score = vals + c->out[SOUT_SCORE].offset, *hm = vals + c->out[SOUT_MEAN].offset;
    double *neg = vals + c->out[SOUT_NEG].offset, *drop = vals + c->out[SOUT_DROP].offset;
    (void)scratch;
    for (int li = 0; li < S->n_layers; li++) {
        const analysis_lgeom *g = &S->l[li];
        for (int hi = 0; hi < Hx; hi++) score[li * Hx + hi] = drop[li * Hx + hi] = NAN;
        neg[li] = !soft && analysis_staged_negative(g, im->attn[li]);
        if (neg[li]) {
            hm[li] = NAN;
            continue;
        }
        for (int hi = 0; hi < g->H; hi++) {
            double s = 0;
            int n = 0, dropped = 0;
            for (int w = 0; w < g->P; w++)
                for (int i = 0; i < g->Tq; i++) {
                    int q = analysis_grid_of(g, g->qtok[(size_t)w * g->Tq + i]);
                    if (q < 0) continue; /* pad and prefix query rows */
                    const float *row = (soft ? im->scores[li] : im->attn[li]) +
                                       (((size_t)hi * g->P + w) * g->Tq + i) * g->Tk;
                    const int *kt = g->ktok + (size_t)w * g->Tk;
                    double mx = -INFINITY, z = 0, wsum = 0, tot = 0;
                    if (soft) {
                        for (int j = 0; j < g->Tk; j++) mx = fmax(mx, row[j]);
                        for (int j = 0; j < g->Tk; j++) z += exp(row[j] - mx);
                    }
                    for (int j = 0; j < g->Tk; j++) {
                        double a = soft ? exp(row[j] - mx) / z : (double)row[j];
                        tot += a;
                        if (analysis_reduced(g)) { /* a reduced key: the share of its tokens in t's neighbourhood */
                            wsum += a * sra_share(g, j, q / g->gw, q % g->gw, h);
                            continue;
                        }
                        if (kt[j] < 0) continue; /* pad keys are never neighbours */
                        int u = analysis_grid_of(g, kt[j]);
                        if (u < 0) wsum += prefix ? a : 0;
                        else if (abs(u / g->gw - q / g->gw) <= h && abs(u % g->gw - q % g->gw) <= h) wsum += a;
                    }
                    if (!soft && norm) {
                        if (!(tot > 0)) {
                            dropped++;
                            continue;
                        }
                        wsum /= tot;
                    }
                    s += wsum;
                    n++;
                }
            score[li * Hx + hi] = n ? s / n : NAN;
            drop[li * Hx + hi] = dropped;
        }
        hm[li] = analysis_heads_mean(score + li * Hx, g->H);
    }
    analysis_stage_means(lay, hm, vals + c->out[SOUT_STAGE].offset);
}

static as_status sals_finish(analysis_ctx *c, const double *mean, as_error *err) {
    const analysis_layout *lay = c->lay;
    const double *hm = mean + c->out[SOUT_MEAN].offset, *st = mean + c->out[SOUT_STAGE].offset;
    analysis_report_add(c, "  layer  stage  ALS, head mean\n");
    int cls = 0;
    for (int li = 0; li < lay->n_layers; li++) {
        cls += lay->staged->l[li].scope == VIT_SCOPE_CLASS;
        if (lay->staged->l[li].scope == VIT_SCOPE_CLASS)
            analysis_report_add(c, "  %5d  %5d  no grid-token query (class attention)\n", lay->layers[li],
                                lay->staged->l[li].stage);
        else analysis_report_add(c, "  %5d  %5d  %.4f\n", lay->layers[li], lay->staged->l[li].stage, hm[li]);
    }
    if (cls)
        analysis_note(c, "als: %d class-attention layer%s (CaiT) left out (NaN): their one query is the "
                      "class token, which has no neighbourhood on the grid", cls, cls > 1 ? "s" : "");
    for (int s = 0; s < lay->n_stages; s++)
        if (!isnan(st[s])) analysis_report_add(c, "  stage %d: %.4f\n", s, st[s]);
    analysis_rows_note(c, mean, SOUT_NEG, rows_fix(lay));
    (void)err;
    return AS_OK;
}

static const analysis_metric als_staged = {
    .name = "als",
    .version = 3,
    .summary = "attention locality score per layer and head (MaiT Eq. 3) on each stage's grid",
    .definition = "staged traces: ALS(l,h) = mean over the grid tokens t of layer l (the query of "
                  "one slot of a recorded window or of the global map) of w_t = sum over the key "
                  "slots j holding a grid token u with |y_u - y_t| <= R/2 and |x_u - x_t| <= R/2 "
                  "on the layer's own grid of A[i,j] (so clipped at the grid edge and to the "
                  "query's window: keys outside it are not in the row; keys across a shifted "
                  "window's seam are far on the grid and do not count; pad keys never count), "
                  "plus the prefix columns with prefix_columns=include; rows=normalise divides w_t "
                  "by the row's sum over all its slots (pad keys included); map=softmax uses the "
                  "softmax of the recorded scores row (every slot); R = --als-window or 3; layers "
                  "with negative entries are left out (NaN, negative_maps); spatial-reduction "
                  "layers: a reduced key counts with the share of the tokens it reduces that lie "
                  "within R/2 of t on both axes (the ALS of its map spread back onto the tokens, "
                  "F S as in rollout); stage_mean = head_mean averaged over the stage's layers",
    .needs = 1u << TRACE_Q_ATTN,
    .traces = ANALYSIS_TRACES_STAGED,
    .plan = sals_plan,
    .image = sals_image,
    .finish = sals_finish,
    .choices = als_choices,
    .n_choices = sizeof als_choices / sizeof als_choices[0],
};
