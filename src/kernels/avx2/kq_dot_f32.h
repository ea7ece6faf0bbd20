/* The f32 steps of the in-place TOPS__IF_SUPER_MIN (q4_K / q5_K) row dot
   (tops__dot_super_fn, kernels/kernels.h), shared by the AVX2 level
   (dot_min_body.h) and the AVX-512 VNNI level (avx512/dot_min_vnni.c), so
   both give the scalar reference's bits.  The including file defines
   TOPS_KQ_CODES_T (one super-block's codes), TOPS_KQ_CODES(blk, five, c)
   (fills *c) and TOPS_KQ_SUMS(c, aq): the eight exact i32 sub-block sums
   against one activation row, sub-block j in lane j of a __m256i; it
   compiles this with AVX2, FMA and F16C at least.  Defines kq_dot_min and
   kq_dot_min_super. */
#ifndef TOPS_KQ_SUMS
#error "define TOPS_KQ_SUMS before including kq_dot_f32.h"
#endif

#include <string.h>

#include "kernels/avx2/hsum.h"

#include "kernels/ref/kquant.h"

/* Lane j = sub-block j; scales and mins as the scalar rows compute them
   (d * sc * mul, dmin * m * mul), then as * scale; the codes split once a
   super-block for the m activation rows. */
static inline __attribute__((always_inline)) void kq_dot_min(const uint8_t *blocks, float mul,
                                                             const tops__super_act *act, const int m, int64_t nsb,
                                                             int five, float *out) {
    const int bytes = five ? 176 : 144;
    const __m256 vmul = _mm256_set1_ps(mul);
    __m256 acc[TOPS__SUPER_MAX_M];
    for (int i = 0; i < m; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *blk = blocks + s * bytes;
        /* about 3.5 KiB ahead (into the next rows: they follow in memory):
           2 super-blocks ahead left the loop waiting on its loads */
        _mm_prefetch((const char *)(blk + 24 * bytes), _MM_HINT_T0);
        _mm_prefetch((const char *)(blk + 24 * bytes + 64), _MM_HINT_T0);
        _mm_prefetch((const char *)(blk + 24 * bytes + 128), _MM_HINT_T0);
        TOPS_KQ_CODES_T codes;
        TOPS_KQ_CODES(blk, five, &codes);
        uint64_t sc, mn;
        tops__kquant_scales8(blk + TOPS__KQ_SCALES, &sc, &mn);
        uint16_t hd, hm;
        memcpy(&hd, blk, 2);
        memcpy(&hm, blk + 2, 2);
        const __m256 vsc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
        const __m256 vm = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn)));
        const __m256 scale = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(hd)), vsc), vmul);
        const __m256 min = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(hm)), vm), vmul);
        for (int i = 0; i < m; i++) {
            const __m256i sums = TOPS_KQ_SUMS(&codes, act[i].aq + s * 256);
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(_mm256_loadu_ps(act[i].as + s * 8), scale),
                                     acc[i]);
            acc[i] = _mm256_fnmadd_ps(_mm256_loadu_ps(act[i].amin + s * 8), min, acc[i]);
        }
    }
    for (int i = 0; i < m; i++) out[i] = tops__hsum8_ps(acc[i]);
}

static inline __attribute__((always_inline)) void kq_dot_min_m(const tops__int_layout *lay, const uint8_t *blocks,
                                                               float mul, const tops__super_act *act, const int m,
                                                               int64_t nsb, float *out) {
    if (lay->high_bit) kq_dot_min(blocks, mul, act, m, nsb, 1, out);
    else kq_dot_min(blocks, mul, act, m, nsb, 0, out);
}

static void kq_dot_min_super(const tops__int_layout *lay, const uint8_t *blocks, float mul, const tops__super_act *act,
                             int m, int64_t nsb, float *out) {
    TOPS__SUPER_INSTANCES(kq_dot_min_m);
}
