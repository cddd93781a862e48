/* cmd_bench.c: attnscope bench: img/s, ms/img, GFLOP/s and the share of the SGEMM ceiling
 * measured in the same run, plain and while recording a trace. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/rng.h"
#include "cli.h"

static const cli_opt bench_opts_table[] = {
    /* key alias name          ARG      values                                default                  help */
    {'a', 0,   "arch",         "NAME",  "attnscope info --list-archs, or a CONFIG.json", "deit_tiny_patch16_224",
     "the architecture timed (random weights unless --model)"},
    {'m', 0,   "model",        "PATH",  NULL, "random weights", "time this checkpoint instead of random weights"},
    {'b', 0,   "batch",        "N",     "1.." CLI_STR(TRACE_MAX_BATCH), "8", "images per forward pass"},
    {'t', 0,   "threads",      "N",     "1..1024", "$OMP_NUM_THREADS, else all cores", "threads"},
    {'s', 0,   "seconds",      "S",     "0 < S < 3600", "5", "time measured per variant, over all rounds"},
    {'R', 0,   "rounds",       "R",     "1..16", "3", "alternating plain/recording rounds; medians are reported"},
    {'r', 0,   "record",       NULL,    NULL, NULL, "also time recording every attention map into a trace"},
    {'w', 0,   "record-what",  "LIST",  "as record --record", "attn", "quantities recorded with --record"},
    {'d', 0,   "dtype",        "T",     "f16, f32", "f16", "storage precision with --record"},
    {'c', 0,   "compress",     "C",     "none, lz4, deflate[:1-9]", "none", "compression with --record"},
    {'o', 0,   "out",          "FILE",  NULL, "a temporary file, removed", "keep the trace --record writes here "
     "(never overwritten without --force)"},
    {'f', 0,   "force",        NULL,    NULL, NULL, "with --record --out: replace an existing trace (as record "
     "--force: only a regular file that is a trace, or an empty file)"},
    {'X', 0,   "precision",    "P",     "f32, bf16", "f32", "the linear layers' products (as record --precision); "
     "bf16 also times the float32 forward in the same rounds and prints the speed-up and bfloat16's "
     "difference to float32 on one image"},
    {'j', 0,   "json",         NULL,    NULL, NULL, "print the results as one JSON object"},
    {0}};

static const cli_cmd bench_cmd = {
    "bench", "[--arch NAME|CONFIG.json] [--model PATH] [--record] [options]",
    "Times the forward pass on random inputs (random weights unless --model is given) and reports img/s, "
    "ms/img, achieved GFLOP/s and the percentage of the SGEMM ceiling measured now on the model's MLP GEMM "
    "shape. --record also records every attention map into a temporary trace (or --out) and reports the "
    "overhead. Reports the kernel OpenBLAS chose and warns when it is not the best for this CPU (e.g. "
    "OPENBLAS_CORETYPE=Haswell on an AVX-512 machine). Plain and recording runs alternate in --rounds "
    "rounds over --seconds; the medians are reported, so that a drifting machine does not bias the overhead.",
    bench_opts_table, NULL};

typedef struct {
    double img_s, ms_img, gflops, pct;
} bench_result;

static double median(const double *v, int n) {
    double t[16];
    memcpy(t, v, (size_t)n * sizeof *t);
    for (int i = 1; i < n; i++) /* insertion sort: n is tiny */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}
static double min_of(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}
static double max_of(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}

static void fill_result(bench_result *r, double img_s, double flops_img, double ceiling) {
    r->img_s = img_s;
    r->ms_img = 1000.0 / img_s;
    r->gflops = flops_img * img_s / 1e9;
    r->pct = ceiling > 0 ? 100.0 * r->gflops / ceiling : 0;
}

