/* conv2d on a GPU (src/cuda/conv.c, conv.cu) against an f64 direct
   convolution of the 16-bit inputs and the decoded weights: ragged shapes
   (odd sizes, stride 2 with dilation 2 and uneven pads, groups 2 and 4,
   depthwise, 1x1, 7x7, C = 3, K = 4608 with split K), f16 / bf16 weights on
   the wgmma implicit GEMM (TMA im2col or cp.async gathers, each tile width,
   forced K splits), on the
   mma.sync one (debug key conv_path=mma) and on the im2col + matmul path
   (conv_path=im2col),
   the transposed wgmma kernel (conv_tr=1: 128 channels x 96 to
   256 pixels a CTA, K splits), the direct 3x3 kernel on halo tiles, the quantized formats strict and relaxed, host / device / GPU-packed
   weights, bias, multiply-accumulate, f32 / f16 / bf16 dest, NaN-poisoned
   outputs, and two runs compared bit for bit.  Bad inputs on any machine;
   without a GPU the numeric part skips with one line. */
#define _POSIX_C_SOURCE 200809L /* setenv: the kernel choices are debug keys of TOPS_CUDA_DEBUG */
#include "cuda_debug.h"
#include "harness.h"
#include "core/numeric.h"
#include "tensorops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const tops_memory host_mem = {TOPS_DEVICE_CPU, 0};
static const tops_memory gpu0 = {TOPS_DEVICE_CUDA, 0};
static th_rng rng;
static int small_run;
static int hopper; /* compute capability 9.0: the wgmma implicit GEMM */

typedef struct cv_case {
    int64_t n, h, w, c, o, kh, kw;
    int32_t sh, sw, dh, dw, pt, pb, pl, pr, groups;
} cv_case;

static const cv_case cases[] = {
    {1, 7, 9, 16, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},      /* odd sizes, pad 1 */
    {2, 13, 11, 32, 40, 3, 3, 2, 2, 2, 2, 1, 2, 2, 1, 1},    /* stride 2 with dilation 2, uneven pads */
    {2, 13, 11, 64, 40, 3, 3, 2, 2, 2, 2, 1, 2, 2, 1, 1},    /* the same with C = 64 (TMA im2col on a Hopper) */
    {1, 9, 9, 32, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2},      /* groups 2 */
    {2, 10, 10, 24, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 24},   /* depthwise */
    {1, 6, 5, 64, 33, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},      /* 1x1 */
    {1, 17, 19, 8, 70, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1},     /* 7x7 stride 2 */
    {1, 5, 7, 3, 10, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},       /* C = 3: no 16-byte pieces (element gather) */
    {2, 33, 31, 3, 40, 16, 16, 16, 16, 1, 1, 0, 0, 0, 0, 1}, /* patch embedding 16x16 stride 16, ragged */
    {1, 9, 10, 12, 18, 3, 3, 1, 2, 1, 1, 1, 1, 0, 2, 2},     /* groups 2 of 6 channels (element gather) */
    {3, 15, 15, 64, 130, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},   /* M = 675, O = 130: ragged tiles both ways */
    {1, 4, 4, 512, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},     /* K = 4608 at M = 16: split K */
    {1, 11, 12, 16, 16, 5, 5, 2, 2, 2, 1, 2, 3, 1, 0, 16},   /* depthwise 5x5 stride 2 dilation 2,1 */
    {2, 8, 8, 32, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4},      /* groups 4, 8 channels a group */
    {1, 9, 9, 128, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2},     /* groups 2 of 64 channels */
    {2, 12, 10, 64, 72, 7, 7, 2, 2, 1, 1, 3, 3, 3, 2, 1},    /* 7x7 stride 2, C = 64, uneven pads */
    {5, 7, 7, 192, 136, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},    /* M = 245 over images, 3 K stages a tap */
};

static int64_t out_dim(int64_t in, int64_t pad, int64_t k, int64_t s, int64_t d) {
    return (in + pad - d * (k - 1) - 1) / s + 1;
}

static void reference(const cv_case *c, const double *x, const float *w, const float *bias, double *ref) {
    const int64_t oh = out_dim(c->h, c->pt + c->pb, c->kh, c->sh, c->dh), ow = out_dim(c->w, c->pl + c->pr, c->kw, c->sw, c->dw);
    const int64_t g = c->groups, cg = c->c / g, og = c->o / g;
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t y = 0; y < oh; y++)
            for (int64_t xx = 0; xx < ow; xx++)
                for (int64_t o = 0; o < c->o; o++) {
                    double s = bias ? bias[o] : 0.0;
                    const int64_t c0 = (o / og) * cg;
                    for (int64_t i = 0; i < c->kh; i++)
                        for (int64_t j = 0; j < c->kw; j++) {
                            int64_t ih = y * c->sh - c->pt + i * c->dh, iw = xx * c->sw - c->pl + j * c->dw;
                            if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
                            for (int64_t ch = 0; ch < cg; ch++)
                                s += x[((n * c->h + ih) * c->w + iw) * c->c + c0 + ch] *
                                     (double)w[((o * c->kh + i) * c->kw + j) * cg + ch];
                        }
                    ref[((n * oh + y) * ow + xx) * c->o + o] = s;
                }
}

