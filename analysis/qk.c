/* qk.c: LMSA's Q/K signal efficiency (its section 3.3): how many query and key entries carry a
 * magnitude above each threshold. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../io/trace.h"
#include "geometry.h"
#include "metric.h"

enum { OUT_Q, OUT_K };
enum { QK_SCALED, QK_RAW };

static const analysis_choice qk_choices[] = {
    {ANALYSIS_CH_QK_SCALE, "qk-scale", "q", {"scaled", "raw"}, QK_SCALED,
     "scaled: q times the layer's score scale (1/sqrt(q/k width) unless set), the q that "
     "meets k^T in Swin's attention (q = q * scale), on which LMSA measured its Fig. 4 (the "
     "paper does not say which q it counted); raw: q as projected. Keys are never scaled"},
};

/* The factor q meets k^T with: the layer's scale, or 1 where LSLA's dynamic scale multiplies
 * the product entrywise instead. */
static float q_scale(const analysis_ctx *c, int l) {
    const vit_attn *at = &c->lay->cfg.attn[l];
    if (analysis_choice_of(c, ANALYSIS_CH_QK_SCALE) == QK_RAW) return 1.0f;
    if (at->kind == VIT_ATTN_LSLA && at->dynamic_scale) return 1.0f;
    return vit_attn_scale(&c->lay->cfg, l);
}

static as_status qk_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    unsigned need = (1u << TRACE_Q_Q) | (1u << TRACE_Q_K);
    if ((lay->quantities & need) != need)
        return as_fail(err, AS_ERR_ARG, "qk needs the per-head queries and keys, which this trace "
                       "lacks: record with --record attn,q,k (or --record all)");
    int n = 0;
    for (int li = 0; li < lay->n_layers; li++) n += lay->qk_width[li] > 0;
    if (!n) return as_fail(err, AS_ERR_ARG, "qk: no recorded layer has queries and keys "
                           "(less-attention blocks have none)");
    for (int li = 0; li < lay->n_layers; li++)
        if (!lay->qk_width[li])
            analysis_note(c, "qk: layer %d has no q/k (less attention): NaN", lay->layers[li]);
    int dims[2] = {lay->n_layers, c->opt->n_thresholds};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_THRESHOLD};
    analysis_output_add(c, "q_fraction", "fraction of query entries (recorded heads x tokens x "
                        "channels) with |q| > threshold", "", 2, dims, ax);
    analysis_output_add(c, "k_fraction", "fraction of key entries with |k| > threshold (LSLA: "
                        "the keys are x itself)", "", 2, dims, ax);
    int m = snprintf(c->params, sizeof c->params, "thresholds=");
    for (int i = 0; i < c->opt->n_thresholds && m < (int)sizeof c->params - 24; i++)
        m += snprintf(c->params + m, sizeof c->params - (size_t)m, "%s%g", i ? "," : "",
                      c->opt->thresholds[i]);
    analysis_params_choices(c);
    if (analysis_choice_of(c, ANALYSIS_CH_QK_SCALE) == QK_SCALED) {
        m = (int)strlen(c->params);
        m += snprintf(c->params + m, sizeof c->params - (size_t)m, "; q_scale=");
        /* per recorded layer (0: no q), runs written as value*count */
        for (int li = 0, run; li < lay->n_layers && m < (int)sizeof c->params - 24; li += run) {
            double v = lay->qk_width[li] ? q_scale(c, lay->layers[li]) : 0.0;
            for (run = 1; li + run < lay->n_layers; run++)
                if ((lay->qk_width[li + run] ? q_scale(c, lay->layers[li + run]) : 0.0) != v) break;
            m += snprintf(c->params + m, sizeof c->params - (size_t)m, run > 1 ? "%s%g*%d" : "%s%g",
                          li ? "," : "", v, run);
        }
        for (int li = 0; li < lay->n_layers; li++) {
            const vit_attn *at = &lay->cfg.attn[lay->layers[li]];
            if (at->kind == VIT_ATTN_LSLA && at->dynamic_scale)
                analysis_note(c, "qk: layer %d scales q x^T entrywise (LSLA's dynamic scale), so "
                              "its q is counted unscaled", lay->layers[li]);
        }
    }
    return AS_OK;
}

static void qk_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    int nt = c->opt->n_thresholds;
    for (int which = 0; which < 2; which++) {
        double *out = vals + c->out[which == 0 ? OUT_Q : OUT_K].offset;
        for (int li = 0; li < lay->n_layers; li++) {
            const float *x = which == 0 ? im->q[li] : im->k[li];
            size_t n = (size_t)lay->n_heads * lay->tokens * lay->qk_width[li];
            float sc = which == 0 && n ? q_scale(c, lay->layers[li]) : 1.0f;
            for (int ti = 0; ti < nt; ti++) {
                if (!x || !n) {
                    out[li * nt + ti] = NAN;
                    continue;
                }
                float th = (float)c->opt->thresholds[ti];
                size_t cnt = 0;
                for (size_t i = 0; i < n; i++) cnt += fabsf(x[i] * sc) > th; /* float32, as the product */
                out[li * nt + ti] = (double)cnt / (double)n;
            }
        }
    }
}

