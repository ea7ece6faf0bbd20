// tensorops device-side tiles: the building blocks of fused Hopper kernels
// (the seed's cooperative tensors, on the GPU).  Header-only CUDA C++ for
// sm_90a (compile with -gencode=arch=compute_90a,code=sm_90a); installed with
// the library.  docs/cuda.md ("Fused attention ... and the device tiles")
// shows how tops_attention uses them; examples/cuda_tile_softmax.cu is a
// small fused kernel written with them.  Not here yet: an sm_80 (mma.sync)
// form, reduce_cols; matmul_nt with a register A and store() are compiled
// but used by neither the attention kernel nor the example.
//
// The pieces:
//   smem_tile<T, ROWS, COLS>  a ROWS x COLS matrix of f16 / bf16 in shared
//                            memory, in the layout a TMA load with
//                            CU_TENSOR_MAP_SWIZZLE_128B and a box of
//                            {64, ROWS} writes: COLS / 64 panels of ROWS rows
//                            x 128 bytes, each 1024-byte aligned.
//   acc_tile<N>              a 64 x N tile of f32 accumulators spread over the
//                            128 threads of one warpgroup (N / 2 registers a
//                            thread): the wgmma accumulator layout.
//   a_tile<T, K>             a 64 x K tile of f16 / bf16 in registers in the
//                            layout wgmma reads its A operand from.
//   matmul_nt / matmul_nn    acc (+)= A * B on the tensor cores (wgmma), A
//                            from shared memory or an a_tile, B from shared
//                            memory stored [N, K] (nt: keys, weights) or
//                            [K, N] (nn: values).  Asynchronous: commit()
//                            then wait<n>() before the accumulators are read.
//   reduce_rows              one value a row with an explicit identity
//                            (max wants -INFINITY: an identity of 0 would
//                            turn a row max of negative scores into 0).
//   map / map_rows           element maps that see (row, column) or a row
//                            value.
//   to_a<T>(acc)             the accumulator tile as the next matmul's A
//                            operand, converted in registers.
//
// When a tile can be the next matmul's left input (the seed's
// is_compatible_as_left_input): for 16-bit A operands (f16, bf16) always.
// wgmma's f32 accumulator fragment of an m64nN tile holds, in each thread,
// exactly the elements its register-A fragment of an m64kN tile needs (rows
// lane / 4 and lane / 4 + 8 of the warp's 16, columns 2 (lane % 4) + {0, 1}
// of every group of 8), so to_a is a conversion in place, with no data
// movement.  For 8-bit A operands (e4m3, k32 steps) a thread's accumulators
// are not its A fragment: to_a does not compile for them (the type answers);
// store the tile with store() to a smem_tile and read it back as a
// shared-memory operand (a fence_async() before the matmul that reads it).
//
// Every function is called by all 128 threads of a warpgroup (warps 4w ..
// 4w + 3 of the block) together, as wgmma requires.
#ifndef TENSOROPS_CUDA_TILES_CUH
#define TENSOROPS_CUDA_TILES_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace tops_tiles {

template <typename T> struct is_bf16 { static constexpr bool value = false; };
template <> struct is_bf16<__nv_bfloat16> { static constexpr bool value = true; };

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TOPS_TILES_SM90A 1

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- raw wgmma (m64nNk16, f16 / bf16 inputs, f32 accumulators) -------------
// TB = 1 reads B as MN-major (its N dimension contiguous), 0 as K-major.
namespace detail {
template <bool BF16, int TB>
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t a, uint64_t b, int scale_d) {
    if constexpr (BF16)
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, %35; }"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "l"(a), "l"(b), "r"(scale_d), "n"(TB));
    else
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, %35; }"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "l"(a), "l"(b), "r"(scale_d), "n"(TB));
}

template <bool BF16, int TB>
__device__ __forceinline__ void wgmma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int scale_d) {
    if constexpr (BF16)
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38; }"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d), "n"(TB));
    else
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38; }"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d), "n"(TB));
}

template <bool BF16, int TB>
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t a, uint64_t b, int scale_d) {
    if constexpr (BF16)
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, %67; }"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                     : "l"(a), "l"(b), "r"(scale_d), "n"(TB));
    else
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, %67; }"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                     : "l"(a), "l"(b), "r"(scale_d), "n"(TB));
}

