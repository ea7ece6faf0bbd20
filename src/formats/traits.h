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

/* The CPU integer form of a format's traits row (core/intform.h), or NULL
   for an id out of range. */
const tops__int_layout *tops__format_int_layout(tops_format_id id);

#endif
