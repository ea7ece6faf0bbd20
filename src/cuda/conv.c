/* tops_conv2d on a GPU (exec.device = cuda:N), after src/ops/conv2d.c has
   checked the descriptor, the geometry, the shapes and the overlaps.  Five
   paths, in this order:
   - depthwise (groups = C = O): a direct kernel, f32 sums (conv.cu); a GPU
     pack's taps read as its 16-bit rows or dequantized on the device (as
     below), others decoded on the host where they are not f32 or the
     activations' type in device memory;
   - f16 / bf16 weights of the activations' type, 16-byte pieces (C / groups
     a multiple of 8, pixels and weight rows 16-byte aligned), compute
     capability 9.0: for 3x3 stride-1 layers of 64 channels in and at most
     64 out (direct_applies) the direct kernel on halo tiles (conv.cu),
     else the wgmma implicit GEMM (conv.cu), 128 x 64/128/256
     tiles and K splits chosen by wg_plan below, or (groups 1, C a multiple
     of 64, at least 1024 pixels and 128 channels or 16384 and 48-64:
     tr_plan) its transposed twin, 128 (64) channels x 96-384 pixels a CTA;
   - the same weights otherwise (sm_80, C = 3, odd strides): the mma.sync
     implicit GEMM (16-byte cp.async pieces where it can, else element by
     element), bias and accumulation in its epilogue;
   - quantized weights (4-bit and 8-bit codes with finite scales) under the
     same conditions: dequantized on the device at each call into 16-bit
     planes of the activations' type whose sum is each weight over a power
     of two a channel (tops__cuda_weight_terms: strict one term where
     code x scale is exact in it, else two f16 terms within 2^-22 or three
     bf16 terms, exact; relaxed one term rounded once), then the same wgmma
     kernel summing every plane into its f32 sums (64- or 128-wide tiles;
     one term: the direct kernel where it applies, or the transposed one
     where tr_plan picks it);
   - everything else (other formats, other shapes): per group, im2col
     rows gathered into a device buffer (at most 256 MiB a pass), then the
     GPU matmul (matmul.c) on the weights packed once for the call (or the
     caller's GPU pack), so every format keeps matmul2d's kernels and
     strict / relaxed meaning.  A 1x1 stride-1 unpadded convolution over
     collapsible pixels is the matmul of the input itself.
   Debug keys (TOPS_CUDA_DEBUG, tune.c; tests, A/B runs): `conv_path=im2col`
   forces the last path for every format, `conv_path=mma` keeps the wgmma
   kernel off, `conv_bn=64|128|256` and `conv_splits=1..64` fix its tile
   width and K splits, `conv_l1=0` gathers the activations past L1
   (cp.async.cg), `conv_tma=0` gathers them where TMA im2col would load
   them; `conv_tr=0|1` keeps the transposed kernel off / takes it wherever
   it applies, `conv_pn=96|104|128|192|256|384` fixes its pixels a CTA (384
   only for O <= 64, 256 and 384 the only ones there); `conv_direct=0` keeps
   the direct 3x3 kernel off (conv_bn and conv_tr=1 do too). */
#include "cuda/conv.h"
#include "cuda/runtime.h"

#include "core/numeric.h"
#include "formats/traits.h"

#include <stdlib.h>
#include <string.h>

#define COL_BUDGET ((size_t)256 << 20)

/* The conv_* debug keys (TOPS_CUDA_DEBUG, tune.c), read at each call after
   tops__cu_debug_check has refused any value they do not take. */
typedef struct conv_opts {
    int im2col, mma;    /* conv_path=im2col / conv_path=mma */
    int bn, splits, pn; /* 0: the plans' choice */
    int l1, tma;
    int tr;     /* -1 the plan's choice */
    int direct; /* 0: never; 1 (default): where it applies */
} conv_opts;

static void read_opts(conv_opts *o) {
    const long long path = tops__cu_tune(TOPS__CU_T_CONV_PATH);
    o->im2col = path == TOPS__CU_CONV_IM2COL;
    o->mma = path == TOPS__CU_CONV_MMA;
    o->bn = (int)tops__cu_tune(TOPS__CU_T_CONV_BN);
    o->splits = (int)tops__cu_tune(TOPS__CU_T_CONV_SPLITS);
    o->pn = (int)tops__cu_tune(TOPS__CU_T_CONV_PN);
    o->l1 = (int)tops__cu_tune(TOPS__CU_T_CONV_L1);
    o->tma = (int)tops__cu_tune(TOPS__CU_T_CONV_TMA);
    o->tr = (int)tops__cu_tune(TOPS__CU_T_CONV_TR);
    o->direct = (int)tops__cu_tune(TOPS__CU_T_CONV_DIRECT);
}

/* Plain 16-bit weights of the activations' type the implicit GEMM reads. */
static int igemm_weights(const tops_tensor *wt, tops_dtype act, int device) {
    if (tops__cuda_is_packed(wt)) {
        const tops__cuda_packed *pk = (const tops__cuda_packed *)wt->packed_;
        return pk->device == device && pk->fp8_weights && pk->global_scale == 1.0f &&
               pk->code == (act == TOPS_DT_F16 ? TOPS__CU_CODE_F16 : TOPS__CU_CODE_BF16);
    }
    return tops__float_of(wt) == act && wt->tensor_scale == 1.0f && (wt->stride[1] == 1 || wt->extent[1] == 1) &&
           (wt->memory.kind == TOPS_DEVICE_CPU || wt->memory.index == device);
}

static int igemm_applies(const tops_tensor *in, const tops_tensor *wt, int device, const conv_opts *op) {
    return !op->im2col && igemm_weights(wt, tops__float_of(in), device);
}

