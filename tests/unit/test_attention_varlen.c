/* tops_attention with sequences of different lengths: per-batch key counts
   (a padding mask) and packed varlen batches (cu_seqlens_q/k), against an
   f64 reference on ragged lengths (0, 1, 7, 33, ...), GQA, causal, windows,
   soft-capping, quantized KV, strided layouts, every kernel level and 1-3
   threads; keys and rows outside the sequences hold NaN, so reading them
   shows, and output rows outside them must stay poisoned; every bad input. */
#include "attn_common.h"
#include "cpu/dispatch.h"
#include "ops/attention.h"

static th_rng rng;

/* Where the logical values of one (row, head) live: base + row * row_step
   + head * head_step, D (or Dv) floats from there. */
typedef struct lview {
    const float *base;
    int64_t row, head;
} lview;

typedef struct opts {
    int64_t H, Hkv, D, Dv;
    int causal;
    int64_t window;
    float scale, softcap;
} opts;

/* f64 attention of one sequence (sq queries, sk keys, bottom-right
   aligned) into out (same addressing as the output, doubles). */
static void ref_seq(const opts *o, lview q, lview k, lview v, int64_t sq, int64_t sk, double *out, int64_t orow,
                    int64_t ohead) {
    double *logit = malloc((size_t)(sk > 0 ? sk : 1) * sizeof(double));
    float scale = o->scale > 0 ? o->scale : 1.0f / sqrtf((float)o->D);
    for (int64_t h = 0; h < o->H; h++) {
        int64_t hk = h / (o->H / o->Hkv);
        for (int64_t i = 0; i < sq; i++) {
            const float *qi = q.base + i * q.row + h * q.head;
            int64_t pos = i + sk - sq;
            double m = -INFINITY;
            for (int64_t j = 0; j < sk; j++) {
                if ((o->causal && j > pos) || (o->window > 0 && llabs(j - pos) >= o->window)) {
                    logit[j] = -INFINITY;
                    continue;
                }
                const float *kj = k.base + j * k.row + hk * k.head;
                double s = 0;
                for (int64_t d = 0; d < o->D; d++) s += (double)qi[d] * kj[d];
                s *= scale;
                if (o->softcap > 0) s = o->softcap * tanh(s / o->softcap);
                logit[j] = s;
                if (s > m) m = s;
            }
            double *oi = out + i * orow + h * ohead;
            for (int64_t d = 0; d < o->Dv; d++) oi[d] = 0;
            if (m == -INFINITY) continue;
            double sum = 0;
            for (int64_t j = 0; j < sk; j++) {
                if (logit[j] == -INFINITY) continue;
                double p = exp(logit[j] - m);
                sum += p;
                const float *vj = v.base + j * v.row + hk * v.head;
                for (int64_t d = 0; d < o->Dv; d++) oi[d] += p * vj[d];
            }
            for (int64_t d = 0; d < o->Dv; d++) oi[d] /= sum;
        }
    }
    free(logit);
}

/* Sets logical element l of b (values and storage) to NaN. */
static void poison_at(tbuf *b, int64_t l) {
    const tops_tensor *t = &b->t;
    int64_t rem = l, off = 0;
    for (int i = t->rank - 1; i >= 0; i--) {
        off += rem % t->extent[i] * t->stride[i];
        rem /= t->extent[i];
    }
    tb_put(t->format.id, b->mem, off, NAN);
    b->vals[l] = NAN;
}

static double out_tol(tops_format_id of, tops_format_id qf, tops_format_id kf) {
    double t = of == TOPS_FMT_F32 ? 1e-4 : of == TOPS_FMT_F16 ? 2e-3 : 1.6e-2;
    return t + (qf == TOPS_FMT_F32 && kf == TOPS_FMT_F32 ? 0 : 1e-4);
}

/* Compares out with ref: rows where ref is NaN must still be NaN (never
   written), every other element within tol.  Returns the failures. */
