/* File I/O: .npy and safetensors round trips, hostile inputs built here,
   and a fuzz-style loop over random and mutated headers. */
#include "harness.h"
#include "tensorops.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static th_rng rng;
static char tmpdir[64];

static void tmp_path(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", tmpdir, name); }

static unsigned char *read_all(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    *size = (size_t)n;
    return buf;
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static tops_format fmt(const char *name) {
    tops_format f = {TOPS_FMT_COUNT_, 0, TOPS_DT_NONE};
    if (tops_format_from_name(name, &f) != TOPS_OK) fprintf(stderr, "bad format %s: %s\n", name, tops_last_error());
    return f;
}

static const tops_memory host = {TOPS_DEVICE_CPU, 0};

/* Bytes of a contiguous plane of a created tensor. */
static size_t plane_bytes(const tops_plane *p, int rank) {
    if (!p->data) return 0;
    size_t n = (size_t)(tops_dtype_bits(p->dtype) + 7) / 8;
    for (int d = 0; d < rank; d++) n *= (size_t)p->extent[d];
    return n;
}

static void fill_random(void *p, size_t n) {
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)th_next(&rng);
}

static void fill_tensor(tops_tensor *t) {
    size_t span;
    tops_tensor_data_span(t, &span);
    fill_random(t->data, span);
    fill_random(t->scales.data, plane_bytes(&t->scales, t->rank));
    fill_random(t->bias.data, plane_bytes(&t->bias, t->rank));
    fill_random(t->codebook.data, plane_bytes(&t->codebook, t->rank));
}

static int same_bytes(const void *a, const void *b, size_t n) { return n == 0 || memcmp(a, b, n) == 0; }

/* Checks that b (loaded) equals a (contiguous, created) plane by plane. */
static void assert_same_tensor(const tops_tensor *a, const tops_tensor *b, const char *what) {
    char na[48], nb[48];
    if (strcmp(tops_format_name(a->format, na, sizeof na), tops_format_name(b->format, nb, sizeof nb)) != 0 ||
        a->rank != b->rank) {
        TH_FAIL_AT("%s: format/rank %s/%d vs %s/%d", what, na, a->rank, nb, b->rank);
        return;
    }
    for (int d = 0; d < a->rank; d++)
        if (a->extent[d] != b->extent[d]) TH_FAIL_AT("%s: extent[%d] %lld vs %lld", what, d, (long long)a->extent[d], (long long)b->extent[d]);
    size_t sa, sb;
    tops_tensor_data_span(a, &sa);
    tops_tensor_data_span(b, &sb);
    if (sa != sb || !same_bytes(a->data, b->data, sa)) TH_FAIL_AT("%s: data planes differ", what);
    const tops_plane *pa[3] = {&a->scales, &a->bias, &a->codebook}, *pb[3] = {&b->scales, &b->bias, &b->codebook};
    for (int p = 0; p < 3; p++) {
        size_t x = plane_bytes(pa[p], a->rank), y = plane_bytes(pb[p], b->rank);
        if (x != y || !same_bytes(pa[p]->data, pb[p]->data, x)) TH_FAIL_AT("%s: plane %d differs", what, p);
    }
    if (a->tensor_scale != b->tensor_scale)
        TH_FAIL_AT("%s: tensor_scale %.9g vs %.9g", what, (double)a->tensor_scale, (double)b->tensor_scale);
}

/* ---- .npy ------------------------------------------------------------------- */

static void test_npy_round_trip(void) {
    struct { const char *f; int rank; int64_t ext[4]; } cases[] = {
        {"f32", 2, {3, 5}}, {"f32", 1, {7}}, {"f16", 2, {4, 9}}, {"f16", 1, {1}}, {"f32", 3, {2, 3, 4}}, {"f32", 4, {2, 1, 3, 2}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tops_tensor t, u;
        char path[128];
        tmp_path(path, sizeof path, "rt.npy");
        ASSERT_OK(tops_tensor_create(fmt(cases[c].f), cases[c].rank, cases[c].ext, host, &t));
        fill_tensor(&t); /* any bit patterns, NaN and Inf included, survive */
        ASSERT_OK(tops_npy_save(path, &t));
        size_t size;
        unsigned char *file = read_all(path, &size);
        ASSERT_TRUE(file != NULL);
        if (file) {
            size_t header = 10 + (size_t)(file[8] | file[9] << 8);
            ASSERT_EQ_INT(header % 64, 0); /* numpy aligns the data to 64 bytes */
            ASSERT_EQ_INT(file[header - 1], '\n');
            ASSERT_OK(tops_npy_load_buffer(file, size, &u));
            assert_same_tensor(&t, &u, cases[c].f);
            tops_tensor_destroy(&u);
            free(file);
        }
        ASSERT_OK(tops_npy_load(path, &u));
        assert_same_tensor(&t, &u, cases[c].f);
        tops_tensor_destroy(&u);
        tops_tensor_destroy(&t);
    }
}

static void test_npy_header_text(void) {
    int64_t ext[2] = {2, 3};
    tops_tensor t;
    char path[128];
    tmp_path(path, sizeof path, "h.npy");
    ASSERT_OK(tops_tensor_create(fmt("f32"), 2, ext, host, &t));
    ASSERT_OK(tops_npy_save(path, &t));
    size_t size;
    unsigned char *file = read_all(path, &size);
    const char *want = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    ASSERT_TRUE(file && size == 128 + 24 && memcmp(file, "\x93NUMPY\x01\x00\x76\x00", 10) == 0 &&
                memcmp(file + 10, want, strlen(want)) == 0);
    free(file);
    tops_tensor_destroy(&t);
    /* bf16 goes out as its bit patterns; the reader does not guess them back. */
    int64_t e1[1] = {5};
    ASSERT_OK(tops_tensor_create(fmt("bf16"), 1, e1, host, &t));
    ASSERT_OK(tops_npy_save(path, &t));
    file = read_all(path, &size);
    ASSERT_TRUE(file && strstr((char *)file + 10, "'descr': '<u2'") && strstr((char *)file + 10, "(5,)"));
    tops_tensor u;
    ASSERT_FAILS_WITH(tops_npy_load(path, &u), TOPS_UNSUPPORTED_FORMAT, "'<u2'");
    free(file);
    tops_tensor_destroy(&t);
}

/* A strided view is written densely in C order. */
static void test_npy_strided(void) {
    float buf[40];
    for (int i = 0; i < 40; i++) buf[i] = (float)i;
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = fmt("f32");
    d.rank = 2;
    d.extent[0] = 3;
    d.extent[1] = 4;
    d.stride[0] = 10;
    d.stride[1] = 2;
    d.data = buf;
    tops_tensor v, u;
    ASSERT_OK(tops_tensor_view(&d, &v));
    char path[128];
    tmp_path(path, sizeof path, "s.npy");
    ASSERT_OK(tops_npy_save(path, &v));
    ASSERT_OK(tops_npy_load(path, &u));
    const float *got = u.data;
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++) ASSERT_EQ_INT((int)got[r * 4 + c], r * 10 + c * 2);
    tops_tensor_destroy(&u);
}

/* An .npy buffer: magic, version, length, header text (padded to 64 as
   numpy does unless pad is 0), then data_len bytes. */
static unsigned char *make_npy(int major, const char *header, int pad, size_t data_len, size_t *size) {
    size_t prefix = major == 1 ? 10 : 12, hl = strlen(header);
    size_t total = pad ? (prefix + hl + 1 + 63) / 64 * 64 : prefix + hl;
    size_t len = total - prefix;
    *size = total + data_len;
    unsigned char *b = calloc(1, *size ? *size : 1);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = 0;
    if (major == 1) {
        b[8] = (unsigned char)len;
        b[9] = (unsigned char)(len >> 8);
    } else {
        for (int i = 0; i < 4; i++) b[8 + i] = (unsigned char)(len >> (8 * i));
    }
    memcpy(b + prefix, header, hl);
    if (pad) {
        memset(b + prefix + hl, ' ', len - hl - 1);
        b[total - 1] = '\n';
    }
    return b;
}

static void test_npy_hostile_headers(void) {
    struct {
        int major;
        const char *header;
        size_t data;
        tops_status want;
        const char *needle;
    } cases[] = {
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24, TOPS_OK, ""},
        {1, "{\"descr\": \"<f2\", \"fortran_order\": False, \"shape\": (3,)}", 6, TOPS_OK, ""},
        {2, "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}", 24, TOPS_OK, ""},
        {3, "{'descr':'<f4','fortran_order':False,'shape':(1,1,1,2,)}", 8, TOPS_OK, ""},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3), }", 12, TOPS_PARSE_ERROR, "not a tuple"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4, TOPS_UNSUPPORTED_FORMAT, "0-dimensional"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", 0, TOPS_UNSUPPORTED_FORMAT, "empty"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1), }", 4, TOPS_UNSUPPORTED_FORMAT, "more than 4"},
        {1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, TOPS_UNSUPPORTED_FORMAT, "'>f4'"},
        {1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16, TOPS_UNSUPPORTED_FORMAT, "'<f8'"},
        {1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16, TOPS_UNSUPPORTED_FORMAT, "Fortran"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8, TOPS_PARSE_ERROR, "only descr"},
        {1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8, TOPS_PARSE_ERROR, "twice"},
        {1, "{'descr': '<f4', 'fortran_order': False}", 8, TOPS_PARSE_ERROR, "lacks shape"},
        {1, "{'descr': '<f4', 'fortran_order': Flase, 'shape': (2,)}", 8, TOPS_PARSE_ERROR, "True or False"},
        {1, "{'descr': 5, 'fortran_order': False, 'shape': (2,)}", 8, TOPS_PARSE_ERROR, "quoted string"},
        {1, "{'descr': '<f\\4', 'fortran_order': False, 'shape': (2,)}", 8, TOPS_PARSE_ERROR, "without escapes"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': ((2, 3),)}", 24, TOPS_PARSE_ERROR, "integer"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", 8, TOPS_PARSE_ERROR, "only spaces"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", 8, TOPS_PARSE_ERROR, "int64"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", 8, TOPS_PARSE_ERROR, "overflows"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 23, TOPS_PARSE_ERROR, "needs 24"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 25, TOPS_PARSE_ERROR, "needs 24"},
        {4, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, TOPS_UNSUPPORTED_FORMAT, "version 4.0"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t size;
        unsigned char *b = make_npy(cases[c].major, cases[c].header, 1, cases[c].data, &size);
        tops_tensor t;
        tops_clear_error();
        tops_status st = tops_npy_load_buffer(b, size, &t);
        if (st != cases[c].want || !strstr(tops_last_error(), cases[c].needle))
            TH_FAIL_AT("npy case %zu: got %s \"%s\", want %s mentioning \"%s\"", c, tops_status_str(st),
                       tops_last_error(), tops_status_str(cases[c].want), cases[c].needle);
        if (st == TOPS_OK) tops_tensor_destroy(&t);
        free(b);
    }
    /* Framing errors. */
    tops_tensor t;
    size_t size;
    unsigned char *b = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 1, 8, &size);
    ASSERT_FAILS_WITH(tops_npy_load_buffer(b, 9, &t), TOPS_PARSE_ERROR, "at least 10");
    ASSERT_FAILS_WITH(tops_npy_load_buffer(b, 40, &t), TOPS_PARSE_ERROR, "truncated");
    b[8] = 0;
    b[9] = 0; /* header length 0 */
    ASSERT_FAILS_WITH(tops_npy_load_buffer(b, size, &t), TOPS_PARSE_ERROR, "newline");
    b[0] = 'X';
    ASSERT_FAILS_WITH(tops_npy_load_buffer(b, size, &t), TOPS_PARSE_ERROR, "magic");
    free(b);
    b = make_npy(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 1, 8, &size);
    b[11] = 0x7f; /* a 2 GiB header */
    ASSERT_FAILS_WITH(tops_npy_load_buffer(b, size, &t), TOPS_PARSE_ERROR, "limit");
    ASSERT_FAILS_WITH(tops_npy_load_buffer(b, 11, &t), TOPS_PARSE_ERROR, "truncated");
    free(b);
    b = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 0, 8, &size);
    ASSERT_FAILS_WITH(tops_npy_load_buffer(b, size, &t), TOPS_PARSE_ERROR, "newline");
    free(b);
}

