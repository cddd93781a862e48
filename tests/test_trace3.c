/* test_trace3.c: trace format version 3 (staged models, issue 16): what the writer stores for
 * window layers (per-window maps, geometry attributes, window_token and shift mask, chunks,
 * dimension scales), the --heads/--windows selections and their refusals, the reader's view of
 * it, a corrupt geometry refused, big global maps chunked by query rows, and monolithic models
 * still writing version 2. Values come from tests/staged.h's closed forms. */
#define _POSIX_C_SOURCE 200809L
#include <hdf5.h>
#include <hdf5_hl.h>

#include "../io/h5util.h"
#include "check.h"
#include "staged.h"

#define tmp check_tmp

static int attr_exists(hid_t loc, const char *name) { return H5Aexists(loc, name) > 0; }

/* Dataset name's shape (image axis included) and chunk; returns the rank. */
static int shape_chunk(hid_t f, const char *name, hsize_t *dims, hsize_t *chunk) {
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    if (d < 0) return -1;
    hid_t sp = H5Dget_space(d), pl = H5Dget_create_plist(d);
    int nd = H5Sget_simple_extent_dims(sp, dims, NULL);
    if (chunk) H5Pget_chunk(pl, 5, chunk);
    H5Pclose(pl);
    H5Sclose(sp);
    H5Dclose(d);
    return nd;
}

