/* `tensorops bench --op conv2d` on the CPU: real layer shapes (ResNet-50's
   3x3 stage layers, a ViT-B/16 patch embedding, MobileNetV2 depthwise 3x3),
   ours in each weight format against oneDNN's f32 convolution primitive
   timed in the same run on the same NHWC input and weights.  Each case is
   checked against f64 on a few output pixels (every channel). */
#include "bench.h"

#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct conv_layer {
    const char *name;
    int64_t h, w, c, o, k, stride, pad, groups;
    int batched; /* run at every --conv-batch (else at batch 1 only) */
} conv_layer;

static const conv_layer layers[] = {
    {"resnet50-res2-3x3", 56, 56, 64, 64, 3, 1, 1, 1, 1},
    {"resnet50-res3-3x3", 28, 28, 128, 128, 3, 1, 1, 1, 1},
    {"resnet50-res4-3x3", 14, 14, 256, 256, 3, 1, 1, 1, 1},
    {"resnet50-res5-3x3", 7, 7, 512, 512, 3, 1, 1, 1, 1},
    {"vit-b16-patch", 224, 224, 3, 768, 16, 16, 0, 1, 0},
    {"mobilenetv2-dw-s1", 56, 56, 144, 144, 3, 1, 1, 144, 0},
    {"mobilenetv2-dw-s2", 112, 112, 96, 96, 3, 2, 1, 96, 0},
};
enum { NLAYERS = sizeof layers / sizeof layers[0] };

const char tops_bench_conv_usage[] =
    "  --layers LIST      layers to run (default all): resnet50-res2-3x3 .. resnet50-res5-3x3 (56x56x64 ..\n"
    "                     7x7x512, 3x3 pad 1), vit-b16-patch (224x224x3 -> 768, 16x16 stride 16),\n"
    "                     mobilenetv2-dw-s1 (56x56x144) and -dw-s2 (112x112x96, stride 2), depthwise 3x3\n"
    "  --conv-batch LIST  batches of the ResNet layers (default 1,32, the issue's suite: about a\n"
    "                     minute on 2 cores; 1 for a quick run); the other layers run at batch 1\n"
    "  --format LIST      weight formats (default f32; with --relaxed f32,int8-g32,int4-g32)\n"
    "Input and output are NHWC f32; oneDNN's f32 convolution runs on the same NHWC tensors with its\n"
    "weights reordered once into the layout it picks; speedup = oneDNN median / ours.\n";

typedef struct conv_opts {
    int layer_on[NLAYERS];
    int any_layer;
    int64_t batch[TOPS_BENCH_MAX_LIST];
    int nbatch;
} conv_opts;

static conv_opts g_opts;

int tops_bench_conv_parse(tops_bench_config *cfg, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (strcmp(a, "--layers") != 0 && strcmp(a, "--conv-batch") != 0) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "tensorops bench: %s needs a value\n", a);
        return -1;
    }
    char buf[512];
    snprintf(buf, sizeof buf, "%s", argv[++*i]);
    char *save = NULL;
    if (strcmp(a, "--layers") == 0) {
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            int found = 0;
            for (int l = 0; l < NLAYERS; l++)
                if (strcmp(layers[l].name, t) == 0) g_opts.layer_on[l] = found = 1;
            if (!found) {
                fprintf(stderr, "tensorops bench: --layers: no layer \"%s\"\n", t);
                return -1;
            }
            g_opts.any_layer = 1;
        }
    } else {
        g_opts.nbatch = 0;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            char *end;
            long long v = strtoll(t, &end, 10);
            if (*end || v < 1 || v > 4096 || g_opts.nbatch == TOPS_BENCH_MAX_LIST) {
                fprintf(stderr, "tensorops bench: --conv-batch \"%s\": expected integers in 1..4096\n", t);
                return -1;
            }
            g_opts.batch[g_opts.nbatch++] = v;
        }
    }
    cfg->op_options = &g_opts;
    return 1;
}

