/* gemm.c: linear layers through oneDNN's matmul with prepacked weights (gemm.h). */
#include "gemm.h"
#include "kernels.h"

#include <stdio.h>
#include <string.h>

#ifdef AS_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

/* One way of computing products with one weight matrix: the primitive for a row count M, an
 * output stride, accumulation and bias, and which packed copy of the weights it reads. */
typedef struct {
    int M, ldy, acc, bias, wi;
    long used;            /* pack->products at its last use (the least recent is replaced) */
    dnnl_primitive_t prim;
    dnnl_memory_t src, dst, b;
    /* bfloat16 packs: x is rounded to bfloat16 into src (its own buffer) by cvt from src32 */
    dnnl_primitive_t cvt;
    dnnl_memory_t src32;
} gemm_way;

#define GEMM_WAYS 8   /* row counts per weight: full and last batches, stages' token counts */
#define GEMM_LAYOUTS 2

typedef struct {
    const float *w;
    int N, K;
    int nl, nw;
    dnnl_memory_desc_t lmd[GEMM_LAYOUTS]; /* packed layouts of w, and the copies */
    dnnl_memory_t lmem[GEMM_LAYOUTS];
    gemm_way way[GEMM_WAYS];
} gemm_entry;

struct vit_gemm_pack {
    pthread_mutex_t mu;
    gemm_entry *e;
    int n, cap;
    long products;
    vit_gemm_precision precision;
    void *scratch;        /* bfloat16: x rounded for the product running now (under mu) */
    size_t scratch_bytes;
};

/* oneDNN's memory objects take void *; it only reads sources, weights and biases */
static void *unconst(const float *p) { return (void *)(uintptr_t)p; }

static dnnl_engine_t g_engine;
static dnnl_stream_t g_stream;
static int g_ok = -1;          /* engine made (1), failed (0), not yet (-1) */
static int g_use_dnnl = 1;     /* vit_gemm_select */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Thread_local vit_gemm_pack *g_current;
static char g_name[96], g_name_bf16[160];

static void engine_init(void) {
    g_ok = dnnl_engine_create(&g_engine, dnnl_cpu, 0) == dnnl_success &&
           dnnl_stream_create(&g_stream, g_engine, dnnl_stream_default_flags) == dnnl_success;
    const dnnl_version_t *v = dnnl_version();
    snprintf(g_name, sizeof g_name, "oneDNN %d.%d.%d matmul, prepacked weights", v->major, v->minor, v->patch);
    snprintf(g_name_bf16, sizeof g_name_bf16, "oneDNN %d.%d.%d matmul, prepacked weights, bfloat16 "
             "products (inputs and weights rounded to bfloat16, float32 sums)", v->major, v->minor, v->patch);
}

/* Destroys what way g holds (a way that failed half-way included). */
static void way_free(gemm_way *g) {
    if (g->prim) dnnl_primitive_destroy(g->prim);
    if (g->src) dnnl_memory_destroy(g->src);
    if (g->dst) dnnl_memory_destroy(g->dst);
    if (g->b) dnnl_memory_destroy(g->b);
    if (g->cvt) dnnl_primitive_destroy(g->cvt);
    if (g->src32) dnnl_memory_destroy(g->src32);
}

vit_gemm_pack *vit_gemm_pack_new_precision(vit_gemm_precision precision) {
    if (!g_use_dnnl) return NULL;
    pthread_once(&g_once, engine_init);
    if (!g_ok) return NULL;
    vit_gemm_pack *pk = calloc(1, sizeof *pk);
    if (pk) pthread_mutex_init(&pk->mu, NULL);
    if (pk) pk->precision = precision;
    return pk;
}

vit_gemm_pack *vit_gemm_pack_new(void) { return vit_gemm_pack_new_precision(VIT_GEMM_F32); }

vit_gemm_precision vit_gemm_pack_precision(const vit_gemm_pack *pk) { return pk ? pk->precision : VIT_GEMM_F32; }

