/* AMX microkernel of the relaxed direct conv2d (src/drive/conv_amx.c):
   a 32 x 32 block of outputs (two row tiles of 16 output pixels, two
   column tiles of 16 output channels) summed over every tap and 32-channel
   step on the bf16 tiles, the activations read in place from a padded
   bf16 NHWC image (a row tile's 16 pixels are one tileloadd with the
   pixel stride as its row stride), the weights from bf16 panels in the
   tile unit's pair layout.  Tiles 0-3 the sums, 4-5 the activations, 6-7
   the weights; each loaded tile feeds two products. */
#include "kernels/kernels.h"
#include "kernels/amx/tilecfg.h"

#include <immintrin.h>

void tops_conv_bf16_32x32__amx(int mt, int nt, int ntaps, const int64_t *toff, int64_t csteps, const uint16_t *a0,
                               const uint16_t *a1, int64_t lda, const uint16_t *b0, const uint16_t *b1, float *c,
                               int64_t ldc) {
    tops__amx_configure();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int t = 0; t < ntaps; t++) {
        const uint16_t *x0 = a0 + toff[t], *x1 = a1 + toff[t];
        const uint16_t *w0 = b0 + (int64_t)t * csteps * 512, *w1 = b1 + (int64_t)t * csteps * 512;
        if (mt == 2 && nt == 2) {
            for (int64_t s = 0; s < csteps; s++) {
                _tile_loadd(4, x0 + s * 32, lda);
                _tile_loadd(6, w0 + s * 512, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_loadd(7, w1 + s * 512, 64);
                _tile_dpbf16ps(1, 4, 7);
                _tile_loadd(5, x1 + s * 32, lda);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            continue;
        }
        for (int64_t s = 0; s < csteps; s++) {
            _tile_loadd(4, x0 + s * 32, lda);
            _tile_loadd(6, w0 + s * 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            if (nt == 2) {
                _tile_loadd(7, w1 + s * 512, 64);
                _tile_dpbf16ps(1, 4, 7);
            }
            if (mt == 2) {
                _tile_loadd(5, x1 + s * 32, lda);
                _tile_dpbf16ps(2, 5, 6);
                if (nt == 2) _tile_dpbf16ps(3, 5, 7);
            }
        }
    }
    _tile_stored(0, c, ldc * 4);
    if (nt == 2) _tile_stored(1, c + 16, ldc * 4);
    if (mt == 2) {
        _tile_stored(2, c + 16 * ldc, ldc * 4);
        if (nt == 2) _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
    }
}
