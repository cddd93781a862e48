/* traindata.c: training images in memory, from files or drawn procedurally. */
#define _POSIX_C_SOURCE 200809L
#include "paths.h"
#include "traindata.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/rng.h"
#include "dataset.h"

const char *const traindata_shape_names[TRAINDATA_SHAPES] = {"circle", "square", "triangle",
                                                             "cross", "ring", "diamond"};

/* Is (u, v), in units of the shape's radius around its centre, inside shape cls? */
static int inside(int cls, float u, float v) {
    const float r2 = u * u + v * v, au = fabsf(u), av = fabsf(v);
    switch (cls) {
    case 0: return r2 <= 1.0f;
    case 1: return au <= 0.8f && av <= 0.8f;
    case 2: return v <= 0.6f && v >= -1.0f + 1.6f * 1.08f * au; /* apex up, base at 0.6 */
    case 3: return (au <= 0.3f && av <= 1.0f) || (av <= 0.3f && au <= 1.0f);
    case 4: return r2 <= 1.0f && r2 >= 0.36f;
    default: return au + av <= 1.0f;
    }
}

void traindata_render_shape(uint8_t *rgb, int S, int cls, unsigned long long seed) {
    rng_state r = {seed * 0x9e3779b97f4a7c15ull + 0x5bd1e995ull};
    /* background: a base colour, stripes of random frequency and direction, pixel noise */
    float bg[3], fg[3], st[3];
    for (int c = 0; c < 3; c++) bg[c] = 30 + 170 * rng_uniform(&r);
    /* a shape colour at least 90 away from the background (in RGB distance) */
    for (int tries = 0; tries < 64; tries++) {
        double d = 0;
        for (int c = 0; c < 3; c++) {
            fg[c] = 255 * rng_uniform(&r);
            d += (fg[c] - bg[c]) * (fg[c] - bg[c]);
        }
        if (d > 90.0 * 90.0) break;
    }
    for (int c = 0; c < 3; c++) st[c] = 10 + 30 * rng_uniform(&r);
    const float freq = 0.15f + 0.6f * rng_uniform(&r), ang = 6.2832f * rng_uniform(&r);
    const float ca = cosf(ang), sa = sinf(ang), phase = 6.2832f * rng_uniform(&r);
    const float rad = S * (0.16f + 0.16f * rng_uniform(&r));
    const float cx = rad + (S - 2 * rad) * rng_uniform(&r), cy = rad + (S - 2 * rad) * rng_uniform(&r);
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) {
            int cover = 0; /* 4 x 4 samples per pixel: anti-aliased edges */
            for (int sy = 0; sy < 4; sy++)
                for (int sx = 0; sx < 4; sx++)
                    cover += inside(cls, (x + (sx + 0.5f) / 4 - cx) / rad, (y + (sy + 0.5f) / 4 - cy) / rad);
            const float a = cover / 16.0f;
            const float t = sinf(freq * (x * ca + y * sa) + phase);
            for (int c = 0; c < 3; c++) {
                const float b = bg[c] + st[c] * t + 8.0f * (rng_uniform(&r) - 0.5f);
                const float v = a * fg[c] + (1 - a) * b;
                rgb[((size_t)y * S + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5f);
            }
        }
}

static char **names_new(int n) { return calloc((size_t)n, sizeof(char *)); }

static int set_names(traindata *d, const char *const *names, int n) {
    d->n_classes = n;
    d->classes = names_new(n);
    if (!d->classes) return 0;
    for (int i = 0; i < n; i++) {
        char buf[32];
        if (!names) snprintf(buf, sizeof buf, "%d", i);
        d->classes[i] = strdup(names ? names[i] : buf);
        if (!d->classes[i]) return 0;
    }
    return 1;
}

static int alloc_sets(traindata *d, int ntr, int nva) {
    const size_t px = (size_t)d->size * d->size * 3;
    d->n_train = ntr;
    d->n_val = nva;
    d->train = malloc((size_t)(ntr ? ntr : 1) * px);
    d->val = malloc((size_t)(nva ? nva : 1) * px);
    d->train_labels = malloc((size_t)(ntr ? ntr : 1) * sizeof(int));
    d->val_labels = malloc((size_t)(nva ? nva : 1) * sizeof(int));
    return d->train && d->val && d->train_labels && d->val_labels;
}

