/* The AVX2 relaxed integer kernels' exact dots (kernels/avx2/gemm_q8_rows.c,
   gemm_q8.c's 4 x 32 twin): R rows against one 16-column half (two 8-column
   panels of q + offset, 32 bytes a 4-k step, steps bstep bytes apart) over
   one sub-block, without saturation at any offset.  AVX2 has 16 vector
   registers and no vpdpbusd: the i16 stage is summed in registers, so
   every caller inlines these with constant R, steps and offset. */
#ifndef TOPS_KERNELS_AVX2_Q8_SUMS_H
#define TOPS_KERNELS_AVX2_Q8_SUMS_H

#include "kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

static inline __m256i tops__bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* R rows' i16 sums of (q + offset) * x over steps st0 .. st0 + n - 1 of
   panels p0, p1 into h (no saturation: the caller bounds n).  The first
   step is peeled and the rest is a rolled loop: unrolled, the compiler
   hoists the broadcasts out of the caller's loop over halves and spills
   them and the sums. */
static inline __attribute__((always_inline)) void tops__q8_i16_sums(int R, int st0, int n, const int8_t *const *a, int64_t ka,
                                                           const uint8_t *p0, const uint8_t *p1, int64_t bstep,
                                                           __m256i h[][2]) {
    {
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(p0 + st0 * bstep));
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)(p1 + st0 * bstep));
#pragma GCC unroll 6
        for (int i = 0; i < R; i++) {
            const __m256i x = tops__bcast4(a[i] + ka + 4 * st0);
            h[i][0] = _mm256_maddubs_epi16(w0, x);
            h[i][1] = _mm256_maddubs_epi16(w1, x);
        }
    }
#pragma GCC unroll 1
    for (int st = st0 + 1; st < st0 + n; st++) {
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(p0 + st * bstep));
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)(p1 + st * bstep));
#pragma GCC unroll 6
        for (int i = 0; i < R; i++) {
            const __m256i x = tops__bcast4(a[i] + ka + 4 * st);
            h[i][0] = _mm256_add_epi16(h[i][0], _mm256_maddubs_epi16(w0, x));
            h[i][1] = _mm256_add_epi16(h[i][1], _mm256_maddubs_epi16(w1, x));
        }
    }
}

/* s[i][0..1] = the exact i32 dots of q (not q + offset) for R rows (a[i]
   + ka, acorr[i][blk]) over `steps` 4-k steps of panels p0, p1 (steps
   bstep bytes apart).  q + 8 (|q| <= 8): pairs <= 2 * 16 * 127, up to eight
   steps in i16 (six rows: 12 sums, two panel vectors and a broadcast fill
   15 of the 16 registers).  q + 16: pairs <= 2 * 31 * 127, rounds of four
   steps (three rows fit the registers; four spill the i32 sums once a
   round); steps a multiple of 4.  q + 128: the panel turned back to q, |q| as
   u8 against the activations carrying q's sign (pairs <= 2 * 128 * 127),
   widened every step; acorr is not read.  Activations |x| <= 127. */
static inline __attribute__((always_inline)) void tops__q8_half_sums(int offset, int R, int steps,
                                                                     const int8_t *const *a, int64_t ka,
                                                                     const int32_t *const *acorr, int64_t blk,
                                                                     const uint8_t *p0, const uint8_t *p1,
                                                                     int64_t bstep, __m256i s[][2]) {
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) s[i][0] = s[i][1] = _mm256_setzero_si256(); /* (dead but for q + 128) */
    if (offset == TOPS_Q8_OFFSET_WIDE) {
        const __m256i flip = _mm256_set1_epi8((char)0x80);
#pragma GCC unroll 1
        for (int st = 0; st < steps; st++) {
            const __m256i q0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p0 + st * bstep)), flip);
            const __m256i q1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p1 + st * bstep)), flip);
            const __m256i u0 = _mm256_abs_epi8(q0), u1 = _mm256_abs_epi8(q1);
#pragma GCC unroll 6
            for (int i = 0; i < R; i++) {
                const __m256i x = tops__bcast4(a[i] + ka + 4 * st);
                s[i][0] = _mm256_add_epi32(s[i][0], _mm256_madd_epi16(_mm256_maddubs_epi16(u0, _mm256_sign_epi8(x, q0)), ones));
                s[i][1] = _mm256_add_epi32(s[i][1], _mm256_madd_epi16(_mm256_maddubs_epi16(u1, _mm256_sign_epi8(x, q1)), ones));
            }
        }
        return;
    }
    const int per = offset == TOPS_Q8_OFFSET_NARROW ? (steps < 8 ? steps : 8) : 4, rounds = steps / per;
    for (int rd = 0; rd < rounds; rd++) {
        __m256i h[6][2];
        tops__q8_i16_sums(R, rd * per, per, a, ka, p0, p1, bstep, h);
#pragma GCC unroll 6
        for (int i = 0; i < R; i++) {
            const __m256i d0 = _mm256_madd_epi16(h[i][0], ones), d1 = _mm256_madd_epi16(h[i][1], ones);
            if (rd == 0) { /* start from -offset * code sum */
                const __m256i corr = _mm256_set1_epi32(acorr[i][blk]);
                s[i][0] = _mm256_sub_epi32(d0, corr);
                s[i][1] = _mm256_sub_epi32(d1, corr);
            } else {
                s[i][0] = _mm256_add_epi32(s[i][0], d0);
                s[i][1] = _mm256_add_epi32(s[i][1], d1);
            }
        }
    }
}

#endif
