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

static void usage(FILE *f) {
    fprintf(f,
"usage: attnscope analyze TRACE.h5 [--metrics LIST] [--out RESULTS.h5] [--csv DIR]\n"
"                         [--als-window 3] [--als-thresholds 0.35,0.65]\n"
"                         [--qk-thresholds 0.1,0.5,1,2] [--fusion mean|max|min] [--discard 0]\n"
"                         [--entropy-normalize] [--distance-prefix drop|renormalise]\n"
"                         [--per-image] [--max-images N] [--threads N] [--quiet]\n"
"Computes metrics per image, then mean, standard deviation and 95%% t interval over images.\n"
"Results go to a results file beside the trace (run.h5 -> run.analysis.h5; the trace itself is\n"
"never written) or with --out to another; --csv also writes one long-format table per result.\n"
"Without --metrics every metric the trace supports runs and the others are skipped with the\n"
"record flag they need.\n"
"Exact definitions: docs/analysis.md. Metrics:\n");
    for (int i = 0; i < analysis_metric_count(); i++)
        fprintf(f, "  %-11s %s\n", analysis_metric_name(i), analysis_metric_summary(i));
}

static int parse_doubles(const char *s, double *out, int max, const char *what) {
    int n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        double v = strtod(t, &end);
        if (end == t || *end || n >= max) {
            fprintf(stderr, "attnscope analyze: %s \"%s\": give up to %d comma-separated numbers\n",
                    what, s, max);
            return -1;
        }
        out[n++] = v;
    }
    return n;
}

int cmd_analyze(int argc, char **argv) {
    static const struct option opts[] = {
        {"metrics", required_argument, 0, 'M'}, {"out", required_argument, 0, 'o'},
        {"csv", required_argument, 0, 'c'}, {"als-window", required_argument, 0, 'w'},
        {"als-thresholds", required_argument, 0, 'A'}, {"qk-thresholds", required_argument, 0, 'Q'},
        {"fusion", required_argument, 0, 'f'}, {"discard", required_argument, 0, 'd'},
        {"entropy-normalize", no_argument, 0, 'e'}, {"distance-prefix", required_argument, 0, 'p'},
        {"per-image", no_argument, 0, 'I'}, {"max-images", required_argument, 0, 'n'},
        {"threads", required_argument, 0, 't'}, {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    analysis_opts o;
    analysis_opts_default(&o);
    const char *out = NULL;
    as_error err = {0};
    int ch, threads = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:qh", opts, NULL)) != -1) {
        switch (ch) {
        case 'M':
            if (!(o.metrics = analysis_metric_mask(optarg, &err))) return cli_error(&err), 2;
            o.explicit_metrics = 1;
            break;
        case 'o': out = optarg; break;
        case 'c': o.csv_dir = optarg; break;
        case 'w':
            if (!cli_parse_int(optarg, 1, 99, &o.als_window) || o.als_window % 2 == 0) {
                fprintf(stderr, "attnscope analyze: --als-window %s: give an odd number 1..99\n", optarg);
                return 2;
            }
            break;
        case 'A': {
            double th[2];
            if (parse_doubles(optarg, th, 2, "--als-thresholds") != 2) return 2;
            o.als_low = th[0];
            o.als_high = th[1];
            break;
        }
        case 'Q':
            if ((o.n_thresholds = parse_doubles(optarg, o.thresholds, ANALYSIS_MAX_THRESHOLDS,
                                                "--qk-thresholds")) < 1) return 2;
            break;
        case 'f':
            if (strcmp(optarg, "mean") == 0) o.fusion = ANALYSIS_FUSE_MEAN;
            else if (strcmp(optarg, "max") == 0) o.fusion = ANALYSIS_FUSE_MAX;
            else if (strcmp(optarg, "min") == 0) o.fusion = ANALYSIS_FUSE_MIN;
            else {
                fprintf(stderr, "attnscope analyze: --fusion %s: use mean, max or min\n", optarg);
                return 2;
            }
            break;
        case 'd':
            if (parse_doubles(optarg, &o.discard, 1, "--discard") != 1) return 2;
            break;
        case 'e': o.entropy_normalize = 1; break;
        case 'p':
            if (strcmp(optarg, "drop") == 0) o.distance_renorm = 0;
            else if (strncmp(optarg, "renorm", 6) == 0) o.distance_renorm = 1;
            else {
                fprintf(stderr, "attnscope analyze: --distance-prefix %s: use drop or renormalise\n", optarg);
                return 2;
            }
            break;
        case 'I': o.per_image = 1; break;
        case 'n': {
            int n;
            if (!cli_parse_int(optarg, 1, 2000000000, &n)) {
                fprintf(stderr, "attnscope analyze: --max-images %s: give a positive count\n", optarg);
                return 2;
            }
            o.max_images = n;
            break;
        }
        case 't':
            if (!cli_parse_int(optarg, 1, 1024, &threads)) {
                fprintf(stderr, "attnscope analyze: --threads %s: give 1..1024\n", optarg);
                return 2;
            }
            break;
        case 'q': o.quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc - 1) {
        usage(stderr);
        return 2;
    }
    const char *trace = argv[optind];
    runtime_set_threads(threads);
    o.threads = runtime_threads();
    char cmdline[4096];
    cli_command_line(argc, argv, cmdline, sizeof cmdline);
    o.command_line = cmdline;
    o.report = o.quiet ? NULL : stdout;
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
        printf("analysed %ld images in %.2f s (%.1f images/s, %d threads); %d metric%s -> %s%s; "
               "batch working set %.1f MB, peak memory %.1f MB\n", rep.images, rep.seconds,
               rep.images / (rep.seconds > 1e-9 ? rep.seconds : 1e-9), o.threads, rep.metrics_run,
               rep.metrics_run == 1 ? "" : "s", out ? out : side, "",
               rep.batch_bytes / 1e6, ru.ru_maxrss / 1024.0);
    }
    return 0;
}
