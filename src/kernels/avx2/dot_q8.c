/* AVX2 dot products of the matmul row driver and the relaxed activation
   quantizer: f32 x f32, f32 x integer form, i8 x integer form, 4-bit
   layouts read in place; and the integer form's dequantization. */
#include "cpu/dispatch.h"

#include <immintrin.h>
#include <string.h>

/* Bytes ahead per weight row stream in the four-row nibble dots: of 0, 512,
   1024, 2048 and 4096, 512 gave the lowest times at M = 1 with one thread
   (on a loaded VM: not tuned at two threads). */
enum { NIB_PREFETCH = 512 };
/* Bytes ahead in the row stream (one stream per four rows): of none, 512,
   1024, 2048 and 4096, 2048 gave the lowest medians at M = 1, 2 threads
   (noisy shared VM: none and 4096 within 10%). */
enum { NIBSTREAM_PREFETCH = 2048 };

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

/* Four rows: each 8 activations load once for the four rows; per row two
   partial sums (even and odd 8) keep the FMA chains short, and the block
   scale applies once per block. */
void tops__avx2_dot_f32_q8_x4(const float *a, const int8_t *q, int64_t ldq, const float *scale, int64_t ld_scale,
                              int64_t n, int sub, float *out) {
    if (sub % 16 != 0) {
        for (int r = 0; r < 4; r++) out[r] = tops__avx2_dot_f32_q8(a, q + r * ldq, scale + r * ld_scale, n, sub);
        return;
    }
    const int8_t *q0 = q, *q1 = q + ldq, *q2 = q + 2 * ldq, *q3 = q + 3 * ldq;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    for (int64_t b = 0; b < n / sub; b++) {
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, t0 = s0, t1 = s0, t2 = s0, t3 = s0;
        for (int64_t j = b * sub; j < (b + 1) * sub; j += 16) {
            const __m256 x = _mm256_loadu_ps(a + j), y = _mm256_loadu_ps(a + j + 8);
            s0 = _mm256_fmadd_ps(x, i8x8_to_f32(q0 + j), s0);
            s1 = _mm256_fmadd_ps(x, i8x8_to_f32(q1 + j), s1);
            s2 = _mm256_fmadd_ps(x, i8x8_to_f32(q2 + j), s2);
            s3 = _mm256_fmadd_ps(x, i8x8_to_f32(q3 + j), s3);
            t0 = _mm256_fmadd_ps(y, i8x8_to_f32(q0 + j + 8), t0);
            t1 = _mm256_fmadd_ps(y, i8x8_to_f32(q1 + j + 8), t1);
            t2 = _mm256_fmadd_ps(y, i8x8_to_f32(q2 + j + 8), t2);
            t3 = _mm256_fmadd_ps(y, i8x8_to_f32(q3 + j + 8), t3);
        }
        acc0 = _mm256_fmadd_ps(_mm256_add_ps(s0, t0), _mm256_set1_ps(scale[b]), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_add_ps(s1, t1), _mm256_set1_ps(scale[ld_scale + b]), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_add_ps(s2, t2), _mm256_set1_ps(scale[2 * ld_scale + b]), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_add_ps(s3, t3), _mm256_set1_ps(scale[3 * ld_scale + b]), acc3);
    }
    out[0] = hsum(acc0);
    out[1] = hsum(acc1);
    out[2] = hsum(acc2);
    out[3] = hsum(acc3);
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

void tops__avx2_dequant_q8(const int8_t *q, const float *scale, int64_t n, int sub, float *out) {
    if (sub % 8 != 0) {
        tops__ref_dequant_q8(q, scale, n, sub, out);
        return;
    }
    for (int64_t b = 0; b < n / sub; b++) {
        __m256 s = _mm256_set1_ps(scale[b]);
        for (int j = 0; j < sub; j += 8)
            _mm256_storeu_ps(out + b * sub + j, _mm256_mul_ps(i8x8_to_f32(q + b * sub + j), s));
    }
}

float tops__avx2_dot_f32(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float acc = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) acc += a[i] * b[i];
    return acc;
}

