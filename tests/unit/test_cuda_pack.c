/* The GPU weight packer (src/cuda/pack.c), checked without a GPU: every
   weight is read back out of the packed layout the way the kernels read it
   (lane, step, fragment register and half; the decoders' bit tricks
   replayed in C; the scale entry of its row and group) and must equal what
   tops_dequantize gives for the source tensor.  Runs on any machine. */
#include "harness.h"

#include "cuda/cuda_internal.h"
#include "formats/traits.h"
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
        /* e2m1_step(): magnitudes shifted left by 8 / 5 / 0 / -3, signs by 8 / 15 / 0 / 7 */
        static const int ms[4] = {8, 5, 0, -3}, ss[4] = {8, 15, 0, 7};
        uint32_t q = w[j], mag = ms[r] >= 0 ? q << ms[r] : q >> -ms[r];
        return half_of((mag & 0x0E000E00u) | ((q << ss[r]) & 0x80008000u), h, 0) * 16384.0f;
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

/* A view of n x k row-major f32 values. */
static tops_tensor_desc f32_rows(float *data, int64_t n, int64_t k) {
    tops_tensor_desc d = {0};
    d.format = tops_format_of(TOPS_DT_F32);
    d.rank = 2;
    d.extent[0] = n;
    d.extent[1] = k;
    d.data = data;
    return d;
}

/* src (n x k f32) quantized into a new host tensor of format fmt. */
static void quantize_rows(tops_format fmt, float *src, int64_t n, int64_t k, tops_tensor *tq) {
    int64_t ext[2] = {n, k};
    tops_tensor_desc d = f32_rows(src, n, k);
    tops_tensor ts;
    ASSERT_OK(tops_tensor_view(&d, &ts));
    ASSERT_OK(tops_tensor_create(fmt, 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, tq));
    ASSERT_OK(tops_quantize(&ts, tq, NULL));
}

/* One format's weights on the host: random source values (the first `big`
   of each row times 2^16), quantized, dequantized with the library's
   reference, and packed for the GPU. */
typedef struct {
    float *src, *dec;
    tops_tensor tq;
    tops__cuda_packed pk;
    void *wb, *sb, *bb;
} packed_case;

static void packed_case_begin(packed_case *c, const char *name, int64_t n, int64_t k, int64_t big, th_rng *r) {
    tops_format fmt;
    tops_tensor td;
    ASSERT_OK(tops_format_from_name(name, &fmt));
    c->src = malloc((size_t)(n * k) * sizeof(float));
    c->dec = malloc((size_t)(n * k) * sizeof(float));
    for (int64_t i = 0; i < n * k; i++)
        c->src[i] = th_uniform(r, -2, 2) * (float)(1 + i % 5) * (i % k < big ? 0x1p16f : 1.0f);
    quantize_rows(fmt, c->src, n, k, &c->tq);
    tops_tensor_desc dd = f32_rows(c->dec, n, k);
    ASSERT_OK(tops_tensor_view(&dd, &td));
    ASSERT_OK(tops_dequantize(&c->tq, &td));
    c->wb = c->sb = c->bb = NULL;
    ASSERT_OK(tops__cuda_pack_host("test", &c->tq, 1, &c->pk, &c->wb, &c->sb, &c->bb));
}

static void packed_case_end(packed_case *c) {
    free(c->wb);
    free(c->sb);
    free(c->bb);
    tops_tensor_destroy(&c->tq);
    free(c->src);
    free(c->dec);
}

/* The kernels' code of a traits row's decoder family (cuda_internal.h). */
static int family_code(int family) {
    static const int code[] = {[TOPS__GF_U4] = TOPS__CU_CODE_U4,     [TOPS__GF_E2M1] = TOPS__CU_CODE_E2M1,
                               [TOPS__GF_I8] = TOPS__CU_CODE_I8,     [TOPS__GF_E4M3] = TOPS__CU_CODE_E4M3,
                               [TOPS__GF_F16] = TOPS__CU_CODE_F16,   [TOPS__GF_BF16] = TOPS__CU_CODE_BF16};
    return family > 0 && family <= TOPS__GF_BF16 ? code[family] : -1;
}

/* Every weight of one format, read through the packed layout: the code
   decoded as its family does, times its row and group's scale, plus (formats
   with mins) the group's bias, times the global scale. */
