// Decode attention (a few query rows against a long KV cache), any GPU with
// mma.sync (sm_80 and later): flash decoding with the KV cache split across
// CTAs and a fixed-order merge.
//
// A CTA owns one (batch, kv head), one split of the keys and 16 query rows of
// that kv head's group (row r = query head (r / Sq) of the group, query r %
// Sq): every query head that reads the kv head shares the CTA, so the cache is
// read once for the group.  Its 4 warps take 16-key subtiles in turn (NT
// subtiles a step: 1 for 16-bit KV, 2 for 8-bit, 4 for 4-bit, so a step
// loads 8 KB of KV a warp at D = 128 whatever the format).  Keys and values
// are loaded straight from global memory into registers, decoded there (code x
// scale in f32, rounded to q's 16-bit type) and fed to mma.sync m16n8k16:
//  - S = Q K^T: K is the B operand; thread t of a quad owns head-dim range
//    [t D/4, (t+1) D/4) of a key, so its loads are contiguous.  The sum runs
//    over D in that permuted order; Q's fragments (in shared memory, loaded
//    once) use the same order.
//  - O += P V: P comes from S's accumulators in registers (FlashAttention-2's
//    layout); V is the B operand, thread gid owning head-dim range [gid D/8,
//    (gid+1) D/8) of four keys, so output column n of an 8-column tile dn is
//    d = n D/8 + dn.
// Online softmax in f32 (exp2 with the scale folded in), P rounded to 16 bits
// for the mma.  At the end the 4 warps' (m, l, O) meet in shared memory in
// warp order; with one split the CTA writes the output, otherwise its
// partial (m, l, O) goes to a workspace and merge_kernel combines the splits
// in split order.  Same bits every run.
#include "cuda/attention_decode.h"
#include "cuda/kernels.cuh"
#include "cuda/sm90.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

// kt_kernel's TMA stages exist in the sm_90 passes only.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KT_TMA 1
#else
#define KT_TMA 0
#endif

namespace {

constexpr int kThreads = 128; // 4 warps
constexpr int kRows = 16;     // query rows a CTA

struct dparams {
    const void *q;
    void *out;
    long long qsb, qsh, qss, osb, osh, oss; // elements
    const unsigned char *k, *v;
    long long ksb, ksh, kss, vsb, vsh, vss; // bytes
    const void *ksc, *vsc;
    long long kc[4], vc[4];
    int kst, vst, kmode, vmode, kgs, vgs; // scale type, mode, log2 of the group
    float ts_v;
    int hkv, sq, sk, rows; // rows = (H / Hkv) Sq
    int causal, window;
    float sl;              // logit factor (scale x k's tensor scale x log2 e), no softcap
    float cap_in, cap_out; // softcap: x = cap_out tanh(s cap_in); cap_out = 0: off
    int nsplit, kps;       // splits and keys a split
    float *ws;             // nsplit > 1: [bh][split][rows] (m, l), then [bh][split][rows][D] O
    const int *kv_lens;    // device copies: B key counts, or NULL
    const int *cu_q, *cu_k; // B + 1 offsets along the sequence dimension (packed batches), or NULL
    int group;             // query heads a kv head
    int ksbytes, vsbytes;  // ring_kernel, group scales: bytes a key's scale row
    int tm_kfirst, tm_sfirst; // kt_kernel's TMA boxes: K's rows (scales) before V's
    int tm_sx;                // kt_kernel's scale box: elements a key
    int tm_depth;             // kt_kernel's TMA stages in flight ahead of the one read (0: its rule)
    int kesz, vesz;        // bytes a scale entry
};

// Sequence b's query and key counts, its first query / key row, its rows.
struct seqlens {
    int sq, sk, rows;
    long long q0, k0;
};
__device__ __forceinline__ seqlens seq_of(const dparams &p, int b) {
    seqlens s;
    s.sq = p.sq, s.sk = p.sk, s.q0 = 0, s.k0 = 0;
    if (p.cu_q) {
        s.q0 = p.cu_q[b], s.sq = p.cu_q[b + 1] - p.cu_q[b];
        s.k0 = p.cu_k[b], s.sk = p.cu_k[b + 1] - p.cu_k[b];
    }
    if (p.kv_lens) s.sk = p.kv_lens[b];
    s.rows = p.group * s.sq;
    return s;
}

template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    if constexpr (std::is_same<T, __half>::value) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    } else {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    }
}
template <typename T> __device__ __forceinline__ float to_f32(T x) {
    if constexpr (std::is_same<T, __half>::value)
        return __half2float(x);
    else
        return __bfloat162float(x);
}
template <typename T> __device__ __forceinline__ T from_f32(float x) {
    if constexpr (std::is_same<T, __half>::value)
        return __float2half_rn(x);
    else
        return __float2bfloat16_rn(x);
}

template <typename T>
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    tops_cu::mma16816<std::is_same<T, __nv_bfloat16>::value>(c, a, b0, b1);
}

// BYTES (4, 8 or a multiple of 16) read once, around L1.
template <int BYTES> __device__ __forceinline__ void ldg(uint32_t *r, const unsigned char *p) {
    if constexpr (BYTES % 16 == 0) {
#pragma unroll
        for (int i = 0; i < BYTES / 16; i++)
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(r[4 * i]), "=r"(r[4 * i + 1]), "=r"(r[4 * i + 2]), "=r"(r[4 * i + 3])
                         : "l"(p + 16 * i));
    } else if constexpr (BYTES == 8) {
        asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "l"(p));
    } else {
        static_assert(BYTES == 4, "loads of 4, 8 or 16k bytes");
        asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r[0]) : "l"(p));
    }
}

__device__ __forceinline__ float load_scale(const void *p, long long i, int type) {
    switch (type) {
    case 0: return __half2float(reinterpret_cast<const __half *>(p)[i]);
    case 1: return __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(p)[i]);
    case 2: return reinterpret_cast<const float *>(p)[i];
    default: {
        const unsigned e = reinterpret_cast<const unsigned char *>(p)[i];
        return e == 255 ? __int_as_float(0x7fc00000) : e == 0 ? __int_as_float(0x00400000) : __int_as_float(e << 23);
    }
    }
}

// Element i of raw codes as f32 (exact).
template <int KIND> __device__ __forceinline__ float code(const uint32_t *r, int i) {
    if constexpr (KIND == TOPS__DEC_I8) {
        // 2^23 + (c ^ 0x80) as f32, minus 2^23 + 128
        const uint32_t x = __byte_perm(r[i / 4] ^ 0x80808080u, 0x4B000000u, (i % 4) | 0x7540);
        return __int_as_float(x) - 8388736.0f;
    } else if constexpr (KIND == TOPS__DEC_I4) {
        // even elements are the low nibbles of the bytes, odd ones the high
        const uint32_t x = r[i / 8] ^ 0x88888888u;
        const uint32_t y = (i & 1) ? (x >> 4) & 0x0F0F0F0Fu : x & 0x0F0F0F0Fu;
        return __int_as_float(__byte_perm(y, 0x4B000000u, ((i % 8) / 2) | 0x7540)) - 8388616.0f;
    } else {
        const uint32_t b = (r[i / 4] >> (8 * (i % 4))) & 0xFFu;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
        uint32_t h;
        const unsigned short bs = (unsigned short)b;
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(bs));
        return __half2float(__ushort_as_half((unsigned short)(h & 0xFFFF)));
#else
        // e4m3 bits moved into f16 are the value times 2^-8 (subnormals too); NaN codes
        if ((b & 0x7F) == 0x7F) return __int_as_float(0x7fc00000);
        const unsigned short hb = (unsigned short)(((b & 0x7Fu) << 7) | ((b & 0x80u) << 8));
        return __half2float(__ushort_as_half(hb)) * 256.0f;
#endif
    }
}

// Element i of int8 / int4 codes as 2^15 + (code + 128 or 8), exact in f32:
// with a scale s of at most 11 significant bits (f16), fma(x, s, -(2^15 +
// 128 or 8) s) is code x s exactly (the constant is exact, the result fits)
// in one instruction.
template <int KIND> __device__ __forceinline__ float magic15(const uint32_t *r, int i) {
    if constexpr (KIND == TOPS__DEC_I8) {
        return __int_as_float(__byte_perm(r[i / 4] ^ 0x80808080u, 0x47000000u, 0x7504 | ((i % 4) << 4)));
    } else {
        const uint32_t x = r[i / 8] ^ 0x88888888u;
        const uint32_t y = (i & 1) ? (x >> 4) & 0x0F0F0F0Fu : x & 0x0F0F0F0Fu;
        return __int_as_float(__byte_perm(y, 0x47000000u, 0x7504 | (((i % 8) / 2) << 4)));
    }
}
template <int KIND> constexpr float magic15_bias() { return KIND == TOPS__DEC_I8 ? -32896.0f : -32776.0f; }

// Two e4m3 codes (the low two bytes of b) as f32 (exact).
__device__ __forceinline__ float2 e4m3x2(uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint32_t h;
    const unsigned short bs = (unsigned short)(b & 0xFFFF);
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(bs));
    return __half22float2(*reinterpret_cast<__half2 *>(&h));
#else
    const uint32_t r[1] = {b};
    return make_float2(code<TOPS__DEC_E4M3>(r, 0), code<TOPS__DEC_E4M3>(r, 1));
#endif
}

// N elements of one key row (codes in r) to N / 2 words of 16-bit pairs,
// times the row's group scales (sc: one per 16 elements, or sc[0] for all).
template <typename T, int KIND, int N, bool F16S>
__device__ __forceinline__ void decode_row(uint32_t *w, const uint32_t *r, const float *sc) {
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
        const float s = sc[(2 * i) / 16];
        if constexpr (F16S) {
            const float c = s * magic15_bias<KIND>();
            w[i] = pack2<T>(fmaf(magic15<KIND>(r, 2 * i), s, c), fmaf(magic15<KIND>(r, 2 * i + 1), s, c));
        } else if constexpr (KIND == TOPS__DEC_E4M3) {
            const float2 f = e4m3x2(r[i / 2] >> (16 * (i % 2)));
            w[i] = pack2<T>(f.x * s, f.y * s);
        } else {
            w[i] = pack2<T>(code<KIND>(r, 2 * i) * s, code<KIND>(r, 2 * i + 1) * s);
        }
    }
}

// Output (row, d) of CTA (b, hk) from its merged sums L and O.
template <typename T>
__device__ __forceinline__ void put_out(const dparams &p, const seqlens &sl, int b, int hk, int row, int d, float L,
                                        float O) {
    float val = L == 0.0f ? 0.0f : O / L;
    val *= p.ts_v;
    if (p.vmode == TOPS__DEC_SC_CHANNEL)
        val *= load_scale(p.vsc, (long long)b * p.vc[0] + (long long)hk * p.vc[1] + (long long)d * p.vc[3], p.vst);
    const int hh = row / sl.sq, i = row % sl.sq;
    T *op = reinterpret_cast<T *>(p.out) + (long long)b * p.osb + (long long)(hk * p.group + hh) * p.osh +
            (sl.q0 + i) * p.oss + d;
    *op = from_f32<T>(val);
}

// The CTA's warps meet: each warp's (m, l) in mw / lw [4][rows] and O in ow
// [4][rows][D + 4], combined in warp order; then the output (one split) or
// the split's partial (m, l, O) in the workspace.  Same bits every run.
template <typename T, int D>
__device__ __forceinline__ void finish_rows(const dparams &p, const seqlens &sl, int rows, int r0, int b, int hk, int split,
                                            const float *mw, const float *lw, const float *ow) {
    constexpr int OP = D + 4;
    const int bh = blockIdx.x;
    for (int e = threadIdx.x; e < rows * D; e += kThreads) {
        const int row = e / D, d = e % D, grow = r0 + row;
        if (grow >= sl.rows) break;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < 4; w++) M = fmaxf(M, mw[w * rows + row]);
        float L = 0.0f, O = 0.0f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < 4; w++) {
                const float f = exp2f(mw[w * rows + row] - M);
                L += lw[w * rows + row] * f;
                O += ow[(w * rows + row) * OP + d] * f;
            }
        }
        if (p.nsplit == 1) {
            put_out<T>(p, sl, b, hk, grow, d, L, O);
        } else {
            const long long idx = ((long long)bh * p.nsplit + split) * p.rows + grow;
            if (d == 0) {
                p.ws[2 * idx] = M;
                p.ws[2 * idx + 1] = L;
            }
            const long long nml = 2LL * gridDim.x * p.nsplit * p.rows;
            p.ws[nml + idx * D + d] = O;
        }
    }
}

// Row `row` of CTA (b, hk)'s q: query head row / Sq of the group, query row % Sq.
template <typename T>
__device__ __forceinline__ const T *q_row(const dparams &p, const seqlens &sl, int b, int hk, int row) {
    const int hh = row / sl.sq, i = row % sl.sq;
    return reinterpret_cast<const T *>(p.q) + (long long)b * p.qsb + (long long)(hk * p.group + hh) * p.qsh +
           (sl.q0 + i) * p.qss;
}

// q (times the channel scales of k) at (row, d) of CTA (b, hk).
template <typename T>
__device__ __forceinline__ float qvalue(const dparams &p, const seqlens &sl, int b, int hk, int row, int d) {
    float x = to_f32(q_row<T>(p, sl, b, hk, row)[d]);
    if (p.kmode == TOPS__DEC_SC_CHANNEL)
        x *= load_scale(p.ksc, (long long)b * p.kc[0] + (long long)hk * p.kc[1] + (long long)d * p.kc[3], p.kst);
    return x;
}

