/* cmd_analyze.c: attnscope analyze: metrics over a recorded trace (analysis/). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../analysis/analysis.h"
#include "cli.h"

static volatile sig_atomic_t analyze_signal = 0;
static void on_signal(int sig) {
    analyze_signal = sig;
    signal(sig, SIG_DFL);
}

/* analyze's own options; the metrics' named choices (analysis_choice, declared in each metric's
 * file) follow them in analyze_table, built at run time, one option per choice. */
static const cli_opt analyze_opts_table[] = {
    /* key alias name             ARG       values                       default      help */
    {'M', 0,   "metrics",         "LIST",   "comma-separated metric names (below), or all", "every metric the trace supports",
     "the metrics to compute; a named metric the trace cannot support is an error"},
    {'o', 'o', "out",             "RESULTS.h5", NULL, "TRACE.analysis.h5 beside the trace",
     "write the results into another results file"},
    {'c', 0,   "csv",             "DIR",    NULL, "no CSV", "also write one long-format CSV table per result into DIR"},
    {'w', 0,   "als-window",      "R",      "odd, 1..99", "a masked head's own mask size, else 3",
     "ALS: side of the R x R neighbourhood (MaiT Eq. 3) for every head"},
    {'A', 0,   "als-thresholds",  "LOW,HIGH", "0 <= LOW < HIGH <= 1", "0.35,0.65", "ALS: candidate and mask thresholds for mask placement"},
    {'Q', 0,   "qk-thresholds",   "LIST",   "up to " CLI_STR(ANALYSIS_MAX_THRESHOLDS) " numbers", "0.1,0.5,1,2",
     "Q/K: magnitudes counted (fraction of |q|, |k| entries above each)"},
    {'f', 0,   "fusion",          "F",      "mean, max, min", "mean", "rollout: how heads are fused"},
    {'d', 0,   "discard",         "R",      "[0, 1)", "0", "rollout: share of the smallest fused entries set to 0"},
    {'e', 0,   "entropy-normalize", NULL,   NULL, NULL, "entropy: divide by log T (staged traces: by log of each row's valid keys; default: nats)"},
    {'p', 0,   "distance-prefix", "MODE",   "drop, renormalise", "drop",
     "mean distance: drop the prefix keys' share (staged traces: and the pad slots'), or renormalise over patch keys"},
    {'B', 0,   "cka-batch",       "N",      "4 or more", "8", "evolution: images per minibatch of the "
     "image-example CKA (memory: N x layers x T x D floats, 14.5 MB for DeiT-Tiny)"},
    {'I', 0,   "per-image",       NULL,     NULL, NULL, "also store every image's values, not only mean, std and 95% "
     "interval (rollout always keeps them)"},
    {'n', 0,   "max-images",      "N",      "1 or more", "all images", "analyse only the first N images"},
    {'t', 0,   "threads",         "N",      "1..1024", "$OMP_NUM_THREADS, else all cores", "threads (images analysed at once)"},
    {'q', 'q', "quiet",           NULL,     NULL, NULL, "no summaries and notes"},
    {0}};

/* cli_opts_next's key for choice i: past every letter */
enum { KEY_CHOICE = 0x1000, N_FIXED = sizeof analyze_opts_table / sizeof analyze_opts_table[0] - 1 };
static cli_opt analyze_table[N_FIXED + ANALYSIS_CH_COUNT + 1];
static char choice_values[ANALYSIS_CH_COUNT][128];

/* The metric list goes after the option table: it comes from the registry. */
static char analyze_notes[4096];

static const cli_cmd analyze_cmd = {
    "analyze", "TRACE.h5 [options]",
    "Computes metrics per image, then mean, standard deviation and 95% t interval over images. Results go "
    "to a results file beside the trace (run.h5 -> run.analysis.h5; the trace itself is never written, and "
    "results appear whole or not at all) or with --out to another; --csv also writes one long-format table per result. Without --metrics every metric the trace supports runs "
    "and the others are skipped with the record flag they need. Options from --als-prefix on name the "
    "definitions the papers leave open; each is stored with the results. Exact definitions and the "
    "passages they resolve: docs/analysis.md.",
    analyze_table, analyze_notes};

/* analyze_table: the fixed options, then one per metric choice (values and default from its
 * declaration); the metric list for the notes. */
