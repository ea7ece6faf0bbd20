/* The CUDA backend: bad inputs on any machine; on a GPU, every kernel
   family against an f64 reference (weights decoded by tops_dequantize),
   ragged shapes, every token-tile width, split-K, accumulate mode, strided
   activations, f32/f16/bf16 outputs poisoned with NaN before each run;
   the relaxed FP8 path (sm_90) against f64 of its own e4m3 activations and
   of the true ones.  Without a GPU the numeric part skips with one line. */
#define _POSIX_C_SOURCE 200809L /* setenv: kernel choices and variants are debug keys of TOPS_CUDA_DEBUG */
#include "cuda_debug.h"
#include "harness.h"
#include "tensorops.h"

#include <math.h>
#include <stdint.h>

static const tops_memory host_mem = {TOPS_DEVICE_CPU, 0};
static const tops_memory gpu0 = {TOPS_DEVICE_CUDA, 0};
static int small_run; /* TOPS_CUDA_TEST_SMALL=1: a few cases (compute-sanitizer) */
static int fp8_gpu;   /* cuda:0 is compute capability 9.0: relaxed e4m3 runs the FP8 GEMM */
static int gpu_sms;   /* cuda:0's multiprocessors */
/* Relaxed FP8 against f64 of the f16/bf16 activations: e4m3 activations
   (3 mantissa bits, one scale per row) measure about 2.5e-2 (docs/cuda.md). */
#define FP8_REL_L2 5e-2
/* Against its own e4m3 activations: the FP8 tensor cores' accumulation
   (not IEEE f32: measured rel-L2 1.2e-4 at K = 130 growing to 1.2e-3 at
   K = 4096 on the H200) on top of the output's rounding. */
#define FP8_ACCUM_REL_L2 4e-3
static double fp8_worst_true, fp8_worst_own[3]; /* largest rel-L2 seen, for the log */

static uint16_t f32_to_16(tops_dtype dt, float v) {
    uint16_t h;
    tops_cast_from_f32(dt, &h, &v, 1, 0);
    return h;
}
static float f16_to_32(tops_dtype dt, uint16_t h) {
    float v;
    tops_cast_to_f32(dt, &v, &h, 1);
    return v;
}

static tops_exec gpu_exec(void) {
    tops_exec e = tops_exec_default();
    e.device = gpu0;
    return e;
}

/* ---- any machine ------------------------------------------------------------ */

static void test_bad_arguments(void) {
    int n = -1;
    ASSERT_OK(tops_cuda_device_count(&n));
    ASSERT_TRUE(n >= 0);
    ASSERT_STATUS(tops_cuda_device_count(NULL), TOPS_INVALID_ARGUMENT);
    void *p = NULL;
    ASSERT_STATUS(tops_cuda_alloc(0, 16, NULL), TOPS_INVALID_ARGUMENT);
    ASSERT_STATUS(tops_cuda_alloc(n + 7, 16, &p), TOPS_UNSUPPORTED_ON_DEVICE);
    ASSERT_TRUE(p == NULL);
    tops_cuda_device_info info;
    ASSERT_STATUS(tops_cuda_get_device_info(n + 7, &info), TOPS_UNSUPPORTED_ON_DEVICE);
    float a[4] = {1, 2, 3, 4}, b[4];
    tops_memory nowhere = {TOPS_DEVICE_CUDA, n + 7};
    ASSERT_STATUS(tops_cuda_copy(b, host_mem, a, nowhere, sizeof a, NULL), TOPS_UNSUPPORTED_ON_DEVICE);

    /* matmul2d / pack_right sent to a GPU that is not there. */
    float w[8 * 32], x[32], y[8];
    for (int i = 0; i < 8 * 32; i++) w[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 32; i++) x[i] = 1.0f;
    tops_tensor_desc d = {0};
    tops_tensor tw, tx, ty, packed;
    d.format = tops_format_of(TOPS_DT_F32);
    d.rank = 2;
    d.extent[0] = 8;
    d.extent[1] = 32;
    d.data = w;
    ASSERT_OK(tops_tensor_view(&d, &tw));
    d.extent[0] = 1;
    d.data = x;
    ASSERT_OK(tops_tensor_view(&d, &tx));
    d.extent[1] = 8;
    d.data = y;
    ASSERT_OK(tops_tensor_view(&d, &ty));
    tops_matmul2d_desc md = {0};
    md.transpose_right = 1;
    tops_exec e = tops_exec_default();
    e.device = nowhere;
    ASSERT_STATUS(tops_matmul2d(&e, &md, &tx, &tw, &ty), TOPS_UNSUPPORTED_ON_DEVICE);
    ASSERT_STATUS(tops_pack_right(&e, &md, &tw, &packed), TOPS_UNSUPPORTED_ON_DEVICE);
    e.device.index = -1;
    ASSERT_STATUS(tops_matmul2d(&e, &md, &tx, &tw, &ty), TOPS_INVALID_ARGUMENT);
    /* CPU exec with a tensor that claims device memory. */
    d.memory = gpu0;
    tops_tensor tdev;
    ASSERT_OK(tops_tensor_view(&d, &tdev));
    ASSERT_STATUS(tops_matmul2d(NULL, &md, &tx, &tw, &tdev), TOPS_UNSUPPORTED_ON_DEVICE);
    if (!tops_get_build_info().cuda) {
        ASSERT_FAILS_WITH(tops_tensor_to(&tw, gpu0, &packed), TOPS_UNSUPPORTED_ON_DEVICE, "no CUDA backend");
    } else {
        /* TOPS_CUDA_DEBUG is checked before anything else: an unknown key, a
           bad value or a removed tuning variable's name is refused, not ignored;
           the attention and conv2d keys are the same table's (their values
           checked by any GPU call), a value outside what the key takes too. */
        static const char *const bad_debug[] = {"kernel=wgmma,bulk_rin=3", "kernel=fast", "bulk_ring=3x",
                                                "fp8_min_m=1", "wgmma_splits", "pdl=", "=1", "attn_pipe=3",
                                                "attn_persist=-1", "attn_ring=x", "conv_bn=96", "conv_path=fast",
                                                "conv_splits=65", "conv_pn=100", "conv_tr=2", "im2col"};
        e.device = nowhere;
        for (int i = 0; i < (int)(sizeof bad_debug / sizeof bad_debug[0]); i++) {
            setenv("TOPS_CUDA_DEBUG", bad_debug[i], 1);
            ASSERT_FAILS_WITH(tops_matmul2d(&e, &md, &tx, &tw, &ty), TOPS_INVALID_ARGUMENT, "TOPS_CUDA_DEBUG");
            ASSERT_FAILS_WITH(tops_matmul2d_path(&e, &md, &tx, &tw, &ty, (char[64]){0}, 64), TOPS_INVALID_ARGUMENT,
                              "TOPS_CUDA_DEBUG");
        }
        /* the sentence says what a known key takes */
        setenv("TOPS_CUDA_DEBUG", "pdl=0,conv_bn=96", 1);
        ASSERT_FAILS_WITH(tops_matmul2d(&e, &md, &tx, &tw, &ty), TOPS_INVALID_ARGUMENT,
                          "'conv_bn=96': conv_bn takes one of 0|64|128|256");
        setenv("TOPS_CUDA_DEBUG", "attn_splits=-2", 1);
        ASSERT_FAILS_WITH(tops_matmul2d(&e, &md, &tx, &tw, &ty), TOPS_INVALID_ARGUMENT, "an integer from 0");
        setenv("TOPS_CUDA_DEBUG", "bulk_ring=x", 1);
        ASSERT_FAILS_WITH(tops_matmul2d(&e, &md, &tx, &tw, &ty), TOPS_INVALID_ARGUMENT, "bulk_ring takes an integer");
        setenv("TOPS_CUDA_DEBUG", "bulk_rng=1", 1);
        ASSERT_FAILS_WITH(tops_matmul2d(&e, &md, &tx, &tw, &ty), TOPS_INVALID_ARGUMENT, "not key=value with a known key");
        /* valid keys pass on to the next check (here: no such device) */
        setenv("TOPS_CUDA_DEBUG", "kernel=wbulk, bulk_ring=3,pdl=0 conv_path=im2col,conv_tr=-1,attn_pipe=0,attn_persist=7",
               1);
        ASSERT_STATUS(tops_matmul2d(&e, &md, &tx, &tw, &ty), TOPS_UNSUPPORTED_ON_DEVICE);
        unsetenv("TOPS_CUDA_DEBUG");
    }
}

/* ---- with a GPU ------------------------------------------------------------- */

typedef struct gpu_case {
    const char *format;
    tops_dtype act, out;
    int64_t m, k, n;
    int strided_left, accumulate, prepack; /* strided_left 1: rows k + 3 apart (unaligned); 2: k + 8 */
    int relaxed; /* e4m3-ch / e4m3 weights: expect the FP8 path where fp8_gpu */
    int spread;  /* 1: weight rows alternately x 2^20 and x 2^-20 (scales beyond f16's range);
                    2: the first 16 weights of each row x 2^16 (nvfp4: the other blocks' scales subnormal);
                    3: the first 128 x 2^16 (mxfp4: rows over 15 binades, chunks within);
                    4: f32 activations instead: rows alternately x 2^24 and x 2^-30 (beyond f16's
                    range both ways) */
} gpu_case;

/* The next run_case's change to its weights' scale plane (edit_scales), then 0. */
static int scale_edit_next;

/* Changes the scale plane of quantized weights t (f16 or f32 entries)
   before the reference decodes them.  1: groups alternately x 2^12 and x
   2^-12 (f32 planes: even rows x 2^40 / 2^-40 instead, a span beyond
   2^60); 2: every third row's groups g % 3 == 1 zero (their codes not);
   3: row 1 group 0 +Inf, row 2 group 1 NaN. */
static void edit_scales(tops_tensor *t, int how) {
    const tops_plane *pl = &t->scales;
    const int f16 = pl->dtype == TOPS_DT_F16;
    if (!pl->data || (!f16 && pl->dtype != TOPS_DT_F32)) {
        TH_FAIL_AT("edit_scales: no f16 or f32 scale plane");
        return;
    }
    const int64_t rows = pl->extent[0], groups = pl->extent[1];
    const int64_t rs = pl->stride[0] ? pl->stride[0] : groups, gs = pl->stride[1] ? pl->stride[1] : 1;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t g = 0; g < groups; g++) {
            const int64_t at = i * rs + g * gs;
            float v = f16 ? f16_to_32(TOPS_DT_F16, ((uint16_t *)pl->data)[at]) : ((float *)pl->data)[at];
            if (how == 1) v = ldexpf(v, (g % 2 ? 1 : -1) * (!f16 && i % 2 == 0 ? 40 : 12));
            else if (how == 2 && i % 3 == 0 && g % 3 == 1) v = 0.0f;
            else if (how == 3 && i == 1 && g == 0) v = INFINITY;
            else if (how == 3 && i == 2 && g == 1) v = NAN;
            if (f16) ((uint16_t *)pl->data)[at] = f32_to_16(TOPS_DT_F16, v);
            else ((float *)pl->data)[at] = v;
        }
}

/* Relaxed 4-bit integers on the folded wgmma kernel: w = q x s rounded once
   to f16 (relative error <= 2^-11 per weight), on top of the strict bound. */
#define FOLD_REL_L2 1e-3
static double fold_worst; /* largest rel-L2 of a relaxed f32-output case, for the log */

/* rel-L2 bounds against f64: exact products, f32 sums, then the output's rounding. */
static double bound_for(tops_dtype out) {
    return out == TOPS_DT_F32 ? 1e-5 : out == TOPS_DT_F16 ? 1e-3 : 8e-3;
}

/* The FP8 path's activations: per row s = amax / 448 (f32), codes
   e4m3_satfinite_rne(x / s), value code * s (the kernel's own arithmetic). */
static void fp8_activations(const double *x, int64_t m, int64_t k, double *q) {
    for (int64_t i = 0; i < m; i++) {
        float amax = 0.0f;
        for (int64_t j = 0; j < k; j++) amax = fmaxf(amax, fabsf((float)x[i * k + j]));
        float s = amax / 448.0f;
        for (int64_t j = 0; j < k; j++) {
            float v = s > 0.0f ? (float)x[i * k + j] / s : 0.0f, back;
            uint8_t code;
            tops_cast_from_f32(TOPS_DT_E4M3, &code, &v, 1, 1);
            tops_cast_to_f32(TOPS_DT_E4M3, &back, &code, 1);
            q[i * k + j] = (double)back * (double)s;
        }
    }
}

/* The kernel the last strict launch used (a weak reference: builds
   without CUDA have none, and skip before asking). */
extern const char *tops__cu_last_kernel(void) __attribute__((weak));

