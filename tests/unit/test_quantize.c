/* Quantizers and decoders: round trips of every format with partial last
   blocks and ranks 1..3, tops__decode_rect against tops_dequantize for any
   rectangle (and nothing written outside it), blocks running down the
   columns, strided sources, hand-computed block bytes (GGUF, MX, int
   groups), NaN/Inf blocks, NaN-poisoned outputs, and every bad input.
   (Bit-exact rules against numpy: tests/python/test_oracle_blocks.py.) */
#include "formats/codec.h"
#include "formats/elem.h"
#include "harness.h"

static const char *const all_formats[] = {
    "f32",      "f16",        "bf16",     "e4m3",    "e5m2",          "e2m3",          "e3m2",     "e2m1",
    "i8",       "u8",         "i4",       "u4",      "i2",            "u2",            "mxfp8",    "mxfp8-e5m2",
    "mxfp6",    "mxfp6-e3m2", "mxfp4",    "mxint8",  "nvfp4",         "int8-g32",      "int4-g32", "int4-g128:bf16",
    "int4-g32:e8m0", "int4-g64:f32", "int2-g16", "int8-g256", "int4-g32-affine", "lut4", "lut4-row", "e4m3-ch",
    "e5m2-ch",  "q4_0",       "q4_1",     "q8_0",    "gguf-mxfp4",
};
enum { NFMT = sizeof all_formats / sizeof all_formats[0] };

static tops_format fmt(const char *name) {
    tops_format f = {TOPS_FMT_F32, 0, TOPS_DT_NONE};
    tops_status st = tops_format_from_name(name, &f);
    if (st != TOPS_OK) TH_FAIL_AT("format %s: %s", name, tops_last_error());
    return f;
}

static tops_tensor f32_view(float *data, int rank, const int64_t *extent, const int64_t *stride) {
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = tops_format_of(TOPS_DT_F32);
    d.rank = rank;
    for (int i = 0; i < rank; i++) {
        d.extent[i] = extent[i];
        d.stride[i] = stride ? stride[i] : 0;
    }
    d.data = data;
    tops_tensor t;
    memset(&t, 0, sizeof t);
    tops_status st = tops_tensor_view(&d, &t);
    if (st != TOPS_OK) TH_FAIL_AT("f32 view: %s", tops_last_error());
    return t;
}

static float gauss(th_rng *r) {
    float u = th_uniform(r, 1e-7f, 1.0f), v = th_uniform(r, 0.0f, 1.0f);
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

static int64_t numel(int rank, const int64_t *e) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= e[i];
    return n;
}

static double rel_l2(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)a[i] * a[i];
    }
    return sqrt(num / den);
}

/* Signed formats keep Gaussian data within this error; unsigned plain ones lose the negatives. */
static double bound_of(const char *name) {
    if (!strcmp(name, "u8") || !strcmp(name, "u4") || !strcmp(name, "u2")) return 1.01;
    if (!strcmp(name, "i2") || !strcmp(name, "int2-g16") || !strcmp(name, "i8") || !strcmp(name, "i4")) return 0.9;
    return 0.35;
}

