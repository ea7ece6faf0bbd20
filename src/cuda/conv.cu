// conv2d kernels (NHWC, 16-bit activations, f32 sums): the implicit GEMM on
// the tensor cores (wgmma on sm_90a, further down; mma.sync below), the
// im2col gather the quantized formats' path feeds to the matmul kernels, the
// bias fill, and the depthwise direct kernel.
//
// mma.sync implicit GEMM: rows are output pixels (M = N * OH * OW), columns output
// channels of one group, K = (kh, kw, c) in the weights' order.  A CTA
// computes 128 pixels x BN channels; each 16-byte piece of its activation
// tile (8 channels of one tap of one pixel) is gathered from NHWC with
// cp.async (zero-filled outside the input, past M or past K), the weight
// tile [BN][32] likewise, in a ring of 4 stages; 4 warps (2 x 2) multiply
// with ldmatrix + mma.sync m16n8k16 into f32.  K is split over blockIdx.z
// when the tiles cannot fill the SMs: the partials go to a workspace and a
// second kernel sums them in split order (the same bits every run), then
// adds the bias and the old dest.
#include "cuda/conv.h"
#include "cuda/cuda_internal.h"
#include "cuda/kernels.cuh"
#include "cuda/sm90.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

namespace {

constexpr int kBM = 128, kBK = 32, kStages = 4, kThreads = 128, kPad = 40; // kPad: row pitch in 16-bit elements

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

template <bool BF16> __device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float load_out(const void *p, int64_t i, int dt) {
    if (dt == TOPS_DT_F32) return static_cast<const float *>(p)[i];
    if (dt == TOPS_DT_F16) return __half2float(static_cast<const __half *>(p)[i]);
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
}
__device__ __forceinline__ void store_out(void *p, int64_t i, int dt, float v) {
    if (dt == TOPS_DT_F32) static_cast<float *>(p)[i] = v;
    else if (dt == TOPS_DT_F16) static_cast<__half *>(p)[i] = __float2half_rn(v);
    else static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v);
}
__device__ __forceinline__ float load16(const uint16_t *p, int64_t i, bool bf16) {
    uint16_t b = p[i];
    return bf16 ? __bfloat162float(__ushort_as_bfloat16(b)) : __half2float(__ushort_as_half(b));
}

struct Geo {
    const uint16_t *x;
    int64_t xs_n, xs_h, xs_w;
    int h, w, c, cg, og, o, kh, kw, oh, ow, k;
    int sh, sw, dh, dw, pt, pl;
    int m;
    const uint16_t *wt;
    int64_t ldw;
    void *out;
    int64_t ldo;
    int out_dtype, accumulate;
    const float *bias;
    float *ws;  // split partials [splits][m][o], or NULL
    int kt_per_split, ktiles;
};

// GEN: any channel count, strides and alignment (the stem's C = 3): each
// element gathered with a plain load and stored to shared memory, the
// ring's ordering kept by the same barriers.
template <bool BF16, int BN, bool GEN> __global__ void __launch_bounds__(kThreads) igemm_kernel(Geo p) {
    extern __shared__ __align__(16) uint16_t smem[];
    uint16_t *sa = smem;                              // [kStages][kBM][kPad]
    uint16_t *sb = smem + kStages * kBM * kPad;      // [kStages][BN][kPad]
    constexpr int WN = BN / 2, NI = WN / 8, MI = 4;  // warps 2 x 2: 64 rows x WN channels each
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 1, wn = warp & 1;
    const int m0 = blockIdx.x * kBM, n0 = blockIdx.y * BN;
    const int groups = p.o / p.og;
    const int split = blockIdx.z / groups, grp = blockIdx.z % groups;
    const int kt0 = split * p.kt_per_split;
    int kt1 = kt0 + p.kt_per_split;
    if (kt1 > p.ktiles) kt1 = p.ktiles;
    const int nkt = kt1 > kt0 ? kt1 - kt0 : 0;

    // This thread's gather: chunk (tid & 3) of rows (tid >> 2) + 32 i.
    const int chunk = tid & 3;
    int ih0[4], iw0[4];
    int64_t xoff[4];
    bool mok[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int m = m0 + (tid >> 2) + 32 * i;
        mok[i] = m < p.m;
        int mm = mok[i] ? m : 0;
        int ow = mm % p.ow, t = mm / p.ow, oh = t % p.oh, n = t / p.oh;
        ih0[i] = oh * p.sh - p.pt;
        iw0[i] = ow * p.sw - p.pl;
        xoff[i] = (int64_t)n * p.xs_n + (int64_t)grp * p.cg;
    }
    const uint16_t *wbase = p.wt + (int64_t)grp * p.og * p.ldw;

    auto load_tile_gen = [&](int stage, int kt) {
        const int kb = kt * kBK + chunk * 8;
        uint16_t *da = sa + stage * kBM * kPad;
        uint16_t *db = sb + stage * BN * kPad;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const int k = kb + e;
            const bool kok = k < p.k;
            const int tap = kok ? k / p.cg : 0, cc = k - tap * p.cg, r = tap / p.kw, s = tap - r * p.kw;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int row = (tid >> 2) + 32 * i;
                const int ih = ih0[i] + r * p.dh, iw = iw0[i] + s * p.dw;
                const bool ok = kok && mok[i] && ih >= 0 && ih < p.h && iw >= 0 && iw < p.w;
                da[row * kPad + chunk * 8 + e] = ok ? p.x[xoff[i] + ih * p.xs_h + iw * p.xs_w + cc] : (uint16_t)0;
            }
#pragma unroll
            for (int i = 0; i < BN / 32; i++) {
                const int row = (tid >> 2) + 32 * i;
                const bool ok = kok && n0 + row < p.og;
                db[row * kPad + chunk * 8 + e] = ok ? wbase[(int64_t)(n0 + row) * p.ldw + k] : (uint16_t)0;
            }
        }
    };
    auto load_tile = [&](int stage, int kt) {
        if constexpr (GEN) {
            load_tile_gen(stage, kt);
            return;
        }
        const int k = kt * kBK + chunk * 8;
        const bool kok = k < p.k;
        const int tap = kok ? k / p.cg : 0, cc = k - tap * p.cg, r = tap / p.kw, s = tap - r * p.kw;
        uint16_t *da = sa + stage * kBM * kPad;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = (tid >> 2) + 32 * i;
            const int ih = ih0[i] + r * p.dh, iw = iw0[i] + s * p.dw;
            const bool ok = kok && mok[i] && ih >= 0 && ih < p.h && iw >= 0 && iw < p.w;
            const uint16_t *src = ok ? p.x + xoff[i] + ih * p.xs_h + iw * p.xs_w + cc : p.x;
            cp_async16(da + row * kPad + chunk * 8, src, ok);
        }
        uint16_t *db = sb + stage * BN * kPad;
#pragma unroll
        for (int i = 0; i < BN / 32; i++) {
            const int row = (tid >> 2) + 32 * i;
            const bool ok = kok && n0 + row < p.og;
            const uint16_t *src = ok ? wbase + (int64_t)(n0 + row) * p.ldw + k : p.wt;
            cp_async16(db + row * kPad + chunk * 8, src, ok);
        }
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int a = 0; a < MI; a++)
#pragma unroll
        for (int b = 0; b < NI; b++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[a][b][c] = 0.f;

#pragma unroll
    for (int s = 0; s < kStages - 1; s++) {
        if (s < nkt) load_tile(s, kt0 + s);
        cp_commit();
    }
    for (int it = 0; it < nkt; it++) {
        cp_wait<kStages - 2>();
        __syncthreads();
        {
            const int nx = it + kStages - 1;
            if (nx < nkt) load_tile(nx % kStages, kt0 + nx);
            cp_commit();
        }
        const uint16_t *ta = sa + (it % kStages) * kBM * kPad;
        const uint16_t *tb = sb + (it % kStages) * BN * kPad;
#pragma unroll
        for (int kk = 0; kk < kBK; kk += 16) {
            uint32_t af[MI][4];
#pragma unroll
            for (int mi = 0; mi < MI; mi++)
                ldsm_x4(af[mi], ta + (wm * 64 + mi * 16 + (lane & 15)) * kPad + kk + (lane >> 4) * 8);
#pragma unroll
            for (int np = 0; np < NI / 2; np++) {
                uint32_t bf[4];
                ldsm_x4(bf, tb + (wn * WN + np * 16 + (lane & 7) + ((lane >> 4) << 3)) * kPad + kk + ((lane >> 3) & 1) * 8);
#pragma unroll
                for (int mi = 0; mi < MI; mi++) {
                    mma16816<BF16>(acc[mi][2 * np], af[mi], bf[0], bf[1]);
                    mma16816<BF16>(acc[mi][2 * np + 1], af[mi], bf[2], bf[3]);
                }
            }
        }
    }
    cp_wait<0>();

    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int m = m0 + wm * 64 + mi * 16 + g + 8 * h;
            if (m >= p.m) continue;
#pragma unroll
            for (int ni = 0; ni < NI; ni++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int j = n0 + wn * WN + ni * 8 + 2 * t + e;
                    if (j >= p.og) continue;
                    const int o = grp * p.og + j;
                    float v = acc[mi][ni][2 * h + e];
                    if (p.ws) {
                        p.ws[((int64_t)split * p.m + m) * p.o + o] = v;
                        continue;
                    }
                    const int64_t idx = (int64_t)m * p.ldo + o;
                    if (p.bias) v += p.bias[o];
                    if (p.accumulate) v += load_out(p.out, idx, p.out_dtype);
                    store_out(p.out, idx, p.out_dtype, v);
                }
        }
}

