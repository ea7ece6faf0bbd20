// Relaxed FP8 matmul for large M on Hopper (sm_90a):
//   1. quant_rows: each activation row (f16/bf16) becomes e4m3 codes with one
//      f32 scale s = amax / 448 (codes = e4m3_satfinite_rne(x / s)), written to
//      a stream-ordered workspace [M, k_pad];
//   2. fp8_gemm: 128 x N output tiles on wgmma m64nNk32 e4m3 x e4m3 -> f32,
//      N = 128, 192 or 256 channels by the waves over the SMs (pick_tiles).
//      One producer thread feeds a ring of shared-memory stages through TMA
//      (cp.async.bulk.tensor, 128-byte swizzle, out-of-bounds rows and K read
//      as zeros, so ragged M/N/K need no padding); two consumer warpgroups
//      each own 64 rows of the tile.  The epilogue multiplies by the row
//      scale, the channel scale and the tensor scale and stores with the
//      op's mode into f32/f16/bf16.  Overwriting aligned outputs, the
//      persistent kernel runs (one CTA per SM, TMA stores; by default in
//      clusters of two that share the weight tile by TMA multicast; stream-K
//      for a last partial wave on request, without clusters); accumulate or
//      unaligned rows, one CTA per tile.
// The same GEMM runs strict 16-bit matmuls (tops__cu_h16_launch): f16 /
// bf16 activations read by TMA as they are, against f16 / bf16 weights or
// e4m3-ch / e4m3 codes that the consumers convert in shared memory (wgmma
// m64nNk16, the same tile widths).
// The Hopper instructions exist only in the sm_90a pass; the sm_80 pass
// builds empty kernels that the plan never launches (matmul.c asks for
// compute capability 9.0 before it packs the FP8 layout).
#include "cuda/cuda_internal.h"
#include "cuda/kernels.cuh"
#include "cuda/sm90.cuh"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <cstdio>

#ifdef TOPS_CU_WGMMA
#define TOPS_FP8_WGMMA 1
#endif

namespace {

constexpr int kBM = 128;       // tile rows (tokens): two consumer warpgroups of 64
constexpr int kBK = 128;       // K per stage: one 128-byte swizzle row of e4m3
constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
constexpr int kRsSlot = 2 * 256 * 4; // rescaled groups: a stage's ratio rows (two of 256 channels)
constexpr int kRsStages = 4;         // rescaled groups: ring stages

// Operand types of the GEMM: e4m3 codes (the relaxed FP8 path), or f16 /
// bf16 (plain 16-bit weights, strict).  A stage is 128 bytes of K a row
// either way (one 128-byte swizzle row): 128 e4m3 or 64 16-bit elements.
enum { kE4M3 = 0, kF16 = 1, kBF16 = 2 };
template <int ET>
constexpr int stage_k() { return ET == kE4M3 ? kBK : kBK / 2; }

// The sizes of a shared-memory ring (Ring below).
template <int BN, int STAGES, int CL, int ET, int CV, int NC>
struct RingDims {
    static_assert(!CV || (CL == 1 && ET != kE4M3), "converted weights: 16-bit operands, no clusters");
    static constexpr int kKS = stage_k<ET>(), kBN = BN; // K elements a stage, channels a tile
    static constexpr int kStageA = kBM * kBK, kStageB = BN * (CV ? kKS : kBK), kSlot = BN * kBK;
    static constexpr int kSlots = CV ? NC : 1; // converted slots (CV; 1: none, a modulus that is never used)
    static constexpr int kBytes = STAGES * (kStageA + kStageB) + (CV ? kSlots * kSlot : 0), kBars = 2 * STAGES;
};

struct GemmParams {
    const float *row_scale;     // [m]
    const float *ch_scale;      // [n] or NULL (plain e4m3: tensor scale only)
    float global;
    void *out;
    long long ldo;
    int out_dtype, accumulate;
    int m, n, k;
    int tiles_m, tiles_n;
    int lag;      // persistent kernel: the second consumer warpgroup starts one K stage late
    int dp_tiles; // persistent kernel: tiles done whole; stream-K splits the K stages of the rest
                  // (clusters: the tile pairs)
    int share_b;  // clusters: the two CTAs share the weight tile (row-tile pairs), else the activation tile
    int a_rows;   // rows of the activation box (CL = 1): kBM, or M rounded up to 8 below kBM (no zero-fill)
    unsigned *flags;  // stream-K: per CTA, 1 once its partial tile is in partials (zeroed by quant_rows)
    float *partials;  // stream-K: per CTA one 128 x 256 f32 partial tile, in accumulator order
    // Rescaled groups (RS > 0 kernels): r_g of channel c at (c, g) of
    // ratio_map, a [groups][n_ld] f32 plane read as boxes of one row of 256
    // channels (Ring::consume_rs), groups of gstages stages (RS = 1).  The
    // kernels take p as __grid_constant__: TMA reads the map where it lies.
    CUtensorMap ratio_map;
    int gstages;
    // From kBM rows, where the last row tile has at most 64 rows: the
    // activations as boxes of 64 rows, which that tile loads (a64 = 1).
    CUtensorMap map_a64;
    int a64;
};

// ---- activations to e4m3 ---------------------------------------------------

__device__ __forceinline__ float load_act(const __half *x, long long i) { return __half2float(x[i]); }
__device__ __forceinline__ float load_act(const __nv_bfloat16 *x, long long i) { return __bfloat162float(x[i]); }

// 8 consecutive activations as they are stored (zeros past k): the
// register-resident rows keep 16 bytes per 8 values, not 32 as f32.
template <typename T>
__device__ __forceinline__ uint4 load8_raw(const T *row, int k0, int k, bool vec) {
    if (vec && k0 + 8 <= k) return *reinterpret_cast<const uint4 *>(row + k0);
    const unsigned short *h = reinterpret_cast<const unsigned short *>(row);
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = (k0 + 2 * i < k ? (uint32_t)h[k0 + 2 * i] : 0u) |
               (k0 + 2 * i + 1 < k ? (uint32_t)h[k0 + 2 * i + 1] << 16 : 0u);
    return make_uint4(w[0], w[1], w[2], w[3]);
}
template <typename T>
__device__ __forceinline__ void unpack8(const uint4 &u, float v[8]) {
    const T *h = reinterpret_cast<const T *>(&u);
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = load_act(h, i);
}

// 8 consecutive activations as f32 (zeros past k).
template <typename T>
__device__ __forceinline__ void load8(const T *row, int k0, int k, bool vec, float v[8]) {
    unpack8<T>(load8_raw(row, k0, k, vec), v);
}

// Eight activations as e4m3 codes of v / s (FORMATS.md: x / s rounded to
// f32, then e4m3 satfinite RNE).  fast: v * r with one FMA correction step
// (r = 1 / s rounded), which equals the correctly rounded v / s for every
// f16 and bf16 input once 2^-60 <= amax < inf (checked exhaustively on the
// host; below, only quotients under 2^-12 differ, whose code is 0 either
// way): it saves the division's ~8 instructions per element.
__device__ __forceinline__ uint2 codes8(const float v[8], float s, float r, bool fast) {
    uint32_t w[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        uint32_t b = 0;
#pragma unroll
        for (int j = 0; j < 4; j += 2) {
            float a[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const float x = v[4 * i + j + h];
                if (fast) {
                    const float q0 = x * r;
                    a[h] = __fmaf_rn(__fmaf_rn(-q0, s, x), r, q0);
                } else {
                    a[h] = s > 0.0f ? x / s : 0.0f;
                }
            }
            __nv_fp8x2_storage_t p = __nv_cvt_float2_to_fp8x2(make_float2(a[0], a[1]), __NV_SATFINITE, __NV_E4M3);
            b |= (uint32_t)p << (8 * j);
        }
        w[i] = b;
    }
    return make_uint2(w[0], w[1]);
}

constexpr int kQuantRowThreads = 256;

// The values of 8 e4m3 codes summed in f32 (exact: multiples of 2^-9 below
// 2^12), in a fixed order.
__device__ __forceinline__ float sum_codes8(uint2 c) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t w = i < 2 ? c.x : c.y;
        const __half2_raw h =
            __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)((w >> (16 * (i & 1))) & 0xFFFFu), __NV_E4M3);
        const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&h));
        s += f.x + f.y;
    }
    return s;
}

// Chunk ch's sum of a row (kernels.cuh: ActSums) as -S/2 in f16 hi + lo.
__device__ __forceinline__ void put_chunk_sum(const tops_cu::ActSums &a, int row, int ch, float sum) {
    const int r = row % a.tn, j = ch % TOPS__CU_Q8_SBLOCK;
    unsigned char *line =
        a.out + (((size_t)(row / a.tn) * a.blocks + ch / TOPS__CU_Q8_SBLOCK) * a.tn + r) * 128 + (j % 8) * 2;
    const float v = -0.5f * sum;
    const __half hi = __float2half_rn(v), lo = __float2half_rn(v - __half2float(hi));
    *reinterpret_cast<__half *>(line + ((j / 8) ^ (r & 7)) * 16) = hi;
    *reinterpret_cast<__half *>(line + ((4 + j / 8) ^ (r & 7)) * 16) = lo;
}

// A 16-thread group's chunk sum (every lane of the warp calls it), stored
// by its first lane for chunks below nch.
__device__ __forceinline__ void chunk_sum(const tops_cu::ActSums &a, int row, int tid, int k0, int nch, uint2 codes) {
    float s = sum_codes8(codes);
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const int ch = k0 / TOPS__CU_Q8_CHUNK_K;
    if ((tid & 15) == 0 && ch < nch) put_chunk_sum(a, row, ch, s);
}

// Zeros for a row's chunks [c0, blocks x 32) (a padding row: c0 = 0).
__device__ __forceinline__ void zero_chunk_sums(const tops_cu::ActSums &a, int row, int tid, int c0) {
    for (int ch = c0 + tid; ch < a.blocks * TOPS__CU_Q8_SBLOCK; ch += kQuantRowThreads)
        put_chunk_sum(a, row, ch, 0.0f);
}

// R rows per block of 256 R threads (256 a row): amax, then codes.
// Columns k..k_pad-1 get zero codes.  NV > 0: the row (k_pad <= 8 NV 256)
// is read once, all NV 16-byte loads of a thread in flight together, and
// kept in registers as loaded (up to K = 4096 within 32 registers: every
// warp slot of an SM filled); NV = 0: any K, read twice (the second time
// mostly from L1/L2).  SUMS (wgmma_q8.cu's int4 chunk sums, kernels.cuh
// ActSums) needs more than 32 registers (ptxas spilled at NV = 1, 2): at
// most 64, half an SM's warp slots, which the q8 kernel's int4 grids (a row
// a block, or 2 rows a block from M = 65) fill only past M = 528.
template <typename T, int NV, bool SUMS>
__global__ void __launch_bounds__(1024, (NV == 1 || NV == 2) && !SUMS ? 2 : 1)
    quant_rows_kernel(const T *x, long long ldx, int m, int k, int k_pad, int vec, unsigned char *q, float *scales,
                      unsigned *flags, int nflags, int fast_ok, tops_cu::ActSums sums) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // The GEMM (a programmatic dependent) may start its blocks on the SMs
    // this grid leaves; it waits for our writes before reading them.
    tops_cu::sm90::grid_dep_launch();
