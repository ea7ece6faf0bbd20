/* `tensorops bench --op attention` on the CPU: fused tops_attention
   against unfused attention through OpenBLAS in the same run (sgemm for
   Q K^T into an Sq x Sk buffer, a row softmax, sgemm for P V), with the
   FMA peak of the same run as the floor, and the result checked against
   f64 on sampled query rows.  With --varlen LENS: a batch of sequences of
   those lengths run as one packed varlen call against the same batch
   padded to the longest and run whole (what a caller without lengths
   does), timed in alternation. */
#include "bench.h"

#include "cpu/dispatch.h"
#include "drive/attention.h"
#include "core/numeric.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef TOPS_HAVE_OPENBLAS
#include <cblas.h>
#endif

typedef tops_bench_attn_options attn_options;

static attn_options opts;

tops_bench_attn_options *tops_bench_attention_options(void) { return &opts; }

#define CHECK_ROWS 8

static int64_t parse_size(const char *s, int64_t max) {
    char *end;
    long long v = strtoll(s, &end, 10);
    return *s && !*end && v >= 1 && v <= max ? (int64_t)v : 0;
}

int tops_bench_attention_parse(tops_bench_config *cfg, int argc, char **argv, int *i) {
    static const struct {
        const char *flag;
        int64_t *dst;
        int64_t max;
    } sizes[] = {{"--batch", &opts.batch, 4096},     {"--heads", &opts.heads, 4096},
                 {"--kv-heads", &opts.kv_heads, 4096}, {"--seq", &opts.seq, (int64_t)1 << 24},
                 {"--kv-seq", &opts.kv_seq, (int64_t)1 << 24}, {"--head-dim", &opts.head_dim, 256}};
    cfg->op_options = &opts;
    const char *a = argv[*i];
    if (strcmp(a, "--causal") == 0 || strcmp(a, "--no-causal") == 0) {
        opts.causal_mode = a[2] == 'c' ? 1 : 2;
        return 1;
    }
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        if (strcmp(a, sizes[s].flag) != 0) continue;
        if (*i + 1 >= argc) {
            fprintf(stderr, "tensorops bench: %s needs a value\n", a);
            return -1;
        }
        int64_t v = parse_size(argv[++*i], sizes[s].max);
        if (!v) {
            fprintf(stderr, "tensorops bench: %s \"%s\": expected an integer in 1..%lld\n", a, argv[*i],
                    (long long)sizes[s].max);
            return -1;
        }
        *sizes[s].dst = v;
        return 1;
    }
    if (strcmp(a, "--varlen") == 0) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "tensorops bench: --varlen needs a list of sequence lengths\n");
            return -1;
        }
        const char *v = argv[++*i];
        opts.nvarlen = 0;
        for (const char *p = v; *p;) {
            char item[32];
            size_t n = strcspn(p, ",");
            int64_t len = n < sizeof item ? (memcpy(item, p, n), item[n] = '\0', parse_size(item, (int64_t)1 << 20)) : 0;
            if (!len || opts.nvarlen == 64) {
                fprintf(stderr, "tensorops bench: --varlen \"%s\": expected 1..64 lengths in 1..%d, comma-separated\n",
                        v, 1 << 20);
                return -1;
            }
            opts.varlen[opts.nvarlen++] = (int32_t)len;
            p += n + (p[n] == ',');
        }
        if (!opts.nvarlen) {
            fprintf(stderr, "tensorops bench: --varlen \"%s\": expected 1..64 lengths\n", v);
            return -1;
        }
        return 1;
    }
    if (strcmp(a, "--kv-format") == 0) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "tensorops bench: --kv-format needs a list of formats\n");
            return -1;
        }
        const char *v = argv[++*i];
        opts.nkv = 0;
        for (const char *p = v; *p;) {
            size_t n = strcspn(p, ",");
            tops_format f;
            char item[24];
            if (n == 0 || n >= sizeof item || opts.nkv == 8 ||
                (memcpy(item, p, n), item[n] = '\0', tops_format_from_name(item, &f)) != TOPS_OK) {
                fprintf(stderr, "tensorops bench: --kv-format \"%s\": expected 1..8 format names, comma-separated\n", v);
                return -1;
            }
            snprintf(opts.kv_formats[opts.nkv++], sizeof opts.kv_formats[0], "%s", item);
            p += n + (p[n] == ',');
        }
        return 1;
    }
    if (strcmp(a, "--dtype") == 0) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "tensorops bench: --dtype needs a value\n");
            return -1;
        }
        const char *v = argv[++*i];
        if (strcmp(v, "f32") != 0 && strcmp(v, "f16") != 0 && strcmp(v, "bf16") != 0) {
            fprintf(stderr, "tensorops bench: --dtype \"%s\": expected f32, f16 or bf16\n", v);
            return -1;
        }
        if (opts.ndtypes < 3) snprintf(opts.dtypes[opts.ndtypes++], sizeof opts.dtypes[0], "%s", v);
        return 1;
    }
    return 0;
}