/* Per block: 16 nibble bytes -> [low nibbles | high nibbles] (one variable
   shift of the upper lane), codes -> q + offset by vpshufb, then one
   vpmaddubsw against the 32 activations.  Scale products go 8 blocks at a
   time, with the offset correction folded in as one fma per 8 blocks. */
float tops__avx2_dot_q8_nibbles(const uint8_t *blocks, const tops__nibble_layout *layout, const int8_t *aq,
                                const float *as, const float *acorr, const float *ws, int64_t nb) {
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)layout->lut));
    const __m256i mask = _mm256_set1_epi8(0x0F), shifts = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    const __m256i ones = _mm256_set1_epi16(1);
    const int64_t stride = layout->block_bytes;
    const uint8_t *nib = blocks + layout->header;
    __m256 acc = _mm256_setzero_ps(), corr = _mm256_setzero_ps();
    float sc[8];
    int64_t b = 0;
    for (; b < nb; b += 8) {
        const int64_t group = nb - b < 8 ? nb - b : 8;
        if (group == 8) {
            __m256 s8 = _mm256_mul_ps(_mm256_loadu_ps(ws + b), _mm256_loadu_ps(as + b));
            corr = _mm256_fmadd_ps(_mm256_loadu_ps(acorr + b), s8, corr);
            _mm256_storeu_ps(sc, s8);
        } else {
            float c = 0.0f;
            for (int64_t i = 0; i < group; i++) {
                sc[i] = ws[b + i] * as[b + i];
                c += acorr[b + i] * sc[i];
            }
            corr = _mm256_add_ps(corr, _mm256_setr_ps(c, 0, 0, 0, 0, 0, 0, 0));
        }
        for (int64_t i = 0; i < group; i++) {
            const uint8_t *p = nib + (b + i) * stride;
            __m256i x = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
            x = _mm256_and_si256(_mm256_srlv_epi32(x, shifts), mask);
            __m256i w = _mm256_shuffle_epi8(lut, x);
            __m256i d = _mm256_madd_epi16(_mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)(aq + (b + i) * 32))), ones);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(sc[i]), acc);
        }
    }
    return hsum(_mm256_sub_ps(acc, corr));
}

void tops__avx2_dot_f32_x4(const float *a, const float *b, int64_t ldb, int64_t n, float *out) {
    const float *b0 = b, *b1 = b + ldb, *b2 = b + 2 * ldb, *b3 = b + 3 * ldb;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, t0 = s0, t1 = s0, t2 = s0, t3 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x = _mm256_loadu_ps(a + i), y = _mm256_loadu_ps(a + i + 8);
        s0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b0 + i), s0);
        s1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b1 + i), s1);
        s2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b2 + i), s2);
        s3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b3 + i), s3);
        t0 = _mm256_fmadd_ps(y, _mm256_loadu_ps(b0 + i + 8), t0);
        t1 = _mm256_fmadd_ps(y, _mm256_loadu_ps(b1 + i + 8), t1);
        t2 = _mm256_fmadd_ps(y, _mm256_loadu_ps(b2 + i + 8), t2);
        t3 = _mm256_fmadd_ps(y, _mm256_loadu_ps(b3 + i + 8), t3);
    }
    out[0] = hsum(_mm256_add_ps(s0, t0));
    out[1] = hsum(_mm256_add_ps(s1, t1));
    out[2] = hsum(_mm256_add_ps(s2, t2));
    out[3] = hsum(_mm256_add_ps(s3, t3));
    for (; i < n; i++) {
        out[0] += a[i] * b0[i];
        out[1] += a[i] * b1[i];
        out[2] += a[i] * b2[i];
        out[3] += a[i] * b3[i];
    }
}

