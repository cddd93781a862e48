/* image.c: decoding distrusts headers (sizes bounded and overflow-checked, libjpeg errors
 * caught with longjmp); resampling reproduces PIL's Resample.c so preprocessing matches
 * torchvision on PIL images. */
#define _POSIX_C_SOURCE 200809L
#include "image.h"

#include "../core/resample.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h> /* before jpeglib.h, which uses FILE */
#include <jpeglib.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int image_is_supported_name(const char *path) {
    const char *dot = strrchr(path, '.');
    if (!dot) return 0;
    return strcasecmp(dot, ".png") == 0 || strcasecmp(dot, ".jpg") == 0 ||
           strcasecmp(dot, ".jpeg") == 0;
}

void image_free(image *im) {
    free(im->rgb);
    memset(im, 0, sizeof *im);
}

static as_status alloc_rgb(image *im, long w, long h, long max_pixels, const char *name, as_error *err) {
    size_t n;
    if (w <= 0 || h <= 0 || w > IMAGE_MAX_SIDE || h > IMAGE_MAX_SIDE ||
        !as_mul_size((size_t)w, (size_t)h, &n) || !as_mul_size(n, 3, &n))
        return as_fail(err, AS_ERR_FORMAT, "%s: image size %ldx%ld is out of range (1..%d): "
                       "corrupt header", name, w, h, IMAGE_MAX_SIDE);
    if (w * h > max_pixels)
        return as_fail(err, AS_ERR_FORMAT, "%s: %ldx%ld = %ld pixels is above the decompression-bomb "
                       "limit of %ld pixels: resize the image, or raise the limit with "
                       "--max-image-pixels if you trust it", name, w, h, w * h, max_pixels);
    im->rgb = malloc(n);
    if (!im->rgb) return as_fail(err, AS_ERR_NOMEM, "%s: out of memory for %ldx%ld", name, w, h);
    im->w = (int)w;
    im->h = (int)h;
    return AS_OK;
}

static as_status decode_png(image *im, const unsigned char *buf, size_t len, const char *name,
                            long max_pixels, as_error *err) {
    png_image p;
    memset(&p, 0, sizeof p);
    p.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&p, buf, len))
        return as_fail(err, AS_ERR_FORMAT, "%s: not a readable PNG (%s): re-export the image",
                       name, p.message);
    /* PIL's convert("RGB") drops alpha without compositing: read RGBA and drop it the same */
    int alpha = (p.format & PNG_FORMAT_FLAG_ALPHA) != 0;
    p.format = alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;
    as_status rc = alloc_rgb(im, (long)p.width, (long)p.height, max_pixels, name, err);
    if (rc != AS_OK) {
        png_image_free(&p);
        return rc;
    }
    uint8_t *dst = im->rgb;
    if (alpha && !(dst = malloc((size_t)p.width * p.height * 4))) {
        png_image_free(&p);
        image_free(im);
        return as_fail(err, AS_ERR_NOMEM, "%s: out of memory", name);
    }
    if (!png_image_finish_read(&p, NULL, dst, 0, NULL)) {
        if (alpha) free(dst);
        image_free(im);
        return as_fail(err, AS_ERR_FORMAT, "%s: PNG data is corrupt or truncated (%s): "
                       "re-export the image", name, p.message);
    }
    if (alpha) {
        size_t n = (size_t)p.width * p.height;
        for (size_t i = 0; i < n; i++) memcpy(im->rgb + 3 * i, dst + 4 * i, 3);
        free(dst);
    }
    return AS_OK;
}

