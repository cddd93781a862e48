/* synth.c: deterministic procedural images (shapes on textured backgrounds) so that the demo,
 * tests and benchmarks need no download. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/rng.h"
#include "../io/atomic.h"
#include "cli.h"

/* kind % 4: 0 disc, 1 square, 2 triangle, 3 ring; position, size and colours from the seed. */
void synth_fill_image(unsigned char *rgb, int w, int h, int kind, unsigned long long seed) {
    rng_state r = {seed * 0x9e3779b97f4a7c15ull + (unsigned long long)kind};
    float bg[3], fg[3], freq = 0.02f + 0.08f * rng_uniform(&r), ang = 6.2832f * rng_uniform(&r);
    for (int c = 0; c < 3; c++) {
        bg[c] = 40 + 100 * rng_uniform(&r);
        fg[c] = 120 + 135 * rng_uniform(&r);
    }
    const float cx = w * (0.3f + 0.4f * rng_uniform(&r)), cy = h * (0.3f + 0.4f * rng_uniform(&r));
    const float rad = (w < h ? w : h) * (0.12f + 0.15f * rng_uniform(&r));
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            float dx = x - cx, dy = y - cy, t = sinf(freq * (x * cosf(ang) + y * sinf(ang)));
            int in;
            switch (kind % 4) {
            case 0: in = dx * dx + dy * dy < rad * rad; break;
            case 1: in = fabsf(dx) < rad && fabsf(dy) < rad; break;
            case 2: in = dy < rad && dy > -rad && fabsf(dx) < (dy + rad) * 0.6f; break;
            default: {
                float d = sqrtf(dx * dx + dy * dy);
                in = d < rad && d > 0.6f * rad;
            }
            }
            for (int c = 0; c < 3; c++) {
                float v = in ? fg[c] : bg[c] + 25.0f * t;
                rgb[((size_t)y * w + x) * 3 + c] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        }
}

as_status synth_save_png(const char *path, const unsigned char *rgb, int w, int h, as_error *err) {
    atomic_file af;
    as_status rc = atomic_file_begin(&af, path, err);
    if (rc != AS_OK) return rc;
    png_image p;
    memset(&p, 0, sizeof p);
    p.version = PNG_IMAGE_VERSION;
    p.width = (png_uint_32)w;
    p.height = (png_uint_32)h;
    p.format = PNG_FORMAT_RGB;
    if (!png_image_write_to_stdio(&p, af.fp, 0, rgb, 0, NULL)) {
        atomic_file_abort(&af);
        return as_fail(err, AS_ERR_IO, "%s: PNG write failed (%s)", path, p.message);
    }
    return atomic_file_commit(&af, err);
}

as_status synth_write_images(const char *dir, int count, int size, unsigned long long seed,
                             as_error *err) {
    static const char *const names[4] = {"disc", "square", "triangle", "ring"};
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return as_fail(err, AS_ERR_IO, "%s: cannot create folder (%s)", dir, strerror(errno));
    unsigned char *rgb = malloc((size_t)size * size * 3);
    if (!rgb) return as_fail(err, AS_ERR_NOMEM, "out of memory");
    as_status rc = AS_OK;
    for (int i = 0; i < count && rc == AS_OK; i++) {
        char sub[1100], path[1200];
        snprintf(sub, sizeof sub, "%s/%s", dir, names[i % 4]);
        if (mkdir(sub, 0777) != 0 && errno != EEXIST) {
            rc = as_fail(err, AS_ERR_IO, "%s: cannot create folder (%s)", sub, strerror(errno));
            break;
        }
        snprintf(path, sizeof path, "%s/%03d.png", sub, i);
        synth_fill_image(rgb, size, size, i % 4, seed + (unsigned long long)i);
        rc = synth_save_png(path, rgb, size, size, err);
    }
    free(rgb);
    return rc;
}
