/* AVX-512 VNNI relaxed integer microkernel: the layout of the AVX2 kernel
   (gemm_q8.c), with vpdpbusd doing vpmaddubsw + vpmaddwd + add in one
   instruction (u8 x s8 summed straight into i32: no i16 stage), on 256-bit
   vectors (AVX-512VL), 4 rows x 8 columns. */
#include "kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

static inline __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

void tops_gemm_f32_qi8_qu5_4x8__avx512_vnni(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                            const int32_t *acorr, int64_t lds, const uint8_t *b, const float *bscale,
                                            const float *amin,
                                            const float *bmin, float *c, int64_t ldc, int accumulate) {
    __m256 f0 = _mm256_setzero_ps(), f1 = f0, f2 = f0, f3 = f0;
    const int8_t *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda;
    for (int64_t blk = 0; blk < nb; blk++) {
        /* Two accumulators per row (even and odd steps): vpdpbusd's
           latency needs eight independent chains to keep both ports busy. */
        __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0, t0 = s0, t1 = s0, t2 = s0, t3 = s0;
        for (int k = 0; k < sub; k += 8) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)b);
            const __m256i v = _mm256_loadu_si256((const __m256i *)(b + 32));
            s0 = _mm256_dpbusd_epi32(s0, w, bcast4(a0 + k));
            s1 = _mm256_dpbusd_epi32(s1, w, bcast4(a1 + k));
            s2 = _mm256_dpbusd_epi32(s2, w, bcast4(a2 + k));
            s3 = _mm256_dpbusd_epi32(s3, w, bcast4(a3 + k));
            t0 = _mm256_dpbusd_epi32(t0, v, bcast4(a0 + k + 4));
            t1 = _mm256_dpbusd_epi32(t1, v, bcast4(a1 + k + 4));
            t2 = _mm256_dpbusd_epi32(t2, v, bcast4(a2 + k + 4));
            t3 = _mm256_dpbusd_epi32(t3, v, bcast4(a3 + k + 4));
            b += 64;
        }
        s0 = _mm256_add_epi32(s0, t0);
        s1 = _mm256_add_epi32(s1, t1);
        s2 = _mm256_add_epi32(s2, t2);
        s3 = _mm256_add_epi32(s3, t3);
        a0 += sub;
        a1 += sub;
        a2 += sub;
        a3 += sub;
        const __m256 bs = _mm256_loadu_ps(bscale + blk * 8);
        const __m256 bm = bmin ? _mm256_loadu_ps(bmin + blk * 8) : bs;
#define TOPS_Q8_ROW(f, s, i)                                                                                     \
    do {                                                                                                         \
        f = _mm256_fmadd_ps(                                                                                     \
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s, _mm256_set1_epi32(acorr[(i) * lds + blk]))), bs), \
            _mm256_set1_ps(ascale[(i) * lds + blk]), f);                                                        \
        if (bmin) f = _mm256_fnmadd_ps(_mm256_set1_ps(amin[(i) * lds + blk]), bm, f);                            \
    } while (0)
        TOPS_Q8_ROW(f0, s0, 0);
        TOPS_Q8_ROW(f1, s1, 1);
        TOPS_Q8_ROW(f2, s2, 2);
        TOPS_Q8_ROW(f3, s3, 3);
#undef TOPS_Q8_ROW
    }
    __m256 r[4] = {f0, f1, f2, f3};
    for (int i = 0; i < 4; i++) {
        if (accumulate) r[i] = _mm256_add_ps(r[i], _mm256_loadu_ps(c + i * ldc));
        _mm256_storeu_ps(c + i * ldc, r[i]);
    }
}

/* The same over 32 columns: four of gemm_q8's 8-column panels (panel p at
   b + p * bstride, its scales and mins at + p * sstride), two per 512-bit
   vector (vinserti64x4 once per step, shared by the four rows), so each
   convert, multiply and FMA of the block scaling covers 16 columns.  Sums
   start from -acorr (the exact integer s - acorr of the 8-column kernel);
   then, per column, the 8-column kernel's steps in its order:
   fma(cvt(s) * bs, as, c), then fnmadd(amin, bm, c): the same bits.
   bstride == 32 is the group layout (kernels.h): the four panels' steps
   interleaved (128 bytes a step) and their scales and mins too (32 floats
   a block), so each operand is one 512-bit load and no panels are joined. */
static inline __m512i pair_u8(const uint8_t *lo, const uint8_t *hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
                              _mm256_loadu_si256((const __m256i *)hi), 1);
}

static inline __m512 pair_ps(const float *lo, const float *hi) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(lo)), _mm256_loadu_ps(hi), 1);
}