#endif
    const int rows_here = blockDim.x / kQuantRowThreads, slot = threadIdx.x / kQuantRowThreads;
    const int tid = threadIdx.x % kQuantRowThreads, row = blockIdx.x * rows_here + slot;
    const bool live = row < m; // a last block's spare rows still meet at the barrier
    // The GEMM's stream-K flags start at 0 in every call.
    if (blockIdx.x == 0)
        for (int i = threadIdx.x; i < nflags; i += blockDim.x) flags[i] = 0;
    const T *xr = x + (long long)(live ? row : 0) * ldx;
    constexpr int kR = NV > 0 ? NV : 1;
    float amax = 0.0f;
    uint4 raw[kR];
    if (NV > 0) {
#pragma unroll
        for (int c = 0; c < kR; c++) {
            const int k0 = (tid + c * kQuantRowThreads) * 8;
            raw[c] = live && k0 < k ? load8_raw(xr, k0, k, vec != 0) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int c = 0; c < kR; c++) {
            float v[8];
            unpack8<T>(raw[c], v);
#pragma unroll
            for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(v[i]));
        }
    } else if (live) {
        for (int k0 = tid * 8; k0 < k; k0 += kQuantRowThreads * 8) {
            float v[8];
            load8(xr, k0, k, vec != 0, v);
#pragma unroll
            for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(v[i]));
        }
    }
    constexpr int kRowWarps = kQuantRowThreads / 32;
    __shared__ float red[1024 / 32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = amax;
    __syncthreads();
    if (!live) {
        if (SUMS && row < sums.rows) zero_chunk_sums(sums, row, tid, 0); // a padding row of the last tile
        return;
    }
    const int nch = (k + TOPS__CU_Q8_CHUNK_K - 1) / TOPS__CU_Q8_CHUNK_K;
    if (SUMS) zero_chunk_sums(sums, row, tid, nch);
    amax = red[slot * kRowWarps];
    for (int w = 1; w < kRowWarps; w++) amax = fmaxf(amax, red[slot * kRowWarps + w]);
    // s = amax / 448 in f32 (correctly rounded division, as the host's reference does).
    const float s = amax / 448.0f, r = 1.0f / s;
    const bool fast = fast_ok && amax >= 0x1p-60f && amax <= 3.4028234664e38f;
    if (tid == 0) scales[row] = s;
    unsigned char *qr = q + (long long)row * k_pad;
    if (NV > 0) {
#pragma unroll
        for (int c = 0; c < kR; c++) {
            const int k0 = (tid + c * kQuantRowThreads) * 8;
            float v[8];
            unpack8<T>(raw[c], v);
            const uint2 cw = codes8(v, s, r, fast);
            if (k0 < k_pad) *reinterpret_cast<uint2 *>(qr + k0) = cw;
            if (SUMS) chunk_sum(sums, row, tid, k0, nch, cw);
        }
    } else {
        // Whole-row trips, so that a warp's lanes meet at the sums' shuffles.
        for (int b0 = 0; b0 < k_pad; b0 += kQuantRowThreads * 8) {
            const int k0 = b0 + tid * 8;
            float v[8];
            load8(xr, k0, k, vec != 0, v);
            const uint2 cw = codes8(v, s, r, fast);
            if (k0 < k_pad) *reinterpret_cast<uint2 *>(qr + k0) = cw;
            if (SUMS) chunk_sum(sums, row, tid, k0, nch, cw);
        }
    }
}

// The kernel for nv 16-byte loads a thread (0: the loop kernel; nv > 0 only
// with fast set, so the register kernels get fast = 1 as before).
template <typename T, bool SUMS>
void launch_quant_nv(int nv, dim3 grid, dim3 block, cudaStream_t stream, const T *x, long long ldx, int m, int k,
                     int k_pad, int vec, unsigned char *q, float *scales, unsigned *flags, int nflags, int fast,
                     tops_cu::ActSums sums) {
    const auto kernel = nv == 1             ? quant_rows_kernel<T, 1, SUMS>
                        : nv == 2           ? quant_rows_kernel<T, 2, SUMS>
                        : nv > 0 && nv <= 4 ? quant_rows_kernel<T, 4, SUMS>
                                            : quant_rows_kernel<T, 0, SUMS>;
    kernel<<<grid, block, 0, stream>>>(x, ldx, m, k, k_pad, vec, q, scales, flags, nflags, fast, sums);
}

// The quantizer: register-resident rows up to K = 8192, 16 bytes per 8
// values (f32 copies made twice from them: 32 registers, full occupancy;
// H200 ncu, M = 4096, K = 4096, 1 row a block: 21.8 us with the rows held
// as f32 at 52 registers, 14.9 us so).  debug key fp8_quant=0 runs the
// previous one (any K read twice, a division per element) for A/B runs and
// tests.  `rows` a block (debug key quant_rows: 1, 2 or 4 overrides).
template <typename T>
cudaError_t launch_quant(const T *x, long long ldx, int k, int k_pad, int vec, unsigned char *q, float *scales,
                         unsigned *flags, int nflags, int m, int rows_dflt, tops_cu::ActSums sums,
                         cudaStream_t stream) {
    const int fast = tops__cu_tune(TOPS__CU_T_FP8_QUANT) != 0;
    const long long rows_env = tops__cu_tune(TOPS__CU_T_QUANT_ROWS);
    const int rows = rows_env == 1 || rows_env == 2 || rows_env == 4 ? (int)rows_env
                     : rows_dflt == 2 || rows_dflt == 4                ? rows_dflt
                                                                      : 1;
    const int nv = fast ? (k_pad + 8 * kQuantRowThreads - 1) / (8 * kQuantRowThreads) : 0;
    const int covered = sums.out && sums.rows > m ? sums.rows : m; // the sums' padding rows too
    const dim3 grid((unsigned)((covered + rows - 1) / rows)), block((unsigned)(rows * kQuantRowThreads));
    if (sums.out)
        launch_quant_nv<T, true>(nv, grid, block, stream, x, ldx, m, k, k_pad, vec, q, scales, flags, nflags, fast,
                                 sums);
    else
        launch_quant_nv<T, false>(nv, grid, block, stream, x, ldx, m, k, k_pad, vec, q, scales, flags, nflags, fast,
                                  sums);
    return cudaGetLastError();
}

// ---- the GEMM -------------------------------------------------------------------

#ifdef TOPS_FP8_WGMMA
using namespace tops_cu::sm90;


#define TOPS_D128_OUT                                                                                                   \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),        \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),          \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),         \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),         \
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),         \
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),         \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),         \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),         \
        "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]),         \
        "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]),         \
        "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]),         \
        "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]),         \
        "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),    \
        "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), \
        "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), \
        "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define TOPS_D128_REGS "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"
#define TOPS_D64_OUT                                                                                                    \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),        \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),          \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),         \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),         \
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),         \
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),         \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),         \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define TOPS_D64_REGS "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"

#define TOPS_D96_OUT "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define TOPS_D96_REGS "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}"
#define TOPS_D48_OUT "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define TOPS_D48_REGS "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}"

// D[64 x BN] += A[64 x k] * B[BN x k]^T, both K-major from shared memory
// (k = 32 for e4m3, 16 for f16 / bf16), BN = 256, 192, 128 or 96: one
// overload per accumulator count R = BN / 2 (descriptors: operands R, R + 1).
#define TOPS_WGMMA_SS(R, N, A, B)                                                                                 \
    template <int ET>                                                                                             \
    __device__ __forceinline__ void wgmma_ss(float(&d)[R], uint64_t da, uint64_t db) {                           \
        if constexpr (ET == kE4M3)                                                                                \
            asm volatile("wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 " TOPS_D##R##_REGS             \
                         ", %" #A ", %" #B ", 1, 1, 1;\n"                                                         \
                         : TOPS_D##R##_OUT                                                                        \
                         : "l"(da), "l"(db));                                                                     \
        else if constexpr (ET == kF16)                                                                            \
            asm volatile("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16 " TOPS_D##R##_REGS               \
                         ", %" #A ", %" #B ", 1, 1, 1, 0, 0;\n"                                                   \
                         : TOPS_D##R##_OUT                                                                        \
                         : "l"(da), "l"(db));                                                                     \
        else                                                                                                      \
            asm volatile("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 " TOPS_D##R##_REGS             \
                         ", %" #A ", %" #B ", 1, 1, 1, 0, 0;\n"                                                   \
                         : TOPS_D##R##_OUT                                                                        \
                         : "l"(da), "l"(db));                                                                     \
    }
TOPS_WGMMA_SS(128, 256, 128, 129)
TOPS_WGMMA_SS(96, 192, 96, 97)
TOPS_WGMMA_SS(64, 128, 64, 65)
TOPS_WGMMA_SS(48, 96, 48, 49)
#undef TOPS_WGMMA_SS

// One K stage (128 bytes of each row): four k32 (e4m3) or k16 (16-bit)
// steps, 32 bytes apart inside the swizzled rows, accumulating into d
// (zeroed before the K loop: a scale-d = 0 first stage chosen at run time
// makes ptxas serialize the wgmmas, C7520).
template <int ET, int R>
__device__ __forceinline__ void wgmma_stage(float (&d)[R], const unsigned char *a, const unsigned char *b) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wgmma_ss<ET>(d, desc_sw128(a + 32 * kk), desc_sw128(b + 32 * kk));
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

// Eight e4m3 codes (low byte first) as eight ET values (exact: every e4m3
// value is an f16 and a bf16).
template <int ET>
__device__ __forceinline__ uint4 cvt8_e4m3(uint2 v) {
    uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const unsigned short pair = (unsigned short)(((i < 2 ? v.x : v.y) >> (16 * (i & 1))) & 0xFFFFu);
        uint32_t h;
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(pair));
        if constexpr (ET == kBF16) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&h));
            const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
            h = *reinterpret_cast<const uint32_t *>(&b);
        }
        o[i] = h;
    }
    return make_uint4(o[0], o[1], o[2], o[3]);
}

