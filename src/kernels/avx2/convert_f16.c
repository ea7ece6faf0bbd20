/* AVX2 + F16C rows; the same bits as the scalar rows (RNE everywhere; NaN
   fixed up after F16C so payloads follow numpy, like the scalar rows). */
#include "kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

static inline __m128i f32x8_to_f16(__m256 v) {
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* F16C quietens NaN; numpy keeps the top payload bits (0 -> 1). */
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    if (!_mm256_testz_ps(nan, nan)) {
        __m256i x = _mm256_castps_si256(v);
        __m256i payload = _mm256_srli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffff)), 13);
        __m256i zero = _mm256_cmpeq_epi32(payload, _mm256_setzero_si256());
        payload = _mm256_or_si256(payload, _mm256_and_si256(zero, _mm256_set1_epi32(1)));
        __m256i sign = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x8000));
        __m256i want = _mm256_or_si256(_mm256_or_si256(sign, payload), _mm256_set1_epi32(0x7c00));
        __m128i want16 = _mm_packus_epi32(_mm256_castsi256_si128(want), _mm256_extracti128_si256(want, 1));
        __m256i m32 = _mm256_castps_si256(nan);
        __m128i m16 = _mm_packs_epi32(_mm256_castsi256_si128(m32), _mm256_extracti128_si256(m32, 1));
        h = _mm_blendv_epi8(h, want16, m16);
    }
    return h;
}

/* F16C quietens signalling NaN; numpy keeps the payload as it is. */
static inline __m256 f16x8_to_f32(__m128i h) {
    __m256 f = _mm256_cvtph_ps(h);
    __m256i x = _mm256_cvtepu16_epi32(h);
    __m256i mag = _mm256_and_si256(x, _mm256_set1_epi32(0x7fff));
    __m256i snan = _mm256_and_si256(_mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7c00)),
                                    _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7e00), mag));
    return _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_and_si256(snan, _mm256_set1_epi32(0x00400000)),
                                                   _mm256_castps_si256(f)));
}

void tops__avx2_f32_to_f16_row(uint16_t *dst, const float *src, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), f32x8_to_f16(_mm256_loadu_ps(src + i)));
    if (i < n) {
        float tmp[8] = {0};
        uint16_t out[8];
        memcpy(tmp, src + i, (size_t)(n - i) * sizeof(float));
        _mm_storeu_si128((__m128i *)out, f32x8_to_f16(_mm256_loadu_ps(tmp)));
        memcpy(dst + i, out, (size_t)(n - i) * sizeof(uint16_t));
    }
}

void tops__avx2_f16_to_f32_row(float *dst, const uint16_t *src, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, f16x8_to_f32(_mm_loadu_si128((const __m128i *)(src + i))));
    if (i < n) {
        uint16_t tmp[8] = {0};
        float out[8];
        for (int64_t j = i; j < n; j++) tmp[j - i] = src[j];
        _mm256_storeu_ps(out, f16x8_to_f32(_mm_loadu_si128((const __m128i *)tmp)));
        for (int64_t j = i; j < n; j++) dst[j] = out[j - i];
    }
}

void tops__avx2_f32_to_bf16_row(uint16_t *dst, const float *src, int64_t n) {
    int64_t i = 0;
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(src + i);
        __m256i x = _mm256_castps_si256(v);
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(bias, lsb)), 16);
        __m256i nanv = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x8000)),
                                       _mm256_set1_epi32(0x7fc0));
        __m256i isnan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        r = _mm256_blendv_epi8(r, nanv, isnan);
        /* pack 8 x u32 (each < 65536) into 8 x u16 */
        __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
        _mm_storeu_si128((__m128i *)(dst + i), _mm_packus_epi32(lo, hi));
    }
    for (; i < n; i++) {
        uint32_t x;
        memcpy(&x, src + i, 4);
        if ((x & 0x7fffffffu) > 0x7f800000u) dst[i] = (uint16_t)(((x >> 16) & 0x8000u) | 0x7fc0u);
        else dst[i] = (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    }
}

void tops__avx2_bf16_to_f32_row(float *dst, const uint16_t *src, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    for (; i < n; i++) {
        uint32_t x = (uint32_t)src[i] << 16;
        memcpy(dst + i, &x, 4);
    }
}
