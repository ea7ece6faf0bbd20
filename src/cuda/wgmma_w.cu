// Strict matmul for medium and large M on Hopper's warpgroup MMA (sm_90a).
//
// Swap AB, as in the streaming kernels: the weights are wgmma's A operand
// (m64 = 64 output channels, four packed 16-channel tiles, one per warp of
// the warpgroup) and come FROM REGISTERS: each lane reads its tile's 16
// packed bytes per chunk from shared memory and decode_step() turns them
// into the mma.m16n8k16 A fragment, which is also the layout of a warp's
// m16 slice of wgmma's register A.  So each weight is decoded once per CTA
// and serves all TN tokens of the tile (mma.sync decoded it once per 8..16
// tokens).  The activations are the B operand (n = TN tokens), K-major in
// shared memory with the 128-byte swizzle.  One producer thread (in its own
// warpgroup) feeds a ring of kRing stages: the activations through TMA (rows
// past M and columns past K arrive as zeros), the packed weights and their
// scale entries through 1-D bulk copies.
//
// Strict semantics as wbulk: products exact in f32 accumulation, each scale
// group summed into a part accumulator (scale-d = 0 on its first step), then
// acc += part * scale in f32.  Or, where pack.c's tops__cu_fold_shift allows
// it, FOLDED scales (wgmma_f_kernel): each decoded code is multiplied by its
// scale in the activations' 16-bit type (exact for e2m1 in range; one
// rounding for 4-bit integers in relaxed mode, two exact terms in strict
// mode: twice the wgmmas), so one f32 accumulator runs
// over the whole K: no group-end drain, and the next chunk is decoded while
// the current chunk's wgmmas run.  A CTA is two warpgroups (2 * WT m64 tiles) x
// TN tokens x one K split; split partials meet in a workspace and the last
// CTA of a tile to finish sums them in split order (the same bits every run).
#include "cuda/kernels.cuh"
#include "cuda/sm90.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

namespace tops_cu {
namespace {

constexpr int kConsumerWarps = 8;                   // two warpgroups
constexpr int kThreads = kConsumerWarps * 32 + 128; // and a producer warpgroup (setmaxnreg needs whole ones)
constexpr int kRing = 4;                            // stages

// A stage: sb k64 blocks of K; the activations (tn rows of 128 bytes per
// block, TMA-swizzled), the CTA's 8 * wt packed tiles (cpb chunks of 512
// bytes per block each), then each tile's scale entries for the stage's
// groups (at most 4 groups of 16 entries of 4 bytes per block): 26-44 KB.
constexpr int kScaleBlockBytes = 4 * 16 * 4;
__host__ __device__ constexpr int stage_blocks(int code) { return code <= TOPS__CU_CODE_E2M1 ? 2 : 1; }
__host__ __device__ constexpr int stage_bytes(int sb, int cpb, int tn, int wt) {
    return sb * (tn * 128 + 8 * wt * (cpb * 512 + kScaleBlockBytes));
}

#ifdef TOPS_CU_WGMMA // device helpers: the sm_90a pass only
// The packed fragments order each k16 step's K as mma.sync's B loads want
// it (lane t holds K 4t .. 4t + 3 in the slots of K 2t, 2t + 1, 2t + 8,
// 2t + 9); wgmma reads B from shared memory in K order, so each 32-byte
// k16 group of every row gets the same order: 4-byte pairs 0 2 4 6 1 3 5 7.
// Rows are TMA's 128-byte swizzle: 16-byte piece c of row r sits at c ^ (r % 8).
// NT threads (tid 0 .. NT - 1) permute the stage's nbs blocks, then fence:
// the tensor cores (async proxy) read these generic writes.
template <int TN, int SB, int NT>
__device__ __forceinline__ void permute_rows(unsigned char *x, int nbs, int tid) {
#pragma unroll
    for (int it = 0; it < (SB * TN * 4 + NT - 1) / NT; it++) {
        const int e = it * NT + tid;
        const int g4 = e & 3, row = (e >> 2) % TN, b = (e >> 2) / TN;
        if (b < nbs) {
            unsigned char *rp = x + b * TN * 128 + row * 128;
            uint4 *p0 = reinterpret_cast<uint4 *>(rp + (((2 * g4) ^ (row & 7)) * 16));
            uint4 *p1 = reinterpret_cast<uint4 *>(rp + (((2 * g4 + 1) ^ (row & 7)) * 16));
            const uint4 u = *p0, v = *p1;
            *p0 = make_uint4(u.x, u.z, v.x, v.z);
            *p1 = make_uint4(u.y, u.w, v.y, v.w);
        }
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Where a CTA works: its ring and barriers (full: copies landed; empty: the
// consumers are done with a slot), its
// token tile, block of m64 tiles, K split and that split's K blocks.
struct Cta {
    unsigned char *ring;
    uint64_t *full, *empty;
    int tt, cb, split, b_begin, nb, nstages;
};

// Where a CTA works: token tile tt, block cb of channel tiles, K split and
// that split's k64 blocks [b_begin, b_begin + nb) (cpb chunks per block).
__device__ __forceinline__ void place(const Params &p, int cpb, int &tt, int &cb, int &split, int &b_begin, int &nb) {
    tt = blockIdx.x % p.passes;
    cb = blockIdx.x / p.passes;
    split = blockIdx.y;
    const int kblocks = p.chunks / cpb, bps = p.chunks_per_split / cpb;
    b_begin = split * bps;
    nb = min(bps, kblocks - b_begin);
}

template <int CODE, int WT, int TN>
__device__ __forceinline__ Cta cta_begin(const Params &p, unsigned char *smem_raw) {
    using namespace sm90;
    constexpr int CPB = 64 / chunk_dims<CODE>::KC, SB = stage_blocks(CODE);
    Cta c;
    // 128-byte swizzled tiles want 1024-byte alignment.  Made from a shared
    // address (not an integer cast of a generic one, which hid the address
    // space), the ring stays a shared-memory pointer for the compiler:
    // ld.shared instead of generic loads for the weights, scales and the
    // permute (H200, 2026-11-29 19:18 UTC, a build with these loads: the
    // strict kernel 1.25x faster, 79.9 -> 64.1 us, int4-g128 at M = 128).
    const uint32_t base = smem_addr(smem_raw);
    c.ring = static_cast<unsigned char *>(__cvta_shared_to_generic(base + ((1024u - (base & 1023u)) & 1023u)));
    c.full = reinterpret_cast<uint64_t *>(c.ring + kRing * stage_bytes(SB, CPB, TN, WT));
    c.empty = c.full + kRing;
    place(p, CPB, c.tt, c.cb, c.split, c.b_begin, c.nb);
    c.nstages = (c.nb + SB - 1) / SB;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kRing; s++) {
            mbar_init(&c.full[s], 1);
            mbar_init(&c.empty[s], kConsumerWarps * 32);
        }
        mbar_init_fence();
    }
    __syncthreads();
    return c;
}

// The producer thread: fills the ring, stage by stage.
template <int CODE, int WT, int TN>
__device__ __forceinline__ void produce(const Params &p, const CUtensorMap &xmap, const Cta &c) {
    using namespace sm90;
    constexpr int CPB = 64 / chunk_dims<CODE>::KC, SB = stage_blocks(CODE), SBYTES = stage_bytes(SB, CPB, TN, WT);
    constexpr int XBYTES = SB * TN * 128, TILE_BYTES = SB * CPB * 512, TILES = 8 * WT;
    constexpr int SCALE_BYTES = SB * kScaleBlockBytes; // per tile and stage
    const int esz = p.has_scales ? p.scale_tile_bytes / (p.groups * 16) : 0;
    const int mtiles = p.ntiles >> 2;
    for (int i = 0; i < c.nstages; i++) {
        const int s = i % kRing;
        if (i >= kRing) mbar_wait(&c.empty[s], ((i / kRing) + 1) & 1);
        const int nbs = min(SB, c.nb - i * SB);
        unsigned char *stg = c.ring + s * SBYTES;
        // the groups this stage's K touches (clamped: K is padded past the last group)
        const int k0 = (c.b_begin + i * SB) * 64, g0 = min(k0 >> p.group_shift, p.groups - 1);
        const int ng = min((k0 + nbs * 64 - 1) >> p.group_shift, p.groups - 1) - g0 + 1;
        const uint32_t sbytes = p.has_scales ? (uint32_t)(ng * 16 * esz) : 0u;
        mbar_expect_tx(&c.full[s], (uint32_t)(nbs * (TN * 128 + TILES * CPB * 512)) + TILES * sbytes);
        for (int q = 0; q < nbs; q++)
            tma_load_2d(stg + q * TN * 128, &xmap, &c.full[s], (c.b_begin + i * SB + q) * 64, c.tt * TN);
        // Tiles past N (a ragged last CTA) copy the last one again:
        // their channels are >= n_pad and never stored.
        for (int tl = 0; tl < TILES; tl++) {
            const int tile = min(c.cb * 2 * WT + tl / 4, mtiles - 1) * 4 + tl % 4;
            bulk_copy(stg + XBYTES + tl * TILE_BYTES,
                      p.w + ((size_t)tile * p.chunks + (size_t)(c.b_begin + i * SB) * CPB) * 32,
                      (uint32_t)(nbs * CPB * 512), &c.full[s]);
            if (sbytes)
                bulk_copy(stg + XBYTES + TILES * TILE_BYTES + tl * SCALE_BYTES,
                          p.scales + (size_t)tile * p.scale_tile_bytes + (size_t)g0 * 16 * esz, sbytes, &c.full[s]);
        }
    }
}

// The CTA's tile (2 WT m64 channel tiles x 2 ND tokens) through idle shared
// memory `stage` (32 x (128 WT + 4) floats), 32 tokens a round: the 8
// consumer warps that hold it stage their accumulators as f32 [tokens]
// [channels] (the pitch puts a staging store's 32 lanes on 32 banks), meet,
// and write whole token rows, 4 channels per lane and access (store_out4),
// times g; they meet again before the next round.  H200 (ncu, M = 128):
// stored element by element, the unrolled epilogue (a dtype branch per
// element) took 18-22 % of the warps' samples, most waiting on instruction
// fetch.  Warp w of the warpgroup on m64 tile mt0 (tiles of a CTA: 2 WT
// consecutive, each warpgroup WT of them).
// ONE: the whole tile in one round (its stage holds TN x (C + 4) floats),
// the row stores then a loop that is not unrolled: the epilogue runs once a
// CTA, from a cold instruction cache, so its executed code is what costs
// (ncu, int4-g128, M = 128: 14 % of the consumer warps' samples in the
// unrolled rounds, most waiting on instruction fetch).
template <int WT, int ND, bool ONE = false>
__device__ __forceinline__ void store_tile_staged(const Params &p, float *stage, int tt, int mt0,
                                                  const float (&acc)[WT][ND], float g) {
    constexpr int C = 2 * WT * 64, P = C + 4, TN = 2 * ND, RT = ONE ? TN : 32; // RT: tokens a round
    static_assert(ND % 16 == 0, "rounds of 32 tokens hold whole accumulator groups");
    const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3, gid = lane >> 2, tig = lane & 3;
    const int slot = (mt0 / WT) & 1, pw = slot * 4 + w; // this warp among the tile's 8
    const int m0 = tt * TN, n0 = (mt0 - slot * WT) * 64;
    const bool vec = out_vec4(p.out, p.ldo, p.out_dtype), plain = vec && !p.accumulate && n0 + C <= p.n;
    // Rows 32 b .. 32 b + 31 of the stage: tokens m0 + 32 (r + b) on.
    const auto store32 = [&](int r, int b) {
        if (plain) { // whole rows, plain stores: every row read first (store_rows4_plain)
#pragma unroll
            for (int q = 0; q < WT; q++) {
                float4 v[4];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    v[j] = *reinterpret_cast<const float4 *>(stage + (32 * b + pw + 8 * j) * P + 4 * (lane + 32 * q));
                    v[j].x *= g, v[j].y *= g, v[j].z *= g, v[j].w *= g;
                }
                store_rows4_plain<4>(p, m0 + 32 * (r + b) + pw, 8, n0 + 4 * (lane + 32 * q), v);
            }
            return;
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int row = pw + 8 * j, m = m0 + 32 * (r + b) + row;
            if (m >= p.m) break; // rows grow with j
#pragma unroll
            for (int q = lane; q < C / 4; q += 32) {
                float4 v = *reinterpret_cast<const float4 *>(stage + (32 * b + row) * P + 4 * q);
                v.x *= g, v.y *= g, v.z *= g, v.w *= g;
                store_out4(p, m, n0 + 4 * q, v, vec);
            }
        }
    };
#pragma unroll
    for (int r = 0; r < TN / 32; r += RT / 32) {
        asm volatile("bar.sync 1, %0;" ::"n"(kConsumerWarps * 32) : "memory"); // the previous readers are done
#pragma unroll
        for (int t = 0; t < WT; t++)
#pragma unroll
            for (int i = 16 * r; i < 16 * r + RT / 2; i++)
                stage[(8 * ((i >> 2) - 4 * r) + 2 * tig + (i & 1)) * P + (slot * WT + t) * 64 + 16 * w + gid +
                      8 * ((i >> 1) & 1)] = acc[t][i];
        asm volatile("bar.sync 1, %0;" ::"n"(kConsumerWarps * 32) : "memory");
        if constexpr (ONE) {
#pragma unroll 1
            for (int b = 0; b < TN / 32; b++) store32(0, b);
        } else {
            store32(r, 0);
        }
    }
}

// Accumulator i of lane l in warp w of an m64 tile: channel 16 w + l / 4
// + 8 ((i / 2) % 2), token 8 (i / 4) + 2 (l % 4) + i % 2.  Stores acc * g
// (through `stage`: store_tile_staged), or with K splits the partials, and
// the last split of a tile to arrive sums all of them in split order (the
// same bits every run).  Every consumer warp holding the tile calls it
// (named barrier 1 counts kConsumerWarps).
template <int WT, int ND, bool ONE = false>
__device__ __forceinline__ void finish(const Params &p, int tt, int split, float (&acc)[WT][ND], float g, int mt0,
                                       float *stage) {
    sm90::grid_dep_wait(); // a programmatic dependent: the previous kernel is done with the output
    if (p.splits == 1) {
        store_tile_staged<WT, ND, ONE>(p, stage, tt, mt0, acc, g);
        return;
    }
    __shared__ int is_last;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, w = warp & 3, gid = lane >> 2, tig = lane & 3;
    const int m0 = tt * 2 * ND;
    const auto chan = [&](int t, int i) { return (mt0 + t) * 64 + 16 * w + gid + 8 * ((i >> 1) & 1); };
    const auto token = [&](int i) { return m0 + 8 * (i >> 2) + 2 * tig + (i & 1); };
#pragma unroll
    for (int t = 0; t < WT; t++)
#pragma unroll
        for (int i = 0; i < ND; i++) {
            const int n = chan(t, i), m = token(i);
            if (n >= p.n || m >= p.m) continue;
            p.ws[((size_t)split * p.m + m) * p.n + n] = acc[t][i] * g;
        }
    __threadfence();
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumerWarps * 32) : "memory");
    if (threadIdx.x == 0) is_last = atomicAdd(&p.arrivals[blockIdx.x], 1u) == (unsigned)(p.splits - 1);
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumerWarps * 32) : "memory");
    if (is_last) {
        __threadfence();
        // Sums in acc, split by split with 16 loads in flight (all of a
        // split's at once kept 64 loads and addresses live: spills); the
        // stores last (the compiler cannot move a load past a store that
        // may alias it: one element at a time was a chain of L2 round
        // trips per thread).
#pragma unroll
        for (int t = 0; t < WT; t++)
#pragma unroll
            for (int i0 = 0; i0 < ND; i0 += 16) {
#pragma unroll
                for (int i = i0; i < i0 + 16; i++) acc[t][i] = 0.0f;
                for (int s = 0; s < p.splits; s++) {
                    const float *wsp = p.ws + (size_t)s * p.m * p.n;
#pragma unroll
                    for (int i = i0; i < i0 + 16; i++) {
                        const int n = chan(t, i), m = token(i);
                        if (n < p.n && m < p.m) acc[t][i] += __ldcg(wsp + (size_t)m * p.n + n);
                    }
                }
            }
#pragma unroll
        for (int t = 0; t < WT; t++)
#pragma unroll
            for (int i = 0; i < ND; i++) {
                const int n = chan(t, i), m = token(i);
                if (n < p.n && m < p.m) store_out(p, m, n, acc[t][i]);
            }
    }
}