static int compare(const tbuf *o, const double *ref, double tol, double *worst) {
    float *got = malloc((size_t)o->n * sizeof(float));
    tb_read(o, got);
    int bad = 0;
    *worst = 0;
    for (int64_t i = 0; i < o->n; i++) {
        if (isnan(ref[i])) {
            if (!isnan(got[i])) bad++;
            continue;
        }
        double e = fabs(got[i] - ref[i]);
        if (!(e <= tol)) bad++;
        if (!(e <= *worst)) *worst = e;
    }
    free(got);
    return bad;
}

static tops_format_id pick_dtype(void) {
    static const tops_format_id f[3] = {TOPS_FMT_F32, TOPS_FMT_F16, TOPS_FMT_BF16};
    return f[th_next(&rng) % 3];
}

static const int64_t LENS[] = {0, 1, 7, 33, 64, 95, 96, 97, 130, 200};
#define NLENS ((int)(sizeof LENS / sizeof LENS[0]))

static void random_opts(opts *o) {
    o->Hkv = 1 + (int64_t)(th_next(&rng) % 2);
    o->H = o->Hkv * (1 + (int64_t)(th_next(&rng) % 3));
    static const int64_t D[] = {16, 32, 64, 80};
    o->D = D[th_next(&rng) % 4];
    o->Dv = th_next(&rng) % 3 == 0 ? 48 : o->D;
    o->causal = (int)(th_next(&rng) % 2);
    o->window = th_next(&rng) % 3 == 0 ? 1 + (int64_t)(th_next(&rng) % 40) : 0;
    o->softcap = th_next(&rng) % 4 == 0 ? 5.0f : 0.0f;
    o->scale = th_next(&rng) % 4 == 0 ? 0.3f : 0.0f;
}

static void desc_from(const opts *o, tops_attention_desc *d) {
    *d = tops_attention_desc_default();
    d->causal = o->causal;
    d->window = o->window;
    d->scale = o->scale;
    d->softcap = o->softcap;
}

/* Runs d on every level and thread count 1..2 (the bits must match across
   thread counts) against ref. */
static void check_levels(const char *what, const tops_attention_desc *d, const tbuf *q, const tops_tensor *k,
                         const tops_tensor *v, tbuf *o, const double *ref, double tol) {
    attn_table tables[ATTN_TABLES];
    attn_tables(tables);
    size_t bytes = (size_t)o->n * tb_esize(o->t.format.id);
    void *first = malloc(bytes);
    for (int li = 0; li < ATTN_TABLES; li++) {
        if (attn_skip(&tables[li], &q->t, k, v, &o->t)) continue;
        const tops__kernels *kern = tables[li].k;
        for (int threads = 1; threads <= 2; threads++) {
            tops_exec ex = tops_exec_default();
            ex.threads = threads;
            tb_poison(o);
            ASSERT_OK(tops__attention_with(kern, &ex, d, &q->t, k, v, &o->t));
            double worst;
            int bad = compare(o, ref, tol, &worst);
            if (bad) TH_FAIL_AT("%s [%s, %d threads]: %d bad elements, worst err %.3g (tol %.3g)", what,
                                tables[li].name, threads, bad, worst, tol);
            if (threads == 1)
                memcpy(first, o->mem, bytes);
            else if (memcmp(first, o->mem, bytes) != 0)
                TH_FAIL_AT("%s [%s]: 2 threads gave other bits than 1", what, tables[li].name);
        }
    }
    free(first);
}