// Split partials summed in split order, then bias and the old dest: V
// neighbours of one output row a thread (V = 4 where O is a multiple of 4:
// 16-byte partial loads), the index math in I (32 bits where M x O fits).
// H100, ResNet-50 res5 at batch 32 (two splits): 26.1 us a call against
// 27.3 with one float a thread and 64-bit divisions.
template <int V, typename I> __global__ void split_reduce_kernel(Geo p, int splits) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    tops_cu::sm90::grid_dep_wait(); // a programmatic dependent of the convolution (split_reduce)
#endif
    const I total = (I)p.m * (I)p.o, ov = (I)p.o / V, n = total / V;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < n; i += (I)gridDim.x * (I)blockDim.x) {
        const I m = i / ov, o = (i - m * ov) * V;
        float v[V] = {};
        for (int s = 0; s < splits; s++) {
            const float *src = p.ws + (int64_t)s * (int64_t)total + (int64_t)i * V;
            if constexpr (V == 4) {
                const float4 t = *reinterpret_cast<const float4 *>(src);
                v[0] += t.x, v[1] += t.y, v[2] += t.z, v[3] += t.w;
            } else v[0] += *src;
        }
        const int64_t idx = (int64_t)m * p.ldo + (int64_t)o;
#pragma unroll
        for (int j = 0; j < V; j++) {
            float x = v[j];
            if (p.bias) x += p.bias[o + j];
            if (p.accumulate) x += load_out(p.out, idx + j, p.out_dtype);
            store_out(p.out, idx + j, p.out_dtype, x);
        }
    }
}

__global__ void im2col_kernel(const uint16_t *x, int64_t xs_n, int64_t xs_h, int64_t xs_w, int h, int w, int cg, int c0,
                              int kw, int oh, int ow, int k, int sh, int sw, int dh, int dw, int pt, int pl, int64_t m0,
                              int64_t rows, uint16_t *col, int64_t ldc) {
    const int64_t total = rows * ldc;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / ldc;
        const int kk = (int)(i - r * ldc);
        uint16_t v = 0;
        if (kk < k) {
            const int64_t m = m0 + r;
            const int x_ = (int)(m % ow);
            const int64_t t = m / ow;
            const int y = (int)(t % oh);
            const int64_t n = t / oh;
            const int tap = kk / cg, cc = kk - tap * cg, ki = tap / kw, kj = tap - ki * kw;
            const int ih = y * sh - pt + ki * dh, iw = x_ * sw - pl + kj * dw;
            if (ih >= 0 && ih < h && iw >= 0 && iw < w) v = x[n * xs_n + ih * xs_h + iw * xs_w + c0 + cc];
        }
        col[i] = v;
    }
}

__global__ void bias_kernel(void *out, int64_t ldo, int out_dtype, int64_t m, int o, const float *bias, int accumulate) {
    const int64_t total = m * o;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / o;
        const int j = (int)(i - r * o);
        const int64_t idx = r * ldo + j;
        float v = bias[j];
        if (accumulate) v += load_out(out, idx, out_dtype);
        store_out(out, idx, out_dtype, v);
    }
}

// One thread an output (pixel, channel); channels fastest, so a warp reads
// 32 neighbouring channels of each tap.  T > 0: 16-bit taps in T planes
// (plane elements apart; the activations' type) whose sum times unit[ch] x
// global is the tap (the dequantized terms of a GPU pack; the planes' sum
// is exact in f32).
template <typename W, int T = 0>
__global__ void dw_kernel(const uint16_t *x, bool bf16, int64_t xs_n, int64_t xs_h, int64_t xs_w, int h, int w, int c,
                          int kh, int kw, int oh, int ow, int sh, int sw, int dh, int dw, int pt, int pl, int64_t m,
                          const W *wt, int64_t wstride, const float *bias, void *out, int64_t ldo, int out_dtype,
                          int accumulate, int64_t plane = 0, const float *unit = nullptr, float global = 1.0f) {
    const int64_t total = m * c;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t px = i / c;
        const int ch = (int)(i - px * c);
        const int x_ = (int)(px % ow);
        const int64_t t = px / ow;
        const int y = (int)(t % oh);
        const int64_t n = t / oh;
        const uint16_t *xp = x + n * xs_n + ch;
        const W *wp = wt + ch * wstride;
        const float u = T > 0 ? unit[ch] * global : 1.0f;
        float acc = 0.f;
        for (int ki = 0; ki < kh; ki++) {
            const int ih = y * sh - pt + ki * dh;
            if (ih < 0 || ih >= h) continue;
            for (int kj = 0; kj < kw; kj++) {
                const int iw = x_ * sw - pl + kj * dw;
                if (iw < 0 || iw >= w) continue;
                float wv;
                if constexpr (T > 0) {
                    wv = 0.0f;
#pragma unroll
                    for (int t = 0; t < T; t++) wv += load16(reinterpret_cast<const uint16_t *>(wp) + t * plane, ki * kw + kj, bf16);
                    wv *= u;
                } else if constexpr (sizeof(W) == 4) {
                    wv = static_cast<float>(wp[ki * kw + kj]);
                } else {
                    wv = load16(reinterpret_cast<const uint16_t *>(wp), ki * kw + kj, bf16);
                }
                acc = fmaf(load16(xp, ih * xs_h + iw * xs_w, bf16), wv, acc);
            }
        }
        const int64_t idx = px * ldo + ch;
        if (bias) acc += bias[ch];
        if (accumulate) acc += load_out(out, idx, out_dtype);
        store_out(out, idx, out_dtype, acc);
    }
}

int grid_for(int64_t total) {
    int64_t b = (total + 255) / 256;
    return (int)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

// The summing kernel for splits > 1 partials [splits][m][o] of g.ws,
// launched as a programmatic dependent of the convolution before it (its
// blocks wait in grid_dep_wait for that grid's writes; the wgmma kernels
// let it launch as soon as all their CTAs have started), so its launch
// overlaps the convolution's tail.  A plain launch where the attribute is
// refused.
cudaError_t split_reduce(const Geo &g, int splits, cudaStream_t st) {
    const int64_t total = (int64_t)g.m * g.o;
    const bool vec = g.o % 4 == 0, narrow = total < ((int64_t)1 << 31);
    void (*kern)(Geo, int) = vec && narrow ? split_reduce_kernel<4, unsigned>
                             : vec         ? split_reduce_kernel<4, int64_t>
                             : narrow      ? split_reduce_kernel<1, unsigned>
                                           : split_reduce_kernel<1, int64_t>;
    return tops_cu::launch_kernel(kern, dim3((unsigned)grid_for(vec ? total / 4 : total)), dim3(256), 0, st, true, 1, g,
                                  splits);
}

template <bool BF16, int BN, bool GEN> int launch_igemm(const Geo &g0, const tops__cu_conv_args *a) {
    Geo g = g0;
    cudaStream_t st = static_cast<cudaStream_t>(a->stream);
    const int smem = kStages * (kBM + BN) * kPad * 2;
    cudaError_t e = cudaFuncSetAttribute(igemm_kernel<BF16, BN, GEN>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    const int gx = (g.m + kBM - 1) / kBM, gy = (g.og + BN - 1) / BN, groups = (int)a->groups;
    const int64_t tiles = (int64_t)gx * gy * groups;
    // Split K until about two CTAs an SM run, at least 4 K tiles a split.
    int splits = 1;
    const int64_t want = 2 * (int64_t)tops__cuda_sm_count(-1);
    if (tiles < want) {
        int64_t s = want / tiles, cap = g.ktiles / 4;
        if (s > cap) s = cap;
        if (s > 64) s = 64;
        splits = s > 1 ? (int)s : 1;
    }
    if ((int64_t)splits * groups > 65535) splits = 1;
    g.kt_per_split = (g.ktiles + splits - 1) / splits;
    splits = (g.ktiles + g.kt_per_split - 1) / g.kt_per_split;
    if (splits < 1) splits = 1;
    g.ws = nullptr;
    if (splits > 1) {
        e = cudaMallocAsync(reinterpret_cast<void **>(&g.ws), (size_t)splits * (size_t)g.m * (size_t)g.o * sizeof(float), st);
        if (e != cudaSuccess) return e;
    }
    dim3 grid(gx, gy, splits * groups);
    igemm_kernel<BF16, BN, GEN><<<grid, kThreads, smem, st>>>(g);
    e = cudaGetLastError();
    if (e == cudaSuccess && splits > 1) {
        e = split_reduce(g, splits, st);
    }
    if (g.ws) {
        cudaError_t f = cudaFreeAsync(g.ws, st);
        if (e == cudaSuccess) e = f;
    }
    return e;
}

template <bool BF16, bool GEN> int launch_width(const Geo &g, const tops__cu_conv_args *a) {
    return g.og <= 64 ? launch_igemm<BF16, 64, GEN>(g, a) : launch_igemm<BF16, 128, GEN>(g, a);
}


// ---- the wgmma implicit GEMM (sm_90a) ---------------------------------------
//
// A CTA computes 128 pixels x BN channels (BN = 64, 128 or 256) of one
// group over its K split.  Warpgroup 0 produces: its 128 threads gather the
// activation tile of a K stage (128 rows x 64 K, one 16-byte piece = 8
// channels of one tap per cp.async, zero-filled outside the input, past M
// or past K) straight into wgmma's 128-byte-swizzled layout, and arrive on
// the stage's full barrier when their copies land (cp.async.mbarrier.arrive
// .noinc); thread 0 also loads the weight tile [BN][64] by TMA (128-byte
// swizzle, zeros past K and past O) onto the same barrier.  Warpgroups 1
// and 2 each multiply 64 of the rows (wgmma m64nBNk16, both operands from
// shared memory, f32 sums in K order) and hand a slot back on its empty
// barrier once the wgmmas that read it have retired.  The epilogue adds the
// bias and the old dest, or writes the split's partial to the workspace
// (summed in split order by split_reduce_kernel: the same bits every run).
constexpr int kWgBM = 128, kWgBK = 64, kWgThreads = 384;

struct WgGeo {
    const uint16_t *x;
    int64_t xs_n, xs_h, xs_w;
    int h, w, cg, og, o, kw, oh, ow, k;
    int sh, sw, dh, dw, pt, pl;
    int m;
    void *out;
    int64_t ldo;
    int out_dtype, accumulate, l1;
    const float *bias;
    float *ws; // split partials [splits][m][o], or NULL
    int kt_per_split, ktiles;
    // Weights in T planes (dequantized terms): plane t's rows start at row
    // t * plane_rows of the weight map; the sums times unit[o] x global.
    int plane_rows;
    const float *unit; // [o] or NULL
    float global;
};

template <int BN, int STAGES, int T = 1> struct WgDims {
    static constexpr int kA = kWgBM * 128, kB = BN * 128 * T, kStage = kA + kB;
    static constexpr int kBytes = 1024 + STAGES * kStage + 2 * STAGES * 8; // 1024: alignment slack
};

#ifdef TOPS_CU_WGMMA
// D[64 x N] += A[64 x 16] * B[N x 16]^T, both K-major 128-byte-swizzled
// shared-memory descriptors (N = 64, 128, 256; 96, 104 for the transposed
// kernel); the direct kernel's N = 112 takes B without swizzle (desc_ns).
template <bool BF16> __device__ __forceinline__ void wg_ss(float (&d)[32], uint64_t da, uint64_t db) {
    if constexpr (BF16)
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, 1, 1, 1, 0, 0;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "l"(da), "l"(db));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, 1, 1, 1, 0, 0;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "l"(da), "l"(db));
}
template <bool BF16> __device__ __forceinline__ void wg_ss(float (&d)[64], uint64_t da, uint64_t db) {
    if constexpr (BF16)
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, 1, 1, 1, 0, 0;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                     : "l"(da), "l"(db));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, 1, 1, 1, 0, 0;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                     : "l"(da), "l"(db));
}
template <bool BF16> __device__ __forceinline__ void wg_ss(float (&d)[128], uint64_t da, uint64_t db) {
    if constexpr (BF16)
        asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, 1, 1, 1, 0, 0;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                     : "l"(da), "l"(db));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, 1, 1, 1, 0, 0;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                     : "l"(da), "l"(db));
}

