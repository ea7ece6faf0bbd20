/* The attention rows of tensorops validate: tops_attention on random data
   against f64 attention on the decoded operands (so the KV quantization is
   not counted against the kernel; its SNR is reported beside), over the
   dtypes, masks, head groupings and quantized KV caches of issue 6, and
   sequences of different lengths in one call (per-batch key counts, and
   packed varlen batches) of issue 24. */
#include "cli.h"

#include "bench.h"
#include "cpu/dispatch.h"
#include "cuda/attention.h"
#include "drive/attention.h"

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
    /* Lengths (b of each): LENS_KV sets kv_lens = klen (queries sq each);
       LENS_VARLEN packs sequences of qlen queries and klen keys [T, H, D]
       (sq, sk: the longest). */
    enum { LENS_NONE, LENS_KV, LENS_VARLEN } lens;
    int32_t qlen[8], klen[8];
} attn_row;

static const attn_row rows[] = {
    {"A-f32", "f32", TOPS_DT_F32, TOPS_DT_F32, 1, 0, 0.0f, 1, 4, 2, 77, 300, 64, 0, LENS_NONE, {0}, {0}},
    {"A-f16", "f16", TOPS_DT_F16, TOPS_DT_F16, 0, 0, 0.0f, 1, 4, 4, 64, 64, 128, 0, LENS_NONE, {0}, {0}},
    {"A-bf16", "bf16", TOPS_DT_BF16, TOPS_DT_BF16, 1, 0, 0.0f, 2, 2, 1, 33, 100, 80, 0, LENS_NONE, {0}, {0}},
    {"A-window-cap", "f32", TOPS_DT_F32, TOPS_DT_F32, 1, 48, 30.0f, 1, 4, 1, 128, 200, 64, 0, LENS_NONE, {0}, {0}},
    {"A-decode", "f16", TOPS_DT_F32, TOPS_DT_F32, 1, 0, 0.0f, 1, 8, 2, 1, 1000, 128, 0, LENS_NONE, {0}, {0}},
    {"A-kv-int8-g32", "int8-g32", TOPS_DT_F32, TOPS_DT_F32, 1, 0, 0.0f, 1, 4, 2, 64, 256, 128, 0, LENS_NONE, {0}, {0}},
    {"A-kv-mxfp8", "mxfp8", TOPS_DT_BF16, TOPS_DT_F32, 0, 0, 0.0f, 1, 4, 2, 40, 160, 64, 0, LENS_NONE, {0}, {0}},
    {"A-prefill", "f32", TOPS_DT_F32, TOPS_DT_F32, 1, 0, 0.0f, 1, 8, 8, 1024, 1024, 128, 1, LENS_NONE, {0}, {0}},
    {"A-kv-lens", "bf16", TOPS_DT_F32, TOPS_DT_F32, 1, 0, 0.0f, 6, 4, 2, 3, 400, 64, 0, LENS_KV,
     {0}, {0, 1, 7, 33, 250, 400}},
    {"A-varlen", "f16", TOPS_DT_F16, TOPS_DT_F16, 1, 0, 0.0f, 6, 4, 2, 300, 310, 128, 0, LENS_VARLEN,
     {0, 1, 7, 33, 300, 120}, {0, 1, 7, 40, 310, 120}},
    {"A-varlen-win", "int8-g32", TOPS_DT_F32, TOPS_DT_F32, 0, 24, 0.0f, 4, 8, 8, 200, 200, 64, 0, LENS_VARLEN,
     {200, 17, 1, 96}, {200, 17, 1, 96}},
    /* 16-bit rows the GPU kernel runs too (--device cuda) */
    {"A-bf16-gqa-d64", "bf16", TOPS_DT_BF16, TOPS_DT_BF16, 1, 0, 0.0f, 2, 8, 2, 300, 300, 64, 0, LENS_NONE, {0}, {0}},
    {"A-f16-window-cap", "f16", TOPS_DT_F16, TOPS_DT_F16, 1, 64, 30.0f, 1, 4, 1, 257, 400, 128, 0, LENS_NONE, {0}, {0}},
    {"A-bf16-d256", "bf16", TOPS_DT_BF16, TOPS_DT_BF16, 0, 0, 0.0f, 1, 2, 2, 130, 333, 256, 0, LENS_NONE, {0}, {0}},
    {"A-bf16-prefill", "bf16", TOPS_DT_BF16, TOPS_DT_BF16, 1, 0, 0.0f, 1, 8, 8, 1024, 1024, 128, 1, LENS_NONE, {0}, {0}},
    /* decode (Sq <= 16) with 16-bit and quantized KV caches: the GPU's decode kernel too */
    {"A-dec-bf16-gqa", "bf16", TOPS_DT_BF16, TOPS_DT_BF16, 0, 0, 0.0f, 2, 32, 8, 1, 3000, 128, 0, LENS_NONE, {0}, {0}},
    {"A-dec-kv-e4m3", "e4m3", TOPS_DT_BF16, TOPS_DT_BF16, 1, 0, 0.0f, 2, 8, 2, 4, 1000, 128, 0, LENS_NONE, {0}, {0}},
    {"A-dec-kv-e4m3ch", "e4m3-ch", TOPS_DT_BF16, TOPS_DT_BF16, 0, 0, 0.0f, 1, 4, 1, 1, 1200, 256, 0, LENS_NONE, {0}, {0}},
    {"A-dec-kv-mxfp8", "mxfp8", TOPS_DT_F16, TOPS_DT_F16, 1, 0, 0.0f, 1, 8, 4, 2, 500, 64, 0, LENS_NONE, {0}, {0}},
    {"A-dec-kv-int8", "int8-g32", TOPS_DT_F16, TOPS_DT_F16, 0, 0, 0.0f, 2, 8, 2, 1, 777, 128, 0, LENS_NONE, {0}, {0}},
    {"A-dec-kv-int4", "int4-g32", TOPS_DT_BF16, TOPS_DT_BF16, 1, 0, 0.0f, 1, 16, 4, 16, 2000, 128, 0, LENS_NONE, {0}, {0}},
};

