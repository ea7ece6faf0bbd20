/* ggml's super-block formats (k-quants) and the non-linear 4-bit ones,
   byte for byte (docs/formats.md section 2, "GGUF blocks"):
     q4_K    f16 d | f16 dmin | scales[12] | qs[128]            256 in 144
     q5_K    f16 d | f16 dmin | scales[12] | qh[32] | qs[128]   256 in 176
     q6_K    ql[128] | qh[64] | i8 scales[16] | f16 d           256 in 210
     iq4_nl  f16 d | qs[16]                                      32 in 18
     iq4_xs  f16 d | u16 scales_h | scales_l[4] | qs[128]       256 in 136
   q4_K / q5_K: 8 sub-blocks of 32, each a 6-bit scale sc and min m
   (packed as get_scale_min below), value (d * sc) * q - (dmin * m).
   q6_K: 16 sub-blocks of 16 with int8 scales, value (d * sc) * (q - 32).
   iq4_nl / iq4_xs: codes index the 16-entry table kvalues; iq4_xs has a
   6-bit scale per sub-block of 32 (ls - 32).  Decoding evaluates exactly
   the f32 products and differences that ggml's (and the gguf package's)
   dequantizers do, in the same order, so the bits match.

   The quantizers are tensorops' own, simpler than ggml's reference
   quantizers (whose weighted searches are not reproduced): q4_K / q5_K
   fit each sub-block's scale and min by a small least-squares search
   (refine_affine), q6_K and iq4 take the value of largest magnitude; the
   sub-scales are rounded to their grid against the stored f16
   super-scale, and codes to nearest (ties to even) with the stored
   scales, so that decode is consistent.  Their blocks are valid
   ggml blocks; they are not byte-identical with llama.cpp's output.
   A short last super-block is encoded as if its missing elements were 0.
   A (super-)block holding NaN or +-Inf decodes to NaN in every element:
   its f16 d (and dmin) is NaN, the rest zero bytes. */
#include "formats/codec_impl.h"
#include "formats/elem.h"

#include <float.h>
#include <string.h>

#define QK_K 256
#define F16_NAN 0x7E00u

static const int8_t kvalues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* The f32 value the f16 cast of v stores. */
static float f16_round(float v) { return tops__f16_to_f32(tops__f32_to_f16(v)); }

static int nonfinite(const float *x, int64_t n) {
    for (int64_t j = 0; j < n; j++)
        if (!(fabsf(x[j]) <= FLT_MAX)) return 1;
    return 0;
}
static void load_block(const float *x, int64_t n, float *b, int len) {
    for (int64_t j = 0; j < len; j++) b[j] = j < n ? x[j] : 0.0f;
}
static void poison(uint8_t *blk, int bytes, int d_at, int dmin_at) {
    const uint16_t h = F16_NAN;
    memset(blk, 0, (size_t)bytes);
    memcpy(blk + d_at, &h, 2);
    if (dmin_at >= 0) memcpy(blk + dmin_at, &h, 2);
}
/* ggml's nearest_int is round to nearest even; clamped here first. */
static int rne(float v, int lo, int hi) { return (int)tops__f32_rne_clamp(v, lo, hi); }

/* The 16-entry table entry nearest to v (ties to the larger entry). */
static int nearest_kvalue(float v) {
    if (!(v > (float)kvalues[0])) return 0; /* NaN cannot reach here */
    if (v >= (float)kvalues[15]) return 15;
    int i = 0;
    while (i < 15 && (float)kvalues[i + 1] < v) i++;
    /* kvalues[i] < v <= kvalues[i + 1] */
    return v - (float)kvalues[i] < (float)kvalues[i + 1] - v ? i : i + 1;
}

/* ---- q4_K / q5_K ------------------------------------------------------------ */

/* Sub-block j's 6-bit scale and min from the 12 packed bytes. */
static void get_scale_min(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}
/* Inverse of get_scale_min, for j = 0..7 in order (the bytes start zero). */
static void put_scale_min(int j, uint8_t *q, int sc, int m) {
    if (j < 4) {
        q[j] = (uint8_t)(q[j] | sc);
        q[j + 4] = (uint8_t)(q[j + 4] | m);
    } else {
        q[j + 4] = (uint8_t)((sc & 0xF) | ((m & 0xF) << 4));
        q[j - 4] = (uint8_t)(q[j - 4] | ((sc >> 4) << 6));
        q[j] = (uint8_t)(q[j] | ((m >> 4) << 6));
    }
}