static int run_case(const gpu_case *c, th_rng *r) {
    int failed_before = th_failed_checks;
    tops_format fmt;
    if (tops_format_from_name(c->format, &fmt) != TOPS_OK) {
        TH_FAIL_AT("format %s: %s", c->format, tops_last_error());
        return 0;
    }
    const int64_t m = c->m, k = c->k, n = c->n;
    /* Weights: normal-ish values quantized on the host, then decoded for the reference. */
    float *wf = malloc((size_t)(n * k) * sizeof(float)), *wd = malloc((size_t)(n * k) * sizeof(float));
    for (int64_t i = 0; i < n * k; i++)
        wf[i] = (th_uniform(r, -1, 1) + th_uniform(r, -1, 1) + th_uniform(r, -1, 1)) * (1.0f + (float)(i % 13) * 0.1f) *
                (c->spread == 1 ? ldexpf(1.0f, (i / k) % 2 ? 20 : -20)
                 : (c->spread == 2 && i % k < 16) || (c->spread == 3 && i % k < 128) ? 0x1p16f
                                                                                         : 1.0f);
    int64_t wext[2] = {n, k};
    tops_tensor_desc d = {0};
    d.format = tops_format_of(TOPS_DT_F32);
    d.rank = 2;
    d.extent[0] = n;
    d.extent[1] = k;
    d.data = wf;
    tops_tensor tsrc, tq, tdq, tdev_w, packed;
    memset(&packed, 0, sizeof packed);
    memset(&tdev_w, 0, sizeof tdev_w);
    ASSERT_OK(tops_tensor_view(&d, &tsrc));
    ASSERT_OK(tops_tensor_create(fmt, 2, wext, host_mem, &tq));
    ASSERT_OK(tops_quantize(&tsrc, &tq, NULL));
    if (scale_edit_next) edit_scales(&tq, scale_edit_next);
    scale_edit_next = 0;
    d.data = wd;
    ASSERT_OK(tops_tensor_view(&d, &tdq));
    ASSERT_OK(tops_dequantize(&tq, &tdq));

    /* Activations, optionally with a padded row stride: 1 unaligned rows,
       2 rows 16-byte aligned with a gap (what TMA and the bulk copies read).
       f32: values with bits below f16's and bf16's precision. */
    int64_t ldx = c->strided_left == 1 ? k + 3 : c->strided_left == 2 ? k + 8 : k;
    const int act32 = c->act == TOPS_DT_F32;
    uint16_t *xh = calloc((size_t)(m * ldx), act32 ? 4 : 2);
    float *xf = (float *)xh;
    double *xv = malloc((size_t)(m * k) * sizeof(double));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < k; j++) {
            float v = th_uniform(r, -2, 2);
            if (act32) {
                if (c->spread == 4) v = ldexpf(v, i % 2 ? -30 : 24);
                xf[i * ldx + j] = v;
                xv[i * k + j] = v;
            } else {
                uint16_t h = f32_to_16(c->act, v);
                xh[i * ldx + j] = h;
                xv[i * k + j] = f16_to_32(c->act, h);
            }
        }
    tops_tensor_desc dx = {0};
    dx.format = tops_format_of(c->act);
    dx.rank = 2;
    dx.extent[0] = m;
    dx.extent[1] = k;
    dx.stride[0] = ldx;
    dx.stride[1] = 1;
    dx.data = xh;
    tops_tensor tx_host, tx;
    ASSERT_OK(tops_tensor_view(&dx, &tx_host));
    ASSERT_OK(tops_tensor_to(&tx_host, gpu0, &tx));

    /* Output: poisoned, or random old values for accumulate. */
    size_t osz = c->out == TOPS_DT_F32 ? 4 : 2;
    unsigned char *yh = malloc((size_t)(m * n) * osz);
    double *old = calloc((size_t)(m * n), sizeof(double));
    for (int64_t i = 0; i < m * n; i++) {
        if (c->accumulate) {
            float v = th_uniform(r, -3, 3);
            if (osz == 2) {
                uint16_t h = f32_to_16(c->out, v);
                memcpy(yh + i * 2, &h, 2);
                old[i] = f16_to_32(c->out, h);
            } else {
                memcpy(yh + i * 4, &v, 4);
                old[i] = v;
            }
        } else {
            memset(yh + i * osz, 0xFF, osz); /* NaN in f32, f16 and bf16 */
        }
    }
    void *ydev = NULL;
    ASSERT_OK(tops_cuda_alloc(0, (size_t)(m * n) * osz, &ydev));
    ASSERT_OK(tops_cuda_copy(ydev, gpu0, yh, host_mem, (size_t)(m * n) * osz, NULL));
    tops_tensor_desc dy = {0};
    dy.format = tops_format_of(c->out);
    dy.rank = 2;
    dy.extent[0] = m;
    dy.extent[1] = n;
    dy.data = ydev;
    dy.memory = gpu0;
    tops_tensor ty;
    ASSERT_OK(tops_tensor_view(&dy, &ty));

    tops_exec e = gpu_exec();
    tops_matmul2d_desc md = {0};
    md.transpose_right = 1;
    md.mode = c->accumulate ? TOPS_MULTIPLY_ACCUMULATE : TOPS_MULTIPLY;
    md.relaxed_precision = c->relaxed;
    int fp8 = c->relaxed && fp8_gpu && strncmp(c->format, "e4m3", 4) == 0;
    double *xq = NULL;
    const tops_tensor *right = &tq;
    if (c->prepack) {
        ASSERT_OK(tops_pack_right(&e, &md, &tq, &packed));
        right = &packed;
    } else {
        ASSERT_OK(tops_tensor_to(&tq, gpu0, &tdev_w)); /* packed on the fly from device memory */
        right = &tdev_w;
    }
    ASSERT_OK(tops_matmul2d(&e, &md, &tx, right, &ty));
    ASSERT_OK(tops_cuda_synchronize(&e));
    ASSERT_OK(tops_cuda_copy(yh, host_mem, ydev, gpu0, (size_t)(m * n) * osz, NULL));
    /* 4-bit weights on the FP8 tensor cores: e4m3 activations too */
    if (c->relaxed && tops__cu_last_kernel && strstr(tops__cu_last_kernel(), "wgmma_q8")) fp8 = 1;
    if (fp8) {
        xq = malloc((size_t)(m * k) * sizeof(double));
        if (act32) {
            /* the kernel quantizes the f16 term of each row scaled by 2^-e
               (docs/cuda.md): the same, then 2^e back */
            double *xs = malloc((size_t)(m * k) * sizeof(double));
            int *ex = malloc((size_t)m * sizeof(int));
            for (int64_t i = 0; i < m; i++) {
                float mx = 0.0f;
                for (int64_t j = 0; j < k; j++) mx = fmaxf(mx, fabsf((float)xv[i * k + j]));
                int e2 = 0;
                if (mx > 0.0f) (void)frexpf(mx, &e2);
                ex[i] = mx > 0.0f ? e2 - 15 : 0;
                for (int64_t j = 0; j < k; j++)
                    xs[i * k + j] = f16_to_32(TOPS_DT_F16, f32_to_16(TOPS_DT_F16, ldexpf((float)xv[i * k + j], -ex[i])));
            }
            fp8_activations(xs, m, k, xq);
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < k; j++) xq[i * k + j] = ldexp(xq[i * k + j], ex[i]);
            free(xs);
            free(ex);
        } else {
            fp8_activations(xv, m, k, xq);
        }
    }
    if (!c->accumulate) {
        /* Again: the split-K partials are summed in split order, so the bits repeat. */
        unsigned char *again = malloc((size_t)(m * n) * osz);
        ASSERT_OK(tops_matmul2d(&e, &md, &tx, right, &ty));
        ASSERT_OK(tops_cuda_synchronize(&e));
        ASSERT_OK(tops_cuda_copy(again, host_mem, ydev, gpu0, (size_t)(m * n) * osz, NULL));
        if (memcmp(again, yh, (size_t)(m * n) * osz) != 0)
            TH_FAIL_AT("%s M=%lld K=%lld N=%lld: a second run gave different bits", c->format, (long long)m,
                       (long long)k, (long long)n);
        free(again);
    }

    double num = 0, den = 0, num_q = 0, den_q = 0, worst_row = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < m; i++) {
        double rnum = 0, rden = 0;
        for (int64_t j = 0; j < n; j++) {
            double ref = old[i * n + j], ref_q = ref;
            for (int64_t kk = 0; kk < k; kk++) ref += xv[i * k + kk] * (double)wd[j * k + kk];
            if (xq)
                for (int64_t kk = 0; kk < k; kk++) ref_q += xq[i * k + kk] * (double)wd[j * k + kk];
            double got;
            if (osz == 2) {
                uint16_t h;
                memcpy(&h, yh + (i * n + j) * 2, 2);
                got = f16_to_32(c->out, h);
            } else {
                float f;
                memcpy(&f, yh + (i * n + j) * 4, 4);
                got = f;
            }
            if (!isfinite(ref)) { /* a scale that is not finite (scale_edit 3): so is the output */
                if (isfinite(got) && bad < 0) bad = i * n + j;
                continue;
            }
            if (!isfinite(got) && bad < 0) bad = i * n + j;
            num += (got - ref) * (got - ref);
            den += ref * ref;
            rnum += (got - ref) * (got - ref);
            rden += ref * ref;
            num_q += (got - ref_q) * (got - ref_q);
            den_q += ref_q * ref_q;
        }
        if (rden > 0 && sqrt(rnum / rden) > worst_row) worst_row = sqrt(rnum / rden);
    }
    double rel = sqrt(num / (den > 0 ? den : 1)),
           bound = fp8 ? FP8_REL_L2 : bound_for(c->out) + (c->relaxed ? FOLD_REL_L2 : 0);
    /* relaxed dequantization with bf16 activations: each weight rounded once to bf16 */
    const char *ran = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
    if (c->relaxed && !fp8 && c->act == TOPS_DT_BF16 && strstr(ran, "rounded once")) bound += ldexp(1.0, -8);
    /* relaxed f32 activations: one 16-bit rounding each (bf16 for bf16 weights, else f16) */
    if (act32 && c->relaxed && !fp8) bound += ldexp(1.0, strcmp(c->format, "bf16") == 0 ? -8 : -11);
    /* f32 activations: each row within the bound too (rows 2^54 apart under spread 4) */
    if (act32 && !fp8 && n >= 7 && !(worst_row <= bound))
        TH_FAIL_AT("%s act=f32 out=%s M=%lld K=%lld N=%lld%s%s: worst row rel-L2 %.3g (bound %.1g)", c->format,
                   tops_dtype_name(c->out), (long long)m, (long long)k, (long long)n, c->relaxed ? " relaxed" : "",
                   c->spread == 4 ? " spread" : "", worst_row, bound);
    if (c->relaxed && !fp8 && c->out == TOPS_DT_F32 && rel > fold_worst) fold_worst = rel;
    if (fp8) {
        /* Against its own e4m3 activations only the accumulation differs: a
           layout or quantization slip shows up orders of magnitude above. */
        double rel_q = sqrt(num_q / (den_q > 0 ? den_q : 1)), bound_q = bound_for(c->out) + FP8_ACCUM_REL_L2;
        int oi = c->out == TOPS_DT_F32 ? 0 : c->out == TOPS_DT_F16 ? 1 : 2;
        if (rel_q > fp8_worst_own[oi]) fp8_worst_own[oi] = rel_q;
        if (rel > fp8_worst_true) fp8_worst_true = rel;
        if (!(rel_q <= bound_q))
            TH_FAIL_AT("%s act=%s out=%s M=%lld K=%lld N=%lld%s%s relaxed FP8: rel-L2 %.3g against f64 of the e4m3 "
                       "activations (bound %.1g)",
                       c->format, tops_dtype_name(c->act), tops_dtype_name(c->out), (long long)m, (long long)k,
                       (long long)n, c->strided_left ? " strided" : "", c->accumulate ? " accumulate" : "", rel_q,
                       bound_q);
        free(xq);
    }
    if (bad >= 0 || !(rel <= bound))
        TH_FAIL_AT("%s act=%s out=%s M=%lld K=%lld N=%lld%s%s%s: rel-L2 %.3g (bound %.1g)%s", c->format,
                   tops_dtype_name(c->act), tops_dtype_name(c->out), (long long)m, (long long)k, (long long)n,
                   c->strided_left ? " strided" : "", c->accumulate ? " accumulate" : "",
                   c->prepack ? "" : " unpacked", rel, bound, bad >= 0 ? " and an output (not) finite against the reference" : "");
    tops_tensor_destroy(&packed);
    tops_tensor_destroy(&tdev_w);
    tops_tensor_destroy(&tx);
    ASSERT_OK(tops_cuda_free(0, ydev));
    tops_tensor_destroy(&tq);
    free(wf);
    free(wd);
    free(xh);
    free(xv);
    free(yh);
    free(old);
    return th_failed_checks == failed_before;
}

static const char *const gpu_formats[] = {"int4-g32", "int4-g128", "int4-g64:bf16", "int4-g32:e8m0", "int4-g16:f32",
                                          "int8-g32", "int8-g128",  "q4_0",          "q8_0",          "mxfp4",
                                          "gguf-mxfp4", "mxfp8",    "nvfp4",         "e4m3-ch",       "f16",
                                          "bf16",       "i8",       "i4",            "e4m3",          "q4_1",
                                          "q4_K",       "q5_K",     "q6_K",          "iq4_nl",        "iq4_xs",
                                          "e2m3",       "mxfp6",    "e3m2",          "mxfp6-e3m2",    "e2m1",
                                          "u4",         "i2",       "int2-g32",      "mxint8",        "int4-g32-affine"};
/* Formats whose pack rule reads the CPU integer form (sub-scales, mins,
   codebooks, fp6 / e2m1 / 2-bit / unsigned codes): also relaxed, where nothing folds and no q8 layout exists,
   so the strict kernels run (held to the relaxed bound). */
static int relaxed_too(const char *format) {
    static const char *const names[] = {"q4_1", "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs", "e2m3",
                                        "mxfp6", "e2m1", "u4",   "i2",   "int2-g32", "mxint8", "int4-g32-affine"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(format, names[i]) == 0) return 1;
    return 0;
}

static void test_every_format(void) {
    th_rng r = th_seed();
    /* Shapes: M picks the token-tile width (1, 2 or 4 tiles of 8; passes
       beyond 32), K ragged against chunks and groups, N ragged against
       the 64-row padding; small N forces split-K. */
    static const int64_t shapes[][3] = {{1, 4096, 200},  {3, 1000, 77}, {8, 256, 64},  {13, 992, 130},
                                        {16, 64, 16},    {29, 512, 96}, {64, 2048, 40}, {100, 160, 300}};
    int nshapes = small_run ? 2 : (int)(sizeof shapes / sizeof shapes[0]);
    int nfmt = (int)(sizeof gpu_formats / sizeof gpu_formats[0]);
    int cases = 0, passed = 0;
    for (int f = 0; f < nfmt; f++) {
        for (int s = 0; s < nshapes; s++) {
            gpu_case c = {gpu_formats[f], TOPS_DT_F16, TOPS_DT_F32, shapes[s][0], shapes[s][1], shapes[s][2], 0, 0, 1, 0, 0};
            /* Both activation types, all outputs and modes, rotated by case. */
            int v = f + s;
            c.act = (v & 1) ? TOPS_DT_BF16 : TOPS_DT_F16;
            if (strcmp(c.format, "f16") == 0) c.act = TOPS_DT_F16;
            if (strcmp(c.format, "bf16") == 0) c.act = TOPS_DT_BF16;
            c.out = v % 3 == 0 ? TOPS_DT_F32 : v % 3 == 1 ? TOPS_DT_F16 : TOPS_DT_BF16;
            c.strided_left = s % 3;
            c.accumulate = s % 4 == 2;
            c.prepack = s != 3;
            cases++;
            passed += run_case(&c, &r);
            if (relaxed_too(c.format) && (!small_run || s == 0)) { /* relaxed, f32 or 16-bit activations */
                gpu_case cr = c;
                cr.relaxed = 1;
                cr.act = s % 2 ? TOPS_DT_F32 : c.act;
                cases++;
                passed += run_case(&cr, &r);
            }
            if (relaxed_too(c.format) && !small_run && s == 0) {
                /* M past the wgmma thresholds (strict 4-bit from 65, 8-bit from 128), strict f32
                   activations, and accumulate into bf16 */
                static const int64_t big[][3] = {{200, 1024, 130}, {144, 768, 72}};
                for (int b = 0; b < 2; b++) {
                    gpu_case cb = c;
                    cb.m = big[b][0], cb.k = big[b][1], cb.n = big[b][2];
                    cb.act = b ? TOPS_DT_F32 : TOPS_DT_BF16;
                    cb.out = b ? TOPS_DT_F32 : TOPS_DT_BF16;
                    cb.accumulate = !b;
                    cb.strided_left = 2 * b;
                    cases++;
                    passed += run_case(&cb, &r);
                }
            }
            if (!small_run && s == 0) { /* the other activation type, f32 out */
                gpu_case c2 = c;
                c2.act = c.act == TOPS_DT_F16 ? TOPS_DT_BF16 : TOPS_DT_F16;
                c2.out = TOPS_DT_F32;
                if (strcmp(c.format, "f16") != 0 && strcmp(c.format, "bf16") != 0) {
                    cases++;
                    passed += run_case(&c2, &r);
                }
            }
        }
    }
    printf("     %d of %d GPU cases within their bounds\n", passed, cases);
}


/* The kernels' edges: M across the token-tile and warp-split steps
   (1, 16, 17, 40, 64, 65, 128, 200 -> a second pass of 128), N not a
   multiple of a bulk block's 96 channels (a last block of fewer tiles), K
   ragged against stages of 8 chunks (K = 1001: rows not 8-byte aligned,
   element-wise activation loads; K = 520, 1000, 4104: activations copied
   into the ring with a zeroed tail; K = 640: a last stage of 2 chunks),
   M = 2, 3, 8, 9 against the token tiles (activation tiles of 1, 2, 4, 8
   or 16 rows), and splits capped at 1 so that the ring wraps where it is
   shallower than the block's stages.  The small run (compute-sanitizer)
   takes the first three shapes: both token-tile widths with rings that
   wrap or hold the whole K, and a second pass.  Passes (debug keys
   of the plan): 0 forces wbulk (M >= 128 would take wgmma) with 24 warps
   for M <= 8 (bulk_tg=3) and 3 stages in flight ahead
   (bulk_look=3); every M <= 16 with 16-byte aligned rows takes
   its activations as TMA tiles in the ring (one 3-D copy per stage where
   K % 64 == 0); 1 the register kernel (the sm_80 path,
   kernel=wstream); then M <= 16 only: 2 activations from L2
   (bulk_xt=0), scales decoded straight from global memory
   (bulk_scd=1), a plain launch (pdl=0), one stage
   ahead (bulk_look=1); 3 the tiles with the last-warp refill
   (bulk_arrive=1), the scales from global memory, a ring of 3
   (bulk_ring=3: every K here wraps it) and one stage ahead; 4 one
   2-D copy per 64 columns (bulk_xt3=0), the scales copied first
   (bulk_scd=0), 16 warps, a plain launch, 8 activation rows per
   tile at every M (bulk_xr=0).  Passes 0, 3 and 4 take three
   formats a shape. */
