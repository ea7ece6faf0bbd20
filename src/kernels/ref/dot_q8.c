/* Scalar dot products of the matmul row driver, the relaxed activation
   quantizer and the integer form's dequantization (the truth for the AVX2
   twins in kernels/avx2/dot_q8.c). */
#include "kernels/kernels.h"
#include "core/numeric.h"

#include <math.h>
#include <string.h>

float tops__ref_dot_q8_nibbles(const uint8_t *blocks, const tops__nibble_layout *layout, const int8_t *aq,
                               const float *as, const float *acorr, const float *ws, int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *nib = blocks + b * layout->block_bytes + layout->header;
        const int8_t *a = aq + b * 32;
        int32_t s = 0;
        for (int j = 0; j < 16; j++) {
            /* split: low nibble j is element j, high is j + 16; otherwise
               the activations come as [evens, odds], matching low, high. */
            s += layout->lut[nib[j] & 0xF] * a[j];
            s += layout->lut[nib[j] >> 4] * a[16 + j];
        }
        acc += ((float)s - acorr[b]) * (ws[b] * as[b]);
    }
    return acc;
}

void tops__ref_dot_f32_nibbles_x4(const uint8_t *blocks, int64_t row_bytes, const tops__nibble_layout *layout,
                                  const float *a, const float *ws, int64_t ld_ws, int64_t nb, float *out) {
    for (int r = 0; r < 4; r++) {
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *nib = blocks + r * row_bytes + b * layout->block_bytes + layout->header;
            const float *x = a + b * 32;
            float s = 0.0f;
            for (int j = 0; j < 16; j++) {
                s += x[j] * (float)(layout->lut[nib[j] & 0xF] - layout->offset);
                s += x[16 + j] * (float)(layout->lut[nib[j] >> 4] - layout->offset);
            }
            acc += s * ws[r * ld_ws + b];
        }
        out[r] = acc;
    }
}

float tops__ref_dot_f32_q8(const float *a, const int8_t *q, const float *scale, int64_t n, int sub) {
    float acc = 0.0f;
    for (int64_t b = 0; b < n / sub; b++) {
        float s = 0.0f;
        for (int j = 0; j < sub; j++) s += a[b * sub + j] * (float)q[b * sub + j];
        acc += s * scale[b];
    }
    return acc;
}

void tops__ref_dot_f32_q8_x4(const float *a, const int8_t *q, int64_t ldq, const float *scale, int64_t ld_scale,
                             int64_t n, int sub, float *out) {
    for (int r = 0; r < 4; r++) out[r] = tops__ref_dot_f32_q8(a, q + r * ldq, scale + r * ld_scale, n, sub);
}

float tops__ref_dot_q8_q8(const int8_t *aq, const float *ascale, const int8_t *q, const float *scale, int64_t n,
                          int sub) {
    float acc = 0.0f;
    for (int64_t b = 0; b < n / sub; b++) {
        int32_t s = 0;
        for (int j = 0; j < sub; j++) s += (int32_t)aq[b * sub + j] * q[b * sub + j];
        acc += (float)s * (ascale[b] * scale[b]);
    }
    return acc;
}

void tops__ref_quantize_q8(const float *a, int64_t n, int sub, int8_t *aq, float *ascale) {
    for (int64_t b = 0; b < n / sub; b++) {
        const float *x = a + b * sub;
        float amax = 0.0f;
        int nan = 0;
        for (int j = 0; j < sub; j++) {
            amax = fmaxf(amax, fabsf(x[j]));
            nan |= x[j] != x[j];
        }
        /* Inf gives scale Inf and codes 0, NaN scale NaN: both reach the result. */
        float d = nan ? NAN : amax / 127.0f, inv = amax > 0.0f && isfinite(amax) ? 127.0f / amax : 0.0f;
        for (int j = 0; j < sub; j++) aq[b * sub + j] = (int8_t)(nan ? 0 : lrintf(x[j] * inv));
        ascale[b] = d;
    }
}

void tops__ref_dequant_q8(const int8_t *q, const float *scale, int64_t n, int sub, float *out) {
    for (int64_t b = 0; b < n / sub; b++)
        for (int j = 0; j < sub; j++) out[b * sub + j] = (float)q[b * sub + j] * scale[b];
}

