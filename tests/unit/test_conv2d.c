/* conv2d against an f64 direct convolution of the decoded weights, on
   random data: ragged shapes (odd sizes, stride 2 with dilation 2, groups,
   depthwise, 1x1, 7x7, "same"), every kernel level, 1 and 2 threads (same
   bits), strict and relaxed weight formats, packed weights, bias,
   multiply-accumulate, NaN-poisoned dest, and every bad descriptor. */
#include "harness.h"
#include "core/numeric.h"
#include "drive/conv.h"
#include "ops/matmul2d.h"
#include "tensorops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static th_rng rng;

typedef struct cv_case {
    int64_t n, h, w, c, o, kh, kw;
    int32_t sh, sw, dh, dw, pt, pb, pl, pr, groups;
    int same;
} cv_case;

static const cv_case cases[] = {
    {1, 7, 9, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},     /* odd sizes, pad 1 */
    {2, 11, 13, 6, 7, 3, 3, 2, 2, 2, 2, 2, 1, 0, 3, 1, 0},   /* stride 2 with dilation 2, uneven pads */
    {1, 9, 8, 8, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 0},     /* groups 2 */
    {2, 9, 7, 13, 13, 3, 3, 1, 2, 1, 1, 1, 1, 1, 1, 13, 0},  /* depthwise, odd channels */
    {1, 8, 8, 40, 40, 5, 5, 2, 2, 1, 1, 0, 0, 0, 0, 40, 1},  /* depthwise 5x5 "same" stride 2 */
    {1, 6, 5, 33, 31, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0},   /* 1x1 */
    {1, 15, 14, 3, 9, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1, 0},   /* 7x7 stem, 3 channels */
    {1, 16, 16, 3, 8, 4, 4, 4, 4, 1, 1, 0, 0, 0, 0, 1, 0},   /* patch embedding */
    {1, 16, 24, 3, 40, 8, 8, 8, 8, 1, 1, 0, 0, 0, 0, 1, 0},  /* patch 8x8/8: C = 3 on the rows kernels (KW x C = 24 a run) */
    {2, 24, 17, 3, 72, 8, 8, 8, 8, 1, 1, 0, 0, 0, 0, 1, 0},  /* the same, W past the last patch, batch 2, O = 72 */
    {1, 5, 6, 4, 8, 3, 2, 1, 1, 2, 1, 0, 0, 0, 0, 4, 0},     /* depthwise with multiplier 2 */
    {1, 1, 1, 7, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0},     /* one pixel (rows path) */
    {3, 10, 9, 35, 33, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1},  /* "same", multi-tile M */
    {1, 7, 7, 16, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},   /* M = 49: blocks of 6 and 5 rows (wide), a 1-row last block (AVX2), 2 panels */
    {1, 5, 40, 16, 20, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0},  /* wide rows: a kernel row's taps as one run */
    {1, 6, 50, 24, 8, 3, 3, 2, 2, 1, 1, 1, 0, 1, 0, 1, 0},   /* the same at stride 2, top/left pad */
    {2, 9, 11, 32, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},  /* C % 32 == 0 (relaxed rows), O = 20: a lone 8-column group */
    {1, 6, 40, 64, 24, 3, 3, 2, 1, 2, 1, 1, 1, 0, 2, 1, 0},  /* the same, wide rows, stride 2,1, dilation 2,1 */
    {1, 9, 12, 32, 16, 3, 3, 1, 2, 2, 2, 1, 0, 2, 1, 1, 0},  /* C % 32 == 0, dilation 2 along rows: one call per tap */
    {1, 7, 7, 160, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}, /* wide rows tile: C = 160, M = 49 */
    {1, 3, 4, 1100, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}, /* wide rows: C > 1024, K pieces cut inside a tap */
    {1, 9, 20, 48, 96, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},  /* K pieces across taps of a whole kernel row, a lone last panel */
    {2, 11, 13, 48, 70, 3, 3, 2, 2, 2, 2, 2, 1, 0, 3, 1, 0}, /* stride 2 with dilation 2 on the rows paths, O = 70 */
    {1, 2, 3, 16, 64, 3, 3, 1, 1, 1, 1, 4, 4, 4, 4, 1, 0},  /* pad 4: blocks with every tap in the padding (bias only) */
    {1, 12, 13, 16, 20, 9, 9, 1, 1, 1, 1, 4, 4, 4, 4, 1, 0}, /* 9x9 pad 4: over 64 tap segments a block (AVX2 segs) */
    {1, 7, 19, 13, 13, 3, 3, 1, 1, 1, 2, 1, 1, 2, 2, 13, 0}, /* depthwise 3x3 stride 1, dilation 2 along rows, 13 channels */
};

/* Cases over the small-call thresholds, so more than one thread really
   runs: depthwise over 256 KiB moved with fewer output rows than 4 per
   thread (columns split), and the rows paths over 8e6 flops with a
   partial last panel (O = 72, 40) and a short last row block; M >= 384
   takes the relaxed kernel's weights interleaved per call. */
static const cv_case big_cases[] = {
    {1, 6, 200, 128, 128, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 128, 0}, /* depthwise, 6 output rows */
    {1, 9, 301, 40, 40, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 40, 0},    /* depthwise stride 2, odd width */
    {1, 14, 14, 64, 72, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},     /* ResNet-like 3x3, 16e6 flops */
    {1, 24, 20, 32, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},     /* M = 480: relaxed weights interleaved per call, O = 40 */
    {1, 4, 4, 256, 112, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},     /* M = 16, K = 2304: single-panel jobs from 4 threads */
};

/* Thread counts run_case compares (1 is the reference of the others). */
static int max_threads = 2;

static int64_t out_dim(int64_t in, int64_t pad, int64_t k, int64_t s, int64_t d) {
    return (in + pad - d * (k - 1) - 1) / s + 1;
}

static void resolve(const cv_case *c, int64_t *oh, int64_t *ow, int64_t *pt, int64_t *pl) {
    if (c->same) {
        *oh = (c->h + c->sh - 1) / c->sh;
        *ow = (c->w + c->sw - 1) / c->sw;
        int64_t th = (*oh - 1) * c->sh + c->dh * (c->kh - 1) + 1 - c->h, tw = (*ow - 1) * c->sw + c->dw * (c->kw - 1) + 1 - c->w;
        *pt = th > 0 ? th / 2 : 0;
        *pl = tw > 0 ? tw / 2 : 0;
    } else {
        *oh = out_dim(c->h, c->pt + c->pb, c->kh, c->sh, c->dh);
        *ow = out_dim(c->w, c->pl + c->pr, c->kw, c->sw, c->dw);
        *pt = c->pt;
        *pl = c->pl;
    }
}

