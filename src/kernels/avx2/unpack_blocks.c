/* AVX2 integer forms of the common quantized formats and the dot products
   over them.  Same integers and scales as the scalar unpackers (which
   still serve partial blocks at the end of K). */
#include "cpu/dispatch.h"
#include "kernels/ref/scalar_casts.h"

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
static inline __m256i i4_to_i8(__m256i v) { /* sign-extend 4-bit codes */
    __m256i eight = _mm256_set1_epi8(8);
    return _mm256_sub_epi8(_mm256_xor_si256(v, eight), eight);
}
static inline __m256i e2m1_doubled(__m256i v) {
    const __m256i lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4, 6,
                                         8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    return _mm256_shuffle_epi8(lut, v);
}

/* Scales of the element-plane formats.  Fast cases: f16 planes read
   8 at a time with F16C, e8m0 through a 256-entry table; the rest (and
   any tail beyond K) by the scalar row. */
static float e8m0_table[256];
static void unpack_scales(const tops_tensor *t, int64_t row, int64_t k0, int64_t n, float *scale) {
    const tops_format_info *info = tops_format_get_info(t->format.id);
    const tops_plane *p = &t->scales;
    const int sub = tops__unpack_sub(t);
    const int64_t block = info->block > 1 ? t->format.group : 32, K = t->extent[1];
    if (!p->data || block != sub || k0 + n > K || (p->dtype != TOPS_DT_F16 && p->dtype != TOPS_DT_E8M0)) {
        tops__ref_unpack_scales(t, row, k0, n, scale);
        return;
    }
    float unit = info->element == TOPS_DT_E2M1 ? 0.5f : info->element == TOPS_DT_MXINT8 ? 0.015625f : 1.0f;
    float mul = unit * (info->has_tensor_scale ? 1.0f / t->tensor_scale : t->tensor_scale);
    const int64_t nb = n / sub, s1 = p->stride[1];
    if (p->dtype == TOPS_DT_F16) {
        const uint16_t *h = (const uint16_t *)p->data + row * p->stride[0] + (k0 / sub) * s1;
        int64_t b = 0;
        if (s1 == 1)
            for (; b + 8 <= nb; b += 8)
                _mm256_storeu_ps(scale + b, _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + b))),
                                                          _mm256_set1_ps(mul)));
        for (; b < nb; b++) scale[b] = _cvtsh_ss(h[b * s1]) * mul;
    } else {
        const uint8_t *e = (const uint8_t *)p->data + row * p->stride[0] + (k0 / sub) * s1;
        for (int64_t b = 0; b < nb; b++) scale[b] = e8m0_table[e[b * s1]] * mul;
    }
}

/* Element-plane 4-bit formats (i4 groups, e2m1 MX/nvfp4): whole vectors of
   32 inside K, the scalar unpacker for the rest. */
static void unpack_4bit(const tops_tensor *t, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale, int fp4) {
    const uint8_t *data = tops__weight_row(t, row);
    const int64_t K = t->extent[1];
    int64_t i = 0;
    for (; i + 32 <= n && k0 + i + 32 <= K; i += 32) {
        __m256i v = nibbles_interleaved(data + (k0 + i) / 2);
        _mm256_storeu_si256((__m256i *)(q + i), fp4 ? e2m1_doubled(v) : i4_to_i8(v));
    }
    if (i < n) tops__ref_unpack_codes(t, row, k0 + i, n - i, q + i);
    unpack_scales(t, row, k0, n, scale);
}
static void unpack_i4(const tops_tensor *t, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    unpack_4bit(t, row, k0, n, q, scale, 0);
}
static void unpack_e2m1(const tops_tensor *t, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    unpack_4bit(t, row, k0, n, q, scale, 1);
}
static void unpack_i8(const tops_tensor *t, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    const int64_t K = t->extent[1];
    int64_t inside = K - k0 < n ? K - k0 : n;
    memcpy(q, tops__weight_row(t, row) + k0, (size_t)inside);
    if (inside < n) memset(q + inside, 0, (size_t)(n - inside));
    unpack_scales(t, row, k0, n, scale);
}

/* GGUF blocks: kind 0 q4_0, 1 q8_0, 2 ggml mxfp4. */
static void unpack_gguf(const tops_tensor *t, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale, int kind,
                        tops__unpack_fn scalar) {
    const tops_format_info *info = tops_format_get_info(t->format.id);
    const uint8_t *data = tops__weight_row(t, row);
    const int64_t K = t->extent[1];
    int64_t i = 0;
    for (; i + 32 <= n && k0 + i + 32 <= K; i += 32) {
        const uint8_t *blk = data + ((k0 + i) / 32) * info->pack_bytes;
        __m256i v;
        if (kind == 0) v = _mm256_sub_epi8(nibbles_split(blk + 2), _mm256_set1_epi8(8));
        else if (kind == 1) v = _mm256_loadu_si256((const __m256i *)(blk + 2));
        else v = e2m1_doubled(nibbles_split(blk + 1));
        _mm256_storeu_si256((__m256i *)(q + i), v);
        if (kind == 2) {
            /* 2^(e - 128), exact for every e (e = 0 is subnormal). */
            int e = blk[0];
            uint32_t bits = e >= 2 ? (uint32_t)(e - 1) << 23 : 1u << (21 + e);
            scale[i / 32] = tops__bits_f32(bits) * t->tensor_scale;
        } else {
            uint16_t h;
            memcpy(&h, blk, 2);
            scale[i / 32] = _cvtsh_ss(h) * t->tensor_scale;
        }
    }
    if (i < n) scalar(t, row, k0 + i, n - i, q + i, scale + i / 32);
}

