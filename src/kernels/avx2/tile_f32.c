/* AVX2 + FMA tile kernels: a 6 x 16 f32 GEMM microkernel (12 accumulators,
   two B loads and six broadcasts per k step), an 8 x 8 transposer for
   packing keys, and vector exp / row reductions for the softmax. */
#include "kernels/kernels.h"

#include <immintrin.h>

#include "kernels/avx2/transpose.h"
#include <math.h>

/* One body per row count.  The accumulators are twelve named variables,
   not an array: GCC kept an accumulator array mirrored on the stack and
   stored all twelve every k step (a store per FMA; the kernel ran at 72% of
   the FMA peak on L1 data, 95% without the stores).  Rows are addressed
   from two pointers, a and a + 3 lda, with lda and 2 lda offsets, so the
   loop needs no spilled row pointers either. */
#define ACC_INIT(i)                                                                                                  \
    __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = _mm256_setzero_ps();                                            \
    if (mr > i && accumulate) {                                                                                      \
        c##i##0 = _mm256_loadu_ps(c + i * ldc);                                                                      \
        c##i##1 = _mm256_loadu_ps(c + i * ldc + 8);                                                                  \
    }
#define ACC_STEP(i, row)                                                                                             \
    if (mr > i) {                                                                                                    \
        __m256 av = _mm256_broadcast_ss(row);                                                                        \
        c##i##0 = _mm256_fmadd_ps(av, b0, c##i##0);                                                                  \
        c##i##1 = _mm256_fmadd_ps(av, b1, c##i##1);                                                                  \
    }
#define ACC_STORE(i)                                                                                                 \
    if (mr > i) {                                                                                                    \
        _mm256_storeu_ps(c + i * ldc, c##i##0);                                                                      \
        _mm256_storeu_ps(c + i * ldc + 8, c##i##1);                                                                  \
    }

static inline __attribute__((always_inline)) void gemm_rows(const int mr, int64_t k, const float *a, int64_t lda,
                                                            const float *b, int64_t ldb, float *c, int64_t ldc,
                                                            int accumulate) {
    ACC_INIT(0) ACC_INIT(1) ACC_INIT(2) ACC_INIT(3) ACC_INIT(4) ACC_INIT(5)
    const float *a0 = a, *a3 = mr > 3 ? a + 3 * lda : a; /* never past the rows there are */
    for (int64_t p = 0; p < k; p++, a0++, a3++, b += ldb) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        ACC_STEP(0, a0) ACC_STEP(1, a0 + lda) ACC_STEP(2, a0 + 2 * lda)
        ACC_STEP(3, a3) ACC_STEP(4, a3 + lda) ACC_STEP(5, a3 + 2 * lda)
    }
    ACC_STORE(0) ACC_STORE(1) ACC_STORE(2) ACC_STORE(3) ACC_STORE(4) ACC_STORE(5)
}

void tops__tile_gemm_f32_6x16__avx2(int mr, int64_t k, const float *a, int64_t lda, const float *b,
                                       int64_t ldb, float *c, int64_t ldc, int accumulate) {
    switch (mr) {
    case 6: gemm_rows(6, k, a, lda, b, ldb, c, ldc, accumulate); break;
    case 5: gemm_rows(5, k, a, lda, b, ldb, c, ldc, accumulate); break;
    case 4: gemm_rows(4, k, a, lda, b, ldb, c, ldc, accumulate); break;
    case 3: gemm_rows(3, k, a, lda, b, ldb, c, ldc, accumulate); break;
    case 2: gemm_rows(2, k, a, lda, b, ldb, c, ldc, accumulate); break;
    default: gemm_rows(1, k, a, lda, b, ldb, c, ldc, accumulate); break;
    }
}

static inline void transpose8x8(float *dst, int64_t ldd, const float *src, int64_t lds) {
    tops__avx2_store_transposed8(_mm256_loadu_ps(src + 0 * lds), _mm256_loadu_ps(src + 1 * lds),
                                 _mm256_loadu_ps(src + 2 * lds), _mm256_loadu_ps(src + 3 * lds),
                                 _mm256_loadu_ps(src + 4 * lds), _mm256_loadu_ps(src + 5 * lds),
                                 _mm256_loadu_ps(src + 6 * lds), _mm256_loadu_ps(src + 7 * lds), dst, ldd);
}

void tops__transpose_f32__avx2(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                               int64_t cols) {
    int64_t r8 = rows & ~(int64_t)7, c8 = cols & ~(int64_t)7;
    for (int64_t i = 0; i < r8; i += 8)
        for (int64_t j = 0; j < c8; j += 8) transpose8x8(dst + j * ldd + i, ldd, src + i * lds + j, lds);
    /* Ragged edges element by element. */
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = i < r8 ? c8 : 0; j < cols; j++) dst[j * ldd + i] = src[i * lds + j];
}

