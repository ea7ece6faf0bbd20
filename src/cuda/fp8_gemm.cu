// Relaxed FP8 matmul for large M on Hopper (sm_90a):
//   1. quant_rows: each activation row (f16/bf16) becomes e4m3 codes with one
//      f32 scale s = amax / 448 (codes = e4m3_satfinite_rne(x / s)), written to
//      a stream-ordered workspace [M, k_pad];
//   2. fp8_gemm: 128 x 256 output tiles on wgmma m64n256k32 e4m3 x e4m3 -> f32.
//      One producer thread feeds a ring of shared-memory stages through TMA
//      (cp.async.bulk.tensor, 128-byte swizzle, out-of-bounds rows and K read
//      as zeros, so ragged M/N/K need no padding); two consumer warpgroups
//      each own 64 rows of the tile.  The epilogue multiplies by the row
//      scale, the channel scale and the tensor scale and stores with the
//      op's mode into f32/f16/bf16.
// The Hopper instructions exist only in the sm_90a pass; the sm_80 pass
// builds empty kernels that the plan never launches (matmul.c asks for
// compute capability 9.0 before it packs the FP8 layout).
#include "cuda/cuda_internal.h"
#include "cuda/sm90.cuh"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <stdlib.h>
#include <string.h>

#ifdef TOPS_CU_WGMMA
#define TOPS_FP8_WGMMA 1
#endif

namespace {

constexpr int kBM = 128;       // tile rows (tokens): two consumer warpgroups of 64
constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups

struct GemmParams {
    const float *row_scale;     // [m]
    const float *ch_scale;      // [n] or NULL (plain e4m3: tensor scale only)
    float global;
    void *out;
    long long ldo;
    int out_dtype, accumulate;
    int m, n, k;
    int tiles_m;
};

// ---- activations to e4m3 ---------------------------------------------------

__device__ __forceinline__ float load_act(const __half *x, int i) { return __half2float(x[i]); }
__device__ __forceinline__ float load_act(const __nv_bfloat16 *x, int i) { return __bfloat162float(x[i]); }

// 8 consecutive activations as raw 16-bit values (one 16-byte load when the
// row allows it); zeros (+0 in f16 and bf16) past column k.
template <typename T>
__device__ __forceinline__ uint4 load_raw8(const T *row, int k0, int k, bool vec) {
    if (vec && k0 + 8 <= k) return *reinterpret_cast<const uint4 *>(row + k0);
    uint4 u = make_uint4(0, 0, 0, 0);
    T *h = reinterpret_cast<T *>(&u);
#pragma unroll
    for (int i = 0; i < 8; i++)
        if (k0 + i < k) h[i] = row[k0 + i];
    return u;
}

template <typename T>
__device__ __forceinline__ float amax8(const uint4 &u, float amax) {
    const T *h = reinterpret_cast<const T *>(&u);
#pragma unroll
    for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(load_act(h, i)));
    return amax;
}

// 8 codes e4m3_satfinite_rne(x / s) (x / s correctly rounded, as the host's reference does).
template <typename T>
__device__ __forceinline__ uint2 codes8(const uint4 &u, float s) {
    const T *h = reinterpret_cast<const T *>(&u);
    uint32_t w[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        uint32_t b = 0;
#pragma unroll
        for (int j = 0; j < 4; j += 2) {
            float a0 = s > 0.0f ? load_act(h, 4 * i + j) / s : 0.0f, a1 = s > 0.0f ? load_act(h, 4 * i + j + 1) / s : 0.0f;
            __nv_fp8x2_storage_t p = __nv_cvt_float2_to_fp8x2(make_float2(a0, a1), __NV_SATFINITE, __NV_E4M3);
            b |= (uint32_t)p << (8 * j);
        }
        w[i] = b;
    }
    return make_uint2(w[0], w[1]);
}

constexpr int kQuantThreads = 256;
constexpr int kQuantRegs = 4; // 16-byte chunks a thread keeps in registers: rows up to K = 8192 read once

