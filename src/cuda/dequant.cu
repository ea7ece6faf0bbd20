// Large-M plans on weights decoded once (matmul.c, use_dequant and
// use_dequant_relaxed): the packed weights become row-major 16-bit weights
// [n, k_pad] of the activations' type in a stream-ordered workspace, each
// channel's (code x scale + bias) / 2^e_n, and the 16-bit TMA GEMM
// (fp8_gemm.cu, tops__cu_h16_launch) runs on them with 2^e_n as its channel
// scales.  2^e_n brings channel n's largest |weight| into [2^14, 2^15): no
// overflow, f16's 11 bits kept down to 2^-28 of the channel's top.  The
// register-A kernels decode every weight once per 128-token tile (32 times
// at M = 4096); this decodes it once.  Folded formats (use_dequant): one
// unit for all, the fold's 2^B (no pass over the scales), exact where
// tops__cu_fold_shift folds in strict mode (e2m1 codes times e8m0 / ue4m3
// scales), rounded once in relaxed mode (4-bit integers times f16 scales);
// strict two-term folds do not come here.  Relaxed mode (use_dequant_relaxed):
// every other code family, rounded once (relative 2^-11 in f16, 2^-8 in
// bf16), the biases of formats with mins riding in the weights (no bias
// pass).  Then the rescaled-group plan for strict integer codes (below).
#include "cuda/kernels.cuh"
#include "cuda/sm90.cuh"

#include <stdint.h>

namespace tops_cu {
namespace {

// Both large-M plans' start: the 16-bit TMA GEMM's own conditions
// (tops__cu_h16_launch, tops__cu_h16_rescaled_launch: cudaErrorNotSupported
// where they fail), checked before any work, then the packed weights'
// kernel parameters.
int plan_begin(const tops__cu_matmul_args *a, Params &p, const char **what) {
    if (!device_is_sm90a() || (uintptr_t)a->x % 16 != 0 || (a->ldx * 2) % 16 != 0 || a->m > 0x7FFFFFFF / 2)
        return (int)cudaErrorNotSupported;
    return init_params(a, p, what) ? (int)cudaSuccess : (int)cudaErrorInvalidValue;
}

// Both large-M plans' stream-ordered workspace: without memory pools or
// with the device out of memory cudaErrorNotSupported (the plan's register-A
// kernels need none), any other failure with *what naming `name`.
cudaError_t workspace_alloc(void **ws, size_t bytes, cudaStream_t stream, const char *name, const char **what) {
    const cudaError_t err = cudaMallocAsync(ws, bytes, stream);
    if (err == cudaErrorNotSupported || err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return cudaErrorNotSupported;
    }
    if (err != cudaSuccess) *what = name;
    return err;
}
// Frees it on the stream: err, or where err is cudaSuccess the free's error.
cudaError_t workspace_free(void *ws, cudaStream_t stream, cudaError_t err, const char *name, const char **what) {
    const cudaError_t e2 = cudaFreeAsync(ws, stream);
    if (err != cudaSuccess || e2 == cudaSuccess) return err;
    *what = name;
    return e2;
}
// The call's arguments for its output channels n0 .. n0 + rows - 1 (n0 a
// multiple of 16; whole 16-channel tiles of packed weights).
tops__cu_matmul_args channel_slice(const tops__cu_matmul_args *a, long long n0, long long rows) {
    tops__cu_matmul_args s = *a;
    s.n = rows;
    s.n_pad = (rows + 15) / 16 * 16;
    s.out = static_cast<char *>(a->out) + (size_t)n0 * (a->out_dtype == TOPS_DT_F32 ? 4 : 2);
    return s;
}

} // namespace
} // namespace tops_cu

using namespace tops_cu;

// ---- the weights decoded once, a unit a channel --------------------------

