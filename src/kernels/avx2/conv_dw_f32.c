/* AVX2 depthwise conv2d row kernel: channels in vectors (32 at a time in
   four accumulators, then 8, then a masked tail), the taps in order, one
   FMA each (the reference's bits); 3x3 kernels take the AVX-512 kernel's
   two layouts (a pass per channel block at stride 1, four columns at a
   time at stride > 1) on 8-channel blocks. */
#include "kernels/kernels.h"

#include <immintrin.h>

static inline __m256i tail_mask(int64_t n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx);
}

/* A load or store of 8 channels, or of the tail's c % 8 under mask. */
static inline __attribute__((always_inline)) __m256 ld8(const float *p, int full, __m256i mask) {
    return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask);
}
static inline __attribute__((always_inline)) void st8(float *p, int full, __m256i mask, __m256 v) {
    if (full) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, mask, v);
}

/* Output columns [x_lo, x_hi) of a 3x3 row have every tap inside the
   input row. */
static void interior_span(int64_t win, int sw, int dw, int pl, int64_t ow, int64_t *lo, int64_t *hi) {
    int64_t x_lo = (pl + sw - 1) / sw, x_hi = (win - 1 - 2 * (int64_t)dw + pl) / sw + 1;
    if (win - 1 - 2 * (int64_t)dw + pl < 0) x_hi = 0;
    if (x_lo > ow) x_lo = ow;
    if (x_hi > ow) x_hi = ow;
    if (x_hi < x_lo) x_hi = x_lo;
    *lo = x_lo, *hi = x_hi;
}

/* One output column x of a 3x3 row for channels ch .. ch + 7 (or the
   tail), checking each tap: from bias (or 0), the taps row by row, one
   FMA each.  wv NULL: the taps from w. */
static inline __attribute__((always_inline)) void edge_column(const float *const *rows, int64_t ldx, int64_t win,
                                                              int64_t c, int sw, int dw, int pl, const float *w,
                                                              const __m256 *wv, __m256 b, int64_t x, int64_t ch,
                                                              int full, __m256i mask, float *out, int64_t ldo) {
    __m256 a = b;
    const int64_t col0 = x * sw - pl;
    for (int i = 0; i < 3; i++) {
        if (!rows[i]) continue;
        for (int j = 0; j < 3; j++) {
            const int64_t col = col0 + (int64_t)j * dw;
            if (col < 0 || col >= win) continue;
            const __m256 t = wv ? wv[3 * i + j] : ld8(w + (3 * i + j) * c + ch, full, mask);
            a = _mm256_fmadd_ps(ld8(rows[i] + col * ldx + ch, full, mask), t, a);
        }
    }
    st8(out + x * ldo + ch, full, mask, a);
}

/* 3x3 at stride 1, one block of 8 channels over the row: its nine tap
   vectors in registers, interior columns four at a time with four
   accumulators (each input line then serves three columns from L1), edge
   columns checking each tap.  As the AVX-512 kernel's 16-channel passes. */
static inline __attribute__((always_inline)) void dw3x3_block(const float *const *rows, int64_t ldx, int64_t win,
                                                              int64_t c, int dw, int pl, const float *w,
                                                              const float *bias, int64_t ow, float *out, int64_t ldo,
                                                              int64_t x_lo, int64_t x_hi, int64_t ch, int full,
                                                              __m256i mask) {
    __m256 wv[9];
    for (int t = 0; t < 9; t++) wv[t] = ld8(w + t * c + ch, full, mask);
    const __m256 b = bias ? ld8(bias + ch, full, mask) : _mm256_setzero_ps();
    const int64_t step = (int64_t)dw * ldx;
    for (int64_t x = 0; x < ow;) {
        if (x >= x_lo && x + 4 <= x_hi) {
            __m256 a0 = b, a1 = b, a2 = b, a3 = b;
            for (int i = 0; i < 3; i++) {
                if (!rows[i]) continue;
                const float *p = rows[i] + (x - pl) * ldx + ch;
                for (int j = 0; j < 3; j++) {
                    const float *q = p + j * step;
                    a0 = _mm256_fmadd_ps(ld8(q, full, mask), wv[3 * i + j], a0);
                    a1 = _mm256_fmadd_ps(ld8(q + ldx, full, mask), wv[3 * i + j], a1);
                    a2 = _mm256_fmadd_ps(ld8(q + 2 * ldx, full, mask), wv[3 * i + j], a2);
                    a3 = _mm256_fmadd_ps(ld8(q + 3 * ldx, full, mask), wv[3 * i + j], a3);
                }
            }
            float *o = out + x * ldo + ch;
            st8(o, full, mask, a0), st8(o + ldo, full, mask, a1);
            st8(o + 2 * ldo, full, mask, a2), st8(o + 3 * ldo, full, mask, a3);
            x += 4;
            continue;
        }
        edge_column(rows, ldx, win, c, 1, dw, pl, w, wv, b, x, ch, full, mask, out, ldo);
        x++;
    }
}

