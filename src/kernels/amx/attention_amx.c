/* AMX fused attention kernels (cpu/dispatch.h, tops__amx_attn_ukernel):
   S = Q K^T and O = O * alpha + P V on bf16 tiles (tdpbf16ps, f32 sums),
   each in passes over a 2 x 2 grid of 16 x 16 C tiles (tiles 0..3; 4, 5
   the two row tiles of the left operand, 6, 7 the two 16-column groups of
   the right), and the online-softmax step between them in AVX-512 (masks,
   soft-capping, row max, exp2 by a degree-6 polynomial, row sums, P as
   bf16 terms in the A-tile layout).  The softmax's arithmetic is that of
   its scalar twin (src/kernels/ref/amx_attn.c) step for step, so the two
   give the same bits. */
#include "kernels/kernels.h"
#include "kernels/amx/tilecfg.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

void tops__amx_attn_qk__amx(int nds, int steps, const uint16_t *q, const uint16_t *k, int nk, int np,
                            const uint8_t *pa, const uint8_t *pb, float *s, int64_t lds) {
    const int64_t ss = lds * 4, gstride = (int64_t)nk * nds * 512;
    tops__amx_configure();
    for (int g2 = 0; g2 < steps; g2++) {
        const uint16_t *k0 = k + 2 * g2 * gstride, *k1 = k0 + gstride;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int d = 0; d < nds; d++)
            for (int x = 0; x < np; x++) {
                const uint16_t *a = q + ((int64_t)pa[x] * 2 * nds + d) * 512;
                const int64_t b = ((int64_t)pb[x] * nds + d) * 512;
                _tile_loadd(4, a, 64);
                _tile_loadd(6, k0 + b, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_loadd(7, k1 + b, 64);
                _tile_dpbf16ps(1, 4, 7);
                _tile_loadd(5, a + (int64_t)nds * 512, 64);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
        float *c = s + 32 * g2;
        _tile_stored(0, c, ss);
        _tile_stored(1, c + 16, ss);
        _tile_stored(2, c + 16 * lds, ss);
        _tile_stored(3, c + 16 * lds + 16, ss);
    }
}

/* The qk kernel's tile ops as a sequence of units, run a few at a time
   between the softmax's rows: per 32-key pair g2, unit 0 zeroes the four
   C tiles, units 1..nds*np load and multiply (d-step, pair) in qk's
   order, the last stores them: the same ops in the same order as qk. */
typedef struct qk_cursor {
    const tops__amx_attn_qk_job *j;
    int g2, u, per_g2;
} qk_cursor;

static inline void qk_units(qk_cursor *c, int n) {
    const tops__amx_attn_qk_job *j = c->j;
    const int64_t gstride = (int64_t)j->nk * j->nds * 512;
    for (; n > 0 && c->g2 < j->steps; n--) {
        if (c->u == 0) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
        } else if (c->u < c->per_g2 - 1) {
            const int idx = c->u - 1, d = idx / j->np, x = idx % j->np;
            const uint16_t *k0 = j->k + 2 * c->g2 * gstride, *k1 = k0 + gstride;
            const uint16_t *a = j->q + ((int64_t)j->pa[x] * 2 * j->nds + d) * 512;
            const int64_t b = ((int64_t)j->pb[x] * j->nds + d) * 512;
            _tile_loadd(4, a, 64);
            _tile_loadd(6, k0 + b, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(7, k1 + b, 64);
            _tile_dpbf16ps(1, 4, 7);
            _tile_loadd(5, a + (int64_t)j->nds * 512, 64);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        } else {
            const int64_t ss = j->lds * 4;
            float *cc = j->s + 32 * c->g2;
            _tile_stored(0, cc, ss);
            _tile_stored(1, cc + 16, ss);
            _tile_stored(2, cc + 16 * j->lds, ss);
            _tile_stored(3, cc + 16 * j->lds + 16, ss);
        }
        if (++c->u == c->per_g2) c->u = 0, c->g2++;
    }
}

void tops__amx_attn_pv__amx(int steps, const uint16_t *p, int np_terms_p, const uint16_t *v, int nv, int ncg2, int np,
                            const uint8_t *pa, const uint8_t *pb, const float *alpha, float *o, int64_t ldo) {
    (void)np_terms_p;
    const int64_t os = ldo * 4, ncg = 2 * (int64_t)ncg2;
    tops__amx_configure();
    for (int c2 = 0; c2 < ncg2; c2++) {
        float *c = o + 32 * c2;
        if (alpha)
            for (int i = 0; i < 32; i++) {
                const __m512 al = _mm512_set1_ps(alpha[i]);
                _mm512_storeu_ps(c + i * ldo, _mm512_mul_ps(_mm512_loadu_ps(c + i * ldo), al));
                _mm512_storeu_ps(c + i * ldo + 16, _mm512_mul_ps(_mm512_loadu_ps(c + i * ldo + 16), al));
            }
        _tile_loadd(0, c, os);
        _tile_loadd(1, c + 16, os);
        _tile_loadd(2, c + 16 * ldo, os);
        _tile_loadd(3, c + 16 * ldo + 16, os);
        for (int t = 0; t < steps; t++)
            for (int x = 0; x < np; x++) {
                const uint16_t *a = p + ((int64_t)pa[x] * 2 * steps + t) * 512;
                const uint16_t *b = v + (((int64_t)t * nv + pb[x]) * ncg + 2 * c2) * 512;
                _tile_loadd(4, a, 64);
                _tile_loadd(6, b, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_loadd(7, b + 512, 64);
                _tile_dpbf16ps(1, 4, 7);
                _tile_loadd(5, a + (int64_t)steps * 512, 64);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
        _tile_stored(0, c, os);
        _tile_stored(1, c + 16, os);
        _tile_stored(2, c + 16 * ldo, os);
        _tile_stored(3, c + 16 * ldo + 16, os);
    }
}

/* 2^x as exp2_poly in src/kernels/ref/amx_attn.c: the same steps. */
static inline __m512 exp2v(__m512 x) {
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.5403530e-4f), f, _mm512_set1_ps(1.3333558e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    __m512 r = _mm512_scalef_ps(p, n);
    r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-125.0f), _CMP_LT_OQ), r, _mm512_setzero_ps());
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(128.0f), _CMP_GT_OQ), r,
                                _mm512_set1_ps(INFINITY));
}

