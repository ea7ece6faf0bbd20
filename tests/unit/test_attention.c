/* tops_attention against an f64 reference: random shapes, masks, GQA,
   dtypes, strides, extreme logits, poisoned outputs, thread-count
   determinism, O(S*D) memory at S = 65536, and every bad input. */
#include "attn_common.h"
#include "cpu/dispatch.h"
#include "ops/attention.h"

#include <sys/resource.h>

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static th_rng rng;

typedef struct cfg {
    int64_t B, H, Hkv, Sq, Sk, D, Dv;
    int causal;
    int64_t window;
    float scale, softcap;
    tops_format_id qf, kf, of;
    int strided; /* q, k, v and out laid out [B, S, H, D] in memory */
    int32_t q_block, kv_block; /* tile hints (0 = the library's) */
} cfg;

static float eff_scale(const cfg *c) { return c->scale > 0 ? c->scale : 1.0f / sqrtf((float)c->D); }

/* f64 reference for query rows i = 0, step, 2 step, ...; rows not computed stay NaN. */
static void ref_attention(const cfg *c, const float *q, const float *k, const float *v, double *out, int64_t step) {
    double *logit = malloc((size_t)c->Sk * sizeof(double));
    int64_t group = c->H / c->Hkv;
    for (int64_t i = 0; i < c->B * c->H * c->Sq * c->Dv; i++) out[i] = NAN;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Sq; i += step) {
                const float *qi = q + ((b * c->H + h) * c->Sq + i) * c->D;
                int64_t hk = h / group, pos = i + c->Sk - c->Sq;
                double m = -INFINITY;
                for (int64_t j = 0; j < c->Sk; j++) {
                    int masked = (c->causal && j > pos) || (c->window > 0 && llabs(j - pos) >= c->window);
                    if (masked) {
                        logit[j] = -INFINITY;
                        continue;
                    }
                    const float *kj = k + ((b * c->Hkv + hk) * c->Sk + j) * c->D;
                    double s = 0;
                    for (int64_t d = 0; d < c->D; d++) s += (double)qi[d] * kj[d];
                    s *= eff_scale(c);
                    if (c->softcap > 0) s = c->softcap * tanh(s / c->softcap);
                    logit[j] = s;
                    if (s > m) m = s;
                }
                double *o = out + ((b * c->H + h) * c->Sq + i) * c->Dv;
                for (int64_t d = 0; d < c->Dv; d++) o[d] = 0;
                if (m == -INFINITY) continue;
                double sum = 0;
                for (int64_t j = 0; j < c->Sk; j++) {
                    if (logit[j] == -INFINITY) continue;
                    double p = exp(logit[j] - m);
                    sum += p;
                    const float *vj = v + ((b * c->Hkv + hk) * c->Sk + j) * c->Dv;
                    for (int64_t d = 0; d < c->Dv; d++) o[d] += p * vj[d];
                }
                for (int64_t d = 0; d < c->Dv; d++) o[d] /= sum;
            }
    free(logit);
}

static double out_tol(tops_format_id f) { return f == TOPS_FMT_F32 ? 1e-4 : f == TOPS_FMT_F16 ? 2e-3 : 1.6e-2; }

typedef struct run {
    tbuf q, k, v, o;
    double *ref;
} run;

static const int bshd[4] = {0, 2, 1, 3};

static void run_make(run *r, const cfg *c, float qlo, float qhi) {
    int64_t qe[4] = {c->B, c->H, c->Sq, c->D}, ke[4] = {c->B, c->Hkv, c->Sk, c->D};
    int64_t ve[4] = {c->B, c->Hkv, c->Sk, c->Dv}, oe[4] = {c->B, c->H, c->Sq, c->Dv};
    const int *perm = c->strided ? bshd : NULL;
    ASSERT_TRUE(tb_make(&r->q, c->qf, 4, qe, perm, &rng, qlo, qhi));
    ASSERT_TRUE(tb_make(&r->k, c->kf, 4, ke, perm, &rng, -1, 1));
    ASSERT_TRUE(tb_make(&r->v, c->kf, 4, ve, perm, &rng, -1, 1));
    ASSERT_TRUE(tb_make(&r->o, c->of, 4, oe, perm, NULL, 0, 0));
    r->ref = malloc((size_t)r->o.n * sizeof(double));
}

static void run_free(run *r) {
    tb_free(&r->q);
    tb_free(&r->k);
    tb_free(&r->v);
    tb_free(&r->o);
    free(r->ref);
}