static void test_kernel_edges(void) {
    th_rng r = th_seed();
    static const struct {
        int64_t m, k, n;
        const char *cap;
    } shapes[] = {{1, 4096, 200, "1"},  {16, 520, 200, NULL},  {200, 2600, 130, "1"}, {17, 4096, 100, "1"},
                  {64, 1000, 100, NULL}, {65, 520, 200, NULL}, {128, 256, 100, NULL}, {40, 1001, 100, NULL},
                  {5, 1000, 200, NULL},  {12, 4104, 100, "1"}, {3, 1024, 100, "1"},    {9, 2048, 200, "1"},
                  {8, 640, 130, NULL},   {2, 2048, 200, "1"}};
    static const char *const fmts[] = {"int4-g128", "mxfp4", "nvfp4", "int8-g32", "e4m3-ch", "int4-g16:f32",
                                       "q4_0",      "f16",   "int4-g32:e8m0", "bf16", "mxfp8"};
    const int nshapes = small_run ? 3 : (int)(sizeof shapes / sizeof shapes[0]), nf = (int)(sizeof fmts / sizeof fmts[0]);
    int cases = 0, passed = 0;
    static const char *const knobs[][2] = {
        {"bulk_tg", "3"},     {"bulk_xt", "0"},     {"bulk_scd", "1"},
        {"pdl", "0"},         {"bulk_arrive", "1"}, {"bulk_xt3", "0"},
        {"bulk_scd", "0"},    {"bulk_ring", "3"},   {"bulk_xr", "0"},
        {"bulk_look", "3"},   {"bulk_look", "1"},   {"bulk_issue", "0"},
        {"bulk_issue", "1"}};
    static const int pass_knobs[5][5] = {
        {0, 9, 11, -1, -1}, {-1, -1, -1, -1, -1}, {1, 2, 3, 10, 12}, {4, 2, 7, 10, -1}, {5, 6, 3, 8, -1}};
    for (int kernel = 0; kernel < 5; kernel++) {
        debug_set("kernel", kernel == 1 ? "wstream" : "wbulk");
        for (int i = 0; i < 5; i++)
            if (pass_knobs[kernel][i] >= 0) debug_set(knobs[pass_knobs[kernel][i]][0], knobs[pass_knobs[kernel][i]][1]);
        for (int s = 0; s < nshapes; s++) {
            if (kernel >= 2 && shapes[s].m > 16) continue;
            if (shapes[s].cap) debug_set("bulk_splits", shapes[s].cap);
            for (int i = 0; i < (kernel == 1 || kernel == 2 ? 1 : 3); i++) {
                gpu_case c = {fmts[(s * 3 + i + kernel) % nf], TOPS_DT_F16, TOPS_DT_F32, shapes[s].m, shapes[s].k,
                              shapes[s].n, 0, 0, 1, 0, 0};
                int v = s + i;
                c.act = (v & 1) ? TOPS_DT_BF16 : TOPS_DT_F16;
                if (strcmp(c.format, "f16") == 0) c.act = TOPS_DT_F16;
                if (strcmp(c.format, "bf16") == 0) c.act = TOPS_DT_BF16;
                c.out = v % 3 == 0 ? TOPS_DT_F32 : v % 3 == 1 ? TOPS_DT_F16 : TOPS_DT_BF16;
                c.strided_left = i == 1 ? 1 : s % 2 ? 2 : 0;
                c.accumulate = i == 2;
                cases++;
                int ok = run_case(&c, &r);
                /* the tile passes must run the tiles where rows allow them (4-bit formats: their scales
                   always leave the room) */
                const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "TMA x";
                if ((kernel == 0 || kernel >= 3) && c.m <= 16 && c.strided_left != 1 &&
                    (strcmp(c.format, "int4-g128") == 0 || strcmp(c.format, "mxfp4") == 0 ||
                     strcmp(c.format, "nvfp4") == 0 || strcmp(c.format, "q4_0") == 0) &&
                    !strstr(kn, "TMA x")) {
                    TH_FAIL_AT("%s M=%lld K=%lld pass %d ran %s", c.format, (long long)c.m, (long long)c.k, kernel, kn);
                    ok = 0;
                }
                passed += ok;
            }
            debug_set("bulk_splits", NULL);
        }
        debug_set("kernel", NULL);
        for (int i = 0; i < (int)(sizeof knobs / sizeof knobs[0]); i++) debug_set(knobs[i][0], NULL);
    }
    printf("     %d of %d kernel-edge cases within their bounds\n", passed, cases);
}


/* The bulk kernel's 8-bit scale decoder (bit moves per word, the per-entry
   path for the rare special bytes): nvfp4 with one large block per row, so
   the global scale leaves every other block a subnormal ue4m3 scale (their
   sum still weighs 1e-4 of each output, 10x the f32 bound), and mxfp4 rows
   2^40 apart; the scales both bulk-copied and read from global memory. */
static void test_scale_decode(void) {
    if (!fp8_gpu) {
        printf("     skip: the bulk kernel needs compute capability 9.0\n");
        return;
    }
    th_rng r = th_seed();
    static const struct {
        const char *format;
        tops_dtype act;
        int64_t m, k, n;
        int spread;
    } cases[] = {{"nvfp4", TOPS_DT_F16, 1, 1024, 200, 2},  {"nvfp4", TOPS_DT_BF16, 16, 2048, 130, 2},
                 {"nvfp4", TOPS_DT_F16, 5, 4096, 100, 1},  {"mxfp4", TOPS_DT_F16, 4, 1024, 200, 1},
                 {"gguf-mxfp4", TOPS_DT_BF16, 1, 1024, 130, 2}};
    int cases_run = 0, passed = 0;
    debug_set("kernel", "wbulk");
    for (int scd = 0; scd < 2; scd++) {
        debug_set("bulk_scd", scd ? "1" : "0");
        for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
            gpu_case c = {cases[i].format, cases[i].act, TOPS_DT_F32, cases[i].m, cases[i].k, cases[i].n,
                          0, 0, 1, 0, cases[i].spread};
            cases_run++;
            int ok = run_case(&c, &r);
            const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "wbulk";
            if (strncmp(kn, "wbulk", 5) != 0) {
                TH_FAIL_AT("%s M=%lld ran %s, not wbulk", c.format, (long long)c.m, kn);
                ok = 0;
            }
            passed += ok;
        }
    }
    debug_set("bulk_scd", NULL);
    debug_set("kernel", NULL);
    printf("     %d of %d scale-decode cases within their bounds\n", passed, cases_run);
}

/* The wgmma kernel (sm_90a), forced with kernel=wgmma: every code
   family and scale encoding, both activation types, every output type and
   mode, ragged M (17, 33, 100, 257: partial and several token tiles), N
   (a last CTA with fewer m64 tiles) and K (not a multiple of 64), rows with
   a 16-byte aligned stride, one K split (the default) and 2, 3, 4 or 8
   (wgmma_splits: the last CTA of a tile sums them in split
   order), and both token tiles (64, 128).  Rows TMA cannot read (stride
   k + 3) must fall back to the streaming kernels.  By plan (unfolded, as
   these strict bf16 cases are): int4-g128 at M = 47 keeps wbulk, 8-bit
   integers in groups >= 32 take the strict pipeline from M = 32 (int8-g32
   at 31 does not), other 8-bit codes the one-ring kernel from M = 128
   (mxfp8 at 127 does not), 16-bit weights the TMA GEMM (bf16 at 130;
   e4m3-ch at 64), and int4-g128 at M = 100 the strict 4-bit pipeline
   (from M = 48). */
static void test_wgmma(void) {
    if (!fp8_gpu) {
        printf("     skip: the wgmma kernel needs compute capability 9.0\n");
        return;
    }
    th_rng r = th_seed();
    static const struct {
        int64_t m, k, n;
        const char *splits, *tn;
    } shapes[] = {{33, 520, 130, "8", NULL},   {17, 1000, 200, NULL, "128"}, {100, 4096, 77, "4", "128"},
                  {257, 1000, 300, "2", NULL}, {64, 2048, 96, "3", NULL},    {128, 256, 513, NULL, "128"},
                  {200, 1024, 264, NULL, NULL}};
    static const char *const fmts[] = {"int4-g128", "mxfp4", "nvfp4", "int8-g32", "e4m3-ch", "int4-g16:f32", "q4_0",
                                       "f16", "int4-g32:e8m0", "bf16", "mxfp8", "i4", "int8-g128", "e4m3"};
    const int nshapes = small_run ? 2 : (int)(sizeof shapes / sizeof shapes[0]), nf = (int)(sizeof fmts / sizeof fmts[0]);
    int cases = 0, passed = 0;
    debug_set("kernel", "wgmma");
    for (int s = 0; s < nshapes; s++) {
        if (shapes[s].splits) debug_set("wgmma_splits", shapes[s].splits);
        if (shapes[s].tn) debug_set("wgmma_tn", shapes[s].tn);
        for (int i = 0; i < (small_run ? 3 : 5); i++) {
            gpu_case c = {fmts[(s * 5 + i) % nf], TOPS_DT_F16, TOPS_DT_F32, shapes[s].m, shapes[s].k, shapes[s].n,
                          0, 0, 1, 0, 0};
            int v = s + i;
            c.act = (v & 1) ? TOPS_DT_BF16 : TOPS_DT_F16;
            if (strcmp(c.format, "f16") == 0) c.act = TOPS_DT_F16;
            if (strcmp(c.format, "bf16") == 0) c.act = TOPS_DT_BF16;
            c.out = v % 3 == 0 ? TOPS_DT_F32 : v % 3 == 1 ? TOPS_DT_F16 : TOPS_DT_BF16;
            c.strided_left = i == 1 ? 2 : i == 4 ? 1 : 0;
            c.accumulate = i == 2;
            c.prepack = i != 3;
            cases++;
            int ok = run_case(&c, &r);
            const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
            const int want = c.strided_left != 1; /* every K here is a multiple of 8 */
            if ((strncmp(kn, "wgmma", 5) == 0) != want) {
                TH_FAIL_AT("%s M=%lld K=%lld N=%lld strided=%d ran %s", c.format, (long long)c.m, (long long)c.k,
                           (long long)c.n, c.strided_left, kn);
                ok = 0;
            }
            passed += ok;
        }
        debug_set("wgmma_splits", NULL);
        debug_set("wgmma_tn", NULL);
    }
    debug_set("kernel", NULL);
    /* want: 1 the register-weight wgmma kernels, 0 anything else; where
       named, the kernel's name starts with that (the 16-bit TMA GEMM for
       16-bit and strict e4m3 weights from M = 17) */
    static const struct {
        const char *format;
        int64_t m;
        int want;
        const char *name;
    } plan[] = {{"int4-g128", 47, 0, NULL},         {"int8-g32", 31, 0, NULL},
                {"int8-g32", 32, 1, "wgmma_w strict pipelined"},
                {"mxfp8", 127, 0, NULL},            {"mxfp8", 128, 1, "wgmma_w m64n"},
                {"bf16", 130, 0, "bf16 persistent"},
                {"e4m3-ch", 64, 0, "bf16 one CTA per tile, e4m3 weights converted, 96-channel tiles"},
                {"int4-g128", 100, 1, NULL}};
    for (int i = 0; i < (int)(sizeof plan / sizeof plan[0]); i++) {
        gpu_case c = {plan[i].format, TOPS_DT_BF16, TOPS_DT_F16, plan[i].m, 512, 192, 0, 0, 1, 0, 0};
        cases++;
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        if ((strncmp(kn, "wgmma", 5) == 0) != plan[i].want ||
            (plan[i].name && strncmp(kn, plan[i].name, strlen(plan[i].name)) != 0)) {
            TH_FAIL_AT("%s M=%lld by plan ran %s", plan[i].format, (long long)plan[i].m, kn);
            ok = 0;
        }
        passed += ok;
    }
    printf("     %d of %d wgmma cases within their bounds\n", passed, cases);
}

/* The strict pipeline (wgmma_s_kernel: unfolded 4-bit and 8-bit integer
   codes, each scale group summed apart and scaled in f32): int4-gG (G = 32,
   64, 128, bf16 / e8m0 / f32 scales), q4_0, i4 (no scales), mxfp4 and nvfp4
   kept unfolded (fold=0), int8-gG (G = 32, 64, 128) and q8_0, within the
   strict bounds; ragged M
   (1, 7, 33, 100, 129, 257), N (1, 7, 33, 130, 513) and K (8, 40, 104,
   520, 1000, 4088: zero-filled activation tiles, a last W stage of few
   chunks, one group or a partial last one; K = 1 and 4095, whose rows TMA
   cannot read, must fall back and be right), both activation types, every
   output type, accumulate, K splits (a split starting inside a group), both
   token tiles; the kernel asserted by name.  int4-g16:f32 (its scale entries
   do not fit a W stage) must take the one-ring kernel; and the plan (bf16
   activations: f16 ones fold f16 scales in two terms, test_wgmma_folded):
   strict int4-g128 at M = 48 and q4_0 / int4-g32 at M = 65 take the
   pipeline, int4-g128 at 47 and q4_0 at 64 do not. */
/* The strict 16-bit TMA GEMM (fp8_gemm.cu): f16 / bf16 weights as they
   are, e4m3-ch / e4m3 codes converted to the activations' type in shared
   memory; from M = 17 where the activation rows are 16-byte aligned, on
   compute capability 9.0.  Ragged M, N and K against 128-token tiles,
   128- or 256-channel tiles and 64-deep K stages (K = 8: one partial stage;
   520, 1000, 4104: a last stage zero-filled past K), both activation
   types, every output, rows 16-byte aligned with a gap, packed on the fly;
   accumulate and output rows TMA cannot store (N = 130 in f16) on the
   one-CTA-per-tile kernel; several tiles a CTA (fp8_ctas caps
   the grid: the rings, the converted slots and the staging carried from
   tile to tile); each tile width where the wave rule picks it (expect_bn:
   96 for e4m3 codes where those tiles fit one wave, one CTA a tile, else
   128 at small M; 192 at M = 4200 and N = 1032 or 1030; 256 at N = 1024,
   f16 in clusters of two at M = 4000 (32 row tiles), without them at M =
   4200 (33: one wave of tiles, two of pairs); the capped grids keep
   128-wide persistent tiles by fp8_bn); and the cases that must stay off
   it (M = 16, unaligned rows).  The kernel each ran is asserted by name. */
/* pick_tiles (fp8_gemm.cu): the fewest waves times (width + 128); wide
   tiles in clusters of two (cl: f16 / bf16 weights, persistent) count
   row-tile pairs, half the SMs a wave, and win ties.  *clustered: whether
   the pick is the clusters. */
