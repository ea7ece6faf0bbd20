/* tops_matmul2d and tops_pack_right on a GPU: argument checks, packing, and
   the plan: the weight-streaming kernels (wbulk.cu, wstream.cu) at small M;
   on sm_90 the TMA GEMM (fp8_gemm.cu: relaxed FP8, strict 16-bit and
   converted e4m3 weights), the q8 kernel (wgmma_q8.cu) and the wgmma
   kernels (wgmma_w.cu) above their thresholds (tune.c's table), by the
   use_* functions below. */
#include "cuda/runtime.h"

#include "formats/traits.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

int tops__cuda_is_packed(const tops_tensor *t) {
    const tops__cuda_packed *pk = (const tops__cuda_packed *)t->packed_;
    return tops__is_packed(t) && t->memory.kind == TOPS_DEVICE_CUDA && pk &&
           pk->magic == TOPS__CUDA_PACKED_MAGIC;
}

/* Where a pack's parts sit in its one allocation: the weights at 0, then
   the scales, the FP8 layout, the q8 layout, the biases and the channel
   units, each 256-byte aligned; returns the allocation's size. */
static size_t pack_offsets(const tops__cuda_packed *pk, size_t fp8_bytes, size_t q8_bytes, size_t *soff, size_t *foff,
                           size_t *qoff, size_t *boff, size_t *uoff) {
    *soff = (pk->weight_bytes + 255) & ~(size_t)255;
    *foff = (*soff + pk->scale_bytes + 255) & ~(size_t)255;
    *qoff = (*foff + fp8_bytes + 255) & ~(size_t)255;
    *boff = (*qoff + q8_bytes + 255) & ~(size_t)255;
    *uoff = (*boff + pk->bias_bytes + 255) & ~(size_t)255;
    return *uoff + pk->unit_bytes;
}

/* Packs right (host or device memory) into device buffers on `device`; with
   `relaxed` on an sm_90 device, e4m3-ch/e4m3 weights also get the FP8 GEMM's
   layout.  On success *pk holds device pointers into *base (one cudaMalloc). */
static tops_status pack_to_device(const char *fn, const tops_tensor *right, int transpose_right, int relaxed,
                                  int device, tops__cuda_packed *pk, void **base) {
    tops_tensor host_copy;
    const tops_tensor *src = right;
    tops_status st;
    memset(&host_copy, 0, sizeof host_copy);
    if (right->memory.kind == TOPS_DEVICE_CUDA) {
        tops_memory host = {TOPS_DEVICE_CPU, 0};
        if ((st = tops_tensor_to(right, host, &host_copy)) != TOPS_OK) return st;
        src = &host_copy;
    } else if ((st = tops__cuda_check_pointer(fn, "right", right->data, right->memory)) != TOPS_OK) {
        return st;
    }
    void *wb = NULL, *sb = NULL, *bb = NULL, *fb = NULL, *qb = NULL, *ub = NULL;
    size_t fbytes = 0, fscale = 0, qbytes = 0;
    int oom = 0;
    st = tops__cuda_pack_host(fn, src, transpose_right, pk, &wb, &sb, &bb);
    if (st == TOPS_OK && !(ub = tops__cuda_pack_units(pk, sb, bb, &pk->unit_bytes)) && pk->unit_bytes)
        st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate the channel units of right");
    /* The TMA GEMM's row-major layout (e4m3-ch / e4m3 codes, f16 / bf16 values), in either mode */
    if (st == TOPS_OK && tops__cu_rowmajor_layout(pk) && tops__cuda_is_sm90a(device) &&
        !(fb = tops__cuda_pack_fp8_host(src, transpose_right, pk, &fbytes, &fscale)))
        st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate the row-major layout of right");
    /* 4-bit weights for the FP8 tensor cores, where the format allows it */
    if (st == TOPS_OK && relaxed && transpose_right && tops__cuda_is_sm90a(device) &&
        !(qb = tops__cuda_pack_q8_host(src, pk, &qbytes, &oom)) && oom)
        st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate the FP8 4-bit layout of right");
    tops_tensor_destroy(&host_copy);
    if (st != TOPS_OK) {
        free(wb);
        free(sb);
        free(bb);
        free(fb);
        free(qb);
        free(ub);
        return st;
    }
    size_t woff = 0, soff, foff, qoff, boff, uoff;
    const size_t total = pack_offsets(pk, fbytes, qbytes, &soff, &foff, &qoff, &boff, &uoff);
    void *mem = NULL;
    st = tops_cuda_alloc(device, total, &mem);
    if (st == TOPS_OK) {
        tops_memory dev = {TOPS_DEVICE_CUDA, device}, host = {TOPS_DEVICE_CPU, 0};
        st = tops_cuda_copy((char *)mem + woff, dev, wb, host, pk->weight_bytes, NULL);
        if (st == TOPS_OK && sb) st = tops_cuda_copy((char *)mem + soff, dev, sb, host, pk->scale_bytes, NULL);
        if (st == TOPS_OK && fb) st = tops_cuda_copy((char *)mem + foff, dev, fb, host, fbytes, NULL);
        if (st == TOPS_OK && qb) st = tops_cuda_copy((char *)mem + qoff, dev, qb, host, qbytes, NULL);
        if (st == TOPS_OK && bb) st = tops_cuda_copy((char *)mem + boff, dev, bb, host, pk->bias_bytes, NULL);
        if (st == TOPS_OK && ub) st = tops_cuda_copy((char *)mem + uoff, dev, ub, host, pk->unit_bytes, NULL);
        /* pageable copies may return before their DMA ends; no stream may see a half-written pack */
        if (st == TOPS_OK) st = tops__cuda_device_sync(fn, device);
        if (st != TOPS_OK) (void)tops_cuda_free(device, mem);
    }
    free(wb);
    free(sb);
    free(bb);
    free(fb);
    free(qb);
    free(ub);
    if (st != TOPS_OK) return st;
    pk->device = device;
    pk->weights = (char *)mem + woff;
    pk->scales = sb ? (char *)mem + soff : NULL;
    pk->fp8_weights = fb ? (char *)mem + foff : NULL;
    pk->fp8_scales = fb && fscale ? (char *)mem + foff + fscale : NULL;
    pk->fp8_bytes = fbytes;
    pk->q8_weights = qb ? (char *)mem + qoff : NULL;
    pk->q8_bytes = qbytes;
    pk->biases = bb ? (char *)mem + boff : NULL;
    pk->units = ub ? (char *)mem + uoff : NULL;
    *base = mem;
    return TOPS_OK;
}

