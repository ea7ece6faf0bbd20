/* AMX relaxed integer microkernel: i8 activations x i8 weight codes on the
   tile unit (tdpbssd), one tile op per scale sub-block, the int32 block sums
   scaled into f32 accumulators with AVX-512 between blocks.  Tiles: 0..3
   the int32 block sums of a 2 x 2 grid of 16 x 16 outputs, 4 and 5 the two
   16-row activation tiles (sub bytes wide), 6 and 7 the two 16-column
   weight tiles (sub / 4 rows of 16 columns x 4 consecutive k).  Weights
   with mins (q4_1, q4_K, q5_K, affine int4) take one more FMA per row and
   block: c -= amin * bmin.  Block b+1's
   tile ops are issued before block b's scaling, so the tile unit and the
   vector units overlap. */
#include "kernels/kernels.h"
#include "kernels/amx/tilecfg.h"

#include <immintrin.h>
#include <string.h>

static void configure(int sub) {
    _Alignas(64) tops__amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 4; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    for (int t = 4; t < 6; t++) cfg.colsb[t] = (uint16_t)sub, cfg.rows[t] = 16;
    for (int t = 6; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = (uint8_t)(sub / 4);
    tops__amx_load_cfg(&cfg);
}

/* Block b of a 4-bit panel (tops__amx_nib_expand's layout: i8 panel
   rows 2i and 2i + 1 in the low and high nibbles of 64 bytes) as i8 codes
   into out (sub / 4 rows of 64 bytes; sub a multiple of 8).  One load a
   row pair: the row-at-a-time nib_row of gemm_bf16t_amx.c measured 5-8%
   slower here at M = 16. */
static inline void nib_block(const uint8_t *nib, int64_t b, int sub, __m512i lut, int8_t *out) {
    const uint8_t *src = nib + b * sub * 8;
    const __m512i m = _mm512_set1_epi8(15);
    for (int i = 0; i < sub / 8; i++) {
        const __m512i v = _mm512_loadu_si512((const void *)(src + i * 64));
        _mm512_store_si512((void *)(out + i * 128), _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m)));
        _mm512_store_si512((void *)(out + i * 128 + 64),
                           _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m)));
    }
}

/* Block sums of sub-block b into buf[0..3] (16 x 16 int32 each; 2 and 3
   only for two row tiles).  nib: b0 and b1 are 4-bit panels, expanded
   through lut into wb (2 x 512 bytes) first.  Either kind of panel is
   prefetched NIB_AHEAD blocks ahead. */
enum { NIB_AHEAD = 8 };
static inline void block_sums(int mt, int nib, int64_t b, int sub, const int8_t *a, int64_t a_next, const int8_t *b0,
                              const int8_t *b1, __m512i lut, int8_t *wb, int32_t *buf) {
    const int8_t *ab = a + b * 16 * sub;
    const int8_t *w0 = b0 + b * sub * 16, *w1 = b1 + b * sub * 16;
    if (nib) {
        for (int l = 0; l < sub * 8; l += 64) {
            _mm_prefetch((const char *)b0 + (b + NIB_AHEAD) * sub * 8 + l, _MM_HINT_T0);
            _mm_prefetch((const char *)b1 + (b + NIB_AHEAD) * sub * 8 + l, _MM_HINT_T0);
        }
        nib_block((const uint8_t *)b0, b, sub, lut, wb);
        nib_block((const uint8_t *)b1, b, sub, lut, wb + 512);
        w0 = wb, w1 = wb + 512;
    } else { /* i8 panels: the tile loads read them in place */
        for (int l = 0; l < sub * 16; l += 64) {
            _mm_prefetch((const char *)b0 + (b + NIB_AHEAD) * sub * 16 + l, _MM_HINT_T0);
            _mm_prefetch((const char *)b1 + (b + NIB_AHEAD) * sub * 16 + l, _MM_HINT_T0);
        }
    }
    _tile_zero(0);
    _tile_zero(1);
    _tile_loadd(4, ab, sub);
    _tile_loadd(6, w0, 64);
    _tile_loadd(7, w1, 64);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    if (mt == 2) {
        _tile_zero(2);
        _tile_zero(3);
        _tile_loadd(5, ab + a_next, sub);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    _tile_stored(0, buf, 64);
    _tile_stored(1, buf + 256, 64);
    if (mt == 2) {
        _tile_stored(2, buf + 512, 64);
        _tile_stored(3, buf + 768, 64);
    }
}

/* acc[i][j] += s[i][j] * (as[i] * bs[j]) for 16 * mt rows and 32 columns
   (acc rows 32 floats apart); with mins then acc[i][j] -= am[i] * bm[j]
   (one FMA).  am, bm0, bm1: the block's (read only with mins). */
static inline void scale_block(int mt, int mins, const int32_t *buf, const float *as, int64_t as_next,
                               const float *bs0, const float *bs1, const float *am, const float *bm0,
                               const float *bm1, float *acc) {
    const __m512 s0 = _mm512_loadu_ps(bs0), s1 = _mm512_loadu_ps(bs1);
    const __m512 m0 = mins ? _mm512_loadu_ps(bm0) : _mm512_setzero_ps();
    const __m512 m1 = mins ? _mm512_loadu_ps(bm1) : _mm512_setzero_ps();
    for (int t = 0; t < mt; t++) {
        const int32_t *p0 = buf + t * 512, *p1 = p0 + 256;
        const float *at = as + t * as_next;
        for (int r = 0; r < 16; r++) {
            const __m512 x = _mm512_set1_ps(at[r]);
            float *ci = acc + (t * 16 + r) * 32;
            const __m512 v0 = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(p0 + r * 16)));
            const __m512 v1 = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(p1 + r * 16)));
            __m512 c0 = _mm512_fmadd_ps(v0, _mm512_mul_ps(s0, x), _mm512_load_ps(ci));
            __m512 c1 = _mm512_fmadd_ps(v1, _mm512_mul_ps(s1, x), _mm512_load_ps(ci + 16));
            if (mins) {
                const __m512 y = _mm512_set1_ps(-am[t * as_next + r]);
                c0 = _mm512_fmadd_ps(y, m0, c0);
                c1 = _mm512_fmadd_ps(y, m1, c1);
            }
            _mm512_store_ps(ci, c0);
            _mm512_store_ps(ci + 16, c1);
        }
    }
}

