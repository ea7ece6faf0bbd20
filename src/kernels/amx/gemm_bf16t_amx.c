/* AMX bf16-term kernel and its weight decoders.  The operands arrive as
   bf16 terms of their values (scales folded in), so the tile loop is
   tdpbf16ps only: no per-block scaling, no tile store until K is done.
   Tiles: 0..3 the 2 x 2 grid of 16 x 16 f32 sums (0, 1: row tile 0 x
   column groups 0, 1; 2, 3: row tile 1), 4 and 5 the two row tiles' term,
   6 and 7 the two column groups' term (16 pair rows of 16 columns x 2 k).
   A term tile is loaded only when the pair list changes it, so a list
   like (a0 w0) (a1 w0) (a1 w1) (a0 w1) loads four tile pairs for four
   products.  The decoders write the weights' terms in that pair layout
   (cpu/dispatch.h); their scalar twins are src/kernels/ref/amx_terms.c. */
#include "cpu/dispatch.h"

#include <immintrin.h>
#include <string.h>

typedef struct amx_tilecfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tilecfg;

static void configure(void) {
    _Alignas(64) amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    _tile_loadconfig(&cfg);
}

/* Software prefetch into L1, PREFETCH_STEPS steps ahead: the tile unit
   waits on tile loads that miss L1 (tiles are not renamed, so a load
   cannot run ahead of the products reading the tile it replaces).  The
   activations always (they stream from L2, used once per call); the
   weights when the pair list has several products per step (strict:
   their terms exceed L1 over a K block), and not for one product (the
   driver's K block keeps a pair's one term near L1 across row tiles).
   That it pays is not settled: no same-run comparison without it yet. */
enum { PREFETCH_STEPS = 2, PREFETCH_B_ALWAYS = 0 };

static inline void prefetch_tiles(const uint16_t *p, int tiles) {
    for (int i = 0; i < tiles * 16; i++) _mm_prefetch((const char *)(p + i * 32), _MM_HINT_T0);
}

