/* resample.c: the precompute_coeffs of PIL's Resample.c, which PyTorch's antialiased
 * interpolation reproduces (same support, centre, window clipping and normalisation). */
#include "resample.h"

#include <math.h>
#include <stdlib.h>

static double filter_bicubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

static double filter_bilinear(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

int resample_weights(int in_size, int out_size, vit_interp interp, int **bounds_out, double **w_out) {
    double (*filter)(double) = interp == VIT_INTERP_BICUBIC ? filter_bicubic : filter_bilinear;
    double support = interp == VIT_INTERP_BICUBIC ? 2.0 : 1.0;
    const double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    support *= filterscale;
    const int ksize = (int)ceil(support) * 2 + 1;
    int *bounds = malloc((size_t)out_size * 2 * sizeof *bounds);
    double *w = calloc((size_t)out_size * ksize, sizeof *w);
    if (!bounds || !w) {
        free(bounds);
        free(w);
        return 0;
    }
    for (int i = 0; i < out_size; i++) {
        const double center = (i + 0.5) * scale, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        double *k = w + (size_t)i * ksize, total = 0.0;
        for (int x = 0; x < xmax; x++) {
            k[x] = filter((x + xmin - center + 0.5) * ss);
            total += k[x];
        }
        for (int x = 0; x < xmax; x++) k[x] = total != 0.0 ? k[x] / total : 0.0;
        bounds[2 * i] = xmin;
        bounds[2 * i + 1] = xmax;
    }
    *bounds_out = bounds;
    *w_out = w;
    return ksize;
}
