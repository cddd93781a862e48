/* safetensors.c: the reader distrusts every byte: header length, JSON, dtype, shape and offsets
 * are all checked (with overflow-checked arithmetic) before a tensor is handed out. */
#define _POSIX_C_SOURCE 200809L
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/kernels.h"
#include "atomic.h"

static const struct {
    const char *name;
    size_t size;
} st_dtypes[] = {
    [SAFETENSORS_F32] = {"F32", 4}, [SAFETENSORS_F16] = {"F16", 2}, [SAFETENSORS_BF16] = {"BF16", 2},
    [SAFETENSORS_F64] = {"F64", 8}, [SAFETENSORS_I64] = {"I64", 8}, [SAFETENSORS_I32] = {"I32", 4},
    [SAFETENSORS_I16] = {"I16", 2}, [SAFETENSORS_I8] = {"I8", 1},   [SAFETENSORS_U8] = {"U8", 1},
    [SAFETENSORS_BOOL] = {"BOOL", 1},
};
_Static_assert(sizeof st_dtypes / sizeof st_dtypes[0] == SAFETENSORS_DTYPE_COUNT,
               "every dtype needs a name and size");

const char *safetensors_dtype_name(safetensors_dtype d) {
    return (unsigned)d < SAFETENSORS_DTYPE_COUNT ? st_dtypes[d].name : "?";
}
size_t safetensors_dtype_size(safetensors_dtype d) {
    return (unsigned)d < SAFETENSORS_DTYPE_COUNT ? st_dtypes[d].size : 0;
}

