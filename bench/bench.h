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
    char path[128];       /* kernel family that ran (tops_matmul2d_path for matmul) */
    double median_s, min_s;
    double gflops;        /* from the median */
    double gbps;          /* weight (or K/V) bytes per second, from the median */
    double pack_s;        /* one-off packing time, 0 if none */
    char baseline[32];    /* "openblas-sgemm", "openblas-sgemv", "cublas-f16", ... ("none" if absent) */
    double baseline_median_s; /* 0 when there is no baseline */
    double speedup;       /* baseline_median_s / median_s (0 when there is no baseline) */
    double floor_s;       /* max(bytes / bandwidth, flops / peak) */
    double floor_ratio;   /* median_s / floor_s */
    double rel_l2, cos_sim; /* accuracy against f64 on sampled rows */
    /* attention only (0 otherwise) */
    int64_t batch, heads, kv_heads;
    int causal;
    /* Not in the JSON: the accuracy bound this case was held to, and
       whether it met it (the table marks a miss; the command exits 1). */
    double rel_l2_bound;
    int accuracy_ok;
    /* Not in the JSON: what the floor was computed from, so it can be
       recomputed with the best ceilings of the run (tops_bench_refine_floors). */
    double floor_bytes, floor_flops, floor_peak_gflops, floor_read_gbps;
    /* Not in the JSON: oneDNN bf16 [0] and int8-dyn [1] timed in
       alternation with this row (the same rounds as its median_s and
       min_s); 0 where not timed so. */
    double alt_median_s[2], alt_min_s[2];
} tops_bench_row;

/* The machine's ceilings, measured in the same run with all threads. */
typedef struct tops_bench_roofline {
    double read_gbps;      /* streaming read over >= 4x the last-level cache */
    double fma_gflops;     /* register-only f32 FMA loop */
    double int8_gops;      /* i8 dot-product loop (relaxed integer paths) */
    /* how each was measured (printed above the table) */
    int threads;
    double read_bytes;     /* size of the streamed buffer */
    int read_capped;       /* 1 if memory limits kept the buffer under 4x LLC */
    char fma_kernel[32];   /* "avx512-fma", "avx2-fma", "scalar" */
    char int8_kernel[32];  /* "avx512-vnni", "avx2-maddubs", "scalar" */
    char read_kernel[32];  /* "avx512-load", "avx2-load", "scalar" */
    int measurements;      /* 2: the best of the run's start and end */
} tops_bench_roofline;

/* floor_s for a case: the larger of bytes / bandwidth and flops / peak.
   Returns 0 if a ceiling is not positive (unknown). */
double tops_bench_floor(double bytes, double flops, double bandwidth_gbps, double peak_gflops);

/* Fills the derived fields of a row from its timings: gflops, gbps,
   speedup (0 without a baseline), floor_s and floor_ratio. */
void tops_bench_row_derive(tops_bench_row *row, double flops, double weight_bytes, double min_bytes,
                           double peak_gflops, double read_gbps);

/* ---- roofline (bench/roofline.c) ---------------------------------------- */

/* Measures the three ceilings with `threads` threads at the kernel level
   the library uses (tops_cpu_get_info).  read_bytes sizes the streamed
   buffer; 0 = 4x the last-level cache (at least 64 MiB), capped at a
   quarter of the available memory (read_capped then says so). */
tops_status tops_bench_measure_roofline(int threads, size_t read_bytes, tops_bench_roofline *out);

/* The pieces, exposed for tests: a streaming read of `bytes` (returns a sum
   so the reads cannot be dropped), and register-only loops returning the
   operations they did. */
uint64_t tops_bench_read_scalar(const void *buf, size_t bytes);
double tops_bench_fma_scalar(int64_t iterations);
double tops_bench_i8dot_scalar(int64_t iterations);
#if defined(TOPS_BENCH_X86)
uint64_t tops_bench_read_avx2(const void *buf, size_t bytes);
double tops_bench_fma_avx2(int64_t iterations);
double tops_bench_i8dot_avx2(int64_t iterations);
uint64_t tops_bench_read_avx512(const void *buf, size_t bytes);
double tops_bench_fma_avx512(int64_t iterations);
double tops_bench_i8dot_avx512_vnni(int64_t iterations);
#endif

