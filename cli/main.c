/* main.c: attnscope, git-style: attnscope COMMAND [options]. */
#include <signal.h>
#include <stdio.h>
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
    fprintf(f, "usage: attnscope COMMAND [options]   (attnscope COMMAND --help for each)\n\n");
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n  --version  print the version\n"
               "Threads: --threads N (default: all cores). OpenBLAS honours OPENBLAS_CORETYPE: if it\n"
               "is set to an older core than your CPU's, SGEMM runs slower (attnscope bench warns).\n");
}

int main(int argc, char **argv) {
    /* A file-size limit (ulimit -f) must fail the write with EFBIG, which every writer reports
     * in one line, rather than kill the process silently half-way through a file. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("attnscope %s\n", ATTNSCOPE_VERSION);
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "attnscope: unknown command \"%s\"\n\n", argv[1]);
    usage(stderr);
    return 2;
}
