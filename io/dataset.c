/* dataset.c: input enumeration (files, folders, ImageFolder, lists) and tensor inputs. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include "paths.h"
#include "dataset.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image.h"

typedef struct {
    char **v;
    int *lab;
    int n, cap;
} pathvec;

static int pv_push(pathvec *pv, const char *p, int label) {
    if (pv->n == pv->cap) {
        int nc = pv->cap ? 2 * pv->cap : 64;
        char **nv = realloc(pv->v, (size_t)nc * sizeof *nv);
        if (!nv) return 0;
        pv->v = nv;
        int *nl = realloc(pv->lab, (size_t)nc * sizeof *nl);
        if (!nl) return 0;
        pv->lab = nl;
        pv->cap = nc;
    }
    if (!(pv->v[pv->n] = strdup(p))) return 0;
    pv->lab[pv->n++] = label;
    return 1;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lists dir's entries (sorted), excluding dot files; NULL with errno on failure. */
static char **list_dir(const char *dir, int *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **v = malloc(sizeof *v);
    int cap = 1, ok = v != NULL;
    struct dirent *e;
    while (ok && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (*n == cap) {
            cap = 2 * cap;
            char **nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) ok = 0;
            else v = nv;
        }
        if (ok && !(v[*n] = strdup(e->d_name))) ok = 0;
        if (ok) (*n)++;
    }
    closedir(d);
    if (!ok) {
        for (int i = 0; v && i < *n; i++) free(v[i]);
        free(v);
        *n = 0;
        errno = ENOMEM;
        return NULL;
    }
    if (*n > 1) qsort(v, (size_t)*n, sizeof *v, cmp_str);
    return v;
}

