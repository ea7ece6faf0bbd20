/* Scalar f16/bf16 rows: round to nearest even, bit-exact with ml_dtypes.
   NaN -> the canonical quiet NaN with its sign (what ml_dtypes writes);
   f16 -> f32 keeps the payload and sets the quiet bit (what F16C does). */
#include "cpu/dispatch.h"
#include "kernels/ref/scalar_casts.h"

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
