/* Scalar integer forms of the quantized weight formats (the truth for the
   AVX2 unpackers), their nibble layouts, and the 16-entry table row of
   lut4.  They read memory only (tops__qweight, kernels/kernels.h); values
   follow the scalar casts of core/numeric.h: e2m1 codes become doubled
   integers and mxint8 codes integers, the unit (tops__int_unit) riding in
   the scales through w->mul. */
#include "kernels/kernels.h"
#include "core/numeric.h"
#include "kernels/ref/kquant.h"

#include <math.h>
#include <string.h>

/* Scale-plane entry at e as f32 (the scale dtypes of the integer forms). */
static float scale_entry(tops_dtype dt, const uint8_t *e) {
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
    if (bits == 4) return (row[i >> 1] >> ((i & 1) * 4)) & 0xFu;
    return (row[i >> 2] >> ((i & 3) * 2)) & 0x3u;
}

/* ggml mxfp4's scale 2^(e - 128) (the doubled table's half); 0xFF is the
   e8m0 NaN, which a block holding NaN or Inf stores (src/formats/gguf.c). */
static inline float gguf_e8m0_half(uint8_t e) { return e == 0xFF ? NAN : tops__exp2i((int)e - 128); }

static const int8_t e2m1_doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

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
        scale[b] = k >= K ? w->mul : scale_entry(w->scale_dtype, base + (k / w->group) * w->scale_step) * w->mul;
    }
}

/* Formats whose data plane holds one code per element (int groups, plain
   integers, MX fp4/int8, nvfp4). */
void tops__ref_unpack_codes(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q) {
    const int64_t K = w->k;
    const uint8_t *data = w->data + row * w->row_bytes;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = k0 + i;
        int v = 0;
        if (k < K) {
            uint32_t c = code_at(data, w->code_bits, k);
            v = w->e2m1 ? e2m1_doubled[c] : tops__sext(c, w->code_bits);
        }
        q[i] = (int8_t)v;
    }
}

static void unpack_elements(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    tops__ref_unpack_codes(w, row, k0, n, q);
    tops__ref_unpack_scales(w, row, k0, n, scale);
}

/* GGUF blocks of 32: bytes per block and the offset of the quants. */
static void unpack_gguf(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale, int kind) {
    const int64_t K = w->k;
    const uint8_t *data = w->data + row * w->row_bytes;
    for (int64_t b = 0; b < n / 32; b++) {
        int64_t kb = k0 + b * 32;
        int8_t *qb = q + b * 32;
        if (kb >= K) {
            memset(qb, 0, 32);
            scale[b] = 0.0f;
            continue;
        }
        const uint8_t *blk = data + (kb / 32) * w->block_bytes;
        uint16_t h;
        memcpy(&h, blk, 2);
        if (kind == 0) { /* q4_0: f16 d, nibbles j | j+16 */
            for (int j = 0; j < 16; j++) {
                qb[j] = (int8_t)((blk[2 + j] & 0xF) - 8);
                qb[j + 16] = (int8_t)((blk[2 + j] >> 4) - 8);
            }
            scale[b] = tops__f16_to_f32(h) * w->mul;
        } else if (kind == 1) { /* q8_0: f16 d, i8 x 32 */
            memcpy(qb, blk + 2, 32);
            scale[b] = tops__f16_to_f32(h) * w->mul;
        } else { /* ggml mxfp4: e8m0 e, doubled e2m1 nibbles j | j+16, 2^(e-128) */
            for (int j = 0; j < 16; j++) {
                qb[j] = e2m1_doubled[blk[1 + j] & 0xF];
                qb[j + 16] = e2m1_doubled[blk[1 + j] >> 4];
            }
            scale[b] = gguf_e8m0_half(blk[0]) * w->mul;
        }
        for (int64_t j = K - kb; j < 32; j++) qb[j] = 0; /* the tail block's unused elements */
    }
}

