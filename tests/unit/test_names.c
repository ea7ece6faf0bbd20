/* Status strings, last-error sentences, dtype and format names. */
#include "harness.h"
#include "tensorops.h"

static void test_status_strings(void) {
    ASSERT_EQ_STR(tops_status_str(TOPS_OK), "ok");
    ASSERT_EQ_STR(tops_status_str(TOPS_SHAPE_MISMATCH), "shape_mismatch");
    ASSERT_EQ_STR(tops_status_str(TOPS_UNSUPPORTED_ON_DEVICE), "unsupported_on_device");
    ASSERT_EQ_STR(tops_status_str(TOPS_STATUS_COUNT_), "unknown_status");
    ASSERT_EQ_STR(tops_status_str((tops_status)-1), "unknown_status");
    for (int s = 0; s < TOPS_STATUS_COUNT_; s++) {
        const char *n = tops_status_str((tops_status)s);
        ASSERT_TRUE(n && *n && strcmp(n, "unknown_status") != 0);
        for (int t = 0; t < s; t++) ASSERT_TRUE(strcmp(n, tops_status_str((tops_status)t)) != 0);
    }
}

static void test_last_error(void) {
    tops_clear_error();
    ASSERT_EQ_STR(tops_last_error(), "");
    tops_format f;
    ASSERT_STATUS(tops_format_from_name("int5-g32", &f), TOPS_NOT_FOUND);
    ASSERT_TRUE(strstr(tops_last_error(), "tops_format_from_name") != NULL);
    ASSERT_TRUE(strstr(tops_last_error(), "int5-g32") != NULL);
    tops_clear_error();
    ASSERT_EQ_STR(tops_last_error(), "");
}

static void test_dtype_names(void) {
    for (int d = 1; d < TOPS_DT_COUNT_; d++) {
        tops_dtype back;
        ASSERT_OK(tops_dtype_from_name(tops_dtype_name((tops_dtype)d), &back));
        ASSERT_EQ_INT(back, d);
        ASSERT_TRUE(tops_dtype_bits((tops_dtype)d) > 0);
    }
    ASSERT_EQ_INT(tops_dtype_bits(TOPS_DT_E2M3), 6);
    ASSERT_EQ_INT(tops_dtype_bits(TOPS_DT_I2), 2);
    ASSERT_EQ_INT(tops_dtype_bits((tops_dtype)999), 0);
    ASSERT_EQ_STR(tops_dtype_name((tops_dtype)999), "?");
    tops_dtype d;
    ASSERT_STATUS(tops_dtype_from_name("f12", &d), TOPS_NOT_FOUND);
    ASSERT_STATUS(tops_dtype_from_name(NULL, &d), TOPS_INVALID_ARGUMENT);
}

/* Every name the project documents parses and prints back identically. */
static void test_format_round_trips(void) {
    static const char *names[] = {
        "f32", "f16", "bf16", "e4m3", "e5m2", "e2m3", "e3m2", "e2m1", "i8", "u8", "i4", "u4", "i2", "u2",
        "mxfp8", "mxfp8-e5m2", "mxfp6", "mxfp6-e3m2", "mxfp4", "mxint8", "nvfp4",
        "int8-g32", "int8-g16", "int4-g32", "int4-g64", "int4-g128", "int4-g256", "int2-g16",
        "int4-g32:e8m0", "int4-g128:bf16", "int8-g32:f32", "int4-g32-affine", "int4-g128-affine",
        "lut4", "lut4-row", "e4m3-ch", "e5m2-ch", "q4_0", "q4_1", "q8_0", "gguf-mxfp4",
        "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs",
    };
    char buf[64];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        tops_format f;
        tops_status st = tops_format_from_name(names[i], &f);
        if (st != TOPS_OK) TH_FAIL_AT("%s: %s", names[i], tops_last_error());
        ASSERT_EQ_STR(tops_format_name(f, buf, sizeof buf), names[i]);
    }
    /* The default scale spelled out is the same format, printed without it. */
    tops_format f;
    ASSERT_OK(tops_format_from_name("int4-g32:f16", &f));
    ASSERT_EQ_STR(tops_format_name(f, buf, sizeof buf), "int4-g32");
    ASSERT_EQ_INT(f.group, 32);
    ASSERT_EQ_INT(f.scale, TOPS_DT_F16);
    ASSERT_OK(tops_format_from_name("mxfp4", &f));
    ASSERT_EQ_INT(f.group, 32);
    ASSERT_EQ_INT(f.scale, TOPS_DT_E8M0);
    /* Every traits row is reachable by name (except the opaque packed one). */
    for (int id = 0; id < TOPS_FMT_COUNT_; id++) {
        const tops_format_info *info = tops_format_get_info((tops_format_id)id);
        ASSERT_TRUE(info != NULL && info->name != NULL);
        ASSERT_TRUE(info->pack_elems >= 1 && info->pack_bytes >= 1);
    }
    ASSERT_TRUE(tops_format_get_info(TOPS_FMT_COUNT_) == NULL);
}