/* Every outcome of the loader is a status and a sentence naming it; a
   success gives a sound tensor. */
static int check_outcome(tops_status st, tops_tensor *t, const char *fn) {
    if (st == TOPS_OK) {
        int ok = t->rank >= 1 && t->rank <= 4 && tops_tensor_numel(t) >= 1;
        /* Whatever loaded also decodes: arbitrary codes and scales are data. */
        tops_tensor dec;
        if (ok && tops_tensor_create(fmt("f32"), t->rank, t->extent, host, &dec) == TOPS_OK) {
            ok = tops_dequantize(t, &dec) == TOPS_OK;
            tops_tensor_destroy(&dec);
        }
        tops_tensor_destroy(t);
        return ok;
    }
    return (st == TOPS_PARSE_ERROR || st == TOPS_UNSUPPORTED_FORMAT) && strncmp(tops_last_error(), fn, strlen(fn)) == 0 &&
           strlen(tops_last_error()) > strlen(fn) + 10;
}

static void mutate(th_rng *r, unsigned char *b, size_t *size, size_t header_hint) {
    int n = 1 + (int)(th_next(r) % 4);
    for (int i = 0; i < n && *size; i++) {
        uint64_t k = th_next(r);
        size_t at = (size_t)(th_next(r) % (k & 1 ? *size : (header_hint < *size ? header_hint : *size)));
        switch ((k >> 1) % 5) {
        case 0: b[at] = (unsigned char)th_next(r); break;
        case 1: b[at] ^= (unsigned char)(1u << (th_next(r) % 8)); break;
        case 2: *size = at; break;                        /* truncate */
        case 3: b[at] = "0123456789,()[]{}:'\" -\n"[th_next(r) % 23]; break; /* grammar characters */
        case 4: if (at + 1 < *size) memmove(b + at, b + at + 1, *size - at - 1), (*size)--; break;
        }
    }
}

