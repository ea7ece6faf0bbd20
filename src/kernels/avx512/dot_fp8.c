/* AVX-512 fp8 weight rows (tops__dot_fp8_rows_fn, kernels/kernels.h): four
   e4m3 or e5m2 rows read in place, 16 codes a step decoded exactly in
   registers (each byte the top half of an f16; e4m3 one bit further, its
   NaN made an f16 NaN, then times 2^8; MX: times the block's scale), and
   dotted with every activation
   row at once, so each weight is decoded once for all m rows (m a constant
   per instance: 4 x m accumulators).  Each output is one FMA chain over K
   in 16 lanes, summed at the end, whatever m. */
#include "kernels/kernels.h"

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

/* One 16-code step of every row (mask km: the codes inside n). */
static inline __attribute__((always_inline)) void step(const float *a, int64_t lda, const int m, const uint8_t *b,
                                                       int64_t ldb, int64_t k, __mmask16 km, const int e5m2,
                                                       const float *ws, int64_t ld_ws,
                                                       __m512 acc[TOPS__FP8_ROWS_MAX_M][4]) {
    __m512 w[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        w[r] = fp8x16(b + r * ldb + k, km, e5m2);
        if (ws) w[r] = _mm512_mul_ps(w[r], _mm512_set1_ps(ws[r * ld_ws + k / 32])); /* the block's scale: exact */
    }
#pragma GCC unroll 4
    for (int i = 0; i < m; i++) {
        const __m512 x = km == 0xFFFF ? _mm512_loadu_ps(a + i * lda + k) : _mm512_maskz_loadu_ps(km, a + i * lda + k);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) acc[i][r] = _mm512_fmadd_ps(x, w[r], acc[i][r]);
    }
}

static inline __attribute__((always_inline)) void rows(const float *a, int64_t lda, const int m, const uint8_t *b,
                                                       int64_t ldb, int64_t n, const int e5m2, const float *ws,
                                                       int64_t ld_ws, float *out) {
    __m512 acc[TOPS__FP8_ROWS_MAX_M][4];
#pragma GCC unroll 4
    for (int i = 0; i < TOPS__FP8_ROWS_MAX_M; i++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) acc[i][r] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 64 <= n; k += 64) { /* a line of each row a step, PREFETCH bytes ahead */
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) _mm_prefetch((const char *)(b + r * ldb + k + PREFETCH), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) step(a, lda, m, b, ldb, k + 16 * q, 0xFFFF, e5m2, ws, ld_ws, acc);
    }
    for (; k + 16 <= n; k += 16) step(a, lda, m, b, ldb, k, 0xFFFF, e5m2, ws, ld_ws, acc);
    if (k < n) step(a, lda, m, b, ldb, k, (__mmask16)((1u << (n - k)) - 1), e5m2, ws, ld_ws, acc);
    for (int i = 0; i < m; i++)
        for (int r = 0; r < 4; r++) out[4 * i + r] = _mm512_reduce_add_ps(acc[i][r]);
}

#define TOPS_FP8_ROWS(M)                                                                                     \
    static void rows_##M(const float *a, int64_t lda, const uint8_t *b, int64_t ldb, int64_t n, int e5m2,   \
                         const float *ws, int64_t ld_ws, float *out) {                                       \
        if (ws) {                                                                                            \
            if (e5m2) rows(a, lda, M, b, ldb, n, 1, ws, ld_ws, out);                                         \
            else rows(a, lda, M, b, ldb, n, 0, ws, ld_ws, out);                                              \
        } else {                                                                                             \
            if (e5m2) rows(a, lda, M, b, ldb, n, 1, NULL, 0, out);                                           \
            else rows(a, lda, M, b, ldb, n, 0, NULL, 0, out);                                                \
        }                                                                                                    \
    }
TOPS_FP8_ROWS(1)
TOPS_FP8_ROWS(2)
TOPS_FP8_ROWS(3)
TOPS_FP8_ROWS(4)
#undef TOPS_FP8_ROWS

void tops__avx512_dot_fp8_rows(const float *a, int64_t lda, int m, const uint8_t *b, int64_t ldb, int64_t n, int e5m2,
                               const float *ws, int64_t ld_ws, float *out) {
    switch (m) {
    case 1: rows_1(a, lda, b, ldb, n, e5m2, ws, ld_ws, out); break;
    case 2: rows_2(a, lda, b, ldb, n, e5m2, ws, ld_ws, out); break;
    case 3: rows_3(a, lda, b, ldb, n, e5m2, ws, ld_ws, out); break;
    default: rows_4(a, lda, b, ldb, n, e5m2, ws, ld_ws, out); break;
    }
}