int vit_gemm_bf16_available(void) {
    if (!g_use_dnnl) return 0;
    pthread_once(&g_once, engine_init);
    if (!g_ok) return 0;
    dnnl_memory_desc_t sd, wd, dd;
    dnnl_dims_t mk = {8, 64}, kn = {64, 64}, mn = {8, 64};
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    int ok = dnnl_memory_desc_init_by_tag(&sd, 2, mk, dnnl_bf16, dnnl_ab) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&wd, 2, kn, dnnl_bf16, dnnl_format_tag_any) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&dd, 2, mn, dnnl_f32, dnnl_ab) == dnnl_success &&
             dnnl_matmul_desc_init(&md, &sd, &wd, NULL, &dd) == dnnl_success &&
             dnnl_primitive_desc_create(&pd, &md, NULL, g_engine, NULL) == dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    return ok;
}

const char *vit_gemm_pack_name(const vit_gemm_pack *pk) {
    if (!pk) return "OpenBLAS";
    pthread_once(&g_once, engine_init);
    return pk->precision == VIT_GEMM_BF16 ? g_name_bf16 : g_name;
}

void vit_gemm_pack_free(vit_gemm_pack *pk) {
    if (!pk) return;
    for (int i = 0; i < pk->n; i++) {
        gemm_entry *e = &pk->e[i];
        for (int k = 0; k < e->nw; k++) way_free(&e->way[k]);
        for (int k = 0; k < e->nl; k++) dnnl_memory_destroy(e->lmem[k]);
    }
    free(pk->e);
    free(pk->scratch);
    pthread_mutex_destroy(&pk->mu);
    free(pk);
}

long vit_gemm_pack_products(const vit_gemm_pack *pk) {
    if (!pk) return 0;
    pthread_mutex_lock((pthread_mutex_t *)(uintptr_t)&pk->mu);
    long n = pk->products;
    pthread_mutex_unlock((pthread_mutex_t *)(uintptr_t)&pk->mu);
    return n;
}

int vit_gemm_attention_fused(void) {
    return g_current != NULL && kernels_attn_available();
}

vit_gemm_pack *vit_gemm_use(vit_gemm_pack *pk) {
    vit_gemm_pack *old = g_current;
    g_current = pk;
    return old;
}

static gemm_entry *entry_of(vit_gemm_pack *pk, const float *w, int N, int K) {
    for (int i = 0; i < pk->n; i++)
        if (pk->e[i].w == w && pk->e[i].N == N && pk->e[i].K == K) return &pk->e[i];
    if (pk->n == pk->cap) {
        int cap = pk->cap ? 2 * pk->cap : 64;
        gemm_entry *e = realloc(pk->e, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        pk->e = e, pk->cap = cap;
    }
    gemm_entry *e = &pk->e[pk->n++];
    memset(e, 0, sizeof *e);
    e->w = w, e->N = N, e->K = K;
    return e;
}

/* The packed copy of e's weights in layout md: an existing one, or reordered now from the
 * user's (N, K) row-major matrix, which is the (K, N) matrix in layout "ba". -1: cannot. */
static int layout_of(gemm_entry *e, const dnnl_memory_desc_t *md) {
    for (int i = 0; i < e->nl; i++)
        if (dnnl_memory_desc_equal(&e->lmd[i], md)) return i;
    if (e->nl == GEMM_LAYOUTS) return -1;
    dnnl_memory_desc_t user;
    dnnl_dims_t kn = {e->K, e->N};
    dnnl_memory_t um = NULL, pm = NULL;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    int ok = dnnl_memory_desc_init_by_tag(&user, 2, kn, dnnl_f32, dnnl_ba) == dnnl_success &&
             dnnl_memory_create(&um, &user, g_engine, unconst(e->w)) == dnnl_success &&
             dnnl_memory_create(&pm, md, g_engine, DNNL_MEMORY_ALLOCATE) == dnnl_success &&
             dnnl_reorder_primitive_desc_create(&rpd, &user, g_engine, md, g_engine, NULL) == dnnl_success &&
             dnnl_primitive_create(&r, rpd) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, um}, {DNNL_ARG_TO, pm}};
        ok = dnnl_primitive_execute(r, g_stream, 2, args) == dnnl_success && dnnl_stream_wait(g_stream) == dnnl_success;
    }
    if (r) dnnl_primitive_destroy(r);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (um) dnnl_memory_destroy(um);
    if (!ok) {
        if (pm) dnnl_memory_destroy(pm);
        return -1;
    }
    e->lmd[e->nl] = *md;
    e->lmem[e->nl] = pm;
    return e->nl++;
}

/* The primitive computing e's product for M rows (stride ldy, accumulate, bias), made at its
 * first use. NULL: oneDNN cannot (or this weight already has GEMM_WAYS ways). */
