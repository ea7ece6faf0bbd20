// Relaxed 4-bit weights on Hopper's FP8 tensor cores (sm_90a): int4 with
// groups of 128 (or multiples) and mxfp4 whose 128-K chunks fit 15 binades.
//
// The activations are quantized to e4m3 per row (fp8_gemm.cu's quantizer,
// FORMATS.md section 3: relaxed mode).  The weights decode EXACTLY to e4m3 in
// registers (pack.c's q8 layout, cuda_internal.h): int4 values v as v + 1/2,
// whose eight magnitudes 0.5 .. 7.5 are one 8-entry table (one byte permute
// per 4 weights, the sign ORed in: 8 instructions per 8 weights against 13
// for v's 16-entry table), the half taken back at the end with a few f16
// wgmmas over the chunk sums of the activations; e2m1 codes times 2^(d - 8)
// are exact for d in 0..14 (one 8-entry table per block, the sign ORed in),
// the chunk's power of two left to its factor.  So each 128-K chunk is 4
// wgmma m64nNk32 e4m3 (A from registers, swap AB: 64 channels per consumer
// warpgroup; B = TN tokens of e4m3 activations through TMA, 128-byte swizzle:
// one row of the tile = the chunk) into a fresh part accumulator, then acc +=
// part x factor (the int4 group scale, or e2m1's power of two) in f32, and at
// the end x the row scale x the tensor scale.  Twice the MACs per clock of
// the f16 tensor cores, half the activation bytes.  The next chunk is decoded
// while the current chunk's wgmmas run; the two consumer warpgroups overlap
// each other's FFMAs.  One producer thread feeds a ring of chunk stages (one
// TMA tile + one bulk copy of the CTA's 128 channels' record).
#include "cuda/kernels.cuh"
#include "cuda/sm90.cuh"

#include <cuda_fp8.h>
#include <string.h>

namespace tops_cu {
namespace {

constexpr int kQ8Consumers = 2; // warpgroups, one m64 channel tile each
constexpr int kQ8Threads = (kQ8Consumers + 1) * 128;
constexpr int kQ8Ring = 8; // chunk stages

// Tuning builds only (bench/results/h200.md): 1 the consumers only wait on
// and release the ring (no decode, no wgmma, no stores); after the first
// ring pass the producer reloads 2 the weights only, 3 the activations
// only, 4 nothing.
#ifndef TOPS_CU_Q8_DIAG
#define TOPS_CU_Q8_DIAG 0
#endif

struct Q8Params {
    Params io;              // out, ldo, out_dtype, accumulate, m, n, global (store_out)
    const unsigned char *w; // the q8 layout
    const float *row_scale; // the quantizer's [m]
    int chunks, rec, passes;
    int out_vec;            // out_vec4: rows written 4 channels per access
    int look;               // first ring pass: activation tiles ahead of the first stage not landed (0: all at once)
    // int4: the correction's blocks (kernels.cuh ActSums; cuda_internal.h's factor plane)
    const unsigned char *sums, *fplane;
    int sblocks;
};

// A stage: the chunk's activation tile (TN rows of 128 bytes, 1024-byte
// aligned for the swizzle), then the weight record (the largest one
// rounded up to 1024 bytes, so the next tile stays aligned).
template <int TN>
struct q8_layout {
    static constexpr int XBYTES = TN * 128;
    static constexpr int WBYTES = 9216;
    static constexpr int STAGE = XBYTES + WBYTES;
    static constexpr int SMEM = kQ8Ring * STAGE + 2 * kQ8Ring * 8 + 1024;
};
static_assert(TOPS__CU_Q8_WBYTES + 8 * TOPS__CU_Q8_CH <= 9216, "a record fits its stage");
static_assert(TOPS__CU_Q8_FBYTES <= 9216, "an int4 correction block fits a stage");

// The consumer loops.
enum Q8Loop : int {
    kChunk = 0,    // one group a chunk, drained after it completes
    kHalves = 1,   // token halves (TN = 128)
    kRow = 2,      // one factor per row, one chunk a group
    kRowPairs = 3, // one factor per row, chunk pairs
    kPairs = 4,    // chunk pairs, a part accumulator each (TN = 64)
};

#ifdef TOPS_CU_WGMMA
// e2m1 weights 0..3 / 4..7 of a word through the magnitude table t, signs
// ORed in; int4 the same way (its v + 1/2 through the fixed table).
__device__ __forceinline__ uint32_t q8_e2m1_lo(uint32_t w, uint2 t) {
    return __byte_perm(t.x, t.y, w & 0x7777u) | (w & 0x80808080u);
}
__device__ __forceinline__ uint32_t q8_e2m1_hi(uint32_t w, uint2 t) {
    return __byte_perm(t.x, t.y, (w >> 16) & 0x7777u) | ((w << 4) & 0x80808080u);
}

// The two consumer warpgroups (named barrier 1; the producer never joins).
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(kQ8Consumers * 128) : "memory");
}

// A lane's words of a chunk (tile tl of the CTA) from the stage's record
// `r`, the factors of its rows g, g + 8 and (e2m1) their table offsets.
struct Q8Raw {
    uint32_t wd[8], dg, dh;
    float fg, fh;
};
template <bool MX>
__device__ __forceinline__ Q8Raw q8_load(const unsigned char *r, int tl, int lane) {
    const int g = lane >> 2;
    const uint4 h0 = *reinterpret_cast<const uint4 *>(r + tl * 1024 + lane * 16);
    const uint4 h1 = *reinterpret_cast<const uint4 *>(r + tl * 1024 + 512 + lane * 16);
    const float *fac = reinterpret_cast<const float *>(r + TOPS__CU_Q8_WBYTES);
    Q8Raw w = {{h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w}, 0u, 0u, fac[tl * 16 + g], fac[tl * 16 + g + 8]};
    if constexpr (MX) {
        const uint32_t *dd = reinterpret_cast<const uint32_t *>(r + TOPS__CU_Q8_WBYTES + 4 * TOPS__CU_Q8_CH);
        w.dg = dd[tl * 16 + g];
        w.dh = dd[tl * 16 + g + 8];
    }
    return w;
}