template <bool BF16> __device__ __forceinline__ void wg_ss(float (&d)[96], uint64_t da, uint64_t db) {
    if constexpr (BF16)
        asm volatile("wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, %96, %97, 1, 1, 1, 0, 0;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
                     : "l"(da), "l"(db));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, %96, %97, 1, 1, 1, 0, 0;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
                     : "l"(da), "l"(db));
}

template <bool BF16> __device__ __forceinline__ void wg_ss(float (&d)[48], uint64_t da, uint64_t db) {
    if constexpr (BF16)
        asm volatile("wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, %48, %49, 1, 1, 1, 0, 0;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
                     : "l"(da), "l"(db));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, %48, %49, 1, 1, 1, 0, 0;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
                     : "l"(da), "l"(db));
}
template <bool BF16> __device__ __forceinline__ void wg_ss(float (&d)[52], uint64_t da, uint64_t db) {
    if constexpr (BF16)
        asm volatile("wgmma.mma_async.sync.aligned.m64n104k16.f32.bf16.bf16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51}, %52, %53, 1, 1, 1, 0, 0;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51])
                     : "l"(da), "l"(db));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n104k16.f32.f16.f16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51}, %52, %53, 1, 1, 1, 0, 0;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51])
                     : "l"(da), "l"(db));
}

template <bool BF16> __device__ __forceinline__ void wg_ss(float (&d)[56], uint64_t da, uint64_t db) {
    if constexpr (BF16)
        asm volatile("wgmma.mma_async.sync.aligned.m64n112k16.f32.bf16.bf16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55}, %56, %57, 1, 1, 1, 0, 0;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
                     : "l"(da), "l"(db));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n112k16.f32.f16.f16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55}, %56, %57, 1, 1, 1, 0, 0;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
                     : "l"(da), "l"(db));
}

__device__ __forceinline__ void wg_cp16(uint32_t dst, const void *src, bool ok, bool l1) {
    if (l1)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
    else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}

// A TMA im2col box's start: the input pixel at the top-left of output
// pixel m's window (w0, h0) in image n.
struct Im2colCorner {
    int w0, h0, n;
};
__device__ __forceinline__ Im2colCorner im2col_corner(const WgGeo &p, int m) {
    const int ow = m % p.ow, t = m / p.ow, oh = t % p.oh;
    return Im2colCorner{ow * p.sw - p.pl, oh * p.sh - p.pt, t / p.oh};
}
// The activation box of K stage k (64 channels of one tap (r, q); C / groups
// a multiple of 64) by TMA im2col from corner c into dst, on bar; cbase:
// the group's first channel.
__device__ __forceinline__ void im2col_stage(unsigned char *dst, const CUtensorMap *map, uint64_t *bar, const WgGeo &p,
                                             Im2colCorner c, int k, int cbase) {
    const int tap = k / p.cg, c0 = k - tap * p.cg, r = tap / p.kw, q = tap - r * p.kw;
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5, %6}], [%2], {%7, %8};" ::"r"(smem_addr(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(cbase + c0), "r"(c.w0), "r"(c.h0),
                 "r"(c.n), "h"((unsigned short)(q * p.dw)), "h"((unsigned short)(r * p.dh))
                 : "memory");
}

#endif

#ifdef TOPS_CU_WGMMA
// A thread's 8 channels of an output row in the staged epilogues: two
// runs of 4, o .. o + 3 and o + hf .. o + hf + 3.  16-bit dest: hf = 4 (8
// neighbours, one 16-byte store); f32 dest or split partials: hf = half the
// `span` channels the row's threads cover, so each of the two 16-byte
// stores is contiguous across the threads (8 neighbours a thread wrote
// each half-line at half the sector use: res5 at batch 32, two K splits,
// 22.9 -> 24.4 us).  k: the thread's place among the span / 8 threads.
__device__ __forceinline__ void wg_lanes8(const WgGeo &p, int k, int span, int &o, int &hf) {
    const bool wide = p.ws || p.out_dtype == TOPS_DT_F32;
    hf = wide ? span / 2 : 4;
    o = wide ? 4 * k : 8 * k;
}
__device__ __forceinline__ int wg_chan(int o, int hf, int k) { return k < 4 ? o + k : o + hf + k - 4; }
// The 8 channels' scale (unit x global) and bias, loaded once.
__device__ __forceinline__ void wg_chan8(const WgGeo &p, int o, int hf, float (&scale)[8], float (&bias)[8]) {
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int c = wg_chan(o, hf, k) < p.o ? wg_chan(o, hf, k) : 0;
        scale[k] = p.unit ? p.unit[c] * p.global : 1.0f;
        bias[k] = p.bias ? p.bias[c] : 0.0f;
    }
}
// Whether all 8 are below og (rel: o's place in its group) and both runs'
// addresses 16-byte aligned.
__device__ __forceinline__ bool wg_vec8(const WgGeo &p, int o, int rel, int hf) {
    const int al = p.ws || p.out_dtype == TOPS_DT_F32 ? 4 : 8;
    return rel + hf + 4 <= p.og && o % al == 0 &&
           (p.ws ? p.o % 4 == 0 : p.ldo % al == 0 && ((uintptr_t)p.out & 15) == 0);
}
// The 8 channels of output row m from the staged sums v (v[0..3] and
// v[hf..hf + 3], 16-byte aligned): times scale, then the split's partial
// (p.ws), or plus bias and the old dest, each step an f32 operation
// rounded once (the old dest read in its type), the sum rounded to dest's;
// 16-byte stores where vec, else channel by channel below og.
__device__ __forceinline__ void wg_store8(const WgGeo &p, int split, int m, int o, int rel, int hf, const float *v,
                                          const float (&scale)[8], const float (&bias)[8], bool vec) {
    const float4 a = *reinterpret_cast<const float4 *>(v), b = *reinterpret_cast<const float4 *>(v + hf);
    float r[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    if (p.unit)
#pragma unroll
        for (int k = 0; k < 8; k++) r[k] = __fmul_rn(r[k], scale[k]);
    if (p.ws) {
        float *w = p.ws + ((int64_t)split * p.m + m) * p.o + o;
        if (vec) {
            *reinterpret_cast<float4 *>(w) = make_float4(r[0], r[1], r[2], r[3]);
            *reinterpret_cast<float4 *>(w + hf) = make_float4(r[4], r[5], r[6], r[7]);
        } else
#pragma unroll
            for (int k = 0; k < 8; k++)
                if (wg_chan(rel, hf, k) < p.og) w[wg_chan(0, hf, k)] = r[k];
        return;
    }
    if (p.bias)
#pragma unroll
        for (int k = 0; k < 8; k++) r[k] = __fadd_rn(r[k], bias[k]);
    const int64_t idx = (int64_t)m * p.ldo + o;
    if (vec && p.out_dtype == TOPS_DT_F32) {
        float4 *lo = reinterpret_cast<float4 *>(static_cast<float *>(p.out) + idx),
               *hi = reinterpret_cast<float4 *>(static_cast<float *>(p.out) + idx + hf);
        if (p.accumulate) {
            const float4 u = *lo, w = *hi;
            r[0] += u.x, r[1] += u.y, r[2] += u.z, r[3] += u.w, r[4] += w.x, r[5] += w.y, r[6] += w.z, r[7] += w.w;
        }
        *lo = make_float4(r[0], r[1], r[2], r[3]);
        *hi = make_float4(r[4], r[5], r[6], r[7]);
        return;
    }
    if (vec) { // hf = 4: 8 neighbours
        uint4 *dst = reinterpret_cast<uint4 *>(static_cast<uint16_t *>(p.out) + idx);
        uint32_t w[4];
        const bool f16 = p.out_dtype == TOPS_DT_F16;
        if (p.accumulate) {
            const uint4 u = *dst;
            const uint32_t uu[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                uint32_t x = uu[k];
                const float2 f = f16 ? __half22float2(*reinterpret_cast<__half2 *>(&x))
                                     : __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&x));
                r[2 * k] += f.x, r[2 * k + 1] += f.y;
            }
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (f16) {
                __half2 h = __floats2half2_rn(r[2 * k], r[2 * k + 1]);
                w[k] = *reinterpret_cast<uint32_t *>(&h);
            } else {
                __nv_bfloat162 h = __floats2bfloat162_rn(r[2 * k], r[2 * k + 1]);
                w[k] = *reinterpret_cast<uint32_t *>(&h);
            }
        }
        *dst = make_uint4(w[0], w[1], w[2], w[3]);
        return;
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
        if (wg_chan(rel, hf, k) >= p.og) continue;
        const int64_t at = idx + wg_chan(0, hf, k);
        float x = r[k];
        if (p.accumulate) x += load_out(p.out, at, p.out_dtype);
        store_out(p.out, at, p.out_dtype, x);
    }
}
// A consumer thread's part of a staged epilogue: its 8 channels among the
// span a row's threads cover (k: its place among them; wg_lanes8), j from
// the tile's first channel n0, rel = n0 + j within the group, o = obase +
// rel in dest, with their scale, bias and vector flag loaded once.
struct WgLanes8 {
    int j, rel, o, hf;
    float scale[8], bias[8];
    bool vec;
    __device__ __forceinline__ WgLanes8(const WgGeo &p, int k, int span, int n0, int obase) {
        wg_lanes8(p, k, span, j, hf);
        rel = n0 + j;
        o = obase + rel;
        wg_chan8(p, o, hf, scale, bias);
        vec = wg_vec8(p, o, rel, hf);
    }
    // Output row m from its staged row (the tile's channels from n0).
    __device__ __forceinline__ void store(const WgGeo &p, int split, int m, const float *row) const {
        wg_store8(p, split, m, o, rel, hf, row + j, scale, bias, vec);
    }
};
// The implicit GEMMs' epilogue after staging: rows m0 .. m0 + rows - 1
// (below p.m) of stage (pitch floats a row), SPAN channels from n0 of the
// group starting at obase, SPAN / 8 threads a row among the 256 consumer
// threads (ct), 2048 / SPAN rows a pass.
template <int SPAN>
__device__ __forceinline__ void wg_store_rows(const WgGeo &p, int split, const float *stage, int pitch, int rows,
                                              int m0, int n0, int obase, int ct) {
    constexpr int kRowThreads = SPAN / 8, kRows = 256 / kRowThreads;
    const WgLanes8 t(p, ct % kRowThreads, SPAN, n0, obase);
    if (t.rel >= p.og) return;
    for (int r = ct / kRowThreads; r < rows; r += kRows) {
        const int m = m0 + r;
        if (m >= p.m) break;
        t.store(p, split, m, stage + r * pitch);
    }
}
#endif