#endif

// WT m64 weight tiles per warpgroup, TN tokens per CTA (WT * TN / 2 floats
// of part and of acc per thread: 128 registers for both).
template <int CODE, bool BF16, int WT, int TN>
__global__ void __launch_bounds__(kThreads, 1) wgmma_w_kernel(const __grid_constant__ CUtensorMap xmap, const Params p) {
#ifdef TOPS_CU_WGMMA
    using namespace sm90;
    constexpr int KC = chunk_dims<CODE>::KC, STEPS = chunk_dims<CODE>::STEPS, CPB = 64 / KC;
    constexpr int SB = stage_blocks(CODE), SBYTES = stage_bytes(SB, CPB, TN, WT);
    constexpr int XBYTES = SB * TN * 128, TILE_BYTES = SB * CPB * 512, TILES = 8 * WT;
    constexpr int SCALE_BYTES = SB * kScaleBlockBytes; // per tile and stage
    constexpr int ND = TN / 2; // accumulators per m64 tile and thread
    extern __shared__ unsigned char smem_raw[];
    const Cta cta = cta_begin<CODE, WT, TN>(p, smem_raw);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    if (warp >= kConsumerWarps) { // producer: one thread, few registers
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (threadIdx.x == kConsumerWarps * 32) produce<CODE, WT, TN>(p, xmap, cta);
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int wg = warp >> 2, w = warp & 3, gid = lane >> 2;
    const int mt0 = (cta.cb * 2 + wg) * WT; // this warpgroup's first m64 tile
    const int nc = cta.nb * CPB;

    float acc[WT][ND], part[WT][ND];
#pragma unroll
    for (int t = 0; t < WT; t++)
#pragma unroll
        for (int i = 0; i < ND; i++) acc[t][i] = part[t][i] = 0.0f;

    const int k_begin = cta.b_begin * 64;
    int fresh = 1; // the next wgmma starts a group: scale-d = 0
    for (int c = 0; c < nc; c++) {
        const int st = c / (SB * CPB), c_in = c % (SB * CPB), slot = st % kRing;
        unsigned char *stg = cta.ring + slot * SBYTES;
        if (c_in == 0) {
            mbar_wait(&cta.full[slot], (uint32_t)(st / kRing) & 1u);
            permute_rows<TN, SB, kConsumerWarps * 32>(stg, min(SB, cta.nb - st * SB), threadIdx.x);
            asm volatile("bar.sync 1, %0;" ::"n"(kConsumerWarps * 32) : "memory");
        }
        // The whole chunk is decoded first, so that its wgmmas issue back to
        // back and the warpgroup waits for them once (or at group ends).
        uint32_t a[STEPS][WT][4];
#pragma unroll
        for (int t = 0; t < WT; t++) {
            const uint4 cur = *reinterpret_cast<const uint4 *>(stg + XBYTES + ((wg * WT + t) * 4 + w) * TILE_BYTES +
                                                               c_in * 512 + lane * 16);
#pragma unroll
            for (int j = 0; j < STEPS; j++) decode_step<CODE, BF16>(cur, j, a[j][t]);
        }
        const unsigned char *bb = stg + (c_in / CPB) * TN * 128 + (c_in % CPB) * KC * 2;
        const int g0 = min((k_begin + st * SB * 64) >> p.group_shift, p.groups - 1); // the stage's first group
        bool open = false; // wgmmas issued since the last wait
#pragma unroll
        for (int j = 0; j < STEPS; j++) {
            wgmma_fence();
            const uint64_t db = desc_sw128(bb + 32 * j); // k16 step: 32 bytes along the swizzled row
#pragma unroll
            for (int t = 0; t < WT; t++) wgmma_rs<BF16>(part[t], a[j][t], db, !fresh);
            fresh = 0;
            open = true;
            const int kend = k_begin + c * KC + 16 * (j + 1);
            if ((kend & p.group_mask) == 0 || (c == nc - 1 && j == STEPS - 1)) {
                wgmma_commit();
                wgmma_wait<0>();
                open = false;
                // this group's scales, from the stage's copy
                const int gl = min((kend - 1) >> p.group_shift, p.groups - 1) - g0;
#pragma unroll
                for (int t = 0; t < WT; t++) {
                    fence_regs(part[t]);
                    const float2 s2 =
                        p.has_scales ? scale_pair(stg + XBYTES + TILES * TILE_BYTES + ((wg * WT + t) * 4 + w) * SCALE_BYTES,
                                                  p.scale_kind, (size_t)gl * 16 + 2 * gid)
                                     : make_float2(1.0f, 1.0f);
#pragma unroll
                    for (int i = 0; i < ND; i++) acc[t][i] = fmaf(part[t][i], (i & 2) ? s2.y : s2.x, acc[t][i]);
                }
                fresh = 1;
            }
        }
        if (open) { // the chunk's A registers are rewritten next
            wgmma_commit();
            wgmma_wait<0>();
        }
        if (c_in == SB * CPB - 1 || c == nc - 1) mbar_arrive(&cta.empty[slot]);
    }
    static_assert(kRing * SBYTES >= 32 * (128 * WT + 4) * 4, "the output staging fits the idle ring");
    finish<WT, ND>(p, cta.tt, cta.split, acc, p.global * decode_factor<CODE>(), mt0,
                   reinterpret_cast<float *>(cta.ring));
#else
    (void)xmap, (void)p;
#endif
}

// ---- folded scales ----------------------------------------------------------
//
// The folded kernel keeps two rings, each filled by its own producer thread:
// activations (X: TMA tiles of SB = 2 k64 blocks, as the strict kernel's
// stages) and weights with their scales (W: WSB = 8 k64 blocks per stage, so
// each tile's weights arrive as one contiguous 4 KB copy, 64 KB in flight per
// SM, up to 16 chunks ahead of the consumers).  Round 2 measured the one-ring
// form's copy pipeline alone at 37-40 us of its ~50 (weights alone 34.5 us:
// 8 KB per stage in 1 KB copies, 32 KB in flight); on the H200 (2026-11-29
// 20:37 UTC, same call) the two rings with W stages of 2 blocks ran 45.7 us
// and with 8 blocks 40.6 (int4-g128 relaxed, M = 128; the one-ring form 48.3).
// CW consumer warpgroups: 2 (one m64 channel tile each) or 4
// (debug key wgmma_cw=4: two per tile, splitting its chunks, even ones to the
// first and odd ones to the second, the partial sums added at the end: 4
// consumer warps per scheduler instead of 2 with no decode duplicated; 0-4 %
// faster at M = 64, 2-5 % slower at M = 128, so not the default).  With CW = 2
// the decode of the next chunk runs under the current chunk's wgmmas (two
// register sets of A fragments); CW = 4's 112 registers hold one set and
// leave the overlap to the other warpgroups.

// Folded formats are 4-bit codes (one chunk = one k64 block) with f16 scales
// in groups >= 16 or 8-bit scales: at most 4 groups x 16 entries x 2 bytes
// per tile and block.
constexpr int kFoldScaleBlockBytes = 128;
// Factored sub-block scales (wgmma_s_kernel with MUL): a tile's f16
// multipliers of a W stage (16 sub-blocks of 32 x 16 rows) sit this far into
// its scale entries, whose groups then take at most this many bytes.
constexpr int kMultOffset = 512;

// f16 scales split into two exact terms (strict 4-bit integers with f16
// activations): s = s1 + s2, s1 the scale's top 8 significant bits, s2 the
// last 3; code x s1 (<= 11 bits) and code x s2 (<= 6) are exact in f16 where
// tops__cu_fold_shift's shift keeps them in range, so the wgmmas of both
// terms sum exact products, as the drained groups of wgmma_s_kernel do.
constexpr int kScaleF16Split = 1000;

// X stages in the ring, k64 blocks per W stage, W stages (powers of two:
// the consumers divide chunk numbers by them).
template <int TN>
struct fold_layout {
    static constexpr int XR = 4, WSB = 8, WR = 2;
    static constexpr int SB = 2;                                 // k64 blocks per X stage
    static constexpr int XBYTES = SB * TN * 128;                 // one X stage (1024-byte multiple)
    static constexpr int WTILE = WSB * 512;                      // one tile's weights in a W stage
    static constexpr int WSCALE = WSB * kFoldScaleBlockBytes;    // one tile's scale entries in a W stage
    static constexpr int WBYTES = 8 * (WTILE + WSCALE);          // the CTA's 8 tiles
    static constexpr int BARS = 3 * XR + 2 * WR;                 // X full, empty, ready; W full, empty
    static constexpr int SMEM = XR * XBYTES + WR * WBYTES + BARS * 8 + 1024;
};

#ifdef TOPS_CU_WGMMA
constexpr int kFoldPermuters = 64; // wgmma_permute=1: producer warps 2-3 permute the X stages

template <bool BF16>
__device__ __forceinline__ uint32_t mul2(uint32_t a, uint32_t b) {
    if constexpr (BF16) return bf2_bits(__hmul2(bits_bf2(a), bits_bf2(b)));
    else return h2_bits(__hmul2(bits_h2(a), bits_h2(b)));
}

// The multipliers of rows gid and gid + 8 (scale entries e and e + 1 of a
// stage's copy), each as a pair of the activations' type: f16 scales times
// pre converted in registers (exact: tops__cu_fold_shift), 8-bit scales
// through the CTA's table of code -> code's value * pre.
template <int SK, bool BF16>
__device__ __forceinline__ void fold_pair(const unsigned char *sp, int e, const uint32_t *lut, float pre,
                                          uint32_t &lo, uint32_t &hi) {
    if constexpr (SK == TOPS__CU_SCALE_F16 || SK == kScaleF16Split) {
        static_assert(!BF16, "f16 scales fold for f16 activations only");
        uint32_t h = *reinterpret_cast<const uint32_t *>(sp + 2 * e);
        if (pre != 1.0f) {
            const float2 f = __half22float2(bits_h2(h));
            h = h2_bits(__floats2half2_rn(f.x * pre, f.y * pre));
        }
        lo = __byte_perm(h, 0, 0x1010);
        hi = __byte_perm(h, 0, 0x3232);
    } else {
        const uint32_t v = *reinterpret_cast<const unsigned short *>(sp + e);
        lo = lut[v & 0xFFu];
        hi = lut[v >> 8];
    }
}

template <int SK, bool BF16>
__device__ __forceinline__ uint32_t fold_lut_entry(uint32_t code, float pre) {
    const float v = (SK == TOPS__CU_SCALE_E8M0 ? e8m0_to_f32(code) : ue4m3_to_f32(code)) * pre;
    if constexpr (BF16) return bf2_bits(__float2bfloat162_rn(v));
    else return h2_bits(__float2half2_rn(v));
}

// The packed fragments hold K in mma.sync's B order (lane t of a quad: K
// 4t .. 4t + 3 of each k16 step).  Rearranged across the quad into the
// plain A layout (lane t: K 2t, 2t + 1, 2t + 8, 2t + 9), wgmma can read the
// activations as TMA stored them, with no stage permute.  Each lane reads
// the two quad lanes it takes from, t / 2 and t / 2 + 2, straight from the
// chunk in shared memory (lane L's 16 bytes at 16 L; 16-byte loads, no bank
// conflicts: a quarter warp reads four distinct pieces on distinct banks).
// 4-bit codes: wanted register r of lane t is register (r % 2) + 2 (t % 2)
// of those lanes, both halves: one byte permute a word.  8-bit codes (step
// j's words 2j, 2j + 1 hold registers 0, 1 and 2, 3: both rows of one K
// pair each): word t % 2 of each step of both lanes.  (Shuffling each
// lane's own words instead cost 8 shuffles a 4-bit chunk and lengthened the
// decode's dependency chain.)
__device__ __forceinline__ uint4 lds128(uint32_t a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(a)
                 : "memory");
    return v;
}
__device__ __forceinline__ uint2 lds64(uint32_t a) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ uint4 natural_k_gather(const unsigned char *chunk, int lane) {
    const int tig = lane & 3, src0 = (lane & ~3) | (tig >> 1);
    const uint32_t sel = (tig & 1) ? 0x7351u : 0x6240u, a = sm90::smem_addr(chunk) + 16 * src0;
    const uint4 u = lds128(a), v = lds128(a + 32);
    return make_uint4(__byte_perm(u.x, v.x, sel), __byte_perm(u.y, v.y, sel), __byte_perm(u.z, v.z, sel),
                      __byte_perm(u.w, v.w, sel));
}
// Words 2 half, 2 half + 1 of the 4-bit order (half a chunk).
__device__ __forceinline__ uint2 natural_k_gather_half(const unsigned char *chunk, int half, int lane) {
    const int tig = lane & 3, src0 = (lane & ~3) | (tig >> 1);
    const uint32_t sel = (tig & 1) ? 0x7351u : 0x6240u, a = sm90::smem_addr(chunk) + 16 * src0 + 8 * half;
    const uint2 u = lds64(a), v = lds64(a + 32);
    return make_uint2(__byte_perm(u.x, v.x, sel), __byte_perm(u.y, v.y, sel));
}
__device__ __forceinline__ uint4 natural_k_gather8(const unsigned char *chunk, int lane) {
    const int tig = lane & 3, src0 = (lane & ~3) | (tig >> 1);
    const uint32_t a = sm90::smem_addr(chunk) + 16 * src0;
    const uint4 u = lds128(a), v = lds128(a + 32);
    return (tig & 1) ? make_uint4(u.y, v.y, u.w, v.w) : make_uint4(u.x, v.x, u.z, v.z);
}