// The shared-memory ring: STAGES x (A tile [kBM][kBK], B tile [BN][kBK]),
// 128-byte swizzled, with full (TMA bytes landed) and empty (all 8 consumer
// warps done reading) barriers per slot.  `it` counts stages across tiles,
// so a persistent CTA keeps the ring's position from one tile to the next.
// CL = 2: a cluster of two CTAs whose tiles share one operand (Share below);
// each CTA loads half of it into both CTAs' slots (TMA multicast), so a slot
// is free again only once the consumers of both CTAs are done with it: the
// empty barriers count both CTAs' consumer warps.
// CV = 1 (16-bit ET, CL = 1): the weights arrive as e4m3 codes [BN][64]
// (64 bytes of K a row, unswizzled); the consumers convert each stage into
// one of NC = 3 slots of ET [BN][64] (128-byte swizzled, what wgmma reads):
// stage it + 1 while the wgmmas of stage it run (consume_cv).
template <int BN, int STAGES, int CL = 1, int ET = kE4M3, int CV = 0, int NC = 3>
struct Ring : RingDims<BN, STAGES, CL, ET, CV, NC> {
    using D = RingDims<BN, STAGES, CL, ET, CV, NC>;
    using D::kKS, D::kStageA, D::kStageB, D::kSlot, D::kSlots, D::kBytes, D::kBars;
    unsigned char *sa, *sb, *sc;
    uint64_t *full, *empty;
    uint32_t a_tx; // activation bytes a stage (one CTA): rows of the A box x 128
    int m;         // the activations' rows
    const CUtensorMap *ma64; // GemmParams::map_a64 where a64, else NULL
    __device__ Ring(unsigned char *base, uint64_t *bars, const GemmParams &p)
        : sa(base), sb(base + STAGES * kStageA), sc(base + STAGES * (kStageA + kStageB)), full(bars),
          empty(bars + STAGES), a_tx((uint32_t)p.a_rows * kBK), m(p.m), ma64(p.a64 ? &p.map_a64 : nullptr) {}
    __device__ void init() const {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 8 * CL); // one arrive per consumer warp of the cluster
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    // The 256 consumer threads' share of stage it's codes into slot it % NS
    // (8 codes -> one 16-byte swizzled chunk: a warp's lanes read 256
    // contiguous bytes and write 4 whole rows); all loads first.
    __device__ __forceinline__ void convert(unsigned it) const {
        constexpr int kPer = BN * 8 / 256;
        const int t = (int)threadIdx.x - 128;
        const unsigned char *src = sb + (it % STAGES) * kStageB;
        unsigned char *dst = sc + (it % kSlots) * kSlot;
        uint2 v[kPer];
#pragma unroll
        for (int i = 0; i < kPer; i++) {
            const int q = t + 256 * i;
            v[i] = *reinterpret_cast<const uint2 *>(src + (q >> 3) * 64 + (q & 7) * 8);
        }
#pragma unroll
        for (int i = 0; i < kPer; i++) {
            const int q = t + 256 * i, r = q >> 3;
            *reinterpret_cast<uint4 *>(dst + r * 128 + (((q & 7) ^ (r & 7)) << 4)) = cvt8_e4m3<ET>(v[i]);
        }
        fence_proxy_async(); // these generic-proxy writes, before wgmma (async proxy) reads them
    }
    // What a CTA of a cluster loads: the shared operand's half `rank` into
    // every CTA (share_b: the weight tile, the CTAs on row tiles tm of one
    // column tile; else the activation tile, on column tiles of one row
    // tile), and its own operand unless it has no tile this step (ghost: the
    // partner's tile is the last of an odd count; it still loads its half).
    struct Share {
        bool share_b, ghost;
        uint32_t rank;
    };
    // Rescaled groups (consume_rs): the ratio rows a stage needs, loaded by
    // TMA into its slot of `slots` (kRsSlot bytes a stage, 128-byte aligned)
    // on its full barrier: RS = 2 rows 2 kt and 2 kt + 1; RS = 1 row
    // kt / gstages where a group begins; columns col0 .. col0 + BN - 1.
    // (1-D bulk copies or cp.async gave the same results, but
    // compute-sanitizer racecheck reported hazards between them and the
    // consumers' reads; it accepts the tensor copies, as for the operands.)
    struct RsFeed {
        const CUtensorMap *map;
        int col0, rs, gstages;
        unsigned char *slots;
    };
    // One CTA's activation tile of stage kt into a, on bar: one box of
    // a_tx / kBK rows, or (ma64) a box of 64 for a row tile with no rows
    // past the first 64 (TMA's zero fill of rows past M measured slow: H200,
    // f16 weights, K = 4096, N = 12288, M = 192: 45.5 us with a box of 128
    // rows, 37.6 with 64 for the second row tile; two boxes of 64 for every
    // tile cost 3-10 % at M = 128 and 256).  The bytes it brings: a_bytes.
    __device__ __forceinline__ bool half_a(int tm) const { return ma64 && tm * kBM + 64 >= m; }
    __device__ __forceinline__ uint32_t a_bytes(int tm) const { return half_a(tm) ? 64 * kBK : a_tx; }
    __device__ __forceinline__ void load_a(unsigned char *a, const CUtensorMap *ma, uint64_t *bar, int kt,
                                           int tm) const {
        tma_load_2d(a, half_a(tm) ? ma64 : ma, bar, kt * kKS, tm * kBM);
    }
    // Producer thread: K stages k0 .. k1 - 1 of tile (tm, tn).
    __device__ __forceinline__ void produce(const CUtensorMap *ma, const CUtensorMap *mb, int tm, int tn, int k0,
                                            int k1, unsigned &it, Share sh = Share{true, false, 0},
                                            RsFeed rf = RsFeed{nullptr, 0, 0, 0, nullptr}) const {
        for (int kt = k0; kt < k1; kt++, it++) {
            const unsigned s = it % STAGES;
            if (it >= STAGES) mbar_wait(&empty[s], ((it / STAGES) + 1) & 1);
            unsigned char *a = sa + s * kStageA, *b = sb + s * kStageB;
            // Rescaled groups: the stage's ratio rows, counted in its expect_tx.
            constexpr uint32_t row = BN * 4;
            const int rows = !rf.map ? 0 : rf.rs == 2 ? 2 : kt % rf.gstages == 0 ? 1 : 0;
            const uint32_t rtx = (uint32_t)rows * row;
            if constexpr (CL == 1) {
                mbar_expect_tx(&full[s], a_bytes(tm) + kStageB + rtx);
                load_a(a, ma, &full[s], kt, tm);
                tma_load_2d(b, mb, &full[s], kt * kKS, tn * BN);
            } else {
                constexpr uint16_t all = (1u << CL) - 1;
                // Every CTA's full barrier expects the whole shared operand
                // (its halves land from both CTAs) and its own one.
                if (sh.share_b) {
                    mbar_expect_tx(&full[s], (sh.ghost ? 0 : a_bytes(tm)) + kStageB + rtx);
                    if (!sh.ghost) load_a(a, ma, &full[s], kt, tm);
                    tma_load_2d_multicast(b + sh.rank * (kStageB / CL), mb, &full[s], kt * kKS,
                                          tn * BN + (int)sh.rank * (BN / CL), all);
                } else {
                    mbar_expect_tx(&full[s], kStageA + (sh.ghost ? 0 : kStageB) + rtx);
                    tma_load_2d_multicast(a + sh.rank * (kStageA / CL), ma, &full[s], kt * kKS,
                                          tm * kBM + (int)sh.rank * (kBM / CL), all);
                    if (!sh.ghost) tma_load_2d(b, mb, &full[s], kt * kKS, tn * BN);
                }
            }
            for (int q = 0; q < rows; q++) // rows > 0: rf.rs is 2, or 1 with gstages > 0
                tma_load_2d(rf.slots + s * kRsSlot + q * row, rf.map, &full[s], rf.col0,
                            (rf.rs == 2 ? 2 * kt : kt / rf.gstages) + q);
        }
    }
    // A slot's release: an arrive on its empty barrier in every CTA that writes into it.
    __device__ __forceinline__ void release(unsigned s, uint32_t rank) const {
        mbar_arrive(&empty[s]);
        if constexpr (CL > 1)
            for (uint32_t r = 0; r < CL; r++)
                if (r != rank) mbar_arrive_cluster(&empty[s], r);
    }
    // Consumer warpgroup cw: rows 64 cw .. + 63 of one tile, K stages k0 ..
    // k1 - 1 (k1 > k0), into d (zeroed here); every slot read is handed
    // back.  first_done (or NULL) gets one arrive per warp once the first
    // stage's products are done.  ghost (clusters): no tile, the stages are
    // only waited for and handed back.
    __device__ __forceinline__ void consume(float (&d)[BN / 2], int cw, int k0, int k1, unsigned &it,
                                            uint64_t *first_done = nullptr, bool ghost = false,
                                            uint32_t rank = 0) const {
        const bool lane0 = (threadIdx.x & 31) == 0;
        if (ghost) {
            for (int kt = k0; kt < k1; kt++, it++) {
                mbar_wait(&full[it % STAGES], (it / STAGES) & 1);
                if (lane0) release(it % STAGES, rank);
            }
            return;
        }
#pragma unroll
        for (int i = 0; i < BN / 2; i++) d[i] = 0.0f;
        for (int kt = k0; kt < k1; kt++, it++) {
            const unsigned s = it % STAGES;
            mbar_wait(&full[s], (it / STAGES) & 1);
            wgmma_fence();
            const unsigned char *a = sa + s * kStageA + cw * 64 * kBK, *b = sb + s * kStageB;
            wgmma_stage<ET>(d, a, b);
            wgmma_commit();
            // The previous stage's products are done: hand its slot back.
            wgmma_wait<1>();
            if (kt > k0 && lane0) release((it - 1) % STAGES, rank);
            if (kt == k0 + 1 && first_done && lane0) mbar_arrive(first_done);
        }
        wgmma_wait<0>();
        fence_regs(d);
        if (lane0) release((it - 1) % STAGES, rank);
        if (k1 - k0 == 1 && first_done && lane0) mbar_arrive(first_done);
    }
    // consume() for converted weights (CV): both consumer warpgroups convert
    // stage it + 1 while the wgmmas of stage it run, then meet at a barrier
    // (named barrier 1, 256 threads) before those of it + 1 are issued.  The
    // slot converted into was last read by the wgmmas of stage it - 2, which
    // every consumer waited for before the previous barrier.  idle: this
    // warpgroup's rows all lie past M; it converts and meets, issuing no
    // wgmma (d stays 0).
    __device__ __forceinline__ void consume_cv(float (&d)[BN / 2], int cw, int k0, int k1, unsigned &it,
                                               bool idle) const {
        const bool lane0 = (threadIdx.x & 31) == 0;
#pragma unroll
        for (int i = 0; i < BN / 2; i++) d[i] = 0.0f;
        mbar_wait(&full[it % STAGES], (it / STAGES) & 1);
        convert(it);
        asm volatile("bar.sync 1, 256;" ::: "memory");
        for (int kt = k0; kt < k1; kt++, it++) {
            const unsigned s = it % STAGES;
            if (!idle) {
                wgmma_fence();
                wgmma_stage<ET>(d, sa + s * kStageA + cw * 64 * kBK, sc + (it % kSlots) * kSlot);
                wgmma_commit();
            }
            if (kt + 1 < k1) {
                mbar_wait(&full[(it + 1) % STAGES], ((it + 1) / STAGES) & 1);
                convert(it + 1);
            }
            if (!idle) wgmma_wait<1>();
            // Stage it - 1: its activations read (its codes long since converted).
            if (kt > k0 && lane0) release((it - 1) % STAGES, 0);
            asm volatile("bar.sync 1, 256;" ::: "memory");
        }
        if (!idle) {
            wgmma_wait<0>();
            fence_regs(d);
        }
        if (lane0) release((it - 1) % STAGES, 0);
    }
    // consume() for integer codes whose K groups carry their own scales
    // (16-bit operands): the accumulators hold the sum in units of the
    // current group's scale t_g; where group g begins they are multiplied by
    // r_g = t_(g-1) / t_g (f32, per channel) once the wgmmas before have
    // retired, and the epilogue multiplies by the last group's t.  RS = 1:
    // groups of gstages whole stages; RS = 2: two groups a stage (G = 32).
    // The ratios come with the stage (produce's RsFeed) into its slot of
    // `slots`, read from shared memory where they are used: a load into
    // registers ahead of time would hold up every wgmma fence until it lands.
    // turns (both warpgroups have rows in the tile): the two take turns to
    // issue their wgmmas (FA3's ping-pong, named barriers 4 + cw), so that
    // one rescales, with its own wgmmas drained, while the other's run.
    // (Rescaling one channel half while the other half's wgmmas run, the
    // pipe never drained, is not a form ptxas accepts: reading an
    // accumulator between two wgmmas that accumulate into it serializes
    // them, C7514, whichever group the wait retired.)
    template <int RS>
    __device__ __forceinline__ void consume_rs(float (&d)[BN / 2], int cw, int k1, unsigned &it,
                                               const unsigned char *slots, int gstages, uint32_t rank,
                                               bool turns) const {
        static_assert(RS == 1 || RS == 2, "rescaled groups");
        static_assert(CV == 0 && ET != kE4M3, "16-bit operands as they are");
        const bool lane0 = (threadIdx.x & 31) == 0;
        // r of this thread's columns 8 j + 2 (lane % 4) + {0, 1}, those of j
        // and j + 1 in one 16-byte word (rescale_plan's order), loaded before
        // the wait (their latency runs with it) from the shared space (through
        // a generic pointer ptxas emits LD.E with two descriptor moves each).
        auto rescale = [&](const unsigned char *row) {
            const uint32_t r4 = (uint32_t)__cvta_generic_to_shared(row) + 16 * (threadIdx.x & 3);
            float2 rr[BN / 8];
#pragma unroll
            for (int j = 0; j < BN / 8; j += 2)
                asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                             : "=f"(rr[j].x), "=f"(rr[j].y), "=f"(rr[j + 1].x), "=f"(rr[j + 1].y)
                             : "r"(r4 + 32 * j));
            wgmma_wait<0>();
            fence_regs(d);
#pragma unroll
            for (int j = 0; j < BN / 8; j++) {
                const float2 rv = rr[j];
                d[4 * j] *= rv.x, d[4 * j + 1] *= rv.y;
                d[4 * j + 2] *= rv.x, d[4 * j + 3] *= rv.y;
            }
        };
        // A turn: one group's wgmmas (RS = 2: two a stage; RS = 1: a stage).
        // Warpgroup 0 goes first; each arrives on the other's barrier after
        // its issue but for warpgroup 1's last (no turn left to give), so
        // the barriers are balanced within the tile.
        const int nturns = RS == 2 ? 2 * k1 : k1;
        int turn = 0;
        auto take = [&]() {
            if (turns) asm volatile("bar.sync %0, 256;" ::"r"(4 + cw) : "memory");
        };
        auto give = [&]() {
            ++turn;
            if (turns && (cw == 0 || turn < nturns)) asm volatile("bar.arrive %0, 256;" ::"r"(5 - cw) : "memory");
        };
#pragma unroll
        for (int i = 0; i < BN / 2; i++) d[i] = 0.0f;
        if (turns && cw == 1) asm volatile("bar.arrive 4, 256;" ::: "memory");
        for (int kt = 0; kt < k1; kt++, it++) {
            const unsigned s = it % STAGES;
            mbar_wait(&full[s], (it / STAGES) & 1);
            const unsigned char *a = sa + s * kStageA + cw * 64 * kBK, *b = sb + s * kStageB;
            const unsigned char *rs = slots + s * kRsSlot;
            if constexpr (RS == 2) {
                if (kt > 0) rescale(rs);
                take();
                wgmma_fence();
                wgmma_ss<ET>(d, desc_sw128(a), desc_sw128(b));
                wgmma_ss<ET>(d, desc_sw128(a + 32), desc_sw128(b + 32));
                wgmma_commit();
                give();
                rescale(rs + BN * 4);
                take();
                wgmma_fence();
                wgmma_ss<ET>(d, desc_sw128(a + 64), desc_sw128(b + 64));
                wgmma_ss<ET>(d, desc_sw128(a + 96), desc_sw128(b + 96));
                wgmma_commit();
                give();
            } else {
                if (kt > 0 && kt % gstages == 0) rescale(rs);
                take();
                wgmma_fence();
                wgmma_stage<ET>(d, a, b);
                wgmma_commit();
                give();
            }
            wgmma_wait<1>();
            __syncwarp(); // every lane's ratio reads of the slot before lane 0 hands it back
            if (kt > 0 && lane0) release((it - 1) % STAGES, rank);
        }
        wgmma_wait<0>();
        fence_regs(d);
        __syncwarp();
        if (lane0) release((it - 1) % STAGES, rank);
    }
};

