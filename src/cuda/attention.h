/* tops_attention on a GPU: the entry src/ops/attention.c calls, and the
   plain-C contract between its host side (attention.c) and the kernels
   (attention.cu).  Kept apart from cuda_internal.h so that a change here
   recompiles only the attention files. */
#ifndef TOPS_CUDA_ATTENTION_H
#define TOPS_CUDA_ATTENTION_H

#include "tensorops.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* tops_attention with exec->device = cuda:N, after src/ops/attention.c has
   checked the descriptor, the shapes and the overlaps; desc->scale is
   resolved (> 0).  Every case the device does not run yet is refused by one
   function (device_support in attention.c) with a sentence. */
tops_status tops__cuda_attention(const tops_exec *exec, const tops_attention_desc *desc, const tops_tensor *q,
                                 const tops_tensor *k, const tops_tensor *v, tops_tensor *out);
/* The name of the kernel tops__cuda_attention would launch (the bench's and
   validate's path column), after the same checks. */
tops_status tops__cuda_attention_path(const tops_exec *exec, const tops_attention_desc *desc, const tops_tensor *q,
                                      const tops_tensor *k, const tops_tensor *v, const tops_tensor *out, char *buf,
                                      size_t cap);

/* One launch.  Strides in elements, [0] batch, [1] head, [2] sequence; the
   head dimension is contiguous.  Returns a cudaError_t (cudaErrorNotSupported
   when no kernel applies). */
typedef struct tops__cu_attn_args {
    int bf16;           /* 0: f16 q, k, v and out; 1: bf16 */
    int d;              /* head dim of q, k, v and out (a multiple of 8, <= 256) */
    int64_t batch, heads, kv_heads, sq, sk;
    const void *q, *k, *v;
    void *out;
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];
    int causal;
    int64_t window;
    float scale, softcap;
    int sm_count;       /* the device's SMs (tops__cuda_sm_count) */
    void *stream;
} tops__cu_attn_args;

int tops__cu_attention_launch(const tops__cu_attn_args *a);
/* The kernel a launch with these arguments runs ("fa3 d128 bn128 ..."). */
void tops__cu_attention_name(const tops__cu_attn_args *a, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