tops_status tops_bench_conv_prepare(tops_bench_config *cfg) {
    static const char fn[] = "tensorops bench";
    if (cfg->nm || cfg->k || cfg->n)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "--op conv2d takes --layers and --conv-batch, not --m, --k or --n");
    if (cfg->nformats == 0) {
        const char *def[3] = {"f32", "int8-g32", "int4-g32"};
        for (int i = 0; i < (cfg->relaxed ? 3 : 1); i++) snprintf(cfg->formats[cfg->nformats++], 32, "%s", def[i]);
    }
    for (int i = 0; i < cfg->nformats; i++) {
        tops_format f;
        if (tops_format_from_name(cfg->formats[i], &f) != TOPS_OK || tops_format_resolve(f, &f) != TOPS_OK)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "--format: %s", tops_last_error());
        if (f.id == TOPS_FMT_PACKED)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "--format: \"packed\" is made by the bench, not chosen");
    }
    if (g_opts.nbatch == 0) g_opts.batch[g_opts.nbatch++] = 1, g_opts.batch[g_opts.nbatch++] = 32;
    if (!g_opts.any_layer)
        for (int l = 0; l < NLAYERS; l++) g_opts.layer_on[l] = 1;
    return TOPS_OK;
}

int tops_bench_conv_cases(tops_bench_conv_shape *out, const char **names, int max) {
    int n = 0;
    for (int l = 0; l < NLAYERS; l++) {
        if (!g_opts.layer_on[l]) continue;
        const conv_layer *L = &layers[l];
        for (int bi = 0; bi < (L->batched ? g_opts.nbatch : 1) && n < max; bi++, n++) {
            tops_bench_conv_shape sh = {L->batched ? g_opts.batch[bi] : 1, L->h, L->w, L->c, L->o, L->k, L->k, 0, 0,
                                        L->stride, L->stride, 1, 1, L->pad, L->pad, L->pad, L->pad, L->groups};
            sh.oh = (sh.h + 2 * L->pad - L->k) / L->stride + 1;
            sh.ow = (sh.w + 2 * L->pad - L->k) / L->stride + 1;
            out[n] = sh;
            names[n] = L->name;
        }
    }
    return n;
}

void tops_bench_conv_reference(const tops_bench_conv_shape *s, const float *x, const float *w, const int64_t *rows,
                               int nrows, double *ref) {
    const int64_t cg = s->c / s->groups, og = s->o / s->groups;
    for (int r = 0; r < nrows; r++) {
        const int64_t m = rows[r], n = m / (s->oh * s->ow), y = m / s->ow % s->oh, xx = m % s->ow;
        for (int64_t o = 0; o < s->o; o++) {
            double acc = 0;
            const int64_t c0 = o / og * cg;
            for (int64_t i = 0; i < s->kh; i++)
                for (int64_t j = 0; j < s->kw; j++) {
                    const int64_t ih = y * s->sh - s->pt + i * s->dh, iw = xx * s->sw - s->pl + j * s->dw;
                    if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w) continue;
                    const float *xp = x + ((n * s->h + ih) * s->w + iw) * s->c + c0;
                    const float *wp = w + ((o * s->kh + i) * s->kw + j) * cg;
                    for (int64_t ch = 0; ch < cg; ch++) acc += (double)xp[ch] * wp[ch];
                }
            ref[r * s->o + o] = acc;
        }
    }
}

typedef struct conv_call {
    const tops_exec *exec;
    const tops_conv2d_desc *desc;
    const tops_tensor *in, *w;
    tops_tensor *out;
} conv_call;

static tops_status call_ours(void *ctx, int it) {
    (void)it;
    conv_call *c = ctx;
    return tops_conv2d(c->exec, c->desc, c->in, c->w, c->out);
}

static tops_status view(tops_dtype dt, void *data, int rank, const int64_t *ext, tops_tensor *out) {
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = tops_format_of(dt);
    d.rank = rank;
    for (int i = 0; i < rank; i++) d.extent[i] = ext[i];
    d.data = data;
    return tops_tensor_view(&d, out);
}

/* One format on one shape: its weights (quantized, packed where groups is
   1), the call, and its row as far as the check fills it. */
typedef struct fmt_case {
    const char *name;
    tops_format f;
    tops_tensor q, packed, in, dest;
    int have_q, have_packed, ready;
    tops_exec exec;
    tops_conv2d_desc d;
    conv_call call;
    double pack_s;
    tops_bench_row row;
    tops_bench_alt alt;
} fmt_case;

static void fmt_free(fmt_case *fc) {
    if (fc->have_packed) tops_tensor_destroy(&fc->packed);
    if (fc->have_q) tops_tensor_destroy(&fc->q);
    fc->have_packed = fc->have_q = 0;
}