/* f64 direct convolution: x [N, H, W, C], w [O, KH, KW, Cg] decoded, ref
   [N, OH, OW, O]; absolute: of |x| and |w| (each output's magnitude). */
static void reference(const cv_case *c, const double *x, const float *w, const float *bias, double *ref,
                      int absolute) {
    int64_t oh, ow, pt, pl;
    resolve(c, &oh, &ow, &pt, &pl);
    const int64_t g = c->groups, cg = c->c / g, og = c->o / g;
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t y = 0; y < oh; y++)
            for (int64_t xx = 0; xx < ow; xx++)
                for (int64_t o = 0; o < c->o; o++) {
                    double s = bias ? (absolute ? fabs(bias[o]) : bias[o]) : 0.0;
                    const int64_t c0 = (o / og) * cg;
                    for (int64_t i = 0; i < c->kh; i++)
                        for (int64_t j = 0; j < c->kw; j++) {
                            int64_t ih = y * c->sh - pt + i * c->dh, iw = xx * c->sw - pl + j * c->dw;
                            if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
                            for (int64_t ch = 0; ch < cg; ch++) {
                                const double p = x[((n * c->h + ih) * c->w + iw) * c->c + c0 + ch] *
                                                 (double)w[((o * c->kh + i) * c->kw + j) * cg + ch];
                                s += absolute ? fabs(p) : p;
                            }
                        }
                    ref[((n * oh + y) * ow + xx) * c->o + o] = s;
                }
}

/* ||y - ref|| / ||scale|| (scale = ref: relative L2; the magnitudes:
   normwise, where few outputs or a short relaxed K can cancel to ~0). */
