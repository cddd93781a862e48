/* runtime.c: one thread pool for OpenMP and OpenBLAS, and what OpenBLAS chose for this CPU. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <cblas.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"

#ifndef ATTNSCOPE_VERSION
#define ATTNSCOPE_VERSION "0.1.0"
#endif

/* OpenBLAS exports these; its cblas.h declares them too, but not in every packaging. */
char *openblas_get_corename(void);
char *openblas_get_config(void);
void openblas_set_num_threads(int);

/* Cores this process may run on: its CPU affinity (a container's or taskset's limit), else the
 * online count. */
static int usable_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c > 0 ? (int)c : 1;
}

/* The thread count: --threads (n > 0), else OMP_NUM_THREADS (its first number, as OpenMP reads
 * "4,2"), else every usable core. Bit-identical results need the same count, so the variable a
 * user set is honoured, never overridden; one that is not a count is reported and not used. */
void runtime_set_threads(int n) {
    const int cores = usable_cores();
    const char *src = "--threads ";
    if (n <= 0) {
        const char *env = getenv("OMP_NUM_THREADS");
        if (env && env[0]) {
            char *end;
            long v = strtol(env, &end, 10);
            if (end != env && v > 0 && v <= 1 << 20 && (*end == 0 || *end == ',')) {
                n = (int)v;
                src = "OMP_NUM_THREADS=";
            } else {
                cli_fail(0, "warning: OMP_NUM_THREADS=%.40s is not a thread count: running all %d cores; "
                         "set it to 1..%d or unset it", env, cores, cores);
            }
        }
    }
    /* More threads than cores only slow OpenMP's barriers and OpenBLAS down (1000 threads on 2
     * cores took over 120 s for what 2 do in 0.2 s): cap, and say so. */
    if (n > cores) {
        cli_fail(0, "%s%d is more than the %d cores this process may use: running %d threads", src, n, cores,
                 cores);
        n = cores;
    }
    if (n <= 0) n = cores;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int runtime_threads(void) { return omp_get_max_threads(); }

/* Kernel sets by the widest vector unit they use: a set below the CPU's best runs SGEMM slower and
 * rounds differently; sets of one class (SkylakeX, Cooperlake) share their SGEMM kernels. */
static int kernel_class(const char *name) {
    static const struct { const char *name; int cls; } k[] = {
        {"skylakex", 3}, {"cooperlake", 3}, {"sapphirerapids", 3}, {"haswell", 2}, {"zen", 2},
        {"sandybridge", 1}, {"bulldozer", 1}, {"piledriver", 1}, {"steamroller", 1}, {"excavator", 1},
    };
    for (size_t i = 0; name && i < sizeof k / sizeof k[0]; i++)
        if (strcasecmp(name, k[i].name) == 0) return k[i].cls;
    return 0;
}

/* The kernel set OpenBLAS's own detection picks for this CPU's vector units (OpenBLAS 0.3.21 on
 * an AVX-512 Xeon: SkylakeX); NULL where that cannot be told. */
static const char *cpu_best_kernel(void) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    if (__builtin_cpu_supports("avx")) return "SandyBridge";
#endif
    return NULL;
}

void runtime_blas_info(char *core, size_t n, char *advice, size_t an, int *warn) {
    const char *name = openblas_get_corename();
    snprintf(core, n, "%s", name ? name : "unknown");
    *warn = 0;
    advice[0] = 0;
    const char *env = getenv("OPENBLAS_CORETYPE"), *best = cpu_best_kernel();
    const int have = kernel_class(core), want = best ? kernel_class(best) : 0;
    /* a forced kernel of the CPU's best class is what OpenBLAS would run anyway: nothing to say
     * (the variable is still recorded in traces and checkpoints) */
    if (!best || have >= want) return;
    *warn = 1;
    const char *cost = want == 3 && have == 2 ? "half-speed SGEMM" : "slower SGEMM";
    if (env && env[0])
        snprintf(advice, an, "OPENBLAS_CORETYPE=%.40s runs %s kernels, this CPU's best is %s: %s, "
                 "other rounding; unset it", env, core, best, cost);
    else
        snprintf(advice, an, "OpenBLAS runs %s kernels, this CPU's best is %s: %s; try "
                 "OPENBLAS_CORETYPE=%s", core, best, cost, best);
}

void runtime_get_info(runtime_info *ri) {
    memset(ri, 0, sizeof *ri);
    runtime_blas_info(ri->core, sizeof ri->core, ri->advice, sizeof ri->advice, &ri->slow);
    const char *cfg = openblas_get_config();
    snprintf(ri->config, sizeof ri->config, "%s", cfg ? cfg : "unknown");
    const char *env = getenv("OPENBLAS_CORETYPE");
    if (env && env[0]) snprintf(ri->forced, sizeof ri->forced, "OPENBLAS_CORETYPE=%.100s", env);
    ri->threads = runtime_threads();
    snprintf(ri->software, sizeof ri->software, "attnscope %s", ATTNSCOPE_VERSION);
    snprintf(ri->gemm, sizeof ri->gemm, "%s", vit_gemm_name());
}

void runtime_info_for_model(runtime_info *ri, const vit_config *c, const vit_gemm_pack *pack) {
    const int fused = pack && c ? vit_attn_fused_blocks(c) : 0;
    char attn[96] = "";
    if (fused) snprintf(attn, sizeof attn, "; plain attention fused in attnscope's AVX-512 kernel (%d of %d blocks)",
                        fused, c->depth);
    snprintf(ri->gemm, sizeof ri->gemm, "%s%s", pack ? vit_gemm_pack_name(pack) : "OpenBLAS", attn);
}

void runtime_describe(const runtime_info *ri, char *buf, size_t n) {
    const int dnnl = strncmp(ri->gemm, "OpenBLAS", 8) != 0; /* "OpenBLAS", or why oneDNN is not used */
    snprintf(buf, n, "%s%s%sOpenBLAS %s kernels%s%s%s, %d thread%s", dnnl ? "linear layers on " : "",
             dnnl ? ri->gemm : "", dnnl ? "; " : "", ri->core, ri->forced[0] ? " (" : "", ri->forced,
             ri->forced[0] ? " set)" : "", ri->threads, ri->threads == 1 ? "" : "s");
}

void runtime_warn(const char *cmd) {
    runtime_info ri;
    runtime_get_info(&ri);
    if (!ri.slow) return;
    char line[700];
    snprintf(line, sizeof line, "attnscope %s: warning: %s", cmd, ri.advice);
    cli_wrap(stderr, 0, 4, line);
}

double runtime_gemm_ceiling(int m, int n, int k, double seconds) {
    float *a = malloc((size_t)m * k * 4), *b = malloc((size_t)n * k * 4), *c = malloc((size_t)m * n * 4);
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        return 0;
    }
    for (size_t i = 0; i < (size_t)m * k; i++) a[i] = (float)(i % 7) * 0.01f;
    for (size_t i = 0; i < (size_t)n * k; i++) b[i] = (float)(i % 5) * 0.01f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1, a, k, b, k, 0, c, n);
    double t0 = cli_now(), t;
    long reps = 0;
    do {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1, a, k, b, k, 0, c, n);
        reps++;
        t = cli_now() - t0;
    } while (t < seconds);
    free(a);
    free(b);
    free(c);
    return 2.0 * m * n * k * reps / t / 1e9;
}
