/* AVX-512 VNNI relaxed integer microkernel with A read in place through
   row pointers (conv2d's implicit GEMM over an input quantized once per
   call): 6 rows x 16 columns (two of gemm_q8's 8-column panels), vpdpbusd
   on 256-bit vectors, the block scaling of gemm_q8_vnni.c. */
#include "cpu/dispatch.h"

#include <immintrin.h>
#include <string.h>

static inline __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

void tops_gemm_f32_qi8_qu8_6x16_rows__avx512_vnni(int64_t nb, const int8_t *const *a, const float *const *as,
                                                  const int32_t *const *acorr, const uint8_t *b0, const uint8_t *b1,
                                                  const float *bs0, const float *bs1, float *c, int64_t ldc,
                                                  int accumulate) {
    const int8_t *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    __m256 f[6][2];
    for (int i = 0; i < 6; i++) f[i][0] = f[i][1] = _mm256_setzero_ps();
    for (int64_t blk = 0; blk < nb; blk++) {
        __m256i s[6][2];
        for (int i = 0; i < 6; i++) s[i][0] = s[i][1] = _mm256_setzero_si256();
        for (int k = 0; k < 32; k += 4) {
            const __m256i w0 = _mm256_loadu_si256((const __m256i *)b0), w1 = _mm256_loadu_si256((const __m256i *)b1);
#define TOPS_Q8_STEP(i, ap)                                                                                      \
    do {                                                                                                         \
        const __m256i x = bcast4(ap + k);                                                                        \
        s[i][0] = _mm256_dpbusd_epi32(s[i][0], w0, x);                                                           \
        s[i][1] = _mm256_dpbusd_epi32(s[i][1], w1, x);                                                           \
    } while (0)
            TOPS_Q8_STEP(0, a0);
            TOPS_Q8_STEP(1, a1);
            TOPS_Q8_STEP(2, a2);
            TOPS_Q8_STEP(3, a3);
            TOPS_Q8_STEP(4, a4);
            TOPS_Q8_STEP(5, a5);
#undef TOPS_Q8_STEP
            b0 += 32;
            b1 += 32;
        }
        a0 += 32, a1 += 32, a2 += 32, a3 += 32, a4 += 32, a5 += 32;
        const __m256 g0 = _mm256_loadu_ps(bs0 + blk * 8), g1 = _mm256_loadu_ps(bs1 + blk * 8);
        for (int i = 0; i < 6; i++) {
            const __m256i corr = _mm256_set1_epi32(acorr[i][blk]);
            const __m256 sc = _mm256_set1_ps(as[i][blk]);
            f[i][0] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s[i][0], corr)), g0), sc, f[i][0]);
            f[i][1] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s[i][1], corr)), g1), sc, f[i][1]);
        }
    }
    for (int i = 0; i < 6; i++) {
        float *ci = c + i * ldc;
        if (accumulate) {
            f[i][0] = _mm256_add_ps(f[i][0], _mm256_loadu_ps(ci));
            f[i][1] = _mm256_add_ps(f[i][1], _mm256_loadu_ps(ci + 8));
        }
        _mm256_storeu_ps(ci, f[i][0]);
        _mm256_storeu_ps(ci + 8, f[i][1]);
    }
}
