/* tops_attention: checks every argument, picks the block sizes, and hands
   the work to the fused driver (src/drive/attention.c), or with exec.device
   = cuda:N to the GPU kernel (src/cuda/attention.c). */
#include "cuda/attention.h"
#include "drive/attention.h"

#include <math.h>
#include <string.h>

static const char fn[] = "tops_attention";

tops_attention_desc tops_attention_desc_default(void) {
    tops_attention_desc d;
    memset(&d, 0, sizeof d);
    return d;
}

static int is_activation(tops_format_id id) {
    return id == TOPS_FMT_F32 || id == TOPS_FMT_F16 || id == TOPS_FMT_BF16;
}

static tops_status check_operand(const char *arg, const tops_tensor *t, int activation, int on_gpu) {
    tops_status st = tops__check_tensor(fn, arg, t);
    if (st != TOPS_OK) return st;
    if (!on_gpu && t->memory.kind != TOPS_DEVICE_CPU)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "%s lives in device memory; this path runs on the host", arg);
    if (t->rank != 4)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "%s has rank %d; attention tensors are [B, H, S, D] (rank 4)", arg,
                          t->rank);
    char name[48];
    if (activation && !is_activation(t->format.id))
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "%s has format %s; it must be f32, f16 or bf16", arg,
                          tops_format_name(t->format, name, sizeof name));
    if (t->format.id == TOPS_FMT_PACKED)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "%s is a packed matmul weight; a KV cache is plain or block-scaled",
                          arg);
    return TOPS_OK;
}

static int overlaps(const tops_tensor *a, const tops_tensor *b) {
    size_t na, nb;
    if (tops_tensor_data_span(a, &na) != TOPS_OK || tops_tensor_data_span(b, &nb) != TOPS_OK) return 1;
    uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;
    return a0 < b0 + nb && b0 < a0 + na;
}