/* ---- timing (bench/timing.c) --------------------------------------------- */

/* One timed call; iteration counts from 0 so a case can rotate its copies.
   A non-OK status stops the timing and is returned. */
typedef tops_status (*tops_bench_call)(void *ctx, int iteration);

typedef struct tops_bench_timing {
    double median_s, min_s;
    int repeats;
    double total_s;
} tops_bench_timing;

/* Warm-up calls, then at least min_repeats timed calls and at least
   min_seconds of them; the median and min of the timed calls. */
tops_status tops_bench_time(tops_bench_call call, void *ctx, int warmup, int min_repeats, double min_seconds,
                            tops_bench_timing *out);

/* Several calls timed in alternation, one each per round, so that each
   sees the same windows of a shared machine: `warmup` rounds, then rounds
   until at least min_repeats and until each entry has run min_seconds;
   fills each entry's median_s and min_s. */
typedef struct tops_bench_alt {
    tops_bench_call call;
    void *ctx;
    double median_s, min_s;
} tops_bench_alt;
tops_status tops_bench_time_alternating(tops_bench_alt *entries, int n, int warmup, int min_repeats,
                                        double min_seconds);

/* Median of n values (n >= 1; sorts v). */
double tops_bench_median(double *v, int n);
/* Seconds from a monotonic clock. */
double tops_bench_now(void);

/* ---- rows (bench/report.c) ----------------------------------------------- */

typedef struct tops_bench_rows {
    tops_bench_row *v;
    size_t n, cap;
} tops_bench_rows;

tops_status tops_bench_rows_push(tops_bench_rows *rows, const tops_bench_row *row);
void tops_bench_rows_free(tops_bench_rows *rows);

/* The ceilings are measured at the start of a run and again at its end; on a
   shared machine either can catch a neighbour's burst.  This keeps the best
   of each in *best and recomputes every row's floor with it (a row keeps the
   kind of peak, FMA or i8, it was given). */
void tops_bench_refine_floors(tops_bench_rows *rows, const tops_bench_roofline *first,
                              const tops_bench_roofline *second, tops_bench_roofline *best);

/* The table on stdout (or any stream), the roofline line above it. */
void tops_bench_print_table(FILE *out, const tops_bench_rows *rows, const tops_bench_roofline *roof);
/* After the table: each of our rows against the oneDNN rows of its shape
   and threads (bf16, int8-dyn), by medians and by mins; nothing without
   oneDNN rows. */
void tops_bench_print_onednn_ratios(FILE *out, const tops_bench_rows *rows);
/* The JSON array with exactly the documented keys (attention rows add
   batch, heads, kv_heads, causal).  Numbers not measured are null. */
tops_status tops_bench_write_json(const char *path, const tops_bench_rows *rows);
/* The same, as a malloc'd string (the caller frees it). */
char *tops_bench_json_string(const tops_bench_rows *rows);
/* An SVG of time against M for each format, with the baseline and the floor. */
tops_status tops_bench_write_svg(const char *path, const tops_bench_rows *rows);

/* ---- sessions and the per-op runners (bench/session.c) ------------------- */

#define TOPS_BENCH_MAX_LIST 32

typedef struct tops_bench_config {
    char op[16];                 /* "matmul" (default) | "attention" */
    tops_device device;          /* --device cpu | cuda[:N] */
    char formats[TOPS_BENCH_MAX_LIST][32]; /* --format list (names as given) */
    int nformats;
    int64_t m[TOPS_BENCH_MAX_LIST];
    int nm;
    int64_t k, n;
    int threads;
    int repeat;                  /* R: at least this many timed calls */
    double min_seconds;          /* and at least this long (0.5 s) */
    int relaxed;
    char isa[24];                /* --isa, "" = the library's choice */
    const char *json_path, *plot_path;
    int progress;                /* progress line on stderr */
    double rotate_bytes;         /* weight bytes touched per rotation; 0 = 2x the LLC */
    void *op_options;            /* a runner's own options (parse_option fills it) */
} tops_bench_config;

