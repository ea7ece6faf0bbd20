/* AVX2 relaxed integer microkernels: 4 rows x 8 columns, and their 4 x 32
   twin at the end of the file.  Each step takes
   4 k of 8 columns (32 unsigned weight bytes) and 4 broadcast activation
   bytes per row; vpmaddubsw gives i16 pairs, `flush` steps add up in i16
   (no saturation, see kernels/kernels.h), vpmaddwd widens them and the block's
   i32 sum takes the offset correction in integers, so each row pays one
   convert and one FMA per sub-block (not per 16 k): vector ops per 32 k
   and row fall from 24 to 21 (wide) and 20 (narrow, eight steps). */
#include "kernels/avx2/q8_sums.h"

#include <immintrin.h>
#include <string.h>

/* k = 4g..4g+3 of the 8 columns against two rows' activations (the
   weights come again from L1 for the other two rows: few live registers,
   no spills). */
#define TOPS_Q8_STEP(op, g)                                                                        \
    do {                                                                                           \
        const __m256i w = _mm256_loadu_si256((const __m256i *)(b + 32 * (g)));                    \
        hx = op(hx, _mm256_maddubs_epi16(w, tops__bcast4(ax + 4 * (g))));                                \
        hy = op(hy, _mm256_maddubs_epi16(w, tops__bcast4(ay + 4 * (g))));                                \
        __asm__("" : "+x"(hx), "+x"(hy)); /* keeps the compiler from hoisting every step (spills) */ \
    } while (0)
#define TOPS_Q8_FIRST(h, p) (p)

/* Rows x and y over one sub-block: their i32 sums (sx, sy).  steps =
   sub / 4 (4 or 8) and flush (4 or 8) are constants in each caller. */
#define TOPS_Q8_PAIR(steps, flush)                                                                 \
    do {                                                                                           \
        __m256i hx, hy;                                                                            \
        TOPS_Q8_STEP(TOPS_Q8_FIRST, 0);                                                            \
        TOPS_Q8_STEP(_mm256_add_epi16, 1);                                                         \
        TOPS_Q8_STEP(_mm256_add_epi16, 2);                                                         \
        TOPS_Q8_STEP(_mm256_add_epi16, 3);                                                         \
        if ((steps) == 8 && (flush) == 4) {                                                        \
            sx = _mm256_madd_epi16(hx, ones);                                                      \
            sy = _mm256_madd_epi16(hy, ones);                                                      \
            TOPS_Q8_STEP(TOPS_Q8_FIRST, 4);                                                        \
        } else if ((steps) == 8) {                                                                 \
            TOPS_Q8_STEP(_mm256_add_epi16, 4);                                                     \
        }                                                                                          \
        if ((steps) == 8) {                                                                        \
            TOPS_Q8_STEP(_mm256_add_epi16, 5);                                                     \
            TOPS_Q8_STEP(_mm256_add_epi16, 6);                                                     \
            TOPS_Q8_STEP(_mm256_add_epi16, 7);                                                     \
        }                                                                                          \
        if ((steps) == 8 && (flush) == 4) {                                                        \
            sx = _mm256_add_epi32(sx, _mm256_madd_epi16(hx, ones));                                \
            sy = _mm256_add_epi32(sy, _mm256_madd_epi16(hy, ones));                                \
        } else {                                                                                   \
            sx = _mm256_madd_epi16(hx, ones);                                                      \
            sy = _mm256_madd_epi16(hy, ones);                                                      \
        }                                                                                          \
    } while (0)

/* The offset correction in integers, then one convert and FMA per row and sub-block. */
#define TOPS_Q8_ROW(f, s, r)                                                                                 \
    do {                                                                                                     \
        f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s, _mm256_set1_epi32(acorr[(r) * lds + blk]))), \
                            _mm256_mul_ps(bs, _mm256_set1_ps(ascale[(r) * lds + blk])), f);                 \
        if (bmin) f = _mm256_fnmadd_ps(_mm256_set1_ps(amin[(r) * lds + blk]), bm, f);                        \
    } while (0)

