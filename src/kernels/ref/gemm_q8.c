/* Scalar twin of the relaxed integer microkernel (same packed layout). */
#include "kernels/kernels.h"

#include <math.h>

/* The exact i32 sum of each sub-block minus acorr, times bscale * ascale,
   added into f32 accumulators: rounded twice (the 4-bit kernels) or fused
   (fma: the 8-bit kernels' rounding); then, for weights with mins, one
   fma of -amin * bmin. */
static void gemm_q8_4x8(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale, const int32_t *acorr,
                        int64_t lds, const uint8_t *b, const float *bscale, const float *amin, const float *bmin,
                        float *c, int64_t ldc, int accumulate, int fused) {
    float acc[4][8] = {{0}};
    for (int64_t blk = 0; blk < nb; blk++) {
        const uint8_t *bb = b + blk * sub * 8;
        for (int i = 0; i < 4; i++) {
            const int8_t *ai = a + i * lda + blk * sub;
            for (int j = 0; j < 8; j++) {
                int32_t s = 0;
                for (int k = 0; k < sub; k++) s += (int32_t)bb[(k / 4) * 32 + j * 4 + k % 4] * ai[k];
                s -= acorr[i * lds + blk];
                if (fused) acc[i][j] = fmaf((float)s, bscale[blk * 8 + j] * ascale[i * lds + blk], acc[i][j]);
                else acc[i][j] += (float)s * bscale[blk * 8 + j] * ascale[i * lds + blk];
                if (bmin) acc[i][j] = fmaf(-amin[i * lds + blk], bmin[blk * 8 + j], acc[i][j]); /* the mins */
            }
        }
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++) c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
}

void tops_gemm_f32_qi8_qu5_4x8__ref(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                    const int32_t *acorr, int64_t lds, const uint8_t *b, const float *bscale,
                                    const float *amin, const float *bmin, float *c,
                                    int64_t ldc, int accumulate) {
    gemm_q8_4x8(nb, sub, a, lda, ascale, acorr, lds, b, bscale, amin, bmin, c, ldc, accumulate, 0);
}

void tops__ref_pack_q8_panel(const int8_t *rows, int64_t kc, int offset, uint8_t *panel) {
    for (int j = 0; j < 8; j++)
        for (int64_t k = 0; k < kc; k++)
            panel[(k / 4) * 32 + j * 4 + k % 4] = (uint8_t)(rows[j * kc + k] + offset);
}

/* Scalar twin of the 8-bit weight microkernels (panels of q + 128, acorr
   128 * the block's code sum): the exact i32 sum minus acorr, then per
   sub-block one fused multiply-add against bscale * ascale, the rounding
   of the AVX2 kernels (tops_gemm_f32_qi8_qu8_4x8__avx2 gives these bits). */
void tops_gemm_f32_qi8_qu8_4x8__ref(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                    const int32_t *acorr, int64_t lds, const uint8_t *b, const float *bscale,
                                    const float *amin, const float *bmin, float *c,
                                    int64_t ldc, int accumulate) {
    gemm_q8_4x8(nb, sub, a, lda, ascale, acorr, lds, b, bscale, amin, bmin, c, ldc, accumulate, 1);
}
