/* test_loaders.c: every corruption of safetensors, config and image inputs gives the right
 * one-line error (never a crash); model binding names every mismatch with a hint. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../cli/cli.h"
#include "../core/kernels.h"
#include "../io/image.h"
#include "check.h"

#define tmp check_tmp

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

/* A safetensors file from a header string and n data bytes. */
static void write_st(const char *path, const char *header, size_t data_bytes) {
    size_t hl = strlen(header);
    unsigned char *buf = calloc(8 + hl + data_bytes + 1, 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    write_file(path, buf, 8 + hl + data_bytes);
    free(buf);
}

static void expect_st_error(const char *label, const char *header, size_t data_bytes,
                            as_status want, const char *needle) {
    const char *p = tmp("bad.safetensors");
    write_st(p, header, data_bytes);
    safetensors st;
    as_error err = {0};
    as_status rc = safetensors_open(&st, p, &err);
    CHECK(rc == want, "%s: status %s, want %s (%s)", label, as_status_string(rc), as_status_string(want), err.msg);
    CHECK(rc == AS_OK || (strstr(err.msg, p) && strstr(err.msg, needle)),
          "%s: message \"%s\" should name the file and say \"%s\"", label, err.msg, needle);
    CHECK(rc == AS_OK || !strchr(err.msg, '\n'), "%s: message must be one line", label);
    if (rc == AS_OK) safetensors_close(&st);
}

static void test_safetensors(void) {
    /* valid, then each corruption */
    expect_st_error("valid", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                             "\"__metadata__\":{\"format\":\"pt\"}}", 16, AS_OK, "");
    write_file(tmp("short.safetensors"), "abc", 3);
    safetensors st;
    as_error err = {0};
    CHECK(safetensors_open(&st, tmp("short.safetensors"), &err) == AS_ERR_FORMAT &&
          strstr(err.msg, "truncated"), "short file: %s", err.msg);
    unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    write_file(tmp("huge.safetensors"), huge, sizeof huge);
    CHECK(safetensors_open(&st, tmp("huge.safetensors"), &err) == AS_ERR_FORMAT &&
          strstr(err.msg, "header length"), "huge header: %s", err.msg);
    unsigned char past[16] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    write_file(tmp("past.safetensors"), past, 10);
    CHECK(safetensors_open(&st, tmp("past.safetensors"), &err) == AS_ERR_FORMAT &&
          strstr(err.msg, "past the end"), "header past end: %s", err.msg);
    expect_st_error("bad json", "{\"a\":{\"dtype\":\"F32\",", 16, AS_ERR_FORMAT, "JSON");
    expect_st_error("not object", "[1,2]", 0, AS_ERR_FORMAT, "JSON");
    expect_st_error("missing fields", "{\"a\":{\"dtype\":\"F32\"}}", 0, AS_ERR_FORMAT, "data_offsets");
    expect_st_error("unknown dtype", "{\"a\":{\"dtype\":\"F8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                    AS_ERR_UNSUPPORTED, "unknown dtype");
    expect_st_error("offset past data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
                    8, AS_ERR_FORMAT, "outside");
    expect_st_error("begin > end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}",
                    8, AS_ERR_FORMAT, "outside");
    expect_st_error("shape vs bytes", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",
                    8, AS_ERR_FORMAT, "needs 12 bytes");
    expect_st_error("negative shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
                    4, AS_ERR_FORMAT, "shape");
    expect_st_error("overflowing shape",
                    "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}",
                    4, AS_ERR_FORMAT, "shape");
    expect_st_error("overlap",
                    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                    12, AS_ERR_FORMAT, "overlap");
    CHECK(safetensors_open(&st, tmp("nonexistent"), &err) == AS_ERR_IO && strstr(err.msg, "cannot open"),
          "missing file: %s", err.msg);

    /* writer round trip in every dtype, with values that are exact in each */
    float vals[6] = {0.5f, -2.0f, 1.0f, 0.0f, 3.25f, -0.125f};
    safetensors_entry e[1] = {{"w", 2, {2, 3}, vals}};
    safetensors_dtype dts[3] = {SAFETENSORS_F32, SAFETENSORS_F16, SAFETENSORS_BF16};
    for (int d = 0; d < 3; d++) {
        const char *p = tmp("rt.safetensors");
        CHECK(safetensors_write(p, e, 1, dts[d], &err) == AS_OK, "%s", err.msg);
        if (safetensors_open(&st, p, &err) != AS_OK) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        const safetensors_tensor *t = safetensors_find(&st, "w");
        float back[6] = {0};
        CHECK(t && t->dtype == dts[d] && t->ndim == 2 && t->shape[1] == 3, "round trip header");
        if (t) safetensors_read_f32(&st, t, back, &err);
        check_close("safetensors round trip", back, vals, 6, 0, 0);
        safetensors_close(&st);
    }
    /* every truncation of a valid file fails cleanly */
    const char *p = tmp("rt.safetensors");
    safetensors_write(p, e, 1, SAFETENSORS_F32, &err);
    FILE *f = fopen(p, "rb");
    unsigned char buf[512];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    int crashes_avoided = 0;
    for (size_t cut = 0; cut < n; cut++) {
        safetensors s2;
        if (safetensors_parse(&s2, buf, cut, "cut", &err) == AS_OK) safetensors_close(&s2);
        else crashes_avoided++;
    }
    CHECK(crashes_avoided == (int)n, "every truncation must be rejected (%d of %zu)", crashes_avoided, n);
}

static void test_model_errors(void) {
    as_error err = {0};
    model m, gen;
    vit_config cfg = *vit_arch_find("deit_tiny_patch16_224");
    cfg.depth = 2; /* small, and so not any built-in: hints must still work on shapes */
    CHECK(model_init_random(&gen, &cfg, 3, &err) == AS_OK, "%s", err.msg);
    mkdir(tmp("m"), 0777);
    CHECK(model_save_dir(&gen, tmp("m"), SAFETENSORS_F32, &err) == AS_OK, "%s", err.msg);
    model_free(&gen);
    CHECK(model_load(&m, tmp("m"), NULL, 0, &err) == AS_OK, "saved model reloads: %s", err.msg);
    model_free(&m);
    /* wrong architecture: every mismatch named with expected and found shapes */
    as_status rc = model_load(&m, tmp("m/model.safetensors"), "vit_small_patch16_224", 0, &err);
    CHECK(rc == AS_ERR_SHAPE, "wrong arch: %s", as_status_string(rc));
    CHECK(strstr(err.msg, "patch_embed.proj.weight expected [384,3,16,16], found [192,3,16,16]") != NULL,
          "names the shape mismatch: %s", err.msg);
    CHECK(strstr(err.msg, "120 missing (blocks.2.norm1.weight, blocks.2.norm1.bias") != NULL,
          "names missing tensors: %s", err.msg);
    CHECK(!strchr(err.msg, '\n'), "one line");
    /* a real DeiT-Tiny checkpoint loaded as ViT-Small gets the hint */
    cfg = *vit_arch_find("deit_tiny_patch16_224");
    CHECK(model_init_random(&gen, &cfg, 3, &err) == AS_OK, "%s", err.msg);
    mkdir(tmp("tiny"), 0777);
    model_save_dir(&gen, tmp("tiny"), SAFETENSORS_F16, &err);
    model_free(&gen);
    unlink(tmp("tiny/config.json"));
    rc = model_load(&m, tmp("tiny/model.safetensors"), NULL, 0, &err);
    CHECK(rc == AS_ERR_CONFIG && strstr(err.msg, "--arch"), "bare file without --arch: %s", err.msg);
    rc = model_load(&m, tmp("tiny/model.safetensors"), "deit_small_patch16_224", 0, &err);
    CHECK(rc == AS_ERR_SHAPE && strstr(err.msg, "is this a vit_tiny_patch16_224 checkpoint"),
          "hint: %s", err.msg);
    rc = model_load(&m, tmp("tiny/model.safetensors"), "deit_tiny_patch16_224", 0, &err);
    CHECK(rc == AS_OK, "F16 checkpoint with --arch: %s", err.msg);
    if (rc == AS_OK) {
        CHECK(strcmp(m.weights_dtype, "F16") == 0, "dtype");
        model_free(&m);
    }
    rc = model_load(&m, tmp("tiny/model.safetensors"), "deit_nano_patch16_224", 0, &err);
    CHECK(rc == AS_ERR_CONFIG && strstr(err.msg, "unknown architecture") &&
          strstr(err.msg, "deit_tiny_patch16_224"), "unknown arch lists known: %s", err.msg);
    /* an unexpected tensor is named too */
    safetensors st;
    safetensors_open(&st, tmp("tiny/model.safetensors"), &err);
    int n = st.count;
    safetensors_entry *e = calloc((size_t)n + 1, sizeof *e);
    float *bufs[1024];
    for (int i = 0; i < n; i++) {
        e[i].name = st.tensors[i].name;
        e[i].ndim = st.tensors[i].ndim;
        for (int d = 0; d < e[i].ndim; d++) e[i].shape[d] = st.tensors[i].shape[d];
        bufs[i] = malloc(st.tensors[i].numel * 4);
        safetensors_read_f32(&st, &st.tensors[i], bufs[i], &err);
        e[i].data = bufs[i];
    }
    float extra[4] = {0};
    e[n] = (safetensors_entry){"head.extra", 1, {4}, extra};
    safetensors_write(tmp("extra.safetensors"), e, n + 1, SAFETENSORS_F32, &err);
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(e);
    safetensors_close(&st);
    rc = model_load(&m, tmp("extra.safetensors"), "deit_tiny_patch16_224", 0, &err);
    CHECK(rc == AS_ERR_SHAPE && strstr(err.msg, "1 unexpected (head.extra)"), "unexpected: %s", err.msg);

    /* config errors */
    vit_config c = {0};
    CHECK(model_config_apply_json(&c, "{\"embed_dim\": 100, \"num_heads\": 3}", "cfg.json", &err) == AS_ERR_CONFIG &&
          strstr(err.msg, "divisible"), "heads: %s", err.msg);
    CHECK(model_config_apply_json(&c, "{\"architecture\":\"custom\",\"img_size\":30}", "cfg.json", &err) == AS_ERR_CONFIG &&
          strstr(err.msg, "multiple of patch_size"), "img: %s", err.msg);
    CHECK(model_config_apply_json(&c, "{\"architecture\":\"custom\",\"global_pool\":\"max\"}", "cfg.json", &err) == AS_ERR_CONFIG,
          "pool: %s", err.msg);
    CHECK(model_config_apply_json(&c, "{not json", "cfg.json", &err) == AS_ERR_FORMAT &&
          strstr(err.msg, "cfg.json"), "syntax: %s", err.msg);
    CHECK(model_config_apply_json(&c, "{\"architecture\":\"custom\",\"class_token\":false}", "cfg.json", &err) == AS_ERR_CONFIG &&
          strstr(err.msg, "avg"), "token pool without cls: %s", err.msg);
    vit_config ok = {0};
    CHECK(model_config_apply_json(&ok, "{\"architecture\":\"vit_base_patch16_224.augreg_in21k\","
                                       "\"num_classes\":21843,\"pretrained_cfg\":{\"input_size\":[3,384,384]}}",
                                  "cfg.json", &err) == AS_OK &&
          ok.embed_dim == 768 && ok.num_classes == 21843 && ok.img_size == 384, "timm config: %s", err.msg);
}

static void test_param_counts(void) {
    /* closed form vs the DeiT paper's table: 5.7M, 22.1M, 86.6M */
    struct { const char *a; double want; } t[] = {{"deit_tiny_patch16_224", 5717416},
                                                   {"deit_small_patch16_224", 22050664},
                                                   {"deit_base_patch16_224", 86567656}};
    for (int i = 0; i < 3; i++) {
        vit_cost c;
        vit_config_cost(vit_arch_find(t[i].a), &c);
        CHECK(c.params_total == t[i].want, "%s: %.0f params", t[i].a, c.params_total);
        /* and the engine's tensor list agrees with the closed form */
        vit_params p;
        int n = vit_param_specs(vit_arch_find(t[i].a), &p, NULL, 0);
        vit_tensor_spec *s = malloc((size_t)n * sizeof *s);
        vit_param_specs(vit_arch_find(t[i].a), &p, s, n);
        double total = 0;
        for (int k = 0; k < n; k++) total += (double)vit_tensor_numel(&s[k]);
        free(s);
        CHECK(total == t[i].want, "%s: tensors sum to %.0f", t[i].a, total);
    }
    vit_cost c;
    vit_config_cost(vit_arch_find("deit_tiny_patch16_224"), &c);
    CHECK(fabs(c.flops_total / 2e9 - 1.26) < 0.02, "DeiT-Tiny %.3f GMACs (paper: 1.3 G)", c.flops_total / 2e9);
}

static void test_images(void) {
    as_error err = {0};
    image im;
    const char *fixtures = getenv("FIXTURES") ? getenv("FIXTURES") : "tests/fixtures";
    char path[512];
    snprintf(path, sizeof path, "%s/img.jpg", fixtures);
    FILE *f = fopen(path, "rb");
    unsigned char buf[8192];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    CHECK(n > 400, "fixture jpg");
    /* truncated JPEG: refused, as PIL does, instead of a grey bottom half */
    write_file(tmp("trunc.jpg"), buf, n / 2);
    CHECK(image_load(&im, tmp("trunc.jpg"), &err) == AS_ERR_FORMAT && strstr(err.msg, "trunc.jpg") &&
          strstr(err.msg, "corrupt or truncated"), "truncated jpeg: %s", err.msg);
    int rejected = 0, total = 0;
    for (size_t cut = 3; cut < n; cut += 37, total++)
        if (image_decode(&im, buf, cut, "cut.jpg", &err) != AS_OK) rejected++;
        else image_free(&im);
    CHECK(rejected == total, "every JPEG truncation rejected (%d of %d)", rejected, total);
    snprintf(path, sizeof path, "%s/img.png", fixtures);
    f = fopen(path, "rb");
    n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    rejected = total = 0;
    for (size_t cut = 8; cut < n; cut += 53, total++)
        if (image_decode(&im, buf, cut, "cut.png", &err) != AS_OK) rejected++;
        else image_free(&im);
    CHECK(rejected == total, "every PNG truncation rejected (%d of %d)", rejected, total);
    buf[n / 2] ^= 0x55; /* corrupt the compressed data: CRC or zlib error */
    CHECK(image_decode(&im, buf, n, "flip.png", &err) != AS_OK, "corrupt PNG accepted");
    write_file(tmp("text.png"), "hello", 5);
    CHECK(image_load(&im, tmp("text.png"), &err) == AS_ERR_FORMAT && strstr(err.msg, "neither PNG nor JPEG"),
          "not an image: %s", err.msg);
    write_file(tmp("empty.jpg"), "", 0);
    CHECK(image_load(&im, tmp("empty.jpg"), &err) != AS_OK, "empty file");
    CHECK(image_load(&im, tmp("none.png"), &err) == AS_ERR_IO && strstr(err.msg, "none.png"), "missing: %s", err.msg);
    /* a PNG header claiming 100000 x 100000 pixels */
    unsigned char big[33] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                             0, 1, 0x86, 0xa0, 0, 1, 0x86, 0xa0, 8, 2, 0, 0, 0};
    uint32_t crc = 0; /* libpng checks the CRC first: compute it as zlib does */
    {
        uint32_t c = 0xffffffffu;
        for (int i = 12; i < 29; i++) {
            c ^= big[i];
            for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
        }
        crc = ~c;
    }
    big[29] = (unsigned char)(crc >> 24), big[30] = (unsigned char)(crc >> 16);
    big[31] = (unsigned char)(crc >> 8), big[32] = (unsigned char)crc;
    CHECK(image_decode(&im, big, sizeof big, "big.png", &err) != AS_OK, "huge PNG header accepted");
}

static void test_datasets(void) {
    as_error err = {0};
    dataset ds;
    char root[512];
    snprintf(root, sizeof root, "%s/ds", check_tmpdir);
    CHECK(synth_write_images(root, 6, 40, 1, &err) == AS_OK, "%s", err.msg);
    CHECK(dataset_open(&ds, root, &err) == AS_OK, "%s", err.msg);
    CHECK(ds.count == 6 && ds.n_classes == 4, "ImageFolder: %d images, %d classes", ds.count, ds.n_classes);
    if (ds.count == 6 && ds.n_classes == 4) {
        CHECK(strcmp(ds.classes[0], "disc") == 0 && strcmp(ds.classes[3], "triangle") == 0, "sorted classes");
        CHECK(ds.labels[0] == 0 && strstr(ds.paths[0], "disc/000.png"), "first item %s", ds.paths[0]);
        CHECK(ds.labels[5] == 3, "last label %d", ds.labels[5]);
    }
    dataset_free(&ds);
    /* a plain folder: recursive, no labels */
    snprintf(root, sizeof root, "%s/ds/disc", check_tmpdir);
    CHECK(dataset_open(&ds, root, &err) == AS_OK && ds.count == 2 && ds.labels[0] == -1, "plain folder");
    dataset_free(&ds);
    /* a list with labels and a comment */
    FILE *f = fopen(tmp("list.txt"), "w");
    fprintf(f, "# images\nds/disc/000.png 3\nds/ring/001.png\n");
    fclose(f);
    CHECK(dataset_open(&ds, tmp("list.txt"), &err) == AS_OK && ds.count == 2 && ds.labels[0] == 3 &&
          ds.labels[1] == -1, "list: %s", err.msg);
    dataset_free(&ds);
    CHECK(dataset_open(&ds, tmp("nothing-here"), &err) == AS_ERR_IO, "missing path");
    mkdir(tmp("emptydir"), 0777);
    CHECK(dataset_open(&ds, tmp("emptydir"), &err) == AS_ERR_ARG && strstr(err.msg, "no PNG or JPEG"), "%s", err.msg);
    /* .npy headers */
    int shape[4];
    size_t off;
    unsigned char npy[256];
    const char *dicts[2] = {"{'descr': '<f8', 'fortran_order': False, 'shape': (1, 3, 2, 2), }",
                            "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 2, 2), }"};
    for (int i = 0; i < 2; i++) {
        size_t hl = strlen(dicts[i]);
        memcpy(npy, "\x93NUMPY\x01\x00", 8);
        npy[8] = (unsigned char)hl;
        npy[9] = 0;
        memcpy(npy + 10, dicts[i], hl);
        as_status rc = dataset_parse_npy(npy, 10 + hl + 8, "x.npy", shape, &off, &err);
        if (i == 0) CHECK(rc == AS_ERR_UNSUPPORTED && strstr(err.msg, "float32"), "f8: %s", err.msg);
        else CHECK(rc == AS_ERR_FORMAT && strstr(err.msg, "short"), "short data: %s", err.msg);
    }
    CHECK(dataset_parse_npy((const unsigned char *)"\x93NUMP", 5, "x.npy", shape, &off, &err) == AS_ERR_FORMAT, "magic");
}

static void test_kernels(void) {
    double maxe = 0;
    for (double x = -6; x <= 6; x += 1e-3) {
        double e = fabs((double)kernels_erf((float)x) - erf(x));
        maxe = e > maxe ? e : maxe;
    }
    CHECK(maxe < 5e-7, "erf max error %.3g", maxe);
    double maxrel = 0;
    for (double x = -87; x <= 88; x += 1e-3) {
        double e = fabs((double)kernels_exp((float)x) / exp((double)(float)x) - 1.0);
        maxrel = e > maxrel ? e : maxrel;
    }
    CHECK(maxrel < 3e-7, "exp max relative error %.3g", maxrel);
    CHECK(kernels_exp(-100.0f) < 1e-37f && kernels_exp(0.0f) == 1.0f, "exp limits");
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kernels_f16_to_f32((uint16_t)h);
        uint16_t back = kernels_f32_to_f16(f);
        if (!isnan(f) && back != h) bad++;
        uint16_t arr;
        kernels_f32_to_f16_array(&arr, &f, 1);
        if (!isnan(f) && arr != h) bad++;
    }
    CHECK(bad == 0, "%d float16 values do not round-trip", bad);
    /* the batch conversion (F16C when present) equals the scalar one for every half */
    uint16_t *all = malloc(65536 * sizeof *all);
    float *conv = malloc(65536 * sizeof *conv);
    for (uint32_t h = 0; h < 65536; h++) all[h] = (uint16_t)h;
    kernels_f16_to_f32_array(conv, all, 65536);
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kernels_f16_to_f32((uint16_t)h);
        if (memcmp(&f, &conv[h], 4) != 0 && !(isnan(f) && isnan(conv[h]))) bad++;
    }
    CHECK(bad == 0, "%d halves convert differently in the batch path", bad);
    free(all);
    free(conv);
    CHECK(kernels_f32_to_f16(65520.0f) == 0x7c00 && kernels_f32_to_f16(65519.0f) == 0x7bff, "overflow rounding");
    CHECK(kernels_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00, "ties to even");
    float row[5] = {1, 2, 3, 4, 1000};
    kernels_softmax_rows(row, 1, 5);
    CHECK(fabsf(row[4] - 1.0f) < 1e-6f && row[0] >= 0, "softmax is stable for large inputs");
    as_error err;
    int v[16];
    CHECK(cli_parse_list("0,2,5-7", 12, v, 16, "--layers", &err) == 5 && v[4] == 7, "list");
    CHECK(cli_parse_list("all", 3, v, 16, "--heads", &err) == 3, "all");
    CHECK(cli_parse_list("3-1", 12, v, 16, "--layers", &err) < 0, "bad range");
    CHECK(cli_parse_list("12", 12, v, 16, "--layers", &err) < 0 && strstr(err.msg, "0..11"), "%s", err.msg);
}