template <bool BF16, int BN, int STAGES, int MINB, bool IM2COL, int T>
__global__ void __launch_bounds__(kWgThreads, MINB)
    wg_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap amap, WgGeo p) {
#ifdef TOPS_CU_WGMMA
    namespace s9 = tops_cu::sm90;
    using D = WgDims<BN, STAGES, T>;
    extern __shared__ __align__(1024) unsigned char wg_smem[];
    unsigned char *base = wg_smem + ((1024 - (smem_addr(wg_smem) & 1023)) & 1023);
    unsigned char *sa = base, *sb = base + STAGES * D::kA;
    uint64_t *full = reinterpret_cast<uint64_t *>(base + STAGES * D::kStage), *empty = full + STAGES;
    const int tid = threadIdx.x, wgi = tid >> 7;
    const int groups = p.o / p.og;
    const int split = blockIdx.z / groups, grp = blockIdx.z % groups;
    const int m0 = blockIdx.x * kWgBM, n0 = blockIdx.y * BN;
    const int kt0 = split * p.kt_per_split;
    const int kt1 = min(kt0 + p.kt_per_split, p.ktiles);
    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) {
            s9::mbar_init(&full[s], IM2COL ? 1 : 129); // (128 producer threads' copies +) the TMA's expect_tx
            s9::mbar_init(&empty[s], 8); // one arrive per consumer warp
        }
        s9::mbar_init_fence();
    }
    __syncthreads();
    s9::grid_dep_launch(); // a K split's summing kernel may launch (it waits for this grid)
    s9::grid_dep_wait();   // a programmatic dependent (launch_splits): the previous kernel's writes
    if (wgi == 0 && IM2COL) {
        // Producer, TMA im2col: one thread loads both tiles of a stage.  A
        // stage is one tap (r, q) and 64 channels c0.. of it (C / groups a
        // multiple of 64); the activation box starts at the tile's first
        // output pixel's top-left input pixel and walks 128 output pixels.
        if (tid == 0) {
            const Im2colCorner c = im2col_corner(p, m0);
            const int wrow = grp * p.og + n0;
            for (int kt = kt0, it = 0; kt < kt1; kt++, it++) {
                const int s = it % STAGES;
                if (it >= STAGES) s9::mbar_wait(&empty[s], ((it / STAGES) + 1) & 1);
                const int k = kt * kWgBK;
                s9::mbar_expect_tx(&full[s], (uint32_t)(D::kA + D::kB));
                im2col_stage(sa + s * D::kA, &amap, &full[s], p, c, k, grp * p.cg);
#pragma unroll
                for (int t = 0; t < T; t++)
                    s9::tma_load_2d(sb + s * D::kB + t * BN * 128, &wmap, &full[s], k, wrow + t * p.plane_rows);
            }
        }
    } else if (wgi == 0) {
        // Producer: piece j of rows rs + 16 i (i < 8); a warp writes 4 whole rows.
        const int j = tid & 7, rs = tid >> 3;
        const uint32_t swz = (uint32_t)((j ^ (rs & 7)) << 4);
        int ihb[8], iwb[8];
        int64_t xb[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int m = m0 + rs + 16 * i;
            if (m < p.m) {
                const int ow = m % p.ow, t = m / p.ow, oh = t % p.oh, n = t / p.oh;
                ihb[i] = oh * p.sh - p.pt;
                iwb[i] = ow * p.sw - p.pl;
                xb[i] = (int64_t)n * p.xs_n + (int64_t)ihb[i] * p.xs_h + (int64_t)iwb[i] * p.xs_w + (int64_t)grp * p.cg;
            } else {
                ihb[i] = -(1 << 29); // fails every bounds check
                iwb[i] = 0;
                xb[i] = 0;
            }
        }
        const uint32_t sa_u = smem_addr(sa) + (uint32_t)(rs * 128) + swz;
        const bool l1 = p.l1 != 0;
        const int wrow = grp * p.og + n0;
        for (int kt = kt0, it = 0; kt < kt1; kt++, it++) {
            const int s = it % STAGES;
            if (it >= STAGES) s9::mbar_wait(&empty[s], ((it / STAGES) + 1) & 1);
            if (tid == 0) {
                s9::mbar_expect_tx(&full[s], (uint32_t)D::kB);
#pragma unroll
                for (int t = 0; t < T; t++)
                    s9::tma_load_2d(sb + s * D::kB + t * BN * 128, &wmap, &full[s], kt * kWgBK, wrow + t * p.plane_rows);
            }
            const int k = kt * kWgBK + j * 8;
            const bool kok = k < p.k;
            const int tap = kok ? k / p.cg : 0, cc = k - tap * p.cg, r = tap / p.kw, q = tap - r * p.kw;
            const int dy = r * p.dh, dx = q * p.dw;
            const int64_t off = (int64_t)dy * p.xs_h + (int64_t)dx * p.xs_w + cc;
            const uint32_t dst = sa_u + (uint32_t)(s * D::kA);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int ih = ihb[i] + dy, iw = iwb[i] + dx;
                const bool ok = kok && (unsigned)ih < (unsigned)p.h && (unsigned)iw < (unsigned)p.w;
                wg_cp16(dst + (uint32_t)(i * 16 * 128), ok ? p.x + xb[i] + off : p.x, ok, l1);
            }
            asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(&full[s])) : "memory");
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
    } else {
        // Consumers.
        const int cw = wgi - 1;
        const bool lane0 = (tid & 31) == 0;
        float d[BN / 2];
    #pragma unroll
        for (int i = 0; i < BN / 2; i++) d[i] = 0.0f;
        const int nkt = kt1 - kt0;
        for (int it = 0; it < nkt; it++) {
            const int s = it % STAGES;
            s9::mbar_wait(&full[s], (it / STAGES) & 1);
            if (!IM2COL) s9::fence_proxy_async(); // the cp.async (generic proxy) writes, before wgmma reads them
            s9::wgmma_fence();
            const unsigned char *a = sa + s * D::kA + cw * 64 * 128, *b = sb + s * D::kB;
    #pragma unroll
            for (int kk = 0; kk < 4; kk++)
    #pragma unroll
                for (int t = 0; t < T; t++) // the terms of one weight in turn, into the same sums
                    wg_ss<BF16>(d, s9::desc_sw128(a + 32 * kk), s9::desc_sw128(b + t * BN * 128 + 32 * kk));
            s9::wgmma_commit();
            s9::wgmma_wait<1>();
            if (it > 0 && lane0) s9::mbar_arrive(&empty[(it - 1) % STAGES]);
        }
        s9::wgmma_wait<0>();
        s9::fence_regs(d);
        // Both consumer warpgroups past their last wgmma: the ring is idle
        // (every stage was waited for) and becomes the staging [128][BN + 4]
        // f32; then 8 channels a thread (wg_store8).  H100, ResNet-50 res3 at
        // batch 32, strict int4-g128 (two terms): 46.4 us with two channels
        // a thread stored from the registers, 28.5 with no stores at all.
        asm volatile("bar.sync 1, 256;" ::: "memory");
        constexpr int kPitch = BN + 4;
        static_assert(kWgBM * kPitch * 4 <= STAGES * D::kStage, "staging exceeds the ring");
        float *stage = reinterpret_cast<float *>(base);
        // d[4 c + 2 h + e] is row 16 warp + g + 8 h, channel 8 c + 2 t + e.
        const int warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    #pragma unroll
        for (int c = 0; c < BN / 8; c++)
    #pragma unroll
            for (int h = 0; h < 2; h++)
                *reinterpret_cast<float2 *>(stage + (cw * 64 + warp * 16 + g + 8 * h) * kPitch + 8 * c + 2 * t4) =
                    make_float2(d[4 * c + 2 * h], d[4 * c + 2 * h + 1]);
        asm volatile("bar.sync 1, 256;" ::: "memory");
        wg_store_rows<BN>(p, split, stage, kPitch, kWgBM, m0, n0, grp * p.og, tid - 128);
    }