/* The whole trace of the staged model (f32): every value, geometry and table read back. */
static void test_roundtrip(vit_pad_order pad) {
    vit_config c;
    staged_config(&c, pad);
    const char *out = tmp(pad == VIT_PAD_FIRST ? "staged_pf.h5" : "staged_rf.h5");
    as_error err = {0};
    CHECK(staged_write(out, &c, "all", "all", "all", "f32", 3, &err) == AS_OK, "%s", err.msg);
    trace_reader r;
    if (trace_reader_open(&r, out, &err) != AS_OK) {
        CHECK(0, "open: %s", err.msg);
        return;
    }
    CHECK(r.version == 3 && r.staged && r.heads_all && r.n_layers == 6 && r.n_images == 3 &&
          r.n_windows == 0, "v%d staged %d heads_all %d layers %d images %ld", r.version, r.staged,
          r.heads_all, r.n_layers, r.n_images);
    char what[256];
    trace_describe_staged(&r, what, sizeof what);
    CHECK(strstr(what, "staged trace (swin, 3 stages, window layers; format 3)"), "%s", what);
    const int want_grid[3] = {14, 7, 4}, want_shift[6] = {0, 2, 0, 2, 0, 0};
    for (int l = 0; l < 6; l++) {
        const trace_layer_geom *t = trace_layer(&r, l);
        vit_geom g;
        vit_block_geom(&c, l, &g);
        if (!t) {
            CHECK(0, "layer %d missing", l);
            continue;
        }
        CHECK(t->stage == l / 2 && t->scope == VIT_SCOPE_WINDOW && t->gh == want_grid[l / 2] &&
              t->gw == t->gh && t->M == 4 && t->shift == want_shift[l] && t->T == t->gh * t->gw &&
              t->D == 8 << (l / 2) && t->H == 1 << (l / 2) && t->nwh == g.nwh && t->ph == g.ph &&
              t->n_problems == g.problems && t->Tq == 16 && t->Tk == 16 && t->qk_dim == 8 &&
              t->stride_px == g.stride_px && t->offset_px == g.offset_px,
              "layer %d: stage %d grid %dx%d M %d shift %d T %d D %d H %d windows %d", l, t->stage,
              t->gh, t->gw, t->M, t->shift, t->T, t->D, t->H, t->n_problems);
        int tok[256], want_tok[256], ids[64];
        CHECK(trace_read_window_tokens(&r, l, tok, &err) == AS_OK, "%s", err.msg);
        vit_window_tokens(&c, &g, want_tok);
        CHECK(memcmp(tok, want_tok, (size_t)g.problems * 16 * sizeof *tok) == 0, "layer %d window_token", l);
        const int nh = trace_layer_heads(&r, l, ids);
        CHECK(nh == g.H && ids[nh - 1] == g.H - 1, "layer %d heads %d", l, nh);
        const size_t per_head = (size_t)g.problems * 256;
        float *want[5], *got = malloc(per_head * 4 * sizeof *got);
        for (int qi = 0; qi < 5; qi++) want[qi] = malloc(staged_floats(&c, l, (trace_quantity)qi) * sizeof(float));
        for (long b = 0; b < 3; b++) {
            staged_fill(&c, l, b, want[0], want[1], want[2], want[3], want[4]);
            for (int h = 0; h < g.H; h++)
                for (int qi = 0; qi < 4; qi++) {
                    const size_t n = qi < 2 ? per_head : (size_t)g.T * 8;
                    CHECK(trace_read_head(&r, (trace_quantity)qi, b, l, h, got, &err) == AS_OK, "%s", err.msg);
                    char nm[64];
                    snprintf(nm, sizeof nm, "layer %d %s image %ld head %d", l,
                             trace_quantity_name((trace_quantity)qi), b, h);
                    CHECK(check_close(nm, got, want[qi] + (size_t)h * n, n, 0, 0), "%s", nm);
                }
            CHECK(trace_read_tokens(&r, b, l, got, &err) == AS_OK &&
                  check_close("tokens", got, want[4], (size_t)g.T * g.D, 0, 0), "layer %d tokens %s", l, err.msg);
        }
        /* a head the layer does not have */
        CHECK(trace_read_head(&r, TRACE_Q_ATTN, 0, l, g.H, got, &err) == AS_ERR_ARG, "head %d of layer %d", g.H, l);
        for (int qi = 0; qi < 5; qi++) free(want[qi]);
        free(got);
    }
    /* the file as h5py sees it: root and layer attributes, shapes, chunks, scales */
    hid_t f = (hid_t)r.file_id;
    int v = 0, stage_grid[6] = {0}, of_layer[6] = {0}, dims_[3] = {0};
    char fam[16] = "", scope[16] = "", order[16] = "";
    h5u_attr_read_int(f, "format_version", &v, 1);
    h5u_attr_read_str(f, "model_family", fam, sizeof fam);
    CHECK(v == 3 && strcmp(fam, "swin") == 0, "version %d family %s", v, fam);
    CHECK(!attr_exists(f, "grid") && !attr_exists(f, "num_tokens") && !attr_exists(f, "embed_dim") &&
          !attr_exists(f, "num_heads") && !attr_exists(f, "heads"), "single-grid root attributes in a staged trace");
    CHECK(h5u_attr_read_int(f, "stage_grid", stage_grid, 6) == 6 && stage_grid[0] == 14 &&
          stage_grid[2] == 7 && stage_grid[5] == 4, "stage_grid");
    CHECK(h5u_attr_read_int(f, "stage_of_layer", of_layer, 6) == 6 && of_layer[1] == 0 && of_layer[2] == 1 &&
          of_layer[5] == 2, "stage_of_layer");
    CHECK(h5u_attr_read_int(f, "stage_dim", dims_, 3) == 3 && dims_[2] == 32, "stage_dim");
    hid_t g1 = H5Gopen2(f, "layers/01", H5P_DEFAULT);
    h5u_attr_read_str(g1, "scope", scope, sizeof scope);
    h5u_attr_read_str(g1, "pad_order", order, sizeof order);
    float mv = 0;
    h5u_attr_read_floats(g1, "mask_value", &mv, 1);
    CHECK(strcmp(scope, "window") == 0 && strcmp(order, vit_pad_order_name(pad)) == 0 && mv == -100.0f,
          "layer 1: scope %s pad_order %s mask_value %g", scope, order, mv);
    H5Gclose(g1);
    hsize_t d[5], ch[5];
    CHECK(shape_chunk(f, "layers/00/attn", d, ch) == 5 && d[0] == 3 && d[1] == 1 && d[2] == 16 &&
          d[3] == 16 && d[4] == 16 && ch[0] == 1 && ch[1] == 1 && ch[2] == 16 && ch[3] == 16,
          "layer 0 attn (%llu,%llu,%llu,%llu,%llu) chunk (%llu,%llu,%llu,...)", (unsigned long long)d[0],
          (unsigned long long)d[1], (unsigned long long)d[2], (unsigned long long)d[3],
          (unsigned long long)d[4], (unsigned long long)ch[0], (unsigned long long)ch[1], (unsigned long long)ch[2]);
    CHECK(shape_chunk(f, "layers/03/q", d, ch) == 4 && d[1] == 2 && d[2] == 49 && d[3] == 8 && ch[1] == 1,
          "layer 3 q");
    CHECK(shape_chunk(f, "layers/05/tokens", d, NULL) == 3 && d[1] == 16 && d[2] == 32, "layer 5 tokens");
    CHECK(shape_chunk(f, "layers/02/params/shift_mask", d, NULL) == 3 && d[0] == 4 && d[1] == 16,
          "layer 2 shift_mask");
    hid_t a = H5Dopen2(f, "layers/02/attn", H5P_DEFAULT);
    char label[32] = "";
    H5DSget_label(a, 2, label, sizeof label);
    CHECK(strcmp(label, "window") == 0, "axis 2 of a window map is labelled %s", label);
    H5Dclose(a);
    trace_reader_close(&r);
}