typedef struct tops_bench_session tops_bench_session;

/* A runner: one per (op, device).  The attention and CUDA engineers add
   theirs to the table in bench/session.c. */
typedef struct tops_bench_runner {
    const char *op;
    tops_device_kind device;
    /* Optional: consumes an op-specific flag at argv[*i] (advancing *i past
       its value); returns 1 if taken, 0 if not its flag, -1 on a bad value
       (with a message on stderr). */
    int (*parse_option)(tops_bench_config *cfg, int argc, char **argv, int *i);
    /* Optional: fills the op's defaults (formats, M list) and checks cfg
       before any work; a failure is a usage error. */
    tops_status (*prepare)(tops_bench_config *cfg);
    /* Runs every case of cfg, pushing one row per case. */
    tops_status (*run)(tops_bench_session *session, tops_bench_rows *rows);
    const char *usage; /* extra flags, printed by --help */
} tops_bench_runner;

/* The runner for (op, device), or NULL if none is registered. */
const tops_bench_runner *tops_bench_find_runner(const char *op, tops_device_kind device);
/* Every registered runner (for --help). */
const tops_bench_runner *tops_bench_runner_at(size_t i);

struct tops_bench_session {
    const tops_bench_config *cfg;
    tops_bench_roofline roof;
    int have_roof;
    int case_index, case_count; /* for the progress line */
};

/* The CPU roofline, measured on the first call of a session (a caller
   may preset s->roof and s->have_roof, as the tests do). */
tops_status tops_bench_session_roofline(tops_bench_session *s, const tops_bench_roofline **out);
/* The progress line on stderr ("[3/21] int4-g32 M=16: timing"); a NULL
   fmt clears it.  The _detail form updates a terminal only (no log spam). */
