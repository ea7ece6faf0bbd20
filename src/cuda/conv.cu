// conv2d kernels (NHWC, 16-bit activations, f32 sums): the implicit GEMM on
// the tensor cores, the im2col gather the quantized formats' path feeds to
// the matmul kernels, the bias fill, and the depthwise direct kernel.
//
// Implicit GEMM: rows are output pixels (M = N * OH * OW), columns output
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

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

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

// Split partials summed in split order, then bias and the old dest.
__global__ void split_reduce_kernel(Geo p, int splits) {
    const int64_t total = (int64_t)p.m * p.o;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t m = i / p.o;
        const int o = (int)(i - m * p.o);
        float v = 0.f;
        for (int s = 0; s < splits; s++) v += p.ws[(int64_t)s * total + i];
        const int64_t idx = m * p.ldo + o;
        if (p.bias) v += p.bias[o];
        if (p.accumulate) v += load_out(p.out, idx, p.out_dtype);
        store_out(p.out, idx, p.out_dtype, v);
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
// 32 neighbouring channels of each tap.
template <typename W>
__global__ void dw_kernel(const uint16_t *x, bool bf16, int64_t xs_n, int64_t xs_h, int64_t xs_w, int h, int w, int c,
                          int kh, int kw, int oh, int ow, int sh, int sw, int dh, int dw, int pt, int pl, int64_t m,
                          const W *wt, int64_t wstride, const float *bias, void *out, int64_t ldo, int out_dtype,
                          int accumulate) {
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
        float acc = 0.f;
        for (int ki = 0; ki < kh; ki++) {
            const int ih = y * sh - pt + ki * dh;
            if (ih < 0 || ih >= h) continue;
            for (int kj = 0; kj < kw; kj++) {
                const int iw = x_ * sw - pl + kj * dw;
                if (iw < 0 || iw >= w) continue;
                float wv;
                if constexpr (sizeof(W) == 4) wv = static_cast<float>(wp[ki * kw + kj]);
                else wv = load16(reinterpret_cast<const uint16_t *>(wp), ki * kw + kj, bf16);
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

int sm_count() {
    int dev = 0, sms = 132;
    if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return sms;
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
    const int64_t want = 2 * (int64_t)sm_count();
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
        split_reduce_kernel<<<grid_for((int64_t)g.m * g.o), 256, 0, st>>>(g, splits);
        e = cudaGetLastError();
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
