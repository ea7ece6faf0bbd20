// A fused kernel written with the device tiles (tensorops_cuda_tiles.cuh):
// probabilities = softmax(scale * X W^T) row by row, X [M, K] and W [128, K]
// in f16, the 64 x 128 logits never leaving the registers of the warpgroup
// that owns their rows.  Checked against a double-precision softmax on the
// host; prints "skip" and exits 0 without a Hopper (sm_90) GPU.
//
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I<prefix>/include cuda_tile_softmax.cu
#include <tensorops_cuda_tiles.cuh>

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

namespace tt = tops_tiles;

constexpr int kN = 128; // classes: one 64 x 128 accumulator tile
constexpr int kK = 128; // features (X and W tiles: 48 KB of static shared memory)

// One warpgroup (128 threads) a block of 64 rows.
__global__ void __launch_bounds__(128) softmax_logits(const __half *x, const __half *w, __half *out, int m, float scale) {
#ifdef TOPS_TILES_SM90A
    __shared__ __align__(1024) __half xs[64 * kK];
    __shared__ __align__(1024) __half ws[kN * kK];
    const tt::smem_tile<__half, 64, kK> sx{xs};
    const tt::smem_tile<__half, kN, kK> sw{ws};
    const int row0 = blockIdx.x * 64;
    // Stage the operands in the 128-byte-swizzled layout wgmma reads (a TMA
    // load with CU_TENSOR_MAP_SWIZZLE_128B writes the same): 8 halves a store.
    for (int i = threadIdx.x; i < 64 * kK / 8; i += 128) {
        int r = i / (kK / 8), c = (i % (kK / 8)) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (row0 + r < m) v = *reinterpret_cast<const uint4 *>(x + (size_t)(row0 + r) * kK + c);
        *reinterpret_cast<uint4 *>(sx.at(r, c)) = v;
    }
    for (int i = threadIdx.x; i < kN * kK / 8; i += 128) {
        int r = i / (kK / 8), c = (i % (kK / 8)) * 8;
        *reinterpret_cast<uint4 *>(sw.at(r, c)) = *reinterpret_cast<const uint4 *>(w + (size_t)r * kK + c);
    }
    tt::fence_async(); // ordinary stores, read next by the tensor cores
    __syncthreads();

    tt::acc_tile<kN> s;
    tt::fence();
    tt::matmul_nt(s, sx, 0, sw, 0, 0); // s = X W^T
    tt::commit();
    tt::wait<0>();
    s.pin();

    float mx[2], sum[2];
    tt::reduce_rows(s, tt::op_max(), -INFINITY, mx); // the identity of max is -inf, not 0
    tt::map_rows(s, mx, [=](float v, float r) { return __expf((v - r) * scale); });
    tt::reduce_rows(s, tt::op_sum(), 0.0f, sum);
    tt::map_rows(s, sum, [](float v, float r) { return v / r; });

    for (int i = 0; i < kN / 2; i += 2) {
        int r = row0 + tt::acc_tile<kN>::row_of(i), c = tt::acc_tile<kN>::col_of(i);
        if (r < m) *reinterpret_cast<__half2 *>(out + (size_t)r * kN + c) = __floats2half2_rn(s.v[i], s.v[i + 1]);
    }
#endif
}

int main() {
    int dev = 0;
    cudaDeviceProp prop;
    if (cudaGetDeviceCount(&dev) != cudaSuccess || dev == 0 || cudaGetDeviceProperties(&prop, 0) != cudaSuccess ||
        prop.major != 9) {
        printf("skip: needs a Hopper (sm_90) GPU\n");
        return 0;
    }
    const int m = 1000;
    const float scale = 1.0f / 16.0f;
    __half *hx = (__half *)malloc((size_t)m * kK * 2), *hw = (__half *)malloc((size_t)kN * kK * 2);
    __half *hy = (__half *)malloc((size_t)m * kN * 2);
    srand(7);
    for (int i = 0; i < m * kK; i++) hx[i] = __float2half((float)rand() / RAND_MAX * 2 - 1);
    for (int i = 0; i < kN * kK; i++) hw[i] = __float2half((float)rand() / RAND_MAX * 2 - 1);
    __half *dx, *dw, *dy;
    cudaMalloc(&dx, (size_t)m * kK * 2);
    cudaMalloc(&dw, (size_t)kN * kK * 2);
    cudaMalloc(&dy, (size_t)m * kN * 2);
    cudaMemcpy(dx, hx, (size_t)m * kK * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, hw, (size_t)kN * kK * 2, cudaMemcpyHostToDevice);
    softmax_logits<<<(m + 63) / 64, 128>>>(dx, dw, dy, m, scale);
    cudaError_t e = cudaMemcpy(hy, dy, (size_t)m * kN * 2, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        printf("FAILED: %s\n", cudaGetErrorString(e));
        return 1;
    }
    double num = 0, den = 0;
    for (int r = 0; r < m; r++) {
        double l[kN], mx = -INFINITY, sum = 0;
        for (int c = 0; c < kN; c++) {
            double a = 0;
            for (int k = 0; k < kK; k++) a += (double)__half2float(hx[r * kK + k]) * __half2float(hw[c * kK + k]);
            l[c] = a * scale;
            mx = fmax(mx, l[c]);
        }
        for (int c = 0; c < kN; c++) sum += (l[c] = exp(l[c] - mx));
        for (int c = 0; c < kN; c++) {
            double d = __half2float(hy[r * kN + c]) - l[c] / sum;
            num += d * d;
            den += (l[c] / sum) * (l[c] / sum);
        }
    }
    double rel = sqrt(num / den);
    printf("fused softmax(X W^T), %d x %d x %d: rel-L2 %.2e against f64 %s\n", m, kN, kK, rel,
           rel < 2e-3 ? "ok" : "FAILED");
    cudaFree(dx), cudaFree(dw), cudaFree(dy);
    free(hx), free(hw), free(hy);
    return rel < 2e-3 ? 0 : 1;
}
