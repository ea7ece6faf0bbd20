/* AVX-512 minifloat weight rows (tops__dot_fp8_rows_fn, kernels/kernels.h):
   four e4m3, e5m2, e2m3 or e3m2 rows read in place, 16 codes a step
   decoded exactly in registers (fp8: each byte the top half of an f16;
   e4m3 one bit further, its NaN made an f16 NaN, then times 2^8; MX: times
   the block's scale), and dotted with every activation row at once, so
   each weight is decoded once for all m rows (m a constant per instance:
   4 x m accumulators).  Each output is one FMA chain over K in 16 lanes,
   summed at the end, whatever m.  fp6: 12 bytes through
   kernels/avx2/fp6.h give the codes times 2^-14 (e2m3) or 2^-12 (e3m2);
   MX block scales come with the inverse in them (kernels.h), plain rows
   take it once per output (each product a * h is then the exact one
   scaled by a power of two, unless it is below 2^-112, where it keeps
   fewer bits: a flush-to-zero of products that small). */
#include "kernels/kernels.h"
#include "kernels/avx2/fp6.h"

#include <immintrin.h>

enum { PREFETCH = 2048 };

static inline __attribute__((always_inline)) __m512 fp8x16(const uint8_t *p, __mmask16 km, int e5m2) {
    const __m128i bytes = km == 0xFFFF ? _mm_loadu_si128((const __m128i *)p) : _mm_maskz_loadu_epi8(km, p);
    const __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(bytes), 8);
    if (e5m2) return _mm512_cvtph_ps(h);
    const __m256i nanbits = _mm256_set1_epi16(0x3F80);
    const __m256i x = _mm256_and_si256(_mm256_srai_epi16(h, 1), _mm256_set1_epi16((short)0xBFFF));
    const __mmask16 nan = _mm256_cmpeq_epi16_mask(_mm256_and_si256(x, nanbits), nanbits);
    return _mm512_mul_ps(_mm512_cvtph_ps(_mm256_mask_mov_epi16(x, nan, _mm256_set1_epi16(0x7E00))),
                         _mm512_set1_ps(256.0f));
}

/* Codes k..k + 15 of a row of `kind` (mask km: the codes inside n; no byte
   past them read, the lanes past them zero); fp6: their values times 2^-14
   or 2^-12 (tops__fp6_unit puts it back). */
static inline __attribute__((always_inline)) __m512 fpx16(const uint8_t *row, int64_t k, __mmask16 km, int kind) {
    if (kind < TOPS__FPROW_E2M3) return fp8x16(row + k, km, kind == TOPS__FPROW_E5M2);
    const int e3m2 = kind == TOPS__FPROW_E3M2;
    const uint8_t *p = row + k / 4 * 3;
    if (km == 0xFFFF) return _mm512_cvtph_ps(tops__fp6x16_half_bytes(_mm_maskz_loadu_epi8(0x0FFF, p), e3m2));
    const int codes = __builtin_popcount((unsigned)km), bytes = (3 * codes + 3) / 4;
    const __m256i h = tops__fp6x16_half_bytes(_mm_maskz_loadu_epi8((__mmask16)((1u << bytes) - 1), p), e3m2);
    return _mm512_maskz_mov_ps(km, _mm512_cvtph_ps(h));
}

/* One 16-code step of every row (mask km: the codes inside n). */
static inline __attribute__((always_inline)) void step(const float *a, int64_t lda, const int m, const uint8_t *b,
                                                       int64_t ldb, int64_t k, __mmask16 km, const int kind,
                                                       const float *ws, int64_t ld_ws,
                                                       __m512 acc[TOPS__FP8_ROWS_MAX_M][4]) {
    __m512 w[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        w[r] = fpx16(b + r * ldb, k, km, kind);
        if (ws) w[r] = _mm512_mul_ps(w[r], _mm512_set1_ps(ws[r * ld_ws + k / 32])); /* the block's scale: exact */
    }
#pragma GCC unroll 4
    for (int i = 0; i < m; i++) {
        const __m512 x = km == 0xFFFF ? _mm512_loadu_ps(a + i * lda + k) : _mm512_maskz_loadu_ps(km, a + i * lda + k);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) acc[i][r] = _mm512_fmadd_ps(x, w[r], acc[i][r]);
    }
}

