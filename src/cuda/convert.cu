/* f32 activations on the 16-bit kernels (matmul.c decides when): the
   split of each row into 16-bit terms before the matmul, and the join of
   the terms' f32 products into the caller's output after it; the bias term
   of weights with mins (group sums of the activations times the packed
   biases).  Contract in cuda_internal.h (tops__cu_split_f32,
   tops__cu_join_terms, tops__cu_bias_launch). */
#include "cuda/cuda_internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

constexpr int kSplitThreads = 256;
constexpr int kMaxTerms = 3;

__device__ __forceinline__ unsigned short to16(float v, bool bf16, float *back) {
    if (bf16) {
        const __nv_bfloat16 h = __float2bfloat16_rn(v);
        *back = __bfloat162float(h);
        return __bfloat16_as_ushort(h);
    }
    const __half h = __float2half_rn(v);
    *back = __half2float(h);
    return __half_as_ushort(h);
}

// One block a row: the row's largest finite magnitude (f16), then the terms.
__global__ void __launch_bounds__(kSplitThreads) split_kernel(const float *__restrict__ x, long long ldx, long long m,
                                                              int k, int terms, bool bf16,
                                                              unsigned short *__restrict__ out, long long ldo,
                                                              int *__restrict__ exps) {
    __shared__ float red[kSplitThreads / 32];
    const long long i = blockIdx.x;
    const float *row = x + i * ldx;
    int e = 0;
    if (!bf16) {
        float mx = 0.0f;
        for (int j = threadIdx.x; j < k; j += kSplitThreads) {
            const float a = fabsf(row[j]);
            if (a <= 3.402823466e38f) mx = fmaxf(mx, a); // finite only (NaN compares false)
        }
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
        __syncthreads();
        mx = 0.0f;
        for (int w = 0; w < kSplitThreads / 32; w++) mx = fmaxf(mx, red[w]);
        if (mx > 0.0f) {
            int ex;
            (void)frexpf(mx, &ex); // mx = f x 2^ex, f in [0.5, 1)
            e = ex - 15;           // mx x 2^-e in [2^14, 2^15)
        }
    }
    if (threadIdx.x == 0) exps[i] = e;
    for (long long j = threadIdx.x; j < ldo; j += kSplitThreads) {
        float r = j < k ? ldexpf(row[j], -e) : 0.0f;
        for (int t = 0; t < terms; t++) {
            float back;
            out[((long long)t * m + i) * ldo + j] = to16(r, bf16, &back);
            r = isfinite(back) ? r - back : 0.0f; // exact in f32
        }
    }
}

template <typename T> __device__ __forceinline__ float load_out(const void *p, long long idx);
template <> __device__ __forceinline__ float load_out<float>(const void *p, long long idx) {
    return static_cast<const float *>(p)[idx];
}
template <> __device__ __forceinline__ float load_out<__half>(const void *p, long long idx) {
    return __half2float(static_cast<const __half *>(p)[idx]);
}
template <> __device__ __forceinline__ float load_out<__nv_bfloat16>(const void *p, long long idx) {
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[idx]);
}
__device__ __forceinline__ void store_out(float *p, float v) { *p = v; }
__device__ __forceinline__ void store_out(__half *p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store_out(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

template <typename T>
__global__ void join_kernel(const float *__restrict__ part, long long ldp, long long m, long long n, int terms,
                            const int *__restrict__ exps, T *__restrict__ out, long long ldo, int accumulate) {
    const long long total = m * n;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long i = idx / n, j = idx - i * n;
        float s = 0.0f;
        for (int t = 0; t < terms; t++) s += part[((long long)t * m + i) * ldp + j];
        float v = ldexpf(s, exps[i]);
        if (accumulate) v += load_out<T>(out, i * ldo + j);
        store_out(out + i * ldo + j, v);
    }
}

// gsum[i, g]: row i of x summed over group g (f32; a warp a row and group,
// lane l summing elements l, l + 32, ... in K order, then a fixed butterfly:
// the same bits every run), 0 past K.  (A thread a group, looping over its
// elements, ran 4 us at M = 1 on one block.)
constexpr int kSumThreads = 256;
template <typename T>
__global__ void __launch_bounds__(kSumThreads)
    group_sum_kernel(const T *__restrict__ x, long long ldx, long long m, long long k, int group, long long groups,
                     float *__restrict__ gsum) {
    const long long total = m * groups, warps = (long long)gridDim.x * (kSumThreads / 32);
    const int lane = threadIdx.x & 31;
    for (long long idx = (long long)blockIdx.x * (kSumThreads / 32) + (threadIdx.x >> 5); idx < total;
         idx += warps) {
        const long long i = idx / groups, g = idx - i * groups, k0 = g * group;
        const long long k1 = k0 + group < k ? k0 + group : k;
        float s = 0.0f;
        for (long long kk = k0 + lane; kk < k1; kk += 32) s += load_out<T>(x, i * ldx + kk);
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) gsum[idx] = s;
    }
}

