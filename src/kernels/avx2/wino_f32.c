/* AVX2 Winograd F(2x2, 3x3) transforms (the contracts of tops__wino_in_fn
   and tops__wino_out_fn, kernels/kernels.h): eight channels a vector, the
   same operations in the same order as the reference, so the same bits. */
#include "kernels/kernels.h"

#include <immintrin.h>

void tops__wino_f23_in__avx2(const float *const *d, int64_t n, float *out, int64_t ldo) {
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) {
        __m256 w[4][4];
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++) {
            const __m256 d0 = _mm256_loadu_ps(d[b] + c), d1 = _mm256_loadu_ps(d[4 + b] + c);
            const __m256 d2 = _mm256_loadu_ps(d[8 + b] + c), d3 = _mm256_loadu_ps(d[12 + b] + c);
            w[0][b] = _mm256_sub_ps(d0, d2), w[1][b] = _mm256_add_ps(d1, d2);
            w[2][b] = _mm256_sub_ps(d2, d1), w[3][b] = _mm256_sub_ps(d1, d3);
        }
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) {
            _mm256_storeu_ps(out + (4 * a + 0) * ldo + c, _mm256_sub_ps(w[a][0], w[a][2]));
            _mm256_storeu_ps(out + (4 * a + 1) * ldo + c, _mm256_add_ps(w[a][1], w[a][2]));
            _mm256_storeu_ps(out + (4 * a + 2) * ldo + c, _mm256_sub_ps(w[a][2], w[a][1]));
            _mm256_storeu_ps(out + (4 * a + 3) * ldo + c, _mm256_sub_ps(w[a][1], w[a][3]));
        }
    }
    if (c < n) {
        const float *rest[16];
        for (int i = 0; i < 16; i++) rest[i] = d[i] + c;
        tops__wino_f23_in__ref(rest, n - c, out + c, ldo);
    }
}

void tops__wino_f23_out__avx2(const float *m, int64_t ldm, int64_t n, const float *bias, float *y, int64_t ldy) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 z[2][4];
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++) {
            const __m256 m0 = _mm256_loadu_ps(m + b * ldm + j), m1 = _mm256_loadu_ps(m + (4 + b) * ldm + j);
            const __m256 m2 = _mm256_loadu_ps(m + (8 + b) * ldm + j), m3 = _mm256_loadu_ps(m + (12 + b) * ldm + j);
            z[0][b] = _mm256_add_ps(_mm256_add_ps(m0, m1), m2);
            z[1][b] = _mm256_sub_ps(_mm256_sub_ps(m1, m2), m3);
        }
        const __m256 bj = bias ? _mm256_loadu_ps(bias + j) : _mm256_setzero_ps();
#pragma GCC unroll 2
        for (int a = 0; a < 2; a++) {
            const __m256 y0 = _mm256_add_ps(_mm256_add_ps(z[a][0], z[a][1]), z[a][2]);
            const __m256 y1 = _mm256_sub_ps(_mm256_sub_ps(z[a][1], z[a][2]), z[a][3]);
            _mm256_storeu_ps(y + (2 * a + 0) * ldy + j, _mm256_add_ps(y0, bj));
            _mm256_storeu_ps(y + (2 * a + 1) * ldy + j, _mm256_add_ps(y1, bj));
        }
    }
    if (j < n) tops__wino_f23_out__ref(m + j, ldm, n - j, bias ? bias + j : NULL, y + j, ldy);
}