static int expect_bn(int64_t m, int64_t n, int slim_ok, int cl, int *clustered) {
    static const int bns[4] = {256, 192, 128, 96};
    const int64_t tm = (m + 127) / 128, per = gpu_sms / 2 > 0 ? gpu_sms / 2 : 1;
    int best = 256;
    int64_t best_cost = -1;
    *clustered = 0;
    if (cl) {
        best_cost = ((tm + 1) / 2 * ((n + 255) / 256) + per - 1) / per * (256 + 128);
        *clustered = 1;
    }
    for (int i = 0; i < 4; i++) {
        const int64_t tiles = tm * ((n + bns[i] - 1) / bns[i]), cost = (tiles + gpu_sms - 1) / gpu_sms * (bns[i] + 128);
        if (bns[i] == 96 && (!slim_ok || tiles > gpu_sms)) continue;
        if (best_cost < 0 || cost < best_cost) best = bns[i], best_cost = cost, *clustered = 0;
    }
    return best;
}
static void test_h16_gemm(void) {
    th_rng r = th_seed();
    enum { ONE, PERSIST };
    static const struct {
        const char *format;
        tops_dtype act, out;
        int64_t m, k, n;
        int strided, accumulate, prepack;
        const char *ctas;
        int want; /* ONE, PERSIST, or -1: not this GEMM */
    } cases[] = {
        {"f16", TOPS_DT_F16, TOPS_DT_F32, 17, 1000, 776, 0, 0, 1, NULL, PERSIST},
        {"bf16", TOPS_DT_BF16, TOPS_DT_F16, 100, 520, 264, 2, 0, 1, NULL, PERSIST},
        {"e4m3-ch", TOPS_DT_F16, TOPS_DT_BF16, 300, 520, 776, 0, 0, 1, "5", PERSIST},
        {"e4m3-ch", TOPS_DT_BF16, TOPS_DT_F32, 64, 8, 200, 0, 1, 1, NULL, ONE},
        {"f16", TOPS_DT_F16, TOPS_DT_F16, 129, 1000, 130, 0, 0, 0, NULL, ONE},
        {"e4m3", TOPS_DT_F16, TOPS_DT_F32, 257, 4104, 136, 2, 0, 1, NULL, PERSIST},
        {"bf16", TOPS_DT_BF16, TOPS_DT_BF16, 200, 256, 520, 0, 0, 0, "2", PERSIST},
        {"e4m3-ch", TOPS_DT_BF16, TOPS_DT_F16, 33, 1000, 130, 0, 0, 0, NULL, ONE},
        {"e4m3-ch", TOPS_DT_F16, TOPS_DT_F32, 200, 2048, 776, 0, 0, 1, "3", PERSIST},
        {"f16", TOPS_DT_F16, TOPS_DT_F32, 16, 1000, 776, 0, 0, 1, NULL, -1},
        {"e4m3-ch", TOPS_DT_F16, TOPS_DT_F32, 16, 1000, 776, 0, 0, 1, NULL, -1},
        {"bf16", TOPS_DT_BF16, TOPS_DT_F16, 64, 1000, 776, 1, 0, 1, NULL, -1},
        {"e4m3-ch", TOPS_DT_F16, TOPS_DT_F32, 64, 1000, 776, 1, 0, 1, NULL, -1},
        {"f16", TOPS_DT_F16, TOPS_DT_F32, 4000, 200, 1024, 0, 0, 1, NULL, PERSIST},
        {"bf16", TOPS_DT_BF16, TOPS_DT_BF16, 4200, 200, 1024, 0, 0, 1, "6", PERSIST},
        {"e4m3-ch", TOPS_DT_F16, TOPS_DT_F16, 4200, 200, 1024, 0, 0, 1, NULL, PERSIST},
        {"e4m3-ch", TOPS_DT_BF16, TOPS_DT_F32, 4200, 136, 1024, 0, 0, 1, "4", PERSIST},
        {"f16", TOPS_DT_F16, TOPS_DT_BF16, 4200, 200, 1032, 0, 0, 1, "7", PERSIST},
        {"e4m3", TOPS_DT_BF16, TOPS_DT_F16, 4200, 520, 1032, 0, 0, 1, NULL, PERSIST},
        {"f16", TOPS_DT_F16, TOPS_DT_F16, 4200, 136, 1030, 0, 1, 1, NULL, ONE},
        {"e4m3-ch", TOPS_DT_F16, TOPS_DT_F32, 4200, 72, 1030, 0, 0, 1, NULL, ONE},
    };
    static const int small[] = {0, 2, 3, 5};
    const int n = small_run ? 4 : (int)(sizeof cases / sizeof cases[0]);
    int passed = 0;
    debug_set("e4m3_once", "0"); /* these check the in-kernel conversion's schedules */
    for (int j = 0; j < n; j++) {
        const int i = small_run ? small[j] : j;
        debug_set("fp8_ctas", cases[i].ctas ? cases[i].ctas : "");
        /* a capped grid is a persistent schedule: 128-wide tiles where the rule picks 96 */
        const int codes = strncmp(cases[i].format, "e4m3", 4) == 0;
        int clustered = 0;
        const int cl = cases[i].want == PERSIST && !codes;
        const int slim = expect_bn(cases[i].m, cases[i].n, codes, cl, &clustered) == 96, forced = slim && cases[i].ctas;
        debug_set("fp8_bn", forced ? "128" : NULL);
        gpu_case c = {cases[i].format, cases[i].act, cases[i].out, cases[i].m, cases[i].k, cases[i].n,
                      cases[i].strided, cases[i].accumulate, cases[i].prepack, 0, 0};
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        const int bf = c.act == TOPS_DT_BF16;
        const int bn = forced ? 128 : expect_bn(c.m, c.n, codes, cl, &clustered);
        const int ran = strncmp(kn, bf ? "bf16 " : "f16 ", bf ? 5 : 4) == 0;
        int right = cases[i].want < 0 ? !ran : ran && (strstr(kn, "e4m3 weights converted") != NULL) == codes;
        if (cases[i].want >= 0) right = right && (strstr(kn, "96-channel") != NULL) == (bn == 96);
        if (cases[i].want == ONE || (cases[i].want == PERSIST && bn == 96))
            right = right && strstr(kn, "one CTA per tile");
        else if (cases[i].want == PERSIST)
            right = right && strstr(kn, "persistent") && (strstr(kn, "128-channel") != NULL) == (bn == 128) &&
                    (strstr(kn, "192-channel") != NULL) == (bn == 192) &&
                    (strstr(kn, "clusters of 2 sharing the weight tile") != NULL) == (bn == 256 && clustered);
        if (fp8_gpu && !right) {
            TH_FAIL_AT("%s act=%s M=%lld K=%lld N=%lld ran %s", c.format, tops_dtype_name(c.act), (long long)c.m,
                       (long long)c.k, (long long)c.n, kn);
            ok = 0;
        }
        passed += ok;
    }
    debug_set("fp8_ctas", NULL);
    debug_set("fp8_bn", NULL);
    /* e4m3 codes converted once into a workspace, then the 16-bit GEMM:
       forced at small M (e4m3_once=1), by the plan at M = 4200 (and kept
       off there by e4m3_once=0); slices of 64 / 48 channels (dequant_rows)
       with N not a multiple of them; both activation types, every output,
       accumulate, unaligned outputs (one CTA a tile), packed on the fly. */
    static const struct {
        const char *format, *once, *rows;
        tops_dtype act, out;
        int64_t m, k, n;
        int accumulate, prepack, want;
    } once[] = {
        {"e4m3-ch", "1", "", TOPS_DT_F16, TOPS_DT_F32, 100, 520, 776, 0, 1, 1},
        {"e4m3", "1", "64", TOPS_DT_BF16, TOPS_DT_F16, 300, 1000, 200, 0, 1, 1},
        {"e4m3-ch", "1", "48", TOPS_DT_F16, TOPS_DT_BF16, 64, 136, 130, 1, 0, 1},
        {"e4m3-ch", "", "", TOPS_DT_BF16, TOPS_DT_F32, 4200, 200, 520, 0, 1, 1},
        {"e4m3-ch", "0", "", TOPS_DT_F16, TOPS_DT_F16, 4200, 200, 520, 0, 1, 0},
        {"e4m3", "1", "", TOPS_DT_F16, TOPS_DT_F16, 33, 4104, 136, 0, 0, 1},
    };
    const int n_once = small_run ? 2 : (int)(sizeof once / sizeof once[0]);
    for (int i = 0; i < n_once; i++) {
        debug_set("e4m3_once", once[i].once);
        debug_set("dequant_rows", once[i].rows);
        gpu_case c = {once[i].format, once[i].act, once[i].out, once[i].m, once[i].k, once[i].n, 0,
                      once[i].accumulate, once[i].prepack, 0, 0};
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        if (fp8_gpu && (strstr(kn, "converted once") != NULL) != once[i].want) {
            TH_FAIL_AT("%s act=%s M=%lld e4m3_once=%s ran %s", c.format, tops_dtype_name(c.act), (long long)c.m,
                       once[i].once, kn);
            ok = 0;
        }
        passed += ok;
    }
    debug_set("e4m3_once", NULL);
    debug_set("dequant_rows", NULL);
    printf("     %d of %d strict 16-bit TMA GEMM cases within their bounds\n", passed, n + n_once);
}

static void test_wgmma_strict(void) {
    if (!fp8_gpu) {
        printf("     skip: the wgmma kernel needs compute capability 9.0\n");
        return;
    }
    th_rng r = th_seed();
    static const struct {
        const char *format;
        tops_dtype act, out;
        int64_t m, k, n;
        int accumulate, prepack;
        const char *splits, *tn;
        int want;
    } cases[] = {
        {"int4-g128", TOPS_DT_F16, TOPS_DT_F32, 128, 4096, 130, 0, 1, NULL, NULL, 1},
        {"q4_0", TOPS_DT_F16, TOPS_DT_F16, 100, 1000, 513, 1, 1, NULL, NULL, 1},
        {"int4-g32", TOPS_DT_BF16, TOPS_DT_F32, 33, 4088, 77, 0, 1, NULL, NULL, 1},
        {"int4-g32", TOPS_DT_BF16, TOPS_DT_F32, 33, 4095, 77, 0, 1, NULL, NULL, 0},
        {"int4-g64", TOPS_DT_F16, TOPS_DT_BF16, 257, 520, 200, 0, 0, NULL, NULL, 1},
        {"int4-g128:bf16", TOPS_DT_BF16, TOPS_DT_F32, 129, 1000, 33, 1, 1, "3", NULL, 1},
        {"int4-g32:e8m0", TOPS_DT_F16, TOPS_DT_F32, 7, 104, 7, 0, 1, NULL, "128", 1},
        {"i4", TOPS_DT_F16, TOPS_DT_F32, 64, 2048, 96, 0, 1, "2", NULL, 1},
        {"int4-g128", TOPS_DT_BF16, TOPS_DT_F16, 1, 40, 1, 0, 1, NULL, NULL, 1},
        {"q4_0", TOPS_DT_BF16, TOPS_DT_BF16, 200, 8, 264, 1, 1, NULL, NULL, 1},
        {"int4-g128", TOPS_DT_F16, TOPS_DT_F32, 64, 1, 130, 0, 1, NULL, "128", 0},
        {"int4-g128", TOPS_DT_F16, TOPS_DT_F32, 300, 1000, 300, 0, 1, "4", "64", 1},
        {"mxfp4", TOPS_DT_F16, TOPS_DT_F32, 100, 1000, 200, 1, 1, NULL, NULL, 1},
        {"nvfp4", TOPS_DT_BF16, TOPS_DT_F32, 128, 520, 130, 0, 1, NULL, NULL, 1},
        {"int4-g16:f32", TOPS_DT_F16, TOPS_DT_F32, 100, 1000, 200, 0, 1, NULL, NULL, 0},
        // groups of 128: the warpgroups' turns where a CTA's K is whole
        // turns (two splits of 8 k64 blocks), the chunk pipeline where its
        // block count is odd (17)
        {"int4-g128", TOPS_DT_BF16, TOPS_DT_F16, 77, 2048, 260, 0, 0, "2", "128", 1},
        {"int4-g128", TOPS_DT_F16, TOPS_DT_F32, 200, 1088, 136, 1, 1, NULL, NULL, 1},
        // 8-bit codes on the dual units (two k16 steps, one k32 chunk,
        // drained every unit whatever the group), the weights put in K
        // order by the quad shuffle: a partial last group, splits, both
        // token tiles
        {"int8-g32", TOPS_DT_F16, TOPS_DT_F32, 128, 4096, 130, 0, 1, NULL, NULL, 1},
        {"q8_0", TOPS_DT_BF16, TOPS_DT_F16, 100, 1000, 513, 1, 1, NULL, NULL, 1},
        {"int8-g128", TOPS_DT_F16, TOPS_DT_BF16, 257, 1000, 200, 0, 0, "3", NULL, 1},
        {"int8-g32:e8m0", TOPS_DT_BF16, TOPS_DT_F32, 33, 520, 77, 1, 1, "2", "64", 1},
        {"int8-g64:f32", TOPS_DT_F16, TOPS_DT_F32, 7, 104, 7, 0, 1, NULL, "128", 1},
        {"int8-g32", TOPS_DT_F16, TOPS_DT_F16, 300, 8, 264, 0, 1, NULL, NULL, 1},
    };
    static const int small[] = {0, 1, 17, 18};
    const int n = small_run ? 4 : (int)(sizeof cases / sizeof cases[0]);
    int passed = 0;
    debug_set("kernel", "wgmma");
    debug_set("fold", "0");
    for (int j = 0; j < n; j++) {
        const int i = small_run ? small[j] : j;
        if (cases[i].splits) debug_set("wgmma_splits", cases[i].splits);
        if (cases[i].tn) debug_set("wgmma_tn", cases[i].tn);
        gpu_case c = {cases[i].format, cases[i].act, cases[i].out, cases[i].m, cases[i].k, cases[i].n, 0,
                      cases[i].accumulate, cases[i].prepack, 0, 0};
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        if ((strstr(kn, "strict pipelined") != NULL) != cases[i].want) {
            TH_FAIL_AT("%s act=%s M=%lld K=%lld ran %s (want %sthe strict pipeline)", c.format, tops_dtype_name(c.act),
                       (long long)c.m, (long long)c.k, kn, cases[i].want ? "" : "not ");
            ok = 0;
        }
        passed += ok;
        debug_set("wgmma_splits", NULL);
        debug_set("wgmma_tn", NULL);
    }
    debug_set("kernel", NULL);
    debug_set("fold", NULL);
    static const struct {
        const char *format;
        int64_t m;
        int want;
    } plan[] = {{"int4-g128", 48, 1}, {"q4_0", 65, 1}, {"int4-g32", 256, 1}, {"q4_0", 64, 0}, {"int4-g128", 47, 0}};
    for (int i = 0; i < 5; i++) {
        gpu_case c = {plan[i].format, TOPS_DT_BF16, TOPS_DT_F16, plan[i].m, 1024, 192, 0, 0, 1, 0, 0};
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        if ((strstr(kn, "strict pipelined") != NULL) != plan[i].want) {
            TH_FAIL_AT("%s M=%lld by plan ran %s", plan[i].format, (long long)plan[i].m, kn);
            ok = 0;
        }
        passed += ok;
    }
    printf("     %d of %d strict-pipeline wgmma cases within their bounds\n", passed, n + 5);
}

/* The folded-scale wgmma kernel (w = code x scale in the activations'
   type, one f32 sum over K): strict e2m1 (mxfp4, gguf-mxfp4, nvfp4: exact,
   so within the strict bounds), strict 4-bit integers with f16 scales,
   groups below 64 and f16 activations in two exact terms (int4-g32, q4_0:
   within the strict bounds), relaxed 4-bit integers with f16 scales and
   f16 activations (within the strict bound + FOLD_REL_L2); ragged M, N and
   K, both activation types, every output type, accumulate, K splits, both
   token tiles (wgmma_tn), 2 or 4 consumer warpgroups
   (wgmma_cw; with 4, a K split of one chunk leaves a warpgroup with
   no chunk of its own, and an odd chunk count one with none in the last
   stage), the K order by lane shuffles
   (default) or by a stage permute (wgmma_permute=1).  Then the cases that must NOT
   fold and still be right: int4 with bf16 activations (relaxed and strict),
   strict int4-g64 / g128 (the strict pipeline measured faster there),
   fold=0, and mxfp4 whose block scales span 2^40 (beyond
   f16's range: f16 activations fall back, bf16 ones fold), int4-g32 whose
   rows' scales span 2^40 (past f16's range); and the plan. */
