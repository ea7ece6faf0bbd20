/* `tensorops bench --op attention --device cuda`: the fused kernel
   (tops_attention on cuda:N) against unfused attention through cuBLAS in the
   same run: a strided-batched GEMM for the scaled Q K^T into an [Sq, Sk]
   score buffer per head (f16 / bf16, f32 accumulation), a row softmax
   kernel (bench_cuda_softmax.cu; causal mask there), a strided-batched GEMM
   for P V.  Grouped heads share their keys: the group's queries are one
   (group x Sq) x D matrix.  The two are timed in alternation, each as CUDA
   graph replays between events; the f16 tensor-core rate (cuBLAS 8192^3)
   and the HBM copy bandwidth are measured in the same run.  TFLOP/s count
   4 D per visible query / key pair for both (the unfused path computes the
   masked half too). */
#include "bench.h"

#ifdef TOPS_HAVE_CUDA

#include "cuda/attention.h"
#include "internal.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int tops_bench_cuda_softmax(void *scores, int64_t rows, int64_t cols, int64_t sq, int64_t off, int causal, int bf16,
                            void *stream);

#define CHECK_ROWS 8
#define REPLAYS 9
static const char fn[] = "tensorops bench --op attention --device cuda";

#define CU(call, what)                                                                                            \
    do {                                                                                                          \
        cudaError_t e_ = (call);                                                                                  \
        if (e_ != cudaSuccess) return tops__fail(TOPS_DEVICE_ERROR, fn, "%s: %s", what, cudaGetErrorString(e_)); \
    } while (0)

tops_status tops_bench_attention_cuda_prepare(tops_bench_config *cfg) {
    tops_bench_attn_options *o = tops_bench_attention_options();
    if (!o->ndtypes) snprintf(o->dtypes[o->ndtypes++], sizeof o->dtypes[0], "bf16");
    tops_status st = tops_bench_attention_prepare(cfg);
    if (st != TOPS_OK) return st;
    for (int i = 0; i < o->ndtypes; i++)
        if (strcmp(o->dtypes[i], "f32") == 0)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "--dtype f32: the GPU kernel takes f16 or bf16");
    if (o->nvarlen)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                          "--varlen: the GPU runner times whole batches (the GPU takes varlen in its decode kernel only)");
    return TOPS_OK;
}

typedef struct gpu_case {
    const tops_bench_attn_options *o;
    cudaStream_t stream;
    cublasHandle_t blas;
    tops_exec exec;
    tops_attention_desc desc;
    tops_tensor q, k, v, out;
    void *dq, *dk, *dv, *dout, *scores, *uout;
    int bf16;
} gpu_case;

typedef tops_status (*enqueue_fn)(gpu_case *c);

static tops_status enqueue_fused(gpu_case *c) {
    return tops_attention(&c->exec, &c->desc, &c->q, &c->k, &c->v, &c->out);
}

static tops_status enqueue_unfused(gpu_case *c) {
    const tops_bench_attn_options *o = c->o;
    int64_t G = o->heads / o->kv_heads, Sq = o->seq, Sk = o->kv_seq, D = o->head_dim;
    float scale = 1.0f / sqrtf((float)D), one = 1.0f, zero = 0.0f;
    cudaDataType_t t = c->bf16 ? CUDA_R_16BF : CUDA_R_16F;
    int batch = (int)(o->batch * o->kv_heads);
    /* S[G Sq, Sk] = scale Q K^T (column-major: S^T = K Q^T) */
    cublasStatus_t s = cublasGemmStridedBatchedEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)Sk, (int)(G * Sq), (int)D,
                                                  &scale, c->dk, t, (int)D, Sk * D, c->dq, t, (int)D, G * Sq * D, &zero,
                                                  c->scores, t, (int)Sk, G * Sq * Sk, batch, CUBLAS_COMPUTE_32F,
                                                  CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) return tops__fail(TOPS_DEVICE_ERROR, fn, "cublasGemmStridedBatchedEx: status %d", (int)s);
    int e = tops_bench_cuda_softmax(c->scores, o->batch * o->heads * Sq, Sk, Sq, Sk - Sq, c->desc.causal, c->bf16,
                                    c->stream);
    if (e != cudaSuccess) return tops__fail(TOPS_DEVICE_ERROR, fn, "softmax kernel: %s", cudaGetErrorString(e));
    /* O[G Sq, D] = P V (column-major: O^T = V^T P^T) */
    s = cublasGemmStridedBatchedEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)D, (int)(G * Sq), (int)Sk, &one, c->dv, t,
                                   (int)D, Sk * D, c->scores, t, (int)Sk, G * Sq * Sk, &zero, c->uout, t, (int)D,
                                   G * Sq * D, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) return tops__fail(TOPS_DEVICE_ERROR, fn, "cublasGemmStridedBatchedEx: status %d", (int)s);
    return TOPS_OK;
}

