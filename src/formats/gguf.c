/* GGUF-compatible blocks of 32, byte-exact with ggml's reference quantizers
   (quantize_row_*_ref) and decoders (FORMATS.md section 4):
     q4_0        f16 d | qs[16]   d = max/-8 (max = the value of largest
                 magnitude), q = min(15, (int8)(x/d + 8.5)), value (q-8)*d
     q4_1        f16 d | f16 m | qs[16]   d = (max-min)/15, m = min,
                 q = min(15, (int8)((x-m)/d + 0.5)), value q*d + m
     q8_0        f16 d | i8 qs[32]   d = amax/127, q = roundf(x/d)
     gguf-mxfp4  u8 e | qs[16]   e = floor(log2(amax)) - 2 + 127, values the
                 e2m1 table doubled times 2^(e-128), nearest by |error|
   Nibbles: element j in the low half of qs[j], element j+16 in the high.
   Like ggml, x/d is computed as x * (1/d).  The last block of a row may be
   short: its missing elements are taken as 0 for the block statistics of
   q4_0, q8_0 and mxfp4 (0 never changes amax) and left out of q4_1's
   min/max; their codes are written as if they were 0.
   A block holding NaN or +-Inf (among its n real elements) decodes to NaN
   in every element (FORMATS.md's one NaN/Inf rule): its f16 d (and q4_1's
   m) is NaN, or gguf-mxfp4's e is 0xFF, the e8m0 NaN, and its codes are
   those of 0.  ggml's quantizers never write e = 0xFF (finite blocks give
   at most 252), so ggml's blocks decode as ggml decodes them. */
#include "formats/codec_impl.h"
#include "formats/elem.h"

#include <float.h>
#include <string.h>

#define QK 32

/* (int8_t)t then min(15, .) for the t ggml produces (finite t in [0, 17)). */
static uint8_t trunc_nibble(float t, uint8_t nan_code) {
    if (!(t >= -128.0f && t < 128.0f)) return t != t ? nan_code : (t > 0 ? 15 : 0);
    int v = (int)(int8_t)(int)t;
    return (uint8_t)(v > 15 ? 15 : (v < 0 ? v & 0xF : v));
}

static void load_block(const float *x, int64_t n, float *b) {
    for (int64_t j = 0; j < QK; j++) b[j] = j < n ? x[j] : 0.0f;
}

/* Whether the n real elements hold NaN or +-Inf. */
static int nonfinite(const float *x, int64_t n) {
    for (int64_t j = 0; j < n; j++)
        if (!(fabsf(x[j]) <= FLT_MAX)) return 1;
    return 0;
}

#define F16_NAN 0x7E00u
/* The poisoned block: NaN f16 headers (d at 0, m at 2 for q4_1), zero codes. */
static void nan_block(uint8_t *blk, int headers, int bytes, uint8_t zero_codes) {
    const uint16_t h = F16_NAN;
    for (int i = 0; i < headers; i++) memcpy(blk + 2 * i, &h, 2);
    memset(blk + 2 * headers, zero_codes, (size_t)(bytes - 2 * headers));
}

/* ---- q4_0 ---- */
static void q4_0_encode(const float *x, int64_t n, uint8_t *blk) {
    if (nonfinite(x, n)) { /* codes 8: the value 0 */
        nan_block(blk, 1, 18, 0x88);
        return;
    }
    float b[QK];
    load_block(x, n, b);
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK; j++)
        if (amax < fabsf(b[j])) {
            amax = fabsf(b[j]);
            max = b[j];
        }
    float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    tops__f16_put(blk, d);
    for (int j = 0; j < QK / 2; j++) {
        uint8_t lo = trunc_nibble(b[j] * id + 8.5f, 8), hi = trunc_nibble(b[j + QK / 2] * id + 8.5f, 8);
        blk[2 + j] = (uint8_t)(lo | (hi << 4));
    }
}
static void q4_0_decode(const uint8_t *blk, int64_t lo, int64_t n, float *out) {
    float d = tops__f16_at(blk);
    for (int64_t k = 0; k < n; k++) {
        int64_t j = lo + k;
        int q = j < QK / 2 ? (blk[2 + j] & 0xF) : (blk[2 + j - QK / 2] >> 4);
        out[k] = (float)(q - 8) * d;
    }
}

