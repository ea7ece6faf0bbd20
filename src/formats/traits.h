/* The format traits table, as seen from inside the library. */
#ifndef TOPS_FORMATS_TRAITS_H
#define TOPS_FORMATS_TRAITS_H

#include "core/gpuform.h"
#include "core/intform.h"
#include "internal.h"

/* Bytes spanned by n consecutive elements of a row that starts on a storage
   unit (n >= 1). */
static inline int64_t tops__row_bytes(const tops_format_info *info, int64_t n) {
    return tops__ceil_div(n, info->pack_elems) * info->pack_bytes;
}

/* The format whose traits row reads ggml tensor type `type` in place
   (its gguf_type), or -1. */
int tops__format_of_gguf_type(uint32_t type);

/* Plain f32, f16 or bf16 elements (no planes): what activations, outputs
   and tiles take as they are. */
static inline int tops__format_is_float(tops_format_id id) {
    const tops_format_info *info = tops_format_get_info(id);
    return info && info->block == 1 && !info->codebook &&
           (info->element == TOPS_DT_F32 || info->element == TOPS_DT_F16 || info->element == TOPS_DT_BF16);
}

/* The element dtype of a tensor of plain f32, f16 or bf16 elements, else
   TOPS_DT_NONE: what the backends ask of activations, outputs and 16-bit
   weights instead of naming format ids. */
static inline tops_dtype tops__float_of(const tops_tensor *t) {
    return tops__format_is_float(t->format.id) ? tops_format_get_info(t->format.id)->element : TOPS_DT_NONE;
}
/* A 16-bit float tensor (f16 or bf16). */
static inline int tops__is_half(const tops_tensor *t) {
    const tops_dtype d = tops__float_of(t);
    return d == TOPS_DT_F16 || d == TOPS_DT_BF16;
}

/* tops_pack_right's output: the one row of the table that is a marker
   (the tensor's packed_ holds the panels), not a number format. */
static inline int tops__is_packed(const tops_tensor *t) { return t->format.id == TOPS_FMT_PACKED; }
static inline tops_format tops__packed_format(void) { return (tops_format){TOPS_FMT_PACKED, 1, TOPS_DT_NONE}; }
/* A number format (every row of the table but that marker): what a file
   may name and store. */
static inline int tops__format_is_number(tops_format_id id) { return id >= 0 && id < TOPS_FMT_COUNT_ && id != TOPS_FMT_PACKED; }

/* The CPU integer form of a format's traits row (core/intform.h), or NULL
   for an id out of range. */
const tops__int_layout *tops__format_int_layout(tops_format_id id);
/* The GPU pack rule of a format's traits row (core/gpuform.h; family
   TOPS__GF_NONE: the GPU refuses it), or NULL for an id out of range. */
const tops__gpu_rule *tops__format_gpu_rule(tops_format_id id);

#endif