// The A fragments of the 4 k32 steps from a lane's words.
template <bool MX>
__device__ __forceinline__ void q8_decode(const Q8Raw &w, const uint2 *tabs, uint2 half, uint32_t (&A)[4][4]) {
    if constexpr (MX) {
        const unsigned char *tb = reinterpret_cast<const unsigned char *>(tabs);
#pragma unroll
        for (int s = 0; s < 4; s++) {
            // Byte s of dd is table d's byte offset 8 d: one byte permute a lookup.
            const uint2 tg = *reinterpret_cast<const uint2 *>(tb + __byte_perm(w.dg, 0u, 0x4440u | s)),
                        th = *reinterpret_cast<const uint2 *>(tb + __byte_perm(w.dh, 0u, 0x4440u | s));
#pragma unroll
            for (int p = 0; p < 2; p++) {
                A[s][2 * p] = q8_e2m1_lo(w.wd[2 * s + p], tg);
                A[s][2 * p + 1] = q8_e2m1_hi(w.wd[2 * s + p], th);
            }
        }
    } else {
#pragma unroll
        for (int s = 0; s < 4; s++)
#pragma unroll
            for (int p = 0; p < 2; p++) {
                A[s][2 * p] = q8_e2m1_lo(w.wd[2 * s + p], half);
                A[s][2 * p + 1] = q8_e2m1_hi(w.wd[2 * s + p], half);
            }
    }
}

// Both: a chunk's A fragments and its rows' factors.
template <bool MX>
__device__ __forceinline__ void q8_fetch(const unsigned char *r, int tl, int lane, const uint2 *tabs, uint2 half,
                                         uint32_t (&A)[4][4], float &fg, float &fh) {
    const Q8Raw w = q8_load<MX>(r, tl, lane);
    fg = w.fg;
    fh = w.fh;
    q8_decode<MX>(w, tabs, half, A);
}

// One chunk's 4 k32 steps into the accumulator d (FRESH: the first step's
// scale-d is 0) for the token rows of the tile at xb.  The steps'
// descriptors come from one encoding, 32 bytes = 2 apart in its address
// field (which holds the whole shared window: no carry out of it): 4 uniform
// instructions a step fewer (H200, same call: mxfp4 M = 128 / 256 19.5 /
// 35.2 -> 18.9 / 33.6 us with chunk pairs, int4-g128 M = 128 (token halves)
// 25.7 -> 24.6).
template <bool FRESH, int NP>
__device__ __forceinline__ void q8_steps(float (&d)[NP], const uint32_t (&A)[4][4], const unsigned char *xb) {
    using namespace sm90;
    const uint64_t b = desc_sw128(xb);
    wgmma_rs_e4m3<FRESH ? 0 : 1>(d, A[0], b);
    wgmma_rs_e4m3<1>(d, A[1], b + 2);
    wgmma_rs_e4m3<1>(d, A[2], b + 4);
    wgmma_rs_e4m3<1>(d, A[3], b + 6);
}

// One chunk as one group (FRESH: into a part accumulator).
template <bool FRESH = true, int NP>
__device__ __forceinline__ void q8_mma(float (&d)[NP], const uint32_t (&A)[4][4], const unsigned char *xb) {
    sm90::wgmma_fence(); // A and d were written since the last wgmmas
    q8_steps<FRESH>(d, A, xb);
    sm90::wgmma_commit();
}

// Two chunks as one group of 8 wgmmas, accumulating into d.
template <bool FRESH, int NP>
__device__ __forceinline__ void q8_mma2(float (&d)[NP], const uint32_t (&A)[4][4], const unsigned char *xa,
                                        const uint32_t (&B)[4][4], const unsigned char *xb) {
    sm90::wgmma_fence();
    q8_steps<FRESH>(d, A, xa);
    q8_steps<false>(d, B, xb);
    sm90::wgmma_commit();
}

// d += F x B over the 64 K of an int4 correction block at sb (B: -S / 2 hi
// at K 0..31, lo at 32..63; the factors F0, F1 for chunks 0..15, 16..31
// serve both).
template <int NP>
__device__ __forceinline__ void q8_correct(float (&d)[NP], const uint32_t (&F0)[4], const uint32_t (&F1)[4],
                                           const unsigned char *sb) {
    const uint64_t b = sm90::desc_sw128(sb);
    sm90::wgmma_rs<false>(d, F0, b, 1);
    sm90::wgmma_rs<false>(d, F1, b + 2, 1);
    sm90::wgmma_rs<false>(d, F0, b + 4, 1);
    sm90::wgmma_rs<false>(d, F1, b + 6, 1);
}

// acc += part x the factor of its row (accumulator i: row g + 8 ((i / 2) % 2)).
template <int NP>
__device__ __forceinline__ void q8_drain(float (&acc)[NP], float (&part)[NP], float fg, float fh) {
    sm90::fence_regs(part);
#pragma unroll
    for (int i = 0; i < NP; i++) acc[i] = fmaf(part[i], (i & 2) ? fh : fg, acc[i]);
}


