/* Scalar integer forms (the truth for the AVX2 unpackers), one per layout
   family of core/intform.h, and the 16-entry table row of lut4.  They read
   memory and the weight's layout only (tops__qweight, kernels/kernels.h):
   4- and 6-bit codes go through the layout's map (e2m1 codes become
   doubled integers, e2m3 ones eightfold, iq4 codes their table entries),
   the layout's unit riding in the scales through w->mul. */
#include "kernels/kernels.h"
#include "core/numeric.h"
#include "kernels/ref/kquant.h"

#include <math.h>
#include <string.h>

float tops__ref_scale_entry(tops_dtype dt, const uint8_t *e) {
    if (dt == TOPS_DT_E8M0) return tops__e8m0_to_f32(*e);
    if (dt == TOPS_DT_UE4M3) return tops__ue4m3_to_f32(*e);
    if (dt == TOPS_DT_F32) {
        float v;
        memcpy(&v, e, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, e, 2);
    return dt == TOPS_DT_BF16 ? tops__bf16_to_f32(h) : tops__f16_to_f32(h);
}

/* Element code i of a row of sub-byte or byte codes. */
static inline uint32_t code_at(const uint8_t *row, int bits, int64_t i) {
    if (bits == 8) return row[i];
    if (bits == 6) return tops__fp6_code(row, i);
    if (bits == 4) return (row[i >> 1] >> ((i & 1) * 4)) & 0xFu;
    return (row[i >> 2] >> ((i & 3) * 2)) & 0x3u;
}


/* The header scale of a self-contained block (TOPS__IF_BLOCKS). */
static inline float block_scale(const tops__qweight *w, const uint8_t *blk) {
    if (w->lay.scale_enc == TOPS__SE_E8M0_HALF) return tops__e8m0_half_to_f32(blk[0]);
    return tops__f16_at(blk);
}

/* Scales of the element-plane formats: one per sub-block. */
void tops__ref_unpack_scales(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *scale) {
    const int sub = w->sub;
    const int64_t K = w->k, nb = n / sub;
    if (!w->scales) {
        for (int64_t b = 0; b < nb; b++) scale[b] = w->mul;
        return;
    }
    const uint8_t *base = w->scales + row * w->scale_row;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t k = k0 + b * sub;
        /* beyond K: q is 0 */
        scale[b] = k >= K ? w->mul : tops__ref_scale_entry(w->scale_dtype, base + (k / w->group) * w->scale_step) * w->mul;
    }
}

/* TOPS__IF_CODES: one code per element (int groups, plain integers, MX
   fp4/int8, nvfp4). */
void tops__ref_unpack_codes(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q) {
    const int64_t K = w->k;
    const uint8_t *data = w->data + row * w->row_bytes;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = k0 + i;
        int v = 0;
        if (k < K) {
            uint32_t c = code_at(data, w->lay.code_bits, k);
            v = w->lay.code_bits == 4 || w->lay.code_bits == 6 ? w->lay.map[c] : tops__sext(c, w->lay.code_bits);
        }
        q[i] = (int8_t)v;
    }
}

static void unpack_elements(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    tops__ref_unpack_codes(w, row, k0, n, q);
    tops__ref_unpack_scales(w, row, k0, n, scale);
}

/* Mins of the element-plane formats with a bias plane (element = q *
   scale + bias: min = -bias, times the multiplier), one per sub-block; 0
   beyond K. */
void tops__ref_unpack_code_mins(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *min) {
    const uint8_t *base = w->bias + row * w->bias_row;
    for (int64_t b = 0; b < n / w->sub; b++) {
        const int64_t k = k0 + b * w->sub;
        min[b] = k >= w->k ? 0.0f : -(tops__ref_scale_entry(w->bias_dtype, base + (k / w->group) * w->bias_step) * w->mul);
    }
}
static void unpack_elements_min(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale,
                                float *min) {
    unpack_elements(w, row, k0, n, q, scale);
    tops__ref_unpack_code_mins(w, row, k0, n, min);
}

/* TOPS__IF_BLOCKS: blocks of 32, the scale (and min) in the header, codes
   as split nibbles through map or as i8; the decoders' f32 products. */
