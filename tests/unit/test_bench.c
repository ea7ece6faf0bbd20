/* The bench harness: floor and speedup arithmetic on known inputs, the
   timing loop's rules, the roofline loops, the JSON (parsed back with
   cJSON, every key), the SVG, and a tiny matmul case end to end. */
#include "harness.h"

#include "bench.h"
#include "cpu/dispatch.h"

#include <cjson/cJSON.h>
#include <unistd.h>

static void test_floor_arithmetic(void) {
    /* 1 GB at 10 GB/s = 0.1 s beats 1 GFLOP at 100 GFLOP/s = 0.01 s */
    ASSERT_NEAR(tops_bench_floor(1e9, 1e9, 10, 100), 0.1, 1e-12);
    /* compute-bound: 1 TFLOP at 500 GFLOP/s = 2 s over 1 MB at 10 GB/s */
    ASSERT_NEAR(tops_bench_floor(1e6, 1e12, 10, 500), 2.0, 1e-12);
    /* an unknown ceiling gives no floor rather than a wrong one */
    ASSERT_NEAR(tops_bench_floor(1e9, 1e9, 0, 100), 0, 0);
    ASSERT_NEAR(tops_bench_floor(1e9, 1e9, 10, -1), 0, 0);
    ASSERT_NEAR(tops_bench_floor(1e9, 1e9, NAN, 100), 0, 0);
}

static void test_row_derive(void) {
    tops_bench_row r;
    memset(&r, 0, sizeof r);
    r.median_s = 0.02;
    r.baseline_median_s = 0.05;
    /* M=16, N=12288, K=4096: 2*M*N*K flops; int4-g32 weights 4.5 bits */
    double flops = 2.0 * 16 * 12288 * 4096, wbytes = 4.5 / 8 * 12288 * 4096;
    double min_bytes = wbytes + 16.0 * 4096 * 4 + 16.0 * 12288 * 4;
    tops_bench_row_derive(&r, flops, wbytes, min_bytes, 200, 20);
    ASSERT_NEAR(r.gflops, flops / 0.02 / 1e9, 1e-9);
    ASSERT_NEAR(r.gbps, wbytes / 0.02 / 1e9, 1e-9);
    ASSERT_NEAR(r.speedup, 2.5, 1e-12);
    double want_floor = fmax(min_bytes / 20e9, flops / 200e9);
    ASSERT_NEAR(r.floor_s, want_floor, 1e-15);
    ASSERT_NEAR(r.floor_ratio, 0.02 / want_floor, 1e-9);
    /* no baseline: no speedup */
    r.baseline_median_s = 0;
    tops_bench_row_derive(&r, flops, wbytes, min_bytes, 200, 20);
    ASSERT_NEAR(r.speedup, 0, 0);
}

static void test_refine_floors(void) {
    tops_bench_roofline first = {.read_gbps = 10, .fma_gflops = 100, .int8_gops = 400, .measurements = 1};
    tops_bench_roofline second = {.read_gbps = 20, .fma_gflops = 50, .int8_gops = 800, .measurements = 1};
    tops_bench_rows rows = {0};
    tops_bench_row bw, fma, i8;
    memset(&bw, 0, sizeof bw);
    bw.median_s = 1.0;
    bw.baseline_median_s = 2.0;
    tops_bench_row_derive(&bw, 1e9, 4e9, 5e9, first.fma_gflops, first.read_gbps); /* 0.5 s of bytes */
    fma = bw;
    tops_bench_row_derive(&fma, 1e11, 1e6, 1e6, first.fma_gflops, first.read_gbps); /* 1 s of FMAs */
    i8 = bw;
    tops_bench_row_derive(&i8, 1e12, 1e6, 1e6, first.int8_gops, first.read_gbps); /* 2.5 s of i8 */
    ASSERT_OK(tops_bench_rows_push(&rows, &bw));
    ASSERT_OK(tops_bench_rows_push(&rows, &fma));
    ASSERT_OK(tops_bench_rows_push(&rows, &i8));
    tops_bench_roofline best;
    tops_bench_refine_floors(&rows, &first, &second, &best);
    ASSERT_NEAR(best.read_gbps, 20, 0);
    ASSERT_NEAR(best.fma_gflops, 100, 0);
    ASSERT_NEAR(best.int8_gops, 800, 0);
    ASSERT_EQ_INT(best.measurements, 2);
    ASSERT_NEAR(rows.v[0].floor_s, 0.25, 1e-12);  /* 5 GB at 20 GB/s */
    ASSERT_NEAR(rows.v[1].floor_s, 1.0, 1e-12);   /* the FMA peak did not improve */
    ASSERT_NEAR(rows.v[2].floor_s, 1.25, 1e-12);  /* the i8 row uses the i8 peak */
    ASSERT_NEAR(rows.v[2].floor_ratio, 0.8, 1e-12);
    ASSERT_NEAR(rows.v[0].speedup, 2.0, 1e-12);   /* untouched */
    ASSERT_NEAR(rows.v[0].gbps, 4.0, 1e-9);
    tops_bench_rows_free(&rows);
}

