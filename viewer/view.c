/* view.c: see view.h. The view reads through a byte-bounded LRU cache of single maps (one HDF5
 * chunk each), draws with plot/ into whatever cairo context it is given, and remembers the
 * panels it drew so events and tests can ask what lies under a point. */
#define _POSIX_C_SOURCE 200809L
#include "view.h"

#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../analysis/analysis.h"
#include "../analysis/geometry.h"
#include "../core/vitfam.h"
#include "../io/paths.h"
#include "../plot/keymap.h"

static const char *const map_names[VIEW_N_MAPS] = {"attn", "scores", "attn_softmax",
                                                   "attn_expanded", "attn_convolved"};
static const char *const mode_names[VIEW_MODE_COUNT] = {"query", "grid", "depth", "similarity",
                                                        "pair", "als"};
_Static_assert(sizeof mode_names / sizeof mode_names[0] == VIEW_MODE_COUNT, "mode names");

/* attn, scores and attn_softmax hold model heads; Refiner's H' expanded and convolved maps do not */
static const int map_has_model_heads[VIEW_N_MAPS] = {1, 1, 1, 0, 0};

const char *view_map_name(int ds) { return ds >= 0 && ds < VIEW_N_MAPS ? map_names[ds] : "?"; }

/* ---- the map cache ------------------------------------------------------------------------------ */

/* ViT-B's 12 x 12 maps of one image in float32 are 22 MB; the budget holds several images, so
 * flipping back and forth never rereads, while a multi-GB trace never comes near memory. */
#define CACHE_SLOTS 512
#define CACHE_BUDGET ((size_t)192 << 20)

typedef struct {
    int ds, layer, head;
    long image;
    float *data;
    size_t bytes;
    unsigned long long used;
} cache_slot;

struct view_cache {
    cache_slot s[CACHE_SLOTS];
    size_t bytes;
    unsigned long long clock;
};

static void cache_drop(view_cache *c, cache_slot *e) {
    c->bytes -= e->bytes;
    free(e->data);
    memset(e, 0, sizeof *e);
}

static void cache_clear(view_cache *c) {
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (c->s[i].data) cache_drop(c, &c->s[i]);
}

/* The head id of position hi in map ds (what trace_read_map takes), and its word. */
static int head_id(const view *v, int ds, int hi) {
    /* a staged trace recorded with --heads all keeps each layer's own heads (3/6/12/24) */
    return map_has_model_heads[ds] && !v->src.tr.heads_all ? v->src.tr.heads[hi] : hi;
}
static const char *head_word(int ds) { return map_has_model_heads[ds] ? "head" : "map"; }

static const float *map_get(view *v, int ds, long image, int li, int hi, as_error *err) {
    view_cache *c = v->cache;
    int layer = v->src.tr.layers[li];
    int head = head_id(v, ds, hi);
    cache_slot *free_slot = NULL;
    for (int i = 0; i < CACHE_SLOTS; i++) {
        cache_slot *e = &c->s[i];
        if (!e->data) {
            if (!free_slot) free_slot = e;
        } else if (e->ds == ds && e->image == image && e->layer == layer && e->head == head) {
            e->used = ++c->clock;
            return e->data;
        }
    }
    size_t bytes = (size_t)v->dims[li][ds][3] * v->dims[li][ds][1] * v->dims[li][ds][2] * sizeof(float);
    while (!free_slot || c->bytes + bytes > CACHE_BUDGET) {
        cache_slot *lru = NULL;
        for (int i = 0; i < CACHE_SLOTS; i++)
            if (c->s[i].data && (!lru || c->s[i].used < lru->used)) lru = &c->s[i];
        if (!lru) break;
        cache_drop(c, lru);
        if (!free_slot) free_slot = lru;
    }
    float *data = malloc(bytes ? bytes : 1);
    if (!data) {
        as_fail(err, AS_ERR_NOMEM, "out of memory reading a map");
        return NULL;
    }
    if (trace_read_map(&v->src.tr, map_names[ds], image, layer, head, data, err) != AS_OK) {
        free(data);
        return NULL;
    }
    v->reads++;
    *free_slot = (cache_slot){ds, layer, head, image, data, bytes, ++c->clock};
    c->bytes += bytes;
    return data;
}

/* ---- selection ---------------------------------------------------------------------------------- */

int view_layer(const view *v) { return v->src.tr.layers[v->li]; }
int view_head(const view *v) { return head_id(v, v->ds, v->hi); }

static int n_heads(const view *v, int li, int ds) { return v->dims[li][ds][0]; }

/* Rollout (r) is drawn in the query, pair and depth views; the head grid shows the heads' own
 * maps (rollout fuses the heads: every panel of a grid would be the same map). */
static int rollout_drawn(const view *v) { return v->row == VIEW_ROW_ROLLOUT && v->mode != VIEW_MODE_GRID; }
static int has_map(const view *v, int li, int ds) { return v->dims[li][ds][0] > 0; }
static int grid_of(const view *v) { return vit_grid(&v->src.tr.cfg); }
static int prefix_of(const view *v) { return v->src.tr.num_prefix; }

static int index_in(const int *v, int n, int x) {
    for (int i = 0; i < n; i++)
        if (v[i] == x) return i;
    return -1;
}

/* ---- staged traces (format 3) ------------------------------------------------------------------ */

/* Each layer has its own grid (gh x gw tokens every stride_px pixels), heads and, in window
 * layers, M x M windows whose rows map to grid tokens through params/window_token. The query is
 * an input image point: every layer's query token is its cell containing the point, so stepping
 * across stages follows one location (56 -> 28 -> 14 -> 7 cells in Swin-T). A global layer is
 * one problem whose rows are the grid's tokens in order. */
static const trace_layer_geom *geom_of(const view *v, int li) { return &v->src.tr.geom[li]; }
static int windowed(const view *v, int li) { return v->staged && geom_of(v, li)->scope == VIT_SCOPE_WINDOW; }
/* Spatial reduction (PVT v2): queries are the grid's tokens, keys the cells of a reduced grid. */
static int reduced(const view *v, int li) { return v->staged && geom_of(v, li)->scope == VIT_SCOPE_SRA; }
/* Class attention (CaiT): the layer's one query is the class token, over [cls; patches]. */
static int classrow(const view *v, int li) { return v->staged && geom_of(v, li)->scope == VIT_SCOPE_CLASS; }
/* The token table's shape: the model's windows (all of them, recorded or not) and their rows. */
static int table_problems(const view *v, int li) {
    return windowed(v, li) ? geom_of(v, li)->nwh * geom_of(v, li)->nww : 1;
}
static int table_rows(const view *v, int li) {
    const trace_layer_geom *g = geom_of(v, li);
    return windowed(v, li) ? g->M * g->M : g->gh * g->gw;
}

/* The query token (flat grid index y * gw + x) of layer li. */
static int staged_token(const view *v, int li) {
    const trace_layer_geom *g = geom_of(v, li);
    return keymap_cell_at(v->qpt[0], g->offset_px, g->stride_px, g->gh) * g->gw +
           keymap_cell_at(v->qpt[1], g->offset_px, g->stride_px, g->gw);
}

/* Moves the query point to the centre of token t of layer li (its part inside the image). */
static void point_at_token(view *v, int li, int t) {
    const trace_layer_geom *g = geom_of(v, li);
    double lo, hi;
    keymap_cell_span(g->offset_px, g->stride_px, t / g->gw, v->src.tr.cfg.img_size, &lo, &hi);
    v->qpt[0] = (lo + hi) / 2;
    keymap_cell_span(g->offset_px, g->stride_px, t % g->gw, v->src.tr.cfg.img_size, &lo, &hi);
    v->qpt[1] = (lo + hi) / 2;
}

/* Where token t lies in layer li's problems: window w (0 in a global layer), its row there,
 * and the position of w among the recorded windows (-1: not recorded). */
typedef struct { int t, w, row, pos; } view_place;
static view_place place_of(const view *v, int li, int t) {
    view_place q = {t, -1, -1, -1};
    const int *tok = v->wtok[li];
    int R = table_rows(v, li);
    size_t n = (size_t)table_problems(v, li) * R;
    for (size_t i = 0; tok && i < n; i++)
        if (tok[i] == t) {
            q.w = (int)(i / R);
            q.row = (int)(i % R);
            break;
        }
    const trace_reader *r = &v->src.tr;
    if (q.w >= 0) q.pos = !windowed(v, li) ? 0 : r->n_windows ? index_in(r->windows, r->n_windows, q.w) : q.w;
    return q;
}

/* The query's place in layer li's maps: the single-grid trace's query row, a staged layer's
 * token under the query point, or a class-attention layer's one row (the class token's). */
static view_place query_place(const view *v, int li) {
    if (classrow(v, li)) return (view_place){0, 0, 0, 0};
    if (v->staged) return place_of(v, li, staged_token(v, li));
    return (view_place){v->query, -1, v->query, 0};
}

int view_query_window(const view *v, int *row, int *n) {
    if (!v->staged || !windowed(v, v->li)) return -1;
    view_place q = place_of(v, v->li, staged_token(v, v->li));
    if (row) *row = q.row;
    if (n) *n = table_problems(v, v->li);
    return q.w;
}

/* The token tables (and the shift masks of shifted window layers) of every recorded layer;
 * refuses what the staged views do not draw yet. */
static as_status load_tables(view *v, as_error *err) {
    const trace_reader *r = &v->src.tr;
    for (int li = 0; li < r->n_layers; li++) {
        const trace_layer_geom *g = geom_of(v, li);
        int R = table_rows(v, li), layer = r->layers[li];
        const int cr = classrow(v, li) && g->prefix == 1 && g->Tq == 1; /* the class row over [cls; patches] */
        if (!cr && (g->prefix > 0 || (!windowed(v, li) && g->Tq != g->T)))
            return as_fail(err, AS_ERR_UNSUPPORTED, "%s: layer %d has %s: stage-aware support is not "
                           "there yet in the viewer for staged layers with prefix tokens or prefix "
                           "rows only; it shows window and global layers over the grid", r->path,
                           layer, g->prefix > 0 ? "prefix tokens" : "prefix query rows only");
        const int K = windowed(v, li) ? R : reduced(v, li) ? g->kgh * g->kgw : g->T; /* keys per row */
        for (int ds = 0; ds < VIEW_N_MAPS; ds++) {
            const int *dm = v->dims[li][ds];
            if (dm[0] > 0 && (dm[1] != (cr ? 1 : R) || dm[2] != K))
                return as_fail(err, AS_ERR_FORMAT, "%s: layers/%02d/%s is %d x %d per problem where "
                               "the layer's geometry gives %d x %d: the file is corrupt", r->path,
                               layer, map_names[ds], dm[1], dm[2], cr ? 1 : R, K);
        }
        size_t n = (size_t)table_problems(v, li) * R;
        int *tok = v->wtok[li] = malloc(n * sizeof *tok);
        if (!tok) return as_fail(err, AS_ERR_NOMEM, "out of memory");
        if (!windowed(v, li)) {
            for (size_t i = 0; i < n; i++) tok[i] = (int)i;
            continue;
        }
        if (trace_read_window_tokens(r, layer, tok, err) != AS_OK) return err->status;
        if (!g->shift) continue;
        char name[64];
        double *m = NULL;
        long d[6];
        int nd = 0;
        snprintf(name, sizeof name, "layers/%02d/params/shift_mask", layer);
        if (fig_read_any(&v->src, name, "record the trace again", &m, d, &nd, err) != AS_OK) return err->status;
        if (nd != 3 || d[0] != table_problems(v, li) || d[1] != R || d[2] != R) {
            free(m);
            return as_fail(err, AS_ERR_FORMAT, "%s: %s is not a (%d, %d, %d) table: the file is corrupt",
                           r->path, name, table_problems(v, li), R, R);
        }
        unsigned char *mk = v->wmask[li] = malloc(n * R);
        for (size_t i = 0; mk && i < n * R; i++) mk[i] = m[i] != 0;
        free(m);
        if (!mk) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    }
    return AS_OK;
}

static void note(view *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(view *v, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->message, sizeof v->message, fmt, ap);
    va_end(ap);
}

/* Keeps the selection inside what the trace holds after a change of layer or map. */
static void clamp_selection(view *v) {
    const trace_reader *r = &v->src.tr;
    if (v->li < 0) v->li = 0;
    if (v->li >= r->n_layers) v->li = r->n_layers - 1;
    if (!has_map(v, v->li, v->ds)) {
        note(v, "layer %d has no %s maps: showing attn", view_layer(v), map_names[v->ds]);
        v->ds = 0;
    }
    int h = n_heads(v, v->li, v->ds);
    if (v->hi >= h) v->hi = h - 1;
    if (v->hi < 0) v->hi = 0;
    if (v->n_images > 0 && v->image >= v->n_images) v->image = v->n_images - 1;
    if (v->image < 0) v->image = 0;
    if (v->staged) { /* the query point's cell in this layer */
        v->query = staged_token(v, v->li);
        return;
    }
    int q_rows = v->dims[v->li][v->ds][1];
    if (v->query >= q_rows) v->query = q_rows - 1;
    if (v->query < 0) v->query = 0;
}

static int default_query(const view *v) {
    int p = prefix_of(v), g = grid_of(v);
    return p > 0 ? 0 : (g / 2) * g + g / 2;
}

static void load_analysis(view *v) {
    free(v->sim);
    free(v->als);
    v->sim = v->als = NULL;
    as_error e = {0};
    double *m;
    long d[6];
    int nd;
    if (fig_read(&v->src, "similarity", "head_mean", "mean", &m, d, &nd, &e) == AS_OK) {
        if (nd == 3 && d[0] == ANALYSIS_N_DEFINITIONS && d[1] == d[2] && d[1] <= VIT_MAX_DEPTH) {
            v->sim = m;
            v->sim_n = (int)d[1];
            fig_labels(&v->src, "similarity", "head_mean", "layer", v->sim_layers, VIT_MAX_DEPTH);
        } else {
            free(m);
        }
    }
    if (fig_read(&v->src, "als", "score", "mean", &m, d, &nd, &e) == AS_OK) {
        if (nd == 2 && d[0] <= VIT_MAX_DEPTH && d[1] <= 1024) {
            v->als = m;
            v->als_l = (int)d[0];
            v->als_h = (int)d[1];
            fig_labels(&v->src, "als", "score", "layer", v->als_layers, VIT_MAX_DEPTH);
            fig_labels(&v->src, "als", "score", "head", v->als_heads, 1024);
        } else {
            free(m);
        }
    }
}

static void load_dims(view *v) {
    const trace_reader *r = &v->src.tr;
    for (int li = 0; li < r->n_layers; li++)
        for (int ds = 0; ds < VIEW_N_MAPS; ds++) {
            char name[64];
            long d[5] = {0};
            snprintf(name, sizeof name, "layers/%02d/%s", r->layers[li], map_names[ds]);
            int nd = trace_dataset_dims(r, name, d, 5);
            /* (heads, rows, keys), or a staged window layer's (heads, windows, rows, keys) */
            int win = nd == 4 && r->staged && d[1] == r->geom[li].n_problems;
            int *dm = v->dims[li][ds];
            dm[0] = nd == 3 || win ? (int)d[0] : 0;
            dm[1] = nd == 3 ? (int)d[1] : win ? (int)d[2] : 0;
            dm[2] = nd == 3 ? (int)d[2] : win ? (int)d[3] : 0;
            dm[3] = win ? (int)d[1] : 1;
        }
    v->n_maps = 0;
    for (int ds = 0; ds < VIEW_N_MAPS; ds++)
        for (int li = 0; li < r->n_layers; li++)
            if (has_map(v, li, ds)) {
                v->maps[v->n_maps++] = ds;
                break;
            }
}

