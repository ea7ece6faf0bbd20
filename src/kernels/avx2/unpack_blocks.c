/* AVX2 integer forms (codes and scales), one per layout family of
   core/intform.h, and the 16-entry table row (lut4).  Same integers and
   scales as the scalar unpackers, which still serve partial blocks at the
   end of K.  4-bit codes go through the layout's map with one vpshufb. */
#include "kernels/kernels.h"
#include "core/numeric.h"
#include "kernels/avx2/fp6.h"
#include "kernels/ref/kquant.h"

#include <immintrin.h>
#include <string.h>

/* 16 bytes of packed nibbles -> 32 codes in element order (low nibble first). */
static inline __m256i nibbles_interleaved(const uint8_t *p) {
    __m128i b = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(0x0F);
    __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    return _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
}
/* GGUF order: elements 0..15 in the low nibbles, 16..31 in the high. */
static inline __m256i nibbles_split(const uint8_t *p) {
    __m128i b = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}
/* 32 4-bit codes (one per byte) through the layout's 16-entry map. */
static inline __m256i map_codes(const tops__int_layout *lay, __m256i v) {
    const __m128i m = _mm_loadu_si128((const __m128i *)lay->map);
    return _mm256_shuffle_epi8(_mm256_set_m128i(m, m), v);
}

/* 32 6-bit codes (24 bytes, kernels/avx2/fp6.h) through the layout's
   64-entry map: the codes as bytes, then four 16-entry vpshufb tables
   picked by the codes' bits 4 and 5. */
static inline __m256i map_codes6(const tops__int_layout *lay, const uint8_t *p) {
    const __m256i w0 = _mm256_srli_epi16(tops__fp6x16_lifted(tops__fp6_load12(p)), 10);
    const __m256i w1 = _mm256_srli_epi16(tops__fp6x16_lifted(tops__fp6_load12(p + 12)), 10);
    const __m256i c = _mm256_permute4x64_epi64(_mm256_packus_epi16(w0, w1), 0xD8); /* codes 0..31 in order */
    __m256i t[4];
    for (int q = 0; q < 4; q++) {
        const __m128i tab = _mm_loadu_si128((const __m128i *)(lay->map + 16 * q));
        t[q] = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(tab), c);
    }
    const __m256i b4 = _mm256_slli_epi16(c, 3), b5 = _mm256_slli_epi16(c, 2); /* bits 4, 5 to each byte's top */
    return _mm256_blendv_epi8(_mm256_blendv_epi8(t[0], t[1], b4), _mm256_blendv_epi8(t[2], t[3], b4), b5);
}

/* Scales of the element-plane formats.  Fast cases: f16 planes read
   8 at a time with F16C, e8m0 and ue4m3 (nvfp4) through 256-entry tables
   of the scalar decoder's values; the rest (and any tail beyond K) by the
   scalar row. */
static float e8m0_table[256], ue4m3_table[256];
/* One scale entry as f32 (the scalar decoder's value): tables, F16C, else the scalar one. */
static inline float scale_entry(tops_dtype dt, const uint8_t *e) {
    if (dt == TOPS_DT_E8M0) return e8m0_table[*e];
    if (dt == TOPS_DT_UE4M3) return ue4m3_table[*e];
    if (dt == TOPS_DT_F16) {
        uint16_t h;
        memcpy(&h, e, 2);
        return _cvtsh_ss(h);
    }
    return tops__ref_scale_entry(dt, e);
}

/* One f32 per sub-block of w from a plane of entries (a scale or bias
   plane's row at `plane`, `step` bytes apart, one per group) times mul,
   negated where neg is set (mins: -(bias * mul)).  0: not a case handled
   here (the caller's scalar row then): a tail past K, or entries per
   sub-block that are not f16 (contiguous or not), e8m0 or ue4m3. */