// One block per row: amax, then codes.  Columns k..k_pad-1 get zero codes.
// Rows that fit are read once, with every thread's loads in flight before
// the first use; longer rows are read again for the codes.
template <typename T>
__global__ void __launch_bounds__(kQuantThreads) quant_rows_kernel(const T *x, long long ldx, int k, int k_pad,
                                                                   int vec, unsigned char *q, float *scales) {
    const int row = blockIdx.x, t = threadIdx.x, chunks = k_pad / 8;
    const T *xr = x + (long long)row * ldx;
    const bool cached = chunks <= kQuantThreads * kQuantRegs;
    float amax = 0.0f;
    uint4 raw[kQuantRegs];
    if (cached) {
#pragma unroll
        for (int i = 0; i < kQuantRegs; i++) {
            const int c = t + i * kQuantThreads;
            raw[i] = c < chunks ? load_raw8(xr, 8 * c, k, vec != 0) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int i = 0; i < kQuantRegs; i++) amax = amax8<T>(raw[i], amax);
    } else {
        for (int c = t; c < chunks; c += kQuantThreads) amax = amax8<T>(load_raw8(xr, 8 * c, k, vec != 0), amax);
    }
    __shared__ float red[kQuantThreads / 32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if ((t & 31) == 0) red[t >> 5] = amax;
    __syncthreads();
    amax = red[0];
#pragma unroll
    for (int w = 1; w < kQuantThreads / 32; w++) amax = fmaxf(amax, red[w]);
    // s = amax / 448 in f32 (correctly rounded division, as the host's reference does).
    const float s = amax / 448.0f;
    if (t == 0) scales[row] = s;
    uint2 *qr = reinterpret_cast<uint2 *>(q + (long long)row * k_pad);
    if (cached) {
#pragma unroll
        for (int i = 0; i < kQuantRegs; i++) {
            const int c = t + i * kQuantThreads;
            if (c < chunks) qr[c] = codes8<T>(raw[i], s);
        }
    } else {
        for (int c = t; c < chunks; c += kQuantThreads) qr[c] = codes8<T>(load_raw8(xr, 8 * c, k, vec != 0), s);
    }
}

// ---- the GEMM -------------------------------------------------------------------

// KB = K per stage: one swizzle row of e4m3 (128 bytes: 128-byte swizzle;
// 64: 64-byte swizzle, half the bytes per stage, so twice the stages).
template <int BN, int STAGES, int KB>
struct RingSize {
    static_assert(KB == 64 || KB == 128, "a stage is one 64- or 128-byte swizzle row deep");
    static constexpr int kStageA = kBM * KB, kStageB = BN * KB;
    static constexpr size_t kBytes = (size_t)STAGES * (kStageA + kStageB) + 2 * STAGES * sizeof(uint64_t);
};

#ifdef TOPS_FP8_WGMMA
using namespace tops_cu::sm90;

// D[64 x 256] += A[64 x 32] * B[256 x 32]^T, both e4m3 from shared memory.
template <int SCALE_D>
__device__ __forceinline__ void wgmma_n256(float (&d)[128], uint64_t da, uint64_t db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, %130, 1, 1;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "n"(SCALE_D));
}

template <int KB>
__device__ __forceinline__ uint64_t desc_k(const void *p) {
    return KB == 128 ? desc_sw128(p) : desc_sw64(p);
}

// One KB-deep K stage: KB / 32 k32 steps, 32 bytes apart inside the swizzled
// rows.  ZERO: the first stage overwrites the accumulators (scale-d = 0).
template <bool ZERO, int KB>
__device__ __forceinline__ void wgmma_stage(float (&d)[128], const unsigned char *a, const unsigned char *b) {
    wgmma_n256<ZERO ? 0 : 1>(d, desc_k<KB>(a), desc_k<KB>(b));
#pragma unroll
    for (int kk = 1; kk < KB / 32; kk++) wgmma_n256<1>(d, desc_k<KB>(a + 32 * kk), desc_k<KB>(b + 32 * kk));
}