static void unpack_blocks_any(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale,
                              float *min) {
    const int64_t K = w->k;
    const uint8_t *data = w->data + row * w->row_bytes;
    for (int64_t b = 0; b < n / 32; b++) {
        int64_t kb = k0 + b * 32;
        int8_t *qb = q + b * 32;
        if (kb >= K) {
            memset(qb, 0, 32);
            scale[b] = 0.0f;
            if (min) min[b] = 0.0f;
            continue;
        }
        const uint8_t *blk = data + (kb / 32) * w->block_bytes, *codes = blk + w->lay.header;
        if (w->lay.code_bits == 8) {
            memcpy(qb, codes, 32);
        } else {
            for (int j = 0; j < 16; j++) {
                qb[j] = w->lay.map[codes[j] & 0xF];
                qb[j + 16] = w->lay.map[codes[j] >> 4];
            }
        }
        scale[b] = block_scale(w, blk) * w->mul;
        if (min) { /* element = q * d + m: the form with mins takes min -m */
            uint16_t hm;
            memcpy(&hm, blk + 2, 2);
            min[b] = -(tops__f16_to_f32(hm) * w->mul);
        }
        for (int64_t j = K - kb; j < 32; j++) qb[j] = 0; /* the tail block's unused elements */
    }
}
static void unpack_blocks(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    unpack_blocks_any(w, row, k0, n, q, scale, NULL);
}
static void unpack_blocks_min(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale,
                              float *min) {
    unpack_blocks_any(w, row, k0, n, q, scale, min);
}

/* Scales of TOPS__IF_BLOCKS (one per 32, from each block's header). */
static void blocks_scales(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *scale) {
    const uint8_t *data = w->data + row * w->row_bytes;
    for (int64_t b = 0; b < n / 32; b++) scale[b] = block_scale(w, data + (k0 / 32 + b) * w->block_bytes) * w->mul;
}

/* Mins of TOPS__IF_BLOCKS with has_min (q4_1: -m from byte 2), as run_min's. */
void tops__ref_blocks_mins(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *min) {
    const uint8_t *data = w->data + row * w->row_bytes;
    for (int64_t b = 0; b < n / 32; b++) {
        uint16_t hm;
        if (k0 + b * 32 >= w->k) { /* past K: nothing read */
            min[b] = 0.0f;
            continue;
        }
        memcpy(&hm, data + (k0 / 32 + b) * w->block_bytes + 2, 2);
        min[b] = -(tops__f16_to_f32(hm) * w->mul);
    }
}

/* TOPS__IF_SUPER_SUBSCALE (iq4_xs: 136-byte super-blocks of 256: f16 d,
   6-bit sub-scales ls - 32 split into low and high bits, then 8 x 16 bytes
   of nibbles): q is the map's entry, the scale d * (ls - 32), the same f32
   products as the decoder (src/formats/kquants.c), so the strict paths
   give the decoded values' bits. */
