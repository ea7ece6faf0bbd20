/* Element casts: every fast row equals the scalar row on random bits (NaN
   payloads, Inf, subnormals, ties), nothing is written past n, the
   documented values and quirks hold, sub-byte packing is FORMATS.md's, and
   bad arguments fail with a sentence.  (Every code and midpoint against
   ml_dtypes: tests/python/test_oracle_casts.py.) */
#include "cpu/dispatch.h"
#include "formats/elem.h"
#include "harness.h"

#include <float.h>

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
            for (int e3 = 0; e3 < 2; e3++) { /* 6-bit codes, four in three bytes */
                for (int i = 0; i < N + GUARD; i++) out_ref[i] = out_fast[i] = NAN;
                ref->fp6_to_f32_row(out_ref, codes, n, e3);
                k->fp6_to_f32_row(out_fast, codes, n, e3);
                if (memcmp(out_ref, out_fast, sizeof out_ref) != 0)
                    TH_FAIL_AT("%s decode %s row n=%d differs", name, e3 ? "e3m2" : "e2m3", n);
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
    ASSERT_EQ_U64(tops__f32_to_e8m0(1.5f, 0), 128); /* tie 1|2 -> 2 (code 128, even) */
    ASSERT_EQ_U64(tops__f32_to_e8m0(3.0f, 0), 128); /* tie 2|4 -> 2 (code 128, even) */
    ASSERT_EQ_U64(tops__f32_to_e8m0(0.0f, 0), 0xFF);
    ASSERT_EQ_U64(tops__f32_to_e8m0(0.0f, 1), 0x00);
    ASSERT_EQ_U64(tops__f32_to_e8m0(0x1p127f, 0), 0xFE);
    ASSERT_EQ_U64(tops__f32_to_e8m0(0x1.8p127f, 0), 0xFE); /* tie 2^127 | 2^128 -> the even 0xFE */
    ASSERT_EQ_U64(tops__f32_to_e8m0(0x1.800002p127f, 0), 0xFF); /* past it: overflow */
    ASSERT_EQ_U64(tops__f32_to_e8m0(0x1.800002p127f, 1), 0xFE);
    ASSERT_EQ_U64(tops__f32_to_e8m0(tops__bits_f32(0x00400001u), 0), 0x00); /* 2^-127 (1 + 2^-22) */
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

/* e8m0 against an independent reference (frexp and exact f64 distances):
   the nearest 2^e, -127 <= e <= 127, ties (x = 1.5 * 2^e) to the even
   code; above the tie at 1.5 * 2^127 the value overflows (0xFF, or 0xFE
   saturating); NaN and +-Inf 0xFF; 0 and negatives 0xFF, saturating 0x00. */
static uint8_t e8m0_reference(float f, int sat) {
    if (isnan(f) || isinf(f)) return 0xFF;
    if (f <= 0.0f) return sat ? 0x00 : 0xFF;
    int E;
    (void)frexp((double)f, &E); /* f = m * 2^E, m in [0.5, 1): floor(log2 f) = E - 1 */
    int lo = E - 1 < -127 ? -127 : E - 1;
    double x = f, below = ldexp(1.0, lo), above = ldexp(1.0, lo + 1);
    if (x <= below) return (uint8_t)(lo + 127); /* only below 2^-127 */
    double dlo = x - below, dhi = above - x;     /* exact: x and the powers share a binade */
    int code = dlo < dhi ? lo + 127 : dhi < dlo ? lo + 128 : ((lo + 127) % 2 == 0 ? lo + 127 : lo + 128);
    if (code > 0xFE) return sat ? 0xFE : 0xFF;
    return (uint8_t)code;
}

static void check_e8m0(float f, const char *what) {
    for (int sat = 0; sat < 2; sat++) {
        uint8_t got = tops__f32_to_e8m0(f, sat), want = e8m0_reference(f, sat);
        if (got != want) {
            TH_FAIL_AT("e8m0(%a = 0x%08x, sat %d) %s: got 0x%02x want 0x%02x", (double)f, tops__f32_bits(f), sat, what,
                       got, want);
            return;
        }
    }
    uint8_t row;
    if (tops_cast_from_f32(TOPS_DT_E8M0, &row, &f, 1, 0) != TOPS_OK || row != e8m0_reference(f, 0))
        TH_FAIL_AT("tops_cast_from_f32(e8m0, %a) %s: 0x%02x", (double)f, what, row);
}

static void test_e8m0_nearest_power_of_two(void) {
    /* The cases the rule names, spelled out. */
    ASSERT_EQ_U64(tops__f32_to_e8m0(tops__bits_f32(0x00400001u), 0), 0x00); /* 2^-127 (1 + 2^-22) */
    ASSERT_EQ_U64(tops__f32_to_e8m0(tops__bits_f32(0x00513b11u), 0), 0x00);
    ASSERT_EQ_U64(tops__f32_to_e8m0(tops__bits_f32(0x00600000u), 0), 0x00); /* 1.5 * 2^-127: tie, even 0x00 */
    ASSERT_EQ_U64(tops__f32_to_e8m0(tops__bits_f32(0x00600001u), 0), 0x01);
    ASSERT_EQ_U64(tops__f32_to_e8m0(tops__bits_f32(0x005fffffu), 0), 0x00);
    ASSERT_EQ_U64(tops__f32_to_e8m0(tops__bits_f32(0x00000001u), 0), 0x00); /* 2^-149 */
    ASSERT_EQ_U64(tops__f32_to_e8m0(0x1.8p-126f, 0), 0x02);                 /* tie 2^-126 | 2^-125: even 0x02 */
    ASSERT_EQ_U64(tops__f32_to_e8m0(0x1.7ffffep-126f, 0), 0x01);
    ASSERT_EQ_U64(tops__f32_to_e8m0(0x1p-126f, 0), 0x01);
    ASSERT_EQ_U64(tops__f32_to_e8m0(NAN, 1), 0xFF);
    ASSERT_EQ_U64(tops__f32_to_e8m0(INFINITY, 0), 0xFF);
    ASSERT_EQ_U64(tops__f32_to_e8m0(INFINITY, 1), 0xFF);
    ASSERT_EQ_U64(tops__f32_to_e8m0(-INFINITY, 1), 0xFF);
    ASSERT_EQ_U64(tops__f32_to_e8m0(-0.0f, 1), 0x00);
    ASSERT_EQ_U64(tops__f32_to_e8m0(-2.0f, 0), 0xFF);
    ASSERT_EQ_U64(tops__f32_to_e8m0(-2.0f, 1), 0x00);
    /* Every f32 subnormal exponent: 2^p ulps, its neighbours, its binade's top. */
    for (int p = 0; p < 23; p++) {
        uint32_t b = 1u << p;
        const uint32_t pts[5] = {b, b + 1, b - 1, (b << 1) - 1, b | (b >> 1)};
        for (int i = 0; i < 5; i++)
            if (pts[i]) check_e8m0(tops__bits_f32(pts[i]), "subnormal");
    }
    /* Every power of two 2^e and tie 1.5 * 2^e of f32, with both f32 neighbours. */
    for (int e = -149; e <= 127; e++) {
        float v[2] = {ldexpf(1.0f, e), e >= -148 ? ldexpf(1.5f, e) : 0.0f};
        for (int i = 0; i < 2; i++) {
            if (v[i] == 0.0f) continue;
            check_e8m0(v[i], i ? "tie" : "power");
            check_e8m0(nextafterf(v[i], INFINITY), i ? "above a tie" : "above a power");
            check_e8m0(nextafterf(v[i], 0.0f), i ? "below a tie" : "below a power");
        }
    }
    check_e8m0(FLT_MAX, "max");
    /* Random bits over the whole range. */
    th_rng rng = th_seed();
    for (int i = 0; i < 200000; i++) check_e8m0(tops__bits_f32((uint32_t)th_next(&rng)), "random");
}

/* float -> i8/u8/i4/u4/i2/u2 against integer arithmetic: truncate toward
   zero and wrap modulo 2^bits (an f32 of magnitude >= 2^31 has zero low
   bits; +-Inf and NaN give 0); saturating: round to nearest even and clamp,
   NaN -> 0.  The reference works on the f32's sign, exponent and mantissa. */
static uint32_t int_reference(uint32_t x, int bits, int is_signed, int sat) {
    const uint32_t mask = (1u << bits) - 1u, ax = x & 0x7fffffffu;
    const int neg = (int)(x >> 31);
    const int64_t lo = is_signed ? -((int64_t)1 << (bits - 1)) : 0, hi = is_signed ? ((int64_t)1 << (bits - 1)) - 1 : mask;
    if (ax > 0x7f800000u) return 0; /* NaN */
    if (ax == 0x7f800000u) return sat ? (uint32_t)(neg ? lo : hi) & mask : 0u;
    const int e = (int)(ax >> 23);
    const uint64_t m = e ? (ax & 0x7fffffu) | 0x800000u : ax & 0x7fffffu; /* value m * 2^(e' - 150) */
    const int sh = (e ? e : 1) - 150;
    if (!sat) {
        uint64_t mag = sh >= 0 ? (sh >= 40 ? 0 : (m << sh)) : (-sh >= 64 ? 0 : m >> -sh);
        uint64_t v = neg ? (uint64_t)0 - mag : mag;
        return (uint32_t)(v & mask);
    }
    uint64_t mag;
    if (sh >= 0) mag = sh >= 40 ? UINT64_C(1) << 40 : m << sh;
    else if (-sh >= 64) mag = 0;
    else { /* round half to even on the dropped bits */
        uint64_t q = m >> -sh, rem = m & ((UINT64_C(1) << -sh) - 1), half = UINT64_C(1) << (-sh - 1);
        mag = q + (rem > half || (rem == half && (q & 1)));
    }
    int64_t v = neg ? -(int64_t)mag : (int64_t)mag;
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    return (uint32_t)v & mask;
}

static void test_integer_casts_wrap_and_saturate(void) {
    static const tops_dtype dts[6] = {TOPS_DT_I8, TOPS_DT_U8, TOPS_DT_I4, TOPS_DT_U4, TOPS_DT_I2, TOPS_DT_U2};
    ASSERT_EQ_U64(tops__f32_to_int_code(9.7f, 4, 1, 0), 0x9);  /* 9 - 16 = -7 */
    ASSERT_EQ_U64(tops__f32_to_int_code(-1.0f, 4, 0, 0), 0xF); /* u4(-1) = 15 */
    ASSERT_EQ_U64(tops__f32_to_int_code(-9.5f, 4, 1, 1), 0x8); /* clamps to -8 */
    ASSERT_EQ_U64(tops__f32_to_int_code(NAN, 8, 1, 0), 0);
    ASSERT_EQ_U64(tops__f32_to_int_code(INFINITY, 8, 1, 0), 0);
    ASSERT_EQ_U64(tops__f32_to_int_code(-INFINITY, 4, 1, 1), 0x8);
    ASSERT_EQ_U64(tops__f32_to_int_code(3e38f, 2, 0, 0), 0);
    ASSERT_EQ_U64(tops__f32_to_int_code(65539.0f, 8, 0, 0), 3);
    th_rng rng = th_seed();
    for (int d = 0; d < 6; d++) {
        const int bits = tops_dtype_bits(dts[d]), is_signed = d % 2 == 0;
        for (int i = 0; i < 100000; i++) {
            uint32_t x = (uint32_t)th_next(&rng);
            if (i % 2) x = (x & 0x807fffffu) | (uint32_t)(120 + th_next(&rng) % 40) << 23; /* |x| in [2^-7, 2^32) */
            if (i % 7 == 0) x = tops__f32_bits((float)((int)(th_next(&rng) % 1024) - 512) * 0.25f); /* ties */
            const float f = tops__bits_f32(x);
            for (int sat = 0; sat < 2; sat++) {
                uint32_t got = 0, want = int_reference(x, bits, is_signed, sat);
                uint8_t raw = 0;
                ASSERT_OK(tops_cast_from_f32(dts[d], &raw, &f, 1, sat));
                got = raw & ((1u << bits) - 1u);
                if (got != want) {
                    TH_FAIL_AT("%s(%a = 0x%08x, sat %d): got 0x%x want 0x%x", tops_dtype_name(dts[d]), (double)f, x, sat,
                               got, want);
                    i = 100000;
                    break;
                }
            }
        }
    }
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
    RUN_TEST(test_e8m0_nearest_power_of_two);
    RUN_TEST(test_integer_casts_wrap_and_saturate);
    RUN_TEST(test_packing_and_public_rows);
    RUN_TEST(test_bad_arguments);
    TEST_MAIN_END();
}
