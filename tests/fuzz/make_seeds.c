/* Writes the seed corpus of the fuzz targets: small .npy files and one
   small safetensors file per kind of plane layout, made by the library's
   own writers (so the seeds follow the writers when they change); for the
   model reader, multi-tensor safetensors files from tops_model_save and
   small GGUF files (v2 and v3: every value type, an array of strings, each
   tensor type tensorops views and one it does not).
   usage: fuzz_make_seeds DIR   (writes DIR/npy/, DIR/safetensors/, DIR/gguf/,
                                 DIR/model_safetensors/) */
#include "tensorops.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static unsigned long long state = 0x9e3779b97f4a7c15ull;
static unsigned char next_byte(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (unsigned char)state;
}

static void fill(void *p, size_t n) {
    for (size_t i = 0; i < n; i++) ((unsigned char *)p)[i] = next_byte();
}

static size_t plane_bytes(const tops_plane *p, int rank) {
    if (!p->data) return 0;
    size_t n = (size_t)(tops_dtype_bits(p->dtype) + 7) / 8;
    for (int d = 0; d < rank; d++) n *= (size_t)p->extent[d];
    return n;
}

static int make(const char *dir, const char *kind, const char *format, int rank, int64_t a, int64_t b) {
    tops_format f;
    tops_tensor t;
    int64_t ext[2] = {a, b};
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    if (tops_format_from_name(format, &f) != TOPS_OK || tops_tensor_create(f, rank, ext, host, &t) != TOPS_OK) {
        fprintf(stderr, "fuzz_make_seeds: %s\n", tops_last_error());
        return 1;
    }
    size_t span;
    tops_tensor_data_span(&t, &span);
    fill(t.data, span);
    if (f.id == TOPS_FMT_F32) { /* finite values keep the seed readable */
        for (size_t i = 0; i < span / 4; i++) ((float *)t.data)[i] = (float)i * 0.25f - 1.0f;
    }
    fill(t.scales.data, plane_bytes(&t.scales, rank));
    fill(t.bias.data, plane_bytes(&t.bias, rank));
    fill(t.codebook.data, plane_bytes(&t.codebook, rank));
    if (f.id == TOPS_FMT_NVFP4) t.tensor_scale = 2688.0f;
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s-%d.%s", dir, kind, format, rank, kind);
    tops_status st = strcmp(kind, "npy") == 0 ? tops_npy_save(path, &t) : tops_safetensors_save(path, &t);
    tops_tensor_destroy(&t);
    if (st != TOPS_OK) {
        fprintf(stderr, "fuzz_make_seeds: %s\n", tops_last_error());
        return 1;
    }
    return 0;
}

/* ---- model seeds ---- */

typedef struct gbuf {
    unsigned char b[4096];
    size_t n;
} gbuf;
static void g_put(gbuf *g, const void *p, size_t n) {
    memcpy(g->b + g->n, p, n);
    g->n += n;
}
static void g_u32(gbuf *g, uint32_t v) { g_put(g, &v, 4); }
static void g_u64(gbuf *g, uint64_t v) { g_put(g, &v, 8); }
static void g_str(gbuf *g, const char *s) {
    g_u64(g, strlen(s));
    g_put(g, s, strlen(s));
}

/* One GGUF file: the value types, then tensors of the given ggml types
   (32 x 2 elements each, blocks filled with bytes of the generator). */
