/* h5util.h: the small HDF5 helpers the trace and the analysis results share: quiet errors,
 * float16 and string types, scalar/array attributes in and out. Attribute writers replace an
 * existing attribute of the same name and return 0, or -1 on failure. */
#ifndef AS_H5UTIL_H
#define AS_H5UTIL_H

#include <hdf5.h>
#include <stddef.h>

void h5u_quiet(void);                       /* no HDF5 error stacks on stderr */
/* File access for a SWMR reader (close with H5Pclose): no file lock (a reader's lock would stop
 * the writer from stamping its end state), and a bounded metadata retry loop (see h5util.c). */
hid_t h5u_swmr_read_fapl(void);
hid_t h5u_f16_type(void);                   /* IEEE binary16, as numpy's float16 */
hid_t h5u_str_type(size_t n);               /* UTF-8 string of n bytes, 0 = variable length */
int h5u_attr_write(hid_t loc, const char *name, hid_t type, hid_t space, const void *v);
int h5u_attr_str(hid_t loc, const char *name, const char *v);
int h5u_attr_ints(hid_t loc, const char *name, const int *v, int n);   /* n == 1: scalar */
int h5u_attr_int(hid_t loc, const char *name, int v);
int h5u_attr_int64(hid_t loc, const char *name, long long v);
int h5u_attr_floats(hid_t loc, const char *name, const float *v, int n);
int h5u_attr_doubles(hid_t loc, const char *name, const double *v, int n);
int h5u_attr_strs(hid_t loc, const char *name, const char *const *v, int n);
/* Overwrites the value of an existing attribute in place (mtype: the value's memory type; for a
 * variable-length string, v points to the char *). Unlike the writers above it neither deletes
 * nor creates, so it works in SWMR-write mode. 0, or -1 when missing or on failure. */
int h5u_attr_overwrite(hid_t loc, const char *name, hid_t mtype, const void *v);
int h5u_attr_overwrite_str(hid_t loc, const char *name, const char *v);
/* Reads up to n ints; returns the count, or -1 when missing or longer than n. */
int h5u_attr_read_int(hid_t loc, const char *name, int *out, int n);
int h5u_attr_read_doubles(hid_t loc, const char *name, double *out, int n); /* count, or -1 */
int h5u_attr_read_floats(hid_t loc, const char *name, float *out, int n); /* the same, as float */
/* String attribute (variable or fixed length) into out; "" when missing. */
void h5u_attr_read_str(hid_t loc, const char *name, char *out, size_t n);
char *h5u_attr_read_str_alloc(hid_t loc, const char *name); /* up to 64 KiB; free() it */
/* Entry i of a variable-length string array attribute; empty if missing. */
void h5u_attr_read_str_at(hid_t loc, const char *name, int i, char *out, size_t n);
void h5u_iso_now(char *buf, size_t n);      /* "2026-11-21T10:00:00Z" */

#endif