/* A sub-block's scale and min by a small search (the idea of ggml's
   make_qkx2_quants, not its code or its weights): for inverse scales
   around nmax / (hi - lo), round the codes, fit scale and min by least
   squares (min kept at or below 0 as a value, i.e. mins >= 0), and keep
   the pair with the smallest squared error. */
static void refine_affine(const float *x, int nmax, float lo, float hi, float *scale, float *mins) {
    float best = 0.0f;
    for (int l = 0; l < 32; l++) {
        const float q = (float)rne((x[l] - lo) / *scale, 0, nmax), e = *scale * q + lo - x[l];
        best += e * e;
    }
    for (int step = -4; step <= 12; step++) {
        const float is = ((float)nmax + 0.1f * (float)step) / (hi - lo);
        float sq = 0, sx = 0, sqq = 0, sqx = 0;
        int qs[32];
        for (int l = 0; l < 32; l++) {
            qs[l] = rne((x[l] - lo) * is, 0, nmax);
            sq += (float)qs[l], sx += x[l], sqq += (float)(qs[l] * qs[l]), sqx += (float)qs[l] * x[l];
        }
        const float det = 32.0f * sqq - sq * sq;
        if (!(det > 0.0f)) continue;
        float s = (32.0f * sqx - sq * sx) / det, m = (sqq * sx - sq * sqx) / det; /* x ~ s * q + m */
        if (m > 0.0f) { /* keep the offset at or below 0: refit the scale alone */
            m = 0.0f;
            s = sqq > 0.0f ? sqx / sqq : 0.0f;
        }
        if (!(s > 0.0f)) continue;
        float err = 0.0f;
        for (int l = 0; l < 32; l++) {
            const float e = s * (float)qs[l] + m - x[l];
            err += e * e;
        }
        if (err < best) {
            best = err;
            *scale = s;
            *mins = -m;
        }
    }
}