static void test_round_trips(void) {
    th_rng rng = th_seed();
    const int64_t shapes[3][3] = {{77, 0, 0}, {5, 131, 0}, {2, 3, 70}};
    static float src[2048], out[2048];
    for (int s = 0; s < 3; s++) {
        int rank = s + 1;
        int64_t n = numel(rank, shapes[s]);
        for (int64_t i = 0; i < n; i++) src[i] = gauss(&rng) * 3.0f;
        tops_tensor x = f32_view(src, rank, shapes[s], NULL);
        for (int f = 0; f < NFMT; f++) {
            tops_tensor q, y;
            ASSERT_OK(tops_tensor_create(fmt(all_formats[f]), rank, shapes[s], (tops_memory){0, 0}, &q));
            ASSERT_OK(tops_quantize(&x, &q, NULL));
            for (int64_t i = 0; i < n; i++) out[i] = NAN; /* poisoned */
            y = f32_view(out, rank, shapes[s], NULL);
            ASSERT_OK(tops_dequantize(&q, &y));
            int64_t unwritten = 0;
            for (int64_t i = 0; i < n; i++) unwritten += isnan(out[i]);
            if (unwritten) TH_FAIL_AT("%s rank %d: %lld outputs unwritten", all_formats[f], rank, (long long)unwritten);
            double e = rel_l2(src, out, n);
            if (!(e <= bound_of(all_formats[f]))) TH_FAIL_AT("%s rank %d: rel-L2 %g", all_formats[f], rank, e);
            /* f16 and bf16 destinations hold the f32 decode, rounded. */
            tops_tensor h;
            ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_BF16), rank, shapes[s], (tops_memory){0, 0}, &h));
            ASSERT_OK(tops_dequantize(&q, &h));
            const uint16_t *hb = h.data;
            for (int64_t i = 0; i < n; i++)
                if (hb[i] != tops__f32_to_bf16(out[i])) {
                    TH_FAIL_AT("%s: bf16 decode [%lld] %04x vs %04x", all_formats[f], (long long)i, hb[i],
                               tops__f32_to_bf16(out[i]));
                    break;
                }
            tops_tensor_destroy(&h);
            tops_tensor_destroy(&q);
        }
    }
}

/* Every rectangle, at every alignment, decodes like the whole tensor. */
static void test_decode_rect_matches_dequantize(void) {
    th_rng rng = th_seed();
    const int64_t ext[3] = {2, 9, 70};
    static float src[2 * 9 * 70], full[2 * 9 * 70], rect[9 * 80];
    for (int i = 0; i < 2 * 9 * 70; i++) src[i] = gauss(&rng);
    src[77] = NAN; /* one NaN block */
    tops_tensor x = f32_view(src, 3, ext, NULL);
    for (int f = 0; f < NFMT; f++) {
        tops_tensor q, y;
        ASSERT_OK(tops_tensor_create(fmt(all_formats[f]), 3, ext, (tops_memory){0, 0}, &q));
        ASSERT_OK(tops_quantize(&x, &q, NULL));
        y = f32_view(full, 3, ext, NULL);
        ASSERT_OK(tops_dequantize(&q, &y));
        for (int trial = 0; trial < 40; trial++) {
            int64_t outer = (int64_t)(th_next(&rng) % 2);
            int64_t r0 = (int64_t)(th_next(&rng) % 9), nr = 1 + (int64_t)(th_next(&rng) % (uint64_t)(9 - r0));
            int64_t c0 = (int64_t)(th_next(&rng) % 70), nc = 1 + (int64_t)(th_next(&rng) % (uint64_t)(70 - c0));
            int64_t ld = nc + 3;
            for (int i = 0; i < 9 * 80; i++) rect[i] = -12345.0f;
            tops__decode_rect(&q, &outer, r0, nr, c0, nc, rect, ld);
            int bad = 0;
            for (int64_t i = 0; i < nr && !bad; i++)
                for (int64_t j = 0; j < ld && !bad; j++) {
                    float got = rect[i * ld + j];
                    if (j >= nc) {
                        if (got != -12345.0f) {
                            TH_FAIL_AT("%s: wrote outside the rectangle at (%lld, %lld)", all_formats[f],
                                       (long long)i, (long long)j);
                            bad = 1;
                        }
                        continue;
                    }
                    float want = full[(outer * 9 + r0 + i) * 70 + c0 + j];
                    if (tops__f32_bits(got) != tops__f32_bits(want) && !(isnan(got) && isnan(want))) {
                        TH_FAIL_AT("%s rect [%lld+%lld, %lld+%lld] at (%lld, %lld): %g vs %g", all_formats[f],
                                   (long long)r0, (long long)nr, (long long)c0, (long long)nc, (long long)i,
                                   (long long)j, (double)got, (double)want);
                        bad = 1;
                    }
                }
            if (bad) break;
        }
        tops_tensor_destroy(&q);
    }
}

/* Scales running down the columns ([K, N] weights) decode like the
   transposed tensor with row blocks. */