static as_status qk_finish(analysis_ctx *c, const double *mean, as_error *err) {
    const analysis_layout *lay = c->lay;
    int nt = c->opt->n_thresholds;
    analysis_report_add(c, "  layer  |q| >");
    for (int t = 0; t < nt; t++) analysis_report_add(c, " %6g", c->opt->thresholds[t]);
    analysis_report_add(c, "   |k| >");
    for (int t = 0; t < nt; t++) analysis_report_add(c, " %6g", c->opt->thresholds[t]);
    analysis_report_add(c, "\n");
    for (int li = 0; li < lay->n_layers; li++) {
        analysis_report_add(c, "  %5d       ", lay->layers[li]); /* under "  layer  |q| >" */
        for (int w = 0; w < 2; w++) {
            const double *m = mean + c->out[w].offset + (size_t)li * nt;
            for (int t = 0; t < nt; t++) analysis_report_add(c, " %6.3f", m[t]);
            if (!w) analysis_report_add(c, "        ");
        }
        analysis_report_add(c, "\n");
    }
    (void)err;
    return AS_OK;
}

static const analysis_metric qk_staged; /* staged traces (below) */

const analysis_metric analysis_metric_qk = {
    .name = "qk",
    .version = 2,
    .summary = "Q/K signal efficiency: fraction of |q|, |k| entries above thresholds (LMSA 3.3)",
    .definition = "for layer l and threshold tau: #{entries x of the recorded heads' q (or k) "
                  "over all tokens and channels with |x| > tau} / #entries; with q=scaled each q "
                  "entry is first multiplied (in float32) by the layer's score scale (1 for "
                  "LSLA's dynamic scale); NaN for blocks without q/k",
    .needs = (1u << TRACE_Q_Q) | (1u << TRACE_Q_K),
    .traces = ANALYSIS_TRACES_SINGLE_GRID | ANALYSIS_TRACES_STAGED,
    .staged = &qk_staged,
    .plan = qk_plan,
    .image = qk_image,
    .finish = qk_finish,
    .choices = qk_choices,
    .n_choices = sizeof qk_choices / sizeof qk_choices[0],
};

/* ---- staged traces (format 3): docs/analysis.md, "Staged traces" ---------------------------- */

enum { SOUT_Q, SOUT_K, SOUT_QN, SOUT_KN, SOUT_QS, SOUT_KS };

/* The factor of a staged layer's q: its recorded "scale" attribute (q=scaled), else 1. */
static float sq_scale(const analysis_ctx *c, int li) {
    const analysis_lgeom *g = &c->lay->staged->l[li];
    if (analysis_choice_of(c, ANALYSIS_CH_QK_SCALE) == QK_RAW || !(g->scale > 0)) return 1.0f;
    return g->scale;
}

static as_status sqk_plan(analysis_ctx *c, as_error *err) {
    const analysis_layout *lay = c->lay;
    unsigned need = (1u << TRACE_Q_Q) | (1u << TRACE_Q_K);
    if ((lay->quantities & need) != need)
        return as_fail(err, AS_ERR_ARG, "qk needs the per-head queries and keys, which this trace "
                       "lacks: record with --record attn,q,k (or --record all)");
    int n = 0;
    for (int li = 0; li < lay->n_layers; li++) n += lay->qk_width[li] > 0;
    if (!n) return as_fail(err, AS_ERR_ARG, "qk: no recorded layer has queries and keys");
    for (int li = 0; li < lay->n_layers; li++) {
        if (!lay->qk_width[li]) analysis_note(c, "qk: layer %d has no q/k: NaN", lay->layers[li]);
        else if (analysis_choice_of(c, ANALYSIS_CH_QK_SCALE) == QK_SCALED && !(lay->staged->l[li].scale > 0))
            analysis_note(c, "qk: layer %d records no scale (a dynamic scale): its q is counted "
                          "unscaled", lay->layers[li]);
    }
    int nt = c->opt->n_thresholds, dims[2] = {lay->n_layers, nt}, sdims[2] = {lay->n_stages, nt};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_THRESHOLD}, sax[2] = {ANALYSIS_AX_STAGE, ANALYSIS_AX_THRESHOLD};
    analysis_output_add(c, "q_fraction", "fraction of query entries (recorded heads x tokens x "
                        "channels) with |q| > threshold", "", 2, dims, ax);
    analysis_output_add(c, "k_fraction", "fraction of key entries with |k| > threshold", "", 2, dims, ax);
    analysis_output_add(c, "q_entries", "query entries counted per layer", "", 1, dims, ax);
    analysis_output_add(c, "k_entries", "key entries counted per layer", "", 1, dims, ax);
    analysis_output_add(c, "q_stage", "per stage: the entries above the threshold over all the "
                        "stage's recorded layers / all their entries", "", 2, sdims, sax);
    analysis_output_add(c, "k_stage", "k_fraction likewise per stage", "", 2, sdims, sax);
    int m = snprintf(c->params, sizeof c->params, "thresholds=");
    for (int i = 0; i < nt && m < (int)sizeof c->params - 24; i++)
        m += snprintf(c->params + m, sizeof c->params - (size_t)m, "%s%g", i ? "," : "", c->opt->thresholds[i]);
    analysis_params_choices(c);
    m = (int)strlen(c->params);
    m += snprintf(c->params + m, sizeof c->params - (size_t)m, "; q_scale=layer attribute scale");
    return AS_OK;
}