// rowf[r] (r < rows <= 16) = 2^e such that q's row r0 + r over 2^e has its
// largest magnitude in [2^14, 2^15) (bf16 q; 1 for f16 q): q enters the f16
// mma exactly, the logits are multiplied back by 2^e.  All threads call it.
template <typename T, int D>
__device__ __forceinline__ void row_factors(const dparams &p, const seqlens &sl, int b, int hk, int r0, int rows, float *rowf) {
    const int tid = threadIdx.x, rr = tid >> 3, row = r0 + rr;
    float mx = 0.0f;
    if (!std::is_same<T, __half>::value && rr < rows && row < sl.rows)
        for (int d = tid & 7; d < D; d += 8) mx = fmaxf(mx, fabsf(qvalue<T>(p, sl, b, hk, row, d)));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
    int e = 0;
    if (mx > 0.0f && mx <= 3.0e38f) e = min(120, max(-120, (int)((__float_as_uint(mx) >> 23) & 0xFF) - 127 - 14));
    if ((tid & 7) == 0 && rr < rows) rowf[rr] = __int_as_float((127 + e) << 23);
}

// Subtile keys js .. js + 15 all below hi and visible to every query row
// (every position is in [sk - sq, sk)): the masks can be skipped (rows past
// the sequence are never written).
__device__ __forceinline__ bool whole_subtile(const dparams &p, const seqlens &sl, int js, int hi) {
    return js + 16 <= hi && (!p.causal || js + 15 <= sl.sk - sl.sq) &&
           (p.window <= 0 || (js > sl.sk - 1 - p.window && (p.causal || js + 15 < sl.sk - sl.sq + p.window)));
}
// Whether the query row at position pos (rv: a row of the sequence) sees key
// of the keys [lo, hi): causal (bottom-right) and the sliding window.
__device__ __forceinline__ bool key_visible(const dparams &p, int key, int lo, int hi, bool rv, int pos) {
    bool ok = key < hi && key >= lo && rv;
    if (p.causal) ok = ok && key <= pos;
    if (p.window > 0) ok = ok && key > pos - p.window && (p.causal || key < pos + p.window);
    return ok;
}
// The online softmax of a 16-key subtile with query rows as the m dimension
// (decode_kernel, ring_kernel): sc[nt][e] is the logit of row gid + 8 (e >> 1)
// and key js + 8 nt + 2 t + (e & 1); lf / cf the rows' logit factors without
// and with softcap (log2 units).  sc becomes P, m and l move, o is rescaled
// where the running max moved.
template <int VN>
__device__ __forceinline__ void softmax_rows(const dparams &p, int js, int lo, int hi, bool whole, const bool rv[2],
                                             const int pos[2], const float lf[2], const float cf[2], int t,
                                             float sc[2][4], float m[2], float l[2], float (&o)[VN][4]) {
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int key = js + 8 * nt + 2 * t + (e & 1), h = e >> 1;
            float x = p.cap_out != 0.0f ? p.cap_out * tanhf(sc[nt][e] * cf[h]) : sc[nt][e] * lf[h];
            if (!whole && !key_visible(p, key, lo, hi, rv[h], pos[h])) x = -INFINITY;
            sc[nt][e] = x;
            mx[h] = fmaxf(mx[h], x);
        }
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        const float mn = fmaxf(m[h], mx[h]);
        const float base = mn == -INFINITY ? 0.0f : mn;
        alpha[h] = exp2f(m[h] - base);
        m[h] = mn;
        mx[h] = base;
    }
    float ps[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            sc[nt][e] = exp2f(sc[nt][e] - mx[e >> 1]);
            ps[e >> 1] += sc[nt][e];
        }
    l[0] = l[0] * alpha[0] + ps[0];
    l[1] = l[1] * alpha[1] + ps[1];
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) { // the running max moved
#pragma unroll
        for (int i = 0; i < VN; i++) {
            o[i][0] *= alpha[0], o[i][1] *= alpha[0];
            o[i][2] *= alpha[1], o[i][3] *= alpha[1];
        }
    }
}

// D <= 128 fits 3 CTAs a SM (170 registers): 12 warps to hide the latency
// of the loads and of the dependent mma / softmax chains.
// KV = TOPS__DEC_* + 4: int8 / int4 codes whose k and v scales are f16 groups
// (the fma decoder; f16 loads of the scales).
template <typename T, int D, int KV>
__global__ void __launch_bounds__(kThreads, D <= 128 ? 3 : 2) decode_kernel(const dparams p) {
    constexpr int KIND = KV & 3;
    constexpr bool F16S = KV >= 4;
    constexpr int BITS = KIND == TOPS__DEC_KV16 ? 16 : KIND == TOPS__DEC_I4 ? 4 : 8;
    constexpr int NT = BITS == 4 ? 2 : 1;   // 16-key subtiles a step
    constexpr int KN = D / 4, VN = D / 8;   // elements of a key a thread holds for QK^T, for PV
    constexpr int KB = KN * BITS / 8, VB = VN * BITS / 8;
    constexpr int KS = D / 16;              // k-steps of QK^T
    constexpr int KC = KN >= 16 ? KN / 16 : 1, VC = VN >= 16 ? VN / 16 : 1; // scale slots
    constexpr int OP = D + 4;               // padded row of the merge buffer
    extern __shared__ uint4 smem[];
    uint4 *qs = smem;                                   // [KS][32] A fragments
    float *mw = reinterpret_cast<float *>(qs + KS * 32); // [4][16]
    float *lw = mw + 4 * kRows;                          // [4][16]
    float *ow = lw + 4 * kRows;                          // [4][16][OP]

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, t = lane & 3;
    const int bh = blockIdx.x, b = bh / p.hkv, hk = bh % p.hkv, split = blockIdx.y, r0 = blockIdx.z * kRows;
    const seqlens sl = seq_of(p, b); // rows past sl.rows (< p.rows, the longest) are padding

    // Q's A fragments: word reg of lane ln at k-step kk holds rows gid (+8 for
    // odd reg), head dims t KN + 4 kk + (reg / 2) 2 and the next.
    for (int e = tid; e < KS * 32 * 4; e += kThreads) {
        const int kk = e >> 7, ln = (e >> 2) & 31, reg = e & 3;
        const int row = r0 + (ln >> 2) + (reg & 1) * 8, d0 = (ln & 3) * KN + 4 * kk + (reg >> 1) * 2;
        uint32_t w = 0;
        if (row < sl.rows) {
            const int hh = row / sl.sq, i = row % sl.sq;
            const T *qp = reinterpret_cast<const T *>(p.q) + (long long)b * p.qsb +
                          (long long)(hk * p.group + hh) * p.qsh + (sl.q0 + i) * p.qss + d0;
            float x0 = to_f32(qp[0]), x1 = to_f32(qp[1]);
            if (p.kmode == TOPS__DEC_SC_CHANNEL) {
                const long long base = (long long)b * p.kc[0] + (long long)hk * p.kc[1];
                x0 *= load_scale(p.ksc, base + (long long)d0 * p.kc[3], p.kst);
                x1 *= load_scale(p.ksc, base + (long long)(d0 + 1) * p.kc[3], p.kst);
            }
            w = pack2<T>(x0, x1);
        }
        reinterpret_cast<uint32_t *>(qs)[e] = w;
    }

    // The query positions of this thread's two rows (gid, gid + 8).
    int pos[2];
    bool rv[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = r0 + gid + 8 * h;
        rv[h] = row < sl.rows;
        pos[h] = (rv[h] ? row % sl.sq : 0) + sl.sk - sl.sq;
    }
    const int kbeg = split * p.kps;
    const int kend = min(sl.sk, kbeg + p.kps);
    int lo = kbeg;
    if (p.window > 0) lo = max(lo, sl.sk - sl.sq - p.window + 1); // before every row's window
    const int hi = kend;

    const unsigned char *kbase = p.k + (long long)b * p.ksb + (long long)hk * p.ksh + sl.k0 * p.kss;
    const unsigned char *vbase = p.v + (long long)b * p.vsb + (long long)hk * p.vsh + sl.k0 * p.vss;
    const long long kscb = (long long)b * p.kc[0] + (long long)hk * p.kc[1] + sl.k0 * p.kc[2];
    const long long vscb = (long long)b * p.vc[0] + (long long)hk * p.vc[1] + sl.k0 * p.vc[2];
    const bool kone = p.kgs >= 31 || (1 << p.kgs) >= KN, vone = p.vgs >= 31 || (1 << p.vgs) >= VN;

    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float o[VN][4];
#pragma unroll
    for (int i = 0; i < VN; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    __syncthreads();

    for (int j0 = lo + warp * 16 * NT; j0 < hi; j0 += 4 * 16 * NT) {
        uint32_t kr[NT][2][KB / 4], vr[NT][4][VB / 4];
        float ksc[NT][2][KC], vsc[NT][4][VC];
#pragma unroll
        for (int s = 0; s < NT; s++) {
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                const int key = j0 + 16 * s + 8 * nt + gid;
                if (key < hi) {
                    ldg<KB>(kr[s][nt], kbase + (long long)key * p.kss + t * KB);
                } else {
#pragma unroll
                    for (int i = 0; i < KB / 4; i++) kr[s][nt][i] = 0;
                }
            }
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int key = j0 + 16 * s + (c >> 1) * 8 + 2 * t + (c & 1);
                if (key < hi) {
                    ldg<VB>(vr[s][c], vbase + (long long)key * p.vss + gid * VB);
                } else {
#pragma unroll
                    for (int i = 0; i < VB / 4; i++) vr[s][c][i] = 0;
                }
            }
        }
        if constexpr (KIND != TOPS__DEC_KV16) {
#pragma unroll
            for (int s = 0; s < NT; s++) {
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    const int key = j0 + 16 * s + 8 * nt + gid;
#pragma unroll
                    for (int c = 0; c < KC; c++) {
                        float x = 1.0f;
                        if (p.kmode == TOPS__DEC_SC_GROUP && key < hi && (c == 0 || !kone)) {
                            const long long at =
                                kscb + (long long)key * p.kc[2] + (long long)((t * KN + 16 * c) >> p.kgs) * p.kc[3];
                            x = F16S ? __half2float(reinterpret_cast<const __half *>(p.ksc)[at]) : load_scale(p.ksc, at, p.kst);
                        }
                        ksc[s][nt][c] = (c > 0 && kone) ? ksc[s][nt][0] : x;
                    }
                }
#pragma unroll
                for (int cc = 0; cc < 4; cc++) {
                    const int key = j0 + 16 * s + (cc >> 1) * 8 + 2 * t + (cc & 1);
#pragma unroll
                    for (int c = 0; c < VC; c++) {
                        float x = 1.0f;
                        if (p.vmode == TOPS__DEC_SC_GROUP && key < hi && (c == 0 || !vone)) {
                            const long long at =
                                vscb + (long long)key * p.vc[2] + (long long)((gid * VN + 16 * c) >> p.vgs) * p.vc[3];
                            x = F16S ? __half2float(reinterpret_cast<const __half *>(p.vsc)[at]) : load_scale(p.vsc, at, p.vst);
                        }
                        vsc[s][cc][c] = (c > 0 && vone) ? vsc[s][cc][0] : x;
                    }
                }
            }
        }

#pragma unroll
        for (int s = 0; s < NT; s++) {
            const int js = j0 + 16 * s;
            // S = Q K^T for 16 keys: sc[nt] covers keys js + 8 nt + 2 t + {0, 1}
            float sc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}}, sc2[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
            uint32_t kw[2][KN / 2];
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                if constexpr (KIND == TOPS__DEC_KV16) {
#pragma unroll
                    for (int i = 0; i < KN / 2; i++) kw[nt][i] = kr[s][nt][i];
                } else {
                    decode_row<T, KIND, KN, F16S>(kw[nt], kr[s][nt], ksc[s][nt]);
                }
            }
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                const uint4 a4 = qs[kk * 32 + lane];
                const uint32_t a[4] = {a4.x, a4.y, a4.z, a4.w};
                // two accumulators a key tile (even and odd k-steps): shorter mma chains
                mma<T>((kk & 1) ? sc2[0] : sc[0], a, kw[0][2 * kk], kw[0][2 * kk + 1]);
                mma<T>((kk & 1) ? sc2[1] : sc[1], a, kw[1][2 * kk], kw[1][2 * kk + 1]);
            }
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) sc[nt][e] += sc2[nt][e];
            // masks (a subtile every row sees whole skips them) and the online softmax
            const bool whole = whole_subtile(p, sl, js, hi);
            const float lf[2] = {p.sl, p.sl}, cf[2] = {p.cap_in, p.cap_in};
            softmax_rows<VN>(p, js, INT_MIN, hi, whole, rv, pos, lf, cf, t, sc, m, l, o);
            const uint32_t pa[4] = {pack2<T>(sc[0][0], sc[0][1]), pack2<T>(sc[0][2], sc[0][3]),
                                    pack2<T>(sc[1][0], sc[1][1]), pack2<T>(sc[1][2], sc[1][3])};
            // O += P V: B fragments pair keys (2t, 2t + 1) and (2t + 8, 2t + 9) at d = gid VN + dn
