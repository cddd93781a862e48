/* trace.c: HDF5 trace writer and reader. HDF5 is called from one thread at a time: the caller's
 * thread while opening and closing, the writer thread in between. The writer runs in SWMR mode
 * so that on-disk metadata is always consistent: a live reader or a crash sees every batch that
 * was flushed, and /images/done marks which images are complete. */
#define _GNU_SOURCE /* O_DIRECT */
#include "trace.h"
#include "paths.h"
#include "../core/local.h"
#include "../core/cait.h"

#include <assert.h>
#include <errno.h>
#include <hdf5.h>
#include <hdf5_hl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/kernels.h"
#include "../core/mech.h"
#include "../core/vitfam.h"
#include "atomic.h"
#include "h5util.h"
#include "model.h"

#define TRACE_FORMAT "attnscope-trace"
#define TRACE_FORMAT_VERSION 2 /* 2: dimension scales, variable-length paths, provenance */
#define TRACE_FORMAT_VERSION_STAGED 3 /* 3: staged models: per-layer geometry, window maps */
#define TRACE_SLOTS 2
#define TRACE_PATH_LEN 1024
#define TRACE_LZ4_FILTER 32004 /* registered id of the HDF5 LZ4 filter (hdf5-filter-plugin) */

#ifndef ATTNSCOPE_VERSION
#define ATTNSCOPE_VERSION "0.1.0"
#endif

static const char *const trace_q_names[] = {[TRACE_Q_ATTN] = "attn", [TRACE_Q_SCORES] = "scores",
                                            [TRACE_Q_Q] = "q", [TRACE_Q_K] = "k",
                                            [TRACE_Q_TOKENS] = "tokens",
                                            [TRACE_Q_X0] = "internals", [TRACE_Q_X1] = "internals"};
_Static_assert(sizeof trace_q_names / sizeof trace_q_names[0] == TRACE_Q_COUNT, "quantity names");
static const char *const trace_c_names[] = {[TRACE_COMPRESS_NONE] = "none",
                                            [TRACE_COMPRESS_LZ4] = "lz4",
                                            [TRACE_COMPRESS_DEFLATE] = "deflate"};
_Static_assert(sizeof trace_c_names / sizeof trace_c_names[0] == TRACE_COMPRESS_COUNT,
               "compression names");

const char *trace_quantity_name(trace_quantity q) {
    return (unsigned)q < TRACE_Q_COUNT ? trace_q_names[q] : "?";
}
const char *trace_compress_name(trace_compress c) {
    return (unsigned)c < TRACE_COMPRESS_COUNT ? trace_c_names[c] : "?";
}

/* ---- layout --------------------------------------------------------------------------------- */

/* Staged models (Swin) write format version 3; monolithic ViTs keep writing version 2 exactly,
 * so every older reader still opens what they write. */
static int spec_version(const trace_spec *s) {
    return s->cfg.n_stages > 0 ? TRACE_FORMAT_VERSION_STAGED : TRACE_FORMAT_VERSION;
}

/* The side S of block l's local records (core/local.h: every head's rows are an R x R
 * neighbourhood plus one background value), or 0 where its maps are stored dense: blocks
 * without local heads, and every block under --dense-maps. */
static int spec_local(const trace_spec *s, int l) {
    return s->dense_maps || s->prefix_rows_only ? 0 : vit_local_side(&s->cfg, l);
}

/* Block l as the spec records it: the model's geometry with the selected rows and windows. */
static void spec_geom(const trace_spec *s, int l, trace_layer_geom *t) {
    vit_geom g;
    vit_block_geom(&s->cfg, l, &g);
    *t = (trace_layer_geom){.layer = l, .stage = g.stage, .scope = g.scope, .gh = g.gh, .gw = g.gw,
                            .prefix = g.prefix, .T = g.T, .D = g.D, .H = g.H, .M = g.M,
                            .shift = g.shift, .ph = g.ph, .pw = g.pw, .nwh = g.nwh, .nww = g.nww,
                            .n_problems = g.problems, .Tq = g.Tq, .Tk = g.Tk,
                            .qk_dim = vit_qk_head_dim(&s->cfg, l), .stride_px = g.stride_px,
                            .offset_px = g.offset_px, .kgh = g.kgh, .kgw = g.kgw, .sr_ratio = g.sr_ratio,
                            .sr_pool = g.sr_pool, .key_stride_px = g.key_stride_px,
                            .key_offset_px = g.key_offset_px};
    if (g.scope == VIT_SCOPE_WINDOW && s->n_windows > 0) t->n_problems = s->n_windows;
    if (s->prefix_rows_only && g.scope == VIT_SCOPE_GLOBAL) t->Tq = g.prefix;
    t->local_side = spec_local(s, l);
}

/* attn and scores are the maps a local block stores in its local form (internals are not). */
static int q_local(const trace_spec *s, trace_quantity q, int l) {
    return (q == TRACE_Q_ATTN || q == TRACE_Q_SCORES) && spec_local(s, l) > 0;
}

/* Values per query row of a map of q in block l as stored: the keys, or S^2 + 1 slots. */
static int map_cols(const trace_spec *s, trace_quantity q, int l, int Tk) {
    const int S = spec_local(s, l);
    return q_local(s, q, l) ? S * S + 1 : Tk;
}

static int is_map(trace_quantity q) {
    return q == TRACE_Q_ATTN || q == TRACE_Q_SCORES || q == TRACE_Q_X0 || q == TRACE_Q_X1;
}

/* Does block l have a record of q (q/k: not in less-attention blocks; internals: per
 * mechanism)? */
static int q_in_layer(const vit_config *c, trace_quantity q, int l) {
    if (q == TRACE_Q_Q || q == TRACE_Q_K) return vit_has_keys(c, l);
    if (q == TRACE_Q_X0 || q == TRACE_Q_X1) return vit_extra_info(c, l, q - TRACE_Q_X0, NULL);
    return 1;
}

static const char *q_dset_name(const trace_spec *s, trace_quantity q, int l) {
    const vit_config *c = &s->cfg;
    vit_extra x;
    if (q_local(s, q, l)) return q == TRACE_Q_ATTN ? "attn_local" : "scores_local";
    if ((q == TRACE_Q_X0 || q == TRACE_Q_X1) && vit_extra_info(c, l, q - TRACE_Q_X0, &x)) return x.name;
    return trace_q_names[q];
}

/* The heads a record of q in block l keeps: the --heads selection, every head of the block
 * (heads_all), or (Refiner's expanded maps, which are not the model's heads) all of them.
 * Returns the count; ids receives them. */
static int q_heads(const trace_spec *s, trace_quantity q, int l, int *ids) {
    vit_extra x;
    int n = s->n_heads;
    if ((q == TRACE_Q_X0 || q == TRACE_Q_X1) && vit_extra_info(&s->cfg, l, q - TRACE_Q_X0, &x) &&
        vit_mech_of(&s->cfg, l)->maps) { /* map work's extras run over its own heads */
        n = x.heads;
    } else if (s->heads_all) {
        vit_geom g;
        vit_block_geom(&s->cfg, l, &g);
        n = g.H;
    } else {
        if (ids) memcpy(ids, s->heads, (size_t)s->n_heads * sizeof(int));
        return n;
    }
    for (int h = 0; ids && h < n; h++) ids[h] = h;
    return n;
}

/* Shape of one image's record of quantity q in block l (without the image axis): tokens
 * (T, D); q/k (heads, T, dq); maps (heads, Q, T), or (heads, windows, M^2, M^2) in a WINDOW
 * block. */
static int q_shape(const trace_spec *s, trace_quantity q, int l, hsize_t dims[4]) {
    trace_layer_geom t;
    spec_geom(s, l, &t);
    if (q == TRACE_Q_TOKENS) {
        dims[0] = (hsize_t)t.T, dims[1] = (hsize_t)t.D;
        return 2;
    }
    dims[0] = (hsize_t)q_heads(s, q, l, NULL);
    if (!is_map(q)) { /* SRA: k over the reduced keys; CLASS: q of the class token only */
        dims[1] = (hsize_t)(q == TRACE_Q_K && t.scope == VIT_SCOPE_SRA ? t.Tk
                            : q == TRACE_Q_Q && t.scope == VIT_SCOPE_CLASS ? 1 : t.T), dims[2] = (hsize_t)t.qk_dim;
        return 3;
    }
    if (t.scope == VIT_SCOPE_WINDOW) {
        dims[1] = (hsize_t)t.n_problems, dims[2] = (hsize_t)t.Tq, dims[3] = (hsize_t)t.Tk;
        return 4;
    }
    dims[1] = (hsize_t)t.Tq, dims[2] = (hsize_t)map_cols(s, q, l, t.Tk);
    return 3;
}

/* Chunks: one head of one image per chunk (tokens: one image), so one map is one read. Why the
 * split: a head's record above TRACE_SPLIT_ABOVE (a global map of a big grid: 20 MB for a
 * 3136-token stage) is chunked along its first axis after the head (query rows, windows,
 * tokens) into pieces of about TRACE_SPLIT_BYTES, still read in one call. */
#define TRACE_SPLIT_ABOVE (4u << 20)
#define TRACE_SPLIT_BYTES (1u << 20)

static size_t q_elt(const trace_spec *s) { return s->f16 ? 2 : 4; }

/* Bytes of one head's record of one image (tokens: the image's). */
static size_t record_chunk_bytes(const trace_spec *s, trace_quantity q, int l) {
    hsize_t dims[4];
    const int nd = q_shape(s, q, l, dims);
    size_t b = q_elt(s);
    for (int i = nd == 2 ? 0 : 1; i < nd; i++) b *= (size_t)dims[i];
    return b;
}

/* Extent of the split axis in one chunk: all of it, or the pieces described above. */
static hsize_t record_split(const trace_spec *s, trace_quantity q, int l) {
    hsize_t dims[4];
    const int nd = q_shape(s, q, l, dims), axis = nd == 2 ? 0 : 1;
    const size_t whole = record_chunk_bytes(s, q, l), unit = whole / (dims[axis] ? dims[axis] : 1);
    if (whole <= TRACE_SPLIT_ABOVE || unit == 0) return dims[axis];
    const hsize_t k = TRACE_SPLIT_BYTES / unit;
    return k < 1 ? 1 : k;
}

static int record_is_split(const trace_spec *s, trace_quantity q, int l) {
    hsize_t dims[4];
    const int nd = q_shape(s, q, l, dims);
    return record_split(s, q, l) != dims[nd == 2 ? 0 : 1];
}

/* A stored record of q is chunks_per_image chunks (one per recorded head; one for tokens) of
 * record_chunk_bytes each, unless split. */
static int record_chunks_per_image(const trace_spec *s, trace_quantity q, int l) {
    return q == TRACE_Q_TOKENS ? 1 : q_heads(s, q, l, NULL);
}

/* Records of TRACE_DIRECT_MIN bytes and more per chunk (DINOv2 at 518 px: a head's map is
 * 3.75 MB, an image's maps 270 MB) are written with O_DIRECT, from the buffer straight to their
 * chunk's place in the file. Why: copying them into the page cache cost the writer 295 ms of CPU
 * per such image, 54% of the forward's time (perf: copy_folio_from_iter_atomic, 16% of all
 * samples). How: those datasets allocate their chunks when extended (H5D_ALLOC_TIME_EARLY, never
 * filled), the file aligns objects of that size to TRACE_DIRECT_ALIGN (H5Pset_alignment),
 * H5Dget_chunk_info_by_coord gives a chunk's address, and the buffers hold every chunk at a
 * TRACE_DIRECT_ALIGN boundary (vit_record.attn16_stride; the staging buffer likewise). A chunk's
 * last partial page goes through the page cache. A file system without O_DIRECT, a trace made
 * before (chunks not allocated early), or a chunk that is not aligned is written through
 * H5Dwrite_chunk as before. */
#define TRACE_DIRECT_MIN (1u << 20)
#define TRACE_DIRECT_ALIGN ((size_t)4096)

static size_t direct_min(const trace_spec *s) {
    return s->direct_min < 0 ? SIZE_MAX : s->direct_min == 0 ? TRACE_DIRECT_MIN : (size_t)s->direct_min;
}

/* 1 when q's records in block l are written chunk by chunk and large enough for O_DIRECT. */
static int record_direct(const trace_spec *s, trace_quantity q, int l) {
    return s->compress == TRACE_COMPRESS_NONE && !record_is_split(s, q, l) &&
           record_chunk_bytes(s, q, l) >= direct_min(s);
}

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* Bytes from one chunk of q to the next in the buffers handed to write_chunks. */
static size_t record_chunk_stride(const trace_spec *s, trace_quantity q, int l) {
    const size_t b = record_chunk_bytes(s, q, l);
    return record_direct(s, q, l) ? align_up(b, TRACE_DIRECT_ALIGN) : b;
}

/* Heads in the engine's buffer of q in block l (all of them, before any selection). */
static size_t q_engine_heads(const vit_config *c, trace_quantity q, int l) {
    vit_extra x;
    if (q == TRACE_Q_X0 || q == TRACE_Q_X1)
        return vit_extra_info(c, l, q - TRACE_Q_X0, &x) ? (size_t)x.heads : 0;
    vit_geom g;
    vit_block_geom(c, l, &g);
    return (size_t)g.H;
}

/* Rows of a q/k record: the tokens, or an SRA layer's reduced keys for k. */
static int key_rows(const vit_geom *g, trace_quantity q) {
    if (q == TRACE_Q_Q && g->scope == VIT_SCOPE_CLASS) return 1; /* CaiT: q of the class token */
    return q == TRACE_Q_K && g->scope == VIT_SCOPE_SRA ? g->Tk : g->T;
}

/* Floats per image the engine writes for q in block l (all heads, problems and rows; local
 * records where the block's maps are stored local, vit_record.local_maps). */
static size_t q_engine_floats(const trace_spec *s, trace_quantity q, int l) {
    const vit_config *c = &s->cfg;
    vit_geom g;
    vit_block_geom(c, l, &g);
    if (q == TRACE_Q_TOKENS) return (size_t)g.T * (size_t)g.D;
    if (is_map(q))
        return q_engine_heads(c, q, l) * (size_t)g.problems * (size_t)g.Tq * (size_t)map_cols(s, q, l, g.Tk);
    return q_engine_heads(c, q, l) * (size_t)key_rows(&g, q) * (size_t)vit_qk_head_dim(c, l);
}

/* Block l has windowed maps. */
static int layer_windowed(const vit_config *c, int l) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    return g.scope == VIT_SCOPE_WINDOW;
}

static int layer_sra(const vit_config *c, int l) {
    vit_geom g;
    vit_block_geom(c, l, &g);
    return g.scope == VIT_SCOPE_SRA;
}

static const char *q_axes(const trace_spec *s, trace_quantity q, int l) {
    const vit_config *c = &s->cfg;
    if (q_local(s, q, l)) return "image,head,query,slot";
    if (q == TRACE_Q_K && layer_sra(c, l)) return "image,head,key,channel";
    if (is_map(q)) return layer_windowed(c, l) ? "image,head,window,query,key" : "image,head,query,key";
    return q == TRACE_Q_TOKENS ? "image,token,channel" : "image,head,token,channel";
}

static const char *q_description(const trace_spec *s, trace_quantity q, int l) {
    const vit_config *c = &s->cfg;
    const vit_mech *m = vit_mech_of(c, l);
    vit_extra x;
    if (q_local(s, q, l))
        return q == TRACE_Q_ATTN
            ? "local form of softmax(scores): slot (dy + S/2) S + (dx + S/2) of query (y, x) is the "
              "weight of key (y + dy, x + dx) (0 where that is off the grid), S = local_side; the "
              "last slot is the weight of every key outside the S x S neighbourhood"
            : "local form of the scores: slots as in attn_local; the last slot is the score of "
              "every key outside the S x S neighbourhood (0 in zero mode, -inf in neg_inf mode)";
    switch (q) {
    case TRACE_Q_ATTN: if (vit_cait_attn_doc(c, l)) return vit_cait_attn_doc(c, l);
        return m->attn_doc ? m->attn_doc : "softmax(scores): the map that multiplies the values";
    case TRACE_Q_SCORES: if (vit_cait_scores_doc(c, l)) return vit_cait_scores_doc(c, l);
        return m->scores_doc ? m->scores_doc : "q k^T * scale before the softmax";
    case TRACE_Q_Q: return "per-head queries after the projection";
    case TRACE_Q_K:
        if (layer_sra(c, l)) return "per-head keys of the reduced grid (key_grid, row-major), after attn.kv";
        return m->k_doc ? m->k_doc : "per-head keys after the projection";
    case TRACE_Q_TOKENS: return "block output (residual stream after the MLP)";
    default: return vit_extra_info(c, l, q - TRACE_Q_X0, &x) ? x.description : "";
    }
}

typedef struct {
    hid_t q[TRACE_Q_COUNT][VIT_MAX_DEPTH]; /* [quantity][position in spec.layers] */
    hid_t path, label, pred, top5, top5_prob, logits, rgb, done;
    hid_t pool; /* pool/attn: the attention pooling's map (has_pool_attn) */
} trace_dsets;

/* 1 when the trace records /pool/attn: the attention pooling's map (global_pool "map"), (H, Np)
 * per image, with the maps (attn) and every head. */
static int has_pool_attn(const trace_spec *s) {
    return (s->quantities & (1u << TRACE_Q_ATTN)) && s->cfg.global_pool == VIT_POOL_MAP;
}

/* Values of one image's pool map: every head's row over the patches. */
static size_t pool_attn_values(const trace_spec *s) {
    return (size_t)s->cfg.num_heads * vit_num_patches(&s->cfg);
}

static size_t pool_attn_bytes(const trace_spec *s) { return pool_attn_values(s) * q_elt(s); }

static void dsets_init(trace_dsets *d) {
    for (int q = 0; q < TRACE_Q_COUNT; q++)
        for (int l = 0; l < VIT_MAX_DEPTH; l++) d->q[q][l] = -1;
    d->path = d->label = d->pred = d->top5 = d->top5_prob = d->logits = d->rgb = d->done = d->pool = -1;
}

static void dsets_close(trace_dsets *d) {
    for (int q = 0; q < TRACE_Q_COUNT; q++)
        for (int l = 0; l < VIT_MAX_DEPTH; l++)
            if (d->q[q][l] >= 0) H5Dclose(d->q[q][l]);
    hid_t *all[] = {&d->path, &d->label, &d->pred, &d->top5, &d->top5_prob, &d->logits, &d->rgb, &d->done, &d->pool};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (*all[i] >= 0) H5Dclose(*all[i]);
    dsets_init(d);
}

/* Records are chunked one image (and head) per chunk and written whole: caching them in HDF5
 * would only copy them once more. Per-image metadata (labels, logits, paths) is chunked many
 * images per chunk: without a cache every batch would read, patch and rewrite those chunks. */