#endif
}

// Either wgmma kernel's launch (kern on the grid x, y, splits x groups) with
// its K split: each split kt_per_split stages, the partials in a
// stream-ordered workspace summed in split order by split_reduce_kernel
// (which adds bias and the old dest).
template <typename Kern>
int launch_splits(Kern kern, int smem, dim3 grid, const WgGeo &g0, const CUtensorMap &map, const CUtensorMap &amap,
                  int splits, int groups, cudaStream_t st) {
    WgGeo g = g0;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    g.kt_per_split = (g.ktiles + splits - 1) / splits;
    splits = (g.ktiles + g.kt_per_split - 1) / g.kt_per_split; // every split has K stages
    g.ws = nullptr;
    if (splits > 1) {
        e = cudaMallocAsync(reinterpret_cast<void **>(&g.ws), (size_t)splits * (size_t)g.m * (size_t)g.o * sizeof(float), st);
        if (e != cudaSuccess) return e;
    }
    grid.z = (unsigned)(splits * groups);
    e = tops_cu::launch_kernel(kern, grid, dim3(kWgThreads), (size_t)smem, st, true, 1, map, amap, g);
    if (e == cudaSuccess && splits > 1) {
        Geo r;
        memset(&r, 0, sizeof r);
        r.m = g.m, r.o = g.o, r.ws = g.ws, r.ldo = g.ldo, r.bias = g.bias, r.accumulate = g.accumulate;
        r.out = g.out, r.out_dtype = g.out_dtype;
        e = split_reduce(r, splits, st);
    }
    if (g.ws) {
        cudaError_t f = cudaFreeAsync(g.ws, st);
        if (e == cudaSuccess) e = f;
    }
    return e;
}

template <bool BF16, int BN, int STAGES, int MINB, bool IM2COL, int T = 1>
int launch_wg(const WgGeo &g, const CUtensorMap &map, const CUtensorMap &amap, int splits, int groups, cudaStream_t st) {
    using D = WgDims<BN, STAGES, T>;
    return launch_splits(wg_kernel<BF16, BN, STAGES, MINB, IM2COL, T>, D::kBytes,
                         dim3((g.m + kWgBM - 1) / kWgBM, (g.og + BN - 1) / BN, 1), g, map, amap, splits, groups, st);
}

// ---- the transposed wgmma implicit GEMM (sm_90a) ----------------------------
//
// The same product with the roles swapped: a CTA computes 128 output
// channels x PN output pixels (PN = 96, 104, 128, 192 or 256), each consumer
// warpgroup 64 channels over all PN pixels (wgmma m64nPNk16: the weights the
// A operand, the TMA im2col tile of PN pixels the B operand, both K-major
// 128-byte-swizzled).  A wide N reads fewer shared-memory bytes a product
// than the pixel-major kernel's 64-channel tiles (m64n64: the A and B tiles
// every 32 cycles, all of shared memory's 128 bytes a cycle), and one CTA
// covers 128 channels.  CH = 64 (64 channels or fewer): both warpgroups
// take the CTA's 64 channels, each over half its PN pixels (m64n(PN/2)),
// the pixel tile loaded as two boxes of PN / 2.  TMA im2col only (C /
// groups a multiple of 64), groups 1, one weight term.  The sums are staged
// through the idle ring as [pixel][channel] f32 and stored 8 channels a
// thread (wg_store8: bias, accumulate, unit x global, or the split's
// partial; 16-byte stores.  H100, batch 32, against two channels a thread:
// res3 / res4 18.7 / 18.9 us -> 14.7 / 16.8).
template <int CH, int PN, int STAGES> struct WgtDims {
    static constexpr int kW = CH * 128, kX = PN * 128, kStage = kW + kX;
    static constexpr int kNW = CH == 128 ? PN : PN / 2; // pixels a warpgroup's wgmma covers
    static constexpr int kBox = CH == 128 ? PN : PN / 2; // pixels a TMA im2col box
    static_assert(kNW % 8 == 0 && kNW <= 256 && kBox % 8 == 0, "a wgmma N of 8 to 256, boxes of whole swizzle rows");
    static constexpr int kPitch = CH + 4; // staging row (floats): 4 extra spread a warp's rows over the banks
    static_assert(PN * kPitch * 4 <= STAGES * kStage, "staging exceeds the ring");
    static constexpr int kBytes = 1024 + STAGES * kStage + 2 * STAGES * 8;
};

template <bool BF16, int CH, int PN, int STAGES>
__global__ void __launch_bounds__(kWgThreads, 1)
    wgt_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap amap, WgGeo p) {
#ifdef TOPS_CU_WGMMA
    namespace s9 = tops_cu::sm90;
    using D = WgtDims<CH, PN, STAGES>;
    extern __shared__ __align__(1024) unsigned char wg_smem[];
    unsigned char *base = wg_smem + ((1024 - (smem_addr(wg_smem) & 1023)) & 1023);
    unsigned char *sw = base, *sx = base + STAGES * D::kW;
    uint64_t *full = reinterpret_cast<uint64_t *>(base + STAGES * D::kStage), *empty = full + STAGES;
    const int tid = threadIdx.x, wgi = tid >> 7;
    const int split = blockIdx.z;
    const int m0 = blockIdx.x * PN, n0 = blockIdx.y * CH;
    const int kt0 = split * p.kt_per_split;
    const int kt1 = min(kt0 + p.kt_per_split, p.ktiles);
    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) {
            s9::mbar_init(&full[s], 1);
            s9::mbar_init(&empty[s], 8); // one arrive per consumer warp
        }
        s9::mbar_init_fence();
    }
    __syncthreads();
    s9::grid_dep_launch(); // a K split's summing kernel may launch (it waits for this grid)
    s9::grid_dep_wait();   // a programmatic dependent (launch_splits): the previous kernel's writes
    if (wgi == 0) {
        if (tid == 0) { // one thread loads the tiles of a stage
            constexpr int kBoxes = PN / D::kBox;
            Im2colCorner c[kBoxes]; // each box's first output pixel's
#pragma unroll
            for (int b = 0; b < kBoxes; b++) c[b] = im2col_corner(p, m0 + b * D::kBox);
            for (int kt = kt0, it = 0; kt < kt1; kt++, it++) {
                const int s = it % STAGES;
                if (it >= STAGES) s9::mbar_wait(&empty[s], ((it / STAGES) + 1) & 1);
                const int k = kt * kWgBK;
                s9::mbar_expect_tx(&full[s], (uint32_t)D::kStage);
                s9::tma_load_2d(sw + s * D::kW, &wmap, &full[s], k, n0);
#pragma unroll
                for (int b = 0; b < kBoxes; b++)
                    im2col_stage(sx + s * D::kX + b * D::kBox * 128, &amap, &full[s], p, c[b], k, 0);
            }
        }
    } else {
        const int cw = wgi - 1;
        const bool lane0 = (tid & 31) == 0;
        // this warpgroup's channels and pixels within the CTA's
        const int cbase = CH == 128 ? cw * 64 : 0, pbase = CH == 128 ? 0 : cw * D::kNW;
        float d[D::kNW / 2];
#pragma unroll
        for (int i = 0; i < D::kNW / 2; i++) d[i] = 0.0f;
        const int nkt = kt1 - kt0;
        for (int it = 0; it < nkt; it++) {
            const int s = it % STAGES;
            s9::mbar_wait(&full[s], (it / STAGES) & 1);
            s9::wgmma_fence();
            const unsigned char *a = sw + s * D::kW + cbase * 128, *b = sx + s * D::kX + pbase * 128;
#pragma unroll
            for (int kk = 0; kk < 4; kk++) wg_ss<BF16>(d, s9::desc_sw128(a + 32 * kk), s9::desc_sw128(b + 32 * kk));
            s9::wgmma_commit();
            // 128 channels: the slot goes back as soon as this stage's own
            // wgmmas retire (the other warpgroup's keep the tensor cores
            // busy), one more stage in flight than with wait 1 (H100, res5 at
            // batch 32: 23.5-24.0 us against 25.7; res4 19.0 / 19.6; at 64
            // channels, where both warpgroups share each weight stage, res2
            // measured 2 % slower: wait 1 there).
            if constexpr (CH == 128) {
                s9::wgmma_wait<0>();
                if (lane0) s9::mbar_arrive(&empty[s]);
            } else {
                s9::wgmma_wait<1>();
                if (it > 0 && lane0) s9::mbar_arrive(&empty[(it - 1) % STAGES]);
            }
        }
        s9::wgmma_wait<0>();
        s9::fence_regs(d);
        // Both warpgroups past their last wgmma: the ring is idle (every
        // stage was waited for), and becomes the staging [PN][kPitch] f32.
        asm volatile("bar.sync 1, 256;" ::: "memory");
        float *stage = reinterpret_cast<float *>(base);
        // d[4 c + 2 h + e] is channel cbase + 16 warp + g + 8 h, pixel pbase + 8 c + 2 t + e.
        const int warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
#pragma unroll
        for (int c = 0; c < D::kNW / 8; c++)
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    stage[(pbase + 8 * c + 2 * t4 + e) * D::kPitch + cbase + warp * 16 + g + 8 * h] =
                        d[4 * c + 2 * h + e];
        asm volatile("bar.sync 1, 256;" ::: "memory");
        wg_store_rows<CH>(p, split, stage, D::kPitch, PN, m0, n0, 0, tid - 128);
    }