/* Scales of GGUF blocks (one per 32, from each block's header). */
static void gguf_scales(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *scale, int e8m0) {
    const uint8_t *data = w->data + row * w->row_bytes;
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *blk = data + (k0 / 32 + b) * w->block_bytes;
        if (e8m0) {
            scale[b] = gguf_e8m0_half(blk[0]) * w->mul;
        } else {
            uint16_t h;
            memcpy(&h, blk, 2);
            scale[b] = tops__f16_to_f32(h) * w->mul;
        }
    }
}
static void scales_q4_0(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *scale) {
    gguf_scales(w, row, k0, n, scale, 0);
}
static void scales_gguf_mxfp4(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *scale) {
    gguf_scales(w, row, k0, n, scale, 1);
}

static void unpack_q4_0(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    unpack_gguf(w, row, k0, n, q, scale, 0);
}
static void unpack_q8_0(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    unpack_gguf(w, row, k0, n, q, scale, 1);
}
static void unpack_gguf_mxfp4(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    unpack_gguf(w, row, k0, n, q, scale, 2);
}

/* iq4_nl (18-byte blocks of 32: f16 d, q4_0's nibble order) and iq4_xs
   (136-byte super-blocks of 256: f16 d, 6-bit sub-scales ls - 32 split into
   low and high bits, then 8 x 16 bytes of nibbles): q is the non-linear
   table entry (|q| <= 127), the scale d or d * (ls - 32), the same f32
   products as their decoders (src/formats/kquants.c), so the strict paths
   give the decoded values' bits. */
static const int8_t iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static void unpack_iq4(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale, int xs) {
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
        const uint8_t *blk = data + (xs ? (kb / 256) * 136 : (kb / 32) * 18), *qs;
        uint16_t h;
        memcpy(&h, blk, 2);
        float d = tops__f16_to_f32(h);
        if (xs) {
            const int j = (int)(kb % 256) / 32;
            uint16_t hi;
            memcpy(&hi, blk + 2, 2);
            const int ls = (((blk[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((hi >> (2 * j)) & 3) << 4)) - 32;
            d = d * (float)ls;
            qs = blk + 8 + 16 * j;
        } else {
            qs = blk + 2;
        }
        for (int j = 0; j < 16; j++) {
            qb[j] = iq4_values[qs[j] & 0xF];
            qb[j + 16] = iq4_values[qs[j] >> 4];
        }
        scale[b] = d * w->mul;
        for (int64_t j = K - kb; j < 32; j++) qb[j] = 0; /* the tail block's unused elements */
    }
}
static void unpack_iq4_nl(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    unpack_iq4(w, row, k0, n, q, scale, 0);
}
static void unpack_iq4_xs(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
    unpack_iq4(w, row, k0, n, q, scale, 1);
}

/* q6_K (210-byte super-blocks of 256: ql[128], qh[64], i8 scales[16],
   f16 d): q = code - 32 in [-32, 31], one scale d * sc per 16 (the traits
   row's sub_block), the decoder's f32 product. */
static void unpack_q6_k(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale) {
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
        const uint8_t *blk = data + (kb / 256) * 210;
        uint16_t h;
        memcpy(&h, blk + 208, 2);
        for (int j = 0; j < 16; j++) {
            const int e = (int)(kb % 256) + j, hh = e / 128, r = e % 128;
            const int lo = (blk[64 * hh + r % 64] >> (4 * (r / 64))) & 0xF;
            const int hi = (blk[128 + 32 * hh + r % 32] >> (2 * (r / 32))) & 3;
            qb[j] = (int8_t)((lo | (hi << 4)) - 32);
        }
        scale[b] = tops__f16_to_f32(h) * (float)(int8_t)blk[192 + (kb % 256) / 16] * w->mul;
        for (int64_t j = K - kb; j < 16; j++) qb[j] = 0; /* the tail block's unused elements */
    }
}

/* q4_K (144-byte super-blocks of 256: f16 d, f16 dmin, scales[12],
   qs[128]) and q5_K (176 bytes: qh[32] before qs): 8 sub-blocks j of 32,
   element = (d * sc_j) * q - (dmin * m_j) with q = 0..15 (q5_K: 0..31,
   bit j of qh[l] as bit 4): scale d * sc_j and min dmin * m_j, the
   decoder's f32 products (src/formats/kquants.c), times mul. */
