/* `tensorops bench --op conv2d --device cuda`: tops_conv2d on cuda:N over
   the conv suite's layers (bench_conv.c: ResNet-50 3x3 stage layers at each
   --conv-batch, a ViT patch embedding, MobileNetV2 depthwise 3x3) against
   cuDNN's f16 convolution (NHWC input, output and KRSC filter, f32 compute,
   tensor-op math; of the algorithms cudnnFindConvolutionForwardAlgorithm
   reports working, the fastest by our own timing: cudnn_pick) in the same
   run on the same input and weights.  Ours per
   --format: f16 / bf16 weights on the device (the activations take the
   weights' type; other formats f16 activations), the quantized formats
   packed once for the GPU (groups 1, and depthwise).  Both write 16-bit
   output; each is checked against f64 on a few output pixels (every
   channel) first, then
   timed in alternation as CUDA graph replays between events.
   cuDNN is loaded at run time (dlopen of libcudnn.so.9, or the path in
   TOPS_CUDNN_LIB), so the CLI starts without it and says why its rows are
   absent; the header is needed at build time only for its types. */
#include "bench.h"

#ifdef TOPS_HAVE_CUDA

#include "core/numeric.h"
#include "internal.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<cudnn.h>)
#include <cudnn.h>
#define TOPS_BENCH_HAVE_CUDNN 1
#endif
#endif

#define REPLAYS 7
#define MAX_CASES 32
static const char fn[] = "tensorops bench --op conv2d --device cuda";

#define CU(call, what)                                                                                            \
    do {                                                                                                          \
        cudaError_t e_ = (call);                                                                                  \
        if (e_ != cudaSuccess) return tops__fail(TOPS_DEVICE_ERROR, fn, "%s: %s", what, cudaGetErrorString(e_)); \
    } while (0)

tops_status tops_bench_conv_cuda_prepare(tops_bench_config *cfg) {
    const char *def[3] = {"f16", "bf16", "int4-g128"};
    if (cfg->nformats == 0)
        for (int i = 0; i < 3; i++) snprintf(cfg->formats[cfg->nformats++], 32, "%s", def[i]);
    return tops_bench_conv_prepare(cfg);
}

/* ---- cuDNN, loaded at run time -------------------------------------------- */

#ifdef TOPS_BENCH_HAVE_CUDNN
typedef struct cudnn_api {
    void *lib;
    __typeof__(&cudnnCreate) create;
    __typeof__(&cudnnDestroy) destroy;
    __typeof__(&cudnnSetStream) set_stream;
    __typeof__(&cudnnGetVersion) version;
    __typeof__(&cudnnCreateTensorDescriptor) create_tensor;
    __typeof__(&cudnnSetTensor4dDescriptor) set_tensor;
    __typeof__(&cudnnDestroyTensorDescriptor) destroy_tensor;
    __typeof__(&cudnnCreateFilterDescriptor) create_filter;
    __typeof__(&cudnnSetFilter4dDescriptor) set_filter;
    __typeof__(&cudnnDestroyFilterDescriptor) destroy_filter;
    __typeof__(&cudnnCreateConvolutionDescriptor) create_conv;
    __typeof__(&cudnnSetConvolution2dDescriptor) set_conv;
    __typeof__(&cudnnSetConvolutionGroupCount) set_groups;
    __typeof__(&cudnnSetConvolutionMathType) set_math;
    __typeof__(&cudnnDestroyConvolutionDescriptor) destroy_conv;
    __typeof__(&cudnnFindConvolutionForwardAlgorithm) find;
    __typeof__(&cudnnGetConvolutionForwardWorkspaceSize) workspace;
    __typeof__(&cudnnConvolutionForward) forward;
    cudnnHandle_t h;
} cudnn_api;

static char g_cudnn_note[256];