__device__ __forceinline__ unsigned char *align1024(unsigned char *p) {
    // 128-byte swizzled tiles want 1024-byte alignment.
    return reinterpret_cast<unsigned char *>(((uintptr_t)p + 1023) & ~(uintptr_t)1023);
}

// Two outputs, converted, into shared memory.
__device__ __forceinline__ void put2(float *o, float a, float b) { *reinterpret_cast<float2 *>(o) = make_float2(a, b); }
__device__ __forceinline__ void put2(__half *o, float a, float b) {
    *reinterpret_cast<__half2 *>(o) = __floats2half2_rn(a, b);
}
__device__ __forceinline__ void put2(__nv_bfloat16 *o, float a, float b) {
    *reinterpret_cast<__nv_bfloat162 *>(o) = __floats2bfloat162_rn(a, b);
}
#endif // TOPS_FP8_WGMMA

// Output staging of the persistent kernel: per consumer warpgroup two boxes
// of 64 rows x 128 bytes (128-byte swizzle), alternately filled and stored.
constexpr int kBoxBytes = 64 * 128;
constexpr int kStagingBytes = 2 * 2 * kBoxBytes;

// One CTA per tile; the epilogue stages f32 through the idle ring and writes
// whole rows with the op's mode (accumulate, any alignment).
template <int BN, int STAGES, int ET, int CV, int RS = 0>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                    const __grid_constant__ GemmParams p, int vec_stores) {
#ifdef TOPS_FP8_WGMMA
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = align1024(smem_raw);
    using R = Ring<BN, STAGES, 1, ET, CV>;
    const R ring(smem, reinterpret_cast<uint64_t *>(smem + R::kBytes), p);
    // Rescaled groups: the ratio slots after the barriers (128-byte aligned: TMA writes them)
    unsigned char *rslots = smem + R::kBytes + (R::kBars * sizeof(uint64_t) + 127) / 128 * 128;

    // Tokens fastest: the CTAs in flight share a few weight column tiles
    // and all of the (smaller) activation codes in L2.
    const int tm = blockIdx.x % p.tiles_m, tn = blockIdx.x / p.tiles_m;
    const int wg = threadIdx.x / 128;
    const int ktiles = (p.k + R::kKS - 1) / R::kKS;
    if (threadIdx.x == 0) ring.init();
    __syncthreads();
    // Launched as a programmatic dependent (slim tiles, after the FP8
    // quantizer or any kernel): the previous kernel's writes (activations,
    // row scales, an output to accumulate into) are read below.
    grid_dep_wait();

    unsigned it = 0;
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (threadIdx.x == 0) {
            if constexpr (RS > 0)
                ring.produce(&map_a, &map_b, tm, tn, 0, ktiles, it, typename R::Share{true, false, 0},
                             typename R::RsFeed{&p.ratio_map, tn * BN, RS, p.gstages, rslots});
            else ring.produce(&map_a, &map_b, tm, tn, 0, ktiles, it);
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        const int cw = wg - 1; // rows 64 * cw .. + 63 of the tile
        float d[BN / 2];
        // A warpgroup whose rows all lie past M only passes the stages on.
        const bool idle = tm * kBM + cw * 64 >= p.m;
        if (idle)
#pragma unroll
            for (int i = 0; i < BN / 2; i++) d[i] = 0.0f;
        if constexpr (CV > 0) {
            if (idle) ring.consume_cv(d, cw, 0, ktiles, it, true); // (two inlined copies: no run-time
            else ring.consume_cv(d, cw, 0, ktiles, it, false);     //  branch among the wgmmas, C7518)
        } else if constexpr (RS > 0) {
            if (idle) ring.consume(d, cw, 0, ktiles, it, nullptr, true);
            else
                ring.template consume_rs<RS>(d, cw, ktiles, it, rslots, p.gstages, 0,
                                             tm * kBM + 64 < p.m);
        } else ring.consume(d, cw, 0, ktiles, it, nullptr, idle);

        // Epilogue through shared memory (the stage ring is idle once both
        // consumer warpgroups are past their last wgmma), so that the global
        // stores are whole rows.  Accumulator i of lane l in warp w is row
        // 16 w + l / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (l % 4) + i % 2;
        // rows padded by 8 floats keep a half-warp's float2 stores off each
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
        // Threads t < kRows x BN / 4: columns 4 (t % (BN / 4)), every kRows-th row.
        constexpr int kRows = 128 / (BN / 4);
        const int t = threadIdx.x & 127;
        const int col = 4 * (t % (BN / 4)), col_g = tn * BN + col;
        float4 cs = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
        if (p.ch_scale && col_g < p.n) {
            cs.x = p.ch_scale[col_g];
            cs.y = col_g + 1 < p.n ? p.ch_scale[col_g + 1] : 0.0f;
            cs.z = col_g + 2 < p.n ? p.ch_scale[col_g + 2] : 0.0f;
            cs.w = col_g + 3 < p.n ? p.ch_scale[col_g + 3] : 0.0f;
        }
        for (int r = t / (BN / 4); r < 64 && t < kRows * (BN / 4); r += kRows) {
            const int row = tm * kBM + cw * 64 + r;
            if (row >= p.m || col_g >= p.n) continue;
            const float rs = (p.row_scale ? p.row_scale[row] : 1.0f) * p.global;
            float4 v = *reinterpret_cast<const float4 *>(c + r * ld + col);
            v.x *= rs * cs.x, v.y *= rs * cs.y, v.z *= rs * cs.z, v.w *= rs * cs.w;
            store4(p, row, col_g, v, vec_stores != 0);
        }
    }
#else
    (void)map_a, (void)map_b, (void)p, (void)vec_stores;
#endif
}

#ifdef TOPS_FP8_WGMMA
// The work of one persistent CTA: tiles blockIdx.x, + gridDim.x, ... below
// dp_tiles whole, then (stream-K) its share of the remaining tiles' K stages:
// those tiles' stages in a row, cut into gridDim.x contiguous ranges, each
// range cut again at tile boundaries into pieces (t, k0, k1).  A piece that
// ends a tile but does not start it adds the partial sums of the CTAs below,
// whose ranges end in that tile.
// Clusters walk tile pairs instead (first = the cluster's index, step = the
// cluster count, tiles = dp_tiles = the pair count: no stream-K), both CTAs
// of a cluster the same pairs.
struct Work {
    int t, k0, k1;
    int next_dp, dp, step, ktiles;
    long long i, e; // this CTA's stream-K stages still to do: [i, e)
    __device__ Work(const GemmParams &p, int ktiles_, int tiles, int first, int step_)
        : next_dp(first), dp(p.dp_tiles), step(step_), ktiles(ktiles_), i(sk_begin(p, ktiles_, tiles, blockIdx.x)),
          e(sk_begin(p, ktiles_, tiles, blockIdx.x + 1)) {}
    static __device__ long long sk_begin(const GemmParams &p, int ktiles, int tiles, int c) {
        return (long long)(tiles - p.dp_tiles) * ktiles * c / gridDim.x;
    }
    __device__ bool next() {
        if (next_dp < dp) {
            t = next_dp, k0 = 0, k1 = ktiles;
            next_dp += step;
            return true;
        }
        // Stream-K pieces last to first: the first one a CTA does is the
        // head of a tile that a later CTA finishes, so a CTA that waits for
        // such heads finds them done or under way (and never waits for a
        // CTA that waits).
        if (e <= i) return false;
        const long long tile_start = (e - 1) / ktiles * ktiles, b = i > tile_start ? i : tile_start;
        t = dp + (int)(tile_start / ktiles), k0 = (int)(b - tile_start), k1 = (int)(e - tile_start);
        e = b;
        return true;
    }
};

// Unit t of the walk as tile (tm, tn): with clusters (CL = 2) unit t is a
// pair of row tiles of one column tile (share_b) or of column tiles of one
// row tile, rank r taking the pair's tile r; false (ghost) where that tile
// lies past the last one (an odd tile count).
template <int CL>
__device__ __forceinline__ bool place(const GemmParams &p, int t, uint32_t rank, int &tm, int &tn) {
    if (CL == 1) {
        tm = t % p.tiles_m, tn = t / p.tiles_m;
        return true;
    }
    if (p.share_b) {
        const int pairs_m = (p.tiles_m + 1) / 2;
        tm = t % pairs_m * 2 + (int)rank, tn = t / pairs_m;
        return tm < p.tiles_m;
    }
    tm = t % p.tiles_m, tn = t / p.tiles_m * 2 + (int)rank;
    return tn < p.tiles_n;
}

__device__ __forceinline__ void flag_release(unsigned *f) {
    asm volatile("st.release.gpu.global.u32 [%0], 1;" ::"l"(f) : "memory");
}
__device__ __forceinline__ unsigned flag_acquire(const unsigned *f) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(f) : "memory");
    return v;
}
#endif

