/* AVX-512 VNNI in-place q4_K / q5_K row dot (tops__dot_min_fn): the AVX2
   kernel's numbers (kernels/avx2/dot_min_body.h: sub-block j's exact i32
   sum in lane j, then the same f32 steps in the same order, so the same
   bits) with the integer part on 512-bit vectors.  Each 32-byte qs row r
   is broadcast to both halves (a load, no shuffle) and shifted by 0 / 4
   per half, so one vector holds sub-blocks 2r and 2r + 1 in the order
   of the activations (one 64-byte load); four vpdpbusd cover the
   super-block, and a shuffle tree (exact in integers: any order) leaves
   the eight sums in lanes 0..7. */
#include "kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

#include "kernels/ref/kquant.h"

static inline __attribute__((always_inline)) __m256i kq_sums512(const uint8_t *blk, const int8_t *aq, int five) {
    const uint8_t *qs = blk + (five ? TOPS__KQ_QS5 : TOPS__KQ_QS4);
    const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    /* 16-bit shift counts: 0 in the low half, 4 in the high half */
    const __m512i nib = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    __m512i qh = _mm512_setzero_si512();
    if (five) qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + TOPS__KQ_QH)));
    __m512i p[4];
    for (int r = 0; r < 4; r++) {
        const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * r)));
        __m512i q = _mm512_and_si512(_mm512_srlv_epi16(raw, nib), m4);
        if (five) { /* bit 2r (low half) / 2r + 1 (high half) of qh as bit 4 */
            const __m512i sh = _mm512_add_epi16(_mm512_srli_epi16(nib, 2), _mm512_set1_epi16((short)(2 * r)));
            q = _mm512_or_si512(q, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh), one), 4));
        }
        p[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, _mm512_loadu_si512((const void *)(aq + 64 * r)));
    }
    /* 128-bit chunks: p[0] = [0a 0b 1a 1b], p[1] = [2a 2b 3a 3b], ... */
    const __m512i r01 = _mm512_add_epi32(_mm512_shuffle_i32x4(p[0], p[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                         _mm512_shuffle_i32x4(p[0], p[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i r23 = _mm512_add_epi32(_mm512_shuffle_i32x4(p[2], p[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                         _mm512_shuffle_i32x4(p[2], p[3], _MM_SHUFFLE(3, 1, 3, 1)));
    /* chunk c of r01 holds sub-block c, of r23 sub-block c + 4 */
    const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi32(r01, r23), _mm512_unpackhi_epi32(r01, r23));
    const __m512i v = _mm512_add_epi32(u, _mm512_shuffle_epi32(u, _MM_PERM_BADC));
    /* lane 4c: sub-block c, lane 4c + 1: sub-block c + 4 */
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castsi512_si256(_mm512_permutexvar_epi32(idx, v));
}

/* The f32 part of kernels/avx2/dot_min_body.h's kq_dot_min, step for step. */
static inline float kq_dot_min512(const uint8_t *blocks, float mul, const int8_t *aq, const float *as,
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
        const __m256i sums = kq_sums512(blk, aq + s * 256, five);
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

static float kq_dot_min_super512(const tops__int_layout *lay, const uint8_t *blocks, float mul, const int8_t *aq,
                                 const float *as, const float *amin, int64_t nsb) {
    return lay->high_bit ? kq_dot_min512(blocks, mul, aq, as, amin, nsb, 1)
                         : kq_dot_min512(blocks, mul, aq, as, amin, nsb, 0);
}

/* On top of the AVX2 unpackers (the table holds them on entry). */
void tops__avx512_vnni_fill_unpackers(tops__form_kernels *table) {
    table[TOPS__IF_SUPER_MIN].dot_min = kq_dot_min_super512;
}
