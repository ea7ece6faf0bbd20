/* Writes the seed corpus of the fuzz targets: small .npy files and one
   small safetensors file per kind of plane layout, made by the library's
   own writers (so the seeds follow the writers when they change).
   usage: fuzz_make_seeds DIR   (writes DIR/npy/ and DIR/safetensors/) */
#include "tensorops.h"

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
    return bad;
}
