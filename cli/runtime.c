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

void runtime_set_threads(int n) {
    const int cores = usable_cores();
    /* More threads than cores only slow OpenMP's barriers and OpenBLAS down (1000 threads on 2
     * cores took over 120 s for what 2 do in 0.2 s): cap, and say so. */
    if (n > cores) {
        cli_fail(0, "--threads %d is more than the %d cores this process may use: running %d threads", n, cores,
                 cores);
        n = cores;
    }
    if (n <= 0) n = cores;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int runtime_threads(void) { return omp_get_max_threads(); }

void runtime_blas_info(char *core, size_t n, char *advice, size_t an, int *warn) {
    const char *name = openblas_get_corename();
    snprintf(core, n, "%s", name ? name : "unknown");
    *warn = 0;
    advice[0] = 0;
#if defined(__x86_64__)
    const char *env = getenv("OPENBLAS_CORETYPE");
    int avx512 = __builtin_cpu_supports("avx512f");
    int is512 = name && (strcasecmp(name, "skylakex") == 0 || strcasecmp(name, "cooperlake") == 0 ||
                         strcasecmp(name, "sapphirerapids") == 0);
    if (avx512 && !is512) {
        *warn = 1;
        snprintf(advice, an, "this CPU has AVX-512 but OpenBLAS runs its %s kernels%s%s%s: SGEMM "
                 "runs at about half speed; unset OPENBLAS_CORETYPE (or set it to SkylakeX) for "
                 "full speed", core, env ? " because OPENBLAS_CORETYPE=" : "", env ? env : "",
                 env ? " is set" : "");
    }
#endif
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
}

void runtime_describe(const runtime_info *ri, char *buf, size_t n) {
    snprintf(buf, n, "OpenBLAS %s kernels%s%s%s, %d thread%s", ri->core, ri->forced[0] ? " (" : "",
             ri->forced, ri->forced[0] ? " set)" : "", ri->threads, ri->threads == 1 ? "" : "s");
}

void runtime_warn(const char *cmd) {
    runtime_info ri;
    runtime_get_info(&ri);
    if (ri.forced[0])
        fprintf(stderr, "attnscope %s: warning: %s makes OpenBLAS run its %s kernels instead of "
                "choosing for this CPU; results match other runs bit for bit only with the same "
                "kernels and thread count%s%s\n", cmd, ri.forced, ri.core, ri.slow ? "; " : "",
                ri.slow ? ri.advice : "");
    else if (ri.slow)
        fprintf(stderr, "attnscope %s: warning: %s\n", cmd, ri.advice);
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
