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

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdlib>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TOPS_FP8_WGMMA 1
#endif

namespace {

constexpr int kBM = 128;       // tile rows (tokens): two consumer warpgroups of 64
constexpr int kBK = 128;       // K per stage: one 128-byte swizzle row of e4m3
constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups

struct GemmParams {
    const float *row_scale;     // [m]
    const float *ch_scale;      // [n] or NULL (plain e4m3: tensor scale only)
    float global;
    void *out;
    long long ldo;
    int out_dtype, accumulate;
    int m, n, k;
    int tiles_m, tiles_n;
};

// ---- activations to e4m3 ---------------------------------------------------

__device__ __forceinline__ float2 to_f2(__half2 h) { return __half22float2(h); }
__device__ __forceinline__ float2 to_f2(__nv_bfloat162 h) { return __bfloat1622float2(h); }
template <typename T> struct Pair2;
template <> struct Pair2<__half> { using type = __half2; };
template <> struct Pair2<__nv_bfloat16> { using type = __nv_bfloat162; };

// 16 consecutive activations at k0 (zeros from k on) as raw 16-bit values:
// two 16-byte loads when the row allows it.
template <typename T>
__device__ __forceinline__ void load16(const T *row, int k0, int k, bool vec, uint4 (&c)[2]) {
    if (vec && k0 + 16 <= k) {
        const uint4 *src = reinterpret_cast<const uint4 *>(row + k0);
        c[0] = src[0], c[1] = src[1];
    } else {
        T *h = reinterpret_cast<T *>(c);
#pragma unroll
        for (int i = 0; i < 16; i++) h[i] = k0 + i < k ? row[k0 + i] : T(0.0f);
    }
}

template <typename T>
__device__ __forceinline__ float amax16(const uint4 (&c)[2], float amax) {
    const typename Pair2<T>::type *h = reinterpret_cast<const typename Pair2<T>::type *>(c);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        float2 f = to_f2(h[i]);
        amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
    return amax;
}

// 16 codes e4m3_satfinite_rne(x / s) (zeros when s = 0) as one 16-byte store.
template <typename T>
__device__ __forceinline__ void quant16(const uint4 (&c)[2], float s, unsigned char *dst) {
    const typename Pair2<T>::type *h = reinterpret_cast<const typename Pair2<T>::type *>(c);
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint32_t b = 0;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            float2 f = to_f2(h[2 * i + j]);
            // Correctly rounded division, as the host's reference does.
            float a0 = s > 0.0f ? f.x / s : 0.0f, a1 = s > 0.0f ? f.y / s : 0.0f;
            __nv_fp8x2_storage_t p = __nv_cvt_float2_to_fp8x2(make_float2(a0, a1), __NV_SATFINITE, __NV_E4M3);
            b |= (uint32_t)p << (16 * j);
        }
        w[i] = b;
    }
    *reinterpret_cast<uint4 *>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
}

constexpr int kQuantRows = 4;  // rows (warps) per block (94 registers: 5 blocks per SM)
constexpr int kQuantKeep = 8;  // 16-element chunks per lane kept in registers: K <= 4096 reads x once

