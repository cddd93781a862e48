/* fuzz_image.c: libFuzzer entry point for the PNG and JPEG decoders (fuzz_png and fuzz_jpeg are
 * this file with different seed corpora): decode, then run the timm eval transform. */
#include <stdint.h>
#include <stdlib.h>

#include "../io/image.h"
#include "../io/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    image im;
    as_error err;
    /* a smaller pixel limit than the default keeps each input fast; the check is the same */
    if (image_decode_max(&im, data, size, "fuzz-image", 1L << 22, &err) != AS_OK) return 0;
    vit_config c;
    if (model_config_from_arch(&c, "deit_tiny_patch16_224", &err) == AS_OK) {
        float *x = malloc(3 * 224 * 224 * sizeof *x);
        uint8_t *rgb = malloc(224 * 224 * 3);
        if (x && rgb) image_preprocess(x, rgb, &im, &c, &err);
        free(x);
        free(rgb);
    }
    image_free(&im);
    return 0;
}