static void time_forward(const model *m, int B, double seconds, double flops_img, double ceiling,
                         bench_result *r) {
    const vit_config *c = &m->cfg;
    size_t bytes = vit_acts_carve(c, B, NULL, NULL);
    void *arena = aligned_alloc(64, bytes);
    size_t nx = (size_t)B * c->in_chans * c->img_size * c->img_size;
    float *x = malloc(nx * sizeof(float));
    memset(r, 0, sizeof *r);
    if (!arena || !x) {
        free(arena);
        free(x);
        return;
    }
    rng_state rs = {7};
    for (size_t i = 0; i < nx; i++) x[i] = rng_normal(&rs);
    vit_acts a;
    vit_acts_carve(c, B, arena, &a);
    vit_forward(c, &m->params, &a, x, B, NULL); /* warm-up: page faults, OpenBLAS buffers */
    double t0 = cli_now(), t;
    long n = 0;
    do {
        vit_forward(c, &m->params, &a, x, B, NULL);
        n += B;
        t = cli_now() - t0;
    } while (t < seconds);
    fill_result(r, n / t, flops_img, ceiling);
    free(arena);
    free(x);
}

/* Frees m and the float32 pack kept beside it for --precision bf16's reference runs (m holds
 * the bfloat16 pack then; otherwise the two are one). */
static void bench_model_free(model *m, vit_gemm_pack *f32_pack) {
    if (f32_pack != m->params.pack) vit_gemm_pack_free(f32_pack);
    model_free(m);
}

