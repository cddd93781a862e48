/* cmd_view.c: attnscope view: the interactive viewer (viewer/) on a trace, live while it records. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../viewer/window.h"
#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: attnscope view TRACE.h5 [--image I] [--layer L] [--head H] [--query Q]\n"
"                      [--mode query|grid|depth|similarity|als] [--cmap viridis|magma]\n"
"                      [--range zero|minmax] [--log] [--global] [--opacity A] [--size WxH]\n"
"                      [--scale S]\n"
"                      [--export-dir DIR] [--script FILE|-] [--screenshot FILE.png] [--timing]\n"
"Opens a trace in a window: hover a patch to see its attention, click to fix it; arrows for\n"
"heads and layers, PgUp/PgDn for images, g/d/s/a for the head grid, depth strip, similarity and\n"
"ALS panels, e to export a PNG with the matching attnscope plot command, ? for every key.\n"
"A trace still being recorded opens too and shows new images as they arrive (End: follow).\n"
"--scale multiplies the UI on top of the display's pixel ratio (also ATTNSCOPE_SCALE or\n"
"GDK_SCALE). --script runs scripted events, then closes (docs/viewer.md); with\n"
"SDL_VIDEODRIVER=dummy it needs no display.\n");
}

int cmd_view(int argc, char **argv) {
    static const struct option opts[] = {
        {"image", required_argument, 0, 'I'}, {"layer", required_argument, 0, 'L'},
        {"head", required_argument, 0, 'H'}, {"query", required_argument, 0, 'Q'},
        {"mode", required_argument, 0, 'M'}, {"cmap", required_argument, 0, 'c'},
        {"log", no_argument, 0, 'g'}, {"global", no_argument, 0, 'G'},
        {"opacity", required_argument, 0, 'a'}, {"size", required_argument, 0, 's'},
        {"scale", required_argument, 0, 'S'}, {"export-dir", required_argument, 0, 'x'},
        {"script", required_argument, 0, 'r'}, {"screenshot", required_argument, 0, 'p'},
        {"timing", no_argument, 0, 't'}, {"help", no_argument, 0, 'h'},
        {"range", required_argument, 0, 'R'}, {0, 0, 0, 0}};
    view_window_opts wo;
    memset(&wo, 0, sizeof wo);
    wo.t_start = cli_now();
    int image = -1, layer = -1, head = -1, query = -1, cmap = -1, log_scale = 0, global = 0, ch, v;
    int range = -1;
    double opacity = -1;
    const char *mode = NULL;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'I': case 'L': case 'H': case 'Q':
            if (!cli_parse_int(optarg, 0, 1 << 30, &v)) {
                fprintf(stderr, "attnscope view: %s: give a non-negative index\n", optarg);
                return 2;
            }
            *(ch == 'I' ? &image : ch == 'L' ? &layer : ch == 'H' ? &head : &query) = v;
            break;
        case 'M': mode = optarg; break;
        case 'c':
            if ((cmap = plot_cmap_parse(optarg)) < 0 || cmap == PLOT_CMAP_DIVERGING) {
                fprintf(stderr, "attnscope view: --cmap %s: use viridis or magma\n", optarg);
                return 2;
            }
            break;
        case 'R':
            if ((range = mapscale_range_parse(optarg)) < 0) {
                fprintf(stderr, "attnscope view: --range %s: use zero or minmax\n", optarg);
                return 2;
            }
            break;
        case 'g': log_scale = 1; break;
        case 'G': global = 1; break;
        case 'a': case 'S': {
            char *end;
            double x = strtod(optarg, &end);
            int ok = end != optarg && !*end && (ch == 'a' ? x >= 0 && x <= 1 : x >= 0.5 && x <= 4);
            if (!ok) {
                fprintf(stderr, "attnscope view: %s %s: give %s\n", ch == 'a' ? "--opacity" : "--scale",
                        optarg, ch == 'a' ? "0..1" : "0.5..4");
                return 2;
            }
            if (ch == 'a') opacity = x;
            else wo.scale = x;
            break;
        }
        case 's':
            if (sscanf(optarg, "%dx%d", &wo.width, &wo.height) != 2 || wo.width < 320 ||
                wo.height < 240 || wo.width > 8192 || wo.height > 8192) {
                fprintf(stderr, "attnscope view: --size %s: give WxH in points, at least 320x240\n", optarg);
                return 2;
            }
            break;
        case 'x': wo.export_dir = optarg; break;
        case 'r': wo.script = optarg; break;
        case 'p': wo.screenshot = optarg; break;
        case 't': wo.timing = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (argc - optind != 1) {
        usage(stderr);
        return 2;
    }
    static const char *const modes[] = {"query", "grid", "depth", "similarity", "pair", "als"};
    int m = 0;
    if (mode) {
        for (m = 0; m < VIEW_MODE_COUNT && (m == VIEW_MODE_PAIR || strcmp(mode, modes[m]) != 0); m++) {}
        if (m == VIEW_MODE_COUNT) {
            fprintf(stderr, "attnscope view: --mode %s: use query, grid, depth, similarity or als\n", mode);
            return 2;
        }
    }
    as_error err = {0};
    view vw;
    if (view_open(&vw, argv[optind], &err) != AS_OK) return cli_error(&err);
    int rc = 0;
    if (view_select(&vw, image, layer, head, query, &err) != AS_OK) {
        rc = cli_error(&err);
        goto done;
    }
    if (cmap >= 0) vw.cmap = (plot_cmap)cmap;
    if (range >= 0) vw.range = (mapscale_range)range;
    if (opacity >= 0) vw.opacity = opacity;
    vw.log_scale = log_scale;
    vw.norm = global ? VIEW_NORM_GLOBAL : VIEW_NORM_MAP;
    if (view_mode_missing(&vw, (view_mode)m, &err)) {
        rc = cli_error(&err);
        goto done;
    }
    vw.mode = (view_mode)m;
    if (view_window_run(&vw, &wo, &err) != AS_OK) rc = cli_error(&err);
done:
    view_close(&vw);
    return rc;
}
