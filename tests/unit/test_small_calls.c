/* Calls too small to gain from threads run on the calling thread: with
   exec.threads = 2 they enter no active OpenMP region (the library counts
   the regions it enters: tops__regions_entered), while large calls of the
   same paths do, with the bits of a one-thread run.  No timing here: the
   crossover comes from tensorops bench (docs/architecture.md, "Threads"). */
#include "harness.h"
#include "tensorops.h"
#include "core/threads.h"
#include "cpu/dispatch.h"

static th_rng seed_rng;

static void fill(tops_tensor *t) {
    th_rng r = seed_rng;
    float *d = t->data;
    for (int64_t i = 0, n = tops_tensor_numel(t); i < n; i++) d[i] = th_uniform(&r, -1.0f, 1.0f);
}

static tops_tensor make(tops_format f, int rank, const int64_t *ext) {
    tops_tensor t;
    if (tops_tensor_create(f, rank, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, &t) != TOPS_OK) {
        TH_FAIL_AT("tops_tensor_create: %s", tops_last_error());
        exit(1);
    }
    if (f.id == TOPS_FMT_F32) fill(&t);
    return t;
}

static tops_exec two_threads(void) {
    tops_exec ex = tops_exec_default();
    ex.threads = 2;
    return ex;
}

/* Reruns the call on one thread: the same bits (threaded or not). */
static void same_bits_on_one_thread(tops_tensor *o, const tops_exec *ex, const tops_matmul2d_desc *md,
                                    const tops_tensor *a, const tops_tensor *b, const tops_attention_desc *ad,
                                    const tops_tensor *v) {
    size_t bytes = (size_t)tops_tensor_numel(o) * sizeof(float);
    float *first = malloc(bytes);
    memcpy(first, o->data, bytes);
    memset(o->data, 0xff, bytes); /* NaN */
    tops_exec one = *ex;
    one.threads = 1;
    if (md) ASSERT_OK(tops_matmul2d(&one, md, a, b, o));
    else ASSERT_OK(tops_attention(&one, ad, a, b, v, o));
    ASSERT_TRUE(memcmp(first, o->data, bytes) == 0);
    free(first);
}

/* The path name at the active level: with AMX kernels, calls above the
   rows driver take the AMX tiles instead of the panels. */
static const char *level_path(int64_t m, int relaxed, const char *want) {
    const tops__kernels *k = tops__kernels_get();
    if (!k->amx_bf16t.run || m <= 4) return want;
    if (strstr(want, "integer panels") && relaxed && m < k->amx_bf16t.relaxed_min_m[0]) return "AMX integer tiles";
    return "AMX bf16 tiles";
}

/* Regions one matmul enters; want names the path it must take (at a level
   without AMX kernels). */
static long matmul_regions(int64_t m, int64_t k, int64_t n, int int4, int relaxed, int packed, const char *want) {
    want = level_path(m, relaxed, want);
    tops_format f32 = tops_format_of(TOPS_DT_F32), i4 = {TOPS_FMT_INT4_G, 32, TOPS_DT_NONE};
    int64_t ea[2] = {m, k}, ew[2] = {n, k}, eo[2] = {m, n};
    tops_tensor a = make(f32, 2, ea), w32 = make(f32, 2, ew), o = make(f32, 2, eo), w = w32, pk;
    if (int4) {
        w = make(i4, 2, ew);
        ASSERT_OK(tops_quantize(&w32, &w, NULL));
    }
    tops_matmul2d_desc d = {0};
    d.transpose_right = 1;
    d.relaxed_precision = relaxed;
    tops_exec ex = two_threads();
    const tops_tensor *right = &w;
    long before = tops__regions_entered();
    if (packed) {
        ASSERT_OK(tops_pack_right(&ex, &d, &w, &pk));
        right = &pk;
    }
    char path[256] = "";
    ASSERT_OK(tops_matmul2d_path(&ex, &d, &a, right, &o, path, sizeof path));
    if (!strstr(path, want)) TH_FAIL_AT("M %lld K %lld N %lld: path \"%s\", want \"%s\"", (long long)m, (long long)k,
                                        (long long)n, path, want);
    ASSERT_OK(tops_matmul2d(&ex, &d, &a, right, &o));
    long got = tops__regions_entered() - before;
    same_bits_on_one_thread(&o, &ex, &d, &a, right, NULL, NULL);
    if (packed) tops_tensor_destroy(&pk);
    if (int4) tops_tensor_destroy(&w);
    tops_tensor_destroy(&a), tops_tensor_destroy(&w32), tops_tensor_destroy(&o);
    return got;
}

