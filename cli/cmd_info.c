/* cmd_info.c: attnscope info: a model's architecture and cost, or what a trace holds. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../analysis/analysis.h"
#include "../io/h5util.h"
#include "../core/cait.h"
#include "cli.h"
#include "../core/vitfam.h"

static const cli_opt info_opts[] = {
    /* key alias name       ARG     values                      default      help */
    {'a', 0,   "arch",      "NAME", "attnscope info --list-archs, or a CONFIG.json", "config.json beside the weights",
     "architecture of a bare .safetensors file"},
    {'s', 0,   "img-size",  "N",    "1..16384", "the model's", "describe the model at another input size"},
    {'l', 0,   "list-archs", NULL,  NULL, NULL, "list the built-in architectures with parameters and GMACs"},
    {'j', 0,   "json",      NULL,   NULL, NULL, "machine-readable output: a model's full configuration (the "
     "format of docs/models.md); for a trace, everything the text shows, with the model's configuration"},
    {0}};

static const cli_cmd info_cmd = {
    "info", "MODEL|TRACE.h5|RESULTS.h5 [options]  |  --list-archs",
    "MODEL is a checkpoint folder or .safetensors file, or a built-in architecture name (no weights needed). "
    "Prints the configuration and, per component, parameters and FLOPs per image (a multiply-add counts as 2 "
    "FLOPs) and MACs (products only: what papers print as \"FLOPs\"). A CONFIG.json alone describes a model "
    "without weights (docs/models.md). For a trace: model, images, layers, heads, quantities, storage and "
    "state; for a results file of attnscope analyze --out: the results it holds.",
    info_opts, NULL};

/* One "key        value" line, wrapped to the terminal under its value column. */
#define line(...) cli_printf_wrap(12, __VA_ARGS__)

/* Attention per block, consecutive equal settings grouped. */
static void print_attention(const vit_config *c) {
    for (int l = 0; l < c->depth;) {
        char d[512], e[512];
        vit_attn_describe(c, l, d, sizeof d);
        int end = l + 1;
        while (end < c->depth && (vit_attn_describe(c, end, e, sizeof e), strcmp(d, e) == 0)) end++;
        char range[32];
        if (end - l == 1) snprintf(range, sizeof range, "block %d", l);
        else snprintf(range, sizeof range, "blocks %d-%d", l, end - 1);
        line("%-11s %s: %s\n", l == 0 ? "attention" : "", range, d);
        l = end;
    }
}

/* A staged model's stages: one row per stage with its geometry and cost, between the stem and
 * the head rows; the parts add up to the total. */
static void print_stages(const vit_config *c, const vit_cost *cost) {
    printf("\n%-8s %-7s %5s %5s %6s %-17s %11s %9s %9s\n", "stage", "grid", "dim", "heads", "blocks",
           "window", "params", "GFLOPs", "GMACs");
    const char *row = "%-8s %-7s %5s %5s %6s %-17s %11.0f %9.4f %9.4f\n";
    printf(row, "stem", "", "", "", "", c->n_stem ? (c->patch_norm ? "conv stem+norm" : "conv stem")
           : c->patch_norm || c->patch_kernel ? "patch_embed+norm" : "patch_embed",
           cost->stem.params_total, cost->stem.flops_total / 1e9, cost->stem.macs_total / 1e9);
    for (int s = 0; s < c->n_stages; s++) {
        vit_geom g, g1;
        const int l = vit_stage_first_block(c, s);
        vit_block_geom(c, l, &g);
        vit_block_geom(c, l + (c->stage[s].depth > 1), &g1); /* the shifted block, if any */
        char grid[32], dim[16], heads[16], blocks[16], win[64], name[24];
        snprintf(name, sizeof name, "%d%s", s, c->stage[s].down == VIT_DOWN_MERGE ? "+merge"
                 : c->stage[s].down == VIT_DOWN_CONV ? "+conv" : "");
        snprintf(grid, sizeof grid, "%dx%d", g.gh, g.gw);
        snprintf(dim, sizeof dim, "%d", g.D);
        snprintf(heads, sizeof heads, "%d", g.H);
        snprintf(blocks, sizeof blocks, "%d", c->stage[s].depth);
        if (g.scope == VIT_SCOPE_SRA) /* PVT v2: the keys' grid */
            snprintf(win, sizeof win, g.sr_pool ? "keys pool %dx%d" : "keys sr %d: %dx%d",
                     g.sr_pool ? g.kgh : g.sr_ratio, g.sr_pool ? g.kgw : g.kgh, g.kgw);
        else if (g.scope != VIT_SCOPE_WINDOW) snprintf(win, sizeof win, "%s", vit_scope_name(g.scope));
        else if (g.M < c->stage[s].window) snprintf(win, sizeof win, "%dx%d (clamped)", g.M, g.M);
        else if (g1.shift) snprintf(win, sizeof win, "%dx%d, shift %d", g.M, g.M, g1.shift);
        else snprintf(win, sizeof win, "%dx%d, no shift", g.M, g.M);
        printf(row, name, grid, dim, heads, blocks, win, cost->stage[s].params_total,
               cost->stage[s].flops_total / 1e9, cost->stage[s].macs_total / 1e9);
    }
    printf(row, "head", "", "", "", "", c->family == VIT_FAMILY_PVT2 ? "pool+fc" : "norm+pool+fc", cost->head.params_total,
           cost->head.flops_total / 1e9, cost->head.macs_total / 1e9);
}

