/* The four-row in-place nibble dot (tops__kernels.dot_q8_nibbles_x4's
   body), shared by the AVX2 level (kernels/avx2/dot_q8.c: vpmaddubsw pairs,
   table entries up to 32) and the AVX-512 VNNI level
   (kernels/avx512/nibstream_vnni.c: vpdpbusd, any u8 entry).  The including
   file defines TOPS_NIB_PAIR_DOT(lo, a_lo, hi, a_hi): per i32 lane the
   exact sum of lo's four u8 x a_lo's s8 products plus hi's with a_hi's.
   Both give the same bits (the sums are exact; the f32 steps the same). */
#ifndef TOPS_NIB_PAIR_DOT
#error "define TOPS_NIB_PAIR_DOT before including nibbles_x4_body.h"
#endif

#include "kernels/avx2/nibstream.h"

/* Four rows in one pass, a super-block of 8 blocks per step: the 32 code
   bytes of blocks b and b + 1 form one vector, whose low nibbles meet [b's
   first 16 activations | b + 1's] and whose high nibbles meet [b's last 16
   | b + 1's] (TOPS_NIB_PAIR_DOT: exact i32 sums of four products a lane);
   lanes 0-3 of the sums then belong to block b and 4-7 to b + 1.  Three vphaddd fold the four pairs' sums to one
   exact i32 sum per block (lane l: block tops__nibstream_lane(l)), minus
   the offset correction, then one convert and one FMA per row and
   super-block against ws * as in the same lane order: the row stream's
   arithmetic (kernels/kernels.h), so both give the same bits.  The four rows
   share the activations, split once per super-block. */
static inline __attribute__((always_inline)) void nibbles_x4_sb(const uint8_t *const p[4], int64_t stride,
                                                                const int8_t *aq, const __m256 s[2][4],
                                                                const __m256i corr[2], int halves, __m256i lut,
                                                                __m256 acc[4]) {
    const __m256i mask = _mm256_set1_epi8(0x0F);
    __m256i av[8]; /* per pair: [b's first 16 | b + 1's], [b's last 16 | b + 1's] */
    for (int k = 0; k < 4; k++) {
        const __m256i a0 = _mm256_loadu_si256((const __m256i *)(aq + 64 * k));
        const __m256i a1 = _mm256_loadu_si256((const __m256i *)(aq + 64 * k + 32));
        av[2 * k] = _mm256_permute2x128_si256(a0, a1, 0x20);
        av[2 * k + 1] = _mm256_permute2x128_si256(a0, a1, 0x31);
    }
    for (int r = 0; r < 4; r++) {
        __m256i d[4];
        for (int k = 0; k < 4; k++) {
            const __m256i x = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p[r] + 2 * k * stride))),
                _mm_loadu_si128((const __m128i *)(p[r] + (2 * k + 1) * stride)), 1);
            const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(x, mask));
            const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(x, 4), mask));
            d[k] = TOPS_NIB_PAIR_DOT(lo, av[2 * k], hi, av[2 * k + 1]);
        }
        /* i32 lanes 0, 1 of a block's 128 bits hold its first half, 2, 3 its second */
        const __m256i t01 = _mm256_hadd_epi32(d[0], d[1]), t23 = _mm256_hadd_epi32(d[2], d[3]);
        if (halves == 1) {
            const __m256i sum = _mm256_hadd_epi32(t01, t23);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sum, corr[0])), s[0][r], acc[r]);
        } else {
            const __m256 f01 = _mm256_castsi256_ps(t01), f23 = _mm256_castsi256_ps(t23);
            const __m256i h0 = _mm256_castps_si256(_mm256_shuffle_ps(f01, f23, _MM_SHUFFLE(2, 0, 2, 0)));
            const __m256i h1 = _mm256_castps_si256(_mm256_shuffle_ps(f01, f23, _MM_SHUFFLE(3, 1, 3, 1)));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(h0, corr[0])), s[0][r], acc[r]);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(h1, corr[1])), s[1][r], acc[r]);
        }
    }
}

/* Sixteen per-half-block values of a super-block ([block][half]) as two
   vectors in lane order, half 0 then half 1. */
static inline void halves_in_lanes(__m256 lo, __m256 hi, __m256 out[2]) {
    const __m256i idx = _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7);
    out[0] = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)), idx);
    out[1] = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)), idx);
}

