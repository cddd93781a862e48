/* status.c: status messages and checked size arithmetic shared by every module. */
#include "status.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

static const char *const as_status_names[] = {
    [AS_OK] = "ok",
    [AS_ERR_IO] = "I/O error",
    [AS_ERR_FORMAT] = "bad file format",
    [AS_ERR_SHAPE] = "shape mismatch",
    [AS_ERR_CONFIG] = "bad model configuration",
    [AS_ERR_NOMEM] = "out of memory",
    [AS_ERR_UNSUPPORTED] = "unsupported",
    [AS_ERR_ARG] = "bad argument",
    [AS_ERR_EXISTS] = "file exists",
    [AS_ERR_INTERRUPTED] = "interrupted",
    [AS_ERR_HDF5] = "HDF5 error",
};
_Static_assert(sizeof as_status_names / sizeof as_status_names[0] == AS_STATUS_COUNT,
               "every as_status needs a name");

const char *as_status_string(as_status s) {
    if ((unsigned)s >= AS_STATUS_COUNT) return "unknown status";
    return as_status_names[s];
}

as_status as_fail(as_error *err, as_status s, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = s;
    }
    return s;
}

int as_mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

int as_add_size(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a) return 0;
    *out = a + b;
    return 1;
}

int as_double_to_int(double v, int lo, int hi, int *out) {
    /* the comparisons come first: they are false for NaN and keep the cast in range */
    if (!(v >= (double)lo && v <= (double)hi) || v != floor(v)) return 0;
    *out = (int)v;
    return 1;
}

int as_double_in(double v, double lo, double hi) { return v >= lo && v <= hi && isfinite(v); }
