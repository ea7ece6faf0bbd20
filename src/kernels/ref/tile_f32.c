/* Scalar reference of the tile kernels: the truth the SIMD paths are
   tested against.  Sums run in a fixed order (k ascending, left to right). */
#include "kernels/kernels.h"

#include <math.h>

void tops__tile_gemm_f32_6x16__ref(int mr, int64_t k, const float *a, int64_t lda, const float *b,
                                      int64_t ldb, float *c, int64_t ldc, int accumulate) {
    float acc[6][16];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < 16; j++) acc[i][j] = accumulate ? c[i * ldc + j] : 0.0f;
    for (int64_t p = 0; p < k; p++)
        for (int i = 0; i < mr; i++) {
            float av = a[i * lda + p];
            for (int j = 0; j < 16; j++) acc[i][j] += av * b[p * ldb + j];
        }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < 16; j++) c[i * ldc + j] = acc[i][j];
}

void tops__transpose_f32__ref(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                              int64_t cols) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) dst[j * ldd + i] = src[i * lds + j];
}

float tops__exp_sub_f32_row__ref(float *x, int64_t n, float sub, float scale) {
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        x[j] = expf((x[j] - sub) * scale);
        sum += x[j];
    }
    return sum;
}

void tops__scale_f32_row__ref(float *x, int64_t n, float r) {
    for (int64_t j = 0; j < n; j++) x[j] *= r;
}

float tops__reduce_f32_row__ref(const float *x, int64_t n, int op, float identity) {
    float acc = identity;
    int nan = isnan(identity);
    for (int64_t j = 0; j < n; j++) {
        float v = x[j];
        nan |= isnan(v);
        if (op == TOPS_REDUCE_SUM)
            acc += v;
        else if (op == TOPS_REDUCE_MAX)
            acc = v > acc ? v : acc;
        else
            acc = v < acc ? v : acc;
    }
    return nan ? NAN : acc;
}
