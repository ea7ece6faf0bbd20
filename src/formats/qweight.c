/* tops__qweight_of: a weight's planes, strides and traits constants for
   the unpackers (formats/qweight.h). */
#include "formats/qweight.h"

#include <math.h>

tops__qweight tops__qweight_of(const tops_tensor *w) {
    const tops_format_info *info = tops_format_get_info(w->format.id);
    const tops_plane *p = &w->scales, *bp = &w->bias;
    const int esz = p->data ? (tops_dtype_bits(p->dtype) + 7) / 8 : 0;
    const int bsz = bp->data ? (tops_dtype_bits(bp->dtype) + 7) / 8 : 0;
    tops__qweight q = {
        .data = (const uint8_t *)w->data,
        .row_bytes = (w->stride[0] / info->pack_elems) * info->pack_bytes,
        .k = w->extent[1],
        .sub = tops__unpack_sub(w),
        .block_bytes = info->pack_bytes,
        .lay = *tops__format_int_layout(w->format.id),
        .group = info->block > 1 ? w->format.group : 32,
        .scales = (const uint8_t *)p->data,
        .scale_dtype = p->dtype,
        .scale_row = p->stride[0] * esz,
        .scale_step = p->stride[1] * esz,
        .bias = (const uint8_t *)bp->data,
        .bias_dtype = bp->dtype,
        .bias_row = bp->stride[0] * bsz,
        .bias_step = bp->stride[1] * bsz,
        /* every scale's multiplier besides its stored value: the layout's
           unit (2^unit_exp, core/intform.h) and the tensor scale; one place,
           so the row stream's in-kernel scales equal the unpackers' */
        .mul = ldexpf(1.0f, tops__format_int_layout(w->format.id)->unit_exp) *
               (info->has_tensor_scale ? 1.0f / w->tensor_scale : w->tensor_scale),
    };
    return q;
}
