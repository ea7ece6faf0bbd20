/* Model files (src/io/model*.c): safetensors and GGUF checkpoints opened,
   listed and viewed in place; every class of bad input a GGUF or
   safetensors loader has been caught by (size and count overflows, huge
   allocations from tiny files, type confusion, strings and offsets past the
   end, misaligned and overlapping data); every truncation of good files read
   from buffers that end at a guard page; the multi-tensor writer; the
   per-tensor scale of plain element formats. */
#include "harness.h"
#include "tensorops.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[64];
static void tmp_path(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", tmpdir, name); }

/* ---- a GGUF builder ---- */
typedef struct gb {
    unsigned char b[8192];
    size_t n;
} gb;
static void put(gb *g, const void *p, size_t n) {
    memcpy(g->b + g->n, p, n);
    g->n += n;
}
static void u32(gb *g, uint32_t v) { put(g, &v, 4); }
static void u64(gb *g, uint64_t v) { put(g, &v, 8); }
static void str(gb *g, const char *s) {
    u64(g, strlen(s));
    put(g, s, strlen(s));
}
static void zeros(gb *g, size_t n) {
    memset(g->b + g->n, 0, n);
    g->n += n;
}
static void pad(gb *g, size_t a) {
    while (g->n % a) g->b[g->n++] = 0;
}
static void header(gb *g, uint32_t version, uint64_t nt, uint64_t nkv) {
    g->n = 0;
    put(g, "GGUF", 4);
    u32(g, version);
    u64(g, nt);
    u64(g, nkv);
}

/* A good file: 4 key/values, f32 "a" ne=[4,3] (numpy [3, 4]) and q8_0
   "blk.0.q" ne=[32,2] (numpy [2, 32]). */
static void good_gguf(gb *g, uint32_t version) {
    header(g, version, 2, 4);
    str(g, "general.alignment"), u32(g, 4), u32(g, 32);
    str(g, "general.name"), u32(g, 8), str(g, "tiny");
    str(g, "arr"), u32(g, 9), u32(g, 5), u64(g, 3), u32(g, (uint32_t)-1), u32(g, 2), u32(g, 3);
    str(g, "toks"), u32(g, 9), u32(g, 8), u64(g, 2), str(g, "a"), str(g, "bc");
    str(g, "a"), u32(g, 2), u64(g, 4), u64(g, 3), u32(g, 0), u64(g, 0);
    str(g, "blk.0.q"), u32(g, 2), u64(g, 32), u64(g, 2), u32(g, 8), u64(g, 64);
    pad(g, 32);
    for (int i = 0; i < 12; i++) {
        float f = (float)i - 5.5f;
        put(g, &f, 4);
    }
    pad(g, 32);
    for (int r = 0; r < 2; r++) {
        uint16_t d = 0x3800; /* f16 0.5 */
        put(g, &d, 2);
        for (int j = 0; j < 32; j++) {
            int8_t q = (int8_t)(j - 16 + r);
            put(g, &q, 1);
        }
    }
}

/* A copy of n bytes that ends right before a page nobody may read. */
typedef struct guarded {
    unsigned char *map;
    size_t len;
    unsigned char *data;
} guarded;
static guarded guard(const void *src, size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), body = (n + page - 1) / page * page + page;
    guarded g;
    g.len = body + page;
    g.map = mmap(NULL, g.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mprotect(g.map + body, page, PROT_NONE);
    g.data = g.map + body - n;
    memcpy(g.data, src, n);
    return g;
}
static void unguard(guarded *g) { munmap(g->map, g->len); }

static tops_status open_guarded(const void *p, size_t n, tops_model **m) {
    guarded g = guard(p, n);
    tops_status st = tops_model_open_buffer(g.data, n, m);
    if (st == TOPS_OK) tops_model_close(*m);
    unguard(&g);
    return st;
}

static void test_gguf_good(void) {
    for (uint32_t version = 2; version <= 3; version++) {
        gb g;
        good_gguf(&g, version);
        tops_model *m;
        ASSERT_OK(tops_model_open_buffer(g.b, g.n, &m));
        ASSERT_EQ_INT(tops_model_get_kind(m), TOPS_MODEL_GGUF);
        ASSERT_EQ_INT(tops_model_count(m), 2);
        ASSERT_EQ_INT(tops_model_meta_count(m), 4);
        int64_t i;
        tops_model_tensor_info in;
        ASSERT_OK(tops_model_find(m, "a", &i));
        ASSERT_OK(tops_model_info(m, i, &in));
        ASSERT_EQ_STR(in.dtype, "F32");
        ASSERT_EQ_INT(in.rank, 2);
        ASSERT_EQ_INT(in.shape[0], 3); /* numpy order: ne reversed */
        ASSERT_EQ_INT(in.shape[1], 4);
        ASSERT_EQ_INT(in.bytes, 48);
        tops_tensor t;
        ASSERT_OK(tops_model_tensor(m, "a", &t));
        ASSERT_TRUE(t.data == g.b + in.offset); /* in place, no copy */
        ASSERT_EQ_INT(t.extent[0], 3);
        ASSERT_NEAR(((const float *)t.data)[5], -0.5, 0);
        ASSERT_OK(tops_model_tensor(m, "blk.0.q", &t));
        ASSERT_EQ_INT(t.format.id, TOPS_FMT_Q8_0);
        ASSERT_EQ_INT(t.extent[0], 2);
        ASSERT_EQ_INT(t.extent[1], 32);
        tops_tensor dec;
        int64_t ext[2] = {2, 32};
        ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F32), 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, &dec));
        ASSERT_OK(tops_dequantize(&t, &dec));
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < 32; j++) ASSERT_NEAR(((float *)dec.data)[r * 32 + j], 0.5 * (j - 16 + r), 0);
        tops_tensor_destroy(&dec);
        const char *key;
        tops_meta_value v;
        ASSERT_OK(tops_model_meta_find(m, "general.name", &i));
        ASSERT_OK(tops_model_meta(m, i, &key, &v));
        ASSERT_EQ_STR(v.string, "tiny");
        ASSERT_OK(tops_model_meta_find(m, "arr", &i));
        ASSERT_OK(tops_model_meta(m, i, &key, &v));
        ASSERT_EQ_INT(v.type, TOPS_META_ARRAY);
        ASSERT_EQ_INT(v.array_count, 3);
        ASSERT_OK(tops_model_meta_item(m, i, 0, &v));
        ASSERT_EQ_INT(v.i, -1);
        ASSERT_STATUS(tops_model_meta_item(m, i, 3, &v), TOPS_INVALID_ARGUMENT);
        ASSERT_OK(tops_model_meta_find(m, "toks", &i));
        ASSERT_OK(tops_model_meta_item(m, i, 1, &v));
        ASSERT_EQ_INT(v.string_len, 2);
        ASSERT_TRUE(memcmp(v.string, "bc", 2) == 0);
        ASSERT_FAILS_WITH(tops_model_tensor(m, "b", &t), TOPS_NOT_FOUND, "no tensor \"b\"");
        ASSERT_FAILS_WITH(tops_model_info(m, 2, &in), TOPS_INVALID_ARGUMENT, "index 2");
        tops_model_close(m);
    }
}

