/* Roofline loops at the AVX2 level: compiled with -mavx2 -mfma (CMakeLists.txt)
   and called only after tops_cpu_get_info reports the level usable. */
#include "bench.h"

#include <immintrin.h>

/* Ten independent FMA chains: enough to cover the FMA latency (4 cycles)
   on two ports, so the loop runs at the issue rate, not the latency. */
double tops_bench_fma_avx2(int64_t iterations) {
    __m256 a0 = _mm256_set1_ps(0.1f), a1 = _mm256_set1_ps(0.2f), a2 = _mm256_set1_ps(0.3f),
           a3 = _mm256_set1_ps(0.4f), a4 = _mm256_set1_ps(0.5f), a5 = _mm256_set1_ps(0.6f),
           a6 = _mm256_set1_ps(0.7f), a7 = _mm256_set1_ps(0.8f), a8 = _mm256_set1_ps(0.9f),
           a9 = _mm256_set1_ps(1.0f);
    const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
    for (int64_t i = 0; i < iterations; i++) {
        a0 = _mm256_fmadd_ps(a0, x, y);
        a1 = _mm256_fmadd_ps(a1, x, y);
        a2 = _mm256_fmadd_ps(a2, x, y);
        a3 = _mm256_fmadd_ps(a3, x, y);
        a4 = _mm256_fmadd_ps(a4, x, y);
        a5 = _mm256_fmadd_ps(a5, x, y);
        a6 = _mm256_fmadd_ps(a6, x, y);
        a7 = _mm256_fmadd_ps(a7, x, y);
        a8 = _mm256_fmadd_ps(a8, x, y);
        a9 = _mm256_fmadd_ps(a9, x, y);
        /* keeps the compiler from folding the chains */
        __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7),
                         "+x"(a8), "+x"(a9));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(_mm256_add_ps(a6, a7),
                                                                                 _mm256_add_ps(a8, a9))));
    float out[8];
    _mm256_storeu_ps(out, s);
    __asm__ volatile("" : : "r"(out) : "memory");
    return (double)iterations * 10.0 * 8.0 * 2.0;
}

/* The relaxed AVX2 integer dot product: vpmaddubsw (u8 x i8 -> i16 pairs),
   vpmaddwd with ones (-> i32), vpaddd; 32 multiply-adds (64 ops) per step.
   Two activation and four weight registers give eight distinct products
   into eight chains, as in a 2x4 microkernel; the empty asm makes the
   operands opaque each step so nothing is hoisted or merged. */
double tops_bench_i8dot_avx2(int64_t iterations) {
    __m256i u0 = _mm256_set1_epi8(3), u1 = _mm256_set1_epi8(5);
    __m256i w0 = _mm256_set1_epi8(-2), w1 = _mm256_set1_epi8(7), w2 = _mm256_set1_epi8(-9), w3 = _mm256_set1_epi8(1);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
#define TOPS_DOT_(c, u, w) c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(u, w), ones))
    for (int64_t i = 0; i < iterations; i++) {
        __asm__ volatile("" : "+x"(u0), "+x"(u1), "+x"(w0), "+x"(w1), "+x"(w2), "+x"(w3));
        TOPS_DOT_(c0, u0, w0);
        TOPS_DOT_(c1, u0, w1);
        TOPS_DOT_(c2, u0, w2);
        TOPS_DOT_(c3, u0, w3);
        TOPS_DOT_(c4, u1, w0);
        TOPS_DOT_(c5, u1, w1);
        TOPS_DOT_(c6, u1, w2);
        TOPS_DOT_(c7, u1, w3);
    }
#undef TOPS_DOT_
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)),
                                 _mm256_add_epi32(_mm256_add_epi32(c4, c5), _mm256_add_epi32(c6, c7)));
    int out[8];
    _mm256_storeu_si256((__m256i *)out, s);
    __asm__ volatile("" : : "r"(out) : "memory");
    return (double)iterations * 8.0 * 32.0 * 2.0;
}

/* Streaming read: 32-byte loads into four independent OR chains (cheap, so
   the loop is load-bound), with software prefetch 1 KiB ahead: a core in a
   VM keeps too few misses in flight without it (measured +8%). */
uint64_t tops_bench_read_avx2(const void *buf, size_t bytes) {
    const __m256i *p = (const __m256i *)buf;
    size_t n = bytes / 128;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < n; i++, p += 4) {
        _mm_prefetch((const char *)p + 1024, _MM_HINT_T0);
        _mm_prefetch((const char *)p + 1088, _MM_HINT_T0);
        s0 = _mm256_or_si256(s0, _mm256_load_si256(p));
        s1 = _mm256_or_si256(s1, _mm256_load_si256(p + 1));
        s2 = _mm256_or_si256(s2, _mm256_load_si256(p + 2));
        s3 = _mm256_or_si256(s3, _mm256_load_si256(p + 3));
    }
    __m256i s = _mm256_or_si256(_mm256_or_si256(s0, s1), _mm256_or_si256(s2, s3));
    uint64_t out[4];
    _mm256_storeu_si256((__m256i *)out, s);
    uint64_t tail = tops_bench_read_scalar((const char *)buf + n * 128, bytes - n * 128);
    return out[0] | out[1] | out[2] | out[3] | tail;
}