static void read_image_info(view *v) {
    as_error e = {0};
    v->image_path[0] = 0;
    v->label = v->pred = -1;
    if (v->n_images > 0)
        trace_read_image_info(&v->src.tr, v->image, v->image_path, sizeof v->image_path, &v->label,
                              &v->pred, NULL, &e);
    trace_class_name(&v->src.tr, v->label, v->label_name, sizeof v->label_name);
    trace_class_name(&v->src.tr, v->pred, v->pred_name, sizeof v->pred_name);
}

as_status view_open(view *v, const char *path, as_error *err) {
    memset(v, 0, sizeof *v);
    if (fig_source_open(&v->src, path, NULL, err) != AS_OK) return err->status;
    const trace_reader *r = &v->src.tr;
    if (!v->src.is_trace) {
        fig_source_close(&v->src);
        return as_fail(err, AS_ERR_ARG, "%s is an analysis results file: view the trace it was "
                       "made from", path);
    }
    v->staged = r->staged;
    v->cache = calloc(1, sizeof *v->cache);
    if (!v->cache) {
        fig_source_close(&v->src);
        return as_fail(err, AS_ERR_NOMEM, "out of memory");
    }
    load_dims(v);
    if (r->n_layers < 1 || (r->n_heads < 1 && !r->heads_all) || !has_map(v, 0, 0)) {
        view_close(v);
        return as_fail(err, AS_ERR_ARG, "%s holds no attention maps (recorded without attn): "
                       "record with --record attn", path);
    }
    if (v->staged && load_tables(v, err) != AS_OK) {
        view_close(v);
        return err->status;
    }
    v->qpt[0] = v->qpt[1] = r->cfg.img_size / 2.0; /* staged: the image's centre */
    v->n_images = r->n_images;
    v->live = r->swmr;
    v->complete = r->complete;
    v->li = r->n_layers - 1;
    v->query = default_query(v);
    v->cmap = PLOT_CMAP_DEFAULT;
    v->range = MAPSCALE_ZERO;
    v->opacity = 0.6;
    v->zoom = 1.45;
    v->follow = v->live;
    if (v->follow && v->n_images > 0) v->image = v->n_images - 1; /* live: start at the newest */
    v->rgb_image = v->rollout_image = -1;
    v->hover_panel = -1;
    v->definition = ANALYSIS_DEFAULT_DEFINITION; /* row, as plot similarity */
    load_analysis(v);
    clamp_selection(v);
    read_image_info(v);
    v->message[0] = 0;
    return AS_OK;
}

void view_close(view *v) {
    if (v->cache) cache_clear(v->cache);
    free(v->cache);
    for (int i = 0; i < VIEW_MAX_PANELS; i++) free(v->panel_mem[i]);
    free(v->rgb);
    free(v->rollout);
    free(v->rollout_maps);
    free(v->rollout_rows);
    analysis_sroll_free(v->sroll);
    analysis_staged_free(v->sgeom);
    free(v->sroll_maps);
    free(v->sroll_scratch);
    free(v->sroll_rows);
    free(v->sim);
    free(v->als);
    for (int li = 0; li < VIT_MAX_DEPTH; li++) {
        free(v->wtok[li]);
        free(v->wmask[li]);
    }
    fig_source_close(&v->src);
    memset(v, 0, sizeof *v);
}

static int layer_pos(const view *v, int layer) { return index_in(v->src.tr.layers, v->src.tr.n_layers, layer); }
static int head_pos(const view *v, int head) {
    if (v->src.tr.heads_all) return head >= 0 && head < n_heads(v, v->li, 0) ? head : -1; /* each layer's own */
    return index_in(v->src.tr.heads, v->src.tr.n_heads, head);
}

as_status view_select(view *v, long image, int layer, int head, int query, as_error *err) {
    const trace_reader *r = &v->src.tr;
    if (image >= 0) {
        if (image >= v->n_images)
            return as_fail(err, AS_ERR_ARG, "%s: --image %ld: the trace holds images 0..%ld", r->path,
                           image, v->n_images - 1);
        v->image = image;
        v->follow = 0;
    }
    if (layer >= 0) {
        int li = layer_pos(v, layer);
        if (li < 0) return as_fail(err, AS_ERR_ARG, "%s: --layer %d was not recorded (attnscope "
                                   "info %s lists the layers)", r->path, layer, r->path);
        v->li = li;
    }
    if (head >= 0) {
        int hi = head_pos(v, head);
        if (hi < 0) return as_fail(err, AS_ERR_ARG, "%s: --head %d was not recorded", r->path, head);
        v->hi = hi;
    }
    if (query >= 0 && v->staged) { /* a token of the selected layer's grid */
        const trace_layer_geom *g = geom_of(v, v->li);
        if (query >= g->gh * g->gw)
            return as_fail(err, AS_ERR_ARG, "%s: --query %d: layer %d has tokens 0..%d (a %d x %d grid; "
                           "token y * %d + x)", r->path, query, r->layers[v->li], g->gh * g->gw - 1,
                           g->gh, g->gw, g->gw);
        point_at_token(v, v->li, query);
        v->query_locked = 1;
    } else if (query >= 0) {
        if (query >= r->q_rows)
            return as_fail(err, AS_ERR_ARG, "%s: --query %d: the trace holds query rows 0..%d%s",
                           r->path, query, r->q_rows - 1, r->q_rows < r->num_tokens ?
                           " (recorded with --query-rows prefix)" : "");
        v->query = query;
        v->query_locked = 1;
    }
    clamp_selection(v);
    read_image_info(v);
    return AS_OK;
}

/* ---- values ----------------------------------------------------------------------------------- */

static as_status ensure_rgb(view *v, as_error *err) {
    if (v->rgb && v->rgb_image == v->image) return AS_OK;
    free(v->rgb);
    v->rgb = NULL;
    v->rgb_image = -1;
    if (fig_read_rgb(&v->src, v->image, &v->rgb, &v->rgb_size, err) != AS_OK) return err->status;
    v->rgb_image = v->image;
    return AS_OK;
}

/* Why rollout cannot run on this trace, or NULL when it can. A staged trace's geometry and
 * rollout plan are made on first use (analysis_sroll_new's checks: every layer, every window
 * and query row, row-stochastic maps). */
static const char *rollout_refusal(view *v) {
    const trace_reader *r = &v->src.tr;
    if (v->staged) {
        if (!v->sroll_tried) {
            v->sroll_tried = 1;
            as_error e = {0};
            if (analysis_staged_open(&v->sgeom, r, &e) != AS_OK ||
                analysis_sroll_new(&v->sroll, v->sgeom, r->cfg.depth, ANALYSIS_FUSE_MEAN, &e) != AS_OK)
                snprintf(v->sroll_why, sizeof v->sroll_why, "%s", e.msg);
        }
        return v->sroll_why[0] ? v->sroll_why : NULL;
    }
    return r->n_layers != r->cfg.depth || r->q_rows != r->num_tokens
               ? "rollout multiplies every layer's full map: record with --layers all --query-rows all"
               : NULL;
}

/* Staged rollout (analysis_sroll_row, the rollout metric's staged arithmetic: heads' mean,
 * identity added, rows renormalised, merges to their children's mean, reduced keys spread over
 * the tokens they reduce): for every layer l, the rollout from the query point's token of layer
 * l (a class-attention layer's class token) back to layer 0's grid. */
static as_status ensure_staged_rollout(view *v, as_error *err) {
    const trace_reader *r = &v->src.tr;
    const analysis_staged *S = v->sgeom;
    const int L = S->n_layers, T0 = S->l[0].gh * S->l[0].gw;
    const float *attn[VIT_MAX_DEPTH];
    size_t off[VIT_MAX_DEPTH + 1] = {0};
    for (int l = 0; l < L; l++) off[l + 1] = off[l] + S->l[l].map_floats;
    if (!v->sroll_maps) v->sroll_maps = malloc(off[L] * sizeof *v->sroll_maps);
    if (!v->sroll_scratch) v->sroll_scratch = malloc(analysis_sroll_doubles(v->sroll) * sizeof(double));
    if (!v->sroll_rows) v->sroll_rows = malloc((size_t)L * T0 * sizeof *v->sroll_rows);
    if (!v->sroll_maps || !v->sroll_scratch || !v->sroll_rows) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    for (int l = 0; l < L; l++) attn[l] = v->sroll_maps + off[l];
    if (v->rollout_image != v->image) {
        for (int l = 0; l < L; l++) {
            char name[64];
            snprintf(name, sizeof name, "layers/%02d/attn", r->layers[l]);
            if (trace_read_image_slab(r, name, v->image, v->sroll_maps + off[l], err) != AS_OK) return err->status;
        }
        analysis_sroll_rowsums(v->sroll, attn, v->sroll_scratch);
        v->rollout_image = v->image;
        v->sroll_pt[0] = v->sroll_pt[1] = -1;
    }
    if (v->sroll_pt[0] == v->qpt[0] && v->sroll_pt[1] == v->qpt[1]) return AS_OK;
    double *e = analysis_sroll_start(v->sroll, v->sroll_scratch);
    for (int l = 0; l < L; l++) {
        const analysis_lgeom *g = &S->l[l];
        const int q = classrow(v, l) ? 0 : g->prefix + staged_token(v, l);
        for (int t = 0; t < g->T; t++) e[t] = t == q;
        analysis_sroll_row(v->sroll, attn, l, e, v->sroll_rows + (size_t)l * T0, v->sroll_scratch);
    }
    v->sroll_pt[0] = v->qpt[0];
    v->sroll_pt[1] = v->qpt[1];
    return AS_OK;
}

/* Rollout from the query through every layer: the rollout metric's arithmetic (mean fusion,
 * no discard, identity added), started from a one-hot query row instead of the class token. */
static as_status ensure_rollout(view *v, as_error *err) {
    const trace_reader *r = &v->src.tr;
    int T = r->num_tokens, L = r->n_layers, H = r->n_heads;
    if (rollout_refusal(v)) return as_fail(err, AS_ERR_ARG, "%s", rollout_refusal(v));
    if (v->staged) return ensure_staged_rollout(v, err);
    size_t TT = (size_t)T * T;
    if (v->rollout_image != v->image) {
        /* kept between images: 22 MB for ViT-B, whose fresh pages would cost a few ms each time */
        if (!v->rollout) v->rollout = malloc((size_t)L * TT * sizeof *v->rollout);
        if (!v->rollout_maps) v->rollout_maps = malloc((size_t)L * H * TT * sizeof *v->rollout_maps);
        float *buf = v->rollout_maps;
        int *idx = malloc(TT * sizeof *idx);
        const float *layers[VIT_MAX_DEPTH];
        as_status rc = v->rollout && buf && idx ? AS_OK : as_fail(err, AS_ERR_NOMEM, "out of memory");
        for (int l = 0; rc == AS_OK && l < L; l++) {
            char name[64];
            snprintf(name, sizeof name, "layers/%02d/attn", r->layers[l]);
            layers[l] = buf + (size_t)l * H * TT;
            rc = trace_read_image_slab(r, name, v->image, buf + (size_t)l * H * TT, err);
        }
        if (rc == AS_OK) {
            analysis_rollout_layers(v->rollout, layers, L, H, T, ANALYSIS_FUSE_MEAN, 0, idx);
            v->rollout_image = v->image;
            v->rollout_query = -1;
        }
        free(idx);
        if (rc != AS_OK) return rc;
    }
    if (v->rollout_query != v->query) {
        if (!v->rollout_rows) v->rollout_rows = malloc((size_t)(L + 3) * T * sizeof *v->rollout_rows);
        if (!v->rollout_rows) return as_fail(err, AS_ERR_NOMEM, "out of memory");
        double *e = v->rollout_rows + (size_t)L * T, *u = e + T, *w = u + T;
        for (int i = 0; i < T; i++) e[i] = i == v->query;
        analysis_rollout_rows(v->rollout_rows, v->rollout, e, L, T, u, w);
        v->rollout_query = v->query;
    }
    return AS_OK;
}

/* The query's whole row that the overlay shows the patch keys of: row `query` of a map (cols
 * keys, prefix tokens first), or the rollout row through layer li (T keys); *cols receives its
 * length. row holds at least T values. */
static as_status row_values(view *v, int ds, int li, int hi, double *row, int *cols, as_error *err) {
    const trace_reader *r = &v->src.tr;
    int T = r->num_tokens;
    if (rollout_drawn(v)) {
        if (ensure_rollout(v, err) != AS_OK) return err->status;
        for (int j = 0; j < T; j++) row[j] = v->rollout_rows[(size_t)li * T + j];
        *cols = T;
        return AS_OK;
    }
    if (!has_map(v, li, ds)) return as_fail(err, AS_ERR_ARG, "layer %d has no %s", r->layers[li], map_names[ds]);
    const float *A = map_get(v, ds, v->image, li, hi, err);
    if (!A) return err->status;
    int n = v->dims[li][ds][2];
    for (int j = 0; j < n && j < T; j++) row[j] = A[(size_t)v->query * n + j];
    *cols = n < T ? n : T;
    return AS_OK;
}

/* The map block of the problem that holds the query in layer li: its window's (rows, keys) in
 * a window layer, else the whole map; *pl receives the query's place (staged traces). */
static const float *problem_map(view *v, int ds, int li, int hi, view_place *pl, as_error *err) {
    view_place q = query_place(v, li);
    if (v->staged) {
        if (q.pos < 0) {
            as_fail(err, AS_ERR_ARG, "layer %d: window %d, which holds the query, was not recorded "
                    "(record --windows all; ',' and '.' step to recorded windows)", v->src.tr.layers[li], q.w);
            return NULL;
        }
    }
    if (pl) *pl = q;
    const float *A = map_get(v, ds, v->image, li, hi, err);
    return A ? A + (size_t)q.pos * v->dims[li][ds][1] * v->dims[li][ds][2] : NULL;
}

/* Staged: the query's row of layer li scattered over the layer's gh x gw tokens through its
 * window's token table: vals (0 outside the window: exactly the weight there), state (NULL, or
 * VIEW_KEY_* per token), and the row's scale over every key of the row (pad keys count in the
 * distribution but have no place on the image: they are not shown). */
