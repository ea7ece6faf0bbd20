/* Shared helpers of the matmul2d tests: random strided operands in any
   plain dtype with their exact decoded values, and an f64 oracle. */
#ifndef TOPS_TEST_MATMUL_UTIL_H
#define TOPS_TEST_MATMUL_UTIL_H

#include "harness.h"
#include "core/numeric.h"
#include "tensorops.h"
#include "formats/codec.h"

/* Tests scale down under the sanitizers and in debug builds. */
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
#define MM_FULL 1
#else
#define MM_FULL 0
#endif

/* A rank-2 operand: a view with strides and an offset into a larger
   buffer, plus the exact value of each element as a double. */
typedef struct mm_operand {
    tops_tensor t;
    void *buf;
    double *exact;      /* [rows][cols] */
    int64_t rows, cols;
} mm_operand;

static inline size_t mm_esize(tops_dtype dt) { return dt == TOPS_DT_F32 ? 4 : 2; }

static inline float mm_round(tops_dtype dt, float v) {
    if (dt == TOPS_DT_F16) return tops__f16_to_f32(tops__f32_to_f16(v));
    if (dt == TOPS_DT_BF16) return tops__bf16_to_f32(tops__f32_to_bf16(v));
    return v;
}

static inline void mm_store(tops_dtype dt, void *buf, int64_t idx, float v) {
    if (dt == TOPS_DT_F16) ((uint16_t *)buf)[idx] = tops__f32_to_f16(v);
    else if (dt == TOPS_DT_BF16) ((uint16_t *)buf)[idx] = tops__f32_to_bf16(v);
    else ((float *)buf)[idx] = v;
}

static inline double mm_load(tops_dtype dt, const void *buf, int64_t idx) {
    if (dt == TOPS_DT_F16) return tops__f16_to_f32(((const uint16_t *)buf)[idx]);
    if (dt == TOPS_DT_BF16) return tops__bf16_to_f32(((const uint16_t *)buf)[idx]);
    return ((const float *)buf)[idx];
}

/* Makes a rows x cols operand; strided = 0 gives a contiguous tensor,
   1 a padded, offset view with column stride 1 or 2 (random). */
static inline void mm_make(mm_operand *o, tops_dtype dt, int64_t rows, int64_t cols, int strided, th_rng *r) {
    int64_t s1 = strided ? 1 + (int64_t)(th_next(r) % 2) : 1;
    int64_t s0 = strided ? cols * s1 + (int64_t)(th_next(r) % 5) : cols;
    int64_t off = strided ? (int64_t)(th_next(r) % 7) : 0;
    int64_t total = off + (rows - 1) * s0 + (cols - 1) * s1 + 1;
    o->buf = calloc((size_t)total, mm_esize(dt));
    o->exact = malloc((size_t)(rows * cols) * sizeof(double));
    o->rows = rows;
    o->cols = cols;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            float v = mm_round(dt, th_uniform(r, -1.0f, 1.0f));
            mm_store(dt, o->buf, off + i * s0 + j * s1, v);
            o->exact[i * cols + j] = v;
        }
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = tops_format_of(dt);
    d.rank = 2;
    d.extent[0] = rows;
    d.extent[1] = cols;
    d.stride[0] = s0;
    d.stride[1] = s1;
    d.data = (char *)o->buf + off * (int64_t)mm_esize(dt);
    tops_status st = tops_tensor_view(&d, &o->t);
    if (st != TOPS_OK) {
        fprintf(stderr, "mm_make: %s\n", tops_last_error());
        abort();
    }
}

static inline void mm_free(mm_operand *o) {
    free(o->buf);
    free(o->exact);
    memset(o, 0, sizeof *o);
}

/* Element (i, j) of a rank-2 plain tensor. */
static inline double mm_get(const tops_tensor *t, int64_t i, int64_t j) {
    tops_dtype dt = tops_format_get_info(t->format.id)->element;
    return mm_load(dt, t->data, i * t->stride[0] + j * t->stride[1]);
}
static inline void mm_set(tops_tensor *t, int64_t i, int64_t j, float v) {
    tops_dtype dt = tops_format_get_info(t->format.id)->element;
    mm_store(dt, t->data, i * t->stride[0] + j * t->stride[1], v);
}

/* Poisons every element of dest with NaN. */
static inline void mm_poison(tops_tensor *t) {
    for (int64_t i = 0; i < t->extent[0]; i++)
        for (int64_t j = 0; j < t->extent[1]; j++) mm_set(t, i, j, NAN);
}

/* out[m][n] = sum_k A[m][k] * B[k][n] in f64 over the exact operand
   values, honouring the transposes, plus base[m][n] if base. */