static void sqk_image(const analysis_ctx *c, const analysis_image *im, double *vals, void *scratch) {
    const analysis_layout *lay = c->lay;
    int nt = c->opt->n_thresholds, L = lay->n_layers;
    (void)scratch;
    for (int which = 0; which < 2; which++) {
        double *out = vals + c->out[which ? SOUT_K : SOUT_Q].offset;
        double *cnt = vals + c->out[which ? SOUT_KN : SOUT_QN].offset;
        double *st = vals + c->out[which ? SOUT_KS : SOUT_QS].offset;
        for (int i = 0; i < lay->n_stages * nt; i++) st[i] = 0;
        for (int li = 0; li < L; li++) {
            const analysis_lgeom *g = &lay->staged->l[li];
            const float *x = which == 0 ? im->q[li] : im->k[li];
            size_t n = x ? (which ? g->k_floats : g->qk_floats) : 0;
            float sc = which == 0 && n ? sq_scale(c, li) : 1.0f;
            cnt[li] = (double)n;
            for (int ti = 0; ti < nt; ti++) {
                if (!n) {
                    out[li * nt + ti] = NAN;
                    continue;
                }
                float th = (float)c->opt->thresholds[ti];
                size_t k = 0;
                for (size_t e = 0; e < n; e++) k += fabsf(x[e] * sc) > th; /* float32, as the product */
                out[li * nt + ti] = (double)k / (double)n;
                st[g->stage * nt + ti] += (double)k;
            }
        }
        for (int s = 0; s < lay->n_stages; s++) {
            double entries = 0;
            for (int li = 0; li < L; li++)
                if (lay->staged->l[li].stage == s) entries += cnt[li];
            for (int ti = 0; ti < nt; ti++) st[s * nt + ti] = entries > 0 ? st[s * nt + ti] / entries : NAN;
        }
    }
}

static as_status sqk_finish(analysis_ctx *c, const double *mean, as_error *err) {
    const analysis_layout *lay = c->lay;
    int nt = c->opt->n_thresholds;
    analysis_report_add(c, "  stage  |q| >");
    for (int t = 0; t < nt; t++) analysis_report_add(c, " %6g", c->opt->thresholds[t]);
    analysis_report_add(c, "   |k| >");
    for (int t = 0; t < nt; t++) analysis_report_add(c, " %6g", c->opt->thresholds[t]);
    analysis_report_add(c, "\n");
    for (int s = 0; s < lay->n_stages; s++) {
        analysis_report_add(c, "  %5d       ", s);
        for (int w = 0; w < 2; w++) {
            const double *m = mean + c->out[w ? SOUT_KS : SOUT_QS].offset + (size_t)s * nt;
            for (int t = 0; t < nt; t++) analysis_report_add(c, " %6.3f", m[t]);
            if (!w) analysis_report_add(c, "        ");
        }
        analysis_report_add(c, "\n");
    }
    (void)err;
    return AS_OK;
}

static const analysis_metric qk_staged = {
    .name = "qk",
    .version = 2,
    .summary = "Q/K signal efficiency per layer and per stage (LMSA 3.3)",
    .definition = "staged traces: for layer l and threshold tau: #{entries x of the recorded "
                  "heads' q (or k) over the layer's T tokens and channels with |x| > tau} / "
                  "#entries, each q entry first multiplied in float32 by the layer's recorded "
                  "scale attribute with q=scaled (1 where none is recorded); q_stage/k_stage: the "
                  "same count pooled over the stage's recorded layers (sum of counts / sum of "
                  "entries); NaN for layers without q/k",
    .needs = (1u << TRACE_Q_Q) | (1u << TRACE_Q_K),
    .traces = ANALYSIS_TRACES_STAGED,
    .plan = sqk_plan,
    .image = sqk_image,
    .finish = sqk_finish,
    .choices = qk_choices,
    .n_choices = sizeof qk_choices / sizeof qk_choices[0],
};
