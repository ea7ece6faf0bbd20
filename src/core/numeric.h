/* Pure scalar casts between f32 and the element types of FORMATS.md
   section 1 (f16, bf16, the minifloats, e8m0, ue4m3, small integers,
   mxint8): the scalar truth that the kernels, the quantizers and the
   decoders share.  Below every layer: memory and arithmetic only, no
   tensor, format or dtype (formats/elem.h adds the per-dtype entry
   points).
   - sat = 0 is the default cast: round to nearest, ties to even, f32
     subnormals included (ml_dtypes' default cast, and numpy's for f16, i8,
     u8, wherever they implement that rule).  e4m3 overflows to NaN, e5m2
     to Inf, the finite-only fp6/fp4 saturate and map +NaN to -0 and -NaN
     to +0 (ml_dtypes' quirk), e8m0 is the nearest power of two (below)
     and maps 0 and negatives to NaN; integers truncate toward zero and
     wrap modulo 2^bits (tops__f32_trunc_wrap).
   - sat = 1 is what quantizers use: finite overflow and +-Inf clamp to
     +-max where the type has no Inf (e5m2, f16, bf16 keep Inf); NaN stays
     NaN where the type has one; integers round to nearest even and clamp
     (NaN -> 0, +-Inf -> the bound); e8m0 clamps to [2^-127, 2^127] (0 and
     negatives -> 0x00; NaN and Inf -> 0xFF). */
#ifndef TOPS_CORE_NUMERIC_H
#define TOPS_CORE_NUMERIC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- bits, f16, bf16 ------------------------------------------------------------ */

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

/* The f16 at p (any alignment, host byte order) as f32; v stored there as f16. */
static inline float tops__f16_at(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return tops__f16_to_f32(h);
}
static inline void tops__f16_put(void *p, float v) {
    const uint16_t h = tops__f32_to_f16(v);
    memcpy(p, &h, 2);
}

static inline uint16_t tops__f32_to_bf16(float f) {
    uint32_t x = tops__f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((x >> 16) & 0x8000u) | 0x7fc0u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static inline float tops__bf16_to_f32(uint16_t h) { return tops__bits_f32((uint32_t)h << 16); }

/* ---- small-float layouts ---------------------------------------------------- */

/* One sign-magnitude minifloat layout (e4m3, e5m2, e2m3, e3m2, e2m1). */
typedef struct tops__minifloat {
    int mbits, bias;
    uint32_t max_mag;   /* magnitude code of the largest finite value */
    uint32_t sign_bit;  /* 1 << (total bits - 1) */
    uint32_t inf_mag;   /* magnitude code of Inf; 0 = no Inf */
    uint32_t nan_mag;   /* magnitude code ml_dtypes writes for NaN; 0 = no NaN */
} tops__minifloat;

#define TOPS__MF_E4M3 ((tops__minifloat){3, 7, 0x7Eu, 0x80u, 0u, 0x7Fu})
#define TOPS__MF_E5M2 ((tops__minifloat){2, 15, 0x7Bu, 0x80u, 0x7Cu, 0x7Eu})
#define TOPS__MF_E2M3 ((tops__minifloat){3, 1, 0x1Fu, 0x20u, 0u, 0u})
#define TOPS__MF_E3M2 ((tops__minifloat){2, 3, 0x1Fu, 0x20u, 0u, 0u})
#define TOPS__MF_E2M1 ((tops__minifloat){1, 1, 0x7u, 0x8u, 0u, 0u})

/* f32 -> minifloat code, round to nearest even (subnormals included). */
static inline uint32_t tops__mf_encode(float f, tops__minifloat t, int sat) {
    uint32_t x = tops__f32_bits(f);
    uint32_t sign = (x >> 31) ? t.sign_bit : 0u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) {
        if (t.nan_mag) return sign | t.nan_mag;
        return sign ^ t.sign_bit; /* ml_dtypes' quirk: +NaN -> -0, -NaN -> +0 */
    }
    if (ax == 0x7f800000u) {
        if (t.inf_mag) return sign | t.inf_mag;
        return sign | (sat || !t.nan_mag ? t.max_mag : t.nan_mag);
    }
    uint32_t mag;
    /* Below the smallest normal of the target: add a power of two whose f32
       ulp is the target's subnormal step, so the FPU rounds (RNE) for us. */
    uint32_t min_normal_bits = (uint32_t)(127 + 1 - t.bias) << 23;
    if (ax < min_normal_bits) {
        uint32_t magic_bits = (uint32_t)(127 + 1 - t.bias - t.mbits + 23) << 23;
        float r = tops__bits_f32(ax) + tops__bits_f32(magic_bits);
        mag = tops__f32_bits(r) - magic_bits;
    } else {
        int shift = 23 - t.mbits;
        uint32_t rounded = ax + ((ax >> shift) & 1u) + ((1u << (shift - 1)) - 1u);
        mag = (rounded >> shift) - ((uint32_t)(127 - t.bias) << t.mbits);
        /* Huge inputs would wrap the subtraction only if ax were below the
           normal range, which the branch above excludes. */
    }
    if (mag > t.max_mag) {
        if (sat) return sign | t.max_mag;
        if (t.inf_mag) return sign | t.inf_mag;
        return sign | (t.nan_mag ? t.nan_mag : t.max_mag);
    }
    return sign | mag;
}