/* Rewrites the u64 at byte `at` of a good file and expects a sentence. */
static void expect_bad(const gb *g, const char *needle, tops_status want) {
    tops_model *m = (tops_model *)(uintptr_t)0x5a5a; /* poisoned: must stay */
    tops_status st = open_guarded(g->b, g->n, &m);
    if (st != want) TH_FAIL_AT("\"%s\": got %s (%s)", needle, tops_status_str(st), tops_last_error());
    else if (!strstr(tops_last_error(), needle)) TH_FAIL_AT("\"%s\" not in \"%s\"", needle, tops_last_error());
    if (st != TOPS_OK && m != (tops_model *)(uintptr_t)0x5a5a) TH_FAIL_AT("out changed on failure");
}

static void test_gguf_versions(void) {
    gb g;
    good_gguf(&g, 1);
    expect_bad(&g, "version 1", TOPS_UNSUPPORTED_FORMAT);
    good_gguf(&g, 7);
    expect_bad(&g, "version 7", TOPS_PARSE_ERROR);
    good_gguf(&g, 0x03000000u);
    expect_bad(&g, "big-endian", TOPS_UNSUPPORTED_FORMAT);
}

/* CVE class: counts and sizes that overflow or ask for huge allocations
   from a tiny file. */
static void test_gguf_counts_and_sizes(void) {
    gb g;
    header(&g, 3, UINT64_MAX, 0);
    expect_bad(&g, "cannot fit", TOPS_PARSE_ERROR);
    header(&g, 3, 0, UINT64_MAX / 13 + 1);
    expect_bad(&g, "cannot fit", TOPS_PARSE_ERROR);
    header(&g, 3, (1ull << 62), (1ull << 62));
    expect_bad(&g, "cannot fit", TOPS_PARSE_ERROR);
    /* an array of 2^40 u32 in a 60-byte file */
    header(&g, 3, 0, 1);
    str(&g, "k"), u32(&g, 9), u32(&g, 4), u64(&g, 1ull << 40);
    expect_bad(&g, "needs more bytes", TOPS_PARSE_ERROR);
    /* count * size wrapping 2^64 */
    header(&g, 3, 0, 1);
    str(&g, "k"), u32(&g, 9), u32(&g, 10), u64(&g, (UINT64_MAX / 8) + 2);
    expect_bad(&g, "needs more bytes", TOPS_PARSE_ERROR);
    header(&g, 3, 0, 1);
    str(&g, "k"), u32(&g, 9), u32(&g, 8), u64(&g, UINT64_MAX);
    expect_bad(&g, "strings needs more bytes", TOPS_PARSE_ERROR);
    /* tensor extents whose product overflows */
    header(&g, 3, 1, 0);
    str(&g, "t"), u32(&g, 2), u64(&g, 1ull << 40), u64(&g, 1ull << 40), u32(&g, 0), u64(&g, 0);
    expect_bad(&g, "larger than 2^64", TOPS_PARSE_ERROR);
    header(&g, 3, 1, 0);
    str(&g, "t"), u32(&g, 1), u64(&g, UINT64_MAX), u32(&g, 0), u64(&g, 0);
    expect_bad(&g, "past 2^63", TOPS_PARSE_ERROR);
    header(&g, 3, 1, 0);
    str(&g, "t"), u32(&g, 5), u64(&g, 1), u64(&g, 1), u64(&g, 1), u64(&g, 1), u64(&g, 1), u32(&g, 0), u64(&g, 0);
    expect_bad(&g, "5 dimensions", TOPS_PARSE_ERROR);
    header(&g, 3, 1, 0);
    str(&g, "t"), u32(&g, 1), u64(&g, 33), u32(&g, 8), u64(&g, 0);
    expect_bad(&g, "not a multiple of its 32-element blocks", TOPS_PARSE_ERROR);
}

