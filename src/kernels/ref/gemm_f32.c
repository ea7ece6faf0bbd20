/* The scalar f32 microkernel: the reference every fast kernel is tested
   against, and the fallback of every dispatch level. */
#include "kernels/kernels.h"

enum { REF_MR = 4, REF_NR = 8 };

void tops_gemm_f32_f32_f32_4x8__ref(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                    int accumulate) {
    float acc[REF_MR][REF_NR] = {{0}};
    for (int64_t k = 0; k < kc; k++) {
        const float *ak = a + k * REF_MR, *bk = b + k * REF_NR;
        for (int i = 0; i < REF_MR; i++)
            for (int j = 0; j < REF_NR; j++) acc[i][j] += ak[i] * bk[j];
    }
    for (int i = 0; i < REF_MR; i++)
        for (int j = 0; j < REF_NR; j++) c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
}

void tops__ref_pack_rows_f32(const float *src, int64_t ld, int64_t valid, int64_t kc, float *dst, int64_t width) {
    for (int64_t k = 0; k < kc; k++) {
        float *row = dst + k * width;
        for (int64_t j = 0; j < valid; j++) row[j] = src[j * ld + k];
        for (int64_t j = valid; j < width; j++) row[j] = 0.0f;
    }
}
