/* tops_attention on a GPU (exec.device = cuda:N): what the device runs, and
   the launch.  src/ops/attention.c has checked the descriptor, the shapes and
   the overlaps; device_support() refuses, with a sentence, every case the
   device kernel does not handle yet (one place to extend). */
#include "cuda/attention.h"
#include "cuda/runtime.h"

#include <string.h>

static const char fn[] = "tops_attention";

static tops_status check_memory(const char *what, const tops_tensor *t, int device) {
    if (t->memory.kind != TOPS_DEVICE_CUDA || t->memory.index != device) {
        if (t->memory.kind == TOPS_DEVICE_CUDA)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s is in cuda:%d memory but exec.device is cuda:%d", what,
                              t->memory.index, device);
        return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                          "%s is in host memory but exec.device is cuda:%d; copy it there with tops_tensor_to", what,
                          device);
    }
    return tops__cuda_check_pointer(fn, what, t->data, t->memory);
}

static int sm90_device(int device) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return major == 9 && minor == 0;
}

/* A tensor TMA can read as [B, H, S, D] rows: D contiguous, 16-byte aligned
   base and strides. */
static tops_status tma_rows(const char *what, const tops_tensor *t) {
    if (t->stride[3] != 1)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                          "%s has head-dim stride %lld; on the GPU the head dimension must be contiguous", what,
                          (long long)t->stride[3]);
    if (((uintptr_t)t->data & 15) != 0)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "%s is not 16-byte aligned; the GPU kernel reads it by TMA",
                          what);
    for (int i = 0; i < 3; i++)
        if (t->extent[i] > 1 && (t->stride[i] % 8 != 0 || t->stride[i] <= 0 || t->stride[i] >= ((int64_t)1 << 38)))
            return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                              "%s has stride %lld in dimension %d; on the GPU strides must be positive multiples of 8 "
                              "elements (16 bytes)",
                              what, (long long)t->stride[i], i);
    return TOPS_OK;
}

/* Every case the GPU kernel does not run yet, refused here and only here. */
static tops_status device_support(int device, const tops_attention_desc *d, const tops_tensor *q, const tops_tensor *k,
                                  const tops_tensor *v, const tops_tensor *out) {
    (void)d;
    char name[48];
    if (!sm90_device(device))
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                          "cuda:%d is not compute capability 9.0; the fused attention kernel needs Hopper (sm_90a)",
                          device);
    tops_format_id ty = q->format.id;
    if (ty != TOPS_FMT_F16 && ty != TOPS_FMT_BF16)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "q has format %s; on the GPU q, k, v and out are f16 or bf16",
                          tops_format_name(q->format, name, sizeof name));
    const tops_tensor *all[3] = {k, v, out};
    const char *names[3] = {"k", "v", "out"};
    for (int i = 0; i < 3; i++)
        if (all[i]->format.id != ty)
            return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                              "%s has format %s but q is %s; on the GPU q, k, v and out share one type (f16 or bf16)",
                              names[i], tops_format_name(all[i]->format, name, sizeof name),
                              ty == TOPS_FMT_F16 ? "f16" : "bf16");
    if (q->tensor_scale != 1.0f || k->tensor_scale != 1.0f || v->tensor_scale != 1.0f)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "q, k and v must have tensor_scale 1 on the GPU");
    int64_t D = q->extent[3], Dv = v->extent[3];
    if (Dv != D)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "head dims %lld (q, k) and %lld (v) differ; on the GPU they are equal",
                          (long long)D, (long long)Dv);
    if (D % 8 != 0)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "head dim %lld; on the GPU it is a multiple of 8 (16..256)",
                          (long long)D);
    if (q->extent[2] > ((int64_t)1 << 29) || k->extent[2] > ((int64_t)1 << 29))
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "sequence lengths must be at most 2^29 on the GPU");
    if (q->extent[0] > 65535 || q->extent[1] > 65535)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "batch and heads must be at most 65535 each on the GPU");
    tops_status st;
    if ((st = tma_rows("q", q)) != TOPS_OK || (st = tma_rows("k", k)) != TOPS_OK || (st = tma_rows("v", v)) != TOPS_OK)
        return st;
    if (out->stride[3] != 1 || ((uintptr_t)out->data & 3) != 0)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "out must have a contiguous, 4-byte aligned head dimension on the GPU");
    for (int i = 0; i < 3; i++)
        if (out->extent[i] > 1 && out->stride[i] % 2 != 0)
            return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "out has odd stride %lld in dimension %d; on the GPU it must be even",
                              (long long)out->stride[i], i);
    return TOPS_OK;
}

static tops_status prepare(const tops_exec *exec, const tops_attention_desc *desc, const tops_tensor *q,
                           const tops_tensor *k, const tops_tensor *v, const tops_tensor *out, tops__cu_attn_args *a) {
    int device = exec->device.index;
    tops_status st = tops__cuda_check_device(fn, "exec.device", device);
    if (st != TOPS_OK) return st;
    if ((st = check_memory("q", q, device)) != TOPS_OK || (st = check_memory("k", k, device)) != TOPS_OK ||
        (st = check_memory("v", v, device)) != TOPS_OK || (st = check_memory("out", out, device)) != TOPS_OK)
        return st;
    if ((st = device_support(device, desc, q, k, v, out)) != TOPS_OK) return st;
    memset(a, 0, sizeof *a);
    a->bf16 = q->format.id == TOPS_FMT_BF16;
    a->d = (int)q->extent[3];
    a->batch = q->extent[0];
    a->heads = q->extent[1];
    a->kv_heads = k->extent[1];
    a->sq = q->extent[2];
    a->sk = k->extent[2];
    a->q = q->data;
    a->k = k->data;
    a->v = v->data;
    a->out = out->data;
    for (int i = 0; i < 3; i++) {
        a->q_stride[i] = q->stride[i];
        a->k_stride[i] = k->stride[i];
        a->v_stride[i] = v->stride[i];
        a->o_stride[i] = out->stride[i];
    }
    a->causal = desc->causal;
    a->window = desc->window;
    a->scale = desc->scale;
    a->softcap = desc->softcap;
    a->stream = exec->stream;
    return TOPS_OK;
}

tops_status tops__cuda_attention(const tops_exec *exec, const tops_attention_desc *desc, const tops_tensor *q,
                                 const tops_tensor *k, const tops_tensor *v, tops_tensor *out) {
    tops__cu_attn_args a;
    tops_status st = prepare(exec, desc, q, k, v, out, &a);
    if (st != TOPS_OK) return st;
    int prev;
    if ((st = tops__cuda_enter(fn, exec->device.index, &prev)) != TOPS_OK) return st;
    int e = tops__cu_attention_launch(&a);
    tops__cuda_leave(prev);
    if (e == (int)cudaErrorNotSupported)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                          "the driver refused a TMA descriptor for these tensors (strides or alignment)");
    return e == cudaSuccess ? TOPS_OK : tops__cuda_error(fn, e, "the attention kernel launch");
}

tops_status tops__cuda_attention_path(const tops_exec *exec, const tops_attention_desc *desc, const tops_tensor *q,
                                      const tops_tensor *k, const tops_tensor *v, const tops_tensor *out, char *buf,
                                      size_t cap) {
    tops__cu_attn_args a;
    tops_status st = prepare(exec, desc, q, k, v, out, &a);
    if (st != TOPS_OK) return st;
    if (buf && cap) tops__cu_attention_name(&a, buf, cap);
    return TOPS_OK;
}