/* Max |out - ref| over the computed rows, with NaN counted as failure. */
static double max_err(const run *r, int *nonfinite) {
    float *got = malloc((size_t)r->o.n * sizeof(float));
    tb_read(&r->o, got);
    double e = 0;
    *nonfinite = 0;
    for (int64_t i = 0; i < r->o.n; i++) {
        if (!isfinite(got[i])) (*nonfinite)++;
        if (isnan(r->ref[i])) continue;
        double d = fabs(got[i] - r->ref[i]);
        if (!(d <= e)) e = d;
    }
    free(got);
    return e;
}

static void describe(const cfg *c, char *buf, size_t n) {
    snprintf(buf, n, "B%lld H%lld/%lld Sq%lld Sk%lld D%lld/%lld causal%d win%lld cap%g %s/%s/%s%s", (long long)c->B,
             (long long)c->H, (long long)c->Hkv, (long long)c->Sq, (long long)c->Sk, (long long)c->D,
             (long long)c->Dv, c->causal, (long long)c->window, (double)c->softcap,
             c->qf == TOPS_FMT_F32 ? "f32" : c->qf == TOPS_FMT_F16 ? "f16" : "bf16",
             c->kf == TOPS_FMT_F32 ? "f32" : c->kf == TOPS_FMT_F16 ? "f16" : "bf16",
             c->of == TOPS_FMT_F32 ? "f32" : c->of == TOPS_FMT_F16 ? "f16" : "bf16", c->strided ? " strided" : "");
}

/* Runs c on every kernel level this machine has, each against the f64 reference. */
static void check_cfg(const cfg *c, float qlo, float qhi, int threads) {
    run r;
    run_make(&r, c, qlo, qhi);
    ref_attention(c, r.q.vals, r.k.vals, r.v.vals, r.ref, 1);
    tops_attention_desc d = tops_attention_desc_default();
    d.causal = c->causal;
    d.window = c->window;
    d.scale = c->scale;
    d.softcap = c->softcap;
    d.q_block = c->q_block;
    d.kv_block = c->kv_block;
    tops_exec ex = tops_exec_default();
    ex.threads = threads;
    attn_table tables[ATTN_TABLES];
    attn_tables(tables);
    size_t bytes = (size_t)r.o.n * tb_esize(c->of);
    void *emu_bits = malloc(bytes);
    for (int li = 0; li < ATTN_TABLES; li++) {
        if (attn_skip(&tables[li], &r.q.t, &r.k.t, &r.v.t, &r.o.t)) continue;
        tb_poison(&r.o);
        ASSERT_OK(tops__attention_with(tables[li].k, &ex, &d, &r.q.t, &r.k.t, &r.v.t, &r.o.t));
        int bad;
        double e = max_err(&r, &bad);
        double tol = out_tol(c->of) + (c->kf == TOPS_FMT_F32 && c->qf == TOPS_FMT_F32 ? 0 : 1e-4);
        if (bad || !(e <= tol)) {
            char s[200];
            describe(c, s, sizeof s);
            TH_FAIL_AT("%s [%s]: max err %.3g (tol %.3g), %d non-finite", s, tables[li].name, e, tol, bad);
        }
        /* The AVX-512 softmax and its scalar twin: the same bits. */
        if (li == ATTN_EMU_SCALAR) memcpy(emu_bits, r.o.mem, bytes);
        if (li == ATTN_EMU_AVX512 && memcmp(emu_bits, r.o.mem, bytes) != 0) {
            char s[200];
            describe(c, s, sizeof s);
            TH_FAIL_AT("%s: the AVX-512 softmax gave other bits than its scalar twin", s);
        }
    }
    free(emu_bits);
    run_free(&r);
}

static tops_format_id pick_dtype(void) {
    static const tops_format_id f[3] = {TOPS_FMT_F32, TOPS_FMT_F16, TOPS_FMT_BF16};
    return f[th_next(&rng) % 3];
}