static void test_median(void) {
    double odd[] = {5, 1, 3};
    ASSERT_NEAR(tops_bench_median(odd, 3), 3, 0);
    double even[] = {4, 1, 3, 2};
    ASSERT_NEAR(tops_bench_median(even, 4), 2.5, 0);
    double one[] = {7};
    ASSERT_NEAR(tops_bench_median(one, 1), 7, 0);
}

typedef struct counter {
    int calls, fail_at;
    int last_iteration;
    useconds_t sleep_us;
} counter;

static tops_status count_call(void *ctx, int iteration) {
    counter *c = ctx;
    c->calls++;
    c->last_iteration = iteration;
    if (c->sleep_us) usleep(c->sleep_us);
    return c->calls == c->fail_at ? TOPS_INTERNAL : TOPS_OK;
}

static void test_timing_rules(void) {
    counter c = {0, 0, -1, 0};
    tops_bench_timing t;
    /* warm-up calls are not timed; at least R timed calls */
    ASSERT_OK(tops_bench_time(count_call, &c, 2, 3, 0, &t));
    ASSERT_EQ_INT(c.calls, 5);
    ASSERT_EQ_INT(t.repeats, 3);
    ASSERT_EQ_INT(c.last_iteration, 4); /* iterations count on, for rotation */
    ASSERT_TRUE(t.min_s <= t.median_s);
    /* and at least the minimum time */
    counter slow = {0, 0, -1, 2000};
    ASSERT_OK(tops_bench_time(count_call, &slow, 0, 1, 0.02, &t));
    ASSERT_TRUE(t.total_s >= 0.02);
    ASSERT_TRUE(t.repeats >= 2 || t.min_s >= 0.02); /* one call only if a busy host stretched it past 20 ms */
    ASSERT_TRUE(t.min_s >= 0.002);
    /* a failing call stops the timing with its status */
    counter bad = {0, 3, -1, 0};
    ASSERT_STATUS(tops_bench_time(count_call, &bad, 1, 10, 0, &t), TOPS_INTERNAL);
    ASSERT_EQ_INT(bad.calls, 3);
    ASSERT_STATUS(tops_bench_time(count_call, &c, 0, 0, 0, &t), TOPS_INVALID_ARGUMENT);
    ASSERT_STATUS(tops_bench_time(NULL, &c, 0, 1, 0, &t), TOPS_INVALID_ARGUMENT);
}

