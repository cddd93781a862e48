/* safetensors.h: a strict, memory-mapped reader (and a small writer) of the safetensors format:
 * 8-byte little-endian header length, a JSON header, then raw little-endian tensor bytes. */
#ifndef AS_SAFETENSORS_H
#define AS_SAFETENSORS_H

#include <stddef.h>
#include <sys/stat.h>
#include <stdint.h>

#include "../core/status.h"

/* Usage:
 *     safetensors st;
 *     if (safetensors_open(&st, "model.safetensors", &err) != AS_OK) ...
 *     const safetensors_tensor *t = safetensors_find(&st, "head.weight");
 *     float *w = malloc(t->numel * 4);  safetensors_read_f32(&st, t, w, &err);
 *     safetensors_close(&st);
 * Every offset, size and shape is checked against the file before anything is returned. */

typedef enum {
    SAFETENSORS_F32 = 0, SAFETENSORS_F16, SAFETENSORS_BF16, SAFETENSORS_F64,
    SAFETENSORS_I64, SAFETENSORS_I32, SAFETENSORS_I16, SAFETENSORS_I8, SAFETENSORS_U8,
    SAFETENSORS_BOOL, SAFETENSORS_DTYPE_COUNT
} safetensors_dtype;

#define SAFETENSORS_MAX_DIMS 8
#define SAFETENSORS_MAX_HEADER (100u << 20) /* as the reference implementation */

typedef struct {
    char *name;
    safetensors_dtype dtype;
    int ndim;
    int64_t shape[SAFETENSORS_MAX_DIMS];
    size_t numel;
    size_t offset, nbytes; /* within the data section */
    const unsigned char *data;
} safetensors_tensor;

typedef struct {
    char path[512];
    void *map;        /* the mapped file (or a caller's buffer for safetensors_parse) */
    size_t map_size;
    struct stat file; /* safetensors_open: the file as it was when mapped */
    int owns_map;
    safetensors_tensor *tensors;
    int count;
} safetensors;

const char *safetensors_dtype_name(safetensors_dtype d);
size_t safetensors_dtype_size(safetensors_dtype d);

as_status safetensors_open(safetensors *st, const char *path, as_error *err);
/* Parses a file already in memory (the fuzz entry point); buf must outlive st. */
as_status safetensors_parse(safetensors *st, const void *buf, size_t len, const char *name,
                            as_error *err);
void safetensors_close(safetensors *st);

const safetensors_tensor *safetensors_find(const safetensors *st, const char *name);
/* Converts F32, F16 or BF16 data to float32 in dst (numel floats). */
as_status safetensors_read_f32(const safetensors *st, const safetensors_tensor *t, float *dst,
                               as_error *err);

/* Writer: tensors given as float32 and stored as dtype (F32, F16 or BF16). Writes to a
 * temporary name and renames, so a failed write never leaves a file that looks complete. */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[SAFETENSORS_MAX_DIMS];
    const float *data;
} safetensors_entry;
as_status safetensors_write(const char *path, const safetensors_entry *entries, int n,
                            safetensors_dtype dtype, as_error *err);

#endif
