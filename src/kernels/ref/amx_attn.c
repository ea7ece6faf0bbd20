/* Scalar twins of the AMX attention kernels (cpu/dispatch.h,
   tops__amx_attn_ukernel): the softmax step bit for bit as the AVX-512
   one computes it (src/kernels/amx/attention_amx.c), and the two tile
   products as their contract states (f32 sums of exact bf16 products, k in
   order).  The tests run the AMX attention driver over these on any
   machine ("emulated tiles"). */
#include "kernels/kernels.h"
#include "kernels/ref/bf16_ne.h"

#include <math.h>
#include <string.h>

/* 2^x: n = x rounded to nearest even, f = x - n, a degree-6 polynomial
   of f (fma chain), scaled by 2^n; 0 below -125, +inf above 128.  The
   AVX-512 kernel runs the same steps (roundscale, fmadd, scalef). */
static float exp2_poly(float x) {
    if (x != x) return x;
    if (x < -125.0f) return 0.0f;
    if (x > 128.0f) return INFINITY;
    const float n = rintf(x), f = x - n;
    float p = fmaf(1.5403530e-4f, f, 1.3333558e-3f);
    p = fmaf(p, f, 9.6181291e-3f);
    p = fmaf(p, f, 5.5504109e-2f);
    p = fmaf(p, f, 2.4022651e-1f);
    p = fmaf(p, f, 6.9314718e-1f);
    p = fmaf(p, f, 1.0f);
    return ldexpf(p, (int)n);
}

int tops__ref_amx_attn_softmax(const tops__amx_attn_args *a, float *s, int64_t lds, float *m, float *l, float *alpha,
                               uint16_t *p) {
    const int64_t cols = 32 * (int64_t)a->steps;
    float mn[32];
    int any = 0;
    /* Logits in place, row maxima (NaN logits do not count: they reach l
       and O through P), the new maxima and alpha. */
    for (int i = 0; i < 32; i++) {
        float *row = s + i * lds;
        const int64_t pos = a->pos0 + i;
        float mx = -INFINITY;
        for (int64_t c = 0; c < cols; c++) {
            float y = row[c];
            if (a->cap > 0.0f) y = a->cap * (1.0f - 2.0f / (exp2_poly(y * a->cap_k) + 1.0f));
            const int64_t j = a->j0 + c, dj = j > pos ? j - pos : pos - j;
            if (c >= a->ncols || (a->causal && j > pos) || (a->window > 0 && dj >= a->window)) y = -INFINITY;
            if (y > mx) mx = y;
            row[c] = y;
        }
        const float mo = m[i];
        mn[i] = mx > mo ? mx : mo;
        alpha[i] = mo == mn[i] ? 1.0f : exp2_poly((mo - mn[i]) * a->c2);
        any |= alpha[i] != 1.0f;
        m[i] = mn[i];
    }
    /* P = exp2((y - m) * c2) (0 in a row that has seen nothing; 1 where y
       = m, +inf included), its terms, and the row sums: lane c % 16, then
       the lanes as u[x] += u[x + w] for w = 8, 4, 2, 1. */
    for (int i = 0; i < 32; i++) {
        const float *row = s + i * lds;
        float acc[16];
        for (int u = 0; u < 16; u++) acc[u] = 0.0f;
        const int r = i / 16, ri = i % 16;
        for (int64_t c = 0; c < cols; c++) {
            const float y = row[c];
            const float e = mn[i] == -INFINITY ? 0.0f : y == mn[i] ? 1.0f : exp2_poly((y - mn[i]) * a->c2);
            acc[c % 16] += e;
            uint16_t *dst = p + ((int64_t)r * a->steps + c / 32) * 512 + ri * 32 + c % 32;
            const uint16_t t0 = tops__bf16_ne(e);
            dst[0] = t0;
            if (a->np_terms > 1) dst[(int64_t)2 * a->steps * 512] = tops__bf16_ne(e - tops__bf16_to_f32(t0));
        }
        for (int w = 8; w >= 1; w /= 2)
            for (int u = 0; u < w; u++) acc[u] += acc[u + w];
        l[i] = l[i] * alpha[i] + acc[0];
    }
    return any;
}