static void test_read_loops(void) {
    size_t bytes = 1 << 16;
    uint64_t *buf = aligned_alloc(64, bytes);
    memset(buf, 0, bytes);
    buf[5] = 0x10;
    buf[bytes / 8 - 1] = 0x8000000000000000ull; /* the last word counts */
    buf[1000] = 0x3;
    uint64_t want = 0x8000000000000013ull;
    ASSERT_EQ_U64(tops_bench_read_scalar(buf, bytes), want);
#if defined(TOPS_BENCH_X86)
    tops_cpu_info ci;
    tops_cpu_get_info(&ci);
    if (ci.isa_available[TOPS_ISA_AVX2]) ASSERT_EQ_U64(tops_bench_read_avx2(buf, bytes), want);
    if (ci.isa_available[TOPS_ISA_AVX512]) ASSERT_EQ_U64(tops_bench_read_avx512(buf, bytes), want);
    /* a ragged length reaches the tail too */
    ((unsigned char *)buf)[bytes - 208] = 0x40; /* first byte of a word in the 56-byte tail */
    ASSERT_TRUE(tops_bench_read_scalar(buf, bytes - 200) & 0x40);
    if (ci.isa_available[TOPS_ISA_AVX2]) ASSERT_TRUE(tops_bench_read_avx2(buf, bytes - 200) & 0x40);
    if (ci.isa_available[TOPS_ISA_AVX512]) ASSERT_TRUE(tops_bench_read_avx512(buf, bytes - 200) & 0x40);
#endif
    free(buf);
}

static void test_peak_loops_count_ops(void) {
    ASSERT_NEAR(tops_bench_fma_scalar(1000), 1000.0 * 16, 0);
    ASSERT_NEAR(tops_bench_i8dot_scalar(1000), 1000.0 * 16, 0);
#if defined(TOPS_BENCH_X86)
    tops_cpu_info ci;
    tops_cpu_get_info(&ci);
    if (ci.isa_available[TOPS_ISA_AVX2]) {
        ASSERT_NEAR(tops_bench_fma_avx2(1000), 1000.0 * 10 * 8 * 2, 0);
        ASSERT_NEAR(tops_bench_i8dot_avx2(1000), 1000.0 * 8 * 32 * 2, 0);
    }
    if (ci.isa_available[TOPS_ISA_AVX512]) ASSERT_NEAR(tops_bench_fma_avx512(1000), 1000.0 * 10 * 16 * 2, 0);
    if (ci.isa_available[TOPS_ISA_AVX512_VNNI])
        ASSERT_NEAR(tops_bench_i8dot_avx512_vnni(1000), 1000.0 * 10 * 64 * 2, 0);
#endif
}

static void test_roofline_small(void) {
    tops_bench_roofline roof;
    ASSERT_OK(tops_bench_measure_roofline(1, (size_t)4 << 20, &roof));
    ASSERT_TRUE(roof.read_gbps > 0.1);
    ASSERT_TRUE(roof.fma_gflops > 0.1);
    ASSERT_TRUE(roof.int8_gops > 0.1);
    ASSERT_TRUE(roof.read_bytes >= (double)(4 << 20) - 8192);
    ASSERT_EQ_INT(roof.threads, 1);
    ASSERT_STATUS(tops_bench_measure_roofline(0, 0, &roof), TOPS_INVALID_ARGUMENT);
    ASSERT_STATUS(tops_bench_measure_roofline(1, 0, NULL), TOPS_INVALID_ARGUMENT);
}

static const char *const json_keys[] = {"op",       "format",  "m",          "k",
                                        "n",        "threads", "isa",        "path",
                                        "median_s", "min_s",   "gflops",     "gbps",
                                        "pack_s",   "baseline", "baseline_median_s", "speedup",
                                        "floor_s",  "floor_ratio", "rel_l2",  "cos_sim"};
#define N_JSON_KEYS (int)(sizeof json_keys / sizeof json_keys[0])