#pragma unroll
            for (int dn = 0; dn < VN; dn++) {
                uint32_t b0, b1;
                if constexpr (KIND == TOPS__DEC_KV16) {
                    const uint32_t sel = (dn & 1) ? 0x7632 : 0x5410;
                    b0 = __byte_perm(vr[s][0][dn / 2], vr[s][1][dn / 2], sel);
                    b1 = __byte_perm(vr[s][2][dn / 2], vr[s][3][dn / 2], sel);
                } else if constexpr (KIND == TOPS__DEC_E4M3) {
                    const int c = dn / 16;
                    const uint32_t sel = (dn % 4) | ((4 + dn % 4) << 4);
                    const float2 f0 = e4m3x2(__byte_perm(vr[s][0][dn / 4], vr[s][1][dn / 4], sel));
                    const float2 f1 = e4m3x2(__byte_perm(vr[s][2][dn / 4], vr[s][3][dn / 4], sel));
                    b0 = pack2<T>(f0.x * vsc[s][0][c], f0.y * vsc[s][1][c]);
                    b1 = pack2<T>(f1.x * vsc[s][2][c], f1.y * vsc[s][3][c]);
                } else if constexpr (F16S) {
                    const int c = dn / 16;
                    constexpr float bias = magic15_bias<KIND>();
                    b0 = pack2<T>(fmaf(magic15<KIND>(vr[s][0], dn), vsc[s][0][c], vsc[s][0][c] * bias),
                                  fmaf(magic15<KIND>(vr[s][1], dn), vsc[s][1][c], vsc[s][1][c] * bias));
                    b1 = pack2<T>(fmaf(magic15<KIND>(vr[s][2], dn), vsc[s][2][c], vsc[s][2][c] * bias),
                                  fmaf(magic15<KIND>(vr[s][3], dn), vsc[s][3][c], vsc[s][3][c] * bias));
                } else {
                    const int c = dn / 16;
                    b0 = pack2<T>(code<KIND>(vr[s][0], dn) * vsc[s][0][c], code<KIND>(vr[s][1], dn) * vsc[s][1][c]);
                    b1 = pack2<T>(code<KIND>(vr[s][2], dn) * vsc[s][2][c], code<KIND>(vr[s][3], dn) * vsc[s][3][c]);
                }
                mma<T>(o[dn], pa, b0, b1);
            }
        }
    }

    // The warps meet: (m, l, O) of each in shared memory, combined in warp order.
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        if (t == 0) {
            mw[warp * kRows + gid + 8 * h] = m[h];
            lw[warp * kRows + gid + 8 * h] = l[h];
        }
    }
#pragma unroll
    for (int dn = 0; dn < VN; dn++) {
        float *r = ow + (warp * kRows + gid) * OP;
        r[(2 * t) * VN + dn] = o[dn][0];
        r[(2 * t + 1) * VN + dn] = o[dn][1];
        r[8 * OP + (2 * t) * VN + dn] = o[dn][2];
        r[8 * OP + (2 * t + 1) * VN + dn] = o[dn][3];
    }
    __syncthreads();
    finish_rows<T, D>(p, sl, kRows, r0, b, hk, split, mw, lw, ow);
}

// Combines the splits' (m, l, O) in split order and writes the output.
template <typename T, int D> __global__ void __launch_bounds__(256) merge_kernel(const dparams p, int bhs) {
#if KT_TMA
    tops_cu::sm90::grid_dep_wait();   // a programmatic dependent of a TMA kt_kernel
    tops_cu::sm90::grid_dep_launch(); // the next kernel may launch (it waits for this grid)
#endif
    const int bh = blockIdx.x, b = bh / p.hkv, hk = bh % p.hkv;
    const long long nml = 2LL * bhs * p.nsplit * p.rows;
    const seqlens sl = seq_of(p, b);
    for (int e = blockIdx.y * 256 + threadIdx.x; e < sl.rows * D; e += gridDim.y * 256) {
        const int row = e / D, d = e % D;
        float M = -INFINITY;
        for (int s = 0; s < p.nsplit; s++)
            M = fmaxf(M, p.ws[2 * (((long long)bh * p.nsplit + s) * p.rows + row)]);
        float L = 0.0f, O = 0.0f;
        if (M != -INFINITY)
            for (int s = 0; s < p.nsplit; s++) {
                const long long idx = ((long long)bh * p.nsplit + s) * p.rows + row;
                const float f = exp2f(p.ws[2 * idx] - M);
                L += p.ws[2 * idx + 1] * f;
                O += p.ws[nml + idx * D + d] * f;
            }
        put_out<T>(p, sl, b, hk, row, d, L, O);
    }
}

// ---- The ring kernel: 8- and 4-bit KV caches (e4m3, int8-gG, int4-gG) -------
//
// Same CTA shape, split and merge as decode_kernel, but each warp streams its
// 16-key subtiles (keys lo + 16 (warp + 4 i)) through its own ring of NS
// shared-memory stages filled by cp.async (16-byte chunks, zero-filled past
// the split), so NS - 1 subtiles a warp are in flight while it computes.
// Fragments come from the ring by ldmatrix (rows swizzled: conflict-free):
//  - K, not transposed: thread (gid, t) gets bytes 4t..4t+3 of a 16-byte chunk
//    of key gid.  int4: 8 codes = two k-steps, pairs (e_j, e_j+4) from one
//    lop3 each; 8-bit: one k-step, pairs (e0, e1), (e2, e3).  Q's fragments
//    are stored in that d order.
//  - V, transposed: thread gets the same two (int4: four) columns of keys 2t
//    and 2t + 1, so one lop3 / prmt gives a B register (two keys, one d):
//    output column n of chunk c's tile i is d = c CD + n CD / 8 + i.
// The products are f16 whatever q's type: codes decoded exactly (magic-number
// lop3 / prmt with one hfma2, cvt for e4m3), times their f16 group scale by
// one hmul2 (the exact product rounded once to f16, as decode_kernel does for
// f16 q); bf16 q enters as f16 times a power of two a row (exact), taken back
// in the logits; P in f16.
namespace ring {

template <int D, int KIND> struct cfg {
    static constexpr int BITS = KIND == TOPS__DEC_I4 ? 4 : 8;
    static constexpr int RB = D * BITS / 8;          // bytes a key row
    static constexpr int CH = RB / 16;               // 16-byte chunks a row
    static constexpr int CD = 128 / BITS;            // codes a chunk
    static constexpr int KPC = CD / 16;              // k-steps of QK^T a chunk
    static constexpr int NPC = CD / 8;               // 8-column tiles of PV a chunk
    static constexpr int SCB = 16;                   // scale bytes a key (at most)
    static constexpr int STAGE = 32 * RB + 32 * SCB; // K rows, V rows, K scales, V scales
    static constexpr int NS0 = 16384 / STAGE;
    static constexpr int NS = NS0 < 2 ? 2 : NS0 > 8 ? 8 : NS0; // ring stages a warp
    static constexpr int QB = D * 32;                          // Q fragments
    static constexpr int RING = 4 * NS * STAGE, MERGE = 4 * kRows * (D + 4) * 4;
    static constexpr int SMEM = QB + 2 * 4 * kRows * 4 + kRows * 4 + (RING > MERGE ? RING : MERGE);
    // chunk slot of row r (0..15): 8 rows of a chunk hit 8 distinct 16-byte bank groups
    static __device__ __forceinline__ int swz(int r) { return CH >= 8 ? (r & 7) : (r / (8 / CH)) & (CH - 1); }
};

__device__ __forceinline__ void cp16(uint32_t dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
template <bool TRANS> __device__ __forceinline__ void ldsm4(uint32_t r[4], uint32_t addr) {
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr)
                     : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr)
                     : "memory");
}

__device__ __forceinline__ uint32_t hfma2u(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t r;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
__device__ __forceinline__ uint32_t hmul2u(uint32_t a, uint32_t b) {
    uint32_t r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

__device__ __forceinline__ uint32_t lop_xor(uint32_t x, uint32_t mask, uint32_t c) { // (x & mask) ^ c
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(r) : "r"(x), "r"(mask), "r"(c));
    return r;
}

// Four pairs of int4 codes of x (two's complement nibbles, element 2i the low
// nibble of byte i) as f16, exact: pair j = (nibble j of the low half, nibble
// j of the high half).  A pair is one lop3, the nibble n ^ 8 (= code + 8)
// under the exponent of 1024 ((x & m) ^ (m & 0x88888888 | magic)), and one
// hfma2.
__device__ __forceinline__ void dec_i4(uint32_t out[4], uint32_t x) {
    const uint32_t y = x >> 8;
    // 1024 + u (low nibbles), 1024 + 16 u (high nibbles), u = code + 8
    out[0] = hfma2u(lop_xor(x, 0x000F000Fu, 0x64086408u), 0x3C003C00u, 0xE408E408u); // - 1032
    out[1] = hfma2u(lop_xor(x, 0x00F000F0u, 0x64806480u), 0x2C002C00u, 0xD480D480u); // / 16 - 72
    out[2] = hfma2u(lop_xor(y, 0x000F000Fu, 0x64086408u), 0x3C003C00u, 0xE408E408u);
    out[3] = hfma2u(lop_xor(y, 0x00F000F0u, 0x64806480u), 0x2C002C00u, 0xD480D480u);
}

// Bytes ia, ib of x (8-bit codes) as a pair of f16, exact.
template <int KIND> __device__ __forceinline__ uint32_t dec8(uint32_t x, int ia, int ib) {
    if constexpr (KIND == TOPS__DEC_I8) {
        const uint32_t m = __byte_perm(x ^ 0x80808080u, 0x64646464u, ia | (4 << 4) | (ib << 8) | (4 << 12)); // 1024 + u
        return hfma2u(m, 0x3C003C00u, 0xE480E480u);                                                          // - 1152
    } else {
        const uint32_t b = __byte_perm(x, 0u, ia | (ib << 4));
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
        uint32_t h;
        const unsigned short bs = (unsigned short)(b & 0xFFFF);
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(bs));
        return h;
#else
        const uint32_t r1[1] = {b};
        return pack2<__half>(code<TOPS__DEC_E4M3>(r1, 0), code<TOPS__DEC_E4M3>(r1, 1));
#endif
    }
}

__device__ __forceinline__ uint32_t sraw16(const unsigned char *row, int g) {
    return reinterpret_cast<const unsigned short *>(row)[g];
}

// A warp's keys in a split: lo (16-key aligned: scale blocks) .. hi, its
// first subtile's key and its subtile count (warps take subtiles in turn);
// the (b, hk) rows of K and V, of their group-scale rows (NULL: none).
struct span {
    int lo, hi, first, nsub;
    const unsigned char *kbase, *vbase, *kscp, *vscp;
};
__device__ __forceinline__ span span_of(const dparams &p, const seqlens &sl, int b, int hk, int split, int warp) {
    span r;
    const int kbeg = split * p.kps;
    r.hi = min(sl.sk, kbeg + p.kps);
    r.lo = kbeg;
    if (p.window > 0) r.lo = max(r.lo, (sl.sk - sl.sq - p.window + 1) & ~15);
    r.first = r.lo + 16 * warp;
    r.nsub = r.first < r.hi ? (r.hi - r.first + 63) / 64 : 0;
    r.kbase = p.k + (long long)b * p.ksb + (long long)hk * p.ksh;
    r.vbase = p.v + (long long)b * p.vsb + (long long)hk * p.vsh;
    r.kscp = p.kmode == TOPS__DEC_SC_GROUP ? reinterpret_cast<const unsigned char *>(p.ksc) +
                                                 ((long long)b * p.kc[0] + (long long)hk * p.kc[1]) * p.kesz
                                           : nullptr;
    r.vscp = p.vmode == TOPS__DEC_SC_GROUP ? reinterpret_cast<const unsigned char *>(p.vsc) +
                                                 ((long long)b * p.vc[0] + (long long)hk * p.vc[1]) * p.vesz
                                           : nullptr;
    return r;
}

// A lane's share of the copies of its warp's subtiles (keys first + 64 i ..
// + 15, below hi) into a ring stage: K rows, V rows (swizzled chunks,
// zero-filled past hi), then the K and V group-scale rows.  Subtiles are
// issued in order, so the feed keeps the next subtile's sources and key count
// and advances them a subtile at a time; a whole subtile (16 keys below hi:
// all but a warp's last) copies without bounds checks.  (H200 SASS,
// kt_kernel int4 D = 128: the address math of `first + 64 i` a subtile was
// ~110 of the loop's 685 instructions.)
template <int D, int KIND> struct feed {
    using C = cfg<D, KIND>;
    static constexpr int NE = 16 * C::CH / 32; // copies of each of K and V a lane
    static constexpr int RS = 32 / C::CH;      // rows between them
    static_assert(C::CH >= 2 && 32 % C::CH == 0, "D = 64, 128, 256: a lane keeps one chunk column");
    const unsigned char *kb, *vb;             // the (b, hk) rows: the source of zero-byte copies
    const unsigned char *kp, *vp, *ksp, *vsp; // the next subtile's sources (ksp / vsp: NULL, no scale copy)
    long long kstep, vstep, krs, vrs;         // 64 keys; RS keys
    int lim, r0, ksb, vsb, lane;              // the next subtile's keys below hi; row; scale bytes a key
    uint32_t doff[NE];                        // the lane's destinations in a stage

    __device__ __forceinline__ feed(const dparams &p, const span &sp, int ln) {
        lane = ln;
        r0 = lane / C::CH;
        const int c = lane % C::CH;
        lim = sp.hi - sp.first;
        kb = sp.kbase, vb = sp.vbase;
        const long long key0 = sp.first + r0;
        kp = sp.kbase + key0 * p.kss + 16 * c;
        vp = sp.vbase + key0 * p.vss + 16 * c;
        kstep = 64 * p.kss, vstep = 64 * p.vss, krs = (long long)RS * p.kss, vrs = (long long)RS * p.vss;
        ksb = p.ksbytes, vsb = p.vsbytes;
        ksp = sp.kscp && lane < ksb ? sp.kscp + (long long)sp.first * ksb + 16 * lane : nullptr;
        vsp = sp.vscp && lane < vsb ? sp.vscp + (long long)sp.first * vsb + 16 * lane : nullptr;
#pragma unroll
        for (int q = 0; q < NE; q++) {
            const int r = r0 + q * RS;
            doff[q] = r * C::RB + 16 * (c ^ C::swz(r));
        }
    }

    // The next subtile into the stage at shared address s0.
    __device__ __forceinline__ void issue(uint32_t s0) {
        if (lim >= 16) {
#pragma unroll
            for (int q = 0; q < NE; q++) {
                cp16(s0 + doff[q], kp + q * krs, 16);
                cp16(s0 + doff[q] + 16 * C::RB, vp + q * vrs, 16);
            }
            if (ksp) cp16(s0 + 32 * C::RB + 16 * lane, ksp, 16);
            if (vsp) cp16(s0 + 32 * C::RB + 16 * C::SCB + 16 * lane, vsp, 16);
        } else { // rows at or past lim are past hi: zero-filled
#pragma unroll
            for (int q = 0; q < NE; q++) {
                const bool ok = r0 + q * RS < lim;
                cp16(s0 + doff[q], ok ? kp + q * krs : kb, ok ? 16 : 0);
                cp16(s0 + doff[q] + 16 * C::RB, ok ? vp + q * vrs : vb, ok ? 16 : 0);
            }
            // 16 keys x ksb scale bytes = ksb chunks: lane l copies chunk l (the bytes below hi)
            if (ksp) {
                const int n = min(16, max(0, lim * ksb - 16 * lane));
                cp16(s0 + 32 * C::RB + 16 * lane, n > 0 ? ksp : kb, n);
            }
            if (vsp) {
                const int n = min(16, max(0, lim * vsb - 16 * lane));
                cp16(s0 + 32 * C::RB + 16 * C::SCB + 16 * lane, n > 0 ? vsp : vb, n);
            }
        }
        kp += kstep, vp += vstep, lim -= 64;
        if (ksp) ksp += 64LL * ksb;
        if (vsp) vsp += 64LL * vsb;
    }
};
// In feed's place where no cp.async feed runs (kt_kernel's TMA stages).
struct no_feed {
    __device__ __forceinline__ no_feed(const dparams &, const span &, int) {}
    __device__ __forceinline__ void issue(uint32_t) const {}
};

} // namespace ring

