/* Flash attention on the CPU, written with the tile engine as the seed
   writes it on Metal: per (batch, head, query block) one thread owns a
   score tile S and an output tile O; for each key block S = Q K^T, then
   soft-cap / mask maps, a row max with identity -inf, P = exp(scale (S - m))
   with each row's max and its row sums in the same pass, and S fed as the
   left input of O += P V.
   Memory per thread is O(q_block * (kv_block + D)), plus one f32 copy of
   the keys (and values, when not f32) laid out for the kernels when several
   query blocks share them: O(Sk * D).  Nothing grows with Sq * Sk.  Each
   work item is computed by one thread in a fixed order, so the bits do not
   depend on the thread count.
   Sequences may differ in length (per-batch key counts, or packed varlen
   tensors): each has its own rows, lengths and bottom-right alignment, and
   the sequences are handed out longest first (their work items head by
   head, query blocks innermost, so one head's keys stay in cache), which
   keeps threads balanced whatever the mix of lengths. */
#include "drive/attention.h"
#include "formats/traits.h"
#include "core/threads.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef TOPS_HAVE_OPENMP
#include <omp.h>
#endif

enum { ROW_ARRAYS = 5 }; /* m, l, alpha, block max, block sum */

static size_t align64(size_t v) { return (v + 63) & ~(size_t)63; }

size_t tops__attention_thread_bytes(const tops__attention_plan *p) {
    return align64(tops__tile_bytes(p->q_block, p->kv_block)) +
           align64(tops__tile_bytes(p->q_block, (int32_t)p->dv)) +
           align64((size_t)ROW_ARRAYS * (size_t)p->q_block * sizeof(float));
}

typedef struct worker {
    tops_tile s, o;
    float *m, *l, *alpha, *bmax, *bsum;
} worker;

static void worker_init(worker *w, const tops__attention_plan *p, unsigned char *mem) {
    size_t sb = align64(tops__tile_bytes(p->q_block, p->kv_block));
    size_t ob = align64(tops__tile_bytes(p->q_block, (int32_t)p->dv));
    /* Sizes checked by the op; mem is 64-byte aligned. */
    tops__tile_make(&w->s, p->q_block, p->kv_block, mem);
    tops__tile_make(&w->o, p->q_block, (int32_t)p->dv, mem + sb);
    float *rows = (float *)(mem + sb + ob);
    w->m = rows;
    w->l = rows + p->q_block;
    w->alpha = rows + 2 * p->q_block;
    w->bmax = rows + 3 * p->q_block;
    w->bsum = rows + 4 * p->q_block;
}

/* One sequence (tops__attn_seq, drive/attention.h), and a sequence in the
   order handed out (tops__attn_order). */
typedef tops__attn_seq seq;
typedef tops__attn_order run_seq;

/* True if no (query, key) pair of the block is masked. */
static int block_visible(const tops__attention_plan *p, int64_t pos_lo, int64_t pos_hi, int64_t j0, int64_t j1) {
    if (p->causal && j1 - 1 > pos_lo) return 0;
    if (p->window > 0) {
        int64_t far = (j1 - 1) - pos_lo > pos_hi - j0 ? (j1 - 1) - pos_lo : pos_hi - j0;
        if (far >= p->window) return 0;
    }
    return 1;
}

/* Query rows [*r_lo, *r_hi) of a block (positions pos_lo + row) that see
   at least one key of [j0, j1).  The other rows would only get -inf scores
   there (p = 0, alpha = 1), so leaving them out changes nothing; on the
   causal diagonal it saves the work of the rows above it. */
static void visible_rows(const tops__attention_plan *p, int64_t pos_lo, int64_t rows, int64_t j0, int64_t j1,
                         int64_t *r_lo, int64_t *r_hi) {
    int64_t first = pos_lo, last = pos_lo + rows - 1;
    if (p->causal && j0 > first) first = j0;
    if (p->window > 0) {
        if (!p->causal && j0 - p->window + 1 > first) first = j0 - p->window + 1;
        if (j1 - 2 + p->window < last) last = j1 - 2 + p->window;
    }
    *r_lo = first - pos_lo;
    *r_hi = last < first ? *r_lo : last - pos_lo + 1;
}

/* Keys laid out once per run when several query blocks share them: K^T as
   f32 panels [Hkv * NB, D, kv_block] (NB: the key blocks of all sequences;
   sequence b's panels for kv head hk are contiguous, from (blk0 * Hkv +
   hk * nblk)), so that each key block is one contiguous [D, kv_block]
   panel the tile matmul reads in place (instead of transposing or decoding
   the same keys once per query block), and V as f32 [Hkv, NB * kv_block,
   Dv] when it is not f32 already.  O(Sk * D) memory, the size of the cache
   itself. */