static void test_blocks_along_columns(void) {
    th_rng rng = th_seed();
    enum { K = 70, NN = 5 };
    static float w[K * NN], wt[NN * K], dec[K * NN], dect[NN * K], rect[K * NN];
    for (int i = 0; i < K * NN; i++) w[i] = gauss(&rng);
    for (int k = 0; k < K; k++)
        for (int n = 0; n < NN; n++) wt[n * K + k] = w[k * NN + n];
    const char *names[] = {"int4-g32", "mxfp4", "nvfp4", "int8-g16:e8m0", "int4-g32-affine", "mxfp6", "mxfp8"};
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        tops_format fm = fmt(names[f]);
        int64_t g = fm.group;
        /* Caller planes: data [K, NN] packed along NN; scales [ceil(K/g), NN]. */
        static uint8_t data[K * NN * 4], scales[K * NN * 4], bias[K * NN * 4];
        tops_tensor_desc d;
        memset(&d, 0, sizeof d);
        d.format = fm;
        d.rank = 2;
        d.extent[0] = K;
        d.extent[1] = NN;
        d.data = data;
        d.scales.data = scales;
        d.scales.block[0] = g;
        d.scales.block[1] = 1;
        if (tops_format_get_info(fm.id)->has_bias) {
            d.bias.data = bias;
            d.bias.block[0] = g;
            d.bias.block[1] = 1;
        }
        tops_tensor q, qt;
        ASSERT_OK(tops_tensor_view(&d, &q));
        int64_t e[2] = {K, NN}, et[2] = {NN, K};
        tops_tensor x = f32_view(w, 2, e, NULL), xt = f32_view(wt, 2, et, NULL);
        ASSERT_OK(tops_quantize(&x, &q, NULL));
        ASSERT_OK(tops_tensor_create(fm, 2, et, (tops_memory){0, 0}, &qt));
        ASSERT_OK(tops_quantize(&xt, &qt, NULL));
        tops_tensor y = f32_view(dec, 2, e, NULL), yt = f32_view(dect, 2, et, NULL);
        ASSERT_OK(tops_dequantize(&q, &y));
        ASSERT_OK(tops_dequantize(&qt, &yt));
        if (!strcmp(names[f], "nvfp4")) ASSERT_TRUE(q.tensor_scale == qt.tensor_scale);
        int bad = 0;
        for (int k = 0; k < K && !bad; k++)
            for (int n = 0; n < NN && !bad; n++)
                if (tops__f32_bits(dec[k * NN + n]) != tops__f32_bits(dect[n * K + k])) {
                    TH_FAIL_AT("%s column blocks: (%d, %d) %g vs %g", names[f], k, n, (double)dec[k * NN + n],
                               (double)dect[n * K + k]);
                    bad = 1;
                }
        /* A rectangle starting inside a block, down the columns. */
        tops__decode_rect(&q, NULL, 13, 40, 1, 3, rect, 3);
        for (int i = 0; i < 40 && !bad; i++)
            for (int j = 0; j < 3; j++)
                if (tops__f32_bits(rect[i * 3 + j]) != tops__f32_bits(dec[(13 + i) * NN + 1 + j])) {
                    TH_FAIL_AT("%s column rect (%d, %d)", names[f], i, j);
                    bad = 1;
                    break;
                }
        tops_tensor_destroy(&qt);
    }
}

/* Blocks along an outer dimension of a rank-3 tensor, and slices of
   quantized tensors, decode like the whole. */