// Four neighbours of one output row (col .. col + 3 < p.n where valid).
__device__ __forceinline__ void store4(const GemmParams &p, int row, int col, float4 v, bool vec) {
    const long long off = (long long)row * p.ldo + col;
    float r[4] = {v.x, v.y, v.z, v.w};
    if (vec && col + 3 < p.n) {
        if (p.out_dtype == TOPS_DT_F32) {
            float4 *o = reinterpret_cast<float4 *>(static_cast<float *>(p.out) + off);
            if (p.accumulate) {
                float4 old = *o;
                v.x += old.x, v.y += old.y, v.z += old.z, v.w += old.w;
            }
            *o = v;
        } else if (p.out_dtype == TOPS_DT_F16) {
            __half2 *o = reinterpret_cast<__half2 *>(static_cast<__half *>(p.out) + off);
            uint2 u = *reinterpret_cast<uint2 *>(o), w;
            if (p.accumulate) {
                float2 a = __half22float2(*reinterpret_cast<__half2 *>(&u.x)), b = __half22float2(*reinterpret_cast<__half2 *>(&u.y));
                r[0] += a.x, r[1] += a.y, r[2] += b.x, r[3] += b.y;
            }
            __half2 lo = __floats2half2_rn(r[0], r[1]), hi = __floats2half2_rn(r[2], r[3]);
            w.x = *reinterpret_cast<uint32_t *>(&lo), w.y = *reinterpret_cast<uint32_t *>(&hi);
            *reinterpret_cast<uint2 *>(o) = w;
        } else {
            __nv_bfloat162 *o = reinterpret_cast<__nv_bfloat162 *>(static_cast<__nv_bfloat16 *>(p.out) + off);
            uint2 u = *reinterpret_cast<uint2 *>(o), w;
            if (p.accumulate) {
                float2 a = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&u.x)),
                       b = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&u.y));
                r[0] += a.x, r[1] += a.y, r[2] += b.x, r[3] += b.y;
            }
            __nv_bfloat162 lo = __floats2bfloat162_rn(r[0], r[1]), hi = __floats2bfloat162_rn(r[2], r[3]);
            w.x = *reinterpret_cast<uint32_t *>(&lo), w.y = *reinterpret_cast<uint32_t *>(&hi);
            *reinterpret_cast<uint2 *>(o) = w;
        }
        return;
    }
    for (int i = 0; i < 4 && col + i < p.n; i++) {
        if (p.out_dtype == TOPS_DT_F32) {
            float *o = static_cast<float *>(p.out) + off + i;
            *o = p.accumulate ? *o + r[i] : r[i];
        } else if (p.out_dtype == TOPS_DT_F16) {
            __half *o = static_cast<__half *>(p.out) + off + i;
            *o = __float2half_rn(p.accumulate ? __half2float(*o) + r[i] : r[i]);
        } else {
            __nv_bfloat16 *o = static_cast<__nv_bfloat16 *>(p.out) + off + i;
            *o = __float2bfloat16_rn(p.accumulate ? __bfloat162float(*o) + r[i] : r[i]);
        }
    }
}

// The stage ring: STAGES x (A [kBM][KB] + B [BN][KB]) e4m3, then the full
// (TMA landed) and empty (all 8 consumer warps done) barriers.  Stage
// counters run over the CTA's whole life, so that a persistent CTA carries
// the ring position from one tile to the next.
template <int BN, int STAGES, int KB>
struct Ring : RingSize<BN, STAGES, KB> {
    using RingSize<BN, STAGES, KB>::kStageA;
    using RingSize<BN, STAGES, KB>::kStageB;
    unsigned char *a, *b;
    uint64_t *full, *empty;
    __device__ explicit Ring(unsigned char *base)
        : a(base), b(base + STAGES * kStageA),
          full(reinterpret_cast<uint64_t *>(base + STAGES * (kStageA + kStageB))), empty(full + STAGES) {}
    __device__ void init() const {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 8); // one arrive per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
};

// Producer thread: the K stages of tile (tm, tn) into ring stages it, it + 1, ...
template <int BN, int STAGES, int KB>
__device__ __forceinline__ void produce_tile(const Ring<BN, STAGES, KB> &r, const CUtensorMap *ma, const CUtensorMap *mb,
                                             int tm, int tn, int ktiles, uint32_t &it) {
    using R = Ring<BN, STAGES, KB>;
    for (int kt = 0; kt < ktiles; kt++, it++) {
        const uint32_t s = it % STAGES;
        if (it >= (uint32_t)STAGES) mbar_wait(&r.empty[s], ((it / STAGES) + 1) & 1);
        mbar_expect_tx(&r.full[s], R::kStageA + R::kStageB);
        tma_load_2d(r.a + s * R::kStageA, ma, &r.full[s], kt * KB, tm * kBM);
        tma_load_2d(r.b + s * R::kStageB, mb, &r.full[s], kt * KB, tn * BN);
    }
}