/* Per-batch key counts on [B, H, S, D]: keys past kv_lens[b] are NaN. */
static void test_kv_lens(void) {
    for (int rep = 0; rep < 12; rep++) {
        opts o;
        random_opts(&o);
        int64_t B = 1 + (int64_t)(th_next(&rng) % 5), Sq = LENS[1 + th_next(&rng) % (NLENS - 1)];
        int64_t Sk = Sq + (int64_t)(th_next(&rng) % 3) * 20;
        if (rep == 0) Sq = 1, Sk = 200; /* decode against a padded cache */
        int32_t lens[8];
        for (int64_t b = 0; b < B; b++) {
            int64_t l = LENS[th_next(&rng) % NLENS];
            lens[b] = (int32_t)(l > Sk ? Sk : l);
        }
        if (rep == 1) lens[0] = (int32_t)Sk;
        tops_format_id qf = pick_dtype(), kf = pick_dtype(), of = pick_dtype();
        int strided = (int)(th_next(&rng) % 2);
        static const int bshd[4] = {0, 2, 1, 3};
        const int *perm = strided ? bshd : NULL;
        int64_t qe[4] = {B, o.H, Sq, o.D}, ke[4] = {B, o.Hkv, Sk, o.D}, ve[4] = {B, o.Hkv, Sk, o.Dv},
                oe[4] = {B, o.H, Sq, o.Dv};
        tbuf q, k, v, out;
        ASSERT_TRUE(tb_make(&q, qf, 4, qe, perm, &rng, -2, 2));
        ASSERT_TRUE(tb_make(&k, kf, 4, ke, perm, &rng, -1, 1));
        ASSERT_TRUE(tb_make(&v, kf, 4, ve, perm, &rng, -1, 1));
        ASSERT_TRUE(tb_make(&out, of, 4, oe, perm, NULL, 0, 0));
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < o.Hkv; h++)
                for (int64_t j = lens[b]; j < Sk; j++) {
                    for (int64_t d = 0; d < o.D; d++) poison_at(&k, ((b * o.Hkv + h) * Sk + j) * o.D + d);
                    for (int64_t d = 0; d < o.Dv; d++) poison_at(&v, ((b * o.Hkv + h) * Sk + j) * o.Dv + d);
                }
        double *ref = malloc((size_t)out.n * sizeof(double));
        for (int64_t b = 0; b < B; b++) {
            lview lq = {q.vals + b * o.H * Sq * o.D, o.D, Sq * o.D};
            lview lk = {k.vals + b * o.Hkv * Sk * o.D, o.D, Sk * o.D};
            lview lv = {v.vals + b * o.Hkv * Sk * o.Dv, o.Dv, Sk * o.Dv};
            ref_seq(&o, lq, lk, lv, Sq, lens[b], ref + b * o.H * Sq * o.Dv, o.Dv, Sq * o.Dv);
        }
        tops_attention_desc d;
        desc_from(&o, &d);
        d.kv_lens = lens;
        if (rep % 2) d.batch = (int32_t)B;
        char what[160];
        snprintf(what, sizeof what, "kv_lens B%lld H%lld/%lld Sq%lld Sk%lld D%lld/%lld causal%d win%lld cap%g%s",
                 (long long)B, (long long)o.H, (long long)o.Hkv, (long long)Sq, (long long)Sk, (long long)o.D,
                 (long long)o.Dv, o.causal, (long long)o.window, (double)o.softcap, strided ? " strided" : "");
        check_levels(what, &d, &q, &k.t, &v.t, &out, ref, out_tol(of, qf, kf));
        free(ref);
        tb_free(&q);
        tb_free(&k);
        tb_free(&v);
        tb_free(&out);
    }
}

/* A packed varlen batch: nseq sequences with query lengths sq[] and key
   lengths sk[] at offsets from `lead` on, `tail` spare rows after; kvl
   (or NULL) per-sequence key counts.  Rows outside the sequences are NaN
   in q, k and v and must stay NaN in out. */
typedef struct packed {
    tbuf q, k, v, out;
    int32_t cu_q[17], cu_k[17];
    double *ref;
} packed;