/* ---- q4_1 ---- */
static void q4_1_encode(const float *x, int64_t n, uint8_t *blk) {
    if (nonfinite(x, n)) {
        nan_block(blk, 2, 20, 0);
        return;
    }
    float b[QK];
    load_block(x, n, b);
    float min = FLT_MAX, max = -FLT_MAX;
    for (int64_t j = 0; j < n; j++) {
        if (b[j] < min) min = b[j];
        if (b[j] > max) max = b[j];
    }
    for (int64_t j = n; j < QK; j++) b[j] = min; /* padding codes 0 */
    float d = (max - min) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    tops__f16_put(blk, d);
    tops__f16_put(blk + 2, min);
    for (int j = 0; j < QK / 2; j++) {
        uint8_t lo = trunc_nibble((b[j] - min) * id + 0.5f, 0), hi = trunc_nibble((b[j + QK / 2] - min) * id + 0.5f, 0);
        blk[4 + j] = (uint8_t)(lo | (hi << 4));
    }
}
static void q4_1_decode(const uint8_t *blk, int64_t lo, int64_t n, float *out) {
    float d = tops__f16_at(blk), m = tops__f16_at(blk + 2);
    for (int64_t k = 0; k < n; k++) {
        int64_t j = lo + k;
        int q = j < QK / 2 ? (blk[4 + j] & 0xF) : (blk[4 + j - QK / 2] >> 4);
        out[k] = (float)q * d + m;
    }
}

/* ---- q8_0 ---- */
static void q8_0_encode(const float *x, int64_t n, uint8_t *blk) {
    if (nonfinite(x, n)) {
        nan_block(blk, 1, 34, 0);
        return;
    }
    float b[QK];
    load_block(x, n, b);
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) {
        float a = fabsf(b[j]);
        amax = amax > a ? amax : a; /* MAX(amax, |x|) as ggml writes it */
    }
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    tops__f16_put(blk, d);
    for (int j = 0; j < QK; j++) {
        float r = roundf(b[j] * id);
        blk[2 + j] = (uint8_t)(int8_t)(r == r && fabsf(r) <= 127.0f ? (int)r : 0);
    }
}
static void q8_0_decode(const uint8_t *blk, int64_t lo, int64_t n, float *out) {
    float d = tops__f16_at(blk);
    for (int64_t k = 0; k < n; k++) out[k] = (float)(int8_t)blk[2 + lo + k] * d;
}

/* ---- ggml mxfp4 ---- */
static const int8_t mxfp4_doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* 2^(e - 128): ggml's E8M0 "half" scale, which absorbs the doubled table;
   0xFF is NaN (ggml's quantizer never writes it). */
static float e8m0_half(uint8_t e) { return e == 0xFF ? NAN : tops__exp2i((int)e - 128); }

static void gguf_mxfp4_encode(const float *x, int64_t n, uint8_t *blk) {
    if (nonfinite(x, n)) {
        blk[0] = 0xFF;
        memset(blk + 1, 0, 16);
        return;
    }
    float b[QK];
    load_block(x, n, b);
    float amax = 0.0f;
    for (int j = 0; j < QK; j++)
        if (amax < fabsf(b[j])) amax = fabsf(b[j]);
    uint8_t e = 0;
    if (amax > 0.0f) {
        /* ggml: (uint8_t)(floorf(log2f(amax)) - 2 + 127); clamped where that cast is undefined. */
        float t = floorf(log2f(amax)) - 2.0f + 127.0f;
        e = t < 0.0f ? 0 : (t > 255.0f ? 255 : (uint8_t)t);
    }
    float d = e8m0_half(e);
    blk[0] = e;
    for (int j = 0; j < QK / 2; j++) {
        uint8_t q[2];
        for (int h = 0; h < 2; h++) {
            float v = b[j + h * QK / 2];
            int best = 0;
            float best_err = fabsf((float)mxfp4_doubled[0] * d - v);
            for (int i = 1; i < 16; i++) {
                float err = fabsf((float)mxfp4_doubled[i] * d - v);
                if (err < best_err) {
                    best = i;
                    best_err = err;
                }
            }
            q[h] = (uint8_t)best;
        }
        blk[1 + j] = (uint8_t)(q[0] | (q[1] << 4));
    }
}
static void gguf_mxfp4_decode(const uint8_t *blk, int64_t lo, int64_t n, float *out) {
    float d = e8m0_half(blk[0]);
    for (int64_t k = 0; k < n; k++) {
        int64_t j = lo + k;
        int q = j < QK / 2 ? (blk[1 + j] & 0xF) : (blk[1 + j - QK / 2] >> 4);
        out[k] = (float)mxfp4_doubled[q] * d;
    }
}

const tops__codec tops__codec_q4_0 = {.raw_elems = QK, .raw_bytes = 18, .encode_raw = q4_0_encode,
                                      .decode_raw = q4_0_decode};
const tops__codec tops__codec_q4_1 = {.raw_elems = QK, .raw_bytes = 20, .encode_raw = q4_1_encode,
                                      .decode_raw = q4_1_decode};
const tops__codec tops__codec_q8_0 = {.raw_elems = QK, .raw_bytes = 34, .encode_raw = q8_0_encode,
                                      .decode_raw = q8_0_decode};
const tops__codec tops__codec_gguf_mxfp4 = {.raw_elems = QK, .raw_bytes = 17, .encode_raw = gguf_mxfp4_encode,
                                            .decode_raw = gguf_mxfp4_decode};