static void test_outer_blocks_and_slices(void) {
    th_rng rng = th_seed();
    enum { D0 = 40, D1 = 3, D2 = 5 };
    static float x[D0 * D1 * D2], full[D0 * D1 * D2], rect[D1 * D2];
    static uint8_t data[D0 * D1 * D2], scales[D0 * D1 * D2 * 2];
    for (int i = 0; i < D0 * D1 * D2; i++) x[i] = gauss(&rng);
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = fmt("int4-g32");
    d.rank = 3;
    d.extent[0] = D0;
    d.extent[1] = D1;
    d.extent[2] = D2;
    d.data = data;
    d.scales.data = scales;
    d.scales.block[0] = 32;
    d.scales.block[1] = d.scales.block[2] = 1;
    tops_tensor q;
    ASSERT_OK(tops_tensor_view(&d, &q));
    int64_t e[3] = {D0, D1, D2};
    tops_tensor src = f32_view(x, 3, e, NULL), out = f32_view(full, 3, e, NULL);
    ASSERT_OK(tops_quantize(&src, &q, NULL));
    ASSERT_OK(tops_dequantize(&q, &out));
    ASSERT_TRUE(rel_l2(x, full, D0 * D1 * D2) < 0.2);
    for (int64_t o = 0; o < D0; o += 13) {
        tops__decode_rect(&q, &o, 1, 2, 1, 4, rect, 4);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++)
                if (tops__f32_bits(rect[i * 4 + j]) != tops__f32_bits(full[(o * D1 + 1 + i) * D2 + 1 + j]))
                    TH_FAIL_AT("outer blocks: o=%lld (%d, %d)", (long long)o, i, j);
    }
    /* Slices of row-blocked formats, then a rectangle inside the slice. */
    const char *names[] = {"int4-g32", "q4_0", "lut4-row", "mxfp6", "int4-g32-affine", "e4m3-ch", "nvfp4"};
    enum { R = 9, C = 100 };
    static float a[R * C], whole[R * C], part[R * C];
    for (int i = 0; i < R * C; i++) a[i] = gauss(&rng);
    int64_t e2[2] = {R, C};
    tops_tensor sa = f32_view(a, 2, e2, NULL), sw = f32_view(whole, 2, e2, NULL);
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        tops_tensor w, s;
        ASSERT_OK(tops_tensor_create(fmt(names[f]), 2, e2, (tops_memory){0, 0}, &w));
        ASSERT_OK(tops_quantize(&sa, &w, NULL));
        ASSERT_OK(tops_dequantize(&w, &sw));
        int per_row = !strcmp(names[f], "e4m3-ch");
        int64_t start[2] = {2, per_row ? 0 : 32}, stop[2] = {7, C};
        ASSERT_OK(tops_tensor_slice(&w, start, stop, &s));
        int64_t nr = stop[0] - start[0], nc = stop[1] - start[1];
        tops__decode_rect(&s, NULL, 1, nr - 1, 3, nc - 3, part, nc - 3);
        for (int64_t i = 0; i < nr - 1; i++)
            for (int64_t j = 0; j < nc - 3; j++)
                if (tops__f32_bits(part[i * (nc - 3) + j]) != tops__f32_bits(whole[(start[0] + 1 + i) * C + start[1] + 3 + j])) {
                    TH_FAIL_AT("%s slice rect (%lld, %lld)", names[f], (long long)i, (long long)j);
                    i = nr;
                    break;
                }
        tops_tensor_destroy(&w);
    }
}

/* A strided (transposed) source quantizes like its contiguous copy. */
static void test_strided_source(void) {
    th_rng rng = th_seed();
    static float a[40 * 70], at[70 * 40], o1[40 * 70], o2[40 * 70];
    for (int i = 0; i < 40 * 70; i++) a[i] = gauss(&rng);
    for (int r = 0; r < 40; r++)
        for (int c = 0; c < 70; c++) at[c * 40 + r] = a[r * 70 + c];
    int64_t e[2] = {40, 70}, strided[2] = {1, 40};
    tops_tensor x = f32_view(a, 2, e, NULL), xs = f32_view(at, 2, e, strided);
    const char *names[] = {"int4-g32", "q4_0", "lut4-row", "nvfp4", "e4m3-ch"};
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        tops_tensor q1, q2;
        ASSERT_OK(tops_tensor_create(fmt(names[f]), 2, e, (tops_memory){0, 0}, &q1));
        ASSERT_OK(tops_tensor_create(fmt(names[f]), 2, e, (tops_memory){0, 0}, &q2));
        ASSERT_OK(tops_quantize(&x, &q1, NULL));
        ASSERT_OK(tops_quantize(&xs, &q2, NULL));
        tops_tensor y1 = f32_view(o1, 2, e, NULL), y2 = f32_view(o2, 2, e, NULL);
        ASSERT_OK(tops_dequantize(&q1, &y1));
        ASSERT_OK(tops_dequantize(&q2, &y2));
        if (memcmp(o1, o2, sizeof o1) != 0) TH_FAIL_AT("%s: strided source differs", names[f]);
        tops_tensor_destroy(&q1);
        tops_tensor_destroy(&q2);
    }
}