// out = part + global x sum_g gsum[i, g] x bias[j, g] (+ old): a block of
// 8 x 16 threads owns 16 TM rows x 64 channels, a thread TM rows x 8
// channels (two runs of 4, 32 apart); the groups go through shared memory
// 32 at a time, transposed (group-major; the next 32 loaded into registers
// under the current sums), each output summed over g in order by one fmaf
// chain, so the bits do not depend on the tile.  (The first form, one output a thread and 16 x 16
// tiles, was shared-memory bound: ~77 us at M = 128 and ~2.2 ms at M = 4096
// of q4_K's strict call, K = 4096, N = 12288, H200 2026-12-03; 4 x 8 a
// thread and 128 channels a block issued one FFMA in two instructions at
// 19 % occupancy, 31 us at M = 128.)
constexpr int kBiasBN = 64, kBiasGK = 32, kBiasPad = 4, kBiasThreads = 128;
template <typename T, int TM>
__global__ void __launch_bounds__(kBiasThreads)
    bias_kernel(const float *__restrict__ gsum, const float *__restrict__ bias, long long m, long long n,
                long long groups, float global, const float *__restrict__ part, long long ldp, T *__restrict__ out,
                long long ldo, int accumulate) {
    constexpr int BM = 16 * TM, LR = kBiasThreads / 32, RA = BM / LR, RB = kBiasBN / LR; // rows a thread loads
    __shared__ __align__(16) float gs[kBiasGK][BM + kBiasPad];
    __shared__ __align__(16) float bs[kBiasGK][kBiasBN + kBiasPad];
    const int tid = threadIdx.x, tx = tid & 7, ty = tid >> 3;
    const long long i0 = (long long)blockIdx.y * BM, j0 = (long long)blockIdx.x * kBiasBN;
    // loads: thread tid reads group g0 + tid % 32 of rows tid / 32 + LR r
    const int lg = tid & 31, lr = tid >> 5;
    float ra[RA], rb[RB];
    const auto fetch = [&](long long g0) {
        const bool gin = g0 + lg < groups;
#pragma unroll
        for (int r = 0; r < RA; r++) {
            const long long i = i0 + lr + LR * r;
            ra[r] = gin && i < m ? __ldg(gsum + i * groups + g0 + lg) : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < RB; r++) {
            const long long j = j0 + lr + LR * r;
            rb[r] = gin && j < n ? __ldg(bias + j * groups + g0 + lg) : 0.0f;
        }
    };
    float c[TM][8];
#pragma unroll
    for (int a = 0; a < TM; a++)
#pragma unroll
        for (int b = 0; b < 8; b++) c[a][b] = 0.0f;
    fetch(0);
    for (long long g0 = 0; g0 < groups; g0 += kBiasGK) {
#pragma unroll
        for (int r = 0; r < RA; r++) gs[lg][lr + LR * r] = ra[r];
#pragma unroll
        for (int r = 0; r < RB; r++) bs[lg][lr + LR * r] = rb[r];
        __syncthreads();
        if (g0 + kBiasGK < groups) fetch(g0 + kBiasGK); // the next tile's loads fly under this one's sums
        // zeros past the last group add exact zeros: every tile runs whole
#pragma unroll 4
        for (int u = 0; u < kBiasGK; u++) {
            float av[TM];
            if constexpr (TM % 4 == 0) {
#pragma unroll
                for (int a = 0; a < TM; a += 4) {
                    const float4 v = *reinterpret_cast<const float4 *>(&gs[u][ty * TM + a]);
                    av[a] = v.x, av[a + 1] = v.y, av[a + 2] = v.z, av[a + 3] = v.w;
                }
            } else {
#pragma unroll
                for (int a = 0; a < TM; a++) av[a] = gs[u][ty * TM + a];
            }
            // channels tx * 4 .. + 3 and 32 + tx * 4 .. + 3: a warp's 8 x's read 128
            // contiguous bytes (no bank conflict)
            const float4 b0 = *reinterpret_cast<const float4 *>(&bs[u][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4 *>(&bs[u][32 + tx * 4]);
            const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int a = 0; a < TM; a++)
#pragma unroll
                for (int b = 0; b < 8; b++) c[a][b] = fmaf(av[a], bv[b], c[a][b]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int a = 0; a < TM; a++) {
        const long long i = i0 + ty * TM + a;
        if (i >= m) break;
#pragma unroll
        for (int b = 0; b < 8; b++) {
            const long long j = j0 + (b & 4) * 8 + tx * 4 + (b & 3);
            if (j >= n) continue;
            float v = part[i * ldp + j] + global * c[a][b];
            if (accumulate) v += load_out<T>(out, i * ldo + j);
            store_out(out + i * ldo + j, v);
        }
    }
}

// The bias term for a few rows (m <= kBiasRows): a warp a channel, lane l
// summing groups l, l + 32, ... in order for every row (gsum through the
// L1), then a fixed butterfly; lane i writes row i.  (The first tiled kernel
// ran 17.6 us at M = 1 under ncu, K = 4096 and N = 12288, q4_K: 15
// of its 16 thread rows idle, the groups walked 16 at a time between
// barriers.  H200, q4_K / q4_1 call at M = 1 / 4 / 16: 27.4 / 29.6 / 42.2
// us with this kernel up to M = 16 against 28.7 / 30.0 / 32.8 with the
// tiled one, so it takes M <= 4.)
constexpr int kBiasRows = 4, kBiasWarps = 8;
template <typename T>
__global__ void __launch_bounds__(kBiasWarps * 32)
    bias_rows_kernel(const float *__restrict__ gsum, const float *__restrict__ bias, int m, long long n,
                     long long groups, float global, const float *__restrict__ part, long long ldp,
                     T *__restrict__ out, long long ldo, int accumulate) {
    const int lane = threadIdx.x & 31;
    const long long j = (long long)blockIdx.x * kBiasWarps + (threadIdx.x >> 5);
    if (j >= n) return;
    const float *b = bias + j * groups;
    float c[kBiasRows];
#pragma unroll
    for (int i = 0; i < kBiasRows; i++) c[i] = 0.0f;
#pragma unroll 4
    for (long long g = lane; g < groups; g += 32) {
        const float bv = __ldg(b + g);
#pragma unroll
        for (int i = 0; i < kBiasRows; i++)
            if (i < m) c[i] = fmaf(__ldg(gsum + i * groups + g), bv, c[i]);
    }
    float mine = 0.0f; // lane i keeps row i's sum
#pragma unroll
    for (int i = 0; i < kBiasRows; i++) {
        if (i >= m) break;
        float v = c[i];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == i) mine = v;
    }
    if (lane < m) {
        float v = part[lane * ldp + j] + global * mine;
        if (accumulate) v += load_out<T>(out, lane * ldo + j);
        store_out(out + lane * ldo + j, v);
    }
}

template <typename T> int launch_bias(const tops__cu_bias_args *a, cudaStream_t s) {
    if (a->m <= kBiasRows) { // (n <= 2^31 - 1: tops__cu_bias_launch)
        const long long blocks = (a->n + kBiasWarps - 1) / kBiasWarps;
        bias_rows_kernel<T><<<dim3((unsigned)blocks), dim3(kBiasWarps * 32), 0, s>>>(
            a->gsum, a->biases, (int)a->m, a->n, a->groups, a->global_scale, a->part, a->ldp,
            static_cast<T *>(a->out), a->ldo, a->accumulate);
        return (int)cudaGetLastError();
    }
    // rows a block (16 TM): the most, up to 128, that still give every SM
    // two blocks (the sums are latency bound below that: 192 blocks of 128
    // rows ran at 23 % of the FMA pipe at M = 128, ncu), and no more than M
    // needs
    const long long nb = (a->n + kBiasBN - 1) / kBiasBN, sms = tops__cuda_sm_count(-1);
    int tm = 8;
    while (tm > 1 && (16 * tm / 2 >= a->m || nb * ((a->m + 16 * tm - 1) / (16 * tm)) < 2 * sms)) tm /= 2;
    const dim3 g((unsigned)((a->n + kBiasBN - 1) / kBiasBN), (unsigned)((a->m + 16 * tm - 1) / (16 * tm)));
    const auto fn = tm == 1   ? bias_kernel<T, 1>
                    : tm == 2 ? bias_kernel<T, 2>
                    : tm == 4 ? bias_kernel<T, 4>
                              : bias_kernel<T, 8>;
    fn<<<g, kBiasThreads, 0, s>>>(a->gsum, a->biases, a->m, a->n, a->groups, a->global_scale, a->part, a->ldp,
                                  static_cast<T *>(a->out), a->ldo, a->accumulate);
    return (int)cudaGetLastError();
}

} // namespace

extern "C" int tops__cu_bias_launch(const tops__cu_bias_args *a) {
    if (a->m < 1 || a->n < 1 || a->k < 1 || a->group < 1 || a->groups < 1 || a->m > 65535LL * 16 ||
        a->n > 0x7FFFFFFFLL)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = static_cast<cudaStream_t>(a->stream);
    const long long total = (long long)a->m * a->groups, per = kSumThreads / 32;
    long long blocks = (total + per - 1) / per;
    if (blocks > 65536) blocks = 65536; // grid-stride beyond
    const dim3 g((unsigned)blocks), b((unsigned)kSumThreads);
    if (a->x_kind == 0)
        group_sum_kernel<__half><<<g, b, 0, s>>>(static_cast<const __half *>(a->x), a->ldx, a->m, a->k, a->group,
                                                 a->groups, a->gsum);
    else if (a->x_kind == 1)
        group_sum_kernel<__nv_bfloat16><<<g, b, 0, s>>>(static_cast<const __nv_bfloat16 *>(a->x), a->ldx, a->m,
                                                        a->k, a->group, a->groups, a->gsum);
    else
        group_sum_kernel<float><<<g, b, 0, s>>>(static_cast<const float *>(a->x), a->ldx, a->m, a->k, a->group,
                                                a->groups, a->gsum);
    int err = (int)cudaGetLastError();
    if (err) return err;
    if (a->out_dtype == TOPS_DT_F32) return launch_bias<float>(a, s);
    if (a->out_dtype == TOPS_DT_F16) return launch_bias<__half>(a, s);
    if (a->out_dtype == TOPS_DT_BF16) return launch_bias<__nv_bfloat16>(a, s);
    return (int)cudaErrorInvalidValue;
}

extern "C" int tops__cu_split_f32(const float *x, int64_t ldx, int64_t m, int64_t k, int terms, int bf16, void *out,
                                  int64_t ldo, int *exps, void *stream) {
    if (m < 1 || k < 1 || k > 0x7FFFFFFF || m > 0x7FFFFFFF || terms < 1 || terms > kMaxTerms || ldo < k)
        return (int)cudaErrorInvalidValue;
    split_kernel<<<dim3((unsigned)m), dim3(kSplitThreads), 0, static_cast<cudaStream_t>(stream)>>>(
        x, ldx, m, (int)k, terms, bf16 != 0, static_cast<unsigned short *>(out), ldo, exps);
    return (int)cudaGetLastError();
}

extern "C" int tops__cu_join_terms(const float *part, int64_t ldp, int64_t m, int64_t n, int terms, const int *exps,
                                   void *out, tops_dtype out_dtype, int64_t ldo, int accumulate, void *stream) {
    if (m < 1 || n < 1 || terms < 1 || terms > kMaxTerms) return (int)cudaErrorInvalidValue;
    const long long total = (long long)m * n, threads = 256;
    long long blocks = (total + threads - 1) / threads;
    if (blocks > 65536) blocks = 65536; // grid-stride beyond
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const dim3 g((unsigned)blocks), b((unsigned)threads);
    if (out_dtype == TOPS_DT_F32)
        join_kernel<float><<<g, b, 0, s>>>(part, ldp, m, n, terms, exps, static_cast<float *>(out), ldo, accumulate);
    else if (out_dtype == TOPS_DT_F16)
        join_kernel<__half><<<g, b, 0, s>>>(part, ldp, m, n, terms, exps, static_cast<__half *>(out), ldo, accumulate);
    else if (out_dtype == TOPS_DT_BF16)
        join_kernel<__nv_bfloat16>
            <<<g, b, 0, s>>>(part, ldp, m, n, terms, exps, static_cast<__nv_bfloat16 *>(out), ldo, accumulate);
    else
        return (int)cudaErrorInvalidValue;
    return (int)cudaGetLastError();
}
