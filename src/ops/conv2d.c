/* conv2d: checks every argument, then runs either the depthwise direct
   driver (groups = C = O) or, per group, the matmul2d plan and drivers on
   a gathered left operand (implicit GEMM: M = N * OH * OW, K = KH * KW *
   C / G, N = O / G; drive/conv.c).  With exec.device = cuda:N the checked
   geometry goes to the GPU backend (src/cuda/conv.c).  Nothing is written
   to dest unless every check passed. */
#include "ops/matmul2d.h"
#include "cuda/conv.h"
#include "cuda/cuda_internal.h"
#include "drive/conv.h"
#include "formats/traits.h"
#include "core/numeric.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { DW_MAX_KH = 64 }; /* rows the depthwise driver holds per output row */

static int is_float_format(tops_format_id id) { return tops__format_is_float(id); }

static size_t esize_of(const tops_tensor *t) { return (size_t)((tops_format_get_info(t->format.id)->element_bits + 7) / 8); }

/* Everything the checks derive. */
typedef struct conv_plan {
    tops_exec exec;
    int64_t n, h, w, c, o, kh, kw, oh, ow, k;
    int64_t sh, sw, dh, dw, pt, pb, pl, pr, groups;
    tops_tensor weight2d;  /* rank-2 view of the weights (or the packed tensor) */
    int64_t row_stride;    /* dest's collapsed N * OH * OW stride */
    int depthwise;
    const float *rows_panels; /* the in-place implicit GEMM: prepacked f32 panels, or NULL */
} conv_plan;

static int64_t field(int32_t v, int64_t dflt) { return v == 0 ? dflt : v; }

static tops_status check_desc(const char *fn, const tops_conv2d_desc *d) {
    if (!d) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc is NULL");
    if (d->mode != TOPS_MULTIPLY && d->mode != TOPS_MULTIPLY_ACCUMULATE)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.mode is %d; it must be TOPS_MULTIPLY or TOPS_MULTIPLY_ACCUMULATE",
                          (int)d->mode);
    if ((d->relaxed_precision & ~1) || (d->same & ~1))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.relaxed_precision and desc.same must be 0 or 1 (got %d, %d)",
                          d->relaxed_precision, d->same);
    const struct {
        const char *name;
        int32_t v;
    } f[] = {{"kernel_h", d->kernel_h},     {"kernel_w", d->kernel_w},     {"stride_h", d->stride_h},
             {"stride_w", d->stride_w},     {"dilation_h", d->dilation_h}, {"dilation_w", d->dilation_w},
             {"pad_top", d->pad_top},       {"pad_bottom", d->pad_bottom}, {"pad_left", d->pad_left},
             {"pad_right", d->pad_right},   {"groups", d->groups}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < 0) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.%s is %d; it must be >= 0", f[i].name, (int)f[i].v);
    if (d->same && (d->pad_top || d->pad_bottom || d->pad_left || d->pad_right))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                          "desc.same is 1 and the paddings are %d, %d, %d, %d; \"same\" chooses them, so they must be 0",
                          (int)d->pad_top, (int)d->pad_bottom, (int)d->pad_left, (int)d->pad_right);
    return TOPS_OK;
}

static tops_status check_activation(const char *fn, const char *arg, const tops_tensor *t) {
    char name[48];
    if (t->rank != 4)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "%s has rank %d; conv2d needs rank 4 (NHWC)", arg, t->rank);
    if (!is_float_format(t->format.id))
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "%s has format %s; it must be f32, f16 or bf16", arg,
                          tops_format_name(t->format, name, sizeof name));
    return TOPS_OK;
}

/* The weights as a rank-2 [O, K] tensor (rank 4: a view), KH and KW. */
static tops_status check_weight(const char *fn, const tops_conv2d_desc *d, const tops_tensor *wt, conv_plan *p) {
    char name[48];
    if (wt->rank == 4) {
        if (!is_float_format(wt->format.id))
            return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn,
                              "weight has rank 4 and format %s; rank-4 weights are f32, f16 or bf16 (quantized "
                              "weights are rank 2 [O, KH * KW * C/groups])",
                              tops_format_name(wt->format, name, sizeof name));
        if ((wt->extent[3] > 1 && wt->stride[3] != 1) || (wt->extent[2] > 1 && wt->stride[2] != wt->extent[3]) ||
            (wt->extent[1] > 1 && wt->stride[1] != wt->extent[2] * wt->extent[3]))
            return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                              "weight [O, KH, KW, C/groups] has strides [%lld, %lld, %lld, %lld]; its last three "
                              "dimensions must be contiguous",
                              (long long)wt->stride[0], (long long)wt->stride[1], (long long)wt->stride[2],
                              (long long)wt->stride[3]);
        p->kh = wt->extent[1];
        p->kw = wt->extent[2];
        if ((d->kernel_h && d->kernel_h != p->kh) || (d->kernel_w && d->kernel_w != p->kw))
            return tops__fail(TOPS_SHAPE_MISMATCH, fn, "desc.kernel_h/w are %d x %d but the rank-4 weight is %lld x %lld",
                              (int)d->kernel_h, (int)d->kernel_w, (long long)p->kh, (long long)p->kw);
        tops_tensor_desc v;
        memset(&v, 0, sizeof v);
        v.format = wt->format;
        v.rank = 2;
        v.extent[0] = wt->extent[0];
        v.extent[1] = wt->extent[1] * wt->extent[2] * wt->extent[3];
        v.stride[0] = wt->stride[0] ? wt->stride[0] : v.extent[1];
        v.stride[1] = 1;
        v.data = wt->data;
        v.tensor_scale = wt->tensor_scale;
        v.memory = wt->memory;
        if (tops_tensor_view(&v, &p->weight2d) != TOPS_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", tops_last_error());
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "weight as [O, KH * KW * C/groups]: %s", why);
        }
        p->o = p->weight2d.extent[0];
        p->k = p->weight2d.extent[1];
        return TOPS_OK;
    }
    if (wt->rank != 2)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn,
                          "weight has rank %d; conv2d takes rank 2 [O, KH * KW * C/groups] (any format) or rank 4 "
                          "[O, KH, KW, C/groups] (f32, f16, bf16)",
                          wt->rank);
    if (d->kernel_h < 1 || d->kernel_w < 1)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                          "desc.kernel_h and kernel_w are %d and %d; rank-2 weights need both (>= 1)", (int)d->kernel_h,
                          (int)d->kernel_w);
    tops_status st = TOPS_OK;
    if (tops__cuda_is_packed(wt)) { /* a GPU pack: its logical [N, K] */
        const tops__cuda_packed *pk = (const tops__cuda_packed *)wt->packed_;
        p->k = pk->k, p->o = pk->n;
    } else if (wt->memory.kind == TOPS_DEVICE_CUDA) { /* the GPU matmul checks the format */
        p->k = wt->extent[1], p->o = wt->extent[0];
    } else if ((st = tops__matmul2d_check_right(fn, wt, 1, &p->k, &p->o)) != TOPS_OK) {
        return st;
    }
    p->kh = d->kernel_h;
    p->kw = d->kernel_w;
    p->weight2d = *wt;
    return TOPS_OK;
}

