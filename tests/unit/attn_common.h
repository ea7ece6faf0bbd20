/* Helpers shared by the tile and attention tests: tensors of f32/f16/bf16
   (any strides) with the exact values they hold kept as f32, and reading a
   tensor back. */
#ifndef TOPS_TEST_ATTN_COMMON_H
#define TOPS_TEST_ATTN_COMMON_H

#include "cpu/dispatch.h"
#include "drive/attention.h"
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

/* The kernel tables the attention tests run on: every level's table (ref,
   avx2, avx512 where present), then the AMX attention route over emulated
   tiles (the tile products by their scalar contracts) on any machine, once
   with the scalar twins of the softmax and packing kernels (the next
   block's qk interleaved, as softmax_qk) and, where the CPU has AVX-512
   BF16, once with the AVX-512 ones the amx level runs, qk and softmax in
   turn (the two must give the same bits), and the amx level itself where this machine has AMX.  The AMX
   tables are skipped for operands the route does not take (attn_skip). */
typedef struct attn_table {
    const tops__kernels *k;
    const char *name;
    int amx;  /* 1: an AMX-route table */
} attn_table;
enum { ATTN_EMU_SCALAR = 3, ATTN_EMU_AVX512 = 4, ATTN_AMX = 5, ATTN_TABLES = 6 };

static long attn_emu_calls; /* tile products run over emulated tiles */

static inline void attn_emu_qk(int nds, int steps, const uint16_t *q, const uint16_t *k, int nk, int np,
                               const uint8_t *pa, const uint8_t *pb, float *s, int64_t lds) {
#ifdef TOPS_HAVE_OPENMP
#pragma omp atomic
#endif
    attn_emu_calls++;
    tops__ref_amx_attn_qk(nds, steps, q, k, nk, np, pa, pb, s, lds);
}

static inline int attn_emu_softmax_qk(const tops__amx_attn_args *a, float *s, int64_t lds, float *m, float *l,
                                      float *alpha, uint16_t *p, const tops__amx_attn_qk_job *next) {
    const int any = tops__ref_amx_attn_softmax(a, s, lds, m, l, alpha, p);
    if (next) attn_emu_qk(next->nds, next->steps, next->q, next->k, next->nk, next->np, next->pa, next->pb, next->s,
                          next->lds);
    return any;
}

/* Fills t[ATTN_TABLES] (k NULL where absent). */
static inline void attn_tables(attn_table *t) {
    static tops__kernels emu[2];
    static const tops_isa levels[3] = {TOPS_ISA_REF, TOPS_ISA_AVX2, TOPS_ISA_AVX512};
    for (int i = 0; i < 3; i++) t[i] = (attn_table){tops__kernels_for_isa(levels[i]), tops_isa_name(levels[i]), 0};
    emu[0] = *tops__kernels_get();
    emu[0].amx_attn = (tops__amx_attn_ukernel){attn_emu_qk,
                                                tops__ref_amx_attn_softmax,
                                                tops__ref_amx_attn_pv,
                                                tops__ref_amx_attn_pack_a,
                                                tops__ref_amx_attn_pack_b,
                                                attn_emu_softmax_qk,
                                                "amx attention over emulated tiles, scalar softmax"};
    t[ATTN_EMU_SCALAR] = (attn_table){&emu[0], "amx-emulated/scalar softmax", 1};
    t[ATTN_EMU_AVX512] = (attn_table){NULL, "amx-emulated/avx512 softmax", 1};
#if defined(TOPS_HAVE_AMX_KERNELS)
    tops_cpu_info ci;
    tops_cpu_get_info(&ci);
    if (ci.isa_available[TOPS_ISA_AVX512] && ci.has[TOPS_CPU_AVX512_BF16]) {
        emu[1] = emu[0];
        emu[1].amx_attn.softmax = tops__amx_attn_softmax__avx512;
        emu[1].amx_attn.pack_a = tops__amx_attn_pack_a__avx512;
        emu[1].amx_attn.pack_b = tops__amx_attn_pack_b__avx512;
        emu[1].amx_attn.softmax_qk = NULL; /* the driver's other order: softmax, then the next qk */
        emu[1].amx_attn.name = "amx attention over emulated tiles, AVX-512 softmax";
        t[ATTN_EMU_AVX512].k = &emu[1];
    }
#endif
    const tops__kernels *amx = tops__kernels_for_isa(TOPS_ISA_AMX);
    t[ATTN_AMX] = (attn_table){amx && amx->amx_attn.qk ? amx : NULL, "amx", 1};
}

/* True when table t need not run these operands (an AMX table the route
   does not take). */
static inline int attn_skip(const attn_table *t, const tops_tensor *q, const tops_tensor *k, const tops_tensor *v,
                            const tops_tensor *out) {
    return !t->k || (t->amx && !tops__attention_amx_takes(t->k, q, k, v, out));
}

#endif