static tops_tensor view(tops_dtype dt, void *data, int rank, const int64_t *ext, tops_memory mem) {
    tops_tensor_desc v;
    memset(&v, 0, sizeof v);
    v.format = tops_format_of(dt);
    v.rank = rank;
    for (int i = 0; i < rank; i++) v.extent[i] = ext[i];
    v.data = data;
    v.memory = mem;
    tops_tensor t;
    if (tops_tensor_view(&v, &t) != TOPS_OK) {
        fprintf(stderr, "view: %s\n", tops_last_error());
        abort();
    }
    return t;
}

static float from16(tops_dtype dt, uint16_t v) { return dt == TOPS_DT_F16 ? tops__f16_to_f32(v) : tops__bf16_to_f32(v); }
static uint16_t to16(tops_dtype dt, float v) { return dt == TOPS_DT_F16 ? tops__f32_to_f16(v) : tops__f32_to_bf16(v); }

enum { W_HOST = 0, W_DEVICE = 1, W_PACKED = 2 };

/* One case on cuda:0 against f64, run twice (same bits). */
static void run_case(const cv_case *c, const char *fmt_name, tops_dtype act, tops_dtype dt_dest, int relaxed,
                     int use_bias, int accumulate, int where, const char *want_path) {
    const int64_t oh = out_dim(c->h, c->pt + c->pb, c->kh, c->sh, c->dh), ow = out_dim(c->w, c->pl + c->pr, c->kw, c->sw, c->dw);
    const int64_t cg = c->c / c->groups, k = c->kh * c->kw * cg;
    const int64_t nin = c->n * c->h * c->w * c->c, nout = c->n * oh * ow * c->o;
    const size_t osz = dt_dest == TOPS_DT_F32 ? 4 : 2;
    float *wf = malloc((size_t)(c->o * k) * sizeof(float)), *wdec = malloc((size_t)(c->o * k) * sizeof(float));
    float *bias = malloc((size_t)c->o * sizeof(float));
    double *x = malloc((size_t)nin * sizeof(double)), *ref = malloc((size_t)nout * sizeof(double));
    uint16_t *xin = malloc((size_t)nin * 2);
    unsigned char *dest = malloc((size_t)nout * osz), *first = malloc((size_t)nout * osz);
    void *dx = NULL, *dout = NULL;
    tops_tensor q, wdev, packed;
    int have_q = 0, have_dev = 0, have_packed = 0;
    for (int64_t i = 0; i < c->o * k; i++) wf[i] = th_uniform(&rng, -1, 1);
    for (int64_t i = 0; i < c->o; i++) bias[i] = th_uniform(&rng, -1, 1);
    for (int64_t i = 0; i < nin; i++) {
        xin[i] = to16(act, th_uniform(&rng, -1, 1));
        x[i] = from16(act, xin[i]);
    }
    tops_format f;
    int64_t wext[2] = {c->o, k};
    tops_tensor src = view(TOPS_DT_F32, wf, 2, wext, host_mem), dec = view(TOPS_DT_F32, wdec, 2, wext, host_mem);
    if (tops_format_from_name(fmt_name, &f) != TOPS_OK || tops_tensor_create(f, 2, wext, host_mem, &q) != TOPS_OK) {
        TH_FAIL_AT("weight %s: %s", fmt_name, tops_last_error());
        goto done;
    }
    have_q = 1;
    ASSERT_OK(tops_quantize(&src, &q, NULL));
    ASSERT_OK(tops_dequantize(&q, &dec));
    reference(c, x, wdec, use_bias ? bias : NULL, ref);

    tops_exec ex = tops_exec_default();
    ex.device = gpu0;
    const tops_tensor *wt = &q;
    if (where == W_DEVICE) {
        ASSERT_OK(tops_tensor_to(&q, gpu0, &wdev));
        have_dev = 1;
        wt = &wdev;
    } else if (where == W_PACKED && (c->groups == 1 || (c->groups == c->c && c->o == c->c &&
                                                         (hopper || (f.id != TOPS_FMT_F16 && f.id != TOPS_FMT_BF16))))) {
        /* depthwise: a GPU pack's 16-bit rows exist on compute capability 9.0 only */
        tops_matmul2d_desc md;
        memset(&md, 0, sizeof md);
        md.transpose_right = 1;
        md.relaxed_precision = relaxed;
        ASSERT_OK(tops_pack_right(&ex, &md, &q, &packed));
        have_packed = 1;
        wt = &packed;
    }
    /* dest: NaN (multiply) or a known prior (accumulate), as dest holds it */
    for (int64_t i = 0; i < nout; i++) {
        float v = accumulate ? th_uniform(&rng, -1, 1) : NAN;
        if (dt_dest == TOPS_DT_F32) ((float *)dest)[i] = v;
        else {
            ((uint16_t *)dest)[i] = to16(dt_dest, v);
            v = from16(dt_dest, ((uint16_t *)dest)[i]);
        }
        if (accumulate) ref[i] += v;
    }
    ASSERT_OK(tops_cuda_alloc(0, (size_t)nin * 2, &dx));
    ASSERT_OK(tops_cuda_alloc(0, (size_t)nout * osz, &dout));
    if (!dx || !dout) goto done;
    ASSERT_OK(tops_cuda_copy(dx, gpu0, xin, host_mem, (size_t)nin * 2, NULL));
    ASSERT_OK(tops_cuda_copy(dout, gpu0, dest, host_mem, (size_t)nout * osz, NULL));
    int64_t iext[4] = {c->n, c->h, c->w, c->c}, oext[4] = {c->n, oh, ow, c->o}, bext[1] = {c->o};
    tops_tensor in = view(act, dx, 4, iext, gpu0), out = view(dt_dest, dout, 4, oext, gpu0);
    tops_tensor bias_t = view(TOPS_DT_F32, bias, 1, bext, host_mem);
    tops_conv2d_desc d;
    memset(&d, 0, sizeof d);
    d.kernel_h = (int32_t)c->kh, d.kernel_w = (int32_t)c->kw;
    d.stride_h = c->sh, d.stride_w = c->sw, d.dilation_h = c->dh, d.dilation_w = c->dw;
    d.pad_top = c->pt, d.pad_bottom = c->pb, d.pad_left = c->pl, d.pad_right = c->pr;
    d.groups = c->groups;
    d.relaxed_precision = relaxed;
    d.mode = accumulate ? TOPS_MULTIPLY_ACCUMULATE : TOPS_MULTIPLY;
    d.bias = use_bias ? &bias_t : NULL;
    char path[256] = "";
    ASSERT_OK(tops_conv2d_path(&ex, &d, &in, wt, &out, path, sizeof path));
    if (want_path && !strstr(path, want_path)) TH_FAIL_AT("%s: path \"%s\" does not name \"%s\"", fmt_name, path, want_path);
    for (int run = 0; run < 2; run++) {
        if (run == 1) ASSERT_OK(tops_cuda_copy(dout, gpu0, dest, host_mem, (size_t)nout * osz, NULL));
        tops_status st = tops_conv2d(&ex, &d, &in, wt, &out);
        if (st != TOPS_OK) {
            TH_FAIL_AT("%s: %s", fmt_name, tops_last_error());
            goto done;
        }
        ASSERT_OK(tops_cuda_synchronize(&ex));
        ASSERT_OK(tops_cuda_copy(run ? dest + 0 : first, host_mem, dout, gpu0, (size_t)nout * osz, NULL));
    }
    /* run 0 is in first, run 1 in dest; dest's prior is gone, ref kept it */
    if (memcmp(first, dest, (size_t)nout * osz) != 0) TH_FAIL_AT("%s: two runs gave different bits", fmt_name);
    double num = 0, den = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < nout; i++) {
        double y = dt_dest == TOPS_DT_F32 ? ((float *)first)[i] : from16(dt_dest, ((uint16_t *)first)[i]);
        if (!isfinite(y)) bad++;
        num += (y - ref[i]) * (y - ref[i]);
        den += ref[i] * ref[i];
    }
    const double e = den > 0 ? sqrt(num / den) : sqrt(num);
    const double u = dt_dest == TOPS_DT_F16 ? ldexp(1, -11) : dt_dest == TOPS_DT_BF16 ? ldexp(1, -8) : 0;
    const double bound = (relaxed ? 5e-2 : 1e-5) + 2 * u;
    if (bad || !(e <= bound))
        TH_FAIL_AT("case %dx%dx%dx%d->%d k%dx%d s%d/%d d%d/%d g%d %s act %s dest %s relaxed %d bias %d acc %d where %d "
                   "(%s): rel-L2 %.3g > %.3g, %lld non-finite",
                   (int)c->n, (int)c->h, (int)c->w, (int)c->c, (int)c->o, (int)c->kh, (int)c->kw, c->sh, c->sw, c->dh,
                   c->dw, c->groups, fmt_name, tops_dtype_name(act), tops_dtype_name(dt_dest), relaxed, use_bias,
                   accumulate, where, path, e, bound, (long long)bad);