/* PVT v2's input, blocks and head lines. */
static void print_pvt(const vit_config *c) {
    char list[5][64] = {"", "", "", "", ""};
    for (int s = 0; s < c->n_stages; s++) {
        const int v[5] = {c->stage[s].depth, c->stage[s].embed_dim, c->stage[s].num_heads,
                          c->stage[s].mlp_hidden, c->stage[s].sr_ratio};
        for (int k = 0; k < 5; k++)
            snprintf(list[k] + strlen(list[k]), sizeof list[k] - strlen(list[k]), "%s%d", s ? "," : "", v[k]);
    }
    vit_geom g;
    vit_block_geom(c, 0, &g);
    line("input       %dx%dx%d, overlapping stem Conv2d(k%d, s%d, p%d) + LayerNorm -> %dx%d grid; a "
         "Conv2d(k3, s2, p1) + LayerNorm before each stage after the first\n", c->in_chans, c->img_size,
         c->img_size, c->patch_kernel, c->patch_size, c->patch_kernel / 2, g.gh, g.gw);
    char keys[160];
    if (c->sr_linear) snprintf(keys, sizeof keys, "linear SRA (keys and values pooled to %dx%d)", VIT_SR_POOL, VIT_SR_POOL);
    else snprintf(keys, sizeof keys, "SRA with sr_ratios %s", list[4]);
    line("blocks      %d in %d pvt_v2 stages: depths %s, dims %s, heads %s, MixFFN %s%s; %s; qkv "
         "bias %s; LayerNorm eps %g (blocks, stage norms), %g (stem, downsample, SR)\n", c->depth,
         c->n_stages, list[0], list[1], list[2], list[3], c->sr_linear ? " with ReLU" : "", keys,
         c->qkv_bias ? "yes" : "no", (double)c->ln_eps, (double)c->conv_ln_eps);
    if (c->attn_residual)
        line("residual    LaViT's attention residual into the first block of every stage after the first: "
             "gamma Conv1x1(%s(DWConv2x2,s2(A))), A the previous stage's last %s\n",
             c->ar_norm == VIT_AR_LAYERNORM ? "LayerNorm over keys" : "no norm",
             c->ar_source == VIT_AR_SCORES ? "scores (before the softmax)" : "softmax maps");
    printf("head        %d classes, a LayerNorm closing each stage, pool %s (no final norm)\n",
           c->num_classes, vit_pool_name(c->global_pool));
}

/* The convolutional stem, one conv after another, each with its output grid. */
static void print_stem(const vit_config *c) {
    if (!c->n_stem) return;
    char buf[1024] = "";
    int any_bn = 0;
    for (int i = 0; i < c->n_stem; i++) {
        const vit_conv *cv = &c->stem[i];
        const int side = vit_stem_side(c, i);
        any_bn |= cv->bn;
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%sConv2d(%d->%d, k%d, s%d, p%d%s)%s%s%s -> %dx%d",
                 i ? "; " : "", vit_stem_in_chans(c, i), cv->out, cv->kernel, cv->stride, cv->padding,
                 cv->bias ? "" : ", no bias", cv->bn ? " + BN" : "", cv->act ? " + " : "",
                 cv->act ? vit_stem_act_name(cv->act) : "", side, side);
    }
    line("stem        %s%s\n", buf, any_bn ? " (BatchNorm in eval mode: running statistics; training keeps them)" : "");
}

