/* The GPU weight packer (src/cuda/pack.c), checked without a GPU: every
   weight is read back out of the packed layout the way the kernels read it
   (lane, step, fragment register and half; the decoders' bit tricks
   replayed in C; the scale entry of its row and group) and must equal what
   tops_dequantize gives for the source tensor.  Runs on any machine. */
#include "harness.h"

#include "cuda/cuda_internal.h"
#include "internal.h"

#include <math.h>

static float half_to_f32(uint16_t h) {
    float v;
    tops_cast_to_f32(TOPS_DT_F16, &v, &h, 1);
    return v;
}
static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float v;
    memcpy(&v, &u, 4);
    return v;
}
/* Half h (0 low, 1 high) of a 32-bit register as f16 or bf16. */
static float half_of(uint32_t reg, int h, int bf16) {
    uint16_t b = (uint16_t)(h ? reg >> 16 : reg & 0xFFFF);
    return bf16 ? bf16_to_f32(b) : half_to_f32(b);
}
static uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t sel) {
    uint8_t src[8];
    for (int i = 0; i < 4; i++) src[i] = (uint8_t)(a >> (8 * i)), src[4 + i] = (uint8_t)(b >> (8 * i));
    uint32_t out = 0;
    for (int i = 0; i < 4; i++) out |= (uint32_t)src[(sel >> (4 * i)) & 7] << (8 * i);
    return out;
}

/* Replays of wstream.cu's decode_step for one register r of step j; the
   value of half h, times the family's decode factor undone. */
static float decode(int code, int bf16, const uint32_t w[4], int j, int r, int h) {
    switch (code) {
    case TOPS__CU_CODE_U4: {
        uint32_t q = w[j];
        if (bf16) return half_of(((q >> (4 * r)) & 0x000F000Fu) | 0x43004300u, h, 1) - 136.0f;
        uint32_t qq = r >= 2 ? q >> 8 : q;
        if (r % 2 == 0) return half_of((qq & 0x000F000Fu) | 0x64006400u, h, 0) - 1032.0f;
        return half_of((qq & 0x00F000F0u) | 0x64006400u, h, 0) * 0.0625f - 72.0f;
    }
    case TOPS__CU_CODE_E2M1: {
        uint32_t q = w[j];
        int s = 4 * r;
        uint32_t mag = s <= 9 ? q << (9 - s) : q >> (s - 9);
        uint32_t sgn = s <= 12 ? q << (12 - s) : q >> (s - 12);
        return half_of((mag & 0x0E000E00u) | (sgn & 0x80008000u), h, 0) * 16384.0f;
    }
    case TOPS__CU_CODE_I8: {
        uint32_t wd = w[2 * j + (r >> 1)];
        if (bf16) return (float)((int)((wd >> (16 * (r & 1) + 8 * h)) & 0xFF) - 128);
        return half_of(byte_perm(wd, 0x64646464u, (r & 1) ? 0x4342 : 0x4140), h, 0) - 1152.0f;
    }
    case TOPS__CU_CODE_E4M3: { /* the pre-sm_89 bit path (sm_89+ converts natively) */
        uint32_t wd = w[2 * j + (r >> 1)];
        uint32_t t = byte_perm(wd, 0, (r & 1) ? 0x3424 : 0x1404);
        return half_of((t & 0x80008000u) | ((t >> 1) & 0x3F803F80u), h, 0) * 256.0f;
    }
    default: return half_of(w[r], h, code == TOPS__CU_CODE_BF16);
    }
}

static float scale_of(const tops__cuda_packed *pk, const unsigned char *sb, int64_t tile, int64_t group, int entry) {
    if (!pk->has_scales) return 1.0f;
    size_t idx = ((size_t)tile * (size_t)pk->groups + (size_t)group) * 16 + (size_t)entry;
    switch (pk->scale_kind) {
    case TOPS__CU_SCALE_F32: {
        float f;
        memcpy(&f, sb + idx * 4, 4);
        return f;
    }
    case TOPS__CU_SCALE_F16: {
        uint16_t h;
        memcpy(&h, sb + idx * 2, 2);
        return half_to_f32(h);
    }
    case TOPS__CU_SCALE_E8M0: return sb[idx] == 0xFF ? NAN : ldexpf(1.0f, (int)sb[idx] - 127);
    default: {
        float v;
        uint8_t b = sb[idx] & 0x7F;
        tops_cast_to_f32(TOPS_DT_E4M3, &v, &b, 1);
        return v;
    }
    }
}

