/* AVX-512 f32 microkernel for conv2d's implicit GEMM with A read in place
   through six row pointers (an input pixel's channels, or a zero row for
   padding): a 6 x 64 tile over two adjacent 32-column weight panels of
   gemm_f32_rows (24 zmm accumulators, four B vectors and one broadcast a k
   step: each broadcast feeds four FMAs, 10 loads per 24 FMAs against 12x32's
   14).  The tile is loaded from c when load_c is set and the FMAs continue
   its chains, so a column's sum is one chain over K in order however the
   driver cuts K into calls. */
#include "kernels/kernels.h"

#include <immintrin.h>

#define TOPS_CONV_ROW(i, WIDE)                               \
    do {                                                \
        const __m512 x = _mm512_set1_ps(a##i[k]);       \
        c##i##0 = _mm512_fmadd_ps(x, w0, c##i##0);      \
        c##i##1 = _mm512_fmadd_ps(x, w1, c##i##1);      \
        if (WIDE) {                                     \
            c##i##2 = _mm512_fmadd_ps(x, w2, c##i##2);  \
            c##i##3 = _mm512_fmadd_ps(x, w3, c##i##3);  \
        }                                               \
    } while (0)

#define TOPS_CONV_BODY(NAME, WIDE)                                                                                   \
    static void NAME(int64_t kc, const float *const *a, const float *b0, const float *b1, float *c, int load_c) {   \
        const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];                       \
        __m512 c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23;                                         \
        __m512 c30, c31, c32, c33, c40, c41, c42, c43, c50, c51, c52, c53;                                         \
        if (load_c) {                                                                                              \
            c00 = _mm512_loadu_ps(c + 0 * 64), c01 = _mm512_loadu_ps(c + 0 * 64 + 16);                            \
            c10 = _mm512_loadu_ps(c + 1 * 64), c11 = _mm512_loadu_ps(c + 1 * 64 + 16);                            \
            c20 = _mm512_loadu_ps(c + 2 * 64), c21 = _mm512_loadu_ps(c + 2 * 64 + 16);                            \
            c30 = _mm512_loadu_ps(c + 3 * 64), c31 = _mm512_loadu_ps(c + 3 * 64 + 16);                            \
            c40 = _mm512_loadu_ps(c + 4 * 64), c41 = _mm512_loadu_ps(c + 4 * 64 + 16);                            \
            c50 = _mm512_loadu_ps(c + 5 * 64), c51 = _mm512_loadu_ps(c + 5 * 64 + 16);                            \
            if (WIDE) {                                                                                            \
                c02 = _mm512_loadu_ps(c + 0 * 64 + 32), c03 = _mm512_loadu_ps(c + 0 * 64 + 48);                    \
                c12 = _mm512_loadu_ps(c + 1 * 64 + 32), c13 = _mm512_loadu_ps(c + 1 * 64 + 48);                    \
                c22 = _mm512_loadu_ps(c + 2 * 64 + 32), c23 = _mm512_loadu_ps(c + 2 * 64 + 48);                    \
                c32 = _mm512_loadu_ps(c + 3 * 64 + 32), c33 = _mm512_loadu_ps(c + 3 * 64 + 48);                    \
                c42 = _mm512_loadu_ps(c + 4 * 64 + 32), c43 = _mm512_loadu_ps(c + 4 * 64 + 48);                    \
                c52 = _mm512_loadu_ps(c + 5 * 64 + 32), c53 = _mm512_loadu_ps(c + 5 * 64 + 48);                    \
            } else {                                                                                               \
                c02 = c03 = c12 = c13 = c22 = c23 = c32 = c33 = c42 = c43 = c52 = c53 = _mm512_setzero_ps();       \
            }                                                                                                      \
        } else {                                                                                                   \
            c00 = c01 = c02 = c03 = c10 = c11 = c12 = c13 = c20 = c21 = c22 = c23 = _mm512_setzero_ps();           \
            c30 = c31 = c32 = c33 = c40 = c41 = c42 = c43 = c50 = c51 = c52 = c53 = _mm512_setzero_ps();           \
        }                                                                                                          \
        for (int64_t k = 0; k < kc; k++) {                                                                         \
            const __m512 w0 = _mm512_loadu_ps(b0), w1 = _mm512_loadu_ps(b0 + 16);                                  \
            __m512 w2 = w0, w3 = w1;                                                                               \
            if (WIDE) w2 = _mm512_loadu_ps(b1), w3 = _mm512_loadu_ps(b1 + 16), b1 += 32;                           \
            (void)w2, (void)w3;                                                                                    \
            TOPS_CONV_ROW(0, WIDE);                                                                                      \
            TOPS_CONV_ROW(1, WIDE);                                                                                      \
            TOPS_CONV_ROW(2, WIDE);                                                                                      \
            TOPS_CONV_ROW(3, WIDE);                                                                                      \
            TOPS_CONV_ROW(4, WIDE);                                                                                      \
            TOPS_CONV_ROW(5, WIDE);                                                                                      \
            b0 += 32;                                                                                              \
        }                                                                                                          \
        _mm512_storeu_ps(c + 0 * 64, c00), _mm512_storeu_ps(c + 0 * 64 + 16, c01);                                 \
        _mm512_storeu_ps(c + 1 * 64, c10), _mm512_storeu_ps(c + 1 * 64 + 16, c11);                                 \
        _mm512_storeu_ps(c + 2 * 64, c20), _mm512_storeu_ps(c + 2 * 64 + 16, c21);                                 \
        _mm512_storeu_ps(c + 3 * 64, c30), _mm512_storeu_ps(c + 3 * 64 + 16, c31);                                 \
        _mm512_storeu_ps(c + 4 * 64, c40), _mm512_storeu_ps(c + 4 * 64 + 16, c41);                                 \
        _mm512_storeu_ps(c + 5 * 64, c50), _mm512_storeu_ps(c + 5 * 64 + 16, c51);                                 \
        if (WIDE) {                                                                                                \
            _mm512_storeu_ps(c + 0 * 64 + 32, c02), _mm512_storeu_ps(c + 0 * 64 + 48, c03);                        \
            _mm512_storeu_ps(c + 1 * 64 + 32, c12), _mm512_storeu_ps(c + 1 * 64 + 48, c13);                        \
            _mm512_storeu_ps(c + 2 * 64 + 32, c22), _mm512_storeu_ps(c + 2 * 64 + 48, c23);                        \
            _mm512_storeu_ps(c + 3 * 64 + 32, c32), _mm512_storeu_ps(c + 3 * 64 + 48, c33);                        \
            _mm512_storeu_ps(c + 4 * 64 + 32, c42), _mm512_storeu_ps(c + 4 * 64 + 48, c43);                        \
            _mm512_storeu_ps(c + 5 * 64 + 32, c52), _mm512_storeu_ps(c + 5 * 64 + 48, c53);                        \
        }                                                                                                          \
    }

TOPS_CONV_BODY(rows_6x64, 1)
TOPS_CONV_BODY(rows_6x32, 0)
#undef TOPS_CONV_BODY
#undef TOPS_CONV_ROW

void tops_conv_f32_6x64_rows__avx512(int64_t kc, const float *const *a, const float *b0, const float *b1, float *c,
                                     int load_c) {
    if (b1) rows_6x64(kc, a, b0, b1, c, load_c);
    else rows_6x32(kc, a, b0, NULL, c, load_c);
}