/* Whether the implicit GEMM gathers 16-byte pieces by cp.async (conv.cu
   decides the same from the final weight rows). */
static int igemm_vector(const tops__cuda_conv_geom *g, const tops_tensor *in) {
    if ((g->c / g->groups) % 8 || ((uintptr_t)in->data & 15)) return 0;
    for (int i = 0; i < 3; i++)
        if (in->stride[i] % 8) return 0;
    return 1;
}

/* Whether the weight rows the implicit GEMM will read suit the wgmma
   kernel's TMA (row stride a multiple of 8 elements, 16-byte aligned); a
   host copy is made with stride K. */
static int wg_weight_rows_ok(const tops_tensor *wt, int64_t k) {
    if (tops__cuda_is_packed(wt)) {
        const tops__cuda_packed *pk = (const tops__cuda_packed *)wt->packed_;
        return pk->k_pad % 8 == 0 && ((uintptr_t)pk->fp8_weights & 15) == 0;
    }
    if (wt->memory.kind == TOPS_DEVICE_CUDA)
        return (wt->extent[0] > 1 ? wt->stride[0] : k) % 8 == 0 && ((uintptr_t)wt->data & 15) == 0;
    return k % 8 == 0;
}

/* Whether the wgmma kernel loads its activation tiles by TMA im2col (else
   it gathers them by cp.async): each K stage must be 64 channels of one tap
   (C / groups a multiple of 64), and the walk within what the hardware
   encodes (rank-4 corners in [-128, 127], tap offsets up to 255, element
   strides up to 8). */
static int wg_tma_im2col(const tops__cuda_conv_geom *g, const conv_opts *op) {
    const int64_t up_w = (g->ow - 1) * g->sw - g->pl - (g->w - 1), up_h = (g->oh - 1) * g->sh - g->pt - (g->h - 1);
    return op->tma && (g->c / g->groups) % 64 == 0 && g->sw <= 8 && g->sh <= 8 && g->pl <= 128 && g->pt <= 128 &&
           up_w >= -128 && up_w <= 127 && up_h >= -128 && up_h <= 127 && (g->kw - 1) * g->dw <= 255 &&
           (g->kh - 1) * g->dh <= 255;
}

/* The K split counts both wgmma plans try for kt K stages: up to kt / 2
   (1 to 16), or the one debug key conv_splits fixes. */
static int64_t split_max(int64_t kt, const conv_opts *op) {
    const int64_t smax = op->splits ? op->splits : kt / 2 < 1 ? 1 : kt / 2 > 16 ? 16 : kt / 2;
    return smax > kt ? kt : smax;
}

/* What s > 1 K splits add to a call of m x o outputs: the summing kernel
   and the partials' round trip through L2 (~5 TB/s), microseconds.  H100,
   2026-12-06, ResNet-50 res2 at batch 1 (9 K stages, 25 CTAs), forced 1 /
   2 / 3 K splits: 8.7 / 7.7 / 7.1 us; the old model's 2 us fixed and 2.5
   TB/s kept it at one. */
static double split_us(int64_t s, int64_t m, int64_t o) {
    return s > 1 ? 1.0 + (double)(2 * s * m * o * 4) / 5.0e12 * 1e6 : 0.0;
}

/* The wgmma kernel's tile width and K splits: the fewest estimated
   microseconds.  Each SM takes its share of the CTAs (tiles x splits), a
   CTA the time of its K stages plus two (pipeline fill and epilogue) at the
   SM's full rate; at width 64 two CTAs share an SM and hide each other's
   fill and epilogue, so an odd last one runs alone at 60 % of the rate.  K
   splits add the partials' round trip through memory (~2.5 TB/s) and the
   summing kernel.  On the H200 this picks width 64 for the ResNet-50 3x3
   layers at batch 32 (the fastest forced width / split of the same session
   on res2-res4, 5 % behind width 128 with 2 splits on res5) and width 64
   with 6-15 K splits at batch 1 on res3-res5 (faster than width 128). */
static void wg_plan(const tops__cuda_conv_geom *g, int sms, const conv_opts *op, int terms, int *bn_out,
                    int *splits_out) {
    const int64_t m = g->n * g->oh * g->ow, og = g->o / g->groups, mt = (m + 127) / 128, kt = (g->k + 63) / 64;
    double best = 1e300;
    int bn_best = 128, s_best = 1;
    for (int bn = 64; bn <= 256; bn *= 2) {
        if (op->bn && bn != op->bn) continue;
        if (!op->bn && bn > 64 && og <= bn / 2) continue; /* half the tile or more would be empty */
        if (terms > 1 && bn == 256) continue;            /* no such kernel: the ring would not fit */
        const int64_t tiles = mt * ((og + bn - 1) / bn) * g->groups;
        /* Terms at width 64: each k16 step reads its A tile once a term, and
           shared memory, not the tensor cores, sets the pace (H200, 2026-12-04,
           int4-g128 strict at batch 32, two terms, forced width 64 / 128: res4
           41.1 / 37.7 us, res5 47.5 / 43.4, res3 46.6 / 46.7; one term 64 stays
           faster or equal).  1.15 per stage moves res4 and res5 to width 128. */
        const double smem = terms > 1 && bn == 64 ? 1.15 : 1.0;
        const double stage_us = smem * terms * bn * 128 * 64 * 2 / 5.0e12 * 1e6;
        const int64_t smax = split_max(kt, op);
        for (int64_t s0 = op->splits ? smax : 1; s0 <= smax; s0++) {
            /* the launcher gives each split `per` stages: s0 may become fewer splits */
            const int64_t per = (kt + s0 - 1) / s0, s = (kt + per - 1) / per, units = tiles * s;
            if (s * g->groups > 65535) break;
            const int64_t n = (units + sms - 1) / sms; /* CTAs on the busiest SM */
            const double cta = (double)(per + 2) * stage_us;
            const double t = (bn == 64 ? (double)(n / 2) * 2 * cta + (n % 2 ? cta / 0.6 : 0) : (double)n * cta) +
                             split_us(s, m, g->o);
            if (t < best) best = t, bn_best = bn, s_best = (int)s;
        }
    }
    *bn_out = bn_best;
    *splits_out = s_best;
}