template <bool BF16, int TB>
__device__ __forceinline__ void wgmma_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int scale_d) {
    if constexpr (BF16)
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70; }"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d), "n"(TB));
    else
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70; }"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d), "n"(TB));
}

template <bool BF16, int TB>
__device__ __forceinline__ void wgmma_ss(float (&d)[128], uint64_t a, uint64_t b, int scale_d) {
    if constexpr (BF16)
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %130, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, %131; }"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                     : "l"(a), "l"(b), "r"(scale_d), "n"(TB));
    else
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %130, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, %131; }"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                     : "l"(a), "l"(b), "r"(scale_d), "n"(TB));
}

template <bool BF16, int TB>
__device__ __forceinline__ void wgmma_rs(float (&d)[128], const uint32_t (&a)[4], uint64_t b, int scale_d) {
    if constexpr (BF16)
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %133, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, %134; }"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d), "n"(TB));
    else
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %133, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, %134; }"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d), "n"(TB));
}
// A shared-memory matrix descriptor, 128-byte swizzle.  K-major: 8-row
// groups 1024 bytes apart (stride byte offset), the leading offset unused.
// MN-major: panels of 64 columns `panel` bytes apart (leading byte offset),
// 8-row groups of K 1024 bytes apart.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr, uint32_t lead) {
    return ((uint64_t)((addr & 0x3FFFFu) >> 4)) | ((uint64_t)((lead & 0x3FFFFu) >> 4) << 16) | ((1024ull >> 4) << 32) |
           (1ull << 62);
}
// The descriptor of an address `bytes` further (a multiple of 16): the start
// field is address / 16 in 14 bits and shared memory ends below 2^18, so a
// plain add never carries out of it.
__device__ __forceinline__ uint64_t desc_add(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }
template <int N, bool BF16, int TB>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, int scale_d) {
    static_assert(N == 64 || N == 128 || N == 256, "wgmma tiles here are 64, 128 or 256 columns wide");
    wgmma_ss<BF16, TB>(d, a, b, scale_d);
}
template <int N, bool BF16, int TB>
__device__ __forceinline__ void mma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b, int scale_d) {
    static_assert(N == 64 || N == 128 || N == 256, "wgmma tiles here are 64, 128 or 256 columns wide");
    wgmma_rs<BF16, TB>(d, a, b, scale_d);
}
} // namespace detail

// ---- ordering -------------------------------------------------------------
// Before the first matmul of a batch (orders earlier register writes of the
// accumulators and A fragments before the tensor cores read them).
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
// Ends a batch of matmuls (one wgmma group).
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most N committed batches are still running.
template <int N> __device__ __forceinline__ void wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Ordinary shared-memory writes (store()) before a later matmul or TMA that
// reads them: each writing thread, then a barrier.
__device__ __forceinline__ void fence_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
#endif

// ---- tiles ------------------------------------------------------------------
template <typename T, int ROWS, int COLS> struct smem_tile {
    static_assert(sizeof(T) == 2, "smem_tile holds f16 or bf16");
    static_assert(ROWS % 8 == 0 && COLS % 64 == 0, "ROWS a multiple of 8, COLS of 64 (whole 128-byte panels)");
    static constexpr int kPanelBytes = ROWS * 128;
    static constexpr int kBytes = ROWS * COLS * 2;
    T *ptr; // 1024-byte aligned shared memory
    // Address of element (r, c) (the swizzle applied): for ordinary loads and stores.
    __device__ __forceinline__ T *at(int r, int c) const {
        int cb = (c & 63) * 2;
        return reinterpret_cast<T *>(reinterpret_cast<char *>(ptr) + (c >> 6) * kPanelBytes + r * 128 +
                                     ((((cb >> 4) ^ (r & 7))) << 4) + (cb & 15));
    }
};