#define TOPS_Q8_KERNEL(steps, flush)                                                               \
    do {                                                                                           \
        const __m256i ones = _mm256_set1_epi16(1);                                                 \
        __m256 f0 = _mm256_setzero_ps(), f1 = f0, f2 = f0, f3 = f0;                                \
        for (int64_t blk = 0; blk < nb; blk++) {                                                   \
            const __m256 bs = _mm256_loadu_ps(bscale + blk * 8);                                   \
            const __m256 bm = bmin ? _mm256_loadu_ps(bmin + blk * 8) : bs;                         \
            const int8_t *ax = a + blk * 4 * (steps), *ay = ax + lda;                              \
            __m256i sx, sy;                                                                        \
            TOPS_Q8_PAIR(steps, flush);                                                            \
            TOPS_Q8_ROW(f0, sx, 0);                                                                \
            TOPS_Q8_ROW(f1, sy, 1);                                                                \
            ax += 2 * lda;                                                                         \
            ay += 2 * lda;                                                                         \
            TOPS_Q8_PAIR(steps, flush);                                                            \
            TOPS_Q8_ROW(f2, sx, 2);                                                                \
            TOPS_Q8_ROW(f3, sy, 3);                                                                \
            b += (steps) * 32;                                                                     \
        }                                                                                          \
        if (accumulate) {                                                                          \
            f0 = _mm256_add_ps(f0, _mm256_loadu_ps(c));                                            \
            f1 = _mm256_add_ps(f1, _mm256_loadu_ps(c + ldc));                                      \
            f2 = _mm256_add_ps(f2, _mm256_loadu_ps(c + 2 * ldc));                                  \
            f3 = _mm256_add_ps(f3, _mm256_loadu_ps(c + 3 * ldc));                                  \
        }                                                                                          \
        _mm256_storeu_ps(c, f0);                                                                   \
        _mm256_storeu_ps(c + ldc, f1);                                                             \
        _mm256_storeu_ps(c + 2 * ldc, f2);                                                         \
        _mm256_storeu_ps(c + 3 * ldc, f3);                                                         \
    } while (0)

/* Weights q + 16 (|q| <= 15): four steps per i16 sum. */
void tops_gemm_f32_qi8_qu5_4x8__avx2(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                     const int32_t *acorr, int64_t lds, const uint8_t *b, const float *bscale,
                                     const float *amin, const float *bmin, float *c,
                                     int64_t ldc, int accumulate) {
    if (sub == 32) TOPS_Q8_KERNEL(8, 4);
    else TOPS_Q8_KERNEL(4, 4);
}

/* Weights q + 8 (|q| <= 8): a whole sub-block per i16 sum. */
void tops_gemm_f32_qi8_qs4_4x8__avx2(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                     const int32_t *acorr, int64_t lds, const uint8_t *b, const float *bscale,
                                     const float *amin, const float *bmin, float *c,
                                     int64_t ldc, int accumulate) {
    if (sub == 32) TOPS_Q8_KERNEL(8, 8);
    else TOPS_Q8_KERNEL(4, 4);
}
#undef TOPS_Q8_KERNEL
#undef TOPS_Q8_ROW
#undef TOPS_Q8_PAIR
#undef TOPS_Q8_STEP
#undef TOPS_Q8_FIRST

/* Weights q + 128 (|q| <= 128, 8-bit formats): vpmaddubsw cannot take
   u8 codes up to 255 against s8 activations (pairs reach 64770), so each
   step turns the panel back to q (xor 0x80, shared by the four rows),
   multiplies |q| (u8, <= 128) by the activations carrying q's sign
   (vpsignb; |aq| <= 127), pairs <= 32512 in i16, and widens at once with
   vpmaddwd.  The sums are the signed dot itself: acorr (128 * the code
   sum) is what the offset panel would need, so it is not read.  Rounding
   as the other AVX2 kernels: convert, one FMA by bscale * ascale. */