void tops_bench_progress(tops_bench_session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tops_bench_progress_detail(tops_bench_session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The last-level cache size (bytes) per tops_cpu_get_info; 32 MiB if unknown. */
int64_t tops_bench_llc_bytes(void);
/* Bytes of memory available now (0 if unknown). */
uint64_t tops_bench_available_memory(void);

/* ---- the matmul runner (bench/bench_matmul.c) ----------------------------- */

tops_status tops_bench_matmul_cpu(tops_bench_session *session, tops_bench_rows *rows);
/* The kernels the CPU baseline (OpenBLAS) runs, as OpenBLAS names its core
   ("Haswell", "SkylakeX", ...); "none" in a build without OpenBLAS. */
const char *tops_bench_baseline_kernels(void);
/* The SIMD width of an OpenBLAS core name: 0 SSE (Prescott, Core2, ...),
   1 AVX, 2 AVX2, 3 AVX-512; -1 for a name it does not know. */
int tops_bench_openblas_core_level(const char *core);
/* The OpenBLAS core that matches the level the library runs (ci->isa):
   Cooperlake or SkylakeX at the AVX-512 levels, Haswell at avx2; NULL
   where there is none to ask for (ref, not x86). */
const char *tops_bench_openblas_core_for(const tops_cpu_info *ci);

/* Output rows checked against f64 per case, spread over M: fills rows[]
   (at most TOPS_BENCH_CHECK_ROWS) and returns how many. */
#define TOPS_BENCH_CHECK_ROWS 4
int tops_bench_check_rows(int64_t m, int64_t *rows);
/* How many copies of `bytes` make the weights touched exceed 2x the LLC
   (cfg->rotate_bytes if set), within a third of the free memory and at most
   256; *capped = 1 if memory was short, 2 if the weights are small. */
int tops_bench_rotation_copies(const tops_bench_config *cfg, double bytes, int *capped);

/* ---- the oneDNN baseline rows (bench/bench_onednn.c; x86) ----------------- */

/* oneDNN's matmul at every M of the session: "onednn-bf16" (bf16
   activations, weights and result) and "onednn-int8-dyn" (f32 activations
   quantized to s8 on each call with a per-tensor scale, s8 weights with
   per-channel scales, f32 result), on `weights` [N, K] and the rotated
   activations, each [max M, K]; pushes one row per (case, M), whose
   baseline is base_name[i] / base_median_s[i] (OpenBLAS at cfg->m[i]).
   oneDNN is loaded at run time: when it is absent, or a case has no
   implementation on this CPU, the rows are left out, OK is returned and
   tops_bench_onednn_note says why.  A row over its sanity bound counts in
   *accuracy_failures.  keep (or NULL): the cases that made rows are kept
   there (NULL when none did) for tops_bench_onednn_alternate, while the
   caller keeps acts alive; tops_bench_onednn_release frees them. */
typedef struct tops_bench_onednn_kept tops_bench_onednn_kept;
tops_status tops_bench_onednn_matmul(tops_bench_session *session, const float *weights, float *const *acts,
                                     int nacts, const char (*base_name)[32], const double *base_median_s,
                                     tops_bench_rows *out, int *accuracy_failures, tops_bench_onednn_kept **keep);
/* The kept matmuls at M (1 .. the session's largest M) timed in
   alternation with `ours` (tops_bench_time_alternating, the session's
   repeats): out[0] ours, out[1] oneDNN bf16, out[2] oneDNN int8-dyn
   (median_s 0: that case made no rows). */
tops_status tops_bench_onednn_alternate(tops_bench_session *session, tops_bench_onednn_kept *kept, int64_t m,
                                        tops_bench_call ours, void *ours_ctx, tops_bench_alt out[3]);
void tops_bench_onednn_release(tops_bench_onednn_kept *kept);
/* One line on the last run's oneDNN: version, library, ISA, threads; or
   why there are no rows.  "" before any run. */
const char *tops_bench_onednn_note(void);
/* The name of a dnnl_cpu_isa_t value ("avx512_core_amx"), NULL if unknown. */
const char *tops_bench_onednn_isa_name(unsigned isa);
tops_status tops_bench_matmul_prepare(tops_bench_config *cfg);
/* Fills the matmul defaults (K=4096, N=12288, M=1,16,128, the given formats)
   and checks every --format name; shared by the CPU and CUDA runners. */
tops_status tops_bench_matmul_prepare_defaults(tops_bench_config *cfg, const char *const *default_formats);
/* The default suite: f32, f16, int8-g32, int4-g32, q4_0, mxfp4, nvfp4 at
   K=4096, N=12288, M = 1, 16, 128. */
extern const char *const tops_bench_matmul_default_formats[];

/* ---- the conv2d runner (bench/bench_conv.c) ------------------------------- */

/* One convolution: NHWC input [n, h, w, c], weights [o][kh][kw][c / groups]
   (f32, this order), NHWC output [n, oh, ow, o]. */
typedef struct tops_bench_conv_shape {
    int64_t n, h, w, c, o, kh, kw, oh, ow;
    int64_t sh, sw, dh, dw, pt, pb, pl, pr, groups;
} tops_bench_conv_shape;

int tops_bench_conv_parse(tops_bench_config *cfg, int argc, char **argv, int *i);
tops_status tops_bench_conv_prepare(tops_bench_config *cfg);
/* f64 of output pixels rows[] (pixels of [n * oh * ow, o], all channels) from
   the input x and the decoded weights w [o][kh * kw * c / groups]. */
void tops_bench_conv_reference(const tops_bench_conv_shape *s, const float *x, const float *w, const int64_t *rows,
                               int nrows, double *ref);
tops_status tops_bench_conv_cpu(tops_bench_session *session, tops_bench_rows *rows);
extern const char tops_bench_conv_usage[];
/* The (layer, batch) shapes --layers and --conv-batch enable, in order, with
   the layers' names; returns how many (at most max). */
int tops_bench_conv_cases(tops_bench_conv_shape *out, const char **names, int max);
/* `tensorops bench --op conv2d --device cuda` (bench/bench_cuda_conv.c). */
tops_status tops_bench_conv_cuda_prepare(tops_bench_config *cfg);
tops_status tops_bench_conv_cuda(tops_bench_session *session, tops_bench_rows *rows);
extern const char tops_bench_conv_cuda_usage[];

/* oneDNN's f32 convolution primitive on the same NHWC input and weights
   (input and output NHWC, the weights reordered once into the layout the
   primitive picks, as a user's framework would): checks the output pixels
   `check` (row indices of [n * oh * ow, o]) against ref, then times it in
   alternation with the nours calls of `ours` (tops_bench_time_alternating:
   both see the same windows of a shared machine, whose medians fill
   ours[i]), and fills *row (op "conv2d", format "onednn-f32").  When
   oneDNN is absent or has no implementation, returns OK with
   row->median_s = 0, ours untimed (median_s 0) and the reason in
   tops_bench_onednn_note(). */
tops_status tops_bench_onednn_conv(tops_bench_session *session, const tops_bench_conv_shape *shape,
                                   const float *input, const float *weights, const int64_t *check, int nchk,
                                   const double *ref, tops_bench_row *row, tops_bench_alt *ours, int nours);

/* ---- the GPU matmul runner (bench/bench_cuda.c; CUDA builds only) -------- */

/* Default suite: int4-g128, mxfp4, int4-g32, nvfp4, q4_0, int8-g32, e4m3-ch,
   f16 at K=4096, N=12288, M = 1, 16, 128; f16 activations and outputs;
   cuBLAS f16 and cuBLASLt e4m3 rows in the same run. */
tops_status tops_bench_matmul_cuda_prepare(tops_bench_config *cfg);
tops_status tops_bench_matmul_cuda(tops_bench_session *session, tops_bench_rows *rows);

/* Deterministic test data: n normal(0, 1) values from a seed. */
/* A dense row-major [rows, cols] view of a plain element buffer in host or
   device memory (the bench's and validate's operands). */
tops_status tops_bench_view2d(tops_dtype dt, void *data, int64_t rows, int64_t cols, tops_memory memory,
                              tops_tensor *out);
void tops_bench_fill_normal(float *v, int64_t n, uint64_t seed);
/* f64 reference of rows `rows` of A[., K] * W^T, W stored [N, K] (both f32,
   contiguous): ref[r * n + j]. */
void tops_bench_reference_rows(const float *a, const float *w, int64_t k, int64_t n, const int64_t *rows,
                               int nrows, double *ref);
/* Accuracy of y against a reference: rel-L2, cos-sim and max-abs (NaN if y
   holds a NaN where ref does not). */
void tops_bench_compare(const double *ref, const float *y, int64_t n, double *rel_l2, double *cos_sim,
                        double *max_abs);

/* ---- the attention runner (bench/bench_attention.c) ----------------------- */

/* The attention flags (shared by the CPU and CUDA runners). */
typedef struct tops_bench_attn_options {
    int64_t batch, heads, kv_heads, seq, kv_seq, head_dim;
    int causal_mode; /* 0 both (default), 1 causal only, 2 non-causal only */
    char dtypes[3][8];
    int ndtypes;
    int32_t varlen[64]; /* --varlen: the sequence lengths (CPU runner) */
    int nvarlen;
    char kv_formats[8][24]; /* --kv-format: KV cache formats (GPU runner) */
    int nkv;
} tops_bench_attn_options;
tops_bench_attn_options *tops_bench_attention_options(void);
int tops_bench_attention_parse(tops_bench_config *cfg, int argc, char **argv, int *i);
tops_status tops_bench_attention_prepare(tops_bench_config *cfg);
tops_status tops_bench_attention_cpu(tops_bench_session *session, tops_bench_rows *rows);
extern const char tops_bench_attention_usage[];
/* The GPU runner (bench/bench_cuda_attention.c; CUDA builds only): the fused
   kernel against unfused cuBLAS attention. */
tops_status tops_bench_attention_cuda_prepare(tops_bench_config *cfg);
tops_status tops_bench_attention_cuda(tops_bench_session *session, tops_bench_rows *rows);
extern const char tops_bench_attention_cuda_usage[];

#endif