static void print_model(const vit_config *c, const char *source, const char *dtype, size_t ntensors) {
    vit_cost cost;
    vit_config_cost(c, &cost);
    const int g = vit_grid(c), pre = vit_num_prefix(c);
    printf("model       %s\n", c->name);
    if (source) line("weights     %s (%s, %zu tensors)\n", source, dtype, ntensors);
    if (c->family == VIT_FAMILY_PVT2) {
        print_pvt(c);
    } else if (c->n_stages > 0) {
        char list[4][96] = {"", "", "", ""};
        for (int s = 0; s < c->n_stages; s++) {
            const int v[4] = {c->stage[s].depth, c->stage[s].embed_dim, c->stage[s].num_heads,
                              c->stage[s].mlp_hidden};
            for (int k = 0; k < 4; k++)
                snprintf(list[k] + strlen(list[k]), sizeof list[k] - strlen(list[k]), "%s%d", s ? "," : "", v[k]);
        }
        char ls[48] = "no LayerScale";
        if (c->init_values > 0) snprintf(ls, sizeof ls, "LayerScale init %g", (double)c->init_values);
        if (c->family == VIT_FAMILY_CAIT) /* CaiT: core/cait.h */
            line("input       %dx%dx%d, patch %d -> %dx%d grid; stage 0 (talking heads %s) over the "
                 "patches, stage 1 class attention over [cls; patches]; %s; qkv bias "
                 "%s, LayerNorm eps %g\n", c->in_chans, c->img_size, c->img_size, c->patch_size, g, g,
                 c->talking_heads ? "yes" : "no", ls, c->qkv_bias ? "yes" : "no", (double)c->ln_eps);
        else line("input       %dx%dx%d, %s %d -> %dx%d grid, halved by %s before each stage after the "
             "first\n", c->in_chans, c->img_size, c->img_size, c->n_stem ? "stem stride" : "patch", c->patch_size, g, g,
             c->n_stages > 1 && c->stage[1].down == VIT_DOWN_CONV ? "a Conv2d(k3, s2, p1) + LayerNorm (CSwin's merge)"
                                                                : "a 2x2 patch merging");
        print_stem(c);
        if (c->family == VIT_FAMILY_CAIT)
            line("blocks      %d in %d cait stages: depths %s, dims %s, heads %s, mlp %s\n", c->depth,
                 c->n_stages, list[0], list[1], list[2], list[3]);
        else {
            char scopes[96] = "", att[160];
            int windows = 0;
            for (int s = 0; s < c->n_stages; s++) {
                windows += c->stage[s].scope == VIT_SCOPE_WINDOW;
                snprintf(scopes + strlen(scopes), sizeof scopes - strlen(scopes), "%s%s", s ? "," : "",
                         vit_scope_name(c->stage[s].scope));
            }
            if (windows == c->n_stages)
                snprintf(att, sizeof att, "window %d, shifted by %d on odd blocks (pad order %s, window clamp %s)",
                         c->stage[0].window, c->shift_windows ? c->stage[0].window / 2 : 0,
                         vit_pad_order_name(c->pad_order), vit_window_clamp_name(c->window_clamp));
            else if (windows)
                snprintf(att, sizeof att, "stages attend %s; windows %d, shifted by %d on odd blocks", scopes,
                         c->stage[0].window, c->shift_windows ? c->stage[0].window / 2 : 0);
            else
                snprintf(att, sizeof att, "global attention over each stage's grid (no windows)");
            line("blocks      %d in %d %s stages: depths %s, dims %s, heads %s, mlp %s; %s; qkv bias %s, patch "
                 "norm %s, LayerNorm eps %g\n", c->depth, c->n_stages, vit_family_name(c->family), list[0], list[1],
                 list[2], list[3], att, c->qkv_bias ? "yes" : "no", c->patch_norm ? "yes" : "no", (double)c->ln_eps);
        }
        if (c->no_rel_pos_bias) line("            no relative position bias table in the windows (rel_pos_bias false)\n");
        printf("head        %d classes, final norm, pool %s\n", c->num_classes, vit_pool_name(c->global_pool));
    } else {
        char names[VIT_MAX_REG * 6 + 16], fam[160] = "";
        vit_prefix_names(c, names, sizeof names);
        line("input       %dx%dx%d, %s %d -> %dx%d grid = %d patches + %d prefix token%s (%s) = %d tokens%s\n",
               c->in_chans, c->img_size, c->img_size, c->n_stem ? "stem stride" : "patch", c->patch_size, g, g, g * g,
               pre, pre == 1 ? "" : "s", names[0] ? names : "none", vit_num_tokens(c),
               c->no_embed_class ? "; pos_embed over the patches only (no_embed_class)" : "");
        print_stem(c);
        if (c->init_values > 0) snprintf(fam, sizeof fam, ", LayerScale (init %g)", (double)c->init_values);
        if (c->act_layer != VIT_ACT_GELU) snprintf(fam + strlen(fam), sizeof fam - strlen(fam), ", %s", vit_act_name(c->act_layer));
        if (c->pre_norm) snprintf(fam + strlen(fam), sizeof fam - strlen(fam), ", norm_pre");
        if (c->mlp_scale > 0)
            snprintf(fam + strlen(fam), sizeof fam - strlen(fam), ", LayerScale on the MLP (init %g)", (double)c->mlp_scale);
        if (c->adjust_ratio > 0)
            snprintf(fam + strlen(fam), sizeof fam - strlen(fam), ", x += f(norm(%g x)) / %g", (double)c->adjust_ratio,
                     (double)c->adjust_ratio);
        line("blocks      %d x (dim %d, %d heads x %d, mlp %d), qkv bias %s, LayerNorm eps %g%s\n",
               c->depth, c->embed_dim, c->num_heads, vit_head_dim(c), c->mlp_hidden,
               c->qkv_bias ? "yes" : "no", (double)c->ln_eps, fam);
        if (c->num_classes > 0 && c->aux_head > 0)
            printf("head        %d classes, pool token + %g x the max of aux_head over the patch tokens\n",
                   c->num_classes, (double)c->aux_head);
        else if (c->num_classes > 0)
            printf("head        %d classes, pool %s%s%s\n", c->num_classes, vit_pool_name(c->global_pool),
                   c->fc_norm ? " + fc_norm" : "", c->distilled ? ", mean of head and head_dist" : "");
        else /* features only: record keeps the block outputs (--record tokens), no classes */
            printf("head        none (features only: the %d-d pooled features, pool %s%s; no classes)\n",
                   c->embed_dim, vit_pool_name(c->global_pool), c->fc_norm ? " + fc_norm" : "");
    }
    line("preprocess  resize shorter side to %d (%s), centre crop %d, mean (%.3f, %.3f, %.3f), "
         "std (%.3f, %.3f, %.3f)", (int)floor((double)c->img_size / c->crop_pct), /* validated: fits */
           vit_interp_name(c->interpolation), c->img_size, (double)c->mean[0], (double)c->mean[1],
           (double)c->mean[2], (double)c->std[0], (double)c->std[1], (double)c->std[2]);
    print_attention(c);
    printf("\n%-18s %14s %12s %12s %7s\n", "component", "params", "GFLOPs", "GMACs", "share");
    for (int i = 0; i < VIT_COMP_COUNT; i++) {
        /* the rows a family has: no tokens in Swin, no downsample in a ViT */
        if (c->n_stages > 0 && c->family != VIT_FAMILY_CAIT ? i == VIT_COMP_TOKENS : i == VIT_COMP_DOWNSAMPLE) continue;
        if (i == VIT_COMP_SR && c->family != VIT_FAMILY_PVT2) continue;
        printf("%-18s %14.0f %12.4f %12.4f %6.1f%%\n", vit_component_name((vit_component)i),
               cost.params[i], cost.flops[i] / 1e9, cost.macs[i] / 1e9,
               100.0 * cost.flops[i] / cost.flops_total);
    }
    printf("%-18s %14.0f %12.4f %12.4f\n", "total", cost.params_total, cost.flops_total / 1e9,
           cost.macs_total / 1e9);
    if (c->n_stages > 0) print_stages(c, &cost);
    printf("\n");
    char sum[512];
    snprintf(sum, sizeof sum, "%.2f M parameters; %.2f GMACs per image, what papers print as \"FLOPs\" "
             "(products only, fvcore's count); %.2f GFLOPs counting a multiply-add as 2 and every "
             "elementwise operation", cost.params_total / 1e6, cost.macs_total / 1e9, cost.flops_total / 1e9);
    cli_wrap(stdout, 0, 0, sum);
    if (c->sr_linear) { /* docs/models.md "PVT v2": what the published 3.82 G of b2_li leaves out */
        snprintf(sum, sizeof sum, "Linear SRA: without the 1x1 conv of attn.sr on the pooled keys "
                 "(%.3f G), %.2f GMACs: the count PVT v2 publishes for pvt_v2_b2_li (3.82 G)",
                 cost.macs[VIT_COMP_SR] / 1e9, (cost.macs_total - cost.macs[VIT_COMP_SR]) / 1e9);
        cli_wrap(stdout, 0, 0, sum);
    }
    if (c->family == VIT_FAMILY_CAIT) {
        snprintf(sum, sizeof sum, "CaiT's paper counts its self-attention blocks over %d tokens, as if "
                 "the class token were in them: %.2f GMACs that way (the engine computes %d)",
                 g * g + 1, vit_cait_paper_macs(c) / 1e9, g * g);
        cli_wrap(stdout, 0, 0, sum);
    }
}

