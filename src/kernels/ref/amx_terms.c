/* Scalar twins of the AMX bf16-term weight decoders (kernels/kernels.h,
   tops__amx_terms_q8_fn, tops__amx_terms_f32_fn,
   tops__amx_terms_q8_min_fn): the reference the AVX-512 ones
   (src/kernels/amx/gemm_bf16t_amx.c) match bit for bit, and what the
   driver runs over emulated tiles in the tests. */
#include "kernels/kernels.h"
#include "kernels/ref/bf16_ne.h"

#include <string.h>

/* The terms of w into out[u * 512] (u < nslots); *nz |= 1 << u for each
   term with a non-zero magnitude. */
static void terms(float w, int nslots, uint16_t *out, unsigned *nz) {
    for (int u = 0; u < nslots; u++) {
        const uint16_t t = tops__bf16_ne(w);
        out[u * 512] = t;
        if (t & 0x7fffu) *nz |= 1u << u;
        w -= tops__bf16_to_f32(t);
    }
}

static int used(unsigned nz, int nslots) {
    int n = 1;
    for (int u = 1; u < nslots; u++)
        if (nz >> u) n = u + 1;
    return n;
}

int tops__ref_amx_terms_q8(const int8_t *panel, const float *scales, int sub, int64_t kc, int nslots, uint16_t *out) {
    unsigned nz = 0;
    for (int64_t k = 0; k < kc; k++)
        for (int j = 0; j < 16; j++) {
            const float w = (float)panel[(k / 4) * 64 + j * 4 + k % 4] * scales[(k / sub) * 16 + j];
            terms(w, nslots, out + (k / 32) * nslots * 512 + ((k % 32) / 2) * 32 + j * 2 + k % 2, &nz);
        }
    return used(nz, nslots);
}

void tops__ref_amx_terms_q8_min(const int8_t *panel, const float *scales, const float *mins, int sub, int64_t kc,
                                uint16_t *out) {
    for (int64_t k = 0; k < kc; k++)
        for (int j = 0; j < 16; j++) {
            float w = (float)panel[(k / 4) * 64 + j * 4 + k % 4] * scales[(k / sub) * 16 + j];
            w -= mins[(k / sub) * 16 + j];
            out[(k / 32) * 512 + ((k % 32) / 2) * 32 + j * 2 + k % 2] = tops__bf16_ne(w);
        }
}

int tops__ref_amx_terms_f32(const float *src, int64_t ld, int64_t kc, int nslots, uint16_t *out) {
    unsigned nz = 0;
    for (int64_t k = 0; k < kc; k++)
        for (int j = 0; j < 16; j++)
            terms(src[k * ld + j], nslots, out + (k / 32) * nslots * 512 + ((k % 32) / 2) * 32 + j * 2 + k % 2, &nz);
    return used(nz, nslots);
}

void tops__ref_amx_nib_expand(const uint8_t *nib, const int8_t *lut, int64_t rows, int8_t *out) {
    for (int64_t r = 0; r < rows; r++)
        for (int x = 0; x < 64; x++) {
            const uint8_t b = nib[(r / 2) * 64 + x];
            out[r * 64 + x] = lut[r % 2 ? b >> 4 : b & 15];
        }
}
