/* AVX2 relaxed integer microkernel with A read in place through row
   pointers (conv2d's implicit GEMM over an input quantized once per call):
   the contract of tops__gemm_q8_rows_fn (kernels/kernels.h), 6 rows x 32
   columns over four of gemm_q8's 8-column panels.  AVX2 has 16 vector
   registers and no vpdpbusd, so per sub-block of 32 k the kernel takes
   the columns in two halves of two panels, sums each row's i32 dot
   exactly as the 4 x 8 kernels do (vpmaddubsw pairs in i16 without
   saturation, widened by vpmaddwd) and keeps the f32 sums in a 6 x 32
   buffer in L1.  The codes' offset picks how: q + 8 (|q| <= 8) sums a whole
   sub-block in i16 (six rows at a time), q + 16 four steps (three rows),
   q + 128 turns the panel back to q and multiplies |q| by the activations
   carrying q's sign (three rows).  The scaling is the VNNI kernel's
   (c = fma(s * bscale, ascale, c) per sub-block, in order, from zero, the
   old C added once at the end), so both levels give the same bits. */
#include "kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

static inline __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* Rows r0 .. r0 + R - 1 of one sub-block against panels p0, p1 (k steps
   bstep bytes apart): the exact i32 dots of q (not q + offset) into s. */
static inline __attribute__((always_inline)) void dots(int offset, int r0, int R, const int8_t *const *a, int64_t ka,
                                                       const int32_t *const *acorr, int64_t blk, const uint8_t *p0,
                                                       const uint8_t *p1, int64_t bstep, __m256i s[6][2]) {
    const __m256i ones = _mm256_set1_epi16(1);
    if (offset == TOPS_Q8_OFFSET_WIDE) {
        const __m256i flip = _mm256_set1_epi8((char)0x80);
        for (int i = 0; i < R; i++) s[i][0] = s[i][1] = _mm256_setzero_si256();
        for (int st = 0; st < 8; st++) {
            const __m256i q0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p0 + st * bstep)), flip);
            const __m256i q1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p1 + st * bstep)), flip);
            const __m256i u0 = _mm256_abs_epi8(q0), u1 = _mm256_abs_epi8(q1);
            for (int i = 0; i < R; i++) {
                const __m256i x = bcast4(a[r0 + i] + ka + 4 * st);
                s[i][0] = _mm256_add_epi32(s[i][0], _mm256_madd_epi16(_mm256_maddubs_epi16(u0, _mm256_sign_epi8(x, q0)), ones));
                s[i][1] = _mm256_add_epi32(s[i][1], _mm256_madd_epi16(_mm256_maddubs_epi16(u1, _mm256_sign_epi8(x, q1)), ones));
            }
        }
        return;
    }
    /* q + offset as u8 against s8: pairs <= 2 * 16 * 127 (narrow) or
       2 * 31 * 127 (q + 16), so 8 or 4 steps fit an i16 sum. */
    const int flush = offset == TOPS_Q8_OFFSET_NARROW ? 8 : 4;
    __m256i h[6][2];
    for (int i = 0; i < R; i++) h[i][0] = h[i][1] = _mm256_setzero_si256(); /* (dead: quiets -Wmaybe-uninitialized) */
    for (int st = 0; st < 8; st++) {
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(p0 + st * bstep));
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)(p1 + st * bstep));
        for (int i = 0; i < R; i++) {
            const __m256i x = bcast4(a[r0 + i] + ka + 4 * st);
            const __m256i t0 = _mm256_maddubs_epi16(w0, x), t1 = _mm256_maddubs_epi16(w1, x);
            h[i][0] = st % flush ? _mm256_add_epi16(h[i][0], t0) : t0;
            h[i][1] = st % flush ? _mm256_add_epi16(h[i][1], t1) : t1;
        }
        if (st % flush == flush - 1)
            for (int i = 0; i < R; i++) {
                const __m256i d0 = _mm256_madd_epi16(h[i][0], ones), d1 = _mm256_madd_epi16(h[i][1], ones);
                if (st < flush) { /* the first i16 sum: start from -offset * code sum */
                    const __m256i corr = _mm256_set1_epi32(acorr[r0 + i][blk]);
                    s[i][0] = _mm256_sub_epi32(d0, corr);
                    s[i][1] = _mm256_sub_epi32(d1, corr);
                } else {
                    s[i][0] = _mm256_add_epi32(s[i][0], d0);
                    s[i][1] = _mm256_add_epi32(s[i][1], d1);
                }
            }
    }
}

/* f[i][j] = fma(s * bscale, ascale, f) for the half's 16 columns. */
static inline __attribute__((always_inline)) void scale_rows(int r0, int R, const __m256i s[6][2], __m256 g0,
                                                             __m256 g1, const float *const *as, int64_t blk,
                                                             float *f) {
    for (int i = 0; i < R; i++) {
        const __m256 sc = _mm256_set1_ps(as[r0 + i][blk]);
        float *fi = f + (r0 + i) * 32;
        _mm256_storeu_ps(fi, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s[i][0]), g0), sc, _mm256_loadu_ps(fi)));
        _mm256_storeu_ps(fi + 8,
                         _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s[i][1]), g1), sc, _mm256_loadu_ps(fi + 8)));
    }
}

static inline __attribute__((always_inline)) void body(int offset, int64_t nb, const int8_t *const *a,
                                                       const float *const *as, const int32_t *const *acorr,
                                                       const uint8_t *const *b, int64_t bstep,
                                                       const float *const *bs, float *c, int64_t ldc, int accumulate) {
    const int R = offset == TOPS_Q8_OFFSET_NARROW ? 6 : 3; /* rows per pass: what fits 16 registers */
    float f[6 * 32] __attribute__((aligned(32)));
    memset(f, 0, sizeof f);
    for (int64_t blk = 0; blk < nb; blk++)
        for (int half = 0; half < 2; half++) {
            const uint8_t *p0 = b[2 * half] + blk * 8 * bstep, *p1 = b[2 * half + 1] + blk * 8 * bstep;
            const __m256 g0 = _mm256_loadu_ps(bs[2 * half] + blk * 8), g1 = _mm256_loadu_ps(bs[2 * half + 1] + blk * 8);
            for (int r0 = 0; r0 < 6; r0 += R) {
                __m256i s[6][2];
                for (int i = 0; i < 6; i++) s[i][0] = s[i][1] = _mm256_setzero_si256();
                dots(offset, r0, R, a, blk * 32, acorr, blk, p0, p1, bstep, s);
                scale_rows(r0, R, s, g0, g1, as, blk, f + half * 16);
            }
        }
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 32; j += 8) {
            __m256 v = _mm256_load_ps(f + i * 32 + j);
            if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(c + i * ldc + j));
            _mm256_storeu_ps(c + i * ldc + j, v);
        }
}

void tops_gemm_f32_qi8_qu8_6x32_rows__avx2(int64_t nb, const int8_t *const *a, const float *const *as,
                                           const int32_t *const *acorr, const uint8_t *const *b, int64_t bstep,
                                           const float *const *bs, float *c, int64_t ldc, int accumulate, int offset) {
    if (offset == TOPS_Q8_OFFSET_NARROW) body(TOPS_Q8_OFFSET_NARROW, nb, a, as, acorr, b, bstep, bs, c, ldc, accumulate);
    else if (offset == TOPS_Q8_OFFSET) body(TOPS_Q8_OFFSET, nb, a, as, acorr, b, bstep, bs, c, ldc, accumulate);
    else body(TOPS_Q8_OFFSET_WIDE, nb, a, as, acorr, b, bstep, bs, c, ldc, accumulate);
}
