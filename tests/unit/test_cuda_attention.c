/* tops_attention on a GPU (src/cuda/attention.cu, attention_decode.cu): bad
   inputs on any machine; on a Hopper GPU, f16 and bf16 against f64 attention
   of the same 16-bit inputs over head dims 32..256, ragged Sq / Sk (Sq > Sk
   too), causal, sliding windows, softcap, GQA / MQA, strided [B, S, H, D]
   tensors, every pipeline variant (debug key attn_pipe), key splits,
   causal tile pairs, persistent CTAs and last-wave splits (attn_qsplit,
   attn_pairs, attn_persist, attn_tail), the decode kernel
   (Sq <= 16) with 16-bit and quantized KV caches (e4m3, e4m3-ch per key and
   per channel, mxfp8, int8-gG, int4-gG), every split count and TMA ring depths (attn_depth),
   NaN-poisoned outputs and repeated runs compared bit for bit.  Without a
   GPU the numeric part skips with one line. */
#define _POSIX_C_SOURCE 200809L /* setenv: the kernel variants are debug keys of TOPS_CUDA_DEBUG */
#include "cuda/attention.h"
#include "cuda_debug.h"
#include "harness.h"
#include "tensorops.h"

#include <math.h>
#include <stdint.h>

static const tops_memory host_mem = {TOPS_DEVICE_CPU, 0};
static const tops_memory gpu0 = {TOPS_DEVICE_CUDA, 0};
static int small_run; /* TOPS_CUDA_TEST_SMALL=1: a few cases (compute-sanitizer) */
static th_rng rng;
static double worst[2]; /* largest rel-L2 seen: f16, bf16 */

typedef struct acase {
    int64_t b, h, hkv, sq, sk, d;
    int causal;
    int64_t window;
    float softcap, scale;
    int bshd; /* q, k, v, out laid out [B, S, H, D] (strided views) */
} acase;

/* The rel-L2 bound the CPU rows use (tools/validate_common.c): 1e-5 plus one
   rounding of the output type. */
static double bound(tops_dtype dt) { return 1e-5 + (dt == TOPS_DT_F16 ? ldexp(1.0, -11) : ldexp(1.0, -8)); }

static void reference(const acase *c, const float *q, const float *k, const float *v, double *out) {
    double *logit = malloc((size_t)c->sk * sizeof(double));
    double scale = c->scale > 0 ? c->scale : 1.0 / sqrt((double)c->d);
    for (int64_t b = 0; b < c->b; b++)
        for (int64_t h = 0; h < c->h; h++)
            for (int64_t i = 0; i < c->sq; i++) {
                int64_t hk = h / (c->h / c->hkv), pos = i + c->sk - c->sq;
                const float *qi = q + ((b * c->h + h) * c->sq + i) * c->d;
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < c->sk; j++) {
                    logit[j] = -INFINITY;
                    if ((c->causal && j > pos) || (c->window > 0 && llabs(j - pos) >= c->window)) continue;
                    const float *kj = k + ((b * c->hkv + hk) * c->sk + j) * c->d;
                    double s = 0;
                    for (int64_t x = 0; x < c->d; x++) s += (double)qi[x] * kj[x];
                    s *= scale;
                    if (c->softcap > 0) s = c->softcap * tanh(s / c->softcap);
                    logit[j] = s;
                    if (s > m) m = s;
                }
                double *o = out + ((b * c->h + h) * c->sq + i) * c->d;
                for (int64_t x = 0; x < c->d; x++) o[x] = 0;
                if (m == -INFINITY) continue;
                for (int64_t j = 0; j < c->sk; j++) {
                    if (logit[j] == -INFINITY) continue;
                    double p = exp(logit[j] - m);
                    sum += p;
                    const float *vj = v + ((b * c->hkv + hk) * c->sk + j) * c->d;
                    for (int64_t x = 0; x < c->d; x++) o[x] += p * vj[x];
                }
                for (int64_t x = 0; x < c->d; x++) o[x] /= sum;
            }
    free(logit);
}

/* A [B, H, S, D] view of n16 16-bit values in device memory; with bshd the
   memory is [B, S, H, D]. */
static void view(tops_dtype dt, void *data, int64_t b, int64_t h, int64_t s, int64_t d, int bshd, tops_tensor *t) {
    tops_tensor_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.format = tops_format_of(dt);
    desc.rank = 4;
    desc.extent[0] = b, desc.extent[1] = h, desc.extent[2] = s, desc.extent[3] = d;
    if (bshd) {
        desc.stride[0] = s * h * d, desc.stride[1] = d, desc.stride[2] = h * d, desc.stride[3] = 1;
    }
    desc.data = data;
    desc.memory = gpu0;
    ASSERT_OK(tops_tensor_view(&desc, t));
}

/* Host [B, H, S, D] floats -> 16-bit in the memory order of view(); back. */
static void to16(tops_dtype dt, const float *x, uint16_t *out, int64_t b, int64_t h, int64_t s, int64_t d, int bshd) {
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < h; j++)
            for (int64_t r = 0; r < s; r++) {
                int64_t src = ((i * h + j) * s + r) * d;
                int64_t dst = bshd ? ((i * s + r) * h + j) * d : src;
                tops_cast_from_f32(dt, out + dst, x + src, d, 0);
            }
}
static void from16(tops_dtype dt, const uint16_t *x, float *out, int64_t b, int64_t h, int64_t s, int64_t d, int bshd) {
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < h; j++)
            for (int64_t r = 0; r < s; r++) {
                int64_t dst = ((i * h + j) * s + r) * d;
                int64_t src = bshd ? ((i * s + r) * h + j) * d : dst;
                tops_cast_to_f32(dt, out + dst, x + src, d);
            }
}