void tops_gemm_f32_qi8_qu8_4x8__avx2(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                     const int32_t *acorr, int64_t lds, const uint8_t *b, const float *bscale,
                                     const float *amin, const float *bmin, float *c,
                                     int64_t ldc, int accumulate) {
    (void)acorr;
    const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
    __m256 f0 = _mm256_setzero_ps(), f1 = f0, f2 = f0, f3 = f0;
    const int8_t *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda;
    for (int64_t blk = 0; blk < nb; blk++) {
        __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
        for (int k = 0; k < sub; k += 4) {
            const __m256i q = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b), flip);
            const __m256i u = _mm256_abs_epi8(q);
#define TOPS_Q8_WIDE(s, ar) \
    s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(tops__bcast4((ar) + k), q)), ones))
            TOPS_Q8_WIDE(s0, a0);
            TOPS_Q8_WIDE(s1, a1);
            TOPS_Q8_WIDE(s2, a2);
            TOPS_Q8_WIDE(s3, a3);
#undef TOPS_Q8_WIDE
            b += 32;
        }
        a0 += sub, a1 += sub, a2 += sub, a3 += sub;
        const __m256 bs = _mm256_loadu_ps(bscale + blk * 8);
        f0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(bs, _mm256_set1_ps(ascale[blk])), f0);
        f1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_mul_ps(bs, _mm256_set1_ps(ascale[lds + blk])), f1);
        f2 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s2), _mm256_mul_ps(bs, _mm256_set1_ps(ascale[2 * lds + blk])), f2);
        f3 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s3), _mm256_mul_ps(bs, _mm256_set1_ps(ascale[3 * lds + blk])), f3);
        if (bmin) { /* the mins: c -= amin * bmin */
            const __m256 bm = _mm256_loadu_ps(bmin + blk * 8);
            f0 = _mm256_fnmadd_ps(_mm256_set1_ps(amin[blk]), bm, f0);
            f1 = _mm256_fnmadd_ps(_mm256_set1_ps(amin[lds + blk]), bm, f1);
            f2 = _mm256_fnmadd_ps(_mm256_set1_ps(amin[2 * lds + blk]), bm, f2);
            f3 = _mm256_fnmadd_ps(_mm256_set1_ps(amin[3 * lds + blk]), bm, f3);
        }
    }
    if (accumulate) {
        f0 = _mm256_add_ps(f0, _mm256_loadu_ps(c));
        f1 = _mm256_add_ps(f1, _mm256_loadu_ps(c + ldc));
        f2 = _mm256_add_ps(f2, _mm256_loadu_ps(c + 2 * ldc));
        f3 = _mm256_add_ps(f3, _mm256_loadu_ps(c + 3 * ldc));
    }
    _mm256_storeu_ps(c, f0);
    _mm256_storeu_ps(c + ldc, f1);
    _mm256_storeu_ps(c + 2 * ldc, f2);
    _mm256_storeu_ps(c + 3 * ldc, f3);
}

/* 8 rows x 32 k per round: an 8 x 8 transpose of 4-byte groups. */
void tops__avx2_pack_q8_panel(const int8_t *rows, int64_t kc, int offset, uint8_t *panel) {
    const __m256i off = _mm256_set1_epi8((char)offset);
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
        for (int j = 0; j < 8; j++) panel[(k / 4) * 32 + j * 4 + k % 4] = (uint8_t)(rows[j * kc + k] + offset);
}

/* The 32-column twin (tops__gemm_q8_x4_fn): per sub-block the columns in
   two halves of 16, all four rows a pass, the exact i32 dots
   summed in registers (q8_sums.h: 0.75 loads per vpmaddubsw, against 1.5
   in the 4 x 8 kernels, which read each weight vector twice and broadcast
   for 8 columns) and the 4 x 8 kernels' scaling per column (convert,
   one FMA by bscale * ascale, the mins' FMA), the f32 sums in an L1
   buffer: every column gets the bits of the 4 x 8 kernel on its panel. */