/* minifloat code -> f32 (exact); NaN codes give sign | 0x7fc00000. */
static inline float tops__mf_decode(uint32_t code, tops__minifloat t) {
    uint32_t sign = (code & t.sign_bit) ? 0x80000000u : 0u;
    uint32_t mag = code & (t.sign_bit - 1u);
    if (t.nan_mag && mag > t.max_mag && mag != t.inf_mag) return tops__bits_f32(sign | 0x7fc00000u);
    if (t.inf_mag && mag == t.inf_mag) return tops__bits_f32(sign | 0x7f800000u);
    uint32_t e = mag >> t.mbits, m = mag & ((1u << t.mbits) - 1u);
    float v;
    if (e == 0) {
        /* m * 2^(1 - bias - mbits): exact in f32 for every layout here. */
        v = (float)m * tops__bits_f32((uint32_t)(127 + 1 - t.bias - t.mbits) << 23);
    } else {
        v = tops__bits_f32(((e + 127u - (uint32_t)t.bias) << 23) | (m << (23 - t.mbits)));
    }
    return tops__bits_f32(tops__f32_bits(v) | sign);
}

static inline uint8_t tops__f32_to_e4m3(float f, int sat) { return (uint8_t)tops__mf_encode(f, TOPS__MF_E4M3, sat); }
static inline uint8_t tops__f32_to_e5m2(float f, int sat) { return (uint8_t)tops__mf_encode(f, TOPS__MF_E5M2, sat); }
static inline uint8_t tops__f32_to_e2m3(float f, int sat) { return (uint8_t)tops__mf_encode(f, TOPS__MF_E2M3, sat); }
static inline uint8_t tops__f32_to_e3m2(float f, int sat) { return (uint8_t)tops__mf_encode(f, TOPS__MF_E3M2, sat); }
static inline uint8_t tops__f32_to_e2m1(float f, int sat) { return (uint8_t)tops__mf_encode(f, TOPS__MF_E2M1, sat); }
static inline float tops__e4m3_to_f32(uint32_t c) { return tops__mf_decode(c & 0xFFu, TOPS__MF_E4M3); }
static inline float tops__e5m2_to_f32(uint32_t c) { return tops__mf_decode(c & 0xFFu, TOPS__MF_E5M2); }
static inline float tops__e2m3_to_f32(uint32_t c) { return tops__mf_decode(c & 0x3Fu, TOPS__MF_E2M3); }
static inline float tops__e3m2_to_f32(uint32_t c) { return tops__mf_decode(c & 0x3Fu, TOPS__MF_E3M2); }
static inline float tops__e2m1_to_f32(uint32_t c) { return tops__mf_decode(c & 0xFu, TOPS__MF_E2M1); }
/* Code i of 6-bit codes packed four in three bytes, lowest first (FORMATS.md),
   from a row starting on a three-byte unit: no byte past code i's. */
static inline uint32_t tops__fp6_code(const uint8_t *row, int64_t i) {
    const uint8_t *p = row + (i * 6 >> 3);
    const unsigned sh = (unsigned)(i * 6 & 7);
    const uint32_t v = sh > 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : p[0];
    return (v >> sh) & 0x3Fu;
}
/* Element i of such a row, e2m3 (e3m2 set: e3m2). */
static inline float tops__fp6_to_f32(const uint8_t *row, int64_t i, int e3m2) {
    const uint32_t c = tops__fp6_code(row, i);
    return e3m2 ? tops__e3m2_to_f32(c) : tops__e2m3_to_f32(c);
}

/* ue4m3 (NVFP4 block scales): e4m3 with the sign bit ignored. */
static inline uint8_t tops__f32_to_ue4m3(float f, int sat) {
    return (uint8_t)(tops__mf_encode(fabsf(f), TOPS__MF_E4M3, sat) & 0x7Fu);
}
static inline float tops__ue4m3_to_f32(uint32_t c) { return tops__mf_decode(c & 0x7Fu, TOPS__MF_E4M3); }

/* ---- e8m0 ----------------------------------------------------------------------- */

/* Power of two 2^e for e in [-149, 127], exact (subnormals included). */
static inline float tops__exp2i(int e) {
    if (e >= -126) return tops__bits_f32((uint32_t)(e + 127) << 23);
    return tops__bits_f32(1u << (e + 149));
}