typedef struct {
    struct jpeg_error_mgr mgr;
    jmp_buf jmp;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_on_error(j_common_ptr cinfo) {
    jpeg_err *e = (jpeg_err *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jmp, 1);
}

/* libjpeg warns on recoverable corruption (a truncated file is padded with grey); PIL refuses
 * truncated JPEGs by default, and so do we: a silent grey half would poison the statistics. */
static void jpeg_on_warning(j_common_ptr cinfo, int level) {
    if (level < 0) jpeg_on_error(cinfo);
}

static as_status decode_jpeg(image *im, const unsigned char *buf, size_t len, const char *name,
                             long max_pixels, as_error *err) {
    struct jpeg_decompress_struct cinfo;
    jpeg_err je;
    volatile int created = 0;
    memset(&cinfo, 0, sizeof cinfo);
    cinfo.err = jpeg_std_error(&je.mgr);
    je.mgr.error_exit = jpeg_on_error;
    je.mgr.emit_message = jpeg_on_warning;
    if (setjmp(je.jmp)) {
        if (created) jpeg_destroy_decompress(&cinfo);
        image_free(im);
        return as_fail(err, AS_ERR_FORMAT, "%s: JPEG is corrupt or truncated (%s): re-export "
                       "or remove the image", name, je.msg);
    }
    jpeg_create_decompress(&cinfo);
    created = 1;
    jpeg_mem_src(&cinfo, buf, (unsigned long)len);
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        jpeg_destroy_decompress(&cinfo);
        return as_fail(err, AS_ERR_UNSUPPORTED, "%s: CMYK JPEGs are not supported: convert it to "
                       "RGB", name);
    }
    cinfo.out_color_space = JCS_RGB;
    /* PIL decodes with libjpeg's default (islow DCT, fancy upsampling): keep them */
    jpeg_start_decompress(&cinfo);
    as_status rc = alloc_rgb(im, (long)cinfo.output_width, (long)cinfo.output_height, max_pixels, name, err);
    if (rc != AS_OK) {
        jpeg_destroy_decompress(&cinfo);
        return rc;
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = im->rgb + (size_t)cinfo.output_scanline * im->w * 3;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    return AS_OK;
}

as_status image_decode(image *im, const unsigned char *buf, size_t len, const char *name,
                       as_error *err) {
    return image_decode_max(im, buf, len, name, IMAGE_MAX_PIXELS, err);
}

as_status image_decode_max(image *im, const unsigned char *buf, size_t len, const char *name,
                           long max_pixels, as_error *err) {
    memset(im, 0, sizeof *im);
    static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len >= 8 && memcmp(buf, png_sig, 8) == 0) return decode_png(im, buf, len, name, max_pixels, err);
    if (len >= 3 && buf[0] == 0xff && buf[1] == 0xd8 && buf[2] == 0xff)
        return decode_jpeg(im, buf, len, name, max_pixels, err);
    return as_fail(err, AS_ERR_FORMAT, "%s: neither PNG nor JPEG (%zu bytes): attnscope reads "
                   "PNG and JPEG images, or preprocessed .npy/.safetensors tensors", name, len);
}

as_status image_load(image *im, const char *path, as_error *err) {
    return image_load_max(im, path, IMAGE_MAX_PIXELS, err);
}

