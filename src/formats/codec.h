/* What the rest of the library asks of the formats layer: decoding any
   rectangle of a tensor into f32.  Fast paths have their own packers; this
   is the generic, always-correct route (used by the reference kernels and
   by drivers for formats without a dedicated microkernel). */
#ifndef TOPS_FORMATS_CODEC_H
#define TOPS_FORMATS_CODEC_H

#include "formats/traits.h"

/*
 * Decodes rows [r0, r0 + nr) x columns [c0, c0 + nc) of the last two
 * dimensions of t (outer indices in `outer`, rank - 2 of them; NULL for a
 * rank-2 tensor; a rank-1 tensor is one row) into out[i * ld + j] as f32,
 * applying every plane (scales, bias, codebook, tensor_scale).  Any
 * alignment: a rectangle may start or end inside a block.  Host memory only;
 * the caller has checked the ranges.
 */
void tops__decode_rect(const tops_tensor *t, const int64_t *outer, int64_t r0, int64_t nr, int64_t c0,
                       int64_t nc, float *out, int64_t ld);

#endif