/* Quantize, pack, run once on a NaN-poisoned output and check it. */
static tops_status fmt_prepare(tops_bench_session *s, const tops_bench_conv_shape *sh, const char *layer,
                               const char *fname, const float *x, const float *wf, float *out, const int64_t *check,
                               int nchk, double *ref, fmt_case *fc) {
    const tops_bench_config *cfg = s->cfg;
    static const char fn[] = "tensorops bench";
    const int64_t k = sh->kh * sh->kw * (sh->c / sh->groups), m = sh->n * sh->oh * sh->ow;
    fc->name = fname;
    tops_status st = tops_format_from_name(fname, &fc->f);
    if (st != TOPS_OK) return st;
    tops_tensor src;
    float *dec = tops__aligned_alloc((size_t)(sh->o * k) * sizeof(float)), *checked = malloc((size_t)nchk * (size_t)sh->o * sizeof(float));
    if (!dec || !checked) {
        st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the %s weights", fname);
        goto done;
    }
    int64_t wext[2] = {sh->o, k}, iext[4] = {sh->n, sh->h, sh->w, sh->c}, oext[4] = {sh->n, sh->oh, sh->ow, sh->o};
    if ((st = view(TOPS_DT_F32, (void *)wf, 2, wext, &src)) != TOPS_OK) goto done;
    if ((st = tops_tensor_create(fc->f, 2, wext, (tops_memory){TOPS_DEVICE_CPU, 0}, &fc->q)) != TOPS_OK) goto done;
    fc->have_q = 1;
    if ((st = tops_quantize(&src, &fc->q, NULL)) != TOPS_OK) goto done;
    tops_tensor dv;
    if ((st = view(TOPS_DT_F32, dec, 2, wext, &dv)) != TOPS_OK || (st = tops_dequantize(&fc->q, &dv)) != TOPS_OK) goto done;
    tops_bench_conv_reference(sh, x, dec, check, nchk, ref);
    fc->exec = tops_exec_default();
    fc->exec.threads = cfg->threads;
    tops_conv2d_desc *d = &fc->d;
    memset(d, 0, sizeof *d);
    d->kernel_h = (int32_t)sh->kh, d->kernel_w = (int32_t)sh->kw;
    d->stride_h = (int32_t)sh->sh, d->stride_w = (int32_t)sh->sw;
    d->pad_top = (int32_t)sh->pt, d->pad_bottom = (int32_t)sh->pb, d->pad_left = (int32_t)sh->pl, d->pad_right = (int32_t)sh->pr;
    d->groups = (int32_t)sh->groups;
    d->relaxed_precision = cfg->relaxed;
    d->mode = TOPS_MULTIPLY;
    if (sh->groups == 1) { /* packed once, as a model loader would */
        tops_matmul2d_desc md;
        memset(&md, 0, sizeof md);
        md.transpose_right = 1;
        md.relaxed_precision = cfg->relaxed;
        double t0 = tops_bench_now();
        fc->have_packed = tops_pack_right(&fc->exec, &md, &fc->q, &fc->packed) == TOPS_OK;
        fc->pack_s = fc->have_packed ? tops_bench_now() - t0 : 0;
    }
    if ((st = view(TOPS_DT_F32, (void *)x, 4, iext, &fc->in)) != TOPS_OK ||
        (st = view(TOPS_DT_F32, out, 4, oext, &fc->dest)) != TOPS_OK)
        goto done;
    fc->call = (conv_call){&fc->exec, &fc->d, &fc->in, fc->have_packed ? &fc->packed : &fc->q, &fc->dest};
    for (int64_t i = 0; i < m * sh->o; i++) out[i] = NAN;
    tops_bench_progress(s, "%s b%lld %s: checking against f64", layer, (long long)sh->n, fname);
    if ((st = call_ours(&fc->call, 0)) != TOPS_OK) goto done;
    for (int r = 0; r < nchk; r++) memcpy(checked + r * sh->o, out + check[r] * sh->o, (size_t)sh->o * sizeof(float));
    tops_bench_row *row = &fc->row;
    memset(row, 0, sizeof *row);
    tops_bench_compare(ref, checked, (int64_t)nchk * sh->o, &row->rel_l2, &row->cos_sim, NULL);
    char path[256];
    if ((st = tops_conv2d_path(&fc->exec, d, &fc->in, fc->call.w, &fc->dest, path, sizeof path)) != TOPS_OK) goto done;
    if (snprintf(row->path, sizeof row->path, "%s b%lld: %s", layer, (long long)sh->n, path) >= (int)sizeof row->path)
        row->path[sizeof row->path - 1] = 0; /* cut: the table's path column */
    fc->alt = (tops_bench_alt){call_ours, &fc->call, 0, 0};
    fc->ready = 1;
done:
    tops__aligned_free(dec);
    free(checked);
    return st;
}