// Named barrier `id` over the first n threads.
template <int ID, int N>
__device__ __forceinline__ void bar_sync() {
    asm volatile("bar.sync %0, %1;" ::"n"(ID), "n"(N) : "memory");
}

struct FoldCta {
    unsigned char *x, *w; // the rings
    uint64_t *xfull, *xempty, *xready, *wfull, *wempty;
    int tt, cb, split, b_begin, nb;
};

// CPB: chunks per k64 block (2 for 8-bit codes, wgmma_s_kernel).
template <int TN, int CW, int CPB = 1>
__device__ __forceinline__ FoldCta fold_cta_begin(const Params &p, unsigned char *smem_raw) {
    using namespace sm90;
    using L = fold_layout<TN>;
    FoldCta c;
    const uint32_t base = smem_addr(smem_raw); // a shared address: see cta_begin
    c.x = static_cast<unsigned char *>(__cvta_shared_to_generic(base + ((1024u - (base & 1023u)) & 1023u)));
    c.w = c.x + L::XR * L::XBYTES;
    c.xfull = reinterpret_cast<uint64_t *>(c.w + L::WR * L::WBYTES);
    c.xempty = c.xfull + L::XR;
    c.xready = c.xempty + L::XR;
    c.wfull = c.xready + L::XR;
    c.wempty = c.wfull + L::WR;
    place(p, CPB, c.tt, c.cb, c.split, c.b_begin, c.nb);
    if (threadIdx.x == 0) {
        for (int s = 0; s < L::XR; s++) {
            mbar_init(&c.xfull[s], 1);
            mbar_init(&c.xempty[s], CW * 128);
            mbar_init(&c.xready[s], kFoldPermuters);
        }
        for (int s = 0; s < L::WR; s++) {
            mbar_init(&c.wfull[s], 1);
            mbar_init(&c.wempty[s], CW * 128);
        }
        mbar_init_fence();
    }
    __syncthreads();
    // The next kernel's CTAs may take SMs this grid leaves idle (they wait
    // for this grid before reading its output); the weights stream first.
    grid_dep_launch();
    return c;
}

// Producer warps 2-3 (tid 0-63): each X stage put in the packed
// fragments' K order (permute_rows) once it lands, then released to the
// consumers through its `ready` barrier.
template <int TN>
__device__ __forceinline__ void permute_stages(const FoldCta &c, int tid) {
    using namespace sm90;
    using L = fold_layout<TN>;
    for (int i = 0; i * L::SB < c.nb; i++) {
        const int s = i % L::XR;
        mbar_wait(&c.xfull[s], (uint32_t)(i / L::XR) & 1u);
        permute_rows<TN, L::SB, kFoldPermuters>(c.x + s * L::XBYTES, min(L::SB, c.nb - i * L::SB), tid);
        mbar_arrive(&c.xready[s]);
    }
}

// Producer thread of the X ring.
template <int TN>
__device__ __forceinline__ void produce_x(const CUtensorMap &xmap, const FoldCta &c) {
    using namespace sm90;
    using L = fold_layout<TN>;
    grid_dep_wait(); // launched as a programmatic dependent: the activations are the previous kernel's
    for (int i = 0; i * L::SB < c.nb; i++) {
        const int s = i % L::XR, nbs = min(L::SB, c.nb - i * L::SB);
        if (i >= L::XR) mbar_wait(&c.xempty[s], ((i / L::XR) + 1) & 1);
        unsigned char *stg = c.x + s * L::XBYTES;
        mbar_expect_tx(&c.xfull[s], (uint32_t)(nbs * TN * 128));
        for (int q = 0; q < nbs; q++)
            tma_load_2d(stg + q * TN * 128, &xmap, &c.xfull[s], (c.b_begin + i * L::SB + q) * 64, c.tt * TN);
    }
}

