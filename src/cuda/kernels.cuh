// Device code shared by the CUDA matmul kernels (wstream.cu, wbulk.cu): the
// launch parameters, the weight decoders, scale and activation loads, the
// per-chunk decode + mma step and the output store.  Included by .cu files only.
#ifndef TOPS_CUDA_KERNELS_CUH
#define TOPS_CUDA_KERNELS_CUH

#include "cuda/cuda_internal.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <type_traits>

namespace tops_cu {

struct Params {
    const uint4 *w;
    const unsigned char *scales;
    int scale_kind, has_scales;
    int group;
    int group_shift, group_mask; // group = 1 << group_shift (30 for one group per row)
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
    // bulk kernel (wbulk.cu) only
    int kw, mw;            // warps along K and along tokens (kw * mw = kGroupWarps)
    int scale_tile_bytes;  // one tile's scale entries (groups * 16 * entry bytes)
    int ring;              // ring stages (2..kStages; fewer when the scales need the room)
    int slot_bytes;        // one ring slot: kStageBytes of weights, then the stage's activations (xt)
    int xt;                // activations as TMA tiles in the ring slots (else from L2)
    int xrows;             // xt: activation rows in a slot, 8 per token tile (zeros past M)
    int xt3;               // xt: one 3-D tensor copy per stage (else one 2-D copy per 64 columns)
    int last_warp;         // the last warp done with a ring slot refills it (else a barrier per stage)
    int issue_any;         // the ring's first round: the first warp past stage i issues stage i + look (else thread 0)
    int sc_direct;         // scales decoded straight from global memory (else bulk-copied to shared first)
    int look;              // stages in flight ahead of the first one not yet landed (while ring slots are fresh)
    // wgmma kernel (wgmma_w.cu) only
    unsigned int *arrivals; // per output tile: K splits done (the last one reduces)
    float fold_pre, fold_post; // folded scales: w = decoded code x (scale x fold_pre); output x fold_post
    int fold_shfl;             // folded kernel: K order fixed by lane shuffles (1) or a stage permute (0)
    // factored sub-block scales (strict 4-bit pipeline, rescaled groups):
    // f16 multipliers, one per (row, 1 << mult_shift of K), the scale plane's order
    const unsigned char *mults;
    int mult_shift, mult_tile_bytes;
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
    // Separate C inputs and D outputs, not volatile: a zeroed accumulator
    // costs no moves and the compiler may schedule the mma freely.
    if constexpr (BF16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%11,%12,%13};"
            : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]),
              "f"(c[3]));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%11,%12,%13};"
            : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]),
              "f"(c[3]));
}

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t *>(&h); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<__half2 *>(&u); }
__device__ __forceinline__ uint32_t bf2_bits(__nv_bfloat162 h) { return *reinterpret_cast<uint32_t *>(&h); }
__device__ __forceinline__ __nv_bfloat162 bits_bf2(uint32_t u) { return *reinterpret_cast<__nv_bfloat162 *>(&u); }

__device__ __forceinline__ uint32_t f16x2_to_bf16x2(uint32_t h) {
    float2 f = __half22float2(bits_h2(h)); // exact: the codes need few bits
    return bf2_bits(__floats2bfloat162_rn(f.x, f.y));
}