// The consumer warpgroups.  SPLIT: the TN tokens as two halves with their
// own part accumulators and wgmma groups, so that one half drains (FFMAs)
// while the other's wgmmas run; else one group per chunk, drained after it
// completes.  ROW (mxfp4 with one factor per row, pack.c): no part
// accumulator and no drain: the wgmmas accumulate over all K like
// fp8_gemm.cu, the factor applied once at the end; ROW = 1 one chunk a
// group, two groups in flight, ROW = 2 chunk pairs (below).  A lane's A
// fragments are decoded one group ahead either way (two register sets a
// group).
template <int TN, bool MX, int LOOP>
__device__ __forceinline__ void q8_consume(const Q8Params &p, unsigned char *ring, uint64_t *full, uint64_t *empty,
                                           const uint2 *tabs, int tt, int cb) {
    using namespace sm90;
    using L = q8_layout<TN>;
    constexpr bool SPLIT = LOOP == kHalves;
    constexpr int ND = TN / 2, NH = SPLIT ? ND / 2 : ND, XH = TN / 2 * 128; // XH: the second half's rows
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tl = warp; // warpgroup wg: tiles 4 wg .. 4 wg + 3
    const int nc = p.chunks;
    // The epilogue's row scales (the quantizer's), loaded while the first
    // stage lands (which waits for the quantizer anyway), not after the
    // last chunk.  Warp w writes tokens w, w + 8, ...; lane r < R holds the
    // scale of token w + 8 r.
    constexpr int R = TN / (kQ8Consumers * 4);
    // int4's magnitude table, read from shared memory once: as a constant,
    // ptxas re-made its first word in a register before every byte permute
    // (16 instructions a chunk a warp; H200 ncu, 06:25 UTC).
    const uint2 half = tabs[0]; // (mxfp4: unused)
    grid_dep_wait();
    const int m0 = tt * TN;
    const float rs = lane < R && m0 + tl + 8 * lane < p.io.m ? p.row_scale[m0 + tl + 8 * lane] * p.io.global : 0.0f;
    // Chunk (or correction block) c's stage landed.
    const auto wait_full = [&](int c) { mbar_wait(&full[c % kQ8Ring], (uint32_t)(c / kQ8Ring) & 1u); };
    if (TOPS_CU_Q8_DIAG == 1) { // the feed alone
        for (int c = 0; c < nc; c++) {
            wait_full(c);
            mbar_arrive(&empty[c % kQ8Ring]);
        }
        return;
    }
    float acc0[NH], acc1[NH], part0[NH], part1[NH]; // acc1, part1: the second half (SPLIT)
#pragma unroll
    for (int i = 0; i < NH; i++) acc0[i] = acc1[i] = part0[i] = part1[i] = 0.0f;
    uint32_t A0[4][4], A1[4][4];
    float f0g, f0h, f1g, f1h;
    const auto stage = [&](int c) { return ring + (c % kQ8Ring) * L::STAGE; };
    const auto fetch = [&](int c, uint32_t (&A)[4][4], float &fg, float &fh) {
        wait_full(c);
        q8_fetch<MX>(stage(c) + L::XBYTES, tl, lane, tabs, half, A, fg, fh);
    };
    // Chunks c and c + 1 landed, then both decoded side by side (the chunk
    // pairs below).
    const auto fetch2 = [&](int c, uint32_t (&Aa)[4][4], float &fag, float &fah, uint32_t (&Ab)[4][4], float &fbg,
                            float &fbh) {
        wait_full(c);
        wait_full(c + 1);
        q8_fetch<MX>(stage(c) + L::XBYTES, tl, lane, tabs, half, Aa, fag, fah);
        q8_fetch<MX>(stage(c + 1) + L::XBYTES, tl, lane, tabs, half, Ab, fbg, fbh);
    };
    const auto release = [&](int c, uint32_t (&A)[4][4]) {
#pragma unroll
        for (int s = 0; s < 4; s++) fence_regs(A[s]); // A stays live until its wgmmas are done
        mbar_arrive(&empty[c % kQ8Ring]);
    };
    if constexpr (LOOP == kRowPairs) {
        // Chunk pairs: a pair's two decodes side by side, then one group of
        // 8 wgmmas; the next pair decodes while it runs.  One chunk's decode
        // is a chain of dependent shared loads and byte permutes that the
        // warp alone cannot hide (H200 ncu, mxfp4 M = 128 one chunk a group:
        // the consumer warps never waited on the tensor cores, 23 % of their
        // loop samples on shared-load results, tensor pipe 49 % of active
        // cycles); two independent chains give the scheduler twice the work.
        uint32_t A2[4][4], A3[4][4];
        // Pair (c, c + 1) into (Aa, Ab) and issued; then the pair before it
        // (in Pa, Pb) retired.
        const auto pair = [&](int c, uint32_t (&Aa)[4][4], uint32_t (&Ab)[4][4], uint32_t (&Pa)[4][4],
                              uint32_t (&Pb)[4][4]) {
            fetch2(c, Aa, f0g, f0h, Ab, f0g, f0h); // one factor per row: every chunk's the same
            q8_mma2<false>(acc0, Aa, stage(c), Ab, stage(c + 1));
            wgmma_wait<1>();
            release(c - 2, Pa);
            release(c - 1, Pb);
        };
        // A last odd chunk c into A after the pair in (Pa, Pb).
        const auto last = [&](int c, uint32_t (&A)[4][4], uint32_t (&Pa)[4][4], uint32_t (&Pb)[4][4]) {
            fetch(c, A, f0g, f0h);
            q8_mma<false>(acc0, A, stage(c));
            wgmma_wait<1>();
            release(c - 2, Pa);
            release(c - 1, Pb);
            wgmma_wait<0>();
            release(c, A);
        };
        const auto finish = [&](int c, uint32_t (&Pa)[4][4], uint32_t (&Pb)[4][4]) {
            wgmma_wait<0>();
            release(c - 2, Pa);
            release(c - 1, Pb);
        };
        if (nc == 1) {
            fetch(0, A0, f0g, f0h);
            q8_mma<true>(acc0, A0, stage(0));
            wgmma_wait<0>();
            release(0, A0);
        } else {
            fetch2(0, A0, f0g, f0h, A1, f0g, f0h);
            q8_mma2<true>(acc0, A0, stage(0), A1, stage(1));
            int c = 2;
            for (; c + 3 < nc; c += 4) {
                pair(c, A2, A3, A0, A1);
                pair(c + 2, A0, A1, A2, A3);
            }
            // In flight: chunks c - 2, c - 1 in (A0, A1); nc - c in 0..3 left.
            if (c + 1 < nc) {
                pair(c, A2, A3, A0, A1);
                if (c + 2 < nc) last(c + 2, A0, A2, A3);
                else finish(c + 2, A2, A3);
            } else if (c < nc) {
                last(c, A2, A0, A1);
            } else {
                finish(c, A0, A1);
            }
        }
        fence_regs(acc0);
#pragma unroll
        for (int i = 0; i < NH; i++) acc0[i] *= (i & 2) ? f0h : f0g; // every chunk's factor
    } else if constexpr (LOOP == kRow) {
        // Chunk c's group is issued, then c + 1 decoded and issued, then c
        // retired: two groups on the tensor cores while a chunk decodes.
        const auto next = [&](int c, uint32_t (&A)[4][4], uint32_t (&Ap)[4][4]) {
            fetch(c, A, f0g, f0h);
            q8_mma<false>(acc0, A, stage(c));
            wgmma_wait<1>();
            release(c - 1, Ap);
        };
        fetch(0, A0, f0g, f0h);
        q8_mma<true>(acc0, A0, stage(0));
        int c = 1;
        for (; c + 1 < nc; c += 2) {
            next(c, A1, A0);
            next(c + 1, A0, A1);
        }
        if (c < nc) {
            next(c, A1, A0);
            wgmma_wait<0>();
            release(c, A1);
        } else {
            wgmma_wait<0>();
            release(c - 1, A0);
        }
        fence_regs(acc0);
#pragma unroll
        for (int i = 0; i < NH; i++) acc0[i] *= (i & 2) ? f0h : f0g; // every chunk's factor
    } else if constexpr (LOOP == kPairs) {
        // Chunk pairs, each chunk its own group into its own part accumulator
        // (c into part0, c + 1 into part1): the next pair decodes while both
        // run, then each part drains as its group retires and takes the next
        // chunk (a pair's decodes side by side: see kRowPairs).  TN = 64 only
        // (three accumulators of TN / 2 registers).
        static_assert(TN == 64, "three accumulator sets fit at TN = 64");
        uint32_t A2[4][4], A3[4][4];
        float f2g, f2h, f3g, f3h;
        // In flight: c - 2 (part0, Pa), c - 1 (part1, Pb).  Retires c - 2
        // and issues chunk c (decoded into A) into part0, then retires c - 1.
        const auto retire = [&](int c, uint32_t (&A)[4][4], uint32_t (&Pa)[4][4], float pag, float pah,
                                uint32_t (&Pb)[4][4], float pbg, float pbh) {
            wgmma_wait<1>();
            q8_drain(acc0, part0, pag, pah);
            release(c - 2, Pa);
            q8_mma(part0, A, stage(c));
            wgmma_wait<1>();
            q8_drain(acc0, part1, pbg, pbh);
            release(c - 1, Pb);
        };
        // Pair (c, c + 1) decoded into (Na, Nb) and issued as each part frees up.
        const auto step = [&](int c, uint32_t (&Na)[4][4], float &nag, float &nah, uint32_t (&Nb)[4][4], float &nbg,
                              float &nbh, uint32_t (&Pa)[4][4], float pag, float pah, uint32_t (&Pb)[4][4], float pbg,
                              float pbh) {
            fetch2(c, Na, nag, nah, Nb, nbg, nbh);
            retire(c, Na, Pa, pag, pah, Pb, pbg, pbh);
            q8_mma(part1, Nb, stage(c + 1));
        };
        // A last odd chunk c after the pair c - 2, c - 1.
        const auto tail = [&](int c, uint32_t (&A)[4][4], float &fg, float &fh, uint32_t (&Pa)[4][4], float pag,
                              float pah, uint32_t (&Pb)[4][4], float pbg, float pbh) {
            fetch(c, A, fg, fh);
            retire(c, A, Pa, pag, pah, Pb, pbg, pbh);
            wgmma_wait<0>();
            q8_drain(acc0, part0, fg, fh);
            release(c, A);
        };
        const auto finish = [&](int c, uint32_t (&Pa)[4][4], float pag, float pah, uint32_t (&Pb)[4][4], float pbg,
                                float pbh) {
            wgmma_wait<1>();
            q8_drain(acc0, part0, pag, pah);
            release(c - 2, Pa);
            wgmma_wait<0>();
            q8_drain(acc0, part1, pbg, pbh);
            release(c - 1, Pb);
        };
        if (nc == 1) {
            fetch(0, A0, f0g, f0h);
            q8_mma(part0, A0, stage(0));
            wgmma_wait<0>();
            q8_drain(acc0, part0, f0g, f0h);
            release(0, A0);
        } else {
            fetch2(0, A0, f0g, f0h, A1, f1g, f1h);
            q8_mma(part0, A0, stage(0));
            q8_mma(part1, A1, stage(1));
            int c = 2;
            for (; c + 3 < nc; c += 4) {
                step(c, A2, f2g, f2h, A3, f3g, f3h, A0, f0g, f0h, A1, f1g, f1h);
                step(c + 2, A0, f0g, f0h, A1, f1g, f1h, A2, f2g, f2h, A3, f3g, f3h);
            }
            // In flight: c - 2, c - 1 in (A0, A1); nc - c in 0..3 left.
            if (c + 1 < nc) {
                step(c, A2, f2g, f2h, A3, f3g, f3h, A0, f0g, f0h, A1, f1g, f1h);
                if (c + 2 < nc) tail(c + 2, A0, f0g, f0h, A2, f2g, f2h, A3, f3g, f3h);
                else finish(c + 2, A2, f2g, f2h, A3, f3g, f3h);
            } else if (c < nc) {
                tail(c, A2, f2g, f2h, A0, f0g, f0h, A1, f1g, f1h);
            } else {
                finish(c, A0, f0g, f0h, A1, f1g, f1h);
            }
        }
    } else if constexpr (SPLIT) {
        // Chunk c (fragments A): its first half was issued before; issue
        // the second, decode chunk c + 1 into An, drain the first half, issue
        // chunk c + 1's first half, drain the second half, release c.  The
        // last chunk is peeled, so that every wait retires a known group
        // (else ptxas serializes the wgmmas: C7514).
        const auto step = [&](int c, uint32_t (&A)[4][4], float fg, float fh, uint32_t (&An)[4][4], float &fng,
                              float &fnh) {
            q8_mma(part1, A, stage(c) + XH);
            // Chunk c + 1's words loaded, then the first half of c drained
            // while those loads land, then decoded (H200, 06:49 UTC, same
            // call, two processes each: mxfp4 with per-chunk factors at M =
            // 128 22.72 -> 21.17 us, its decode a chain of dependent shared
            // loads; int4-g128 at M = 96 / 128 / 256 within 0.1 us).
            wait_full(c + 1);
            const Q8Raw w = q8_load<MX>(stage(c + 1) + L::XBYTES, tl, lane);
            fng = w.fg;
            fnh = w.fh;
            wgmma_wait<1>(); // the first half of c
            q8_drain(acc0, part0, fg, fh);
            q8_decode<MX>(w, tabs, half, An);
            q8_mma(part0, An, stage(c + 1));
            wgmma_wait<1>(); // the second half of c
            q8_drain(acc1, part1, fg, fh);
            release(c, A);
        };
        const auto last = [&](int c, uint32_t (&A)[4][4], float fg, float fh) {
            q8_mma(part1, A, stage(c) + XH);
            wgmma_wait<1>();
            q8_drain(acc0, part0, fg, fh);
            wgmma_wait<0>();
            q8_drain(acc1, part1, fg, fh);
            release(c, A);
        };
        fetch(0, A0, f0g, f0h);
        q8_mma(part0, A0, stage(0));
        int c = 0;
        for (; c + 2 < nc; c += 2) {
            step(c, A0, f0g, f0h, A1, f1g, f1h);
            step(c + 1, A1, f1g, f1h, A0, f0g, f0h);
        }
        if (c + 1 < nc) {
            step(c, A0, f0g, f0h, A1, f1g, f1h);
            last(c + 1, A1, f1g, f1h);
        } else {
            last(c, A0, f0g, f0h);
        }
    } else {
        const auto retire = [&](int c, uint32_t (&A)[4][4], float fg, float fh) {
            wgmma_wait<0>();
            q8_drain(acc0, part0, fg, fh);
            release(c, A);
        };
        fetch(0, A0, f0g, f0h);
        for (int c = 0;; c += 2) {
            q8_mma(part0, A0, stage(c));
            if (c + 1 < nc) fetch(c + 1, A1, f1g, f1h);
            retire(c, A0, f0g, f0h);
            if (c + 1 >= nc) break;
            q8_mma(part0, A1, stage(c + 1));
            if (c + 2 < nc) fetch(c + 2, A0, f0g, f0h);
            retire(c + 1, A1, f1g, f1h);
            if (c + 2 >= nc) break;
        }
    }

    if constexpr (!MX) {
        // int4 was read as v + 1/2: acc += sum over chunks c of factor_c x
        // (-S_c / 2) for every token (S_c: its e4m3 activations summed over
        // chunk c), on the tensor cores: per block of 32 chunks one wgmma
        // f16 of K = 64, A = the factors (f16, exact) from the factor plane,
        // B = -S / 2 as f16 hi (K 0..31) + lo (32..63) from the quantizer,
        // both in the ring's slots after the last chunk.  Its error is about
        // 2^-22 of the correction, which is itself about the size of acc.
        for (int b = 0; b < p.sblocks; b++) {
            const int c = nc + b;
            wait_full(c);
            const unsigned char *sb = stage(c);
            const uint4 u0 = *reinterpret_cast<const uint4 *>(sb + L::XBYTES + (tl * 64 + lane) * 16),
                        u1 = *reinterpret_cast<const uint4 *>(sb + L::XBYTES + (tl * 64 + 32 + lane) * 16);
            const uint32_t F0[4] = {u0.x, u0.y, u0.z, u0.w}, F1[4] = {u1.x, u1.y, u1.z, u1.w};
            wgmma_fence();
            q8_correct(acc0, F0, F1, sb);
            if constexpr (SPLIT) q8_correct(acc1, F0, F1, sb + XH);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(acc0);
            if constexpr (SPLIT) fence_regs(acc1);
            mbar_arrive(&empty[c % kQ8Ring]);
        }
    }

    // The tile leaves through shared memory (H200, ncu at M = 128: stored
    // element by element from the accumulators, each row scale loaded after
    // the previous store, the epilogue took ~45 % of the consumer warps'
    // samples).  Both consumer warpgroups meet (the ring is idle once both
    // are done), stage the tile as f32 [TN tokens][128 channels] and meet
    // again; then each warp writes whole token rows, 4 channels per lane
    // (one vector access), times the token's row scale.  Accumulator i of
    // lane l in warp w: channel 16 w + l / 4 + 8 ((i / 2) % 2), token
    // 8 (i / 4) + 2 (l % 4) + i % 2 of its half.
    constexpr int P = TOPS__CU_Q8_CH + 4; // pitch in floats: a staging store's 32 lanes hit 32 banks
    static_assert(TN * P * 4 <= kQ8Ring * L::STAGE, "the staged tile fits the ring");
    float *tile = reinterpret_cast<float *>(ring);
    const int gid = lane >> 2, tig = lane & 3;
    consumers_sync();
    const auto stage_acc = [&](const float (&acc)[NH], int t0) {
#pragma unroll
        for (int i = 0; i < NH; i++)
            tile[(t0 + 8 * (i >> 2) + 2 * tig + (i & 1)) * P + tl * 16 + gid + 8 * ((i >> 1) & 1)] = acc[i];
    };
    stage_acc(acc0, 0);
    if constexpr (SPLIT) stage_acc(acc1, TN / 2);
    consumers_sync();
    const int n0 = cb * TOPS__CU_Q8_CH + 4 * lane;
    if (p.out_vec && !p.io.accumulate && (cb + 1) * TOPS__CU_Q8_CH <= p.io.n) {
        // Whole rows, plain stores (the common case): every row read first.
        float4 v[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float s = __shfl_sync(0xFFFFFFFFu, rs, r);
            v[r] = *reinterpret_cast<const float4 *>(tile + (tl + 8 * r) * P + 4 * lane);
            v[r].x *= s, v[r].y *= s, v[r].z *= s, v[r].w *= s;
        }
        store_rows4_plain<R>(p.io, m0 + tl, 8, n0, v);
        return;
    }
#pragma unroll 4
    for (int r = 0; r < R; r++) {
        const int t = tl + 8 * r;
        const float s = __shfl_sync(0xFFFFFFFFu, rs, r);
        if (m0 + t >= p.io.m) break; // rows grow with r
        float4 v = *reinterpret_cast<const float4 *>(tile + t * P + 4 * lane);
        v.x *= s, v.y *= s, v.z *= s, v.w *= s;
        store_out4(p.io, m0 + t, n0, v, p.out_vec);
    }
}
#endif