static int forced_kernel(void) { return (int)tops__cu_tune(TOPS__CU_T_KERNEL); }

/* Smallest M that takes the FP8 GEMM: below it the weight-streaming kernel
   wins (H200, e4m3-ch, K = 4096, N = 12288, one run at 15:07 UTC: FP8 GEMM
   30.4 / 30.9 / 31.5 / 33.4 us at M = 16 / 24 / 32 / 64, weight streaming
   28.4 / 45.2 / 46.3 / 77.9 us).  kernel=fp8 forces it at every M; no other
   kernel name moves relaxed e4m3 off it. */
static int use_fp8(const tops__cuda_packed *pk, int64_t m, int relaxed) {
    return relaxed && pk->fp8_weights && pk->code == TOPS__CU_CODE_E4M3 &&
           (m >= tops__cu_tune(TOPS__CU_T_FP8_MIN_M) || forced_kernel() == TOPS__CU_KERNEL_FP8);
}

/* Strict e4m3 codes converted once into a workspace before the 16-bit GEMM
   (fp8_gemm.cu, h16_convert_once) from E4M3_ONCE_MIN_M; debug key e4m3_once
   1 / 0 forces it on / off. */
static int e4m3_once(int64_t m) {
    return tops__cu_tune_or(TOPS__CU_T_E4M3_ONCE, m >= tops__cu_tune(TOPS__CU_T_E4M3_ONCE_MIN_M)) == 1;
}

/* The strict 16-bit TMA GEMM (fp8_gemm.cu; f16 / bf16 products, f32
   sums): f16 / bf16 weights as they are, e4m3-ch / e4m3 codes converted to
   the activations' type in shared memory, from M = H16_MIN_M.
   H200, 2026-12-02, same-window ratios against cuBLAS f16: f16 28.3 / 30.3 /
   39.4 / 639.3 us at M = 64 / 128 / 256 / 4096 (1.00x / 0.92x / 0.96x /
   0.98x; wbulk / the one-ring wgmma kernel took 115.4 / 71.6 / 141.9 /
   1794), e4m3-ch 34.1 / 46.6 / 57.1 / 1001.7 (before 64.5 / 80.2 / 162 /
   1942).  M = 16 keeps wbulk: f16 27.3, e4m3-ch 16.4 us (1.01x / 1.68x);
   this GEMM took 43.8 / 54.4 there before its activation box was cut to M
   (not measured since; its 128-token tiles are 8x oversized at M = 16).
   kernel=h16 forces it at every M; any other kernel name keeps it off. */
static int use_h16(const tops__cuda_packed *pk, int64_t m) {
    const int force = forced_kernel();
    if (force != TOPS__CU_KERNEL_AUTO && force != TOPS__CU_KERNEL_H16) return 0;
    return pk->fp8_weights &&
           (pk->code == TOPS__CU_CODE_F16 || pk->code == TOPS__CU_CODE_BF16 || pk->code == TOPS__CU_CODE_E4M3) &&
           (m >= tops__cu_tune(TOPS__CU_T_H16_MIN_M) || force == TOPS__CU_KERNEL_H16);
}

/* Folded scales (wgmma_w.cu, pack.c's tops__cu_fold_shift): e2m1 weights
   in either mode when code x scale is exact in the activations' type,
   4-bit integers with f16 scales and f16 activations (relaxed: one rounded
   term; strict: two exact terms, 2 returned, for groups below 64 only).
   The two terms double the tensor work but drop the strict pipeline's
   drain every two k16 steps: H200, 2026-12-02 22:20 UTC, one call, strict
   f16, us at M = 48 / 64 / 128 / 256 / 4096: q4_0 39.9 / 40.0 / 49.7 /
   100.1 / 1394 against 47.4 / 48.7 (wbulk) / 62.6 / 123.1 / 1478, int4-g32
   the same; int4-g128, drained once a chunk pair, 37.4 / 37.5 / 48.0 / 96.9
   / 1334 against 31.8 / 31.8 / 39.4 / 76.7 / 996, so G >= 64 keeps the
   pipeline.  fold=0 turns folding off (A/B runs, tests). */
static int use_fold(const tops__cuda_packed *pk, int bf16, int relaxed, int *shift) {
    *shift = 0;
    if (tops__cu_tune(TOPS__CU_T_FOLD) == 0 || !tops__cuda_is_sm90a(pk->device)) return 0;
    const int terms = tops__cu_fold_shift(pk, bf16, relaxed, shift); /* 0, 1 or 2 */
    return terms == 2 && pk->group >= 64 ? 0 : terms;
}

/* The wgmma kernel (wgmma_w.cu) where it measured faster than wbulk on the
   H200.  Folded: M >= FOLD_MIN_M (2026-11-29 20:51 UTC, same call, relaxed,
   us at M = 48: folded 32.6 / 33.1 / 34.9 against wbulk 42.0 / 46.9 / 53.9
   for int4-g128 / mxfp4 / nvfp4; at M = 32 wbulk is faster: 25.0 / 28.0 /
   33.7 against 32.4 / 33.0 / 34.7; the folded kernel's time barely moves
   with M below its 64-token tile while wbulk's grows).
   Unfolded: 8- and 16-bit weights (int8, e4m3, f16, bf16) from WIDE_MIN_M
   (2026-11-30 02:30 UTC, same call, strict, us at M = 128 / 256: f16 72.0 /
   142.3 against wbulk 149.5 / 274.5, e4m3-ch 80.0 / 161.1 against 109.1 /
   166.1, int8-g32 101.6 / 205.1 against 127.6 / 212.1); not 4-bit
   integers (int4-g128 75.2 / 148.6 against 76.6 / 150.7, int4-g32 and
   q4_0 93.4 / 187.9 against 83.5 / 159.8).
   Unfolded 4-bit codes (strict int4-gG, q4_0, e2m1 that does not fold):
   the strict two-ring pipeline (wgmma_s_kernel), by group size: S4_MIN_M
   and S4_SMALL_GROUP_MIN_M.  H200, 2026-12-01 22:47 UTC, one call, strict,
   us at M = 48 / 64 / 128: int4-g128 31.6 / 31.6 / 39.1 against wbulk 43.2 /
   44.1 (old wgmma 80.1 at 128); q4_0 and int4-g32 (a drain every 2 k16
   steps) 49.3 / 49.4 / 62.8 against wbulk 47.2 / 48.4; next call (22:58
   UTC) q4_0 wbulk 85.4 / 86.5 at M = 80 / 96 against 63.2 on the pipeline
   at 96.  8-bit integers in groups of 32 or more take the same pipeline
   (two part accumulators) from S8_MIN_M: H200, 2026-12-04 18:31 UTC, one
   call, strict int8-g32, us at M = 16 / 24 / 32 / 48: 41.4 / 41.4 / 41.4 /
   41.5 against wbulk 18.4 / 41.3 / 42.2 / 71.3 (M = 128: 49.2 against the
   one-ring kernel's 88.1).  kernel=wgmma forces it at every M, =wbulk or
   =wstream keeps it off. */
