/* AVX-512 strict rows in place: 4-bit codes (tops__dot_f32_nibbles_rows_fn,
   kernels/kernels.h) and 8-bit ones (tops__dot_f32_bytes_rows_fn, below):
   four weight rows of blocks of 32 against every
   activation row at once.  Per block and row: 16 code bytes widened to 16
   lanes once, split into the low and high nibbles, each looked up in the
   layout's table (lut - offset as f32) times the block's scale, less its
   min for forms with mins (one multiply or FMA of the 16-entry table), so
   every weight is decoded once for all
   m rows; then two FMAs per activation row into one 16-lane chain per
   output, summed at the end.  The activations come in the nibbles' order
   (low nibbles' elements, then the high ones': evens then odds for
   interleaved rows), as for dot_f32_nibbles_x4. */
#include "kernels/kernels.h"
#include "core/numeric.h"
#include "kernels/avx2/nibstream.h"

#include <immintrin.h>
#include <string.h>

enum { PREFETCH = TOPS__NIB_PREFETCH };

/* A block's 32 decoded weights of four rows (lo: lanes of the first 16
   activations, hi: the next 16) into every activation row's chains. */
static inline __attribute__((always_inline)) void block_fmas(const float *a, int64_t lda, const int m, const __m512 lo[4],
                                                             const __m512 hi[4], __m512 acc[TOPS__NIB_ROWS_MAX_M][4]) {
#pragma GCC unroll 4
    for (int i = 0; i < m; i++) {
        const __m512 x0 = _mm512_loadu_ps(a + i * lda), x1 = _mm512_loadu_ps(a + i * lda + 16);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) acc[i][r] = _mm512_fmadd_ps(x1, hi[r], _mm512_fmadd_ps(x0, lo[r], acc[i][r]));
    }
}

/* A block's scale from its first bytes times mul (the unpackers' product):
   kind 1 an f16, 2 ggml's e8m0 byte 2^(e - 128) (e 0 and 1 subnormal, 0xFF NaN). */
static inline float hdr_scale(const uint8_t *blk, int kind, float mul) {
    if (kind == 2) return tops__e8m0_half_to_f32(blk[0]) * mul;
    uint16_t h;
    memcpy(&h, blk, 2);
    return _cvtsh_ss(h) * mul;
}

static inline __attribute__((always_inline)) void zero(__m512 acc[TOPS__NIB_ROWS_MAX_M][4]) {
#pragma GCC unroll 4
    for (int i = 0; i < TOPS__NIB_ROWS_MAX_M; i++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) acc[i][r] = _mm512_setzero_ps();
}

/* Each chain's 16 lanes summed: out[4 i + r]. */
static inline __attribute__((always_inline)) void sums(const int m, __m512 acc[TOPS__NIB_ROWS_MAX_M][4], float *out) {
    for (int i = 0; i < m; i++)
        for (int r = 0; r < 4; r++) out[4 * i + r] = _mm512_reduce_add_ps(acc[i][r]);
}

static inline __attribute__((always_inline)) void nib_rows(const uint8_t *blocks, int64_t row_bytes,
                                                           const tops__nibble_layout *layout, const float *a,
                                                           int64_t lda, const int m, const float *ws, const float *wm,
                                                           int64_t ld_ws, const int halves, const float *tables,
                                                           int64_t nb, float *out) {
    float tab[16];
    for (int c = 0; c < 16; c++) tab[c] = (float)(layout->lut[c] - layout->offset);
    const __m512 table = _mm512_loadu_ps(tab);
    const __m512i low = _mm512_set1_epi32(0x0F);
    const int64_t stride = layout->block_bytes;
    const uint8_t *p = blocks + layout->header;
    __m512 acc[TOPS__NIB_ROWS_MAX_M][4];
    zero(acc);
    const int sb = layout->super_blocks;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t off = sb == 8   ? (b >> 3) * layout->super_bytes + (b & 7) * stride /* iq4_xs: no division */
                            : sb      ? (b / sb) * layout->super_bytes + (b % sb) * stride
                                      : b * stride;
        if ((off & 63) + stride > 64 || (off & 63) == 0) /* a new line: each row's stream PREFETCH bytes ahead */
            for (int r = 0; r < 4; r++) _mm_prefetch((const char *)(p + r * row_bytes + off + PREFETCH), _MM_HINT_T0);
        __m512 lo[4], hi[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + r * row_bytes + off)));
            if (tables) { /* codebook rows: row r's 16 entries are its weights */
                const __m512 t = _mm512_loadu_ps(tables + 16 * r);
                lo[r] = _mm512_permutexvar_ps(_mm512_and_si512(v, low), t);
                hi[r] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t);
                continue;
            }
            if (halves == 2) { /* a scale per 16 (nvfp4, int4-g16; interleaved): lanes 0-7 the first half's */
                const __m512 sc = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(ws[r * ld_ws + 2 * b]),
                                                       _mm512_set1_ps(ws[r * ld_ws + 2 * b + 1]));
                lo[r] = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_and_si512(v, low), table), sc);
                hi[r] = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table), sc);
                continue;
            }
            const __m512 sc = _mm512_set1_ps(layout->hdr_scale ? hdr_scale(p + r * row_bytes + off - layout->header, layout->hdr_scale, layout->hdr_mul)
                                                               : ws[r * ld_ws + b]);
            const __m512 t = wm ? _mm512_fmsub_ps(table, sc, _mm512_set1_ps(wm[r * ld_ws + b])) : _mm512_mul_ps(table, sc);
            lo[r] = _mm512_permutexvar_ps(_mm512_and_si512(v, low), t);
            hi[r] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t);
        }
        block_fmas(a + b * 32, lda, m, lo, hi, acc);
    }
    sums(m, acc, out);
}