static cJSON *cost_part_json(const vit_cost_part *p) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "params", p->params_total);
    cJSON_AddNumberToObject(o, "macs", p->macs_total);
    cJSON_AddNumberToObject(o, "flops", p->flops_total);
    return o;
}

/* info --json's "cost": totals, per component, and per part (stem, stages, head). A config
 * read back ignores it (docs/models.md: metadata). */
static cJSON *cost_json(const vit_config *c) {
    vit_cost cost;
    vit_config_cost(c, &cost);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "params", cost.params_total);
    cJSON_AddNumberToObject(o, "macs", cost.macs_total);
    cJSON_AddNumberToObject(o, "flops", cost.flops_total);
    cJSON *comp = cJSON_AddObjectToObject(o, "components");
    for (int i = 0; i < VIT_COMP_COUNT; i++) {
        if (i == VIT_COMP_SR && c->family != VIT_FAMILY_PVT2) continue;
        cJSON *e = cJSON_AddObjectToObject(comp, vit_component_name((vit_component)i));
        cJSON_AddNumberToObject(e, "params", cost.params[i]);
        cJSON_AddNumberToObject(e, "macs", cost.macs[i]);
        cJSON_AddNumberToObject(e, "flops", cost.flops[i]);
    }
    cJSON_AddItemToObject(o, "stem", cost_part_json(&cost.stem));
    cJSON *st = cJSON_AddArrayToObject(o, "stages");
    for (int s = 0; s < cost.n_stages; s++) {
        vit_geom g;
        vit_block_geom(c, vit_stage_first_block(c, s), &g);
        cJSON *e = cost_part_json(&cost.stage[s]);
        cJSON_AddNumberToObject(e, "blocks", c->n_stages ? c->stage[s].depth : c->depth);
        cJSON_AddNumberToObject(e, "grid", g.gh);
        cJSON_AddNumberToObject(e, "dim", g.D);
        cJSON_AddNumberToObject(e, "heads", g.H);
        cJSON_AddStringToObject(e, "scope", vit_scope_name(g.scope));
        if (g.scope == VIT_SCOPE_WINDOW) cJSON_AddNumberToObject(e, "window", g.M);
        if (g.scope == VIT_SCOPE_SRA) cJSON_AddNumberToObject(e, "keys", g.Tk);
        cJSON_AddItemToArray(st, e);
    }
    cJSON_AddItemToObject(o, "head", cost_part_json(&cost.head));
    return o;
}

static int print_json(cJSON *j);
static cJSON *json_lines(const char *text);

/* The model as text, or with --json its full config (what traces record) and its cost. */
static int print_config(const vit_config *c, const char *source, const char *dtype, size_t n, int json) {
    if (!json) {
        print_model(c, source, dtype, n);
        return 0;
    }
    char *s = model_config_to_json(c);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    if (!j) return cli_fail(1, "out of memory");
    cJSON_AddItemToObject(j, "cost", cost_json(c));
    return print_json(j);
}

/* A loaded checkpoint's --json: print_config's, with the loader's report lines (tensors it
 * ignored) under "mismatches" when there are any. */
static int print_model_json(const vit_config *c, const char *report) {
    char *s = model_config_to_json(c);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    if (!j) return cli_fail(1, "out of memory");
    cJSON_AddItemToObject(j, "cost", cost_json(c));
    if (report && report[0]) cJSON_AddItemToObject(j, "mismatches", json_lines(report));
    return print_json(j);
}

/* What the trace was made from: the weights (resolved path and sha256; format 1 traces have the
 * path only) and how (OpenBLAS kernels and threads: bit-identical results need the same). */
typedef struct {
    char src[1100], sha[80], core[64], forced[160], cfg[300], resumed[600], sw[64], gemm[288];
    int threads, version;
    long skipped;
} trace_provenance;

static void read_provenance(const trace_reader *r, trace_provenance *p) {
    memset(p, 0, sizeof *p);
    trace_read_attr_string(r, "model_source", p->src, sizeof p->src);
    trace_read_attr_string(r, "model_sha256", p->sha, sizeof p->sha);
    trace_read_attr_string(r, "blas_core", p->core, sizeof p->core);
    trace_read_attr_string(r, "blas_forced_by", p->forced, sizeof p->forced);
    trace_read_attr_string(r, "linear_gemm", p->gemm, sizeof p->gemm);
    trace_read_attr_string(r, "blas_config", p->cfg, sizeof p->cfg);
    trace_read_attr_string(r, "resumed_with", p->resumed, sizeof p->resumed);
    trace_read_attr_string(r, "software", p->sw, sizeof p->sw);
    h5u_attr_read_int((hid_t)r->file_id, "threads", &p->threads, 1);
    h5u_attr_read_int((hid_t)r->file_id, "format_version", &p->version, 1);
    p->skipped = trace_num_skipped(r);
}

/* The trace's bfloat16 check (record --precision bf16); 0 when it has none (float32 products). */
static int read_precision(const trace_reader *r, trace_precision *p) {
    const hid_t f = (hid_t)r->file_id;
    char prec[16] = "";
    memset(p, 0, sizeof *p);
    trace_read_attr_string(r, "precision", prec, sizeof prec);
    if (strcmp(prec, "bfloat16") != 0) return 0;
    p->n_layers = h5u_attr_read_int(f, "bf16_check_layers", p->layers, VIT_MAX_DEPTH);
    p->checked = p->n_layers > 0 && h5u_attr_read_doubles(f, "bf16_output_max_abs_err", &p->out_max_abs, 1) == 1 &&
                 h5u_attr_read_doubles(f, "bf16_output_max_abs", &p->out_max, 1) == 1 &&
                 h5u_attr_read_doubles(f, "bf16_attn_max_abs_err", &p->attn_max_abs, 1) == 1 &&
                 h5u_attr_read_doubles(f, "bf16_attn_mean_abs_err", &p->attn_mean_abs, 1) == 1 &&
                 h5u_attr_read_int(f, "bf16_top1_same", &p->top1_same, 1) == 1;
    if (p->n_layers < 0) p->n_layers = 0;
    return 1;
}

