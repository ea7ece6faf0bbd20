/* The public row casts (tops_cast_from_f32 / tops_cast_to_f32): checked
   here, then the dispatch table's element rows where a level has them,
   else the scalar element casts of formats/elem.h, code by code. */
#include "cpu/dispatch.h"
#include "formats/elem.h"

#include <string.h>

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