/* CVE class: strings (keys, values, names) running past the end. */
static void test_gguf_strings(void) {
    gb g;
    header(&g, 3, 0, 1);
    u64(&g, 1000), put(&g, "k", 1), zeros(&g, 40);
    expect_bad(&g, "1000 bytes long but only 41 bytes follow", TOPS_PARSE_ERROR);
    header(&g, 3, 0, 1);
    u64(&g, UINT64_MAX), put(&g, "k", 1), zeros(&g, 40);
    expect_bad(&g, "bytes long", TOPS_PARSE_ERROR);
    header(&g, 3, 0, 1);
    str(&g, "k"), u32(&g, 8), u64(&g, UINT64_MAX - 3);
    expect_bad(&g, "bytes long", TOPS_PARSE_ERROR);
    header(&g, 3, 0, 1);
    str(&g, "k"), u32(&g, 9), u32(&g, 8), u64(&g, 2), str(&g, "a"), u64(&g, 99);
    expect_bad(&g, "an array string", TOPS_PARSE_ERROR);
    header(&g, 3, 1, 0);
    u64(&g, 400), put(&g, "name", 4), zeros(&g, 40);
    expect_bad(&g, "tensor name", TOPS_PARSE_ERROR);
    header(&g, 3, 0, 1);
    u64(&g, 3), put(&g, "a\0b", 3), u32(&g, 0), put(&g, "x", 1);
    expect_bad(&g, "NUL byte", TOPS_PARSE_ERROR);
    header(&g, 3, 0, 1);
    u64(&g, 0), u32(&g, 0), put(&g, "x", 1);
    expect_bad(&g, "is empty", TOPS_PARSE_ERROR);
}