/* --windows and --heads on a staged model: the selection stored, and refused where it cannot
 * apply. */
static void test_selection(void) {
    vit_config c;
    staged_config(&c, VIT_PAD_FIRST);
    as_error err = {0};
    const char *out = tmp("staged_sel.h5");
    CHECK(staged_write(out, &c, "all", "all", "1,3", "f16", 1, &err) == AS_ERR_ARG &&
          strstr(err.msg, "--windows 1,3: layer 4 (stage 2) has 1 window (0..0"), "%s", err.msg);
    CHECK(staged_write(out, &c, "all", "1", "all", "f16", 1, &err) == AS_ERR_ARG &&
          strstr(err.msg, "--heads 1: layer 0 (stage 0) has 1 heads (0..0)") && strstr(err.msg, "--heads all"),
          "%s", err.msg);
    CHECK(staged_write(out, &c, "2-3", "1", "1,3", "f16", 2, &err) == AS_OK, "%s", err.msg);
    trace_reader r;
    if (trace_reader_open(&r, out, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    CHECK(!r.heads_all && r.n_heads == 1 && r.heads[0] == 1 && r.n_windows == 2 && r.windows[1] == 3,
          "heads %d windows %d", r.n_heads, r.n_windows);
    const trace_layer_geom *t = trace_layer(&r, 2);
    CHECK(t && t->n_problems == 2 && !trace_layer(&r, 1), "selected windows");
    float got[2 * 256], want[2 * 4 * 256];
    staged_fill(&c, 2, 1, want, NULL, NULL, NULL, NULL);
    CHECK(trace_read_head(&r, TRACE_Q_ATTN, 1, 2, 1, got, &err) == AS_OK, "%s", err.msg);
    /* head 1, windows 1 and 3 of layer 2's (H=2, 4 windows) map; float16 */
    CHECK(check_close("window 1", got, want + (4 + 1) * 256, 256, 1e-3, 1e-3) &&
          check_close("window 3", got + 256, want + (4 + 3) * 256, 256, 1e-3, 1e-3), "windows 1,3");
    CHECK(trace_read_head(&r, TRACE_Q_ATTN, 1, 2, 0, got, &err) == AS_ERR_ARG && strstr(err.msg, "not recorded"),
          "%s", err.msg);
    hsize_t d[5];
    CHECK(shape_chunk((hid_t)r.file_id, "layers/03/attn", d, NULL) == 5 && d[1] == 1 && d[2] == 2,
          "layer 3: one head, two windows");
    int wins[4] = {0};
    hid_t a = H5Dopen2((hid_t)r.file_id, "layers/03/window", H5P_DEFAULT);
    CHECK(a >= 0 && H5Dread(a, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, wins) >= 0 && wins[0] == 1 &&
          wins[1] == 3, "the window scale holds the window indices");
    if (a >= 0) H5Dclose(a);
    trace_reader_close(&r);
    /* --windows on a model without window layers, and on global layers only */
    vit_config vit = *vit_arch_find("deit_tiny_patch16_224"), glob;
    trace_spec s;
    memset(&s, 0, sizeof s);
    s.n_layers = 1;
    CHECK(record_parse_windows(&s, &vit, "0", &err) == 2 && strstr(err.msg, "this model's attention is global"),
          "%s", err.msg);
    CHECK(record_parse_windows(&s, &vit, "all", &err) == 0 && s.n_windows == 0, "--windows all");
    staged_config_global(&glob, 8);
    CHECK(record_parse_windows(&s, &glob, "0", &err) == 2 && strstr(err.msg, "--layers chosen are global"),
          "%s", err.msg);
}

/* A corrupt geometry attribute is refused at open, not used to size reads. */
static void test_corrupt(void) {
    vit_config c;
    staged_config(&c, VIT_PAD_FIRST);
    as_error err = {0};
    const char *out = tmp("staged_bad.h5");
    CHECK(staged_write(out, &c, "0-1", "all", "all", "f16", 1, &err) == AS_OK, "%s", err.msg);
    hid_t f = H5Fopen(out, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = H5Gopen2(f, "layers/01", H5P_DEFAULT);
    CHECK(h5u_attr_int(g, "window", 5) == 0, "set window");
    H5Gclose(g);
    H5Fclose(f);
    trace_reader r;
    CHECK(trace_reader_open(&r, out, &err) == AS_ERR_FORMAT && strstr(err.msg, "layers/01's geometry"),
          "%s", err.msg);
}

/* A global map of 1600 tokens (5 MB per head in float16) is chunked by query rows of about
 * 1 MiB, and reads back whole. Global maps come from monolithic models only (every Swin stage is
 * windowed), so the model is one; the config must be one the reader accepts back from the
 * trace's model_config. */
static void test_row_chunks(void) {
    vit_config c;
    staged_config_flat(&c, 40);
    as_error err = {0};
    CHECK(vit_config_validate(&c, &err) == AS_OK, "%s", err.msg);
    const char *out = tmp("staged_big.h5");
    CHECK(staged_write(out, &c, "all", "all", "all", "f16", 1, &err) == AS_OK, "%s", err.msg);
    trace_reader r;
    if (trace_reader_open(&r, out, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    hsize_t d[5], ch[5];
    CHECK(shape_chunk((hid_t)r.file_id, "layers/00/attn", d, ch) == 4 && d[2] == 1600 && d[3] == 1600 &&
          ch[2] == (1u << 20) / (1600 * 2) && ch[3] == 1600,
          "chunk (.., %llu, %llu)", (unsigned long long)ch[2], (unsigned long long)ch[3]);
    const trace_layer_geom *t = trace_layer(&r, 0);
    CHECK(t && t->scope == VIT_SCOPE_GLOBAL && t->Tq == 1600 && t->n_problems == 1, "global geometry");
    float *got = malloc(1600 * 1600 * sizeof *got), *want = malloc(1600 * 1600 * sizeof *want);
    staged_fill(&c, 0, 0, want, NULL, NULL, NULL, NULL);
    CHECK(trace_read_head(&r, TRACE_Q_ATTN, 0, 0, 0, got, &err) == AS_OK, "%s", err.msg);
    CHECK(check_close("big map", got, want, 1600 * 1600, 1e-7, 1e-3), "big map");
    free(got);
    free(want);
    trace_reader_close(&r);
}

/* A monolithic ViT still writes version 2 with its single-grid root attributes. */
static void test_monolithic(void) {
    vit_config c = *vit_arch_find("deit_tiny_patch16_224");
    c.img_size = 32; /* 2 x 2 patches */
    as_error err = {0};
    const char *out = tmp("vit_v2.h5");
    CHECK(staged_write(out, &c, "0", "0", "all", "f32", 1, &err) == AS_OK, "%s", err.msg);
    trace_reader r;
    if (trace_reader_open(&r, out, &err) != AS_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    int v = 0, grid[2] = {0};
    h5u_attr_read_int((hid_t)r.file_id, "format_version", &v, 1);
    CHECK(v == 2 && r.version == 2 && !r.staged && h5u_attr_read_int((hid_t)r.file_id, "grid", grid, 2) == 2 &&
          grid[0] == 2, "version %d grid %d", v, grid[0]);
    hid_t g = H5Gopen2((hid_t)r.file_id, "layers/00", H5P_DEFAULT);
    CHECK(!attr_exists(g, "scope") && !attr_exists(g, "stage"), "version 3 attributes in a version 2 trace");
    H5Gclose(g);
    const trace_layer_geom *t = trace_layer(&r, 0);
    CHECK(t && t->T == 5 && t->prefix == 1 && t->gh == 2 && t->Tq == 5 && t->n_problems == 1 && t->H == 3,
          "v2 geometry");
    float got[25], want[3 * 25];
    staged_fill(&c, 0, 0, want, NULL, NULL, NULL, NULL);
    CHECK(trace_read_head(&r, TRACE_Q_ATTN, 0, 0, 0, got, &err) == AS_OK && check_close("v2 map", got, want, 25, 0, 0),
          "%s", err.msg);
    trace_reader_close(&r);
}

int main(void) {
    check_tmp_init("trace3");
    test_roundtrip(VIT_PAD_FIRST);
    test_roundtrip(VIT_PAD_ROLL_FIRST);
    test_selection();
    test_corrupt();
    test_row_chunks();
    test_monolithic();
    check_tmp_remove();
    return check_finish("trace3");
}
