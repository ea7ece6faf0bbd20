/* AVX-512 strict in-place q4_K / q5_K (and q6_K, below) rows (tops__dot_super_f32_fn,
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
        /* the eight scales and mins at once, as the unpacker rounds them: (d * sc) * mul */
        uint64_t sc8, mn8;
        tops__kquant_scales8(blk + TOPS__KQ_SCALES, &sc8, &mn8);
        _Alignas(32) float scf[8], mnf[8];
        const __m256 vmul = _mm256_set1_ps(mul);
        _mm256_store_ps(scf, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(hd)),
                                                         _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc8)))),
                                           vmul));
        _mm256_store_ps(mnf, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(hm)),
                                                         _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn8)))),
                                           vmul));
        const uint8_t *qs = blk + (five ? TOPS__KQ_QS5 : TOPS__KQ_QS4), *qh = blk + TOPS__KQ_QH;
        for (int j = 0; j < 8; j++) {
            const __m512 scale = _mm512_set1_ps(scf[j]), min = _mm512_set1_ps(mnf[j]);
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

/* q6_K (210 bytes: ql[128], qh[64], i8 scales[16], f16 d at 208): the
   16 codes of sub-block j share their nibble and bit-pair positions (ql
   bytes 64 hh + r % 64 >> 4 (r / 64), qh bytes 128 + 32 hh + r % 32 >> 2
   (r / 32), r = 16 j % 128), so one 16-byte load of each gives them; q =
   code - 32, weight q * d * sc_j * mul (the unpacker's scale). */
static inline __attribute__((always_inline)) void super_6bit_f32(const uint8_t *blocks, float mul, const float *a,
                                                                 int64_t lda, const int m, int64_t nsb, float *out) {
    const __m128i m4 = _mm_set1_epi8(0x0F), m2 = _mm_set1_epi8(3);
    const __m512i k32 = _mm512_set1_epi32(32);
    __m512 acc[TOPS__SUPER_MAX_M];
    for (int i = 0; i < m; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *blk = blocks + s * 210;
        _mm_prefetch((const char *)(blk + 8 * 210), _MM_HINT_T0);
        _mm_prefetch((const char *)(blk + 8 * 210 + 64), _MM_HINT_T0);
        _mm_prefetch((const char *)(blk + 8 * 210 + 128), _MM_HINT_T0);
        _mm_prefetch((const char *)(blk + 8 * 210 + 192), _MM_HINT_T0);
        uint16_t hd;
        memcpy(&hd, blk + 208, 2);
        /* the sixteen scales at once, as the unpacker rounds them: (d * sc) * mul */
        _Alignas(64) float scf[16];
        _mm512_store_ps(scf, _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(hd)),
                                                         _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                                             _mm_loadu_si128((const __m128i *)(blk + 192))))),
                                           _mm512_set1_ps(mul)));
        for (int j = 0; j < 16; j++) {
            const int hh = j / 8, r = (16 * j) % 128;
            const __m128i lo = _mm_and_si128(
                _mm_srl_epi16(_mm_loadu_si128((const __m128i *)(blk + 64 * hh + r % 64)), _mm_cvtsi32_si128(4 * (r / 64))), m4);
            const __m128i hi = _mm_and_si128(
                _mm_srl_epi16(_mm_loadu_si128((const __m128i *)(blk + 128 + 32 * hh + r % 32)), _mm_cvtsi32_si128(2 * (r / 32))),
                m2);
            const __m512i q = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_or_si128(lo, _mm_slli_epi16(hi, 4))), k32);
            const __m512 w = _mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(scf[j]));
            for (int i = 0; i < m; i++) acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(a + i * lda + s * 256 + 16 * j), w, acc[i]);
        }
    }
    for (int i = 0; i < m; i++) out[i] = _mm512_reduce_add_ps(acc[i]);
}

void tops__avx512_dot_super_6bit_f32(const tops__int_layout *lay, const uint8_t *blocks, float mul, const float *a,
                                     int64_t lda, int m, int64_t nsb, float *out) {
    (void)lay;
    switch (m) {
    case 1: super_6bit_f32(blocks, mul, a, lda, 1, nsb, out); break;
    case 2: super_6bit_f32(blocks, mul, a, lda, 2, nsb, out); break;
    case 3: super_6bit_f32(blocks, mul, a, lda, 3, nsb, out); break;
    default: super_6bit_f32(blocks, mul, a, lda, 4, nsb, out); break;
    }
}