/* Random byte flips in valid files: every parser must fail cleanly or succeed, never crash or
 * read out of bounds (meaningful under the ASan build, which runs this suite too). */
static void test_mutations(void) {
    const char *fixtures = getenv("FIXTURES") ? getenv("FIXTURES") : "tests/fixtures";
    const char *files[4] = {"vit_cls/expected16.safetensors", "img.png", "img.jpg", "inputs16.npy"};
    unsigned long long seed = 12345;
    int runs = 0;
    for (int f = 0; f < 4; f++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", fixtures, files[f]);
        FILE *fp = fopen(path, "rb");
        if (!fp) {
            CHECK(0, "fixture %s", path);
            continue;
        }
        unsigned char orig[8192], buf[8192];
        size_t n = fread(orig, 1, sizeof orig, fp);
        fclose(fp);
        for (int it = 0; it < 300; it++, runs++) {
            memcpy(buf, orig, n);
            int flips = 1 + (int)(seed % 4);
            for (int k = 0; k < flips; k++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                /* mostly in the header, where the parsers' decisions are */
                size_t at = (seed >> 33) % (it % 2 ? n : (n < 256 ? n : 256));
                buf[at] ^= (unsigned char)(1u << ((seed >> 20) % 8));
            }
            size_t len = it % 5 == 0 ? n - (seed >> 40) % n : n;
            as_error err;
            if (f == 0) {
                safetensors st;
                if (safetensors_parse(&st, buf, len, "mut", &err) == AS_OK) {
                    for (int t = 0; t < st.count; t++) {
                        float *tmpv = malloc(st.tensors[t].numel * sizeof(float) + 4);
                        safetensors_read_f32(&st, &st.tensors[t], tmpv, &err);
                        free(tmpv);
                    }
                    safetensors_close(&st);
                }
            } else if (f < 3) {
                image im;
                if (image_decode(&im, buf, len, "mut", &err) == AS_OK) image_free(&im);
            } else {
                int shape[4];
                size_t off;
                dataset_parse_npy(buf, len, "mut", shape, &off, &err);
            }
        }
    }
    CHECK(runs == 1200, "mutation runs %d", runs);
}

int main(void) {
    check_tmp_init("loaders");
    test_safetensors();
    test_model_errors();
    test_param_counts();
    test_images();
    test_datasets();
    test_kernels();
    test_mutations();
    check_tmp_remove();
    return check_finish("loaders");
}
