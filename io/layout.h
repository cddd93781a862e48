/* layout.h: the other checkpoint layouts of Swin (microsoft/Swin-Transformer's official .pth
 * converted to safetensors, torchvision's swin_t/s/b) renamed to timm's names before binding. */
#ifndef AS_LAYOUT_H
#define AS_LAYOUT_H

#include <stddef.h>

#include "../core/config.h"
#include "safetensors.h"

/* Usage:
 *     layout_info li;
 *     if (layout_to_timm(&st, &cfg, &li, &err) != AS_OK) ...   // st's names are timm's now
 *     printf("%s layout, %d buffers ignored\n", layout_name(li.layout), li.n_ignored);
 * Detection reads the names only: `features.*` is torchvision; a merge stored at the end of a
 * stage (`layers.0.downsample.*`) or a bare `head.weight` is the official layout (also timm
 * before 0.9); anything else is timm's. The buffers relative_position_index and attn_mask are
 * dropped from st (attnscope computes both) and counted. A monolithic ViT is left as it is. */
typedef enum { LAYOUT_TIMM = 0, LAYOUT_OFFICIAL, LAYOUT_TORCHVISION, LAYOUT_COUNT } layout_kind;

typedef struct {
    layout_kind layout;
    int n_renamed;  /* tensors whose name changed */
    int n_ignored;  /* buffers dropped: relative_position_index, attn_mask */
} layout_info;

const char *layout_name(layout_kind k); /* "timm", "official", "torchvision" */
/* What the layout is, in words (for info): "microsoft/Swin-Transformer's official names". */
const char *layout_describe(layout_kind k);
/* Renames st's tensors to timm's names in place and drops the computed buffers. cfg (a staged
 * config) decides nothing but the checks: two tensors that land on one name, and each
 * relative_position_bias_table against the window its block runs (refused with the window the
 * table implies and the fix; attnscope does not resize tables). */
as_status layout_to_timm(safetensors *st, const vit_config *cfg, layout_info *info, as_error *err);
/* The timm name of one tensor of the given layout into out; returns 0 for a buffer to drop. */
int layout_timm_name(layout_kind k, const char *name, char *out, size_t n);

#endif