/* The row of a timed format. */
static tops_status fmt_finish(tops_bench_session *s, const tops_bench_conv_shape *sh, const char *layer,
                              fmt_case *fc, const tops_bench_row *base, tops_bench_rows *rows, int *bad) {
    const tops_bench_config *cfg = s->cfg;
    const int64_t k = sh->kh * sh->kw * (sh->c / sh->groups), m = sh->n * sh->oh * sh->ow;
    const tops_bench_roofline *roof;
    tops_status st = tops_bench_session_roofline(s, &roof);
    if (st != TOPS_OK) return st;
    tops_bench_row *row = &fc->row;
    snprintf(row->op, sizeof row->op, "conv2d");
    snprintf(row->format, sizeof row->format, "%s", fc->name);
    row->m = m, row->k = k, row->n = sh->o;
    row->threads = cfg->threads;
    tops_cpu_info ci;
    tops_cpu_get_info(&ci);
    snprintf(row->isa, sizeof row->isa, "%s", tops_isa_name(ci.isa));
    row->median_s = fc->alt.median_s;
    row->min_s = fc->alt.min_s;
    row->pack_s = fc->pack_s;
    snprintf(row->baseline, sizeof row->baseline, "%s", base->median_s > 0 ? "onednn-conv-f32" : "none");
    row->baseline_median_s = base->median_s;
    const tops_format_id id = fc->f.id;
    const int quantized = id != TOPS_FMT_F32 && id != TOPS_FMT_F16 && id != TOPS_FMT_BF16;
    /* --relaxed runs every format relaxed (f32 too: bf16 AMX terms on the gathered path), as the
       matmul bench holds all its rows to the relaxed bound then */
    row->rel_l2_bound = cfg->relaxed ? 1e-2 : 1e-5;
    row->accuracy_ok = row->rel_l2 <= row->rel_l2_bound;
    if (!row->accuracy_ok) {
        fprintf(stderr, "tensorops bench: %s %s: rel-L2 %.3g over the bound %.3g\n", layer, fc->name, row->rel_l2,
                row->rel_l2_bound);
        (*bad)++;
    }
    const double wbytes = tops_format_bits_per_weight(fc->f, k) * (double)sh->o * (double)k / 8.0;
    const double min_bytes = wbytes + 4.0 * (double)(sh->n * sh->h * sh->w * sh->c) + 4.0 * (double)(m * sh->o);
    const double peak = cfg->relaxed && quantized && roof->int8_gops > roof->fma_gflops ? roof->int8_gops : roof->fma_gflops;
    tops_bench_row_derive(row, 2.0 * (double)m * (double)sh->o * (double)k, wbytes, min_bytes, peak, roof->read_gbps);
    (void)ci;
    return tops_bench_rows_push(rows, row);
}

