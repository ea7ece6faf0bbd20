/* The execution context and build facts. */
#include "harness.h"
#include "tensorops.h"
#include "core/threads.h"

#include <unistd.h>

static void test_default(void) {
    tops_exec e = tops_exec_default();
    char why[512];
    const int n = tops_exec_default_threads(why, sizeof why);
    ASSERT_EQ_INT(e.threads, n);
    ASSERT_TRUE(n >= 1 && n <= 4096 && why[0]);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    const char *omp = getenv("OMP_NUM_THREADS");
    if (!omp || !tops__parse_omp_num_threads(omp)) ASSERT_TRUE(n <= (online > 0 ? online : 1));
    printf("  default %d threads (%s)\n", n, why);
    ASSERT_EQ_INT(e.device.kind, TOPS_DEVICE_CPU);
    ASSERT_EQ_INT(e.deterministic, 0);
    ASSERT_OK(tops_exec_validate(&e));
}

static void test_cpu_max(void) {
    int c = -7;
    ASSERT_EQ_INT(tops__parse_cpu_max("max 100000", &c), 0);
    ASSERT_EQ_INT(tops__parse_cpu_max("max 100000\n", &c), 0);
    ASSERT_EQ_INT(c, -7);
    ASSERT_EQ_INT(tops__parse_cpu_max("150000 100000", &c), 1);
    ASSERT_EQ_INT(c, 2); /* 1.5 CPUs round up */
    ASSERT_EQ_INT(tops__parse_cpu_max("100000 100000\n", &c), 1);
    ASSERT_EQ_INT(c, 1);
    ASSERT_EQ_INT(tops__parse_cpu_max("1000 100000", &c), 1);
    ASSERT_EQ_INT(c, 1); /* at least 1 */
    ASSERT_EQ_INT(tops__parse_cpu_max("800000 100000", &c), 1);
    ASSERT_EQ_INT(c, 8);
    static const char *const garbage[] = {"", "max", "garbage", "150000", "150000 0", "0 100000", "-5 100000",
                                          "150000 100000 7", "150000x 100000", "max -1", "maxi 100000",
                                          "99999999999999999999 1"};
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        c = -7;
        if (tops__parse_cpu_max(garbage[i], &c) != -1 || c != -7) TH_FAIL_AT("cpu.max \"%s\" was accepted", garbage[i]);
    }
    ASSERT_EQ_INT(tops__parse_cpu_max(NULL, &c), -1);
    /* cgroup v1 */
    ASSERT_EQ_INT(tops__parse_cfs_quota("-1\n", "100000\n", &c), 0);
    ASSERT_EQ_INT(tops__parse_cfs_quota("250000\n", "100000\n", &c), 1);
    ASSERT_EQ_INT(c, 3);
    ASSERT_EQ_INT(tops__parse_cfs_quota("abc", "100000", &c), -1);
    ASSERT_EQ_INT(tops__parse_cfs_quota("50000", "0", &c), -1);
}

static void test_omp_num_threads(void) {
    ASSERT_EQ_INT(tops__parse_omp_num_threads("3"), 3);
    ASSERT_EQ_INT(tops__parse_omp_num_threads(" 4 "), 4);
    ASSERT_EQ_INT(tops__parse_omp_num_threads("4,2,1"), 4);
    ASSERT_EQ_INT(tops__parse_omp_num_threads("100000"), 4096);
    ASSERT_EQ_INT(tops__parse_omp_num_threads("0"), 0);
    ASSERT_EQ_INT(tops__parse_omp_num_threads("-2"), 0);
    ASSERT_EQ_INT(tops__parse_omp_num_threads("two"), 0);
    ASSERT_EQ_INT(tops__parse_omp_num_threads("3x"), 0);
    ASSERT_EQ_INT(tops__parse_omp_num_threads(""), 0);
    ASSERT_EQ_INT(tops__parse_omp_num_threads(NULL), 0);
}

static void test_bad(void) {
    tops_exec e = tops_exec_default();
    ASSERT_FAILS_WITH(tops_exec_validate(NULL), TOPS_INVALID_ARGUMENT, "exec is NULL");
    e.threads = 0;
    ASSERT_FAILS_WITH(tops_exec_validate(&e), TOPS_INVALID_ARGUMENT, "exec.threads");
    e = tops_exec_default();
    e.device.kind = (tops_device_kind)5;
    ASSERT_FAILS_WITH(tops_exec_validate(&e), TOPS_INVALID_ARGUMENT, "exec.device.kind");
    e = tops_exec_default();
    e.device.index = 2;
    ASSERT_FAILS_WITH(tops_exec_validate(&e), TOPS_INVALID_ARGUMENT, "cpu:2");
    e = tops_exec_default();
    e.scratch_bytes = 64;
    ASSERT_FAILS_WITH(tops_exec_validate(&e), TOPS_INVALID_ARGUMENT, "scratch");
}

static void test_build_and_version(void) {
    tops_build_info b = tops_get_build_info();
    ASSERT_TRUE(b.compiler && *b.compiler);
    ASSERT_TRUE(b.build_type && *b.build_type);
    ASSERT_TRUE(b.openmp == 0 || b.openmp == 1);
    ASSERT_EQ_STR(tops_version(), TOPS_VERSION_STRING);
}

int main(void) {
    RUN_TEST(test_default);
    RUN_TEST(test_cpu_max);
    RUN_TEST(test_omp_num_threads);
    RUN_TEST(test_bad);
    RUN_TEST(test_build_and_version);
    TEST_MAIN_END();
}