// Producer thread of the W ring: per stage and tile, the weights of WSB
// chunks, WSB / CPB k64 blocks (contiguous in the packed layout) and the
// scale entries of the groups they touch (contiguous too; clamped: K is
// padded past the last group).
template <int TN, int CPB = 1>
__device__ __forceinline__ void produce_w(const Params &p, const FoldCta &c) {
    using namespace sm90;
    using L = fold_layout<TN>;
    constexpr int WB = L::WSB / CPB; // k64 blocks a W stage
    const int esz = p.has_scales ? p.scale_tile_bytes / (p.groups * 16) : 0;
    const int mtiles = p.ntiles >> 2;
    for (int i = 0; i * WB < c.nb; i++) {
        const int s = i % L::WR, nbs = min(WB, c.nb - i * WB), b0 = c.b_begin + i * WB;
        if (i >= L::WR) mbar_wait(&c.wempty[s], ((i / L::WR) + 1) & 1);
        unsigned char *stg = c.w + s * L::WBYTES;
        const int k0 = b0 * 64, g0 = min(k0 >> p.group_shift, p.groups - 1);
        const int ng = min((k0 + nbs * 64 - 1) >> p.group_shift, p.groups - 1) - g0 + 1;
        const uint32_t sbytes = p.has_scales ? (uint32_t)(ng * 16 * esz) : 0u;
        // factored sub-block scales: the stage's multipliers (16 bytes a row pair)
        const uint32_t mbytes = p.mults ? (uint32_t)(((nbs * 64) >> p.mult_shift) * 32) : 0u;
        mbar_expect_tx(&c.wfull[s], 8u * ((uint32_t)(nbs * CPB) * 512u + sbytes + mbytes));
        // Tiles past N (a ragged last CTA) copy the last one again:
        // their channels are >= n_pad and never stored.
        for (int tl = 0; tl < 8; tl++) {
            const int tile = min(c.cb * 2 + tl / 4, mtiles - 1) * 4 + tl % 4;
            bulk_copy(stg + tl * L::WTILE, p.w + ((size_t)tile * p.chunks + (size_t)b0 * CPB) * 32,
                      (uint32_t)(nbs * CPB) * 512u, &c.wfull[s]);
            if (sbytes)
                bulk_copy(stg + 8 * L::WTILE + tl * L::WSCALE,
                          p.scales + (size_t)tile * p.scale_tile_bytes + (size_t)g0 * 16 * esz, sbytes, &c.wfull[s]);
            if (mbytes)
                bulk_copy(stg + 8 * L::WTILE + tl * L::WSCALE + kMultOffset,
                          p.mults + (size_t)tile * p.mult_tile_bytes + (size_t)(k0 >> p.mult_shift) * 32, mbytes,
                          &c.wfull[s]);
        }
    }
}

// The consumer warpgroups of wgmma_f_kernel.  Warpgroup wg works on channel
// tile wg % 2 of the CTA and, with CW = 4, on the chunks of parity wg / 2.
// GSL: log2 of the k16 steps per scale group within a chunk (groups of 16,
// 32, >= 64), so that the group starts are known at compile time.
template <int CODE, int SK, bool BF16, int TN, int CW, int GSL>
__device__ __forceinline__ void consume_folded(const Params &p, const FoldCta &cta, uint32_t *lut) {
    using namespace sm90;
    using L = fold_layout<TN>;
    static_assert(chunk_dims<CODE>::KC == 64, "folded codes are 4-bit: one chunk per k64 block");
    constexpr int STEPS = chunk_dims<CODE>::STEPS, ND = TN / 2;
    constexpr int STEP = CW / 2;        // a warpgroup's chunks are STEP apart
    constexpr int NA = CW == 4 ? 1 : 2; // register sets of A fragments
    constexpr int TERMS = SK == kScaleF16Split ? 2 : 1; // A fragments a k16 step (kScaleF16Split: s1, s2)
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wg = warp >> 2, w = warp & 3, gid = lane >> 2;
    const int tw = wg & 1, h = wg >> 1;
    const int tile = tw * 4 + w; // this warp's 16-channel tile among the CTA's 8
    const int nc = cta.nb;
    if constexpr (SK != TOPS__CU_SCALE_F16 && SK != kScaleF16Split) {
        if (threadIdx.x < 256) lut[threadIdx.x] = fold_lut_entry<SK, BF16>(threadIdx.x, p.fold_pre);
        bar_sync<2, CW * 128>();
    }

    float acc[1][ND];
#pragma unroll
    for (int i = 0; i < ND; i++) acc[0][i] = 0.0f;

    const int k_begin = cta.b_begin * 64;
    // Chunk c's A fragments: decoded codes times their scales (term t of
    // step j in A[t * STEPS + j]).
    const auto fetch = [&](int c, uint32_t (&A)[TERMS * STEPS][4]) {
        const int ws = (unsigned)c / L::WSB, cw = (unsigned)c % L::WSB;
        if (cw < STEP) mbar_wait(&cta.wfull[ws % L::WR], (uint32_t)(ws / L::WR) & 1u);
        const unsigned char *stg = cta.w + (ws % L::WR) * L::WBYTES;
        const int kc = k_begin + c * 64, g0 = min((k_begin + ws * L::WSB * 64) >> p.group_shift, p.groups - 1);
        const unsigned char *chunk = stg + tile * L::WTILE + cw * 512;
        const uint4 cur = p.fold_shfl ? natural_k_gather(chunk, lane)
                                      : *reinterpret_cast<const uint4 *>(chunk + lane * 16);
        const unsigned char *sp = stg + 8 * L::WTILE + tile * L::WSCALE;
        // The chunk's first group and the row's last one, relative to the
        // stage's first (K is padded past the last group: clamped).
        const int gi = min(kc >> p.group_shift, p.groups - 1) - g0, gl = p.groups - 1 - g0;
        uint32_t lo = 0, hi = 0, lo2 = 0, hi2 = 0;
#pragma unroll
        for (int j = 0; j < STEPS; j++) {
            if (j % (1 << GSL) == 0) { // a new group (groups are powers of two >= 16)
                fold_pair<SK, BF16>(sp, min(gi + (j >> GSL), gl) * 16 + 2 * gid, lut, p.fold_pre, lo, hi);
                if constexpr (TERMS == 2) { // s1: the last 3 mantissa bits cleared; s2 = s - s1, exact
                    const uint32_t l1 = lo & 0xFFF8FFF8u, h1 = hi & 0xFFF8FFF8u;
                    lo2 = h2_bits(__hsub2(bits_h2(lo), bits_h2(l1)));
                    hi2 = h2_bits(__hsub2(bits_h2(hi), bits_h2(h1)));
                    lo = l1, hi = h1;
                }
            }
            decode_step<CODE, BF16>(cur, j, A[j]);
            if constexpr (TERMS == 2) {
                A[STEPS + j][0] = mul2<BF16>(A[j][0], lo2);
                A[STEPS + j][1] = mul2<BF16>(A[j][1], hi2);
                A[STEPS + j][2] = mul2<BF16>(A[j][2], lo2);
                A[STEPS + j][3] = mul2<BF16>(A[j][3], hi2);
            }
            A[j][0] = mul2<BF16>(A[j][0], lo); // rows gid
            A[j][1] = mul2<BF16>(A[j][1], hi); // rows gid + 8
            A[j][2] = mul2<BF16>(A[j][2], lo);
            A[j][3] = mul2<BF16>(A[j][3], hi);
        }
    };
    // The activations are waited for here, after the decode.
    const auto issue = [&](int c, uint32_t (&A)[TERMS * STEPS][4]) {
        const int xs = (unsigned)c / L::SB;
        if ((unsigned)c % L::SB < STEP)
            mbar_wait(p.fold_shfl ? &cta.xfull[xs % L::XR] : &cta.xready[xs % L::XR], (uint32_t)(xs / L::XR) & 1u);
        const unsigned char *bb = cta.x + (xs % L::XR) * L::XBYTES + ((unsigned)c % L::SB) * TN * 128;
        wgmma_fence(); // A was written since the last wgmmas
#pragma unroll
        for (int j = 0; j < STEPS; j++)
#pragma unroll
            for (int t = 0; t < TERMS; t++) wgmma_rs<BF16>(acc[0], A[t * STEPS + j], desc_sw128(bb + 32 * j), 1);
        wgmma_commit();
    };
    // After the wgmmas of chunk c (and of every chunk before) completed:
    // this warpgroup's last chunk of a stage releases the stage.
    const auto release = [&](int c) {
        const unsigned u = c, v = c + STEP;
        if (v / L::SB != u / L::SB || c + STEP >= nc) mbar_arrive(&cta.xempty[(u / L::SB) % L::XR]);
        if (v / L::WSB != u / L::WSB || c + STEP >= nc) mbar_arrive(&cta.wempty[(u / L::WSB) % L::WR]);
    };
    // A stays live to its release (else the compiler reuses its registers
    // for the next decode while the tensor cores still read them).
    const auto retire = [&](int c, uint32_t (&A)[TERMS * STEPS][4]) {
#pragma unroll
        for (int j = 0; j < TERMS * STEPS; j++) fence_regs(A[j]);
        release(c);
    };

    // A warpgroup with no chunk of its own (CW = 4, nc = 1) repeats chunk 0
    // and drops its sums.  No path may reach the final wait without a wgmma
    // in flight (a zero-trip loop would: ptxas then serializes every wgmma, C7515).
    const int c0 = h < nc ? h : 0;
    int last;
    if constexpr (NA == 2) {
        uint32_t a0[TERMS * STEPS][4], a1[TERMS * STEPS][4];
        fetch(c0, a0);
        for (int c = c0;; c += 2 * STEP) {
            issue(c, a0);
            wgmma_wait<1>(); // the chunk before done
            if (c > c0) retire(c - STEP, a1);
            if (c + STEP >= nc) {
                last = c;
                break;
            }
            fetch(c + STEP, a1);
            issue(c + STEP, a1);
            wgmma_wait<1>(); // chunk c done
            retire(c, a0);
            if (c + 2 * STEP >= nc) {
                last = c + STEP;
                break;
            }
            fetch(c + 2 * STEP, a0);
        }
        wgmma_wait<0>();
#pragma unroll
        for (int j = 0; j < TERMS * STEPS; j++) {
            fence_regs(a0[j]);
            fence_regs(a1[j]);
        }
    } else {
        uint32_t a0[TERMS * STEPS][4];
        for (int c = c0;; c += STEP) {
            fetch(c, a0);
            issue(c, a0);
            wgmma_wait<0>();
            if (c + STEP >= nc) {
                last = c;
                break;
            }
            retire(c, a0);
        }
#pragma unroll
        for (int j = 0; j < TERMS * STEPS; j++) fence_regs(a0[j]);
    }
    fence_regs(acc[0]);
    release(last);
    // A warpgroup with no chunk in the last stages releases them too.
    const unsigned ul = last, un = nc - 1;
    if (ul / L::SB != un / L::SB) mbar_arrive(&cta.xempty[(un / L::SB) % L::XR]);
    if (ul / L::WSB != un / L::WSB) mbar_arrive(&cta.wempty[(un / L::WSB) % L::WR]);

    if constexpr (CW == 4) { // the second warpgroup of each tile hands its sums over through the X ring
        bar_sync<2, CW * 128>(); // every consumer is past its last wgmma: the rings are free
        float4 *xb = reinterpret_cast<float4 *>(cta.x) + tw * (ND / 4) * 128 + (threadIdx.x & 127);
        if (h == 1) {
            const bool dup = h >= nc;
#pragma unroll
            for (int i = 0; i < ND / 4; i++)
                xb[i * 128] = dup ? make_float4(0.0f, 0.0f, 0.0f, 0.0f)
                                  : make_float4(acc[0][4 * i], acc[0][4 * i + 1], acc[0][4 * i + 2], acc[0][4 * i + 3]);
        }
        bar_sync<2, CW * 128>();
        if (h == 1) return;
#pragma unroll
        for (int i = 0; i < ND / 4; i++) {
            const float4 v = xb[i * 128];
            acc[0][4 * i] += v.x;
            acc[0][4 * i + 1] += v.y;
            acc[0][4 * i + 2] += v.z;
            acc[0][4 * i + 3] += v.w;
        }
    }
    static_assert(L::XR * L::XBYTES >= TN * (128 + 4) * 4, "the output staging fits the idle X ring");
    finish<1, ND, true>(p, cta.tt, cta.split, acc, p.global * p.fold_post, cta.cb * 2 + tw, reinterpret_cast<float *>(cta.x));
}

