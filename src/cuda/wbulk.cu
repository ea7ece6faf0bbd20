// Weight streaming through the bulk copy engine (sm_90+).  A block owns
// kBulkTiles tiles of 16 output channels over its whole K range (split K
// across blocks only when N cannot fill the SMs).  The packed slice of one
// tile is contiguous, so one elected thread streams it into a ring of
// shared-memory stages with 1-D `cp.async.bulk` completing on an mbarrier:
// no registers held for the bytes in flight, no split-K pass at N = 12288,
// and no per-lane load instructions (the H200 runs showed these kernels
// bound by instruction issue, not by HBM).  With activation tiles the ring
// holds as much of the block's K as fits (all 8 stages at M <= 2 for
// int4-g128), `look` stages in flight ahead of the first not yet landed.
// The block's scales are decoded to f32 in shared memory once.  Warps split
// the block's tiles (tile groups), each stage's chunks along K (kw) and the
// tokens (mw), run the decode + mma step, and their partial sums meet in
// shared memory in a fixed order (the same bits every run).
// Activations: for one pass of at most 16 tokens with 16-byte aligned rows
// (xt) they ride in the ring slot with the stage's weights as TMA tiles of
// 64 columns x 8 or 16 rows with 128-byte swizzled rows (one 3-D tensor copy
// per stage, or one 2-D copy per 64 columns when K is not a multiple of 64;
// rows past M and columns past K arrive as zeros), so B fragments come from
// shared memory without bank conflicts; otherwise from L2 into registers a
// chunk ahead.  Launched as a programmatic dependent (PDL), a block fetches
// its scales and first stages of weights before waiting for the previous
// kernel in the stream, and touches activations and outputs only after that
// wait.
#include "cuda/kernels.cuh"
#include "cuda/sm90.cuh"