namespace tops_cu {
namespace {

// Largest |decoded code| of a family.
template <int CODE> constexpr float code_max() {
    return CODE == TOPS__CU_CODE_U4 ? 8.0f : CODE == TOPS__CU_CODE_E2M1 ? 6.0f : CODE == TOPS__CU_CODE_I8 ? 128.0f : 448.0f;
}

// The terms of two f32 values: term 0 the rounding of each, each next term
// the rounding of what the terms before left (exact in f32; 0 after a
// non-finite term), as tops__cu_split_f32 splits activations.
template <int TERMS, bool BF16> __device__ __forceinline__ void split_pair(float x, float y, uint32_t (&t)[TERMS]) {
#pragma unroll
    for (int i = 0; i < TERMS; i++) {
        float rx, ry;
        if constexpr (BF16) {
            const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
            t[i] = bf2_bits(h);
            rx = __low2float(h), ry = __high2float(h);
        } else {
            const __half2 h = __floats2half2_rn(x, y);
            t[i] = h2_bits(h);
            rx = __low2float(h), ry = __high2float(h);
        }
        x = isfinite(rx) ? x - rx : 0.0f;
        y = isfinite(ry) ? y - ry : 0.0f;
    }
}

// One thread per 16-byte fragment (tile, chunk, lane) of tiles [tile0,
// tile0 + tiles): its codes (pack.c's layout: k16 step j in word j, or
// words 2j and 2j + 1 for 8-bit codes; rows gid and gid + 8, K 4 tig ..
// 4 tig + 3; 64 K of 4-bit codes, 32 of 8-bit ones; the decoder's factor
// taken back) times their rows' scales plus their rows' biases (or none),
// over their rows' units (inv: the pack's, from row tile0 x 16; NULL:
// inv_all), in f32, into out[(tile - tile0) * 16 + row][k] (row stride ldw
// elements) as TERMS 16-bit values whose sum is it (split_pair), term t at
// out + t * plane.
template <int CODE, bool BF16, int TERMS = 1>
__global__ void __launch_bounds__(256) dequant_units_kernel(const Params p, const float *__restrict__ biases,
                                                            const float *__restrict__ inv, float inv_all, int tile0,
                                                            int tiles, long long ldw, uint16_t *out,
                                                            long long plane = 0) {
    constexpr int kChunk = CODE == TOPS__CU_CODE_U4 || CODE == TOPS__CU_CODE_E2M1 ? 64 : 32;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // The kernel after it may start its prologue (conv2d's wgmma kernels:
    // programmatic dependents that wait for this grid before their loads).
    sm90::grid_dep_launch();
#endif
    const long long f = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (f >= (long long)tiles * p.chunks * 32) return;
    const int lane = (int)(f & 31), gid = lane >> 2, tig = lane & 3;
    const long long tc = f >> 5;
    const int c = (int)(tc % p.chunks), tl = (int)(tc / p.chunks);
    const uint4 w = p.w[((long long)(tile0 + tl) * p.chunks + c) * 32 + lane];
    const unsigned char *sc = p.has_scales ? p.scales + (size_t)(tile0 + tl) * p.scale_tile_bytes : nullptr;
    const long long row = (long long)tl * 16 + gid, grow = (long long)(tile0 + tl) * 16 + gid;
    // rows past n (the padding) have zero codes, no bias and are never stored
    const float i0 = inv ? inv[row] : inv_all, i1 = inv ? inv[row + 8] : inv_all;
    const float d0 = i0 * decode_factor<CODE>(), d1 = i1 * decode_factor<CODE>();
#pragma unroll
    for (int j = 0; j < kChunk / 16; j++) {
        uint32_t a[4];
        decode_step<CODE, false>(w, j, a); // exact in f16 (times decode_factor)
        const int kk = c * kChunk + j * 16 + tig * 4, g = min(kk >> p.group_shift, p.groups - 1);
        const float s0 = sc ? scale_entry(sc, p.scale_kind, (size_t)g * 16 + 2 * gid) * d0 : d0;
        const float s1 = sc ? scale_entry(sc, p.scale_kind, (size_t)g * 16 + 2 * gid + 1) * d1 : d1;
        const float b0 = biases && grow < p.n ? biases[grow * p.groups + g] * i0 : 0.0f;
        const float b1 = biases && grow + 8 < p.n ? biases[(grow + 8) * p.groups + g] * i1 : 0.0f;
        uint32_t pair[4][TERMS];
#pragma unroll
        for (int r = 0; r < 4; r++) { // a[r]: row gid + 8 (r & 1), K kk + 2 (r >> 1) and the next
            const float2 v = __half22float2(bits_h2(a[r]));
            const float sv = (r & 1) ? s1 : s0, bv = (r & 1) ? b1 : b0;
            split_pair<TERMS, BF16>(fmaf(v.x, sv, bv), fmaf(v.y, sv, bv), pair[r]);
        }
#pragma unroll
        for (int t = 0; t < TERMS; t++) {
            uint16_t *o = out + t * plane;
            *reinterpret_cast<uint2 *>(o + row * ldw + kk) = make_uint2(pair[0][t], pair[2][t]);
            *reinterpret_cast<uint2 *>(o + (row + 8) * ldw + kk) = make_uint2(pair[1][t], pair[3][t]);
        }
    }
}

// inv NULL: every channel's unit 2^shift.
template <int CODE>
cudaError_t launch_units(const Params &p, bool bf16, int terms, const float *biases, const float *inv, int shift,
                         int tile0, int tiles, long long ldw, long long plane, uint16_t *out, cudaStream_t stream) {
    const float inv_all = ldexpf(1.0f, -shift);
    const long long threads = (long long)tiles * p.chunks * 32;
    const unsigned blocks = (unsigned)((threads + 255) / 256);
#define TOPS_DU_LAUNCH(B, T)                                                                                          \
    dequant_units_kernel<CODE, B, T><<<blocks, 256, 0, stream>>>(p, biases, inv, inv_all, tile0, tiles, ldw, out, plane)
    if (bf16 && terms == 3) TOPS_DU_LAUNCH(true, 3);
    else if (bf16) TOPS_DU_LAUNCH(true, 1);
    else if (terms == 2) TOPS_DU_LAUNCH(false, 2);
    else TOPS_DU_LAUNCH(false, 1);
#undef TOPS_DU_LAUNCH
    return cudaGetLastError();
}

// The launch for a->code's family.
cudaError_t launch_code(const tops__cu_matmul_args *a, const Params &p, int terms, const float *biases,
                        const float *inv, int shift, int tile0, int tiles, long long ldw, long long plane,
                        uint16_t *out) {
    const bool bf16 = a->x_bf16 != 0;
    cudaStream_t st = static_cast<cudaStream_t>(a->stream);
    switch (a->code) {
    case TOPS__CU_CODE_U4:
        return launch_units<TOPS__CU_CODE_U4>(p, bf16, terms, biases, inv, shift, tile0, tiles, ldw, plane, out, st);
    case TOPS__CU_CODE_E2M1:
        return launch_units<TOPS__CU_CODE_E2M1>(p, bf16, terms, biases, inv, shift, tile0, tiles, ldw, plane, out, st);
    case TOPS__CU_CODE_I8:
        return launch_units<TOPS__CU_CODE_I8>(p, bf16, terms, biases, inv, shift, tile0, tiles, ldw, plane, out, st);
    default:
        return launch_units<TOPS__CU_CODE_E4M3>(p, bf16, terms, biases, inv, shift, tile0, tiles, ldw, plane, out, st);
    }
}

// Both plans: biases (or NULL) with the weights; per_channel: a unit a
// channel (else 2^shift for all, the GEMM's global scale times it);
// names[bf16] the kernel name set on success.
int dequant_gemm(const tops__cu_matmul_args *a, const float *biases, bool per_channel, int shift,
                 const char *const names[2], const char **what) {
    if (per_channel && !a->units) return (int)cudaErrorNotSupported; // every integer / e2m1 / e4m3 pack has them
    Params p;
    if (const int r = plan_begin(a, p, what)) return r;
    cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
    const bool bf16 = a->x_bf16 != 0;
    // Per channel of a slice: the weights (k_pad 16-bit values); the units are the pack's.
    const long long slice = workspace_slice(a->k_pad * 2, 256, a->n_pad);
    unsigned char *ws = nullptr;
    cudaError_t err = workspace_alloc(reinterpret_cast<void **>(&ws), (size_t)(slice * a->k_pad * 2), stream,
                                      "cudaMallocAsync of the dequantized weights", what);
    if (err != cudaSuccess) return (int)err;
    uint16_t *wts = reinterpret_cast<uint16_t *>(ws);
    for (long long n0 = 0; n0 < a->n && err == cudaSuccess; n0 += slice) {
        const long long rows = a->n - n0 < slice ? a->n - n0 : slice;
        const int tiles = (int)((rows + 15) / 16), tile0 = (int)(n0 / 16);
        const float *inv = per_channel ? a->units + n0 : nullptr;
        const float *unit = per_channel ? a->units + a->n_pad + n0 : nullptr;
        err = launch_code(a, p, 1, biases, inv, shift, tile0, tiles, a->k_pad, 0, wts);
        if (err != cudaSuccess) {
            *what = "the dequantization kernel launch";
            break;
        }
        tops__cu_matmul_args s = channel_slice(a, n0, rows);
        s.global_scale = a->global_scale * ldexpf(1.0f, per_channel ? 0 : shift);
        const tops__cu_fp8_args h = {&s, wts, unit, 0};
        err = (cudaError_t)tops__cu_h16_launch(&h, what);
    }
    err = workspace_free(ws, stream, err, "cudaFreeAsync of the dequantized weights", what);
    if (err == cudaSuccess) set_last_kernel(names[bf16]);
    return (int)err;
}

} // namespace
} // namespace tops_cu

