/* lut4 / lut4-row: 4-bit indices into a 16-entry f16 codebook, one per
   tensor (lut4) or per row (lut4-row).  The codebook is fitted by 1-D
   k-means (Lloyd) over the finite values: centroids start at the 16
   quantile midpoints of the sorted values, and each iteration moves every
   centroid to the mean of the values nearer to it than to its neighbours
   (prefix sums over the sorted values make an iteration O(16 log n)).
   Deterministic: no random starts (a per-tensor codebook of more than 2^20
   values is fitted on every k-th value).  Entries are stored as f16 and each
   element takes the nearest stored entry (the lowest index on ties).
   NaN or +-Inf anywhere in a codebook's extent (the tensor for lut4, the
   row for lut4-row) makes all 16 entries f16 NaN and every index 0: the
   extent decodes to NaN (FORMATS.md's one NaN/Inf rule). */
#include "formats/codec_impl.h"
#include "formats/elem.h"

#include <float.h>
#include <string.h>

#define LUT_N 16

/* Sorts m finite floats ascending: an LSD radix sort (3 passes of 11 bits)
   on order-preserving integer keys; scratch holds 2m keys. */
static void sort_floats(float *v, int64_t m, uint32_t *scratch) {
    uint32_t *a = scratch, *b = scratch + m;
    for (int64_t i = 0; i < m; i++) {
        uint32_t x = tops__f32_bits(v[i]);
        a[i] = x & 0x80000000u ? ~x : x | 0x80000000u;
    }
    for (int shift = 0; shift < 33; shift += 11) {
        int64_t count[2048 + 1] = {0};
        for (int64_t i = 0; i < m; i++) count[((a[i] >> shift) & 2047u) + 1]++;
        for (int k = 0; k < 2048; k++) count[k + 1] += count[k];
        for (int64_t i = 0; i < m; i++) b[count[(a[i] >> shift) & 2047u]++] = a[i];
        uint32_t *t = a;
        a = b;
        b = t;
    }
    for (int64_t i = 0; i < m; i++) {
        uint32_t k = a[i];
        v[i] = tops__bits_f32(k & 0x80000000u ? k & 0x7fffffffu : ~k);
    }
}

/* First index in v[0..n) with v[i] >= t (v sorted). */
static int64_t lower_bound(const float *v, int64_t n, double t) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if ((double)v[mid] < t) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

#define F16_NAN 0x7E00u

/* Whether the n values hold NaN or +-Inf. */
static int any_nonfinite(const float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!(fabsf(v[i]) <= FLT_MAX)) return 1;
    return 0;
}

/* Fits 16 f16 entries to the n finite values of v (reordered in place);
   prefix is scratch of n + 1 doubles. */
static void fit_codebook(float *v, int64_t n, double *prefix, int iterations, uint16_t *out) {
    int64_t m = n;
    double c[LUT_N];
    if (m == 0) {
        for (int j = 0; j < LUT_N; j++) out[j] = 0;
        return;
    }
    sort_floats(v, m, (uint32_t *)prefix); /* prefix has room for 2(n + 1) keys */
    prefix[0] = 0.0;
    for (int64_t i = 0; i < m; i++) prefix[i + 1] = prefix[i] + v[i];
    for (int j = 0; j < LUT_N; j++) c[j] = v[((2 * (int64_t)j + 1) * m) / (2 * LUT_N)];
    for (int it = 0; it < iterations; it++) {
        int64_t lo = 0;
        for (int j = 0; j < LUT_N; j++) {
            int64_t hi = j == LUT_N - 1 ? m : lower_bound(v, m, 0.5 * (c[j] + c[j + 1]));
            if (hi < lo) hi = lo;
            if (hi > lo) c[j] = (prefix[hi] - prefix[lo]) / (double)(hi - lo);
            lo = hi;
        }
    }
    for (int j = 0; j < LUT_N; j++) out[j] = (uint16_t)tops__encode_elem(TOPS_DT_F16, (float)c[j], 1);
}

/* A per-tensor codebook is fitted on at most this many values: every
   stride-th element in memory order (deterministic) of a larger tensor. */
#define FIT_MAX_VALUES ((int64_t)1 << 20)

typedef struct fit_walk {
    const tops__qctx *ctx;
    const tops_tensor *src;
    tops_tensor *dst;
    float *vals, *row;
    double *prefix;
    int64_t filled, seen, stride;
    int iterations, nonfinite; /* lut4: a NaN or Inf anywhere in the tensor */
} fit_walk;