done:
    if (have_q) tops_tensor_destroy(&q);
    if (have_dev) tops_tensor_destroy(&wdev);
    if (have_packed) tops_tensor_destroy(&packed);
    tops_cuda_free(0, dx), tops_cuda_free(0, dout);
    free(wf), free(wdec), free(bias), free(x), free(ref), free(xin), free(dest), free(first);
}

static int ncases(void) { return small_run ? 3 : (int)(sizeof cases / sizeof cases[0]); }

/* f16 / bf16 weights on the implicit GEMM (on a Hopper the wgmma kernel
   where C / groups is a multiple of 8, else cp.async pieces on mma.sync;
   the element gather otherwise; depthwise on its kernel), device / host /
   packed weights, every dest type. */
static void test_16bit(void) {
    for (int i = 0; i < ncases(); i++) {
        const cv_case *c = &cases[i];
        const int dw = c->groups > 1 && c->groups == c->c && c->o == c->c;
        const int vec = (c->c / c->groups) % 8 == 0;
        const char *want = dw                            ? "depthwise"
                           : !vec                        ? "element by element"
                           : !hopper                     ? "mma.sync"
                           : (c->c / c->groups) % 64 == 0 ? "activations by TMA im2col"
                                                          : "gathered by cp.async into swizzled stages";
        run_case(c, "f16", TOPS_DT_F16, TOPS_DT_F16, 0, 0, 0, W_DEVICE, want);
        run_case(c, "bf16", TOPS_DT_BF16, TOPS_DT_F32, 0, 1, 1, W_HOST, want);
        run_case(c, "f16", TOPS_DT_F16, TOPS_DT_BF16, 0, 1, 0, W_PACKED, dw ? "depthwise" : NULL);
        run_case(c, "bf16", TOPS_DT_BF16, TOPS_DT_BF16, 1, 0, 1, W_DEVICE, want);
    }
}