static int use_wgmma(int64_t m, int fold, int code, int64_t group) {
    const int force = forced_kernel();
    if (force == TOPS__CU_KERNEL_WGMMA) return 1;
    if (force == TOPS__CU_KERNEL_WBULK || force == TOPS__CU_KERNEL_WSTREAM) return 0;
    if (fold) return m >= tops__cu_tune(TOPS__CU_T_FOLD_MIN_M);
    if (code == TOPS__CU_CODE_U4 || code == TOPS__CU_CODE_E2M1)
        return m >= tops__cu_tune(group >= 64 ? TOPS__CU_T_S4_MIN_M : TOPS__CU_T_S4_SMALL_GROUP_MIN_M);
    if (code == TOPS__CU_CODE_I8 && group >= 32) return m >= tops__cu_tune(TOPS__CU_T_S8_MIN_M);
    return code >= TOPS__CU_CODE_I8 && m >= tops__cu_tune(TOPS__CU_T_WIDE_MIN_M);
}

/* Folded 4-bit weights (one term: strict e2m1, relaxed 4-bit integers with
   f16 scales) from DEQUANT_MIN_M: dequantized once to 16-bit, then the
   strict 16-bit TMA GEMM (dequant.cu), where the register-A kernels decode
   every weight once per 128-token tile.  H200, 2026-12-02 22:42 UTC, one
   call, us at M = 512 / 1024 / 4096, dequantized against folded: mxfp4
   155.6 / 225.9 / 694.0 against 114.8 / 234.2 / 1003.8, nvfp4 159.7 /
   232.7 / 717.7 against 120.2 / 244.5 / 1031.1, relaxed q4_0 164.8 /
   242.8 / 743.8 against 120.3 / 243.0 / 1026.8.  kernel=h16 forces it at
   every M, any other kernel name keeps it off. */
static int use_dequant(int64_t m, int fold) {
    if (fold != 1) return 0;
    const int force = forced_kernel();
    if (force != TOPS__CU_KERNEL_AUTO) return force == TOPS__CU_KERNEL_H16;
    return m >= tops__cu_tune(TOPS__CU_T_DEQUANT_MIN_M);
}

/* Codes the dequantization kernels decode (dequant.cu: integers, e2m1,
   e4m3; the packs that carry channel units), with finite scales and mins
   (the register-A kernels keep their NaN / inf semantics per group). */
static int dequantizable(const tops__cuda_packed *pk) {
    return (pk->code == TOPS__CU_CODE_U4 || pk->code == TOPS__CU_CODE_E2M1 || pk->code == TOPS__CU_CODE_I8 ||
            pk->code == TOPS__CU_CODE_E4M3) &&
           !pk->scale_nonfinite && !pk->bias_nonfinite;
}

/* Relaxed mode, codes no faster relaxed kernel takes (8-bit integers,
   K-quants and codebooks, 4-bit codes whose scales do not fold, mxfp8;
   fold != 1), from DEQUANT_RELAXED_MIN_M: the weights and the biases of
   formats with mins dequantized once, rounded once to 16 bits (dequant.cu,
   tops__cu_dequant_relaxed_gemm), then the 16-bit TMA GEMM.  H200,
   2026-12-03 19:28 UTC, one call, us at M = 128 / 256 / 1024 / 4096 against
   the kernels before it (register-A, or the rescaled groups from 1024):
   q8_0 80.5 (forced) / 88.6 / 212.8 / 703.2 against 89.4 / 179.4 / 373.4 /
   1319.5, q4_K 84.1 / 93.6 / 217.6 / 709.4 against 134.0 / 258.4 / 894.8 /
   3458.1 (q6_K, int8-g32 alike); at M = 64 q8_0 took 78.6 against wbulk's
   ~73.  kernel=h16 forces it at every M, any other kernel name keeps it
   off.  Not with
   scales or biases that are not finite (the register-A kernels keep their
   NaN / inf semantics). */
static int use_dequant_relaxed(const tops__cuda_packed *pk, int64_t m, int relaxed, int fold) {
    if (!relaxed || fold == 1 || !tops__cuda_is_sm90a(pk->device) || !dequantizable(pk)) return 0;
    const int force = forced_kernel();
    if (force != TOPS__CU_KERNEL_AUTO) return force == TOPS__CU_KERNEL_H16;
    return m >= tops__cu_tune(TOPS__CU_T_DEQUANT_RELAXED_MIN_M);
}

/* Integer codes (4- and 8-bit) with scales in K groups of 32 or a
   multiple of 64, f16 activations, no one-term fold: the codes converted
   once to f16, then the 16-bit TMA GEMM whose accumulators are rescaled
   between groups (dequant.cu, tops__cu_rescaled_gemm), from the M where it
   beat the register-A kernels by family: RESCALED8_MIN_M (8-bit codes),
   RESCALED4_MIN_M (4-bit, groups of 32), RESCALED4W_MIN_M (4-bit, larger
   groups).  H200, 2026-12-03 13:37 UTC, rescaled=1 against rescaled=0,
   us at M = 1024 / 2048 / 4096: int8-g32 345-353 / 624-662 / 1268-1309
   against 524-529 / 1050-1070 / 2109-2150; q4_0 342-348 / 617-633 /
   1169-1186 against 318-337 / 669-685 / 1385-1420; int4-g128 222-238 /
   412-428 / 807-855 against 227-243 / 468-489 / 997-1016.  Debug key rescaled=1 forces it at every M,
   rescaled=0 keeps it off; a kernel= name keeps it off. */