static inline __attribute__((always_inline)) void zero_acc(__m512 acc[TOPS__FP8_ROWS_MAX_M][4]) {
#pragma GCC unroll 4
    for (int i = 0; i < TOPS__FP8_ROWS_MAX_M; i++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) acc[i][r] = _mm512_setzero_ps();
}

/* Codes k.. n - 1 by 16-code steps (the last one masked), then each
   output: its lanes summed, times the fp6 unit where no block scale has it. */
static inline __attribute__((always_inline)) void finish(const float *a, int64_t lda, const int m, const uint8_t *b,
                                                         int64_t ldb, int64_t n, int64_t k, const int kind,
                                                         const float *ws, int64_t ld_ws,
                                                         __m512 acc[TOPS__FP8_ROWS_MAX_M][4], float *out) {
    for (; k + 16 <= n; k += 16) step(a, lda, m, b, ldb, k, 0xFFFF, kind, ws, ld_ws, acc);
    if (k < n) step(a, lda, m, b, ldb, k, (__mmask16)((1u << (n - k)) - 1), kind, ws, ld_ws, acc);
    const float unit = kind >= TOPS__FPROW_E2M3 && !ws ? tops__fp6_unit(kind == TOPS__FPROW_E3M2) : 1.0f;
    for (int i = 0; i < m; i++)
        for (int r = 0; r < 4; r++) out[4 * i + r] = _mm512_reduce_add_ps(acc[i][r]) * unit;
}

static inline __attribute__((always_inline)) void rows(const float *a, int64_t lda, const int m, const uint8_t *b,
                                                       int64_t ldb, int64_t n, const int kind, const float *ws,
                                                       int64_t ld_ws, float *out) {
    __m512 acc[TOPS__FP8_ROWS_MAX_M][4];
    zero_acc(acc);
    int64_t k = 0;
    for (; k + 64 <= n; k += 64) { /* a line (fp6: 48 bytes) of each row a step, PREFETCH bytes ahead */
        const int64_t at = (kind >= TOPS__FPROW_E2M3 ? k / 4 * 3 : k) + PREFETCH;
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) _mm_prefetch((const char *)(b + r * ldb + at), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) step(a, lda, m, b, ldb, k + 16 * q, 0xFFFF, kind, ws, ld_ws, acc);
    }
    finish(a, lda, m, b, ldb, n, k, kind, ws, ld_ws, acc, out);
}

#define TOPS_FP_ROWS_KIND(M, K)                               \
    do {                                                      \
        if (ws) rows(a, lda, M, b, ldb, n, K, ws, ld_ws, out); \
        else rows(a, lda, M, b, ldb, n, K, NULL, 0, out);      \
    } while (0)
#define TOPS_FP_ROWS(M)                                                                                                 \
    static void rows_##M(const float *a, int64_t lda, const uint8_t *b, int64_t ldb, int64_t n, int kind,              \
                         const float *ws, int64_t ld_ws, float *out) {                                                  \
        if (kind == TOPS__FPROW_E5M2) TOPS_FP_ROWS_KIND(M, TOPS__FPROW_E5M2);                                          \
        else if (kind == TOPS__FPROW_E2M3) TOPS_FP_ROWS_KIND(M, TOPS__FPROW_E2M3);                                     \
        else if (kind == TOPS__FPROW_E3M2) TOPS_FP_ROWS_KIND(M, TOPS__FPROW_E3M2);                                     \
        else TOPS_FP_ROWS_KIND(M, TOPS__FPROW_E4M3);                                                                   \
    }
TOPS_FP_ROWS(1)
TOPS_FP_ROWS(2)
TOPS_FP_ROWS(3)
TOPS_FP_ROWS(4)
#undef TOPS_FP_ROWS
#undef TOPS_FP_ROWS_KIND