tops_status tops_bench_attention_prepare(tops_bench_config *cfg) {
    static const char fn[] = "tensorops bench --op attention";
    if (cfg->nformats || cfg->nm || cfg->k || cfg->n)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                          "--format, --m, --k and --n are matmul flags; use --dtype, --seq, --kv-seq, --head-dim");
    if (cfg->relaxed) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "--relaxed has no attention path");
    cfg->op_options = &opts;
    if (opts.nvarlen) {
        if (opts.batch || opts.seq || opts.kv_seq)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                              "--varlen sets the batch and the lengths; leave out --batch, --seq and --kv-seq");
        int64_t longest = 0;
        for (int i = 0; i < opts.nvarlen; i++) longest = opts.varlen[i] > longest ? opts.varlen[i] : longest;
        opts.batch = opts.nvarlen;
        opts.seq = opts.kv_seq = longest;
    }
    if (!opts.batch) opts.batch = 1;
    if (!opts.heads) opts.heads = 8;
    if (!opts.kv_heads) opts.kv_heads = opts.heads;
    if (!opts.seq) opts.seq = 2048;
    if (!opts.kv_seq) opts.kv_seq = opts.seq;
    if (!opts.head_dim) opts.head_dim = 128;
    if (!opts.ndtypes) snprintf(opts.dtypes[opts.ndtypes++], sizeof opts.dtypes[0], "f32");
    if (opts.head_dim < 16)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "--head-dim %lld: it must be 16..256", (long long)opts.head_dim);
    if (opts.heads % opts.kv_heads != 0)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "--heads %lld is not a multiple of --kv-heads %lld",
                          (long long)opts.heads, (long long)opts.kv_heads);
    return TOPS_OK;
}

/* ---- data ------------------------------------------------------------------ */

typedef struct attn_data {
    tops_tensor q, k, v, out;
    float *qf, *kf, *vf; /* the values the tensors hold, as f32 [B, H, S, D] */
    int64_t nq, nk;
} attn_data;

static void data_free(attn_data *d) {
    tops_tensor_destroy(&d->q);
    tops_tensor_destroy(&d->k);
    tops_tensor_destroy(&d->v);
    tops_tensor_destroy(&d->out);
    tops__aligned_free(d->qf);
    tops__aligned_free(d->kf);
    tops__aligned_free(d->vf);
    memset(d, 0, sizeof *d);
}

/* Fills t with normal values (rounded to its dtype) and keeps them as f32. */
static void fill(tops_tensor *t, float *vals, int64_t n, uint64_t seed) {
    tops_bench_fill_normal(vals, n, seed);
    for (int64_t i = 0; i < n; i++) {
        if (t->format.id == TOPS_FMT_F32) {
            ((float *)t->data)[i] = vals[i];
        } else if (t->format.id == TOPS_FMT_F16) {
            uint16_t h = tops__f32_to_f16(vals[i]);
            ((uint16_t *)t->data)[i] = h;
            vals[i] = tops__f16_to_f32(h);
        } else {
            uint16_t h = tops__f32_to_bf16(vals[i]);
            ((uint16_t *)t->data)[i] = h;
            vals[i] = tops__bf16_to_f32(h);
        }
    }
}

