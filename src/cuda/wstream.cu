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
//
// This is the sm_80 path; tops__cu_matmul_launch below sends sm_90+ parts to
// the bulk-copy kernel (wbulk.cu) whenever its shared memory fits.
#include "cuda/kernels.cuh"
#include "cuda/sm90.cuh"

#include <stdlib.h>
#include <string.h>

namespace tops_cu {
namespace {

constexpr int kWarps = 4; // warps per block; they share a K range (L1 reuse of activations)

template <int CODE, bool BF16, int MT>
__global__ void __launch_bounds__(kWarps * 32) wstream_kernel(const Params p) {
    constexpr int NT = MT >= 4 ? 2 : 4; // weight tiles per warp: activation reuse vs registers
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
    const unsigned char *sc = p.scales + (size_t)tile0 * p.scale_tile_bytes;
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
            uint2 xb[MT][chunk_dims<CODE>::STEPS];
            load_xb<CODE, MT>(p, cc, mbase, xb);
            chunk_mma<CODE, BF16, NT, MT, false>(p, cur, NT, cc, xb, cc == c_end - 1, sc, p.scale_tile_bytes, part,
                                                 acc);
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

// Warps per SM the split-K choice aims for (tune.c's table).
long long warps_per_sm() {
    const long long v = tops__cu_tune(TOPS__CU_T_WARPS_PER_SM);
    return v >= 1 && v <= 64 ? v : 16;
}

struct Plan {
    kernel_fn fn;
    bulk_fn bfn;     // the bulk kernel (then fn is unused)
    CUtensorMap xmap; // its activation tiles' tensor map (xt)
    long long blocks_x;
    int threads;
    size_t smem;
    const char *name;
    bool pdl; // launch as a programmatic dependent of the previous kernel
};

// Programmatic dependent launch of the bulk kernel (sm_90): its blocks start
// fetching weights while the previous kernel in the stream finishes, and
// wait for it before touching activations or outputs.  Debug key pdl=0
// turns it off (A/B runs).
bool pdl_on() { return tops__cu_tune(TOPS__CU_T_PDL) != 0; }

// The register-streaming kernel (any sm_80+ part): warps of NT tiles, split
// K until about warps_per_sm() warps per SM stream weights.
void plan_wstream(const tops__cu_matmul_args *a, Params &p, Plan &pl) {
    const int mt = a->m <= 8 ? 1 : a->m <= 16 ? 2 : 4;
    const int nt = mt >= 4 ? 2 : 4;
    p.passes = (int)((a->m + mt * 8 - 1) / (mt * 8));
    const int warp_tasks = (p.ntiles + nt - 1) / nt;
    pl.blocks_x = (long long)((warp_tasks + kWarps - 1) / kWarps) * p.passes;
    // Enough loads in flight to cover HBM latency, at least 4 chunks per split.
    const long long want_warps = warps_per_sm() * tops__cuda_sm_count(-1);
    long long splits = (want_warps + (long long)warp_tasks * p.passes - 1) / ((long long)warp_tasks * p.passes);
    long long max_splits = p.chunks / 4 > 1 ? p.chunks / 4 : 1;
    if (splits > max_splits) splits = max_splits;
    if (splits < 1) splits = 1;
    p.chunks_per_split = (int)((p.chunks + splits - 1) / splits);
    p.splits = (p.chunks + p.chunks_per_split - 1) / p.chunks_per_split;
    pl.fn = a->x_bf16 ? pick_code<true>(a->code, mt) : pick_code<false>(a->code, mt);
    pl.bfn = nullptr;
    pl.threads = kWarps * 32;
    pl.smem = 0;
    pl.name = "wstream mma.sync m16n8k16";
    pl.pdl = false;
}

// Tile groups for one token tile per warp (2 or 3; see plan_bulk).
constexpr long long kBulkTgM8 = 2;
// Most tokens whose activations ride in the bulk kernel's ring as swizzled
// TMA tiles (xt): one pass.  H200, 2026-11-29 18:21 UTC, same call,
// int4-g128: 12.3 / 12.2 / 12.1 / 14.7 us at M = 1 / 2 (or 4) / 8 / 16
// against 13.3 / - / 14.3 / 17.2 with loads from L2 and 13.1 at M = 1 with
// one bulk copy per row (the earlier xs path, removed).
constexpr long long kBulkXtRows = 16;
// Stages the activation-tile kernels keep in flight ahead of the first not
// yet landed (see wbulk.cu).  H200, 2026-11-29 20:44 UTC, same call, us at
// M = 1 / 16: int4-g128 11.0 / 13.3 with 2, 11.0 / 13.5 with 3, 12.7 / 13.9
// with 1, 11.4 / 14.2 with the whole ring issued at once; mxfp4 12.3 / 14.3,
// 12.3 / 14.5, 13.4 / 14.5, 12.3 / 14.8.  The stages after the first `look`
// are issued from the stage loop, which a block enters only after decoding
// its scales: with groups of 16 (nvfp4, 96 KB of f32 scales a block at
// K = 4096) that takes long enough for 2 stages in flight to leave HBM idle
// (nvfp4 13.3 / 13.5 / 15.7 us at M = 1 / 4 / 16 against main's 13.3 / 13.3 /
// 15.4 in that call; with the whole ring up front 12.8 / 12.9 / 15.6 against
// 13.3 / 13.3 / 15.5 at 20:33 UTC), so those keep the whole ring up front.
// That count is for 4-bit codes: a stage of 8- or 16-bit codes carries half or a
// quarter of the K (and of the mma work) for the same bytes, so the warps reach
// the next stage sooner and more stages in flight keep HBM busy.  H200,
// 2026-11-30 07:46 UTC, same call, two processes each, us at M = 1 / 8 / 16 with
// 2 / 3 / 4 / 5 / 6 / 8 stages: e4m3-ch 15.9 / 15.1 / 14.4 / 14.7 / 15.0 / 15.4 at
// M = 1 (16.2 / 15.5 / 14.8 / 15.1 at 8, 17.3 / 16.4 / 16.2 / 16.8 at 16); int8-g32
// and q8_0 17.0 / 16.2 / 16.4 / 16.7 at M = 1, 17.4 / 16.7 / 17.1 at 8, 18.7 /
// 18.4 / 19.0 at 16; mxfp8 16.1 / 15.2 / 15.0 / 15.4, 16.3 / 15.5 / 15.6, 17.9 /
// 17.6 / 18.0; f16 27.4 / 26.5 / 25.7 / 25.6 / 25.9 / 26.4, 27.8 / 26.9 / 26.1 /
// 26.0, 29.1 / 28.1 / 27.3 / 27.2.  4-bit codes stay at 2 (int4-g128 07:44 UTC:
// 9.5 / 10.2 / 12.5 with 2, 9.5 / 10.1 / 13.1 with 3, 9.9 / 10.6 / 13.6 with 4 at
// M = 1 / 4 / 16).  So: 8-bit codes 3 with group scales (a flush each chunk), 4
// with one scale per row or none; 16-bit codes 5.
constexpr long long kBulkLook = 2;
inline long long bulk_look(int chunk_k, int fp) { // chunk_k: 64 / 32 / 16 for 4- / 8- / 16-bit codes
    return chunk_k >= 64 ? kBulkLook : chunk_k == 32 ? (fp > 0 ? 3 : 4) : 5;
}
constexpr size_t kBulkLookScales = 64 * 1024;

// The tensor map of the activations for xt: 64 columns x xrows (8 per token
// tile, so blocks stay 1024-byte aligned and the swizzle depends on the row
// alone) per box, 128-byte swizzle, zeros past M and K.  With K % 64 == 0 one 3-D box
// (64 columns, rows, the stage's blocks of 64 columns) takes a whole stage
// (xt3); otherwise, or when the driver refuses it, one 2-D box per 64
// columns.  False when neither encodes.
bool xt_map(const tops__cu_matmul_args *a, Params &p, CUtensorMap *map) {
    const cuuint64_t row_bytes = (cuuint64_t)a->ldx * 2;
    const cuuint32_t nb = (cuuint32_t)(kStageChunks * tops__cu_chunk_k(a->code) / 64);
    if (a->k % 64 == 0 && tops__cu_tune(TOPS__CU_T_BULK_XT3) != 0) {
        const cuuint64_t dims[3] = {64, (cuuint64_t)a->m, (cuuint64_t)(a->k / 64)}, strides[2] = {row_bytes, 128};
        const cuuint32_t box[3] = {64, (cuuint32_t)p.xrows, nb};
        if (sm90::encode_sw128(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, a->x, dims, strides, box,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_128B)) {
            p.xt3 = 1;
            return true;
        }
    }
    const cuuint64_t dims[2] = {(cuuint64_t)a->k, (cuuint64_t)a->m}, strides[1] = {row_bytes};
    const cuuint32_t box[2] = {64, (cuuint32_t)p.xrows};
    if (!sm90::encode_sw128(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, a->x, dims, strides, box,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B))
        return false;
    p.xt3 = 0;
    return true;
}

// The bulk-copy kernel (wbulk.cu) where the part has it (sm_90+) and a
// block's scales fit in shared memory beside the ring; debug key
// kernel=wstream forces the other one (tests of the sm_80 path, A/B runs).
bool plan_bulk(const tops__cu_matmul_args *a, Params &p, Plan &pl) {
    if (tops__cu_tune(TOPS__CU_T_KERNEL) == TOPS__CU_KERNEL_WSTREAM) return false;
    int dev = 0, major = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    if (major < 9) return false;
    // Token tiles per warp (mt) and warps along tokens (mw): at most 2 x 8
    // tokens per warp keeps a warp's tiles' accumulators in registers; the
    // other warps of its tile group split each stage's chunks along K (kw).
    const int mt = a->m <= 8 ? 1 : 2;
    // The ring gives up stages (down to 2, still 48 KB in flight) before the
    // block's scales stop fitting.  Debug key bulk_ring=n asks for n stages
    // (2..kMaxStages; tuning runs).  The scales are decoded to f32 straight
    // from global memory, each thread's first loads issued at kernel entry
    // (H200 2026-11-29 19:16 UTC, same call, int4-g128 / mxfp4 / int4-g32 /
    // nvfp4 at M = 1 / 4 / 16 / 32: as fast or faster on 15 of 16 rows than
    // the bulk copy to shared memory first, by up to 0.7 us at M = 1 (nvfp4)
    // and 2.2 us at M = 32; int4-g128 at M = 4 0.1 us slower).  The copy,
    // which also leaves less room for the ring, stays for A/B runs and tests:
    // bulk_scd=0/1 forces either.
    const size_t f32 = p.has_scales ? (size_t)kBulkTiles * p.groups * 16 * 4 : 0;
    const long long ring_env = tops__cu_tune(TOPS__CU_T_BULK_RING);
    const bool ring_set = ring_env >= 2 && ring_env <= kMaxStages;
    // With activation tiles the ring holds as much of the block's K as fits
    // (all of it: no refill, no block barrier), else kStages.  With the
    // lookahead below it measured as fast as a ring of 4 (H200 20:44 UTC,
    // int4-g128 11.0 / 13.3 against 11.1 / 13.2 us at M = 1 / 16, mxfp4
    // 12.3 / 14.3 both), and it takes no refill barrier.
    const int block_stages = (p.chunks + kStageChunks - 1) / kStageChunks;
    const int deep_ring = block_stages < 2 ? 2 : block_stages < kMaxStages ? block_stages : kMaxStages;
    const auto ring_for = [&](size_t slot, size_t raw, bool deep) {
        int r = ring_set ? (int)ring_env : deep ? deep_ring : kStages;
        while (r > 2 && bulk_smem_bytes(r, raw, f32, slot) > (size_t)optin) r--;
        return bulk_smem_bytes(r, raw, f32, slot) <= (size_t)optin ? r : 0;
    };
    // Activations as TMA tiles for one pass (M <= 16) of 16-byte aligned rows
    // while the ring keeps at least 3 stages or the block's whole K (3
    // measured as fast as 4: int4-g128 13.0 / 14.5 us at M = 1 / 16 against
    // 13.1 / 14.7);
    // bulk_xt=r sets the most tokens (0: never; A/B runs, tests).
    const long long scd = tops__cu_tune(TOPS__CU_T_BULK_SCD);
    const size_t raw_copy = p.has_scales ? (size_t)kBulkTiles * p.scale_tile_bytes : 0;
    // Activation rows a slot holds: 8 per token tile, or below M = 8 the
    // next power of two of M (bulk_xr=0: always 8; H200 20:33 UTC,
    // same call, int4-g128 at M = 1: 11.0 against 11.4 us with a deep ring,
    // 10.8 against 11.1 with a ring of 4, before the lookahead).
    int xrows = mt * 8;
    if (mt == 1 && tops__cu_tune(TOPS__CU_T_BULK_XR) != 0) {
        xrows = 1;
        while (xrows < a->m) xrows *= 2;
    }
    const size_t xslot =
        ((size_t)kStageBytes + (size_t)kStageChunks * tops__cu_chunk_k(a->code) / 64 * 128 * xrows + 1023) / 1024 * 1024;
    const bool xt_ok = a->m <= 16 && a->m <= tops__cu_tune_or(TOPS__CU_T_BULK_XT, kBulkXtRows) && (uintptr_t)a->x % 16 == 0 &&
                       a->ldx % 8 == 0;
    const auto xt_fits = [&](size_t raw) {
        const int r = ring_for(xslot, raw, true);
        return r >= 3 || (r >= 2 && (r >= block_stages || r == ring_for(kStageBytes, raw, false)));
    };
    p.sc_direct = scd != 0;
    const size_t raw = p.sc_direct ? 0 : raw_copy;
    p.xt = 0;
    p.slot_bytes = kStageBytes;
    if (xt_ok && xt_fits(raw)) {
        p.xrows = xrows;
        if (xt_map(a, p, &pl.xmap)) {
            p.xt = 1;
            p.slot_bytes = (int)xslot;
        }
    }
    // Tile groups: 3 (24 warps of 2 tiles) for one token tile per warp and
    // activation tiles when bulk_tg (default kBulkTgM8) is 3, else 2.
    const int tg = mt == 1 && p.xt && tops__cu_tune_or(TOPS__CU_T_BULK_TG, kBulkTgM8) == 3 ? 3 : 2;
    p.ring = ring_for((size_t)p.slot_bytes, raw, p.xt != 0);
    if (p.ring == 0) return false;
    // Who issues the ring's first round beyond `look`: the first warp past
    // each stage, not thread 0, whose own chunk work held the next copies
    // back (H200, 2026-11-30 04:13 UTC, same call, two processes each, us at
    // M = 1 / 4 / 16: int4-g128 10.94 / 11.17 / 13.35 -> 9.53 / 10.24 /
    // 12.52, mxfp4 12.19 / 12.31 / 14.15 -> 11.04 / 11.25 / 13.73, int4-g32
    // 11.57 / 11.78 / 13.96 -> 10.55 / 10.90 / 13.60, int8-g32 0.1-0.25
    // faster).  Only with activation tiles (M <= 16), where it gains: the
    // kernels that read activations from L2 keep thread 0, which measured
    // the same (04:47 UTC, same call: strict int4-g128 / int4-g32 / q4_0 at
    // M = 17 to 128 within 0.2 us either way, 79.4 / 87.9 / 87.9 at 128).
    // bulk_issue=0 / 1: thread 0 / the first warp (A/B runs, tests).
    p.issue_any = tops__cu_tune_or(TOPS__CU_T_BULK_ISSUE, p.xt ? 1 : 0) != 0;
    const size_t smem = bulk_smem_bytes(p.ring, raw, f32, (size_t)p.slot_bytes);
    p.mw = a->m <= 16 ? 1 : a->m <= 32 ? 2 : a->m <= 64 ? 4 : 8;
    p.kw = kGroupWarps / p.mw;
    p.passes = (int)((a->m + p.mw * mt * 8 - 1) / (p.mw * mt * 8));
    // The last warp done with a slot refills it (instead of a block barrier
    // per stage) for kernels of at least TOPS_CU_BULK_ARRIVE token tiles per
    // warp that load activations from L2; the tile kernels measured faster
    // with the barrier.  bulk_arrive=w: the refill from w token
    // tiles on, whatever the activations (1: all, 3: none; A/B runs, tests).
    const long long arrive = tops__cu_tune(TOPS__CU_T_BULK_ARRIVE);
    p.last_warp = arrive > 0 ? mt >= arrive : !p.xt && mt >= TOPS_CU_BULK_ARRIVE;
    const long long blocks = (long long)((p.ntiles + kBulkTiles - 1) / kBulkTiles) * p.passes;
    // Split K across blocks only when the blocks cannot fill the SMs; a
    // split is whole stages.
    const int sms = tops__cuda_sm_count(-1);
    long long splits = blocks < sms ? sms / blocks : 1;
    const long long cap = tops__cu_tune(TOPS__CU_T_BULK_SPLITS); // at most this many (tests of the ring's wrap)
    if (cap >= 1 && splits > cap) splits = cap;
    const long long max_splits = (p.chunks + kStageChunks - 1) / kStageChunks;
    if (splits > max_splits) splits = max_splits;
    if (splits < 1) splits = 1;
    const int stages = (int)((max_splits + splits - 1) / splits);
    p.chunks_per_split = stages * kStageChunks;
    p.splits = (p.chunks + p.chunks_per_split - 1) / p.chunks_per_split;
    // Scale flush period in k16 steps (see wbulk.cu's chunk_step): none for
    // one scale per row or none, else the group's steps within a chunk.
    const int steps = tops__cu_chunk_k(a->code) / 16;
    const int fp = !p.has_scales || p.groups <= 1 ? 0 : p.group / 16 < steps ? p.group / 16 : steps;
    // Stages in flight before the first lands (then one more as each lands,
    // while the ring has fresh slots): bulk_look() with activation tiles and
    // at most kBulkLookScales of f32 scales, the whole ring otherwise (see
    // kBulkLook); bulk_look=n sets n (A/B runs, tests).
    const long long look = tops__cu_tune_or(TOPS__CU_T_BULK_LOOK, p.xt && f32 <= kBulkLookScales
                                                                      ? bulk_look(tops__cu_chunk_k(a->code), fp)
                                                                      : kMaxStages);
    p.look = look < 1 ? 1 : look > p.ring ? p.ring : (int)look;
    pl.bfn = bulk_kernel(a->code, a->x_bf16 != 0, mt, tg, p.xt != 0, fp);
    if (!pl.bfn) return false;
    pl.fn = nullptr;
    pl.blocks_x = blocks;
    pl.threads = kGroupWarps * tg * 32;
    pl.smem = smem;
    pl.name = p.xt ? "wbulk cp.async.bulk + TMA x + mma.sync m16n8k16" : "wbulk cp.async.bulk + mma.sync m16n8k16";
    pl.pdl = p.splits == 1 && pdl_on();
    if (cudaFuncSetAttribute(reinterpret_cast<const void *>(pl.bfn), cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return true;
}

thread_local const char *last_kernel = "none";

} // namespace
} // namespace tops_cu

using namespace tops_cu;

extern "C" const char *tops__cu_last_kernel(void) { return last_kernel; }

namespace tops_cu {

// The kernels' parameters from the launch arguments (shared by every strict
// kernel); false with *what set when the scale group is unusable.
bool init_params(const tops__cu_matmul_args *a, Params &p, const char **what) {
    memset(&p, 0, sizeof p);
    p.w = static_cast<const uint4 *>(a->weights);
    p.scales = static_cast<const unsigned char *>(a->scales);
    p.scale_kind = a->scale_kind;
    p.has_scales = a->has_scales;
    p.group = a->group;
    p.groups = (int)a->groups;
    // Block groups are powers of two (the format table checks); a row with
    // one scale (or none) never crosses a group boundary inside K.
    p.group_shift = 30;
    if (a->groups > 1) {
        if (a->group < 16 || (a->group & (a->group - 1)) != 0) {
            *what = "a scale group that is not a power of two of at least 16";
            return false;
        }
        p.group_shift = __builtin_ctz((unsigned)a->group);
    }
    p.group_mask = (1 << p.group_shift) - 1;
    p.scale_tile_bytes = p.has_scales ? p.groups * 16 * tops__cu_scale_bytes(a->scale_kind) : 0;
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
    p.mults = static_cast<const unsigned char *>(a->mults);
    if (a->mults) {
        if (a->mult_group < 16 || (a->mult_group & (a->mult_group - 1)) != 0 || a->k_pad % a->mult_group != 0) {
            *what = "a sub-block multiplier group that is not a power of two of at least 16 dividing K";
            return false;
        }
        p.mult_shift = __builtin_ctz((unsigned)a->mult_group);
        p.mult_tile_bytes = (int)(a->k_pad / a->mult_group) * 16 * 2;
    }
    return true;
}

void set_last_kernel(const char *name) { last_kernel = name; }

bool device_is_sm90a() {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return major == 9 && minor == 0;
}

} // namespace tops_cu

extern "C" int tops__cu_matmul_launch(const tops__cu_matmul_args *a, const char **what) {
    cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
    Params p;
    if (!init_params(a, p, what)) return (int)cudaErrorInvalidValue;
    Plan pl;
    memset(&pl.xmap, 0, sizeof pl.xmap);
    if (!plan_bulk(a, p, pl)) plan_wstream(a, p, pl);
    last_kernel = pl.name;
    if (pl.blocks_x > 0x7FFFFFFFLL || p.splits > 65535) {
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
    const dim3 grid((unsigned)pl.blocks_x, (unsigned)p.splits), block((unsigned)pl.threads);
    err = pl.bfn ? launch_kernel(pl.bfn, grid, block, pl.smem, stream, pl.pdl, 1, pl.xmap, p)
                 : launch_kernel(pl.fn, grid, block, pl.smem, stream, pl.pdl, 1, p);
    if (err != cudaSuccess) *what = "the matmul kernel launch";
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
