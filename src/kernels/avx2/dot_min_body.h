/* The in-place TOPS__IF_SUPER_MIN (q4_K / q5_K) row dot (tops__dot_super_fn, kernels/kernels.h)
   for the AVX2 level: the including file defines TOPS_KQ_DOT(q, a), the
   i32 sums of four u8 x s8 products per lane (vpmaddubsw + vpmaddwd),
   and compiles this with its ISA flags (AVX-512 VNNI has its own 512-bit
   twin, kernels/avx512/dot_min_vnni.c, with the same f32 steps).  Per super-block the four 32-byte qs rows give sub-blocks 2i
   (low nibbles) and 2i + 1 (high), q5_K's fifth bit comes from the 32 qh
   bytes by a shift and mask; a vphaddd tree leaves sub-block j in lane j.
   Same lanes and order as the scalar reference: the same bits.  The AVX2
   unpacker takes its codes from kq_codes too. */
#ifndef TOPS_KQ_DOT
#error "define TOPS_KQ_DOT before including dot_min_body.h"
#endif

#include "kernels/ref/kquant.h"

/* Row r (0..3) of a super-block's codes: sub-blocks 2r (lo) and 2r + 1
   (hi), q = 0..15 (q5_K: 0..31, its fifth bits from the qh row). */
static inline void kq_codes(const uint8_t *qs, __m256i qh, int r, int five, __m256i *lo, __m256i *hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * r));
    *lo = _mm256_and_si256(raw, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    if (five) {
        *lo = _mm256_or_si256(*lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * r), one), 4));
        *hi = _mm256_or_si256(*hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * r + 1), one), 4));
    }
}

/* One super-block's codes: v[2i] sub-block 2i (lo), v[2i + 1] 2i + 1 (hi). */
typedef struct kq_codes_t {
    __m256i v[8];
} kq_codes_t;
static inline __attribute__((always_inline)) void kq_codes_all(const uint8_t *blk, int five, kq_codes_t *c) {
    const uint8_t *qs = blk + (five ? TOPS__KQ_QS5 : TOPS__KQ_QS4);
    const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(blk + TOPS__KQ_QH)) : _mm256_setzero_si256();
    for (int i = 0; i < 4; i++) kq_codes(qs, qh, i, five, &c->v[2 * i], &c->v[2 * i + 1]);
}

/* The eight sub-block sums against one activation row, lane j = sub-block
   j (exact i32: q <= 31, |aq| <= 127). */
static inline __attribute__((always_inline)) __m256i kq_sums(const kq_codes_t *c, const int8_t *aq) {
    __m256i v[8];
    for (int i = 0; i < 4; i++) {
        v[2 * i] = TOPS_KQ_DOT(c->v[2 * i], _mm256_loadu_si256((const __m256i *)(aq + 64 * i)));
        v[2 * i + 1] = TOPS_KQ_DOT(c->v[2 * i + 1], _mm256_loadu_si256((const __m256i *)(aq + 64 * i + 32)));
    }
    const __m256i t0 = _mm256_hadd_epi32(v[0], v[1]), t1 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i t2 = _mm256_hadd_epi32(v[4], v[5]), t3 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

#define TOPS_KQ_CODES_T kq_codes_t
#define TOPS_KQ_CODES(blk, five, c) kq_codes_all(blk, five, c)
#define TOPS_KQ_SUMS(c, aq) kq_sums(c, aq)
#include "kernels/avx2/kq_dot_f32.h"