static tops_status data_make(const char *dtype, attn_data *d) {
    static const char fn[] = "tensorops bench --op attention";
    memset(d, 0, sizeof *d);
    tops_dtype dt;
    tops_status st = tops_dtype_from_name(dtype, &dt);
    if (st != TOPS_OK) return st;
    tops_format f = tops_format_of(dt);
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    int64_t qe[4] = {opts.batch, opts.heads, opts.seq, opts.head_dim};
    int64_t ke[4] = {opts.batch, opts.kv_heads, opts.kv_seq, opts.head_dim};
    d->nq = qe[0] * qe[1] * qe[2] * qe[3];
    d->nk = ke[0] * ke[1] * ke[2] * ke[3];
    if ((st = tops_tensor_create(f, 4, qe, host, &d->q)) != TOPS_OK || (st = tops_tensor_create(f, 4, ke, host, &d->k)) != TOPS_OK ||
        (st = tops_tensor_create(f, 4, ke, host, &d->v)) != TOPS_OK ||
        (st = tops_tensor_create(f, 4, qe, host, &d->out)) != TOPS_OK) {
        data_free(d);
        return st;
    }
    d->qf = tops__aligned_alloc((size_t)d->nq * sizeof(float));
    d->kf = tops__aligned_alloc((size_t)d->nk * sizeof(float));
    d->vf = tops__aligned_alloc((size_t)d->nk * sizeof(float));
    if (!d->qf || !d->kf || !d->vf) {
        data_free(d);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "no memory for the inputs");
    }
    fill(&d->q, d->qf, d->nq, 11);
    fill(&d->k, d->kf, d->nk, 12);
    fill(&d->v, d->vf, d->nk, 13);
    return TOPS_OK;
}

static int64_t position_offset(void) { return opts.kv_seq - opts.seq; }

/* f64 attention for query row i of head (b, h). */
static void reference_row(const attn_data *d, int causal, int64_t b, int64_t h, int64_t i, double *out, double *logit) {
    int64_t D = opts.head_dim, Sk = opts.kv_seq, hk = h / (opts.heads / opts.kv_heads);
    const float *q = d->qf + ((b * opts.heads + h) * opts.seq + i) * D;
    int64_t pos = i + position_offset();
    double m = -INFINITY, scale = 1.0 / sqrt((double)D);
    for (int64_t j = 0; j < Sk; j++) {
        logit[j] = -INFINITY;
        if (causal && j > pos) continue;
        const float *k = d->kf + ((b * opts.kv_heads + hk) * Sk + j) * D;
        double s = 0;
        for (int64_t x = 0; x < D; x++) s += (double)q[x] * k[x];
        logit[j] = s * scale;
        if (logit[j] > m) m = logit[j];
    }
    for (int64_t x = 0; x < D; x++) out[x] = 0;
    if (m == -INFINITY) return;
    double sum = 0;
    for (int64_t j = 0; j < Sk; j++) {
        if (logit[j] == -INFINITY) continue;
        double p = exp(logit[j] - m);
        sum += p;
        const float *v = d->vf + ((b * opts.kv_heads + hk) * Sk + j) * D;
        for (int64_t x = 0; x < D; x++) out[x] += p * v[x];
    }
    for (int64_t x = 0; x < D; x++) out[x] /= sum;
}

static float out_at(const tops_tensor *t, int64_t idx) {
    if (t->format.id == TOPS_FMT_F32) return ((const float *)t->data)[idx];
    if (t->format.id == TOPS_FMT_F16) return tops__f16_to_f32(((const uint16_t *)t->data)[idx]);
    return tops__bf16_to_f32(((const uint16_t *)t->data)[idx]);
}

/* ---- timed calls ------------------------------------------------------------ */

typedef struct fused_call {
    const tops_exec *exec;
    const tops_attention_desc *desc;
    attn_data *d;
} fused_call;

static tops_status call_fused(void *ctx, int it) {
    (void)it;
    fused_call *c = ctx;
    return tops_attention(c->exec, c->desc, &c->d->q, &c->d->k, &c->d->v, &c->d->out);
}