/* `calls` calls captured in one graph (direct enqueues when capture fails). */
typedef struct graph {
    cudaGraphExec_t exec;
    enqueue_fn fn;
    int calls;
} graph;

static void graph_make(gpu_case *c, graph *g, enqueue_fn call, int calls) {
    g->exec = NULL;
    g->fn = call;
    g->calls = calls;
    cudaGraph_t gr = NULL;
    if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    tops_status st = TOPS_OK;
    for (int i = 0; i < calls && st == TOPS_OK; i++) st = call(c);
    cudaError_t e = cudaStreamEndCapture(c->stream, &gr);
    if (st != TOPS_OK || e != cudaSuccess || cudaGraphInstantiate(&g->exec, gr, 0) != cudaSuccess) g->exec = NULL;
    if (gr) cudaGraphDestroy(gr);
    (void)cudaGetLastError();
}

static tops_status graph_time(gpu_case *c, graph *g, cudaEvent_t t0, cudaEvent_t t1, double *s) {
    CU(cudaEventRecord(t0, c->stream), "cudaEventRecord");
    if (g->exec) {
        CU(cudaGraphLaunch(g->exec, c->stream), "cudaGraphLaunch");
    } else {
        for (int i = 0; i < g->calls; i++) {
            tops_status st = g->fn(c);
            if (st != TOPS_OK) return st;
        }
    }
    CU(cudaEventRecord(t1, c->stream), "cudaEventRecord");
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

/* Calls per graph so that one replay runs about 20 ms (from one timed call). */
static int calls_for(double one_s) {
    int n = one_s > 0 ? (int)(0.02 / one_s) : 1;
    return n < 1 ? 1 : n > 200 ? 200 : n;
}

/* f64 attention of query row i of head (b, h) on the 16-bit inputs. */
static void reference_row(const tops_bench_attn_options *o, const float *q, const float *k, const float *v, int causal,
                          int64_t b, int64_t h, int64_t i, double *out, double *logit) {
    int64_t D = o->head_dim, Sk = o->kv_seq, hk = h / (o->heads / o->kv_heads);
    const float *qi = q + ((b * o->heads + h) * o->seq + i) * D;
    int64_t pos = i + Sk - o->seq;
    double m = -INFINITY, scale = 1.0 / sqrt((double)D), sum = 0;
    for (int64_t j = 0; j < Sk; j++) {
        logit[j] = -INFINITY;
        if (causal && j > pos) continue;
        const float *kj = k + ((b * o->kv_heads + hk) * Sk + j) * D;
        double s = 0;
        for (int64_t x = 0; x < D; x++) s += (double)qi[x] * kj[x];
        logit[j] = s * scale;
        if (logit[j] > m) m = logit[j];
    }
    for (int64_t x = 0; x < D; x++) out[x] = 0;
    if (m == -INFINITY) return;
    for (int64_t j = 0; j < Sk; j++) {
        if (logit[j] == -INFINITY) continue;
        double p = exp(logit[j] - m);
        sum += p;
        const float *vj = v + ((b * o->kv_heads + hk) * Sk + j) * D;
        for (int64_t x = 0; x < D; x++) out[x] += p * vj[x];
    }
    for (int64_t x = 0; x < D; x++) out[x] /= sum;
}

/* rel-L2 of CHECK_ROWS sampled rows of a device output against f64. */
static tops_status check(gpu_case *c, const void *dev_out, const float *qf, const float *kf, const float *vf,
                         double *rel) {
    const tops_bench_attn_options *o = c->o;
    int64_t D = o->head_dim;
    tops_dtype dt = c->bf16 ? TOPS_DT_BF16 : TOPS_DT_F16;
    double *ref = malloc((size_t)CHECK_ROWS * D * sizeof(double)), *logit = malloc((size_t)o->kv_seq * sizeof(double));
    float *got = malloc((size_t)CHECK_ROWS * D * sizeof(float));
    uint16_t *h16 = malloc((size_t)D * 2);
    tops_status st = TOPS_OK;
    if (!ref || !logit || !got || !h16) st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the f64 check");
    for (int r = 0; st == TOPS_OK && r < CHECK_ROWS; r++) {
        int64_t b = r % o->batch, h = (r * 5) % o->heads;
        int64_t i = o->seq == 1 ? 0 : (int64_t)r * (o->seq - 1) / (CHECK_ROWS - 1);
        reference_row(o, qf, kf, vf, c->desc.causal, b, h, i, ref + r * D, logit);
        size_t at = (size_t)(((b * o->heads + h) * o->seq + i) * D) * 2;
        if (cudaMemcpy(h16, (const char *)dev_out + at, (size_t)D * 2, cudaMemcpyDeviceToHost) != cudaSuccess)
            st = tops__fail(TOPS_DEVICE_ERROR, fn, "copying the output back failed");
        else
            tops_cast_to_f32(dt, got + r * D, h16, D);
    }
    double cos;
    if (st == TOPS_OK) tops_bench_compare(ref, got, CHECK_ROWS * D, rel, &cos, NULL);
    free(ref), free(logit), free(got), free(h16);
    return st;
}

static tops_status view(const gpu_case *c, void *data, int64_t heads, int64_t seq, tops_tensor *t) {
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = tops_format_of(c->bf16 ? TOPS_DT_BF16 : TOPS_DT_F16);
    d.rank = 4;
    d.extent[0] = c->o->batch, d.extent[1] = heads, d.extent[2] = seq, d.extent[3] = c->o->head_dim;
    d.data = data;
    d.memory = c->exec.device;
    return tops_tensor_view(&d, t);
}

/* Uploads normal values rounded to the dtype; keeps them as f32. */
static tops_status upload(gpu_case *c, int64_t n, uint64_t seed, void **dev, float **vals) {
    tops_dtype dt = c->bf16 ? TOPS_DT_BF16 : TOPS_DT_F16;
    *vals = malloc((size_t)n * sizeof(float));
    uint16_t *h = malloc((size_t)n * 2);
    if (!*vals || !h) {
        free(h);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for %lld inputs", (long long)n);
    }
    tops_bench_fill_normal(*vals, n, seed);
    tops_cast_from_f32(dt, h, *vals, n, 1);
    tops_cast_to_f32(dt, *vals, h, n);
    cudaError_t e = cudaMalloc(dev, (size_t)n * 2);
    if (e == cudaSuccess) e = cudaMemcpy(*dev, h, (size_t)n * 2, cudaMemcpyHostToDevice);
    free(h);
    CU(e, "placing the inputs");
    return TOPS_OK;
}

typedef struct ceilings {
    double peak_gflops, hbm_gbps;
} ceilings;

static tops_status measure_ceilings(cudaStream_t stream, cublasHandle_t blas, cudaEvent_t t0, cudaEvent_t t1,
                                    ceilings *out) {
    const int sz = 8192;
    size_t bytes = (size_t)sz * sz * 2;
    void *a = NULL, *b = NULL, *y = NULL;
    CU(cudaMalloc(&a, bytes), "cudaMalloc");
    CU(cudaMalloc(&b, bytes), "cudaMalloc");
    CU(cudaMalloc(&y, bytes), "cudaMalloc");
    float *f = malloc((size_t)sz * sz * sizeof(float));
    uint16_t *h = malloc(bytes);
    if (f && h) {
        tops_bench_fill_normal(f, (int64_t)sz * sz, 7);
        tops_cast_from_f32(TOPS_DT_F16, h, f, (int64_t)sz * sz, 1);
        cudaMemcpy(a, h, bytes, cudaMemcpyHostToDevice);
        cudaMemcpy(b, h, bytes, cudaMemcpyHostToDevice);
    }
    free(f), free(h);
    double t[REPLAYS + 2];
    float one = 1.0f, zero = 0.0f, ms = 0;
    for (int rep = 0; rep < REPLAYS + 2; rep++) {
        cudaEventRecord(t0, stream);
        for (int i = 0; i < 3; i++)
            cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, sz, sz, sz, &one, a, CUDA_R_16F, sz, b, CUDA_R_16F, sz, &zero, y,
                         CUDA_R_16F, sz, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        cudaEventRecord(t1, stream);
        cudaEventSynchronize(t1);
        cudaEventElapsedTime(&ms, t0, t1);
        t[rep] = ms * 1e-3 / 3;
    }
    qsort(t + 2, REPLAYS, sizeof t[0], cmp_double);
    out->peak_gflops = 2.0 * sz * (double)sz * sz / t[2 + REPLAYS / 2] / 1e9;
    /* HBM: a device-to-device copy of 128 MiB (read + write; twice the L2) */
    size_t cb = bytes;
    for (int rep = 0; rep < REPLAYS + 2; rep++) {
        cudaEventRecord(t0, stream);
        cudaMemcpyAsync(y, a, cb, cudaMemcpyDeviceToDevice, stream);
        cudaEventRecord(t1, stream);
        cudaEventSynchronize(t1);
        cudaEventElapsedTime(&ms, t0, t1);
        t[rep] = ms * 1e-3;
    }
    qsort(t + 2, REPLAYS, sizeof t[0], cmp_double);
    out->hbm_gbps = 2.0 * (double)cb / t[2 + REPLAYS / 2] / 1e9;
    cudaFree(a), cudaFree(b), cudaFree(y);
    CU(cudaGetLastError(), "measuring the ceilings");
    return TOPS_OK;
}

static double visible_pairs(const tops_bench_attn_options *o, int causal) {
    double per_head = 0;
    for (int64_t i = 0; i < o->seq; i++) {
        int64_t n = causal ? i + o->kv_seq - o->seq + 1 : o->kv_seq;
        per_head += (double)(n < 0 ? 0 : n > o->kv_seq ? o->kv_seq : n);
    }
    return per_head * (double)o->batch * (double)o->heads;
}

typedef struct kv_cache {
    tops_tensor k, v;  /* on the device */
    float *kf, *vf;    /* the decoded values */
    double bytes;      /* data and scale planes of both */
    int made;
} kv_cache;

static double tensor_bytes(const tops_tensor *t) {
    size_t n = 0;
    double b = tops_tensor_data_span(t, &n) == TOPS_OK ? (double)n : 0;
    if (t->scales.data) {
        double e = (tops_dtype_bits(t->scales.dtype) + 7) / 8;
        for (int d = 0; d < t->rank; d++) e *= (double)t->scales.extent[d];
        b += e;
    }
    return b;
}

/* The 16-bit-rounded values kf / vf quantized to format name, on the device,
   with their decoded values for the f64 check. */
static tops_status kv_quant(gpu_case *c, const tops_format *f, const float *vals, tops_tensor *dev, float **dec) {
    const tops_bench_attn_options *o = c->o;
    int64_t e[4] = {o->batch, o->kv_heads, o->kv_seq, o->head_dim}, n = e[0] * e[1] * e[2] * e[3];
    tops_tensor_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.format = tops_format_of(TOPS_DT_F32);
    sd.rank = 4;
    memcpy(sd.extent, e, sizeof e);
    sd.data = (void *)vals;
    tops_tensor src, host, out;
    tops_status st = tops_tensor_view(&sd, &src);
    if (st != TOPS_OK) return st;
    if ((st = tops_tensor_create(*f, 4, e, (tops_memory){TOPS_DEVICE_CPU, 0}, &host)) != TOPS_OK) return st;
    tops_quantize_opts qo;
    memset(&qo, 0, sizeof qo);
    qo.scale_from_data = 1;
    *dec = malloc((size_t)n * sizeof(float));
    sd.data = *dec;
    if (!*dec) st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the decoded KV cache");
    if (st == TOPS_OK) st = tops_quantize(&src, &host, &qo);
    if (st == TOPS_OK) st = tops_tensor_view(&sd, &out);
    if (st == TOPS_OK) st = tops_dequantize(&host, &out);
    if (st == TOPS_OK) st = tops_tensor_to(&host, c->exec.device, dev);
    tops_tensor_destroy(&host);
    return st;
}

static void kv_free(kv_cache *kc) {
    if (kc->made & 1) tops_tensor_destroy(&kc->k);
    if (kc->made & 2) tops_tensor_destroy(&kc->v);
    free(kc->kf), free(kc->vf);
    memset(kc, 0, sizeof *kc);
}

static tops_status kv_make(gpu_case *c, const char *name, const float *kf, const float *vf, kv_cache *kc) {
    tops_format f;
    tops_status st = tops_format_from_name(name, &f);
    if (st != TOPS_OK) return st;
    if ((st = kv_quant(c, &f, kf, &kc->k, &kc->kf)) == TOPS_OK) kc->made |= 1;
    if (st == TOPS_OK && (st = kv_quant(c, &f, vf, &kc->v, &kc->vf)) == TOPS_OK) kc->made |= 2;
    if (st != TOPS_OK) {
        kv_free(kc);
        return st;
    }
    kc->bytes = tensor_bytes(&kc->k) + tensor_bytes(&kc->v);
    return TOPS_OK;
}

/* One case; kfq / vfq are the values the fused call reads (the decoded KV
   cache when kvfmt names a quantized one), kf / vf the 16-bit ones the
   unfused baseline reads; kv_bytes the KV cache's bytes. */
static tops_status run_case(tops_bench_session *s, gpu_case *c, const char *dtype, int causal, const ceilings *ce,
                            const float *qf, const float *kf, const float *vf, const float *kfq, const float *vfq,
                            const char *kvfmt, double kv_bytes, tops_bench_rows *rows, int *failures) {
    const tops_bench_attn_options *o = c->o;
    c->desc = tops_attention_desc_default();
    c->desc.causal = causal;
    int64_t nq = o->batch * o->heads * o->seq * o->head_dim;
    const char *mask = causal ? "causal" : "non-causal";
    tops_status st;
    /* accuracy first, on NaN-poisoned outputs */
    tops_bench_progress(s, "%s %s: checking against f64", dtype, mask);
    CU(cudaMemset(c->dout, 0xFF, (size_t)nq * 2), "cudaMemset");
    CU(cudaMemset(c->uout, 0xFF, (size_t)nq * 2), "cudaMemset");
    if ((st = enqueue_fused(c)) != TOPS_OK || (st = enqueue_unfused(c)) != TOPS_OK) return st;
    CU(cudaStreamSynchronize(c->stream), "the first calls");
    double rel = NAN, rel_base = NAN;
    if ((st = check(c, c->dout, qf, kfq, vfq, &rel)) != TOPS_OK || (st = check(c, c->uout, qf, kf, vf, &rel_base)) != TOPS_OK)
        return st;

    tops_bench_progress(s, "%s %s: timing fused and cuBLAS unfused in alternation", dtype, mask);
    cudaEvent_t t0, t1;
    CU(cudaEventCreate(&t0), "cudaEventCreate");
    CU(cudaEventCreate(&t1), "cudaEventCreate");
    graph one_f, one_u;
    double x1 = 0, x2 = 0;
    one_f.exec = one_u.exec = NULL;
    one_f.fn = enqueue_fused, one_u.fn = enqueue_unfused;
    one_f.calls = one_u.calls = 1;
    st = graph_time(c, &one_f, t0, t1, &x1);
    if (st == TOPS_OK) st = graph_time(c, &one_u, t0, t1, &x2);
    graph gf, gu;
    gf.exec = gu.exec = NULL;
    double tf[REPLAYS], tu[REPLAYS];
    if (st == TOPS_OK) {
        graph_make(c, &gf, enqueue_fused, calls_for(x1));
        graph_make(c, &gu, enqueue_unfused, calls_for(x2));
    }
    for (int rep = -1; rep < REPLAYS && st == TOPS_OK; rep++) {
        double a = 0, b = 0;
        st = graph_time(c, rep & 1 ? &gu : &gf, t0, t1, rep & 1 ? &b : &a);
        if (st == TOPS_OK) st = graph_time(c, rep & 1 ? &gf : &gu, t0, t1, rep & 1 ? &a : &b);
        if (rep >= 0) tf[rep] = a, tu[rep] = b;
    }
    if (gf.exec) cudaGraphExecDestroy(gf.exec);
    if (gu.exec) cudaGraphExecDestroy(gu.exec);
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    if (st != TOPS_OK) return st;
    qsort(tf, REPLAYS, sizeof tf[0], cmp_double);
    qsort(tu, REPLAYS, sizeof tu[0], cmp_double);

    tops_bench_row row;
    memset(&row, 0, sizeof row);
    snprintf(row.op, sizeof row.op, "attention");
    snprintf(row.format, sizeof row.format, "%s%s%s", dtype, kvfmt ? " kv " : "", kvfmt ? kvfmt : "");
    row.m = o->seq, row.n = o->kv_seq, row.k = o->head_dim;
    row.batch = o->batch, row.heads = o->heads, row.kv_heads = o->kv_heads, row.causal = causal;
    row.threads = 1;
    snprintf(row.isa, sizeof row.isa, "cuda:%d", c->exec.device.index);
    char path[96] = "fused";
    tops__cuda_attention_path(&c->exec, &c->desc, &c->q, &c->k, &c->v, &c->out, path, sizeof path);
    snprintf(row.path, sizeof row.path, "%s", path);
    row.median_s = tf[REPLAYS / 2];
    row.min_s = tf[0];
    snprintf(row.baseline, sizeof row.baseline, "cublas-unfused");
    row.baseline_median_s = tu[REPLAYS / 2];
    row.rel_l2 = rel;
    row.cos_sim = NAN;
    /* the validate bound: 1e-5 plus one rounding of the output type */
    row.rel_l2_bound = 1e-5 + (c->bf16 ? ldexp(1.0, -8) : ldexp(1.0, -11));
    row.accuracy_ok = rel <= row.rel_l2_bound;
    if (!row.accuracy_ok) (*failures)++;
    double flops = 4.0 * (double)o->head_dim * visible_pairs(o, causal);
    tops_bench_row_derive(&row, flops, kv_bytes, kv_bytes + 4.0 * (double)nq, ce->peak_gflops, ce->hbm_gbps);
    printf("attention %s %s B=%lld H=%lld Hkv=%lld Sq=%lld Sk=%lld D=%lld: ours %.1f TFLOP/s (%.3f ms), cuBLAS unfused "
           "%.1f TFLOP/s (%.3f ms), %.2fx; f16 tensor cores %.0f TFLOP/s: ours at %.0f%%; rel-L2 ours %.2e, "
           "unfused %.2e\n",
           dtype, mask, (long long)o->batch, (long long)o->heads, (long long)o->kv_heads, (long long)o->seq,
           (long long)o->kv_seq, (long long)o->head_dim, flops / row.median_s / 1e12, row.median_s * 1e3,
           flops / row.baseline_median_s / 1e12, row.baseline_median_s * 1e3, row.baseline_median_s / row.median_s,
           ce->peak_gflops / 1e3, 100.0 * flops / row.median_s / 1e9 / ce->peak_gflops, rel, rel_base);
    if (o->seq <= 16)
        printf("attention decode %s kv %s B=%lld H=%lld Hkv=%lld Sq=%lld Sk=%lld D=%lld: %.1f us, KV read %.0f GB/s = %.0f%% "
               "of the HBM copy (%.0f GB/s, same run); cuBLAS unfused (16-bit KV) %.1f us\n",
               dtype, kvfmt ? kvfmt : dtype, (long long)o->batch, (long long)o->heads, (long long)o->kv_heads,
               (long long)o->seq, (long long)o->kv_seq, (long long)o->head_dim, row.median_s * 1e6,
               kv_bytes / row.median_s / 1e9, 100.0 * kv_bytes / row.median_s / 1e9 / ce->hbm_gbps, ce->hbm_gbps,
               row.baseline_median_s * 1e6);
    return tops_bench_rows_push(rows, &row);
}

tops_status tops_bench_attention_cuda(tops_bench_session *s, tops_bench_rows *rows) {
    const tops_bench_attn_options *o = tops_bench_attention_options();
    const tops_bench_config *cfg = s->cfg;
    int ncausal = o->causal_mode == 0 ? 2 : 1;
    s->case_count = o->ndtypes * ncausal * (o->nkv ? o->nkv : 1);
    gpu_case c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.exec = tops_exec_default();
    c.exec.device = cfg->device;
    int64_t nq = o->batch * o->heads * o->seq * o->head_dim, nk = o->batch * o->kv_heads * o->kv_seq * o->head_dim;
    size_t score_bytes = (size_t)(o->batch * o->heads) * (size_t)o->seq * (size_t)o->kv_seq * 2;
    float *qf = NULL, *kf = NULL, *vf = NULL;
    int failures = 0;
    tops_status st = TOPS_OK;
    cudaEvent_t t0 = NULL, t1 = NULL;
    if (cudaSetDevice(cfg->device.index) != cudaSuccess || cudaStreamCreate(&c.stream) != cudaSuccess ||
        cudaEventCreate(&t0) != cudaSuccess || cudaEventCreate(&t1) != cudaSuccess ||
        cublasCreate(&c.blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(c.blas, c.stream) != CUBLAS_STATUS_SUCCESS) {
        st = tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "cuda:%d (or cuBLAS on it) could not be opened", cfg->device.index);
        goto done;
    }
    c.exec.stream = c.stream;
    ceilings ce = {0, 0};
    tops_bench_progress(s, "measuring the f16 tensor-core rate (cuBLAS 8192^3) and HBM copy bandwidth");
    if ((st = measure_ceilings(c.stream, c.blas, t0, t1, &ce)) != TOPS_OK) goto done;
    for (int di = 0; di < o->ndtypes && st == TOPS_OK; di++) {
        c.bf16 = strcmp(o->dtypes[di], "bf16") == 0;
        tops_bench_progress(s, "%s: generating inputs", o->dtypes[di]);
        if ((st = upload(&c, nq, 11, &c.dq, &qf)) != TOPS_OK || (st = upload(&c, nk, 12, &c.dk, &kf)) != TOPS_OK ||
            (st = upload(&c, nk, 13, &c.dv, &vf)) != TOPS_OK)
            goto done;
        if (cudaMalloc(&c.dout, (size_t)nq * 2) != cudaSuccess || cudaMalloc(&c.uout, (size_t)nq * 2) != cudaSuccess ||
            cudaMalloc(&c.scores, score_bytes) != cudaSuccess) {
            st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "cuda:%d has no room for the unfused baseline's %.1f GB of scores",
                            cfg->device.index, score_bytes / 1e9);
            goto done;
        }
        if ((st = view(&c, c.dq, o->heads, o->seq, &c.q)) != TOPS_OK ||
            (st = view(&c, c.dk, o->kv_heads, o->kv_seq, &c.k)) != TOPS_OK ||
            (st = view(&c, c.dv, o->kv_heads, o->kv_seq, &c.v)) != TOPS_OK ||
            (st = view(&c, c.dout, o->heads, o->seq, &c.out)) != TOPS_OK)
            goto done;
        double plain_bytes = 2.0 * 2.0 * (double)nk;
        for (int fi = 0; fi < (o->nkv ? o->nkv : 1) && st == TOPS_OK; fi++) {
            const char *kvfmt = o->nkv && strcmp(o->kv_formats[fi], o->dtypes[di]) != 0 ? o->kv_formats[fi] : NULL;
            kv_cache kc;
            memset(&kc, 0, sizeof kc);
            if (kvfmt && (st = kv_make(&c, kvfmt, kf, vf, &kc)) != TOPS_OK) break;
            tops_tensor k16 = c.k, v16 = c.v;
            if (kvfmt) c.k = kc.k, c.v = kc.v;
            for (int ci = 0; ci < ncausal && st == TOPS_OK; ci++) {
                int causal = o->causal_mode == 0 ? ci == 0 : o->causal_mode == 1;
                s->case_index = (di * (o->nkv ? o->nkv : 1) + fi) * ncausal + ci + 1;
                st = run_case(s, &c, o->dtypes[di], causal, &ce, qf, kf, vf, kvfmt ? kc.kf : kf, kvfmt ? kc.vf : vf,
                              kvfmt, kvfmt ? kc.bytes : plain_bytes, rows, &failures);
            }
            c.k = k16, c.v = v16;
            kv_free(&kc);
        }
        cudaFree(c.dq), cudaFree(c.dk), cudaFree(c.dv), cudaFree(c.dout), cudaFree(c.uout), cudaFree(c.scores);
        c.dq = c.dk = c.dv = c.dout = c.uout = c.scores = NULL;
        free(qf), free(kf), free(vf);
        qf = kf = vf = NULL;
    }
    tops_bench_progress(s, NULL);
    if (st == TOPS_OK) {
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, cfg->device.index) != cudaSuccess) prop.name[0] = '\0';
        printf("gpu cuda:%d %s: f16 tensor cores %.0f TFLOP/s (cuBLAS 8192^3), HBM %.0f GB/s (device-to-device copy, "
               "read + write); same run\n",
               cfg->device.index, prop.name, ce.peak_gflops / 1e3, ce.hbm_gbps);
    }
    if (st == TOPS_OK && failures)
        st = tops__fail(TOPS_INTERNAL, fn, "%d case(s) missed their accuracy bound (marked WRONG in the table)", failures);