static inline void mm_oracle(const mm_operand *a, int ta, const mm_operand *b, int tb, int64_t m, int64_t n,
                             int64_t k, const double *base, double *out, double *magnitude) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = base ? base[i * n + j] : 0.0, g = base ? fabs(base[i * n + j]) : 0.0;
            for (int64_t p = 0; p < k; p++) {
                double av = ta ? a->exact[p * a->cols + i] : a->exact[i * a->cols + p];
                double bv = tb ? b->exact[j * b->cols + p] : b->exact[p * b->cols + j];
                s += av * bv;
                g += fabs(av * bv);
            }
            out[i * n + j] = s;
            if (magnitude) magnitude[i * n + j] = g;
        }
}

/* ||t - want|| / ||magnitude||: the error relative to the sum of |terms|,
   which stays meaningful when the results themselves cancel to ~0. */
static inline double mm_normwise(const tops_tensor *t, const double *want, const double *magnitude) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < t->extent[0]; i++)
        for (int64_t j = 0; j < t->extent[1]; j++) {
            double g = mm_get(t, i, j), w = want[i * t->extent[1] + j], mg = magnitude[i * t->extent[1] + j];
            if (!isfinite(g)) return NAN;
            num += (g - w) * (g - w);
            den += mg * mg;
        }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Relative L2 error of a tensor against exact values; NaN if any element
   is not finite (an unwritten, poisoned element). */
static inline double mm_rel_l2(const tops_tensor *t, const double *want) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < t->extent[0]; i++)
        for (int64_t j = 0; j < t->extent[1]; j++) {
            double g = mm_get(t, i, j), w = want[i * t->extent[1] + j];
            if (!isfinite(g)) return NAN;
            num += (g - w) * (g - w);
            den += w * w;
        }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* A weight operand in any format: random f32 quantized with tops_quantize;
   exact[] holds the decoded values (the formats layer is the truth).
   blocks_dim0: scale blocks run along dimension 0 (a [K, N] weight). */
static inline void mm_make_quant(mm_operand *o, tops_format fmt, int64_t rows, int64_t cols, int blocks_dim0,
                                 th_rng *r) {
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    int64_t ext[2] = {rows, cols};
    tops_tensor src;
    if (tops_tensor_create(tops_format_of(TOPS_DT_F32), 2, ext, host, &src) != TOPS_OK) abort();
    for (int64_t i = 0; i < rows * cols; i++) ((float *)src.data)[i] = th_uniform(r, -1.0f, 1.0f);
    tops_format res;
    if (tops_format_resolve(fmt, &res) != TOPS_OK) abort();
    const tops_format_info *info = tops_format_get_info(res.id);
    if (!blocks_dim0) {
        if (tops_tensor_create(fmt, 2, ext, host, &o->t) != TOPS_OK) {
            fprintf(stderr, "mm_make_quant: %s\n", tops_last_error());
            abort();
        }
        o->buf = NULL;
    } else {
        /* A view over our own planes with blocks of `group` rows. */
        tops_tensor_desc d;
        memset(&d, 0, sizeof d);
        d.format = res;
        d.rank = 2;
        d.extent[0] = rows;
        d.extent[1] = cols;
        size_t data_bytes = (size_t)(rows * ((cols + info->pack_elems - 1) / info->pack_elems) * info->pack_bytes);
        int64_t srows = (rows + res.group - 1) / res.group;
        size_t sbytes = (size_t)(srows * cols) * (size_t)((tops_dtype_bits(res.scale) + 7) / 8);
        size_t bbytes = info->has_bias ? (size_t)(srows * cols) * 2 : 0;
        char *mem = calloc(1, data_bytes + sbytes + bbytes + 64);
        o->buf = mem;
        d.data = mem;
        d.scales.data = mem + data_bytes;
        d.scales.block[0] = res.group;
        d.scales.block[1] = 1;
        if (info->has_bias) {
            d.bias.data = mem + data_bytes + sbytes;
            d.bias.block[0] = res.group;
            d.bias.block[1] = 1;
        }
        if (tops_tensor_view(&d, &o->t) != TOPS_OK) {
            fprintf(stderr, "mm_make_quant view: %s\n", tops_last_error());
            abort();
        }
    }
    if (tops_quantize(&src, &o->t, NULL) != TOPS_OK) {
        fprintf(stderr, "mm_make_quant quantize: %s\n", tops_last_error());
        abort();
    }
    float *dec = malloc((size_t)(rows * cols) * sizeof(float));
    tops__decode_rect(&o->t, NULL, 0, rows, 0, cols, dec, cols);
    o->exact = malloc((size_t)(rows * cols) * sizeof(double));
    for (int64_t i = 0; i < rows * cols; i++) o->exact[i] = dec[i];
    o->rows = rows;
    o->cols = cols;
    free(dec);
    tops_tensor_destroy(&src);
}

/* Frees an operand from mm_make or mm_make_quant. */
static inline void mm_free_any(mm_operand *o) {
    if (!o->buf) tops_tensor_destroy(&o->t);
    mm_free(o);
}

#endif