// Consumer warpgroup cw: its 64 rows of one tile, one wgmma group kept in
// flight; every stage is handed back once its products are done.
template <int BN, int STAGES, int KB>
__device__ __forceinline__ void mma_tile(float (&d)[BN / 2], const Ring<BN, STAGES, KB> &r, int cw, int ktiles,
                                         uint32_t &it) {
    using R = Ring<BN, STAGES, KB>;
    const bool arrive = (threadIdx.x & 31) == 0;
    for (int kt = 0; kt < ktiles; kt++, it++) {
        const uint32_t s = it % STAGES;
        mbar_wait(&r.full[s], (it / STAGES) & 1);
        wgmma_fence();
        const unsigned char *a = r.a + s * R::kStageA + cw * 64 * KB, *b = r.b + s * R::kStageB;
        if (kt == 0) wgmma_stage<true, KB>(d, a, b);
        else wgmma_stage<false, KB>(d, a, b);
        wgmma_commit();
        wgmma_wait<1>();
        if (kt > 0 && arrive) mbar_arrive(&r.empty[(it - 1) % STAGES]);
    }
    wgmma_wait<0>();
    fence_regs(d);
    if (arrive) mbar_arrive(&r.empty[(it - 1) % STAGES]);
}

template <typename T>
__device__ __forceinline__ uint32_t pack2(float a, float b);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}

// Scaled accumulators of consumer warpgroup cw (tile rows 64 cw .. + 63),
// columns 8 j0 .. 8 (j0 + NJ) - 1 of the tile, as OutT into its staging
// rows: NJ / 8 boxes of [64 rows][128 bytes] in the output map's 128-byte swizzle (16-byte chunk c of row r at c ^ (r % 8)),
// which also puts a warp's 32 4-byte stores on 32 different banks.
// Accumulator i of lane l in warp w is row 16 w + l / 4 + 8 ((i / 2) % 2),
// column 8 (i / 4) + 2 (l % 4) + i % 2.
template <int BN, int NJ, typename OutT>
__device__ __forceinline__ void stage_tile(const float (&d)[BN / 2], const GemmParams &p, unsigned char *stage,
                                           int tm, int tn, int cw, int j0) {
    const int lane = threadIdx.x & 31, warp = (threadIdx.x / 32) & 3;
    int rl[2];
    float rs[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        rl[h] = warp * 16 + lane / 4 + 8 * h;
        const int row = tm * kBM + cw * 64 + rl[h];
        rs[h] = row < p.m ? p.row_scale[row] * p.global : 0.0f; // rows past M are clipped by the store
    }
#pragma unroll
    for (int j = j0; j < j0 + NJ; j++) {
        const int col = tn * BN + 8 * j + 2 * (lane & 3);
        float c0 = 1.0f, c1 = 1.0f;
        if (p.ch_scale) {
            c0 = col < p.n ? p.ch_scale[col] : 0.0f;
            c1 = col + 1 < p.n ? p.ch_scale[col + 1] : 0.0f;
        }
        unsigned char *box = stage + ((j - j0) / 8) * (64 * 128);
#pragma unroll
        for (int h = 0; h < 2; h++)
            *reinterpret_cast<uint32_t *>(box + rl[h] * 128 + (((j & 7) ^ (rl[h] & 7)) << 4) + 4 * (lane & 3)) =
                pack2<OutT>(d[4 * j + 2 * h] * (rs[h] * c0), d[4 * j + 2 * h + 1] * (rs[h] * c1));
    }
}

__device__ __forceinline__ unsigned char *align1024(unsigned char *p) {
    // 128-byte swizzled tiles want 1024-byte alignment.
    return reinterpret_cast<unsigned char *>(((uintptr_t)p + 1023) & ~(uintptr_t)1023);
}
#endif // TOPS_FP8_WGMMA