/* The accumulators live in a contiguous 4 KiB block while the blocks run
   (c's row stride could alias them onto few cache sets). */
static inline void run_mt(int mt, int mins, int64_t nb, int sub, const int8_t *a, int64_t a_next, const float *as,
                          int64_t as_next, const int8_t *b0, const int8_t *b1, const int8_t *lut,
                          const float *bs0, const float *bs1, const float *am, const float *bm0, const float *bm1,
                          float *c, int64_t ldc, int accumulate) {
    _Alignas(64) int32_t buf[2][4 * 256];
    _Alignas(64) int8_t wb[2][1024];
    const int nib = lut != NULL;
    const __m512i l16 = nib ? _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)lut)) : _mm512_setzero_si512();
    _Alignas(64) float acc[32 * 32];
    for (int i = 0; i < 16 * mt; i++) {
        _mm512_store_ps(acc + i * 32, accumulate ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps());
        _mm512_store_ps(acc + i * 32 + 16, accumulate ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps());
    }
    if (nb > 0) {
        configure(sub);
        block_sums(mt, nib, 0, sub, a, a_next, b0, b1, l16, wb[0], buf[0]);
        for (int64_t b = 0; b < nb; b++) {
            if (b + 1 < nb) block_sums(mt, nib, b + 1, sub, a, a_next, b0, b1, l16, wb[(b + 1) & 1], buf[(b + 1) & 1]);
            scale_block(mt, mins, buf[b & 1], as + b * 16, as_next, bs0 + b * 16, bs1 + b * 16,
                        mins ? am + b * 16 : NULL, mins ? bm0 + b * 16 : NULL, mins ? bm1 + b * 16 : NULL, acc);
        }
    }
    for (int i = 0; i < 16 * mt; i++) {
        _mm512_storeu_ps(c + i * ldc, _mm512_load_ps(acc + i * 32));
        _mm512_storeu_ps(c + i * ldc + 16, _mm512_load_ps(acc + i * 32 + 16));
    }
}

void tops_gemm_f32_qi8_qi8_32x32__amx(int mt, int64_t nb, int sub, const int8_t *a, int64_t a_next, const float *as,
                                      int64_t as_next, const int8_t *b0, const int8_t *b1, const int8_t *lut,
                                      const float *bs0, const float *bs1, const float *am, const float *bm0,
                                      const float *bm1, float *c, int64_t ldc, int accumulate) {
    if (bm0) {
        if (mt == 2)
            run_mt(2, 1, nb, sub, a, a_next, as, as_next, b0, b1, lut, bs0, bs1, am, bm0, bm1, c, ldc, accumulate);
        else
            run_mt(1, 1, nb, sub, a, a_next, as, as_next, b0, b1, lut, bs0, bs1, am, bm0, bm1, c, ldc, accumulate);
    } else if (mt == 2) {
        run_mt(2, 0, nb, sub, a, a_next, as, as_next, b0, b1, lut, bs0, bs1, NULL, NULL, NULL, c, ldc, accumulate);
    } else {
        run_mt(1, 0, nb, sub, a, a_next, as, as_next, b0, b1, lut, bs0, bs1, NULL, NULL, NULL, c, ldc, accumulate);
    }
}

void tops__amx_release(void) { _tile_release(); }
