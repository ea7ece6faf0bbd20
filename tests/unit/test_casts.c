/* Element casts: every fast row equals the scalar row on random bits (NaN
   payloads, Inf, subnormals, ties), nothing is written past n, the
   documented values and quirks hold, sub-byte packing is FORMATS.md's, and
   bad arguments fail with a sentence.  (Every code and midpoint against
   ml_dtypes: tests/python/test_oracle_casts.py.) */
#include "cpu/dispatch.h"
#include "formats/elem.h"
#include "harness.h"

enum { N = 4099, GUARD = 16 };

/* Random f32 bits biased toward the interesting places of small formats. */
static float interesting(th_rng *r, int i) {
    uint32_t bits = (uint32_t)th_next(r);
    switch (i % 8) {
    case 0: break;                                                                /* anything */
    case 1: bits = (bits & 0x80ffffffu) | (uint32_t)(110 + th_next(r) % 40) << 23; break; /* fp8 range */
    case 2: bits = (bits & 0xffff0000u) | 0x8000u; break;                         /* bf16 ties */
    case 3: bits = (bits & 0x80000000u) | 0x7f800000u | (bits & 0x7fffffu); break; /* NaN / Inf */
    case 4: bits &= 0x807fffffu; break;                                           /* f32 subnormals */
    case 5: bits = (bits & 0x80000000u) | ((uint32_t)(116 + th_next(r) % 12) << 23) | (bits & 0x00f00000u) |
                   0x00080000u; break;                                            /* e4m3 ties */
    case 6: bits = (bits & 0x80000000u) | ((uint32_t)(100 + th_next(r) % 45) << 23) | 0x00100000u; break; /* e5m2 ties */
    default: bits = (bits & 0x80000000u) | 0x43e00000u | (bits & 0x001fffffu); break; /* near 448 */
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void test_fast_rows_equal_scalar_rows(void) {
    th_rng rng = th_seed();
    static float src[N], out_ref[N + GUARD], out_fast[N + GUARD];
    static uint8_t b_ref[N + GUARD], b_fast[N + GUARD], codes[N];
    static uint16_t h_ref[N + GUARD], h_fast[N + GUARD], h_in[N];
    for (int i = 0; i < N; i++) {
        src[i] = interesting(&rng, i);
        codes[i] = (uint8_t)th_next(&rng);
        h_in[i] = (uint16_t)th_next(&rng);
    }
    const tops__kernels *ref = tops__kernels_for_isa(TOPS_ISA_REF);
    int levels = 0;
    for (int level = 1; level < TOPS_ISA_COUNT_; level++) {
        const tops__kernels *k = tops__kernels_for_isa((tops_isa)level);
        if (!k) continue;
        levels++;
        const char *name = tops_isa_name((tops_isa)level);
        for (int n = 0; n <= N; n += (n < 40 ? 1 : 811)) {
            for (int sat = 0; sat < 2; sat++) {
                void (*enc[2])(uint8_t *, const float *, int64_t, int) = {k->f32_to_e4m3_row, k->f32_to_e5m2_row};
                void (*enc_ref[2])(uint8_t *, const float *, int64_t, int) = {ref->f32_to_e4m3_row,
                                                                              ref->f32_to_e5m2_row};
                for (int t = 0; t < 2; t++) {
                    memset(b_ref, 0xA5, sizeof b_ref);
                    memset(b_fast, 0xA5, sizeof b_fast);
                    enc_ref[t](b_ref, src, n, sat);
                    enc[t](b_fast, src, n, sat);
                    for (int i = 0; i < n + GUARD; i++)
                        if (b_ref[i] != b_fast[i]) {
                            TH_FAIL_AT("%s f32->%s sat=%d n=%d [%d] of %a: %02x vs %02x", name, t ? "e5m2" : "e4m3",
                                       sat, n, i, i < n ? (double)src[i] : 0.0, b_ref[i], b_fast[i]);
                            break;
                        }
                    ASSERT_EQ_U64(b_fast[n], 0xA5);
                }
            }
            void (*dec[4])(float *, const uint8_t *, int64_t) = {k->e4m3_to_f32_row, k->e5m2_to_f32_row,
                                                                 k->e2m1_to_f32_row, k->i4_to_f32_row};
            void (*dec_ref[4])(float *, const uint8_t *, int64_t) = {ref->e4m3_to_f32_row, ref->e5m2_to_f32_row,
                                                                     ref->e2m1_to_f32_row, ref->i4_to_f32_row};
            for (int t = 0; t < 4; t++) {
                for (int i = 0; i < N + GUARD; i++) out_ref[i] = out_fast[i] = NAN;
                dec_ref[t](out_ref, codes, n);
                dec[t](out_fast, codes, n);
                if (memcmp(out_ref, out_fast, sizeof out_ref) != 0) TH_FAIL_AT("%s decode row %d n=%d differs", name, t, n);
                for (int i = 0; i < n; i++)
                    if (isnan(out_fast[i]) && t >= 2) {
                        TH_FAIL_AT("%s decode row %d left element %d unwritten", name, t, i);
                        break;
                    }
                ASSERT_TRUE(isnan(out_fast[n]));
            }
            ref->f32_to_f16_row(h_ref, src, n);
            k->f32_to_f16_row(h_fast, src, n);
            ASSERT_TRUE(memcmp(h_ref, h_fast, (size_t)n * 2) == 0);
            ref->f16_to_f32_row(out_ref, h_in, n);
            k->f16_to_f32_row(out_fast, h_in, n);
            ASSERT_TRUE(memcmp(out_ref, out_fast, (size_t)n * 4) == 0);
            ref->f32_to_bf16_row(h_ref, src, n);
            k->f32_to_bf16_row(h_fast, src, n);
            ASSERT_TRUE(memcmp(h_ref, h_fast, (size_t)n * 2) == 0);
        }
    }
    printf("  compared %d fast level(s) with the scalar rows\n", levels);
}

/* The scalar casts against values worked out by hand from FORMATS.md. */
static void test_known_values(void) {
    ASSERT_EQ_U64(tops__f32_to_e4m3(448.0f, 0), 0x7E);
    ASSERT_EQ_U64(tops__f32_to_e4m3(464.0f, 0), 0x7E); /* tie: even mantissa */
    ASSERT_EQ_U64(tops__f32_to_e4m3(465.0f, 0), 0x7F); /* NaN */
    ASSERT_EQ_U64(tops__f32_to_e4m3(-1000.0f, 1), 0xFE);
    ASSERT_EQ_U64(tops__f32_to_e4m3(INFINITY, 1), 0x7E);
    ASSERT_EQ_U64(tops__f32_to_e4m3(NAN, 1), 0x7F);
    ASSERT_EQ_U64(tops__f32_to_e4m3(0x1p-9f, 0), 0x01);  /* smallest subnormal */
    ASSERT_EQ_U64(tops__f32_to_e4m3(0x1p-10f, 0), 0x00); /* tie to even zero */
    ASSERT_EQ_U64(tops__f32_to_e4m3(0x1.8p-10f, 0), 0x01);
    ASSERT_EQ_U64(tops__f32_to_e5m2(57344.0f, 0), 0x7B);
    ASSERT_EQ_U64(tops__f32_to_e5m2(61440.0f, 0), 0x7C); /* tie rounds to Inf */
    ASSERT_EQ_U64(tops__f32_to_e5m2(61440.0f, 1), 0x7B);
    ASSERT_EQ_U64(tops__f32_to_e5m2(-INFINITY, 1), 0xFC);
    ASSERT_EQ_U64(tops__f32_to_e2m1(5.0f, 0), 0x6);  /* tie 4|6 -> 4 (even) */
    ASSERT_EQ_U64(tops__f32_to_e2m1(-7.0f, 0), 0xF); /* saturates */
    ASSERT_EQ_U64(tops__f32_to_e2m1(NAN, 0), 0x8);   /* ml_dtypes: +NaN -> -0 */
    ASSERT_EQ_U64(tops__f32_to_e2m1(0.25f, 0), 0x0); /* tie 0|0.5 -> 0 */
    ASSERT_EQ_U64(tops__f32_to_e3m2(28.0f, 0), 0x1F);
    ASSERT_EQ_U64(tops__f32_to_e2m3(7.5f, 0), 0x1F);
    ASSERT_EQ_U64(tops__f32_to_e8m0(1.0f, 0), 127);
    ASSERT_EQ_U64(tops__f32_to_e8m0(1.5f, 0), 128); /* ties round up */
    ASSERT_EQ_U64(tops__f32_to_e8m0(0.0f, 0), 0xFF);
    ASSERT_EQ_U64(tops__f32_to_e8m0(0.0f, 1), 0x00);
    ASSERT_EQ_U64(tops__f32_to_e8m0(0x1p127f, 0), 0xFE);
    ASSERT_EQ_U64(tops__f32_to_e8m0(0x1.8p127f, 0), 0xFF);
    ASSERT_EQ_U64(tops__f32_to_e8m0(0x1.8p127f, 1), 0xFE);
    ASSERT_EQ_U64(tops__f32_bits(tops__e8m0_to_f32(0)), 0x00400000u); /* 2^-127 */
    ASSERT_EQ_U64(tops__f32_to_mxint8(1.0f), 64);
    ASSERT_EQ_U64(tops__f32_to_mxint8(-3.0f), 0x80);
    ASSERT_EQ_U64(tops__f32_to_int_code(9.0f, 4, 1, 0), 0x9);   /* wraps: int4(9) = -7 */
    ASSERT_EQ_U64(tops__f32_to_int_code(9.0f, 4, 1, 1), 0x7);   /* clamps */
    ASSERT_EQ_U64(tops__f32_to_int_code(2.5f, 8, 1, 1), 2);     /* ties to even */
    ASSERT_EQ_U64(tops__f32_to_int_code(-2.7f, 8, 1, 0), 0xFE); /* truncates */
    ASSERT_EQ_U64(tops__f32_to_int_code(1e10f, 8, 0, 0), 0);
    ASSERT_EQ_U64(tops__f32_to_f16(65519.0f), 0x7BFF);
    ASSERT_EQ_U64(tops__encode_elem(TOPS_DT_F16, 1e6f, 1), 0x7BFF);
    ASSERT_EQ_U64(tops__encode_elem(TOPS_DT_F16, INFINITY, 1), 0x7C00);
    ASSERT_EQ_U64(tops__f32_to_f16(tops__bits_f32(0x7f800001u)), 0x7C01); /* numpy keeps a payload */
    ASSERT_EQ_U64(tops__f32_bits(tops__f16_to_f32(0x7C01)), 0x7F802000u);
    ASSERT_EQ_U64(tops__f32_to_ue4m3(-448.0f, 0), 0x7E);
    ASSERT_NEAR(tops__e2m1_to_f32(0xD), -3.0, 0);
    ASSERT_NEAR(tops__e4m3_to_f32(0x01), 0x1p-9, 0);
    ASSERT_TRUE(isinf(tops__e5m2_to_f32(0xFC)) && tops__e5m2_to_f32(0xFC) < 0);
}

static void test_packing_and_public_rows(void) {
    float in[5] = {0.5f, 1.0f, -6.0f, 3.0f, 2.0f};
    uint8_t out[4] = {0xEE, 0xEE, 0xEE, 0xEE};
    ASSERT_OK(tops_cast_from_f32(TOPS_DT_E2M1, out, in, 5, 0));
    ASSERT_EQ_U64(out[0], 0x21); /* element 0 low nibble, element 1 high */
    ASSERT_EQ_U64(out[1], 0x5F);
    ASSERT_EQ_U64(out[2], 0x04); /* the last byte's unused half is zero */
    ASSERT_EQ_U64(out[3], 0xEE); /* nothing past ceil(n*bits/8) */
    float back[5];
    ASSERT_OK(tops_cast_to_f32(TOPS_DT_E2M1, back, out, 5));
    for (int i = 0; i < 5; i++) ASSERT_NEAR(back[i], in[i], 0);
    /* 6-bit: four codes in three bytes, lowest first. */
    float six[4] = {1.0f, 0.125f, -7.5f, 0.0f}; /* e2m3 codes 0x08, 0x01, 0x3F, 0x00 */
    uint8_t p6[3];
    ASSERT_OK(tops_cast_from_f32(TOPS_DT_E2M3, p6, six, 4, 0));
    uint32_t w = (uint32_t)p6[0] | (uint32_t)p6[1] << 8 | (uint32_t)p6[2] << 16;
    ASSERT_EQ_U64(w, 0x08u | 0x01u << 6 | 0x3Fu << 12);
    float b6[4];
    ASSERT_OK(tops_cast_to_f32(TOPS_DT_E2M3, b6, p6, 4));
    for (int i = 0; i < 4; i++) ASSERT_NEAR(b6[i], six[i], 0);
    /* 2-bit: four per byte. */
    float two[4] = {1, -1, -2, 0};
    uint8_t p2;
    ASSERT_OK(tops_cast_from_f32(TOPS_DT_I2, &p2, two, 4, 1));
    ASSERT_EQ_U64(p2, 0x01 | 0x3 << 2 | 0x2 << 4);
    /* Every dtype round-trips its own representable values. */
    th_rng rng = th_seed();
    for (int dt = TOPS_DT_F32; dt < TOPS_DT_I32; dt++) {
        enum { M = 300 };
        uint8_t raw[M * 4], raw2[M * 4];
        float vals[M], vals2[M];
        for (int i = 0; i < M * 4; i++) raw[i] = (uint8_t)th_next(&rng);
        ASSERT_OK(tops_cast_to_f32((tops_dtype)dt, vals, raw, M));
        ASSERT_OK(tops_cast_from_f32((tops_dtype)dt, raw2, vals, M, 0));
        ASSERT_OK(tops_cast_to_f32((tops_dtype)dt, vals2, raw2, M));
        for (int i = 0; i < M; i++)
            if (!(vals[i] == vals2[i] || (isnan(vals[i]) && isnan(vals2[i])))) {
                TH_FAIL_AT("%s: %g -> %g", tops_dtype_name((tops_dtype)dt), (double)vals[i], (double)vals2[i]);
                break;
            }
    }
}

static void test_bad_arguments(void) {
    float f[4] = {0};
    uint8_t b[16];
    ASSERT_FAILS_WITH(tops_cast_from_f32(TOPS_DT_NONE, b, f, 4, 0), TOPS_UNSUPPORTED_FORMAT, "dst dtype");
    ASSERT_FAILS_WITH(tops_cast_from_f32(TOPS_DT_I32, b, f, 4, 0), TOPS_UNSUPPORTED_FORMAT, "i32");
    ASSERT_FAILS_WITH(tops_cast_from_f32((tops_dtype)99, b, f, 4, 0), TOPS_UNSUPPORTED_FORMAT, "99");
    ASSERT_FAILS_WITH(tops_cast_from_f32(TOPS_DT_E4M3, b, f, -1, 0), TOPS_INVALID_ARGUMENT, "n is -1");
    ASSERT_FAILS_WITH(tops_cast_from_f32(TOPS_DT_E4M3, b, f, 4, 7), TOPS_INVALID_ARGUMENT, "saturate");
    ASSERT_FAILS_WITH(tops_cast_from_f32(TOPS_DT_E4M3, NULL, f, 4, 0), TOPS_INVALID_ARGUMENT, "NULL");
    ASSERT_FAILS_WITH(tops_cast_from_f32(TOPS_DT_E4M3, b, NULL, 4, 0), TOPS_INVALID_ARGUMENT, "NULL");
    ASSERT_OK(tops_cast_from_f32(TOPS_DT_E4M3, NULL, NULL, 0, 0));
    ASSERT_FAILS_WITH(tops_cast_to_f32(TOPS_DT_NONE, f, b, 4), TOPS_UNSUPPORTED_FORMAT, "src dtype");
    ASSERT_FAILS_WITH(tops_cast_to_f32(TOPS_DT_E2M1, f, b, -3), TOPS_INVALID_ARGUMENT, "n is -3");
    ASSERT_FAILS_WITH(tops_cast_to_f32(TOPS_DT_E2M1, NULL, b, 4), TOPS_INVALID_ARGUMENT, "NULL");
}

int main(void) {
    RUN_TEST(test_fast_rows_equal_scalar_rows);
    RUN_TEST(test_known_values);
    RUN_TEST(test_packing_and_public_rows);
    RUN_TEST(test_bad_arguments);
    TEST_MAIN_END();
}