static int plane_per_sub(const tops__qweight *w, const uint8_t *plane, tops_dtype dt, int64_t step, float mul, int neg,
                         int64_t k0, int64_t n, float *out) {
    const int sub = w->sub;
    const int64_t nb = n / sub;
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(neg ? (int)0x80000000u : 0));
    if (k0 + n > w->k || k0 % sub) return 0;
    if (w->group > sub && w->group % sub == 0) {
        /* groups of several sub-blocks (int4-g128): each entry decoded once */
        const int64_t per = w->group / sub, g0 = k0 / w->group;
        const uint8_t *e = plane + g0 * step;
        int64_t b = 0, left = per - (k0 - g0 * w->group) / sub; /* sub-blocks left in the first group */
        if (dt == TOPS_DT_F16 && step == 2 && left == per && (per == 2 || per == 4)) {
            /* 8 f16 entries a step, each stored per times */
            const __m256 vmul = _mm256_set1_ps(mul);
            const __m256i lo = per == 2 ? _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3) : _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
            const __m256i next = _mm256_set1_epi32(8 / (int)per);
            for (; b + 8 * per <= nb; b += 8 * per, e += 16) {
                const __m256 v = _mm256_xor_ps(_mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)e)), vmul), sign);
                __m256i idx = lo;
                for (int64_t j = 0; j < per; j++, idx = _mm256_add_epi32(idx, next))
                    _mm256_storeu_ps(out + b + 8 * j, _mm256_permutevar8x32_ps(v, idx));
            }
        }
        for (; b < nb; e += step, left = per) {
            const float v = scale_entry(dt, e) * mul, s = neg ? -v : v;
            for (; b < nb && left > 0; b++, left--) out[b] = s;
        }
        return 1;
    }
    if (w->group != sub || (dt != TOPS_DT_F16 && dt != TOPS_DT_E8M0 && dt != TOPS_DT_UE4M3)) return 0;
    const uint8_t *base = plane + (k0 / sub) * step;
    int64_t b = 0;
    if (dt == TOPS_DT_F16) {
        const int64_t hs = step / 2;
        const uint16_t *h = (const uint16_t *)base;
        if (hs == 1)
            for (; b + 8 <= nb; b += 8)
                _mm256_storeu_ps(out + b, _mm256_xor_ps(_mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + b))),
                                                                      _mm256_set1_ps(mul)),
                                                        sign));
        for (; b < nb; b++) {
            const float v = _cvtsh_ss(h[b * hs]) * mul;
            out[b] = neg ? -v : v;
        }
    } else {
        const float *table = dt == TOPS_DT_E8M0 ? e8m0_table : ue4m3_table;
        for (; b < nb; b++) {
            const float v = table[base[b * step]] * mul;
            out[b] = neg ? -v : v;
        }
    }
    return 1;
}

static void unpack_scales(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *scale) {
    if (!w->scales ||
        !plane_per_sub(w, w->scales + row * w->scale_row, w->scale_dtype, w->scale_step, w->mul, 0, k0, n, scale))
        tops__ref_unpack_scales(w, row, k0, n, scale);
}

/* Mins of the element planes with a bias plane: -(bias * mul) per sub-block. */
static void unpack_code_mins(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *min) {
    if (!plane_per_sub(w, w->bias + row * w->bias_row, w->bias_dtype, w->bias_step, w->mul, 1, k0, n, min))
        tops__ref_unpack_code_mins(w, row, k0, n, min);
}

/* TOPS__IF_CODES: 4-bit codes (i4 groups, e2m1 MX/nvfp4) and 6-bit ones
   (e2m3, mxfp6) in whole vectors of 32 inside K through the map, 2-bit ones
   (i2 groups) sign-extended in vectors of 32, 8-bit codes copied, the
   scalar unpacker for the rest. */