static int make_gguf(const char *dir, const char *name, uint32_t version, const uint32_t *types, const int *sizes,
                     int count) {
    gbuf g = {{0}, 0};
    g_put(&g, "GGUF", 4);
    g_u32(&g, version);
    g_u64(&g, (uint64_t)count);
    g_u64(&g, 6);
    g_str(&g, "general.alignment"), g_u32(&g, 4), g_u32(&g, 32);
    g_str(&g, "general.name"), g_u32(&g, 8), g_str(&g, "seed");
    g_str(&g, "f"), g_u32(&g, 6), g_u32(&g, 0x3f800000u);
    g_str(&g, "b"), g_u32(&g, 7), g_put(&g, "\1", 1);
    g_str(&g, "i"), g_u32(&g, 9), g_u32(&g, 5), g_u64(&g, 2), g_u32(&g, 1), g_u32(&g, 2);
    g_str(&g, "s"), g_u32(&g, 9), g_u32(&g, 8), g_u64(&g, 2), g_str(&g, "a"), g_str(&g, "bc");
    uint64_t off = 0;
    for (int t = 0; t < count; t++) {
        char tn[16];
        snprintf(tn, sizeof tn, "t%d", t);
        g_str(&g, tn);
        g_u32(&g, 2), g_u64(&g, types[t] == 12 ? 256 : 32), g_u64(&g, 2), g_u32(&g, types[t]), g_u64(&g, off);
        off += (uint64_t)(2 * sizes[t] + 31) / 32 * 32;
    }
    while (g.n % 32) g.b[g.n++] = 0;
    for (int t = 0; t < count; t++) {
        size_t n = (size_t)(2 * sizes[t] + 31) / 32 * 32;
        fill(g.b + g.n, n);
        if (types[t] == 0) /* finite f32 values */
            for (size_t k = 0; k < n / 4; k++) {
                float f = (float)k * 0.5f - 3.0f;
                memcpy(g.b + g.n + 4 * k, &f, 4);
            }
        g.n += n;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/gguf/%s.gguf", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(g.b, 1, g.n, fp) != g.n || fclose(fp) != 0) {
        fprintf(stderr, "fuzz_make_seeds: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

static int make_model_seeds(const char *dir) {
    int bad = 0;
    static const uint32_t types[] = {0, 1, 30, 2, 3, 8, 39, 24};
    static const int sizes[] = {128, 64, 64, 18, 20, 34, 17, 32};
    bad |= make_gguf(dir, "v3-views", 3, types, sizes, 8);
    static const uint32_t k4[] = {12, 2};
    static const int k4s[] = {144, 18};
    bad |= make_gguf(dir, "v2-q4k", 2, k4, k4s, 2);
    /* a checkpoint of plain, quantized and raw tensors */
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    int64_t ext[2] = {2, 32};
    tops_tensor w, q, e;
    tops_format f4, fe;
    if (tops_format_from_name("int4-g32", &f4) != TOPS_OK || tops_format_from_name("e4m3", &fe) != TOPS_OK ||
        tops_tensor_create(tops_format_of(TOPS_DT_F32), 2, ext, host, &w) != TOPS_OK)
        return 1;
    for (int i = 0; i < 64; i++) ((float *)w.data)[i] = (float)i * 0.25f - 8.0f;
    tops_quantize_opts opts = {0, 1};
    if (tops_tensor_create(f4, 2, ext, host, &q) != TOPS_OK || tops_tensor_create(fe, 2, ext, host, &e) != TOPS_OK ||
        tops_quantize(&w, &q, &opts) != TOPS_OK || tops_quantize(&w, &e, &opts) != TOPS_OK)
        return 1;
    int64_t shape[1] = {2};
    int64_t ids[2] = {1, 2};
    tops_named_tensor nt[4] = {{"model.w", &w, NULL, 0, NULL, NULL},
                               {"model.q", &q, NULL, 0, NULL, NULL},
                               {"model.e", &e, NULL, 0, NULL, NULL},
                               {"ids", NULL, "I64", 1, shape, ids}};
    const char *meta[2] = {"format", "pt"};
    char path[512];
    snprintf(path, sizeof path, "%s/model_safetensors/multi.safetensors", dir);
    if (tops_model_save(path, nt, 4, meta, 1) != TOPS_OK) bad = 1;
    snprintf(path, sizeof path, "%s/model_safetensors/plain.safetensors", dir);
    if (tops_model_save(path, nt, 1, NULL, 0) != TOPS_OK) bad = 1;
    snprintf(path, sizeof path, "%s/model_safetensors/weight.safetensors", dir);
    if (tops_safetensors_save(path, &q) != TOPS_OK) bad = 1;
    if (bad) fprintf(stderr, "fuzz_make_seeds: %s\n", tops_last_error());
    tops_tensor_destroy(&w);
    tops_tensor_destroy(&q);
    tops_tensor_destroy(&e);
    return bad;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_make_seeds DIR\n");
        return 2;
    }
    char sub[512];
    mkdir(argv[1], 0755);
    snprintf(sub, sizeof sub, "%s/npy", argv[1]);
    mkdir(sub, 0755);
    snprintf(sub, sizeof sub, "%s/safetensors", argv[1]);
    mkdir(sub, 0755);
    snprintf(sub, sizeof sub, "%s/gguf", argv[1]);
    mkdir(sub, 0755);
    snprintf(sub, sizeof sub, "%s/model_safetensors", argv[1]);
    mkdir(sub, 0755);
    int bad = 0;
    bad |= make(argv[1], "npy", "f32", 2, 2, 3);
    bad |= make(argv[1], "npy", "f32", 1, 5, 0);
    bad |= make(argv[1], "npy", "f16", 2, 3, 2);
    static const struct { const char *format; int rank; int64_t a, b; } st[] = {
        {"int4-g32", 2, 2, 64}, {"int4-g16:e8m0", 2, 1, 40}, {"int8-g32:f32", 1, 40, 0}, {"int2-g16", 2, 2, 20},
        {"int4-g16-affine", 2, 2, 32}, {"mxfp4", 2, 2, 33}, {"mxfp6", 2, 1, 35}, {"mxfp8", 2, 1, 32},
        {"nvfp4", 2, 1, 32}, {"lut4", 2, 2, 8}, {"lut4-row", 2, 2, 8}, {"e4m3-ch", 2, 2, 4},
        {"q4_0", 2, 1, 32}, {"q4_1", 2, 1, 32}, {"q8_0", 1, 32, 0}, {"gguf-mxfp4", 2, 1, 32},
        {"f16", 1, 3, 0}, {"bf16", 2, 2, 2},
    };
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++)
        bad |= make(argv[1], "safetensors", st[i].format, st[i].rank, st[i].a, st[i].b);
    return bad | make_model_seeds(argv[1]);
}
