/* AVX-512 VNNI in-place q4_K / q5_K row dot (tops__dot_super_fn): the AVX2
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

/* Eight sub-block sums from four vectors of per-lane sums, p[r] holding
   sub-blocks 2r and 2r + 1 in its halves: lane j = sub-block j (exact in
   integers: any order). */
static inline __attribute__((always_inline)) __m256i kq_tree512(const __m512i p[4]) {
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


/* One super-block's codes: q[r] holds sub-blocks 2r and 2r + 1 (halves). */
typedef struct kq_codes512_t {
    __m512i q[4];
} kq_codes512_t;
static inline __attribute__((always_inline)) void kq_codes512(const uint8_t *blk, int five, kq_codes512_t *c) {
    const uint8_t *qs = blk + (five ? TOPS__KQ_QS5 : TOPS__KQ_QS4);
    const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    /* 16-bit shift counts: 0 in the low half, 4 in the high half */
    const __m512i nib = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    __m512i qh = _mm512_setzero_si512();
    if (five) qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + TOPS__KQ_QH)));
    for (int r = 0; r < 4; r++) {
        const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * r)));
        __m512i q = _mm512_and_si512(_mm512_srlv_epi16(raw, nib), m4);
        if (five) { /* bit 2r (low half) / 2r + 1 (high half) of qh as bit 4 */
            const __m512i sh = _mm512_add_epi16(_mm512_srli_epi16(nib, 2), _mm512_set1_epi16((short)(2 * r)));
            q = _mm512_or_si512(q, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh), one), 4));
        }
        c->q[r] = q;
    }
}

static inline __attribute__((always_inline)) __m256i kq_sums512(const kq_codes512_t *c, const int8_t *aq) {
    __m512i p[4];
    for (int r = 0; r < 4; r++)
        p[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c->q[r], _mm512_loadu_si512((const void *)(aq + 64 * r)));
    return kq_tree512(p);
}

/* The f32 steps, the AVX2 level's (the same bits). */
#define TOPS_KQ_CODES_T kq_codes512_t
#define TOPS_KQ_CODES(blk, five, c) kq_codes512(blk, five, c)
#define TOPS_KQ_SUMS(c, aq) kq_sums512(c, aq)
#include "kernels/avx2/kq_dot_f32.h"

/* q6_K (TOPS__IF_SUPER_6BIT, 210 bytes: ql[128], qh[64], i8 scales[16],
   f16 d at 208) read in place: per half h of 128 elements the 64 ql
   bytes give elements 0..63 (low nibbles) and 64..127 (high), the 32 qh
   bytes, broadcast to both halves, their two high bits (bits 2 (r / 32)
   of qh[l]: shifts 0 / 2 for the first 64, 4 / 6 for the next); codes q +
   32 (0..63) as vpdpbusd's unsigned operand, less 32 times the
   activations' sum (a second vpdpbusd by 32s), so each 4-lane group holds
   a sub-block of 16; two unpack rounds and a vpermd leave sub-block j in
   lane j, then the reference's f32 steps (kernels.h). */
typedef struct q6_codes_t {
    __m512i lo[2], hi[2];
} q6_codes_t;
static inline __attribute__((always_inline)) void q6_codes(const uint8_t *blk, q6_codes_t *c) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    const __m512i sh01 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i sh23 = _mm512_add_epi16(sh01, _mm512_set1_epi16(4));
    for (int hh = 0; hh < 2; hh++) {
        const __m512i ql = _mm512_loadu_si512((const void *)(blk + 64 * hh));
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * hh)));
        c->lo[hh] = _mm512_or_si512(_mm512_and_si512(ql, m4),
                                    _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh01), m2), 4));
        c->hi[hh] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                    _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh23), m2), 4));
    }
}

