/* dataset.h: what --images names, resolved to an ordered list of inputs with labels: one image,
 * a folder (recursive), an ImageFolder tree (class sub-folders), a text list, or a tensor file
 * of preprocessed images (.npy or .safetensors, NCHW float32). */
#ifndef AS_DATASET_H
#define AS_DATASET_H

#include "../core/config.h"
#include "../core/status.h"
#include "safetensors.h"

/* Usage:
 *     dataset ds;
 *     if (dataset_open(&ds, "imgs/", &err) != AS_OK) ...
 *     for (int i = 0; i < ds.count; i++) dataset_load(&ds, i, x, rgb, &cfg, &err);
 *     dataset_free(&ds);
 * Order is deterministic: paths sorted bytewise, classes sorted as torchvision's ImageFolder. */
typedef enum { DATASET_FILES = 0, DATASET_TENSOR } dataset_kind;

typedef struct {
    dataset_kind kind;
    char root[1024];
    int count;
    char **paths;     /* [count] image paths (for tensors: "file.npy[i]") */
    int *labels;      /* [count] class index or -1 */
    int n_classes;
    char **classes;   /* [n_classes] sorted class folder names */
    /* tensor inputs */
    const float *tensor;     /* (count, C, S, S) */
    int t_chans, t_size;
    safetensors st;          /* when the tensor came from a .safetensors file */
    void *npy_map;
    size_t npy_size;
    float *tensor_copy;      /* when the mapped data is not aligned or not F32 */
    long max_pixels;         /* images above this are refused; 0: IMAGE_MAX_PIXELS (PIL's) */
} dataset;

as_status dataset_open(dataset *ds, const char *path, as_error *err);
void dataset_free(dataset *ds);
/* Wraps count preprocessed images (count, chans, size, size) allocated with malloc; ds takes
 * ownership. Items are named "name[i]". For benchmarks and tests. */
as_status dataset_from_memory(dataset *ds, float *tensor, int count, int chans, int size,
                              const char *name, as_error *err);

/* Can the items feed cfg at all (tensor inputs must have the model's size)? */
as_status dataset_check(const dataset *ds, const vit_config *cfg, as_error *err);
/* Loads item i preprocessed for cfg. x: (3, S, S); rgb: (S, S, 3) or NULL. */
as_status dataset_load(const dataset *ds, int i, float *x, unsigned char *rgb,
                       const vit_config *cfg, as_error *err);

/* Parses a .npy header (the fuzz entry point): float32 little-endian, C order, 4-D. */
as_status dataset_parse_npy(const unsigned char *buf, size_t len, const char *name, int shape[4],
                            size_t *data_offset, as_error *err);

#endif