template <typename T, int D, int KIND>
__global__ void __launch_bounds__(kThreads, D <= 128 ? 3 : 2) ring_kernel(const dparams p) {
    using C = ring::cfg<D, KIND>;
    using H = __half; // the mma type, whatever q's type
    constexpr int CH = C::CH, CD = C::CD, KPC = C::KPC, NPC = C::NPC, RB = C::RB, NS = C::NS;
    constexpr int KS = D / 16, VT = D / 8, OP = D + 4;
    extern __shared__ uint4 smem[];
    uint4 *qs = smem;
    float *mw = reinterpret_cast<float *>(reinterpret_cast<unsigned char *>(smem) + C::QB);
    float *lw = mw + 4 * kRows;
    float *rowf = lw + 4 * kRows; // [16] a row's power-of-two factor of q
    unsigned char *ringb = reinterpret_cast<unsigned char *>(rowf + kRows);
    float *ow = reinterpret_cast<float *>(ringb); // after the loop

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, t = lane & 3;
    const int bh = blockIdx.x, b = bh / p.hkv, hk = bh % p.hkv, split = blockIdx.y, r0 = blockIdx.z * kRows;
    const seqlens sl = seq_of(p, b);

    // q (times the channel scales of k) as f16 times a power of two 2^-e a
    // row (bf16 q: the row's largest magnitude into [2^14, 2^15), exact);
    // the logits are multiplied back by 2^e.
    auto qval = [&](int row, int d) { return qvalue<T>(p, sl, b, hk, row, d); };
    row_factors<T, D>(p, sl, b, hk, r0, kRows, rowf);
    __syncthreads();
    // Q's A fragments in the d order of the K decoders
    for (int e = tid; e < KS * 32 * 4; e += kThreads) {
        const int kk = e >> 7, ln = (e >> 2) & 31, reg = e & 3, tt = ln & 3, bs = reg >> 1;
        const int row = r0 + (ln >> 2) + (reg & 1) * 8;
        int d0, d1;
        if constexpr (C::BITS == 4) {
            d0 = 32 * (kk >> 1) + 8 * tt + 2 * (kk & 1) + bs, d1 = d0 + 4;
        } else {
            d0 = 16 * kk + 4 * tt + 2 * bs, d1 = d0 + 1;
        }
        uint32_t w = 0;
        if (row < sl.rows) {
            const float inv = 1.0f / rowf[row - r0]; // exact: a power of two
            w = pack2<H>(qval(row, d0) * inv, qval(row, d1) * inv);
        }
        reinterpret_cast<uint32_t *>(qs)[e] = w;
    }

    int pos[2];
    bool rv[2];
    float lf[2], cf[2]; // the rows' logit factors (with and without softcap)
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = r0 + gid + 8 * h;
        rv[h] = row < sl.rows;
        pos[h] = (rv[h] ? row % sl.sq : 0) + sl.sk - sl.sq;
        lf[h] = p.sl * rowf[gid + 8 * h], cf[h] = p.cap_in * rowf[gid + 8 * h];
    }
    const ring::span sp = ring::span_of(p, sl, b, hk, split, warp);
    const int lo = sp.lo, hi = sp.hi, first = sp.first, nsub = sp.nsub;
    const bool kg = sp.kscp != nullptr, vg = sp.vscp != nullptr;
    const int ksb = p.ksbytes, vsb = p.vsbytes; // scale bytes a key

    unsigned char *wring = ringb + warp * NS * C::STAGE;
    const uint32_t wring_s = (uint32_t)__cvta_generic_to_shared(wring);
    // subtile i of this warp into stage st
    ring::feed<D, KIND> fd(p, sp, lane);
    auto issue = [&](int st) { fd.issue(wring_s + st * C::STAGE); };

    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float o[VT][4];
#pragma unroll
    for (int i = 0; i < VT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

#pragma unroll
    for (int s = 0; s < NS - 1; s++) {
        if (s < nsub) issue(s);
        ring::commit();
    }
    __syncthreads(); // Q fragments

    int rd = 0, wr = NS - 1;
    for (int i = 0; i < nsub; i++) {
        if (i + NS - 1 < nsub) issue(wr);
        ring::commit();
        ring::wait<NS - 1>();
        __syncwarp();
        const int js = first + 64 * i;
        const unsigned char *stp = wring + rd * C::STAGE;
        const uint32_t ks_s = wring_s + rd * C::STAGE, vs_s = ks_s + 16 * RB;
        const unsigned char *ksc = stp + 32 * RB, *vsc = ksc + 16 * C::SCB;
        wr = wr + 1 == NS ? 0 : wr + 1;
        rd = rd + 1 == NS ? 0 : rd + 1;

        // K fragments: [key half][chunk]
        uint32_t kr[2][CH];
        {
            const int mi = lane >> 3, r = (mi & 1) * 8 + (lane & 7);
#pragma unroll
            for (int c = 0; c < CH; c += 2) {
                const int cc = c + (mi >> 1);
                const uint32_t off = r * RB + 16 * (cc ^ C::swz(r));
                uint32_t x[4];
                ring::ldsm4<false>(x, ks_s + off);
                kr[0][c] = x[0], kr[1][c] = x[1], kr[0][c + 1] = x[2], kr[1][c + 1] = x[3];
            }
        }

        // S = Q K^T (code x scale in f16: the exact product rounded once)
        float sc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}}, sc2[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
        for (int c = 0; c < CH; c++) {
            uint32_t kw[2][2 * KPC]; // [nt][b registers of the chunk's k-steps]
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                if constexpr (C::BITS == 4) {
                    ring::dec_i4(kw[nt], kr[nt][c]);
                } else {
                    kw[nt][0] = ring::dec8<KIND>(kr[nt][c], 0, 1);
                    kw[nt][1] = ring::dec8<KIND>(kr[nt][c], 2, 3);
                }
                if (kg) {
                    const uint32_t s = ring::sraw16(ksc + (nt * 8 + gid) * ksb, (c * CD) >> p.kgs);
                    const uint32_t s2 = s | (s << 16);
#pragma unroll
                    for (int w = 0; w < 2 * KPC; w++) kw[nt][w] = ring::hmul2u(kw[nt][w], s2);
                }
            }
#pragma unroll
            for (int h = 0; h < KPC; h++) {
                const int kk = c * KPC + h;
                const uint4 a4 = qs[kk * 32 + lane];
                const uint32_t a[4] = {a4.x, a4.y, a4.z, a4.w};
                // two accumulators a key tile (even and odd k-steps): shorter mma chains
                mma<H>((kk & 1) ? sc2[0] : sc[0], a, kw[0][2 * h], kw[0][2 * h + 1]);
                mma<H>((kk & 1) ? sc2[1] : sc[1], a, kw[1][2 * h], kw[1][2 * h + 1]);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) sc[nt][e] += sc2[nt][e];

        // masks and the online softmax (as decode_kernel)
        softmax_rows<VT>(p, js, lo, hi, whole_subtile(p, sl, js, hi), rv, pos, lf, cf, t, sc, m, l, o);

        // O += P V; V fragments: [key half][chunk]
        uint32_t vr[2][CH];
        {
            const int mi = lane >> 3, r = (mi & 1) * 8 + (lane & 7);
#pragma unroll
            for (int c = 0; c < CH; c += 2) {
                const int cc = c + (mi >> 1);
                uint32_t x[4];
                ring::ldsm4<true>(x, vs_s + r * RB + 16 * (cc ^ C::swz(r)));
                vr[0][c] = x[0], vr[1][c] = x[1], vr[0][c + 1] = x[2], vr[1][c + 1] = x[3];
            }
        }
        const uint32_t pa[4] = {pack2<H>(sc[0][0], sc[0][1]), pack2<H>(sc[0][2], sc[0][3]), pack2<H>(sc[1][0], sc[1][1]),
                                pack2<H>(sc[1][2], sc[1][3])};
#pragma unroll
        for (int c = 0; c < CH; c++) {
            uint32_t vw[2][NPC];
#pragma unroll
            for (int kh = 0; kh < 2; kh++) {
                if constexpr (C::BITS == 4) {
                    ring::dec_i4(vw[kh], vr[kh][c]);
                } else {
                    vw[kh][0] = ring::dec8<KIND>(vr[kh][c], 0, 2);
                    vw[kh][1] = ring::dec8<KIND>(vr[kh][c], 1, 3);
                }
                if (vg) {
                    const int g = (c * CD) >> p.vgs;
                    const uint32_t s2 = ring::sraw16(vsc + (kh * 8 + 2 * t) * vsb, g) |
                                        (ring::sraw16(vsc + (kh * 8 + 2 * t + 1) * vsb, g) << 16);
#pragma unroll
                    for (int w = 0; w < NPC; w++) vw[kh][w] = ring::hmul2u(vw[kh][w], s2);
                }
            }
#pragma unroll
            for (int i2 = 0; i2 < NPC; i2++) mma<H>(o[c * NPC + i2], pa, vw[0][i2], vw[1][i2]);
        }
        __syncwarp(); // the stage is read: the next issue may refill it
    }
    ring::wait<0>();

    // The warps meet (as decode_kernel); column n of tile (c, i) is d = c CD + n CD / 8 + i.
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        if (t == 0) {
            mw[warp * kRows + gid + 8 * h] = m[h];
            lw[warp * kRows + gid + 8 * h] = l[h];
        }
    }
    __syncthreads(); // every warp is out of its ring
#pragma unroll
    for (int vt = 0; vt < VT; vt++) {
        const int c = vt / NPC, i2 = vt % NPC;
        float *r = ow + (warp * kRows + gid) * OP;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int d = c * CD + (2 * t + (e & 1)) * (CD / 8) + i2;
            r[(e >> 1) * 8 * OP + d] = o[vt][e];
        }
    }
    __syncthreads();
    finish_rows<T, D>(p, sl, kRows, r0, b, hk, split, mw, lw, ow);
}

