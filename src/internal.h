/* Internal helpers shared by every layer: the tops__ prefix is private. */
#ifndef TOPS_INTERNAL_H
#define TOPS_INTERNAL_H

#include "tensorops.h"

#include <stdio.h>
#include <stdlib.h>

#define TOPS_TENSOR_MAGIC 0x544f5053u /* "TOPS": set by view/create/slice */

#if defined(__GNUC__)
#define TOPS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define TOPS_LIKELY(x) __builtin_expect(!!(x), 1)
#define TOPS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define TOPS_PRINTF(a, b)
#define TOPS_LIKELY(x) (x)
#define TOPS_UNLIKELY(x) (x)
#endif

/* Records "fn: sentence" as this thread's last error and returns status. */
tops_status tops__fail(tops_status status, const char *fn, const char *fmt, ...) TOPS_PRINTF(3, 4);

/* Internal invariants: abort in debug builds, compiled out otherwise. */
#ifndef NDEBUG
#define TOPS_ASSERT(cond)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "tensorops: internal assertion failed: %s (%s:%d)\n", #cond, \
                    __FILE__, __LINE__);                                               \
            abort();                                                                   \
        }                                                                              \
    } while (0)
#else
#define TOPS_ASSERT(cond) ((void)0)
#endif

/* Checked arithmetic for sizes: return 0 on overflow. */
static inline int tops__mul_size(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int tops__add_size(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
static inline int tops__mul_i64(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int64_t tops__ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t tops__round_up(int64_t v, int64_t to) { return tops__ceil_div(v, to) * to; }

/* 64-byte aligned allocation; NULL on failure or overflow. */
void *tops__aligned_alloc(size_t bytes);
void tops__aligned_free(void *p);

/* Frees what a tensor of one device kind owns (src/core/tensor.c): the
   backend that makes such tensors registers it (src/cuda/runtime.c for
   CUDA), so tops_tensor_destroy, which every layer calls, names no backend. */
typedef void (*tops__tensor_release_fn)(tops_tensor *t);
/* Returns the function registered before (NULL: none). */
tops__tensor_release_fn tops__tensor_set_release(tops_device_kind kind, tops__tensor_release_fn fn);

/* Validates that t was made by view/create/slice (and names it in errors). */
tops_status tops__check_tensor(const char *fn, const char *arg, const tops_tensor *t);
/* A packed varlen operand [T, H, D] as a [1, H, T, D] view of the same
   memory (every plane moved alike; owns nothing), so one sequence is rows
   of the [S, D] matrices attention reads (src/formats/tensor.c). */
void tops__tensor_packed_view(const tops_tensor *t, tops_tensor *o);

#endif