static double rel_l2(const double *ref, const double *scale, const float *y, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(y[i])) return INFINITY;
        num += (y[i] - ref[i]) * (y[i] - ref[i]);
        den += scale[i] * scale[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static tops_conv2d_desc make_desc(const cv_case *c) {
    tops_conv2d_desc d;
    memset(&d, 0, sizeof d);
    d.kernel_h = (int32_t)c->kh, d.kernel_w = (int32_t)c->kw;
    d.stride_h = c->sh, d.stride_w = c->sw, d.dilation_h = c->dh, d.dilation_w = c->dw;
    if (c->same) d.same = 1;
    else d.pad_top = c->pt, d.pad_bottom = c->pb, d.pad_left = c->pl, d.pad_right = c->pr;
    d.groups = c->groups;
    d.mode = TOPS_MULTIPLY;
    return d;
}

static tops_tensor view4(tops_dtype dt, void *data, int64_t a, int64_t b, int64_t c, int64_t d) {
    tops_tensor_desc v;
    memset(&v, 0, sizeof v);
    v.format = tops_format_of(dt);
    v.rank = 4;
    v.extent[0] = a, v.extent[1] = b, v.extent[2] = c, v.extent[3] = d;
    v.data = data;
    tops_tensor t;
    if (tops_tensor_view(&v, &t) != TOPS_OK) {
        fprintf(stderr, "view4: %s\n", tops_last_error());
        abort();
    }
    return t;
}

/* One weight format: the quantized rank-2 tensor and its decode. */
typedef struct cv_weight {
    tops_tensor q, packed;
    int have_packed;
    float *decoded;
} cv_weight;

static int make_weight(const char *fmt_name, int64_t o, int64_t k, const float *w, int relaxed, cv_weight *out) {
    tops_format f;
    int64_t ext[2] = {o, k};
    tops_tensor src;
    tops_tensor_desc v;
    memset(out, 0, sizeof *out);
    memset(&v, 0, sizeof v);
    v.format = tops_format_of(TOPS_DT_F32);
    v.rank = 2;
    v.extent[0] = o, v.extent[1] = k;
    v.data = (void *)w;
    if (tops_format_from_name(fmt_name, &f) != TOPS_OK || tops_tensor_view(&v, &src) != TOPS_OK ||
        tops_tensor_create(f, 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, &out->q) != TOPS_OK ||
        tops_quantize(&src, &out->q, NULL) != TOPS_OK)
        return 0;
    out->decoded = malloc((size_t)(o * k) * sizeof(float));
    v.data = out->decoded;
    tops_tensor dv;
    if (tops_tensor_view(&v, &dv) != TOPS_OK || tops_dequantize(&out->q, &dv) != TOPS_OK) return 0;
    tops_matmul2d_desc md;
    memset(&md, 0, sizeof md);
    md.transpose_right = 1;
    md.relaxed_precision = relaxed;
    out->have_packed = tops_pack_right(NULL, &md, &out->q, &out->packed) == TOPS_OK;
    return 1;
}

static void free_weight(cv_weight *w) {
    tops_tensor_destroy(&w->q);
    if (w->have_packed) tops_tensor_destroy(&w->packed);
    free(w->decoded);
}

/* Runs one case at every level and 1/2 threads; checks rel-L2 against
   f64 and that the thread counts agree bit for bit. */
static void run_case(const cv_case *c, const char *fmt_name, tops_dtype act, tops_dtype dt_dest, int relaxed,
                     int use_bias, int accumulate, int packed) {
    int64_t oh, ow, pt, pl;
    resolve(c, &oh, &ow, &pt, &pl);
    const int64_t cg = c->c / c->groups, k = c->kh * c->kw * cg;
    const int64_t nin = c->n * c->h * c->w * c->c, nout = c->n * oh * ow * c->o;
    float *wf = malloc((size_t)(c->o * k) * sizeof(float)), *bias = malloc((size_t)c->o * sizeof(float));
    double *x = malloc((size_t)nin * sizeof(double)), *ref = malloc((size_t)nout * sizeof(double));
    double *prior = malloc((size_t)nout * sizeof(double)), *mag = malloc((size_t)nout * sizeof(double));
    uint16_t *xin = malloc((size_t)nin * 4), *dest = malloc((size_t)nout * 4), *first = malloc((size_t)nout * 4);
    float *y = malloc((size_t)nout * sizeof(float));
    for (int64_t i = 0; i < c->o * k; i++) wf[i] = th_uniform(&rng, -1, 1);
    for (int64_t i = 0; i < c->o; i++) bias[i] = th_uniform(&rng, -1, 1);
    for (int64_t i = 0; i < nin; i++) {
        float v = th_uniform(&rng, -1, 1);
        if (act == TOPS_DT_F16) ((uint16_t *)xin)[i] = tops__f32_to_f16(v), v = tops__f16_to_f32(((uint16_t *)xin)[i]);
        else if (act == TOPS_DT_BF16) ((uint16_t *)xin)[i] = tops__f32_to_bf16(v), v = tops__bf16_to_f32(((uint16_t *)xin)[i]);
        else ((float *)xin)[i] = v;
        x[i] = v;
    }
    cv_weight w;
    if (!make_weight(fmt_name, c->o, k, wf, relaxed, &w)) {
        TH_FAIL_AT("weight %s: %s", fmt_name, tops_last_error());
        goto done;
    }
    tops_tensor bias_t;
    tops_tensor_desc bd;
    memset(&bd, 0, sizeof bd);
    bd.format = tops_format_of(TOPS_DT_F32);
    bd.rank = 1;
    bd.extent[0] = c->o;
    bd.data = bias;
    ASSERT_OK(tops_tensor_view(&bd, &bias_t));
    reference(c, x, w.decoded, use_bias ? bias : NULL, ref, 0);
    reference(c, x, w.decoded, use_bias ? bias : NULL, mag, 1);
    for (int64_t i = 0; i < nout; i++) prior[i] = th_uniform(&rng, -1, 1);
    if (accumulate)
        for (int64_t i = 0; i < nout; i++) ref[i] += prior[i], mag[i] += fabs(prior[i]);
    const int normwise = nout < 32 || (relaxed && k < 64);

    tops_tensor in = view4(act, xin, c->n, c->h, c->w, c->c), out = view4(dt_dest, dest, c->n, oh, ow, c->o);
    tops_conv2d_desc d = make_desc(c);
    d.relaxed_precision = relaxed;
    d.mode = accumulate ? TOPS_MULTIPLY_ACCUMULATE : TOPS_MULTIPLY;
    d.bias = use_bias ? &bias_t : NULL;
    const tops_tensor *wt = packed && w.have_packed && c->groups == 1 ? &w.packed : &w.q;
    const double u = dt_dest == TOPS_DT_F16 ? ldexp(1, -11) : dt_dest == TOPS_DT_BF16 ? ldexp(1, -8) : 0;
    const double bound = (relaxed ? 1e-2 : 1e-5) + 2 * u;
    for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
        const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
        if (!kern) continue;
        for (int threads = 1; threads <= max_threads; threads++) {
            for (int64_t i = 0; i < nout; i++) {
                float v = accumulate ? (float)prior[i] : NAN; /* an unwritten element shows */
                if (dt_dest == TOPS_DT_F32) ((float *)dest)[i] = v;
                else if (dt_dest == TOPS_DT_F16) dest[i] = tops__f32_to_f16(v);
                else dest[i] = tops__f32_to_bf16(v);
            }
            if (accumulate && dt_dest != TOPS_DT_F32) /* the prior as dest holds it */
                for (int64_t i = 0; i < nout; i++) ref[i] += (dt_dest == TOPS_DT_F16 ? tops__f16_to_f32(dest[i]) : tops__bf16_to_f32(dest[i])) - prior[i], prior[i] = dt_dest == TOPS_DT_F16 ? tops__f16_to_f32(dest[i]) : tops__bf16_to_f32(dest[i]);
            tops_exec ex = tops_exec_default();
            ex.threads = threads;
            tops_status st = tops__conv2d_with(kern, &ex, &d, &in, wt, &out);
            if (st != TOPS_OK) {
                TH_FAIL_AT("%s isa %s: %s", fmt_name, tops_isa_name((tops_isa)isa), tops_last_error());
                continue;
            }
            for (int64_t i = 0; i < nout; i++)
                y[i] = dt_dest == TOPS_DT_F32   ? ((float *)dest)[i]
                       : dt_dest == TOPS_DT_F16 ? tops__f16_to_f32(dest[i])
                                                : tops__bf16_to_f32(dest[i]);
            double e = rel_l2(ref, normwise ? mag : ref, y, nout);
            if (!(e <= bound))
                TH_FAIL_AT("case %dx%dx%dx%d->%d k%dx%d s%d/%d d%d/%d g%d %s act %s dest %s relaxed %d bias %d acc %d "
                           "packed %d isa %s threads %d: rel-L2 %.3g > %.3g",
                           (int)c->n, (int)c->h, (int)c->w, (int)c->c, (int)c->o, (int)c->kh, (int)c->kw, c->sh, c->sw,
                           c->dh, c->dw, c->groups, fmt_name, tops_dtype_name(act), tops_dtype_name(dt_dest), relaxed,
                           use_bias, accumulate, packed, tops_isa_name((tops_isa)isa), threads, e, bound);
            if (threads == 1) memcpy(first, dest, (size_t)nout * 4);
            else if (memcmp(first, dest, (size_t)nout * (dt_dest == TOPS_DT_F32 ? 4 : 2)) != 0)
                TH_FAIL_AT("%s isa %s: %d threads differ from 1", fmt_name, tops_isa_name((tops_isa)isa), threads);
        }
    }
    free_weight(&w);
done:
    free(wf), free(bias), free(x), free(ref), free(prior), free(mag), free(xin), free(dest), free(first), free(y);
}

static void test_strict_f32(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], "f32", TOPS_DT_F32, TOPS_DT_F32, 0, 0, 0, 0);
}

static void test_bias_accumulate_dtypes(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(&cases[i], "f32", TOPS_DT_F32, TOPS_DT_F32, 0, 1, 0, 0);
        run_case(&cases[i], "f16", TOPS_DT_F16, TOPS_DT_F32, 0, 0, 1, 0);
        run_case(&cases[i], "bf16", TOPS_DT_BF16, TOPS_DT_F16, 0, 1, 1, 0);
        run_case(&cases[i], "f32", TOPS_DT_F32, TOPS_DT_BF16, 0, 1, 0, 0);
        /* packed f32 weights, f32 input: the rows paths, their tiles
           stored into a 16-bit dest with bias and the old values */
        run_case(&cases[i], "f32", TOPS_DT_F32, TOPS_DT_F16, 0, 1, 1, 1);
        run_case(&cases[i], "f32", TOPS_DT_F32, TOPS_DT_BF16, 0, 1, 1, 1);
    }
}