#ifdef TOPS_HAVE_OPENBLAS
typedef struct unfused_call {
    const attn_data *d;
    int causal, threads;
    float *scores; /* [Sq, Sk]: what the fused kernel never materialises */
    float *out;    /* [B, H, Sq, D] f32 */
} unfused_call;

/* Row softmax in place with the causal mask; threads over rows. */
static void softmax_rows(float *s, int64_t rows, int64_t cols, int causal, int threads) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
    for (int64_t i = 0; i < rows; i++) {
        float *r = s + i * cols;
        int64_t end = causal ? i + position_offset() + 1 : cols;
        if (end > cols) end = cols;
        if (end < 0) end = 0;
        float m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < end; j++) m = r[j] > m ? r[j] : m;
        for (int64_t j = 0; j < end; j++) {
            r[j] = expf(r[j] - m);
            sum += r[j];
        }
        float inv = sum > 0 ? 1.0f / sum : 0.0f;
        for (int64_t j = 0; j < end; j++) r[j] *= inv;
        for (int64_t j = end; j < cols; j++) r[j] = 0.0f;
    }
    (void)threads;
}

static tops_status call_unfused(void *ctx, int it) {
    (void)it;
    unfused_call *c = ctx;
    int64_t Sq = opts.seq, Sk = opts.kv_seq, D = opts.head_dim, group = opts.heads / opts.kv_heads;
    float scale = 1.0f / sqrtf((float)D);
    for (int64_t b = 0; b < opts.batch; b++)
        for (int64_t h = 0; h < opts.heads; h++) {
            int64_t hk = h / group;
            const float *q = c->d->qf + (b * opts.heads + h) * Sq * D;
            const float *k = c->d->kf + (b * opts.kv_heads + hk) * Sk * D;
            const float *v = c->d->vf + (b * opts.kv_heads + hk) * Sk * D;
            float *o = c->out + (b * opts.heads + h) * Sq * D;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)Sq, (int)Sk, (int)D, scale, q, (int)D, k, (int)D,
                        0.0f, c->scores, (int)Sk);
            softmax_rows(c->scores, Sq, Sk, c->causal, c->threads);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Sq, (int)D, (int)Sk, 1.0f, c->scores, (int)Sk, v,
                        (int)D, 0.0f, o, (int)D);
        }
    return TOPS_OK;
}
#endif

/* Query/key pairs that the mask leaves visible, over all heads. */
static double visible_pairs(int causal) {
    double per_head = 0;
    for (int64_t i = 0; i < opts.seq; i++) {
        int64_t n = causal ? i + position_offset() + 1 : opts.kv_seq;
        per_head += (double)(n < 0 ? 0 : n > opts.kv_seq ? opts.kv_seq : n);
    }
    return per_head * (double)opts.batch * (double)opts.heads;
}

