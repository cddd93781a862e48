/* cmd_plot.c: attnscope plot: paper-style figures from traces and analysis results (plot/). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../plot/figures.h"
#include "cli.h"

static const cli_opt plot_opts_table[] = {
    /* key alias name        ARG     values                         default          help */
    {'o', 'o', "out",        "FIG",  ".pdf, .svg, .png", "required", "the figure file; its extension picks the format; "
     "never overwritten without --force"},
    {'f', 0,   "force",      NULL,   NULL, NULL, "replace an existing figure (only a regular file that is a PDF, SVG "
     "or PNG, or an empty file: never a folder, a device or a symlink's target)"},
    {'L', 0,   "layer",      "L",    "a recorded layer", "the last recorded", "layer of the map figures (attention, lsla, rollout)"},
    {'H', 0,   "head",       "H",    "a recorded head", "the first recorded", "head of the map figures"},
    {'I', 0,   "image",      "I",    "0..images-1", "0", "image of the map figures"},
    {'Q', 0,   "query",      "Q",    "a token index (the prefix tokens first: class, distillation, registers)", "the first prefix token, else the centre patch",
     "the query token whose attention row is drawn"},
    {'D', 0,   "definition", "D",    "deepvit, row, map", "the figure's paper's, as plot --list shows",
     "cross-layer similarity definition (docs/analysis.md)"},
    {'l', 0,   "labels",     "A,B,...", NULL, "the inputs' file names", "legend labels, one per input"},
    {'c', 0,   "cmap",       "NAME", "viridis, magma, diverging", "viridis", "colour map"},
    {'R', 0,   "range",      "R",    "zero, minmax", "zero", "colour scale of the maps (attention, grid, rollout): zero "
     "colours each map from 0 to its peak with the uniform level 1/T marked; minmax from its min to its max; grid puts "
     "every map on one such scale over all of them, with one colour bar"},
    {'W', 0,   "width",      "PT",   "> 0 and < 20000", "the figure's", "width in points (or --column or --double: one of the three)"},
    {'E', 0,   "height",     "PT",   "> 0 and < 20000", "the figure's", "height in points"},
    {'1', 0,   "column",     NULL,   NULL, NULL, "width of a LaTeX column (" CLI_STR(PLOT_COLUMN) " pt)"},
    {'2', 0,   "double",     NULL,   NULL, NULL, "width of a LaTeX text block (" CLI_STR(PLOT_DOUBLE) " pt)"},
    {'d', 0,   "dpi",        "N",    "10..2400", "300", "resolution of a PNG (at most 32767 pixels a side)"},
    {'x', 0,   "list",       NULL,   NULL, NULL, "list the figures, what each mirrors and what it needs"},
    {0}};

static const cli_cmd plot_cmd = {
    "plot", "FIGURE INPUT.h5 [INPUT.h5 ...] -o FIG.pdf|.svg|.png [options]  |  --list",
    "INPUTs are traces (their maps, images and analysis results, read from RUN.analysis.h5 beside them) or results files of attnscope analyze "
    "--out; several inputs are several models on one figure (one legend entry each). Sizes are in points. "
    "PDF and SVG are vector with the font embedded (DejaVu Sans); PNG is rendered at --dpi.",
    plot_opts_table, NULL};

/* One block per figure, wrapped to the terminal: what it mirrors, draws and needs. */
static void list(void) {
    printf("%-11s %s\n", "figure", "mirrors / draws / needs");
    for (int i = 0; i < figure_count(); i++) {
        const figure_recipe *r = figure_get(i);
        char draws[1024];
        snprintf(draws, sizeof draws, "draws: %s (%s, up to %d input%s)", r->summary,
                 r->width > 300 ? "double column" : "single column", r->max_sources, r->max_sources == 1 ? "" : "s");
        printf("%-11s ", r->name);
        cli_wrap(stdout, 12, 12, r->mirrors);
        printf("%12s", "");
        cli_wrap(stdout, 12, 19, draws);
        printf("%12sneeds: ", "");
        cli_wrap(stdout, 19, 19, r->needs);
        char takes[160];
        figure_options_text(r, takes, sizeof takes);
        printf("%12soptions: ", "");
        cli_wrap(stdout, 21, 21, takes[0] ? takes : "none beyond the size and format");
    }
}

/* As attnscope record's --out: an existing file is replaced only with --force, and then only a
 * regular file that is a figure (PDF, SVG or PNG by its first bytes) or empty. */
static as_status replaceable(const char *path, int force, as_error *err) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return AS_OK;
    if (!force)
        return as_fail(err, AS_ERR_EXISTS, "%s: already exists; pass --force to overwrite it or choose another "
                       "--out", path);
    if (!S_ISREG(sb.st_mode))
        return as_fail(err, AS_ERR_EXISTS, "%s: is %s, not a figure: attnscope plot replaces only regular files; "
                       "choose another --out", path,
                       S_ISLNK(sb.st_mode) ? "a symbolic link" : S_ISDIR(sb.st_mode) ? "a folder"
                       : "a device, FIFO or socket");
    if (sb.st_size == 0) return AS_OK;
    char head[256] = "";
    FILE *fp = fopen(path, "rb");
    size_t n = fp ? fread(head, 1, sizeof head - 1, fp) : 0;
    if (fp) fclose(fp);
    head[n] = 0;
    const int figure = (n >= 5 && memcmp(head, "%PDF-", 5) == 0) || (n >= 8 && memcmp(head, "\x89PNG\r\n\x1a\n", 8) == 0) ||
                       (n >= 5 && (memcmp(head, "<?xml", 5) == 0 || memcmp(head, "<svg", 4) == 0) && strstr(head, "<svg"));
    if (!figure)
        return as_fail(err, AS_ERR_EXISTS, "%s: exists and is not a figure (PDF, SVG or PNG) or cannot be read: "
                       "--force replaces only figures; remove it yourself or choose another --out", path);
    return AS_OK;
}