static int use_rescaled(const tops__cuda_packed *pk, int64_t m, int fold, int bf16) {
    if (fold == 1 || bf16 || !tops__cuda_is_sm90a(pk->device) ||
        (pk->code != TOPS__CU_CODE_U4 && pk->code != TOPS__CU_CODE_I8) || !pk->has_scales || pk->groups < 2 ||
        !tops__cu_rescaled_group_ok(pk->group))
        return 0;
    const long long f = tops__cu_tune(TOPS__CU_T_RESCALED);
    if (f != TOPS__CU_RULE) return f == 1;
    const int t = pk->code == TOPS__CU_CODE_I8 ? TOPS__CU_T_RESCALED8_MIN_M
                  : pk->group == 32           ? TOPS__CU_T_RESCALED4_MIN_M
                                              : TOPS__CU_T_RESCALED4W_MIN_M;
    return forced_kernel() == TOPS__CU_KERNEL_AUTO && m >= tops__cu_tune(t);
}

/* The 4-bit FP8 kernel (wgmma_q8.cu): relaxed, weights with the q8 layout,
   M >= Q8_MIN_M (H200, 2026-11-30 00:21 UTC, same call, us at M = 16 / 17 /
   31: q8 forced 19.9 / 20.0 / 20.1 int4-g128, 15.6 / 15.6 / 15.9 mxfp4; the
   weight-streaming plan 13.4 / 24.5 / 25.7 and 14.3 / 27.5 / 29.3: its
   second 16-token tile costs more than the whole q8 kernel).  kernel=q8
   forces it at every M, any other kernel name keeps it off. */
static int use_q8(const tops__cuda_packed *pk, int64_t m, int relaxed) {
    if (!relaxed || !pk->q8_weights) return 0;
    const int force = forced_kernel();
    if (force != TOPS__CU_KERNEL_AUTO) return force == TOPS__CU_KERNEL_Q8;
    return m >= tops__cu_tune(TOPS__CU_T_Q8_MIN_M);
}

/* Factored sub-block scales (pack.c, factor_scales: q4_K, q5_K): the
   pack seen with its super-block scales D as f32 scales in groups of
   fac_group, for the strict kernels that take the f16 multipliers too
   (wgmma_w.cu's 4-bit pipeline, dequant.cu's rescaled groups; `mults` in
   their arguments, factored_args): 8x fewer scale groups.  f16 activations
   only (code x m needs up to 11 bits); debug key factored=0 turns it off. */
static int factored_view(const tops__cuda_packed *pk, int bf16, tops__cuda_packed *fv) {
    if (!pk->fac_groups || bf16 || tops__cu_tune(TOPS__CU_T_FACTORED) == 0) return 0;
    *fv = *pk;
    fv->scales = (char *)pk->scales + pk->fac_d_off;
    fv->scale_kind = TOPS__CU_SCALE_F32;
    fv->group = pk->fac_group;
    fv->groups = pk->fac_groups;
    return 1;
}

/* The call's arguments on the factored view fv of pk. */
static tops__cu_matmul_args factored_args(const tops__cuda_packed *pk, const tops__cuda_packed *fv,
                                          const tops__cu_matmul_args *a) {
    tops__cu_matmul_args f = *a;
    f.scales = fv->scales;
    f.scale_kind = fv->scale_kind;
    f.group = fv->group;
    f.groups = fv->groups;
    f.mults = (const char *)pk->scales + pk->fac_m_off;
    f.mult_group = pk->group;
    return f;
}

/* The kernel the plan picks for m rows of 16-bit activations (bf16 or f16). */
static const char *path_for(const tops__cuda_packed *pk, int64_t m, int relaxed, int bf16) {
    if (use_fp8(pk, m, relaxed)) return "fp8 wgmma e4m3 + TMA";
    if (use_h16(pk, m))
        return pk->code != TOPS__CU_CODE_E4M3 ? "wgmma f16/bf16, both operands by TMA"
               : e4m3_once(m) ? "e4m3 weights converted once to 16-bit, then wgmma f16/bf16, both operands by TMA"
                   : "wgmma f16/bf16, e4m3 weights converted in shared memory + TMA";
    if (use_q8(pk, m, relaxed)) return "wgmma_q8 e4m3, 4-bit weights to e4m3 in registers + TMA";
    int shift, fold = use_fold(pk, bf16, relaxed, &shift);
    if (use_dequant(m, fold)) return "weights dequantized to 16-bit, then wgmma f16/bf16, both operands by TMA";
    if (use_dequant_relaxed(pk, m, relaxed, fold))
        return "weights dequantized to 16-bit (relaxed: rounded once), then wgmma f16/bf16, both operands by TMA";
    tops__cuda_packed fv;
    const int fac = factored_view(pk, bf16, &fv);
    const tops__cuda_packed *sp = fac ? &fv : pk;
    if (use_rescaled(sp, m, fold, bf16))
        return fac ? "integer codes times their sub-block multipliers converted once to f16, then wgmma f16 with "
                     "rescaled super-block groups, both operands by TMA"
                   : "integer codes converted once to f16, then wgmma f16 with rescaled groups, both operands by TMA";
    if (!use_wgmma(m, fold, pk->code, sp->group)) return "mma.sync m16n8k16 (wbulk or wstream)";
    return fold == 2 ? "wgmma m64nNk16, folded scales in two exact terms, weights from registers + TMA"
           : fold    ? "wgmma m64nNk16, folded scales, weights from registers + TMA"
           : fac && pk->code == TOPS__CU_CODE_U4
               ? "wgmma m64nNk16, codes times their sub-block multipliers, super-block scales, weights from registers + TMA"
               : "wgmma m64nNk16, weights from registers + TMA";
}

/* Launches the plan's kernel for a (a->m rows of 16-bit activations): each
   launcher that does not apply launches nothing and passes on. */
