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