static void check_format(const char *name, int64_t n, int64_t k, th_rng *r) {
    packed_case pc;
    packed_case_begin(&pc, name, n, k, 0, r);
    const tops__cuda_packed pk = pc.pk;
    void *wb = pc.wb, *sb = pc.sb;
    const float *dec = pc.dec, *bias = pc.bb;
    if (!wb) goto out;
    /* the pack follows the traits row's rule */
    const tops__gpu_rule *rule = tops__format_gpu_rule(pc.tq.format.id);
    if (pk.code != family_code(rule->family) || pk.has_scales != (rule->scale != TOPS__GSC_NONE) ||
        (rule->offset != 0) != (bias != NULL) || (bias && pk.bias_bytes != (size_t)(n * pk.groups) * 4))
        TH_FAIL_AT("%s: packed as code %d, scales %d, biases %p (%zu bytes); its traits row says family %d, scale %d, "
                   "offset %d", name, pk.code, pk.has_scales, (void *)bias, pk.bias_bytes, rule->family, rule->scale,
                   rule->offset);
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
                double cs = (double)decode(pk.code, bf16, w, j, reg, h) * scale_of(&pk, sb, tile, kk / pk.group, 2 * gid + rhalf);
                /* the bias term rides on the activations' group sums, which
                   are zero past K: it counts for rows and K inside only */
                double b = bias && row < n && kk < k ? bias[row * pk.groups + kk / pk.group] : 0.0;
                double v = (cs + b) * pk.global_scale;
                double want = row < n && kk < k ? dec[row * k + kk] : 0.0;
                /* q * s - min against (q - offset) * s + bias: bias = offset * s - min rounded once in f32 */
                double tol = 1e-6 * fabs(want) + (bias ? ldexp(fabs(cs) + fabs(b), -22) : 0.0);
                int same = (isnan(v) && isnan(want)) || fabs(v - want) <= tol;
                if (!same && mismatches++ < 3)
                    TH_FAIL_AT("%s %s: row %lld k %lld: packed reads %.9g, dequantize gives %.9g", name,
                               bf16 ? "bf16" : "f16", (long long)row, (long long)kk, v, want);
            }
    }
out:
    packed_case_end(&pc);
}

/* Every traits row with a GPU pack rule (its default name: int4-g32,
   q4_K, ...), and the variants of the parameterised rows. */
static void test_every_format_reads_back(void) {
    th_rng r = th_seed();
    static const char *const variants[] = {"int4-g128", "int4-g64:bf16", "int4-g32:e8m0", "int4-g16:f32", "int8-g128",
                                          "int2-g128",  "int4-g64-affine"};
    int rows = 0;
    for (int id = 0; id < TOPS_FMT_COUNT_; id++) {
        const tops__gpu_rule *rule = tops__format_gpu_rule((tops_format_id)id);
        if (rule->family == TOPS__GF_NONE) continue;
        char name[48];
        tops_format_name((tops_format){(tops_format_id)id, 0, TOPS_DT_NONE}, name, sizeof name);
        check_format(name, 37, 200, &r);  /* ragged N and K: padding, partial groups */
        check_format(name, 64, 128, &r);
        check_format(name, 19, 700, &r);  /* several super-blocks, the last one short */
        rows++;
    }
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        check_format(variants[i], 37, 200, &r);
        check_format(variants[i], 64, 128, &r);
    }
    printf("     %d traits rows with a GPU pack rule and %d variants read back\n", rows,
           (int)(sizeof variants / sizeof variants[0]));
    ASSERT_TRUE(rows >= 20); /* the 14 rows of before, q4_1, q4_K, q5_K, q6_K, iq4_nl, iq4_xs */
}

/* Factored sub-block scales (pack.c, factor_scales): where want, the pack
   carries them and every sub-block scale is D x m exactly, m an integer
   with |m| x vmax <= 2048 (code x m exact in f16), D the super-block's
   f32 entry; elsewhere it carries none.  Also each weight as the factored
   kernels read it (decoded code x m x D + bias) against dequantize. */