// ---- The keys-as-rows kernel: bf16 q with int8-gG / int4-gG / e4m3 KV ----------
//
// ring_kernel's stages (a cp.async ring a warp, the same layout and swizzle),
// with the mma operands swapped: the 16 keys of a subtile are the m dimension
// and NR tiles of 8 query rows the n dimension (GQA decode has 4..8 rows), so
// S^T = K Q^T and O^T += V^T P^T take D / 16 mmas an n-tile each (ring_kernel:
// D / 8 for 16 rows) and the softmax handles 4 values a thread an n-tile.
//  - K, the A operand: ldmatrix as in ring_kernel (thread (gid, t): bytes
//    4t..4t+3 of a chunk of keys gid and gid + 8), codes decoded exactly to
//    f16 (lop3 / prmt + hfma2, cvt for e4m3), no scale.  The k-steps of a
//    group of G channels sum into their own f32 tile, added to S^T times the
//    key's group scale in f32: the scale semantics of the format, exactly.
//    q is the B operand: f16 times a power of two a row (ring_kernel's trick).
//    int4 in groups of 32 (FOLD) skip the hfma2: the magic values 1032 +
//    code (low nibbles) and 1152 + 16 code (high ones, against q / 16) enter
//    the mma, each group's tile starting from minus q's offset.
//  - V, the A operand of V^T (ldmatrix.trans: a register is keys 2t, 2t + 1
//    at one d): int8 codes decoded exactly to bf16 (through f32), int4 as
//    the bf16 magic value 136 + code (lop3 on 0x4300), its 136 taken off by
//    a second mma of a constant -136 tile on the same P; e4m3 to f16.  The V
//    scales go into P: P x s_v[key, g] in f32, rounded once to bf16 (where
//    the 16-bit path rounds P alone), then moved by movmatrix.trans from
//    S^T's layout into the B operand; one B pair an n-tile a V group.  No
//    f16 range limit on K, V or their scales.
//  - The softmax rescales lazily: the running max moves only where a logit
//    passes it by more than 8 (P <= 2^8 otherwise).
namespace kt {

// TM: one ring for the CTA, filled by TMA tensor copies (sm_90; rows of at
// most 128 bytes): a stage holds 64 keys (a subtile for each warp) as K
// rows, V rows (their hardware swizzle, 32, 64 or 128 bytes, the row's
// length, is ring::cfg::swz), then K and V scale rows; stages rounded to the
// swizzle's 8-row atom, the ring aligned to it; a full and an empty
// mbarrier a stage.
template <int D, int KIND, int NR, bool TM = false> struct cfg {
    using R = ring::cfg<D, KIND>;
    static constexpr int ALIGN = TM ? 8 * R::RB : 16; // the swizzle atom
    static constexpr int STAGE = TM ? (128 * R::RB + 128 * R::SCB + ALIGN - 1) / ALIGN * ALIGN : R::STAGE; // bytes
    static constexpr int NS0 = (TM ? 52000 : 13000) / STAGE;
    static constexpr int NS = NS0 < 2 ? 2 : NS0 > 8 ? 8 : NS0; // ring stages (TM: the CTA's, else a warp's)
    static constexpr int ROWS = 8 * NR;                        // query rows a CTA
    static constexpr int QB = (D / 16) * NR * 32 * 8;          // q's B fragments
    static constexpr int QO = (D / 32) * ROWS * 4;             // folded int4 K: q's offsets [D / 32][ROWS]
    static constexpr int BARS = TM ? 2 * NS * 8 : 0;           // TM: full [NS], empty [NS]
    static constexpr int RING = (TM ? 1 : 4) * NS * STAGE, MERGE = 4 * ROWS * (D + 4) * 4;
    static constexpr int SMEM = QB + 9 * 4 * ROWS + QO + BARS + (TM ? ALIGN : 0) + (RING > MERGE ? RING : MERGE);
    static_assert(!TM || R::RB <= 128, "TMA boxes of at most 128-byte rows");
};
template <int D, int KIND> constexpr bool tma_ok() { return ring::cfg<D, KIND>::RB <= 128; }

__device__ __forceinline__ uint32_t movt(uint32_t x) { // 8x8 b16 transpose across the warp
    uint32_t r;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(x));
    return r;
}
// Bytes ia, ib of x (int8 codes) as a pair of bf16, exact (through f32).
__device__ __forceinline__ uint32_t dec_i8_bf16(uint32_t x, int ia, int ib) {
    const uint32_t y = x ^ 0x80808080u;
    const float a = __int_as_float(__byte_perm(y, 0x4B000000u, 0x7540 | ia)) - 8388736.0f;
    const float c = __int_as_float(__byte_perm(y, 0x4B000000u, 0x7540 | ib)) - 8388736.0f;
    return pack2<__nv_bfloat16>(a, c);
}
// 2^x, results below 2^-126 flushed to 0 (one MUFU; a P that small adds
// nothing next to the row's largest, 1).
__device__ __forceinline__ float ex2(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
// A key's NG f16 group scales (a row of 2 NG bytes, aligned to its size) as f32.
template <int NG> __device__ __forceinline__ void scale_row(const unsigned char *row, float out[NG]) {
    uint32_t w[NG / 2];
    if constexpr (NG == 8) {
        const uint4 x = *reinterpret_cast<const uint4 *>(row);
        w[0] = x.x, w[1] = x.y, w[2] = x.z, w[3] = x.w;
    } else if constexpr (NG == 4) {
        const uint2 x = *reinterpret_cast<const uint2 *>(row);
        w[0] = x.x, w[1] = x.y;
    } else {
        static_assert(NG == 2, "D = 64, 128 or 256 in groups of 32");
        w[0] = *reinterpret_cast<const uint32_t *>(row);
    }
#pragma unroll
    for (int i = 0; i < NG / 2; i++) {
        out[2 * i] = __half2float(__ushort_as_half((unsigned short)(w[i] & 0xFFFFu)));
        out[2 * i + 1] = __half2float(__ushort_as_half((unsigned short)(w[i] >> 16)));
    }
}
__device__ __forceinline__ float sf16(const unsigned char *row, int g) {
    return __half2float(__ushort_as_half(reinterpret_cast<const unsigned short *>(row)[g]));
}

} // namespace kt