static hid_t dset_access(int many_images_per_chunk) {
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    if (many_images_per_chunk) H5Pset_chunk_cache(dapl, 521, 1u << 20, 1.0);
    else H5Pset_chunk_cache(dapl, 0, 0, 1.0);
    return dapl;
}

/* Creates an extendible dataset of (0, dims...) with chunks of chunk0 images. */
/* split (records): the chunk's extent along the first axis after the image and head (0: all). */
/* early: chunks allocated when the dataset is extended, never filled (TRACE_DIRECT_MIN). */
static hid_t make_dset(hid_t loc, const char *name, hid_t type, int nd, const hsize_t *dims,
                       hsize_t chunk0, const trace_spec *s, int compress, int per_head,
                       hsize_t split, int early) {
    hsize_t cur[5] = {0}, max[5] = {H5S_UNLIMITED}, chunk[5] = {chunk0};
    for (int i = 0; i < nd; i++) {
        cur[i + 1] = max[i + 1] = dims[i];
        chunk[i + 1] = dims[i];
    }
    /* maps, q and k are chunked one head of one image per chunk: one map is one read */
    if (per_head) chunk[1] = 1;
    if (split) chunk[per_head ? 2 : 1] = split;
    hid_t space = H5Screate_simple(nd + 1, cur, max);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, nd + 1, chunk);
    if (early) {
        H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
        H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    }
    if (compress && s->compress == TRACE_COMPRESS_DEFLATE) {
        H5Pset_shuffle(dcpl);
        H5Pset_deflate(dcpl, (unsigned)s->level);
    } else if (compress && s->compress == TRACE_COMPRESS_LZ4) {
        unsigned cd[1] = {0}; /* default block size */
        H5Pset_shuffle(dcpl); /* byte-shuffled float16 exposes the exponents' redundancy */
        H5Pset_filter(dcpl, TRACE_LZ4_FILTER, H5Z_FLAG_MANDATORY, 1, cd);
    }
    hid_t dapl = dset_access(chunk0 > 1);
    hid_t d = H5Dcreate2(loc, name, type, space, H5P_DEFAULT, dcpl, dapl);
    H5Pclose(dapl);
    H5Pclose(dcpl);
    H5Sclose(space);
    return d;
}

static hid_t open_dset(hid_t loc, const char *name, hsize_t chunk0) {
    hid_t dapl = dset_access(chunk0 > 1);
    hid_t d = H5Dopen2(loc, name, dapl);
    H5Pclose(dapl);
    return d;
}

static void layer_group_name(char *buf, size_t n, int layer) { snprintf(buf, n, "layers/%02d", layer); }

/* A float32 or int32 dataset of the params group, with its description. */
static int params_dset(hid_t pg, const char *name, int is_int, int nd, const hsize_t *dims,
                       const void *v, const char *desc) {
    hid_t sp = H5Screate_simple(nd, dims, NULL);
    hid_t d = H5Dcreate2(pg, name, is_int ? H5T_STD_I32LE : H5T_IEEE_F32LE, sp, H5P_DEFAULT,
                         H5P_DEFAULT, H5P_DEFAULT);
    int rc = d < 0 || H5Dwrite(d, is_int ? H5T_NATIVE_INT : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL,
                               H5P_DEFAULT, v) < 0;
    if (d >= 0) rc |= h5u_attr_str(d, "description", desc) != 0;
    if (d >= 0) H5Dclose(d);
    H5Sclose(sp);
    return rc ? -1 : 0;
}

/* A WINDOW layer's static tables (derived from the config, so written with or without weights):
 * window_token (nW, M^2) and shift_mask (nW, M^2, M^2), over every window of the padded grid. */
static int window_params(hid_t pg, const trace_spec *s, int l) {
    vit_geom g;
    vit_block_geom(&s->cfg, l, &g);
    const size_t N = (size_t)g.M * g.M, W = (size_t)g.problems;
    int *tok = malloc(W * N * sizeof *tok);
    float *mask = malloc(W * N * N * sizeof *mask);
    int rc = -1;
    if (tok && mask) {
        vit_window_tokens(&s->cfg, &g, tok);
        vit_shift_mask(&s->cfg, &g, mask);
        const hsize_t dt[2] = {W, N}, dm[3] = {W, N, N};
        rc = params_dset(pg, "window_token", 1, 2, dt, tok, "window_token[w, i]: the flat grid token "
                         "(y * gw + x, prefix not counted) at row i (row-major in the window) of "
                         "window w (row-major over the shifted, padded grid); -1 for a pad slot");
        rc |= params_dset(pg, "shift_mask", 0, 3, dm, mask, "added to the scores of window w: 0 "
                          "where rows i and j come from the same region of the shifted, padded "
                          "grid, else mask_value (-100); all 0 without a shift");
    }
    /* The block's learnt relative table expanded as the engine adds it to each head's scores
     * (vit_relative_bias_expand); written when the weights are at hand. */
    const float *table = s->params ? s->params->blocks[l].rpb_table : NULL;
    float *bias = table && !rc ? malloc((size_t)g.H * N * N * sizeof *bias) : NULL;
    if (bias) {
        vit_relative_bias_expand(bias, table, g.H, g.M);
        const hsize_t db[3] = {(hsize_t)g.H, N, N};
        rc |= params_dset(pg, "relative_position_bias", 0, 3, db, bias, "relative_position_bias[h, "
                          "i, j]: what head h adds to the score of window row i for key row j "
                          "(the block's relative_position_bias_table expanded by Swin's "
                          "relative_position_index), before the shift mask");
    } else if (table && !rc) {
        rc = -1;
    }
    free(bias);
    free(tok);
    free(mask);
    return rc;
}

/* Version 3: where layer l's tokens are and how they group into attention problems. */
static int layer_geom_attrs(hid_t g, const trace_spec *s, const trace_layer_geom *t) {
    const vit_config *c = &s->cfg;
    int rc = 0;
    const int grid[2] = {t->gh, t->gw};
    rc |= h5u_attr_int(g, "stage", t->stage);
    rc |= h5u_attr_str(g, "scope", vit_scope_name(t->scope));
    rc |= h5u_attr_ints(g, "grid", grid, 2);
    rc |= h5u_attr_int(g, "embed_dim", t->D);
    rc |= h5u_attr_int(g, "num_heads", t->H);
    rc |= h5u_attr_int(g, "num_queries", t->Tq);
    rc |= h5u_attr_int(g, "num_keys", t->Tk);
    rc |= h5u_attr_int(g, "prefix_tokens", t->prefix);
    rc |= h5u_attr_floats(g, "token_stride_px", &t->stride_px, 1);
    rc |= h5u_attr_floats(g, "token_offset_px", &t->offset_px, 1);
    if (t->scope == VIT_SCOPE_SRA) { /* PVT v2: queries over the keys of a reduced grid */
        const int kg[2] = {t->kgh, t->kgw};
        vit_geom vg;
        vit_block_geom(c, t->layer, &vg);
        float centre[VIT_MAX_IMG > 4096 ? 4096 : VIT_MAX_IMG];
        for (int i = 0; i < t->kgh && i < 4096; i++) centre[i] = vit_sra_key_centre(&vg, i, 0);
        rc |= h5u_attr_ints(g, "key_grid", kg, 2);
        rc |= h5u_attr_floats(g, "key_stride_px", &t->key_stride_px, 1);
        rc |= h5u_attr_floats(g, "key_offset_px", &t->key_offset_px, 1);
        rc |= h5u_attr_floats(g, "key_centre_px", centre, t->kgh < 4096 ? t->kgh : 4096);
        rc |= t->sr_pool ? h5u_attr_int(g, "sr_pool", t->sr_pool) : h5u_attr_int(g, "sr_ratio", t->sr_ratio);
        return rc;
    }
    if (t->scope != VIT_SCOPE_WINDOW) return rc;
    const int padded[2] = {t->ph, t->pw}, nw[2] = {t->nwh, t->nww};
    const float mv = VIT_SHIFT_MASK_VALUE;
    rc |= h5u_attr_int(g, "window", t->M);
    rc |= h5u_attr_int(g, "shift", t->shift);
    rc |= h5u_attr_int(g, "num_windows", t->nwh * t->nww);
    rc |= h5u_attr_ints(g, "window_grid", nw, 2);
    rc |= h5u_attr_ints(g, "padded_grid", padded, 2);
    rc |= h5u_attr_str(g, "pad_order", vit_pad_order_name(c->pad_order));
    rc |= h5u_attr_str(g, "window_clamp", vit_window_clamp_name(c->window_clamp));
    rc |= h5u_attr_floats(g, "mask_value", &mv, 1);
    return rc;
}

/* A mechanism's trace attributes as HDF5 attributes of the layer group (ctx: its hid_t). */
typedef struct {
    vit_mech_writer w;
} attr_writer;
static hid_t attr_group(vit_mech_writer *w) { return *(const hid_t *)w->ctx; }
static void attr_num(vit_mech_writer *w, const char *key, double v) { w->failed |= h5u_attr_int(attr_group(w), key, (int)v) != 0; }
static void attr_bool(vit_mech_writer *w, const char *key, int v) { w->failed |= h5u_attr_int(attr_group(w), key, v) != 0; }
static void attr_str(vit_mech_writer *w, const char *key, const char *v) { w->failed |= h5u_attr_str(attr_group(w), key, v) != 0; }
static void attr_floats(vit_mech_writer *w, const char *key, const float *v, int n) {
    w->failed |= h5u_attr_floats(attr_group(w), key, v, n) != 0;
}
static void attr_nums(vit_mech_writer *w, const char *key, const double *v, int n) {
    int iv[VIT_MAX_MASK_HEADS];
    if (n > VIT_MAX_MASK_HEADS) { /* integer lists are per head */
        w->failed = 1;
        return;
    }
    for (int i = 0; i < n; i++) iv[i] = (int)v[i];
    w->failed |= h5u_attr_ints(attr_group(w), key, iv, n) != 0;
}

/* The layer group's attributes: its mechanism and every setting of it; with the model's weights,
 * the mechanism's learnt maps under params/ (full tables, as vit_static_fill gives them). */
