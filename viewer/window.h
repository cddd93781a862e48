/* window.h: the viewer's SDL2 window around view.h: events in, frames out, a live trace polled
 * four times a second, and a script of events for tests and benchmarks.
 *
 * Usage:
 *     view_window_opts o = {.width = 1200, .height = 760};
 *     view_window_run(&v, &o, &err);      // returns when the window closes (q, Ctrl-C)
 *
 * Script (o.script, one command per line, '#' comments; the window closes after the last):
 *     key NAME [shift|ctrl]    a character (g, d, ?, ...) or Left Right Up Down PageUp
 *                              PageDown Home End Escape Return Tab
 *     move X Y | click X Y     pointer at / left click at window points
 *     move-cell P R C          pointer at the centre of cell (R, C) of panel P of the last frame
 *     click-cell P R C         (panels in drawing order: docs/viewer.md)
 *     wheel D [shift|ctrl]     D > 0 scrolls up
 *     resize W H               the window's size in points
 *     wait MS                  keep running (a live trace is polled meanwhile)
 *     status                   print the status line (image, layer, head, query, value, live)
 *     screenshot FILE.png      the current frame, read back from the window
 * Every scripted input goes through SDL's event queue, exactly as a real one would. */
#ifndef AS_WINDOW_H
#define AS_WINDOW_H

#include "view.h"

typedef struct {
    int width, height;       /* initial window size in points (0: 1280 x 800) */
    double scale;            /* UI scale on top of the display's pixel ratio (0: ATTNSCOPE_SCALE
                                or GDK_SCALE from the environment, else 1) */
    const char *script;      /* scripted events ("-": stdin), or NULL */
    const char *screenshot;  /* the last frame as PNG when the window closes, or NULL */
    const char *export_dir;  /* where 'e' writes (NULL: the current folder) */
    int timing;              /* first-frame and redraw times on stderr */
    double t_start;          /* monotonic seconds when the command started */
} view_window_opts;

as_status view_window_run(view *v, const view_window_opts *o, as_error *err);

#endif