/* Four rows in one pass, two blocks per step: the 32 code bytes of blocks
   b and b + 1 form one vector, whose low nibbles meet [b's first 16
   activations | b + 1's] and whose high nibbles meet [b's last 16 | b + 1's]
   (two vpmaddubsw added in i16: at most 2 * 2 * 24 * 127 = 12192, no
   saturation); lanes 0-3 of the vpmaddwd sums then belong to block b and
   4-7 to b + 1, scaled by [s_b x 4 | s_b+1 x 4].  Per row and block pair:
   one and, one shift, two table lookups, two vpmaddubsw, one add, one
   vpmaddwd, one convert and one FMA (the single-block step cost about 1.6x
   that per block).  The four rows share the activation loads; the scale
   products are made 8 blocks at a time. */
void tops__avx2_dot_q8_nibbles_x4(const uint8_t *blocks, int64_t row_bytes, const tops__nibble_layout *layout,
                                  const int8_t *aq, const float *as, const float *acorr, const float *ws, int64_t ld_ws,
                                  int64_t nb, float *out) {
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)layout->lut));
    const __m256i mask = _mm256_set1_epi8(0x0F), shifts = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    const __m256i ones = _mm256_set1_epi16(1);
    const int64_t stride = layout->block_bytes;
    const uint8_t *p0 = blocks + layout->header, *p1 = p0 + row_bytes, *p2 = p1 + row_bytes, *p3 = p2 + row_bytes;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    __m256 cor0 = acc0, cor1 = acc0, cor2 = acc0, cor3 = acc0;
    float sc[4][8];
    float sp[4][4][8]; /* per row, per block pair: [s_b x 4 | s_b+1 x 4] */
    for (int64_t b = 0; b < nb; b += 8) {
        const int64_t group = nb - b < 8 ? nb - b : 8;
        if (group == 8) {
            const __m256 a8 = _mm256_loadu_ps(as + b), c8 = _mm256_loadu_ps(acorr + b);
            const __m256i pair0 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), two = _mm256_set1_epi32(2);
#define TOPS_SCALES(r, cor)                                                                        \
    do {                                                                                           \
        const __m256 s8 = _mm256_mul_ps(_mm256_loadu_ps(ws + (r) * ld_ws + b), a8);                \
        cor = _mm256_fmadd_ps(c8, s8, cor);                                                        \
        __m256i idx = pair0;                                                                       \
        for (int k = 0; k < 4; k++, idx = _mm256_add_epi32(idx, two))                              \
            _mm256_storeu_ps(sp[r][k], _mm256_permutevar8x32_ps(s8, idx));                         \
    } while (0)
            TOPS_SCALES(0, cor0);
            TOPS_SCALES(1, cor1);
            TOPS_SCALES(2, cor2);
            TOPS_SCALES(3, cor3);
#undef TOPS_SCALES
        } else {
            float c[4] = {0, 0, 0, 0};
            for (int r = 0; r < 4; r++)
                for (int64_t i = 0; i < group; i++) {
                    sc[r][i] = ws[r * ld_ws + b + i] * as[b + i];
                    c[r] += acorr[b + i] * sc[r][i];
                    for (int l = 0; l < 4; l++) sp[r][i / 2][(i % 2) * 4 + l] = sc[r][i];
                }
            cor0 = _mm256_add_ps(cor0, _mm256_setr_ps(c[0], 0, 0, 0, 0, 0, 0, 0));
            cor1 = _mm256_add_ps(cor1, _mm256_setr_ps(c[1], 0, 0, 0, 0, 0, 0, 0));
            cor2 = _mm256_add_ps(cor2, _mm256_setr_ps(c[2], 0, 0, 0, 0, 0, 0, 0));
            cor3 = _mm256_add_ps(cor3, _mm256_setr_ps(c[3], 0, 0, 0, 0, 0, 0, 0));
        }
        /* Each row's stream a fixed distance ahead, spread over the blocks
           (past a chunk this is the row's next chunk, past the row the
           next rows: the weights are read once, in order). */
        for (int64_t o = b * stride; o < (b + group) * stride; o += 64) {
            _mm_prefetch((const char *)(p0 + o + NIB_PREFETCH), _MM_HINT_T0);
            _mm_prefetch((const char *)(p1 + o + NIB_PREFETCH), _MM_HINT_T0);
            _mm_prefetch((const char *)(p2 + o + NIB_PREFETCH), _MM_HINT_T0);
            _mm_prefetch((const char *)(p3 + o + NIB_PREFETCH), _MM_HINT_T0);
        }
        int64_t i = 0;
        for (; i + 2 <= group; i += 2) {
            const int64_t off = (b + i) * stride;
            const __m256i a0 = _mm256_loadu_si256((const __m256i *)(aq + (b + i) * 32));
            const __m256i a1 = _mm256_loadu_si256((const __m256i *)(aq + (b + i) * 32 + 32));
            const __m256i alo = _mm256_permute2x128_si256(a0, a1, 0x20), ahi = _mm256_permute2x128_si256(a0, a1, 0x31);
#define TOPS_PAIR(p, r, acc)                                                                             \
    do {                                                                                                 \
        const __m256i x = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)((p) + off))), \
                                                  _mm_loadu_si128((const __m128i *)((p) + off + stride)), 1); \
        const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(x, mask));                         \
        const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(x, 4), mask));    \
        const __m256i d = _mm256_madd_epi16(                                                             \
            _mm256_add_epi16(_mm256_maddubs_epi16(lo, alo), _mm256_maddubs_epi16(hi, ahi)), ones);       \
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_loadu_ps(sp[r][i / 2]), acc);               \
    } while (0)
            TOPS_PAIR(p0, 0, acc0);
            TOPS_PAIR(p1, 1, acc1);
            TOPS_PAIR(p2, 2, acc2);
            TOPS_PAIR(p3, 3, acc3);