static void packed_make(packed *P, const opts *o, int nseq, const int64_t *sq, const int64_t *sk,
                        const int32_t *kvl, int64_t lead, int64_t tail, tops_format_id qf, tops_format_id kf,
                        tops_format_id of, int strided) {
    P->cu_q[0] = P->cu_k[0] = (int32_t)lead;
    for (int b = 0; b < nseq; b++) {
        P->cu_q[b + 1] = P->cu_q[b] + (int32_t)sq[b];
        P->cu_k[b + 1] = P->cu_k[b] + (int32_t)sk[b];
    }
    int64_t Tq = P->cu_q[nseq] + tail, Tk = P->cu_k[nseq] + tail;
    if (Tq < 1) Tq = 1;
    if (Tk < 1) Tk = 1;
    static const int htd[3] = {1, 0, 2}; /* heads outermost in memory */
    const int *perm = strided ? htd : NULL;
    int64_t qe[3] = {Tq, o->H, o->D}, ke[3] = {Tk, o->Hkv, o->D}, ve[3] = {Tk, o->Hkv, o->Dv}, oe[3] = {Tq, o->H, o->Dv};
    ASSERT_TRUE(tb_make(&P->q, qf, 3, qe, perm, &rng, -2, 2));
    ASSERT_TRUE(tb_make(&P->k, kf, 3, ke, perm, &rng, -1, 1));
    ASSERT_TRUE(tb_make(&P->v, kf, 3, ve, perm, &rng, -1, 1));
    ASSERT_TRUE(tb_make(&P->out, of, 3, oe, perm, NULL, 0, 0));
    /* NaN outside the sequences (and past kv_lens inside them). */
    for (int64_t t = 0; t < Tq; t++)
        if (t < P->cu_q[0] || t >= P->cu_q[nseq])
            for (int64_t x = 0; x < o->H * o->D; x++) poison_at(&P->q, t * o->H * o->D + x);
    for (int64_t t = 0; t < Tk; t++) {
        int inside = 0;
        for (int b = 0; b < nseq; b++)
            if (t >= P->cu_k[b] && t < P->cu_k[b] + (kvl ? kvl[b] : sk[b])) inside = 1;
        if (inside) continue;
        for (int64_t x = 0; x < o->Hkv * o->D; x++) poison_at(&P->k, t * o->Hkv * o->D + x);
        for (int64_t x = 0; x < o->Hkv * o->Dv; x++) poison_at(&P->v, t * o->Hkv * o->Dv + x);
    }
    P->ref = malloc((size_t)P->out.n * sizeof(double));
    for (int64_t i = 0; i < P->out.n; i++) P->ref[i] = NAN;
    for (int b = 0; b < nseq; b++) {
        lview lq = {P->q.vals + P->cu_q[b] * o->H * o->D, o->H * o->D, o->D};
        lview lk = {P->k.vals + P->cu_k[b] * o->Hkv * o->D, o->Hkv * o->D, o->D};
        lview lv = {P->v.vals + P->cu_k[b] * o->Hkv * o->Dv, o->Hkv * o->Dv, o->Dv};
        ref_seq(o, lq, lk, lv, sq[b], kvl ? kvl[b] : sk[b], P->ref + P->cu_q[b] * o->H * o->Dv, o->H * o->Dv, o->Dv);
    }
}

static void packed_free(packed *P) {
    tb_free(&P->q);
    tb_free(&P->k);
    tb_free(&P->v);
    tb_free(&P->out);
    free(P->ref);
}

