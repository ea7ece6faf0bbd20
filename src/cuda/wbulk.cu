// Weight streaming through the bulk copy engine (sm_90+).  A block owns
// kBulkTiles tiles of 16 output channels over its whole K range (split K
// across blocks only when N cannot fill the SMs).  The packed slice of one
// tile is contiguous, so one elected thread streams it into a ring of
// kStages shared-memory stages with 1-D `cp.async.bulk` completing on an
// mbarrier: up to 96 KB in flight per SM with no registers held for it, no
// split-K pass at N = 12288, and no per-lane load instructions (the H200
// runs showed these kernels bound by instruction issue, not by HBM).
// The block's scales are copied once beside the ring.  Warps split the
// block's tiles (tile groups), each stage's chunks along K (kw) and the
// tokens (mw), run the shared decode + mma step, and their partial sums meet
// in shared memory in a fixed order (the same bits every run).
#include "cuda/kernels.cuh"
#include "cuda/sm90.cuh"

namespace tops_cu {
namespace {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
using namespace sm90;

// Stage i of this block's K range: chunks c0 .. c0 + nc of tiles 0 .. nt,
// tile t at t * kStageChunks * 512 bytes of the stage buffer.
__device__ __forceinline__ void issue_stage(const Params &p, unsigned char *buf, uint64_t *bar, int tile0, int nt,
                                            int c0, int nc) {
    mbar_expect_tx(bar, (uint32_t)(nt * nc * 512));
    for (int t = 0; t < nt; t++)
        bulk_copy(buf + t * kStageChunks * 512, p.w + ((size_t)(tile0 + t) * p.chunks + c0) * 32, (uint32_t)nc * 512,
                  bar);
}
#endif

// One chunk of a warp's tiles; a warp with all kWarpTiles tiles (every
// block but a ragged last one) runs the copy without per-tile guards.  A
// warp's chunks are kw apart: the scale group is closed at each chunk's end.
template <int CODE, bool BF16, int MT, int kWarpTiles>
__device__ __forceinline__ void chunk_step(const Params &p, const uint4 (&cur)[kWarpTiles], int wnt, int chunk,
                                           const uint2 (&xb)[MT][chunk_dims<CODE>::STEPS], const unsigned char *sc,
                                           float (&part)[kWarpTiles][MT][4], float (&acc)[kWarpTiles][MT][4]) {
    const int stride = p.groups * 16 * 4; // f32 scale rows in shared memory
    if (wnt == kWarpTiles)
        chunk_mma<CODE, BF16, kWarpTiles, MT, true>(p, cur, kWarpTiles, chunk, xb, true, sc, stride, part, acc);
    else chunk_mma<CODE, BF16, kWarpTiles, MT, true>(p, cur, wnt, chunk, xb, true, sc, stride, part, acc);
}

template <int CODE, bool BF16, int MT>
__global__ void __launch_bounds__(bulk_warps(MT) * 32, 1) wbulk_kernel(const Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int kWarpTiles = bulk_warp_tiles(MT), kBulkWarps = bulk_warps(MT);
    extern __shared__ __align__(128) unsigned char smem[];
    // ring[p.ring][kStageBytes] | scales as copied | scales as f32 | mbarriers
    unsigned char *ring = smem;
    unsigned char *ssc = smem + p.ring * kStageBytes;
    float *sf = reinterpret_cast<float *>(ssc + ((p.has_scales ? (size_t)kBulkTiles * p.scale_tile_bytes : 0) + 15) / 16 * 16);
    uint64_t *bar = reinterpret_cast<uint64_t *>(sf + (p.has_scales ? kBulkTiles * p.groups * 16 : 0));
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tg = warp / kGroupWarps, gw = warp % kGroupWarps;
    const int kw = gw % p.kw, mw = gw / p.kw;
    const int pass = blockIdx.x % p.passes;
    const int tile0 = (blockIdx.x / p.passes) * kBulkTiles;
    const int nt = min(kBulkTiles, p.ntiles - tile0);
    const int wt0 = tg * kWarpTiles;                    // this warp's first tile in the block
    const int wnt = min(kWarpTiles, nt - wt0);          // and how many (<= 0: none)
    const int split = blockIdx.y;
    const int c_begin = split * p.chunks_per_split;
    const int c_end = min(c_begin + p.chunks_per_split, p.chunks);
    const int nstages = (c_end - c_begin + kStageChunks - 1) / kStageChunks;
    const int m0 = pass * p.mw * MT * 8 + mw * MT * 8; // this warp's first token
    const bool busy = m0 < p.m && wnt > 0;

    // bar[0, kStages): ring slot filled; bar[kStages]: scales copied;
    // empty[s]: every thread done reading slot s (last-warp refill only)
    uint64_t *empty = bar + kStages + 1;
    int *done = reinterpret_cast<int *>(empty + kStages); // warps done with each ring slot
    if (tid == 0) {
        for (int s = 0; s <= kStages; s++) mbar_init(&bar[s], 1);
        for (int s = 0; s < kStages; s++) mbar_init(&empty[s], kBulkWarps * 32);
        for (int s = 0; s < kStages; s++) done[s] = 0;
        mbar_init_fence();
    }
    __syncthreads();
    if (tid == 0) {
        if (p.has_scales) {
            const uint32_t sb = (uint32_t)(nt * p.scale_tile_bytes);
            mbar_expect_tx(&bar[kStages], sb);
            bulk_copy(ssc, p.scales + (size_t)tile0 * p.scale_tile_bytes, sb, &bar[kStages]);
        }
        for (int i = 0; i < p.ring && i < nstages; i++) {
            const int c0 = c_begin + i * kStageChunks;
            issue_stage(p, ring + i * kStageBytes, &bar[i], tile0, nt, c0, min(kStageChunks, c_end - c0));
        }
    }

    float acc[kWarpTiles][MT][4], part[kWarpTiles][MT][4];
#pragma unroll
    for (int a = 0; a < kWarpTiles; a++)
#pragma unroll
        for (int b = 0; b < MT; b++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[a][b][c] = part[a][b][c] = 0.0f;

    // The activations of a warp's next chunk are loaded one chunk ahead (they
    // come from L2; the weights are already in shared memory when needed).
    constexpr int STEPS = chunk_dims<CODE>::STEPS;
    uint2 xb[MT][STEPS] = {};
    if (busy && c_begin + kw < c_end) load_xb<CODE, MT>(p, c_begin + kw, m0, xb);
    if (p.has_scales) {
        // Decode the block's scales to f32 once: a flush then reads one
        // float2 instead of branching on the encoding (3x the mma's cost for
        // nvfp4's groups of 16).
        mbar_wait(&bar[kStages], 0);
        const int entries = nt * p.groups * 16;
        for (int e = tid; e < entries; e += kBulkWarps * 32) sf[e] = scale_entry(ssc, p.scale_kind, (size_t)e);
        __syncthreads();
    }
    const unsigned char *wsc = reinterpret_cast<const unsigned char *>(sf + (size_t)wt0 * p.groups * 16);
    for (int i = 0; i < nstages; i++) {
        const int s = i % p.ring;
        const int c0 = c_begin + i * kStageChunks, nc = min(kStageChunks, c_end - c0);
        mbar_wait(&bar[s], (uint32_t)(i / p.ring) & 1u);
        const unsigned char *buf = ring + s * kStageBytes + wt0 * kStageChunks * 512 + lane * 16;
        if (busy)
            for (int j = kw; j < nc; j += p.kw) {
                uint4 cur[kWarpTiles];
#pragma unroll
                for (int t = 0; t < kWarpTiles; t++)
                    cur[t] = t < wnt ? *reinterpret_cast<const uint4 *>(buf + t * kStageChunks * 512 + j * 512)
                                     : make_uint4(0, 0, 0, 0);
#if TOPS_CU_BULK_PREFETCH
                // next chunk of this warp: kw further on, in this stage or the next
                const int jn = j + p.kw < nc ? c0 + j + p.kw : c0 + kStageChunks + kw;
                uint2 xn[MT][STEPS] = {};
                if (jn < c_end) load_xb<CODE, MT>(p, jn, m0, xn);
                chunk_step<CODE, BF16, MT, kWarpTiles>(p, cur, wnt, c0 + j, xb, wsc, part, acc);
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int q = 0; q < STEPS; q++) xb[mt][q] = xn[mt][q];
#else
                load_xb<CODE, MT>(p, c0 + j, m0, xb);
                chunk_step<CODE, BF16, MT, kWarpTiles>(p, cur, wnt, c0 + j, xb, wsc, part, acc);
#endif
            }
        if constexpr (MT >= TOPS_CU_BULK_ARRIVE) {
            // The last warp done with buffer s refills it: warps drift apart by
            // up to a ring instead of meeting at a block barrier every stage.
            // Every thread releases its reads of the slot on empty[s]; the last
            // warp (an atomic count picks it) acquires them there before the copy
            // engine overwrites the slot (the fence alone left compute-sanitizer
            // racecheck reporting the copy against the reads).
            mbar_arrive(&empty[s]);
            __syncwarp();
            int last = 0;
            if (lane == 0) last = atomicAdd(&done[s], 1) == kBulkWarps - 1;
            if (__shfl_sync(0xffffffffu, last, 0) && lane == 0) {
                mbar_wait(&empty[s], (uint32_t)(i / p.ring) & 1u);
                atomicExch(&done[s], 0); // atomic like the other warps' adds
                if (i + p.ring < nstages) {
                    const int c1 = c0 + p.ring * kStageChunks;
                    issue_stage(p, ring + s * kStageBytes, &bar[s], tile0, nt, c1, min(kStageChunks, c_end - c1));
                }
            }
        } else {
            __syncthreads(); // every warp is done with buffer s: refill it
            if (tid == 0 && i + p.ring < nstages) {
                const int c1 = c0 + p.ring * kStageChunks;
                issue_stage(p, ring + s * kStageBytes, &bar[s], tile0, nt, c1, min(kStageChunks, c_end - c1));
            }
        }
    }
    __syncthreads(); // every warp is past the last stage: the ring is free

    // Partial sums of the kw warps of each (tile, token) meet in the (now
    // idle) ring: red[kw][mw][tile][mt][i][lane], summed in kw order.
    float *red = reinterpret_cast<float *>(ring);
    const float g = p.global * decode_factor<CODE>();
#pragma unroll
    for (int t = 0; t < kWarpTiles; t++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                red[((((kw * p.mw + mw) * kBulkTiles + wt0 + t) * MT + mt) * 4 + i) * 32 + lane] = acc[t][mt][i] * g;
    __syncthreads();
    const int per_kw = p.mw * kBulkTiles * MT * 4 * 32;
    for (int e = tid; e < per_kw; e += kBulkWarps * 32) {
        const int ln = e & 31, i = (e >> 5) & 3, mt = (e >> 7) % MT, t = (e >> 7) / MT % kBulkTiles,
                  w = (e >> 7) / MT / kBulkTiles;
        const int n = (tile0 + t) * 16 + (ln >> 2) + 8 * (i >> 1);
        const int m = pass * p.mw * MT * 8 + (w * MT + mt) * 8 + 2 * (ln & 3) + (i & 1);
        if (t >= nt || n >= p.n || m >= p.m) continue;
        float v = 0.0f;
        for (int k = 0; k < p.kw; k++) v += red[k * per_kw + e];
        if (p.splits == 1) store_out(p, m, n, v);
        else p.ws[((size_t)split * p.m + m) * p.n + n] = v;
    }
#endif
}

template <int CODE, bool BF16>
kernel_fn bulk_width(int mt) {
    return mt == 1 ? wbulk_kernel<CODE, BF16, 1> : wbulk_kernel<CODE, BF16, 2>;
}

template <bool BF16>
kernel_fn bulk_code(int code, int mt) {
    switch (code) {
    case TOPS__CU_CODE_U4: return bulk_width<TOPS__CU_CODE_U4, BF16>(mt);
    case TOPS__CU_CODE_E2M1: return bulk_width<TOPS__CU_CODE_E2M1, BF16>(mt);
    case TOPS__CU_CODE_I8: return bulk_width<TOPS__CU_CODE_I8, BF16>(mt);
    case TOPS__CU_CODE_E4M3: return bulk_width<TOPS__CU_CODE_E4M3, BF16>(mt);
    default: return bulk_width<BF16 ? TOPS__CU_CODE_BF16 : TOPS__CU_CODE_F16, BF16>(mt);
    }
}

} // namespace

// One kernel per (code family, activation type, 1 or 2 token tiles per warp).
kernel_fn bulk_kernel(int code, bool bf16, int mt) { return bf16 ? bulk_code<true>(code, mt) : bulk_code<false>(code, mt); }

} // namespace tops_cu