// e2m1 codes of one k16 step (one 32-bit word q) -> the 4 f16x2 A registers,
// each value times 2^-14 (exponent and mantissa bits moved into place, the
// epilogue multiplies 2^14 back).  pack.c (e2m1_bit) splits each code into
// its 3 magnitude bits and its sign so that one shift of q puts register r's
// magnitudes at bits 9-11 / 25-27, and registers 0 and 2 find their signs
// at 15 / 31 of the same copy (one AND); 1 and 3 take theirs from another
// shift.  11 SASS instructions a step instead of 15 for plain nibbles; one
// copy for more registers cannot exist (no 3 disjoint translates of the bit
// pattern {0, 1, 2, 6} fit in 16 bits).  Byte b + 1 of each half holds
// registers 2, 3 as byte b holds 0, 1 (bits + 8), as for int4: the folded
// wgmma kernel's quad shuffle moves whole bytes (wgmma_w.cu).
__device__ __forceinline__ void e2m1_step(uint32_t q, uint32_t a[4]) {
    a[0] = (q << 8) & 0x8E008E00u;
    a[1] = ((q << 5) & 0x0E000E00u) | ((q << 15) & 0x80008000u);
    a[2] = q & 0x8E008E00u;
    a[3] = ((q >> 3) & 0x0E000E00u) | ((q << 7) & 0x80008000u);
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
// the bit order is pack.c's frag_bit() (e2m1: e2m1_bit()).
template <int CODE, bool BF16>
__device__ __forceinline__ void decode_step(const uint4 &w, int j, uint32_t a[4]) {
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#if defined(TOPS_CU_BULK_DIAG) && TOPS_CU_BULK_DIAG == 4
    if constexpr (CODE == TOPS__CU_CODE_U4 || CODE == TOPS__CU_CODE_E2M1) { // diagnosis: no decode (wrong results)
        a[0] = a[1] = a[2] = a[3] = words[j];
        return;
    }
#endif
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
        e2m1_step(words[j], a);
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

// Scale entry e of a plane in its packed encoding, as f32.
__device__ __forceinline__ float scale_entry(const unsigned char *s, int kind, size_t e) {
    switch (kind) {
    case TOPS__CU_SCALE_F32: return reinterpret_cast<const float *>(s)[e];
    case TOPS__CU_SCALE_F16: return __half2float(reinterpret_cast<const __half *>(s)[e]);
    case TOPS__CU_SCALE_E8M0: return e8m0_to_f32(s[e]);
    default: return ue4m3_to_f32(s[e]);
    }
}

// Entries e and e + 1 (e even: a row pair's, adjacent and aligned) in one
// load and one branch on the encoding.
__device__ __forceinline__ float2 scale_pair(const unsigned char *s, int kind, size_t e) {
    switch (kind) {
    case TOPS__CU_SCALE_F32: return reinterpret_cast<const float2 *>(s)[e / 2];
    case TOPS__CU_SCALE_F16: return __half22float2(reinterpret_cast<const __half2 *>(s)[e / 2]);
    default: {
        const uint32_t v = reinterpret_cast<const unsigned short *>(s)[e / 2];
        return kind == TOPS__CU_SCALE_E8M0 ? make_float2(e8m0_to_f32(v & 0xFFu), e8m0_to_f32(v >> 8))
                                           : make_float2(ue4m3_to_f32(v & 0xFFu), ue4m3_to_f32(v >> 8));
    }
    }
}

// The scales of rows g and g + 8 of one tile for one group.  `s` points at
// that tile's entries: in global memory in the packed encoding (read through
// the read-only path), or, F32_SMEM, already decoded to f32 in shared memory.
template <bool F32_SMEM>
__device__ __forceinline__ float2 load_scales(const unsigned char *s, int kind, int group, int gid) {
    const size_t idx = (size_t)group * 16 + 2 * (size_t)gid;
    if constexpr (F32_SMEM) return reinterpret_cast<const float2 *>(s)[idx / 2];
    switch (kind) {
    case TOPS__CU_SCALE_F32: return __ldg(reinterpret_cast<const float2 *>(s) + idx / 2);
    case TOPS__CU_SCALE_F16: return __half22float2(__ldg(reinterpret_cast<const __half2 *>(s) + idx / 2));
    default: {
        const uint32_t v = __ldg(reinterpret_cast<const unsigned short *>(s) + idx / 2);
        if (kind == TOPS__CU_SCALE_E8M0) return make_float2(e8m0_to_f32(v & 0xFF), e8m0_to_f32(v >> 8));
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

// Four f32 values to / from 4 consecutive 16-bit outputs (f16 or bf16).
template <typename T>
__device__ __forceinline__ float4 unpack4(uint2 a) {
    if constexpr (std::is_same<T, __half>::value) {
        const float2 lo = __half22float2(*reinterpret_cast<const __half2 *>(&a.x));
        const float2 hi = __half22float2(*reinterpret_cast<const __half2 *>(&a.y));
        return make_float4(lo.x, lo.y, hi.x, hi.y);
    } else {
        const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&a.x));
        const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&a.y));
        return make_float4(lo.x, lo.y, hi.x, hi.y);
    }
}
template <typename T>
__device__ __forceinline__ uint2 pack4(float4 v) {
    if constexpr (std::is_same<T, __half>::value) {
        const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
        return make_uint2(*reinterpret_cast<const uint32_t *>(&lo), *reinterpret_cast<const uint32_t *>(&hi));
    } else {
        const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
        return make_uint2(*reinterpret_cast<const uint32_t *>(&lo), *reinterpret_cast<const uint32_t *>(&hi));
    }
}
template <typename T>
__device__ __forceinline__ void store4_16(const Params &p, long long i, float4 v) {
    uint2 *o = reinterpret_cast<uint2 *>(reinterpret_cast<T *>(p.out) + i);
    if (p.accumulate) {
        const float4 a = unpack4<T>(*o);
        v.x += a.x, v.y += a.y, v.z += a.z, v.w += a.w;
    }
    *o = pack4<T>(v);
}

// Four consecutive outputs of row m from column n with the op's mode: one
// 16-byte (f32) or 8-byte (f16, bf16) access when vec (the caller checked
// that out, ldo and n align for it) and all four are inside the row; else
// element by element, columns from p.n on skipped.
__device__ __forceinline__ void store_out4(const Params &p, int m, int n, float4 v, bool vec) {
    if (!vec || n + 4 > p.n) {
        const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (n + j < p.n) store_out(p, m, n + j, e[j]);
        return;
    }
    const long long i = (long long)m * p.ldo + n;
    if (p.out_dtype == TOPS_DT_F32) {
        float4 *o = reinterpret_cast<float4 *>(reinterpret_cast<float *>(p.out) + i);
        if (p.accumulate) {
            const float4 a = *o;
            v.x += a.x, v.y += a.y, v.z += a.z, v.w += a.w;
        }
        *o = v;
    } else if (p.out_dtype == TOPS_DT_F16) {
        store4_16<__half>(p, i, v);
    } else {
        store4_16<__nv_bfloat16>(p, i, v);
    }
}

// R rows of 4 outputs each (row m0 + m_step r, columns n .. n + 3), the
// values already in registers: plain stores (the caller checked: no
// accumulate, vector-aligned, inside N), rows from p.m on skipped.  The
// dtype is resolved once for all rows, so the stores issue back to back
// in a few instructions each (store_out4 per row left one shared-memory
// load, a branch tree and a store in a chain per row, and unrolled over
// many rows its code no longer fit the instruction cache).
template <typename T, int R>
__device__ __forceinline__ void store_rows4_16(const Params &p, int m0, int m_step, int n, const float4 (&v)[R]) {
#pragma unroll
    for (int r = 0; r < R; r++)
        if (m0 + m_step * r < p.m)
            *reinterpret_cast<uint2 *>(reinterpret_cast<T *>(p.out) + (long long)(m0 + m_step * r) * p.ldo + n) =
                pack4<T>(v[r]);
}
template <int R>
__device__ __forceinline__ void store_rows4_plain(const Params &p, int m0, int m_step, int n, const float4 (&v)[R]) {
    if (p.out_dtype == TOPS_DT_F32) {
#pragma unroll
        for (int r = 0; r < R; r++)
            if (m0 + m_step * r < p.m)
                *reinterpret_cast<float4 *>(reinterpret_cast<float *>(p.out) + (long long)(m0 + m_step * r) * p.ldo +
                                            n) = v[r];
    } else if (p.out_dtype == TOPS_DT_F16) {
        store_rows4_16<__half>(p, m0, m_step, n, v);
    } else {
        store_rows4_16<__nv_bfloat16>(p, m0, m_step, n, v);
    }
}

// Whether store_out4 may use vector accesses: out and ldo keep every row's
// 4-column groups aligned to 4 elements.
__host__ __device__ inline bool out_vec4(const void *out, long long ldo, int out_dtype) {
    const unsigned esz = out_dtype == TOPS_DT_F32 ? 4u : 2u;
    return ldo % 4 == 0 && (uintptr_t)out % (4u * esz) == 0;
}

template <int CODE>
struct chunk_dims {
    static constexpr int KC = CODE <= TOPS__CU_CODE_E2M1 ? 64 : CODE <= TOPS__CU_CODE_E4M3 ? 32 : 16;
    static constexpr int STEPS = KC / 16; // k16 mma steps per chunk
};

// The B fragments of MT token tiles (from token m0) for one chunk of K.  A
// chunk inside K with 8-byte aligned rows (the usual case) takes one
// unchecked vector load per fragment; only ragged or unaligned ones take
// the element-wise path.
template <int CODE, int MT>
__device__ __forceinline__ void load_xb(const Params &p, int chunk, int m0, uint2 (&xb)[MT][chunk_dims<CODE>::STEPS]) {
    const int lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
    const int kbase = chunk * chunk_dims<CODE>::KC;
    if (p.x_vec && kbase + chunk_dims<CODE>::KC <= p.k) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int m = m0 + mt * 8 + gid;
            const uint2 *row = reinterpret_cast<const uint2 *>(reinterpret_cast<const unsigned short *>(p.x) +
                                                               (long long)min(m, p.m - 1) * p.ldx + kbase + 4 * tig);
#pragma unroll
            for (int j = 0; j < chunk_dims<CODE>::STEPS; j++) {
                const uint2 v = __ldg(row + 4 * j); // 16 elements = 4 uint2 per k16 step
                xb[mt][j] = m < p.m ? v : make_uint2(0, 0);
            }
        }
        return;
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < chunk_dims<CODE>::STEPS; j++)
            xb[mt][j] = load_x4(p, m0 + mt * 8 + gid, kbase + 16 * j + 4 * tig);
}