static void test_varlen_random(void) {
    for (int rep = 0; rep < 14; rep++) {
        opts o;
        random_opts(&o);
        int nseq = 1 + (int)(th_next(&rng) % 6);
        int64_t sq[16], sk[16];
        int32_t kvl[16];
        int with_kvl = rep % 3 == 2;
        for (int b = 0; b < nseq; b++) {
            sq[b] = LENS[th_next(&rng) % NLENS];
            /* keys as many as the queries, or more (chunked prefill), or a different length altogether */
            int mode = (int)(th_next(&rng) % 3);
            sk[b] = mode == 0 ? sq[b] : mode == 1 ? sq[b] + (int64_t)(th_next(&rng) % 50) : LENS[th_next(&rng) % NLENS];
            kvl[b] = (int32_t)(sk[b] - (sk[b] ? (int64_t)(th_next(&rng) % (uint64_t)(sk[b] + 1)) : 0));
        }
        if (rep == 0) { /* the lengths the issue names, in one call */
            nseq = 6;
            int64_t l[6] = {0, 1, 7, 33, 0, 130};
            for (int b = 0; b < 6; b++) sq[b] = sk[b] = l[b];
        }
        int64_t lead = th_next(&rng) % 2 ? 3 : 0, tail = th_next(&rng) % 2 ? 5 : 0;
        tops_format_id qf = pick_dtype(), kf = pick_dtype(), of = pick_dtype();
        int strided = (int)(th_next(&rng) % 2);
        packed P;
        packed_make(&P, &o, nseq, sq, sk, with_kvl ? kvl : NULL, lead, tail, qf, kf, of, strided);
        tops_attention_desc d;
        desc_from(&o, &d);
        d.cu_seqlens_q = P.cu_q;
        d.cu_seqlens_k = P.cu_k;
        d.batch = nseq;
        if (with_kvl) d.kv_lens = kvl;
        char what[200];
        int n = snprintf(what, sizeof what, "varlen H%lld/%lld D%lld/%lld causal%d win%lld cap%g%s%s lens", (long long)o.H,
                         (long long)o.Hkv, (long long)o.D, (long long)o.Dv, o.causal, (long long)o.window,
                         (double)o.softcap, strided ? " strided" : "", with_kvl ? " kv_lens" : "");
        for (int b = 0; b < nseq && n < (int)sizeof what - 16; b++)
            n += snprintf(what + n, sizeof what - (size_t)n, " %lldx%lld", (long long)sq[b], (long long)sk[b]);
        check_levels(what, &d, &P.q, &P.k.t, &P.v.t, &P.out, P.ref, out_tol(of, qf, kf));
        packed_free(&P);
    }
}

/* Many query blocks per sequence (the keys are laid out once) next to short
   ones, with a 3-thread run: the work list is balanced, the bits fixed. */
static void test_varlen_long_and_short(void) {
    opts o = {.H = 4, .Hkv = 2, .D = 64, .Dv = 64, .causal = 1};
    int64_t sq[5] = {400, 1, 0, 290, 33}, sk[5] = {400, 9, 5, 300, 33};
    packed P;
    packed_make(&P, &o, 5, sq, sk, NULL, 0, 2, TOPS_FMT_F32, TOPS_FMT_F32, TOPS_FMT_F32, 0);
    tops_attention_desc d = tops_attention_desc_default();
    d.causal = 1;
    d.cu_seqlens_q = P.cu_q;
    d.cu_seqlens_k = P.cu_k;
    d.batch = 5;
    check_levels("varlen long and short", &d, &P.q, &P.k.t, &P.v.t, &P.out, P.ref, 1e-4);
    size_t bytes = (size_t)P.out.n * sizeof(float);
    void *first = malloc(bytes);
    memcpy(first, P.out.mem, bytes);
    tops_exec ex = tops_exec_default();
    ex.threads = 3;
    tb_poison(&P.out);
    ASSERT_OK(tops_attention(&ex, &d, &P.q.t, &P.k.t, &P.v.t, &P.out.t));
    ASSERT_TRUE(memcmp(first, P.out.mem, bytes) == 0);
    /* The window too, on the default kernels. */
    d.window = 50;
    o.window = 50;
    packed_free(&P);
    packed_make(&P, &o, 5, sq, sk, NULL, 0, 0, TOPS_FMT_F32, TOPS_FMT_F16, TOPS_FMT_F32, 1);
    d.cu_seqlens_q = P.cu_q;
    d.cu_seqlens_k = P.cu_k;
    check_levels("varlen long and short, window 50", &d, &P.q, &P.k.t, &P.v.t, &P.out, P.ref, 2e-4);
    free(first);
    packed_free(&P);
}