static tops_bench_row sample_row(const char *op, const char *format, int64_t m) {
    tops_bench_row r;
    memset(&r, 0, sizeof r);
    snprintf(r.op, sizeof r.op, "%s", op);
    snprintf(r.format, sizeof r.format, "%s", format);
    r.m = m, r.k = 4096, r.n = 12288, r.threads = 2;
    snprintf(r.isa, sizeof r.isa, "avx2");
    snprintf(r.path, sizeof r.path, "path \"quoted\"");
    r.median_s = 1e-3 * (double)m, r.min_s = 0.9e-3 * (double)m;
    snprintf(r.baseline, sizeof r.baseline, "openblas-sgemm");
    r.baseline_median_s = 2e-3 * (double)m;
    r.floor_s = 0.5e-3;
    r.rel_l2 = 1e-7, r.cos_sim = 1;
    r.accuracy_ok = 1;
    tops_bench_row_derive(&r, 1e9, 1e7, 2e7, 100, 10);
    return r;
}

/* Every key present, nothing else; returns the object count. */
static int check_json_keys(const char *text, int attention_rows) {
    cJSON *arr = cJSON_Parse(text);
    ASSERT_TRUE(arr && cJSON_IsArray(arr));
    if (!arr) return -1;
    int n = cJSON_GetArraySize(arr), att = 0;
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_GetArrayItem(arr, i);
        ASSERT_TRUE(cJSON_IsObject(o));
        for (int k = 0; k < N_JSON_KEYS; k++)
            if (!cJSON_HasObjectItem(o, json_keys[k])) TH_FAIL_AT("row %d lacks key %s", i, json_keys[k]);
        int count = cJSON_GetArraySize(o);
        const char *op = cJSON_GetStringValue(cJSON_GetObjectItem(o, "op"));
        if (op && strcmp(op, "attention") == 0) {
            att++;
            ASSERT_EQ_INT(count, N_JSON_KEYS + 4);
            ASSERT_TRUE(cJSON_HasObjectItem(o, "kv_heads") && cJSON_HasObjectItem(o, "causal"));
        } else {
            ASSERT_EQ_INT(count, N_JSON_KEYS);
        }
    }
    ASSERT_EQ_INT(att, attention_rows);
    cJSON_Delete(arr);
    return n;
}

static void test_json(void) {
    tops_bench_rows rows = {0};
    tops_bench_row a = sample_row("matmul", "int4-g32", 16), b = sample_row("matmul", "f32", 1);
    b.baseline_median_s = 0; /* no baseline: null speedup */
    snprintf(b.baseline, sizeof b.baseline, "none");
    tops_bench_row_derive(&b, 1e9, 1e7, 2e7, 100, 10);
    b.rel_l2 = NAN; /* a wrong result: null, never invalid JSON */
    tops_bench_row c = sample_row("attention", "f16", 2048);
    c.batch = 1, c.heads = 8, c.kv_heads = 8, c.causal = 1;
    ASSERT_OK(tops_bench_rows_push(&rows, &a));
    ASSERT_OK(tops_bench_rows_push(&rows, &b));
    ASSERT_OK(tops_bench_rows_push(&rows, &c));
    char *text = tops_bench_json_string(&rows);
    ASSERT_TRUE(text != NULL);
    ASSERT_EQ_INT(check_json_keys(text, 1), 3);
    cJSON *arr = cJSON_Parse(text);
    cJSON *o0 = cJSON_GetArrayItem(arr, 0), *o1 = cJSON_GetArrayItem(arr, 1);
    ASSERT_NEAR(cJSON_GetNumberValue(cJSON_GetObjectItem(o0, "speedup")), 2.0, 1e-12);
    ASSERT_EQ_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(o0, "m")), 16);
    ASSERT_EQ_STR(cJSON_GetStringValue(cJSON_GetObjectItem(o0, "path")), "path \"quoted\"");
    ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(o1, "speedup")));
    ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(o1, "baseline_median_s")));
    ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(o1, "rel_l2")));
    cJSON_Delete(arr);
    cJSON_free(text);

    /* the file form, and an unwritable path */
    char path[] = "/tmp/tops_bench_json_XXXXXX";
    int fd = mkstemp(path);
    ASSERT_TRUE(fd >= 0);
    close(fd);
    ASSERT_OK(tops_bench_write_json(path, &rows));
    FILE *f = fopen(path, "r");
    char buf[16384];
    size_t len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[len] = 0;
    ASSERT_EQ_INT(check_json_keys(buf, 1), 3);
    unlink(path);
    ASSERT_STATUS(tops_bench_write_json("/nonexistent-dir/x.json", &rows), TOPS_IO_ERROR);
    tops_bench_rows_free(&rows);
    /* an empty run is an empty array */
    text = tops_bench_json_string(&rows);
    ASSERT_EQ_INT(check_json_keys(text, 0), 0);
    cJSON_free(text);
}