namespace tops_cu {
namespace {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
using namespace sm90;

// Bytes of a stage's activation tiles (xt), whole boxes (zero-filled past K).
template <int KC>
__device__ __forceinline__ uint32_t act_bytes(const Params &p, int nc) {
    const int nb = p.xt3 ? kStageChunks * KC / 64 : (nc * KC + 63) / 64;
    return (uint32_t)(nb * p.xrows * 128);
}

// The activation tiles of stage (c0, nc): one 3-D box, or a 2-D box per 64
// columns, block b at b * 128 * xrows bytes of the slot's activation part.
template <int KC>
__device__ __forceinline__ void issue_acts(const CUtensorMap *xmap, const Params &p, unsigned char *slot,
                                          uint64_t *bar, int c0, int nc) {
    unsigned char *xs = slot + kStageBytes;
    if (p.xt3) {
        tma_load_3d(xs, xmap, bar, 0, 0, c0 * KC / 64);
    } else {
        for (int b = 0; b < (nc * KC + 63) / 64; b++) tma_load_2d(xs + b * 128 * p.xrows, xmap, bar, c0 * KC + 64 * b, 0);
    }
}

// Stage (c0, nc) into one ring slot: chunks c0 .. c0 + nc of tiles 0 .. nt
// (tile t at t * kStageChunks * 512 bytes of the slot); with xt the barrier
// expects the activation tiles' bytes too, whose copies may come later
// (they wait for the previous kernel).
template <int KC, bool XT>
__device__ __forceinline__ void issue_stage(const Params &p, unsigned char *slot, uint64_t *bar, int tile0, int nt,
                                            int c0, int nc) {
    mbar_expect_tx(bar, (uint32_t)(nt * nc * 512) + (XT ? act_bytes<KC>(p, nc) : 0u));
    for (int t = 0; t < nt; t++)
        bulk_copy(slot + t * kStageChunks * 512, p.w + ((size_t)(tile0 + t) * p.chunks + c0) * 32, (uint32_t)nc * 512,
                  bar);
}

// B fragments of a warp's chunk j of a stage from its activation tiles.
// Block b (64 columns) holds `xrows` rows (zeros past M) as 128-byte lines
// L = b * xrows + row, its 16-byte unit u at u ^ (L & 7) (the 128-byte
// swizzle over the 1024-byte aligned activation part), so the 8 rows a
// warp's lanes read at one column fall in different banks.  xrows is 8 per
// token tile, or for M < 8 the next power of two of M (a stage then carries
// 1 KB of activations at M = 1 instead of 8, which leaves room for a deeper
// ring); lanes past the rows read row gid mod xrows: B's columns are
// independent, and the epilogue drops those tokens.  A warp's chunk is the
// same in every stage (kw = kStageChunks), so xt_offsets() computes its
// lane's offsets of token tile 0 once (tile mt is mt * 1024 bytes on).
template <int CODE>
__device__ __forceinline__ void xt_offsets(int j, int xrows, int (&xo)[chunk_dims<CODE>::STEPS]) {
    constexpr int KC = chunk_dims<CODE>::KC;
    const int lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
    const int row = gid & ((xrows < 8 ? xrows : 8) - 1);
#pragma unroll
    for (int q = 0; q < chunk_dims<CODE>::STEPS; q++) {
        const int c = j * KC + 16 * q; // the step's first column in the stage
        const int line = (c >> 6) * xrows + row, u = ((c & 63) >> 3) + (tig >> 1);
        xo[q] = line * 128 + ((u ^ (line & 7)) << 4) + ((tig & 1) << 3);
    }
}
template <int CODE, int MT>
__device__ __forceinline__ void load_xt(const unsigned char *xs, const int (&xo)[chunk_dims<CODE>::STEPS],
                                        uint2 (&xb)[MT][chunk_dims<CODE>::STEPS]) {
#pragma unroll
    for (int q = 0; q < chunk_dims<CODE>::STEPS; q++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++) xb[mt][q] = *reinterpret_cast<const uint2 *>(xs + mt * 1024 + xo[q]);
}

// A block's scales (`bytes` in their packed encoding at `src`, global or
// shared memory, 16-byte aligned) to f32 in shared memory, 16 bytes a
// thread at a time with the encoding resolved once outside the loop (a
// per-entry switch made mxfp4's 12288 entries a block a visible part of the
// prologue).  The first kScaleBatch vectors of each thread are loaded by
// scale_batch() (at kernel entry, ahead of the ring's copies, when they come
// from global memory) and passed in `pre`; the rest in batches like it.
constexpr int kScaleBatch = 4;
__device__ __forceinline__ void scale_batch(const unsigned char *src, int nv, int v0, int step,
                                            uint4 (&raw)[kScaleBatch]) {
#pragma unroll
    for (int b = 0; b < kScaleBatch; b++)
        raw[b] = v0 + b * step < nv ? reinterpret_cast<const uint4 *>(src)[v0 + b * step] : make_uint4(0, 0, 0, 0);
}
// Four 8-bit scales of one word: whether one needs the per-entry path
// (e8m0 0x00, a subnormal, or 0xFF, NaN; ue4m3 0x7F or 0xFF, NaN), and
// otherwise their f32 values by bit moves: e8m0 e -> e << 23; ue4m3 (sign
// ignored) b << 20 is e4m3's exponent and mantissa as an f32 of bias 127,
// times 2^120 restores bias 7 (exact, subnormals included: no ftz).  Two
// instructions an entry instead of about ten with the branches (nvfp4
// decodes 24576 entries a block before its first stage).
__device__ __forceinline__ uint32_t has_zero_byte(uint32_t x) { return (x - 0x01010101u) & ~x & 0x80808080u; }
template <int KIND>
__device__ __forceinline__ bool scale_bytes_special(uint32_t x) {
    if constexpr (KIND == TOPS__CU_SCALE_E8M0) return (has_zero_byte(x) | has_zero_byte(~x)) != 0;
    return has_zero_byte(~x & 0x7F7F7F7Fu) != 0;
}
template <int KIND>
__device__ __forceinline__ void scale_bytes_plain(uint32_t x, float (&f)[4]) {
    if constexpr (KIND == TOPS__CU_SCALE_E8M0) {
        f[0] = __uint_as_float((x << 23) & 0x7F800000u);
        f[1] = __uint_as_float((x << 15) & 0x7F800000u);
        f[2] = __uint_as_float((x << 7) & 0x7F800000u);
        f[3] = __uint_as_float((x >> 1) & 0x7F800000u);
    } else {
        f[0] = __uint_as_float((x << 20) & 0x07F00000u) * 0x1p120f;
        f[1] = __uint_as_float((x << 12) & 0x07F00000u) * 0x1p120f;
        f[2] = __uint_as_float((x << 4) & 0x07F00000u) * 0x1p120f;
        f[3] = __uint_as_float((x >> 4) & 0x07F00000u) * 0x1p120f;
    }
}
template <int KIND>
__device__ __forceinline__ void decode_scales_as(const unsigned char *src, int bytes, float *out, int tid, int step,
                                                 const uint4 (&pre)[kScaleBatch]) {
    const int nv = bytes / 16;
    uint4 raw[kScaleBatch];
#pragma unroll
    for (int b = 0; b < kScaleBatch; b++) raw[b] = pre[b];
    for (int v0 = tid; v0 < nv; v0 += kScaleBatch * step) {
        if (v0 != tid) scale_batch(src, nv, v0, step, raw);
#pragma unroll
        for (int b = 0; b < kScaleBatch; b++) {
            const int v = v0 + b * step;
            if (v >= nv) break;
            const uint32_t w[4] = {raw[b].x, raw[b].y, raw[b].z, raw[b].w};
            if constexpr (KIND == TOPS__CU_SCALE_F32) {
                reinterpret_cast<uint4 *>(out)[v] = raw[b];
            } else if constexpr (KIND == TOPS__CU_SCALE_F16) {
                float4 *o = reinterpret_cast<float4 *>(out) + 2 * v;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float2 a = __half22float2(bits_h2(w[2 * h])), c = __half22float2(bits_h2(w[2 * h + 1]));
                    o[h] = make_float4(a.x, a.y, c.x, c.y);
                }
            } else {
                float4 *o = reinterpret_cast<float4 *>(out) + 4 * v;
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    float f[4];
                    if (!scale_bytes_special<KIND>(w[q])) {
                        scale_bytes_plain<KIND>(w[q], f);
                    } else {
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            const uint32_t e = (w[q] >> (8 * i)) & 0xFFu;
                            f[i] = KIND == TOPS__CU_SCALE_E8M0 ? e8m0_to_f32(e) : ue4m3_to_f32(e);
                        }
                    }
                    o[q] = make_float4(f[0], f[1], f[2], f[3]);
                }
            }
        }
    }
}
__device__ __forceinline__ void decode_scales(const unsigned char *src, int kind, int bytes, float *out, int tid,
                                              int step, const uint4 (&pre)[kScaleBatch]) {
    switch (kind) {
    case TOPS__CU_SCALE_F32: decode_scales_as<TOPS__CU_SCALE_F32>(src, bytes, out, tid, step, pre); break;
    case TOPS__CU_SCALE_F16: decode_scales_as<TOPS__CU_SCALE_F16>(src, bytes, out, tid, step, pre); break;
    case TOPS__CU_SCALE_E8M0: decode_scales_as<TOPS__CU_SCALE_E8M0>(src, bytes, out, tid, step, pre); break;
    default: decode_scales_as<TOPS__CU_SCALE_UE4M3>(src, bytes, out, tid, step, pre); break;
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

// One chunk of K for a warp's NT tiles and MT token tiles: decode, mma into
// `part`, and every FP k16 steps (a scale group's end: FP = min(group / 16,
// steps per chunk), known at compile time, so no per-step group test) fold
// part * scale into `acc`.  A warp's chunks are kw apart, so a group longer
// than a chunk is still closed at each chunk's end.  The first mma of a
// group takes zero as its C (no zeroing moves).  FP = 0 (one scale per row,
// or none): `part` runs over the whole K and is scaled once at the end.
// `sc`: this lane's f32 scales of the first tile (rows gid and gid + 8 of
// each group), `sc_stride` floats from one tile's to the next.
template <int CODE, bool BF16, int NT, int MT, int FP>
__device__ __forceinline__ void chunk_step(const Params &p, const uint4 (&cur)[NT], int chunk,
                                           const uint2 (&xb)[MT][chunk_dims<CODE>::STEPS], const float *sc,
                                           int sc_stride, float (&part)[NT][MT][4], float (&acc)[NT][MT][4]) {
    constexpr int STEPS = chunk_dims<CODE>::STEPS, KC = chunk_dims<CODE>::KC;
    constexpr int GS = FP > 0 ? FP : STEPS + 1; // steps per group (FP = 0: no group starts or ends here)
    static_assert(STEPS % GS == 0 || FP == 0, "scale groups split a chunk evenly");
#pragma unroll
    for (int j = 0; j < STEPS; j++) {
#pragma unroll
        for (int t = 0; t < NT; t++) {
            uint32_t a[4];
            decode_step<CODE, BF16>(cur[t], j, a);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                if (FP > 0 && j % GS == 0)
#pragma unroll
                    for (int i = 0; i < 4; i++) part[t][mt][i] = 0.0f;
                mma16816<BF16>(part[t][mt], a, xb[mt][j].x, xb[mt][j].y);
            }
        }
        if constexpr (FP > 0) {
            if ((j + 1) % GS == 0) {
                const int g = (chunk * KC + 16 * j) >> p.group_shift;
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    const float2 s2 = *reinterpret_cast<const float2 *>(sc + t * sc_stride + g * 16);
                    add_scaled_part<MT>(acc[t], part[t], s2);
                }
            }
        }
    }
}
#endif

