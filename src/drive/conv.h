/* conv2d's CPU drivers: the im2col row gather that feeds the matmul2d
   drivers' left packing (implicit GEMM), and the depthwise direct driver.
   The op layer (src/ops/conv2d.c) checks every argument first. */
#ifndef TOPS_DRIVE_CONV_H
#define TOPS_DRIVE_CONV_H

#include "drive/gemm.h"

/* One group's view of an NHWC input: row m = (n, y, x) of the virtual
   im2col matrix [N * OH * OW, KH * KW * cg], column k = (i, j, c), holds
   input[n, y * sh + i * dh - pt, x * sw + j * dw - pl, c0 + c] (0 outside). */
typedef struct tops__conv_geom {
    const tops_tensor *in;   /* [N, H, W, C]: f32, f16 or bf16, any strides */
    int64_t h, w, oh, ow;
    int64_t kh, kw, sh, sw, dh, dw, pt, pl;
    int64_t cg, c0;          /* channels per group, first channel of the group */
} tops__conv_geom;

/* n elements of one pixel's channels (element offset off, channel stride
   s3) of t (dtype dt: f32, f16 or bf16) as f32, tensor_scale applied. */
void tops__conv_read_run(const tops__kernels *kern, const tops_tensor *t, tops_dtype dt, int64_t off, int64_t s3,
                         int64_t n, float *out);

/* tops__rows_gather over a tops__conv_geom (ctx). */
void tops__conv_gather(const void *ctx, const tops__kernels *kern, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                       float *out, int64_t ld);

/* Depthwise (groups = C = O): dest2d [N * OH * OW, C] (f32/f16/bf16, any
   strides) (+)= the taps w[(i * kw + j) * C + c] (f32) and bias[c] (f32,
   or NULL), through kern->conv_dw_f32, threads over output rows (N * OH).
   Fails only with TOPS_OUT_OF_MEMORY before anything is written. */
tops_status tops__conv_dw_run(const char *fn, const tops__kernels *kern, const tops__conv_geom *g, int64_t batch,
                              const float *w, const float *bias, tops_tensor *dest2d, int accumulate, int threads);

/* Implicit GEMM with A read in place (kern->conv_f32_rows where set, else
   kern->conv_f32_segs): groups 1, f32 input with contiguous channels, the
   weights tops_pack_right's f32 panels of kern->conv_f32_nr columns over
   all of K = KH * KW * C ([K][nr] per panel, panel p at panels + p * K *
   nr).  Each output is one FMA chain over its non-padding K in order;
   threads over tiles.  dest2d [N * OH * OW, o] as for tops__conv_dw_run. */
tops_status tops__conv_rows_run(const char *fn, const tops__kernels *kern, const tops__conv_geom *g, int64_t batch,
                                const float *panels, int64_t o, tops_tensor *dest2d, int accumulate, int threads);
/* The kernel tops__conv_rows_run runs at this level (for path strings). */
const char *tops__conv_rows_kernel(const tops__kernels *kern);

/* The relaxed twin (kern->gemm_q8_rows): the input (any dtype and strides)
   quantized once per call to i8 per 32 channels (C % 32 == 0), then the
   gemm_q8 panels and scales tops_pack_right made for relaxed use
   (8-column groups over all of K, codes + offset), 6 x 32 tiles, one
   kernel call per tap (or per kernel row where its taps are contiguous). */
tops_status tops__conv_q8_rows_run(const char *fn, const tops__kernels *kern, const tops__conv_geom *g, int64_t batch,
                                   const uint8_t *panels, const float *scales, int offset, int64_t o,
                                   tops_tensor *dest2d, int accumulate, int threads);

/* Winograd F(2x2, 3x3) (drive/conv_wino.c), relaxed calls only: 3x3
   kernels, stride 1, dilation 1, groups 1.  tops__wino_weights transforms
   f32 weights w[o * ldw + (i * 3 + j) * c + ch] into u: for each of the 16
   positions xi and panel p of nr output channels, [c][nr] f32 (gemm_f32's
   B panel layout, zeros past o) at u + (xi * ceil(o / nr) + p) * c * nr;
   tops__wino_u_floats is its size.  tops__conv_wino_run: dest2d [N * OH *
   OW, o] (+)= bias (f32 [o] or NULL) + the convolution of g's input with
   them, through kern->wino_f23_in, kern->gemm_f32 (nr its nr) and
   kern->wino_f23_out; threads over tile blocks (and output panels when
   the blocks are fewer than threads).  Each output is computed the same
   way whatever the split: the bits do not depend on the thread count.
   Fails only before anything is written. */
/* Weights prepared for conv2d and kept on a CPU pack
   (tops__packed_right.conv_cache): nr > 0, Winograd's u as
   tops__wino_weights made it for panels of nr columns; nr = 0, the AMX
   direct path's bf16 panels (tops__conv_amx_weights); for c input and o
   output channels and k = KH * KW * c. */
typedef struct tops__conv_cache {
    int nr;
    int64_t c, o, k;
    void *u;
} tops__conv_cache;
/* The CPU release hook (tops__tensor_set_release): frees a packed
   tensor's conv2d cache, if it has one. */
void tops__conv_cache_release(tops_tensor *t);
int64_t tops__wino_u_floats(int nr, int64_t c, int64_t o);
void tops__wino_weights(const float *w, int64_t ldw, int64_t c, int64_t o, int nr, float *u, int threads);
tops_status tops__conv_wino_run(const char *fn, const tops__kernels *kern, const tops__conv_geom *g, int64_t batch,
                                const float *u, int64_t o, const float *bias, tops_tensor *dest2d, int accumulate,
                                int threads);

/* Relaxed direct conv2d on the AMX bf16 tiles (drive/conv_amx.c,
   kern->conv_amx): groups 1 (g->c0 0).  tops__conv_amx_weights rounds f32
   weights w[oc * ldw + t * c + ch] (t = i * kw + j) once to bf16 panels
   of 16 output channels: [ceil(o / 16)][taps][cpad / 32][16 k pairs][16][2]
   (zeros past c and o; cpad = tops__conv_amx_cpad(c), the channels
   rounded up to 32), tops__conv_amx_weight_elems of them.
   tops__conv_amx_run: the input (f32 / f16 / bf16, any strides) rounded
   once to bf16 into a zero-padded NHWC image, then per output row and
   32 output channels the kernel over blocks of 32 pixels; dest2d [N * OH *
   OW, o] (+)= the sums + bias (f32 [o] or NULL).  Threads over (output
   row, channel pair) jobs; every output is computed the same way whatever
   the split or the chunks of images.  Fails only before anything is
   written. */
int64_t tops__conv_amx_cpad(int64_t c);
/* The bf16 image's bytes for one image of g.  The driver copies images in
   chunks of at most `budget` bytes (one image at least); the op passes
   TOPS__CONV_AMX_IMAGE_BUDGET and takes the path only where one image
   fits it. */
#define TOPS__CONV_AMX_IMAGE_BUDGET ((int64_t)64 << 20)
int64_t tops__conv_amx_image_bytes(const tops__conv_geom *g);
int64_t tops__conv_amx_weight_elems(int64_t taps, int64_t c, int64_t o);
void tops__conv_amx_weights(const float *w, int64_t ldw, int64_t taps, int64_t c, int64_t o, uint16_t *out);
tops_status tops__conv_amx_run(const char *fn, const tops__kernels *kern, const tops__conv_geom *g, int64_t batch,
                               const uint16_t *wpanels, int64_t o, const float *bias, tops_tensor *dest2d,
                               int accumulate, int threads, int64_t budget);

#endif
