/* The format traits table, as seen from inside the library. */
#ifndef TOPS_FORMATS_TRAITS_H
#define TOPS_FORMATS_TRAITS_H

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

/* tops_pack_right's output: the one row of the table that is a marker
   (the tensor's packed_ holds the panels), not a number format. */
static inline int tops__is_packed(const tops_tensor *t) { return t->format.id == TOPS_FMT_PACKED; }
static inline tops_format tops__packed_format(void) { return (tops_format){TOPS_FMT_PACKED, 1, TOPS_DT_NONE}; }

/* The CPU integer form of a format's traits row (core/intform.h), or NULL
   for an id out of range. */
const tops__int_layout *tops__format_int_layout(tops_format_id id);

#endif