tops_status tops__attention_with(const tops__kernels *forced, const tops_exec *exec, const tops_attention_desc *desc,
                                 const tops_tensor *q, const tops_tensor *k, const tops_tensor *v, tops_tensor *out) {
    tops_exec ex = exec ? *exec : tops_exec_default();
    tops_status st = tops_exec_validate(&ex);
    if (st != TOPS_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", tops_last_error());
        return tops__fail(st, fn, "exec is invalid (%s)", why);
    }
    const int on_gpu = ex.device.kind == TOPS_DEVICE_CUDA;
    if (forced && on_gpu)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "a forced CPU kernel level with exec.device cuda:%d", ex.device.index);
    tops_attention_desc d = desc ? *desc : tops_attention_desc_default();
    if (d.causal != 0 && d.causal != 1)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.causal is %d; it must be 0 or 1", d.causal);
    if (d.window < 0) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.window is %lld; it must be >= 0", (long long)d.window);
    if (!isfinite(d.scale) || d.scale < 0.0f)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.scale is %g; it must be finite and >= 0 (0 = 1/sqrt(D))",
                          (double)d.scale);
    if (!isfinite(d.softcap) || d.softcap < 0.0f)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.softcap is %g; it must be finite and >= 0 (0 = off)",
                          (double)d.softcap);
    if (d.q_block < 0 || d.q_block > TOPS_TILE_MAX_ROWS)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.q_block is %d; it must be 0..%d", d.q_block, TOPS_TILE_MAX_ROWS);
    if (d.kv_block < 0 || d.kv_block > TOPS_TILE_MAX_COLS)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.kv_block is %d; it must be 0..%d", d.kv_block,
                          TOPS_TILE_MAX_COLS);
    if ((st = check_operand("q", q, 1, on_gpu)) != TOPS_OK) return st;
    if ((st = check_operand("k", k, 0, on_gpu)) != TOPS_OK) return st;
    if ((st = check_operand("v", v, 0, on_gpu)) != TOPS_OK) return st;
    if ((st = check_operand("out", out, 1, on_gpu)) != TOPS_OK) return st;

    int64_t B = q->extent[0], H = q->extent[1], Sq = q->extent[2], D = q->extent[3];
    int64_t Hkv = k->extent[1], Sk = k->extent[2], Dv = v->extent[3];
    if (k->extent[0] != B || v->extent[0] != B || out->extent[0] != B)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "batch sizes differ: q %lld, k %lld, v %lld, out %lld", (long long)B,
                          (long long)k->extent[0], (long long)v->extent[0], (long long)out->extent[0]);
    if (v->extent[1] != Hkv)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "k has %lld heads but v has %lld", (long long)Hkv,
                          (long long)v->extent[1]);
    if (H % Hkv != 0)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "q has %lld heads, which is not a multiple of the %lld kv heads",
                          (long long)H, (long long)Hkv);
    if (v->extent[2] != Sk)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "k has %lld keys but v has %lld", (long long)Sk,
                          (long long)v->extent[2]);
    if (k->extent[3] != D)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "q has head dim %lld but k has %lld", (long long)D,
                          (long long)k->extent[3]);
    if (D < 16 || D > 256 || Dv < 16 || Dv > 256)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "head dims are %lld (q, k) and %lld (v); each must be 16..256",
                          (long long)D, (long long)Dv);
    if (out->extent[1] != H || out->extent[2] != Sq || out->extent[3] != Dv)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "out is [%lld, %lld, %lld, %lld] but must be [%lld, %lld, %lld, %lld]",
                          (long long)out->extent[0], (long long)out->extent[1], (long long)out->extent[2],
                          (long long)out->extent[3], (long long)B, (long long)H, (long long)Sq, (long long)Dv);
    if (out->tensor_scale != 1.0f)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out has tensor_scale %g; outputs are written plain (1)",
                          (double)out->tensor_scale);
    if (overlaps(out, q) || overlaps(out, k) || overlaps(out, v))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out overlaps q, k or v in memory; it must not");
    if (Sk > ((int64_t)1 << 60) || Sq > ((int64_t)1 << 60) || d.window > ((int64_t)1 << 60))
        return tops__fail(TOPS_OVERFLOW, fn, "sequence lengths and window must stay below 2^60");

    if (on_gpu) {
        d.scale = d.scale > 0.0f ? d.scale : 1.0f / sqrtf((float)D);
        return tops__cuda_attention(&ex, &d, q, k, v, out); /* q_block / kv_block: the kernel's own tiles */
    }

    const tops__kernels *kern;
    if (forced)
        kern = forced;
    else if ((st = tops__kernels_checked(fn, &kern)) != TOPS_OK)
        return st;

    tops__attention_plan p;
    memset(&p, 0, sizeof p);
    p.batch = B;
    p.heads = H;
    p.kv_heads = Hkv;
    p.sq = Sq;
    p.sk = Sk;
    p.d = D;
    p.dv = Dv;
    p.causal = d.causal;
    p.window = d.window;
    p.scale = d.scale > 0.0f ? d.scale : 1.0f / sqrtf((float)D);
    p.softcap = d.softcap;
    /* 96 query rows = 16 steps of the 6-row microkernel; 64 keys keep the
       score tile and a key panel in L1/L2 for head dims up to 256. */
    p.q_block = d.q_block ? d.q_block : (int32_t)(Sq < 96 ? Sq : 96);
    p.kv_block = d.kv_block ? d.kv_block : 64;
    p.threads = ex.threads;
    p.scratch = ex.scratch;
    p.scratch_bytes = ex.scratch_bytes;
    return tops__attention_drive(kern, &p, q, k, v, out);
}

tops_status tops_attention(const tops_exec *exec, const tops_attention_desc *desc, const tops_tensor *q,
                           const tops_tensor *k, const tops_tensor *v, tops_tensor *out) {
    return tops__attention_with(NULL, exec, desc, q, k, v, out);
}