// acc += part * scale for MT m16n8 accumulator fragments: s2.x scales the
// lane's row gid (registers 0, 1), s2.y row gid + 8 (registers 2, 3).
template <int MT>
__device__ __forceinline__ void add_scaled_part(float (&acc)[MT][4], const float (&part)[MT][4], float2 s2) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        acc[mt][0] = fmaf(part[mt][0], s2.x, acc[mt][0]);
        acc[mt][1] = fmaf(part[mt][1], s2.x, acc[mt][1]);
        acc[mt][2] = fmaf(part[mt][2], s2.y, acc[mt][2]);
        acc[mt][3] = fmaf(part[mt][3], s2.y, acc[mt][3]);
    }
}

// One chunk of K for NT weight tiles (16-byte fragments in `cur`, the first
// `nt` valid) and MT token tiles (B fragments in `xb`): decode, mma into
// `part`, and at each scale-group end (and at the chunk's end when
// `flush_end`) fold part * scale into `acc`.  `sc` points at the first
// tile's scale entries, `sc_stride` bytes from one tile's to the next;
// F32_SMEM: see load_scales.
template <int CODE, bool BF16, int NT, int MT, bool F32_SMEM>
__device__ __forceinline__ void chunk_mma(const Params &p, const uint4 (&cur)[NT], int nt, int chunk,
                                          const uint2 (&xb)[MT][chunk_dims<CODE>::STEPS], bool flush_end,
                                          const unsigned char *sc, int sc_stride, float (&part)[NT][MT][4],
                                          float (&acc)[NT][MT][4]) {
    constexpr int STEPS = chunk_dims<CODE>::STEPS;
    const int gid = (threadIdx.x & 31) >> 2;
    const int kbase = chunk * chunk_dims<CODE>::KC;
#pragma unroll
    for (int j = 0; j < STEPS; j++) {
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= nt) break;
            uint32_t a[4];
            decode_step<CODE, BF16>(cur[t], j, a);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) mma16816<BF16>(part[t][mt], a, xb[mt][j].x, xb[mt][j].y);
        }
        const int kend = kbase + 16 * (j + 1);
        if ((kend & p.group_mask) == 0 || (flush_end && j == STEPS - 1)) {
            const int grp = (kend - 1) >> p.group_shift; // shifts: a division here cost ~20 instructions a step
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= nt) break;
                const float2 s2 = p.has_scales
                                      ? load_scales<F32_SMEM>(sc + (size_t)t * sc_stride, p.scale_kind, grp, gid)
                                      : make_float2(1.0f, 1.0f);
                add_scaled_part<MT>(acc[t], part[t], s2);
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int i = 0; i < 4; i++) part[t][mt][i] = 0.0f;
            }
        }
    }
}

