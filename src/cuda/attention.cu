// Fused attention forward on Hopper (sm_90a), FlashAttention-3 style, built on
// the device tiles (include/tensorops_cuda_tiles.cuh).
//
// A CTA owns 128 query rows of one (batch, head): warpgroup 0 is the producer
// (one thread issues every TMA load: Q once, then K and V tiles into a ring of
// STAGES slots, each slot completing on its own mbarrier), warpgroups 1 and 2
// are consumers owning 64 query rows each.  Per key block a consumer computes
// S = Q K^T (wgmma, both operands in shared memory), masks where the block
// needs it, runs the online softmax in registers (row max and sum across the
// quad that shares a row), converts P to f16 / bf16 in registers and feeds it
// as wgmma's A operand for O += P V (V read MN-major from shared memory); O
// stays in registers until the end.  Key blocks wholly outside the causal /
// window band are never loaded; only the blocks that cross its edges (or the
// end of the keys) are masked.
//
// Pipelining (PIPE = 1): the QK^T of block j + 1 is issued before the softmax
// of block j, and the PV of block j runs while the softmax of block j + 1 is
// computed (FA3's intra-warpgroup overlap).  PIPE = 2 (the default; D = 256
// and causal pairs at D = 128 run PIPE 1: pipe_for) adds the ping-pong: the
// two consumer warpgroups take turns issuing their matmuls (two named
// barriers), so one's softmax runs under the other's GEMMs.
//
// Key splits (causal, no window, few CTAs: plan_split): a CTA's work is its
// tile's key blocks, so a causal grid that fits on the SMs in about one wave
// lasts as long as its last tile (all of the keys) while the first tiles idle
// early.  The plan splits the heaviest tiles' keys into two pieces (piece 0
// the upper half, the diagonal in it; piece 1 the lower) and orders all the
// pieces and tiles longest first over every (batch, head).  Each piece stores
// its unnormalized O, row maxima and sums (f32) in a workspace; the second to
// arrive (a counter a tile) merges them, always as piece 0 then piece 1, and
// writes the output: the same bits whichever piece ends last.
//
// Last-wave splits (persistent CTAs on equal units: plan_tail): where the
// units' last round fills at most half the grid, its r units' keys go to two
// CTAs each (the same pieces and merge), so that round lasts half a unit.
//
// Causal pairs (many CTAs: use_pairs): a CTA takes tiles T - 1 - q and q of
// one (batch, head) in turn, so every CTA has T + 1 key blocks and the second
// tile's Q (released by the consumers' q_empty arrivals after their last
// S) and first key blocks load while the first tile ends.
#include "cuda/attention.h"
#include "cuda/cuda_internal.h"
#include "cuda/sm90.cuh"
#include "tensorops_cuda_tiles.cuh"

#include <math.h>
#include <type_traits>
#include <stdio.h>

namespace {

using namespace tops_cu::sm90;
namespace tt = tops_tiles;

constexpr int kBM = 128;      // query rows a CTA
constexpr int kThreads = 384; // producer warpgroup + 2 consumer warpgroups
constexpr int kMaxItems = 512; // work items (tiles and pieces) a (batch, head) in a split launch

struct kparams {
    int h_ratio;          // query heads per kv head
    int sq, sk, d_real;
    int causal;
    int window;           // 0 = none (a window past Sq + Sk is none: clamped on the host)
    float sl;             // factor on logits inside exp2: scale * log2(e), or log2(e) with softcap
    float softcap;        // 0 = off
    float cap_in;         // scale / softcap
    void *out;
    long long osb, osh, oss;
    // Key splits (0 items: the plain grid (tiles, heads, batch)).  Else the grid
    // is items x heads x batch, item-major; code[i] = tile << 2 | split << 1 |
    // piece, longest first.  Split tiles are split_from .. split_from +
    // split_tiles - 1 (causal: the heaviest); ws and counters their slots.
    int items, heads, split_from, split_tiles;
    float *ws;
    unsigned *counters;
    // Query tiles a (batch, head); pairs != 0: a causal CTA takes tiles
    // T - 1 - q and q of one head (the same key blocks in all, T + 1).
    int tiles, pairs;
    // Units of work (a tile, a causal pair or a split item); CTA c takes
    // units c, c + gridDim.x, ... (persistent where the grid is smaller).
    int units;
    // Last-wave splits (plain tiles only): units tail_from + q, q < 2 tail,
    // are piece q % 2 of tile unit tail_from + q / 2 (slot q / 2); 0: none.
    int tail_from, tail;
    unsigned short code[kMaxItems];
};

#ifdef TOPS_CU_WGMMA
__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); // stays before the wait in the PTX
    return y;
}
__device__ __forceinline__ void named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// A named barrier that also counts the threads whose pred is true.
__device__ __forceinline__ unsigned named_count(int id, int threads, bool pred) {
    unsigned n;
    asm volatile("{\n .reg .pred p;\n setp.ne.u32 p, %1, 0;\n bar.red.popc.u32 %0, %2, %3, p;\n}"
                 : "=r"(n)
                 : "r"((unsigned)pred), "r"(id), "r"(threads)
                 : "memory");
    return n;
}

// Online-softmax state of one consumer warpgroup (its thread's two rows).
struct softmax_state {
    float m[2];  // running max of the raw logits (-inf: nothing seen)
    float l[2];  // this thread's part of the running sum
};

