/* The per-dtype entry points of the scalar element casts
   (core/numeric.h): encode and decode by tops_dtype, for the generic
   paths of the formats layer and above. */
#ifndef TOPS_FORMATS_ELEM_H
#define TOPS_FORMATS_ELEM_H

#include <stdint.h>

#include "core/numeric.h"
#include "tensorops.h"

/* ---- one entry point per dtype (used by the generic paths) -------------------- */

/* Encodes f to the code of dtype dt (low bits); 0 for dtypes without codes. */
static inline uint32_t tops__encode_elem(tops_dtype dt, float f, int sat) {
    switch (dt) {
    case TOPS_DT_F32: return tops__f32_bits(f);
    case TOPS_DT_F16: {
        uint16_t h = tops__f32_to_f16(f);
        if (sat && (h & 0x7fffu) == 0x7c00u && isfinite(f)) h = (uint16_t)((h & 0x8000u) | 0x7bffu);
        return h;
    }
    case TOPS_DT_BF16: {
        uint16_t h = tops__f32_to_bf16(f);
        if (sat && (h & 0x7fffu) == 0x7f80u && isfinite(f)) h = (uint16_t)((h & 0x8000u) | 0x7f7fu);
        return h;
    }
    case TOPS_DT_E4M3: return tops__f32_to_e4m3(f, sat);
    case TOPS_DT_E5M2: return tops__f32_to_e5m2(f, sat);
    case TOPS_DT_E2M3: return tops__f32_to_e2m3(f, sat);
    case TOPS_DT_E3M2: return tops__f32_to_e3m2(f, sat);
    case TOPS_DT_E2M1: return tops__f32_to_e2m1(f, sat);
    case TOPS_DT_E8M0: return tops__f32_to_e8m0(f, sat);
    case TOPS_DT_UE4M3: return tops__f32_to_ue4m3(f, sat);
    case TOPS_DT_MXINT8: return tops__f32_to_mxint8(f);
    case TOPS_DT_I8: return tops__f32_to_int_code(f, 8, 1, sat);
    case TOPS_DT_U8: return tops__f32_to_int_code(f, 8, 0, sat);
    case TOPS_DT_I4: return tops__f32_to_int_code(f, 4, 1, sat);
    case TOPS_DT_U4: return tops__f32_to_int_code(f, 4, 0, sat);
    case TOPS_DT_I2: return tops__f32_to_int_code(f, 2, 1, sat);
    case TOPS_DT_U2: return tops__f32_to_int_code(f, 2, 0, sat);
    case TOPS_DT_I32: return sat ? (uint32_t)tops__f32_rne_clamp(f, INT32_MIN, INT32_MAX) : tops__f32_trunc_wrap(f);
    default: return 0u;
    }
}

static inline float tops__decode_elem(tops_dtype dt, uint32_t c) {
    switch (dt) {
    case TOPS_DT_F32: return tops__bits_f32(c);
    case TOPS_DT_F16: return tops__f16_to_f32((uint16_t)c);
    case TOPS_DT_BF16: return tops__bf16_to_f32((uint16_t)c);
    case TOPS_DT_E4M3: return tops__e4m3_to_f32(c);
    case TOPS_DT_E5M2: return tops__e5m2_to_f32(c);
    case TOPS_DT_E2M3: return tops__e2m3_to_f32(c);
    case TOPS_DT_E3M2: return tops__e3m2_to_f32(c);
    case TOPS_DT_E2M1: return tops__e2m1_to_f32(c);
    case TOPS_DT_E8M0: return tops__e8m0_to_f32(c);
    case TOPS_DT_UE4M3: return tops__ue4m3_to_f32(c);
    case TOPS_DT_MXINT8: return tops__mxint8_to_f32(c);
    case TOPS_DT_I8: return (float)tops__sext(c, 8);
    case TOPS_DT_U8: return (float)(c & 0xFFu);
    case TOPS_DT_I4: return (float)tops__sext(c, 4);
    case TOPS_DT_U4: return (float)(c & 0xFu);
    case TOPS_DT_I2: return (float)tops__sext(c, 2);
    case TOPS_DT_U2: return (float)(c & 0x3u);
    case TOPS_DT_I32: return (float)(int32_t)c;
    default: return 0.0f;
    }
}

#endif
