/* AVX-512 tile kernels: a 12 x 32 f32 GEMM microkernel (24 accumulators,
   two B loads and twelve broadcasts per k step), and vector exp / row
   reductions for the softmax.  The transposer stays the AVX2 one. */
#include "kernels/kernels.h"

#include <immintrin.h>
#include <math.h>

/* Named accumulators and four row pointers (a, a + 3 lda, a + 6 lda,
   a + 9 lda, each with lda and 2 lda offsets), as in the AVX2 kernel: with
   an accumulator array GCC spilled it around the loop and reloaded a row
   offset from the stack every k step. */
#define ACC_INIT(i)                                                                                                  \
    __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps();                                            \
    if (mr > i && accumulate) {                                                                                      \
        c##i##0 = _mm512_loadu_ps(c + i * ldc);                                                                      \
        c##i##1 = _mm512_loadu_ps(c + i * ldc + 16);                                                                 \
    }
#define ACC_STEP(i, row)                                                                                             \
    if (mr > i) {                                                                                                    \
        __m512 av = _mm512_set1_ps(*(row));                                                                          \
        c##i##0 = _mm512_fmadd_ps(av, b0, c##i##0);                                                                  \
        c##i##1 = _mm512_fmadd_ps(av, b1, c##i##1);                                                                  \
    }
#define ACC_STORE(i)                                                                                                 \
    if (mr > i) {                                                                                                    \
        _mm512_storeu_ps(c + i * ldc, c##i##0);                                                                      \
        _mm512_storeu_ps(c + i * ldc + 16, c##i##1);                                                                 \
    }

static inline __attribute__((always_inline)) void gemm_rows(const int mr, int64_t k, const float *a, int64_t lda,
                                                            const float *b, int64_t ldb, float *c, int64_t ldc,
                                                            int accumulate) {
    ACC_INIT(0) ACC_INIT(1) ACC_INIT(2) ACC_INIT(3) ACC_INIT(4) ACC_INIT(5)
    ACC_INIT(6) ACC_INIT(7) ACC_INIT(8) ACC_INIT(9) ACC_INIT(10) ACC_INIT(11)
    /* never past the rows there are */
    const float *a0 = a, *a3 = mr > 3 ? a + 3 * lda : a, *a6 = mr > 6 ? a + 6 * lda : a, *a9 = mr > 9 ? a + 9 * lda : a;
    for (int64_t p = 0; p < k; p++, a0++, a3++, a6++, a9++, b += ldb) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        ACC_STEP(0, a0) ACC_STEP(1, a0 + lda) ACC_STEP(2, a0 + 2 * lda)
        ACC_STEP(3, a3) ACC_STEP(4, a3 + lda) ACC_STEP(5, a3 + 2 * lda)
        ACC_STEP(6, a6) ACC_STEP(7, a6 + lda) ACC_STEP(8, a6 + 2 * lda)
        ACC_STEP(9, a9) ACC_STEP(10, a9 + lda) ACC_STEP(11, a9 + 2 * lda)
    }
    ACC_STORE(0) ACC_STORE(1) ACC_STORE(2) ACC_STORE(3) ACC_STORE(4) ACC_STORE(5)
    ACC_STORE(6) ACC_STORE(7) ACC_STORE(8) ACC_STORE(9) ACC_STORE(10) ACC_STORE(11)
}

void tops__tile_gemm_f32_12x32__avx512(int mr, int64_t k, const float *a, int64_t lda, const float *b,
                                          int64_t ldb, float *c, int64_t ldc, int accumulate) {
    switch (mr) {
    case 12: gemm_rows(12, k, a, lda, b, ldb, c, ldc, accumulate); break;
    case 11: gemm_rows(11, k, a, lda, b, ldb, c, ldc, accumulate); break;
    case 10: gemm_rows(10, k, a, lda, b, ldb, c, ldc, accumulate); break;
    case 9: gemm_rows(9, k, a, lda, b, ldb, c, ldc, accumulate); break;
    case 8: gemm_rows(8, k, a, lda, b, ldb, c, ldc, accumulate); break;
    case 7: gemm_rows(7, k, a, lda, b, ldb, c, ldc, accumulate); break;
    case 6: gemm_rows(6, k, a, lda, b, ldb, c, ldc, accumulate); break;
    case 5: gemm_rows(5, k, a, lda, b, ldb, c, ldc, accumulate); break;
    case 4: gemm_rows(4, k, a, lda, b, ldb, c, ldc, accumulate); break;
    case 3: gemm_rows(3, k, a, lda, b, ldb, c, ldc, accumulate); break;
    case 2: gemm_rows(2, k, a, lda, b, ldb, c, ldc, accumulate); break;
    default: gemm_rows(1, k, a, lda, b, ldb, c, ldc, accumulate); break;
    }
}

/* exp as in the AVX2 file (Cody-Waite, degree-6 polynomial, about 1 ulp;
   below -87 flushed to 0 so no result is subnormal);
   vscalefps applies 2^n without exponent overflow tricks. */
#define EXP_LO (-87.0f)
#define EXP_HI 88.72283905f

/* exp on [EXP_LO, EXP_HI] (the caller clamps or checks). */
static inline __m512 exp_in_range(__m512 xc) {
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

static inline __m512 exp_ps(__m512 x) {
    const __m512 lo = _mm512_set1_ps(EXP_LO), hi = _mm512_set1_ps(EXP_HI);
    __m512 y = exp_in_range(_mm512_min_ps(_mm512_max_ps(x, lo), hi));
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), y, _mm512_setzero_ps());
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), y, _mm512_set1_ps(INFINITY));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

