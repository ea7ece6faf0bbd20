/* AVX-512 VNNI row stream (tops__kernels.dot_q8_nibstream_x4): the AVX2
   kernel's numbers (kernels/avx2/dot_q8.c: per lane the exact i32 sum of
   a block, or half-block, minus its correction, one convert and one FMA
   against fl(fl(stored * mul) * as), the lanes added by the same tree), so
   the same bits, with the integer part on vpdpbusd.  Weight rows 0 and 1
   (2 and 3) of a stream vector are adjacent 32-byte runs, so one 64-byte
   load holds a row pair and each activation vector is broadcast to both
   halves; a super-block's nibbles are split (and looked up) once for all
   the m activation rows, and each row pair then costs four vpdpbusd per
   half and activation row (no i16 stage, no vpmaddwd). */
#include "kernels/kernels.h"
#include "kernels/avx2/nibstream.h"

#include <immintrin.h>
#include <string.h>


/* 16 stored scales at e (a row pair's lanes: the stream keeps [half][row]
   [lane]) as f32: ue4m3 at 2^-8 of its value (exact: its 7 bits as an
   f16; 0x7F NaN), e8m0 with 0 the subnormal 2^-127 and 255 NaN, as the
   AVX2 kernel. */
static inline __m512 scales16(const uint8_t *e, int kind) {
    if (kind == TOPS__NIBSTREAM_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)e));
    if (kind == TOPS__NIBSTREAM_E8M0) {
        const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)e));
        __m512i bits = _mm512_slli_epi32(x, 23);
        bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(x, _mm512_setzero_si512()),
                                     _mm512_set1_epi32(0x00400000));
        bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(x, _mm512_set1_epi32(255)),
                                     _mm512_set1_epi32(0x7fc00000));
        return _mm512_castsi512_ps(bits);
    }
    const __m256i m = _mm256_and_si256(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)e)), _mm256_set1_epi16(0x7f));
    const __m256i h = _mm256_mask_mov_epi16(_mm256_slli_epi16(m, 7), _mm256_cmpeq_epi16_mask(m, _mm256_set1_epi16(0x7f)),
                                            _mm256_set1_epi16(0x7e00));
    return _mm512_cvtph_ps(h);
}

