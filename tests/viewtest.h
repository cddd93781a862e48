/* viewtest.h: what the offscreen viewer tests share: a W x H frame drawn into an image surface
 * and the colour read back at a point. Header-only; define W and H before including it. */
#ifndef AS_TESTS_VIEWTEST_H
#define AS_TESTS_VIEWTEST_H

#include <stdint.h>
#include <string.h>

#include "../viewer/view.h"

static inline void draw(view *v, cairo_surface_t *s) {
    cairo_t *cr = cairo_create(s);
    view_draw(v, cr, W, H);
    cairo_destroy(cr);
    cairo_surface_flush(s);
}

/* The colour at (x, y) in plot points of the view (its zoom applied). */
static inline void pixel(const view *v, cairo_surface_t *s, double x, double y, double rgb[3]) {
    int px = (int)(x * v->zoom), py = (int)(y * v->zoom);
    const unsigned char *d = cairo_image_surface_get_data(s);
    uint32_t p;
    memcpy(&p, d + (size_t)py * cairo_image_surface_get_stride(s) + 4 * (size_t)px, 4);
    rgb[0] = (p >> 16 & 255) / 255.0;
    rgb[1] = (p >> 8 & 255) / 255.0;
    rgb[2] = (p & 255) / 255.0;
}

#endif