static void check_factored(const char *name, int64_t n, int64_t k, int want, int vmax, th_rng *r) {
    packed_case pc;
    packed_case_begin(&pc, name, n, k, 0, r);
    const tops__cuda_packed pk = pc.pk;
    const unsigned char *sb = pc.sb;
    int64_t bad = 0;
    if ((pk.fac_groups > 0) != want) {
        TH_FAIL_AT("%s %lld x %lld: factored groups %lld, want %s", name, (long long)n, (long long)k,
                   (long long)pk.fac_groups, want ? "some" : "none");
        goto out;
    }
    if (!want) goto out;
    if (pk.fac_group % pk.group != 0 || pk.fac_groups != (pk.k_pad + pk.fac_group - 1) / pk.fac_group ||
        pk.fac_d_off % 256 != 0 || pk.fac_m_off % 256 != 0 || pk.fac_m_off + (size_t)(pk.n_pad / 16 * pk.groups) * 32 > pk.scale_bytes)
        TH_FAIL_AT("%s: factored layout group %d x %lld at %zu / %zu of %zu bytes", name, (int)pk.fac_group,
                   (long long)pk.fac_groups, pk.fac_d_off, pk.fac_m_off, pk.scale_bytes);
    const int kc = tops__cu_chunk_k(pk.code);
    const int64_t chunks = pk.k_pad / kc;
    for (int64_t row = 0; row < n; row++)
        for (int64_t kk = 0; kk < k; kk++) {
            const int64_t tile = row / 16, g = kk / pk.group, fg = kk / pk.fac_group;
            const int rr = (int)(row % 16), gid = rr % 8, rhalf = rr / 8, e = 2 * gid + rhalf;
            float d, mf;
            uint16_t mh;
            memcpy(&d, sb + pk.fac_d_off + ((size_t)(tile * pk.fac_groups + fg) * 16 + (size_t)e) * 4, 4);
            memcpy(&mh, sb + pk.fac_m_off + ((size_t)(tile * pk.groups + g) * 16 + (size_t)e) * 2, 2);
            tops_cast_to_f32(TOPS_DT_F16, &mf, &mh, 1);
            const double s = scale_of(&pk, sb, tile, g, e);
            const int kl = (int)(kk % kc), j = kl / 16, tig = (kl % 16) / 4, q = kl % 4;
            uint32_t w[4];
            memcpy(w, (unsigned char *)pc.wb + (((size_t)tile * (size_t)chunks + (size_t)(kk / kc)) * 32 + (size_t)(4 * gid + tig)) * 16, 16);
            const double code = decode(pk.code, 0, w, j, rhalf + 2 * (q / 2), q % 2);
            const double cm = code * mf, b = pc.bb ? ((const float *)pc.bb)[row * pk.groups + g] : 0.0;
            const double v = (cm * d + b) * pk.global_scale, want_v = pc.dec[row * k + kk];
            const int ok = mf == rint(mf) && fabs(mf) * vmax <= 2048 && (double)d * mf == s && fabs(cm) <= 2048 &&
                           fabs(v - want_v) <= 1e-6 * fabs(want_v) + (pc.bb ? ldexp(fabs(cm * d) + fabs(b), -22) : 0.0);
            if (!ok && bad++ < 3)
                TH_FAIL_AT("%s: row %lld k %lld: scale %.9g = D %.9g x m %g? weight %.9g against %.9g", name,
                           (long long)row, (long long)kk, s, (double)d, (double)mf, v, want_v);
        }
out:
    packed_case_end(&pc);
}

static void test_factored_scales(void) {
    th_rng r = th_seed();
    check_factored("q4_K", 37, 200, 1, 8, &r); /* ragged: one short super-block */
    check_factored("q4_K", 64, 1024, 1, 8, &r);
    check_factored("q4_K", 19, 700, 1, 8, &r);
    check_factored("q5_K", 40, 768, 1, 16, &r);
    check_factored("q5_K", 17, 300, 1, 16, &r);
    check_factored("q4_0", 32, 256, 0, 8, &r); /* no sub-blocks */
    check_factored("int4-g32", 32, 256, 0, 8, &r);
    check_factored("q4_1", 32, 256, 0, 8, &r);
}

static double round16(double v, int bf16) {
    float f = (float)v, back; /* the products below are exact in f32 */
    uint16_t h;
    tops_cast_from_f32(bf16 ? TOPS_DT_BF16 : TOPS_DT_F16, &h, &f, 1, 0);
    tops_cast_to_f32(bf16 ? TOPS_DT_BF16 : TOPS_DT_F16, &back, &h, 1);
    return back;
}

/* Folded scales (tops__cu_fold_shift, wgmma_w.cu): whether a packed tensor
   folds for f16 / bf16 activations, and, where it does, the kernel's
   arithmetic replayed for every weight: the multiplier s x 2^(D - B) is
   exact in the 16-bit type, and the code (x 2^-D, as decoded) times it is
   exactly code x s x 2^-B for e2m1, within 2^-11 relative (and normal) for
   relaxed 4-bit integers; strict 4-bit integers (two terms: the
   multiplier's top 8 bits and the rest) give two exact products that sum
   to it.  spread: rows alternately x 2^20 and x 2^-20. */
