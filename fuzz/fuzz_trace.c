/* fuzz_trace.c: libFuzzer entry point for traces (HDF5 files from strangers): open as a trace,
 * read every recorded head of the first image, its records and the results beside it, as
 * info, analyze and view do. HDF5 reads paths, so the input is written to a temporary file.
 * HDF5's own parser is fuzzed by its project; this finds what our reader assumes of a trace. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../analysis/analysis.h"
#include "../io/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[256];
    if (!path[0]) snprintf(path, sizeof path, "%s/attnscope-fuzz-trace-%ld.h5",
                           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    fwrite(data, 1, size, f);
    fclose(f);
    trace_reader r;
    as_error err;
    if (trace_reader_open(&r, path, &err) == AS_OK) {
        const long T = r.num_tokens, rows = r.q_rows;
        if (r.n_images > 0 && T > 0 && T <= 4096 && rows <= T) {
            for (int li = 0; li < r.n_layers; li++) {
                /* one head's map as the layer's geometry says (format 3: per-window maps) */
                const trace_layer_geom *t = &r.geom[li];
                const size_t n = (size_t)t->n_problems * t->Tq * t->Tk;
                int ids[4096];
                const int nh = trace_layer_heads(&r, r.layers[li], ids);
                float *map = n <= (1u << 24) ? malloc((n ? n : 1) * sizeof *map) : NULL;
                for (int hi = 0; map && hi < nh; hi++)
                    trace_read_head(&r, TRACE_Q_ATTN, 0, r.layers[li], ids[hi], map, &err);
                free(map);
            }
            char p[1024], cls[64];
            int label, pred;
            trace_read_image_info(&r, 0, p, sizeof p, &label, &pred, NULL, &err);
            trace_class_name(&r, label, cls, sizeof cls);
        }
        double fb, db;
        trace_sizes(&r, &fb, &db);
        trace_reader_close(&r);
    }
    char list[4096];
    analysis_list(path, list, sizeof list);
    unlink(path);
    return 0;
}
