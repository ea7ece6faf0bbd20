/* AVX2+FMA f32 microkernel: a 6x16 tile in 12 ymm accumulators, B read as
   two vectors per k, A broadcast one row at a time (the BLIS Haswell shape). */
#include "kernels/kernels.h"

#include <immintrin.h>

#include "kernels/avx2/transpose.h"

void tops_gemm_f32_f32_f32_6x16__avx2(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                      int accumulate) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        __m256 x = _mm256_broadcast_ss(a + 0);
        c00 = _mm256_fmadd_ps(x, b0, c00);
        c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_broadcast_ss(a + 1);
        c10 = _mm256_fmadd_ps(x, b0, c10);
        c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(a + 2);
        c20 = _mm256_fmadd_ps(x, b0, c20);
        c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(a + 3);
        c30 = _mm256_fmadd_ps(x, b0, c30);
        c31 = _mm256_fmadd_ps(x, b1, c31);
        x = _mm256_broadcast_ss(a + 4);
        c40 = _mm256_fmadd_ps(x, b0, c40);
        c41 = _mm256_fmadd_ps(x, b1, c41);
        x = _mm256_broadcast_ss(a + 5);
        c50 = _mm256_fmadd_ps(x, b0, c50);
        c51 = _mm256_fmadd_ps(x, b1, c51);
        a += 6;
        b += 16;
    }
    __m256 r[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
    for (int i = 0; i < 6; i++) {
        float *ci = c + i * ldc;
        if (accumulate) {
            r[2 * i] = _mm256_add_ps(r[2 * i], _mm256_loadu_ps(ci));
            r[2 * i + 1] = _mm256_add_ps(r[2 * i + 1], _mm256_loadu_ps(ci + 8));
        }
        _mm256_storeu_ps(ci, r[2 * i]);
        _mm256_storeu_ps(ci + 8, r[2 * i + 1]);
    }
}

/* Rows in groups of 8 (8 x 8 transposes), then of 4 (4 x 4), then one at
   a time; rows valid..width-1 are zero (any width: 12 at the AVX-512
   level, ragged M edges). */
void tops__avx2_pack_rows_f32(const float *src, int64_t ld, int64_t valid, int64_t kc, float *dst, int64_t width) {
    const int64_t k8 = kc / 8 * 8, v8 = valid / 8 * 8, v4 = valid / 4 * 4;
    for (int64_t k = 0; k < k8; k += 8) {
        for (int64_t j = 0; j < v8; j += 8) {
            const float *s = src + j * ld + k;
            tops__avx2_store_transposed8(_mm256_loadu_ps(s), _mm256_loadu_ps(s + ld), _mm256_loadu_ps(s + 2 * ld),
                       _mm256_loadu_ps(s + 3 * ld), _mm256_loadu_ps(s + 4 * ld), _mm256_loadu_ps(s + 5 * ld),
                       _mm256_loadu_ps(s + 6 * ld), _mm256_loadu_ps(s + 7 * ld), dst + k * width + j, width);
        }
        for (int64_t j = v8; j < v4; j += 4)
            for (int h = 0; h < 8; h += 4) {
                const float *s = src + j * ld + k + h;
                __m128 r0 = _mm_loadu_ps(s), r1 = _mm_loadu_ps(s + ld), r2 = _mm_loadu_ps(s + 2 * ld),
                       r3 = _mm_loadu_ps(s + 3 * ld);
                _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
                float *d = dst + (k + h) * width + j;
                _mm_storeu_ps(d, r0);
                _mm_storeu_ps(d + width, r1);
                _mm_storeu_ps(d + 2 * width, r2);
                _mm_storeu_ps(d + 3 * width, r3);
            }
        for (int64_t kk = k; kk < k + 8; kk++) {
            for (int64_t j = v4; j < valid; j++) dst[kk * width + j] = src[j * ld + kk];
            for (int64_t j = valid; j < width; j++) dst[kk * width + j] = 0.0f;
        }
    }
    for (int64_t k = k8; k < kc; k++) {
        for (int64_t j = 0; j < valid; j++) dst[k * width + j] = src[j * ld + k];
        for (int64_t j = valid; j < width; j++) dst[k * width + j] = 0.0f;
    }
}
