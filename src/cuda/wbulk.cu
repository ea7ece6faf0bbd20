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
// For 1-2 tokens with 16-byte aligned rows (XS) each stage's activation rows
// ride in the ring slot with its weights: B fragments from shared memory
// instead of L2 loads.  Launched as a programmatic dependent (PDL), a block
// fetches its scales and first stages of weights before waiting for the
// previous kernel in the stream, and touches activations and outputs only
// after that wait.
#include "cuda/kernels.cuh"
#include "cuda/sm90.cuh"

namespace tops_cu {
namespace {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
using namespace sm90;

// Stage i of this block's K range into one ring slot: chunks c0 .. c0 + nc
// of tiles 0 .. nt (tile t at t * kStageChunks * 512 bytes of the slot) and,
// with xs, the stage's activations (issue_acts, possibly later: they may
// wait for the previous kernel; the barrier expects their bytes from here).
// Activations past K (only the last stage, K % 8 == 0 under xs) are zeroed
// with plain stores before the arrive that releases them.
template <int KC, bool XS>
__device__ __forceinline__ void issue_stage(const Params &p, unsigned char *slot, uint64_t *bar, int tile0, int nt,
                                            int c0, int nc) {
    uint32_t xbytes = 0;
    if constexpr (XS) {
        const int kx = min((c0 + nc) * KC, p.k) - c0 * KC;
        xbytes = (uint32_t)(p.xrows * kx * 2);
        for (int r = 0; r < p.xrows; r++)
            for (int e = kx; e < nc * KC; e += 8)
                *reinterpret_cast<uint4 *>(slot + kStageBytes + r * p.xrow_bytes + e * 2) = make_uint4(0, 0, 0, 0);
    }
    mbar_expect_tx(bar, (uint32_t)(nt * nc * 512) + xbytes);
    for (int t = 0; t < nt; t++)
        bulk_copy(slot + t * kStageChunks * 512, p.w + ((size_t)(tile0 + t) * p.chunks + c0) * 32, (uint32_t)nc * 512,
                  bar);
}

// The activation rows of a stage (xs: one pass of at most 16 tokens, rows
// 16-byte aligned), one bulk copy per row.
template <int KC>
__device__ __forceinline__ void issue_acts(const Params &p, unsigned char *slot, uint64_t *bar, int c0, int nc) {
    const int k0 = c0 * KC, kx = min((c0 + nc) * KC, p.k) - k0;
    const unsigned short *x = reinterpret_cast<const unsigned short *>(p.x) + k0;
    for (int r = 0; r < p.xrows; r++)
        bulk_copy(slot + kStageBytes + r * p.xrow_bytes, x + (long long)r * p.ldx, (uint32_t)kx * 2, bar);
}

// B fragments of chunk j of a stage from the slot's activation rows (xs);
// rows past M read as zeros.
template <int CODE, int MT>
__device__ __forceinline__ void load_xs(const Params &p, const unsigned char *xs, int j,
                                        uint2 (&xb)[MT][chunk_dims<CODE>::STEPS]) {
    const int lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int r = mt * 8 + gid;
        const uint2 *row = reinterpret_cast<const uint2 *>(xs + min(r, p.xrows - 1) * p.xrow_bytes +
                                                           (j * chunk_dims<CODE>::KC + 4 * tig) * 2);
#pragma unroll
        for (int q = 0; q < chunk_dims<CODE>::STEPS; q++) {
            const uint2 v = row[4 * q];
            xb[mt][q] = r < p.xrows ? v : make_uint2(0, 0);
        }
    }
}

// Entries tid, tid + step, ... of a block's scales to f32, with the encoding
// resolved once outside the loop (mxfp4's 12288 entries a block made the
// per-entry switch of scale_entry a visible part of the prologue).
template <int KIND>
__device__ __forceinline__ void decode_scales_as(const unsigned char *s, int entries, float *out, int tid, int step) {
    for (int e = tid; e < entries; e += step) out[e] = scale_entry(s, KIND, (size_t)e);
}
__device__ __forceinline__ void decode_scales(const unsigned char *s, int kind, int entries, float *out, int tid,
                                              int step) {
    switch (kind) {
    case TOPS__CU_SCALE_F32: decode_scales_as<TOPS__CU_SCALE_F32>(s, entries, out, tid, step); break;
    case TOPS__CU_SCALE_F16: decode_scales_as<TOPS__CU_SCALE_F16>(s, entries, out, tid, step); break;
    case TOPS__CU_SCALE_E8M0: decode_scales_as<TOPS__CU_SCALE_E8M0>(s, entries, out, tid, step); break;
    default: decode_scales_as<TOPS__CU_SCALE_UE4M3>(s, entries, out, tid, step); break;
    }
}

// The B fragments of a chunk from global memory (L2), or constants in the
// diagnosis build without activation loads.
template <int CODE, int MT>
__device__ __forceinline__ void act_frags(const Params &p, int chunk, int m0, uint2 (&xb)[MT][chunk_dims<CODE>::STEPS]) {
#if TOPS_CU_BULK_DIAG == 2
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int q = 0; q < chunk_dims<CODE>::STEPS; q++) xb[mt][q] = make_uint2(0x3C003C00u + chunk, 0x3C003C00u);
#else
    load_xb<CODE, MT>(p, chunk, m0, xb);
#endif
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

// XS: the activations travel in the ring slots with the weights (one pass of
// at most 16 tokens, 16-byte aligned rows); otherwise they come from L2, a
// chunk ahead, into registers.
template <int CODE, bool BF16, int MT, bool XS>
__global__ void __launch_bounds__(bulk_warps(MT) * 32, TOPS_CU_BULK_MINB) wbulk_kernel(const Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int kWarpTiles = bulk_warp_tiles(MT), kBulkWarps = bulk_warps(MT);
    constexpr int KC = chunk_dims<CODE>::KC;
    extern __shared__ __align__(128) unsigned char smem[];
    // ring[p.ring][p.slot_bytes] | scales as copied | scales as f32 | mbarriers
    unsigned char *ring = smem;
    unsigned char *ssc = smem + (size_t)p.ring * p.slot_bytes;
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
#if TOPS_CU_BULK_DIAG == 3
    const int nstages = 0;
#else
    const int nstages = (c_end - c_begin + kStageChunks - 1) / kStageChunks;
#endif
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
    // Weights and scales do not depend on the kernel before this one in the
    // stream (packed weights are written only by copies): they are fetched
    // before waiting for it; activations and outputs after.
    if (tid == 0) {
        if (p.has_scales) {
            const uint32_t sb = (uint32_t)(nt * p.scale_tile_bytes);
            mbar_expect_tx(&bar[kStages], sb);
            bulk_copy(ssc, p.scales + (size_t)tile0 * p.scale_tile_bytes, sb, &bar[kStages]);
        }
        for (int i = 0; i < p.ring && i < nstages; i++) {
            const int c0 = c_begin + i * kStageChunks;
            issue_stage<KC, XS>(p, ring + (size_t)i * p.slot_bytes, &bar[i], tile0, nt, c0, min(kStageChunks, c_end - c0));
        }
        if constexpr (XS) {
            grid_dep_wait();
            for (int i = 0; i < p.ring && i < nstages; i++) {
                const int c0 = c_begin + i * kStageChunks;
                issue_acts<KC>(p, ring + (size_t)i * p.slot_bytes, &bar[i], c0, min(kStageChunks, c_end - c0));
            }
        }
    }
    grid_dep_launch(); // the next kernel's blocks may take SMs as this one's leave

    float acc[kWarpTiles][MT][4], part[kWarpTiles][MT][4];
#pragma unroll
    for (int a = 0; a < kWarpTiles; a++)
#pragma unroll
        for (int b = 0; b < MT; b++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[a][b][c] = part[a][b][c] = 0.0f;

    // Without xs the activations of a warp's next chunk are loaded one chunk
    // ahead (they come from L2; the weights are already in shared memory).
    constexpr int STEPS = chunk_dims<CODE>::STEPS;
    uint2 xb[MT][STEPS] = {};
    if constexpr (!XS) {
        grid_dep_wait();
        if (busy && c_begin + kw < c_end) act_frags<CODE, MT>(p, c_begin + kw, m0, xb);
    }
    if (p.has_scales) {
        // Decode the block's scales to f32 once: a flush then reads one
        // float2 instead of branching on the encoding (3x the mma's cost for
        // nvfp4's groups of 16).
        mbar_wait(&bar[kStages], 0);
        decode_scales(ssc, p.scale_kind, nt * p.groups * 16, sf, tid, kBulkWarps * 32);
        __syncthreads();
    }
    const unsigned char *wsc = reinterpret_cast<const unsigned char *>(sf + (size_t)wt0 * p.groups * 16);
    for (int i = 0; i < nstages; i++) {
        const int s = i % p.ring;
        const int c0 = c_begin + i * kStageChunks, nc = min(kStageChunks, c_end - c0);
        mbar_wait(&bar[s], (uint32_t)(i / p.ring) & 1u);
        const unsigned char *slot = ring + (size_t)s * p.slot_bytes;
        const unsigned char *buf = slot + wt0 * kStageChunks * 512 + lane * 16;
#if TOPS_CU_BULK_DIAG == 1
        (void)buf;
        (void)wsc;
#else
        if (busy)
            for (int j = kw; j < nc; j += p.kw) {
                uint4 cur[kWarpTiles];
#pragma unroll
                for (int t = 0; t < kWarpTiles; t++)
                    cur[t] = t < wnt ? *reinterpret_cast<const uint4 *>(buf + t * kStageChunks * 512 + j * 512)
                                     : make_uint4(0, 0, 0, 0);
                if constexpr (XS) {
#if TOPS_CU_BULK_DIAG == 2
                    act_frags<CODE, MT>(p, c0 + j, m0, xb);
#else
                    load_xs<CODE, MT>(p, slot + kStageBytes, j, xb);
#endif
                    chunk_step<CODE, BF16, MT, kWarpTiles>(p, cur, wnt, c0 + j, xb, wsc, part, acc);
                } else {
#if TOPS_CU_BULK_PREFETCH
                    // next chunk of this warp: kw further on, in this stage or the next
                    const int jn = j + p.kw < nc ? c0 + j + p.kw : c0 + kStageChunks + kw;
                    uint2 xn[MT][STEPS] = {};
                    if (jn < c_end) act_frags<CODE, MT>(p, jn, m0, xn);
                    chunk_step<CODE, BF16, MT, kWarpTiles>(p, cur, wnt, c0 + j, xb, wsc, part, acc);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++)
#pragma unroll
                        for (int q = 0; q < STEPS; q++) xb[mt][q] = xn[mt][q];
#else
                    act_frags<CODE, MT>(p, c0 + j, m0, xb);
                    chunk_step<CODE, BF16, MT, kWarpTiles>(p, cur, wnt, c0 + j, xb, wsc, part, acc);
#endif
                }
            }
#endif
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
                    const int c1 = c0 + p.ring * kStageChunks, nc1 = min(kStageChunks, c_end - c1);
                    unsigned char *slot1 = ring + (size_t)s * p.slot_bytes;
                    issue_stage<KC, XS>(p, slot1, &bar[s], tile0, nt, c1, nc1);
                    if constexpr (XS) issue_acts<KC>(p, slot1, &bar[s], c1, nc1);
                }
            }
        } else {
            __syncthreads(); // every warp is done with buffer s: refill it
            if (tid == 0 && i + p.ring < nstages) {
                const int c1 = c0 + p.ring * kStageChunks, nc1 = min(kStageChunks, c_end - c1);
                unsigned char *slot1 = ring + (size_t)s * p.slot_bytes;
                issue_stage<KC, XS>(p, slot1, &bar[s], tile0, nt, c1, nc1);
                if constexpr (XS) issue_acts<KC>(p, slot1, &bar[s], c1, nc1);
            }
        }
    }
    if constexpr (XS) grid_dep_wait(); // before the stores (thread 0 waited already)
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
kernel_fn bulk_width(int mt, bool xs) {
    if (mt == 1) return xs ? wbulk_kernel<CODE, BF16, 1, true> : wbulk_kernel<CODE, BF16, 1, false>;
    return xs ? wbulk_kernel<CODE, BF16, 2, true> : wbulk_kernel<CODE, BF16, 2, false>;
}

template <bool BF16>
kernel_fn bulk_code(int code, int mt, bool xs) {
    switch (code) {
    case TOPS__CU_CODE_U4: return bulk_width<TOPS__CU_CODE_U4, BF16>(mt, xs);
    case TOPS__CU_CODE_E2M1: return bulk_width<TOPS__CU_CODE_E2M1, BF16>(mt, xs);
    case TOPS__CU_CODE_I8: return bulk_width<TOPS__CU_CODE_I8, BF16>(mt, xs);
    case TOPS__CU_CODE_E4M3: return bulk_width<TOPS__CU_CODE_E4M3, BF16>(mt, xs);
    default: return bulk_width<BF16 ? TOPS__CU_CODE_BF16 : TOPS__CU_CODE_F16, BF16>(mt, xs);
    }
}

} // namespace

// One kernel per (code family, activation type, 1 or 2 token tiles per warp,
// activations in the ring or from L2).
kernel_fn bulk_kernel(int code, bool bf16, int mt, bool xs) {
    return bf16 ? bulk_code<true>(code, mt, xs) : bulk_code<false>(code, mt, xs);
}

} // namespace tops_cu