/* The mma.sync implicit GEMM where the wgmma kernel would run
   (debug key conv_path=mma), and the wgmma kernel at every tile width and with
   forced K splits (ragged M, O and K; the ring wraps many times at K =
   4608), both dest types and modes. */
static void test_16bit_tiles(void) {
    debug_replace("conv_", "conv_path=mma");
    for (int i = 0; i < ncases(); i++) {
        const cv_case *c = &cases[i];
        if (c->groups == c->c || (c->c / c->groups) % 8) continue;
        run_case(c, "f16", TOPS_DT_F16, TOPS_DT_F16, 0, 1, 0, W_DEVICE, "mma.sync");
        run_case(c, "bf16", TOPS_DT_BF16, TOPS_DT_F32, 0, 0, 1, W_HOST, "mma.sync");
    }
    if (!hopper) {
        debug_replace("conv_", NULL);
        return;
    }
    static const char *const opts[][2] = {{"conv_bn=64,conv_splits=1", "128x64 tiles, 1 K split"},
                                          {"conv_bn=128,conv_splits=3", "128x128 tiles, 3 K splits"},
                                          {"conv_bn=256,conv_l1=0", "128x256 tiles"},
                                          {"conv_bn=64,conv_splits=2", "128x64 tiles, 2 K splits"},
                                          {"conv_tma=0", "gathered by cp.async into swizzled stages"},
                                          {"conv_tma=0,conv_l1=0,conv_bn=128", "gathered by cp.async into swizzled stages"}};
    const int nopts = (int)(sizeof opts / sizeof opts[0]);
    for (int v = 0; v < nopts; v++) {
        debug_replace("conv_", opts[v][0]);
        for (int i = 0; i < ncases(); i++) {
            const cv_case *c = &cases[i];
            if (c->groups == c->c || (c->c / c->groups) % 8) continue;
            const int kt = (int)((c->kh * c->kw * (c->c / c->groups) + 63) / 64);
            /* a split count above the K stages is cut to them: name only the width then */
            const char *want = (v == 1 && kt < 3) || (v == 3 && kt < 2) ? "wgmma 128x" : opts[v][1];
            run_case(c, v % 2 ? "bf16" : "f16", v % 2 ? TOPS_DT_BF16 : TOPS_DT_F16,
                     v < 2 || v == 4 ? TOPS_DT_BF16 : TOPS_DT_F32, 0, v != 1, v >= 2,
                     v == 3 ? W_HOST : W_DEVICE, want);
        }
    }
    /* a value the key does not take: refused with a sentence */
    debug_replace("conv_", "conv_bn=96");
    {
        int64_t iext[4] = {1, 5, 5, 8}, oext[4] = {1, 5, 5, 8}, w2[2] = {8, 72};
        void *dx = NULL, *dout = NULL, *dw = NULL;
        ASSERT_OK(tops_cuda_alloc(0, 200 * 2, &dx));
        ASSERT_OK(tops_cuda_alloc(0, 200 * 2, &dout));
        ASSERT_OK(tops_cuda_alloc(0, 576 * 2, &dw));
        tops_tensor in = view(TOPS_DT_F16, dx, 4, iext, gpu0), out = view(TOPS_DT_F16, dout, 4, oext, gpu0);
        tops_tensor wt = view(TOPS_DT_F16, dw, 2, w2, gpu0);
        tops_conv2d_desc d;
        memset(&d, 0, sizeof d);
        d.kernel_h = d.kernel_w = 3;
        d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = 1;
        d.mode = TOPS_MULTIPLY;
        tops_exec ex = tops_exec_default();
        ex.device = gpu0;
        ASSERT_STATUS(tops_conv2d(&ex, &d, &in, &wt, &out), TOPS_INVALID_ARGUMENT);
        ASSERT_TRUE(strstr(tops_last_error(), "TOPS_CUDA_DEBUG") != NULL);
        tops_cuda_free(0, dx), tops_cuda_free(0, dout), tops_cuda_free(0, dw);
    }
    debug_replace("conv_", NULL);
}

