/* `tensorops bench --device cuda`: the A/B on a GPU.  For each format:
   quantize and pack once (timed apart), clone the packed weights until the
   copies exceed 4x the L2 and rotate through them, check the output
   against f64, and time with CUDA events around graph replays (one graph
   holds many calls, so launch gaps do not hide the kernels).  cuBLAS f16
   (cublasGemmEx) and cuBLASLt e4m3 run in the same session on the same
   shapes, with their own rotated copies; the HBM floor comes from a
   device-to-device copy and the compute ceiling from a large cuBLAS f16
   GEMM, both measured in the same run. */
#include "bench.h"

#ifdef TOPS_HAVE_CUDA

#include "cuda/cuda_internal.h"
#include "internal.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const cuda_default_formats[] = {"int4-g128", "mxfp4", "int4-g32", "nvfp4", "q4_0",
                                                   "int8-g32",  "e4m3-ch", "f16", NULL};
#define CHECK_ROWS 4
#define F16_OUT_REL_L2 2e-3 /* f16 outputs: their own rounding is about 3e-4 */
/* The relaxed FP8 path: e4m3 activations (3 mantissa bits, per-row scale)
   add about 2.5e-2 against f64 of the f16 inputs (docs/cuda.md). */
#define FP8_REL_L2 5e-2
#define GRAPH_REPLAYS 15
#define LT_WORKSPACE (32u << 20)

tops_status tops_bench_matmul_cuda_prepare(tops_bench_config *cfg) {
    return tops_bench_matmul_prepare_defaults(cfg, cuda_default_formats);
}

/* ---- timing --------------------------------------------------------------- */

#define CU(call, what)                                                                              \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess)                                                                      \
            return tops__fail(TOPS_DEVICE_ERROR, "tensorops bench", "%s: %s", what, cudaGetErrorString(e_)); \
    } while (0)

typedef tops_status (*enqueue_fn)(void *ctx, int call);

typedef struct gpu {
    int device;
    cudaStream_t stream;
    cudaEvent_t t0, t1;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *lt_ws;
    tops_exec exec;
    double l2_bytes;
} gpu;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* `calls` calls captured in one graph; exec NULL when the capture was not
   wanted or was refused: each replay then enqueues the calls directly. */
typedef struct call_graph {
    enqueue_fn fn;
    void *ctx;
    int calls;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
} call_graph;

