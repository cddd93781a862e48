/* status.h: the one status enum of attnscope and the error detail that travels with it.
 * Every call that touches files or libraries returns an as_status and fills an as_error. */
#ifndef AS_STATUS_H
#define AS_STATUS_H

#include <stddef.h>

/* Usage:
 *     as_error err = {0};
 *     if (safetensors_open(&st, path, &err) != AS_OK) {
 *         fprintf(stderr, "attnscope: %s\n", err.msg);   // one line: file, what, fix
 *         return 1;
 *     }
 * A failing call leaves its outputs untouched (or zeroed) and writes one line into err->msg. */
typedef enum {
    AS_OK = 0,
    AS_ERR_IO,          /* cannot open, read, write: the OS said no (errno in the message) */
    AS_ERR_FORMAT,      /* the file is not what it claims: corrupt, truncated, bad header */
    AS_ERR_SHAPE,       /* tensors or inputs of the wrong shape */
    AS_ERR_CONFIG,      /* an impossible or unknown model configuration */
    AS_ERR_NOMEM,       /* an allocation failed or a size overflowed */
    AS_ERR_UNSUPPORTED, /* valid but not handled (dtype, image kind, filter) */
    AS_ERR_ARG,         /* a bad command-line argument */
    AS_ERR_EXISTS,      /* refusing to overwrite */
    AS_ERR_INTERRUPTED, /* stopped by a signal; what was done is kept */
    AS_ERR_HDF5,        /* the HDF5 library failed */
    AS_STATUS_COUNT
} as_status;

#define AS_ERROR_MSG_MAX 1024

typedef struct {
    as_status status;
    char msg[AS_ERROR_MSG_MAX];
} as_error;

/* "ok", "I/O error", ... never NULL. */
const char *as_status_string(as_status s);

/* Fills err (may be NULL) with a formatted one-line message and returns s, so that a failing
 * path reads `return as_fail(err, AS_ERR_FORMAT, "%s: ...", path);`. */
as_status as_fail(as_error *err, as_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Overflow-checked size arithmetic: returns 0 and leaves *out untouched on overflow. */
int as_mul_size(size_t a, size_t b, size_t *out);
int as_add_size(size_t a, size_t b, size_t *out);
/* Checked conversions for numbers from outside (JSON, headers): 1 with *out set when v is finite,
 * integral and in [lo, hi]; 0 (and *out untouched) otherwise. Every double-to-int conversion of
 * an outside number goes through here: a plain (int) cast of 1e30 or NaN is undefined. */
int as_double_to_int(double v, int lo, int hi, int *out);
/* 1 when v is finite and in [lo, hi]. */
int as_double_in(double v, double lo, double hi);

#endif