/* Output extent of one axis; 0 when the kernel does not fit. */
static int64_t out_extent(int64_t in, int64_t pad, int64_t k, int64_t s, int64_t dil) {
    const int64_t span = dil * (k - 1) + 1;
    return in + pad < span ? 0 : (in + pad - span) / s + 1;
}

static tops_status check_geometry(const char *fn, const tops_conv2d_desc *d, const tops_tensor *in,
                                  const tops_tensor *wt, conv_plan *p) {
    tops_status st = check_desc(fn, d);
    if (st == TOPS_OK) st = tops__check_tensor(fn, "input", in);
    if (st == TOPS_OK) st = tops__check_tensor(fn, "weight", wt);
    if (st == TOPS_OK) st = check_activation(fn, "input", in);
    if (st == TOPS_OK) st = check_weight(fn, d, wt, p);
    if (st != TOPS_OK) return st;
    p->n = in->extent[0], p->h = in->extent[1], p->w = in->extent[2], p->c = in->extent[3];
    p->sh = field(d->stride_h, 1), p->sw = field(d->stride_w, 1);
    p->dh = field(d->dilation_h, 1), p->dw = field(d->dilation_w, 1);
    p->groups = field(d->groups, 1);
    if (p->c % p->groups || p->o % p->groups)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.groups is %lld, which must divide C = %lld and O = %lld",
                          (long long)p->groups, (long long)p->c, (long long)p->o);
    int64_t want_k = p->kh * p->kw * (p->c / p->groups);
    if (p->k != want_k)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn,
                          "weight rows hold %lld taps but KH * KW * C/groups = %lld * %lld * %lld = %lld",
                          (long long)p->k, (long long)p->kh, (long long)p->kw, (long long)(p->c / p->groups),
                          (long long)want_k);
    if (tops__is_packed(wt) && p->groups > 1 && !(tops__cuda_is_packed(wt) && p->groups == p->c && p->o == p->c))
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn,
                          "weight is packed and desc.groups is %lld; packed weights take groups = 1, or groups = C = O "
                          "(depthwise) for a GPU pack (pass the plain weights)",
                          (long long)p->groups);
    if (d->same) {
        p->oh = tops__ceil_div(p->h, p->sh);
        p->ow = tops__ceil_div(p->w, p->sw);
        int64_t th = (p->oh - 1) * p->sh + p->dh * (p->kh - 1) + 1 - p->h;
        int64_t tw = (p->ow - 1) * p->sw + p->dw * (p->kw - 1) + 1 - p->w;
        th = th < 0 ? 0 : th, tw = tw < 0 ? 0 : tw;
        p->pt = th / 2, p->pb = th - th / 2, p->pl = tw / 2, p->pr = tw - tw / 2;
    } else {
        p->pt = d->pad_top, p->pb = d->pad_bottom, p->pl = d->pad_left, p->pr = d->pad_right;
        p->oh = out_extent(p->h, p->pt + p->pb, p->kh, p->sh, p->dh);
        p->ow = out_extent(p->w, p->pl + p->pr, p->kw, p->sw, p->dw);
        if (p->oh < 1 || p->ow < 1)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                              "the kernel spans %lld x %lld (dilation included) but the padded input is %lld x %lld",
                              (long long)(p->dh * (p->kh - 1) + 1), (long long)(p->dw * (p->kw - 1) + 1),
                              (long long)(p->h + p->pt + p->pb), (long long)(p->w + p->pl + p->pr));
    }
    if (p->pt >= INT32_MAX || p->pl >= INT32_MAX || p->sw >= INT32_MAX / 2)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "the paddings are too large");
    return TOPS_OK;
}

static int ranges_overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return na && nb && pa < pb + nb && pb < pa + na;
}

static size_t plane_span(const tops_plane *pl, int rank) {
    if (!pl->data) return 0;
    size_t esz = (size_t)((tops_dtype_bits(pl->dtype) + 7) / 8), span = esz;
    for (int d = 0; d < rank; d++) span += (size_t)(pl->extent[d] - 1) * (size_t)pl->stride[d] * esz;
    return span;
}

static int tensor_overlaps(const tops_tensor *t, const void *p, size_t n) {
    if (tops__is_packed(t)) return 0; /* library memory */
    size_t span;
    if (tops_tensor_data_span(t, &span) != TOPS_OK) return 1;
    return ranges_overlap(t->data, span, p, n) || ranges_overlap(t->scales.data, plane_span(&t->scales, t->rank), p, n) ||
           ranges_overlap(t->bias.data, plane_span(&t->bias, t->rank), p, n) ||
           ranges_overlap(t->codebook.data, plane_span(&t->codebook, t->rank), p, n);
}

