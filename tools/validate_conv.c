/* The conv2d rows of tensorops validate: tops_conv2d on random data
   against an f64 direct convolution of the decoded weights, over ragged
   shapes (odd sizes, stride 2 with dilation 2, groups 2, depthwise, 1x1,
   7x7) and weight formats, strict and relaxed; with --device cuda the rows
   that run there (16-bit activations), on that GPU. */
#include "cli.h"

#include "bench.h"
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct conv_row {
    const char *name, *format;
    tops_dtype act, dest;
    int relaxed;
    int where; /* 1: CPU, 2: GPU, 3: both */
} conv_row;

static const conv_row rows[] = {
    {"C-f32", "f32", TOPS_DT_F32, TOPS_DT_F32, 0, 1},
    {"C-f16", "f16", TOPS_DT_F16, TOPS_DT_F16, 0, 3},
    {"C-bf16", "bf16", TOPS_DT_BF16, TOPS_DT_F32, 0, 2},
    {"C-int8-g32", "int8-g32", TOPS_DT_F16, TOPS_DT_F32, 0, 3},
    {"C-int4-g128", "int4-g128", TOPS_DT_BF16, TOPS_DT_F32, 0, 2},
    {"C-mxfp4", "mxfp4", TOPS_DT_F32, TOPS_DT_F32, 0, 1},
    {"C-R-int8-g32", "int8-g32", TOPS_DT_F32, TOPS_DT_F32, 1, 1},
    {"C-R-int4-g32", "int4-g32", TOPS_DT_F32, TOPS_DT_F32, 1, 1},
};

typedef struct conv_shape {
    const char *name;
    int64_t n, h, w, c, o, kh, kw, sh, sw, dh, dw, pt, pb, pl, pr, groups;
    int same, full_only;
} conv_shape;

static const conv_shape shapes[] = {
    {"3x3 odd", 1, 13, 11, 7, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0},
    {"3x3 s2 d2", 2, 17, 15, 6, 10, 3, 3, 2, 2, 2, 2, 2, 1, 2, 0, 1, 0, 0},
    {"3x3 g2", 1, 12, 9, 8, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 0, 0},
    {"dw 3x3 s2 same", 2, 15, 13, 24, 24, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 24, 1, 0},
    {"1x1", 2, 7, 9, 33, 31, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0},
    {"7x7 s2", 1, 23, 21, 3, 16, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1, 0, 0},
    {"resnet50-res3 b1", 1, 28, 28, 128, 128, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1},
};

int tops_validate_conv_knows(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (strlen(rows[i].name) == len && strncmp(rows[i].name, name, len) == 0) return 1;
    return 0;
}

static tops_status view(tops_dtype dt, void *data, int rank, const int64_t *ext, tops_tensor *out) {
    return tops_validate_view_on(dt, data, rank, ext, (tops_memory){TOPS_DEVICE_CPU, 0}, out);
}

tops_status tops_validate_view_on(tops_dtype dt, void *data, int rank, const int64_t *ext, tops_memory mem,
                                  tops_tensor *out) {
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = tops_format_of(dt);
    d.rank = rank;
    for (int i = 0; i < rank; i++) d.extent[i] = ext[i];
    d.data = data;
    d.memory = mem;
    return tops_tensor_view(&d, out);
}