// -inf where a key is past the end, after the query (causal) or outside the
// window; k0 = the block's first key, pos0 = the position of the tile's row 0
// (all below 2^31: checked on the host).  Each of the thread's two rows sees
// the keys [lo, hi]; as columns of this thread's elements (their offsets are
// compile-time constants) that is two compares and a select an element.
template <int BN>
__device__ __forceinline__ void apply_mask(tt::acc_tile<BN> &s, const kparams &p, int k0, int pos0) {
    const long long base = (long long)k0 + 2 * (threadIdx.x % 4); // key of the thread's column 0
    int lo[2], hi[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const long long pos = (long long)pos0 + tt::acc_tile<BN>::row(h);
        long long top = (long long)p.sk - 1, bot = 0;
        if (p.causal) top = min(top, pos);
        if (p.window > 0) {
            bot = pos - p.window + 1;
            if (!p.causal) top = min(top, pos + p.window - 1);
        }
        lo[h] = (int)max(-1LL, min((long long)BN, bot - base));
        hi[h] = (int)max(-1LL, min((long long)BN, top - base));
    }
#pragma unroll
    for (int i = 0; i < BN / 2; i++) {
        const int c = 8 * (i / 4) + (i & 1), h = (i >> 1) & 1;
        if (c < lo[h] || c > hi[h]) s.v[i] = -INFINITY;
    }
}

// Masks, exponentiates block `s` in place and rescales o and the sums; after
// it s holds P (relative to the new max).
template <int BN, int D, bool CAP>
__device__ __forceinline__ void softmax_block(tt::acc_tile<BN> &s, tt::acc_tile<D> &o, softmax_state &st,
                                              const kparams &p, int k0, int pos0, bool mask) {
    if constexpr (CAP) {
        const float cap = p.softcap, cin = p.cap_in;
        tt::map(s, [=](float x, int, int) { return cap * tanhf(x * cin); });
    }
    if (mask) apply_mask(s, p, k0, pos0);
    float bmax[2];
    tt::reduce_rows(s, tt::op_max(), -INFINITY, bmax);
    float mu[2], alpha[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float mn = fmaxf(st.m[h], bmax[h]);
        mu[h] = mn == -INFINITY ? 0.0f : mn * p.sl; // a row that saw no key yet keeps P = 0
        alpha[h] = exp2_approx(st.m[h] * p.sl - mu[h]);
        st.m[h] = mn;
    }
    const float sl = p.sl;
    tt::map_rows(s, mu, [=](float x, float r) { return exp2_approx(fmaf(x, sl, -r)); });
    float bsum[2];
    tt::reduce_rows_partial(s, tt::op_sum(), 0.0f, bsum);
#pragma unroll
    for (int h = 0; h < 2; h++) st.l[h] = st.l[h] * alpha[h] + bsum[h];
    tt::map_rows(o, alpha, [](float x, float a) { return x * a; });
}

// Work items of unit c (all warp-uniform: from blockIdx and the parameters).
// Split plan: one, c = item x (heads x batch) + r.  Pairs: tiles T - 1 - q
// then q of head-batch r, c = r P + q with P = (T + 1) / 2 (one tile where
// they coincide).  Else one tile, c = r T + T - 1 - tile (the longest causal
// rows first, tiles fastest: the units that run together share K and V).
struct work_item {
    int m_block, h, b, split, piece, nb_hi, nblocks;
    int slot; // a piece's workspace slot and counter
};
__device__ __forceinline__ int items_of(const kparams &p, int c) {
    if (!p.pairs) return 1;
    const int P = (p.tiles + 1) / 2, q = c % P;
    return p.tiles - 1 - q == q ? 1 : 2;
}
template <int BN> __device__ __forceinline__ work_item find_work(const kparams &p, int c, int j) {
    work_item wi;
    wi.split = wi.piece = wi.slot = 0;
    int r;
    if (p.items) {
        const int hb = p.units / p.items;
        const int item = c / hb, code = p.code[item];
        r = c % hb;
        wi.m_block = code >> 2, wi.split = (code >> 1) & 1, wi.piece = code & 1;
    } else if (p.pairs) {
        const int P = (p.tiles + 1) / 2;
        r = c / P;
        const int q = c - r * P;
        wi.m_block = j == 0 ? p.tiles - 1 - q : q;
    } else {
        int cu = c;
        if (p.tail && c >= p.tail_from) {
            const int q = c - p.tail_from;
            cu = p.tail_from + q / 2;
            wi.split = 1, wi.piece = q & 1, wi.slot = q / 2;
        }
        r = cu / p.tiles;
        wi.m_block = p.tiles - 1 - (cu - r * p.tiles);
    }
    wi.h = r % p.heads, wi.b = r / p.heads;
    if (p.items) wi.slot = (wi.b * p.heads + wi.h) * p.split_tiles + (wi.m_block - p.split_from);
    const long long off = (long long)p.sk - p.sq; // query i sits at position i + off
    const int m0 = wi.m_block * kBM;
    const int mlast = min(m0 + kBM, p.sq) - 1;
    long long key_lo = 0, key_hi = p.sk;
    if (p.causal) key_hi = min(key_hi, mlast + off + 1);
    if (p.window > 0) {
        key_lo = max(0LL, m0 + off - p.window + 1);
        if (!p.causal) key_hi = min(key_hi, mlast + off + p.window);
    }
    int nb_lo = 0, nb_hi = 0;
    if (key_hi > key_lo) {
        nb_lo = (int)(key_lo / BN);
        nb_hi = (int)((key_hi + BN - 1) / BN);
    }
    if (wi.split) { // piece 0: the upper (n + 1) / 2 blocks, piece 1 the rest
        const int n0 = (nb_hi - nb_lo + 1) / 2;
        if (wi.piece == 0) nb_lo = nb_hi - n0;
        else nb_hi -= n0;
    }
    wi.nb_hi = nb_hi;
    wi.nblocks = nb_hi - nb_lo;
    return wi;
}