static void unpack_codes(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    const uint8_t *data = w->data + row * w->row_bytes;
    const int64_t K = w->k;
    if (w->lay.code_bits == 8) {
        int64_t inside = K - k0 < n ? K - k0 : n;
        memcpy(q, data + k0, (size_t)inside);
        if (inside < n) memset(q + inside, 0, (size_t)(n - inside));
    } else {
        int64_t i = 0;
        if (w->lay.code_bits == 4)
            for (; i + 32 <= n && k0 + i + 32 <= K; i += 32)
                _mm256_storeu_si256((__m256i *)(q + i), map_codes(&w->lay, nibbles_interleaved(data + (k0 + i) / 2)));
        if (w->lay.code_bits == 6 && k0 % 4 == 0)
            for (; i + 32 <= n && k0 + i + 32 <= K; i += 32)
                _mm256_storeu_si256((__m256i *)(q + i), map_codes6(&w->lay, data + (k0 + i) / 4 * 3));
        if (w->lay.code_bits == 2 && k0 % 4 == 0) {
            /* 8 bytes -> 32 codes, lowest bits first, sign-extended through a table */
            const __m128i m3 = _mm_set1_epi8(3), sext = _mm_setr_epi8(0, 1, -2, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
            for (; i + 32 <= n && k0 + i + 32 <= K; i += 32) {
                const __m128i x = _mm_loadl_epi64((const __m128i *)(data + (k0 + i) / 4));
                const __m128i a = _mm_unpacklo_epi8(_mm_and_si128(x, m3), _mm_and_si128(_mm_srli_epi64(x, 2), m3));
                const __m128i b = _mm_unpacklo_epi8(_mm_and_si128(_mm_srli_epi64(x, 4), m3),
                                                    _mm_and_si128(_mm_srli_epi64(x, 6), m3));
                _mm_storeu_si128((__m128i *)(q + i), _mm_shuffle_epi8(sext, _mm_unpacklo_epi16(a, b)));
                _mm_storeu_si128((__m128i *)(q + i + 16), _mm_shuffle_epi8(sext, _mm_unpackhi_epi16(a, b)));
            }
        }
        if (i < n) tops__ref_unpack_codes(w, row, k0 + i, n - i, q + i);
    }
    unpack_scales(w, row, k0, n, scale);
}

/* TOPS__IF_CODES with a bias plane (int4-gG-affine): the codes and scales
   as above, the mins by the scalar row (one per sub-block). */
static void unpack_codes_min(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale,
                             float *min) {
    unpack_codes(w, row, k0, n, q, scale);
    unpack_code_mins(w, row, k0, n, min);
}

/* A block's header scale: f16, or ggml mxfp4's e8m0 (core/numeric.h). */
static inline float block_scale(const tops__qweight *w, const uint8_t *blk) {
    if (w->lay.scale_enc == TOPS__SE_E8M0_HALF) return tops__e8m0_half_to_f32(blk[0]);
    uint16_t h;
    memcpy(&h, blk, 2);
    return _cvtsh_ss(h);
}

/* TOPS__IF_BLOCKS: whole blocks of 32 inside K (split nibbles through the
   map, or 32 i8), the scale (and q4_1's min -m) from the header. */
static tops__unpack_fn scalar_blocks;
static tops__unpack_min_fn scalar_blocks_min;
static void unpack_blocks_any(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale,
                              float *min) {
    const uint8_t *data = w->data + row * w->row_bytes;
    const int64_t K = w->k;
    int64_t i = 0;
    for (; i + 32 <= n && k0 + i + 32 <= K; i += 32) {
        const uint8_t *blk = data + ((k0 + i) / 32) * w->block_bytes, *codes = blk + w->lay.header;
        const __m256i v = w->lay.code_bits == 8 ? _mm256_loadu_si256((const __m256i *)codes)
                                                : map_codes(&w->lay, nibbles_split(codes));
        _mm256_storeu_si256((__m256i *)(q + i), v);
        scale[i / 32] = block_scale(w, blk) * w->mul;
        if (min) {
            uint16_t hm;
            memcpy(&hm, blk + 2, 2);
            min[i / 32] = -(_cvtsh_ss(hm) * w->mul);
        }
    }
    if (i < n) {
        if (min) scalar_blocks_min(w, row, k0 + i, n - i, q + i, scale + i / 32, min + i / 32);
        else scalar_blocks(w, row, k0 + i, n - i, q + i, scale + i / 32);
    }
}
static void unpack_blocks(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    unpack_blocks_any(w, row, k0, n, q, scale, NULL);
}
static void unpack_blocks_min(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale,
                              float *min) {
    unpack_blocks_any(w, row, k0, n, q, scale, min);
}

/* TOPS__IF_SUPER_SUBSCALE (iq4_xs: 256 in 136 bytes, a 6-bit sub-scale
   per 32): one vpshufb through the map; the scales as the scalar rows
   compute them (d * (ls - 32)). */
static tops__unpack_fn scalar_super_subscale;
static void unpack_super_subscale(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q,
                                  float *scale) {
    const uint8_t *data = w->data + row * w->row_bytes;
    const int64_t K = w->k;
    int64_t i = 0;
    for (; i + 32 <= n && k0 + i + 32 <= K; i += 32) {
        const int64_t kb = k0 + i;
        const uint8_t *blk = data + (kb / 256) * w->block_bytes;
        uint16_t h, hi;
        memcpy(&h, blk, 2);
        memcpy(&hi, blk + 2, 2);
        const int j = (int)(kb % 256) / 32;
        const float d = _cvtsh_ss(h) * (float)((((blk[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((hi >> (2 * j)) & 3) << 4)) - 32);
        _mm256_storeu_si256((__m256i *)(q + i), map_codes(&w->lay, nibbles_split(blk + 8 + 16 * j)));
        scale[i / 32] = d * w->mul;
    }
    if (i < n) scalar_super_subscale(w, row, k0 + i, n - i, q + i, scale + i / 32);
}

/* TOPS__IF_SUPER_6BIT (q6_K): 32 codes per step (two sub-blocks of 16): 32 consecutive elements
   of a super-block share one ql row (low nibbles or high) and one qh row
   (a 2-bit field), so two loads, shifts and masks give them; the scales
   d * sc as the scalar row computes them. */
static tops__unpack_fn scalar_super_6bit;
static void unpack_super_6bit(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    const uint8_t *data = w->data + row * w->row_bytes;
    const int64_t K = w->k;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
    int64_t i = 0;
    for (; i + 32 <= n && k0 + i + 32 <= K && (k0 + i) % 32 == 0; i += 32) {
        const int64_t kb = k0 + i;
        const uint8_t *blk = data + (kb / 256) * w->block_bytes;
        const int e = (int)(kb % 256), h = e / 128, s = (e % 128) / 32;
        __m256i lo = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32 * (s & 1)));
        lo = _mm256_and_si256(_mm256_srli_epi16(lo, 4 * (s >> 1)), m4);
        __m256i hi = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
        hi = _mm256_and_si256(_mm256_srli_epi16(hi, 2 * s), m2);
        const __m256i v = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), k32);
        _mm256_storeu_si256((__m256i *)(q + i), v);
        uint16_t hd;
        memcpy(&hd, blk + 208, 2);
        const float d = _cvtsh_ss(hd);
        scale[i / 16] = d * (float)(int8_t)blk[192 + e / 16] * w->mul;
        scale[i / 16 + 1] = d * (float)(int8_t)blk[192 + e / 16 + 1] * w->mul;
    }
    if (i < n) scalar_super_6bit(w, row, k0 + i, n - i, q + i, scale + i / 16);
}

