/* AMX strict kernel: f32 activations as two bf16 terms (hi + lo) times the
   weights' integer codes as bf16 (exact: |q| <= 128), on the tile unit
   (tdpbf16ps: bf16 products exact in f32, summed in f32), two tile ops per
   sub-block, the f32 sums of a run of sub-blocks that share one scale
   (int4-g128: four) scaled into f32 accumulators with AVX-512 between
   runs (weights with mins: runs of one, one more FMA per row and block,
   c -= am * bm).  The outputs go as 16 x 16 tiles, one after the
   other, each over every block with its 16 accumulator rows in registers
   (tiles 0 and 1: alternate blocks' sums, 4: the hi then the lo
   activations, 6: the weights).  A probe on L1-resident operands (one
   core, the best of six runs, ns per 32-k block) against the 2 x 2 grid
   with its accumulators in memory: two row tiles 145.5 vs 156.8, one
   73.6 vs 75.2.  (The i8 kernel measured the other way: 121 vs 111.) */
#include "kernels/kernels.h"
#include "kernels/amx/tilecfg.h"

#include <immintrin.h>
#include <string.h>

static void configure(int sub) {
    _Alignas(64) tops__amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 2; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    cfg.colsb[4] = (uint16_t)(2 * sub), cfg.rows[4] = 16;
    cfg.colsb[6] = 64, cfg.rows[6] = (uint8_t)(sub / 2);
    tops__amx_load_cfg(&cfg);
}

/* Tile T = the sums of sub-blocks b .. b + r - 1 (one weight scale). */
#define TOPS_BF16_SUMS(T, b, r, buf)                                                                                 \
    do {                                                                                                               \
        _tile_zero(T);                                                                                                 \
        for (int64_t j_ = (b); j_ < (b) + (r); j_++) {                                                                 \
            _tile_loadd(6, w + j_ * sub * 16, 64);                                                                     \
            _tile_loadd(4, hi + j_ * 16 * sub, 2 * sub);                                                               \
            _tile_dpbf16ps(T, 4, 6);                                                                                   \
            _tile_loadd(4, lo + j_ * 16 * sub, 2 * sub);                                                               \
            _tile_dpbf16ps(T, 4, 6);                                                                                   \
        }                                                                                                              \
        _tile_stored(T, (buf), 64);                                                                                    \
    } while (0)

static inline void scale_rows(int mins, const float *buf, const float *ws, const float *am, const float *wm,
                              __m512 *acc) {
    const __m512 s = _mm512_loadu_ps(ws);
    const __m512 mn = mins ? _mm512_loadu_ps(wm) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        acc[r] = _mm512_fmadd_ps(_mm512_load_ps(buf + r * 16), s, acc[r]);
        if (mins) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(-am[r]), mn, acc[r]);
    }
}

/* One 16 x 16 output tile over nb sub-blocks in runs of `run` (the last
   may be shorter), one scaling a run: row tile hi / lo (mins am), column
   panel w (scales ws, mins wm, a row of 16 per sub-block). */
static inline void run_tile(int mins, int64_t nb, int sub, int run, const uint16_t *hi, const uint16_t *lo,
                            const float *am, const uint16_t *w, const float *ws, const float *wm, float *c,
                            int64_t ldc, int accumulate) {
    _Alignas(64) float buf[2][256];
    __m512 acc[16];
    const int64_t nr = (nb + run - 1) / run; /* runs */
#define TOPS_RUN_LEN(q) (nb - (q) * run < run ? nb - (q) * run : run)
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) acc[r] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
    if (nr > 0) TOPS_BF16_SUMS(0, 0, TOPS_RUN_LEN(0), buf[0]);
    for (int64_t q = 0; q < nr; q += 2) {
        const int64_t b = q * run, b1 = b + run;
        if (q + 1 < nr) TOPS_BF16_SUMS(1, b1, TOPS_RUN_LEN(q + 1), buf[1]);
        scale_rows(mins, buf[0], ws + b * 16, mins ? am + b * 16 : NULL, mins ? wm + b * 16 : NULL, acc);
        if (q + 1 >= nr) break;
        if (q + 2 < nr) TOPS_BF16_SUMS(0, b1 + run, TOPS_RUN_LEN(q + 2), buf[0]);
        scale_rows(mins, buf[1], ws + b1 * 16, mins ? am + b1 * 16 : NULL, mins ? wm + b1 * 16 : NULL, acc);
    }
#undef TOPS_RUN_LEN
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) _mm512_storeu_ps(c + r * ldc, acc[r]);
}
#undef TOPS_BF16_SUMS

void tops_gemm_f32_bf16x2_bf16_32x32__amx(int mt, int64_t nb, int sub, int run, const uint16_t *hi, const uint16_t *lo,
                                          int64_t a_next, const uint16_t *b0, const uint16_t *b1, const float *bs0,
                                          const float *bs1, const float *am, int64_t am_next, const float *bm0,
                                          const float *bm1, float *c, int64_t ldc, int accumulate) {
    configure(sub);
    for (int t = 0; t < mt; t++) {
        const uint16_t *ht = hi + t * a_next, *lt = lo + t * a_next;
        const float *amt = am ? am + t * am_next : NULL;
        float *ct = c + t * 16 * ldc;
        if (bm0) {
            run_tile(1, nb, sub, run, ht, lt, amt, b0, bs0, bm0, ct, ldc, accumulate);
            run_tile(1, nb, sub, run, ht, lt, amt, b1, bs1, bm1, ct + 16, ldc, accumulate);
        } else {
            run_tile(0, nb, sub, run, ht, lt, NULL, b0, bs0, NULL, ct, ldc, accumulate);
            run_tile(0, nb, sub, run, ht, lt, NULL, b1, bs1, NULL, ct + 16, ldc, accumulate);
        }
    }
}