static void unpack_kquant(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale,
                          float *min, int five) {
    const int64_t K = w->k;
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
static void unpack_q4_k(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale,
                        float *min) {
    unpack_kquant(w, row, k0, n, q, scale, min, 0);
}
static void unpack_q5_k(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale,
                        float *min) {
    unpack_kquant(w, row, k0, n, q, scale, min, 1);
}

/* q4_1 (20-byte blocks of 32: f16 d, f16 m, q4_0's nibble order):
   element = q * d + m with q = 0..15, so the form with mins takes scale
   d and min -m (element = scale * q - min), times mul. */
static void unpack_q4_1(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale,
                        float *min) {
    const int64_t K = w->k;
    const uint8_t *data = w->data + row * w->row_bytes;
    for (int64_t b = 0; b < n / 32; b++) {
        const int64_t kb = k0 + b * 32;
        int8_t *qb = q + b * 32;
        if (kb >= K) {
            memset(qb, 0, 32);
            scale[b] = 0.0f, min[b] = 0.0f;
            continue;
        }
        const uint8_t *blk = data + (kb / 32) * 20;
        for (int j = 0; j < 16; j++) {
            qb[j] = (int8_t)(blk[4 + j] & 0xF);
            qb[j + 16] = (int8_t)(blk[4 + j] >> 4);
        }
        uint16_t hd, hm;
        memcpy(&hd, blk, 2);
        memcpy(&hm, blk + 2, 2);
        scale[b] = tops__f16_to_f32(hd) * w->mul;
        min[b] = -(tops__f16_to_f32(hm) * w->mul);
        for (int64_t j = K - kb; j < 32; j++) qb[j] = 0; /* the tail block's unused elements */
    }
}

/* The in-place relaxed dot of q4_K / q5_K rows (tops__dot_min_fn). */
static float dot_min_kquant(const uint8_t *blocks, float mul, const int8_t *aq, const float *as, const float *amin,
                            int64_t nsb, int five) {
    const int bytes = five ? 176 : 144;
    float lane[8] = {0};
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *blk = blocks + s * bytes;
        uint16_t hd, hm;
        memcpy(&hd, blk, 2);
        memcpy(&hm, blk + 2, 2);
        const float d = tops__f16_to_f32(hd), dmin = tops__f16_to_f32(hm);
        for (int j = 0; j < 8; j++) {
            const uint8_t *qs = blk + (five ? TOPS__KQ_QS5 : TOPS__KQ_QS4) + 32 * (j / 2), *qh = blk + TOPS__KQ_QH;
            const int8_t *a = aq + s * 256 + j * 32;
            int32_t sum = 0;
            for (int l = 0; l < 32; l++) {
                int v = (qs[l] >> (4 * (j % 2))) & 0xF;
                if (five) v |= ((qh[l] >> j) & 1) << 4;
                sum += v * a[l];
            }
            int sc, m;
            tops__kquant_scale_min(blk + TOPS__KQ_SCALES, j, &sc, &m);
            const float scale = d * (float)sc * mul, min = dmin * (float)m * mul;
            lane[j] = fmaf((float)sum, as[s * 8 + j] * scale, lane[j]);
            lane[j] = fmaf(-amin[s * 8 + j], min, lane[j]);
        }
    }
    return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}
static float dot_min_q4_k(const uint8_t *blocks, float mul, const int8_t *aq, const float *as, const float *amin,
                          int64_t nsb) {
    return dot_min_kquant(blocks, mul, aq, as, amin, nsb, 0);
}
static float dot_min_q5_k(const uint8_t *blocks, float mul, const int8_t *aq, const float *as, const float *amin,
                          int64_t nsb) {
    return dot_min_kquant(blocks, mul, aq, as, amin, nsb, 1);
}