typedef void (*kernel_fn)(const Params);

// The bulk-copy kernel (wbulk.cu, sm_90+): a block owns kBulkTiles tiles of
// 16 output channels over its whole K range (or one split of it).  Its warps
// form tile groups of kGroupWarps; a group takes an equal share of the
// tiles, and its warps split each stage's chunks (kw) and the tokens (mw).
// The TOPS_CU_BULK_* macros exist for tuning builds only.
#ifndef TOPS_CU_BULK_PREFETCH
#define TOPS_CU_BULK_PREFETCH 1
#endif
// Kernels with at least this many token tiles per warp that load their
// activations from L2 let the last warp done with a ring stage refill it
// instead of a block barrier per stage: measured 4-8 % faster at M =
// 16..128, 2-5 % slower at M = 1, hence 2.  The kernels with activation
// tiles keep the barrier: it measured faster at every M <= 16 (H200,
// 2026-11-29 18:21 UTC, int4-g128: 14.2 vs 14.7 us at M = 16, 12.2 vs
// 12.7 at M = 4 and 8).  Debug key bulk_arrive overrides both.
#ifndef TOPS_CU_BULK_ARRIVE
#define TOPS_CU_BULK_ARRIVE 2
#endif
#ifndef TOPS_CU_BULK_STAGES
#define TOPS_CU_BULK_STAGES 4
#endif
// Diagnosis builds only (wrong results): 1: warps wait on the ring and
// release it without loading, decoding or multiplying; 2: constant
// activations (no activation loads); 3: no stages (prologue and epilogue);
// 4: 4-bit weights not decoded (the raw word in every A register).
#ifndef TOPS_CU_BULK_DIAG
#define TOPS_CU_BULK_DIAG 0
#endif
constexpr int kGroupWarps = 8;
#ifndef TOPS_CU_BULK_TILES
#define TOPS_CU_BULK_TILES 6
#endif
#ifndef TOPS_CU_BULK_MINB
#define TOPS_CU_BULK_MINB 1 // blocks per SM the register budget is set for
#endif
constexpr int kBulkTiles = TOPS_CU_BULK_TILES; // 6 = 96 channels: N = 12288 -> 128 blocks, one wave on 132 SMs
constexpr int kStageChunks = 8; // chunks of K per stage (512 bytes per tile and chunk)
constexpr int kStages = TOPS_CU_BULK_STAGES; // ring stages by default: 4 x 24 KB in flight per block
// Most ring stages: a block's whole K = 4096 of 4-bit codes (8 stages) when
// its activation tiles are small (M <= 2) and its scales fit beside them.
constexpr int kMaxStages = kStages > 8 ? kStages : 8;
constexpr int kStageBytes = kBulkTiles * kStageChunks * 512;
// Tile groups (TG) split the block's tiles: 2 (16 warps: 3 tiles x 2 token
// tiles of accumulators fit 128 registers) or, with one token tile per warp,
// 3 (24 warps of 2 tiles, at most 85 registers).
static_assert(kBulkTiles % 2 == 0 && kBulkTiles % 3 == 0, "tile groups must split the block's tiles");
// Shared memory of one bulk block with a ring of `stages` stages: the ring
// (1024-byte aligned in the kernel: swizzled TMA tiles), the block's scales
// as copied (raw_bytes; none when decoded straight from global memory) and
// decoded to f32 (4 bytes an entry), the mbarriers (filled and emptied per
// slot, scales) and the per-slot counters.
inline size_t bulk_smem_bytes(int stages, size_t raw_bytes, size_t f32_bytes, size_t slot_bytes = kStageBytes) {
    return 1024 + (size_t)stages * slot_bytes + ((raw_bytes + 15) & ~(size_t)15) + f32_bytes +
           (2 * kMaxStages + 1) * 8 + 2 * kMaxStages * 4;
}
// The bulk kernel for (code family, bf16 activations, token tiles per warp 1
// or 2, tile groups 2 or 3 (3 with one token tile only), activations as TMA
// tiles in the ring (xt) or from L2, steps per scale group flush fp: 0 = one
// group per row or no scales, else min(group / 16, k16 steps per chunk));
// its first parameter is the activations' tensor map (used with xt only).
typedef void (*bulk_fn)(const CUtensorMap, const Params);
bulk_fn bulk_kernel(int code, bool bf16, int mt, int tg, bool xt, int fp);

