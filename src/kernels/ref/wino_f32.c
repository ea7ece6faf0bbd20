/* Winograd F(2x2, 3x3) transforms (the contracts of tops__wino_in_fn and
   tops__wino_out_fn, kernels/kernels.h), one channel at a time. */
#include "kernels/kernels.h"

void tops__wino_f23_in__ref(const float *const *d, int64_t n, float *out, int64_t ldo) {
    for (int64_t c = 0; c < n; c++) {
        float w[4][4];
        for (int b = 0; b < 4; b++) { /* B^T d: over rows */
            const float d0 = d[b][c], d1 = d[4 + b][c], d2 = d[8 + b][c], d3 = d[12 + b][c];
            w[0][b] = d0 - d2, w[1][b] = d1 + d2, w[2][b] = d2 - d1, w[3][b] = d1 - d3;
        }
        for (int a = 0; a < 4; a++) { /* (B^T d) B: over columns */
            out[(4 * a + 0) * ldo + c] = w[a][0] - w[a][2];
            out[(4 * a + 1) * ldo + c] = w[a][1] + w[a][2];
            out[(4 * a + 2) * ldo + c] = w[a][2] - w[a][1];
            out[(4 * a + 3) * ldo + c] = w[a][1] - w[a][3];
        }
    }
}

void tops__wino_f23_out__ref(const float *m, int64_t ldm, int64_t n, const float *bias, float *y, int64_t ldy) {
    for (int64_t j = 0; j < n; j++) {
        float z[2][4];
        for (int b = 0; b < 4; b++) { /* A^T m: over rows */
            const float m0 = m[b * ldm + j], m1 = m[(4 + b) * ldm + j], m2 = m[(8 + b) * ldm + j],
                        m3 = m[(12 + b) * ldm + j];
            z[0][b] = m0 + m1 + m2, z[1][b] = m1 - m2 - m3;
        }
        const float bj = bias ? bias[j] : 0.0f;
        for (int a = 0; a < 2; a++) { /* (A^T m) A: over columns */
            y[(2 * a + 0) * ldy + j] = z[a][0] + z[a][1] + z[a][2] + bj;
            y[(2 * a + 1) * ldy + j] = z[a][1] - z[a][2] - z[a][3] + bj;
        }
    }
}