// One warp per row: amax over the row (the first kQuantKeep x 512 columns
// stay in registers), s = amax / 448 in f32, then the codes, 16 bytes per
// lane.  Columns k..k_pad-1 get zero codes (k_pad is a multiple of 64, so
// a chunk that starts below k_pad ends within it).
template <typename T>
__global__ void __launch_bounds__(32 * kQuantRows) quant_rows_kernel(const T *x, long long ldx, int m, int k,
                                                                     int k_pad, int vec, unsigned char *q,
                                                                     float *scales) {
    const int row = blockIdx.x * kQuantRows + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= m) return;
    const T *xr = x + (long long)row * ldx;
    uint4 c[kQuantKeep][2];
    // All of the lane's loads go out before the first use: with 16-byte
    // rows and K a multiple of 16 they are plain predicated loads.
    if (vec && k % 16 == 0) {
#pragma unroll
        for (int i = 0; i < kQuantKeep; i++) {
            const int k0 = 16 * (32 * i + lane);
            const uint4 *src = reinterpret_cast<const uint4 *>(xr + k0);
            c[i][0] = k0 < k ? src[0] : make_uint4(0, 0, 0, 0);
            c[i][1] = k0 < k ? src[1] : make_uint4(0, 0, 0, 0);
        }
    } else {
#pragma unroll
        for (int i = 0; i < kQuantKeep; i++) load16(xr, 16 * (32 * i + lane), k, vec != 0, c[i]);
    }
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kQuantKeep; i++) amax = amax16<T>(c[i], amax);
    uint4 t[2];
    for (int k0 = 16 * (32 * kQuantKeep + lane); k0 < k; k0 += 512) {
        load16(xr, k0, k, vec != 0, t);
        amax = amax16<T>(t, amax);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float s = amax / 448.0f;
    if (lane == 0) scales[row] = s;
    unsigned char *qr = q + (long long)row * k_pad;
#pragma unroll
    for (int i = 0; i < kQuantKeep; i++) {
        const int k0 = 16 * (32 * i + lane);
        if (k0 < k_pad) quant16<T>(c[i], s, qr + k0);
    }
    for (int k0 = 16 * (32 * kQuantKeep + lane); k0 < k_pad; k0 += 512) {
        load16(xr, k0, k, vec != 0, t);
        quant16<T>(t, s, qr + k0);
    }
}

// ---- the GEMM -------------------------------------------------------------------

#ifdef TOPS_FP8_WGMMA
__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bar_init(uint64_t *b, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_expect_tx(uint64_t *b, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_arrive(uint64_t *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}
// Waits until the phase with this parity has completed.
__device__ __forceinline__ void bar_wait(uint64_t *b, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(smem_addr(b)), "r"(parity)
                     : "memory");
    } while (!done);
}
// 2-D tile [rows][128 bytes] at (k0, row0) into shared memory, completing on bar.
__device__ __forceinline__ void tma_load(void *dst, const CUtensorMap *map, uint64_t *bar, int k0, int row0) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
            smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(k0), "r"(row0)
        : "memory");
}

// wgmma shared-memory descriptor: K-major, 128-byte swizzle, 8-row atoms
// 1024 bytes apart (stride byte offset), leading byte offset unused (1).
__device__ __forceinline__ uint64_t smem_desc(const void *p) {
    uint64_t a = smem_addr(p);
    return ((a & 0x3FFFFull) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the
// asynchronous wgmma window.
template <int R>
__device__ __forceinline__ void fence_regs(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
}

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

// One 128-deep K stage: four k32 steps, 32 bytes apart inside the swizzled
// rows.  ZERO: the first stage overwrites the accumulators (scale-d = 0).
template <bool ZERO>
__device__ __forceinline__ void wgmma_stage(float (&d)[128], const unsigned char *a, const unsigned char *b) {
    wgmma_n256<ZERO ? 0 : 1>(d, smem_desc(a), smem_desc(b));
#pragma unroll
    for (int kk = 1; kk < kBK / 32; kk++) wgmma_n256<1>(d, smem_desc(a + 32 * kk), smem_desc(b + 32 * kk));
}

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void from_f(float *o, float v) { *o = v; }
__device__ __forceinline__ void from_f(__half *o, float v) { *o = __float2half_rn(v); }
__device__ __forceinline__ void from_f(__nv_bfloat16 *o, float v) { *o = __float2bfloat16_rn(v); }
__device__ __forceinline__ float2 ld2(const float *o) { return *reinterpret_cast<const float2 *>(o); }
__device__ __forceinline__ float2 ld2(const __half *o) { return __half22float2(*reinterpret_cast<const __half2 *>(o)); }
__device__ __forceinline__ float2 ld2(const __nv_bfloat16 *o) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(o));
}
__device__ __forceinline__ void st2(float *o, float2 v) { *reinterpret_cast<float2 *>(o) = v; }
__device__ __forceinline__ void st2(__half *o, float2 v) { *reinterpret_cast<__half2 *>(o) = __float22half2_rn(v); }
__device__ __forceinline__ void st2(__nv_bfloat16 *o, float2 v) {
    *reinterpret_cast<__nv_bfloat162 *>(o) = __float22bfloat162_rn(v);
}