/* The transposed kernel's channels a CTA (conv.cu's launcher decides the same). */
static int tr_channels(const tops__cuda_conv_geom *g) { return g->o <= 64 ? 64 : 128; }

/* Whether the transposed wgmma kernel (128 channels x pn pixels a CTA,
   tops__cu_conv_wgt_launch) runs instead of the pixel-major one, with its
   pixel width and K splits.  It takes groups 1, TMA im2col tiles and one
   weight term, and by default calls of at least 1024 output pixels and 128
   channels, or 16384 pixels and 48 to 64 channels (CTAs of 64 channels,
   both warpgroups on them, each over half of 256 or 384 pixels; res2 at
   batch 32: f16 34.8 us against 35.2, one dequantized term 39.5 against
   46.5; at batch 1 10.8 against 8.6): on an H100 (2026-12-06, bench/results/h100.md) the ResNet-50
   3x3 layers at batch 32, f16, res3 18.9 us against 32.0, res4 23.5 /
   25.5, res5 27.6 / 30.8, but res2 (O = 64: half its channels idle)
   61.6 / 35.2 and at batch 1 res3 / res4 8.2 / 7.1 and 8.3 / 7.0 (res5
   8.1 / 8.9).  The width and splits: the fewest estimated microseconds as
   in wg_plan (a CTA its stages plus two at the SM's full rate), where a
   k16 step's shared-memory bytes (both warpgroups' operands and the
   stage's fill: 8192 + 96 PN at 128 a cycle) against its PN cycles of
   tensor work stretch the narrow widths by (64 + 0.75 PN) / PN (res3 at
   batch 32: PN 128 28.5 us, 192 18.5).  Debug keys conv_tr (0 / 1: never
   / wherever it applies), conv_pn and conv_splits; conv_bn keeps it off. */
static int tr_plan(const tops__cuda_conv_geom *g, int sms, const conv_opts *op, int terms, int im2col, int *pn_out,
                   int *splits_out) {
    const int ch = tr_channels(g);
    const int64_t m = g->n * g->oh * g->ow, kt = (g->k + 63) / 64, ct = (g->o + ch - 1) / ch;
    if (op->tr == 0 || g->groups != 1 || !im2col || terms != 1 ||
        (op->tr != 1 && (op->bn || m < (ch == 128 ? 1024 : 16384) || (g->o > 64 && g->o < 128) || g->o < 48)))
        return 0;
    static const int widths128[] = {96, 104, 128, 192, 256}, widths64[] = {256, 384};
    const int *widths = ch == 128 ? widths128 : widths64, nw = ch == 128 ? 5 : 2;
    double best = 1e300;
    for (int i = 0; i < nw; i++) {
        const int pn = widths[i];
        if (op->pn && pn != op->pn) continue;
        const int64_t tiles = (m + pn - 1) / pn * ct;
        /* 64 channels: both warpgroups read the weights, each half the
           pixels: 6144 + 64 PN bytes against PN / 2 cycles */
        const double stage_us = (double)ch * pn * 64 * 2 / 5.0e12 * 1e6,
                     smem = ch == 128 ? (64.0 + 0.75 * pn) / pn : 1.0 + 96.0 / pn;
        const int64_t smax = split_max(kt, op);
        for (int64_t s0 = op->splits ? smax : 1; s0 <= smax; s0++) {
            const int64_t per = (kt + s0 - 1) / s0, s = (kt + per - 1) / per, n = (tiles * s + sms - 1) / sms;
            const double t = (double)n * (double)(per + 2) * stage_us * (smem > 1.0 ? smem : 1.0) + split_us(s, m, g->o);
            if (t < best) best = t, *pn_out = pn, *splits_out = (int)s;
        }
    }
    return best < 1e300; /* (none: pn= names a width this channel count has not) */
}

/* Whether the direct 3x3 kernel (tops__cu_conv_direct_launch: halo tiles,
   the nine taps' weights resident) runs: 3x3, stride and dilation 1,
   groups 1, C = 64 and O <= 64, one weight term; debug key conv_direct=0
   keeps it off.  H100, 2026-12-06, ResNet-50 res2 f16 against the
   transposed / pixel-major kernels, alternated in one call: batch 32 17.1-
   17.3 us against 34.3-34.6 (cuDNN 24.5), batch 1 5.0 against 6.6 (4.9). */
static int direct_applies(const tops__cuda_conv_geom *g, const conv_opts *op, int terms) {
    return op->direct != 0 && terms == 1 && g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1 && g->dh == 1 &&
           g->dw == 1 && g->groups == 1 && g->c == 64 && g->o <= 64 && !op->bn && op->tr != 1;
}
#define DIRECT_NAME "direct 3x3 on halo tiles of 8x14 output pixels, the nine taps' weights resident, wgmma"

