/* Element formats: the public row casts (tops_cast_from_f32 / _to_f32), the
   codecs of the plain element formats (f32 ... u2, with the tensor_scale
   multiplier applied by the generic layer) and of the fp8 formats with one
   f32 scale per row (e4m3-ch, e5m2-ch). */
#include "cpu/dispatch.h"
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

/* ---- packed sub-byte rows ------------------------------------------------------- */

/* Writes n codes of `bits` (2, 4 or 6) lowest first into ceil(n*bits/8)
   bytes; the unused high bits of the last byte are zero. */
static void pack_codes(uint8_t *out, const uint32_t *codes, int64_t n, int bits) {
    uint32_t acc = 0;
    int have = 0;
    uint32_t mask = (1u << bits) - 1u;
    for (int64_t i = 0; i < n; i++) {
        acc |= (codes[i] & mask) << have;
        have += bits;
        while (have >= 8) {
            *out++ = (uint8_t)acc;
            acc >>= 8;
            have -= 8;
        }
    }
    if (have > 0) *out = (uint8_t)acc;
}

static uint32_t unpack_code(const uint8_t *in, int64_t i, int bits) {
    uint64_t bit = (uint64_t)i * (uint64_t)bits;
    const uint8_t *p = in + (bit >> 3);
    unsigned sh = (unsigned)(bit & 7);
    uint32_t v = p[0];
    if (sh + (unsigned)bits > 8) v |= (uint32_t)p[1] << 8;
    return (v >> sh) & ((1u << bits) - 1u);
}

/* Rows are cast in chunks so the generic path needs no allocation. */
#define CHUNK 256

tops_status tops_cast_from_f32(tops_dtype dst, void *out, const float *in, int64_t n, int saturate) {
    static const char fn[] = "tops_cast_from_f32";
    if ((int)dst <= TOPS_DT_NONE || dst >= TOPS_DT_COUNT_ || dst == TOPS_DT_I32)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "dst dtype %d is not an element dtype (none and i32 are not)",
                          (int)dst);
    if (n < 0) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "n is %lld; it must be >= 0", (long long)n);
    if (saturate != 0 && saturate != 1)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "saturate is %d; it must be 0 or 1", saturate);
    if (n == 0) return TOPS_OK;
    if (!out || !in) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out and in must not be NULL");
    const tops__kernels *k = tops__kernels_get();
    int bits = tops_dtype_bits(dst);
    switch (dst) {
    case TOPS_DT_F32: memmove(out, in, (size_t)n * 4); return TOPS_OK;
    case TOPS_DT_F16:
        if (!saturate) {
            k->f32_to_f16_row(out, in, n);
            return TOPS_OK;
        }
        break;
    case TOPS_DT_BF16:
        if (!saturate) {
            k->f32_to_bf16_row(out, in, n);
            return TOPS_OK;
        }
        break;
    case TOPS_DT_E4M3: k->f32_to_e4m3_row(out, in, n, saturate); return TOPS_OK;
    case TOPS_DT_E5M2: k->f32_to_e5m2_row(out, in, n, saturate); return TOPS_OK;
    default: break;
    }
    uint32_t codes[CHUNK];
    uint8_t *o = out;
    for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
        int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        for (int64_t i = 0; i < m; i++) codes[i] = tops__encode_elem(dst, in[i0 + i], saturate);
        if (bits >= 8) {
            for (int64_t i = 0; i < m; i++) {
                if (bits == 16) {
                    uint16_t h = (uint16_t)codes[i];
                    memcpy(o + (i0 + i) * 2, &h, 2);
                } else {
                    o[i0 + i] = (uint8_t)codes[i];
                }
            }
        } else {
            /* CHUNK is a multiple of 4, so each chunk starts on a byte. */
            pack_codes(o + i0 * bits / 8, codes, m, bits);
        }
    }
    return TOPS_OK;
}

tops_status tops_cast_to_f32(tops_dtype src, float *out, const void *in, int64_t n) {
    static const char fn[] = "tops_cast_to_f32";
    if ((int)src <= TOPS_DT_NONE || src >= TOPS_DT_COUNT_ || src == TOPS_DT_I32)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "src dtype %d is not an element dtype (none and i32 are not)",
                          (int)src);
    if (n < 0) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "n is %lld; it must be >= 0", (long long)n);
    if (n == 0) return TOPS_OK;
    if (!out || !in) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out and in must not be NULL");
    const tops__kernels *k = tops__kernels_get();
    const uint8_t *p = in;
    int bits = tops_dtype_bits(src);
    switch (src) {
    case TOPS_DT_F32: memmove(out, in, (size_t)n * 4); return TOPS_OK;
    case TOPS_DT_F16: k->f16_to_f32_row(out, in, n); return TOPS_OK;
    case TOPS_DT_BF16: k->bf16_to_f32_row(out, in, n); return TOPS_OK;
    case TOPS_DT_E4M3: k->e4m3_to_f32_row(out, in, n); return TOPS_OK;
    case TOPS_DT_E5M2: k->e5m2_to_f32_row(out, in, n); return TOPS_OK;
    case TOPS_DT_E2M1: k->e2m1_to_f32_row(out, in, n); return TOPS_OK;
    case TOPS_DT_I4: k->i4_to_f32_row(out, in, n); return TOPS_OK;
    default: break;
    }
    for (int64_t i = 0; i < n; i++) {
        uint32_t c = bits == 8 ? p[i] : unpack_code(p, i, bits);
        out[i] = tops__decode_elem(src, c);
    }
    return TOPS_OK;
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