/* One case on the GPU against f64; returns the rel-L2 (NaN on failure). */
static double run_case(const acase *c, tops_dtype dt) {
    int64_t nq = c->b * c->h * c->sq * c->d, nk = c->b * c->hkv * c->sk * c->d;
    float *qf = malloc(nq * 4), *kf = malloc(nk * 4), *vf = malloc(nk * 4), *got = malloc(nq * 4);
    uint16_t *q16 = malloc(nq * 2), *k16 = malloc(nk * 2), *v16 = malloc(nk * 2), *o16 = malloc(nq * 2),
             *o16b = malloc(nq * 2);
    double *ref = malloc(nq * sizeof(double));
    void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL;
    double rel = NAN;
    for (int64_t i = 0; i < nq; i++) qf[i] = th_uniform(&rng, -2.0f, 2.0f);
    for (int64_t i = 0; i < nk; i++) kf[i] = th_uniform(&rng, -2.0f, 2.0f), vf[i] = th_uniform(&rng, -1.0f, 1.0f);
    /* the reference sees the 16-bit values the kernel sees */
    to16(dt, qf, q16, c->b, c->h, c->sq, c->d, 0);
    from16(dt, q16, qf, c->b, c->h, c->sq, c->d, 0);
    to16(dt, kf, k16, c->b, c->hkv, c->sk, c->d, 0);
    from16(dt, k16, kf, c->b, c->hkv, c->sk, c->d, 0);
    to16(dt, vf, v16, c->b, c->hkv, c->sk, c->d, 0);
    from16(dt, v16, vf, c->b, c->hkv, c->sk, c->d, 0);
    reference(c, qf, kf, vf, ref);
    to16(dt, qf, q16, c->b, c->h, c->sq, c->d, c->bshd);
    to16(dt, kf, k16, c->b, c->hkv, c->sk, c->d, c->bshd);
    to16(dt, vf, v16, c->b, c->hkv, c->sk, c->d, c->bshd);
    memset(o16, 0xFF, nq * 2); /* NaN in f16 and bf16 */
    ASSERT_OK(tops_cuda_alloc(0, nq * 2, &dq));
    ASSERT_OK(tops_cuda_alloc(0, nk * 2, &dk));
    ASSERT_OK(tops_cuda_alloc(0, nk * 2, &dv));
    ASSERT_OK(tops_cuda_alloc(0, nq * 2, &dout));
    if (!dq || !dk || !dv || !dout) goto done;
    ASSERT_OK(tops_cuda_copy(dq, gpu0, q16, host_mem, nq * 2, NULL));
    ASSERT_OK(tops_cuda_copy(dk, gpu0, k16, host_mem, nk * 2, NULL));
    ASSERT_OK(tops_cuda_copy(dv, gpu0, v16, host_mem, nk * 2, NULL));
    ASSERT_OK(tops_cuda_copy(dout, gpu0, o16, host_mem, nq * 2, NULL));
    tops_tensor q, k, v, o;
    view(dt, dq, c->b, c->h, c->sq, c->d, c->bshd, &q);
    view(dt, dk, c->b, c->hkv, c->sk, c->d, c->bshd, &k);
    view(dt, dv, c->b, c->hkv, c->sk, c->d, c->bshd, &v);
    view(dt, dout, c->b, c->h, c->sq, c->d, c->bshd, &o);
    tops_exec ex = tops_exec_default();
    ex.device = gpu0;
    tops_attention_desc d = tops_attention_desc_default();
    d.causal = c->causal;
    d.window = c->window;
    d.softcap = c->softcap;
    d.scale = c->scale;
    tops_status st = tops_attention(&ex, &d, &q, &k, &v, &o);
    if (st != TOPS_OK) {
        TH_FAIL_AT("tops_attention: %s", tops_last_error());
        goto done;
    }
    ASSERT_OK(tops_cuda_synchronize(&ex));
    ASSERT_OK(tops_cuda_copy(o16, host_mem, dout, gpu0, nq * 2, NULL));
    /* again: the same bits */
    ASSERT_OK(tops_attention(&ex, &d, &q, &k, &v, &o));
    ASSERT_OK(tops_cuda_copy(o16b, host_mem, dout, gpu0, nq * 2, NULL));
    if (memcmp(o16, o16b, nq * 2) != 0) TH_FAIL_AT("two runs gave different bits");
    from16(dt, o16, got, c->b, c->h, c->sq, c->d, c->bshd);
    double num = 0, den = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < nq; i++) {
        if (!isfinite(got[i])) bad++;
        num += (got[i] - ref[i]) * (got[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (bad) {
        TH_FAIL_AT("%lld non-finite outputs (a row or column never written?)", (long long)bad);
        rel = NAN;
    }
done:
    tops_cuda_free(0, dq), tops_cuda_free(0, dk), tops_cuda_free(0, dv), tops_cuda_free(0, dout);
    free(qf), free(kf), free(vf), free(got), free(q16), free(k16), free(v16), free(o16), free(o16b), free(ref);
    return rel;
}

static void check_case(const acase *c, tops_dtype dt) {
    double rel = run_case(c, dt);
    int bf = dt == TOPS_DT_BF16;
    if (getenv("TOPS_TEST_VERBOSE"))
        printf("  %s B%lld H%lld/%lld Sq%lld Sk%lld D%lld causal %d: rel-L2 %.3g\n", bf ? "bf16" : "f16", (long long)c->b,
               (long long)c->h, (long long)c->hkv, (long long)c->sq, (long long)c->sk, (long long)c->d, c->causal, rel);
    if (rel > worst[bf]) worst[bf] = rel;
    if (!(rel <= bound(dt)))
        TH_FAIL_AT("%s B%lld H%lld/%lld Sq%lld Sk%lld D%lld causal %d window %lld softcap %g bshd %d: rel-L2 %.3g > %.3g",
                   bf ? "bf16" : "f16", (long long)c->b, (long long)c->h, (long long)c->hkv, (long long)c->sq,
                   (long long)c->sk, (long long)c->d, c->causal, (long long)c->window, (double)c->softcap, c->bshd,
                   rel, bound(dt));
}

/* ---- any machine ------------------------------------------------------------ */

static void test_bad_inputs(void) {
    /* host tensors with exec.device = cuda: refused before any launch */
    int64_t e[4] = {1, 2, 8, 64};
    tops_tensor q, k, v, o;
    ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F16), 4, e, host_mem, &q));
    ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F16), 4, e, host_mem, &k));
    ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F16), 4, e, host_mem, &v));
    ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F16), 4, e, host_mem, &o));
    tops_exec ex = tops_exec_default();
    ex.device = gpu0;
    tops_attention_desc d = tops_attention_desc_default();
    int n = 0;
    tops_cuda_device_count(&n);
    if (n > 0)
        ASSERT_FAILS_WITH(tops_attention(&ex, &d, &q, &k, &v, &o), TOPS_INVALID_ARGUMENT, "host memory");
    else
        ASSERT_STATUS(tops_attention(&ex, &d, &q, &k, &v, &o), TOPS_UNSUPPORTED_ON_DEVICE);
    if (tops_get_build_info().cuda) {
        /* TOPS_CUDA_DEBUG is checked before the device and the tensors: an
           attention key with a value it does not take, or an unknown key, is
           refused, not ignored; valid keys pass on to the next check */
        static const char *const bad[] = {"attn_pipe=3", "attn_qsplit=x", "attn_splits=-1", "attn_ring", "attn_decod=0"};
        for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
            debug_replace("attn_", bad[i]);
            ASSERT_FAILS_WITH(tops_attention(&ex, &d, &q, &k, &v, &o), TOPS_INVALID_ARGUMENT, "TOPS_CUDA_DEBUG");
        }
        debug_replace("attn_", "attn_pipe=2,attn_splits=5,attn_decode=0");
        ASSERT_TRUE(tops_attention(&ex, &d, &q, &k, &v, &o) != TOPS_OK);
        ASSERT_TRUE(strstr(tops_last_error(), "TOPS_CUDA_DEBUG") == NULL);
        debug_replace("attn_", NULL);
    }
    /* descriptor checks come first, on any machine */
    d.window = -1;
    ASSERT_FAILS_WITH(tops_attention(&ex, &d, &q, &k, &v, &o), TOPS_INVALID_ARGUMENT, "window");
    tops_tensor_destroy(&q), tops_tensor_destroy(&k), tops_tensor_destroy(&v), tops_tensor_destroy(&o);
}

/* ---- on a GPU ------------------------------------------------------------------- */