static as_status open_shapes(traindata *d, const char *spec, const vit_config *cfg, as_error *err) {
    int n = 6000, S = cfg->img_size;
    const char *p = spec + 6;
    if (*p == ':') {
        char *end;
        long v = strtol(p + 1, &end, 10);
        if (v < 12 || v > 10000000 || (*end && *end != ':'))
            return as_fail(err, AS_ERR_ARG, "--data %s: shapes takes shapes[:COUNT[:SIZE]], COUNT 12 or more", spec);
        n = (int)v;
        if (*end == ':') {
            long s = strtol(end + 1, &end, 10);
            if (s < 16 || s > 1024 || *end)
                return as_fail(err, AS_ERR_ARG, "--data %s: SIZE must be 16 to 1024 pixels", spec);
            S = (int)s;
        }
    } else if (*p) {
        return as_fail(err, AS_ERR_ARG, "--data %s: write shapes, shapes:COUNT or shapes:COUNT:SIZE", spec);
    }
    snprintf(d->kind, sizeof d->kind, "shapes");
    d->size = S;
    const int nval = n / 5 > 120 ? n / 5 : 120;
    if (!set_names(d, traindata_shape_names, TRAINDATA_SHAPES) || !alloc_sets(d, n, nval))
        return as_fail(err, AS_ERR_NOMEM, "out of memory for %d shape images", n + nval);
    const size_t px = (size_t)S * S * 3;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n + nval; i++) {
        const int val = i >= n, k = val ? i - n : i;
        (val ? d->val_labels : d->train_labels)[k] = k % TRAINDATA_SHAPES;
        traindata_render_shape((val ? d->val : d->train) + (size_t)k * px, S, k % TRAINDATA_SHAPES,
                               (val ? 1000000007ull : 1ull) + (unsigned long long)k);
    }
    snprintf(d->val_source, sizeof d->val_source, "%d separately drawn images", nval);
    return AS_OK;
}