int cmd_bench(int argc, char **argv) {
    const char *arch = "deit_tiny_patch16_224", *model_path = NULL, *what = "attn", *dtype = "f16";
    const char *compress = "none", *out = NULL, *precision = "f32";
    int B = 8, threads = 0, record = 0, json = 0, rounds = 3, force = 0, ch;
    /* the options that act only with --record, as given (first one named when refused) */
    const char *record_only = NULL;
    double seconds = 5;
    optind = 1;
    while ((ch = cli_opts_next(&bench_cmd, argc, argv)) >= 0) {
        int ok = 1;
        switch (ch) {
        case 'a': arch = optarg; break;
        case 'm': model_path = optarg; break;
        case 'b': ok = cli_parse_int(optarg, 1, TRACE_MAX_BATCH, &B); break;
        case 't': ok = cli_parse_int(optarg, 1, 1024, &threads); break;
        case 's': seconds = atof(optarg); ok = seconds > 0 && seconds < 3600; break;
        case 'r': record = 1; break;
        case 'w': what = optarg; record_only = record_only ? record_only : "--record-what"; break;
        case 'd': dtype = optarg; record_only = record_only ? record_only : "--dtype"; break;
        case 'c': compress = optarg; record_only = record_only ? record_only : "--compress"; break;
        case 'o': out = optarg; record_only = record_only ? record_only : "--out"; break;
        case 'f': force = 1; record_only = record_only ? record_only : "--force"; break;
        case 'X': precision = optarg; break;
        case 'j': json = 1; break;
        case 'R': ok = cli_parse_int(optarg, 1, 16, &rounds); break;
        }
        if (!ok) return cli_bad_value(&bench_cmd, ch, optarg);
    }
    if (ch != CLI_END) return cli_opts_exit(ch);
    if (optind < argc) return cli_extra(&bench_cmd, argv[optind]);
    if (record_only && !record)
        return cli_fail(2, "%s acts only with --record: add --record, or drop %s", record_only, record_only);
    if (force && !out)
        return cli_fail(2, "--force replaces --out's trace: give --out FILE, or drop --force");
    as_error err = {0};
    int bf16 = 0;
    if (record_parse_precision(precision, &bf16, &err)) {
        cli_error(&err);
        return 2;
    }
    /* what --record takes is checked before anything is loaded or timed */
    unsigned quantities;
    if (record && record_parse_quantities(what, "--record-what", &quantities, &err)) {
        cli_error(&err);
        return 2;
    }
    if (record && out && trace_out_check(out, force ? TRACE_FORCE : TRACE_CREATE, &err) != AS_OK)
        return cli_error(&err);
    runtime_set_threads(threads);
    model m;
    if (model_path) {
        if (model_load(&m, model_path, strcmp(arch, "deit_tiny_patch16_224") ? arch : NULL, 0, &err) != AS_OK)
            return cli_error(&err);
    } else {
        vit_config cfg = {0};
        if (model_config_from_arch(&cfg, arch, &err) != AS_OK) return cli_error(&err);
        if (model_init_random(&m, &cfg, 1, &err) != AS_OK) return cli_error(&err);
        m.params.pack = vit_gemm_pack_new(); /* timed as a loaded model runs: weights prepacked */
    }
    /* bf16: the float32 pack stays for the reference runs, the bfloat16 one does the rest */
    vit_gemm_pack *f32_pack = m.params.pack;
    m.params.pack = NULL;
    if (bf16 && model_use_bf16(&m, &err) != AS_OK) {
        m.params.pack = f32_pack;
        model_free(&m);
        return cli_error(&err);
    }
    vit_gemm_pack *run_pack = bf16 ? m.params.pack : f32_pack;
    m.params.pack = run_pack;
    const vit_config *c = &m.cfg;
    vit_cost cost;
    vit_config_cost(c, &cost);
    char core[64], advice[512];
    int warn;
    runtime_blas_info(core, sizeof core, advice, sizeof advice, &warn);
    runtime_info ri;
    runtime_get_info(&ri);
    runtime_info_for_model(&ri, &m.cfg, m.params.pack); /* what this model's linear layers run on */
    record_opts o;
    memset(&o, 0, sizeof o);
    if (record && record_parse_selection(&o, c, what, "all", "all", dtype, compress, "all", &err)) {
        bench_model_free(&m, f32_pack);
        cli_error(&err);
        return 2;
    }
    const int T = vit_num_tokens(c);
    double ceiling = runtime_gemm_ceiling(B * T, c->mlp_hidden, c->embed_dim, seconds < 2 ? 0.5 : 1.0);
    if (!json) {
        printf("attnscope bench: %s, batch %d, %d threads, %s\n", c->name, B, runtime_threads(),
               bf16 ? "bfloat16 products (float32 elsewhere)" : "float32");
        printf("OpenBLAS    kernel %s; SGEMM ceiling %.1f GFLOP/s (M=%d N=%d K=%d, measured now)\n",
               core, ceiling, B * T, c->mlp_hidden, c->embed_dim);
        /* the ceiling is OpenBLAS's SGEMM whatever the layers run on */
        const char *gemm_env = getenv("ATTNSCOPE_GEMM");
        cli_printf_wrap(12, "linear      layers on %s%s", ri.gemm,
               m.params.pack ? " (the ceiling is OpenBLAS's; ATTNSCOPE_GEMM=openblas runs them on OpenBLAS)"
               : gemm_env && strcmp(gemm_env, "openblas") == 0 ? " (ATTNSCOPE_GEMM=openblas)" : "");
        if (warn) printf("WARNING     "), cli_wrap(stdout, 12, 12, advice);
        fflush(stdout);
    }
    /* Plain and recording runs alternate in short rounds and each reports its median: on a
     * shared machine the speed drifts, and a ratio of runs minutes apart would measure that. */
    double plain_v[16], rec_v[16], wcpu_v[16], f32_v[16], mb_s = 0, direct_pct = 0;
    bench_result plain = {0}, rec = {0}, tmpres;
    int rc = 0;
    const double per_round = seconds / rounds;
    char tmp[512];
    dataset ds;
    memset(&ds, 0, sizeof ds);
    if (record) {
        snprintf(tmp, sizeof tmp, "%s", out ? out : "");
        if (!out) snprintf(tmp, sizeof tmp, "%s/attnscope-bench-%ld.h5",
                           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid());
        /* enough images for a round at the plain speed measured now; B distinct random images,
         * repeated (decoding is not what is measured here) */
        time_forward(&m, B, 0.5, cost.flops_total, ceiling, &tmpres);
        long count = ((long)(tmpres.img_s * per_round) / B + 1) * B;
        if (count < 2 * B) count = 2 * B;
        const size_t per = (size_t)c->in_chans * c->img_size * c->img_size;
        float *tensor = malloc(per * (size_t)count * sizeof(float));
        if (!tensor || dataset_from_memory(&ds, tensor, (int)count, c->in_chans, c->img_size,
                                           "bench", &err) != AS_OK) {
            bench_model_free(&m, f32_pack);
            return cli_fail(1, "out of memory for %ld input images: lower --seconds or --batch", count);
        }
        rng_state rs = {11};
        for (long i = 0; i < count; i++) {
            if (i < B) for (size_t k = 0; k < per; k++) tensor[k + per * (size_t)i] = rng_normal(&rs);
            else memcpy(tensor + per * (size_t)i, tensor + per * (size_t)(i % B), per * sizeof(float));
        }
        o.out = tmp;
        /* --out: the first round creates it (replaces it only with --force); later rounds
         * replace the trace this run wrote. The temporary file is ours from the start. */
        o.mode = out && !force ? TRACE_CREATE : TRACE_FORCE;
        o.spec.batch = B;
        o.spec.command_line = "attnscope bench --record";
        o.quiet = 1;
    }
    for (int r = 0; r < rounds && !rc; r++) {
        if (bf16) { /* the float32 forward, alternating with the bfloat16 one */
            m.params.pack = f32_pack;
            time_forward(&m, B, per_round, cost.flops_total, ceiling, &tmpres);
            f32_v[r] = tmpres.img_s;
            m.params.pack = run_pack;
        }
        time_forward(&m, B, per_round, cost.flops_total, ceiling, &tmpres);
        plain_v[r] = tmpres.img_s;
        if (!record) continue;
        record_result res;
        if (record_run(&m, &ds, &o, &res, &err) != AS_OK) {
            rc = cli_error(&err);
            break;
        }
        o.mode = TRACE_FORCE;
        rec_v[r] = res.recorded / res.seconds;
        wcpu_v[r] = 1e3 * res.writer_cpu / (double)(res.recorded > 0 ? res.recorded : 1);
        struct stat sb;
        if (stat(tmp, &sb) == 0) {
            mb_s = (double)sb.st_size / res.seconds / 1e6;
            direct_pct = 100.0 * res.direct_bytes / (double)(sb.st_size > 0 ? sb.st_size : 1);
        }
    }
    if (record && !out) remove(tmp);
    dataset_free(&ds);
    if (rc) {
        bench_model_free(&m, f32_pack);
        return rc;
    }
    fill_result(&plain, median(plain_v, rounds), cost.flops_total, ceiling);
    if (!json)
        printf("forward     %8.1f img/s %8.2f ms/img %8.1f GFLOP/s  %5.1f%% of ceiling\n",
               plain.img_s, plain.ms_img, plain.gflops, plain.pct);
    trace_precision pr = {0};
    double speedup_lo = 0, speedup_hi = 0;
    if (bf16) { /* the speed-up per round, and what bfloat16 does to one random image */
        for (int r = 0; r < rounds; r++) {
            const double k = plain_v[r] / f32_v[r];
            speedup_lo = r == 0 || k < speedup_lo ? k : speedup_lo;
            speedup_hi = r == 0 || k > speedup_hi ? k : speedup_hi;
        }
        const size_t nx = (size_t)c->in_chans * c->img_size * c->img_size;
        float *x1 = malloc(nx * sizeof *x1);
        rng_state rs = {7};
        for (size_t i = 0; x1 && i < nx; i++) x1[i] = rng_normal(&rs);
        if (!x1 || precision_check(&m, x1, &pr, &err) != AS_OK) rc = x1 ? cli_error(&err) : cli_fail(1, "out of memory");
        free(x1);
        if (!json && !rc) {
            bench_result f;
            fill_result(&f, median(f32_v, rounds), cost.flops_total, ceiling);
            printf("float32     %8.1f img/s %8.2f ms/img %8.1f GFLOP/s  %5.1f%% of ceiling  (same rounds)\n",
                   f.img_s, f.ms_img, f.gflops, f.pct);
            char line[700], chk[600];
            precision_describe(&pr, chk, sizeof chk);
            snprintf(line, sizeof line, "bfloat16 products: %.2fx the float32 forward (per round %.2f-%.2fx); "
                     "%s (the first image: a random one)", plain.img_s / f.img_s, speedup_lo, speedup_hi, chk + 19);
            printf("%12s", "");
            cli_wrap(stdout, 12, 12, line);
        }
    }
    if (record) {
        fill_result(&rec, median(rec_v, rounds), cost.flops_total, ceiling);
        if (!json) {
            printf("recording   %8.1f img/s %8.2f ms/img %8.1f GFLOP/s  %5.1f%% of ceiling\n",
                   rec.img_s, rec.ms_img, rec.gflops, rec.pct);
            char line[512];
            const double wcpu = median(wcpu_v, rounds);
            snprintf(line, sizeof line, "%s of every layer and head, %s, compression %s: %.1f MB/s to disk "
                     "(%.0f%% of it with O_DIRECT, past the page cache: records of 1 MiB and more per "
                     "head); recording costs %.1f%% over the plain forward; the writer thread used %.2f ms "
                     "of CPU per image (%.1f%% of the plain forward's time per image)", what, dtype,
                     compress, mb_s, direct_pct, 100.0 * (plain.img_s / rec.img_s - 1.0), wcpu,
                     wcpu / plain.ms_img * 100.0);
            printf("%12s", "");
            cli_wrap(stdout, 12, 12, line);
        }
    }
    if (!json)
        printf("            %s of %d alternating round%s of %.1f s (spread: forward %.1f-%.1f img/s)\n",
               rounds == 1 ? "one measurement" : "medians", rounds, rounds == 1 ? "" : "s", per_round, min_of(plain_v, rounds), max_of(plain_v, rounds));
    if (json && !rc) {
        runtime_warn("bench"); /* stdout is JSON: the warning goes to stderr */
        printf("{\"arch\": \"%s\", \"batch\": %d, \"threads\": %d, \"openblas_core\": \"%s\", "
               "\"openblas_forced_by\": \"%s\", \"openblas_suboptimal\": %s, \"linear_gemm\": \"%s\", \"gemm_ceiling_gflops\": %.2f, "
               "\"flops_per_image\": %.0f, \"forward\": {\"img_s\": %.3f, \"ms_img\": %.4f, "
               "\"gflops\": %.2f, \"pct_ceiling\": %.2f}",
               c->name, B, runtime_threads(), core, ri.forced, warn ? "true" : "false", ri.gemm, ceiling,
               cost.flops_total, plain.img_s, plain.ms_img, plain.gflops, plain.pct);
        if (record)
            printf(", \"recording\": {\"img_s\": %.3f, \"ms_img\": %.4f, \"gflops\": %.2f, "
                   "\"pct_ceiling\": %.2f, \"overhead_pct\": %.2f, \"writer_cpu_ms_per_image\": %.4f, "
                   "\"direct_io_pct\": %.1f}",
                   rec.img_s, rec.ms_img, rec.gflops, rec.pct, 100.0 * (plain.img_s / rec.img_s - 1.0),
                   median(wcpu_v, rounds), direct_pct);
        if (bf16)
            printf(", \"precision\": \"bfloat16\", \"float32_forward_img_s\": %.3f, \"bf16_speedup\": %.4f, "
                   "\"bf16_speedup_range\": [%.4f, %.4f], \"bf16_output_max_abs_err\": %.6g, "
                   "\"bf16_attn_max_abs_err\": %.6g, \"bf16_attn_mean_abs_err\": %.6g",
                   median(f32_v, rounds), plain.img_s / median(f32_v, rounds), speedup_lo, speedup_hi,
                   pr.out_max_abs, pr.attn_max_abs, pr.attn_mean_abs);
        printf("}\n");
    }
    bench_model_free(&m, f32_pack);
    return rc;
}