static void test_gpu_unsupported(void) {
    /* each refusal names its reason; nothing launches */
    void *buf[6] = {0};
    for (int i = 0; i < 6; i++) ASSERT_OK(tops_cuda_alloc(0, 2 * 64 * 64 * 4, &buf[i]));
    if (!buf[5]) return;
    tops_tensor q, k, v, o, v32, o32, q32;
    view(TOPS_DT_F16, buf[0], 1, 2, 64, 64, 0, &q);
    view(TOPS_DT_F16, buf[1], 1, 2, 64, 64, 0, &k);
    view(TOPS_DT_F16, buf[2], 1, 2, 64, 64, 0, &v);
    view(TOPS_DT_F16, buf[3], 1, 2, 64, 64, 0, &o);
    view(TOPS_DT_F16, buf[4], 1, 2, 64, 32, 0, &v32);
    view(TOPS_DT_F16, buf[5], 1, 2, 64, 32, 0, &o32);
    view(TOPS_DT_F32, buf[5], 1, 2, 64, 64, 0, &q32);
    tops_exec ex = tops_exec_default();
    ex.device = gpu0;
    tops_attention_desc d = tops_attention_desc_default();
    ASSERT_FAILS_WITH(tops_attention(&ex, &d, &q32, &k, &v, &o), TOPS_UNSUPPORTED_ON_DEVICE, "f16 or bf16");
    ASSERT_FAILS_WITH(tops_attention(&ex, &d, &q, &k, &v, &q32), TOPS_UNSUPPORTED_ON_DEVICE, "share one type");
    ASSERT_FAILS_WITH(tops_attention(&ex, &d, &q, &k, &v32, &o32), TOPS_UNSUPPORTED_ON_DEVICE, "differ");
    /* keys whose head dimension is not contiguous: [1, 2, 32, 64] read transposed */
    tops_tensor_desc kd;
    memset(&kd, 0, sizeof kd);
    kd.format = tops_format_of(TOPS_DT_F16);
    kd.rank = 4;
    kd.extent[0] = 1, kd.extent[1] = 2, kd.extent[2] = 32, kd.extent[3] = 64;
    kd.stride[0] = 2 * 64 * 64, kd.stride[1] = 64 * 64, kd.stride[2] = 1, kd.stride[3] = 64;
    kd.data = buf[1];
    kd.memory = gpu0;
    tops_tensor kt;
    ASSERT_OK(tops_tensor_view(&kd, &kt));
    tops_tensor qh, oh;
    view(TOPS_DT_F16, buf[0], 1, 2, 32, 64, 0, &qh);
    view(TOPS_DT_F16, buf[3], 1, 2, 32, 64, 0, &oh);
    ASSERT_FAILS_WITH(tops_attention(&ex, &d, &qh, &kt, &kt, &oh), TOPS_UNSUPPORTED_ON_DEVICE, "contiguous");
    /* a base TMA cannot read (2-byte aligned) */
    tops_tensor qm;
    view(TOPS_DT_F16, (char *)buf[0] + 2, 1, 2, 32, 64, 0, &qm);
    ASSERT_FAILS_WITH(tops_attention(&ex, &d, &qm, &k, &v, &oh), TOPS_UNSUPPORTED_ON_DEVICE, "16-byte");
    /* host memory with a GPU exec */
    static uint16_t hostq[2 * 64 * 64];
    tops_tensor_desc hd;
    memset(&hd, 0, sizeof hd);
    hd.format = tops_format_of(TOPS_DT_F16);
    hd.rank = 4;
    hd.extent[0] = 1, hd.extent[1] = 2, hd.extent[2] = 64, hd.extent[3] = 64;
    hd.data = hostq;
    tops_tensor hq;
    ASSERT_OK(tops_tensor_view(&hd, &hq));
    ASSERT_FAILS_WITH(tops_attention(&ex, &d, &hq, &k, &v, &o), TOPS_INVALID_ARGUMENT, "host memory");
    for (int i = 0; i < 6; i++) tops_cuda_free(0, buf[i]);
}

