/* fuzz_safetensors.c: libFuzzer entry point for the safetensors parser (weights from strangers):
 * parse the header, then read every tensor as float32 the way model loading does. */
#include <stdint.h>
#include <stdlib.h>

#include "../io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    safetensors st;
    as_error err;
    if (safetensors_parse(&st, data, size, "fuzz.safetensors", &err) != AS_OK) return 0;
    for (int i = 0; i < st.count; i++) {
        const safetensors_tensor *t = &st.tensors[i];
        if (t->numel > (1u << 20)) continue;
        float *dst = malloc((t->numel ? t->numel : 1) * sizeof *dst);
        if (dst) safetensors_read_f32(&st, t, dst, &err);
        free(dst);
    }
    safetensors_close(&st);
    return 0;
}
