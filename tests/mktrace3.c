/* mktrace3.c: writes the staged trace of tests/staged.h for the shell and slow tests.
 *     mktrace3 OUT.h5 [pad_first|roll_first] [LAYERS] [HEADS] [WINDOWS] [f16|f32] [IMAGES]
 * (defaults: pad_first all all all f32 3). Exit 0, or 1 with the writer's one-line error. */
#include "staged.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: mktrace3 OUT.h5 [pad_first|roll_first] [LAYERS] [HEADS] [WINDOWS] [f16|f32] [IMAGES]\n");
        return 2;
    }
    vit_config c;
    staged_config(&c, argc > 2 && strcmp(argv[2], "roll_first") == 0 ? VIT_PAD_ROLL_FIRST : VIT_PAD_FIRST);
    as_error err = {0};
    if (staged_write(argv[1], &c, argc > 3 ? argv[3] : "all", argc > 4 ? argv[4] : "all",
                     argc > 5 ? argv[5] : "all", argc > 6 ? argv[6] : "f32",
                     argc > 7 ? atol(argv[7]) : 3, &err) != AS_OK) {
        fprintf(stderr, "mktrace3: %s\n", err.msg);
        return 1;
    }
    return 0;
}