static tops__unpack_fn scalar_q4_0, scalar_q8_0, scalar_mxfp4;
static void unpack_q4_0(const tops_tensor *t, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    unpack_gguf(t, row, k0, n, q, scale, 0, scalar_q4_0);
}
static void unpack_q8_0(const tops_tensor *t, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    unpack_gguf(t, row, k0, n, q, scale, 1, scalar_q8_0);
}
static void unpack_gguf_mxfp4(const tops_tensor *t, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    unpack_gguf(t, row, k0, n, q, scale, 2, scalar_mxfp4);
}

void tops__avx2_fill_unpackers(tops__unpacker *table) {
    for (int e = 0; e < 256; e++) /* 2^(e-127); 0xFF is NaN (FORMATS.md) */
        e8m0_table[e] = e == 255 ? tops__bits_f32(0x7fc00000u)
                                 : tops__bits_f32(e ? (uint32_t)e << 23 : 0x00400000u);
    scalar_q4_0 = table[TOPS_FMT_Q4_0].run; /* table holds the scalar row on entry */
    scalar_q8_0 = table[TOPS_FMT_Q8_0].run;
    scalar_mxfp4 = table[TOPS_FMT_GGUF_MXFP4].run;
    table[TOPS_FMT_I4].run = unpack_i4;
    table[TOPS_FMT_INT4_G].run = unpack_i4;
    table[TOPS_FMT_MXFP4].run = unpack_e2m1;
    table[TOPS_FMT_NVFP4].run = unpack_e2m1;
    table[TOPS_FMT_I8].run = unpack_i8;
    table[TOPS_FMT_INT8_G].run = unpack_i8;
    table[TOPS_FMT_MXINT8].run = unpack_i8;
    table[TOPS_FMT_Q4_0].run = unpack_q4_0;
    table[TOPS_FMT_Q8_0].run = unpack_q8_0;
    table[TOPS_FMT_GGUF_MXFP4].run = unpack_gguf_mxfp4;
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256 i8x8_to_f32(const int8_t *q) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q)));
}

float tops__avx2_dot_f32_q8(const float *a, const int8_t *q, const float *scale, int64_t n, int sub) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / sub; b++) {
        const float *ab = a + b * sub;
        const int8_t *qb = q + b * sub;
        __m256 s0 = _mm256_mul_ps(_mm256_loadu_ps(ab), i8x8_to_f32(qb));
        __m256 s1 = _mm256_mul_ps(_mm256_loadu_ps(ab + 8), i8x8_to_f32(qb + 8));
        for (int j = 16; j < sub; j += 16) {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(ab + j), i8x8_to_f32(qb + j), s0);
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(ab + j + 8), i8x8_to_f32(qb + j + 8), s1);
        }
        acc = _mm256_fmadd_ps(_mm256_add_ps(s0, s1), _mm256_set1_ps(scale[b]), acc);
    }
    return hsum(acc);
}

/* Signed i8 x i8 via vpmaddubsw: |q| as the unsigned side, q's sign moved
   onto the activations (|q| <= 128 and |aq| <= 127 cannot saturate). */
static inline __m256i dot_i8x32(__m256i aq, __m256i q) {
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(aq, q));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

float tops__avx2_dot_q8_q8(const int8_t *aq, const float *ascale, const int8_t *q, const float *scale, int64_t n,
                           int sub) {
    __m256 acc = _mm256_setzero_ps();
    if (sub == 32) {
        for (int64_t b = 0; b < n / 32; b++) {
            __m256i d = dot_i8x32(_mm256_loadu_si256((const __m256i *)(aq + b * 32)),
                                  _mm256_loadu_si256((const __m256i *)(q + b * 32)));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(ascale[b] * scale[b]), acc);
        }
    } else { /* sub 16: lanes 0-3 hold block b, lanes 4-7 block b + 1 */
        for (int64_t b = 0; b < n / 16; b += 2) {
            __m256i d = dot_i8x32(_mm256_loadu_si256((const __m256i *)(aq + b * 16)),
                                  _mm256_loadu_si256((const __m256i *)(q + b * 16)));
            __m256 s = _mm256_set_m128(_mm_set1_ps(ascale[b + 1] * scale[b + 1]), _mm_set1_ps(ascale[b] * scale[b]));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), s, acc);
        }
    }
    return hsum(acc);
}

void tops__avx2_quantize_q8(const float *a, int64_t n, int sub, int8_t *aq, float *ascale) {
    if (sub % 16 != 0) {
        tops__ref_quantize_q8(a, n, sub, aq, ascale);
        return;
    }
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t b = 0; b < n / sub; b++) {
        const float *x = a + b * sub;
        __m256 mx = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
        for (int j = 0; j < sub; j += 8) {
            __m256 v = _mm256_loadu_ps(x + j);
            mx = _mm256_max_ps(mx, _mm256_and_ps(v, abs_mask));
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
        if (!_mm256_testz_ps(nan, nan)) { /* the scalar row owns the NaN rule */
            tops__ref_quantize_q8(x, sub, sub, aq + b * sub, ascale + b);
            continue;
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        float d = amax / 127.0f, inv = amax > 0.0f && amax <= 3.4e38f ? 127.0f / amax : 0.0f;
        __m256 vinv = _mm256_set1_ps(inv);
        for (int j = 0; j < sub; j += 16) {
            __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j), vinv));
            __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8), vinv));
            __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(i0, i1), 0xD8); /* 16 x i16 in order */
            __m128i bytes = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
            _mm_storeu_si128((__m128i *)(aq + b * sub + j), bytes);
        }
        ascale[b] = d;
    }
}