/* Columns [lo, hi] of the block that row `pos` sees (hi < lo: none). */
static void visible_cols(const tops__amx_attn_args *a, int64_t pos, int64_t cols, int32_t *lo, int32_t *hi) {
    int64_t l = 0, h = (a->ncols < cols ? a->ncols : cols) - 1;
    if (a->causal && pos - a->j0 < h) h = pos - a->j0;
    if (a->window > 0) {
        if (pos + a->window - 1 - a->j0 < h) h = pos + a->window - 1 - a->j0;
        if (pos - a->window + 1 - a->j0 > l) l = pos - a->window + 1 - a->j0;
    }
    if (h < -1) h = -1;
    if (l > cols) l = cols;
    *lo = (int32_t)l;
    *hi = (int32_t)h;
}

/* Lane 0 of the fixed-order tree sum of v's lanes: u[x] += u[x + w] for
   w = 8, 4, 2, 1 (the scalar twin's order). */
static inline float tree_sum(__m512 v) {
    const __m512i i8 = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 15, 14, 13, 12, 11, 10, 9, 8);
    const __m512i i4 = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 7, 6, 5, 4);
    const __m512i i2 = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 3, 2);
    const __m512i i1 = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 1);
    v = _mm512_add_ps(v, _mm512_permutexvar_ps(i8, v));
    v = _mm512_add_ps(v, _mm512_permutexvar_ps(i4, v));
    v = _mm512_add_ps(v, _mm512_permutexvar_ps(i2, v));
    v = _mm512_add_ps(v, _mm512_permutexvar_ps(i1, v));
    return _mm512_cvtss_f32(v);
}

/* P of 16 columns: terms into dst (term 1 at dst + term). */
static inline void put_p(__m512 e, int nt, uint16_t *dst, int64_t term) {
    const __m256i t0 = (__m256i)_mm512_cvtneps_pbh(e);
    _mm256_storeu_si256((__m256i *)dst, t0);
    if (nt > 1) {
        const __m512 back = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(t0), 16));
        _mm256_storeu_si256((__m256i *)(dst + term), (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(e, back)));
    }
}