/* Where (b, h, i) of a [B, H, S, D] tensor or of a packed [T, H, D] one
   starts (elements); offsets: the varlen offsets (NULL: padded). */
static int64_t at(const attn_row *r, const int32_t *offsets, int64_t heads, int64_t s, int64_t b, int64_t h,
                  int64_t i) {
    return offsets ? ((offsets[b] + i) * heads + h) * r->d : ((b * heads + h) * s + i) * r->d;
}

static int64_t q_len(const attn_row *r, int64_t b) { return r->lens == LENS_VARLEN ? r->qlen[b] : r->sq; }
static int64_t k_len(const attn_row *r, int64_t b) { return r->lens != LENS_NONE ? r->klen[b] : r->sk; }

/* f64 attention of every query row of every sequence (inputs as f32,
   decoded, [B, H, S, D] or packed at qo / ko). */
static void reference(const attn_row *r, const int32_t *qo, const int32_t *ko, const float *q, const float *k,
                      const float *v, double *out) {
    double *logit = malloc((size_t)(r->sk > 0 ? r->sk : 1) * sizeof(double));
    if (!logit) return;
    double scale = 1.0 / sqrt((double)r->d);
    for (int64_t b = 0; b < r->b; b++)
        for (int64_t h = 0; h < r->h; h++)
            for (int64_t i = 0; i < q_len(r, b); i++) {
                int64_t hk = h / (r->h / r->hkv), sk = k_len(r, b), pos = i + sk - q_len(r, b);
                const float *qi = q + at(r, qo, r->h, r->sq, b, h, i);
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < sk; j++) {
                    logit[j] = -INFINITY;
                    if ((r->causal && j > pos) || (r->window > 0 && llabs(j - pos) >= r->window)) continue;
                    const float *kj = k + at(r, ko, r->hkv, r->sk, b, hk, j);
                    double s = 0;
                    for (int64_t x = 0; x < r->d; x++) s += (double)qi[x] * kj[x];
                    s *= scale;
                    if (r->softcap > 0) s = r->softcap * tanh(s / r->softcap);
                    logit[j] = s;
                    if (s > m) m = s;
                }
                double *o = out + at(r, qo, r->h, r->sq, b, h, i);
                for (int64_t x = 0; x < r->d; x++) o[x] = 0;
                if (m == -INFINITY) continue;
                for (int64_t j = 0; j < sk; j++) {
                    if (logit[j] == -INFINITY) continue;
                    double p = exp(logit[j] - m);
                    sum += p;
                    const float *vj = v + at(r, ko, r->hkv, r->sk, b, hk, j);
                    for (int64_t x = 0; x < r->d; x++) o[x] += p * vj[x];
                }
                for (int64_t x = 0; x < r->d; x++) o[x] /= sum;
            }
    free(logit);
}

/* A [.., D] tensor of format fmt holding src (quantized or cast), and its
   decoded values in decoded; returns the SNR of the encoding (dB). */
