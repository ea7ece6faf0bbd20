/* The eight-lane f32 sum the four-row and super-block dots promise
   (kernels/kernels.h): ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
   Shared by the AVX2 and AVX-512 kernels that owe those bits. */
#ifndef TOPS_KERNELS_AVX2_HSUM_H
#define TOPS_KERNELS_AVX2_HSUM_H

#include <immintrin.h>

static inline float tops__hsum8_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#endif