// 64 x N f32 accumulators over one warpgroup.  Thread t (lane = t % 32, warp
// w = t / 32 of the group) holds rows row(0) = 16 w + lane / 4 and row(1) =
// row(0) + 8; element v[i] is row row((i >> 1) & 1), column col(i) =
// 8 (i / 4) + 2 (lane % 4) + (i & 1).
template <int N> struct acc_tile {
    static_assert(N % 16 == 0, "N a multiple of 16");
    static constexpr int kRows = 64, kCols = N, kRegs = N / 2;
    float v[N / 2];
    __device__ __forceinline__ static int row(int half) {
        return 16 * ((threadIdx.x / 32) % 4) + (threadIdx.x % 32) / 4 + 8 * half;
    }
    __device__ __forceinline__ static int row_of(int i) { return row((i >> 1) & 1); }
    __device__ __forceinline__ static int col_of(int i) { return 8 * (i / 4) + 2 * (threadIdx.x % 4) + (i & 1); }
    __device__ __forceinline__ void fill(float x) {
#pragma unroll
        for (int i = 0; i < N / 2; i++) v[i] = x;
    }
    // Keeps the compiler from moving reads or writes of the accumulators
    // across an asynchronous matmul (call after wait<>() and before fence()).
    __device__ __forceinline__ void pin() {
#pragma unroll
        for (int i = 0; i < N / 2; i++) asm volatile("" : "+f"(v[i])::"memory");
    }
};

// 64 x K of T in wgmma's register-A layout: k16 step s in r[s][0..3].
template <typename T, int K> struct a_tile {
    static_assert(sizeof(T) == 2, "a_tile holds f16 or bf16 (8-bit A fragments differ: see the top of this file)");
    static_assert(K % 16 == 0, "K a multiple of 16");
    uint32_t r[K / 16][4];
    __device__ __forceinline__ void pin() {
#pragma unroll
        for (int s = 0; s < K / 16; s++)
#pragma unroll
            for (int j = 0; j < 4; j++) asm volatile("" : "+r"(r[s][j])::"memory");
    }
};

namespace detail {
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    if constexpr (is_bf16<T>::value) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    } else {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    }
}
} // namespace detail

// The accumulator tile as the next matmul's A operand (f16 / bf16, round to
// nearest even), in registers: see the top of this file for why the layouts
// agree.
template <typename T, int N> __device__ __forceinline__ a_tile<T, N> to_a(const acc_tile<N> &t) {
    a_tile<T, N> a;
#pragma unroll
    for (int s = 0; s < N / 16; s++)
#pragma unroll
        for (int j = 0; j < 4; j++) a.r[s][j] = detail::pack2<T>(t.v[8 * s + 2 * j], t.v[8 * s + 2 * j + 1]);
    return a;
}

// ---- reductions and maps ------------------------------------------------------
struct op_max { __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct op_min { __device__ __forceinline__ float operator()(float a, float b) const { return fminf(a, b); } };
struct op_sum { __device__ __forceinline__ float operator()(float a, float b) const { return a + b; } };

// This thread's part of each row, as four independent chains a row joined
// by a tree (one chain of N / 4 dependent operations would leave the warp
// waiting on each one's latency), then op(identity, .): out[h] for row row(h).
template <int N, typename Op>
__device__ __forceinline__ void reduce_rows_partial(const acc_tile<N> &t, Op op, float identity, float (&out)[2]) {
    static_assert(N % 16 == 0, "two column groups of 8 a step");
    float r[2][4];
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int k = 0; k < 4; k++) r[h][k] = t.v[4 * (k >> 1) + 2 * h + (k & 1)];
#pragma unroll
    for (int c = 2; c < N / 8; c++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int k = 2 * (c & 1) + e;
                r[h][k] = op(r[h][k], t.v[4 * c + 2 * h + e]);
            }
#pragma unroll
    for (int h = 0; h < 2; h++) out[h] = op(identity, op(op(r[h][0], r[h][1]), op(r[h][2], r[h][3])));
}

// out[h] = identity op (every element of row row(h)); every thread of the
// row's quad gets the result.  max / min as fmaxf / fminf (a NaN element is
// skipped, as fmaxf does; the CPU tiles propagate it).
template <int N, typename Op>
__device__ __forceinline__ void reduce_rows(const acc_tile<N> &t, Op op, float identity, float (&out)[2]) {
    reduce_rows_partial(t, op, identity, out);
    // The 4 threads of a quad hold the rest of each row.
#pragma unroll
    for (int m = 1; m <= 2; m <<= 1) {
        out[0] = op(out[0], __shfl_xor_sync(0xffffffffu, out[0], m));
        out[1] = op(out[1], __shfl_xor_sync(0xffffffffu, out[1], m));
    }
}

