/* AVX-512 VNNI relaxed integer microkernel with A read in place through
   row pointers (conv2d's implicit GEMM over an input quantized once per
   call): 6 rows x 32 columns, four of gemm_q8's 8-column panels, two per
   512-bit vector (vinserti64x4 once per step, shared by the six rows),
   vpdpbusd, then gemm_q8_vnni's block scaling.  Panels the caller has
   interleaved per k step (conv2d at large M) load as one 512-bit vector
   per pair instead. */
#include "kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

static inline __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

static inline __m512i pair(const uint8_t *lo, const uint8_t *hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
                              _mm256_loadu_si256((const __m256i *)hi), 1);
}

static inline __m512 pair_ps(const float *lo, const float *hi) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(lo)), _mm256_loadu_ps(hi), 1);
}

/* The body: PAIRED when b[1] = b[0] + 32 and b[3] = b[2] + 32 (panels
   interleaved per k step by the caller: one 512-bit load per pair),
   else two 256-bit loads joined by vinserti64x4 per pair and step. */
static inline __attribute__((always_inline)) void body(int paired, int64_t nb, const int8_t *const *a,
                                                       const float *const *as, const int32_t *const *acorr,
                                                       const uint8_t *const *b, int64_t bstep, const float *const *bs,
                                                       int64_t sstep, float *c, int64_t ldc, int accumulate) {
    const int8_t *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    const uint8_t *b0 = b[0], *b1 = b[1], *b2 = b[2], *b3 = b[3];
    __m512 f[6][2];
    for (int i = 0; i < 6; i++) f[i][0] = f[i][1] = _mm512_setzero_ps();
    for (int64_t blk = 0; blk < nb; blk++) {
        __m512i s[6][2]; /* start from -offset * code sum: no subtraction after */
        for (int i = 0; i < 6; i++) s[i][0] = s[i][1] = _mm512_set1_epi32(-acorr[i][blk]);
        for (int k = 0; k < 32; k += 4) {
            const __m512i w0 = paired ? _mm512_loadu_si512((const void *)b0) : pair(b0, b1);
            const __m512i w1 = paired ? _mm512_loadu_si512((const void *)b2) : pair(b2, b3);
#define TOPS_Q8_STEP(i, ap)                                                                                      \
    do {                                                                                                         \
        const __m512i x = bcast4(ap + k);                                                                        \
        s[i][0] = _mm512_dpbusd_epi32(s[i][0], w0, x);                                                           \
        s[i][1] = _mm512_dpbusd_epi32(s[i][1], w1, x);                                                           \
    } while (0)
            TOPS_Q8_STEP(0, a0);
            TOPS_Q8_STEP(1, a1);
            TOPS_Q8_STEP(2, a2);
            TOPS_Q8_STEP(3, a3);
            TOPS_Q8_STEP(4, a4);
            TOPS_Q8_STEP(5, a5);
#undef TOPS_Q8_STEP
            b0 += bstep, b1 += bstep, b2 += bstep, b3 += bstep;
        }
        a0 += 32, a1 += 32, a2 += 32, a3 += 32, a4 += 32, a5 += 32;
        const __m512 g0 = pair_ps(bs[0] + blk * sstep, bs[1] + blk * sstep),
                     g1 = pair_ps(bs[2] + blk * sstep, bs[3] + blk * sstep);
        for (int i = 0; i < 6; i++) {
            const __m512 sc = _mm512_set1_ps(as[i][blk]);
            f[i][0] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s[i][0]), g0), sc, f[i][0]);
            f[i][1] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s[i][1]), g1), sc, f[i][1]);
        }
    }
    for (int i = 0; i < 6; i++) {
        float *ci = c + i * ldc;
        if (accumulate) {
            f[i][0] = _mm512_add_ps(f[i][0], _mm512_loadu_ps(ci));
            f[i][1] = _mm512_add_ps(f[i][1], _mm512_loadu_ps(ci + 16));
        }
        _mm512_storeu_ps(ci, f[i][0]);
        _mm512_storeu_ps(ci + 16, f[i][1]);
    }
}

void tops_gemm_f32_qi8_qu8_6x32_rows__avx512_vnni(int64_t nb, const int8_t *const *a, const float *const *as,
                                                  const int32_t *const *acorr, const uint8_t *const *b, int64_t bstep,
                                                  const float *const *bs, int64_t sstep, float *c, int64_t ldc, int accumulate,
                                                  int offset) {
    (void)offset; /* vpdpbusd has no i16 stage */
    if (b[1] == b[0] + 32 && b[3] == b[2] + 32) body(1, nb, a, as, acorr, b, bstep, bs, sstep, c, ldc, accumulate);
    else body(0, nb, a, as, acorr, b, bstep, bs, sstep, c, ldc, accumulate);
}
