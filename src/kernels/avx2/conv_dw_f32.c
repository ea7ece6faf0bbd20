/* AVX2 depthwise conv2d row kernel: channels in vectors (32 at a time in
   four accumulators, then 8, then a masked tail), the taps in order, one
   FMA each (the reference's bits). */
#include "kernels/kernels.h"

#include <immintrin.h>

static inline __m256i tail_mask(int64_t n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx);
}

void tops_conv_dw_f32__avx2(const float *const *rows, int64_t ldx, int64_t win, int64_t c, int kh, int kw, int sw,
                            int dw, int pl, const float *w, const float *bias, int64_t ow, float *out, int64_t ldo) {
    const int64_t c32 = c / 32 * 32, c8 = c / 8 * 8;
    const __m256i mask = tail_mask(c - c8);
    for (int64_t x = 0; x < ow; x++) {
        const int64_t col0 = x * sw - pl;
        float *o = out + x * ldo;
        int64_t ch = 0;
        for (; ch < c32; ch += 32) {
            __m256 a0, a1, a2, a3;
            if (bias) {
                a0 = _mm256_loadu_ps(bias + ch), a1 = _mm256_loadu_ps(bias + ch + 8);
                a2 = _mm256_loadu_ps(bias + ch + 16), a3 = _mm256_loadu_ps(bias + ch + 24);
            } else {
                a0 = a1 = a2 = a3 = _mm256_setzero_ps();
            }
            for (int i = 0; i < kh; i++) {
                if (!rows[i]) continue;
                for (int j = 0; j < kw; j++) {
                    const int64_t col = col0 + (int64_t)j * dw;
                    if (col < 0 || col >= win) continue;
                    const float *xp = rows[i] + col * ldx + ch, *wp = w + ((int64_t)i * kw + j) * c + ch;
                    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xp), _mm256_loadu_ps(wp), a0);
                    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 8), _mm256_loadu_ps(wp + 8), a1);
                    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 16), _mm256_loadu_ps(wp + 16), a2);
                    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 24), _mm256_loadu_ps(wp + 24), a3);
                }
            }
            _mm256_storeu_ps(o + ch, a0);
            _mm256_storeu_ps(o + ch + 8, a1);
            _mm256_storeu_ps(o + ch + 16, a2);
            _mm256_storeu_ps(o + ch + 24, a3);
        }
        for (; ch < c; ch += 8) {
            const int full = ch < c8;
            __m256 a = !bias ? _mm256_setzero_ps()
                       : full ? _mm256_loadu_ps(bias + ch)
                              : _mm256_maskload_ps(bias + ch, mask);
            for (int i = 0; i < kh; i++) {
                if (!rows[i]) continue;
                for (int j = 0; j < kw; j++) {
                    const int64_t col = col0 + (int64_t)j * dw;
                    if (col < 0 || col >= win) continue;
                    const float *xp = rows[i] + col * ldx + ch, *wp = w + ((int64_t)i * kw + j) * c + ch;
                    if (full) a = _mm256_fmadd_ps(_mm256_loadu_ps(xp), _mm256_loadu_ps(wp), a);
                    else a = _mm256_fmadd_ps(_mm256_maskload_ps(xp, mask), _mm256_maskload_ps(wp, mask), a);
                }
            }
            if (full) _mm256_storeu_ps(o + ch, a);
            else _mm256_maskstore_ps(o + ch, mask, a);
        }
    }
}