static void test_svg(void) {
    tops_bench_rows rows = {0};
    const char *formats[] = {"f32", "int4-g32"};
    for (int f = 0; f < 2; f++)
        for (int64_t m = 1; m <= 128; m *= 8) {
            tops_bench_row r = sample_row("matmul", formats[f], m);
            ASSERT_OK(tops_bench_rows_push(&rows, &r));
        }
    char path[] = "/tmp/tops_bench_svg_XXXXXX";
    int fd = mkstemp(path);
    ASSERT_TRUE(fd >= 0);
    close(fd);
    ASSERT_OK(tops_bench_write_svg(path, &rows));
    FILE *f = fopen(path, "r");
    static char buf[1 << 16];
    size_t len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[len] = 0;
    ASSERT_TRUE(strncmp(buf, "<?xml", 5) == 0);
    ASSERT_TRUE(strstr(buf, "</svg>") != NULL);
    ASSERT_TRUE(strstr(buf, "log scale") != NULL);           /* labelled log axes */
    ASSERT_TRUE(strstr(buf, "M, rows of activations") != NULL);
    ASSERT_TRUE(strstr(buf, ">baseline<") != NULL && strstr(buf, ">openblas-sgemm<") != NULL);
    ASSERT_TRUE(strstr(buf, ">int4-g32<") != NULL);          /* one legend entry per format */
    ASSERT_TRUE(strstr(buf, "roofline floor") != NULL);
    unlink(path);
    tops_bench_rows empty = {0};
    ASSERT_STATUS(tops_bench_write_svg(path, &empty), TOPS_INVALID_ARGUMENT);
    tops_bench_rows_free(&rows);
}

/* A tiny case through the real runner: f32 and f16 weights at ragged
   sizes, a preset roofline (a real one streams gigabytes) and a small
   rotation. */
static void test_tiny_matmul_case(void) {
    tops_bench_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.op, sizeof cfg.op, "matmul");
    /* plain element formats, and formats with scale, bias and codebook
       planes and a tensor scale (the rotated deep copies carry them all) */
    const char *formats[] = {"f32", "f16", "nvfp4", "int4-g32-affine", "lut4-row"};
    for (int i = 0; i < 5; i++) snprintf(cfg.formats[i], 32, "%s", formats[i]);
    cfg.nformats = 5;
    cfg.m[0] = 1, cfg.m[1] = 3;
    cfg.nm = 2;
    cfg.k = 67, cfg.n = 45;
    cfg.threads = 2;
    cfg.repeat = 2;
    cfg.min_seconds = 0;
    cfg.rotate_bytes = 1 << 16; /* several copies of each layout */
    ASSERT_OK(tops_bench_matmul_prepare(&cfg));
    tops_bench_session s;
    memset(&s, 0, sizeof s);
    s.cfg = &cfg;
    s.roof = (tops_bench_roofline){.read_gbps = 10, .fma_gflops = 100, .int8_gops = 400, .threads = 2};
    s.have_roof = 1;
    tops_bench_rows rows = {0};
    ASSERT_OK(tops_bench_matmul_cpu(&s, &rows));
    /* ours first, then oneDNN's where it loaded (bf16 and int8, per M) */
    const char *note = tops_bench_onednn_note();
    /* a case oneDNN has no implementation of on this CPU (bf16 on AVX2) is
       named in the note and gives no rows */
    const int loaded = strncmp(note, "oneDNN 3.", 9) == 0;
    const int has_bf16 = loaded && !strstr(note, "onednn-bf16: no rows"), has_int8 = loaded && !strstr(note, "onednn-int8-dyn: no rows");
    size_t ours = 10, dnn = 2 * (size_t)(has_bf16 + has_int8);