/* A quantized KV cache, packed [T, Hkv, D]: its planes move with the data. */
static void test_varlen_quantized_kv(void) {
    static const char *const formats[] = {"int8-g32", "e4m3-ch", "int4-g32"};
    for (int fi = 0; fi < 3; fi++) {
        opts o = {.H = 4, .Hkv = 2, .D = 64, .Dv = 64, .causal = fi % 2, .window = fi == 2 ? 20 : 0};
        int64_t sq[3] = {37, 0, 100}, sk[3] = {90, 4, 100};
        packed P;
        packed_make(&P, &o, 3, sq, sk, NULL, 0, 0, TOPS_FMT_F32, TOPS_FMT_F32, TOPS_FMT_F32, 0);
        tops_tensor kq, vq;
        tbuf *src[2] = {&P.k, &P.v};
        tops_tensor *dst[2] = {&kq, &vq};
        for (int i = 0; i < 2; i++) {
            tops_format f;
            ASSERT_OK(tops_format_from_name(formats[fi], &f));
            ASSERT_OK(tops_tensor_create(f, 3, src[i]->t.extent, (tops_memory){TOPS_DEVICE_CPU, 0}, dst[i]));
            ASSERT_OK(tops_quantize(&src[i]->t, dst[i], NULL));
            tops_tensor dec;
            ASSERT_OK(tops_tensor_create(tops_format_of(TOPS_DT_F32), 3, src[i]->t.extent,
                                         (tops_memory){TOPS_DEVICE_CPU, 0}, &dec));
            ASSERT_OK(tops_dequantize(dst[i], &dec));
            memcpy(src[i]->vals, dec.data, (size_t)src[i]->n * sizeof(float));
            tops_tensor_destroy(&dec);
        }
        /* The reference again, on the decoded keys and values. */
        for (int b = 0; b < 3; b++) {
            lview lq = {P.q.vals + P.cu_q[b] * o.H * o.D, o.H * o.D, o.D};
            lview lk = {P.k.vals + P.cu_k[b] * o.Hkv * o.D, o.Hkv * o.D, o.D};
            lview lv = {P.v.vals + P.cu_k[b] * o.Hkv * o.Dv, o.Hkv * o.Dv, o.Dv};
            ref_seq(&o, lq, lk, lv, sq[b], sk[b], P.ref + P.cu_q[b] * o.H * o.Dv, o.H * o.Dv, o.Dv);
        }
        tops_attention_desc d;
        desc_from(&o, &d);
        d.cu_seqlens_q = P.cu_q;
        d.cu_seqlens_k = P.cu_k;
        d.batch = 3;
        char what[64];
        snprintf(what, sizeof what, "varlen kv %s", formats[fi]);
        check_levels(what, &d, &P.q, &kq, &vq, &P.out, P.ref, 1e-4);
        tops_tensor_destroy(&kq);
        tops_tensor_destroy(&vq);
        packed_free(&P);
    }
}

/* Every sequence empty (no query rows): nothing is written, no error. */
static void test_varlen_all_empty(void) {
    opts o = {.H = 2, .Hkv = 1, .D = 16, .Dv = 16};
    int64_t sq[3] = {0, 0, 0}, sk[3] = {0, 5, 0};
    packed P;
    packed_make(&P, &o, 3, sq, sk, NULL, 0, 4, TOPS_FMT_F32, TOPS_FMT_F32, TOPS_FMT_F32, 0);
    tops_attention_desc d = tops_attention_desc_default();
    d.cu_seqlens_q = P.cu_q;
    d.cu_seqlens_k = P.cu_k;
    d.batch = 3;
    check_levels("all empty", &d, &P.q, &P.k.t, &P.v.t, &P.out, P.ref, 0);
    packed_free(&P);
}