// The K / V ring: an item's key block `it` takes stage it % STAGES, whose
// phase parity is its bit in phs (at the item's start) plus its uses since;
// ring_advance gives the bits after an item of n blocks.
template <int STAGES> __device__ __forceinline__ uint32_t ring_phase(uint32_t phs, int it) {
    const uint32_t u = (uint32_t)it; // it >= 0: unsigned division is a shift
    return (u / STAGES + (phs >> (u % STAGES))) & 1u;
}
template <int STAGES> __device__ __forceinline__ uint32_t ring_advance(uint32_t phs, int n) {
#pragma unroll
    for (int s = 0; s < STAGES; s++)
        if (n > s) phs ^= (uint32_t)(((n - s + STAGES - 1) / STAGES) & 1) << s;
    return phs;
}
#endif

// CAP: a softcap (a compile-time branch: a run-time one around the tanh code
// made the compiler copy every score out of the wgmma registers each block).
template <typename T, int D, int BN, int STAGES, int PIPE, bool CAP>
__global__ void __launch_bounds__(kThreads, 1)
    attn_fwd(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
             const __grid_constant__ CUtensorMap tv, const kparams p) {
#ifdef TOPS_CU_WGMMA
    constexpr int kQBytes = kBM * D * 2, kKVBytes = BN * D * 2;
    extern __shared__ uint8_t smem_raw[];
    uint8_t *base = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    const tt::smem_tile<T, kBM, D> sQ{reinterpret_cast<T *>(base)};
    uint8_t *kv = base + kQBytes;
    uint64_t *bar = reinterpret_cast<uint64_t *>(kv + 2 * STAGES * kKVBytes);
    uint64_t *q_full = bar, *k_full = bar + 1, *v_full = bar + 1 + STAGES, *k_empty = bar + 1 + 2 * STAGES,
             *v_empty = bar + 1 + 3 * STAGES, *q_empty = bar + 1 + 4 * STAGES;
    // A CTA takes its units' work items in turn (a causal pair: tiles t and
    // T - 1 - t of one head); Q is reloaded for each once the consumers' last
    // S of the one before is done (q_empty), so an item's Q and first key
    // blocks load while the one before ends.

    if (threadIdx.x == 0) {
        mbar_init(q_full, 1);
        mbar_init(q_empty, 8); // lane 0 of each consumer warp, after its last S of an item
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&k_full[s], 1);
            mbar_init(&v_full[s], 1);
            mbar_init(&k_empty[s], 8); // lane 0 of each consumer warp
            mbar_init(&v_empty[s], 8);
        }
        mbar_init_fence();
    }
    __syncthreads();

    // Broadcast from lane 0: the compiler then knows the warpgroup index (and
    // the Q descriptors derived from it) is warp-uniform and keeps them in
    // uniform registers.
    const int wg = __shfl_sync(0xffffffffu, (int)(threadIdx.x / 128), 0);
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
        if (threadIdx.x == 0) {
            uint32_t phs = 0; // bit s: stage s's phase parity when an item starts
            int j = 0;        // items so far (Q's phase)
            for (int u = blockIdx.x; u < p.units; u += gridDim.x)
            for (int ju = 0, nu = items_of(p, u); ju < nu; ju++, j++) {
                mbar_wait(q_empty, (j & 1) ^ 1);
                const work_item wi = find_work<BN>(p, u, ju);
                mbar_expect_tx(q_full, kQBytes);
#pragma unroll
                for (int c = 0; c < D / 64; c++)
                    tma_load_4d(base + c * kBM * 128, &tq, q_full, c * 64, wi.m_block * kBM, wi.h, wi.b);
                const int hk = wi.h / p.h_ratio;
                for (int it = 0; it < wi.nblocks; it++) {
                    const int n = wi.nb_hi - 1 - it, s = it % STAGES;
                    const uint32_t ph = ring_phase<STAGES>(phs, it);
                    uint8_t *ks = kv + s * kKVBytes, *vs = kv + (STAGES + s) * kKVBytes;
                    mbar_wait(&k_empty[s], ph ^ 1);
                    mbar_expect_tx(&k_full[s], kKVBytes);
#pragma unroll
                    for (int c = 0; c < D / 64; c++) tma_load_4d(ks + c * BN * 128, &tk, &k_full[s], c * 64, n * BN, hk, wi.b);
                    mbar_wait(&v_empty[s], ph ^ 1);
                    mbar_expect_tx(&v_full[s], kKVBytes);
#pragma unroll
                    for (int c = 0; c < D / 64; c++) tma_load_4d(vs + c * BN * 128, &tv, &v_full[s], c * 64, n * BN, hk, wi.b);
                }
                phs = ring_advance<STAGES>(phs, wi.nblocks);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");

    const int cw = wg - 1, lane = threadIdx.x % 32;
    auto kstage = [&](int s) { return tt::smem_tile<T, BN, D>{reinterpret_cast<T *>(kv + s * kKVBytes)}; };
    auto vstage = [&](int s) { return tt::smem_tile<T, BN, D>{reinterpret_cast<T *>(kv + (STAGES + s) * kKVBytes)}; };
    // This warp is done with Q (its last S = Q K^T has completed): the
    // producer may load the next item's.
    auto release_q = [&]() {
        __syncwarp();
        if (lane == 0) mbar_arrive(q_empty);
    };

    // Every item starts on stage 0 (so stage addresses stay warp-uniform);
    // bit s of phs is stage s's phase parity when an item starts.
    uint32_t phs = 0;
    int j = 0; // items so far (Q's phase)
    for (int u = blockIdx.x; u < p.units; u += gridDim.x)
    for (int ju = 0, nu = items_of(p, u); ju < nu; ju++, j++) {
        mbar_wait(q_full, j & 1);
        const work_item wi = find_work<BN>(p, u, ju);
        const int nblocks = wi.nblocks, nb_hi = wi.nb_hi;
        const int r0 = wi.m_block * kBM + cw * 64;
        // Positions as int: Sq, Sk <= 2^29 (host check) and the window clamped below
        // Sq + Sk, so pos -/+ window stays inside int.
        const int pos0 = r0 + p.sk - p.sq;
        const int pmax = min(r0 + 63, p.sq - 1) + p.sk - p.sq;
        auto needs_mask = [&](int n) {
            const int k0 = n * BN, k1 = k0 + BN - 1;
            return k1 >= p.sk || (p.causal && k1 > pos0) ||
                   (p.window > 0 && (k0 <= pmax - p.window || (!p.causal && k1 >= pos0 + p.window)));
        };

        tt::acc_tile<D> o;
        o.fill(0.0f);
        softmax_state st;
        st.m[0] = st.m[1] = -INFINITY;
        st.l[0] = st.l[1] = 0.0f;
        // Ping-pong: warpgroup cw issues its matmuls after named barrier 1 + cw,
        // then lets the other one go; warpgroup 0 goes first.
        if (PIPE == 2 && cw == 1 && nblocks > 0) named_arrive(1, 256);

        if constexpr (!PIPE) {
            for (int it = 0; it < nblocks; it++) {
                const int n = nb_hi - 1 - it, s = it % STAGES;
                const uint32_t ph = ring_phase<STAGES>(phs, it);
                tt::acc_tile<BN> sc;
                mbar_wait(&k_full[s], ph);
                tt::fence();
                tt::matmul_nt(sc, sQ, cw * 64, kstage(s), 0, 0);
                tt::commit();
                tt::wait<0>();
                sc.pin();
                __syncwarp();
                if (lane == 0) mbar_arrive(&k_empty[s]);
                if (it == nblocks - 1) release_q();
                softmax_block<BN, D, CAP>(sc, o, st, p, n * BN, pos0, needs_mask(n));
                tt::a_tile<T, BN> pa = tt::to_a<T>(sc);
                mbar_wait(&v_full[s], ph);
                o.pin();
                tt::fence();
                tt::matmul_nn(o, pa, vstage(s), 0, 1);
                tt::commit();
                tt::wait<0>();
                o.pin();
                pa.pin();
                __syncwarp();
                if (lane == 0) mbar_arrive(&v_empty[s]);
            }
        } else if (nblocks > 0) {
            // Prologue: S_0, its softmax and P_0 in registers.  P is carried from
            // one block to the next as the PV matmul's A operand (half the
            // registers of the scores, and no copy of them).
            tt::a_tile<T, BN> pa;
            {
                tt::acc_tile<BN> sc;
                mbar_wait(&k_full[0], phs & 1);
                if (PIPE == 2) named_sync(1 + cw, 256); // ping-pong: wait for this warpgroup's turn
                tt::fence();
                tt::matmul_nt(sc, sQ, cw * 64, kstage(0), 0, 0);
                tt::commit();
                if (PIPE == 2) named_arrive(1 + (cw ^ 1), 256);
                tt::wait<0>();
                sc.pin();
                __syncwarp();
                if (lane == 0) mbar_arrive(&k_empty[0]);
                if (nblocks == 1) release_q();
                softmax_block<BN, D, CAP>(sc, o, st, p, (nb_hi - 1) * BN, pos0, needs_mask(nb_hi - 1));
                pa = tt::to_a<T>(sc);
            }
            // Block it (>= 1) on stage SS = it % STAGES, a compile-time constant
            // (the loop below takes STAGES blocks a round): the stages'
            // descriptors stay loop-invariant whatever the compiler knows of
            // the item's block count.
            auto block = [&](const int it, auto SS) {
                constexpr int s = decltype(SS)::value, sp = (s + STAGES - 1) % STAGES;
                const int n = nb_hi - 1 - it;
                const uint32_t ph = ring_phase<STAGES>(phs, it), php = ring_phase<STAGES>(phs, it - 1);
                tt::acc_tile<BN> sn;
                mbar_wait(&k_full[s], ph);
                mbar_wait(&v_full[sp], php);
                if (PIPE == 2) named_sync(1 + cw, 256);
                o.pin();
                tt::fence();
                tt::matmul_nt(sn, sQ, cw * 64, kstage(s), 0, 0);
                tt::commit();
                tt::matmul_nn(o, pa, vstage(sp), 0, 1);
                tt::commit();
                if (PIPE == 2) named_arrive(1 + (cw ^ 1), 256);
                tt::wait<1>(); // S_{it} done, PV_{it-1} may run on
                sn.pin();
                __syncwarp();
                if (lane == 0) mbar_arrive(&k_empty[s]);
                if (it == nblocks - 1 && lane == 0) mbar_arrive(q_empty); // the warp synced just above
                // The softmax of block it, under the PV of block it - 1; o is
                // rescaled only after that PV has finished.  Blocks with and
                // without a mask take separate copies of the rest of the block
                // (joined after P is in pa), so the scores stay in the
                // registers the wgmma wrote them to.
                auto rest = [&](auto masked) {
                    if constexpr (CAP) {
                        const float cap = p.softcap, cin = p.cap_in;
                        tt::map(sn, [=](float x, int, int) { return cap * tanhf(x * cin); });
                    }
                    if constexpr (decltype(masked)::value) apply_mask(sn, p, n * BN, pos0);
                    float bmax[2], mu[2], alpha[2];
                    tt::reduce_rows(sn, tt::op_max(), -INFINITY, bmax);
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) {
                        // Lazy rescale: a row keeps its running maximum while
                        // the block's stays within 2^8 of it in P (P <= 256:
                        // in range for f16 and bf16, the same relative
                        // rounding; O and l share the maximum, so O / l is
                        // unchanged), so alpha = 1 and most warps skip the
                        // rescale of O below.  (scale > 0: sl > 0.)
                        const bool keep = (bmax[hh] - st.m[hh]) * p.sl <= 8.0f; // false while st.m = -inf
                        const float mn = keep ? st.m[hh] : fmaxf(st.m[hh], bmax[hh]);
                        mu[hh] = mn == -INFINITY ? 0.0f : mn * p.sl;
                        alpha[hh] = keep ? 1.0f : exp2_approx(st.m[hh] * p.sl - mu[hh]);
                        st.m[hh] = mn;
                    }
                    const float sl = p.sl;
                    tt::map_rows(sn, mu, [=](float x, float r) { return exp2_approx(fmaf(x, sl, -r)); });
                    float bsum[2];
                    tt::reduce_rows_partial(sn, tt::op_sum(), 0.0f, bsum);
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) st.l[hh] = st.l[hh] * alpha[hh] + bsum[hh];
                    // A warp-wide barrier here keeps ptxas from hoisting the wait
                    // above the exponentials (which it otherwise does: they then
                    // ran after this PV instead of under it).
                    __syncwarp();
                    tt::wait<0>();
                    o.pin();
                    pa.pin();
                    __syncwarp();
                    if (lane == 0) mbar_arrive(&v_empty[sp]);
                    // Rows whose maximum did not grow have alpha = 1 exactly: a
                    // warp whose rows all kept theirs skips the rescale (same bits).
                    if (!__all_sync(0xffffffffu, alpha[0] == 1.0f && alpha[1] == 1.0f))
                        tt::map_rows(o, alpha, [](float x, float a) { return x * a; });
                    pa = tt::to_a<T>(sn); // the PV that read pa has finished
                };
                if (needs_mask(n)) rest(std::true_type{});
                else rest(std::false_type{});
            };
            static_assert(STAGES == 2, "one round: stages 1, 0");
            for (int it = 1; it < nblocks; it += 2) {
                block(it, std::integral_constant<int, 1>{});
                if (it + 1 < nblocks) block(it + 1, std::integral_constant<int, 0>{});
            }
            // Epilogue: the last PV.
            {
                const int sp = (nblocks - 1) % STAGES;
                const uint32_t php = ring_phase<STAGES>(phs, nblocks - 1);
                mbar_wait(&v_full[sp], php);
                o.pin();
                tt::fence();
                tt::matmul_nn(o, pa, vstage(sp), 0, 1);
                tt::commit();
                tt::wait<0>();
                o.pin();
                pa.pin();
                __syncwarp();
                if (lane == 0) mbar_arrive(&v_empty[sp]);
            }
        }
        if (nblocks == 0) release_q();
        phs = ring_advance<STAGES>(phs, nblocks);
        // Warpgroup 1's last arrival on barrier 1 has no matching turn: take it.
        if (PIPE == 2 && cw == 0 && nblocks > 0) named_sync(1, 256);

        if (wi.split) {
            // This piece's O, row maxima and partial sums into its slot (16 bytes
            // a thread a store, coalesced); the second piece to arrive merges.
            const int ct = threadIdx.x - 128, piece = wi.piece;
            const size_t unit = (size_t)wi.slot;
            constexpr int kChunks = D / 8 + 1;
            float4 *slot = reinterpret_cast<float4 *>(p.ws) + (unit * 2 + piece) * kChunks * 256;
            const float4 *other = reinterpret_cast<const float4 *>(p.ws) + (unit * 2 + (piece ^ 1)) * kChunks * 256;
#pragma unroll
            for (int jj = 0; jj < D / 8; jj++)
                slot[jj * 256 + ct] = make_float4(o.v[4 * jj], o.v[4 * jj + 1], o.v[4 * jj + 2], o.v[4 * jj + 3]);
            slot[(D / 8) * 256 + ct] = make_float4(st.m[0], st.m[1], st.l[0], st.l[1]);
            __threadfence();
            named_sync(3, 256);
            unsigned before = 0;
            if (ct == 0) before = atomicAdd(&p.counters[unit], 1u);
            if (named_count(3, 256, before != 0) == 0) continue; // the other piece merges
            __threadfence();
            const float4 ml = __ldcg(&other[(D / 8) * 256 + ct]);
            const float om[2] = {ml.x, ml.y}, ol[2] = {ml.z, ml.w};
            float fa[2], fb[2];
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const float ma = piece ? om[hh] : st.m[hh], mb = piece ? st.m[hh] : om[hh];
                const float la = piece ? ol[hh] : st.l[hh], lb = piece ? st.l[hh] : ol[hh];
                const float mn = fmaxf(ma, mb), mu = mn == -INFINITY ? 0.0f : mn * p.sl;
                fa[hh] = exp2_approx(ma * p.sl - mu);
                fb[hh] = exp2_approx(mb * p.sl - mu);
                st.l[hh] = la * fa[hh] + lb * fb[hh];
            }
#pragma unroll
            for (int jj = 0; jj < D / 8; jj++) {
                const float4 wv = __ldcg(&other[jj * 256 + ct]);
                const float ow[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = 4 * jj + e, hh = (i >> 1) & 1;
                    const float xa = piece ? ow[e] : o.v[i], xb = piece ? o.v[i] : ow[e];
                    o.v[i] = xa * fa[hh] + xb * fb[hh];
                }
            }
        }
        // O / l, written as T pairs (4 threads of a quad cover 16 contiguous bytes).
        float inv[2];
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const float lt = tt::reduce_quad(st.l[hh], tt::op_sum());
            inv[hh] = lt > 0.0f ? 1.0f / lt : 0.0f;
        }
        T *out = reinterpret_cast<T *>(p.out) + wi.b * p.osb + wi.h * p.osh;
