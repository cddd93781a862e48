/* local.h: attention rows that are local plus a constant background, in O(T R^2) per head.
 *
 * MaiT's zero mode (its masked scores become 0) and neg_inf mode give every query of a head an
 * R x R neighbourhood of real scores and ONE score b for every key outside it (0, or -inf).
 * The softmax then needs no N x N map: with E_j = exp(s_j - m) over the neighbourhood W and
 * e_b = exp(b - m) for the T - |W| keys outside,
 *     Z = sum_W E_j + (T - |W|) e_b
 *     out = (sum_W E_j v_j + e_b (sum_all v_j - sum_W v_j)) / Z
 * which is the dense softmax(S) V exactly (up to rounding), at T R^2 products instead of T^2.
 * H-MaiT's stage 1 at 224 px (3136 tokens, R = 3) is 9 instead of 3136 keys per query.
 *
 * The same two numbers per row are a complete record of the map: the R x R weights and the
 * background weight e_b / Z (the trace's "local" form, docs/trace-format.md). */
#ifndef AS_LOCAL_H
#define AS_LOCAL_H

#include "config.h"

/* Wider neighbourhoods run densely (their stack scratch is side^2 doubles twice). */
#define VIT_LOCAL_MAX_SIDE 31

typedef struct {
    int side;         /* R (odd): the neighbourhood is R x R grid cells centred on the query */
    float background; /* the score of every key outside it: 0 (zero mode) or -INFINITY */
} vit_local;

/* 1 when block l's head h runs as local rows, *out its neighbourhood and background: a staged
 * model's GLOBAL block without prefix tokens, whose mechanism says so (vit_mech.local), with
 * side <= VIT_LOCAL_MAX_SIDE. */
int vit_local_head(const vit_config *c, int l, int h, vit_local *out);
/* Every head of block l runs local: the widest side (the side of its local records); else 0. */
int vit_local_side(const vit_config *c, int l);
/* (query, key) pairs of a gh x gw grid whose key lies in the query's side x side neighbourhood
 * (cut at the grid's edges): the score entries of one local head. */
double vit_local_pairs(int gh, int gw, int side);

/* One local head over a gh x gw grid (T = gh gw queries and keys, row-major, no prefix). */
typedef struct {
    int gh, gw, dq, dv;
    float scale;                 /* of q k^T */
    const float *q, *k, *v;      /* rows ldq, ldk, ldv apart */
    int ldq, ldk, ldv;
    vit_local loc;
    float *out;                  /* (T, dv) rows ldo apart: the attention output */
    int ldo;
    double *acc;                 /* scratch: 2 dv doubles */
    /* records, or NULL: */
    float *att, *scores;         /* (T, T) the map and the scores as the dense path has them */
    float *att_local, *scores_local; /* (T, S^2 + 1), S = rec_side (docs/trace-format.md) */
    int rec_side;                /* S >= loc.side, odd */
} vit_local_job;
void vit_local_forward(const vit_local_job *j);

/* The backward of one local head from the forward's record (att_local, side rec_side): with
 * dO the output's gradient, dA_ij = dO_i . v_j and delta_i = sum_j a_ij dA_ij (over every key:
 * the neighbourhood's and the background's, through sum_all v), only the neighbourhood's scores
 * vary, so dS_ij = a_ij (dA_ij - delta_i) on W_i and 0 elsewhere (the background score is a
 * constant); dq_i = scale sum_W dS_ij k_j, dk_j = scale sum_i dS_ij q_i, and
 * dv_j = sum_i b_i dO_i + sum_{i: j in W_i} (a_ij - b_i) dO_i with b_i the background weight.
 * O(T R^2 (dq + dv)). dq, dk, dv are overwritten. */
typedef struct {
    int gh, gw, dq, dv;
    float scale;
    const float *q, *k, *v, *dout; /* rows ldq, ldk, ldv, ldo apart */
    int ldq, ldk, ldv, ldo;
    vit_local loc;
    const float *att_local;        /* (T, S^2 + 1) */
    int rec_side;                  /* S */
    float *dq_out, *dk_out, *dv_out; /* rows ldq, ldk, ldv apart (as q, k, v) */
    double *acc;                   /* scratch: 2 dv doubles */
} vit_local_bwd_job;
void vit_local_backward(const vit_local_bwd_job *j);

/* A local record (T, S^2 + 1) to its dense (T, T) map: slot (dy + S/2) S + (dx + S/2) of query
 * (y, x) is key (y + dy, x + dx); every other key takes the row's last value. */
void vit_local_expand(const float *loc, int gh, int gw, int side, float *dense);

#endif