static tops_status check_all(const char *fn, const tops_exec *exec, const tops_conv2d_desc *d, const tops_tensor *in,
                             const tops_tensor *wt, const tops_tensor *dest, conv_plan *p) {
    memset(p, 0, sizeof *p);
    tops_status st = check_geometry(fn, d, in, wt, p);
    if (st == TOPS_OK) st = tops__check_tensor(fn, "dest", dest);
    if (st == TOPS_OK) st = check_activation(fn, "dest", dest);
    if (st != TOPS_OK) return st;
    p->exec = exec ? *exec : tops_exec_default();
    if (tops_exec_validate(&p->exec) != TOPS_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", tops_last_error());
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s", why);
    }
    const int gpu = p->exec.device.kind == TOPS_DEVICE_CUDA;
    if (!gpu) { /* the GPU backend checks its own memory spaces */
        const tops_tensor *all[3] = {in, wt, dest};
        const char *names[3] = {"input", "weight", "dest"};
        for (int i = 0; i < 3; i++)
            if (all[i]->memory.kind != TOPS_DEVICE_CPU)
                return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn,
                                  "%s lives in cuda:%d memory but exec.device is the CPU; set exec.device to cuda:%d",
                                  names[i], all[i]->memory.index, all[i]->memory.index);
    }
    if (dest->tensor_scale != 1.0f)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "dest has tensor_scale %g; conv2d writes plain values, so it must be 1",
                          (double)dest->tensor_scale);
    const int64_t want[4] = {p->n, p->oh, p->ow, p->o};
    for (int i = 0; i < 4; i++)
        if (dest->extent[i] != want[i])
            return tops__fail(TOPS_SHAPE_MISMATCH, fn, "dest is [%lld, %lld, %lld, %lld] but the output is [%lld, %lld, %lld, %lld]",
                              (long long)dest->extent[0], (long long)dest->extent[1], (long long)dest->extent[2],
                              (long long)dest->extent[3], (long long)want[0], (long long)want[1], (long long)want[2],
                              (long long)want[3]);
    /* N, OH, OW must collapse into one row dimension of stride rs. */
    int64_t rs = 0, span = 1;
    for (int i = 2; i >= 0; i--) {
        if (dest->extent[i] == 1) continue;
        if (!rs) rs = dest->stride[i];
        if (dest->stride[i] != rs * span)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                              "dest strides [%lld, %lld, %lld, %lld] do not collapse N, OH, OW into one dimension",
                              (long long)dest->stride[0], (long long)dest->stride[1], (long long)dest->stride[2],
                              (long long)dest->stride[3]);
        span *= dest->extent[i];
    }
    p->row_stride = rs ? rs : p->o * (dest->stride[3] ? dest->stride[3] : 1);
    const int64_t m = p->n * p->oh * p->ow;
    if (m > 1 && p->o > 1 && !(dest->stride[3] >= 1 && p->row_stride >= p->o * dest->stride[3]))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "dest's channel stride %lld and pixel stride %lld make elements overlap",
                          (long long)dest->stride[3], (long long)p->row_stride);
    if (d->bias) {
        const tops_tensor *b = d->bias;
        char name[48];
        if ((st = tops__check_tensor(fn, "desc.bias", b)) != TOPS_OK) return st;
        if (b->rank != 1 || b->extent[0] != p->o)
            return tops__fail(TOPS_SHAPE_MISMATCH, fn, "desc.bias has rank %d and extent %lld; it must be rank 1 [O = %lld]",
                              b->rank, (long long)b->extent[0], (long long)p->o);
        if (!is_float_format(b->format.id))
            return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "desc.bias has format %s; it must be f32, f16 or bf16",
                              tops_format_name(b->format, name, sizeof name));
        if (b->memory.kind != TOPS_DEVICE_CPU && !gpu)
            return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "desc.bias lives in cuda:%d memory but exec.device is the CPU",
                              b->memory.index);
    }
    size_t dspan;
    if ((st = tops_tensor_data_span(dest, &dspan)) != TOPS_OK) return st;
    if (tensor_overlaps(in, dest->data, dspan))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "dest overlaps input in memory; conv2d does not work in place");
    if (tensor_overlaps(wt, dest->data, dspan))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "dest overlaps weight in memory; conv2d does not work in place");
    if (d->bias && tensor_overlaps(d->bias, dest->data, dspan))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "dest overlaps desc.bias in memory");
    p->depthwise = p->groups > 1 && p->groups == p->c && p->o == p->c && (gpu || p->kh <= DW_MAX_KH);
    return TOPS_OK;
}

/* Input rows read in place (no left packing) where the kernel exists, the
   weights are prepacked f32 panels of its width, groups is 1, the input is
   plain f32 with contiguous channels and a tap's channels fill a kernel
   call (C >= 16). */
static const float *rows_panels(const tops__kernels *kern, const conv_plan *p, const tops_tensor *in,
                                const tops_tensor *wt) {
    /* Fewer than 16 channels only on the wide kernel (AVX-512) and where every kernel row lies
       whole inside the input, its taps contiguous (a patch embedding): the kernel then takes a
       row's KW x C in one run.  Zen 4, 2 threads, ViT-B/16's 16x16/16 patches, f32: 1.15-1.16
       against 1.39-1.40 ms on the gathered GEMM (oneDNN 1.04-1.09); AVX2's 6 x 16 kernel on
       48-float runs was slower there (1.33 against 1.10). */
    const int whole_rows = kern->conv_f32_rows && p->dw == 1 && p->pl == 0 && p->pr == 0 &&
                           (p->ow - 1) * p->sw + p->kw <= p->w && p->kw * p->c >= 16 && in->stride[2] == p->c;
    if (!kern->conv_f32_nr || !tops__is_packed(wt) || p->groups != 1 || (p->c < 16 && !whole_rows)) return NULL;
    if (tops__float_of(in) != TOPS_DT_F32 || in->stride[3] != 1 || in->tensor_scale != 1.0f) return NULL;
    const tops__packed_right *pk = wt->packed_;
    return !pk->in_place && pk->panels && pk->nr == kern->conv_f32_nr ? pk->panels : NULL;
}

