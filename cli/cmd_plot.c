/* cmd_plot.c: attnscope plot: paper-style figures from traces and analysis results (plot/). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../plot/figures.h"
#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: attnscope plot FIGURE INPUT.h5 [INPUT.h5 ...] -o FIG.pdf|.svg|.png\n"
"                      [--layer L] [--head H] [--image I] [--query Q] [--definition D]\n"
"                      [--labels A,B,...] [--cmap viridis|magma|diverging] [--range zero|minmax]\n"
"                      [--width PT] [--height PT] [--column|--double] [--dpi 300]\n"
"       attnscope plot --list\n"
"INPUTs are traces (their /analysis results, maps and images) or results files of attnscope\n"
"analyze --out; several inputs are several models on one figure (one legend entry each).\n"
"Sizes are in points: --column is a LaTeX column (%.0f pt), --double the text width (%.0f pt).\n"
"PDF and SVG are vector with the font embedded (DejaVu Sans); PNG is rendered at --dpi.\n"
"--cmap: default viridis. --range (attention, grid, rollout): zero (default) colours each map\n"
"from 0 to its peak with the uniform level 1/T marked; minmax from its min to its max;\n"
"grid puts every map on one such scale over all of them, with one colour bar.\n"
"A figure refuses the options it does not use (attnscope plot --list says which it takes).\n",
            PLOT_COLUMN, PLOT_DOUBLE);
}

static void list(void) {
    printf("%-11s %-62s %s\n", "figure", "mirrors", "inputs");
    for (int i = 0; i < figure_count(); i++) {
        const figure_recipe *r = figure_get(i);
        printf("%-11s %-62s %s\n", r->name, r->mirrors, r->needs);
    }
    printf("\n");
    for (int i = 0; i < figure_count(); i++) {
        char takes[160];
        figure_options_text(figure_get(i), takes, sizeof takes);
        printf("  %-11s %s (%s, up to %d input%s)\n  %-11s options: %s\n", figure_get(i)->name,
               figure_get(i)->summary, figure_get(i)->width > 300 ? "double column" : "single column",
               figure_get(i)->max_sources, figure_get(i)->max_sources == 1 ? "" : "s", "",
               takes[0] ? takes : "none beyond the size and format");
    }
}

int cmd_plot(int argc, char **argv) {
    static const struct option opts[] = {
        {"out", required_argument, 0, 'o'}, {"layer", required_argument, 0, 'L'},
        {"head", required_argument, 0, 'H'}, {"image", required_argument, 0, 'I'},
        {"query", required_argument, 0, 'Q'}, {"definition", required_argument, 0, 'D'},
        {"labels", required_argument, 0, 'l'}, {"cmap", required_argument, 0, 'c'},
        {"width", required_argument, 0, 'W'}, {"height", required_argument, 0, 'E'},
        {"column", no_argument, 0, '1'}, {"double", no_argument, 0, '2'},
        {"dpi", required_argument, 0, 'd'}, {"list", no_argument, 0, 'x'},
        {"range", required_argument, 0, 'R'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    fig_opts o;
    memset(&o, 0, sizeof o);
    o.layer = o.head = o.image = o.query = -1;
    o.dpi = 300;
    const char *out = NULL, *labels = NULL;
    int ch, v;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        int *dst = ch == 'L' ? &o.layer : ch == 'H' ? &o.head : ch == 'I' ? &o.image : ch == 'Q' ? &o.query : NULL;
        switch (ch) {
        case 'o': out = optarg; break;
        case 'L': case 'H': case 'I': case 'Q':
            if (!cli_parse_int(optarg, 0, 1 << 30, &v)) {
                fprintf(stderr, "attnscope plot: %s: give a non-negative index\n", optarg);
                return 2;
            }
            *dst = v;
            break;
        case 'D': o.definition = optarg; break;
        case 'R':
            if ((v = mapscale_range_parse(optarg)) < 0) {
                fprintf(stderr, "attnscope plot: --range %s: use zero or minmax\n", optarg);
                return 2;
            }
            o.range = (mapscale_range)v;
            o.range_set = 1;
            break;
        case 'l': labels = optarg; break;
        case 'c':
            if ((v = plot_cmap_parse(optarg)) < 0) {
                fprintf(stderr, "attnscope plot: --cmap %s: use viridis, magma or diverging\n", optarg);
                return 2;
            }
            o.cmap = (plot_cmap)v;
            o.cmap_set = 1;
            break;
        case 'W': case 'E': case 'd': {
            char *end;
            double x = strtod(optarg, &end);
            if (end == optarg || *end || !(x > 0)) {
                fprintf(stderr, "attnscope plot: %s: give a positive number\n", optarg);
                return 2;
            }
            if (ch == 'W') o.width = x;
            else if (ch == 'E') o.height = x;
            else o.dpi = x, o.dpi_set = 1;
            break;
        }
        case '1': o.width = PLOT_COLUMN; break;
        case '2': o.width = PLOT_DOUBLE; break;
        case 'x': list(); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (argc - optind < 2 || !out) {
        usage(stderr);
        return 2;
    }
    const figure_recipe *r = figure_find(argv[optind]);
    if (!r) {
        fprintf(stderr, "attnscope plot: unknown figure \"%s\": attnscope plot --list shows them\n", argv[optind]);
        return 2;
    }
    char lab[FIG_MAX_SOURCES][128];
    int nlab = 0;
    if (labels) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", labels);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && nlab < FIG_MAX_SOURCES; t = strtok_r(NULL, ",", &save))
            snprintf(lab[nlab++], sizeof lab[0], "%s", t);
        o.labels_set = 1;
        if (nlab != argc - optind - 1) {
            fprintf(stderr, "attnscope plot: --labels %s: %d label%s for %d input%s: give one per input\n",
                    labels, nlab, nlab == 1 ? "" : "s", argc - optind - 1, argc - optind - 1 == 1 ? "" : "s");
            return 2;
        }
    }
    as_error err = {0};
    int rc = 0;
    for (int i = optind + 1; i < argc; i++) {
        if (o.n_sources == FIG_MAX_SOURCES) {
            fprintf(stderr, "attnscope plot: at most %d inputs\n", FIG_MAX_SOURCES);
            rc = 2;
            break;
        }
        int k = o.n_sources;
        if (fig_source_open(&o.src[k], argv[i], k < nlab ? lab[k] : NULL, &err) != AS_OK) {
            rc = cli_error(&err);
            break;
        }
        o.n_sources++;
    }
    if (!rc && figure_render(r, &o, out, &err) != AS_OK) rc = cli_error(&err);
    for (int i = 0; i < o.n_sources; i++) fig_source_close(&o.src[i]);
    if (!rc) printf("wrote %s (%s)\n", out, r->name);
    return rc;
}