tops_status tops_bench_conv_cpu(tops_bench_session *s, tops_bench_rows *rows) {
    static const char fn[] = "tensorops bench";
    const tops_bench_config *cfg = s->cfg;
    const tops_bench_roofline *roof;
    tops_status st = tops_bench_session_roofline(s, &roof);
    if (st != TOPS_OK) return st;
    int ncases = 0, bad = 0, failed = 0;
    for (int l = 0; l < NLAYERS; l++)
        if (g_opts.layer_on[l]) ncases += layers[l].batched ? g_opts.nbatch : 1;
    s->case_count = ncases;
    s->case_index = 0;
    tops_bench_rows dnn = {0};
    for (int l = 0; l < NLAYERS; l++) {
        if (!g_opts.layer_on[l]) continue;
        const conv_layer *L = &layers[l];
        for (int bi = 0; bi < (L->batched ? g_opts.nbatch : 1); bi++) {
            s->case_index++;
            tops_bench_conv_shape sh = {L->batched ? g_opts.batch[bi] : 1, L->h, L->w, L->c, L->o, L->k, L->k, 0, 0,
                                        L->stride, L->stride, 1, 1, L->pad, L->pad, L->pad, L->pad, L->groups};
            sh.oh = (sh.h + 2 * L->pad - L->k) / L->stride + 1;
            sh.ow = (sh.w + 2 * L->pad - L->k) / L->stride + 1;
            const int64_t k = sh.kh * sh.kw * (sh.c / sh.groups), m = sh.n * sh.oh * sh.ow;
            const int64_t nin = sh.n * sh.h * sh.w * sh.c;
            float *x = tops__aligned_alloc((size_t)nin * sizeof(float));
            float *w = tops__aligned_alloc((size_t)(sh.o * k) * sizeof(float));
            float *out = tops__aligned_alloc((size_t)(m * sh.o) * sizeof(float));
            double *ref = malloc((size_t)TOPS_BENCH_CHECK_ROWS * (size_t)sh.o * sizeof(double));
            if (!x || !w || !out || !ref) {
                st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for %s at batch %lld", L->name, (long long)sh.n);
                tops__aligned_free(x), tops__aligned_free(w), tops__aligned_free(out), free(ref);
                break;
            }
            tops_bench_progress(s, "%s b%lld: generating data", L->name, (long long)sh.n);
            tops_bench_fill_normal(x, nin, 7 + (uint64_t)l);
            tops_bench_fill_normal(w, sh.o * k, 70 + (uint64_t)l);
            int64_t check[TOPS_BENCH_CHECK_ROWS];
            const int nchk = tops_bench_check_rows(m, check);
            /* ours in each format: weights, a checked first call */
            fmt_case *fcs = calloc((size_t)cfg->nformats, sizeof *fcs);
            tops_bench_alt *alts = calloc((size_t)cfg->nformats, sizeof *alts);
            int *idx = calloc((size_t)cfg->nformats, sizeof *idx), nready = 0;
            if (!fcs || !alts || !idx) st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the cases");
            for (int f = 0; st == TOPS_OK && f < cfg->nformats; f++) {
                tops_status fs = fmt_prepare(s, &sh, L->name, cfg->formats[f], x, w, out, check, nchk, ref, &fcs[f]);
                if (fs != TOPS_OK) {
                    tops_bench_progress(s, NULL);
                    fprintf(stderr, "tensorops bench: %s %s failed: %s\n", L->name, cfg->formats[f], tops_last_error());
                    failed++;
                    continue;
                }
                alts[nready] = fcs[f].alt;
                idx[nready++] = f;
            }
            /* oneDNN on the f32 weights, timed in alternation with ours */
            tops_bench_row base;
            memset(&base, 0, sizeof base);
            if (st == TOPS_OK) {
                tops_bench_conv_reference(&sh, x, w, check, nchk, ref);
                tops_bench_progress(s, "%s b%lld: timing oneDNN f32 and ours in alternation", L->name, (long long)sh.n);
                st = tops_bench_onednn_conv(s, &sh, x, w, check, nchk, ref, &base, alts, nready);
            }
            if (st == TOPS_OK && base.median_s > 0) {
                char p[sizeof base.path + 64];
                if (snprintf(p, sizeof p, "%s b%lld: %s", L->name, (long long)sh.n, base.path) < 0) p[0] = 0;
                memcpy(base.path, p, sizeof base.path - 1);
                base.path[sizeof base.path - 1] = 0;
                if (!base.accuracy_ok) bad++;
                double flops = 2.0 * (double)m * (double)sh.o * (double)k;
                tops_bench_row_derive(&base, flops, 4.0 * (double)(sh.o * k),
                                      4.0 * (double)(sh.o * k + nin + m * sh.o), roof->fma_gflops, roof->read_gbps);
                st = tops_bench_rows_push(&dnn, &base);
            }
            if (st == TOPS_OK && nready > 0 && alts[0].median_s == 0) { /* no oneDNN: ours alone */
                tops_bench_progress(s, "%s b%lld: timing ours", L->name, (long long)sh.n);
                st = tops_bench_time_alternating(alts, nready, 2, cfg->repeat, cfg->min_seconds);
            }
            for (int i = 0; st == TOPS_OK && i < nready; i++) {
                fcs[idx[i]].alt = alts[i];
                st = fmt_finish(s, &sh, L->name, &fcs[idx[i]], &base, rows, &bad);
            }
            for (int f = 0; fcs && f < cfg->nformats; f++) fmt_free(&fcs[f]);
            free(fcs), free(alts), free(idx);
            tops__aligned_free(x), tops__aligned_free(w), tops__aligned_free(out), free(ref);
            if (st != TOPS_OK) break;
        }
        if (st != TOPS_OK) break;
    }
    for (size_t i = 0; i < dnn.n && st == TOPS_OK; i++) st = tops_bench_rows_push(rows, &dnn.v[i]);
    tops_bench_rows_free(&dnn);
    tops_bench_progress(s, NULL);
    if (st == TOPS_OK && (failed || bad))
        st = tops__fail(TOPS_INTERNAL, fn, "%d conv2d case(s) failed to run and %d missed their accuracy bound", failed, bad);
    return st;
}
