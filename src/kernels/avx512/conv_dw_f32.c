/* AVX-512 depthwise conv2d row kernel: channels in vectors (64 at a time
   in four accumulators, then 16 with a mask for the tail), the taps in
   order, one FMA each (the reference's bits). */
#include "kernels/kernels.h"

#include <immintrin.h>

/* 3x3 at stride 1: per block of 16 channels the nine tap vectors stay in
   registers, and interior columns (every tap inside the row) go four at a
   time with four accumulators; edge columns check each tap.  (At stride 1
   a pass over one block reuses each input line for three columns from L1;
   the column order below measured 8-12% slower there, 56x56x144.)  Same
   order (bias, then the taps row by row) and one FMA per tap, as the
   generic loop. */
static void dw3x3_channels(const float *const *rows, int64_t ldx, int64_t win, int64_t c, int sw, int dw, int pl,
                  const float *w, const float *bias, int64_t ow, float *out, int64_t ldo) {
    int64_t x_lo = (pl + sw - 1) / sw, x_hi = (win - 1 - 2 * (int64_t)dw + pl) / sw + 1;
    if (win - 1 - 2 * (int64_t)dw + pl < 0) x_hi = 0;
    if (x_lo > ow) x_lo = ow;
    if (x_hi > ow) x_hi = ow;
    if (x_hi < x_lo) x_hi = x_lo;
    const int64_t step = (int64_t)dw * ldx;
    for (int64_t ch = 0; ch < c; ch += 16) {
        const __mmask16 m = c - ch >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (c - ch)) - 1);
        __m512 wv[9];
        for (int t = 0; t < 9; t++) wv[t] = _mm512_maskz_loadu_ps(m, w + t * c + ch);
        const __m512 b = bias ? _mm512_maskz_loadu_ps(m, bias + ch) : _mm512_setzero_ps();
        for (int64_t x = 0; x < ow;) {
            if (x >= x_lo && x + 4 <= x_hi) { /* four interior columns */
                __m512 a0 = b, a1 = b, a2 = b, a3 = b;
                const int64_t col = x * sw - pl, xs = (int64_t)sw * ldx;
                for (int i = 0; i < 3; i++) {
                    if (!rows[i]) continue;
                    const float *p = rows[i] + col * ldx + ch;
                    if (dw == 1) { /* the six input columns once, each feeding up to three outputs */
                        __m512 v[6];
                        for (int u = 0; u < 6; u++) v[u] = _mm512_maskz_loadu_ps(m, p + u * ldx);
                        for (int j = 0; j < 3; j++) {
                            a0 = _mm512_fmadd_ps(v[j], wv[3 * i + j], a0);
                            a1 = _mm512_fmadd_ps(v[j + 1], wv[3 * i + j], a1);
                            a2 = _mm512_fmadd_ps(v[j + 2], wv[3 * i + j], a2);
                            a3 = _mm512_fmadd_ps(v[j + 3], wv[3 * i + j], a3);
                        }
                        continue;
                    }
                    for (int j = 0; j < 3; j++) {
                        const float *q = p + j * step;
                        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q), wv[3 * i + j], a0);
                        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + xs), wv[3 * i + j], a1);
                        a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + 2 * xs), wv[3 * i + j], a2);
                        a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + 3 * xs), wv[3 * i + j], a3);
                    }
                }
                _mm512_mask_storeu_ps(out + x * ldo + ch, m, a0);
                _mm512_mask_storeu_ps(out + (x + 1) * ldo + ch, m, a1);
                _mm512_mask_storeu_ps(out + (x + 2) * ldo + ch, m, a2);
                _mm512_mask_storeu_ps(out + (x + 3) * ldo + ch, m, a3);
                x += 4;
                continue;
            }
            __m512 a = b;
            const int64_t col0 = x * sw - pl;
            for (int i = 0; i < 3; i++) {
                if (!rows[i]) continue;
                for (int j = 0; j < 3; j++) {
                    const int64_t col = col0 + (int64_t)j * dw;
                    if (col < 0 || col >= win) continue;
                    a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, rows[i] + col * ldx + ch), wv[3 * i + j], a);
                }
            }
            _mm512_mask_storeu_ps(out + x * ldo + ch, m, a);
            x++;
        }
    }
}

/* G (<= 8) interior 3x3 columns from input column col: per channel block
   of 16, the nine tap vectors from L1 and G accumulators. */