static tops_status run_case(tops_bench_session *s, attn_data *d, const char *dtype, int causal, tops_bench_rows *rows,
                            int *accuracy_failures) {
    const tops_bench_config *cfg = s->cfg;
    tops_exec exec = tops_exec_default();
    exec.threads = cfg->threads;
    tops_attention_desc desc = tops_attention_desc_default();
    desc.causal = causal;
    fused_call fc = {&exec, &desc, d};
    int64_t D = opts.head_dim;

    /* Accuracy on a NaN-poisoned output: an unwritten element shows. */
    tops_bench_progress(s, "%s %s: checking against f64", dtype, causal ? "causal" : "non-causal");
    size_t esize = (size_t)tops_format_get_info(d->out.format.id)->pack_bytes; /* bytes per element */
    memset(d->out.data, 0xff, (size_t)d->nq * esize);
    tops_status st = call_fused(&fc, 0);
    if (st != TOPS_OK) return st;
    double *ref = malloc((size_t)CHECK_ROWS * (size_t)D * sizeof(double));
    double *logit = malloc((size_t)opts.kv_seq * sizeof(double));
    float *got = malloc((size_t)CHECK_ROWS * (size_t)D * sizeof(float));
    if (!ref || !logit || !got) {
        free(ref), free(logit), free(got);
        return tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench", "no memory for the f64 check");
    }
    for (int r = 0; r < CHECK_ROWS; r++) {
        int64_t b = r % opts.batch, h = (r * 5) % opts.heads;
        int64_t i = opts.seq == 1 ? 0 : (int64_t)r * (opts.seq - 1) / (CHECK_ROWS - 1);
        reference_row(d, causal, b, h, i, ref + r * D, logit);
        for (int64_t x = 0; x < D; x++) got[r * D + x] = out_at(&d->out, ((b * opts.heads + h) * opts.seq + i) * D + x);
    }
    double rel, cos;
    tops_bench_compare(ref, got, CHECK_ROWS * D, &rel, &cos, NULL);
    free(ref), free(logit), free(got);

    tops_bench_progress(s, "%s %s: timing fused", dtype, causal ? "causal" : "non-causal");
    tops_bench_timing t;
    st = tops_bench_time(call_fused, &fc, 1, cfg->repeat, cfg->min_seconds, &t);
    if (st != TOPS_OK) return st;

    tops_bench_row row;
    memset(&row, 0, sizeof row);
    snprintf(row.baseline, sizeof row.baseline, "none");
#ifdef TOPS_HAVE_OPENBLAS
    {
        unfused_call uc = {d, causal, cfg->threads, NULL, NULL};
        uc.scores = tops__aligned_alloc((size_t)opts.seq * (size_t)opts.kv_seq * sizeof(float));
        uc.out = tops__aligned_alloc((size_t)d->nq * sizeof(float));
        if (!uc.scores || !uc.out) {
            tops__aligned_free(uc.scores), tops__aligned_free(uc.out);
            return tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench", "no memory for the unfused baseline's %lld x %lld scores",
                              (long long)opts.seq, (long long)opts.kv_seq);
        }
        openblas_set_num_threads(cfg->threads);
        tops_bench_progress(s, "%s %s: timing unfused OpenBLAS", dtype, causal ? "causal" : "non-causal");
        tops_bench_timing bt;
        st = tops_bench_time(call_unfused, &uc, 1, cfg->repeat, cfg->min_seconds, &bt);
        tops__aligned_free(uc.scores);
        tops__aligned_free(uc.out);
        if (st != TOPS_OK) return st;
        snprintf(row.baseline, sizeof row.baseline, "openblas-unfused");
        row.baseline_median_s = bt.median_s;
    }
#endif
    const tops_bench_roofline *roof;
    st = tops_bench_session_roofline(s, &roof);
    if (st != TOPS_OK) return st;
    tops_cpu_info ci;
    tops_cpu_get_info(&ci);
    snprintf(row.op, sizeof row.op, "attention");
    snprintf(row.format, sizeof row.format, "%s", dtype);
    row.m = opts.seq, row.n = opts.kv_seq, row.k = D;
    row.batch = opts.batch, row.heads = opts.heads, row.kv_heads = opts.kv_heads, row.causal = causal;
    row.threads = cfg->threads;
    snprintf(row.isa, sizeof row.isa, "%s", tops_isa_name(ci.isa));
    snprintf(row.path, sizeof row.path, "fused/%s",
             tops__attention_kernel_name(tops__kernels_get(), &d->q, &d->k, &d->v, &d->out));
    row.median_s = t.median_s;
    row.min_s = t.min_s;
    row.rel_l2 = rel;
    row.cos_sim = cos;
    row.rel_l2_bound = d->out.format.id == TOPS_FMT_F32 ? 1e-5 : d->out.format.id == TOPS_FMT_F16 ? 2e-3 : 1.5e-2;
    row.accuracy_ok = rel <= row.rel_l2_bound;
    if (!row.accuracy_ok) (*accuracy_failures)++;
    double flops = 4.0 * (double)D * visible_pairs(causal);
    double kv_bytes = 2.0 * (double)d->nk * (double)esize, qo_bytes = 2.0 * (double)d->nq * (double)esize;
    tops_bench_row_derive(&row, flops, kv_bytes, kv_bytes + qo_bytes, roof->fma_gflops, roof->read_gbps);
    return tops_bench_rows_push(rows, &row);
}