// One CTA per tile; any output type, multiply or accumulate, any output stride.
template <int BN, int STAGES, int KB>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                    const GemmParams p, int vec_stores) {
#ifdef TOPS_FP8_WGMMA
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = align1024(smem_raw);
    const Ring<BN, STAGES, KB> ring(smem);

    // Tokens fastest: the CTAs in flight share a few weight column tiles
    // and all of the (smaller) activation codes in L2.
    const int tm = blockIdx.x % p.tiles_m, tn = blockIdx.x / p.tiles_m;
    const int wg = threadIdx.x / 128;
    const int ktiles = (p.k + KB - 1) / KB;
    if (threadIdx.x == 0) ring.init();
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        uint32_t it = 0;
        if (threadIdx.x == 0) produce_tile(ring, &map_a, &map_b, tm, tn, ktiles, it);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        const int cw = wg - 1; // rows 64 * cw .. + 63 of the tile
        float d[BN / 2]; // written first by the scale-d = 0 stage (K >= 1)
        uint32_t it = 0;
        mma_tile(d, ring, cw, ktiles, it);

        // Epilogue through shared memory (the stage ring is idle once both
        // consumer warpgroups are past their last wgmma), so that the global
        // stores are whole rows.  Accumulator layout as in stage_tile; rows
        // padded by 8 floats keep a half-warp's float2 stores off each
        // other's banks.
        constexpr int ld = BN + 8;
        asm volatile("bar.sync 1, 256;" ::: "memory");
        float *c = reinterpret_cast<float *>(smem) + cw * 64 * ld;
        const int lane = threadIdx.x & 31, warp = (threadIdx.x / 32) & 3;
#pragma unroll
        for (int j = 0; j < BN / 8; j++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                *reinterpret_cast<float2 *>(c + (warp * 16 + lane / 4 + 8 * h) * ld + 8 * j + 2 * (lane & 3)) =
                    make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
        asm volatile("bar.sync %0, 128;" ::"r"(2 + cw) : "memory");
        const int t = threadIdx.x & 127;
        const int col = 4 * (t % (BN / 4)), col_g = tn * BN + col;
        float4 cs = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
        if (p.ch_scale && col_g < p.n) {
            cs.x = p.ch_scale[col_g];
            cs.y = col_g + 1 < p.n ? p.ch_scale[col_g + 1] : 0.0f;
            cs.z = col_g + 2 < p.n ? p.ch_scale[col_g + 2] : 0.0f;
            cs.w = col_g + 3 < p.n ? p.ch_scale[col_g + 3] : 0.0f;
        }
        for (int r = t / (BN / 4); r < 64; r += 128 / (BN / 4)) {
            const int row = tm * kBM + cw * 64 + r;
            if (row >= p.m || col_g >= p.n) continue;
            const float rs = p.row_scale[row] * p.global;
            float4 v = *reinterpret_cast<const float4 *>(c + r * ld + col);
            v.x *= rs * cs.x, v.y *= rs * cs.y, v.z *= rs * cs.z, v.w *= rs * cs.w;
            store4(p, row, col_g, v, vec_stores != 0);
        }
    }
#else
    (void)map_a, (void)map_b, (void)p, (void)vec_stores;
#endif
}

// Persistent CTAs (one per SM) for f16/bf16 output written (not accumulated)
// through a tensor map.  The producer streams the next tile's stages while
// the consumers finish the last one; each consumer warpgroup stages its 64
// rows in shared memory of its own and one of its threads hands them to the
// copy engine (TMA store), so the warpgroup goes straight on to the next
// tile's wgmma instead of waiting for its global stores.  ROUNDS = 2 stages
// half the columns at a time (half the shared memory, two more stages).
template <int BN, int STAGES, int KB, int ROUNDS, typename OutT>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_gemm_persistent_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                               const __grid_constant__ CUtensorMap map_c, const GemmParams p, int tiles) {
#ifdef TOPS_FP8_WGMMA
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = align1024(smem_raw);
    constexpr int kStageOut = 64 * (BN / ROUNDS) * (int)sizeof(OutT); // one consumer warpgroup's rows
    const Ring<BN, STAGES, KB> ring(smem + 2 * kStageOut);
    const int wg = threadIdx.x / 128;
    const int ktiles = (p.k + KB - 1) / KB;
    if (threadIdx.x == 0) ring.init();
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        uint32_t it = 0;
        if (threadIdx.x == 0)
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x)
                produce_tile(ring, &map_a, &map_b, tile % p.tiles_m, tile / p.tiles_m, ktiles, it);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        const int cw = wg - 1;
        const bool issuer = (threadIdx.x & 127) == 0;
        unsigned char *stage = smem + cw * kStageOut;
        float d[BN / 2];
        uint32_t it = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            const int tm = tile % p.tiles_m, tn = tile / p.tiles_m;
            mma_tile(d, ring, cw, ktiles, it);