typedef struct kv_layout {
    tops_tensor kt, vd;
    int have_kt, have_vd;
    float *mem;
} kv_layout;

/* Everything a run shares: the plan, the tensors (packed ones as [1, H, T,
   D] views), the sequences, and the sequences in the order handed out. */
typedef struct job {
    const tops__kernels *kern;
    const tops__attention_plan *p;
    const tops_tensor *q, *k, *v, *out;
    const seq *seqs;
    const run_seq *order;
    int64_t items, nblk; /* work items; key blocks of all sequences */
    kv_layout layout;
    const kv_layout *L;   /* &layout when the keys are laid out, else NULL */
} job;

#define PREPACK_MAX_BYTES ((size_t)1 << 30)

static int v_is_direct(const tops_tensor *v) {
    return tops__float_of(v) == TOPS_DT_F32 && v->tensor_scale == 1.0f && v->stride[3] == 1;
}

/* Floats of the key layout, or 0 when a per-block layout is the better or
   the only choice. */
static size_t kv_layout_floats(const job *J) {
    const tops__attention_plan *p = J->p;
    if (tops__ceil_div(p->sq, p->q_block) < 2 || J->nblk == 0) return 0; /* one query block each: nothing to share */
    double kt = (double)p->kv_heads * (double)J->nblk * (double)p->d * (double)p->kv_block;
    double vd = v_is_direct(J->v) ? 0 : (double)p->kv_heads * (double)J->nblk * (double)p->kv_block * (double)p->dv;
    if (kt + vd > (double)(PREPACK_MAX_BYTES / sizeof(float))) return 0;
    return (size_t)(kt + vd);
}

/* Plans the layout in mem (kv_layout_floats of it; no data yet). */
static void kv_layout_plan(job *J, float *mem) {
    const tops__attention_plan *p = J->p;
    kv_layout *L = &J->layout;
    memset(L, 0, sizeof *L);
    L->mem = mem;
    tops_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.format = tops_format_of(TOPS_DT_F32);
    d.rank = 4;
    d.extent[0] = 1, d.extent[1] = p->kv_heads * J->nblk, d.extent[2] = p->d, d.extent[3] = p->kv_block;
    d.data = L->mem;
    L->have_kt = tops_tensor_view(&d, &L->kt) == TOPS_OK;
    if (!v_is_direct(J->v)) {
        memset(&d, 0, sizeof d);
        d.format = tops_format_of(TOPS_DT_F32);
        d.rank = 4;
        d.extent[0] = 1, d.extent[1] = p->kv_heads, d.extent[2] = J->nblk * p->kv_block, d.extent[3] = p->dv;
        d.data = L->mem + (size_t)p->kv_heads * (size_t)J->nblk * (size_t)p->d * (size_t)p->kv_block;
        L->have_vd = tops_tensor_view(&d, &L->vd) == TOPS_OK;
    }
    TOPS_ASSERT(L->have_kt && (L->have_vd || v_is_direct(J->v)));
    J->L = L;
}

/* Lays out panel f (of kv_heads * nblk, in memory order). */
static void kv_layout_fill(const job *J, int64_t f) {
    const tops__attention_plan *p = J->p;
    const kv_layout *L = J->L;
    /* The sequence: the last whose first panel is at or before f (sequences
       without keys own no panel and share their first panel's index). */
    int64_t lo = 0, hi = p->batch - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (J->seqs[mid].blk0 * p->kv_heads <= f)
            lo = mid;
        else
            hi = mid - 1;
    }
    const seq *s = &J->seqs[lo];
    int64_t rem = f - s->blk0 * p->kv_heads, hk = rem / s->nblk, blk = rem % s->nblk, j0 = blk * p->kv_block;
    int64_t n = s->sk - j0 < p->kv_block ? s->sk - j0 : p->kv_block;
    tops__mat km = {J->k, {s->outer, hk}, s->k0 + j0, 0, n, p->d};
    float *kt = (float *)L->kt.data + f * L->kt.stride[1];
    tops__mat_read(J->kern, &km, 0, n, 0, p->d, kt, L->kt.stride[2], 1);
    if (L->have_vd) {
        tops__mat vm = {J->v, {s->outer, hk}, s->k0 + j0, 0, n, p->dv};
        float *vd = (float *)L->vd.data + hk * L->vd.stride[1] + (s->blk0 * p->kv_block + j0) * L->vd.stride[2];
        tops__mat_read(J->kern, &vm, 0, n, 0, p->dv, vd, L->vd.stride[2], 0);
    }
}

