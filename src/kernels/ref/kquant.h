/* q4_K / q5_K super-block facts the kernels share (the formats layer's
   codec, src/formats/kquants.c, writes them): 144 / 176 bytes, f16 d at
   0, f16 dmin at 2, 12 bytes of 6-bit sub-scales and mins at 4, q5_K's
   qh[32] at 16, then qs[128] (at 16 / 48). */
#ifndef TOPS_KERNELS_REF_KQUANT_H
#define TOPS_KERNELS_REF_KQUANT_H

#include <stdint.h>
#include <string.h>

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

/* All eight at once from three little-endian words of the same bytes:
   sc[0..3] / m[0..3] are the low 6 bits of bytes 0..3 / 4..7; sc[4..7]
   / m[4..7] take the low / high nibble of bytes 8..11 and, as bits 4..5,
   the top 2 bits of bytes 0..3 / 4..7.  Byte j of *sc and *m is j's. */
static inline void tops__kquant_scales8(const uint8_t *s, uint64_t *sc, uint64_t *m) {
    uint32_t w0, w1, w2;
    memcpy(&w0, s, 4);
    memcpy(&w1, s + 4, 4);
    memcpy(&w2, s + 8, 4);
    const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
    *sc = (uint64_t)(w0 & lo6) | (uint64_t)((w2 & lo4) | ((w0 >> 6) & lo2) << 4) << 32;
    *m = (uint64_t)(w1 & lo6) | (uint64_t)(((w2 >> 4) & lo4) | ((w1 >> 6) & lo2) << 4) << 32;
}

/* iq4_xs (136-byte super-blocks: f16 d, scales_h, scales_l[4], then 8 x
   16 bytes of nibbles): the scale of each sub-block of 32 from element k0
   on, n elements, d * (ls - 32) * mul (0 past K), d decoded once per
   super-block by f16 (the level's f16 decoder: the same value). */
static inline void tops__subscale_scales(const uint8_t *row, int64_t block_bytes, int64_t k, int64_t k0, int64_t n,
                                         float mul, float *scale, float (*f16)(uint16_t)) {
    float d = 0.0f;
    int64_t at = -1;
    for (int64_t b = 0; b < n / 32; b++) {
        const int64_t kb = k0 + b * 32;
        if (kb >= k) {
            scale[b] = 0.0f;
            continue;
        }
        const uint8_t *blk = row + (kb / 256) * block_bytes;
        uint16_t h, hi;
        memcpy(&hi, blk + 2, 2);
        if (kb / 256 != at) {
            memcpy(&h, blk, 2);
            d = f16(h), at = kb / 256;
        }
        const int j = (int)(kb % 256) / 32;
        const int ls = (((blk[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((hi >> (2 * j)) & 3) << 4)) - 32;
        scale[b] = d * (float)ls * mul;
    }
}

#endif
