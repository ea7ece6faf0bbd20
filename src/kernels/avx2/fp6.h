/* Sixteen fp6 codes (e2m3 or e3m2, FORMATS.md: four codes in three bytes,
   lowest first) from the 12 bytes at p, as sixteen f16 bit patterns whose
   values are the codes' times 2^-14 (e2m3) or 2^-12 (e3m2), exactly:
   subnormals included, both layouts being sign-magnitude with no
   Inf or NaN.  Each code's two bytes are gathered into a word (pshufb), the
   word shifted left so that the code sits in bits 10..15 (the sign at 15),
   then shifted right arithmetically so that its magnitude lands on the f16
   exponent and mantissa fields (e2m3: eemmm at 7..11; e3m2: eeemm at
   8..12), and the sign copies and the neighbours' bits masked off.  Reads
   exactly 12 bytes (tops__fp6_unit, kernels.h, is the factor back).
   Shared by the AVX2 and AVX-512 kernels. */
#ifndef TOPS_KERNELS_AVX2_FP6_H
#define TOPS_KERNELS_AVX2_FP6_H

#include "kernels/kernels.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* Sixteen codes from their 12 bytes as words, each code in bits 10..15. */
static inline __attribute__((always_inline)) __m256i tops__fp6x16_lifted(__m128i raw) {
    /* word j of each 128-bit lane L (code 8 L + j) from bytes 6 L + 3 j / 4 and the next */
    const __m256i gather = _mm256_setr_epi8(0, 1, 0, 1, 1, 2, 2, 3, 3, 4, 3, 4, 4, 5, 5, 6,  /* codes 0..7 */
                                            6, 7, 6, 7, 7, 8, 8, 9, 9, 10, 9, 10, 10, 11, 11, 12); /* 8..15 */
    /* code j % 4 starts at bit 0, 6, 4, 2 of its word: times 2^(10 - start) */
    const __m256i lift = _mm256_setr_epi16(1024, 16, 64, 256, 1024, 16, 64, 256, 1024, 16, 64, 256, 1024, 16, 64, 256);
    return _mm256_mullo_epi16(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(raw), gather), lift);
}

static inline __attribute__((always_inline)) __m256i tops__fp6x16_half_bytes(__m128i raw, int e3m2) {
    const __m256i w = tops__fp6x16_lifted(raw);
    if (e3m2) return _mm256_and_si256(_mm256_srai_epi16(w, 2), _mm256_set1_epi16((short)0x9F00));
    return _mm256_and_si256(_mm256_srai_epi16(w, 3), _mm256_set1_epi16((short)0x8F80));
}

/* The 12 bytes at p, read exactly (no byte past them). */
static inline __attribute__((always_inline)) __m128i tops__fp6_load12(const uint8_t *p) {
    int32_t hi;
    memcpy(&hi, p + 8, 4);
    return _mm_insert_epi32(_mm_loadl_epi64((const __m128i *)p), hi, 2);
}

static inline __attribute__((always_inline)) __m256i tops__fp6x16_half(const uint8_t *p, int e3m2) {
    return tops__fp6x16_half_bytes(tops__fp6_load12(p), e3m2);
}

#endif