#pragma unroll
            for (int h = 0; h < ROUNDS; h++) {
                constexpr int nj = BN / 8 / ROUNDS; // 8-column groups per round
                // The previous store must be done reading the staging rows.
                if (issuer) bulk_wait_read<0>();
                asm volatile("bar.sync %0, 128;" ::"r"(2 + cw) : "memory");
                stage_tile<BN, nj, OutT>(d, p, stage, tm, tn, cw, h * nj);
                fence_proxy_async();
                asm volatile("bar.sync %0, 128;" ::"r"(2 + cw) : "memory");
                if (issuer) {
                    const int row0 = tm * kBM + cw * 64;
#pragma unroll
                    for (int q = 0; q < nj / 8; q++) { // boxes wholly past N or M store nothing
                        const int col0 = tn * BN + 8 * h * nj + 64 * q;
                        if (row0 < p.m && col0 < p.n) tma_store_2d(&map_c, stage + q * 64 * 128, col0, row0);
                    }
                    bulk_commit();
                }
            }
        }
        if (issuer) bulk_wait<0>();
    }
#else
    (void)map_a, (void)map_b, (void)map_c, (void)p, (void)tiles;
#endif
}

template <int BN, int STAGES, int KB>
constexpr size_t gemm_smem() {
    // The epilogue's staging (two warpgroups x 64 rows x (BN + 8) floats) reuses the ring.
    static_assert(2 * 64 * (BN + 8) * 4 <= STAGES * (kBM + BN) * KB, "epilogue staging exceeds the stage ring");
    return RingSize<BN, STAGES, KB>::kBytes + 1024;
}

template <int BN, int STAGES, int KB, int ROUNDS, typename OutT>
constexpr size_t persistent_smem() {
    return (size_t)kBM * (BN / ROUNDS) * sizeof(OutT) + RingSize<BN, STAGES, KB>::kBytes + 1024;
}

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
    if (!fn) {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
        (void)cudaGetLastError();
    }
    return fn;
}

// A 2-D tensor map over [rows, cols] elements of `type` (row stride ld
// bytes), boxes of [box_rows][box_cols].
bool encode_2d(CUtensorMap *map, CUtensorMapDataType type, const void *base, int rows, int cols, long long ld,
               int box_rows, int box_cols, CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2) {
    PFN_cuTensorMapEncodeTiled_v12000 enc = encode_fn();
    if (!enc) return false;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)ld};
    cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows}, estr[2] = {1, 1};
    return enc(map, type, 2, const_cast<void *>(base), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
               swizzle, l2, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// A [rows, k] e4m3 matrix (row stride ld bytes) read as [box_rows][kb] tiles.
bool make_map(CUtensorMap *map, const void *base, int rows, int k, long long ld, int box_rows, int kb) {
    return encode_2d(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, base, rows, k, ld, box_rows, kb,
                     kb == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
}

// Above 48 KB a kernel needs its limit raised, once per device (so that
// calls captured into a graph later make no such call).
cudaError_t raise_smem_once(const void *kernel, size_t smem, unsigned char (&raised)[64], const char **what) {
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess && (dev < 0 || dev >= 64 || !raised[dev])) {
        err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (err == cudaSuccess && dev >= 0 && dev < 64) raised[dev] = 1;
    }
    if (err != cudaSuccess) *what = "raising the FP8 GEMM's shared-memory limit";
    return err;
}

template <int BN, int STAGES, int KB>
cudaError_t launch_gemm(const CUtensorMap &ma, const CUtensorMap &mb, GemmParams p, int vec, cudaStream_t stream,
                        const char **what) {
    auto kernel = fp8_gemm_kernel<BN, STAGES, KB>;
    constexpr size_t smem = gemm_smem<BN, STAGES, KB>();
    static_assert(smem <= 227 * 1024, "the FP8 GEMM exceeds Hopper's shared memory per block");
    static unsigned char raised[64];
    cudaError_t err = raise_smem_once(reinterpret_cast<const void *>(kernel), smem, raised, what);
    if (err != cudaSuccess) return err;
    p.tiles_m = (p.m + kBM - 1) / kBM;
    const long long tiles = (long long)p.tiles_m * ((p.n + BN - 1) / BN);
    kernel<<<(unsigned)tiles, kThreads, smem, stream>>>(ma, mb, p, vec);
    err = cudaGetLastError();
    if (err != cudaSuccess) *what = "the FP8 GEMM launch";
    return err;
}

// At most one CTA per SM, fewer with TOPS_CUDA_FP8_CTAS (tests use it to give
// each CTA many tiles).
int persistent_ctas(long long tiles) {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) !=
                                                  cudaSuccess || sms < 1)
        sms = 1;
    const char *e = getenv("TOPS_CUDA_FP8_CTAS");
    if (e && atoi(e) > 0 && atoi(e) < sms) sms = atoi(e);
    return tiles < sms ? (int)tiles : sms;
}