static void test_wgmma_folded(void) {
    if (!fp8_gpu) {
        printf("     skip: the wgmma kernel needs compute capability 9.0\n");
        return;
    }
    th_rng r = th_seed();
    static const struct {
        const char *format;
        tops_dtype act, out;
        int64_t m, k, n;
        int accumulate, prepack, relaxed, spread;
        const char *splits, *tn, *fold_env;
        int want_fold;
    } cases[] = {
        {"mxfp4", TOPS_DT_F16, TOPS_DT_F32, 33, 520, 130, 0, 1, 0, 0, NULL, NULL, NULL, 1},
        {"nvfp4", TOPS_DT_BF16, TOPS_DT_F16, 100, 1000, 200, 1, 1, 0, 0, "3", NULL, NULL, 1},
        {"int4-g128", TOPS_DT_F16, TOPS_DT_F32, 128, 4096, 77, 0, 1, 1, 0, NULL, NULL, NULL, 1},
        {"mxfp4", TOPS_DT_BF16, TOPS_DT_BF16, 257, 1000, 300, 0, 0, 0, 0, "2", NULL, NULL, 1},
        {"nvfp4", TOPS_DT_F16, TOPS_DT_F32, 17, 2048, 96, 0, 1, 1, 0, NULL, "128", NULL, 1},
        {"q4_0", TOPS_DT_F16, TOPS_DT_F16, 200, 1024, 264, 1, 1, 1, 0, NULL, NULL, NULL, 1},
        {"int4-g32", TOPS_DT_F16, TOPS_DT_BF16, 64, 256, 513, 0, 1, 1, 0, "4", "128", NULL, 1},
        {"gguf-mxfp4", TOPS_DT_F16, TOPS_DT_F32, 129, 992, 130, 0, 1, 0, 0, NULL, NULL, NULL, 1},
        {"nvfp4", TOPS_DT_BF16, TOPS_DT_F32, 300, 136, 776, 0, 1, 0, 0, NULL, NULL, NULL, 1},
        {"mxfp4", TOPS_DT_F16, TOPS_DT_F32, 130, 1000, 300, 0, 1, 0, 0, "2", "128", NULL, 1},
        {"int4-g128", TOPS_DT_F16, TOPS_DT_F32, 100, 2048, 200, 1, 1, 1, 0, NULL, NULL, NULL, 1},
        {"int4-g16", TOPS_DT_F16, TOPS_DT_F32, 128, 1024, 200, 0, 1, 0, 0, NULL, NULL, NULL, 1},
        {"q4_0", TOPS_DT_F16, TOPS_DT_BF16, 77, 1000, 130, 1, 1, 0, 0, "3", NULL, NULL, 1},
        {"int4-g32", TOPS_DT_F16, TOPS_DT_F16, 300, 4096, 96, 0, 0, 0, 0, NULL, "64", NULL, 1},
        {"int4-g128", TOPS_DT_F16, TOPS_DT_F32, 128, 1024, 200, 0, 1, 0, 0, NULL, NULL, NULL, 0},
        {"int4-g64", TOPS_DT_F16, TOPS_DT_F32, 129, 520, 33, 0, 1, 0, 0, NULL, NULL, NULL, 0},
        {"int4-g128", TOPS_DT_BF16, TOPS_DT_F32, 128, 1024, 200, 0, 1, 1, 0, NULL, NULL, NULL, 0},
        {"int4-g128", TOPS_DT_BF16, TOPS_DT_F32, 128, 1024, 200, 0, 1, 0, 0, NULL, NULL, NULL, 0},
        {"int4-g32", TOPS_DT_F16, TOPS_DT_F32, 64, 512, 192, 0, 1, 0, 1, NULL, NULL, NULL, 0},
        {"mxfp4", TOPS_DT_F16, TOPS_DT_F16, 100, 1000, 200, 1, 1, 0, 0, "2", NULL, "0", 0},
        {"mxfp4", TOPS_DT_F16, TOPS_DT_F32, 64, 512, 192, 0, 1, 0, 1, NULL, NULL, NULL, 0},
        {"mxfp4", TOPS_DT_BF16, TOPS_DT_F32, 64, 512, 192, 0, 1, 0, 1, NULL, NULL, NULL, 1},
    };
    const int n = small_run ? 3 : (int)(sizeof cases / sizeof cases[0]);
    int passed = 0;
    debug_set("kernel", "wgmma");
    for (int i = 0; i < n; i++) {
        if (cases[i].splits) debug_set("wgmma_splits", cases[i].splits);
        if (cases[i].tn) debug_set("wgmma_tn", cases[i].tn);
        if (cases[i].fold_env) debug_set("fold", cases[i].fold_env);
        if (i % 4 == 3) debug_set("wgmma_permute", "1"); /* the stage-permute variant */
        /* 2 and 4 consumer warpgroups, each also with the permute */
        debug_set("wgmma_cw", (i + i / 4) % 4 >= 2 ? "4" : "2");
        gpu_case c = {cases[i].format, cases[i].act, cases[i].out, cases[i].m, cases[i].k, cases[i].n, 0,
                      cases[i].accumulate, cases[i].prepack, cases[i].relaxed, cases[i].spread};
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        if ((strstr(kn, "folded") != NULL) != cases[i].want_fold) {
            TH_FAIL_AT("%s act=%s M=%lld relaxed=%d spread=%d ran %s (want %sfolded)", c.format,
                       tops_dtype_name(c.act), (long long)c.m, c.relaxed, c.spread, kn, cases[i].want_fold ? "" : "not ");
            ok = 0;
        }
        passed += ok;
        debug_set("wgmma_splits", NULL);
        debug_set("wgmma_tn", NULL);
        debug_set("fold", NULL);
        debug_set("wgmma_permute", NULL);
        debug_set("wgmma_cw", NULL);
    }
    debug_set("kernel", NULL);
    /* By plan (no forcing), strict at M = 128: mxfp4 folds, q4_0 in two
       terms, int4-g128 takes the strict pipeline (relaxed int4-g128 runs
       wgmma_q8 now: test_q8); q4_0 folds from M = 48 (wbulk below). */
    static const struct {
        const char *format;
        int64_t m;
        const char *want;
    } plan[] = {{"mxfp4", 128, "folded m64"}, {"q4_0", 128, "two exact scale terms"},
                {"int4-g128", 128, "strict pipelined"}, {"q4_0", 48, "two exact scale terms"}, {"q4_0", 47, "wbulk"}};
    for (int i = 0; i < 5; i++) {
        gpu_case c = {plan[i].format, TOPS_DT_F16, TOPS_DT_F16, plan[i].m, 512, 192, 0, 0, 1, 0, 0};
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        if (!strstr(kn, plan[i].want)) {
            TH_FAIL_AT("%s M=%lld by plan ran %s (want %s)", plan[i].format, (long long)plan[i].m, kn, plan[i].want);
            ok = 0;
        }
        passed += ok;
    }
    printf("     %d of %d folded-scale wgmma cases within their bounds; worst relaxed f32-output rel-L2 %.3g (bound %.0e "
           "+ %.0e)\n",
           passed, n + 5, fold_worst, bound_for(TOPS_DT_F32), FOLD_REL_L2);
}

/* Folded 4-bit weights dequantized to 16-bit, then the 16-bit TMA GEMM
   (dequant.cu): strict e2m1 (mxfp4, gguf-mxfp4, nvfp4: exact, within the
   strict bounds), relaxed 4-bit integers with f16 scales and f16
   activations (within the strict bound + FOLD_REL_L2), forced at small M
   (kernel=h16): ragged M, N and K, both activation types, every output,
   accumulate, packed on the fly, channel slices (dequant_rows: several
   GEMMs over slices of N, the last one ragged); the cases that must not
   take it (strict q4_0: two terms; int4 with bf16 activations: no fold);
   and the plan: mxfp4 from M = 1024. */
static void test_dequant(void) {
    if (!fp8_gpu) {
        printf("     skip: the 16-bit TMA GEMM needs compute capability 9.0\n");
        return;
    }
    th_rng r = th_seed();
    static const struct {
        const char *format;
        tops_dtype act, out;
        int64_t m, k, n;
        int accumulate, prepack, relaxed;
        const char *rows;
        int want;
    } cases[] = {
        {"mxfp4", TOPS_DT_F16, TOPS_DT_F32, 33, 520, 130, 0, 1, 0, NULL, 1},
        {"nvfp4", TOPS_DT_BF16, TOPS_DT_F16, 100, 1000, 200, 1, 1, 0, "64", 1},
        {"gguf-mxfp4", TOPS_DT_F16, TOPS_DT_BF16, 129, 992, 77, 0, 0, 0, NULL, 1},
        {"mxfp4", TOPS_DT_BF16, TOPS_DT_F32, 300, 4096, 300, 1, 1, 0, "128", 1},
        {"q4_0", TOPS_DT_F16, TOPS_DT_F32, 64, 1024, 264, 0, 1, 1, "96", 1},
        {"int4-g128", TOPS_DT_F16, TOPS_DT_F16, 17, 2048, 96, 1, 1, 1, NULL, 1},
        {"q4_0", TOPS_DT_F16, TOPS_DT_F32, 64, 1024, 264, 0, 1, 0, NULL, 0},
        {"int4-g128", TOPS_DT_BF16, TOPS_DT_F32, 64, 1024, 264, 0, 1, 1, NULL, 1}, /* relaxed, rounded once */
    };
    const int n = small_run ? 3 : (int)(sizeof cases / sizeof cases[0]);
    int passed = 0;
    debug_set("kernel", "h16");
    for (int i = 0; i < n; i++) {
        debug_set("dequant_rows", cases[i].rows ? cases[i].rows : "");
        gpu_case c = {cases[i].format, cases[i].act, cases[i].out, cases[i].m, cases[i].k, cases[i].n, 0,
                      cases[i].accumulate, cases[i].prepack, cases[i].relaxed, 0};
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        if ((strstr(kn, "dequantized") != NULL) != cases[i].want) {
            TH_FAIL_AT("%s act=%s M=%lld relaxed=%d ran %s (want %sdequantized)", c.format, tops_dtype_name(c.act),
                       (long long)c.m, c.relaxed, kn, cases[i].want ? "" : "not ");
            ok = 0;
        }
        passed += ok;
    }
    debug_set("dequant_rows", NULL);
    debug_set("kernel", NULL);
    static const struct {
        int64_t m;
        int want;
    } plan[] = {{1024, 1}, {1023, 0}};
    for (int i = 0; i < 2; i++) {
        gpu_case c = {"mxfp4", TOPS_DT_F16, TOPS_DT_F16, plan[i].m, 512, 192, 0, 0, 1, 0, 0};
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        if ((strstr(kn, "dequantized") != NULL) != plan[i].want) {
            TH_FAIL_AT("mxfp4 M=%lld by plan ran %s", (long long)plan[i].m, kn);
            ok = 0;
        }
        passed += ok;
    }
    printf("     %d of %d dequantized-weight cases within their bounds\n", passed, n + 2);
}

/* Relaxed mode, codes no faster relaxed kernel takes: weights (and the
   biases of formats with mins) dequantized once, rounded once to 16 bits,
   then the 16-bit TMA GEMM (dequant.cu, tops__cu_dequant_relaxed_gemm):
   forced at small M (kernel=h16) for every code family (4-bit integers with
   f32 scales and mins, 8-bit integers, K-quants, codebooks, e4m3 with e8m0
   scales), both activation types and f32, every output, accumulate,
   unaligned outputs (one CTA a tile), packed on the fly, channel slices
   (dequant_rows), rows 2^40 apart (spread: each channel its own unit); the
   cases that must not take it (strict mode); the plan (from M = 128). */
static void test_dequant_relaxed(void) {
    if (!fp8_gpu) {
        printf("     skip: the 16-bit TMA GEMM needs compute capability 9.0\n");
        return;
    }
    th_rng r = th_seed();
    static const struct {
        const char *format, *kernel, *rows;
        tops_dtype act, out;
        int64_t m, k, n;
        int accumulate, prepack, relaxed, spread, want;
    } cases[] = {
        {"q4_K", "h16", "", TOPS_DT_F16, TOPS_DT_F32, 40, 1024, 130, 0, 1, 1, 0, 1},
        {"q8_0", "h16", "64", TOPS_DT_BF16, TOPS_DT_F16, 100, 992, 200, 1, 1, 1, 0, 1},
        {"q5_K", "h16", "", TOPS_DT_F32, TOPS_DT_BF16, 33, 512, 77, 0, 0, 1, 0, 1},
        {"int8-g32", "h16", "", TOPS_DT_F16, TOPS_DT_F32, 129, 520, 264, 0, 1, 1, 1, 1},
        {"q6_K", "h16", "", TOPS_DT_BF16, TOPS_DT_F32, 64, 768, 136, 1, 1, 1, 0, 1},
        {"iq4_nl", "h16", "", TOPS_DT_F16, TOPS_DT_F32, 17, 256, 200, 0, 1, 1, 0, 1},
        {"iq4_xs", "h16", "48", TOPS_DT_F16, TOPS_DT_BF16, 70, 512, 100, 0, 1, 1, 0, 1},
        {"mxfp8", "h16", "", TOPS_DT_F16, TOPS_DT_F32, 80, 512, 264, 0, 1, 1, 0, 1},
        {"int4-g16:f32", "h16", "", TOPS_DT_F16, TOPS_DT_F32, 50, 1040, 130, 1, 1, 1, 1, 1},
        {"q4_1", "h16", "", TOPS_DT_F32, TOPS_DT_F32, 30, 512, 264, 0, 1, 1, 0, 1},
        {"q4_K", "h16", "", TOPS_DT_F16, TOPS_DT_F32, 40, 1024, 130, 0, 1, 0, 0, 0},
        {"q8_0", "", "", TOPS_DT_F16, TOPS_DT_F16, 128, 512, 192, 0, 1, 1, 0, 1},
        {"q4_K", "", "", TOPS_DT_BF16, TOPS_DT_F32, 300, 512, 100, 0, 1, 1, 0, 1},
        {"q8_0", "", "", TOPS_DT_F16, TOPS_DT_F16, 127, 512, 192, 0, 1, 1, 0, 0},
    };
    const int n = small_run ? 3 : (int)(sizeof cases / sizeof cases[0]);
    int passed = 0;
    for (int i = 0; i < n; i++) {
        debug_set("kernel", cases[i].kernel);
        debug_set("dequant_rows", cases[i].rows);
        gpu_case c = {cases[i].format, cases[i].act, cases[i].out, cases[i].m, cases[i].k, cases[i].n, 0,
                      cases[i].accumulate, cases[i].prepack, cases[i].relaxed, cases[i].spread};
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        if ((strstr(kn, "rounded once") != NULL) != cases[i].want) {
            TH_FAIL_AT("%s act=%s M=%lld relaxed=%d ran %s (want %sthe relaxed dequantization)", c.format,
                       tops_dtype_name(c.act), (long long)c.m, c.relaxed, kn, cases[i].want ? "" : "not ");
            ok = 0;
        }
        passed += ok;
    }
    debug_set("dequant_rows", NULL);
    debug_set("kernel", NULL);
    printf("     %d of %d relaxed dequantized-weight cases within their bounds\n", passed, n);
}

/* Integer codes with scales in K groups (int4-gG, q4_0, q4_1, int8-gG,
   q8_0) converted once to f16, then the TMA GEMM with rescaled
   accumulators (dequant.cu, tops__cu_rescaled_gemm): forced at small M
   (rescaled=1) within the strict bounds, ragged M, N and K, every output,
   accumulate (one CTA a tile), packed on the fly, f32 activations,
   channel slices (dequant_rows), capped grids (fp8_ctas: a CTA walks
   several tiles); scale planes that test the rescaling: wide spans
   within a row, zero scales over nonzero codes, spans past 2^60 and
   scales that are not finite (those channels' strict pass); the cases
   that must not take it (bf16 activations, rescaled=0, mxfp4); the plan
   (8-bit codes from M = 1024, 4-bit from 2048). */