#pragma unroll
        for (int i = 0; i < D / 2; i += 2) {
            const int row = tt::acc_tile<D>::row_of(i), col = tt::acc_tile<D>::col_of(i);
            const int qi = r0 + row;
            if (qi < p.sq && col < p.d_real) {
                const float f = inv[(i >> 1) & 1];
                *reinterpret_cast<uint32_t *>(out + qi * p.oss + col) = tt::detail::pack2<T>(o.v[i] * f, o.v[i + 1] * f);
            }
        }
    }
#endif
}

template <int D> struct shape {
    static constexpr int kBN = D >= 256 ? 64 : 128;
    static constexpr int kStages = 2;
    static constexpr int kSmem = kBM * D * 2 + 2 * kStages * kBN * D * 2 + 128 + 1024;
};

int d_pad(int d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }

// 4-D map over [B, H, S, D] (innermost first), box {64, rows, 1, 1}.
bool make_map(CUtensorMap *map, int bf16, const void *base, int d, int64_t s, int64_t h, int64_t bsz,
              const int64_t *stride, int rows) {
    cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)s, (cuuint64_t)h, (cuuint64_t)bsz};
    // Extent-1 dimensions: any stride is equivalent; use one TMA accepts.
    int64_t st[3] = {stride[2], stride[1], stride[0]};
    int64_t ext[3] = {s, h, bsz};
    int64_t span = d;
    for (int i = 0; i < 3; i++) {
        if (ext[i] == 1) st[i] = (span + 7) / 8 * 8;
        span = st[i] * ext[i];
    }
    cuuint64_t strides[3] = {(cuuint64_t)st[0] * 2, (cuuint64_t)st[1] * 2, (cuuint64_t)st[2] * 2};
    cuuint32_t box[4] = {64, (cuuint32_t)rows, 1, 1};
    return encode_sw128(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, base, dims,
                        strides, box, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
}