/* One row at one shape; errors go into res->error. */
static void run(tops_device dev, const conv_row *r, const conv_shape *s, uint64_t seed, tops_validate_row *res,
                char *path, size_t path_cap, char *error, size_t error_cap) {
    tops_conv2d_desc d;
    memset(&d, 0, sizeof d);
    d.kernel_h = (int32_t)s->kh, d.kernel_w = (int32_t)s->kw;
    d.stride_h = (int32_t)s->sh, d.stride_w = (int32_t)s->sw, d.dilation_h = (int32_t)s->dh, d.dilation_w = (int32_t)s->dw;
    d.same = s->same;
    d.pad_top = (int32_t)s->pt, d.pad_bottom = (int32_t)s->pb, d.pad_left = (int32_t)s->pl, d.pad_right = (int32_t)s->pr;
    d.groups = (int32_t)s->groups;
    d.relaxed_precision = r->relaxed;
    d.mode = TOPS_MULTIPLY;
    const int64_t cg = s->c / s->groups, og = s->o / s->groups, k = s->kh * s->kw * cg, nin = s->n * s->h * s->w * s->c;
    const size_t ab = (size_t)tops_dtype_bits(r->act) / 8, db = (size_t)tops_dtype_bits(r->dest) / 8;
    float *x = malloc((size_t)nin * 4), *xf = malloc((size_t)nin * 4), *w = malloc((size_t)(s->o * k) * 4);
    float *dec = malloc((size_t)(s->o * k) * 4), *yf = NULL;
    void *xa = malloc((size_t)nin * ab), *y = NULL, *dx = NULL, *dy = NULL;
    const int gpu = dev.kind == TOPS_DEVICE_CUDA;
    const tops_memory dmem = {dev.kind, dev.index}, host = {TOPS_DEVICE_CPU, 0};
    tops_exec ex = tops_exec_default();
    ex.device = dev;
    double *ref = NULL;
    tops_tensor wq, wf, wd, in, out;
    int have_wq = 0;
    tops_status st = TOPS_OK;
    tops_format f;
    int64_t ext2[2] = {s->o, k}, ext4[4] = {s->n, s->h, s->w, s->c}, oext[4];
#define TRY(call)                                                                                                      \
    do {                                                                                                               \
        if ((st = (call)) != TOPS_OK) {                                                                                \
            snprintf(error, error_cap, "%s", tops_last_error());                                                       \
            goto done;                                                                                                 \
        }                                                                                                              \
    } while (0)
    if (!x || !xf || !w || !dec || !xa) TRY(tops__fail(TOPS_OUT_OF_MEMORY, "tensorops validate", "no memory"));
    tops_bench_fill_normal(x, nin, seed);
    tops_bench_fill_normal(w, s->o * k, seed + 1);
    TRY(tops_format_from_name(r->format, &f));
    TRY(view(TOPS_DT_F32, w, 2, ext2, &wf));
    TRY(tops_tensor_create(f, 2, ext2, (tops_memory){TOPS_DEVICE_CPU, 0}, &wq));
    have_wq = 1;
    TRY(tops_quantize(&wf, &wq, NULL));
    TRY(view(TOPS_DT_F32, dec, 2, ext2, &wd));
    TRY(tops_dequantize(&wq, &wd));
    tops_quant_error_stats qe;
    TRY(tops_quant_error(w, dec, s->o * k, &qe));
    res->snr_db = qe.snr_db;
    TRY(tops_cast_from_f32(r->act, xa, x, nin, 1));
    TRY(tops_cast_to_f32(r->act, xf, xa, nin));
    if (gpu) {
        TRY(tops_cuda_alloc(dev.index, (size_t)nin * ab, &dx));
        TRY(tops_cuda_copy(dx, dmem, xa, host, (size_t)nin * ab, NULL));
    }
    TRY(tops_validate_view_on(r->act, gpu ? dx : xa, 4, ext4, gpu ? dmem : host, &in));
    TRY(tops_conv2d_output_shape(&d, &in, &wq, oext));
    const int64_t oh = oext[1], ow = oext[2], nout = s->n * oh * ow * s->o;
    y = malloc((size_t)nout * db);
    yf = malloc((size_t)nout * 4);
    ref = malloc((size_t)nout * sizeof(double));
    if (!y || !yf || !ref) TRY(tops__fail(TOPS_OUT_OF_MEMORY, "tensorops validate", "no memory"));
    for (int64_t i = 0; i < nout; i++) yf[i] = NAN; /* an unwritten element shows */
    TRY(tops_cast_from_f32(r->dest, y, yf, nout, 0));
    if (gpu) {
        TRY(tops_cuda_alloc(dev.index, (size_t)nout * db, &dy));
        TRY(tops_cuda_copy(dy, dmem, y, host, (size_t)nout * db, NULL));
    }
    TRY(tops_validate_view_on(r->dest, gpu ? dy : y, 4, oext, gpu ? dmem : host, &out));
    char p[200];
    TRY(tops_conv2d_path(&ex, &d, &in, &wq, &out, p, sizeof p));
    snprintf(path, path_cap, "%s: %s", s->name, p);
    TRY(tops_conv2d(&ex, &d, &in, &wq, &out));
    if (gpu) {
        TRY(tops_cuda_synchronize(&ex));
        TRY(tops_cuda_copy(y, host, dy, dmem, (size_t)nout * db, NULL));
    }
    TRY(tops_cast_to_f32(r->dest, yf, y, nout));
    int64_t pt = s->pt, pl = s->pl;
    if (s->same) {
        int64_t th = (oh - 1) * s->sh + s->dh * (s->kh - 1) + 1 - s->h, tw = (ow - 1) * s->sw + s->dw * (s->kw - 1) + 1 - s->w;
        pt = th > 0 ? th / 2 : 0, pl = tw > 0 ? tw / 2 : 0;
    }
    for (int64_t n = 0; n < s->n; n++)
        for (int64_t yy = 0; yy < oh; yy++)
            for (int64_t xx = 0; xx < ow; xx++)
                for (int64_t o = 0; o < s->o; o++) {
                    double acc = 0;
                    const int64_t c0 = o / og * cg;
                    for (int64_t i = 0; i < s->kh; i++)
                        for (int64_t j = 0; j < s->kw; j++) {
                            const int64_t ih = yy * s->sh - pt + i * s->dh, iw = xx * s->sw - pl + j * s->dw;
                            if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w) continue;
                            for (int64_t ch = 0; ch < cg; ch++)
                                acc += (double)xf[((n * s->h + ih) * s->w + iw) * s->c + c0 + ch] *
                                       dec[((o * s->kh + i) * s->kw + j) * cg + ch];
                        }
                    ref[((n * oh + yy) * ow + xx) * s->o + o] = acc;
                }
    tops_bench_compare(ref, yf, nout, &res->rel_l2, &res->cos_sim, &res->max_abs);
    res->m = s->n * oh * ow, res->k = k, res->n = s->o;
    res->pass = res->rel_l2 <= res->bound;