#define TOPS_NIB_ROWS(M)                                                                                               \
    static void nib_rows_##M(const uint8_t *blocks, int64_t row_bytes, const tops__nibble_layout *layout, const float *a, \
                             int64_t lda, const float *ws, const float *wm, int64_t ld_ws, int sub, const float *tables, \
                             int64_t nb, float *out) {                                                                 \
        if (tables) nib_rows(blocks, row_bytes, layout, a, lda, M, NULL, NULL, 0, 1, tables, nb, out);                \
        else if (sub == 16) nib_rows(blocks, row_bytes, layout, a, lda, M, ws, NULL, ld_ws, 2, NULL, nb, out);        \
        else if (wm) nib_rows(blocks, row_bytes, layout, a, lda, M, ws, wm, ld_ws, 1, NULL, nb, out);                 \
        else nib_rows(blocks, row_bytes, layout, a, lda, M, ws, NULL, ld_ws, 1, NULL, nb, out);                       \
    }
TOPS_NIB_ROWS(1)
TOPS_NIB_ROWS(2)
TOPS_NIB_ROWS(3)
TOPS_NIB_ROWS(4)
#undef TOPS_NIB_ROWS

void tops__avx512_dot_f32_nibbles_rows(const uint8_t *blocks, int64_t row_bytes, const tops__nibble_layout *layout,
                                       const float *a, int64_t lda, int m, const float *ws, const float *wm,
                                       int64_t ld_ws, int sub, const float *tables, int64_t nb, float *out) {
    switch (m) {
    case 1: nib_rows_1(blocks, row_bytes, layout, a, lda, ws, wm, ld_ws, sub, tables, nb, out); break;
    case 2: nib_rows_2(blocks, row_bytes, layout, a, lda, ws, wm, ld_ws, sub, tables, nb, out); break;
    case 3: nib_rows_3(blocks, row_bytes, layout, a, lda, ws, wm, ld_ws, sub, tables, nb, out); break;
    default: nib_rows_4(blocks, row_bytes, layout, a, lda, ws, wm, ld_ws, sub, tables, nb, out); break;
    }
}

/* 8-bit codes (tops__dot_f32_bytes_rows_fn): per block and row, 32 i8
   codes widened to f32 in two vectors and multiplied by the block's scale
   (exact for an f16 or e8m0 scale: q has 8 bits), then two FMAs per
   activation row (natural order) into one 16-lane chain per output. */
static inline __attribute__((always_inline)) void byte_rows(const uint8_t *blocks, int64_t row_bytes,
                                                            const tops__byte_layout *layout, const float *a, int64_t lda,
                                                            const int m, const float *ws, int64_t ld_ws, int64_t nb,
                                                            float *out) {
    const int64_t stride = layout->block_bytes;
    const uint8_t *p = blocks + layout->header;
    __m512 acc[TOPS__NIB_ROWS_MAX_M][4];
    zero(acc);
    for (int64_t b = 0; b < nb; b++) {
        const int64_t off = b * stride;
        if ((off & 63) + stride > 64 || (off & 63) == 0)
            for (int r = 0; r < 4; r++) _mm_prefetch((const char *)(p + r * row_bytes + off + PREFETCH), _MM_HINT_T0);
        __m512 lo[4], hi[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const uint8_t *c = p + r * row_bytes + off;
            const __m512 sc = _mm512_set1_ps(layout->hdr_scale ? hdr_scale(p + r * row_bytes + off - layout->header, layout->hdr_scale, layout->hdr_mul)
                                                               : ws[r * ld_ws + b]);
            lo[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)c))), sc);
            hi[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(c + 16)))), sc);
        }
        block_fmas(a + b * 32, lda, m, lo, hi, acc);
    }
    sums(m, acc, out);
}

#define TOPS_BYTE_ROWS(M)                                                                                          \
    static void byte_rows_##M(const uint8_t *blocks, int64_t row_bytes, const tops__byte_layout *layout,         \
                              const float *a, int64_t lda, const float *ws, int64_t ld_ws, int64_t nb, float *out) { \
        byte_rows(blocks, row_bytes, layout, a, lda, M, ws, ld_ws, nb, out);                                       \
    }
TOPS_BYTE_ROWS(1)
TOPS_BYTE_ROWS(2)
TOPS_BYTE_ROWS(3)
TOPS_BYTE_ROWS(4)
#undef TOPS_BYTE_ROWS

void tops__avx512_dot_f32_bytes_rows(const uint8_t *blocks, int64_t row_bytes, const tops__byte_layout *layout,
                                     const float *a, int64_t lda, int m, const float *ws, int64_t ld_ws, int64_t nb,
                                     float *out) {
    switch (m) {
    case 1: byte_rows_1(blocks, row_bytes, layout, a, lda, ws, ld_ws, nb, out); break;
    case 2: byte_rows_2(blocks, row_bytes, layout, a, lda, ws, ld_ws, nb, out); break;
    case 3: byte_rows_3(blocks, row_bytes, layout, a, lda, ws, ld_ws, nb, out); break;
    default: byte_rows_4(blocks, row_bytes, layout, a, lda, ws, ld_ws, nb, out); break;
    }
}
