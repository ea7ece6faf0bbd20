/* AVX2 relaxed integer microkernel: 4 rows x 8 columns.  Each step takes 4
   k of 8 columns (32 unsigned weight bytes) and 4 broadcast activation
   bytes per row; vpmaddubsw gives i16 pairs, four steps add up in i16
   (no saturation, see dispatch.h), vpmaddwd widens once per 16 k and the
   sum goes straight to the f32 accumulator: 12 live registers, no spills. */
#include "cpu/dispatch.h"

#include <immintrin.h>
#include <string.h>

static inline __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

void tops_gemm_f32_qi8_qu5_4x8__avx2(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                     const int32_t *acorr, int64_t lds, const uint8_t *b, const float *bscale, float *c,
                                     int64_t ldc, int accumulate) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 f0 = _mm256_setzero_ps(), f1 = f0, f2 = f0, f3 = f0;
    const int8_t *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda;
    for (int64_t blk = 0; blk < nb; blk++) {
        const __m256 bs = _mm256_loadu_ps(bscale + blk * 8);
        const __m256 sc0 = _mm256_mul_ps(bs, _mm256_set1_ps(ascale[blk]));
        const __m256 sc1 = _mm256_mul_ps(bs, _mm256_set1_ps(ascale[lds + blk]));
        const __m256 sc2 = _mm256_mul_ps(bs, _mm256_set1_ps(ascale[2 * lds + blk]));
        const __m256 sc3 = _mm256_mul_ps(bs, _mm256_set1_ps(ascale[3 * lds + blk]));
        /* The offset correction first: f -= corr * scale. */
        f0 = _mm256_fnmadd_ps(_mm256_set1_ps((float)acorr[blk]), sc0, f0);
        f1 = _mm256_fnmadd_ps(_mm256_set1_ps((float)acorr[lds + blk]), sc1, f1);
        f2 = _mm256_fnmadd_ps(_mm256_set1_ps((float)acorr[2 * lds + blk]), sc2, f2);
        f3 = _mm256_fnmadd_ps(_mm256_set1_ps((float)acorr[3 * lds + blk]), sc3, f3);
        for (int g = 0; g < sub; g += 16) {
            /* The four weight steps stay in registers; each row then runs
               its own short chain (few live registers, no spills). */
            const __m256i w0 = _mm256_loadu_si256((const __m256i *)b);
            const __m256i w1 = _mm256_loadu_si256((const __m256i *)(b + 32));
            const __m256i w2 = _mm256_loadu_si256((const __m256i *)(b + 64));
            const __m256i w3 = _mm256_loadu_si256((const __m256i *)(b + 96));
#define TOPS_Q8_ROW(f, ap, sc)                                                                          \
    do {                                                                                                \
        __m256i h = _mm256_add_epi16(_mm256_maddubs_epi16(w0, bcast4(ap)),                              \
                                     _mm256_maddubs_epi16(w1, bcast4((ap) + 4)));                       \
        h = _mm256_add_epi16(h, _mm256_add_epi16(_mm256_maddubs_epi16(w2, bcast4((ap) + 8)),            \
                                                 _mm256_maddubs_epi16(w3, bcast4((ap) + 12))));         \
        f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(h, ones)), sc, f);                     \
    } while (0)
            TOPS_Q8_ROW(f0, a0, sc0);
            TOPS_Q8_ROW(f1, a1, sc1);
            TOPS_Q8_ROW(f2, a2, sc2);
            TOPS_Q8_ROW(f3, a3, sc3);
#undef TOPS_Q8_ROW
            b += 128;
            a0 += 16;
            a1 += 16;
            a2 += 16;
            a3 += 16;
        }
    }
    __m256 r[4] = {f0, f1, f2, f3};
    for (int i = 0; i < 4; i++) {
        if (accumulate) r[i] = _mm256_add_ps(r[i], _mm256_loadu_ps(c + i * ldc));
        _mm256_storeu_ps(c + i * ldc, r[i]);
    }
}

/* 8 rows x 32 k per round: an 8 x 8 transpose of 4-byte groups. */
void tops__avx2_pack_q8_panel(const int8_t *rows, int64_t kc, uint8_t *panel) {
    const __m256i off = _mm256_set1_epi8(TOPS_Q8_OFFSET);
    int64_t k = 0;
    for (; k + 32 <= kc; k += 32) {
        __m256i r[8];
        for (int j = 0; j < 8; j++) r[j] = _mm256_loadu_si256((const __m256i *)(rows + j * kc + k));
        __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
        __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
        __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]);
        __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]);
        __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
        __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
        __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
        __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
        /* Group g (k + 4g .. k + 4g + 3) of the 8 rows. */
        __m256i g[8] = {_mm256_permute2x128_si256(u0, u4, 0x20), _mm256_permute2x128_si256(u1, u5, 0x20),
                        _mm256_permute2x128_si256(u2, u6, 0x20), _mm256_permute2x128_si256(u3, u7, 0x20),
                        _mm256_permute2x128_si256(u0, u4, 0x31), _mm256_permute2x128_si256(u1, u5, 0x31),
                        _mm256_permute2x128_si256(u2, u6, 0x31), _mm256_permute2x128_si256(u3, u7, 0x31)};
        for (int q = 0; q < 8; q++)
            _mm256_storeu_si256((__m256i *)(panel + (k / 4 + q) * 32), _mm256_add_epi8(g[q], off));
    }
    for (; k < kc; k++)
        for (int j = 0; j < 8; j++) panel[(k / 4) * 32 + j * 4 + k % 4] = (uint8_t)(rows[j * kc + k] + TOPS_Q8_OFFSET);
}