/* The transposed wgmma kernel (128 channels x 96 / 104 / 128 / 192 / 256
   pixels a CTA, or 64 x 256 / 384 for O <= 64; debug key conv_tr=1): the
   cases it takes (groups 1, C a multiple of 64) and four larger ones
   (several pixel and channel tiles, O not a multiple of 128 or of 64),
   each pixel width, K splits, bias, accumulate, every dest type, one
   dequantized term. */
static const cv_case tr_cases[] = {
    {4, 20, 20, 64, 256, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  /* M = 1600, O = 256 */
    {3, 19, 21, 64, 56, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},   /* M = 1197, O = 56: CTAs of 64 channels */
    {3, 9, 23, 128, 72, 3, 3, 2, 1, 1, 2, 0, 2, 2, 1, 1},   /* stride 2,1 with dilation 1,2, uneven pads, O = 72 */
    {2, 14, 14, 64, 200, 5, 5, 1, 1, 2, 2, 4, 4, 4, 4, 1},  /* 5x5 dilation 2, O = 200 */
};
static void test_16bit_transposed(void) {
    if (!hopper) return;
    static const struct {
        const char *opt, *want;
    } v[] = {
        {"conv_tr=1,conv_pn=128,conv_splits=1", "128 channels x 128 pixels a CTA (transposed), 1 K split"},
        {"conv_tr=1,conv_pn=192,conv_splits=2", "x 192 pixels"},
        {"conv_tr=1,conv_pn=256,conv_splits=1", "x 256 pixels"},
        {"conv_tr=1", "(transposed)"},
        {"conv_tr=1,conv_pn=96,conv_splits=3", "x 96 pixels"},
        {"conv_tr=1,conv_pn=104", "x 104 pixels"},
        {"conv_tr=1,conv_pn=384,conv_splits=2", "64 channels x 384 pixels"},
    };
    const int nv = (int)(sizeof v / sizeof v[0]);
    for (int j = 0; j < nv; j++) {
        debug_replace("conv_", v[j].opt);
        const int n1 = small_run ? 1 : (int)(sizeof tr_cases / sizeof tr_cases[0]);
        for (int i = 0; i < ncases() + n1; i++) {
            const cv_case *c = i < ncases() ? &cases[i] : &tr_cases[i - ncases()];
            if (c->groups != 1 || c->c % 64) continue;
            const int kt = (int)((c->kh * c->kw * c->c + 63) / 64);
            /* 64 channels or fewer: CTAs of 64 channels over 256 or 384 pixels only (else the pixel-major
               kernel); 384 only there */
            const int ch64 = c->o <= 64, fits = j == 3 || j == 2 ? 1 : ch64 ? j == 6 : j != 6;
            const char *want = !fits ? "wgmma 128x" : j == 1 && kt < 2 ? "x 192 pixels" : v[j].want;
            const tops_dtype act = j % 2 ? TOPS_DT_BF16 : TOPS_DT_F16;
            const tops_dtype dest = j % 3 == 0 ? act : j % 3 == 1 ? TOPS_DT_F32 : TOPS_DT_BF16;
            run_case(c, j % 2 ? "bf16" : "f16", act, dest, 0, j != 2, j >= 2, j % 2 ? W_HOST : W_DEVICE, want);
            if (j == 3) /* one dequantized term (relaxed) */
                run_case(c, "int4-g32", act, dest, 1, 1, 0, W_PACKED, "(transposed)");
        }
    }
    debug_replace("conv_", NULL);
}

/* The direct 3x3 kernel (C = 64, O <= 64, stride 1; it runs by default
   where it applies, debug key conv_direct=0 keeps it off): ragged tiles both
   ways, uneven pads, O = 36 and 8, and 700 images of one tile each (every
   CTA's ring wraps), bias, accumulate, every dest type, host / device /
   packed weights, one dequantized term strict and relaxed. */
static const cv_case dc_cases[] = {
    {2, 17, 30, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  /* 17 x 30 outputs: tiles of 8 x 14, ragged */
    {1, 8, 14, 64, 36, 3, 3, 1, 1, 1, 1, 0, 2, 1, 0, 1},   /* pads 0 / 2 / 1 / 0, O = 36 (no 16-byte rows) */
    {3, 9, 9, 64, 64, 3, 3, 1, 1, 1, 1, 2, 0, 0, 2, 1},    /* pads 2 / 0 / 0 / 2 */
    {700, 8, 14, 64, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  /* 700 tiles: five or six a CTA */
};
static void test_16bit_direct(void) {
    if (!hopper) return;
    const int nc = small_run ? 1 : (int)(sizeof dc_cases / sizeof dc_cases[0]);
    const char *want = "direct 3x3 on halo tiles";
    for (int i = 0; i < nc; i++) {
        const cv_case *c = &dc_cases[i];
        run_case(c, "f16", TOPS_DT_F16, TOPS_DT_F16, 0, 1, 0, W_DEVICE, want);
        run_case(c, "bf16", TOPS_DT_BF16, TOPS_DT_F32, 0, 0, 1, W_HOST, want);
        run_case(c, "f16", TOPS_DT_F16, TOPS_DT_BF16, 0, 1, 1, W_PACKED, want);
        run_case(c, "bf16", TOPS_DT_BF16, TOPS_DT_BF16, 0, 1, 0, W_DEVICE, want);
        run_case(c, "mxfp4", TOPS_DT_F16, TOPS_DT_F32, 0, 1, 0, W_PACKED, want);
        run_case(c, "int4-g32", TOPS_DT_BF16, TOPS_DT_BF16, 1, 0, 1, W_HOST, want);
    }
    debug_replace("conv_", "conv_direct=0"); /* the same layer on the implicit GEMM */
    run_case(&dc_cases[0], "f16", TOPS_DT_F16, TOPS_DT_F16, 0, 1, 0, W_DEVICE, "activations by TMA im2col");
    debug_replace("conv_", NULL);
}

/* The same through im2col + the GPU matmul. */
static void test_16bit_im2col(void) {
    debug_replace("conv_", "conv_path=im2col");
    for (int i = 0; i < ncases(); i++) {
        run_case(&cases[i], "f16", TOPS_DT_F16, TOPS_DT_F32, 0, 1, 0, W_DEVICE, NULL);
        run_case(&cases[i], "bf16", TOPS_DT_BF16, TOPS_DT_BF16, 0, 0, 1, W_HOST, NULL);
    }
    debug_replace("conv_", NULL);
}

/* What a quantized weight runs on: on a Hopper, where C / groups is a
   multiple of 8 and the layer is not depthwise, the wgmma kernel on the
   weights dequantized into 16-bit terms; else im2col (or the 1x1 input)
   and the GPU matmul, or the depthwise kernel. */
static const char *quant_path(const cv_case *c) {
    const int dw = c->groups > 1 && c->groups == c->c && c->o == c->c;
    return dw ? "depthwise" : hopper && (c->c / c->groups) % 8 == 0 ? "dequantized at the call" : "+ matmul";
}

static void test_quantized(void) {
    static const char *const strict_fmts[] = {"int4-g32", "int8-g32", "mxfp4", "e4m3-ch", "int4-g128"};
    static const char *const relaxed_fmts[] = {"int4-g32", "int4-g128", "mxfp4", "e4m3-ch"};
    const int nf = small_run ? 1 : (int)(sizeof strict_fmts / sizeof strict_fmts[0]);
    const int nr = small_run ? 1 : (int)(sizeof relaxed_fmts / sizeof relaxed_fmts[0]);
    for (int i = 0; i < ncases(); i++) {
        const char *want = quant_path(&cases[i]);
        for (int f = 0; f < nf; f++)
            run_case(&cases[i], strict_fmts[f], f % 2 ? TOPS_DT_BF16 : TOPS_DT_F16, TOPS_DT_F32, 0, f == 0, f == 1,
                     f % 3 == 0 ? W_PACKED : f % 3 == 1 ? W_HOST : W_DEVICE, want);
        for (int f = 0; f < nr; f++)
            run_case(&cases[i], relaxed_fmts[f], TOPS_DT_F16, TOPS_DT_F16, 1, f == 1, 0, f % 2 ? W_HOST : W_PACKED, want);
    }
}

/* The dequantized terms on a Hopper: how many each weight takes (strict:
   one where code x scale is exact, two f16, three bf16; relaxed one),
   formats with mins (biases in the weights), a tensor factor (nvfp4),
   8-bit blocks and K-quants where K holds their blocks, each tile width and
   K splits; and the same formats forced onto im2col + the matmul. */
static void test_quantized_terms(void) {
    static const struct {
        const char *fmt;
        int block;
        tops_dtype act;
        int relaxed;
        const char *terms;
    } fm[] = {
        {"int4-g128", 128, TOPS_DT_F16, 0, "to 2 f16 terms"},  {"mxfp4", 32, TOPS_DT_F16, 0, "to 1 f16 term"},
        {"int8-g32", 32, TOPS_DT_BF16, 0, "to 3 bf16 terms"},  {"int4-g32", 32, TOPS_DT_F16, 1, "to 1 f16 term (relaxed"},
        {"q4_1", 32, TOPS_DT_F16, 0, "to 2 f16 terms"},        {"nvfp4", 16, TOPS_DT_BF16, 0, "bf16 term"},
        {"q8_0", 32, TOPS_DT_BF16, 1, "to 1 bf16 term (relaxed"}, {"q4_K", 256, TOPS_DT_F16, 0, "to 2 f16 terms"},
        {"q4_K", 256, TOPS_DT_BF16, 0, "to 3 bf16 terms"},     {"e4m3-ch", 1, TOPS_DT_BF16, 0, "to 3 bf16 terms"},
    };
    const int nfm = (int)(sizeof fm / sizeof fm[0]);
    static const char *const opts[] = {NULL, "conv_bn=64,conv_splits=2", "conv_bn=128,conv_splits=3,conv_tma=0",
                                       "conv_path=im2col"};
    for (int v = 0; v < 4; v++) {
        if (v > 0 && v < 3 && !hopper) continue;
        if (opts[v]) debug_replace("conv_", opts[v]);
        for (int i = 0; i < ncases(); i++) {
            const cv_case *c = &cases[i];
            const int64_t k = c->kh * c->kw * (c->c / c->groups);
            const char *want = v == 3 ? "+ matmul" : quant_path(c);
            if (v > 0 && (!want || strcmp(want, "dequantized at the call") != 0)) continue;
            for (int f = 0; f < nfm; f++) {
                if (k % fm[f].block || (v > 0 && f % 2 != i % 2)) continue;
                const int terms_path = want && strcmp(want, "dequantized at the call") == 0;
                run_case(c, fm[f].fmt, fm[f].act, f % 3 ? TOPS_DT_F32 : fm[f].act, fm[f].relaxed, f % 2, f % 4 == 1,
                         f % 3 == 0 ? W_PACKED : f % 3 == 1 ? W_HOST : W_DEVICE, terms_path ? fm[f].terms : want);
            }
        }
        debug_replace("conv_", NULL);
    }
}

/* Refused before any launch, dest untouched: host tensors with a GPU exec,
   f32 activations on the GPU, a CPU pack. */
static void test_bad_inputs(void) {
    int64_t iext[4] = {1, 5, 5, 8}, oext[4] = {1, 3, 3, 4}, wext[4] = {4, 3, 3, 8};
    float *xin = calloc(200, 4), *w = calloc(288, 4), *o = malloc(36 * 4);
    for (int i = 0; i < 36; i++) o[i] = 7.0f;
    tops_tensor in = view(TOPS_DT_F32, xin, 4, iext, host_mem), wt = view(TOPS_DT_F32, w, 4, wext, host_mem),
                out = view(TOPS_DT_F32, o, 4, oext, host_mem);
    tops_conv2d_desc d;
    memset(&d, 0, sizeof d);
    d.mode = TOPS_MULTIPLY;
    tops_exec ex = tops_exec_default();
    ex.device = gpu0;
    tops_status st = tops_conv2d(&ex, &d, &in, &wt, &out);
    if (st == TOPS_OK) TH_FAIL_AT("host tensors with exec.device cuda:0 were accepted");
    ASSERT_TRUE(strlen(tops_last_error()) > 0);
    char path[128];
    ASSERT_TRUE(tops_conv2d_path(&ex, &d, &in, &wt, &out, path, sizeof path) != TOPS_OK);
    for (int i = 0; i < 36; i++) ASSERT_TRUE(o[i] == 7.0f);
    if (tops_get_build_info().cuda) {
        /* TOPS_CUDA_DEBUG is checked before the device and the tensors: a
           conv2d key with a value it does not take, or an unknown key, is
           refused, not ignored; valid keys pass on to the next check */
        static const char *const bad[] = {"conv_bn=96", "conv_path=fast", "conv_splits=0x", "conv_pn=100",
                                          "conv_tr=2", "conv_im2col=1"};
        d.kernel_h = d.kernel_w = 3;
        for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
            debug_replace("conv_", bad[i]);
            ASSERT_FAILS_WITH(tops_conv2d(&ex, &d, &in, &wt, &out), TOPS_INVALID_ARGUMENT, "TOPS_CUDA_DEBUG");
            ASSERT_FAILS_WITH(tops_conv2d_path(&ex, &d, &in, &wt, &out, path, sizeof path), TOPS_INVALID_ARGUMENT,
                              "TOPS_CUDA_DEBUG");
        }
        debug_replace("conv_", "conv_path=im2col,conv_bn=64,conv_splits=64,conv_tr=-1,conv_pn=384,conv_direct=0");
        ASSERT_TRUE(tops_conv2d(&ex, &d, &in, &wt, &out) != TOPS_OK);
        ASSERT_TRUE(strstr(tops_last_error(), "TOPS_CUDA_DEBUG") == NULL);
        debug_replace("conv_", NULL);
        for (int i = 0; i < 36; i++) ASSERT_TRUE(o[i] == 7.0f);
    }
    free(xin), free(w), free(o);
}

/* On the GPU: f32 input refused; a CPU pack refused. */
static void test_gpu_refusals(void) {
    int64_t iext[4] = {1, 5, 5, 8}, oext[4] = {1, 3, 3, 4}, w2[2] = {4, 72};
    void *dx = NULL, *dout = NULL;
    ASSERT_OK(tops_cuda_alloc(0, 200 * 4, &dx));
    ASSERT_OK(tops_cuda_alloc(0, 36 * 4, &dout));
    float *w = calloc(288, 4);
    tops_tensor in = view(TOPS_DT_F32, dx, 4, iext, gpu0), out = view(TOPS_DT_F32, dout, 4, oext, gpu0);
    tops_tensor wt = view(TOPS_DT_F32, w, 2, w2, host_mem);
    tops_conv2d_desc d;
    memset(&d, 0, sizeof d);
    d.kernel_h = d.kernel_w = 3;
    d.mode = TOPS_MULTIPLY;
    tops_exec ex = tops_exec_default();
    ex.device = gpu0;
    ASSERT_STATUS(tops_conv2d(&ex, &d, &in, &wt, &out), TOPS_UNSUPPORTED_FORMAT);
    tops_tensor in16 = view(TOPS_DT_F16, dx, 4, iext, gpu0), packed;
    tops_matmul2d_desc md;
    memset(&md, 0, sizeof md);
    md.transpose_right = 1;
    ASSERT_OK(tops_pack_right(NULL, &md, &wt, &packed));
    ASSERT_STATUS(tops_conv2d(&ex, &d, &in16, &packed, &out), TOPS_INVALID_ARGUMENT);
    tops_tensor_destroy(&packed);
    tops_cuda_free(0, dx), tops_cuda_free(0, dout);
    free(w);
}

int main(void) {
    rng = th_seed();
    small_run = getenv("TOPS_CUDA_TEST_SMALL") && atoi(getenv("TOPS_CUDA_TEST_SMALL")) == 1;
    RUN_TEST(test_bad_inputs);
    int n = 0;
    tops_cuda_device_count(&n);
    tops_cuda_device_info info;
    if (!tops_get_build_info().cuda || n == 0 || tops_cuda_get_device_info(0, &info) != TOPS_OK) {
        printf("skip: GPU conv2d tests need %s\n", tops_get_build_info().cuda ? "a CUDA device (none found)" : "a CUDA build");
        TEST_MAIN_END();
    }
    printf("cuda:0 %s, sm_%d%d\n", info.name, info.major, info.minor);
    hopper = info.major == 9 && info.minor == 0;
    RUN_TEST(test_gpu_refusals);
    RUN_TEST(test_16bit);
    RUN_TEST(test_16bit_tiles);
    RUN_TEST(test_16bit_transposed);
    RUN_TEST(test_16bit_direct);
    RUN_TEST(test_16bit_im2col);
    RUN_TEST(test_quantized);
    RUN_TEST(test_quantized_terms);
    TEST_MAIN_END();
}