#endif

// ---- strict 4-bit codes on the two-ring pipeline ----------------------------
//
// wgmma_s_kernel: the folded kernel's rings, producers and register-A double
// buffer (chunk c + 1 decoded while chunk c's wgmmas run, K order by the quad
// shuffle), with strict scales: each scale group is summed into `part`
// (scale-d = 0 on its first step), then acc += part * scale in f32, the scale
// read from the W stage's copy of the group's entries.  A group end waits for
// the warpgroup's wgmmas (wait 0); the other consumer warpgroup, which no
// barrier ties to this one, keeps the tensor cores busy meanwhile.  4-bit
// codes only (one chunk = one k64 block, as fold_layout has it); the launch
// checks that a W stage's scale entries fit its WSCALE bytes.
// MUL (factored sub-block scales, f16 activations): each decoded code is
// multiplied by its sub-block's f16 multiplier m (sub-blocks of 32: two k16
// steps), exact (|code x m| <= 2048), and the groups are the super-blocks
// with their scales D (pack.c, factor_scales).
#ifdef TOPS_CU_WGMMA
// Chunk c's A fragments for the strict kernels (warp tile `tile` of the
// CTA's 8): decoded codes in wgmma's K order (the quad gathers: 4-bit
// natural_k_gather, 8-bit natural_k_gather8), times their sub-block
// multipliers with MUL; the chunk's W stage waited for at its first chunk.
// NS steps into A[O ..]: all of the chunk's, or (4-bit codes, NS = 2) half
// `half` of it (steps 2 half, 2 half + 1: words 2 half, 2 half + 1).
template <int CODE, bool BF16, int TN, bool MUL, int NS, int O, int NA>
__device__ __forceinline__ void strict_fetch(const FoldCta &cta, int tile, int c, int half, uint32_t (&A)[NA][4]) {
    using namespace sm90;
    using L = fold_layout<TN>;
    constexpr int STEPS = chunk_dims<CODE>::STEPS;
    constexpr bool FOUR = chunk_dims<CODE>::KC == 64;
    static_assert(O + NS <= NA && (NS == STEPS || (FOUR && !MUL && 2 * NS == STEPS)), "whole or half 4-bit chunks");
    const int lane = threadIdx.x & 31, gid = lane >> 2;
    const int ws = (unsigned)c / L::WSB, cw = (unsigned)c % L::WSB;
    if (cw == 0) mbar_wait(&cta.wfull[ws % L::WR], (uint32_t)(ws / L::WR) & 1u);
    const unsigned char *stg = cta.w + (ws % L::WR) * L::WBYTES;
    const unsigned char *src = stg + tile * L::WTILE + cw * 512;
    uint4 cur;
    if constexpr (NS < STEPS) {
        const uint2 h = natural_k_gather_half(src, half, lane);
        cur = make_uint4(h.x, h.y, 0u, 0u);
    } else if constexpr (FOUR) {
        cur = natural_k_gather(src, lane);
    } else {
        cur = natural_k_gather8(src, lane);
    }
#pragma unroll
    for (int j = 0; j < NS; j++) decode_step<CODE, BF16>(cur, j, A[O + j]);
    if constexpr (MUL) {
        static_assert(!BF16 && STEPS == 4, "multipliers: f16 codes, two sub-blocks of 32 a chunk");
        static_assert(kMultOffset + 16 * 32 <= L::WSCALE, "a W stage's multipliers fit its scale bytes");
        const unsigned char *mp = stg + 8 * L::WTILE + tile * L::WSCALE + kMultOffset;
#pragma unroll
        for (int h = 0; h < 2; h++) { // sub-block 2 cw + h: steps 2 h, 2 h + 1
            uint32_t lo, hi;
            fold_pair<TOPS__CU_SCALE_F16, false>(mp, (2 * cw + h) * 16 + 2 * gid, nullptr, 1.0f, lo, hi);
#pragma unroll
            for (int j = 2 * h; j < 2 * h + 2; j++) {
                A[O + j][0] = mul2<false>(A[O + j][0], lo); // rows gid
                A[O + j][1] = mul2<false>(A[O + j][1], hi); // rows gid + 8
                A[O + j][2] = mul2<false>(A[O + j][2], lo);
                A[O + j][3] = mul2<false>(A[O + j][3], hi);
            }
        }
    }
}

// acc += part x scale for the group that ends at K kend (exclusive), whose
// entries are in the W stage of chunk c; the wgmmas writing part completed.
template <int TN, int KC = 64>
__device__ __forceinline__ float2 strict_scale(const Params &p, const FoldCta &cta, int tile, int c, int kend) {
    using L = fold_layout<TN>;
    const int gid = (threadIdx.x & 31) >> 2, k_begin = cta.b_begin * 64;
    const int ws = (unsigned)c / L::WSB;
    const int g0 = min((k_begin + ws * L::WSB * KC) >> p.group_shift, p.groups - 1);
    const int gl = min((kend - 1) >> p.group_shift, p.groups - 1) - g0;
    return p.has_scales ? scale_pair(cta.w + (ws % L::WR) * L::WBYTES + 8 * L::WTILE + tile * L::WSCALE, p.scale_kind,
                                     (size_t)gl * 16 + 2 * gid)
                        : make_float2(1.0f, 1.0f);
}
template <int ND>
__device__ __forceinline__ void drain_part(float (&part)[ND], float (&acc)[ND], float2 s2) {
    sm90::fence_regs(part);
#pragma unroll
    for (int i = 0; i < ND; i++) acc[i] = fmaf(part[i], (i & 2) ? s2.y : s2.x, acc[i]);
}
template <int TN, int ND, int KC = 64>
__device__ __forceinline__ void strict_drain(const Params &p, const FoldCta &cta, int tile, int c, int kend,
                                             float (&part)[ND], float (&acc)[ND]) {
    drain_part(part, acc, strict_scale<TN, KC>(p, cta, tile, c, kend));
}

// The strict kernels' output: warpgroup wg's m64 tile, staged in the idle X ring.
template <int CODE, int TN, int ND>
__device__ __forceinline__ void strict_finish(const Params &p, const FoldCta &cta, int wg, const float (&acc)[ND]) {
    using L = fold_layout<TN>;
    static_assert(L::XR * L::XBYTES >= TN * (128 + 4) * 4, "the output staging fits the idle X ring");
    float out[1][ND];
#pragma unroll
    for (int i = 0; i < ND; i++) out[0][i] = acc[i];
    finish<1, ND, true>(p, cta.tt, cta.split, out, p.global * decode_factor<CODE>(), cta.cb * 2 + wg,
                        reinterpret_cast<float *>(cta.x));
}

template <int CODE, bool BF16, int TN, int GSL, bool MUL>
__device__ __forceinline__ void consume_strict(const Params &p, const FoldCta &cta) {
    using namespace sm90;
    using L = fold_layout<TN>;
    static_assert(chunk_dims<CODE>::KC == 64, "4-bit codes: one chunk per k64 block");
    constexpr int STEPS = chunk_dims<CODE>::STEPS, ND = TN / 2, GS = 1 << GSL; // k16 steps per group (GSL < 2)
    const int warp = threadIdx.x >> 5, wg = warp >> 2;
    const int tile = wg * 4 + (warp & 3); // this warp's 16-channel tile among the CTA's 8
    const int nc = cta.nb, k_begin = cta.b_begin * 64;

    float acc[ND], part[ND];
#pragma unroll
    for (int i = 0; i < ND; i++) acc[i] = part[i] = 0.0f;

    const auto fetch = [&](int c, uint32_t (&A)[STEPS][4]) {
        strict_fetch<CODE, BF16, TN, MUL, STEPS, 0>(cta, tile, c, 0, A);
    };
    const auto drain = [&](int c, int kend) { strict_drain<TN, ND>(p, cta, tile, c, kend, part, acc); };
    // Chunk c's wgmmas; a group that starts at the chunk's first step was
    // drained before (pre).  Groups smaller than a chunk end inside it.
    const auto issue = [&](int c, uint32_t (&A)[STEPS][4]) {
        const int xs = (unsigned)c / L::SB, kc = k_begin + c * 64;
        if ((unsigned)c % L::SB == 0) mbar_wait(&cta.xfull[xs % L::XR], (uint32_t)(xs / L::XR) & 1u);
        const unsigned char *bb = cta.x + (xs % L::XR) * L::XBYTES + ((unsigned)c % L::SB) * TN * 128;
        const int first = c == 0 || (kc & p.group_mask) == 0;
        // The decode is complete before the fence (NVVM otherwise sinks its
        // last instructions to their wgmma, past the fence; ptxas then injects
        // a fence before each wgmma, C7519, and each becomes its own group, so
        // the wait<1> below waited for this chunk's first three wgmmas).
#pragma unroll
        for (int j = 0; j < STEPS; j++) fence_regs(A[j]);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < STEPS; j++) {
            if (GSL < 2 && j > 0 && j % GS == 0) {
                wgmma_commit();
                wgmma_wait<0>();
                drain(c, kc + 16 * j);
                wgmma_fence();
            }
            const int fresh = j == 0 ? first : j % GS == 0;
            wgmma_rs<BF16>(part, A[j], desc_sw128(bb + 32 * j), !fresh);
        }
        wgmma_commit();
    };
    // Before chunk c: the group ending at its start is drained.
    const auto pre = [&](int c) {
        const int kc = k_begin + c * 64;
        if (c > 0 && (kc & p.group_mask) == 0) {
            wgmma_wait<0>();
            drain(c - 1, kc);
        }
    };
    const auto release = [&](int c) {
        const unsigned u = c, v = c + 1;
        if (v / L::SB != u / L::SB || c + 1 >= nc) mbar_arrive(&cta.xempty[(u / L::SB) % L::XR]);
        if (v / L::WSB != u / L::WSB || c + 1 >= nc) mbar_arrive(&cta.wempty[(u / L::WSB) % L::WR]);
    };
    const auto retire = [&](int c, uint32_t (&A)[STEPS][4]) {
#pragma unroll
        for (int j = 0; j < STEPS; j++) fence_regs(A[j]);
        release(c);
    };

    uint32_t a0[STEPS][4], a1[STEPS][4];
    int last;
    fetch(0, a0);
    for (int c = 0;; c += 2) {
        pre(c);
        issue(c, a0);
        wgmma_wait<1>(); // the chunk before done
        if (c > 0) retire(c - 1, a1);
        if (c + 1 >= nc) {
            last = c;
            break;
        }
        fetch(c + 1, a1);
        pre(c + 1);
        issue(c + 1, a1);
        wgmma_wait<1>(); // chunk c done
        retire(c, a0);
        if (c + 2 >= nc) {
            last = c + 1;
            break;
        }
        fetch(c + 2, a0);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < STEPS; j++) {
        fence_regs(a0[j]);
        fence_regs(a1[j]);
    }
    drain(last, k_begin + nc * 64);
    release(last);
    strict_finish<CODE, TN, ND>(p, cta, wg, acc);
}

// Chunks c0 + H .. of a turn, whole, into A[H * STEPS ..].
template <int CODE, bool BF16, int TN, bool MUL, int H, int TS>
__device__ __forceinline__ void fetch_chunks(const FoldCta &cta, int tile, int c0, uint32_t (&A)[TS][4]) {
    constexpr int STEPS = chunk_dims<CODE>::STEPS;
    if constexpr (H < TS / STEPS) {
        strict_fetch<CODE, BF16, TN, MUL, STEPS, H * STEPS>(cta, tile, c0 + H, 0, A);
        fetch_chunks<CODE, BF16, TN, MUL, H + 1>(cta, tile, c0, A);
    }
}