static inline __attribute__((always_inline)) __m512i q6_sums(const q6_codes_t *c, const int8_t *aq) {
    const __m512i k32 = _mm512_set1_epi8(32);
    __m512i p[4];
    for (int hh = 0; hh < 2; hh++) {
        const __m512i a0 = _mm512_loadu_si512((const void *)(aq + 128 * hh));
        const __m512i a1 = _mm512_loadu_si512((const void *)(aq + 128 * hh + 64));
        p[2 * hh] = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), c->lo[hh], a0),
                                     _mm512_dpbusd_epi32(_mm512_setzero_si512(), k32, a0));
        p[2 * hh + 1] = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), c->hi[hh], a1),
                                         _mm512_dpbusd_epi32(_mm512_setzero_si512(), k32, a1));
    }
    /* chunk c of p[t]: sub-block 4t + c in 4 lanes */
    const __m512i t01 = _mm512_add_epi32(_mm512_unpacklo_epi32(p[0], p[1]), _mm512_unpackhi_epi32(p[0], p[1]));
    const __m512i t23 = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2], p[3]), _mm512_unpackhi_epi32(p[2], p[3]));
    const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
    /* lane 4c + t: sub-block 4t + c */
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_epi32(idx, u);
}

static inline __attribute__((always_inline)) void q6_dot(const tops__int_layout *lay, const uint8_t *blocks,
                                                         float mul, const tops__super_act *act, const int m,
                                                         int64_t nsb, float *out) {
    (void)lay;
    const __m512 vmul = _mm512_set1_ps(mul);
    __m512 acc[TOPS__SUPER_MAX_M];
    for (int i = 0; i < m; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *blk = blocks + s * 210;
        _mm_prefetch((const char *)(blk + 24 * 210), _MM_HINT_T0); /* as the q4_K rows */
        _mm_prefetch((const char *)(blk + 24 * 210 + 64), _MM_HINT_T0);
        _mm_prefetch((const char *)(blk + 24 * 210 + 128), _MM_HINT_T0);
        _mm_prefetch((const char *)(blk + 24 * 210 + 192), _MM_HINT_T0);
        q6_codes_t codes;
        q6_codes(blk, &codes);
        uint16_t hd;
        memcpy(&hd, blk + 208, 2);
        const __m512 vsc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 192))));
        const __m512 scale = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(hd)), vsc), vmul);
        for (int i = 0; i < m; i++) {
            const __m512i sums = q6_sums(&codes, act[i].aq + s * 256);
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(_mm512_loadu_ps(act[i].as + s * 16), scale),
                                     acc[i]);
        }
    }
    for (int i = 0; i < m; i++) /* h_j = l_j + l_{j+8}, then the eight-lane tree */
        out[i] = tops__hsum8_ps(_mm256_add_ps(_mm512_castps512_ps256(acc[i]), _mm512_extractf32x8_ps(acc[i], 1)));
}

static void q6_dot_super512(const tops__int_layout *lay, const uint8_t *blocks, float mul, const tops__super_act *act,
                            int m, int64_t nsb, float *out) {
    TOPS__SUPER_INSTANCES(q6_dot);
}

/* iq4_xs (TOPS__IF_SUPER_SUBSCALE, 136 bytes: f16 d, scales_h, scales_l[4],
   qs[128], sub-block j's 16 bytes at 8 + 16 j, its elements 0..15 in the
   low nibbles, 16..31 in the high) read in place: two sub-blocks' bytes a
   512-bit vector as [j lo | j hi | j + 1 lo | j + 1 hi] (kq_sums512's
   layout), the codebook through vpshufb as q + 127 (0..240, vpdpbusd's
   unsigned operand), less 127 times the activations' sums (a second
   vpdpbusd), then the reference's f32 steps: lane j = fma(S, as * d * ls *
   mul, lane j), the eight-lane tree. */