static inline __attribute__((always_inline)) void q8_4x32(int steps, int group, int64_t nb, const int8_t *a, int64_t lda,
                                                          const float *ascale, const int32_t *acorr, int64_t lds,
                                                          const uint8_t *b, int64_t bstride, const float *bscale,
                                                          int64_t sstride, const float *amin, const float *bmin,
                                                          float *c, int64_t ldc, int accumulate, const uint8_t *pf) {
    const uint8_t *b0 = b, *b1 = b + bstride, *b2 = b + 2 * bstride, *b3 = b + 3 * bstride;
    __m512 f[4][2];
    for (int i = 0; i < 4; i++) f[i][0] = f[i][1] = _mm512_setzero_ps();
    for (int64_t blk = 0; blk < nb; blk++) {
        __m512i s[4][2];
        for (int i = 0; i < 4; i++) s[i][0] = s[i][1] = _mm512_set1_epi32(-acorr[i * lds + blk]);
        const int8_t *ab = a + blk * 4 * steps;
        if (pf)
            for (int l = 0; l < steps * 32; l += 64) _mm_prefetch((const char *)pf + blk * steps * 32 + l, _MM_HINT_T0);
        for (int t = 0; t < steps; t++) {
            __m512i w0, w1;
            if (group) {
                w0 = _mm512_loadu_si512((const void *)(b + 128 * ((int64_t)blk * steps + t)));
                w1 = _mm512_loadu_si512((const void *)(b + 128 * ((int64_t)blk * steps + t) + 64));
            } else {
                w0 = pair_u8(b0, b1), w1 = pair_u8(b2, b3);
            }
            for (int i = 0; i < 4; i++) {
                int32_t v;
                memcpy(&v, ab + i * lda + 4 * t, 4);
                const __m512i x = _mm512_set1_epi32(v);
                s[i][0] = _mm512_dpbusd_epi32(s[i][0], w0, x);
                s[i][1] = _mm512_dpbusd_epi32(s[i][1], w1, x);
            }
            b0 += 32, b1 += 32, b2 += 32, b3 += 32;
        }
        const int64_t o = blk * 8;
        const __m512 g0 = group ? _mm512_loadu_ps(bscale + 4 * o) : pair_ps(bscale + o, bscale + sstride + o);
        const __m512 g1 =
            group ? _mm512_loadu_ps(bscale + 4 * o + 16) : pair_ps(bscale + 2 * sstride + o, bscale + 3 * sstride + o);
        for (int i = 0; i < 4; i++) {
            const __m512 sc = _mm512_set1_ps(ascale[i * lds + blk]);
            f[i][0] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s[i][0]), g0), sc, f[i][0]);
            f[i][1] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s[i][1]), g1), sc, f[i][1]);
        }
        if (bmin) {
            const __m512 m0 = group ? _mm512_loadu_ps(bmin + 4 * o) : pair_ps(bmin + o, bmin + sstride + o);
            const __m512 m1 =
                group ? _mm512_loadu_ps(bmin + 4 * o + 16) : pair_ps(bmin + 2 * sstride + o, bmin + 3 * sstride + o);
            for (int i = 0; i < 4; i++) {
                const __m512 am = _mm512_set1_ps(amin[i * lds + blk]);
                f[i][0] = _mm512_fnmadd_ps(am, m0, f[i][0]);
                f[i][1] = _mm512_fnmadd_ps(am, m1, f[i][1]);
            }
        }
    }
    for (int i = 0; i < 4; i++) {
        float *ci = c + i * ldc;
        if (accumulate) {
            f[i][0] = _mm512_add_ps(f[i][0], _mm512_loadu_ps(ci));
            f[i][1] = _mm512_add_ps(f[i][1], _mm512_loadu_ps(ci + 16));
        }
        _mm512_storeu_ps(ci, f[i][0]);
        _mm512_storeu_ps(ci + 16, f[i][1]);
    }
}

void tops_gemm_f32_qi8_qu8_4x32__avx512_vnni(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                            const int32_t *acorr, int64_t lds, const uint8_t *b, int64_t bstride,
                                            const float *bscale, int64_t sstride, const float *amin,
                                            const float *bmin, float *c, int64_t ldc, int accumulate, const uint8_t *pf,
                                            int offset) {
    (void)offset; /* vpdpbusd has no i16 stage: any offset */
    const int group = bstride == 32;
#define TOPS_Q8_X4(steps, g) \
    q8_4x32(steps, g, nb, a, lda, ascale, acorr, lds, b, bstride, bscale, sstride, amin, bmin, c, ldc, accumulate, pf)
    if (group) {
        if (sub == 32) TOPS_Q8_X4(8, 1);
        else if (sub == 16) TOPS_Q8_X4(4, 1);
        else TOPS_Q8_X4(sub / 4, 1);
    } else {
        if (sub == 32) TOPS_Q8_X4(8, 0);
        else if (sub == 16) TOPS_Q8_X4(4, 0);
        else TOPS_Q8_X4(sub / 4, 0);
    }
#undef TOPS_Q8_X4
}