static void info_provenance(const trace_reader *r, const trace_provenance *p) {
    line("model       %s from %s", r->cfg.name, p->src);
    if (p->sha[0]) printf("weights     sha256 %s\n", p->sha);
    else if (strncmp(p->src, "random", 6) != 0 && p->version < 2)
        printf("weights     (no hash recorded: a trace from before format 2)\n");
    if (p->core[0]) {
        line("computed    %s, OpenBLAS %s kernels%s%s%s, %d thread%s (%s)", p->sw, p->core,
             p->forced[0] ? " (forced by " : "", p->forced, p->forced[0] ? ")" : "", p->threads,
             p->threads == 1 ? "" : "s", p->cfg);
        if (p->gemm[0]) line("linear      layers on %s", p->gemm);
        trace_precision pr;
        if (read_precision(r, &pr)) {
            char buf[600];
            if (pr.checked) precision_describe(&pr, buf, sizeof buf);
            else snprintf(buf, sizeof buf, "bfloat16 products (no check recorded)");
            line("precision   %s", buf);
        }
        if (p->resumed[0]) line("resumed     %s", p->resumed);
    }
}

/* A staged trace (format 3): each recorded layer's own grid, heads and windows, in place of
 * the one grid of a ViT trace. */
static void info_staged_layers(const trace_reader *r) {
    char fam[32] = "";
    trace_read_attr_string(r, "model_family", fam, sizeof fam);
    line("model       staged (%s): every layer has its own grid, width and heads (format 3)", fam);
    for (int li = 0; li < r->n_layers; li++) {
        const trace_layer_geom *t = &r->geom[li];
        char win[160] = "global attention";
        if (t->scope == VIT_SCOPE_WINDOW)
            snprintf(win, sizeof win, "windows %dx%d of %dx%d tokens (padded grid %dx%d), shift %d, "
                     "%d window%s recorded", t->nwh, t->nww, t->M, t->M, t->ph, t->pw, t->shift,
                     t->n_problems, t->n_problems == 1 ? "" : "s");
        else if (t->scope == VIT_SCOPE_SRA && t->sr_pool)
            snprintf(win, sizeof win, "spatial reduction: keys pooled to %dx%d", t->kgh, t->kgw);
        else if (t->scope == VIT_SCOPE_SRA)
            snprintf(win, sizeof win, "spatial reduction: sr_ratio %d, %dx%d keys every %g px", t->sr_ratio,
                     t->kgh, t->kgw, (double)t->key_stride_px);
        else if (t->scope == VIT_SCOPE_CLASS) /* CaiT */
            snprintf(win, sizeof win, "class attention: the class token's row over [cls; %d patches]", t->Tk - 1);
        else if (t->attn_signed)
            snprintf(win, sizeof win, "global attention with talking heads (attn is signed, not row-stochastic)");
        else if (t->local_side)
            snprintf(win, sizeof win, "global attention, every head local: maps stored as %dx%d "
                     "neighbourhoods plus one background weight per query (attn_local)", t->local_side,
                     t->local_side);
        line("%-11s layer %d: stage %d, %dx%d tokens every %g px, width %d, heads %d; %s",
             li == 0 ? "geometry" : "", t->layer, t->stage, t->gh, t->gw, (double)t->stride_px, t->D,
             t->H, win);
    }
}

/* A string member, or null when the trace does not hold it. */
static void json_string_or_null(cJSON *j, const char *key, const char *v) {
    if (v[0]) cJSON_AddStringToObject(j, key, v);
    else cJSON_AddNullToObject(j, key);
}

/* analysis_list's lines as a JSON array of strings. */
static cJSON *json_lines(const char *text) {
    cJSON *a = cJSON_CreateArray();
    char *t = strdup(text ? text : "");
    for (char *line = t, *nl; t && line && *line; line = nl) {
        nl = strchr(line, '\n');
        if (nl) *nl++ = 0;
        if (*line) cJSON_AddItemToArray(a, cJSON_CreateString(line));
    }
    free(t);
    return a;
}

static int print_json(cJSON *j) {
    char *s = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    if (!s) return cli_fail(1, "out of memory");
    printf("%s\n", s);
    free(s);
    return 0;
}