static void test_npy_fuzz_loop(void) {
    const char *headers[] = {
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
        "{'descr': '<f2', 'fortran_order': False, 'shape': (5,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 2), }",
    };
    size_t datas[] = {24, 10, 16};
    int bad = 0, ok = 0;
    for (int it = 0; it < 30000; it++) {
        int h = (int)(th_next(&rng) % 3);
        size_t size;
        unsigned char *b = make_npy(1 + (int)(th_next(&rng) % 3), headers[h], 1, datas[h], &size);
        mutate(&rng, b, &size, 80);
        /* Exact-size copy, so ASan catches any read past the end. */
        unsigned char *exact = malloc(size ? size : 1);
        memcpy(exact, b, size);
        tops_tensor t;
        tops_clear_error();
        tops_status st = tops_npy_load_buffer(exact, size, &t);
        ok += st == TOPS_OK;
        if (!check_outcome(st, &t, "tops_npy_load_buffer") && bad++ < 5)
            TH_FAIL_AT("iteration %d: status %s, error \"%s\"", it, tops_status_str(st), tops_last_error());
        free(exact);
        free(b);
    }
    printf("     npy fuzz loop: %d of 30000 mutated inputs still loaded\n", ok);
}

/* ---- safetensors ---------------------------------------------------------------- */