// KG = 32: K and V in groups of 32 with f16 scales, a key's D / 32 scales
// adjacent (int4-g32, int8-g32): the group ends are known at compile time and
// a key's scales are read once a subtile.  KG = 0: any group (a power of two
// of at least a chunk), found at run time.
//
// TM (sm_90, launched as a programmatic dependent): the CTA's ring of
// 64-key stages (warp w's subtile: keys 16 w .. 16 w + 15 of each), each
// filled by two TMA boxes, the K and V rows (K and V as one 5-D tensor,
// their distance its third stride) and their scale rows (likewise),
// completing on the stage's full barrier (zeros past the cache); lane 0 of
// warp j % 4 issues stage j once the four warps have released its slot
// (the empty barrier), the first stages before q is read.  A subtile that
// ends past hi gets its V rows and V scales past hi zeroed once they land
// (those rows hold other keys or padding: P is 0 there, and 0 times a NaN
// code or scale would not be).  Four CTAs an SM (128 registers, no spills)
// for int4 KV with one row tile: int4-g32, B = 16, Sk = 8192 on an H200,
// 56.7 -> 54.8 us; e4m3 / int8 KV would spill at 128 and keep three.
template <int D, int KIND, int NR, int KG, bool TM>
__global__ void __launch_bounds__(kThreads, TM && D * NR <= 128 ? (KIND == TOPS__DEC_I4 && NR == 1 ? 4 : 3)
                                                 : D * NR <= 128 ? 4 : D * NR <= 256 ? 3 : 2)
    kt_kernel(const dparams p, const __grid_constant__ CUtensorMap dmap, const __grid_constant__ CUtensorMap smap) {
    using R = ring::cfg<D, KIND>;
    using C = kt::cfg<D, KIND, NR, TM>;
    using T = __nv_bfloat16;                                                        // q, out
    using PV = typename std::conditional<KIND == TOPS__DEC_E4M3, __half, T>::type; // V and P
    constexpr int CH = R::CH, CD = R::CD, KPC = R::KPC, RB = R::RB, NS = C::NS, ROWS = C::ROWS, STAGE = C::STAGE;
    constexpr int MT = D / 16, OP = D + 4, MPC = CD / 16; // V m-tiles: all, a chunk
    // FOLD: int4 K in groups of 32 (a chunk each) enter the mma as the magic
    // values themselves, 1032 + code (low nibbles) and 1152 + 16 code (high
    // ones, against q / 16), the group's sum starting from minus q's offset
    // (qoff) instead of each pair's fma taking the magic off.
    constexpr bool FOLD = KIND == TOPS__DEC_I4 && KG == 32;
    // QREG (TM, D NR <= 128: 3 or 4 CTAs a SM): q's B fragments
    // and FOLD's offsets held in registers across the loop, not re-read from
    // shared memory each subtile.
    constexpr bool QREG = TM && D * NR <= 128;
    extern __shared__ uint4 smem[];
    uint2 *qb = reinterpret_cast<uint2 *>(smem); // [D / 16][NR][32]
    float *mw = reinterpret_cast<float *>(reinterpret_cast<unsigned char *>(smem) + C::QB);
    float *lw = mw + 4 * ROWS;
    float *rowf = lw + 4 * ROWS; // [ROWS] a row's power-of-two factor of q
    float *qoff = rowf + ROWS;                                           // FOLD: [D / 32][ROWS]
    uint64_t *bars = reinterpret_cast<uint64_t *>(qoff + (D / 32) * ROWS); // TM: full [NS], empty [NS]
    unsigned char *ringb = reinterpret_cast<unsigned char *>(bars) + C::BARS;
    if constexpr (TM) ringb += (C::ALIGN - (uint32_t)__cvta_generic_to_shared(ringb) % C::ALIGN) % C::ALIGN;
    float *ow = reinterpret_cast<float *>(ringb); // after the loop

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, t = lane & 3;
    const int bh = blockIdx.x, b = bh / p.hkv, hk = bh % p.hkv, split = blockIdx.y, r0 = blockIdx.z * ROWS;
    uint64_t *full = bars, *empty = bars + NS;
    (void)full, (void)empty;
#if defined(__CUDA_ARCH__) && !KT_TMA
    if constexpr (TM) __trap(); // the host launches TM on sm_90 only
#endif
#if KT_TMA
    if constexpr (TM) {
        if (tid == 0) {
#pragma unroll
            for (int s = 0; s < NS; s++) tops_cu::sm90::mbar_init(&full[s], 1), tops_cu::sm90::mbar_init(&empty[s], 4);
            tops_cu::sm90::mbar_init_fence();
        }
        __syncthreads();
        tops_cu::sm90::grid_dep_wait();   // a programmatic dependent: q, the cache and the lengths are written
        tops_cu::sm90::grid_dep_launch(); // merge_kernel may launch (it waits for this grid)
    }
#endif
    const seqlens sl = seq_of(p, b);
    const ring::span sp = ring::span_of(p, sl, b, hk, split, warp);
    const int lo = sp.lo, hi = sp.hi, first = sp.first;
    // TM: every warp takes every stage of the CTA's keys (a subtile past hi computes nothing)
    const int nsub = TM ? (lo < hi ? (hi - lo + 63) / 64 : 0) : sp.nsub;
    const bool kg = sp.kscp != nullptr, vg = sp.vscp != nullptr;
    const int ksb = p.ksbytes, vsb = p.vsbytes;
    unsigned char *wring = ringb + (TM ? 0 : warp * NS * STAGE);
    // TM: stages in flight ahead of the one read (debug key attn_depth, at
    // most NS - 1).  By default about 18 KB a CTA, at least 2 stages: the
    // grid is one wave, so whatever the rings hold when the cache has been
    // read is decoded with the memory idle.  int4-g32 D = 128 (9 KB stages,
    // NS = 5), B = 16, Sk = 8192, H100: 65.8 us with 4 stages, 62.7 with 2,
    // 61.6-62.0 with 1; e4m3 / int8 (16-17 KB stages) the same with 1 or 2.
    constexpr int DEP = 18432 / STAGE < 2 ? 2 : 18432 / STAGE;
    const int dep = min(p.tm_depth > 0 ? p.tm_depth : DEP, NS - 1);
    (void)dep;
    const uint32_t wring_s = (uint32_t)__cvta_generic_to_shared(wring);
    // TM: stage j (keys lo + 64 j ..) into its slot (one lane)
    auto tissue = [&](int j) {
#if KT_TMA
        if constexpr (TM) {
            const int st = j % NS, key0 = lo + 64 * j;
            unsigned char *d = wring + st * STAGE;
            tops_cu::sm90::mbar_expect_tx(&full[st], 128 * RB + (kg ? 128 * ksb : 0));
            tops_cu::sm90::tma_load_5d(d, &dmap, &full[st], 0, key0, 0, hk, b);
            if (kg) tops_cu::sm90::tma_load_4d(d + 128 * RB, &smap, &full[st], key0 * p.tm_sx, 0, hk, b);
        }
#else
        (void)j;
#endif
    };
    if constexpr (TM) {
#if KT_TMA
        // q's lines asked for before the first stages: every CTA of the one
        // wave starts at once, and row_factors' loads would otherwise queue
        // behind the grid's first TMA stages.
        constexpr int LPR = D * 2 / 128 + 1; // 128-byte lines a row may touch
        if (tid < ROWS * LPR && r0 + tid / LPR < sl.rows)
            asm volatile("prefetch.global.L1 [%0];" ::"l"(q_row<T>(p, sl, b, hk, r0 + tid / LPR) + min(64 * (tid % LPR), D - 1)));
#endif
        if (lane == 0)
            for (int j = warp; j < dep && j < nsub; j += 4) tissue(j);
    }

    auto qval = [&](int row, int d) { return qvalue<T>(p, sl, b, hk, row, d); };
    row_factors<T, D>(p, sl, b, hk, r0, ROWS, rowf);
    __syncthreads();
    // q's B fragments in the d order of the K decoders: word bs of (k-step kk,
    // n-tile nr, lane): row 8 nr + gid, the pair of d that A's register 2 bs holds
    for (int e = tid; e < MT * NR * 64; e += kThreads) {
        const int bs = e & 1, ln = (e >> 1) & 31, knr = e >> 6, nr = knr % NR, kk = knr / NR, tt = ln & 3;
        const int rr = 8 * nr + (ln >> 2), row = r0 + rr;
        int d0, d1;
        if constexpr (R::BITS == 4) {
            d0 = 32 * (kk >> 1) + 8 * tt + 2 * (kk & 1) + bs, d1 = d0 + 4;
        } else {
            d0 = 16 * kk + 4 * tt + 2 * bs, d1 = d0 + 1;
        }
        uint32_t w = 0;
        if (row < sl.rows) {
            const float inv = (FOLD && bs ? 0.0625f : 1.0f) / rowf[rr]; // exact: a power of two
            w = pack2<__half>(qval(row, d0) * inv, qval(row, d1) * inv);
        }
        reinterpret_cast<uint32_t *>(qb)[e] = w;
    }
    if constexpr (FOLD) { // a group's offset a row, from its fragments: 1032 q (low nibbles), 1152 q / 16 (high ones)
        __syncthreads();
        for (int e = tid; e < (D / 32) * ROWS; e += kThreads) {
            const int g = e / ROWS, rr = e % ROWS, nr = rr / 8, ln0 = 4 * (rr % 8);
            float o = 0.0f;
#pragma unroll
            for (int w = 0; w < 16; w++) { // k-step 2 g + (w >> 3), lane ln0 + (w >> 1) % 4, register w % 2
                const int kk = 2 * g + (w >> 3), ln = ln0 + ((w >> 1) & 3);
                const uint32_t x = reinterpret_cast<const uint32_t *>(qb)[((kk * NR + nr) * 32 + ln) * 2 + (w & 1)];
                const float2 h = __half22float2(*reinterpret_cast<const __half2 *>(&x));
                o += (w & 1 ? 1152.0f : 1032.0f) * (h.x + h.y);
            }
            qoff[e] = -o;
        }
    }

    // this thread's rows: 8 nr + 2t + h
    int pos[NR][2];
    bool rv[NR][2];
    float lf[NR][2], cf[NR][2];
#pragma unroll
    for (int nr = 0; nr < NR; nr++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int rr = 8 * nr + 2 * t + h, row = r0 + rr;
            rv[nr][h] = row < sl.rows;
            pos[nr][h] = (rv[nr][h] ? row % sl.sq : 0) + sl.sk - sl.sq;
            lf[nr][h] = p.sl * rowf[rr], cf[nr][h] = p.cap_in * rowf[rr];
        }
    const int kgm = kg ? (1 << p.kgs) - 1 : D - 1, vgm = vg ? (1 << p.vgs) - 1 : D - 1; // group masks

    // the warp's cp.async feed (TM: none, the stages come by TMA)
    typename std::conditional<TM, ring::no_feed, ring::feed<D, KIND>>::type fd(p, sp, lane);
    auto issue = [&](int st) { fd.issue(wring_s + st * STAGE); };

    float m[NR][2], l[NR][2];
    float o[MT][NR][4];
#pragma unroll
    for (int nr = 0; nr < NR; nr++) m[nr][0] = m[nr][1] = -INFINITY, l[nr][0] = l[nr][1] = 0.0f;
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int nr = 0; nr < NR; nr++) o[i][nr][0] = o[i][nr][1] = o[i][nr][2] = o[i][nr][3] = 0.0f;

    if constexpr (!TM) {
#pragma unroll
        for (int s = 0; s < NS - 1; s++) {
            if (s < nsub) issue(s);
            ring::commit();
        }
    }
    __syncthreads(); // q's fragments

    // the warp's K and V rows and their scale rows within a stage (TM: the boxes' order)
    const int kro = TM ? (p.tm_kfirst ? 0 : 64 * RB) + 16 * warp * RB : 0;
    const int vro = TM ? (p.tm_kfirst ? 64 * RB : 0) + 16 * warp * RB : 16 * RB;
    const int kso = TM ? 128 * RB + (p.tm_sfirst ? 0 : 64 * ksb) + 16 * warp * ksb : 32 * RB;
    const int vso = TM ? 128 * RB + (p.tm_sfirst ? 64 * ksb : 0) + 16 * warp * ksb : 32 * RB + 16 * R::SCB;
    uint2 qreg[QREG ? CH * KPC : 1][NR];
    float2 qoreg[QREG && FOLD ? CH : 1][NR];
    if constexpr (QREG) {
#pragma unroll
        for (int kk = 0; kk < CH * KPC; kk++)
#pragma unroll
            for (int nr = 0; nr < NR; nr++) qreg[kk][nr] = qb[(kk * NR + nr) * 32 + lane];
        if constexpr (FOLD)
#pragma unroll
            for (int c = 0; c < CH; c++)
#pragma unroll
                for (int nr = 0; nr < NR; nr++)
                    qoreg[c][nr] = *reinterpret_cast<const float2 *>(qoff + c * ROWS + 8 * nr + 2 * t);
    }
    int rd = 0, wr = NS - 1;
    uint32_t ph = 0; // TM: the parity of stage rd's current fill
    // Subtile i (TM: the warp's share of stage i).  WHOLE: every key below
    // hi and seen by every row (no window), known before the loop: no bound,
    // zeroing or mask code.
    auto step = [&](const int i, auto whole_c) {
        constexpr bool WHOLE = decltype(whole_c)::value;
        const int js = TM ? lo + 64 * i + 16 * warp : first + 64 * i;
        unsigned char *stp = wring + rd * STAGE;
        if constexpr (TM) {
#if KT_TMA
            const int j = i + dep; // the stage to issue, into the slot stage j - NS held
            if (lane == 0 && j < nsub && (j & 3) == warp) {
                if (j >= NS) tops_cu::sm90::mbar_wait(&empty[j % NS], ((j / NS) - 1) & 1); // its slot released
                tissue(j);
            }
            tops_cu::sm90::mbar_wait(&full[rd], ph);
            if (!WHOLE && js + 16 > hi && js < hi) { // past hi: V rows and V scales zeroed
                const int nk = hi - js;
                for (int e = nk * (RB / 16) + lane; e < RB; e += 32)
                    *reinterpret_cast<uint4 *>(stp + vro + 16 * e) = make_uint4(0u, 0u, 0u, 0u);
                if (vg)
                    for (int e = nk * ksb + lane; e < 16 * ksb; e += 32) stp[vso + e] = 0;
                __syncwarp();
            }
#endif
        } else {
            if (i + NS - 1 < nsub) issue(wr);
            ring::commit();
            ring::wait<NS - 1>();
            __syncwarp();
        }
        const uint32_t ks_s = wring_s + rd * STAGE + kro, vs_s = wring_s + rd * STAGE + vro;
        const unsigned char *ksc = stp + kso, *vsc = stp + vso;
        const int cs = rd; // the slot read
        (void)cs;
        wr = wr + 1 == NS ? 0 : wr + 1;
        rd = rd + 1 == NS ? 0 : rd + 1;
        ph ^= rd == 0 ? 1u : 0u;
#if KT_TMA
        if (TM && !WHOLE && js >= hi) { // a subtile past hi: the slot released, nothing computed
            __syncwarp();
            if (lane == 0) tops_cu::sm90::mbar_arrive(&empty[cs]);
            return;
        }
#endif

        // K (keys 8 kh + gid) and V (keys 8 kh + 2t, + 1) fragments: [kh][chunk]
        uint32_t kr[2][CH], vr[2][CH];
        {
            const int mi = lane >> 3, r = (mi & 1) * 8 + (lane & 7);
#pragma unroll
            for (int c = 0; c < CH; c += 2) {
                const int cc = c + (mi >> 1);
                const uint32_t off = r * RB + 16 * (cc ^ R::swz(r));
                uint32_t x[4];
                ring::ldsm4<false>(x, ks_s + off);
                kr[0][c] = x[0], kr[1][c] = x[1], kr[0][c + 1] = x[2], kr[1][c + 1] = x[3];
                ring::ldsm4<true>(x, vs_s + off);
                vr[0][c] = x[0], vr[1][c] = x[1], vr[0][c + 1] = x[2], vr[1][c + 1] = x[3];
            }
        }

        // S^T = K Q^T: s[nr] = keys (gid, gid + 8) x rows (2t, 2t + 1), a group at a time
        float s[NR][4], part[2][NR][4]; // part: even and odd k-steps (shorter mma chains)
#pragma unroll
        for (int nr = 0; nr < NR; nr++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[nr][e] = 0.0f, part[0][nr][e] = 0.0f, part[1][nr][e] = 0.0f;
        // KG = 32: a key's scales read once; one sum a group (one or two chunks)
        constexpr int CPG = KG == 32 ? 32 / CD : 1;
        float ksf[2][KG == 32 ? D / 32 : 1];
        (void)ksf;
        if constexpr (KG == 32) {
            kt::scale_row<D / 32>(ksc + gid * (D / 16), ksf[0]);
            kt::scale_row<D / 32>(ksc + (gid + 8) * (D / 16), ksf[1]);
        }
#pragma unroll
        for (int c = 0; c < CH; c++) {
            uint32_t kw[2][2 * KPC];
            if constexpr (FOLD) { // the group's sums start at minus q's offsets
#pragma unroll
                for (int nr = 0; nr < NR; nr++) {
                    const float2 o2 =
                        QREG ? qoreg[QREG ? c : 0][nr] : *reinterpret_cast<const float2 *>(qoff + c * ROWS + 8 * nr + 2 * t);
                    part[0][nr][0] = o2.x, part[0][nr][1] = o2.y, part[0][nr][2] = o2.x, part[0][nr][3] = o2.y;
                }
            }
#pragma unroll
            for (int kh = 0; kh < 2; kh++) {
                if constexpr (FOLD) {
                    const uint32_t x = kr[kh][c], y = x >> 8;
                    kw[kh][0] = ring::lop_xor(x, 0x000F000Fu, 0x64086408u); // 1032 + code
                    kw[kh][1] = ring::lop_xor(x, 0x00F000F0u, 0x64806480u); // 1152 + 16 code
                    kw[kh][2] = ring::lop_xor(y, 0x000F000Fu, 0x64086408u);
                    kw[kh][3] = ring::lop_xor(y, 0x00F000F0u, 0x64806480u);
                } else if constexpr (R::BITS == 4) {
                    ring::dec_i4(kw[kh], kr[kh][c]);
                } else {
                    kw[kh][0] = ring::dec8<KIND>(kr[kh][c], 0, 1);
                    kw[kh][1] = ring::dec8<KIND>(kr[kh][c], 2, 3);
                }
            }
#pragma unroll
            for (int h = 0; h < KPC; h++) {
                const uint32_t a[4] = {kw[0][2 * h], kw[1][2 * h], kw[0][2 * h + 1], kw[1][2 * h + 1]};
#pragma unroll
                for (int nr = 0; nr < NR; nr++) {
                    const uint2 qf = QREG ? qreg[QREG ? c * KPC + h : 0][nr] : qb[((c * KPC + h) * NR + nr) * 32 + lane];
                    mma<__half>(part[KG == 32 ? 0 : (c * KPC + h) & 1][nr], a, qf.x, qf.y);
                }
            }
            // the group ends: S += part x its key's scale
            if (KG == 32 ? (c + 1) % CPG == 0 : c == CH - 1 || (((c + 1) * CD) & kgm) == 0) {
                float s0, s1;
                if constexpr (KG == 32) {
                    s0 = ksf[0][c / CPG], s1 = ksf[1][c / CPG];
                } else {
                    const int g = (c * CD) >> p.kgs;
                    s0 = kg ? kt::sf16(ksc + gid * ksb, g) : 1.0f;
                    s1 = kg ? kt::sf16(ksc + (gid + 8) * ksb, g) : 1.0f;
                }
#pragma unroll
                for (int nr = 0; nr < NR; nr++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float sum = KG == 32 ? part[0][nr][e] : part[0][nr][e] + part[1][nr][e];
                        s[nr][e] = fmaf(sum, e < 2 ? s0 : s1, s[nr][e]);
                        part[0][nr][e] = part[1][nr][e] = 0.0f;
                    }
                }
            }
        }

        // masks and the online softmax; a row's keys are spread over gid
        const bool whole = WHOLE || whole_subtile(p, sl, js, hi);
        const bool plain = whole && p.cap_out == 0.0f;
        // Lazy rescaling: the running max m moves (a reduction over the
        // row's lanes, O rescaled) only where a logit exceeds it by more than
        // 8 (log2 units); otherwise P = 2^(x - m) <= 256 against the old m.
        float mx[NR][2], alpha[NR][2], base[NR][2];
        bool up = false;
#pragma unroll
        for (int nr = 0; nr < NR; nr++) {
            mx[nr][0] = mx[nr][1] = -INFINITY;
            if (plain) { // every key visible, no softcap: one branch a subtile
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[nr][e] *= lf[nr][e & 1];
                    mx[nr][e & 1] = fmaxf(mx[nr][e & 1], s[nr][e]);
                }
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = js + gid + 8 * (e >> 1), h = e & 1;
                    float x = p.cap_out != 0.0f ? p.cap_out * tanhf(s[nr][e] * cf[nr][h]) : s[nr][e] * lf[nr][h];
                    if (!whole && !key_visible(p, key, lo, hi, rv[nr][h], pos[nr][h])) x = -INFINITY;
                    s[nr][e] = x;
                    mx[nr][h] = fmaxf(mx[nr][h], x);
                }
            }
            up = up || mx[nr][0] > m[nr][0] + 8.0f || mx[nr][1] > m[nr][1] + 8.0f;
        }
        const bool moved = __any_sync(0xffffffffu, up);
#pragma unroll
        for (int nr = 0; nr < NR; nr++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                if (moved) {
                    float x = mx[nr][h];
                    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
                    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
                    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 16));
                    const float mn = fmaxf(m[nr][h], x);
                    base[nr][h] = mn == -INFINITY ? 0.0f : mn;
                    alpha[nr][h] = kt::ex2(m[nr][h] - base[nr][h]);
                    m[nr][h] = mn;
                } else {
                    base[nr][h] = m[nr][h] == -INFINITY ? 0.0f : m[nr][h];
                    alpha[nr][h] = 1.0f;
                }
            }
#pragma unroll
            for (int e = 0; e < 4; e++) s[nr][e] = kt::ex2(s[nr][e] - base[nr][e & 1]);
            l[nr][0] = l[nr][0] * alpha[nr][0] + (s[nr][0] + s[nr][2]);
            l[nr][1] = l[nr][1] * alpha[nr][1] + (s[nr][1] + s[nr][3]);
        }
        if (moved) { // the running max moved (a warp-uniform branch)
#pragma unroll
            for (int i2 = 0; i2 < MT; i2++)
#pragma unroll
                for (int nr = 0; nr < NR; nr++) {
                    o[i2][nr][0] *= alpha[nr][0], o[i2][nr][1] *= alpha[nr][1];
                    o[i2][nr][2] *= alpha[nr][0], o[i2][nr][3] *= alpha[nr][1];
                }
        }

        // O^T += V^T P^T: P times the V group's scales, transposed into B
        uint32_t pb[NR][2];
#pragma unroll
        for (int nr = 0; nr < NR; nr++) pb[nr][0] = pb[nr][1] = 0u;
        float vsf[2][KG == 32 ? D / 32 : 1];
        (void)vsf;
        if constexpr (KG == 32) {
            kt::scale_row<D / 32>(vsc + gid * (D / 16), vsf[0]);
            kt::scale_row<D / 32>(vsc + (gid + 8) * (D / 16), vsf[1]);
        }