static as_status staged_values(view *v, int ds, int li, int hi, double *vals, double *state, mapscale *ms,
                               as_error *err) {
    const trace_layer_geom *g = geom_of(v, li);
    if (rollout_drawn(v)) { /* the rollout through layer li over layer 0's grid */
        if (ensure_rollout(v, err) != AS_OK) return err->status;
        const int n = geom_of(v, 0)->gh * geom_of(v, 0)->gw;
        for (int i = 0; i < n; i++) {
            vals[i] = v->sroll_rows[(size_t)li * n + i];
            if (state) state[i] = VIEW_KEY_IN;
        }
        mapscale_make(ms, vals, 1, n, 0, 0, v->range);
        return AS_OK;
    }
    if (classrow(v, li)) { /* the class row over its patches; cls's own share in the scale's note */
        const int T = v->dims[li][ds][2], p = g->prefix;
        const float *A = problem_map(v, ds, li, hi, NULL, err);
        if (!A) return err->status;
        double *row = malloc((size_t)T * sizeof *row);
        if (!row) return as_fail(err, AS_ERR_NOMEM, "out of memory");
        for (int j = 0; j < T; j++) row[j] = A[j];
        for (int i = 0; i < g->gh * g->gw; i++) {
            vals[i] = row[p + i];
            if (state) state[i] = VIEW_KEY_IN;
        }
        mapscale_make(ms, row, 1, T, p, p, v->range);
        mapscale_name_prefix(ms, row, 1, T, 1, 0, 0);
        free(row);
        return AS_OK;
    }
    if (reduced(v, li)) { /* the query token's row over the reduced keys, one value per key cell */
        const int K = v->dims[li][ds][2];
        view_place q;
        const float *A = problem_map(v, ds, li, hi, &q, err);
        if (!A) return err->status;
        for (int j = 0; j < K; j++) {
            vals[j] = A[(size_t)q.row * K + j];
            if (state) state[j] = VIEW_KEY_IN;
        }
        mapscale_make(ms, vals, 1, K, 0, 0, v->range);
        return AS_OK;
    }
    int n = g->gh * g->gw, R = v->dims[li][ds][1], K = v->dims[li][ds][2];
    for (int i = 0; i < n; i++) {
        vals[i] = 0;
        if (state) state[i] = VIEW_KEY_OUTSIDE;
    }
    view_place q;
    const float *A = problem_map(v, ds, li, hi, &q, err);
    if (!A) return err->status;
    const float *row = A + (size_t)q.row * K;
    const int *keys = v->wtok[li] + (size_t)q.w * R; /* a window's keys are its rows' tokens */
    const unsigned char *mk = v->wmask[li] ? v->wmask[li] + ((size_t)q.w * R + q.row) * R : NULL;
    double *ord = malloc((size_t)K * sizeof *ord);
    if (!ord) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    int np = 0; /* the row with its pad keys first: the scale's shown values start after them */
    for (int j = 0; j < K; j++)
        if (keys[j] < 0) ord[np++] = row[j];
    for (int j = 0, k = np; j < K; j++)
        if (keys[j] >= 0) {
            ord[k++] = row[j];
            vals[keys[j]] = row[j];
            if (state) state[keys[j]] = mk && mk[j] ? VIEW_KEY_MASKED : VIEW_KEY_IN;
        }
    mapscale_make(ms, ord, 1, K, 0, np, v->range);
    if (g->attn_signed && ds == 0) mapscale_not_probability(ms); /* talking heads: signed by construction */
    free(ord);
    return AS_OK;
}

/* Values drawn over the image per token: the g x g patches of a single-grid trace, the gh x gw
 * grid of a staged layer. */
static void overlay_dims(const view *v, int li, int *rows, int *cols);
static int overlay_cells(const view *v, int li) {
    int r, c;
    overlay_dims(v, li, &r, &c);
    return r * c;
}

/* The cells of an image panel of layer li: the g x g patches, a staged layer's gh x gw tokens,
 * or a spatial-reduction layer's kgh x kgw keys. */
static void overlay_dims(const view *v, int li, int *rows, int *cols) {
    if (v->staged && rollout_drawn(v)) { /* rollout lands on layer 0's token grid */
        *rows = geom_of(v, 0)->gh;
        *cols = geom_of(v, 0)->gw;
        return;
    }
    const trace_layer_geom *g = v->staged ? geom_of(v, li) : NULL;
    *rows = !g ? grid_of(v) : reduced(v, li) ? g->kgh : g->gh;
    *cols = !g ? grid_of(v) : reduced(v, li) ? g->kgw : g->gw;
}

/* The values drawn over the image (the row's last P keys) and the row's scale. */
static as_status patch_values(view *v, int ds, int li, int hi, double *out, mapscale *ms, as_error *err) {
    if (v->staged) return staged_values(v, ds, li, hi, out, NULL, ms, err);
    int P = vit_num_patches(&v->src.tr.cfg), cols = 0;
    double row[4096 + 8];
    if (v->src.tr.num_tokens > 4096 + 8) return as_fail(err, AS_ERR_UNSUPPORTED, "grid too large to draw");
    if (row_values(v, ds, li, hi, row, &cols, err) != AS_OK) return err->status;
    memcpy(out, row + (cols - P), (size_t)P * sizeof *out);
    mapscale_make(ms, row, 1, cols, cols - P, cols - P, v->range);
    const vit_config *c = &v->src.tr.cfg; /* the prefix tokens by name: cls, dist, registers */
    mapscale_name_prefix(ms, row, 1, cols, c->class_token, c->distilled, c->reg_tokens);
    return AS_OK;
}

/* The colour range of a panel: the map's scale (mapscale.h), or log10 over four decades below
 * the maximum. */
typedef struct { double lo, hi; int log; double floor; mapscale ms; } vscale; /* floor = 10^lo when log */

static vscale scale_make(view *v, const mapscale *ms) {
    vscale s = {ms->lo, ms->hi, 0, 0, *ms};
    if (v->log_scale) {
        if (ms->max > 0 && ms->min >= 0) {
            double floor_ = fmax(ms->min, ms->hi * 1e-4);
            s.lo = log10(floor_);
            s.hi = log10(ms->hi);
            s.log = 1;
            s.floor = pow(10, s.lo);
        } else if (ms->min < 0) {
            note(v, "log scale needs non-negative values (these maps reach %.3g): showing linear", ms->min);
        } else {
            note(v, "log scale: every value shown is 0: showing linear");
        }
    }
    if (!(s.hi > s.lo)) s.hi = s.lo + 1e-9;
    return s;
}

static double scale_apply(vscale s, double x) { return s.log ? log10(fmax(x, s.floor)) : x; }

/* ---- drawing ------------------------------------------------------------------------------------ */

#define TITLE_Y 11.5
#define BAR_H 16.0
#define TOP 24.0

static double *frame_alloc(view *v, size_t n) {
    if (v->n_panels >= VIEW_MAX_PANELS) return NULL;
    double *m = realloc(v->panel_mem[v->n_panels], (n ? n : 1) * sizeof *m);
    if (m) v->panel_mem[v->n_panels] = m;
    return m;
}

/* Registers the next panel; its values live in panel_mem[index] (frame_alloc'ed before). */
static view_panel *panel_add(view *v, view_panel_kind k, double x, double y, double w, double h,
                             int rows, int cols, int li, int head, int ds, vscale s) {
    if (v->n_panels >= VIEW_MAX_PANELS) return NULL;
    view_panel *p = &v->panels[v->n_panels];
    *p = (view_panel){k, x, y, w, h, rows, cols, li >= 0 ? v->src.tr.layers[li] : -1, head, ds,
                      v->query, s.lo, s.hi, v->panel_mem[v->n_panels], s.ms, 0, 0, 0, -1, NULL, NULL, 0};
    v->n_panels++;
    return p;
}

/* Staged: makes image panel p (values then key states, gh x gw each) lie over the image at
 * layer li's geometry. */
static void panel_staged(view *v, view_panel *p, int li) {
    if (!p || !v->staged) return;
    if (rollout_drawn(v)) li = 0; /* rollout lands on layer 0's token grid */
    const trace_layer_geom *g = geom_of(v, li);
    p->stride_px = g->stride_px;
    p->offset_px = g->offset_px;
    p->img = v->src.tr.cfg.img_size;
    p->query = classrow(v, li) ? -1 : staged_token(v, li); /* the class token has no cell */
    p->window = windowed(v, li) && !rollout_drawn(v) ? place_of(v, li, p->query).w : -1;
    p->key_state = p->values + (size_t)p->rows * p->cols;
    p->qcols = g->gw;
    if (reduced(v, li) && !rollout_drawn(v)) { /* the key cells' pixel spans after the states (overlay_values) */
        double *sp = (double *)(uintptr_t)(p->key_state + (size_t)p->rows * p->cols);
        for (int r = 0; r < g->kgh; r++) keymap_key_span(g, g->gh, r, p->img, &sp[r], &sp[g->kgh + r]);
        for (int c = 0; c < g->kgw; c++)
            keymap_key_span(g, g->gw, c, p->img, &sp[2 * g->kgh + c], &sp[2 * g->kgh + g->kgw + c]);
        p->kspan = sp;
    }
}

/* A colour bar right of a; what NULL: ticks only (small multiples, one bar per panel). */
static void colorbar_add(view *v, plot_figure *f, const plot_axes *a, vscale s, const char *what) {
    char label[64] = "";
    if (what) snprintf(label, sizeof label, "%s%s", s.log ? "log10 " : "", what);
    /* mapscale's bar over the range drawn, the uniform level 1/T where the scale puts it */
    mapscale m = s.ms;
    m.lo = s.lo;
    m.hi = s.hi;
    m.uniform = scale_apply(s, s.ms.uniform);
    mapscale_colorbar(f, a, &m, v->cmap, what ? label : NULL);
    if (v->n_cbars < 8) {
        view_colorbar *c = &v->cbars[v->n_cbars++];
        c->lo = s.lo;
        c->hi = s.hi;
        snprintf(c->label, sizeof c->label, "%s", label);
    }
}

/* The rectangle (plot points) of cell (r, c) of panel p. */
static void cell_rect(const view_panel *p, int r, int c, double *x, double *y, double *w, double *h) {
    if (p->kspan) { /* a reduced key: the pixels of the tokens it reduces */
        const double k = p->w / p->img, *sp = p->kspan;
        *x = p->x + sp[2 * p->rows + c] * k;
        *y = p->y + sp[r] * k;
        *w = (sp[2 * p->rows + p->cols + c] - sp[2 * p->rows + c]) * k;
        *h = (sp[p->rows + r] - sp[r]) * k;
        return;
    }
    if (p->stride_px > 0) {
        double k = p->w / p->img, y0, y1, x0, x1;
        keymap_cell_span(p->offset_px, p->stride_px, r, p->img, &y0, &y1);
        keymap_cell_span(p->offset_px, p->stride_px, c, p->img, &x0, &x1);
        *x = p->x + x0 * k;
        *y = p->y + y0 * k;
        *w = (x1 - x0) * k;
        *h = (y1 - y0) * k;
        return;
    }
    *w = p->w / p->cols;
    *h = p->h / p->rows;
    *x = p->x + *w * c;
    *y = p->y + *h * r;
}

void view_panel_cell_centre(const view_panel *p, int r, int c, double *x, double *y) {
    double cx, cy, cw, ch;
    cell_rect(p, r, c, &cx, &cy, &cw, &ch);
    *x = cx + cw / 2;
    *y = cy + ch / 2;
}

/* Diagonal hatching over the axes' box, in grey level `grey` (clipped by the caller): what the
 * staged views draw over cells that are exactly 0 by construction (outside the window, pads). */
static void hatch(cairo_t *cr, plot_axes a, double grey, double alpha, double lw, double step) {
    cairo_set_source_rgba(cr, grey, grey, grey, alpha);
    cairo_set_line_width(cr, lw);
    for (double u = -a.h; u < a.w; u += step) {
        cairo_move_to(cr, a.x + u, a.y + a.h);
        cairo_line_to(cr, a.x + u + a.h, a.y);
    }
    cairo_stroke(cr);
}

static void outline(cairo_t *cr, double x, double y, double w, double h, double r, double g,
                    double b, double lw) {
    cairo_set_source_rgb(cr, r, g, b);
    cairo_set_line_width(cr, lw);
    cairo_rectangle(cr, x, y, w, h);
    cairo_stroke(cr);
}

/* A white frame round the hovered cell, when the pointer is over panel i. */
static void outline_hover(const view *v, plot_figure *f, int i, double lw) {
    if (v->hover_panel != i || v->hover_row < 0) return;
    double x, y, w, h;
    cell_rect(&v->panels[i], v->hover_row, v->hover_col, &x, &y, &w, &h);
    outline(plot_cairo(f), x, y, w, h, 1, 1, 1, lw);
}

/* A staged image panel: the image; the query's window in colour (tokens outside it hatched and
 * washed out: their weight is exactly 0, not low); masked keys (the shift mask's -100) crossed;
 * the token grid at the layer's stride; the window's outline (a shifted window: up to 4 wrapped
 * pieces) and the query's cell. */