static void test_format_bad_names(void) {
    static const char *bad[] = {"", "int4", "int4-g", "int4-g33", "int4-g8", "int4-g512", "int4-g32:f64",
                                "int4-g32:", "mxfp4:f16", "nvfp4:e8m0", "e4m3-ch:f16", "q4_0:f16", "packed",
                                "int4-g32-affine:bf16", "int3-g32", "int4-g32x", "MXFP4",
                                "int4-g99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tops_format f;
        tops_status st = tops_format_from_name(bad[i], &f);
        if (st == TOPS_OK) TH_FAIL_AT("\"%s\" parsed", bad[i]);
        ASSERT_TRUE(strlen(tops_last_error()) > 10);
    }
    tops_format f;
    ASSERT_STATUS(tops_format_from_name(NULL, &f), TOPS_INVALID_ARGUMENT);
    char buf[8];
    tops_format junk = {(tops_format_id)77, 0, TOPS_DT_NONE};
    ASSERT_EQ_STR(tops_format_name(junk, buf, sizeof buf), "?");
    ASSERT_EQ_STR(tops_format_name(junk, NULL, 0), "?");
}

static void test_format_constants(void) {
    tops_format f;
    const tops_format_info *info;
    ASSERT_OK(tops_format_from_name("q4_0", &f));
    info = tops_format_get_info(f.id);
    ASSERT_EQ_INT(info->pack_elems, 32);
    ASSERT_EQ_INT(info->pack_bytes, 18);
    ASSERT_NEAR(tops_format_bits_per_weight(f, 4096), 4.5, 1e-12);
    ASSERT_OK(tops_format_from_name("q8_0", &f));
    ASSERT_NEAR(tops_format_bits_per_weight(f, 4096), 8.5, 1e-12);
    ASSERT_OK(tops_format_from_name("mxfp4", &f));
    ASSERT_NEAR(tops_format_bits_per_weight(f, 4096), 4.25, 1e-12);
    ASSERT_OK(tops_format_from_name("nvfp4", &f));
    ASSERT_NEAR(tops_format_bits_per_weight(f, 4096), 4.5, 1e-12);
    ASSERT_OK(tops_format_from_name("int4-g128", &f));
    ASSERT_NEAR(tops_format_bits_per_weight(f, 4096), 4.125, 1e-12);
    ASSERT_OK(tops_format_from_name("int4-g32-affine", &f));
    ASSERT_NEAR(tops_format_bits_per_weight(f, 4096), 5.0, 1e-12);
    ASSERT_OK(tops_format_from_name("mxfp6", &f));
    ASSERT_NEAR(tops_format_bits_per_weight(f, 4096), 6.25, 1e-12);
    ASSERT_OK(tops_format_from_name("e4m3-ch", &f));
    ASSERT_NEAR(tops_format_bits_per_weight(f, 4096), 8.0 + 32.0 / 4096, 1e-12);
    /* A partial last block still costs a whole scale. */
    ASSERT_OK(tops_format_from_name("int8-g32", &f));
    ASSERT_NEAR(tops_format_bits_per_weight(f, 33), (33 * 8 + 2 * 16) / 33.0, 1e-12);
    ASSERT_NEAR(tops_format_bits_per_weight(f, 0), 0.0, 0);
    ASSERT_EQ_INT(tops_format_of(TOPS_DT_F16).id, TOPS_FMT_F16);
    tops_format r;
    ASSERT_STATUS(tops_format_resolve(tops_format_of(TOPS_DT_E8M0), &r), TOPS_UNSUPPORTED_FORMAT);
}

int main(void) {
    RUN_TEST(test_status_strings);
    RUN_TEST(test_last_error);
    RUN_TEST(test_dtype_names);
    RUN_TEST(test_format_round_trips);
    RUN_TEST(test_format_bad_names);
    RUN_TEST(test_format_constants);
    TEST_MAIN_END();
}
