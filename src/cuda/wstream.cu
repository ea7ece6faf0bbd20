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
    float *ws;          // split partials [splits][m][n]
    unsigned *counters; // per blockIdx.x: blocks of its column done (0 between launches)
};

__device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d; // (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
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

// The raw scale bits of rows g and g + 8 of a tile for one group (loaded
// early, decoded when the group's partial sums are folded in).
__device__ __forceinline__ uint2 load_scales_raw(const Params &p, int tile, int group, int gid) {
    const size_t idx = ((size_t)tile * (size_t)p.groups + (size_t)group) * 16 + 2 * (size_t)gid;
    switch (p.scale_kind) {
    case TOPS__CU_SCALE_F32: return __ldg(reinterpret_cast<const uint2 *>(p.scales) + idx / 2);
    case TOPS__CU_SCALE_F16: return make_uint2(__ldg(reinterpret_cast<const unsigned *>(p.scales) + idx / 2), 0);
    default: return make_uint2(__ldg(reinterpret_cast<const unsigned short *>(p.scales) + idx / 2), 0);
    }
}

__device__ __forceinline__ float2 decode_scales(int kind, uint2 r) {
    switch (kind) {
    case TOPS__CU_SCALE_F32: return make_float2(__uint_as_float(r.x), __uint_as_float(r.y));
    case TOPS__CU_SCALE_F16: return __half22float2(bits_h2(r.x));
    case TOPS__CU_SCALE_E8M0: return make_float2(e8m0_to_f32(r.x & 0xFF), e8m0_to_f32((r.x >> 8) & 0xFF));
    default: return make_float2(ue4m3_to_f32(r.x & 0xFF), ue4m3_to_f32((r.x >> 8) & 0xFF));
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

// Weight tiles per warp (activation reuse against registers) and cp.async
// stages per warp (bytes in flight against shared memory: 40 or 32 KB per
// block, so four blocks fit on an SM).
// (TOPS_CU_NT_SMALL / TOPS_CU_STAGES_SMALL pick the shape for M <= 16 in
// tuning builds.)
#ifndef TOPS_CU_NT_SMALL
#define TOPS_CU_NT_SMALL 4
#endif
#ifndef TOPS_CU_STAGES_SMALL
#define TOPS_CU_STAGES_SMALL 5
#endif
template <int MT>
struct Shape {
    static constexpr int NT = MT >= 4 ? 2 : TOPS_CU_NT_SMALL;
    static constexpr int STAGES = MT >= 4 ? 8 : TOPS_CU_STAGES_SMALL;
};

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

template <int CODE, bool BF16, int MT>
__global__ void __launch_bounds__(kWarps * 32) wstream_kernel(const Params p) {
    constexpr int NT = Shape<MT>::NT, STAGES = Shape<MT>::STAGES;
    constexpr int KC = CODE <= TOPS__CU_CODE_E2M1 ? 64 : CODE <= TOPS__CU_CODE_E4M3 ? 32 : 16;
    constexpr int STEPS = KC / 16;
    // Each lane copies exactly the 16 bytes it later reads, so the ring
    // needs no barrier: cp.async.wait_group orders a lane's own copies.
    __shared__ uint4 ring[kWarps][STAGES][NT][32];
    __shared__ int last_block;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gid = lane >> 2, tig = lane & 3;
    const int pass = blockIdx.x % p.passes;
    const int tile0 = ((blockIdx.x / p.passes) * kWarps + warp) * NT;
    const bool active = tile0 < p.ntiles; // no early return: the split-K fix-up has barriers
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

    if (active) {
        const uint4 *wt = p.w + (size_t)tile0 * p.chunks * 32 + lane;
        const size_t tile_stride = (size_t)p.chunks * 32;
        uint4(*my)[NT][32] = ring[warp];
        // Prologue: STAGES - 1 chunks in flight (empty groups keep the count).
#pragma unroll
        for (int s = 0; s < STAGES - 1; s++) {
            if (c_begin + s < c_end)
#pragma unroll
                for (int t = 0; t < NT; t++)
                    cp_async16(&my[s][t][lane], wt + t * tile_stride + (size_t)(c_begin + s) * 32);
            cp_async_commit();
        }
        for (int cc = c_begin; cc < c_end; cc++) {
            cp_async_wait<STAGES - 2>(); // chunk cc has landed
            const int slot = (cc - c_begin) % STAGES;
            uint4 cur[NT];
#pragma unroll
            for (int t = 0; t < NT; t++) cur[t] = my[slot][t][lane];
            // Refill the slot that was read one iteration ago.
            const int next = cc + STAGES - 1, nslot = (slot + STAGES - 1) % STAGES;
            if (next < c_end)
#pragma unroll
                for (int t = 0; t < NT; t++) cp_async16(&my[nslot][t][lane], wt + t * tile_stride + (size_t)next * 32);
            cp_async_commit();

            const int kbase = cc * KC;
            // Scales of the groups this chunk closes, loaded before the
            // decoding so their latency hides behind it: group gfirst + q
            // (q < KC / group; one group when it spans the chunk).
            const int gfirst = kbase / p.group;
            const int ngroups = p.group < KC ? KC / p.group : 1;
            uint2 sraw[NT][STEPS];
#pragma unroll
            for (int t = 0; t < NT; t++)
#pragma unroll
                for (int q = 0; q < STEPS; q++)
                    sraw[t][q] = p.has_scales && q < ngroups ? load_scales_raw(p, tile0 + t, gfirst + q, gid)
                                                             : make_uint2(0x3F800000u, 0x3F800000u);
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
                    const int q = (kend - 1) / p.group - gfirst;
#pragma unroll
                    for (int t = 0; t < NT; t++) {
                        uint2 r = sraw[t][0];
#pragma unroll
                        for (int qq = 1; qq < STEPS; qq++)
                            if (q == qq) r = sraw[t][qq]; // constant indices: the array stays in registers
                        const float2 s2 = p.has_scales ? decode_scales(p.scale_kind, r) : make_float2(1.0f, 1.0f);
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
        cp_async_wait<0>();
    }

    const float g = p.global * decode_factor<CODE>();
    const size_t plane = (size_t)p.m * (size_t)p.n;
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int n = (tile0 + t) * 16 + gid + 8 * (i >> 1);
                const int m = mbase + mt * 8 + 2 * tig + (i & 1);
                if (!active || n >= p.n || m >= p.m) continue;
                const float v = acc[t][mt][i] * g;
                if (p.splits == 1) store_out(p, m, n, v);
                else p.ws[(size_t)split * plane + (size_t)m * p.n + n] = v;
            }
    if (p.splits == 1) return; // uniform across the grid

    // Split-K fix-up: the last block of this column of splits sums the
    // partials in split order (the same bits on every run) and stores.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned prev = atomicAdd(&p.counters[blockIdx.x], 1u);
        last_block = prev == (unsigned)p.splits - 1;
    }
    __syncthreads();
    if (!last_block) return;
    __threadfence();
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int n = (tile0 + t) * 16 + gid + 8 * (i >> 1);
                const int m = mbase + mt * 8 + 2 * tig + (i & 1);
                if (!active || n >= p.n || m >= p.m) continue;
                const float *src = p.ws + (size_t)m * p.n + n;
                float v = 0.0f;
                for (int s2 = 0; s2 < p.splits; s2++) v += __ldcg(src + (size_t)s2 * plane);
                store_out(p, m, n, v);
            }
    if (threadIdx.x == 0) p.counters[blockIdx.x] = 0; // ready for the next launch
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

// Blocks of one kernel that fit on an SM at once (0 if the runtime will not say).
static int blocks_per_sm(kernel_fn fn) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, kWarps * 32, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" int tops__cu_matmul_plan(const tops__cu_matmul_args *a, tops__cu_plan *plan) {
    const int mt = a->m <= 8 ? 1 : a->m <= 16 ? 2 : 4;
    const int nt = mt >= 4 ? Shape<4>::NT : Shape<1>::NT;
    static_assert(Shape<1>::NT == Shape<2>::NT, "one shape for M <= 16");
    kernel_fn fn = a->x_bf16 ? pick_code<true>(a->code, mt) : pick_code<false>(a->code, mt);
    const long long ntiles = a->n_pad / 16, chunks = a->k_pad / tops__cu_chunk_k(a->code);
    const long long passes = (a->m + mt * 8 - 1) / (mt * 8);
    const long long warp_tasks = (ntiles + nt - 1) / nt;
    const long long blocks_x = (warp_tasks + kWarps - 1) / kWarps * passes;
    // Split K so that one full wave of resident blocks streams the weights
    // (a partial second wave would double the time), at least 2 chunks each.
    // Occupancy per (device, type, family, width), asked once.
    static int occupancy[16][2][TOPS__CU_CODE_COUNT][3];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) (void)cudaGetLastError();
    int *slot = dev >= 0 && dev < 16 ? &occupancy[dev][a->x_bf16 ? 1 : 0][a->code][mt == 1 ? 0 : mt == 2 ? 1 : 2] : nullptr;
    int per_sm = slot ? __atomic_load_n(slot, __ATOMIC_RELAXED) : 0;
    if (per_sm == 0) {
        per_sm = blocks_per_sm(fn);
        if (slot) __atomic_store_n(slot, per_sm, __ATOMIC_RELAXED);
    }
    const long long resident = (long long)(per_sm > 0 ? per_sm : 2) * (a->sm_count > 0 ? a->sm_count : 132);
    long long splits = resident / blocks_x;
    const long long max_splits = chunks / 2 > 1 ? chunks / 2 : 1;
    if (splits > max_splits) splits = max_splits;
    if (splits < 1) splits = 1;
    const long long cps = (chunks + splits - 1) / splits;
    splits = (chunks + cps - 1) / cps;
    plan->mt = mt;
    plan->passes = passes;
    plan->blocks_x = blocks_x;
    plan->splits = splits;
    plan->chunks_per_split = cps;
    plan->workspace_bytes =
        splits > 1 ? (size_t)TOPS__CU_COUNTERS_BYTES + (size_t)splits * (size_t)a->m * (size_t)a->n * sizeof(float) : 0;
    return blocks_x <= 0x7FFFFFFFLL && splits <= 65535 && (splits == 1 || blocks_x * 4 <= TOPS__CU_COUNTERS_BYTES);
}

extern "C" int tops__cu_matmul_launch(const tops__cu_matmul_args *a, const tops__cu_plan *plan, void *workspace,
                                      const char **what) {
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
    p.passes = (int)plan->passes;
    p.splits = (int)plan->splits;
    p.chunks_per_split = (int)plan->chunks_per_split;
    p.counters = static_cast<unsigned *>(workspace);
    p.ws = workspace ? reinterpret_cast<float *>(static_cast<char *>(workspace) + TOPS__CU_COUNTERS_BYTES) : nullptr;
    if (p.splits > 1 && !workspace) {
        *what = "the split-K launch (no workspace)";
        return (int)cudaErrorInvalidValue;
    }
    kernel_fn fn = a->x_bf16 ? pick_code<true>(a->code, plan->mt) : pick_code<false>(a->code, plan->mt);
    fn<<<dim3((unsigned)plan->blocks_x, (unsigned)plan->splits), kWarps * 32, 0, stream>>>(p);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) *what = "the weight-streaming kernel launch";
    return (int)err;
}