static void check_fold(const char *name, int spread, int relaxed, int want_f16, int want_bf16, th_rng *r) {
    const int64_t n = 48, k = 256;
    tops_format fmt;
    ASSERT_OK(tops_format_from_name(name, &fmt));
    float *src = malloc((size_t)(n * k) * sizeof(float));
    for (int64_t i = 0; i < n * k; i++)
        src[i] = th_uniform(r, -2, 2) * (float)(1 + i % 5) * (spread ? ldexpf(1.0f, (i / k) % 2 ? 20 : -20) : 1.0f);
    tops_tensor tq;
    quantize_rows(fmt, src, n, k, &tq);
    tops__cuda_packed pk;
    void *wb = NULL, *sb = NULL, *bb = NULL;
    ASSERT_OK(tops__cuda_pack_host("test", &tq, 1, &pk, &wb, &sb, &bb));
    free(bb);
    const int kc = tops__cu_chunk_k(pk.code), dexp = pk.code == TOPS__CU_CODE_E2M1 ? 14 : 0;
    const int64_t chunks = pk.k_pad / kc;
    int64_t bad = 0;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        int b = 0, got = tops__cu_fold_shift(&pk, bf16, relaxed, &b);
        if (got != (bf16 ? want_bf16 : want_f16)) {
            TH_FAIL_AT("%s spread=%d relaxed=%d %s: fold %d, want %d (scales %g .. %g)", name, spread, relaxed,
                       bf16 ? "bf16" : "f16", got, bf16 ? want_bf16 : want_f16, pk.scale_absmin, pk.scale_absmax);
            continue;
        }
        for (int64_t row = 0; got && row < n; row++)
            for (int64_t kk = 0; kk < k; kk++) {
                int64_t tile = row / 16, c = kk / kc;
                int rr = (int)(row % 16), gid = rr % 8, rhalf = rr / 8;
                int kl = (int)(kk % kc), j = kl / 16, tig = (kl % 16) / 4, q = kl % 4;
                uint32_t w[4];
                memcpy(w, (unsigned char *)wb + (((size_t)tile * (size_t)chunks + (size_t)c) * 32 + (size_t)(4 * gid + tig)) * 16, 16);
                double code = decode(pk.code, 0, w, j, rhalf + 2 * (q / 2), q % 2);
                /* The same element through the folded kernel's quad shuffle
                   (natural_k_order): lane t of the plain A layout holds K 2t,
                   2t + 1, 2t + 8, 2t + 9 of the step. */
                int kl16 = kl % 16, nt = (kl16 % 8) / 2, nr = rhalf + 2 * (kl16 / 8);
                uint32_t wl[4], wh[4], nw[4] = {0, 0, 0, 0};
                size_t at = ((size_t)tile * (size_t)chunks + (size_t)c) * 32 + (size_t)(4 * gid);
                memcpy(wl, (unsigned char *)wb + (at + (size_t)(nt >> 1)) * 16, 16);
                memcpy(wh, (unsigned char *)wb + (at + (size_t)(2 + (nt >> 1))) * 16, 16);
                nw[j] = byte_perm(wl[j], wh[j], (nt & 1) ? 0x7351u : 0x6240u);
                if (decode(pk.code, 0, nw, j, nr, kl16 % 2) != code && bad++ < 3)
                    TH_FAIL_AT("%s: row %lld k %lld: the quad shuffle reads %g, the packed fragment %g", name,
                               (long long)row, (long long)kk, (double)decode(pk.code, 0, nw, j, nr, kl16 % 2), code);
                double s = scale_of(&pk, sb, tile, kk / pk.group, 2 * gid + rhalf);
                double mult = ldexp(s, dexp - b), exact = ldexp(code * s, -b);
                double prod = round16(ldexp(code, -dexp) * round16(mult, bf16), bf16);
                int ok = round16(mult, bf16) == mult &&
                         (pk.code == TOPS__CU_CODE_E2M1 ? prod == exact
                                                         : fabs(prod - exact) <= ldexp(fabs(exact), -11) &&
                                                               (exact == 0 || fabs(prod) >= 0x1p-14));
                if (got == 2) { /* f16: s1 = the multiplier with its last 3 mantissa bits cleared */
                    float mf = (float)mult, s1f;
                    uint16_t h;
                    tops_cast_from_f32(TOPS_DT_F16, &h, &mf, 1, 0);
                    h = (uint16_t)(h & 0xFFF8u);
                    tops_cast_to_f32(TOPS_DT_F16, &s1f, &h, 1);
                    const double s1 = s1f, s2 = mult - s1;
                    const double p1 = round16(code * s1, 0), p2 = round16(code * s2, 0);
                    ok = round16(mult, 0) == mult && round16(s2, 0) == s2 && p1 == code * s1 && p2 == code * s2 &&
                         p1 + p2 == exact;
                    prod = p1 + p2;
                }
                if (!ok && bad++ < 3)
                    TH_FAIL_AT("%s %s B=%d: row %lld k %lld: code %g x scale %g folds to %.9g, want %.9g", name,
                               bf16 ? "bf16" : "f16", b, (long long)row, (long long)kk, code, s, prod, exact);
            }
    }
    free(wb);
    free(sb);
    tops_tensor_destroy(&tq);
    free(src);
}

/* The channel units of the dequantized layouts (tops__cuda_pack_units):
   powers of two, unit x inv = 1, every decoded weight over its channel's
   unit below 2^15 (f16 keeps it finite), the channel's largest within a
   factor 16 of 2^15 (its largest code may be below the family's largest;
   mins add to it); none for 16-bit weights.
   Rows scaled by 2^10 and 2^-10 in turn (f16 scales hold both), one row
   of zeros. */
