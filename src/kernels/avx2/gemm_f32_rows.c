/* AVX2 f32 microkernel with A read in place through row pointers (conv2d's
   implicit GEMM): the 6x16 tile of gemm_f32.c, broadcasting a[i][k]
   instead of a packed panel's a[k * 6 + i]. */
#include "kernels/kernels.h"

#include <immintrin.h>

void tops_gemm_f32_f32_f32_6x16_rows__avx2(int64_t kc, int rows, const float *const *a, const float *b, float *c, int64_t ldc,
                                           int accumulate) {
    (void)rows; /* always 6: the rows past it read the zero row */
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        __m256 x = _mm256_broadcast_ss(a0 + k);
        c00 = _mm256_fmadd_ps(x, b0, c00);
        c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_broadcast_ss(a1 + k);
        c10 = _mm256_fmadd_ps(x, b0, c10);
        c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(a2 + k);
        c20 = _mm256_fmadd_ps(x, b0, c20);
        c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(a3 + k);
        c30 = _mm256_fmadd_ps(x, b0, c30);
        c31 = _mm256_fmadd_ps(x, b1, c31);
        x = _mm256_broadcast_ss(a4 + k);
        c40 = _mm256_fmadd_ps(x, b0, c40);
        c41 = _mm256_fmadd_ps(x, b1, c41);
        x = _mm256_broadcast_ss(a5 + k);
        c50 = _mm256_fmadd_ps(x, b0, c50);
        c51 = _mm256_fmadd_ps(x, b1, c51);
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