// Persistent: one CTA per SM walks tiles blockIdx.x, + gridDim.x, ...; the
// producer streams the next tile's stages into the 4 x 48 KB ring while the
// consumers run the epilogue, which converts to OutT into the 32 KB staging
// (outside the ring) and writes it by TMA stores, one 64 x 128-byte box at a
// time, each store overlapping the filling of the next box.  Overwrites the
// output (no accumulate); the output map clips ragged M and N.
// CL = 2: launched in clusters of two that share one operand tile per stage
// (Ring, place): half the L2 reads of that operand.
template <typename OutT, int CL, int BN, int STAGES, int ET, int CV, int RS = 0>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_gemm_persistent(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                        const __grid_constant__ CUtensorMap map_c, const __grid_constant__ GemmParams p) {
#ifdef TOPS_FP8_WGMMA
    using R = Ring<BN, STAGES, CL, ET, CV>;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = align1024(smem_raw), *staging = smem + R::kBytes;
    // Rescaled groups: one staging box a warpgroup (the ratio slots take the
    // second's room), the ratio slots after the barriers (128-byte aligned).
    constexpr int kBufs = RS ? 1 : 2, kStaging = 2 * kBufs * kBoxBytes;
    uint64_t *bars = reinterpret_cast<uint64_t *>(staging + kStaging), *lag_bar = bars + R::kBars;
    unsigned char *rslots = staging + kStaging + ((R::kBars + 1) * sizeof(uint64_t) + 127) / 128 * 128;
    const R ring(smem, bars, p);
    const int wg = threadIdx.x / 128;
    const int ktiles = (p.k + R::kKS - 1) / R::kKS, tiles = p.tiles_m * p.tiles_n;
    const uint32_t rank = CL > 1 ? cluster_rank() : 0;
    // Work units: tiles, or with clusters tile pairs (dp_tiles of them).
    const int units = CL > 1 ? p.dp_tiles : tiles, first = (int)blockIdx.x / CL, step = (int)gridDim.x / CL;
    // With several tiles per CTA the second consumer warpgroup may start one
    // K stage late (debug key fp8_lag=1): the warpgroups then reach their
    // epilogues one after the other, and the one still in its K loop keeps
    // the tensor cores busy during the other's epilogue (the lag persists from
    // tile to tile).
    const bool lag = CL == 1 && CV == 0 && p.lag && tiles > (int)gridDim.x;
    if (threadIdx.x == 0) {
        mbar_init(lag_bar, 4); // one arrive per warp of the first consumer warpgroup
        ring.init();
    }
    // With clusters the partner's barriers must exist before its first
    // multicast or remote arrive reaches them.
    if (CL > 1) cluster_sync();
    else __syncthreads();

    unsigned it = 0;
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        // Launched as a programmatic dependent of the quantizer: everything
        // above ran while it finished; its codes and row scales are read below.
        if (threadIdx.x == 0) grid_dep_wait();
        if (threadIdx.x == 0)
            for (Work w(p, ktiles, units, first, step); w.next();) {
                int tm, tn;
                const bool own = place<CL>(p, w.t, rank, tm, tn);
                if constexpr (RS > 0)
                    ring.produce(&map_a, &map_b, tm, tn, w.k0, w.k1, it, typename R::Share{p.share_b != 0, !own, rank},
                                 typename R::RsFeed{&p.ratio_map, tn * BN, RS, p.gstages, rslots});
                else
                    ring.produce(&map_a, &map_b, tm, tn, w.k0, w.k1, it, typename R::Share{p.share_b != 0, !own, rank});
            }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        constexpr int kBoxCols = 128 / (int)sizeof(OutT), kBoxes = BN / kBoxCols, kJ = kBoxCols / 8;
        unsigned nbox = 0; // boxes filled so far (all tiles): box i fills buffer i % 2
        const int cw = wg - 1, lane = threadIdx.x & 31, warp = (threadIdx.x / 32) & 3;
        const bool leader = (threadIdx.x & 127) == 0;
        unsigned char *bufs = staging + cw * kBufs * kBoxBytes;
        const int r0 = warp * 16 + lane / 4; // this thread's rows r0 and r0 + 8 (see below)
        float d[BN / 2];
        grid_dep_wait();
        if (lag && cw == 1) mbar_wait(lag_bar, 0);
        bool first_tile = true;
        for (Work w(p, ktiles, units, first, step); w.next(); first_tile = false) {
            int tm, tn;
            // No tile for this CTA (the partner's stages pass through), or
            // (not stream-K) none of this warpgroup's rows below M: their
            // stores would all be clipped.
            if (!place<CL>(p, w.t, rank, tm, tn) || (!p.partials && tm * kBM + cw * 64 >= p.m)) {
                if constexpr (CV > 0) ring.consume_cv(d, cw, w.k0, w.k1, it, true);
                else ring.consume(d, cw, w.k0, w.k1, it, nullptr, true, rank);
                continue;
            }
            // Scales before the K loop, which hides their latency.  Lane l
            // keeps the channel scales of columns 8 j + 2 (l % 4) + {0, 1} for
            // j = l / 4 + 8 q; the epilogue shuffles them to the lanes that
            // hold those columns.
            float rs[2];
            float2 cs[BN / 64];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = tm * kBM + cw * 64 + r0 + 8 * h;
                rs[h] = row >= p.m ? 0.0f : p.row_scale ? p.row_scale[row] * p.global : p.global;
            }
#pragma unroll
            for (int q = 0; q < BN / 64; q++) {
                const int col = tn * BN + 8 * (lane / 4 + 8 * q) + 2 * (lane & 3);
                cs[q].x = !p.ch_scale ? 1.0f : col < p.n ? p.ch_scale[col] : 0.0f;
                cs[q].y = !p.ch_scale ? 1.0f : col + 1 < p.n ? p.ch_scale[col + 1] : 0.0f;
            }
            if constexpr (CV > 0) ring.consume_cv(d, cw, w.k0, w.k1, it, false);
            else if constexpr (RS > 0) // (no stream-K: whole tiles, w.k0 = 0)
                ring.template consume_rs<RS>(d, cw, w.k1, it, rslots, p.gstages, rank, tm * kBM + 64 < p.m);
            else ring.consume(d, cw, w.k0, w.k1, it, lag && cw == 0 && first_tile ? lag_bar : nullptr, false, rank);

            // Stream-K: a piece that does not end the tile leaves its sums
            // to the CTA whose piece does (a later CTA, which waits for the
            // flag: all CTAs are resident, and no CTA waits before writing
            // its one such piece, the last of its range).
            const int ct = threadIdx.x - 128; // 0 .. 255: both consumer warpgroups
            if (w.k1 < ktiles) {
                float4 *slot = reinterpret_cast<float4 *>(p.partials) + (size_t)blockIdx.x * (kBM * BN / 4);
#pragma unroll
                for (int i = 0; i < BN / 8; i++)
                    __stcg(slot + i * 256 + ct, make_float4(d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]));
                __threadfence();
                asm volatile("bar.sync 1, 256;" ::: "memory");
                if (ct == 0) flag_release(&p.flags[blockIdx.x]);
                continue;
            }
            if (w.k0 > 0) { // the tile's last piece: add the earlier ones (CTAs below this one)
                const long long tile_begin = (long long)(w.t - p.dp_tiles) * ktiles;
                if (ct == 0)
                    for (int c = (int)blockIdx.x - 1; c >= 0 && Work::sk_begin(p, ktiles, tiles, c + 1) > tile_begin; c--)
                        if (Work::sk_begin(p, ktiles, tiles, c) < Work::sk_begin(p, ktiles, tiles, c + 1))
                            while (flag_acquire(&p.flags[c]) == 0) {
                            }
                asm volatile("bar.sync 1, 256;" ::: "memory");
                for (int c = (int)blockIdx.x - 1; c >= 0 && Work::sk_begin(p, ktiles, tiles, c + 1) > tile_begin; c--) {
                    if (Work::sk_begin(p, ktiles, tiles, c) == Work::sk_begin(p, ktiles, tiles, c + 1)) continue;
                    const float4 *slot = reinterpret_cast<const float4 *>(p.partials) + (size_t)c * (kBM * BN / 4);
#pragma unroll
                    for (int i = 0; i < BN / 8; i++) {
                        const float4 v = __ldcg(slot + i * 256 + ct);
                        d[4 * i] += v.x, d[4 * i + 1] += v.y, d[4 * i + 2] += v.z, d[4 * i + 3] += v.w;
                    }
                }
            }

            // Accumulator i of lane l in warp w is row 16 w + l / 4 + 8 ((i / 2) % 2),
            // column 8 (i / 4) + 2 (l % 4) + i % 2.  In the swizzled box, row r's
            // 16-byte chunk c sits at chunk c ^ (r % 8): a warp's 8 rows land on
            // different banks.
#pragma unroll
            for (int b = 0; b < kBoxes; b++) {
                unsigned char *buf = bufs + (nbox++ % kBufs) * kBoxBytes;
                if constexpr (kBufs == 1) { // the previous box's store has read the one buffer
                    if (leader) bulk_wait_read<0>();
                    asm volatile("bar.sync %0, 128;" ::"r"(2 + cw) : "memory");
                }
#pragma unroll
                for (int jj = 0; jj < kJ; jj++) {
                    const int j = b * kJ + jj;
                    const int src = (j % 8) * 4 + (lane & 3);
                    const float cx = __shfl_sync(0xffffffffu, cs[j / 8].x, src);
                    const float cy = __shfl_sync(0xffffffffu, cs[j / 8].y, src);
                    const int byte = (8 * jj + 2 * (lane & 3)) * (int)sizeof(OutT);
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int r = r0 + 8 * h;
                        OutT *o = reinterpret_cast<OutT *>(buf + r * 128 + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15));
                        put2(o, d[4 * j + 2 * h] * (rs[h] * cx), d[4 * j + 2 * h + 1] * (rs[h] * cy));
                    }
                }
                fence_proxy_async();
                // The store of the previous box (the other buffer) has read
                // its source before anyone passes this barrier to refill it.
                if (leader) bulk_wait_read<0>();
                asm volatile("bar.sync %0, 128;" ::"r"(2 + cw) : "memory");
                const int x = tn * BN + b * kBoxCols, y = tm * kBM + cw * 64;
                if (leader && x < p.n && y < p.m) tma_store_2d(&map_c, buf, x, y);
                if (leader) bulk_commit();
            }
        }
        if (leader) bulk_wait<0>();
    }
    // The partner's consumers arrive on this CTA's empty barriers, and its
    // producer multicasts into this CTA's ring, up to its last stage: no CTA
    // of a cluster exits before both are done.
    if (CL > 1) cluster_sync();
#else
    (void)map_a, (void)map_b, (void)map_c, (void)p;
#endif
}

// e4m3 codes as ET values, 16 a thread: n16 groups of 16 bytes at codes,
// written to out in the same order (exact: every e4m3 value is an f16 and a
// bf16).  The large-M plan for strict e4m3 weights (tops__cu_h16_launch).
template <int ET>
__global__ void __launch_bounds__(256) e4m3_to_16bit(const uint4 *codes, long long n16, uint4 *out) {
#ifdef TOPS_FP8_WGMMA
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= n16) return;
    const uint4 c = codes[i];
    out[2 * i] = cvt8_e4m3<ET>(make_uint2(c.x, c.y));
    out[2 * i + 1] = cvt8_e4m3<ET>(make_uint2(c.z, c.w));
#else
    (void)codes, (void)n16, (void)out;
#endif
}

// Tile shapes, 128 tokens x 256 (wide), 192 (mid), 128 (narrow) or 96
// (slim) channels, on rings of 4, 4, 6 and 6 stages (converted weights, CV:
// 3, 4, 6 and 6 code stages and 3 converted slots): pick_tiles below.
// Slim tiles run one CTA a tile (the persistent kernel's output boxes are
// 128 bytes wide: 96 f16 columns are one and a half).
enum { kWide = 0, kNarrow = 1, kMid = 2, kSlim = 3 };
constexpr int shape_bn(int shape) { return shape == kWide ? 256 : shape == kMid ? 192 : shape == kNarrow ? 128 : 96; }
template <int SHAPE, int CV>
struct Shape {
    static constexpr int BN = shape_bn(SHAPE);
    static constexpr int STAGES = SHAPE == kNarrow || SHAPE == kSlim ? 6 : SHAPE == kMid ? 4 : CV ? 3 : 4;
};
template <int SHAPE, int ET, int CV, int CL = 1>
using RingOf = RingDims<Shape<SHAPE, CV>::BN, Shape<SHAPE, CV>::STAGES, CL, ET, CV, 3>;

