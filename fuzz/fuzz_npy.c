/* fuzz_npy.c: libFuzzer entry point for the .npy header parser (preprocessed image tensors). */
#include <stdint.h>
#include <stdlib.h>

#include "../io/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int shape[4];
    size_t off;
    as_error err;
    if (dataset_parse_npy(data, size, "fuzz.npy", shape, &off, &err) == AS_OK) {
        /* what the loader then relies on: the data the header promises lies inside the buffer */
        size_t n = (size_t)shape[0] * shape[1] * shape[2] * shape[3];
        if (off > size || n > (size - off) / 4) abort();
    }
    return 0;
}
