/* geometry.h: the geometry of every layer of a staged trace (format 3: stages, windows, merges),
 * as the stage-aware metrics read it (docs/analysis.md, "Staged traces"). Not a public header.
 *
 * Tokens of a layer are numbered 0..T-1: its prefix tokens first, then the grid tokens row-major
 * (grid index y * gw + x). A layer's maps are problems (one for a GLOBAL, SRA or CLASS layer, the recorded
 * windows for a WINDOW layer) of Tq query slots x Tk key slots; qtok and ktok say which token each
 * slot holds (-1: a pad slot, which is no token). Every grid token is the query of exactly one
 * slot when every window is recorded. Token (y, x) is centred on input pixel (offset + stride y,
 * offset + stride x) (pixel i spans [i, i + 1)), read from the trace's layer attributes. */
#ifndef AS_ANALYSIS_GEOMETRY_H
#define AS_ANALYSIS_GEOMETRY_H

#include "../core/config.h"
#include "../core/status.h"
#include "../io/trace.h"
#include "metric.h"

typedef struct {
    int layer, stage;           /* model block index, its stage */
    vit_scope scope;
    int gh, gw, prefix, T, D;   /* grid, prefix tokens, tokens (prefix + gh gw), width */
    int H;                      /* recorded heads of the layer */
    int P, Tq, Tk;              /* recorded problems per head and image; query and key slots of one */
    int M, shift, n_windows;    /* WINDOW: side, cyclic shift, windows of the padded grid; else 0, 0, 1 */
    int every_problem;          /* 1 when every window (or the global problem) is recorded */
    int signed_maps;            /* attn is signed, not row-stochastic (CaiT's talking heads) */
    int qk;                     /* q/k width per head in the trace (0: none recorded) */
    float scale;                /* the attribute "scale" (q k^T scale); 0 when absent */
    double stride, offset;      /* px: centre of grid row/column i = offset + stride i */
    int *qtok;                  /* (P, Tq) token of each query slot, -1 for a pad slot */
    int *ktok;                  /* (P, Tk) token of each key slot, -1 for a pad slot; SRA: the key
                                 * index j (keys are not tokens: read kcy, kcx, kb below) */
    /* SRA (PVT v2, scope sra): the T queries are the grid's tokens (qtok), the Tk = kgh kgw keys
     * the cells of a reduced grid. Key row r reduces token rows kb[r] .. kb[kgh + r] - 1 and is
     * centred at kcy[r] px (the mean of those rows' centres); key column c likewise with
     * kb[2 kgh + c] .. kb[2 kgh + kgw + c] - 1 and kcx[c]. NULL / 0 in other scopes. */
    int kgh, kgw;
    int *kb;
    double *kcy, *kcx;
    float *mask;                /* (P, Tq, Tk) the shift mask added to the scores; NULL: none */
    size_t map_floats, qk_floats, k_floats, tok_floats; /* one image's attn, q, k, tokens */
} analysis_lgeom;

typedef struct analysis_staged {
    int n_layers;                   /* = analysis_layout.n_layers, same order */
    int n_stages;                   /* the model's stages (root attribute num_stages) */
    int coarse;                     /* position of a recorded layer with the fewest tokens */
    analysis_lgeom l[VIT_MAX_DEPTH];
} analysis_staged;

/* The geometry of every recorded layer of r (a staged trace): window tables and shift masks from
 * layers/LL/params, the rest from the layer attributes. *out is freed with analysis_staged_free. */
as_status analysis_staged_open(analysis_staged **out, const trace_reader *r, as_error *err);
void analysis_staged_free(analysis_staged *s);
/* lay for a staged trace: its geometry (lay->staged, owned: analysis_staged_free) and the axes
 * (metric.h says what each field means then). */
as_status analysis_layout_staged(analysis_layout *lay, const trace_reader *r, as_error *err);

/* 1 for a spatial-reduction layer, whose keys are reduced cells rather than tokens. */
static inline int analysis_reduced(const analysis_lgeom *g) { return g->scope == VIT_SCOPE_SRA; }
/* Grid index (y * gw + x) of token t of g, or -1 for a prefix token or a pad slot (t = -1). */
static inline int analysis_grid_of(const analysis_lgeom *g, int t) {
    return t < g->prefix ? -1 : t - g->prefix;
}
/* 1 when key slot j of query slot i of problem w is a valid key: a token (not a pad slot) whose
 * shift-mask entry is 0 (keys across a shifted window's seam are masked, so not valid). */
static inline int analysis_key_valid(const analysis_lgeom *g, int w, int i, int j) {
    return g->ktok[(size_t)w * g->Tk + j] >= 0 &&
           (!g->mask || g->mask[((size_t)w * g->Tq + i) * g->Tk + j] == 0.0f);
}
/* The cell of coarse's grid that grid index gi of fine falls in; -1 outside coarse's grid. With
 * strides r apart (a whole number) the cell (y / r, x / r): across a Swin merge or a PVT v2
 * strided conv (y / 2, x / 2), across k of them (y >> k, x >> k); else the cell whose footprint
 * (a stride x stride square around its centre) holds gi's centre. */
int analysis_cell_of(const analysis_lgeom *fine, int gi, const analysis_lgeom *coarse);
/* The cell of coarse's grid whose footprint holds the point (cy, cx) px, or -1 (outside). */
int analysis_point_cell(const analysis_lgeom *coarse, double cy, double cx);
/* The cell of coarse's grid that holds key slot j of layer g: its token's cell, or (SRA) the cell
 * of the reduced key's centre; -1 for a positionless key (pad slot, prefix token) or outside. */
int analysis_key_cell(const analysis_lgeom *g, int w, int j, const analysis_lgeom *coarse);
/* cell[gi] = analysis_cell_of(fine, gi, coarse) for every grid index of fine, and n[c] = how many
 * fine grid tokens fall in coarse cell c (coarse->gh * gw entries; n may be NULL). */
void analysis_cells(int *cell, int *n, const analysis_lgeom *fine, const analysis_lgeom *coarse);
/* 1 when layers a and b have the same support: the same scope, grid, windows and shift (so their
 * maps are comparable slot by slot: W with W, SW with SW). */
int analysis_same_support(const analysis_lgeom *a, const analysis_lgeom *b);

/* Helpers of the staged metrics */
/* 1 when a query row of a grid token (maps: one image's (H, P, Tq, Tk)) holds an entry < 0. */
int analysis_staged_negative(const analysis_lgeom *g, const float *maps);
/* Declares the output NAME (stage): the mean over each stage's recorded layers of a per-layer
 * value (analysis_stage_means); returns its index. */
int analysis_stage_output_add(analysis_ctx *c, const char *name, const char *description,
                              const char *units);
/* out[s] = mean of per_layer[li] over the layers li of stage s where it is not NaN (NaN if none). */
void analysis_stage_means(const analysis_layout *lay, const double *per_layer, double *out);
/* The mean of v[0..n) (a layer's own heads), NaN when one is NaN. */
double analysis_heads_mean(const double *v, int n);

#endif