static gemm_way *way_of(gemm_entry *e, int M, int ldy, int acc, int bias, vit_gemm_precision precision) {
    for (int i = 0; i < e->nw; i++) {
        gemm_way *g = &e->way[i];
        if (g->M == M && g->ldy == ldy && g->acc == acc && g->bias == bias) return g;
    }
    /* full: the least recently used way makes room (a run's batch sizes can be many: the last
     * batch, --skip-bad's), so that every product stays on oneDNN whatever came before */
    if (e->nw == GEMM_WAYS) {
        int lru = 0;
        for (int i = 1; i < e->nw; i++) lru = e->way[i].used < e->way[lru].used ? i : lru;
        way_free(&e->way[lru]);
        e->way[lru] = e->way[--e->nw];
    }
    dnnl_memory_desc_t sd, wd, bd, dd;
    dnnl_dims_t mk = {M, e->K}, kn = {e->K, e->N}, one = {1, e->N}, mn = {M, e->N}, strides = {ldy, 1};
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_matmul_desc_t mdesc;
    gemm_way g = {.M = M, .ldy = ldy, .acc = acc, .bias = bias, .wi = -1};
    const int bf16 = precision == VIT_GEMM_BF16;
    const dnnl_data_type_t dt = bf16 ? dnnl_bf16 : dnnl_f32; /* of x and W; y and the bias: f32 */
    dnnl_memory_desc_t s32;
    int ok = dnnl_memory_desc_init_by_tag(&sd, 2, mk, dt, dnnl_ab) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&s32, 2, mk, dnnl_f32, dnnl_ab) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&wd, 2, kn, dt, dnnl_format_tag_any) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&bd, 2, one, dnnl_f32, dnnl_ab) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&dd, 2, mn, dnnl_f32, strides) == dnnl_success &&
             dnnl_matmul_desc_init(&mdesc, &sd, &wd, bias ? &bd : NULL, &dd) == dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success;
    if (ok && acc) /* y += x W^T + b: the sum post-op adds what dst held */
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    ok = ok && dnnl_primitive_desc_create(&pd, &mdesc, attr, g_engine, NULL) == dnnl_success;
    if (ok) {
        const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        ok = wq && (g.wi = layout_of(e, wq)) >= 0 && dnnl_primitive_create(&g.prim, pd) == dnnl_success &&
             dnnl_memory_create(&g.src, &sd, g_engine, DNNL_MEMORY_NONE) == dnnl_success &&
             dnnl_memory_create(&g.dst, &dd, g_engine, DNNL_MEMORY_NONE) == dnnl_success &&
             (!bias || dnnl_memory_create(&g.b, &bd, g_engine, DNNL_MEMORY_NONE) == dnnl_success);
    }
    if (ok && bf16) { /* x rounded to bfloat16 (round to nearest even) before each product */
        dnnl_primitive_desc_t rpd = NULL;
        ok = dnnl_memory_create(&g.src32, &s32, g_engine, DNNL_MEMORY_NONE) == dnnl_success &&
             dnnl_reorder_primitive_desc_create(&rpd, &s32, g_engine, &sd, g_engine, NULL) == dnnl_success &&
             dnnl_primitive_create(&g.cvt, rpd) == dnnl_success;
        if (rpd) dnnl_primitive_desc_destroy(rpd);
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (!ok) {
        way_free(&g);
        return NULL;
    }
    e->way[e->nw] = g;
    return &e->way[e->nw++];
}