static void test_shapes(void) {
    const acase cases[] = {
        /* b h hkv sq sk d causal window softcap scale bshd */
        {1, 2, 2, 128, 128, 128, 0, 0, 0, 0, 0},
        {1, 2, 1, 1, 1, 64, 0, 0, 0, 0, 0},
        {2, 4, 2, 7, 33, 64, 1, 0, 0, 0, 0},
        {1, 3, 1, 129, 200, 128, 0, 0, 0, 0, 0},
        {1, 2, 2, 300, 300, 128, 1, 0, 0, 0, 0},
        {2, 2, 1, 200, 50, 64, 1, 0, 0, 0, 0}, /* Sq > Sk: the first rows see no key */
        {1, 2, 2, 64, 1000, 128, 1, 0, 0, 0, 0},
        {1, 4, 4, 257, 300, 96, 1, 0, 0, 0, 1},
        {1, 2, 1, 200, 333, 256, 1, 0, 0, 0, 0},
        {1, 2, 2, 130, 260, 256, 0, 0, 0, 0, 1},
        {1, 2, 2, 100, 100, 32, 0, 0, 0, 0, 0},
        {1, 2, 2, 333, 333, 128, 1, 48, 0, 0, 0},  /* sliding window */
        {1, 2, 2, 200, 260, 64, 0, 70, 0, 0, 0},   /* two-sided window */
        {1, 2, 1, 150, 150, 128, 1, 0, 30.0f, 0, 1}, /* softcap */
        {1, 2, 2, 90, 400, 80, 0, 0, 0, 0.3f, 0},  /* explicit scale */
        {1, 8, 1, 16, 700, 128, 1, 0, 0, 0, 0},    /* MQA, decode-like */
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    if (small_run) n = 3;
    for (int i = 0; i < n; i++) {
        check_case(&cases[i], TOPS_DT_F16);
        check_case(&cases[i], TOPS_DT_BF16);
    }
}

/* Every pipeline variant on a few shapes (serial, overlapped, ping-pong).
   The first has more CTAs (8 x 20) than an H200 has SMs, some of them with
   no visible key (Sq > Sk, causal). */
static void test_pipelines(void) {
    const acase cases[] = {
        {1, 20, 5, 1000, 300, 64, 1, 0, 0, 0, 0},
        {1, 2, 2, 300, 300, 128, 1, 0, 0, 0, 0},
        {2, 2, 1, 257, 513, 64, 0, 0, 0, 0, 1},
        {1, 2, 2, 200, 333, 256, 1, 0, 0, 0, 0},
        {1, 2, 2, 333, 333, 128, 1, 48, 20.0f, 0, 0},
    };
    const char *modes[] = {"0", "1", "2"};
    for (int m = 0; m < 3; m++) {
        debug_set("attn_pipe", modes[m]);
        for (int i = 0; i < (small_run ? 1 : 5); i++) check_case(&cases[i], i % 2 ? TOPS_DT_BF16 : TOPS_DT_F16);
    }
    debug_set("attn_pipe", NULL);
}

/* For each value of debug key `key`: whether the kernel path of an f16
   call (B 1, H 2, S 1000, D 128, causal or not) names `word` as named[i]
   says. */
static void check_path_name(const char *key, const char *const *values, const int *named, int n, const char *word,
                            int causal) {
    void *buf = NULL;
    const int64_t elems = 2 * 1000 * 128;
    ASSERT_OK(tops_cuda_alloc(0, 4 * elems * 2, &buf));
    if (!buf) return;
    tops_tensor t[4];
    for (int i = 0; i < 4; i++) view(TOPS_DT_F16, (char *)buf + i * elems * 2, 1, 2, 1000, 128, 0, &t[i]);
    tops_exec ex = tops_exec_default();
    ex.device = gpu0;
    tops_attention_desc d = tops_attention_desc_default();
    d.causal = causal;
    for (int m = 0; m < n; m++) {
        debug_set(key, values[m]);
        char name[128] = "";
        ASSERT_OK(tops__cuda_attention_path(&ex, &d, &t[0], &t[1], &t[2], &t[3], name, sizeof name));
        if ((strstr(name, word) != NULL) != (named[m] != 0)) TH_FAIL_AT("%s=%s named %s", key, values[m], name);
    }
    tops_cuda_free(0, buf);
}

/* Key splits of the heaviest causal tiles (debug key attn_qsplit): off,
   the plan's rule (it splits these small grids) and every tile of two or
   more key blocks; Sq > Sk (rows with no key: both pieces empty), Sq < Sk,
   ragged tiles, GQA, D = 64 / 128 / 256 (64-key blocks), strided rows, every
   pipeline.  run_case checks the bits of a rerun (the merge's order). */
static void test_key_splits(void) {
    const acase cases[] = {
        {1, 2, 2, 1000, 1000, 128, 1, 0, 0, 0, 0},
        {1, 4, 2, 700, 1500, 64, 1, 0, 0, 0, 1},
        {2, 2, 1, 900, 400, 128, 1, 0, 0, 0, 0}, /* Sq > Sk: the first rows see no key */
        {1, 2, 2, 520, 520, 256, 1, 0, 0, 0, 0},
        {1, 3, 3, 384, 384, 96, 1, 0, 15.0f, 0, 0},
    };
    static const char *const modes[] = {"0", "1", "2"}, *const pipes[] = {"2", "1", "0"};
    int n = small_run ? 2 : (int)(sizeof cases / sizeof cases[0]);
    for (int m = 0; m < 3; m++)
        for (int i = 0; i < n; i++) {
            debug_set("attn_qsplit", modes[m]);
            debug_set("attn_pipe", pipes[(m + i) % 3]);
            check_case(&cases[i], (m + i) % 2 ? TOPS_DT_BF16 : TOPS_DT_F16);
        }
    debug_set("attn_pipe", NULL);
    /* The path names the split where the plan takes it. */
    static const int split_named[] = {0, 1, 1};
    check_path_name("attn_qsplit", modes, split_named, 3, "split", 1);
    debug_set("attn_qsplit", NULL);
}

/* Persistent CTAs (debug key attn_persist=3: at most three CTAs, so each
   takes several units in turn, the Q buffer and the K / V ring carried
   from one to the next): non-causal tiles (ragged, GQA, Sq < Sk and > Sk,
   D = 64 / 96 / 128 / 256, softcap, strided rows) and causal pairs, every
   pipeline; the path names it where it applies (not on causal calls
   without pairs, whose tiles differ in cost), not with =0. */
static void test_persistent(void) {
    const acase cases[] = {
        {1, 4, 2, 1000, 700, 128, 0, 0, 0, 0, 0},
        {2, 3, 1, 333, 900, 64, 0, 0, 0, 0, 1},
        {1, 2, 2, 650, 1300, 256, 1, 0, 0, 0, 0}, /* causal: pairs (PAIRS=2) */
        {1, 3, 3, 1000, 520, 96, 0, 0, 12.0f, 0, 0},
        {2, 2, 1, 900, 400, 128, 1, 0, 0, 0, 1},  /* causal pairs, rows with no key */
    };
    static const char *const pipes[] = {"2", "1", "0"};
    debug_set("attn_persist", "3");
    debug_set("attn_pairs", "2");
    debug_set("attn_qsplit", "0");
    int n = small_run ? 2 : (int)(sizeof cases / sizeof cases[0]);
    for (int m = 0; m < (small_run ? 1 : 3); m++)
        for (int i = 0; i < n; i++) {
            debug_set("attn_pipe", pipes[(m + i) % 3]);
            check_case(&cases[i], (m + i) % 2 ? TOPS_DT_BF16 : TOPS_DT_F16);
        }
    debug_set("attn_pipe", NULL);
    static const char *const modes[] = {"3", "0"};
    static const int named[] = {1, 0};
    check_path_name("attn_persist", modes, named, 2, "persistent", 1); /* causal pairs */
    debug_set("attn_pairs", NULL);
    static const int unnamed[] = {0, 0};
    check_path_name("attn_persist", modes, unnamed, 2, "persistent", 1); /* causal, no pairs */
    debug_set("attn_persist", NULL);
    debug_set("attn_qsplit", NULL);
}

/* Last-wave splits: persistent grids of N CTAs (attn_persist=N)
   whose last round holds r <= N / 2 non-causal tiles, which then run as two
   key pieces each, merged by the second to end (run_case checks a rerun's
   bits: the merge's order); ragged tiles, GQA, Sq < Sk and > Sk, D = 64 / 96
   / 128 / 256, softcap, strided rows, every pipeline.  The path names it
   where the rule applies, not with attn_tail=0. */
static void test_tail_split(void) {
    const struct {
        acase c;
        const char *persist;
    } cases[] = {
        {{1, 4, 2, 1000, 700, 128, 0, 0, 0, 0, 0}, "5"},      /* 32 tiles on 5 CTAs: 2 split */
        {{2, 3, 1, 333, 900, 64, 0, 0, 0, 0, 1}, "8"},        /* 18 on 8: 2 */
        {{1, 3, 3, 1000, 520, 96, 0, 0, 12.0f, 0, 0}, "7"},   /* 24 on 7: 3 */
        {{1, 2, 2, 650, 1300, 256, 0, 0, 0, 0, 0}, "5"},      /* 12 on 5: 2, 64-key blocks */
        {{2, 2, 1, 900, 400, 128, 0, 0, 0, 0, 1}, "6"},       /* 32 on 6: 2, Sq > Sk */
    };
    static const char *const pipes[] = {"2", "1", "0"};
    int n = small_run ? 1 : (int)(sizeof cases / sizeof cases[0]);
    for (int m = 0; m < (small_run ? 1 : 3); m++)
        for (int i = 0; i < n; i++) {
            debug_set("attn_persist", cases[i].persist);
            debug_set("attn_pipe", pipes[(m + i) % 3]);
            check_case(&cases[i].c, (m + i) % 2 ? TOPS_DT_BF16 : TOPS_DT_F16);
        }
    debug_set("attn_pipe", NULL);
    /* 16 tiles: on 7 or 3 CTAs 2 or 1 left for the last round (split), on 6
       four (more than half: not split), on 16 none */
    static const char *const grids[] = {"7", "3", "6", "16"};
    static const int named[] = {1, 1, 0, 0};
    check_path_name("attn_persist", grids, named, 4, "last wave", 0);
    debug_set("attn_tail", "0");
    static const int off[] = {0, 0, 0, 0};
    check_path_name("attn_persist", grids, off, 4, "last wave", 0);
    debug_set("attn_tail", NULL);
    debug_set("attn_persist", NULL);
}

/* Causal tiles in pairs (debug key attn_pairs=2, key splits off): a CTA
   takes tiles T - 1 - q and q (the Q buffer and the K / V ring carried from
   one to the next); T odd and even, Sq > Sk (rows with no key), Sq < Sk,
   GQA, D = 64 / 128 / 256, strided rows, every pipeline; the path names it. */
static void test_causal_pairs(void) {
    const acase cases[] = {
        {1, 3, 1, 1000, 1000, 128, 1, 0, 0, 0, 0}, /* T = 8 */
        {2, 2, 2, 900, 400, 64, 1, 0, 0, 0, 1},    /* T = 8, Sq > Sk */
        {1, 2, 1, 650, 1300, 256, 1, 0, 0, 0, 0},  /* T = 6, Sq < Sk */
        {1, 4, 2, 333, 333, 96, 1, 0, 12.0f, 0, 0}, /* T = 3: the middle tile alone */
    };
    static const char *const pipes[] = {"2", "1", "0"};
    debug_set("attn_pairs", "2");
    debug_set("attn_qsplit", "0");
    int n = small_run ? 1 : (int)(sizeof cases / sizeof cases[0]);
    for (int m = 0; m < 3; m++)
        for (int i = 0; i < n; i++) {
            debug_set("attn_pipe", pipes[(m + i) % 3]);
            check_case(&cases[i], (m + i) % 2 ? TOPS_DT_BF16 : TOPS_DT_F16);
        }
    debug_set("attn_pipe", NULL);
    static const char *const modes[] = {"2", "0"};
    static const int pairs_named[] = {1, 0};
    check_path_name("attn_pairs", modes, pairs_named, 2, "pairs", 1);
    debug_set("attn_pairs", NULL);
    debug_set("attn_qsplit", NULL);
}

/* ---- decode with quantized KV caches ------------------------------------------ */

/* Whether make_kv leaves the decoded values unrounded (run_qcase rounds
   them once it knows the kernel); the kernel run_qcase's call took. */
static int exact_kv;
static char kernel[128];

/* vals[0 .. n) rounded to dt (16-bit) and back to f32. */
static void round_to(tops_dtype dt, float *vals, int64_t n) {
    uint16_t *h = malloc((size_t)n * 2);
    tops_cast_from_f32(dt, h, vals, n, 0);
    tops_cast_to_f32(dt, vals, h, n);
    free(h);
}

/* f32 [B, Hkv, Sk, D] values -> a tensor of format name on the host (codes
   from tops_quantize); vals becomes the decoded values rounded to dt, what
   the kernel multiplies (per-channel scales, exact_kv: the decoded values,
   unrounded). */
static void make_kv_rank(const char *name, int per_channel, tops_dtype dt, float *vals, int rank, const int64_t *e,
                         tops_tensor *host) {
    tops_format f;
    if (strcmp(name, "kv16") == 0) name = dt == TOPS_DT_BF16 ? "bf16" : "f16"; /* q's own type */
    ASSERT_OK(tops_format_from_name(name, &f));
    tops_tensor src, dec;
    tops_tensor_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.format = tops_format_of(TOPS_DT_F32);
    sd.rank = rank;
    memcpy(sd.extent, e, (size_t)rank * sizeof(int64_t));
    sd.data = vals;
    ASSERT_OK(tops_tensor_view(&sd, &src));
    if (per_channel) {
        /* e4m3-ch blocked along the sequence: one f32 scale per (b, h, d) */
        int64_t n = e[0] * e[1] * e[2] * e[3], ns = e[0] * e[1] * e[3];
        tops_tensor_desc qd;
        memset(&qd, 0, sizeof qd);
        qd.format = f;
        qd.rank = 4;
        memcpy(qd.extent, e, sizeof qd.extent);
        qd.data = calloc((size_t)n, 1);
        qd.scales.data = calloc((size_t)ns, sizeof(float));
        qd.scales.dtype = TOPS_DT_F32;
        qd.scales.block[0] = 1, qd.scales.block[1] = 1, qd.scales.block[2] = e[2], qd.scales.block[3] = 1;
        ASSERT_OK(tops_tensor_view(&qd, host));
    } else {
        ASSERT_OK(tops_tensor_create(f, rank, e, host_mem, host));
    }
    tops_quantize_opts qo;
    memset(&qo, 0, sizeof qo);
    qo.scale_from_data = 1;
    ASSERT_OK(tops_quantize(&src, host, &qo));
    ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F32), rank, e, host_mem, &dec));
    ASSERT_OK(tops_dequantize(host, &dec));
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= e[i];
    memcpy(vals, dec.data, (size_t)n * sizeof(float));
    if (!per_channel && !exact_kv) round_to(dt, vals, n);
    tops_tensor_destroy(&dec);
}

