/* test_trace.c: traces written then read back equal what the engine computed, with all
 * attributes; selections; refusing to overwrite; Ctrl-C, kill -9 and a full disk keep every
 * completed image, and --resume continues to the same result. */
#define _GNU_SOURCE /* O_DIRECT */
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../cli/cli.h"
#include "../core/kernels.h"
#include "../core/rng.h"
#include "check.h"

#define tmp check_tmp
static model M;

/* n random images at the fixture model's size, as an in-memory dataset */
static void make_inputs(dataset *ds, int n, unsigned long long seed) {
    const int S = M.cfg.img_size;
    const size_t per = 3 * (size_t)S * S;
    float *t = malloc(per * (size_t)n * sizeof(float));
    rng_state r = {seed};
    for (size_t i = 0; i < per * (size_t)n; i++) t[i] = rng_normal(&r);
    as_error err;
    if (dataset_from_memory(ds, t, n, 3, S, "mem", &err) != AS_OK) abort();
}

static record_opts opts_for(const vit_config *c, const char *out, trace_mode mode,
                            const char *what, const char *layers, const char *heads,
                            const char *dtype, const char *rows) {
    record_opts o;
    memset(&o, 0, sizeof o);
    o.out = out;
    o.mode = mode;
    o.spec.batch = 4;
    o.spec.command_line = "test_trace";
    o.quiet = 1;
    as_error err;
    if (record_parse_selection(&o, c, what, layers, heads, dtype, "none", rows, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        abort();
    }
    return o;
}

/* Options for the fixture model M. */
static record_opts opts(const char *out, trace_mode mode, const char *what, const char *layers,
                        const char *heads, const char *dtype, const char *rows) {
    return opts_for(&M.cfg, out, mode, what, layers, heads, dtype, rows);
}

/* Direct engine run of image i: everything of every layer. */
typedef struct {
    float *q[5][8];
    float logits[16];
    void *mem;
} direct;

static void run_direct(const dataset *ds, int i, direct *d) {
    const vit_config *c = &M.cfg;
    const int T = vit_num_tokens(c), H = c->num_heads, hd = vit_head_dim(c), D = c->embed_dim;
    size_t per[5] = {(size_t)H * T * T, (size_t)H * T * T, (size_t)H * T * hd, (size_t)H * T * hd,
                     (size_t)T * D}, total = 0;
    for (int q = 0; q < 5; q++) total += per[q] * c->depth;
    float *mem = malloc(total * sizeof(float));
    d->mem = mem;
    for (int q = 0; q < 5; q++)
        for (int l = 0; l < c->depth; l++, mem += per[q]) d->q[q][l] = mem;
    vit_record rec = {.attn = d->q[0], .scores = d->q[1], .q = d->q[2], .k = d->q[3], .tokens = d->q[4]};
    void *arena = aligned_alloc(64, vit_acts_carve(c, 1, NULL, NULL));
    vit_acts a;
    vit_acts_carve(c, 1, arena, &a);
    float x[3 * 64 * 64];
    as_error err;
    dataset_load(ds, i, x, NULL, c, &err);
    vit_forward(c, &M.params, &a, x, 1, &rec);
    memcpy(d->logits, a.logits, (size_t)c->num_classes * sizeof(float));
    free(arena);
}

static void test_roundtrip(void) {
    dataset ds;
    make_inputs(&ds, 10, 1);
    as_error err = {0};
    const vit_config *c = &M.cfg;
    const int T = vit_num_tokens(c), hd = vit_head_dim(c);
    for (int f16 = 0; f16 < 2; f16++) {
        const char *out = tmp(f16 ? "rt16.h5" : "rt32.h5");
        record_opts o = opts(out, TRACE_CREATE, "attn,scores,qk,tokens", "all", "all", f16 ? "f16" : "f32", "all");
        record_result res;
        CHECK(record_run(&M, &ds, &o, &res, &err) == AS_OK, "%s", err.msg);
        CHECK(res.recorded == 10 && res.complete, "recorded %ld", res.recorded);
        trace_reader r;
        if (trace_reader_open(&r, out, &err) != AS_OK) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        CHECK(r.n_images == 10 && r.complete && !r.swmr, "reader: %ld images, complete %d", r.n_images, r.complete);
        CHECK(r.n_layers == c->depth && r.n_heads == c->num_heads && r.f16 == f16, "selection attrs");
        CHECK(r.quantities == 0x1f, "quantities %x", r.quantities);
        char buf[256];
        const char *attrs[] = {"format", "software", "command_line", "start_time", "end_time",
                               "model_arch", "model_source", "prefix_tokens", "compression"};
        for (size_t k = 0; k < sizeof attrs / sizeof attrs[0]; k++) {
            trace_read_attr_string(&r, attrs[k], buf, sizeof buf);
            CHECK(buf[0] != 0, "attribute %s is empty", attrs[k]);
        }
        trace_read_attr_string(&r, "prefix_tokens", buf, sizeof buf);
        CHECK(strcmp(buf, "cls") == 0, "prefix_tokens %s", buf);
        /* every record of two images equals the engine's own computation */
        int imgs[2] = {0, 7};
        for (int ii = 0; ii < 2; ii++) {
            direct d;
            run_direct(&ds, imgs[ii], &d);
            /* float16: relative rounding 2^-11; float32: the batch of 4 against a batch of 1
             * differs by GEMM blocking only (rounding) */
            double tol = f16 ? 1e-3 : 1e-5;
            float *buf2 = malloc((size_t)T * T * sizeof(float) * 4);
            for (int l = 0; l < c->depth; l++)
                for (int h = 0; h < c->num_heads; h++) {
                    trace_quantity qs[4] = {TRACE_Q_ATTN, TRACE_Q_SCORES, TRACE_Q_Q, TRACE_Q_K};
                    for (int qi = 0; qi < 4; qi++) {
                        size_t n = qi < 2 ? (size_t)T * T : (size_t)T * hd;
                        CHECK(trace_read_head(&r, qs[qi], imgs[ii], l, h, buf2, &err) == AS_OK, "%s", err.msg);
                        char what[64];
                        snprintf(what, sizeof what, "%s img %d layer %d head %d", trace_quantity_name(qs[qi]), imgs[ii], l, h);
                        check_close(what, buf2, d.q[qi][l] + (size_t)h * n, n, f16 ? tol * 0.1 : tol, tol);
                    }
                }
            for (int l = 0; l < c->depth; l++) {
                CHECK(trace_read_tokens(&r, imgs[ii], l, buf2, &err) == AS_OK, "%s", err.msg);
                check_close("tokens", buf2, d.q[4][l], (size_t)T * c->embed_dim, f16 ? tol * 0.1 : tol, tol);
            }
            char path[1024];
            int label, pred;
            float logits[16];
            CHECK(trace_read_image_info(&r, imgs[ii], path, sizeof path, &label, &pred, logits, &err) == AS_OK, "%s", err.msg);
            check_close("logits", logits, d.logits, (size_t)c->num_classes, 2e-6, 2e-6);
            int best = 0;
            for (int k = 1; k < c->num_classes; k++) best = d.logits[k] > d.logits[best] ? k : best;
            CHECK(pred == best && label == -1, "pred %d want %d, label %d", pred, best, label);
            char want[64];
            snprintf(want, sizeof want, "mem[%d]", imgs[ii]);
            CHECK(strcmp(path, want) == 0, "path %s", path);
            /* the whole input image is stored, every row (it was once chunked per row, and only
             * row 0 survived) */
            {
                const int S = c->img_size;
                uint8_t *rgb_want = malloc((size_t)S * S * 3), *rgb_got = calloc((size_t)S * S * 3, 1);
                float *xx = malloc((size_t)3 * S * S * sizeof(float));
                dataset_load(&ds, imgs[ii], xx, rgb_want, c, &err);
                hid_t f = H5Fopen(out, H5F_ACC_RDONLY, H5P_DEFAULT), dset = H5Dopen2(f, "images/rgb", H5P_DEFAULT);
                hid_t fs = H5Dget_space(dset);
                hsize_t off[4] = {(hsize_t)imgs[ii], 0, 0, 0}, cnt[4] = {1, (hsize_t)S, (hsize_t)S, 3};
                H5Sselect_hyperslab(fs, H5S_SELECT_SET, off, NULL, cnt, NULL);
                hid_t ms = H5Screate_simple(4, cnt, NULL);
                CHECK(H5Dread(dset, H5T_NATIVE_UCHAR, ms, fs, H5P_DEFAULT, rgb_got) >= 0, "read images/rgb");
                H5Sclose(ms);
                H5Sclose(fs);
                H5Dclose(dset);
                H5Fclose(f);
                CHECK(memcmp(rgb_got, rgb_want, (size_t)S * S * 3) == 0, "images/rgb of image %d differs from the input "
                      "(first bytes of the last row: %d vs %d)", imgs[ii], rgb_got[(size_t)(S - 1) * S * 3], rgb_want[(size_t)(S - 1) * S * 3]);
                free(rgb_want);
                free(rgb_got);
                free(xx);
            }
            free(buf2);
            free(d.mem);
        }
        CHECK(trace_read_head(&r, TRACE_Q_ATTN, 10, 0, 0, (float[400]){0}, &err) == AS_ERR_ARG, "image out of range");
        trace_reader_close(&r);
    }
    /* refusing to overwrite, then --force */
    record_opts o = opts(tmp("rt32.h5"), TRACE_CREATE, "attn", "all", "all", "f32", "all");
    record_result res;
    CHECK(record_run(&M, &ds, &o, &res, &err) == AS_ERR_EXISTS && strstr(err.msg, "--force"), "exists: %s", err.msg);
    /* selection: layers 0 and 2, head 1, prefix rows only */
    o = opts(tmp("rt32.h5"), TRACE_FORCE, "attn", "0,2", "1", "f32", "prefix");
    CHECK(record_run(&M, &ds, &o, &res, &err) == AS_OK, "%s", err.msg);
    trace_reader r;
    if (trace_reader_open(&r, tmp("rt32.h5"), &err) == AS_OK) {
        CHECK(r.n_layers == 2 && r.layers[1] == 2 && r.n_heads == 1 && r.heads[0] == 1 && r.q_rows == 1,
              "selection: %d layers, %d heads, %d rows", r.n_layers, r.n_heads, r.q_rows);
        float row[64];
        direct d;
        run_direct(&ds, 3, &d);
        CHECK(trace_read_head(&r, TRACE_Q_ATTN, 3, 2, 1, row, &err) == AS_OK, "%s", err.msg);
        check_close("cls row of layer 2 head 1", row, d.q[0][2] + (size_t)T * T, (size_t)T, 2e-6, 2e-6);
        CHECK(trace_read_head(&r, TRACE_Q_ATTN, 3, 1, 1, row, &err) == AS_ERR_ARG && strstr(err.msg, "not recorded"),
              "unrecorded layer: %s", err.msg);
        CHECK(trace_read_head(&r, TRACE_Q_SCORES, 3, 2, 1, row, &err) == AS_ERR_ARG && strstr(err.msg, "--record scores"),
              "unrecorded quantity: %s", err.msg);
        free(d.mem);
        trace_reader_close(&r);
    }
    dataset_free(&ds);
}

static void test_reader_errors(void) {
    as_error err = {0};
    trace_reader r;
    FILE *f = fopen(tmp("junk.h5"), "wb");
    fputs("not hdf5 at all", f);
    fclose(f);
    CHECK(trace_reader_open(&r, tmp("junk.h5"), &err) == AS_ERR_FORMAT && strstr(err.msg, "not an HDF5"), "%s", err.msg);
    hid_t h = H5Fcreate(tmp("other.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(h);
    CHECK(trace_reader_open(&r, tmp("other.h5"), &err) == AS_ERR_FORMAT && strstr(err.msg, "not an attnscope trace"),
          "%s", err.msg);
    CHECK(trace_reader_open(&r, tmp("absent.h5"), &err) == AS_ERR_IO, "%s", err.msg);
    /* a trace cut in half */
    struct stat sb;
    if (stat(tmp("rt16.h5"), &sb) == 0) {
        if (truncate(tmp("rt16.h5"), sb.st_size / 2) == 0) {
            as_status rc = trace_reader_open(&r, tmp("rt16.h5"), &err);
            if (rc == AS_OK) { /* the superblock survived: reading data must fail cleanly */
                float buf[400];
                int failures = 0;
                for (long i = 0; i < r.n_images; i++)
                    failures += trace_read_head(&r, TRACE_Q_ATTN, i, 2, 0, buf, &err) != AS_OK;
                CHECK(failures > 0 || r.n_images < 10, "a truncated trace reads back whole");
                trace_reader_close(&r);
            } else {
                CHECK(rc == AS_ERR_FORMAT, "truncated: %s", err.msg);
            }
        }
    }
}

/* Polls the trace until it holds at least n complete images (child still writing). */
static long wait_for_images(const char *path, long n, pid_t child) {
    for (int tries = 0; tries < 3000; tries++) {
        trace_reader r;
        as_error err;
        long have = 0;
        if (trace_reader_open(&r, path, &err) == AS_OK) {
            have = r.n_images;
            trace_reader_close(&r);
        } else if (getenv("CHECK_VERBOSE") && tries % 100 == 0) {
            fprintf(stderr, "waiting for %s: %s\n", path, err.msg);
        }
        if (have >= n) return have;
        int st;
        if (waitpid(child, &st, WNOHANG) == child) return -1;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

/* Writes n random images (seed) as a .npy file the CLI can record. */
static void write_npy_sized(const char *path, int n, int S, unsigned long long seed) {
    char dict[256];
    int hl = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 3, %d, %d), }",
                      n, S, S);
    int pad = 64 - (10 + hl + 1) % 64;
    FILE *f = fopen(path, "wb");
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    unsigned short total = (unsigned short)(hl + pad + 1);
    fputc(total & 0xff, f);
    fputc(total >> 8, f);
    fwrite(dict, 1, (size_t)hl, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    rng_state r = {seed};
    for (size_t i = 0; i < (size_t)n * 3 * S * S; i++) {
        float v = rng_normal(&r);
        fwrite(&v, 4, 1, f);
    }
    fclose(f);
}

static void write_npy(const char *path, int n, unsigned long long seed) {
    write_npy_sized(path, n, M.cfg.img_size, seed);
}

/* Starts `attnscope record` on inputs; stderr goes to errfd when >= 0; fsize limits the file
 * size (a full disk). A child of a process that ran OpenMP cannot use OpenMP itself (libgomp
 * does not survive fork), so the recording runs in a fresh program, as a user would run it. */
static pid_t spawn_record(const char *inputs, const char *out, const char *extra, long fsize, int errfd) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    if (errfd >= 0) dup2(errfd, 2);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    if (fsize > 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {(rlim_t)fsize, (rlim_t)fsize};
        setrlimit(RLIMIT_FSIZE, &rl);
    }
    char model_dir[512];
    snprintf(model_dir, sizeof model_dir, "%s/vit_cls", getenv("FIXTURES") ? getenv("FIXTURES") : "tests/fixtures");
    const char *exe = getenv("ATTNSCOPE") ? getenv("ATTNSCOPE") : "build/attnscope";
    execl(exe, exe, "record", "--model", model_dir, "--images", inputs, "--out", out, "--batch", "4",
          "--record", "attn,tokens", "--dtype", "f32", "--threads", "2", extra, (char *)NULL);
    _exit(127);
}

static void test_interruptions(void) {
    const int N = 20000;
    as_error err = {0};
    const char *inputs = tmp("many.npy");
    write_npy(inputs, N, 5);
    dataset ds;
    if (dataset_open(&ds, inputs, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    /* kill -9 in the middle, then --resume */
    const char *out = tmp("killed.h5");
    pid_t pid = spawn_record(inputs, out, NULL, 0, -1);
    long seen = wait_for_images(out, 40, pid);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CHECK(seen >= 40, "the child recorded %ld images before the kill", seen);
    trace_reader r;
    long after_kill = 0;
    if (trace_reader_open(&r, out, &err) == AS_OK) {
        after_kill = r.n_images;
        CHECK(r.n_images >= seen && r.n_images < N && !r.complete, "after kill -9: %ld images (saw %ld), complete %d",
              r.n_images, seen, r.complete);
        trace_reader_close(&r);
    } else {
        CHECK(0, "a killed trace must open: %s", err.msg);
    }
    record_opts o = opts(out, TRACE_RESUME, "attn,tokens", "all", "all", "f32", "all");
    o.max_images = (int)after_kill + 9;
    record_result res;
    CHECK(record_run(&M, &ds, &o, &res, &err) == AS_OK, "resume: %s", err.msg);
    CHECK(res.resumed == after_kill && res.recorded == 9, "resumed %ld, recorded %ld", res.resumed, res.recorded);
    if (trace_reader_open(&r, out, &err) == AS_OK) {
        CHECK(r.n_images == after_kill + 9 && r.complete && !r.swmr, "after resume: %ld images", r.n_images);
        const int T = vit_num_tokens(&M.cfg);
        float *buf = malloc((size_t)T * T * sizeof(float));
        long check_at[3] = {0, after_kill - 1, after_kill + 4};
        for (int k = 0; k < 3; k++) {
            direct d;
            run_direct(&ds, (int)check_at[k], &d);
            CHECK(trace_read_head(&r, TRACE_Q_ATTN, check_at[k], 1, 2, buf, &err) == AS_OK, "%s", err.msg);
            check_close("resumed trace map", buf, d.q[0][1] + (size_t)2 * T * T, (size_t)T * T, 2e-6, 2e-6);
            free(d.mem);
        }
        free(buf);
        trace_reader_close(&r);
    }
    /* resuming with other options is refused */
    o = opts(out, TRACE_RESUME, "attn", "all", "all", "f16", "all");
    CHECK(record_run(&M, &ds, &o, &res, &err) == AS_ERR_ARG && strstr(err.msg, "same"), "mismatch: %s", err.msg);
    dataset_free(&ds);

    /* Ctrl-C: stops after the batch, closes cleanly, flagged incomplete, exit status 1 */
    out = tmp("sigint.h5");
    pid = spawn_record(inputs, out, NULL, 0, -1);
    seen = wait_for_images(out, 20, pid);
    kill(pid, SIGINT);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "SIGINT: child status %d", st);
    if (trace_reader_open(&r, out, &err) == AS_OK) {
        char why[64];
        trace_read_attr_string(&r, "interrupted", why, sizeof why);
        CHECK(!r.swmr && !r.complete && r.n_images >= seen && strcmp(why, "SIGINT") == 0,
              "after SIGINT: swmr %d complete %d images %ld why %s", r.swmr, r.complete, r.n_images, why);
        trace_reader_close(&r);
    } else {
        CHECK(0, "interrupted trace: %s", err.msg);
    }

    /* a full disk (file size limit): one-line error naming the fix; completed images stay */
    out = tmp("full.h5");
    int pipefd[2];
    if (pipe(pipefd) != 0) abort();
    pid = spawn_record(inputs, out, NULL, 3 << 20, pipefd[1]);
    close(pipefd[1]);
    char msg[2048] = {0};
    size_t got = 0;
    ssize_t k;
    while ((k = read(pipefd[0], msg + got, sizeof msg - 1 - got)) > 0) got += (size_t)k;
    close(pipefd[0]);
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "disk full: status %d", st);
    CHECK(strstr(msg, "full.h5") && strstr(msg, "--resume"), "disk full message: %s", msg);
    if (trace_reader_open(&r, out, &err) == AS_OK) {
        CHECK(r.n_images > 0 && r.n_images < N && !r.complete, "after disk full: %ld images, complete %d",
              r.n_images, r.complete);
        float buf[17 * 17];
        CHECK(r.n_images == 0 || trace_read_head(&r, TRACE_Q_ATTN, r.n_images - 1, 0, 0, buf, &err) == AS_OK,
              "last completed image reads: %s", err.msg);
        trace_reader_close(&r);
    } else {
        CHECK(0, "a trace after disk full must open: %s", err.msg);
    }
}

/* Fixture model `name`, the shared inputs.npy and, with expected non-NULL, the fixture's
 * expected.safetensors (PyTorch's reference); 0 (a failed check) when one cannot be read. */
static int load_fixture(const char *name, model *mm, dataset *ds, safetensors *expected) {
    const char *fxd = getenv("FIXTURES") ? getenv("FIXTURES") : "tests/fixtures";
    char path[512];
    as_error err = {0};
    snprintf(path, sizeof path, "%s/%s", fxd, name);
    if (model_load(mm, path, NULL, 0, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return 0;
    }
    snprintf(path, sizeof path, "%s/inputs.npy", fxd);
    if (dataset_open(ds, path, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        model_free(mm);
        return 0;
    }
    snprintf(path, sizeof path, "%s/%s/expected.safetensors", fxd, name);
    if (expected && safetensors_open(expected, path, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        dataset_free(ds);
        model_free(mm);
        return 0;
    }
    return 1;
}

static int load_mech_cls(model *mm, dataset *ds) { return load_fixture("mech_cls", mm, ds, NULL); }

/* A model mixing every mechanism (fixture mech_cls): record everything with a head selection;
 * the trace reads back equal to PyTorch's reference maps, intermediate maps included, and the
 * mechanisms' learnt tensors sit under layers/LL/params. */
static void test_mechanism_trace(void) {
    model mm;
    dataset ds;
    safetensors st;
    as_error err = {0};
    if (!load_fixture("mech_cls", &mm, &ds, &st)) return;
    const char *out = tmp("mech.h5");
    record_opts o = opts_for(&mm.cfg, out, TRACE_CREATE, "all", "all", "0,2", "f32", "all");
    record_result res;
    CHECK(record_run(&mm, &ds, &o, &res, &err) == AS_OK, "%s", err.msg);
    trace_reader r;
    if (trace_reader_open(&r, out, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
    } else {
        const int T = vit_num_tokens(&mm.cfg), H = mm.cfg.num_heads;
        float *buf = malloc((size_t)T * T * 8 * sizeof(float)), *want = malloc((size_t)1 << 20);
        int compared = 0;
        for (int i = 0; i < st.count; i++) {
            const safetensors_tensor *t = &st.tensors[i];
            const char *dot = strrchr(t->name, '.');
            if (!dot) continue; /* logits */
            char q[32];
            snprintf(q, sizeof q, "%.*s", (int)(dot - t->name), t->name);
            const int l = atoi(dot + 1);
            safetensors_read_f32(&st, t, want, &err);
            const int heads = t->ndim == 4 ? (int)t->shape[1] : 1;
            const size_t per_head = t->numel / (size_t)t->shape[0] / (size_t)heads;
            const int expanded = strcmp(q, "attn_expanded") == 0 || strcmp(q, "attn_convolved") == 0;
            for (int img = 0; img < 2; img++)
                for (int h = 0; h < heads; h++) {
                    if (!expanded && strcmp(q, "tokens") != 0 && h == 1) {
                        /* head 1 was not selected */
                        CHECK(trace_read_map(&r, q, img, l, 1, buf, &err) != AS_OK, "%s head 1 must be absent", t->name);
                        continue;
                    }
                    as_status rc;
                    if (strcmp(q, "tokens") == 0) rc = trace_read_tokens(&r, img, l, buf, &err);
                    else if (strcmp(q, "q") == 0) rc = trace_read_head(&r, TRACE_Q_Q, img, l, h, buf, &err);
                    else if (strcmp(q, "k") == 0) rc = trace_read_head(&r, TRACE_Q_K, img, l, h, buf, &err);
                    else rc = trace_read_map(&r, q, img, l, h, buf, &err);
                    CHECK(rc == AS_OK, "%s: %s", t->name, err.msg);
                    if (rc != AS_OK) continue;
                    char what[96];
                    snprintf(what, sizeof what, "trace %s image %d head %d", t->name, img, h);
                    check_close(what, buf, want + ((size_t)img * heads + h) * per_head, per_head, 1e-4, 1e-4);
                    compared++;
                }
        }
        CHECK(compared > 100, "%d maps compared", compared);
        /* q/k do not exist in a less-attention block */
        CHECK(trace_read_head(&r, TRACE_Q_Q, 0, 3, 0, buf, &err) != AS_OK && strstr(err.msg, "no dataset"),
              "less-attention q: %s", err.msg);
        trace_reader_close(&r);
        /* learnt tensors: block 8's DS as loaded, block 0's keep mask (head 1 unmasked) */
        hid_t f = H5Fopen(out, H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t d = H5Dopen2(f, "layers/08/params/ds", H5P_DEFAULT);
        CHECK(d >= 0 && H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0, "read ds");
        if (d >= 0) H5Dclose(d);
        check_close("trace params ds", buf, mm.params.blocks[8].ds, (size_t)T * T, 0, 0);
        d = H5Dopen2(f, "layers/00/params/mask", H5P_DEFAULT);
        CHECK(d >= 0 && H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0, "read mask");
        if (d >= 0) H5Dclose(d);
        double kept[3] = {0, 0, 0};
        for (int h = 0; h < H; h++)
            for (size_t i = 0; i < (size_t)T * T; i++) kept[h] += buf[(size_t)h * T * T + i];
        /* R = 3 on a 4 x 4 grid keeps 4*4 + 8*6 + 4*9 = 100 patch pairs; prefix row+col 33; R = 5: 196 */
        CHECK(kept[0] == 133 && kept[1] == T * T && kept[2] == 196 + 33, "mask entries kept %g %g %g",
              kept[0], kept[1], kept[2]);
        H5Fclose(f);
        free(buf);
        free(want);
    }
    safetensors_close(&st);
    dataset_free(&ds);
    model_free(&mm);
}

/* A float16 trace of a monolithic model takes its maps from the engine in binary16
 * (vit_record.attn16, converted while each map is in cache): every value must be exactly the
 * binary16 rounding of the float32 trace's value, for every mechanism of fixture mech_cls (the
 * Refiner's block-wide map work included), with the whole record written as it lies and with a
 * head and query-row selection cut out of it. */
static void test_f16_maps(void) {
    model mm;
    dataset ds;
    as_error err = {0};
    if (!load_mech_cls(&mm, &ds)) return;
    const vit_config *c = &mm.cfg;
    const int T = vit_num_tokens(c), H = c->num_heads;
    CHECK(vit_attn16_ok(c, 0) && vit_attn16_ok(c, c->depth - 1), "a monolithic model records binary16 maps");
    const char *sel[2][2] = {{"all", "all"}, {"1", "prefix"}};
    float *a32 = malloc((size_t)T * T * sizeof *a32), *a16 = malloc((size_t)T * T * sizeof *a16);
    for (int k = 0; k < 2; k++) {
        const char *p32 = tmp("f16_ref.h5"), *p16 = tmp("f16_maps.h5");
        record_opts o32 = opts_for(c, p32, TRACE_FORCE, "attn", "all", sel[k][0], "f32", sel[k][1]);
        record_opts o16 = opts_for(c, p16, TRACE_FORCE, "attn", "all", sel[k][0], "f16", sel[k][1]);
        record_result res;
        CHECK(record_run(&mm, &ds, &o32, &res, &err) == AS_OK, "%s", err.msg);
        CHECK(record_run(&mm, &ds, &o16, &res, &err) == AS_OK, "%s", err.msg);
        trace_reader r32, r16;
        if (trace_reader_open(&r32, p32, &err) != AS_OK || trace_reader_open(&r16, p16, &err) != AS_OK) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        const size_t n = (size_t)(k ? 1 : T) * T;
        long differ = 0, compared = 0;
        for (long img = 0; img < r16.n_images; img++)
            for (int l = 0; l < c->depth; l++)
                for (int h = 0; h < H; h++) {
                    if (k && h != 1) continue;
                    if (trace_read_head(&r32, TRACE_Q_ATTN, img, l, h, a32, &err) != AS_OK ||
                        trace_read_head(&r16, TRACE_Q_ATTN, img, l, h, a16, &err) != AS_OK) {
                        CHECK(0, "image %ld layer %d head %d: %s", img, l, h, err.msg);
                        continue;
                    }
                    for (size_t i = 0; i < n; i++, compared++)
                        differ += a16[i] != kernels_f16_to_f32(kernels_f32_to_f16(a32[i]));
                }
        CHECK(compared > 0 && differ == 0, "heads %s rows %s: %ld of %ld binary16 values are not the "
              "float32 trace's rounded", sel[k][0], sel[k][1], differ, compared);
        trace_reader_close(&r32);
        trace_reader_close(&r16);
    }
    free(a32);
    free(a16);
    dataset_free(&ds);
    model_free(&mm);
}

/* 1 when the file system of dir takes O_DIRECT writes (tmpfs before Linux 6.6 does not). */
static int fs_takes_direct(const char *dir) {
    char p[600];
    snprintf(p, sizeof p, "%s/direct_probe", dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600), ok = 0;
    void *buf = NULL;
    if (fd >= 0 && posix_memalign(&buf, 4096, 4096) == 0) {
        memset(buf, 0, 4096);
        ok = pwrite(fd, buf, 4096, 0) == 4096;
    }
    free(buf);
    if (fd >= 0) close(fd);
    unlink(p);
    return ok;
}

/* Records written with O_DIRECT (trace_spec.direct_min, here forced down to every chunk) read
 * back bit for bit equal to the same records written through the page cache: binary16 maps from
 * the engine's padded buffer, float32 maps, scores, q, k and tokens through the padded staging
 * buffer, one head cut out of the padded buffer, and a run stopped after 8 images and resumed. */
static void test_direct_io(void) {
    model m0, mm;
    dataset ds;
    as_error err = {0};
    if (!load_mech_cls(&m0, &ds)) return;
    dataset_free(&ds); /* 11 images: batches of 4, the last one partial */
    const char *inputs = tmp("direct.npy");
    write_npy_sized(inputs, 11, m0.cfg.img_size, 9);
    if (dataset_open(&ds, inputs, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        model_free(&m0);
        return;
    }
    /* the fixture's mechanisms on a 8 x 8 grid, so that a head's map spans whole 4096-byte
     * blocks (only those go past the page cache) */
    vit_config cfg = m0.cfg;
    cfg.patch_size = 4;
    model_free(&m0);
    if (model_init_random(&mm, &cfg, 5, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        dataset_free(&ds);
        return;
    }
    const vit_config *c = &mm.cfg;
    const int T = vit_num_tokens(c), H = c->num_heads, D = c->embed_dim;
    CHECK((size_t)T * T * 2 > 8192, "maps of %d tokens span two blocks", T);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tmp("x"));
    *strrchr(dir, '/') = 0;
    const int direct_fs = fs_takes_direct(dir);
    const char *cases[3][4] = {{"attn,scores,q,k,tokens", "all", "f16", "all"},
                               {"attn,scores,q,k,tokens", "all", "f32", "all"},
                               {"attn,scores", "1", "f16", "all"}};
    const size_t big = (size_t)T * (T > D ? T : D);
    float *a = malloc(big * sizeof *a), *b = malloc(big * sizeof *b);
    for (int k = 0; k < 3; k++) {
        const char *pc = tmp("cached.h5"), *pd = tmp("direct.h5");
        record_opts oc = opts_for(c, pc, TRACE_FORCE, cases[k][0], "all", cases[k][1], cases[k][2], cases[k][3]);
        record_opts od = opts_for(c, pd, TRACE_FORCE, cases[k][0], "all", cases[k][1], cases[k][2], cases[k][3]);
        oc.spec.direct_min = -1;
        od.spec.direct_min = 1;
        record_result rc, rd;
        CHECK(record_run(&mm, &ds, &oc, &rc, &err) == AS_OK, "%s", err.msg);
        if (k == 0) { /* stopped after 8 images, then resumed: batches as in the other run */
            od.max_images = 8;
            CHECK(record_run(&mm, &ds, &od, &rd, &err) == AS_OK, "%s", err.msg);
            od.mode = TRACE_RESUME;
            od.max_images = 0;
        }
        CHECK(record_run(&mm, &ds, &od, &rd, &err) == AS_OK, "%s", err.msg);
        CHECK(rc.direct_bytes == 0, "direct_min < 0 writes nothing with O_DIRECT (%.0f bytes)", rc.direct_bytes);
        CHECK(rd.direct_bytes > 0 || !direct_fs, "%s %s: nothing written with O_DIRECT (%.0f bytes) on a file "
              "system that takes it", cases[k][0], cases[k][2], rd.direct_bytes);
        trace_reader r1, r2;
        if (trace_reader_open(&r1, pc, &err) != AS_OK || trace_reader_open(&r2, pd, &err) != AS_OK) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        CHECK(r1.n_images == r2.n_images && r2.n_images == ds.count && r2.complete, "%ld and %ld images",
              r1.n_images, r2.n_images);
        long differ = 0, compared = 0;
        const trace_quantity qs[4] = {TRACE_Q_ATTN, TRACE_Q_SCORES, TRACE_Q_Q, TRACE_Q_K};
        for (long img = 0; img < r2.n_images; img++)
            for (int l = 0; l < c->depth; l++) {
                for (int qi = 0; qi < 4; qi++) {
                    if (!(oc.spec.quantities & (1u << qs[qi]))) continue;
                    for (int h = 0; h < H; h++) {
                        if (k == 2 && h != 1) continue;
                        memset(a, 0, big * sizeof *a);
                        memset(b, 0, big * sizeof *b);
                        as_status s1 = trace_read_head(&r1, qs[qi], img, l, h, a, &err);
                        as_status s2 = trace_read_head(&r2, qs[qi], img, l, h, b, &err);
                        if (s1 != AS_OK || s2 != AS_OK) continue; /* a quantity this block has not */
                        differ += memcmp(a, b, big * sizeof *a) != 0;
                        compared++;
                    }
                }
                if (oc.spec.quantities & (1u << TRACE_Q_TOKENS)) {
                    CHECK(trace_read_tokens(&r1, img, l, a, &err) == AS_OK &&
                          trace_read_tokens(&r2, img, l, b, &err) == AS_OK, "%s", err.msg);
                    differ += memcmp(a, b, (size_t)T * D * sizeof *a) != 0;
                    compared++;
                }
            }
        CHECK(compared > (long)ds.count * c->depth && differ == 0, "%s %s heads %s: %ld of %ld records "
              "differ between O_DIRECT and the page cache", cases[k][0], cases[k][2], cases[k][1],
              differ, compared);
        trace_reader_close(&r1);
        trace_reader_close(&r2);
    }
    free(a);
    free(b);
    dataset_free(&ds);
    model_free(&mm);
}

/* A model with attention pooling (fixture vf_map, global_pool "map"): the trace holds
 * /pool/attn, (H, Np) per image, equal to PyTorch's map of the pooling query
 * (tools/vitfam_ref.py) in float32 and to its binary16 rounding in float16; a trace of a model
 * without it says so in one line. */
static void test_pool_attn(void) {
    model mm;
    dataset ds;
    safetensors st;
    as_error err = {0};
    if (!load_fixture("vf_map", &mm, &ds, &st)) return;
    const vit_config *c = &mm.cfg;
    const int H = c->num_heads, Np = vit_num_patches(c);
    const safetensors_tensor *t = safetensors_find(&st, "pool_attn");
    CHECK(t && t->numel == (size_t)ds.count * H * Np, "the fixture holds PyTorch's pool_attn (%d, %d, %d)",
          ds.count, H, Np);
    float *want = malloc((size_t)ds.count * H * Np * sizeof *want), *got = malloc((size_t)H * Np * sizeof *got);
    if (t && t->numel == (size_t)ds.count * H * Np) safetensors_read_f32(&st, t, want, &err);
    for (int f16 = 0; f16 < 2 && t; f16++) {
        const char *out = tmp(f16 ? "pool16.h5" : "pool32.h5");
        record_opts o = opts_for(c, out, TRACE_FORCE, "attn", "all", "all", f16 ? "f16" : "f32", "all");
        record_result res;
        CHECK(record_run(&mm, &ds, &o, &res, &err) == AS_OK, "%s", err.msg);
        trace_reader r;
        if (trace_reader_open(&r, out, &err) != AS_OK) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        CHECK(r.has_pool_attn, "%s: the trace has /pool/attn", out);
        for (long img = 0; img < r.n_images; img++) {
            CHECK(trace_read_pool_attn(&r, img, got, &err) == AS_OK, "%s", err.msg);
            const float *w = want + (size_t)img * H * Np;
            double worst = 0, rows = 0;
            for (int h = 0; h < H; h++) {
                double sum = 0;
                for (int i = 0; i < Np; i++) {
                    const double ref = f16 ? kernels_f16_to_f32(kernels_f32_to_f16(w[h * Np + i])) : w[h * Np + i];
                    const double d = fabs(got[h * Np + i] - ref);
                    worst = d > worst ? d : worst;
                    sum += got[h * Np + i];
                }
                rows = fabs(sum - 1) > rows ? fabs(sum - 1) : rows;
            }
            CHECK(worst < (f16 ? 2e-3 : 1e-5) && rows < (f16 ? 5e-3 : 1e-5), "%s image %ld: pool/attn "
                  "off PyTorch's by %g, rows sum to 1 within %g", f16 ? "f16" : "f32", img, worst, rows);
        }
        trace_reader_close(&r);
    }
    /* a trace of a model without attention pooling */
    const char *plain = tmp("nopool.h5");
    record_opts o = opts(plain, TRACE_FORCE, "attn", "all", "all", "f32", "all");
    record_result res; /* on the same inputs (load_fixture's inputs.npy) */
    CHECK(record_run(&M, &ds, &o, &res, &err) == AS_OK, "%s", err.msg);
    trace_reader r;
    if (trace_reader_open(&r, plain, &err) == AS_OK) {
        CHECK(!r.has_pool_attn && trace_read_pool_attn(&r, 0, got, &err) == AS_ERR_ARG &&
              strstr(err.msg, "global_pool"), "no pool map: %s", err.msg);
        trace_reader_close(&r);
    }
    free(want);
    free(got);
    safetensors_close(&st);
    dataset_free(&ds);
    model_free(&mm);
}

int main(void) {
    check_tmp_init("trace");
    as_error err = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/vit_cls", getenv("FIXTURES") ? getenv("FIXTURES") : "tests/fixtures");
    if (model_load(&M, path, NULL, 0, &err) != AS_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    runtime_set_threads(0);
    test_roundtrip();
    test_reader_errors();
    test_interruptions();
    test_mechanism_trace();
    test_f16_maps();
    test_direct_io();
    test_pool_attn();
    model_free(&M);
    check_tmp_remove();
    return check_finish("trace");
}
