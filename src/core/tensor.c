/* tops_tensor_destroy and the hook through which a device backend frees
   what its tensors own.  Host tensors own one allocation (owner_); a
   backend that makes device tensors registers its release function here
   (tops__tensor_set_release, internal.h), so nothing below it names it.
   Unregistered kinds own nothing: a view of caller memory is only cleared.
   On the CPU a registered function runs before owner_ is freed: it frees
   what an op attached to a packed tensor later (conv2d's Winograd weights). */
#include "internal.h"

#include <string.h>

static tops__tensor_release_fn release_fn[2]; /* by tops_device_kind */

tops__tensor_release_fn tops__tensor_set_release(tops_device_kind kind, tops__tensor_release_fn fn) {
    if ((int)kind < 0 || (size_t)kind >= sizeof release_fn / sizeof release_fn[0]) return NULL;
    tops__tensor_release_fn previous = release_fn[kind];
    release_fn[kind] = fn;
    return previous;
}

void tops_tensor_destroy(tops_tensor *tensor) {
    if (!tensor || tensor->magic != TOPS_TENSOR_MAGIC) return;
    if (tensor->memory.kind != TOPS_DEVICE_CPU) {
        const int kind = (int)tensor->memory.kind;
        if (kind > 0 && (size_t)kind < sizeof release_fn / sizeof release_fn[0] && release_fn[kind])
            release_fn[kind](tensor);
    } else if (tensor->owner_) {
        if (release_fn[TOPS_DEVICE_CPU]) release_fn[TOPS_DEVICE_CPU](tensor); /* what an op attached (then owner_) */
        tops__aligned_free(tensor->owner_);
    }
    memset(tensor, 0, sizeof *tensor);
}