done:
    if (c.dq) cudaFree(c.dq);
    if (c.dk) cudaFree(c.dk);
    if (c.dv) cudaFree(c.dv);
    if (c.dout) cudaFree(c.dout);
    if (c.uout) cudaFree(c.uout);
    if (c.scores) cudaFree(c.scores);
    free(qf), free(kf), free(vf);
    if (c.blas) cublasDestroy(c.blas);
    if (t0) cudaEventDestroy(t0);
    if (t1) cudaEventDestroy(t1);
    if (c.stream) cudaStreamDestroy(c.stream);
    return st;
}

const char tops_bench_attention_cuda_usage[] =
    "  the attention flags above (--dtype f16|bf16, default bf16)\n"
    "  --kv-format LIST         KV caches to time (q's dtype, e4m3, e4m3-ch, mxfp8, int8-gG, int4-gG);\n"
    "                           at --seq <= 16 the decode kernel runs and rows report the GB/s of KV read\n"
    "                           next to the HBM copy of the same run\n"
    "  Baseline: unfused cuBLAS (strided-batched GEMM Q K^T into f16/bf16 scores, a row-softmax kernel,\n"
    "  GEMM P V) in alternation with the fused kernel; TFLOP/s count 4 * D per visible query/key pair;\n"
    "  the f16 tensor-core rate (cuBLAS 8192^3) of the same run is printed beside.\n";

#else
typedef int tops_bench_cuda_attention_unused; /* ISO C wants a declaration in every file */
#endif