tops_status tops_conv2d_output_shape(const tops_conv2d_desc *desc, const tops_tensor *input, const tops_tensor *weight,
                                     int64_t out_extent_[4]) {
    static const char fn[] = "tops_conv2d_output_shape";
    if (!out_extent_) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out_extent is NULL");
    conv_plan p;
    memset(&p, 0, sizeof p);
    tops_status st = check_geometry(fn, desc, input, weight, &p);
    if (st != TOPS_OK) return st;
    out_extent_[0] = p.n, out_extent_[1] = p.oh, out_extent_[2] = p.ow, out_extent_[3] = p.o;
    return TOPS_OK;
}

/* dest as [N * OH * OW, count] from channel o0 on. */
static tops_status dest_view(const tops_tensor *dest, const conv_plan *p, int64_t o0, int64_t count, tops_tensor *out) {
    tops_tensor_desc v;
    memset(&v, 0, sizeof v);
    v.format = dest->format;
    v.rank = 2;
    v.extent[0] = p->n * p->oh * p->ow;
    v.extent[1] = count;
    v.stride[0] = v.extent[0] > 1 ? p->row_stride : count;
    v.stride[1] = count > 1 ? dest->stride[3] : 1;
    v.data = (char *)dest->data + (size_t)(o0 * dest->stride[3]) * esize_of(dest);
    return tops_tensor_view(&v, out);
}

static float load_f32(const tops_tensor *t, int64_t i) {
    const tops_dtype dt = tops_format_get_info(t->format.id)->element;
    const int64_t e = i * t->stride[0];
    float v = dt == TOPS_DT_F32   ? ((const float *)t->data)[e]
              : dt == TOPS_DT_F16 ? tops__f16_to_f32(((const uint16_t *)t->data)[e])
                                  : tops__bf16_to_f32(((const uint16_t *)t->data)[e]);
    return v * t->tensor_scale;
}

static tops__conv_geom geometry(const conv_plan *p, const tops_tensor *in, int64_t group) {
    const int64_t cg = p->c / p->groups;
    return (tops__conv_geom){in, p->h, p->w, p->oh, p->ow, p->kh, p->kw, p->sh, p->sw, p->dh, p->dw, p->pt, p->pl,
                             cg, group * cg};
}

static tops_matmul2d_desc matmul_desc(const tops_conv2d_desc *d, int accumulate) {
    tops_matmul2d_desc m;
    memset(&m, 0, sizeof m);
    m.transpose_right = 1;
    m.relaxed_precision = d->relaxed_precision;
    m.mode = accumulate ? TOPS_MULTIPLY_ACCUMULATE : TOPS_MULTIPLY;
    return m;
}

/* src decoded into dst, f32 [rows][cols] (tops_dequantize); a failure
   keeps its status, its sentence prefixed by "decoding <what>". */
static tops_status decode_f32(const char *fn, const tops_tensor *src, int64_t rows, int64_t cols, float *dst,
                              const char *what) {
    tops_tensor_desc v;
    memset(&v, 0, sizeof v);
    v.format = tops_format_of(TOPS_DT_F32);
    v.rank = 2;
    v.extent[0] = rows;
    v.extent[1] = cols;
    v.data = dst;
    tops_tensor view;
    tops_status st;
    if ((st = tops_tensor_view(&v, &view)) != TOPS_OK || (st = tops_dequantize(src, &view)) != TOPS_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", tops_last_error());
        return tops__fail(st, fn, "decoding %s: %s", what, why);
    }
    return TOPS_OK;
}

/* The depthwise weights as taps [KH * KW][C] in f32, and the bias in f32. */
static tops_status depthwise_weights(const char *fn, const conv_plan *p, const tops_conv2d_desc *d, float **taps,
                                     float **bias) {
    const int64_t t = p->kh * p->kw, c = p->c;
    float *dec = malloc((size_t)(t * c) * sizeof(float)), *w = malloc((size_t)(t * c) * sizeof(float));
    float *b = d->bias ? malloc((size_t)c * sizeof(float)) : NULL;
    tops_status st = TOPS_OK;
    if (!dec || !w || (d->bias && !b)) {
        st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the depthwise weights");
        goto fail;
    }
    if ((st = decode_f32(fn, &p->weight2d, c, t, dec, "the depthwise weights")) != TOPS_OK) goto fail;
    for (int64_t ch = 0; ch < c; ch++)
        for (int64_t i = 0; i < t; i++) w[i * c + ch] = dec[ch * t + i];
    for (int64_t ch = 0; b && ch < c; ch++) b[ch] = load_f32(d->bias, ch);
    free(dec);
    *taps = w;
    *bias = b;
    return TOPS_OK;
fail:
    free(dec);
    free(w);
    free(b);
    return st;
}

/* The relaxed rows path: the level's kernel, groups 1, C % 32 == 0, and
   weights packed relaxed with the 8-column integer panels over sub-blocks
   of 32. */
static const tops__packed_right *q8_rows_weights(const tops__kernels *kern, const conv_plan *p,
                                                 const tops_conv2d_desc *d, const tops_tensor *wt) {
    if (!d->relaxed_precision || !kern->gemm_q8_rows || !tops__is_packed(wt) || p->groups != 1 ||
        p->c % 32 != 0)
        return NULL;
    const tops__packed_right *pk = wt->packed_;
    return pk->in_place && pk->q8_panels && !pk->q8_amx && !pk->q8_mins && tops__unpack_sub(&pk->copy) == 32 ? pk : NULL;
}