static void graph_capture(gpu *g, call_graph *cg, enqueue_fn fn, void *ctx, int calls, int want_graph) {
    memset(cg, 0, sizeof *cg);
    cg->fn = fn, cg->ctx = ctx, cg->calls = calls;
    if (!want_graph || cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    tops_status st = TOPS_OK;
    for (int i = 0; i < calls && st == TOPS_OK; i++) st = fn(ctx, i);
    cudaError_t e = cudaStreamEndCapture(g->stream, &cg->graph);
    if (st != TOPS_OK || e != cudaSuccess || cudaGraphInstantiate(&cg->exec, cg->graph, 0) != cudaSuccess) cg->exec = NULL;
    (void)cudaGetLastError(); /* a refused capture leaves the direct calls */
}

static void graph_release(call_graph *cg) {
    if (cg->exec) cudaGraphExecDestroy(cg->exec);
    if (cg->graph) cudaGraphDestroy(cg->graph);
    cg->exec = NULL;
    cg->graph = NULL;
}

/* Seconds per call of one replay, between events. */
static tops_status graph_replay(gpu *g, const call_graph *cg, double *s) {
    tops_status st;
    CU(cudaEventRecord(g->t0, g->stream), "cudaEventRecord");
    if (cg->exec) {
        CU(cudaGraphLaunch(cg->exec, g->stream), "cudaGraphLaunch");
    } else {
        for (int i = 0; i < cg->calls; i++)
            if ((st = cg->fn(cg->ctx, i)) != TOPS_OK) return st;
    }
    CU(cudaEventRecord(g->t1, g->stream), "cudaEventRecord");
    CU(cudaEventSynchronize(g->t1), "cudaEventSynchronize");
    float ms = 0;
    CU(cudaEventElapsedTime(&ms, g->t0, g->t1), "cudaEventElapsedTime");
    *s = ms * 1e-3 / cg->calls;
    return TOPS_OK;
}

/* Median and min of GRAPH_REPLAYS replays after two warm-ups. */
static tops_status time_graph(gpu *g, const call_graph *cg, double *median_s, double *min_s) {
    double t[GRAPH_REPLAYS], x;
    tops_status st = TOPS_OK;
    for (int rep = -2; rep < GRAPH_REPLAYS && st == TOPS_OK; rep++) {
        st = graph_replay(g, cg, &x);
        if (st == TOPS_OK && rep >= 0) t[rep] = x;
    }
    if (st != TOPS_OK) return st;
    qsort(t, GRAPH_REPLAYS, sizeof t[0], cmp_double);
    *median_s = t[GRAPH_REPLAYS / 2];
    *min_s = t[0];
    return TOPS_OK;
}

/* Median and min seconds per call: `calls` calls in one graph (*graphed = 1
   on entry asks for it; on return it says whether the graph ran). */
static tops_status time_calls(gpu *g, enqueue_fn fn, void *ctx, int calls, double *median_s, double *min_s,
                              int *graphed) {
    call_graph cg;
    graph_capture(g, &cg, fn, ctx, calls, *graphed);
    tops_status st = time_graph(g, &cg, median_s, min_s);
    *graphed = cg.exec != NULL;
    graph_release(&cg);
    return st;
}

/* Ours (a) and a baseline (b) in alternating replays, the order flipped
   every replay, so that clock and thermal drift over the run reach both
   alike (at M = 4096 the GPU heats up within a case): each one's median
   and min over the same window. */
static tops_status time_paired(gpu *g, const call_graph *a, const call_graph *b, double *med_a, double *min_a,
                               double *med_b) {
    double ta[GRAPH_REPLAYS], tb[GRAPH_REPLAYS], x, y;
    tops_status st = TOPS_OK;
    for (int rep = -2; rep < GRAPH_REPLAYS && st == TOPS_OK; rep++) {
        const call_graph *first = rep & 1 ? b : a, *second = rep & 1 ? a : b;
        st = graph_replay(g, first, &x);
        if (st == TOPS_OK) st = graph_replay(g, second, &y);
        if (st == TOPS_OK && rep >= 0) {
            ta[rep] = rep & 1 ? y : x;
            tb[rep] = rep & 1 ? x : y;
        }
    }
    if (st != TOPS_OK) return st;
    qsort(ta, GRAPH_REPLAYS, sizeof ta[0], cmp_double);
    qsort(tb, GRAPH_REPLAYS, sizeof tb[0], cmp_double);
    *med_a = ta[GRAPH_REPLAYS / 2];
    *min_a = ta[0];
    *med_b = tb[GRAPH_REPLAYS / 2];
    return TOPS_OK;
}

/* Copies that make the rotated bytes at least 4x the L2. */
static int rotation(const gpu *g, double bytes) {
    int c = (int)ceil(4.0 * g->l2_bytes / bytes);
    return c < 2 ? 2 : c > 512 ? 512 : c;
}

/* ---- ceilings --------------------------------------------------------------- */

typedef struct copy_ctx {
    void *a, *b;
    size_t bytes;
    cudaStream_t s;
} copy_ctx;

static tops_status enqueue_copy(void *ctx, int i) {
    copy_ctx *c = ctx;
    cudaError_t e = cudaMemcpyAsync(i & 1 ? c->a : c->b, i & 1 ? c->b : c->a, c->bytes, cudaMemcpyDeviceToDevice, c->s);
    return e == cudaSuccess ? TOPS_OK : tops__fail(TOPS_DEVICE_ERROR, "tensorops bench", "copy: %s", cudaGetErrorString(e));
}

typedef struct gemm_ctx {
    gpu *g;
    const void **w; /* rotated weight copies, [N, K] */
    int nw;
    const void *x;  /* [M, K] */
    void *y;        /* [M, N] */
    int m, n, k;
    /* cuBLASLt e4m3 */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulHeuristicResult_t heur;
} gemm_ctx;

static tops_status enqueue_gemm_f16(void *ctx, int i) {
    gemm_ctx *c = ctx;
    const float one = 1.0f, zero = 0.0f;
    /* Column-major view: Y^T [N, M] = W [N, K] x X^T. */
    cublasStatus_t s = cublasGemmEx(c->g->blas, CUBLAS_OP_T, CUBLAS_OP_N, c->n, c->m, c->k, &one, c->w[i % c->nw],
                                    CUDA_R_16F, c->k, c->x, CUDA_R_16F, c->k, &zero, c->y, CUDA_R_16F, c->n,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return s == CUBLAS_STATUS_SUCCESS ? TOPS_OK
                                      : tops__fail(TOPS_DEVICE_ERROR, "tensorops bench", "cublasGemmEx: status %d", (int)s);
}

static tops_status enqueue_lt_e4m3(void *ctx, int i) {
    gemm_ctx *c = ctx;
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s = cublasLtMatmul(c->g->lt, c->desc, &one, c->w[i % c->nw], c->la, c->x, c->lb, &zero, c->y, c->ld,
                                      c->y, c->ld, &c->heur.algo, c->g->lt_ws, LT_WORKSPACE, c->g->stream);
    return s == CUBLAS_STATUS_SUCCESS ? TOPS_OK
                                      : tops__fail(TOPS_DEVICE_ERROR, "tensorops bench", "cublasLtMatmul: status %d", (int)s);
}

/* ---- our path ------------------------------------------------------------------ */

typedef struct ours_ctx {
    gpu *g;
    tops_matmul2d_desc desc;
    tops_tensor *w;
    int nw;
    tops_tensor x, y;
} ours_ctx;

static tops_status enqueue_ours(void *ctx, int i) {
    ours_ctx *c = ctx;
    return tops_matmul2d(&c->g->exec, &c->desc, &c->x, &c->w[i % c->nw], &c->y);
}

/* f16 rows of the device output, as f32. */
static tops_status fetch_rows(const void *y, int64_t n, const int64_t *rows, int nrows, float *out) {
    uint16_t *h = malloc((size_t)n * 2);
    if (!h) return tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench", "no memory");
    for (int r = 0; r < nrows; r++) {
        cudaError_t e = cudaMemcpy(h, (const uint16_t *)y + rows[r] * n, (size_t)n * 2, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) {
            free(h);
            return tops__fail(TOPS_DEVICE_ERROR, "tensorops bench", "reading the output: %s", cudaGetErrorString(e));
        }
        tops_cast_to_f32(TOPS_DT_F16, out + (int64_t)r * n, h, n);
    }
    free(h);
    return TOPS_OK;
}

static int check_rows_of(int64_t m, int64_t *rows) {
    int n = 0;
    for (int i = 0; i < CHECK_ROWS; i++) {
        int64_t r = m == 1 ? 0 : (int64_t)i * (m - 1) / (CHECK_ROWS - 1);
        if (n == 0 || rows[n - 1] != r) rows[n++] = r;
    }
    return n;
}

typedef struct cuda_run {
    tops_bench_session *s;
    gpu g;
    char gpu_name[256];
    int64_t mmax;
    float *x_f32;        /* [mmax, K]: the activations' exact values */
    void *x_dev;         /* f16 [mmax, K] */
    void *y_dev;         /* f16 [mmax, N] */
    double *ref;
    float *got;
    double hbm_gbps, peak_gflops;
    double base_s[TOPS_BENCH_MAX_LIST];
    double lt_s[TOPS_BENCH_MAX_LIST]; /* cuBLASLt e4m3, the faster of its variants */
    int accuracy_failures;
    tops_bench_rows *rows;
    /* The baselines' graphs per M (cuBLASLt: its fastest variant), kept
       with their weight copies for the paired timing of our rows. */
    gemm_ctx f16_ctx[TOPS_BENCH_MAX_LIST], lt_ctx[TOPS_BENCH_MAX_LIST];
    call_graph f16_graph[TOPS_BENCH_MAX_LIST], lt_graph[TOPS_BENCH_MAX_LIST];
    const void **f16_w, **lt_w, **lt_x;
    int f16_copies, lt_copies;
    float *lt_scales;
} cuda_run;

/* base_s > 0: the baseline's median from the paired timing, else the one
   of its own case. */
static void fill_row(cuda_run *r, tops_bench_row *row, const char *format, const char *path, int64_t m,
                     double med, double mn, double pack_s, double wbytes, int mi, int fp8_baseline, double base_s) {
    const tops_bench_config *cfg = r->s->cfg;
    memset(row, 0, sizeof *row);
    snprintf(row->op, sizeof row->op, "matmul");
    snprintf(row->format, sizeof row->format, "%s", format);
    row->m = m, row->k = cfg->k, row->n = cfg->n;
    row->threads = 1;
    snprintf(row->isa, sizeof row->isa, "cuda:%d", r->g.device);
    snprintf(row->path, sizeof row->path, "%s", path);
    row->median_s = med;
    row->min_s = mn;
    row->pack_s = pack_s;
    /* FP8 rows against cuBLASLt e4m3 (when it ran), the others against cuBLAS f16. */
    double base = base_s > 0 ? base_s : fp8_baseline ? r->lt_s[mi] : r->base_s[mi];
    snprintf(row->baseline, sizeof row->baseline, "%s", base <= 0 ? "none" : fp8_baseline ? "cublaslt-e4m3" : "cublas-f16");
    row->baseline_median_s = base;
    double flops = 2.0 * (double)m * (double)cfg->n * (double)cfg->k;
    double min_bytes = wbytes + (double)m * (double)cfg->k * 2 + (double)m * (double)cfg->n * 2;
    tops_bench_row_derive(row, flops, wbytes, min_bytes, r->peak_gflops, r->hbm_gbps);
}

/* ---- the baselines ---------------------------------------------------------------- */

/* Device copies of one host buffer; NULL entries on failure. */
static tops_status upload_copies(const void *h, size_t bytes, int copies, const void ***out) {
    const void **w = calloc((size_t)copies, sizeof *w);
    if (!w) return tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench", "no memory");
    *out = w;
    for (int i = 0; i < copies; i++) {
        void *p = NULL;
        if (cudaMalloc(&p, bytes) != cudaSuccess) {
            (void)cudaGetLastError();
            return tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench", "device copy %d of %zu bytes", i, bytes);
        }
        w[i] = p;
        CU(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice), "uploading a weight copy");
    }
    return TOPS_OK;
}

static void free_copies(const void **w, int copies) {
    for (int i = 0; w && i < copies; i++)
        if (w[i]) cudaFree((void *)w[i]);
    free((void *)w);
}

/* Checks rows of the device output against f64 of (x_ref rows) x w_ref^T. */
static tops_status check_output(cuda_run *r, int64_t m, const float *x_ref, const float *w_ref, double *rel,
                                double *cos) {
    const tops_bench_config *cfg = r->s->cfg;
    int64_t rows[CHECK_ROWS];
    int nr = check_rows_of(m, rows);
    tops_status st = fetch_rows(r->y_dev, cfg->n, rows, nr, r->got);
    if (st != TOPS_OK) return st;
    tops_bench_reference_rows(x_ref, w_ref, cfg->k, cfg->n, rows, nr, r->ref);
    tops_bench_compare(r->ref, r->got, (int64_t)nr * cfg->n, rel, cos, NULL);
    return TOPS_OK;
}

static tops_status time_cublas_f16(cuda_run *r, const float *w_f32) {
    const tops_bench_config *cfg = r->s->cfg;
    size_t count = (size_t)cfg->n * (size_t)cfg->k, bytes = count * 2;
    int copies = rotation(&r->g, (double)bytes);
    uint16_t *h = malloc(bytes);
    float *wr = malloc(count * sizeof(float));
    tops_status st = TOPS_OK;
    if (!h || !wr) st = tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench", "no memory for the f16 weights");
    if (st == TOPS_OK) st = tops_cast_from_f32(TOPS_DT_F16, h, w_f32, (int64_t)count, 1);
    if (st == TOPS_OK) st = tops_cast_to_f32(TOPS_DT_F16, wr, h, (int64_t)count);
    if (st == TOPS_OK) {
        r->f16_copies = copies;
        st = upload_copies(h, bytes, copies, &r->f16_w);
    }
    for (int mi = 0; st == TOPS_OK && mi < cfg->nm; mi++) {
        int64_t m = cfg->m[mi];
        tops_bench_progress(r->s, "cuBLAS f16 M=%lld: timing (%d weight copies)", (long long)m, copies);
        gemm_ctx *c = &r->f16_ctx[mi];
        memset(c, 0, sizeof *c);
        c->g = &r->g, c->w = r->f16_w, c->nw = copies, c->x = r->x_dev, c->y = r->y_dev;
        c->m = (int)m, c->n = (int)cfg->n, c->k = (int)cfg->k;
        double med = 0, mn = 0, rel = NAN, cos = NAN;
        graph_capture(&r->g, &r->f16_graph[mi], enqueue_gemm_f16, c, copies * 4, 1);
        st = time_graph(&r->g, &r->f16_graph[mi], &med, &mn);
        if (st == TOPS_OK) st = check_output(r, m, r->x_f32, wr, &rel, &cos);
        if (st != TOPS_OK) break;
        r->base_s[mi] = med;
        tops_bench_row row;
        fill_row(r, &row, "f16 (cuBLAS)", r->f16_graph[mi].exec ? "cublasGemmEx (graph)" : "cublasGemmEx", m, med,
                 mn, 0, (double)bytes, mi, 0, 0);
        row.rel_l2 = rel;
        row.cos_sim = cos;
        row.rel_l2_bound = F16_OUT_REL_L2;
        row.accuracy_ok = rel <= F16_OUT_REL_L2;
        st = tops_bench_rows_push(r->rows, &row);
    }
    free(h);
    free(wr);
    return st;
}

/* cuBLASLt e4m3 x e4m3 -> f16, TN layout (the one its FP8 kernels take).
   Variants in order, each failure reported on stderr.  On the H200 with
   cuBLAS 13.0 every algorithm returns CUBLAS_STATUS_NOT_SUPPORTED (15) once
   A/B scale pointers are set; without them (scales of 1, the same kernels'
   arithmetic) they run, so the bench times those. */
typedef struct lt_variant {
    const char *name;
    cudaDataType_t out;
    int fast_accum, scales;
} lt_variant;
static const lt_variant lt_variants[] = {
    {"e4m3 f16-out", CUDA_R_16F, 0, 1},
    {"e4m3 f16-out fast-accum", CUDA_R_16F, 1, 1},
    {"e4m3 f16-out no-scales", CUDA_R_16F, 0, 0},
    {"e4m3 f16-out no-scales fast-accum", CUDA_R_16F, 1, 0},
    {"e4m3 bf16-out no-scales", CUDA_R_16BF, 0, 0},
};
#define LT_ALGOS 8

/* Sets up c for variant v: heuristic, then the first of its algorithms
   that runs.  0 when none does (reason on stderr). */
static int lt_setup(cuda_run *r, gemm_ctx *c, const lt_variant *v, const float *scales) {
    const tops_bench_config *cfg = r->s->cfg;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const float *sa = scales, *sb = scales + 1;
    int8_t fast = (int8_t)v->fast_accum;
    size_t ws = LT_WORKSPACE;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t heur[LT_ALGOS];
    int found = 0, ok = 0;
    cublasStatus_t bs = cublasLtMatmulDescCreate(&c->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (bs == CUBLAS_STATUS_SUCCESS && v->scales)
        bs = cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
    if (bs == CUBLAS_STATUS_SUCCESS && v->scales)
        bs = cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
    if (bs == CUBLAS_STATUS_SUCCESS && fast)
        bs = cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasLtMatrixLayoutCreate(&c->la, CUDA_R_8F_E4M3, (uint64_t)cfg->k, (uint64_t)cfg->n, cfg->k);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasLtMatrixLayoutCreate(&c->lb, CUDA_R_8F_E4M3, (uint64_t)cfg->k, (uint64_t)c->m, cfg->k);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasLtMatrixLayoutCreate(&c->ld, v->out, (uint64_t)cfg->n, (uint64_t)c->m, cfg->n);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasLtMatmulPreferenceCreate(&pref);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasLtMatmulAlgoGetHeuristic(r->g.lt, c->desc, c->la, c->lb, c->ld, c->ld, pref, LT_ALGOS, heur, &found);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (bs != CUBLAS_STATUS_SUCCESS || found < 1) {
        fprintf(stderr, "tensorops bench: cuBLASLt %s M=%d: set-up/heuristic status %d, %d algorithm(s)\n", v->name, c->m,
                (int)bs, found);
        return 0;
    }
    char first[160] = "";
    for (int i = 0; i < found && !ok; i++) {
        c->heur = heur[i];
        tops_status es = enqueue_lt_e4m3(c, 0);
        cudaError_t ce = es == TOPS_OK ? cudaStreamSynchronize(r->g.stream) : cudaSuccess;
        ok = es == TOPS_OK && ce == cudaSuccess;
        if (!ok && !first[0])
            snprintf(first, sizeof first, "%s", es != TOPS_OK ? tops_last_error() : cudaGetErrorString(ce));
        (void)cudaGetLastError();
    }
    if (!ok)
        fprintf(stderr, "tensorops bench: cuBLASLt %s M=%d: none of %d algorithms ran (first: %s)\n", v->name, c->m,
                found, first);
    return ok;
}

static void lt_release(gemm_ctx *c) {
    if (c->la) cublasLtMatrixLayoutDestroy(c->la);
    if (c->lb) cublasLtMatrixLayoutDestroy(c->lb);
    if (c->ld) cublasLtMatrixLayoutDestroy(c->ld);
    if (c->desc) cublasLtMatmulDescDestroy(c->desc);
    c->la = c->lb = c->ld = NULL;
    c->desc = NULL;
}

/* Every variant that runs is timed and gets a row; lt_s keeps the fastest,
   the baseline of the relaxed FP8 rows. */
static tops_status time_cublaslt_e4m3(cuda_run *r, const float *w_f32) {
    const tops_bench_config *cfg = r->s->cfg;
    size_t count = (size_t)cfg->n * (size_t)cfg->k, xcount = (size_t)r->mmax * (size_t)cfg->k;
    int copies = rotation(&r->g, (double)count);
    uint8_t *h = malloc(count), *xh = malloc(xcount);
    float *wr = malloc(count * sizeof(float)), *xr = malloc(xcount * sizeof(float));
    float *scales = NULL;
    const float ones[2] = {1.0f, 1.0f};
    tops_status st = TOPS_OK;
    if (!h || !xh || !wr || !xr) st = tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench", "no memory for e4m3 copies");
    if (st == TOPS_OK) st = tops_cast_from_f32(TOPS_DT_E4M3, h, w_f32, (int64_t)count, 1);
    if (st == TOPS_OK) st = tops_cast_to_f32(TOPS_DT_E4M3, wr, h, (int64_t)count);
    if (st == TOPS_OK) st = tops_cast_from_f32(TOPS_DT_E4M3, xh, r->x_f32, (int64_t)xcount, 1);
    if (st == TOPS_OK) st = tops_cast_to_f32(TOPS_DT_E4M3, xr, xh, (int64_t)xcount);
    if (st == TOPS_OK) {
        r->lt_copies = copies;
        st = upload_copies(h, count, copies, &r->lt_w);
    }
    if (st == TOPS_OK) st = upload_copies(xh, xcount, 1, &r->lt_x);
    if (st == TOPS_OK && cudaMalloc((void **)&scales, sizeof ones) != cudaSuccess)
        st = tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench", "scales");
    r->lt_scales = scales;
    if (st == TOPS_OK && cudaMemcpy(scales, ones, sizeof ones, cudaMemcpyHostToDevice) != cudaSuccess)
        st = tops__fail(TOPS_DEVICE_ERROR, "tensorops bench", "scales upload");
    int nv = (int)(sizeof lt_variants / sizeof lt_variants[0]);
    for (int mi = 0; st == TOPS_OK && mi < cfg->nm; mi++) {
        int64_t m = cfg->m[mi];
        /* Variants after the first working one with f16 out only add the
           fast-accumulation one (the other two are fallbacks). */
        int have_f16 = 0;
        for (int vi = 0; st == TOPS_OK && vi < nv; vi++) {
            const lt_variant *v = &lt_variants[vi];
            if (have_f16 && !v->fast_accum) continue;
            gemm_ctx c;
            call_graph cg;
            memset(&c, 0, sizeof c);
            memset(&cg, 0, sizeof cg);
            c.g = &r->g, c.w = r->lt_w, c.nw = copies, c.x = r->lt_x[0], c.y = r->y_dev;
            c.m = (int)m, c.n = (int)cfg->n, c.k = (int)cfg->k;
            int kept = 0;
            if (lt_setup(r, &c, v, scales)) {
                double med = 0, mn = 0, rel = NAN, cos = NAN;
                /* The output check reads f16; a bf16 output is timed only. */
                if (v->out == CUDA_R_16F) st = check_output(r, m, xr, wr, &rel, &cos);
                tops_bench_progress(r->s, "cuBLASLt %s M=%lld: timing (%d weight copies)", v->name, (long long)m, copies);
                if (st == TOPS_OK) {
                    graph_capture(&r->g, &cg, enqueue_lt_e4m3, &c, copies * 4, 1);
                    st = time_graph(&r->g, &cg, &med, &mn);
                }
                if (st == TOPS_OK) {
                    tops_bench_row row;
                    char path[64];
                    snprintf(path, sizeof path, "cublasLtMatmul %s%s", v->name, cg.exec ? " (graph)" : "");
                    fill_row(r, &row, "e4m3 (cuBLASLt)", path, m, med, mn, 0, (double)count, mi, 0, 0);
                    row.rel_l2 = rel;
                    row.cos_sim = cos;
                    row.rel_l2_bound = F16_OUT_REL_L2;
                    row.accuracy_ok = v->out != CUDA_R_16F || rel <= F16_OUT_REL_L2;
                    st = tops_bench_rows_push(r->rows, &row);
                    if (r->lt_s[mi] <= 0 || med < r->lt_s[mi]) { /* the fastest so far: kept for the paired timing */
                        r->lt_s[mi] = med;
                        graph_release(&r->lt_graph[mi]);
                        lt_release(&r->lt_ctx[mi]);
                        r->lt_ctx[mi] = c;
                        r->lt_graph[mi] = cg;
                        r->lt_graph[mi].ctx = &r->lt_ctx[mi];
                        kept = 1;
                    }
                    have_f16 |= v->out == CUDA_R_16F;
                }
            }
            if (!kept) {
                graph_release(&cg);
                lt_release(&c);
            }
        }
    }
    free(h);
    free(xh);
    free(wr);
    free(xr);
    return st;
}

static tops_status measure_ceilings(cuda_run *r) {
    /* HBM: device-to-device copies of 1 GiB, bytes read plus written. */
    copy_ctx c = {NULL, NULL, (size_t)1 << 30, r->g.stream};
    CU(cudaMalloc(&c.a, c.bytes), "cudaMalloc for the copy");
    CU(cudaMalloc(&c.b, c.bytes), "cudaMalloc for the copy");
    CU(cudaMemset(c.a, 0x5A, c.bytes), "cudaMemset");
    CU(cudaMemset(c.b, 0xA5, c.bytes), "cudaMemset");
    double med = 0, mn = 0;
    int graphed = 1;
    tops_bench_progress(r->s, "measuring HBM bandwidth (device-to-device copy)");
    graphed = 0; /* copies in a graph may run on the copy engines: enqueue them directly */
    tops_status st = time_calls(&r->g, enqueue_copy, &c, 4, &med, &mn, &graphed);
    cudaFree(c.a);
    cudaFree(c.b);
    if (st != TOPS_OK) return st;
    r->hbm_gbps = 2.0 * (double)c.bytes / med / 1e9;
    /* Compute: a large f16 GEMM through cuBLAS on random data. */
    const int sz = 8192;
    size_t bytes = (size_t)sz * sz * 2;
    void *a = NULL, *b = NULL, *y = NULL;
    CU(cudaMalloc(&a, bytes), "cudaMalloc");
    CU(cudaMalloc(&b, bytes), "cudaMalloc");
    CU(cudaMalloc(&y, bytes), "cudaMalloc");
    uint16_t *h = malloc(bytes);
    float *f = malloc((size_t)sz * sz * sizeof(float));
    if (h && f) {
        tops_bench_fill_normal(f, (int64_t)sz * sz, 7);
        tops_cast_from_f32(TOPS_DT_F16, h, f, (int64_t)sz * sz, 1);
        cudaMemcpy(a, h, bytes, cudaMemcpyHostToDevice);
        cudaMemcpy(b, h, bytes, cudaMemcpyHostToDevice);
    }
    free(h);
    free(f);
    const void *wa[1] = {a};
    gemm_ctx g;
    memset(&g, 0, sizeof g);
    g.g = &r->g, g.w = wa, g.nw = 1, g.x = b, g.y = y, g.m = sz, g.n = sz, g.k = sz;
    tops_bench_progress(r->s, "measuring the f16 tensor-core rate (cuBLAS %dx%dx%d)", sz, sz, sz);
    st = time_calls(&r->g, enqueue_gemm_f16, &g, 3, &med, &mn, &graphed);
    cudaFree(a);
    cudaFree(b);
    cudaFree(y);
    if (st != TOPS_OK) return st;
    r->peak_gflops = 2.0 * sz * (double)sz * sz / med / 1e9;
    return TOPS_OK;
}

/* ---- our kernels ----------------------------------------------------------------- */

static tops_status run_format(cuda_run *r, const float *w_f32, const char *name) {
    const tops_bench_config *cfg = r->s->cfg;
    int64_t nk[2] = {cfg->n, cfg->k};
    tops_format fmt;
    tops_tensor tq, tsrc, tdec;
    tops_tensor *copies = NULL;
    int ncopies = 0;
    float *decoded = malloc((size_t)cfg->n * (size_t)cfg->k * sizeof(float));
    memset(&tq, 0, sizeof tq);
    tops_status st = decoded ? tops_format_from_name(name, &fmt)
                             : tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench", "no memory for decoded weights");
    tops_bench_progress(r->s, "%s: quantizing and packing", name);
    if (st == TOPS_OK) st = tops_tensor_create(fmt, 2, nk, (tops_memory){TOPS_DEVICE_CPU, 0}, &tq);
    if (st == TOPS_OK) {
        tops_tensor_desc d;
        memset(&d, 0, sizeof d);
        d.format = tops_format_of(TOPS_DT_F32);
        d.rank = 2;
        d.extent[0] = cfg->n;
        d.extent[1] = cfg->k;
        d.data = (void *)w_f32;
        st = tops_tensor_view(&d, &tsrc);
        if (st == TOPS_OK) st = tops_quantize(&tsrc, &tq, NULL);
        d.data = decoded;
        if (st == TOPS_OK) st = tops_tensor_view(&d, &tdec);
        if (st == TOPS_OK) st = tops_dequantize(&tq, &tdec);
    }
    tops_matmul2d_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.transpose_right = 1;
    desc.relaxed_precision = cfg->relaxed;
    double pack_s = 0, wbytes = 0;
    if (st == TOPS_OK) {
        copies = calloc(512, sizeof *copies);
        if (!copies) st = tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench", "no memory");
    }
    if (st == TOPS_OK) {
        double t0 = tops_bench_now();
        st = tops_pack_right(&r->g.exec, &desc, &tq, &copies[0]);
        pack_s = tops_bench_now() - t0;
        if (st == TOPS_OK) ncopies = 1;
    }
    if (st == TOPS_OK) {
        wbytes = (double)tops__cuda_packed_bytes(&copies[0]);
        int want = rotation(&r->g, wbytes);
        while (st == TOPS_OK && ncopies < want) {
            st = tops__cuda_packed_clone(&copies[0], &copies[ncopies]);
            if (st == TOPS_OK) ncopies++;
        }
    }
    for (int mi = 0; st == TOPS_OK && mi < cfg->nm; mi++) {
        int64_t m = cfg->m[mi];
        ours_ctx c;
        memset(&c, 0, sizeof c);
        c.g = &r->g;
        c.desc = desc;
        c.w = copies;
        c.nw = ncopies;
        const tops_memory dev_mem = {TOPS_DEVICE_CUDA, r->g.device};
        st = tops_bench_view2d(TOPS_DT_F16, r->x_dev, m, cfg->k, dev_mem, &c.x);
        if (st == TOPS_OK) st = tops_bench_view2d(TOPS_DT_F16, r->y_dev, m, cfg->n, dev_mem, &c.y);
        if (st != TOPS_OK) break;
        /* Accuracy first, on a NaN-poisoned output. */
        tops_bench_progress(r->s, "%s M=%lld: checking against f64", name, (long long)m);
        CU(cudaMemsetAsync(r->y_dev, 0xFF, (size_t)m * (size_t)cfg->n * 2, r->g.stream), "poisoning the output");
        double rel = NAN, cos = NAN, med = 0, mn = 0;
        st = enqueue_ours(&c, 0);
        if (st == TOPS_OK) CU(cudaStreamSynchronize(r->g.stream), "running the matmul");
        if (st == TOPS_OK) st = check_output(r, m, r->x_f32, decoded, &rel, &cos);
        tops_bench_progress(r->s, "%s M=%lld: timing (%d weight copies)", name, (long long)m, ncopies);
        const char *kernel = tops__cuda_matmul_path(&copies[0], m, desc.relaxed_precision);
        int fp8 = strncmp(kernel, "fp8", 3) == 0;
        /* Timed in alternation with its baseline when both are graphs (the
           row's baseline median is then that window's). */
        const call_graph *base = fp8 ? &r->lt_graph[mi] : &r->f16_graph[mi];
        call_graph cg;
        double base_s = 0;
        memset(&cg, 0, sizeof cg);
        if (st == TOPS_OK) {
            graph_capture(&r->g, &cg, enqueue_ours, &c, ncopies * 4, 1);
            st = cg.exec && base->exec ? time_paired(&r->g, &cg, base, &med, &mn, &base_s)
                                       : time_graph(&r->g, &cg, &med, &mn);
        }
        const int graphed = cg.exec != NULL;
        graph_release(&cg);
        if (st != TOPS_OK) break;
        char path[64];
        if (!fp8) kernel = tops__cu_last_kernel(); /* which strict kernel the launch picked */
        /* e4m3 activations (the FP8 GEMM, wgmma_q8): the FP8 accuracy bound */
        const int e4m3_act = fp8 || strstr(kernel, "wgmma_q8") != NULL;
        snprintf(path, sizeof path, "%s%s", kernel, graphed ? " (graph)" : "");
        tops_bench_row row;
        fill_row(r, &row, name, path, m, med, mn, pack_s, wbytes, mi, fp8, base_s);
        row.rel_l2 = rel;
        row.cos_sim = cos;
        row.rel_l2_bound = e4m3_act ? FP8_REL_L2 : F16_OUT_REL_L2;
        row.accuracy_ok = rel <= row.rel_l2_bound;
        if (!row.accuracy_ok) r->accuracy_failures++;
        st = tops_bench_rows_push(r->rows, &row);
    }
    for (int i = 0; i < ncopies; i++) tops_tensor_destroy(&copies[i]);
    free(copies);
    tops_tensor_destroy(&tq);
    free(decoded);
    return st;
}

static tops_status gpu_open(cuda_run *r, int device) {
    gpu *g = &r->g;
    g->device = device;
    tops_cuda_device_info info;
    tops_status st = tops_cuda_get_device_info(device, &info);
    if (st != TOPS_OK) return st;
    snprintf(r->gpu_name, sizeof r->gpu_name, "%s", info.name);
    g->l2_bytes = (double)info.l2_bytes;
    CU(cudaSetDevice(device), "cudaSetDevice");
    CU(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    CU(cudaEventCreate(&g->t0), "cudaEventCreate");
    CU(cudaEventCreate(&g->t1), "cudaEventCreate");
    CU(cudaMalloc(&g->lt_ws, LT_WORKSPACE), "cudaMalloc for the cuBLAS workspace");
    if (cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(g->blas, g->stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(g->blas, g->lt_ws, LT_WORKSPACE) != CUBLAS_STATUS_SUCCESS ||
        cublasLtCreate(&g->lt) != CUBLAS_STATUS_SUCCESS)
        return tops__fail(TOPS_DEVICE_ERROR, "tensorops bench", "could not create the cuBLAS handles");
    g->exec = tops_exec_default();
    g->exec.device = (tops_device){TOPS_DEVICE_CUDA, device};
    g->exec.stream = g->stream;
    return TOPS_OK;
}

static void gpu_close(gpu *g) {
    if (g->blas) cublasDestroy(g->blas);
    if (g->lt) cublasLtDestroy(g->lt);
    if (g->lt_ws) cudaFree(g->lt_ws);
    if (g->t0) cudaEventDestroy(g->t0);
    if (g->t1) cudaEventDestroy(g->t1);
    if (g->stream) cudaStreamDestroy(g->stream);
}

tops_status tops_bench_matmul_cuda(tops_bench_session *s, tops_bench_rows *rows) {
    static const char fn[] = "tensorops bench";
    const tops_bench_config *cfg = s->cfg;
    cuda_run r;
    memset(&r, 0, sizeof r);
    r.s = s;
    r.rows = rows;
    tops_status st = gpu_open(&r, cfg->device.index);
    if (st != TOPS_OK) {
        gpu_close(&r.g);
        return st;
    }
    r.mmax = 1;
    for (int i = 0; i < cfg->nm; i++)
        if (cfg->m[i] > r.mmax) r.mmax = cfg->m[i];
    size_t wcount = (size_t)cfg->n * (size_t)cfg->k, xcount = (size_t)r.mmax * (size_t)cfg->k;
    float *original = malloc(wcount * sizeof(float));
    uint16_t *xh = malloc(xcount * 2);
    r.x_f32 = malloc(xcount * sizeof(float));
    r.ref = malloc((size_t)CHECK_ROWS * (size_t)cfg->n * sizeof(double));
    r.got = malloc((size_t)CHECK_ROWS * (size_t)cfg->n * sizeof(float));
    if (!original || !xh || !r.x_f32 || !r.ref || !r.got) {
        st = tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for a %lld x %lld case", (long long)cfg->n, (long long)cfg->k);
        goto done;
    }
    tops_bench_progress(s, "generating %lld x %lld weights and activations", (long long)cfg->n, (long long)cfg->k);
    tops_bench_fill_normal(original, (int64_t)wcount, 1);
    tops_bench_fill_normal(r.x_f32, (int64_t)xcount, 100);
    tops_cast_from_f32(TOPS_DT_F16, xh, r.x_f32, (int64_t)xcount, 1);
    tops_cast_to_f32(TOPS_DT_F16, r.x_f32, xh, (int64_t)xcount); /* the exact inputs */
    if (cudaMalloc(&r.x_dev, xcount * 2) != cudaSuccess ||
        cudaMalloc(&r.y_dev, (size_t)r.mmax * (size_t)cfg->n * 2) != cudaSuccess ||
        cudaMemcpy(r.x_dev, xh, xcount * 2, cudaMemcpyHostToDevice) != cudaSuccess) {
        st = tops__fail(TOPS_DEVICE_ERROR, fn, "could not place the activations on cuda:%d", r.g.device);
        goto done;
    }
    if ((st = measure_ceilings(&r)) != TOPS_OK) goto done;
    if ((st = time_cublas_f16(&r, original)) != TOPS_OK) goto done;
    if ((st = time_cublaslt_e4m3(&r, original)) != TOPS_OK) {
        fprintf(stderr, "tensorops bench: cuBLASLt e4m3 baseline failed: %s\n", tops_last_error());
        st = TOPS_OK;
    }
    int failed = 0;
    s->case_count = cfg->nformats;
    for (int f = 0; f < cfg->nformats; f++) {
        s->case_index = f + 1;
        st = run_format(&r, original, cfg->formats[f]);
        if (st != TOPS_OK) {
            tops_bench_progress(s, NULL);
            fprintf(stderr, "tensorops bench: format %s failed: %s\n", cfg->formats[f], tops_last_error());
            (void)cudaGetLastError();
            failed++;
            st = TOPS_OK;
        }
    }
    tops_bench_progress(s, NULL);
    printf("gpu cuda:%d %s: HBM %.0f GB/s (device-to-device copy, read + write), f16 tensor cores %.0f TFLOP/s "
           "(cuBLAS 8192^3), L2 %.0f MB; same run\n",
           r.g.device, r.gpu_name, r.hbm_gbps, r.peak_gflops / 1e3, r.g.l2_bytes / 1e6);
    if (failed || r.accuracy_failures)
        st = tops__fail(TOPS_INTERNAL, fn, "%d format(s) failed to run and %d case(s) missed their accuracy bound",
                        failed, r.accuracy_failures);
done:
    for (int i = 0; i < TOPS_BENCH_MAX_LIST; i++) {
        graph_release(&r.f16_graph[i]);
        graph_release(&r.lt_graph[i]);
        lt_release(&r.lt_ctx[i]);
    }
    free_copies(r.f16_w, r.f16_copies);
    free_copies(r.lt_w, r.lt_copies);
    free_copies(r.lt_x, 1);
    if (r.lt_scales) cudaFree(r.lt_scales);
    free(original);
    free(xh);
    free(r.x_f32);
    free(r.ref);
    free(r.got);
    if (r.x_dev) cudaFree(r.x_dev);
    if (r.y_dev) cudaFree(r.y_dev);
    gpu_close(&r.g);
    return st;
}

#else
typedef int tops_bench_cuda_unused; /* ISO C wants a declaration in every file */
#endif