static cJSON *json_ints(const int *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

/* What info_trace prints, as JSON: the same facts under stable keys. */
static int info_trace_json(trace_reader *r, const char *path, const char *analysis) {
    char buf[4096];
    double fbytes, dbytes;
    trace_sizes(r, &fbytes, &dbytes);
    trace_provenance p;
    read_provenance(r, &p);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "trace", path);
    snprintf(buf, sizeof buf, "attnscope-trace v%d", p.version);
    cJSON_AddStringToObject(j, "format", buf);
    cJSON_AddNumberToObject(j, "format_version", p.version);
    cJSON *m = cJSON_AddObjectToObject(j, "model");
    cJSON_AddStringToObject(m, "name", r->cfg.name);
    cJSON_AddStringToObject(m, "source", p.src);
    json_string_or_null(m, "sha256", p.sha);
    char *cfg = model_config_to_json(&r->cfg);
    cJSON *cj = cfg ? cJSON_Parse(cfg) : NULL;
    free(cfg);
    if (cj) cJSON_AddItemToObject(m, "config", cj);
    cJSON *att = cJSON_AddArrayToObject(m, "attention");
    for (int l = 0; l < r->cfg.depth; l++) {
        vit_attn_describe(&r->cfg, l, buf, sizeof buf);
        cJSON_AddItemToArray(att, cJSON_CreateString(buf));
    }
    if (r->staged) { /* one grid per layer: tokens and grid are per layer */
        cJSON_AddNullToObject(j, "tokens");
        cJSON_AddNullToObject(j, "grid");
        cJSON *ls = cJSON_AddArrayToObject(j, "layer_geometry");
        for (int li = 0; li < r->n_layers; li++) {
            const trace_layer_geom *t = &r->geom[li];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddItemToArray(ls, e);
            const int grid[2] = {t->gh, t->gw}, nw[2] = {t->nwh, t->nww};
            cJSON_AddNumberToObject(e, "layer", t->layer);
            cJSON_AddNumberToObject(e, "stage", t->stage);
            cJSON_AddStringToObject(e, "scope", vit_scope_name(t->scope));
            cJSON_AddItemToObject(e, "grid", json_ints(grid, 2));
            cJSON_AddNumberToObject(e, "tokens", t->T);
            cJSON_AddNumberToObject(e, "embed_dim", t->D);
            cJSON_AddNumberToObject(e, "num_heads", t->H);
            cJSON_AddNumberToObject(e, "token_stride_px", t->stride_px);
            if (t->scope == VIT_SCOPE_WINDOW) {
                cJSON_AddNumberToObject(e, "window", t->M);
                cJSON_AddNumberToObject(e, "shift", t->shift);
                cJSON_AddItemToObject(e, "window_grid", json_ints(nw, 2));
            }
            if (t->scope == VIT_SCOPE_SRA) {
                const int kg[2] = {t->kgh, t->kgw};
                cJSON_AddItemToObject(e, "key_grid", json_ints(kg, 2));
                cJSON_AddNumberToObject(e, t->sr_pool ? "sr_pool" : "sr_ratio", t->sr_pool ? t->sr_pool : t->sr_ratio);
                cJSON_AddNumberToObject(e, "key_stride_px", t->key_stride_px);
                cJSON_AddNumberToObject(e, "key_offset_px", t->key_offset_px);
            }
            cJSON_AddStringToObject(e, "map_form", t->local_side ? "local" : "dense");
            if (t->local_side) cJSON_AddNumberToObject(e, "local_side", t->local_side);
        }
    } else {
        cJSON_AddNumberToObject(j, "tokens", r->num_tokens);
        cJSON_AddNumberToObject(j, "grid", vit_grid(&r->cfg));
    }
    cJSON_AddNumberToObject(j, "prefix_tokens", r->num_prefix);
    cJSON_AddNumberToObject(j, "patch_size", r->cfg.patch_size);
    cJSON_AddNumberToObject(j, "images", (double)r->n_images);
    cJSON_AddBoolToObject(j, "complete", r->complete);
    cJSON_AddBoolToObject(j, "being_written_or_killed", !r->complete && r->swmr);
    cJSON_AddNumberToObject(j, "skipped", (double)p.skipped);
    trace_read_attr_string(r, "interrupted", buf, sizeof buf);
    if (buf[0]) cJSON_AddStringToObject(j, "interrupted", buf);
    else cJSON_AddNullToObject(j, "interrupted");
    trace_read_attr_string(r, "start_time", buf, sizeof buf);
    cJSON_AddStringToObject(j, "start_time", buf);
    trace_read_attr_string(r, "end_time", buf, sizeof buf);
    if (buf[0]) cJSON_AddStringToObject(j, "end_time", buf);
    else cJSON_AddNullToObject(j, "end_time");
    cJSON *q = cJSON_AddArrayToObject(j, "quantities");
    for (int i = 0; i < TRACE_Q_COUNT; i++)
        if ((r->quantities & (1u << i)) && i != TRACE_Q_X1)
            cJSON_AddItemToArray(q, cJSON_CreateString(trace_quantity_name((trace_quantity)i)));
    cJSON_AddStringToObject(j, "query_rows", r->prefix_rows_only ? "prefix" : "all");
    cJSON_AddBoolToObject(j, "pool_attn", r->has_pool_attn);
    cJSON_AddItemToObject(j, "layers", json_ints(r->layers, r->n_layers));
    cJSON_AddNumberToObject(j, "depth", r->cfg.depth);
    if (r->heads_all) cJSON_AddStringToObject(j, "heads", "all");
    else cJSON_AddItemToObject(j, "heads", json_ints(r->heads, r->n_heads));
    if (r->n_windows > 0) cJSON_AddItemToObject(j, "windows", json_ints(r->windows, r->n_windows));
    cJSON_AddNumberToObject(j, "num_heads", r->cfg.num_heads);
    cJSON *st = cJSON_AddObjectToObject(j, "storage");
    cJSON_AddStringToObject(st, "dtype", r->f16 ? "float16" : "float32");
    cJSON_AddStringToObject(st, "compression", r->compression);
    cJSON_AddNumberToObject(st, "record_bytes", dbytes);
    cJSON_AddNumberToObject(st, "file_bytes", fbytes);
    trace_read_attr_string(r, "command_line", buf, sizeof buf);
    cJSON_AddStringToObject(j, "command_line", buf);
    cJSON *comp = cJSON_AddObjectToObject(j, "computed");
    json_string_or_null(comp, "software", p.sw);
    json_string_or_null(comp, "blas_core", p.core);
    json_string_or_null(comp, "blas_forced_by", p.forced);
    json_string_or_null(comp, "blas_config", p.cfg);
    json_string_or_null(comp, "linear_gemm", p.gemm);
    if (p.core[0]) cJSON_AddNumberToObject(comp, "threads", p.threads);
    else cJSON_AddNullToObject(comp, "threads");
    json_string_or_null(comp, "resumed_with", p.resumed);
    /* where the results live: RUN.analysis.h5 beside the trace, or the trace itself (older analyze) */
    char where[1100] = "";
    if (analysis && analysis[0]) analysis_results_where(r->path, where, sizeof where);
    json_string_or_null(j, "results_in", where);
    cJSON_AddItemToObject(j, "analysis", json_lines(analysis));
    return print_json(j);
}