/* TOPS_CPU_CONV: 0 unset or empty, 1 "winograd", 2 "direct"; any other
   value fails the call with a sentence. */
static tops_status conv_forced(const char *fn, int *forced) {
    const char *env = getenv("TOPS_CPU_CONV");
    *forced = 0;
    if (!env || !*env) return TOPS_OK;
    if (strcmp(env, "winograd") == 0) *forced = 1;
    else if (strcmp(env, "direct") == 0) *forced = 2;
    else return tops__fail(TOPS_INVALID_ARGUMENT, fn, "TOPS_CPU_CONV is \"%s\"; it must be winograd, direct or empty", env);
    return TOPS_OK;
}

/* Winograd F(2x2, 3x3) (drive/conv_wino.c) for relaxed calls: 3x3, stride
   1, dilation 1, groups 1, any padding, any weight format (decoded to f32
   and transformed, 16 products per 2 x 2 outputs and channel pair instead
   of 36).  Strict calls never take it: its transforms round on their own.
   The one place that decides; see wino_worth for where it is faster. */
static int wino_shape(const tops__kernels *kern, const conv_plan *p, const tops_conv2d_desc *d) {
    return d->relaxed_precision && kern->wino_f23_in && kern->wino_f23_out && p->groups == 1 && p->kh == 3 &&
           p->kw == 3 && p->sh == 1 && p->sw == 1 && p->dh == 1 && p->dw == 1 && !tops__cuda_is_packed(&p->weight2d);
}

/* Where Winograd is faster than the other paths (measured on the 2-core
   Zen 2 VM, bench/results/zen2.md; docs/conv2d.md).  Packed weights are
   transformed once and kept, so only the GEMMs' shape counts: from 32
   tiles (2 x 2 outputs) a call.  Below that (ResNet res5 at batch 1: 7 x 7
   outputs, 16 tiles, 23% of them padding) the 16 MB of transformed f32
   weights streamed per call cost more than the multiplies saved, and the
   relaxed 4-bit rows kernel reading 1.2 MB wins.  Plain weights are
   decoded and transformed per call (about 60 ns per (output, input)
   channel pair on one core: 16 ms for res5's weights, 0.4 ns of GEMM per
   pair and tile), so only from 512 tiles.  TOPS_CPU_CONV=winograd takes
   it wherever the shape allows, =direct never (tests, measurements).
   rows4: the weights are packed for the relaxed rows kernel with codes of
   at most 4 bits (int4-g32: 1.5x the f32 rows path's speed); where a
   quarter of the tiles' outputs or more fall outside the image (7 x 7:
   49 of 64) Winograd saves 2.25 x 49 / 64 = 1.7x of the multiplies and
   that kernel is as fast or faster (res5 at batch 32: 52.5 against 56.6
   ms on one core, 27.0 against 26.5 on two), so it keeps those.
   rows_win: the weights are packed for a rows kernel that beats Winograd
   at any code width (kern->gemm_q8_rows_over_wino: VNNI), which keeps
   them all.  amx: the direct path runs on the AMX tiles (integer forms at
   the amx level), which beat Winograd's f32 GEMMs from 256 input
   channels (Xeon VM, 2 threads, int8-g32 / int4-g32 packed, ms direct vs
   Winograd: res4 batch 1 0.49 vs 0.57, batch 32 16.6 vs 16.3; res5 batch
   32 12.3 vs 31.2; but res3 batch 32 22.8 vs 17.2, res2 39.8 vs 28.5). */
static tops_status wino_worth(const char *fn, const conv_plan *p, int rows4, int rows_win, int amx, int *take) {
    const int64_t tiles = p->n * tops__ceil_div(p->oh, 2) * tops__ceil_div(p->ow, 2);
    const double used = (double)(p->n * p->oh * p->ow) / (4.0 * (double)tiles);
    *take = tiles >= (tops__is_packed(&p->weight2d) ? 32 : 512) && !(rows4 && used < 0.85) && !rows_win &&
            !(amx && p->c >= 256);
    int forced;
    const tops_status st = conv_forced(fn, &forced);
    if (forced) *take = forced == 1;
    return st;
}

/* The weights as f32 rows [O][K] (any format, packed or not), malloc'd. */
static tops_status weight_rows(const char *fn, const conv_plan *p, float **out) {
    const int64_t k = p->k, o = p->o;
    float *w = tops__aligned_alloc((size_t)(o * k) * sizeof(float));
    if (!w) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the f32 weights");
    const tops_tensor *src = &p->weight2d;
    if (tops__is_packed(src)) {
        const tops__packed_right *pk = src->packed_;
        if (pk->in_place) src = &pk->copy;
        else { /* f32 panels [ceil(o / nr)][k][nr] */
            const int64_t nr = pk->nr;
            for (int64_t r = 0; r < o; r++)
                for (int64_t kk = 0; kk < k; kk++) w[r * k + kk] = pk->panels[(r / nr) * k * nr + kk * nr + r % nr];
            *out = w;
            return TOPS_OK;
        }
    }
    const tops_status st = decode_f32(fn, src, o, k, w, "the weights");
    if (st != TOPS_OK) {
        tops__aligned_free(w);
        return st;
    }
    *out = w;
    return TOPS_OK;
}

/* The transformed weights for panels of nr columns, malloc'd (*out). */
static tops_status wino_transform(const char *fn, const conv_plan *p, int nr, void **out) {
    float *w = NULL;
    tops_status st = weight_rows(fn, p, &w);
    if (st != TOPS_OK) return st;
    float *u = tops__aligned_alloc((size_t)tops__wino_u_floats(nr, p->c, p->o) * sizeof(float));
    *out = u;
    if (!u) st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the transformed weights");
    else tops__wino_weights(w, p->k, p->c, p->o, nr, u, p->exec.threads);
    tops__aligned_free(w);
    return st;
}