/* One super-block's ws * as and acorr in lane order (halves: 1 for sub 32,
   2 for sub 16), from w[r * ld_ws], a and c at the super-block's first
   entry (8 * halves entries each). */
static inline __attribute__((always_inline)) void sb_scales(const float *w, int64_t ld_ws, const float *a, const float *c, int halves,
                             __m256 s[2][4], __m256i corr[2]) {
    const __m256i lanes = tops__stream_lanes();
    if (halves == 1) {
        const __m256 a8 = _mm256_loadu_ps(a);
        corr[0] = _mm256_permutevar8x32_epi32(_mm256_cvtps_epi32(_mm256_loadu_ps(c)), lanes);
        for (int r = 0; r < 4; r++)
            s[0][r] = _mm256_permutevar8x32_ps(_mm256_mul_ps(_mm256_loadu_ps(w + r * ld_ws), a8), lanes);
        return;
    }
    const __m256 a0 = _mm256_loadu_ps(a), a1 = _mm256_loadu_ps(a + 8);
    __m256 t[2];
    halves_in_lanes(_mm256_loadu_ps(c), _mm256_loadu_ps(c + 8), t);
    corr[0] = _mm256_cvtps_epi32(t[0]);
    corr[1] = _mm256_cvtps_epi32(t[1]);
    for (int r = 0; r < 4; r++) {
        halves_in_lanes(_mm256_mul_ps(_mm256_loadu_ps(w + r * ld_ws), a0),
                        _mm256_mul_ps(_mm256_loadu_ps(w + r * ld_ws + 8), a1), t);
        s[0][r] = t[0];
        s[1][r] = t[1];
    }
}

static inline __attribute__((always_inline)) void nibbles_x4(const uint8_t *blocks, int64_t row_bytes,
                                                             const tops__nibble_layout *layout, const int8_t *aq,
                                                             const float *as, const float *acorr, const float *ws,
                                                             int64_t ld_ws, int64_t nb, const int halves, float *out) {
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)layout->lut));
    const int64_t stride = layout->block_bytes;
    const uint8_t *p0 = blocks + layout->header;
    __m256 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b += 8) {
        const int64_t group = nb - b < 8 ? nb - b : 8;
        /* Each row's stream a fixed distance ahead, spread over the blocks
           (past a chunk this is the row's next chunk, past the row the
           next rows: the weights are read once, in order). */
        for (int64_t o = b * stride; o < (b + group) * stride; o += 64)
            for (int r = 0; r < 4; r++) _mm_prefetch((const char *)(p0 + r * row_bytes + o + TOPS__NIB_PREFETCH), _MM_HINT_T0);
        __m256 s[2][4];
        __m256i corr[2];
        if (group == 8) {
            const uint8_t *p[4];
            for (int r = 0; r < 4; r++) p[r] = p0 + r * row_bytes + b * stride;
            sb_scales(ws + b * halves, ld_ws, as + b * halves, acorr + b * halves, halves, s, corr);
            nibbles_x4_sb(p, stride, aq + b * 32, s, corr, halves, lut, acc);
        } else { /* a part super-block at the end of K: zero blocks after it */
            _Alignas(32) uint8_t nib[4][8][16];
            _Alignas(32) int8_t a[8 * 32];
            _Alignas(32) float a16[16], c16[16], w16[4][16];
            const int64_t used = group * halves;
            memset(nib, 0, sizeof nib);
            memset(a, 0, sizeof a);
            memset(a16, 0, sizeof a16);
            memset(c16, 0, sizeof c16);
            memset(w16, 0, sizeof w16);
            memcpy(a, aq + b * 32, (size_t)group * 32);
            memcpy(a16, as + b * halves, (size_t)used * sizeof(float));
            memcpy(c16, acorr + b * halves, (size_t)used * sizeof(float));
            const uint8_t *p[4];
            for (int r = 0; r < 4; r++) {
                memcpy(w16[r], ws + r * ld_ws + b * halves, (size_t)used * sizeof(float));
                for (int64_t i = 0; i < group; i++) memcpy(nib[r][i], p0 + r * row_bytes + (b + i) * stride, 16);
                p[r] = nib[r][0];
            }
            sb_scales(w16[0], 16, a16, c16, halves, s, corr);
            nibbles_x4_sb(p, 16, a, s, corr, halves, lut, acc);
        }
    }
    for (int r = 0; r < 4; r++) out[r] = tops__hsum8_ps(acc[r]);
}