static inline __attribute__((always_inline)) void x4_body(int offset, int steps, int group, int64_t nb,
                                                          const int8_t *a, int64_t lda, const float *ascale,
                                                          const int32_t *acorr, int64_t lds, const uint8_t *b,
                                                          int64_t bstride, const float *bscale, int64_t sstride,
                                                          const float *amin, const float *bmin, float *c, int64_t ldc,
                                                          int accumulate, const uint8_t *pf) {
    const int64_t bstep = group ? 128 : 32;
    float f[4 * 32] __attribute__((aligned(32)));
    memset(f, 0, sizeof f);
    const int8_t *ar[4] = {a, a + lda, a + 2 * lda, a + 3 * lda};
    const int32_t *acr[4] = {acorr, acorr + lds, acorr + 2 * lds, acorr + 3 * lds};
    for (int64_t blk = 0; blk < nb; blk++) {
        if (pf)
            for (int l = 0; l < steps * 32; l += 64) _mm_prefetch((const char *)pf + blk * steps * 32 + l, _MM_HINT_T0);
        for (int half = 0; half < 2; half++) {
            const uint8_t *p0 = group ? b + blk * steps * 128 + half * 64 : b + 2 * half * bstride + blk * steps * 32;
            const uint8_t *p1 = group ? p0 + 32 : p0 + bstride;
            const int64_t s0 = group ? blk * 32 + half * 16 : 2 * half * sstride + blk * 8;
            const int64_t s1 = group ? s0 + 8 : s0 + sstride;
            const __m256 bs0 = _mm256_loadu_ps(bscale + s0), bs1 = _mm256_loadu_ps(bscale + s1);
            __m256i s[4][2];
            tops__q8_half_sums(offset, 4, steps, ar, blk * steps * 4, acr, blk, p0, p1, bstep, s);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                const int64_t at = i * lds + blk;
                const __m256 as = _mm256_set1_ps(ascale[at]);
                float *fi = f + i * 32 + half * 16;
                __m256 v0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i][0]), _mm256_mul_ps(bs0, as), _mm256_load_ps(fi));
                __m256 v1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i][1]), _mm256_mul_ps(bs1, as), _mm256_load_ps(fi + 8));
                if (bmin) { /* the mins: c -= amin * bmin */
                    const __m256 am = _mm256_set1_ps(amin[at]);
                    v0 = _mm256_fnmadd_ps(am, _mm256_loadu_ps(bmin + s0), v0);
                    v1 = _mm256_fnmadd_ps(am, _mm256_loadu_ps(bmin + s1), v1);
                }
                _mm256_store_ps(fi, v0);
                _mm256_store_ps(fi + 8, v1);
            }
        }
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 32; j += 8) {
            __m256 v = _mm256_load_ps(f + i * 32 + j);
            if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(c + i * ldc + j));
            _mm256_storeu_ps(c + i * ldc + j, v);
        }
}

void tops_gemm_f32_qi8_qu8_4x32__avx2(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                      const int32_t *acorr, int64_t lds, const uint8_t *b, int64_t bstride,
                                      const float *bscale, int64_t sstride, const float *amin, const float *bmin,
                                      float *c, int64_t ldc, int accumulate, const uint8_t *pf, int offset) {
    const int group = bstride == 32;
#define TOPS_Q8_X4(off, steps)                                                                                    \
    do {                                                                                                          \
        if (group) x4_body(off, steps, 1, nb, a, lda, ascale, acorr, lds, b, bstride, bscale, sstride, amin, bmin, c, \
                           ldc, accumulate, pf);                                                                  \
        else x4_body(off, steps, 0, nb, a, lda, ascale, acorr, lds, b, bstride, bscale, sstride, amin, bmin, c, ldc, \
                     accumulate, pf);                                                                             \
    } while (0)
    if (offset == TOPS_Q8_OFFSET_NARROW) {
        if (sub == 32) TOPS_Q8_X4(TOPS_Q8_OFFSET_NARROW, 8);
        else TOPS_Q8_X4(TOPS_Q8_OFFSET_NARROW, 4);
    } else if (offset == TOPS_Q8_OFFSET) {
        if (sub == 32) TOPS_Q8_X4(TOPS_Q8_OFFSET, 8);
        else TOPS_Q8_X4(TOPS_Q8_OFFSET, 4);
    } else {
        if (sub == 32) TOPS_Q8_X4(TOPS_Q8_OFFSET_WIDE, 8);
        else TOPS_Q8_X4(TOPS_Q8_OFFSET_WIDE, 4);
    }
#undef TOPS_Q8_X4
}