static pthread_once_t cache_release_once = PTHREAD_ONCE_INIT;
static void cache_register_release(void) { (void)tops__tensor_set_release(TOPS_DEVICE_CPU, tops__conv_cache_release); }

/* A CPU pack's prepared weights (Winograd's transform for panels of nr
   columns, or with nr = 0 the AMX direct path's bf16 panels): made by the
   first call and kept on the pack (tops__packed_right.conv_cache,
   published by compare-and-swap, so concurrent first calls keep one),
   then read in place: preparing them costs about as much as the whole
   convolution at batch 1 (res5: 2.4 M weights in, 4.2 M floats out for
   Winograd).  NULL where the weights are not a CPU pack or were kept for
   another use (another panel width or path): then each call makes them. */
static const void *cached_weights(const char *fn, const conv_plan *p, int nr,
                                  tops_status (*make)(const char *, const conv_plan *, int, void **), tops_status *st) {
    *st = TOPS_OK;
    if (!tops__is_packed(&p->weight2d)) return NULL;
    tops__packed_right *pk = (tops__packed_right *)p->weight2d.packed_;
    tops__conv_cache *wc = atomic_load(&pk->conv_cache);
    if (!wc) {
        pthread_once(&cache_release_once, cache_register_release);
        tops__conv_cache *mine = malloc(sizeof *mine);
        if (!mine) {
            *st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the prepared weights' header");
            return NULL;
        }
        *mine = (tops__conv_cache){nr, p->c, p->o, p->k, NULL};
        if ((*st = make(fn, p, nr, &mine->u)) != TOPS_OK) {
            free(mine);
            return NULL;
        }
        void *expected = NULL; /* the field is _Atomic(void *) */
        if (atomic_compare_exchange_strong(&pk->conv_cache, &expected, (void *)mine)) wc = mine;
        else { /* another call got there first */
            tops__aligned_free(mine->u);
            free(mine);
            wc = expected;
        }
    }
    return wc->nr == nr && wc->c == p->c && wc->o == p->o && wc->k == p->k ? wc->u : NULL;
}

/* The AMX direct path's bf16 panels, malloc'd (*out; nr unused). */
static tops_status amx_panels(const char *fn, const conv_plan *p, int nr, void **out) {
    (void)nr;
    float *w = NULL;
    tops_status st = weight_rows(fn, p, &w);
    if (st != TOPS_OK) return st;
    const int64_t taps = p->kh * p->kw;
    uint16_t *panels = tops__aligned_alloc((size_t)tops__conv_amx_weight_elems(taps, p->c, p->o) * sizeof(uint16_t));
    *out = panels;
    if (!panels) st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the bf16 weight panels");
    else tops__conv_amx_weights(w, p->k, taps, p->c, p->o, panels);
    tops__aligned_free(w);
    return st;
}

/* The drivers that take prepared weights, in one shape. */
typedef tops_status (*prepared_driver)(const char *fn, const tops__kernels *kern, const tops__conv_geom *g,
                                       int64_t batch, const void *weights, int64_t o, const float *bias,
                                       tops_tensor *dest2d, int accumulate, int threads);
static tops_status wino_driver(const char *fn, const tops__kernels *kern, const tops__conv_geom *g, int64_t batch,
                               const void *weights, int64_t o, const float *bias, tops_tensor *dest2d, int accumulate,
                               int threads) {
    return tops__conv_wino_run(fn, kern, g, batch, weights, o, bias, dest2d, accumulate, threads);
}
static tops_status amx_driver(const char *fn, const tops__kernels *kern, const tops__conv_geom *g, int64_t batch,
                              const void *weights, int64_t o, const float *bias, tops_tensor *dest2d, int accumulate,
                              int threads) {
    return tops__conv_amx_run(fn, kern, g, batch, weights, o, bias, dest2d, accumulate, threads,
                              TOPS__CONV_AMX_IMAGE_BUDGET);
}

/* Runs a path on prepared weights (Winograd's, or the AMX panels with nr
   = 0) on checked arguments: the weights kept on a pack, else made for
   this call, the bias in f32, then the driver. */
static tops_status prepared_run(const char *fn, const tops__kernels *kern, const conv_plan *p,
                                const tops_conv2d_desc *d, const tops_tensor *in, tops_tensor *full, int accumulate,
                                int nr, tops_status (*make)(const char *, const conv_plan *, int, void **),
                                prepared_driver driver) {
    void *own = NULL;
    float *bias = NULL;
    tops_status st;
    const void *u = cached_weights(fn, p, nr, make, &st);
    if (st != TOPS_OK) return st;
    if (!u && (st = make(fn, p, nr, &own)) != TOPS_OK) return st;
    if (!u) u = own;
    bias = d->bias ? malloc((size_t)p->o * sizeof(float)) : NULL;
    if (d->bias && !bias) {
        st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the bias");
        goto done;
    }
    for (int64_t o = 0; bias && o < p->o; o++) bias[o] = load_f32(d->bias, o);
    tops__conv_geom geo = geometry(p, in, 0);
    st = driver(fn, kern, &geo, p->n, u, p->o, bias, full, accumulate, p->exec.threads);
done:
    tops__aligned_free(own);
    free(bias);
    return st;
}

/* Weights whose every value is one bf16 exactly (bf16 itself, or one-term
   integer forms: code and scale bits <= 8, no tensor factor, such as
   mxfp4), so that with bf16 input the AMX direct path's single product a
   step is the strict one: every product exact, f32 sums. */
