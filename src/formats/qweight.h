/* Weights as the unpackers see them: the CPU drivers and the GPU packer
   turn a tensor and its traits row into a tops__qweight (core/intform.h:
   planes, strides, constants) once per call, so no microkernel reads a
   tensor or the format registry. */
#ifndef TOPS_FORMATS_QWEIGHT_H
#define TOPS_FORMATS_QWEIGHT_H

#include "formats/traits.h"

/* Sub-block of the integer form: the format's block, at most 32 (plain
   integer formats: 32), so activations quantize per 16 or 32. */
static inline int tops__unpack_sub(const tops_tensor *t) {
    const tops_format_info *info = tops_format_get_info(t->format.id);
    int64_t block = info->sub_block ? info->sub_block : info->block > 1 ? t->format.group : 32;
    return block < 32 ? (int)block : 32;
}
/* First byte of row `row` of a weight's data plane. */
static inline const uint8_t *tops__weight_row(const tops_tensor *t, int64_t row) {
    const tops_format_info *info = tops_format_get_info(t->format.id);
    return (const uint8_t *)t->data + row * (t->stride[0] / info->pack_elems) * info->pack_bytes;
}
/* The unpackers' view of a weight (planes, strides, traits constants). */
tops__qweight tops__qweight_of(const tops_tensor *w);

#endif
