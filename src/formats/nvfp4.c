/* NVFP4 (TransformerEngine's rule, FORMATS.md section 2): one f32 tensor
   scale S_enc = 448*6 / amax(tensor) (1 if amax is 0), stored in
   tensor_scale; per 16-block s_b = ue4m3(amax_b * S_enc / 6); elements
   e2m1_sat(v * S_enc / s_b); decode q * s_b / S_enc.  NaN and Inf are left
   out of the tensor amax; a block holding them gets the NaN scale 0x7F. */
#include "formats/codec_impl.h"
#include "formats/elem.h"

#include <float.h>

#define NVFP4_SCALE_NAN 0x7Fu

static float finite_amax(const float *x, int64_t n, int *nonfinite) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!(a <= FLT_MAX)) *nonfinite = 1;
        else if (a > amax) amax = a;
    }
    return amax;
}

typedef struct amax_walk {
    const tops_tensor *src;
    float *row;
    float amax;
} amax_walk;

static tops_status amax_row(void *user, const int64_t *idx) {
    amax_walk *w = user;
    int last = w->src->rank - 1, nonfinite = 0;
    tops__gather_f32(w->src, idx, last, w->src->extent[last], w->row);
    float a = finite_amax(w->row, w->src->extent[last], &nonfinite);
    if (a > w->amax) w->amax = a;
    return TOPS_OK;
}

static tops_status nvfp4_prepare(tops__qctx *ctx, const tops_tensor *src, tops_tensor *dst) {
    int last = src->rank - 1;
    amax_walk w = {src, malloc((size_t)src->extent[last] * sizeof(float)), 0.0f};
    if (!w.row) return tops__fail(TOPS_OUT_OF_MEMORY, "tops_quantize", "could not allocate a row of %lld floats",
                                  (long long)src->extent[last]);
    tops__for_each_index(src->extent, src->rank, last, amax_row, &w);
    free(w.row);
    float s_enc = w.amax > 0.0f ? 448.0f * 6.0f / w.amax : 1.0f;
    if (!(s_enc <= FLT_MAX)) s_enc = FLT_MAX; /* amax below 2688 / FLT_MAX */
    ctx->tensor_scale = s_enc;
    dst->tensor_scale = s_enc;
    return TOPS_OK;
}

static void nvfp4_encode(const tops__qctx *ctx, const float *x, int64_t n, uint32_t *codes, uint32_t *scale,
                         uint32_t *bias) {
    int nonfinite = 0;
    float amax = finite_amax(x, n, &nonfinite);
    float s_enc = ctx->tensor_scale;
    if (nonfinite) {
        *scale = NVFP4_SCALE_NAN;
        for (int64_t i = 0; i < n; i++) codes[i] = 0u;
        return;
    }
    uint8_t sb = tops__f32_to_ue4m3(amax * s_enc / 6.0f, 1);
    float s = tops__ue4m3_to_f32(sb);
    *scale = sb;
    for (int64_t i = 0; i < n; i++) codes[i] = s == 0.0f ? 0u : tops__f32_to_e2m1(x[i] * s_enc / s, 1);
}

static void nvfp4_decode(const tops__qctx *ctx, const uint32_t *codes, int64_t n, uint32_t scale, uint32_t bias,
                         float *out) {
    const float *table = tops__elem_table(TOPS_DT_E2M1);
    float s = tops__ue4m3_to_f32(scale), s_enc = ctx->tensor_scale;
    for (int64_t i = 0; i < n; i++) out[i] = table[codes[i] & 0xFu] * s / s_enc;
}

const tops__codec tops__codec_nvfp4 = {.prepare = nvfp4_prepare, .encode = nvfp4_encode, .decode = nvfp4_decode};