/* exp(x) for x <= 0 mostly (softmax); valid on the whole f32 range: inputs
   below -87 flush to 0 (so no result is subnormal: a subnormal costs a
   microcode assist per vector, and masked scores are -inf, so many would
   be), above 88.7 give +inf.  Cody-Waite reduction and a
   degree-6 polynomial: about 1 ulp. */
#define EXP_LO (-87.0f)
#define EXP_HI 88.72283905f

/* exp on [EXP_LO, EXP_HI] (the caller clamps or checks). */
static inline __m256 exp_in_range(__m256 xc) {
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    const __m256 ln2_hi = _mm256_set1_ps(0.693359375f), ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, ln2_hi, xc);
    r = _mm256_fnmadd_ps(n, ln2_lo, r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n split in two factors so n = 128 (x near 88.7) does not overflow the exponent field. */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i half = _mm256_srai_epi32(ni, 1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

static inline __m256 exp_ps(__m256 x) {
    __m256 y = exp_in_range(_mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_LO)), _mm256_set1_ps(EXP_HI)));
    /* Exact limits outside the clamp, and NaN passes through. */
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LO), _CMP_LT_OQ));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(EXP_HI), _CMP_GT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* exp_ps with a fast path: when all eight lanes are inside the range (the
   softmax's usual case: finite scores near the row max) the clamps and the
   three blends (3 uops each on recent cores) are skipped; same bits. */
static inline __m256 exp_ps_fast(__m256 x) {
    __m256 in = _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(EXP_LO), _CMP_GE_OQ),
                              _mm256_cmp_ps(x, _mm256_set1_ps(EXP_HI), _CMP_LE_OQ));
    return _mm256_movemask_ps(in) == 0xff ? exp_in_range(x) : exp_ps(x);
}

float tops__exp_sub_f32_row__avx2(float *x, int64_t n, float sub, float scale) {
    __m256 s = _mm256_set1_ps(sub), f = _mm256_set1_ps(scale), acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp_ps_fast(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), s), f));
        _mm256_storeu_ps(x + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (j < n) {
        __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - j)), idx);
        __m256 e = exp_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(x + j, mask), s), f));
        _mm256_maskstore_ps(x + j, mask, e);
        acc = _mm256_add_ps(acc, _mm256_and_ps(e, _mm256_castsi256_ps(mask)));
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

void tops__scale_f32_row__avx2(float *x, int64_t n, float r) {
    __m256 s = _mm256_set1_ps(r);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), s));
    for (; j < n; j++) x[j] *= r;
}

static inline float hreduce(__m256 v, int op) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    __m128 r = op == TOPS_REDUCE_SUM ? _mm_add_ps(lo, hi) : op == TOPS_REDUCE_MAX ? _mm_max_ps(lo, hi) : _mm_min_ps(lo, hi);
    __m128 s = _mm_movehl_ps(r, r);
    r = op == TOPS_REDUCE_SUM ? _mm_add_ps(r, s) : op == TOPS_REDUCE_MAX ? _mm_max_ps(r, s) : _mm_min_ps(r, s);
    s = _mm_shuffle_ps(r, r, 1);
    r = op == TOPS_REDUCE_SUM ? _mm_add_ss(r, s) : op == TOPS_REDUCE_MAX ? _mm_max_ss(r, s) : _mm_min_ss(r, s);
    return _mm_cvtss_f32(r);
}

float tops__reduce_f32_row__avx2(const float *x, int64_t n, int op, float identity) {
    /* Eight lanes folded pairwise at the end: a fixed order, so the same
       bits on every call; the tail and identity join last. */
    __m256 acc = op == TOPS_REDUCE_SUM ? _mm256_setzero_ps() : _mm256_set1_ps(identity);
    __m256 unord = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j);
        unord = _mm256_or_ps(unord, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        acc = op == TOPS_REDUCE_SUM ? _mm256_add_ps(acc, v)
              : op == TOPS_REDUCE_MAX ? _mm256_max_ps(acc, v) : _mm256_min_ps(acc, v);
    }
    float r = j ? hreduce(acc, op) : (op == TOPS_REDUCE_SUM ? 0.0f : identity);
    int nan = !_mm256_testz_ps(unord, unord) || isnan(identity);
    for (; j < n; j++) {
        float v = x[j];
        nan |= isnan(v);
        if (op == TOPS_REDUCE_SUM)
            r += v;
        else if (op == TOPS_REDUCE_MAX)
            r = v > r ? v : r;
        else
            r = v < r ? v : r;
    }
    if (op == TOPS_REDUCE_SUM) r = identity + r;
    return nan ? NAN : r;
}
