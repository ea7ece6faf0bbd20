/* AVX-512 f32 microkernel: a 12x32 tile in 24 zmm accumulators, B read as
   two vectors per k, A broadcast one row at a time (the AVX2 kernel's
   shape, twice as wide, with the 32-register file). */
#include "kernels/kernels.h"

#include <immintrin.h>

void tops_gemm_f32_f32_f32_12x32__avx512(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                         int accumulate) {
    __m512 acc[12][2];
    for (int i = 0; i < 12; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#define TOPS_ROW(i)                                                  \
    do {                                                             \
        const __m512 x = _mm512_set1_ps(a[i]);                       \
        acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);               \
        acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);               \
    } while (0)
        TOPS_ROW(0);
        TOPS_ROW(1);
        TOPS_ROW(2);
        TOPS_ROW(3);
        TOPS_ROW(4);
        TOPS_ROW(5);
        TOPS_ROW(6);
        TOPS_ROW(7);
        TOPS_ROW(8);
        TOPS_ROW(9);
        TOPS_ROW(10);
        TOPS_ROW(11);
#undef TOPS_ROW
        a += 12;
        b += 32;
    }
    for (int i = 0; i < 12; i++) {
        float *ci = c + i * ldc;
        if (accumulate) {
            acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_loadu_ps(ci));
            acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_loadu_ps(ci + 16));
        }
        _mm512_storeu_ps(ci, acc[i][0]);
        _mm512_storeu_ps(ci + 16, acc[i][1]);
    }
}