static int cmp_offset(const void *a, const void *b) {
    const safetensors_tensor *x = *(safetensors_tensor *const *)a, *y = *(safetensors_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static void free_tensors(safetensors *st) {
    for (int i = 0; i < st->count; i++) free(st->tensors[i].name);
    free(st->tensors);
    st->tensors = NULL;
    st->count = 0;
}

/* Reads a JSON number that must be a non-negative integer below 2^53. */
static int json_size(const cJSON *j, size_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double v = j->valuedouble;
    if (!(v >= 0.0) || v > 9007199254740992.0 || v != (double)(uint64_t)v) return 0;
    *out = (size_t)(uint64_t)v;
    return 1;
}

static as_status parse_header(safetensors *st, const unsigned char *buf, size_t len,
                              const char *name, as_error *err) {
    const char *fix = "re-download or re-export the checkpoint";
    if (len < 8)
        return as_fail(err, AS_ERR_FORMAT, "%s: file is %zu bytes, too short for a safetensors "
                       "header: the file is truncated; %s", name, len, fix);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > SAFETENSORS_MAX_HEADER)
        return as_fail(err, AS_ERR_FORMAT, "%s: header length %llu is over the %u-byte limit: not "
                       "a safetensors file, or corrupt; %s", name, (unsigned long long)hlen,
                       SAFETENSORS_MAX_HEADER, fix);
    if (hlen > len - 8)
        return as_fail(err, AS_ERR_FORMAT, "%s: header length %llu runs past the end of the "
                       "%zu-byte file: truncated or not a safetensors file; %s", name,
                       (unsigned long long)hlen, len, fix);
    const size_t data_start = 8 + (size_t)hlen, data_len = len - data_start;
    cJSON *root = cJSON_ParseWithLength((const char *)buf + 8, (size_t)hlen);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return as_fail(err, AS_ERR_FORMAT, "%s: the JSON header does not parse as an object: "
                       "corrupt file; %s", name, fix);
    }
    int n = cJSON_GetArraySize(root);
    st->tensors = calloc((size_t)(n > 0 ? n : 1), sizeof *st->tensors);
    if (!st->tensors) {
        cJSON_Delete(root);
        return as_fail(err, AS_ERR_NOMEM, "%s: out of memory for %d tensor entries", name, n);
    }
    as_status rc = AS_OK;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        safetensors_tensor *t = &st->tensors[st->count];
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) ||
            cJSON_GetArraySize(off) != 2) {
            rc = as_fail(err, AS_ERR_FORMAT, "%s: tensor \"%s\" lacks dtype, shape or "
                         "data_offsets [begin, end]: corrupt header; %s", name, e->string, fix);
            break;
        }
        t->dtype = SAFETENSORS_DTYPE_COUNT;
        for (int d = 0; d < SAFETENSORS_DTYPE_COUNT; d++)
            if (strcmp(dt->valuestring, st_dtypes[d].name) == 0) t->dtype = (safetensors_dtype)d;
        if (t->dtype == SAFETENSORS_DTYPE_COUNT) {
            rc = as_fail(err, AS_ERR_UNSUPPORTED, "%s: tensor \"%s\" has unknown dtype \"%.16s\" "
                         "(known: F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL): convert the "
                         "checkpoint to F32, F16 or BF16", name, e->string, dt->valuestring);
            break;
        }
        t->ndim = cJSON_GetArraySize(sh);
        if (t->ndim > SAFETENSORS_MAX_DIMS) {
            rc = as_fail(err, AS_ERR_FORMAT, "%s: tensor \"%s\" has %d dimensions, over the limit "
                         "of %d", name, e->string, t->ndim, SAFETENSORS_MAX_DIMS);
            break;
        }
        size_t numel = 1, begin = 0, end = 0, bytes = 0;
        int ok = 1;
        for (int d = 0; d < t->ndim && ok; d++) {
            size_t v;
            ok = json_size(cJSON_GetArrayItem(sh, d), &v) && v <= INT64_MAX &&
                 as_mul_size(numel, v, &numel);
            if (ok) t->shape[d] = (int64_t)v;
        }
        if (!ok) {
            rc = as_fail(err, AS_ERR_FORMAT, "%s: tensor \"%s\" has a shape entry that is not a "
                         "non-negative integer, or whose product overflows: corrupt header; %s",
                         name, e->string, fix);
            break;
        }
        if (!json_size(cJSON_GetArrayItem(off, 0), &begin) ||
            !json_size(cJSON_GetArrayItem(off, 1), &end) || begin > end || end > data_len) {
            rc = as_fail(err, AS_ERR_FORMAT, "%s: tensor \"%s\" has data_offsets outside the "
                         "%zu-byte data section: the file is truncated or corrupt; %s", name,
                         e->string, data_len, fix);
            break;
        }
        if (!as_mul_size(numel, st_dtypes[t->dtype].size, &bytes) || bytes != end - begin) {
            rc = as_fail(err, AS_ERR_FORMAT, "%s: tensor \"%s\" of dtype %s and %zu elements "
                         "needs %zu bytes but data_offsets give %zu: corrupt header; %s", name,
                         e->string, st_dtypes[t->dtype].name, numel, bytes, end - begin, fix);
            break;
        }
        t->name = strdup(e->string);
        if (!t->name) {
            rc = as_fail(err, AS_ERR_NOMEM, "%s: out of memory", name);
            break;
        }
        t->numel = numel;
        t->offset = begin;
        t->nbytes = bytes;
        t->data = buf + data_start + begin;
        st->count++;
    }
    cJSON_Delete(root);
    if (rc == AS_OK && st->count > 1) {
        /* Overlapping byte ranges mean a corrupt (or malicious) header. */
        safetensors_tensor **order = malloc((size_t)st->count * sizeof *order);
        if (!order) rc = as_fail(err, AS_ERR_NOMEM, "%s: out of memory", name);
        for (int i = 0; order && i < st->count; i++) order[i] = &st->tensors[i];
        if (order) qsort(order, (size_t)st->count, sizeof *order, cmp_offset);
        for (int i = 1; order && i < st->count; i++)
            if (order[i]->offset < order[i - 1]->offset + order[i - 1]->nbytes) {
                rc = as_fail(err, AS_ERR_FORMAT, "%s: tensors \"%s\" and \"%s\" overlap in the "
                             "data section: corrupt header; %s", name, order[i - 1]->name,
                             order[i]->name, fix);
                break;
            }
        free(order);
    }
    if (rc != AS_OK) free_tensors(st);
    return rc;
}

as_status safetensors_parse(safetensors *st, const void *buf, size_t len, const char *name,
                            as_error *err) {
    memset(st, 0, sizeof *st);
    snprintf(st->path, sizeof st->path, "%s", name);
    st->map = (void *)(uintptr_t)buf; /* never written through; munmap wants void * */
    st->map_size = len;
    return parse_header(st, buf, len, st->path, err);
}

