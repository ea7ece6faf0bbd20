/* q4_K / q5_K super-block facts the kernels share (the formats layer's
   codec, src/formats/kquants.c, writes them): 144 / 176 bytes, f16 d at
   0, f16 dmin at 2, 12 bytes of 6-bit sub-scales and mins at 4, q5_K's
   qh[32] at 16, then qs[128] (at 16 / 48). */
#ifndef TOPS_KERNELS_REF_KQUANT_H
#define TOPS_KERNELS_REF_KQUANT_H

#include <stdint.h>

enum { TOPS__KQ_QS4 = 16, TOPS__KQ_QS5 = 48, TOPS__KQ_QH = 16, TOPS__KQ_SCALES = 4 };

/* Sub-scale and min of sub-block j (0..7) from the 12 scale bytes s. */
static inline void tops__kquant_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

#endif
