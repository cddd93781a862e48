/* cmd_info.c: attnscope info: a model's architecture and cost, or what a trace holds. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../analysis/analysis.h"
#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: attnscope info MODEL [--arch NAME|CONFIG.json] [--img-size N] [--json]\n"
"       attnscope info TRACE.h5\n"
"       attnscope info --list-archs\n"
"MODEL is a checkpoint folder or .safetensors file, or a built-in architecture name (no weights\n"
"needed). Prints the configuration and, per component, parameters and FLOPs per image (a\n"
"multiply-add counts as 2 FLOPs) and MACs (products only: what papers print as \"FLOPs\").\n"
"A CONFIG.json alone describes a model without weights (docs/models.md). For a trace:\n"
"model, images, layers, heads, quantities, storage and state. --json prints a model's full\n"
"configuration as JSON (the format of docs/models.md).\n");
}

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
        printf("%-11s %s: %s\n", l == 0 ? "attention" : "", range, d);
        l = end;
    }
}

static void print_model(const vit_config *c, const char *source, const char *dtype, size_t ntensors) {
    vit_cost cost;
    vit_config_cost(c, &cost);
    const int g = vit_grid(c), pre = vit_num_prefix(c);
    printf("model       %s\n", c->name);
    if (source) printf("weights     %s (%s, %zu tensors)\n", source, dtype, ntensors);
    printf("input       %dx%dx%d, patch %d -> %dx%d grid = %d patches + %d prefix token%s (%s%s) = %d tokens\n",
           c->in_chans, c->img_size, c->img_size, c->patch_size, g, g, g * g, pre, pre == 1 ? "" : "s",
           c->class_token ? "cls" : "none", c->distilled ? ",dist" : "", vit_num_tokens(c));
    printf("blocks      %d x (dim %d, %d heads x %d, mlp %d), qkv bias %s, LayerNorm eps %g\n",
           c->depth, c->embed_dim, c->num_heads, vit_head_dim(c), c->mlp_hidden,
           c->qkv_bias ? "yes" : "no", (double)c->ln_eps);
    printf("head        %d classes, pool %s%s%s\n", c->num_classes, vit_pool_name(c->global_pool),
           c->fc_norm ? " + fc_norm" : "", c->distilled ? ", mean of head and head_dist" : "");
    printf("preprocess  resize shorter side to %d (%s), centre crop %d, mean (%.3f, %.3f, %.3f), "
           "std (%.3f, %.3f, %.3f)\n", (int)((double)c->img_size / c->crop_pct),
           vit_interp_name(c->interpolation), c->img_size, (double)c->mean[0], (double)c->mean[1],
           (double)c->mean[2], (double)c->std[0], (double)c->std[1], (double)c->std[2]);
    print_attention(c);
    printf("\n%-18s %14s %12s %12s %7s\n", "component", "params", "GFLOPs", "GMACs", "share");
    for (int i = 0; i < VIT_COMP_COUNT; i++)
        printf("%-18s %14.0f %12.4f %12.4f %6.1f%%\n", vit_component_name((vit_component)i),
               cost.params[i], cost.flops[i] / 1e9, cost.macs[i] / 1e9,
               100.0 * cost.flops[i] / cost.flops_total);
    printf("%-18s %14.0f %12.4f %12.4f\n", "total", cost.params_total, cost.flops_total / 1e9,
           cost.macs_total / 1e9);
    printf("\n%.2f M parameters; %.2f GMACs per image, what papers print as \"FLOPs\" (products "
           "only, fvcore's count); %.2f GFLOPs counting a multiply-add as 2 and every elementwise "
           "operation\n", cost.params_total / 1e6, cost.macs_total / 1e9, cost.flops_total / 1e9);
}

/* The model as text, or with --json its full config (what traces record). */
static int print_config(const vit_config *c, const char *source, const char *dtype, size_t n, int json) {
    if (!json) {
        print_model(c, source, dtype, n);
        return 0;
    }
    char *s = model_config_to_json(c);
    if (!s) return 1;
    printf("%s\n", s);
    free(s);
    return 0;
}