/* One query block's state while its key blocks stream past. */
typedef struct item_ctx {
    const tops__kernels *kern;
    const tops__attention_plan *p;
    worker *w;
    tops__mat qm, km, vm;
    int kt;          /* keys come from the laid-out K^T panels */
    int64_t qrow, krow, vrow, panel0; /* the block's first query row; row 0 of the sequence's keys and values;
                                         its first K^T panel */
    int64_t pos_lo;
    int scale_in_exp;
    float exp_scale;
    tops_tile_map_desc scale, cap, mask, sub_exp, rescale;
} item_ctx;

/* Query rows [r_lo, r_hi) of the block against keys [j0, j0 + cols): S =
   Q K^T, masks, the online-softmax update and O += P V, on views of the
   tiles that cover just those rows and keys. */
static void run_block(item_ctx *c, int64_t r_lo, int64_t r_hi, int64_t j0, int64_t cols) {
    const tops__kernels *kern = c->kern;
    const tops__attention_plan *p = c->p;
    worker *w = c->w;
    tops_tile sv = w->s, ov = w->o;
    sv.data += r_lo * w->s.ld;
    ov.data += r_lo * w->o.ld;
    sv.rows = ov.rows = (int32_t)(r_hi - r_lo);
    sv.cols = (int32_t)cols;
    c->qm.r0 = c->qrow + r_lo;
    c->qm.rows = r_hi - r_lo;
    if (c->kt) {
        c->km.outer[1] = c->panel0 + j0 / p->kv_block;
        c->km.cols = cols;
    } else {
        c->km.r0 = c->krow + j0;
        c->km.rows = cols;
    }
    c->vm.r0 = c->vrow + j0;
    c->vm.rows = cols;
    tops__tile_matmul(kern, 0, !c->kt, 0, &c->qm, NULL, &c->km, &sv); /* S = Q K^T */
    if (!c->scale_in_exp) {
        tops__tile_map(kern, &sv, &c->scale);
        tops__tile_map(kern, &sv, &c->cap);
    }
    if (!block_visible(p, c->pos_lo + r_lo, c->pos_lo + r_hi - 1, j0, j0 + cols)) {
        c->mask.row_offset = c->pos_lo + r_lo;
        c->mask.col_offset = j0;
        tops__tile_map(kern, &sv, &c->mask);
    }
    tops__tile_reduce_rows(kern, &sv, TOPS_REDUCE_MAX, -INFINITY, w->bmax + r_lo);
    int rescale_needed = 0;
    for (int64_t i = r_lo; i < r_hi; i++) {
        float mo = w->m[i], mn = w->bmax[i] > mo ? w->bmax[i] : mo;
        if (isnan(w->bmax[i])) mn = NAN;
        /* Equal maxima (both -inf included) keep the sum as it is. */
        w->alpha[i] = mo == mn ? 1.0f : expf((mo - mn) * c->exp_scale);
        rescale_needed |= w->alpha[i] != 1.0f;
        w->m[i] = mn;
    }
    c->sub_exp.row_values = w->m + r_lo;
    c->sub_exp.row_sums = w->bsum + r_lo;
    tops__tile_map(kern, &sv, &c->sub_exp); /* P = exp(S - m), and its row sums */
    for (int64_t i = r_lo; i < r_hi; i++) w->l[i] = w->l[i] * w->alpha[i] + w->bsum[i];
    c->rescale.row_values = w->alpha + r_lo;
    if (rescale_needed) tops__tile_map(kern, &ov, &c->rescale);
    tops__tile_matmul(kern, 0, 0, 1, NULL, &sv, &c->vm, &ov); /* O += P V */
}

/* Work item `item` (tops__attention_item says which sequence, head and
   query block). */