static void test_channel_units(void) {
    static const char *const names[] = {"int4-g32", "q4_0", "q8_0", "int8-g32", "q4_1", "q4_K", "q6_K",
                                        "mxfp4", "nvfp4", "e4m3-ch", "iq4_nl", "f16"};
    th_rng r = th_seed();
    const int64_t n = 40, k = 512;
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        tops_format fmt;
        ASSERT_OK(tops_format_from_name(names[f], &fmt));
        float *src = malloc((size_t)(n * k) * sizeof(float)), *dec = malloc((size_t)(n * k) * sizeof(float));
        for (int64_t i = 0; i < n * k; i++)
            src[i] = i / k == 7 ? 0.0f : th_uniform(&r, -2, 2) * ldexpf(1.0f, (i / k) % 2 ? 10 : -10);
        tops_tensor tq, td;
        quantize_rows(fmt, src, n, k, &tq);
        tops_tensor_desc dd = f32_rows(dec, n, k);
        ASSERT_OK(tops_tensor_view(&dd, &td));
        ASSERT_OK(tops_dequantize(&tq, &td));
        tops__cuda_packed pk;
        void *wb = NULL, *sb = NULL, *bb = NULL;
        ASSERT_OK(tops__cuda_pack_host("test", &tq, 1, &pk, &wb, &sb, &bb));
        size_t bytes = 1;
        float *u = tops__cuda_pack_units(&pk, sb, bb, &bytes);
        if (pk.code == TOPS__CU_CODE_F16 || pk.code == TOPS__CU_CODE_BF16) {
            ASSERT_TRUE(u == NULL && bytes == 0);
        } else if (!u || bytes != 2 * (size_t)pk.n_pad * sizeof(float)) {
            TH_FAIL_AT("%s: no units (%zu bytes)", names[f], bytes);
        } else {
            for (int64_t row = 0; row < n; row++) {
                const float inv = u[row], unit = u[pk.n_pad + row];
                int e1, e2;
                if (frexpf(inv, &e1) != 0.5f || frexpf(unit, &e2) != 0.5f || inv * unit != 1.0f) {
                    TH_FAIL_AT("%s row %lld: inv %g, unit %g", names[f], (long long)row, (double)inv, (double)unit);
                    continue;
                }
                double big = 0;
                for (int64_t kk = 0; kk < k; kk++) big = fmax(big, fabs((double)dec[row * k + kk]));
                const double scaled = big / pk.global_scale * inv; /* the tensor factor is not in the units */
                if (big > 0 && !(scaled < 32768.0 && scaled >= 2048.0))
                    TH_FAIL_AT("%s row %lld: largest weight %g over its unit %g is %g", names[f], (long long)row, big,
                               (double)unit, scaled);
            }
        }
        free(u);
        free(wb);
        free(sb);
        free(bb);
        tops_tensor_destroy(&tq);
        free(src);
        free(dec);
    }
}

static void test_fold_shift(void) {
    th_rng r = th_seed();
    check_fold("mxfp4", 0, 0, 1, 1, &r);
    check_fold("gguf-mxfp4", 0, 0, 1, 1, &r);
    check_fold("mxfp4", 1, 0, 0, 1, &r); /* block scales 2^40 apart: beyond f16 */
    check_fold("nvfp4", 0, 0, 1, 1, &r);
    check_fold("nvfp4", 1, 1, 1, 1, &r); /* ue4m3 x the tensor scale: always in range */
    check_fold("int4-g128", 0, 0, 2, 0, &r); /* 14-bit products: strict folds in two terms, f16 only */
    check_fold("q4_0", 0, 0, 2, 0, &r);
    check_fold("int4-g128", 0, 1, 1, 0, &r); /* relaxed: f16 only */
    check_fold("q4_0", 0, 1, 1, 0, &r);
    check_fold("int4-g32", 1, 1, 0, 0, &r); /* products past f16's range */
    check_fold("int8-g32", 0, 1, 0, 0, &r);
    check_fold("int4-g32:e8m0", 0, 1, 0, 0, &r);
}

