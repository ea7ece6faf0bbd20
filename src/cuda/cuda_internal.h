/* The CUDA backend as seen from the rest of the library, and the plain-C
   contract between its host side (the .c files of src/cuda) and its kernels
   (the .cu files). */
#ifndef TOPS_CUDA_INTERNAL_H
#define TOPS_CUDA_INTERNAL_H

#include "tensorops.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- entry points for ops (src/ops) and tensors (src/core) ---------------- */

/* tops_matmul2d and tops_pack_right with exec->device = cuda:N; the caller
   has validated exec and the descriptor pointer. */
tops_status tops__cuda_matmul2d(const tops_exec *exec, const tops_matmul2d_desc *desc, const tops_tensor *left,
                                const tops_tensor *right, tops_tensor *dest);
tops_status tops__cuda_pack_right(const tops_exec *exec, const tops_matmul2d_desc *desc, const tops_tensor *right,
                                  tops_tensor *packed);
/* True if t is a packed tensor made by tops__cuda_pack_right. */
int tops__cuda_is_packed(const tops_tensor *t);
/* A second device copy of a GPU-packed tensor (the bench rotates copies),
   and the bytes one copy streams. */
tops_status tops__cuda_packed_clone(const tops_tensor *src, tops_tensor *out);
size_t tops__cuda_packed_bytes(const tops_tensor *t);
/* Frees what a cuda:N tensor owns (tops_tensor_destroy calls this). */
void tops__cuda_tensor_release(tops_tensor *t);

/* ---- the kernels' contract --------------------------------------------------- */

/* Weight element codes as the kernels decode them (one kernel family each). */
enum {
    TOPS__CU_CODE_U4 = 0,   /* 4-bit integer, stored as q + 8 */
    TOPS__CU_CODE_E2M1 = 1, /* 4-bit float (mxfp4, nvfp4) */
    TOPS__CU_CODE_I8 = 2,   /* 8-bit integer, stored as q ^ 0x80 */
    TOPS__CU_CODE_E4M3 = 3, /* 8-bit float */
    TOPS__CU_CODE_F16 = 4,  /* plain 16-bit weights, same type as the activations */
    TOPS__CU_CODE_BF16 = 5,
    TOPS__CU_CODE_COUNT
};
/* Scale plane encodings kept from the source format (fewer bytes to stream). */
enum { TOPS__CU_SCALE_F32 = 0, TOPS__CU_SCALE_F16 = 1, TOPS__CU_SCALE_E8M0 = 2, TOPS__CU_SCALE_UE4M3 = 3 };

/*
 * Packed weight layout (one 16-row tile of N at a time):
 *   weights[tile][chunk][lane 0..31][16 bytes]: a chunk spans
 *   tops__cu_chunk_k(code) elements of K; lane (g = lane / 4, t = lane % 4)
 *   holds rows g and g + 8 of the tile at the K offsets its mma.sync
 *   fragments need, in the bit order its decoder reads (pack.c).
 *   scales[tile][group][16]: entry 2 * g + h is row g + 8 * h.
 * N is padded to 64 rows and K to 64 elements with zero codes.
 */
static inline int tops__cu_chunk_k(int code) {
    return code <= TOPS__CU_CODE_E2M1 ? 64 : code <= TOPS__CU_CODE_E4M3 ? 32 : 16;
}
static inline int tops__cu_scale_bytes(int kind) {
    return kind == TOPS__CU_SCALE_F32 ? 4 : kind == TOPS__CU_SCALE_F16 ? 2 : 1;
}
#define TOPS__CU_PAD_N 64
#define TOPS__CU_PAD_K 64

