/* cmd_view.c: attnscope view: the interactive viewer (viewer/) on a trace, live while it records. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../viewer/window.h"
#include "cli.h"

static const cli_opt view_opts_table[] = {
    /* key alias name        ARG       values                                  default    help */
    {'I', 0,   "image",      "I",      "0..images-1", "0", "image shown first"},
    {'L', 0,   "layer",      "L",      "a recorded layer", "the last recorded", "layer shown first"},
    {'H', 0,   "head",       "H",      "a recorded head", "the first recorded", "head shown first"},
    {'Q', 0,   "query",      "Q",      "a token index (the prefix tokens first: class, distillation, registers)", "the first prefix token, else the centre patch",
     "query token whose attention is shown"},
    {'M', 0,   "mode",       "MODE",   "query, grid, depth, similarity, als", "query",
     "view shown first: one query's map over the image, the layer's heads, the depth strip of every layer, "
     "the cross-layer similarity or the ALS panel (the last two need attnscope analyze)"},
    {'c', 0,   "cmap",       "NAME",   "viridis, magma", "viridis", "colour map (key m)"},
    {'R', 0,   "range",      "R",      "zero, minmax", "zero", "colour scale of a map: zero colours it from 0 to its "
     "peak with the uniform level 1/T marked; minmax from its min to its max"},
    {'g', 0,   "log",        NULL,     NULL, NULL, "logarithmic colour scale (key l)"},
    {'G', 0,   "global",     NULL,     NULL, NULL, "one colour range over every head of the layer instead of one per "
     "map, so heads compare by colour"},
    {'a', 0,   "opacity",    "A",      "0..1", "0.6", "opacity of the map over the image"},
    {'s', 0,   "size",       "WxH",    "320x240 .. 8192x8192 points", "1280x800", "initial window size"},
    {'S', 0,   "scale",      "S",      "0.5..4", "ATTNSCOPE_SCALE or GDK_SCALE, else 1",
     "interface scale on top of the display's pixel ratio (the window never grows past the screen)"},
    {'x', 0,   "export-dir", "DIR",    NULL, "the current folder", "where e (export) writes its PNG (an existing "
     "folder; an earlier export is never overwritten: the name takes -2, -3, ...)"},
    {'r', 0,   "script",     "FILE|-", NULL, "interactive", "run scripted events, then close (docs/viewer.md)"},
    {'p', 0,   "screenshot", "FILE.png", NULL, "none", "save the last frame as a PNG when the window closes (a new file: never overwritten)"},
    {'t', 0,   "timing",     NULL,     NULL, NULL, "print redraw times on stderr when closing"},
    {0}};

static const cli_cmd view_cmd = {
    "view", "TRACE.h5 [options]",
    "Opens a trace in a window: hover a patch to see its attention, click to fix it; arrows for heads and "
    "layers, PgUp/PgDn for images, g/d/s/a for the head grid, depth strip, similarity and ALS panels, e to "
    "export a PNG with the matching attnscope plot command, ? for every key. A trace still being recorded "
    "opens too and shows new images as they arrive (End: follow). Without a display the window is refused; "
    "headless, SDL_VIDEODRIVER=dummy with --script FILE runs it (and --screenshot saves what it drew).",
    view_opts_table, NULL};

int cmd_view(int argc, char **argv) {
    view_window_opts wo;
    memset(&wo, 0, sizeof wo);
    wo.t_start = cli_now();
    int image = -1, layer = -1, head = -1, query = -1, cmap = -1, log_scale = 0, global = 0, ch, v;
    int range = -1;
    double opacity = -1;
    const char *mode = NULL;
    optind = 1;
    while ((ch = cli_opts_next(&view_cmd, argc, argv)) >= 0) {
        switch (ch) {
        case 'I': case 'L': case 'H': case 'Q':
            if (!cli_parse_int(optarg, 0, 1 << 30, &v)) return cli_bad_value(&view_cmd, ch, optarg);
            *(ch == 'I' ? &image : ch == 'L' ? &layer : ch == 'H' ? &head : &query) = v;
            break;
        case 'M': mode = optarg; break;
        case 'c':
            if ((cmap = plot_cmap_parse(optarg)) < 0 || cmap == PLOT_CMAP_DIVERGING)
                return cli_bad_value(&view_cmd, ch, optarg);
            break;
        case 'R':
            if ((range = mapscale_range_parse(optarg)) < 0) return cli_bad_value(&view_cmd, ch, optarg);
            break;
        case 'g': log_scale = 1; break;
        case 'G': global = 1; break;
        case 'a': case 'S': {
            char *end;
            double x = strtod(optarg, &end);
            int ok = end != optarg && !*end && (ch == 'a' ? x >= 0 && x <= 1 : x >= 0.5 && x <= 4);
            if (!ok) return cli_bad_value(&view_cmd, ch, optarg);
            if (ch == 'a') opacity = x;
            else wo.scale = x;
            break;
        }
        case 's':
            if (sscanf(optarg, "%dx%d", &wo.width, &wo.height) != 2 || wo.width < 320 ||
                wo.height < 240 || wo.width > 8192 || wo.height > 8192)
                return cli_bad_value(&view_cmd, ch, optarg);
            break;
        case 'x': wo.export_dir = optarg; break;
        case 'r': wo.script = optarg; break;
        case 'p': wo.screenshot = optarg; break;
        case 't': wo.timing = 1; break;
        }
    }
    if (ch != CLI_END) return cli_opts_exit(ch);
    if (optind >= argc) return cli_missing(&view_cmd, "TRACE.h5, the trace to open");
    if (optind + 1 < argc) return cli_extra(&view_cmd, argv[optind + 1]);
    static const char *const modes[] = {"query", "grid", "depth", "similarity", "pair", "als"};
    int m = 0;
    if (mode) {
        for (m = 0; m < VIEW_MODE_COUNT && (m == VIEW_MODE_PAIR || strcmp(mode, modes[m]) != 0); m++) {}
        if (m == VIEW_MODE_COUNT) return cli_bad_value(&view_cmd, 'M', mode);
    }
    as_error err = {0};
    /* where it will write, checked before the trace opens and the script runs */
    if (wo.screenshot && view_png_out_check(wo.screenshot, "--screenshot", &err) != AS_OK) {
        const int rc = cli_error(&err);
        return err.status == AS_ERR_ARG ? 2 : rc; /* a name that is no PNG's: a usage error */
    }
    if (wo.export_dir && view_dir_check(wo.export_dir, "--export-dir", &err) != AS_OK) return cli_error(&err);
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
