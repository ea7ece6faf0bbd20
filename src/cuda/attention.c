/* tops_attention on a GPU (exec.device = cuda:N): what the device runs, and
   the launch.  src/ops/attention.c has checked the descriptor, the shapes and
   the overlaps; device_support() refuses, with a sentence, every case the
   device kernel does not handle yet (one place to extend). */
#include "cuda/attention.h"
#include "cuda/attention_decode.h"
#include "cuda/runtime.h"
#include "formats/traits.h"

#include <string.h>

static const char fn[] = "tops_attention";

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

/* KV formats the decode kernel reads: its element codes and scale plane,
   by the pack rule of the format's traits row (core/gpuform.h): 16-bit
   values of q's type, e4m3 codes (plain, per row or with a scale plane),
   8- and 4-bit integer codes with a scale plane.  Returns 0 (with *why
   set) for a format it does not read. */
static int kv_kind(const tops_tensor *t, tops_format_id qty, int *kind, const char **why) {
    const tops__gpu_rule *r = tops__format_gpu_rule(t->format.id);
    const int plane = r && r->source == TOPS__GS_PLANE, scaled = plane && r->scale == TOPS__GSC_PLANE;
    if (plane && (r->family == TOPS__GF_F16 || r->family == TOPS__GF_BF16)) {
        *kind = TOPS__DEC_KV16;
        if (t->format.id != qty) {
            *why = "a 16-bit KV cache must have q's type";
            return 0;
        }
        return 1;
    }
    if (plane && r->family == TOPS__GF_E4M3) return *kind = TOPS__DEC_E4M3, 1;
    if (scaled && !r->per_row && r->family == TOPS__GF_I8) return *kind = TOPS__DEC_I8, 1;
    if (scaled && !r->per_row && r->family == TOPS__GF_U4) return *kind = TOPS__DEC_I4, 1;
    *why = "the GPU reads KV caches in f16, bf16, e4m3, e4m3-ch, mxfp8, int8-gG and int4-gG";
    return 0;
}

/* The scale plane of a quantized KV tensor as the decode kernel reads it. */
static tops_status kv_plane(const char *what, const tops_tensor *t, tops__cu_kv *kv) {
    memset(kv, 0, sizeof *kv);
    kv->data = t->data;
    kv->tensor_scale = t->tensor_scale;
    int bits = tops_format_get_info(t->format.id)->element_bits;
    for (int i = 0; i < 3; i++) kv->stride[i] = t->extent[i] > 1 ? t->stride[i] * bits / 8 : 0;
    if (t->stride[3] != 1)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "%s has head-dim stride %lld; on the GPU it must be 1", what,
                          (long long)t->stride[3]);
    if (((uintptr_t)t->data & 15) != 0)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "%s is not 16-byte aligned; the GPU reads it in 16-byte pieces",
                          what);
    for (int i = 0; i < 3; i++)
        if (kv->stride[i] % 16 != 0 || kv->stride[i] < 0)
            return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                              "%s has stride %lld bytes in dimension %d; on the GPU key rows start 16-byte aligned", what,
                              (long long)kv->stride[i], i);
    if (!t->scales.data) return TOPS_OK; /* f16, bf16, plain e4m3: tensor_scale only */
    const tops_plane *pl = &t->scales;
    switch (pl->dtype) {
    case TOPS_DT_F16: kv->scale_type = TOPS__DEC_SF16; break;
    case TOPS_DT_BF16: kv->scale_type = TOPS__DEC_SBF16; break;
    case TOPS_DT_F32: kv->scale_type = TOPS__DEC_SF32; break;
    case TOPS_DT_E8M0: kv->scale_type = TOPS__DEC_SE8M0; break;
    default:
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "%s has %s scales; the GPU reads f16, bf16, f32 and e8m0", what,
                          tops_dtype_name(pl->dtype));
    }
    kv->scales = pl->data;
    for (int i = 0; i < 4; i++) kv->sstride[i] = pl->extent[i] > 1 ? pl->stride[i] : 0;
    if (pl->block[0] == 1 && pl->block[1] == 1 && pl->block[2] == 1 && pl->block[3] >= 16) {
        kv->mode = TOPS__DEC_SC_GROUP; /* groups along D (one group: a scale a key) */
        int64_t g = pl->block[3];
        if (g > 256 || (g & (g - 1)) != 0)
            return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                              "%s has scale groups of %lld along D; the GPU reads powers of two from 16 to 256", what,
                              (long long)g);
        kv->group = (int)g;
        return TOPS_OK;
    }
    if (pl->block[0] == 1 && pl->block[1] == 1 && pl->block[3] == 1 && pl->block[2] == t->extent[2]) {
        kv->mode = TOPS__DEC_SC_CHANNEL; /* one scale a channel d, for every key */
        return TOPS_OK;
    }
    return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                      "%s's scale blocks are {%lld, %lld, %lld, %lld}; the GPU reads groups of 16 or more along D, or "
                      "one scale a channel (blocked along the whole sequence)",
                      what, (long long)pl->block[0], (long long)pl->block[1], (long long)pl->block[2],
                      (long long)pl->block[3]);
}