// TG: tile groups; XT: activations as TMA tiles in the ring slots (else
// from L2); FP: see chunk_step.
template <int CODE, bool BF16, int MT, int TG, bool XT, int FP>
__global__ void __launch_bounds__(kGroupWarps * TG * 32, TOPS_CU_BULK_MINB)
    wbulk_kernel(const __grid_constant__ CUtensorMap xmap, const Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int kWarpTiles = kBulkTiles / TG, kBulkWarps = kGroupWarps * TG;
    constexpr int KC = chunk_dims<CODE>::KC;
    static_assert(kGroupWarps == kStageChunks, "with xt a warp takes one chunk of each stage (kw = kStageChunks)");
    extern __shared__ __align__(128) unsigned char smem_raw[];
    // ring[p.ring][p.slot_bytes] (1024-byte aligned) | scales as copied (unless
    // sc_direct) | scales as f32 | mbarriers
    unsigned char *ring =
        smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023); // bulk_smem_bytes() counts the 1 KB
    unsigned char *ssc = ring + (size_t)p.ring * p.slot_bytes;
    float *sf = reinterpret_cast<float *>(
        ssc + ((p.has_scales && !p.sc_direct ? (size_t)kBulkTiles * p.scale_tile_bytes : 0) + 15) / 16 * 16);
    uint64_t *bar = reinterpret_cast<uint64_t *>(sf + (p.has_scales ? kBulkTiles * p.groups * 16 : 0));
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tg = warp / kGroupWarps, gw = warp % kGroupWarps;
    const int kw = gw % p.kw, mw = gw / p.kw;
    const int pass = blockIdx.x % p.passes;
    const int tile0 = (blockIdx.x / p.passes) * kBulkTiles;
    const int nt = min(kBulkTiles, p.ntiles - tile0);
    const int wt0 = tg * kWarpTiles;           // this warp's first tile in the block
    const int wnt = min(kWarpTiles, nt - wt0); // and how many (<= 0: none)
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

    // Scales straight from global memory: each thread's first loads go out
    // before the ring's copies queue up behind them.
    const unsigned char *gsc = p.scales + (size_t)tile0 * p.scale_tile_bytes;
    const int sc_bytes = p.has_scales ? nt * p.scale_tile_bytes : 0;
    uint4 pre[kScaleBatch];
    scale_batch(gsc, p.sc_direct ? sc_bytes / 16 : 0, tid, kBulkWarps * 32, pre);

    // bar[0, kMaxStages): ring slot filled; bar[kMaxStages]: scales copied;
    // empty[s]: every thread done reading slot s (last-warp refill only)
    uint64_t *empty = bar + kMaxStages + 1;
    int *done = reinterpret_cast<int *>(empty + kMaxStages); // warps done with each ring slot
    int *issued = done + kMaxStages;                          // stage i of the first round issued (issue_any)
    if (tid == 0) {
        for (int s = 0; s <= kMaxStages; s++) mbar_init(&bar[s], 1);
        for (int s = 0; s < kMaxStages; s++) mbar_init(&empty[s], kBulkWarps * 32);
        for (int s = 0; s < kMaxStages; s++) done[s] = issued[s] = 0;
        mbar_init_fence();
    }
    __syncthreads();
    // Weights and scales do not depend on the kernel before this one in the
    // stream (packed weights are written only by copies): they are fetched
    // before waiting for it; activations and outputs after.
    if (tid == 0) {
        if (p.has_scales && !p.sc_direct) {
            mbar_expect_tx(&bar[kMaxStages], (uint32_t)sc_bytes);
            bulk_copy(ssc, gsc, (uint32_t)sc_bytes, &bar[kMaxStages]);
        }
        // The first `look` stages; the others of the ring's first round as
        // stages land (below), the rest as slots are freed.
        for (int i = 0; i < p.look && i < nstages; i++) {
            const int c0 = c_begin + i * kStageChunks;
            issue_stage<KC, XT>(p, ring + (size_t)i * p.slot_bytes, &bar[i], tile0, nt, c0, min(kStageChunks, c_end - c0));
        }
        if constexpr (XT) {
            grid_dep_wait();
            for (int i = 0; i < p.look && i < nstages; i++) {
                const int c0 = c_begin + i * kStageChunks;
                issue_acts<KC>(&xmap, p, ring + (size_t)i * p.slot_bytes, &bar[i], c0, min(kStageChunks, c_end - c0));
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

    // Without xt the activations of a warp's next chunk are loaded one chunk
    // ahead (they come from L2; the weights are already in shared memory).
    constexpr int STEPS = chunk_dims<CODE>::STEPS;
    uint2 xb[MT][STEPS] = {};
    if constexpr (!XT) {
        grid_dep_wait();
        if (busy && c_begin + kw < c_end) act_frags<CODE, MT>(p, c_begin + kw, m0, xb);
    }
    if (p.has_scales) {
        // Decode the block's scales to f32 once: a flush then reads one
        // float2 instead of branching on the encoding (3x the mma's cost for
        // nvfp4's groups of 16).
        const unsigned char *src = gsc;
        if (!p.sc_direct) {
            mbar_wait(&bar[kMaxStages], 0);
            src = ssc;
            scale_batch(src, sc_bytes / 16, tid, kBulkWarps * 32, pre);
        }
        decode_scales(src, p.scale_kind, sc_bytes, sf, tid, kBulkWarps * 32, pre);
        __syncthreads();
    }
    // This lane's scales (rows gid and gid + 8 of each group) of the warp's
    // first tile.  A ragged last block's warps run their missing tiles on
    // whatever the ring and scale areas hold; the epilogue drops them.
    const int sc_stride = p.groups * 16;
    const float *wsc = sf + (size_t)wt0 * sc_stride + 2 * (lane >> 2);
    int xo[STEPS];
    if constexpr (XT) xt_offsets<CODE>(kw, p.xrows, xo);
    int s = 0;       // ring slot of stage i
    uint32_t ph = 0; // and the parity of its current use
    for (int i = 0; i < nstages; i++) {
        const int c0 = c_begin + i * kStageChunks, nc = min(kStageChunks, c_end - c0);
        mbar_wait(&bar[s], ph);
        // Stage i has landed: thread 0 issues stage i + look into its fresh
        // slot.  Issuing the whole ring at once measured slower (kBulkLook in
        // wstream.cu): the copies of all SMs share HBM, so the more bytes are
        // in flight, the later the first stage completes, with the warps
        // idle until it does; 2 stages in flight still keep HBM busy.
        if (i + p.look < nstages && i + p.look < p.ring &&
            (p.issue_any ? lane == 0 && atomicExch(&issued[i + p.look], 1) == 0 : tid == 0)) {
            const int i1 = i + p.look, c1 = c_begin + i1 * kStageChunks, nc1 = min(kStageChunks, c_end - c1);
            unsigned char *slot1 = ring + (size_t)i1 * p.slot_bytes;
            issue_stage<KC, XT>(p, slot1, &bar[i1], tile0, nt, c1, nc1);
            if constexpr (XT) {
                grid_dep_wait(); // (satisfied: thread 0 waited before the first activation tiles)
                issue_acts<KC>(&xmap, p, slot1, &bar[i1], c1, nc1);
            }
        }
        const unsigned char *slot = ring + (size_t)s * p.slot_bytes;
        const unsigned char *buf = slot + wt0 * kStageChunks * 512 + lane * 16;
#if TOPS_CU_BULK_DIAG == 1
        (void)buf;
        (void)wsc;
#else
        // (with xt, kw = kStageChunks: one chunk a stage, the same j each time)
        if (busy)
            for (int j = kw; j < nc; j += XT ? kStageChunks : p.kw) {
                uint4 cur[kWarpTiles];
#pragma unroll
                for (int t = 0; t < kWarpTiles; t++)
                    cur[t] = *reinterpret_cast<const uint4 *>(buf + t * kStageChunks * 512 + j * 512);
                if constexpr (XT) {
#if TOPS_CU_BULK_DIAG == 2
                    act_frags<CODE, MT>(p, c0 + j, m0, xb);
#else
                    load_xt<CODE, MT>(slot + kStageBytes, xo, xb);
#endif
                    chunk_step<CODE, BF16, kWarpTiles, MT, FP>(p, cur, c0 + j, xb, wsc, sc_stride, part, acc);
                } else {
#if TOPS_CU_BULK_PREFETCH
                    // next chunk of this warp: kw further on, in this stage or the next
                    const int jn = j + p.kw < nc ? c0 + j + p.kw : c0 + kStageChunks + kw;
                    uint2 xn[MT][STEPS] = {};
                    if (jn < c_end) act_frags<CODE, MT>(p, jn, m0, xn);
                    chunk_step<CODE, BF16, kWarpTiles, MT, FP>(p, cur, c0 + j, xb, wsc, sc_stride, part, acc);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++)
#pragma unroll
                        for (int q = 0; q < STEPS; q++) xb[mt][q] = xn[mt][q];
#else
                    act_frags<CODE, MT>(p, c0 + j, m0, xb);
                    chunk_step<CODE, BF16, kWarpTiles, MT, FP>(p, cur, c0 + j, xb, wsc, sc_stride, part, acc);
#endif
                }
            }
#endif
        const bool refill = i + p.ring < nstages;
        const int c1 = c0 + p.ring * kStageChunks, nc1 = min(kStageChunks, c_end - c1);
        unsigned char *slot1 = ring + (size_t)s * p.slot_bytes;
        if (p.last_warp) {
            // The last warp done with slot s refills it: warps drift apart by
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
                mbar_wait(&empty[s], ph);
                atomicExch(&done[s], 0); // atomic like the other warps' adds
                if (refill) {
                    issue_stage<KC, XT>(p, slot1, &bar[s], tile0, nt, c1, nc1);
                    if constexpr (XT) issue_acts<KC>(&xmap, p, slot1, &bar[s], c1, nc1);
                }
            }
        } else if (refill) {
            // Every warp is done with slot s: refill it.  Slots that are not
            // refilled (the last ring's worth of stages, all of them when the
            // ring holds the block's whole K) need no barrier, so the warps
            // drift apart instead of meeting at each stage.
            __syncthreads();
            if (tid == 0) {
                issue_stage<KC, XT>(p, slot1, &bar[s], tile0, nt, c1, nc1);
                if constexpr (XT) issue_acts<KC>(&xmap, p, slot1, &bar[s], c1, nc1);
            }
        }
        if (++s == p.ring) {
            s = 0;
            ph ^= 1u;
        }
    }
    if constexpr (FP == 0) {
        // one scale per row (or none) for the whole K
#pragma unroll
        for (int t = 0; t < kWarpTiles; t++) {
            const float2 s2 = p.has_scales ? *reinterpret_cast<const float2 *>(wsc + t * sc_stride) : make_float2(1.0f, 1.0f);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                acc[t][mt][0] = part[t][mt][0] * s2.x;
                acc[t][mt][1] = part[t][mt][1] * s2.x;
                acc[t][mt][2] = part[t][mt][2] * s2.y;
                acc[t][mt][3] = part[t][mt][3] * s2.y;
            }
        }
    }
    if constexpr (XT) grid_dep_wait(); // before the stores (thread 0 waited already)
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

