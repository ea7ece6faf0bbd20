/* The CUDA entry points when the library is built without CUDA: each one
   says so with a status and a sentence (src/cuda holds the real ones).
   Above core and the CPU backend, beside src/cuda: only the front doors
   (src/ops) and the public API call these. */
#include "cuda/attention.h"
#include "cuda/conv.h"
#include "cuda/cuda_internal.h"
#include "internal.h"

#ifndef TOPS_HAVE_CUDA

#define NO_CUDA(fn) tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "this build of tensorops has no CUDA backend (nvcc was not found at build time)")

tops_status tops_cuda_device_count(int *count) {
    if (!count) return tops__fail(TOPS_INVALID_ARGUMENT, "tops_cuda_device_count", "count is NULL");
    *count = 0;
    return TOPS_OK;
}
tops_status tops_cuda_get_device_info(int device, tops_cuda_device_info *out) {
    (void)device;
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, "tops_cuda_get_device_info", "out is NULL");
    return NO_CUDA("tops_cuda_get_device_info");
}
tops_status tops_cuda_alloc(int device, size_t bytes, void **out) {
    (void)device;
    (void)bytes;
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, "tops_cuda_alloc", "out is NULL");
    return NO_CUDA("tops_cuda_alloc");
}
tops_status tops_cuda_free(int device, void *ptr) {
    (void)device;
    return ptr ? NO_CUDA("tops_cuda_free") : TOPS_OK;
}
tops_status tops_cuda_copy(void *dst, tops_memory dst_memory, const void *src, tops_memory src_memory, size_t bytes,
                           void *stream) {
    (void)dst;
    (void)dst_memory;
    (void)src;
    (void)src_memory;
    (void)bytes;
    (void)stream;
    return NO_CUDA("tops_cuda_copy");
}
tops_status tops_cuda_synchronize(const tops_exec *exec) {
    (void)exec;
    return NO_CUDA("tops_cuda_synchronize");
}
tops_status tops_tensor_to(const tops_tensor *src, tops_memory to, tops_tensor *out) {
    (void)src;
    (void)to;
    (void)out;
    return NO_CUDA("tops_tensor_to");
}
tops_status tops__cuda_matmul2d_path(const tops_exec *exec, const tops_matmul2d_desc *desc, const tops_tensor *left,
                                     const tops_tensor *right, const tops_tensor *dest, char *buf, size_t cap) {
    (void)desc;
    (void)left;
    (void)right;
    (void)dest;
    (void)buf;
    (void)cap;
    return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, "tops_matmul2d_path",
                      "exec.device is cuda:%d but this build of tensorops has no CUDA backend (nvcc was not found at "
                      "build time)",
                      exec->device.index);
}
tops_status tops__cuda_matmul2d(const tops_exec *exec, const tops_matmul2d_desc *desc, const tops_tensor *left,
                                const tops_tensor *right, tops_tensor *dest) {
    (void)desc;
    (void)left;
    (void)right;
    (void)dest;
    return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, "tops_matmul2d",
                      "exec.device is cuda:%d but this build of tensorops has no CUDA backend (nvcc was not found at "
                      "build time)",
                      exec->device.index);
}
tops_status tops__cuda_pack_right(const tops_exec *exec, const tops_matmul2d_desc *desc, const tops_tensor *right,
                                  tops_tensor *packed) {
    (void)desc;
    (void)right;
    (void)packed;
    return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, "tops_pack_right",
                      "exec.device is cuda:%d but this build of tensorops has no CUDA backend (nvcc was not found at "
                      "build time)",
                      exec->device.index);
}
int tops__cuda_is_packed(const tops_tensor *t) {
    (void)t;
    return 0;
}
tops_status tops__cuda_attention(const tops_exec *exec, const tops_attention_desc *desc, const tops_tensor *q,
                                 const tops_tensor *k, const tops_tensor *v, tops_tensor *out) {
    (void)desc;
    (void)q;
    (void)k;
    (void)v;
    (void)out;
    return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, "tops_attention",
                      "exec.device is cuda:%d but this build of tensorops has no CUDA backend (nvcc was not found at "
                      "build time)",
                      exec->device.index);
}
tops_status tops__cuda_attention_path(const tops_exec *exec, const tops_attention_desc *desc, const tops_tensor *q,
                                      const tops_tensor *k, const tops_tensor *v, const tops_tensor *out, char *buf,
                                      size_t cap) {
    (void)buf;
    (void)cap;
    return tops__cuda_attention(exec, desc, q, k, v, (tops_tensor *)out);
}
tops_status tops__cuda_conv2d(const tops_exec *exec, const tops__cuda_conv_geom *g, const tops_conv2d_desc *desc,
                              const tops_tensor *input, const tops_tensor *weight2d, tops_tensor *dest, char *path,
                              size_t cap) {
    (void)g;
    (void)desc;
    (void)input;
    (void)weight2d;
    (void)dest;
    (void)cap;
    return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, path ? "tops_conv2d_path" : "tops_conv2d",
                      "exec.device is cuda:%d but this build of tensorops has no CUDA backend (nvcc was not found at "
                      "build time)",
                      exec->device.index);
}

#else
typedef int tops__cuda_absent_unused; /* ISO C wants a declaration in every file */
#endif
