/* sha256.c: SHA-256 as FIPS 180-4 defines it (section 6.2), in portable C and with the x86 SHA
 * extensions (SHA-NI), chosen at run time. Written from the standard, not from another library. */
#define _POSIX_C_SOURCE 200809L
#include "sha256.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "atomic.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define SHA256_HAVE_NI 1
#endif

/* FIPS 180-4, 4.2.2: the first 32 bits of the fractional parts of the cube roots of the first
 * 64 primes. */
static const uint32_t sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void blocks_portable(uint32_t h[8], const unsigned char *p, size_t nblocks) {
    for (; nblocks--; p += 64) {
        uint32_t w[64];
        for (int t = 0; t < 16; t++)
            w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 | (uint32_t)p[4 * t + 2] << 8 | p[4 * t + 3];
        for (int t = 16; t < 64; t++) {
            const uint32_t s0 = ror(w[t - 15], 7) ^ ror(w[t - 15], 18) ^ (w[t - 15] >> 3);
            const uint32_t s1 = ror(w[t - 2], 17) ^ ror(w[t - 2], 19) ^ (w[t - 2] >> 10);
            w[t] = w[t - 16] + s0 + w[t - 7] + s1;
        }
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
        for (int t = 0; t < 64; t++) {
            const uint32_t t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + sha256_k[t] + w[t];
            const uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
        }
        h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
    }
}

#ifdef SHA256_HAVE_NI
/* The SHA extensions keep the state as two vectors (A,B,E,F) and (C,D,G,H); sha256rnds2 does two
 * rounds, sha256msg1/msg2 the message schedule's sigma0/sigma1 parts four words at a time. */
__attribute__((target("sha,sse4.1,ssse3"))) static void blocks_ni(uint32_t h[8], const unsigned char *p,
                                                                    size_t nblocks) {
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i tmp = _mm_loadu_si128((const __m128i *)(const void *)&h[0]);  /* D C B A */
    __m128i s1 = _mm_loadu_si128((const __m128i *)(const void *)&h[4]);   /* H G F E */
    tmp = _mm_shuffle_epi32(tmp, 0xB1);                                    /* C D A B */
    s1 = _mm_shuffle_epi32(s1, 0x1B);                                      /* E F G H */
    __m128i s0 = _mm_alignr_epi8(tmp, s1, 8);                              /* A B E F */
    s1 = _mm_blend_epi16(s1, tmp, 0xF0);                                   /* C D G H */
    for (; nblocks--; p += 64) {
        const __m128i save0 = s0, save1 = s1;
        __m128i w[4], msg;
#pragma GCC unroll 16
        for (int g = 0; g < 16; g++) {
            if (g < 4) w[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(const void *)(p + 16 * g)), bswap);
            msg = _mm_add_epi32(w[g & 3], _mm_loadu_si128((const __m128i *)(const void *)&sha256_k[4 * g]));
            s1 = _mm_sha256rnds2_epu32(s1, s0, msg);
            if (g >= 3 && g <= 14) {
                const __m128i t = _mm_alignr_epi8(w[g & 3], w[(g + 3) & 3], 4);
                w[(g + 1) & 3] = _mm_sha256msg2_epu32(_mm_add_epi32(w[(g + 1) & 3], t), w[g & 3]);
            }
            s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(msg, 0x0E));
            if (g >= 1 && g <= 12) w[(g + 3) & 3] = _mm_sha256msg1_epu32(w[(g + 3) & 3], w[g & 3]);
        }
        s0 = _mm_add_epi32(s0, save0);
        s1 = _mm_add_epi32(s1, save1);
    }
    tmp = _mm_shuffle_epi32(s0, 0x1B);     /* F E B A */
    s1 = _mm_shuffle_epi32(s1, 0xB1);      /* D C H G */
    s0 = _mm_blend_epi16(tmp, s1, 0xF0);   /* D C B A */
    s1 = _mm_alignr_epi8(s1, tmp, 8);      /* H G F E */
    _mm_storeu_si128((__m128i *)(void *)&h[0], s0);
    _mm_storeu_si128((__m128i *)(void *)&h[4], s1);
}
#endif

