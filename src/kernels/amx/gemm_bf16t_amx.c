/* AMX bf16-term kernel and its weight decoders.  The operands arrive as
   bf16 terms of their values (scales folded in), so the tile loop is
   tdpbf16ps only: no per-block scaling, no tile store until K is done.
   Tiles: 0..3 the 2 x 2 grid of 16 x 16 f32 sums (0, 1: row tile 0 x
   column groups 0, 1; 2, 3: row tile 1), 4 and 5 the two row tiles' term,
   6 and 7 the two column groups' term (16 pair rows of 16 columns x 2 k).
   A term tile is loaded only when the pair list changes it, so a list
   like (a0 w0) (a1 w0) (a1 w1) (a0 w1) loads four tile pairs for four
   products.  The decoders write the weights' terms in that pair layout
   (kernels/kernels.h); their scalar twins are src/kernels/ref/amx_terms.c. */
#include "kernels/kernels.h"
#include "kernels/amx/tilecfg.h"

#include <immintrin.h>
#include <string.h>

/* The nslots = 1 decode of terms_q8 (below) over panel rows [r0, r1):
   row r holds k = 4r..4r+3 of columns 0..15 (byte j * 4 + t), shuffled
   within each 16-byte lane (4 columns), then its 8-byte halves gathered:
   bytes 0..31 hold k = 4r, 4r+1 and bytes 32..63 k = 4r+2, 4r+3, each as
   j * 2 + (t % 2): the pair layout; times the block's column scales, one
   bf16 term (round to nearest even). */
typedef struct q8_consts {
    __m512i shuf, halves, idx_lo, idx_hi;
} q8_consts;

static inline q8_consts q8_consts_make(void) {
    _Alignas(64) uint8_t shuf_bytes[64];
    for (int d = 0; d < 64; d++) shuf_bytes[d] = (uint8_t)(((d % 8) / 2) * 4 + ((d % 16) / 8) * 2 + d % 2);
    q8_consts k;
    k.shuf = _mm512_load_si512((const void *)shuf_bytes);
    k.halves = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0);
    k.idx_lo = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    k.idx_hi = _mm512_add_epi32(k.idx_lo, _mm512_set1_epi32(8));
    return k;
}

/* Row r's four k as f32 times the scales: f[0], f[1] the pair row of k =
   4r, 4r+1 (words 0..15, 16..31), f[2], f[3] that of 4r+2, 4r+3; raw the
   row's 64 codes. */
static inline void q8_row_v(const q8_consts *k, __m512i raw, __m512 s_lo, __m512 s_hi, __m512 f[4]) {
    const __m512i v = _mm512_permutexvar_epi64(k->halves, _mm512_shuffle_epi8(raw, k->shuf));
    f[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(v, 0))), s_lo);
    f[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(v, 1))), s_hi);
    f[2] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(v, 2))), s_lo);
    f[3] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(v, 3))), s_hi);
}

static inline void q8_row(const q8_consts *k, const int8_t *panel, int64_t r, __m512 s_lo, __m512 s_hi, __m512 f[4]) {
    q8_row_v(k, _mm512_loadu_si512((const void *)(panel + r * 64)), s_lo, s_hi, f);
}

/* Row r of a 4-bit panel (kernels.h, tops__amx_nib_expand) as codes:
   lut16 the 16 codes in each 128-bit lane. */
static inline __m512i nib_row(const uint8_t *nib, int64_t r, __m512i lut16) {
    __m512i v = _mm512_loadu_si512((const void *)(nib + (r / 2) * 64));
    if (r % 2) v = _mm512_srli_epi16(v, 4);
    return _mm512_shuffle_epi8(lut16, _mm512_and_si512(v, _mm512_set1_epi8(15)));
}

static inline __m512i lut16_of(const int8_t *lut) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)lut));
}

void tops__amx_nib_expand__avx512(const uint8_t *nib, const int8_t *lut, int64_t rows, int8_t *out) {
    const __m512i l = lut16_of(lut);
    for (int64_t r = 0; r < rows; r++) _mm512_storeu_si512((void *)(out + r * 64), nib_row(nib, r, l));
}