int vit_gemm_linear(float *y, int ldy, const float *x, const float *w, const float *bias, int M, int N,
                    int K, int accumulate) {
    vit_gemm_pack *pk = g_current;
    if (!pk || M <= 0) return 0;
    pthread_mutex_lock(&pk->mu);
    gemm_entry *e = entry_of(pk, w, N, K);
    gemm_way *g = e ? way_of(e, M, ldy, accumulate != 0, bias != NULL, pk->precision) : NULL;
    /* bfloat16: one buffer per pack for the rounded x (every way's would add up to GBs) */
    const size_t need = g && g->cvt ? (size_t)M * K * 2 : 0;
    if (need > pk->scratch_bytes) {
        free(pk->scratch);
        pk->scratch = aligned_alloc(64, (need + 63) & ~(size_t)63);
        pk->scratch_bytes = pk->scratch ? need : 0;
    }
    int ok = g && (!g->cvt || (pk->scratch && dnnl_memory_set_data_handle(g->src, pk->scratch) == dnnl_success)) &&
             dnnl_memory_set_data_handle(g->cvt ? g->src32 : g->src, unconst(x)) == dnnl_success &&
             dnnl_memory_set_data_handle(g->dst, y) == dnnl_success &&
             (!bias || dnnl_memory_set_data_handle(g->b, unconst(bias)) == dnnl_success);
    if (ok) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, g->src}, {DNNL_ARG_WEIGHTS, e->lmem[g->wi]},
                                   {DNNL_ARG_DST, g->dst}, {DNNL_ARG_BIAS, g->b}};
        dnnl_exec_arg_t cargs[2] = {{DNNL_ARG_FROM, g->src32}, {DNNL_ARG_TO, g->src}};
        /* once it has run, y may hold part of the product: OpenBLAS cannot take over */
        if ((g->cvt && dnnl_primitive_execute(g->cvt, g_stream, 2, cargs) != dnnl_success) ||
            dnnl_primitive_execute(g->prim, g_stream, bias ? 4 : 3, args) != dnnl_success ||
            dnnl_stream_wait(g_stream) != dnnl_success) {
            fprintf(stderr, "attnscope: oneDNN failed in a %d x %d x %d product; rerun with "
                    "ATTNSCOPE_GEMM=openblas\n", M, N, K);
            abort();
        }
        g->used = ++pk->products;
    }
    pthread_mutex_unlock(&pk->mu);
    if (!ok && pk->precision == VIT_GEMM_BF16) {
        /* OpenBLAS would compute it in float32 while the trace says bfloat16: never silently */
        fprintf(stderr, "attnscope: oneDNN could not set up a %d x %d x %d product in bfloat16 (out of "
                "memory, or no bfloat16 kernel); rerun with --precision f32\n", M, N, K);
        abort();
    }
    return ok;
}

int vit_gemm_select(const char *name, char *msg, size_t n) {
    if (strcmp(name, "onednn") == 0 || strcmp(name, "openblas") == 0) {
        g_use_dnnl = strcmp(name, "onednn") == 0;
        return 1;
    }
    snprintf(msg, n, "unknown GEMM '%s': the values are onednn (the default) and openblas", name);
    return 0;
}

const char *vit_gemm_name(void) {
    if (!g_use_dnnl) return "OpenBLAS";
    pthread_once(&g_once, engine_init);
    return g_ok ? g_name : "OpenBLAS (oneDNN's CPU engine could not start)";
}

#else /* built without oneDNN */

vit_gemm_pack *vit_gemm_pack_new(void) { return NULL; }
vit_gemm_pack *vit_gemm_pack_new_precision(vit_gemm_precision precision) {
    (void)precision;
    return NULL;
}
vit_gemm_precision vit_gemm_pack_precision(const vit_gemm_pack *pk) {
    (void)pk;
    return VIT_GEMM_F32;
}
int vit_gemm_bf16_available(void) { return 0; }
const char *vit_gemm_pack_name(const vit_gemm_pack *pk) {
    (void)pk;
    return "OpenBLAS";
}
void vit_gemm_pack_free(vit_gemm_pack *pk) { (void)pk; }
long vit_gemm_pack_products(const vit_gemm_pack *pk) {
    (void)pk;
    return 0;
}
vit_gemm_pack *vit_gemm_use(vit_gemm_pack *pk) {
    (void)pk;
    return NULL;
}
int vit_gemm_attention_fused(void) { return 0; }
int vit_gemm_linear(float *y, int ldy, const float *x, const float *w, const float *bias, int M, int N,
                    int K, int accumulate) {
    (void)y, (void)ldy, (void)x, (void)w, (void)bias, (void)M, (void)N, (void)K, (void)accumulate;
    return 0;
}
int vit_gemm_select(const char *name, char *msg, size_t n) {
    if (strcmp(name, "openblas") == 0) return 1;
    snprintf(msg, n, strcmp(name, "onednn") == 0
                         ? "GEMM '%s': this attnscope was built without oneDNN (apt-get install libdnnl-dev, then rebuild)"
                         : "unknown GEMM '%s': the value is openblas (onednn needs a build with libdnnl-dev)", name);
    return 0;
}
const char *vit_gemm_name(void) { return "OpenBLAS"; }

#endif
