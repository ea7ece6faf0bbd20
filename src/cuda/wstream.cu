// Weight-streaming matmul for small M on tensor cores (mma.sync m16n8k16,
// f32 accumulation).  The weights play the mma's A operand (16 output
// channels per tile) and the activations its B operand (8 tokens per tile),
// so M = 1 wastes 7/8 of an n8 tile rather than 15/16 of an m16 tile.
//
// Each warp streams NT tiles of 16 weight rows over one K range (split-K
// when N alone cannot occupy the GPU): one 16-byte load per lane and tile
// feeds a whole chunk of K (64 elements for 4-bit codes), two chunks in
// flight.  Codes are decoded to f16/bf16 in registers and multiplied without
// their scales; each scale group's partial sum is scaled in f32 (FORMATS.md
// section 2: exact block products times the scale, accumulated in f32).
#include "cuda/cuda_internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdlib.h>

namespace {

constexpr int kWarps = 4; // warps per block; they share a K range (L1 reuse of activations)

struct Params {
    const uint4 *w;
    const unsigned char *scales;
    int scale_kind, has_scales;
    int group;
    int groups;
    int chunks, chunks_per_split, splits, passes;
    int ntiles;
    const void *x;
    long long ldx;
    int x_vec; // activation rows are 8-byte aligned: vector loads allowed
    int m, n, k;
    float global;
    void *out;
    long long ldo;
    int out_dtype, accumulate;
    float *ws; // split partials [splits][m][n]
};

__device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d; // (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

__device__ __forceinline__ uint4 load_stream(const uint4 *p) {
    uint4 v; // read once: keep it out of L1, which holds the activations
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

template <bool BF16>
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    if constexpr (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t *>(&h); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<__half2 *>(&u); }
__device__ __forceinline__ uint32_t bf2_bits(__nv_bfloat162 h) { return *reinterpret_cast<uint32_t *>(&h); }
__device__ __forceinline__ __nv_bfloat162 bits_bf2(uint32_t u) { return *reinterpret_cast<__nv_bfloat162 *>(&u); }

__device__ __forceinline__ uint32_t f16x2_to_bf16x2(uint32_t h) {
    float2 f = __half22float2(bits_h2(h)); // exact: the codes need few bits
    return bf2_bits(__floats2bfloat162_rn(f.x, f.y));
}

// e2m1 nibbles at bits [s, s+4) and [s+16, s+20) -> f16x2 equal to the
// value times 2^-14 (exponent and mantissa bits moved into place; the
// epilogue multiplies 2^14 back).
template <int S>
__device__ __forceinline__ uint32_t e2m1_pair(uint32_t q) {
    uint32_t mag = S <= 9 ? (q << (9 - S)) : (q >> (S - 9));
    uint32_t sgn = S <= 12 ? (q << (12 - S)) : (q >> (S - 12));
    return (mag & 0x0E000E00u) | (sgn & 0x80008000u);
}

// e4m3 bytes -> f16x2.  sm_89+ converts natively (exact, NaN kept); older
// parts move the bits (value times 2^-8, restored in the epilogue).
__device__ __forceinline__ void e4m3x4_to_f16x2(uint32_t w, uint32_t &lo, uint32_t &hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm("{ .reg .b16 l, h; mov.b32 {l, h}, %2; cvt.rn.f16x2.e4m3x2 %0, l; cvt.rn.f16x2.e4m3x2 %1, h; }"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
#else
    uint32_t t0 = __byte_perm(w, 0, 0x1404); // bytes 0, 1 into the high byte of each half
    uint32_t t1 = __byte_perm(w, 0, 0x3424);
    lo = (t0 & 0x80008000u) | ((t0 >> 1) & 0x3F803F80u);
    hi = (t1 & 0x80008000u) | ((t1 >> 1) & 0x3F803F80u);
#endif
}

// Product of every decoded value and 2^x, put back in the epilogue.
template <int CODE>
__device__ __forceinline__ float decode_factor() {
    if constexpr (CODE == TOPS__CU_CODE_E2M1) return 16384.0f;
#if !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890)
    if constexpr (CODE == TOPS__CU_CODE_E4M3) return 256.0f;
#endif
    return 1.0f;
}

// A fragment (4 registers of 2 halves) of k16 step j from a lane's 16 bytes;
// the bit order is pack.c's frag_bit().
template <int CODE, bool BF16>
__device__ __forceinline__ void decode_step(const uint4 &w, int j, uint32_t a[4]) {
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
    if constexpr (CODE == TOPS__CU_CODE_U4) {
        uint32_t q = words[j];
        if constexpr (BF16) {
            const __nv_bfloat162 bias = bits_bf2(0x43084308u); // 136 = 128 + 8
#pragma unroll
            for (int r = 0; r < 4; r++)
                a[r] = bf2_bits(__hsub2(bits_bf2(lop3_and_or(q >> (4 * r), 0x000F000Fu, 0x43004300u)), bias));
        } else {
            const __half2 sub = bits_h2(0x64086408u), mul = bits_h2(0x2C002C00u), add = bits_h2(0xD480D480u);
            uint32_t q2 = q >> 8;
            a[0] = h2_bits(__hsub2(bits_h2(lop3_and_or(q, 0x000F000Fu, 0x64006400u)), sub));
            a[1] = h2_bits(__hfma2(bits_h2(lop3_and_or(q, 0x00F000F0u, 0x64006400u)), mul, add));
            a[2] = h2_bits(__hsub2(bits_h2(lop3_and_or(q2, 0x000F000Fu, 0x64006400u)), sub));
            a[3] = h2_bits(__hfma2(bits_h2(lop3_and_or(q2, 0x00F000F0u, 0x64006400u)), mul, add));
        }
    } else if constexpr (CODE == TOPS__CU_CODE_E2M1) {
        uint32_t q = words[j];
        a[0] = e2m1_pair<0>(q);
        a[1] = e2m1_pair<4>(q);
        a[2] = e2m1_pair<8>(q);
        a[3] = e2m1_pair<12>(q);
        if constexpr (BF16)
#pragma unroll
            for (int r = 0; r < 4; r++) a[r] = f16x2_to_bf16x2(a[r]);
    } else if constexpr (CODE == TOPS__CU_CODE_I8) {
        uint32_t w0 = words[2 * j], w1 = words[2 * j + 1];
        if constexpr (BF16) {
            const uint32_t ws[2] = {w0, w1};
#pragma unroll
            for (int r = 0; r < 4; r++) {
                uint32_t v = ws[r >> 1] >> (16 * (r & 1));
                a[r] = bf2_bits(__floats2bfloat162_rn((float)((int)(v & 0xFF) - 128),
                                                       (float)((int)((v >> 8) & 0xFF) - 128)));
            }
        } else {
            const __half2 sub = bits_h2(0x64806480u); // 1152 = 1024 + 128
            a[0] = h2_bits(__hsub2(bits_h2(__byte_perm(w0, 0x64646464u, 0x4140)), sub));
            a[1] = h2_bits(__hsub2(bits_h2(__byte_perm(w0, 0x64646464u, 0x4342)), sub));
            a[2] = h2_bits(__hsub2(bits_h2(__byte_perm(w1, 0x64646464u, 0x4140)), sub));
            a[3] = h2_bits(__hsub2(bits_h2(__byte_perm(w1, 0x64646464u, 0x4342)), sub));
        }
    } else if constexpr (CODE == TOPS__CU_CODE_E4M3) {
        e4m3x4_to_f16x2(words[2 * j], a[0], a[1]);
        e4m3x4_to_f16x2(words[2 * j + 1], a[2], a[3]);
        if constexpr (BF16)
#pragma unroll
            for (int r = 0; r < 4; r++) a[r] = f16x2_to_bf16x2(a[r]);
    } else { // plain 16-bit weights of the activations' type
        a[0] = w.x;
        a[1] = w.y;
        a[2] = w.z;
        a[3] = w.w;
    }
}

__device__ __forceinline__ float e8m0_to_f32(uint32_t e) {
    if (e == 0xFFu) return __int_as_float(0x7FC00000);
    return __int_as_float(e ? (int)(e << 23) : 0x00400000); // 2^(e - 127); e = 0 is subnormal
}

__device__ __forceinline__ float ue4m3_to_f32(uint32_t b) {
    b &= 0x7Fu; // the sign is ignored (FORMATS.md)
    if (b == 0x7Fu) return __int_as_float(0x7FC00000);
    uint32_t e = b >> 3, m = b & 7u;
    return e ? __int_as_float((int)(((e + 120u) << 23) | (m << 20))) : (float)m * 0.001953125f; // m * 2^-9
}

// The scales of rows g and g + 8 of a tile for one group.
__device__ __forceinline__ float2 load_scales(const Params &p, int tile, int group, int gid) {
    size_t idx = ((size_t)tile * (size_t)p.groups + (size_t)group) * 16 + 2 * (size_t)gid;
    switch (p.scale_kind) {
    case TOPS__CU_SCALE_F32: return __ldg(reinterpret_cast<const float2 *>(p.scales) + idx / 2);
    case TOPS__CU_SCALE_F16: return __half22float2(__ldg(reinterpret_cast<const __half2 *>(p.scales) + idx / 2));
    case TOPS__CU_SCALE_E8M0: {
        uint32_t v = __ldg(reinterpret_cast<const unsigned short *>(p.scales) + idx / 2);
        return make_float2(e8m0_to_f32(v & 0xFF), e8m0_to_f32(v >> 8));
    }
    default: {
        uint32_t v = __ldg(reinterpret_cast<const unsigned short *>(p.scales) + idx / 2);
        return make_float2(ue4m3_to_f32(v & 0xFF), ue4m3_to_f32(v >> 8));
    }
    }
}

// Four activations of token m at k .. k + 3 as two 16-bit pairs (B fragment).
__device__ __forceinline__ uint2 load_x4(const Params &p, int m, int k) {
    if (m >= p.m) return make_uint2(0, 0);
    const unsigned short *row = reinterpret_cast<const unsigned short *>(p.x) + (long long)m * p.ldx;
    if (p.x_vec && k + 3 < p.k) return __ldg(reinterpret_cast<const uint2 *>(row + k));
    unsigned short v[4];
#pragma unroll
    for (int i = 0; i < 4; i++) v[i] = k + i < p.k ? __ldg(row + k + i) : (unsigned short)0;
    return make_uint2(v[0] | ((uint32_t)v[1] << 16), v[2] | ((uint32_t)v[3] << 16));
}

__device__ __forceinline__ void store_out(const Params &p, int m, int n, float v) {
    long long i = (long long)m * p.ldo + n;
    if (p.out_dtype == TOPS_DT_F32) {
        float *o = reinterpret_cast<float *>(p.out) + i;
        *o = p.accumulate ? *o + v : v;
    } else if (p.out_dtype == TOPS_DT_F16) {
        __half *o = reinterpret_cast<__half *>(p.out) + i;
        *o = __float2half_rn(p.accumulate ? __half2float(*o) + v : v);
    } else {
        __nv_bfloat16 *o = reinterpret_cast<__nv_bfloat16 *>(p.out) + i;
        *o = __float2bfloat16_rn(p.accumulate ? __bfloat162float(*o) + v : v);
    }
}

template <int CODE, bool BF16, int MT>
__global__ void __launch_bounds__(kWarps * 32) wstream_kernel(const Params p) {
    constexpr int NT = MT >= 4 ? 2 : 4; // weight tiles per warp: activation reuse vs registers
    constexpr int KC = CODE <= TOPS__CU_CODE_E2M1 ? 64 : CODE <= TOPS__CU_CODE_E4M3 ? 32 : 16;
    constexpr int STEPS = KC / 16;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gid = lane >> 2, tig = lane & 3;
    const int pass = blockIdx.x % p.passes;
    const int tile0 = ((blockIdx.x / p.passes) * kWarps + warp) * NT;
    if (tile0 >= p.ntiles) return; // no block-wide barriers below
    const int split = blockIdx.y;
    const int c_begin = split * p.chunks_per_split;
    const int c_end = min(c_begin + p.chunks_per_split, p.chunks);
    const int mbase = pass * MT * 8;

    float acc[NT][MT][4], part[NT][MT][4];
#pragma unroll
    for (int a = 0; a < NT; a++)
#pragma unroll
        for (int b = 0; b < MT; b++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[a][b][c] = part[a][b][c] = 0.0f;

    const uint4 *wt = p.w + (size_t)tile0 * p.chunks * 32 + lane;
    const size_t tile_stride = (size_t)p.chunks * 32;
    uint4 buf[2][NT];
#pragma unroll
    for (int s = 0; s < 2; s++)
        if (c_begin + s < c_end)
#pragma unroll
            for (int t = 0; t < NT; t++) buf[s][t] = load_stream(wt + t * tile_stride + (size_t)(c_begin + s) * 32);

    for (int c = c_begin; c < c_end; c += 2) {
#pragma unroll
        for (int s = 0; s < 2; s++) {
            const int cc = c + s;
            if (cc >= c_end) break;
            uint4 cur[NT];
#pragma unroll
            for (int t = 0; t < NT; t++) cur[t] = buf[s][t];
            if (cc + 2 < c_end)
#pragma unroll
                for (int t = 0; t < NT; t++) buf[s][t] = load_stream(wt + t * tile_stride + (size_t)(cc + 2) * 32);
            const int kbase = cc * KC;
            uint2 xb[MT][STEPS];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int j = 0; j < STEPS; j++) xb[mt][j] = load_x4(p, mbase + mt * 8 + gid, kbase + 16 * j + 4 * tig);
#pragma unroll
            for (int j = 0; j < STEPS; j++) {
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    uint32_t a[4];
                    decode_step<CODE, BF16>(cur[t], j, a);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) mma16816<BF16>(part[t][mt], a, xb[mt][j].x, xb[mt][j].y);
                }
                const int kend = kbase + 16 * (j + 1);
                if (kend % p.group == 0 || (cc == c_end - 1 && j == STEPS - 1)) {
                    const int grp = (kend - 1) / p.group;
#pragma unroll
                    for (int t = 0; t < NT; t++) {
                        float2 s2 = p.has_scales ? load_scales(p, tile0 + t, grp, gid) : make_float2(1.0f, 1.0f);
#pragma unroll
                        for (int mt = 0; mt < MT; mt++) {
                            acc[t][mt][0] = fmaf(part[t][mt][0], s2.x, acc[t][mt][0]);
                            acc[t][mt][1] = fmaf(part[t][mt][1], s2.x, acc[t][mt][1]);
                            acc[t][mt][2] = fmaf(part[t][mt][2], s2.y, acc[t][mt][2]);
                            acc[t][mt][3] = fmaf(part[t][mt][3], s2.y, acc[t][mt][3]);
#pragma unroll
                            for (int i = 0; i < 4; i++) part[t][mt][i] = 0.0f;
                        }
                    }
                }
            }
        }
    }

    const float g = p.global * decode_factor<CODE>();
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int n = (tile0 + t) * 16 + gid + 8 * (i >> 1);
                const int m = mbase + mt * 8 + 2 * tig + (i & 1);
                if (n >= p.n || m >= p.m) continue;
                const float v = acc[t][mt][i] * g;
                if (p.splits == 1) store_out(p, m, n, v);
                else p.ws[((size_t)split * p.m + m) * p.n + n] = v;
            }
}