extern "C" int tops__cu_dequant_gemm(const tops__cu_matmul_args *a, const char **what) {
    static const char *const names[2] = {
        "weights dequantized to f16 [n, k], then the f16 TMA GEMM (wgmma, both operands by TMA)",
        "weights dequantized to bf16 [n, k], then the bf16 TMA GEMM (wgmma, both operands by TMA)"};
    if ((a->code != TOPS__CU_CODE_E2M1 && a->code != TOPS__CU_CODE_U4) || a->fold != 1)
        return (int)cudaErrorNotSupported;
    return dequant_gemm(a, nullptr, false, a->fold_shift, names, what);
}

extern "C" int tops__cu_dequant_relaxed_gemm(const tops__cu_matmul_args *a, const char **what) {
    static const char *const names[2] = {
        "weights dequantized to f16 (relaxed: rounded once), then the f16 TMA GEMM",
        "weights dequantized to bf16 (relaxed: rounded once), then the bf16 TMA GEMM"};
    if (a->code != TOPS__CU_CODE_U4 && a->code != TOPS__CU_CODE_E2M1 && a->code != TOPS__CU_CODE_I8 &&
        a->code != TOPS__CU_CODE_E4M3)
        return (int)cudaErrorNotSupported;
    return dequant_gemm(a, a->biases, true, 0, names, what);
}