static void build_table(void) {
    analyze_table[0] = (cli_opt){0};
    for (int i = 0; i < N_FIXED; i++) cli_opts_add(analyze_table, N_FIXED + ANALYSIS_CH_COUNT + 1, analyze_opts_table[i]);
    for (int i = 0; analysis_choice_get(i); i++) {
        const analysis_choice *c = analysis_choice_get(i);
        analysis_choice_values(c, choice_values[c->id], sizeof choice_values[c->id]);
        cli_opts_add(analyze_table, N_FIXED + ANALYSIS_CH_COUNT + 1,
                     (cli_opt){KEY_CHOICE + i, 0, c->option, "MODE", choice_values[c->id], c->values[c->def], c->help});
    }
    int k = snprintf(analyze_notes, sizeof analyze_notes, "metrics:");
    for (int i = 0; i < analysis_metric_count() && k < (int)sizeof analyze_notes; i++)
        k += snprintf(analyze_notes + k, sizeof analyze_notes - (size_t)k, "\n  %-11s %s",
                      analysis_metric_name(i), analysis_metric_summary(i));
}

/* Up to max comma-separated numbers of s into out; their count, or -1 when s is not that. */
static int parse_doubles(const char *s, double *out, int max) {
    int n = 0;
    char buf[512];
    if (snprintf(buf, sizeof buf, "%s", s) >= (int)sizeof buf) return -1;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        double v = strtod(t, &end);
        if (end == t || *end || n >= max) return -1;
        out[n++] = v;
    }
    return n;
}

/* analyze's options of a run rather than of the analysis */
static int run_option(int key) { return key == 'M' || key == 'o' || key == 'c' || key == 't' || key == 'q'; }

static const cli_opt *analyze_opt_named(const char *name) {
    for (int i = 0; analyze_table[i].name; i++)
        if (strcmp(analyze_table[i].name, name) == 0) return &analyze_table[i];
    return NULL;
}

void analyze_option_names(char *buf, size_t n) {
    if (!analyze_table[0].name) build_table();
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; analyze_table[i].name && k < n; i++) {
        if (run_option(analyze_table[i].key)) continue;
        k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? ", " : "", analyze_table[i].name);
    }
}

int analyze_option(analysis_opts *o, const char *name, const char *arg, as_error *err) {
    if (!analyze_table[0].name) build_table();
    const cli_opt *op = analyze_opt_named(name);
    /* the options of a run rather than of the analysis (out, csv, threads, quiet) are the
     * caller's; metrics is, too (its message names the metrics) */
    if (!op || run_option(op->key)) return 0;
    if (!op->arg != !arg) { /* a flag given a value, or an option none */
        as_fail(err, AS_ERR_ARG, "--%s %s", name, arg ? "takes no value" : "needs a value");
        return -1;
    }
    int ok = 1;
    if (op->key >= KEY_CHOICE) ok = analysis_choice_set(o, name, arg, err) == 1;
    double th[ANALYSIS_MAX_THRESHOLDS];
    switch (op->key) {
    case 'w': ok = cli_parse_int(arg, 1, 99, &o->als_window) && o->als_window % 2 == 1; break;
    case 'A':
        if ((ok = parse_doubles(arg, th, 2) == 2 && th[0] >= 0 && th[0] < th[1] && th[1] <= 1)) {
            o->als_low = th[0];
            o->als_high = th[1];
        }
        break;
    case 'Q': {
        const int n = parse_doubles(arg, th, ANALYSIS_MAX_THRESHOLDS);
        if ((ok = n >= 1)) {
            o->n_thresholds = n;
            memcpy(o->thresholds, th, (size_t)n * sizeof th[0]);
        }
        break;
    }
    case 'f':
        if (strcmp(arg, "mean") == 0) o->fusion = ANALYSIS_FUSE_MEAN;
        else if (strcmp(arg, "max") == 0) o->fusion = ANALYSIS_FUSE_MAX;
        else if (strcmp(arg, "min") == 0) o->fusion = ANALYSIS_FUSE_MIN;
        else ok = 0;
        break;
    case 'd': ok = parse_doubles(arg, &o->discard, 1) == 1 && o->discard >= 0 && o->discard < 1; break;
    case 'e': o->entropy_normalize = 1; break;
    case 'p':
        if (strcmp(arg, "drop") == 0) o->distance_renorm = 0;
        else if (strncmp(arg, "renorm", 6) == 0) o->distance_renorm = 1;
        else ok = 0;
        break;
    case 'B': ok = cli_parse_int(arg, 4, 1000000, &o->cka_batch); break;
    case 'I': o->per_image = 1; break;
    case 'n': {
        int n;
        if ((ok = cli_parse_int(arg, 1, 2000000000, &n))) o->max_images = n;
        break;
    }
    default: break;
    }
    if (!ok) {
        as_fail(err, AS_ERR_ARG, "--%s \"%s\": give %s", name, arg, op->values ? op->values : op->arg);
        return -1;
    }
    /* the metrics each option acts in (analysis_run refuses one that --metrics leaves out) */
    static const struct {
        int key;
        const char *metrics;
    } owner[] = {{'w', "als"}, {'A', "als"}, {'Q', "qk"}, {'f', "rollout"}, {'d', "rollout"},
                 {'e', "entropy"}, {'p', "distance"}, {'B', "evolution"}};
    for (size_t i = 0; i < sizeof owner / sizeof owner[0]; i++)
        if (owner[i].key == op->key) analysis_opts_given(o, name, owner[i].metrics);
    if (op->key >= KEY_CHOICE) analysis_choice_given(o, name);
    return 1;
}

