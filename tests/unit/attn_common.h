/* Helpers shared by the tile and attention tests: tensors of f32/f16/bf16
   (any strides) with the exact values they hold kept as f32, and reading a
   tensor back. */
#ifndef TOPS_TEST_ATTN_COMMON_H
#define TOPS_TEST_ATTN_COMMON_H

#include "harness.h"
#include "core/numeric.h"
#include "tensorops.h"

typedef struct tbuf {
    tops_tensor t;
    void *mem;
    float *vals; /* logical row-major values (what the tensor holds) */
    int64_t n;
} tbuf;

static inline size_t tb_esize(tops_format_id f) { return f == TOPS_FMT_F32 ? 4 : 2; }

static inline void tb_put(tops_format_id f, void *mem, int64_t off, float x) {
    if (f == TOPS_FMT_F32)
        ((float *)mem)[off] = x;
    else if (f == TOPS_FMT_F16)
        ((uint16_t *)mem)[off] = tops__f32_to_f16(x);
    else
        ((uint16_t *)mem)[off] = tops__f32_to_bf16(x);
}
static inline float tb_get(tops_format_id f, const void *mem, int64_t off) {
    if (f == TOPS_FMT_F32) return ((const float *)mem)[off];
    if (f == TOPS_FMT_F16) return tops__f16_to_f32(((const uint16_t *)mem)[off]);
    return tops__bf16_to_f32(((const uint16_t *)mem)[off]);
}

/* Storage offset of a logical index under a permuted layout: perm lists
   the logical dimensions from outermost to innermost in memory. */
static inline void tb_strides(int rank, const int64_t *ext, const int *perm, int64_t *stride) {
    int64_t s = 1;
    for (int p = rank - 1; p >= 0; p--) {
        stride[perm[p]] = s;
        s *= ext[perm[p]];
    }
}

/* A tensor of format f (f32/f16/bf16) with values from gen (or uniform in
   [lo, hi]), laid out by perm (NULL = contiguous). */
static inline int tb_make(tbuf *b, tops_format_id f, int rank, const int64_t *ext, const int *perm, th_rng *rng,
                          float lo, float hi) {
    int ident[4] = {0, 1, 2, 3};
    if (!perm) perm = ident;
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format.id = f;
    d.rank = rank;
    b->n = 1;
    for (int i = 0; i < rank; i++) {
        d.extent[i] = ext[i];
        b->n *= ext[i];
    }
    tb_strides(rank, ext, perm, d.stride);
    b->mem = malloc((size_t)b->n * tb_esize(f));
    b->vals = malloc((size_t)b->n * sizeof(float));
    d.data = b->mem;
    d.data_bytes = (size_t)b->n * tb_esize(f);
    int64_t idx[4] = {0, 0, 0, 0};
    for (int64_t l = 0; l < b->n; l++) {
        int64_t rem = l, off = 0;
        for (int i = rank - 1; i >= 0; i--) {
            idx[i] = rem % ext[i];
            rem /= ext[i];
        }
        for (int i = 0; i < rank; i++) off += idx[i] * d.stride[i];
        float x = rng ? th_uniform(rng, lo, hi) : 0.0f;
        tb_put(f, b->mem, off, x);
        b->vals[l] = tb_get(f, b->mem, off);
    }
    return tops_tensor_view(&d, &b->t) == TOPS_OK;
}

/* Reads the tensor back into logical order. */
static inline void tb_read(const tbuf *b, float *out) {
    const tops_tensor *t = &b->t;
    int64_t idx[4];
    for (int64_t l = 0; l < b->n; l++) {
        int64_t rem = l, off = 0;
        for (int i = t->rank - 1; i >= 0; i--) {
            idx[i] = rem % t->extent[i];
            rem /= t->extent[i];
        }
        for (int i = 0; i < t->rank; i++) off += idx[i] * t->stride[i];
        out[l] = tb_get(t->format.id, t->data, off);
    }
}

/* Fills every stored element with NaN, so an unwritten one shows. */
static inline void tb_poison(tbuf *b) {
    size_t es = tb_esize(b->t.format.id);
    if (es == 4)
        for (int64_t i = 0; i < b->n; i++) ((float *)b->mem)[i] = NAN;
    else
        for (int64_t i = 0; i < b->n; i++) ((uint16_t *)b->mem)[i] = 0x7fc0;
}

static inline void tb_free(tbuf *b) {
    free(b->mem);
    free(b->vals);
    memset(b, 0, sizeof *b);
}

#endif