static void test_shapes_against_f64(void) {
    static const int64_t S[] = {1, 17, 128, 1000};
    static const int64_t D[] = {16, 64, 80, 128, 256};
    int n = 0;
    for (int si = 0; si < 4; si++)
        for (int di = 0; di < 5; di++) {
            if (SANITIZED && S[si] == 1000 && D[di] > 64) continue;
            cfg c = {0};
            int big = S[si] * S[si] * D[di] > 4000000;
            c.B = big ? 1 : 1 + (int64_t)(th_next(&rng) % 2);
            c.Hkv = 1 + (int64_t)(th_next(&rng) % 2);
            c.H = big ? c.Hkv : c.Hkv * (1 + (int64_t)(th_next(&rng) % 3));
            c.Sq = S[si];
            /* Decode and chunked prefill: keys can outnumber queries. */
            c.Sk = th_next(&rng) % 3 == 0 ? S[si] + (int64_t)(th_next(&rng) % 40) : S[si];
            c.D = c.Dv = D[di];
            c.causal = (int)(th_next(&rng) % 2);
            c.window = th_next(&rng) % 3 == 0 ? 1 + (int64_t)(th_next(&rng) % 50) : 0;
            c.softcap = th_next(&rng) % 4 == 0 ? 5.0f : 0.0f;
            c.scale = th_next(&rng) % 4 == 0 ? 0.3f : 0.0f;
            c.qf = pick_dtype();
            c.kf = pick_dtype();
            c.of = pick_dtype();
            c.strided = (int)(th_next(&rng) % 2);
            check_cfg(&c, -2, 2, 1 + (n++ % 2));
        }
}

static void test_gqa_mqa_and_dv(void) {
    cfg c = {.B = 2, .H = 8, .Hkv = 1, .Sq = 33, .Sk = 70, .D = 64, .Dv = 48, .causal = 1,
             .qf = TOPS_FMT_F32, .kf = TOPS_FMT_F32, .of = TOPS_FMT_F32};
    check_cfg(&c, -1, 1, 2); /* multi-query */
    c.Hkv = 4;
    c.causal = 0;
    c.window = 9;
    check_cfg(&c, -1, 1, 2); /* grouped-query with a window */
}

/* Logits of +-1e4 made exact in f32 (integers), so only the softmax is on trial. */
static void test_extreme_logits(void) {
    cfg c = {.B = 1, .H = 2, .Hkv = 1, .Sq = 40, .Sk = 150, .D = 16, .Dv = 16, .scale = 1.0f,
             .qf = TOPS_FMT_F32, .kf = TOPS_FMT_F32, .of = TOPS_FMT_F32};
    for (int causal = 0; causal < 2; causal++) {
        c.causal = causal;
        run r;
        run_make(&r, &c, -1, 1);
        for (int64_t i = 0; i < r.q.n; i++) {
            float x = (float)((int64_t)(th_next(&rng) % 201) - 100);
            ((float *)r.q.mem)[i] = r.q.vals[i] = x;
        }
        for (int64_t i = 0; i < r.k.n; i++) {
            float x = (float)((int64_t)(th_next(&rng) % 13) - 6);
            ((float *)r.k.mem)[i] = r.k.vals[i] = x;
        }
        ref_attention(&c, r.q.vals, r.k.vals, r.v.vals, r.ref, 1);
        tops_attention_desc d = {.causal = causal, .scale = 1.0f};
        tb_poison(&r.o);
        ASSERT_OK(tops_attention(NULL, &d, &r.q.t, &r.k.t, &r.v.t, &r.o.t));
        int bad;
        double e = max_err(&r, &bad);
        ASSERT_EQ_INT(bad, 0);
        ASSERT_TRUE(e <= 1e-4);
        run_free(&r);
    }
}

/* Queries before the first key (Sq > Sk, causal) and gaps a window leaves
   see no key: their rows must be zeros, not NaN. */
static void test_fully_masked_rows(void) {
    cfg c = {.B = 1, .H = 1, .Hkv = 1, .Sq = 50, .Sk = 20, .D = 32, .Dv = 32, .causal = 1,
             .qf = TOPS_FMT_F32, .kf = TOPS_FMT_F16, .of = TOPS_FMT_BF16};
    check_cfg(&c, -1, 1, 2);
    run r;
    run_make(&r, &c, -1, 1);
    tb_poison(&r.o);
    tops_attention_desc d = {.causal = 1};
    ASSERT_OK(tops_attention(NULL, &d, &r.q.t, &r.k.t, &r.v.t, &r.o.t));
    float *got = malloc((size_t)r.o.n * sizeof(float));
    tb_read(&r.o, got);
    /* Query i sits at position i - 30: the first 30 rows are fully masked. */
    for (int64_t i = 0; i < 30 * 32; i++) ASSERT_TRUE(got[i] == 0.0f);
    for (int64_t i = 30 * 32; i < r.o.n; i++) ASSERT_TRUE(isfinite(got[i]));
    free(got);
    run_free(&r);
}

/* Replaces a run's k and v (f32) by a quantized KV cache of format name;
   the reference then reads the decoded values. */
