/* sha256.h: SHA-256 (FIPS 180-4) of weights files, so that a trace or checkpoint names the exact
 * bytes it was made from. Portable C, and the x86 SHA extensions when the CPU has them. */
#ifndef AS_SHA256_H
#define AS_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "../core/status.h"

/* Usage:
 *     char hex[SHA256_HEX];
 *     sha256_hex(buf, len, hex);                       // one buffer
 *     sha256_file("model.safetensors", hex, &err);     // a file, read in 1 MiB pieces
 *     sha256_ctx c;  sha256_init(&c);  sha256_update(&c, p, n); ...  sha256_final_hex(&c, hex);
 * Tests check both paths against the FIPS vectors and `sha256sum`. */

#define SHA256_HEX 65 /* 64 hex digits and the NUL */

typedef struct {
    uint32_t h[8];
    uint64_t bytes;       /* message length so far */
    unsigned char buf[64];
    size_t used;          /* bytes waiting in buf */
    int portable;         /* 1: never the SHA extensions (set after sha256_init; for tests) */
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
void sha256_final(sha256_ctx *c, unsigned char out[32]);
void sha256_final_hex(sha256_ctx *c, char out[SHA256_HEX]);
void sha256_hex(const void *data, size_t n, char out[SHA256_HEX]);
as_status sha256_file(const char *path, char out[SHA256_HEX], as_error *err);
/* The hash of the n bytes at data, which are the whole file at absolute path (mapped; mapped: its
 * fstat when it was mapped, or NULL to stat path now): from the cache of earlier hashes ($XDG_CACHE_HOME/attnscope/sha256, else ~/.cache/attnscope/sha256)
 * when its line for the file matches the file's size, mtime, ctime, device and inode now, else
 * computed and, for files of min_bytes or more, remembered there, unless the file changed in the
 * last 2 s (a change within one timestamp tick could keep ctime: git's "racy" case) or path is no
 * longer the file that was mapped. Why: a ViT-B weights file is
 * 346 MB, 0.17 s of hashing in every run that opens it. Returns 1 when the cache answered.
 * Deleting the cache file is always safe. */
struct stat;
int sha256_cached(const char *path, const struct stat *mapped, const void *data, size_t n, size_t min_bytes,
                  char out[SHA256_HEX]);
/* "sha-ni" or "portable": what sha256_init chooses on this CPU. */
const char *sha256_impl_name(void);

#endif