// Kernels per code family: FP = 0 and every divisor of the chunk's k16
// steps (scale groups of 16 .. KC and longer).
template <int CODE, bool BF16, int MT, int TG, bool XT>
bulk_fn bulk_fp(int fp) {
    constexpr int STEPS = chunk_dims<CODE>::STEPS;
    switch (fp) {
    case 0: return wbulk_kernel<CODE, BF16, MT, TG, XT, 0>;
    case 1: return wbulk_kernel<CODE, BF16, MT, TG, XT, 1>;
    case 2: return STEPS >= 2 ? wbulk_kernel<CODE, BF16, MT, TG, XT, (STEPS >= 2 ? 2 : 1)> : nullptr;
    case 4: return STEPS >= 4 ? wbulk_kernel<CODE, BF16, MT, TG, XT, (STEPS >= 4 ? 4 : 1)> : nullptr;
    default: return nullptr;
    }
}

template <int CODE, bool BF16>
bulk_fn bulk_width(int mt, int tg, bool xt, int fp) {
    if (mt == 1 && tg == 3) return xt ? bulk_fp<CODE, BF16, 1, 3, true>(fp) : nullptr; // spills from L2 loads
    if (tg != 2) return nullptr;
    if (mt == 1) return xt ? bulk_fp<CODE, BF16, 1, 2, true>(fp) : bulk_fp<CODE, BF16, 1, 2, false>(fp);
    return xt ? bulk_fp<CODE, BF16, 2, 2, true>(fp) : bulk_fp<CODE, BF16, 2, 2, false>(fp);
}

