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

// out = part + global x sum_g gsum[i, g] x bias[j, g] (+ old), 16 x 16
// outputs a block, the groups in order through shared tiles.
constexpr int kBiasTile = 16;
template <typename T>
__global__ void __launch_bounds__(kBiasTile *kBiasTile)
    bias_kernel(const float *__restrict__ gsum, const float *__restrict__ bias, long long m, long long n,
                long long groups, float global, const float *__restrict__ part, long long ldp, T *__restrict__ out,
                long long ldo, int accumulate) {
    __shared__ float gs[kBiasTile][kBiasTile + 1], bs[kBiasTile][kBiasTile + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long i = (long long)blockIdx.y * kBiasTile + ty, j = (long long)blockIdx.x * kBiasTile + tx;
    const long long jl = (long long)blockIdx.x * kBiasTile + ty; // the bias row this thread loads
    float c = 0.0f;
    for (long long g0 = 0; g0 < groups; g0 += kBiasTile) {
        gs[ty][tx] = i < m && g0 + tx < groups ? gsum[i * groups + g0 + tx] : 0.0f;
        bs[ty][tx] = jl < n && g0 + tx < groups ? bias[jl * groups + g0 + tx] : 0.0f;
        __syncthreads();
        const int gn = groups - g0 < kBiasTile ? (int)(groups - g0) : kBiasTile;
        for (int t = 0; t < gn; t++) c = fmaf(gs[ty][t], bs[tx][t], c);
        __syncthreads();
    }
    if (i >= m || j >= n) return;
    float v = part[i * ldp + j] + global * c;
    if (accumulate) v += load_out<T>(out, i * ldo + j);
    store_out(out + i * ldo + j, v);
}

// The bias term for a few rows (m <= kBiasRows): a warp a channel, lane l
// summing groups l, l + 32, ... in order for every row (gsum through the
// L1), then a fixed butterfly; lane i writes row i.  (The tiled kernel
// above ran 17.6 us at M = 1 under ncu, K = 4096 and N = 12288, q4_K: 15
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
    const dim3 b(kBiasTile, kBiasTile);
    const dim3 g((unsigned)((a->n + kBiasTile - 1) / kBiasTile), (unsigned)((a->m + kBiasTile - 1) / kBiasTile));
    bias_kernel<T><<<g, b, 0, s>>>(a->gsum, a->biases, a->m, a->n, a->groups, a->global_scale, a->part, a->ldp,
                                   static_cast<T *>(a->out), a->ldo, a->accumulate);
    return (int)cudaGetLastError();
}

} // namespace

extern "C" int tops__cu_bias_launch(const tops__cu_bias_args *a) {
    if (a->m < 1 || a->n < 1 || a->k < 1 || a->group < 1 || a->groups < 1 || a->m > 65535LL * kBiasTile ||
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