static int launch_plan(const tops__cuda_packed *pk, tops__cu_matmul_args *a, int relaxed, const char **what) {
    if (a->biases) { /* the biases go into the weights: only the relaxed dequantization (launch_call) */
        a->fold = use_fold(pk, a->x_bf16, relaxed, &a->fold_shift);
        return use_dequant_relaxed(pk, a->m, relaxed, a->fold)
                   ? tops__cu_dequant_relaxed_gemm(a, what)
                   : (int)cudaErrorNotSupported;
    }
    if (use_fp8(pk, a->m, relaxed)) {
        tops__cu_fp8_args f = {a, pk->fp8_weights, pk->fp8_scales, 0};
        return tops__cu_fp8_launch(&f, what);
    }
    tops__cu_fp8_args h = {a, pk->fp8_weights, pk->fp8_scales,
                           pk->code != TOPS__CU_CODE_E4M3 ? 0 : e4m3_once(a->m) ? 2 : 1};
    int err = use_h16(pk, a->m) ? tops__cu_h16_launch(&h, what) : (int)cudaErrorNotSupported;
    if (err == (int)cudaErrorNotSupported)
        err = use_q8(pk, a->m, relaxed) ? tops__cu_q8_launch(a, pk->q8_weights, what) : (int)cudaErrorNotSupported;
    if (err == (int)cudaErrorNotSupported) {
        a->fold = use_fold(pk, a->x_bf16, relaxed, &a->fold_shift);
        err = use_dequant(a->m, a->fold) ? tops__cu_dequant_gemm(a, what) : (int)cudaErrorNotSupported;
        if (err == (int)cudaErrorNotSupported && use_dequant_relaxed(pk, a->m, relaxed, a->fold))
            err = tops__cu_dequant_relaxed_gemm(a, what);
        /* the strict large-M kernels on the factored view where the pack has one */
        tops__cuda_packed fv;
        const int fac = factored_view(pk, a->x_bf16, &fv);
        const tops__cuda_packed *sp = fac ? &fv : pk;
        const tops__cu_matmul_args f = fac ? factored_args(pk, &fv, a) : *a;
        if (err == (int)cudaErrorNotSupported)
            err = use_rescaled(sp, a->m, a->fold, a->x_bf16) ? tops__cu_rescaled_gemm(&f, what)
                                                              : (int)cudaErrorNotSupported;
        if (err == (int)cudaErrorNotSupported && use_wgmma(a->m, a->fold, a->code, sp->group)) {
            err = tops__cu_wgmma_launch(&f, what);
            /* a kernel without the multipliers (8-bit codes): the plain scales */
            if (err == (int)cudaErrorNotSupported && fac) err = tops__cu_wgmma_launch(a, what);
        }
    }
    if (err == (int)cudaErrorNotSupported) err = tops__cu_matmul_launch(a, what);
    return err;
}

/* f32 activations (left) run on the 16-bit kernels as `terms` 16-bit rows
   each (tops__cu_split_f32): f16 terms, each row scaled by a power of two
   into f16's range, except for plain bf16 weights, which need bf16
   activations.  Strict: f16 x 2 (|x - sum| <= 2^-22 |x| plus 2^-39 of the
   row's largest |x| for values far below it), bf16 x 3 (exact: 24 bits);
   relaxed: one term (a 16-bit rounding, within 2^-11 / 2^-8). */
static int f32_terms(const tops__cuda_packed *pk, int relaxed, int *bf16) {
    *bf16 = pk->code == TOPS__CU_CODE_BF16;
    return relaxed ? 1 : *bf16 ? 3 : 2;
}

/* The f32-left call: split, the plan's kernel on terms x m rows into an f32
   workspace, join into the caller's output; a holds the caller's call. */
static int launch_f32_left(const tops__cuda_packed *pk, tops__cu_matmul_args *a, int relaxed, const float *x,
                           int64_t ldx, const char **what) {
    int bf16;
    const int terms = f32_terms(pk, relaxed, &bf16);
    const int64_t m = a->m, k = a->k, n = a->n, ldx16 = (k + 7) / 8 * 8, ldp = (n + 7) / 8 * 8;
    const size_t xbytes = ((size_t)(terms * m * ldx16) * 2 + 255) / 256 * 256,
                 pbytes = ((size_t)(terms * m * ldp) * 4 + 255) / 256 * 256, ebytes = (size_t)m * sizeof(int);
    cudaStream_t stream = (cudaStream_t)a->stream;
    char *ws = NULL;
    int err = (int)cudaMallocAsync((void **)&ws, xbytes + pbytes + ebytes, stream);
    if (err) {
        *what = "cudaMallocAsync of the f32 activation workspace";
        return err;
    }
    int *exps = (int *)(ws + xbytes + pbytes);
    float *part = (float *)(ws + xbytes);
    err = tops__cu_split_f32(x, ldx, m, k, terms, bf16, ws, ldx16, exps, a->stream);
    if (err) *what = "the f32 activation split";
    if (!err) {
        tops__cu_matmul_args t = *a;
        t.x = ws;
        t.x_bf16 = bf16;
        t.ldx = ldx16;
        t.m = terms * m;
        t.out = part;
        t.out_dtype = TOPS_DT_F32;
        t.ldo = ldp;
        t.accumulate = 0;
        err = launch_plan(pk, &t, relaxed, what);
    }
    if (!err) {
        err = tops__cu_join_terms(part, ldp, m, n, terms, exps, a->out, a->out_dtype, a->ldo, a->accumulate, a->stream);
        if (err) *what = "the f32 activation join";
    }
    const int e2 = (int)cudaFreeAsync(ws, stream);
    if (!err && e2) {
        err = e2;
        *what = "cudaFreeAsync of the f32 activation workspace";
    }
    return err;
}

/* One call: f32 activations through their terms, 16-bit ones straight to
   the plan. */
static int launch_codes(const tops__cuda_packed *pk, tops__cu_matmul_args *a, int relaxed, int f32_left,
                        const char **what) {
    return f32_left ? launch_f32_left(pk, a, relaxed, (const float *)a->x, a->ldx, what) : launch_plan(pk, a, relaxed, what);
}

/* The call; weights with mins (pk->biases) run the codes into an f32
   workspace, then tops__cu_bias_launch adds the bias term, the old output
   and rounds once. */
static int launch_call(const tops__cuda_packed *pk, tops__cu_matmul_args *a, int relaxed, int f32_left,
                       const char **what) {
    if (!pk->biases) return launch_codes(pk, a, relaxed, f32_left, what);
    if (relaxed) { /* the relaxed dequantization takes the biases into the weights, where it runs */
        tops__cu_matmul_args t = *a;
        t.biases = (const float *)pk->biases;
        const int err = launch_codes(pk, &t, relaxed, f32_left, what);
        if (err != (int)cudaErrorNotSupported) return err;
    }
    const int64_t m = a->m, n = a->n, ldp = (n + 7) / 8 * 8;
    const size_t pbytes = ((size_t)(m * ldp) * 4 + 255) / 256 * 256, gbytes = (size_t)(m * pk->groups) * 4;
    cudaStream_t stream = (cudaStream_t)a->stream;
    char *ws = NULL;
    int err = (int)cudaMallocAsync((void **)&ws, pbytes + gbytes, stream);
    if (err) {
        *what = "cudaMallocAsync of the bias workspace";
        return err;
    }
    tops__cu_matmul_args t = *a;
    t.out = ws;
    t.out_dtype = TOPS_DT_F32;
    t.ldo = ldp;
    t.accumulate = 0;
    err = launch_codes(pk, &t, relaxed, f32_left, what);
    if (!err) {
        const tops__cu_bias_args b = {a->x, f32_left ? 2 : a->x_bf16 ? 1 : 0, a->ldx, m, n, a->k, pk->group,
                                      pk->groups, (const float *)pk->biases, pk->global_scale, (const float *)ws, ldp,
                                      (float *)(ws + pbytes), a->out, a->out_dtype, a->ldo, a->accumulate, a->stream};
        err = tops__cu_bias_launch(&b);
        if (err) *what = "the bias term of weights with mins";
    }
    const int e2 = (int)cudaFreeAsync(ws, stream);
    if (!err && e2) {
        err = e2;
        *what = "cudaFreeAsync of the bias workspace";
    }
    return err;
}