static void run_item(const job *J, worker *w, int64_t item) {
    const tops__kernels *kern = J->kern;
    const tops__attention_plan *p = J->p;
    const kv_layout *L = J->L;
    int64_t h, qb;
    const seq *s = tops__attention_item(p, J->seqs, J->order, item, &h, &qb);
    int64_t hk = h / (p->heads / p->kv_heads);
    int64_t i0 = qb * p->q_block, rows = s->sq - i0 < p->q_block ? s->sq - i0 : p->q_block;
    int64_t pos_lo = i0 + s->sk - s->sq, pos_hi = pos_lo + rows - 1; /* bottom-right aligned in the sequence */

    item_ctx c;
    c.kern = kern;
    c.p = p;
    c.w = w;
    c.qrow = s->q0 + i0;
    c.pos_lo = pos_lo;
    c.qm = (tops__mat){J->q, {s->outer, h}, c.qrow, 0, rows, p->d};
    /* Keys: rows j of K ([Sk, D], read transposed), or the laid-out K^T
       panel of the block ([D, kv_block]). */
    c.kt = L && L->have_kt;
    c.krow = s->k0;
    c.panel0 = s->blk0 * p->kv_heads + hk * s->nblk;
    if (c.kt)
        c.km = (tops__mat){&L->kt, {0, 0}, 0, 0, p->d, 0};
    else
        c.km = (tops__mat){J->k, {s->outer, hk}, 0, 0, 0, p->d};
    if (L && L->have_vd) {
        c.vm = (tops__mat){&L->vd, {0, hk}, 0, 0, 0, p->dv};
        c.vrow = s->blk0 * p->kv_block;
    } else {
        c.vm = (tops__mat){J->v, {s->outer, hk}, 0, 0, 0, p->dv};
        c.vrow = s->k0;
    }
    tops__mat om = {J->out, {s->outer, h}, c.qrow, 0, rows, p->dv};
    tops_tile *o = &w->o;
    /* Ragged blocks reuse the tiles with fewer rows / columns (same ld). */
    o->rows = (int32_t)rows;
    memset(o->data, 0, (size_t)rows * (size_t)o->ld * sizeof(float));
    for (int64_t i = 0; i < rows; i++) {
        w->m[i] = -INFINITY;
        w->l[i] = 0.0f;
    }
    c.scale = (tops_tile_map_desc){.op = TOPS_MAP_SCALE, .value = p->scale};
    c.cap = (tops_tile_map_desc){.op = TOPS_MAP_SOFTCAP, .value = p->softcap};
    c.mask = (tops_tile_map_desc){.op = TOPS_MAP_MASK_CAUSAL, .causal = p->causal, .window = p->window};
    /* Without soft-capping the scale rides on the exp: maxima and masks work
       on raw dot products, and P = exp(scale * (S - m)) with its row sums
       in one pass. */
    c.scale_in_exp = !(p->softcap > 0.0f);
    c.exp_scale = c.scale_in_exp ? p->scale : 1.0f;
    c.sub_exp = (tops_tile_map_desc){.op = TOPS_MAP_SUB_EXP, .row_values = w->m, .scale = c.exp_scale,
                                     .row_sums = w->bsum};
    c.rescale = (tops_tile_map_desc){.op = TOPS_MAP_SCALE, .row_values = w->alpha};

    int64_t lo, hi;
    tops__attention_key_range(p, s->sk, pos_lo, pos_hi, &lo, &hi);
    for (int64_t j0 = lo / p->kv_block * p->kv_block; j0 < hi; j0 += p->kv_block) {
        int64_t cols = s->sk - j0 < p->kv_block ? s->sk - j0 : p->kv_block, r_lo, r_hi;
        visible_rows(p, pos_lo, rows, j0, j0 + cols, &r_lo, &r_hi);
        if (r_lo >= r_hi) continue;
        if (!(c.kt && p->causal && j0 + cols - 1 > pos_lo + r_lo)) {
            run_block(&c, r_lo, r_hi, j0, cols);
            continue;
        }
        /* A key block across the causal diagonal: each group of microkernel
           rows takes only the key strips its last row can see, so the
           micro-tiles wholly above the diagonal are neither computed, nor
           exponentiated, nor multiplied by V (GFLOP/s count visible pairs
           only).  Only with the K^T panels: they are read in place, so a
           narrower block costs no extra key layout. */
        int64_t mr = kern->tile_gemm.mr, nr = kern->tile_gemm.nr;
        for (int64_t g0 = r_lo; g0 < r_hi; g0 += mr) {
            int64_t g1 = r_hi - g0 < mr ? r_hi : g0 + mr, seen = pos_lo + g1 - j0; /* keys the last row sees */
            int64_t gc = (seen + nr - 1) / nr * nr;
            run_block(&c, g0, g1, j0, gc < cols ? gc : cols);
        }
    }
    /* 1 / l, with zeros for rows that saw no key at all. */
    for (int64_t i = 0; i < rows; i++) {
        float l = w->l[i];
        w->alpha[i] = isnan(l) ? NAN : l > 0.0f ? 1.0f / l : 0.0f;
    }
    c.rescale.row_values = w->alpha;
    tops__tile_map(kern, o, &c.rescale);
    tops__tile_store(kern, o, &om);
}

