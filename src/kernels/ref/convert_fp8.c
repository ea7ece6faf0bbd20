/* Scalar fp8 / fp4 / int4 rows: the reference twins of the AVX2 rows, built
   on the inline casts of core/numeric.h (bit-exact with ml_dtypes). */
#include "kernels/kernels.h"
#include "core/numeric.h"

void tops__ref_f32_to_e4m3_row(uint8_t *dst, const float *src, int64_t n, int sat) {
    for (int64_t i = 0; i < n; i++) dst[i] = tops__f32_to_e4m3(src[i], sat);
}

void tops__ref_e4m3_to_f32_row(float *dst, const uint8_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = tops__e4m3_to_f32(src[i]);
}

void tops__ref_f32_to_e5m2_row(uint8_t *dst, const float *src, int64_t n, int sat) {
    for (int64_t i = 0; i < n; i++) dst[i] = tops__f32_to_e5m2(src[i], sat);
}

void tops__ref_e5m2_to_f32_row(float *dst, const uint8_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = tops__e5m2_to_f32(src[i]);
}

/* Packed nibbles, element 2i in the low half of byte i. */
void tops__ref_e2m1_to_f32_row(float *dst, const uint8_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = tops__e2m1_to_f32((uint32_t)(src[i >> 1] >> ((i & 1) * 4)));
}

void tops__ref_fp6_to_f32_row(float *dst, const uint8_t *src, int64_t n, int e3m2) {
    for (int64_t i = 0; i < n; i++) dst[i] = tops__fp6_to_f32(src, i, e3m2);
}

void tops__ref_i4_to_f32_row(float *dst, const uint8_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = (float)tops__sext((uint32_t)(src[i >> 1] >> ((i & 1) * 4)), 4);
}
