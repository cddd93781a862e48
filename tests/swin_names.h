/* swin_names.h: the tensors of a Swin checkpoint in timm's names and shapes, written from timm's
 * module tree (timm/models/swin_transformer.py, docs/models.md "Swin"), not from attnscope's code;
 * and the same tensors under the official and torchvision names (hierarchical.md 3.1). For the
 * layout and parameter-count tests. */
#ifndef AS_SWIN_NAMES_H
#define AS_SWIN_NAMES_H

#include <stdio.h>
#include <string.h>

#include "../io/safetensors.h"

typedef struct {
    char name[128];
    int ndim;
    long long shape[4];
} swin_tensor;

typedef struct {
    int img, patch, in_chans, C0, n_stages, depths[4], heads[4], window, K, patch_norm;
} swin_arch;

/* The window each stage runs under timm's clamp (a grid no larger than the window shrinks it). */
static inline int swin_stage_window(const swin_arch *a, int s) {
    int g = a->img / a->patch;
    for (int i = 1; i <= s; i++) g = (g + 1) / 2;
    return g <= a->window ? g : a->window;
}

static inline int swin_add(swin_tensor *t, int n, const char *name, int ndim, long long d0, long long d1,
                           long long d2, long long d3) {
    snprintf(t[n].name, sizeof t[n].name, "%s", name);
    t[n].ndim = ndim;
    t[n].shape[0] = d0, t[n].shape[1] = d1, t[n].shape[2] = d2, t[n].shape[3] = d3;
    return n + 1;
}

/* Fills t (room for 16 + 4 * 18 * 15 entries at most) with timm's tensors; returns the count. */
static inline int swin_timm_tensors(const swin_arch *a, swin_tensor *t) {
    int n = 0;
    char nm[128];
    n = swin_add(t, n, "patch_embed.proj.weight", 4, a->C0, a->in_chans, a->patch, a->patch);
    n = swin_add(t, n, "patch_embed.proj.bias", 1, a->C0, 0, 0, 0);
    if (a->patch_norm) {
        n = swin_add(t, n, "patch_embed.norm.weight", 1, a->C0, 0, 0, 0);
        n = swin_add(t, n, "patch_embed.norm.bias", 1, a->C0, 0, 0, 0);
    }
    long long C = a->C0;
    for (int s = 0; s < a->n_stages; s++) {
        if (s > 0) {
            snprintf(nm, sizeof nm, "layers.%d.downsample.norm.weight", s);
            n = swin_add(t, n, nm, 1, 4 * C, 0, 0, 0);
            snprintf(nm, sizeof nm, "layers.%d.downsample.norm.bias", s);
            n = swin_add(t, n, nm, 1, 4 * C, 0, 0, 0);
            snprintf(nm, sizeof nm, "layers.%d.downsample.reduction.weight", s);
            n = swin_add(t, n, nm, 2, 2 * C, 4 * C, 0, 0);
            C *= 2;
        }
        const long long W = 2LL * swin_stage_window(a, s) - 1, h = a->heads[s];
        for (int j = 0; j < a->depths[s]; j++) {
            const struct { const char *leaf; int ndim; long long d0, d1; } leaves[] = {
                {"norm1.weight", 1, C, 0}, {"norm1.bias", 1, C, 0},
                {"attn.relative_position_bias_table", 2, W * W, h},
                {"attn.qkv.weight", 2, 3 * C, C}, {"attn.qkv.bias", 1, 3 * C, 0},
                {"attn.proj.weight", 2, C, C}, {"attn.proj.bias", 1, C, 0},
                {"norm2.weight", 1, C, 0}, {"norm2.bias", 1, C, 0},
                {"mlp.fc1.weight", 2, 4 * C, C}, {"mlp.fc1.bias", 1, 4 * C, 0},
                {"mlp.fc2.weight", 2, C, 4 * C}, {"mlp.fc2.bias", 1, C, 0},
            };
            for (size_t k = 0; k < sizeof leaves / sizeof leaves[0]; k++) {
                snprintf(nm, sizeof nm, "layers.%d.blocks.%d.%s", s, j, leaves[k].leaf);
                n = swin_add(t, n, nm, leaves[k].ndim, leaves[k].d0, leaves[k].d1, 0, 0);
            }
        }
    }
    n = swin_add(t, n, "norm.weight", 1, C, 0, 0, 0);
    n = swin_add(t, n, "norm.bias", 1, C, 0, 0, 0);
    if (a->K > 0) {
        n = swin_add(t, n, "head.fc.weight", 2, a->K, C, 0, 0);
        n = swin_add(t, n, "head.fc.bias", 1, a->K, 0, 0, 0);
    }
    return n;
}