static const uint8_t *quantize_block(const char *name, const float *x, int64_t n, tops_tensor *q) {
    int64_t e[1] = {n};
    tops_tensor src = f32_view((float *)x, 1, e, NULL);
    tops_status st = tops_tensor_create(fmt(name), 1, e, (tops_memory){0, 0}, q);
    if (st == TOPS_OK) st = tops_quantize(&src, q, NULL);
    if (st != TOPS_OK) TH_FAIL_AT("%s: %s", name, tops_last_error());
    return q->data;
}

/* Block bytes worked out by hand from ggml's reference rules. */
static void test_gguf_bytes_by_hand(void) {
    float x[32];
    tops_tensor q;
    /* q4_0: x = j - 16; the largest magnitude is -16 -> d = 2, 1/d = 0.5,
       q(j) = (int)(x/2 + 8.5): q(0) = 0, q(1) = q(2) = 1, q(16) = 8, q(31) = 15. */
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16);
    const uint8_t *b = quantize_block("q4_0", x, 32, &q);
    const uint8_t q40[8] = {0x00, 0x40, 0x80, 0x91, 0x91, 0xA2, 0xA2, 0xB3};
    for (int i = 0; i < 8; i++) ASSERT_EQ_U64(b[i], q40[i]);
    ASSERT_EQ_U64(b[17], 0xF8); /* q(15) = 8, q(31) = min(15, 16) */
    tops_tensor_destroy(&q);
    /* q8_0: amax 127 -> d = 1 (0x3c00); roundf ties away from zero. */
    memset(x, 0, sizeof x);
    x[0] = 127;
    x[1] = -127;
    x[2] = 63.5f;
    x[3] = 0.5f;
    x[4] = -0.5f;
    x[5] = 2.5f;
    b = quantize_block("q8_0", x, 32, &q);
    const uint8_t q80[8] = {0x00, 0x3C, 0x7F, 0x81, 0x40, 0x01, 0xFF, 0x03};
    for (int i = 0; i < 8; i++) ASSERT_EQ_U64(b[i], q80[i]);
    for (int i = 8; i < 34; i++) ASSERT_EQ_U64(b[i], 0);
    tops_tensor_destroy(&q);
    /* q4_1: x = j (j < 16), 30 otherwise: d = 2, m = 0, q = (int)(x/2 + 0.5). */
    for (int j = 0; j < 32; j++) x[j] = j < 16 ? (float)j : 30.0f;
    b = quantize_block("q4_1", x, 32, &q);
    const uint8_t q41[8] = {0x00, 0x40, 0x00, 0x00, 0xF0, 0xF1, 0xF1, 0xF2};
    for (int i = 0; i < 8; i++) ASSERT_EQ_U64(b[i], q41[i]);
    tops_tensor_destroy(&q);
    /* gguf-mxfp4: amax 6 -> e = 2 - 2 + 127, half-scale 2^-1; the doubled
       table times 0.5: 6 -> 7, -3 -> 13, 0.5 -> 1. */
    memset(x, 0, sizeof x);
    x[0] = 6.0f;
    x[1] = -3.0f;
    x[16] = 0.5f;
    b = quantize_block("gguf-mxfp4", x, 32, &q);
    ASSERT_EQ_U64(b[0], 127);
    ASSERT_EQ_U64(b[1], 0x17);
    ASSERT_EQ_U64(b[2], 0x0D);
    for (int i = 3; i < 17; i++) ASSERT_EQ_U64(b[i], 0);
    float y[32];
    int64_t e[1] = {32};
    tops_tensor yt = f32_view(y, 1, e, NULL);
    ASSERT_OK(tops_dequantize(&q, &yt));
    for (int j = 0; j < 32; j++) ASSERT_NEAR(y[j], x[j], 0);
    tops_tensor_destroy(&q);
}