static int bf16_exact_weights(const tops__kernels *kern, const tops_tensor *w) {
    if (tops__is_packed(w)) {
        const tops__packed_right *pk = w->packed_;
        if (!pk->in_place) return pk->source.id == TOPS_FMT_BF16; /* f32 panels of bf16 values */
        w = &pk->copy;
    }
    float factor = 0.0f;
    return w->format.id == TOPS_FMT_BF16 || (tops__amx_one_term(kern, w, &factor) && factor == 1.0f);
}

/* Direct conv2d on the AMX tiles (drive/conv_amx.c): relaxed calls, and
   strict ones whose products are exact on the tiles (bf16 input without
   a tensor scale, weights exact in bf16: bf16 x bf16 strict at batch 32
   res3 7.0 ms against the gathered GEMM's 29.7); groups 1, at least 32
   channels with at most a quarter of their 32-channel steps padding,
   output rows of 14 pixels or more (a row tile is 16 pixels of one row:
   res5's 7 leave too many empty; the gathered GEMM takes those).  Xeon
   VM, 2 threads, int8-g32 / int4-g32 packed, against oneDNN f32 in the
   same runs: res2 / res3 / res4 at batch 1 2.2-2.4x / 2.8-2.9x /
   3.7-3.8x, batch 32 1.9x / 3.9-4.1x / 3.6-3.7x, where Winograd and the
   gathered GEMM ran 1.3-1.4x / 1.4x / 1.9-2.0x.  TOPS_CPU_CONV=winograd
   keeps Winograd where its shape allows. */
static tops_status amx_direct(const char *fn, const tops__kernels *kern, const conv_plan *p,
                              const tops_conv2d_desc *d, const tops_tensor *in, int *take) {
    *take = 0;
    if (!kern->conv_amx) return TOPS_OK;
    if (!d->relaxed_precision &&
        (tops_format_get_info(in->format.id)->element != TOPS_DT_BF16 || in->tensor_scale != 1.0f ||
         !bf16_exact_weights(kern, &p->weight2d)))
        return TOPS_OK;
    int forced;
    const tops_status st = conv_forced(fn, &forced);
    if (st != TOPS_OK) return st;
    const int64_t cp = tops__conv_amx_cpad(p->c);
    const tops__conv_geom g = geometry(p, NULL, 0);
    *take = p->groups == 1 && !p->depthwise && p->c >= 32 && p->ow >= 14 && 4 * (cp - p->c) <= cp &&
            tops__conv_amx_image_bytes(&g) <= TOPS__CONV_AMX_IMAGE_BUDGET && !(forced == 1 && wino_shape(kern, p, d));
    return TOPS_OK;
}

static tops_status conv_run_cuda(const conv_plan *p, const tops_conv2d_desc *d, const tops_tensor *in,
                                 tops_tensor *dest, char *path, size_t cap) {
    const tops__cuda_conv_geom g = {p->n,  p->h,  p->w,  p->c,  p->o,  p->kh, p->kw,     p->oh,
                                    p->ow, p->k,  p->sh, p->sw, p->dh, p->dw, p->pt,     p->pl,
                                    p->groups,    p->row_stride,            p->depthwise};
    return tops__cuda_conv2d(&p->exec, &g, d, in, &p->weight2d, dest, path, cap);
}