/* ---- --varlen: one packed call against the padded batch -------------------- */

/* The padded inputs' sequences packed [T, H, D] (the same values), and
   their offsets. */
typedef struct varlen_data {
    tops_tensor q, k, v, out;
    int32_t cu[65];
} varlen_data;

static void varlen_free(varlen_data *p) {
    tops_tensor_destroy(&p->q);
    tops_tensor_destroy(&p->k);
    tops_tensor_destroy(&p->v);
    tops_tensor_destroy(&p->out);
}

/* Copies rows [0, len) of every (b, h) of the padded src into packed dst. */
static void pack_rows(const tops_tensor *src, tops_tensor *dst, const int32_t *cu, int64_t heads, size_t esize) {
    int64_t D = opts.head_dim;
    for (int b = 0; b < opts.nvarlen; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < cu[b + 1] - cu[b]; i++)
                memcpy((char *)dst->data + (size_t)(((cu[b] + i) * heads + h) * D) * esize,
                       (const char *)src->data + (size_t)(((b * heads + h) * opts.seq + i) * D) * esize,
                       (size_t)D * esize);
}

static tops_status varlen_make(const attn_data *d, varlen_data *p) {
    memset(p, 0, sizeof *p);
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    p->cu[0] = 0;
    for (int b = 0; b < opts.nvarlen; b++) p->cu[b + 1] = p->cu[b] + opts.varlen[b];
    int64_t T = p->cu[opts.nvarlen], D = opts.head_dim;
    int64_t qe[3] = {T, opts.heads, D}, ke[3] = {T, opts.kv_heads, D};
    tops_status st;
    if ((st = tops_tensor_create(d->q.format, 3, qe, host, &p->q)) != TOPS_OK ||
        (st = tops_tensor_create(d->k.format, 3, ke, host, &p->k)) != TOPS_OK ||
        (st = tops_tensor_create(d->v.format, 3, ke, host, &p->v)) != TOPS_OK ||
        (st = tops_tensor_create(d->out.format, 3, qe, host, &p->out)) != TOPS_OK) {
        varlen_free(p);
        return st;
    }
    size_t esize = (size_t)tops_format_get_info(d->q.format.id)->pack_bytes; /* bytes per element */
    pack_rows(&d->q, &p->q, p->cu, opts.heads, esize);
    pack_rows(&d->k, &p->k, p->cu, opts.kv_heads, esize);
    pack_rows(&d->v, &p->v, p->cu, opts.kv_heads, esize);
    return TOPS_OK;
}

typedef struct varlen_call {
    const tops_exec *exec;
    const tops_attention_desc *desc;
    varlen_data *p;
} varlen_call;

static tops_status call_varlen(void *ctx, int it) {
    (void)it;
    varlen_call *c = ctx;
    return tops_attention(c->exec, c->desc, &c->p->q, &c->p->k, &c->p->v, &c->p->out);
}

/* f64 attention for query row i of sequence b, head h (its own length). */
static void reference_seq_row(const attn_data *d, int causal, int64_t b, int64_t h, int64_t i, double *out,
                              double *logit) {
    int64_t D = opts.head_dim, S = opts.seq, len = opts.varlen[b], hk = h / (opts.heads / opts.kv_heads);
    const float *q = d->qf + ((b * opts.heads + h) * S + i) * D;
    double m = -INFINITY, scale = 1.0 / sqrt((double)D), sum = 0;
    int64_t end = causal ? i + 1 : len;
    for (int64_t j = 0; j < end; j++) {
        const float *k = d->kf + ((b * opts.kv_heads + hk) * S + j) * D;
        double x = 0;
        for (int64_t e = 0; e < D; e++) x += (double)q[e] * k[e];
        logit[j] = x * scale;
        if (logit[j] > m) m = logit[j];
    }
    for (int64_t e = 0; e < D; e++) out[e] = 0;
    for (int64_t j = 0; j < end; j++) {
        double pj = exp(logit[j] - m);
        sum += pj;
        const float *v = d->vf + ((b * opts.kv_heads + hk) * S + j) * D;
        for (int64_t e = 0; e < D; e++) out[e] += pj * v[e];
    }
    for (int64_t e = 0; e < D; e++) out[e] /= sum;
}