#pragma unroll
        for (int c = 0; c < CH; c++) {
            if (KG == 32 ? c % (32 / CD) == 0 : c == 0 || ((c * CD) & vgm) == 0) { // a V group starts
                float s0, s1;
                if constexpr (KG == 32) {
                    s0 = vsf[0][c * CD / 32], s1 = vsf[1][c * CD / 32];
                } else {
                    const int g = (c * CD) >> p.vgs;
                    s0 = vg ? kt::sf16(vsc + gid * vsb, g) : 1.0f;
                    s1 = vg ? kt::sf16(vsc + (gid + 8) * vsb, g) : 1.0f;
                }
#pragma unroll
                for (int nr = 0; nr < NR; nr++) {
                    pb[nr][0] = kt::movt(pack2<PV>(s[nr][0] * s0, s[nr][1] * s0));
                    pb[nr][1] = kt::movt(pack2<PV>(s[nr][2] * s1, s[nr][3] * s1));
                }
            }
            uint32_t vw[2][2 * MPC];
#pragma unroll
            for (int kh = 0; kh < 2; kh++) {
                if constexpr (R::BITS == 4) { // 136 + code (bf16, exact); the -136 by a second mma
                    const uint32_t x = vr[kh][c];
                    vw[kh][0] = ring::lop_xor(x, 0x000F000Fu, 0x43084308u);
                    vw[kh][1] = ring::lop_xor(x >> 4, 0x000F000Fu, 0x43084308u);
                    vw[kh][2] = ring::lop_xor(x >> 8, 0x000F000Fu, 0x43084308u);
                    vw[kh][3] = ring::lop_xor(x >> 12, 0x000F000Fu, 0x43084308u);
                } else if constexpr (KIND == TOPS__DEC_I8) {
                    vw[kh][0] = kt::dec_i8_bf16(vr[kh][c], 0, 2);
                    vw[kh][1] = kt::dec_i8_bf16(vr[kh][c], 1, 3);
                } else {
                    vw[kh][0] = ring::dec8<KIND>(vr[kh][c], 0, 2);
                    vw[kh][1] = ring::dec8<KIND>(vr[kh][c], 1, 3);
                }
            }
#pragma unroll
            for (int u = 0; u < MPC; u++) {
                const uint32_t a[4] = {vw[0][2 * u], vw[0][2 * u + 1], vw[1][2 * u], vw[1][2 * u + 1]};
#pragma unroll
                for (int nr = 0; nr < NR; nr++) {
                    mma<PV>(o[c * MPC + u][nr], a, pb[nr][0], pb[nr][1]);
                    if constexpr (R::BITS == 4) { // minus 136 x the group's P column sums
                        const uint32_t m136[4] = {0xC308C308u, 0xC308C308u, 0xC308C308u, 0xC308C308u};
                        mma<PV>(o[c * MPC + u][nr], m136, pb[nr][0], pb[nr][1]);
                    }
                }
            }
        }
        __syncwarp(); // the stage is read: the next issue may refill it
#if KT_TMA
        if (TM && lane == 0) tops_cu::sm90::mbar_arrive(&empty[cs]);
#endif
    };
    int i = 0;
    if constexpr (QREG) { // elsewhere the second copy of the body costs spills
        // the leading stages that are whole: their keys end by lim (hi;
        // causal: the first row's position + 1)
        const int lim = min(hi, p.causal ? sl.sk - sl.sq + 1 : hi);
        const int nfast = p.window > 0 || lim < lo + 64 ? 0 : min(nsub, (lim - lo - 64) / 64 + 1);
        for (; i < nfast; i++) step(i, std::true_type{});
    }
    for (; i < nsub; i++) step(i, std::false_type{});
    ring::wait<0>();

    // The warps meet (as decode_kernel); O^T's row gid (+ 8) of m-tile (c, u)
    // is d = c CD + gid CD / 8 + 2u (+ 1), its column the query row.
#pragma unroll
    for (int nr = 0; nr < NR; nr++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            l[nr][h] += __shfl_xor_sync(0xffffffffu, l[nr][h], 4);
            l[nr][h] += __shfl_xor_sync(0xffffffffu, l[nr][h], 8);
            l[nr][h] += __shfl_xor_sync(0xffffffffu, l[nr][h], 16);
            if (gid == 0) {
                mw[warp * ROWS + 8 * nr + 2 * t + h] = m[nr][h];
                lw[warp * ROWS + 8 * nr + 2 * t + h] = l[nr][h];
            }
        }
    __syncthreads(); // every warp is out of its ring
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int c = mt / MPC, u = mt % MPC;
#pragma unroll
        for (int nr = 0; nr < NR; nr++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int d = c * CD + gid * (CD / 8) + 2 * u + (e >> 1), rr = 8 * nr + 2 * t + (e & 1);
                ow[(warp * ROWS + rr) * OP + d] = o[mt][nr][e];
            }
    }
    __syncthreads();
    finish_rows<T, D>(p, sl, ROWS, r0, b, hk, split, mw, lw, ow);
}

template <int D> constexpr size_t smem_bytes() {
    return (size_t)(D / 16) * 32 * 16 + 2 * 4 * kRows * sizeof(float) + (size_t)4 * kRows * (D + 4) * sizeof(float);
}

static int ilog2(int x) {
    int s = 0;
    while ((1 << s) < x) s++;
    return s;
}

static void fill_kv(const tops__cu_kv &kv, const unsigned char **data, long long *sb, long long *sh, long long *ss,
                    const void **sc, long long c[4], int *st, int *mode, int *gs) {
    *data = reinterpret_cast<const unsigned char *>(kv.data);
    *sb = kv.stride[0], *sh = kv.stride[1], *ss = kv.stride[2];
    *sc = kv.scales;
    for (int i = 0; i < 4; i++) c[i] = kv.sstride[i];
    *st = kv.scale_type;
    *mode = kv.mode;
    *gs = kv.mode == TOPS__DEC_SC_GROUP ? ilog2(kv.group) : 31;
}

// Splits: enough CTAs to fill the GPU once (CTAs resident a SM x SMs; the
// TMA kt_kernel three quarters of it: its CTAs' fixed costs against an
// SM's fourth), at least 256 keys a split; debug key attn_splits=N fixes N
// (capped as below; 0: this choice).
static int choose_splits(const tops__cu_decode_args *a, int bhc, int per_sm, bool tm) {
    const long long asked = tops__cu_tune_or(TOPS__CU_T_ATTN_SPLITS, a->splits);
    int want = asked > INT_MAX ? INT_MAX : (int)asked;
    if (want <= 0) {
        const int resident = per_sm * tops__cuda_sm_count(-1);
        const int slots = tm && per_sm >= 4 ? resident * 3 / 4 : resident;
        want = bhc >= slots ? 1 : slots / bhc;
        if (tm && bhc > resident) { // more than one wave: the splits whose last wave wastes the least
            double best = 1e300;
            for (int n = 1; n <= 8; n++) {
                const double waves = (double)(((long long)bhc * n + resident - 1) / resident), cost = waves / n;
                if (cost < best * 0.999) best = cost, want = n;
            }
        }
    }
    const int most = (int)((a->sk + 255) / 256);
    if (want > most) want = most;
    return want < 1 ? 1 : want;
}

static int scale_bytes(int type) { return type == TOPS__DEC_SF32 ? 4 : type == TOPS__DEC_SE8M0 ? 1 : 2; }

// A stride TMA takes: a multiple of 16 bytes, below 2^40.
static bool tma_stride(unsigned long long x) { return x >= 16 && x % 16 == 0 && x < (1ull << 40); }
// K's and V's (b, kv head) strides in bytes, a unit extent's (never used)
// replaced by a valid one; the {K, V} stride, their distance, based at the
// lower address (*kfirst: K's).  False where TMA cannot take them.
static bool pair_strides(const tops__cu_decode_args *a, long long row, const void *k, const void *v, long long s0,
                         long long s1, unsigned long long st[3], const void **base, int *kfirst) {
    const long long sh = a->kv_heads > 1 ? s1 : row * a->sk, sb = a->batch > 1 ? s0 : sh * a->kv_heads;
    const uintptr_t ka = (uintptr_t)k, va = (uintptr_t)v;
    st[0] = ka < va ? va - ka : ka - va, st[1] = (unsigned long long)sh, st[2] = (unsigned long long)sb;
    *kfirst = ka < va;
    *base = ka < va ? k : v;
    return sh > 0 && sb > 0 && tma_stride(st[0]) && tma_stride(st[1]) && tma_stride(st[2]);
}

