/* tops_conv2d on a GPU: the entry src/ops/conv2d.c calls once it has checked
   the descriptor, the geometry, the shapes and the overlaps, and the
   plain-C contract between the host side (conv.c) and the kernels
   (conv.cu).  Kept apart from cuda_internal.h so that a change here
   recompiles only the conv files. */
#ifndef TOPS_CUDA_CONV_H
#define TOPS_CUDA_CONV_H

#include "tensorops.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The checked geometry (src/ops/conv2d.c's plan): NHWC input [n, h, w, c],
   output [n, oh, ow, o], taps kh x kw, K = kh * kw * c / groups. */
typedef struct tops__cuda_conv_geom {
    int64_t n, h, w, c, o, kh, kw, oh, ow, k;
    int64_t sh, sw, dh, dw, pt, pl, groups;
    int64_t row_stride; /* dest's collapsed N * OH * OW stride (elements) */
    int depthwise;      /* groups = C = O */
} tops__cuda_conv_geom;

/* tops_conv2d with exec->device = cuda:N.  weight2d is the rank-2 [O, K]
   view of the weights (host or device memory, any format the GPU matmul
   takes) or a tensor tops_pack_right made for cuda:N; bias NULL or rank 1
   [O] f32/f16/bf16 in host or device memory.  path != NULL: the same
   checks, and the name of what would run, written into path. */
tops_status tops__cuda_conv2d(const tops_exec *exec, const tops__cuda_conv_geom *g, const tops_conv2d_desc *desc,
                              const tops_tensor *input, const tops_tensor *weight2d, tops_tensor *dest, char *path,
                              size_t cap);

/* ---- the kernels' contract (conv.cu) ---------------------------------------- */

/* Activations: NHWC, 16-bit (f16 or bf16), element strides; channel stride 1. */
typedef struct tops__cu_conv_args {
    const void *x;
    int bf16;
    int64_t xs_n, xs_h, xs_w;
    int64_t n, h, w, c, o, kh, kw, oh, ow, k;
    int64_t sh, sw, dh, dw, pt, pl, groups;
    void *out; /* [n * oh * ow, o], row stride ldo, channels contiguous */
    tops_dtype out_dtype;
    int64_t ldo;
    int accumulate;
    const float *bias; /* device, [o], or NULL */
    void *stream;
    int wg_l1;     /* wgmma kernel: gathered activation pieces through L1 (cp.async.ca) */
    int wg_im2col; /* wgmma kernel: activation tiles by TMA im2col where C / groups is a multiple of 64 */
} tops__cu_conv_args;

/* Implicit GEMM on the tensor cores (mma.sync m16n8k16, f32 sums):
   weights [o][k] 16-bit of the activations' type, row stride ldw (a
   multiple of 8), device memory; c / groups a multiple of 8, x 16-byte
   aligned, xs_* multiples of 8.  Returns a cudaError_t. */
int tops__cu_conv_igemm_launch(const tops__cu_conv_args *a, const void *w, int64_t ldw);
/* The wgmma kernel's weights: `terms` planes (1, 2 for f16 activations, 3
   for bf16) of 16-bit values of the activations' type, each [o][k] with
   row stride ldw (a multiple of 8), plane t at w + t * plane_rows * ldw
   elements (plane_rows >= o), summed into the same f32 sums in plane
   order; the sums then times unit[j] x global (unit NULL: as they are). */
typedef struct tops__cu_conv_weights {
    const void *w;
    int64_t ldw;
    int terms;
    int64_t plane_rows;
    const float *unit;
    float global;
} tops__cu_conv_weights;
/* The same on wgmma (compute capability 9.0 only; conv.c checks): 128 x bn
   tiles (bn 64, 128 or 256; 64 or 128 for two or three terms), K split in
   `splits` parts summed in split order.  cudaErrorNotSupported, launching
   nothing, where the pieces are not 16-byte aligned or the driver refuses
   the weights' tensor map. */
int tops__cu_conv_wgmma_launch(const tops__cu_conv_args *a, const tops__cu_conv_weights *w, int bn, int splits);
/* The transposed wgmma kernel: 128 output channels x pn output pixels a
   CTA (pn 96, 104, 128, 192 or 256; the weights wgmma's A operand, the TMA im2col
   pixels its B), K split in `splits` parts summed in split order; groups 1,
   C a multiple of 64, one weight term, bias / accumulate / unit as above.
   cudaErrorNotSupported, launching nothing, where it does not apply. */
int tops__cu_conv_wgt_launch(const tops__cu_conv_args *a, const tops__cu_conv_weights *w, int pn, int splits);
/* The direct 3x3 kernel: stride 1, dilation 1, groups 1, C = 64, O <= 64,
   one weight term; output tiles of 8 x 14 pixels over at most `sms` CTAs,
   bias / accumulate / unit as above.  cudaErrorNotSupported, launching
   nothing, where it does not apply. */
int tops__cu_conv_direct_launch(const tops__cu_conv_args *a, const tops__cu_conv_weights *w, int sms);
/* The im2col rows [m0, m0 + rows) of group g into col ([rows][ldc], the
   activations' type, zeros for padding and for the columns k..ldc). */
int tops__cu_conv_im2col_launch(const tops__cu_conv_args *a, int64_t g, int64_t m0, int64_t rows, void *col,
                                int64_t ldc);
/* out[m][j] = bias[j] (accumulate: +=) over [n * oh * ow, o]. */
int tops__cu_conv_bias_launch(const tops__cu_conv_args *a);
/* Depthwise (groups = c = o): taps w[ch * wstride + i * kw + j] in wdtype
   (f32, f16 or bf16), device memory. */
int tops__cu_conv_dw_launch(const tops__cu_conv_args *a, const void *w, tops_dtype wdtype, int64_t wstride);
/* The same on dequantized taps: channel ch's taps are the sums of t->terms
   planes (the activations' type) at t->w + ch * t->ldw, times t->unit[ch]
   x t->global. */
int tops__cu_conv_dw_terms_launch(const tops__cu_conv_args *a, const tops__cu_conv_weights *t);

#ifdef __cplusplus
}
#endif

#endif
