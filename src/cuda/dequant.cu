// Large-M plan for folded 4-bit weights (matmul.c, use_dequant): the packed
// weights become row-major 16-bit weights [n, k_pad] of the activations'
// type in a stream-ordered workspace, w = code x scale x 2^-B (B = the fold
// shift), and the strict 16-bit TMA GEMM (fp8_gemm.cu, tops__cu_h16_launch)
// runs on them, multiplying its sums by 2^B and the tensor scale.  The
// register-A kernels decode every weight once per 128-token tile (32 times
// at M = 4096); this decodes it once.  The values are the folded kernel's:
// exact where tops__cu_fold_shift folds in strict mode (e2m1 codes times
// e8m0 / ue4m3 scales), rounded once in relaxed mode (4-bit integers times
// f16 scales, f16 activations).  Strict two-term folds do not come here.
#include "cuda/kernels.cuh"

#include <stdint.h>

namespace tops_cu {
namespace {

// One thread per 16-byte fragment (tile, chunk, lane) of tiles [tile0,
// tile0 + tiles): its 32 codes (pack.c's layout: k16 step j in word j, rows
// gid and gid + 8, K 4 tig .. 4 tig + 3) times their rows' scales, into
// out[(tile - tile0) * 16 + row][k], row stride ldw elements.
template <int CODE, bool BF16>
__global__ void __launch_bounds__(256) dequant_kernel(const Params p, int tile0, int tiles, float pre, long long ldw,
                                                      uint16_t *out) {
    const long long f = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (f >= (long long)tiles * p.chunks * 32) return;
    const int lane = (int)(f & 31), gid = lane >> 2, tig = lane & 3;
    const long long tc = f >> 5;
    const int c = (int)(tc % p.chunks), tl = (int)(tc / p.chunks);
    const uint4 w = p.w[((long long)(tile0 + tl) * p.chunks + c) * 32 + lane];
    const unsigned char *sc = p.has_scales ? p.scales + (size_t)(tile0 + tl) * p.scale_tile_bytes : nullptr;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint32_t a[4];
        decode_step<CODE, false>(w, j, a); // exact in f16: small integers, or e2m1 x 2^-14
        const int kk = c * 64 + j * 16 + tig * 4, g = min(kk >> p.group_shift, p.groups - 1);
        const float s0 = sc ? scale_entry(sc, p.scale_kind, (size_t)g * 16 + 2 * gid) * pre : pre;
        const float s1 = sc ? scale_entry(sc, p.scale_kind, (size_t)g * 16 + 2 * gid + 1) * pre : pre;
        uint32_t pair[4];
#pragma unroll
        for (int r = 0; r < 4; r++) { // a[r]: row gid + 8 (r & 1), K kk + 2 (r >> 1) and the next
            const float2 v = __half22float2(bits_h2(a[r]));
            const float s = (r & 1) ? s1 : s0; // the products are exact in f32; one rounding below
            if constexpr (BF16) pair[r] = bf2_bits(__floats2bfloat162_rn(v.x * s, v.y * s));
            else pair[r] = h2_bits(__floats2half2_rn(v.x * s, v.y * s));
        }
        // 8 bytes a row, the 4 lanes of a group 32 contiguous bytes (whole sectors)
        const long long row = (long long)tl * 16 + gid;
        *reinterpret_cast<uint2 *>(out + row * ldw + kk) = make_uint2(pair[0], pair[2]);
        *reinterpret_cast<uint2 *>(out + (row + 8) * ldw + kk) = make_uint2(pair[1], pair[3]);
    }
}

template <bool BF16>
cudaError_t launch_dequant(const Params &p, int code, int tile0, int tiles, float pre, long long ldw, uint16_t *out,
                           cudaStream_t stream) {
    const long long threads = (long long)tiles * p.chunks * 32;
    const unsigned blocks = (unsigned)((threads + 255) / 256);
    if (code == TOPS__CU_CODE_E2M1) dequant_kernel<TOPS__CU_CODE_E2M1, BF16><<<blocks, 256, 0, stream>>>(p, tile0, tiles, pre, ldw, out);
    else dequant_kernel<TOPS__CU_CODE_U4, BF16><<<blocks, 256, 0, stream>>>(p, tile0, tiles, pre, ldw, out);
    return cudaGetLastError();
}

} // namespace
} // namespace tops_cu

using namespace tops_cu;

extern "C" int tops__cu_dequant_gemm(const tops__cu_matmul_args *a, const char **what) {
    if ((a->code != TOPS__CU_CODE_E2M1 && a->code != TOPS__CU_CODE_U4) || a->fold != 1)
        return (int)cudaErrorNotSupported;
    // tops__cu_h16_launch's own conditions, checked before any work
    if (!device_is_sm90a() || (uintptr_t)a->x % 16 != 0 || (a->ldx * 2) % 16 != 0 || a->m > 0x7FFFFFFF / 2)
        return (int)cudaErrorNotSupported;
    Params p;
    if (!init_params(a, p, what)) return (int)cudaErrorInvalidValue;
    cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
    const bool bf16 = a->x_bf16 != 0;
    const int d = a->code == TOPS__CU_CODE_E2M1 ? 14 : 0; // decode_factor's exponent
    const float pre = ldexpf(1.0f, d - a->fold_shift);
    const long long row_bytes = a->k_pad * 2;
    const long long slice = workspace_slice(row_bytes, 256, a->n_pad);
    uint16_t *ws = nullptr;
    cudaError_t err = cudaMallocAsync(reinterpret_cast<void **>(&ws), (size_t)(slice * row_bytes), stream);
    if (err == cudaErrorNotSupported || err == cudaErrorMemoryAllocation) { // the register-A kernels instead
        (void)cudaGetLastError();
        return (int)cudaErrorNotSupported;
    }
    if (err != cudaSuccess) {
        *what = "cudaMallocAsync of the dequantized weights";
        return (int)err;
    }
    const size_t out_elem = a->out_dtype == TOPS_DT_F32 ? 4 : 2;
    for (long long n0 = 0; n0 < a->n && err == cudaSuccess; n0 += slice) {
        const long long rows = a->n - n0 < slice ? a->n - n0 : slice;
        const int tiles = (int)((rows + 15) / 16);
        err = bf16 ? launch_dequant<true>(p, a->code, (int)(n0 / 16), tiles, pre, a->k_pad, ws, stream)
                   : launch_dequant<false>(p, a->code, (int)(n0 / 16), tiles, pre, a->k_pad, ws, stream);
        if (err != cudaSuccess) {
            *what = "the dequantization kernel launch";
            break;
        }
        tops__cu_matmul_args s = *a;
        s.n = rows;
        s.n_pad = (long long)tiles * 16;
        s.out = static_cast<char *>(a->out) + (size_t)n0 * out_elem;
        s.global_scale = a->global_scale * ldexpf(1.0f, a->fold_shift);
        const tops__cu_fp8_args h = {&s, ws, nullptr, 0};
        err = (cudaError_t)tops__cu_h16_launch(&h, what);
    }
    cudaError_t e2 = cudaFreeAsync(ws, stream);
    if (err == cudaSuccess && e2 != cudaSuccess) {
        err = e2;
        *what = "cudaFreeAsync of the dequantized weights";
    }
    if (err == cudaSuccess)
        set_last_kernel(bf16 ? "weights dequantized to bf16 [n, k], then the bf16 TMA GEMM (wgmma, both operands by TMA)"
                             : "weights dequantized to f16 [n, k], then the f16 TMA GEMM (wgmma, both operands by TMA)");
    return (int)err;
}