static int info_trace(const char *path, int json) {
    as_error err = {0};
    trace_reader r;
    if (trace_reader_open(&r, path, &err) != AS_OK) {
        /* a results file of attnscope analyze --out: list what it holds */
        char *an = malloc(16384);
        int n = an ? analysis_list(path, an, 16384) : 0;
        int rc = n > 0 ? 0 : cli_error(&err);
        if (n > 0 && json) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "results", path);
            cJSON_AddItemToObject(j, "analysis", json_lines(an));
            rc = print_json(j);
        } else if (n > 0) {
            printf("results     %s (attnscope analyze --out)\n%s\n", path, an);
        }
        free(an);
        return rc;
    }
    if (json) {
        char *an = malloc(16384);
        if (an && analysis_list(r.path, an, 16384) <= 0) an[0] = 0;
        int rc = info_trace_json(&r, path, an);
        free(an);
        trace_reader_close(&r);
        return rc;
    }
    char buf[4096];
    double fbytes, dbytes;
    trace_sizes(&r, &fbytes, &dbytes);
    trace_provenance p;
    read_provenance(&r, &p);
    line("trace       %s (format attnscope-trace v%d)", path, p.version);
    info_provenance(&r, &p);
    if (r.staged) info_staged_layers(&r);
    else {
        char names[VIT_MAX_REG * 6 + 16];
        vit_prefix_names(&r.cfg, names, sizeof names);
        printf("tokens      %d (%d prefix%s%s + %dx%d patches of %d px)\n", r.num_tokens, r.num_prefix,
               names[0] ? ": " : "", names, vit_grid(&r.cfg), vit_grid(&r.cfg), r.cfg.patch_size);
    }
    printf("images      %ld complete%s\n", r.n_images,
           r.complete ? "" : r.swmr ? " (being written now, or its writer was killed)" : "");
    if (p.skipped > 0)
        line("skipped     %ld unreadable input%s (record --skip-bad; /skipped lists each with the reason)",
             p.skipped, p.skipped == 1 ? "" : "s");
    char st[256], en[64], why[64];
    trace_read_attr_string(&r, "start_time", st, sizeof st);
    trace_read_attr_string(&r, "end_time", en, sizeof en);
    trace_read_attr_string(&r, "interrupted", why, sizeof why);
    printf("state       %s%s%s%s\n", r.complete ? "complete" : "INCOMPLETE", why[0] ? " (" : "",
           why[0] ? why : "", why[0] ? ")" : "");
    printf("time        %s .. %s\n", st, en[0] ? en : "(not finished)");
    int q = 0;
    printf("quantities  ");
    for (int i = 0; i < TRACE_Q_COUNT; i++)
        if ((r.quantities & (1u << i)) && i != TRACE_Q_X1)
            printf("%s%s", q++ ? "," : "", trace_quantity_name((trace_quantity)i));
    const unsigned whole = 1u << TRACE_Q_TOKENS | 1u << TRACE_Q_Q | 1u << TRACE_Q_K;
    printf("  (query rows: %s)\n", !r.prefix_rows_only ? "all"
           : r.quantities & whole ? "prefix tokens only in the maps; tokens, q and k keep every token"
           : "prefix tokens only");
    if (r.has_pool_attn)
        line("pool        /pool/attn: the attention pooling's map, %d heads of its learnt query over the "
             "%d patch tokens", r.cfg.num_heads, vit_num_patches(&r.cfg));
    if (!r.staged) print_attention(&r.cfg); /* its config holds one grid (format 3: above) */
    printf("layers      ");
    for (int i = 0; i < r.n_layers; i++) printf("%s%d", i ? "," : "", r.layers[i]);
    printf(" of %d\nheads       ", r.cfg.depth);
    for (int i = 0; i < r.n_heads; i++) printf("%s%d", i ? "," : "", r.heads[i]);
    if (r.heads_all) printf("all of each layer's\n");
    else if (r.staged) printf("\n");
    else printf(" of %d\n", r.cfg.num_heads);
    if (r.n_windows > 0) {
        printf("windows     ");
        for (int i = 0; i < r.n_windows; i++) printf("%s%d", i ? "," : "", r.windows[i]);
        printf(" (of each window layer)\n");
    }
    line("storage     %s, compression %s; %.1f MB of records in a %.1f MB file (ratio %.2f)\n",
           r.f16 ? "float16" : "float32", r.compression, dbytes / 1e6, fbytes / 1e6,
           fbytes > 0 ? dbytes / fbytes : 0.0);
    trace_read_attr_string(&r, "command_line", buf, sizeof buf);
    line("command     %s\n", buf);
    char *an = malloc(16384);
    if (an && analysis_list(r.path, an, 16384) > 0) {
        char where[1100];
        analysis_results_where(r.path, where, sizeof where);
        line("results in  %s", strcmp(where, r.path) != 0 ? where
             : "the trace itself (analysed by an older attnscope)");
        for (char *l = an, *nl; l && *l; l = nl) {
            nl = strchr(l, '\n');
            if (nl) *nl++ = 0;
            line("%-11s %s", l == an ? "analysis" : "", l);
        }
    }
    free(an);
    if (!r.complete)
        printf("\n"), line("This trace is incomplete: attnscope record ... --resume continues it.%s",
               r.swmr ? " h5py opens it with h5py.File(path, 'r', swmr=True); h5clear -s "
                        "makes it open everywhere once no writer runs." : "");
    trace_reader_close(&r);
    return 0;
}