/* e8m0 of a finite positive x is the nearest power of two 2^e, -127 <= e
   <= 127 (FORMATS.md section 1), f32 subnormals included: below 2^-126 the
   candidates are 2^-127 (code 0x00) and 2^-126 (0x01), so 2^-127 * (1 +
   2^-22) is 0x00.  A tie (x = 1.5 * 2^e, halfway between 2^e and 2^(e+1))
   goes to the even code; 1.5 * 2^127 is such a tie and gives 0xFE.  Above
   it the value overflows: 0xFF (NaN) by default, 0xFE saturating.  NaN and
   +-Inf give 0xFF in both modes (e8m0 has no Inf); 0 and negatives 0xFF by
   default, 0x00 saturating.  (ml_dtypes 0.7 rounds every tie up and
   overflows 1.5 * 2^127: the tests mark those cases.) */
static inline uint8_t tops__f32_to_e8m0(float f, int sat) {
    uint32_t x = tops__f32_bits(f);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return 0xFFu;
    if (ax == 0 || (x >> 31)) return sat ? 0x00u : 0xFFu;
    if (ax < 0x00800000u) return ax > 0x00600000u ? 0x01u : 0x00u; /* f32 subnormal: 1.5 * 2^-127 ties to 0x00 */
    uint32_t code = ax >> 23, mant = ax & 0x7fffffu; /* the biased exponents coincide: 2^floor(log2 x) */
    if (mant > 0x400000u || (mant == 0x400000u && (code & 1u))) code++;
    if (code > 0xFEu) return sat ? 0xFEu : 0xFFu;
    return (uint8_t)code;
}
static inline float tops__e8m0_to_f32(uint32_t c) {
    c &= 0xFFu; /* 2^(c - 127) by its bits, selects only (vectorisable): 0 the subnormal 2^-127, 255 NaN */
    return tops__bits_f32(c == 0xFFu ? 0x7fc00000u : c ? c << 23 : 0x00400000u);
}
/* ggml's mxfp4 block scale: the e8m0 byte read as 2^(e - 128) (its e2m1
   values stored doubled); 0xFF is NaN (FORMATS.md section 4). */
static inline float tops__e8m0_half_to_f32(uint32_t c) {
    c &= 0xFFu;
    if (c == 0xFFu) return tops__bits_f32(0x7fc00000u);
    return tops__exp2i((int)c - 128);
}

/* ---- integers ------------------------------------------------------------------ */

/* Truncates toward zero and keeps the low bits (two's complement wrap),
   as a C conversion through int64 does for the casts here (8 bits or
   fewer): an f32 of magnitude >= 2^31 is a multiple of 2^8, so its low
   bits are 0, which is what this returns for it, and for +-Inf and NaN
   (where C is undefined).  i4(9.7) = 9 - 16 = -7, u4(-1) = 15. */
static inline uint32_t tops__f32_trunc_wrap(float f) {
    if (!(fabsf(f) < 2147483648.0f)) return 0u;
    return (uint32_t)(int32_t)f;
}
/* Quantizers: round to nearest even, clamp to [lo, hi]; NaN -> 0. */
static inline int32_t tops__f32_rne_clamp(float f, int32_t lo, int32_t hi) {
    if (f != f) return 0;
    if (f <= (float)lo) return lo;
    if (f >= (float)hi) return hi;
    return (int32_t)nearbyintf(f);
}
static inline uint32_t tops__f32_to_int_code(float f, int bits, int is_signed, int sat) {
    uint32_t mask = bits >= 32 ? 0xffffffffu : ((1u << bits) - 1u);
    if (!sat) return tops__f32_trunc_wrap(f) & mask;
    int32_t lo = is_signed ? -(1 << (bits - 1)) : 0;
    int32_t hi = is_signed ? (1 << (bits - 1)) - 1 : (1 << bits) - 1;
    return (uint32_t)tops__f32_rne_clamp(f, lo, hi) & mask;
}
/* Sign-extends a `bits`-wide two's complement code. */
static inline int32_t tops__sext(uint32_t code, int bits) {
    uint32_t m = 1u << (bits - 1);
    code &= (m << 1) - 1u;
    return (int32_t)(code ^ m) - (int32_t)m;
}

/* mxint8: two's complement times 2^-6 (range -2 .. 127/64); not in
   ml_dtypes, so both modes round to nearest even and clamp (NaN -> 0). */
static inline uint8_t tops__f32_to_mxint8(float f) {
    return (uint8_t)tops__f32_rne_clamp(f * 64.0f, -128, 127);
}
static inline float tops__mxint8_to_f32(uint32_t c) { return (float)tops__sext(c, 8) * 0.015625f; }

#endif