/* q4_K (five = 0, codes 0..15) and q5_K (five = 1, codes 0..31). */
static void affine_k_encode(const float *x, int64_t n, uint8_t *blk, int five) {
    const int bytes = five ? 176 : 144, nmax = five ? 31 : 15;
    if (nonfinite(x, n)) {
        poison(blk, bytes, 0, 2);
        return;
    }
    float b[QK_K];
    load_block(x, n, b, QK_K);
    float scale[8], mins[8], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; j++) {
        float lo = 0.0f, hi = -FLT_MAX; /* ggml keeps the min at or below 0 */
        for (int l = 0; l < 32; l++) {
            float v = b[32 * j + l];
            if (v < lo) lo = v;
            if (v > hi) hi = v;
        }
        scale[j] = hi > lo ? (hi - lo) / (float)nmax : 0.0f;
        mins[j] = -lo;
        if (hi > lo) refine_affine(b + 32 * j, nmax, lo, hi, &scale[j], &mins[j]);
        if (scale[j] > max_scale) max_scale = scale[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    memset(blk, 0, (size_t)bytes);
    const float d = f16_round(max_scale / 63.0f), dmin = f16_round(max_min / 63.0f);
    tops__f16_put(blk, d);
    tops__f16_put(blk + 2, dmin);
    uint8_t *sm = blk + 4, *qh = blk + 16, *qs = blk + (five ? 48 : 16);
    for (int j = 0; j < 8; j++) {
        /* Scale codes against the stored super-scales; a min rounds up so
           that -dmin * m stays at or below the sub-block's smallest value. */
        int ls = d > 0.0f ? rne(scale[j] / d, 0, 63) : 0;
        int lm = dmin > 0.0f ? rne(mins[j] / dmin, 0, 63) : 0;
        if (dmin > 0.0f && lm < 63 && dmin * (float)lm < mins[j]) lm++;
        put_scale_min(j, sm, ls, lm);
        const float dd = d * (float)ls, dm = dmin * (float)lm;
        for (int l = 0; l < 32; l++) {
            int q = dd > 0.0f ? rne((b[32 * j + l] + dm) / dd, 0, nmax) : 0;
            qs[32 * (j / 2) + l] = (uint8_t)(qs[32 * (j / 2) + l] | ((q & 0xF) << (4 * (j % 2))));
            if (five) qh[l] = (uint8_t)(qh[l] | ((q >> 4) << j));
        }
    }
}

static void affine_k_decode(const uint8_t *blk, int64_t lo, int64_t n, float *out, int five) {
    const float d = tops__f16_at(blk), dmin = tops__f16_at(blk + 2);
    const uint8_t *sm = blk + 4, *qh = blk + 16, *qs = blk + (five ? 48 : 16);
    int64_t k = 0;
    while (k < n) { /* one sub-block at a time: its scale and min once */
        const int e0 = (int)(lo + k), j = e0 / 32;
        int sc, m;
        get_scale_min(j, sm, &sc, &m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        const uint8_t *q4 = qs + 32 * (j / 2);
        const int shift = 4 * (j % 2);
        for (int l = e0 % 32; l < 32 && k < n; l++, k++) {
            int q = (q4[l] >> shift) & 0xF;
            if (five) q |= ((qh[l] >> j) & 1) << 4;
            const float p = d1 * (float)q; /* ggml: d1 * q - m1, two roundings */
            out[k] = p - m1;
        }
    }
}

static void q4_k_encode(const float *x, int64_t n, uint8_t *blk) { affine_k_encode(x, n, blk, 0); }
static void q5_k_encode(const float *x, int64_t n, uint8_t *blk) { affine_k_encode(x, n, blk, 1); }
static void q4_k_decode(const uint8_t *blk, int64_t lo, int64_t n, float *out) { affine_k_decode(blk, lo, n, out, 0); }
static void q5_k_decode(const uint8_t *blk, int64_t lo, int64_t n, float *out) { affine_k_decode(blk, lo, n, out, 1); }

/* ---- q6_K ------------------------------------------------------------------- */

/* Element e's 6-bit code (0..63; value code - 32). */
static int q6_code(const uint8_t *blk, int e) {
    const uint8_t *ql = blk, *qh = blk + 128;
    const int h = e / 128, r = e % 128;
    const int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0xF;
    const int hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    return lo | (hi << 4);
}
static void q6_put(uint8_t *blk, int e, int code) {
    uint8_t *ql = blk, *qh = blk + 128;
    const int h = e / 128, r = e % 128;
    ql[64 * h + r % 64] = (uint8_t)(ql[64 * h + r % 64] | ((code & 0xF) << (4 * (r / 64))));
    qh[32 * h + r % 32] = (uint8_t)(qh[32 * h + r % 32] | ((code >> 4) << (2 * (r / 32))));
}

static void q6_k_encode(const float *x, int64_t n, uint8_t *blk) {
    memset(blk, 0, 210);
    if (nonfinite(x, n)) {
        poison(blk, 210, 208, -1);
        return;
    }
    float b[QK_K], scale[16], max_scale = 0.0f, amax_scale = 0.0f;
    load_block(x, n, b, QK_K);
    for (int j = 0; j < 16; j++) {
        float amax = 0.0f, max = 0.0f; /* max: the value of largest magnitude */
        for (int l = 0; l < 16; l++)
            if (fabsf(b[16 * j + l]) > amax) {
                amax = fabsf(b[16 * j + l]);
                max = b[16 * j + l];
            }
        scale[j] = max / -32.0f; /* max lands on code -32 */
        if (fabsf(scale[j]) > amax_scale) {
            amax_scale = fabsf(scale[j]);
            max_scale = scale[j];
        }
    }
    const float d = amax_scale > 0.0f ? f16_round(max_scale / -128.0f) : 0.0f;
    tops__f16_put(blk + 208, d);
    for (int j = 0; j < 16; j++) {
        const int sc = d != 0.0f ? rne(scale[j] / d, -128, 127) : 0;
        blk[192 + j] = (uint8_t)(int8_t)sc;
        const float dl = d * (float)sc;
        for (int l = 0; l < 16; l++) {
            const int q = dl != 0.0f ? rne(b[16 * j + l] / dl, -32, 31) : 0;
            q6_put(blk, 16 * j + l, q + 32);
        }
    }
}

static void q6_k_decode(const uint8_t *blk, int64_t lo, int64_t n, float *out) {
    const float d = tops__f16_at(blk + 208);
    int64_t k = 0;
    while (k < n) {
        const int e0 = (int)(lo + k);
        const float dl = d * (float)(int8_t)blk[192 + e0 / 16];
        for (int e = e0; e < (e0 / 16 + 1) * 16 && k < n; e++, k++) out[k] = dl * (float)(q6_code(blk, e) - 32);
    }
}

/* ---- iq4_nl ------------------------------------------------------------------ */

static void iq4_nl_encode(const float *x, int64_t n, uint8_t *blk) {
    memset(blk, 0, 18);
    if (nonfinite(x, n)) {
        poison(blk, 18, 0, -1);
        return;
    }
    float b[32], amax = 0.0f, max = 0.0f;
    load_block(x, n, b, 32);
    for (int j = 0; j < 32; j++)
        if (fabsf(b[j]) > amax) {
            amax = fabsf(b[j]);
            max = b[j];
        }
    const float d = f16_round(max / (float)kvalues[0]), id = d != 0.0f ? 1.0f / d : 0.0f;
    tops__f16_put(blk, d);
    for (int j = 0; j < 32; j++) {
        const int q = nearest_kvalue(b[j] * id);
        blk[2 + j % 16] = (uint8_t)(blk[2 + j % 16] | (q << (4 * (j / 16))));
    }
}

static void iq4_nl_decode(const uint8_t *blk, int64_t lo, int64_t n, float *out) {
    const float d = tops__f16_at(blk);
    for (int64_t k = 0; k < n; k++) {
        const int j = (int)(lo + k);
        out[k] = d * (float)kvalues[(blk[2 + j % 16] >> (4 * (j / 16))) & 0xF];
    }
}

/* ---- iq4_xs ------------------------------------------------------------------ */

static int iq4_xs_ls(const uint8_t *blk, int j) {
    uint16_t h;
    memcpy(&h, blk + 2, 2);
    return (((blk[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((h >> (2 * j)) & 3) << 4)) - 32;
}

static void iq4_xs_encode(const float *x, int64_t n, uint8_t *blk) {
    memset(blk, 0, 136);
    if (nonfinite(x, n)) {
        poison(blk, 136, 0, -1);
        return;
    }
    float b[QK_K], scale[8], max_scale = 0.0f, amax_scale = 0.0f;
    load_block(x, n, b, QK_K);
    for (int j = 0; j < 8; j++) {
        float amax = 0.0f, max = 0.0f;
        for (int l = 0; l < 32; l++)
            if (fabsf(b[32 * j + l]) > amax) {
                amax = fabsf(b[32 * j + l]);
                max = b[32 * j + l];
            }
        scale[j] = max / (float)kvalues[0];
        if (fabsf(scale[j]) > amax_scale) {
            amax_scale = fabsf(scale[j]);
            max_scale = scale[j];
        }
    }
    const float d = f16_round(-max_scale / 32.0f);
    tops__f16_put(blk, d);
    uint16_t h = 0;
    for (int j = 0; j < 8; j++) {
        const int ls = d != 0.0f ? rne(scale[j] / d, -32, 31) : 0;
        const int u = ls + 32;
        blk[4 + j / 2] = (uint8_t)(blk[4 + j / 2] | ((u & 0xF) << (4 * (j % 2))));
        h = (uint16_t)(h | ((u >> 4) << (2 * j)));
        const float dl = d * (float)ls, idl = dl != 0.0f ? 1.0f / dl : 0.0f;
        uint8_t *qs = blk + 8 + 16 * j;
        for (int l = 0; l < 32; l++) {
            const int q = nearest_kvalue(b[32 * j + l] * idl);
            qs[l % 16] = (uint8_t)(qs[l % 16] | (q << (4 * (l / 16))));
        }
    }
    memcpy(blk + 2, &h, 2);
}

static void iq4_xs_decode(const uint8_t *blk, int64_t lo, int64_t n, float *out) {
    const float d = tops__f16_at(blk);
    int64_t k = 0;
    while (k < n) {
        const int e0 = (int)(lo + k), j = e0 / 32;
        const float dl = d * (float)iq4_xs_ls(blk, j);
        const uint8_t *qs = blk + 8 + 16 * j;
        for (int l = e0 % 32; l < 32 && k < n; l++, k++) out[k] = dl * (float)kvalues[(qs[l % 16] >> (4 * (l / 16))) & 0xF];
    }
}

const tops__codec tops__codec_q4_k = {.raw_elems = QK_K, .raw_bytes = 144, .encode_raw = q4_k_encode,
                                      .decode_raw = q4_k_decode};
const tops__codec tops__codec_q5_k = {.raw_elems = QK_K, .raw_bytes = 176, .encode_raw = q5_k_encode,
                                      .decode_raw = q5_k_decode};
const tops__codec tops__codec_q6_k = {.raw_elems = QK_K, .raw_bytes = 210, .encode_raw = q6_k_encode,
                                      .decode_raw = q6_k_decode};
const tops__codec tops__codec_iq4_nl = {.raw_elems = 32, .raw_bytes = 18, .encode_raw = iq4_nl_encode,
                                        .decode_raw = iq4_nl_decode};
const tops__codec tops__codec_iq4_xs = {.raw_elems = QK_K, .raw_bytes = 136, .encode_raw = iq4_xs_encode,
                                        .decode_raw = iq4_xs_decode};
