/* vitfam.h: the modern ViT family in the monolithic ViT (timm's VisionTransformer options):
 * LayerScale, register tokens, position embeddings without the prefix slots (no_embed_class),
 * norm_pre, QuickGELU and attention pooling (global_pool "map", AttentionPoolLatent).
 * docs/models.md ("The modern ViT family") gives the equations and names. */
#ifndef AS_VITFAM_H
#define AS_VITFAM_H

#include "config.h"
#include "vit.h"

/* "gelu", "quick_gelu"; parse returns -1 for another name. */
const char *vit_act_name(vit_act a);
int vit_act_parse(const char *s);

/* Rows of pos_embed ahead of the patch grid: the prefix count, or 0 with no_embed_class. */
int vit_pos_embed_prefix(const vit_config *c);
/* Rows of pos_embed: vit_pos_embed_prefix + patches. */
int vit_pos_embed_len(const vit_config *c);

/* The prefix tokens' names in order, comma-separated: "cls", "cls,dist", "cls,reg0,reg1", ""
 * (the trace's prefix_tokens attribute). */
void vit_prefix_names(const vit_config *c, char *buf, size_t n);

/* Prefix token i for a reader: "class token", "distillation token", "register 2". */
void vit_prefix_label(const vit_config *c, int i, char *buf, size_t n);

/* The constraints of the family's options (a message naming the key and the fix). */
as_status vitfam_validate(const vit_config *c, as_error *err);

/* The first family option of c that training does not handle yet (global_pool "map"), or NULL. */
const char *vitfam_untrainable(const vit_config *c);

/* Embedding of one image's patches: xb (T, D) holds the patch embedding in rows prefix..T-1;
 * writes the prefix tokens (cls, dist, registers) and adds the position embedding as timm's
 * _pos_embed does (over all T rows, or the patches only with no_embed_class). */
void vitfam_embed(const vit_config *c, const vit_params *p, float *xb);

/* vitfam_embed's backward: given dx (n, T, D), the gradient of the embedded rows, adds to g's
 * pos_embed, cls_token, dist_token and reg_token their sums over the n images (in image order).
 * The patch rows' gradient stays in dx. */
void vitfam_embed_backward(const vit_config *c, const vit_params *g, const float *dx, int n);

/* y = act(x) over n values (GELU or QuickGELU x * sigmoid(1.702 x)). */
void vitfam_act(const vit_config *c, float *y, const float *x, size_t n);
/* Its backward: dh *= act'(x) over n values. */
void vitfam_act_backward(const vit_config *c, float *dh, const float *x, size_t n);

/* timm's AttentionPoolLatent over one image's N patch tokens x (N, D) into out (D).
 * scratch: N * 2D + H * N + 2D + Hm floats. attn, when not NULL, receives the latent query's
 * map (H, N). */
void vitfam_map_pool(const vit_config *c, const vit_params *p, const float *x, int N, float *out,
                     float *scratch, float *attn);
size_t vitfam_map_scratch(const vit_config *c);

/* The Refiner release's options (c->adjust_ratio, mlp_scale, aux_head; docs/models.md,
 * "Refined-ViT as released"). norm(r x) with eps is norm(x) with eps / r^2, so a block's norms run
 * on x with vitfam_block_eps and its branches add vitfam_branch_scale (1 / r) times their output. */
float vitfam_block_eps(const vit_config *c);
float vitfam_branch_scale(const vit_config *c);
/* Whether a block keeps its branches' outputs before the residual add (LayerScale or 1 / r). */
int vitfam_branch_kept(const vit_config *c);
/* logits (C) += w max_t (aux_head(xn_t)) over the Np normalised patch rows xn (Np, D).
 * scratch: Np C floats (vitfam_aux_scratch). */
void vitfam_aux_head(const vit_config *c, const vit_params *p, const float *xn, int Np, float *logits,
                     float *scratch);
size_t vitfam_aux_scratch(const vit_config *c);
/* Its backward for one image: the gradient reaches each class's arg-max row (found again from the
 * same product): g's aux_head_w, aux_head_b += ..., dxn (Np, D) += w dlogits[k] aux_head_w[k]. */
void vitfam_aux_head_backward(const vit_config *c, const vit_params *p, const vit_params *g, const float *xn,
                              int Np, const float *dlogits, float *dxn, float *scratch);

/* The family's parameters and work added to a monolithic ViT's counts (norm_pre, LayerScale,
 * registers, the MAP pool in the head part). */
void vitfam_cost(const vit_config *c, vit_cost *out);

#endif