/* A timm name under the official layout (merge at the end of the previous stage, head.*) or
 * torchvision's (features.*), into out. layout: 0 timm (unchanged), 1 official, 2 torchvision. */
static inline void swin_other_name(int layout, const char *timm, char *out, size_t n) {
    int s, j, off = 0;
    char rest[128];
    if (layout == 0) {
        snprintf(out, n, "%s", timm);
    } else if (sscanf(timm, "layers.%d.downsample.%127s", &s, rest) == 2) {
        if (layout == 1) snprintf(out, n, "layers.%d.downsample.%.90s", s - 1, rest);
        else snprintf(out, n, "features.%d.%.90s", 2 * s, rest);
    } else if (sscanf(timm, "layers.%d.blocks.%d.%n", &s, &j, &off) == 2 && off > 0) {
        const char *leaf = timm + off;
        if (layout == 1) snprintf(out, n, "%s", timm);
        else if (strncmp(leaf, "mlp.fc1.", 8) == 0) snprintf(out, n, "features.%d.%d.mlp.0.%s", 2 * s + 1, j, leaf + 8);
        else if (strncmp(leaf, "mlp.fc2.", 8) == 0) snprintf(out, n, "features.%d.%d.mlp.3.%s", 2 * s + 1, j, leaf + 8);
        else snprintf(out, n, "features.%d.%d.%s", 2 * s + 1, j, leaf);
    } else if (strncmp(timm, "head.fc.", 8) == 0) {
        snprintf(out, n, "head.%s", timm + 8);
    } else if (layout == 2 && strncmp(timm, "patch_embed.proj.", 17) == 0) {
        snprintf(out, n, "features.0.0.%s", timm + 17);
    } else if (layout == 2 && strncmp(timm, "patch_embed.norm.", 17) == 0) {
        snprintf(out, n, "features.0.2.%s", timm + 17);
    } else {
        snprintf(out, n, "%s", timm);
    }
}

/* Writes the tiny arch's tensors under the names of `layout` (0 timm, 1 official, 2
 * torchvision), with the buffers each layout carries, values a function of the timm index.
 * table_rows > 0 replaces stage 1's relative table rows. Returns the count written, or -1. */
static inline int swin_write_layout(const char *path, int layout, const swin_arch *a, long long table_rows) {
    static swin_tensor ts[64];
    static safetensors_entry e[96];
    static char names[96][128];
    static float data[96][8192];
    const int n = swin_timm_tensors(a, ts);
    int m = 0;
    for (int i = 0; i < n; i++, m++) {
        swin_other_name(layout, ts[i].name, names[m], sizeof names[m]);
        e[m].name = names[m];
        e[m].ndim = ts[i].ndim;
        size_t numel = 1;
        for (int d = 0; d < ts[i].ndim; d++) {
            e[m].shape[d] = ts[i].shape[d];
            if (table_rows > 0 && d == 0 && strstr(ts[i].name, "layers.1.") &&
                strstr(ts[i].name, "relative_position_bias_table"))
                e[m].shape[0] = table_rows;
            numel *= (size_t)e[m].shape[d];
        }
        if (numel > 8192) return -1; /* the buffers are for tiny configs */
        for (size_t k = 0; k < numel && k < 8192; k++) data[m][k] = (float)i + 0.001f * (float)k;
        e[m].data = data[m];
    }
    /* the buffers each layout's exports hold: every block's index, the official masks */
    for (int s = 0; s < a->n_stages; s++)
        for (int j = 0; j < a->depths[s]; j++) {
            const int M = swin_stage_window(a, s);
            snprintf(names[m], sizeof names[m], layout == 2 ? "features.%d.%d.attn.relative_position_index"
                     : "layers.%d.blocks.%d.attn.relative_position_index", layout == 2 ? 2 * s + 1 : s, j);
            e[m] = (safetensors_entry){.name = names[m], .ndim = 2, .shape = {M * M, M * M}, .data = data[m]};
            m++;
            if (layout == 1 && j % 2 == 1) {
                snprintf(names[m], sizeof names[m], "layers.%d.blocks.%d.attn_mask", s, j);
                e[m] = (safetensors_entry){.name = names[m], .ndim = 3, .shape = {1, M * M, M * M}, .data = data[m]};
                m++;
            }
        }
    as_error err = {0};
    if (safetensors_write(path, e, m, SAFETENSORS_F32, &err) != AS_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return m;
}

#endif