static inline __attribute__((always_inline)) void nibstream(const uint8_t *stream, const tops__nibble_layout *layout,
                                                            const tops__nibstream_form *form, const int kind,
                                                            const int halves, const tops__nibstream_act *act,
                                                            const int m, int64_t nb, float *out) {
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)layout->lut));
    const __m512i mask = _mm512_set1_epi8(0x0F);
    const int coded = form->coded, esz = kind == TOPS__NIBSTREAM_F16 ? 2 : 1;
    const int64_t sb_bytes = tops__nibstream_sb_bytes(form), scale_span = 4 * 8 * tops__nibstream_scale_span(form);
    const __m512 vmul = _mm512_set1_ps(kind == TOPS__NIBSTREAM_UE4M3 ? form->mul * 256.0f : form->mul);
    __m512 acc[TOPS__NIBSTREAM_ROWS][2]; /* [activation row][row pair] */
    for (int i = 0; i < m; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t b = 0, sbi = 0; b < nb; b += 8, sbi++) {
        const uint8_t *sb = stream + sbi * sb_bytes;
        const int64_t group = nb - b < 8 ? nb - b : 8;
        for (int64_t o = 0; o < sb_bytes; o += 64) {
            _mm_prefetch((const char *)(sb + o + TOPS__NIBSTREAM_PREFETCH_L2), _MM_HINT_T1);
            _mm_prefetch((const char *)(sb + o + TOPS__NIBSTREAM_PREFETCH_L1), _MM_HINT_T0);
        }
        const __mmask16 keep = (__mmask16)_mm512_cmpgt_epi32_mask(
            _mm512_set1_epi32((int)group), _mm512_broadcast_i64x4(tops__stream_lanes()));
        __m512 wm[2][2]; /* [half][row pair]: stored * mul */
        for (int h = 0; h < halves; h++)
            for (int p = 0; p < 2; p++)
                wm[h][p] = _mm512_mul_ps(scales16(sb + (h * 4 + 2 * p) * 8 * esz, kind), vmul);
        /* the nibbles: v[h][p][t] for half h (vectors 2h, 2h + 1), row pair p, t = lo0, hi0, lo1, hi1 */
        const uint8_t *nib = sb + scale_span;
        __m512i v[2][2][4];
        for (int h = 0; h < 2; h++)
            for (int p = 0; p < 2; p++) {
                const __m512i x0 = _mm512_loadu_si512((const void *)(nib + 256 * h + 64 * p));
                const __m512i x1 = _mm512_loadu_si512((const void *)(nib + 256 * h + 128 + 64 * p));
                v[h][p][0] = _mm512_and_si512(x0, mask);
                v[h][p][1] = _mm512_and_si512(_mm512_srli_epi16(x0, 4), mask);
                v[h][p][2] = _mm512_and_si512(x1, mask);
                v[h][p][3] = _mm512_and_si512(_mm512_srli_epi16(x1, 4), mask);
                if (!coded)
                    for (int t = 0; t < 4; t++) v[h][p][t] = _mm512_shuffle_epi8(lut, v[h][p][t]);
            }
        for (int i = 0; i < m; i++) {
            const tops__nibstream_act *ai = act + i;
            __m512 s[2][2]; /* [half][row pair]: fl(ws * as), 0 past nb */
            int fast = 0;
            if (kind == TOPS__NIBSTREAM_E8M0) fast = tops__stream_e8m0_fast(sb, ai->range + 16 * sbi);
            if (fast) { /* bits(ws * as) = bias + (e << 23) (tops__nibstream_act) */
                const __m512i bias = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(ai->bias + 8 * sbi)));
                for (int p = 0; p < 2; p++)
                    s[0][p] = _mm512_castsi512_ps(_mm512_add_epi32(
                        _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sb + 16 * p))), 23),
                        bias));
            } else {
                for (int h = 0; h < halves; h++) {
                    const __m512 a8 = _mm512_broadcast_f32x8(_mm256_loadu_ps(ai->scale + 8 * (halves * sbi + h)));
                    for (int p = 0; p < 2; p++) s[h][p] = _mm512_maskz_mul_ps(keep, wm[h][p], a8);
                }
            }
            const int8_t *aq = ai->q + 256 * sbi;
            const int32_t *corr = ai->corr + 8 * halves * sbi;
            __m512i sum[2][2]; /* [half][row pair] */
            for (int h = 0; h < 2; h++) {
                const int8_t *a = aq + 128 * h;
                __m512i x[4];
                for (int t = 0; t < 4; t++)
                    x[t] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(a + 32 * t)));
                for (int p = 0; p < 2; p++) {
                    const __m512i d0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), v[h][p][0], x[0]),
                                                           v[h][p][1], x[1]);
                    const __m512i d1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), v[h][p][2], x[2]),
                                                           v[h][p][3], x[3]);
                    sum[h][p] = _mm512_add_epi32(d0, d1);
                }
            }
            for (int p = 0; p < 2; p++) {
                if (halves == 1) {
                    const __m512i c = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)corr));
                    const __m512i d = _mm512_sub_epi32(_mm512_add_epi32(sum[0][p], sum[1][p]), c);
                    acc[i][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s[0][p], acc[i][p]);
                } else {
                    for (int h = 0; h < 2; h++) {
                        const __m512i c = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(corr + 8 * h)));
                        const __m512i d = _mm512_sub_epi32(sum[h][p], c);
                        acc[i][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s[h][p], acc[i][p]);
                    }
                }
            }
        }
    }
    for (int i = 0; i < m; i++)
        for (int p = 0; p < 2; p++) {
            out[4 * i + 2 * p] = tops__hsum8_ps(_mm512_castps512_ps256(acc[i][p]));
            out[4 * i + 2 * p + 1] = tops__hsum8_ps(_mm512_extractf32x8_ps(acc[i][p], 1));
        }
}

/* The four-row in-place dot on plain rows (dot_q8_nibbles_x4) with
   vpdpbusd: the AVX2 body's numbers, and table entries above 32 (iq4_nl's
   codebook plus 127) that vpmaddubsw's i16 stage would saturate. */
static inline __m256i nib_pair_dot(__m256i lo, __m256i a_lo, __m256i hi, __m256i a_hi) {
    return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, a_lo), hi, a_hi);
}
#define TOPS_NIB_PAIR_DOT nib_pair_dot
#include "kernels/avx2/nibbles_x4_body.h"
#undef TOPS_NIB_PAIR_DOT

void tops__avx512_vnni_dot_q8_nibbles_x4(const uint8_t *blocks, int64_t row_bytes, const tops__nibble_layout *layout,
                                         const int8_t *aq, const float *as, const float *acorr, const float *ws,
                                         int64_t ld_ws, int64_t nb, int sub, float *out) {
    if (sub == 16) nibbles_x4(blocks, row_bytes, layout, aq, as, acorr, ws, ld_ws, nb, 2, out);
    else nibbles_x4(blocks, row_bytes, layout, aq, as, acorr, ws, ld_ws, nb, 1, out);
}

void tops__avx512_vnni_dot_q8_nibstream_x4(const uint8_t *stream, const tops__nibble_layout *layout,
                                           const tops__nibstream_form *form, const tops__nibstream_act *act, int m,
                                           int64_t nb, float *out) {
    TOPS__NIBSTREAM_INSTANCES(nibstream);
}