/* The transposed kernel's part of tops_conv2d_path. */
static const char *tr_name(const tops__cuda_conv_geom *g, int pn, int splits) {
    static _Thread_local char name[96];
    snprintf(name, sizeof name, "wgmma %d channels x %d pixels a CTA (transposed), %d K split%s", tr_channels(g), pn,
             splits, splits > 1 ? "s" : "");
    return name;
}

/* How the wgmma kernel loads its activation tiles (tops_conv2d_path). */
static const char *wg_loader(int im2col) {
    return im2col ? "activations by TMA im2col" : "NHWC tiles gathered by cp.async into swizzled stages";
}

/* Whether quantized weights may take the wgmma kernel as dequantized
   terms: its conditions on the activations, and the planes (at most three,
   N and K padded to 64) within 1 GiB. */
static int terms_applies(const tops__cuda_conv_geom *g, const tops_tensor *in, const tops_tensor *wt, int device,
                         const conv_opts *op) {
    const double planes = 3.0 * (double)((g->o + 63) / 64 * 64) * (double)((g->k + 63) / 64 * 64) * 2;
    return !op->im2col && !op->mma && !g->depthwise && !igemm_weights(wt, tops__float_of(in), device) &&
           igemm_vector(g, in) && tops__cuda_is_sm90a(device) && planes <= (double)(1 << 30);
}

/* The sm_90 kernels in the order they are tried: the direct 3x3 kernel, the
   transposed (weight-major) one, the pixel-major one; each one that
   launches nothing (its conditions, or a tensor map the driver refused)
   answers cudaErrorNotSupported and the next is tried.  Returns the last
   answer: cudaErrorNotSupported where none launched. */
typedef struct {
    int direct, tr, wg;            /* which may run */
    int tr_pn, tr_splits, bn, splits; /* their plans */
} wg_choice;
static int launch_wgmma(const tops__cu_conv_args *a, const tops__cu_conv_weights *cw, const wg_choice *c, int device) {
    int e = c->direct ? tops__cu_conv_direct_launch(a, cw, tops__cuda_sm_count(device)) : cudaErrorNotSupported;
    if (e == cudaErrorNotSupported) {
        (void)cudaGetLastError();
        e = c->tr ? tops__cu_conv_wgt_launch(a, cw, c->tr_pn, c->tr_splits) : cudaErrorNotSupported;
    }
    if (e == cudaErrorNotSupported) {
        (void)cudaGetLastError();
        e = c->wg ? tops__cu_conv_wgmma_launch(a, cw, c->bn, c->splits) : cudaErrorNotSupported;
    }
    return e;
}

/* The bias as f32 in fresh device memory (stream-ordered; the caller frees it). */
static tops_status bias_to_device(const char *fn, const tops_tensor *bias, cudaStream_t stream, float **out) {
    tops_tensor host;
    memset(&host, 0, sizeof host);
    const tops_tensor *b = bias;
    tops_status st;
    *out = NULL;
    if (bias->memory.kind == TOPS_DEVICE_CUDA) {
        if ((st = tops_tensor_to(bias, (tops_memory){TOPS_DEVICE_CPU, 0}, &host)) != TOPS_OK) return st;
        b = &host;
    }
    const int64_t o = b->extent[0];
    float *v = malloc((size_t)o * sizeof(float));
    if (!v) {
        tops_tensor_destroy(&host);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the bias");
    }
    const tops_dtype dt = tops_format_get_info(b->format.id)->element;
    for (int64_t i = 0; i < o; i++) {
        const int64_t e = i * b->stride[0];
        float x = dt == TOPS_DT_F32   ? ((const float *)b->data)[e]
                  : dt == TOPS_DT_F16 ? tops__f16_to_f32(((const uint16_t *)b->data)[e])
                                      : tops__bf16_to_f32(((const uint16_t *)b->data)[e]);
        v[i] = x * b->tensor_scale;
    }
    tops_tensor_destroy(&host);
    int e = cudaMallocAsync((void **)out, (size_t)o * sizeof(float), stream);
    if (e == cudaSuccess) e = cudaMemcpyAsync(*out, v, (size_t)o * sizeof(float), cudaMemcpyHostToDevice, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream); /* v is freed next */
    free(v);
    if (e != cudaSuccess) {
        if (*out) (void)cudaFreeAsync(*out, stream);
        *out = NULL;
        (void)cudaGetLastError();
        return tops__cuda_error(fn, e, "copying the bias to the device");
    }
    return TOPS_OK;
}

/* Depthwise taps as the kernel reads them: the caller's device tensor when
   it is f32 or of the activations' type, else decoded to f32 on the host
   and copied (*temp owns that copy). */
