/* The attention rows of tensorops validate: tops_attention on random data
   against f64 attention on the decoded operands (so the KV quantization is
   not counted against the kernel; its SNR is reported beside), over the
   dtypes, masks, head groupings and quantized KV caches of issue 6. */
#include "cli.h"

#include "bench.h"
#include "cpu/dispatch.h"
#include "cuda/attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct attn_row {
    const char *name;
    const char *kv;         /* k and v format */
    tops_dtype q, out;
    int causal;
    int64_t window;
    float softcap;
    int64_t b, h, hkv, sq, sk, d;
    int full_only;          /* only without --quick */
} attn_row;

static const attn_row rows[] = {
    {"A-f32", "f32", TOPS_DT_F32, TOPS_DT_F32, 1, 0, 0.0f, 1, 4, 2, 77, 300, 64, 0},
    {"A-f16", "f16", TOPS_DT_F16, TOPS_DT_F16, 0, 0, 0.0f, 1, 4, 4, 64, 64, 128, 0},
    {"A-bf16", "bf16", TOPS_DT_BF16, TOPS_DT_BF16, 1, 0, 0.0f, 2, 2, 1, 33, 100, 80, 0},
    {"A-window-cap", "f32", TOPS_DT_F32, TOPS_DT_F32, 1, 48, 30.0f, 1, 4, 1, 128, 200, 64, 0},
    {"A-decode", "f16", TOPS_DT_F32, TOPS_DT_F32, 1, 0, 0.0f, 1, 8, 2, 1, 1000, 128, 0},
    {"A-kv-int8-g32", "int8-g32", TOPS_DT_F32, TOPS_DT_F32, 1, 0, 0.0f, 1, 4, 2, 64, 256, 128, 0},
    {"A-kv-mxfp8", "mxfp8", TOPS_DT_BF16, TOPS_DT_F32, 0, 0, 0.0f, 1, 4, 2, 40, 160, 64, 0},
    {"A-prefill", "f32", TOPS_DT_F32, TOPS_DT_F32, 1, 0, 0.0f, 1, 8, 8, 1024, 1024, 128, 1},
    /* 16-bit rows the GPU kernel runs too (--device cuda) */
    {"A-bf16-gqa-d64", "bf16", TOPS_DT_BF16, TOPS_DT_BF16, 1, 0, 0.0f, 2, 8, 2, 300, 300, 64, 0},
    {"A-f16-window-cap", "f16", TOPS_DT_F16, TOPS_DT_F16, 1, 64, 30.0f, 1, 4, 1, 257, 400, 128, 0},
    {"A-bf16-d256", "bf16", TOPS_DT_BF16, TOPS_DT_BF16, 0, 0, 0.0f, 1, 2, 2, 130, 333, 256, 0},
    {"A-bf16-prefill", "bf16", TOPS_DT_BF16, TOPS_DT_BF16, 1, 0, 0.0f, 1, 8, 8, 1024, 1024, 128, 1},
};

/* f64 attention of every query row (inputs as f32 [B, H, S, D], decoded). */
static void reference(const attn_row *r, const float *q, const float *k, const float *v, double *out) {
    double *logit = malloc((size_t)r->sk * sizeof(double));
    if (!logit) return;
    double scale = 1.0 / sqrt((double)r->d);
    for (int64_t b = 0; b < r->b; b++)
        for (int64_t h = 0; h < r->h; h++)
            for (int64_t i = 0; i < r->sq; i++) {
                int64_t hk = h / (r->h / r->hkv), pos = i + r->sk - r->sq;
                const float *qi = q + ((b * r->h + h) * r->sq + i) * r->d;
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < r->sk; j++) {
                    logit[j] = -INFINITY;
                    if ((r->causal && j > pos) || (r->window > 0 && llabs(j - pos) >= r->window)) continue;
                    const float *kj = k + ((b * r->hkv + hk) * r->sk + j) * r->d;
                    double s = 0;
                    for (int64_t x = 0; x < r->d; x++) s += (double)qi[x] * kj[x];
                    s *= scale;
                    if (r->softcap > 0) s = r->softcap * tanh(s / r->softcap);
                    logit[j] = s;
                    if (s > m) m = s;
                }
                double *o = out + ((b * r->h + h) * r->sq + i) * r->d;
                for (int64_t x = 0; x < r->d; x++) o[x] = 0;
                if (m == -INFINITY) continue;
                for (int64_t j = 0; j < r->sk; j++) {
                    if (logit[j] == -INFINITY) continue;
                    double p = exp(logit[j] - m);
                    sum += p;
                    const float *vj = v + ((b * r->hkv + hk) * r->sk + j) * r->d;
                    for (int64_t x = 0; x < r->d; x++) o[x] += p * vj[x];
                }
                for (int64_t x = 0; x < r->d; x++) o[x] /= sum;
            }
    free(logit);
}

