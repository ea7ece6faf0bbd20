/* The scalar depthwise conv2d row kernel: the reference of the AVX2 and
   AVX-512 ones (same loop order, one fmaf per tap: the same bits). */
#include "kernels/kernels.h"

#include <math.h>

void tops_conv_dw_f32__ref(const float *const *rows, int64_t ldx, int64_t win, int64_t c, int kh, int kw, int sw,
                           int dw, int pl, const float *w, const float *bias, int64_t ow, float *out, int64_t ldo) {
    for (int64_t x = 0; x < ow; x++)
        for (int64_t ch = 0; ch < c; ch++) {
            float acc = bias ? bias[ch] : 0.0f;
            for (int i = 0; i < kh; i++) {
                if (!rows[i]) continue;
                for (int j = 0; j < kw; j++) {
                    const int64_t col = x * sw + (int64_t)j * dw - pl;
                    if (col < 0 || col >= win) continue;
                    acc = fmaf(rows[i][col * ldx + ch], w[((int64_t)i * kw + j) * c + ch], acc);
                }
            }
            out[x * ldo + ch] = acc;
        }
}
