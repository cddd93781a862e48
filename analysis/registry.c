/* registry.c: the list of metrics, and the helpers they share. */
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metric.h"

static const analysis_metric *const registry[] = {
    &analysis_metric_als,      &analysis_metric_similarity, &analysis_metric_qk,
    &analysis_metric_evolution, &analysis_metric_distance,  &analysis_metric_entropy,
    &analysis_metric_rollout,  &analysis_metric_diag,
};
#define N_METRICS ((int)(sizeof registry / sizeof registry[0]))
_Static_assert(sizeof registry / sizeof registry[0] <= 32, "metric masks are 32-bit");

int analysis_metric_count(void) {
    for (int i = 0; i < N_METRICS; i++) assert(registry[i]->traces); /* each says what it reads */
    return N_METRICS;
}
const analysis_metric *analysis_metric_get(int i) { return i >= 0 && i < N_METRICS ? registry[i] : NULL; }
const char *analysis_metric_name(int i) { return i >= 0 && i < N_METRICS ? registry[i]->name : "?"; }
const char *analysis_metric_summary(int i) { return i >= 0 && i < N_METRICS ? registry[i]->summary : "?"; }

unsigned analysis_metric_mask(const char *list, as_error *err) {
    unsigned mask = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (strcmp(t, "all") == 0) {
            mask |= (1u << N_METRICS) - 1;
            continue;
        }
        int found = -1;
        for (int i = 0; i < N_METRICS; i++)
            if (strcmp(t, registry[i]->name) == 0) found = i;
        if (found < 0) {
            char names[256] = "";
            for (int i = 0; i < N_METRICS; i++) {
                strcat(names, registry[i]->name);
                if (i + 1 < N_METRICS) strcat(names, ",");
            }
            as_fail(err, AS_ERR_ARG, "--metrics: unknown metric \"%s\" (known: %s)", t, names);
            return 0;
        }
        mask |= 1u << found;
    }
    if (!mask) as_fail(err, AS_ERR_ARG, "--metrics: empty list");
    return mask;
}

void analysis_opts_default(analysis_opts *o) {
    memset(o, 0, sizeof *o);
    o->als_window = 3;
    o->als_low = 0.35;
    o->als_high = 0.65;
    const double th[] = {0.1, 0.5, 1.0, 2.0};
    o->n_thresholds = 4;
    memcpy(o->thresholds, th, sizeof th);
    o->fusion = ANALYSIS_FUSE_MEAN;
    o->als_window = 0;
    o->cka_batch = 8;
    for (int i = 0; analysis_choice_get(i); i++) o->choice[analysis_choice_get(i)->id] = analysis_choice_get(i)->def;
}

const analysis_choice *analysis_choice_get(int i) {
    for (int m = 0; m < N_METRICS && i >= 0; m++) {
        if (i < registry[m]->n_choices) return &registry[m]->choices[i];
        i -= registry[m]->n_choices;
    }
    return NULL;
}

void analysis_choice_values(const analysis_choice *c, char *buf, size_t n) {
    buf[0] = 0;
    for (int v = 0; v < 4 && c->values[v]; v++) {
        size_t u = strlen(buf);
        snprintf(buf + u, n - u, "%s%s", v ? ", " : "", c->values[v]);
    }
}

int analysis_choice_set(analysis_opts *o, const char *option, const char *value, as_error *err) {
    for (int i = 0; analysis_choice_get(i); i++) {
        const analysis_choice *c = analysis_choice_get(i);
        if (strcmp(c->option, option) != 0) continue;
        for (int v = 0; v < 4 && c->values[v]; v++)
            if (strcmp(value, c->values[v]) == 0) {
                o->choice[c->id] = v;
                return 1;
            }
        char names[128];
        analysis_choice_values(c, names, sizeof names);
        as_fail(err, AS_ERR_ARG, "--%s %s: use one of %s", option, value, names);
        return -1;
    }
    return 0;
}

static void given_add(analysis_opts *o, const char *name, unsigned metrics) {
    for (int i = 0; i < o->n_given; i++)
        if (strcmp(o->given[i].name, name) == 0) return;
    if (o->n_given == ANALYSIS_MAX_GIVEN) return;
    snprintf(o->given[o->n_given].name, sizeof o->given[0].name, "%s", name);
    o->given[o->n_given++].metrics = metrics;
}

void analysis_opts_given(analysis_opts *o, const char *name, const char *metrics) {
    as_error e;
    given_add(o, name, analysis_metric_mask(metrics, &e));
}

void analysis_choice_given(analysis_opts *o, const char *option) {
    for (int m = 0; m < N_METRICS; m++)
        for (int i = 0; i < registry[m]->n_choices; i++)
            if (strcmp(registry[m]->choices[i].option, option) == 0) given_add(o, option, 1u << m);
}

/* An option of metrics that --metrics leaves out: as_fail and 0. */
int analysis_opts_check_given(const analysis_opts *o, as_error *err) {
    for (int i = 0; o->explicit_metrics && o->metrics && i < o->n_given; i++) {
        if (!o->given[i].metrics || (o->given[i].metrics & o->metrics)) continue;
        char names[256] = "";
        for (int m = 0; m < N_METRICS; m++)
            if (o->given[i].metrics & (1u << m))
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? ", " : "",
                         registry[m]->name);
        as_fail(err, AS_ERR_ARG, "--%s has no effect: it is an option of %s, which --metrics leaves out: add "
                "it to --metrics, or remove --%s", o->given[i].name, names, o->given[i].name);
        return 0;
    }
    return 1;
}