/* A [.., D] tensor of format fmt holding src (quantized or cast), and its
   decoded values in decoded; returns the SNR of the encoding (dB). */
static tops_status encode(const char *fmt_name, const int64_t *ext, const float *src, tops_tensor *t,
                          float *decoded, double *snr_db) {
    tops_format fmt;
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    tops_status st = tops_format_from_name(fmt_name, &fmt);
    if (st != TOPS_OK) return st;
    if ((st = tops_tensor_create(fmt, 4, ext, host, t)) != TOPS_OK) return st;
    tops_tensor s, d;
    tops_tensor_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.format = tops_format_of(TOPS_DT_F32);
    sd.rank = 4;
    memcpy(sd.extent, ext, 4 * sizeof(int64_t));
    sd.data = (void *)src;
    if ((st = tops_tensor_view(&sd, &s)) != TOPS_OK) return st;
    sd.data = decoded;
    if ((st = tops_tensor_view(&sd, &d)) != TOPS_OK) return st;
    if ((st = tops_quantize(&s, t, NULL)) != TOPS_OK) return st;
    if ((st = tops_dequantize(t, &d)) != TOPS_OK) return st;
    tops_quant_error_stats e;
    if ((st = tops_quant_error(src, decoded, ext[0] * ext[1] * ext[2] * ext[3], &e)) != TOPS_OK) return st;
    *snr_db = e.snr_db;
    return TOPS_OK;
}

/* On a GPU: q, k, v copied to cuda:N, the NaN-poisoned out too, run there
   and copied back into out. */
static tops_status run_on_device(tops_device dev, const tops_attention_desc *desc, const tops_tensor *q,
                                 const tops_tensor *k, const tops_tensor *v, tops_tensor *out, char *path,
                                 size_t path_cap) {
    tops_memory mem = {TOPS_DEVICE_CUDA, dev.index}, host = {TOPS_DEVICE_CPU, 0};
    tops_tensor dq = {0}, dk = {0}, dv = {0}, dout = {0}, back = {0};
    tops_exec ex = tops_exec_default();
    ex.device = dev;
    tops_status st;
    if ((st = tops_tensor_to(q, mem, &dq)) == TOPS_OK && (st = tops_tensor_to(k, mem, &dk)) == TOPS_OK &&
        (st = tops_tensor_to(v, mem, &dv)) == TOPS_OK && (st = tops_tensor_to(out, mem, &dout)) == TOPS_OK &&
        (st = tops__cuda_attention_path(&ex, desc, &dq, &dk, &dv, &dout, path, path_cap)) == TOPS_OK &&
        (st = tops_attention(&ex, desc, &dq, &dk, &dv, &dout)) == TOPS_OK && (st = tops_cuda_synchronize(&ex)) == TOPS_OK &&
        (st = tops_tensor_to(&dout, host, &back)) == TOPS_OK) {
        size_t n;
        if ((st = tops_tensor_data_span(out, &n)) == TOPS_OK) memcpy(out->data, back.data, n);
    }
    tops_tensor_destroy(&dq), tops_tensor_destroy(&dk), tops_tensor_destroy(&dv), tops_tensor_destroy(&dout);
    tops_tensor_destroy(&back);
    return st;
}

