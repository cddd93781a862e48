/* fuzz_traindata.c: libFuzzer entry point for the training-data readers. The first byte picks
 * the format: even, a CIFAR-10 .bin file (bit 1: CIFAR-100's train.bin); odd, an MNIST folder
 * whose image and label files split the rest at the position the next two bytes give. The
 * readers take paths, so the input is written to a private temporary folder first. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../io/model.h"
#include "../io/traindata.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void put(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/attnscope-fuzz-traindata-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(dir)) abort();
    }
    if (size < 3) return 0;
    char spec[512], a[512], b[512];
    if (!(data[0] & 1)) {
        snprintf(spec, sizeof spec, "%s/%s", dir, data[0] & 2 ? "train.bin" : "data.bin");
        put(spec, data + 1, size - 1);
    } else {
        size_t cut = ((size_t)data[1] << 8 | data[2]) % (size - 2);
        snprintf(spec, sizeof spec, "%s", dir);
        snprintf(a, sizeof a, "%s/train-images-idx3-ubyte", dir);
        snprintf(b, sizeof b, "%s/train-labels-idx1-ubyte", dir);
        put(a, data + 3, cut);
        put(b, data + 3 + cut, size - 3 - cut);
    }
    vit_config c;
    as_error err;
    memset(&c, 0, sizeof c);
    if (model_config_apply_json(&c, "{\"architecture\": \"custom\", \"img_size\": 32, \"patch_size\": 8, "
                                    "\"embed_dim\": 16, \"depth\": 1, \"num_heads\": 2, \"num_classes\": 10}",
                                "fuzz", &err) != AS_OK)
        abort();
    traindata d;
    if (traindata_open(&d, spec, &c, 0.1f, &err) == AS_OK) traindata_free(&d);
    unlink(spec);
    snprintf(a, sizeof a, "%s/train-images-idx3-ubyte", dir);
    snprintf(b, sizeof b, "%s/train-labels-idx1-ubyte", dir);
    unlink(a);
    unlink(b);
    return 0;
}