/* The decoded K and V values (exact_kv) as the kernel named in `kernel`
   multiplies them: kt_kernel the exact decoded values; ring_kernel code x
   scale, rounded to f16 with f16 q, exact with bf16 q; decode_kernel
   ("mma") rounded to q's type; e4m3 codes (every e4m3 is a bf16 and an f16)
   with the tensor scale applied after the sums, and per-channel scales
   multiplying q instead, unrounded. */
static void round_for_kernel(const char *fmt, int per_channel, tops_dtype dt, float *kf, float *vf, int64_t nk) {
    if (per_channel || strcmp(fmt, "e4m3") == 0 || strstr(kernel, " kt ") ||
        (strstr(kernel, " ring ") && dt == TOPS_DT_BF16))
        return;
    round_to(dt, kf, nk);
    round_to(dt, vf, nk);
}

static void make_kv(const char *name, int per_channel, tops_dtype dt, float *vals, const int64_t *e, tops_tensor *host) {
    make_kv_rank(name, per_channel, dt, vals, 4, e, host);
}

typedef struct qcase {
    acase c;
    const char *fmt;
    int per_channel;
    int splits; /* debug key attn_splits, 0: the library's */
} qcase;

static double run_qcase(const qcase *qc, tops_dtype dt) {
    const acase *c = &qc->c;
    int64_t nq = c->b * c->h * c->sq * c->d, nk = c->b * c->hkv * c->sk * c->d;
    int64_t qe[4] = {c->b, c->h, c->sq, c->d}, ke[4] = {c->b, c->hkv, c->sk, c->d};
    float *qf = malloc(nq * 4), *kf = malloc(nk * 4), *vf = malloc(nk * 4), *got = malloc(nq * 4);
    uint16_t *q16 = malloc(nq * 2), *o16 = malloc(nq * 2), *o16b = malloc(nq * 2);
    double *ref = malloc(nq * sizeof(double));
    void *dq = NULL, *dout = NULL;
    double rel = NAN;
    for (int64_t i = 0; i < nq; i++) qf[i] = th_uniform(&rng, -2.0f, 2.0f);
    /* key rows and 16-element groups of different magnitudes (K 1/2..2, V 1/4..4): with uniform
       data every group's scale is nearly the same, and a scale read for the wrong key or group
       would go unseen */
    for (int64_t i = 0; i < nk; i++) {
        const int j = (int)((i / c->d) % c->sk), g = (int)((i % c->d) / 16);
        kf[i] = th_uniform(&rng, -2.0f, 2.0f) * ldexpf(1.0f, (j + g) % 3 - 1);
        vf[i] = th_uniform(&rng, -1.0f, 1.0f) * ldexpf(1.0f, (3 * j + g) % 5 - 2);
    }
    to16(dt, qf, q16, c->b, c->h, c->sq, c->d, 0);
    from16(dt, q16, qf, c->b, c->h, c->sq, c->d, 0);
    tops_tensor kh, vh, kg, vg;
    exact_kv = 1;
    make_kv(qc->fmt, qc->per_channel, dt, kf, ke, &kh);
    make_kv(qc->fmt, qc->per_channel, dt, vf, ke, &vh);
    exact_kv = 0;
    ASSERT_OK(tops_tensor_to(&kh, gpu0, &kg));
    ASSERT_OK(tops_tensor_to(&vh, gpu0, &vg));
    memset(o16, 0xFF, nq * 2);
    ASSERT_OK(tops_cuda_alloc(0, nq * 2, &dq));
    ASSERT_OK(tops_cuda_alloc(0, nq * 2, &dout));
    ASSERT_OK(tops_cuda_copy(dq, gpu0, q16, host_mem, nq * 2, NULL));
    ASSERT_OK(tops_cuda_copy(dout, gpu0, o16, host_mem, nq * 2, NULL));
    tops_tensor q, o;
    view(dt, dq, qe[0], qe[1], qe[2], qe[3], 0, &q);
    view(dt, dout, qe[0], qe[1], qe[2], qe[3], 0, &o);
    tops_exec ex = tops_exec_default();
    ex.device = gpu0;
    tops_attention_desc d = tops_attention_desc_default();
    d.causal = c->causal;
    d.window = c->window;
    d.softcap = c->softcap;
    d.scale = c->scale;
    char sp[16];
    snprintf(sp, sizeof sp, "%d", qc->splits);
    if (qc->splits) debug_set("attn_splits", sp);
    /* The reference multiplies what the kernel does (round_for_kernel) */
    ASSERT_OK(tops__cuda_attention_path(&ex, &d, &q, &kg, &vg, &o, kernel, sizeof kernel));
    round_for_kernel(qc->fmt, qc->per_channel, dt, kf, vf, nk);
    reference(c, qf, kf, vf, ref);
    tops_status st = tops_attention(&ex, &d, &q, &kg, &vg, &o);
    if (st != TOPS_OK) {
        TH_FAIL_AT("tops_attention kv %s: %s", qc->fmt, tops_last_error());
        goto done;
    }
    ASSERT_OK(tops_cuda_synchronize(&ex));
    ASSERT_OK(tops_cuda_copy(o16, host_mem, dout, gpu0, nq * 2, NULL));
    ASSERT_OK(tops_attention(&ex, &d, &q, &kg, &vg, &o));
    ASSERT_OK(tops_cuda_copy(o16b, host_mem, dout, gpu0, nq * 2, NULL));
    if (memcmp(o16, o16b, nq * 2) != 0) TH_FAIL_AT("kv %s: two runs gave different bits", qc->fmt);
    from16(dt, o16, got, c->b, c->h, c->sq, c->d, 0);
    double num = 0, den = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < nq; i++) {
        if (!isfinite(got[i])) bad++;
        num += (got[i] - ref[i]) * (got[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (bad) {
        TH_FAIL_AT("kv %s: %lld non-finite outputs", qc->fmt, (long long)bad);
        rel = NAN;
    }
done:
    debug_set("attn_splits", NULL);
    if (qc->per_channel) {
        free(kh.data), free(kh.scales.data), free(vh.data), free(vh.scales.data);
    } else {
        tops_tensor_destroy(&kh), tops_tensor_destroy(&vh);
    }
    tops_tensor_destroy(&kg), tops_tensor_destroy(&vg);
    tops_cuda_free(0, dq), tops_cuda_free(0, dout);
    free(qf), free(kf), free(vf), free(got), free(q16), free(o16), free(o16b), free(ref);
    return rel;
}

static void test_decode_kv(void) {
    const qcase cases[] = {
        /* b h hkv sq sk d causal window softcap scale bshd; format, per-channel, splits */
        {{2, 32, 8, 1, 1000, 128, 0, 0, 0, 0, 0}, "kv16", 0, 0},
        {{2, 32, 8, 1, 1000, 128, 0, 0, 0, 0, 0}, "int4-g32", 0, 0},
        {{1, 8, 2, 5, 333, 128, 1, 0, 0, 0, 0}, "int8-g32", 0, 3},
        {{3, 4, 4, 1, 1, 64, 0, 0, 0, 0, 0}, "e4m3-ch", 0, 0},
        {{1, 4, 1, 16, 777, 128, 1, 0, 0, 0, 0}, "e4m3", 0, 5},
        {{2, 6, 2, 3, 250, 256, 1, 0, 0, 0, 0}, "mxfp8", 0, 0},
        {{1, 8, 4, 2, 4100, 128, 1, 0, 0, 0, 0}, "int4-g128", 0, 0},
        {{1, 4, 2, 7, 300, 64, 1, 40, 0, 0, 0}, "int4-g16", 0, 2},
        {{1, 4, 2, 1, 513, 128, 0, 0, 25.0f, 0, 0}, "int8-g16:bf16", 0, 7},
        {{2, 8, 2, 4, 97, 128, 1, 0, 0, 0, 0}, "e4m3-ch", 1, 0},
        {{1, 16, 1, 9, 1200, 64, 1, 0, 0, 0.2f, 0}, "int4-g64:f32", 0, 0},
        {{1, 4, 2, 16, 31, 256, 1, 0, 0, 0, 0}, "int4-g32", 0, 0},
        {{1, 2, 2, 3, 2, 128, 1, 0, 0, 0, 0}, "int8-g32", 0, 0}, /* Sq > Sk: rows see no key */
        /* the ring kernel's shapes: every format and D, splits, windows, one group a key */
        {{4, 32, 8, 1, 2100, 128, 0, 0, 0, 0, 0}, "int4-g32", 0, 0},
        {{4, 32, 8, 1, 2100, 128, 0, 0, 0, 0, 0}, "e4m3", 0, 0},
        {{2, 16, 4, 1, 1500, 128, 0, 0, 0, 0, 0}, "int8-g32", 0, 1},
        {{2, 16, 4, 1, 1500, 128, 0, 0, 0, 0, 0}, "int4-g32", 0, 6},
        {{2, 16, 4, 1, 1500, 128, 0, 0, 0, 0, 0}, "int4-g32", 0, 16},
        {{1, 8, 2, 3, 900, 64, 1, 100, 0, 0, 0}, "int8-g32", 0, 2},
        {{1, 8, 2, 2, 650, 64, 1, 77, 0, 0, 0}, "int4-g32", 0, 3},
        {{1, 4, 1, 1, 300, 256, 0, 0, 0, 0, 0}, "e4m3", 0, 0},
        {{1, 4, 1, 1, 300, 256, 0, 0, 0, 0, 0}, "int8-g64", 0, 0},
        {{2, 8, 2, 2, 1000, 128, 1, 0, 0, 0, 0}, "int4-g128", 0, 0},
        {{2, 8, 2, 1, 1000, 128, 0, 0, 0, 0, 0}, "mxfp8", 0, 4},
        {{1, 16, 1, 1, 333, 64, 0, 0, 30.0f, 0, 0}, "int4-g64", 0, 0},
        {{1, 32, 2, 1, 17, 128, 0, 0, 0, 0, 0}, "int4-g32", 0, 0},
        /* kt_kernel: a group a chunk of int8, one group a key, 8 rows a kv head */
        {{2, 8, 2, 1, 700, 128, 0, 0, 0, 0, 0}, "int8-g16", 0, 0},
        {{1, 4, 1, 3, 500, 256, 1, 0, 0, 0, 0}, "int4-g256", 0, 2},
        {{1, 16, 2, 1, 900, 128, 0, 0, 0, 0, 0}, "int4-g64", 0, 0},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    if (small_run) n = 4;
    /* every case on the default kernels, on decode_kernel alone (debug key attn_ring=0),
       bf16 on the ring kernel wherever it can run (attn_ring=2), and bf16 with
       kt_kernel's TMA stages one and eight deep (attn_depth=1, 8: at most the ring's) */
    static const char *const keys[5] = {NULL, "attn_ring", "attn_ring", "attn_depth", "attn_depth"};
    static const char *const passes[5] = {NULL, "0", "2", "1", "8"};
    static const char *const names[5] = {"", " (decode_kernel)", " (ring)", " (depth 1)", " (depth 8)"};
    for (int pass = 0; pass < 5; pass++)
        for (int i = 0; i < n; i++)
            for (int di = pass >= 2; di < 2; di++) {
                tops_dtype dt = di ? TOPS_DT_BF16 : TOPS_DT_F16;
                const qcase *qc = &cases[i];
                /* pass 2: the formats the ring kernel takes (f16 group scales, groups of a 16-byte chunk) */
                if (pass == 2 && (strchr(qc->fmt, ':') || strcmp(qc->fmt, "kv16") == 0 || strcmp(qc->fmt, "mxfp8") == 0 ||
                                  strcmp(qc->fmt, "int4-g16") == 0))
                    continue;
                if (keys[pass]) debug_set(keys[pass], passes[pass]);
                double rel = run_qcase(qc, dt);
                if (keys[pass]) debug_set(keys[pass], NULL);
                /* per-channel scales multiply q (rounded) instead of k: twice the bound */
                double bd = bound(dt) * (qc->per_channel ? 2 : 1);
                if (getenv("TOPS_TEST_VERBOSE"))
                    printf("  decode kv %s%s %s B%lld H%lld/%lld Sq%lld Sk%lld D%lld: rel-L2 %.3g (%s)\n", qc->fmt,
                           names[pass], di ? "bf16" : "f16", (long long)qc->c.b, (long long)qc->c.h, (long long)qc->c.hkv,
                           (long long)qc->c.sq, (long long)qc->c.sk, (long long)qc->c.d, rel, kernel);
                if (rel > worst[di]) worst[di] = rel;
                if (!(rel <= bd))
                    TH_FAIL_AT("decode kv %s%s%s %s B%lld H%lld/%lld Sq%lld Sk%lld D%lld causal %d: rel-L2 %.3g > %.3g", qc->fmt,
                               names[pass],
                               qc->per_channel ? " (per channel)" : "", di ? "bf16" : "f16", (long long)qc->c.b,
                               (long long)qc->c.h, (long long)qc->c.hkv, (long long)qc->c.sq, (long long)qc->c.sk,
                               (long long)qc->c.d, qc->c.causal, rel, bd);
            }
}

/* 16-bit decode over every split count of one shape, and the prefill
   kernel forced on it (debug key attn_decode=0). */
static void test_decode_splits(void) {
    const acase c = {2, 32, 8, 2, 1500, 128, 1, 0, 0, 0, 0};
    const int splits[] = {1, 2, 3, 6, 16};
    for (int i = 0; i < (small_run ? 2 : 5); i++) {
        char sp[16];
        snprintf(sp, sizeof sp, "%d", splits[i]);
        debug_set("attn_splits", sp);
        check_case(&c, i % 2 ? TOPS_DT_F16 : TOPS_DT_BF16);
    }
    debug_set("attn_splits", NULL);
    debug_set("attn_decode", "0");
    check_case(&c, TOPS_DT_BF16);
    debug_set("attn_decode", NULL);
}

/* Sequences of different lengths in the decode kernel: kv_lens over a
   [B, H, S, D] cache, and packed batches (cu_seqlens) with a spare row the
   call must not touch; each sequence against f64 attention of its own rows. */
static void test_decode_lengths(void) {
    const char *fmts[2] = {"kv16", "int4-g32"};
    for (int fi = 0; fi < 2; fi++)
        for (int di = 0; di < (small_run ? 1 : 2); di++) {
            tops_dtype dt = di ? TOPS_DT_F16 : TOPS_DT_BF16;
            for (int packed = 0; packed < 2; packed++) {
                /* kv_lens: B 4, Sq 3, Sk 600; packed: 3 sequences, q {1, 16, 5}, k {700, 20, 0} (+ kv_lens) */
                const int64_t H = packed ? 4 : 8, Hkv = packed ? 4 : 2, D = packed ? 64 : 128;
                const int32_t B = packed ? 3 : 4;
                int32_t lens[4] = {600, 0, 1, 333}, cq[4] = {0, 1, 17, 22}, ck[4] = {0, 700, 720, 720};
                if (packed) lens[0] = 650, lens[1] = 20, lens[2] = 0;
                const int64_t Sq = 3, Sk = 600, Tq = 23, Tk = 720;
                int64_t qe[4], ke[4];
                int rank = packed ? 3 : 4;
                if (packed) {
                    qe[0] = Tq, qe[1] = H, qe[2] = D, ke[0] = Tk, ke[1] = Hkv, ke[2] = D;
                } else {
                    qe[0] = B, qe[1] = H, qe[2] = Sq, qe[3] = D, ke[0] = B, ke[1] = Hkv, ke[2] = Sk, ke[3] = D;
                }
                int64_t nq = 1, nk = 1;
                for (int i = 0; i < rank; i++) nq *= qe[i], nk *= ke[i];
                float *qf = malloc(nq * 4), *kf = malloc(nk * 4), *vf = malloc(nk * 4), *got = malloc(nq * 4);
                uint16_t *q16 = malloc(nq * 2), *o16 = malloc(nq * 2);
                double *ref = malloc(nq * sizeof(double));
                for (int64_t i = 0; i < nq; i++) qf[i] = th_uniform(&rng, -2.0f, 2.0f), ref[i] = NAN;
                for (int64_t i = 0; i < nk; i++) kf[i] = th_uniform(&rng, -2.0f, 2.0f), vf[i] = th_uniform(&rng, -1.0f, 1.0f);
                tops_cast_from_f32(dt, q16, qf, nq, 0);
                tops_cast_to_f32(dt, qf, q16, nq);
                tops_tensor kh, vh, kg, vg, q, o;
                exact_kv = 1;
                make_kv_rank(fmts[fi], 0, dt, kf, rank, ke, &kh);
                make_kv_rank(fmts[fi], 0, dt, vf, rank, ke, &vh);
                exact_kv = 0;
                ASSERT_OK(tops_tensor_to(&kh, gpu0, &kg));
                ASSERT_OK(tops_tensor_to(&vh, gpu0, &vg));
                tops_tensor_desc qd;
                memset(&qd, 0, sizeof qd);
                qd.format = tops_format_of(dt);
                qd.rank = rank;
                memcpy(qd.extent, qe, sizeof qe);
                qd.memory = gpu0;
                ASSERT_OK(tops_cuda_alloc(0, nq * 2, &qd.data));
                ASSERT_OK(tops_cuda_copy(qd.data, gpu0, q16, host_mem, nq * 2, NULL));
                ASSERT_OK(tops_tensor_view(&qd, &q));
                ASSERT_OK(tops_cuda_alloc(0, nq * 2, &qd.data));
                memset(o16, 0xFF, nq * 2);
                ASSERT_OK(tops_cuda_copy(qd.data, gpu0, o16, host_mem, nq * 2, NULL));
                ASSERT_OK(tops_tensor_view(&qd, &o));
                tops_exec ex = tops_exec_default();
                ex.device = gpu0;
                tops_attention_desc d = tops_attention_desc_default();
                d.causal = 1;
                d.kv_lens = lens;
                d.batch = B;
                if (packed) d.cu_seqlens_q = cq, d.cu_seqlens_k = ck;
                /* the values the kernel this call takes multiplies (run_qcase) */
                ASSERT_OK(tops__cuda_attention_path(&ex, &d, &q, &kg, &vg, &o, kernel, sizeof kernel));
                round_for_kernel(fmts[fi], 0, dt, kf, vf, nk);
                /* the reference, a sequence at a time on contiguous copies */
                for (int32_t b = 0; b < B; b++) {
                    int64_t sq = packed ? cq[b + 1] - cq[b] : Sq, sk = lens[b];
                    acase c = {1, H, Hkv, sq, sk, D, 1, 0, 0, 0, 0};
                    float *qb = malloc((size_t)(H * sq * D + 1) * 4), *kb = malloc((size_t)(Hkv * sk * D + 1) * 4),
                          *vb = malloc((size_t)(Hkv * sk * D + 1) * 4);
                    double *rb = malloc((size_t)(H * sq * D + 1) * sizeof(double));
                    for (int64_t h = 0; h < H; h++)
                        for (int64_t i = 0; i < sq; i++)
                            memcpy(qb + (h * sq + i) * D,
                                   qf + (packed ? ((cq[b] + i) * H + h) * D : ((b * H + h) * Sq + i) * D), D * 4);
                    for (int64_t h = 0; h < Hkv; h++)
                        for (int64_t j = 0; j < sk; j++) {
                            int64_t at = packed ? ((ck[b] + j) * Hkv + h) * D : ((b * Hkv + h) * Sk + j) * D;
                            memcpy(kb + (h * sk + j) * D, kf + at, D * 4);
                            memcpy(vb + (h * sk + j) * D, vf + at, D * 4);
                        }
                    reference(&c, qb, kb, vb, rb);
                    for (int64_t h = 0; h < H; h++)
                        for (int64_t i = 0; i < sq; i++)
                            for (int64_t x = 0; x < D; x++)
                                ref[(packed ? ((cq[b] + i) * H + h) * D : ((b * H + h) * Sq + i) * D) + x] =
                                    rb[(h * sq + i) * D + x];
                    free(qb), free(kb), free(vb), free(rb);
                }
                tops_status st = tops_attention(&ex, &d, &q, &kg, &vg, &o);
                if (st != TOPS_OK) {
                    TH_FAIL_AT("lengths (%s, %s): %s", packed ? "packed" : "kv_lens", fmts[fi], tops_last_error());
                } else {
                    ASSERT_OK(tops_cuda_synchronize(&ex));
                    ASSERT_OK(tops_cuda_copy(o16, host_mem, o.data, gpu0, nq * 2, NULL));
                    tops_cast_to_f32(dt, got, o16, nq);
                    double num = 0, den = 0;
                    int64_t bad = 0;
                    for (int64_t i = 0; i < nq; i++) {
                        if (isnan(ref[i])) { /* outside every sequence: still the poison */
                            bad += !isnan(got[i]);
                            continue;
                        }
                        if (!isfinite(got[i])) bad++;
                        num += (got[i] - ref[i]) * (got[i] - ref[i]);
                        den += ref[i] * ref[i];
                    }
                    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
                    if (getenv("TOPS_TEST_VERBOSE"))
                        printf("  lengths (%s, kv %s, %s): rel-L2 %.3g\n", packed ? "packed" : "kv_lens", fmts[fi],
                               di ? "f16" : "bf16", rel);
                    if (bad || !(rel <= bound(dt)))
                        TH_FAIL_AT("lengths (%s, kv %s, %s): rel-L2 %.3g (bound %.3g), %lld bad elements",
                                   packed ? "packed" : "kv_lens", fmts[fi], di ? "f16" : "bf16", rel, bound(dt),
                                   (long long)bad);
                }
                tops_cuda_free(0, q.data), tops_cuda_free(0, o.data);
                tops_tensor_destroy(&kh), tops_tensor_destroy(&vh), tops_tensor_destroy(&kg), tops_tensor_destroy(&vg);
                free(qf), free(kf), free(vf), free(got), free(q16), free(o16), free(ref);
            }
        }
}

int main(void) {
    rng = th_seed();
    small_run = getenv("TOPS_CUDA_TEST_SMALL") && atoi(getenv("TOPS_CUDA_TEST_SMALL")) == 1;
    RUN_TEST(test_bad_inputs);
    int n = 0;
    tops_cuda_device_count(&n);
    tops_cuda_device_info info;
    if (!tops_get_build_info().cuda || n == 0 || tops_cuda_get_device_info(0, &info) != TOPS_OK) {
        printf("skip: GPU attention tests need %s\n",
               tops_get_build_info().cuda ? "a CUDA device (none found)" : "a CUDA build");
        TEST_MAIN_END();
    }
    printf("cuda:0 %s, sm_%d%d\n", info.name, info.major, info.minor);
    if (!(info.major == 9 && info.minor == 0)) {
        printf("skip: the fused attention kernel needs compute capability 9.0\n");
        TEST_MAIN_END();
    }
    /* TOPS_CUDA_TEST_ONLY=decode: the decode kernel's groups alone */
    const char *only = getenv("TOPS_CUDA_TEST_ONLY");
    if (!(only && strcmp(only, "decode") == 0)) {
        RUN_TEST(test_gpu_unsupported);
        RUN_TEST(test_shapes);
        RUN_TEST(test_pipelines);
        RUN_TEST(test_key_splits);
        RUN_TEST(test_causal_pairs);
        RUN_TEST(test_persistent);
        RUN_TEST(test_tail_split);
    }
    RUN_TEST(test_decode_kv);
    RUN_TEST(test_decode_splits);
    RUN_TEST(test_decode_lengths);
    printf("worst rel-L2: f16 %.3g (bound %.3g), bf16 %.3g (bound %.3g)\n", worst[0], bound(TOPS_DT_F16), worst[1],
           bound(TOPS_DT_BF16));
    TEST_MAIN_END();
}
