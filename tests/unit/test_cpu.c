/* CPU feature detection against the kernel's own view (/proc/cpuinfo), the
   dispatch table, and the f16/bf16 rows of every level against the scalar
   reference. */
#include "harness.h"
#include "tensorops.h"
#include "cpu/dispatch.h"

static char cpuinfo_flags[8192];

static int read_flags(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[8192];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) == 0 || strncmp(line, "Features", 8) == 0) {
            char *c = strchr(line, ':');
            const char *body = c ? c + 1 : line;
            size_t n = strcspn(body, "\n");
            if (n > sizeof cpuinfo_flags - 3) n = sizeof cpuinfo_flags - 3;
            cpuinfo_flags[0] = ' ';
            memcpy(cpuinfo_flags + 1, body, n);
            cpuinfo_flags[n + 1] = ' ';
            cpuinfo_flags[n + 2] = '\0';
            found = 1;
            break;
        }
    }
    fclose(f);
    return found;
}

static int has_flag(const char *name) {
    char pat[64];
    snprintf(pat, sizeof pat, " %s ", name);
    return strstr(cpuinfo_flags, pat) != NULL;
}

static void test_features_match_the_kernel(void) {
    tops_cpu_info ci;
    tops_status st = tops_cpu_get_info(&ci);
    if (getenv("TOPS_ISA") == NULL) ASSERT_OK(st);
    ASSERT_TRUE(ci.cores_online >= 1);
    ASSERT_TRUE(ci.arch[0] != '\0');
    if (!read_flags()) {
        printf("  (no /proc/cpuinfo flags: skipping the cross-check)\n");
        return;
    }
#if defined(__x86_64__)
    /* Linux hides features whose register state the OS does not enable, like
       our XGETBV check, so the two views must agree flag by flag. */
    static const struct { tops_cpu_feature f; const char *linux_name; } map[] = {
        {TOPS_CPU_SSE42, "sse4_2"}, {TOPS_CPU_AVX, "avx"}, {TOPS_CPU_AVX2, "avx2"}, {TOPS_CPU_FMA, "fma"},
        {TOPS_CPU_F16C, "f16c"}, {TOPS_CPU_BMI2, "bmi2"}, {TOPS_CPU_AVX512F, "avx512f"},
        {TOPS_CPU_AVX512BW, "avx512bw"}, {TOPS_CPU_AVX512VL, "avx512vl"}, {TOPS_CPU_AVX512DQ, "avx512dq"},
        {TOPS_CPU_AVX512_VBMI, "avx512vbmi"}, {TOPS_CPU_AVX512_VNNI, "avx512_vnni"}, {TOPS_CPU_AVX512_BF16, "avx512_bf16"},
        {TOPS_CPU_AVX512_FP16, "avx512_fp16"}, {TOPS_CPU_AVX_VNNI, "avx_vnni"},
        {TOPS_CPU_AMX_TILE, "amx_tile"}, {TOPS_CPU_AMX_INT8, "amx_int8"}, {TOPS_CPU_AMX_BF16, "amx_bf16"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        int ours = ci.has[map[i].f], theirs = has_flag(map[i].linux_name);
        /* AMX additionally needs the per-process permission. */
        if (map[i].f >= TOPS_CPU_AMX_TILE && map[i].f <= TOPS_CPU_AMX_BF16 && !ci.amx_permission) theirs = 0;
        if (ours != theirs)
            TH_FAIL_AT("feature %s: detected %d, /proc/cpuinfo says %d", map[i].linux_name, ours, theirs);
    }
    ASSERT_TRUE(!ci.has[TOPS_CPU_NEON]);
    ASSERT_EQ_STR(ci.arch, "x86_64");
#endif
    /* Levels are nested: a level implies the ones below it in its family. */
    ASSERT_TRUE(ci.isa_available[TOPS_ISA_REF]);
    if (ci.isa_available[TOPS_ISA_AVX512]) ASSERT_TRUE(ci.isa_available[TOPS_ISA_AVX2]);
    if (ci.isa_available[TOPS_ISA_AVX512_VNNI]) ASSERT_TRUE(ci.isa_available[TOPS_ISA_AVX512]);
    if (ci.isa_available[TOPS_ISA_AMX]) ASSERT_TRUE(ci.isa_available[TOPS_ISA_AVX512_VNNI]);
    if (ci.isa_available[TOPS_ISA_AVX2])
        ASSERT_TRUE(ci.has[TOPS_CPU_AVX2] && ci.has[TOPS_CPU_FMA] && ci.has[TOPS_CPU_F16C]);
    /* A level is offered only with kernels of its own behind it. */
#ifndef TOPS_HAVE_AMX_KERNELS
    ASSERT_TRUE(!ci.isa_available[TOPS_ISA_AMX]);
    if (ci.has[TOPS_CPU_AMX_TILE] && ci.isa_available[TOPS_ISA_AVX512_VNNI])
        ASSERT_EQ_INT(ci.isa_best, TOPS_ISA_AVX512_VNNI);
#endif
#if !defined(TOPS_HAVE_X86_KERNELS)
    for (int i = 1; i < TOPS_ISA_COUNT_; i++) ASSERT_TRUE(!ci.isa_available[i]);
#endif
    ASSERT_TRUE(ci.isa_available[ci.isa_best]);
    ASSERT_TRUE(ci.isa_available[ci.isa]);
    for (int i = ci.isa_best + 1; i < TOPS_ISA_COUNT_; i++) ASSERT_TRUE(!ci.isa_available[i]);
    printf("  best level %s, in use %s (%s)\n", tops_isa_name(ci.isa_best), tops_isa_name(ci.isa), ci.isa_reason);
}

static void test_isa_names(void) {
    for (int i = 0; i < TOPS_ISA_COUNT_; i++) {
        tops_isa back;
        ASSERT_OK(tops_isa_from_name(tops_isa_name((tops_isa)i), &back));
        ASSERT_EQ_INT(back, i);
    }
    tops_isa x;
    ASSERT_STATUS(tops_isa_from_name("avx3", &x), TOPS_NOT_FOUND);
    /* No NEON kernels, so no NEON levels. */
    ASSERT_STATUS(tops_isa_from_name("neon", &x), TOPS_NOT_FOUND);
    ASSERT_STATUS(tops_isa_from_name("neon_dotprod", &x), TOPS_NOT_FOUND);
    ASSERT_STATUS(tops_isa_from_name("neon_i8mm", &x), TOPS_NOT_FOUND);
    ASSERT_EQ_STR(tops_isa_name((tops_isa)99), "?");
    for (int f = 0; f < TOPS_CPU_FEATURE_COUNT_; f++)
        ASSERT_TRUE(strcmp(tops_cpu_feature_name((tops_cpu_feature)f), "?") != 0);
    ASSERT_STATUS(tops_cpu_get_info(NULL), TOPS_INVALID_ARGUMENT);
}

static void test_tables(void) {
    const tops__kernels *k = tops__kernels_get();
    ASSERT_TRUE(k != NULL);
    tops_cpu_info ci;
    tops_cpu_get_info(&ci);
    ASSERT_EQ_INT(k->isa, ci.isa);
    for (int i = 0; i < TOPS_ISA_COUNT_; i++) {
        const tops__kernels *t = tops__kernels_for_isa((tops_isa)i);
        ASSERT_TRUE((t != NULL) == (ci.isa_available[i] != 0));
        if (t) ASSERT_TRUE(t->f32_to_f16_row && t->f16_to_f32_row && t->f32_to_bf16_row && t->bf16_to_f32_row);
    }
    ASSERT_TRUE(tops__kernels_for_isa((tops_isa)-1) == NULL);
}

/* Random bit patterns cover NaN payloads, Inf, subnormals and ties. */
static void test_rows_match_reference(void) {
    th_rng rng = th_seed();
    enum { N = 4099 };
    static float src[N], back_ref[N], back_fast[N];
    static uint16_t h_ref[N], h_fast[N], h_in[N];
    for (int i = 0; i < N; i++) {
        uint32_t bits = (uint32_t)th_next(&rng);
        if (i % 7 == 0) bits = (bits & 0x80000000u) | 0x33000000u | (bits & 0x00ffffffu); /* near f16 subnormals */
        if (i % 11 == 0) bits = (bits & 0xffff0000u) | 0x8000u;                          /* bf16 ties */
        if (i % 13 == 0) bits = (bits & 0x80000000u) | 0x477ff000u;                      /* f16 overflow edge */
        memcpy(&src[i], &bits, 4);
        h_in[i] = (uint16_t)th_next(&rng);
    }
    const tops__kernels *ref = tops__kernels_for_isa(TOPS_ISA_REF);
    for (int level = 1; level < TOPS_ISA_COUNT_; level++) {
        const tops__kernels *k = tops__kernels_for_isa((tops_isa)level);
        if (!k) continue;
        for (int n = 0; n <= N; n += (n < 40 ? 1 : 997)) {
            ref->f32_to_f16_row(h_ref, src, n);
            k->f32_to_f16_row(h_fast, src, n);
            for (int i = 0; i < n; i++)
                if (h_ref[i] != h_fast[i]) {
                    TH_FAIL_AT("%s f32->f16 [%d] of %a: %04x vs %04x", tops_isa_name((tops_isa)level), i,
                               (double)src[i], h_ref[i], h_fast[i]);
                    break;
                }
            ref->f32_to_bf16_row(h_ref, src, n);
            k->f32_to_bf16_row(h_fast, src, n);
            ASSERT_TRUE(memcmp(h_ref, h_fast, (size_t)n * 2) == 0);
            ref->f16_to_f32_row(back_ref, h_in, n);
            k->f16_to_f32_row(back_fast, h_in, n);
            ASSERT_TRUE(memcmp(back_ref, back_fast, (size_t)n * 4) == 0);
            ref->bf16_to_f32_row(back_ref, h_in, n);
            k->bf16_to_f32_row(back_fast, h_in, n);
            ASSERT_TRUE(memcmp(back_ref, back_fast, (size_t)n * 4) == 0);
        }
    }
    /* Known values: RNE at the f16 tie 1 + 2^-11, overflow, NaN canonical. */
    float v[4] = {1.0f + 0x1p-11f, 65520.0f, -__builtin_nanf(""), 0x1p-25f};
    uint16_t h[4];
    ref->f32_to_f16_row(h, v, 4);
    ASSERT_EQ_U64(h[0], 0x3c00);
    ASSERT_EQ_U64(h[1], 0x7c00);
    ASSERT_EQ_U64(h[2], 0xfe00);
    ASSERT_EQ_U64(h[3], 0x0000); /* 2^-25 is a tie between 0 and 2^-24: even is 0 */
}

int main(void) {
    RUN_TEST(test_features_match_the_kernel);
    RUN_TEST(test_isa_names);
    RUN_TEST(test_tables);
    RUN_TEST(test_rows_match_reference);
    TEST_MAIN_END();
}
