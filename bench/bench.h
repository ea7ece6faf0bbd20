/* The bench harness shared by `tensorops bench` cases (matmul, attention,
   cuda): one result row per case, with exactly the JSON keys the README
   documents, and the roofline measured in the same run. */
#ifndef TOPS_BENCH_H
#define TOPS_BENCH_H

#include "tensorops.h"

#include <stdio.h>

typedef struct tops_bench_row {
    char op[16];          /* "matmul" | "attention" */
    char format[32];      /* weight format, or the dtype for attention */
    int64_t m, k, n;      /* attention: m = query length, n = key length, k = head dim */
    int threads;
    char isa[24];         /* level in use, or "cuda:N" */
    char path[64];        /* kernel family that ran */
    double median_s, min_s;
    double gflops;        /* from the median */
    double gbps;          /* weight (or K/V) bytes per second, from the median */
    double pack_s;        /* one-off packing time, 0 if none */
    char baseline[32];    /* "openblas-sgemm", "openblas-sgemv", "cublas-f16", ... */
    double baseline_median_s;
    double speedup;       /* baseline_median_s / median_s */
    double floor_s;       /* max(bytes / bandwidth, flops / peak) */
    double floor_ratio;   /* median_s / floor_s */
    double rel_l2, cos_sim; /* accuracy against f64 on sampled rows */
    /* attention only (0 otherwise) */
    int64_t batch, heads, kv_heads;
    int causal;
} tops_bench_row;

/* The machine's ceilings, measured in the same run with all threads. */
typedef struct tops_bench_roofline {
    double read_gbps;      /* streaming read over >= 4x the last-level cache */
    double fma_gflops;     /* register-only f32 FMA loop */
    double int8_gops;      /* i8 dot-product loop (relaxed integer paths) */
} tops_bench_roofline;

/* floor_s for a case: the larger of bytes / bandwidth and flops / peak. */
double tops_bench_floor(double bytes, double flops, double bandwidth_gbps, double peak_gflops);

#endif