static void quantize_kv(tbuf *b, const char *name, tops_tensor *qt) {
    tops_format f;
    ASSERT_OK(tops_format_from_name(name, &f));
    ASSERT_OK(tops_tensor_create(f, 4, b->t.extent, (tops_memory){TOPS_DEVICE_CPU, 0}, qt));
    ASSERT_OK(tops_quantize(&b->t, qt, NULL));
    tops_tensor dec;
    ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F32), 4, b->t.extent, (tops_memory){TOPS_DEVICE_CPU, 0}, &dec));
    ASSERT_OK(tops_dequantize(qt, &dec));
    memcpy(b->vals, dec.data, (size_t)b->n * sizeof(float));
    tops_tensor_destroy(&dec);
}

static void test_quantized_kv(void) {
    static const char *const formats[] = {"int8-g32", "int8-g16:bf16", "mxfp8", "e4m3-ch", "int4-g32"};
    for (int fi = 0; fi < 5; fi++) {
        cfg c = {.B = 1, .H = 4, .Hkv = 2, .Sq = 37, .Sk = 90, .D = 80, .Dv = 64, .causal = fi % 2,
                 .window = fi == 2 ? 20 : 0, .qf = fi == 1 ? TOPS_FMT_BF16 : TOPS_FMT_F32, .kf = TOPS_FMT_F32,
                 .of = TOPS_FMT_F32};
        run r;
        run_make(&r, &c, -2, 2);
        tops_tensor kq, vq;
        quantize_kv(&r.k, formats[fi], &kq);
        quantize_kv(&r.v, formats[fi], &vq);
        ref_attention(&c, r.q.vals, r.k.vals, r.v.vals, r.ref, 1);
        tops_attention_desc d = {.causal = c.causal, .window = c.window};
        tops_exec ex = tops_exec_default();
        ex.threads = 2;
        tops_isa levels[3] = {TOPS_ISA_REF, TOPS_ISA_AVX2, TOPS_ISA_AVX512};
        for (int li = 0; li < 3; li++) {
            const tops__kernels *kern = tops__kernels_for_isa(levels[li]);
            if (!kern) continue;
            tb_poison(&r.o);
            ASSERT_OK(tops__attention_with(kern, &ex, &d, &r.q.t, &kq, &vq, &r.o.t));
            int bad;
            double e = max_err(&r, &bad);
            if (bad || !(e <= 1e-4))
                TH_FAIL_AT("kv %s [%s]: max err %.3g, %d non-finite", formats[fi], tops_isa_name(levels[li]), e, bad);
        }
        tops_tensor_destroy(&kq);
        tops_tensor_destroy(&vq);
        run_free(&r);
    }
}

/* Key blocks across the causal diagonal are split into groups of
   microkernel rows that each see only their visible key strips: ragged
   sizes around the block sizes and strips, keys ahead of the queries
   (bottom-right alignment), windows, odd head dims and block hints, on
   every level against f64, then 1 and 2 threads with the same bits. */