// Host side of wstream.cu shared with the other launchers: the kernels'
// parameters from the launch arguments (false, *what set, for an unusable
// scale group), the name tops__cu_last_kernel reports, and the integer value
// of a tuning variable (dflt when unset or empty).
bool init_params(const tops__cu_matmul_args *a, Params &p, const char **what);
// Output channels a slice of a stream-ordered weight workspace of row_bytes
// a channel (dequant.cu, fp8_gemm.cu's e4m3 conversion): as many as 128 MB
// hold, a multiple of unit (at least one), at most cap; debug key
// dequant_rows sets it (rounded up to 16, for tests).
inline long long workspace_slice(long long row_bytes, long long unit, long long cap) {
    long long slice = (long long)((((size_t)128) << 20) / (size_t)row_bytes) / unit * unit;
    if (slice < unit) slice = unit;
    const long long forced = tops__cu_tune(TOPS__CU_T_DEQUANT_ROWS);
    if (forced > 0) slice = (forced + 15) / 16 * 16;
    return slice > cap ? cap : slice;
}
// The quantizer's optional output for wgmma_q8.cu's int4 correction: per
// token row and 128-K chunk c, -S/2 (S: the row's e4m3 codes' values summed
// over the chunk) as f16 hi + lo, in the B tiles of a wgmma m64nNk16 f16:
// per token tile (tn rows) and block of 32 chunks, tn rows of 128 bytes
// (hi of the block's 32 chunks, then lo), 128-byte swizzle (16-byte unit u
// of row r at u ^ (r % 8)), at ((tile x blocks + b) x tn + r) x 128.  Rows
// m .. rows - 1 and chunks past K are zeros.
struct ActSums {
    unsigned char *out; // nullptr: none
    int tn, blocks, rows;
};
// fp8_gemm.cu's per-row e4m3 activation quantizer (codes [m, k_pad] and f32
// row scales [m]; the FP8 GEMM's nflags stream-K flags zeroed; the sums
// above where asked), for both relaxed FP8 kernels, `rows` rows a block (1,
// 2 or 4; debug key quant_rows overrides).
cudaError_t quant_act_e4m3(const tops__cu_matmul_args *a, unsigned char *q, float *scales, int rows,
                           unsigned *flags = nullptr, int nflags = 0, ActSums sums = ActSums{nullptr, 0, 0, 0});