// The finish time of CTAs of these costs dispatched in order, each to the
// first SM free (how the hardware places one-CTA-an-SM blocks).
double dispatch_time(const double *cost, int n, int reps, int sms) {
    static thread_local double heap[1024]; // the SMs' busy-until times, a min-heap
    if (sms > 1024) sms = 1024;
    for (int i = 0; i < sms; i++) heap[i] = 0.0;
    double end = 0.0;
    for (int i = 0; i < n; i++)
        for (int r = 0; r < reps; r++) {
            const double t = heap[0] + cost[i];
            if (t > end) end = t;
            int j = 0; // replace the root by t and sift it down
            for (;;) {
                int c = 2 * j + 1;
                if (c >= sms) break;
                if (c + 1 < sms && heap[c + 1] < heap[c]) c++;
                if (heap[c] >= t) break;
                heap[j] = heap[c], j = c;
            }
            heap[j] = t;
        }
    return end;
}

// A sliding window narrower than the keys: blocks outside the band are
// skipped, so tiles and pairs cost different amounts.
bool banded(const tops__cu_attn_args *a) { return a->window > 0 && a->window < a->sq + a->sk; }

// The key-split plan (see the top of the file): on for causal calls without
// a window whose (batch, head) x tiles grid takes at most 4 waves, where the
// modelled finish time (a CTA costs its key blocks plus one for Q and the
// epilogue, a piece half a block more for the merge) drops by 8 % or more;
// the split threshold is the one that models fastest.
// Debug key attn_qsplit=0 turns it off, 2 splits every tile of two or more
// key blocks (tests).  Fills p's split fields; false: no split.
bool plan_split(const tops__cu_attn_args *a, int bn, kparams *p) {
    const int mode = (int)tops__cu_tune(TOPS__CU_T_ATTN_QSPLIT);
    p->items = 0;
    if (mode == 0 || !a->causal || banded(a)) return false;
    const long long tiles = (a->sq + kBM - 1) / kBM, hb = a->heads * a->batch,
                    sms = a->sm_count;
    if (tiles > kMaxItems / 2 || (mode == 1 && hb * tiles > 4 * sms) || hb * tiles * 2 > 0x7FFFFFFF) return false;
    int nb[kMaxItems / 2] = {0};
    const long long off = a->sk - a->sq;
    for (int t = 0; t < (int)tiles; t++) {
        const long long last = (t + 1) * (long long)kBM < a->sq ? (t + 1) * (long long)kBM - 1 : a->sq - 1;
        const long long hi = last + off + 1 < a->sk ? last + off + 1 : a->sk;
        nb[t] = hi > 0 ? (int)((hi + bn - 1) / bn) : 0;
    }
    const int nmax = nb[tiles - 1]; // causal: blocks grow with the tile
    if (nmax < 2) return false;
    double cost[kMaxItems];
    auto model = [&](int thr, bool fill) {
        // Items longest first (stable: later tiles first among equals).
        int n = 0;
        int order[kMaxItems];
        for (int t = (int)tiles - 1; t >= 0; t--) {
            if (nb[t] > thr) {
                cost[n] = (nb[t] + 1) / 2 + 1.5, order[n++] = t << 2 | 2;
                cost[n] = nb[t] / 2 + 1.5, order[n++] = t << 2 | 3;
            } else {
                cost[n] = nb[t] + 1.0, order[n++] = t << 2;
            }
        }
        for (int i = 1; i < n; i++) // insertion sort, descending, stable
            for (int j = i; j > 0 && cost[j] > cost[j - 1]; j--) {
                const double c = cost[j];
                cost[j] = cost[j - 1], cost[j - 1] = c;
                const int o = order[j];
                order[j] = order[j - 1], order[j - 1] = o;
            }
        if (fill) {
            for (int i = 0; i < n; i++) p->code[i] = (unsigned short)order[i];
            p->items = n;
        }
        return dispatch_time(cost, n, (int)hb, (int)sms);
    };
    int best = nmax;
    if (mode == 2) best = 1;
    else {
        const double plain = model(nmax, false);
        double best_t = plain;
        const int lo = (nmax + 1) / 2, step = (nmax - lo + 15) / 16 > 1 ? (nmax - lo + 15) / 16 : 1;
        for (int thr = lo; thr < nmax; thr += step) {
            const double t = model(thr, false);
            if (t < best_t) best_t = t, best = thr;
        }
        if (best_t > 0.92 * plain) return false;
    }
    model(best, true);
    int from = (int)tiles;
    while (from > 0 && nb[from - 1] > best) from--;
    p->split_from = from;
    p->split_tiles = (int)tiles - from;
    return p->split_tiles > 0;
}