/* Every case the GPU kernels do not run yet, refused here and only here.
   *decode: the call runs the decode kernel (attention_decode.cu). */
static tops_status device_support(int device, const tops_attention_desc *d, const tops_tensor *q, const tops_tensor *k,
                                  const tops_tensor *v, const tops_tensor *out, int64_t sq_long, int *decode) {
    const int lengths = d->kv_lens || d->cu_seqlens_q;
    char name[48];
    if (!tops__cuda_is_sm90a(device))
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                          "cuda:%d is not compute capability 9.0; the fused attention kernel needs Hopper (sm_90a)",
                          device);
    tops_format_id ty = q->format.id;
    if (!tops__is_half(q))
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "q has format %s; on the GPU q, k, v and out are f16 or bf16",
                          tops_format_name(q->format, name, sizeof name));
    if (out->format.id != ty)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "out has format %s but q is %s; on the GPU they share one type",
                          tops_format_name(out->format, name, sizeof name), tops_dtype_name(tops__float_of(q)));
    if (q->tensor_scale != 1.0f)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "q must have tensor_scale 1 on the GPU");
    int64_t D = q->extent[3], Dv = v->extent[3];
    const int quant = k->format.id != ty || v->format.id != ty;
    /* debug key attn_decode=0: the prefill kernel for every 16-bit call */
    *decode = tops__cu_decode_takes(sq_long, (int)D) && Dv == D && tops__cu_tune(TOPS__CU_T_ATTN_DECODE) != 0;
    if (lengths && !*decode)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                          "sequences of different lengths (kv_lens, cu_seqlens) run on the GPU in the decode kernel only: "
                          "the longest query sequence 1..16 (here %lld) and head dims 64, 128 or 256 (here %lld and %lld)",
                          (long long)sq_long, (long long)D, (long long)Dv);
    if (quant) {
        int kk = 0, vk = 0;
        const char *why = "";
        if (!kv_kind(k, ty, &kk, &why) || !kv_kind(v, ty, &vk, &why))
            return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "k is %s and v %s: %s",
                              tops_format_name(k->format, name, sizeof name),
                              tops_format_name(v->format, name + 24, sizeof name - 24), why);
        if (k->format.id != v->format.id)
            return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "k and v have different formats; on the GPU they share one");
        if (!*decode)
            return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                              "a quantized KV cache runs on the GPU in the decode kernel only: Sq 1..16 (here %lld) and "
                              "head dims 64, 128 or 256 (here %lld and %lld)",
                              (long long)sq_long, (long long)D, (long long)Dv);
    }
    if (q->extent[2] > ((int64_t)1 << 29) || k->extent[2] > ((int64_t)1 << 29))
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "sequence lengths must be at most 2^29 on the GPU");
    if (q->extent[0] > 65535 || q->extent[1] > 65535)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "batch and heads must be at most 65535 each on the GPU");
    if (*decode) {
        if (q->stride[3] != 1 || out->stride[3] != 1)
            return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "q and out must have a contiguous head dimension on the GPU");
        if (((uintptr_t)q->data & 3) != 0 || ((uintptr_t)out->data & 1) != 0)
            return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "q must be 4-byte aligned on the GPU");
        for (int i = 0; i < 3; i++)
            if (q->extent[i] > 1 && q->stride[i] % 2 != 0)
                return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                                  "q has odd stride %lld in dimension %d; on the GPU it must be even",
                                  (long long)q->stride[i], i);
        if (k->extent[0] * k->extent[1] > INT32_MAX)
            return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "batch x kv heads must stay below 2^31 on the GPU");
        return TOPS_OK; /* the KV layout is checked by kv_plane */
    }
    if (k->format.id != ty || v->format.id != ty)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "k and v must have q's type on the GPU");
    if (k->tensor_scale != 1.0f || v->tensor_scale != 1.0f)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "q, k and v must have tensor_scale 1 on the GPU");
    if (Dv != D)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "head dims %lld (q, k) and %lld (v) differ; on the GPU they are equal",
                          (long long)D, (long long)Dv);
    if (D % 8 != 0)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "head dim %lld; on the GPU it is a multiple of 8 (16..256)",
                          (long long)D);
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
                           const tops_tensor *k, const tops_tensor *v, const tops_tensor *out, tops__cu_attn_args *a,
                           tops__cu_decode_args *da, int *decode) {
    int device = exec->device.index;
    tops_status st = tops__cu_debug_check(fn);
    if (st != TOPS_OK) return st;
    if ((st = tops__cuda_check_device(fn, "exec.device", device)) != TOPS_OK) return st;
    if ((st = tops__cuda_check_memory(fn, "q", q, device)) != TOPS_OK ||
        (st = tops__cuda_check_memory(fn, "k", k, device)) != TOPS_OK ||
        (st = tops__cuda_check_memory(fn, "v", v, device)) != TOPS_OK ||
        (st = tops__cuda_check_memory(fn, "out", out, device)) != TOPS_OK)
        return st;
    /* Sequences of different lengths: packed tensors as [1, H, T, D] views;
       the longest query and key sequences (ops/attention.c checked them). */
    tops_tensor views[4];
    const int varlen = desc->cu_seqlens_q != NULL;
    int64_t batch = q->rank == 4 ? q->extent[0] : desc->batch, sq_long = 0, sk_long = 0;
    if (varlen) {
        tops__tensor_packed_view(q, &views[0]), tops__tensor_packed_view(k, &views[1]);
        tops__tensor_packed_view(v, &views[2]), tops__tensor_packed_view(out, &views[3]);
        q = &views[0], k = &views[1], v = &views[2], out = &views[3];
        for (int64_t b = 0; b < batch; b++) {
            int64_t nq = desc->cu_seqlens_q[b + 1] - desc->cu_seqlens_q[b], nk = desc->cu_seqlens_k[b + 1] - desc->cu_seqlens_k[b];
            if (nq > sq_long) sq_long = nq;
            if (desc->kv_lens) nk = desc->kv_lens[b];
            if (nk > sk_long) sk_long = nk;
        }
    } else {
        sq_long = q->extent[2];
        sk_long = k->extent[2];
        if (desc->kv_lens) {
            sk_long = 0;
            for (int64_t b = 0; b < batch; b++)
                if (desc->kv_lens[b] > sk_long) sk_long = desc->kv_lens[b];
        }
    }
    if ((st = device_support(device, desc, q, k, v, out, sq_long, decode)) != TOPS_OK) return st;
    if (*decode) {
        memset(da, 0, sizeof *da);
        da->bf16 = tops__float_of(q) == TOPS_DT_BF16;
        const char *why = "";
        if (!kv_kind(k, q->format.id, &da->kind, &why)) return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "k: %s", why);
        if ((st = kv_plane("k", k, &da->k)) != TOPS_OK || (st = kv_plane("v", v, &da->v)) != TOPS_OK) return st;
        if (k->scales.data && (st = tops__cuda_check_pointer(fn, "k's scale plane", k->scales.data, k->memory)) != TOPS_OK)
            return st;
        if (v->scales.data && (st = tops__cuda_check_pointer(fn, "v's scale plane", v->scales.data, v->memory)) != TOPS_OK)
            return st;
        da->d = (int)q->extent[3];
        da->batch = batch;
        da->heads = q->extent[1];
        da->kv_heads = k->extent[1];
        da->sq = sq_long;
        da->sk = sk_long;
        da->kv_lens = desc->kv_lens;
        da->cu_q = varlen ? desc->cu_seqlens_q : NULL;
        da->cu_k = varlen ? desc->cu_seqlens_k : NULL;
        if (batch * da->kv_heads > INT32_MAX)
            return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "sequences x kv heads must stay below 2^31 on the GPU");
        da->q = q->data;
        da->out = out->data;
        for (int i = 0; i < 3; i++) {
            da->q_stride[i] = q->extent[i] > 1 ? q->stride[i] : 0;
            da->o_stride[i] = out->extent[i] > 1 ? out->stride[i] : 0;
        }
        da->causal = desc->causal;
        da->window = desc->window;
        da->scale = desc->scale;
        da->softcap = desc->softcap;
        da->stream = exec->stream;
        return TOPS_OK;
    }
    memset(a, 0, sizeof *a);
    a->bf16 = tops__float_of(q) == TOPS_DT_BF16;
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
    a->sm_count = tops__cuda_sm_count(device);
    a->stream = exec->stream;
    return TOPS_OK;
}

