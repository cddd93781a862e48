/* window.c: see window.h. Frames are drawn by cairo into an image surface of the window's
 * pixel size and uploaded as one streaming texture; SDL types stay in this file. */
#define _POSIX_C_SOURCE 200809L
#include "window.h"

#include <SDL.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    SDL_Window *win;
    SDL_Renderer *ren;
    SDL_Texture *tex;
    cairo_surface_t *surface;
    int pw, ph;              /* pixels */
    double ratio, user;      /* pixels per window point (HiDPI), and the UI scale asked for */
    double *frame_ms;        /* every redraw's time, for --timing */
    int n_frames, cap_frames;
} win;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double env_scale(void) {
    const char *names[] = {"ATTNSCOPE_SCALE", "GDK_SCALE"};
    for (int i = 0; i < 2; i++) {
        const char *s = getenv(names[i]);
        double x = s ? atof(s) : 0;
        if (x >= 0.5 && x <= 4) return x;
    }
    return 1;
}

/* Draws the view into the window; (re)creates the surface and texture when the size changed. */
static as_status frame(win *w, view *v, as_error *err) {
    double t0 = now_s();
    int pw, ph, ww, wh;
    if (SDL_GetRendererOutputSize(w->ren, &pw, &ph) != 0) pw = ph = 0;
    SDL_GetWindowSize(w->win, &ww, &wh);
    if (pw <= 0 || ph <= 0) {
        pw = ww;
        ph = wh;
    }
    w->ratio = ww > 0 ? (double)pw / ww : 1;
    if (pw != w->pw || ph != w->ph || !w->surface) {
        if (w->tex) SDL_DestroyTexture(w->tex);
        if (w->surface) cairo_surface_destroy(w->surface);
        /* CAIRO_FORMAT_RGB24 is 32-bit xRGB in native order: SDL's RGB888 on either endianness */
        w->surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, pw, ph);
        w->tex = SDL_CreateTexture(w->ren, SDL_PIXELFORMAT_RGB888, SDL_TEXTUREACCESS_STREAMING, pw, ph);
        if (cairo_surface_status(w->surface) != CAIRO_STATUS_SUCCESS || !w->tex)
            return as_fail(err, AS_ERR_NOMEM, "cannot make a %d x %d frame (%s)", pw, ph, SDL_GetError());
        w->pw = pw;
        w->ph = ph;
    }
    double s = w->ratio * w->user;
    cairo_t *cr = cairo_create(w->surface);
    cairo_scale(cr, s, s);
    view_draw(v, cr, pw / s, ph / s);
    cairo_destroy(cr);
    cairo_surface_flush(w->surface);
    SDL_UpdateTexture(w->tex, NULL, cairo_image_surface_get_data(w->surface),
                      cairo_image_surface_get_stride(w->surface));
    SDL_RenderClear(w->ren);
    SDL_RenderCopy(w->ren, w->tex, NULL, NULL);
    SDL_RenderPresent(w->ren);
    if (w->n_frames == w->cap_frames) {
        int cap = w->cap_frames ? 2 * w->cap_frames : 256;
        double *m = realloc(w->frame_ms, (size_t)cap * sizeof *m);
        if (m) {
            w->frame_ms = m;
            w->cap_frames = cap;
        }
    }
    if (w->n_frames < w->cap_frames) w->frame_ms[w->n_frames++] = (now_s() - t0) * 1e3;
    return AS_OK;
}

/* The window's pixels as the renderer holds them (not our own surface): what a user sees. The
 * last frame's texture is copied again, read back before it is presented. */
static as_status screenshot(win *w, const char *path, as_error *err) {
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w->pw, w->ph);
    as_status rc = AS_OK;
    if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
        rc = as_fail(err, AS_ERR_NOMEM, "%s: out of memory for the screenshot", path);
    } else {
        cairo_surface_flush(s);
        SDL_RenderClear(w->ren);
        SDL_RenderCopy(w->ren, w->tex, NULL, NULL);
        if (SDL_RenderReadPixels(w->ren, NULL, SDL_PIXELFORMAT_RGB888, cairo_image_surface_get_data(s),
                                 cairo_image_surface_get_stride(s)) != 0)
            rc = as_fail(err, AS_ERR_IO, "%s: cannot read the window's pixels (SDL: %s)", path, SDL_GetError());
        SDL_RenderPresent(w->ren);
        cairo_surface_mark_dirty(s);
        if (rc == AS_OK) rc = plot_write_png(s, path, err);
    }
    cairo_surface_destroy(s);
    return rc;
}

