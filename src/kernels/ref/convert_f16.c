/* Scalar f16/bf16 rows: round to nearest even, bit-exact with numpy (f16)
   and ml_dtypes (bf16).  f32 -> f16 NaN keeps the top payload bits (a zero
   payload becomes 1), f16 -> f32 keeps the payload unquietened (numpy);
   f32 -> bf16 NaN is sign | 0x7fc0 (ml_dtypes). */
#include "kernels/kernels.h"
#include "core/numeric.h"

void tops__ref_f32_to_f16_row(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = tops__f32_to_f16(src[i]);
}

void tops__ref_f16_to_f32_row(float *dst, const uint16_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = tops__f16_to_f32(src[i]);
}

void tops__ref_f32_to_bf16_row(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = tops__f32_to_bf16(src[i]);
}

void tops__ref_bf16_to_f32_row(float *dst, const uint16_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = tops__bf16_to_f32(src[i]);
}