static tops_status dw_weights(const char *fn, const tops_tensor *wt, tops_dtype act, int device, cudaStream_t stream,
                              const void **w, tops_dtype *dt, int64_t *ws, void **temp) {
    *temp = NULL;
    const tops_dtype wdt = tops__float_of(wt);
    if (wt->memory.kind == TOPS_DEVICE_CUDA && wt->memory.index == device && wt->tensor_scale == 1.0f &&
        (wt->stride[1] == 1 || wt->extent[1] == 1) && (wdt == TOPS_DT_F32 || wdt == act)) {
        *w = wt->data;
        *dt = wdt;
        *ws = wt->stride[0];
        return TOPS_OK;
    }
    tops_tensor host;
    memset(&host, 0, sizeof host);
    const tops_tensor *src = wt;
    tops_status st;
    if (wt->memory.kind == TOPS_DEVICE_CUDA) {
        if ((st = tops_tensor_to(wt, (tops_memory){TOPS_DEVICE_CPU, 0}, &host)) != TOPS_OK) return st;
        src = &host;
    }
    const int64_t c = src->extent[0], t = src->extent[1];
    float *dec = malloc((size_t)(c * t) * sizeof(float));
    if (!dec) {
        tops_tensor_destroy(&host);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the depthwise weights");
    }
    tops_tensor_desc v;
    memset(&v, 0, sizeof v);
    v.format = tops_format_of(TOPS_DT_F32);
    v.rank = 2;
    v.extent[0] = c;
    v.extent[1] = t;
    v.data = dec;
    tops_tensor view;
    if ((st = tops_tensor_view(&v, &view)) == TOPS_OK) st = tops_dequantize(src, &view);
    tops_tensor_destroy(&host);
    if (st != TOPS_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", tops_last_error());
        free(dec);
        return tops__fail(st, fn, "decoding the depthwise weights: %s", why);
    }
    int e = cudaMallocAsync(temp, (size_t)(c * t) * sizeof(float), stream);
    if (e == cudaSuccess) e = cudaMemcpyAsync(*temp, dec, (size_t)(c * t) * sizeof(float), cudaMemcpyHostToDevice, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    free(dec);
    if (e != cudaSuccess) {
        if (*temp) (void)cudaFreeAsync(*temp, stream);
        *temp = NULL;
        (void)cudaGetLastError();
        return tops__cuda_error(fn, e, "copying the depthwise weights to the device");
    }
    *w = *temp;
    *dt = TOPS_DT_F32;
    *ws = t;
    return TOPS_OK;
}

/* The implicit GEMM's weights: the GPU pack's row-major copy, the caller's
   device rows, or a device copy of them (*temp owns it). */
static tops_status igemm_weight_rows(const char *fn, const tops_tensor *wt, int64_t o, int64_t k, cudaStream_t stream,
                                     const void **w, int64_t *ldw, void **temp) {
    *temp = NULL;
    if (tops__cuda_is_packed(wt)) {
        const tops__cuda_packed *pk = (const tops__cuda_packed *)wt->packed_;
        *w = pk->fp8_weights;
        *ldw = pk->k_pad;
        return TOPS_OK;
    }
    const int64_t ld = wt->extent[0] > 1 ? wt->stride[0] : k;
    if (wt->memory.kind == TOPS_DEVICE_CUDA) {
        *w = wt->data;
        *ldw = ld;
        return TOPS_OK;
    }
    int e = cudaMallocAsync(temp, (size_t)(o * k) * 2, stream);
    if (e == cudaSuccess)
        e = cudaMemcpy2DAsync(*temp, (size_t)k * 2, wt->data, (size_t)ld * 2, (size_t)k * 2, (size_t)o, cudaMemcpyDefault,
                              stream);
    if (e == cudaSuccess && wt->memory.kind != TOPS_DEVICE_CUDA) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) {
        if (*temp) (void)cudaFreeAsync(*temp, stream);
        *temp = NULL;
        (void)cudaGetLastError();
        return tops__cuda_error(fn, e, "copying the weights to the device");
    }
    *w = *temp;
    *ldw = k;
    return TOPS_OK;
}

static tops_status view2d(tops_format f, void *data, int64_t rows, int64_t cols, int64_t ld, tops_memory mem,
                          tops_tensor *out) {
    tops_tensor_desc v;
    memset(&v, 0, sizeof v);
    v.format = f;
    v.rank = 2;
    v.extent[0] = rows;
    v.extent[1] = cols;
    v.stride[0] = ld;
    v.stride[1] = 1;
    v.data = data;
    v.memory = mem;
    return tops_tensor_view(&v, out);
}

/* A 1x1, stride-1, unpadded convolution whose pixels collapse into one row
   dimension: the input itself is the matmul's left [N * H * W, C]. */
static int direct_1x1(const tops__cuda_conv_geom *g, const tops_tensor *in) {
    if (g->kh != 1 || g->kw != 1 || g->sh != 1 || g->sw != 1 || g->pt || g->pl || g->groups != 1 || g->oh != g->h ||
        g->ow != g->w)
        return 0;
    const int64_t *s = in->stride;
    return (g->w == 1 || s[1] == g->w * s[2]) && (g->h == 1 || s[0] == g->h * s[1]) && s[2] >= g->c;
}

