/* layout.c: Swin checkpoints in the official and torchvision layouts renamed to timm's names
 * (docs/models.md, "Swin checkpoints"), and the relative position tables checked against the
 * windows the config runs. Only names change here; the values are bound as they are. */
#define _POSIX_C_SOURCE 200809L
#include "layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const layout_names[] = {[LAYOUT_TIMM] = "timm", [LAYOUT_OFFICIAL] = "official",
                                           [LAYOUT_TORCHVISION] = "torchvision"};
_Static_assert(sizeof layout_names / sizeof layout_names[0] == LAYOUT_COUNT, "layout names");
static const char *const layout_words[] = {
    [LAYOUT_TIMM] = "timm's names",
    [LAYOUT_OFFICIAL] = "microsoft/Swin-Transformer's official names (merge at the end of each "
                        "stage, head.*; also timm before 0.9), renamed to timm's",
    [LAYOUT_TORCHVISION] = "torchvision's names (features.*), renamed to timm's"};
_Static_assert(sizeof layout_words / sizeof layout_words[0] == LAYOUT_COUNT, "layout words");

const char *layout_name(layout_kind k) { return (unsigned)k < LAYOUT_COUNT ? layout_names[k] : "?"; }
const char *layout_describe(layout_kind k) { return (unsigned)k < LAYOUT_COUNT ? layout_words[k] : "?"; }