#if defined(TOPS_HAVE_ONEDNN)
    if (!dnn) fprintf(stderr, "note: built with oneDNN, yet no oneDNN rows: %s\n", note);
#else
    ASSERT_TRUE(strncmp(note, "oneDNN: no rows: ", 17) == 0);
#endif
    ASSERT_EQ_INT(rows.n, ours + dnn);
    for (size_t i = ours; i < rows.n; i++) {
        const tops_bench_row *r = &rows.v[i];
        int int8 = !has_bf16 || i >= ours + 2;
        ASSERT_EQ_STR(r->format, int8 ? "onednn-int8-dyn" : "onednn-bf16");
        ASSERT_EQ_INT(r->m, (i - ours) % 2 ? 3 : 1);
        ASSERT_TRUE(r->median_s > 0 && r->min_s <= r->median_s);
        ASSERT_TRUE(r->rel_l2 < (int8 ? 5e-2 : 2e-2) && r->rel_l2 > 1e-5); /* it did round */
        ASSERT_TRUE(r->accuracy_ok);
        ASSERT_TRUE(strncmp(r->path, "oneDNN 3.", 9) == 0);
        ASSERT_TRUE(r->floor_s > 0);
    }
    rows.n = ours;
    for (size_t i = 0; i < rows.n; i++) {
        const tops_bench_row *r = &rows.v[i];
        ASSERT_TRUE(r->median_s > 0 && r->min_s > 0 && r->min_s <= r->median_s);
        ASSERT_TRUE(r->rel_l2 < 1e-5);
        ASSERT_TRUE(r->cos_sim > 0.99999);
        ASSERT_TRUE(r->accuracy_ok);
        ASSERT_TRUE(r->floor_s > 0);
        ASSERT_NEAR(r->floor_ratio, r->median_s / r->floor_s, 1e-9);
        ASSERT_TRUE(r->path[0] != 0);
        ASSERT_EQ_INT(r->k, 67);
#ifdef TOPS_HAVE_OPENBLAS
        ASSERT_TRUE(r->baseline_median_s > 0);
        ASSERT_NEAR(r->speedup, r->baseline_median_s / r->median_s, 1e-9);
        /* the name carries OpenBLAS's core */
        char want[32];
        snprintf(want, sizeof want, "%s:%.16s", r->m == 1 ? "openblas-sgemv" : "openblas-sgemm",
                 tops_bench_baseline_kernels());
        ASSERT_EQ_STR(r->baseline, want);
#endif
    }
    ASSERT_EQ_STR(rows.v[0].format, "f32");
    ASSERT_EQ_INT(rows.v[1].m, 3);
    ASSERT_EQ_STR(rows.v[2].format, "f16");
    ASSERT_EQ_STR(rows.v[9].format, "lut4-row");
    tops_bench_rows_free(&rows);

    /* a bad format is refused before any work */
    snprintf(cfg.formats[0], 32, "int5-g32");
    ASSERT_STATUS(tops_bench_matmul_prepare(&cfg), TOPS_INVALID_ARGUMENT);
}

/* The path of packed weights is the dispatch's f32 microkernel: at each
   x86 level the table must hold that level's kernel, not a lower or
   higher one (a merge once left the AVX2 kernels under the AVX-512 test). */
