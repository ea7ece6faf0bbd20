/* AVX2+FMA f32 microkernel: a 6x16 tile in 12 ymm accumulators, B read as
   two vectors per k, A broadcast one row at a time (the BLIS Haswell shape). */
#include "cpu/dispatch.h"

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

void tops__avx2_pack_rows_f32(const float *src, int64_t ld, int64_t valid, int64_t kc, float *dst, int64_t width) {
    if (valid != width || width % 8 != 0) {
        tops__ref_pack_rows_f32(src, ld, valid, kc, dst, width);
        return;
    }
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8)
        for (int64_t j = 0; j < width; j += 8) {
            const float *s = src + j * ld + k;
            tops__avx2_store_transposed8(_mm256_loadu_ps(s), _mm256_loadu_ps(s + ld), _mm256_loadu_ps(s + 2 * ld),
                       _mm256_loadu_ps(s + 3 * ld), _mm256_loadu_ps(s + 4 * ld), _mm256_loadu_ps(s + 5 * ld),
                       _mm256_loadu_ps(s + 6 * ld), _mm256_loadu_ps(s + 7 * ld), dst + k * width + j, width);
        }
    for (; k < kc; k++)
        for (int64_t j = 0; j < width; j++) dst[k * width + j] = src[j * ld + k];
}