const char *tops__cuda_matmul_path(const tops_tensor *right, int64_t m, int relaxed) {
    if (!tops__cuda_is_packed(right)) return "packed on the fly";
    return path_for((const tops__cuda_packed *)right->packed_, m, relaxed, 0); /* the bench's f16 activations */
}

tops_status tops__cuda_pack_right(const tops_exec *exec, const tops_matmul2d_desc *desc, const tops_tensor *right,
                                  tops_tensor *packed) {
    static const char fn[] = "tops_pack_right";
    int device = exec->device.index;
    tops_status st = tops__cuda_check_device(fn, "exec.device", device);
    if (st != TOPS_OK) return st;
    if ((st = tops__check_tensor(fn, "right", right)) != TOPS_OK) return st;
    if (!packed) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "packed is NULL");
    if (tops__is_packed(right)) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "right is already packed");
    if (right->memory.kind == TOPS_DEVICE_CUDA && right->memory.index != device)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "right is in cuda:%d memory but exec.device is cuda:%d",
                          right->memory.index, device);
    tops__cuda_packed *pk = malloc(sizeof *pk);
    if (!pk) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate the pack descriptor");
    void *base = NULL;
    st = pack_to_device(fn, right, desc->transpose_right, desc->relaxed_precision, device, pk, &base);
    if (st != TOPS_OK) {
        free(pk);
        return st;
    }
    tops_tensor t;
    memset(&t, 0, sizeof t);
    t.magic = TOPS_TENSOR_MAGIC;
    t.format = tops__packed_format();
    t.rank = 2;
    t.extent[0] = pk->n; /* the weight as stored: [N, K] */
    t.extent[1] = pk->k;
    t.stride[0] = pk->k;
    t.stride[1] = 1;
    t.data = pk->weights;
    t.tensor_scale = 1.0f;
    t.memory = exec->device;
    t.owner_ = base;
    t.packed_ = pk;
    *packed = t;
    return TOPS_OK;
}

/* A launch's arguments as far as the pack sets them. */
static tops__cu_matmul_args pack_args(const tops__cuda_packed *pk) {
    tops__cu_matmul_args a;
    memset(&a, 0, sizeof a);
    a.weights = pk->weights;
    a.scales = pk->scales;
    a.code = pk->code;
    a.scale_kind = pk->scale_kind;
    a.has_scales = pk->has_scales;
    a.group = pk->group;
    a.groups = pk->groups;
    a.n_pad = pk->n_pad;
    a.k_pad = pk->k_pad;
    a.n = pk->n;
    a.k = pk->k;
    a.global_scale = pk->global_scale;
    a.units = (const float *)pk->units;
    return a;
}

/* The 16-bit terms a pack's weights take (tops__cuda_weight_terms), 0 where
   they do not. */
static int terms_of(const tops__cuda_packed *pk, int relaxed, int bf16) {
    if (!dequantizable(pk)) return 0;
    int shift;
    if (relaxed || tops__cu_fold_shift(pk, bf16, 0, &shift) == 1) return 1;
    return bf16 ? 3 : 2;
}

tops_status tops__cuda_weight_terms_of(const char *fn, const tops_tensor *right, int relaxed, int bf16, int *terms) {
    *terms = 0;
    if (tops__cuda_is_packed(right)) {
        *terms = terms_of((const tops__cuda_packed *)right->packed_, relaxed, bf16);
        return TOPS_OK;
    }
    /* a plain weight: its pack's facts, from a host pack */
    tops_tensor host_copy;
    memset(&host_copy, 0, sizeof host_copy);
    const tops_tensor *src = right;
    tops_status st;
    if (right->memory.kind == TOPS_DEVICE_CUDA) {
        if ((st = tops_tensor_to(right, (tops_memory){TOPS_DEVICE_CPU, 0}, &host_copy)) != TOPS_OK) return st;
        src = &host_copy;
    }
    tops__cuda_packed pk;
    void *wb = NULL, *sb = NULL, *bb = NULL;
    st = tops__cuda_pack_host(fn, src, 1, &pk, &wb, &sb, &bb);
    tops_tensor_destroy(&host_copy);
    free(wb);
    free(sb);
    free(bb);
    if (st == TOPS_UNSUPPORTED_FORMAT) return TOPS_OK; /* no pack rule: not this path (the caller says why) */
    if (st == TOPS_OK) *terms = terms_of(&pk, relaxed, bf16);
    return st;
}

tops_status tops__cuda_weight_terms(const char *fn, const tops_exec *exec, const tops_tensor *right, int relaxed,
                                    int bf16, tops__cuda_terms *out) {
    const int device = exec->device.index;
    cudaStream_t stream = (cudaStream_t)exec->stream;
    memset(out, 0, sizeof *out);
    tops__cuda_packed local;
    const tops__cuda_packed *pk = &local;
    void *temp = NULL;
    tops_status st = TOPS_OK;
    if (tops__cuda_is_packed(right)) pk = (const tops__cuda_packed *)right->packed_;
    else if ((st = pack_to_device(fn, right, 1, 0, device, &local, &temp)) != TOPS_OK) return st;
    const int terms = pk->units ? terms_of(pk, relaxed, bf16) : 0; /* every pack of these codes has units */
    if (terms) {
        const size_t plane = (size_t)pk->n_pad * (size_t)pk->k_pad;
        const size_t wbytes = ((size_t)terms * plane * 2 + 255) & ~(size_t)255;
        void *ws = NULL;
        /* the units: the pack's, or (a pack made for the call, freed below) a copy */
        int e = cudaMallocAsync(&ws, wbytes + (temp ? (size_t)pk->n_pad * 4 : 0), stream);
        const char *what = "cudaMallocAsync of the dequantized weights";
        if (e == cudaSuccess) {
            tops__cu_matmul_args a = pack_args(pk);
            a.x_bf16 = bf16;
            a.biases = pk->biases;
            a.stream = exec->stream;
            const float *unit = (const float *)pk->units + pk->n_pad;
            e = tops__cu_dequant_terms(&a, terms, (uint16_t *)ws, pk->k_pad, (long long)plane, &what);
            if (e == cudaSuccess && temp) {
                e = cudaMemcpyAsync((char *)ws + wbytes, unit, (size_t)pk->n_pad * 4, cudaMemcpyDeviceToDevice, stream);
                unit = (const float *)((char *)ws + wbytes);
                if (e) what = "copying the channel units";
            }
            if (e == cudaSuccess) {
                out->terms = terms;
                out->mem = ws;
                out->w = ws;
                out->ldw = pk->k_pad;
                out->rows = pk->n_pad;
                out->unit = unit;
                out->global = pk->global_scale;
            } else {
                (void)cudaFreeAsync(ws, stream);
            }
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st = tops__cuda_error(fn, e, what);
        }
    }
    if (temp) {
        /* an on-the-fly pack: the dequantization reads it */
        if (stream) (void)cudaStreamSynchronize(stream);
        else (void)cudaDeviceSynchronize();
        (void)tops_cuda_free(device, temp);
    }
    return st;
}

