/* Inline scalar casts shared by every layer (formats, reference kernels). */
#ifndef TOPS_KERNELS_REF_SCALAR_CASTS_H
#define TOPS_KERNELS_REF_SCALAR_CASTS_H

#include <stdint.h>
#include <string.h>


static inline uint32_t tops__f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float tops__bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t tops__f32_to_f16(float f) {
    uint32_t x = tops__f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) {                                       /* NaN: numpy keeps the top payload bits */
        uint16_t payload = (uint16_t)((ax & 0x7fffffu) >> 13);
        return (uint16_t)(sign | 0x7c00u | (payload ? payload : 1u));
    }
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);     /* overflow (65520 rounds up) -> Inf */
    if (ax < 0x38800000u) {                                       /* below 2^-14: subnormal or zero */
        /* Add 0.5 (as 2^-1 in f32) so the FPU rounds to a 2^-24 grid, RNE. */
        float r = tops__bits_f32(ax) + 0.5f;
        return (uint16_t)(sign | (uint16_t)(tops__f32_bits(r) - 0x3f000000u));
    }
    uint32_t mant_odd = (ax >> 13) & 1u;
    ax += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round */
    return (uint16_t)(sign | (uint16_t)(ax >> 13));
}

static inline float tops__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t out;
    if (exp == 0x1f) {
        out = sign | 0x7f800000u | (mant << 13); /* numpy keeps the payload as is */
    } else if (exp == 0) {
        float v = (float)mant * 5.9604644775390625e-08f; /* 2^-24, exact */
        out = sign | tops__f32_bits(v);
    } else {
        out = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    return tops__bits_f32(out);
}

static inline uint16_t tops__f32_to_bf16(float f) {
    uint32_t x = tops__f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((x >> 16) & 0x8000u) | 0x7fc0u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static inline float tops__bf16_to_f32(uint16_t h) { return tops__bits_f32((uint32_t)h << 16); }

#endif