static void paint_staged(view *v, plot_figure *f, int i, vscale s) {
    const view_panel *pn = &v->panels[i];
    cairo_t *cr = plot_cairo(f);
    plot_axes a = {.x = pn->x, .y = pn->y, .w = pn->w, .h = pn->h};
    plot_image(f, &a, v->rgb, v->rgb_size, v->rgb_size);
    const int R = pn->rows, C = pn->cols;
    const double *st = pn->key_state, k = pn->w / pn->img;
    cairo_surface_t *cells = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, C, R);
    if (cairo_surface_status(cells) == CAIRO_STATUS_SUCCESS) {
        unsigned char *d = cairo_image_surface_get_data(cells);
        int stride = cairo_image_surface_get_stride(cells);
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) {
                uint32_t px = 0;
                if (st[r * C + c] != VIEW_KEY_OUTSIDE) {
                    double t = (scale_apply(s, pn->values[r * C + c]) - s.lo) / (s.hi - s.lo);
                    plot_color col = plot_cmap_color(v->cmap, fmin(1, fmax(0, t)));
                    px = 0xff000000u | (uint32_t)lrint(col.r * 255) << 16 | (uint32_t)lrint(col.g * 255) << 8 |
                         (uint32_t)lrint(col.b * 255);
                }
                memcpy(d + (size_t)r * stride + 4 * (size_t)c, &px, 4);
            }
        cairo_surface_mark_dirty(cells);
        cairo_save(cr);
        cairo_rectangle(cr, a.x, a.y, a.w, a.h);
        cairo_clip(cr);
        /* cell (r, c) spans pixels offset + stride * (c - 1/2) ..: one surface pixel per token */
        cairo_translate(cr, a.x + (pn->offset_px - pn->stride_px / 2) * k, a.y + (pn->offset_px - pn->stride_px / 2) * k);
        cairo_scale(cr, pn->stride_px * k, pn->stride_px * k);
        cairo_set_source_surface(cr, cells, 0, 0);
        cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
        cairo_paint_with_alpha(cr, v->opacity);
        cairo_restore(cr);
    }
    cairo_surface_destroy(cells);
    /* outside the window: washed out and hatched */
    double x, y, w, h;
    cairo_save(cr);
    cairo_new_path(cr);
    int outside = 0;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            if (st[r * C + c] == VIEW_KEY_OUTSIDE) {
                cell_rect(pn, r, c, &x, &y, &w, &h);
                cairo_rectangle(cr, x, y, w, h);
                outside = 1;
            }
    if (outside) {
        cairo_clip(cr);
        cairo_set_source_rgba(cr, 1, 1, 1, 0.45);
        cairo_paint(cr);
        hatch(cr, a, 0.35, 0.7, 0.35, 3.2);
    }
    cairo_restore(cr);
    /* the token grid at the layer's stride */
    cairo_set_source_rgba(cr, 1, 1, 1, 0.35);
    cairo_set_line_width(cr, 0.25);
    for (int c = 1; c < C; c++) {
        double p = pn->offset_px + pn->stride_px * (c - 0.5);
        if (p <= 0 || p >= pn->img) continue;
        cairo_move_to(cr, a.x + p * k, a.y);
        cairo_line_to(cr, a.x + p * k, a.y + a.h);
    }
    for (int r = 1; r < R; r++) {
        double p = pn->offset_px + pn->stride_px * (r - 0.5);
        if (p <= 0 || p >= pn->img) continue;
        cairo_move_to(cr, a.x, a.y + p * k);
        cairo_line_to(cr, a.x + a.w, a.y + p * k);
    }
    cairo_stroke(cr);
    /* masked keys: a cross */
    cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
    cairo_set_line_width(cr, 0.4);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            if (st[r * C + c] == VIEW_KEY_MASKED) {
                cell_rect(pn, r, c, &x, &y, &w, &h);
                double m = 0.3 * fmin(w, h);
                cairo_move_to(cr, x + w / 2 - m, y + h / 2 - m);
                cairo_line_to(cr, x + w / 2 + m, y + h / 2 + m);
                cairo_move_to(cr, x + w / 2 + m, y + h / 2 - m);
                cairo_line_to(cr, x + w / 2 - m, y + h / 2 + m);
            }
    cairo_stroke(cr);
    /* the window's outline: every edge between a token in it and one outside it (or the grid's
     * edge), so the wrapped pieces of a shifted window are outlined each */
    if (pn->window >= 0) {
        cairo_set_source_rgb(cr, 1, 0.6, 0.05);
        cairo_set_line_width(cr, 1.1);
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) {
                if (st[r * C + c] == VIEW_KEY_OUTSIDE) continue;
                cell_rect(pn, r, c, &x, &y, &w, &h);
                if (w <= 0 || h <= 0) continue;
                if (r == 0 || st[(r - 1) * C + c] == VIEW_KEY_OUTSIDE) {
                    cairo_move_to(cr, x, y);
                    cairo_line_to(cr, x + w, y);
                }
                if (r == R - 1 || st[(r + 1) * C + c] == VIEW_KEY_OUTSIDE) {
                    cairo_move_to(cr, x, y + h);
                    cairo_line_to(cr, x + w, y + h);
                }
                if (c == 0 || st[r * C + c - 1] == VIEW_KEY_OUTSIDE) {
                    cairo_move_to(cr, x, y);
                    cairo_line_to(cr, x, y + h);
                }
                if (c == C - 1 || st[r * C + c + 1] == VIEW_KEY_OUTSIDE) {
                    cairo_move_to(cr, x + w, y);
                    cairo_line_to(cr, x + w, y + h);
                }
            }
        cairo_stroke(cr);
    }
    if (pn->query < 0) return; /* a class row: no query cell */
    cell_rect(pn, pn->query / C, pn->query % C, &x, &y, &w, &h);
    outline(cr, x, y, w, h, 1, 0.15, 0.1, 1.0);
}

/* A spatial-reduction layer's panel: each reduced key's weight over its cell (key_span: a conv
 * key over the tokens it reduces, a pooled key over its seventh of the grid), the key cells'
 * edges, and the query token's cell on the query grid. */
static void paint_reduced(view *v, plot_figure *f, int i, vscale s) {
    const view_panel *pn = &v->panels[i];
    cairo_t *cr = plot_cairo(f);
    plot_axes a = {.x = pn->x, .y = pn->y, .w = pn->w, .h = pn->h};
    plot_image(f, &a, v->rgb, v->rgb_size, v->rgb_size);
    double x, y, w, h;
    cairo_save(cr);
    cairo_rectangle(cr, a.x, a.y, a.w, a.h);
    cairo_clip(cr);
    for (int r = 0; r < pn->rows; r++)
        for (int c = 0; c < pn->cols; c++) {
            double t = (scale_apply(s, pn->values[r * pn->cols + c]) - s.lo) / (s.hi - s.lo);
            plot_color col = plot_cmap_color(v->cmap, fmin(1, fmax(0, t)));
            cell_rect(pn, r, c, &x, &y, &w, &h);
            cairo_rectangle(cr, x, y, w, h);
            cairo_set_source_rgba(cr, col.r, col.g, col.b, v->opacity);
            cairo_fill(cr);
        }
    cairo_set_source_rgba(cr, 1, 1, 1, 0.45);
    cairo_set_line_width(cr, 0.3);
    for (int r = 0; r < pn->rows; r++)
        for (int c = 0; c < pn->cols; c++) {
            cell_rect(pn, r, c, &x, &y, &w, &h);
            cairo_rectangle(cr, x, y, w, h);
        }
    cairo_stroke(cr);
    cairo_restore(cr);
    double y0, y1, x0, x1, k = pn->w / pn->img;
    keymap_cell_span(pn->offset_px, pn->stride_px, pn->query / pn->qcols, pn->img, &y0, &y1);
    keymap_cell_span(pn->offset_px, pn->stride_px, pn->query % pn->qcols, pn->img, &x0, &x1);
    outline(cr, a.x + x0 * k, a.y + y0 * k, (x1 - x0) * k, (y1 - y0) * k, 1, 0.15, 0.1, 1.0);
}

/* Panel i (an image panel): the image, its values scaled by s over it, the patch grid with
 * the query's patch. */
static void paint_overlay(view *v, plot_figure *f, int i, vscale s) {
    const view_panel *pn = &v->panels[i];
    if (pn->kspan) {
        paint_reduced(v, f, i, s);
        return;
    }
    if (pn->stride_px > 0) {
        paint_staged(v, f, i, s);
        return;
    }
    int g = grid_of(v), p = prefix_of(v);
    double tv[4096];
    for (int j = 0; j < g * g && j < 4096; j++) tv[j] = scale_apply(s, pn->values[j]);
    plot_axes a = {.x = pn->x, .y = pn->y, .w = pn->w, .h = pn->h};
    plot_image(f, &a, v->rgb, v->rgb_size, v->rgb_size);
    plot_overlay(f, &a, tv, g, s.lo, s.hi, v->cmap, v->opacity);
    plot_patch_grid(f, &a, g, v->query >= p ? v->query - p : -1);
}

static const char *overlay_label(const view *v, int ds) {
    return rollout_drawn(v) ? "rollout weight" : map_names[ds];
}

/* The image with the next panel's values (frame_alloc'ed, g x g, raw) over it. */
static void draw_image_panel(view *v, plot_figure *f, double x, double y, double side, int li,
                             int head, int ds, vscale s, const char *title, int cbar) {
    int gh, gw;
    overlay_dims(v, li, &gh, &gw);
    view_panel *p = panel_add(v, VIEW_PANEL_IMAGE, x, y, side, side, gh, gw, li, head, ds, s);
    if (!p) return;
    panel_staged(v, p, li);
    paint_overlay(v, f, v->n_panels - 1, s);
    outline_hover(v, f, v->n_panels - 1, 0.8);
    if (title) plot_text(f, x + side / 2, y - 3, 6.5, 0.5, title);
    plot_axes a = {.x = x, .y = y, .w = side, .h = side};
    if (cbar) colorbar_add(v, f, &a, s, overlay_label(v, ds));
    double used = mapscale_note(f, x, y + side + 2, side, 6.5, &s.ms);
    if (v->staged && rollout_drawn(v)) {
        const trace_layer_geom *g0 = geom_of(v, 0), *g = geom_of(v, li);
        char t[200];
        if (classrow(v, li))
            snprintf(t, sizeof t, "from the class token down to layer %d's %d x %d grid", v->src.tr.layers[0], g0->gh, g0->gw);
        else
            snprintf(t, sizeof t, "from token (%d, %d) of the %d x %d grid down to layer %d's %d x %d grid",
                     staged_token(v, li) / g->gw, staged_token(v, li) % g->gw, g->gh, g->gw, v->src.tr.layers[0],
                     g0->gh, g0->gw);
        plot_text_fit(f, x, y + side + 2 + used + 6, 6, 0, side, t);
    } else if (v->staged && s.ms.probability) { /* what the image cannot show: the pad keys' share */
        const trace_layer_geom *g = geom_of(v, li);
        double on = 0, pad = 0;
        for (int i = 0; i < gh * gw; i++) on += p->values[i];
        int npad = 0, R = table_rows(v, li);
        view_place q = place_of(v, li, p->query);
        for (int j = 0; q.w >= 0 && j < R; j++) npad += v->wtok[li][(size_t)q.w * R + j] < 0;
        pad = fmax(0, 1 - on);
        int masked = 0;
        for (int i = 0; i < gh * gw; i++) masked += p->key_state[i] == VIEW_KEY_MASKED;
        char t[160];
        if (classrow(v, li))
            snprintf(t, sizeof t, "the class token's row over the %d x %d patches (class attention)", g->gh, g->gw);
        else if (reduced(v, li) && g->sr_pool)
            snprintf(t, sizeof t, "token (%d, %d) over %d x %d keys pooled from the %d x %d grid",
                     p->query / g->gw, p->query % g->gw, g->kgh, g->kgw, g->gh, g->gw);
        else if (reduced(v, li))
            snprintf(t, sizeof t, "token (%d, %d) over %d x %d keys, each %d x %d tokens (R %d)",
                     p->query / g->gw, p->query % g->gw, g->kgh, g->kgw, g->sr_ratio, g->sr_ratio, g->sr_ratio);
        else if (windowed(v, li))
            snprintf(t, sizeof t, "window %d of %d%s: outside it exactly 0 (hatched)%s", q.w, g->nwh * g->nww,
                     g->shift ? ", shifted" : "", masked ? "; masked keys \xc3\x97" : "");
        else
            snprintf(t, sizeof t, "global attention over the %d x %d grid", g->gh, g->gw);
        plot_text_fit(f, x, y + side + 2 + used + 6, 6, 0, side, t);
        if (npad > 0) {
            snprintf(t, sizeof t, "pad keys %.1f%% (%d pad slots, not on the image)", 100 * pad, npad);
            plot_text_fit(f, x, y + side + 2 + used + 13, 6, 0, side, t);
        }
    }
    if (v->staged && !rollout_drawn(v) && geom_of(v, li)->attn_signed && ds == 0) /* CaiT's talking heads */
        plot_text_fit(f, x, y + side + 2 + used + 6, 6, 0, side, "signed: heads mixed after the softmax (talking "
                      "heads); Tab: attn_softmax");
}

/* One head's full map (Q x T) with the query row outlined. */
static void draw_map_panel(view *v, plot_figure *f, plot_axes a, int li, int hi, int ds,
                           const float *A, vscale s, const char *title, int cbar) {
    int rollout = v->row == VIEW_ROW_ROLLOUT;
    int Q = rollout ? v->src.tr.num_tokens : v->dims[li][ds][1];
    int T = rollout ? v->src.tr.num_tokens : v->dims[li][ds][2];
    size_t n = (size_t)Q * T;
    double *vals = frame_alloc(v, n), *tv = malloc(n * sizeof *tv);
    if (!vals || !tv) {
        free(tv);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        vals[i] = A[i];
        tv[i] = scale_apply(s, A[i]);
    }
    plot_axes_range(&a, -0.5, T - 0.5, -0.5, Q - 0.5);
    a.ydown = 1;
    if (Q <= 8) { /* prefix rows only: one tick per token */
        a.ycat = 1;
        a.ystep = 1;
    }
    view_place q = query_place(v, li);
    int win = windowed(v, li), M = win ? geom_of(v, li)->M : 0;
    char lab[64][8];
    const char *labels[4096];
    if (win && T <= 4096 && M <= 64) { /* ticks at the start of each window row: y0, y1, ... */
        for (int j = 0; j < T; j++) labels[j] = j % M ? "" : lab[j / M];
        for (int y = 0; y < M; y++) snprintf(lab[y], sizeof lab[y], "y%d", y);
        a.xcat = a.ycat = 1;
        a.xstep = a.ystep = M;
        a.xlabels = a.ylabels = labels;
    }
    view_panel *pn = panel_add(v, VIEW_PANEL_MAP, a.x, a.y, a.w, a.h, Q, T, li, head_id(v, ds, hi), ds, s);
    if (pn) pn->window = q.w;
    plot_heatmap(f, &a, tv, Q, T, s.lo, s.hi, v->cmap);
    free(tv);
    char xl[96], yl[96];
    if (win) {
        snprintf(xl, sizeof xl, "key: row of window %d (yN: window row N, %d tokens each)", q.w, M);
        snprintf(yl, sizeof yl, "query: row of window %d", q.w);
    } else if (classrow(v, li)) {
        snprintf(xl, sizeof xl, "key token: cls, then patch y * %d + x", geom_of(v, li)->gw);
        snprintf(yl, sizeof yl, "class token");
    } else if (reduced(v, li)) {
        const trace_layer_geom *g = geom_of(v, li);
        snprintf(xl, sizeof xl, "reduced key (y * %d + x) of %d x %d", g->kgw, g->kgh, g->kgw);
        snprintf(yl, sizeof yl, "query token (y * %d + x)", g->gw);
    } else if (v->staged) {
        snprintf(xl, sizeof xl, "key token (y * %d + x)", geom_of(v, li)->gw);
        snprintf(yl, sizeof yl, "query token");
    }
    plot_axes_draw(f, &a, title, v->staged ? xl : "key token", v->staged ? yl : "query token");
    cairo_t *cr = plot_cairo(f);
    if (win && q.w >= 0) { /* pad rows and keys hatched; keys behind the shift mask dotted */
        const int *tok = v->wtok[li] + (size_t)q.w * Q;
        const unsigned char *mk = v->wmask[li] ? v->wmask[li] + (size_t)q.w * Q * T : NULL;
        double cw = a.w / T, ch = a.h / Q;
        cairo_save(cr);
        cairo_new_path(cr);
        int pads = 0;
        for (int j = 0; j < T; j++)
            if (tok[j] < 0) {
                cairo_rectangle(cr, a.x + cw * j, a.y, cw, a.h);
                cairo_rectangle(cr, a.x, a.y + ch * j, a.w, ch);
                pads = 1;
            }
        if (pads) {
            cairo_set_fill_rule(cr, CAIRO_FILL_RULE_WINDING);
            cairo_clip(cr);
            hatch(cr, a, 1.0, 0.6, 0.3, 2.5);
        }
        cairo_restore(cr);
        if (mk && fmin(cw, ch) >= 1.2) {
            cairo_set_source_rgba(cr, 1, 1, 1, 0.75);
            for (int i = 0; i < Q; i++)
                for (int j = 0; j < T; j++)
                    if (mk[(size_t)i * T + j]) {
                        cairo_arc(cr, a.x + cw * (j + 0.5), a.y + ch * (i + 0.5), fmin(cw, ch) * 0.14, 0, 6.283185307179586);
                        cairo_close_path(cr);
                    }
            cairo_fill(cr);
        }
    }
    int p = v->staged ? geom_of(v, li)->prefix : prefix_of(v);
    if (p > 0 && p < T) { /* prefix | patches */
        cairo_set_source_rgba(cr, 1, 1, 1, 0.7);
        cairo_set_line_width(cr, 0.4);
        cairo_move_to(cr, plot_x(&a, p - 0.5), a.y);
        cairo_line_to(cr, plot_x(&a, p - 0.5), a.y + a.h);
        if (Q == T) {
            cairo_move_to(cr, a.x, plot_y(&a, p - 0.5));
            cairo_line_to(cr, a.x + a.w, plot_y(&a, p - 0.5));
        }
        cairo_stroke(cr);
    }
    if (q.row >= 0 && q.row < Q) {
        double y0 = plot_y(&a, q.row - 0.5), y1 = plot_y(&a, q.row + 0.5);
        outline(cr, a.x - 1, y0, a.w + 2, y1 - y0, 1, 0.15, 0.1, 0.9);
    }
    outline_hover(v, f, v->n_panels - 1, 0.6);
    if (cbar) { /* a few rows (prefix rows only) still get a readable colour bar */
        plot_axes cb = a;
        cb.h = fmax(a.h, 100);
        colorbar_add(v, f, &cb, s, rollout ? "rollout factor" : map_names[ds]);
    }
}