static tops_status run_varlen_case(tops_bench_session *s, attn_data *d, varlen_data *p, const char *dtype, int causal,
                                   tops_bench_rows *rows, int *accuracy_failures) {
    const tops_bench_config *cfg = s->cfg;
    tops_exec exec = tops_exec_default();
    exec.threads = cfg->threads;
    tops_attention_desc padded = tops_attention_desc_default(), packed = padded;
    padded.causal = packed.causal = causal;
    packed.cu_seqlens_q = packed.cu_seqlens_k = p->cu;
    packed.batch = opts.nvarlen;
    varlen_call vc = {&exec, &packed, p};
    fused_call fc = {&exec, &padded, d};
    int64_t D = opts.head_dim;
    const char *mask = causal ? "causal" : "non-causal";

    tops_bench_progress(s, "%s %s varlen: checking against f64", dtype, mask);
    size_t esize = (size_t)tops_format_get_info(p->out.format.id)->pack_bytes; /* bytes per element */
    memset(p->out.data, 0xff, (size_t)tops_tensor_numel(&p->out) * esize);
    tops_status st = call_varlen(&vc, 0);
    if (st != TOPS_OK) return st;
    double *ref = malloc((size_t)CHECK_ROWS * (size_t)D * sizeof(double));
    double *logit = malloc((size_t)opts.seq * sizeof(double));
    float *got = malloc((size_t)CHECK_ROWS * (size_t)D * sizeof(float));
    if (!ref || !logit || !got) {
        free(ref), free(logit), free(got);
        return tops__fail(TOPS_OUT_OF_MEMORY, "tensorops bench", "no memory for the f64 check");
    }
    for (int r = 0; r < CHECK_ROWS; r++) {
        int64_t b = r % opts.nvarlen, h = (r * 5) % opts.heads, len = opts.varlen[b];
        int64_t i = (int64_t)r * (len - 1) / (CHECK_ROWS - 1);
        reference_seq_row(d, causal, b, h, i, ref + r * D, logit);
        for (int64_t x = 0; x < D; x++)
            got[r * D + x] = out_at(&p->out, ((p->cu[b] + i) * opts.heads + h) * D + x);
    }
    double rel, cos;
    tops_bench_compare(ref, got, CHECK_ROWS * D, &rel, &cos, NULL);
    free(ref), free(logit), free(got);

    tops_bench_progress(s, "%s %s: timing varlen and padded, alternating", dtype, mask);
    tops_bench_alt alt[2] = {{call_varlen, &vc, 0, 0}, {call_fused, &fc, 0, 0}};
    st = tops_bench_time_alternating(alt, 2, 1, cfg->repeat, cfg->min_seconds);
    if (st != TOPS_OK) return st;

    const tops_bench_roofline *roof;
    st = tops_bench_session_roofline(s, &roof);
    if (st != TOPS_OK) return st;
    tops_cpu_info ci;
    tops_cpu_get_info(&ci);
    tops_bench_row row;
    memset(&row, 0, sizeof row);
    snprintf(row.op, sizeof row.op, "attention");
    snprintf(row.format, sizeof row.format, "%s", dtype);
    snprintf(row.baseline, sizeof row.baseline, "tops-padded");
    row.m = p->cu[opts.nvarlen], row.n = opts.seq, row.k = D; /* m: tokens of all sequences; n: the longest */
    row.batch = opts.nvarlen, row.heads = opts.heads, row.kv_heads = opts.kv_heads, row.causal = causal;
    row.threads = cfg->threads;
    snprintf(row.isa, sizeof row.isa, "%s", tops_isa_name(ci.isa));
    snprintf(row.path, sizeof row.path, "varlen/%s",
             tops__attention_kernel_name(tops__kernels_get(), &p->q, &p->k, &p->v, &p->out));
    row.median_s = alt[0].median_s;
    row.min_s = alt[0].min_s;
    row.baseline_median_s = alt[1].median_s;
    row.rel_l2 = rel;
    row.cos_sim = cos;
    row.rel_l2_bound = p->out.format.id == TOPS_FMT_F32 ? 1e-5 : p->out.format.id == TOPS_FMT_F16 ? 2e-3 : 1.5e-2;
    row.accuracy_ok = rel <= row.rel_l2_bound;
    if (!row.accuracy_ok) (*accuracy_failures)++;
    /* The sequences' own visible pairs (what both calls must do at least). */
    double pairs = 0;
    for (int b = 0; b < opts.nvarlen; b++) {
        double l = opts.varlen[b];
        pairs += causal ? l * (l + 1) / 2 : l * l;
    }
    double flops = 4.0 * (double)D * pairs * (double)opts.heads;
    double kv_bytes = 2.0 * (double)tops_tensor_numel(&p->k) * (double)esize;
    double qo_bytes = 2.0 * (double)tops_tensor_numel(&p->q) * (double)esize;
    tops_bench_row_derive(&row, flops, kv_bytes, kv_bytes + qo_bytes, roof->fma_gflops, roof->read_gbps);
    return tops_bench_rows_push(rows, &row);
}