typedef struct iq4_codes_t {
    __m512i q[4];
} iq4_codes_t;
static inline __attribute__((always_inline)) void iq4_codes(const uint8_t *blk, __m512i lut, iq4_codes_t *c) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    /* 16-bit shift counts 0, 4, 0, 4 by 128-bit lane */
    const __m512i sh = _mm512_setr_epi64(0, 0, 0x0004000400040004LL, 0x0004000400040004LL, 0, 0,
                                         0x0004000400040004LL, 0x0004000400040004LL);
    for (int r = 0; r < 4; r++) {
        const __m512i two = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 8 + 32 * r)));
        const __m512i x = _mm512_shuffle_i64x2(two, two, _MM_SHUFFLE(1, 1, 0, 0));
        c->q[r] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srlv_epi16(x, sh), m4));
    }
}

static inline __attribute__((always_inline)) __m256i iq4_sums(const iq4_codes_t *c, const int8_t *aq) {
    const __m512i k127 = _mm512_set1_epi8(127);
    __m512i p[4];
    for (int r = 0; r < 4; r++) {
        const __m512i a = _mm512_loadu_si512((const void *)(aq + 64 * r));
        p[r] = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), c->q[r], a),
                                _mm512_dpbusd_epi32(_mm512_setzero_si512(), k127, a));
    }
    return kq_tree512(p);
}

static inline __attribute__((always_inline)) void iq4_dot(const tops__int_layout *lay, const uint8_t *blocks,
                                                          float mul, const tops__super_act *act, const int m,
                                                          int64_t nsb, float *out) {
    uint8_t lb[16];
    for (int t = 0; t < 16; t++) lb[t] = (uint8_t)(lay->map[t] + 127);
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)lb));
    const __m256 vmul = _mm256_set1_ps(mul);
    const __m128i pair_bytes = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i nib_shift = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
    const __m256i hi_shift = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    __m256 acc[TOPS__SUPER_MAX_M];
    for (int i = 0; i < m; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *blk = blocks + s * 136;
        _mm_prefetch((const char *)(blk + 24 * 136), _MM_HINT_T0); /* as the q4_K rows */
        _mm_prefetch((const char *)(blk + 24 * 136 + 64), _MM_HINT_T0);
        _mm_prefetch((const char *)(blk + 24 * 136 + 128), _MM_HINT_T0);
        iq4_codes_t codes;
        iq4_codes(blk, lut, &codes);
        uint16_t hd, hi;
        uint32_t lo4;
        memcpy(&hd, blk, 2);
        memcpy(&hi, blk + 2, 2);
        memcpy(&lo4, blk + 4, 4);
        /* ls_j = (scales_l nibble j | 2 bits j of scales_h << 4) - 32, in lane j */
        const __m256i lo = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_cvtepu8_epi32(_mm_shuffle_epi8(_mm_cvtsi32_si128((int)lo4), pair_bytes)), nib_shift),
            _mm256_set1_epi32(0xF));
        const __m256i hb = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(hi), hi_shift), _mm256_set1_epi32(3));
        const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hb, 4)), _mm256_set1_epi32(32));
        const __m256 scale =
            _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(hd)), _mm256_cvtepi32_ps(ls)), vmul);
        for (int i = 0; i < m; i++) {
            const __m256i sums = iq4_sums(&codes, act[i].aq + s * 256);
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(_mm256_loadu_ps(act[i].as + s * 8), scale),
                                     acc[i]);
        }
    }
    for (int i = 0; i < m; i++) out[i] = tops__hsum8_ps(acc[i]);
}

static void iq4_dot_super512(const tops__int_layout *lay, const uint8_t *blocks, float mul, const tops__super_act *act,
                             int m, int64_t nsb, float *out) {
    TOPS__SUPER_INSTANCES(iq4_dot);
}

/* On top of the AVX2 unpackers (the table holds them on entry). */
void tops__avx512_vnni_fill_unpackers(tops__form_kernels *table) {
    table[TOPS__IF_SUPER_MIN].dot_super = kq_dot_min_super;
    table[TOPS__IF_SUPER_6BIT].dot_super = q6_dot_super512;
    table[TOPS__IF_SUPER_SUBSCALE].dot_super = iq4_dot_super512;
}