// The epilogue straight from the accumulators (the stage ring already
// streams the next tile, so it cannot stage them): accumulator i of lane l
// in warp w is row 16 w + l / 4 + 8 ((i / 2) % 2), column 8 (i / 4) +
// 2 (l % 4) + i % 2 of the warpgroup's 64 x BN block.  Each value is
// acc x (row scale x tensor scale) x channel scale, multiplied into or
// added onto out; a lane stores two neighbours at once where aligned.
// sc / sr: the block's channel and row scales in shared memory (global
// loads here, one per column step, would each wait for L2).
template <typename T, int BN>
__device__ __forceinline__ void epilogue(const GemmParams &p, const float (&d)[BN / 2], int row0, int col0, bool vec,
                                         const float *sc, const float *sr) {
    const int lane = threadIdx.x & 31, warp = (threadIdx.x / 32) & 3;
    T *out = static_cast<T *>(p.out);
    float rs[2];
    int rows[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        rows[h] = row0 + 16 * warp + lane / 4 + 8 * h;
        rs[h] = sr[16 * warp + lane / 4 + 8 * h];
    }
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int col = col0 + 8 * j + 2 * (lane & 3);
        if (col >= p.n) continue;
        const bool two = col + 1 < p.n;
        const float2 cs = *reinterpret_cast<const float2 *>(sc + 8 * j + 2 * (lane & 3));
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (rows[h] >= p.m) continue;
            T *o = out + (long long)rows[h] * p.ldo + col;
            float2 v = make_float2(d[4 * j + 2 * h] * (rs[h] * cs.x), d[4 * j + 2 * h + 1] * (rs[h] * cs.y));
            if (vec && two) {
                if (p.accumulate) {
                    float2 old = ld2(o);
                    v.x += old.x, v.y += old.y;
                }
                st2(o, v);
            } else {
                from_f(o, p.accumulate ? to_f(o[0]) + v.x : v.x);
                if (two) from_f(o + 1, p.accumulate ? to_f(o[1]) + v.y : v.y);
            }
        }
    }
}
#endif // TOPS_FP8_WGMMA