static int info_trace(const char *path) {
    as_error err = {0};
    trace_reader r;
    if (trace_reader_open(&r, path, &err) != AS_OK) {
        /* a results file of attnscope analyze --out: list what it holds */
        char *an = malloc(16384);
        int n = an ? analysis_list(path, an, 16384) : 0;
        if (n > 0) printf("results     %s (attnscope analyze --out)\n%s\n", path, an);
        free(an);
        return n > 0 ? 0 : cli_error(&err);
    }
    char buf[4096];
    double fbytes, dbytes;
    trace_sizes(&r, &fbytes, &dbytes);
    printf("trace       %s (format %s)\n", path, "attnscope-trace v1");
    trace_read_attr_string(&r, "model_source", buf, sizeof buf);
    printf("model       %s from %s\n", r.cfg.name, buf);
    printf("tokens      %d (%d prefix + %dx%d patches of %d px)\n", r.num_tokens, r.num_prefix,
           vit_grid(&r.cfg), vit_grid(&r.cfg), r.cfg.patch_size);
    printf("images      %ld complete%s\n", r.n_images,
           r.complete ? "" : r.swmr ? " (being written now, or its writer was killed)" : "");
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
    printf("  (query rows: %s)\n", r.prefix_rows_only ? "prefix tokens only" : "all");
    print_attention(&r.cfg);
    printf("layers      ");
    for (int i = 0; i < r.n_layers; i++) printf("%s%d", i ? "," : "", r.layers[i]);
    printf(" of %d\nheads       ", r.cfg.depth);
    for (int i = 0; i < r.n_heads; i++) printf("%s%d", i ? "," : "", r.heads[i]);
    printf(" of %d\n", r.cfg.num_heads);
    printf("storage     %s, compression %s; %.1f MB of records in a %.1f MB file (ratio %.2f)\n",
           r.f16 ? "float16" : "float32", r.compression, dbytes / 1e6, fbytes / 1e6,
           fbytes > 0 ? dbytes / fbytes : 0.0);
    trace_read_attr_string(&r, "command_line", buf, sizeof buf);
    printf("command     %s\n", buf);
    char *an = malloc(16384);
    if (an && analysis_list(r.path, an, 16384) > 0) {
        char where[1100];
        analysis_results_where(r.path, where, sizeof where);
        printf("results in  %s\n", strcmp(where, r.path) != 0 ? where
               : "the trace itself (analysed by an older attnscope)");
        printf("analysis    ");
        for (char *line = an, *nl; line; line = nl) {
            nl = strchr(line, '\n');
            if (nl) *nl++ = 0;
            printf("%s%s\n", line == an ? "" : "            ", line);
        }
    }
    free(an);
    if (!r.complete)
        printf("\nThis trace is incomplete: attnscope record ... --resume continues it.%s\n",
               r.swmr ? " h5py opens it with h5py.File(path, 'r', swmr=True); h5clear -s "
                        "makes it open everywhere once no writer runs." : "");
    trace_reader_close(&r);
    return 0;
}

int cmd_info(int argc, char **argv) {
    static const struct option opts[] = {{"arch", required_argument, 0, 'a'},
                                         {"img-size", required_argument, 0, 's'},
                                         {"list-archs", no_argument, 0, 'l'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *arch = NULL;
    int img_size = 0, json = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'a': arch = optarg; break;
        case 's':
            if (!cli_parse_int(optarg, 1, 16384, &img_size)) {
                fprintf(stderr, "attnscope info: bad --img-size %s\n", optarg);
                return 2;
            }
            break;
        case 'l':
            for (int i = 0; i < vit_arch_count(); i++) {
                const vit_config *c = vit_arch_get(i);
                vit_cost cost;
                vit_config_cost(c, &cost);
                printf("%-34s %6.1f M params %7.2f GMACs  %s%s\n", c->name, cost.params_total / 1e6,
                       cost.macs_total / 1e9, c->distilled ? "distilled " : "",
                       c->mean[0] > 0.49f ? "(inception mean/std)" : "(imagenet mean/std)");
            }
            return 0;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    const char *target = argv[optind];
    size_t L = strlen(target);
    if ((L > 3 && strcmp(target + L - 3, ".h5") == 0) || (L > 5 && strcmp(target + L - 5, ".hdf5") == 0))
        return info_trace(target);
    as_error err = {0};
    const vit_config *builtin = vit_arch_find(target);
    if (!arch && L > 5 && strcmp(target + L - 5, ".json") == 0) {
        vit_config c;
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
    if (model_load_report(&m, target, arch, img_size, stdout, &err) != AS_OK) return cli_error(&err);
    print_config(&m.cfg, m.source, m.weights_dtype, m.n_tensors, json);
    model_free(&m);
    return 0;
}