/* Per group: weights packed once, im2col passes, the GPU matmul. */
static tops_status run_im2col(const char *fn, const tops_exec *exec, const tops__cuda_conv_geom *g,
                              const tops_conv2d_desc *d, const tops_tensor *in, const tops_tensor *wt, tops_tensor *dest,
                              tops__cu_conv_args *a, char *path, size_t cap) {
    const int device = exec->device.index;
    cudaStream_t stream = (cudaStream_t)exec->stream;
    const int64_t m = g->n * g->oh * g->ow, og = g->o / g->groups, ldc = (g->k + 7) / 8 * 8;
    const int direct = direct_1x1(g, in);
    const size_t esz = (size_t)((tops_format_get_info(dest->format.id)->element_bits + 7) / 8);
    tops_matmul2d_desc md;
    memset(&md, 0, sizeof md);
    md.transpose_right = 1;
    md.relaxed_precision = d->relaxed_precision;
    md.mode = d->mode == TOPS_MULTIPLY_ACCUMULATE || d->bias ? TOPS_MULTIPLY_ACCUMULATE : TOPS_MULTIPLY;
    if (path) {
        snprintf(path, cap, "cuda:%d %s + matmul%s: %s", device,
                 direct ? "1x1 input as the left operand" : "im2col rows in device memory",
                 g->groups > 1 ? " per group" : "", tops__cuda_matmul_path(wt, m, d->relaxed_precision));
        return TOPS_OK;
    }
    tops_status st = TOPS_OK;
    if (d->bias) { /* dest = bias (or += bias), then the sums accumulate into it */
        int e = tops__cu_conv_bias_launch(a);
        if (e) return tops__cuda_error(fn, e, "the conv2d bias kernel");
    }
    int64_t chunk = direct ? m : (int64_t)(COL_BUDGET / ((size_t)ldc * 2));
    if (chunk < 1) chunk = 1;
    if (chunk > m) chunk = m;
    void *col = NULL;
    if (!direct) {
        int e = cudaMallocAsync(&col, (size_t)chunk * (size_t)ldc * 2, stream);
        if (e) {
            (void)cudaGetLastError();
            return tops__cuda_error(fn, e, "allocating the im2col buffer");
        }
    }
    for (int64_t grp = 0; grp < g->groups && st == TOPS_OK; grp++) {
        tops_tensor packed, slice;
        int own = 0;
        const tops_tensor *right = wt;
        if (!tops__cuda_is_packed(wt)) {
            slice = *wt;
            if (g->groups > 1) {
                int64_t start[2] = {grp * og, 0}, stop[2] = {(grp + 1) * og, g->k};
                if ((st = tops_tensor_slice(wt, start, stop, &slice)) != TOPS_OK) break;
            }
            if ((st = tops__cuda_pack_right(exec, &md, &slice, &packed)) != TOPS_OK) break;
            own = 1;
            right = &packed;
        }
        for (int64_t m0 = 0; m0 < m && st == TOPS_OK; m0 += chunk) {
            const int64_t rows = m - m0 < chunk ? m - m0 : chunk;
            tops_tensor left, out;
            if (direct) {
                st = view2d(in->format, in->data, m, g->c, in->stride[2], in->memory, &left);
            } else {
                int e = tops__cu_conv_im2col_launch(a, grp, m0, rows, col, ldc);
                if (e) st = tops__cuda_error(fn, e, "the im2col kernel");
                else st = view2d(in->format, col, rows, g->k, ldc, in->memory, &left);
            }
            if (st == TOPS_OK)
                st = view2d(dest->format, (char *)dest->data + (size_t)(m0 * g->row_stride + grp * og) * esz, rows, og,
                            g->row_stride, dest->memory, &out);
            if (st == TOPS_OK) st = tops__cuda_matmul2d(exec, &md, &left, right, &out);
        }
        if (own) {
            /* the kernels read the pack: wait for them before freeing it */
            if (stream) (void)cudaStreamSynchronize(stream);
            else (void)cudaDeviceSynchronize();
            tops_tensor_destroy(&packed);
        }
    }
    if (col) (void)cudaFreeAsync(col, stream);
    return st;
}