template <int BN, int STAGES, int KB, int ROUNDS, typename OutT>
cudaError_t launch_persistent(const CUtensorMap &ma, const CUtensorMap &mb, const CUtensorMap &mc, GemmParams p,
                              cudaStream_t stream, const char **what) {
    auto kernel = fp8_gemm_persistent_kernel<BN, STAGES, KB, ROUNDS, OutT>;
    constexpr size_t smem = persistent_smem<BN, STAGES, KB, ROUNDS, OutT>();
    static_assert(smem <= 227 * 1024, "the persistent FP8 GEMM exceeds Hopper's shared memory per block");
    static unsigned char raised[64];
    cudaError_t err = raise_smem_once(reinterpret_cast<const void *>(kernel), smem, raised, what);
    if (err != cudaSuccess) return err;
    p.tiles_m = (p.m + kBM - 1) / kBM;
    const long long tiles = (long long)p.tiles_m * ((p.n + BN - 1) / BN);
    kernel<<<(unsigned)persistent_ctas(tiles), kThreads, smem, stream>>>(ma, mb, mc, p, (int)tiles);
    err = cudaGetLastError();
    if (err != cudaSuccess) *what = "the FP8 GEMM launch";
    return err;
}

// The GEMM kernels (TOPS_CUDA_FP8_KERNEL picks one for A/B runs and tests):
//   tile128: one CTA per tile, 4 stages of K = 128;
//   tile64: one CTA per tile, 9 stages of K = 64 (the same 216 KB, but a
//     stage held by the wgmma in flight ties up half the bytes, so more of
//     the ring is loads in flight);
//   persist64: one CTA per SM, 6 stages of K = 64, output staged for TMA
//     stores (f16/bf16 written with 16-byte aligned rows; else tile64);
//   persist64h: the same with 8 stages, staging half the columns at a time.
enum class Fp8Kernel { tile128, tile64, persist64, persist64h };

Fp8Kernel fp8_kernel() {
    const char *e = getenv("TOPS_CUDA_FP8_KERNEL");
    if (e && !strcmp(e, "tile128")) return Fp8Kernel::tile128;
    if (e && !strcmp(e, "tile64")) return Fp8Kernel::tile64;
    if (e && !strcmp(e, "persist64")) return Fp8Kernel::persist64;
    if (e && !strcmp(e, "persist64h")) return Fp8Kernel::persist64h;
    return Fp8Kernel::tile128;
}

} // namespace