void tops__avx512_dot_fp8_rows(const float *a, int64_t lda, int m, const uint8_t *b, int64_t ldb, int64_t n, int kind,
                               const float *ws, int64_t ld_ws, float *out) {
    switch (m) {
    case 1: rows_1(a, lda, b, ldb, n, kind, ws, ld_ws, out); break;
    case 2: rows_2(a, lda, b, ldb, n, kind, ws, ld_ws, out); break;
    case 3: rows_3(a, lda, b, ldb, n, kind, ws, ld_ws, out); break;
    default: rows_4(a, lda, b, ldb, n, kind, ws, ld_ws, out); break;
    }
}

/* AVX512-VBMI: fp6 rows 64 codes (48 bytes) a step.  vpermb moves the
   six bytes of each group of eight codes into a quadword, vpmultishiftqb
   puts code j of the group in byte j (low six bits), two vpermb table
   lookups give each code's f16 bit pattern (the same value fp6.h gives: the
   code times 2^-14 or 2^-12, exactly) as a low and a high byte, and the
   byte interleave makes the f16 words.  The groups go to quadwords 0, 2,
   4, 6, 1, 3, 5, 7 so that the interleave's 128-bit lanes come out in code
   order.  Each output's FMA chain is the one of the 16-code kernel above
   (the same products in the same order): the same bits. */
#define TOPS_VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))

/* Bytes of the f16 patterns (low, high) of each 6-bit code. */
static const uint8_t fp6_f16_lo[2][64] = {
    {0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128,
     0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128,
     0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128, 0, 128}, /* e2m3 */
    {0}};                                                                               /* e3m2 */
static const uint8_t fp6_f16_hi[2][64] = {
    {0,   0,   1,   1,   2,   2,   3,   3,   4,   4,   5,   5,   6,   6,   7,   7,   8,   8,   9,   9,   10,  10,
     11,  11,  12,  12,  13,  13,  14,  14,  15,  15,  128, 128, 129, 129, 130, 130, 131, 131, 132, 132, 133, 133,
     134, 134, 135, 135, 136, 136, 137, 137, 138, 138, 139, 139, 140, 140, 141, 141, 142, 142, 143, 143},
    {0,   1,   2,   3,   4,   5,   6,   7,   8,   9,   10,  11,  12,  13,  14,  15,  16,  17,  18,  19,  20,  21,
     22,  23,  24,  25,  26,  27,  28,  29,  30,  31,  128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139,
     140, 141, 142, 143, 144, 145, 146, 147, 148, 149, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159}};

/* Codes 0..63 of the 48 bytes at p as four vectors of 16 f32 (codes
   16 q .. 16 q + 15 in w[q]), each times its block's scale where ws. */
static inline __attribute__((always_inline)) TOPS_VBMI void fp6x64(const uint8_t *p, __m512i tlo, __m512i thi,
                                                                   const float *ws, __m512 w[4]) {
    /* quadword L: the bytes 6 g .. 6 g + 5 of group g = {0, 4, 1, 5, 2, 6, 3, 7}[L] */
    const __m512i gather = _mm512_set_epi8(47, 46, 47, 46, 45, 44, 43, 42, 23, 22, 23, 22, 21, 20, 19, 18, /* L 7, 6 */
                                           41, 40, 41, 40, 39, 38, 37, 36, 17, 16, 17, 16, 15, 14, 13, 12, /* L 5, 4 */
                                           35, 34, 35, 34, 33, 32, 31, 30, 11, 10, 11, 10, 9, 8, 7, 6,     /* L 3, 2 */
                                           29, 28, 29, 28, 27, 26, 25, 24, 5, 4, 5, 4, 3, 2, 1, 0);        /* L 1, 0 */
    const __m512i raw = _mm512_maskz_loadu_epi8(0x0000FFFFFFFFFFFFull, p);
    const __m512i codes = _mm512_multishift_epi64_epi8(_mm512_set1_epi64(0x2A241E18120C0600ll),
                                                       _mm512_permutexvar_epi8(gather, raw));
    const __m512i lo = _mm512_permutexvar_epi8(codes, tlo), hi = _mm512_permutexvar_epi8(codes, thi);
    const __m512i h0 = _mm512_unpacklo_epi8(lo, hi), h1 = _mm512_unpackhi_epi8(lo, hi); /* codes 0..31, 32..63 */
    w[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(h0));
    w[1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h0, 1));
    w[2] = _mm512_cvtph_ps(_mm512_castsi512_si256(h1));
    w[3] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h1, 1));
    if (ws) {
        w[0] = _mm512_mul_ps(w[0], _mm512_set1_ps(ws[0]));
        w[1] = _mm512_mul_ps(w[1], _mm512_set1_ps(ws[0]));
        w[2] = _mm512_mul_ps(w[2], _mm512_set1_ps(ws[1]));
        w[3] = _mm512_mul_ps(w[3], _mm512_set1_ps(ws[1]));
    }
}