as_status safetensors_open(safetensors *st, const char *path, as_error *err) {
    memset(st, 0, sizeof *st);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return as_fail(err, AS_ERR_IO, "%s: cannot open (%s): check the path", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return as_fail(err, AS_ERR_IO, "%s: not a regular file: give the .safetensors file or "
                       "the folder that holds it", path);
    }
    size_t len = (size_t)sb.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (len && map == MAP_FAILED)
        return as_fail(err, AS_ERR_IO, "%s: cannot map (%s)", path, strerror(errno));
    as_status rc = safetensors_parse(st, map, len, path, err);
    if (rc != AS_OK) {
        if (map) munmap(map, len);
        memset(st, 0, sizeof *st);
        return rc;
    }
    st->owns_map = 1;
    st->file = sb;
    return AS_OK;
}

void safetensors_close(safetensors *st) {
    free_tensors(st);
    if (st->owns_map && st->map) munmap(st->map, st->map_size);
    memset(st, 0, sizeof *st);
}

const safetensors_tensor *safetensors_find(const safetensors *st, const char *name) {
    for (int i = 0; i < st->count; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

as_status safetensors_read_f32(const safetensors *st, const safetensors_tensor *t, float *dst,
                               as_error *err) {
    const unsigned char *src = t->data;
    switch (t->dtype) {
    case SAFETENSORS_F32:
        memcpy(dst, src, t->numel * 4); /* little-endian hosts only (checked at build) */
        return AS_OK;
    case SAFETENSORS_F16:
    case SAFETENSORS_BF16:
        for (size_t i = 0; i < t->numel; i++) {
            uint16_t h = (uint16_t)(src[2 * i] | (src[2 * i + 1] << 8));
            dst[i] = t->dtype == SAFETENSORS_F16 ? kernels_f16_to_f32(h) : kernels_bf16_to_f32(h);
        }
        return AS_OK;
    default:
        return as_fail(err, AS_ERR_UNSUPPORTED, "%s: tensor \"%s\" is %s; attnscope reads F32, "
                       "F16 and BF16 weights: convert the checkpoint", st->path, t->name,
                       safetensors_dtype_name(t->dtype));
    }
}

static uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* keep NaN */
    x += 0x7fffu + ((x >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(x >> 16);
}

as_status safetensors_write(const char *path, const safetensors_entry *entries, int n,
                            safetensors_dtype dtype, as_error *err) {
    if (dtype != SAFETENSORS_F32 && dtype != SAFETENSORS_F16 && dtype != SAFETENSORS_BF16)
        return as_fail(err, AS_ERR_UNSUPPORTED, "%s: can only write F32, F16 or BF16", path);
    const size_t es = st_dtypes[dtype].size;
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < entries[i].ndim; d++) numel *= (size_t)entries[i].shape[d];
        cJSON *t = cJSON_AddObjectToObject(root, entries[i].name);
        cJSON_AddStringToObject(t, "dtype", st_dtypes[dtype].name);
        cJSON *sh = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < entries[i].ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)entries[i].shape[d]));
        cJSON *o = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        off += numel * es;
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) return as_fail(err, AS_ERR_NOMEM, "%s: out of memory for the header", path);
    /* pad the header with spaces to 8 bytes so that F32 data is aligned when mapped */
    size_t hlen = strlen(json), pad = (8 - hlen % 8) % 8;
    atomic_file af;
    as_status rc = atomic_file_begin(&af, path, err);
    if (rc != AS_OK) {
        free(json);
        return rc;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(((uint64_t)(hlen + pad)) >> (8 * i));
    fwrite(len8, 1, 8, af.fp);
    fwrite(json, 1, hlen, af.fp);
    for (size_t i = 0; i < pad; i++) fputc(' ', af.fp);
    free(json);
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < entries[i].ndim; d++) numel *= (size_t)entries[i].shape[d];
        const float *src = entries[i].data;
        if (dtype == SAFETENSORS_F32) {
            fwrite(src, 4, numel, af.fp);
            continue;
        }
        for (size_t k = 0; k < numel; k++) {
            uint16_t h = dtype == SAFETENSORS_F16 ? kernels_f32_to_f16(src[k]) : f32_to_bf16(src[k]);
            unsigned char b2[2] = {(unsigned char)(h & 0xff), (unsigned char)(h >> 8)};
            fwrite(b2, 1, 2, af.fp);
        }
    }
    return atomic_file_commit(&af, err);
}
