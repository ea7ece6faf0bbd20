/* tops_attention: checks every argument, picks the block sizes, and hands
   the work to the fused driver (src/drive/attention.c), or with exec.device
   = cuda:N to the GPU kernel (src/cuda/attention.c). */
#include "ops/attention.h"
#include "cuda/attention.h"
#include "formats/traits.h"

#include <math.h>
#include <string.h>

static const char fn[] = "tops_attention";

tops_attention_desc tops_attention_desc_default(void) {
    tops_attention_desc d;
    memset(&d, 0, sizeof d);
    return d;
}

static int is_activation(tops_format_id id) {
    return tops__format_is_float(id);
}

static tops_status check_operand(const char *arg, const tops_tensor *t, int activation, int varlen, int on_gpu) {
    tops_status st = tops__check_tensor(fn, arg, t);
    if (st != TOPS_OK) return st;
    if (!on_gpu && t->memory.kind != TOPS_DEVICE_CPU)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "%s lives in device memory; this path runs on the host", arg);
    if (!varlen && t->rank != 4)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "%s has rank %d; attention tensors are [B, H, S, D] (rank 4)", arg,
                          t->rank);
    if (varlen && t->rank != 3)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn,
                          "%s has rank %d; with desc.cu_seqlens_q/k the tensors are packed [T, H, D] (rank 3)", arg,
                          t->rank);
    char name[48];
    if (activation && !is_activation(t->format.id))
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "%s has format %s; it must be f32, f16 or bf16", arg,
                          tops_format_name(t->format, name, sizeof name));
    if (tops__is_packed(t))
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

static int uses_lengths(const tops_attention_desc *d) {
    return d->kv_lens || d->cu_seqlens_q || d->cu_seqlens_k || d->batch;
}

/* batch + 1 offsets into a packed tensor of `total` rows: >= 0,
   non-decreasing, the last within the tensor; *longest gets the longest
   sequence. */
