/* cait.h: CaiT (Touvron et al. 2021, "Going deeper with image transformers") on the stage frame:
 * stage 0 of talking-heads self-attention blocks over the patch tokens alone, stage 1 of
 * class-attention blocks in which the class token alone queries [cls; patches]. Internal to
 * core/ and io/; the frame (stage.c, config.c, vit.c, io/trace.c) calls these for family "cait".
 *
 * Usage: nothing to call directly; vit_param_specs, vit_forward, vit_config_validate and
 * vit_config_cost dispatch here when c->family == VIT_FAMILY_CAIT. */
#ifndef AS_CAIT_H
#define AS_CAIT_H

#include "mech.h"
#include "train.h"
#include "vit.h"

int vit_cait_param_specs(const vit_config *c, vit_params *p, vit_tensor_spec *specs, int max);
/* Floats per image of acts->cait: 3 H N^2 of the widest talking-heads block (0 without). */
size_t vit_cait_scratch_floats(const vit_config *c);
void vit_cait_forward(const vit_config *c, const vit_params *p, vit_acts *a, const float *images,
                      int n, const vit_record *rec);
/* The CaiT-specific checks (stages, tokens, pooling, which mechanisms run where); the frame
 * checks every block's mechanism afterwards. */
as_status vit_cait_validate(const vit_config *c, as_error *err);
/* Fills out's stem, stages and head parts (the frame sums them). */
void vit_cait_cost(const vit_config *c, vit_cost *out);
/* The MACs per image as CaiT's paper counts them (Touvron et al. 2021, Table 3 and the deit
 * repository's model zoo): its self-attention blocks over N + 1 tokens, as if the class token
 * were in them (the engine computes N). This reproduces all eight published figures (XXS24 2.5,
 * XXS36 3.8, S24 9.4 G at 224; XS24 19.3, S24 32.2, S36 48.0, M36 173.3 G at 384; M48 329.6 G at
 * 448); the engine's own count gives 9.3 G for S24. */
double vit_cait_paper_macs(const vit_config *c);
/* Block l mixes its heads (talking heads). */
int vit_cait_talking(const vit_config *c, int l);
/* The internals of a talking-heads block: 0 "scores_qk", 1 "attn_softmax"; 0 past them. */
int vit_cait_extra(const vit_config *c, int l, int i, vit_extra *out);
/* What attn and scores hold in CaiT block l, or NULL where the frame's text is right. */
const char *vit_cait_attn_doc(const vit_config *c, int l);
const char *vit_cait_scores_doc(const vit_config *c, int l);
/* The layer attributes of CaiT block l (talking heads, signed maps, query rows). */
void vit_cait_trace_attrs(const vit_config *c, int l, vit_mech_writer *w);

/* out (H, NN) = W (H, H) in (H, NN) + bias per row: the talking-heads mix over the head axis. */
void vit_cait_head_mix(float *out, const float *W, const float *bias, const float *in, int H, size_t NN);

/* Training (cait_train.c; stage_train.c dispatches here): the tape, the backward's workspace
 * and the backward pass (returns 0: no LaViT term in a CaiT). */
size_t cait_tape_carve(const vit_config *c, int B, void *base, vit_tape *t);
size_t cait_grad_ws_carve(const vit_config *c, int B, void *base, vit_grad_ws *ws);
double cait_backward(const vit_config *c, const vit_params *p, const vit_params *g, vit_acts *a, vit_grad_ws *ws,
                     const float *dlogits, int n);

#endif