// conv2d's quantized weights (conv.c, tops__cuda_weight_terms): every
// channel of the pack as `terms` 16-bit planes over the pack's units.
extern "C" int tops__cu_dequant_terms(const tops__cu_matmul_args *a, int terms, uint16_t *out, long long ldw,
                                      long long plane, const char **what) {
    if ((a->code != TOPS__CU_CODE_U4 && a->code != TOPS__CU_CODE_E2M1 && a->code != TOPS__CU_CODE_I8 &&
         a->code != TOPS__CU_CODE_E4M3) ||
        !a->units || !(a->x_bf16 ? terms == 1 || terms == 3 : terms == 1 || terms == 2) || ldw < a->k_pad ||
        ldw % 4 != 0 || plane < ldw * a->n_pad || a->n_pad % 16 != 0)
        return (int)cudaErrorInvalidValue;
    Params p;
    if (!init_params(a, p, what)) return (int)cudaErrorInvalidValue;
    if (p.ntiles == 0 || p.chunks == 0) return (int)cudaSuccess;
    const cudaError_t err = launch_code(a, p, terms, a->biases, a->units, 0, 0, p.ntiles, ldw, plane, out);
    if (err != cudaSuccess) *what = "the weight dequantization launch";
    return (int)err;
}

// ---- strict integer codes in scale groups: rescaled accumulators ------------
//
// Large-M plan for strict 4- and 8-bit integer codes whose K groups carry
// their own scales (int4-gG, q4_0, q4_1's codes, int8-gG, q8_0; G = 32 or a
// multiple of 64) with f16 activations (matmul.c, use_rescaled).  The
// format's semantics, sum_g s_g (sum over group g of x q), in f32, is
// computed as a Horner sequence that needs one f32 accumulator set: with t_g
// the scale of group g (a zero scale keeps the previous t and its codes
// count as zeros), acc = ((P_0 r_1 + P_1) r_2 + P_2) ... and the result
// acc t_last, where r_g = t_(g-1) / t_g.  Each step adds a rounding of 2^-24
// relative to the partial sum, as any f32 summation does; no step overflows
// while a channel's scales span at most 2^60 (|x| < 2^16 for f16
// activations, |q| <= 2^7).  Channels beyond that, or with a scale that is
// not finite, take t_last = 0 (the GEMM adds exact zeros) and a strict
// per-element pass adds their sums in the format's own order.  The codes
// become f16 once (exact), so the 16-bit TMA GEMM runs at its own speed
// (fp8_gemm.cu, Ring::consume_rs).