static int view_key_of(SDL_Keycode k) {
    switch (k) {
    case SDLK_LEFT: return VIEW_KEY_LEFT;
    case SDLK_RIGHT: return VIEW_KEY_RIGHT;
    case SDLK_UP: return VIEW_KEY_UP;
    case SDLK_DOWN: return VIEW_KEY_DOWN;
    case SDLK_PAGEUP: return VIEW_KEY_PAGEUP;
    case SDLK_PAGEDOWN: return VIEW_KEY_PAGEDOWN;
    case SDLK_HOME: return VIEW_KEY_HOME;
    case SDLK_END: return VIEW_KEY_END;
    case SDLK_ESCAPE: return VIEW_KEY_ESCAPE;
    case SDLK_RETURN: case SDLK_KP_ENTER: return VIEW_KEY_ENTER;
    case SDLK_TAB: return VIEW_KEY_TAB;
    default: return 0;
    }
}

static int mods_of(Uint16 m) {
    return ((m & KMOD_SHIFT) ? VIEW_MOD_SHIFT : 0) | ((m & KMOD_CTRL) ? VIEW_MOD_CTRL : 0);
}

/* One SDL event into the view; returns view_handle's bits. Printable keys arrive as text
 * (layout independent: '?' is whatever the keyboard types it with), the rest as key codes. */
static int translate(win *w, view *v, const SDL_Event *ev) {
    view_event e = {0};
    double k = 1 / w->user; /* window points -> the view's logical points */
    switch (ev->type) {
    case SDL_QUIT: return VIEW_QUIT;
    case SDL_TEXTINPUT:
        if (!ev->text.text[0] || ev->text.text[1]) return 0;
        e.type = VIEW_EV_KEY;
        e.key = (unsigned char)ev->text.text[0];
        e.mods = mods_of(SDL_GetModState());
        break;
    case SDL_KEYDOWN:
        if (ev->key.keysym.sym == SDLK_q && (ev->key.keysym.mod & KMOD_CTRL)) return VIEW_QUIT;
        e.type = VIEW_EV_KEY;
        e.key = view_key_of(ev->key.keysym.sym);
        e.mods = mods_of(ev->key.keysym.mod);
        if (!e.key) return 0;
        break;
    case SDL_MOUSEMOTION:
        e.type = VIEW_EV_MOTION;
        e.x = ev->motion.x * k;
        e.y = ev->motion.y * k;
        break;
    case SDL_MOUSEBUTTONDOWN:
        if (ev->button.button != SDL_BUTTON_LEFT) return 0;
        e.type = VIEW_EV_CLICK;
        e.x = ev->button.x * k;
        e.y = ev->button.y * k;
        break;
    case SDL_MOUSEWHEEL:
        if (ev->wheel.y == 0) return 0;
        e.type = VIEW_EV_WHEEL;
        e.wheel = ev->wheel.y > 0 ? 1 : -1;
        e.mods = mods_of(SDL_GetModState());
        break;
    case SDL_WINDOWEVENT:
        if (ev->window.event == SDL_WINDOWEVENT_LEAVE) {
            e.type = VIEW_EV_LEAVE;
            break;
        }
        return ev->window.event == SDL_WINDOWEVENT_EXPOSED ||
               ev->window.event == SDL_WINDOWEVENT_SIZE_CHANGED ? VIEW_REDRAW : 0;
    default: return 0;
    }
    return view_handle(v, &e);
}

/* ---- scripts ------------------------------------------------------------------------------------ */

static const struct { const char *name; SDL_Keycode code; } key_names[] = {
    {"Left", SDLK_LEFT}, {"Right", SDLK_RIGHT}, {"Up", SDLK_UP}, {"Down", SDLK_DOWN},
    {"PageUp", SDLK_PAGEUP}, {"PageDown", SDLK_PAGEDOWN}, {"Home", SDLK_HOME}, {"End", SDLK_END},
    {"Escape", SDLK_ESCAPE}, {"Return", SDLK_RETURN}, {"Tab", SDLK_TAB},
};

