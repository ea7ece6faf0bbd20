/* The dispatch table: filled once with the best kernel of each slot that
   the machine (and TOPS_ISA) allows.  Every slot always has the scalar
   reference as a fallback, and every fast kernel gives the same bits. */
#ifndef TOPS_CPU_DISPATCH_H
#define TOPS_CPU_DISPATCH_H

#include "internal.h"

/* matmul2d microkernel (src/kernels/<isa>/gemm_f32_*.c): C[mr x nr] (+)=
   A-panel * B-panel over kc steps.  a[k * mr + i] and b[k * nr + j] are
   packed, zero-padded panels; c has row stride ldc; accumulate = 0
   overwrites c, 1 adds to it.  Full tiles only: the driver pads. */
typedef void (*tops__gemm_f32_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                  int accumulate);
typedef struct tops__gemm_ukernel {
    int mr, nr;
    tops__gemm_f32_fn run;
    const char *name;
} tops__gemm_ukernel;

typedef struct tops__kernels {
    tops_isa isa; /* the level in use */

    /* matmul2d: the f32 microkernel every format can feed (decoded panels). */
    tops__gemm_ukernel gemm_f32;
    /* Panel packing: dst[k * width + j] = src[j * ld + k] for j < valid,
       0 for valid <= j < width (a transpose with zero padding). */
    void (*pack_rows_f32)(const float *src, int64_t ld, int64_t valid, int64_t kc, float *dst, int64_t width);

    /* Element rows (src/kernels/<isa>/convert_*.c): n elements, any n >= 0. */
    void (*f32_to_f16_row)(uint16_t *dst, const float *src, int64_t n);
    void (*f16_to_f32_row)(float *dst, const uint16_t *src, int64_t n);
    void (*f32_to_bf16_row)(uint16_t *dst, const float *src, int64_t n);
    void (*bf16_to_f32_row)(float *dst, const uint16_t *src, int64_t n);
    /* fp8 / fp4 / int4 rows (formats/elem.h semantics; sat as in tops_cast_from_f32). */
    void (*f32_to_e4m3_row)(uint8_t *dst, const float *src, int64_t n, int sat);
    void (*e4m3_to_f32_row)(float *dst, const uint8_t *src, int64_t n);
    void (*f32_to_e5m2_row)(uint8_t *dst, const float *src, int64_t n, int sat);
    void (*e5m2_to_f32_row)(float *dst, const uint8_t *src, int64_t n);
    void (*e2m1_to_f32_row)(float *dst, const uint8_t *src, int64_t n); /* packed nibbles */
    void (*i4_to_f32_row)(float *dst, const uint8_t *src, int64_t n);   /* packed nibbles */
} tops__kernels;

/* The table for this process (never NULL).  If TOPS_ISA was invalid, the
   table runs the machine's best level and *status (if given) holds the
   error with its sentence recorded via tops__fail under fn. */
const tops__kernels *tops__kernels_get(void);
/* As above, but fails (status + sentence naming fn) when TOPS_ISA was invalid:
   ops call this so a bad override is never silently ignored. */
tops_status tops__kernels_checked(const char *fn, const tops__kernels **out);

/* The table of one specific level (for cross-path tests); NULL if the
   machine cannot run it. */
const tops__kernels *tops__kernels_for_isa(tops_isa isa);

/* Detection (features.c), exposed for dispatch.c. */
void tops__detect_cpu(tops_cpu_info *ci);

/* Kernels each ISA file provides. */
void tops__ref_f32_to_f16_row(uint16_t *dst, const float *src, int64_t n);
void tops__ref_f16_to_f32_row(float *dst, const uint16_t *src, int64_t n);
void tops__ref_f32_to_bf16_row(uint16_t *dst, const float *src, int64_t n);
void tops__ref_bf16_to_f32_row(float *dst, const uint16_t *src, int64_t n);
void tops__ref_f32_to_e4m3_row(uint8_t *dst, const float *src, int64_t n, int sat);
void tops__ref_e4m3_to_f32_row(float *dst, const uint8_t *src, int64_t n);
void tops__ref_f32_to_e5m2_row(uint8_t *dst, const float *src, int64_t n, int sat);
void tops__ref_e5m2_to_f32_row(float *dst, const uint8_t *src, int64_t n);
void tops__ref_e2m1_to_f32_row(float *dst, const uint8_t *src, int64_t n);
void tops__ref_i4_to_f32_row(float *dst, const uint8_t *src, int64_t n);
void tops__ref_pack_rows_f32(const float *src, int64_t ld, int64_t valid, int64_t kc, float *dst, int64_t width);
void tops_gemm_f32_f32_f32_4x8__ref(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                    int accumulate);
#if defined(TOPS_HAVE_X86_KERNELS)
void tops__avx2_f32_to_f16_row(uint16_t *dst, const float *src, int64_t n);
void tops__avx2_f16_to_f32_row(float *dst, const uint16_t *src, int64_t n);
void tops__avx2_f32_to_bf16_row(uint16_t *dst, const float *src, int64_t n);
void tops__avx2_bf16_to_f32_row(float *dst, const uint16_t *src, int64_t n);
void tops__avx2_pack_rows_f32(const float *src, int64_t ld, int64_t valid, int64_t kc, float *dst, int64_t width);
void tops_gemm_f32_f32_f32_6x16__avx2(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                      int accumulate);
void tops__avx2_f32_to_e4m3_row(uint8_t *dst, const float *src, int64_t n, int sat);
void tops__avx2_e4m3_to_f32_row(float *dst, const uint8_t *src, int64_t n);
void tops__avx2_f32_to_e5m2_row(uint8_t *dst, const float *src, int64_t n, int sat);
void tops__avx2_e5m2_to_f32_row(float *dst, const uint8_t *src, int64_t n);
void tops__avx2_e2m1_to_f32_row(float *dst, const uint8_t *src, int64_t n);
void tops__avx2_i4_to_f32_row(float *dst, const uint8_t *src, int64_t n);
#endif

#endif