static int cudnn_open(cudnn_api *a, cudaStream_t stream) {
    memset(a, 0, sizeof *a);
    const char *env = getenv("TOPS_CUDNN_LIB");
    a->lib = dlopen(env && *env ? env : "libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!a->lib) {
        snprintf(g_cudnn_note, sizeof g_cudnn_note, "cuDNN not loaded (%s)", dlerror());
        return 0;
    }
#define SYM(field, name)                                                                          \
    do {                                                                                          \
        *(void **)&a->field = dlsym(a->lib, #name);                                               \
        if (!a->field) {                                                                          \
            snprintf(g_cudnn_note, sizeof g_cudnn_note, "cuDNN has no %s", #name);                \
            return 0;                                                                             \
        }                                                                                         \
    } while (0)
    SYM(create, cudnnCreate);
    SYM(destroy, cudnnDestroy);
    SYM(set_stream, cudnnSetStream);
    SYM(version, cudnnGetVersion);
    SYM(create_tensor, cudnnCreateTensorDescriptor);
    SYM(set_tensor, cudnnSetTensor4dDescriptor);
    SYM(destroy_tensor, cudnnDestroyTensorDescriptor);
    SYM(create_filter, cudnnCreateFilterDescriptor);
    SYM(set_filter, cudnnSetFilter4dDescriptor);
    SYM(destroy_filter, cudnnDestroyFilterDescriptor);
    SYM(create_conv, cudnnCreateConvolutionDescriptor);
    SYM(set_conv, cudnnSetConvolution2dDescriptor);
    SYM(set_groups, cudnnSetConvolutionGroupCount);
    SYM(set_math, cudnnSetConvolutionMathType);
    SYM(destroy_conv, cudnnDestroyConvolutionDescriptor);
    SYM(find, cudnnFindConvolutionForwardAlgorithm);
    SYM(workspace, cudnnGetConvolutionForwardWorkspaceSize);
    SYM(forward, cudnnConvolutionForward);
#undef SYM
    if (a->create(&a->h) != CUDNN_STATUS_SUCCESS || a->set_stream(a->h, stream) != CUDNN_STATUS_SUCCESS) {
        snprintf(g_cudnn_note, sizeof g_cudnn_note, "cudnnCreate failed");
        return 0;
    }
    return 1;
}

typedef struct cudnn_conv {
    cudnn_api *api;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t algo;
    cudnnConvolutionFwdAlgo_t cand[8]; /* cudnnFind's working algorithms, fastest first */
    int ncand;
    void *ws;
    size_t ws_bytes;
    const void *dx, *dw;
    void *dy;
} cudnn_conv;

static int cudnn_setup(cudnn_api *a, const tops_bench_conv_shape *s, cudnn_conv *c) {
    memset(c, 0, sizeof *c);
    c->api = a;
    if (a->create_tensor(&c->x) || a->create_tensor(&c->y) || a->create_filter(&c->w) || a->create_conv(&c->conv))
        return 0;
    if (a->set_tensor(c->x, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, (int)s->n, (int)s->c, (int)s->h, (int)s->w) ||
        a->set_tensor(c->y, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, (int)s->n, (int)s->o, (int)s->oh, (int)s->ow) ||
        a->set_filter(c->w, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, (int)s->o, (int)(s->c / s->groups), (int)s->kh, (int)s->kw) ||
        a->set_conv(c->conv, (int)s->pt, (int)s->pl, (int)s->sh, (int)s->sw, (int)s->dh, (int)s->dw,
                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ||
        a->set_groups(c->conv, (int)s->groups) || a->set_math(c->conv, CUDNN_TENSOR_OP_MATH))
        return 0;
    struct cudnnConvolutionFwdAlgoPerfStruct perf[8];
    int got = 0;
    if (a->find(a->h, c->x, c->w, c->conv, c->y, 8, &got, perf) || got < 1) return 0;
    size_t most = 0;
    for (int i = 0; i < got && i < 8; i++) {
        size_t b = 0;
        if (perf[i].status != CUDNN_STATUS_SUCCESS || a->workspace(a->h, c->x, c->w, c->conv, c->y, perf[i].algo, &b))
            continue;
        c->cand[c->ncand++] = perf[i].algo;
        if (b > most) most = b;
    }
    if (c->ncand < 1) return 0;
    c->algo = c->cand[0];
    c->ws_bytes = most;
    if (most && cudaMalloc(&c->ws, most) != cudaSuccess) return 0;
    return 1;
}

/* cudnnFind times each algorithm once, and on a layer's first search (the
   clocks still rising) it has picked one 16x slower than the best (H100,
   ResNet-50 res2 at batch 1: algo 0 77.7 us against algo 1 4.9 us, by run).
   So the baseline is the fastest of its working candidates by the median of
   seven timed calls after two untimed ones, the operands in place. */
static cudnnStatus_t cudnn_run(cudnn_conv *c, cudnnConvolutionFwdAlgo_t algo) {
    const float one = 1.0f, zero = 0.0f;
    return c->api->forward(c->api->h, &one, c->x, c->dx, c->w, c->dw, c->conv, algo, c->ws, c->ws_bytes, &zero, c->y,
                           c->dy);
}

static int cudnn_pick(cudnn_conv *c, cudaStream_t stream) {
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) != cudaSuccess) return 0;
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return 0;
    }
    double best = 0.0;
    int ok = 0;
    for (int i = 0; i < c->ncand; i++) {
        double t[7];
        int good = cudnn_run(c, c->cand[i]) == CUDNN_STATUS_SUCCESS && cudnn_run(c, c->cand[i]) == CUDNN_STATUS_SUCCESS;
        for (int r = 0; r < 7 && good; r++) {
            float ms = 0.0f;
            good = cudaEventRecord(e0, stream) == cudaSuccess && cudnn_run(c, c->cand[i]) == CUDNN_STATUS_SUCCESS &&
                   cudaEventRecord(e1, stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
                   cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
            t[r] = ms;
        }
        if (!good) {
            (void)cudaGetLastError();
            continue;
        }
        const double med = tops_bench_median(t, 7);
        if (!ok || med < best) best = med, c->algo = c->cand[i], ok = 1;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ok;
}

static void cudnn_teardown(cudnn_conv *c) {
    if (!c->api) return;
    if (c->x) c->api->destroy_tensor(c->x);
    if (c->y) c->api->destroy_tensor(c->y);
    if (c->w) c->api->destroy_filter(c->w);
    if (c->conv) c->api->destroy_conv(c->conv);
    if (c->ws) cudaFree(c->ws);
    memset(c, 0, sizeof *c);
}

static tops_status cudnn_call(void *ctx) {
    cudnn_conv *c = ctx;
    cudnnStatus_t s = cudnn_run(c, c->algo);
    return s == CUDNN_STATUS_SUCCESS ? TOPS_OK : tops__fail(TOPS_DEVICE_ERROR, fn, "cudnnConvolutionForward: status %d", (int)s);
}
#endif

/* ---- timing: graph replays in alternation ----------------------------------- */

typedef tops_status (*call_fn)(void *ctx);

typedef struct timed {
    call_fn call;
    void *ctx;
    cudaGraphExec_t exec;
    int calls;
    double t[REPLAYS];
} timed;

static void graph_make(cudaStream_t stream, timed *g) {
    g->exec = NULL;
    cudaGraph_t gr = NULL;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    tops_status st = TOPS_OK;
    for (int i = 0; i < g->calls && st == TOPS_OK; i++) st = g->call(g->ctx);
    cudaError_t e = cudaStreamEndCapture(stream, &gr);
    if (st != TOPS_OK || e != cudaSuccess || cudaGraphInstantiate(&g->exec, gr, 0) != cudaSuccess) g->exec = NULL;
    if (gr) cudaGraphDestroy(gr);
    (void)cudaGetLastError();
}

static tops_status time_once(cudaStream_t stream, timed *g, cudaEvent_t t0, cudaEvent_t t1, double *s) {
    CU(cudaEventRecord(t0, stream), "cudaEventRecord");
    if (g->exec) {
        CU(cudaGraphLaunch(g->exec, stream), "cudaGraphLaunch");
    } else {
        for (int i = 0; i < g->calls; i++) {
            tops_status st = g->call(g->ctx);
            if (st != TOPS_OK) return st;
        }
    }
    CU(cudaEventRecord(t1, stream), "cudaEventRecord");
    CU(cudaEventSynchronize(t1), "cudaEventSynchronize");
    float ms = 0;
    CU(cudaEventElapsedTime(&ms, t0, t1), "cudaEventElapsedTime");
    *s = ms * 1e-3 / g->calls;
    return TOPS_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Each of n callables: one call to size its graph (about 10 ms a replay),
   then REPLAYS replays, all n in turn each round; medians sorted into t. */
static tops_status time_alternating(cudaStream_t stream, timed *g, int n) {
    cudaEvent_t t0, t1;
    CU(cudaEventCreate(&t0), "cudaEventCreate");
    CU(cudaEventCreate(&t1), "cudaEventCreate");
    tops_status st = TOPS_OK;
    for (int i = 0; i < n && st == TOPS_OK; i++) {
        double one = 0;
        g[i].calls = 1;
        g[i].exec = NULL;
        st = time_once(stream, &g[i], t0, t1, &one);
        if (st == TOPS_OK) st = time_once(stream, &g[i], t0, t1, &one);
        int calls = one > 0 ? (int)(0.01 / one) : 1;
        g[i].calls = calls < 1 ? 1 : calls > 2000 ? 2000 : calls;
        if (st == TOPS_OK) graph_make(stream, &g[i]);
    }
    for (int rep = -1; rep < REPLAYS && st == TOPS_OK; rep++)
        for (int j = 0; j < n && st == TOPS_OK; j++) {
            int i = rep & 1 ? n - 1 - j : j;
            double s = 0;
            st = time_once(stream, &g[i], t0, t1, &s);
            if (rep >= 0) g[i].t[rep] = s;
        }
    for (int i = 0; i < n; i++) {
        if (g[i].exec) cudaGraphExecDestroy(g[i].exec);
        g[i].exec = NULL;
        qsort(g[i].t, REPLAYS, sizeof g[i].t[0], cmp_double);
    }
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    return st;
}

/* ---- ours ----------------------------------------------------------------------- */

typedef struct ours {
    tops_exec exec;
    tops_conv2d_desc d;
    tops_tensor in, w, out;
    tops_tensor q, wdev, packed;
    int have_q, have_dev, have_packed;
} ours;

static tops_status ours_call(void *ctx) {
    ours *o = ctx;
    return tops_conv2d(&o->exec, &o->d, &o->in, &o->w, &o->out);
}

static void ours_free(ours *o) {
    if (o->have_packed) tops_tensor_destroy(&o->packed);
    if (o->have_dev) tops_tensor_destroy(&o->wdev);
    if (o->have_q) tops_tensor_destroy(&o->q);
    o->have_packed = o->have_dev = o->have_q = 0;
}

static tops_status view(tops_dtype dt, void *data, int rank, const int64_t *ext, tops_memory mem, tops_tensor *out) {
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = tops_format_of(dt);
    d.rank = rank;
    for (int i = 0; i < rank; i++) d.extent[i] = ext[i];
    d.data = data;
    d.memory = mem;
    return tops_tensor_view(&d, out);
}

/* The checked pixels of a 16-bit device output, as floats. */
static tops_status fetch_rows(const tops_bench_conv_shape *s, const void *dy, int bf16, const int64_t *rows, int nrows,
                              float *got) {
    uint16_t *tmp = malloc((size_t)s->o * 2);
    if (!tmp) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory");
    for (int r = 0; r < nrows; r++) {
        cudaError_t e = cudaMemcpy(tmp, (const char *)dy + (size_t)(rows[r] * s->o) * 2, (size_t)s->o * 2, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) {
            free(tmp);
            return tops__fail(TOPS_DEVICE_ERROR, fn, "reading the output: %s", cudaGetErrorString(e));
        }
        for (int64_t o = 0; o < s->o; o++) got[r * s->o + o] = bf16 ? tops__bf16_to_f32(tmp[o]) : tops__f16_to_f32(tmp[o]);
    }
    free(tmp);
    return TOPS_OK;
}

static tops_status run_shape(tops_bench_session *s, const tops_bench_conv_shape *sh, const char *layer, cudaStream_t stream,
                             void *cudnn, tops_bench_rows *rows, int *bad) {
    const tops_bench_config *cfg = s->cfg;
    const int64_t k = sh->kh * sh->kw * (sh->c / sh->groups), m = sh->n * sh->oh * sh->ow;
    const int64_t nin = sh->n * sh->h * sh->w * sh->c, nw = sh->o * k, nout = m * sh->o;
    const tops_memory gpu = cfg->device, host = {TOPS_DEVICE_CPU, 0};
    tops_status st = TOPS_OK;
    float *xf = malloc((size_t)nin * 4), *wf = malloc((size_t)nw * 4), *wdec = malloc((size_t)nw * 4);
    float *xr = malloc((size_t)nin * 4), *got = malloc((size_t)TOPS_BENCH_CHECK_ROWS * (size_t)sh->o * 4);
    uint16_t *x16 = malloc((size_t)nin * 2), *w16 = malloc((size_t)nw * 2);
    double *ref = malloc((size_t)TOPS_BENCH_CHECK_ROWS * (size_t)sh->o * sizeof(double));
    void *dx[2] = {NULL, NULL}, *dy = NULL, *dyb = NULL, *dwh = NULL;
    ours *o = calloc((size_t)cfg->nformats, sizeof *o);
    timed *tm = calloc((size_t)cfg->nformats + 1, sizeof *tm);
    int *fidx = calloc((size_t)cfg->nformats + 1, sizeof *fidx);
    double *rel = calloc((size_t)cfg->nformats + 1, sizeof *rel);
    if (!xf || !wf || !wdec || !xr || !got || !x16 || !w16 || !ref || !o || !tm || !fidx || !rel) {
        st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for %s", layer);
        goto done;
    }
    tops_bench_progress(s, "%s b%lld: generating data", layer, (long long)sh->n);
    tops_bench_fill_normal(xf, nin, 7);
    tops_bench_fill_normal(wf, nw, 70);
    for (int64_t i = 0; i < nw; i++) wf[i] *= (float)(1.0 / sqrt((double)k));
    int64_t check[TOPS_BENCH_CHECK_ROWS];
    const int nchk = tops_bench_check_rows(m, check);
    /* the input in both 16-bit types */
    for (int b = 0; b < 2 && st == TOPS_OK; b++) {
        for (int64_t i = 0; i < nin; i++) x16[i] = b ? tops__f32_to_bf16(xf[i]) : tops__f32_to_f16(xf[i]);
        if (cudaMalloc(&dx[b], (size_t)nin * 2) != cudaSuccess ||
            cudaMemcpy(dx[b], x16, (size_t)nin * 2, cudaMemcpyHostToDevice) != cudaSuccess)
            st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no device memory for the input");
    }
    if (st == TOPS_OK && (cudaMalloc(&dy, (size_t)nout * 2) != cudaSuccess || cudaMalloc(&dyb, (size_t)nout * 2) != cudaSuccess))
        st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no device memory for the output");
    int nt = 0, ntimed_ours = 0;
    int64_t iext[4] = {sh->n, sh->h, sh->w, sh->c}, oext[4] = {sh->n, sh->oh, sh->ow, sh->o}, wext[2] = {sh->o, k};
    for (int f = 0; f < cfg->nformats && st == TOPS_OK; f++) {
        ours *u = &o[f];
        tops_format fmt;
        tops_tensor src, dv;
        if ((st = tops_format_from_name(cfg->formats[f], &fmt)) != TOPS_OK) break;
        const int bf16 = fmt.id == TOPS_FMT_BF16;
        const tops_dtype act = bf16 ? TOPS_DT_BF16 : TOPS_DT_F16;
        if ((st = view(TOPS_DT_F32, wf, 2, wext, host, &src)) != TOPS_OK ||
            (st = tops_tensor_create(fmt, 2, wext, host, &u->q)) != TOPS_OK)
            break;
        u->have_q = 1;
        if ((st = tops_quantize(&src, &u->q, NULL)) != TOPS_OK || (st = view(TOPS_DT_F32, wdec, 2, wext, host, &dv)) != TOPS_OK ||
            (st = tops_dequantize(&u->q, &dv)) != TOPS_OK)
            break;
        u->exec = tops_exec_default();
        u->exec.device = gpu;
        u->exec.stream = stream;
        memset(&u->d, 0, sizeof u->d);
        u->d.kernel_h = (int32_t)sh->kh, u->d.kernel_w = (int32_t)sh->kw;
        u->d.stride_h = (int32_t)sh->sh, u->d.stride_w = (int32_t)sh->sw;
        u->d.dilation_h = (int32_t)sh->dh, u->d.dilation_w = (int32_t)sh->dw;
        u->d.pad_top = (int32_t)sh->pt, u->d.pad_bottom = (int32_t)sh->pb;
        u->d.pad_left = (int32_t)sh->pl, u->d.pad_right = (int32_t)sh->pr;
        u->d.groups = (int32_t)sh->groups;
        u->d.relaxed_precision = cfg->relaxed;
        u->d.mode = TOPS_MULTIPLY;
        const int plain16 = fmt.id == TOPS_FMT_F16 || fmt.id == TOPS_FMT_BF16;
        const int dw = sh->groups > 1 && sh->groups == sh->c && sh->o == sh->c;
        if (!plain16 && (sh->groups == 1 || dw)) {
            tops_matmul2d_desc md;
            memset(&md, 0, sizeof md);
            md.transpose_right = 1;
            md.relaxed_precision = cfg->relaxed;
            if ((st = tops_pack_right(&u->exec, &md, &u->q, &u->packed)) != TOPS_OK) break;
            u->have_packed = 1;
            u->w = u->packed;
        } else {
            if ((st = tops_tensor_to(&u->q, gpu, &u->wdev)) != TOPS_OK) break;
            u->have_dev = 1;
            u->w = u->wdev;
        }
        if ((st = view(act, dx[bf16], 4, iext, gpu, &u->in)) != TOPS_OK ||
            (st = view(act, dy, 4, oext, gpu, &u->out)) != TOPS_OK)
            break;
        /* check on a NaN-poisoned output */
        tops_bench_progress(s, "%s b%lld %s: checking against f64", layer, (long long)sh->n, cfg->formats[f]);
        for (int64_t i = 0; i < nin; i++) xr[i] = bf16 ? tops__bf16_to_f32(tops__f32_to_bf16(xf[i])) : tops__f16_to_f32(tops__f32_to_f16(xf[i]));
        tops_bench_conv_reference(sh, xr, wdec, check, nchk, ref);
        if (cudaMemset(dy, 0xFF, (size_t)nout * 2) != cudaSuccess) {
            st = tops__fail(TOPS_DEVICE_ERROR, fn, "cudaMemset failed");
            break;
        }
        if ((st = ours_call(u)) != TOPS_OK) break;
        cudaError_t e = cudaStreamSynchronize(stream);
        if (e != cudaSuccess) {
            st = tops__fail(TOPS_DEVICE_ERROR, fn, "%s %s: %s", layer, cfg->formats[f], cudaGetErrorString(e));
            break;
        }
        if ((st = fetch_rows(sh, dy, bf16, check, nchk, got)) != TOPS_OK) break;
        double cs;
        tops_bench_compare(ref, got, (int64_t)nchk * sh->o, &rel[nt], &cs, NULL);
        tm[nt] = (timed){ours_call, u, NULL, 1, {0}};
        fidx[nt++] = f;
        ntimed_ours++;
    }
#ifdef TOPS_BENCH_HAVE_CUDNN
    cudnn_conv cc;
    memset(&cc, 0, sizeof cc);
    int have_cudnn = 0;
    if (st == TOPS_OK && cudnn) {
        tops_bench_progress(s, "%s b%lld: cuDNN algorithm search", layer, (long long)sh->n);
        for (int64_t i = 0; i < nw; i++) w16[i] = tops__f32_to_f16(wf[i]);
        if (cudaMalloc(&dwh, (size_t)nw * 2) != cudaSuccess ||
            cudaMemcpy(dwh, w16, (size_t)nw * 2, cudaMemcpyHostToDevice) != cudaSuccess)
            st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no device memory for the cuDNN weights");
        if (st == TOPS_OK && cudnn_setup(cudnn, sh, &cc)) {
            cc.dx = dx[0], cc.dw = dwh, cc.dy = dyb;
            for (int64_t i = 0; i < nin; i++) xr[i] = tops__f16_to_f32(tops__f32_to_f16(xf[i]));
            for (int64_t i = 0; i < nw; i++) wdec[i] = tops__f16_to_f32(w16[i]);
            tops_bench_conv_reference(sh, xr, wdec, check, nchk, ref);
            const int picked = cudnn_pick(&cc, stream); /* else no baseline row, as without cuDNN */
            (void)cudaMemset(dyb, 0xFF, (size_t)nout * 2);
            if (picked) st = cudnn_call(&cc);
            if (picked && st == TOPS_OK && cudaStreamSynchronize(stream) != cudaSuccess)
                st = tops__fail(TOPS_DEVICE_ERROR, fn, "cuDNN's first call failed");
            if (picked && st == TOPS_OK) {
                if ((st = fetch_rows(sh, dyb, 0, check, nchk, got)) == TOPS_OK) {
                    double cs;
                    tops_bench_compare(ref, got, (int64_t)nchk * sh->o, &rel[nt], &cs, NULL);
                    tm[nt] = (timed){cudnn_call, &cc, NULL, 1, {0}};
                    fidx[nt++] = -1;
                    have_cudnn = 1;
                }
            }
        }
    }
#endif
    if (st == TOPS_OK && nt > 0) {
        tops_bench_progress(s, "%s b%lld: timing ours and cuDNN f16 in alternation", layer, (long long)sh->n);
        st = time_alternating(stream, tm, nt);
    }
    double base = 0;
    for (int i = 0; i < nt; i++)
        if (fidx[i] < 0) base = tm[i].t[REPLAYS / 2];
    const double flops = 2.0 * (double)m * (double)sh->o * (double)k;
    for (int i = 0; i < nt && st == TOPS_OK; i++) {
        tops_bench_row row;
        memset(&row, 0, sizeof row);
        snprintf(row.op, sizeof row.op, "conv2d");
        const int f = fidx[i];
        snprintf(row.format, sizeof row.format, "%s", f < 0 ? "cudnn-f16" : cfg->formats[f]);
        row.m = m, row.k = k, row.n = sh->o;
        row.threads = 1;
        snprintf(row.isa, sizeof row.isa, "cuda:%d", gpu.index);
        char path[256] = "";
        if (f >= 0) tops_conv2d_path(&o[f].exec, &o[f].d, &o[f].in, &o[f].w, &o[f].out, path, sizeof path);
#ifdef TOPS_BENCH_HAVE_CUDNN
        if (f < 0) snprintf(path, sizeof path, "cuDNN %zu NHWC f16, f32 compute, algo %d", ((cudnn_api *)cudnn)->version(), (int)cc.algo);
#endif
        if (snprintf(row.path, sizeof row.path, "%s b%lld: %s", layer, (long long)sh->n, path) >= (int)sizeof row.path)
            row.path[sizeof row.path - 1] = 0;
        row.median_s = tm[i].t[REPLAYS / 2];
        row.min_s = tm[i].t[0];
        snprintf(row.baseline, sizeof row.baseline, "%s", base > 0 && f >= 0 ? "cudnn-f16" : "none");
        row.baseline_median_s = f >= 0 ? base : 0;
        row.rel_l2 = rel[i];
        row.cos_sim = NAN;
        const int bf16 = f >= 0 && strcmp(cfg->formats[f], "bf16") == 0;
        /* relaxed: matmul2d's GPU bound (FP8 tensor cores), plus one rounding of the 16-bit output, twice */
        row.rel_l2_bound = (cfg->relaxed && f >= 0 ? 5e-2 : 1e-5) + 2 * (bf16 ? ldexp(1.0, -8) : ldexp(1.0, -11));
        row.accuracy_ok = row.rel_l2 <= row.rel_l2_bound;
        if (!row.accuracy_ok) (*bad)++;
        row.gflops = flops / row.median_s / 1e9;
        row.speedup = row.baseline_median_s > 0 ? row.baseline_median_s / row.median_s : 0;
        printf("conv2d %s b%lld %s: %.1f us (%.1f TFLOP/s); rel-L2 %.2e; %s\n", layer, (long long)sh->n, row.format,
               row.median_s * 1e6, flops / row.median_s / 1e12, row.rel_l2, row.path);
        if (row.speedup > 0) printf("  vs cuDNN f16 %.1f us: %.2fx\n", base * 1e6, row.speedup);
        st = tops_bench_rows_push(rows, &row);
    }
    (void)ntimed_ours;
#ifdef TOPS_BENCH_HAVE_CUDNN
    if (have_cudnn || cc.api) cudnn_teardown(&cc);
#endif
done:
    for (int f = 0; o && f < cfg->nformats; f++) ours_free(&o[f]);
    if (dx[0]) cudaFree(dx[0]);
    if (dx[1]) cudaFree(dx[1]);
    if (dy) cudaFree(dy);
    if (dyb) cudaFree(dyb);
    if (dwh) cudaFree(dwh);
    free(xf), free(wf), free(wdec), free(xr), free(got), free(x16), free(w16), free(ref), free(o), free(tm), free(fidx),
        free(rel);
    return st;
}

tops_status tops_bench_conv_cuda(tops_bench_session *s, tops_bench_rows *rows) {
    const tops_bench_config *cfg = s->cfg;
    tops_bench_conv_shape shapes[MAX_CASES];
    const char *names[MAX_CASES];
    const int n = tops_bench_conv_cases(shapes, names, MAX_CASES);
    s->case_count = n;
    cudaStream_t stream = NULL;
    if (cudaSetDevice(cfg->device.index) != cudaSuccess || cudaStreamCreate(&stream) != cudaSuccess)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "cuda:%d could not be opened", cfg->device.index);
    void *cudnn = NULL;
#ifdef TOPS_BENCH_HAVE_CUDNN
    cudnn_api api;
    if (cudnn_open(&api, stream)) {
        cudnn = &api;
        printf("baseline: cuDNN %zu (libcudnn.so.9), f16 NHWC, f32 compute, tensor-op math, the fastest working algorithm by median of 7 calls\n",
               api.version());
    } else {
        printf("baseline: none (%s); set TOPS_CUDNN_LIB to libcudnn.so.9's path\n", g_cudnn_note);
    }
#else
    printf("baseline: none (built without cudnn.h)\n");
#endif
    int bad = 0;
    tops_status st = TOPS_OK;
    for (int i = 0; i < n && st == TOPS_OK; i++) {
        s->case_index = i + 1;
        st = run_shape(s, &shapes[i], names[i], stream, cudnn, rows, &bad);
    }
    tops_bench_progress(s, NULL);
#ifdef TOPS_BENCH_HAVE_CUDNN
    if (cudnn) api.destroy(api.h);
#endif
    cudaStreamDestroy(stream);
    if (st == TOPS_OK && bad)
        st = tops__fail(TOPS_INTERNAL, fn, "%d case(s) missed their accuracy bound (marked WRONG in the table)", bad);
    return st;
}

const char tops_bench_conv_cuda_usage[] =
    "  the conv2d flags above (--layers, --conv-batch; --format default f16,bf16,int4-g128)\n"
    "  Baseline: cuDNN's f16 convolution (libcudnn.so.9 loaded at run time, or TOPS_CUDNN_LIB), NHWC,\n"
    "  f32 compute, the fastest of its working algorithms (median of 7 calls each); timed in\n"
    "  alternation as CUDA graph replays.\n";

#else
typedef int tops_bench_cuda_conv_unused; /* ISO C wants a declaration in every file */
#endif