static void test_rejects(void) {
    tops_format f;
    int64_t ext[2] = {16, 64};
    tops_tensor t;
    tops__cuda_packed pk;
    void *wb = NULL, *sb = NULL, *bb = NULL;
    ASSERT_OK(tops_format_from_name("int4-g32", &f));
    ASSERT_OK(tops_tensor_create(f, 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, &t));
    ASSERT_FAILS_WITH(tops__cuda_pack_host("test", &t, 0, &pk, &wb, &sb, &bb), TOPS_UNSUPPORTED_FORMAT, "transpose_right");
    tops_tensor_destroy(&t);
    /* every traits row without a GPU pack rule is refused, by name */
    int refused = 0;
    for (int id = 0; id < TOPS_FMT_COUNT_; id++) {
        const tops__gpu_rule *rule = tops__format_gpu_rule((tops_format_id)id);
        if (rule->family != TOPS__GF_NONE || id == TOPS_FMT_PACKED) continue;
        char name[48];
        f = (tops_format){(tops_format_id)id, 0, TOPS_DT_NONE};
        tops_format_name(f, name, sizeof name);
        ASSERT_OK(tops_tensor_create(f, 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, &t));
        ASSERT_FAILS_WITH(tops__cuda_pack_host("test", &t, 1, &pk, &wb, &sb, &bb), TOPS_UNSUPPORTED_FORMAT, name);
        tops_tensor_destroy(&t);
        refused++;
    }
    ASSERT_TRUE(refused > 0);
    ASSERT_TRUE(wb == NULL && sb == NULL && bb == NULL);
}


/* ---- the q8 layout (wgmma_q8.cu): 4-bit weights decoded to e4m3 ---------- */

static float e4m3_value(uint32_t byte) {
    uint8_t b = (uint8_t)byte;
    float v;
    tops_cast_to_f32(TOPS_DT_E4M3, &v, &b, 1);
    return v;
}

/* The kernel's decode of word w's weights 0..3 (hi = 0) or 4..7 (hi = 1):
   through the magnitude table (int4: e4m3 of 0.5 .. 7.5, v + 1/2; e2m1:
   table d), its sign bits ORed in. */
static uint32_t q8_decode(int mx, uint32_t w, int hi, int d) {
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    uint32_t t[2] = {0, 0};
    if (mx) {
        for (int i = 0; i < 8; i++) {
            float v = ldexpf(mag[i], d - 8);
            uint8_t b;
            tops_cast_from_f32(TOPS_DT_E4M3, &b, &v, 1, 1);
            ASSERT_TRUE(e4m3_value(b) == v); /* every table entry exact */
            t[i / 4] |= (uint32_t)b << (8 * (i % 4));
        }
    } else {
        t[0] = TOPS__CU_Q8_HALF_T0, t[1] = TOPS__CU_Q8_HALF_T1;
        for (int i = 0; i < 8; i++) ASSERT_TRUE(e4m3_value(t[i / 4] >> (8 * (i % 4))) == (float)i + 0.5f);
    }
    if (hi) return byte_perm(t[0], t[1], (w >> 16) & 0x7777u) | ((w << 4) & 0x80808080u);
    return byte_perm(t[0], t[1], w & 0x7777u) | (w & 0x80808080u);
}

/* The factor plane (int4): the f16 factor of channel ch of block cb for
   chunk c, where the correction's wgmma A fragments hold it. */
static float q8_plane_factor(const unsigned char *q, const tops__cuda_packed *pk, int64_t cb, int ch, int64_t c) {
    const int64_t sblocks = tops__cu_q8_sblocks(pk->k);
    const int tl = ch / 16, g = ch % 8, half = (ch % 16) / 8, cc = (int)(c % TOPS__CU_Q8_SBLOCK);
    const int kb = cc / 16, t = (cc % 8) / 2, reg = half + 2 * ((cc % 16) / 8);
    uint16_t h;
    memcpy(&h, q + tops__cu_q8_fplane_offset(pk->code, pk->n, pk->k) +
                   (size_t)((cb * sblocks + c / TOPS__CU_Q8_SBLOCK) * TOPS__CU_Q8_FBYTES) +
                   (size_t)(((tl * 2 + kb) * 32 + 4 * g + t) * 16 + reg * 4 + (cc % 2) * 2),
           2);
    float f;
    tops_cast_to_f32(TOPS_DT_F16, &f, &h, 1);
    return f;
}

/* Every weight of a format read back through the q8 layout, or (want = 0)
   no layout.  spread 1: the first 16 weights of each row x 2^16 (mxfp4: a
   chunk over more than 15 binades); 2: the first 128 (each chunk fits, the
   rows do not).  row: pk.q8_row_factor expected (then every chunk of a row
   carries the same factor). */