/* CVE class: type confusion in metadata and tensor types. */
static void test_gguf_types(void) {
    gb g;
    header(&g, 3, 0, 1);
    str(&g, "k"), u32(&g, 99), u64(&g, 0);
    expect_bad(&g, "value type 99", TOPS_PARSE_ERROR);
    header(&g, 3, 0, 1);
    str(&g, "general.alignment"), u32(&g, 8), str(&g, "32");
    expect_bad(&g, "must be UINT32", TOPS_PARSE_ERROR);
    header(&g, 3, 0, 1);
    str(&g, "general.alignment"), u32(&g, 10), u64(&g, 32);
    expect_bad(&g, "must be UINT32", TOPS_PARSE_ERROR);
    header(&g, 3, 0, 1);
    str(&g, "general.alignment"), u32(&g, 4), u32(&g, 24);
    expect_bad(&g, "not a power of two", TOPS_PARSE_ERROR);
    header(&g, 3, 0, 1);
    str(&g, "general.alignment"), u32(&g, 4), u32(&g, 0);
    expect_bad(&g, "not a power of two", TOPS_PARSE_ERROR);
    header(&g, 3, 0, 1);
    str(&g, "b"), u32(&g, 7), put(&g, "\x02", 1);
    expect_bad(&g, "must be 0 or 1", TOPS_PARSE_ERROR);
    header(&g, 3, 0, 1);
    str(&g, "k"), u32(&g, 9), u32(&g, 9), u64(&g, 1), u32(&g, 4), u64(&g, 0);
    expect_bad(&g, "nested arrays", TOPS_PARSE_ERROR);
    header(&g, 3, 0, 1);
    str(&g, "k"), u32(&g, 9), u32(&g, 13), u64(&g, 0);
    expect_bad(&g, "element type 13", TOPS_PARSE_ERROR);
    header(&g, 3, 1, 0);
    str(&g, "t"), u32(&g, 1), u64(&g, 32), u32(&g, 99), u64(&g, 0);
    expect_bad(&g, "type 99, which is not a ggml type", TOPS_PARSE_ERROR);
    header(&g, 3, 1, 0);
    str(&g, "t"), u32(&g, 1), u64(&g, 32), u32(&g, 4), u64(&g, 0);
    expect_bad(&g, "which ggml removed", TOPS_PARSE_ERROR);
    header(&g, 3, 2, 0);
    str(&g, "a"), u32(&g, 1), u64(&g, 1), u32(&g, 0), u64(&g, 0);
    str(&g, "a"), u32(&g, 1), u64(&g, 1), u32(&g, 0), u64(&g, 32);
    pad(&g, 32);
    memset(g.b + g.n, 0, 64);
    g.n += 64;
    expect_bad(&g, "names tensor \"a\" twice", TOPS_PARSE_ERROR);
    header(&g, 3, 0, 2);
    str(&g, "k"), u32(&g, 0), put(&g, "x", 1);
    str(&g, "k"), u32(&g, 0), put(&g, "x", 1);
    expect_bad(&g, "metadata key \"k\" twice", TOPS_PARSE_ERROR);
    /* a type tensorops does not decode is listed, and named when asked for */
    header(&g, 3, 1, 0);
    str(&g, "k4"), u32(&g, 2), u64(&g, 256), u64(&g, 1), u32(&g, 12), u64(&g, 0);
    pad(&g, 32);
    memset(g.b + g.n, 0, 144);
    g.n += 144;
    tops_model *m;
    ASSERT_OK(tops_model_open_buffer(g.b, g.n, &m));
    tops_model_tensor_info in;
    ASSERT_OK(tops_model_info(m, 0, &in));
    ASSERT_EQ_STR(in.dtype, "Q4_K");
    ASSERT_EQ_INT(in.loadable, 0);
    tops_tensor t;
    ASSERT_FAILS_WITH(tops_model_tensor(m, "k4", &t), TOPS_UNSUPPORTED_FORMAT, "GGUF type Q4_K");
    tops_model_close(m);
}