static int starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }
static int ends(const char *s, const char *suffix) {
    const size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* A decimal index at *p followed by '.', advancing *p past the dot; -1 when there is none. */
static int index_dot(const char **p) {
    const char *s = *p;
    long v = 0;
    if (*s < '0' || *s > '9') return -1;
    while (*s >= '0' && *s <= '9' && v < 100000) v = 10 * v + (*s++ - '0');
    if (*s != '.' || v >= 100000) return -1;
    *p = s + 1;
    return (int)v;
}

int layout_timm_name(layout_kind k, const char *name, char *out, size_t n) {
    /* buffers every layout may hold: timm's are non-persistent, attnscope computes both */
    if (ends(name, "relative_position_index") || ends(name, "attn_mask")) return 0;
    const char *p;
    int a, b;
    if (k == LAYOUT_OFFICIAL) {
        p = name + strlen("layers.");
        if (starts(name, "layers.") && (a = index_dot(&p)) >= 0 && starts(p, "downsample.")) {
            snprintf(out, n, "layers.%d.%s", a + 1, p); /* end of stage a = start of a + 1 */
            return 1;
        }
        if (starts(name, "head.") && !starts(name, "head.fc.")) {
            snprintf(out, n, "head.fc.%s", name + strlen("head."));
            return 1;
        }
    } else if (k == LAYOUT_TORCHVISION) {
        if (starts(name, "features.0.0.")) {
            snprintf(out, n, "patch_embed.proj.%s", name + strlen("features.0.0."));
            return 1;
        }
        if (starts(name, "features.0.2.")) {
            snprintf(out, n, "patch_embed.norm.%s", name + strlen("features.0.2."));
            return 1;
        }
        p = name + strlen("features.");
        if (starts(name, "features.") && (a = index_dot(&p)) >= 1) {
            const char *rest = p;
            if (a % 2 == 1 && (b = index_dot(&rest)) >= 0) { /* blocks of stage (a - 1) / 2 */
                const char *tail = rest;
                const char *mlp = starts(tail, "mlp.0.") ? "mlp.fc1." : starts(tail, "mlp.3.") ? "mlp.fc2." : NULL;
                if (mlp) snprintf(out, n, "layers.%d.blocks.%d.%s%s", (a - 1) / 2, b, mlp, tail + strlen("mlp.0."));
                else snprintf(out, n, "layers.%d.blocks.%d.%s", (a - 1) / 2, b, tail);
                return 1;
            }
            if (a % 2 == 0) { /* the merge before stage a / 2 */
                snprintf(out, n, "layers.%d.downsample.%s", a / 2, rest);
                return 1;
            }
        }
        if (starts(name, "head.") && !starts(name, "head.fc.")) {
            snprintf(out, n, "head.fc.%s", name + strlen("head."));
            return 1;
        }
    }
    snprintf(out, n, "%s", name);
    return 1;
}

/* PVT v2's official names (whai362/PVT: patch_embed{1..4}, block{1..4}.j, norm{1..4},
 * mlp.dwconv.dwconv) as timm's: patch_embed1 is the stem, patch_embed{s+1} the downsample of stage
 * s, norm{s+1} the norm closing stage s. Another name is kept (binding names what is left). */
static void pvt_timm_name(const char *name, char *out, size_t n) {
    const char *p = name;
    int s, j;
    if (starts(name, "patch_embed") && name[11] >= '1' && name[11] <= '9' && name[12] == '.') {
        s = name[11] - '1';
        if (s == 0) snprintf(out, n, "patch_embed.%s", name + 13);
        else snprintf(out, n, "stages.%d.downsample.%s", s, name + 13);
        return;
    }
    if (starts(name, "norm") && name[4] >= '1' && name[4] <= '9' && name[5] == '.') {
        snprintf(out, n, "stages.%d.norm.%s", name[4] - '1', name + 6);
        return;
    }
    p = name + strlen("block");
    if (starts(name, "block") && (s = index_dot(&p)) >= 1 && (j = index_dot(&p)) >= 0) {
        const char *dw = "mlp.dwconv.dwconv.";
        if (starts(p, dw)) snprintf(out, n, "stages.%d.blocks.%d.mlp.dwconv.%s", s - 1, j, p + strlen(dw));
        else snprintf(out, n, "stages.%d.blocks.%d.%s", s - 1, j, p);
        return;
    }
    snprintf(out, n, "%s", name);
}

static layout_kind detect(const safetensors *st, int *mixed) {
    int features = 0, timmish = 0, merge_end = 0, head_plain = 0, head_fc = 0;
    for (int i = 0; i < st->count; i++) {
        const char *nm = st->tensors[i].name;
        features |= starts(nm, "features.");
        timmish |= starts(nm, "layers.") || starts(nm, "patch_embed.");
        merge_end |= starts(nm, "layers.0.downsample.");
        head_plain |= strcmp(nm, "head.weight") == 0 || strcmp(nm, "head.bias") == 0;
        head_fc |= starts(nm, "head.fc.");
    }
    *mixed = features && timmish;
    if (features) return LAYOUT_TORCHVISION;
    return (merge_end || head_plain) && !head_fc ? LAYOUT_OFFICIAL : LAYOUT_TIMM;
}

/* The relative table of layers.s.blocks.j against the window that block runs. */
static as_status check_table(const safetensors *st, const safetensors_tensor *t, const vit_config *c,
                             as_error *err) {
    const char *p = t->name + strlen("layers.");
    int s, j;
    if (!starts(t->name, "layers.") || (s = index_dot(&p)) < 0 || !starts(p, "blocks.")) return AS_OK;
    p += strlen("blocks.");
    if ((j = index_dot(&p)) < 0 || strcmp(p, "attn.relative_position_bias_table") != 0) return AS_OK;
    if (s >= c->n_stages || j >= c->stage[s].depth || t->ndim != 2) return AS_OK; /* binding names it */
    vit_geom g;
    const int l = vit_stage_first_block(c, s) + j;
    vit_block_geom(c, l, &g);
    const long long want = (2LL * g.M - 1) * (2LL * g.M - 1), rows = t->shape[0];
    if (rows == want) return AS_OK;
    long long side = 0;
    while ((side + 1) * (side + 1) <= rows && side < 1 << 20) side++;
    char implies[96], fix[320];
    if (side * side == rows && side % 2 == 1)
        snprintf(implies, sizeof implies, "the table of a %lldx%lld window", (side + 1) / 2, (side + 1) / 2);
    else
        snprintf(implies, sizeof implies, "no (2M-1)^2 table of any window");
    const int M0 = c->stage[s].window;
    if (side * side == rows && side % 2 == 1 && (side + 1) / 2 != M0)
        snprintf(fix, sizeof fix, "set \"window_size\": %lld in the config (it is %d)", (side + 1) / 2, M0);
    else if (g.M != M0)
        snprintf(fix, sizeof fix, "window_size %d is clamped to the %dx%d grid by \"window_clamp\": "
                 "\"timm\" at img_size %d: use \"window_clamp\": \"torchvision\" (keeps the window and "
                 "pads), or an img_size whose stage-%d grid is at least %d", M0, g.gh, g.gw,
                 c->img_size, s, M0);
    else
        snprintf(fix, sizeof fix, "check the checkpoint against the config");
    return as_fail(err, AS_ERR_SHAPE, "%s: %s has %lld rows, %s, but block %d (stage %d) runs %dx%d "
                   "windows, whose table has %lld rows; attnscope does not resize relative position "
                   "tables: %s", st->path, t->name, rows, implies, l, s, g.M, g.M, want, fix);
}

as_status layout_to_timm(safetensors *st, const vit_config *cfg, layout_info *info, as_error *err) {
    memset(info, 0, sizeof *info);
    int mixed = 0;
    const int pvt = cfg->family == VIT_FAMILY_PVT2;
    if (pvt) { /* official names are block1.*, patch_embed1.* (timm: stages.*, patch_embed.*) */
        info->layout = LAYOUT_TIMM;
        for (int i = 0; i < st->count; i++)
            if (starts(st->tensors[i].name, "block1.") || starts(st->tensors[i].name, "patch_embed1."))
                info->layout = LAYOUT_OFFICIAL;
    } else {
        info->layout = detect(st, &mixed);
    }
    if (mixed)
        return as_fail(err, AS_ERR_FORMAT, "%s: mixes torchvision names (features.*) with timm's "
                       "(layers.*, patch_embed.*): convert it to one layout", st->path);
    int kept = 0;
    for (int i = 0; i < st->count; i++) {
        safetensors_tensor t = st->tensors[i];
        char nm[256];
        if (pvt) pvt_timm_name(t.name, nm, sizeof nm);
        else if (!layout_timm_name(info->layout, t.name, nm, sizeof nm)) {
            free(t.name);
            info->n_ignored++;
            continue;
        }
        if (strcmp(nm, t.name) != 0) {
            char *dup = strdup(nm);
            if (!dup) {
                free(t.name);
                for (int k = i + 1; k < st->count; k++) free(st->tensors[k].name);
                st->count = kept;
                return as_fail(err, AS_ERR_NOMEM, "%s: out of memory", st->path);
            }
            free(t.name);
            t.name = dup;
            info->n_renamed++;
        }
        st->tensors[kept++] = t;
    }
    st->count = kept;
    for (int i = 0; i < st->count; i++)
        for (int k = 0; k < i; k++)
            if (strcmp(st->tensors[i].name, st->tensors[k].name) == 0)
                return as_fail(err, AS_ERR_FORMAT, "%s: two tensors are %s in timm's names (read "
                               "as the %s layout): keep one", st->path, st->tensors[i].name,
                               layout_name(info->layout));
    for (int i = 0; i < st->count; i++) {
        as_status rc = check_table(st, &st->tensors[i], cfg, err);
        if (rc != AS_OK) return rc;
    }
    return AS_OK;
}
