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
#include "kernels/avx2/q8_sums.h"

#include <immintrin.h>
#include <string.h>

/* f[i][j] (+)= fma(s * bscale, ascale, f) for R rows of one 16-column
   half: the VNNI kernel's scaling, so both levels give the same bits. */
static inline __attribute__((always_inline)) void scale_rows(int R, const __m256i s[][2], const float *const *as,
                                                             int64_t blk, const float *g0, const float *g1, float *f) {
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
        const __m256 sc = _mm256_set1_ps(as[i][blk]);
        float *fi = f + i * 32;
        _mm256_storeu_ps(fi, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s[i][0]), _mm256_loadu_ps(g0)), sc,
                                             _mm256_loadu_ps(fi)));
        _mm256_storeu_ps(fi + 8, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s[i][1]), _mm256_loadu_ps(g1)), sc,
                                                 _mm256_loadu_ps(fi + 8)));
    }
}

/* One 16-column half of one sub-block for R rows (a, acorr, as at the
   first of them) into f: the exact dots (q8_sums.h), then scaled.  q + 8
   takes six rows a pass, q + 16 and q + 128 three (what fits 16
   registers). */
static inline __attribute__((always_inline)) void half_rows(int offset, int R, const int8_t *const *a, int64_t ka,
                                                            const int32_t *const *acorr, const float *const *as,
                                                            int64_t blk, const uint8_t *p0, const uint8_t *p1,
                                                            int64_t bstep, const float *g0, const float *g1, float *f) {
    __m256i s[6][2];
    tops__q8_half_sums(offset, R, 8, a, ka, acorr, blk, p0, p1, bstep, s);
    scale_rows(R, s, as, blk, g0, g1, f);
}

static inline __attribute__((always_inline)) void body(int offset, int64_t nb, const int8_t *const *a,
                                                       const float *const *as, const int32_t *const *acorr,
                                                       const uint8_t *const *b, int64_t bstep,
                                                       const float *const *bs, int64_t sstep, float *c, int64_t ldc,
                                                       int accumulate) {
    const int R = offset == TOPS_Q8_OFFSET_NARROW ? 6 : 3; /* rows per pass: what fits 16 registers */
    float f[6 * 32] __attribute__((aligned(32)));
    memset(f, 0, sizeof f);
    for (int64_t blk = 0; blk < nb; blk++)
        for (int half = 0; half < 2; half++) {
            const uint8_t *p0 = b[2 * half] + blk * 8 * bstep, *p1 = b[2 * half + 1] + blk * 8 * bstep;
            for (int r0 = 0; r0 < 6; r0 += R)
                half_rows(offset, R, a + r0, blk * 32, acorr + r0, as + r0, blk, p0, p1, bstep,
                          bs[2 * half] + blk * sstep, bs[2 * half + 1] + blk * sstep, f + r0 * 32 + half * 16);
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
                                           const float *const *bs, int64_t sstep, float *c, int64_t ldc, int accumulate,
                                           int offset) {
    if (offset == TOPS_Q8_OFFSET_NARROW)
        body(TOPS_Q8_OFFSET_NARROW, nb, a, as, acorr, b, bstep, bs, sstep, c, ldc, accumulate);
    else if (offset == TOPS_Q8_OFFSET) body(TOPS_Q8_OFFSET, nb, a, as, acorr, b, bstep, bs, sstep, c, ldc, accumulate);
    else body(TOPS_Q8_OFFSET_WIDE, nb, a, as, acorr, b, bstep, bs, sstep, c, ldc, accumulate);
}
