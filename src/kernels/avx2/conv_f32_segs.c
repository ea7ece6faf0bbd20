/* AVX2 conv2d f32 tile over a list of K segments (the contract of
   tops__conv_f32_segs_fn, kernels/kernels.h): gemm_f32's 6 x 16 tile, A
   broadcast through six row pointers a segment, stays in registers
   across every segment of a block's K (a kernel row where its taps are
   contiguous, else a tap), so a tile is loaded and stored once per call
   instead of once per tap or kernel row, and the weights stream from L2
   (the whole panel of a 3x3 ResNet layer fits it).  The loops over the
   tile are unrolled whole: twelve accumulators, two B vectors and one
   broadcast fill 15 of the 16 registers. */
#include "kernels/kernels.h"

#include <immintrin.h>

void tops_conv_f32_6x16_segs__avx2(int64_t nseg, const tops__conv_seg *seg, float *c, int load_c) {
    __m256 acc[6][2];
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) {
        acc[i][0] = load_c ? _mm256_load_ps(c + 16 * i) : _mm256_setzero_ps();
        acc[i][1] = load_c ? _mm256_load_ps(c + 16 * i + 8) : _mm256_setzero_ps();
    }
    for (int64_t s = 0; s < nseg; s++) {
        const float *a[6], *b = seg[s].b;
        const int64_t kc = seg[s].kc;
#pragma GCC unroll 6
        for (int i = 0; i < 6; i++) a[i] = seg[s].a[i];
        for (int64_t k = 0; k < kc; k++, b += 16) {
            const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
            for (int i = 0; i < 6; i++) {
                const __m256 x = _mm256_broadcast_ss(a[i] + k);
                acc[i][0] = _mm256_fmadd_ps(x, b0, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(x, b1, acc[i][1]);
            }
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) {
        _mm256_store_ps(c + 16 * i, acc[i][0]);
        _mm256_store_ps(c + 16 * i + 8, acc[i][1]);
    }
}