/* MX and int-group planes worked out by hand. */
static void test_block_planes_by_hand(void) {
    float x[32] = {6.0f, -3.0f, 0.5f};
    tops_tensor q;
    /* mxfp4: floor(log2 6) - emax(2) = 0 -> scale 127; e2m1 codes 7, 0xD, 1. */
    const uint8_t *b = quantize_block("mxfp4", x, 32, &q);
    ASSERT_EQ_U64(b[0], 0xD7);
    ASSERT_EQ_U64(b[1], 0x01);
    ASSERT_EQ_U64(((const uint8_t *)q.scales.data)[0], 127);
    tops_tensor_destroy(&q);
    /* int4-g32: amax 14 -> s = 2 (f16 0x4000); 7/2 = 3.5 -> 4, -7, 1.75 -> 2. */
    float y[32] = {7.0f, -14.0f, 3.5f};
    b = quantize_block("int4-g32", y, 32, &q);
    ASSERT_EQ_U64(b[0], 0x94);
    ASSERT_EQ_U64(b[1], 0x02);
    ASSERT_EQ_U64(((const uint16_t *)q.scales.data)[0], 0x4000);
    tops_tensor_destroy(&q);
    /* A partial block of 3 and zero / NaN / Inf blocks. */
    float z[70] = {0};
    z[40] = NAN;
    z[65] = 1.0f;
    b = quantize_block("mxfp8", z, 70, &q);
    const uint8_t *s = q.scales.data;
    ASSERT_EQ_U64(s[0], 0x00); /* all-zero block */
    ASSERT_EQ_U64(s[1], 0xFF); /* NaN block */
    ASSERT_EQ_U64(s[2], 127 - 8); /* 1.0 in a block of 6: 2^(0 - 8) */
    ASSERT_EQ_U64(b[65], 0x78);   /* 1.0 / 2^-8 = 2^8: e4m3 exponent 8 + 7, mantissa 0 */
    tops_tensor_destroy(&q);
}

static void test_nan_blocks_stay_local(void) {
    float x[96];
    for (int i = 0; i < 96; i++) x[i] = (float)(i % 7) - 3.0f;
    x[40] = INFINITY;
    const char *names[] = {"mxfp4", "int4-g32", "int8-g32:e8m0", "nvfp4", "int4-g32-affine", "mxint8"};
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        tops_tensor q;
        quantize_block(names[f], x, 96, &q);
        float y[96];
        int64_t e[1] = {96};
        tops_tensor yt = f32_view(y, 1, e, NULL);
        ASSERT_OK(tops_dequantize(&q, &yt));
        int g = q.format.group;
        for (int i = 0; i < 96; i++) {
            int in_bad_block = i / g == 40 / g;
            if (in_bad_block != (isnan(y[i]) != 0)) {
                TH_FAIL_AT("%s: element %d decodes to %g", names[f], i, (double)y[i]);
                break;
            }
        }
        tops_tensor_destroy(&q);
    }
}

/* For every format but nvfp4, tensor_scale multiplies each decoded value
   (and quantize divides by it first). */