/* Four interior columns of a 3x3 row at stride > 1 for channels ch ..
   ch + 7 (or the tail), the taps from L1. */
static inline __attribute__((always_inline)) void four_columns(const float *const *rows, int64_t c, int64_t step,
                                                               int64_t xs, int64_t col, const float *w,
                                                               const float *bias, int64_t ch, int full, __m256i mask,
                                                               float *out, int64_t ldo) {
    const __m256 b = !bias ? _mm256_setzero_ps() : ld8(bias + ch, full, mask);
    __m256 a0 = b, a1 = b, a2 = b, a3 = b;
    for (int i = 0; i < 3; i++) {
        if (!rows[i]) continue;
        const float *p = rows[i] + col + ch;
        for (int j = 0; j < 3; j++) {
            const float *q = p + j * step;
            const __m256 t = ld8(w + (3 * i + j) * c + ch, full, mask);
            a0 = _mm256_fmadd_ps(ld8(q, full, mask), t, a0);
            a1 = _mm256_fmadd_ps(ld8(q + xs, full, mask), t, a1);
            a2 = _mm256_fmadd_ps(ld8(q + 2 * xs, full, mask), t, a2);
            a3 = _mm256_fmadd_ps(ld8(q + 3 * xs, full, mask), t, a3);
        }
    }
    float *o = out + ch;
    st8(o, full, mask, a0), st8(o + ldo, full, mask, a1);
    st8(o + 2 * ldo, full, mask, a2), st8(o + 3 * ldo, full, mask, a3);
}

/* 3x3 at stride > 1: interior columns four at a time, every 8-channel
   block for those columns before the next four (the input read pixel
   after pixel), the taps from L1; edge columns checking each tap. */
static void dw3x3_columns(const float *const *rows, int64_t ldx, int64_t win, int64_t c, int sw, int dw, int pl,
                          const float *w, const float *bias, int64_t ow, float *out, int64_t ldo, int64_t x_lo,
                          int64_t x_hi) {
    const int64_t c8 = c / 8 * 8, step = (int64_t)dw * ldx, xs = (int64_t)sw * ldx;
    const __m256i mask = tail_mask(c - c8);
    for (int64_t x = 0; x < ow;) {
        if (x >= x_lo && x + 4 <= x_hi) {
            const int64_t col = (x * sw - pl) * ldx;
            for (int64_t ch = 0; ch < c8; ch += 8)
                four_columns(rows, c, step, xs, col, w, bias, ch, 1, mask, out + x * ldo, ldo);
            if (c8 < c) four_columns(rows, c, step, xs, col, w, bias, c8, 0, mask, out + x * ldo, ldo);
            x += 4;
            continue;
        }
        for (int64_t ch = 0; ch < c; ch += 8) {
            const int full = ch < c8;
            const __m256 b = !bias ? _mm256_setzero_ps() : ld8(bias + ch, full, mask);
            edge_column(rows, ldx, win, c, sw, dw, pl, w, NULL, b, x, ch, full, mask, out, ldo);
        }
        x++;
    }
}

void tops_conv_dw_f32__avx2(const float *const *rows, int64_t ldx, int64_t win, int64_t c, int kh, int kw, int sw,
                            int dw, int pl, const float *w, const float *bias, int64_t ow, float *out, int64_t ldo) {
    const int64_t c32 = c / 32 * 32, c8 = c / 8 * 8;
    const __m256i mask = tail_mask(c - c8);
    if (kh == 3 && kw == 3) {
        int64_t x_lo, x_hi;
        interior_span(win, sw, dw, pl, ow, &x_lo, &x_hi);
        if (sw == 1) {
            for (int64_t ch = 0; ch < c8; ch += 8)
                dw3x3_block(rows, ldx, win, c, dw, pl, w, bias, ow, out, ldo, x_lo, x_hi, ch, 1, mask);
            if (c8 < c) dw3x3_block(rows, ldx, win, c, dw, pl, w, bias, ow, out, ldo, x_lo, x_hi, c8, 0, mask);
        } else {
            dw3x3_columns(rows, ldx, win, c, sw, dw, pl, w, bias, ow, out, ldo, x_lo, x_hi);
        }
        return;
    }
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