static void test_path_names_the_level_kernel(void) {
#if defined(TOPS_BENCH_X86)
    tops_cpu_info ci;
    tops_cpu_get_info(&ci);
    const tops__kernels *ref = tops__kernels_for_isa(TOPS_ISA_REF);
    ASSERT_TRUE(ref && strstr(ref->gemm_f32.name, "__ref") != NULL);
    if (ci.isa_available[TOPS_ISA_AVX2]) {
        const tops__kernels *k = tops__kernels_for_isa(TOPS_ISA_AVX2);
        ASSERT_TRUE(k && strstr(k->gemm_f32.name, "__avx2") != NULL);
        ASSERT_TRUE(k && strstr(k->gemm_q8.name, "__avx2") != NULL);
    }
#endif
}

/* The OpenBLAS core names: their SIMD width, and the core the bench asks
   for at each level ours runs. */
static void test_openblas_cores(void) {
    ASSERT_EQ_INT(tops_bench_openblas_core_level("Prescott"), 0);
    ASSERT_EQ_INT(tops_bench_openblas_core_level("Core2"), 0);
    ASSERT_EQ_INT(tops_bench_openblas_core_level("Nehalem"), 0);
    ASSERT_EQ_INT(tops_bench_openblas_core_level("Sandybridge"), 1);
    ASSERT_EQ_INT(tops_bench_openblas_core_level("Haswell"), 2);
    ASSERT_EQ_INT(tops_bench_openblas_core_level("Zen"), 2);
    ASSERT_EQ_INT(tops_bench_openblas_core_level("SkylakeX"), 3);
    ASSERT_EQ_INT(tops_bench_openblas_core_level("cooperlake"), 3); /* as OPENBLAS_CORETYPE takes it */
    ASSERT_EQ_INT(tops_bench_openblas_core_level("SapphireRapids"), 3);
    ASSERT_EQ_INT(tops_bench_openblas_core_level("Skylake"), -1);
    ASSERT_EQ_INT(tops_bench_openblas_core_level(""), -1);
    ASSERT_EQ_INT(tops_bench_openblas_core_level(NULL), -1);
    tops_cpu_info ci;
    memset(&ci, 0, sizeof ci);
    ci.isa = TOPS_ISA_AVX2;
    ASSERT_EQ_STR(tops_bench_openblas_core_for(&ci), "Haswell");
    ci.isa = TOPS_ISA_AVX512_VNNI;
    ASSERT_EQ_STR(tops_bench_openblas_core_for(&ci), "SkylakeX");
    ci.has[TOPS_CPU_AVX512_BF16] = 1;
    ASSERT_EQ_STR(tops_bench_openblas_core_for(&ci), "Cooperlake");
    ci.isa = TOPS_ISA_AMX;
    ASSERT_EQ_STR(tops_bench_openblas_core_for(&ci), "Cooperlake");
    ci.isa = TOPS_ISA_REF;
    ASSERT_TRUE(tops_bench_openblas_core_for(&ci) == NULL);
    /* the running OpenBLAS names a core (or "none" without it) */
    ASSERT_TRUE(tops_bench_baseline_kernels()[0] != 0);
}

static void test_onednn_isa_names(void) {
    ASSERT_EQ_STR(tops_bench_onednn_isa_name(0xfef), "avx512_core_amx");
    ASSERT_EQ_STR(tops_bench_onednn_isa_name(0x1fef), "avx512_core_amx_fp16");
    ASSERT_EQ_STR(tops_bench_onednn_isa_name(0xe7), "avx512_core_bf16");
    ASSERT_EQ_STR(tops_bench_onednn_isa_name(0x67), "avx512_core_vnni");
    ASSERT_EQ_STR(tops_bench_onednn_isa_name(0x7), "avx2");
    ASSERT_TRUE(tops_bench_onednn_isa_name(0) == NULL);
    ASSERT_TRUE(tops_bench_onednn_isa_name(0x12345) == NULL);
}