// Sums the split partials in split order (the same bits for any launch) and
// stores with the op's mode.
__global__ void splitk_reduce_kernel(const Params p) {
    const long long total = (long long)p.m * p.n;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < p.splits; s++) v += p.ws[(size_t)s * total + i];
        store_out(p, (int)(i / p.n), (int)(i % p.n), v);
    }
}

typedef void (*kernel_fn)(const Params);

// One kernel per (code family, activation type, token tiles): 5 families
// (the plain one takes the activations' type) x 2 types x 3 widths = 30.
template <int CODE, bool BF16>
kernel_fn pick_width(int mt) {
    return mt == 1 ? wstream_kernel<CODE, BF16, 1> : mt == 2 ? wstream_kernel<CODE, BF16, 2> : wstream_kernel<CODE, BF16, 4>;
}

template <bool BF16>
kernel_fn pick_code(int code, int mt) {
    switch (code) {
    case TOPS__CU_CODE_U4: return pick_width<TOPS__CU_CODE_U4, BF16>(mt);
    case TOPS__CU_CODE_E2M1: return pick_width<TOPS__CU_CODE_E2M1, BF16>(mt);
    case TOPS__CU_CODE_I8: return pick_width<TOPS__CU_CODE_I8, BF16>(mt);
    case TOPS__CU_CODE_E4M3: return pick_width<TOPS__CU_CODE_E4M3, BF16>(mt);
    default: return pick_width<BF16 ? TOPS__CU_CODE_BF16 : TOPS__CU_CODE_F16, BF16>(mt);
    }
}

} // namespace