static void test_tensor_scale_multiplier(void) {
    th_rng rng = th_seed();
    static float x[3 * 45], x3[3 * 45], y[3 * 45], y3[3 * 45];
    for (int i = 0; i < 3 * 45; i++) {
        x[i] = gauss(&rng);
        x3[i] = x[i] / 3.0f;
    }
    int64_t e[2] = {3, 45};
    tops_tensor src = f32_view(x, 2, e, NULL), src3 = f32_view(x3, 2, e, NULL);
    const char *names[] = {"int8-g32", "mxfp4", "e4m3", "q4_0", "lut4-row", "int4-g32-affine"};
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        tops_tensor owned, scaled, plain;
        ASSERT_OK(tops_tensor_create(fmt(names[f]), 2, e, (tops_memory){0, 0}, &owned));
        tops_tensor_desc d;
        memset(&d, 0, sizeof d);
        d.format = owned.format;
        d.rank = 2;
        d.extent[0] = 3;
        d.extent[1] = 45;
        d.data = owned.data;
        d.scales = owned.scales;
        d.bias = owned.bias;
        d.codebook = owned.codebook;
        d.tensor_scale = 3.0f;
        ASSERT_OK(tops_tensor_view(&d, &scaled));
        ASSERT_OK(tops_quantize(&src, &scaled, NULL));
        tops_tensor out = f32_view(y, 2, e, NULL), out3 = f32_view(y3, 2, e, NULL);
        ASSERT_OK(tops_dequantize(&scaled, &out));
        ASSERT_OK(tops_tensor_create(fmt(names[f]), 2, e, (tops_memory){0, 0}, &plain));
        ASSERT_OK(tops_quantize(&src3, &plain, NULL));
        ASSERT_OK(tops_dequantize(&plain, &out3));
        for (int i = 0; i < 3 * 45; i++)
            if (tops__f32_bits(y[i]) != tops__f32_bits(y3[i] * 3.0f)) {
                TH_FAIL_AT("%s tensor_scale: [%d] %g vs %g", names[f], i, (double)y[i], (double)(y3[i] * 3.0f));
                break;
            }
        tops_tensor_destroy(&plain);
        tops_tensor_destroy(&owned);
    }
}

static void test_quant_error(void) {
    float a[2] = {1.0f, 0.0f}, b[2] = {0.5f, 0.0f}, z[2] = {0, 0};
    tops_quant_error_stats s;
    ASSERT_OK(tops_quant_error(a, b, 2, &s));
    ASSERT_NEAR(s.rel_l2, 0.5, 1e-12);
    ASSERT_NEAR(s.cos_sim, 1.0, 1e-12);
    ASSERT_NEAR(s.max_abs, 0.5, 0);
    ASSERT_NEAR(s.snr_db, 10.0 * log10(4.0), 1e-12);
    ASSERT_OK(tops_quant_error(a, a, 2, &s));
    ASSERT_TRUE(s.rel_l2 == 0 && isinf(s.snr_db) && s.max_abs == 0);
    ASSERT_OK(tops_quant_error(z, z, 2, &s));
    ASSERT_TRUE(s.rel_l2 == 0 && s.cos_sim == 1.0);
    ASSERT_FAILS_WITH(tops_quant_error(NULL, b, 2, &s), TOPS_INVALID_ARGUMENT, "NULL");
    ASSERT_FAILS_WITH(tops_quant_error(a, b, 0, &s), TOPS_INVALID_ARGUMENT, "n is 0");
    ASSERT_FAILS_WITH(tops_quant_error(a, b, 2, NULL), TOPS_INVALID_ARGUMENT, "out");
}