static void test_safetensors_round_trip(void) {
    struct { const char *f; int rank; int64_t ext[4]; const char *weight_dtype; } cases[] = {
        {"f32", 2, {3, 5}, "F32"},          {"f16", 1, {7}, "F16"},            {"bf16", 2, {2, 3}, "BF16"},
        {"e4m3", 2, {2, 9}, "F8_E4M3"},    {"e2m3", 2, {3, 7}, "U8"},        {"i4", 2, {3, 5}, "U8"},
        {"u2", 2, {2, 7}, "U8"},           {"mxfp8", 2, {2, 40}, "F8_E4M3"}, {"mxfp8-e5m2", 2, {2, 32}, "F8_E5M2"},
        {"mxfp6-e3m2", 2, {3, 45}, "U8"},  {"mxfp4", 2, {2, 33}, "U8"},      {"mxint8", 2, {2, 32}, "I8"},
        {"nvfp4", 2, {3, 17}, "U8"},       {"int8-g16:f32", 2, {2, 20}, "I8"}, {"int4-g32", 2, {4, 70}, "U8"},
        {"int4-g32:e8m0", 2, {1, 64}, "U8"}, {"int4-g64:bf16", 2, {2, 64}, "U8"}, {"int2-g16", 2, {2, 33}, "U8"},
        {"int4-g32-affine", 2, {3, 40}, "U8"}, {"lut4", 2, {2, 10}, "U8"},   {"lut4-row", 2, {3, 9}, "U8"},
        {"e4m3-ch", 2, {2, 5}, "F8_E4M3"}, {"e5m2-ch", 2, {3, 3}, "F8_E5M2"}, {"q4_0", 2, {2, 64}, "U8"},
        {"q4_1", 2, {1, 40}, "U8"},        {"q8_0", 2, {2, 32}, "U8"},       {"gguf-mxfp4", 2, {2, 32}, "U8"},
        {"int4-g32", 1, {50}, "U8"},       {"mxfp4", 3, {2, 2, 40}, "U8"},   {"u8", 4, {1, 2, 1, 3}, "U8"},
        {"q4_K", 2, {2, 300}, "U8"},       {"q5_K", 2, {1, 256}, "U8"},      {"q6_K", 2, {2, 260}, "U8"},
        {"iq4_nl", 2, {3, 40}, "U8"},      {"iq4_xs", 2, {2, 512}, "U8"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tops_tensor t, u;
        char path[128], what[64];
        snprintf(what, sizeof what, "%s rank %d", cases[c].f, cases[c].rank);
        tmp_path(path, sizeof path, "rt.safetensors");
        tops_status st = tops_tensor_create(fmt(cases[c].f), cases[c].rank, cases[c].ext, host, &t);
        ASSERT_OK(st);
        if (st != TOPS_OK) continue;
        fill_tensor(&t);
        if (c % 3 == 0 || t.format.id == TOPS_FMT_NVFP4) t.tensor_scale = 0.1f * (float)(c + 1);
        ASSERT_OK(tops_safetensors_save(path, &t));
        size_t size;
        unsigned char *file = read_all(path, &size);
        ASSERT_TRUE(file && size > 8);
        if (file) {
            uint64_t n = 0;
            for (int i = 7; i >= 0; i--) n = n << 8 | file[i];
            ASSERT_EQ_INT(n % 8, 0);
            char dtype[64];
            snprintf(dtype, sizeof dtype, "\"weight\":{\"dtype\":\"%s\"", cases[c].weight_dtype);
            char *hdr = calloc(1, n + 1);
            memcpy(hdr, file + 8, n);
            if (!strstr(hdr, dtype)) TH_FAIL_AT("%s: header lacks %s: %s", what, dtype, hdr);
            if (!strstr(hdr, "\"format\":\"")) TH_FAIL_AT("%s: header lacks the format: %s", what, hdr);
            free(hdr);
            ASSERT_OK(tops_safetensors_load_buffer(file, size, &u));
            assert_same_tensor(&t, &u, what);
            tops_tensor_destroy(&u);
            free(file);
        }
        ASSERT_OK(tops_safetensors_load(path, &u));
        assert_same_tensor(&t, &u, what);
        tops_tensor_destroy(&u);
        tops_tensor_destroy(&t);
    }
}

/* A slice (rows 1..3, columns 32..96 of an int4-g32 tensor) is written as
   the tensor it is, planes sliced with it. */
static void test_safetensors_slice(void) {
    int64_t ext[2] = {4, 96}, start[2] = {1, 32}, stop[2] = {3, 96};
    tops_tensor t, s, u;
    ASSERT_OK(tops_tensor_create(fmt("int4-g32"), 2, ext, host, &t));
    fill_tensor(&t);
    ASSERT_OK(tops_tensor_slice(&t, start, stop, &s));
    char path[128];
    tmp_path(path, sizeof path, "slice.safetensors");
    ASSERT_OK(tops_safetensors_save(path, &s));
    ASSERT_OK(tops_safetensors_load(path, &u));
    ASSERT_EQ_INT(u.extent[0], 2);
    ASSERT_EQ_INT(u.extent[1], 64);
    const unsigned char *td = t.data, *ud = u.data;
    const uint16_t *ts = t.scales.data, *us = u.scales.data;
    for (int r = 0; r < 2; r++) {
        ASSERT_TRUE(memcmp(ud + r * 32, td + (r + 1) * 48 + 16, 32) == 0);
        ASSERT_EQ_INT(us[r * 2], ts[(r + 1) * 3 + 1]);
        ASSERT_EQ_INT(us[r * 2 + 1], ts[(r + 1) * 3 + 2]);
    }
    tops_tensor_destroy(&u);
    tops_tensor_destroy(&t);
}

/* A safetensors buffer: the 8-byte length, the JSON, data_len bytes. */
static unsigned char *make_st(const char *json, size_t data_len, size_t *size) {
    size_t n = strlen(json);
    *size = 8 + n + data_len;
    unsigned char *b = calloc(1, *size);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(b + 8, json, n);
    for (size_t i = 0; i < data_len; i++) b[8 + n + i] = (unsigned char)(i * 7);
    return b;
}

#define META "\"__metadata__\":{\"format\":\"int4-g32\",\"shape\":\"[2, 64]\"}"
#define WEIGHT "\"weight\":{\"dtype\":\"U8\",\"shape\":[2,32],\"data_offsets\":[8,72]}"
#define SCALES "\"weight.scales\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]}"

static void test_safetensors_hostile_headers(void) {
    static char deep[8200];
    strcpy(deep, "{\"__metadata__\":");
    for (int i = 0; i < 4000; i++) strcat(deep, "[");
    for (int i = 0; i < 4000; i++) strcat(deep, "]");
    strcat(deep, "}");
    struct {
        const char *json;
        size_t data;
        tops_status want;
        const char *needle;
    } cases[] = {
        {"{" META "," WEIGHT "," SCALES "}", 72, TOPS_OK, ""},
        {"{" META "," WEIGHT "," SCALES "}    ", 72, TOPS_OK, ""},
        {"not json", 72, TOPS_PARSE_ERROR, "start with '{'"},
        {"{" META "," WEIGHT ",", 72, TOPS_PARSE_ERROR, "not valid JSON"},
        {"[1, 2]", 0, TOPS_PARSE_ERROR, "start with '{'"},
        {"{}", 0, TOPS_PARSE_ERROR, "no __metadata__"},
        {"{" META "," WEIGHT "," SCALES "} x", 72, TOPS_PARSE_ERROR, "after its JSON"},
        {"{\"__metadata__\":{\"format\":3,\"shape\":\"[2, 64]\"}," WEIGHT "," SCALES "}", 72, TOPS_PARSE_ERROR, "not a string"},
        {"{\"__metadata__\":[]," WEIGHT "," SCALES "}", 72, TOPS_PARSE_ERROR, "not a JSON object"},
        {"{\"__metadata__\":{\"shape\":\"[2, 64]\"}," WEIGHT "," SCALES "}", 72, TOPS_PARSE_ERROR, "lacks \"format\""},
        {"{\"__metadata__\":{\"format\":\"int4-g32\"}," WEIGHT "," SCALES "}", 72, TOPS_PARSE_ERROR, "lacks \"shape\""},
        {"{\"__metadata__\":{\"format\":\"int5-g32\",\"shape\":\"[2, 64]\"}," WEIGHT "," SCALES "}", 72, TOPS_PARSE_ERROR, "not a format"},
        {"{\"__metadata__\":{\"format\":\"int4-g33\",\"shape\":\"[2, 64]\"}," WEIGHT "," SCALES "}", 72, TOPS_PARSE_ERROR, "power of two"},
        {"{\"__metadata__\":{\"format\":\"int4-g32\",\"format\":\"int4-g32\",\"shape\":\"[2, 64]\"}," WEIGHT "," SCALES "}", 72, TOPS_PARSE_ERROR, "twice"},
        {"{\"__metadata__\":{\"format\":\"int4-g32\",\"shape\":\"[2, 64\"}," WEIGHT "," SCALES "}", 72, TOPS_PARSE_ERROR, "list of 1 to 4"},
        {"{\"__metadata__\":{\"format\":\"int4-g32\",\"shape\":\"[1, 2, 3, 4, 5]\"}," WEIGHT "," SCALES "}", 72, TOPS_PARSE_ERROR, "list of 1 to 4"},
        {"{\"__metadata__\":{\"format\":\"int4-g32\",\"shape\":\"[0, 64]\"}," WEIGHT "," SCALES "}", 72, TOPS_PARSE_ERROR, "does not suit"},
        {"{\"__metadata__\":{\"format\":\"int4-g32\",\"shape\":\"[99999999999, 99999999999]\"}," WEIGHT "," SCALES "}", 72, TOPS_PARSE_ERROR, "shape"},
        {"{\"__metadata__\":{\"format\":\"int4-g32\",\"shape\":\"[2, 32]\"}," WEIGHT "," SCALES "}", 72, TOPS_PARSE_ERROR, "must have shape [2, 16]"},
        {"{" META ",\"weight\":{\"dtype\":\"I8\",\"shape\":[2,32],\"data_offsets\":[8,72]}," SCALES "}", 72, TOPS_PARSE_ERROR, "has dtype I8"},
        {"{" META ",\"weight\":{\"dtype\":7,\"shape\":[2,32],\"data_offsets\":[8,72]}," SCALES "}", 72, TOPS_PARSE_ERROR, "not a string"},
        {"{" META ",\"weight\":{\"dtype\":\"U8\",\"shape\":[64],\"data_offsets\":[8,72]}," SCALES "}", 72, TOPS_PARSE_ERROR, "must have shape"},
        {"{" META ",\"weight\":{\"dtype\":\"U8\",\"shape\":[2,-32],\"data_offsets\":[8,72]}," SCALES "}", 72, TOPS_PARSE_ERROR, "must have shape"},
        {"{" META ",\"weight\":{\"dtype\":\"U8\",\"shape\":\"2,32\",\"data_offsets\":[8,72]}," SCALES "}", 72, TOPS_PARSE_ERROR, "must have shape"},
        {"{" META ",\"weight\":{\"dtype\":\"U8\",\"shape\":[2,32],\"data_offsets\":[8,80]}," SCALES "}", 72, TOPS_PARSE_ERROR, "inside the 72-byte"},
        {"{" META ",\"weight\":{\"dtype\":\"U8\",\"shape\":[2,32],\"data_offsets\":[72,8]}," SCALES "}", 72, TOPS_PARSE_ERROR, "not a range"},
        {"{" META ",\"weight\":{\"dtype\":\"U8\",\"shape\":[2,32],\"data_offsets\":[8,71]}," SCALES "}", 72, TOPS_PARSE_ERROR, "spans 63 bytes"},
        {"{" META ",\"weight\":{\"dtype\":\"U8\",\"shape\":[2,32],\"data_offsets\":[8.5,72]}," SCALES "}", 72, TOPS_PARSE_ERROR, "non-negative integers"},
        {"{" META ",\"weight\":{\"dtype\":\"U8\",\"shape\":[2,32],\"data_offsets\":[-8,72]}," SCALES "}", 72, TOPS_PARSE_ERROR, "non-negative integers"},
        {"{" META ",\"weight\":{\"dtype\":\"U8\",\"shape\":[2,32],\"data_offsets\":[1e30,1e30]}," SCALES "}", 72, TOPS_PARSE_ERROR, "non-negative integers"},
        {"{" META ",\"weight\":{\"dtype\":\"U8\",\"shape\":[2,32],\"data_offsets\":[8]}," SCALES "}", 72, TOPS_PARSE_ERROR, "pair"},
        {"{" META ",\"weight\":{\"dtype\":\"U8\",\"shape\":[2,32],\"data_offsets\":[8,72,3]}," SCALES "}", 72, TOPS_PARSE_ERROR, "pair"},
        {"{" META ",\"weight\":{\"dtype\":\"U8\",\"shape\":[2,32]}," SCALES "}", 72, TOPS_PARSE_ERROR, "lacks data_offsets"},
        {"{" META ",\"weight\":{\"dtype\":\"U8\",\"shape\":[2,32],\"data_offsets\":[8,72],\"x\":1}," SCALES "}", 72, TOPS_PARSE_ERROR, "unknown key"},
        {"{" META ",\"weight\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[2,32],\"data_offsets\":[8,72]}," SCALES "}", 72, TOPS_PARSE_ERROR, "twice"},
        {"{" META ",\"weight\":5," SCALES "}", 72, TOPS_PARSE_ERROR, "not a JSON object"},
        {"{" META ",\"weight\":{\"dtype\":\"U8\",\"shape\":[2,32],\"data_offsets\":[4,68]}," SCALES "}", 72, TOPS_PARSE_ERROR, "overlaps"},
        {"{" META ",\"weight\":{\"dtype\":\"U8\",\"shape\":[2,32],\"data_offsets\":[9,73]}," SCALES "}", 73, TOPS_PARSE_ERROR, "hole"},
        {"{" META "," WEIGHT "," SCALES "}", 80, TOPS_PARSE_ERROR, "8 bytes after the last"},
        {"{" META "," WEIGHT "}", 72, TOPS_PARSE_ERROR, "lacks tensor \"weight.scales\""},
        {"{" META "," SCALES "}", 72, TOPS_PARSE_ERROR, "lacks tensor \"weight\""},
        {"{" META "," WEIGHT "," SCALES "," WEIGHT "}", 72, TOPS_PARSE_ERROR, "twice"},
        {"{" META "," WEIGHT "," SCALES ",\"bias\":{}}", 72, TOPS_PARSE_ERROR, "holds only"},
        {"{" META "," WEIGHT "," SCALES ",\"weight.biases\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[72,80]}}", 80, TOPS_PARSE_ERROR, "does not have"},
        {"{\"__metadata__\":{\"format\":\"nvfp4\",\"shape\":\"[1, 16]\"},\"weight\":{\"dtype\":\"U8\",\"shape\":[1,8],\"data_offsets\":[0,8]},\"weight.scales\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,1],\"data_offsets\":[8,9]}}", 9, TOPS_PARSE_ERROR, "lacks \"tensor_scale\""},
        {"{\"__metadata__\":{\"format\":\"nvfp4\",\"shape\":\"[1, 16]\",\"tensor_scale\":\"nan\"},\"weight\":{\"dtype\":\"U8\",\"shape\":[1,8],\"data_offsets\":[0,8]},\"weight.scales\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,1],\"data_offsets\":[8,9]}}", 9, TOPS_PARSE_ERROR, "finite number"},
        {"{\"__metadata__\":{\"format\":\"nvfp4\",\"shape\":\"[1, 16]\",\"tensor_scale\":\"2.5x\"},\"weight\":{\"dtype\":\"U8\",\"shape\":[1,8],\"data_offsets\":[0,8]},\"weight.scales\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,1],\"data_offsets\":[8,9]}}", 9, TOPS_PARSE_ERROR, "finite number"},
        {"{\"__metadata__\":{\"format\":\"nvfp4\",\"shape\":\"[1, 16]\",\"tensor_scale\":\"2.5\"},\"weight\":{\"dtype\":\"U8\",\"shape\":[1,8],\"data_offsets\":[0,8]},\"weight.scales\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,1],\"data_offsets\":[8,9]}}", 9, TOPS_OK, ""},
        {"{\"__metadata__\":{\"format\":\"packed\",\"shape\":\"[1, 16]\"}}", 0, TOPS_PARSE_ERROR, "not a format"},
        {deep, 0, TOPS_PARSE_ERROR, "JSON"},
        {"{" META ",\"weight\xc3\x28\":1}", 0, TOPS_PARSE_ERROR, "not UTF-8"},
        {"{" META ",\"weight\xed\xa0\x80\":1}", 0, TOPS_PARSE_ERROR, "not UTF-8"},
        {"{" META ",\"weight\xc0\xaf\":1}", 0, TOPS_PARSE_ERROR, "not UTF-8"},
        {"{" META ",\"w\xc3\xa9ight\":1}", 0, TOPS_PARSE_ERROR, "holds only"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t size;
        unsigned char *b = make_st(cases[c].json, cases[c].data, &size);
        tops_tensor t;
        tops_clear_error();
        tops_status st = tops_safetensors_load_buffer(b, size, &t);
        if (st != cases[c].want || !strstr(tops_last_error(), cases[c].needle))
            TH_FAIL_AT("safetensors case %zu: got %s \"%s\", want %s mentioning \"%s\"", c, tops_status_str(st),
                       tops_last_error(), tops_status_str(cases[c].want), cases[c].needle);
        if (st == TOPS_OK) tops_tensor_destroy(&t);
        free(b);
    }
    /* Framing: the 8-byte size. */
    size_t size;
    tops_tensor t;
    unsigned char *b = make_st("{" META "," WEIGHT "," SCALES "}", 72, &size);
    ASSERT_FAILS_WITH(tops_safetensors_load_buffer(b, 7, &t), TOPS_PARSE_ERROR, "8-byte size");
    ASSERT_FAILS_WITH(tops_safetensors_load_buffer(b, 60, &t), TOPS_PARSE_ERROR, "holds only");
    ASSERT_FAILS_WITH(tops_safetensors_load_buffer(b, size - 1, &t), TOPS_PARSE_ERROR, "inside the 71-byte");
    b[6] = 1; /* 2^48 bytes of header */
    ASSERT_FAILS_WITH(tops_safetensors_load_buffer(b, size, &t), TOPS_PARSE_ERROR, "limit");
    memset(b, 0, 8);
    ASSERT_FAILS_WITH(tops_safetensors_load_buffer(b, size, &t), TOPS_PARSE_ERROR, "start with '{'");
    free(b);
}

/* Random headers from the grammar's own pieces, and random mutations of a
   valid file: every outcome is a status with a sentence, never a crash (the
   sanitizer build runs this too). */
static void test_safetensors_fuzz_loop(void) {
    static const char *names[] = {"weight", "weight.scales", "weight.biases", "weight.codebook", "__metadata__", "w"};
    static const char *dtypes[] = {"U8", "I8", "F16", "BF16", "F32", "F8_E4M3", "F8_E5M2", "F64", ""};
    static const char *formats[] = {"int4-g32", "mxfp4", "nvfp4", "lut4", "lut4-row", "q4_0", "int4-g16-affine",
                                    "f32", "mxfp6", "e4m3-ch", "int8-g256:e8m0", "i2"};
    char json[2048];
    int bad = 0, ok = 0, iters = 20000;
    for (int it = 0; it < iters; it++) {
        size_t size, data_len = th_next(&rng) % 80;
        unsigned char *b;
        if (it % 2 == 0) {
            int n = snprintf(json, sizeof json, "{\"__metadata__\":{\"format\":\"%s\",\"shape\":\"[%d, %d]\"%s}",
                             formats[th_next(&rng) % 12], (int)(th_next(&rng) % 3) + (it % 7 == 0 ? 0 : 1),
                             (int)(th_next(&rng) % 40) + 1, th_next(&rng) % 2 ? ",\"tensor_scale\":\"0.5\"" : "");
            int entries = (int)(th_next(&rng) % 4);
            for (int e = 0; e < entries && n < 1800; e++) {
                uint64_t a = th_next(&rng) % 64, z = a + th_next(&rng) % 40;
                n += snprintf(json + n, sizeof json - (size_t)n,
                              ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%d,%d],\"data_offsets\":[%llu,%llu]}",
                              names[th_next(&rng) % 6], dtypes[th_next(&rng) % 9], (int)(th_next(&rng) % 3),
                              (int)(th_next(&rng) % 33), (unsigned long long)a, (unsigned long long)z);
            }
            snprintf(json + n, sizeof json - (size_t)n, "}");
            b = make_st(json, data_len, &size);
        } else {
            b = make_st("{" META "," WEIGHT "," SCALES "}", 72, &size);
            mutate(&rng, b, &size, 8 + strlen("{" META "," WEIGHT "," SCALES "}"));
        }
        unsigned char *exact = malloc(size ? size : 1);
        memcpy(exact, b, size);
        tops_tensor t;
        tops_clear_error();
        tops_status st = tops_safetensors_load_buffer(exact, size, &t);
        ok += st == TOPS_OK;
        if (!check_outcome(st, &t, "tops_safetensors_load_buffer") && bad++ < 5)
            TH_FAIL_AT("iteration %d: status %s, error \"%s\"", it, tops_status_str(st), tops_last_error());
        free(exact);
        free(b);
    }
    printf("     safetensors fuzz loop: %d of %d inputs loaded\n", ok, iters);
}

/* ---- argument and file errors ----------------------------------------------------- */

static void test_errors(void) {
    tops_tensor t, u;
    int64_t ext[2] = {2, 32};
    char path[128], dir[128];
    tmp_path(path, sizeof path, "e.bin");
    ASSERT_OK(tops_tensor_create(fmt("int4-g32"), 2, ext, host, &t));

    ASSERT_FAILS_WITH(tops_npy_load(NULL, &u), TOPS_INVALID_ARGUMENT, "path is NULL");
    ASSERT_FAILS_WITH(tops_npy_load_buffer(NULL, 5, &u), TOPS_INVALID_ARGUMENT, "data is NULL");
    ASSERT_FAILS_WITH(tops_npy_load_buffer(NULL, 0, &u), TOPS_PARSE_ERROR, "holds 0 bytes");
    ASSERT_FAILS_WITH(tops_safetensors_load_buffer(NULL, 5, &u), TOPS_INVALID_ARGUMENT, "data is NULL");
    ASSERT_FAILS_WITH(tops_safetensors_load(NULL, &u), TOPS_INVALID_ARGUMENT, "path is NULL");
    ASSERT_FAILS_WITH(tops_npy_save(NULL, &t), TOPS_INVALID_ARGUMENT, "path is NULL");
    ASSERT_FAILS_WITH(tops_safetensors_save(NULL, &t), TOPS_INVALID_ARGUMENT, "path is NULL");
    ASSERT_FAILS_WITH(tops_npy_save(path, NULL), TOPS_INVALID_ARGUMENT, "tensor is NULL");
    ASSERT_FAILS_WITH(tops_safetensors_save(path, NULL), TOPS_INVALID_ARGUMENT, "tensor is NULL");
    tops_tensor junk;
    memset(&junk, 0, sizeof junk);
    ASSERT_FAILS_WITH(tops_safetensors_save(path, &junk), TOPS_INVALID_ARGUMENT, "was not made by");
    ASSERT_FAILS_WITH(tops_npy_save(path, &t), TOPS_UNSUPPORTED_FORMAT, "dequantize first");
    ASSERT_TRUE(!file_exists(path));

    ASSERT_OK(tops_safetensors_save(path, &t));
    ASSERT_FAILS_WITH(tops_safetensors_load(path, NULL), TOPS_INVALID_ARGUMENT, "out is NULL");
    ASSERT_FAILS_WITH(tops_npy_load(path, &u), TOPS_PARSE_ERROR, "magic");
    tmp_path(dir, sizeof dir, "no/such/dir/x.npy");
    ASSERT_FAILS_WITH(tops_npy_load(dir, &u), TOPS_IO_ERROR, "cannot open");
    ASSERT_FAILS_WITH(tops_safetensors_save(dir, &t), TOPS_IO_ERROR, "cannot create");
    ASSERT_FAILS_WITH(tops_npy_load(tmpdir, &u), TOPS_IO_ERROR, "not a regular file");
    ASSERT_FAILS_WITH(tops_safetensors_load(tmpdir, &u), TOPS_IO_ERROR, "not a regular file");
    ASSERT_FAILS_WITH(tops_safetensors_save(tmpdir, &t), TOPS_IO_ERROR, "is a directory");
    /* A full device: the write fails, is reported, and the device stays. */
    if (file_exists("/dev/full")) {
        ASSERT_FAILS_WITH(tops_safetensors_save("/dev/full", &t), TOPS_IO_ERROR, "/dev/full");
        ASSERT_TRUE(file_exists("/dev/full"));
    }
    /* A truncated file: the planes are read past its end. */
    size_t size;
    unsigned char *file = read_all(path, &size);
    FILE *fp = fopen(path, "wb");
    fwrite(file, 1, size - 3, fp);
    fclose(fp);
    ASSERT_FAILS_WITH(tops_safetensors_load(path, &u), TOPS_PARSE_ERROR, "inside the");
    free(file);
    tops_tensor_destroy(&t);
}

/* ---- outputs: whole or not at all -------------------------------------------- */

/* Files in tmpdir whose name has ".tmp-" in it: a temporary left behind. */
static int temporaries_left(void) {
    DIR *d = opendir(tmpdir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".tmp-")) n++;
    closedir(d);
    return n;
}