static void query_name(const view *v, int q, char *buf, size_t n) {
    int p = prefix_of(v), g = grid_of(v);
    if (classrow(v, v->li)) snprintf(buf, n, "class token (class attention)");
    else if (v->staged) snprintf(buf, n, "token (%d, %d)", q / geom_of(v, v->li)->gw, q % geom_of(v, v->li)->gw);
    else if (q < p) vit_prefix_label(&v->src.tr.cfg, q, buf, n); /* class, distillation, register k */
    else snprintf(buf, n, "patch (%d, %d)", (q - p) / g, (q - p) % g);
}

/* Fills a panel's values for (ds, li, hi) and their scale. */
static double *overlay_values(view *v, int ds, int li, int hi, mapscale *ms, as_error *err) {
    size_t n = (size_t)overlay_cells(v, li);
    const trace_layer_geom *g = v->staged ? geom_of(v, li) : NULL;
    /* staged: the key states after the values; reduced keys: then their pixel spans */
    size_t spans = g && reduced(v, li) && !rollout_drawn(v) ? 2 * (size_t)(g->kgh + g->kgw) : 0;
    double *vals = frame_alloc(v, v->staged ? 2 * n + spans : n);
    if (!vals) {
        as_fail(err, AS_ERR_NOMEM, "too many panels");
        return NULL;
    }
    as_status rc = v->staged ? staged_values(v, ds, li, hi, vals, vals + n, ms, err)
                             : patch_values(v, ds, li, hi, vals, ms, err);
    return rc == AS_OK ? vals : NULL;
}

/* The global scale: ms widened over every head of the layer (or every layer's rollout) for
 * this query. */
static as_status global_patch_scale(view *v, int ds, int li, mapscale *ms, as_error *err) {
    mapscale o;
    int rollout = rollout_drawn(v);
    int n = rollout ? v->src.tr.n_layers : n_heads(v, li, ds);
    double *tmp = malloc((size_t)overlay_cells(v, li) * sizeof *tmp);
    if (!tmp) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    for (int k = 0; k < n; k++) {
        if (patch_values(v, ds, rollout ? k : li, rollout ? 0 : k, tmp, &o, err) != AS_OK) {
            free(tmp);
            return err->status;
        }
        mapscale_widen(ms, &o);
    }
    free(tmp);
    return AS_OK;
}

/* The scale of a whole Q x T map (every row's keys shown). */
static as_status map_scale(view *v, const float *A, int Q, int T, mapscale *ms, as_error *err) {
    int P = v->staged ? T : vit_num_patches(&v->src.tr.cfg);
    size_t n = (size_t)Q * T;
    double *m = malloc((n ? n : 1) * sizeof *m);
    if (!m) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) m[i] = A[i];
    mapscale_make(ms, m, Q, T, T > P ? T - P : 0, 0, v->range);
    if (!v->staged) {
        const vit_config *c = &v->src.tr.cfg;
        mapscale_name_prefix(ms, m, Q, T, c->class_token, c->distilled, c->reg_tokens);
    }
    free(m);
    return AS_OK;
}

static as_status global_map_scale(view *v, int ds, int li, mapscale *ms, as_error *err) {
    mapscale o;
    for (int k = 0; k < n_heads(v, li, ds); k++) {
        const float *A = problem_map(v, ds, li, k, NULL, err);
        if (!A || map_scale(v, A, v->dims[li][ds][1], v->dims[li][ds][2], &o, err) != AS_OK) return err->status;
        mapscale_widen(ms, &o);
    }
    return AS_OK;
}

/* ", peak 12.4 x 1/T" for a probability map, else "". */
static void peak_text(const mapscale *ms, char *buf, size_t n) {
    if (ms->probability) snprintf(buf, n, ", peak %.3g \xc3\x97 1/T", ms->ratio);
    else buf[0] = 0;
}

/* image overlay + full map for (li, hi) at column x0 of width w. */
static as_status draw_query_column(view *v, plot_figure *f, double x0, double w, double top,
                                   double bottom, int li, int two_rows, as_error *err) {
    int ds = v->ds, hi = v->hi;
    double avail = bottom - top - 14;
    /* single row: room under the image for the prefix share and the peak (mapscale_note) */
    double side = two_rows ? fmin(w - 60, (avail - 40) * 0.5) : fmin(avail - 16, (w - 210) / 2);
    if (side < 20) side = 20;
    mapscale ms;
    double *vals = overlay_values(v, ds, li, hi, &ms, err);
    if (!vals) return err->status;
    if (v->norm == VIEW_NORM_GLOBAL && global_patch_scale(v, ds, li, &ms, err) != AS_OK) return err->status;
    char q[48], title[160];
    query_name(v, v->query, q, sizeof q);
    int head = view_head(v);
    if (v->row == VIEW_ROW_ROLLOUT) snprintf(title, sizeof title, "rollout from the %s through layer %d", q, v->src.tr.layers[li]);
    else snprintf(title, sizeof title, "layer %d, %s %d: %s", v->src.tr.layers[li], head_word(ds), head, q);
    draw_image_panel(v, f, x0 + 4, top + 12, side, li, head, ds, scale_make(v, &ms), title, 1);
    /* the full map: the head's, or in rollout mode the layer's head-mean map plus identity,
     * the factor rollout multiplies at this layer */
    int rollout = v->row == VIEW_ROW_ROLLOUT;
    int Q = v->dims[li][ds][1], T = v->dims[li][ds][2];
    const float *A = NULL;
    float *fused = NULL;
    if (rollout && v->staged) { /* the factors are per window and across merges: no one T x T map */
        const double tx = two_rows ? x0 + 34 : x0 + side + 105, ty = two_rows ? top + side + 48 : top + 24;
        plot_text(f, tx, ty, 7.5, 0, "rollout multiplies each layer's head mean + identity, window by window,");
        plot_text(f, tx, ty + 10, 7.5, 0, "passes each merged token on to its children, and spreads a reduced key");
        plot_text(f, tx, ty + 20, 7.5, 0, "over the tokens it reduces (docs/analysis.md, \"Staged traces\")");
        return AS_OK;
    }
    if (rollout) {
        T = Q = v->src.tr.num_tokens;
        fused = malloc((size_t)T * T * sizeof *fused);
        if (!fused) return as_fail(err, AS_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < (size_t)T * T; i++) fused[i] = (float)v->rollout[(size_t)li * T * T + i];
        A = fused;
    } else if (!(A = problem_map(v, ds, li, hi, NULL, err))) {
        return err->status;
    }
    double mx = two_rows ? x0 + 34 : x0 + side + 105, my = two_rows ? top + side + 40 : top + 12;
    double mw = two_rows ? fmin(w - 90, bottom - my - 24) : x0 + w - mx - 62;
    double mh = two_rows ? mw : fmin(mw, avail - 24);
    if (Q == T) mw = mh = fmin(mw, mh);
    else mh = Q * fmin(mh / Q, fmax(mw / T, 14.0)); /* prefix rows only: short rows, at least 14 pt */
    if (mw < 20 || mh < 8) { /* the window is too small for it */
        free(fused);
        return AS_OK;
    }
    mapscale mms; /* the map's own peak for the title; global: the layer's range for colours */
    char mt[192], pk[48] = "";
    as_status rc = map_scale(v, A, Q, T, &mms, err);
    if (rc == AS_OK) peak_text(&mms, pk, sizeof pk);
    if (rc == AS_OK && !rollout && v->norm == VIEW_NORM_GLOBAL) rc = global_map_scale(v, ds, li, &mms, err);
    if (rc == AS_OK && !rollout && v->staged && geom_of(v, li)->attn_signed && ds == 0)
        mapscale_not_probability(&mms); /* talking heads: signed by construction */
    if (rc != AS_OK) {
        free(fused);
        return rc;
    }
    plot_axes a = {.x = mx, .y = my, .w = mw, .h = mh};
    if (rollout) snprintf(mt, sizeof mt, "layer %d: head mean + identity, the factor rollout multiplies (%d x %d)%s",
                          v->src.tr.layers[li], Q, T, pk);
    else if (windowed(v, li))
        snprintf(mt, sizeof mt, "%s of %s %d, window %d of %d (%d x %d)%s", map_names[ds], head_word(ds), head,
                 place_of(v, li, staged_token(v, li)).w, table_problems(v, li), Q, T, pk);
    else snprintf(mt, sizeof mt, "%s of %s %d (%d x %d)%s", map_names[ds], head_word(ds), head, Q, T, pk);
    draw_map_panel(v, f, a, li, hi, ds, A, scale_make(v, &mms), mt, 1);
    free(fused);
    return AS_OK;
}

/* Small multiples: n overlays in the best grid for the area; kind 0 = heads, 1 = layers. */
static as_status draw_multiples(view *v, plot_figure *f, double x0, double y0, double w, double h,
                                int by_layer, as_error *err) {
    int n = by_layer ? v->src.tr.n_layers : n_heads(v, v->li, v->ds);
    int best_c = 1, global = v->norm == VIEW_NORM_GLOBAL;
    /* per map: each panel has its own colour bar beside it */
    double best = 0, bw = global ? 0 : 36;
    const double NOTE = 8; /* under each panel: prefix share | peak (mapscale_note, compact) */
    for (int c = 1; c <= n; c++) {
        int rows = (n + c - 1) / c;
        double s = fmin(w / c - bw, h / rows - 11 - NOTE);
        if (s > best) {
            best = s;
            best_c = c;
        }
    }
    double side = best - 6;
    if (side < 8) return as_fail(err, AS_ERR_ARG, "the window is too small for %d panels", n);
    mapscale shared_ms, pms[VIEW_MAX_PANELS];
    int ds = by_layer ? 0 : v->ds;
    /* every panel's values and raw range first: a global scale needs them all before drawing */
    for (int k = 0; k < n; k++) {
        mapscale ms;
        if (!has_map(v, by_layer ? k : v->li, ds)) continue;
        /* frame_alloc hands out the next panel's memory: register the panel right after */
        int li = by_layer ? k : v->li;
        /* staged layers differ in heads (3/6/12/24): the strip shows the current head position
         * where a layer has it, else its last head, and names the head it shows */
        int hk = by_layer ? (v->hi < n_heads(v, k, ds) ? v->hi : n_heads(v, k, ds) - 1) : k;
        if (!overlay_values(v, ds, li, hk, &ms, err)) return err->status;
        if (v->n_panels == 0) shared_ms = ms;
        else mapscale_widen(&shared_ms, &ms);
        pms[v->n_panels] = ms;
        double px = x0 + (k % best_c) * (best + bw), py = y0 + (k / best_c) * (best + 11 + NOTE) + 10;
        int head = head_id(v, ds, hk);
        int gh, gw;
        overlay_dims(v, li, &gh, &gw);
        panel_staged(v, panel_add(v, VIEW_PANEL_IMAGE, px, py, side, side, gh, gw, li, head, ds,
                                  (vscale){ms.lo, ms.hi, 0, 0, ms}), li);
    }
    vscale shared = v->n_panels > 0 ? scale_make(v, &shared_ms) : (vscale){.lo = 0, .hi = 1};
    for (int i = 0; i < v->n_panels; i++) {
        view_panel *pn = &v->panels[i];
        vscale s = scale_make(v, &pms[i]);
        if (global) { /* the shared range; each panel keeps its own peak and prefix share */
            s.lo = shared.lo;
            s.hi = shared.hi;
            s.log = shared.log;
            s.floor = shared.floor;
        }
        pn->lo = s.lo;
        pn->hi = s.hi;
        paint_overlay(v, f, i, s);
        char t[64];
        int cur = by_layer ? layer_pos(v, pn->layer) == v->li : pn->head == view_head(v);
        if (by_layer && v->staged && rollout_drawn(v)) snprintf(t, sizeof t, "rollout through layer %d", pn->layer);
        else if (by_layer && v->staged) snprintf(t, sizeof t, "layer %d, head %d", pn->layer, pn->head);
        else if (by_layer) snprintf(t, sizeof t, "layer %d", pn->layer);
        else snprintf(t, sizeof t, "%s %d", head_word(pn->ds), pn->head);
        plot_text(f, pn->x + side / 2, pn->y - 2.5, 6.5, 0.5, t);
        if (cur && !v->exporting) outline(plot_cairo(f), pn->x - 1.5, pn->y - 1.5, side + 3, side + 3, 0.1, 0.45, 0.9, 1.2);
        if (v->hover_panel == i)
            outline(plot_cairo(f), pn->x - 0.8, pn->y - 0.8, side + 1.6, side + 1.6, 0.3, 0.3, 0.3, 0.6);
        mapscale_note(f, pn->x, pn->y + side + 1.5, side, fmin(6, fmax(4, side / 14)), &pms[i]);
        if (!global) { /* the panel's own scale: its bar with the 1/T mark, ticks only */
            plot_axes a = {.x = pn->x, .y = pn->y, .w = side - 3, .h = side};
            colorbar_add(v, f, &a, s, NULL);
        }
    }
    if (global && v->n_panels > 0) {
        int last = v->n_panels - 1;
        plot_axes a = {.x = x0 + best_c * best - 2, .y = v->panels[0].y,
                       .w = 0, .h = fmin(v->panels[last].y + side - v->panels[0].y, 220)};
        colorbar_add(v, f, &a, shared, overlay_label(v, ds));
    }
    return AS_OK;
}

/* A results heatmap (similarity: L x L, ALS: L x H) filling the content area, its panel for
 * clicks and hovering, its colour bar and a hint beside it. */