// Causal pairs (debug key attn_pairs: 0 off; 1, the default, where the
// pairs fill the SMs at least twice and no key split is planned; 2 every
// causal call without a window that is not split): a CTA takes query tiles
// T - 1 - q and q of one (batch, head), so every CTA has T + 1 key blocks
// (T odd: the middle tile alone) and the second tile's Q and first key
// blocks load under the first's last blocks and output.
int use_pairs(const tops__cu_attn_args *a) {
    const int mode = (int)tops__cu_tune(TOPS__CU_T_ATTN_PAIRS);
    if (mode == 0 || !a->causal || banded(a)) return 0;
    const long long tiles = (a->sq + kBM - 1) / kBM;
    if (tiles < 2) return 0;
    return mode == 2 || a->heads * a->batch * ((tiles + 1) / 2) >= 2LL * a->sm_count;
}

// Units of the plain plan (no key splits): causal pairs or single tiles of
// every (batch, head).
long long plain_units(const tops__cu_attn_args *a, int pairs) {
    const long long tiles = (a->sq + kBM - 1) / kBM, hb = a->heads * a->batch;
    return pairs ? hb * ((tiles + 1) / 2) : hb * tiles;
}

// Persistent CTAs (debug key attn_persist: 0 off, one CTA a unit; 1, the
// default: one CTA an SM where the units all cost the same (non-causal
// without a window, or causal pairs) and outnumber the SMs; N >= 2: at most
// N CTAs wherever they cost the same, for tests).  A CTA then loads the
// next unit's Q and first key blocks while it ends one, instead of an SM
// waiting for a new CTA's start, Q and first blocks.  The grid's size.
long long persist_grid(const tops__cu_attn_args *a, int pairs, long long units) {
    const long long mode = tops__cu_tune(TOPS__CU_T_ATTN_PERSIST);
    const bool equal = pairs || (!a->causal && !banded(a));
    if (mode <= 0 || !equal) return units;
    const long long cap = mode == 1 ? a->sm_count : mode;
    return units > cap ? cap : units;
}

