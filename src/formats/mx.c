/* OCP MX v1.0 blocks (mxfp8, mxfp8-e5m2, mxfp6, mxfp6-e3m2, mxfp4, mxint8):
   32 elements share an e8m0 scale 2^shared_exp with
   shared_exp = floor(log2(amax)) - emax(element), clamped to [-127, 127];
   elements are cast_saturating(v / 2^shared_exp), ties to even.
   FORMATS.md decisions: an all-zero block stores 0x00 and zero codes; a
   block holding NaN or Inf stores 0xFF (it decodes to NaN). */
#include "formats/codec_impl.h"
#include "formats/elem.h"

#include <float.h>

/* Exponent of the largest normal of each MX element type. */
static int element_emax(tops_dtype dt) {
    switch (dt) {
    case TOPS_DT_E4M3: return 8;
    case TOPS_DT_E5M2: return 15;
    case TOPS_DT_E3M2: return 4;
    case TOPS_DT_E2M3: return 2;
    case TOPS_DT_E2M1: return 2;
    default: return 0; /* mxint8 */
    }
}

/* floor(log2(a)) for finite a > 0, exact (subnormals included). */
static int floor_log2(float a) {
    uint32_t x = tops__f32_bits(a);
    if (x >> 23) return (int)(x >> 23) - 127;
    return -127 - (__builtin_clz(x) - 9);
}

static void mx_encode(const tops__qctx *ctx, const float *x, int64_t n, uint32_t *codes, uint32_t *scale,
                      uint32_t *bias) {
    tops_dtype dt = ctx->info->element;
    float amax = 0.0f;
    int nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!(a <= FLT_MAX)) nonfinite = 1;
        else if (a > amax) amax = a;
    }
    if (nonfinite || amax == 0.0f) {
        *scale = nonfinite ? 0xFFu : 0x00u;
        for (int64_t i = 0; i < n; i++) codes[i] = 0u;
        return;
    }
    int se = floor_log2(amax) - element_emax(dt);
    if (se < -127) se = -127;
    if (se > 127) se = 127;
    *scale = (uint32_t)(se + 127);
    /* Multiplying by the exact power of two 2^-se rounds like dividing. */
    float inv = tops__exp2i(-se);
    for (int64_t i = 0; i < n; i++) codes[i] = tops__encode_elem(dt, x[i] * inv, 1);
}

static void mx_decode(const tops__qctx *ctx, const uint32_t *codes, int64_t n, uint32_t scale, uint32_t bias,
                      float *out) {
    tops_dtype dt = ctx->info->element;
    const float *table = tops__elem_table(dt);
    float s = tops__e8m0_to_f32(scale);
    for (int64_t i = 0; i < n; i++) out[i] = table[codes[i] & 0xFFu] * s;
}

const tops__codec tops__codec_mx = {.encode = mx_encode,
                                    .decode = mx_decode};