namespace tops_cu {
namespace {

// The codes of tiles [tile0, tile0 + tiles) as f16 integers [(tile - tile0)
// * 16 + row][k] (row stride ldw), zero where the group's scale is zero;
// with factored sub-block scales (p.mults) each times its sub-block's f16
// multiplier (exact: |code x m| <= 2048), the groups being super-blocks.
// One thread per 16-byte fragment, as dequant_kernel.  Thread 0 zeroes the
// flagged-channel count of the slice (count), before rescale_plan runs.
template <int CODE>
__global__ void __launch_bounds__(256) codes_f16_kernel(const Params p, int tile0, int tiles, long long ldw,
                                                        uint16_t *out, unsigned *count) {
    constexpr int kChunk = CODE == TOPS__CU_CODE_U4 ? 64 : 32;
    const long long f = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (f == 0) *count = 0;
    if (f >= (long long)tiles * p.chunks * 32) return;
    const int lane = (int)(f & 31), gid = lane >> 2, tig = lane & 3;
    const long long tc = f >> 5;
    const int c = (int)(tc % p.chunks), tl = (int)(tc / p.chunks);
    const uint4 w = p.w[((long long)(tile0 + tl) * p.chunks + c) * 32 + lane];
    const unsigned char *sc = p.scales + (size_t)(tile0 + tl) * p.scale_tile_bytes;
#pragma unroll
    for (int j = 0; j < kChunk / 16; j++) {
        uint32_t a[4];
        decode_step<CODE, false>(w, j, a);
        const int kk = c * kChunk + j * 16 + tig * 4, g = min(kk >> p.group_shift, p.groups - 1);
        const bool z0 = scale_entry(sc, p.scale_kind, (size_t)g * 16 + 2 * gid) == 0.0f;
        const bool z1 = scale_entry(sc, p.scale_kind, (size_t)g * 16 + 2 * gid + 1) == 0.0f;
        if (p.mults) { // a[r]: row gid + 8 (r & 1); one sub-block (>= 16 K) for the 4 K of a lane
            const __half *mp = reinterpret_cast<const __half *>(p.mults + (size_t)(tile0 + tl) * p.mult_tile_bytes) +
                               (size_t)(kk >> p.mult_shift) * 16 + 2 * gid;
            const __half2 m0 = __half2half2(mp[0]), m1 = __half2half2(mp[1]);
#pragma unroll
            for (int r = 0; r < 4; r++) a[r] = h2_bits(__hmul2(bits_h2(a[r]), (r & 1) ? m1 : m0));
        }
        // a[r]: row gid + 8 (r & 1), K kk + 2 (r >> 1) and the next: 8 bytes
        // a row, the 4 lanes of a group 32 contiguous bytes (whole sectors)
        const long long row = (long long)tl * 16 + gid;
        *reinterpret_cast<uint2 *>(out + row * ldw + kk) = z0 ? make_uint2(0u, 0u) : make_uint2(a[0], a[2]);
        *reinterpret_cast<uint2 *>(out + (row + 8) * ldw + kk) = z1 ? make_uint2(0u, 0u) : make_uint2(a[1], a[3]);
    }
}

// Per channel n < rows_ld of the slice (rows of it real), one warp a
// channel, lanes over its groups: ratio[g * rows_ld + n'] = t_(g-1) / t_g for
// 1 <= g < grows (1 past the format's groups and for row 0), last[n] = t of
// the last group; a flagged channel (a scale not finite, or |t| spanning
// more than 2^60) gets ratios 1, last 0, and its index appended to list
// (count first).  t_g is s_g, or where s_g is zero the t before (the first
// nonzero scale before any: those groups have zero codes, any unit serves).
__global__ void __launch_bounds__(256) rescale_plan(const Params p, int tile0, int rows, int rows_ld, int grows,
                                                    float *__restrict__ ratio, float *__restrict__ last,
                                                    unsigned *count, int *list) {
    const int n = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = (int)(threadIdx.x & 31);
    if (n >= rows_ld) return;
    const bool real = n < rows;
    const unsigned char *sc = p.scales + (size_t)(tile0 + n / 16) * p.scale_tile_bytes;
    const size_t e = 2 * (size_t)(n % 16 % 8) + (size_t)(n % 16 / 8);
    auto scale = [&](int g) { return real && g < p.groups ? scale_entry(sc, p.scale_kind, (size_t)g * 16 + e) : 0.0f; };
    // Pass 1: flags, the range of |s|, the first nonzero scale.
    bool bad = false;
    float lo = INFINITY, hi = 0.0f, first = 0.0f;
    for (int g0 = 0; g0 < p.groups; g0 += 32) {
        const float v = scale(g0 + lane);
        bad = bad || !isfinite(v);
        if (isfinite(v) && v != 0.0f) lo = fminf(lo, fabsf(v)), hi = fmaxf(hi, fabsf(v));
        const unsigned nz = __ballot_sync(0xffffffffu, isfinite(v) && v != 0.0f);
        const float f = __shfl_sync(0xffffffffu, v, nz ? __ffs(nz) - 1 : 0);
        if (first == 0.0f && nz) first = f;
    }
    for (int o = 16; o > 0; o >>= 1) {
        lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
        hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    }
    const bool flag = __any_sync(0xffffffffu, bad) || hi > lo * 0x1p60f;
    // Pass 2: t_(g-1) of each lane's group from the nearest nonzero scale
    // below it in the chunk, or the carry from the chunks before.
    float carry = first != 0.0f ? first : 1.0f;
    for (int g0 = 0; g0 < grows; g0 += 32) {
        const int g = g0 + lane;
        const float v = flag ? 0.0f : scale(g);
        const unsigned nz = __ballot_sync(0xffffffffu, v != 0.0f);
        const unsigned below = nz & ((1u << lane) - 1u);
        const float prev_in = __shfl_sync(0xffffffffu, v, below ? 31 - __clz(below) : 0);
        const float prev = below ? prev_in : carry;
        const float r = g > 0 && v != 0.0f ? prev / v : 1.0f;
        // (in each 16 channels, 2 q + {0, 1, 8, 9} at 4 q + {0, 1, 2, 3}: the
        // four ratios a GEMM lane multiplies by are one 16-byte load)
        const int c16 = n % 16, pn = n - c16 + 4 * (c16 % 8 / 2) + 2 * (c16 / 8) + c16 % 2;
        if (g < grows) ratio[(size_t)g * rows_ld + pn] = r;
        const float top = __shfl_sync(0xffffffffu, v, nz ? 31 - __clz(nz) : 0);
        if (nz) carry = top;
    }
    if (lane == 0) {
        last[n] = !real || flag ? 0.0f : carry;
        if (real && flag) list[atomicAdd(count, 1u)] = n;
    }
}

// The flagged channels' sums (rescale_plan): out[i, n0 + list[c]] += global x
// sum_g s_g (sum over group g of x q), f32, in the format's order (the GEMM
// left exact zeros there), rounded once.  Grid-stride over (c, i).
__global__ void __launch_bounds__(256) rescale_fixup(const Params p, int tile0, const uint16_t *codes, long long ldw,
                                                     const unsigned *count, const int *list, long long n0) {
    const long long items = (long long)*count * p.m;
    const __half *x = static_cast<const __half *>(p.x);
    for (long long it = (long long)blockIdx.x * blockDim.x + threadIdx.x; it < items;
         it += (long long)gridDim.x * blockDim.x) {
        const int c = (int)(it / p.m), i = (int)(it % p.m), n = list[c];
        const unsigned char *sc = p.scales + (size_t)(tile0 + n / 16) * p.scale_tile_bytes;
        const size_t e = 2 * (size_t)(n % 16 % 8) + (size_t)(n % 16 / 8);
        const __half *q = reinterpret_cast<const __half *>(codes) + (size_t)n * ldw;
        float acc = 0.0f;
        for (int g = 0; g < p.groups; g++) {
            const int k0 = g << p.group_shift, k1 = min(p.k, (g + 1) << p.group_shift);
            float part = 0.0f;
            for (int k = k0; k < k1; k++) part = fmaf(__half2float(x[(size_t)i * p.ldx + k]), __half2float(q[k]), part);
            acc += part * scale_entry(sc, p.scale_kind, (size_t)g * 16 + e);
        }
        const float v = acc * p.global;
        const size_t o = (size_t)i * p.ldo + (size_t)(n0 + n);
        if (p.out_dtype == TOPS_DT_F32) static_cast<float *>(p.out)[o] += v;
        else if (p.out_dtype == TOPS_DT_F16) {
            __half *h = static_cast<__half *>(p.out) + o;
            *h = __float2half_rn(__half2float(*h) + v);
        } else {
            __nv_bfloat16 *b = static_cast<__nv_bfloat16 *>(p.out) + o;
            *b = __float2bfloat16_rn(__bfloat162float(*b) + v);
        }
    }
}

} // namespace
} // namespace tops_cu