static inline void decode1_rows(const q8_consts *k, const int8_t *panel, const int8_t *lut, const float *scales,
                                const float *mins, float smul, int sub, int64_t r0, int64_t r1, uint16_t *out) {
    const __m512i l16 = lut ? lut16_of(lut) : _mm512_setzero_si512();
    const int64_t per_block = sub / 4; /* rows per scale block (sub: a multiple of 4) */
    for (int64_t r = r0; r < r1;) {
        const int64_t blk = r / per_block, e = (blk + 1) * per_block < r1 ? (blk + 1) * per_block : r1;
        const __m512 s = _mm512_mul_ps(_mm512_loadu_ps(scales + blk * 16), _mm512_set1_ps(smul));
        const __m512 s_lo = _mm512_permutexvar_ps(k->idx_lo, s), s_hi = _mm512_permutexvar_ps(k->idx_hi, s);
        const __m512 m = mins ? _mm512_loadu_ps(mins + blk * 16) : _mm512_setzero_ps();
        const __m512 m_lo = _mm512_permutexvar_ps(k->idx_lo, m), m_hi = _mm512_permutexvar_ps(k->idx_hi, m);
        for (; r < e; r++) {
            __m512 f[4];
            if (lut) q8_row_v(k, nib_row((const uint8_t *)panel, r, l16), s_lo, s_hi, f);
            else q8_row(k, panel, r, s_lo, s_hi, f);
            if (mins) { /* as terms_q8_min: q * scale rounded, then the min subtracted */
                f[0] = _mm512_sub_ps(f[0], m_lo), f[1] = _mm512_sub_ps(f[1], m_hi);
                f[2] = _mm512_sub_ps(f[2], m_lo), f[3] = _mm512_sub_ps(f[3], m_hi);
            }
            uint16_t *dst = out + (r / 8) * 512 + (r % 8) * 64;
            _mm512_storeu_si512((void *)dst, (__m512i)_mm512_cvtne2ps_pbh(f[1], f[0]));
            _mm512_storeu_si512((void *)(dst + 32), (__m512i)_mm512_cvtne2ps_pbh(f[3], f[2]));
        }
    }
}

/* No software prefetch: the hardware streams the packed tiles from L2 as
   fast as from L1, and prefetching them cost time at every distance tried
   on the Xeon.  Loads are interleaved with the products so each waits
   only on the product that last read its tile. */