// Warps per SM the split-K choice aims for; TOPS_CUDA_WARPS_PER_SM (1..64)
// overrides the default of 16 for tuning runs.
static long long warps_per_sm() {
    const char *e = getenv("TOPS_CUDA_WARPS_PER_SM");
    long long v = e ? atoll(e) : 0;
    return v >= 1 && v <= 64 ? v : 16;
}

extern "C" int tops__cu_matmul_launch(const tops__cu_matmul_args *a, const char **what) {
    cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
    Params p;
    p.w = static_cast<const uint4 *>(a->weights);
    p.scales = static_cast<const unsigned char *>(a->scales);
    p.scale_kind = a->scale_kind;
    p.has_scales = a->has_scales;
    p.group = a->group;
    p.groups = (int)a->groups;
    p.ntiles = (int)(a->n_pad / 16);
    p.chunks = (int)(a->k_pad / tops__cu_chunk_k(a->code));
    p.x = a->x;
    p.ldx = a->ldx;
    p.x_vec = (a->ldx % 4 == 0) && ((uintptr_t)a->x % 8 == 0);
    p.m = (int)a->m;
    p.n = (int)a->n;
    p.k = (int)a->k;
    p.global = a->global_scale;
    p.out = a->out;
    p.ldo = a->ldo;
    p.out_dtype = a->out_dtype;
    p.accumulate = a->accumulate;
    p.ws = nullptr;

    const int mt = a->m <= 8 ? 1 : a->m <= 16 ? 2 : 4;
    const int nt = mt >= 4 ? 2 : 4;
    p.passes = (int)((a->m + mt * 8 - 1) / (mt * 8));
    const int warp_tasks = (p.ntiles + nt - 1) / nt;
    const long long blocks_x = (long long)((warp_tasks + kWarps - 1) / kWarps) * p.passes;
    // Split K until about 16 warps per SM stream weights (enough loads in
    // flight to cover HBM latency), keeping at least 4 chunks per split.
    const long long want_warps = warps_per_sm() * (a->sm_count > 0 ? a->sm_count : 132);
    long long splits = (want_warps + (long long)warp_tasks * p.passes - 1) / ((long long)warp_tasks * p.passes);
    long long max_splits = p.chunks / 4 > 1 ? p.chunks / 4 : 1;
    if (splits > max_splits) splits = max_splits;
    if (splits < 1) splits = 1;
    p.chunks_per_split = (int)((p.chunks + splits - 1) / splits);
    p.splits = (p.chunks + p.chunks_per_split - 1) / p.chunks_per_split;
    if (blocks_x > 0x7FFFFFFFLL || p.splits > 65535) {
        *what = "the problem is too large for one launch";
        return (int)cudaErrorInvalidConfiguration;
    }

    cudaError_t err = cudaSuccess;
    if (p.splits > 1) {
        size_t bytes = (size_t)p.splits * (size_t)p.m * (size_t)p.n * sizeof(float);
        err = cudaMallocAsync(reinterpret_cast<void **>(&p.ws), bytes, stream);
        if (err == cudaErrorNotSupported) { // no memory pools here: one split needs no workspace
            (void)cudaGetLastError();
            p.ws = nullptr;
            p.splits = 1;
            p.chunks_per_split = p.chunks;
        } else if (err != cudaSuccess) {
            *what = "cudaMallocAsync of the split-K workspace";
            return (int)err;
        }
    }
    kernel_fn fn = a->x_bf16 ? pick_code<true>(a->code, mt) : pick_code<false>(a->code, mt);
    fn<<<dim3((unsigned)blocks_x, (unsigned)p.splits), kWarps * 32, 0, stream>>>(p);
    err = cudaGetLastError();
    if (err != cudaSuccess) *what = "the weight-streaming kernel launch";
    if (err == cudaSuccess && p.splits > 1) {
        long long total = (long long)p.m * p.n;
        int blocks = (int)((total + 255) / 256);
        if (blocks > 4096) blocks = 4096;
        splitk_reduce_kernel<<<blocks, 256, 0, stream>>>(p);
        err = cudaGetLastError();
        if (err != cudaSuccess) *what = "the split-K reduction launch";
    }
    if (p.ws) {
        cudaError_t e2 = cudaFreeAsync(p.ws, stream);
        if (err == cudaSuccess && e2 != cudaSuccess) {
            err = e2;
            *what = "cudaFreeAsync of the split-K workspace";
        }
    }
    return (int)err;
}