/* CVE class: data offsets misaligned, out of the file, overlapping. */
static void test_gguf_offsets(void) {
    gb g;
    header(&g, 3, 1, 0);
    str(&g, "t"), u32(&g, 1), u64(&g, 4), u32(&g, 0), u64(&g, 4);
    pad(&g, 32);
    memset(g.b + g.n, 0, 64);
    g.n += 64;
    expect_bad(&g, "not a multiple of the alignment", TOPS_PARSE_ERROR);
    header(&g, 3, 1, 0);
    str(&g, "t"), u32(&g, 1), u64(&g, 4), u32(&g, 0), u64(&g, 1ull << 62);
    pad(&g, 32);
    expect_bad(&g, "lies past", TOPS_PARSE_ERROR);
    header(&g, 3, 1, 0);
    str(&g, "t"), u32(&g, 1), u64(&g, 64), u32(&g, 0), u64(&g, 0);
    pad(&g, 32);
    memset(g.b + g.n, 0, 100);
    g.n += 100;
    expect_bad(&g, "lies past", TOPS_PARSE_ERROR);
    header(&g, 3, 2, 0);
    str(&g, "a"), u32(&g, 1), u64(&g, 16), u32(&g, 0), u64(&g, 0);
    str(&g, "b"), u32(&g, 1), u64(&g, 16), u32(&g, 0), u64(&g, 32);
    pad(&g, 32);
    memset(g.b + g.n, 0, 128);
    g.n += 128;
    expect_bad(&g, "overlaps", TOPS_PARSE_ERROR);
    header(&g, 3, 1, 0);
    str(&g, "t"), u32(&g, 1), u64(&g, 4), u32(&g, 0), u64(&g, 0);
    expect_bad(&g, "past the end", TOPS_PARSE_ERROR); /* no data section at all */
}

/* Every prefix of good files, read from a buffer ending at a guard page:
   a clean failure each time (ASan and the guard catch any over-read). */
static void test_truncations(void) {
    gb g;
    good_gguf(&g, 3);
    for (size_t n = 0; n < g.n; n++) {
        tops_model *m;
        tops_status st = open_guarded(g.b, n, &m);
        if (st != TOPS_PARSE_ERROR) TH_FAIL_AT("gguf prefix %zu: %s (%s)", n, tops_status_str(st), tops_last_error());
    }
    char path[256];
    tmp_path(path, sizeof path, "t.safetensors");
    float w[6] = {1, 2, 3, 4, 5, 6};
    tops_tensor t;
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = tops_format_of(TOPS_DT_F32);
    d.rank = 2, d.extent[0] = 2, d.extent[1] = 3, d.data = w;
    ASSERT_OK(tops_tensor_view(&d, &t));
    tops_named_tensor nt[1] = {{"x", &t, NULL, 0, NULL, NULL}};
    ASSERT_OK(tops_model_save(path, nt, 1, NULL, 0));
    FILE *f = fopen(path, "rb");
    unsigned char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    tops_model *m;
    ASSERT_OK(open_guarded(buf, n, &m));
    for (size_t k = 0; k < n; k++) {
        tops_status st = open_guarded(buf, k, &m);
        if (st != TOPS_PARSE_ERROR) TH_FAIL_AT("safetensors prefix %zu: %s (%s)", k, tops_status_str(st), tops_last_error());
    }
}

/* A safetensors file from hand-made JSON. */
static size_t st_file(unsigned char *out, const char *json, size_t data) {
    size_t n = strlen(json), padded = (n + 7) / 8 * 8;
    uint64_t len = padded;
    memcpy(out, &len, 8);
    memcpy(out + 8, json, n);
    memset(out + 8 + n, ' ', padded - n);
    for (size_t i = 0; i < data; i++) out[8 + padded + i] = (unsigned char)(i * 7);
    return 8 + padded + data;
}

static void expect_st(const char *json, size_t data, tops_status want, const char *needle) {
    unsigned char buf[4096];
    size_t n = st_file(buf, json, data);
    tops_model *m = NULL;
    tops_status st = open_guarded(buf, n, &m);
    if (st != want) TH_FAIL_AT("%s: got %s (%s)", json, tops_status_str(st), tops_last_error());
    else if (needle && !strstr(tops_last_error(), needle)) TH_FAIL_AT("\"%s\" not in \"%s\"", needle, tops_last_error());
}

