/* The roofline, measured in the same run as the cases it judges: streaming
   read bandwidth and register-only arithmetic peaks, with all threads. */
#include "bench.h"

#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

double tops_bench_floor(double bytes, double flops, double bandwidth_gbps, double peak_gflops) {
    if (!(bandwidth_gbps > 0) || !(peak_gflops > 0) || bytes < 0 || flops < 0) return 0;
    double t_bytes = bytes / (bandwidth_gbps * 1e9);
    double t_flops = flops / (peak_gflops * 1e9);
    return t_bytes > t_flops ? t_bytes : t_flops;
}

void tops_bench_row_derive(tops_bench_row *row, double flops, double weight_bytes, double min_bytes,
                           double peak_gflops, double read_gbps) {
    double t = row->median_s;
    row->gflops = t > 0 ? flops / t / 1e9 : 0;
    row->gbps = t > 0 ? weight_bytes / t / 1e9 : 0;
    row->speedup = t > 0 && row->baseline_median_s > 0 ? row->baseline_median_s / t : 0;
    row->floor_s = tops_bench_floor(min_bytes, flops, read_gbps, peak_gflops);
    row->floor_ratio = row->floor_s > 0 ? t / row->floor_s : 0;
    row->floor_bytes = min_bytes;
    row->floor_flops = flops;
    row->floor_peak_gflops = peak_gflops;
    row->floor_read_gbps = read_gbps;
}

void tops_bench_refine_floors(tops_bench_rows *rows, const tops_bench_roofline *first,
                              const tops_bench_roofline *second, tops_bench_roofline *best) {
    *best = *first;
    best->measurements = first->measurements + second->measurements;
    if (second->read_gbps > best->read_gbps) best->read_gbps = second->read_gbps;
    if (second->fma_gflops > best->fma_gflops) best->fma_gflops = second->fma_gflops;
    if (second->int8_gops > best->int8_gops) best->int8_gops = second->int8_gops;
    for (size_t i = 0; i < rows->n; i++) {
        tops_bench_row *r = &rows->v[i];
        if (!(r->floor_s > 0)) continue;
        /* the peak a row used tells its kind: the first measurement's value */
        double peak = r->floor_peak_gflops == first->int8_gops ? best->int8_gops
                      : r->floor_peak_gflops == first->fma_gflops ? best->fma_gflops
                                                                  : r->floor_peak_gflops;
        double bw = r->floor_read_gbps == first->read_gbps ? best->read_gbps : r->floor_read_gbps;
        tops_bench_row_derive(r, r->floor_flops, r->gbps * r->median_s * 1e9, r->floor_bytes, peak, bw);
    }
}

int64_t tops_bench_llc_bytes(void) {
    tops_cpu_info ci;
    tops_cpu_get_info(&ci); /* filled even when TOPS_ISA is rejected */
    for (int i = 2; i >= 0; i--)
        if (ci.cache_bytes[i] > 0) return ci.cache_bytes[i];
    return (int64_t)32 << 20;
}

uint64_t tops_bench_available_memory(void) {
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return 0;
    return (uint64_t)pages * (uint64_t)page;
}

/* ---- portable loops (the fallback below AVX2, and a twin for tests) ------- */

uint64_t tops_bench_read_scalar(const void *buf, size_t bytes) {
    const uint64_t *p = (const uint64_t *)buf;
    size_t n = bytes / 8;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 |= p[i];
        s1 |= p[i + 1];
        s2 |= p[i + 2];
        s3 |= p[i + 3];
    }
    for (; i < n; i++) s0 |= p[i];
    const unsigned char *tail = (const unsigned char *)buf + n * 8;
    for (size_t j = 0; j < bytes - n * 8; j++) s1 |= tail[j];
    return s0 | s1 | s2 | s3;
}

double tops_bench_fma_scalar(int64_t iterations) {
    float a[8] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
    const float x = 0.999999f, y = 1e-7f;
    for (int64_t i = 0; i < iterations; i++) {
        for (int j = 0; j < 8; j++) a[j] = a[j] * x + y;
        __asm__ volatile("" : : "r"(a) : "memory");
    }
    return (double)iterations * 8.0 * 2.0;
}

double tops_bench_i8dot_scalar(int64_t iterations) {
    int32_t c[8] = {0};
    int8_t w[8] = {3, -2, 7, -9, 1, 5, -4, 6};
    for (int64_t i = 0; i < iterations; i++) {
        for (int j = 0; j < 8; j++) c[j] += (int32_t)w[j] * (int32_t)w[(j + 1) & 7];
        __asm__ volatile("" : : "r"(c), "r"(w) : "memory");
    }
    return (double)iterations * 8.0 * 2.0;
}

/* ---- measurement ------------------------------------------------------------ */

typedef double (*peak_loop)(int64_t iterations);

/* Runs loop on every thread at once; returns operations per second of the
   best of ten short rounds: on a shared machine some round runs
   uncontended (the first also warms the clocks). */
static double measure_peak(peak_loop loop, int threads, int64_t iterations) {
    double best = 0;
    for (int round = 0; round < 10; round++) {
        double ops = 0;
        double t0 = tops_bench_now();
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) reduction(+ : ops)
#endif
        ops += loop(iterations);
        double dt = tops_bench_now() - t0;
        if (dt > 0 && ops / dt > best) best = ops / dt;
    }
    (void)threads;
    return best;
}