static inline __attribute__((always_inline)) TOPS_VBMI void rows_vbmi(const float *a, int64_t lda, const int m,
                                                                      const uint8_t *b, int64_t ldb, int64_t n,
                                                                      const int kind, const float *ws, int64_t ld_ws,
                                                                      float *out) {
    const int e3m2 = kind == TOPS__FPROW_E3M2;
    const __m512i tlo = _mm512_loadu_si512(fp6_f16_lo[e3m2]), thi = _mm512_loadu_si512(fp6_f16_hi[e3m2]);
    __m512 acc[TOPS__FP8_ROWS_MAX_M][4];
    zero_acc(acc);
    int64_t k = 0;
    for (; k + 64 <= n; k += 64) {
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const uint8_t *p = b + r * ldb + k / 4 * 3;
            _mm_prefetch((const char *)(p + PREFETCH), _MM_HINT_T0);
            __m512 w[4];
            fp6x64(p, tlo, thi, ws ? ws + r * ld_ws + k / 32 : NULL, w);
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++)
#pragma GCC unroll 4
                for (int i = 0; i < m; i++)
                    acc[i][r] = _mm512_fmadd_ps(_mm512_loadu_ps(a + i * lda + k + 16 * q), w[q], acc[i][r]);
        }
    }
    finish(a, lda, m, b, ldb, n, k, kind, ws, ld_ws, acc, out);
}

#define TOPS_FP6_ROWS(M)                                                                                               \
    static TOPS_VBMI void rows_vbmi_##M(const float *a, int64_t lda, const uint8_t *b, int64_t ldb, int64_t n,        \
                                        int kind, const float *ws, int64_t ld_ws, float *out) {                        \
        const int e3 = kind == TOPS__FPROW_E3M2;                                                                       \
        if (ws) e3 ? rows_vbmi(a, lda, M, b, ldb, n, TOPS__FPROW_E3M2, ws, ld_ws, out)                                 \
                   : rows_vbmi(a, lda, M, b, ldb, n, TOPS__FPROW_E2M3, ws, ld_ws, out);                                \
        else e3 ? rows_vbmi(a, lda, M, b, ldb, n, TOPS__FPROW_E3M2, NULL, 0, out)                                      \
                : rows_vbmi(a, lda, M, b, ldb, n, TOPS__FPROW_E2M3, NULL, 0, out);                                     \
    }
TOPS_FP6_ROWS(1)
TOPS_FP6_ROWS(2)
TOPS_FP6_ROWS(3)
TOPS_FP6_ROWS(4)
#undef TOPS_FP6_ROWS

TOPS_VBMI void tops__avx512vbmi_dot_fp8_rows(const float *a, int64_t lda, int m, const uint8_t *b, int64_t ldb,
                                             int64_t n, int kind, const float *ws, int64_t ld_ws, float *out) {
    if (kind < TOPS__FPROW_E2M3) {
        tops__avx512_dot_fp8_rows(a, lda, m, b, ldb, n, kind, ws, ld_ws, out);
        return;
    }
    switch (m) {
    case 1: rows_vbmi_1(a, lda, b, ldb, n, kind, ws, ld_ws, out); break;
    case 2: rows_vbmi_2(a, lda, b, ldb, n, kind, ws, ld_ws, out); break;
    case 3: rows_vbmi_3(a, lda, b, ldb, n, kind, ws, ld_ws, out); break;
    default: rows_vbmi_4(a, lda, b, ldb, n, kind, ws, ld_ws, out); break;
    }
}