typedef struct tops__cuda_packed {
    uint32_t magic;
    int device;
    int code;          /* TOPS__CU_CODE_* */
    int scale_kind;    /* TOPS__CU_SCALE_* */
    int has_scales;    /* 0 for plain weights */
    int32_t group;     /* K elements per scale entry (k_pad when per row) */
    int64_t n, k;      /* logical extents */
    int64_t n_pad, k_pad;
    int64_t groups;    /* scale entries per row */
    float global_scale; /* multiplies every product (tensor scale, nvfp4's 1 / S_enc) */
    tops_format source; /* the format it was packed from */
    void *weights;     /* device */
    void *scales;      /* device; NULL when has_scales = 0 */
    size_t weight_bytes, scale_bytes;
    /* Relaxed FP8 layout (e4m3-ch / e4m3 packed with relaxed_precision = 1
       for a compute capability 9.0 device), NULL otherwise: the e4m3 codes
       row-major [n, k_pad] (what fp8_gemm.cu's tensor maps read) and the f32
       channel scales [n] (NULL for plain e4m3), in the same allocation. */
    void *fp8_weights, *fp8_scales;
    size_t fp8_bytes;  /* both, as allocated */
    /* The scale entries' range, scanned at pack time (tops__cu_fold_shift
       decides from it whether code x scale fits the activations' type):
       largest and smallest nonzero magnitude, and whether any is NaN / inf. */
    double scale_absmax, scale_absmin;
    int scale_nonfinite;
} tops__cuda_packed;
#define TOPS__CUDA_PACKED_MAGIC 0x43555041u /* "CUPA" */

/* Packs host weights [n, k] (rows along N, blocks along K) into host
   buffers laid out as above; fills *pk (device pointers left NULL) and
   returns malloc'd weights/scales that the caller frees.  Returns
   TOPS_UNSUPPORTED_FORMAT for formats the GPU path does not decode. */
tops_status tops__cuda_pack_host(const char *fn, const tops_tensor *right, int transpose_right,
                                 tops__cuda_packed *pk, void **weights, void **scales);

/* Whether the wgmma kernel can fold the scales of *pk into its weights for
   bf16 (1) or f16 (0) activations in this precision mode; *shift is the
   power of two the epilogue multiplies back (pack.c says when it holds). */
int tops__cu_fold_shift(const tops__cuda_packed *pk, int bf16, int relaxed, int *shift);

/* One launch of the weight-streaming matmul. */
typedef struct tops__cu_matmul_args {
    const void *weights, *scales;
    int code, scale_kind, has_scales;
    int32_t group;
    int64_t groups, n_pad, k_pad;
    float global_scale;
    const void *x;     /* activations [m, k], row stride ldx elements */
    int x_bf16;
    int64_t ldx;
    void *out;         /* [m, n], row stride ldo elements */
    tops_dtype out_dtype;
    int64_t ldo;
    int accumulate;
    int64_t m, n, k;
    int sm_count;
    void *stream;
    /* wgmma_w.cu only: fold = 1 forms w = code x scale in the activations'
       type (tops__cu_fold_shift), 2^fold_shift moved to the epilogue. */
    int fold, fold_shift;
} tops__cu_matmul_args;

/* Launches the kernels (asynchronous); returns a cudaError_t value (0 = ok)
   and, on failure, a short description in *what. */
int tops__cu_matmul_launch(const tops__cu_matmul_args *a, const char **what);
/* The strict wgmma kernel (wgmma_w.cu) for medium and large M on compute
   capability 9.0; returns cudaErrorNotSupported, launching nothing, where
   it does not apply (other parts, activation rows TMA cannot read). */
int tops__cu_wgmma_launch(const tops__cu_matmul_args *a, const char **what);
/* The kernel the calling thread's last launch used (the bench labels rows with it). */
const char *tops__cu_last_kernel(void);

/* Host copy of the relaxed FP8 layout of e4m3-ch or e4m3 weights [n, k]
   already packed into *pk: e4m3 codes [n, k_pad], then (e4m3-ch) f32
   channel scales [n] at *scale_offset; a malloc'd buffer of *bytes bytes.
   NULL when out of memory or for any other format. */
void *tops__cuda_pack_fp8_host(const tops_tensor *right, const tops__cuda_packed *pk, size_t *bytes,
                               size_t *scale_offset);

/* One relaxed FP8 matmul on sm_90a (fp8_gemm.cu): quantizes the activations
   to e4m3 per row, then the wgmma GEMM.  Same return convention. */
typedef struct tops__cu_fp8_args {
    const tops__cu_matmul_args *io; /* activations, output, shapes, mode, stream */
    const void *weights;            /* e4m3 [n, k_pad] */
    const void *ch_scales;          /* f32 [n] or NULL */
} tops__cu_fp8_args;
int tops__cu_fp8_launch(const tops__cu_fp8_args *a, const char **what);
/* Which kernel tops_matmul2d runs for this GPU-packed right at this M and
   precision mode (the bench prints it). */
const char *tops__cuda_matmul_path(const tops_tensor *right, int64_t m, int relaxed);

#ifdef __cplusplus
}
#endif

#endif