template <int TN, bool MX, int LOOP>
__global__ void __launch_bounds__(kQ8Threads, 1) wgmma_q8_kernel(const __grid_constant__ CUtensorMap xmap,
                                                                 const Q8Params p) {
#ifdef TOPS_CU_WGMMA
    using namespace sm90;
    using L = q8_layout<TN>;
    extern __shared__ unsigned char smem_raw[];
    __shared__ uint2 tabs[15];
    const uint32_t base = smem_addr(smem_raw); // a shared address: see wgmma_w.cu's cta_begin
    unsigned char *ring =
        static_cast<unsigned char *>(__cvta_shared_to_generic(base + ((1024u - (base & 1023u)) & 1023u)));
    uint64_t *full = reinterpret_cast<uint64_t *>(ring + kQ8Ring * L::STAGE), *empty = full + kQ8Ring;
    const int tt = blockIdx.x % p.passes, cb = blockIdx.x / p.passes;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kQ8Ring; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], kQ8Consumers * 128);
        }
        mbar_init_fence();
    }
    if constexpr (!MX) {
        if (threadIdx.x == 0) tabs[0] = make_uint2(TOPS__CU_Q8_HALF_T0, TOPS__CU_Q8_HALF_T1);
    } else { // table d, entry i: e4m3(e2m1 magnitude i x 2^(d - 8)), exact
        if (threadIdx.x < 120) {
            const int i = threadIdx.x & 7, e = i >> 1; // e2m1 (e, m): m / 2, or (1 + m / 2) 2^(e - 1)
            const float mag = e ? (1.0f + 0.5f * (float)(i & 1)) * (float)(1 << (e - 1)) : 0.5f * (float)(i & 1);
            const float v = ldexpf(mag, (int)(threadIdx.x >> 3) - 8);
            reinterpret_cast<unsigned char *>(tabs)[threadIdx.x] =
                (unsigned char)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
        }
    }
    __syncthreads();
    if (threadIdx.x >= kQ8Consumers * 128) { // producer: one thread, few registers
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (threadIdx.x == kQ8Consumers * 128) {
            // The first stages' weights do not depend on the quantizer: they
            // stream in while it runs (launched as its programmatic
            // dependent); its codes only past grid_dep_wait.
            const int first = min(p.chunks, kQ8Ring);
            for (int i = 0; i < first; i++) {
                mbar_expect_tx(&full[i], (uint32_t)(L::XBYTES + p.rec));
                bulk_copy(ring + i * L::STAGE + L::XBYTES, p.w + ((size_t)cb * p.chunks + i) * p.rec,
                          (uint32_t)p.rec, &full[i]);
            }
            grid_dep_wait();
            // The first ring pass's activation tiles: all at once, or `look`
            // ahead of the first stage not landed (below).
            for (int i = 0; i < first; i++) {
                if (p.look > 0 && i >= p.look) mbar_wait(&full[i - p.look], 0);
                tma_load_2d(ring + i * L::STAGE, &xmap, &full[i], i * TOPS__CU_Q8_CHUNK_K, tt * TN);
            }
            constexpr bool kX = TOPS_CU_Q8_DIAG != 2 && TOPS_CU_Q8_DIAG != 4;
            constexpr bool kW = TOPS_CU_Q8_DIAG != 3 && TOPS_CU_Q8_DIAG != 4;
            for (int i = first; i < p.chunks; i++) {
                const int s = i % kQ8Ring;
                mbar_wait(&empty[s], ((i / kQ8Ring) + 1) & 1);
                unsigned char *stg = ring + s * L::STAGE;
                mbar_expect_tx(&full[s], (kX ? (uint32_t)L::XBYTES : 0u) + (kW ? (uint32_t)p.rec : 0u));
                if (kX) tma_load_2d(stg, &xmap, &full[s], i * TOPS__CU_Q8_CHUNK_K, tt * TN);
                if (kW)
                    bulk_copy(stg + L::XBYTES, p.w + ((size_t)cb * p.chunks + i) * p.rec, (uint32_t)p.rec, &full[s]);
            }
            // int4: the correction's blocks, ring items after the last chunk.
            if constexpr (!MX && TOPS_CU_Q8_DIAG != 1)
                for (int b = 0; b < p.sblocks; b++) {
                    const int i = p.chunks + b, s = i % kQ8Ring;
                    mbar_wait(&empty[s], ((i / kQ8Ring) + 1) & 1);
                    unsigned char *stg = ring + s * L::STAGE;
                    mbar_expect_tx(&full[s], (uint32_t)(L::XBYTES + TOPS__CU_Q8_FBYTES));
                    bulk_copy(stg, p.sums + ((size_t)tt * p.sblocks + b) * L::XBYTES, (uint32_t)L::XBYTES, &full[s]);
                    bulk_copy(stg + L::XBYTES, p.fplane + ((size_t)cb * p.sblocks + b) * TOPS__CU_Q8_FBYTES,
                              (uint32_t)TOPS__CU_Q8_FBYTES, &full[s]);
                }
        }
    } else { // consumers (ptxas applies setmaxnreg to whole if / else branches)
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        q8_consume<TN, MX, LOOP>(p, ring, full, empty, tabs, tt, cb);
    }
