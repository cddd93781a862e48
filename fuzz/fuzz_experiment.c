/* fuzz_experiment.c: libFuzzer entry point for experiment files (JSON from strangers): the
 * checks attnscope experiment runs before anything else. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../cli/cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    as_error err;
    experiment_check(text, "fuzz.json", &err);
    free(text);
    return 0;
}
