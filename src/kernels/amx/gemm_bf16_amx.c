/* AMX strict kernel: f32 activations as two bf16 terms (hi + lo) times the
   weights' integer codes as bf16 (exact: |q| <= 128), on the tile unit
   (tdpbf16ps: bf16 products exact in f32, summed in f32), two tile ops per
   sub-block, the f32 sums of a run of sub-blocks that share one scale
   (int4-g128: four) scaled into f32 accumulators with AVX-512 between
   runs (weights with mins: runs of one, one more FMA per row and block,
   c -= am * bm).  Two row tiles (the usual call) go as a 2 x 2 grid: tiles
   0-3 the four output tiles, 4-5 the row tiles' hi then lo, 6-7 the two
   panels, so each loaded tile feeds two products; a run's sums are stored
   and scaled into c while the next run's products run (Xeon VM, 2 threads,
   M = 128: int4-g128 16.7 -> 13.8 ms, int8-g64 19.6 -> 16.5, int4-g32 and
   q4_K 3 % faster than one output tile at a time).  One row tile goes one
   output tile at a time, its 16 accumulator rows in registers (tiles 0 and
   1: alternate runs' sums, 4: the hi then the lo activations, 6: the
   weights). */
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
            if (lo) {                                                                                                  \
                _tile_loadd(4, lo + j_ * 16 * sub, 2 * sub);                                                           \
                _tile_dpbf16ps(T, 4, 6);                                                                               \
            }                                                                                                          \
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

static void configure_grid(int sub) {
    _Alignas(64) tops__amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 4; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    for (int t = 4; t < 6; t++) cfg.colsb[t] = (uint16_t)(2 * sub), cfg.rows[t] = 16;
    for (int t = 6; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = (uint8_t)(sub / 2);
    tops__amx_load_cfg(&cfg);
}

/* Tiles 0-3 (row tile r, column tile j at 2 r + j) = the sums of
   sub-blocks b .. b + len - 1 over both row tiles and both panels: each
   loaded tile feeds two products (the one-tile order loads three tiles
   for two). */
static inline void grid_sums(int64_t b, int64_t len, int sub, const uint16_t *h0, const uint16_t *h1,
                             const uint16_t *l0, const uint16_t *l1, const uint16_t *w0, const uint16_t *w1) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const int nu = l0 ? 2 : 1;
    for (int64_t j = b; j < b + len; j++) {
        _tile_loadd(6, w0 + j * sub * 16, 64);
        _tile_loadd(7, w1 + j * sub * 16, 64);
        for (int u = 0; u < nu; u++) { /* the hi terms, then the lo (if any) */
            _tile_loadd(4, (u ? l0 : h0) + j * 16 * sub, 2 * sub);
            _tile_loadd(5, (u ? l1 : h1) + j * 16 * sub, 2 * sub);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
}

static inline void grid_store(float *buf) {
    _tile_stored(0, buf, 64);
    _tile_stored(1, buf + 256, 64);
    _tile_stored(2, buf + 512, 64);
    _tile_stored(3, buf + 768, 64);
}

/* c[32 x 32] (+)= buf's four tiles times the run's column scales (mins:
   then c -= am x bm), row by row; the first run of a call without
   accumulate starts from zero (fma(t, s, 0): the rounded product). */
static inline void grid_scale(int mins, const float *buf, const float *s0p, const float *s1p, const float *am0,
                              const float *am1, const float *m0p, const float *m1p, float *c, int64_t ldc, int fresh) {
    const __m512 s0 = _mm512_loadu_ps(s0p), s1 = _mm512_loadu_ps(s1p);
    const __m512 mn0 = mins ? _mm512_loadu_ps(m0p) : _mm512_setzero_ps();
    const __m512 mn1 = mins ? _mm512_loadu_ps(m1p) : _mm512_setzero_ps();
    for (int t = 0; t < 2; t++) {
        const float *am = t ? am1 : am0;
#pragma GCC unroll 4
        for (int r = 0; r < 16; r++) {
            float *cr = c + (t * 16 + r) * ldc;
            __m512 v0 = fresh ? _mm512_setzero_ps() : _mm512_loadu_ps(cr);
            __m512 v1 = fresh ? _mm512_setzero_ps() : _mm512_loadu_ps(cr + 16);
            v0 = _mm512_fmadd_ps(_mm512_load_ps(buf + (2 * t) * 256 + r * 16), s0, v0);
            v1 = _mm512_fmadd_ps(_mm512_load_ps(buf + (2 * t + 1) * 256 + r * 16), s1, v1);
            if (mins) {
                const __m512 a = _mm512_set1_ps(-am[r]);
                v0 = _mm512_fmadd_ps(a, mn0, v0);
                v1 = _mm512_fmadd_ps(a, mn1, v1);
            }
            _mm512_storeu_ps(cr, v0);
            _mm512_storeu_ps(cr + 16, v1);
        }
    }
}

/* Both row tiles and both panels (mt = 2): a run's four tiles summed,
   stored, and the next run's products issued before the stored sums are
   scaled, so the vector work overlaps the tile unit's. */
static void run_grid(int mins, int64_t nb, int sub, int run, const uint16_t *hi, const uint16_t *lo, int64_t a_next,
                     const float *am, int64_t am_next, const uint16_t *w0, const uint16_t *w1, const float *ws0,
                     const float *ws1, const float *wm0, const float *wm1, float *c, int64_t ldc, int accumulate) {
    _Alignas(64) float buf[2][1024];
    const int64_t nr = (nb + run - 1) / run;
    const float *am1 = mins ? am + am_next : NULL;
    for (int64_t q = 0; q <= nr; q++) { /* run q's products, then run q - 1's scaling under them */
        const int64_t b = q * run;
        if (q < nr) grid_sums(b, nb - b < run ? nb - b : run, sub, hi, hi + a_next, lo, lo ? lo + a_next : NULL, w0, w1);
        if (q > 0) {
            const int64_t p = b - run; /* the previous run's first block */
            grid_scale(mins, buf[(q - 1) & 1], ws0 + p * 16, ws1 + p * 16, mins ? am + p * 16 : NULL,
                       mins ? am1 + p * 16 : NULL, mins ? wm0 + p * 16 : NULL, mins ? wm1 + p * 16 : NULL, c, ldc,
                       q == 1 && !accumulate);
        }
        if (q < nr) grid_store(buf[q & 1]);
    }
    if (nr == 0 && !accumulate)
        for (int r = 0; r < 32; r++) memset(c + r * ldc, 0, 32 * sizeof(float));
}

void tops_gemm_f32_bf16x2_bf16_32x32__amx(int mt, int64_t nb, int sub, int run, const uint16_t *hi, const uint16_t *lo,
                                          int64_t a_next, const uint16_t *b0, const uint16_t *b1, const float *bs0,
                                          const float *bs1, const float *am, int64_t am_next, const float *bm0,
                                          const float *bm1, float *c, int64_t ldc, int accumulate) {
    if (mt == 2) {
        configure_grid(sub);
        run_grid(bm0 != NULL, nb, sub, run, hi, lo, a_next, am, am_next, b0, b1, bs0, bs1, bm0, bm1, c, ldc,
                 accumulate);
        return;
    }
    configure(sub);
    for (int t = 0; t < mt; t++) {
        const uint16_t *ht = hi + t * a_next, *lt = lo ? lo + t * a_next : NULL;
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
