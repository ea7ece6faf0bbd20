// The unfused attention baseline's middle step (bench/bench_cuda_attention.c):
// a row softmax in place over f16 / bf16 scores (already scaled by cuBLAS),
// f32 inside, with the bottom-right causal mask.  One block of 256 threads a
// row, the row held in registers when it fits (Sk <= 8192), else read twice.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

namespace {

template <typename T> __device__ __forceinline__ float load(const T *p) {
    if constexpr (sizeof(T) == 2 && __is_same(T, __half)) return __half2float(*p);
    else return __bfloat162float(*p);
}
template <typename T> __device__ __forceinline__ T cast(float x) {
    if constexpr (__is_same(T, __half)) return __float2half_rn(x);
    else return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float block_reduce(float v, bool is_max, float *sh) {
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x / 32) ? sh[lane] : (is_max ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    return v;
}

template <typename T>
__global__ void __launch_bounds__(256) softmax_rows(T *s, int64_t cols, int64_t sq, int64_t off, int causal) {
    __shared__ float sh[32];
    const int64_t row = blockIdx.x;
    T *r = s + row * cols;
    int64_t end = cols;
    if (causal) {
        int64_t pos = row % sq + off;
        end = pos + 1 < cols ? pos + 1 : cols;
        if (end < 0) end = 0;
    }
    constexpr int kHold = 32; // 256 threads x 32 = 8192 columns in registers
    float x[kHold];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < kHold; i++) {
        int64_t j = threadIdx.x + (int64_t)i * blockDim.x;
        x[i] = j < end ? load(r + j) : -INFINITY;
        m = fmaxf(m, x[i]);
    }
    for (int64_t j = threadIdx.x + (int64_t)kHold * blockDim.x; j < end; j += blockDim.x) m = fmaxf(m, load(r + j));
    m = block_reduce(m, true, sh);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kHold; i++) {
        x[i] = x[i] == -INFINITY ? 0.0f : __expf(x[i] - m);
        sum += x[i];
    }
    for (int64_t j = threadIdx.x + (int64_t)kHold * blockDim.x; j < end; j += blockDim.x) sum += __expf(load(r + j) - m);
    sum = block_reduce(sum, false, sh);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
    for (int i = 0; i < kHold; i++) {
        int64_t j = threadIdx.x + (int64_t)i * blockDim.x;
        if (j < cols) r[j] = cast<T>(x[i] * inv);
    }
    for (int64_t j = threadIdx.x + (int64_t)kHold * blockDim.x; j < cols; j += blockDim.x)
        r[j] = cast<T>(j < end ? __expf(load(r + j) - m) * inv : 0.0f);
}

} // namespace

// rows = B * H * Sq rows of cols = Sk scores each; row r is query r % sq at
// position r % sq + off.  Returns a cudaError_t.
extern "C" int tops_bench_cuda_softmax(void *scores, int64_t rows, int64_t cols, int64_t sq, int64_t off, int causal,
                                       int bf16, void *stream) {
    if (rows <= 0 || rows > 0x7fffffff) return (int)cudaErrorInvalidValue;
    if (bf16)
        softmax_rows<__nv_bfloat16><<<(unsigned)rows, 256, 0, (cudaStream_t)stream>>>((__nv_bfloat16 *)scores, cols, sq, off, causal);
    else
        softmax_rows<__half><<<(unsigned)rows, 256, 0, (cudaStream_t)stream>>>((__half *)scores, cols, sq, off, causal);
    return (int)cudaGetLastError();
}