static as_status draw_results(view *v, plot_figure *f, double top, double bottom,
                              view_panel_kind kind, const double *m, int rows, int cols,
                              const int *row_ids, const int *col_ids, double lo, double hi,
                              const char *title, const char *xlabel, const char *cbar,
                              const char *hint, as_error *err) {
    double cell = fmin((v->width / v->zoom - 190) / cols, (bottom - top - 40) / rows);
    plot_axes a = {.x = 44, .y = top + 14, .w = cell * cols, .h = cell * rows};
    double *vals = frame_alloc(v, (size_t)rows * cols);
    if (!vals) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    memcpy(vals, m, (size_t)rows * cols * sizeof *vals);
    panel_add(v, kind, a.x, a.y, a.w, a.h, rows, cols, -1, -1, 0, (vscale){.lo = lo, .hi = hi});
    fig_heatmap(f, &a, m, rows, cols, row_ids, col_ids, lo, hi, v->cmap, NULL, xlabel, "layer", cbar);
    if (v->staged) { /* white lines between the stages (rows are layers; similarity's columns too) */
        int rs[VIT_MAX_DEPTH], cs[VIT_MAX_DEPTH];
        const int cols_layers = kind == VIEW_PANEL_SIMILARITY;
        for (int i = 0; i < rows && i < VIT_MAX_DEPTH; i++) {
            const trace_layer_geom *g = trace_layer(&v->src.tr, row_ids[i]);
            rs[i] = g ? g->stage : -1;
        }
        for (int j = 0; cols_layers && j < cols && j < VIT_MAX_DEPTH; j++) {
            const trace_layer_geom *g = trace_layer(&v->src.tr, col_ids[j]);
            cs[j] = g ? g->stage : -1;
        }
        if (rows <= VIT_MAX_DEPTH && cols <= VIT_MAX_DEPTH)
            fig_heatmap_stages(f, &a, rs, rows, cols_layers ? cs : NULL, cols);
    }
    plot_text(f, a.x, a.y - 5, 8, 0, title); /* left-aligned: a narrow panel would clip it */
    if (v->n_cbars < 8) {
        v->cbars[v->n_cbars] = (view_colorbar){lo, hi, ""};
        snprintf(v->cbars[v->n_cbars++].label, sizeof v->cbars[0].label, "%s", cbar);
    }
    outline_hover(v, f, v->n_panels - 1, 0.8);
    if (!v->exporting) { /* right of the colour bar, or under the axis labels when that is full */
        const int right = a.x + a.w + 80 + 7 * 0.55 * strlen(hint) < v->width / v->zoom - 4;
        plot_text(f, right ? a.x + a.w + 80 : a.x, right ? a.y + 10 : a.y + a.h + 34, 7, 0, hint);
    }
    return AS_OK;
}

int view_mode_missing(const view *v, view_mode m, as_error *err) {
    const char *metric = m == VIEW_MODE_SIMILARITY && !v->sim ? "similarity"
                       : m == VIEW_MODE_ALS && !v->als ? "als" : NULL;
    if (metric) as_fail(err, AS_ERR_ARG, "no %s results in this trace: run attnscope analyze %s "
                        "--metrics %s", metric, v->src.path, metric);
    return metric != NULL;
}

static as_status draw_similarity(view *v, plot_figure *f, double top, double bottom, as_error *err) {
    if (view_mode_missing(v, VIEW_MODE_SIMILARITY, err)) return err->status;
    int L = v->sim_n, di = v->definition;
    const double *m = v->sim + (size_t)di * L * L;
    double lo, hi;
    fig_range(m, (size_t)L * L, &lo, &hi);
    hi = 1; /* from a nice value below the smallest similarity up to 1, as the figure */
    plot_nice_range(&lo, &hi);
    if (lo < -1) lo = -1;
    char title[128];
    snprintf(title, sizeof title, "cross-layer similarity (%s, head mean; Tab: definition)",
             analysis_definition_name(di));
    return draw_results(v, f, top, bottom, VIEW_PANEL_SIMILARITY, m, L, L, v->sim_layers,
                        v->sim_layers, lo, 1, title, "layer", "cosine similarity",
                        "click a cell to compare its two layers", err);
}

static as_status draw_als(view *v, plot_figure *f, double top, double bottom, as_error *err) {
    if (view_mode_missing(v, VIEW_MODE_ALS, err)) return err->status;
    double lo, hi;
    fig_range(v->als, (size_t)v->als_l * v->als_h, &lo, &hi);
    if (!(hi > lo)) hi = lo + 1e-9;
    return draw_results(v, f, top, bottom, VIEW_PANEL_ALS, v->als, v->als_l, v->als_h,
                        v->als_layers, v->als_heads, lo, hi,
                        "attention locality score (MaiT Eq. 3), mean over images", "head", "ALS",
                        "click a cell to open that layer and head", err);
}

static const char *const help_lines[] = {
    "Left / Right      previous / next head          (Shift+wheel)",
    "Up / Down         previous / next layer         (wheel)",
    "PgUp / PgDn, p/n  previous / next image         (Ctrl+wheel); Home / End: first / last",
    "mouse             hover a patch: its attention; click: fix the query (click again: free)",
    "c / r             class-token row / rollout from the query, toggles",
    "Tab               next map: attn, scores, recorded internals (similarity: next definition)",
    "g / d             head grid / depth strip (click a panel to open it)",
    "s / a             similarity matrix / ALS per layer and head (from attnscope analyze)",
    "Esc / Enter       back to the query view",
    "m                 colour map: viridis / magma",
    "l                 log / linear scale",
    "z                 attention maps from 0 (1/T marked) / from their minimum",
    "o                 normalise per map / globally (all heads of the layer, all panels)",
    "[ / ]             overlay opacity",
    ", / .             previous / next window (window layers of staged traces)",
    "+ / -             larger / smaller text and panels",
    "f                 follow a live trace (jump to each new image)",
    "e                 export the view as PNG and print the attnscope plot command",
    "? / q             this help / quit",
};