static tops_status check_rows(const char *fn, const char *what, const tops_tensor *t) {
    if (t->rank != 2)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "%s has rank %d; the GPU path takes rank-2 tensors", what, t->rank);
    if (t->stride[1] != 1 && t->extent[1] > 1)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                          "%s has stride %lld along its rows; the GPU path needs contiguous rows", what,
                          (long long)t->stride[1]);
    if (t->extent[0] > INT32_MAX / 2 || t->extent[1] > INT32_MAX / 2 || t->stride[0] > ((int64_t)1 << 40))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s is %lld x %lld; the GPU path takes extents below 2^30", what,
                          (long long)t->extent[0], (long long)t->extent[1]);
    return TOPS_OK;
}

/* tops_matmul2d on the GPU, or (path != NULL) the same checks and the name
   of the kernel the call would launch, written into path. */
static tops_status matmul_call(const char *fn, const tops_exec *exec, const tops_matmul2d_desc *desc,
                               const tops_tensor *left, const tops_tensor *right, const tops_tensor *dest, char *path,
                               size_t cap) {
    int device = exec->device.index;
    char name[48];
    tops_status st = tops__cu_debug_check(fn);
    if (st != TOPS_OK) return st;
    if ((st = tops__cuda_check_device(fn, "exec.device", device)) != TOPS_OK) return st;
    if ((st = tops__check_tensor(fn, "left", left)) != TOPS_OK) return st;
    if ((st = tops__check_tensor(fn, "right", right)) != TOPS_OK) return st;
    if ((st = tops__check_tensor(fn, "dest", dest)) != TOPS_OK) return st;
    if (desc->mode != TOPS_MULTIPLY && desc->mode != TOPS_MULTIPLY_ACCUMULATE)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.mode is %d; it must be multiply or multiply_accumulate",
                          (int)desc->mode);
    if (desc->transpose_left)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "transpose_left = 1: the GPU path takes left as [M, K]");
    if ((st = tops__cuda_check_memory(fn, "left", left, device)) != TOPS_OK) return st;
    if ((st = tops__cuda_check_memory(fn, "dest", dest, device)) != TOPS_OK) return st;
    const tops_dtype left_dt = tops__float_of(left), dest_dt = tops__float_of(dest);
    const int f32_left = left_dt == TOPS_DT_F32;
    if (left_dt == TOPS_DT_NONE)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn,
                          "left has format %s; the GPU path takes f32, f16 or bf16 activations",
                          tops_format_name(left->format, name, sizeof name));
    if (dest_dt == TOPS_DT_NONE)
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "dest has format %s; the GPU path writes f32, f16 or bf16",
                          tops_format_name(dest->format, name, sizeof name));
    if ((st = check_rows(fn, "left", left)) != TOPS_OK) return st;
    if ((st = check_rows(fn, "dest", dest)) != TOPS_OK) return st;

    tops__cuda_packed local;
    const tops__cuda_packed *pk;
    void *temp = NULL;
    if (tops__cuda_is_packed(right)) {
        pk = (const tops__cuda_packed *)right->packed_;
        if (pk->device != device)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "right was packed for cuda:%d but exec.device is cuda:%d",
                              pk->device, device);
    } else if (tops__is_packed(right)) {
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "right was packed for the CPU; pack it with exec.device = cuda:%d",
                          device);
    } else {
        if (right->memory.kind == TOPS_DEVICE_CUDA && right->memory.index != device)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "right is in cuda:%d memory but exec.device is cuda:%d",
                              right->memory.index, device);
        if (right->rank != 2)
            return tops__fail(TOPS_SHAPE_MISMATCH, fn, "right has rank %d; the GPU path takes rank-2 tensors", right->rank);
        /* Check the shapes before paying for a pack. */
        int64_t rk = desc->transpose_right ? right->extent[1] : right->extent[0];
        if (rk != left->extent[1])
            return tops__fail(TOPS_SHAPE_MISMATCH, fn, "left has K=%lld but right has K=%lld",
                              (long long)left->extent[1], (long long)rk);
        if ((st = pack_to_device(fn, right, desc->transpose_right, desc->relaxed_precision, device, &local, &temp)) !=
            TOPS_OK)
            return st;
        pk = &local;
    }
    int64_t m = left->extent[0], k = left->extent[1];
    if (pk->k != k) st = tops__fail(TOPS_SHAPE_MISMATCH, fn, "left has K=%lld but right has K=%lld", (long long)k, (long long)pk->k);
    else if (desc->k && desc->k != k)
        st = tops__fail(TOPS_SHAPE_MISMATCH, fn, "desc.k is %lld but the tensors have K=%lld", (long long)desc->k, (long long)k);
    else if (dest->extent[0] != m || dest->extent[1] != pk->n)
        st = tops__fail(TOPS_SHAPE_MISMATCH, fn, "dest is %lld x %lld but the product is %lld x %lld",
                        (long long)dest->extent[0], (long long)dest->extent[1], (long long)m, (long long)pk->n);
    else if (!f32_left && ((pk->code == TOPS__CU_CODE_F16 && left_dt != TOPS_DT_F16) ||
                           (pk->code == TOPS__CU_CODE_BF16 && left_dt != TOPS_DT_BF16)))
        st = tops__fail(TOPS_UNSUPPORTED_FORMAT, fn,
                        "right is %s but left is %s; plain 16-bit weights must have the activations' type (or f32)",
                        pk->code == TOPS__CU_CODE_F16 ? "f16" : "bf16", tops_format_name(left->format, name, sizeof name));
    /* f32 left: the kernels see terms x m rows of 16-bit activations */
    int terms = 1, term_bf16 = left_dt == TOPS_DT_BF16;
    if (f32_left) terms = f32_terms(pk, desc->relaxed_precision, &term_bf16);
    if (st == TOPS_OK && f32_left && m * terms > INT32_MAX / 2)
        st = tops__fail(TOPS_INVALID_ARGUMENT, fn,
                        "left is f32 with %lld rows; the GPU path splits each into %d 16-bit rows and takes below 2^30 "
                        "of them",
                        (long long)m, terms);
    if (st == TOPS_OK && path) {
        char how[48] = "";
        if (f32_left) snprintf(how, sizeof how, " (f32 left as %d %s term%s)", terms, term_bf16 ? "bf16" : "f16",
                               terms > 1 ? "s" : "");
        snprintf(path, cap, "cuda:%d %s%s%s%s", device, path_for(pk, m * terms, desc->relaxed_precision, term_bf16),
                 how, pk->biases ? " + bias term (mins)" : "", temp ? " (right packed on the call)" : "");
    }
    int prev = -1;
    if (st == TOPS_OK && !path) st = tops__cuda_enter(fn, device, &prev);
    if (st == TOPS_OK && !path) {
        tops__cu_matmul_args a = pack_args(pk);
        a.x = left->data;
        a.x_bf16 = left_dt == TOPS_DT_BF16;
        a.ldx = left->stride[0];
        a.out = dest->data;
        a.out_dtype = dest_dt;
        a.ldo = dest->stride[0];
        a.accumulate = desc->mode == TOPS_MULTIPLY_ACCUMULATE;
        a.m = m;
        a.k = k;
        a.stream = exec->stream;
        a.q8_row_factor = pk->q8_row_factor;
        const char *what = "the matmul launch";
        const int err = launch_call(pk, &a, desc->relaxed_precision, f32_left, &what);
        if (err) st = tops__cuda_error(fn, err, what);
        tops__cuda_leave(prev);
    }
    if (temp) {
        /* An on-the-fly pack: wait for the kernels before freeing it. */
        if (exec->stream) (void)cudaStreamSynchronize((cudaStream_t)exec->stream);
        else (void)cudaDeviceSynchronize();
        (void)tops_cuda_free(device, temp);
    }
    return st;
}