static void test_safetensors_any(void) {
    /* no __metadata__, any names, a rank-0 tensor, a dtype without a view */
    unsigned char buf[4096];
    size_t n = st_file(buf,
                       "{\"model.layers.0.w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                       "\"pos\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[16,24]},"
                       "\"s\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[24,26]}}",
                       26);
    tops_model *m;
    ASSERT_OK(tops_model_open_buffer(buf, n, &m));
    ASSERT_EQ_INT(tops_model_count(m), 3);
    ASSERT_EQ_INT(tops_model_meta_count(m), 0);
    tops_tensor t;
    ASSERT_OK(tops_model_tensor(m, "model.layers.0.w", &t));
    ASSERT_TRUE((const unsigned char *)t.data == buf + n - 26);
    ASSERT_OK(tops_model_tensor(m, "s", &t));
    ASSERT_EQ_INT(t.rank, 1);
    ASSERT_EQ_INT(t.extent[0], 1);
    ASSERT_FAILS_WITH(tops_model_tensor(m, "pos", &t), TOPS_UNSUPPORTED_FORMAT, "dtype I64");
    tops_model_close(m);

    expect_st("{\"a\":{\"dtype\":\"X9\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, TOPS_PARSE_ERROR, "not a safetensors dtype");
    expect_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
              "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 3, TOPS_PARSE_ERROR, "overlaps");
    expect_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 3, TOPS_PARSE_ERROR, "hole");
    expect_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 3, TOPS_PARSE_ERROR, "after the last");
    expect_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, TOPS_PARSE_ERROR, "take 8");
    expect_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
              TOPS_PARSE_ERROR, "2^64 bits");
    expect_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", 4, TOPS_PARSE_ERROR,
              "non-negative integer");
    expect_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e300]}}", 4, TOPS_PARSE_ERROR, "data_offsets");
    expect_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
              "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2, TOPS_PARSE_ERROR, "twice");
    expect_st("{\"__metadata__\":{\"k\":1}}", 0, TOPS_PARSE_ERROR, "not a string");
    expect_st("{\"a\":[1]}", 0, TOPS_PARSE_ERROR, "not a JSON object");
    expect_st("{\"a\":", 0, TOPS_PARSE_ERROR, "not valid JSON");
    expect_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
              TOPS_UNSUPPORTED_FORMAT, "9 dimensions");
    expect_st("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, TOPS_OK, NULL);
    /* a tensor whose bytes are not aligned to its elements is listed, not viewed */
    n = st_file(buf, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1,5]}}", 5);
    guarded g = guard(buf, n);
    ASSERT_OK(tops_model_open_buffer(g.data, n, &m));
    if ((uintptr_t)(g.data + n - 4) % 4) ASSERT_FAILS_WITH(tops_model_tensor(m, "b", &t), TOPS_UNSUPPORTED_FORMAT, "not on a multiple");
    tops_model_close(m);
    unguard(&g);
    /* a tensorops plane set must be whole and of the right dtypes */
    expect_st("{\"__metadata__\":{\"w.format\":\"int4-g32\",\"w.shape\":\"[1, 32]\"},"
              "\"w\":{\"dtype\":\"U8\",\"shape\":[1,16],\"data_offsets\":[0,16]}}", 16, TOPS_PARSE_ERROR,
              "lacks tensor \"w.scales\"");
    expect_st("{\"__metadata__\":{\"w.format\":\"int4-g32\",\"w.shape\":\"[1, 32]\"},"
              "\"w.scales\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[0,4]},"
              "\"w\":{\"dtype\":\"U8\",\"shape\":[1,16],\"data_offsets\":[4,20]}}", 20, TOPS_PARSE_ERROR, "must be F16");
    expect_st("{\"__metadata__\":{\"x.format\":\"int4-g32\",\"x.shape\":\"[1, 32]\"}}", 0, TOPS_PARSE_ERROR,
              "names no tensor");
}

static void fill_f32(tops_tensor *t, float amp, unsigned seed) {
    float *p = t->data;
    for (int64_t i = 0; i < tops_tensor_numel(t); i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = amp * ((float)(seed >> 8) / 16777216.0f - 0.5f);
    }
}