static void test_rescaled(void) {
    if (!fp8_gpu) {
        printf("     skip: the rescaled-group TMA GEMM needs compute capability 9.0\n");
        return;
    }
    th_rng r = th_seed();
    static const struct {
        const char *format, *rescaled, *rows, *ctas;
        tops_dtype act, out;
        int64_t m, k, n;
        int accumulate, prepack, edit, want;
    } cases[] = {
        {"int4-g32", "1", "", "", TOPS_DT_F16, TOPS_DT_F32, 33, 520, 130, 0, 1, 0, 1},
        {"q4_0", "1", "64", "", TOPS_DT_F16, TOPS_DT_F16, 100, 1000, 200, 0, 1, 0, 1},
        {"int8-g32", "1", "", "3", TOPS_DT_F16, TOPS_DT_BF16, 300, 4096, 300, 0, 0, 0, 1},
        {"q8_0", "1", "48", "", TOPS_DT_F16, TOPS_DT_F32, 129, 992, 77, 0, 1, 0, 1},
        {"int4-g128", "1", "", "", TOPS_DT_F16, TOPS_DT_F16, 17, 2048, 264, 1, 1, 0, 1},
        {"int4-g64", "1", "", "2", TOPS_DT_F16, TOPS_DT_F32, 257, 1088, 520, 0, 1, 0, 1},
        {"int4-g32:e8m0", "1", "", "", TOPS_DT_F16, TOPS_DT_BF16, 130, 776, 300, 0, 0, 0, 1},
        {"int8-g128", "1", "", "", TOPS_DT_F16, TOPS_DT_F32, 64, 4104, 136, 0, 1, 0, 1},
        {"q4_1", "1", "", "", TOPS_DT_F16, TOPS_DT_F32, 100, 1024, 264, 0, 1, 0, 1},
        {"int4-g32", "1", "", "", TOPS_DT_F32, TOPS_DT_F16, 70, 512, 264, 0, 1, 0, 1},
        {"int4-g32", "1", "", "", TOPS_DT_F16, TOPS_DT_F32, 96, 512, 264, 0, 1, 1, 1},
        {"int4-g32:f32", "1", "", "", TOPS_DT_F16, TOPS_DT_F32, 96, 512, 264, 0, 1, 1, 1},
        {"int4-g128", "1", "", "", TOPS_DT_F16, TOPS_DT_F32, 64, 1024, 264, 1, 1, 2, 1},
        {"int8-g32", "1", "", "", TOPS_DT_F16, TOPS_DT_F16, 64, 512, 100, 0, 1, 3, 1},
        {"int4-g32", "1", "", "", TOPS_DT_BF16, TOPS_DT_F32, 64, 1024, 264, 0, 1, 0, 0},
        {"int8-g32", "0", "", "", TOPS_DT_F16, TOPS_DT_F32, 200, 1024, 264, 0, 1, 0, 0},
        {"mxfp4", "1", "", "", TOPS_DT_F16, TOPS_DT_F32, 64, 1024, 264, 0, 1, 0, 0},
        {"int8-g32", "", "", "", TOPS_DT_F16, TOPS_DT_F16, 1024, 512, 192, 0, 1, 0, 1},
        {"q8_0", "", "", "", TOPS_DT_F16, TOPS_DT_F16, 1023, 512, 192, 0, 1, 0, 0},
        {"int4-g128", "", "", "", TOPS_DT_F16, TOPS_DT_F16, 2047, 256, 64, 0, 1, 0, 0},
        {"q4_0", "", "", "", TOPS_DT_F16, TOPS_DT_F16, 2048, 256, 64, 0, 1, 0, 1},
    };
    const int n = small_run ? 3 : (int)(sizeof cases / sizeof cases[0]);
    int passed = 0;
    for (int i = 0; i < n; i++) {
        debug_set("rescaled", cases[i].rescaled);
        debug_set("dequant_rows", cases[i].rows);
        debug_set("fp8_ctas", cases[i].ctas);
        gpu_case c = {cases[i].format, cases[i].act, cases[i].out, cases[i].m, cases[i].k, cases[i].n, 0,
                      cases[i].accumulate, cases[i].prepack, 0, 0};
        scale_edit_next = cases[i].edit;
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        if ((strstr(kn, "rescaled groups") != NULL) != cases[i].want) {
            TH_FAIL_AT("%s act=%s M=%lld rescaled=%s ran %s (want %srescaled)", c.format, tops_dtype_name(c.act),
                       (long long)c.m, cases[i].rescaled, kn, cases[i].want ? "" : "not ");
            ok = 0;
        }
        passed += ok;
    }
    debug_set("rescaled", NULL);
    debug_set("dequant_rows", NULL);
    debug_set("fp8_ctas", NULL);
    printf("     %d of %d rescaled-group GEMM cases within their bounds\n", passed, n);
}

/* Factored sub-block scales (pack.c, factor_scales; q4_K, q5_K): codes
   times their sub-block's f16 multiplier, super-block scales D.  The strict
   4-bit pipeline (kernel=wgmma) and the rescaled groups (rescaled=1) within
   the strict bounds: ragged M, N and K (a short last super-block), both
   token tiles, every output, accumulate, packed on the fly, f32
   activations (f16 terms), K splits; the cases that must not take the
   multipliers but still be right (bf16 activations, factored=0, q5_K's
   8-bit codes on the one-ring kernel); the plan (4-bit: the pipeline from
   M = 48, 8-bit: the rescaled groups from 1024). */
static void test_factored(void) {
    if (!fp8_gpu) {
        printf("     skip: the factored kernels need compute capability 9.0\n");
        return;
    }
    th_rng r = th_seed();
    static const struct {
        const char *format, *kernel, *rescaled, *factored, *tn, *splits;
        tops_dtype act, out;
        int64_t m, k, n;
        int accumulate, prepack;
        const char *want; /* a piece of the kernel's name, or NULL: not the multipliers */
    } cases[] = {
        {"q4_K", "wgmma", "0", "", "", "", TOPS_DT_F16, TOPS_DT_F32, 128, 4096, 130, 0, 1, "sub-block multipliers, m64n128"},
        {"q4_K", "wgmma", "0", "", "64", "", TOPS_DT_F16, TOPS_DT_F16, 100, 1000, 264, 1, 1, "sub-block multipliers, m64n64"},
        {"q4_K", "wgmma", "0", "", "", "3", TOPS_DT_F16, TOPS_DT_BF16, 200, 2304, 77, 0, 0, "sub-block multipliers"},
        {"q4_K", "wgmma", "0", "", "", "", TOPS_DT_F32, TOPS_DT_F32, 33, 520, 200, 0, 1, "sub-block multipliers"},
        {"q4_K", "wgmma", "0", "", "", "", TOPS_DT_F16, TOPS_DT_F32, 17, 256, 64, 1, 1, "sub-block multipliers"},
        {"q4_K", "", "1", "", "", "", TOPS_DT_F16, TOPS_DT_F32, 130, 1024, 136, 0, 1, "multipliers converted once"},
        {"q5_K", "", "1", "", "", "", TOPS_DT_F16, TOPS_DT_F16, 64, 768, 200, 1, 1, "multipliers converted once"},
        {"q5_K", "", "1", "", "", "", TOPS_DT_F32, TOPS_DT_F32, 40, 1280, 77, 0, 0, "multipliers converted once"},
        {"q4_K", "wgmma", "0", "", "", "", TOPS_DT_BF16, TOPS_DT_F32, 128, 1024, 130, 0, 1, NULL},
        {"q4_K", "wgmma", "0", "0", "", "", TOPS_DT_F16, TOPS_DT_F32, 128, 1024, 130, 0, 1, NULL},
        {"q4_K", "", "1", "0", "", "", TOPS_DT_F16, TOPS_DT_F32, 128, 1024, 130, 0, 1, NULL},
        {"q5_K", "wgmma", "0", "", "", "", TOPS_DT_F16, TOPS_DT_F32, 128, 1024, 130, 0, 1, NULL},
        {"q4_K", "", "", "", "", "", TOPS_DT_F16, TOPS_DT_F16, 48, 1024, 192, 0, 1, "sub-block multipliers"},
        {"q4_K", "", "", "", "", "", TOPS_DT_F16, TOPS_DT_F16, 47, 1024, 192, 0, 1, NULL},
        {"q5_K", "", "", "", "", "", TOPS_DT_F16, TOPS_DT_F16, 1024, 512, 192, 0, 1, "multipliers converted once"},
    };
    const int n = small_run ? 3 : (int)(sizeof cases / sizeof cases[0]);
    int passed = 0;
    for (int i = 0; i < n; i++) {
        debug_set("kernel", cases[i].kernel);
        debug_set("rescaled", cases[i].rescaled);
        debug_set("factored", cases[i].factored);
        debug_set("wgmma_tn", cases[i].tn);
        debug_set("wgmma_splits", cases[i].splits);
        gpu_case c = {cases[i].format, cases[i].act, cases[i].out, cases[i].m, cases[i].k, cases[i].n, 0,
                      cases[i].accumulate, cases[i].prepack, 0, 0};
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        const int mult = strstr(kn, "multipliers") != NULL;
        if (cases[i].want ? !strstr(kn, cases[i].want) : mult) {
            TH_FAIL_AT("%s act=%s M=%lld K=%lld ran %s (want %s)", c.format, tops_dtype_name(c.act), (long long)c.m,
                       (long long)c.k, kn, cases[i].want ? cases[i].want : "no multipliers");
            ok = 0;
        }
        passed += ok;
    }
    debug_set("kernel", NULL);
    debug_set("rescaled", NULL);
    debug_set("factored", NULL);
    debug_set("wgmma_tn", NULL);
    debug_set("wgmma_splits", NULL);
    printf("     %d of %d factored sub-block scale cases within their bounds\n", passed, n);
}

/* Relaxed mode with e4m3 weights: on sm_90 the FP8 GEMM for every M here
   (kernel=fp8), ragged M/K/N against its 128 x 128 / 192 / 256 tiles and
   128-element K stages, both activation types, every output type,
   accumulate, strided rows, packed on the fly; then the default threshold
   (small M stays on the strict kernels).  Elsewhere relaxed runs strict. */
static void test_relaxed_fp8(void) {
    th_rng r = th_seed();
    static const int64_t shapes[][3] = {{1, 4096, 200}, {7, 1000, 77},  {64, 256, 264},
                                        {129, 992, 130}, {300, 520, 300}, {200, 130, 513}};
    static const char *const fmts[] = {"e4m3-ch", "e4m3"};
    int nshapes = small_run ? 2 : (int)(sizeof shapes / sizeof shapes[0]);
    int cases = 0, passed = 0;
    debug_set("kernel", "fp8");
    for (int f = 0; f < 2; f++)
        for (int s = 0; s < nshapes; s++) {
            int v = f + s;
            gpu_case c = {fmts[f], (v & 1) ? TOPS_DT_BF16 : TOPS_DT_F16,
                          v % 3 == 0 ? TOPS_DT_F32 : v % 3 == 1 ? TOPS_DT_F16 : TOPS_DT_BF16,
                          shapes[s][0], shapes[s][1], shapes[s][2], s % 3 == 1, s % 2 == 1, s != 2, 1, 0};
            cases++;
            passed += run_case(&c, &r);
        }
    /* f16/bf16 output over 3 x 4 tiles (ragged M, N and K). */
    for (int o = 0; o < 2; o++) {
        gpu_case c = {"e4m3-ch", o ? TOPS_DT_F16 : TOPS_DT_BF16, o ? TOPS_DT_BF16 : TOPS_DT_F16,
                      300, 520, 776, 0, 0, 1, 1, 0};
        cases++;
        passed += run_case(&c, &r);
    }
    /* The persistent kernel's schedules, on the same 12 tiles unless said
       (K = 520: 5 K stages per tile on a ring of 4, carried from tile to
       tile with the output staging): grid capped at 5 CTAs with stream-K
       for the last 2 tiles, at 2 (no tail); plain launch (no PDL); the
       second consumer warpgroup one K stage late, also with K = 100 (one
       stage); 7 CTAs with stream-K (pieces of 3-4 stages, a tile over 3
       CTAs); 5 CTAs by default (no stream-K); M = 64 on every SM with
       stream-K (4 tiles in pieces of one stage, most CTAs idle, the last
       piece adds 4 others); then the one-CTA-per-tile kernel forced.  All
       without clusters (fp8_cluster=0: the schedules of one CTA);
       empty values: the default. */
    static const char *const sched[][6] = {
        /* fp8_ctas, pdl, fp8_lag, fp8_sk, fp8_persist, fp8_cluster */
        {"5", "", "", "1", "", "0"}, {"2", "", "", "", "", "0"}, {"5", "0", "", "", "", "0"},
        {"5", "", "1", "", "", "0"}, {"5", "", "1", "", "", "0"}, {"7", "", "", "1", "", "0"},
        {"5", "", "", "", "", "0"},  {"", "", "", "1", "", "0"},  {"", "", "", "", "0", "0"}};
    static const char *const sched_env[6] = {"fp8_ctas", "pdl",         "fp8_lag",
                                             "fp8_sk",   "fp8_persist", "fp8_cluster"};
    debug_set("fp8_bn", "256"); /* the schedules and clusters below are the wide tile's */
    for (int o = 0; o < (int)(sizeof sched / sizeof sched[0]); o++) {
        for (int e = 0; e < 6; e++) debug_set(sched_env[e], sched[o][e]);
        gpu_case c = {"e4m3-ch", o % 2 ? TOPS_DT_BF16 : TOPS_DT_F16,
                      o % 3 == 0 ? TOPS_DT_F32 : o % 3 == 1 ? TOPS_DT_F16 : TOPS_DT_BF16, o == 7 ? 64 : 300,
                      o == 4 ? 100 : 520, 776, 0, 0, 1, 1, 0};
        cases++;
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        const char *want = sched[o][4][0] == '0' ? "fp8 one CTA per tile" : "fp8 persistent";
        if (fp8_gpu && strcmp(kn, want) != 0) {
            TH_FAIL_AT("relaxed e4m3-ch schedule %d ran %s, not %s", o, kn, want);
            ok = 0;
        }
        passed += ok;
    }
    /* Clusters of two sharing an operand tile by multicast
       (fp8_cluster=1: the weight tile, CTAs on row-tile pairs; 2:
       the activation tile, on column-tile pairs): odd tile counts along the
       pairs (the last pair's second CTA has no tile and only passes its
       partner's stages), one tile, M not a multiple of 128, N not of 256
       (but rows 16-byte aligned, as the persistent kernel's TMA stores need),
       K of 1, 2, 5 and 8 stages, the grid capped at 1, 2 or 3 clusters (a
       cluster walks several pairs, the ring and the staging carried over)
       and whole, a plain launch (no PDL); both activation types, every
       output type.  Stream-K and the lag requested too: clusters ignore them. */
    static const struct {
        const char *mode, *ctas, *pdl;
        tops_dtype act, out;
        int64_t m, k, n;
    } clus[] = {
        {"1", "2", "", TOPS_DT_F16, TOPS_DT_F32, 300, 520, 776},    {"1", "6", "", TOPS_DT_BF16, TOPS_DT_F16, 300, 520, 600},
        {"1", "", "", TOPS_DT_F16, TOPS_DT_BF16, 129, 1000, 520},   {"1", "", "", TOPS_DT_BF16, TOPS_DT_F32, 100, 300, 200},
        {"1", "3", "", TOPS_DT_F16, TOPS_DT_F16, 64, 100, 264},     {"1", "4", "0", TOPS_DT_BF16, TOPS_DT_BF16, 300, 520, 776},
        {"2", "2", "", TOPS_DT_BF16, TOPS_DT_BF16, 300, 520, 600},  {"2", "4", "", TOPS_DT_F16, TOPS_DT_F16, 300, 520, 776},
        {"2", "", "", TOPS_DT_F16, TOPS_DT_F32, 100, 300, 200},     {"2", "", "", TOPS_DT_BF16, TOPS_DT_F16, 200, 130, 520},
        {"2", "3", "0", TOPS_DT_F16, TOPS_DT_BF16, 257, 1000, 264}, {"2", "2", "", TOPS_DT_BF16, TOPS_DT_F32, 64, 100, 776}};
    for (int o = 0; o < (int)(sizeof clus / sizeof clus[0]); o++) {
        const char *v[6] = {clus[o].ctas, clus[o].pdl, o % 4 == 1 ? "1" : "", o % 4 == 3 ? "1" : "", "", clus[o].mode};
        for (int e = 0; e < 6; e++) debug_set(sched_env[e], v[e]);
        gpu_case c = {"e4m3-ch", clus[o].act, clus[o].out, clus[o].m, clus[o].k, clus[o].n, 0, 0, o % 3 != 2, 1, 0};
        cases++;
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        const char *want = clus[o].mode[0] == '1' ? "clusters of 2 sharing the weight tile"
                                                  : "clusters of 2 sharing the activation tile";
        if (fp8_gpu && !strstr(kn, want)) {
            TH_FAIL_AT("relaxed e4m3-ch M=%lld N=%lld fp8_cluster=%s ran %s", (long long)c.m,
                       (long long)c.n, clus[o].mode, kn);
            ok = 0;
        }
        passed += ok;
    }
    for (int e = 0; e < 6; e++) debug_set(sched_env[e], NULL);
    /* The 96-, 128- and 192-channel tiles (the plan's widths up to M = 256 on
       large GPUs) forced: persistent CTAs walking several tiles (grid
       capped), the lagged second warpgroup, a whole grid, one CTA a tile
       (96: always one CTA a tile, here over two waves at M = 4200);
       ragged M, N and K (stream-K stays with the 256-channel tiles: with
       128 it measured 1.2-1.3x slower at M = 32 .. 128). */
    static const struct {
        const char *bn, *ctas, *lag, *persist;
        int64_t m, k, n;
    } widths[] = {{"128", "5", "", "", 300, 520, 776}, {"192", "3", "1", "", 129, 1000, 520},
                  {"128", "", "1", "", 64, 256, 264},  {"192", "", "", "", 200, 130, 600},
                  {"128", "", "", "0", 100, 300, 200}, {"192", "", "", "0", 300, 520, 776},
                  {"96", "", "", "", 129, 1000, 520},  {"96", "", "", "", 4200, 136, 1000}};
    for (int o = 0; o < (int)(sizeof widths / sizeof widths[0]); o++) {
        debug_set("fp8_bn", widths[o].bn);
        debug_set("fp8_ctas", widths[o].ctas);
        debug_set("fp8_lag", widths[o].lag);
        debug_set("fp8_persist", widths[o].persist);
        gpu_case c = {"e4m3-ch", o % 2 ? TOPS_DT_BF16 : TOPS_DT_F16,
                      o % 3 == 0 ? TOPS_DT_F32 : o % 3 == 1 ? TOPS_DT_F16 : TOPS_DT_BF16, widths[o].m, widths[o].k,
                      widths[o].n, 0, 0, 1, 1, 0};
        cases++;
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        char want[32];
        snprintf(want, sizeof want, "%s-channel tiles", widths[o].bn);
        if (fp8_gpu && widths[o].persist[0] != '0' && !strstr(kn, want)) {
            TH_FAIL_AT("relaxed e4m3-ch fp8_bn=%s ran %s", widths[o].bn, kn);
            ok = 0;
        }
        passed += ok;
    }
    debug_set("fp8_bn", NULL);
    debug_set("fp8_ctas", NULL);
    debug_set("fp8_lag", NULL);
    debug_set("fp8_persist", NULL);
    /* The quantizer's register-resident rows at K = 6000 (4 loads a thread,
       the last partly past K), then the loop kernel with a division per
       element (fp8_quant=0) at K = 4104; then 2 and 4 rows a
       block (quant_rows) with the last block's rows partly past M,
       both kernels. */
    static const struct {
        const char *quant, *rows;
        int64_t m, k;
    } quant[] = {{"", "", 40, 6000}, {"0", "", 40, 4104}, {"", "2", 7, 6000},
                 {"", "4", 5, 2000}, {"0", "4", 6, 4104}, {"", "4", 129, 1000}};
    for (int o = 0; o < (int)(sizeof quant / sizeof quant[0]); o++) {
        debug_set("fp8_quant", quant[o].quant);
        debug_set("quant_rows", quant[o].rows);
        gpu_case c = {"e4m3-ch", o % 2 ? TOPS_DT_F16 : TOPS_DT_BF16, o % 2 ? TOPS_DT_F16 : TOPS_DT_F32, quant[o].m,
                      quant[o].k, 300, 0, 0, 1, 1, 0};
        cases++;
        passed += run_case(&c, &r);
    }
    debug_set("fp8_quant", NULL);
    debug_set("quant_rows", NULL);
    debug_set("kernel", NULL);
    gpu_case small = {"e4m3-ch", TOPS_DT_F16, TOPS_DT_F32, 8, 512, 96, 0, 0, 1, 1, 0};
    int keep = fp8_gpu;
    fp8_gpu = 0; /* M = 8 is below the default threshold: strict kernels, strict bound */
    cases++;
    passed += run_case(&small, &r);
    fp8_gpu = keep;
    printf("     %d of %d relaxed e4m3 cases within their bounds (%s); worst rel-L2 against f64: %.3g; against the "
           "e4m3 activations: f32 %.3g, f16 %.3g, bf16 %.3g\n",
           passed, cases, fp8_gpu ? "FP8 GEMM" : "no sm_90: strict path", fp8_worst_true, fp8_worst_own[0],
           fp8_worst_own[1], fp8_worst_own[2]);
}