static Uint16 script_mods(const char *s) {
    return !s ? 0 : strcmp(s, "shift") == 0 ? KMOD_LSHIFT : strcmp(s, "ctrl") == 0 ? KMOD_LCTRL : 0;
}

static void push_mouse(win *w, int type, double x, double y) {
    SDL_Event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = type;
    Uint32 id = SDL_GetWindowID(w->win);
    if (type == SDL_MOUSEMOTION) {
        ev.motion.windowID = id;
        ev.motion.x = (int)lround(x);
        ev.motion.y = (int)lround(y);
    } else {
        ev.button.windowID = id;
        ev.button.button = SDL_BUTTON_LEFT;
        ev.button.state = SDL_PRESSED;
        ev.button.clicks = 1;
        ev.button.x = (int)lround(x);
        ev.button.y = (int)lround(y);
    }
    SDL_PushEvent(&ev);
}

/* Runs one script line: pushes its events, or does what it says. Returns 0, 1 at the end of
 * the script, or -1 with err filled for a bad line. */
static int script_step(win *w, view *v, FILE *fp, int *line, as_error *err) {
    char buf[1100], cmd[32], a[1024] = "", b[64] = "", c[64] = "";
    for (;;) {
        if (!fgets(buf, sizeof buf, fp)) return 1;
        (*line)++;
        char *h = strchr(buf, '#');
        if (h) *h = 0;
        cmd[0] = 0;
        int n = sscanf(buf, "%31s %1023s %63s %63s", cmd, a, b, c);
        if (n >= 1) break;
    }
    double x = atof(a), y = atof(b);
    SDL_Event ev;
    memset(&ev, 0, sizeof ev);
    if (strcmp(cmd, "key") == 0) {
        SDL_Keycode code = 0;
        for (size_t i = 0; i < sizeof key_names / sizeof key_names[0]; i++)
            if (strcmp(a, key_names[i].name) == 0) code = key_names[i].code;
        SDL_SetModState(script_mods(b));
        if (code) {
            ev.type = SDL_KEYDOWN;
            ev.key.windowID = SDL_GetWindowID(w->win);
            ev.key.state = SDL_PRESSED;
            ev.key.keysym.sym = code;
            ev.key.keysym.mod = script_mods(b);
        } else if (strlen(a) == 1) {
            ev.type = SDL_TEXTINPUT;
            ev.text.windowID = SDL_GetWindowID(w->win);
            ev.text.text[0] = a[0];
        } else {
            return as_fail(err, AS_ERR_ARG, "script line %d: unknown key \"%s\"", *line, a), -1;
        }
        SDL_PushEvent(&ev);
    } else if (strcmp(cmd, "move") == 0 || strcmp(cmd, "click") == 0) {
        push_mouse(w, cmd[0] == 'm' ? SDL_MOUSEMOTION : SDL_MOUSEBUTTONDOWN, x, y);
    } else if (strcmp(cmd, "move-cell") == 0 || strcmp(cmd, "click-cell") == 0) {
        int p = atoi(a), r = atoi(b), col = atoi(c);
        if (p < 0 || p >= v->n_panels || r < 0 || r >= v->panels[p].rows || col < 0 || col >= v->panels[p].cols)
            return as_fail(err, AS_ERR_ARG, "script line %d: the last frame has no cell (%d, %d) in "
                           "panel %d (%d panels)", *line, r, col, p, v->n_panels), -1;
        const view_panel *pn = &v->panels[p];
        double s = v->zoom * w->user; /* plot points -> window points */
        double px, py;
        view_panel_cell_centre(pn, r, col, &px, &py);
        px *= s;
        py *= s;
        push_mouse(w, cmd[0] == 'm' ? SDL_MOUSEMOTION : SDL_MOUSEBUTTONDOWN, px, py);
    } else if (strcmp(cmd, "wheel") == 0) {
        SDL_SetModState(script_mods(b));
        ev.type = SDL_MOUSEWHEEL;
        ev.wheel.windowID = SDL_GetWindowID(w->win);
        ev.wheel.y = (Sint32)x;
        SDL_PushEvent(&ev);
        return 0;
    } else if (strcmp(cmd, "resize") == 0) {
        if (!(x >= 100 && y >= 80 && x <= 8192 && y <= 8192))
            return as_fail(err, AS_ERR_ARG, "script line %d: resize %s %s: give 100..8192 x 80..8192", *line, a, b), -1;
        SDL_SetWindowSize(w->win, (int)x, (int)y);
        ev.type = SDL_WINDOWEVENT;
        ev.window.event = SDL_WINDOWEVENT_SIZE_CHANGED;
        SDL_PushEvent(&ev);
    } else if (strcmp(cmd, "wait") == 0) {
        double end = now_s() + x / 1e3;
        while (now_s() < end) {
            if (view_poll(v) & VIEW_REDRAW) frame(w, v, err);
            SDL_Delay(20);
        }
        SDL_PushEvent(&(SDL_Event){.window = {.type = SDL_WINDOWEVENT, .event = SDL_WINDOWEVENT_EXPOSED}});
    } else if (strcmp(cmd, "status") == 0) {
        if (frame(w, v, err) != AS_OK) return -1;
        printf("status: %s\n", v->status);
        fflush(stdout);
    } else if (strcmp(cmd, "title") == 0) {
        if (frame(w, v, err) != AS_OK) return -1;
        printf("title: %s\n", v->title);
        fflush(stdout);
    } else if (strcmp(cmd, "screenshot") == 0) {
        char what[48];
        snprintf(what, sizeof what, "script line %d: screenshot", *line);
        if (view_png_out_check(a, what, err) != AS_OK) return -1;
        if (!w->surface || screenshot(w, a, err) != AS_OK) return -1;
        printf("screenshot: %s (%d x %d)\n", a, w->pw, w->ph);
    } else {
        return as_fail(err, AS_ERR_ARG, "script line %d: unknown command \"%s\" (key, move, click, "
                       "move-cell, click-cell, wheel, resize, wait, status, title, screenshot)", *line, cmd), -1;
    }
    return 0;
}