/* The built-in architectures: a table, or with --json an array of objects with the same facts. */
static int list_archs(int json) {
    int w = 34; /* the longest name sets the column */
    for (int i = 0; i < vit_arch_count(); i++)
        if ((int)strlen(vit_arch_get(i)->name) > w) w = (int)strlen(vit_arch_get(i)->name);
    cJSON *j = json ? cJSON_CreateObject() : NULL, *a = json ? cJSON_AddArrayToObject(j, "architectures") : NULL;
    if (json && !a) {
        cJSON_Delete(j);
        return cli_fail(1, "out of memory");
    }
    if (!json) printf("%-*s %8s %7s  %s\n", w, "architecture", "params", "GMACs", "notes");
    for (int i = 0; i < vit_arch_count(); i++) {
        const vit_config *c = vit_arch_get(i);
        vit_cost cost;
        vit_config_cost(c, &cost);
        const char *mech = c->attn[0].kind != VIT_ATTN_VANILLA ? vit_attn_name(c->attn[0].kind) : NULL;
        char notes[512];
        snprintf(notes, sizeof notes, "%s%s%s%s%s%s%s", c->n_stages ? vit_family_name(c->family) : "",
                 c->n_stages ? ", " : "", mech ? mech : "", mech ? " attention, " : "",
                 c->distilled ? "distilled, " : "", c->num_classes ? "" : "no head, ",
                 c->mean[0] > 0.49f ? "inception mean/std" : c->std[0] > 0.26f ? "openai clip mean/std"
                                                                               : "imagenet mean/std");
        if (!json) {
            printf("%-*s %7.1fM %7.2f  %s\n", w, c->name, cost.params_total / 1e6, cost.macs_total / 1e9, notes);
            continue;
        }
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", c->name);
        cJSON_AddNumberToObject(e, "params", cost.params_total);
        cJSON_AddNumberToObject(e, "macs", cost.macs_total);
        cJSON_AddNumberToObject(e, "flops", cost.flops_total);
        cJSON_AddStringToObject(e, "notes", notes);
        cJSON_AddItemToArray(a, e);
    }
    return json ? print_json(j) : 0;
}

int cmd_info(int argc, char **argv) {
    const char *arch = NULL;
    int img_size = 0, json = 0, list = 0, ch;
    optind = 1;
    while ((ch = cli_opts_next(&info_cmd, argc, argv)) >= 0) {
        switch (ch) {
        case 'a': arch = optarg; break;
        case 's':
            if (!cli_parse_int(optarg, 1, 16384, &img_size)) return cli_bad_value(&info_cmd, ch, optarg);
            break;
        case 'l': list = 1; break;
        case 'j': json = 1; break;
        }
    }
    if (ch != CLI_END) return cli_opts_exit(ch);
    if (list) {
        if (optind < argc) return cli_extra(&info_cmd, argv[optind]);
        if (arch || img_size)
            return cli_fail(2, "%s applies to one model, not to the --list-archs table: drop it", arch ? "--arch" : "--img-size");
        return list_archs(json);
    }
    if (optind >= argc) return cli_missing(&info_cmd, "MODEL, TRACE.h5 or RESULTS.h5: what to describe");
    if (optind + 1 < argc) return cli_extra(&info_cmd, argv[optind + 1]);
    const char *target = argv[optind];
    size_t L = strlen(target);
    if ((L > 3 && strcmp(target + L - 3, ".h5") == 0) || (L > 5 && strcmp(target + L - 5, ".hdf5") == 0)) {
        if (arch || img_size) /* a trace holds its model's configuration: nothing to override */
            return cli_fail(2, "%s: %s applies to a model, not to a trace or results file (they hold their "
                            "model's configuration): drop %s", target, arch ? "--arch" : "--img-size",
                            arch ? "--arch" : "--img-size");
        return info_trace(target, json);
    }
    as_error err = {0};
    vit_config named;
    /* a name that is no file: a built-in architecture or one of its timm tags; an unknown
     * name gets the known names and the families not supported yet */
    const int is_path = access(target, F_OK) == 0;
    const vit_config *builtin = NULL;
    if (!is_path && !(L > 5 && strcmp(target + L - 5, ".json") == 0) && !strchr(target, '/') &&
        !(L > 12 && strcmp(target + L - 12, ".safetensors") == 0)) {
        if (vit_arch_resolve(target, &named, &err) != AS_OK) return cli_error(&err);
        builtin = &named;
    }
    if (!arch && L > 5 && strcmp(target + L - 5, ".json") == 0) {
        vit_config c = {0};
        if (model_config_from_arch(&c, target, &err) != AS_OK) return cli_error(&err);
        if (img_size) c.img_size = img_size;
        if (vit_config_validate(&c, &err) != AS_OK) return cli_error(&err);
        return print_config(&c, NULL, NULL, 0, json);
    }
    if (builtin && !arch) {
        vit_config c = *builtin;
        if (img_size) c.img_size = img_size;
        if (vit_config_validate(&c, &err) != AS_OK) return cli_error(&err);
        return print_config(&c, NULL, NULL, 0, json);
    }
    model m;
    /* every mismatching tensor on a line of its own; with --json those lines go into the JSON
     * ("mismatches"), stdout being JSON, and the one-line error to stderr */
    char *rep = NULL;
    size_t rep_n = 0;
    FILE *report = json ? open_memstream(&rep, &rep_n) : stdout;
    if (!report) return cli_fail(1, "out of memory");
    const as_status st = model_load_report(&m, target, arch, img_size, report, &err);
    if (json) fclose(report);
    if (json && (st != AS_OK || (rep && rep[0]))) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "model", target);
        if (st != AS_OK) cJSON_AddStringToObject(j, "error", err.msg);
        cJSON_AddItemToObject(j, "mismatches", json_lines(rep));
        if (st != AS_OK) {
            print_json(j);
            free(rep);
            return cli_error(&err);
        }
        cJSON_Delete(j); /* loaded: the mismatches join the configuration below */
    }
    if (st != AS_OK) return cli_error(&err);
    int rc = json ? print_model_json(&m.cfg, rep) : print_config(&m.cfg, m.source, m.weights_dtype, m.n_tensors, 0);
    free(rep);
    char note[512];
    model_layout_note(&m, note, sizeof note);
    if (!json && note[0]) line("layout      %s", note);
    if (!json && m.sha256[0]) line("sha256      %s (of the weights file, as traces record it)", m.sha256);
    model_free(&m);
    return rc;
}