/* q4_K / q5_K rows read in place (tops__dot_super_fn): vpmaddubsw takes q
   (0..31) as its unsigned operand against the signed codes. */
static inline __m256i dot_u8_s8(__m256i q, __m256i a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, a), _mm256_set1_epi16(1));
}
#define TOPS_KQ_DOT(q, a) dot_u8_s8(q, a)
#include "kernels/avx2/dot_min_body.h"
#undef TOPS_KQ_DOT

/* TOPS__IF_SUPER_MIN (q4_K / q5_K): a sub-block of 32 is one 32-byte row
   of qs (low or high nibbles) and, with the high bit plane (q5_K), bit j
   of the 32 qh bytes; scales and mins as the scalar rows compute them. */
static tops__unpack_min_fn scalar_super_min;
static void unpack_super_min(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale,
                             float *min) {
    const int five = w->lay.high_bit;
    const uint8_t *data = w->data + row * w->row_bytes;
    const int64_t K = w->k;
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    int64_t i = 0;
    /* Whole super-blocks: the eight scales and mins at once, in vectors. */
    for (; i + 256 <= n && k0 + i + 256 <= K && (k0 + i) % 256 == 0; i += 256) {
        const uint8_t *blk = data + ((k0 + i) / 256) * w->block_bytes;
        const uint8_t *qs = blk + (five ? TOPS__KQ_QS5 : TOPS__KQ_QS4);
        const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(blk + TOPS__KQ_QH)) : _mm256_setzero_si256();
        for (int r = 0; r < 4; r++) {
            __m256i lo, hi;
            kq_codes(qs, qh, r, five, &lo, &hi);
            _mm256_storeu_si256((__m256i *)(q + i + 64 * r), lo);
            _mm256_storeu_si256((__m256i *)(q + i + 64 * r + 32), hi);
        }
        uint64_t sc, m;
        tops__kquant_scales8(blk + TOPS__KQ_SCALES, &sc, &m);
        uint16_t hd, hm;
        memcpy(&hd, blk, 2);
        memcpy(&hm, blk + 2, 2);
        const __m256 vmul = _mm256_set1_ps(w->mul);
        const __m256 vsc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
        const __m256 vm = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m)));
        _mm256_storeu_ps(scale + i / 32, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(hd)), vsc), vmul));
        _mm256_storeu_ps(min + i / 32, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(hm)), vm), vmul));
    }
    for (; i + 32 <= n && k0 + i + 32 <= K; i += 32) {
        const int64_t kb = k0 + i;
        const uint8_t *blk = data + (kb / 256) * w->block_bytes;
        const int j = (int)(kb % 256) / 32;
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + (five ? TOPS__KQ_QS5 : TOPS__KQ_QS4) + 32 * (j / 2)));
        __m256i v = _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(4 * (j % 2))), m4);
        if (five) {
            const __m256i h = _mm256_loadu_si256((const __m256i *)(blk + TOPS__KQ_QH));
            v = _mm256_or_si256(v, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(j)), one), 4));
        }
        _mm256_storeu_si256((__m256i *)(q + i), v);
        int sc, m;
        tops__kquant_scale_min(blk + TOPS__KQ_SCALES, j, &sc, &m);
        uint16_t hd, hm;
        memcpy(&hd, blk, 2);
        memcpy(&hm, blk + 2, 2);
        scale[i / 32] = _cvtsh_ss(hd) * (float)sc * w->mul;
        min[i / 32] = _cvtsh_ss(hm) * (float)m * w->mul;
    }
    if (i < n) scalar_super_min(w, row, k0 + i, n - i, q + i, scale + i / 32, min + i / 32);
}