#undef TOPS_PAIR
        }
        if (i < group) { /* an odd last block: one block per step, its scale in every lane */
            const int64_t off = (b + i) * stride;
            const __m256i a = _mm256_loadu_si256((const __m256i *)(aq + (b + i) * 32));
#define TOPS_ROW(p, r, acc)                                                                              \
    do {                                                                                                 \
        __m256i x = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)((p) + off)));         \
        x = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srlv_epi32(x, shifts), mask));              \
        const __m256i d = _mm256_madd_epi16(_mm256_maddubs_epi16(x, a), ones);                           \
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(sp[r][i / 2][0]), acc);              \
    } while (0)
            TOPS_ROW(p0, 0, acc0);
            TOPS_ROW(p1, 1, acc1);
            TOPS_ROW(p2, 2, acc2);
            TOPS_ROW(p3, 3, acc3);
#undef TOPS_ROW
        }
    }
    out[0] = hsum(_mm256_sub_ps(acc0, cor0));
    out[1] = hsum(_mm256_sub_ps(acc1, cor1));
    out[2] = hsum(_mm256_sub_ps(acc2, cor2));
    out[3] = hsum(_mm256_sub_ps(acc3, cor3));
}

/* The row stream's step, up to 8 blocks from b: the arithmetic of
   tops__avx2_dot_q8_nibbles_x4, in its order (the same bits, tested),
   over the stream's addresses: w[r] holds row r's 8 f32 weight scales, q[r]
   its first block pair, pair i / 2 one 32-byte load at q[r] + 128 * (i / 2).
   With `coded` the nibbles hold q + offset already, so no table lookup.
   (One inlined step shared with the plain kernel cost the plain rows 7%,
   0.99 -> 1.07 ns per block-row cache-resident, so that one keeps its own.) */