/* The rows checked against f64: spread over M, first and last included. */
static void test_check_rows(void) {
    int64_t r[TOPS_BENCH_CHECK_ROWS];
    ASSERT_EQ_INT(tops_bench_check_rows(1, r), 1);
    ASSERT_EQ_INT(r[0], 0);
    ASSERT_EQ_INT(tops_bench_check_rows(2, r), 2);
    ASSERT_EQ_INT(r[0], 0);
    ASSERT_EQ_INT(r[1], 1);
    ASSERT_EQ_INT(tops_bench_check_rows(128, r), 4);
    ASSERT_EQ_INT(r[0], 0);
    ASSERT_EQ_INT(r[1], 42);
    ASSERT_EQ_INT(r[2], 84);
    ASSERT_EQ_INT(r[3], 127);
}

/* The ratio lines after the table: each of our rows against the oneDNN
   rows of its shape and threads, by medians and by mins. */
static void test_onednn_ratios(void) {
    tops_bench_rows rows = {0};
    tops_bench_row r;
    memset(&r, 0, sizeof r);
    snprintf(r.op, sizeof r.op, "matmul");
    r.k = 4096, r.n = 12288, r.threads = 16;
    const struct { const char *fmt; int64_t m; double med, min; } cases[5] = {
        {"int4-g32", 128, 2e-3, 1.5e-3}, {"q4_0", 16, 1e-3, 1e-3}, {"onednn-bf16", 128, 4e-3, 3e-3},
        {"onednn-int8-dyn", 128, 1e-3, 0.75e-3}, {"onednn-bf16", 64, 1e-3, 1e-3}};
    char buf[2048];
    for (int pass = 0; pass < 2; pass++) { /* without, then with the oneDNN rows */
        rows.n = 0;
        for (int i = 0; i < (pass ? 5 : 2); i++) {
            snprintf(r.format, sizeof r.format, "%s", cases[i].fmt);
            r.m = cases[i].m, r.median_s = cases[i].med, r.min_s = cases[i].min;
            ASSERT_OK(tops_bench_rows_push(&rows, &r));
        }
        FILE *f = tmpfile();
        ASSERT_TRUE(f != NULL);
        tops_bench_print_onednn_ratios(f, &rows);
        const size_t len = (size_t)ftell(f);
        rewind(f);
        const size_t got = fread(buf, 1, sizeof buf - 1, f);
        buf[got] = 0;
        fclose(f);
        ASSERT_EQ_INT((int)got, (int)len);
        if (!pass) {
            ASSERT_EQ_INT((int)len, 0);
            continue;
        }
        ASSERT_TRUE(strstr(buf, "int4-g32        M=128   thr=16  onednn-bf16 2.00x / 2.00x, "
                                "onednn-int8-dyn 0.50x / 0.50x\n") != NULL);
        ASSERT_TRUE(strstr(buf, "q4_0") == NULL); /* no oneDNN row at M = 16 */
        ASSERT_TRUE(strstr(buf, "by medians / by mins") != NULL);
    }
    tops_bench_rows_free(&rows);
}

static void test_runner_table(void) {
    ASSERT_TRUE(tops_bench_find_runner("matmul", TOPS_DEVICE_CPU) != NULL);
    ASSERT_TRUE(tops_bench_find_runner("nosuch", TOPS_DEVICE_CPU) == NULL);
    ASSERT_TRUE(tops_bench_runner_at(0) != NULL);
}

int main(void) {
    RUN_TEST(test_floor_arithmetic);
    RUN_TEST(test_row_derive);
    RUN_TEST(test_refine_floors);
    RUN_TEST(test_median);
    RUN_TEST(test_timing_rules);
    RUN_TEST(test_read_loops);
    RUN_TEST(test_peak_loops_count_ops);
    RUN_TEST(test_roofline_small);
    RUN_TEST(test_json);
    RUN_TEST(test_svg);
    RUN_TEST(test_tiny_matmul_case);
    RUN_TEST(test_path_names_the_level_kernel);
    RUN_TEST(test_runner_table);
    RUN_TEST(test_onednn_ratios);
    RUN_TEST(test_openblas_cores);
    RUN_TEST(test_onednn_isa_names);
    RUN_TEST(test_check_rows);
    TEST_MAIN_END();
}