template <bool BF16>
bulk_fn bulk_code(int code, int mt, int tg, bool xt, int fp) {
    switch (code) {
    case TOPS__CU_CODE_U4: return bulk_width<TOPS__CU_CODE_U4, BF16>(mt, tg, xt, fp);
    case TOPS__CU_CODE_E2M1: return bulk_width<TOPS__CU_CODE_E2M1, BF16>(mt, tg, xt, fp);
    case TOPS__CU_CODE_I8: return bulk_width<TOPS__CU_CODE_I8, BF16>(mt, tg, xt, fp);
    case TOPS__CU_CODE_E4M3: return bulk_width<TOPS__CU_CODE_E4M3, BF16>(mt, tg, xt, fp);
    default: return bulk_width<BF16 ? TOPS__CU_CODE_BF16 : TOPS__CU_CODE_F16, BF16>(mt, tg, xt, fp);
    }
}

} // namespace

// One kernel per (code family, activation type, token tiles per warp, tile
// groups, activations as TMA tiles or from L2, scale flush period); nullptr
// for a combination that does not exist.
bulk_fn bulk_kernel(int code, bool bf16, int mt, int tg, bool xt, int fp) {
    return bf16 ? bulk_code<true>(code, mt, tg, xt, fp) : bulk_code<false>(code, mt, tg, xt, fp);
}

} // namespace tops_cu