/* ---- the loop ----------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void print_timing(const win *w) {
    int n = w->n_frames - 1; /* redraws after the first */
    if (n < 1) return;
    double *t = malloc((size_t)n * sizeof *t);
    if (!t) return;
    memcpy(t, w->frame_ms + 1, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    fprintf(stderr, "redraws: %d, median %.1f ms, 95th percentile %.1f ms, max %.1f ms (%d x %d pixels)\n",
            n, t[n / 2], t[(int)(0.95 * (n - 1))], t[n - 1], w->pw, w->ph);
    free(t);
}

as_status view_window_run(view *v, const view_window_opts *o, as_error *err) {
    win w;
    memset(&w, 0, sizeof w);
    w.user = o->scale > 0 ? o->scale : env_scale();
    FILE *script = NULL;
    as_status rc = AS_OK;
    if (o->script) {
        script = strcmp(o->script, "-") == 0 ? stdin : fopen(o->script, "r");
        if (!script) return as_fail(err, AS_ERR_IO, "%s: cannot read the script", o->script);
    }
    const char *no_display = "no display to open a window on: run it on a desktop or under xvfb-run, or "
                             "headless with SDL_VIDEODRIVER=dummy and --script FILE";
    if (!getenv("DISPLAY") && !getenv("WAYLAND_DISPLAY") && !getenv("SDL_VIDEODRIVER") && !script)
        return as_fail(err, AS_ERR_IO, "%s", no_display); /* before SDL prints its own guesses */
    if (SDL_Init(SDL_INIT_VIDEO) != 0) {
        if (script && script != stdin) fclose(script);
        return as_fail(err, AS_ERR_IO, "cannot open a window (SDL: %s): run it on a desktop, set "
                       "DISPLAY, or use xvfb-run; SDL_VIDEODRIVER=dummy runs it headless with "
                       "--script", SDL_GetError());
    }
    /* without a display SDL falls back to a driver nobody sees: a window there would wait for
     * keys forever. Only a script can drive it. */
    const char *drv = SDL_GetCurrentVideoDriver();
    if (!script && drv && (strcmp(drv, "dummy") == 0 || strcmp(drv, "offscreen") == 0 ||
                           strcmp(drv, "evdev") == 0)) {
        SDL_Quit();
        return as_fail(err, AS_ERR_IO, "%s (SDL video driver \"%s\")", no_display, drv);
    }
    char title[1200];
    snprintf(title, sizeof title, "attnscope view: %s", v->src.path);
    /* the size asked for times --scale, but never larger than the screen: --scale enlarges
     * the interface inside the window, it does not push the window off the screen */
    int ww = o->width > 0 ? o->width : 1280, wh = o->height > 0 ? o->height : 800;
    int sw = (int)(ww * w.user), sh = (int)(wh * w.user);
    SDL_Rect usable;
    if (SDL_GetDisplayUsableBounds(0, &usable) == 0 && usable.w > 0 && usable.h > 0) {
        double k = fmin(1, fmin(0.95 * usable.w / sw, 0.95 * usable.h / sh));
        sw = (int)(sw * k);
        sh = (int)(sh * k);
    }
    w.win = SDL_CreateWindow(title, SDL_WINDOWPOS_UNDEFINED, SDL_WINDOWPOS_UNDEFINED, sw, sh,
                             SDL_WINDOW_RESIZABLE | SDL_WINDOW_ALLOW_HIGHDPI);
    if (w.win) w.ren = SDL_CreateRenderer(w.win, -1, 0);
    if (w.win && !w.ren) w.ren = SDL_CreateRenderer(w.win, -1, SDL_RENDERER_SOFTWARE);
    if (!w.win || !w.ren) {
        rc = as_fail(err, AS_ERR_IO, "cannot open a window (SDL: %s): set DISPLAY or use xvfb-run",
                     SDL_GetError());
        goto cleanup;
    }
    SDL_SetWindowMinimumSize(w.win, 320, 240);
    SDL_StartTextInput();
    int dirty = 1, quit = 0, line = 0, script_done = !script;
    double first = -1, next_poll = now_s() + 0.25;
    while (!quit) {
        if (dirty) {
            if ((rc = frame(&w, v, err)) != AS_OK) goto cleanup;
            dirty = 0;
            if (first < 0) {
                first = now_s() - o->t_start;
                if (o->timing) fprintf(stderr, "first frame: %.0f ms after the start\n", first * 1e3);
            }
        }
        SDL_Event ev;
        int have;
        if (!script_done && !SDL_HasEvents(SDL_FIRSTEVENT, SDL_LASTEVENT)) {
            int st = script_step(&w, v, script, &line, err);
            if (st < 0) {
                rc = err->status;
                goto cleanup;
            }
            if (st == 1) {
                script_done = 1;
                quit = 1;
            }
            have = SDL_PollEvent(&ev);
        } else if (script_done && script) {
            have = SDL_PollEvent(&ev);
            if (!have) break;
        } else {
            double wait = next_poll - now_s();
            have = SDL_WaitEventTimeout(&ev, wait > 0 ? (int)(wait * 1e3) + 1 : 1);
        }
        for (; have; have = SDL_PollEvent(&ev)) {
            int r = translate(&w, v, &ev);
            if (r & VIEW_QUIT) quit = 1;
            if (r & VIEW_REDRAW) dirty = 1;
            if (r & VIEW_EXPORT) {
                char path[1200], cmd[4096];
                as_error e = {0};
                if (view_export(v, o->export_dir, path, sizeof path, cmd, sizeof cmd, &e) == AS_OK)
                    printf("saved %s\n%s%s\n", path, cmd[0] == '#' ? "" : "the same as a batch figure:\n", cmd);
                else {
                    snprintf(v->message, sizeof v->message, "%s", e.msg);
                    fprintf(stderr, "attnscope view: %s\n", e.msg); /* not only in the window */
                }
                fflush(stdout);
            }
        }
        if (now_s() >= next_poll) {
            if (view_poll(v) & VIEW_REDRAW) dirty = 1;
            next_poll = now_s() + 0.25;
        }
    }
    if (dirty && (rc = frame(&w, v, err)) != AS_OK) goto cleanup;
    /* checked before the window opened, and again now: never over a file made meanwhile */
    if (o->screenshot && ((rc = view_png_out_check(o->screenshot, "--screenshot", err)) != AS_OK ||
                          (rc = screenshot(&w, o->screenshot, err)) != AS_OK))
        goto cleanup;
    if (o->timing) print_timing(&w);
cleanup:
    if (script && script != stdin) fclose(script);
    if (w.surface) cairo_surface_destroy(w.surface);
    if (w.tex) SDL_DestroyTexture(w.tex);
    if (w.ren) SDL_DestroyRenderer(w.ren);
    if (w.win) SDL_DestroyWindow(w.win);
    free(w.frame_ms);
    SDL_Quit();
    return rc;
}