static void unpack_super_subscale(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q,
                                  float *scale) {
    const int64_t K = w->k;
    const uint8_t *data = w->data + row * w->row_bytes;
    for (int64_t b = 0; b < n / 32; b++) {
        const int64_t kb = k0 + b * 32;
        int8_t *qb = q + b * 32;
        if (kb >= K) {
            memset(qb, 0, 32);
            scale[b] = 0.0f;
            continue;
        }
        const uint8_t *blk = data + (kb / 256) * w->block_bytes;
        uint16_t hi;
        memcpy(&hi, blk + 2, 2);
        const int j = (int)(kb % 256) / 32;
        const int ls = (((blk[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((hi >> (2 * j)) & 3) << 4)) - 32;
        const float d = tops__f16_at(blk) * (float)ls;
        const uint8_t *qs = blk + 8 + 16 * j;
        for (int l = 0; l < 16; l++) {
            qb[l] = w->lay.map[qs[l] & 0xF];
            qb[l + 16] = w->lay.map[qs[l] >> 4];
        }
        scale[b] = d * w->mul;
        for (int64_t l = K - kb; l < 32; l++) qb[l] = 0; /* the tail block's unused elements */
    }
}

/* Scales of TOPS__IF_SUPER_SUBSCALE, one per sub-block of 32: d * (ls -
   32) * mul, as its unpacker's (0 past K). */
static float f16_value(uint16_t h) { return tops__f16_to_f32(h); }
void tops__ref_subscale_scales(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *scale) {
    tops__subscale_scales(w->data + row * w->row_bytes, w->block_bytes, w->k, k0, n, w->mul, scale, f16_value);
}

/* q6_K's q = code - 32 of element e (0..255) of a 210-byte super-block:
   its low four bits in ql, its high two in qh. */
static inline int q6_code(const uint8_t *blk, int e) {
    const int hh = e / 128, r = e % 128;
    const int lo = (blk[64 * hh + r % 64] >> (4 * (r / 64))) & 0xF;
    const int hi = (blk[128 + 32 * hh + r % 32] >> (2 * (r / 32))) & 3;
    return (lo | (hi << 4)) - 32;
}
/* ... and the scale of its sub-block j of 16, d * sc_j * mul. */
static inline float q6_scale(const uint8_t *blk, int j, float mul) {
    return tops__f16_at(blk + 208) * (float)(int8_t)blk[192 + j] * mul;
}

/* TOPS__IF_SUPER_6BIT (q6_K: 210-byte super-blocks of 256: ql[128],
   qh[64], i8 scales[16], f16 d): q = code - 32 in [-32, 31], one scale
   d * sc per 16 (the traits row's sub_block), the decoder's f32 product. */
static void unpack_super_6bit(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    const int64_t K = w->k;
    const uint8_t *data = w->data + row * w->row_bytes;
    for (int64_t b = 0; b < n / 16; b++) {
        const int64_t kb = k0 + b * 16;
        int8_t *qb = q + b * 16;
        if (kb >= K) {
            memset(qb, 0, 16);
            scale[b] = 0.0f;
            continue;
        }
        const uint8_t *blk = data + (kb / 256) * w->block_bytes;
        for (int j = 0; j < 16; j++) qb[j] = (int8_t)q6_code(blk, (int)(kb % 256) + j);
        scale[b] = q6_scale(blk, (int)(kb % 256) / 16, w->mul);
        for (int64_t j = K - kb; j < 16; j++) qb[j] = 0; /* the tail block's unused elements */
    }
}

/* TOPS__IF_SUPER_MIN (q4_K: 144-byte super-blocks of 256: f16 d, f16 dmin,
   scales[12], qs[128]; q5_K, high_bit: 176 bytes, qh[32] before qs): 8
   sub-blocks j of 32, element = (d * sc_j) * q - (dmin * m_j) with q =
   0..15 (0..31: bit j of qh[l] as bit 4): scale d * sc_j and min dmin *
   m_j, the decoder's f32 products (src/formats/kquants.c), times mul. */
static void unpack_super_min(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale,
                             float *min) {
    const int64_t K = w->k;
    const int five = w->lay.high_bit;
    const uint8_t *data = w->data + row * w->row_bytes;
    for (int64_t b = 0; b < n / 32; b++) {
        const int64_t kb = k0 + b * 32;
        int8_t *qb = q + b * 32;
        if (kb >= K) {
            memset(qb, 0, 32);
            scale[b] = 0.0f, min[b] = 0.0f;
            continue;
        }
        const uint8_t *blk = data + (kb / 256) * w->block_bytes;
        const int j = (int)(kb % 256) / 32;
        const uint8_t *qs = blk + (five ? TOPS__KQ_QS5 : TOPS__KQ_QS4) + 32 * (j / 2), *qh = blk + TOPS__KQ_QH;
        for (int l = 0; l < 32; l++) {
            int v = (qs[l] >> (4 * (j % 2))) & 0xF;
            if (five) v |= ((qh[l] >> j) & 1) << 4;
            qb[l] = (int8_t)v;
        }
        uint16_t hd, hm;
        memcpy(&hd, blk, 2);
        memcpy(&hm, blk + 2, 2);
        int sc, m;
        tops__kquant_scale_min(blk + TOPS__KQ_SCALES, j, &sc, &m);
        scale[b] = tops__f16_to_f32(hd) * (float)sc * w->mul;
        min[b] = tops__f16_to_f32(hm) * (float)m * w->mul;
        for (int64_t l = K - kb; l < 32; l++) qb[l] = 0; /* the tail block's unused elements */
    }
}

/* A TOPS__IF_SUPER_MIN super-block (q4_K, q5_K: 144 / 176 bytes): the
   32 codes of sub-block j (0..15; q5_K 0..31, bit j of qh[l] as bit 4),
   and its scale and min as the unpacker computes them. */
static void kq_sub_block(const uint8_t *blk, int five, int j, float mul, int q[32], float *scale, float *min) {
    const uint8_t *qs = blk + (five ? TOPS__KQ_QS5 : TOPS__KQ_QS4) + 32 * (j / 2), *qh = blk + TOPS__KQ_QH;
    for (int l = 0; l < 32; l++) {
        q[l] = (qs[l] >> (4 * (j % 2))) & 0xF;
        if (five) q[l] |= ((qh[l] >> j) & 1) << 4;
    }
    uint16_t hd, hm;
    memcpy(&hd, blk, 2);
    memcpy(&hm, blk + 2, 2);
    int sc, m;
    tops__kquant_scale_min(blk + TOPS__KQ_SCALES, j, &sc, &m);
    *scale = tops__f16_to_f32(hd) * (float)sc * mul;
    *min = tops__f16_to_f32(hm) * (float)m * mul;
}

/* The in-place relaxed dot of TOPS__IF_SUPER_MIN rows (tops__dot_super_fn). */
static float dot_min_row(const tops__int_layout *lay, const uint8_t *blocks, float mul, const int8_t *aq,
                         const float *as, const float *amin, int64_t nsb) {
    const int five = lay->high_bit, bytes = five ? 176 : 144;
    float lane[8] = {0};
    for (int64_t s = 0; s < nsb; s++)
        for (int j = 0; j < 8; j++) {
            int q[32];
            float scale, min;
            kq_sub_block(blocks + s * bytes, five, j, mul, q, &scale, &min);
            const int8_t *a = aq + s * 256 + j * 32;
            int32_t sum = 0;
            for (int l = 0; l < 32; l++) sum += q[l] * a[l];
            lane[j] = fmaf((float)sum, as[s * 8 + j] * scale, lane[j]);
            lane[j] = fmaf(-amin[s * 8 + j], min, lane[j]);
        }
    return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

/* The in-place relaxed dot of TOPS__IF_SUPER_6BIT rows (q6_K; amin is
   not read): sixteen lanes, one per sub-block of 16. */
static float dot_6bit_row(const tops__int_layout *lay, const uint8_t *blocks, float mul, const int8_t *aq,
                          const float *as, const float *amin, int64_t nsb) {
    (void)lay, (void)amin;
    float lane[16] = {0};
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *blk = blocks + s * 210;
        for (int j = 0; j < 16; j++) {
            int32_t sum = 0;
            for (int l = 0; l < 16; l++) sum += q6_code(blk, 16 * j + l) * aq[s * 256 + 16 * j + l];
            lane[j] = fmaf((float)sum, as[s * 16 + j] * q6_scale(blk, j, mul), lane[j]);
        }
    }
    float g[4];
    for (int j = 0; j < 4; j++) g[j] = (lane[j] + lane[j + 8]) + (lane[j + 4] + lane[j + 12]);
    return (g[0] + g[2]) + (g[1] + g[3]);
}

/* The in-place relaxed dot of TOPS__IF_SUPER_SUBSCALE rows (iq4_xs: 136
   bytes, f16 d, scales_h, scales_l[4], qs[128]; amin is not read): eight
   lanes, one per sub-block of 32, its scale the unpacker's d * ls * mul. */
static float dot_subscale_row(const tops__int_layout *lay, const uint8_t *blocks, float mul, const int8_t *aq,
                              const float *as, const float *amin, int64_t nsb) {
    (void)amin;
    float lane[8] = {0};
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *blk = blocks + s * 136;
        const float d = tops__f16_at(blk);
        uint16_t hi;
        memcpy(&hi, blk + 2, 2);
        for (int j = 0; j < 8; j++) {
            const int ls = (((blk[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((hi >> (2 * j)) & 3) << 4)) - 32;
            const uint8_t *qs = blk + 8 + 16 * j;
            const int8_t *a = aq + s * 256 + 32 * j;
            int32_t sum = 0;
            for (int l = 0; l < 16; l++) sum += lay->map[qs[l] & 0xF] * a[l] + lay->map[qs[l] >> 4] * a[l + 16];
            const float scale = d * (float)ls * mul;
            lane[j] = fmaf((float)sum, as[s * 8 + j] * scale, lane[j]);
        }
    }
    return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

/* The strict TOPS__IF_SUPER_MIN rows (tops__dot_super_f32_fn): each
   weight q * scale - min from the unpacker's values, summed in order. */
static void dot_min_super_f32(const tops__int_layout *lay, const uint8_t *blocks, float mul, const float *a,
                              int64_t lda, int m, int64_t nsb, float *out) {
    const int five = lay->high_bit, bytes = five ? 176 : 144;
    for (int i = 0; i < m; i++) {
        float acc = 0.0f;
        for (int64_t s = 0; s < nsb; s++)
            for (int j = 0; j < 8; j++) {
                int q[32];
                float scale, min;
                kq_sub_block(blocks + s * bytes, five, j, mul, q, &scale, &min);
                for (int l = 0; l < 32; l++) acc = fmaf(a[i * lda + s * 256 + 32 * j + l], fmaf((float)q[l], scale, -min), acc);
            }
        out[i] = acc;
    }
}

/* The strict TOPS__IF_SUPER_6BIT rows (q6_K): each weight (code - 32) *
   d * sc_j * mul as the unpacker's q and scale, summed in order. */
static void dot_6bit_super_f32(const tops__int_layout *lay, const uint8_t *blocks, float mul, const float *a,
                               int64_t lda, int m, int64_t nsb, float *out) {
    (void)lay;
    for (int i = 0; i < m; i++) {
        float acc = 0.0f;
        for (int64_t s = 0; s < nsb; s++) {
            const uint8_t *blk = blocks + s * 210;
            for (int e = 0; e < 256; e++)
                acc = fmaf(a[i * lda + s * 256 + e], (float)q6_code(blk, e) * q6_scale(blk, e / 16, mul), acc);
        }
        out[i] = acc;
    }
}

/* The tops__dot_super_fn entries: the rows one after another. */
static void dot_min_super(const tops__int_layout *lay, const uint8_t *blocks, float mul, const tops__super_act *act,
                          int m, int64_t nsb, float *out) {
    for (int i = 0; i < m; i++) out[i] = dot_min_row(lay, blocks, mul, act[i].aq, act[i].as, act[i].amin, nsb);
}
static void dot_super_6bit(const tops__int_layout *lay, const uint8_t *blocks, float mul, const tops__super_act *act,
                           int m, int64_t nsb, float *out) {
    for (int i = 0; i < m; i++) out[i] = dot_6bit_row(lay, blocks, mul, act[i].aq, act[i].as, act[i].amin, nsb);
}

static void dot_super_subscale(const tops__int_layout *lay, const uint8_t *blocks, float mul,
                               const tops__super_act *act, int m, int64_t nsb, float *out) {
    for (int i = 0; i < m; i++) out[i] = dot_subscale_row(lay, blocks, mul, act[i].aq, act[i].as, act[i].amin, nsb);
}

void tops__ref_fill_unpackers(tops__form_kernels *table) {
    memset(table, 0, sizeof(tops__form_kernels) * TOPS__IF_COUNT_);
    table[TOPS__IF_CODES] = (tops__form_kernels){.run = unpack_elements, .run_min = unpack_elements_min,
                                                 .dot_super = NULL, .scales = tops__ref_unpack_scales,
                                                 .mins = tops__ref_unpack_code_mins};
    table[TOPS__IF_BLOCKS] = (tops__form_kernels){.run = unpack_blocks, .run_min = unpack_blocks_min,
                                                  .dot_super = NULL, .scales = blocks_scales,
                                                  .mins = tops__ref_blocks_mins};
    table[TOPS__IF_SUPER_MIN] = (tops__form_kernels){.run = NULL, .run_min = unpack_super_min, .dot_super = dot_min_super,
                                                      .dot_super_f32 = dot_min_super_f32, .scales = NULL};
    table[TOPS__IF_SUPER_6BIT] = (tops__form_kernels){.run = unpack_super_6bit, .run_min = NULL,
                                                      .dot_super = dot_super_6bit, .dot_super_f32 = dot_6bit_super_f32,
                                                      .scales = NULL};
    table[TOPS__IF_SUPER_SUBSCALE] = (tops__form_kernels){.run = unpack_super_subscale, .run_min = NULL,
                                                          .dot_super = dot_super_subscale,
                                                          .scales = tops__ref_subscale_scales};
}

void tops__ref_lut16_row(float *dst, const uint8_t *src, int64_t n, const float *table) {
    for (int64_t i = 0; i < n; i++) dst[i] = table[(src[i >> 1] >> ((i & 1) * 4)) & 0xF];
}