static inline __attribute__((always_inline)) void nibstream_step(const float *const w[4], const uint8_t *const q[4],
                                                                 int coded, const int8_t *aq, const float *as,
                                                                 const float *acorr, int64_t group, __m256i lut,
                                                                 __m256 acc[4], __m256 cor[4]) {
    const __m256i mask = _mm256_set1_epi8(0x0F), shifts = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    const __m256i ones = _mm256_set1_epi16(1);
    float sp[4][4][8]; /* per row, per block pair: [s_b x 4 | s_b+1 x 4] */
    if (group == 8) {
        const __m256 a8 = _mm256_loadu_ps(as), c8 = _mm256_loadu_ps(acorr);
        const __m256i pair0 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), two = _mm256_set1_epi32(2);
        for (int r = 0; r < 4; r++) {
            const __m256 s8 = _mm256_mul_ps(_mm256_loadu_ps(w[r]), a8);
            cor[r] = _mm256_fmadd_ps(c8, s8, cor[r]);
            __m256i idx = pair0;
            for (int k = 0; k < 4; k++, idx = _mm256_add_epi32(idx, two))
                _mm256_storeu_ps(sp[r][k], _mm256_permutevar8x32_ps(s8, idx));
        }
    } else {
        for (int r = 0; r < 4; r++) {
            float c = 0.0f;
            for (int64_t i = 0; i < group; i++) {
                const float sc = w[r][i] * as[i];
                c += acorr[i] * sc;
                for (int l = 0; l < 4; l++) sp[r][i / 2][(i % 2) * 4 + l] = sc;
            }
            cor[r] = _mm256_add_ps(cor[r], _mm256_setr_ps(c, 0, 0, 0, 0, 0, 0, 0));
        }
    }
    int64_t i = 0;
    for (; i + 2 <= group; i += 2) {
        const int64_t off = (i / 2) * 128;
        const __m256i a0 = _mm256_loadu_si256((const __m256i *)(aq + i * 32));
        const __m256i a1 = _mm256_loadu_si256((const __m256i *)(aq + i * 32 + 32));
        const __m256i alo = _mm256_permute2x128_si256(a0, a1, 0x20), ahi = _mm256_permute2x128_si256(a0, a1, 0x31);
        for (int r = 0; r < 4; r++) {
            const __m256i x = _mm256_loadu_si256((const __m256i *)(q[r] + off));
            __m256i lo = _mm256_and_si256(x, mask), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), mask);
            if (!coded) {
                lo = _mm256_shuffle_epi8(lut, lo);
                hi = _mm256_shuffle_epi8(lut, hi);
            }
            const __m256i d =
                _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, alo), _mm256_maddubs_epi16(hi, ahi)), ones);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_loadu_ps(sp[r][i / 2]), acc[r]);
        }
    }
    if (i < group) { /* an odd last block: one block per step, its scale in every lane */
        const int64_t off = (i / 2) * 128;
        const __m256i a = _mm256_loadu_si256((const __m256i *)(aq + i * 32));
        for (int r = 0; r < 4; r++) {
            __m256i x = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(q[r] + off)));
            x = _mm256_and_si256(_mm256_srlv_epi32(x, shifts), mask);
            if (!coded) x = _mm256_shuffle_epi8(lut, x);
            const __m256i d = _mm256_madd_epi16(_mm256_maddubs_epi16(x, a), ones);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(sp[r][i / 2][0]), acc[r]);
        }
    }
}

/* The row stream's twin: one linear stream per four rows (the hardware
   prefetcher follows one stream, not four), the stored scales of each
   super-block decoded 8 at a time (F16C, or e8m0 bits: 2^(e - 127), e = 0
   the subnormal 2^-127, 255 NaN, as the unpackers' table). */