#endif
}

template <bool BF16, int CH, int PN, int STAGES>
int launch_wgt(const WgGeo &g, const CUtensorMap &map, const CUtensorMap &amap, int splits, cudaStream_t st) {
    return launch_splits(wgt_kernel<BF16, CH, PN, STAGES>, WgtDims<CH, PN, STAGES>::kBytes,
                         dim3((g.m + PN - 1) / PN, (g.og + CH - 1) / CH, 1), g, map, amap, splits, 1, st);
}

// ---- the direct 3x3 kernel (sm_90a) ------------------------------------------
//
// 3x3, stride 1, dilation 1, groups 1, C = 64, O <= 64, one weight term
// (ResNet's 56x56x64 stage and its like).  The implicit GEMMs above load
// each input pixel once a tap (nine times); here a CTA loads all nine taps'
// weights once (9 x [64][64], 128-byte swizzled: wgmma's A operand) and then
// walks output tiles of 8 rows x 14 columns of one image (persistent: tile
// blockIdx.x, then every gridDim.x-th).  Its producer thread loads a tile's
// input halo, 10 rows x 16 columns, by TMA as eight boxes of 8 channels
// [column][row][8 channels] (no swizzle, zeros outside the image; on an
// H100 7 % faster at batch 32 than the producer warpgroup gathering the
// same pieces by cp.async): for tap (r, q), the 8 output rows of output
// column x read halo column x + q, rows r .. r + 7, which is one wgmma core
// matrix (8 rows of 16 bytes, contiguous); columns lie 160 bytes apart (the
// descriptor's SBO), the planes 2560 (LBO).  So every tap's B operand (112
// pixels x 16 channels, pixel 8 x + y) is the halo itself at an offset,
// and the input crosses L2 once plus the halo's 43 %.  The consumer
// warpgroups take the tiles in turn (each its own ring slot): 36 wgmma
// m64n112k16 (9 taps x 4 k16 steps), the slot back, then the epilogue
// through its own staging [112][68] f32, 8 channels a thread (wg_store8)
// while the other warpgroup multiplies.
constexpr int kDcRows = 8, kDcCols = 14, kDcPx = kDcRows * kDcCols; // an output tile
constexpr int kDcHaloH = kDcRows + 2, kDcHaloW = kDcCols + 2;
constexpr int kDcPlane = kDcHaloW * kDcHaloH * 16; // 8 channels of the halo, bytes
constexpr int kDcHalo = 8 * kDcPlane, kDcW = 9 * 64 * 128, kDcPitch = 68;
constexpr int kDcStaging = kDcPx * kDcPitch * 4;
static_assert(kDcPlane % 128 == 0, "TMA destinations 128-byte aligned");
template <int S> struct DcDims {
    static constexpr int kBytes = 1024 + kDcW + S * kDcHalo + 2 * kDcStaging + (2 * S + 1) * 8;
};

// A tile number's column, row and image (x fastest).
struct dc_tile {
    int x, y, n;
    __device__ __forceinline__ dc_tile(int tile, int tiles_x, int tiles_y)
        : x(tile % tiles_x), y(tile / tiles_x % tiles_y), n(tile / tiles_x / tiles_y) {}
};
template <bool BF16, int S>
__global__ void __launch_bounds__(kWgThreads, 1)
    dc_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap, WgGeo p, int tiles_x,
              int tiles_y, int tiles) {
#ifdef TOPS_CU_WGMMA
    namespace s9 = tops_cu::sm90;
    extern __shared__ __align__(1024) unsigned char wg_smem[];
    unsigned char *base = wg_smem + ((1024 - (smem_addr(wg_smem) & 1023)) & 1023);
    unsigned char *sw = base, *sx = base + kDcW;
    float *staging = reinterpret_cast<float *>(sx + S * kDcHalo);
    uint64_t *full = reinterpret_cast<uint64_t *>(sx + S * kDcHalo + 2 * kDcStaging), *empty = full + S,
             *wbar = empty + S;
    const int tid = threadIdx.x, wgi = tid >> 7;
    if (tid == 0) {
        for (int s = 0; s < S; s++) {
            s9::mbar_init(&full[s], 1);
            s9::mbar_init(&empty[s], 4); // one arrive per warp of the consuming warpgroup
        }
        s9::mbar_init(wbar, 1);
        s9::mbar_init_fence();
    }
    __syncthreads();
    s9::grid_dep_wait(); // a programmatic dependent (the launch): the previous kernel's writes
    if (wgi == 0) {
        if (tid == 0) {
            s9::mbar_expect_tx(wbar, (uint32_t)kDcW);
            for (int t = 0; t < 9; t++) s9::tma_load_2d(sw + t * 8192, &wmap, wbar, t * 64, 0);
            int it = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, it++) {
                const int s = it % S;
                if (it >= S) s9::mbar_wait(&empty[s], ((it / S) + 1) & 1);
                const dc_tile dt(tile, tiles_x, tiles_y);
                const int tx = dt.x, ty = dt.y, n = dt.n;
                s9::mbar_expect_tx(&full[s], (uint32_t)kDcHalo);
#pragma unroll
                for (int cp = 0; cp < 8; cp++) // zeros outside the image: the padding
                    s9::tma_load_4d(sx + s * kDcHalo + cp * kDcPlane, &xmap, &full[s], cp * 8, ty * kDcRows - p.pt,
                                    tx * kDcCols - p.pl, n);
            }
        }
    } else {
        const int cw = wgi - 1, ct = tid & 127, warp = ct >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
        float *stage = staging + cw * (kDcPx * kDcPitch);
        const uint64_t da0 = s9::desc_sw128(sw);
        // The epilogue's thread: 8 of the 64 channels (WgLanes8) of pixels
        // ps, ps + 16, ...
        const int ps = ct >> 3;
        const WgLanes8 lanes(p, ct & 7, 64, 0, 0);
        s9::mbar_wait(wbar, 0);
        int it = cw;
        for (int tile = blockIdx.x + cw * gridDim.x; tile < tiles; tile += 2 * gridDim.x, it += 2) {
            const int s = it % S;
            s9::mbar_wait(&full[s], (it / S) & 1);
            const uint64_t db0 = s9::desc_ns(sx + s * kDcHalo, kDcPlane, kDcHaloH * 16);
            float d[kDcPx / 2];
#pragma unroll
            for (int i = 0; i < kDcPx / 2; i++) d[i] = 0.0f;
            s9::wgmma_fence();
#pragma unroll
            for (int tap = 0; tap < 9; tap++) {
                const int r = tap / 3, q = tap % 3;
#pragma unroll
                for (int kk = 0; kk < 4; kk++) // descriptors count 16-byte units
                    wg_ss<BF16>(d, da0 + (uint64_t)((tap * 8192 + 32 * kk) >> 4),
                                db0 + (uint64_t)((2 * kk * kDcPlane + (q * kDcHaloH + r) * 16) >> 4));
            }
            s9::wgmma_commit();
            s9::wgmma_wait<0>();
            s9::fence_regs(d);
            if (lane == 0) s9::mbar_arrive(&empty[s]);
            // d[4 c + 2 h + e] is channel 16 warp + g + 8 h, pixel 8 c + 2 t4 + e (column c, row 2 t4 + e)
#pragma unroll
            for (int c = 0; c < kDcCols; c++)
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        stage[(8 * c + 2 * t4 + e) * kDcPitch + warp * 16 + g + 8 * h] = d[4 * c + 2 * h + e];
            asm volatile("bar.sync %0, 128;" ::"r"(2 + cw) : "memory");
            // 8 threads a pixel, 16 pixels a pass.  Not unrolled: the 7 copies
            // of wg_store8 made res2 at batch 32 20.3 us against 17.2 (H100;
            // wg_store8 out of line: 24.5).
            const dc_tile dt(tile, tiles_x, tiles_y);
            const int tx = dt.x, ty = dt.y, n = dt.n;
            if (lanes.rel < p.og)
#pragma unroll 1
                for (int i = 0; i < kDcPx / 16; i++) {
                    const int px = ps + 16 * i, oy = ty * kDcRows + (px & 7), ox = tx * kDcCols + (px >> 3);
                    if (oy < p.oh && ox < p.ow) lanes.store(p, 0, (n * p.oh + oy) * p.ow + ox, stage + px * kDcPitch);
                }
            asm volatile("bar.sync %0, 128;" ::"r"(2 + cw) : "memory"); // staging read before the next tile writes it
        }
    }
#endif
}

