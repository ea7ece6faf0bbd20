/* What the AVX2 and AVX-512 VNNI row-stream kernels share
   (kernels/avx2/dot_q8.c, kernels/avx512/nibstream_vnni.c): the stream's
   lane order, prefetch distances and the e8m0 check for the bit-add path (tops__nibstream_act). */
#ifndef TOPS_KERNELS_AVX2_NIBSTREAM_H
#define TOPS_KERNELS_AVX2_NIBSTREAM_H

#include "kernels/avx2/hsum.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* Prefetch distances in the row stream (one stream per four rows), two
   levels: far into L2 (prefetcht1: the L2 queue keeps more lines in flight
   than the L1 fill buffers), near into L1.  At M = 1, 2 threads, mxfp4 (p50
   of 300 streamed calls, three sweeps, Zen 2): L1 only at 2048 B 1.36-1.40
   ms (the best of none, 1024, 2048, 4096, 8192 B; none 1.77-1.86, NTA
   2.15-2.24); L2 4096-32768 B with L1 512-2048 B 1.21-1.47 ms, no distance
   clearly ahead on the noisy host. */
enum { TOPS__NIBSTREAM_PREFETCH_L2 = 8192, TOPS__NIBSTREAM_PREFETCH_L1 = 1024 };
/* Bytes ahead per weight row in the four-row nibble dots on plain rows: of
   0, 512, 1024, 2048 and 4096, 512 gave the lowest times at M = 1 with one
   thread (on a loaded VM: not tuned at two threads). */
enum { TOPS__NIB_PREFETCH = 512 };

/* Lane l of a super-block's vectors holds block tops__nibstream_lane(l). */
static inline __m256i tops__stream_lanes(void) { return _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7); }

/* Whether every stored e8m0 exponent of the super-block at sb (four rows
   of 8) lies in the activation row's range (lo[8], hi[8] at range): then
   bits(ws * as) = bias + (e << 23) exactly. */
static inline int tops__stream_e8m0_fast(const uint8_t *sb, const uint8_t *range) {
    int64_t lo, hi;
    memcpy(&lo, range, 8);
    memcpy(&hi, range + 8, 8);
    const __m256i e = _mm256_loadu_si256((const __m256i *)sb);
    const __m256i bad =
        _mm256_or_si256(_mm256_subs_epu8(_mm256_set1_epi64x(lo), e), _mm256_subs_epu8(e, _mm256_set1_epi64x(hi)));
    return _mm256_testz_si256(bad, bad);
}

#endif