template <typename R>
constexpr size_t gemm_smem() {
    // The epilogue's staging (two warpgroups x 64 rows x (BN + 8) floats) reuses the ring.
    static_assert(2 * 64 * (R::kBN + 8) * 4 <= R::kBytes, "epilogue staging exceeds the stage ring");
    return (size_t)R::kBytes + R::kBars * sizeof(uint64_t) + 1024;
}
// The persistent kernel: ring, output staging, barriers (+ the lag barrier),
// alignment slack (at most 232,448 bytes: what a block may have).
template <typename R>
constexpr size_t persist_smem() {
    static_assert(gemm_smem<R>() + kStagingBytes + 16 <= 232448, "the persistent kernel's shared memory");
    return gemm_smem<R>() + kStagingBytes + 16;
}

// The rescaled-group persistent kernel (wide tiles, kRsStages): its ring,
// staging and barriers, then the ratio slots.
template <int CL, int ET>
constexpr size_t rs_persist_smem() {
    using R = RingDims<256, kRsStages, CL, ET, 0, 3>;
    constexpr size_t v = gemm_smem<R>() + kStagingBytes / 2 + 16 + kRsStages * kRsSlot + 128;
    static_assert(v <= 232448, "the rescaled-group kernel's shared memory");
    return v;
}

// A [rows, k] matrix of ET elements (row stride ld bytes) read as
// [box_rows][128 bytes] tiles, 128-byte swizzled; codes (CV: e4m3 weights
// for a 16-bit GEMM) as [box_rows][64 bytes], unswizzled.
template <int ET, int CV = 0>
bool make_map(CUtensorMap *map, const void *base, int rows, int k, long long ld, int box_rows) {
    const cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)ld};
    const cuuint32_t box[2] = {(cuuint32_t)stage_k<ET>(), (cuuint32_t)box_rows};
    if (CV)
        return tops_cu::sm90::encode_tiled(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, base, dims, strides, box,
                                           CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
    return tops_cu::sm90::encode_sw128(map, ET == kE4M3 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_UINT16,
                                       2, base, dims, strides, box, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
}

// The output [m, n] (row stride ldo elements) written as 64-row x 128-byte boxes.
bool make_out_map(CUtensorMap *map, const tops__cu_matmul_args *a) {
    const size_t esz = a->out_dtype == TOPS_DT_F32 ? 4 : 2;
    const CUtensorMapDataType type = a->out_dtype == TOPS_DT_F32   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                     : a->out_dtype == TOPS_DT_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                   : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    const cuuint64_t dims[2] = {(cuuint64_t)a->n, (cuuint64_t)a->m}, strides[1] = {(cuuint64_t)(a->ldo * esz)};
    const cuuint32_t box[2] = {(cuuint32_t)(128 / esz), 64};
    return tops_cu::sm90::encode_sw128(map, type, 2, a->out, dims, strides, box, CU_TENSOR_MAP_L2_PROMOTION_NONE);
}

// Above 48 KB a kernel needs its limit raised, once per device and kernel
// (so that calls captured into a graph later make no such call).
template <typename Kernel>
cudaError_t raise_smem(Kernel kernel, size_t smem, unsigned char (&raised)[64], const char **what) {
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess && (dev < 0 || dev >= 64 || !raised[dev])) {
        err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (err == cudaSuccess && dev >= 0 && dev < 64) raised[dev] = 1;
    }
    if (err != cudaSuccess) *what = "raising the TMA GEMM's shared-memory limit";
    return err;
}

template <int SHAPE, int ET, int CV, int RS = 0>
cudaError_t launch_gemm(const CUtensorMap &ma, const CUtensorMap &mb, GemmParams p, int vec, cudaStream_t stream,
                        const char **what) {
    using S = Shape<SHAPE, CV>;
    constexpr int BN = S::BN;
    auto kernel = fp8_gemm_kernel<BN, RS ? kRsStages : S::STAGES, ET, CV, RS>;
    const size_t smem = RS ? gemm_smem<RingDims<BN, kRsStages, 1, ET, 0, 3>>() + kRsStages * kRsSlot + 128
                           : gemm_smem<RingOf<SHAPE, ET, CV>>();
    static unsigned char raised[64];
    cudaError_t err = raise_smem(kernel, smem, raised, what);
    if (err != cudaSuccess) return err;
    p.tiles_m = (p.m + kBM - 1) / kBM;
    p.tiles_n = (p.n + BN - 1) / BN;
    err = tops_cu::launch_kernel(kernel, dim3((unsigned)((long long)p.tiles_m * p.tiles_n)), dim3(kThreads), smem,
                                 stream, tops__cu_tune(TOPS__CU_T_PDL) != 0, 1, ma, mb, p, vec);
    if (err != cudaSuccess) *what = "the TMA GEMM launch";
    else {
        static const char *const names[3][2] = {{"fp8 one CTA per tile", "fp8 one CTA per tile"},
                                                {"f16 one CTA per tile", "f16 one CTA per tile, e4m3 weights converted"},
                                                {"bf16 one CTA per tile", "bf16 one CTA per tile, e4m3 weights converted"}};
        static thread_local char name[96];
        snprintf(name, sizeof name, "%s%s%s", names[ET][CV], SHAPE == kSlim ? ", 96-channel tiles" : "",
                 RS ? ", rescaled groups" : "");
        tops_cu::set_last_kernel(name);
    }
    return err;
}

// Clusters of two sharing an operand tile by TMA multicast
// (debug key fp8_cluster: 1 the weight tile, CTAs on row-tile pairs; 2 the
// activation tile, CTAs on column-tile pairs; 0 none, for A/B runs).  1 by
// default: on the H200 (2026-11, experiment history in git) at M = 4096 its minimum was
// 1.2 % below no clusters' in every process (0.3036-0.3060 against
// 0.3074-0.3114 ms), its median equal within the noise, M = 1024 0.7 %
// faster, M = 256 the same; 2 measured slower than 1.
int cluster_mode() {
    const int c = (int)tops__cu_tune(TOPS__CU_T_FP8_CLUSTER);
    return c == 1 || c == 2 ? c : 0;
}

// The persistent kernel's grid and split: one CTA per SM (fp8_ctas
// caps it, for tests: several tiles per CTA), at most one CTA per tile, and
// with fp8_sk=1 stream-K for the last partial wave.  Off by default:
// on the H200 it measured no faster at M = 4096 (the GEMM runs power-capped
// at ~1.57 GHz, so SMs idle in the last wave let the others clock up) and
// 28 % slower at M = 256 (measured 2026-11; history in git).  With clusters (cl > 0): as many
// clusters as can be resident together (max_clusters; a cluster needs two
// free SMs of one GPC), at most one per tile pair, no stream-K.
struct PersistPlan {
    int grid, tiles_m, tiles_n, dp_tiles, cl;
    bool sk;
};
PersistPlan plan_persistent(int m, int n, int bn, int cl, int max_clusters, bool sk_ok) {
    PersistPlan pl;
    pl.tiles_m = (m + kBM - 1) / kBM;
    pl.tiles_n = (n + bn - 1) / bn;
    pl.cl = cl;
    const long long tiles = (long long)pl.tiles_m * pl.tiles_n, cap = tops__cu_tune(TOPS__CU_T_FP8_CTAS);
    if (cl) {
        const long long pairs = cl == 1 ? (long long)(pl.tiles_m + 1) / 2 * pl.tiles_n
                                        : (long long)pl.tiles_m * ((pl.tiles_n + 1) / 2);
        long long clusters = max_clusters;
        if (cap > 0 && clusters > (cap > 1 ? cap / 2 : 1)) clusters = cap > 1 ? cap / 2 : 1;
        if (clusters > pairs) clusters = pairs;
        pl.grid = (int)(2 * clusters);
        pl.dp_tiles = (int)pairs;
        pl.sk = false;
        return pl;
    }
    long long grid = tops__cuda_sm_count(-1);
    if (cap > 0 && grid > cap) grid = cap;
    const long long rem = tiles % grid;
    pl.sk = sk_ok && tops__cu_tune(TOPS__CU_T_FP8_SK) == 1;
    if (!pl.sk && grid > tiles) grid = tiles;
    pl.grid = (int)grid;
    pl.dp_tiles = (int)(pl.sk ? tiles - rem : tiles);
    return pl;
}

using PersistKernel = void (*)(CUtensorMap, CUtensorMap, CUtensorMap, GemmParams);

// The persistent kernel for OutT, CL, SHAPE, ET and CV, its shared-memory limit raised.
template <typename OutT, int CL, int SHAPE, int ET, int CV, int RS = 0>
cudaError_t persistent_kernel(PersistKernel *kernel, const char **what) {
    using S = Shape<SHAPE, CV>;
    static unsigned char raised[64];
    *kernel = fp8_gemm_persistent<OutT, CL, S::BN, RS ? kRsStages : S::STAGES, ET, CV, RS>;
    return raise_smem(*kernel, RS ? rs_persist_smem<CL, ET>() : persist_smem<RingOf<SHAPE, ET, CV, CL>>(), raised,
                      what);
}

// Clusters of two of the persistent kernel (wide tiles) that fit on the
// device at once (cached per device); 0 where clusters cannot run.
template <typename OutT, int ET>
int max_clusters() {
    static int cached[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) return (void)cudaGetLastError(), 0;
    if (dev < 64 && cached[dev]) return cached[dev] > 0 ? cached[dev] : 0;
    PersistKernel kernel;
    const char *what = nullptr;
    int n = 0;
    if (persistent_kernel<OutT, 2, kWide, ET, 0>(&kernel, &what) == cudaSuccess) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = 2, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
        cfg.gridDim = dim3(2 * (unsigned)tops__cuda_sm_count(-1));
        cfg.blockDim = dim3(kThreads);
        cfg.dynamicSmemBytes = persist_smem<RingOf<kWide, ET, 0, 2>>();
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) n = 0;
    }
    (void)cudaGetLastError();
    if (dev < 64) cached[dev] = n > 0 ? n : -1;
    return n > 0 ? n : 0;
}
template <int ET>
int max_clusters_for(int out_dtype) {
    return out_dtype == TOPS_DT_F32   ? max_clusters<float, ET>()
           : out_dtype == TOPS_DT_F16 ? max_clusters<__half, ET>()
                                      : max_clusters<__nv_bfloat16, ET>();
}