static inline __attribute__((always_inline)) void interior(const float *const *rows, int64_t ldx, int64_t c,
                                                           int64_t step, int64_t xs, int64_t col, const float *w,
                                                           const float *bias, int g, float *out, int64_t ldo) {
    for (int64_t ch = 0; ch < c; ch += 16) {
        const __mmask16 m = c - ch >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (c - ch)) - 1);
        const __m512 b = bias ? _mm512_maskz_loadu_ps(m, bias + ch) : _mm512_setzero_ps();
        __m512 a[8];
        for (int u = 0; u < g; u++) a[u] = b;
        /* dilation 1, stride 2: the nine input columns once each (9 loads
           for 12 taps) */
        const int reuse = step == ldx && xs == 2 * ldx && g == 4;
        for (int i = 0; i < 3; i++) {
            if (!rows[i]) continue;
            const float *p = rows[i] + col * ldx + ch;
            if (reuse) {
                __m512 v[9];
                for (int t = 0; t < 9; t++) v[t] = _mm512_maskz_loadu_ps(m, p + t * ldx);
                for (int j = 0; j < 3; j++) {
                    const __m512 wv = _mm512_maskz_loadu_ps(m, w + (3 * i + j) * c + ch);
                    a[0] = _mm512_fmadd_ps(v[j], wv, a[0]);
                    a[1] = _mm512_fmadd_ps(v[2 + j], wv, a[1]);
                    a[2] = _mm512_fmadd_ps(v[4 + j], wv, a[2]);
                    a[3] = _mm512_fmadd_ps(v[6 + j], wv, a[3]);
                }
                continue;
            }
            for (int j = 0; j < 3; j++) {
                const float *q = p + j * step;
                const __m512 wv = _mm512_maskz_loadu_ps(m, w + (3 * i + j) * c + ch);
                for (int u = 0; u < g; u++) a[u] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + u * xs), wv, a[u]);
            }
        }
        for (int u = 0; u < g; u++) _mm512_mask_storeu_ps(out + u * ldo + ch, m, a[u]);
    }
}

/* 3x3 at stride > 1: interior columns (every tap inside the row) go four
   at a time (the 4-column body of `interior`), every channel block of 16 for those columns before the next,
   so the input is read pixel after pixel (sequential lines, not one line
   of each pixel per channel pass); the block's nine tap vectors come from
   L1 (9 x C floats).  Edge columns check each tap.  Same order (bias, then
   the taps row by row) and one FMA per tap, as the generic loop. */
static void dw3x3_columns(const float *const *rows, int64_t ldx, int64_t win, int64_t c, int sw, int dw, int pl,
                  const float *w, const float *bias, int64_t ow, float *out, int64_t ldo) {
    int64_t x_lo = (pl + sw - 1) / sw, x_hi = (win - 1 - 2 * (int64_t)dw + pl) / sw + 1;
    if (win - 1 - 2 * (int64_t)dw + pl < 0) x_hi = 0;
    if (x_lo > ow) x_lo = ow;
    if (x_hi > ow) x_hi = ow;
    if (x_hi < x_lo) x_hi = x_lo;
    const int64_t step = (int64_t)dw * ldx, xs = (int64_t)sw * ldx;
    for (int64_t x = 0; x < ow;) {
        if (x >= x_lo && x + 4 <= x_hi) { /* four interior columns */
            interior(rows, ldx, c, step, xs, x * sw - pl, w, bias, 4, out + x * ldo, ldo);
            x += 4;
            continue;
        }
        const int64_t col0 = x * sw - pl;
        for (int64_t ch = 0; ch < c; ch += 16) {
            const __mmask16 m = c - ch >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (c - ch)) - 1);
            __m512 a = bias ? _mm512_maskz_loadu_ps(m, bias + ch) : _mm512_setzero_ps();
            for (int i = 0; i < 3; i++) {
                if (!rows[i]) continue;
                for (int j = 0; j < 3; j++) {
                    const int64_t col = col0 + (int64_t)j * dw;
                    if (col < 0 || col >= win) continue;
                    a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, rows[i] + col * ldx + ch),
                                        _mm512_maskz_loadu_ps(m, w + (3 * i + j) * c + ch), a);
                }
            }
            _mm512_mask_storeu_ps(out + x * ldo + ch, m, a);
        }
        x++;
    }
}

void tops_conv_dw_f32__avx512(const float *const *rows, int64_t ldx, int64_t win, int64_t c, int kh, int kw, int sw,
                              int dw, int pl, const float *w, const float *bias, int64_t ow, float *out, int64_t ldo) {
    if (kh == 3 && kw == 3) {
        if (sw == 1) dw3x3_channels(rows, ldx, win, c, sw, dw, pl, w, bias, ow, out, ldo);
        else dw3x3_columns(rows, ldx, win, c, sw, dw, pl, w, bias, ow, out, ldo);
        return;
    }
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