static void test_quantized(void) {
    static const char *const strict_fmts[] = {"int8-g32", "int4-g32", "mxfp4", "nvfp4", "e4m3-ch", "lut4", "int4-g16-affine"};
    static const char *const relaxed_fmts[] = {"int8-g32", "int4-g32", "mxfp4"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (size_t f = 0; f < sizeof strict_fmts / sizeof strict_fmts[0]; f++)
            run_case(&cases[i], strict_fmts[f], TOPS_DT_F32, TOPS_DT_F32, 0, f == 0, 0, 0);
        for (size_t f = 0; f < sizeof relaxed_fmts / sizeof relaxed_fmts[0]; f++) {
            run_case(&cases[i], relaxed_fmts[f], TOPS_DT_F32, TOPS_DT_F32, 1, 0, 0, 0);
            run_case(&cases[i], relaxed_fmts[f], TOPS_DT_F16, TOPS_DT_F32, 1, 1, 1, 1); /* packed (groups 1) */
        }
        run_case(&cases[i], "f32", TOPS_DT_F32, TOPS_DT_F32, 0, 0, 0, 1);
    }
}

/* Calls big enough to run threaded: 1 to 5 threads, same bits. */
static void test_threaded(void) {
    max_threads = 5;
    for (size_t i = 0; i < sizeof big_cases / sizeof big_cases[0]; i++) {
        run_case(&big_cases[i], "f32", TOPS_DT_F32, TOPS_DT_F32, 0, 1, 0, 0);
        run_case(&big_cases[i], "f32", TOPS_DT_F32, TOPS_DT_F32, 0, 0, 1, 1); /* packed: the rows path */
        run_case(&big_cases[i], "int8-g32", TOPS_DT_F32, TOPS_DT_F32, 1, 0, 0, 1);
    }
    run_case(&big_cases[0], "f32", TOPS_DT_BF16, TOPS_DT_F16, 0, 1, 1, 0); /* converted rows, stored via a row */
    max_threads = 2;
}

/* Winograd F(2x2, 3x3): relaxed 3x3 stride-1 dilation-1 groups-1 calls
   (the path asserted by name, and strict calls asserted off it): odd and
   even output sizes (a last tile with one row / column), paddings 0, 1,
   2 and uneven, "same", C and O off the vector widths, batch > 1, f16 / bf16
   activations and dests, bias, accumulate, packed and plain weights of
   several formats, and big calls at 1 to 5 threads (blocks of tiles, and
   output panels split at batch 1). */
static const cv_case wino_cases[] = {
    {1, 7, 9, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},    /* odd output 7 x 9 */
    {2, 6, 8, 3, 17, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0},   /* no padding, output 4 x 6, batch 2 */
    {1, 5, 5, 19, 9, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2, 1, 0},   /* pad 2: output 7 x 7, tiles all padding at the edge */
    {3, 9, 10, 20, 33, 3, 3, 1, 1, 1, 1, 0, 2, 1, 0, 1, 0}, /* uneven pads */
    {2, 11, 7, 40, 24, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1}, /* "same" */
    {1, 3, 3, 8, 8, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0},    /* one output pixel */
    {1, 1, 12, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}, /* one input row */
};
static const cv_case wino_big[] = {
    {1, 7, 7, 96, 200, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},   /* res5-like batch 1: one block, panels split */
    {2, 15, 13, 72, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},  /* several blocks, a short last one */
    {1, 14, 14, 300, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}, /* C over the K block (256): two K blocks */
};

/* The path of a call names `needle` (want 1) or not (0); want < 0: the
   call is refused for a bad TOPS_CPU_CONV. */
static void expect_in_path(const cv_case *c, const char *fmt, tops_dtype act, int relaxed, int packed,
                           const char *needle, int want_wino) {
    int64_t oh, ow, pt, pl;
    resolve(c, &oh, &ow, &pt, &pl);
    const int64_t k = c->kh * c->kw * c->c;
    float *wf = calloc((size_t)(c->o * k), sizeof(float));
    float *x = calloc((size_t)(c->n * c->h * c->w * c->c), sizeof(float));
    float *yv = calloc((size_t)(c->n * oh * ow * c->o), sizeof(float));
    cv_weight w;
    if (!make_weight(fmt, c->o, k, wf, relaxed, &w)) {
        TH_FAIL_AT("weight %s: %s", fmt, tops_last_error());
        free(wf), free(x), free(yv);
        return;
    }
    tops_tensor in = view4(act, x, c->n, c->h, c->w, c->c), out = view4(TOPS_DT_F32, yv, c->n, oh, ow, c->o);
    tops_conv2d_desc d = make_desc(c);
    d.relaxed_precision = relaxed;
    char path[256];
    const tops_status st = tops_conv2d_path(NULL, &d, &in, packed && w.have_packed ? &w.packed : &w.q, &out, path, sizeof path);
    if (want_wino < 0) { /* a bad TOPS_CPU_CONV */
        if (st != TOPS_INVALID_ARGUMENT || !strstr(tops_last_error(), "TOPS_CPU_CONV"))
            TH_FAIL_AT("a bad TOPS_CPU_CONV: status %d, \"%s\"", (int)st, tops_last_error());
    } else if (st != TOPS_OK) {
        TH_FAIL_AT("tops_conv2d_path: %s", tops_last_error());
    } else if ((strstr(path, needle) != NULL) != want_wino)
        TH_FAIL_AT("%s relaxed %d packed %d: path \"%s\"", fmt, relaxed, packed, path);
    free_weight(&w);
    free(wf), free(x), free(yv);
}

static void expect_path(const cv_case *c, const char *fmt, int relaxed, int packed, int want_wino) {
    expect_in_path(c, fmt, TOPS_DT_F32, relaxed, packed, "Winograd", want_wino);
}

/* A relaxed case over the given formats (plain; packed with bias and
   accumulate), then with 16-bit activations and dests. */
