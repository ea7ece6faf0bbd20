/* Workspaces the library keeps per calling thread are freed when that
   thread exits: matmul (f32 panels, relaxed integer panels, or at the AMX
   level their AMX drivers; the M <= 4 row path) and attention run on 8 short-lived pthreads.  Under the sanitizer
   build LeakSanitizer checks at exit that nothing leaked (zero bytes). */
#include "harness.h"
#include "tensorops.h"

#include <pthread.h>

enum { THREADS = 8, K = 256, N = 96 };

static tops_tensor weights_f32, weights_i4;
static th_rng seed_rng; /* th_seed() once; each call copies it */

static void fill(tops_tensor *t, th_rng *r) {
    float *d = t->data;
    int64_t n = tops_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) d[i] = th_uniform(r, -1.0f, 1.0f);
}

static int make(tops_format f, int64_t a, int64_t b, tops_tensor *t) {
    int64_t ext[2] = {a, b};
    return tops_tensor_create(f, 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, t) == TOPS_OK;
}

typedef struct mm_case {
    const char *want, *amx; /* the path's name contains one of these (amx: at the AMX level) */
    int64_t m;
    int relaxed;
    const tops_tensor *w;
} mm_case;

static const mm_case cases[] = {
    {"f32 panels", "AMX bf16 tiles", 40, 0, &weights_f32},
    {"integer panels", "AMX integer tiles", 40, 1, &weights_i4},
    {"rows", "rows", 3, 0, &weights_f32},
};

static int run_matmul(const mm_case *c, int check_path) {
    th_rng r = seed_rng;
    tops_tensor a, out;
    if (!make(tops_format_of(TOPS_DT_F32), c->m, K, &a) || !make(tops_format_of(TOPS_DT_F32), c->m, N, &out)) return 0;
    fill(&a, &r);
    tops_matmul2d_desc d = {0};
    d.transpose_right = 1; /* weights stored [N, K] */
    d.relaxed_precision = c->relaxed;
    tops_exec ex = tops_exec_default();
    ex.threads = 2;
    int ok = 1;
    if (check_path) {
        char path[256];
        ok = tops_matmul2d_path(&ex, &d, &a, c->w, &out, path, sizeof path) == TOPS_OK &&
             (strstr(path, c->want) || strstr(path, c->amx));
        printf("  %s\n", path);
        if (!ok) printf("  path for \"%s\": %s\n", c->want, path);
    }
    ok = ok && tops_matmul2d(&ex, &d, &a, c->w, &out) == TOPS_OK;
    tops_tensor_destroy(&a);
    tops_tensor_destroy(&out);
    return ok;
}

static int run_attention(void) {
    th_rng r = seed_rng;
    int64_t ext[4] = {1, 2, 64, 32};
    tops_tensor q, k, v, o;
    tops_format f = tops_format_of(TOPS_DT_F32);
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    if (tops_tensor_create(f, 4, ext, host, &q) || tops_tensor_create(f, 4, ext, host, &k) ||
        tops_tensor_create(f, 4, ext, host, &v) || tops_tensor_create(f, 4, ext, host, &o))
        return 0;
    fill(&q, &r), fill(&k, &r), fill(&v, &r);
    tops_attention_desc d = tops_attention_desc_default();
    d.causal = 1;
    tops_exec ex = tops_exec_default();
    ex.threads = 2;
    int ok = tops_attention(&ex, &d, &q, &k, &v, &o) == TOPS_OK;
    tops_tensor_destroy(&q), tops_tensor_destroy(&k), tops_tensor_destroy(&v), tops_tensor_destroy(&o);
    return ok;
}

static void *worker(void *arg) {
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) ok &= run_matmul(&cases[i], 0);
    ok &= run_attention();
    *(int *)arg = ok;
    return NULL;
}

static void test_short_lived_threads(void) {
    seed_rng = th_seed();
    th_rng r = seed_rng;
    ASSERT_TRUE(make(tops_format_of(TOPS_DT_F32), N, K, &weights_f32));
    fill(&weights_f32, &r);
    tops_format i4 = {TOPS_FMT_INT4_G, 32, TOPS_DT_NONE};
    ASSERT_TRUE(make(i4, N, K, &weights_i4));
    ASSERT_OK(tops_quantize(&weights_f32, &weights_i4, NULL));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) ASSERT_TRUE(run_matmul(&cases[i], 1));
    for (int round = 0; round < 2; round++) {
        pthread_t t[THREADS];
        int ok[THREADS] = {0};
        /* created, run, joined: one at a time, then all at once */
        for (int i = 0; i < THREADS; i++) {
            ASSERT_TRUE(pthread_create(&t[i], NULL, worker, &ok[i]) == 0);
            if (round == 0) pthread_join(t[i], NULL);
        }
        if (round == 1)
            for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
        for (int i = 0; i < THREADS; i++) ASSERT_TRUE(ok[i]);
    }
    tops_tensor_destroy(&weights_f32);
    tops_tensor_destroy(&weights_i4);
#if !defined(__SANITIZE_ADDRESS__)
    printf("  (no LeakSanitizer in this build: the sanitizer build checks the leak)\n");
#endif
}

int main(void) {
    RUN_TEST(test_short_lived_threads);
    TEST_MAIN_END();
}