// Stages by width and terms: at most ~192 KB of ring, two CTAs an SM at
// width 64 where they fit.
template <bool BF16, bool IM2COL>
int launch_wg_bn(const WgGeo &g, const CUtensorMap &map, const CUtensorMap &amap, int bn, int splits, int groups,
                 int terms, cudaStream_t st) {
    if (terms > 1) {
        if (bn == 256) return cudaErrorNotSupported;
        if constexpr (BF16) {
            if (terms != 3) return cudaErrorNotSupported;
            return bn == 64 ? launch_wg<BF16, 64, 4, 1, IM2COL, 3>(g, map, amap, splits, groups, st)
                            : launch_wg<BF16, 128, 3, 1, IM2COL, 3>(g, map, amap, splits, groups, st);
        } else {
            if (terms != 2) return cudaErrorNotSupported;
            return bn == 64 ? launch_wg<BF16, 64, 3, 2, IM2COL, 2>(g, map, amap, splits, groups, st)
                            : launch_wg<BF16, 128, 4, 1, IM2COL, 2>(g, map, amap, splits, groups, st);
        }
    }
    if (bn == 64) return launch_wg<BF16, 64, 4, 2, IM2COL>(g, map, amap, splits, groups, st);
    if (bn == 128) return launch_wg<BF16, 128, 6, 1, IM2COL>(g, map, amap, splits, groups, st);
    return launch_wg<BF16, 256, 4, 1, IM2COL>(g, map, amap, splits, groups, st);
}

// The driver's cuTensorMapEncodeIm2col through the runtime (no -lcuda); NULL
// when the driver lacks it.
PFN_cuTensorMapEncodeIm2col_v12000 im2col_encoder() {
    static PFN_cuTensorMapEncodeIm2col_v12000 fn = nullptr;
    if (!fn) {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeIm2col", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = reinterpret_cast<PFN_cuTensorMapEncodeIm2col_v12000>(f);
        (void)cudaGetLastError();
    }
    return fn;
}