/* The softmax step; with cur, `per` units of the next block's qk after
   each row of the exp pass and the rest at the end.  The tile ops touch
   neither s, p nor the vector state, so the softmax's bits are those of
   the plain call. */
#define HOOK(n) \
    if (with_qk) qk_units(cur, n)
static inline __attribute__((always_inline)) int softmax_impl(const tops__amx_attn_args *a, float *s, int64_t lds,
                                                              float *m, float *l, float *alpha, uint16_t *p,
                                                              const int with_qk, qk_cursor *cur, int per) {
    const int64_t cols = 32 * (int64_t)a->steps, term = (int64_t)2 * a->steps * 512;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512 ninf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f);
    const __m512 cap = _mm512_set1_ps(a->cap), cap_k = _mm512_set1_ps(a->cap_k), c2 = _mm512_set1_ps(a->c2);
    const int capped = a->cap > 0.0f;
    _Alignas(64) float bmax[32], mn[32];
    /* Pass 1: logits (soft-capped, masked) in place where they change, row maxima. */
    for (int i = 0; i < 32; i++) {
        float *row = s + i * lds;
        int32_t lo, hi;
        visible_cols(a, a->pos0 + i, cols, &lo, &hi);
        __m512 mx = ninf;
        if (!capped && lo <= 0 && hi >= cols - 1) {
            for (int64_t c = 0; c < cols; c += 16) mx = _mm512_max_ps(_mm512_loadu_ps(row + c), mx);
        } else {
            const __m512i vlo = _mm512_set1_epi32(lo), vhi = _mm512_set1_epi32(hi);
            for (int64_t c = 0; c < cols; c += 16) {
                __m512 y = _mm512_loadu_ps(row + c);
                if (capped)
                    y = _mm512_mul_ps(
                        cap, _mm512_sub_ps(one, _mm512_div_ps(two, _mm512_add_ps(exp2v(_mm512_mul_ps(y, cap_k)), one))));
                const __m512i col = _mm512_add_epi32(lane, _mm512_set1_epi32((int32_t)c));
                const __mmask16 vis = _mm512_cmpge_epi32_mask(col, vlo) & _mm512_cmple_epi32_mask(col, vhi);
                y = _mm512_mask_blend_ps(vis, ninf, y);
                mx = _mm512_max_ps(y, mx); /* a NaN y leaves mx */
                _mm512_storeu_ps(row + c, y);
            }
        }
        bmax[i] = _mm512_reduce_max_ps(mx);
    }
    /* The new maxima and alpha, 16 rows at a time (elementwise: the twin's bits). */
    int any = 0;
    for (int h = 0; h < 32; h += 16) {
        const __m512 mo = _mm512_loadu_ps(m + h), b = _mm512_load_ps(bmax + h);
        const __m512 n = _mm512_max_ps(b, mo); /* b > mo ? b : mo */
        __m512 al = exp2v(_mm512_mul_ps(_mm512_sub_ps(mo, n), c2));
        al = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mo, n, _CMP_EQ_OQ), al, one);
        any |= _mm512_cmp_ps_mask(al, one, _CMP_NEQ_UQ) != 0;
        _mm512_storeu_ps(alpha + h, al);
        _mm512_store_ps(mn + h, n);
        _mm512_storeu_ps(m + h, n);
    }
    /* Pass 2: P = exp2((y - m) * c2), its terms and row sums. */
    for (int i = 0; i < 32; i++) {
        const float *row = s + i * lds;
        uint16_t *prow = p + (int64_t)(i / 16) * a->steps * 512 + (i % 16) * 32;
        const __m512 vmn = _mm512_set1_ps(mn[i]);
        __m512 acc = _mm512_setzero_ps();
        if (mn[i] == -INFINITY) { /* nothing seen yet: all zeros */
            for (int64_t c = 0; c < cols; c += 16) put_p(acc, a->np_terms, prow + (c / 32) * 512 + c % 32, term);
        } else if (mn[i] == INFINITY) { /* the +inf logits share the row: 1 there, 0 elsewhere */
            for (int64_t c = 0; c < cols; c += 16) {
                const __m512 y = _mm512_loadu_ps(row + c);
                __m512 e = exp2v(_mm512_mul_ps(_mm512_sub_ps(y, vmn), c2));
                e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(y, vmn, _CMP_EQ_OQ), e, one);
                acc = _mm512_add_ps(acc, e);
                put_p(e, a->np_terms, prow + (c / 32) * 512 + c % 32, term);
            }
        } else { /* (y - m) * c2 <= 0 or NaN: exp2v's upper clamp never acts, y == m gives exp2(0) = 1 */
            const __m512 low = _mm512_set1_ps(-125.0f), zero = _mm512_setzero_ps();
            for (int64_t c = 0; c < cols; c += 16) {
                const __m512 x = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(row + c), vmn), c2);
                const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                const __m512 f = _mm512_sub_ps(x, n);
                __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(1.5403530e-4f), f, _mm512_set1_ps(1.3333558e-3f));
                q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(9.6181291e-3f));
                q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(5.5504109e-2f));
                q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(2.4022651e-1f));
                q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(6.9314718e-1f));
                q = _mm512_fmadd_ps(q, f, one);
                const __m512 e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, low, _CMP_LT_OQ), _mm512_scalef_ps(q, n), zero);
                acc = _mm512_add_ps(acc, e);
                put_p(e, a->np_terms, prow + (c / 32) * 512 + c % 32, term);
            }
        }
        l[i] = l[i] * alpha[i] + tree_sum(acc);
        HOOK(per);
    }
    HOOK(1 << 30);
    return any;
}

