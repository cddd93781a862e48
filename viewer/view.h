/* view.h: the trace viewer without a window: what is selected, how it is shown, what an input
 * event does, and drawing the whole window into any cairo context. viewer/window.c puts it in
 * an SDL2 window; tests draw into offscreen surfaces and send scripted events.
 *
 * Usage:
 *     view v;
 *     if (view_open(&v, "run.h5", &err) != AS_OK) ...
 *     view_draw(&v, cr, 1200, 760);                 // logical points; scale cr for HiDPI
 *     view_event e = {.type = VIEW_EV_KEY, .key = VIEW_KEY_RIGHT};
 *     if (view_handle(&v, &e) & VIEW_REDRAW) view_draw(&v, cr, 1200, 760);
 *     view_poll(&v);                                // a live trace: new images, end of run
 *     view_close(&v);
 *
 * Reads are lazy: a frame reads the maps it shows (one HDF5 chunk per head and image) through
 * a small LRU cache, never the whole trace. */
#ifndef AS_VIEW_H
#define AS_VIEW_H

#include <cairo.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/status.h"
#include "../plot/figures.h"

typedef enum {
    VIEW_MODE_QUERY = 0, /* image + overlay of the query's attention, and the head's full map */
    VIEW_MODE_GRID,      /* every head of the layer as small multiples */
    VIEW_MODE_DEPTH,     /* the query in every recorded layer */
    VIEW_MODE_SIMILARITY,/* /analysis/similarity: layer x layer; a click opens the pair */
    VIEW_MODE_PAIR,      /* two layers side by side */
    VIEW_MODE_ALS,       /* /analysis/als: layer x head; a click opens that head */
    VIEW_MODE_COUNT
} view_mode;

typedef enum { VIEW_ROW_QUERY = 0, VIEW_ROW_CLASS, VIEW_ROW_ROLLOUT } view_row;
typedef enum { VIEW_NORM_MAP = 0, VIEW_NORM_GLOBAL } view_norm;

/* Keys are their ASCII character, or one of these. */
enum {
    VIEW_KEY_LEFT = 0x100, VIEW_KEY_RIGHT, VIEW_KEY_UP, VIEW_KEY_DOWN, VIEW_KEY_PAGEUP,
    VIEW_KEY_PAGEDOWN, VIEW_KEY_HOME, VIEW_KEY_END, VIEW_KEY_ESCAPE, VIEW_KEY_ENTER, VIEW_KEY_TAB
};
enum { VIEW_MOD_SHIFT = 1, VIEW_MOD_CTRL = 2 };
typedef enum { VIEW_EV_KEY = 0, VIEW_EV_MOTION, VIEW_EV_CLICK, VIEW_EV_WHEEL, VIEW_EV_LEAVE } view_event_type;

typedef struct {
    view_event_type type;
    int key, mods;    /* VIEW_EV_KEY */
    double x, y;      /* MOTION, CLICK, WHEEL: logical points from the window's top left */
    int wheel;        /* WHEEL: +1 up (towards earlier layers), -1 down */
} view_event;

/* view_handle's result bits */
enum { VIEW_REDRAW = 1, VIEW_QUIT = 2, VIEW_EXPORT = 4 };

typedef enum { VIEW_PANEL_IMAGE = 0, VIEW_PANEL_MAP, VIEW_PANEL_SIMILARITY, VIEW_PANEL_ALS } view_panel_kind;