static void run_relaxed_set(const cv_case *c, const char *const *fmts, size_t nf, const char *bf16_fmt) {
    for (size_t f = 0; f < nf; f++) {
        run_case(c, fmts[f], TOPS_DT_F32, TOPS_DT_F32, 1, 0, 0, 0);
        run_case(c, fmts[f], TOPS_DT_F32, TOPS_DT_F32, 1, 1, 1, 1); /* packed, bias, accumulate */
    }
    run_case(c, "int8-g32", TOPS_DT_F16, TOPS_DT_BF16, 1, 1, 0, 1);
    run_case(c, bf16_fmt, TOPS_DT_BF16, TOPS_DT_F16, 1, 0, 1, 0);
}

static void test_winograd(void) {
    static const char *const fmts[] = {"int8-g32", "int4-g32", "f32", "f16"};
    /* where it is worth it by default: packed from 32 tiles, plain from 512 */
    static const cv_case res4 = {1, 14, 14, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};   /* 49 tiles */
    static const cv_case res5 = {1, 7, 7, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};     /* 16 tiles */
    static const cv_case res3b = {3, 28, 28, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};  /* 588 tiles */
    /* packed integer weights stay on the relaxed rows kernel where it beats
       Winograd (VNNI); at the AMX level they are packed for the AMX tiles,
       which the rows kernel cannot read */
    const tops__kernels *kd = tops__kernels_get();
    const int rows_win = kd->gemm_q8_rows_over_wino && !kd->amx_q8.run;
    const int amxd = kd->conv_amx != NULL; /* res4 (32 channels, rows of 14) runs direct on the AMX tiles */
    expect_path(&res4, "int4-g32", 1, 1, !rows_win && !amxd);
    expect_path(&res4, "int8-g32", 1, 1, !rows_win && !amxd);
    expect_path(&res4, "f32", 1, 1, !amxd);
    expect_path(&res4, "int4-g32", 1, 0, 0);
    expect_path(&res5, "int4-g32", 1, 1, 0);
    expect_path(&res3b, "int8-g32", 1, 0, 1);
    setenv("TOPS_CPU_CONV", "direct", 1);
    expect_path(&res3b, "int8-g32", 1, 0, 0);
    setenv("TOPS_CPU_CONV", "bogus", 1);
    expect_path(&res4, "int4-g32", 1, 1, -1); /* refused with a sentence */
    unsetenv("TOPS_CPU_CONV");
    setenv("TOPS_CPU_CONV", "winograd", 1); /* the small cases below */
    for (size_t i = 0; i < sizeof wino_cases / sizeof wino_cases[0]; i++) {
        const cv_case *c = &wino_cases[i];
        expect_path(c, "int4-g32", 1, 1, 1);
        expect_path(c, "f32", 1, 0, 1);
        expect_path(c, "int4-g32", 0, 1, 0); /* strict: never Winograd */
        expect_path(c, "f32", 0, 0, 0);
        run_relaxed_set(c, fmts, sizeof fmts / sizeof fmts[0], "mxfp4");
    }
    max_threads = 5;
    for (size_t i = 0; i < sizeof wino_big / sizeof wino_big[0]; i++) {
        expect_path(&wino_big[i], "int8-g32", 1, 1, 1);
        run_case(&wino_big[i], "int8-g32", TOPS_DT_F32, TOPS_DT_F32, 1, 1, 0, 1);
        run_case(&wino_big[i], "f32", TOPS_DT_F32, TOPS_DT_F32, 1, 0, 1, 1);
    }
    max_threads = 2;
    unsetenv("TOPS_CPU_CONV");
}

/* Relaxed calls direct on the AMX tiles (amx level): a padded bf16 image,
   row tiles of 16 pixels of one output row (ragged: a short last tile),
   pairs of 16-channel tiles (a lone last one, a short one), 48 channels
   padded to 64, strides and dilations along either axis, 5x5 "same",
   1x1, batch > 1; f16 / bf16 activations and dests, bias, accumulate,
   packed (the panels kept on the pack, then read again by the next
   thread count) and plain weights; 1 to 3 threads give the same bits. */
static const cv_case amx_cases[] = {
    {2, 9, 20, 48, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},  /* C 48 -> 64, 20 = 16 + 4 pixels, O = 2 x 32 + 6 */
    {1, 16, 35, 32, 40, 3, 3, 2, 1, 2, 1, 2, 1, 0, 2, 1, 0}, /* stride 2 / dilation 2 along rows, uneven pads */
    {1, 10, 40, 64, 32, 3, 3, 1, 2, 1, 2, 1, 1, 2, 2, 1, 0}, /* stride 2 / dilation 2 along columns */
    {2, 8, 30, 32, 16, 5, 5, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1},  /* 5x5 "same", one channel tile */
    {1, 3, 16, 64, 33, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0},  /* 1x1, rows of exactly 16 */
};

static void test_amx_direct(void) {
    if (!tops__kernels_get()->conv_amx) printf("  (no AMX direct kernel at this level: its cases run on the other paths)\n");
    static const char *const fmts[] = {"int8-g32", "int4-g32", "f32", "mxfp4"};
    for (size_t i = 0; i < sizeof amx_cases / sizeof amx_cases[0]; i++) {
        const cv_case *c = &amx_cases[i];
        if (tops__kernels_get()->conv_amx) {
            expect_in_path(c, "int4-g32", TOPS_DT_F32, 1, 1, "AMX tiles", 1);
            expect_in_path(c, "f32", TOPS_DT_F32, 1, 0, "AMX tiles", 1);
            /* strict: only where every product is exact (bf16 input, weights one bf16 each) */
            expect_in_path(c, "int4-g32", TOPS_DT_F32, 0, 1, "AMX tiles", 0);
            expect_in_path(c, "bf16", TOPS_DT_F32, 0, 0, "AMX tiles", 0);
            expect_in_path(c, "int4-g32", TOPS_DT_BF16, 0, 0, "AMX tiles", 0); /* f16 scales: two terms */
            expect_in_path(c, "bf16", TOPS_DT_BF16, 0, 0, "AMX tiles", 1);
            expect_in_path(c, "bf16", TOPS_DT_BF16, 0, 1, "AMX tiles", 1);
            expect_in_path(c, "mxfp4", TOPS_DT_BF16, 0, 1, "AMX tiles", 1);
        }
        run_relaxed_set(c, fmts, sizeof fmts / sizeof fmts[0], "q4_0");
        run_case(c, "bf16", TOPS_DT_BF16, TOPS_DT_F32, 0, 1, 1, 0);  /* strict, bias, accumulate */
        run_case(c, "bf16", TOPS_DT_BF16, TOPS_DT_F16, 0, 0, 0, 1);  /* strict, packed */
        run_case(c, "mxfp4", TOPS_DT_BF16, TOPS_DT_F32, 0, 1, 0, 1); /* strict one-term weights, packed */
    }
    max_threads = 3;
    run_case(&amx_cases[0], "int4-g32", TOPS_DT_F32, TOPS_DT_F32, 1, 1, 0, 1);
    max_threads = 2;
}

