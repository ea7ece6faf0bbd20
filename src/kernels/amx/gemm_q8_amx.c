/* AMX relaxed integer microkernel: i8 activations x i8 weight codes on the
   tile unit (tdpbssd), one tile op per scale sub-block, the int32 block sums
   scaled into f32 accumulators with AVX-512 between blocks.  One 16 x 16
   output at a time, its accumulators in 16 registers (stores were the
   bottleneck of a 2 x 2 grid with accumulators in memory: 54 cycles per
   tile op on the Xeon): tiles 0..3 hold four consecutive blocks' sums,
   4/5 the activation tiles (sub bytes wide), 6/7 the weight tiles (sub / 4
   rows of 16 columns x 4 consecutive k).  The next four blocks' tile ops
   are issued before this group's scaling, so the tile unit and the vector
   units overlap. */
#include "cpu/dispatch.h"

#include <immintrin.h>
#include <string.h>

typedef struct amx_tilecfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tilecfg;

static void configure(int sub) {
    _Alignas(64) amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 4; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    for (int t = 4; t < 6; t++) cfg.colsb[t] = (uint16_t)sub, cfg.rows[t] = 16;
    for (int t = 6; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = (uint8_t)(sub / 4);
    _tile_loadconfig(&cfg);
}

/* Block sums of blocks b .. b + n - 1 (n <= 4) of one 16 x 16 output into
   buf[0 .. n - 1] (16 x 16 int32 each): tile 0..3 one block each, the
   activation and weight tiles alternating between 4/6 and 5/7. */
static inline void group_sums(int n, int64_t b, int sub, const int8_t *a, const int8_t *w, int32_t *buf) {
    const int8_t *ab = a + b * 16 * sub, *wb = w + b * sub * 16;
    const int64_t step = 16 * sub;
    _tile_zero(0);
    _tile_loadd(4, ab, sub);
    _tile_loadd(6, wb, 64);
    _tile_dpbssd(0, 4, 6);
    if (n > 1) {
        _tile_zero(1);
        _tile_loadd(5, ab + step, sub);
        _tile_loadd(7, wb + step, 64);
        _tile_dpbssd(1, 5, 7);
    }
    if (n > 2) {
        _tile_zero(2);
        _tile_loadd(4, ab + 2 * step, sub);
        _tile_loadd(6, wb + 2 * step, 64);
        _tile_dpbssd(2, 4, 6);
    }
    if (n > 3) {
        _tile_zero(3);
        _tile_loadd(5, ab + 3 * step, sub);
        _tile_loadd(7, wb + 3 * step, 64);
        _tile_dpbssd(3, 5, 7);
    }
    _tile_stored(0, buf, 64);
    if (n > 1) _tile_stored(1, buf + 256, 64);
    if (n > 2) _tile_stored(2, buf + 512, 64);
    if (n > 3) _tile_stored(3, buf + 768, 64);
}

/* acc[r] = fma(S[r], as[r] * bs, acc[r]) for the n blocks in buf, in order. */
static inline void scale_group(int n, const int32_t *buf, const float *as, const float *bs, __m512 *acc) {
    for (int q = 0; q < n; q++) {
        const __m512 s = _mm512_loadu_ps(bs + q * 16);
        const float *aq = as + q * 16;
        const int32_t *p = buf + q * 256;
        for (int r = 0; r < 16; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)(p + r * 16))),
                                     _mm512_mul_ps(s, _mm512_set1_ps(aq[r])), acc[r]);
    }
}

/* One 16 x 16 output over nb blocks, its accumulators in registers; the
   tile ops of group g + 1 are issued before group g's scaling. */
static inline void run_16x16(int64_t nb, int sub, const int8_t *a, const float *as, const int8_t *w,
                             const float *bs, float *c, int64_t ldc, int accumulate) {
    _Alignas(64) int32_t buf[2][4 * 256];
    __m512 acc[16];
    for (int r = 0; r < 16; r++) acc[r] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
    const int64_t groups = (nb + 3) / 4;
    group_sums(nb < 4 ? (int)nb : 4, 0, sub, a, w, buf[0]);
    for (int64_t g = 0; g < groups; g++) {
        const int64_t b = 4 * g, next = b + 4;
        if (next < nb) group_sums(nb - next < 4 ? (int)(nb - next) : 4, next, sub, a, w, buf[(g + 1) & 1]);
        const int n = nb - b < 4 ? (int)(nb - b) : 4;
        if (n == 4) scale_group(4, buf[g & 1], as + b * 16, bs + b * 16, acc);
        else scale_group(n, buf[g & 1], as + b * 16, bs + b * 16, acc);
    }
    for (int r = 0; r < 16; r++) _mm512_storeu_ps(c + r * ldc, acc[r]);
}

void tops_gemm_f32_qi8_qi8_32x32__amx(int mt, int64_t nb, int sub, const int8_t *a, int64_t a_next, const float *as,
                                      int64_t as_next, const int8_t *b0, const int8_t *b1, const float *bs0,
                                      const float *bs1, float *c, int64_t ldc, int accumulate) {
    if (nb <= 0) {
        for (int i = 0; i < 16 * mt; i++)
            for (int j = 0; j < 32; j++)
                if (!accumulate) c[i * ldc + j] = 0.0f;
        return;
    }
    configure(sub);
    for (int t = 0; t < mt; t++) {
        run_16x16(nb, sub, a + t * a_next, as + t * as_next, b0, bs0, c + t * 16 * ldc, ldc, accumulate);
        run_16x16(nb, sub, a + t * a_next, as + t * as_next, b1, bs1, c + t * 16 * ldc + 16, ldc, accumulate);
    }
}

void tops__amx_release(void) { _tile_release(); }