/* exp_ps with a fast path: all sixteen lanes inside the range (the
   softmax's usual case) skip the clamps, compares and blends; same bits. */
static inline __m512 exp_ps_fast(__m512 x) {
    __mmask16 in = _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_LO), _CMP_GE_OQ), x,
                                           _mm512_set1_ps(EXP_HI), _CMP_LE_OQ);
    return in == 0xffff ? exp_in_range(x) : exp_ps(x);
}

static inline float hsum(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

float tops__exp_sub_f32_row__avx512(float *x, int64_t n, float sub, float scale) {
    __m512 s = _mm512_set1_ps(sub), f = _mm512_set1_ps(scale), acc = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 e = exp_ps_fast(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), s), f));
        _mm512_storeu_ps(x + j, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (j < n) {
        __mmask16 m = (__mmask16)((1u << (n - j)) - 1u);
        __m512 e = exp_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), s), f));
        _mm512_mask_storeu_ps(x + j, m, e);
        acc = _mm512_mask_add_ps(acc, m, acc, e);
    }
    return hsum(acc);
}

static inline __m512 combine(__m512 a, __m512 b, int op) {
    return op == TOPS_REDUCE_SUM ? _mm512_add_ps(a, b) : op == TOPS_REDUCE_MAX ? _mm512_max_ps(a, b) : _mm512_min_ps(a, b);
}

float tops__reduce_f32_row__avx512(const float *x, int64_t n, int op, float identity) {
    /* Sixteen lanes, folded in a fixed order at the end: the same bits on
       every call; the masked tail is padded with the op's neutral value. */
    __m512 neutral = op == TOPS_REDUCE_SUM ? _mm512_setzero_ps()
                     : op == TOPS_REDUCE_MAX ? _mm512_set1_ps(-INFINITY) : _mm512_set1_ps(INFINITY);
    __m512 acc = neutral;
    __mmask16 nan = 0;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 v = _mm512_loadu_ps(x + j);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        acc = combine(acc, v, op);
    }
    if (j < n) {
        __mmask16 m = (__mmask16)((1u << (n - j)) - 1u);
        __m512 v = _mm512_mask_loadu_ps(neutral, m, x + j);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        acc = combine(acc, v, op);
    }
    __m512 sh = _mm512_shuffle_f32x4(acc, acc, _MM_SHUFFLE(1, 0, 3, 2));
    acc = combine(acc, sh, op);
    sh = _mm512_shuffle_f32x4(acc, acc, _MM_SHUFFLE(2, 3, 0, 1));
    acc = combine(acc, sh, op);
    sh = _mm512_permute_ps(acc, _MM_SHUFFLE(1, 0, 3, 2));
    acc = combine(acc, sh, op);
    sh = _mm512_permute_ps(acc, _MM_SHUFFLE(2, 3, 0, 1));
    acc = combine(acc, sh, op);
    float r = _mm512_cvtss_f32(acc);
    if (nan || isnan(identity)) return NAN;
    if (op == TOPS_REDUCE_SUM) return identity + r;
    if (op == TOPS_REDUCE_MAX) return identity > r ? identity : r;
    return identity < r ? identity : r;
}