void analysis_params_choices(analysis_ctx *c) {
    for (int i = 0; i < c->metric->n_choices; i++) {
        const analysis_choice *ch = &c->metric->choices[i];
        size_t u = strlen(c->params);
        snprintf(c->params + u, sizeof c->params - u, "%s%s=%s", u ? "; " : "", ch->param,
                 ch->values[c->opt->choice[ch->id]]);
    }
}

static size_t dims_count(int ndims, const int *dims) {
    size_t n = 1;
    for (int i = 0; i < ndims; i++) n *= (size_t)dims[i];
    return n;
}

static void output_init(analysis_output *o, const char *name, const char *description,
                        const char *units, int ndims, const int *dims, const analysis_axis *axes) {
    memset(o, 0, sizeof *o);
    o->name = name;
    o->description = description;
    o->units = units;
    o->ndims = ndims;
    memcpy(o->dims, dims, (size_t)ndims * sizeof *dims);
    memcpy(o->axes, axes, (size_t)ndims * sizeof *axes);
    o->count = dims_count(ndims, dims);
}

int analysis_output_add(analysis_ctx *c, const char *name, const char *description,
                        const char *units, int ndims, const int *dims, const analysis_axis *axes) {
    assert(c->n_out < ANALYSIS_MAX_OUTPUTS);
    analysis_output *o = &c->out[c->n_out];
    output_init(o, name, description, units, ndims, dims, axes);
    o->offset = c->n_vals;
    c->n_vals += o->count;
    return c->n_out++;
}

double *analysis_derived_add(analysis_ctx *c, const char *name, const char *description,
                             const char *units, int ndims, const int *dims,
                             const analysis_axis *axes) {
    assert(c->n_derived < ANALYSIS_MAX_OUTPUTS);
    analysis_output *o = &c->derived[c->n_derived];
    output_init(o, name, description, units, ndims, dims, axes);
    o->derived = calloc(o->count, sizeof(double));
    if (!o->derived) return NULL;
    c->n_derived++;
    return o->derived;
}

void analysis_note(analysis_ctx *c, const char *fmt, ...) {
    size_t used = strlen(c->notes);
    if (used && used + 2 < sizeof c->notes) {
        strcat(c->notes, "; ");
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->notes + used, sizeof c->notes - used, fmt, ap);
    va_end(ap);
}

void analysis_report_add(analysis_ctx *c, const char *fmt, ...) {
    size_t used = strlen(c->report);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->report + used, sizeof c->report - used, fmt, ap);
    va_end(ap);
}

int analysis_layer_pos(const analysis_layout *lay, int l) {
    for (int i = 0; i < lay->n_layers; i++)
        if (lay->layers[i] == l) return i;
    return -1;
}

double analysis_cosine(const float *a, const float *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : NAN;
}

/* Metrics defined on probability rows (als, distance): the two outputs that say what was left
 * out, and the note after the run (docs/analysis.md, "Maps that are not probability rows"). */
int analysis_rows_outputs_add(analysis_ctx *c) {
    int dims[2] = {c->lay->n_layers, c->lay->n_heads};
    analysis_axis ax[2] = {ANALYSIS_AX_LAYER, ANALYSIS_AX_HEAD};
    int o = analysis_output_add(c, "negative_maps", "1 where the layer's patch query rows hold a "
                                "negative entry (not probability rows: the layer is left out, "
                                "NaN), else 0", "", 1, dims, ax);
    analysis_output_add(c, "dropped_rows", "patch query rows left out because their weights sum "
                        "to 0 or less (NaN where the layer is left out)", "", 2, dims, ax);
    return o;
}

int analysis_layer_negative(const analysis_layout *lay, const float *maps) {
    int T = lay->tokens, neg = 0;
    for (int hi = 0; hi < lay->n_heads && !neg; hi++)
        for (int i = lay->prefix; i < T && !neg; i++)
            neg = analysis_any_negative(maps + ((size_t)hi * lay->q_rows + i) * T, T);
    return neg;
}

void analysis_rows_note(analysis_ctx *c, const double *mean, int out, const char *fix) {
    const analysis_layout *lay = c->lay;
    const double *neg = mean + c->out[out].offset, *drop = mean + c->out[out + 1].offset;
    char ls[256] = "", ds[256] = "";
    double frac = 0, rows = 0;
    int n = 0, nd = 0;
    for (int li = 0; li < lay->n_layers; li++) {
        size_t u = strlen(ls), v = strlen(ds);
        if (neg[li] > 0) {
            snprintf(ls + u, sizeof ls - u, "%s%d", n++ ? ", " : "", lay->layers[li]);
            frac = fmax(frac, neg[li]);
        }
        double d = 0;
        for (int hi = 0; hi < lay->n_heads; hi++)
            if (!isnan(drop[li * lay->n_heads + hi])) d += drop[li * lay->n_heads + hi];
        if (d > 0) {
            snprintf(ds + v, sizeof ds - v, "%s%d", nd++ ? ", " : "", lay->layers[li]);
            rows += d;
        }
    }
    if (n)
        analysis_note(c, "%s: layer%s %s left out: maps with negative entries (in up to %.0f%% of "
                      "the images) are not probability rows%s%s", c->metric->name, n > 1 ? "s" : "",
                      ls, 100 * frac, fix ? ": " : "", fix ? fix : "");
    if (nd)
        analysis_note(c, "%s: %.3g patch query rows per image without positive weight left out "
                      "(layer%s %s; dropped_rows)", c->metric->name, rows, nd > 1 ? "s" : "", ds);
}
