/* Flash attention on the CPU, written with the tile engine as the seed
   writes it on Metal: per (batch, head, query block) one thread owns a
   score tile S and an output tile O; for each key block S = Q K^T, then
   scale / soft-cap / mask maps, a row max with identity -inf, exp(S - m)
   with each row's max, a row sum, and S fed as the left input of O += S V.
   Memory per thread is O(q_block * (kv_block + D)); nothing grows with
   Sq * Sk.  Each work item is computed by one thread in a fixed order, so
   the bits do not depend on the thread count. */
#include "drive/attention.h"

#include <math.h>
#include <string.h>

#ifdef TOPS_HAVE_OPENMP
#include <omp.h>
#endif

enum { ROW_ARRAYS = 5 }; /* m, l, alpha, block max, block sum */

static size_t align64(size_t v) { return (v + 63) & ~(size_t)63; }

size_t tops__attention_thread_bytes(const tops__attention_plan *p) {
    return align64(tops_tile_storage_bytes(p->q_block, p->kv_block)) +
           align64(tops_tile_storage_bytes(p->q_block, (int32_t)p->dv)) +
           align64((size_t)ROW_ARRAYS * (size_t)p->q_block * sizeof(float));
}

typedef struct worker {
    tops_tile s, o;
    float *m, *l, *alpha, *bmax, *bsum;
} worker;

static void worker_init(worker *w, const tops__attention_plan *p, unsigned char *mem) {
    size_t sb = align64(tops_tile_storage_bytes(p->q_block, p->kv_block));
    size_t ob = align64(tops_tile_storage_bytes(p->q_block, (int32_t)p->dv));
    /* Checked by the op: these sizes are valid, so init cannot fail. */
    tops_tile_init(&w->s, p->q_block, p->kv_block, mem, sb);
    tops_tile_init(&w->o, p->q_block, (int32_t)p->dv, mem + sb, ob);
    float *rows = (float *)(mem + sb + ob);
    w->m = rows;
    w->l = rows + p->q_block;
    w->alpha = rows + 2 * p->q_block;
    w->bmax = rows + 3 * p->q_block;
    w->bsum = rows + 4 * p->q_block;
}

/* Keys [lo, hi) that some query at positions [pos_lo, pos_hi] may see. */
static void key_range(const tops__attention_plan *p, int64_t pos_lo, int64_t pos_hi, int64_t *lo, int64_t *hi) {
    int64_t a = 0, b = p->sk;
    if (p->causal && pos_hi + 1 < b) b = pos_hi + 1;
    if (p->window > 0) {
        if (pos_lo - p->window + 1 > a) a = pos_lo - p->window + 1;
        if (!p->causal && pos_hi + p->window < b) b = pos_hi + p->window;
    }
    *lo = a;
    *hi = b;
}

/* True if no (query, key) pair of the block is masked. */
static int block_visible(const tops__attention_plan *p, int64_t pos_lo, int64_t pos_hi, int64_t j0, int64_t j1) {
    if (p->causal && j1 - 1 > pos_lo) return 0;
    if (p->window > 0) {
        int64_t far = (j1 - 1) - pos_lo > pos_hi - j0 ? (j1 - 1) - pos_lo : pos_hi - j0;
        if (far >= p->window) return 0;
    }
    return 1;
}