static void draw_help(view *v, plot_figure *f, double U, double V) {
    cairo_t *cr = plot_cairo(f);
    int n = (int)(sizeof help_lines / sizeof help_lines[0]);
    cairo_select_font_face(cr, "DejaVu Sans Mono", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, 6.8);
    double tw = 0;
    for (int i = 0; i < n; i++) {
        cairo_text_extents_t e;
        cairo_text_extents(cr, help_lines[i], &e);
        tw = fmax(tw, e.x_advance);
    }
    cairo_select_font_face(cr, PLOT_FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    double w = fmin(U - 10, tw + 20), h = 12.0 * n + 26, x = (U - w) / 2, y = (V - h) / 2;
    cairo_set_source_rgba(cr, 1, 1, 1, 0.95);
    cairo_rectangle(cr, x, y, w, h);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    cairo_set_line_width(cr, 0.8);
    cairo_stroke(cr);
    plot_text(f, x + 10, y + 14, 8, 0, "attnscope view: keys");
    cairo_select_font_face(cr, "DejaVu Sans Mono", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    for (int i = 0; i < n; i++) plot_text(f, x + 10, y + 30 + 12.0 * i, 6.8, 0, help_lines[i]);
    cairo_select_font_face(cr, PLOT_FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
}

static void hover_text(const view *v, char *buf, size_t n) {
    buf[0] = 0;
    if (v->hover_panel < 0 || v->hover_panel >= v->n_panels || v->hover_row < 0) return;
    const view_panel *p = &v->panels[v->hover_panel];
    double val = p->values[(size_t)v->hover_row * p->cols + v->hover_col];
    char q[48], u[40] = ""; /* the value over the uniform level */
    if (p->scale.probability) snprintf(u, sizeof u, " (%.3g \xc3\x97 1/T)", val / p->scale.uniform);
    switch (p->kind) {
    case VIEW_PANEL_IMAGE:
        if (p->kspan) { /* a reduced key: which tokens it covers */
            const trace_layer_geom *g = geom_of(v, layer_pos(v, p->layer));
            int y0, y1, x0, x1;
            vit_sra_key_tokens(g->sr_ratio, g->sr_pool, g->gh, v->hover_row, &y0, &y1);
            vit_sra_key_tokens(g->sr_ratio, g->sr_pool, g->gw, v->hover_col, &x0, &x1);
            snprintf(buf, n, "%s at key (%d, %d) of %d x %d (%s tokens y %d-%d, x %d-%d): %.4g%s",
                     map_names[p->ds], v->hover_row, v->hover_col, p->rows, p->cols,
                     g->sr_pool ? "the mean of" : "a conv over", y0, y1 - 1, x0, x1 - 1, val, u);
            break;
        }
        if (p->stride_px > 0) { /* staged: the token, and whether it is in the query's window */
            int st = (int)p->key_state[(size_t)v->hover_row * p->cols + v->hover_col];
            snprintf(buf, n, "%s at token (%d, %d): %.4g%s%s", map_names[p->ds], v->hover_row, v->hover_col,
                     val, st == VIEW_KEY_OUTSIDE ? "" : u, st == VIEW_KEY_OUTSIDE ? " (outside the query's window)"
                     : st == VIEW_KEY_MASKED ? " (masked: another region of the shifted window)" : "");
            break;
        }
        query_name(v, prefix_of(v) + v->hover_row * p->cols + v->hover_col, q, sizeof q);
        snprintf(buf, n, "%s at %s: %.4g%s", rollout_drawn(v) ? "rollout" : map_names[p->ds], q,
                 val, u);
        break;
    case VIEW_PANEL_MAP:
        if (p->window >= 0) { /* a window map: rows and keys are window rows; which tokens they are */
            int li = layer_pos(v, p->layer), R = p->cols;
            const int *tok = v->wtok[li] + (size_t)p->window * R;
            const int gw = geom_of(v, li)->gw;
            char kq[40], kk[40];
            int tq = tok[v->hover_row], tk = tok[v->hover_col];
            if (tq < 0) snprintf(kq, sizeof kq, "pad");
            else snprintf(kq, sizeof kq, "(%d, %d)", tq / gw, tq % gw);
            if (tk < 0) snprintf(kk, sizeof kk, "pad");
            else snprintf(kk, sizeof kk, "(%d, %d)", tk / gw, tk % gw);
            const unsigned char *mk = v->wmask[li];
            int masked = mk && mk[((size_t)p->window * R + v->hover_row) * R + v->hover_col];
            snprintf(buf, n, "%s[window %d: row %d %s, key %d %s]: %.4g%s%s", map_names[p->ds], p->window,
                     v->hover_row, kq, v->hover_col, kk, val, u, masked ? " (masked)" : "");
            break;
        }
        snprintf(buf, n, "%s[%d, %d]: %.4g%s", rollout_drawn(v) ? "rollout factor" : map_names[p->ds],
                 v->hover_row, v->hover_col, val, u);
        break;
    case VIEW_PANEL_SIMILARITY:
        if (isnan(val)) /* staged: shifted and unshifted windows, or stages, have other supports */
            snprintf(buf, n, "layers %d and %d: not compared (their maps have different supports: "
                     "docs/analysis.md)", v->sim_layers[v->hover_row], v->sim_layers[v->hover_col]);
        else
            snprintf(buf, n, "similarity of layers %d and %d: %.4f", v->sim_layers[v->hover_row],
                     v->sim_layers[v->hover_col], val);
        break;
    case VIEW_PANEL_ALS:
        if (isnan(val))
            snprintf(buf, n, "layer %d has no head %d", v->als_layers[v->hover_row], v->als_heads[v->hover_col]);
        else
            snprintf(buf, n, "ALS of layer %d head %d: %.4f", v->als_layers[v->hover_row],
                     v->als_heads[v->hover_col], val);
        break;
    }
}

/* The mode as drawn: the query view is a class-token or rollout view when that row is on. */
static const char *mode_label(const view *v) {
    if (v->mode == VIEW_MODE_QUERY || v->mode == VIEW_MODE_PAIR) {
        if (v->row == VIEW_ROW_ROLLOUT) return v->mode == VIEW_MODE_PAIR ? "pair (rollout)" : "rollout";
        if (v->row == VIEW_ROW_CLASS) return v->mode == VIEW_MODE_PAIR ? "pair (class token)" : "class-token";
    }
    if (v->mode == VIEW_MODE_DEPTH && rollout_drawn(v)) return "depth (rollout)";
    return mode_names[v->mode];
}

static void build_status(view *v) {
    const trace_reader *r = &v->src.tr;
    const char *base = strrchr(v->image_path, '/');
    base = base ? base + 1 : v->image_path;
    char q[48], hv[200], lab[256] = "", live[96];
    query_name(v, v->query, q, sizeof q);
    hover_text(v, hv, sizeof hv);
    if (v->label >= 0 || v->pred >= 0) {
        char ln[96] = "unlabelled", pn[96] = "";
        if (v->label >= 0) snprintf(ln, sizeof ln, "label %d%s%s%s", v->label, v->label_name[0] ? " (" : "",
                                    v->label_name, v->label_name[0] ? ")" : "");
        if (v->pred >= 0) snprintf(pn, sizeof pn, ", pred %d%s%s%s", v->pred, v->pred_name[0] ? " (" : "",
                                   v->pred_name, v->pred_name[0] ? ")" : "");
        snprintf(lab, sizeof lab, "  %s%s", ln, pn);
    }
    if (v->live) snprintf(live, sizeof live, "  |  live: %ld images%s", v->n_images, v->follow ? ", following" : "");
    else snprintf(live, sizeof live, "  |  %s", v->complete ? "complete" : "interrupted run");
    char mech[96], where[160] = "";
    vit_attn_describe(&r->cfg, view_layer(v), mech, sizeof mech);
    if (v->staged) { /* where the layer sits: stage, block, window, grid */
        const trace_layer_geom *g = geom_of(v, v->li);
        int block = g->layer;
        for (int st = 0; st < g->stage && st < r->cfg.n_stages; st++) block -= r->cfg.stage[st].depth;
        int wr, nw, w = view_query_window(v, &wr, &nw);
        if (w >= 0)
            snprintf(where, sizeof where, "stage %d, block %d, window %d (of %d), grid %d x %d, M %d, shift %d; ",
                     g->stage, block, w, nw, g->gh, g->gw, g->M, g->shift);
        else if (g->scope == VIT_SCOPE_CLASS)
            snprintf(where, sizeof where, "stage %d, block %d, class attention over [cls; %d x %d patches]; ",
                     g->stage, block, g->gh, g->gw);
        else if (g->scope == VIT_SCOPE_SRA)
            snprintf(where, sizeof where, "stage %d, block %d, spatial reduction, grid %d x %d, keys %d x %d; ",
                     g->stage, block, g->gh, g->gw, g->kgh, g->kgw);
        else
            snprintf(where, sizeof where, "stage %d, block %d, global, grid %d x %d; ", g->stage, block, g->gh, g->gw);
    }
    /* what the panels show: the map (Tab) and head, or the rollout, which fuses the heads */
    char what[96];
    if (rollout_drawn(v) && (v->mode == VIEW_MODE_QUERY || v->mode == VIEW_MODE_PAIR || v->mode == VIEW_MODE_DEPTH))
        snprintf(what, sizeof what, "rollout (attn, head mean)");
    else {
        const int sds = v->mode == VIEW_MODE_DEPTH ? 0 : v->ds; /* the strip draws attn in every layer */
        snprintf(what, sizeof what, "%s %s %d", map_names[sds], head_word(sds), view_head(v));
    }
    snprintf(v->status, sizeof v->status, "image %ld/%ld %s%s  |  %s view  |  layer %d (%s%s)  |  %s  |  "
             "query %s%s%s%s%s", v->image, v->n_images, base, lab, mode_label(v), view_layer(v), where, mech,
             what, q, v->query_locked ? " (fixed)" : "", hv[0] ? "  |  " : "", hv, live);
}

/* The frame; without chrome (export) only the panels: no background, title line, status or
 * message bar, help or hover. */
/* The scale the title names: what this frame's map panels were drawn with. z asks for maps from
 * 0, but mapscale.c spans min..max where a map goes below 0 (scores), and the log scale falls back
 * to linear where a map has no positive values or negative ones. */
static void scale_words(const view *v, char *buf, size_t n) {
    int from0 = 0, span = 0, log = 0;
    for (int i = 0; i < v->n_panels; i++) {
        const view_panel *p = &v->panels[i];
        if (p->kind != VIEW_PANEL_IMAGE && p->kind != VIEW_PANEL_MAP) continue;
        if (v->log_scale && p->scale.min >= 0 && p->scale.max > 0) log = 1;
        else if (v->range == MAPSCALE_ZERO && p->lo == 0) from0 = 1;
        else span = 1;
    }
    if (!from0 && !span && !log) /* no map drawn: what z and l ask for */
        snprintf(buf, n, "%s scale", v->log_scale ? "log" : v->range == MAPSCALE_ZERO ? "linear from 0" : "min-max");
    else if (log)
        snprintf(buf, n, "log scale%s", from0 || span ? " (linear on maps below 0)" : "");
    else if (v->range == MAPSCALE_MINMAX)
        snprintf(buf, n, "min-max scale");
    else
        snprintf(buf, n, "%s", !span ? "linear from 0 scale" : from0 ? "linear from 0 scale (min..max on maps below 0)"
                                                                    : "min..max scale (maps below 0)");
}

static void draw_frame(view *v, cairo_t *cr, double width, double height, int chrome) {
    v->width = width;
    v->height = height;
    double Z = v->zoom, U = width / Z, V = height / Z;
    v->n_panels = v->n_cbars = 0;
    cairo_save(cr);
    cairo_scale(cr, Z, Z);
    if (chrome) {
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_paint(cr);
    }
    plot_figure *f = plot_figure_wrap(cr, U, V);
    if (!f) {
        cairo_restore(cr);
        return;
    }
    as_error err = {0};
    as_status rc = AS_OK;
    double top = TOP, bottom = V - BAR_H - 4;
    if (v->staged) v->query = staged_token(v, v->li);
    if (v->n_images == 0) rc = as_fail(&err, AS_ERR_ARG, "no complete image in this trace yet%s",
                                       v->live ? ": waiting for the recording" : "");
    else rc = ensure_rgb(v, &err);
    if (rc == AS_OK) {
        switch (v->mode) {
        case VIEW_MODE_QUERY: rc = draw_query_column(v, f, 6, U - 12, top, bottom, v->li, 0, &err); break;
        case VIEW_MODE_GRID:
        case VIEW_MODE_DEPTH:
            rc = draw_multiples(v, f, 12, top + 2, U - 24 - (v->norm == VIEW_NORM_GLOBAL ? 60 : 0),
                                bottom - top - 4, v->mode == VIEW_MODE_DEPTH, &err);
            break;
        case VIEW_MODE_PAIR: {
            /* each layer clamps the head and map to what it has (a staged stage may have fewer
             * heads); the selection comes back unchanged for the next frame */
            const int keep = v->li, keep_hi = v->hi, keep_ds = v->ds, keep_q = v->query;
            double w = (U - 12) / 2;
            for (int k = 0; k < 2 && rc == AS_OK; k++) {
                v->li = v->pair[k];
                v->hi = keep_hi, v->ds = keep_ds, v->query = keep_q;
                clamp_selection(v);
                rc = draw_query_column(v, f, 6 + k * w, w, top, bottom, v->li, 1, &err);
            }
            v->li = keep, v->hi = keep_hi, v->ds = keep_ds, v->query = keep_q;
            clamp_selection(v);
            break;
        }
        case VIEW_MODE_SIMILARITY: rc = draw_similarity(v, f, top, bottom, &err); break;
        case VIEW_MODE_ALS: rc = draw_als(v, f, top, bottom, &err); break;
        default: break;
        }
    }
    if (rc != AS_OK) {
        snprintf(v->message, sizeof v->message, "%s", err.msg);
        plot_text(f, U / 2, (top + bottom) / 2, 8, 0.5, err.msg);
    }
    if (!chrome) {
        plot_figure_abort(f);
        cairo_restore(cr);
        return;
    }
    /* title line */
    const char *base = strrchr(v->src.path, '/');
    char scale[96];
    scale_words(v, scale, sizeof scale);
    snprintf(v->title, sizeof v->title, "%.1024s  |  %s view  |  %s, %s, %s normalisation, opacity %.1f  |  ? help",
             base ? base + 1 : v->src.path, mode_label(v), plot_cmap_name(v->cmap), scale,
             v->norm == VIEW_NORM_MAP ? "per-map" : "global", v->opacity);
    plot_text(f, 6, TITLE_Y, 7, 0, v->title);
    /* status bar */
    build_status(v);
    cairo_set_source_rgb(cr, 0.93, 0.93, 0.93);
    cairo_rectangle(cr, 0, V - BAR_H, U, BAR_H);
    cairo_fill(cr);
    plot_text(f, 6, V - 5, 6.8, 0, v->status);
    if (v->message[0]) {
        cairo_set_source_rgb(cr, 1, 0.96, 0.8);
        cairo_rectangle(cr, 0, V - 2 * BAR_H, U, BAR_H);
        cairo_fill(cr);
        plot_text(f, 6, V - BAR_H - 5, 6.8, 0, v->message);
    }
    if (v->help) draw_help(v, f, U, V);
    plot_figure_abort(f); /* the wrapper only */
    cairo_restore(cr);
}

void view_draw(view *v, cairo_t *cr, double width, double height) { draw_frame(v, cr, width, height, 1); }

/* ---- events ------------------------------------------------------------------------------------- */

/* The panel and cell under (x, y) logical points: returns the panel index or -1. */
static int hit(const view *v, double x, double y, int *row, int *col) {
    x /= v->zoom;
    y /= v->zoom;
    for (int i = v->n_panels - 1; i >= 0; i--) {
        const view_panel *p = &v->panels[i];
        if (x >= p->x && x < p->x + p->w && y >= p->y && y < p->y + p->h) {
            if (p->kspan) { /* reduced keys: the last key cell whose pixels hold the point, else the nearest */
                const double py = (y - p->y) / p->h * p->img, px = (x - p->x) / p->w * p->img, *sp = p->kspan;
                double by = 1e300, bx = 1e300;
                for (int r = 0; r < p->rows; r++) {
                    double d = py < sp[r] ? sp[r] - py : py >= sp[p->rows + r] ? py - sp[p->rows + r] + 1e-9 : 0;
                    if (d <= by) by = d, *row = r;
                }
                for (int c = 0; c < p->cols; c++) {
                    const double lo = sp[2 * p->rows + c], hi = sp[2 * p->rows + p->cols + c];
                    double d = px < lo ? lo - px : px >= hi ? px - hi + 1e-9 : 0;
                    if (d <= bx) bx = d, *col = c;
                }
                return i;
            }
            if (p->stride_px > 0) { /* staged image: the token whose pixels lie there */
                *col = keymap_cell_at((x - p->x) / p->w * p->img, p->offset_px, p->stride_px, p->cols);
                *row = keymap_cell_at((y - p->y) / p->h * p->img, p->offset_px, p->stride_px, p->rows);
                return i;
            }
            *col = (int)((x - p->x) / p->w * p->cols);
            *row = (int)((y - p->y) / p->h * p->rows);
            if (*col >= p->cols) *col = p->cols - 1;
            if (*row >= p->rows) *row = p->rows - 1;
            return i;
        }
    }
    *row = *col = -1;
    return -1;
}

static void set_image(view *v, long image) {
    if (v->n_images <= 0) return;
    if (image < 0) image = 0;
    if (image >= v->n_images) image = v->n_images - 1;
    v->image = image;
    read_image_info(v);
}

static int step_ds(view *v) {
    int cur = index_in(v->maps, v->n_maps, v->ds);
    if (cur < 0) cur = 0;
    for (int k = 1; k <= v->n_maps; k++) {
        int ds = v->maps[(cur + k) % v->n_maps];
        if (has_map(v, v->li, ds)) {
            v->ds = ds;
            clamp_selection(v);
            return 1;
        }
    }
    return 0;
}

static int set_mode(view *v, view_mode m) {
    if (v->mode == m && m != VIEW_MODE_QUERY) m = VIEW_MODE_QUERY; /* the key again goes back */
    as_error e = {0};
    if (view_mode_missing(v, m, &e)) {
        note(v, "%s", e.msg);
        return VIEW_REDRAW;
    }
    v->mode = m;
    v->hover_panel = -1;
    return VIEW_REDRAW;
}

static int toggle_row(view *v, view_row r) {
    if (v->row == r) {
        v->row = VIEW_ROW_QUERY;
        return VIEW_REDRAW;
    }
    if (r == VIEW_ROW_CLASS) {
        if (!v->src.tr.cfg.class_token) {
            note(v, "this model has no class token (global_pool %s)", vit_pool_name(v->src.tr.cfg.global_pool));
            return VIEW_REDRAW;
        }
        v->query = 0;
    }
    if (r == VIEW_ROW_ROLLOUT && rollout_refusal(v)) {
        note(v, "%s", rollout_refusal(v));
        return VIEW_REDRAW;
    }
    v->row = r;
    if (r == VIEW_ROW_ROLLOUT && v->mode == VIEW_MODE_GRID)
        note(v, "rollout fuses the heads: the grid shows each head's map; rollout shows in the query view and depth strip");
    return VIEW_REDRAW;
}

/* Staged: the query moves to the same row of the next (d = 1) or previous recorded window of
 * the layer (the nearest row that is a token where that one is a pad slot); the map panel then
 * shows that window. */
static int step_window(view *v, int d) {
    if (!v->staged || !windowed(v, v->li)) {
        note(v, "%s", v->staged ? "this layer is not windowed: ',' and '.' step over windows" :
             "',' and '.' step over the windows of a staged (Swin) trace's window layers");
        return VIEW_REDRAW;
    }
    int nw = table_problems(v, v->li), R = table_rows(v, v->li);
    view_place q = place_of(v, v->li, staged_token(v, v->li));
    for (int k = 1; k <= nw; k++) {
        int w = ((q.w + d * k) % nw + nw) % nw;
        const trace_reader *r = &v->src.tr;
        if (r->n_windows && index_in(r->windows, r->n_windows, w) < 0) continue; /* not recorded */
        const int *tok = v->wtok[v->li] + (size_t)w * R;
        for (int e = 0; e < 2 * R; e++) { /* row q.row, else the nearest token row */
            int j = q.row + (e % 2 ? (e + 1) / 2 : -(e / 2));
            if (j < 0 || j >= R || tok[j] < 0) continue;
            point_at_token(v, v->li, tok[j]);
            v->query_locked = 1;
            return VIEW_REDRAW;
        }
    }
    note(v, "layer %d has no other recorded window", view_layer(v));
    return VIEW_REDRAW;
}

static int key(view *v, int k, int mods) {
    int shift = mods & VIEW_MOD_SHIFT;
    v->message[0] = 0;
    if (v->help && k != '?' && k != 'q') {
        v->help = 0;
        if (k == VIEW_KEY_ESCAPE) return VIEW_REDRAW;
    }
    switch (k) {
    case 'q': return VIEW_QUIT;
    case '?': v->help = !v->help; return VIEW_REDRAW;
    case VIEW_KEY_LEFT: v->hi--; break;
    case VIEW_KEY_RIGHT: v->hi++; break;
    case VIEW_KEY_UP: v->li--; break;
    case VIEW_KEY_DOWN: v->li++; break;
    case VIEW_KEY_PAGEUP: case 'p': set_image(v, v->image - (shift ? 10 : 1)); v->follow = 0; break;
    case VIEW_KEY_PAGEDOWN: case 'n': set_image(v, v->image + (shift ? 10 : 1)); v->follow = 0; break;
    case VIEW_KEY_HOME: set_image(v, 0); v->follow = 0; break;
    case VIEW_KEY_END: set_image(v, v->n_images - 1); v->follow = v->live; break;
    case 'f':
        v->follow = v->live && !v->follow;
        if (!v->live) note(v, "the trace is complete: nothing to follow");
        if (v->follow) set_image(v, v->n_images - 1);
        break;
    case VIEW_KEY_TAB:
        if (v->mode == VIEW_MODE_SIMILARITY) v->definition = (v->definition + 1) % ANALYSIS_N_DEFINITIONS;
        else if (!step_ds(v)) note(v, "layer %d holds no other map", view_layer(v));
        else if (v->mode == VIEW_MODE_DEPTH) note(v, "the depth strip shows attn in every layer; %s is shown in the query view and grid", map_names[v->ds]);
        else if (rollout_drawn(v)) note(v, "rollout multiplies attn; %s shows with rollout off (r) or in the grid", map_names[v->ds]);
        break;
    case 'c': return toggle_row(v, VIEW_ROW_CLASS);
    case 'r': return toggle_row(v, VIEW_ROW_ROLLOUT);
    case 'g': return set_mode(v, VIEW_MODE_GRID);
    case 'd': return set_mode(v, VIEW_MODE_DEPTH);
    case 's': return set_mode(v, VIEW_MODE_SIMILARITY);
    case 'a': return set_mode(v, VIEW_MODE_ALS);
    case VIEW_KEY_ESCAPE: case VIEW_KEY_ENTER: return set_mode(v, VIEW_MODE_QUERY);
    case 'm': v->cmap = v->cmap == PLOT_CMAP_MAGMA ? PLOT_CMAP_VIRIDIS : PLOT_CMAP_MAGMA; break;
    case 'l': v->log_scale = !v->log_scale; break;
    case 'z': v->range = v->range == MAPSCALE_ZERO ? MAPSCALE_MINMAX : MAPSCALE_ZERO; break;
    case 'o': v->norm = v->norm == VIEW_NORM_MAP ? VIEW_NORM_GLOBAL : VIEW_NORM_MAP; break;
    case '[': v->opacity = fmax(0, round((v->opacity - 0.1) * 10) / 10); break;
    case ']': v->opacity = fmin(1, round((v->opacity + 0.1) * 10) / 10); break;
    case '+': case '=': v->zoom = fmin(4, v->zoom * 1.15); break;
    case '-': v->zoom = fmax(0.8, v->zoom / 1.15); break;
    case 'e': return VIEW_EXPORT | VIEW_REDRAW;
    case ',': case '<': step_window(v, -1); break;
    case '.': case '>': step_window(v, 1); break;
    default: return 0;
    }
    clamp_selection(v);
    return VIEW_REDRAW;
}

static int click(view *v, double x, double y) {
    int row, col, i = hit(v, x, y, &row, &col);
    if (i < 0) return 0;
    const view_panel *p = &v->panels[i];
    int pfx = prefix_of(v), full = v->src.tr.q_rows == v->src.tr.num_tokens;
    switch (p->kind) {
    case VIEW_PANEL_IMAGE:
        if (v->mode == VIEW_MODE_GRID || v->mode == VIEW_MODE_DEPTH) {
            if (v->mode == VIEW_MODE_GRID) v->hi = i; /* the grid's panels are the heads in order */
            else v->li = layer_pos(v, p->layer);
            v->mode = VIEW_MODE_QUERY;
        } else if (v->staged) { /* the point clicked; clicking the query's cell again frees it */
            v->qpt[0] = (y / v->zoom - p->y) / p->h * p->img;
            v->qpt[1] = (x / v->zoom - p->x) / p->w * p->img;
            const int q = staged_token(v, layer_pos(v, p->layer)); /* a reduced layer's cells are keys */
            v->query_locked = !(v->query_locked && v->query == q);
        } else if (full && v->row != VIEW_ROW_CLASS) {
            int q = pfx + row * p->cols + col;
            v->query_locked = !(v->query_locked && v->query == q);
            v->query = q;
        }
        break;
    case VIEW_PANEL_MAP:
        if (classrow(v, layer_pos(v, p->layer))) { /* its one row is the class token's */
            note(v, "layer %d is class attention: its one query is the class token", p->layer);
            return VIEW_REDRAW;
        }
        if (v->staged) { /* the token of that row of the shown window */
            int li = layer_pos(v, p->layer), t = v->wtok[li][(size_t)(p->window > 0 ? p->window : 0) * p->rows + row];
            if (t < 0) {
                note(v, "row %d of window %d is a pad slot: it has no place on the image", row, p->window);
                return VIEW_REDRAW;
            }
            point_at_token(v, li, t);
            v->query_locked = 1;
        } else if (row < v->dims[layer_pos(v, p->layer)][p->ds][1] && v->row != VIEW_ROW_CLASS) {
            v->query = row;
            v->query_locked = 1;
        }
        break;
    case VIEW_PANEL_SIMILARITY: {
        int a = layer_pos(v, v->sim_layers[row]), b = layer_pos(v, v->sim_layers[col]);
        if (a < 0 || b < 0) return 0;
        v->pair[0] = a;
        v->pair[1] = b;
        v->mode = VIEW_MODE_PAIR;
        break;
    }
    case VIEW_PANEL_ALS: {
        const int li = layer_pos(v, v->als_layers[row]), old = v->li;
        if (li < 0) return 0;
        if (isnan(v->als[(size_t)row * v->als_h + col])) { /* a staged layer's missing head */
            note(v, "layer %d has no head %d", v->als_layers[row], v->als_heads[col]);
            return VIEW_REDRAW;
        }
        v->li = li; /* head_pos reads the layer's own heads */
        const int hi = head_pos(v, v->als_heads[col]);
        if (hi < 0) {
            v->li = old;
            return 0;
        }
        v->hi = hi;
        v->ds = 0;
        v->mode = VIEW_MODE_QUERY;
        break;
    }
    }
    v->hover_panel = -1;
    clamp_selection(v);
    return VIEW_REDRAW;
}

int view_handle(view *v, const view_event *e) {
    switch (e->type) {
    case VIEW_EV_KEY: return key(v, e->key, e->mods);
    case VIEW_EV_CLICK: return click(v, e->x, e->y);
    case VIEW_EV_WHEEL: {
        int d = e->wheel > 0 ? -1 : 1;
        if (e->mods & VIEW_MOD_CTRL) {
            set_image(v, v->image + d);
            v->follow = 0;
        } else if (e->mods & VIEW_MOD_SHIFT) {
            v->hi += d;
        } else {
            v->li += d;
        }
        clamp_selection(v);
        return VIEW_REDRAW;
    }
    case VIEW_EV_LEAVE:
        if (v->hover_panel < 0) return 0;
        v->hover_panel = -1;
        return VIEW_REDRAW;
    case VIEW_EV_MOTION: {
        int row, col, i = hit(v, e->x, e->y, &row, &col);
        int changed = i != v->hover_panel || row != v->hover_row || col != v->hover_col;
        v->hover_panel = i;
        v->hover_row = row;
        v->hover_col = col;
        if (i >= 0 && v->panels[i].kind == VIEW_PANEL_IMAGE && !v->query_locked && v->staged &&
            v->mode == VIEW_MODE_QUERY) { /* the point under the pointer; its cell is the query */
            const view_panel *p = &v->panels[i];
            v->qpt[0] = (e->y / v->zoom - p->y) / p->h * p->img;
            v->qpt[1] = (e->x / v->zoom - p->x) / p->w * p->img;
            int q = staged_token(v, v->li);
            changed |= q != v->query;
            v->query = q;
        } else if (i >= 0 && v->panels[i].kind == VIEW_PANEL_IMAGE && !v->query_locked &&
            (v->mode == VIEW_MODE_QUERY || v->mode == VIEW_MODE_PAIR) && v->row != VIEW_ROW_CLASS &&
            v->src.tr.q_rows == v->src.tr.num_tokens) {
            int q = prefix_of(v) + row * v->panels[i].cols + col;
            changed |= q != v->query;
            v->query = q;
        }
        return changed ? VIEW_REDRAW : 0;
    }
    }
    return 0;
}

/* ---- live traces -------------------------------------------------------------------------------- */

int view_poll(view *v) {
    if (!v->live) return 0;
    as_error e = {0};
    long before = v->n_images;
    int changed = 0;
    v->writer_gone = trace_writer_finished(v->src.path) ? v->writer_gone + 1 : 0;
    if (v->writer_gone >= 2) {
        /* the run ended: reopen to read the final trace (trimmed, its end state, analysis).
         * This process must let go of its SWMR handle first: HDF5 will not open one file twice
         * with different flags. */
        char path[1024];
        snprintf(path, sizeof path, "%s", v->src.path);
        fig_source_close(&v->src);
        if (fig_source_open(&v->src, path, NULL, &e) != AS_OK || !v->src.is_trace) {
            if (v->src.file > 0) fig_source_close(&v->src);
            snprintf(v->src.path, sizeof v->src.path, "%s", path);
            note(v, "%s", e.msg[0] ? e.msg : "the trace is no longer a trace");
            return VIEW_REDRAW; /* the next poll tries again */
        }
        v->live = v->src.tr.swmr;
        v->complete = v->src.tr.complete;
        if (!v->live) {
            v->follow = 0;
            load_analysis(v);
        }
        changed = 1;
    } else if (trace_reader_refresh(&v->src.tr, &e) != AS_OK) {
        return 0;
    }
    v->n_images = v->src.tr.n_images;
    if (v->n_images != before) {
        changed = 1;
        if (v->follow || before == 0) set_image(v, v->n_images - 1);
        if (before == 0) clamp_selection(v);
    }
    return changed ? VIEW_REDRAW : 0;
}

/* ---- export ------------------------------------------------------------------------------------- */

/* The path as one shell word. */
static void shell_word(const char *s, char *out, size_t n) {
    int plain = 1;
    for (const char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              strchr("/._-+,:=", *c)))
            plain = 0;
    if (plain) {
        snprintf(out, n, "%s", s);
        return;
    }
    size_t k = 0;
    if (k + 1 < n) out[k++] = '\'';
    for (const char *c = s; *c && k + 5 < n; c++) {
        if (*c == '\'') {
            memcpy(out + k, "'\\''", 4);
            k += 4;
        } else {
            out[k++] = *c;
        }
    }
    if (k + 1 < n) out[k++] = '\'';
    out[k] = 0;
}

void view_plot_command(const view *v, const char *name, char *out, size_t n) {
    char t[2100], o[1100];
    shell_word(v->src.path, t, sizeof t);
    snprintf(o, sizeof o, "%s.pdf", name);
    char ow[1200];
    shell_word(o, ow, sizeof ow);
    int layer = view_layer(v), head = view_head(v);
    /* what the view shows that the figure takes as options: the colour map, and for maps over
     * the image the range; a log scale has no figure counterpart */
    char cm[32], sc[96];
    snprintf(cm, sizeof cm, " --cmap %s", plot_cmap_name(v->cmap));
    snprintf(sc, sizeof sc, "%s%s", cm, v->range == MAPSCALE_MINMAX ? " --range minmax" : "");
    const char *logn = v->log_scale ? "   # the view's log scale: the figure is linear" : "";
    /* a staged trace's figures take the query as a cell of the first recorded layer's grid */
    int query = v->query;
    if (v->staged) {
        const trace_layer_geom *g0 = geom_of(v, 0);
        query = keymap_cell_at(v->qpt[0], g0->offset_px, g0->stride_px, g0->gh) * g0->gw +
                keymap_cell_at(v->qpt[1], g0->offset_px, g0->stride_px, g0->gw);
    }
    switch (v->mode) {
    case VIEW_MODE_QUERY:
        if (v->row == VIEW_ROW_ROLLOUT)
            snprintf(out, n, "attnscope plot rollout %s --image %ld --layer %d%s -o %s%s%s", t, v->image,
                     layer, sc, ow, query == 0 && prefix_of(v) > 0 ? "" : "   # the figure rolls out "
                     "from the class token (analyze --metrics rollout), the view from the query", logn);
        else
            snprintf(out, n, "attnscope plot attention %s --image %ld --layer %d --head %d --query %d"
                     "%s -o %s%s%s", t, v->image, layer, head, query, sc, ow,
                     v->ds ? "   # the figure draws attn; the view shows another map" : "", logn);
        break;
    case VIEW_MODE_GRID:
    case VIEW_MODE_DEPTH:
        snprintf(out, n, "attnscope plot grid %s --image %ld --query %d%s -o %s%s%s", t, v->image, query,
                 sc, ow, rollout_drawn(v) ? "   # the figure draws each layer's attention; the view shows "
                 "rollout" : v->mode == VIEW_MODE_GRID && v->ds ? "   # the figure draws attn; the view shows "
                 "another map" : "", logn);
        break;
    case VIEW_MODE_SIMILARITY:
        snprintf(out, n, "attnscope plot similarity %s --definition %s%s -o %s", t,
                 analysis_definition_name(v->definition), cm, ow);
        break;
    case VIEW_MODE_PAIR: {
        char o1[1100], o2[1100];
        snprintf(o1, sizeof o1, "%s-a.pdf", name);
        snprintf(o2, sizeof o2, "%s-b.pdf", name);
        char w1[1200], w2[1200];
        shell_word(o1, w1, sizeof w1);
        shell_word(o2, w2, sizeof w2);
        int hk[2]; /* the head each column shows: a staged layer may have fewer */
        for (int k = 0; k < 2; k++) {
            const int nh = n_heads(v, v->pair[k], 0);
            hk[k] = head_id(v, 0, v->hi < nh ? v->hi : nh - 1);
        }
        snprintf(out, n, "attnscope plot attention %s --image %ld --layer %d --head %d --query %d%s -o %s%s\n"
                 "attnscope plot attention %s --image %ld --layer %d --head %d --query %d%s -o %s%s", t,
                 v->image, v->src.tr.layers[v->pair[0]], hk[0], query, sc, w1, logn, t, v->image,
                 v->src.tr.layers[v->pair[1]], hk[1], query, sc, w2, logn);
        break;
    }
    case VIEW_MODE_ALS: snprintf(out, n, "attnscope plot als %s%s -o %s", t, cm, ow); break;
    default: out[0] = 0;
    }
}

/* The panels of the current view at VIEW_EXPORT_DPI on white, cropped to what they cover
 * plus a small margin: drawn again into a recording surface without the window's chrome. */
static as_status export_png(view *v, const char *path, as_error *err) {
    cairo_surface_t *rec = cairo_recording_surface_create(CAIRO_CONTENT_COLOR_ALPHA, NULL);
    cairo_t *cr = cairo_create(rec);
    int hover = v->hover_panel;
    v->hover_panel = -1;
    v->exporting = 1;
    draw_frame(v, cr, v->width, v->height, 0); /* same size: the same panels for hit testing */
    v->exporting = 0;
    v->hover_panel = hover;
    cairo_destroy(cr);
    double x, y, w, h, m = 4 * v->zoom, k = VIEW_EXPORT_DPI / 72.0 / v->zoom;
    cairo_recording_surface_ink_extents(rec, &x, &y, &w, &h);
    as_status rc = AS_OK;
    if (!(w > 0 && h > 0)) {
        rc = as_fail(err, AS_ERR_ARG, "%s: nothing to export: the view shows no panel", path);
    } else {
        cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)ceil((w + 2 * m) * k),
                                                          (int)ceil((h + 2 * m) * k));
        cr = cairo_create(img);
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_paint(cr);
        cairo_scale(cr, k, k);
        cairo_set_source_surface(cr, rec, m - x, m - y);
        cairo_paint(cr);
        cairo_destroy(cr);
        rc = plot_write_png(img, path, err);
        cairo_surface_destroy(img);
    }
    cairo_surface_destroy(rec);
    return rc;
}

