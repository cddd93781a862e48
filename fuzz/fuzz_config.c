/* fuzz_config.c: libFuzzer entry point for model config JSON (timm config.json or attnscope's
 * own, from strangers): apply it, and on success write it back and read that again. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../io/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *json = malloc(size + 1);
    if (!json) return 0;
    memcpy(json, data, size);
    json[size] = 0;
    vit_config c;
    memset(&c, 0, sizeof c);
    as_error err;
    if (model_config_apply_json(&c, json, "fuzz.json", &err) == AS_OK) {
        char *again = model_config_to_json(&c);
        vit_config d;
        memset(&d, 0, sizeof d);
        if (again) model_config_apply_json(&d, again, "fuzz-again.json", &err);
        free(again);
    }
    free(json);
    return 0;
}
