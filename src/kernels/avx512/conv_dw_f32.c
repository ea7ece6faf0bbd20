/* AVX-512 depthwise conv2d row kernel: channels in vectors (64 at a time
   in four accumulators, then 16 with a mask for the tail), the taps in
   order, one FMA each (the reference's bits). */
#include "cpu/dispatch.h"

#include <immintrin.h>

void tops_conv_dw_f32__avx512(const float *const *rows, int64_t ldx, int64_t win, int64_t c, int kh, int kw, int sw,
                              int dw, int pl, const float *w, const float *bias, int64_t ow, float *out, int64_t ldo) {
    const int64_t c64 = c / 64 * 64;
    for (int64_t x = 0; x < ow; x++) {
        const int64_t col0 = x * sw - pl;
        float *o = out + x * ldo;
        int64_t ch = 0;
        for (; ch < c64; ch += 64) {
            __m512 a0, a1, a2, a3;
            if (bias) {
                a0 = _mm512_loadu_ps(bias + ch), a1 = _mm512_loadu_ps(bias + ch + 16);
                a2 = _mm512_loadu_ps(bias + ch + 32), a3 = _mm512_loadu_ps(bias + ch + 48);
            } else {
                a0 = a1 = a2 = a3 = _mm512_setzero_ps();
            }
            for (int i = 0; i < kh; i++) {
                if (!rows[i]) continue;
                for (int j = 0; j < kw; j++) {
                    const int64_t col = col0 + (int64_t)j * dw;
                    if (col < 0 || col >= win) continue;
                    const float *xp = rows[i] + col * ldx + ch, *wp = w + ((int64_t)i * kw + j) * c + ch;
                    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(xp), _mm512_loadu_ps(wp), a0);
                    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(xp + 16), _mm512_loadu_ps(wp + 16), a1);
                    a2 = _mm512_fmadd_ps(_mm512_loadu_ps(xp + 32), _mm512_loadu_ps(wp + 32), a2);
                    a3 = _mm512_fmadd_ps(_mm512_loadu_ps(xp + 48), _mm512_loadu_ps(wp + 48), a3);
                }
            }
            _mm512_storeu_ps(o + ch, a0);
            _mm512_storeu_ps(o + ch + 16, a1);
            _mm512_storeu_ps(o + ch + 32, a2);
            _mm512_storeu_ps(o + ch + 48, a3);
        }
        for (; ch < c; ch += 16) {
            const __mmask16 m = c - ch >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (c - ch)) - 1);
            __m512 a = bias ? _mm512_maskz_loadu_ps(m, bias + ch) : _mm512_setzero_ps();
            for (int i = 0; i < kh; i++) {
                if (!rows[i]) continue;
                for (int j = 0; j < kw; j++) {
                    const int64_t col = col0 + (int64_t)j * dw;
                    if (col < 0 || col >= win) continue;
                    const float *xp = rows[i] + col * ldx + ch, *wp = w + ((int64_t)i * kw + j) * c + ch;
                    a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xp), _mm512_maskz_loadu_ps(m, wp), a);
                }
            }
            _mm512_mask_storeu_ps(o + ch, m, a);
        }
    }
}