static long attention_regions(int64_t heads, int64_t s, int64_t dim) {
    int64_t ext[4] = {1, heads, s, dim};
    tops_format f = tops_format_of(TOPS_DT_F32);
    tops_tensor q = make(f, 4, ext), k = make(f, 4, ext), v = make(f, 4, ext), o = make(f, 4, ext);
    tops_attention_desc d = tops_attention_desc_default();
    d.causal = 1;
    tops_exec ex = two_threads();
    long before = tops__regions_entered();
    ASSERT_OK(tops_attention(&ex, &d, &q, &k, &v, &o));
    long got = tops__regions_entered() - before;
    same_bits_on_one_thread(&o, &ex, NULL, &q, &k, &d, &v);
    tops_tensor_destroy(&q), tops_tensor_destroy(&k), tops_tensor_destroy(&v), tops_tensor_destroy(&o);
    return got;
}

/* Regions one depthwise 3x3 conv2d (h x w x c, pad 1) enters, and the
   same bits on one thread. */
static long depthwise_regions(int64_t h, int64_t w, int64_t c) {
    tops_format f = tops_format_of(TOPS_DT_F32);
    int64_t ei[4] = {1, h, w, c}, ew[4] = {c, 3, 3, 1};
    tops_tensor in = make(f, 4, ei), wt = make(f, 4, ew), o = make(f, 4, ei);
    tops_conv2d_desc d = {0};
    d.kernel_h = d.kernel_w = 3, d.stride_h = d.stride_w = 1, d.dilation_h = d.dilation_w = 1;
    d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = 1, d.groups = (int32_t)c, d.mode = TOPS_MULTIPLY;
    tops_exec ex = two_threads();
    char path[256] = "";
    ASSERT_OK(tops_conv2d_path(&ex, &d, &in, &wt, &o, path, sizeof path));
    if (!strstr(path, "depthwise direct")) TH_FAIL_AT("depthwise path \"%s\"", path);
    long before = tops__regions_entered();
    ASSERT_OK(tops_conv2d(&ex, &d, &in, &wt, &o));
    long got = tops__regions_entered() - before;
    size_t bytes = (size_t)tops_tensor_numel(&o) * sizeof(float);
    float *first = malloc(bytes);
    memcpy(first, o.data, bytes);
    memset(o.data, 0xff, bytes);
    ex.threads = 1;
    ASSERT_OK(tops_conv2d(&ex, &d, &in, &wt, &o));
    ASSERT_TRUE(memcmp(first, o.data, bytes) == 0);
    free(first);
    tops_tensor_destroy(&in), tops_tensor_destroy(&wt), tops_tensor_destroy(&o);
    return got;
}

static void test_small_calls_stay_on_one_thread(void) {
    seed_rng = th_seed();
    /* MiniLM-sized rows (M <= 4, K = N = 384), plain and prepacked */
    for (int64_t m = 1; m <= 4; m++) {
        ASSERT_EQ_INT(matmul_regions(m, 384, 384, 0, 0, 0, "rows"), 0);
        ASSERT_EQ_INT(matmul_regions(m, 384, 384, 1, 1, 1, "rows"), 0);
    }
    ASSERT_EQ_INT(matmul_regions(16, 128, 128, 0, 0, 0, "f32 panels"), 0);
    ASSERT_EQ_INT(matmul_regions(16, 128, 128, 1, 1, 0, "integer panels"), 0);
    ASSERT_EQ_INT(matmul_regions(16, 384, 384, 0, 0, 1, "f32 panels (prepacked)"), 0); /* packing too */
    ASSERT_EQ_INT(attention_regions(2, 32, 32), 0); /* 2 query blocks: room for 2 threads */
    ASSERT_EQ_INT(depthwise_regions(8, 8, 96), 0);  /* 48 KiB moved, 8 rows */
}

static void test_large_calls_use_threads(void) {
    if (!tops_get_build_info().openmp) {
        printf("  (no OpenMP in this build: every call runs on the calling thread)\n");
        return;
    }
    seed_rng = th_seed();
    ASSERT_TRUE(matmul_regions(4, 2048, 2048, 0, 0, 0, "rows") > 0);
    ASSERT_TRUE(matmul_regions(64, 512, 512, 0, 0, 0, "f32 panels") > 0);
    ASSERT_TRUE(matmul_regions(64, 512, 512, 1, 1, 0, "integer panels") > 0);
    ASSERT_TRUE(matmul_regions(64, 1024, 512, 0, 0, 1, "f32 panels (prepacked)") > 0);
    ASSERT_TRUE(attention_regions(4, 256, 64) > 0);
    ASSERT_TRUE(depthwise_regions(28, 28, 96) > 0); /* 588 KiB moved */
}

int main(void) {
    RUN_TEST(test_small_calls_stay_on_one_thread);
    RUN_TEST(test_large_calls_use_threads);
    TEST_MAIN_END();
}
