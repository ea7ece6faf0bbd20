/* Element formats: the codecs of the plain element formats (f32 ... u2,
   with the tensor_scale multiplier applied by the generic layer) and of
   the fp8 formats with one f32 scale per row (e4m3-ch, e5m2-ch).  The
   public row casts that use the dispatch table live in src/ops/cast.c. */
#include "formats/codec_impl.h"
#include "formats/elem.h"

#include <float.h>
#include <pthread.h>
#include <string.h>

/* ---- decode tables --------------------------------------------------------------- */

static float decode_tables[TOPS_DT_COUNT_][256];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
    for (int dt = TOPS_DT_NONE + 1; dt < TOPS_DT_COUNT_; dt++) {
        if (tops_dtype_bits((tops_dtype)dt) > 8) continue;
        for (uint32_t c = 0; c < 256; c++) decode_tables[dt][c] = tops__decode_elem((tops_dtype)dt, c);
    }
}

const float *tops__elem_table(tops_dtype dt) {
    pthread_once(&tables_once, build_tables);
    return decode_tables[dt];
}

/* ---- plain element formats ------------------------------------------------------- */

static void plain_encode(const tops__qctx *ctx, const float *x, int64_t n, uint32_t *codes, uint32_t *scale,
                         uint32_t *bias) {
    tops_dtype dt = ctx->info->element;
    for (int64_t i = 0; i < n; i++) codes[i] = tops__encode_elem(dt, x[i], 1);
}

static void plain_decode(const tops__qctx *ctx, const uint32_t *codes, int64_t n, uint32_t scale, uint32_t bias,
                         float *out) {
    tops_dtype dt = ctx->info->element;
    if (ctx->info->element_bits <= 8) {
        const float *table = tops__elem_table(dt);
        for (int64_t i = 0; i < n; i++) out[i] = table[codes[i] & 0xFFu];
        return;
    }
    for (int64_t i = 0; i < n; i++) out[i] = tops__decode_elem(dt, codes[i]);
}

const tops__codec tops__codec_plain = {.encode = plain_encode, .decode = plain_decode};

/* ---- fp8 with one f32 scale per row ---------------------------------------------- */

/* s = amax / max(element), f32; elements cast_saturating(v / s).  A row
   holding NaN or Inf gets a NaN scale (it decodes to NaN); a zero row s = 0. */
static void channel_encode(const tops__qctx *ctx, const float *x, int64_t n, uint32_t *codes, uint32_t *scale,
                           uint32_t *bias) {
    tops_dtype dt = ctx->info->element;
    float emax = dt == TOPS_DT_E4M3 ? 448.0f : 57344.0f;
    float amax = 0.0f;
    int nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!(a <= FLT_MAX)) nonfinite = 1;
        else if (a > amax) amax = a;
    }
    float s = nonfinite ? NAN : amax / emax;
    *scale = tops__f32_bits(s);
    for (int64_t i = 0; i < n; i++)
        codes[i] = nonfinite || s == 0.0f ? 0u : tops__encode_elem(dt, x[i] / s, 1);
}

static void channel_decode(const tops__qctx *ctx, const uint32_t *codes, int64_t n, uint32_t scale, uint32_t bias,
                           float *out) {
    tops_dtype dt = ctx->info->element;
    const float *table = tops__elem_table(dt);
    float s = tops__bits_f32(scale);
    for (int64_t i = 0; i < n; i++) out[i] = table[codes[i] & 0xFFu] * s;
}

const tops__codec tops__codec_channel = {.encode = channel_encode, .decode = channel_decode};