static inline void run_mt(int mt, int64_t steps, const uint16_t *a, int64_t a_next, int64_t a_step,
                          const uint16_t *b0, const uint16_t *b1, int64_t b_step, int np, const uint8_t *pa,
                          const uint8_t *pb, float *c, int64_t ldc, int accumulate) {
    const int64_t cs = ldc * 4;
    configure();
    if (accumulate) {
        _tile_loadd(0, c, cs);
        _tile_loadd(1, c + 16, cs);
        if (mt == 2) {
            _tile_loadd(2, c + 16 * ldc, cs);
            _tile_loadd(3, c + 16 * ldc + 16, cs);
        }
    } else {
        _tile_zero(0);
        _tile_zero(1);
        if (mt == 2) {
            _tile_zero(2);
            _tile_zero(3);
        }
    }
    int na = 1, nw = 1; /* terms per step: one past the largest index in the pair lists */
    for (int p = 0; p < np; p++) {
        na = pa[p] + 1 > na ? pa[p] + 1 : na;
        nw = pb[p] + 1 > nw ? pb[p] + 1 : nw;
    }
    const int pf_b = PREFETCH_B_ALWAYS || np > 1;
    for (int64_t s = 0; s < steps; s++) {
        const uint16_t *as = a + s * a_step, *bs0 = b0 + s * b_step, *bs1 = b1 + s * b_step;
        if (PREFETCH_STEPS > 0 && s + PREFETCH_STEPS < steps) {
            const int64_t ahead = PREFETCH_STEPS;
            prefetch_tiles(as + ahead * a_step, na);
            if (mt == 2) prefetch_tiles(as + a_next + ahead * a_step, na);
            if (pf_b) {
                prefetch_tiles(bs0 + ahead * b_step, nw);
                prefetch_tiles(bs1 + ahead * b_step, nw);
            }
        }
        int la = -1, lb = -1;
        for (int p = 0; p < np; p++) {
            if (pa[p] != la) {
                la = pa[p];
                _tile_loadd(4, as + la * 512, 64);
                if (mt == 2) _tile_loadd(5, as + a_next + la * 512, 64);
            }
            if (pb[p] != lb) {
                lb = pb[p];
                _tile_loadd(6, bs0 + lb * 512, 64);
                _tile_loadd(7, bs1 + lb * 512, 64);
            }
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            if (mt == 2) {
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
        }
    }
    _tile_stored(0, c, cs);
    _tile_stored(1, c + 16, cs);
    if (mt == 2) {
        _tile_stored(2, c + 16 * ldc, cs);
        _tile_stored(3, c + 16 * ldc + 16, cs);
    }
}

void tops_gemm_f32_bf16t_bf16t_32x32__amx(int mt, int64_t steps, const uint16_t *a, int64_t a_next, int64_t a_step,
                                          const uint16_t *b0, const uint16_t *b1, int64_t b_step, int np,
                                          const uint8_t *pa, const uint8_t *pb, float *c, int64_t ldc,
                                          int accumulate) {
    if (mt == 2) run_mt(2, steps, a, a_next, a_step, b0, b1, b_step, np, pa, pb, c, ldc, accumulate);
    else run_mt(1, steps, a, a_next, a_step, b0, b1, b_step, np, pa, pb, c, ldc, accumulate);
}

/* f32 of the 32 bf16 in v: half 0 (words 0..15) or 1. */
static inline __m512 widen(__m512i v, int half) {
    const __m256i h = half ? _mm512_extracti64x4_epi64(v, 1) : _mm512_extracti64x4_epi64(v, 0);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* One 64-byte pair row from lo (words 0..15) and hi (16..31): the terms
   into dst[u * 512], nz |= the non-zero magnitude bits of terms 1, 2. */
static inline void emit(__m512 lo, __m512 hi, int nslots, uint16_t *dst, __m512i *nz1, __m512i *nz2) {
    const __m512i mag = _mm512_set1_epi16(0x7fff);
    __m512i t = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    _mm512_storeu_si512((void *)dst, t);
    if (nslots < 2) return;
    lo = _mm512_sub_ps(lo, widen(t, 0));
    hi = _mm512_sub_ps(hi, widen(t, 1));
    t = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    _mm512_storeu_si512((void *)(dst + 512), t);
    *nz1 = _mm512_or_si512(*nz1, _mm512_and_si512(t, mag));
    if (nslots < 3) return;
    lo = _mm512_sub_ps(lo, widen(t, 0));
    hi = _mm512_sub_ps(hi, widen(t, 1));
    t = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    _mm512_storeu_si512((void *)(dst + 1024), t);
    *nz2 = _mm512_or_si512(*nz2, _mm512_and_si512(t, mag));
}

static int used(__m512i nz1, __m512i nz2, int nslots) {
    if (nslots >= 3 && _mm512_test_epi16_mask(nz2, nz2)) return 3;
    if (nslots >= 2 && _mm512_test_epi16_mask(nz1, nz1)) return 2;
    return 1;
}

int tops__amx_terms_q8__avx512(const int8_t *panel, const float *scales, int sub, int64_t kc, int nslots,
                               uint16_t *out) {
    /* A 64-byte panel row holds k = 4r..4r+3 of columns 0..15 (byte
       j * 4 + t).  Shuffled within each 16-byte lane (4 columns), then its
       8-byte halves gathered: bytes 0..31 hold k = 4r, 4r+1 and bytes
       32..63 k = 4r+2, 4r+3, each as j * 2 + (t % 2): the pair layout. */
    _Alignas(64) uint8_t shuf_bytes[64];
    for (int d = 0; d < 64; d++) shuf_bytes[d] = (uint8_t)(((d % 8) / 2) * 4 + ((d % 16) / 8) * 2 + d % 2);
    const __m512i shuf = _mm512_load_si512((const void *)shuf_bytes);
    const __m512i halves = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0);
    const __m512i idx_lo = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i idx_hi = _mm512_add_epi32(idx_lo, _mm512_set1_epi32(8));
    __m512i nz1 = _mm512_setzero_si512(), nz2 = _mm512_setzero_si512();
    __m512 s_lo = _mm512_setzero_ps(), s_hi = _mm512_setzero_ps();
    for (int64_t r = 0; r < kc / 4; r++) {
        if ((4 * r) % sub == 0) {
            const __m512 s = _mm512_loadu_ps(scales + (4 * r / sub) * 16);
            s_lo = _mm512_permutexvar_ps(idx_lo, s);
            s_hi = _mm512_permutexvar_ps(idx_hi, s);
        }
        const __m512i v = _mm512_permutexvar_epi64(
            halves, _mm512_shuffle_epi8(_mm512_loadu_si512((const void *)(panel + r * 64)), shuf));
        const __m512 f0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(v, 0))), s_lo);
        const __m512 f1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(v, 1))), s_hi);
        const __m512 f2 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(v, 2))), s_lo);
        const __m512 f3 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(v, 3))), s_hi);
        uint16_t *dst = out + (r / 8) * nslots * 512 + (r % 8) * 64;
        emit(f0, f1, nslots, dst, &nz1, &nz2);
        emit(f2, f3, nslots, dst + 32, &nz1, &nz2);
    }
    return used(nz1, nz2, nslots);
}

int tops__amx_terms_f32__avx512(const float *src, int64_t ld, int64_t kc, int nslots, uint16_t *out) {
    /* Pair row k2: word j * 2 + t = src[(2 k2 + t) * ld + j]. */
    const __m512i idx_lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i idx_hi = _mm512_add_epi32(idx_lo, _mm512_set1_epi32(8));
    __m512i nz1 = _mm512_setzero_si512(), nz2 = _mm512_setzero_si512();
    for (int64_t k2 = 0; k2 < kc / 2; k2++) {
        const __m512 x0 = _mm512_loadu_ps(src + 2 * k2 * ld), x1 = _mm512_loadu_ps(src + (2 * k2 + 1) * ld);
        const __m512 lo = _mm512_permutex2var_ps(x0, idx_lo, x1), hi = _mm512_permutex2var_ps(x0, idx_hi, x1);
        emit(lo, hi, nslots, out + (k2 / 16) * nslots * 512 + (k2 % 16) * 32, &nz1, &nz2);
    }
    return used(nz1, nz2, nslots);
}