tops_status tops__cuda_matmul2d(const tops_exec *exec, const tops_matmul2d_desc *desc, const tops_tensor *left,
                                const tops_tensor *right, tops_tensor *dest) {
    return matmul_call("tops_matmul2d", exec, desc, left, right, dest, NULL, 0);
}

tops_status tops__cuda_matmul2d_path(const tops_exec *exec, const tops_matmul2d_desc *desc, const tops_tensor *left,
                                     const tops_tensor *right, const tops_tensor *dest, char *buf, size_t cap) {
    return matmul_call("tops_matmul2d_path", exec, desc, left, right, dest, buf, cap);
}

tops_status tops__cuda_packed_clone(const tops_tensor *src, tops_tensor *out) {
    static const char fn[] = "tops__cuda_packed_clone";
    if (!tops__cuda_is_packed(src)) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "src is not a GPU-packed tensor");
    const tops__cuda_packed *pk = (const tops__cuda_packed *)src->packed_;
    tops__cuda_packed *copy = malloc(sizeof *copy);
    if (!copy) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate the pack descriptor");
    *copy = *pk;
    size_t soff, foff, qoff, boff, uoff;
    const size_t total = pack_offsets(pk, pk->fp8_bytes, pk->q8_bytes, &soff, &foff, &qoff, &boff, &uoff);
    void *mem = NULL;
    tops_status st = tops_cuda_alloc(pk->device, total, &mem);
    tops_memory dev = {TOPS_DEVICE_CUDA, pk->device};
    if (st == TOPS_OK) st = tops_cuda_copy(mem, dev, pk->weights, dev, pk->weight_bytes, NULL);
    if (st == TOPS_OK && pk->scales) st = tops_cuda_copy((char *)mem + soff, dev, pk->scales, dev, pk->scale_bytes, NULL);
    if (st == TOPS_OK && pk->fp8_weights)
        st = tops_cuda_copy((char *)mem + foff, dev, pk->fp8_weights, dev, pk->fp8_bytes, NULL);
    if (st == TOPS_OK && pk->q8_weights)
        st = tops_cuda_copy((char *)mem + qoff, dev, pk->q8_weights, dev, pk->q8_bytes, NULL);
    if (st == TOPS_OK && pk->biases)
        st = tops_cuda_copy((char *)mem + boff, dev, pk->biases, dev, pk->bias_bytes, NULL);
    if (st == TOPS_OK && pk->units)
        st = tops_cuda_copy((char *)mem + uoff, dev, pk->units, dev, pk->unit_bytes, NULL);
    if (st == TOPS_OK) st = tops__cuda_device_sync(fn, pk->device); /* device-to-device copies return early */
    if (st != TOPS_OK) {
        if (mem) (void)tops_cuda_free(pk->device, mem);
        free(copy);
        return st;
    }
    copy->weights = mem;
    copy->scales = pk->scales ? (char *)mem + soff : NULL;
    if (pk->fp8_weights) {
        copy->fp8_weights = (char *)mem + foff;
        size_t sc = pk->fp8_scales ? (size_t)((char *)pk->fp8_scales - (char *)pk->fp8_weights) : 0;
        copy->fp8_scales = sc ? (char *)copy->fp8_weights + sc : NULL;
    }
    copy->q8_weights = pk->q8_weights ? (char *)mem + qoff : NULL;
    copy->biases = pk->biases ? (char *)mem + boff : NULL;
    copy->units = pk->units ? (char *)mem + uoff : NULL;
    tops_tensor t = *src;
    t.data = mem;
    t.owner_ = mem;
    t.packed_ = copy;
    *out = t;
    return TOPS_OK;
}

size_t tops__cuda_packed_bytes(const tops_tensor *t) {
    if (!tops__cuda_is_packed(t)) return 0;
    const tops__cuda_packed *pk = (const tops__cuda_packed *)t->packed_;
    return pk->weight_bytes + pk->scale_bytes + pk->bias_bytes;
}