extern "C" int tops__cu_fp8_launch(const tops__cu_fp8_args *f, const char **what) {
    const tops__cu_matmul_args *a = f->io;
    cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
    if (a->m < 1 || a->m > 0x7FFFFFFF / 2) {
        *what = "the FP8 path's M";
        return (int)cudaErrorInvalidValue;
    }
    const size_t qbytes = (size_t)a->m * (size_t)a->k_pad, sbytes = (size_t)a->m * sizeof(float);
    unsigned char *ws = nullptr;
    // Without the driver's tensor-map encoder or stream-ordered memory the
    // strict kernels run instead (relaxed mode allows either).
    cudaError_t err = encode_fn() ? cudaMallocAsync(reinterpret_cast<void **>(&ws), qbytes + sbytes, stream)
                                  : cudaErrorNotSupported;
    if (err == cudaErrorNotSupported) {
        (void)cudaGetLastError();
        return tops__cu_matmul_launch(a, what);
    }
    if (err != cudaSuccess) {
        *what = "cudaMallocAsync of the FP8 activation workspace";
        return (int)err;
    }
    float *row_scale = reinterpret_cast<float *>(ws + qbytes); // k_pad is a multiple of 64: aligned
    const int vec = a->ldx % 8 == 0 && (uintptr_t)a->x % 16 == 0;
    if (a->x_bf16)
        quant_rows_kernel<__nv_bfloat16><<<(unsigned)a->m, kQuantThreads, 0, stream>>>(
            static_cast<const __nv_bfloat16 *>(a->x), a->ldx, (int)a->k, (int)a->k_pad, vec, ws, row_scale);
    else
        quant_rows_kernel<__half><<<(unsigned)a->m, kQuantThreads, 0, stream>>>(static_cast<const __half *>(a->x), a->ldx,
                                                                      (int)a->k, (int)a->k_pad, vec, ws, row_scale);
    err = cudaGetLastError();
    if (err != cudaSuccess) *what = "the activation quantization launch";

    constexpr int bn = 256;
    CUtensorMap ma, mb;
    const Fp8Kernel kern = fp8_kernel();
    const int kb = kern == Fp8Kernel::tile128 ? 128 : 64;
    if (err == cudaSuccess && (!make_map(&ma, ws, (int)a->m, (int)a->k, a->k_pad, kBM, kb) ||
                               !make_map(&mb, f->weights, (int)a->n, (int)a->k, a->k_pad, bn, kb))) {
        err = cudaErrorInvalidValue;
        *what = "cuTensorMapEncodeTiled for the FP8 operands";
    }
    if (err == cudaSuccess) {
        GemmParams p;
        p.row_scale = row_scale;
        p.ch_scale = static_cast<const float *>(f->ch_scales);
        p.global = a->global_scale;
        p.out = a->out;
        p.ldo = a->ldo;
        p.out_dtype = a->out_dtype;
        p.accumulate = a->accumulate;
        p.m = (int)a->m;
        p.n = (int)a->n;
        p.k = (int)a->k;
        p.tiles_m = 0;
        // 4-element stores need every row start 4-element aligned.
        const size_t esz = a->out_dtype == TOPS_DT_F32 ? 4 : 2;
        const int vec = a->ldo % 4 == 0 && (uintptr_t)a->out % (4 * esz) == 0;
        CUtensorMap mc;
        const bool persist = (kern == Fp8Kernel::persist64 || kern == Fp8Kernel::persist64h) && a->out_dtype != TOPS_DT_F32 && !a->accumulate &&
                             (a->ldo * 2) % 16 == 0 && (uintptr_t)a->out % 16 == 0 &&
                             (long long)((a->m + kBM - 1) / kBM) * ((a->n + bn - 1) / bn) < (1LL << 30) &&
                             encode_2d(&mc, CU_TENSOR_MAP_DATA_TYPE_UINT16, a->out, (int)a->m, (int)a->n, a->ldo * 2, 64,
                                       64, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE);
        const bool f16 = a->out_dtype == TOPS_DT_F16, halves = kern == Fp8Kernel::persist64h;
        if (persist && halves)
            err = f16 ? launch_persistent<bn, 8, 64, 2, __half>(ma, mb, mc, p, stream, what)
                      : launch_persistent<bn, 8, 64, 2, __nv_bfloat16>(ma, mb, mc, p, stream, what);
        else if (persist)
            err = f16 ? launch_persistent<bn, 6, 64, 1, __half>(ma, mb, mc, p, stream, what)
                      : launch_persistent<bn, 6, 64, 1, __nv_bfloat16>(ma, mb, mc, p, stream, what);
        else if (kb == 128)
            err = launch_gemm<bn, 4, 128>(ma, mb, p, vec, stream, what);
        else
            err = launch_gemm<bn, 9, 64>(ma, mb, p, vec, stream, what);
    }
    cudaError_t e2 = cudaFreeAsync(ws, stream);
    if (err == cudaSuccess && e2 != cudaSuccess) {
        err = e2;
        *what = "cudaFreeAsync of the FP8 activation workspace";
    }
    return (int)err;
}
