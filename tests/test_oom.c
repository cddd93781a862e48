/* test_oom.c: allocation-failure injection (Lua style) over the loaders and the trace writer.
 * The test binary is linked with -Wl,--wrap for malloc, calloc, realloc, aligned_alloc and
 * strdup, so every allocation our code makes goes through oom_* below, which fails the n-th
 * one. Each loader runs once to count its allocations, then once per allocation with that one
 * failing: every run must fail cleanly (a status, a one-line message) or succeed, and leak
 * nothing (LeakSanitizer checks at exit in the ASan build). HDF5's, libpng's and cJSON's own
 * allocations happen inside their libraries and are not counted. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "../cli/cli.h"
#include "../io/dataset.h"
#include "../io/image.h"
#include "../io/model.h"
#include "../io/safetensors.h"
#include "../io/trace.h"
#include "check.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
char *__real_strdup(const char *s);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);
char *__wrap_strdup(const char *s);

/* The hook's state: allocations counted since oom_arm; the one to fail (0: none). Test-only
 * globals: the wrappers have no other way to reach them. */
static long oom_count, oom_fail_at;

static void oom_arm(long fail_at) {
    oom_count = 0;
    oom_fail_at = fail_at;
}

static int oom_now(void) { return ++oom_count == oom_fail_at; }

void *__wrap_malloc(size_t n) { return oom_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t k, size_t n) { return oom_now() ? NULL : __real_calloc(k, n); }
void *__wrap_realloc(void *p, size_t n) { return oom_now() ? NULL : __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { return oom_now() ? NULL : __real_aligned_alloc(a, n); }
char *__wrap_strdup(const char *s) { return oom_now() ? NULL : __real_strdup(s); }

typedef as_status (*oom_case)(const char *arg, as_error *err);

static as_status case_safetensors(const char *arg, as_error *err) {
    safetensors st;
    as_status rc = safetensors_open(&st, arg, err);
    if (rc == AS_OK) safetensors_close(&st);
    return rc;
}

static as_status case_model(const char *arg, as_error *err) {
    model m;
    as_status rc = model_load(&m, arg, NULL, 0, err);
    if (rc == AS_OK) model_free(&m);
    return rc;
}

static as_status case_image(const char *arg, as_error *err) {
    image im;
    as_status rc = image_load(&im, arg, err);
    if (rc == AS_OK) image_free(&im);
    return rc;
}

static as_status case_dataset(const char *arg, as_error *err) {
    dataset ds;
    as_status rc = dataset_open(&ds, arg, err);
    if (rc == AS_OK) dataset_free(&ds);
    return rc;
}

/* The trace writer: record the fixture model over two images into a new trace. */
static as_status case_record(const char *arg, as_error *err) {
    model m;
    as_status rc = model_load(&m, fx("vit_cls"), NULL, 0, err);
    if (rc != AS_OK) return rc;
    dataset ds;
    if ((rc = dataset_open(&ds, fx("inputs.npy"), err)) != AS_OK) {
        model_free(&m);
        return rc;
    }
    record_opts o;
    memset(&o, 0, sizeof o);
    o.out = arg;
    o.mode = TRACE_FORCE;
    o.spec.batch = 1;
    o.spec.command_line = "test_oom";
    o.quiet = 1;
    record_result res;
    if (record_parse_selection(&o, &m.cfg, "attn,tokens", "all", "all", "f16", "none", "all", err))
        rc = err->status ? err->status : AS_ERR_ARG;
    else
        rc = record_run(&m, &ds, &o, &res, err);
    dataset_free(&ds);
    model_free(&m);
    return rc;
}

/* Runs c with every allocation failing in turn; returns how many allocations it makes. */
static long sweep(const char *what, oom_case c, const char *arg) {
    as_error err = {0};
    oom_arm(0);
    as_status rc = c(arg, &err);
    long total = oom_count;
    CHECK(rc == AS_OK, "%s without failures: %s", what, err.msg);
    int bad_msg = 0;
    for (long k = 1; k <= total; k++) {
        memset(&err, 0, sizeof err);
        oom_arm(k);
        rc = c(arg, &err);
        oom_arm(0);
        if (rc == AS_OK) continue; /* the failing allocation had a fallback */
        if (!err.msg[0] || strchr(err.msg, '\n')) {
            if (bad_msg++ < 3) fprintf(stderr, "  %s, allocation %ld failing: message \"%s\"\n", what, k, err.msg);
        }
    }
    CHECK(bad_msg == 0, "%s: %d failing allocations gave no one-line message", what, bad_msg);
    if (getenv("CHECK_VERBOSE")) fprintf(stderr, "ok   %s: %ld allocations, each failed once\n", what, total);
    return total;
}

int main(void) {
    setenv("OMP_NUM_THREADS", "1", 0);
    check_tmp_init("oom");
    char out[1024];
    snprintf(out, sizeof out, "%s", check_tmp("oom.h5"));
    CHECK(sweep("safetensors", case_safetensors, fx("vit_cls/model.safetensors")) > 0, "counted");
    CHECK(sweep("model", case_model, fx("vit_cls")) > 0, "counted");
    CHECK(sweep("png", case_image, fx("img.png")) > 0, "counted");
    CHECK(sweep("jpeg", case_image, fx("img.jpg")) > 0, "counted");
    CHECK(sweep("npy", case_dataset, fx("inputs.npy")) > 0, "counted");
    CHECK(sweep("trace writer", case_record, out) > 0, "counted");
    check_tmp_remove();
    return check_finish("oom");
}