static int same_file_bytes(const char *path, const unsigned char *want, size_t want_size) {
    size_t size;
    unsigned char *got = read_all(path, &size);
    int same = got && size == want_size && same_bytes(got, want, size);
    free(got);
    return same;
}

/* Saves t to path in a child process whose file-size limit is `limit` bytes
   (SIGXFSZ ignored, so write() fails with EFBIG); the child exits 0 if the
   save failed with TOPS_IO_ERROR and a sentence naming the path and the
   error, 2 if it succeeded, 1 otherwise. */
static int save_under_limit(int safetensors, const char *path, const tops_tensor *t, rlim_t limit) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {limit, limit};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(3);
        tops_status st = safetensors ? tops_safetensors_save(path, t) : tops_npy_save(path, t);
        if (st == TOPS_OK) _exit(2);
        const char *e = tops_last_error();
        _exit(st == TOPS_IO_ERROR && strstr(e, path) && strstr(e, strerror(EFBIG)) && strstr(e, "unchanged") ? 0 : 1);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_save_fails_whole(void) {
    int64_t ext[2] = {64, 96}; /* 24 KiB of f32 */
    for (int safetensors = 0; safetensors < 2; safetensors++) {
        tops_tensor big, small;
        ASSERT_OK(tops_tensor_create(fmt("f32"), 2, ext, host, &big));
        fill_tensor(&big);
        int64_t small_ext[1] = {10};
        ASSERT_OK(tops_tensor_create(fmt("f32"), 1, small_ext, host, &small));
        fill_tensor(&small);
        char path[128];
        tmp_path(path, sizeof path, safetensors ? "old.safetensors" : "old.npy");
        tops_status (*save)(const char *, const tops_tensor *) = safetensors ? tops_safetensors_save : tops_npy_save;
        ASSERT_OK(save(path, &small));
        size_t old_size;
        unsigned char *old = read_all(path, &old_size);
        ASSERT_TRUE(old != NULL);
        /* A limit past the header: the write fails half-way through the data. */
        ASSERT_EQ_INT(save_under_limit(safetensors, path, &big, 8192), 0);
        ASSERT_TRUE(same_file_bytes(path, old, old_size));
        ASSERT_EQ_INT(temporaries_left(), 0);
        /* A limit below the header: it fails at the first flush. */
        ASSERT_EQ_INT(save_under_limit(safetensors, path, &big, 16), 0);
        ASSERT_TRUE(same_file_bytes(path, old, old_size));
        ASSERT_EQ_INT(temporaries_left(), 0);
        /* A new name: nothing is left at all. */
        char fresh[128];
        tmp_path(fresh, sizeof fresh, "fresh.bin");
        ASSERT_EQ_INT(save_under_limit(safetensors, fresh, &big, 8192), 0);
        ASSERT_TRUE(!file_exists(fresh));
        ASSERT_EQ_INT(temporaries_left(), 0);
        /* Without a limit the same call replaces the file. */
        ASSERT_OK(save(path, &big));
        ASSERT_TRUE(!same_file_bytes(path, old, old_size));
        tops_tensor back;
        ASSERT_OK(safetensors ? tops_safetensors_load(path, &back) : tops_npy_load(path, &back));
        assert_same_tensor(&big, &back, "replaced");
        tops_tensor_destroy(&back);
        ASSERT_EQ_INT(temporaries_left(), 0);
        remove(path);
        free(old);
        tops_tensor_destroy(&big);
        tops_tensor_destroy(&small);
    }
}