// Last-wave splits (debug key attn_tail: 0 off, 1 the default): on a
// persistent grid of equal single-tile units (non-causal, no window) whose
// last round holds r units with 0 < 2 r <= the grid, and tiles of two or
// more key blocks, those r units become 2 r half units (the key-split
// pieces): that round then lasts half a unit (B = 4 H = 32 S = 4096: 4096
// units on 132 SMs, 32 rounds -> 31.5).  The number of units split, 0: none.
int plan_tail(const tops__cu_attn_args *a, int pairs, long long units, long long grid, int bn) {
    if (tops__cu_tune(TOPS__CU_T_ATTN_TAIL) == 0 || pairs || a->causal || banded(a) || grid >= units) return 0;
    const long long r = units % grid;
    if (r == 0 || 2 * r > grid || (a->sk + bn - 1) / bn < 2 || units + r > 0x7FFFFFFF) return 0;
    return (int)r;
}

template <typename T, int D, int PIPE> int launch_typed(const tops__cu_attn_args *a) {
    using S = shape<D>;
    CUtensorMap tq, tk, tv;
    if (!make_map(&tq, a->bf16, a->q, a->d, a->sq, a->heads, a->batch, a->q_stride, kBM) ||
        !make_map(&tk, a->bf16, a->k, a->d, a->sk, a->kv_heads, a->batch, a->k_stride, S::kBN) ||
        !make_map(&tv, a->bf16, a->v, a->d, a->sk, a->kv_heads, a->batch, a->v_stride, S::kBN))
        return (int)cudaErrorNotSupported;
    kparams p;
    p.h_ratio = (int)(a->heads / a->kv_heads);
    p.sq = (int)a->sq;
    p.sk = (int)a->sk;
    p.d_real = a->d;
    p.causal = a->causal;
    // A window wider than every distance is no window (and keeps positions
    // -/+ window inside int).
    p.window = a->window >= a->sq + a->sk ? 0 : (int)a->window;
    p.softcap = a->softcap;
    const float log2e = 1.4426950408889634f;
    p.sl = a->softcap > 0.0f ? log2e : a->scale * log2e;
    p.cap_in = a->softcap > 0.0f ? a->scale / a->softcap : 0.0f;
    p.out = a->out;
    p.osb = a->o_stride[0];
    p.osh = a->o_stride[1];
    p.oss = a->o_stride[2];
    auto kern = a->softcap > 0.0f ? attn_fwd<T, D, S::kBN, S::kStages, PIPE, true>
                                  : attn_fwd<T, D, S::kBN, S::kStages, PIPE, false>;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmem);
    if (e != cudaSuccess) return (int)e;
    cudaStream_t stream = (cudaStream_t)a->stream;
    p.ws = nullptr;
    p.counters = nullptr;
    p.tail = p.tail_from = 0;
    p.heads = (int)a->heads;
    p.tiles = (int)((a->sq + kBM - 1) / kBM);
    const long long hb = a->heads * a->batch;
    if (hb * p.tiles > 0x7FFFFFFF) return (int)cudaErrorNotSupported; // one CTA an item at most
    // Two slots of O, maxima and sums a split tile, then its counter, for
    // `count` split tiles; false: no memory (or memory pools).
    unsigned char *ws = nullptr;
    auto take_ws = [&](size_t count) {
        const size_t slots = count * 2 * (size_t)(D / 8 + 1) * 256 * sizeof(float4);
        e = cudaMallocAsync(reinterpret_cast<void **>(&ws), slots + count * sizeof(unsigned), stream);
        if (e == cudaErrorMemoryAllocation || e == cudaErrorNotSupported) {
            (void)cudaGetLastError();
            e = cudaSuccess;
            return false;
        }
        if (e != cudaSuccess) return false;
        p.ws = reinterpret_cast<float *>(ws);
        p.counters = reinterpret_cast<unsigned *>(ws + slots);
        e = cudaMemsetAsync(p.counters, 0, count * sizeof(unsigned), stream);
        return true;
    };
    auto launch = [&](long long grid) {
        if (e == cudaSuccess) {
            kern<<<dim3((unsigned)grid), kThreads, S::kSmem, stream>>>(tq, tk, tv, p);
            e = cudaGetLastError();
        }
        const cudaError_t e2 = ws ? cudaFreeAsync(ws, stream) : cudaSuccess;
        return (int)(e != cudaSuccess ? e : e2);
    };
    p.pairs = 0;
    // Key splits; without the workspace the tiles run whole (the plain plan).
    if (plan_split(a, S::kBN, &p)) {
        if (take_ws((size_t)a->batch * a->heads * p.split_tiles)) {
            p.units = (int)(p.items * hb);
            return launch(p.units);
        }
        if (e != cudaSuccess) return (int)e;
    }
    // The plain plan: tiles or causal pairs, maybe persistent, the last wave maybe split.
    p.items = 0;
    p.pairs = use_pairs(a);
    const long long units = plain_units(a, p.pairs), grid = persist_grid(a, p.pairs, units);
    p.units = (int)units;
    const int tail = plan_tail(a, p.pairs, units, grid, S::kBN);
    if (tail > 0 && take_ws((size_t)tail)) {
        p.tail = tail;
        p.tail_from = (int)(units - tail);
        p.units = (int)(units + tail);
    }
    return launch(grid);
}