template <typename OutT, int ET, int CV, int RS = 0>
cudaError_t launch_persistent(const CUtensorMap &ma, const CUtensorMap &mb, const CUtensorMap &mc, GemmParams p,
                              const PersistPlan &pl, int shape, cudaStream_t stream, const char **what) {
    PersistKernel kernel;
    cudaError_t err;
    if constexpr (RS > 0) // rescaled groups: wide tiles only
        err = !pl.cl ? persistent_kernel<OutT, 1, kWide, ET, 0, RS>(&kernel, what)
                     : persistent_kernel<OutT, 2, kWide, ET, 0, RS>(&kernel, what);
    else
        err = shape == kNarrow ? persistent_kernel<OutT, 1, kNarrow, ET, CV>(&kernel, what)
              : shape == kMid  ? persistent_kernel<OutT, 1, kMid, ET, CV>(&kernel, what)
              : CV || !pl.cl   ? persistent_kernel<OutT, 1, kWide, ET, CV>(&kernel, what)
                               : persistent_kernel<OutT, 2, kWide, ET, 0>(&kernel, what);
    if (err != cudaSuccess) return err;
    p.tiles_m = pl.tiles_m;
    p.tiles_n = pl.tiles_n;
    p.dp_tiles = pl.dp_tiles;
    p.share_b = pl.cl == 1;
    if (pl.cl) p.lag = 0; // the lag is a one-CTA schedule
    // Programmatic dependent launch (debug key pdl=0: plain), so that the
    // prologue overlaps the quantizer's last blocks; clusters by attribute.
    const size_t smem = RS                ? (pl.cl ? rs_persist_smem<2, ET>() : rs_persist_smem<1, ET>())
                        : shape == kNarrow ? persist_smem<RingOf<kNarrow, ET, CV>>()
                        : shape == kMid  ? persist_smem<RingOf<kMid, ET, CV>>()
                        : CV || !pl.cl   ? persist_smem<RingOf<kWide, ET, CV>>()
                                         : persist_smem<RingOf<kWide, ET, 0, 2>>();
    err = tops_cu::launch_kernel(kernel, dim3((unsigned)pl.grid), dim3(kThreads), smem, stream,
                                 tops__cu_tune(TOPS__CU_T_PDL) != 0, pl.cl ? 2 : 1, ma, mb, mc, p);
    if (err != cudaSuccess) *what = "the TMA GEMM launch";
    else {
        // "<type> persistent[, e4m3 weights converted][, clusters ...][, 128- / 192-channel tiles]"
        static const char *const base[3][2] = {{"fp8 persistent", "fp8 persistent"},
                                               {"f16 persistent", "f16 persistent, e4m3 weights converted"},
                                               {"bf16 persistent", "bf16 persistent, e4m3 weights converted"}};
        static const char *const tail[5] = {"", ", clusters of 2 sharing the weight tile",
                                            ", clusters of 2 sharing the activation tile", ", 128-channel tiles",
                                            ", 192-channel tiles"};
        static thread_local char name[96];
        snprintf(name, sizeof name, "%s%s%s", base[ET][CV], tail[shape == kNarrow ? 3 : shape == kMid ? 4 : pl.cl],
                 RS ? ", rescaled groups" : "");
        tops_cu::set_last_kernel(name);
    }
    return err;
}

// The tile width of both GEMMs and whether wide tiles run in clusters of
// two: the fewest waves over the SMs times a tile's time, modelled as its
// width plus kTileFixed channels (the activation tile, prologue and
// epilogue every tile pays), ties to clusters, then to the wider tile.
// Clusters (mode cl where max_cl > 0 of them fit at once; cl = 0: none)
// run on tile pairs (CTAs on row-tile pairs sharing the weight tile, or
// with cl = 2 on column-tile pairs), counted as half the SMs' pairs a wave
// (tests mirror the rule with the SM count alone): an odd row-tile count
// leaves a CTA idle in every column, which a count of tiles does not see.  N =
// 12288 on 132 SMs: 128 up to M = 128, 192 at M = 256, 256 at large M.
// slim_ok (e4m3 codes converted in the kernel, whose consumers convert
// every code of their tile): 96-wide tiles, one CTA a tile, where they all
// fit in one wave (N = 12288: up to M = 128, 128 tiles on 128 SMs; H200,
// 2026-12-03, strict e4m3-ch M = 32 / 64 / 128: 28.6 / 29.3 / 37.6 us
// against 34.3 / 34.3 / 46.2 with 128-wide tiles; f16 weights and relaxed
// FP8 measured 1-8 % slower on them).  wide_only: 256 (the rescaled-group
// kernel has no other width).  Debug key fp8_bn (96 / 128 / 192 / 256)
// forces a width (256 keeps the cluster mode), for A/B runs.
constexpr long long kTileFixed = 128;
struct TilePick {
    int shape, cl;
};
TilePick pick_tiles(int m, int n, bool slim_ok, int cl, int max_cl, bool wide_only) {
    if (max_cl < 1) cl = 0;
    const long long force = tops__cu_tune(TOPS__CU_T_FP8_BN);
    if (!wide_only && (force == 96 || force == 128 || force == 192 || force == 256))
        return force == 96    ? TilePick{kSlim, 0}
               : force == 128 ? TilePick{kNarrow, 0}
               : force == 192 ? TilePick{kMid, 0}
                              : TilePick{kWide, cl};
    const long long tm = (m + kBM - 1) / kBM, sms = tops__cuda_sm_count(-1);
    TilePick best{kWide, 0};
    long long best_cost = -1;
    if (cl) {
        const long long tn = (n + 255) / 256, pairs = cl == 1 ? (tm + 1) / 2 * tn : tm * ((tn + 1) / 2);
        best = TilePick{kWide, cl};
        const long long per = sms / 2 > 0 ? sms / 2 : 1;
        best_cost = (pairs + per - 1) / per * (256 + kTileFixed);
    }
    static const int shapes[4] = {kWide, kMid, kNarrow, kSlim};
    for (int i = 0; i < (wide_only ? 1 : 4); i++) {
        const int bn = shape_bn(shapes[i]);
        const long long tiles = tm * ((n + bn - 1) / bn), cost = (tiles + sms - 1) / sms * (bn + kTileFixed);
        if (shapes[i] == kSlim && (!slim_ok || tiles > sms)) continue;
        if (best_cost < 0 || cost < best_cost) best = TilePick{shapes[i], 0}, best_cost = cost;
    }
    return best;
}

// The GEMM on A [m, k] (row stride lda bytes) and B [n, k] (ldb bytes), both
// ET: persistent where the output allows it, else one CTA per tile.  row
// scales (or NULL: 1), channel scales (or NULL), the tensor scale; with
// stream-K its flags (zeroed by the quantizer) and partial tiles.
template <int ET, int CV = 0, int RS = 0>
cudaError_t run_gemm(const tops__cu_matmul_args *a, const void *A, long long lda, const void *B, long long ldb,
                     const float *row_scale, const float *ch_scale, bool persist, const CUtensorMap &mc,
                     const PersistPlan &pl, int shape, unsigned *flags, float *partials, cudaStream_t stream,
                     const char **what, const float *ratio = nullptr, long long ratio_ld = 0, int ratio_rows = 0,
                     int gstages = 0) {
    if (shape == kSlim) persist = false; // one CTA a tile (see Shape)
    const int cl = persist && shape == kWide ? pl.cl : 0, bn = shape_bn(shape);
    // Below kBM rows, an activation box of M rounded up to 8 rows: TMA's
    // zero fill of the rows past M measured slow (H200, f16 weights, narrow
    // tiles, K = 4096, N = 12288: 45.3 / 45.1 / 37.8 / 31.4 us at M = 1 / 32
    // / 64 / 128); the rows past the box are stale and never stored.
    const int a_rows = cl != 2 && a->m < kBM ? (int)((a->m + 7) / 8 * 8) : kBM;
    CUtensorMap ma, mb;
    if (!make_map<ET>(&ma, A, (int)a->m, (int)a->k, lda, cl == 2 ? kBM / 2 : a_rows) ||
        !make_map<ET, CV>(&mb, B, (int)a->n, (int)a->k, ldb, cl == 1 ? bn / 2 : bn)) {
        *what = "cuTensorMapEncodeTiled for the TMA GEMM's operands";
        return cudaErrorInvalidValue;
    }
    GemmParams p;
    p.row_scale = row_scale;
    p.ch_scale = ch_scale;
    p.global = a->global_scale;
    p.out = a->out;
    p.ldo = a->ldo;
    p.out_dtype = a->out_dtype;
    p.accumulate = a->accumulate;
    p.m = (int)a->m;
    p.n = (int)a->n;
    p.k = (int)a->k;
    p.tiles_m = 0;
    p.tiles_n = 0;
    p.lag = tops__cu_tune(TOPS__CU_T_FP8_LAG) != 0;
    p.dp_tiles = 0;
    p.share_b = 0;
    p.flags = flags;
    p.partials = partials;
    p.a_rows = a_rows;
    // A last row tile of at most 64 rows reads boxes of 64 (Ring::load_a).
    p.a64 = cl != 2 && a->m > kBM && (a->m - 1) % kBM < 64;
    if (p.a64 && !make_map<ET>(&p.map_a64, A, (int)a->m, (int)a->k, lda, 64)) {
        *what = "cuTensorMapEncodeTiled for the TMA GEMM's activations";
        return cudaErrorInvalidValue;
    }
    p.gstages = gstages;
    if (RS > 0) { // the ratio plane [ratio_rows][ratio_ld] f32, boxes of one row of 256 channels
        const cuuint64_t dims[2] = {(cuuint64_t)ratio_ld, (cuuint64_t)ratio_rows}, strides[1] = {(cuuint64_t)ratio_ld * 4};
        const cuuint32_t box[2] = {256, 1};
        if (!tops_cu::sm90::encode_tiled(&p.ratio_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, ratio, dims, strides, box,
                                         CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B)) {
            *what = "cuTensorMapEncodeTiled for the rescaled GEMM's ratio plane";
            return cudaErrorInvalidValue;
        }
    }
    if (ET != kE4M3) p.lag = 0; // (the rescaled groups' turns assume no lag)
    if (persist)
        return a->out_dtype == TOPS_DT_F32
                   ? launch_persistent<float, ET, CV, RS>(ma, mb, mc, p, pl, shape, stream, what)
               : a->out_dtype == TOPS_DT_F16
                   ? launch_persistent<__half, ET, CV, RS>(ma, mb, mc, p, pl, shape, stream, what)
                   : launch_persistent<__nv_bfloat16, ET, CV, RS>(ma, mb, mc, p, pl, shape, stream, what);
    // 4-element stores need every row start 4-element aligned.
    const size_t esz = a->out_dtype == TOPS_DT_F32 ? 4 : 2;
    const int vec = a->ldo % 4 == 0 && (uintptr_t)a->out % (4 * esz) == 0;
    if constexpr (RS > 0) return launch_gemm<kWide, ET, 0, RS>(ma, mb, p, vec, stream, what);
    return shape == kNarrow ? launch_gemm<kNarrow, ET, CV>(ma, mb, p, vec, stream, what)
           : shape == kMid  ? launch_gemm<kMid, ET, CV>(ma, mb, p, vec, stream, what)
           : shape == kSlim ? launch_gemm<kSlim, ET, CV>(ma, mb, p, vec, stream, what)
                            : launch_gemm<kWide, ET, CV>(ma, mb, p, vec, stream, what);
}

// The persistent kernel applies (TMA stores: 16-byte aligned rows;
// accumulate reads the output, which the one-CTA-per-tile kernel does;
// fp8_persist=0 forces that one, for A/B runs); *mc its output map.
bool persistent_ok(const tops__cu_matmul_args *a, CUtensorMap *mc) {
    const size_t esz = a->out_dtype == TOPS_DT_F32 ? 4 : 2;
    return !a->accumulate && (uintptr_t)a->out % 16 == 0 && (a->ldo * esz) % 16 == 0 &&
           tops__cu_tune(TOPS__CU_T_FP8_PERSIST) != 0 && make_out_map(mc, a);
}

} // namespace