void tops__avx2_dot_q8_nibstream_x4(const uint8_t *stream, const tops__nibble_layout *layout, int scale_bytes,
                                    int coded, float mul, const int8_t *aq, const float *as, const float *acorr, int64_t nb,
                                    float *out) {
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)layout->lut));
    const int64_t sb_bytes = tops__nibstream_sb_bytes(scale_bytes), scale_span = 4 * 8 * (int64_t)scale_bytes;
    const __m256 vmul = _mm256_set1_ps(mul);
    __m256 acc[4], cor[4];
    for (int r = 0; r < 4; r++) acc[r] = cor[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b += 8) {
        const uint8_t *sb = stream + (b / 8) * sb_bytes;
        const int64_t group = nb - b < 8 ? nb - b : 8;
        for (int64_t o = 0; o < sb_bytes; o += 64) _mm_prefetch((const char *)(sb + o + NIBSTREAM_PREFETCH), _MM_HINT_T0);
        float ws[4][8];
        for (int r = 0; r < 4; r++) {
            __m256 s;
            if (scale_bytes == 2) {
                s = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sb + r * 16)));
            } else {
                const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sb + r * 8)));
                __m256i bits = _mm256_slli_epi32(e, 23);
                bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x00400000), _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
                bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7fc00000), _mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)));
                s = _mm256_castsi256_ps(bits);
            }
            _mm256_storeu_ps(ws[r], _mm256_mul_ps(s, vmul));
        }
        const float *w[4] = {ws[0], ws[1], ws[2], ws[3]};
        const uint8_t *nib = sb + scale_span;
        const uint8_t *q[4] = {nib, nib + 32, nib + 64, nib + 96};
        if (coded) nibstream_step(w, q, 1, aq + b * 32, as + b, acorr + b, group, lut, acc, cor);
        else nibstream_step(w, q, 0, aq + b * 32, as + b, acorr + b, group, lut, acc, cor);
    }
    for (int r = 0; r < 4; r++) out[r] = hsum(_mm256_sub_ps(acc[r], cor[r]));
}

/* Strict four-row twin: the nibble split and a signed code table give the
   32 codes as i8, widened 8 at a time (vpmovsxbd), converted and FMAed
   against the block's activations, which the four rows share.  (Forcing
   the codes through memory, to spare port-5 lane extracts, measured no
   faster.) */
void tops__avx2_dot_f32_nibbles_x4(const uint8_t *blocks, int64_t row_bytes, const tops__nibble_layout *layout,
                                   const float *a, const float *ws, int64_t ld_ws, int64_t nb, float *out) {
    int8_t qlut[16];
    for (int c = 0; c < 16; c++) qlut[c] = (int8_t)(layout->lut[c] - layout->offset);
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qlut));
    const __m256i mask = _mm256_set1_epi8(0x0F), shifts = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    const int64_t stride = layout->block_bytes;
    const uint8_t *p[4];
    p[0] = blocks + layout->header;
    for (int r = 1; r < 4; r++) p[r] = p[r - 1] + row_bytes;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int8_t q[4][32];
    for (int64_t b = 0; b < nb; b++) {
        const int64_t off = b * stride;
        if ((off & 63) + stride > 64 || (off & 63) == 0) /* a new line: the stream 512 B ahead */
            for (int r = 0; r < 4; r++) _mm_prefetch((const char *)(p[r] + off + NIB_PREFETCH), _MM_HINT_T0);
        const float *x = a + b * 32;
        const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
        const __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
        for (int r = 0; r < 4; r++) {
            __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p[r] + off)));
            v = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srlv_epi32(v, shifts), mask));
            _mm256_storeu_si256((__m256i *)q[r], v);
            __m256 s = _mm256_mul_ps(x0, i8x8_to_f32(q[r]));
            __m256 t = _mm256_mul_ps(x1, i8x8_to_f32(q[r] + 8));
            s = _mm256_fmadd_ps(x2, i8x8_to_f32(q[r] + 16), s);
            t = _mm256_fmadd_ps(x3, i8x8_to_f32(q[r] + 24), t);
            acc[r] = _mm256_fmadd_ps(_mm256_add_ps(s, t), _mm256_set1_ps(ws[r * ld_ws + b]), acc[r]);
        }
    }
    for (int r = 0; r < 4; r++) out[r] = hsum(acc[r]);
}