/* The AMX direct driver copies the input in chunks of images within a
   byte budget: one image a chunk, two, or all give the same bits, at 1
   and 2 threads (the op passes a budget that takes ResNet batches whole). */
static void test_amx_chunks(void) {
    const tops__kernels *kern = tops__kernels_get();
    if (!kern->conv_amx) {
        printf("  (no AMX direct kernel at this level)\n");
        return;
    }
    enum { N = 5, H = 9, W = 17, C = 40, O = 36, KH = 3, KW = 3 };
    const int64_t oh = H, ow = W, k = KH * KW * C, m = (int64_t)N * oh * ow;
    float *x = malloc(sizeof(float) * N * H * W * C), *w = malloc(sizeof(float) * O * k), *bias = malloc(sizeof(float) * O);
    float *y[4];
    uint16_t *panels = malloc(sizeof(uint16_t) * (size_t)tops__conv_amx_weight_elems(KH * KW, C, O));
    for (int64_t i = 0; i < (int64_t)N * H * W * C; i++) x[i] = th_uniform(&rng, -1, 1);
    for (int64_t i = 0; i < O * k; i++) w[i] = th_uniform(&rng, -1, 1);
    for (int i = 0; i < O; i++) bias[i] = th_uniform(&rng, -1, 1);
    tops__conv_amx_weights(w, k, KH * KW, C, O, panels);
    tops_tensor in = view4(TOPS_DT_F32, x, N, H, W, C);
    const tops__conv_geom g = {&in, H, W, oh, ow, KH, KW, 1, 1, 1, 1, 1, 1, C, 0};
    const int64_t per = tops__conv_amx_image_bytes(&g);
    const int64_t budgets[4] = {(int64_t)1 << 40, 1, 2 * per, 3 * per - 1};
    for (int v = 0; v < 4; v++) {
        y[v] = malloc(sizeof(float) * m * O);
        tops_tensor_desc dd;
        memset(&dd, 0, sizeof dd);
        dd.format = tops_format_of(TOPS_DT_F32);
        dd.rank = 2;
        dd.extent[0] = m, dd.extent[1] = O;
        dd.data = y[v];
        tops_tensor dest;
        ASSERT_OK(tops_tensor_view(&dd, &dest));
        for (int64_t i = 0; i < m * O; i++) y[v][i] = NAN;
        ASSERT_OK(tops__conv_amx_run("test", kern, &g, N, panels, O, bias, &dest, 0, 1 + v % 2, budgets[v]));
        if (v > 0 && memcmp(y[0], y[v], sizeof(float) * m * O) != 0)
            TH_FAIL_AT("budget %lld (%lld bytes an image), %d threads: bits differ from one chunk", (long long)budgets[v],
                       (long long)per, 1 + v % 2);
    }
    /* and against the f64 convolution of the bf16-rounded operands' source, loosely */
    double num = 0, den = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t yy = 0; yy < oh; yy++)
            for (int64_t xx = 0; xx < ow; xx++)
                for (int oc = 0; oc < O; oc += 7) {
                    double r = bias[oc];
                    for (int i = 0; i < KH; i++)
                        for (int j = 0; j < KW; j++) {
                            const int64_t iy = yy + i - 1, ix = xx + j - 1;
                            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                            for (int c = 0; c < C; c++)
                                r += (double)x[((n * H + iy) * W + ix) * C + c] * w[oc * k + (i * KW + j) * C + c];
                        }
                    const double d = y[0][((n * oh + yy) * ow + xx) * O + oc] - r;
                    num += d * d, den += r * r;
                }
    if (!(sqrt(num / den) <= 1e-2)) TH_FAIL_AT("rel-L2 %.3g against f64", sqrt(num / den));
    for (int v = 0; v < 4; v++) free(y[v]);
    free(x), free(w), free(bias), free(panels);
}

/* Rank-4 f32 weights give the same bits as the same data viewed rank 2. */
static void test_rank4_weights(void) {
    const cv_case *c = &cases[1];
    const int64_t k = c->kh * c->kw * (c->c / c->groups);
    int64_t oh, ow, pt, pl;
    resolve(c, &oh, &ow, &pt, &pl);
    float *w = malloc((size_t)(c->o * k) * 4), *x = malloc((size_t)(c->n * c->h * c->w * c->c) * 4);
    float *a = malloc((size_t)(c->n * oh * ow * c->o) * 4), *b = malloc((size_t)(c->n * oh * ow * c->o) * 4);
    for (int64_t i = 0; i < c->o * k; i++) w[i] = th_uniform(&rng, -1, 1);
    for (int64_t i = 0; i < c->n * c->h * c->w * c->c; i++) x[i] = th_uniform(&rng, -1, 1);
    tops_tensor w4 = view4(TOPS_DT_F32, w, c->o, c->kh, c->kw, c->c / c->groups), in = view4(TOPS_DT_F32, x, c->n, c->h, c->w, c->c);
    tops_tensor oa = view4(TOPS_DT_F32, a, c->n, oh, ow, c->o), ob = view4(TOPS_DT_F32, b, c->n, oh, ow, c->o), w2;
    tops_tensor_desc v;
    memset(&v, 0, sizeof v);
    v.format = tops_format_of(TOPS_DT_F32);
    v.rank = 2;
    v.extent[0] = c->o, v.extent[1] = k;
    v.data = w;
    ASSERT_OK(tops_tensor_view(&v, &w2));
    tops_conv2d_desc d = make_desc(c);
    ASSERT_OK(tops_conv2d(NULL, &d, &in, &w2, &oa));
    d.kernel_h = d.kernel_w = 0; /* from the rank-4 weight */
    ASSERT_OK(tops_conv2d(NULL, &d, &in, &w4, &ob));
    ASSERT_TRUE(memcmp(a, b, (size_t)(c->n * oh * ow * c->o) * 4) == 0);
    int64_t shape[4];
    ASSERT_OK(tops_conv2d_output_shape(&d, &in, &w4, shape));
    ASSERT_EQ_INT(shape[1], oh);
    ASSERT_EQ_INT(shape[2], ow);
    char path[256];
    ASSERT_OK(tops_conv2d_path(NULL, &d, &in, &w4, &ob, path, sizeof path));
    ASSERT_TRUE(strstr(path, "implicit GEMM") != NULL);
    free(w), free(x), free(a), free(b);
}