static void run_item(const tops__kernels *kern, const tops__attention_plan *p, worker *w, int64_t item,
                     const tops_tensor *q, const tops_tensor *k, const tops_tensor *v, const tops_tensor *out) {
    int64_t nqb = tops__ceil_div(p->sq, p->q_block);
    int64_t b = item / (p->heads * nqb), h = item / nqb % p->heads;
    int64_t qb = nqb - 1 - item % nqb; /* later query blocks see more keys: hand them out first */
    int64_t hk = h / (p->heads / p->kv_heads);
    int64_t i0 = qb * p->q_block, rows = p->sq - i0 < p->q_block ? p->sq - i0 : p->q_block;
    int64_t pos_lo = i0 + p->sk - p->sq, pos_hi = pos_lo + rows - 1;

    tops__mat qm = {q, {b, h}, i0, 0, rows, p->d};
    tops__mat km = {k, {b, hk}, 0, 0, 0, p->d};
    tops__mat vm = {v, {b, hk}, 0, 0, 0, p->dv};
    tops__mat om = {out, {b, h}, i0, 0, rows, p->dv};
    tops_tile *s = &w->s, *o = &w->o;
    /* Ragged blocks reuse the tiles with fewer rows / columns (same ld). */
    s->rows = o->rows = (int32_t)rows;
    memset(o->data, 0, (size_t)rows * (size_t)o->ld * sizeof(float));
    for (int64_t i = 0; i < rows; i++) {
        w->m[i] = -INFINITY;
        w->l[i] = 0.0f;
    }
    tops_tile_map_desc scale = {.op = TOPS_MAP_SCALE, .value = p->scale};
    tops_tile_map_desc cap = {.op = TOPS_MAP_SOFTCAP, .value = p->softcap};
    tops_tile_map_desc mask = {.op = TOPS_MAP_MASK_CAUSAL, .row_offset = pos_lo, .causal = p->causal,
                               .window = p->window};
    tops_tile_map_desc sub_exp = {.op = TOPS_MAP_SUB_EXP, .row_values = w->m};
    tops_tile_map_desc rescale = {.op = TOPS_MAP_SCALE, .row_values = w->alpha};

    int64_t lo, hi;
    key_range(p, pos_lo, pos_hi, &lo, &hi);
    for (int64_t j0 = lo / p->kv_block * p->kv_block; j0 < hi; j0 += p->kv_block) {
        int64_t cols = p->sk - j0 < p->kv_block ? p->sk - j0 : p->kv_block;
        s->cols = (int32_t)cols;
        km.r0 = vm.r0 = j0;
        km.rows = vm.rows = cols;
        tops__tile_matmul(kern, 0, 1, 0, &qm, NULL, &km, s); /* S = Q K^T */
        tops__tile_map(kern, s, &scale);
        if (p->softcap > 0.0f) tops__tile_map(kern, s, &cap);
        if (!block_visible(p, pos_lo, pos_hi, j0, j0 + cols)) {
            mask.col_offset = j0;
            tops__tile_map(kern, s, &mask);
        }
        tops__tile_reduce_rows(kern, s, TOPS_REDUCE_MAX, -INFINITY, w->bmax);
        int rescale_needed = 0;
        for (int64_t i = 0; i < rows; i++) {
            float mo = w->m[i], mn = w->bmax[i] > mo ? w->bmax[i] : mo;
            if (isnan(w->bmax[i])) mn = NAN;
            /* Equal maxima (both -inf included) keep the sum as it is. */
            w->alpha[i] = mo == mn ? 1.0f : expf(mo - mn);
            rescale_needed |= w->alpha[i] != 1.0f;
            w->m[i] = mn;
        }
        tops__tile_map(kern, s, &sub_exp); /* P = exp(S - m) */
        tops__tile_reduce_rows(kern, s, TOPS_REDUCE_SUM, 0.0f, w->bsum);
        for (int64_t i = 0; i < rows; i++) w->l[i] = w->l[i] * w->alpha[i] + w->bsum[i];
        if (rescale_needed) tops__tile_map(kern, o, &rescale);
        tops__tile_matmul(kern, 0, 0, 1, NULL, s, &vm, o); /* O += P V */
    }
    /* 1 / l, with zeros for rows that saw no key at all. */
    for (int64_t i = 0; i < rows; i++) {
        float l = w->l[i];
        w->alpha[i] = isnan(l) ? NAN : l > 0.0f ? 1.0f / l : 0.0f;
    }
    tops__tile_map(kern, o, &rescale);
    tops__tile_store(kern, o, &om);
}

tops_status tops__attention_drive(const tops__kernels *kern, const tops__attention_plan *p, const tops_tensor *q,
                                  const tops_tensor *k, const tops_tensor *v, const tops_tensor *out) {
    size_t per = tops__attention_thread_bytes(p), total;
    int threads = p->threads;
    int64_t items = p->batch * p->heads * tops__ceil_div(p->sq, p->q_block);
    if (threads > items) threads = (int)items;
    if (!tops__mul_size(per, (size_t)threads, &total))
        return tops__fail(TOPS_OVERFLOW, "tops_attention", "workspace size overflows size_t");
    unsigned char *mem = NULL, *owned = NULL;
    if (p->scratch && p->scratch_bytes >= total + 64) {
        mem = (unsigned char *)(((uintptr_t)p->scratch + 63) & ~(uintptr_t)63);
    } else {
        owned = tops__aligned_alloc(total);
        if (!owned)
            return tops__fail(TOPS_OUT_OF_MEMORY, "tops_attention", "could not allocate %zu bytes of workspace", total);
        mem = owned;
    }
#ifdef TOPS_HAVE_OPENMP
#pragma omp parallel num_threads(threads)
    {
        worker w;
        worker_init(&w, p, mem + per * (size_t)omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < items; item++) run_item(kern, p, &w, item, q, k, v, out);
    }
#else
    worker w;
    worker_init(&w, p, mem);
    for (int64_t item = 0; item < items; item++) run_item(kern, p, &w, item, q, k, v, out);
#endif
    tops__aligned_free(owned);
    return TOPS_OK;
}