// kt_kernel's TMA boxes: K and V rows as one 5-D byte tensor (row bytes
// rb, keys, {K, V}, kv heads, batch; boxes of 64 keys, swizzled by the
// row's length), their group scales as one 4-D tensor (keys' scale rows in
// elements of up to 8 bytes, *sx a key, {K, V}, kv heads, batch; boxes of
// 64 keys), each based at the lower of the two addresses (*kfirst, *sfirst:
// K's there); false where the driver or the layouts refuse them (K and V
// strided alike, their distance a multiple of 16 bytes, group scales on
// both or neither).
static bool kt_maps(const tops__cu_decode_args *a, int rb, CUtensorMap *dm, CUtensorMap *sm, int *kfirst, int *sfirst,
                    int *sx) {
    const tops__cu_kv &k = a->k, &v = a->v;
    const CUtensorMapSwizzle sw = rb == 32   ? CU_TENSOR_MAP_SWIZZLE_32B
                                  : rb == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                             : CU_TENSOR_MAP_SWIZZLE_128B;
    for (int i = 0; i < 3; i++)
        if (k.stride[i] != v.stride[i]) return false;
    const long long ss = k.stride[2];
    unsigned long long st[3];
    const void *base;
    if (ss < rb || ss % 16 || !pair_strides(a, ss, k.data, v.data, k.stride[0], k.stride[1], st, &base, kfirst))
        return false;
    {
        const cuuint64_t dims[5] = {(cuuint64_t)rb, (cuuint64_t)a->sk, 2, (cuuint64_t)a->kv_heads, (cuuint64_t)a->batch};
        const cuuint64_t strides[4] = {(cuuint64_t)ss, st[0], st[1], st[2]};
        const cuuint32_t box[5] = {(cuuint32_t)rb, 64, 2, 1, 1};
        if (!tops_cu::sm90::encode_tiled(dm, CU_TENSOR_MAP_DATA_TYPE_UINT8, 5, base, dims, strides, box, sw,
                                         CU_TENSOR_MAP_L2_PROMOTION_L2_128B))
            return false;
    }
    *sfirst = 1;
    const bool kg = k.mode == TOPS__DEC_SC_GROUP, vg = v.mode == TOPS__DEC_SC_GROUP;
    if (kg != vg) return false;
    if (!kg) return true;
    const long long es = scale_bytes(k.scale_type);
    if (v.scale_type != k.scale_type) return false;
    for (int i = 0; i < 4; i++)
        if (k.sstride[i] != v.sstride[i]) return false;
    const long long kb = k.sstride[2] * es; // a key's scale row
    if (kb < 1 || kb > 16 || (kb & (kb - 1)) ||
        !pair_strides(a, kb, k.scales, v.scales, k.sstride[0] * es, k.sstride[1] * es, st, &base, sfirst))
        return false;
    const long long se = kb < 8 ? kb : 8; // element bytes
    const CUtensorMapDataType et = se == 1   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : se == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                   : se == 4 ? CU_TENSOR_MAP_DATA_TYPE_UINT32
                                             : CU_TENSOR_MAP_DATA_TYPE_UINT64;
    *sx = (int)(kb / se);
    const cuuint64_t dims[4] = {(cuuint64_t)(kb / se * a->sk), 2, (cuuint64_t)a->kv_heads, (cuuint64_t)a->batch};
    const cuuint64_t strides[3] = {st[0], st[1], st[2]};
    const cuuint32_t box[4] = {(cuuint32_t)(64 * kb / se), 2, 1, 1};
    return tops_cu::sm90::encode_tiled(sm, et, 4, base, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_NONE,
                                       CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
}

// Whether a kt_kernel call runs on TMA stages (sm_90, rows of at most 128
// bytes, the boxes encodable; debug key attn_tma=0: never), the boxes then
// in *dm / *sm.
static bool kt_tma(const tops__cu_decode_args *a, CUtensorMap *dm, CUtensorMap *sm, int *kfirst, int *sfirst, int *sx) {
    const int rb = (int)(a->d * (a->kind == TOPS__DEC_I4 ? 4 : 8) / 8);
    return rb <= 128 && tops__cu_tune(TOPS__CU_T_ATTN_TMA) != 0 && tops_cu::device_is_sm90a() &&
           kt_maps(a, rb, dm, sm, kfirst, sfirst, sx);
}

// VAR: 0 decode_kernel, 1 ring_kernel, 2 / 3 kt_kernel with 8 / 16 rows a
// CTA (1..3: KIND a plain TOPS__DEC_* code; 2, 3: bf16 q, KG its groups).
template <typename T, int D, int KIND, int VAR = 0, int KG = 0> static int launch(const tops__cu_decode_args *a) {
    cudaStream_t stream = reinterpret_cast<cudaStream_t>(a->stream);
    dparams p;
    memset(&p, 0, sizeof p);
    void (*kern)(const dparams) = nullptr;
    void (*ktk)(const dparams, const CUtensorMap, const CUtensorMap) = nullptr;
    size_t smem;
    constexpr int rows_cta = VAR >= 2 ? 8 * (VAR - 1) : kRows;
    CUtensorMap dmap, smap; // kt_kernel's TMA boxes (tm): K and V rows, their scales
    memset(&dmap, 0, sizeof dmap);
    memset(&smap, 0, sizeof smap);
    bool tm = false;
    if constexpr (VAR >= 2) {
        static_assert(std::is_same<T, __nv_bfloat16>::value, "kt_kernel reads bf16 q");
        constexpr int NR = VAR - 1;
        if constexpr (kt::tma_ok<D, KIND>()) {
            tm = kt_tma(a, &dmap, &smap, &p.tm_kfirst, &p.tm_sfirst, &p.tm_sx);
            p.tm_depth = (int)tops__cu_tune(TOPS__CU_T_ATTN_DEPTH);
            if (tm) ktk = kt_kernel<D, KIND, NR, KG, true>, smem = (size_t)kt::cfg<D, KIND, NR, true>::SMEM;
        }
        if (!tm) ktk = kt_kernel<D, KIND, NR, KG, false>, smem = (size_t)kt::cfg<D, KIND, NR>::SMEM;
    } else if constexpr (VAR == 1) {
        kern = ring_kernel<T, D, KIND>;
        smem = (size_t)ring::cfg<D, KIND>::SMEM;
    } else {
        kern = decode_kernel<T, D, KIND>;
        smem = smem_bytes<D>();
    }
    // The shared-memory limit is raised and the occupancy read once a
    // device (a function attribute holds for the current device only).
    static int per_sm_of[64][2];
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return (int)err;
    int scratch = 0, &per_sm = dev >= 0 && dev < 64 ? per_sm_of[dev][tm ? 1 : 0] : scratch;
    if (per_sm == 0) {
        const void *fn = ktk ? reinterpret_cast<const void *>(ktk) : reinterpret_cast<const void *>(kern);
        if ((err = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) != cudaSuccess)
            return (int)err;
        int n = 0;
        if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, kThreads, smem)) != cudaSuccess) return (int)err;
        per_sm = n > 0 ? n : 1;
    }
    p.q = a->q;
    p.out = a->out;
    p.qsb = a->q_stride[0], p.qsh = a->q_stride[1], p.qss = a->q_stride[2];
    p.osb = a->o_stride[0], p.osh = a->o_stride[1], p.oss = a->o_stride[2];
    fill_kv(a->k, &p.k, &p.ksb, &p.ksh, &p.kss, &p.ksc, p.kc, &p.kst, &p.kmode, &p.kgs);
    fill_kv(a->v, &p.v, &p.vsb, &p.vsh, &p.vss, &p.vsc, p.vc, &p.vst, &p.vmode, &p.vgs);
    p.ts_v = a->v.tensor_scale;
    p.kesz = scale_bytes(p.kst), p.vesz = scale_bytes(p.vst);
    p.ksbytes = (int)(a->k.sstride[2] * p.kesz), p.vsbytes = (int)(a->v.sstride[2] * p.vesz);
    p.hkv = (int)a->kv_heads;
    p.sq = (int)a->sq;
    p.sk = (int)a->sk;
    p.group = (int)(a->heads / a->kv_heads);
    p.rows = (int)(p.group * a->sq); // the longest sequence's rows
    p.causal = a->causal;
    p.window = a->window > 0 ? (int)(a->window < (1 << 30) ? a->window : (1 << 30)) : 0;
    const float log2e = 1.4426950408889634f, sk_scale = a->scale * a->k.tensor_scale;
    if (a->softcap > 0.0f) {
        p.cap_in = sk_scale / a->softcap;
        p.cap_out = a->softcap * log2e;
    } else {
        p.sl = sk_scale * log2e;
    }
    const int bhs = (int)(a->batch * a->kv_heads), chunks = (p.rows + rows_cta - 1) / rows_cta;
    p.nsplit = choose_splits(a, bhs * chunks, per_sm, tm);
    p.kps = (int)((a->sk + p.nsplit - 1) / p.nsplit);
    p.kps = (p.kps + 15) / 16 * 16;
    p.nsplit = (int)((a->sk + p.kps - 1) / p.kps);
    if (p.nsplit < 1) p.nsplit = 1;
    float *ws = nullptr;
    int *lens = nullptr;
    if (a->kv_lens || a->cu_q) {
        const size_t nb = (size_t)a->batch, bytes = (3 * nb + 2) * sizeof(int);
        if ((err = cudaMallocAsync(reinterpret_cast<void **>(&lens), bytes, stream)) != cudaSuccess) return (int)err;
        if (a->kv_lens && (err = cudaMemcpyAsync(lens, a->kv_lens, nb * sizeof(int), cudaMemcpyHostToDevice, stream)) != cudaSuccess)
            return (int)err;
        if (a->cu_q && ((err = cudaMemcpyAsync(lens + nb, a->cu_q, (nb + 1) * sizeof(int), cudaMemcpyHostToDevice, stream)) !=
                            cudaSuccess ||
                        (err = cudaMemcpyAsync(lens + 2 * nb + 1, a->cu_k, (nb + 1) * sizeof(int), cudaMemcpyHostToDevice,
                                               stream)) != cudaSuccess))
            return (int)err;
        p.kv_lens = a->kv_lens ? lens : nullptr;
        p.cu_q = a->cu_q ? lens + nb : nullptr;
        p.cu_k = a->cu_q ? lens + 2 * nb + 1 : nullptr;
    }
    if (p.nsplit > 1) {
        const size_t bytes = (size_t)bhs * p.nsplit * p.rows * (2 + D) * sizeof(float);
        if ((err = cudaMallocAsync(reinterpret_cast<void **>(&ws), bytes, stream)) != cudaSuccess) {
            (void)cudaGetLastError();
            p.nsplit = 1; // no memory pool: one split needs no workspace
            p.kps = (int)a->sk;
        }
        p.ws = ws;
    }
    if (p.kps < 1) p.kps = 1;
    const dim3 grid((unsigned)bhs, (unsigned)p.nsplit, (unsigned)chunks);
    if (ktk) {
        err = tops_cu::launch_kernel(ktk, grid, dim3(kThreads), smem, stream, tm, 1, p, dmap, smap);
    } else {
        kern<<<grid, kThreads, smem, stream>>>(p);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess && p.nsplit > 1) {
        // tm: a programmatic dependent of kt_kernel (waits for it in grid_dep_wait)
        const unsigned ys = (unsigned)((p.rows * D + 255) / 256);
        err = tops_cu::launch_kernel(merge_kernel<T, D>, dim3((unsigned)bhs, ys), dim3(256), 0, stream, tm, 1, p, bhs);
    }
    if (ws) {
        cudaError_t e2 = cudaFreeAsync(ws, stream);
        if (err == cudaSuccess) err = e2;
    }
    if (lens) {
        cudaError_t e2 = cudaFreeAsync(lens, stream);
        if (err == cudaSuccess) err = e2;
    }
    return (int)err;
}

// k and v scaled by f16 groups along D (the int-gG default): the fma decoders.
static bool f16_groups(const tops__cu_decode_args *a) {
    return a->k.mode == TOPS__DEC_SC_GROUP && a->v.mode == TOPS__DEC_SC_GROUP && a->k.scale_type == TOPS__DEC_SF16 &&
           a->v.scale_type == TOPS__DEC_SF16;
}

// Whether ring_kernel takes a quantized KV call: 16-byte aligned rows (cp.async
// chunks), not packed, group scales (if any) f16, in rows of at most 16 bytes
// a key, groups of at least a 16-byte chunk of codes.  ring_kernel multiplies
// in f16: with bf16 q it takes e4m3 without group scales (codes and q exact
// in f16) by default; debug key attn_ring=2 also sends it bf16 calls with
// int8 / int4 groups, whose decoded values must then fit f16 (|x| < 65504);
// attn_ring=0 sends every call to decode_kernel.
static bool ring_kv_ok(const tops__cu_decode_args *a, const tops__cu_kv &kv) {
    const long long al = 16;
    if ((uintptr_t)kv.data % al || kv.stride[0] % al || kv.stride[1] % al || kv.stride[2] % al) return false;
    if (kv.mode != TOPS__DEC_SC_GROUP) return true;
    const long long es = scale_bytes(kv.scale_type);
    const int chunk_codes = a->kind == TOPS__DEC_I4 ? 32 : 16;
    if (kv.scale_type != TOPS__DEC_SF16) return false;
    if (kv.group < chunk_codes || (kv.group & (kv.group - 1)) != 0) return false;
    if (kv.sstride[3] != 1 && !(kv.sstride[3] == 0 && kv.group >= a->d)) return false; // entries of a key adjacent
    if (kv.sstride[2] < 1 || kv.sstride[2] * es > 16) return false;
    return (uintptr_t)kv.scales % al == 0 && kv.sstride[0] * es % al == 0 && kv.sstride[1] * es % al == 0;
}
// Whether kt_kernel takes a quantized KV call: bf16 q (its products need no
// f16 range), the layouts ring_kernel reads; by default (debug key attn_ring
// unset or 1) before ring_kernel.
static bool kt_takes(const tops__cu_decode_args *a) {
    if (!a->bf16 || a->kind == TOPS__DEC_KV16 || a->cu_q || tops__cu_tune(TOPS__CU_T_ATTN_RING) != 1) return false;
    if (!ring_kv_ok(a, a->k) || !ring_kv_ok(a, a->v)) return false;
    return a->kind != TOPS__DEC_E4M3 || a->v.mode != TOPS__DEC_SC_GROUP; // e4m3's P stays unscaled (f16)
}
// kt_kernel's compile-time groups: int4 / int8 K and V in groups of 32, a
// key's D / 32 f16 scales adjacent.
static bool kt_g32(const tops__cu_decode_args *a) {
    if (a->kind != TOPS__DEC_I4 && a->kind != TOPS__DEC_I8) return false;
    for (const tops__cu_kv *kv : {&a->k, &a->v})
        if (kv->mode != TOPS__DEC_SC_GROUP || kv->scale_type != TOPS__DEC_SF16 || kv->group != 32 ||
            kv->sstride[2] != a->d / 32 || kv->sstride[3] != 1)
            return false;
    return true;
}
static bool ring_takes(const tops__cu_decode_args *a) {
    const int mode = (int)tops__cu_tune(TOPS__CU_T_ATTN_RING);
    if (kt_takes(a)) return false;
    if (a->kind == TOPS__DEC_KV16 || a->cu_q || mode == 0) return false;
    if (!ring_kv_ok(a, a->k) || !ring_kv_ok(a, a->v)) return false;
    const bool groups = a->k.mode == TOPS__DEC_SC_GROUP || a->v.mode == TOPS__DEC_SC_GROUP;
    return !a->bf16 || (a->kind == TOPS__DEC_E4M3 && !groups) || mode == 2;
}

template <typename T, int D> static int launch_kind(const tops__cu_decode_args *a) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
        if (kt_takes(a)) {
            const bool two = a->heads / a->kv_heads * a->sq > 8; // rows of a kv head: 16 a CTA
            const bool g32 = kt_g32(a);
            switch (a->kind) {
            case TOPS__DEC_E4M3: return two ? launch<T, D, TOPS__DEC_E4M3, 3>(a) : launch<T, D, TOPS__DEC_E4M3, 2>(a);
            case TOPS__DEC_I8:
                if (g32) return two ? launch<T, D, TOPS__DEC_I8, 3, 32>(a) : launch<T, D, TOPS__DEC_I8, 2, 32>(a);
                return two ? launch<T, D, TOPS__DEC_I8, 3>(a) : launch<T, D, TOPS__DEC_I8, 2>(a);
            case TOPS__DEC_I4:
                if (g32) return two ? launch<T, D, TOPS__DEC_I4, 3, 32>(a) : launch<T, D, TOPS__DEC_I4, 2, 32>(a);
                return two ? launch<T, D, TOPS__DEC_I4, 3>(a) : launch<T, D, TOPS__DEC_I4, 2>(a);
            default: return (int)cudaErrorNotSupported;
            }
        }
    }
    const bool ring = ring_takes(a);
    switch (a->kind) {
    case TOPS__DEC_KV16: return launch<T, D, TOPS__DEC_KV16>(a);
    case TOPS__DEC_E4M3: return ring ? launch<T, D, TOPS__DEC_E4M3, 1>(a) : launch<T, D, TOPS__DEC_E4M3>(a);
    case TOPS__DEC_I8:
        return ring ? launch<T, D, TOPS__DEC_I8, 1>(a)
                    : f16_groups(a) ? launch<T, D, TOPS__DEC_I8 + 4>(a) : launch<T, D, TOPS__DEC_I8>(a);
    case TOPS__DEC_I4:
        return ring ? launch<T, D, TOPS__DEC_I4, 1>(a)
                    : f16_groups(a) ? launch<T, D, TOPS__DEC_I4 + 4>(a) : launch<T, D, TOPS__DEC_I4>(a);
    default: return (int)cudaErrorNotSupported;
    }
}

template <typename T> static int launch_t(const tops__cu_decode_args *a) {
    switch (a->d) {
    case 64: return launch_kind<T, 64>(a);
    case 128: return launch_kind<T, 128>(a);
    case 256: return launch_kind<T, 256>(a);
    default: return (int)cudaErrorNotSupported;
    }
}

} // namespace

extern "C" int tops__cu_decode_takes(int64_t sq, int d) { return sq >= 1 && sq <= 16 && (d == 64 || d == 128 || d == 256); }

extern "C" int tops__cu_decode_launch(const tops__cu_decode_args *a) {
    if (!tops__cu_decode_takes(a->sq, a->d)) return (int)cudaErrorNotSupported;
    return a->bf16 ? launch_t<__nv_bfloat16>(a) : launch_t<__half>(a);
}

extern "C" void tops__cu_decode_name(const tops__cu_decode_args *a, char *buf, size_t cap) {
    static const char *const kinds[] = {"kv16", "e4m3", "i8", "i4"};
    const bool kt = kt_takes(a);
    CUtensorMap dm, sm;
    int kf = 0, sf = 0, sx = 0;
    const bool tm = kt && kt_tma(a, &dm, &sm, &kf, &sf, &sx);
    snprintf(buf, cap, "flash-decode %s%s d%d %s%s", kt ? (kt_g32(a) ? "kt g32" : "kt") : ring_takes(a) ? "ring" : "mma",
             tm ? " tma" : "", a->d, kinds[a->kind & 3], a->bf16 ? " bf16" : " f16");
}