float tops__ref_dot_f32(const float *a, const float *b, int64_t n) {
    float acc = 0.0f;
    for (int64_t i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

void tops__ref_dot_f32_x4(const float *a, const float *b, int64_t ldb, int64_t n, float *out) {
    for (int r = 0; r < 4; r++) out[r] = tops__ref_dot_f32(a, b + r * ldb, n);
}

/* sub 16 (split = 0: byte j holds elements 2j and 2j + 1, the activations
   [evens, odds]): half h of a block is bytes 8h..8h + 7. */
void tops__ref_dot_q8_nibbles_x4(const uint8_t *blocks, int64_t row_bytes, const tops__nibble_layout *layout,
                                 const int8_t *aq, const float *as, const float *acorr, const float *ws, int64_t ld_ws,
                                 int64_t nb, int sub, float *out) {
    for (int r = 0; r < 4; r++) {
        if (sub == 32) {
            out[r] = tops__ref_dot_q8_nibbles(blocks + r * row_bytes, layout, aq, as, acorr, ws + r * ld_ws, nb);
            continue;
        }
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *nib = blocks + r * row_bytes + b * layout->block_bytes + layout->header;
            const int8_t *a = aq + b * 32;
            for (int h = 0; h < 2; h++) {
                int32_t s = 0;
                for (int j = 8 * h; j < 8 * h + 8; j++)
                    s += layout->lut[nib[j] & 0xF] * a[j] + layout->lut[nib[j] >> 4] * a[16 + j];
                acc += ((float)s - acorr[2 * b + h]) * (ws[r * ld_ws + 2 * b + h] * as[2 * b + h]);
            }
        }
        out[r] = acc;
    }
}

/* Block b's eight lanes: lane j += the exact i32 sum of elements 4j..4j+3
   of x * q, times s (one fmaf). */
static void lanes_add(const int8_t *x, const int8_t *q, float s, float lane[8]) {
    for (int j = 0; j < 8; j++) {
        int32_t d = 0;
        for (int t = 0; t < 4; t++) d += (int32_t)x[4 * j + t] * q[4 * j + t];
        lane[j] = fmaf((float)d, s, lane[j]);
    }
}

static float lanes_sum(const float lane[8]) {
    return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

/* Sixteen lanes (even blocks in 0..7, odd ones in 8..15): the halves
   added lane by lane, then the eight-lane tree. */
static float lanes16_sum(const float lane[16]) {
    float v[8];
    for (int j = 0; j < 8; j++) v[j] = lane[j] + lane[8 + j];
    return lanes_sum(v);
}

/* The four-row dot of 8-bit blocks read in place, in the lane order of
   kernels/kernels.h (the SIMD twins' vector lanes, and their horizontal sum). */
void tops__ref_dot_q8_bytes_x4(const int8_t *codes, int64_t block_bytes, int64_t row_bytes, const int8_t *aq,
                               const float *as, const float *ws, int64_t ld_ws, int64_t nb, float *out) {
    for (int r = 0; r < 4; r++) {
        float lane[16] = {0};
        for (int64_t b = 0; b < nb; b++)
            lanes_add(aq + b * 32, codes + r * row_bytes + b * block_bytes, ws[r * ld_ws + b] * as[b], lane + 8 * (b % 2));
        out[r] = lanes16_sum(lane);
    }
}

/* The rows twin: each activation row through the four-row dots. */
void tops__ref_dot_q8_bytes_rows(const uint8_t *codes, int64_t block_bytes, int64_t row_bytes, int hdr, float mul,
                                 const int8_t *aq, int64_t lda, const float *as, int64_t lds, int mm, const float *ws,
                                 int64_t ld_ws, int64_t nb, float *out) {
    for (int i = 0; i < mm; i++) {
        if (hdr) tops__ref_dot_q8_hdr_x4(codes - 2, row_bytes, aq + i * lda, as + i * lds, mul, nb, out + 4 * i);
        else tops__ref_dot_q8_bytes_x4((const int8_t *)codes, block_bytes, row_bytes, aq + i * lda, as + i * lds, ws,
                                       ld_ws, nb, out + 4 * i);
    }
}

void tops__ref_dot_q8_hdr_x4(const uint8_t *blocks, int64_t row_bytes, const int8_t *aq, const float *as, float mul,
                             int64_t nb, float *out) {
    for (int r = 0; r < 4; r++) {
        float lane[16] = {0};
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = blocks + r * row_bytes + b * 34;
            lanes_add(aq + b * 32, (const int8_t *)(blk + 2), (tops__f16_at(blk) * mul) * as[b], lane + 8 * (b % 2));
        }
        out[r] = lanes16_sum(lane);
    }
}