tops_status tops_bench_attention_cpu(tops_bench_session *s, tops_bench_rows *rows) {
    static const char fn[] = "tensorops bench";
    if (opts.nkv) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "--kv-format: quantized KV caches are timed on the GPU runner (--device cuda)");
    int ncausal = opts.causal_mode == 0 ? 2 : 1;
    s->case_count = opts.ndtypes * ncausal;
    /* The roofline first, so its threads are not spinning during a case. */
    const tops_bench_roofline *roof;
    tops_status st = tops_bench_session_roofline(s, &roof);
    if (st != TOPS_OK) return st;
    int failures = 0;
    for (int di = 0; di < opts.ndtypes; di++) {
        attn_data d;
        tops_bench_progress(s, "%s: generating inputs", opts.dtypes[di]);
        st = data_make(opts.dtypes[di], &d);
        varlen_data p;
        memset(&p, 0, sizeof p);
        if (st == TOPS_OK && opts.nvarlen) st = varlen_make(&d, &p);
        for (int ci = 0; st == TOPS_OK && ci < ncausal; ci++) {
            int causal = opts.causal_mode == 0 ? ci == 0 : opts.causal_mode == 1;
            s->case_index = di * ncausal + ci + 1;
            st = opts.nvarlen ? run_varlen_case(s, &d, &p, opts.dtypes[di], causal, rows, &failures)
                              : run_case(s, &d, opts.dtypes[di], causal, rows, &failures);
        }
        varlen_free(&p);
        data_free(&d);
        if (st != TOPS_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", tops_last_error());
            return tops__fail(st, fn, "attention %s: %s", opts.dtypes[di], msg);
        }
    }
    if (failures)
        return tops__fail(TOPS_INTERNAL, fn, "%d case(s) missed their accuracy bound (marked WRONG in the table)", failures);
    return TOPS_OK;
}

const char tops_bench_attention_usage[] =
    "  --batch B --heads H --kv-heads H --seq S --kv-seq S --head-dim D   (default 1, 8, H, 2048, S, 128)\n"
    "  --causal | --no-causal   one mask only (default: both)\n"
    "  --dtype f32|f16|bf16     q/k/v/out dtype, repeatable (default f32)\n"
    "  --varlen L1,L2,...       sequences of these lengths (self-attention) as one packed varlen call\n"
    "                           (cu_seqlens), against the same batch padded to the longest and run\n"
    "                           whole, timed in alternation (baseline tops-padded; m = all tokens)\n"
    "  Baseline: unfused OpenBLAS (sgemm Q K^T, softmax, sgemm P V) on f32 copies; GFLOPS count\n"
    "  4 * D per visible query/key pair.  path: the kernel that ran (f16/bf16 q/k/v at the amx\n"
    "  level: the AMX attention kernel; --isa avx512 runs the f32 fused path in the same binary).\n";