static int have_ni(void) {
#ifdef SHA256_HAVE_NI
    /* CPUID itself: clang before 15 knows no "sha" feature string for __builtin_cpu_supports
     * (the fuzz build uses clang). SHA: leaf 7 EBX bit 29; SSE4.1: leaf 1 ECX bit 19. */
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 19))) return 0;
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (b >> 29) & 1u;
#else
    return 0;
#endif
}

const char *sha256_impl_name(void) { return have_ni() ? "sha-ni" : "portable"; }

static void blocks(sha256_ctx *c, const unsigned char *p, size_t nblocks) {
#ifdef SHA256_HAVE_NI
    if (!c->portable) {
        blocks_ni(c->h, p, nblocks);
        return;
    }
#endif
    blocks_portable(c->h, p, nblocks);
}

void sha256_init(sha256_ctx *c) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, h0, sizeof h0);
    c->bytes = 0;
    c->used = 0;
    c->portable = !have_ni();
}

void sha256_update(sha256_ctx *c, const void *data, size_t n) {
    const unsigned char *p = data;
    c->bytes += n;
    if (c->used) {
        size_t take = 64 - c->used < n ? 64 - c->used : n;
        memcpy(c->buf + c->used, p, take);
        c->used += take, p += take, n -= take;
        if (c->used < 64) return;
        blocks(c, c->buf, 1);
        c->used = 0;
    }
    if (n >= 64) {
        blocks(c, p, n / 64);
        p += n / 64 * 64;
        n %= 64;
    }
    memcpy(c->buf, p, n);
    c->used = n;
}

void sha256_final(sha256_ctx *c, unsigned char out[32]) {
    /* 5.1.1: a 1 bit, zeros to 56 mod 64 bytes, the length in bits big-endian */
    const uint64_t bits = c->bytes * 8;
    unsigned char pad[72] = {0x80};
    const size_t padn = (c->used < 56 ? 56 : 120) - c->used;
    for (int i = 0; i < 8; i++) pad[padn + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
    const uint64_t keep = c->bytes;
    sha256_update(c, pad, padn + 8);
    c->bytes = keep;
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++) out[4 * i + j] = (unsigned char)(c->h[i] >> (24 - 8 * j));
}

void sha256_final_hex(sha256_ctx *c, char out[SHA256_HEX]) {
    unsigned char d[32];
    sha256_final(c, d);
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

void sha256_hex(const void *data, size_t n, char out[SHA256_HEX]) {
    sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, data, n);
    sha256_final_hex(&c, out);
}

as_status sha256_file(const char *path, char out[SHA256_HEX], as_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return as_fail(err, AS_ERR_IO, "%s: cannot open to hash (%s)", path, strerror(errno));
    unsigned char *buf = malloc(1u << 20);
    if (!buf) {
        fclose(f);
        return as_fail(err, AS_ERR_NOMEM, "out of memory");
    }
    sha256_ctx c;
    sha256_init(&c);
    size_t n;
    while ((n = fread(buf, 1, 1u << 20, f)) > 0) sha256_update(&c, buf, n);
    const int bad = ferror(f);
    fclose(f);
    free(buf);
    if (bad) return as_fail(err, AS_ERR_IO, "%s: read error while hashing", path);
    sha256_final_hex(&c, out);
    return AS_OK;
}

/* ---- the hashes of big files, remembered ------------------------------------------------------
 * One line per file: "SHA SIZE MTIME CTIME DEV INO PATH", times as seconds.nanoseconds. A line
 * is used only when every field matches the file's stat now: the file has not been written since
 * (a write moves ctime, which no user call can set back), the way git trusts its index. */

#define HASH_CACHE_LINES 64