as_status image_load_max(image *im, const char *path, long max_pixels, as_error *err) {
    memset(im, 0, sizeof *im);
    FILE *f = fopen(path, "rb");
    if (!f) return as_fail(err, AS_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
    unsigned char *buf = NULL;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
    if (len < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return as_fail(err, AS_ERR_IO, "%s: cannot read (not a regular file?)", path);
    }
    buf = malloc(len > 0 ? (size_t)len : 1);
    if (!buf) {
        fclose(f);
        return as_fail(err, AS_ERR_NOMEM, "%s: out of memory for %ld bytes", path, len);
    }
    size_t got = fread(buf, 1, (size_t)len, f);
    fclose(f);
    if (got != (size_t)len) {
        free(buf);
        return as_fail(err, AS_ERR_IO, "%s: short read (%zu of %ld bytes)", path, got, len);
    }
    as_status rc = image_decode_max(im, buf, (size_t)len, path, max_pixels, err);
    free(buf);
    return rc;
}

/* ---- PIL-exact resampling ------------------------------------------------------------------- */

#define PIL_PRECISION_BITS (32 - 8 - 2)

/* PIL's normalize_coeffs_8bpc: the shared weights in fixed point, rounded half away from 0. */
static int precompute(int in_size, int out_size, vit_interp interp, int **bounds, int **kk_out) {
    double *w;
    int ksize = resample_weights(in_size, out_size, interp, bounds, &w);
    if (!ksize) return 0;
    int *kk = malloc((size_t)out_size * ksize * sizeof *kk);
    if (!kk) {
        free(*bounds);
        free(w);
        return 0;
    }
    for (size_t i = 0; i < (size_t)out_size * ksize; i++)
        kk[i] = (int)(w[i] < 0 ? trunc(-0.5 + w[i] * (1 << PIL_PRECISION_BITS))
                               : trunc(0.5 + w[i] * (1 << PIL_PRECISION_BITS)));
    free(w);
    *kk_out = kk;
    return ksize;
}

static uint8_t clip8(int v) {
    v >>= PIL_PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One pass along x (horizontal) or y (vertical) over an (h, w, 3) image. */
static int resample_pass(uint8_t *out, const uint8_t *in, int w, int h, int out_size,
                         int horizontal, vit_interp interp) {
    int *bounds, *kk;
    int ksize = precompute(horizontal ? w : h, out_size, interp, &bounds, &kk);
    if (!ksize) return 0;
    const int ow = horizontal ? out_size : w, oh = horizontal ? h : out_size;
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++) {
            int o = horizontal ? x : y, xmin = bounds[2 * o], xmax = bounds[2 * o + 1];
            const int *k = kk + o * ksize;
            for (int c = 0; c < 3; c++) {
                int ss = 1 << (PIL_PRECISION_BITS - 1);
                for (int i = 0; i < xmax; i++) {
                    const uint8_t *px = horizontal ? in + ((size_t)y * w + xmin + i) * 3
                                                   : in + ((size_t)(xmin + i) * w + x) * 3;
                    ss += px[c] * k[i];
                }
                out[((size_t)y * ow + x) * 3 + c] = clip8(ss);
            }
        }
    free(bounds);
    free(kk);
    return 1;
}

as_status image_resize(uint8_t *out, int ow, int oh, const image *in, vit_interp interp) {
    /* PIL: horizontal pass first (when the width changes), then vertical */
    uint8_t *tmp = NULL;
    const uint8_t *src = in->rgb;
    int w = in->w;
    if (ow != in->w) {
        tmp = malloc((size_t)ow * in->h * 3);
        if (!tmp || !resample_pass(tmp, in->rgb, in->w, in->h, ow, 1, interp)) {
            free(tmp);
            return AS_ERR_NOMEM;
        }
        src = tmp;
        w = ow;
    }
    int ok = 1;
    if (oh != in->h) ok = resample_pass(out, src, w, in->h, oh, 0, interp);
    else memcpy(out, src, (size_t)ow * oh * 3);
    free(tmp);
    return ok ? AS_OK : AS_ERR_NOMEM;
}

as_status image_preprocess(float *x, uint8_t *rgb, const image *im, const vit_config *cfg,
                           as_error *err) {
    const int S = cfg->img_size;
    /* timm: scale_size = floor(img_size / crop_pct); torchvision Resize(int) sets the shorter
     * side to it and the longer to int(size * long / short) */
    int scale = (int)floor((double)S / cfg->crop_pct);
    int w, h;
    if (im->w <= im->h) {
        w = scale;
        h = (int)((double)scale * im->h / im->w);
    } else {
        h = scale;
        w = (int)((double)scale * im->w / im->h);
    }
    if (w < S || h < S)
        return as_fail(err, AS_ERR_ARG, "crop_pct %g gives a resize smaller than the crop",
                       (double)cfg->crop_pct);
    uint8_t *res = malloc((size_t)w * h * 3);
    if (!res) return as_fail(err, AS_ERR_NOMEM, "out of memory resizing to %dx%d", w, h);
    if (image_resize(res, w, h, im, cfg->interpolation) != AS_OK) {
        free(res);
        return as_fail(err, AS_ERR_NOMEM, "out of memory resizing to %dx%d", w, h);
    }
    /* torchvision CenterCrop: int(round((h - S) / 2)), Python's round half to even = rint */
    int top = (int)rint((h - S) / 2.0), left = (int)rint((w - S) / 2.0);
    for (int c = 0; c < 3; c++) {
        const float m = cfg->mean[c], s = cfg->std[c];
        for (int yy = 0; yy < S; yy++)
            for (int xx = 0; xx < S; xx++) {
                uint8_t v = res[((size_t)(yy + top) * w + xx + left) * 3 + c];
                x[((size_t)c * S + yy) * S + xx] = ((float)v / 255.0f - m) / s; /* as torchvision */
                if (rgb) rgb[((size_t)yy * S + xx) * 3 + c] = v;
            }
    }
    free(res);
    return AS_OK;
}

void image_denormalize(uint8_t *rgb, const float *x, const vit_config *cfg) {
    const int S = cfg->img_size;
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < S * S; i++) {
            float v = (x[(size_t)c * S * S + i] * cfg->std[c] + cfg->mean[c]) * 255.0f;
            v = v < 0 ? 0 : v > 255 ? 255 : v;
            rgb[(size_t)i * 3 + c] = (uint8_t)lrintf(v);
        }
}
