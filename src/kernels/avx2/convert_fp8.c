/* AVX2 fp8 / fp6 / fp4 / int4 rows: eight elements per step (fp6:
   sixteen) with the same integer rounding as core/numeric.h (RNE on the
   f32 bits for normals, the FPU's RNE through a magic addend for
   subnormals), so every bit matches the scalar rows; tails run the scalar
   code itself. */
#include "kernels/kernels.h"
#include "core/numeric.h"
#include "kernels/avx2/fp6.h"

#include <immintrin.h>
#include <string.h>

/* One minifloat layout as vector constants (see tops__minifloat). */
typedef struct mf8 {
    int mbits, bias;
    int max_mag, inf_mag, nan_mag;
} mf8;

static inline __m256i encode8(__m256 v, mf8 t, int sat) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i ax = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(x, 24), _mm256_set1_epi32(0x80));
    const int shift = 23 - t.mbits;
    /* Normals: round the f32 mantissa to mbits (ties to even) and rebias. */
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(ax, shift), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_add_epi32(ax, _mm256_add_epi32(lsb, _mm256_set1_epi32((1 << (shift - 1)) - 1)));
    __m256i normal = _mm256_sub_epi32(_mm256_srli_epi32(rounded, shift), _mm256_set1_epi32((127 - t.bias) << t.mbits));
    /* Below the smallest normal: add a power of two whose ulp is the
       subnormal step; the FPU rounds to nearest even. */
    const int magic_bits = (127 + 1 - t.bias - t.mbits + 23) << 23;
    __m256 magic = _mm256_castsi256_ps(_mm256_set1_epi32(magic_bits));
    __m256i sub = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(ax), magic)),
                                   _mm256_set1_epi32(magic_bits));
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32((127 + 1 - t.bias) << 23), ax);
    __m256i mag = _mm256_blendv_epi8(normal, sub, is_sub);
    /* Overflow (finite or Inf) and NaN. */
    __m256i over = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(t.max_mag));
    int over_code = sat ? t.max_mag : (t.inf_mag ? t.inf_mag : t.nan_mag);
    mag = _mm256_blendv_epi8(mag, _mm256_set1_epi32(over_code), over);
    if (t.inf_mag) {
        __m256i is_inf = _mm256_cmpeq_epi32(ax, _mm256_set1_epi32(0x7f800000));
        mag = _mm256_blendv_epi8(mag, _mm256_set1_epi32(t.inf_mag), is_inf);
    }
    __m256i is_nan = _mm256_cmpgt_epi32(ax, _mm256_set1_epi32(0x7f800000));
    mag = _mm256_blendv_epi8(mag, _mm256_set1_epi32(t.nan_mag), is_nan);
    return _mm256_or_si256(mag, sign);
}

static inline void store8_bytes(uint8_t *dst, __m256i r) {
    __m128i p16 = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storel_epi64((__m128i *)dst, _mm_packus_epi16(p16, p16));
}

static inline __m256i load8_bytes(const uint8_t *src) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)src));
}

/* Decodes 8 codes: normal magnitudes by shifting into the f32 fields,
   subnormals as m * 2^(1 - bias - mbits). */
static inline __m256 decode8(__m256i c, mf8 t) {
    __m256i mag = _mm256_and_si256(c, _mm256_set1_epi32(0x7f));
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
    __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(mag, 23 - t.mbits), _mm256_set1_epi32((127 - t.bias) << 23));
    __m256 step = _mm256_castsi256_ps(_mm256_set1_epi32((127 + 1 - t.bias - t.mbits) << 23));
    __m256i sub = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(mag), step));
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(1 << t.mbits), mag);
    __m256i r = _mm256_blendv_epi8(normal, sub, is_sub);
    if (t.inf_mag) {
        __m256i is_inf = _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(t.inf_mag));
        r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7f800000), is_inf);
    }
    __m256i is_nan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(t.inf_mag ? t.inf_mag : t.max_mag));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc00000), is_nan);
    return _mm256_castsi256_ps(_mm256_or_si256(r, sign));
}