done:
#undef TRY
    if (have_wq) tops_tensor_destroy(&wq);
    if (dx) (void)tops_cuda_free(dev.index, dx);
    if (dy) (void)tops_cuda_free(dev.index, dy);
    free(x), free(xf), free(w), free(dec), free(xa), free(y), free(yf), free(ref);
}

int tops_validate_conv(int quick, int json, const char *only, int *first) {
    return tops_validate_conv_on((tops_device){TOPS_DEVICE_CPU, 0}, quick, json, only, first);
}

int tops_validate_conv_on(tops_device dev, int quick, int json, const char *only, int *first) {
    int failures = 0;
    const int where = dev.kind == TOPS_DEVICE_CUDA ? 2 : 1;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const conv_shape *s = &shapes[si];
        if (quick && s->full_only) continue;
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            const conv_row *r = &rows[ri];
            if (!(r->where & where) || (only && !tops_validate_in_list(only, r->name))) continue;
            char path[256] = "", error[320] = "";
            tops_validate_row res;
            memset(&res, 0, sizeof res);
            res.name = r->name;
            res.format = r->format;
            res.left = r->act;
            res.dest = r->dest;
            res.relaxed = r->relaxed;
            res.bound = tops_validate_bound(r->dest, r->relaxed);
            run(dev, r, s, 20261202 + si * 16 + ri, &res, path, sizeof path, error, sizeof error);
            res.path = path;
            res.error = error;
            if (error[0]) res.pass = 0;
            if (!res.pass) failures++;
            tops_validate_print_row(&res, json, first);
        }
    }
    return failures;
}