static int layer_attrs(hid_t g, const trace_spec *s, int l) {
    const vit_config *c = &s->cfg;
    const vit_attn *a = &c->attn[l];
    int rc = 0;
    rc |= h5u_attr_int(g, "layer", l);
    rc |= h5u_attr_str(g, "mechanism", vit_attn_name(a->kind));
    trace_layer_geom t;
    spec_geom(s, l, &t);
    int ids[4096];
    rc |= h5u_attr_int(g, "num_tokens", t.T);
    rc |= h5u_attr_ints(g, "heads", ids, q_heads(s, TRACE_Q_ATTN, l, ids));
    if (spec_version(s) >= TRACE_FORMAT_VERSION_STAGED) rc |= layer_geom_attrs(g, s, &t);
    if (t.local_side) { /* attn_local / scores_local (docs/trace-format.md, "Local maps") */
        rc |= h5u_attr_str(g, "map_form", "local");
        rc |= h5u_attr_int(g, "local_side", t.local_side);
    }
    const vit_mech *m = vit_mech_of(c, l);
    if (vit_has_keys(c, l)) {
        const float scale = vit_attn_scale(c, l);
        /* a mechanism with its own product scale (LSLA's DS) states it in its attributes */
        if (!m->product_scale) rc |= h5u_attr_floats(g, "scale", &scale, 1);
        rc |= h5u_attr_int(g, "qk_head_dim", t.qk_dim);
    }
    attr_writer w = {{.ctx = &g, .num = attr_num, .floats = attr_floats, .boolean = attr_bool,
                      .str = attr_str, .nums = attr_nums}};
    if (m->trace_attrs) m->trace_attrs(c, s->params, l, &w.w);
    vit_cait_trace_attrs(c, l, &w.w); /* talking heads, signed maps, query rows "cls" */
    rc |= w.w.failed;
    vit_static st;
    const int learnt = s->params && vit_static_info(c, l, 0, NULL);
    if (!learnt && t.scope != VIT_SCOPE_WINDOW) return rc;
    hid_t pg = H5Gcreate2(g, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (pg < 0) return -1;
    if (t.scope == VIT_SCOPE_WINDOW) rc |= window_params(pg, s, l);
    for (int i = 0; learnt && vit_static_info(c, l, i, &st); i++) {
        hsize_t dims[3];
        size_t count = 1;
        for (int d = 0; d < st.ndim; d++) count *= (size_t)(dims[d] = (hsize_t)st.shape[d]);
        float *buf = malloc(count * sizeof *buf);
        hid_t sp = H5Screate_simple(st.ndim, dims, NULL);
        hid_t d = buf ? H5Dcreate2(pg, st.name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
        if (d >= 0) {
            vit_static_fill(c, s->params, l, i, buf);
            rc |= H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0;
            rc |= h5u_attr_str(d, "description", st.description);
            H5Dclose(d);
        } else {
            rc = -1;
        }
        H5Sclose(sp);
        free(buf);
    }
    H5Gclose(pg);
    return rc;
}

/* ---- dimension scales and strings (format version 2) -----------------------------------------
 * Every axis of every record is an HDF5 dimension scale in its group, so h5py's .dims, xarray
 * (h5netcdf) and netCDF-4 readers see named dimensions; the axes attribute stays for version 1
 * readers. Names differ where sizes do: q/k's width is qk_channel (tokens' is channel), Refiner's
 * expanded maps run over expanded_head. */

#define TRACE_NC_NOT_A_VARIABLE "This is a netCDF dimension but not a netCDF variable."

/* The named dimensions of a record of q in block l, outermost first. */
static const char *q_dims(const trace_spec *s, trace_quantity q, int l) {
    const vit_config *c = &s->cfg;
    if (q == TRACE_Q_TOKENS) return "image,token,channel";
    if (q_local(s, q, l)) return "image,head,query,slot";
    if (q == TRACE_Q_K && layer_sra(c, l)) return "image,head,key,qk_channel";
    if (q == TRACE_Q_Q && vit_mech_of(c, l) && c->family == VIT_FAMILY_CAIT) {
        vit_geom g; /* CaiT's class attention: q of the class token alone */
        vit_block_geom(c, l, &g);
        if (g.scope == VIT_SCOPE_CLASS) return "image,head,query,qk_channel";
    }
    if (q == TRACE_Q_Q || q == TRACE_Q_K) return "image,head,token,qk_channel";
    const int win = layer_windowed(c, l);
    if ((q == TRACE_Q_X0 || q == TRACE_Q_X1) && vit_mech_of(c, l)->maps)
        return win ? "image,expanded_head,window,query,key" : "image,expanded_head,query,key";
    return win ? "image,head,window,query,key" : "image,head,query,key";
}

/* The named dimensions of the per-image datasets under /images. */
static const char *images_dims(const char *name) {
    if (strcmp(name, "top5") == 0 || strcmp(name, "top5_prob") == 0) return "image,rank";
    if (strcmp(name, "logits") == 0) return "image,class";
    if (strcmp(name, "rgb") == 0) return "image,row,column,color";
    return "image";
}

/* Finds or creates the scale `name` of length n in group g. The image axis grows with the trace:
 * an unlimited dimension without values (netCDF's "dimension but not a variable", whose readers
 * take its length from the longest dataset on it). The others hold coordinates: values, or
 * 0..n-1 when values is NULL. Returns the open scale, or -1 (also when one of another length
 * exists). */
static hid_t dim_scale(hid_t g, const char *name, hsize_t n, int unlimited, const int *values) {
    if (H5Lexists(g, name, H5P_DEFAULT) > 0) {
        hid_t s = H5Dopen2(g, name, H5P_DEFAULT);
        hid_t sp = s >= 0 ? H5Dget_space(s) : -1;
        hsize_t have = 0;
        if (sp >= 0) H5Sget_simple_extent_dims(sp, &have, NULL);
        if (sp >= 0) H5Sclose(sp);
        if (s >= 0 && !unlimited && have != n) {
            H5Dclose(s);
            return -1;
        }
        return s;
    }
    hsize_t cur = unlimited ? 0 : n, max = unlimited ? H5S_UNLIMITED : n, chunk = 1024;
    hid_t sp = H5Screate_simple(1, &cur, &max), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (unlimited) H5Pset_chunk(dcpl, 1, &chunk);
    hid_t s = H5Dcreate2(g, name, H5T_STD_I32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Sclose(sp);
    if (s < 0) return -1;
    int rc = 0;
    if (unlimited) {
        char nm[96];
        snprintf(nm, sizeof nm, "%s%10d", TRACE_NC_NOT_A_VARIABLE, 0);
        rc |= H5DSset_scale(s, nm) < 0;
    } else {
        int *v = malloc((n ? n : 1) * sizeof *v);
        for (hsize_t i = 0; v && i < n; i++) v[i] = values ? values[i] : (int)i;
        rc |= !v || H5Dwrite(s, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0;
        free(v);
        rc |= H5DSset_scale(s, name) < 0;
    }
    if (rc) {
        H5Dclose(s);
        return -1;
    }
    return s;
}

/* Attaches dataset d's axes (dims: "image,head,query,key") to scales in its group g, and labels
 * them. Head axes take their coordinates from d's heads attribute. Returns 0, or -1. */
static int dims_attach(hid_t g, hid_t d, const char *dims) {
    hid_t sp = H5Dget_space(d);
    hsize_t ext[8];
    const int nd = sp >= 0 ? H5Sget_simple_extent_dims(sp, ext, NULL) : -1;
    if (sp >= 0) H5Sclose(sp);
    char buf[128];
    snprintf(buf, sizeof buf, "%s", dims);
    int axis = 0, rc = nd < 1 ? -1 : 0;
    for (char *save = NULL, *name = strtok_r(buf, ",", &save); name && rc == 0; name = strtok_r(NULL, ",", &save), axis++) {
        if (axis >= nd) {
            rc = -1;
            break;
        }
        int ids[TRACE_MAX_WINDOWS > 4096 ? TRACE_MAX_WINDOWS : 4096], *values = NULL;
        if (strstr(name, "head") && h5u_attr_read_int(d, "heads", ids, 4096) == (int)ext[axis]) values = ids;
        if (strcmp(name, "window") == 0 && h5u_attr_read_int(d, "windows", ids, TRACE_MAX_WINDOWS) == (int)ext[axis])
            values = ids;
        hid_t s = dim_scale(g, name, ext[axis], axis == 0, values);
        rc = s < 0 || H5DSattach_scale(d, s, (unsigned)axis) < 0 || H5DSset_label(d, (unsigned)axis, name) < 0 ? -1 : 0;
        if (s >= 0) H5Dclose(s);
    }
    return rc == 0 && axis == nd ? 0 : -1;
}

static herr_t write_rows(hid_t d, hid_t memtype, long start, int n, const void *buf);

/* Image paths as variable-length UTF-8 strings (format 2), or the fixed 1024-byte strings of
 * format 1 when resuming such a trace. */
static herr_t write_paths(hid_t d, long start, int n, char (*paths)[TRACE_PATH_LEN]) {
    hid_t ft = H5Dget_type(d);
    const int vlen = ft >= 0 && H5Tis_variable_str(ft) > 0;
    if (ft >= 0) H5Tclose(ft);
    hid_t mt = h5u_str_type(vlen ? 0 : TRACE_PATH_LEN);
    const char *ptr[TRACE_MAX_BATCH];
    for (int b = 0; b < n && vlen; b++) ptr[b] = paths[b];
    herr_t e = write_rows(d, mt, start, n, vlen ? (const void *)ptr : (const void *)paths);
    H5Tclose(mt);
    return e;
}

/* Reads n paths from index off into out, whichever string type the trace stores. */
static herr_t read_paths(hid_t d, hsize_t off, hsize_t n, char (*out)[TRACE_PATH_LEN]) {
    hid_t ft = H5Dget_type(d);
    const int vlen = ft >= 0 && H5Tis_variable_str(ft) > 0;
    if (ft >= 0) H5Tclose(ft);
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &n, NULL), mt = h5u_str_type(vlen ? 0 : TRACE_PATH_LEN);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &off, NULL, &n, NULL);
    herr_t e;
    if (vlen) {
        char **p = calloc(n ? n : 1, sizeof *p);
        e = p ? H5Dread(d, mt, ms, fs, H5P_DEFAULT, p) : -1;
        for (hsize_t i = 0; e >= 0 && i < n; i++) snprintf(out[i], TRACE_PATH_LEN, "%s", p[i] ? p[i] : "");
        if (e >= 0) H5Dvlen_reclaim(mt, ms, H5P_DEFAULT, p);
        free(p);
    } else {
        e = H5Dread(d, mt, ms, fs, H5P_DEFAULT, out);
        for (hsize_t i = 0; e >= 0 && i < n; i++) out[i][TRACE_PATH_LEN - 1] = 0;
    }
    H5Tclose(mt);
    H5Sclose(ms);
    H5Sclose(fs);
    return e;
}

/* Creates (create = 1) or opens every dataset of the spec. Returns 0 on success. */
static int layout(hid_t f, const trace_spec *s, trace_dsets *d, int create) {
    const vit_config *c = &s->cfg;
    hid_t store = s->f16 ? h5u_f16_type() : H5Tcopy(H5T_IEEE_F32LE);
    hid_t pstr = h5u_str_type(0);
    int ok = 1;
    if (create) {
        hid_t g = H5Gcreate2(f, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        ok &= g >= 0;
        if (g >= 0) H5Gclose(g);
    }
    for (int li = 0; li < s->n_layers && ok; li++) {
        char gname[32];
        layer_group_name(gname, sizeof gname, s->layers[li]);
        hid_t g = create ? H5Gcreate2(f, gname, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
                         : H5Gopen2(f, gname, H5P_DEFAULT);
        if (g < 0) {
            ok = 0;
            break;
        }
        const int l = s->layers[li];
        if (create) ok &= layer_attrs(g, s, l) == 0;
        for (int q = 0; q < TRACE_Q_COUNT && ok; q++) {
            if (!(s->quantities & (1u << q)) || !q_in_layer(c, (trace_quantity)q, l)) continue;
            const char *dn = q_dset_name(s, (trace_quantity)q, l);
            if (create) {
                hsize_t dims[4];
                int nd = q_shape(s, (trace_quantity)q, l, dims), ids[4096];
                d->q[q][li] = make_dset(g, dn, store, nd, dims, 1, s, 1, q != TRACE_Q_TOKENS,
                                        record_split(s, (trace_quantity)q, l),
                                        record_direct(s, (trace_quantity)q, l));
                if (d->q[q][li] >= 0) {
                    h5u_attr_str(d->q[q][li], "axes", q_axes(s, (trace_quantity)q, l));
                    h5u_attr_str(d->q[q][li], "description", q_description(s, (trace_quantity)q, l));
                    if (q != TRACE_Q_TOKENS)
                        h5u_attr_ints(d->q[q][li], "heads", ids, q_heads(s, (trace_quantity)q, l, ids));
                    if (is_map((trace_quantity)q) && nd == 4) {
                        trace_layer_geom t;
                        spec_geom(s, l, &t);
                        for (int k = 0; k < t.n_problems && k < 4096; k++) ids[k] = s->n_windows ? s->windows[k] : k;
                        h5u_attr_ints(d->q[q][li], "windows", ids, t.n_problems);
                    }
                    ok &= dims_attach(g, d->q[q][li], q_dims(s, (trace_quantity)q, l)) == 0;
                }
            } else {
                d->q[q][li] = open_dset(g, dn, 1);
            }
            ok &= d->q[q][li] >= 0;
        }
        H5Gclose(g);
    }
    if (ok) {
        hid_t g = create ? H5Gcreate2(f, "images", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
                         : H5Gopen2(f, "images", H5P_DEFAULT);
        ok = g >= 0;
        const int S = c->img_size, C = c->num_classes, k5 = C < 5 ? C : 5;
        hsize_t d_none[1], d_k5[1] = {(hsize_t)(k5 > 0 ? k5 : 1)}, d_c[1] = {(hsize_t)(C > 0 ? C : 1)};
        hsize_t d_rgb[3] = {(hsize_t)S, (hsize_t)S, 3};
        struct {
            hid_t *id;
            const char *name;
            hid_t type;
            int nd;
            hsize_t *dims;
            hsize_t chunk0;
            int present;
            const char *desc;
        } tab[] = {
            {&d->path, "path", pstr, 0, d_none, 64, 1, "source file (or tensor file[index])"},
            {&d->label, "label", H5T_NATIVE_INT, 0, d_none, 1024, 1, "class index, -1 if unknown"},
            {&d->done, "done", H5T_NATIVE_UCHAR, 0, d_none, 1024, 1,
             "1 once every record of this image is stored; readers count leading ones"},
            {&d->pred, "pred", H5T_NATIVE_INT, 0, d_none, 1024, C > 0, "argmax of logits"},
            {&d->top5, "top5", H5T_NATIVE_INT, 1, d_k5, 256, C > 0, "top-5 classes, best first"},
            {&d->top5_prob, "top5_prob", H5T_NATIVE_FLOAT, 1, d_k5, 256, C > 0, "their softmax probabilities"},
            {&d->logits, "logits", H5T_NATIVE_FLOAT, 1, d_c, 16, C > 0, "classifier output"},
            {&d->rgb, "rgb", H5T_NATIVE_UCHAR, 3, d_rgb, 1, 1,
             "the preprocessed input (after resize and crop, before normalisation), (H, W, RGB)"},
        };
        for (size_t i = 0; ok && i < sizeof tab / sizeof tab[0]; i++) {
            if (!tab[i].present) continue;
            if (create) {
                *tab[i].id = make_dset(g, tab[i].name, tab[i].type, tab[i].nd, tab[i].dims,
                                       tab[i].chunk0, s, 0, 0, 0, 0);
                if (*tab[i].id >= 0) h5u_attr_str(*tab[i].id, "description", tab[i].desc);
                if (*tab[i].id >= 0) ok &= dims_attach(g, *tab[i].id, images_dims(tab[i].name)) == 0;
            } else {
                *tab[i].id = open_dset(g, tab[i].name, tab[i].chunk0);
            }
            ok &= *tab[i].id >= 0;
        }
        if (create && ok && s->n_class_names > 0) h5u_attr_strs(g, "class_names", (const char *const *)s->class_names, s->n_class_names);
        if (g >= 0) H5Gclose(g);
    }
    /* /pool/attn (image, head, 1, Np); a trace from before it, resumed, stays without one */
    if (ok && has_pool_attn(s) && (create || H5Lexists(f, "pool", H5P_DEFAULT) > 0)) {
        const int H = c->num_heads, gh = vit_grid(c), Np = vit_num_patches(c);
        hid_t g = create ? H5Gcreate2(f, "pool", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
                         : H5Gopen2(f, "pool", H5P_DEFAULT);
        ok = g >= 0;
        if (ok && create) {
            hsize_t dims[3] = {(hsize_t)H, 1, (hsize_t)Np};
            d->pool = make_dset(g, "attn", store, 3, dims, 1, s, 1, 0, 0, 0);
            int heads[1024], grid[2] = {gh, Np / gh};
            for (int h = 0; h < H && h < 1024; h++) heads[h] = h;
            ok = d->pool >= 0 && h5u_attr_str(d->pool, "axes", "image,head,query,key") == 0 &&
                 h5u_attr_str(d->pool, "description", "the attention pooling's map (global_pool \"map\", "
                              "timm's AttentionPoolLatent): per head, softmax(q k^T / sqrt(d)) of its one "
                              "learnt query (attn_pool.latent) over the patch tokens after the final norm") == 0 &&
                 h5u_attr_str(d->pool, "keys", "patch tokens, row-major over grid; prefix tokens "
                              "(class, registers) excluded") == 0 &&
                 h5u_attr_ints(d->pool, "grid", grid, 2) == 0 && h5u_attr_ints(d->pool, "heads", heads, H) == 0;
        } else if (ok) {
            d->pool = open_dset(g, "attn", 1);
            ok = d->pool >= 0;
        }
        if (g >= 0) H5Gclose(g);
    }
    H5Tclose(pstr);
    H5Tclose(store);
    return ok ? 0 : -1;
}

/* "attn,scores,internals": the root attribute naming what was recorded */
static void quantities_str(unsigned quantities, char *q, size_t n) {
    q[0] = 0;
    for (int i = 0; i < TRACE_Q_COUNT; i++)
        if ((quantities & (1u << i)) && i != TRACE_Q_X1)
            snprintf(q + strlen(q), n - strlen(q), "%s%s", q[0] ? "," : "", trace_q_names[i]);
}

/* ---- provenance and navigation attributes (format version 2) --------------------------------- */

static const char *nz(const char *s) { return s ? s : ""; }

/* What the trace was made from and how: the weights' hash beside their resolved path, and the
 * BLAS kernels and threads (bit-identical results need the same ones); the layer groups' names,
 * so a reader need not build "layers/%02d" itself. */
static int write_provenance_attrs(hid_t f, const trace_spec *s) {
    int rc = 0;
    rc |= h5u_attr_str(f, "model_sha256", nz(s->model_sha256));
    rc |= h5u_attr_str(f, "blas_core", nz(s->blas_core));
    rc |= h5u_attr_str(f, "blas_config", nz(s->blas_config));
    rc |= h5u_attr_str(f, "blas_forced_by", nz(s->blas_forced));
    rc |= h5u_attr_str(f, "linear_gemm", s->gemm ? s->gemm : "OpenBLAS");
    rc |= h5u_attr_str(f, "precision", s->bf16 ? "bfloat16" : "float32");
    const trace_precision *p = &s->precision;
    if (s->bf16 && p->checked) { /* docs/trace-format.md: what bfloat16 did to the first image */
        rc |= h5u_attr_ints(f, "bf16_check_layers", p->layers, p->n_layers);
        rc |= h5u_attr_doubles(f, "bf16_output_max_abs_err", &p->out_max_abs, 1);
        rc |= h5u_attr_doubles(f, "bf16_output_max_abs", &p->out_max, 1);
        rc |= h5u_attr_doubles(f, "bf16_attn_max_abs_err", &p->attn_max_abs, 1);
        rc |= h5u_attr_doubles(f, "bf16_attn_mean_abs_err", &p->attn_mean_abs, 1);
        rc |= h5u_attr_int(f, "bf16_top1_same", p->top1_same);
    }
    rc |= h5u_attr_int(f, "threads", s->threads);
    char names[VIT_MAX_DEPTH][16];
    const char *ptr[VIT_MAX_DEPTH];
    for (int i = 0; i < s->n_layers; i++) {
        layer_group_name(names[i], sizeof names[i], s->layers[i]);
        ptr[i] = names[i];
    }
    if (s->n_layers > 0) rc |= h5u_attr_strs(f, "layer_groups", ptr, s->n_layers);
    return rc;
}

/* A resumed trace must come from the same weights (same config alone is not the same model);
 * a resume under other kernels or threads is noted in resumed_with, since its later images may
 * differ from a single run's in the last bits. */
static as_status resume_weights(hid_t f, const trace_spec *s, const char *path, as_error *err) {
    char had[80] = "";
    h5u_attr_read_str(f, "model_sha256", had, sizeof had);
    if (had[0] && s->model_sha256 && s->model_sha256[0] && strcmp(had, s->model_sha256) != 0)
        return as_fail(err, AS_ERR_ARG, "%s: recorded from weights with sha256 %.12s..., these "
                       "have %.12s...: resume with the same --model or write a new trace", path,
                       had, s->model_sha256);
    return AS_OK;
}

/* After every check passed (resume_weights among them): note other kernels or threads. */
static as_status resume_provenance(hid_t f, const trace_spec *s, const char *path, as_error *err) {
    char core[64] = "", gemm[288] = "OpenBLAS", note[512] = "";
    int threads = 0;
    const char *ours = s->gemm ? s->gemm : "OpenBLAS";
    h5u_attr_read_str(f, "blas_core", core, sizeof core);
    h5u_attr_read_str(f, "linear_gemm", gemm, sizeof gemm); /* traces before it: OpenBLAS */
    h5u_attr_read_int(f, "threads", &threads, 1);
    if (strcmp(core, nz(s->blas_core)) == 0 && threads == s->threads && strcmp(gemm, ours) == 0) return AS_OK;
    h5u_attr_read_str(f, "resumed_with", note, sizeof note);
    char now[32];
    h5u_iso_now(now, sizeof now);
    snprintf(note + strlen(note), sizeof note - strlen(note), "%s%s: linear layers on %s, OpenBLAS %s kernels, %d threads",
             note[0] ? "; " : "", now, ours, nz(s->blas_core), s->threads);
    return h5u_attr_str(f, "resumed_with", note) == 0 ? AS_OK
           : as_fail(err, AS_ERR_HDF5, "%s: cannot update its attributes for --resume", path);
}

/* Version 3's root: the model's stages, one entry per stage (stage_grid: rows, columns each). */
static int stage_root_attrs(hid_t f, const trace_spec *s) {
    const vit_config *c = &s->cfg;
    const int S = vit_num_stages(c);
    int of_layer[VIT_MAX_DEPTH], grid[2 * VIT_MAX_STAGES], dim[VIT_MAX_STAGES], heads[VIT_MAX_STAGES];
    float stride[VIT_MAX_STAGES];
    for (int l = 0; l < c->depth && l < VIT_MAX_DEPTH; l++) {
        vit_geom g;
        vit_block_geom(c, l, &g);
        of_layer[l] = g.stage;
    }
    for (int st = 0; st < S; st++) {
        vit_geom g;
        vit_block_geom(c, vit_stage_first_block(c, st), &g);
        grid[2 * st] = g.gh, grid[2 * st + 1] = g.gw;
        dim[st] = g.D, heads[st] = g.H, stride[st] = g.stride_px;
    }
    int rc = 0;
    rc |= h5u_attr_str(f, "model_family", vit_family_name(c->family));
    rc |= h5u_attr_int(f, "num_stages", S);
    rc |= h5u_attr_ints(f, "stage_of_layer", of_layer, c->depth);
    hsize_t gd[2] = {(hsize_t)S, 2};
    hid_t sp = H5Screate_simple(2, gd, NULL);
    rc |= h5u_attr_write(f, "stage_grid", H5T_NATIVE_INT, sp, grid);
    H5Sclose(sp);
    rc |= h5u_attr_ints(f, "stage_dim", dim, S);
    rc |= h5u_attr_ints(f, "stage_heads", heads, S);
    rc |= h5u_attr_floats(f, "stage_stride_px", stride, S);
    return rc;
}

static int write_root_attrs(hid_t f, const trace_spec *s) {
    const vit_config *c = &s->cfg;
    char q[128] = "", now[32], *json = NULL;
    quantities_str(s->quantities, q, sizeof q);
    h5u_iso_now(now, sizeof now);
    json = model_config_to_json(c);
    int grid[2] = {vit_grid(c), vit_grid(c)};
    char prefix[VIT_MAX_REG * 6 + 16];
    vit_prefix_names(c, prefix, sizeof prefix); /* "cls", "cls,dist", "cls,reg0,reg1", ... */
    char comp[64];
    if (s->compress == TRACE_COMPRESS_DEFLATE) snprintf(comp, sizeof comp, "deflate-%d+shuffle", s->level);
    else if (s->compress == TRACE_COMPRESS_LZ4) snprintf(comp, sizeof comp, "lz4+shuffle");
    else snprintf(comp, sizeof comp, "%s", trace_c_names[s->compress]);
    int rc = 0;
    rc |= h5u_attr_str(f, "format", TRACE_FORMAT);
    rc |= h5u_attr_int(f, "format_version", spec_version(s));
    rc |= h5u_attr_str(f, "software", "attnscope " ATTNSCOPE_VERSION);
    rc |= h5u_attr_str(f, "command_line", s->command_line ? s->command_line : "");
    if (s->training) rc |= h5u_attr_str(f, "training", s->training);
    rc |= h5u_attr_str(f, "start_time", now);
    rc |= h5u_attr_str(f, "end_time", "");
    rc |= h5u_attr_int(f, "complete", 0);
    rc |= h5u_attr_str(f, "interrupted", "");
    rc |= h5u_attr_int64(f, "num_images", 0);
    rc |= h5u_attr_str(f, "model_arch", c->name);
    rc |= h5u_attr_str(f, "model_config", json ? json : "{}");
    rc |= h5u_attr_str(f, "model_source", s->model_source ? s->model_source : "");
    rc |= h5u_attr_str(f, "weights_dtype", s->weights_dtype ? s->weights_dtype : "");
    rc |= h5u_attr_int(f, "img_size", c->img_size);
    rc |= h5u_attr_int(f, "patch_size", c->patch_size);
    if (spec_version(s) >= TRACE_FORMAT_VERSION_STAGED) {
        /* no grid, num_tokens, embed_dim, num_heads or head_dim: they differ between layers, and
         * a version 2 reader must refuse this trace rather than take stage 0's for all */
        rc |= stage_root_attrs(f, s);
    } else {
        rc |= h5u_attr_ints(f, "grid", grid, 2);
        rc |= h5u_attr_int(f, "num_tokens", vit_num_tokens(c));
        rc |= h5u_attr_int(f, "embed_dim", c->embed_dim);
        rc |= h5u_attr_int(f, "num_heads", c->num_heads);
        rc |= h5u_attr_int(f, "head_dim", vit_head_dim(c));
    }
    rc |= h5u_attr_int(f, "num_prefix_tokens", vit_num_prefix(c));
    rc |= h5u_attr_str(f, "prefix_tokens", prefix);
    rc |= h5u_attr_int(f, "depth", c->depth);
    rc |= h5u_attr_int(f, "num_classes", c->num_classes);
    rc |= h5u_attr_floats(f, "mean", c->mean, 3);
    rc |= h5u_attr_floats(f, "std", c->std, 3);
    rc |= h5u_attr_str(f, "quantities", q);
    rc |= h5u_attr_ints(f, "layers", s->layers, s->n_layers);
    if (!s->heads_all) rc |= h5u_attr_ints(f, "heads", s->heads, s->n_heads);
    if (s->n_windows > 0) rc |= h5u_attr_ints(f, "windows", s->windows, s->n_windows);
    rc |= h5u_attr_str(f, "query_rows", s->prefix_rows_only ? "prefix" : "all");
    rc |= h5u_attr_str(f, "dtype", s->f16 ? "float16" : "float32");
    rc |= h5u_attr_str(f, "compression", comp);
    rc |= write_provenance_attrs(f, s);
    free(json);
    return rc;
}

/* ---- writer --------------------------------------------------------------------------------- */

struct trace_writer {
    trace_spec spec;
    char path[1024];
    hid_t file;
    trace_dsets d;
    long done;          /* images whose data is written */
    long flagged;       /* images whose done flag is written (<= done; see flag_done) */
    double flag_time;   /* when flag_done last ran (CLOCK_MONOTONIC seconds) */
    double cpu_s;       /* the writer thread's CPU time after its last batch */
    /* The per-image rows of the small datasets (path, label, logits, prediction, top 5) of the
     * images written since the last flag_done, which writes them with one call per dataset: six
     * HDF5 writes per batch cost 0.25 ms, 1.4% of a DeiT-Tiny image at batch 1. */
    struct {
        long start;     /* image index of row 0 */
        int n;          /* rows held, <= TRACE_MAX_BATCH */
        char (*path)[TRACE_PATH_LEN];
        int *label, *pred, *top5;
        float *logits, *prob;
    } meta;
    off_t reserved;     /* the file is allocated up to here (reserve_space) */
    size_t meta_bytes;  /* upper bound of one image's small rows in the file */
    trace_slot slots[TRACE_SLOTS];
    void *slot_mem[TRACE_SLOTS];
    trace_slot *free_q[TRACE_SLOTS], *ready_q[TRACE_SLOTS];
    int nfree, nready, ready_head;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, failed, thread_started;
    as_error err;
    pthread_t thread;
    void *stage;
    size_t stage_bytes;
    size_t image_bytes; /* upper bound of the bytes one image adds to the file */
    int lock_fd;        /* the claim on the output (atomic_lock_fd) for the run's duration */
    int dio_fd;         /* the trace opened with O_DIRECT (TRACE_DIRECT_MIN), or -1 */
    double direct_bytes; /* written through dio_fd (the writer thread's count) */
    double direct_bytes_seen; /* its value after the last batch, under mu */
};

/* Space for the next batch is allocated in the file before anything of it is written. Why: a
 * full disk in the middle of an HDF5 write can leave metadata that points past the end of the
 * file (unopenable); failing here instead leaves the file exactly as after the last batch. The
 * reserve also covers the end-state attributes written at close. */
#define TRACE_RESERVE_BYTES (2u << 20)

static int reserve_space(trace_writer *w, int n, int *err_no) {
    haddr_t eoa = 0;
    int *fd = NULL;
    if (H5Fget_eoa(w->file, &eoa) < 0 || H5Fget_vfd_handle(w->file, H5P_DEFAULT, (void **)&fd) < 0 || !fd) {
        *err_no = EIO;
        return -1;
    }
    /* this batch, the small rows still held for flag_done (w->meta), and the end state */
    off_t want = (off_t)eoa + (off_t)(w->image_bytes * (size_t)n) + (off_t)(w->meta_bytes * (size_t)w->meta.n) +
                 TRACE_RESERVE_BYTES;
    *err_no = 0;
    if (want <= w->reserved) return 0;
    /* ahead by 16 batches (or 64 MB) when the disk has it, so that most batches need no call;
     * else exactly what this one needs (close gives back what is left) */
    off_t ahead = (off_t)(w->image_bytes * (size_t)n) * 16;
    if (ahead < ((off_t)64 << 20)) ahead = (off_t)64 << 20;
    if (posix_fallocate(*fd, 0, want + ahead) == 0) {
        w->reserved = want + ahead;
        return 0;
    }
    int rc = posix_fallocate(*fd, 0, want);
    *err_no = rc;
    if (rc == 0) w->reserved = want;
    return rc == 0 ? 0 : -1;
}

size_t trace_slot_bytes(const trace_spec *s) {
    const vit_config *c = &s->cfg;
    size_t per_image = 0;
    for (int q = 0; q < TRACE_Q_COUNT; q++)
        for (int li = 0; li < s->n_layers && (s->quantities & (1u << q)); li++)
            per_image += q_engine_floats(s, (trace_quantity)q, s->layers[li]) * 4;
    if (has_pool_attn(s)) per_image += pool_attn_values(s) * 4;
    per_image += (size_t)(c->num_classes > 0 ? c->num_classes : 1) * 4;
    per_image += (size_t)c->img_size * c->img_size * 3 + TRACE_PATH_LEN + sizeof(int) + 64 * 8;
    return per_image * (size_t)s->batch;
}

/* The record arrays of a slot, indexed by trace_quantity. */
static void slot_arrays(trace_slot *sl, float ***arrs[TRACE_Q_COUNT]) {
    arrs[TRACE_Q_ATTN] = &sl->rec.attn;
    arrs[TRACE_Q_SCORES] = &sl->rec.scores;
    arrs[TRACE_Q_Q] = &sl->rec.q;
    arrs[TRACE_Q_K] = &sl->rec.k;
    arrs[TRACE_Q_TOKENS] = &sl->rec.tokens;
    arrs[TRACE_Q_X0] = &sl->rec.extra[0];
    arrs[TRACE_Q_X1] = &sl->rec.extra[1];
}

/* The values from one head's binary16 map to the next in the engine's buffer: padded to
 * TRACE_DIRECT_ALIGN when the maps are written with O_DIRECT, else packed (0). A monolithic
 * model's maps all have one size. */
static size_t slot_attn16_stride(const trace_spec *s) {
    const vit_config *c = &s->cfg;
    if (!(s->quantities & (1u << TRACE_Q_ATTN)) || !s->f16) return 0;
    for (int li = 0; li < s->n_layers; li++) {
        const int l = s->layers[li];
        if (vit_attn16_ok(c, l) && record_direct(s, TRACE_Q_ATTN, l)) {
            const size_t TT = (size_t)vit_num_tokens(c) * vit_num_tokens(c);
            return align_up(TT * 2, TRACE_DIRECT_ALIGN) / 2;
        }
    }
    return 0;
}

/* Carves slot sl's buffers out of mem (NULL: only counts) and returns the bytes used. Buffers
 * start at 64 bytes, the binary16 maps written with O_DIRECT at TRACE_DIRECT_ALIGN. */
static size_t slot_carve(const trace_spec *s, trace_slot *sl, char *mem) {
    const vit_config *c = &s->cfg;
    const size_t B = (size_t)s->batch, a16 = slot_attn16_stride(s);
    size_t off = 0;
#define TAKE(ptr, nbytes, align)                                             \
    do {                                                                     \
        off = align_up(off, (align));                                        \
        if (mem) (ptr) = (void *)(mem + off);                                \
        off += align_up((size_t)(nbytes), 64);                               \
    } while (0)
    float ***arrs[TRACE_Q_COUNT];
    if (mem) memset(sl, 0, sizeof *sl);
    slot_arrays(sl, arrs);
    for (int q = 0; q < TRACE_Q_COUNT; q++) {
        if (!(s->quantities & (1u << q))) continue;
        TAKE(*arrs[q], (size_t)c->depth * sizeof(float *), 64);
        for (int l = 0; mem && l < c->depth; l++) (*arrs[q])[l] = NULL;
        if (q == TRACE_Q_ATTN && s->f16) {
            TAKE(sl->rec.attn16, (size_t)c->depth * sizeof(uint16_t *), 64);
            for (int l = 0; mem && l < c->depth; l++) sl->rec.attn16[l] = NULL;
            sl->rec.attn16_stride = a16;
        }
        for (int li = 0; li < s->n_layers; li++) {
            const int l = s->layers[li];
            const size_t f = q_engine_floats(s, (trace_quantity)q, l);
            if (!f || !q_in_layer(c, (trace_quantity)q, l)) continue;
            if (q == TRACE_Q_ATTN && s->f16 && vit_attn16_ok(c, l)) {
                const size_t heads = q_engine_heads(c, TRACE_Q_ATTN, l);
                const size_t per_image = a16 ? heads * a16 : f;
                TAKE(sl->rec.attn16[l], B * per_image * 2, a16 ? TRACE_DIRECT_ALIGN : 64);
            } else {
                TAKE((*arrs[q])[l], B * f * 4, 64);
            }
        }
    }
    if (mem) sl->rec.local_maps = !s->dense_maps && !s->prefix_rows_only; /* spec_local's blocks */
    if (has_pool_attn(s)) TAKE(sl->rec.pool_attn, B * pool_attn_values(s) * 4, 64);
    TAKE(sl->logits, B * (size_t)(c->num_classes > 0 ? c->num_classes : 1) * 4, 64);
    TAKE(sl->rgb, B * (size_t)c->img_size * c->img_size * 3, 64);
    TAKE(sl->paths, B * TRACE_PATH_LEN, 64);
    TAKE(sl->labels, B * sizeof(int), 64);
#undef TAKE
    return off;
}

static int slot_alloc(trace_writer *w, int i) {
    trace_slot *sl = &w->slots[i];
    const size_t bytes = align_up(slot_carve(&w->spec, sl, NULL), TRACE_DIRECT_ALIGN);
    char *mem = aligned_alloc(TRACE_DIRECT_ALIGN, bytes);
    if (!mem) return 0;
    /* touch every page now, at open, rather than in the first batches of the run */
    memset(mem, 0, bytes);
    w->slot_mem[i] = mem;
    return slot_carve(&w->spec, sl, mem) <= bytes;
}

/* The engine's buffer of one quantity of one block: float32, or binary16 (vit_record.attn16). */
typedef struct {
    const float *f32;
    const uint16_t *f16;
    size_t f16_stride; /* values from one head's f16 map to the next (0: packed) */
} engine_buf;

/* Copies (same precision) or converts (float32 to a float16 trace) count values from position
 * i of the engine's buffer to position o (in values) of the staging buffer. */
static void stage_put(trace_writer *w, size_t o, engine_buf src, size_t i, size_t count) {
    if (src.f16) memcpy((uint16_t *)w->stage + o, src.f16 + i, count * 2);
    else if (w->spec.f16) kernels_f32_to_f16_array((uint16_t *)w->stage + o, src.f32 + i, count);
    else memcpy((float *)w->stage + o, src.f32 + i, count * 4);
}

/* Block l's quantity for n images as the trace stores it, selecting heads, query rows (prefix
 * rows of a GLOBAL block) and windows (WINDOW blocks), and returns where it lies, one stored
 * chunk every record_chunk_stride bytes: the engine's own buffer when that is already the stored
 * record (binary16 maps of every head and row), else the staging buffer it was converted into.
 * The engine's buffer holds every head: maps (n, H, problems, Tq, Tk), q/k (n, H, T, dq),
 * tokens (n, T, D). */
static const void *stage_layer(trace_writer *w, trace_quantity q, int l, engine_buf src, int n) {
    const trace_spec *s = &w->spec;
    const vit_config *c = &s->cfg;
    vit_geom g;
    vit_block_geom(c, l, &g);
    const size_t out = record_chunk_stride(s, q, l) / q_elt(s); /* values from chunk to chunk */
    if (q == TRACE_Q_TOKENS) {
        for (int b = 0; b < n; b++) stage_put(w, (size_t)b * out, src, (size_t)b * g.T * g.D, (size_t)g.T * g.D);
        return w->stage;
    }
    int ids[4096];
    const int nh = q_heads(s, q, l, ids);
    const size_t H = q_engine_heads(c, q, l);
    /* one window's map, or the whole global map (local records: S^2 + 1 per row) */
    const size_t problem = (size_t)g.Tq * map_cols(s, q, l, g.Tk);
    const size_t per_head = is_map(q) ? (size_t)g.problems * problem
                                      : (size_t)key_rows(&g, q) * vit_qk_head_dim(c, l);
    const size_t src_head = src.f16 && src.f16_stride ? src.f16_stride : per_head;
    const int windows = is_map(q) && g.scope == VIT_SCOPE_WINDOW;
    /* contiguous in a head: the first rows (global maps), or all of q/k */
    const size_t block = !is_map(q) ? per_head : s->prefix_rows_only ? (size_t)g.prefix * g.Tk : problem;
    int in_order = (size_t)nh == H;
    for (int hi = 0; hi < nh && in_order; hi++) in_order = ids[hi] == hi;
    if (src.f16 && in_order && block == per_head && (!windows || s->n_windows <= 0) && src_head == out)
        return src.f16; /* every head's whole record in the engine's order, already binary16 */
    for (int b = 0; b < n; b++)
        for (int hi = 0; hi < nh; hi++) {
            const size_t hsrc = ((size_t)b * H + (size_t)ids[hi]) * src_head;
            size_t o = ((size_t)b * nh + hi) * out;
            if (!windows) {
                stage_put(w, o, src, hsrc, block);
                continue;
            }
            const int nw = s->n_windows > 0 ? s->n_windows : g.problems;
            for (int k = 0; k < nw; k++, o += problem)
                stage_put(w, o, src, hsrc + (size_t)(s->n_windows > 0 ? s->windows[k] : k) * problem, problem);
        }
    return w->stage;
}

static herr_t write_rows(hid_t d, hid_t memtype, long start, int n, const void *buf) {
    hid_t fs = H5Dget_space(d);
    int nd = H5Sget_simple_extent_ndims(fs);
    hsize_t dims[5], off[5] = {0}, cnt[5];
    H5Sget_simple_extent_dims(fs, dims, NULL);
    off[0] = (hsize_t)start;
    cnt[0] = (hsize_t)n;
    for (int i = 1; i < nd; i++) cnt[i] = dims[i];
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, off, NULL, cnt, NULL);
    hid_t ms = H5Screate_simple(nd, cnt, NULL);
    herr_t e = H5Dwrite(d, memtype, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    return e;
}

/* Writes all of n bytes at file offset at. */
static int pwrite_all(int fd, const unsigned char *p, size_t n, off_t at) {
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = EIO;
            return -1;
        }
        p += k, n -= (size_t)k, at += k;
    }
    return 0;
}

/* Writes one chunk at the address HDF5 allocated for it, with O_DIRECT up to its last whole
 * TRACE_DIRECT_ALIGN block and the rest through HDF5's own descriptor (TRACE_DIRECT_MIN).
 * Returns 0 when written, 1 when it cannot be done that way (the caller uses H5Dwrite_chunk),
 * -1 on an I/O error (errno). */
static int write_direct(trace_writer *w, hid_t d, const hsize_t *off, const unsigned char *p, size_t bytes) {
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    int *fd = NULL;
    if (w->dio_fd < 0 || (uintptr_t)p % TRACE_DIRECT_ALIGN != 0 ||
        H5Dget_chunk_info_by_coord(d, off, &mask, &addr, &size) < 0 || addr == HADDR_UNDEF ||
        size != bytes || addr % TRACE_DIRECT_ALIGN != 0 ||
        H5Fget_vfd_handle(w->file, H5P_DEFAULT, (void **)&fd) < 0 || !fd)
        return 1;
    const size_t whole = bytes / TRACE_DIRECT_ALIGN * TRACE_DIRECT_ALIGN;
    size_t done = 0;
    while (done < whole) {
        ssize_t k = pwrite(w->dio_fd, p + done, whole - done, (off_t)(addr + done));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno == EINVAL && w->direct_bytes == 0 && done == 0) {
            /* opened, but this file system takes no O_DIRECT writes: the page cache it is */
            close(w->dio_fd);
            w->dio_fd = -1;
            return 1;
        }
        if (k < 0) return -1;
        if (k == 0 || (size_t)k % TRACE_DIRECT_ALIGN != 0) {
            done += (size_t)k; /* a short write: the rest through the page cache */
            break;
        }
        done += (size_t)k;
    }
    w->direct_bytes += (double)done;
    return pwrite_all(*fd, p + done, bytes - done, (off_t)(addr + done));
}

/* Writes n images of per_image chunks of chunk_bytes each, stride bytes apart in buf. Why
 * H5Dwrite_chunk: a chunk is exactly one record, so HDF5's selection and type machinery has
 * nothing to do; going through it cost ~1 ms per 150 kB image here. Filtered (compressed) and
 * split datasets go through H5Dwrite (stride == chunk_bytes) so that HDF5 applies the filters
 * and cuts the pieces. Chunks of TRACE_DIRECT_MIN bytes and more go through write_direct. */
static herr_t write_chunks(trace_writer *w, hid_t d, hid_t memtype, long start, int n, int per_image,
                           size_t chunk_bytes, size_t stride, const void *buf, int filtered, int *err_no) {
    if (filtered) {
        assert(stride == chunk_bytes);
        return write_rows(d, memtype, start, n, buf);
    }
    hsize_t off[5] = {0};
    const unsigned char *p = buf;
    const int direct = chunk_bytes >= direct_min(&w->spec);
    for (int b = 0; b < n; b++)
        for (int k = 0; k < per_image; k++, p += stride) {
            off[0] = (hsize_t)(start + b);
            off[1] = (hsize_t)(per_image > 1 ? k : 0);
            const int rc = direct ? write_direct(w, d, off, p, chunk_bytes) : 1;
            if (rc < 0) {
                *err_no = errno;
                return -1;
            }
            if (rc == 1 && H5Dwrite_chunk(d, H5P_DEFAULT, 0, off, chunk_bytes, p) < 0) return -1;
        }
    return 0;
}

static herr_t extend(hid_t d, long n) {
    hid_t fs = H5Dget_space(d);
    hsize_t dims[5];
    int nd = H5Sget_simple_extent_dims(fs, dims, NULL);
    H5Sclose(fs);
    if (nd < 1) return -1;
    dims[0] = (hsize_t)n;
    return H5Dset_extent(d, dims);
}

static void all_dsets(trace_dsets *d, hid_t *out, int *n) {
    *n = 0;
    for (int q = 0; q < TRACE_Q_COUNT; q++)
        for (int l = 0; l < VIT_MAX_DEPTH; l++)
            if (d->q[q][l] >= 0) out[(*n)++] = d->q[q][l];
    hid_t rest[] = {d->path, d->label, d->pred, d->top5, d->top5_prob, d->logits, d->rgb, d->done, d->pool};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
        if (rest[i] >= 0) out[(*n)++] = rest[i];
}

static void top5(const float *lg, int C, int *cls, float *prob) {
    int k5 = C < 5 ? C : 5;
    double m = lg[0], z = 0;
    for (int i = 1; i < C; i++) m = lg[i] > m ? lg[i] : m;
    for (int i = 0; i < C; i++) z += exp((double)lg[i] - m);
    for (int k = 0; k < k5; k++) {
        int best = -1;
        for (int i = 0; i < C; i++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= cls[j] == i;
            if (!taken && (best < 0 || lg[i] > lg[best])) best = i;
        }
        cls[k] = best;
        prob[k] = (float)(exp((double)lg[best] - m) / z);
    }
}

static double monotonic_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The done flags of the images written since the last call: the data flushed first, then the
 * flags, then flushed again, so that a reader never sees a flag before its image's data. Why
 * not per batch: the two flushes cost about 0.3 ms, 2% of a DeiT-Tiny image at batch 1, on a
 * core the forward needs; every TRACE_FLAG_SECONDS (and at the end of the run) a killed run
 * loses at most that much of its work. */
#define TRACE_FLAG_SECONDS 0.25

/* Writes the rows held in w->meta. */
static int write_meta(trace_writer *w) {
    const int n = w->meta.n, C = w->spec.cfg.num_classes;
    const long start = w->meta.start;
    if (n == 0) return 0;
    int bad = write_paths(w->d.path, start, n, w->meta.path) < 0;
    bad |= write_rows(w->d.label, H5T_NATIVE_INT, start, n, w->meta.label) < 0;
    if (C > 0) {
        bad |= write_rows(w->d.logits, H5T_NATIVE_FLOAT, start, n, w->meta.logits) < 0;
        bad |= write_rows(w->d.pred, H5T_NATIVE_INT, start, n, w->meta.pred) < 0;
        bad |= write_rows(w->d.top5, H5T_NATIVE_INT, start, n, w->meta.top5) < 0;
        bad |= write_rows(w->d.top5_prob, H5T_NATIVE_FLOAT, start, n, w->meta.prob) < 0;
    }
    if (bad) return -1; /* the rows stay held: flag_done flags nothing past them */
    w->meta.start += n;
    w->meta.n = 0;
    return 0;
}

static int flag_done(trace_writer *w) {
    w->flag_time = monotonic_s();
    if (w->flagged == w->done) return 0;
    if (write_meta(w) < 0 || H5Fflush(w->file, H5F_SCOPE_GLOBAL) < 0) return -1;
    /* every image below meta.start has its maps and its small rows written */
    const long upto = w->meta.start < w->done ? w->meta.start : w->done;
    unsigned char ones[TRACE_MAX_BATCH];
    memset(ones, 1, sizeof ones);
    for (long r = w->flagged; r < upto; r += TRACE_MAX_BATCH) {
        const int k = upto - r < TRACE_MAX_BATCH ? (int)(upto - r) : TRACE_MAX_BATCH;
        if (write_rows(w->d.done, H5T_NATIVE_UCHAR, r, k, ones) < 0) return -1;
    }
    if (H5Fflush(w->file, H5F_SCOPE_GLOBAL) < 0) return -1;
    pthread_mutex_lock(&w->mu); /* trace_writer_done reads it */
    w->flagged = upto;
    pthread_mutex_unlock(&w->mu);
    return 0;
}

/* flag_done on the writer thread, a failure recorded as the run's error. */
static void flag_step(trace_writer *w) {
    if (flag_done(w) == 0) return;
    pthread_mutex_lock(&w->mu);
    if (!w->failed) {
        w->failed = 1;
        as_fail(&w->err, AS_ERR_IO, "%s: flushing images %ld..%ld failed (disk full or I/O error); "
                "the trace keeps its %ld completed images: free space, then run again with --resume",
                w->path, w->flagged, w->done - 1, w->flagged);
    }
    pthread_mutex_unlock(&w->mu);
}

static int write_batch(trace_writer *w, trace_slot *sl, int *err_no) {
    const trace_spec *s = &w->spec;
    const vit_config *c = &s->cfg;
    const int n = sl->n, C = c->num_classes;
    const long start = w->done, end = w->done + n;
    if (reserve_space(w, n, err_no) < 0) return -1;
    *err_no = 0;
    hid_t ids[TRACE_Q_COUNT * VIT_MAX_DEPTH + 16];
    int nids;
    all_dsets(&w->d, ids, &nids);
    for (int i = 0; i < nids; i++)
        if (extend(ids[i], end) < 0) return -1;
    hid_t store = s->f16 ? h5u_f16_type() : H5Tcopy(H5T_IEEE_F32LE);
    float ***arrs[TRACE_Q_COUNT];
    slot_arrays(sl, arrs);
    int bad = 0;
    for (int q = 0; q < TRACE_Q_COUNT && !bad; q++) {
        if (!(s->quantities & (1u << q))) continue;
        for (int li = 0; li < s->n_layers && !bad; li++) {
            const int l = s->layers[li];
            if (w->d.q[q][li] < 0) continue; /* not in this block's mechanism */
            const int per_image = record_chunks_per_image(s, (trace_quantity)q, l);
            const size_t chunk = record_chunk_bytes(s, (trace_quantity)q, l);
            engine_buf src = {(*arrs[q])[l], q == TRACE_Q_ATTN && sl->rec.attn16 ? sl->rec.attn16[l] : NULL,
                              sl->rec.attn16_stride};
            const void *buf = stage_layer(w, (trace_quantity)q, l, src, n);
            /* split records are several chunks per head: HDF5 cuts them */
            bad |= write_chunks(w, w->d.q[q][li], store, start, n, per_image, chunk,
                                record_chunk_stride(s, (trace_quantity)q, l), buf,
                                s->compress != TRACE_COMPRESS_NONE ||
                                    record_is_split(s, (trace_quantity)q, l), err_no) < 0;
        }
    }
    if (!bad && w->d.pool >= 0) {
        const size_t bytes = pool_attn_bytes(s);
        stage_put(w, 0, (engine_buf){sl->rec.pool_attn, NULL, 0}, 0, (size_t)n * pool_attn_values(s));
        bad |= write_chunks(w, w->d.pool, store, start, n, 1, bytes, bytes, w->stage,
                            s->compress != TRACE_COMPRESS_NONE, err_no) < 0;
    }
    H5Tclose(store);
    if (bad) return -1;
    const size_t rgb = (size_t)c->img_size * c->img_size * 3;
    bad |= write_chunks(w, w->d.rgb, H5T_NATIVE_UCHAR, start, n, 1, rgb, rgb, sl->rgb, 0, err_no) < 0;
    /* the small per-image rows wait in w->meta for flag_done */
    if (!bad && w->meta.n + n > TRACE_MAX_BATCH) bad |= write_meta(w) < 0;
    if (bad) return -1;
    const int k5 = C < 5 ? C : 5, m0 = w->meta.n;
    for (int b = 0; b < n; b++) {
        memcpy(w->meta.path[m0 + b], sl->paths[b], TRACE_PATH_LEN);
        w->meta.label[m0 + b] = sl->labels[b];
        if (C <= 0) continue;
        memcpy(w->meta.logits + (size_t)(m0 + b) * C, sl->logits + (size_t)b * C, (size_t)C * sizeof(float));
        top5(sl->logits + (size_t)b * C, C, w->meta.top5 + (m0 + b) * k5, w->meta.prob + (m0 + b) * k5);
        w->meta.pred[m0 + b] = w->meta.top5[(m0 + b) * k5];
    }
    w->meta.n += n;
    w->done = end;
    return 0;
}

/* Stores the batches the compute thread submits, in order; flags them done (flag_done) at most
 * TRACE_FLAG_SECONDS after they are written, whether or not more batches come, and at the end. */
static void *writer_main(void *arg) {
    trace_writer *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        int due = 0;
        while (w->nready == 0 && !w->stop && !due) {
            if (w->flagged < w->done && !w->failed) {
                double t = w->flag_time + TRACE_FLAG_SECONDS;
                struct timespec dl = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
                due = pthread_cond_timedwait(&w->cv, &w->mu, &dl) == ETIMEDOUT;
            } else {
                pthread_cond_wait(&w->cv, &w->mu);
            }
        }
        if (w->nready == 0) { /* the flags are due, or the run ends */
            const int stop = w->stop;
            pthread_mutex_unlock(&w->mu);
            flag_step(w);
            if (stop) break;
            continue;
        }
        trace_slot *sl = w->ready_q[w->ready_head];
        w->ready_head = (w->ready_head + 1) % TRACE_SLOTS;
        w->nready--;
        int failed = w->failed;
        pthread_mutex_unlock(&w->mu);

        int err_no = 0;
        int rc = failed || sl->n == 0 ? 0 : write_batch(w, sl, &err_no);
        if (rc == 0 && !failed && monotonic_s() - w->flag_time >= TRACE_FLAG_SECONDS) flag_step(w);
        struct timespec cpu;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
        pthread_mutex_lock(&w->mu);
        w->cpu_s = (double)cpu.tv_sec + 1e-9 * (double)cpu.tv_nsec;
        w->direct_bytes_seen = w->direct_bytes;
        if (rc < 0 && !w->failed) {
            w->failed = 1;
            struct stat sb;
            long long size = stat(w->path, &sb) == 0 ? (long long)sb.st_size : -1;
            as_fail(&w->err, AS_ERR_IO, "%s: writing images %ld..%ld failed (%s; file is %lld "
                    "bytes); the trace keeps its %ld completed images (fewer if the closing flush fails too): "
                    "free space, then run again with --resume", w->path, w->done, w->done + sl->n - 1,
                    err_no ? strerror(err_no) : "disk full or I/O error", size, w->done);
        }
        w->free_q[w->nfree++] = sl;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    return NULL;
}

trace_slot *trace_writer_acquire(trace_writer *w) {
    pthread_mutex_lock(&w->mu);
    while (w->nfree == 0) pthread_cond_wait(&w->cv, &w->mu);
    trace_slot *s = w->free_q[--w->nfree];
    pthread_mutex_unlock(&w->mu);
    s->n = 0;
    return s;
}

void trace_writer_submit(trace_writer *w, trace_slot *s) {
    pthread_mutex_lock(&w->mu);
    w->ready_q[(w->ready_head + w->nready) % TRACE_SLOTS] = s;
    w->nready++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int trace_writer_failed(trace_writer *w, as_error *err) {
    pthread_mutex_lock(&w->mu);
    int f = w->failed;
    if (f && err) *err = w->err;
    pthread_mutex_unlock(&w->mu);
    return f;
}

void trace_writer_wait(trace_writer *w) {
    pthread_mutex_lock(&w->mu);
    while (w->nfree < TRACE_SLOTS) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

double trace_writer_cpu_seconds(trace_writer *w) {
    pthread_mutex_lock(&w->mu);
    double t = w->cpu_s;
    pthread_mutex_unlock(&w->mu);
    return t;
}

double trace_writer_direct_bytes(trace_writer *w) {
    pthread_mutex_lock(&w->mu);
    double b = w->direct_bytes_seen;
    pthread_mutex_unlock(&w->mu);
    return b;
}

long trace_writer_done(trace_writer *w) {
    pthread_mutex_lock(&w->mu);
    long d = w->flagged;
    pthread_mutex_unlock(&w->mu);
    return d;
}

/* Opens the trace a second time, with O_DIRECT, when some record is written that way and the
 * file system allows it (TRACE_DIRECT_MIN); through /proc so that it is the very file HDF5 has
 * open, whatever its name. */
static void direct_open(trace_writer *w) {
    const trace_spec *s = &w->spec;
    int any = 0, *fd = NULL;
    for (int q = 0; q < TRACE_Q_COUNT; q++)
        for (int li = 0; li < s->n_layers && (s->quantities & (1u << q)); li++)
            any |= q_in_layer(&s->cfg, (trace_quantity)q, s->layers[li]) &&
                   record_direct(s, (trace_quantity)q, s->layers[li]);
    if (!any || H5Fget_vfd_handle(w->file, H5P_DEFAULT, (void **)&fd) < 0 || !fd) return;
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", *fd);
    w->dio_fd = open(p, O_WRONLY | O_DIRECT | O_CLOEXEC);
}

/* align: objects of that many bytes and more start at TRACE_DIRECT_ALIGN boundaries (0: none) */
static hid_t fapl_latest(int clear_flags, size_t align) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    if (align > 0 && align < SIZE_MAX) H5Pset_alignment(fapl, (hsize_t)align, TRACE_DIRECT_ALIGN);
    if (clear_flags) {
        /* What h5clear -s does: a run killed while writing (kill -9, power loss) leaves the
         * superblock marked "open for SWMR write"; the data is consistent, only the mark stays. */
        hbool_t clear = 1;
        H5Pset(fapl, "clear_status_flags", &clear);
    }
    return fapl;
}

/* Resume: check the spec matches, count the completed images, drop partial ones. */
static as_status resume_check(trace_writer *w, as_error *err) {
    const trace_spec *s = &w->spec;
    char fmt[64];
    h5u_attr_read_str(w->file, "format", fmt, sizeof fmt);
    if (strcmp(fmt, TRACE_FORMAT) != 0)
        return as_fail(err, AS_ERR_FORMAT, "%s: not an attnscope trace (no format attribute): "
                       "choose another --out", w->path);
    char *want = model_config_to_json(&s->cfg), *have = h5u_attr_read_str_alloc(w->file, "model_config");
    int same_model = want && have && strcmp(want, have) == 0;
    if (!same_model && want && have) { /* as this version writes it: older ones wrote settings that act nowhere */
        vit_config was = {0};
        as_error ignored;
        char *again = model_config_apply_stored_json(&was, have, w->path, &ignored) == AS_OK ? model_config_to_json(&was) : NULL;
        same_model = again && strcmp(want, again) == 0;
        free(again);
    }
    free(want);
    free(have);
    char q[128] = "", qhave[128], dt[16];
    quantities_str(s->quantities, q, sizeof q);
    h5u_attr_read_str(w->file, "quantities", qhave, sizeof qhave);
    h5u_attr_read_str(w->file, "dtype", dt, sizeof dt);
    int layers[VIT_MAX_DEPTH], heads[1024];
    int nl = h5u_attr_read_int(w->file, "layers", layers, VIT_MAX_DEPTH);
    int nh = h5u_attr_read_int(w->file, "heads", heads, 1024);
    char rows[16];
    h5u_attr_read_str(w->file, "query_rows", rows, sizeof rows);
    /* version 3: no root heads when each layer kept all of its own; windows only when chosen */
    int wins[TRACE_MAX_WINDOWS];
    int nw = h5u_attr_read_int(w->file, "windows", wins, TRACE_MAX_WINDOWS);
    int same_heads = s->heads_all ? nh < 0
                   : nh == s->n_heads && memcmp(heads, s->heads, (size_t)nh * sizeof(int)) == 0;
    int same_windows = s->n_windows == 0 ? nw < 0
                     : nw == s->n_windows && memcmp(wins, s->windows, (size_t)nw * sizeof(int)) == 0;
    int same = same_model && strcmp(q, qhave) == 0 && strcmp(dt, s->f16 ? "float16" : "float32") == 0 &&
               nl == s->n_layers && same_heads && same_windows &&
               memcmp(layers, s->layers, (size_t)nl * sizeof(int)) == 0 &&
               strcmp(rows, s->prefix_rows_only ? "prefix" : "all") == 0;
    for (int li = 0; li < s->n_layers && same; li++) { /* the map form of each layer */
        char gname[32], form[16] = "";
        layer_group_name(gname, sizeof gname, s->layers[li]);
        hid_t g = H5Gopen2(w->file, gname, H5P_DEFAULT);
        if (g >= 0) {
            h5u_attr_read_str(g, "map_form", form, sizeof form);
            H5Gclose(g);
        }
        if ((strcmp(form, "local") == 0) != (spec_local(s, s->layers[li]) > 0))
            return as_fail(err, AS_ERR_ARG, "%s: recorded %s --dense-maps; resume with the same "
                           "options (attnscope info %s shows them)", w->path,
                           form[0] ? "without" : "with", w->path);
    }
    char prec[16];
    h5u_attr_read_str(w->file, "precision", prec, sizeof prec);
    if (!prec[0]) snprintf(prec, sizeof prec, "float32"); /* traces before the attribute */
    if (strcmp(prec, s->bf16 ? "bfloat16" : "float32") != 0)
        return as_fail(err, AS_ERR_ARG, "%s: recorded with %s products; resume with --precision %s, or "
                       "write a new trace", w->path, prec, strcmp(prec, "bfloat16") == 0 ? "bf16" : "f32");
    if (!same)
        return as_fail(err, AS_ERR_ARG, "%s: recorded with another model or other --record/"
                       "--layers/--heads/--windows/--dtype options (%s, %s); resume with the same ones "
                       "(attnscope info %s shows them) or write a new trace", w->path,
                       same_model ? "same model" : "different model", qhave, w->path);
    return AS_OK;
}

static long count_done(hid_t done_d) {
    hid_t fs = H5Dget_space(done_d);
    hsize_t n = 0;
    H5Sget_simple_extent_dims(fs, &n, NULL);
    H5Sclose(fs);
    if (n == 0) return 0;
    unsigned char *v = malloc((size_t)n);
    long k = 0;
    if (v && H5Dread(done_d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0)
        while ((hsize_t)k < n && v[k] == 1) k++;
    free(v);
    return k;
}

static void writer_free(trace_writer *w) {
    if (w->dio_fd >= 0) close(w->dio_fd);
    dsets_close(&w->d);
    if (w->file >= 0) H5Fclose(w->file);
    for (int i = 0; i < TRACE_SLOTS; i++) free(w->slot_mem[i]);
    free(w->stage);
    free(w->meta.path);
    free(w->meta.label);
    free(w->meta.pred);
    free(w->meta.top5);
    free(w->meta.logits);
    free(w->meta.prob);
    if (w->lock_fd >= 0) close(w->lock_fd);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

/* --force replaces only what a run of ours wrote: a regular file (not a symlink, device or
 * folder) that is an attnscope trace, or an empty one; --resume needs a regular file too. */
static as_status check_replaceable(const char *path, const struct stat *sb, trace_mode mode,
                                   as_error *err) {
    if (!S_ISREG(sb->st_mode))
        return as_fail(err, AS_ERR_EXISTS, "%s: is %s, not a trace: attnscope %s only regular "
                       "files; choose another --out", path,
                       S_ISLNK(sb->st_mode) ? "a symbolic link" : S_ISDIR(sb->st_mode) ? "a folder"
                       : "a device, FIFO or socket", mode == TRACE_RESUME ? "resumes" : "replaces");
    if (sb->st_size == 0 && mode == TRACE_FORCE) return AS_OK;
    int is_trace = 0;
    if (H5Fis_hdf5(path) > 0) {
        hid_t fapl = h5u_swmr_read_fapl();
        hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
        if (f < 0) f = H5Fopen(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl);
        H5Pclose(fapl);
        if (f >= 0) {
            char fmt[64];
            h5u_attr_read_str(f, "format", fmt, sizeof fmt);
            is_trace = strcmp(fmt, TRACE_FORMAT) == 0;
            H5Fclose(f);
        }
    }
    if (!is_trace && mode == TRACE_FORCE)
        return as_fail(err, AS_ERR_EXISTS, "%s: exists and is not an attnscope trace (or cannot be "
                       "read): --force replaces only traces; remove it yourself or choose another "
                       "--out", path);
    return AS_OK;
}

as_status trace_out_check(const char *path, trace_mode mode, as_error *err) {
    struct stat sb;
    if (lstat(path, &sb) == 0) {
        if (mode == TRACE_CREATE && S_ISDIR(sb.st_mode))
            return as_fail(err, AS_ERR_EXISTS, "%s: is a folder: give --out a trace file's name (a new "
                           "one, such as %s/run.h5)", path, path);
        if (mode == TRACE_CREATE)
            return as_fail(err, AS_ERR_EXISTS, "%s: already exists; pass --force to overwrite it or "
                           "choose another --out", path);
        return check_replaceable(path, &sb, mode, err);
    }
    /* a new file: its folder must exist and take new files */
    char dir[1100];
    const int where = path_parent_writable(path, dir, sizeof dir);
    if (where == -1)
        return as_fail(err, AS_ERR_IO, "%s: the folder %s does not exist: create it first or choose "
                       "another --out", path, dir);
    if (where == -2)
        return as_fail(err, AS_ERR_IO, "%s: the folder %s is not writable: choose another --out",
                       path, dir);
    return AS_OK;
}

static as_status busy(const char *path, as_error *err) {
    return as_fail(err, AS_ERR_EXISTS, "%s: in use by another attnscope run writing it: wait for "
                   "it to finish (or stop it), or choose another --out", path);
}

/* --resume: claim the existing trace for this run. */
static as_status claim_existing(trace_writer *w, as_error *err) {
    w->lock_fd = atomic_lock_path(w->path);
    if (w->lock_fd >= 0) return AS_OK;
    if (errno == EWOULDBLOCK) return busy(w->path, err);
    return as_fail(err, AS_ERR_IO, "%s: cannot open (%s)", w->path, strerror(errno));
}

/* A new trace is laid out and switched to SWMR writing under a temporary name (PATH.tmpPID),
 * then put in place in one step: link(2) for a new path, which fails if another run got there
 * first, or rename(2) over the old trace for --force, under the old trace's lock. So the path
 * never names a half-made file, and two runs never both believe they own it. */
static as_status create_and_claim(trace_writer *w, const trace_spec *spec, trace_mode mode,
                                  as_error *err) {
    const char *path = w->path;
    char tmp[1100];
    atomic_sweep(path, ".tmp");
    atomic_tmp_name(tmp, sizeof tmp, path, ".tmp");
    /* create it ourselves, exclusively: HDF5's H5F_ACC_EXCL would not say why it failed */
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0)
        return as_fail(err, AS_ERR_IO, "%s: cannot create (%s): check the folder exists and is "
                       "writable", path, strerror(errno));
    w->lock_fd = fd;
    atomic_lock_fd(fd); /* new and unnamed to others: cannot be held elsewhere */
    as_status rc = AS_OK;
    hid_t fapl = fapl_latest(0, direct_min(spec));
    w->file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (w->file < 0) {
        rc = as_fail(err, AS_ERR_IO, "%s: cannot create the trace (disk full or not writable?): "
                     "free space or choose another --out", path);
    } else if (write_root_attrs(w->file, spec) != 0 || layout(w->file, spec, &w->d, 1) != 0) {
        rc = as_fail(err, AS_ERR_IO, "%s: cannot lay out the trace (disk full?): free space or "
                     "choose another --out", path);
    } else if (H5Fstart_swmr_write(w->file) < 0) {
        rc = as_fail(err, AS_ERR_IO, "%s: cannot write the new trace's metadata (disk full?): "
                     "free space or choose another --out", path);
    }
    /* link first: exclusive, so a path that appeared meanwhile is never replaced unlocked */
    for (int attempt = 0; rc == AS_OK && attempt < 3; attempt++) {
        if (link(tmp, path) == 0) {
            unlink(tmp);
            return AS_OK;
        }
        if (errno != EEXIST) {
            rc = as_fail(err, AS_ERR_IO, "%s: cannot create (%s)", path, strerror(errno));
        } else if (mode != TRACE_FORCE) {
            rc = as_fail(err, AS_ERR_EXISTS, "%s: already exists (another run created it "
                         "meanwhile); pass --force to overwrite it or --resume to continue it", path);
        } else {
            int old = atomic_lock_path(path);
            struct stat sb;
            if (old < 0 && errno == ENOENT) continue; /* removed meanwhile: link again */
            if (old < 0) rc = errno == EWOULDBLOCK ? busy(path, err)
                                                    : as_fail(err, AS_ERR_IO, "%s: cannot open (%s)",
                                                              path, strerror(errno));
            else if (lstat(path, &sb) == 0 && check_replaceable(path, &sb, mode, err) != AS_OK)
                rc = err->status;
            else if (rename(tmp, path) != 0)
                rc = as_fail(err, AS_ERR_IO, "%s: cannot move the new trace into place (%s)", path,
                             strerror(errno));
            if (old >= 0) close(old);
            if (rc == AS_OK) return AS_OK;
        }
    }
    if (rc == AS_OK) rc = busy(path, err);
    if (rc != AS_OK) {
        dsets_close(&w->d);
        if (w->file >= 0) H5Fclose(w->file);
        w->file = -1;
        unlink(tmp);
    }
    return rc;
}

/* --resume: the trace's storage (its root attribute "compression") goes on; a --compress that
 * names another is refused. Reads only. */
static as_status resume_storage(const char *path, trace_compress *c, int *level, int given,
                                as_error *err) {
    hid_t fapl = h5u_swmr_read_fapl();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (f < 0) f = H5Fopen(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl);
    H5Pclose(fapl);
    if (f < 0) return AS_OK; /* the reopen for writing says why */
    char comp[64] = "";
    h5u_attr_read_str(f, "compression", comp, sizeof comp);
    H5Fclose(f);
    trace_compress tc;
    int tl = 1;
    if (strcmp(comp, "none") == 0) tc = TRACE_COMPRESS_NONE;
    else if (strcmp(comp, "lz4+shuffle") == 0) tc = TRACE_COMPRESS_LZ4;
    else if (sscanf(comp, "deflate-%d+shuffle", &tl) == 1 && tl >= 1 && tl <= 9) tc = TRACE_COMPRESS_DEFLATE;
    else if (!comp[0]) return AS_OK; /* not a trace, or one before the attribute: checked later */
    else
        return as_fail(err, AS_ERR_FORMAT, "%s: stored with compression \"%s\", which this version "
                       "cannot continue: write a new trace", path, comp);
    if (given && (tc != *c || (tc == TRACE_COMPRESS_DEFLATE && tl != *level))) {
        char want[32];
        if (*c == TRACE_COMPRESS_DEFLATE) snprintf(want, sizeof want, "deflate:%d", *level);
        else snprintf(want, sizeof want, "%s", trace_c_names[*c]);
        return as_fail(err, AS_ERR_ARG, "%s: stored with compression %s; --compress %s cannot change "
                       "it on --resume: leave --compress out (a resume keeps the trace's storage) or "
                       "write a new trace", path, comp, want);
    }
    *c = tc;
    *level = tl;
    return AS_OK;
}

as_status trace_writer_open(trace_writer **out, const char *path, const trace_spec *spec,
                            trace_mode mode, int *done, char (**done_paths)[1024],
                            trace_resume_check check, void *check_ctx, as_error *err) {
    as_status rc0;
    h5u_quiet();
    *out = NULL;
    if (done) *done = 0;
    if (done_paths) *done_paths = NULL;
    struct stat sb;
    int exists = lstat(path, &sb) == 0;
    if (exists && mode == TRACE_CREATE && S_ISDIR(sb.st_mode))
        return as_fail(err, AS_ERR_EXISTS, "%s: is a folder: give --out a trace file's name (a new one, "
                       "such as %s/run.h5)", path, path);
    if (exists && mode == TRACE_CREATE)
        return as_fail(err, AS_ERR_EXISTS, "%s: already exists; pass --force to overwrite it or "
                       "--resume to continue it", path);
    if (!exists && mode == TRACE_RESUME) mode = TRACE_CREATE;
    if (exists && mode != TRACE_CREATE && (rc0 = check_replaceable(path, &sb, mode, err)) != AS_OK)
        return rc0;
    trace_compress comp = spec->compress;
    int level = spec->level;
    if (mode == TRACE_RESUME && (rc0 = resume_storage(path, &comp, &level, spec->compress_given, err)) != AS_OK)
        return rc0;
    if (comp == TRACE_COMPRESS_LZ4 && H5Zfilter_avail(TRACE_LZ4_FILTER) <= 0)
        return as_fail(err, AS_ERR_UNSUPPORTED, "%s: the LZ4 HDF5 filter is not installed: "
                       "apt-get install hdf5-filter-plugin (and set HDF5_PLUGIN_PATH=%s), or use "
                       "--compress none|deflate", path, "/usr/lib/x86_64-linux-gnu/hdf5/serial/plugins");
    trace_writer *w = calloc(1, sizeof *w);
    if (!w) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    w->spec = *spec;
    w->spec.compress = comp;
    w->spec.level = level;
    const trace_spec *given = spec; /* with the class names, for a new trace */
    spec = &w->spec; /* the sizes below follow the storage a resume keeps */
    w->spec.class_names = NULL; /* only needed while creating */
    w->file = -1;
    w->lock_fd = -1;
    w->dio_fd = -1;
    dsets_init(&w->d);
    snprintf(w->path, sizeof w->path, "%s", path);
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca; /* the writer's deadlines for the done flags are CLOCK_MONOTONIC */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    as_status rc = AS_OK;

    /* staging buffer: the largest quantity of one layer for a batch, converted, its chunks
     * TRACE_DIRECT_ALIGN apart where written with O_DIRECT */
    w->stage_bytes = 64;
    for (int q = 0; q < TRACE_Q_COUNT; q++)
        for (int li = 0; li < spec->n_layers && (spec->quantities & (1u << q)); li++) {
            const int l = spec->layers[li];
            const size_t f = q_engine_floats(spec, (trace_quantity)q, l) * 4,
                         padded = (size_t)record_chunks_per_image(spec, (trace_quantity)q, l) *
                                  record_chunk_stride(spec, (trace_quantity)q, l),
                         need = (f > padded ? f : padded) * (size_t)spec->batch;
            w->stage_bytes = need > w->stage_bytes ? need : w->stage_bytes;
        }
    if (has_pool_attn(spec)) {
        const size_t pool = (size_t)spec->batch * pool_attn_values(spec) * 4;
        w->stage_bytes = pool > w->stage_bytes ? pool : w->stage_bytes;
    }
    w->stage_bytes = align_up(w->stage_bytes, TRACE_DIRECT_ALIGN);
    {
        const vit_config *c = &spec->cfg;
        /* an image's small rows (path, label, logits, prediction, top 5), which w->meta holds
         * until flag_done, and what it adds to the file in all: those, its pixels, its records */
        w->meta_bytes = (TRACE_PATH_LEN + 64 + (size_t)(c->num_classes > 0 ? c->num_classes : 1) * 4 + 5 * 8 + 16) * 11 / 10;
        size_t ib = (size_t)c->img_size * c->img_size * 3 + w->meta_bytes;
        for (int q = 0; q < TRACE_Q_COUNT; q++)
            for (int li = 0; li < spec->n_layers && (spec->quantities & (1u << q)); li++) {
                const int l = spec->layers[li];
                if (!q_in_layer(c, (trace_quantity)q, l)) continue;
                /* compressed chunks can exceed raw size slightly; an index entry per chunk */
                const size_t k = (size_t)record_chunks_per_image(spec, (trace_quantity)q, l);
                const size_t bytes = record_chunk_bytes(spec, (trace_quantity)q, l);
                const size_t pieces = record_is_split(spec, (trace_quantity)q, l) ? bytes / TRACE_SPLIT_BYTES + 2 : 1;
                ib += k * (bytes * 11 / 10 + 64 * pieces);
                if (bytes >= direct_min(spec)) ib += k * TRACE_DIRECT_ALIGN; /* aligned: a gap each */
            }
        if (has_pool_attn(spec)) ib += pool_attn_bytes(spec) * 11 / 10 + 64;
        w->image_bytes = ib;
    }
    w->stage = aligned_alloc(TRACE_DIRECT_ALIGN, w->stage_bytes);
    {
        const size_t R = TRACE_MAX_BATCH, C = spec->cfg.num_classes > 0 ? (size_t)spec->cfg.num_classes : 1;
        w->meta.path = malloc(R * TRACE_PATH_LEN);
        w->meta.label = malloc(R * sizeof(int));
        w->meta.pred = malloc(R * sizeof(int));
        w->meta.top5 = malloc(R * 5 * sizeof(int));
        w->meta.logits = malloc(R * C * sizeof(float));
        w->meta.prob = malloc(R * 5 * sizeof(float));
    }
    if (!w->stage || !w->meta.path || !w->meta.label || !w->meta.pred || !w->meta.top5 ||
        !w->meta.logits || !w->meta.prob) {
        writer_free(w);
        return as_fail(err, AS_ERR_NOMEM, "out of memory for the trace staging buffer");
    }
    for (int i = 0; i < TRACE_SLOTS; i++) {
        if (!slot_alloc(w, i)) {
            writer_free(w);
            return as_fail(err, AS_ERR_NOMEM, "out of memory for recording buffers (%.1f MB per "
                           "batch): lower --batch or record fewer --layers/--heads",
                           trace_slot_bytes(given) / 1e6); /* w (and w->spec) is freed */
        }
        w->free_q[w->nfree++] = &w->slots[i];
    }

    if (mode == TRACE_RESUME) {
        if ((rc = claim_existing(w, err)) != AS_OK) {
            writer_free(w);
            return rc;
        }
        /* SWMR-write from the start: a reader (h5py swmr=True) opens the file at every moment of
         * the resume, a kill included; clear_status_flags drops a killed run's mark. */
        hid_t fapl = fapl_latest(1, direct_min(&w->spec));
        w->file = H5Fopen(path, H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE, fapl);
        H5Pclose(fapl);
        if (w->file < 0) {
            writer_free(w);
            return as_fail(err, AS_ERR_HDF5, "%s: cannot reopen for --resume (corrupt or not "
                           "HDF5); try h5clear -s %s, or write a new trace", path, path);
        }
        /* Every check first, reading only: a refused resume leaves the file as it was. */
        if ((rc = resume_check(w, err)) != AS_OK || (rc = resume_weights(w->file, &w->spec, path, err)) != AS_OK ||
            layout(w->file, &w->spec, &w->d, 0) < 0) {
            if (rc == AS_OK)
                rc = as_fail(err, AS_ERR_FORMAT, "%s: trace is missing datasets its attributes "
                             "promise: write a new trace", path);
            writer_free(w);
            return rc;
        }
        w->done = w->flagged = w->meta.start = count_done(w->d.done);
        char(*paths)[1024] = NULL;
        if ((done_paths || check) && w->done > 0) {
            paths = malloc((size_t)w->done * TRACE_PATH_LEN);
            if (paths && read_paths(w->d.path, 0, (hsize_t)w->done, paths) < 0) {
                free(paths);
                paths = NULL;
            }
        }
        if (check && (rc = check(check_ctx, (int)w->done, paths, err)) != AS_OK) {
            free(paths);
            writer_free(w);
            return rc;
        }
        if (done_paths) *done_paths = paths;
        else free(paths);
        /* A writer killed mid-batch can leave chunks allocated (their addresses flushed, as SWMR
         * orders metadata) past the end-of-allocation its superblock recorded; HDF5 would then
         * write at or hand out those addresses again ("addr overflow"). Move the end of
         * allocation to the file's end before the first change, as h5clear --increment does. */
        H5Fincrement_filesize(w->file, 0);
        hid_t ids[TRACE_Q_COUNT * VIT_MAX_DEPTH + 16];
        int nids;
        all_dsets(&w->d, ids, &nids);
        for (int i = 0; i < nids; i++) extend(ids[i], w->done); /* drop a partial batch */
        int zero = 0;
        if ((rc = resume_provenance(w->file, &w->spec, path, err)) != AS_OK ||
            h5u_attr_overwrite(w->file, "complete", H5T_NATIVE_INT, &zero) < 0 ||
            h5u_attr_overwrite_str(w->file, "interrupted", "") < 0 || H5Fflush(w->file, H5F_SCOPE_GLOBAL) < 0) {
            if (done_paths) {
                free(*done_paths);
                *done_paths = NULL;
            }
            writer_free(w);
            return rc != AS_OK ? rc : as_fail(err, AS_ERR_IO, "%s: cannot mark the trace as being resumed (disk "
                           "full?): free space and run again", path);
        }
    } else if ((rc = create_and_claim(w, given, mode, err)) != AS_OK) {
        writer_free(w);
        return rc;
    }
    if (done) *done = (int)w->done;
    direct_open(w);
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
        writer_free(w);
        return as_fail(err, AS_ERR_NOMEM, "cannot start the writer thread");
    }
    w->thread_started = 1;
    *out = w;
    return AS_OK;
}

as_status trace_writer_close(trace_writer *w, int complete, const char *reason, as_error *err) {
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (w->thread_started) pthread_join(w->thread, NULL);
    as_status rc = AS_OK;
    if (w->failed) {
        if (err) *err = w->err;
        rc = w->err.status;
        complete = 0;
        if (!reason) reason = "write error";
    }
    long done = w->flagged; /* the writer flagged every image it wrote before it stopped */
    dsets_close(&w->d);
    /* The end state is written in SWMR mode, in place into the attributes made at creation
     * (HDF5 1.10 allows that, not creating or deleting them): a reader (h5py swmr=True) opens
     * the trace at every moment, a kill in the middle included. Reopening without SWMR would
     * mark the file "open for writing" and lock every reader out until h5clear. */
    char now[32];
    h5u_iso_now(now, sizeof now);
    long long n64 = done;
    int bad = h5u_attr_overwrite_str(w->file, "end_time", now) < 0 ||
              h5u_attr_overwrite(w->file, "complete", H5T_NATIVE_INT, &complete) < 0 ||
              h5u_attr_overwrite_str(w->file, "interrupted", complete ? "" : (reason ? reason : "interrupted")) < 0 ||
              h5u_attr_overwrite(w->file, "num_images", H5T_NATIVE_LLONG, &n64) < 0;
    haddr_t eoa = 0;
    bad |= H5Fflush(w->file, H5F_SCOPE_GLOBAL) < 0 || H5Fget_eoa(w->file, &eoa) < 0;
    bad |= H5Fclose(w->file) < 0;
    w->file = -1;
    /* give back the space reserved for a next batch */
    if (!bad && eoa > 0) bad |= truncate(w->path, (off_t)eoa) != 0;
    if (bad && rc == AS_OK)
        rc = as_fail(err, AS_ERR_IO, "%s: could not record the end state (disk full?); the %ld "
                     "images are stored and readable", w->path, done);
    writer_free(w);
    return rc;
}

/* ---- skipped inputs ------------------------------------------------------------------------- */

as_status trace_write_skipped(const char *path, const trace_skipped *items, long n, as_error *err) {
    h5u_quiet();
    hid_t fapl = fapl_latest(0, 0);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, fapl);
    H5Pclose(fapl);
    if (f < 0) return as_fail(err, AS_ERR_HDF5, "%s: cannot reopen to list the skipped inputs", path);
    int bad = 0;
    if (H5Lexists(f, "skipped", H5P_DEFAULT) > 0) bad |= H5Ldelete(f, "skipped", H5P_DEFAULT) < 0;
    if (n > 0 && !bad) {
        hid_t g = H5Gcreate2(f, "skipped", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        const char **p = calloc((size_t)n, sizeof *p), **why = calloc((size_t)n, sizeof *why);
        long long *idx = calloc((size_t)n, sizeof *idx);
        bad |= g < 0 || !p || !why || !idx;
        for (long i = 0; !bad && i < n; i++) p[i] = items[i].path, why[i] = items[i].reason, idx[i] = items[i].input_index;
        const hsize_t dn = (hsize_t)n;
        struct {
            const char *name, *desc;
            int str;
            const void *data;
        } tab[] = {{"path", "the input that could not be read", 1, p},
                   {"reason", "why: the loader's message", 1, why},
                   {"input_index", "its position in the input list", 0, idx}};
        for (size_t k = 0; !bad && k < sizeof tab / sizeof *tab; k++) {
            hid_t sp = H5Screate_simple(1, &dn, NULL), t = tab[k].str ? h5u_str_type(0) : H5Tcopy(H5T_STD_I64LE);
            hid_t d = H5Dcreate2(g, tab[k].name, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            bad |= d < 0 || H5Dwrite(d, tab[k].str ? t : H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, tab[k].data) < 0;
            if (d >= 0) bad |= h5u_attr_str(d, "description", tab[k].desc) != 0;
            if (d >= 0) bad |= dims_attach(g, d, "input") != 0; /* xarray/h5netcdf need every axis named */
            if (d >= 0) H5Dclose(d);
            H5Tclose(t);
            H5Sclose(sp);
        }
        free(p);
        free(why);
        free(idx);
        if (g >= 0) H5Gclose(g);
    }
    bad |= h5u_attr_int64(f, "num_skipped", n) != 0;
    bad |= H5Fclose(f) < 0;
    return bad ? as_fail(err, AS_ERR_HDF5, "%s: could not list the %ld skipped inputs (disk full?); "
                         "the recorded images are kept", path, n) : AS_OK;
}

long trace_num_skipped(const trace_reader *r) {
    long long n = 0;
    hid_t f = (hid_t)r->file_id;
    if (H5Aexists(f, "num_skipped") <= 0) return 0;
    hid_t a = H5Aopen(f, "num_skipped", H5P_DEFAULT);
    if (a < 0 || H5Aread(a, H5T_NATIVE_LLONG, &n) < 0) n = 0;
    if (a >= 0) H5Aclose(a);
    return (long)n;
}

/* ---- reader --------------------------------------------------------------------------------- */

/* Versions 1 and 2: one grid for every layer, from the model config. */
static as_status local_shape_check(const trace_reader *r, const trace_layer_geom *t, const char *name,
                                   int heads, as_error *err);

static as_status layer_geom_model(trace_reader *r, int li, as_error *err) {
    const int l = r->layers[li];
    if (l >= r->cfg.depth)
        return as_fail(err, AS_ERR_FORMAT, "%s: the layers attribute names layer %d of a %d-layer "
                       "model: the file is corrupt", r->path, l, r->cfg.depth);
    trace_spec *s = calloc(1, sizeof *s); /* spec_geom's view of this trace */
    if (!s) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    s->cfg = r->cfg;
    s->prefix_rows_only = r->prefix_rows_only;
    spec_geom(s, l, &r->geom[li]);
    free(s);
    return AS_OK;
}

/* Version 3: layer li's geometry from its group's attributes, checked for consistency (a
 * hostile file must not make a reader size buffers wrong). */
static as_status layer_geom_read(trace_reader *r, int li, as_error *err) {
    const int l = r->layers[li];
    char gname[32], scope[32] = "";
    layer_group_name(gname, sizeof gname, l);
    hid_t g = H5Gopen2((hid_t)r->file_id, gname, H5P_DEFAULT);
    if (g < 0) return as_fail(err, AS_ERR_FORMAT, "%s: no group %s although the layers attribute "
                              "names it: the file is corrupt", r->path, gname);
    trace_layer_geom *t = &r->geom[li];
    memset(t, 0, sizeof *t);
    t->layer = l;
    int grid[2] = {0, 0}, padded[2] = {0, 0}, nw[2] = {1, 1}, ok = 1;
    h5u_attr_read_str(g, "scope", scope, sizeof scope);
    ok &= h5u_attr_read_int(g, "stage", &t->stage, 1) == 1;
    ok &= h5u_attr_read_int(g, "grid", grid, 2) == 2;
    ok &= h5u_attr_read_int(g, "embed_dim", &t->D, 1) == 1;
    ok &= h5u_attr_read_int(g, "num_heads", &t->H, 1) == 1;
    ok &= h5u_attr_read_int(g, "num_tokens", &t->T, 1) == 1;
    ok &= h5u_attr_read_int(g, "num_queries", &t->Tq, 1) == 1;
    ok &= h5u_attr_read_int(g, "num_keys", &t->Tk, 1) == 1;
    ok &= h5u_attr_read_int(g, "prefix_tokens", &t->prefix, 1) == 1;
    ok &= h5u_attr_read_floats(g, "token_stride_px", &t->stride_px, 1) == 1;
    ok &= h5u_attr_read_floats(g, "token_offset_px", &t->offset_px, 1) == 1;
    if (h5u_attr_read_int(g, "qk_head_dim", &t->qk_dim, 1) != 1) t->qk_dim = 0;
    t->gh = grid[0], t->gw = grid[1];
    t->ph = t->gh, t->pw = t->gw;
    t->nwh = t->nww = t->n_problems = 1;
    if (strcmp(scope, "window") == 0) {
        t->scope = VIT_SCOPE_WINDOW;
        ok &= h5u_attr_read_int(g, "window", &t->M, 1) == 1;
        ok &= h5u_attr_read_int(g, "shift", &t->shift, 1) == 1;
        ok &= h5u_attr_read_int(g, "padded_grid", padded, 2) == 2;
        ok &= h5u_attr_read_int(g, "window_grid", nw, 2) == 2;
        t->ph = padded[0], t->pw = padded[1], t->nwh = nw[0], t->nww = nw[1];
        t->n_problems = r->n_windows > 0 ? r->n_windows : nw[0] * nw[1];
        for (int k = 0; ok && k < r->n_windows; k++)
            ok = r->windows[k] >= 0 && r->windows[k] < nw[0] * nw[1] &&
                 (k == 0 || r->windows[k] > r->windows[k - 1]);
    } else if (strcmp(scope, "sra") == 0) {
        int kg[2] = {0, 0};
        t->scope = VIT_SCOPE_SRA;
        ok &= h5u_attr_read_int(g, "key_grid", kg, 2) == 2;
        ok &= h5u_attr_read_floats(g, "key_stride_px", &t->key_stride_px, 1) == 1;
        ok &= h5u_attr_read_floats(g, "key_offset_px", &t->key_offset_px, 1) == 1;
        if (h5u_attr_read_int(g, "sr_pool", &t->sr_pool, 1) != 1) t->sr_pool = 0;
        if (h5u_attr_read_int(g, "sr_ratio", &t->sr_ratio, 1) != 1) t->sr_ratio = 0;
        t->kgh = kg[0], t->kgw = kg[1];
        /* a conv's keys are at most the tokens; a pool's are its P x P bins, more than the
         * tokens on a grid smaller than P (the bins overlap) */
        ok &= (t->sr_pool > 0) != (t->sr_ratio > 0) && t->kgh >= 1 && t->kgw >= 1 &&
              (long)t->kgh * t->kgw == t->Tk &&
              (t->sr_pool ? t->kgh == t->sr_pool && t->kgw == t->sr_pool : t->Tk <= t->T);
    } else if (strcmp(scope, "class") == 0) { /* CaiT: the class token's row over [cls; patches] */
        t->scope = VIT_SCOPE_CLASS;
        ok &= t->Tq == 1 && t->prefix == 1;
    } else {
        ok &= strcmp(scope, "global") == 0;
    }
    if (t->scope != VIT_SCOPE_SRA) {
        t->kgh = t->gh, t->kgw = t->gw;
        t->key_stride_px = t->stride_px, t->key_offset_px = t->offset_px;
    }
    /* CaiT's talking heads: the map that multiplies the values is signed, not row-stochastic */
    int rs = 1;
    if (h5u_attr_read_int(g, "attn_row_stochastic", &rs, 1) == 1) t->attn_signed = !rs;
    if (h5u_attr_read_int(g, "local_side", &t->local_side, 1) != 1) t->local_side = 0;
    H5Gclose(g);
    const long cells = (long)t->gh * t->gw;
    ok = ok && t->gh >= 1 && t->gw >= 1 && t->gh <= VIT_MAX_IMG && t->gw <= VIT_MAX_IMG &&
         t->stage >= 0 && t->stage < VIT_MAX_STAGES && t->prefix >= 0 && t->prefix <= 2 &&
         t->T == t->prefix + cells && t->D >= 1 && t->D <= VIT_MAX_DIM && t->H >= 1 &&
         t->H <= 1024 && t->qk_dim >= 0 && t->qk_dim <= VIT_MAX_DIM && t->Tk >= 1 && t->Tq >= 0;
    if (ok && t->scope == VIT_SCOPE_WINDOW)
        ok = t->M >= 1 && t->M <= 64 && t->shift >= 0 && t->shift < t->M && t->ph % t->M == 0 &&
             t->pw % t->M == 0 && t->ph >= t->gh && t->pw >= t->gw && t->nwh == t->ph / t->M &&
             t->nww == t->pw / t->M && t->Tq == t->M * t->M && t->Tk == t->Tq && t->prefix == 0;
    else if (ok && t->scope != VIT_SCOPE_SRA)
        ok = t->Tk == t->T && t->Tq <= t->T;
    if (ok && t->local_side) /* local records: every query row of a grid without prefix tokens */
        ok = t->local_side >= 1 && t->local_side % 2 == 1 && t->local_side <= VIT_LOCAL_MAX_SIDE &&
             t->scope == VIT_SCOPE_GLOBAL && t->prefix == 0 && t->Tq == t->T;
    if (!ok) return as_fail(err, AS_ERR_FORMAT, "%s: %s's geometry attributes (stage, scope, grid, "
                            "window, ...) are missing or inconsistent: the file is corrupt", r->path, gname);
    return AS_OK;
}

as_status trace_reader_open(trace_reader *r, const char *path, as_error *err) {
    h5u_quiet();
    memset(r, 0, sizeof *r);
    snprintf(r->path, sizeof r->path, "%s", path);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return as_fail(err, AS_ERR_IO, "%s: no such file (%s)", path, strerror(errno));
    if (H5Fis_hdf5(path) <= 0)
        return as_fail(err, AS_ERR_FORMAT, "%s: not an HDF5 file (or truncated): give a trace "
                       "written by attnscope record", path);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        /* being written now, or left by a killed run: SWMR read still sees every flushed batch */
        /* Without a file lock: a lock held by this reader would stop the writer from reopening
         * the file to record its end state when the run finishes. SWMR readers need no lock. */
        hid_t fapl = h5u_swmr_read_fapl();
        f = H5Fopen(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl);
        H5Pclose(fapl);
        r->swmr = 1;
    }
    if (f < 0)
        return as_fail(err, AS_ERR_FORMAT, "%s: HDF5 cannot open it (corrupt?): record it again",
                       path);
    r->file_id = f;
    char fmt[64];
    h5u_attr_read_str(f, "format", fmt, sizeof fmt);
    if (strcmp(fmt, TRACE_FORMAT) != 0) {
        trace_reader_close(r);
        return as_fail(err, AS_ERR_FORMAT, "%s: an HDF5 file but not an attnscope trace (no "
                       "format=\"%s\" attribute)", path, TRACE_FORMAT);
    }
    int v = 0;
    h5u_attr_read_int(f, "format_version", &v, 1);
    if (v > TRACE_FORMAT_VERSION_STAGED) {
        trace_reader_close(r);
        return as_fail(err, AS_ERR_UNSUPPORTED, "%s: trace format version %d is newer than this "
                       "attnscope reads (%d): update attnscope", path, v, TRACE_FORMAT_VERSION_STAGED);
    }
    r->version = v;
    r->staged = v >= TRACE_FORMAT_VERSION_STAGED;
    r->model_config = h5u_attr_read_str_alloc(f, "model_config");
    vit_config c = {0};
    as_error cerr = {0};
    if (!r->model_config || model_config_apply_stored_json(&c, r->model_config, path, &cerr) != AS_OK) {
        const int missing = !r->model_config;
        trace_reader_close(r);
        if (missing) return as_fail(err, AS_ERR_FORMAT, "%s: the model_config attribute is missing: not a trace "
                                    "attnscope record wrote, or a damaged one; record it again", path);
        /* cerr names the trace itself: its message is the config's */
        return as_fail(err, AS_ERR_FORMAT, "%s (its model_config attribute); this attnscope cannot read "
                       "the model the trace was recorded from: record it again", cerr.msg);
    }
    r->cfg = c;
    char q[128], rows[16], dt[16];
    h5u_attr_read_str(f, "quantities", q, sizeof q);
    for (int i = 0; i < TRACE_Q_COUNT; i++) {
        const char *p = strstr(q, trace_q_names[i]);
        size_t L = strlen(trace_q_names[i]);
        while (p && !((p == q || p[-1] == ',') && (p[L] == 0 || p[L] == ','))) p = strstr(p + 1, trace_q_names[i]);
        if (p) r->quantities |= 1u << i;
    }
    if (r->quantities & (1u << TRACE_Q_X0)) r->quantities |= 1u << TRACE_Q_X1;
    r->n_layers = h5u_attr_read_int(f, "layers", r->layers, VIT_MAX_DEPTH);
    r->n_heads = h5u_attr_read_int(f, "heads", r->heads, 1024);
    if (r->staged && r->n_heads < 0) r->heads_all = 1, r->n_heads = 0; /* each layer's own */
    r->n_windows = h5u_attr_read_int(f, "windows", r->windows, TRACE_MAX_WINDOWS);
    if (r->n_windows < 0) r->n_windows = 0;
    h5u_attr_read_str(f, "query_rows", rows, sizeof rows);
    h5u_attr_read_str(f, "dtype", dt, sizeof dt);
    h5u_attr_read_str(f, "compression", r->compression, sizeof r->compression);
    h5u_attr_read_int(f, "complete", &r->complete, 1);
    r->prefix_rows_only = strcmp(rows, "prefix") == 0;
    r->f16 = strcmp(dt, "float16") == 0;
    r->num_tokens = vit_num_tokens(&c);
    r->num_prefix = vit_num_prefix(&c);
    r->q_rows = r->prefix_rows_only ? r->num_prefix : r->num_tokens;
    if (r->n_layers < 0 || r->n_heads < 0) {
        trace_reader_close(r);
        return as_fail(err, AS_ERR_FORMAT, "%s: layers/heads attributes missing", path);
    }
    as_status rc = AS_OK;
    for (int li = 0; li < r->n_layers && rc == AS_OK; li++) {
        const int l = r->layers[li];
        if (l < 0 || l >= VIT_MAX_DEPTH)
            rc = as_fail(err, AS_ERR_FORMAT, "%s: the layers attribute names layer %d: the file "
                         "is corrupt", path, l);
        else rc = r->staged ? layer_geom_read(r, li, err) : layer_geom_model(r, li, err);
    }
    for (int li = 0; rc == AS_OK && li < r->n_layers; li++) /* local records: their shapes */
        for (int qi = TRACE_Q_ATTN; rc == AS_OK && r->geom[li].local_side && qi <= TRACE_Q_SCORES; qi++) {
            char name[64];
            int ids[4096];
            snprintf(name, sizeof name, "layers/%02d/%s_local", r->layers[li], trace_q_names[qi]);
            const trace_layer_geom *t = &r->geom[li];
            if (r->quantities & (1u << qi)) rc = local_shape_check(r, t, name, trace_layer_heads(r, t->layer, ids), err);
        }
    if (rc == AS_OK && r->staged && r->n_layers > 0) { /* the first recorded layer's, for messages */
        r->num_tokens = r->geom[0].T;
        r->num_prefix = r->geom[0].prefix;
        r->q_rows = r->geom[0].Tq;
    }
    if (rc != AS_OK) {
        trace_reader_close(r);
        return rc;
    }
    r->has_pool_attn = c.global_pool == VIT_POOL_MAP && H5Lexists(f, "pool", H5P_DEFAULT) > 0 &&
                       H5Lexists(f, "pool/attn", H5P_DEFAULT) > 0;
    rc = trace_reader_refresh(r, err);
    if (rc != AS_OK) trace_reader_close(r); /* found by fuzz_trace: it leaked the open trace */
    return rc;
}

as_status trace_reader_refresh(trace_reader *r, as_error *err) {
    hid_t d = H5Dopen2((hid_t)r->file_id, "images/done", H5P_DEFAULT);
    if (d < 0) return as_fail(err, AS_ERR_FORMAT, "%s: no images/done dataset", r->path);
    if (r->swmr) H5Drefresh(d);
    r->n_images = count_done(d);
    H5Dclose(d);
    return AS_OK;
}

int trace_writer_finished(const char *path) {
    /* The superblock's file-consistency flags (HDF5 file format, superblock versions 2 and 3):
     * bit 0 "open for writing", bit 2 "open for SWMR writing". Read from the file itself, not
     * through the library: a process that holds the file open for SWMR reading cannot open it
     * a second time with other flags. The superblock sits at 0 or at a power of two from 512. */
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    unsigned char b[12];
    int finished = 0;
    for (long off = 0; off <= (1L << 30); off = off ? off * 2 : 512) {
        if (fseek(fp, off, SEEK_SET) != 0 || fread(b, 1, sizeof b, fp) != sizeof b) break;
        if (memcmp(b, sig, 8) == 0) {
            finished = b[8] < 2 || b[11] == 0;
            break;
        }
    }
    fclose(fp);
    return finished;
}

void trace_reader_close(trace_reader *r) {
    if (r->file_id > 0) H5Fclose((hid_t)r->file_id);
    free(r->model_config);
    memset(r, 0, sizeof *r);
}

static int index_of(const int *v, int n, int x) {
    for (int i = 0; i < n; i++)
        if (v[i] == x) return i;
    return -1;
}

/* Reads a hyperslab [image, (head)] of a dataset as float, converting float16 itself. */
/* want: the floats the caller's buffer holds for this read, as the trace's attributes promise
 * (0: the caller sized it from the dataset itself); a dataset of another shape is refused, so a
 * hostile trace cannot write past the buffer. */
static as_status read_slab(const trace_reader *r, const char *name, long image, int head_pos,
                           size_t want, float *out, as_error *err) {
    hid_t d = H5Dopen2((hid_t)r->file_id, name, H5P_DEFAULT);
    if (d < 0) return as_fail(err, AS_ERR_ARG, "%s: no dataset %s in this trace: record it (see "
                              "attnscope info %s)", r->path, name, r->path);
    hid_t fs = H5Dget_space(d);
    hsize_t dims[H5S_MAX_RANK], off[5] = {0}, cnt[5];
    int nd = H5Sget_simple_extent_dims(fs, dims, NULL); /* at most H5S_MAX_RANK */
    if (nd >= 1 && r->swmr && image >= 0 && (hsize_t)image >= dims[0]) {
        /* a live trace: see what the writer added since the open (refreshing costs a metadata
         * reload, so only when the image lies beyond what this handle knows) */
        H5Sclose(fs);
        H5Drefresh(d);
        fs = H5Dget_space(d);
        nd = H5Sget_simple_extent_dims(fs, dims, NULL);
    }
    as_status rc = AS_OK;
    size_t have = 1;
    for (int i = 1; i < nd && i < 5; i++) have *= (head_pos >= 0 && i == 1) ? 1 : (size_t)dims[i];
    if (nd < 1 || nd > 5) {
        rc = as_fail(err, AS_ERR_FORMAT, "%s: %s has %d dimensions: the file is corrupt", r->path, name, nd);
    } else if (want && have != want) {
        rc = as_fail(err, AS_ERR_FORMAT, "%s: %s holds %zu values per image where its attributes "
                     "promise %zu: the file is corrupt", r->path, name, have, want);
    } else if (head_pos >= 0 && (nd < 2 || (hsize_t)head_pos >= dims[1])) {
        rc = as_fail(err, AS_ERR_FORMAT, "%s: %s has no head position %d: the file is corrupt",
                     r->path, name, head_pos);
    } else if (image < 0 || (hsize_t)image >= dims[0] || image >= r->n_images) {
        rc = as_fail(err, AS_ERR_ARG, "%s: image %ld out of range (%ld complete images)", r->path,
                     image, r->n_images);
    } else {
        size_t n = 1;
        off[0] = (hsize_t)image;
        cnt[0] = 1;
        for (int i = 1; i < nd; i++) {
            cnt[i] = dims[i];
            if (head_pos >= 0 && i == 1) {
                off[1] = (hsize_t)head_pos;
                cnt[1] = 1;
            }
            n *= cnt[i];
        }
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, off, NULL, cnt, NULL);
        hid_t ms = H5Screate_simple(nd, cnt, NULL);
        hid_t ft = H5Dget_type(d);
        herr_t e;
        if (H5Tget_size(ft) == 2) {
            uint16_t *tmp = malloc(n * 2);
            e = tmp ? H5Dread(d, ft, ms, fs, H5P_DEFAULT, tmp) : -1;
            if (e >= 0) kernels_f16_to_f32_array(out, tmp, n);
            free(tmp);
        } else {
            e = H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, out);
        }
        H5Tclose(ft);
        H5Sclose(ms);
        if (e < 0) rc = as_fail(err, AS_ERR_FORMAT, "%s: reading %s[%ld] failed: the file is "
                                "corrupt", r->path, name, image);
    }
    H5Sclose(fs);
    H5Dclose(d);
    return rc;
}

const trace_layer_geom *trace_layer(const trace_reader *r, int layer) {
    const int li = index_of(r->layers, r->n_layers, layer);
    return li < 0 ? NULL : &r->geom[li];
}

int trace_layer_heads(const trace_reader *r, int layer, int *ids) {
    const trace_layer_geom *t = trace_layer(r, layer);
    if (!t) return 0;
    if (!r->heads_all) {
        memcpy(ids, r->heads, (size_t)r->n_heads * sizeof *ids);
        return r->n_heads;
    }
    for (int h = 0; h < t->H; h++) ids[h] = h;
    return t->H;
}

as_status trace_read_window_tokens(const trace_reader *r, int layer, int *tok, as_error *err) {
    const trace_layer_geom *t = trace_layer(r, layer);
    if (!t || t->scope != VIT_SCOPE_WINDOW)
        return as_fail(err, AS_ERR_ARG, "%s: layer %d is %s: window tokens exist for recorded "
                       "window layers only", r->path, layer, t ? "not a window layer" : "not recorded");
    char name[64];
    snprintf(name, sizeof name, "layers/%02d/params/window_token", layer);
    hid_t d = H5Dopen2((hid_t)r->file_id, name, H5P_DEFAULT);
    if (d < 0) return as_fail(err, AS_ERR_FORMAT, "%s: %s is missing: the file is corrupt", r->path, name);
    hid_t sp = H5Dget_space(d);
    hsize_t dims[2] = {0, 0};
    const int nd = H5Sget_simple_extent_ndims(sp);
    if (nd == 2) H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    const size_t W = (size_t)t->nwh * t->nww, N = (size_t)t->M * t->M;
    herr_t e = nd == 2 && dims[0] == W && dims[1] == N
               ? H5Dread(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok) : -1;
    H5Dclose(d);
    for (size_t i = 0; e >= 0 && i < W * N; i++)
        if (tok[i] < -1 || tok[i] >= t->gh * t->gw) e = -1;
    return e < 0 ? as_fail(err, AS_ERR_FORMAT, "%s: %s is not a (%zu, %zu) table of grid tokens: "
                           "the file is corrupt", r->path, name, W, N) : AS_OK;
}

void trace_describe_staged(const trace_reader *r, char *buf, size_t n) {
    char family[32] = "";
    int stages = 0, windows = 0, sra = 0;
    h5u_attr_read_str((hid_t)r->file_id, "model_family", family, sizeof family);
    h5u_attr_read_int((hid_t)r->file_id, "num_stages", &stages, 1);
    for (int li = 0; li < r->n_layers; li++) windows |= r->geom[li].scope == VIT_SCOPE_WINDOW;
    for (int li = 0; li < r->n_layers; li++) sra |= r->geom[li].scope == VIT_SCOPE_SRA;
    snprintf(buf, n, "%s is a staged trace (%s, %d stage%s%s%s; format %d)", r->path,
             family[0] ? family : "?", stages, stages == 1 ? "" : "s",
             windows ? ", window layers" : "", sra ? ", spatial-reduction layers" : "", r->version);
}

/* Layer `layer` stores map `map` (attn or scores) as local records: its geometry, else NULL. */
static const trace_layer_geom *local_layer(const trace_reader *r, int layer, const char *map) {
    const trace_layer_geom *t = trace_layer(r, layer);
    return t && t->local_side && (strcmp(map, "attn") == 0 || strcmp(map, "scores") == 0) ? t : NULL;
}

/* Reads layers/LL/<map>_local at head position head_pos (or all `heads` recorded heads: -1) and
 * expands each head's records into its (Tq, Tk) map in out. */
/* A local dataset's dimensions after the image axis as the layer's geometry promises them:
 * (heads, Tq, S^2 + 1) with `heads` recorded heads (< 0: any count). A hostile file with the
 * right number of values in another shape must not reach a reader's buffer sized from it. */
static int local_shape_ok(const trace_reader *r, const trace_layer_geom *t, const char *name, int heads) {
    hid_t d = H5Dopen2((hid_t)r->file_id, name, H5P_DEFAULT);
    if (d < 0) return 0;
    hid_t sp = H5Dget_space(d);
    hsize_t dims[H5S_MAX_RANK];
    const int nd = H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    H5Dclose(d);
    return nd == 4 && (heads < 0 || dims[1] == (hsize_t)heads) && dims[2] == (hsize_t)t->Tq &&
           dims[3] == (hsize_t)t->local_side * t->local_side + 1;
}

/* local_shape_ok, or the one-line refusal. */
static as_status local_shape_check(const trace_reader *r, const trace_layer_geom *t, const char *name,
                                   int heads, as_error *err) {
    if (local_shape_ok(r, t, name, heads)) return AS_OK;
    return as_fail(err, AS_ERR_FORMAT, "%s: %s is not (images, heads, %d, %d) as local_side %d promises: "
                   "the file is corrupt", r->path, name, t->Tq, t->local_side * t->local_side + 1, t->local_side);
}

static as_status read_local(const trace_reader *r, const trace_layer_geom *t, const char *map,
                            long image, int head_pos, int heads, float *out, as_error *err) {
    char name[96];
    snprintf(name, sizeof name, "layers/%02d/%s_local", t->layer, map);
    const int n = head_pos >= 0 ? 1 : heads;
    as_status rc = local_shape_check(r, t, name, head_pos >= 0 ? -1 : heads, err);
    if (rc != AS_OK) return rc;
    const size_t per = (size_t)t->Tq * ((size_t)t->local_side * t->local_side + 1);
    float *tmp = malloc(per * (size_t)n * sizeof *tmp);
    if (!tmp) return as_fail(err, AS_ERR_NOMEM, "out of memory reading %s of %s", name, r->path);
    rc = read_slab(r, name, image, head_pos, per * (size_t)n, tmp, err);
    for (int h = 0; rc == AS_OK && h < n; h++)
        vit_local_expand(tmp + (size_t)h * per, t->gh, t->gw, t->local_side, out + (size_t)h * t->Tq * t->Tk);
    free(tmp);
    return rc;
}

/* "layers/LL/attn" or "layers/LL/scores" of a layer stored local: its geometry and the map's
 * name in *map (else NULL). */
static const trace_layer_geom *local_name(const trace_reader *r, const char *name, char map[8]) {
    int layer, used = 0;
    if (sscanf(name, "layers/%d/%7[a-z]%n", &layer, map, &used) != 2 || name[used]) return NULL;
    return local_layer(r, layer, map);
}

as_status trace_read_head(const trace_reader *r, trace_quantity q, long image, int layer,
                          int head, float *out, as_error *err) {
    int ids[4096];
    int hp = index_of(ids, trace_layer_heads(r, layer, ids), head);
    if (index_of(r->layers, r->n_layers, layer) < 0 || hp < 0)
        return as_fail(err, AS_ERR_ARG, "%s: layer %d head %d was not recorded", r->path, layer, head);
    if (!(r->quantities & (1u << q)))
        return as_fail(err, AS_ERR_ARG, "%s: %s was not recorded: record with --record %s",
                       r->path, trace_q_names[q], trace_q_names[q]);
    char name[64];
    snprintf(name, sizeof name, "layers/%02d/%s", layer, trace_q_names[q]);
    const trace_layer_geom *t = trace_layer(r, layer);
    const size_t want = is_map(q) ? (size_t)t->n_problems * t->Tq * t->Tk
                      : q == TRACE_Q_TOKENS ? (size_t)t->T * t->D : (size_t)t->T * t->qk_dim;
    if (local_layer(r, layer, trace_q_names[q])) return read_local(r, t, trace_q_names[q], image, hp, 1, out, err);
    return read_slab(r, name, image, hp, want, out, err);
}

as_status trace_read_map(const trace_reader *r, const char *name, long image, int layer,
                         int head, float *out, as_error *err) {
    char path[96];
    const trace_layer_geom *loc = local_layer(r, layer, name);
    snprintf(path, sizeof path, "layers/%02d/%s%s", layer, name, loc ? "_local" : "");
    hid_t d = H5Dopen2((hid_t)r->file_id, path, H5P_DEFAULT);
    if (d < 0)
        return as_fail(err, AS_ERR_ARG, "%s: layer %d has no %s map (not recorded, or not part of "
                       "its mechanism): attnscope info %s lists what it holds", r->path, layer,
                       name, r->path);
    int heads[4096];
    int nh = h5u_attr_read_int(d, "heads", heads, 4096);
    H5Dclose(d);
    int hp = index_of(heads, nh, head);
    if (hp < 0) return as_fail(err, AS_ERR_ARG, "%s: head %d of %s in layer %d was not recorded",
                               r->path, head, name, layer);
    if (loc) return read_local(r, loc, name, image, hp, 1, out, err);
    return read_slab(r, path, image, hp, 0, out, err);
}

as_status trace_read_image_slab(const trace_reader *r, const char *name, long image, float *out,
                                as_error *err) {
    char map[8];
    const trace_layer_geom *t = local_name(r, name, map);
    int ids[4096];
    if (t) return read_local(r, t, map, image, -1, trace_layer_heads(r, t->layer, ids), out, err);
    return read_slab(r, name, image, -1, 0, out, err);
}

as_status trace_read_pool_attn(const trace_reader *r, long image, float *out, as_error *err) {
    if (!r->has_pool_attn)
        return as_fail(err, AS_ERR_ARG, "%s: no attention-pooling map in this trace (the model has "
                       "global_pool \"map\" and --record includes attn to have one)", r->path);
    return read_slab(r, "pool/attn", image, -1, (size_t)r->cfg.num_heads * vit_num_patches(&r->cfg), out, err);
}

int trace_dataset_dims(const trace_reader *r, const char *name, long *dims, int max) {
    char map[8];
    const trace_layer_geom *t = local_name(r, name, map);
    if (t) { /* what the readers expand it to: (heads, Tq, Tk) */
        char local[96];
        snprintf(local, sizeof local, "%s_local", name);
        if (max < 3 || !local_shape_ok(r, t, local, -1)) return -1;
        const int n = trace_dataset_dims(r, local, dims, max);
        dims[2] = t->Tk;
        return n;
    }
    if (H5Lexists((hid_t)r->file_id, name, H5P_DEFAULT) <= 0) return -1;
    hid_t d = H5Dopen2((hid_t)r->file_id, name, H5P_DEFAULT);
    if (d < 0) return -1;
    hid_t s = H5Dget_space(d);
    hsize_t hd[8];
    int nd = H5Sget_simple_extent_ndims(s);
    int n = -1;
    if (nd >= 1 && nd <= 8 && nd - 1 <= max) {
        H5Sget_simple_extent_dims(s, hd, NULL);
        for (int i = 1; i < nd; i++) dims[i - 1] = (long)hd[i];
        n = nd - 1;
    }
    H5Sclose(s);
    H5Dclose(d);
    return n;
}

as_status trace_read_tokens(const trace_reader *r, long image, int layer, float *out,
                            as_error *err) {
    if (!(r->quantities & (1u << TRACE_Q_TOKENS)))
        return as_fail(err, AS_ERR_ARG, "%s: block outputs were not recorded: record with "
                       "--record tokens", r->path);
    char name[64];
    snprintf(name, sizeof name, "layers/%02d/tokens", layer);
    const trace_layer_geom *t = trace_layer(r, layer);
    if (!t) return as_fail(err, AS_ERR_ARG, "%s: layer %d was not recorded", r->path, layer);
    return read_slab(r, name, image, -1, (size_t)t->T * (size_t)t->D, out, err);
}

as_status trace_read_image_info(const trace_reader *r, long image, char *path, size_t path_n,
                                int *label, int *pred, float *logits, as_error *err) {
    hid_t f = (hid_t)r->file_id;
    if (image < 0 || image >= r->n_images)
        return as_fail(err, AS_ERR_ARG, "%s: image %ld out of range (%ld images)", r->path, image,
                       r->n_images);
    hsize_t off = (hsize_t)image, one = 1;
    struct {
        const char *name;
        hid_t mt;
        void *out;
    } items[] = {{"images/label", H5T_NATIVE_INT, label}, {"images/pred", H5T_NATIVE_INT, pred}};
    for (int i = 0; i < 2; i++) {
        if (!items[i].out) continue;
        *(int *)items[i].out = -1;
        hid_t d = H5Dopen2(f, items[i].name, H5P_DEFAULT);
        if (d < 0) continue;
        if (r->swmr) H5Drefresh(d);
        hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &one, NULL);
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &off, NULL, &one, NULL);
        H5Dread(d, items[i].mt, ms, fs, H5P_DEFAULT, items[i].out);
        H5Sclose(ms);
        H5Sclose(fs);
        H5Dclose(d);
    }
    if (path) {
        char buf[1][TRACE_PATH_LEN] = {{0}};
        hid_t d = H5Dopen2(f, "images/path", H5P_DEFAULT);
        if (d >= 0) {
            if (r->swmr) H5Drefresh(d);
            if (read_paths(d, off, one, buf) < 0) buf[0][0] = 0;
            H5Dclose(d);
        }
        snprintf(path, path_n, "%s", buf[0]);
    }
    if (logits && r->cfg.num_classes > 0) return read_slab(r, "images/logits", image, -1, (size_t)r->cfg.num_classes, logits, err);
    return AS_OK;
}