/* Every weight of one format, read through the packed layout. */
static void check_format(const char *name, int64_t n, int64_t k, th_rng *r) {
    tops_format fmt;
    ASSERT_OK(tops_format_from_name(name, &fmt));
    float *src = malloc((size_t)(n * k) * sizeof(float)), *dec = malloc((size_t)(n * k) * sizeof(float));
    for (int64_t i = 0; i < n * k; i++) src[i] = th_uniform(r, -2, 2) * (float)(1 + i % 5);
    int64_t ext[2] = {n, k};
    tops_tensor_desc d = {0};
    d.format = tops_format_of(TOPS_DT_F32);
    d.rank = 2;
    d.extent[0] = n;
    d.extent[1] = k;
    d.data = src;
    tops_tensor ts, tq, td;
    ASSERT_OK(tops_tensor_view(&d, &ts));
    ASSERT_OK(tops_tensor_create(fmt, 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, &tq));
    ASSERT_OK(tops_quantize(&ts, &tq, NULL));
    d.data = dec;
    ASSERT_OK(tops_tensor_view(&d, &td));
    ASSERT_OK(tops_dequantize(&tq, &td));
    tops__cuda_packed pk;
    void *wb = NULL, *sb = NULL;
    ASSERT_OK(tops__cuda_pack_host("test", &tq, 1, &pk, &wb, &sb));
    if (!wb) goto out;
    int kc = tops__cu_chunk_k(pk.code);
    int64_t chunks = pk.k_pad / kc, mismatches = 0;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        if ((pk.code == TOPS__CU_CODE_F16 && bf16) || (pk.code == TOPS__CU_CODE_BF16 && !bf16)) continue;
        for (int64_t row = 0; row < pk.n_pad; row++)
            for (int64_t kk = 0; kk < pk.k_pad; kk++) {
                int64_t tile = row / 16, c = kk / kc;
                int rr = (int)(row % 16), gid = rr % 8, rhalf = rr / 8;
                int kl = (int)(kk % kc), j = kl / 16, tig = (kl % 16) / 4, q = kl % 4;
                int reg = rhalf + 2 * (q / 2), h = q % 2;
                uint32_t w[4];
                memcpy(w, (unsigned char *)wb + (((size_t)tile * (size_t)chunks + (size_t)c) * 32 + (size_t)(4 * gid + tig)) * 16, 16);
                double v = (double)decode(pk.code, bf16, w, j, reg, h) *
                           scale_of(&pk, sb, tile, kk / pk.group, 2 * gid + rhalf) * pk.global_scale;
                double want = row < n && kk < k ? dec[row * k + kk] : 0.0;
                int same = (isnan(v) && isnan(want)) || fabs(v - want) <= 1e-6 * fabs(want);
                if (!same && mismatches++ < 3)
                    TH_FAIL_AT("%s %s: row %lld k %lld: packed reads %.9g, dequantize gives %.9g", name,
                               bf16 ? "bf16" : "f16", (long long)row, (long long)kk, v, want);
            }
    }
out:
    free(wb);
    free(sb);
    tops_tensor_destroy(&tq);
    free(src);
    free(dec);
}

static void test_every_format_reads_back(void) {
    th_rng r = th_seed();
    static const char *const names[] = {"int4-g32", "int4-g128", "int4-g64:bf16", "int4-g32:e8m0", "int4-g16:f32",
                                        "int8-g32", "int8-g128", "q4_0",          "q8_0",          "mxfp4",
                                        "gguf-mxfp4", "mxfp8",   "nvfp4",         "e4m3-ch",       "f16",
                                        "bf16",       "i8",      "i4",            "e4m3"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        check_format(names[i], 37, 200, &r);  /* ragged N and K: padding, partial groups */
        check_format(names[i], 64, 128, &r);
    }
}

static void test_rejects(void) {
    tops_format f;
    int64_t ext[2] = {16, 64};
    tops_tensor t;
    tops__cuda_packed pk;
    void *wb = NULL, *sb = NULL;
    ASSERT_OK(tops_format_from_name("int4-g32-affine", &f));
    ASSERT_OK(tops_tensor_create(f, 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, &t));
    ASSERT_FAILS_WITH(tops__cuda_pack_host("test", &t, 1, &pk, &wb, &sb), TOPS_UNSUPPORTED_FORMAT, "int4-g32-affine");
    tops_tensor_destroy(&t);
    ASSERT_OK(tops_format_from_name("int4-g32", &f));
    ASSERT_OK(tops_tensor_create(f, 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, &t));
    ASSERT_FAILS_WITH(tops__cuda_pack_host("test", &t, 0, &pk, &wb, &sb), TOPS_UNSUPPORTED_FORMAT, "transpose_right");
    tops_tensor_destroy(&t);
    ASSERT_TRUE(wb == NULL && sb == NULL);
}

int main(void) {
    RUN_TEST(test_every_format_reads_back);
    RUN_TEST(test_rejects);
    TEST_MAIN_END();
}