static void test_bad_lengths(void) {
    /* Batch form: B = 2, Sq = Sk = 8. */
    tbuf q, k, v, out;
    int64_t e4[4] = {2, 2, 8, 16}, ek[4] = {2, 1, 8, 16};
    ASSERT_TRUE(tb_make(&q, TOPS_FMT_F32, 4, e4, NULL, &rng, -1, 1));
    ASSERT_TRUE(tb_make(&k, TOPS_FMT_F32, 4, ek, NULL, &rng, -1, 1));
    ASSERT_TRUE(tb_make(&v, TOPS_FMT_F32, 4, ek, NULL, &rng, -1, 1));
    ASSERT_TRUE(tb_make(&out, TOPS_FMT_F32, 4, e4, NULL, NULL, 0, 0));
    tb_poison(&out);
    tops_attention_desc d = tops_attention_desc_default();
    int32_t lens[2] = {3, 9};
    d.kv_lens = lens;
    ASSERT_FAILS_WITH(tops_attention(NULL, &d, &q.t, &k.t, &v.t, &out.t), TOPS_INVALID_ARGUMENT, "kv_lens[1] is 9");
    lens[1] = -1;
    ASSERT_FAILS_WITH(tops_attention(NULL, &d, &q.t, &k.t, &v.t, &out.t), TOPS_INVALID_ARGUMENT, "kv_lens[1] is -1");
    lens[1] = 8;
    d.batch = 3;
    ASSERT_FAILS_WITH(tops_attention(NULL, &d, &q.t, &k.t, &v.t, &out.t), TOPS_SHAPE_MISMATCH, "desc.batch is 3");
    d.batch = 0;
    tops_exec ex = tops_exec_default();
    ex.device.kind = TOPS_DEVICE_CUDA;
    /* lengths on a cuda exec reach the device checks: host tensors are refused there (no GPU: no device) */
    tops_status st = tops_attention(&ex, &d, &q.t, &k.t, &v.t, &out.t);
    ASSERT_TRUE(st == TOPS_UNSUPPORTED_ON_DEVICE || st == TOPS_INVALID_ARGUMENT);
    /* Offsets without the packed layout: the rank is named. */
    int32_t cu[3] = {0, 4, 8};
    d.kv_lens = NULL;
    d.cu_seqlens_q = d.cu_seqlens_k = cu;
    d.batch = 2;
    ASSERT_FAILS_WITH(tops_attention(NULL, &d, &q.t, &k.t, &v.t, &out.t), TOPS_SHAPE_MISMATCH, "[T, H, D] (rank 3)");
    ASSERT_FAILS_WITH(tops_attention(&ex, &d, &q.t, &k.t, &v.t, &out.t), TOPS_SHAPE_MISMATCH, "[T, H, D] (rank 3)");
    for (int64_t i = 0; i < out.n; i++) ASSERT_TRUE(isnan(((float *)out.mem)[i]));

    /* Packed form: Tq = 10, Tk = 12. */
    opts o = {.H = 2, .Hkv = 1, .D = 16, .Dv = 16};
    int64_t sq[2] = {4, 6}, sk[2] = {5, 7};
    packed P;
    packed_make(&P, &o, 2, sq, sk, NULL, 0, 0, TOPS_FMT_F32, TOPS_FMT_F32, TOPS_FMT_F32, 0);
    tops_tensor *pq = &P.q.t, *pk = &P.k.t, *pv = &P.v.t, *po = &P.out.t;
    tb_poison(&P.out);
    tops_attention_desc g = tops_attention_desc_default();
    g.cu_seqlens_q = P.cu_q;
    g.cu_seqlens_k = P.cu_k;
    g.batch = 2;
    tops_attention_desc b = g;
    b.cu_seqlens_k = NULL;
    ASSERT_FAILS_WITH(tops_attention(NULL, &b, pq, pk, pv, po), TOPS_INVALID_ARGUMENT, "cu_seqlens_k is NULL");
    b = g;
    b.cu_seqlens_q = NULL;
    ASSERT_FAILS_WITH(tops_attention(NULL, &b, pq, pk, pv, po), TOPS_INVALID_ARGUMENT, "cu_seqlens_q is NULL");
    b = g;
    b.batch = 0;
    ASSERT_FAILS_WITH(tops_attention(NULL, &b, pq, pk, pv, po), TOPS_INVALID_ARGUMENT, "desc.batch is 0");
    b.batch = -3;
    ASSERT_FAILS_WITH(tops_attention(NULL, &b, pq, pk, pv, po), TOPS_INVALID_ARGUMENT, "desc.batch is -3");
    b.batch = INT32_MAX;
    ASSERT_FAILS_WITH(tops_attention(NULL, &b, pq, pk, pv, po), TOPS_OVERFLOW, "batch + 1");
    int32_t cq[3] = {0, 4, 10}, ck[3] = {0, 5, 12};
    b = g;
    b.cu_seqlens_q = cq;
    b.cu_seqlens_k = ck;
    ASSERT_OK(tops_attention(NULL, &b, pq, pk, pv, po)); /* the good offsets, copied */
    tb_poison(&P.out);
    cq[0] = -1;
    ASSERT_FAILS_WITH(tops_attention(NULL, &b, pq, pk, pv, po), TOPS_INVALID_ARGUMENT, "cu_seqlens_q[0] is -1");
    cq[0] = 5;
    ASSERT_FAILS_WITH(tops_attention(NULL, &b, pq, pk, pv, po), TOPS_INVALID_ARGUMENT, "must not decrease");
    cq[0] = 0;
    cq[2] = 11;
    ASSERT_FAILS_WITH(tops_attention(NULL, &b, pq, pk, pv, po), TOPS_SHAPE_MISMATCH, "past the 10 tokens of q");
    cq[2] = 10;
    ck[2] = 13;
    ASSERT_FAILS_WITH(tops_attention(NULL, &b, pq, pk, pv, po), TOPS_SHAPE_MISMATCH, "past the 12 tokens of k");
    ck[2] = 12;
    ck[1] = -2;
    ASSERT_FAILS_WITH(tops_attention(NULL, &b, pq, pk, pv, po), TOPS_INVALID_ARGUMENT, "must not decrease");
    ck[1] = 5;
    int32_t kl[2] = {5, 8};
    b.kv_lens = kl;
    ASSERT_FAILS_WITH(tops_attention(NULL, &b, pq, pk, pv, po), TOPS_INVALID_ARGUMENT, "kv_lens[1] is 8");
    b.kv_lens = NULL;
    /* Shapes of the packed tensors. */
    ASSERT_FAILS_WITH(tops_attention(NULL, &b, pq, pk, pv, &out.t), TOPS_SHAPE_MISMATCH, "rank 4");
    tbuf wrong;
    int64_t ew[3] = {10, 2, 32};
    ASSERT_TRUE(tb_make(&wrong, TOPS_FMT_F32, 3, ew, NULL, &rng, -1, 1));
    ASSERT_FAILS_WITH(tops_attention(NULL, &b, pq, pk, pv, &wrong.t), TOPS_SHAPE_MISMATCH, "out is [10, 2, 32]");
    ASSERT_FAILS_WITH(tops_attention(NULL, &b, &wrong.t, pk, pv, po), TOPS_SHAPE_MISMATCH, "head dim");
    int64_t ev[3] = {11, 1, 16};
    tbuf shortv;
    ASSERT_TRUE(tb_make(&shortv, TOPS_FMT_F32, 3, ev, NULL, &rng, -1, 1));
    ASSERT_FAILS_WITH(tops_attention(NULL, &b, pq, pk, &shortv.t, po), TOPS_SHAPE_MISMATCH, "keys");
    for (int64_t i = 0; i < P.out.n; i++) ASSERT_TRUE(isnan(((float *)P.out.mem)[i]));
    tb_free(&wrong);
    tb_free(&shortv);
    packed_free(&P);
    tb_free(&q);
    tb_free(&k);
    tb_free(&v);
    tb_free(&out);
}

int main(void) {
    rng = th_seed();
    RUN_TEST(test_kv_lens);
    RUN_TEST(test_varlen_random);
    RUN_TEST(test_varlen_long_and_short);
    RUN_TEST(test_varlen_quantized_kv);
    RUN_TEST(test_varlen_all_empty);
    RUN_TEST(test_bad_lengths);
    TEST_MAIN_END();
}
