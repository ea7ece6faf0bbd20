/* The execution context and build facts. */
#include "harness.h"
#include "tensorops.h"

#include <unistd.h>

static void test_default(void) {
    tops_exec e = tops_exec_default();
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    ASSERT_EQ_INT(e.threads, n > 0 ? n : 1);
    ASSERT_EQ_INT(e.device.kind, TOPS_DEVICE_CPU);
    ASSERT_EQ_INT(e.deterministic, 0);
    ASSERT_OK(tops_exec_validate(&e));
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
    RUN_TEST(test_bad);
    RUN_TEST(test_build_and_version);
    TEST_MAIN_END();
}