void set_last_kernel(const char *name);
// Whether the current device is compute capability 9.0, the only part the
// sm_90a pass (wgmma, TMA) runs on; false (error cleared) when it cannot tell.
bool device_is_sm90a();

// Launches kernel(args...) on stream, in clusters of cluster_x CTAs when
// cluster_x > 1, and with pdl as a programmatic dependent of the stream's
// previous kernel (its prologue overlaps that kernel's tail); a driver that
// refuses the dependency gets the launch without it.  Returns the launch's
// error (cudaGetLastError cleared of a refused attempt).
template <typename... Params_, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params_...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          bool pdl, int cluster_x, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    if (cluster_x > 1) {
        attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
        attr[cfg.numAttrs].val.clusterDim.x = (unsigned)cluster_x;
        attr[cfg.numAttrs].val.clusterDim.y = 1;
        attr[cfg.numAttrs++].val.clusterDim.z = 1;
    }
    cudaError_t err = cudaErrorNotSupported;
    if (pdl) {
        attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[cfg.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
        err = cudaLaunchKernelEx(&cfg, kernel, args...);
        if (err != cudaSuccess) {
            (void)cudaGetLastError();
            cfg.numAttrs--;
        }
    }
    if (err != cudaSuccess) err = cudaLaunchKernelEx(&cfg, kernel, args...);
    return err == cudaSuccess ? cudaGetLastError() : err;
}

} // namespace tops_cu

#endif