// Finishes a partial row reduction across the quad.
template <typename Op> __device__ __forceinline__ float reduce_quad(float x, Op op) {
    x = op(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return op(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// t[i][j] = f(t[i][j], i, j) (row and column within the tile).
template <int N, typename F> __device__ __forceinline__ void map(acc_tile<N> &t, F f) {
#pragma unroll
    for (int i = 0; i < N / 2; i++) t.v[i] = f(t.v[i], acc_tile<N>::row_of(i), acc_tile<N>::col_of(i));
}
// t[i][j] = f(t[i][j], r) with r this row's value (rv[h] for row row(h)).
template <int N, typename F> __device__ __forceinline__ void map_rows(acc_tile<N> &t, const float (&rv)[2], F f) {
#pragma unroll
    for (int i = 0; i < N / 2; i++) t.v[i] = f(t.v[i], rv[(i >> 1) & 1]);
}

// Writes the tile (rounded to T) into rows r0 .. r0 + 63 of a smem_tile; a
// later matmul or TMA store reading it needs fence_async() and a barrier.
template <typename T, int N, int ROWS, int COLS>
__device__ __forceinline__ void store(const acc_tile<N> &t, const smem_tile<T, ROWS, COLS> &s, int r0, int c0 = 0) {
#pragma unroll
    for (int i = 0; i < N / 2; i += 2) {
        uint32_t p = detail::pack2<T>(t.v[i], t.v[i + 1]);
        *reinterpret_cast<uint32_t *>(s.at(r0 + acc_tile<N>::row_of(i), c0 + acc_tile<N>::col_of(i))) = p;
    }
}

#ifdef TOPS_TILES_SM90A
// ---- matmuls (issue only: fence(), matmul..., commit(), wait<>()) --------------
// acc (+)= A * B^T: A = rows a_r0 .. a_r0 + 63 of a (K = COLS), B^T = rows
// b_r0 .. b_r0 + N - 1 of b, stored [N, K] (keys, weight rows).
// accumulate = 0 overwrites acc.
template <typename T, int N, int RA, int RB, int K>
__device__ __forceinline__ void matmul_nt(acc_tile<N> &acc, const smem_tile<T, RA, K> &a, int a_r0,
                                          const smem_tile<T, RB, K> &b, int b_r0, int accumulate) {
    const uint64_t da = detail::desc_sw128(smem_u32(a.ptr) + a_r0 * 128, 16),
                   db = detail::desc_sw128(smem_u32(b.ptr) + b_r0 * 128, 16);
#pragma unroll
    for (int s = 0; s < K / 16; s++) {
        const uint32_t off = (s % 4) * 32; // k16 steps inside a 128-byte panel row
        detail::mma_ss<N, is_bf16<T>::value, 0>(acc.v, detail::desc_add(da, (s / 4) * smem_tile<T, RA, K>::kPanelBytes + off),
                                                detail::desc_add(db, (s / 4) * smem_tile<T, RB, K>::kPanelBytes + off),
                                                s > 0 || accumulate);
    }
}

// acc (+)= A * B^T with A from registers.
template <typename T, int N, int RB, int K>
__device__ __forceinline__ void matmul_nt(acc_tile<N> &acc, const a_tile<T, K> &a, const smem_tile<T, RB, K> &b,
                                          int b_r0, int accumulate) {
    const uint64_t db = detail::desc_sw128(smem_u32(b.ptr) + b_r0 * 128, 16);
#pragma unroll
    for (int s = 0; s < K / 16; s++)
        detail::mma_rs<N, is_bf16<T>::value, 0>(
            acc.v, a.r[s], detail::desc_add(db, (s / 4) * smem_tile<T, RB, K>::kPanelBytes + (s % 4) * 32),
            s > 0 || accumulate);
}

// acc (+)= A * B with A from registers and B = rows b_r0 .. b_r0 + K - 1 of b,
// stored [K, N] (values): b_r0 a multiple of 8, N = COLS.
template <typename T, int N, int RB, int K>
__device__ __forceinline__ void matmul_nn(acc_tile<N> &acc, const a_tile<T, K> &a, const smem_tile<T, RB, N> &b,
                                          int b_r0, int accumulate) {
    const uint64_t db = detail::desc_sw128(smem_u32(b.ptr) + b_r0 * 128, smem_tile<T, RB, N>::kPanelBytes);
#pragma unroll
    for (int s = 0; s < K / 16; s++)
        detail::mma_rs<N, is_bf16<T>::value, 1>(acc.v, a.r[s], detail::desc_add(db, s * 16 * 128), s > 0 || accumulate);
}
#endif

} // namespace tops_tiles

#endif
