/* AVX-512 VNNI twin of the AVX2 in-place q4_K / q5_K row dot
   (kernels/avx2/unpack_blocks.c): vpdpbusd takes q (0..31) as its
   unsigned operand and sums four products straight into i32 (one
   instruction for vpmaddubsw + vpmaddwd); the same lanes, scales and
   order, so the same bits. */
#include "kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

#define TOPS_KQ_DOT(q, a) _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, a)
#include "kernels/avx2/dot_min_body.h"
#undef TOPS_KQ_DOT

/* On top of the AVX2 unpackers (the table holds them on entry). */
void tops__avx512_vnni_fill_unpackers(tops__form_kernels *table) {
    table[TOPS__IF_SUPER_MIN].dot_min = kq_dot_min_super;
}