void tops__ref_amx_attn_qk(int nds, int steps, const uint16_t *q, const uint16_t *k, int nk, int np,
                           const uint8_t *pa, const uint8_t *pb, float *s, int64_t lds) {
    for (int i = 0; i < 32; i++)
        for (int j = 0; j < 32 * steps; j++) {
            float acc = 0.0f;
            const int r = i / 16, g = j / 16;
            for (int d = 0; d < nds; d++)
                for (int x = 0; x < np; x++) {
                    const uint16_t *at = q + (((int64_t)pa[x] * 2 + r) * nds + d) * 512 + (i % 16) * 32;
                    const uint16_t *bt = k + (((int64_t)g * nk + pb[x]) * nds + d) * 512;
                    for (int e = 0; e < 32; e++)
                        acc += tops__bf16_to_f32(at[e]) * tops__bf16_to_f32(bt[(e / 2) * 32 + (j % 16) * 2 + e % 2]);
                }
            s[i * lds + j] = acc;
        }
}

void tops__ref_amx_attn_pv(int steps, const uint16_t *p, int np_terms_p, const uint16_t *v, int nv, int ncg2, int np,
                           const uint8_t *pa, const uint8_t *pb, const float *alpha, float *o, int64_t ldo) {
    (void)np_terms_p;
    const int ncg = 2 * ncg2;
    for (int i = 0; i < 32; i++)
        for (int c = 0; c < 16 * ncg; c++) {
            float acc = o[i * ldo + c];
            if (alpha) acc *= alpha[i];
            const int r = i / 16, g = c / 16;
            for (int t = 0; t < steps; t++)
                for (int x = 0; x < np; x++) {
                    const uint16_t *at = p + (((int64_t)pa[x] * 2 + r) * steps + t) * 512 + (i % 16) * 32;
                    const uint16_t *bt = v + (((int64_t)t * nv + pb[x]) * ncg + g) * 512;
                    for (int e = 0; e < 32; e++)
                        acc += tops__bf16_to_f32(at[e]) * tops__bf16_to_f32(bt[(e / 2) * 32 + (c % 16) * 2 + e % 2]);
                }
            o[i * ldo + c] = acc;
        }
}

void tops__ref_amx_attn_pack_a(const float *src, int64_t ld, int rows, int chunks, int nt, int64_t term_stride,
                               uint16_t *dst) {
    for (int i = 0; i < rows; i++)
        for (int d = 0; d < chunks; d++)
            for (int x = 0; x < 32; x++) {
                const float v = src[i * ld + 32 * d + x];
                uint16_t *o = dst + d * 512 + i * 32 + x;
                const uint16_t t0 = tops__bf16_ne(v);
                o[0] = t0;
                if (nt > 1) o[term_stride] = tops__bf16_ne(v - tops__bf16_to_f32(t0));
            }
}

void tops__ref_amx_attn_pack_b(const float *src, int64_t ld, int64_t npairs, int ngroups, int nt,
                               int64_t group_stride, int64_t term_stride, uint16_t *dst) {
    for (int64_t k2 = 0; k2 < npairs; k2++)
        for (int g = 0; g < ngroups; g++)
            for (int j = 0; j < 16; j++)
                for (int t = 0; t < 2; t++) {
                    const float v = src[(2 * k2 + t) * ld + 16 * g + j];
                    uint16_t *o = dst + g * group_stride + k2 * 32 + j * 2 + t;
                    const uint16_t t0 = tops__bf16_ne(v);
                    o[0] = t0;
                    if (nt > 1) o[term_stride] = tops__bf16_ne(v - tops__bf16_to_f32(t0));
                }
}

int tops__ref_amx_attn_softmax_qk(const tops__amx_attn_args *a, float *s, int64_t lds, float *m, float *l,
                                  float *alpha, uint16_t *p, const tops__amx_attn_qk_job *next) {
    const int any = tops__ref_amx_attn_softmax(a, s, lds, m, l, alpha, p);
    if (next)
        tops__ref_amx_attn_qk(next->nds, next->steps, next->q, next->k, next->nk, next->np, next->pa, next->pb,
                              next->s, next->lds);
    return any;
}
