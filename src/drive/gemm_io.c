/* Reading plain f32/f16/bf16 rectangles into f32 and writing results back:
   the element-level I/O of the matmul driver (any strides). */
#include "drive/gemm.h"
#include "formats/codec.h"
#include "formats/elem.h"
#include "core/numeric.h"

#include <string.h>

enum { ROW_CHUNK = 64 };

static float load_elem(tops_dtype dt, const void *base, int64_t idx) {
    switch (dt) {
    case TOPS_DT_F16: return tops__f16_to_f32(((const uint16_t *)base)[idx]);
    case TOPS_DT_BF16: return tops__bf16_to_f32(((const uint16_t *)base)[idx]);
    default: return ((const float *)base)[idx];
    }
}

void tops__read_rect_decode(const tops__kernels *kern, const tops_tensor *t, int64_t r0, int64_t nr, int64_t c0,
                            int64_t nc, float *out, int64_t ld) {
    (void)kern;
    tops__decode_rect(t, NULL, r0, nr, c0, nc, out, ld);
}

void tops__read_rect_unpack(const tops__kernels *kern, const tops_tensor *t, int64_t r0, int64_t nr, int64_t c0,
                            int64_t nc, float *out, int64_t ld) {
    enum { CHUNK = 256 };
    const tops__unpack_fn unpack = kern->unpack[t->format.id].run;
    const tops__qweight qw = tops__qweight_of(t);
    const int sub = qw.sub;
    int8_t q[CHUNK];
    float scale[CHUNK / 16], f[CHUNK];
    for (int64_t i = 0; i < nr; i++) {
        float *o = out + i * ld;
        for (int64_t k0 = c0 / sub * sub; k0 < c0 + nc; k0 += CHUNK) {
            int64_t n = c0 + nc - k0 < CHUNK ? tops__ceil_div(c0 + nc - k0, sub) * sub : CHUNK;
            int64_t lo = k0 < c0 ? c0 : k0, hi = k0 + n < c0 + nc ? k0 + n : c0 + nc;
            unpack(&qw, r0 + i, k0, n, q, scale);
            if (lo == k0 && hi == k0 + n) { /* whole sub-blocks: straight into out */
                kern->dequant_q8(q, scale, n, sub, o + (k0 - c0));
            } else {
                kern->dequant_q8(q, scale, n, sub, f);
                memcpy(o + (lo - c0), f + (lo - k0), (size_t)(hi - lo) * sizeof(float));
            }
        }
    }
}

int tops__has_element_reader(const tops_tensor *t) {
    const tops_format_info *info = tops_format_get_info(t->format.id);
    return tops__element_kind(t) >= 0 && !info->codebook && !info->has_bias && !info->has_tensor_scale;
}

int tops__element_kind(const tops_tensor *t) {
    switch (tops_format_get_info(t->format.id)->element) {
    case TOPS_DT_E4M3: return TOPS__FPROW_E4M3;
    case TOPS_DT_E5M2: return TOPS__FPROW_E5M2;
    case TOPS_DT_E2M3: return TOPS__FPROW_E2M3;
    case TOPS_DT_E3M2: return TOPS__FPROW_E3M2;
    default: return -1;
    }
}

void tops__read_rect_elements(const tops__kernels *kern, const tops_tensor *t, int64_t r0, int64_t nr, int64_t c0,
                              int64_t nc, float *out, int64_t ld) {
    const tops_format_info *info = tops_format_get_info(t->format.id);
    const int kind = tops__element_kind(t), e3m2 = kind == TOPS__FPROW_E3M2;
    void (*row)(float *, const uint8_t *, int64_t) = kind == TOPS__FPROW_E4M3 ? kern->e4m3_to_f32_row : kern->e5m2_to_f32_row;
    const tops_plane *p = &t->scales;
    const int64_t block = info->block < 0 ? t->extent[1] : info->block > 1 ? t->format.group : 0;
    const int esz = p->data ? (tops_dtype_bits(p->dtype) + 7) / 8 : 0;
    for (int64_t i = 0; i < nr; i++) {
        float *o = out + i * ld;
        const uint8_t *codes = tops__weight_row(t, r0 + i);
        if (kind >= TOPS__FPROW_E2M3) { /* 6-bit codes: up to a unit of four one by one, then the row */
            int64_t k = c0;
            for (; k % 4 && k < c0 + nc; k++) o[k - c0] = tops__fp6_to_f32(codes, k, e3m2);
            kern->fp6_to_f32_row(o + (k - c0), codes + k / 4 * 3, c0 + nc - k, e3m2);
        } else {
            row(o, codes + c0, nc);
        }
        if (p->data) /* one scale per block of the row, as the formats layer applies it */
            for (int64_t k = c0; k < c0 + nc;) {
                int64_t b = k / block, end = (b + 1) * block < c0 + nc ? (b + 1) * block : c0 + nc;
                uint32_t code = 0;
                memcpy(&code, (const unsigned char *)p->data + ((r0 + i) * p->stride[0] + b * p->stride[1]) * esz,
                       (size_t)esz);
                const float s = tops__decode_elem(p->dtype, code);
                for (; k < end; k++) o[k - c0] *= s;
            }
        if (t->tensor_scale != 1.0f)
            for (int64_t j = 0; j < nc; j++) o[j] *= t->tensor_scale;
    }
}

