/* traindata.h: labelled training images in memory (uint8, S x S x 3) with a held-out split,
 * from CIFAR-10/100 binary files, MNIST IDX files, ImageFolder trees, or the built-in
 * procedural shapes; and the training transform (random crop with padding, horizontal flip,
 * normalisation). docs/training.md lists the layouts each source accepts. */
#ifndef AS_TRAINDATA_H
#define AS_TRAINDATA_H

#include <stdint.h>

#include "../core/config.h"
#include "../core/status.h"

/* Usage:
 *     traindata d;
 *     if (traindata_open(&d, "shapes:6000", &cfg, 0.1f, &err) != AS_OK) ...
 *     // d.train: d.n_train images, d.val: d.n_val held-out images
 *     traindata_batch(&d, 0, idx, n, x, labels, &aug, &cfg);   // transformed, normalised
 *     traindata_free(&d);
 * Deterministic: the same spec gives the same images in the same order. */
typedef struct {
    char spec[1024];      /* what --data said */
    char kind[16];        /* "shapes", "cifar10", "cifar100", "mnist", "imagefolder" */
    int size;             /* S: images are S x S */
    int n_classes;
    char **classes;       /* [n_classes] names */
    int n_train, n_val;
    uint8_t *train, *val; /* (n, S, S, 3) */
    int *train_labels, *val_labels;
    char val_source[64];  /* "test set", "held-out 10%", ... */
} traindata;

as_status traindata_open(traindata *d, const char *spec, const vit_config *cfg, float val_fraction,
                         as_error *err);
void traindata_free(traindata *d);

/* The training transform of one image: pad by crop_pad pixels (edge replicated), take a random
 * S x S crop, flip horizontally with probability 1/2. No augmentation when crop_pad < 0. */
typedef struct {
    int crop_pad;   /* -1: none (evaluation) */
    int flip;
    unsigned long long seed; /* with the epoch and the image's index: the draw is reproducible */
    long epoch;
} traindata_aug;

/* x: (n, 3, S, S) normalised with cfg's mean and std, of images idx[0..n) of the train (val = 0)
 * or held-out (val = 1) set; labels[n]. */
void traindata_batch(const traindata *d, int val, const int *idx, int n, float *x, int *labels,
                     const traindata_aug *aug, const vit_config *cfg);

/* The built-in procedural dataset's class names and one image (for tests and docs). */
extern const char *const traindata_shape_names[];
enum { TRAINDATA_SHAPES = 6 };
void traindata_render_shape(uint8_t *rgb, int S, int cls, unsigned long long seed);

#endif