// Units of TS k16 steps (the consumers below): unit t covers the CTA's K
// [16 TS t, 16 TS (t + 1)), whole chunks or half of a 4-bit one, inside one
// X stage (128 K) and one W stage.
template <int CODE, bool BF16, int TN, bool MUL, int TS>
__device__ __forceinline__ void unit_fetch(const FoldCta &cta, int tile, int t, uint32_t (&A)[TS][4]) {
    constexpr int STEPS = chunk_dims<CODE>::STEPS;
    if constexpr (TS < STEPS) strict_fetch<CODE, BF16, TN, MUL, TS, 0>(cta, tile, t >> 1, t & 1, A);
    else fetch_chunks<CODE, BF16, TN, MUL, 0>(cta, tile, t * (TS / STEPS), A);
}

// Unit t's wgmmas into part (scale-d = 0 on the first with `fresh`), after
// its X stage landed (waited for before the fence: a wait loop between
// fence and wgmmas makes ptxas add a fence).  The k16 steps advance the
// descriptor's start address field (16-byte units, below 2^14 for any
// shared-memory address: no carry) instead of encoding each address anew:
// 32 bytes a step along the swizzled 128-byte row, TN rows of 128 bytes a
// k64 block.
template <bool BF16, int TN, int TS, int ND>
__device__ __forceinline__ void unit_issue(const FoldCta &cta, int t, uint32_t (&A)[TS][4], float (&part)[ND],
                                           bool fresh) {
    using namespace sm90;
    using L = fold_layout<TN>;
    const int kk = t * 16 * TS, xs = kk >> 7; // X stages of 128 K (SB = 2 blocks)
    if ((kk & 127) == 0) mbar_wait(&cta.xfull[xs % L::XR], (uint32_t)(xs / L::XR) & 1u); // a stage's first unit
#pragma unroll
    for (int j = 0; j < TS; j++) fence_regs(A[j]);
    wgmma_fence();
    const uint64_t d0 = desc_sw128(cta.x + (xs % L::XR) * L::XBYTES + ((kk >> 6) & 1) * TN * 128) + ((kk & 63) >> 3);
#pragma unroll
    for (int j = 0; j < TS; j++) wgmma_rs<BF16>(part, A[j], d0 + (j >> 2) * TN * 8 + 2 * (j & 3), !(fresh && j == 0));
    wgmma_commit();
}

// After unit t's wgmmas completed (and every earlier unit's): the last
// unit of an X or a W stage (WK: a W stage's K) releases it.
template <int TN, int TS, int WK>
__device__ __forceinline__ void unit_release(const FoldCta &cta, int t, int nt) {
    using L = fold_layout<TN>;
    const int kk = t * 16 * TS, kn = kk + 16 * TS;
    if ((kn >> 7) != (kk >> 7) || t == nt - 1) sm90::mbar_arrive(&cta.xempty[(kk >> 7) % L::XR]);
    if (kn / WK != kk / WK || t == nt - 1) sm90::mbar_arrive(&cta.wempty[(kk / WK) % L::WR]);
}

// The two consumer warpgroups take turns on the tensor cores,
// FlashAttention-3's ping-pong (named barriers 3 and 4).  A turn is a unit
// of TS = 8 k16 steps (two 4-bit chunks) for groups of 128 or more.  While
// its wgmmas run the warpgroup decodes its next turn into the other
// register set, then waits for them (wait 0), drains part into acc at a
// group end and releases the stages, all while the other warpgroup's turn
// keeps the tensor cores busy.  Without the turns both warpgroups drained
// at once (ncu, int4-g128, M = 128: tensor pipe 41 % active; stalls on the
// decode's and the drain's dependencies).  Needs the CTA's K in whole turns
// on group boundaries (wgmma_s_kernel checks: k_begin and K multiples of 128).
template <int CODE, bool BF16, int TN, bool MUL>
__device__ __forceinline__ void consume_turns(const Params &p, const FoldCta &cta) {
    using namespace sm90;
    using L = fold_layout<TN>;
    constexpr int KC = chunk_dims<CODE>::KC, ND = TN / 2, TS = 8;
    constexpr int TK = 16 * TS, WK = L::WSB * KC; // K of a turn, of a W stage
    // Turn t: X slot t % 4 (a stage is a turn), W slot (t / 4) % 2, waited
    // for at t % 4 == 0: four turns a loop, so that the slots and the
    // descriptors' offsets are constants.
    static_assert(KC == 64 && L::SB == 2 && L::XR == 4 && L::WR == 2 && WK == 4 * TK, "four turns a W stage");
    const int warp = threadIdx.x >> 5, wg = warp >> 2, lane = threadIdx.x & 31;
    const int tile = wg * 4 + (warp & 3), tig = lane & 3;
    const int k_begin = cta.b_begin * 64, nt = cta.nb * 64 / TK;
    // This lane's two quad lanes in W slot 0 (natural_k_gather), the X
    // ring's descriptor.
    const uint32_t wq = smem_addr(cta.w) + tile * L::WTILE + 16 * ((lane & ~3) | (tig >> 1));
    const uint32_t sel = (tig & 1) ? 0x7351u : 0x6240u;
    const uint64_t dx = desc_sw128(cta.x);

    float acc[ND], part[ND];
#pragma unroll
    for (int i = 0; i < ND; i++) acc[i] = part[i] = 0.0f;

    // Turn t's fragments (chunks 2t, 2t + 1) into A.
    const auto fetch = [&](int t, uint32_t (&A)[TS][4]) {
        if constexpr (MUL) {
            fetch_chunks<CODE, BF16, TN, MUL, 0>(cta, tile, 2 * t, A);
        } else {
            const int ws = t >> 2;
            if ((t & 3) == 0) mbar_wait(&cta.wfull[ws & 1], (uint32_t)(ws >> 1) & 1u);
            const uint32_t a = wq + (ws & 1) * L::WBYTES + (t & 3) * 1024;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint4 u = lds128(a + 512 * h), v = lds128(a + 512 * h + 32);
                const uint4 cur = make_uint4(__byte_perm(u.x, v.x, sel), __byte_perm(u.y, v.y, sel),
                                             __byte_perm(u.z, v.z, sel), __byte_perm(u.w, v.w, sel));
#pragma unroll
                for (int j = 0; j < 4; j++) decode_step<CODE, BF16>(cur, j, A[4 * h + j]);
            }
        }
    };
    bool fresh = true;
    // Turn t (X slot I) on the register set A; the next turn decoded into N.
    const auto turn = [&](auto slot, int t, uint32_t (&A)[TS][4], uint32_t (&N)[TS][4]) {
        constexpr int I = decltype(slot)::value;
        asm volatile("bar.sync %0, 256;" ::"r"(3 + wg) : "memory"); // our turn: the other one issued its last
        mbar_wait(&cta.xfull[I], (uint32_t)(t >> 2) & 1u);
#pragma unroll
        for (int j = 0; j < TS; j++) fence_regs(A[j]);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < TS; j++)
            wgmma_rs<BF16>(part, A[j], dx + I * (L::XBYTES >> 4) + (j >> 2) * TN * 8 + 2 * (j & 3), !(fresh && j == 0));
        wgmma_commit();
        asm volatile("bar.arrive %0, 256;" ::"r"(4 - wg) : "memory"); // the other warpgroup's turn
        if (t + 1 < nt) fetch(t + 1, N);
        wgmma_wait<0>();
        fence_regs(part);
#pragma unroll
        for (int j = 0; j < TS; j++) fence_regs(A[j]);
        const int kend = k_begin + (t + 1) * TK;
        fresh = (kend & p.group_mask) == 0 || t == nt - 1;
        if (fresh) strict_drain<TN, ND, KC>(p, cta, tile, 2 * t + 1, kend, part, acc); // a group ends
        mbar_arrive(&cta.xempty[I]);
        if (I == 3 || t == nt - 1) mbar_arrive(&cta.wempty[(t >> 2) & 1]);
    };

    // No branch on the warpgroup near the wgmmas (ptxas then serializes
    // them all, C7520): warpgroup 1 opens warpgroup 0's first turn, and
    // warpgroup 0 takes warpgroup 1's arrival after its last; the other
    // warpgroup meanwhile passes barrier 5 alone.
    asm volatile("bar.arrive %0, %1;" ::"r"(wg ? 3 : 5), "r"(wg ? 256 : 128) : "memory");
    uint32_t a0[TS][4], a1[TS][4];
    fetch(0, a0);
    for (int t = 0;; t += 4) {
        turn(std::integral_constant<int, 0>(), t, a0, a1);
        if (t + 1 >= nt) break;
        turn(std::integral_constant<int, 1>(), t + 1, a1, a0);
        if (t + 2 >= nt) break;
        turn(std::integral_constant<int, 2>(), t + 2, a0, a1);
        if (t + 3 >= nt) break;
        turn(std::integral_constant<int, 3>(), t + 3, a1, a0);
        if (t + 4 >= nt) break;
    }
    asm volatile("bar.sync %0, %1;" ::"r"(wg ? 5 : 3), "r"(wg ? 128 : 256) : "memory");
    strict_finish<CODE, TN, ND>(p, cta, wg, acc);
}

// Groups of 32 (and 8-bit codes, any group): each unit of two k16 steps
// sums into its own part accumulator, alternately p0 and p1, so that a
// warpgroup drains unit u (acc += part x its group's scale, every unit)
// while its unit u + 1 runs: two units of each warpgroup in flight, no
// barrier between the warpgroups.  (The turns above for units of two
// steps: one unit in flight, 66.6 us at M = 128 for int8-g32, a CTA's time
// nearly independent of its tokens: the wait, the drain and the handover
// in sequence.)  acc, p0 and p1: 3 TN / 2 registers a thread.
template <int CODE, bool BF16, int TN>
__device__ __forceinline__ void consume_dual(const Params &p, const FoldCta &cta) {
    using namespace sm90;
    using L = fold_layout<TN>;
    constexpr int KC = chunk_dims<CODE>::KC, ND = TN / 2, TS = 2;
    constexpr int TK = 16 * TS, WK = L::WSB * KC;
    static_assert(L::SB == 2 && WK % TK == 0, "units within X and W stages");
    const int warp = threadIdx.x >> 5, wg = warp >> 2;
    const int tile = wg * 4 + (warp & 3);
    const int k_begin = cta.b_begin * 64, nt = cta.nb * 64 / TK;

    float acc[ND], p0[ND], p1[ND]; // all defined: an undefined wgmma input lets NVVM merge p0 and p1
#pragma unroll
    for (int i = 0; i < ND; i++) acc[i] = p0[i] = p1[i] = 0.0f;
    uint32_t a0[TS][4], a1[TS][4];
    const auto retire = [&](uint32_t (&A)[TS][4]) {
#pragma unroll
        for (int j = 0; j < TS; j++) fence_regs(A[j]);
    };
    // Unit u's fragments; the fetches past the last unit read the last one
    // again (straight code).  Not kept (H200, 2026-12-04, int8-g32, us at M
    // = 64 / 128): the scales read here too, long before the drain (4 more
    // live registers: 43.4 / 63.8 against 43.4 / 56.4); the X stages
    // permuted by producer warps 2-3 instead of the quad reads (40.7 /
    // 73.0: shared-memory bound at 128 tokens).
    const auto fetch = [&](int u, uint32_t (&A)[TS][4]) {
        unit_fetch<CODE, BF16, TN, false, TS>(cta, tile, min(u, nt - 1), A);
    };
    const auto drain = [&](int t, float (&part)[ND]) {
        drain_part(part, acc, strict_scale<TN, KC>(p, cta, tile, ((t + 1) * TK - 1) / KC, k_begin + (t + 1) * TK));
        unit_release<TN, TS, WK>(cta, t, nt);
    };
    const auto issue = [&](int t, uint32_t (&A)[TS][4], float (&part)[ND]) {
        unit_issue<BF16, TN, TS>(cta, t, A, part, true);
    };
    // Every wait retires a known group: unit t (p0, a0) alone in flight at
    // the loop's head from either edge, the tail peeled (else ptxas
    // serializes the wgmmas: C7514).  With 64 tokens the next unit's
    // decode goes before the drain (its loads under the drain's
    // multiply-adds), with 128 after it (H200, 2026-12-04, int8-g32, us at
    // M = 64 / 128: decode first 41.8 / 55.6, drain first 47.5 / 49.2).
    const auto next = [&](int t, int u, float (&part)[ND], uint32_t (&A)[TS][4]) {
        if constexpr (TN == 64) {
            fetch(u, A);
            drain(t, part);
        } else {
            drain(t, part);
            fetch(u, A);
        }
    };
    fetch(0, a0);
    issue(0, a0, p0);
    fetch(1, a1);
    int t = 0;
    for (; t + 2 < nt; t += 2) {
        issue(t + 1, a1, p1);
        wgmma_wait<1>(); // unit t done
        retire(a0);
        next(t, t + 2, p0, a0);
        issue(t + 2, a0, p0);
        wgmma_wait<1>(); // unit t + 1 done
        retire(a1);
        next(t + 1, t + 3, p1, a1);
    }
    if (t + 1 < nt) {
        issue(t + 1, a1, p1);
        wgmma_wait<1>();
        retire(a0);
        drain(t, p0);
        wgmma_wait<0>();
        retire(a1);
        drain(t + 1, p1);
    } else {
        wgmma_wait<0>();
        retire(a0);
        retire(a1);
        drain(t, p0);
    }
    strict_finish<CODE, TN, ND>(p, cta, wg, acc);
}
#endif