tops_status tops__cuda_attention(const tops_exec *exec, const tops_attention_desc *desc, const tops_tensor *q,
                                 const tops_tensor *k, const tops_tensor *v, tops_tensor *out) {
    tops__cu_attn_args a;
    tops__cu_decode_args da;
    int decode = 0;
    tops_status st = prepare(exec, desc, q, k, v, out, &a, &da, &decode);
    if (st != TOPS_OK) return st;
    int prev;
    if ((st = tops__cuda_enter(fn, exec->device.index, &prev)) != TOPS_OK) return st;
    int e = decode ? tops__cu_decode_launch(&da) : tops__cu_attention_launch(&a);
    tops__cuda_leave(prev);
    if (e == (int)cudaErrorNotSupported)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                          "the driver refused a TMA descriptor for these tensors (strides or alignment)");
    return e == cudaSuccess ? TOPS_OK : tops__cuda_error(fn, e, decode ? "the decode attention launch" : "the attention kernel launch");
}

tops_status tops__cuda_attention_path(const tops_exec *exec, const tops_attention_desc *desc, const tops_tensor *q,
                                      const tops_tensor *k, const tops_tensor *v, const tops_tensor *out, char *buf,
                                      size_t cap) {
    tops__cu_attn_args a;
    tops__cu_decode_args da;
    int decode = 0;
    tops_status st = prepare(exec, desc, q, k, v, out, &a, &da, &decode);
    if (st != TOPS_OK) return st;
    if (buf && cap) {
        if (decode)
            tops__cu_decode_name(&da, buf, cap);
        else
            tops__cu_attention_name(&a, buf, cap);
    }
    return TOPS_OK;
}