int cmd_plot(int argc, char **argv) {
    fig_opts o;
    memset(&o, 0, sizeof o);
    o.layer = o.head = o.image = o.query = -1;
    o.dpi = 300;
    const char *out = NULL, *labels = NULL, *width_by = NULL;
    int ch, v, do_list = 0, force = 0;
    optind = 1;
    while ((ch = cli_opts_next(&plot_cmd, argc, argv)) >= 0) {
        int *dst = ch == 'L' ? &o.layer : ch == 'H' ? &o.head : ch == 'I' ? &o.image : ch == 'Q' ? &o.query : NULL;
        switch (ch) {
        case 'o': out = optarg; break;
        case 'L': case 'H': case 'I': case 'Q':
            if (!cli_parse_int(optarg, 0, 1 << 30, &v)) return cli_bad_value(&plot_cmd, ch, optarg);
            *dst = v;
            break;
        case 'D': o.definition = optarg; break;
        case 'R':
            if ((v = mapscale_range_parse(optarg)) < 0) return cli_bad_value(&plot_cmd, ch, optarg);
            o.range = (mapscale_range)v;
            o.range_set = 1;
            break;
        case 'l': labels = optarg; break;
        case 'c':
            if ((v = plot_cmap_parse(optarg)) < 0) return cli_bad_value(&plot_cmd, ch, optarg);
            o.cmap = (plot_cmap)v;
            o.cmap_set = 1;
            break;
        case 'W': case 'E': case 'd': case '1': case '2': {
            double x = 0;
            if (ch == 'W' || ch == 'E' || ch == 'd') {
                char *end;
                x = strtod(optarg, &end);
                if (end == optarg || *end || !(ch == 'd' ? x >= 10 && x <= 2400 : x > 0 && x < 20000))
                    return cli_bad_value(&plot_cmd, ch, optarg);
            }
            if (ch == 'E') o.height = x;
            else if (ch == 'd') o.dpi = x, o.dpi_set = 1;
            if (ch == 'E' || ch == 'd') break;
            /* --width, --column and --double each set the width: one of them */
            const char *by = ch == 'W' ? "--width" : ch == '1' ? "--column" : "--double";
            if (width_by && strcmp(width_by, by) != 0)
                return cli_fail(2, "%s and %s both set the width: give one", width_by, by);
            width_by = by;
            o.width = ch == '1' ? PLOT_COLUMN : ch == '2' ? PLOT_DOUBLE : x;
            break;
        }
        case 'f': force = 1; break;
        case 'x': do_list = 1; break;
        }
    }
    if (ch != CLI_END) return cli_opts_exit(ch);
    if (do_list) {
        if (optind < argc) return cli_extra(&plot_cmd, argv[optind]);
        list();
        return 0;
    }
    if (optind >= argc) {
        char names[1024] = "";
        for (int i = 0; i < figure_count(); i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", figure_get(i)->name);
        return cli_fail(2, "missing FIGURE: one of %s (attnscope plot --list)", names);
    }
    if (argc - optind < 2) return cli_missing(&plot_cmd, "INPUT.h5, a trace or results file to draw from");
    if (!out) return cli_missing(&plot_cmd, "--out FIG");
    const figure_recipe *r = figure_find(argv[optind]);
    if (!r) {
        const char *names[64];
        int n = 0;
        for (int i = 0; i < figure_count() && n < 64; i++) names[n++] = figure_get(i)->name;
        const char *best = cli_closest(argv[optind], names, n);
        if (best) return cli_fail(2, "unknown figure \"%s\"; did you mean %s? (attnscope plot --list shows them)",
                                  argv[optind], best);
        return cli_fail(2, "unknown figure \"%s\": attnscope plot --list shows them", argv[optind]);
    }
    char lab[FIG_MAX_SOURCES][128];
    int nlab = 0;
    if (labels) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", labels);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && nlab < FIG_MAX_SOURCES; t = strtok_r(NULL, ",", &save))
            snprintf(lab[nlab++], sizeof lab[0], "%s", t);
        o.labels_set = 1;
        if (nlab != argc - optind - 1)
            return cli_fail(2, "--labels %s: %d label%s for %d input%s: give one per input", labels, nlab,
                            nlab == 1 ? "" : "s", argc - optind - 1, argc - optind - 1 == 1 ? "" : "s");
    }
    as_error err = {0};
    if (replaceable(out, force, &err) != AS_OK) return cli_error(&err);
    int rc = 0;
    for (int i = optind + 1; i < argc; i++) {
        if (o.n_sources == FIG_MAX_SOURCES) {
            rc = cli_fail(2, "at most %d inputs", FIG_MAX_SOURCES);
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