/* tops_model_save writes plain, quantized and raw tensors; tops_model reads
   them back whole, planes included; tops_safetensors_save's files stay readable. */
static void test_save_and_reopen(void) {
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    int64_t ext[2] = {3, 64};
    tops_tensor w, q, e;
    tops_format f4, fe;
    ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F32), 2, ext, host, &w));
    fill_f32(&w, 2000.0f, 7);
    ASSERT_OK(tops_format_from_name("int4-g32", &f4));
    ASSERT_OK(tops_format_from_name("e4m3", &fe));
    ASSERT_OK(tops_tensor_create(f4, 2, ext, host, &q));
    ASSERT_OK(tops_tensor_create(fe, 2, ext, host, &e));
    tops_quantize_opts opts = {0, 1};
    ASSERT_OK(tops_quantize(&w, &q, &opts));
    ASSERT_OK(tops_quantize(&w, &e, &opts));
    ASSERT_TRUE(e.tensor_scale > 1.0f);
    int64_t pos[1] = {3};
    int64_t ids[3] = {7, 8, 9};
    tops_named_tensor nt[4] = {{"plain", &w, NULL, 0, NULL, NULL},
                               {"model.q", &q, NULL, 0, NULL, NULL},
                               {"fp8", &e, NULL, 0, NULL, NULL},
                               {"ids", NULL, "I64", 1, pos, ids}};
    const char *meta[2] = {"format", "pt"};
    char path[256];
    tmp_path(path, sizeof path, "multi.safetensors");
    ASSERT_OK(tops_model_save(path, nt, 4, meta, 1));
    tops_model *m;
    ASSERT_OK(tops_model_open(path, &m));
    ASSERT_EQ_INT(tops_model_count(m), 5); /* model.q.scales too */
    tops_tensor v;
    ASSERT_OK(tops_model_tensor(m, "model.q", &v));
    ASSERT_EQ_INT(v.format.id, TOPS_FMT_INT4_G);
    ASSERT_TRUE(memcmp(v.data, q.data, 3 * 32) == 0);
    ASSERT_TRUE(memcmp(v.scales.data, q.scales.data, 3 * 2 * 2) == 0);
    ASSERT_OK(tops_model_tensor(m, "fp8", &v));
    ASSERT_EQ_INT(v.format.id, TOPS_FMT_E4M3);
    ASSERT_NEAR(v.tensor_scale, e.tensor_scale, 0);
    ASSERT_OK(tops_model_tensor(m, "plain", &v));
    ASSERT_TRUE(memcmp(v.data, w.data, 3 * 64 * 4) == 0);
    int64_t i;
    tops_model_tensor_info in;
    ASSERT_OK(tops_model_find(m, "model.q.scales", &i));
    ASSERT_OK(tops_model_info(m, i, &in));
    ASSERT_EQ_STR(in.plane_of, "model.q");
    ASSERT_OK(tops_model_find(m, "ids", &i));
    ASSERT_OK(tops_model_info(m, i, &in));
    ASSERT_TRUE(memcmp(in.data, ids, 24) == 0);
    tops_model_close(m);
    /* a plane name that clashes with a tensor: refused, the file unchanged */
    struct stat before, after;
    stat(path, &before);
    tops_named_tensor clash[2] = {{"a", &q, NULL, 0, NULL, NULL}, {"a.scales", &w, NULL, 0, NULL, NULL}};
    ASSERT_FAILS_WITH(tops_model_save(path, clash, 2, NULL, 0), TOPS_INVALID_ARGUMENT, "\"a.scales\"");
    stat(path, &after);
    ASSERT_EQ_INT(before.st_ino, after.st_ino);
    tops_named_tensor dup[2] = {{"a", &w, NULL, 0, NULL, NULL}, {"a", &w, NULL, 0, NULL, NULL}};
    ASSERT_STATUS(tops_model_save(path, dup, 2, NULL, 0), TOPS_INVALID_ARGUMENT);
    tops_named_tensor reserved[1] = {{"__metadata__", &w, NULL, 0, NULL, NULL}};
    ASSERT_STATUS(tops_model_save(path, reserved, 1, NULL, 0), TOPS_INVALID_ARGUMENT);
    /* the single-tensor files of tops_safetensors_save: "weight" whole */
    tmp_path(path, sizeof path, "one.safetensors");
    ASSERT_OK(tops_safetensors_save(path, &q));
    ASSERT_OK(tops_model_open(path, &m));
    ASSERT_OK(tops_model_tensor(m, "weight", &v));
    ASSERT_EQ_INT(v.format.id, TOPS_FMT_INT4_G);
    ASSERT_TRUE(memcmp(v.scales.data, q.scales.data, 12) == 0);
    tops_model_close(m);
    tops_tensor_destroy(&w);
    tops_tensor_destroy(&q);
    tops_tensor_destroy(&e);
}