static void test_bad_descriptors(void) {
    float x[2 * 5 * 5 * 4] = {0}, w[6 * 3 * 3 * 4] = {0}, out[2 * 3 * 3 * 6] = {0}, bias[6] = {0};
    tops_tensor in = view4(TOPS_DT_F32, x, 2, 5, 5, 4), w4 = view4(TOPS_DT_F32, w, 6, 3, 3, 4);
    tops_tensor dest = view4(TOPS_DT_F32, out, 2, 3, 3, 6), w2, b1;
    tops_tensor_desc v;
    memset(&v, 0, sizeof v);
    v.format = tops_format_of(TOPS_DT_F32);
    v.rank = 2;
    v.extent[0] = 6, v.extent[1] = 36;
    v.data = w;
    ASSERT_OK(tops_tensor_view(&v, &w2));
    v.rank = 1;
    v.extent[0] = 5;
    v.data = bias;
    ASSERT_OK(tops_tensor_view(&v, &b1));
    tops_conv2d_desc d;
    memset(&d, 0, sizeof d);
    ASSERT_OK(tops_conv2d(NULL, &d, &in, &w4, &dest));
    ASSERT_FAILS_WITH(tops_conv2d(NULL, NULL, &in, &w4, &dest), TOPS_INVALID_ARGUMENT, "desc is NULL");
    d.pad_top = -1;
    ASSERT_FAILS_WITH(tops_conv2d(NULL, &d, &in, &w4, &dest), TOPS_INVALID_ARGUMENT, "pad_top is -1");
    d.pad_top = 0, d.stride_h = -2;
    ASSERT_FAILS_WITH(tops_conv2d(NULL, &d, &in, &w4, &dest), TOPS_INVALID_ARGUMENT, "stride_h");
    d.stride_h = 0, d.same = 1, d.pad_left = 1;
    ASSERT_FAILS_WITH(tops_conv2d(NULL, &d, &in, &w4, &dest), TOPS_INVALID_ARGUMENT, "same");
    d.same = 0, d.pad_left = 0, d.groups = 3;
    ASSERT_FAILS_WITH(tops_conv2d(NULL, &d, &in, &w4, &dest), TOPS_INVALID_ARGUMENT, "must divide");
    d.groups = 0, d.dilation_h = 3; /* 7 rows of kernel over 5 */
    ASSERT_FAILS_WITH(tops_conv2d(NULL, &d, &in, &w4, &dest), TOPS_INVALID_ARGUMENT, "padded input");
    d.dilation_h = 0, d.mode = (tops_matmul_mode)7;
    ASSERT_FAILS_WITH(tops_conv2d(NULL, &d, &in, &w4, &dest), TOPS_INVALID_ARGUMENT, "desc.mode");
    d.mode = TOPS_MULTIPLY;
    ASSERT_FAILS_WITH(tops_conv2d(NULL, &d, &in, &w2, &dest), TOPS_INVALID_ARGUMENT, "kernel_h");
    d.kernel_h = 2, d.kernel_w = 3;
    ASSERT_FAILS_WITH(tops_conv2d(NULL, &d, &in, &w2, &dest), TOPS_SHAPE_MISMATCH, "taps");
    d.kernel_h = 3;
    ASSERT_OK(tops_conv2d(NULL, &d, &in, &w2, &dest));
    d.pad_top = 1; /* OH becomes 4 */
    ASSERT_FAILS_WITH(tops_conv2d(NULL, &d, &in, &w2, &dest), TOPS_SHAPE_MISMATCH, "dest is");
    d.pad_top = 0;
    d.bias = &b1;
    ASSERT_FAILS_WITH(tops_conv2d(NULL, &d, &in, &w2, &dest), TOPS_SHAPE_MISMATCH, "bias");
    d.bias = NULL;
    tops_tensor alias = view4(TOPS_DT_F32, x, 2, 3, 3, 6);
    ASSERT_FAILS_WITH(tops_conv2d(NULL, &d, &in, &w2, &alias), TOPS_INVALID_ARGUMENT, "overlaps input");
    uint16_t h[2 * 5 * 5 * 4] = {0};
    tops_tensor in16 = view4(TOPS_DT_F16, h, 2, 5, 5, 4);
    ASSERT_OK(tops_conv2d(NULL, &d, &in16, &w2, &dest)); /* mixed activation dtypes are fine */
    tops_tensor wq;
    int64_t ext[2] = {6, 36};
    tops_format f;
    ASSERT_OK(tops_format_from_name("int4-g32", &f));
    ASSERT_OK(tops_tensor_create(f, 2, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, &wq));
    tops_tensor dest_q = view4(TOPS_DT_F32, out, 2, 3, 3, 6);
    tops_tensor wq4;
    memset(&v, 0, sizeof v);
    ASSERT_OK(tops_conv2d(NULL, &d, &in, &wq, &dest_q));
    int64_t e4[4] = {6, 3, 3, 4};
    ASSERT_OK(tops_tensor_create(f, 4, e4, (tops_memory){TOPS_DEVICE_CPU, 0}, &wq4));
    d.kernel_h = d.kernel_w = 0;
    ASSERT_FAILS_WITH(tops_conv2d(NULL, &d, &in, &wq4, &dest), TOPS_UNSUPPORTED_FORMAT, "rank-4 weights");
    tops_tensor_destroy(&wq4);
    /* packed weights with groups > 1 */
    tops_matmul2d_desc md;
    memset(&md, 0, sizeof md);
    md.transpose_right = 1;
    tops_tensor pk;
    float w18[6 * 18] = {0};
    memset(&v, 0, sizeof v);
    v.format = tops_format_of(TOPS_DT_F32);
    v.rank = 2;
    v.extent[0] = 6, v.extent[1] = 18;
    v.data = w18;
    tops_tensor wg;
    ASSERT_OK(tops_tensor_view(&v, &wg));
    ASSERT_OK(tops_pack_right(NULL, &md, &wg, &pk));
    d.kernel_h = d.kernel_w = 3, d.groups = 2;
    ASSERT_FAILS_WITH(tops_conv2d(NULL, &d, &in, &pk, &dest), TOPS_UNSUPPORTED_FORMAT, "packed");
    d.groups = 2;
    ASSERT_OK(tops_conv2d(NULL, &d, &in, &wg, &dest));
    tops_tensor_destroy(&pk);
    tops_tensor_destroy(&wq);
    tops_exec ex = tops_exec_default();
    ex.device = (tops_device){TOPS_DEVICE_CUDA, 0};
    /* host tensors with a GPU exec: no GPU here, or refused there (tests/unit/test_cuda_conv2d.c) */
    const tops_status gst = tops_conv2d(&ex, &d, &in, &wg, &dest);
    ASSERT_TRUE(gst == TOPS_UNSUPPORTED_ON_DEVICE || gst == TOPS_INVALID_ARGUMENT);
    ASSERT_TRUE(strstr(tops_last_error(), "cuda") != NULL);
}