static tops_status encode(const char *fmt_name, int rank, const int64_t *ext, const float *src, tops_tensor *t,
                          float *decoded, double *snr_db) {
    tops_format fmt;
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    tops_status st = tops_format_from_name(fmt_name, &fmt);
    if (st != TOPS_OK) return st;
    if ((st = tops_tensor_create(fmt, rank, ext, host, t)) != TOPS_OK) return st;
    tops_tensor s, d;
    tops_tensor_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.format = tops_format_of(TOPS_DT_F32);
    sd.rank = rank;
    memcpy(sd.extent, ext, (size_t)rank * sizeof(int64_t));
    sd.data = (void *)src;
    if ((st = tops_tensor_view(&sd, &s)) != TOPS_OK) return st;
    sd.data = decoded;
    if ((st = tops_tensor_view(&sd, &d)) != TOPS_OK) return st;
    if ((st = tops_quantize(&s, t, NULL)) != TOPS_OK) return st;
    if ((st = tops_dequantize(t, &d)) != TOPS_OK) return st;
    tops_quant_error_stats e;
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= ext[i];
    if ((st = tops_quant_error(src, decoded, n, &e)) != TOPS_OK) return st;
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
    /* Packed rows: offsets of the sequences (their tokens, then one spare
       row the call must leave alone). */
    int varlen = r->lens == LENS_VARLEN, rank = varlen ? 3 : 4;
    int32_t cq[9] = {0}, ck[9] = {0};
    for (int64_t b = 0; varlen && b < r->b; b++) cq[b + 1] = cq[b] + r->qlen[b], ck[b + 1] = ck[b] + r->klen[b];
    const int32_t *qo = varlen ? cq : NULL, *ko = varlen ? ck : NULL;
    int64_t qe[4] = {r->b, r->h, r->sq, r->d}, ke[4] = {r->b, r->hkv, r->sk, r->d};
    if (varlen) {
        qe[0] = cq[r->b] + 1, qe[1] = r->h, qe[2] = r->d;
        ke[0] = ck[r->b] + 1, ke[1] = r->hkv, ke[2] = r->d;
    }
    int64_t nq = 1, nk = 1;
    for (int i = 0; i < rank; i++) nq *= qe[i], nk *= ke[i];
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
    if ((st = encode(tops_dtype_name(r->q), rank, qe, qf, &q, qd, &unused)) != TOPS_OK ||
        (st = encode(r->kv, rank, ke, kf, &k, kd, &snr_k)) != TOPS_OK ||
        (st = encode(r->kv, rank, ke, vf, &v, vd, &snr_v)) != TOPS_OK ||
        (st = tops_tensor_create(tops_format_of(r->out), rank, qe, (tops_memory){TOPS_DEVICE_CPU, 0}, &out)) != TOPS_OK)
        goto done;
    snprintf(path, path_cap, "%s", tops__attention_kernel_name(tops__kernels_get(), &q, &k, &v, &out));
    res->snr_db = snr_k < snr_v ? snr_k : snr_v;
    /* NaN-poisoned output: an element the kernel never writes shows. */
    for (int64_t i = 0; i < nq; i++) got[i] = NAN;
    if ((st = tops_cast_from_f32(r->out, out.data, got, nq, 0)) != TOPS_OK) goto done;
    tops_attention_desc desc = tops_attention_desc_default();
    desc.causal = r->causal;
    desc.window = r->window;
    desc.softcap = r->softcap;
    if (r->lens != LENS_NONE) desc.batch = (int32_t)r->b;
    if (r->lens == LENS_KV) desc.kv_lens = r->klen;
    if (varlen) desc.cu_seqlens_q = cq, desc.cu_seqlens_k = ck;
    if (dev.kind == TOPS_DEVICE_CUDA)
        st = run_on_device(dev, &desc, &q, &k, &v, &out, path, path_cap);
    else
        st = tops_attention(NULL, &desc, &q, &k, &v, &out);
    if (st != TOPS_OK) goto done;
    if ((st = tops_cast_to_f32(r->out, got, out.data, nq)) != TOPS_OK) goto done;
    for (int64_t i = 0; i < nq; i++) ref[i] = NAN;
    reference(r, qo, ko, qd, kd, vd, ref);
    /* Compared: the rows of the sequences; every other row must still be NaN. */
    int64_t n = 0, stray = 0;
    for (int64_t i = 0; i < nq; i++) {
        if (isnan(ref[i])) {
            stray += !isnan(got[i]);
            continue;
        }
        ref[n] = ref[i], got[n] = got[i], n++;
    }
    tops_bench_compare(ref, got, n, &res->rel_l2, &res->cos_sim, &res->max_abs);
    res->pass = res->rel_l2 <= res->bound && stray == 0;
    if (stray) snprintf(error, error_cap, "%lld elements outside the sequences were written", (long long)stray);
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
        const char *skip = NULL;
        if (dev.kind == TOPS_DEVICE_CUDA && r->lens != LENS_NONE && r->sq > 16)
            skip = "the GPU runs sequences of different lengths in the decode kernel only (longest query <= 16)";
        else if (dev.kind == TOPS_DEVICE_CUDA && !(r->q == r->out && (r->q == TOPS_DT_F16 || r->q == TOPS_DT_BF16) &&
                                                  (kv16 ? strcmp(r->kv, tops_dtype_name(r->q)) == 0 : r->sq <= 16)))
            skip = "the GPU takes one 16-bit type for q and out, and k, v of that type or (Sq <= 16) quantized";
        if (skip) {
            tops_validate_print_skipped(r->name, r->kv, r->q, r->sq, r->d, r->sk, skip, json, first);
            continue;
        }
        run_row(r, dev, 20261129 + 10 * i, &res, path, sizeof path, error, sizeof error);
        if (!res.pass) failures++;
        tops_validate_print_row(&res, json, first);
    }
    return failures;
}