static unsigned file_mode(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (unsigned)(sb.st_mode & 07777) : 0xffffu;
}

static void test_save_targets(void) {
    tops_tensor t;
    int64_t ext[1] = {5};
    ASSERT_OK(tops_tensor_create(fmt("f32"), 1, ext, host, &t));
    fill_tensor(&t);
    char path[128], link[128], dangling[128], fifo[128], dir[128];
    tmp_path(path, sizeof path, "target.npy");
    tmp_path(link, sizeof link, "link.npy");
    tmp_path(dangling, sizeof dangling, "dangling.npy");
    tmp_path(fifo, sizeof fifo, "fifo.npy");
    tmp_path(dir, sizeof dir, "sub.npy");

    /* A new file gets 0666 less the umask, as fopen gives. */
    mode_t mask = umask(022);
    ASSERT_OK(tops_npy_save(path, &t));
    ASSERT_EQ_INT(file_mode(path), 0644);
    /* A replaced file keeps its mode. */
    ASSERT_EQ_INT(chmod(path, 0640), 0);
    ASSERT_OK(tops_npy_save(path, &t));
    ASSERT_EQ_INT(file_mode(path), 0640);
    umask(mask);

    /* A symbolic link: the file it names is replaced, the link stays. */
    ASSERT_EQ_INT(symlink("target.npy", link), 0);
    ASSERT_OK(tops_safetensors_save(link, &t));
    struct stat sb;
    ASSERT_TRUE(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
    tops_tensor back;
    ASSERT_OK(tops_safetensors_load(path, &back));
    tops_tensor_destroy(&back);
    ASSERT_EQ_INT(file_mode(path), 0640);
    /* A link to nothing is refused (and not replaced by a file). */
    ASSERT_EQ_INT(symlink("nowhere/x.npy", dangling), 0);
    ASSERT_FAILS_WITH(tops_npy_save(dangling, &t), TOPS_IO_ERROR, "symbolic link");
    ASSERT_TRUE(lstat(dangling, &sb) == 0 && S_ISLNK(sb.st_mode));

    /* Not regular files: refused at once, never opened. */
    ASSERT_EQ_INT(mkfifo(fifo, 0600), 0);
    alarm(10); /* a regression that blocks on the FIFO fails instead of hanging */
    ASSERT_FAILS_WITH(tops_npy_save(fifo, &t), TOPS_IO_ERROR, "is a FIFO");
    alarm(0);
    ASSERT_EQ_INT(mkdir(dir, 0700), 0);
    ASSERT_FAILS_WITH(tops_npy_save(dir, &t), TOPS_IO_ERROR, "is a directory");
    if (file_exists("/dev/null")) {
        ASSERT_FAILS_WITH(tops_npy_save("/dev/null", &t), TOPS_IO_ERROR, "is a character device");
        ASSERT_TRUE(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode));
    }
    /* A file this process may not write stays as it is (root may write anything). */
    if (geteuid() != 0) {
        size_t size;
        unsigned char *before = read_all(path, &size);
        ASSERT_EQ_INT(chmod(path, 0444), 0);
        ASSERT_FAILS_WITH(tops_npy_save(path, &t), TOPS_IO_ERROR, "cannot write");
        ASSERT_TRUE(same_file_bytes(path, before, size));
        free(before);
    }
    ASSERT_FAILS_WITH(tops_npy_save("", &t), TOPS_INVALID_ARGUMENT, "empty");
    ASSERT_EQ_INT(temporaries_left(), 0);
    remove(path);
    remove(link);
    remove(dangling);
    remove(fifo);
    rmdir(dir);
    tops_tensor_destroy(&t);
}