/* A whole small file into memory. */
static unsigned char *slurp(const char *path, size_t *len, as_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        as_fail(err, AS_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = n > 0 ? malloc((size_t)n) : NULL;
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        as_fail(err, n > 0 ? AS_ERR_IO : AS_ERR_FORMAT, "%s: cannot read (%s)", path, n > 0 ? "read error" : "empty file");
        free(b);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* CIFAR binary records: label byte(s), then 1024 R, 1024 G, 1024 B. Appends to (px, lab). */
static as_status read_cifar(const char *path, int label_bytes, int classes, uint8_t **px, int **lab,
                            int *count, as_error *err) {
    size_t len;
    unsigned char *b = slurp(path, &len, err);
    if (!b) return err->status;
    const size_t rec = (size_t)label_bytes + 3072;
    if (len % rec) {
        free(b);
        return as_fail(err, AS_ERR_FORMAT, "%s: %zu bytes is not a whole number of %zu-byte CIFAR-%d records "
                       "(truncated download?); fetch the file again", path, len, rec, classes);
    }
    const int n = (int)(len / rec);
    uint8_t *np = realloc(*px, ((size_t)*count + n) * 3072);
    int *nl = np ? realloc(*lab, ((size_t)*count + n) * sizeof(int)) : NULL;
    if (np) *px = np;
    if (!np || !nl) {
        free(b);
        return as_fail(err, AS_ERR_NOMEM, "out of memory reading %s", path);
    }
    *lab = nl;
    for (int i = 0; i < n; i++) {
        const unsigned char *r = b + i * rec;
        const int y = r[label_bytes - 1];
        if (y >= classes) {
            free(b);
            return as_fail(err, AS_ERR_FORMAT, "%s: record %d has label %d, but CIFAR-%d has %d classes; "
                           "is this the other CIFAR?", path, i, y, classes, classes);
        }
        nl[*count + i] = y;
        uint8_t *o = np + ((size_t)*count + i) * 3072;
        for (int p = 0; p < 1024; p++)
            for (int c = 0; c < 3; c++) o[p * 3 + c] = r[label_bytes + c * 1024 + p];
    }
    *count += n;
    free(b);
    return AS_OK;
}

/* One name per line (batches.meta.txt, fine_label_names.txt); missing file: numbers. */
static void read_names(traindata *d, const char *path, int n) {
    size_t len;
    as_error e = {0};
    unsigned char *b = path_is_file(path) ? slurp(path, &len, &e) : NULL;
    const char *names[128];
    int k = 0;
    char *text = b ? calloc(len + 1, 1) : NULL;
    if (text) {
        memcpy(text, b, len);
        for (char *s = strtok(text, "\r\n"); s && k < n && k < 128; s = strtok(NULL, "\r\n"))
            if (*s) names[k++] = s;
    }
    set_names(d, k == n ? names : NULL, n);
    free(text);
    free(b);
}

static as_status open_cifar(traindata *d, const char *path, as_error *err) {
    char p[1200];
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    int c100;
    uint8_t *tr = NULL, *va = NULL;
    int *trl = NULL, *val = NULL, ntr = 0, nva = 0;
    as_status rc = AS_OK;
    if (path_is_dir(path)) {
        snprintf(p, sizeof p, "%s/train.bin", path);
        c100 = path_is_file(p);
        if (c100) {
            rc = read_cifar(p, 2, 100, &tr, &trl, &ntr, err);
            snprintf(p, sizeof p, "%s/test.bin", path);
            if (rc == AS_OK && path_is_file(p)) rc = read_cifar(p, 2, 100, &va, &val, &nva, err);
            snprintf(p, sizeof p, "%s/fine_label_names.txt", path);
        } else {
            for (int k = 1; k <= 5 && rc == AS_OK; k++) {
                snprintf(p, sizeof p, "%s/data_batch_%d.bin", path, k);
                if (path_is_file(p)) rc = read_cifar(p, 1, 10, &tr, &trl, &ntr, err);
            }
            snprintf(p, sizeof p, "%s/test_batch.bin", path);
            if (rc == AS_OK && path_is_file(p)) rc = read_cifar(p, 1, 10, &va, &val, &nva, err);
            snprintf(p, sizeof p, "%s/batches.meta.txt", path);
        }
        if (rc == AS_OK && !ntr)
            rc = as_fail(err, AS_ERR_FORMAT, "%s: no data_batch_N.bin (CIFAR-10) or train.bin (CIFAR-100) in this "
                         "folder; point --data at the extracted cifar-*-binary folder", path);
    } else {
        c100 = strcmp(base, "train.bin") == 0 || strcmp(base, "test.bin") == 0;
        rc = read_cifar(path, c100 ? 2 : 1, c100 ? 100 : 10, &tr, &trl, &ntr, err);
        p[0] = 0;
    }
    if (rc == AS_OK) {
        snprintf(d->kind, sizeof d->kind, c100 ? "cifar100" : "cifar10");
        d->size = 32;
        read_names(d, p, c100 ? 100 : 10);
        d->train = tr;
        d->train_labels = trl;
        d->n_train = ntr;
        d->val = va;
        d->val_labels = val;
        d->n_val = nva;
        if (nva) snprintf(d->val_source, sizeof d->val_source, "the test set (%d images)", nva);
        return AS_OK;
    }
    free(tr);
    free(trl);
    free(va);
    free(val);
    return rc;
}

static uint32_t be32(const unsigned char *b) {
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* MNIST IDX pair: images (magic 2051, n, rows, cols) and labels (magic 2049, n). */
static as_status read_idx(const char *img, const char *lab, uint8_t **px, int **labels, int *n,
                          int *side, as_error *err) {
    size_t li, ll;
    unsigned char *bi = slurp(img, &li, err);
    if (!bi) return err->status;
    unsigned char *bl = slurp(lab, &ll, err);
    if (!bl) {
        free(bi);
        return err->status;
    }
    as_status rc = AS_OK;
    if (li < 16 || be32(bi) != 2051)
        rc = as_fail(err, AS_ERR_FORMAT, "%s: not an IDX image file (magic 2051); gunzip the download first", img);
    else if (ll < 8 || be32(bl) != 2049)
        rc = as_fail(err, AS_ERR_FORMAT, "%s: not an IDX label file (magic 2049); gunzip the download first", lab);
    const uint32_t cnt = rc == AS_OK ? be32(bi + 4) : 0, rows = rc == AS_OK ? be32(bi + 8) : 0;
    if (rc == AS_OK && (rows != be32(bi + 12) || rows < 8 || rows > 1024))
        rc = as_fail(err, AS_ERR_FORMAT, "%s: images are %ux%u; only square images are supported", img, rows, be32(bi + 12));
    else if (rc == AS_OK && (li != 16 + (size_t)cnt * rows * rows || ll != 8 + (size_t)cnt || be32(bl + 4) != cnt))
        rc = as_fail(err, AS_ERR_FORMAT, "%s: sizes disagree with the header (%u images) or with %s; the file is "
                     "truncated or the pair does not match", img, cnt, lab);
    if (rc == AS_OK) {
        *px = malloc((size_t)cnt * rows * rows * 3);
        *labels = malloc((size_t)cnt * sizeof(int));
        if (!*px || !*labels) rc = as_fail(err, AS_ERR_NOMEM, "out of memory reading %s", img);
    }
    for (uint32_t i = 0; rc == AS_OK && i < cnt; i++) {
        (*labels)[i] = bl[8 + i];
        if (bl[8 + i] > 9) rc = as_fail(err, AS_ERR_FORMAT, "%s: label %d of image %u is not a digit", lab, bl[8 + i], i);
        for (size_t p = 0; p < (size_t)rows * rows; p++)
            for (int c = 0; c < 3; c++) (*px)[((size_t)i * rows * rows + p) * 3 + c] = bi[16 + (size_t)i * rows * rows + p];
    }
    *n = (int)cnt;
    *side = (int)rows;
    free(bi);
    free(bl);
    return rc;
}

static as_status open_mnist(traindata *d, const char *dir, as_error *err) {
    static const char *pat[2][2] = {{"%s/train-images-idx3-ubyte", "%s/train-images.idx3-ubyte"},
                                    {"%s/t10k-images-idx3-ubyte", "%s/t10k-images.idx3-ubyte"}};
    static const char *lpat[2][2] = {{"%s/train-labels-idx1-ubyte", "%s/train-labels.idx1-ubyte"},
                                     {"%s/t10k-labels-idx1-ubyte", "%s/t10k-labels.idx1-ubyte"}};
    snprintf(d->kind, sizeof d->kind, "mnist");
    set_names(d, NULL, 10);
    for (int set = 0; set < 2; set++) {
        char img[1200] = "", lab[1200] = "";
        for (int v = 0; v < 2; v++) {
            char a[1200], b[1200];
            snprintf(a, sizeof a, pat[set][v], dir);
            snprintf(b, sizeof b, lpat[set][v], dir);
            if (path_is_file(a) && path_is_file(b)) {
                snprintf(img, sizeof img, "%s", a);
                snprintf(lab, sizeof lab, "%s", b);
            }
        }
        if (!img[0]) continue;
        int side = 0;
        as_status rc = read_idx(img, lab, set ? &d->val : &d->train, set ? &d->val_labels : &d->train_labels,
                                set ? &d->n_val : &d->n_train, &side, err);
        if (rc != AS_OK) return rc;
        d->size = side;
    }
    if (d->n_val) snprintf(d->val_source, sizeof d->val_source, "the t10k set (%d images)", d->n_val);
    return AS_OK;
}

/* ImageFolder: root/CLASS/images, or root/train/CLASS and root/val/CLASS. Images are decoded
 * and resized to the model's input as `attnscope record` does. */
static as_status load_folder(const char *path, const vit_config *cfg, uint8_t **px, int **labels, int *n,
                             traindata *d, as_error *err) {
    dataset ds;
    as_status rc = dataset_open(&ds, path, err);
    if (rc != AS_OK) return rc;
    if (ds.n_classes < 2) {
        dataset_free(&ds);
        return as_fail(err, AS_ERR_FORMAT, "%s: training needs an ImageFolder tree (one sub-folder per class, "
                       "two or more classes)", path);
    }
    const int S = cfg->img_size;
    vit_config c = *cfg;
    *px = malloc((size_t)ds.count * S * S * 3);
    *labels = malloc((size_t)ds.count * sizeof(int));
    float *x = malloc((size_t)3 * S * S * sizeof(float));
    if (!*px || !*labels || !x) rc = as_fail(err, AS_ERR_NOMEM, "out of memory loading %s", path);
    for (int i = 0; rc == AS_OK && i < ds.count; i++) {
        rc = dataset_load(&ds, i, x, *px + (size_t)i * S * S * 3, &c, err);
        (*labels)[i] = ds.labels[i];
    }
    free(x);
    *n = ds.count;
    if (rc == AS_OK && !d->classes) {
        d->n_classes = ds.n_classes;
        d->classes = names_new(ds.n_classes);
        for (int i = 0; d->classes && i < ds.n_classes; i++) d->classes[i] = strdup(ds.classes[i]);
    }
    dataset_free(&ds);
    return rc;
}

static as_status open_folder(traindata *d, const char *path, const vit_config *cfg, as_error *err) {
    char tr[1200], va[1200];
    snprintf(tr, sizeof tr, "%s/train", path);
    snprintf(va, sizeof va, "%s/val", path);
    snprintf(d->kind, sizeof d->kind, "imagefolder");
    d->size = cfg->img_size;
    const int split = path_is_dir(tr) && path_is_dir(va);
    as_status rc = load_folder(split ? tr : path, cfg, &d->train, &d->train_labels, &d->n_train, d, err);
    if (rc == AS_OK && split) {
        rc = load_folder(va, cfg, &d->val, &d->val_labels, &d->n_val, d, err);
        if (rc == AS_OK) snprintf(d->val_source, sizeof d->val_source, "val/ (%d images)", d->n_val);
    }
    return rc;
}

/* Moves a deterministic fraction of the training images to the held-out set. */
static as_status split_off(traindata *d, float fraction, as_error *err) {
    const int n = d->n_train, nv = (int)(n * fraction);
    if (nv < 1 || nv >= n)
        return as_fail(err, AS_ERR_ARG, "%s: %d images cannot be split %g held out; use more images or "
                       "another --val-fraction", d->spec, n, (double)fraction);
    const size_t px = (size_t)d->size * d->size * 3;
    int *perm = malloc((size_t)n * sizeof(int));
    uint8_t *tr = malloc((size_t)(n - nv) * px), *va = malloc((size_t)nv * px);
    int *trl = malloc((size_t)(n - nv) * sizeof(int)), *val = malloc((size_t)nv * sizeof(int));
    if (!perm || !tr || !va || !trl || !val) {
        free(perm);
        free(tr);
        free(va);
        free(trl);
        free(val);
        return as_fail(err, AS_ERR_NOMEM, "out of memory splitting %s", d->spec);
    }
    rng_state r = {0x243f6a8885a308d3ull};
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        const int j = (int)(rng_next(&r) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    /* held-out: the first nv of the permutation, kept in file order */
    unsigned char *held = calloc((size_t)n, 1);
    for (int i = 0; held && i < nv; i++) held[perm[i]] = 1;
    int a = 0, b = 0;
    for (int i = 0; held && i < n; i++) {
        if (held[i]) {
            memcpy(va + (size_t)b * px, d->train + (size_t)i * px, px);
            val[b++] = d->train_labels[i];
        } else {
            memcpy(tr + (size_t)a * px, d->train + (size_t)i * px, px);
            trl[a++] = d->train_labels[i];
        }
    }
    free(held);
    free(perm);
    free(d->train);
    free(d->train_labels);
    free(d->val);
    free(d->val_labels);
    d->train = tr;
    d->train_labels = trl;
    d->val = va;
    d->val_labels = val;
    d->n_train = n - nv;
    d->n_val = nv;
    snprintf(d->val_source, sizeof d->val_source, "%d images held out (%g)", nv, (double)fraction);
    return AS_OK;
}

as_status traindata_open(traindata *d, const char *spec, const vit_config *cfg, float val_fraction,
                         as_error *err) {
    memset(d, 0, sizeof *d);
    snprintf(d->spec, sizeof d->spec, "%s", spec);
    char p[1200];
    as_status rc;
    if (strncmp(spec, "shapes", 6) == 0 && !path_is_dir(spec) && !path_is_file(spec)) {
        rc = open_shapes(d, spec, cfg, err);
    } else if (!path_is_dir(spec) && !path_is_file(spec)) {
        rc = as_fail(err, AS_ERR_IO, "--data %s: no such file or folder; give a CIFAR or MNIST folder, an "
                     "ImageFolder tree, or shapes[:COUNT] for the built-in dataset", spec);
    } else {
        const char *ext = strrchr(spec, '.');
        snprintf(p, sizeof p, "%s/data_batch_1.bin", spec);
        const int cifar_dir = path_is_file(p) || (snprintf(p, sizeof p, "%s/train.bin", spec), path_is_file(p));
        snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", spec);
        const int mnist = path_is_file(p) || (snprintf(p, sizeof p, "%s/train-images.idx3-ubyte", spec), path_is_file(p));
        if (cifar_dir || (path_is_file(spec) && ext && strcmp(ext, ".bin") == 0)) rc = open_cifar(d, spec, err);
        else if (mnist) rc = open_mnist(d, spec, err);
        else if (path_is_dir(spec)) rc = open_folder(d, spec, cfg, err);
        else rc = as_fail(err, AS_ERR_FORMAT, "--data %s: not a CIFAR .bin file; give a folder instead", spec);
    }
    if (rc == AS_OK && d->size != cfg->img_size)
        rc = as_fail(err, AS_ERR_SHAPE, "--data %s: images are %dx%d but the model's img_size is %d; set "
                     "\"img_size\": %d in the model config (or pass --img-size %d)", spec, d->size, d->size, cfg->img_size, d->size, d->size);
    if (rc == AS_OK && cfg->num_classes != d->n_classes)
        rc = as_fail(err, AS_ERR_SHAPE, "--data %s: %d classes but the model has num_classes %d; set "
                     "\"num_classes\": %d in the model config (or pass --num-classes %d)", spec, d->n_classes, cfg->num_classes, d->n_classes, d->n_classes);
    if (rc == AS_OK && !d->n_val) rc = split_off(d, val_fraction, err);
    if (rc != AS_OK) traindata_free(d);
    return rc;
}

void traindata_free(traindata *d) {
    for (int i = 0; d->classes && i < d->n_classes; i++) free(d->classes[i]);
    free(d->classes);
    free(d->train);
    free(d->val);
    free(d->train_labels);
    free(d->val_labels);
    memset(d, 0, sizeof *d);
}

void traindata_batch(const traindata *d, int val, const int *idx, int n, float *x, int *labels,
                     const traindata_aug *aug, const vit_config *cfg) {
    const int S = d->size;
    const size_t px = (size_t)S * S * 3, plane = (size_t)S * S;
    const uint8_t *src = val ? d->val : d->train;
    float scale[3], shift[3];
    for (int c = 0; c < 3; c++) {
        scale[c] = 1.0f / (255.0f * cfg->std[c]);
        shift[c] = cfg->mean[c] / cfg->std[c];
    }
#pragma omp parallel for schedule(static)
    for (int b = 0; b < n; b++) {
        const int i = idx[b];
        labels[b] = (val ? d->val_labels : d->train_labels)[i];
        int ox = 0, oy = 0, flip = 0;
        if (aug && aug->crop_pad >= 0) {
            rng_state r = {aug->seed * 0x9e3779b97f4a7c15ull ^ ((unsigned long long)aug->epoch << 32) ^ (unsigned long long)i};
            rng_next(&r);
            const int span = 2 * aug->crop_pad + 1;
            ox = (int)(rng_next(&r) % (uint64_t)span) - aug->crop_pad;
            oy = (int)(rng_next(&r) % (uint64_t)span) - aug->crop_pad;
            flip = aug->flip && (rng_next(&r) & 1);
        }
        const uint8_t *im = src + (size_t)i * px;
        float *o = x + (size_t)b * 3 * plane;
        for (int y = 0; y < S; y++) {
            int sy = y + oy;
            sy = sy < 0 ? 0 : sy >= S ? S - 1 : sy;
            for (int xx = 0; xx < S; xx++) {
                int sx = (flip ? S - 1 - xx : xx) + ox;
                sx = sx < 0 ? 0 : sx >= S ? S - 1 : sx;
                const uint8_t *p = im + ((size_t)sy * S + sx) * 3;
                for (int c = 0; c < 3; c++) o[c * plane + (size_t)y * S + xx] = p[c] * scale[c] - shift[c];
            }
        }
    }
}
