/* gemm_onednn.c: is oneDNN worth a place in attnscope's forward? Times the Linear layers' GEMMs
 * of a ViT (y = x W^T + b, W as PyTorch stores it) three ways in alternating rounds, one
 * process: OpenBLAS's cblas_sgemm as core/vit.c calls it today (bias rows, then beta = 1), and
 * oneDNN's matmul primitive with the weights in the user's layout (runtime M: one primitive for
 * every batch) and with the weights reordered once into the layout the primitive asks for
 * (format_tag::any, fixed M: "prepacked"), and prepacked in bfloat16 (x rounded by a reorder
 * before each product, W packed in bfloat16, float32 sums and y: record --precision bf16). Prints medians, ranges and ratios, the oneDNN
 * implementation chosen, the largest difference from OpenBLAS, and whether each oneDNN variant
 * gives the same bits at 1 and 2 threads. Not built by meson (oneDNN is not a dependency):
 *
 *     apt-get install libdnnl-dev
 *     gcc -O2 -fopenmp bench/gemm_onednn.c -o /tmp/gemm_onednn -lopenblas -ldnnl
 *     OPENBLAS_CORETYPE= OMP_NUM_THREADS=2 /tmp/gemm_onednn 197 192     # DeiT-Tiny, batch 1
 *     OPENBLAS_CORETYPE= OMP_NUM_THREADS=2 /tmp/gemm_onednn 1576 768    # ViT-B/16, batch 8
 *
 * Arguments: M (rows: batch x tokens) and D (embedding width; the four GEMMs are qkv 3D x D, proj
 * D x D, fc1 4D x D, fc2 D x 4D). docs/performance.md has the figures and what they mean. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                        \
    do {                                                                             \
        dnnl_status_t s_ = (x);                                                      \
        if (s_ != dnnl_success) {                                                    \
            fprintf(stderr, "gemm_onednn: %s failed (status %d)\n", #x, (int)s_);    \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static dnnl_engine_t eng;
static dnnl_stream_t st;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    dnnl_primitive_t p, cvt; /* cvt: bfloat16 only, x -> src */
    dnnl_memory_t src, w, b, dst, x32;
    const char *impl;
} matmul;

/* packed: weights reordered into the primitive's own layout, M fixed; else the user's (N, K)
 * row-major weights read as (K, N) "ba", M given at run time. */
static void matmul_make(matmul *m, int packed, int bf16, int M, int N, int K, float *x, float *W, float *bias, float *y) {
    dnnl_memory_desc_t sd, wd, wu, bd, dd, sr, dr, s16;
    const dnnl_data_type_t dt = bf16 ? dnnl_bf16 : dnnl_f32;
    memset(m, 0, sizeof *m);
    dnnl_dims_t s = {packed ? M : DNNL_RUNTIME_DIM_VAL, K}, w = {K, N}, b = {1, N},
                d = {packed ? M : DNNL_RUNTIME_DIM_VAL, N}, s2 = {M, K}, d2 = {M, N};
    CK(dnnl_memory_desc_init_by_tag(&sd, 2, s, dt, dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&s16, 2, s2, dt, dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&wd, 2, w, dt, packed ? dnnl_format_tag_any : dnnl_ba));
    CK(dnnl_memory_desc_init_by_tag(&wu, 2, w, dnnl_f32, dnnl_ba));
    CK(dnnl_memory_desc_init_by_tag(&bd, 2, b, dnnl_f32, dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&dd, 2, d, dnnl_f32, dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&sr, 2, s2, dnnl_f32, dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&dr, 2, d2, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    CK(dnnl_matmul_desc_init(&md, &sd, &wd, &bd, &dd));
    CK(dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL));
    CK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &m->impl));
    const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_t mu;
    CK(dnnl_memory_create(&mu, &wu, eng, W));
    if (packed) {
        CK(dnnl_memory_create(&m->w, wq, eng, DNNL_MEMORY_ALLOCATE));
        dnnl_primitive_desc_t rpd;
        dnnl_primitive_t r;
        CK(dnnl_reorder_primitive_desc_create(&rpd, &wu, eng, wq, eng, NULL));
        CK(dnnl_primitive_create(&r, rpd));
        dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, mu}, {DNNL_ARG_TO, m->w}};
        CK(dnnl_primitive_execute(r, st, 2, ra));
        CK(dnnl_stream_wait(st));
    } else {
        m->w = mu;
    }
    if (bf16) { /* x is rounded into src's own buffer before each product */
        dnnl_primitive_desc_t cpd;
        CK(dnnl_memory_create(&m->x32, &sr, eng, x));
        CK(dnnl_memory_create(&m->src, &s16, eng, DNNL_MEMORY_ALLOCATE));
        CK(dnnl_reorder_primitive_desc_create(&cpd, &sr, eng, &s16, eng, NULL));
        CK(dnnl_primitive_create(&m->cvt, cpd));
    } else {
        CK(dnnl_memory_create(&m->src, &sr, eng, x));
    }
    CK(dnnl_memory_create(&m->b, &bd, eng, bias));
    CK(dnnl_memory_create(&m->dst, &dr, eng, y));
    CK(dnnl_primitive_create(&m->p, pd));
}