tops_status tops__cuda_conv2d(const tops_exec *exec, const tops__cuda_conv_geom *g, const tops_conv2d_desc *desc,
                              const tops_tensor *in, const tops_tensor *wt, tops_tensor *dest, char *path, size_t cap) {
    const char *fn = path ? "tops_conv2d_path" : "tops_conv2d";
    const int device = exec->device.index;
    char name[48];
    tops_status st = tops__cu_debug_check(fn);
    if (st != TOPS_OK) return st;
    if ((st = tops__cuda_check_device(fn, "exec.device", device)) != TOPS_OK) return st;
    if ((st = tops__cuda_check_memory(fn, "input", in, device)) != TOPS_OK ||
        (st = tops__cuda_check_memory(fn, "dest", dest, device)) != TOPS_OK)
        return st;
    if (!tops__is_half(in))
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "input has format %s; on the GPU conv2d takes f16 or bf16 activations",
                          tops_format_name(in->format, name, sizeof name));
    if (in->tensor_scale != 1.0f)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "input has tensor_scale %g; on the GPU it must be 1",
                          (double)in->tensor_scale);
    if ((in->extent[3] > 1 && in->stride[3] != 1) || (dest->extent[3] > 1 && dest->stride[3] != 1))
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                          "input and dest have channel strides %lld and %lld; on the GPU channels are contiguous",
                          (long long)in->stride[3], (long long)dest->stride[3]);
    const int64_t m = g->n * g->oh * g->ow;
    for (int i = 0; i < 3; i++)
        if (in->stride[i] < 0 || in->stride[i] > ((int64_t)1 << 40))
            return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "input has stride %lld in dimension %d; on the GPU strides are 0..2^40",
                              (long long)in->stride[i], i);
    if (m >= INT32_MAX / 2 || g->k >= INT32_MAX / 2 || g->o >= INT32_MAX / 2 || g->h >= INT32_MAX / 4 ||
        g->w >= INT32_MAX / 4 || g->groups > 65535 || g->row_stride < 0)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                          "N * OH * OW = %lld, K = %lld, O = %lld, groups = %lld: on the GPU these stay below 2^30 "
                          "(groups at most 65535)",
                          (long long)m, (long long)g->k, (long long)g->o, (long long)g->groups);
    if (tops__is_packed(wt) && !tops__cuda_is_packed(wt))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "weight was packed for the CPU; pack it with exec.device = cuda:%d",
                          device);
    if (tops__cuda_is_packed(wt) && ((const tops__cuda_packed *)wt->packed_)->device != device)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "weight was packed for cuda:%d but exec.device is cuda:%d",
                          ((const tops__cuda_packed *)wt->packed_)->device, device);
    if (wt->memory.kind == TOPS_DEVICE_CUDA && wt->memory.index != device)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "weight is in cuda:%d memory but exec.device is cuda:%d",
                          wt->memory.index, device);
    if (desc->bias && desc->bias->memory.kind == TOPS_DEVICE_CUDA && desc->bias->memory.index != device)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.bias is in cuda:%d memory but exec.device is cuda:%d",
                          desc->bias->memory.index, device);

    tops__cu_conv_args a;
    memset(&a, 0, sizeof a);
    a.x = in->data;
    a.bf16 = tops__float_of(in) == TOPS_DT_BF16;
    a.xs_n = in->stride[0], a.xs_h = in->stride[1], a.xs_w = in->stride[2];
    a.n = g->n, a.h = g->h, a.w = g->w, a.c = g->c, a.o = g->o, a.kh = g->kh, a.kw = g->kw, a.oh = g->oh, a.ow = g->ow;
    a.k = g->k, a.sh = g->sh, a.sw = g->sw, a.dh = g->dh, a.dw = g->dw, a.pt = g->pt, a.pl = g->pl, a.groups = g->groups;
    a.out = dest->data;
    a.out_dtype = tops_format_get_info(dest->format.id)->element;
    a.ldo = g->row_stride;
    a.accumulate = desc->mode == TOPS_MULTIPLY_ACCUMULATE;
    a.stream = exec->stream;
    cudaStream_t stream = (cudaStream_t)exec->stream;

    conv_opts op;
    read_opts(&op);
    a.wg_l1 = op.l1;
    const int dw = g->depthwise && !op.im2col;
    const int ig = !dw && igemm_applies(in, wt, device, &op);
    const int wg = ig && !op.mma && igemm_vector(g, in) && wg_weight_rows_ok(wt, g->k) && tops__cuda_is_sm90a(device);
    int wg_bn = 128, wg_splits = 1;
    if (wg) wg_plan(g, tops__cuda_sm_count(device), &op, 1, &wg_bn, &wg_splits);
    const int qt = !dw && !ig && terms_applies(g, in, wt, device, &op);
    a.wg_im2col = (wg || qt) && wg_tma_im2col(g, &op);
    int tr_pn = 128, tr_splits = 1;
    const int tr = wg && tr_plan(g, tops__cuda_sm_count(device), &op, 1, a.wg_im2col, &tr_pn, &tr_splits);
    if (path && qt) {
        int terms = 0;
        if ((st = tops__cuda_weight_terms_of(fn, wt, desc->relaxed_precision, a.bf16, &terms)) != TOPS_OK) return st;
        if (terms) {
            if (direct_applies(g, &op, terms)) {
                snprintf(path, cap, "cuda:%d implicit GEMM on the weights dequantized at the call to 1 %s term%s: %s",
                         device, a.bf16 ? "bf16" : "f16", desc->relaxed_precision ? " (relaxed: rounded once)" : "",
                         DIRECT_NAME);
                return TOPS_OK;
            }
            wg_plan(g, tops__cuda_sm_count(device), &op, terms, &wg_bn, &wg_splits);
            if (tr_plan(g, tops__cuda_sm_count(device), &op, terms, a.wg_im2col, &tr_pn, &tr_splits)) {
                snprintf(path, cap,
                         "cuda:%d implicit GEMM on the weights dequantized at the call to 1 %s term%s: %s, %s", device,
                         a.bf16 ? "bf16" : "f16", desc->relaxed_precision ? " (relaxed: rounded once)" : "",
                         wg_loader(1), tr_name(g, tr_pn, tr_splits));
                return TOPS_OK;
            }
            snprintf(path, cap,
                     "cuda:%d implicit GEMM on the weights dequantized at the call to %d %s term%s%s: %s, wgmma 128x%d "
                     "tiles, %d K split%s%s",
                     device, terms, a.bf16 ? "bf16" : "f16", terms > 1 ? "s" : "",
                     desc->relaxed_precision ? " (relaxed: rounded once)" : "",
                     wg_loader(a.wg_im2col),
                     wg_bn, wg_splits, wg_splits > 1 ? "s" : "", g->groups > 1 ? ", groups on the grid" : "");
            return TOPS_OK;
        }
        a.wg_im2col = 0;
    }
    if (path) {
        if (dw) {
            int terms = 0;
            if (tops__cuda_is_packed(wt) &&
                (st = tops__cuda_weight_terms_of(fn, wt, desc->relaxed_precision, a.bf16, &terms)) != TOPS_OK)
                return st;
            char how[64] = "";
            if (terms)
                snprintf(how, sizeof how, ", taps dequantized at the call to %d %s term%s", terms, a.bf16 ? "bf16" : "f16",
                         terms > 1 ? "s" : "");
            snprintf(path, cap, "cuda:%d depthwise direct (%lldx%lld taps, f32 sums%s)", device, (long long)g->kh,
                     (long long)g->kw, how);
            return TOPS_OK;
        }
        if (wg && direct_applies(g, &op, 1)) {
            snprintf(path, cap, "cuda:%d %s", device, DIRECT_NAME);
            return TOPS_OK;
        }
        if (tr) {
            snprintf(path, cap, "cuda:%d implicit GEMM: %s, weights by TMA, %s", device, wg_loader(1),
                     tr_name(g, tr_pn, tr_splits));
            return TOPS_OK;
        }
        if (wg) {
            snprintf(path, cap,
                     "cuda:%d implicit GEMM: %s, weights by TMA, wgmma 128x%d tiles, %d K split%s%s", device,
                     wg_loader(a.wg_im2col),
                     wg_bn, wg_splits, wg_splits > 1 ? "s" : "", g->groups > 1 ? ", groups on the grid" : "");
            return TOPS_OK;
        }
        if (ig) {
            snprintf(path, cap, "cuda:%d implicit GEMM: NHWC tiles gathered %s, mma.sync m16n8k16, 128x%d tiles%s", device,
                     igemm_vector(g, in) ? "by cp.async" : "element by element", g->o / g->groups <= 64 ? 64 : 128,
                     g->groups > 1 ? ", groups on the grid" : "");
            return TOPS_OK;
        }
        return run_im2col(fn, exec, g, desc, in, wt, dest, &a, path, cap);
    }
    if (m == 0 || g->o == 0) return TOPS_OK;
    int prev;
    if ((st = tops__cuda_enter(fn, device, &prev)) != TOPS_OK) return st;
    float *bias = NULL;
    if (desc->bias) st = bias_to_device(fn, desc->bias, stream, &bias);
    a.bias = bias;
    if (st == TOPS_OK && dw) {
        const void *w = NULL;
        void *temp = NULL;
        tops_dtype dt = TOPS_DT_F32;
        int64_t ws = 0;
        const int packed16 = tops__cuda_is_packed(wt) && igemm_weights(wt, tops__float_of(in), device);
        if (tops__cuda_is_packed(wt) && !packed16) { /* a GPU pack: its taps dequantized on the device */
            tops__cuda_terms t;
            st = tops__cuda_weight_terms(fn, exec, wt, desc->relaxed_precision, a.bf16, &t);
            if (st == TOPS_OK && !t.terms)
                st = tops__fail(TOPS_UNSUPPORTED_FORMAT, fn,
                                "weight is a GPU pack whose codes, scales or mins the depthwise kernel cannot decode "
                                "(16-bit codes, or values that are not finite); pass the plain weights");
            if (st == TOPS_OK) {
                const tops__cu_conv_weights cw = {t.w, t.ldw, t.terms, t.rows, t.unit, t.global};
                int e = tops__cu_conv_dw_terms_launch(&a, &cw);
                if (e) {
                    (void)cudaGetLastError();
                    st = tops__cuda_error(fn, e, "the depthwise conv2d kernel");
                }
            }
            if (t.mem) (void)cudaFreeAsync(t.mem, stream);
        } else if (packed16) { /* the pack's row-major 16-bit taps */
            const tops__cuda_packed *pk = (const tops__cuda_packed *)wt->packed_;
            int e = tops__cu_conv_dw_launch(&a, pk->fp8_weights, tops__float_of(in), pk->k_pad);
            if (e) st = tops__cuda_error(fn, e, "the depthwise conv2d kernel");
        } else if ((st = dw_weights(fn, wt, tops__float_of(in), device, stream, &w, &dt, &ws, &temp)) == TOPS_OK) {
            int e = tops__cu_conv_dw_launch(&a, w, dt, ws);
            if (e) st = tops__cuda_error(fn, e, "the depthwise conv2d kernel");
        }
        if (temp) (void)cudaFreeAsync(temp, stream);
    } else if (st == TOPS_OK && ig) {
        const void *w = NULL;
        void *temp = NULL;
        int64_t ldw = 0;
        st = igemm_weight_rows(fn, wt, g->o, g->k, stream, &w, &ldw, &temp);
        if (st == TOPS_OK) {
            const tops__cu_conv_weights cw = {w, ldw, 1, g->o, NULL, 1.0f};
            const wg_choice ch = {wg && direct_applies(g, &op, 1), tr, wg, tr_pn, tr_splits, wg_bn, wg_splits};
            int e = launch_wgmma(&a, &cw, &ch, device);
            if (e == cudaErrorNotSupported) { /* launched nothing: the mma.sync kernel takes it */
                (void)cudaGetLastError();
                e = tops__cu_conv_igemm_launch(&a, w, ldw);
            }
            if (e) st = tops__cuda_error(fn, e, "the implicit-GEMM conv2d kernel");
        }
        if (temp) (void)cudaFreeAsync(temp, stream);
    } else if (st == TOPS_OK) {
        tops__cuda_terms t;
        memset(&t, 0, sizeof t);
        if (qt) st = tops__cuda_weight_terms(fn, exec, wt, desc->relaxed_precision, a.bf16, &t);
        if (st == TOPS_OK && t.terms) {
            wg_plan(g, tops__cuda_sm_count(device), &op, t.terms, &wg_bn, &wg_splits);
            const tops__cu_conv_weights cw = {t.w, t.ldw, t.terms, t.rows, t.unit, t.global};
            const int tq = tr_plan(g, tops__cuda_sm_count(device), &op, t.terms, a.wg_im2col, &tr_pn, &tr_splits);
            const wg_choice ch = {direct_applies(g, &op, t.terms), tq, 1, tr_pn, tr_splits, wg_bn, wg_splits};
            int e = launch_wgmma(&a, &cw, &ch, device);
            (void)cudaFreeAsync(t.mem, stream);
            if (e == cudaErrorNotSupported) { /* launched nothing (a tensor map the driver refused) */
                (void)cudaGetLastError();
                a.wg_im2col = 0;
                st = run_im2col(fn, exec, g, desc, in, wt, dest, &a, NULL, 0);
            } else if (e) {
                (void)cudaGetLastError();
                st = tops__cuda_error(fn, e, "the implicit-GEMM conv2d kernel on dequantized weights");
            }
        } else if (st == TOPS_OK) {
            a.wg_im2col = 0;
            st = run_im2col(fn, exec, g, desc, in, wt, dest, &a, NULL, 0);
        }
    }
    if (bias) (void)cudaFreeAsync(bias, stream);
    tops__cuda_leave(prev);
    return st;
}