as_status view_dir_check(const char *dir, const char *flag, as_error *err) {
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return as_fail(err, AS_ERR_IO, "%s %s: no such folder: create it first or give an existing one",
                       flag, dir);
    if (!S_ISDIR(sb.st_mode))
        return as_fail(err, AS_ERR_IO, "%s %s: not a folder: give a folder", flag, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return as_fail(err, AS_ERR_IO, "%s %s: the folder is not writable: give another", flag, dir);
    return AS_OK;
}

as_status view_png_out_check(const char *path, const char *flag, as_error *err) {
    const size_t L = strlen(path);
    if (L < 5 || strcasecmp(path + L - 4, ".png") != 0 || path[L - 5] == '/')
        return as_fail(err, AS_ERR_ARG, "%s %s: the viewer writes PNG: give a file name ending in .png",
                       flag, path);
    struct stat sb;
    if (lstat(path, &sb) == 0)
        return as_fail(err, AS_ERR_EXISTS, "%s %s: already exists and is never overwritten: remove it "
                       "yourself or choose another name", flag, path);
    char dir[1100];
    const int where = path_parent_writable(path, dir, sizeof dir);
    if (where == -1)
        return as_fail(err, AS_ERR_IO, "%s %s: the folder %s does not exist: create it first or choose "
                       "another name", flag, path, dir);
    if (where == -2)
        return as_fail(err, AS_ERR_IO, "%s %s: the folder %s is not writable: choose another name", flag,
                       path, dir);
    return AS_OK;
}

as_status view_export(view *v, const char *dir, char *path, size_t pn, char *cmd, size_t cn,
                      as_error *err) {
    const char *b = strrchr(v->src.path, '/');
    char stem[256];
    snprintf(stem, sizeof stem, "%.200s", b ? b + 1 : v->src.path);
    char *dot = strrchr(stem, '.');
    if (dot && dot != stem) *dot = 0;
    char name[1100];
    /* the mode as drawn: a rollout export must not overwrite the query view's */
    int rowed = v->mode == VIEW_MODE_QUERY || v->mode == VIEW_MODE_PAIR || (v->mode == VIEW_MODE_DEPTH && rollout_drawn(v));
    const char *row = !rowed ? "" : v->row == VIEW_ROW_ROLLOUT ? "-rollout" : v->row == VIEW_ROW_CLASS ? "-class" : "";
    snprintf(name, sizeof name, "%s/%s-%s%s-i%ld-l%d-h%d-q%d", dir && dir[0] ? dir : ".", stem,
             mode_names[v->mode], row, v->image, view_layer(v), view_head(v), v->query);
    /* never over an earlier export (or anything else): the next free NAME-K */
    const size_t base = strlen(name);
    struct stat sb;
    for (int k = 2;; k++) {
        snprintf(path, pn, "%s.png", name);
        if (lstat(path, &sb) != 0) break;
        if (k > 9999)
            return as_fail(err, AS_ERR_EXISTS, "%s: exists, as do 9998 numbered names beside it: "
                           "remove some or start with another --export-dir", path);
        snprintf(name + base, sizeof name - base, "-%d", k);
    }
    if (export_png(v, path, err) != AS_OK) return err->status;
    view_plot_command(v, name, cmd, cn);
    note(v, "saved %s", path);
    return AS_OK;
}