/* Runs (path NULL) or names (path) the checked call. */
static tops_status conv_run(const char *fn, const tops__kernels *kern, const conv_plan *p,
                            const tops_conv2d_desc *d, const tops_tensor *in, tops_tensor *dest, char *path,
                            size_t cap) {
    if (p->exec.device.kind == TOPS_DEVICE_CUDA) return conv_run_cuda(p, d, in, dest, path, cap);
    const int accumulate = d->mode == TOPS_MULTIPLY_ACCUMULATE;
    tops_tensor full;
    tops_status st = dest_view(dest, p, 0, p->o, &full);
    if (st != TOPS_OK) return st;
    if (p->depthwise) {
        if (path) {
            snprintf(path, cap, "depthwise direct (%lldx%lld taps, channels in vectors): %s (%s)", (long long)p->kh,
                     (long long)p->kw, kern->conv_dw_name, tops_isa_name(kern->isa));
            return TOPS_OK;
        }
        float *taps = NULL, *bias = NULL;
        if ((st = depthwise_weights(fn, p, d, &taps, &bias)) != TOPS_OK) return st;
        tops__conv_geom g = geometry(p, in, 0);
        g.cg = p->c;
        st = tops__conv_dw_run(fn, kern, &g, p->n, taps, bias, &full, accumulate, p->exec.threads);
        free(taps);
        free(bias);
        return st;
    }
    int direct_amx;
    if ((st = amx_direct(fn, kern, p, d, in, &direct_amx)) != TOPS_OK) return st;
    if (direct_amx) {
        if (path) {
            snprintf(path, cap, "direct on the AMX tiles (%s, a padded bf16 image): %s (%s)",
                     d->relaxed_precision ? "relaxed: input and weights rounded once to bf16"
                                          : "strict: bf16 input, weights exact in bf16, products exact",
                     kern->conv_amx_name, tops_isa_name(kern->isa));
            return TOPS_OK;
        }
        return prepared_run(fn, kern, p, d, in, &full, accumulate, 0, amx_panels, amx_driver);
    }
    int wino = 0;
    if (wino_shape(kern, p, d)) {
        const tops__packed_right *q = q8_rows_weights(kern, p, d, &p->weight2d);
        const int rows4 = q && tops_format_bits_per_weight(q->copy.format, p->k) <= 6.0;
        const tops_tensor *w = &p->weight2d;
        const tops__packed_right *pk = tops__is_packed(w) ? w->packed_ : NULL;
        const int amx = pk ? pk->in_place && pk->q8_amx != 0 : tops__gemm_amx_supports(kern, w, 1);
        if ((st = wino_worth(fn, p, rows4, q && kern->gemm_q8_rows_over_wino, amx, &wino)) != TOPS_OK) return st;
    }
    if (wino) {
        if (path) {
            snprintf(path, cap,
                     "Winograd F(2x2, 3x3), 16 f32 GEMMs (relaxed; weights decoded and transformed %s): %s (%s)",
                     tops__is_packed(&p->weight2d) ? "once, kept on the pack" : "per call", kern->gemm_f32.name, tops_isa_name(kern->isa));
            return TOPS_OK;
        }
        return prepared_run(fn, kern, p, d, in, &full, accumulate, kern->gemm_f32.nr, wino_transform, wino_driver);
    }
    const int64_t og = p->o / p->groups, m = p->n * p->oh * p->ow;
    const float *panels = rows_panels(kern, p, in, &p->weight2d);
    const tops__packed_right *q8 = q8_rows_weights(kern, p, d, &p->weight2d);
    if (q8 && path) {
        snprintf(path, cap, "implicit GEMM, input quantized once, rows read in place (prepacked relaxed weights): %s (%s)",
                 kern->gemm_q8_rows_name, tops_isa_name(kern->isa));
        return TOPS_OK;
    }
    if (panels && path) {
        snprintf(path, cap, "implicit GEMM, input rows read in place (prepacked f32 weights): %s (%s)",
                 tops__conv_rows_kernel(kern), tops_isa_name(kern->isa));
        return TOPS_OK;
    }
    if (path) {
        tops__conv_geom g = geometry(p, in, 0);
        tops__gemm_operand left = {0};
        left.gather = tops__conv_gather;
        left.gather_ctx = &g;
        tops_tensor dg;
        if ((st = dest_view(dest, p, 0, og, &dg)) != TOPS_OK) return st;
        int len = snprintf(path, cap, "implicit GEMM (im2col rows gathered into the left panels%s): ",
                           p->groups > 1 ? ", per group" : "");
        if (len < 0 || (size_t)len >= cap) return TOPS_OK;
        tops_matmul2d_desc md = matmul_desc(d, accumulate);
        tops_tensor wg = p->weight2d;
        if (p->groups > 1) {
            int64_t start[2] = {0, 0}, stop[2] = {og, p->k};
            if ((st = tops_tensor_slice(&p->weight2d, start, stop, &wg)) != TOPS_OK) return st;
        }
        return tops__matmul2d_gathered(fn, kern, &p->exec, &md, &left, m, &wg, &dg, path + len, cap - (size_t)len);
    }
    int acc = accumulate;
    if (d->bias) { /* dest = bias (or += bias), then the sums accumulate into it */
        float *b = malloc((size_t)p->o * sizeof(float));
        if (!b) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the bias");
        for (int64_t o = 0; o < p->o; o++) b[o] = load_f32(d->bias, o);
        tops__store_rect(kern, &full, 0, m, 0, p->o, b, 0, accumulate);
        free(b);
        acc = 1;
    }
    if (q8) {
        tops__conv_geom geo = geometry(p, in, 0);
        int offset;
        tops__gemm_q8_pick(kern, &q8->copy, &offset);
        return tops__conv_q8_rows_run(fn, kern, &geo, p->n, q8->q8_panels, q8->q8_scales, offset, p->o, &full, acc,
                                      p->exec.threads);
    }
    if (panels) {
        tops__conv_geom geo = geometry(p, in, 0);
        return tops__conv_rows_run(fn, kern, &geo, p->n, panels, p->o, &full, acc, p->exec.threads);
    }
    const tops_matmul2d_desc md = matmul_desc(d, acc);
    for (int64_t g = 0; g < p->groups; g++) {
        tops__conv_geom geo = geometry(p, in, g);
        tops__gemm_operand left = {0};
        left.gather = tops__conv_gather;
        left.gather_ctx = &geo;
        tops_tensor dg, wg = p->weight2d;
        if ((st = dest_view(dest, p, g * og, og, &dg)) != TOPS_OK) return st;
        if (p->groups > 1) {
            int64_t start[2] = {g * og, 0}, stop[2] = {(g + 1) * og, p->k};
            if ((st = tops_tensor_slice(&p->weight2d, start, stop, &wg)) != TOPS_OK) return st;
        }
        if ((st = tops__matmul2d_gathered(fn, kern, &p->exec, &md, &left, m, &wg, &dg, NULL, 0)) != TOPS_OK) return st;
    }
    return TOPS_OK;
}

tops_status tops__conv2d_with(const tops__kernels *kern, const tops_exec *exec, const tops_conv2d_desc *desc,
                              const tops_tensor *input, const tops_tensor *weight, tops_tensor *dest) {
    static const char fn[] = "tops_conv2d";
    conv_plan p;
    tops_status st = check_all(fn, exec, desc, input, weight, dest, &p);
    if (st != TOPS_OK) return st;
    return conv_run(fn, kern, &p, desc, input, dest, NULL, 0);
}

tops_status tops_conv2d(const tops_exec *exec, const tops_conv2d_desc *desc, const tops_tensor *input,
                        const tops_tensor *weight, tops_tensor *dest) {
    const tops__kernels *kern;
    tops_status st = tops__kernels_checked("tops_conv2d", &kern);
    if (st != TOPS_OK) return st;
    return tops__conv2d_with(kern, exec, desc, input, weight, dest);
}

tops_status tops_conv2d_path(const tops_exec *exec, const tops_conv2d_desc *desc, const tops_tensor *input,
                             const tops_tensor *weight, const tops_tensor *dest, char *buf, size_t cap) {
    static const char fn[] = "tops_conv2d_path";
    if (!buf || cap == 0) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "buf is NULL or cap is 0");
    const tops__kernels *kern;
    tops_status st = tops__kernels_checked(fn, &kern);
    if (st != TOPS_OK) return st;
    conv_plan p;
    if ((st = check_all(fn, exec, desc, input, weight, dest, &p)) != TOPS_OK) return st;
    return conv_run(fn, kern, &p, desc, input, (tops_tensor *)dest, buf, cap);
}
