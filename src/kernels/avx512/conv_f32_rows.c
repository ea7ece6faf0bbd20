/* AVX-512 f32 microkernel for conv2d's implicit GEMM with A read in place
   through six row pointers (an input pixel's channels): a 6 x 64 tile over
   two adjacent 32-column weight panels (24 zmm accumulators, four B
   vectors and one broadcast a k step: each broadcast feeds four FMAs, 10
   loads per 24 FMAs against a 12 x 32 tile's 14).  Row i of the tile is
   c[i] (64 or 32 floats): the driver points the rows of a block that a tap
   is not padding for straight at their tile rows, no gathering.  The tile
   is loaded from c when load_c is set and the FMAs continue its chains, so
   a column's sum is one chain over K in order however the driver cuts K
   into calls.  Fewer rows (a short block, or the rows a tap is not padding
   for) run the 5-, 4-, 3- or 2-row body: each row's chain is the same FMAs
   in the same order, so the body taken does not change the bits. */
#include "kernels/kernels.h"

#include <immintrin.h>

/* Row i of an R-row tile: its accumulators ci0..ci3 (ci2, ci3 when WIDE). */
#define TOPS_CONV_ROW(i, R, WIDE)                        \
    do {                                                 \
        if ((i) < (R)) {                                 \
            const __m512 x = _mm512_set1_ps(a##i[k]);    \
            c##i##0 = _mm512_fmadd_ps(x, w0, c##i##0);   \
            c##i##1 = _mm512_fmadd_ps(x, w1, c##i##1);   \
            if (WIDE) {                                  \
                c##i##2 = _mm512_fmadd_ps(x, w2, c##i##2); \
                c##i##3 = _mm512_fmadd_ps(x, w3, c##i##3); \
            }                                            \
        }                                                \
    } while (0)
#define TOPS_CONV_LOAD(i, R, WIDE)                                                                    \
    do {                                                                                              \
        c##i##0 = c##i##1 = c##i##2 = c##i##3 = _mm512_setzero_ps();                                  \
        if ((i) < (R) && load_c) {                                                                    \
            c##i##0 = _mm512_loadu_ps(c[i]), c##i##1 = _mm512_loadu_ps(c[i] + 16);     \
            if (WIDE)                                                                                 \
                c##i##2 = _mm512_loadu_ps(c[i] + 32), c##i##3 = _mm512_loadu_ps(c[i] + 48); \
        }                                                                                             \
    } while (0)
#define TOPS_CONV_STORE(i, R, WIDE)                                                            \
    do {                                                                                       \
        if ((i) < (R)) {                                                                       \
            _mm512_storeu_ps(c[i], c##i##0), _mm512_storeu_ps(c[i] + 16, c##i##1); \
            if (WIDE)                                                                          \
                _mm512_storeu_ps(c[i] + 32, c##i##2), _mm512_storeu_ps(c[i] + 48, c##i##3); \
        }                                                                                      \
    } while (0)
#define TOPS_CONV_EACH(M, R, WIDE) M(0, R, WIDE); M(1, R, WIDE); M(2, R, WIDE); M(3, R, WIDE); M(4, R, WIDE); M(5, R, WIDE)

#define TOPS_CONV_BODY(NAME, R, WIDE)                                                                              \
    static void NAME(int64_t kc, const float *const *a, const float *b0, const float *b1, float *const *c, int load_c) { \
        const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];                     \
        __m512 c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23;                                       \
        __m512 c30, c31, c32, c33, c40, c41, c42, c43, c50, c51, c52, c53;                                       \
        TOPS_CONV_EACH(TOPS_CONV_LOAD, R, WIDE);                                                                 \
        for (int64_t k = 0; k < kc; k++) {                                                                       \
            const __m512 w0 = _mm512_loadu_ps(b0), w1 = _mm512_loadu_ps(b0 + 16);                                \
            __m512 w2 = w0, w3 = w1;                                                                             \
            if (WIDE) w2 = _mm512_loadu_ps(b1), w3 = _mm512_loadu_ps(b1 + 16), b1 += 32;                         \
            (void)w2, (void)w3;                                                                                  \
            TOPS_CONV_EACH(TOPS_CONV_ROW, R, WIDE);                                                              \
            b0 += 32;                                                                                            \
        }                                                                                                        \
        TOPS_CONV_EACH(TOPS_CONV_STORE, R, WIDE);                                                                \
    }

TOPS_CONV_BODY(rows_6x64, 6, 1)
TOPS_CONV_BODY(rows_5x64, 5, 1)
TOPS_CONV_BODY(rows_4x64, 4, 1)
TOPS_CONV_BODY(rows_3x64, 3, 1)
TOPS_CONV_BODY(rows_2x64, 2, 1)
TOPS_CONV_BODY(rows_6x32, 6, 0)
TOPS_CONV_BODY(rows_5x32, 5, 0)
TOPS_CONV_BODY(rows_4x32, 4, 0)
TOPS_CONV_BODY(rows_3x32, 3, 0)
TOPS_CONV_BODY(rows_2x32, 2, 0)
#undef TOPS_CONV_BODY
#undef TOPS_CONV_EACH
#undef TOPS_CONV_STORE
#undef TOPS_CONV_LOAD
#undef TOPS_CONV_ROW

void tops_conv_f32_6x64_rows__avx512(int64_t kc, int rows, const float *const *a, const float *b0, const float *b1,
                                     float *const *c, int load_c) {
    if (b1) {
        if (rows > 5) rows_6x64(kc, a, b0, b1, c, load_c);
        else if (rows == 5) rows_5x64(kc, a, b0, b1, c, load_c);
        else if (rows == 4) rows_4x64(kc, a, b0, b1, c, load_c);
        else if (rows == 3) rows_3x64(kc, a, b0, b1, c, load_c);
        else rows_2x64(kc, a, b0, b1, c, load_c);
    } else {
        if (rows > 5) rows_6x32(kc, a, b0, NULL, c, load_c);
        else if (rows == 5) rows_5x32(kc, a, b0, NULL, c, load_c);
        else if (rows == 4) rows_4x32(kc, a, b0, NULL, c, load_c);
        else if (rows == 3) rows_3x32(kc, a, b0, NULL, c, load_c);
        else rows_2x32(kc, a, b0, NULL, c, load_c);
    }
}
