/* image.h: PNG/JPEG decoding (libpng, libjpeg-turbo), PIL-exact resampling and the timm eval
 * transform (resize shorter side to size/crop_pct, centre crop, normalise). */
#ifndef AS_IMAGE_H
#define AS_IMAGE_H

#include <stdint.h>

#include "../core/config.h"
#include "../core/status.h"

/* Usage:
 *     image im = {0};
 *     if (image_load(&im, "cat.jpg", &err) != AS_OK) ...
 *     uint8_t rgb[224 * 224 * 3]; float x[3 * 224 * 224];
 *     image_preprocess(x, rgb, &im, &cfg, &err);   // x: (3, S, S) normalised; rgb: (S, S, 3)
 *     image_free(&im);
 */
typedef struct {
    int w, h;       /* pixels */
    uint8_t *rgb;   /* (h, w, 3) */
} image;

#define IMAGE_MAX_SIDE 32768 /* refuse anything larger: a corrupt header, or an attack */
/* The decompression-bomb limit: PIL (whose decoding attnscope matches) raises
 * DecompressionBombError above 2 x Image.MAX_IMAGE_PIXELS = 2 x 89,478,485 pixels; attnscope
 * refuses the same images, before allocating anything for them. */
#define IMAGE_MAX_PIXELS 178956970L

as_status image_load(image *im, const char *path, as_error *err);
/* Decodes from memory (the fuzz entry point). name is for messages. */
as_status image_decode(image *im, const unsigned char *buf, size_t len, const char *name,
                       as_error *err);
/* The same with another pixel limit than IMAGE_MAX_PIXELS (record --max-image-pixels). */
as_status image_load_max(image *im, const char *path, long max_pixels, as_error *err);
as_status image_decode_max(image *im, const unsigned char *buf, size_t len, const char *name,
                           long max_pixels, as_error *err);
void image_free(image *im);
int image_is_supported_name(const char *path); /* .png .jpg .jpeg (any case) */

/* PIL's Image.resize with BICUBIC (a = -0.5) or BILINEAR filters, including its 8-bit
 * fixed-point arithmetic, so the result matches PIL's byte for byte. out: (oh, ow, 3). */
as_status image_resize(uint8_t *out, int ow, int oh, const image *in, vit_interp interp);

/* timm eval transform for cfg: resize shorter side to floor(img_size / crop_pct), centre crop
 * img_size (torchvision rounding), then x = (rgb / 255 - mean) / std.
 * x: (3, S, S) float; rgb (optional): (S, S, 3) the cropped image. */
as_status image_preprocess(float *x, uint8_t *rgb, const image *im, const vit_config *cfg,
                           as_error *err);

/* The inverse of normalisation, for tensors given already preprocessed: rgb (S, S, 3). */
void image_denormalize(uint8_t *rgb, const float *x, const vit_config *cfg);

#endif