/* A drawn panel, kept for hit testing, the value under the cursor and tests. */
typedef struct {
    view_panel_kind kind;
    double x, y, w, h;       /* where its cells lie, in logical points */
    int rows, cols;          /* IMAGE: g x g patches; MAP: Q x T; SIMILARITY: L x L; ALS: L x H */
    int layer, head;         /* what it shows (model indices; head -1: not per head) */
    int ds;                  /* the map dataset (view_map_name) */
    int query;               /* IMAGE/MAP: the query token whose row is shown */
    double lo, hi;           /* the colour range its values map to (after the scale) */
    const double *values;    /* rows x cols as drawn, before the scale; valid until the next draw */
    mapscale scale;          /* IMAGE, MAP: the map's scale, uniform level, peak and prefix share */
    /* staged traces (format 3): an IMAGE panel covers the whole input image (img pixels a
     * side) and its token (r, c) the pixels offset + stride * (r, c) -+ stride / 2, clipped to
     * the image; stride 0 in single-grid traces, whose g x g patches tile the panel */
    double stride_px, offset_px;
    int img;
    int window;              /* IMAGE, MAP: the query's window in a window layer, else -1 */
    const double *key_state; /* staged IMAGE: per cell VIEW_KEY_OUTSIDE, _IN or _MASKED */
    /* spatial-reduction layers (PVT v2): the IMAGE panel's cells are the rows x cols reduced
     * keys, key (r, c) drawn over the pixels [kspan[r], kspan[rows + r]) x [kspan[2 rows + c],
     * kspan[2 rows + cols + c]) (a conv key: the tokens it reduces; a pooled key: its seventh of
     * the grid, its bin when 7 divides the grid); stride_px and offset_px stay the query grid's,
     * qcols its width. NULL in every other panel. */
    const double *kspan;
    int qcols;
} view_panel;

/* Where a staged IMAGE panel's token lies for the query's row: outside the query's window (its
 * weight is exactly 0), inside it, or inside it behind the shift mask (weight ~0). */
enum { VIEW_KEY_OUTSIDE = 0, VIEW_KEY_IN, VIEW_KEY_MASKED };

typedef struct {
    double lo, hi;           /* the labelled range */
    char label[64];
} view_colorbar;

#define VIEW_MAX_PANELS 160
#define VIEW_N_MAPS 5

typedef struct view_cache view_cache;

typedef struct {
    fig_source src;          /* the trace and its /analysis */
    /* selection */
    view_mode mode, prev_mode;
    long image;
    int li, hi;              /* positions in the recorded layers and in the dataset's heads */
    int ds;                  /* map dataset: 0 attn, then scores and the internals it holds */
    int query;               /* token index (0 = class token when there is one) */
    int query_locked;        /* a click fixed it; hovering no longer moves it */
    view_row row;
    int pair[2];             /* PAIR: the two layer positions */
    int definition;          /* SIMILARITY: index into analysis_definition_name */
    /* display */
    plot_cmap cmap;
    mapscale_range range;    /* attention maps: from 0 (default) or from their minimum ('z') */
    int log_scale;
    view_norm norm;
    double opacity;          /* overlay alpha in [0, 1] */
    int help, follow;
    /* live */
    long n_images;
    int live, complete;
    /* the last frame: panels, colour bars, status line, hover */
    double width, height;
    int n_panels;
    view_panel panels[VIEW_MAX_PANELS];
    int n_cbars;
    view_colorbar cbars[8];
    int hover_panel, hover_row, hover_col;
    char status[1600], message[AS_ERROR_MSG_MAX];
    char title[1600];        /* the title line: file, mode, colour map, the scale drawn */
    /* image info of the current image */
    char image_path[1024];
    int label, pred;
    char label_name[64], pred_name[64];  /* ImageFolder class names, or empty */
    /* memory */
    view_cache *cache;
    double *scratch;         /* doubles for the values of one frame */
    size_t scratch_n, scratch_used;
    uint8_t *rgb;            /* the current image (S x S x 3) */
    long rgb_image;
    int rgb_size;
    double *rollout;         /* (L, T, T) fused + identity maps of rollout_image */
    float *rollout_maps;     /* (L, H, T, T) the maps they come from */
    long rollout_image;
    int n_maps;              /* datasets present in some layer */
    int maps[VIEW_N_MAPS];   /* their view_map_name indices */
    double zoom;             /* UI size: plot points per logical point ('+'/'-') */
    long reads;              /* maps read from the file (cache misses) */
    /* private */
    double *panel_mem[VIEW_MAX_PANELS];
    int dims[VIT_MAX_DEPTH][VIEW_N_MAPS][4];  /* per layer position and map: heads, rows, cols,
                                                 problems (recorded windows; 1 if not windowed) */
    /* staged traces (format 3) */
    int staged;
    double qpt[2];           /* the query as an input image point (y, x) in pixels: each layer's
                                query is its grid cell containing it */
    int *wtok[VIT_MAX_DEPTH];/* per layer position: (problems of the model, rows) grid token of
                                each row (params/window_token; a global layer: 0..T-1), -1: pad */
    unsigned char *wmask[VIT_MAX_DEPTH]; /* shifted window layers: (nW, M^2, M^2) 1 where the
                                shift mask separates query and key (params/shift_mask), or NULL */
    double *rollout_rows;    /* (L, T): rollout rows of rollout_query */
    int rollout_query;
    /* rollout on a staged trace (analysis_sroll): the trace's geometry and the plan, made on
     * first use (sroll_why: why the trace cannot roll out, "" when it can); every layer's attn
     * of rollout_image back to back, the row sums' scratch, and per layer the rollout from the
     * query point's token of that layer back to layer 0's grid (L, gh gw), for sroll_pt */
    struct analysis_staged *sgeom;
    struct analysis_sroll *sroll;
    int sroll_tried;
    char sroll_why[1024];
    float *sroll_maps;
    double *sroll_scratch, *sroll_rows, sroll_pt[2];
    double *sim;             /* /analysis/similarity/head_mean/mean (D, L, L), or NULL */
    int sim_n, sim_layers[VIT_MAX_DEPTH];
    double *als;             /* /analysis/als/score/mean (L, H), or NULL */
    int als_l, als_h, als_layers[VIT_MAX_DEPTH], als_heads[1024];
    int writer_gone;         /* polls in a row that found no writer */
    int exporting;           /* drawing for view_export: no hints or selection frames */
} view;

