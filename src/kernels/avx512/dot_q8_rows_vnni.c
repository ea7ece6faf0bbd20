/* AVX-512 VNNI rows of 8-bit blocks read in place for up to four
   activation rows at once (tops__kernels.dot_q8_bytes_rows): each pair of
   weight blocks is loaded once for all the rows (one 512-bit vector, the
   even block in the low half), where dot_q8_bytes_x4 takes one pass over
   the weights per activation row.  The numbers are dot_q8_bytes_x4's
   (kernels/kernels.h: sixteen lanes, per lane the exact i32 sum of four
   products, one convert and one FMA against fl(ws * as), the lanes added
   by the same tree), so each activation row gets the bits its own
   dot_q8_bytes_x4 call gives.  The i32 sums come from vpdpbusd on the
   activations made unsigned (x + 128), started from -128 times the
   weights' four-element sums (one vpdpbusd a block pair, shared by the
   rows). */
#include "kernels/kernels.h"
#include "kernels/avx2/hsum.h"
#include "kernels/avx2/nibstream.h"

#include <immintrin.h>
#include <string.h>

/* x in lanes 0..7, y in lanes 8..15 */
static inline __m512 pair_ps(float x, float y) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(x)), _mm256_set1_ps(y), 1);
}

static inline float hdr_scale(const uint8_t *codes, float mul) {
    uint16_t h;
    memcpy(&h, codes - 2, 2);
    return _cvtsh_ss(h) * mul;
}

/* MM activation rows (a compile-time count, so the accumulators stay in
   registers) against four weight rows. */
static inline void rows_mm(const int MM, const uint8_t *codes, int64_t block_bytes, int64_t row_bytes, int hdr,
                           float mul, const int8_t *aq, int64_t lda, const float *as, int64_t lds, const float *ws,
                           int64_t ld_ws, int64_t nb, float *out) {
    __m512 acc[4][4];
    for (int i = 0; i < MM; i++)
        for (int r = 0; r < 4; r++) acc[i][r] = _mm512_setzero_ps();
    const __m512i flip = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m512i xu[4];
        __m512 sa[4];
        for (int i = 0; i < MM; i++) {
            xu[i] = _mm512_xor_si512(_mm512_loadu_si512((const void *)(aq + i * lda + b * 32)), flip);
            sa[i] = pair_ps(as[i * lds + b], as[i * lds + b + 1]);
        }
        for (int r = 0; r < 4; r++) {
            const uint8_t *blk = codes + r * row_bytes + b * block_bytes;
            _mm_prefetch((const char *)(blk + TOPS__NIB_PREFETCH), _MM_HINT_T0);
            _mm_prefetch((const char *)(blk + TOPS__NIB_PREFETCH + 64), _MM_HINT_T0);
            const __m512i q =
                block_bytes == 32
                    ? _mm512_loadu_si512((const void *)blk)
                    : _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)blk)),
                                         _mm256_loadu_si256((const __m256i *)(blk + block_bytes)), 1);
            const __m512 w = hdr ? pair_ps(hdr_scale(blk, mul), hdr_scale(blk + block_bytes, mul))
                                 : pair_ps(ws[r * ld_ws + b], ws[r * ld_ws + b + 1]);
            /* -128 x (q[4j] + ... + q[4j+3]) in lane j */
            const __m512i start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, flip, q));
            for (int i = 0; i < MM; i++) {
                const __m512i d = _mm512_dpbusd_epi32(start, xu[i], q);
                acc[i][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(w, sa[i]), acc[i][r]);
            }
        }
    }
    if (b < nb) { /* a last even block: lanes 0..7 */
        const __mmask16 lo = 0x00FF;
        __m512i xu[4];
        for (int i = 0; i < MM; i++)
            xu[i] = _mm512_xor_si512(
                _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(aq + i * lda + b * 32))), flip);
        for (int r = 0; r < 4; r++) {
            const uint8_t *blk = codes + r * row_bytes + b * block_bytes;
            const __m512i q = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)blk));
            const float w = hdr ? hdr_scale(blk, mul) : ws[r * ld_ws + b];
            const __m512i start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, flip, q));
            for (int i = 0; i < MM; i++) {
                const __m512i d = _mm512_dpbusd_epi32(start, xu[i], q);
                acc[i][r] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(w * as[i * lds + b]),
                                                  acc[i][r], lo);
            }
        }
    }
    for (int i = 0; i < MM; i++)
        for (int r = 0; r < 4; r++)
            out[4 * i + r] = tops__hsum8_ps(
                _mm256_add_ps(_mm512_castps512_ps256(acc[i][r]), _mm512_extractf32x8_ps(acc[i][r], 1)));
}

void tops__avx512_vnni_dot_q8_bytes_rows(const uint8_t *codes, int64_t block_bytes, int64_t row_bytes, int hdr,
                                         float mul, const int8_t *aq, int64_t lda, const float *as, int64_t lds,
                                         int mm, const float *ws, int64_t ld_ws, int64_t nb, float *out) {
    switch (mm) {
    case 1: rows_mm(1, codes, block_bytes, row_bytes, hdr, mul, aq, lda, as, lds, ws, ld_ws, nb, out); break;
    case 2: rows_mm(2, codes, block_bytes, row_bytes, hdr, mul, aq, lda, as, lds, ws, ld_ws, nb, out); break;
    case 3: rows_mm(3, codes, block_bytes, row_bytes, hdr, mul, aq, lda, as, lds, ws, ld_ws, nb, out); break;
    default: rows_mm(4, codes, block_bytes, row_bytes, hdr, mul, aq, lda, as, lds, ws, ld_ws, nb, out); break;
    }
}