template <int CODE, bool BF16, int TN, int GSL, bool MUL = false>
__global__ void __launch_bounds__(3 * 128, 1) wgmma_s_kernel(const __grid_constant__ CUtensorMap xmap, const Params p) {
#ifdef TOPS_CU_WGMMA
    using namespace sm90;
    extern __shared__ unsigned char smem_raw[];
    constexpr int CPB = 64 / chunk_dims<CODE>::KC;
    const FoldCta cta = fold_cta_begin<TN, 2, CPB>(p, smem_raw);
    if (threadIdx.x >= 2 * 128) {
        const int pw = (threadIdx.x >> 5) - 8, lane = threadIdx.x & 31;
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (pw == 0) {
            if (lane == 0) produce_x<TN>(xmap, cta);
        } else if (pw == 1) {
            if (lane == 0) produce_w<TN, CPB>(p, cta);
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        // Two part accumulators in units of two k16 steps for groups of 32
        // and for 8-bit codes (larger groups drained every unit: units of
        // four spill the third A set at 128 tokens); turns of
        // 128 where 4-bit groups of 128 or more meet an even block count;
        // else (4-bit codes) the chunk pipeline.
        static_assert(CPB == 1 || (GSL == 1 && !MUL), "8-bit codes: one kernel for groups of 32 or more, no multipliers");
        if constexpr (CPB == 2 || GSL == 1) {
            consume_dual<CODE, BF16, TN>(p, cta);
        } else if (GSL == 2 && p.group_shift >= 7 && ((cta.b_begin | cta.nb) & 1) == 0) {
            consume_turns<CODE, BF16, TN, MUL>(p, cta);
        } else {
            consume_strict<CODE, BF16, TN, GSL, MUL>(p, cta);
        }
    }
#else
    (void)xmap, (void)p;
#endif
}

// Registers per thread with setmaxnreg: the CTA keeps the pool it was
// launched with (the cap of __launch_bounds__(threads, 1): 168 at 384
// threads, 96 at 640), the producer warpgroup gives part of its share to the
// consumers (an increase beyond the pool waits forever: the first cut asked
// for 120 at CW = 4 and hung).
constexpr int fold_producer_regs(int cw) { return cw == 4 ? 32 : 40; }
constexpr int fold_consumer_regs(int cw) {
    const int threads = (cw + 1) * 128, pool = threads * (65536 / threads / 8 * 8);
    const int r = (pool - 128 * fold_producer_regs(cw)) / (cw * 128) / 8 * 8;
    return r > 232 ? 232 : r;
}
static_assert(fold_consumer_regs(2) == 232 && fold_consumer_regs(4) == 112, "register split");

// Folded-scale kernel (SK: the scale encoding).  One f32 accumulator per
// output over the whole K (per K half with CW = 4).  The K order is fixed
// in registers (natural_k_gather), so the consumer warpgroups do not permute
// the stage; with fold_shfl = 0 (A/B runs) producer warps 2-3 permute it
// instead and release it through the slot's `ready` barrier.
template <int CODE, int SK, bool BF16, int TN, int CW, int GSL>
__global__ void __launch_bounds__((CW + 1) * 128, 1)
    wgmma_f_kernel(const __grid_constant__ CUtensorMap xmap, const Params p) {
#ifdef TOPS_CU_WGMMA
    using namespace sm90;
    using L = fold_layout<TN>;
    extern __shared__ unsigned char smem_raw[];
    __shared__ uint32_t lut[256];
    const FoldCta cta = fold_cta_begin<TN, CW>(p, smem_raw);

    if (threadIdx.x >= CW * 128) {
        const int pw = (threadIdx.x >> 5) - CW * 4, lane = threadIdx.x & 31;
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(fold_producer_regs(CW)));
        if (pw == 0) {
            if (lane == 0) produce_x<TN>(xmap, cta);
        } else if (pw == 1) {
            if (lane == 0) produce_w<TN>(p, cta);
        } else if (!p.fold_shfl) {
            permute_stages<TN>(cta, threadIdx.x - (CW * 4 + 2) * 32);
        }
    } else { // consumers (ptxas applies setmaxnreg to whole if / else branches)
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(fold_consumer_regs(CW)));
        consume_folded<CODE, SK, BF16, TN, CW, GSL>(p, cta, lut);
    }
#else
    (void)xmap, (void)p;
#endif
}

typedef void (*wg_fn)(const CUtensorMap, const Params);

template <int CODE, bool BF16>
wg_fn pick_tn(int tn) {
    return tn == 128 ? wgmma_w_kernel<CODE, BF16, 1, 128> : wgmma_w_kernel<CODE, BF16, 2, 64>;
}

template <bool BF16>
wg_fn pick_code(int code, int tn) {
    switch (code) {
    case TOPS__CU_CODE_U4: return pick_tn<TOPS__CU_CODE_U4, BF16>(tn);
    case TOPS__CU_CODE_E2M1: return pick_tn<TOPS__CU_CODE_E2M1, BF16>(tn);
    case TOPS__CU_CODE_I8: return pick_tn<TOPS__CU_CODE_I8, BF16>(tn);
    case TOPS__CU_CODE_E4M3: return pick_tn<TOPS__CU_CODE_E4M3, BF16>(tn);
    default: return pick_tn<BF16 ? TOPS__CU_CODE_BF16 : TOPS__CU_CODE_F16, BF16>(tn);
    }
}

// [two terms][CW == 4][tn == 128]
const char *const kFoldNames[2][2][2] = {
    {{"wgmma_w folded m64n64k16, 2 consumer warpgroups (A from registers) + TMA",
      "wgmma_w folded m64n128k16, 2 consumer warpgroups (A from registers) + TMA"},
     {"wgmma_w folded m64n64k16, 4 consumer warpgroups (A from registers) + TMA",
      "wgmma_w folded m64n128k16, 4 consumer warpgroups (A from registers) + TMA"}},
    {{"wgmma_w folded (two exact scale terms) m64n64k16, 2 consumer warpgroups (A from registers) + TMA",
      "wgmma_w folded (two exact scale terms) m64n128k16, 2 consumer warpgroups (A from registers) + TMA"},
     {"wgmma_w folded (two exact scale terms) m64n64k16, 4 consumer warpgroups (A from registers) + TMA",
      "wgmma_w folded (two exact scale terms) m64n128k16, 4 consumer warpgroups (A from registers) + TMA"}},
};

struct fold_pick {
    wg_fn fn;
    int threads, smem;
};

template <int CODE, int SK, bool BF16, int TN, int CW, int GSL>
fold_pick fold_one() {
    return {wgmma_f_kernel<CODE, SK, BF16, TN, CW, GSL>, (CW + 1) * 128, fold_layout<TN>::SMEM};
}

template <int CODE, int SK, bool BF16, int TN, int CW>
fold_pick fold_g(int gsl) {
    return gsl == 0 ? fold_one<CODE, SK, BF16, TN, CW, 0>()
           : gsl == 1 ? fold_one<CODE, SK, BF16, TN, CW, 1>()
                      : fold_one<CODE, SK, BF16, TN, CW, 2>();
}

template <int CODE, int SK, bool BF16, int TN>
fold_pick fold_cw(int cw, int gsl) {
    return cw == 4 ? fold_g<CODE, SK, BF16, TN, 4>(gsl) : fold_g<CODE, SK, BF16, TN, 2>(gsl);
}

template <int CODE, int SK, bool BF16>
fold_pick fold_tn(int tn, int cw, int gsl) {
    return tn == 128 ? fold_cw<CODE, SK, BF16, 128>(cw, gsl) : fold_cw<CODE, SK, BF16, 64>(cw, gsl);
}

// fn NULL where tops__cu_fold_shift never folds.
template <bool BF16>
fold_pick pick_fold(int code, int sk, int tn, int cw, int gsl) {
    if (code == TOPS__CU_CODE_E2M1 && sk == TOPS__CU_SCALE_E8M0)
        return fold_tn<TOPS__CU_CODE_E2M1, TOPS__CU_SCALE_E8M0, BF16>(tn, cw, gsl);
    if (code == TOPS__CU_CODE_E2M1 && sk == TOPS__CU_SCALE_UE4M3)
        return fold_tn<TOPS__CU_CODE_E2M1, TOPS__CU_SCALE_UE4M3, BF16>(tn, cw, gsl);
    if constexpr (!BF16) {
        if (code == TOPS__CU_CODE_U4 && sk == TOPS__CU_SCALE_F16)
            return fold_tn<TOPS__CU_CODE_U4, TOPS__CU_SCALE_F16, false>(tn, cw, gsl);
        if (code == TOPS__CU_CODE_U4 && sk == kScaleF16Split)
            return fold_tn<TOPS__CU_CODE_U4, kScaleF16Split, false>(tn, cw, gsl);
    }
    return {nullptr, 0, 0};
}

