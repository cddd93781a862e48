/* precision.c: --precision bf16: the linear layers' products in bfloat16 (core/gemm.h), and what
 * that does to one image against float32 products, measured when a run starts and stored in the
 * trace (trace_precision). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int record_parse_precision(const char *s, int *bf16, as_error *err) {
    if (strcmp(s, "f32") == 0 || strcmp(s, "bf16") == 0) {
        *bf16 = strcmp(s, "bf16") == 0;
        return 0;
    }
    as_fail(err, AS_ERR_ARG, "--precision %s: the values are f32 (the default) and bf16", s);
    return 2;
}

as_status model_use_bf16(model *m, as_error *err) {
    vit_gemm_pack *pk = vit_gemm_pack_new_precision(VIT_GEMM_BF16);
    if (!pk)
        return as_fail(err, AS_ERR_UNSUPPORTED, "--precision bf16 needs the linear layers on oneDNN, "
                       "and they run on %s: unset ATTNSCOPE_GEMM (or build with libdnnl-dev)", vit_gemm_name());
    if (!vit_gemm_bf16_available()) {
        vit_gemm_pack_free(pk);
        return as_fail(err, AS_ERR_UNSUPPORTED, "--precision bf16: oneDNN has no bfloat16 matmul for "
                       "this CPU (it needs AVX-512): use --precision f32");
    }
    vit_gemm_pack_free(m->params.pack);
    m->params.pack = pk;
    return AS_OK;
}

/* Maps compared: every block's while they take at most this much (float32, one run), else the
 * first, middle and last block's (DINOv2 at 518 px: 45 MB a block). */
#define CHECK_MAP_BYTES ((size_t)128 << 20)

as_status precision_check(const model *m, const float *x, trace_precision *out, as_error *err) {
    const vit_config *c = &m->cfg;
    const int L = c->depth;
    memset(out, 0, sizeof *out);
    size_t per[VIT_MAX_DEPTH], all = 0;
    for (int l = 0; l < L; l++) {
        vit_geom g;
        vit_block_geom(c, l, &g);
        per[l] = (size_t)g.H * g.problems * g.Tq * g.Tk;
        all += per[l] * sizeof(float);
    }
    int pick[VIT_MAX_DEPTH] = {0};
    for (int l = 0; l < L; l++) pick[l] = all <= CHECK_MAP_BYTES || l == 0 || l == L / 2 || l == L - 1;
    vit_gemm_pack *ref = vit_gemm_pack_new();
    size_t act = vit_acts_carve(c, 1, NULL, NULL), maps = 0;
    for (int l = 0; l < L; l++) maps += pick[l] ? per[l] : 0;
    void *arena = aligned_alloc(64, (act + 63) & ~(size_t)63);
    float *mem = malloc(2 * maps * sizeof(float) + 2 * ((size_t)c->num_classes + 2 * c->embed_dim + 1) * sizeof(float));
    float *ab[VIT_MAX_DEPTH] = {0}, *af[VIT_MAX_DEPTH] = {0};
    if (!ref || !arena || !mem) {
        vit_gemm_pack_free(ref);
        free(arena);
        free(mem);
        return as_fail(err, ref ? AS_ERR_NOMEM : AS_ERR_UNSUPPORTED, ref ? "out of memory for the bfloat16 check"
                       : "the float32 products for the bfloat16 check need oneDNN");
    }
    float *p = mem;
    for (int l = 0; l < L; l++)
        if (pick[l]) ab[l] = p, af[l] = p + maps, p += per[l], out->layers[out->n_layers++] = l;
    p += maps;
    const int C = c->num_classes, D = c->n_stages ? 0 : c->embed_dim, n_out = C > 0 ? C : D;
    float *ob = p, *of = p + n_out + 1;
    vit_acts a;
    vit_acts_carve(c, 1, arena, &a);
    vit_params pf = m->params;
    pf.pack = ref;
    const vit_params *runs[2] = {&m->params, &pf};
    float **maps_of[2] = {ab, af}, *outs[2] = {ob, of};
    for (int k = 0; k < 2; k++) {
        vit_record rec;
        memset(&rec, 0, sizeof rec);
        rec.attn = maps_of[k];
        vit_forward(c, runs[k], &a, x, 1, &rec);
        if (n_out) memcpy(outs[k], C > 0 ? a.logits : a.pooled, (size_t)n_out * sizeof(float));
    }
    double mx = 0, sum = 0, n = 0;
    for (int l = 0; l < L; l++)
        for (size_t i = 0; pick[l] && i < per[l]; i++) {
            const double d = fabs((double)ab[l][i] - af[l][i]);
            mx = d > mx ? d : mx;
            sum += d, n++;
        }
    out->attn_max_abs = mx;
    out->attn_mean_abs = n > 0 ? sum / n : 0;
    int bb = 0, bf = 0;
    for (int i = 0; i < n_out; i++) {
        const double d = fabs((double)ob[i] - of[i]);
        out->out_max_abs = d > out->out_max_abs ? d : out->out_max_abs;
        out->out_max = fabs(of[i]) > out->out_max ? fabs(of[i]) : out->out_max;
        if (ob[i] > ob[bb]) bb = i;
        if (of[i] > of[bf]) bf = i;
    }
    out->top1_same = C > 0 ? bb == bf : -1;
    out->checked = 1;
    vit_gemm_pack_free(ref);
    free(arena);
    free(mem);
    return AS_OK;
}

void precision_describe(const trace_precision *p, char *buf, size_t n) {
    char layers[256] = ""; /* "0-11", or "0,6,11" */
    int o = 0;
    for (int i = 0; i < p->n_layers && o < (int)sizeof layers - 12; i++) {
        int j = i;
        while (j + 1 < p->n_layers && p->layers[j + 1] == p->layers[j] + 1) j++;
        o += snprintf(layers + o, sizeof layers - (size_t)o, j > i + 1 ? "%s%d-%d" : "%s%d", i ? "," : "",
                      p->layers[i], p->layers[j]);
        if (j == i + 1) o += snprintf(layers + o, sizeof layers - (size_t)o, ",%d", p->layers[j]);
        i = j;
    }
    snprintf(buf, n, "bfloat16 products; against float32 ones on the first image, %s within %.3g (largest "
             "|value| %.3g)%s, attn maps within %.3g (mean %.2g; blocks %s)",
             p->top1_same >= 0 ? "logits" : "features", p->out_max_abs, p->out_max,
             p->top1_same > 0 ? ", same top-1" : p->top1_same == 0 ? ", OTHER top-1" : "",
             p->attn_max_abs, p->attn_mean_abs, layers);
}