static tops_status gather_row(void *user, const int64_t *idx) {
    fit_walk *w = user;
    int last = w->src->rank - 1;
    int64_t n = w->src->extent[last];
    tops__gather_input(w->ctx, w->src, idx, last, n, w->row);
    if (any_nonfinite(w->row, n)) w->nonfinite = 1;
    for (int64_t k = 0; k < n; k++, w->seen++)
        if (w->seen % w->stride == 0) w->vals[w->filled++] = w->row[k];
    return TOPS_OK;
}

static tops_status fit_row(void *user, const int64_t *idx) {
    fit_walk *w = user;
    int last = w->src->rank - 1;
    int64_t n = w->src->extent[last];
    tops__gather_input(w->ctx, w->src, idx, last, n, w->vals);
    uint16_t *cb = tops__codebook_at(w->dst, idx);
    if (any_nonfinite(w->vals, n))
        for (int j = 0; j < LUT_N; j++) cb[j] = F16_NAN;
    else fit_codebook(w->vals, n, w->prefix, w->iterations, cb);
    return TOPS_OK;
}

static tops_status lut_prepare(tops__qctx *ctx, const tops_tensor *src, tops_tensor *dst) {
    int per_row = ctx->info->codebook == 2, last = src->rank - 1;
    int64_t row = src->extent[last], numel = tops_tensor_numel(src);
    int64_t stride = per_row || numel <= FIT_MAX_VALUES ? 1 : tops__ceil_div(numel, FIT_MAX_VALUES);
    int64_t n = per_row ? row : tops__ceil_div(numel, stride);
    fit_walk w = {ctx, src, dst, malloc((size_t)n * sizeof(float)), malloc((size_t)row * sizeof(float)),
                  malloc((size_t)(n + 1) * sizeof(double)), 0, 0, stride, ctx->lut_iterations, 0};
    if (!w.vals || !w.row || !w.prefix) {
        free(w.vals);
        free(w.row);
        free(w.prefix);
        return tops__fail(TOPS_OUT_OF_MEMORY, "tops_quantize", "could not allocate %lld values to fit a codebook",
                          (long long)n);
    }
    if (per_row) {
        tops__for_each_index(src->extent, src->rank, last, fit_row, &w);
    } else {
        tops__for_each_index(src->extent, src->rank, last, gather_row, &w);
        int64_t zero[TOPS_MAX_RANK] = {0};
        uint16_t *cb = tops__codebook_at(dst, zero);
        if (w.nonfinite)
            for (int j = 0; j < LUT_N; j++) cb[j] = F16_NAN;
        else fit_codebook(w.vals, w.filled, w.prefix, w.iterations, cb);
    }
    free(w.vals);
    free(w.row);
    free(w.prefix);
    return TOPS_OK;
}

static void lut_encode(const tops__qctx *ctx, const float *x, int64_t n, uint32_t *codes, uint32_t *scale,
                       uint32_t *bias) {
    float cb[LUT_N];
    int lo = 0, hi = 0;
    for (int j = 0; j < LUT_N; j++) {
        cb[j] = tops__f16_to_f32(ctx->codebook[j]);
        if (cb[j] < cb[lo]) lo = j;
        if (cb[j] > cb[hi]) hi = j;
    }
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        uint32_t best = 0;
        if (cb[0] != cb[0]) best = 0; /* a NaN codebook (its extent held NaN or Inf) */
        else if (v != v) best = 0;    /* unreachable: such a value makes the codebook NaN */
        else if (isinf(v)) best = (uint32_t)(v > 0 ? hi : lo);
        else {
            float best_d = fabsf(v - cb[0]);
            for (int j = 1; j < LUT_N; j++) {
                float d = fabsf(v - cb[j]);
                if (d < best_d) {
                    best_d = d;
                    best = (uint32_t)j;
                }
            }
        }
        codes[i] = best;
    }
}

static void lut_decode(const tops__qctx *ctx, const uint32_t *codes, int64_t n, uint32_t scale, uint32_t bias,
                       float *out) {
    for (int64_t i = 0; i < n; i++) out[i] = tops__f16_to_f32(ctx->codebook[codes[i] & 0xFu]);
}

const tops__codec tops__codec_lut = {.prepare = lut_prepare, .encode = lut_encode, .decode = lut_decode};
