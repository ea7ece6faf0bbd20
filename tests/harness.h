/* A small test harness: ASSERT macros print both values on failure; each
   test binary ends with "N passed, N failed". */
#ifndef TOPS_TEST_HARNESS_H
#define TOPS_TEST_HARNESS_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int th_failed_checks, th_passed_tests, th_failed_tests, th_current_failed;

#define TH_FAIL_AT(...)                                                                            \
    do {                                                                                           \
        fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__);                                          \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        th_failed_checks++;                                                                        \
        th_current_failed = 1;                                                                     \
    } while (0)

#define ASSERT_TRUE(c)                                                                             \
    do {                                                                                           \
        if (!(c)) TH_FAIL_AT("expected true: %s", #c);                                             \
    } while (0)
#define ASSERT_EQ_INT(a, b)                                                                        \
    do {                                                                                           \
        long long th_a = (long long)(a), th_b = (long long)(b);                                    \
        if (th_a != th_b) TH_FAIL_AT("%s == %s: %lld vs %lld", #a, #b, th_a, th_b);                \
    } while (0)
#define ASSERT_EQ_U64(a, b)                                                                        \
    do {                                                                                           \
        unsigned long long th_a = (unsigned long long)(a), th_b = (unsigned long long)(b);         \
        if (th_a != th_b) TH_FAIL_AT("%s == %s: 0x%llx vs 0x%llx", #a, #b, th_a, th_b);            \
    } while (0)
#define ASSERT_EQ_STR(a, b)                                                                        \
    do {                                                                                           \
        const char *th_a = (a), *th_b = (b);                                                       \
        if (!th_a || !th_b || strcmp(th_a, th_b) != 0)                                             \
            TH_FAIL_AT("%s == %s: \"%s\" vs \"%s\"", #a, #b, th_a ? th_a : "(null)",               \
                       th_b ? th_b : "(null)");                                                    \
    } while (0)
#define ASSERT_NEAR(a, b, tol)                                                                     \
    do {                                                                                           \
        double th_a = (double)(a), th_b = (double)(b), th_t = (double)(tol);                       \
        if (!(fabs(th_a - th_b) <= th_t))                                                          \
            TH_FAIL_AT("%s ~ %s: %.9g vs %.9g (tol %.3g)", #a, #b, th_a, th_b, th_t);              \
    } while (0)
/* A call returns the expected status; on a mismatch prints the sentence. */
#define ASSERT_STATUS(call, want)                                                                  \
    do {                                                                                           \
        tops_status th_s = (call);                                                                 \
        if (th_s != (want))                                                                        \
            TH_FAIL_AT("%s: got %s, want %s (last error: %s)", #call, tops_status_str(th_s),       \
                       tops_status_str(want), tops_last_error());                                  \
    } while (0)
#define ASSERT_OK(call) ASSERT_STATUS(call, TOPS_OK)
/* A failure whose sentence mentions `needle`. */
#define ASSERT_FAILS_WITH(call, want, needle)                                                      \
    do {                                                                                           \
        ASSERT_STATUS(call, want);                                                                 \
        if (!strstr(tops_last_error(), (needle)))                                                  \
            TH_FAIL_AT("%s: error \"%s\" does not mention \"%s\"", #call, tops_last_error(), needle); \
    } while (0)

#define RUN_TEST(fn)                                                                               \
    do {                                                                                           \
        th_current_failed = 0;                                                                     \
        fn();                                                                                      \
        if (th_current_failed) {                                                                   \
            th_failed_tests++;                                                                     \
            fprintf(stderr, "FAIL %s\n", #fn);                                                     \
        } else {                                                                                   \
            th_passed_tests++;                                                                     \
            printf("ok   %s\n", #fn);                                                              \
        }                                                                                          \
    } while (0)

#define TEST_MAIN_END()                                                                            \
    do {                                                                                           \
        printf("%d passed, %d failed\n", th_passed_tests, th_failed_tests);                        \
        return th_failed_tests ? 1 : 0;                                                            \
    } while (0)

/* Deterministic xorshift generator; tests print their seed. */
typedef struct { uint64_t s; } th_rng;
static inline uint64_t th_next(th_rng *r) {
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}
static inline float th_uniform(th_rng *r, float lo, float hi) {
    return lo + (hi - lo) * (float)((th_next(r) >> 40) * (1.0 / 16777216.0));
}
/* Seed from TOPS_TEST_SEED or the clock, printed so a failure can be replayed. */
static inline th_rng th_seed(void) {
    const char *env = getenv("TOPS_TEST_SEED");
    uint64_t s = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) * 2654435761u;
    if (!s) s = 88172645463325252ull;
    printf("seed %llu (TOPS_TEST_SEED to replay)\n", (unsigned long long)s);
    /* The state is splitmix64 of the seed: a small seed (TOPS_TEST_SEED=8) would start xorshift
       nearly at zero, whose first outputs are far from uniform (test_quantize's Gaussian data
       then failed its bounds for a fifth of the seeds 1..1000). */
    uint64_t z = s + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    th_rng r = {z ? z : 88172645463325252ull};
    return r;
}

#endif