static void free_list(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* The folders a walk has entered, by device and inode: each is followed once, so symlink loops
 * (a -> .) end and a link to a folder already listed adds nothing twice. */
typedef struct {
    dev_t *dev;
    ino_t *ino;
    int n, cap;
} walk_seen;

/* 1 if (dev, ino) is new (and now recorded), 0 if seen, -1 out of memory. */
static int seen_add(walk_seen *ws, const struct stat *sb) {
    for (int i = 0; i < ws->n; i++)
        if (ws->dev[i] == sb->st_dev && ws->ino[i] == sb->st_ino) return 0;
    if (ws->n == ws->cap) {
        int nc = ws->cap ? 2 * ws->cap : 16;
        dev_t *nd = realloc(ws->dev, (size_t)nc * sizeof *nd);
        if (nd) ws->dev = nd;
        ino_t *ni = nd ? realloc(ws->ino, (size_t)nc * sizeof *ni) : NULL;
        if (!ni) return -1;
        ws->ino = ni;
        ws->cap = nc;
    }
    ws->dev[ws->n] = sb->st_dev;
    ws->ino[ws->n++] = sb->st_ino;
    return 1;
}

/* Adds every supported image below dir, in sorted order, with the given label. */
static as_status walk(pathvec *pv, walk_seen *ws, const char *dir, int label, as_error *err) {
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return as_fail(err, AS_ERR_IO, "%s: cannot read (%s): fix its permissions or remove it",
                       dir, strerror(errno));
    int fresh = seen_add(ws, &sb);
    if (fresh < 0) return as_fail(err, AS_ERR_NOMEM, "%s: out of memory listing images", dir);
    if (!fresh) return AS_OK;
    int n;
    char **names = list_dir(dir, &n);
    if (!names)
        return errno == ENOMEM ? as_fail(err, AS_ERR_NOMEM, "%s: out of memory listing images", dir)
                               : as_fail(err, AS_ERR_IO, "%s: cannot list the folder (%s): fix its "
                                         "permissions or remove it", dir, strerror(errno));
    as_status rc = AS_OK;
    for (int i = 0; i < n && rc == AS_OK; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        struct stat eb;
        if (stat(p, &eb) != 0) {
            if (image_is_supported_name(p))
                rc = as_fail(err, AS_ERR_IO, "%s: cannot read (%s): fix or remove it", p, strerror(errno));
        } else if (S_ISDIR(eb.st_mode)) {
            rc = walk(pv, ws, p, label, err);
        } else if (image_is_supported_name(p)) {
            if (!S_ISREG(eb.st_mode))
                rc = as_fail(err, AS_ERR_ARG, "%s: not a regular file (a device, FIFO or socket): "
                             "remove it from the folder", p);
            else if (!pv_push(pv, p, label))
                rc = as_fail(err, AS_ERR_NOMEM, "%s: out of memory listing images", dir);
        }
    }
    free_list(names, n);
    return rc;
}

static as_status open_list(pathvec *pv, const char *path, as_error *err) {
    FILE *f = fopen(path, "r");
    if (!f) return as_fail(err, AS_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
    char dir[1024] = ".";
    const char *slash = strrchr(path, '/');
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    /* not a list: binary data (an HDF5 file, an image of a format attnscope does not read) */
    unsigned char head[4096];
    const size_t got = fread(head, 1, sizeof head, f);
    if (memchr(head, 0, got)) {
        fclose(f);
        return as_fail(err, AS_ERR_FORMAT, "%s: not an image attnscope reads (PNG or JPEG), a .npy "
                       "or .safetensors of images, a folder, or a list of image paths (it holds binary data): "
                       "convert it, or give its images another way", path);
    }
    rewind(f);
    char line[4096];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t L = strlen(line);
        while (L && (line[L - 1] == '\n' || line[L - 1] == '\r' || line[L - 1] == ' ')) line[--L] = 0;
        if (!L || line[0] == '#') continue;
        /* "path" or "path<TAB or space>label" */
        int label = -1;
        char *sep = strrchr(line, '\t');
        if (!sep) sep = strrchr(line, ' ');
        if (sep) {
            char *end;
            long v = strtol(sep + 1, &end, 10);
            if (*end == 0 && end != sep + 1 && v >= 0 && v < (1 << 30)) {
                label = (int)v;
                *sep = 0;
            }
        }
        char p[4096];
        if (line[0] == '/') snprintf(p, sizeof p, "%s", line);
        else snprintf(p, sizeof p, "%s/%s", dir, line);
        if (label < 0 && sep && access(p, F_OK) != 0) { /* "img.png abc": a label that is not one */
            char q[4096];
            const int cut = (int)(sep - line);
            if (line[0] == '/') snprintf(q, sizeof q, "%.*s", cut, line);
            else snprintf(q, sizeof q, "%s/%.*s", dir, cut, line);
            if (access(q, F_OK) == 0) {
                fclose(f);
                return as_fail(err, AS_ERR_FORMAT, "%s: line %d: label \"%s\" is not a whole number >= 0: write "
                               "each line as a path, optionally followed by a tab or space and its class index",
                               path, lineno, sep + 1);
            }
        }
        if (!pv_push(pv, p, label)) {
            fclose(f);
            return as_fail(err, AS_ERR_NOMEM, "%s: out of memory", path);
        }
    }
    fclose(f);
    return AS_OK;
}

as_status dataset_parse_npy(const unsigned char *buf, size_t len, const char *name, int shape[4],
                            size_t *data_offset, as_error *err) {
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return as_fail(err, AS_ERR_FORMAT, "%s: not a .npy file (bad magic): save the images with np.save", name);
    size_t hlen, hstart;
    if (buf[6] == 1) {
        hlen = buf[8] | (size_t)buf[9] << 8;
        hstart = 10;
    } else if (buf[6] == 2 || buf[6] == 3) {
        if (len < 12) return as_fail(err, AS_ERR_FORMAT, "%s: truncated .npy header: the file is cut short; save it again", name);
        hlen = buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        hstart = 12;
    } else {
        return as_fail(err, AS_ERR_FORMAT, "%s: unknown .npy version %d: save it with numpy's np.save (versions 1-3)", name, buf[6]);
    }
    if (hlen > 65536 || hstart + hlen > len)
        return as_fail(err, AS_ERR_FORMAT, "%s: .npy header runs past the end of the file: "
                       "truncated; save it again", name);
    char h[65537];
    memcpy(h, buf + hstart, hlen);
    h[hlen] = 0;
    if (!strstr(h, "'descr': '<f4'"))
        return as_fail(err, AS_ERR_UNSUPPORTED, "%s: .npy must hold float32 ('<f4'); save with "
                       "x.astype(np.float32)", name);
    if (!strstr(h, "'fortran_order': False"))
        return as_fail(err, AS_ERR_UNSUPPORTED, "%s: .npy must be C-ordered; save "
                       "np.ascontiguousarray(x)", name);
    const char *sp = strstr(h, "'shape': (");
    long long v[4];
    if (!sp || sscanf(sp, "'shape': (%lld, %lld, %lld, %lld)", &v[0], &v[1], &v[2], &v[3]) != 4)
        return as_fail(err, AS_ERR_SHAPE, "%s: .npy must be 4-D (N, C, H, W); a single image: x[None], "
                           "channels last: x.transpose(0, 3, 1, 2)", name);
    size_t n = 4;
    for (int i = 0; i < 4; i++) {
        if (v[i] <= 0 || v[i] > (1 << 24) || !as_mul_size(n, (size_t)v[i], &n))
            return as_fail(err, AS_ERR_SHAPE, "%s: .npy shape (%lld, %lld, %lld, %lld) out of range: every "
                           "dimension 1..16777216, the whole within memory", name, v[0], v[1], v[2], v[3]);
        shape[i] = (int)v[i];
    }
    if (n > len - hstart - hlen)
        return as_fail(err, AS_ERR_FORMAT, "%s: .npy data is %zu bytes short: truncated; save it again", name,
                       n - (len - hstart - hlen));
    *data_offset = hstart + hlen;
    return AS_OK;
}

static as_status name_items(dataset *ds, int count, int chans, int size, const char *name,
                            as_error *err);

static as_status open_tensor(dataset *ds, const char *path, as_error *err) {
    size_t L = strlen(path);
    int shape[4] = {0};
    ds->kind = DATASET_TENSOR;
    if (L > 4 && strcasecmp(path + L - 4, ".npy") == 0) {
        int fd = open(path, O_RDONLY);
        if (fd < 0) return as_fail(err, AS_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
        struct stat sb;
        if (fstat(fd, &sb) != 0 || sb.st_size <= 0) {
            close(fd);
            return as_fail(err, AS_ERR_FORMAT, "%s: empty file", path);
        }
        ds->npy_size = (size_t)sb.st_size;
        ds->npy_map = mmap(NULL, ds->npy_size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (ds->npy_map == MAP_FAILED) {
            ds->npy_map = NULL;
            return as_fail(err, AS_ERR_IO, "%s: cannot map (%s)", path, strerror(errno));
        }
        size_t off;
        as_status rc = dataset_parse_npy(ds->npy_map, ds->npy_size, path, shape, &off, err);
        if (rc != AS_OK) return rc;
        const unsigned char *data = (const unsigned char *)ds->npy_map + off;
        if (((uintptr_t)data & 3u) == 0) {
            ds->tensor = (const float *)(const void *)data;
        } else {
            size_t n = (size_t)shape[0] * shape[1] * shape[2] * shape[3];
            if (!(ds->tensor_copy = malloc(n * 4))) return as_fail(err, AS_ERR_NOMEM, "%s: out of memory", path);
            memcpy(ds->tensor_copy, data, n * 4);
            ds->tensor = ds->tensor_copy;
        }
    } else {
        as_status rc = safetensors_open(&ds->st, path, err);
        if (rc != AS_OK) return rc;
        const char *names[] = {"images", "pixel_values", "x", "input"};
        const safetensors_tensor *t = NULL;
        for (int i = 0; i < 4 && !t; i++) t = safetensors_find(&ds->st, names[i]);
        if (!t && ds->st.count == 1) t = &ds->st.tensors[0];
        if (!t || t->ndim != 4)
            return as_fail(err, AS_ERR_SHAPE, "%s: need one 4-D (N, C, H, W) tensor named "
                           "\"images\" (or the file's only tensor)", path);
        for (int i = 0; i < 4; i++) {
            if (t->shape[i] <= 0 || t->shape[i] > (1 << 24))
                return as_fail(err, AS_ERR_SHAPE, "%s: tensor shape out of range: every dimension 1..16777216", path);
            shape[i] = (int)t->shape[i];
        }
        if (!(ds->tensor_copy = malloc(t->numel * sizeof(float))))
            return as_fail(err, AS_ERR_NOMEM, "%s: out of memory", path);
        if ((rc = safetensors_read_f32(&ds->st, t, ds->tensor_copy, err)) != AS_OK) return rc;
        ds->tensor = ds->tensor_copy;
    }
    if (shape[2] != shape[3])
        return as_fail(err, AS_ERR_SHAPE, "%s: images must be square (N, C, H, W with H = W; got H %d, W %d): "
                           "crop or resize them, or transpose channels-last arrays to (N, C, H, W)", path, shape[2], shape[3]);
    return name_items(ds, shape[0], shape[1], shape[2], path, err);
}

/* Sets the tensor geometry and names items "name[i]" without labels. */
static as_status name_items(dataset *ds, int count, int chans, int size, const char *name,
                            as_error *err) {
    ds->kind = DATASET_TENSOR;
    ds->count = count;
    ds->t_chans = chans;
    ds->t_size = size;
    ds->paths = calloc((size_t)count, sizeof *ds->paths);
    ds->labels = malloc((size_t)count * sizeof *ds->labels);
    if (!ds->paths || !ds->labels) return as_fail(err, AS_ERR_NOMEM, "%s: out of memory", name);
    for (int i = 0; i < count; i++) {
        char p[1200];
        snprintf(p, sizeof p, "%s[%d]", name, i);
        if (!(ds->paths[i] = strdup(p))) return as_fail(err, AS_ERR_NOMEM, "%s: out of memory", name);
        ds->labels[i] = -1;
    }
    return AS_OK;
}

as_status dataset_from_memory(dataset *ds, float *tensor, int count, int chans, int size,
                              const char *name, as_error *err) {
    memset(ds, 0, sizeof *ds);
    snprintf(ds->root, sizeof ds->root, "%s", name);
    ds->tensor = ds->tensor_copy = tensor;
    as_status rc = name_items(ds, count, chans, size, name, err);
    if (rc != AS_OK) dataset_free(ds);
    return rc;
}

as_status dataset_open(dataset *ds, const char *path, as_error *err) {
    memset(ds, 0, sizeof *ds);
    snprintf(ds->root, sizeof ds->root, "%s", path);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return as_fail(err, AS_ERR_IO, "%s: no such file or folder (%s): give an image, a folder, "
                       "a .txt list or a .npy/.safetensors tensor", path, strerror(errno));
    size_t L = strlen(path);
    as_status rc = AS_OK;
    if (!S_ISDIR(sb.st_mode) && ((L > 4 && strcasecmp(path + L - 4, ".npy") == 0) ||
                                 (L > 12 && strcasecmp(path + L - 12, ".safetensors") == 0))) {
        rc = open_tensor(ds, path, err);
        if (rc != AS_OK) dataset_free(ds);
        return rc;
    }
    pathvec pv = {0};
    walk_seen ws = {0};
    if (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode)) {
        rc = as_fail(err, AS_ERR_ARG, "%s: not a regular file or folder (a device, FIFO or socket): "
                     "give an image, a folder, a .txt list or a .npy/.safetensors tensor", path);
    } else if (S_ISDIR(sb.st_mode)) {
        /* ImageFolder when the top level has sub-folders and no images of its own */
        int n, images_here = 0, dirs = 0;
        char **names = list_dir(path, &n);
        if (!names) return as_fail(err, AS_ERR_IO, "%s: cannot list (%s)", path, strerror(errno));
        for (int i = 0; i < n; i++) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", path, names[i]);
            if (path_is_dir(p)) dirs++;
            else if (image_is_supported_name(p)) images_here++;
        }
        if (dirs > 0 && images_here == 0) {
            struct stat top;
            ds->classes = calloc((size_t)dirs, sizeof *ds->classes);
            if (!ds->classes) rc = as_fail(err, AS_ERR_NOMEM, "%s: out of memory listing images", path);
            /* the top folder counts as entered: a class folder linking back to it adds nothing */
            if (rc == AS_OK && stat(path, &top) == 0 && seen_add(&ws, &top) < 0)
                rc = as_fail(err, AS_ERR_NOMEM, "%s: out of memory listing images", path);
            for (int i = 0; rc == AS_OK && i < n; i++) {
                char p[4096];
                snprintf(p, sizeof p, "%s/%s", path, names[i]);
                if (!path_is_dir(p)) continue;
                if (!(ds->classes[ds->n_classes] = strdup(names[i])))
                    rc = as_fail(err, AS_ERR_NOMEM, "%s: out of memory listing images", path);
                else
                    rc = walk(&pv, &ws, p, ds->n_classes++, err);
            }
        } else {
            rc = walk(&pv, &ws, path, -1, err);
        }
        free_list(names, n);
    } else if (image_is_supported_name(path)) {
        if (!pv_push(&pv, path, -1)) rc = as_fail(err, AS_ERR_NOMEM, "out of memory");
    } else {
        rc = open_list(&pv, path, err);
    }
    free(ws.dev);
    free(ws.ino);
    ds->paths = pv.v;
    ds->labels = pv.lab;
    ds->count = pv.n;
    if (rc == AS_OK && ds->count == 0)
        rc = as_fail(err, AS_ERR_ARG, "%s: no PNG or JPEG images found: check the path", path);
    if (rc != AS_OK) dataset_free(ds);
    return rc;
}

void dataset_free(dataset *ds) {
    for (int i = 0; i < ds->count && ds->paths; i++) free(ds->paths[i]);
    free(ds->paths);
    free(ds->labels);
    for (int i = 0; i < ds->n_classes; i++) free(ds->classes[i]);
    free(ds->classes);
    safetensors_close(&ds->st);
    if (ds->npy_map) munmap(ds->npy_map, ds->npy_size);
    free(ds->tensor_copy);
    memset(ds, 0, sizeof *ds);
}

as_status dataset_check(const dataset *ds, const vit_config *cfg, as_error *err) {
    if (ds->kind == DATASET_TENSOR && (ds->t_chans != cfg->in_chans || ds->t_size != cfg->img_size))
        return as_fail(err, AS_ERR_SHAPE, "%s: tensors are (%d, %d, %d) but the model takes "
                       "(%d, %d, %d): preprocess at the model's size or pass --img-size %d",
                       ds->root, ds->t_chans, ds->t_size, ds->t_size, cfg->in_chans,
                       cfg->img_size, cfg->img_size, ds->t_size);
    return AS_OK;
}

as_status dataset_load(const dataset *ds, int i, float *x, unsigned char *rgb,
                       const vit_config *cfg, as_error *err) {
    if (ds->kind == DATASET_TENSOR) {
        as_status rc = dataset_check(ds, cfg, err);
        if (rc != AS_OK) return rc;
        size_t n = (size_t)cfg->in_chans * cfg->img_size * cfg->img_size;
        memcpy(x, ds->tensor + (size_t)i * n, n * sizeof(float));
        if (rgb) image_denormalize(rgb, x, cfg);
        return AS_OK;
    }
    image im;
    as_status rc = image_load_max(&im, ds->paths[i], ds->max_pixels > 0 ? ds->max_pixels : IMAGE_MAX_PIXELS, err);
    if (rc != AS_OK) return rc;
    rc = image_preprocess(x, rgb, &im, cfg, err);
    image_free(&im);
    return rc;
}