/* TOPS__IF_BLOCKS scales from the headers: F16C, or 2^(e-128) by bits
   for ggml's mxfp4 (the same values as the scalar rows). */
static void blocks_scales(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *scale) {
    const uint8_t *blk = w->data + row * w->row_bytes + (k0 / 32) * w->block_bytes;
    for (int64_t b = 0; b < n / 32; b++, blk += w->block_bytes) scale[b] = block_scale(w, blk) * w->mul;
}

/* iq4_xs's sub-block scales (kernels/ref/kquant.h's values): whole
   super-blocks eight at a time, (d * ls) * mul with ls = low nibble | two
   high bits << 4, less 32; the rest by the scalar row, d by F16C. */
static float f16c_value(uint16_t h) { return _cvtsh_ss(h); }
static void subscale_scales(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *scale) {
    const uint8_t *data = w->data + row * w->row_bytes;
    const __m256i sh4 = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), sh2 = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256 mul = _mm256_set1_ps(w->mul);
    int64_t b = 0;
    if (k0 % 256 == 0)
        for (; b + 8 <= n / 32 && k0 + b * 32 + 256 <= w->k; b += 8) {
            const uint8_t *blk = data + ((k0 + b * 32) / 256) * w->block_bytes;
            uint16_t h, hi;
            uint32_t lo;
            memcpy(&h, blk, 2);
            memcpy(&hi, blk + 2, 2);
            memcpy(&lo, blk + 4, 4);
            const __m256i l4 = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)lo), sh4), _mm256_set1_epi32(15));
            const __m256i h2 = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(hi), sh2), _mm256_set1_epi32(3));
            const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(l4, _mm256_slli_epi32(h2, 4)), _mm256_set1_epi32(32));
            const __m256 dl = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h)), _mm256_cvtepi32_ps(ls));
            _mm256_storeu_ps(scale + b, _mm256_mul_ps(dl, mul));
        }
    if (b < n / 32)
        tops__subscale_scales(data, w->block_bytes, w->k, k0 + b * 32, n - b * 32, w->mul, scale + b, f16c_value);
}

