/* Roofline loops at the AVX-512 levels: compiled with the AVX-512 and VNNI
   flags (CMakeLists.txt) and called only after tops_cpu_get_info reports
   the level usable. */
#include "bench.h"

#include <immintrin.h>

/* Ten independent 16-wide FMA chains (latency 4, two ports). */
double tops_bench_fma_avx512(int64_t iterations) {
    __m512 a0 = _mm512_set1_ps(0.1f), a1 = _mm512_set1_ps(0.2f), a2 = _mm512_set1_ps(0.3f),
           a3 = _mm512_set1_ps(0.4f), a4 = _mm512_set1_ps(0.5f), a5 = _mm512_set1_ps(0.6f),
           a6 = _mm512_set1_ps(0.7f), a7 = _mm512_set1_ps(0.8f), a8 = _mm512_set1_ps(0.9f),
           a9 = _mm512_set1_ps(1.0f);
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    for (int64_t i = 0; i < iterations; i++) {
        a0 = _mm512_fmadd_ps(a0, x, y);
        a1 = _mm512_fmadd_ps(a1, x, y);
        a2 = _mm512_fmadd_ps(a2, x, y);
        a3 = _mm512_fmadd_ps(a3, x, y);
        a4 = _mm512_fmadd_ps(a4, x, y);
        a5 = _mm512_fmadd_ps(a5, x, y);
        a6 = _mm512_fmadd_ps(a6, x, y);
        a7 = _mm512_fmadd_ps(a7, x, y);
        a8 = _mm512_fmadd_ps(a8, x, y);
        a9 = _mm512_fmadd_ps(a9, x, y);
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7),
                         "+v"(a8), "+v"(a9));
    }
    float out = _mm512_reduce_add_ps(_mm512_add_ps(
        _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
        _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(_mm512_add_ps(a6, a7), _mm512_add_ps(a8, a9)))));
    __asm__ volatile("" : : "x"(out));
    return (double)iterations * 10.0 * 16.0 * 2.0;
}

/* vpdpbusd: 64 u8 x i8 multiply-adds (128 ops) per instruction, ten chains
   (latency 5 on two ports). */
double tops_bench_i8dot_avx512_vnni(int64_t iterations) {
    const __m512i u = _mm512_set1_epi8(3), w = _mm512_set1_epi8(-2);
    __m512i c0 = _mm512_setzero_si512(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0,
            c8 = c0, c9 = c0;
    for (int64_t i = 0; i < iterations; i++) {
        c0 = _mm512_dpbusd_epi32(c0, u, w);
        c1 = _mm512_dpbusd_epi32(c1, u, w);
        c2 = _mm512_dpbusd_epi32(c2, u, w);
        c3 = _mm512_dpbusd_epi32(c3, u, w);
        c4 = _mm512_dpbusd_epi32(c4, u, w);
        c5 = _mm512_dpbusd_epi32(c5, u, w);
        c6 = _mm512_dpbusd_epi32(c6, u, w);
        c7 = _mm512_dpbusd_epi32(c7, u, w);
        c8 = _mm512_dpbusd_epi32(c8, u, w);
        c9 = _mm512_dpbusd_epi32(c9, u, w);
        __asm__ volatile("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6), "+v"(c7),
                         "+v"(c8), "+v"(c9));
    }
    __m512i s = _mm512_add_epi32(
        _mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)),
        _mm512_add_epi32(_mm512_add_epi32(c4, c5), _mm512_add_epi32(_mm512_add_epi32(c6, c7), _mm512_add_epi32(c8, c9))));
    int out = _mm512_reduce_or_epi32(s); /* or, not add: the wrapped lanes would overflow a scalar sum */
    __asm__ volatile("" : : "r"(out));
    return (double)iterations * 10.0 * 64.0 * 2.0;
}

/* Streaming read with 64-byte loads and prefetch 2 KiB ahead (the fastest
   of the variants tried on a 2-vCPU VM: +6% over AVX2). */
uint64_t tops_bench_read_avx512(const void *buf, size_t bytes) {
    const __m512i *p = (const __m512i *)buf;
    size_t n = bytes / 256;
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < n; i++, p += 4) {
        for (int j = 0; j < 4; j++) _mm_prefetch((const char *)p + 2048 + 64 * j, _MM_HINT_T0);
        s0 = _mm512_or_si512(s0, _mm512_load_si512(p));
        s1 = _mm512_or_si512(s1, _mm512_load_si512(p + 1));
        s2 = _mm512_or_si512(s2, _mm512_load_si512(p + 2));
        s3 = _mm512_or_si512(s3, _mm512_load_si512(p + 3));
    }
    uint64_t s = (uint64_t)_mm512_reduce_or_epi64(_mm512_or_si512(_mm512_or_si512(s0, s1), _mm512_or_si512(s2, s3)));
    return s | tops_bench_read_scalar((const char *)buf + n * 256, bytes - n * 256);
}