// The activations as a TMA im2col map: NHWC dims {c, w, h, n}, a box of 64
// channels x `pixels` output pixels (128: the pixel-major kernel), the pixel walk bounded by the output
// positions (lower corner -pad, upper the last output's top-left input
// pixel), the convolution strides as element strides; false where the
// driver refuses (corners outside [-128, 127], strides above 8, ...).
bool encode_im2col(CUtensorMap *map, const tops__cu_conv_args *a, int pixels = kWgBM) {
    PFN_cuTensorMapEncodeIm2col_v12000 enc = im2col_encoder();
    if (!enc) return false;
    const cuuint64_t dims[4] = {(cuuint64_t)a->c, (cuuint64_t)a->w, (cuuint64_t)a->h, (cuuint64_t)a->n};
    const cuuint64_t strides[3] = {(cuuint64_t)a->xs_w * 2, (cuuint64_t)a->xs_h * 2, (cuuint64_t)a->xs_n * 2};
    const int lower[2] = {(int)-a->pl, (int)-a->pt};
    const int upper[2] = {(int)((a->ow - 1) * a->sw - a->pl - (a->w - 1)), (int)((a->oh - 1) * a->sh - a->pt - (a->h - 1))};
    const cuuint32_t estr[4] = {1, (cuuint32_t)a->sw, (cuuint32_t)a->sh, 1};
    return enc(map, a->bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
               const_cast<void *>(a->x), dims, strides, lower, upper, (cuuint32_t)kWgBK, (cuuint32_t)pixels, estr,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The wgmma kernels' geometry from the launch arguments.
WgGeo wg_geo(const tops__cu_conv_args *a, const tops__cu_conv_weights *wt) {
    WgGeo g;
    memset(&g, 0, sizeof g);
    g.x = static_cast<const uint16_t *>(a->x);
    g.xs_n = a->xs_n, g.xs_h = a->xs_h, g.xs_w = a->xs_w;
    g.h = (int)a->h, g.w = (int)a->w, g.cg = (int)(a->c / a->groups), g.og = (int)(a->o / a->groups);
    g.o = (int)a->o, g.kw = (int)a->kw, g.oh = (int)a->oh, g.ow = (int)a->ow, g.k = (int)a->k;
    g.sh = (int)a->sh, g.sw = (int)a->sw, g.dh = (int)a->dh, g.dw = (int)a->dw, g.pt = (int)a->pt, g.pl = (int)a->pl;
    g.m = (int)(a->n * a->oh * a->ow);
    g.out = a->out;
    g.ldo = a->ldo;
    g.out_dtype = a->out_dtype;
    g.accumulate = a->accumulate;
    g.l1 = a->wg_l1;
    g.bias = a->bias;
    g.ktiles = (g.k + kWgBK - 1) / kWgBK;
    g.plane_rows = (int)wt->plane_rows;
    g.unit = wt->unit;
    g.global = wt->global;
    return g;
}

// The weights [o][k] (wt->terms planes), row stride ldw, as boxes of 64 K x
// `rows` rows, 128-byte swizzle, zeros past k and past the last plane's row
// o (a tile's rows past o in the planes before read the next plane: sums
// never stored).
bool wg_weight_map(CUtensorMap *map, const tops__cu_conv_args *a, const tops__cu_conv_weights *wt, int rows) {
    const int terms = wt->terms < 1 ? 1 : wt->terms;
    const cuuint64_t dims[2] = {(cuuint64_t)a->k, (cuuint64_t)((terms - 1) * wt->plane_rows + a->o)},
                     strides[1] = {(cuuint64_t)wt->ldw * 2};
    const cuuint32_t box[2] = {(cuuint32_t)kWgBK, (cuuint32_t)rows};
    return tops_cu::sm90::encode_sw128(map, a->bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                       2, wt->w, dims, strides, box, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
}

// The direct kernel's halo map: NHWC as dims {c, h, w, n} (rows before
// columns, so a box lands [column][row][8 channels]), boxes of 8 channels x
// kDcHaloH rows x kDcHaloW columns of one image, no swizzle, zeros outside.
bool dc_halo_map(CUtensorMap *map, const tops__cu_conv_args *a) {
    const cuuint64_t dims[4] = {(cuuint64_t)a->c, (cuuint64_t)a->h, (cuuint64_t)a->w, (cuuint64_t)a->n};
    const cuuint64_t strides[3] = {(cuuint64_t)a->xs_h * 2, (cuuint64_t)a->xs_w * 2, (cuuint64_t)a->xs_n * 2};
    const cuuint32_t box[4] = {8, (cuuint32_t)kDcHaloH, (cuuint32_t)kDcHaloW, 1};
    return tops_cu::sm90::encode_tiled(map, a->bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                       4, a->x, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_NONE,
                                       CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
}

} // namespace

extern "C" int tops__cu_conv_igemm_launch(const tops__cu_conv_args *a, const void *w, int64_t ldw) {
    Geo g;
    g.x = static_cast<const uint16_t *>(a->x);
    g.xs_n = a->xs_n, g.xs_h = a->xs_h, g.xs_w = a->xs_w;
    g.h = (int)a->h, g.w = (int)a->w, g.c = (int)a->c, g.cg = (int)(a->c / a->groups), g.og = (int)(a->o / a->groups);
    g.o = (int)a->o, g.kh = (int)a->kh, g.kw = (int)a->kw, g.oh = (int)a->oh, g.ow = (int)a->ow, g.k = (int)a->k;
    g.sh = (int)a->sh, g.sw = (int)a->sw, g.dh = (int)a->dh, g.dw = (int)a->dw, g.pt = (int)a->pt, g.pl = (int)a->pl;
    g.m = (int)(a->n * a->oh * a->ow);
    g.wt = static_cast<const uint16_t *>(w);
    g.ldw = ldw;
    g.out = a->out;
    g.ldo = a->ldo;
    g.out_dtype = a->out_dtype;
    g.accumulate = a->accumulate;
    g.bias = a->bias;
    g.ws = nullptr;
    g.ktiles = (g.k + kBK - 1) / kBK;
    g.kt_per_split = g.ktiles;
    if (g.m == 0 || g.o == 0) return cudaSuccess;
    // 16-byte pieces: C / groups, the pixel strides and ldw multiples of 8, both bases 16-byte aligned
    const bool vec = g.cg % 8 == 0 && a->xs_n % 8 == 0 && a->xs_h % 8 == 0 && a->xs_w % 8 == 0 && ldw % 8 == 0 &&
                     ((uintptr_t)a->x & 15) == 0 && ((uintptr_t)w & 15) == 0;
    if (a->bf16) return vec ? launch_width<true, false>(g, a) : launch_width<true, true>(g, a);
    return vec ? launch_width<false, false>(g, a) : launch_width<false, true>(g, a);
}

extern "C" int tops__cu_conv_im2col_launch(const tops__cu_conv_args *a, int64_t g, int64_t m0, int64_t rows, void *col,
                                           int64_t ldc) {
    const int cg = (int)(a->c / a->groups);
    im2col_kernel<<<grid_for(rows * ldc), 256, 0, static_cast<cudaStream_t>(a->stream)>>>(
        static_cast<const uint16_t *>(a->x), a->xs_n, a->xs_h, a->xs_w, (int)a->h, (int)a->w, cg, (int)(g * cg),
        (int)a->kw, (int)a->oh, (int)a->ow, (int)a->k, (int)a->sh, (int)a->sw, (int)a->dh, (int)a->dw, (int)a->pt,
        (int)a->pl, m0, rows, static_cast<uint16_t *>(col), ldc);
    return cudaGetLastError();
}

extern "C" int tops__cu_conv_bias_launch(const tops__cu_conv_args *a) {
    const int64_t m = a->n * a->oh * a->ow;
    bias_kernel<<<grid_for(m * a->o), 256, 0, static_cast<cudaStream_t>(a->stream)>>>(a->out, a->ldo, a->out_dtype, m,
                                                                                     (int)a->o, a->bias, a->accumulate);
    return cudaGetLastError();
}

extern "C" int tops__cu_conv_dw_terms_launch(const tops__cu_conv_args *a, const tops__cu_conv_weights *t) {
    const int64_t m = a->n * a->oh * a->ow;
    cudaStream_t st = static_cast<cudaStream_t>(a->stream);
    const uint16_t *x = static_cast<const uint16_t *>(a->x), *w = static_cast<const uint16_t *>(t->w);
    const int64_t plane = t->plane_rows * t->ldw;
#define TOPS_DW_TERMS(T)                                                                                               \
    dw_kernel<uint16_t, T><<<grid_for(m * a->c), 256, 0, st>>>(                                                       \
        x, a->bf16 != 0, a->xs_n, a->xs_h, a->xs_w, (int)a->h, (int)a->w, (int)a->c, (int)a->kh, (int)a->kw,          \
        (int)a->oh, (int)a->ow, (int)a->sh, (int)a->sw, (int)a->dh, (int)a->dw, (int)a->pt, (int)a->pl, m, w, t->ldw, \
        a->bias, a->out, a->ldo, a->out_dtype, a->accumulate, plane, t->unit, t->global)
    if (t->terms == 1) TOPS_DW_TERMS(1);
    else if (t->terms == 2) TOPS_DW_TERMS(2);
    else if (t->terms == 3) TOPS_DW_TERMS(3);
    else return cudaErrorInvalidValue;
#undef TOPS_DW_TERMS
    return cudaGetLastError();
}

extern "C" int tops__cu_conv_dw_launch(const tops__cu_conv_args *a, const void *w, tops_dtype wdtype, int64_t wstride) {
    const int64_t m = a->n * a->oh * a->ow;
    cudaStream_t st = static_cast<cudaStream_t>(a->stream);
    const uint16_t *x = static_cast<const uint16_t *>(a->x);
#define TOPS_DW_ARGS                                                                                                  \
    x, a->bf16 != 0, a->xs_n, a->xs_h, a->xs_w, (int)a->h, (int)a->w, (int)a->c, (int)a->kh, (int)a->kw, (int)a->oh, \
        (int)a->ow, (int)a->sh, (int)a->sw, (int)a->dh, (int)a->dw, (int)a->pt, (int)a->pl, m
    if (wdtype == TOPS_DT_F32)
        dw_kernel<float><<<grid_for(m * a->c), 256, 0, st>>>(TOPS_DW_ARGS, static_cast<const float *>(w), wstride, a->bias,
                                                            a->out, a->ldo, a->out_dtype, a->accumulate);
    else if (wdtype == TOPS_DT_F16 || wdtype == TOPS_DT_BF16) {
        // 16-bit taps: read through the same decoder as the activations (the weight type must match them)
        dw_kernel<uint16_t><<<grid_for(m * a->c), 256, 0, st>>>(TOPS_DW_ARGS, static_cast<const uint16_t *>(w), wstride,
                                                               a->bias, a->out, a->ldo, a->out_dtype, a->accumulate);
    } else
        return cudaErrorInvalidValue;
#undef TOPS_DW_ARGS
    return cudaGetLastError();
}

extern "C" int tops__cu_conv_wgmma_launch(const tops__cu_conv_args *a, const tops__cu_conv_weights *wt, int bn,
                                          int splits) {
    const void *w = wt->w;
    const int64_t ldw = wt->ldw;
    const int terms = wt->terms < 1 ? 1 : wt->terms;
    const int64_t cg = a->c / a->groups;
    const bool vec = cg % 8 == 0 && a->xs_n % 8 == 0 && a->xs_h % 8 == 0 && a->xs_w % 8 == 0 && ldw % 8 == 0 &&
                     ((uintptr_t)a->x & 15) == 0 && ((uintptr_t)w & 15) == 0;
    if (!vec || (bn != 64 && bn != 128 && bn != 256) || splits < 1 || a->groups * splits > 65535 || terms > 3 ||
        (terms > 1 && (bn == 256 || wt->plane_rows < a->o)))
        return cudaErrorNotSupported;
    const WgGeo g = wg_geo(a, wt);
    if (g.m == 0 || g.o == 0) return cudaSuccess;
    if (splits > g.ktiles) splits = g.ktiles;
    CUtensorMap map;
    if (!wg_weight_map(&map, a, wt, bn)) return cudaErrorNotSupported;
    cudaStream_t st = static_cast<cudaStream_t>(a->stream);
    // The activation tiles by TMA im2col where each K stage is 64 channels of one tap.
    CUtensorMap amap;
    memset(&amap, 0, sizeof amap);
    const bool im2col = a->wg_im2col && cg % kWgBK == 0 && encode_im2col(&amap, a);
    if (im2col)
        return a->bf16 ? launch_wg_bn<true, true>(g, map, amap, bn, splits, (int)a->groups, terms, st)
                       : launch_wg_bn<false, true>(g, map, amap, bn, splits, (int)a->groups, terms, st);
    return a->bf16 ? launch_wg_bn<true, false>(g, map, amap, bn, splits, (int)a->groups, terms, st)
                   : launch_wg_bn<false, false>(g, map, amap, bn, splits, (int)a->groups, terms, st);
}

extern "C" int tops__cu_conv_wgt_launch(const tops__cu_conv_args *a, const tops__cu_conv_weights *wt, int pn,
                                        int splits) {
    const int64_t m = a->n * a->oh * a->ow;
    const int ch = a->o <= 64 ? 64 : 128; // channels a CTA
    if (a->groups != 1 || wt->terms != 1 || a->c % kWgBK ||
        (ch == 128 ? pn != 96 && pn != 104 && pn != 128 && pn != 192 && pn != 256 : pn != 256 && pn != 384) ||
        splits < 1 ||
        m > 0x3FFFFFFF || a->xs_n % 8 || a->xs_h % 8 || a->xs_w % 8 || (uintptr_t)a->x % 16 || wt->ldw % 8 ||
        (uintptr_t)wt->w % 16)
        return cudaErrorNotSupported;
    const WgGeo g = wg_geo(a, wt);
    if (g.m == 0 || g.o == 0) return cudaSuccess;
    if (splits > g.ktiles) splits = g.ktiles;
    CUtensorMap map, amap;
    if (!wg_weight_map(&map, a, wt, ch) || !encode_im2col(&amap, a, ch == 128 ? pn : pn / 2))
        return cudaErrorNotSupported;
    cudaStream_t st = static_cast<cudaStream_t>(a->stream);
    if (ch == 64) // two warpgroups over the pixels: 128 or 192 each
        return a->bf16 ? (pn == 256 ? launch_wgt<true, 64, 256, 5>(g, map, amap, splits, st)
                                    : launch_wgt<true, 64, 384, 4>(g, map, amap, splits, st))
                       : (pn == 256 ? launch_wgt<false, 64, 256, 5>(g, map, amap, splits, st)
                                    : launch_wgt<false, 64, 384, 4>(g, map, amap, splits, st));
    if (a->bf16)
        return pn == 96    ? launch_wgt<true, 128, 96, 8>(g, map, amap, splits, st)
               : pn == 104 ? launch_wgt<true, 128, 104, 7>(g, map, amap, splits, st)
               : pn == 128 ? launch_wgt<true, 128, 128, 6>(g, map, amap, splits, st)
               : pn == 192 ? launch_wgt<true, 128, 192, 5>(g, map, amap, splits, st)
                           : launch_wgt<true, 128, 256, 4>(g, map, amap, splits, st);
    return pn == 96    ? launch_wgt<false, 128, 96, 8>(g, map, amap, splits, st)
           : pn == 104 ? launch_wgt<false, 128, 104, 7>(g, map, amap, splits, st)
           : pn == 128 ? launch_wgt<false, 128, 128, 6>(g, map, amap, splits, st)
           : pn == 192 ? launch_wgt<false, 128, 192, 5>(g, map, amap, splits, st)
                       : launch_wgt<false, 128, 256, 4>(g, map, amap, splits, st);
}

extern "C" int tops__cu_conv_direct_launch(const tops__cu_conv_args *a, const tops__cu_conv_weights *wt, int sms) {
    if (a->kh != 3 || a->kw != 3 || a->sh != 1 || a->sw != 1 || a->dh != 1 || a->dw != 1 || a->groups != 1 ||
        a->c != 64 || a->o > 64 || wt->terms != 1 || sms < 1 || a->xs_n % 8 || a->xs_h % 8 || a->xs_w % 8 ||
        (uintptr_t)a->x % 16 || wt->ldw % 8 || (uintptr_t)wt->w % 16 || a->n * a->oh * a->ow > 0x3FFFFFFF)
        return cudaErrorNotSupported;
    const WgGeo g = wg_geo(a, wt);
    if (g.m == 0 || g.o == 0) return cudaSuccess;
    const int64_t tx = (a->ow + kDcCols - 1) / kDcCols, ty = (a->oh + kDcRows - 1) / kDcRows, tiles = a->n * tx * ty;
    CUtensorMap wmap, xmap;
    if (tiles > 0x3FFFFFFF || !wg_weight_map(&wmap, a, wt, 64) || !dc_halo_map(&xmap, a)) return cudaErrorNotSupported;
    constexpr int S = 4;
    const int smem = DcDims<S>::kBytes;
    auto kern = a->bf16 ? dc_kernel<true, S> : dc_kernel<false, S>;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    const int grid = (int)(tiles < sms ? tiles : sms);
    return tops_cu::launch_kernel(kern, dim3((unsigned)grid), dim3(kWgThreads), (size_t)smem,
                                  static_cast<cudaStream_t>(a->stream), true, 1, wmap, xmap, g, (int)tx, (int)ty,
                                  (int)tiles);
}
