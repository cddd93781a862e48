/* test_sha256.c: io/sha256 against the FIPS 180-4 example vectors and `sha256sum`, both code paths
 * (SHA extensions and portable C) over every split of random messages; prints the throughput
 * (the cost of hashing a weights file while loading it). */
#define _POSIX_C_SOURCE 200809L
#include <sys/stat.h>
#include <time.h>

#include "../core/rng.h"
#include "../io/sha256.h"
#include "check.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void hex_of(const void *p, size_t n, int portable, char out[SHA256_HEX]) {
    sha256_ctx c;
    sha256_init(&c);
    c.portable |= portable;
    sha256_update(&c, p, n);
    sha256_final_hex(&c, out);
}

int main(void) {
    check_tmp_init("sha256");
    /* FIPS 180-4 examples (NIST's SHA256.pdf) and the empty message */
    static const struct {
        const char *msg;
        const char *want;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
    };
    char h[SHA256_HEX];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        for (int portable = 0; portable < 2; portable++) {
            hex_of(v[i].msg, strlen(v[i].msg), portable, h);
            CHECK(strcmp(h, v[i].want) == 0, "\"%.20s\" (%s): %s, want %s", v[i].msg,
                  portable ? "portable" : sha256_impl_name(), h, v[i].want);
        }
    /* one million 'a' (FIPS 180-4 example), fed in uneven pieces */
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    for (int portable = 0; portable < 2; portable++) {
        sha256_ctx c;
        sha256_init(&c);
        c.portable |= portable;
        for (size_t off = 0, step = 1; off < 1000000; off += step, step = step * 3 % 1001 + 1)
            sha256_update(&c, a + off, off + step > 1000000 ? 1000000 - off : step);
        sha256_final_hex(&c, h);
        CHECK(strcmp(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0,
              "million a (%s): %s", portable ? "portable" : "fast", h);
    }
    /* random messages of every length up to 300 bytes: both paths agree */
    unsigned char *r = malloc(4096);
    rng_state rs = {7};
    for (int i = 0; i < 4096; i++) r[i] = (unsigned char)(rng_next(&rs) >> 24);
    int differ = 0;
    for (size_t n = 0; n <= 300; n++) {
        char h1[SHA256_HEX], h2[SHA256_HEX];
        hex_of(r, n, 0, h1);
        hex_of(r, n, 1, h2);
        differ += strcmp(h1, h2) != 0;
    }
    CHECK(differ == 0, "%d lengths where the two paths differ", differ);
    /* a file, against coreutils' sha256sum */
    const char *path = check_tmp("blob.bin");
    FILE *f = fopen(path, "wb");
    for (int k = 0; k < 700; k++) fwrite(r, 1, 4096 - (size_t)k, f);
    fclose(f);
    as_error err = {0};
    CHECK(sha256_file(path, h, &err) == AS_OK, "%s", err.msg);
    char cmd[700], want[SHA256_HEX] = "";
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    if (p) {
        if (fscanf(p, "%64s", want) != 1) want[0] = 0;
        pclose(p);
    }
    CHECK(strcmp(h, want) == 0, "file: %s, sha256sum %s", h, want);
    CHECK(sha256_file(check_tmp("missing.bin"), h, &err) == AS_ERR_IO && strstr(err.msg, "missing.bin"),
          "a missing file: %s", err.msg);
    /* the cache of big files' hashes: a hit only while the file is unchanged */
    {
        char cdir[512], ab[512], line[1600];
        snprintf(cdir, sizeof cdir, "%s", check_tmp("cache"));
        setenv("XDG_CACHE_HOME", cdir, 1);
        const char *blob = check_tmp("cached.bin"), *cache = check_tmp("cache/attnscope/sha256");
        snprintf(ab, sizeof ab, "%s", blob);
        const size_t n = 100000;
        unsigned char *buf = malloc(n);
        char want1[SHA256_HEX], want2[SHA256_HEX];
        for (int ver = 0; ver < 2; ver++) {
            for (size_t i = 0; i < n; i++) buf[i] = r[i % 4096] ^ (unsigned char)ver;
            f = fopen(ab, "wb"); /* the same size, other bytes: mtime and ctime move */
            fwrite(buf, 1, n, f);
            fclose(f);
            sha256_hex(buf, n, ver ? want2 : want1);
            const char *wv = ver ? want2 : want1;
            /* changed in the last 2 s: computed and not remembered (a second change within one
             * timestamp tick could keep ctime) */
            CHECK(sha256_cached(ab, NULL, buf, n, 0, h) == 0 && sha256_cached(ab, NULL, buf, n, 0, h) == 0 &&
                  strcmp(h, wv) == 0, "version %d just written: %s", ver, h);
            nanosleep(&(struct timespec){2, 100000000}, NULL);
            CHECK(sha256_cached(ab, NULL, buf, n, 0, h) == 0 && strcmp(h, wv) == 0, "version %d computed: %s", ver, h);
            CHECK(sha256_cached(ab, NULL, buf, n, 0, h) == 1 && strcmp(h, wv) == 0, "version %d from the cache: %s", ver, h);
        }
        CHECK(strcmp(want1, want2) != 0, "the two versions differ");
        /* the bytes hashed must be the file that path names now: a mapped file that is not it
         * (moved away, replaced) is neither looked up nor remembered */
        struct stat other;
        CHECK(stat(blob, &other) == 0, "stat");
        other.st_ino ^= 1;
        CHECK(sha256_cached(ab, &other, buf, n, 0, h) == 0 && strcmp(h, want2) == 0, "another file's bytes");
        int lines = 0;
        f = fopen(cache, "r");
        while (f && fgets(line, sizeof line, f)) lines++;
        if (f) fclose(f);
        CHECK(lines == 1, "one line per file in the cache, %d", lines);
        /* below min_bytes, a relative path, a corrupt cache: computed, never a wrong answer */
        remove(cache);
        CHECK(sha256_cached(ab, NULL, buf, n, n + 1, h) == 0 && sha256_cached(ab, NULL, buf, n, n + 1, h) == 0 &&
              strcmp(h, want2) == 0, "below min_bytes: not remembered");
        CHECK(sha256_cached("cached.bin", NULL, buf, n, 0, h) == 0 && strcmp(h, want2) == 0, "relative path");
        f = fopen(cache, "w");
        fprintf(f, "zz%.62s junk\n%s 1 2 3\n", want1, want1);
        fclose(f);
        CHECK(sha256_cached(ab, NULL, buf, n, 0, h) == 0 && strcmp(h, want2) == 0, "corrupt cache lines are not trusted");
        CHECK(sha256_cached(ab, NULL, buf, n, 0, h) == 1 && strcmp(h, want2) == 0, "and the cache is rewritten");
        free(buf);
        unsetenv("XDG_CACHE_HOME");
    }
    /* throughput: what hashing a weights file costs at load (ViT-B/16 is 346 MB in F32) */
    const size_t big = 64u << 20;
    unsigned char *b = malloc(big);
    for (size_t i = 0; i < big; i++) b[i] = (unsigned char)i;
    for (int portable = 0; portable < 2; portable++) {
        double t0 = now();
        sha256_ctx c;
        sha256_init(&c);
        c.portable |= portable;
        sha256_update(&c, b, big);
        sha256_final_hex(&c, h);
        double s = now() - t0;
        printf("sha256 %-8s %.0f MB/s (ViT-B/16's 346 MB: %.2f s)\n",
               portable ? "portable" : sha256_impl_name(), big / s / 1e6, 346e6 / (big / s));
    }
    free(b);
    free(a);
    free(r);
    check_tmp_remove();
    return check_finish("sha256");
}
