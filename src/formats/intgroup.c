/* Integer groups (FORMATS.md section 2).
   Symmetric int8/int4/int2-gG: s = amax / qmax in the stored scale dtype
   (f16, bf16, f32 or e8m0, rounded with the saturating cast), then
   q = clamp(rne(v / s_stored), -qmax, qmax) so decode q * s_stored is
   consistent; an all-zero group stores s = 0 (e8m0: 0x00) and q = 0.
   Affine int4-gG-affine: s = (max - min) / 15 and bias = min, both f16;
   q = clamp(rne((v - bias_stored) / s_stored), 0, 15); decode s*q + bias.
   A group holding NaN or Inf stores NaN scales (it decodes to NaN). */
#include "formats/codec_impl.h"
#include "formats/elem.h"

#include <float.h>

static void zero_codes(uint32_t *codes, int64_t n) {
    for (int64_t i = 0; i < n; i++) codes[i] = 0u;
}

static void sym_encode(const tops__qctx *ctx, const float *x, int64_t n, uint32_t *codes, uint32_t *scale,
                       uint32_t *bias) {
    int bits = ctx->info->element_bits;
    int32_t qmax = (1 << (bits - 1)) - 1;
    tops_dtype sdt = ctx->scale_dtype;
    float amax = 0.0f;
    int nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!(a <= FLT_MAX)) nonfinite = 1;
        else if (a > amax) amax = a;
    }
    if (nonfinite) {
        *scale = tops__encode_elem(sdt, NAN, 1);
        zero_codes(codes, n);
        return;
    }
    *scale = tops__encode_elem(sdt, amax / (float)qmax, 1);
    float s = tops__decode_elem(sdt, *scale);
    if (amax == 0.0f || s == 0.0f) {
        zero_codes(codes, n);
        return;
    }
    uint32_t mask = (1u << bits) - 1u;
    for (int64_t i = 0; i < n; i++) codes[i] = (uint32_t)tops__f32_rne_clamp(x[i] / s, -qmax, qmax) & mask;
}

static void sym_decode(const tops__qctx *ctx, const uint32_t *codes, int64_t n, uint32_t scale, uint32_t bias,
                       float *out) {
    const float *table = tops__elem_table(ctx->info->element);
    float s = tops__decode_elem(ctx->scale_dtype, scale);
    for (int64_t i = 0; i < n; i++) out[i] = table[codes[i] & 0xFFu] * s;
}

const tops__codec tops__codec_intgroup = {.encode = sym_encode, .decode = sym_decode};

static void affine_encode(const tops__qctx *ctx, const float *x, int64_t n, uint32_t *codes, uint32_t *scale,
                          uint32_t *bias) {
    int32_t qmax = (1 << ctx->info->element_bits) - 1;
    float lo = FLT_MAX, hi = -FLT_MAX;
    int nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!(fabsf(x[i]) <= FLT_MAX)) nonfinite = 1;
        else {
            if (x[i] < lo) lo = x[i];
            if (x[i] > hi) hi = x[i];
        }
    }
    if (nonfinite) {
        *scale = *bias = tops__encode_elem(TOPS_DT_F16, NAN, 1);
        zero_codes(codes, n);
        return;
    }
    *scale = tops__encode_elem(TOPS_DT_F16, (hi - lo) / (float)qmax, 1);
    *bias = tops__encode_elem(TOPS_DT_F16, lo, 1);
    float s = tops__f16_to_f32((uint16_t)*scale), b = tops__f16_to_f32((uint16_t)*bias);
    if (s == 0.0f) {
        zero_codes(codes, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) codes[i] = (uint32_t)tops__f32_rne_clamp((x[i] - b) / s, 0, qmax);
}

static void affine_decode(const tops__qctx *ctx, const uint32_t *codes, int64_t n, uint32_t scale, uint32_t bias,
                          float *out) {
    float s = tops__f16_to_f32((uint16_t)scale), b = tops__f16_to_f32((uint16_t)bias);
    for (int64_t i = 0; i < n; i++) out[i] = s * (float)codes[i] + b;
}

const tops__codec tops__codec_affine = {.encode = affine_encode, .decode = affine_decode};