static void matmul_run(const matmul *m) {
    if (m->cvt) {
        dnnl_exec_arg_t c[2] = {{DNNL_ARG_FROM, m->x32}, {DNNL_ARG_TO, m->src}};
        CK(dnnl_primitive_execute(m->cvt, st, 2, c));
    }
    dnnl_exec_arg_t a[4] = {{DNNL_ARG_SRC, m->src}, {DNNL_ARG_WEIGHTS, m->w}, {DNNL_ARG_BIAS, m->b}, {DNNL_ARG_DST, m->dst}};
    CK(dnnl_primitive_execute(m->p, st, 4, a));
    CK(dnnl_stream_wait(st));
}

/* core/vit.c's linear(): bias rows, then y += x W^T */
static void openblas_linear(int M, int N, int K, const float *x, const float *W, const float *b, float *y) {
    for (int r = 0; r < M; r++) memcpy(y + (size_t)r * N, b, (size_t)N * sizeof *y);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, W, K, 1.0f, y, N);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define ROUNDS 9

int main(int argc, char **argv) {
    if (argc != 3 || atoi(argv[1]) < 1 || atoi(argv[2]) < 1) {
        fprintf(stderr, "usage: gemm_onednn M D   (e.g. 197 192: DeiT-Tiny at batch 1)\n");
        return 2;
    }
    const int M = atoi(argv[1]), D = atoi(argv[2]);
    const int shapes[4][2] = {{3 * D, D}, {D, D}, {4 * D, D}, {D, 4 * D}};
    const char *names[4] = {"qkv", "proj", "fc1", "fc2"};
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    printf("M=%d D=%d, %d threads, %d alternating rounds of 0.1 s each; us per GEMM: median (min-max)\n",
           M, D, omp_get_max_threads(), ROUNDS);
    printf("%-5s %-16s %-24s %-24s %-24s %-24s %s\n", "GEMM", "N x K", "OpenBLAS", "oneDNN user layout",
           "oneDNN prepacked", "prepacked bfloat16", "ratios to OpenBLAS; max |diff|; same bits at 1 and 2 threads");
    srand(1);
    for (int s = 0; s < 4; s++) {
        const int N = shapes[s][0], K = shapes[s][1];
        float *x = malloc((size_t)M * K * 4), *W = malloc((size_t)N * K * 4), *b = malloc((size_t)N * 4);
        float *y[4], *y1[4];
        for (int v = 0; v < 4; v++) y[v] = malloc((size_t)M * N * 4), y1[v] = malloc((size_t)M * N * 4);
        for (size_t i = 0; i < (size_t)M * K; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
        for (size_t i = 0; i < (size_t)N * K; i++) W[i] = ((float)rand() / RAND_MAX - 0.5f) * 0.1f;
        for (int i = 0; i < N; i++) b[i] = 0.01f * (float)i;
        matmul mm[3];
        for (int v = 0; v < 3; v++) matmul_make(&mm[v], v > 0, v == 2, M, N, K, x, W, b, y[1 + v]);
        /* bits at 1 thread, then the timed runs at the caller's count */
        const int threads = omp_get_max_threads();
        omp_set_num_threads(1);
        for (int v = 1; v < 4; v++) {
            matmul_run(&mm[v - 1]);
            memcpy(y1[v], y[v], (size_t)M * N * 4);
        }
        omp_set_num_threads(threads);
        double t[4][ROUNDS];
        for (int r = 0; r < ROUNDS; r++)
            for (int v = 0; v < 4; v++) {
                int it = 0;
                const double t0 = now();
                do {
                    if (v == 0) openblas_linear(M, N, K, x, W, b, y[0]);
                    else matmul_run(&mm[v - 1]);
                    it++;
                } while (now() - t0 < 0.1);
                t[v][r] = (now() - t0) / it * 1e6;
            }
        double med[4], err[4] = {0, 0, 0, 0};
        char col[4][64];
        for (int v = 0; v < 4; v++) {
            qsort(t[v], ROUNDS, sizeof(double), cmp);
            med[v] = t[v][ROUNDS / 2];
            snprintf(col[v], sizeof col[v], "%.1f (%.1f-%.1f)", med[v], t[v][0], t[v][ROUNDS - 1]);
            for (size_t i = 0; v && i < (size_t)M * N; i++) {
                double d = (double)y[v][i] - y[0][i];
                err[v] = d < 0 ? (-d > err[v] ? -d : err[v]) : (d > err[v] ? d : err[v]);
            }
        }
        char nk[32];
        snprintf(nk, sizeof nk, "%d x %d", N, K);
        printf("%-5s %-16s %-24s %-24s %-24s %-24s %.2fx %.2fx %.2fx; %.1e %.1e %.1e; %s %s %s\n", names[s], nk,
               col[0], col[1], col[2], col[3], med[0] / med[1], med[0] / med[2], med[0] / med[3], err[1], err[2], err[3],
               memcmp(y[1], y1[1], (size_t)M * N * 4) ? "no" : "yes", memcmp(y[2], y1[2], (size_t)M * N * 4) ? "no" : "yes",
               memcmp(y[3], y1[3], (size_t)M * N * 4) ? "no" : "yes");
        if (s == 0) printf("      oneDNN implementations: user layout %s, prepacked %s, bfloat16 %s\n", mm[0].impl,
                           mm[1].impl, mm[2].impl);
        free(x), free(W), free(b);
        for (int v = 0; v < 4; v++) free(y[v]), free(y1[v]);
    }
    return 0;
}