static int hash_cache_path(char *out, size_t n) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int k = xdg && xdg[0] == '/' ? snprintf(out, n, "%s/attnscope/sha256", xdg)
            : home && home[0] ? snprintf(out, n, "%s/.cache/attnscope/sha256", home) : -1;
    return k > 0 && (size_t)k < n;
}

static void hash_cache_key(char *out, size_t n, const struct stat *sb, const char *path) {
    snprintf(out, n, "%lld %lld.%09ld %lld.%09ld %llu %llu %s", (long long)sb->st_size,
             (long long)sb->st_mtim.tv_sec, (long)sb->st_mtim.tv_nsec, (long long)sb->st_ctim.tv_sec,
             (long)sb->st_ctim.tv_nsec, (unsigned long long)sb->st_dev, (unsigned long long)sb->st_ino, path);
}

static void mkdir_parents(const char *file) {
    char d[1024];
    snprintf(d, sizeof d, "%s", file);
    for (char *p = d + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(d, 0755); /* exists already, or made now; a failure shows at the write */
            *p = '/';
        }
}

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

int sha256_cached(const char *path, const struct stat *mapped, const void *data, size_t n, size_t min_bytes,
                  char out[SHA256_HEX]) {
    struct stat sb, now;
    char cache[1024], key[1400], line[1500];
    /* the key is the mapped file's identity, and path must still name that very file */
    const int usable = n >= min_bytes && !strchr(path, '\n') && path[0] == '/' && stat(path, &now) == 0 &&
                       (!mapped || same_file(mapped, &now)) && (size_t)now.st_size == n &&
                       hash_cache_path(cache, sizeof cache);
    if (usable) {
        sb = mapped ? *mapped : now;
        hash_cache_key(key, sizeof key, &sb, path);
        FILE *f = fopen(cache, "r");
        int hit = 0;
        while (f && !hit && fgets(line, sizeof line, f)) {
            line[strcspn(line, "\n")] = 0;
            hit = strlen(line) > SHA256_HEX && line[SHA256_HEX - 1] == ' ' && strcmp(line + SHA256_HEX, key) == 0;
            for (int i = 0; hit && i < SHA256_HEX - 1; i++) hit = strchr("0123456789abcdef", line[i]) && line[i];
        }
        if (f) fclose(f);
        if (hit) {
            memcpy(out, line, SHA256_HEX - 1);
            out[SHA256_HEX - 1] = 0;
            return 1;
        }
    }
    sha256_hex(data, n, out);
    if (!usable || (long long)time(NULL) - (long long)sb.st_ctim.tv_sec < 2) return 0;
    /* keep the newest lines of other files, then this one; written whole under a temporary
     * name (io/atomic.h), so that a crash or two runs at once leave one whole version */
    char(*keep)[1500] = malloc(HASH_CACHE_LINES * sizeof *keep);
    int nk = 0;
    FILE *f = keep ? fopen(cache, "r") : NULL;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        /* drop older lines of the same path: the path is the key's last field */
        const size_t L = strlen(line), lp = strlen(path);
        if (L <= SHA256_HEX || (L > lp && line[L - lp - 1] == ' ' && strcmp(line + L - lp, path) == 0)) continue;
        if (nk == HASH_CACHE_LINES - 1) memmove(keep, keep + 1, (size_t)--nk * sizeof *keep);
        snprintf(keep[nk++], sizeof *keep, "%s", line);
    }
    if (f) fclose(f);
    mkdir_parents(cache);
    atomic_file af;
    as_error err;
    if (keep && atomic_file_begin(&af, cache, &err) == AS_OK) {
        for (int i = 0; i < nk; i++) fprintf(af.fp, "%s\n", keep[i]);
        fprintf(af.fp, "%s %s\n", out, key);
        atomic_file_commit(&af, &err); /* a cache that cannot be written is only slower */
    }
    free(keep);
    return 0;
}