static inline void run_mt(int mt, int64_t steps, const uint16_t *a, int64_t a_next, int64_t a_step,
                          const uint16_t *b0, const uint16_t *b1, int64_t b_step, int np, const uint8_t *pa,
                          const uint8_t *pb, float *c, int64_t ldc, int accumulate, const tops__amx_decode_job *job) {
    const int64_t cs = ldc * 4;
    tops__amx_configure();
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
    if (job || np == 1) { /* one weight term: the pairs (0, 0) (relaxed) or (0, 0), (1, 0) (strict, np = 2) */
        const uint16_t *as = a + pa[0] * 512, *w0 = b0 + pb[0] * 512, *w1 = b1 + pb[0] * 512;
        /* The decode share: a slice of rows after each step's products. */
        const int64_t per = job ? (job->r1 - job->r0 + steps - 1) / steps : 0;
        int64_t r = job ? job->r0 : 0;
        const q8_consts k = q8_consts_make();
        for (int64_t s = 0; s < steps; s++) {
            _tile_loadd(4, as + s * a_step, 64);
            _tile_loadd(6, w0 + s * b_step, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(7, w1 + s * b_step, 64);
            _tile_dpbf16ps(1, 4, 7);
            if (mt == 2) {
                _tile_loadd(5, as + a_next + s * a_step, 64);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            if (np == 2) { /* the activations' lo term against the same weight tiles */
                _tile_loadd(4, as + 512 + s * a_step, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                if (mt == 2) {
                    _tile_loadd(5, as + 512 + a_next + s * a_step, 64);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
            }
            if (job && r < job->r1) {
                const int64_t e = r + per < job->r1 ? r + per : job->r1;
                decode1_rows(&k, job->panel[0], job->lut, job->scales[0], job->mins[0], job->smul, job->sub, r, e,
                             job->out[0]);
                decode1_rows(&k, job->panel[1], job->lut, job->scales[1], job->mins[1], job->smul, job->sub, r, e,
                             job->out[1]);
                r = e;
            }
        }
    } else {
        for (int64_t s = 0; s < steps; s++) {
            const uint16_t *as = a + s * a_step, *bs0 = b0 + s * b_step, *bs1 = b1 + s * b_step;
            int la = -1, lb = -1;
            for (int p = 0; p < np; p++) {
                const int new_a = pa[p] != la, new_b = pb[p] != lb;
                la = pa[p];
                lb = pb[p];
                if (new_a) _tile_loadd(4, as + la * 512, 64);
                if (new_b) _tile_loadd(6, bs0 + lb * 512, 64);
                _tile_dpbf16ps(0, 4, 6);
                if (new_b) _tile_loadd(7, bs1 + lb * 512, 64);
                _tile_dpbf16ps(1, 4, 7);
                if (mt == 2) {
                    if (new_a) _tile_loadd(5, as + a_next + la * 512, 64);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
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
    if (mt == 2) run_mt(2, steps, a, a_next, a_step, b0, b1, b_step, np, pa, pb, c, ldc, accumulate, NULL);
    else run_mt(1, steps, a, a_next, a_step, b0, b1, b_step, np, pa, pb, c, ldc, accumulate, NULL);
}

void tops_gemm_f32_bf16t_bf16t_32x32__amx_dec(int mt, int na, int64_t steps, const uint16_t *a, int64_t a_next,
                                              int64_t a_step, const uint16_t *b0, const uint16_t *b1, int64_t b_step,
                                              float *c, int64_t ldc, int accumulate,
                                              const tops__amx_decode_job *job) {
    static const uint8_t pa[2] = {0, 1}, pb[2] = {0, 0};
    const int np = na == 2 ? 2 : 1;
    if (mt == 2) run_mt(2, steps, a, a_next, a_step, b0, b1, b_step, np, pa, pb, c, ldc, accumulate, job);
    else run_mt(1, steps, a, a_next, a_step, b0, b1, b_step, np, pa, pb, c, ldc, accumulate, job);
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
    const q8_consts k = q8_consts_make();
    if (nslots == 1) {
        decode1_rows(&k, panel, NULL, scales, NULL, 1.0f, sub, 0, kc / 4, out);
        return 1;
    }
    __m512i nz1 = _mm512_setzero_si512(), nz2 = _mm512_setzero_si512();
    __m512 s_lo = _mm512_setzero_ps(), s_hi = _mm512_setzero_ps();
    for (int64_t r = 0; r < kc / 4; r++) {
        if ((4 * r) % sub == 0) {
            const __m512 s = _mm512_loadu_ps(scales + (4 * r / sub) * 16);
            s_lo = _mm512_permutexvar_ps(k.idx_lo, s);
            s_hi = _mm512_permutexvar_ps(k.idx_hi, s);
        }
        __m512 f[4];
        q8_row(&k, panel, r, s_lo, s_hi, f);
        uint16_t *dst = out + (r / 8) * nslots * 512 + (r % 8) * 64;
        emit(f[0], f[1], nslots, dst, &nz1, &nz2);
        emit(f[2], f[3], nslots, dst + 32, &nz1, &nz2);
    }
    return used(nz1, nz2, nslots);
}

void tops__amx_terms_q8_min__avx512(const int8_t *panel, const float *scales, const float *mins, int sub, int64_t kc,
                                    uint16_t *out) {
    const q8_consts k = q8_consts_make();
    decode1_rows(&k, panel, NULL, scales, mins, 1.0f, sub, 0, kc / 4, out);
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