/* The calling thread keeps its workspace (tiles and key layout) between
   calls up to this size: fresh pages cost page faults and zeroing on every
   call (about 2% of a causal S = 2048 head set); larger ones are returned.
   The kept one is freed when the thread exits (src/core/threads.c). */
#define KEEP_MAX_BYTES ((size_t)64 << 20)

static unsigned char *workspace_get(size_t bytes) { return tops__thread_buffer(TOPS__SLOT_ATTENTION, bytes); }

static void workspace_done(void) { tops__thread_buffer_trim(TOPS__SLOT_ATTENTION, KEEP_MAX_BYTES); }

tops_status tops__attention_drive(const tops__kernels *kern, const tops__attention_plan *p, const tops_tensor *q,
                                  const tops_tensor *k, const tops_tensor *v, const tops_tensor *out) {
    job J;
    memset(&J, 0, sizeof J);
    J.kern = kern;
    J.p = p;
    tops_tensor views[4];
    if (p->varlen) {
        tops__tensor_packed_view(q, &views[0]);
        tops__tensor_packed_view(k, &views[1]);
        tops__tensor_packed_view(v, &views[2]);
        tops__tensor_packed_view(out, &views[3]);
        q = &views[0], k = &views[1], v = &views[2], out = &views[3];
    }
    J.q = q, J.k = k, J.v = v, J.out = out;
    if (tops__attention_amx_takes(kern, q, k, v, out)) {
        tops_status st = tops__attention_amx_drive(kern, p, q, k, v, out);
        if (st != TOPS_UNSUPPORTED_FORMAT) return st; /* else: too large a key layout; the f32 path runs */
    }
    double flops;
    void *seqmem = tops__attention_sequences(p, &J.seqs, &J.order, &J.items, &J.nblk, &flops);
    if (!seqmem)
        return tops__fail(TOPS_OUT_OF_MEMORY, "tops_attention", "could not allocate the list of %lld sequences",
                          (long long)p->batch);
    size_t per = tops__attention_thread_bytes(p), total;
    int threads = p->threads;
    int64_t items = J.items;
    if (items == 0) { /* every sequence is empty: nothing to write */
        free(seqmem);
        return TOPS_OK;
    }
    if (threads > items) threads = (int)items;
    threads = tops__threads_for(TOPS__WORK_ATTENTION, flops, threads);
    if (!tops__mul_size(per, (size_t)threads, &total)) {
        free(seqmem);
        return tops__fail(TOPS_OVERFLOW, "tops_attention", "workspace size overflows size_t");
    }
    int in_scratch = p->scratch && p->scratch_bytes >= total + 64;
    size_t tiles = in_scratch ? 0 : total, kv = kv_layout_floats(&J) * sizeof(float);
    unsigned char *mem = NULL, *kvmem = NULL;
    /* The key layout is optional: without memory for it, the per-block path runs. */
    if (kv && (kvmem = workspace_get(tiles + kv)) == NULL) kv = 0;
    if (!kvmem && tiles && (kvmem = workspace_get(tiles)) == NULL) {
        free(seqmem);
        return tops__fail(TOPS_OUT_OF_MEMORY, "tops_attention", "could not allocate %zu bytes of workspace", total);
    }
    mem = in_scratch ? (unsigned char *)(((uintptr_t)p->scratch + 63) & ~(uintptr_t)63) : kvmem;
    if (kv) kv_layout_plan(&J, (float *)(kvmem + tiles));
    int64_t fills = J.L ? p->kv_heads * J.nblk : 0;
    const job *JP = &J;
#ifdef TOPS_HAVE_OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        TOPS__NOTE_REGION();
        worker w;
        worker_init(&w, p, mem + per * (size_t)omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
        for (int64_t f = 0; f < fills; f++) kv_layout_fill(JP, f);
        /* the implicit barrier: every key is laid out before any query block runs */
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < items; item++) run_item(JP, &w, item);
    }
#else
    worker w;
    worker_init(&w, p, mem);
    for (int64_t f = 0; f < fills; f++) kv_layout_fill(JP, f);
    for (int64_t item = 0; item < items; item++) run_item(JP, &w, item);
#endif
    workspace_done();
    free(seqmem);
    return TOPS_OK;
}