int cmd_analyze(int argc, char **argv) {
    analysis_opts o;
    analysis_opts_default(&o);
    const char *out = NULL;
    as_error err = {0};
    int ch, threads = 0;
    optind = 1;
    build_table();
    while ((ch = cli_opts_next(&analyze_cmd, argc, argv)) >= 0) {
        const cli_opt *op = NULL;
        for (int i = 0; analyze_table[i].name && !op; i++)
            if (analyze_table[i].key == ch) op = &analyze_table[i];
        const int took = op ? analyze_option(&o, op->name, op->arg ? optarg : NULL, &err) : 0;
        if (took < 0) return cli_fail(2, "%s (attnscope analyze --help)", err.msg);
        if (took) continue;
        switch (ch) {
        case 'M':
            if (!(o.metrics = analysis_metric_mask(optarg, &err))) return cli_error(&err), 2;
            o.explicit_metrics = 1;
            break;
        case 'o': out = optarg; break;
        case 'c': o.csv_dir = optarg; break;
        case 't':
            if (!cli_parse_int(optarg, 1, 1024, &threads)) return cli_bad_value(&analyze_cmd, ch, optarg);
            break;
        case 'q': o.quiet = 1; break;
        }
    }
    if (ch != CLI_END) return cli_opts_exit(ch);
    if (optind >= argc) return cli_missing(&analyze_cmd, "TRACE.h5, the trace to analyse");
    if (optind + 1 < argc) return cli_extra(&analyze_cmd, argv[optind + 1]);
    const char *trace = argv[optind];
    if (!analysis_opts_check_given(&o, &err)) return cli_fail(2, "%s (attnscope analyze --help)", err.msg);
    runtime_set_threads(threads);
    o.threads = runtime_threads();
    char cmdline[4096];
    cli_command_line(argc, argv, cmdline, sizeof cmdline);
    o.command_line = cmdline;
    o.report = o.quiet ? NULL : stdout;
    o.who = "attnscope analyze"; /* the library's notes start like every line of this command */
    progress pg;
    progress_init(&pg, "analyze", 0, 0);
    o.progress = progress_callback;
    o.progress_ud = &pg;
    o.stop = &analyze_signal;

    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    analyze_signal = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    analysis_report rep;
    as_status rc = analysis_run(trace, out, &o, &rep, &err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    progress_finish(&pg);
    if (rc != AS_OK) return cli_error(&err);
    char side[1100];
    if (!out) analysis_results_path(trace, side, sizeof side);
    if (!o.quiet) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        /* short lines of their own: none needs wrapping, and scripts find the numbers */
        printf("analysed %ld images in %.2f s (%.1f images/s, %d threads)\n", rep.images, rep.seconds,
               rep.images / (rep.seconds > 1e-9 ? rep.seconds : 1e-9), o.threads);
        printf("  batch working set %.1f MB, peak memory %.1f MB\n", rep.batch_bytes / 1e6, ru.ru_maxrss / 1024.0);
        /* the destination on a line of its own: a path is not broken */
        printf("%d metric%s -> %s\n", rep.metrics_run, rep.metrics_run == 1 ? "" : "s", out ? out : side);
    }
    return 0;
}
