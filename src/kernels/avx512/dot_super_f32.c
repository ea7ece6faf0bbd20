/* AVX-512 strict in-place q4_K / q5_K rows (tops__dot_super_f32_fn,
   kernels/kernels.h): per super-block the eight sub-blocks' scales and mins
   as the unpacker computes them (d * sc * mul, dmin * m * mul), each
   sub-block's 32 codes widened to f32 once and decoded in registers (q *
   scale - min, one FMA), then one FMA per element and activation row into
   16 f32 lanes, summed at the end.  The codes are split once for all m
   rows (m a constant per instance).  About 4 zmm operations per 16
   weights against the decoded rows' read of 4 bytes a weight. */
#include "kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

#include "kernels/ref/kquant.h"

static inline __attribute__((always_inline)) void super_min_f32(const tops__int_layout *lay, const uint8_t *blocks,
                                                                float mul, const float *a, int64_t lda, const int m,
                                                                int64_t nsb, float *out) {
    const int five = lay->high_bit, bytes = five ? 176 : 144;
    const __m128i m4 = _mm_set1_epi8(0x0F), one = _mm_set1_epi8(1);
    __m512 acc[TOPS__SUPER_MAX_M];
    for (int i = 0; i < m; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *blk = blocks + s * bytes;
        _mm_prefetch((const char *)(blk + 8 * bytes), _MM_HINT_T0);
        _mm_prefetch((const char *)(blk + 8 * bytes + 64), _MM_HINT_T0);
        _mm_prefetch((const char *)(blk + 8 * bytes + 128), _MM_HINT_T0);
        uint16_t hd, hm;
        memcpy(&hd, blk, 2);
        memcpy(&hm, blk + 2, 2);
        const float d = _cvtsh_ss(hd), dmin = _cvtsh_ss(hm);
        const uint8_t *qs = blk + (five ? TOPS__KQ_QS5 : TOPS__KQ_QS4), *qh = blk + TOPS__KQ_QH;
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            tops__kquant_scale_min(blk + TOPS__KQ_SCALES, j, &sc, &mn);
            const __m512 scale = _mm512_set1_ps(d * (float)sc * mul), min = _mm512_set1_ps(dmin * (float)mn * mul);
            __m512 w[2];
            for (int h = 0; h < 2; h++) { /* elements 16 h .. 16 h + 15 of sub-block j */
                __m128i q = _mm_loadu_si128((const __m128i *)(qs + 32 * (j / 2) + 16 * h));
                q = _mm_and_si128(j % 2 ? _mm_srli_epi16(q, 4) : q, m4);
                if (five) {
                    const __m128i hb = _mm_loadu_si128((const __m128i *)(qh + 16 * h));
                    const __m128i bit = _mm_and_si128(_mm_srl_epi16(hb, _mm_cvtsi32_si128(j)), one);
                    q = _mm_or_si128(q, _mm_slli_epi16(bit, 4));
                }
                w[h] = _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q)), scale, min);
            }
            for (int i = 0; i < m; i++) {
                const float *x = a + i * lda + s * 256 + 32 * j;
                acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(x), w[0], acc[i]);
                acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(x + 16), w[1], acc[i]);
            }
        }
    }
    for (int i = 0; i < m; i++) out[i] = _mm512_reduce_add_ps(acc[i]);
}

void tops__avx512_dot_super_min_f32(const tops__int_layout *lay, const uint8_t *blocks, float mul, const float *a,
                                    int64_t lda, int m, int64_t nsb, float *out) {
    switch (m) {
    case 1: super_min_f32(lay, blocks, mul, a, lda, 1, nsb, out); break;
    case 2: super_min_f32(lay, blocks, mul, a, lda, 2, nsb, out); break;
    case 3: super_min_f32(lay, blocks, mul, a, lda, 3, nsb, out); break;
    default: super_min_f32(lay, blocks, mul, a, lda, 4, nsb, out); break;
    }
}