// The strict 4-bit pipeline (wgmma_s_kernel): fn NULL for other codes.
template <int CODE, bool BF16, int TN>
wg_fn strict_g(int gsl) {
    if constexpr (chunk_dims<CODE>::KC == 32) { // 8-bit codes: groups of 32 or more, one kernel
        return gsl >= 1 ? wgmma_s_kernel<CODE, BF16, TN, 1> : nullptr;
    } else {
        return gsl == 0 ? wgmma_s_kernel<CODE, BF16, TN, 0> : gsl == 1 ? wgmma_s_kernel<CODE, BF16, TN, 1>
                                                                       : wgmma_s_kernel<CODE, BF16, TN, 2>;
    }
}
template <int CODE, bool BF16>
wg_fn strict_tn(int tn, int gsl) {
    return tn == 128 ? strict_g<CODE, BF16, 128>(gsl) : strict_g<CODE, BF16, 64>(gsl);
}
template <bool BF16>
wg_fn pick_strict(int code, int tn, int gsl) {
    if (code == TOPS__CU_CODE_U4) return strict_tn<TOPS__CU_CODE_U4, BF16>(tn, gsl);
    if (code == TOPS__CU_CODE_E2M1) return strict_tn<TOPS__CU_CODE_E2M1, BF16>(tn, gsl);
    if (code == TOPS__CU_CODE_I8) return strict_tn<TOPS__CU_CODE_I8, BF16>(tn, gsl);
    return nullptr;
}
const char *const kStrictNames[2] = {"wgmma_w strict pipelined m64n64k16, 2 consumer warpgroups + TMA",
                                     "wgmma_w strict pipelined m64n128k16, 2 consumer warpgroups + TMA"};
const char *const kStrictMulNames[2] = {
    "wgmma_w strict pipelined, codes times sub-block multipliers, m64n64k16, 2 consumer warpgroups + TMA",
    "wgmma_w strict pipelined, codes times sub-block multipliers, m64n128k16, 2 consumer warpgroups + TMA"};

// K splits: 1 unless debug key wgmma_splits asks for more.  On the H200
// (2026-11-29 16:51 UTC, int4-g128, TN = 64) every split count above 1 ran
// slower although it fills the SMs: at M = 128, 79.8 / 120.2 / 128.2 us for
// 1 / 2 / 4 splits (96, 192, 384 CTAs); a CTA's time barely depends on its K
// (measured 2026-11-29; history in git).
int pick_splits(int kblocks) {
    const long long forced = tops__cu_tune(TOPS__CU_T_WGMMA_SPLITS);
    const int s = forced >= 1 && forced <= 64 ? (int)forced : 1;
    return s < kblocks ? s : kblocks;
}

} // namespace
} // namespace tops_cu

using namespace tops_cu;

extern "C" int tops__cu_wgmma_launch(const tops__cu_matmul_args *a, const char **what) {
    cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
    // Compute capability 9.0 only (the sm_90a pass); TMA wants 16-byte
    // aligned rows: anything else takes the other kernels.
    const unsigned long long row_bytes = (unsigned long long)a->ldx * 2;
    if (!device_is_sm90a() || !sm90::tensor_map_encoder() || (uintptr_t)a->x % 16 != 0 || row_bytes % 16 != 0 ||
        row_bytes >= (1ull << 40) || a->m < 1 || a->k < 1)
        return (int)cudaErrorNotSupported;
    // Factored sub-block scales: the strict 4-bit pipeline alone takes the
    // multipliers (f16 activations, sub-blocks of 32, unfolded scales)
    if (a->mults && (a->code != TOPS__CU_CODE_U4 || a->x_bf16 || a->fold || a->mult_group != 32 ||
                     tops__cu_tune(TOPS__CU_T_WGMMA_STRICT) == 0))
        return (int)cudaErrorNotSupported;
    Params p;
    if (!init_params(a, p, what)) return (int)cudaErrorInvalidValue;
    // Tokens per CTA: debug key wgmma_tn (64 or 128) for A/B runs.  The
    // folded kernel: one m64 tile per channel tile of the CTA (two per
    // warpgroup ran 1.8x slower), 128 tokens above M = 64 (H200, 2026-11-29
    // 18:19 UTC, int4-g128 relaxed / mxfp4 / nvfp4, us at M = 64 / 128 / 256:
    // n64 x2 74.4 / 73.1 / 145.5, n64 x1 41.9 / 82.3 / 122.1, n128 x1 48.0 /
    // 50.1 / 99.6); wgmma_cw=4: four consumer warpgroups.  8-bit integers
    // on the one-ring kernel: 128 tokens (one m64 tile a warpgroup) above
    // M = 64 too (H200, 2026-12-02, int8-g32, same process: M = 128 / 256
    // 88.2 / 175.7 us against 101.4 / 207.5 with two m64 tiles x 64 tokens).
    const long long tn_env = tops__cu_tune(TOPS__CU_T_WGMMA_TN);
    const bool bf16 = a->x_bf16 != 0;
    const bool s4 = !a->fold && (a->code == TOPS__CU_CODE_U4 || a->code == TOPS__CU_CODE_E2M1);
    const bool wide = a->fold || s4 || a->code == TOPS__CU_CODE_I8;
    const int tn = tn_env == 64 || tn_env == 128 ? (int)tn_env : wide && a->m > 64 ? 128 : 64;
    const int cw = tops__cu_tune(TOPS__CU_T_WGMMA_CW) == 4 ? 4 : 2;
    const int gsl = p.group_shift >= 6 ? 2 : p.group_shift - 4; // k16 steps per group: 1, 2, 4 (and more)
    const int fold_sk = a->fold == 2 ? kScaleF16Split : a->scale_kind; // two terms: strict f16 scales
    const fold_pick fp = !a->fold ? fold_pick{nullptr, 0, 0}
                         : bf16   ? pick_fold<true>(a->code, fold_sk, tn, cw, gsl)
                                  : pick_fold<false>(a->code, fold_sk, tn, cw, gsl);
    // Unfolded 4-bit codes: the strict pipeline (settled in tune.c's
    // table; 0 there would keep the one-ring kernel), where a W stage's scale entries fit its
    // copy (K = 512: 512 / G groups, one more when G > 64 starts mid-stage).
    wg_fn sfn = nullptr;
    if (!a->fold && tops__cu_tune(TOPS__CU_T_WGMMA_STRICT) != 0) {
        const int g = p.group_shift >= 30 ? 1 << 30 : 1 << p.group_shift;
        const long long esz = p.has_scales ? p.scale_tile_bytes / (p.groups * 16) : 0;
        const long long ng = g >= 512 ? 2 : g > 64 ? 512 / g + 1 : 512 / g;
        if (p.mults) {
            if (ng * 16 * esz > kMultOffset || gsl != 2) return (int)cudaErrorNotSupported;
            sfn = tn == 128 ? wgmma_s_kernel<TOPS__CU_CODE_U4, false, 128, 2, true>
                            : wgmma_s_kernel<TOPS__CU_CODE_U4, false, 64, 2, true>;
        } else if (ng * 16 * esz <= fold_layout<64>::WSCALE) {
            sfn = bf16 ? pick_strict<true>(a->code, tn, gsl) : pick_strict<false>(a->code, tn, gsl);
        }
    }
    const wg_fn ffn = fp.fn ? fp.fn : sfn;
    const int wt = tn == 128 || ffn ? 1 : 2;
    const long long cblocks = (p.ntiles / 4 + 2 * wt - 1) / (2 * wt);
    p.passes = (int)((a->m + tn - 1) / tn);
    const long long units = cblocks * p.passes;
    const int cpb = 64 / tops__cu_chunk_k(a->code), kblocks = p.chunks / cpb;
    const int splits = pick_splits(kblocks);
    const int bps = (kblocks + splits - 1) / splits;
    p.splits = (kblocks + bps - 1) / bps;
    p.chunks_per_split = bps * cpb;
    if (units > 0x7FFFFFFFLL) {
        *what = "the problem is too large for one launch";
        return (int)cudaErrorInvalidConfiguration;
    }
    CUtensorMap map;
    const cuuint64_t dims[2] = {(cuuint64_t)a->k, (cuuint64_t)a->m}, strides[1] = {(cuuint64_t)row_bytes};
    const cuuint32_t box[2] = {64, (cuuint32_t)tn};
    if (!sm90::encode_sw128(&map, a->x_bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
                            a->x, dims, strides, box, CU_TENSOR_MAP_L2_PROMOTION_L2_256B))
        return (int)cudaErrorNotSupported;
    const wg_fn fn = ffn ? ffn : bf16 ? pick_code<true>(a->code, tn) : pick_code<false>(a->code, tn);
    if (fp.fn) { // w = code x (scale x 2^(D - B)); the sums x 2^B (D: decode_factor's exponent)
        const int d = a->code == TOPS__CU_CODE_E2M1 ? 14 : 0;
        p.fold_pre = ldexpf(1.0f, d - a->fold_shift);
        p.fold_post = ldexpf(1.0f, a->fold_shift);
        // 1: the stage permute instead of lane shuffles (A/B runs; 2-4 % slower
        // on the H200, 2026-11-29 18:24 UTC: 50.0 against 48.2 us, int4-g128
        // relaxed, M = 128)
        p.fold_shfl = tops__cu_tune(TOPS__CU_T_WGMMA_PERMUTE) != 1;
    }
    const size_t smem =
        sfn && !fp.fn ? (size_t)(tn == 128 ? fold_layout<128>::SMEM : fold_layout<64>::SMEM)
        : ffn         ? (size_t)fp.smem : (size_t)kRing * stage_bytes(stage_blocks(a->code), cpb, tn, wt) + 2 * kRing * 8 + 1024;
    cudaError_t err = cudaFuncSetAttribute(reinterpret_cast<const void *>(fn),
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess) {
        *what = "raising the wgmma kernel's shared-memory limit";
        return (int)err;
    }
    unsigned char *ws = nullptr;
    if (p.splits > 1) {
        const size_t wbytes = (size_t)p.splits * (size_t)p.m * (size_t)p.n * sizeof(float);
        err = cudaMallocAsync(reinterpret_cast<void **>(&ws), wbytes + (size_t)units * sizeof(unsigned), stream);
        if (err == cudaErrorNotSupported) { // no memory pools: one split needs no workspace
            (void)cudaGetLastError();
            ws = nullptr;
            p.splits = 1;
            p.chunks_per_split = p.chunks;
        } else if (err != cudaSuccess) {
            *what = "cudaMallocAsync of the wgmma split workspace";
            return (int)err;
        } else {
            p.ws = reinterpret_cast<float *>(ws);
            p.arrivals = reinterpret_cast<unsigned *>(ws + wbytes); // wbytes is a multiple of 4
            err = cudaMemsetAsync(p.arrivals, 0, (size_t)units * sizeof(unsigned), stream);
            if (err != cudaSuccess) *what = "clearing the wgmma split counters";
        }
    }
    const bool strict_pipe = ffn && !fp.fn;
    set_last_kernel(strict_pipe ? (p.mults ? kStrictMulNames : kStrictNames)[tn == 128]
                    : ffn       ? kFoldNames[a->fold == 2][cw == 4][tn == 128]
                    : tn == 128 ? "wgmma_w m64n128k16 (A from registers) + TMA"
                                : "wgmma_w m64n64k16 (A from registers) + TMA");
    if (err == cudaSuccess) {
        // The two-ring kernels as programmatic dependents (debug key pdl=0:
        // plain): their weights stream while the previous kernel ends.
        const bool pdl = ffn && p.splits == 1 && tops__cu_tune(TOPS__CU_T_PDL) != 0;
        err = launch_kernel(fn, dim3((unsigned)units, (unsigned)p.splits),
                            dim3(strict_pipe ? 384 : ffn ? fp.threads : kThreads), smem, stream, pdl, 1, map, p);
        if (err != cudaSuccess) *what = "the wgmma kernel launch";
    }
    if (ws) {
        cudaError_t e2 = cudaFreeAsync(ws, stream);
        if (err == cudaSuccess && e2 != cudaSuccess) {
            err = e2;
            *what = "cudaFreeAsync of the wgmma split workspace";
        }
    }
    return (int)err;
}