static const mf8 E4M3 = {3, 7, 0x7E, 0, 0x7F};
static const mf8 E5M2 = {2, 15, 0x7B, 0x7C, 0x7E};

void tops__avx2_f32_to_e4m3_row(uint8_t *dst, const float *src, int64_t n, int sat) {
    int64_t i = 0;
    if (sat)
        for (; i + 8 <= n; i += 8) store8_bytes(dst + i, encode8(_mm256_loadu_ps(src + i), E4M3, 1));
    else
        for (; i + 8 <= n; i += 8) store8_bytes(dst + i, encode8(_mm256_loadu_ps(src + i), E4M3, 0));
    for (; i < n; i++) dst[i] = tops__f32_to_e4m3(src[i], sat);
}

void tops__avx2_f32_to_e5m2_row(uint8_t *dst, const float *src, int64_t n, int sat) {
    int64_t i = 0;
    if (sat)
        for (; i + 8 <= n; i += 8) store8_bytes(dst + i, encode8(_mm256_loadu_ps(src + i), E5M2, 1));
    else
        for (; i + 8 <= n; i += 8) store8_bytes(dst + i, encode8(_mm256_loadu_ps(src + i), E5M2, 0));
    for (; i < n; i++) dst[i] = tops__f32_to_e5m2(src[i], sat);
}

void tops__avx2_e4m3_to_f32_row(float *dst, const uint8_t *src, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, decode8(load8_bytes(src + i), E4M3));
    for (; i < n; i++) dst[i] = tops__e4m3_to_f32(src[i]);
}

void tops__avx2_e5m2_to_f32_row(float *dst, const uint8_t *src, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, decode8(load8_bytes(src + i), E5M2));
    for (; i < n; i++) dst[i] = tops__e5m2_to_f32(src[i]);
}

/* Eight nibbles from four bytes, element 2i in the low half of byte i. */
static inline __m256i nibbles8(const uint8_t *src) {
    uint32_t w;
    memcpy(&w, src, 4);
    __m256i v = _mm256_set1_epi32((int)w);
    __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    return _mm256_and_si256(_mm256_srlv_epi32(v, sh), _mm256_set1_epi32(0xF));
}

void tops__avx2_e2m1_to_f32_row(float *dst, const uint8_t *src, int64_t n) {
    const __m256 mags = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i q = nibbles8(src + i / 2);
        __m256 m = _mm256_permutevar8x32_ps(mags, q); /* uses the low 3 bits */
        __m256i sign = _mm256_slli_epi32(_mm256_and_si256(q, _mm256_set1_epi32(8)), 28);
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(m), sign)));
    }
    for (; i < n; i++) dst[i] = tops__e2m1_to_f32((uint32_t)(src[i >> 1] >> ((i & 1) * 4)));
}

/* 6-bit codes, sixteen (12 bytes) a step (kernels/avx2/fp6.h). */
void tops__avx2_fp6_to_f32_row(float *dst, const uint8_t *src, int64_t n, int e3m2) {
    const __m256 unit = _mm256_set1_ps(tops__fp6_unit(e3m2));
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i h = tops__fp6x16_half(src + i / 4 * 3, e3m2);
        _mm256_storeu_ps(dst + i, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), unit));
        _mm256_storeu_ps(dst + i + 8, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), unit));
    }
    for (; i < n; i++) dst[i] = tops__fp6_to_f32(src, i, e3m2);
}

void tops__avx2_i4_to_f32_row(float *dst, const uint8_t *src, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i q = _mm256_srai_epi32(_mm256_slli_epi32(nibbles8(src + i / 2), 28), 28);
        _mm256_storeu_ps(dst + i, _mm256_cvtepi32_ps(q));
    }
    for (; i < n; i++) dst[i] = (float)tops__sext((uint32_t)(src[i >> 1] >> ((i & 1) * 4)), 4);
}