/* Plain element formats: scale_from_data puts the largest weight on the
   largest code; without it they saturate. */
static void test_scale_from_data(void) {
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    int64_t ext[2] = {4, 40};
    static const char *const names[] = {"e4m3", "e5m2", "e2m1", "i8", "i4"};
    static const double top[] = {448, 57344, 6, 127, 7};
    for (size_t k = 0; k < 5; k++) {
        tops_tensor w, q, dec;
        tops_format f;
        ASSERT_OK(tops_format_from_name(names[k], &f));
        ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F32), 2, ext, host, &w));
        fill_f32(&w, 1.0e6f, 3);
        ((float *)w.data)[5] = 7.0e5f;
        ((float *)w.data)[6] = NAN; /* left out of amax */
        ASSERT_OK(tops_tensor_create(f, 2, ext, host, &q));
        ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F32), 2, ext, host, &dec));
        ASSERT_OK(tops_quantize(&w, &q, NULL));
        ASSERT_NEAR(q.tensor_scale, 1.0, 0);
        tops_quantize_opts opts = {0, 1};
        ASSERT_OK(tops_quantize(&w, &q, &opts));
        ASSERT_NEAR(q.tensor_scale, 7.0e5 / top[k], 7.0e5 / top[k] * 1e-6);
        ASSERT_OK(tops_dequantize(&q, &dec));
        ASSERT_NEAR(((float *)dec.data)[5], 7.0e5, 7.0e5 * 1e-6);
        tops_tensor_destroy(&w);
        tops_tensor_destroy(&q);
        tops_tensor_destroy(&dec);
    }
}

static void test_null_arguments(void) {
    tops_model *m = NULL;
    tops_tensor t;
    tops_model_tensor_info in;
    ASSERT_STATUS(tops_model_open(NULL, &m), TOPS_INVALID_ARGUMENT);
    ASSERT_STATUS(tops_model_open("/nonexistent/x.gguf", NULL), TOPS_INVALID_ARGUMENT);
    ASSERT_STATUS(tops_model_open("/nonexistent/x.gguf", &m), TOPS_IO_ERROR);
    ASSERT_STATUS(tops_model_open("/", &m), TOPS_IO_ERROR);
    ASSERT_STATUS(tops_model_open_buffer(NULL, 5, &m), TOPS_INVALID_ARGUMENT);
    ASSERT_STATUS(tops_model_open_buffer("", 0, &m), TOPS_PARSE_ERROR);
    ASSERT_STATUS(tops_model_tensor(NULL, "a", &t), TOPS_INVALID_ARGUMENT);
    ASSERT_STATUS(tops_model_info(NULL, 0, &in), TOPS_INVALID_ARGUMENT);
    ASSERT_STATUS(tops_model_save(NULL, NULL, 0, NULL, 0), TOPS_INVALID_ARGUMENT);
    ASSERT_EQ_INT(tops_model_count(NULL), 0);
    tops_model_close(NULL);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tops_model_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN_TEST(test_gguf_good);
    RUN_TEST(test_gguf_versions);
    RUN_TEST(test_gguf_counts_and_sizes);
    RUN_TEST(test_gguf_strings);
    RUN_TEST(test_gguf_types);
    RUN_TEST(test_gguf_offsets);
    RUN_TEST(test_truncations);
    RUN_TEST(test_safetensors_any);
    RUN_TEST(test_save_and_reopen);
    RUN_TEST(test_scale_from_data);
    RUN_TEST(test_null_arguments);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) return 1;
    TEST_MAIN_END();
}