#else
    (void)xmap, (void)p;
#endif
}

typedef void (*q8_fn)(const CUtensorMap, const Q8Params);

// The kernel for a Q8Loop (kPairs only at TN = 64; kRow, kRowPairs mxfp4 only).
template <int TN>
q8_fn pick_q8_tn(bool mx, int loop) {
    if (loop == kPairs) {
        if constexpr (TN == 64) return mx ? wgmma_q8_kernel<TN, true, kPairs> : wgmma_q8_kernel<TN, false, kPairs>;
        loop = kHalves;
    }
    if (!mx) return loop == kHalves ? wgmma_q8_kernel<TN, false, kHalves> : wgmma_q8_kernel<TN, false, kChunk>;
    return loop == kRowPairs ? wgmma_q8_kernel<TN, true, kRowPairs>
           : loop == kRow    ? wgmma_q8_kernel<TN, true, kRow>
           : loop == kHalves ? wgmma_q8_kernel<TN, true, kHalves>
                             : wgmma_q8_kernel<TN, true, kChunk>;
}
q8_fn pick_q8(int tn, bool mx, int loop) { return tn == 128 ? pick_q8_tn<128>(mx, loop) : pick_q8_tn<64>(mx, loop); }

} // namespace
} // namespace tops_cu

using namespace tops_cu;