// The key-split plan and causal pairs launch_typed will pick (p: scratch).
bool plain_pairs(const tops__cu_attn_args *a, int dp, kparams *p, bool *split) {
    *split = plan_split(a, dp >= 256 ? 64 : 128, p);
    return !*split && use_pairs(a);
}

// The software pipeline of a call whose plain plan runs causal pairs or
// not (plain_pairs): debug key attn_pipe 0 / 1 / 2 forces one (D = 256 has
// no ping-pong: 2 runs 1).  By default the ping-pong (2), except for causal
// pairs at D = 128, which overlap within each warpgroup (1): there the
// ping-pong's turns cost more than they hide (H100, bf16, B = 4 H = 32
// S = 4096 causal, alternated three times: 555 -> 571 TFLOP/s; key splits,
// B = 1 H = 8 S = 2048 causal, lose 4.5 % with 1 and keep 2).
int pipe_for(const tops__cu_attn_args *a, int pairs) {
    const int dp = d_pad(a->d), forced = (int)tops__cu_tune(TOPS__CU_T_ATTN_PIPE);
    if (forced >= 0 && forced <= 2) return forced == 2 && dp == 256 ? 1 : forced;
    if (dp == 256) return 1;
    return dp == 128 && pairs ? 1 : 2;
}

template <typename T> int launch_d(const tops__cu_attn_args *a) {
    static thread_local kparams p;
    bool split;
    const int pm = pipe_for(a, plain_pairs(a, d_pad(a->d), &p, &split));
    switch (d_pad(a->d)) {
    case 64:
        return pm == 0 ? launch_typed<T, 64, 0>(a) : pm == 2 ? launch_typed<T, 64, 2>(a) : launch_typed<T, 64, 1>(a);
    case 128:
        return pm == 0 ? launch_typed<T, 128, 0>(a) : pm == 2 ? launch_typed<T, 128, 2>(a) : launch_typed<T, 128, 1>(a);
    default:
        return pm == 0 ? launch_typed<T, 256, 0>(a) : launch_typed<T, 256, 1>(a);
    }
}

} // namespace

extern "C" void tops__cu_attention_name(const tops__cu_attn_args *a, char *buf, size_t cap) {
    const int dp = d_pad(a->d);
    static thread_local kparams p;
    bool split;
    const int pairs = plain_pairs(a, dp, &p, &split), pm = pipe_for(a, pairs);
    const long long units = plain_units(a, pairs);
    const long long grid = persist_grid(a, pairs, units);
    const bool persist = !split && grid < units;
    const bool tail = persist && plan_tail(a, pairs, units, grid, dp >= 256 ? 64 : 128) > 0;
    snprintf(buf, cap, "fa3 sm90a d%d bn%d %s%s%s%s%s", dp, dp >= 256 ? 64 : 128,
             pm == 0 ? "serial" : pm == 2 ? "pingpong" : "overlap", a->bf16 ? " bf16" : " f16",
             split ? ", heavy tiles' keys split" : pairs ? ", causal tiles in pairs" : "",
             persist ? ", persistent CTAs" : "", tail ? ", last wave's keys split" : "");
}

extern "C" int tops__cu_attention_launch(const tops__cu_attn_args *a) {
    return a->bf16 ? launch_d<__nv_bfloat16>(a) : launch_d<__half>(a);
}
