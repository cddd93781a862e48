/* configtest.h: what the config tests share: apply(c, json) reads a JSON model config into a
 * zeroed c as a file named cfg.json would be read, the message (if any) in err. Header-only. */
#ifndef AS_TESTS_CONFIGTEST_H
#define AS_TESTS_CONFIGTEST_H

#include <string.h>

#include "../io/model.h"

static as_error err;

static inline as_status apply(vit_config *c, const char *json) {
    memset(c, 0, sizeof *c);
    memset(&err, 0, sizeof err);
    return model_config_apply_json(c, json, "cfg.json", &err);
}

#endif
