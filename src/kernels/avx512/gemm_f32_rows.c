/* AVX-512 f32 microkernel with A read in place through row pointers
   (conv2d's implicit GEMM: each row is an input pixel's channels, or a zero
   row for padding): the 12x32 tile of gemm_f32.c, broadcasting a[i][k]
   instead of a packed panel's a[k * 12 + i], so no left packing.  A short
   last block of rows runs the 8- or 4-row body (rows past `rows` are
   neither computed nor stored). */
#include "kernels/kernels.h"

#include <immintrin.h>

#define TOPS_ROWS_BODY(R)                                                                                            \
    static void rows_##R(int64_t kc, const float *const *a, const float *b, float *c, int64_t ldc, int accumulate) { \
        const float *ap[R];                                                                                          \
        __m512 acc[R][2];                                                                                            \
        for (int i = 0; i < R; i++) ap[i] = a[i], acc[i][0] = acc[i][1] = _mm512_setzero_ps();                       \
        for (int64_t k = 0; k < kc; k++) {                                                                           \
            const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);                                      \
            for (int i = 0; i < R; i++) {                                                                            \
                const __m512 x = _mm512_set1_ps(ap[i][k]);                                                           \
                acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);                                                       \
                acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);                                                       \
            }                                                                                                        \
            b += 32;                                                                                                 \
        }                                                                                                            \
        for (int i = 0; i < R; i++) {                                                                                \
            float *ci = c + i * ldc;                                                                                 \
            if (accumulate) {                                                                                        \
                acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_loadu_ps(ci));                                           \
                acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_loadu_ps(ci + 16));                                      \
            }                                                                                                        \
            _mm512_storeu_ps(ci, acc[i][0]);                                                                         \
            _mm512_storeu_ps(ci + 16, acc[i][1]);                                                                    \
        }                                                                                                            \
    }
TOPS_ROWS_BODY(12)
TOPS_ROWS_BODY(8)
TOPS_ROWS_BODY(4)
#undef TOPS_ROWS_BODY

void tops_gemm_f32_f32_f32_12x32_rows__avx512(int64_t kc, int rows, const float *const *a, const float *b, float *c,
                                              int64_t ldc, int accumulate) {
    if (rows > 8) rows_12(kc, a, b, c, ldc, accumulate);
    else if (rows > 4) rows_8(kc, a, b, c, ldc, accumulate);
    else rows_4(kc, a, b, c, ldc, accumulate);
}