static void run_row(const attn_row *r, tops_device dev, uint64_t seed, tops_validate_row *res, char *path,
                    size_t path_cap, char *error, size_t error_cap) {
    int64_t qe[4] = {r->b, r->h, r->sq, r->d}, ke[4] = {r->b, r->hkv, r->sk, r->d};
    int64_t nq = r->b * r->h * r->sq * r->d, nk = r->b * r->hkv * r->sk * r->d;
    float *qf = malloc((size_t)nq * sizeof(float)), *kf = malloc((size_t)nk * sizeof(float));
    float *vf = malloc((size_t)nk * sizeof(float)), *qd = malloc((size_t)nq * sizeof(float));
    float *kd = malloc((size_t)nk * sizeof(float)), *vd = malloc((size_t)nk * sizeof(float));
    float *got = malloc((size_t)nq * sizeof(float));
    double *ref = malloc((size_t)nq * sizeof(double));
    tops_tensor q = {0}, k = {0}, v = {0}, out = {0};
    double snr_k = 0, snr_v = 0, unused;
    tops_status st = TOPS_OK;
    snprintf(path, path_cap, "%s", tops__kernels_get()->tile_gemm.name); /* the kernel tops_attention runs */
    res->path = path;
    res->error = error;
    error[0] = '\0';
    res->rel_l2 = res->cos_sim = res->max_abs = NAN;
    if (!qf || !kf || !vf || !qd || !kd || !vd || !got || !ref) {
        st = tops__fail(TOPS_OUT_OF_MEMORY, "tensorops validate", "no memory for the %s row", r->name);
        goto done;
    }
    tops_bench_fill_normal(qf, nq, seed);
    tops_bench_fill_normal(kf, nk, seed + 1);
    tops_bench_fill_normal(vf, nk, seed + 2);
    if ((st = encode(tops_dtype_name(r->q), qe, qf, &q, qd, &unused)) != TOPS_OK ||
        (st = encode(r->kv, ke, kf, &k, kd, &snr_k)) != TOPS_OK ||
        (st = encode(r->kv, ke, vf, &v, vd, &snr_v)) != TOPS_OK ||
        (st = tops_tensor_create(tops_format_of(r->out), 4, qe, (tops_memory){TOPS_DEVICE_CPU, 0}, &out)) != TOPS_OK)
        goto done;
    res->snr_db = snr_k < snr_v ? snr_k : snr_v;
    /* NaN-poisoned output: an element the kernel never writes shows. */
    for (int64_t i = 0; i < nq; i++) got[i] = NAN;
    if ((st = tops_cast_from_f32(r->out, out.data, got, nq, 0)) != TOPS_OK) goto done;
    tops_attention_desc desc = tops_attention_desc_default();
    desc.causal = r->causal;
    desc.window = r->window;
    desc.softcap = r->softcap;
    if (dev.kind == TOPS_DEVICE_CUDA)
        st = run_on_device(dev, &desc, &q, &k, &v, &out, path, path_cap);
    else
        st = tops_attention(NULL, &desc, &q, &k, &v, &out);
    if (st != TOPS_OK) goto done;
    if ((st = tops_cast_to_f32(r->out, got, out.data, nq)) != TOPS_OK) goto done;
    reference(r, qd, kd, vd, ref);
    tops_bench_compare(ref, got, nq, &res->rel_l2, &res->cos_sim, &res->max_abs);
    res->pass = res->rel_l2 <= res->bound;
done:
    if (st != TOPS_OK) {
        snprintf(error, error_cap, "%s", tops_last_error());
        res->pass = 0;
    }
    tops_tensor_destroy(&q);
    tops_tensor_destroy(&k);
    tops_tensor_destroy(&v);
    tops_tensor_destroy(&out);
    free(qf), free(kf), free(vf), free(qd), free(kd), free(vd), free(got), free(ref);
}

int tops_validate_attention_knows(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (strlen(rows[i].name) == len && strncmp(rows[i].name, name, len) == 0) return 1;
    return 0;
}

int tops_validate_attention(int quick, int json, const char *only, int *first) {
    tops_device cpu = {TOPS_DEVICE_CPU, 0};
    return tops_validate_attention_on(cpu, quick, json, only, first);
}

int tops_validate_attention_on(tops_device dev, int quick, int json, const char *only, int *first) {
    int failures = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const attn_row *r = &rows[i];
        if (only ? !tops_validate_in_list(only, r->name) : quick && r->full_only) continue;
        char path[64], error[320];
        tops_validate_row res;
        memset(&res, 0, sizeof res);
        res.name = r->name;
        res.format = r->kv;
        res.left = r->q;
        res.dest = r->out;
        res.m = r->sq, res.k = r->d, res.n = r->sk;
        res.bound = tops_validate_bound(r->out, 0);
        int kv16 = strcmp(r->kv, "f16") == 0 || strcmp(r->kv, "bf16") == 0;
        if (dev.kind == TOPS_DEVICE_CUDA && !(r->q == r->out && (r->q == TOPS_DT_F16 || r->q == TOPS_DT_BF16) && kv16 &&
                                             strcmp(r->kv, tops_dtype_name(r->q)) == 0)) {
            if (json) {
                printf("%s\n  {\"row\": ", *first ? "" : ",");
                tops_cli_json_string(stdout, r->name);
                printf(", \"pass\": false, \"skipped\": true, \"error\": ");
                tops_cli_json_string(stdout, "the GPU kernel takes one 16-bit type for q, k, v and out");
                printf("}");
                *first = 0;
            } else {
                printf("%-14s %-16s %-9s %lldx%lldx%lld skipped on cuda: the GPU kernel takes one 16-bit type for q, "
                       "k, v and out\n",
                       r->name, r->kv, tops_dtype_name(r->q), (long long)r->sq, (long long)r->d, (long long)r->sk);
            }
            continue;
        }
        run_row(r, dev, 20261129 + 10 * i, &res, path, sizeof path, error, sizeof error);
        if (!res.pass) failures++;
        tops_validate_print_row(&res, json, first);
    }
    return failures;
}