/* The map datasets the viewer knows, in Tab order: attn, scores, attn_softmax (LSLA),
 * attn_expanded, attn_convolved (Refiner). */
const char *view_map_name(int ds);

as_status view_open(view *v, const char *path, as_error *err);
void view_close(view *v);
/* Sets the selection as the command line gives it (-1: keep); fails on values the trace lacks. */
as_status view_select(view *v, long image, int layer, int head, int query, as_error *err);
/* Applies one event; returns VIEW_REDRAW / VIEW_QUIT / VIEW_EXPORT bits. Hit testing uses the
 * panels of the last view_draw. */
int view_handle(view *v, const view_event *e);
/* A live trace: reads the image count again (every call) and notices the end of the run;
 * returns VIEW_REDRAW when something changed. */
int view_poll(view *v);
/* Draws the window: width x height logical points into cr (scaled by the caller for HiDPI). */
void view_draw(view *v, cairo_t *cr, double width, double height);
/* The attnscope plot command(s) that draw the current view as a batch figure (one per line),
 * writing NAME.pdf. */
void view_plot_command(const view *v, const char *name, char *out, size_t n);
/* Saves the panels of the last frame (no title line, status bar or empty window around them)
 * at VIEW_EXPORT_DPI as DIR/STEM-...png and fills path and the plot command. An existing file
 * is never replaced: the name takes -2, -3, ... (and the plot command's PDF the same). */
#define VIEW_EXPORT_DPI 300
as_status view_export(view *v, const char *dir, char *path, size_t pn, char *cmd, size_t cn,
                      as_error *err);

/* Whether the viewer may write a new PNG at path (flag names it in messages: "--screenshot"):
 * refused when it does not end in .png, already exists (the viewer never overwrites) or its
 * folder does not exist or is not writable. */
as_status view_png_out_check(const char *path, const char *flag, as_error *err);
/* Whether dir is an existing, writable folder (flag: "--export-dir"). */
as_status view_dir_check(const char *dir, const char *flag, as_error *err);

/* Non-zero, with err naming the analyze command, when mode m needs analysis results the trace
 * lacks (similarity, ALS). */
int view_mode_missing(const view *v, view_mode m, as_error *err);
/* The recorded layer (model index) and head (dataset head id) of the selection. */
int view_layer(const view *v);
int view_head(const view *v);
/* Staged traces: the window of the current layer that holds the query (-1 when the layer is not
 * windowed or the trace is single-grid), its row of the query in *row, and the layer's number of
 * windows in *n (either may be NULL). */
int view_query_window(const view *v, int *row, int *n);
/* The centre of cell (r, c) of panel p in plot points (multiply by the zoom for window points):
 * where a click selects that cell (staged image panels place tokens by their pixel geometry). */
void view_panel_cell_centre(const view_panel *p, int r, int c, double *x, double *y);

#endif
