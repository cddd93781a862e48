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
"                         [--als-window R] [--als-thresholds 0.35,0.65] [--cka-batch 8]\n"
"                         [--qk-thresholds 0.1,0.5,1,2] [--fusion mean|max|min] [--discard 0]\n"
"                         [--entropy-normalize] [--distance-prefix drop|renormalise]\n"
"                         [--per-image] [--max-images N] [--threads N] [--quiet]\n"
"Computes metrics per image, then mean, standard deviation and 95%% t interval over images.\n"
"Results go to the trace's /analysis group (recorded data is never modified) or with --out to\n"
"a results file; --csv also writes one long-format table per result. Without --metrics every\n"
"metric the trace supports runs and the others are skipped with the record flag they need.\n"
"Exact definitions: docs/analysis.md. Metrics:\n");
    for (int i = 0; i < analysis_metric_count(); i++)
        fprintf(f, "  %-11s %s\n", analysis_metric_name(i), analysis_metric_summary(i));
    fprintf(f,
"Options:\n"
"  --als-window R      odd R x R window for every head (default: a masked head's own mask\n"
"                      size, else 3)\n"
"  --cka-batch N       images per minibatch of the image-example CKA (evolution), >= 4;\n"
"                      default 8 (memory: N x layers x T x D floats, 14.5 MB for DeiT-Tiny)\n"
"Where the papers leave a definition open (docs/analysis.md, the stored parameters):\n");
    for (int i = 0; analysis_choice_get(i); i++) {
        const analysis_choice *c = analysis_choice_get(i);
        char vals[96] = "";
        for (int v = 0; v < 4 && c->values[v]; v++) {
            size_t u = strlen(vals);
            snprintf(vals + u, sizeof vals - u, "%s%s", v ? "|" : "", c->values[v]);
        }
        fprintf(f, "  --%s %s (default %s)\n", c->option, vals, c->values[c->def]);
        /* the help text wrapped at 90 columns under the option */
        const char *h = c->help;
        while (*h) {
            int n = (int)strlen(h);
            if (n > 84) {
                n = 84;
                while (n > 0 && h[n] != ' ') n--;
                if (n == 0) n = 84;
            }
            fprintf(f, "      %.*s\n", n, h);
            h += n;
            while (*h == ' ') h++;
        }
    }
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
        {"cka-batch", required_argument, 0, 'B'}, {"help", no_argument, 0, 'h'}};
    /* the metrics' named choices (analysis_choice_get) follow the fixed options, as 1000 + i */
    enum { N_FIXED = sizeof opts / sizeof opts[0], CHOICE_BASE = 1000 };
    struct option all[N_FIXED + ANALYSIS_CH_COUNT + 1];
    memcpy(all, opts, sizeof opts);
    int n_all = N_FIXED;
    for (int i = 0; analysis_choice_get(i) && n_all < N_FIXED + ANALYSIS_CH_COUNT; i++)
        all[n_all++] = (struct option){analysis_choice_get(i)->option, required_argument, 0, CHOICE_BASE + i};
    memset(&all[n_all], 0, sizeof all[n_all]);
    analysis_opts o;
    analysis_opts_default(&o);
    const char *out = NULL;
    as_error err = {0};
    int ch, threads = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:qh", all, NULL)) != -1) {
        if (ch >= CHOICE_BASE) {
            if (analysis_choice_set(&o, analysis_choice_get(ch - CHOICE_BASE)->option, optarg, &err) < 0)
                return cli_error(&err), 2;
            continue;
        }
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
        case 'B':
            if (!cli_parse_int(optarg, 4, 1000000, &o.cka_batch)) {
                fprintf(stderr, "attnscope analyze: --cka-batch %s: give a count of images >= 4\n", optarg);
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
    if (!o.quiet) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("analysed %ld images in %.2f s (%.1f images/s, %d threads); %d metric%s -> %s%s; "
               "batch working set %.1f MB, peak memory %.1f MB\n", rep.images, rep.seconds,
               rep.images / (rep.seconds > 1e-9 ? rep.seconds : 1e-9), o.threads, rep.metrics_run,
               rep.metrics_run == 1 ? "" : "s", out ? out : trace, out ? "" : " (/analysis)",
               rep.batch_bytes / 1e6, ru.ru_maxrss / 1024.0);
    }
    return 0;
}