/* The relaxed rows kernel (kernels.h: tops__gemm_q8_rows_fn) at every
   level that has one, bit for bit against its contract computed here in
   scalar code: exact i32 dots of the codes (panels hold q + offset, the
   caller's acorr = offset * the activations' block sum), then c = fma(s *
   bscale, ascale, c) per sub-block in order from zero, the old C added at
   the end.  Each offset at its extreme codes (|q| = 8, 15, 128 against
   activations of -127 and 127, the activation quantizer's range) so an i16
   stage that saturated would show. */
static void test_q8_rows_kernel(void) {
    enum { NB = 5, BSTEP = 40, SSTEP = 12, LDC = 37 }; /* SSTEP: scales of the next sub-block 12 floats on */
    static const int offsets[3] = {8, 16, 128}, qmax[3] = {8, 15, 128};
    int8_t act[6][NB * 32];
    uint8_t panel[4][NB * 8 * BSTEP];
    float as_v[6][NB], bs_v[4][NB * SSTEP], c[6 * LDC], want[6 * LDC];
    int32_t corr[6][NB];
    int q[NB * 32][32];
    for (int isa = 0; isa < TOPS_ISA_COUNT_; isa++) {
        const tops__kernels *kern = tops__kernels_for_isa((tops_isa)isa);
        if (!kern || !kern->gemm_q8_rows) continue;
        for (int o = 0; o < 3; o++)
            for (int accumulate = 0; accumulate < 2; accumulate++) {
                const int off = offsets[o], qm = qmax[o];
                for (int i = 0; i < 6; i++)
                    for (int k = 0; k < NB * 32; k++) {
                        const uint64_t r = th_next(&rng) % 8;
                        act[i][k] = (int8_t)(r == 0 ? -127 : r == 1 ? 127 : (int)(th_next(&rng) % 255) - 127);
                    }
                memset(panel, 0xA5, sizeof panel); /* bytes between steps: never read */
                for (int k = 0; k < NB * 32; k++)
                    for (int j = 0; j < 32; j++) {
                        const uint64_t r = th_next(&rng) % 4;
                        int v = r == 0 ? -qm : r == 1 ? (qm == 128 ? 127 : qm) : (int)(th_next(&rng) % (2 * qm)) - qm;
                        q[k][j] = v;
                        panel[j / 8][(k / 32) * 8 * BSTEP + (k % 32 / 4) * BSTEP + (j % 8) * 4 + k % 4] = (uint8_t)(v + off);
                    }
                for (int i = 0; i < 6; i++)
                    for (int b = 0; b < NB; b++) {
                        as_v[i][b] = th_uniform(&rng, 1e-3f, 2e-2f);
                        int32_t sum = 0;
                        for (int k = 0; k < 32; k++) sum += act[i][32 * b + k];
                        corr[i][b] = off * sum;
                    }
                for (int p = 0; p < 4; p++)
                    for (int t = 0; t < NB * SSTEP; t++) bs_v[p][t] = th_uniform(&rng, 1e-3f, 2e-2f);
                for (int t = 0; t < 6 * LDC; t++) c[t] = want[t] = th_uniform(&rng, -1, 1);
                for (int i = 0; i < 6; i++)
                    for (int j = 0; j < 32; j++) {
                        float acc = 0;
                        for (int b = 0; b < NB; b++) {
                            int32_t sum = 0;
                            for (int k = 0; k < 32; k++) sum += act[i][32 * b + k] * q[32 * b + k][j];
                            acc = fmaf((float)sum * bs_v[j / 8][b * SSTEP + j % 8], as_v[i][b], acc);
                        }
                        want[i * LDC + j] = accumulate ? want[i * LDC + j] + acc : acc;
                    }
                const int8_t *a[6];
                const float *as[6], *bs[4];
                const int32_t *ac[6];
                const uint8_t *b[4];
                for (int i = 0; i < 6; i++) a[i] = act[i], as[i] = as_v[i], ac[i] = corr[i];
                for (int p = 0; p < 4; p++) b[p] = panel[p], bs[p] = bs_v[p];
                kern->gemm_q8_rows(NB, a, as, ac, b, BSTEP, bs, SSTEP, c, LDC, accumulate, off);
                if (memcmp(c, want, sizeof c) != 0)
                    TH_FAIL_AT("%s offset %d accumulate %d: the kernel differs from its contract", kern->gemm_q8_rows_name,
                               off, accumulate);
            }
    }
}

int main(void) {
    rng = th_seed();
    RUN_TEST(test_q8_rows_kernel);
    RUN_TEST(test_strict_f32);
    RUN_TEST(test_bias_accumulate_dtypes);
    RUN_TEST(test_quantized);
    RUN_TEST(test_rank4_weights);
    RUN_TEST(test_threaded);
    RUN_TEST(test_winograd);
    RUN_TEST(test_amx_direct);
    RUN_TEST(test_amx_chunks);
    RUN_TEST(test_bad_descriptors);
    TEST_MAIN_END();
}
