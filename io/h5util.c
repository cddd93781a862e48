/* h5util.c: see h5util.h. */
#define _POSIX_C_SOURCE 200809L
#include "h5util.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* HDF5 prints its error stack by default (per thread in thread-safe builds); we translate
 * failures into our own messages. H5dont_atexit: after a failed close (full disk) HDF5's own
 * exit handler would crash on the half-closed file; the OS releases everything anyway. */
void h5u_quiet(void) {
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

/* A SWMR reader retries a metadata read whose checksum fails, since the writer may be rewriting
 * it at that moment; HDF5's default is 100 attempts with a growing sleep between them, so one
 * flipped byte in a superblock kept info, view and analyze waiting for minutes. A writer
 * rewrites a piece of metadata in one write call, so a few attempts see it whole. */
#define H5U_SWMR_READ_ATTEMPTS 8

hid_t h5u_swmr_read_fapl(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_file_locking(fapl, 0, 1);
    H5Pset_metadata_read_attempts(fapl, H5U_SWMR_READ_ATTEMPTS);
    return fapl;
}

/* The IEEE half type, as h5py and numpy's float16 read it. */
hid_t h5u_f16_type(void) {
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_precision(t, 16);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    return t;
}

hid_t h5u_str_type(size_t n) {
    hid_t t = H5Tcopy(H5T_C_S1);
    if (n) H5Tset_size(t, n);
    else H5Tset_size(t, H5T_VARIABLE);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    H5Tset_cset(t, H5T_CSET_UTF8);
    return t;
}

int h5u_attr_write(hid_t loc, const char *name, hid_t type, hid_t space, const void *v) {
    if (H5Aexists(loc, name) > 0) H5Adelete(loc, name);
    hid_t a = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) return -1;
    herr_t e = H5Awrite(a, type, v);
    H5Aclose(a);
    return e < 0 ? -1 : 0;
}
int h5u_attr_overwrite(hid_t loc, const char *name, hid_t mtype, const void *v) {
    if (H5Aexists(loc, name) <= 0) return -1;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return -1;
    herr_t e = H5Awrite(a, mtype, v);
    H5Aclose(a);
    return e < 0 ? -1 : 0;
}
int h5u_attr_overwrite_str(hid_t loc, const char *name, const char *v) {
    hid_t t = h5u_str_type(0);
    int rc = h5u_attr_overwrite(loc, name, t, &v);
    H5Tclose(t);
    return rc;
}
/* a 1-D attribute of n values, or a scalar when n == 1 */
static int attr_array(hid_t loc, const char *name, hid_t type, const void *v, int n) {
    hsize_t d = (hsize_t)n;
    hid_t s = n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &d, NULL);
    int rc = h5u_attr_write(loc, name, type, s, v);
    H5Sclose(s);
    return rc;
}
int h5u_attr_str(hid_t loc, const char *name, const char *v) {
    hid_t t = h5u_str_type(0), s = H5Screate(H5S_SCALAR);
    int rc = h5u_attr_write(loc, name, t, s, &v);
    H5Sclose(s);
    H5Tclose(t);
    return rc;
}
int h5u_attr_ints(hid_t loc, const char *name, const int *v, int n) {
    return attr_array(loc, name, H5T_NATIVE_INT, v, n);
}
int h5u_attr_int(hid_t loc, const char *name, int v) { return h5u_attr_ints(loc, name, &v, 1); }
int h5u_attr_int64(hid_t loc, const char *name, long long v) {
    hid_t s = H5Screate(H5S_SCALAR);
    int rc = h5u_attr_write(loc, name, H5T_NATIVE_LLONG, s, &v);
    H5Sclose(s);
    return rc;
}
int h5u_attr_floats(hid_t loc, const char *name, const float *v, int n) {
    return attr_array(loc, name, H5T_NATIVE_FLOAT, v, n);
}
int h5u_attr_doubles(hid_t loc, const char *name, const double *v, int n) {
    return attr_array(loc, name, H5T_NATIVE_DOUBLE, v, n);
}
int h5u_attr_strs(hid_t loc, const char *name, const char *const *v, int n) {
    hsize_t d = (hsize_t)n;
    hid_t t = h5u_str_type(0), s = H5Screate_simple(1, &d, NULL);
    int rc = h5u_attr_write(loc, name, t, s, v);
    H5Sclose(s);
    H5Tclose(t);
    return rc;
}

/* Reads attribute `name` (at most n values) as `type`; returns the count, or -1. */
static int attr_read(hid_t loc, const char *name, hid_t type, void *out, int n) {
    if (H5Aexists(loc, name) <= 0) return -1;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t s = H5Aget_space(a);
    hssize_t np = H5Sget_simple_extent_npoints(s);
    int rc = -1;
    if (np >= 1 && np <= n) rc = H5Aread(a, type, out) < 0 ? -1 : (int)np;
    H5Sclose(s);
    H5Aclose(a);
    return rc;
}

int h5u_attr_read_int(hid_t loc, const char *name, int *out, int n) {
    return attr_read(loc, name, H5T_NATIVE_INT, out, n);
}

int h5u_attr_read_doubles(hid_t loc, const char *name, double *out, int n) {
    return attr_read(loc, name, H5T_NATIVE_DOUBLE, out, n);
}

int h5u_attr_read_floats(hid_t loc, const char *name, float *out, int n) {
    return attr_read(loc, name, H5T_NATIVE_FLOAT, out, n);
}

void h5u_attr_read_str(hid_t loc, const char *name, char *out, size_t n) {
    out[0] = 0;
    if (H5Aexists(loc, name) <= 0) return;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t ft = H5Aget_type(a);
    if (H5Tget_class(ft) == H5T_STRING) {
        if (H5Tis_variable_str(ft) > 0) {
            char *v = NULL;
            hid_t mt = h5u_str_type(0);
            if (H5Aread(a, mt, &v) >= 0 && v) {
                snprintf(out, n, "%s", v);
                H5free_memory(v);
            }
            H5Tclose(mt);
        } else {
            size_t sz = H5Tget_size(ft);
            char *v = calloc(sz + 1, 1);
            if (v && H5Aread(a, ft, v) >= 0) snprintf(out, n, "%s", v);
            free(v);
        }
    }
    H5Tclose(ft);
    H5Aclose(a);
}

void h5u_attr_read_str_at(hid_t loc, const char *name, int i, char *out, size_t n) {
    out[0] = 0;
    if (i < 0 || H5Aexists(loc, name) <= 0) return;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t ft = H5Aget_type(a), s = H5Aget_space(a);
    hssize_t np = H5Sget_simple_extent_npoints(s);
    if (H5Tget_class(ft) == H5T_STRING && H5Tis_variable_str(ft) > 0 && i < np && np <= (1 << 20)) {
        char **v = calloc((size_t)np, sizeof *v);
        hid_t mt = h5u_str_type(0);
        if (v && H5Aread(a, mt, v) >= 0) {
            if (v[i]) snprintf(out, n, "%s", v[i]);
            H5Dvlen_reclaim(mt, s, H5P_DEFAULT, v);
        }
        H5Tclose(mt);
        free(v);
    }
    H5Sclose(s);
    H5Tclose(ft);
    H5Aclose(a);
}

char *h5u_attr_read_str_alloc(hid_t loc, const char *name) {
    size_t cap = 1 << 16;
    char *buf = malloc(cap);
    if (buf) h5u_attr_read_str(loc, name, buf, cap);
    return buf;
}

void h5u_iso_now(char *buf, size_t n) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}