extern "C" int tops__cu_fp8_launch(const tops__cu_fp8_args *f, const char **what) {
    const tops__cu_matmul_args *a = f->io;
    cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
    if (a->m < 1 || a->m > 0x7FFFFFFF / 2) {
        *what = "the FP8 path's M";
        return (int)cudaErrorInvalidValue;
    }
    // The persistent kernel and its stream-K flags and partial tiles, placed
    // after the activations.
    CUtensorMap mc;
    const bool persist = persistent_ok(a, &mc);
    // Clusters where the device can run them and the waves favour them (the
    // tensor maps' boxes follow: a shared operand is loaded in halves).
    const int mode = persist ? cluster_mode() : 0, max_cl = mode ? max_clusters_for<kE4M3>(a->out_dtype) : 0;
    const TilePick tp = pick_tiles((int)a->m, (int)a->n, false, mode, max_cl, false);
    const int shape = tp.shape, narrow = shape != kWide, cl = tp.cl;
    const PersistPlan pl =
        plan_persistent((int)a->m, (int)a->n, shape_bn(shape), cl, max_cl, !narrow);
    const bool sk = persist && pl.sk;
    const size_t qbytes = (size_t)a->m * (size_t)a->k_pad, sbytes = ((size_t)a->m * sizeof(float) + 255) & ~(size_t)255,
                 fbytes = sk ? ((size_t)pl.grid * sizeof(unsigned) + 255) & ~(size_t)255 : 0,
                 pbytes = sk ? (size_t)pl.grid * kBM * 256 * sizeof(float) : 0;
    unsigned char *ws = nullptr;
    // Without the driver's tensor-map encoder or stream-ordered memory the
    // strict kernels run instead (relaxed mode allows either).
    cudaError_t err = tops_cu::sm90::tensor_map_encoder()
                          ? cudaMallocAsync(reinterpret_cast<void **>(&ws), qbytes + sbytes + fbytes + pbytes, stream)
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
    unsigned *flags = sk ? reinterpret_cast<unsigned *>(ws + qbytes + sbytes) : nullptr;
    const int nflags = sk ? pl.grid : 0;
    // One row a block (H200 ncu, M = 4096: 14.9 us against 17.7 with 4; the
    // GEMM's CTAs cannot start beside it anyway; bench at M = 256 / 4096,
    // two processes each: 27.4-27.6 / 345-346 us against 28.0 / 348-349
    // with 4).
    err = tops_cu::quant_act_e4m3(a, ws, row_scale, 1, flags, nflags);
    if (err != cudaSuccess) *what = "the activation quantization launch";
    if (err == cudaSuccess)
        err = run_gemm<kE4M3>(a, ws, a->k_pad, f->weights, a->k_pad, row_scale, static_cast<const float *>(f->ch_scales),
                              persist, mc, pl, shape, flags,
                              sk ? reinterpret_cast<float *>(ws + qbytes + sbytes + fbytes) : nullptr, stream, what);
    cudaError_t e2 = cudaFreeAsync(ws, stream);
    if (err == cudaSuccess && e2 != cudaSuccess) {
        err = e2;
        *what = "cudaFreeAsync of the FP8 activation workspace";
    }
    return (int)err;
}

// Strict 16-bit GEMM: the activations as they are (f16 or bf16, read by
// TMA) and the weights row-major [n, k_pad]: 16-bit values of the
// activations' type, or (codes) e4m3 codes converted to that type in
// shared memory, channel scales in the epilogue.  cudaErrorNotSupported, launching nothing, where TMA
// cannot read the activation rows (not 16-byte aligned) or the driver has
// no tensor-map encoder.
// Strict e4m3 codes at large M: converted once into a stream-ordered
// workspace of the activations' type (slices of channels within 128 MB),
// then this GEMM on 16-bit weights, channel scales in its epilogue.  The
// in-kernel conversion redoes every code once per 128-token tile and
// competes with the tensor cores for the consumers' issue slots.
// cudaErrorNotSupported without memory pools or the workspace's memory
// (the caller then converts in the kernel).
int h16_convert_once(const tops__cu_fp8_args *f, int et, const char **what) {
    const tops__cu_matmul_args *a = f->io;
    cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
    const long long row_bytes = a->k_pad * 2; // k_pad: a multiple of 64
    const long long slice = tops_cu::workspace_slice(row_bytes, 16, a->n);
    uint4 *ws = nullptr;
    cudaError_t err = cudaMallocAsync(reinterpret_cast<void **>(&ws), (size_t)(slice * row_bytes), stream);
    if (err == cudaErrorNotSupported || err == cudaErrorMemoryAllocation) { // the kernel converts instead
        (void)cudaGetLastError();
        return (int)cudaErrorNotSupported;
    }
    if (err != cudaSuccess) {
        *what = "cudaMallocAsync of the converted e4m3 weights";
        return (int)err;
    }
    const size_t out_elem = a->out_dtype == TOPS_DT_F32 ? 4 : 2;
    const float *cs = static_cast<const float *>(f->ch_scales);
    for (long long n0 = 0; n0 < a->n && err == cudaSuccess; n0 += slice) {
        const long long rows = a->n - n0 < slice ? a->n - n0 : slice, n16 = rows * a->k_pad / 16;
        const uint4 *src = reinterpret_cast<const uint4 *>(static_cast<const unsigned char *>(f->weights) +
                                                           (size_t)n0 * (size_t)a->k_pad);
        const unsigned blocks = (unsigned)((n16 + 255) / 256);
        if (et == kBF16) e4m3_to_16bit<kBF16><<<blocks, 256, 0, stream>>>(src, n16, ws);
        else e4m3_to_16bit<kF16><<<blocks, 256, 0, stream>>>(src, n16, ws);
        err = cudaGetLastError();
        if (err != cudaSuccess) {
            *what = "the e4m3 conversion kernel launch";
            break;
        }
        tops__cu_matmul_args s = *a;
        s.n = rows;
        s.out = static_cast<char *>(a->out) + (size_t)n0 * out_elem;
        const tops__cu_fp8_args h = {&s, ws, cs ? cs + n0 : nullptr, 0};
        err = (cudaError_t)tops__cu_h16_launch(&h, what);
    }
    cudaError_t e2 = cudaFreeAsync(ws, stream);
    if (err == cudaSuccess && e2 != cudaSuccess) {
        err = e2;
        *what = "cudaFreeAsync of the converted e4m3 weights";
    }
    if (err == cudaSuccess)
        tops_cu::set_last_kernel(et == kBF16 ? "e4m3 weights converted once to bf16 [n, k], then the bf16 TMA GEMM"
                                             : "e4m3 weights converted once to f16 [n, k], then the f16 TMA GEMM");
    return (int)err;
}

extern "C" int tops__cu_h16_launch(const tops__cu_fp8_args *f, const char **what) {
    const tops__cu_matmul_args *a = f->io;
    cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
    if (a->m < 1 || a->m > 0x7FFFFFFF / 2 || (uintptr_t)a->x % 16 != 0 || (a->ldx * 2) % 16 != 0 ||
        !tops_cu::sm90::tensor_map_encoder())
        return (int)cudaErrorNotSupported;
    const int et = a->x_bf16 ? kBF16 : kF16;
    if (f->codes == 2) {
        const int r = h16_convert_once(f, et, what);
        if (r != (int)cudaErrorNotSupported) return r;
    }
    CUtensorMap mc;
    const bool persist = persistent_ok(a, &mc);
    // Clusters share the weight tile as it lands (not with converted codes).
    const int mode = persist && !f->codes ? cluster_mode() : 0;
    const int max_cl = !mode            ? 0
                       : et == kF16 ? max_clusters_for<kF16>(a->out_dtype)
                                    : max_clusters_for<kBF16>(a->out_dtype);
    const TilePick tp = pick_tiles((int)a->m, (int)a->n, f->codes != 0, mode, max_cl, false);
    const int shape = tp.shape, cl = tp.cl;
    const PersistPlan pl =
        plan_persistent((int)a->m, (int)a->n, shape_bn(shape), cl, max_cl, false);
    const long long lda = a->ldx * 2, ldb = a->k_pad * (f->codes ? 1 : 2);
    const float *cs = static_cast<const float *>(f->ch_scales);
    const void *x = a->x, *w = f->weights;
    cudaError_t err;
    if (f->codes)
        err = et == kF16 ? run_gemm<kF16, 1>(a, x, lda, w, ldb, nullptr, cs, persist, mc, pl, shape, nullptr, nullptr,
                                             stream, what)
                         : run_gemm<kBF16, 1>(a, x, lda, w, ldb, nullptr, cs, persist, mc, pl, shape, nullptr, nullptr,
                                              stream, what);
    else
        err = et == kF16 ? run_gemm<kF16>(a, x, lda, w, ldb, nullptr, cs, persist, mc, pl, shape, nullptr, nullptr,
                                          stream, what)
                         : run_gemm<kBF16>(a, x, lda, w, ldb, nullptr, cs, persist, mc, pl, shape, nullptr, nullptr,
                                           stream, what);
    return (int)err;
}

// Integer codes as f16 values [n, k_pad] (f->weights) whose K groups of
// `group` elements (32 or a multiple of 64) carry their own scales, f16
// activations: the GEMM on 256-channel tiles with rescaled accumulators
// (Ring::consume_rs), r_g of channel c at ratio[g * ratio_ld + c'] (c' in
// rescale_plan's order within 16 channels; ratio_ld
// >= n rounded up to 256, ratio_rows up to the group after the last K
// stage's; 16-byte aligned: TMA reads it),
// the last group's scale t as the channel scale (f->ch_scales).
// cudaErrorNotSupported, launching nothing, where TMA cannot read the
// activations or the group size has no kernel.
extern "C" int tops__cu_h16_rescaled_launch(const tops__cu_fp8_args *f, const float *ratio, long long ratio_ld,
                                            int ratio_rows, int group, const char **what) {
    const tops__cu_matmul_args *a = f->io;
    cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
    if (a->m < 1 || a->m > 0x7FFFFFFF / 2 || (uintptr_t)a->x % 16 != 0 || (a->ldx * 2) % 16 != 0 || a->x_bf16 ||
        f->codes || !tops_cu::sm90::tensor_map_encoder() || !tops__cu_rescaled_group_ok(group) ||
        (uintptr_t)ratio % 16 != 0 || ratio_ld % 256 != 0 || ratio_rows < 1)
        return (int)cudaErrorNotSupported;
    CUtensorMap mc;
    const bool persist = persistent_ok(a, &mc);
    const int mode = persist ? cluster_mode() : 0, max_cl = mode ? max_clusters_for<kF16>(a->out_dtype) : 0;
    const int cl = pick_tiles((int)a->m, (int)a->n, false, mode, max_cl, true).cl;
    const PersistPlan pl = plan_persistent((int)a->m, (int)a->n, 256, cl, max_cl, false);
    const long long lda = a->ldx * 2, ldb = a->k_pad * 2;
    const float *cs = static_cast<const float *>(f->ch_scales);
    const cudaError_t err =
        group == 32 ? run_gemm<kF16, 0, 2>(a, a->x, lda, f->weights, ldb, nullptr, cs, persist, mc, pl, kWide, nullptr,
                                           nullptr, stream, what, ratio, ratio_ld, ratio_rows, 0)
                    : run_gemm<kF16, 0, 1>(a, a->x, lda, f->weights, ldb, nullptr, cs, persist, mc, pl, kWide, nullptr,
                                           nullptr, stream, what, ratio, ratio_ld, ratio_rows, group / 64);
    return (int)err;
}

// The activation quantizer of both relaxed FP8 kernels (this GEMM and
// wgmma_q8.cu): codes [m, k_pad] into q, row scales [m] into scales, and
// nflags stream-K flags zeroed, on a's stream.
cudaError_t tops_cu::quant_act_e4m3(const tops__cu_matmul_args *a, unsigned char *q, float *scales, int rows,
                                    unsigned *flags, int nflags, ActSums sums) {
    cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
    const int vec = a->ldx % 8 == 0 && (uintptr_t)a->x % 16 == 0;
    return a->x_bf16 ? launch_quant(static_cast<const __nv_bfloat16 *>(a->x), a->ldx, (int)a->k, (int)a->k_pad, vec,
                                    q, scales, flags, nflags, (int)a->m, rows, sums, stream)
                     : launch_quant(static_cast<const __half *>(a->x), a->ldx, (int)a->k, (int)a->k_pad, vec, q,
                                    scales, flags, nflags, (int)a->m, rows, sums, stream);
}