int tops__amx_attn_softmax__avx512(const tops__amx_attn_args *a, float *s, int64_t lds, float *m, float *l,
                                   float *alpha, uint16_t *p) {
    return softmax_impl(a, s, lds, m, l, alpha, p, 0, NULL, 0);
}

int tops__amx_attn_softmax_qk__amx(const tops__amx_attn_args *a, float *s, int64_t lds, float *m, float *l,
                                   float *alpha, uint16_t *p, const tops__amx_attn_qk_job *next) {
    if (!next) return softmax_impl(a, s, lds, m, l, alpha, p, 0, NULL, 0);
    tops__amx_configure();
    qk_cursor cur = {next, 0, 0, next->nds * next->np + 2};
    const int total = next->steps * cur.per_g2;
    return softmax_impl(a, s, lds, m, l, alpha, p, 1, &cur, (total + 31) / 32);
}

/* The terms of 32 values (a: the first 16, b: the next) as two 512-bit
   rows: t0 and, for nt = 2, t1 = bf16(x - t0). */
static inline void terms32(__m512 a, __m512 b, int nt, uint16_t *dst, int64_t term_stride) {
    const __m512i t0 = (__m512i)_mm512_cvtne2ps_pbh(b, a);
    _mm512_storeu_si512((void *)dst, t0);
    if (nt > 1) {
        const __m512 ba = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(t0)), 16));
        const __m512 bb =
            _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(t0, 1)), 16));
        _mm512_storeu_si512((void *)(dst + term_stride),
                            (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(b, bb), _mm512_sub_ps(a, ba)));
    }
}

void tops__amx_attn_pack_a__avx512(const float *src, int64_t ld, int rows, int chunks, int nt, int64_t term_stride,
                                   uint16_t *dst) {
    for (int i = 0; i < rows; i++)
        for (int d = 0; d < chunks; d++) {
            const float *r = src + i * ld + 32 * d;
            terms32(_mm512_loadu_ps(r), _mm512_loadu_ps(r + 16), nt, dst + d * 512 + i * 32, term_stride);
        }
}

void tops__amx_attn_pack_b__avx512(const float *src, int64_t ld, int64_t npairs, int ngroups, int nt,
                                   int64_t group_stride, int64_t term_stride, uint16_t *dst) {
    /* Interleave rows 2 k2 and 2 k2 + 1: lanes j * 2 + t. */
    const __m512i idx_lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i idx_hi = _mm512_add_epi32(idx_lo, _mm512_set1_epi32(8));
    for (int64_t k2 = 0; k2 < npairs; k2++)
        for (int g = 0; g < ngroups; g++) {
            const __m512 x0 = _mm512_loadu_ps(src + 2 * k2 * ld + 16 * g);
            const __m512 x1 = _mm512_loadu_ps(src + (2 * k2 + 1) * ld + 16 * g);
            terms32(_mm512_permutex2var_ps(x0, idx_lo, x1), _mm512_permutex2var_ps(x0, idx_hi, x1), nt,
                    dst + g * group_stride + k2 * 32, term_stride);
        }
}