void tops__ref_fill_unpackers(tops__unpacker *table) {
    memset(table, 0, sizeof(tops__unpacker) * TOPS_FMT_COUNT_);
    table[TOPS_FMT_I8].run = unpack_elements, table[TOPS_FMT_I8].qmax = 128;
    table[TOPS_FMT_I4].run = unpack_elements, table[TOPS_FMT_I4].qmax = 8;
    table[TOPS_FMT_I2].run = unpack_elements, table[TOPS_FMT_I2].qmax = 2;
    table[TOPS_FMT_INT8_G].run = unpack_elements, table[TOPS_FMT_INT8_G].qmax = 128;
    table[TOPS_FMT_INT4_G].run = unpack_elements, table[TOPS_FMT_INT4_G].qmax = 8;
    table[TOPS_FMT_INT2_G].run = unpack_elements, table[TOPS_FMT_INT2_G].qmax = 2;
    table[TOPS_FMT_MXFP4].run = unpack_elements, table[TOPS_FMT_MXFP4].qmax = 12;
    table[TOPS_FMT_MXINT8].run = unpack_elements, table[TOPS_FMT_MXINT8].qmax = 128;
    table[TOPS_FMT_NVFP4].run = unpack_elements, table[TOPS_FMT_NVFP4].qmax = 12;
    table[TOPS_FMT_Q4_0].run = unpack_q4_0, table[TOPS_FMT_Q4_0].qmax = 8;
    table[TOPS_FMT_Q8_0].run = unpack_q8_0, table[TOPS_FMT_Q8_0].qmax = 128;
    table[TOPS_FMT_GGUF_MXFP4].run = unpack_gguf_mxfp4, table[TOPS_FMT_GGUF_MXFP4].qmax = 12;
    table[TOPS_FMT_Q6_K].run = unpack_q6_k, table[TOPS_FMT_Q6_K].qmax = 32;
    table[TOPS_FMT_IQ4_NL].run = unpack_iq4_nl, table[TOPS_FMT_IQ4_NL].qmax = 127;
    table[TOPS_FMT_IQ4_XS].run = unpack_iq4_xs, table[TOPS_FMT_IQ4_XS].qmax = 127;
    table[TOPS_FMT_Q4_K].run_min = unpack_q4_k, table[TOPS_FMT_Q4_K].qmax = 15;
    table[TOPS_FMT_Q5_K].run_min = unpack_q5_k, table[TOPS_FMT_Q5_K].qmax = 31;
    table[TOPS_FMT_Q4_1].run_min = unpack_q4_1, table[TOPS_FMT_Q4_1].qmax = 15;
    table[TOPS_FMT_Q4_K].dot_min = dot_min_q4_k;
    table[TOPS_FMT_Q5_K].dot_min = dot_min_q5_k;
    /* In-place nibble layouts: the code -> q + offset tables. */
    tops__nibble_layout i4 = {16, 0, 0, 8, {0}, tops__ref_unpack_scales};
    tops__nibble_layout fp4 = {16, 0, 0, 12, {0}, tops__ref_unpack_scales};
    for (int c = 0; c < 16; c++) {
        i4.lut[c] = (uint8_t)(tops__sext((uint32_t)c, 4) + 8);
        fp4.lut[c] = (uint8_t)(e2m1_doubled[c] + 12);
    }
    tops__nibble_layout q4 = i4, gfp4 = fp4;
    q4.block_bytes = 18, q4.header = 2, q4.split = 1, q4.scales = scales_q4_0;
    for (int c = 0; c < 16; c++) q4.lut[c] = (uint8_t)c; /* q4_0 codes are q + 8 */
    gfp4.block_bytes = 17, gfp4.header = 1, gfp4.split = 1, gfp4.scales = scales_gguf_mxfp4;
    table[TOPS_FMT_I4].nib = i4;
    table[TOPS_FMT_INT4_G].nib = i4;
    table[TOPS_FMT_MXFP4].nib = fp4;
    table[TOPS_FMT_Q4_0].nib = q4;
    table[TOPS_FMT_GGUF_MXFP4].nib = gfp4;
    /* In-place 8-bit layouts: element planes of int8 codes, q8_0 blocks. */
    const tops__byte_layout i8 = {32, 0, tops__ref_unpack_scales}, q8 = {34, 2, scales_q4_0};
    table[TOPS_FMT_I8].byte = i8;
    table[TOPS_FMT_INT8_G].byte = i8;
    table[TOPS_FMT_MXINT8].byte = i8;
    table[TOPS_FMT_Q8_0].byte = q8; /* gguf_scales: f16 headers of either block size */
}

void tops__ref_lut16_row(float *dst, const uint8_t *src, int64_t n, const float *table) {
    for (int64_t i = 0; i < n; i++) dst[i] = table[(src[i >> 1] >> ((i & 1) * 4)) & 0xF];
}