static void test_bad_inputs(void) {
    static float src[64], dst[64];
    int64_t e[2] = {2, 32}, e3[3] = {1, 2, 32}, other[2] = {2, 31};
    tops_tensor x = f32_view(src, 2, e, NULL), y = f32_view(dst, 2, e, NULL);
    tops_tensor q, q_other, q3, junk;
    memset(&junk, 0, sizeof junk);
    ASSERT_OK(tops_tensor_create(fmt("int4-g32"), 2, e, (tops_memory){0, 0}, &q));
    ASSERT_OK(tops_tensor_create(fmt("int4-g32"), 2, other, (tops_memory){0, 0}, &q_other));
    ASSERT_OK(tops_tensor_create(fmt("int4-g32"), 3, e3, (tops_memory){0, 0}, &q3));
    ASSERT_FAILS_WITH(tops_quantize(NULL, &q, NULL), TOPS_INVALID_ARGUMENT, "src is NULL");
    ASSERT_FAILS_WITH(tops_quantize(&x, NULL, NULL), TOPS_INVALID_ARGUMENT, "dst is NULL");
    ASSERT_FAILS_WITH(tops_quantize(&junk, &q, NULL), TOPS_INVALID_ARGUMENT, "was not made by");
    ASSERT_FAILS_WITH(tops_quantize(&x, &q_other, NULL), TOPS_SHAPE_MISMATCH, "extent[1]");
    ASSERT_FAILS_WITH(tops_quantize(&x, &q3, NULL), TOPS_SHAPE_MISMATCH, "rank");
    ASSERT_FAILS_WITH(tops_quantize(&q, &q, NULL), TOPS_UNSUPPORTED_FORMAT, "reads f32");
    ASSERT_FAILS_WITH(tops_quantize(&x, &x, NULL), TOPS_INVALID_ARGUMENT, "in place");
    tops_quantize_opts bad = {-1, 0};
    ASSERT_FAILS_WITH(tops_quantize(&x, &q, &bad), TOPS_INVALID_ARGUMENT, "lut_iterations");
    bad.lut_iterations = 5000;
    ASSERT_FAILS_WITH(tops_quantize(&x, &q, &bad), TOPS_INVALID_ARGUMENT, "lut_iterations");
    /* Device memory is refused (never touched). */
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = tops_format_of(TOPS_DT_F32);
    d.rank = 2;
    d.extent[0] = 2;
    d.extent[1] = 32;
    d.data = (void *)(uintptr_t)0x1000;
    d.memory.kind = TOPS_DEVICE_CUDA;
    tops_tensor dev;
    ASSERT_OK(tops_tensor_view(&d, &dev));
    ASSERT_FAILS_WITH(tops_quantize(&dev, &q, NULL), TOPS_UNSUPPORTED_ON_DEVICE, "host memory");
    ASSERT_FAILS_WITH(tops_dequantize(&q, &dev), TOPS_UNSUPPORTED_ON_DEVICE, "host memory");
    /* Decode targets: f32, f16 or bf16 of the same shape only. */
    ASSERT_OK(tops_quantize(&x, &q, NULL));
    tops_tensor e4;
    ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_E4M3), 2, e, (tops_memory){0, 0}, &e4));
    ASSERT_FAILS_WITH(tops_dequantize(&q, &e4), TOPS_UNSUPPORTED_FORMAT, "f32, f16 or bf16");
    ASSERT_FAILS_WITH(tops_dequantize(&q, NULL), TOPS_INVALID_ARGUMENT, "dst is NULL");
    ASSERT_FAILS_WITH(tops_dequantize(&junk, &y), TOPS_INVALID_ARGUMENT, "src was not made by");
    ASSERT_FAILS_WITH(tops_dequantize(&q_other, &y), TOPS_SHAPE_MISMATCH, "extent[1]");
    ASSERT_FAILS_WITH(tops_dequantize(&x, &x), TOPS_INVALID_ARGUMENT, "in place");
    /* Failures leave the output untouched. */
    for (int i = 0; i < 64; i++) dst[i] = -7.0f;
    ASSERT_STATUS(tops_dequantize(&q_other, &y), TOPS_SHAPE_MISMATCH);
    for (int i = 0; i < 64; i++) ASSERT_TRUE(dst[i] == -7.0f);
    tops_tensor_destroy(&e4);
    tops_tensor_destroy(&q);
    tops_tensor_destroy(&q_other);
    tops_tensor_destroy(&q3);
}

int main(void) {
    RUN_TEST(test_round_trips);
    RUN_TEST(test_decode_rect_matches_dequantize);
    RUN_TEST(test_blocks_along_columns);
    RUN_TEST(test_outer_blocks_and_slices);
    RUN_TEST(test_strided_source);
    RUN_TEST(test_gguf_bytes_by_hand);
    RUN_TEST(test_block_planes_by_hand);
    RUN_TEST(test_nan_blocks_stay_local);
    RUN_TEST(test_tensor_scale_multiplier);
    RUN_TEST(test_quant_error);
    RUN_TEST(test_bad_inputs);
    TEST_MAIN_END();
}