/* Relaxed 4-bit weights on the FP8 tensor cores (wgmma_q8.cu): int4-g128
   and mxfp4 (gguf-mxfp4, int4-g256 too) against f64 of the e4m3 activations
   like the FP8 GEMM, forced at every M (kernel=q8): ragged M
   against both token tiles (1, 47, 48, 129, 255), N not a multiple of 128,
   K = 128, 4096 and ragged (K % 128 != 0), both activation types, every
   output type, accumulate, strided rows, packed on the fly, both token tiles,
   both consumer loops (q8_split=0/1) and no PDL, the first ring
   pass's activation tiles all at once or 1 / 3 ahead (q8_look); mxfp4 with one
   factor per row (asserted by name) in chunk pairs from M = 32 or forced
   (q8_row=2; K of 1, 2, 3, 5, 6, 8 and 32 chunks: every way the pair
   loop ends) and one chunk a group below or forced (q8_row=1); per-chunk
   factors at 64 tokens in chunk pairs with a part accumulator each (K of 1, 2, 3, 5,
   6, 8 chunks) or one group a chunk (q8_pairs=0),
   its per-chunk loops forced (q8_row=0) and taken by rows over
   15 binades (spread 3); then the plan
   (M = 17 takes it, M = 16 does not, nor strict mode or int4-g32) and mxfp4
   rows whose chunk spans more than 15 binades (no q8 layout: the folded or
   strict kernels, still within their bounds). */
static void test_q8(void) {
    if (!fp8_gpu) {
        printf("     skip: the q8 kernel needs compute capability 9.0\n");
        return;
    }
    th_rng r = th_seed();
    fp8_worst_true = fp8_worst_own[0] = fp8_worst_own[1] = fp8_worst_own[2] = 0;
    static const struct {
        const char *format;
        tops_dtype act, out;
        int64_t m, k, n;
        int strided, accumulate, prepack;
        const char *tn, *pdl, *split, *row;
        int spread;
        const char *pairs; /* q8_pairs */
    } cases[] = {
        {"int4-g128", TOPS_DT_F16, TOPS_DT_F32, 129, 4096, 200, 0, 0, 1, NULL, NULL, NULL, NULL, 0, NULL},
        {"mxfp4", TOPS_DT_F16, TOPS_DT_F16, 48, 4096, 130, 2, 0, 1, NULL, NULL, NULL, NULL, 0, NULL},
        {"int4-g128", TOPS_DT_BF16, TOPS_DT_BF16, 17, 640, 300, 0, 1, 1, NULL, NULL, NULL, NULL, 0, NULL},
        {"mxfp4", TOPS_DT_BF16, TOPS_DT_F32, 255, 1000, 264, 1, 0, 0, NULL, NULL, NULL, NULL, 0, NULL},
        {"int4-g128", TOPS_DT_F16, TOPS_DT_F16, 47, 1000, 77, 0, 1, 1, NULL, "0", NULL, NULL, 0, NULL},
        {"gguf-mxfp4", TOPS_DT_F16, TOPS_DT_F32, 129, 992, 130, 0, 0, 1, "64", NULL, NULL, NULL, 0, NULL},
        {"int4-g256", TOPS_DT_BF16, TOPS_DT_F32, 64, 2048, 513, 0, 0, 1, "128", NULL, "0", NULL, 0, NULL},
        {"mxfp4", TOPS_DT_F16, TOPS_DT_BF16, 200, 128, 776, 0, 1, 1, NULL, NULL, "0", "0", 0, NULL},
        {"int4-g128", TOPS_DT_F16, TOPS_DT_F32, 300, 520, 1000, 2, 0, 1, NULL, NULL, NULL, NULL, 0, NULL},
        {"int4-g128", TOPS_DT_BF16, TOPS_DT_F16, 130, 4104, 300, 0, 1, 1, NULL, NULL, "1", NULL, 0, NULL},
        {"mxfp4", TOPS_DT_F16, TOPS_DT_F32, 130, 4096, 300, 0, 1, 1, NULL, NULL, NULL, "0", 0, NULL},
        {"mxfp4", TOPS_DT_BF16, TOPS_DT_BF16, 64, 1000, 200, 0, 0, 1, NULL, NULL, "1", "0", 0, NULL},
        {"mxfp4", TOPS_DT_F16, TOPS_DT_F32, 129, 2048, 260, 0, 1, 1, NULL, NULL, NULL, NULL, 3, NULL},
        {"gguf-mxfp4", TOPS_DT_F16, TOPS_DT_F16, 33, 4096, 129, 0, 0, 1, NULL, "0", NULL, NULL, 0, NULL},
        {"int4-g128", TOPS_DT_F16, TOPS_DT_F32, 256, 640, 384, 0, 0, 1, NULL, NULL, NULL, NULL, 0, NULL},
        {"mxfp4", TOPS_DT_F16, TOPS_DT_F32, 100, 384, 200, 0, 1, 1, NULL, NULL, NULL, NULL, 0, NULL},
        {"gguf-mxfp4", TOPS_DT_BF16, TOPS_DT_F16, 17, 128, 140, 0, 0, 1, NULL, NULL, NULL, NULL, 0, NULL},
        {"mxfp4", TOPS_DT_BF16, TOPS_DT_F16, 65, 640, 136, 0, 1, 1, NULL, NULL, NULL, NULL, 0, NULL},
        {"gguf-mxfp4", TOPS_DT_F16, TOPS_DT_F32, 40, 768, 200, 1, 0, 1, NULL, NULL, NULL, NULL, 0, NULL},
        {"mxfp4", TOPS_DT_F16, TOPS_DT_F32, 129, 1000, 140, 0, 0, 1, NULL, NULL, NULL, "1", 0, NULL},
        {"mxfp4", TOPS_DT_BF16, TOPS_DT_BF16, 33, 384, 72, 0, 0, 1, NULL, NULL, NULL, "1", 0, NULL},
        {"gguf-mxfp4", TOPS_DT_F16, TOPS_DT_F16, 20, 640, 96, 0, 1, 1, NULL, NULL, NULL, "2", 0, NULL},
        {"mxfp4", TOPS_DT_F16, TOPS_DT_F32, 31, 256, 130, 0, 0, 1, NULL, NULL, NULL, NULL, 0, NULL},
        {"int4-g128", TOPS_DT_F16, TOPS_DT_F32, 20, 128, 136, 0, 0, 1, NULL, NULL, NULL, NULL, 0, NULL},
        {"int4-g128", TOPS_DT_BF16, TOPS_DT_F16, 33, 256, 200, 1, 0, 1, NULL, NULL, NULL, NULL, 0, NULL},
        {"int4-g256", TOPS_DT_F16, TOPS_DT_BF16, 64, 384, 130, 0, 1, 1, NULL, NULL, NULL, NULL, 0, NULL},
        {"int4-g128", TOPS_DT_BF16, TOPS_DT_BF16, 1, 128, 300, 0, 1, 1, NULL, NULL, "1", NULL, 0, NULL},
        {"mxfp4", TOPS_DT_F16, TOPS_DT_F32, 50, 768, 130, 0, 1, 1, NULL, NULL, NULL, "0", 0, NULL},
        {"int4-g128", TOPS_DT_BF16, TOPS_DT_F32, 40, 520, 200, 0, 0, 1, NULL, NULL, NULL, NULL, 0, "0"},
        /* int4's correction over 9 blocks of 32 chunks (more than the ring: its slots wrap), at 64 and
           128 tokens; e8m0 and bf16 scales (exact in f16: the factor plane holds them) */
        {"int4-g128", TOPS_DT_F16, TOPS_DT_F32, 20, 33000, 136, 0, 0, 1, NULL, NULL, NULL, NULL, 0, NULL},
        {"int4-g128", TOPS_DT_BF16, TOPS_DT_F16, 70, 33000, 130, 0, 1, 1, NULL, NULL, NULL, NULL, 0, NULL},
        {"int4-g128:e8m0", TOPS_DT_BF16, TOPS_DT_F16, 70, 1000, 200, 0, 0, 1, NULL, NULL, NULL, NULL, 0, NULL},
        {"int4-g256:bf16", TOPS_DT_F16, TOPS_DT_F32, 33, 640, 130, 0, 1, 1, NULL, NULL, NULL, NULL, 0, NULL},
    };
    const int n = small_run ? 3 : (int)(sizeof cases / sizeof cases[0]);
    int passed = 0, total = 0;
    debug_set("kernel", "q8");
    for (int i = 0; i < n; i++) {
        if (cases[i].tn) debug_set("q8_tn", cases[i].tn);
        if (cases[i].pdl) debug_set("pdl", cases[i].pdl);
        if (cases[i].split) debug_set("q8_split", cases[i].split);
        if (cases[i].row) debug_set("q8_row", cases[i].row);
        if (cases[i].pairs) debug_set("q8_pairs", cases[i].pairs);
        /* the first ring pass's activation tiles: the default, 1 or 3 ahead */
        debug_set("q8_look", i % 3 == 0 ? "" : i % 3 == 1 ? "1" : "3");
        gpu_case c = {cases[i].format, cases[i].act, cases[i].out, cases[i].m, cases[i].k, cases[i].n,
                      cases[i].strided, cases[i].accumulate, cases[i].prepack, 1, cases[i].spread};
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        /* mxfp4 rows within 15 binades: one factor per row, unless q8_row=0,
           in chunk pairs from M = 32 (q8_row=1 / 2: never / always); per-chunk
           factors in chunk pairs at 64 tokens, unless q8_split=1 or
           q8_pairs=0 */
        const int tn = cases[i].tn ? atoi(cases[i].tn) : c.m > 64 ? 128 : 64;
        const int want_row = strstr(c.format, "mxfp4") && (!cases[i].row || strcmp(cases[i].row, "0") != 0) &&
                             cases[i].spread != 3,
                  want_pairs = want_row ? (cases[i].row ? strcmp(cases[i].row, "2") == 0 : c.m >= 32)
                                        : tn == 64 && !(cases[i].split && strcmp(cases[i].split, "1") == 0) &&
                                              !(cases[i].pairs && strcmp(cases[i].pairs, "0") == 0);
        if (!strstr(kn, "wgmma_q8") || (strstr(kn, "per row") != NULL) != want_row ||
            (strstr(kn, "chunk pairs") != NULL) != want_pairs) {
            TH_FAIL_AT("%s M=%lld K=%lld forced q8 ran %s (want %sone factor per row%s)", c.format, (long long)c.m,
                       (long long)c.k, kn, want_row ? "" : "not ", want_pairs ? ", chunk pairs" : "");
            ok = 0;
        }
        passed += ok;
        total++;
        debug_set("q8_tn", NULL);
        debug_set("pdl", NULL);
        debug_set("q8_split", NULL);
        debug_set("q8_row", NULL);
        debug_set("q8_pairs", NULL);
        debug_set("q8_look", NULL);
    }
    debug_set("kernel", NULL);
    /* The plan: q8 from M = 17, relaxed only, and never for a chunk range > 14
       binades (spread 2: the first 16 weights of each row x 2^16). */
    static const struct {
        const char *format;
        int64_t m;
        int relaxed, spread, want;
    } plan[] = {{"int4-g128", 17, 1, 0, 1}, {"mxfp4", 128, 1, 0, 1}, {"int4-g128", 16, 1, 0, 0},
                {"mxfp4", 128, 0, 0, 0},    {"mxfp4", 64, 1, 2, 0},  {"int4-g32", 128, 1, 0, 0}};
    for (int i = 0; i < (small_run ? 0 : (int)(sizeof plan / sizeof plan[0])); i++) {
        gpu_case c = {plan[i].format, TOPS_DT_F16, TOPS_DT_F32, plan[i].m, 512, 192, 0, 0, 1, plan[i].relaxed,
                      plan[i].spread};
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        if ((strstr(kn, "wgmma_q8") != NULL) != plan[i].want) {
            TH_FAIL_AT("%s M=%lld relaxed=%d spread=%d by plan ran %s (want %sq8)", c.format, (long long)c.m,
                       c.relaxed, c.spread, kn, plan[i].want ? "" : "not ");
            ok = 0;
        }
        passed += ok;
        total++;
    }
    printf("     %d of %d q8 cases within their bounds; worst rel-L2 against f64: %.3g; against the e4m3 "
           "activations: f32 %.3g, f16 %.3g, bf16 %.3g\n",
           passed, total, fp8_worst_true, fp8_worst_own[0], fp8_worst_own[1], fp8_worst_own[2]);
}