void tops__read_rect_lut4(const tops__kernels *kern, const tops_tensor *t, int64_t r0, int64_t nr, int64_t c0,
                          int64_t nc, float *out, int64_t ld) {
    const tops_format_info *info = tops_format_get_info(t->format.id);
    const tops_plane *cb = &t->codebook;
    float table[16];
    for (int64_t i = 0; i < nr; i++) {
        const int64_t r = r0 + i;
        if (i == 0 || info->codebook == 2) { /* per tensor: once; per row: each row */
            const uint16_t *e = (const uint16_t *)cb->data + (info->codebook == 2 ? r * cb->stride[0] : 0);
            for (int j = 0; j < 16; j++) table[j] = tops__f16_to_f32(e[j * cb->stride[1]]);
        }
        const uint8_t *codes = tops__weight_row(t, r);
        float *o = out + i * ld;
        int64_t k = c0;
        if (k & 1) { /* an odd start: its high nibble first */
            o[0] = table[codes[k >> 1] >> 4];
            k++;
        }
        if (k < c0 + nc) kern->lut16_row(o + (k - c0), codes + (k >> 1), c0 + nc - k, table);
        if (t->tensor_scale != 1.0f)
            for (int64_t j = 0; j < nc; j++) o[j] *= t->tensor_scale;
    }
}

void tops__read_rect_plain(const tops__kernels *kern, const tops_tensor *t, int64_t r0, int64_t nr, int64_t c0,
                           int64_t nc, float *out, int64_t ld) {
    const tops_dtype dt = tops_format_get_info(t->format.id)->element;
    const int64_t s0 = t->stride[0], s1 = t->stride[1];
    const float scale = t->tensor_scale;
    for (int64_t i = 0; i < nr; i++) {
        float *o = out + i * ld;
        int64_t base = (r0 + i) * s0 + c0 * s1;
        if (s1 == 1 && dt == TOPS_DT_F32) {
            memcpy(o, (const float *)t->data + base, (size_t)nc * sizeof(float));
        } else if (s1 == 1 && dt == TOPS_DT_F16) {
            kern->f16_to_f32_row(o, (const uint16_t *)t->data + base, nc);
        } else if (s1 == 1 && dt == TOPS_DT_BF16) {
            kern->bf16_to_f32_row(o, (const uint16_t *)t->data + base, nc);
        } else {
            for (int64_t j = 0; j < nc; j++) o[j] = load_elem(dt, t->data, base + j * s1);
        }
        if (scale != 1.0f)
            for (int64_t j = 0; j < nc; j++) o[j] *= scale;
    }
}

void tops__store_rect(const tops__kernels *kern, tops_tensor *dest, int64_t r0, int64_t nr, int64_t c0,
                      int64_t nc, const float *acc, int64_t ld, int accumulate) {
    const tops_dtype dt = tops_format_get_info(dest->format.id)->element;
    const int64_t s0 = dest->stride[0], s1 = dest->stride[1];
    for (int64_t i = 0; i < nr; i++) {
        const float *a = acc + i * ld;
        int64_t base = (r0 + i) * s0 + c0 * s1;
        if (dt == TOPS_DT_F32) {
            float *d = (float *)dest->data + base;
            if (s1 == 1 && !accumulate) {
                memcpy(d, a, (size_t)nc * sizeof(float));
            } else {
                for (int64_t j = 0; j < nc; j++) d[j * s1] = accumulate ? d[j * s1] + a[j] : a[j];
            }
            continue;
        }
        uint16_t *d = (uint16_t *)dest->data + base;
        int is_f16 = dt == TOPS_DT_F16;
        for (int64_t j0 = 0; j0 < nc; j0 += ROW_CHUNK) {
            int64_t n = nc - j0 < ROW_CHUNK ? nc - j0 : ROW_CHUNK;
            float v[ROW_CHUNK];
            uint16_t h[ROW_CHUNK];
            if (accumulate) {
                for (int64_t j = 0; j < n; j++) h[j] = d[(j0 + j) * s1];
                if (is_f16) kern->f16_to_f32_row(v, h, n);
                else kern->bf16_to_f32_row(v, h, n);
                for (int64_t j = 0; j < n; j++) v[j] += a[j0 + j];
            } else {
                memcpy(v, a + j0, (size_t)n * sizeof(float));
            }
            if (is_f16) kern->f32_to_f16_row(h, v, n);
            else kern->f32_to_bf16_row(h, v, n);
            for (int64_t j = 0; j < n; j++) d[(j0 + j) * s1] = h[j];
        }
    }
}
