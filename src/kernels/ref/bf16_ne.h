/* bf16 as the AVX-512 BF16 conversions compute it, for the scalar twins of
   the AMX kernels: round to nearest even, subnormal inputs as zero
   (keeping the sign), NaN quiet (vcvtne2ps2bf16); and bf16 back to f32. */
#ifndef TOPS_KERNELS_REF_BF16_NE_H
#define TOPS_KERNELS_REF_BF16_NE_H

#include <stdint.h>
#include <string.h>

static inline uint16_t tops__bf16_ne(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    if ((b & 0x7f800000u) == 0) return (uint16_t)((b >> 16) & 0x8000u);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40u);
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

static inline float tops__bf16_to_f32(uint16_t h) {
    const uint32_t b = (uint32_t)h << 16;
    float x;
    memcpy(&x, &b, 4);
    return x;
}

#endif