static void check_q8(const char *name, int64_t n, int64_t k, int spread, int want, int row_factor, th_rng *r) {
    packed_case pc;
    packed_case_begin(&pc, name, n, k, spread == 2 ? 128 : spread ? 16 : 0, r);
    size_t bytes = 0;
    int oom = -1;
    unsigned char *q = tops__cuda_pack_q8_host(&pc.tq, &pc.pk, &bytes, &oom);
    const tops__cuda_packed pk = pc.pk; /* with the q8 fields set */
    const float *dec = pc.dec;
    ASSERT_TRUE(oom == 0);
    if (!want || !q) {
        if ((q != NULL) != want) TH_FAIL_AT("%s spread=%d: q8 layout %s", name, spread, q ? "built" : "missing");
        goto out;
    }
    const int mx = pk.code == TOPS__CU_CODE_E2M1, rec = tops__cu_q8_rec_bytes(pk.code);
    const int64_t chunks = (k + 127) / 128, cbs = (n + 127) / 128, npad = cbs * 128, kpad = chunks * 128;
    const int64_t sblocks = tops__cu_q8_sblocks(k);
    ASSERT_TRUE(bytes == (size_t)(cbs * chunks * rec) + (mx ? 0 : (size_t)(cbs * sblocks) * TOPS__CU_Q8_FBYTES));
    ASSERT_TRUE(tops__cu_q8_fplane_offset(pk.code, n, k) == (size_t)(cbs * chunks * rec));
    if (pk.q8_row_factor != row_factor)
        TH_FAIL_AT("%s spread=%d: one factor per row %d, want %d", name, spread, pk.q8_row_factor, row_factor);
    int64_t mismatches = 0;
    for (int64_t row = 0; row < npad; row++)
        for (int64_t kk = 0; kk < kpad; kk++) {
            const unsigned char *rc = q + (size_t)((row / 128) * chunks + kk / 128) * (size_t)rec;
            const int ch = (int)(row % 128), tl = ch / 16, g = ch % 8, hi = (ch % 16) / 8;
            const int kl = (int)(kk % 128), st = kl / 32, p = (kl % 32) / 16, t = (kl % 16) / 4, i = kl % 4;
            uint32_t w, ddw = 0;
            float factor;
            memcpy(&w, rc + tl * 1024 + (st / 2) * 512 + (4 * g + t) * 16 + ((st % 2) * 2 + p) * 4, 4);
            memcpy(&factor, rc + TOPS__CU_Q8_WBYTES + 4 * ch, 4);
            if (mx) memcpy(&ddw, rc + TOPS__CU_Q8_WBYTES + 4 * TOPS__CU_Q8_CH + 4 * ch, 4);
            const int d8 = (int)((ddw >> (8 * st)) & 0xFFu), d = d8 / 8; /* table d's byte offset */
            if (d8 % 8 || d > 14) TH_FAIL_AT("%s row %lld k %lld: table offset %d", name, (long long)row, (long long)kk, d8);
            float f0;
            memcpy(&f0, q + (size_t)((row / 128) * chunks) * (size_t)rec + TOPS__CU_Q8_WBYTES + 4 * ch, 4);
            if (row_factor && f0 != factor && mismatches++ < 3)
                TH_FAIL_AT("%s row %lld k %lld: factor %g, chunk 0's %g", name, (long long)row, (long long)kk, factor, f0);
            /* int4 reads v + 1/2: the kernel's correction takes the half back */
            const double v = ((double)e4m3_value(q8_decode(mx, w, hi, d) >> (8 * i)) - (mx ? 0.0 : 0.5)) *
                             factor * pk.global_scale;
            const double want_v = row < n && kk < k ? dec[row * k + kk] : 0.0;
            if (!mx && kk % 128 == 0 && q8_plane_factor(q, &pk, row / 128, ch, kk / 128) != factor &&
                mismatches++ < 3)
                TH_FAIL_AT("%s row %lld chunk %lld: factor plane %g, record %g", name, (long long)row,
                           (long long)(kk / 128), q8_plane_factor(q, &pk, row / 128, ch, kk / 128), factor);
            if (!mx && !(row < n && kk < k)) continue; /* padding reads +-1/2 x 0: its activations are 0 */
            if (!(fabs(v - want_v) <= 1e-6 * fabs(want_v)) && mismatches++ < 3)
                TH_FAIL_AT("%s row %lld k %lld: q8 reads %.9g, dequantize gives %.9g", name, (long long)row,
                           (long long)kk, v, want_v);
        }
out:
    free(q);
    packed_case_end(&pc);
}

static void test_q8_layout(void) {
    th_rng r = th_seed();
    check_q8("int4-g128", 200, 1000, 0, 1, 0, &r);
    check_q8("int4-g256", 130, 512, 0, 1, 0, &r);
    check_q8("int4-g128:bf16", 64, 256, 0, 1, 0, &r);
    check_q8("int4-g128:e8m0", 64, 4200, 0, 1, 0, &r); /* 33 chunks: two correction blocks */
    check_q8("int4-g128:f32", 64, 256, 0, 0, 0, &r);   /* factors that are not f16: no layout */
    check_q8("mxfp4", 200, 1000, 0, 1, 1, &r);
    check_q8("gguf-mxfp4", 130, 512, 0, 1, 1, &r);
    check_q8("mxfp4", 130, 1000, 2, 1, 0, &r); /* rows over 17 binades, chunks within 3: per chunk */
    check_q8("mxfp4", 64, 256, 1, 0, 0, &r);    /* a chunk over 17 binades: no layout */
    check_q8("int4-g128", 64, 256, 1, 1, 0, &r); /* int4 does not care (f16 scales) */
    check_q8("int4-g32", 64, 256, 0, 0, 0, &r);  /* groups below 128 */
    check_q8("nvfp4", 64, 256, 0, 0, 0, &r);
}

