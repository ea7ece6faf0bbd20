/* The f32 steps of the in-place TOPS__IF_SUPER_MIN (q4_K / q5_K) row dot
   (tops__dot_super_fn, kernels/kernels.h), shared by the AVX2 level
   (dot_min_body.h) and the AVX-512 VNNI level (avx512/dot_min_vnni.c), so
   both give the scalar reference's bits.  The including file defines
   TOPS_KQ_SUMS(blk, aq, five): one super-block's eight exact i32 sub-block
   sums, sub-block j in lane j of a __m256i; it compiles this with AVX2,
   FMA and F16C at least.  Defines kq_dot_min and kq_dot_min_super. */
#ifndef TOPS_KQ_SUMS
#error "define TOPS_KQ_SUMS before including kq_dot_f32.h"
#endif

#include <string.h>

#include "kernels/ref/kquant.h"

/* Lane j = sub-block j; scales and mins as the scalar rows compute them
   (d * sc * mul, dmin * m * mul), then as * scale. */
static inline float kq_dot_min(const uint8_t *blocks, float mul, const int8_t *aq, const float *as,
                               const float *amin, int64_t nsb, int five) {
    const int bytes = five ? 176 : 144;
    const __m256 vmul = _mm256_set1_ps(mul);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *blk = blocks + s * bytes;
        /* about 3.5 KiB ahead (into the next rows: they follow in memory):
           2 super-blocks ahead left the loop waiting on its loads */
        _mm_prefetch((const char *)(blk + 24 * bytes), _MM_HINT_T0);
        _mm_prefetch((const char *)(blk + 24 * bytes + 64), _MM_HINT_T0);
        _mm_prefetch((const char *)(blk + 24 * bytes + 128), _MM_HINT_T0);
        const __m256i sums = TOPS_KQ_SUMS(blk, aq + s * 256, five);
        uint64_t sc, m;
        tops__kquant_scales8(blk + TOPS__KQ_SCALES, &sc, &m);
        uint16_t hd, hm;
        memcpy(&hd, blk, 2);
        memcpy(&hm, blk + 2, 2);
        const __m256 vsc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
        const __m256 vm = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m)));
        const __m256 scale = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(hd)), vsc), vmul);
        const __m256 min = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(hm)), vm), vmul);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(_mm256_loadu_ps(as + s * 8), scale), acc);
        acc = _mm256_fnmadd_ps(_mm256_loadu_ps(amin + s * 8), min, acc);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

static float kq_dot_min_super(const tops__int_layout *lay, const uint8_t *blocks, float mul, const int8_t *aq,
                              const float *as, const float *amin, int64_t nsb) {
    return lay->high_bit ? kq_dot_min(blocks, mul, aq, as, amin, nsb, 1) : kq_dot_min(blocks, mul, aq, as, amin, nsb, 0);
}