extern "C" int tops__cu_q8_launch(const tops__cu_matmul_args *a, const void *q8, const char **what) {
    cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
    if (!device_is_sm90a() || !q8 || !sm90::tensor_map_encoder() || a->m < 1 || a->k < 1 ||
        (a->code != TOPS__CU_CODE_U4 && a->code != TOPS__CU_CODE_E2M1))
        return (int)cudaErrorNotSupported;
    // Tokens per CTA: 64 up to M = 64 (no idle half tile), else 128;
    // debug key q8_tn (64 or 128) for A/B runs.
    const long long tn_env = tops__cu_tune(TOPS__CU_T_Q8_TN);
    const int tn = tn_env == 64 || tn_env == 128 ? (int)tn_env : a->m > 64 ? 128 : 64;
    const bool mx = a->code == TOPS__CU_CODE_E2M1;
    Q8Params p;
    memset(&p, 0, sizeof p);
    p.io.out = a->out;
    p.io.ldo = a->ldo;
    p.io.out_dtype = (int)a->out_dtype;
    p.io.accumulate = a->accumulate;
    p.io.m = (int)a->m;
    p.io.n = (int)a->n;
    p.io.global = a->global_scale;
    p.out_vec = out_vec4(a->out, a->ldo, (int)a->out_dtype);
    p.w = static_cast<const unsigned char *>(q8);
    p.chunks = (int)((a->k + TOPS__CU_Q8_CHUNK_K - 1) / TOPS__CU_Q8_CHUNK_K);
    p.rec = tops__cu_q8_rec_bytes(a->code);
    p.passes = (int)((a->m + tn - 1) / tn);
    p.sblocks = mx ? 0 : (int)tops__cu_q8_sblocks(a->k);
    p.fplane = p.w + tops__cu_q8_fplane_offset(a->code, a->n, a->k);
    const long long ctas = (a->n + TOPS__CU_Q8_CH - 1) / TOPS__CU_Q8_CH * (long long)p.passes;
    if (ctas > 0x7FFFFFFFLL) {
        *what = "the problem is too large for one launch";
        return (int)cudaErrorInvalidConfiguration;
    }
    // The first ring pass's activation tiles: 2 ahead of the first stage not
    // landed when the grid takes more than one wave (its later CTAs start
    // while the others stream, and ask for a whole ring at once otherwise),
    // else all at once (H200, 2026-11-30 02:18 UTC, same call, 3 processes
    // each: mxfp4 / int4-g128 at M = 256 36.1 -> 35.55 / 48.25 -> 47.73 us;
    // at M = 128, one wave, 19.63 -> 19.69 / 25.70 -> 25.75).
    // q8_look (0: all at once) overrides.
    const int sms = tops__cuda_sm_count(-1);
    p.look = (int)tops__cu_tune_or(TOPS__CU_T_Q8_LOOK, ctas > sms ? 2 : 0);
    // The consumer loop for per-chunk factors: token halves drained while
    // the other half's wgmmas run at TN = 128 (H200, 2026-11-29 22:13-22:17
    // UTC, same calls, us at M = 128 / 48: int4-g128 34.7 / 25.9 split, 35.5
    // / 24.2 not; mxfp4 30.9 / 21.4 against 33.4 / 22.2), chunk pairs with a
    // part accumulator each at 64, whose third accumulator set does not fit
    // at 128 (2026-11-30 05:21 UTC, same call, int4-g128 at M = 17 / 32 / 64:
    // 18.7 / 18.8 / 18.8 us against 20.5 / 20.8 / 20.7 one group a chunk).
    // q8_split = 0 / 1 and q8_pairs = 0 force the others.
    // mxfp4 whose rows each fit 15 binades (pack.c: one factor per row)
    // accumulates without drains (q8_row=0: the per-chunk loops),
    // in chunk pairs from M = 32 (05:03 UTC, same call, three processes each,
    // mxfp4 us at M = 17 / 32 / 64 / 128 / 256: one chunk a group 15.65 /
    // 16.0 / 15.9 / 19.55 / 35.2, pairs 16.03 / 15.77 / 15.46 / 18.92 / 33.6);
    // q8_row = 1 / 2 forces either.
    const long long row_env = tops__cu_tune(TOPS__CU_T_Q8_ROW);
    const bool row = mx && a->q8_row_factor && row_env != 0,
               row_pairs = row && (row_env == 2 || (row_env != 1 && a->m >= 32));
    const bool split = !row && tops__cu_tune_or(TOPS__CU_T_Q8_SPLIT, tn == 128) != 0,
               pairs = !row && !split && tn == 64 && tops__cu_tune(TOPS__CU_T_Q8_PAIRS) != 0;
    const int loop = row_pairs ? kRowPairs : row ? kRow : split ? kHalves : pairs ? kPairs : kChunk;
    const q8_fn fn = pick_q8(tn, mx, loop);
    const size_t smem = tn == 128 ? q8_layout<128>::SMEM : q8_layout<64>::SMEM;
    cudaError_t err = cudaFuncSetAttribute(reinterpret_cast<const void *>(fn),
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess) {
        *what = "raising the q8 kernel's shared-memory limit";
        return (int)err;
    }
    // The e4m3 activations [m, k_pad], row scales and (int4) chunk sums, stream-ordered.
    const size_t qbytes = ((size_t)a->m * (size_t)a->k_pad + 255) & ~(size_t)255,
                 sumoff = (qbytes + (size_t)a->m * sizeof(float) + 255) & ~(size_t)255,
                 sumbytes = (size_t)p.passes * (size_t)p.sblocks * (size_t)tn * 128;
    unsigned char *ws = nullptr;
    err = cudaMallocAsync(reinterpret_cast<void **>(&ws), sumoff + sumbytes, stream);
    if (err == cudaErrorNotSupported) { // no memory pools: the other kernels run
        (void)cudaGetLastError();
        return (int)err;
    }
    if (err != cudaSuccess) {
        *what = "cudaMallocAsync of the q8 activation workspace";
        return (int)err;
    }
    p.row_scale = reinterpret_cast<const float *>(ws + qbytes);
    p.sums = ws + sumoff;
    // 4 rows a block from M = 65, so that the grid leaves most SMs to this
    // kernel's CTAs, which start there and stream their first weights while
    // it runs (H200, 2026-11-30 01:15 UTC, same call: mxfp4 20.75 -> 20.2 us
    // at M = 128, 38.2 -> 37.3 at 256; int4-g128 27.0 -> 26.6; at M = 32 / 64
    // within +-0.15 us either way, one row a block kept).  int4's quantizer,
    // which also sums the chunks (up to 64 registers), 2 rows a block (06:13
    // UTC, same call, two processes each, int4-g128 us at M = 96 / 128 / 192
    // / 256: 4 rows 22.33-22.35 / 22.54-22.59 / 41.59-41.75 / 41.72-41.90,
    // 2 rows 22.00-22.07 / 22.40-22.45 / 41.42-41.50 / 41.82-41.89).
    err = quant_act_e4m3(a, ws, reinterpret_cast<float *>(ws + qbytes), a->m > 64 ? (mx ? 4 : 2) : 1, nullptr, 0,
                         ActSums{mx ? nullptr : ws + sumoff, tn, p.sblocks, p.passes * tn});
    if (err != cudaSuccess) *what = "the activation quantization launch";
    CUtensorMap map;
    const cuuint64_t dims[2] = {(cuuint64_t)a->k_pad, (cuuint64_t)a->m}, strides[1] = {(cuuint64_t)a->k_pad};
    const cuuint32_t box[2] = {(cuuint32_t)TOPS__CU_Q8_CHUNK_K, (cuuint32_t)tn};
    if (err == cudaSuccess && !sm90::encode_sw128(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, ws, dims, strides, box,
                                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B)) {
        err = cudaErrorInvalidValue;
        *what = "cuTensorMapEncodeTiled for the q8 activations";
    }
    if (err == cudaSuccess) {
        static const char *const names[2][5] = {
            {"wgmma_q8 e4m3 m64n64k32, 4-bit weights to e4m3 + TMA",
             "wgmma_q8 e4m3 m64n64k32, 4-bit weights to e4m3 + TMA, token halves",
             "wgmma_q8 e4m3 m64n64k32, 4-bit weights to e4m3 + TMA, one factor per row",
             "wgmma_q8 e4m3 m64n64k32, 4-bit weights to e4m3 + TMA, one factor per row, chunk pairs",
             "wgmma_q8 e4m3 m64n64k32, 4-bit weights to e4m3 + TMA, chunk pairs"},
            {"wgmma_q8 e4m3 m64n128k32, 4-bit weights to e4m3 + TMA",
             "wgmma_q8 e4m3 m64n128k32, 4-bit weights to e4m3 + TMA, token halves",
             "wgmma_q8 e4m3 m64n128k32, 4-bit weights to e4m3 + TMA, one factor per row",
             "wgmma_q8 e4m3 m64n128k32, 4-bit weights to e4m3 + TMA, one factor per row, chunk pairs",
             "wgmma_q8 e4m3 m64n128k32, 4-bit weights to e4m3 + TMA, chunk pairs"}};
        set_last_kernel(names[tn == 128][loop]);
        // A programmatic dependent of the quantizer (debug key pdl=0: plain):
        // its prologue overlaps the quantizer's blocks.
        err = launch_kernel(fn, dim3((unsigned)ctas), dim3(kQ8Threads), smem, stream,
                            tops__cu_tune(TOPS__CU_T_PDL) != 0, 1, map, p);
        if (err != cudaSuccess) *what = "the q8 kernel launch";
    }
    cudaError_t e2 = cudaFreeAsync(ws, stream);
    if (err == cudaSuccess && e2 != cudaSuccess) {
        err = e2;
        *what = "cudaFreeAsync of the q8 activation workspace";
    }
    return (int)err;
}
