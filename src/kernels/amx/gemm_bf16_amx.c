/* AMX strict kernel: f32 activations as two bf16 terms (hi + lo) times the
   weights' integer codes as bf16 (exact: |q| <= 128), on the tile unit
   (tdpbf16ps: bf16 products exact in f32, summed in f32), one pass of
   eight tile ops per scale sub-block, the f32 block sums scaled into f32
   accumulators with AVX-512 between blocks (weights with mins: one more
   FMA per row and block, c -= am * bm).  Tiles as in gemm_q8_amx.c:
   0..3 the 2 x 2 grid of 16 x 16 sums, 4 and 5 the two row tiles (hi,
   then lo), 6 and 7 the two 16-column weight tiles. */
#include "kernels/kernels.h"
#include "kernels/amx/tilecfg.h"

#include <immintrin.h>
#include <string.h>

static void configure(int sub) {
    _Alignas(64) tops__amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 4; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    for (int t = 4; t < 6; t++) cfg.colsb[t] = (uint16_t)(2 * sub), cfg.rows[t] = 16;
    for (int t = 6; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = (uint8_t)(sub / 2);
    tops__amx_load_cfg(&cfg);
}

static inline void block_sums(int mt, int64_t b, int sub, const uint16_t *hi, const uint16_t *lo, int64_t a_next,
                              const uint16_t *b0, const uint16_t *b1, float *buf) {
    const int64_t at = b * 16 * sub, stride = 2 * sub;
    _tile_zero(0);
    _tile_zero(1);
    _tile_loadd(6, b0 + b * sub * 16, 64);
    _tile_loadd(7, b1 + b * sub * 16, 64);
    _tile_loadd(4, hi + at, stride);
    if (mt == 2) {
        _tile_zero(2);
        _tile_zero(3);
        _tile_loadd(5, hi + at + a_next, stride);
    }
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if (mt == 2) {
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_loadd(4, lo + at, stride);
    if (mt == 2) _tile_loadd(5, lo + at + a_next, stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if (mt == 2) {
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, buf, 64);
    _tile_stored(1, buf + 256, 64);
    if (mt == 2) {
        _tile_stored(2, buf + 512, 64);
        _tile_stored(3, buf + 768, 64);
    }
}

/* acc[i][j] = fma(s[i][j], bs[j], acc[i][j]) for 16 * mt rows, 32 columns;
   with mins then acc[i][j] = fma(-am[i], bm[j], acc[i][j]). */
static inline void scale_block(int mt, int mins, const float *buf, const float *bs0, const float *bs1,
                               const float *am, int64_t am_next, const float *bm0, const float *bm1, float *acc) {
    const __m512 s0 = _mm512_loadu_ps(bs0), s1 = _mm512_loadu_ps(bs1);
    const __m512 m0 = mins ? _mm512_loadu_ps(bm0) : _mm512_setzero_ps();
    const __m512 m1 = mins ? _mm512_loadu_ps(bm1) : _mm512_setzero_ps();
    for (int t = 0; t < mt; t++) {
        const float *p0 = buf + t * 512, *p1 = p0 + 256;
        for (int r = 0; r < 16; r++) {
            float *ci = acc + (t * 16 + r) * 32;
            __m512 c0 = _mm512_fmadd_ps(_mm512_load_ps(p0 + r * 16), s0, _mm512_load_ps(ci));
            __m512 c1 = _mm512_fmadd_ps(_mm512_load_ps(p1 + r * 16), s1, _mm512_load_ps(ci + 16));
            if (mins) {
                const __m512 y = _mm512_set1_ps(-am[t * am_next + r]);
                c0 = _mm512_fmadd_ps(y, m0, c0);
                c1 = _mm512_fmadd_ps(y, m1, c1);
            }
            _mm512_store_ps(ci, c0);
            _mm512_store_ps(ci + 16, c1);
        }
    }
}

static inline void run_mt(int mt, int mins, int64_t nb, int sub, const uint16_t *hi, const uint16_t *lo,
                          int64_t a_next, const uint16_t *b0, const uint16_t *b1, const float *bs0, const float *bs1,
                          const float *am, int64_t am_next, const float *bm0, const float *bm1, float *c,
                          int64_t ldc, int accumulate) {
    _Alignas(64) float buf[2][4 * 256];
    _Alignas(64) float acc[32 * 32];
    for (int i = 0; i < 16 * mt; i++) {
        _mm512_store_ps(acc + i * 32, accumulate ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps());
        _mm512_store_ps(acc + i * 32 + 16, accumulate ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps());
    }
    if (nb > 0) {
        configure(sub);
        block_sums(mt, 0, sub, hi, lo, a_next, b0, b1, buf[0]);
        for (int64_t b = 0; b < nb; b++) {
            if (b + 1 < nb) block_sums(mt, b + 1, sub, hi, lo, a_next, b0, b1, buf[(b + 1) & 1]);
            scale_block(mt, mins, buf[b & 1], bs0 + b * 16, bs1 + b * 16, mins ? am + b * 16 : NULL, am_next,
                        mins ? bm0 + b * 16 : NULL, mins ? bm1 + b * 16 : NULL, acc);
        }
    }
    for (int i = 0; i < 16 * mt; i++) {
        _mm512_storeu_ps(c + i * ldc, _mm512_load_ps(acc + i * 32));
        _mm512_storeu_ps(c + i * ldc + 16, _mm512_load_ps(acc + i * 32 + 16));
    }
}

void tops_gemm_f32_bf16x2_bf16_32x32__amx(int mt, int64_t nb, int sub, const uint16_t *hi, const uint16_t *lo,
                                          int64_t a_next, const uint16_t *b0, const uint16_t *b1, const float *bs0,
                                          const float *bs1, const float *am, int64_t am_next, const float *bm0,
                                          const float *bm1, float *c, int64_t ldc, int accumulate) {
    if (bm0 && mt == 2) run_mt(2, 1, nb, sub, hi, lo, a_next, b0, b1, bs0, bs1, am, am_next, bm0, bm1, c, ldc, accumulate);
    else if (bm0) run_mt(1, 1, nb, sub, hi, lo, a_next, b0, b1, bs0, bs1, am, am_next, bm0, bm1, c, ldc, accumulate);
    else if (mt == 2) run_mt(2, 0, nb, sub, hi, lo, a_next, b0, b1, bs0, bs1, NULL, 0, NULL, NULL, c, ldc, accumulate);
    else run_mt(1, 0, nb, sub, hi, lo, a_next, b0, b1, bs0, bs1, NULL, 0, NULL, NULL, c, ldc, accumulate);
}