extern "C" int tops__cu_rescaled_gemm(const tops__cu_matmul_args *a, const char **what) {
    if ((a->code != TOPS__CU_CODE_U4 && a->code != TOPS__CU_CODE_I8) || !a->has_scales || a->groups < 2 ||
        a->x_bf16 || !tops__cu_rescaled_group_ok(a->group))
        return (int)cudaErrorNotSupported;
    Params p;
    if (const int r = plan_begin(a, p, what)) return r;
    cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
    // Ratio rows: every group the GEMM's K stages can start (k_pad / G,
    // rounded up), plus the one its last prefetch reads.
    const long long grows = (a->k_pad + a->group - 1) / a->group + 2;
    const long long row_bytes = a->k_pad * 2 + (grows + 1) * 4 + 8;
    const long long slice = workspace_slice(row_bytes, 256, a->n_pad);
    const long long slice_ld = (slice + 255) / 256 * 256;
    const size_t codes_bytes = (size_t)(slice * a->k_pad * 2 + 255) / 256 * 256,
                 plane_bytes = (size_t)((grows + 1) * slice_ld * 4);
    unsigned char *ws = nullptr;
    cudaError_t err = workspace_alloc(reinterpret_cast<void **>(&ws), codes_bytes + plane_bytes + 256 + (size_t)slice_ld * 4,
                                      stream, "cudaMallocAsync of the f16 codes", what);
    if (err != cudaSuccess) return (int)err;
    uint16_t *codes = reinterpret_cast<uint16_t *>(ws);
    float *ratio = reinterpret_cast<float *>(ws + codes_bytes), *last = ratio + grows * slice_ld;
    unsigned *count = reinterpret_cast<unsigned *>(ws + codes_bytes + plane_bytes);
    int *list = reinterpret_cast<int *>(ws + codes_bytes + plane_bytes + 256);
    for (long long n0 = 0; n0 < a->n && err == cudaSuccess; n0 += slice) {
        const long long rows = a->n - n0 < slice ? a->n - n0 : slice;
        const int tiles = (int)((rows + 15) / 16), tile0 = (int)(n0 / 16);
        const int rows_ld = (int)((rows + 255) / 256 * 256);
        const long long threads = (long long)tiles * p.chunks * 32;
        const unsigned blocks = (unsigned)((threads + 255) / 256);
        if (a->code == TOPS__CU_CODE_U4)
            codes_f16_kernel<TOPS__CU_CODE_U4><<<blocks, 256, 0, stream>>>(p, tile0, tiles, a->k_pad, codes, count);
        else codes_f16_kernel<TOPS__CU_CODE_I8><<<blocks, 256, 0, stream>>>(p, tile0, tiles, a->k_pad, codes, count);
        rescale_plan<<<(unsigned)((rows_ld + 7) / 8), 256, 0, stream>>>(p, tile0, (int)rows, rows_ld, (int)grows,
                                                                            ratio, last, count, list);
        err = cudaGetLastError();
        if (err != cudaSuccess) {
            *what = "the code conversion launches";
            break;
        }
        const tops__cu_matmul_args s = channel_slice(a, n0, rows);
        const tops__cu_fp8_args h = {&s, codes, last, 0};
        err = (cudaError_t)tops__cu_h16_rescaled_launch(&h, ratio, rows_ld, (int)grows, a->group, what);
        if (err != cudaSuccess) break;
        rescale_fixup<<<32, 256, 0, stream>>>(p, tile0, codes, a->k_pad, count, list, n0);
        err = cudaGetLastError();
        if (err != cudaSuccess) *what = "the flagged-channel pass launch";
    }
    err = workspace_free(ws, stream, err, "cudaFreeAsync of the f16 codes", what);
    if (err == cudaSuccess)
        set_last_kernel(a->mults ? "codes times their sub-block multipliers converted once to f16 [n, k], then the f16 "
                                   "TMA GEMM with rescaled super-block groups"
                                 : "codes converted once to f16 [n, k], then the f16 TMA GEMM with rescaled groups");
    return (int)err;
}