void trace_class_name(const trace_reader *r, int label, char *out, size_t n) {
    out[0] = 0;
    hid_t g = H5Gopen2((hid_t)r->file_id, "images", H5P_DEFAULT);
    if (g < 0) return;
    h5u_attr_read_str_at(g, "class_names", label, out, n);
    H5Gclose(g);
}

as_status trace_sizes(const trace_reader *r, double *file_bytes, double *data_bytes) {
    struct stat sb;
    *file_bytes = stat(r->path, &sb) == 0 ? (double)sb.st_size : 0;
    *data_bytes = 0;
    for (int li = 0; li < r->n_layers; li++)
        for (int q = 0; q < TRACE_Q_COUNT; q++) {
            if (!(r->quantities & (1u << q))) continue;
            char name[64];
            snprintf(name, sizeof name, "layers/%02d/%s%s", r->layers[li], trace_q_names[q],
                     local_layer(r, r->layers[li], trace_q_names[q]) ? "_local" : "");
            hid_t d = H5Dopen2((hid_t)r->file_id, name, H5P_DEFAULT);
            if (d < 0) continue;
            hid_t s = H5Dget_space(d), t = H5Dget_type(d);
            *data_bytes += (double)H5Sget_simple_extent_npoints(s) * (double)H5Tget_size(t);
            H5Tclose(t);
            H5Sclose(s);
            H5Dclose(d);
        }
    return AS_OK;
}

void trace_read_attr_string(const trace_reader *r, const char *name, char *out, size_t n) {
    h5u_attr_read_str((hid_t)r->file_id, name, out, n);
}