template <int BN, int STAGES>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                    const GemmParams p, int vec_stores) {
#ifdef TOPS_FP8_WGMMA
    constexpr int kStageA = kBM * kBK, kStageB = BN * kBK;
    extern __shared__ unsigned char smem_raw[];
    // 128-byte swizzled tiles want 1024-byte alignment.
    unsigned char *smem = reinterpret_cast<unsigned char *>(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    unsigned char *sa = smem, *sb = smem + STAGES * kStageA;
    uint64_t *full = reinterpret_cast<uint64_t *>(sb + STAGES * kStageB), *empty = full + STAGES;
    // Per consumer warpgroup: BN channel scales, then 64 row scales.
    float *scales = reinterpret_cast<float *>(empty + STAGES);
    static_assert(BN == 256, "two channel scales per consumer thread");

    const int wg = threadIdx.x / 128;
    const int ktiles = (p.k + kBK - 1) / kBK, tiles = p.tiles_m * p.tiles_n;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            bar_init(&full[s], 1);
            bar_init(&empty[s], 8); // one arrive per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    // Persistent: CTA b takes tiles b, b + gridDim.x, ...; the ring position
    // `it` (K blocks so far) runs on across tiles, so the producer loads the
    // next tile's first stages while the consumers run the epilogue.  Tokens
    // fastest: the CTAs in flight share a few weight column tiles and all of
    // the (smaller) activation codes in L2.
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (threadIdx.x == 0) {
            uint32_t it = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                const int tm = tile % p.tiles_m, tn = tile / p.tiles_m;
                for (int kt = 0; kt < ktiles; kt++, it++) {
                    const int s = it % STAGES;
                    if (it >= STAGES) bar_wait(&empty[s], ((it / STAGES) + 1) & 1);
                    bar_expect_tx(&full[s], kStageA + kStageB);
                    tma_load(sa + s * kStageA, &map_a, &full[s], kt * kBK, tm * kBM);
                    tma_load(sb + s * kStageB, &map_b, &full[s], kt * kBK, tn * BN);
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        const int cw = wg - 1; // rows 64 * cw .. + 63 of the tile
        const bool lane0 = (threadIdx.x & 31) == 0;
        uint32_t it = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            const int tm = tile % p.tiles_m, tn = tile / p.tiles_m;
            const int row0 = tm * kBM + cw * 64, col0 = tn * BN, t = threadIdx.x & 127;
            // This tile's scales, loaded now so that their latency hides
            // under the K loop: columns col0 + 2t, + 1; row row0 + t.
            float2 csv = make_float2(1.0f, 1.0f);
            if (p.ch_scale) {
                const int c = col0 + 2 * t;
                csv.x = c < p.n ? p.ch_scale[c] : 0.0f;
                csv.y = c + 1 < p.n ? p.ch_scale[c + 1] : 0.0f;
            }
            const float rsv = t < 64 && row0 + t < p.m ? p.row_scale[row0 + t] * p.global : 0.0f;
            float d[BN / 2]; // written first by the scale-d = 0 stage (K >= 1)
            for (int kt = 0; kt < ktiles; kt++, it++) {
                const int s = it % STAGES;
                bar_wait(&full[s], (it / STAGES) & 1);
                wgmma_fence();
                const unsigned char *a = sa + s * kStageA + cw * 64 * kBK, *b = sb + s * kStageB;
                if (kt == 0) wgmma_stage<true>(d, a, b);
                else wgmma_stage<false>(d, a, b);
                wgmma_commit();
                // The previous stage's products are done: hand its slot back.
                wgmma_wait<1>();
                if (kt > 0 && lane0) bar_arrive(&empty[(it - 1) % STAGES]);
            }
            wgmma_wait<0>();
            fence_regs(d);
            if (lane0) bar_arrive(&empty[(it - 1) % STAGES]);
            float *sc = scales + cw * (BN + 64), *sr = sc + BN;
            // The warpgroup's reads of the previous tile's scales are done.
            asm volatile("bar.sync %0, 128;" ::"r"(2 + cw) : "memory");
            *reinterpret_cast<float2 *>(sc + 2 * t) = csv;
            if (t < 64) sr[t] = rsv;
            asm volatile("bar.sync %0, 128;" ::"r"(2 + cw) : "memory");
            if (p.out_dtype == TOPS_DT_F32) epilogue<float, BN>(p, d, row0, col0, vec_stores != 0, sc, sr);
            else if (p.out_dtype == TOPS_DT_F16) epilogue<__half, BN>(p, d, row0, col0, vec_stores != 0, sc, sr);
            else epilogue<__nv_bfloat16, BN>(p, d, row0, col0, vec_stores != 0, sc, sr);
        }
    }
#else
    (void)map_a, (void)map_b, (void)p, (void)vec_stores;
#endif
}

template <int BN, int STAGES>
constexpr size_t gemm_smem() {
    return (size_t)STAGES * (size_t)(kBM + BN) * kBK + 2 * STAGES * sizeof(uint64_t) + 2 * (BN + 64) * sizeof(float) +
           1024;
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

// A [rows, k] e4m3 matrix (row stride ld bytes) read as [box_rows][128] tiles.
bool make_map(CUtensorMap *map, const void *base, int rows, int k, long long ld, int box_rows) {
    PFN_cuTensorMapEncodeTiled_v12000 enc = encode_fn();
    if (!enc) return false;
    cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)ld};
    cuuint32_t box[2] = {(cuuint32_t)kBK, (cuuint32_t)box_rows}, estr[2] = {1, 1};
    return enc(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void *>(base), dims, strides, box, estr,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int BN, int STAGES>
cudaError_t launch_gemm(const CUtensorMap &ma, const CUtensorMap &mb, GemmParams p, int vec, int sms,
                        cudaStream_t stream, const char **what) {
    auto kernel = fp8_gemm_kernel<BN, STAGES>;
    const size_t smem = gemm_smem<BN, STAGES>();
    // Above 48 KB a kernel needs its limit raised, once per device (so that
    // calls captured into a graph later make no such call).
    static unsigned char raised[64];
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess && (dev < 0 || dev >= 64 || !raised[dev])) {
        err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (err == cudaSuccess && dev >= 0 && dev < 64) raised[dev] = 1;
    }
    if (err != cudaSuccess) {
        *what = "raising the FP8 GEMM's shared-memory limit";
        return err;
    }
    p.tiles_m = (p.m + kBM - 1) / kBM;
    p.tiles_n = (p.n + BN - 1) / BN;
    const long long tiles = (long long)p.tiles_m * p.tiles_n;
    if (tiles > 0x7FFFFFFF) {
        *what = "the FP8 GEMM's tile count";
        return cudaErrorInvalidValue;
    }
    // One CTA per SM (the ring takes most of the shared memory);
    // TOPS_CUDA_FP8_CTAS overrides the count for A/B runs (a count >= the
    // tiles gives one CTA per tile).
    long long ctas = sms > 0 ? sms : 132;
    const char *e = getenv("TOPS_CUDA_FP8_CTAS");
    if (e && atoll(e) > 0) ctas = atoll(e);
    if (ctas > tiles) ctas = tiles;
    kernel<<<(unsigned)ctas, kThreads, smem, stream>>>(ma, mb, p, vec);
    err = cudaGetLastError();
    if (err != cudaSuccess) *what = "the FP8 GEMM launch";
    return err;
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
    const unsigned qblocks = (unsigned)((a->m + kQuantRows - 1) / kQuantRows);
    if (a->x_bf16)
        quant_rows_kernel<__nv_bfloat16><<<qblocks, 32 * kQuantRows, 0, stream>>>(
            static_cast<const __nv_bfloat16 *>(a->x), a->ldx, (int)a->m, (int)a->k, (int)a->k_pad, vec, ws,
            row_scale);
    else
        quant_rows_kernel<__half><<<qblocks, 32 * kQuantRows, 0, stream>>>(
            static_cast<const __half *>(a->x), a->ldx, (int)a->m, (int)a->k, (int)a->k_pad, vec, ws, row_scale);
    err = cudaGetLastError();
    if (err != cudaSuccess) *what = "the activation quantization launch";

    constexpr int bn = 256;
    CUtensorMap ma, mb;
    if (err == cudaSuccess && (!make_map(&ma, ws, (int)a->m, (int)a->k, a->k_pad, kBM) ||
                               !make_map(&mb, f->weights, (int)a->n, (int)a->k, a->k_pad, bn))) {
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
        p.tiles_m = p.tiles_n = 0;
        // Pair stores (even columns) need every row start 2-element aligned.
        const size_t esz = a->out_dtype == TOPS_DT_F32 ? 4 : 2;
        const int vec = a->ldo % 2 == 0 && (uintptr_t)a->out % (2 * esz) == 0;
        err = launch_gemm<bn, 4>(ma, mb, p, vec, a->sm_count, stream, what);
    }
    cudaError_t e2 = cudaFreeAsync(ws, stream);
    if (err == cudaSuccess && e2 != cudaSuccess) {
        err = e2;
        *what = "cudaFreeAsync of the FP8 activation workspace";
    }
    return (int)err;
}
