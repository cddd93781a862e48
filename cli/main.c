/* main.c: attnscope, git-style: attnscope COMMAND [options]. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"record", cmd_record, "run a ViT/DeiT checkpoint over images, recording attention to HDF5"},
    {"info", cmd_info, "architecture, parameters and FLOPs of a model; contents of a trace"},
    {"analyze", cmd_analyze, "metrics over a trace: locality, cross-layer similarity, Q/K, evolution, ..."},
    {"plot", cmd_plot, "paper-style figures (PDF, SVG, PNG) from traces and analysis results"},
    {"view", cmd_view, "interactive viewer: maps over the image, head grid, depth strip, analysis panels; live"},
    {"train", cmd_train, "train a ViT of any mechanism on CIFAR, MNIST, an ImageFolder or built-in shapes"},
    {"experiment", cmd_experiment, "run an experiment file: record, analyze and plot, with an index page"},
    {"bench", cmd_bench, "img/s, ms/img, GFLOP/s and share of the GEMM ceiling, with/without recording"},
    {"demo", cmd_demo, "the end-to-end job with no download: train on built-in shapes, record, analyze, plot"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    cli_wrap(f, 0, 7, "usage: attnscope COMMAND [options]   (attnscope help COMMAND, or COMMAND --help)");
    fputc('\n', f);
    for (size_t i = 0; i < N_COMMANDS; i++) {
        fprintf(f, "  %-10s ", commands[i].name);
        cli_wrap(f, 13, 13, commands[i].help);
    }
    fprintf(f, "\n  --version  print the version\n");
    cli_wrap(f, 0, 0, "Threads: --threads N (default: all cores). OpenBLAS honours OPENBLAS_CORETYPE: "
             "if it is set to an older core than your CPU's, SGEMM runs slower (attnscope bench warns).");
}

/* The command called name, or NULL after a one-line error with the closest name. */
static int find_command(const char *name) {
    const char *names[N_COMMANDS];
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (strcmp(name, commands[i].name) == 0) return (int)i;
        names[i] = commands[i].name;
    }
    const char *best = cli_closest(name, names, (int)N_COMMANDS);
    if (best) cli_fail(2, "unknown command \"%s\"; did you mean %s?", name, best);
    else cli_fail(2, "unknown command \"%s\" (attnscope --help lists the commands)", name);
    return -1;
}

int main(int argc, char **argv) {
    /* A file-size limit (ulimit -f) must fail the write with EFBIG, which every writer reports
     * in one line, rather than kill the process silently half-way through a file. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        (strcmp(argv[1], "help") == 0 && argc == 2)) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("attnscope %s\n", ATTNSCOPE_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "help") == 0) { /* attnscope help CMD = attnscope CMD --help */
        int i = find_command(argv[2]);
        if (i < 0) return 2;
        char help[] = "--help";
        char *args[] = {argv[2], help, NULL};
        cli_set_command(commands[i].name);
        return commands[i].run(2, args);
    }
    int i = find_command(argv[1]);
    if (i < 0) return 2;
    cli_set_command(commands[i].name);
    /* what the linear layers run on (core/gemm.h); docs/performance.md */
    const char *gemm = getenv("ATTNSCOPE_GEMM");
    char msg[256];
    if (gemm && gemm[0] && !vit_gemm_select(gemm, msg, sizeof msg))
        return cli_fail(2, "ATTNSCOPE_GEMM: %s; unset it or give one of them", msg);
    return commands[i].run(argc - 1, argv + 1);
}
