/* vanilla.c: timm's multi-head attention, softmax(q k^T * scale) v with a fused qkv projection.
 * Everything it does is the frame's (core/mech.h); this is the smallest module. */
#include "../mech.h"

const vit_mech vit_mech_vanilla = {
    .name = "vanilla",
    .summary = "softmax(q k^T * scale) v, timm's Attention (fused qkv)",
    .flags = VIT_MECH_PLAIN,
    .scopes = 1u << VIT_SCOPE_GLOBAL | 1u << VIT_SCOPE_WINDOW | 1u << VIT_SCOPE_SRA | 1u << VIT_SCOPE_CLASS, /* SRA: q | kv (core/pvt.c) */
    .layout = vit_mech_fused_layout,
    .specs = vit_mech_fused_specs,
    .cost = vit_mech_fused_cost,
};