/* f32 activations (left) on the GPU: split into 16-bit terms (two f16,
   three bf16 for plain bf16 weights; one term relaxed), each row scaled by
   a power of two into f16's range, the terms' f32 products joined into the
   output.  Against f64 of the f32 activations, so one 16-bit rounding of
   them (about 1e-4 rel-L2) fails the strict f32-output bound (1e-5); each
   row also within the bound, with rows 2^54 apart (spread 4: beyond
   f16's range both ways).  Ragged M / K / N, every output type, accumulate,
   strided rows, packed and unpacked, NaN-poisoned outputs, bits repeated;
   strict and relaxed, every kernel family the rows reach (wbulk, wstream
   forced, the TMA 16-bit GEMM, wgmma, q8, FP8); the path names the terms. */
static void test_f32_left(void) {
    th_rng r = th_seed();
    static const struct {
        const char *format;
        tops_dtype out;
        int64_t m, k, n;
        int relaxed, accumulate, prepack, strided, spread;
        const char *kernel; /* debug key kernel= */
        const char *ran;    /* on sm_90, the kernel's name starts with this */
    } cases[] = {
        {"int4-g128", TOPS_DT_F32, 1, 4096, 200, 0, 0, 1, 0, 0, NULL, "wbulk"},
        {"q4_0", TOPS_DT_F16, 7, 1000, 77, 0, 0, 0, 1, 0, NULL, NULL},
        {"nvfp4", TOPS_DT_BF16, 13, 992, 130, 0, 1, 1, 2, 0, NULL, NULL},
        {"f16", TOPS_DT_F32, 9, 520, 264, 0, 0, 1, 0, 0, NULL, "f16 "},
        {"bf16", TOPS_DT_F32, 33, 1000, 130, 0, 0, 0, 0, 0, NULL, "bf16 "},
        {"int8-g32", TOPS_DT_F32, 64, 2048, 40, 0, 0, 1, 2, 0, NULL, "wgmma"},
        {"mxfp4", TOPS_DT_F16, 40, 512, 96, 0, 0, 1, 0, 0, NULL, "wgmma"},
        {"e4m3-ch", TOPS_DT_F32, 100, 160, 300, 0, 1, 1, 0, 0, NULL, "f16 "},
        {"int4-g32:e8m0", TOPS_DT_F32, 31, 520, 33, 0, 0, 1, 0, 1, NULL, NULL},
        {"f16", TOPS_DT_F32, 7, 1000, 64, 0, 0, 1, 1, 1, NULL, NULL},
        {"bf16", TOPS_DT_BF16, 5, 300, 31, 0, 0, 1, 0, 1, NULL, NULL},
        {"int4-g128", TOPS_DT_F32, 3, 1024, 100, 0, 0, 1, 0, 1, "wstream", "wstream"},
        {"i8", TOPS_DT_F32, 1, 7, 31, 0, 0, 1, 0, 0, NULL, NULL},
        {"q8_0", TOPS_DT_F32, 33, 4095, 31, 0, 1, 0, 0, 0, NULL, NULL},
        {"mxfp8", TOPS_DT_F32, 20, 256, 64, 0, 0, 1, 0, 1, "wgmma", "wgmma"},
        {"int4-g128", TOPS_DT_F32, 40, 1024, 300, 1, 0, 1, 0, 0, NULL, "wgmma_q8"},
        {"mxfp4", TOPS_DT_BF16, 64, 2048, 130, 1, 0, 1, 2, 0, NULL, NULL},
        {"e4m3-ch", TOPS_DT_F32, 33, 520, 776, 1, 0, 1, 0, 0, NULL, "fp8"},
        {"e4m3", TOPS_DT_F32, 20, 512, 96, 1, 0, 0, 0, 1, NULL, "fp8"},
        {"int4-g32", TOPS_DT_F16, 5, 1000, 200, 1, 1, 1, 0, 0, NULL, "wbulk"},
        {"bf16", TOPS_DT_F32, 17, 256, 64, 1, 0, 1, 0, 0, NULL, "bf16 "},
        {"f16", TOPS_DT_BF16, 50, 136, 1030, 1, 1, 1, 0, 0, NULL, NULL},
    };
    static const int small[] = {0, 3, 9, 15};
    const int n = small_run ? 4 : (int)(sizeof cases / sizeof cases[0]);
    int passed = 0;
    for (int j = 0; j < n; j++) {
        const int i = small_run ? small[j] : j;
        gpu_case c = {cases[i].format, TOPS_DT_F32, cases[i].out, cases[i].m, cases[i].k, cases[i].n,
                      cases[i].strided, cases[i].accumulate, cases[i].prepack, cases[i].relaxed, cases[i].spread ? 4 : 0};
        debug_set("kernel", cases[i].kernel);
        int ok = run_case(&c, &r);
        const char *kn = tops__cu_last_kernel ? tops__cu_last_kernel() : "";
        if (fp8_gpu && cases[i].ran && strncmp(kn, cases[i].ran, strlen(cases[i].ran)) != 0) {
            TH_FAIL_AT("%s f32 left M=%lld relaxed=%d ran %s, not %s...", c.format, (long long)c.m, c.relaxed, kn,
                       cases[i].ran);
            ok = 0;
        }
        /* the path names the terms: strict 2 f16 (3 bf16 for bf16 weights), relaxed 1 */
        int64_t lext[2] = {c.m, c.k}, dext[2] = {c.m, c.n};
        tops_tensor tlh, tdh, tl, td, tw;
        tops_format wf;
        ASSERT_OK(tops_format_from_name(c.format, &wf));
        int64_t wext[2] = {c.n, c.k};
        ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F32), 2, lext, host_mem, &tlh));
        ASSERT_OK(tops_tensor_create(tops_format_of(c.out), 2, dext, host_mem, &tdh));
        ASSERT_OK(tops_tensor_to(&tlh, gpu0, &tl));
        ASSERT_OK(tops_tensor_to(&tdh, gpu0, &td));
        ASSERT_OK(tops_tensor_create(wf, 2, wext, host_mem, &tw));
        tops_exec e = gpu_exec();
        tops_matmul2d_desc md = {0};
        md.transpose_right = 1;
        md.relaxed_precision = c.relaxed;
        char path[160];
        ASSERT_OK(tops_matmul2d_path(&e, &md, &tl, &tw, &td, path, sizeof path));
        const int bf = strcmp(c.format, "bf16") == 0;
        const char *want = c.relaxed ? (bf ? "f32 left as 1 bf16 term)" : "f32 left as 1 f16 term)")
                                     : (bf ? "f32 left as 3 bf16 terms" : "f32 left as 2 f16 terms");
        if (!strstr(path, want)) {
            TH_FAIL_AT("%s relaxed=%d: path \"%s\" does not say \"%s\"", c.format, c.relaxed, path, want);
            ok = 0;
        }
        tops_tensor_destroy(&tlh);
        tops_tensor_destroy(&tdh);
        tops_tensor_destroy(&tl);
        tops_tensor_destroy(&td);
        tops_tensor_destroy(&tw);
        passed += ok;
    }
    debug_set("kernel", NULL);
    printf("     %d of %d f32-activation cases within their bounds\n", passed, n);
}

static void test_gpu_bad_inputs(void) {
    /* Wrong memory space, wrong device, unsupported formats: status + sentence. */
    int64_t wext[2] = {32, 64}, xext[2] = {2, 64}, yext[2] = {2, 32};
    tops_tensor w, x, y, xd, yd, wd, packed;
    ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F16), 2, wext, host_mem, &w));
    ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F16), 2, xext, host_mem, &x));
    ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F32), 2, yext, host_mem, &y));
    ASSERT_OK(tops_tensor_to(&x, gpu0, &xd));
    ASSERT_OK(tops_tensor_to(&y, gpu0, &yd));
    ASSERT_OK(tops_tensor_to(&w, gpu0, &wd));
    tops_exec e = gpu_exec();
    tops_matmul2d_desc md = {0};
    md.transpose_right = 1;
    ASSERT_FAILS_WITH(tops_matmul2d(&e, &md, &x, &wd, &yd), TOPS_INVALID_ARGUMENT, "left is in host memory");
    ASSERT_FAILS_WITH(tops_matmul2d(&e, &md, &xd, &wd, &y), TOPS_INVALID_ARGUMENT, "dest is in host memory");
    /* A view that claims device memory over a host pointer. */
    tops_tensor_desc dd = {0};
    dd.format = tops_format_of(TOPS_DT_F32);
    dd.rank = 2;
    dd.extent[0] = 2;
    dd.extent[1] = 32;
    dd.data = y.data;
    dd.memory = gpu0;
    tops_tensor liar;
    ASSERT_OK(tops_tensor_view(&dd, &liar));
    ASSERT_FAILS_WITH(tops_matmul2d(&e, &md, &xd, &wd, &liar), TOPS_INVALID_ARGUMENT, "points to host memory");
    /* f16 weights with bf16 activations. */
    tops_tensor xb, xbd;
    ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_BF16), 2, xext, host_mem, &xb));
    ASSERT_OK(tops_tensor_to(&xb, gpu0, &xbd));
    ASSERT_FAILS_WITH(tops_matmul2d(&e, &md, &xbd, &wd, &yd), TOPS_UNSUPPORTED_FORMAT, "activations' type");
    /* i8 activations, and a weight format the GPU does not decode. */
    tops_tensor xf, xfd, wl;
    ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_I8), 2, xext, host_mem, &xf));
    ASSERT_OK(tops_tensor_to(&xf, gpu0, &xfd));
    ASSERT_FAILS_WITH(tops_matmul2d(&e, &md, &xfd, &wd, &yd), TOPS_UNSUPPORTED_FORMAT, "f32, f16 or bf16 activations");
    tops_format lut;
    ASSERT_OK(tops_format_from_name("lut4", &lut));
    ASSERT_OK(tops_tensor_create(lut, 2, wext, host_mem, &wl));
    ASSERT_FAILS_WITH(tops_pack_right(&e, &md, &wl, &packed), TOPS_UNSUPPORTED_FORMAT, "the GPU path decodes");
    /* Shapes. */
    int64_t badk[2] = {2, 48};
    tops_tensor xk, xkd;
    ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F16), 2, badk, host_mem, &xk));
    ASSERT_OK(tops_tensor_to(&xk, gpu0, &xkd));
    ASSERT_FAILS_WITH(tops_matmul2d(&e, &md, &xkd, &wd, &yd), TOPS_SHAPE_MISMATCH, "K=");
    /* A GPU-packed weight on the CPU path, and a CPU tensor_to round trip. */
    ASSERT_OK(tops_pack_right(&e, &md, &w, &packed));
    ASSERT_STATUS(tops_matmul2d(NULL, &md, &x, &packed, &y), TOPS_INVALID_ARGUMENT);
    ASSERT_STATUS(tops_tensor_to(&packed, host_mem, &xk), TOPS_INVALID_ARGUMENT);
    tops_tensor_destroy(&packed);
    tops_tensor back;
    ASSERT_OK(tops_tensor_to(&wd, host_mem, &back));
    ASSERT_TRUE(memcmp(back.data, w.data, 32 * 64 * 2) == 0);
    tops_tensor_destroy(&back);
    void *t[] = {&w, &x, &y, &xd, &yd, &wd, &xb, &xbd, &xf, &xfd, &wl, &xk, &xkd};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) tops_tensor_destroy((tops_tensor *)t[i]);
}

int main(void) {
    small_run = getenv("TOPS_CUDA_TEST_SMALL") != NULL;
    RUN_TEST(test_bad_arguments);
    int n = 0;
    tops_cuda_device_count(&n);
    if (!tops_get_build_info().cuda || n == 0) {
        printf("skip: GPU tests need %s\n", tops_get_build_info().cuda ? "a CUDA device (none found)" : "a CUDA build");
        TEST_MAIN_END();
    }
    tops_cuda_device_info info;
    if (tops_cuda_get_device_info(0, &info) == TOPS_OK) {
        printf("cuda:0 %s, sm_%d%d, %d SMs\n", info.name, info.major, info.minor, info.sm_count);
        fp8_gpu = info.major == 9 && info.minor == 0;
        gpu_sms = info.sm_count;
    }
    RUN_TEST(test_gpu_bad_inputs);
    /* TOPS_CUDA_TEST_ONLY=fp8 / q8: that group alone (device runs of one kernel). */
    const char *only = getenv("TOPS_CUDA_TEST_ONLY");
    if (only && strcmp(only, "q8") == 0) {
        RUN_TEST(test_q8);
        TEST_MAIN_END();
    }
    if (only && strcmp(only, "strict") == 0) {
        RUN_TEST(test_wgmma_strict);
        TEST_MAIN_END();
    }
    if (only && strcmp(only, "h16") == 0) {
        RUN_TEST(test_h16_gemm);
        TEST_MAIN_END();
    }
    if (only && strcmp(only, "rescaled") == 0) {
        RUN_TEST(test_rescaled);
        TEST_MAIN_END();
    }
    if (only && strcmp(only, "dequant") == 0) {
        RUN_TEST(test_dequant);
        RUN_TEST(test_dequant_relaxed);
        TEST_MAIN_END();
    }
    if (only && strcmp(only, "factored") == 0) {
        RUN_TEST(test_factored);
        TEST_MAIN_END();
    }
    if (only && strcmp(only, "f32") == 0) {
        RUN_TEST(test_f32_left);
        TEST_MAIN_END();
    }
    RUN_TEST(test_relaxed_fp8);
    if (only && strcmp(only, "fp8") == 0) TEST_MAIN_END();
    RUN_TEST(test_h16_gemm);
    RUN_TEST(test_every_format);
    RUN_TEST(test_kernel_edges);
    RUN_TEST(test_scale_decode);
    RUN_TEST(test_wgmma);
    RUN_TEST(test_wgmma_folded);
    RUN_TEST(test_dequant);
    RUN_TEST(test_dequant_relaxed);
    RUN_TEST(test_rescaled);
    RUN_TEST(test_factored);
    RUN_TEST(test_wgmma_strict);
    RUN_TEST(test_q8);
    RUN_TEST(test_f32_left);
    TEST_MAIN_END();
}
