/* resample.h: separable antialiased resampling weights, the filter of PIL's Image.resize and of
 * PyTorch's interpolate(antialias=True): one definition for image resizing (io/image.c, in PIL's
 * fixed point) and position-embedding resampling (core/vit.c, in float). */
#ifndef AS_RESAMPLE_H
#define AS_RESAMPLE_H

#include "config.h"

/* Weights to resample a line of in_size samples to out_size. For output i, input samples
 * bounds[2i] .. bounds[2i] + bounds[2i+1] - 1 contribute with weights w[i * ksize + j] (summing
 * to 1). Bicubic uses Keys' a = -0.5 (PIL and PyTorch antialias), bilinear the triangle; when
 * shrinking, the filter widens by the scale (antialiasing).
 * Returns ksize (weights per output), or 0 when out of memory; free *bounds and *w. */
int resample_weights(int in_size, int out_size, vit_interp interp, int **bounds, double **w);

#endif