/* ---- inputs: regular files only ------------------------------------------------ */

static void test_load_non_regular(void) {
    char fifo[128], dir[128], sock_path[100];
    tmp_path(fifo, sizeof fifo, "in.fifo");
    tmp_path(dir, sizeof dir, "in.dir");
    tmp_path(sock_path, sizeof sock_path, "in.sock");
    tops_tensor t;
    ASSERT_EQ_INT(mkfifo(fifo, 0600), 0);
    ASSERT_EQ_INT(mkdir(dir, 0700), 0);
    alarm(10); /* a FIFO with no writer: a blocking open would wait forever */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ASSERT_FAILS_WITH(tops_npy_load(fifo, &t), TOPS_IO_ERROR, "is a FIFO, not a regular file");
    ASSERT_FAILS_WITH(tops_safetensors_load(fifo, &t), TOPS_IO_ERROR, "is a FIFO, not a regular file");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    alarm(0);
    ASSERT_TRUE((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec) < 1.0);
    ASSERT_FAILS_WITH(tops_npy_load(dir, &t), TOPS_IO_ERROR, "is a directory, not a regular file");
    if (file_exists("/dev/null"))
        ASSERT_FAILS_WITH(tops_npy_load("/dev/null", &t), TOPS_IO_ERROR, "is a character device");
    if (file_exists("/dev/zero")) /* endless: a reader that trusted it would never stop */
        ASSERT_FAILS_WITH(tops_safetensors_load("/dev/zero", &t), TOPS_IO_ERROR, "is a character device");
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd >= 0) {
        struct sockaddr_un addr;
        memset(&addr, 0, sizeof addr);
        addr.sun_family = AF_UNIX;
        snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock_path);
        if (bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0) {
            ASSERT_FAILS_WITH(tops_npy_load(sock_path, &t), TOPS_IO_ERROR, "is a socket, not a regular file");
            remove(sock_path);
        }
        close(fd);
    }
    remove(fifo);
    rmdir(dir);
}

int main(void) {
    rng = th_seed();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tops_test_io_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN_TEST(test_npy_round_trip);
    RUN_TEST(test_npy_header_text);
    RUN_TEST(test_npy_strided);
    RUN_TEST(test_npy_hostile_headers);
    RUN_TEST(test_npy_fuzz_loop);
    RUN_TEST(test_safetensors_round_trip);
    RUN_TEST(test_safetensors_slice);
    RUN_TEST(test_safetensors_hostile_headers);
    RUN_TEST(test_safetensors_fuzz_loop);
    RUN_TEST(test_errors);
    RUN_TEST(test_save_fails_whole);
    RUN_TEST(test_save_targets);
    RUN_TEST(test_load_non_regular);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    TEST_MAIN_END();
}