/* Mins of blocks with an f16 min at byte 2 (q4_1): -(m * mul), as the scalar row. */
static void blocks_mins(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *min) {
    const uint8_t *blk = w->data + row * w->row_bytes + (k0 / 32) * w->block_bytes;
    for (int64_t b = 0; b < n / 32; b++, blk += w->block_bytes) {
        uint16_t h;
        if (k0 + b * 32 >= w->k) { /* past K: nothing read */
            min[b] = 0.0f;
            continue;
        }
        memcpy(&h, blk + 2, 2);
        min[b] = -(_cvtsh_ss(h) * w->mul);
    }
}

void tops__avx2_fill_unpackers(tops__form_kernels *table) {
    for (int e = 0; e < 256; e++) /* 2^(e-127); 0xFF is NaN (FORMATS.md) */
        e8m0_table[e] = e == 255 ? tops__bits_f32(0x7fc00000u)
                                 : tops__bits_f32(e ? (uint32_t)e << 23 : 0x00400000u);
    for (int c = 0; c < 256; c++) ue4m3_table[c] = tops__ue4m3_to_f32((uint32_t)c);
    /* the table holds the scalar rows on entry: they serve the tails */
    scalar_blocks = table[TOPS__IF_BLOCKS].run;
    scalar_blocks_min = table[TOPS__IF_BLOCKS].run_min;
    scalar_super_min = table[TOPS__IF_SUPER_MIN].run_min;
    scalar_super_6bit = table[TOPS__IF_SUPER_6BIT].run;
    scalar_super_subscale = table[TOPS__IF_SUPER_SUBSCALE].run;
    table[TOPS__IF_CODES] = (tops__form_kernels){.run = unpack_codes, .run_min = unpack_codes_min,
                                                 .dot_super = NULL, .scales = unpack_scales,
                                                 .mins = unpack_code_mins};
    table[TOPS__IF_BLOCKS] = (tops__form_kernels){.run = unpack_blocks, .run_min = unpack_blocks_min,
                                                  .dot_super = NULL, .scales = blocks_scales,
                                                  .mins = blocks_mins};
    table[TOPS__IF_SUPER_MIN].run_min = unpack_super_min;
    table[TOPS__IF_SUPER_MIN].dot_super = kq_dot_min_super;
    table[TOPS__IF_SUPER_MIN].dot_super_f32 = NULL; /* AVX-512 has one; the scalar one loses to the decoded rows */
    table[TOPS__IF_SUPER_6BIT].run = unpack_super_6bit;
    /* no 256-bit in-place q6_K dot: its unpacked rows beat the scalar one */
    table[TOPS__IF_SUPER_6BIT].dot_super = NULL;
    table[TOPS__IF_SUPER_6BIT].dot_super_f32 = NULL; /* AVX-512 has one */
    table[TOPS__IF_SUPER_SUBSCALE].dot_super = NULL; /* VNNI has one (vpdpbusd takes the codebook's q + 127) */
    table[TOPS__IF_SUPER_SUBSCALE].run = unpack_super_subscale;
    table[TOPS__IF_SUPER_SUBSCALE].scales = subscale_scales;
}

/* Eight codes per step: a variable shift spreads four bytes' nibbles over
   eight lanes, two vpermps look both table halves up, a blend picks. */
void tops__avx2_lut16_row(float *dst, const uint8_t *src, int64_t n, const float *table) {
    const __m256 lo = _mm256_loadu_ps(table), hi = _mm256_loadu_ps(table + 8);
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), mask = _mm256_set1_epi32(0xF);
    const __m256i seven = _mm256_set1_epi32(7);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint32_t w;
        memcpy(&w, src + i / 2, 4);
        __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), shifts), mask);
        __m256 upper = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, seven));
        _mm256_storeu_ps(dst + i, _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx),
                                                   _mm256_permutevar8x32_ps(hi, idx), upper));
    }
    if (i < n) tops__ref_lut16_row(dst + i, src + i / 2, n - i, table);
}