static void test_causal_diagonal_blocks(void) {
    static const struct {
        int64_t sq, sk, d, dv, window;
        int32_t qb, kb;
        int half; /* f16 keys and values: the values are laid out as f32 too */
    } cases[] = {
        {97, 97, 16, 16, 0, 0, 0, 0},      {193, 193, 128, 128, 0, 0, 0, 0}, {150, 300, 64, 64, 0, 0, 0, 0},
        {200, 203, 256, 256, 0, 0, 0, 0},  {257, 257, 40, 24, 0, 0, 0, 1},   {300, 300, 32, 32, 70, 0, 0, 0},
        {130, 130, 48, 48, 0, 48, 40, 0},  {131, 140, 16, 32, 0, 25, 16, 1}, {96, 97, 80, 80, 5, 0, 0, 0},
        {389, 389, 64, 64, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (SANITIZED && cases[i].d > 128) continue;
        cfg c = {.B = 1, .H = 2, .Hkv = 1, .Sq = cases[i].sq, .Sk = cases[i].sk, .D = cases[i].d, .Dv = cases[i].dv,
                 .causal = 1, .window = cases[i].window, .q_block = cases[i].qb, .kv_block = cases[i].kb,
                 .qf = TOPS_FMT_F32, .kf = cases[i].half ? TOPS_FMT_F16 : TOPS_FMT_F32, .of = TOPS_FMT_F32,
                 .strided = (int)(i % 2)};
        check_cfg(&c, -2, 2, 1 + (int)(i % 2));
    }
    cfg c = {.B = 1, .H = 3, .Hkv = 1, .Sq = 250, .Sk = 261, .D = 48, .Dv = 48, .causal = 1,
             .qf = TOPS_FMT_F32, .kf = TOPS_FMT_F32, .of = TOPS_FMT_F32};
    run r;
    run_make(&r, &c, -2, 2);
    tops_attention_desc d = {.causal = 1};
    tops_exec ex = tops_exec_default();
    float *first = malloc((size_t)r.o.n * sizeof(float));
    tops_isa levels[3] = {TOPS_ISA_REF, TOPS_ISA_AVX2, TOPS_ISA_AVX512};
    for (int li = 0; li < 3; li++) {
        const tops__kernels *kern = tops__kernels_for_isa(levels[li]);
        if (!kern) continue;
        for (int threads = 1; threads <= 2; threads++) {
            ex.threads = threads;
            tb_poison(&r.o);
            ASSERT_OK(tops__attention_with(kern, &ex, &d, &r.q.t, &r.k.t, &r.v.t, &r.o.t));
            if (threads == 1)
                memcpy(first, r.o.mem, (size_t)r.o.n * sizeof(float));
            else
                ASSERT_TRUE(memcmp(first, r.o.mem, (size_t)r.o.n * sizeof(float)) == 0);
        }
    }
    free(first);
    run_free(&r);
}

static void test_threads_same_bits(void) {
    cfg c = {.B = 2, .H = 4, .Hkv = 2, .Sq = 300, .Sk = 300, .D = 64, .Dv = 64, .causal = 1,
             .qf = TOPS_FMT_F32, .kf = TOPS_FMT_F32, .of = TOPS_FMT_F32};
    run r;
    run_make(&r, &c, -2, 2);
    tops_attention_desc d = {.causal = 1};
    tops_exec ex = tops_exec_default();
    ex.deterministic = 1;
    float *first = malloc((size_t)r.o.n * sizeof(float));
    for (int threads = 1; threads <= 3; threads++) {
        ex.threads = threads;
        tb_poison(&r.o);
        ASSERT_OK(tops_attention(&ex, &d, &r.q.t, &r.k.t, &r.v.t, &r.o.t));
        if (threads == 1)
            memcpy(first, r.o.mem, (size_t)r.o.n * sizeof(float));
        else
            ASSERT_TRUE(memcmp(first, r.o.mem, (size_t)r.o.n * sizeof(float)) == 0);
    }
    /* Caller scratch (misaligned on purpose) gives the same bits too. */
    size_t bytes = 4 << 20;
    unsigned char *scratch = malloc(bytes + 3);
    ex.scratch = scratch + 3;
    ex.scratch_bytes = bytes;
    ex.threads = 2;
    tb_poison(&r.o);
    ASSERT_OK(tops_attention(&ex, &d, &r.q.t, &r.k.t, &r.v.t, &r.o.t));
    ASSERT_TRUE(memcmp(first, r.o.mem, (size_t)r.o.n * sizeof(float)) == 0);
    free(scratch);
    free(first);
    run_free(&r);
}

/* The peak resident set (VmHWM), after resetting it to the current size
   when the kernel lets us (Linux >= 4.0); -1 if unknown. */
static long hwm_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb;
}
static int reset_hwm(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return 0;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

/* Sk = 65536 keys: the peak RSS may grow by the per-thread tiles (one
   query block) or by those plus one f32 copy of K^T (several query blocks
   share the keys): O(Sk * D), far below the Sq x Sk score matrix (let alone
   Sk x Sk). */
static void long_sequence_case(int64_t sq) {
    cfg c = {.B = 1, .H = 1, .Hkv = 1, .Sq = sq, .Sk = SANITIZED ? 8192 : 65536, .D = 64, .Dv = 64, .causal = 1,
             .qf = TOPS_FMT_F32, .kf = TOPS_FMT_F32, .of = TOPS_FMT_F32};
    run r;
    run_make(&r, &c, -1, 1);
    ref_attention(&c, r.q.vals, r.k.vals, r.v.vals, r.ref, sq / 7 + 1);
    tops_exec ex = tops_exec_default();
    ex.threads = 1;
    tops_attention_desc d = {.causal = 1};
    tb_poison(&r.o);
    int reset = reset_hwm();
    long before = hwm_kb();
    ASSERT_OK(tops_attention(&ex, &d, &r.q.t, &r.k.t, &r.v.t, &r.o.t));
    long grew = hwm_kb() - before;
    int bad;
    double e = max_err(&r, &bad);
    ASSERT_EQ_INT(bad, 0);
    ASSERT_TRUE(e <= 1e-4);
    long scores_kb = (long)(c.Sq * c.Sk * 4 / 1024), keys_kb = (long)(c.D * c.Sk * 4 / 1024);
    printf("  Sq=%lld Sk=%lld: peak RSS grew %ld KiB during the call (Sq x Sk scores: %ld KiB; K as f32: %ld KiB)\n",
           (long long)c.Sq, (long long)c.Sk, grew, scores_kb, keys_kb);
    if (!SANITIZED && reset && before > 0) ASSERT_TRUE(grew < (sq <= 96 ? 2048 : keys_kb + 2048));
    run_free(&r);
}

static void test_long_sequence_memory(void) {
    long_sequence_case(64);  /* one query block: tiles only */
    long_sequence_case(SANITIZED ? 200 : 512); /* keys laid out once */
    /* The per-thread workspace formula does not mention S at all. */
    tops__attention_plan p = {.q_block = 96, .kv_block = 64, .dv = 256};
    ASSERT_TRUE(tops__attention_thread_bytes(&p) < 1024 * 1024);
}

static void test_bad_inputs(void) {
    cfg c = {.B = 1, .H = 2, .Hkv = 1, .Sq = 8, .Sk = 8, .D = 16, .Dv = 16,
             .qf = TOPS_FMT_F32, .kf = TOPS_FMT_F32, .of = TOPS_FMT_F32};
    run r;
    run_make(&r, &c, -1, 1);
    tops_tensor *q = &r.q.t, *k = &r.k.t, *v = &r.v.t, *o = &r.o.t;
    tops_attention_desc d = tops_attention_desc_default();
    tb_poison(&r.o);
    ASSERT_FAILS_WITH(tops_attention(NULL, &d, NULL, k, v, o), TOPS_INVALID_ARGUMENT, "q is NULL");
    ASSERT_FAILS_WITH(tops_attention(NULL, &d, q, k, v, NULL), TOPS_INVALID_ARGUMENT, "out is NULL");
    tops_tensor junk;
    memset(&junk, 0, sizeof junk);
    ASSERT_FAILS_WITH(tops_attention(NULL, &d, q, &junk, v, o), TOPS_INVALID_ARGUMENT, "k was not made");
    tops_exec ex = tops_exec_default();
    ex.threads = 0;
    ASSERT_FAILS_WITH(tops_attention(&ex, &d, q, k, v, o), TOPS_INVALID_ARGUMENT, "threads");
    ex = tops_exec_default();
    ex.device.kind = TOPS_DEVICE_CUDA;
    ex.device.index = 99; /* no such GPU, with or without a CUDA backend */
    ASSERT_FAILS_WITH(tops_attention(&ex, &d, q, k, v, o), TOPS_UNSUPPORTED_ON_DEVICE, "cuda:99");
    tops_attention_desc bad = d;
    bad.causal = 2;
    ASSERT_FAILS_WITH(tops_attention(NULL, &bad, q, k, v, o), TOPS_INVALID_ARGUMENT, "causal");
    bad = d;
    bad.window = -1;
    ASSERT_FAILS_WITH(tops_attention(NULL, &bad, q, k, v, o), TOPS_INVALID_ARGUMENT, "window");
    bad = d;
    bad.scale = NAN;
    ASSERT_FAILS_WITH(tops_attention(NULL, &bad, q, k, v, o), TOPS_INVALID_ARGUMENT, "scale");
    bad.scale = -1;
    ASSERT_FAILS_WITH(tops_attention(NULL, &bad, q, k, v, o), TOPS_INVALID_ARGUMENT, "scale");
    bad = d;
    bad.softcap = INFINITY;
    ASSERT_FAILS_WITH(tops_attention(NULL, &bad, q, k, v, o), TOPS_INVALID_ARGUMENT, "softcap");
    bad = d;
    bad.q_block = 257;
    ASSERT_FAILS_WITH(tops_attention(NULL, &bad, q, k, v, o), TOPS_INVALID_ARGUMENT, "q_block");
    bad = d;
    bad.kv_block = -1;
    ASSERT_FAILS_WITH(tops_attention(NULL, &bad, q, k, v, o), TOPS_INVALID_ARGUMENT, "kv_block");

    /* Shapes. */
    tops_tensor s;
    int64_t st[4] = {0, 0, 0, 0}, sp[4] = {1, 2, 8, 16};
    sp[1] = 1; /* q with one head while k has one: fine; out then mismatches */
    ASSERT_OK(tops_tensor_slice(q, st, sp, &s));
    ASSERT_FAILS_WITH(tops_attention(NULL, &d, &s, k, v, o), TOPS_SHAPE_MISMATCH, "out is");
    int64_t sp2[4] = {1, 1, 7, 16};
    ASSERT_OK(tops_tensor_slice(v, st, sp2, &s));
    ASSERT_FAILS_WITH(tops_attention(NULL, &d, q, k, &s, o), TOPS_SHAPE_MISMATCH, "keys");
    int64_t sp3[4] = {1, 1, 8, 8};
    ASSERT_OK(tops_tensor_slice(k, st, sp3, &s));
    ASSERT_FAILS_WITH(tops_attention(NULL, &d, q, &s, v, o), TOPS_SHAPE_MISMATCH, "head dim");
    tbuf small_q, k3, odd;
    int64_t e8[4] = {1, 2, 8, 8}, e3[3] = {2, 8, 16}, eh[4] = {1, 3, 8, 16};
    ASSERT_TRUE(tb_make(&small_q, TOPS_FMT_F32, 4, e8, NULL, &rng, -1, 1));
    tbuf small_k, small_v, small_o;
    int64_t ek8[4] = {1, 1, 8, 8};
    ASSERT_TRUE(tb_make(&small_k, TOPS_FMT_F32, 4, ek8, NULL, &rng, -1, 1));
    ASSERT_TRUE(tb_make(&small_v, TOPS_FMT_F32, 4, ek8, NULL, &rng, -1, 1));
    ASSERT_TRUE(tb_make(&small_o, TOPS_FMT_F32, 4, e8, NULL, &rng, -1, 1));
    ASSERT_FAILS_WITH(tops_attention(NULL, &d, &small_q.t, &small_k.t, &small_v.t, &small_o.t), TOPS_SHAPE_MISMATCH,
                      "16..256");
    ASSERT_TRUE(tb_make(&k3, TOPS_FMT_F32, 3, e3, NULL, &rng, -1, 1));
    ASSERT_FAILS_WITH(tops_attention(NULL, &d, q, &k3.t, v, o), TOPS_SHAPE_MISMATCH, "rank 3");
    ASSERT_TRUE(tb_make(&odd, TOPS_FMT_F32, 4, eh, NULL, &rng, -1, 1));
    ASSERT_FAILS_WITH(tops_attention(NULL, &d, &odd.t, k, v, o), TOPS_SHAPE_MISMATCH, "out is");
    {
        /* Three query heads over two kv heads. */
        tbuf k2, v2, o3;
        int64_t e2[4] = {1, 2, 8, 16};
        ASSERT_TRUE(tb_make(&k2, TOPS_FMT_F32, 4, e2, NULL, &rng, -1, 1));
        ASSERT_TRUE(tb_make(&v2, TOPS_FMT_F32, 4, e2, NULL, &rng, -1, 1));
        ASSERT_TRUE(tb_make(&o3, TOPS_FMT_F32, 4, eh, NULL, &rng, -1, 1));
        ASSERT_FAILS_WITH(tops_attention(NULL, &d, &odd.t, &k2.t, &v2.t, &o3.t), TOPS_SHAPE_MISMATCH, "multiple");
        tb_free(&k2);
        tb_free(&v2);
        tb_free(&o3);
    }
    /* Formats: quantized q or out are refused. */
    tops_tensor qi8;
    int64_t qe[4] = {1, 2, 8, 16};
    tops_format i8g;
    ASSERT_OK(tops_format_from_name("int8-g16", &i8g));
    ASSERT_OK(tops_tensor_create(i8g, 4, qe, (tops_memory){TOPS_DEVICE_CPU, 0}, &qi8));
    ASSERT_FAILS_WITH(tops_attention(NULL, &d, &qi8, k, v, o), TOPS_UNSUPPORTED_FORMAT, "f32, f16 or bf16");
    ASSERT_FAILS_WITH(tops_attention(NULL, &d, q, k, v, &qi8), TOPS_UNSUPPORTED_FORMAT, "f32, f16 or bf16");
    tops_tensor_destroy(&qi8);
    /* out over q's memory. */
    tops_tensor alias = *o;
    tops_tensor_desc ad;
    memset(&ad, 0, sizeof ad);
    ad.format.id = TOPS_FMT_F32;
    ad.rank = 4;
    for (int i = 0; i < 4; i++) ad.extent[i] = o->extent[i];
    ad.data = r.q.mem;
    ASSERT_OK(tops_tensor_view(&ad, &alias));
    ASSERT_FAILS_WITH(tops_attention(NULL, &d, q, k, v, &alias), TOPS_INVALID_ARGUMENT, "overlaps");
    /* Nothing above wrote the output. */
    for (int64_t i = 0; i < r.o.n; i++) ASSERT_TRUE(isnan(((float *)r.o.mem)[i]));
    tb_free(&small_q);
    tb_free(&small_k);
    tb_free(&small_v);
    tb_free(&small_o);
    tb_free(&k3);
    tb_free(&odd);
    run_free(&r);
}

/* The AMX route (f16/bf16 q, k, v) on every table that has it (emulated
   tiles on any machine): masks, windows, soft-capping, GQA, Sq != Sk,
   ragged lengths around the 32-row and 128-key blocks, head dims 16..256
   (ragged ones padded to the 32-wide tiles), every output dtype, against
   f64 with the f32 path's bounds; then 1 and 3 threads give the same bits. */
static void test_amx_route(void) {
    static const struct {
        int64_t sq, sk, d, dv, h, hkv, window;
        int causal;
        float softcap;
    } cases[] = {
        {1, 1, 64, 64, 2, 1, 0, 0, 0},      {7, 7, 128, 128, 2, 2, 0, 1, 0},    {33, 33, 96, 96, 4, 2, 0, 1, 0},
        {130, 130, 128, 128, 2, 1, 0, 1, 0}, {130, 130, 256, 256, 1, 1, 0, 0, 0}, {17, 300, 64, 48, 3, 1, 0, 1, 0},
        {65, 129, 80, 80, 2, 1, 20, 1, 0},  {200, 200, 64, 64, 2, 2, 40, 0, 0}, {100, 100, 16, 24, 2, 1, 0, 1, 5.0f},
        {1, 257, 128, 128, 8, 2, 0, 1, 0},  {96, 97, 40, 40, 2, 1, 5, 1, 0},    {31, 20, 32, 32, 1, 1, 0, 1, 0},
    };
    static const tops_format_id half[2] = {TOPS_FMT_BF16, TOPS_FMT_F16};
    static const tops_format_id outs[3] = {TOPS_FMT_BF16, TOPS_FMT_F32, TOPS_FMT_F16};
    long before = attn_emu_calls;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (SANITIZED && cases[i].d > 128) continue;
        cfg c = {.B = 1 + (int64_t)(i % 2), .H = cases[i].h, .Hkv = cases[i].hkv, .Sq = cases[i].sq,
                 .Sk = cases[i].sk, .D = cases[i].d, .Dv = cases[i].dv, .causal = cases[i].causal,
                 .window = cases[i].window, .softcap = cases[i].softcap, .scale = i % 4 == 3 ? 0.3f : 0.0f,
                 .qf = half[i % 2], .kf = half[(i / 2) % 2], .of = outs[i % 3], .strided = (int)(i % 2)};
        check_cfg(&c, -2, 2, 1 + (int)(i % 2));
    }
    if (attn_emu_calls == before) TH_FAIL_AT("the AMX route never ran over emulated tiles");
    /* Thread counts: the same bits. */
    cfg c = {.B = 2, .H = 4, .Hkv = 2, .Sq = 150, .Sk = 170, .D = 64, .Dv = 64, .causal = 1,
             .qf = TOPS_FMT_BF16, .kf = TOPS_FMT_F16, .of = TOPS_FMT_F32};
    run r;
    run_make(&r, &c, -2, 2);
    attn_table tables[ATTN_TABLES];
    attn_tables(tables);
    tops_attention_desc d = {.causal = 1};
    tops_exec ex = tops_exec_default();
    float *first = malloc((size_t)r.o.n * sizeof(float));
    for (int li = ATTN_EMU_SCALAR; li < ATTN_TABLES; li++) {
        if (attn_skip(&tables[li], &r.q.t, &r.k.t, &r.v.t, &r.o.t)) continue;
        for (int threads = 1; threads <= 3; threads += 2) {
            ex.threads = threads;
            tb_poison(&r.o);
            ASSERT_OK(tops__attention_with(tables[li].k, &ex, &d, &r.q.t, &r.k.t, &r.v.t, &r.o.t));
            if (threads == 1)
                memcpy(first, r.o.mem, (size_t)r.o.n * sizeof(float));
            else if (memcmp(first, r.o.mem, (size_t)r.o.n * sizeof(float)) != 0)
                TH_FAIL_AT("[%s]: 3 threads gave other bits than 1", tables[li].name);
        }
    }
    free(first);
    run_free(&r);
}

int main(void) {
    rng = th_seed();
    RUN_TEST(test_long_sequence_memory);
    RUN_TEST(test_shapes_against_f64);
    RUN_TEST(test_gqa_mqa_and_dv);
    RUN_TEST(test_quantized_kv);
    RUN_TEST(test_extreme_logits);
    RUN_TEST(test_fully_masked_rows);
    RUN_TEST(test_causal_diagonal_blocks);
    RUN_TEST(test_threads_same_bits);
    RUN_TEST(test_amx_route);
    RUN_TEST(test_bad_inputs);
    TEST_MAIN_END();
}