static tops_status check_offsets(const char *arg, const int32_t *cu, int32_t batch, int64_t total, const char *tensor,
                                 int64_t *longest) {
    *longest = 0;
    if (cu[0] < 0) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.%s[0] is %d; offsets must be >= 0", arg, cu[0]);
    for (int32_t b = 0; b < batch; b++) {
        if (cu[b + 1] < cu[b])
            return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                              "desc.%s[%d] is %d, below desc.%s[%d] = %d; offsets must not decrease", arg, b + 1,
                              cu[b + 1], arg, b, cu[b]);
        if (cu[b + 1] - cu[b] > *longest) *longest = cu[b + 1] - cu[b];
    }
    if (cu[batch] > total)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "desc.%s[%d] is %d, past the %lld tokens of %s", arg, batch,
                          cu[batch], (long long)total, tensor);
    return TOPS_OK;
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
    int varlen = d.cu_seqlens_q || d.cu_seqlens_k;
    if (varlen && !(d.cu_seqlens_q && d.cu_seqlens_k))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.cu_seqlens_%s is NULL; varlen takes both cu_seqlens_q and _k",
                          d.cu_seqlens_q ? "k" : "q");
    if (varlen && d.batch < 1)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                          "desc.batch is %d; with cu_seqlens_q/k it must be the number of sequences (>= 1)", d.batch);
    if (varlen && d.batch == INT32_MAX)
        return tops__fail(TOPS_OVERFLOW, fn, "desc.batch is %d; the offsets hold batch + 1 int32 entries", d.batch);
    if ((st = check_operand("q", q, 1, varlen, on_gpu)) != TOPS_OK) return st;
    if ((st = check_operand("k", k, 0, varlen, on_gpu)) != TOPS_OK) return st;
    if ((st = check_operand("v", v, 0, varlen, on_gpu)) != TOPS_OK) return st;
    if ((st = check_operand("out", out, 1, varlen, on_gpu)) != TOPS_OK) return st;

    /* Dimensions: [B, H, S, D], or packed [T, H, D] (varlen). */
    const int hd = 1, sd = varlen ? 0 : 2, dd = varlen ? 2 : 3;
    int64_t B = varlen ? d.batch : q->extent[0], H = q->extent[hd], Sq = q->extent[sd], D = q->extent[dd];
    int64_t Hkv = k->extent[hd], Sk = k->extent[sd], Dv = v->extent[dd];
    if (!varlen && (k->extent[0] != B || v->extent[0] != B || out->extent[0] != B))
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "batch sizes differ: q %lld, k %lld, v %lld, out %lld", (long long)B,
                          (long long)k->extent[0], (long long)v->extent[0], (long long)out->extent[0]);
    if (!varlen && d.batch != 0 && d.batch != B)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "desc.batch is %d but q holds %lld sequences; it must be 0 or %lld",
                          d.batch, (long long)B, (long long)B);
    if (v->extent[hd] != Hkv)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "k has %lld heads but v has %lld", (long long)Hkv,
                          (long long)v->extent[hd]);
    if (H % Hkv != 0)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "q has %lld heads, which is not a multiple of the %lld kv heads",
                          (long long)H, (long long)Hkv);
    if (v->extent[sd] != Sk)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "k has %lld keys but v has %lld", (long long)Sk,
                          (long long)v->extent[sd]);
    if (k->extent[dd] != D)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "q has head dim %lld but k has %lld", (long long)D,
                          (long long)k->extent[dd]);
    if (D < 16 || D > 256 || Dv < 16 || Dv > 256)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "head dims are %lld (q, k) and %lld (v); each must be 16..256",
                          (long long)D, (long long)Dv);
    if (varlen && (out->extent[0] != Sq || out->extent[1] != H || out->extent[2] != Dv))
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "out is [%lld, %lld, %lld] but must be [%lld, %lld, %lld]",
                          (long long)out->extent[0], (long long)out->extent[1], (long long)out->extent[2],
                          (long long)Sq, (long long)H, (long long)Dv);
    if (!varlen && (out->extent[1] != H || out->extent[2] != Sq || out->extent[3] != Dv))
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

    /* Sequence lengths: offsets inside the packed tensors, key counts
       inside each sequence's keys.  Sq and Sk become the longest. */
    int64_t longest_q = Sq, longest_k = Sk;
    if (varlen) {
        if ((st = check_offsets("cu_seqlens_q", d.cu_seqlens_q, d.batch, Sq, "q and out", &longest_q)) != TOPS_OK)
            return st;
        if ((st = check_offsets("cu_seqlens_k", d.cu_seqlens_k, d.batch, Sk, "k and v", &longest_k)) != TOPS_OK)
            return st;
    }
    if (d.kv_lens) {
        int64_t most = 0;
        for (int64_t b = 0; b < B; b++) {
            int64_t have = varlen ? (int64_t)d.cu_seqlens_k[b + 1] - d.cu_seqlens_k[b] : Sk;
            if (d.kv_lens[b] < 0 || d.kv_lens[b] > have)
                return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.kv_lens[%lld] is %d; it must be 0..%lld (the keys %s)",
                                  (long long)b, d.kv_lens[b], (long long)have,
                                  varlen ? "of its sequence in k" : "k holds");
            if (d.kv_lens[b] > most) most = d.kv_lens[b];
        }
        longest_k = most;
    }

    if (on_gpu) {
        d.scale = d.scale > 0.0f ? d.scale : 1.0f / sqrtf((float)D);
        (void)uses_lengths;
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
    p.sq = longest_q;
    p.sk = longest_k;
    p.varlen = varlen;
    p.kv_lens = d.kv_lens;
    p.cu_q = d.cu_seqlens_q;
    p.cu_k = d.cu_seqlens_k;
    p.d = D;
    p.dv = Dv;
    p.causal = d.causal;
    p.window = d.window;
    p.scale = d.scale > 0.0f ? d.scale : 1.0f / sqrtf((float)D);
    p.softcap = d.softcap;
    /* 96 query rows = 16 steps of the 6-row microkernel; 64 keys keep the
       score tile and a key panel in L1/L2 for head dims up to 256. */
    p.q_block = d.q_block ? d.q_block : (int32_t)(p.sq < 1 ? 1 : p.sq < 96 ? p.sq : 96);
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