/* Picks the iteration count so one round takes about `seconds`. */
static int64_t calibrate(peak_loop loop, double seconds) {
    int64_t it = 1 << 14;
    for (;;) {
        double t0 = tops_bench_now();
        loop(it);
        double dt = tops_bench_now() - t0;
        if (dt > seconds / 8 || it > ((int64_t)1 << 40)) return (int64_t)((double)it * seconds / (dt > 0 ? dt : 1e-9));
        it *= 4;
    }
}

typedef uint64_t (*read_loop)(const void *buf, size_t bytes);

static tops_status measure_read(read_loop loop, int threads, size_t read_bytes, tops_bench_roofline *out) {
    static const char fn[] = "tensorops bench (roofline)";
    uint64_t want = (uint64_t)tops_bench_llc_bytes() * 4;
    if (want < ((uint64_t)64 << 20)) want = (uint64_t)64 << 20;
    if (read_bytes) want = read_bytes;
    uint64_t avail = tops_bench_available_memory();
    out->read_capped = 0;
    if (avail && want > avail / 4) {
        want = avail / 4;
        out->read_capped = 1;
    }
    size_t chunk_align = 4096;
    size_t per_thread = (size_t)(want / (uint64_t)threads) / chunk_align * chunk_align;
    if (per_thread == 0) per_thread = chunk_align;
    size_t bytes = per_thread * (size_t)threads;
    char *buf = tops__aligned_alloc(bytes);
    if (!buf) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate the %zu-byte read buffer", bytes);
    /* First touch by the thread that will read the chunk (NUMA placement). */
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
    {
#ifdef _OPENMP
        int t = omp_get_thread_num();
#else
        int t = 0;
#endif
        memset(buf + (size_t)t * per_thread, t + 1, per_thread);
    }
    double best = 0;
    uint64_t sink = 0;
    for (int round = 0; round < 5; round++) {
        double t0 = tops_bench_now();
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) reduction(| : sink)
#endif
        {
#ifdef _OPENMP
            int t = omp_get_thread_num();
#else
            int t = 0;
#endif
            sink |= loop(buf + (size_t)t * per_thread, per_thread);
        }
        double dt = tops_bench_now() - t0;
        if (dt > 0 && (double)bytes / dt > best) best = (double)bytes / dt;
    }
    tops__aligned_free(buf);
    if (sink == 0) return tops__fail(TOPS_INTERNAL, fn, "the read loop saw only zeros in a filled buffer");
    out->read_gbps = best / 1e9;
    out->read_bytes = (double)bytes;
    return TOPS_OK;
}

tops_status tops_bench_measure_roofline(int threads, size_t read_bytes, tops_bench_roofline *out) {
    static const char fn[] = "tensorops bench (roofline)";
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out is NULL");
    if (threads < 1) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "threads is %d; it must be >= 1", threads);
    memset(out, 0, sizeof *out);
    out->threads = threads;
    out->measurements = 1;
    tops_cpu_info ci;
    tops_cpu_get_info(&ci);
    /* The peaks of the level the library runs at: a floor from a wider unit
       than the kernels may use would be unreachable. */
    read_loop read = tops_bench_read_scalar;
    peak_loop fma = tops_bench_fma_scalar, dot = tops_bench_i8dot_scalar;
    snprintf(out->fma_kernel, sizeof out->fma_kernel, "scalar");
    snprintf(out->int8_kernel, sizeof out->int8_kernel, "scalar");
    snprintf(out->read_kernel, sizeof out->read_kernel, "scalar");
#if defined(TOPS_BENCH_X86)
    if (ci.isa >= TOPS_ISA_AVX2 && ci.isa <= TOPS_ISA_AMX) {
        read = tops_bench_read_avx2;
        fma = tops_bench_fma_avx2;
        dot = tops_bench_i8dot_avx2;
        snprintf(out->fma_kernel, sizeof out->fma_kernel, "avx2-fma");
        snprintf(out->int8_kernel, sizeof out->int8_kernel, "avx2-maddubs");
        snprintf(out->read_kernel, sizeof out->read_kernel, "avx2-load");
    }
    if (ci.isa >= TOPS_ISA_AVX512 && ci.isa <= TOPS_ISA_AMX) {
        fma = tops_bench_fma_avx512;
        read = tops_bench_read_avx512;
        snprintf(out->fma_kernel, sizeof out->fma_kernel, "avx512-fma");
        snprintf(out->read_kernel, sizeof out->read_kernel, "avx512-load");
    }
    if (ci.isa >= TOPS_ISA_AVX512_VNNI && ci.isa <= TOPS_ISA_AMX) {
        dot = tops_bench_i8dot_avx512_vnni;
        snprintf(out->int8_kernel, sizeof out->int8_kernel, "avx512-vnni");
    }
#endif
    tops_status st = measure_read(read, threads, read_bytes, out);
    if (st != TOPS_OK) return st;
    out->fma_gflops = measure_peak(fma, threads, calibrate(fma, 0.02)) / 1e9;
    out->int8_gops = measure_peak(dot, threads, calibrate(dot, 0.02)) / 1e9;
    if (!(out->fma_gflops > 0) || !(out->int8_gops > 0) || !(out->read_gbps > 0))
        return tops__fail(TOPS_INTERNAL, fn, "a ceiling measured as zero (read %.3g GB/s, fma %.3g, int8 %.3g)",
                          out->read_gbps, out->fma_gflops, out->int8_gops);
    return TOPS_OK;
}