/* The row-major layout of the TMA GEMM (tops__cuda_pack_fp8_host,
   fp8_gemm.cu): f16 / bf16 weights as their 16-bit values [n, k_pad]
   (also from weights stored [K, N], transpose_right = 0), e4m3-ch / e4m3
   codes [n, k_pad] whose e4m3 value (what the kernel's conversion gives,
   exactly) times the f32 channel scale and the tensor scale is
   tops_dequantize's value within its f32 rounding; zeros past K; no layout
   for other formats. */
static void check_rowmajor(const char *name, int64_t n, int64_t k, int transposed, th_rng *r) {
    packed_case pc;
    packed_case_begin(&pc, name, n, k, 0, r);
    tops_tensor t_kn; /* the same values stored [K, N] */
    const tops_tensor *w = &pc.tq;
    const int h16 = pc.pk.code == TOPS__CU_CODE_F16 || pc.pk.code == TOPS__CU_CODE_BF16;
    if (transposed) {
        int64_t ext[2] = {k, n};
        ASSERT_OK(tops_tensor_create(pc.tq.format, 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, &t_kn));
        for (int64_t row = 0; row < n; row++)
            for (int64_t kk = 0; kk < k; kk++)
                memcpy((uint16_t *)t_kn.data + kk * n + row, (const uint16_t *)pc.tq.data + row * k + kk, 2);
        w = &t_kn;
    }
    size_t bytes = 0, soff = 0;
    unsigned char *buf = tops__cuda_pack_fp8_host(w, !transposed, &pc.pk, &bytes, &soff);
    const int want_layout = h16 || strncmp(name, "e4m3", 4) == 0;
    if ((buf != NULL) != want_layout) TH_FAIL_AT("%s: row-major layout %s", name, buf ? "made" : "missing");
    int64_t bad = 0;
    if (buf) {
        const size_t esz = h16 ? 2 : 1;
        if (bytes < (size_t)(n * pc.pk.k_pad) * esz) TH_FAIL_AT("%s: %zu bytes", name, bytes);
        for (int64_t row = 0; row < n; row++)
            for (int64_t kk = 0; kk < pc.pk.k_pad; kk++) {
                const unsigned char *e = buf + ((size_t)row * (size_t)pc.pk.k_pad + (size_t)kk) * esz;
                double v;
                if (h16) {
                    uint16_t u;
                    memcpy(&u, e, 2);
                    v = pc.pk.code == TOPS__CU_CODE_BF16 ? bf16_to_f32(u) : half_to_f32(u);
                } else {
                    float f, cs = 1.0f;
                    tops_cast_to_f32(TOPS_DT_E4M3, &f, e, 1);
                    if (soff) memcpy(&cs, buf + soff + (size_t)row * 4, 4);
                    v = (double)f * cs * pc.pk.global_scale;
                }
                /* 16-bit values exactly; code x scale (exact in f64) against the f32 product */
                const double want = kk < k ? pc.dec[row * k + kk] : 0.0;
                if ((h16 ? v != want : !(fabs(v - want) <= 0x1p-23 * fabs(want))) && bad++ < 3)
                    TH_FAIL_AT("%s%s: row %lld k %lld: the row-major layout reads %.9g, dequantize gives %.9g", name,
                               transposed ? " [K, N]" : "", (long long)row, (long long)kk, v, want);
            }
    }
    free(buf);
    if (transposed) tops_tensor_destroy(&t_kn);
    packed_case_end(&pc);
}

static void test_rowmajor_layout(void) {
    th_rng r = th_seed();
    static const char *const names[] = {"f16", "bf16", "e4m3-ch", "e4m3", "int8-g32", "mxfp8", "int4-g128"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        check_rowmajor(names[i], 37, 200, 0, &r);
        check_rowmajor(names[i], 64, 128, 0, &r);
    }
    check_rowmajor("f16", 37, 200, 1, &r);
    check_rowmajor("bf16", 64, 72, 1, &r);
}

int main(void) {
    RUN_TEST(test_every_format_reads_back);
    RUN_TEST(test_rowmajor_layout);
    RUN_TEST(test_rejects);
    RUN_TEST(test_fold_shift);
    RUN_TEST(test_q8_layout);
    RUN_TEST(test_factored_scales);
    RUN_TEST(test_channel_units);
    TEST_MAIN_END();
}
