/* Fused attention on AMX tiles (docs/tiles.md, "AMX"): f16/bf16 q, k, v.
   Keys and values are laid out once per call as bf16 terms in the tile
   layouts (K^T per 16-key group in the pair layout, V per 32-key step);
   each work item is 32 query rows (two row tiles) of one head, run
   against key blocks of up to 128 keys: S = Q K^T on the tiles, the
   online-softmax step in AVX-512 (P as bf16 terms; the next block's Q K^T
   issued between its rows, into a second S buffer), O = O * alpha + P V
   on the tiles, O kept in f32 in memory; at the end O / l is written
   through the tile engine's store.  Terms: an f16 operand is hi + lo
   (exact: f16 has 11 significant bits), a bf16 one is itself; P is one
   term when out is bf16, hi + lo otherwise (to 2^-16, so f32 and f16
   outputs keep the f32 path's bounds).  Products: every term pair but lo
   x lo (< 2^-18 of the product).  Same work list and order as the f32
   driver, so the bits do not depend on the thread count. */
#include "drive/attention.h"
#include "formats/traits.h"
#include "core/threads.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef TOPS_HAVE_OPENMP
#include <omp.h>
#endif

enum { QROWS = 32, KSTEPS = 4 }; /* 32 query rows; key blocks of KSTEPS x 32 keys */

#define LAYOUT_MAX_BYTES ((size_t)1 << 30)

static size_t align64(size_t v) { return (v + 63) & ~(size_t)63; }

static int half_format(const tops_tensor *t) {
    return (tops__float_of(t) == TOPS_DT_F16 || tops__float_of(t) == TOPS_DT_BF16) && t->tensor_scale == 1.0f;
}

int tops__attention_amx_takes(const tops__kernels *kern, const tops_tensor *q, const tops_tensor *k,
                              const tops_tensor *v, const tops_tensor *out) {
    (void)out;
    return kern->amx_attn.qk && kern->amx_attn.softmax && kern->amx_attn.pv && kern->amx_attn.pack_a &&
           kern->amx_attn.pack_b && half_format(q) && half_format(k) &&
           half_format(v);
}

const char *tops__attention_kernel_name(const tops__kernels *kern, const tops_tensor *q, const tops_tensor *k,
                                        const tops_tensor *v, const tops_tensor *out) {
    return tops__attention_amx_takes(kern, q, k, v, out) ? kern->amx_attn.name : kern->tile_gemm.name;
}

typedef struct amx_job {
    const tops__kernels *kern;
    const tops__attention_plan *p; /* q_block = kv_block = 32 */
    const tops_tensor *q, *k, *v, *out;
    const tops__attn_seq *seqs;
    const tops__attn_order *order;
    int64_t items, ns; /* work items; 32-key steps of all sequences */
    int nq, nk, nv, npt, nds, ncg2;
    int qk_np, pv_np;
    uint8_t qk_pa[3], qk_pb[3], pv_pa[3], pv_pb[3];
    uint16_t *kp, *vp;
    int64_t kstep, vstep; /* words per 32-key step */
    float c2, cap, cap_k;
} amx_job;

/* Per-thread workspace: Q terms, S, P terms, the O tile, m / l / alpha,
   and an f32 staging block (32 rows of the wider head dim). */
typedef struct amx_worker {
    uint16_t *qt, *pt;
    float *s, *stage, *m, *l, *alpha;
    tops_tile o;
} amx_worker;

static size_t worker_parts(const amx_job *J, size_t part[6]) {
    const int64_t wide = J->nds > J->ncg2 ? J->nds : J->ncg2;
    part[0] = align64((size_t)J->nq * 2 * (size_t)J->nds * 512 * 2);
    part[1] = align64((size_t)J->npt * 2 * KSTEPS * 512 * 2);
    part[2] = align64((size_t)2 * QROWS * 32 * KSTEPS * 4); /* two S buffers: the next block's qk runs during this
                                                                softmax */
    part[3] = align64((size_t)QROWS * (size_t)wide * 32 * 4);
    part[4] = align64(3 * QROWS * 4);
    part[5] = align64(tops__tile_bytes(QROWS, (int32_t)J->p->dv));
    size_t t = 0;
    for (int i = 0; i < 6; i++) t += part[i];
    return t;
}

static void worker_init(const amx_job *J, amx_worker *w, unsigned char *mem) {
    size_t part[6];
    worker_parts(J, part);
    w->qt = (uint16_t *)mem;
    mem += part[0];
    w->pt = (uint16_t *)mem;
    mem += part[1];
    w->s = (float *)mem;
    mem += part[2];
    w->stage = (float *)mem;
    mem += part[3];
    w->m = (float *)mem;
    w->l = w->m + QROWS;
    w->alpha = w->l + QROWS;
    mem += part[4];
    tops__tile_make(&w->o, QROWS, (int32_t)J->p->dv, mem);
}

/* Lays out 32-key step f (of kv_heads * ns): K^T terms (two 16-key
   groups) and V terms, zeros past the sequence's keys and head dims. */
static void fill_step(const amx_job *J, float *stage, int64_t f) {
    const tops__attention_plan *p = J->p;
    const int64_t hk = f / J->ns, step = f % J->ns;
    int64_t lo = 0, hi = p->batch - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (J->seqs[mid].blk0 <= step)
            lo = mid;
        else
            hi = mid - 1;
    }
    const tops__attn_seq *s = &J->seqs[lo];
    const int64_t j0 = (step - s->blk0) * 32, n = s->sk - j0 < 32 ? s->sk - j0 : 32;
    const int64_t dp = 32 * (int64_t)J->nds, dvp = 32 * (int64_t)J->ncg2;
    const tops__amx_attn_ukernel *ak = &J->kern->amx_attn;
    /* K^T: stage[d][key] (zeros past the keys and D), then per 16-key
       group g, term u: the pair layout over all d-steps (row k2 = d / 2 at
       k2 * 32: d-step d at d * 512). */
    memset(stage, 0, (size_t)(32 * dp) * sizeof(float));
    tops__mat km = {J->k, {s->outer, hk}, s->k0 + j0, 0, n, p->d};
    if (n > 0) tops__mat_read(J->kern, &km, 0, n, 0, p->d, stage, 32, 1);
    ak->pack_b(stage, 32, dp / 2, 2, J->nk, (int64_t)J->nk * J->nds * 512, (int64_t)J->nds * 512,
               J->kp + f * J->kstep);
    /* V: stage[key][c], then term u, column group g at (u * ncg + g) * 512. */
    memset(stage, 0, (size_t)(32 * dvp) * sizeof(float));
    tops__mat vm = {J->v, {s->outer, hk}, s->k0 + j0, 0, n, p->dv};
    if (n > 0) tops__mat_read(J->kern, &vm, 0, n, 0, p->dv, stage, dvp, 0);
    ak->pack_b(stage, dvp, 16, 2 * J->ncg2, J->nv, 512, 2 * (int64_t)J->ncg2 * 512, J->vp + f * J->vstep);
}

static void run_item(const amx_job *J, amx_worker *w, int64_t item) {
    const tops__kernels *kern = J->kern;
    const tops__attention_plan *p = J->p;
    int64_t h, qb;
    const tops__attn_seq *s = tops__attention_item(p, J->seqs, J->order, item, &h, &qb);
    const int64_t hk = h / (p->heads / p->kv_heads);
    const int64_t i0 = qb * QROWS, rows = s->sq - i0 < QROWS ? s->sq - i0 : QROWS;
    const int64_t pos_lo = i0 + s->sk - s->sq, pos_hi = pos_lo + rows - 1;

    /* Q terms: term u, row tile r, d-step d: 16 rows of 32 at ((u * 2 + r) * nds + d) * 512. */
    const int64_t dp = 32 * (int64_t)J->nds;
    memset(w->stage, 0, (size_t)(QROWS * dp) * sizeof(float));
    tops__mat qm = {J->q, {s->outer, h}, s->q0 + i0, 0, rows, p->d};
    tops__mat_read(kern, &qm, 0, rows, 0, p->d, w->stage, dp, 0);
    const int64_t qterm = 2 * (int64_t)J->nds * 512;
    for (int r = 0; r < 2; r++)
        kern->amx_attn.pack_a(w->stage + r * 16 * dp, dp, 16, J->nds, J->nq, qterm, w->qt + r * J->nds * 512);

    tops_tile *o = &w->o;
    o->rows = QROWS;
    memset(o->data, 0, (size_t)QROWS * (size_t)o->ld * sizeof(float));
    for (int i = 0; i < QROWS; i++) {
        w->m[i] = -INFINITY;
        w->l[i] = 0.0f;
    }
    tops__amx_attn_args a;
    memset(&a, 0, sizeof a);
    a.pos0 = pos_lo;
    a.causal = p->causal;
    a.window = p->window;
    a.c2 = J->c2;
    a.cap = J->cap;
    a.cap_k = J->cap_k;
    a.np_terms = J->npt;
    const int64_t lds = 32 * KSTEPS;
    const int64_t base = hk * J->ns + s->blk0;
    int64_t lo, hi;
    tops__attention_key_range(p, s->sk, pos_lo, pos_hi, &lo, &hi);
    /* Key blocks [j0, j0 + 32 steps): S of block b in buffer b % 2; with
       softmax_qk the next block's S = Q K^T runs on the tiles while this
       block's softmax runs on the vector units. */
    const tops__amx_attn_ukernel *ak = &kern->amx_attn;
    const int64_t first = lo / 32 * 32, nblocks = hi > first ? (hi - first + 32 * KSTEPS - 1) / (32 * KSTEPS) : 0;
    tops__amx_attn_qk_job job[2];
    for (int64_t b = 0; b < nblocks; b++) {
        const int64_t j0 = first + b * 32 * KSTEPS, need = hi - j0 < 32 * KSTEPS ? hi - j0 : 32 * KSTEPS;
        tops__amx_attn_qk_job *jb = &job[b % 2];
        if (b == 0 || !ak->softmax_qk) { /* (else the previous softmax_qk ran it) */
            *jb = (tops__amx_attn_qk_job){J->nds, (int)((need + 31) / 32), J->nk, J->qk_np, w->qt,
                                          J->kp + (base + j0 / 32) * J->kstep, J->qk_pa, J->qk_pb,
                                          w->s + (b % 2) * QROWS * lds, lds};
            ak->qk(jb->nds, jb->steps, jb->q, jb->k, jb->nk, jb->np, jb->pa, jb->pb, jb->s, jb->lds);
        }
        a.steps = jb->steps;
        a.j0 = j0;
        a.ncols = s->sk - j0;
        int any;
        if (ak->softmax_qk) {
            tops__amx_attn_qk_job *jn = NULL;
            if (b + 1 < nblocks) {
                const int64_t j1 = j0 + 32 * KSTEPS, need1 = hi - j1 < 32 * KSTEPS ? hi - j1 : 32 * KSTEPS;
                jn = &job[(b + 1) % 2];
                *jn = (tops__amx_attn_qk_job){J->nds, (int)((need1 + 31) / 32), J->nk, J->qk_np, w->qt,
                                              J->kp + (base + j1 / 32) * J->kstep, J->qk_pa, J->qk_pb,
                                              w->s + ((b + 1) % 2) * QROWS * lds, lds};
            }
            any = ak->softmax_qk(&a, jb->s, lds, w->m, w->l, w->alpha, w->pt, jn);
        } else {
            any = ak->softmax(&a, jb->s, lds, w->m, w->l, w->alpha, w->pt);
        }
        ak->pv(a.steps, w->pt, J->npt, J->vp + (base + j0 / 32) * J->vstep, J->nv, J->ncg2, J->pv_np, J->pv_pa,
               J->pv_pb, any ? w->alpha : NULL, o->data, o->ld);
    }
    /* 1 / l, with zeros for rows that saw no key at all. */
    for (int64_t i = 0; i < rows; i++) {
        const float l = w->l[i];
        w->alpha[i] = isnan(l) ? NAN : l > 0.0f ? 1.0f / l : 0.0f;
    }
    o->rows = (int32_t)rows;
    const tops_tile_map_desc rescale = {.op = TOPS_MAP_SCALE, .row_values = w->alpha};
    tops__tile_map(kern, o, &rescale);
    tops__mat om = {J->out, {s->outer, h}, s->q0 + i0, 0, rows, p->dv};
    tops__tile_store(kern, o, &om);
}

static void pairs(int na, int nb, uint8_t *pa, uint8_t *pb, int *np) {
    int n = 0;
    pa[n] = 0, pb[n] = 0, n++;
    if (nb > 1) pa[n] = 0, pb[n] = 1, n++;
    if (na > 1) pa[n] = 1, pb[n] = 0, n++;
    *np = n;
}

#define KEEP_MAX_BYTES ((size_t)64 << 20)

tops_status tops__attention_amx_drive(const tops__kernels *kern, const tops__attention_plan *plan, const tops_tensor *q,
                                      const tops_tensor *k, const tops_tensor *v, const tops_tensor *out) {
    tops__attention_plan p = *plan;
    p.q_block = QROWS;
    p.kv_block = 32;
    amx_job J;
    memset(&J, 0, sizeof J);
    J.kern = kern;
    J.p = &p;
    J.q = q, J.k = k, J.v = v, J.out = out;
    J.nq = tops__float_of(q) == TOPS_DT_BF16 ? 1 : 2;
    J.nk = tops__float_of(k) == TOPS_DT_BF16 ? 1 : 2;
    J.nv = tops__float_of(v) == TOPS_DT_BF16 ? 1 : 2;
    J.npt = tops__float_of(out) == TOPS_DT_BF16 ? 1 : 2;
    J.nds = (int)((p.d + 31) / 32);
    J.ncg2 = (int)((p.dv + 31) / 32);
    pairs(J.nq, J.nk, J.qk_pa, J.qk_pb, &J.qk_np);
    pairs(J.npt, J.nv, J.pv_pa, J.pv_pb, &J.pv_np);
    J.kstep = 2 * (int64_t)J.nk * J.nds * 512;
    J.vstep = (int64_t)J.nv * 2 * J.ncg2 * 512;
    const float log2e = 1.44269504f;
    if (p.softcap > 0.0f) {
        J.c2 = log2e;
        J.cap = p.softcap;
        J.cap_k = p.scale / p.softcap * (2.0f * log2e);
    } else {
        J.c2 = p.scale * log2e;
    }
    double flops;
    void *seqmem = tops__attention_sequences(&p, &J.seqs, &J.order, &J.items, &J.ns, &flops);
    if (!seqmem)
        return tops__fail(TOPS_OUT_OF_MEMORY, "tops_attention", "could not allocate the list of %lld sequences",
                          (long long)p.batch);
    if (J.items == 0) {
        free(seqmem);
        return TOPS_OK;
    }
    const double layout = (double)p.kv_heads * (double)J.ns * (double)(J.kstep + J.vstep) * 2.0;
    if (layout > (double)LAYOUT_MAX_BYTES) {
        free(seqmem);
        return TOPS_UNSUPPORTED_FORMAT;
    }
    size_t part[6];
    const size_t per = worker_parts(&J, part);
    int threads = p.threads;
    if (threads > J.items) threads = (int)J.items;
    threads = tops__threads_for(TOPS__WORK_ATTENTION, flops, threads);
    const size_t total = per * (size_t)threads + align64((size_t)layout) + 64;
    unsigned char *mem = tops__thread_buffer(TOPS__SLOT_ATTENTION, total);
    if (!mem) {
        free(seqmem);
        return tops__fail(TOPS_OUT_OF_MEMORY, "tops_attention", "could not allocate %zu bytes of workspace", total);
    }
    mem = (unsigned char *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
    J.kp = (uint16_t *)(mem + per * (size_t)threads);
    J.vp = J.kp + p.kv_heads * J.ns * J.kstep;
    const int64_t fills = p.kv_heads * J.ns, items = J.items;
    const amx_job *JP = &J;
#ifdef TOPS_HAVE_OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        TOPS__NOTE_REGION();
        amx_worker w;
        worker_init(JP, &w, mem + per * (size_t)omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
        for (int64_t f = 0; f < fills; f++) fill_step(JP, w.stage, f);
        /* the implicit barrier: every key is laid out before any query block runs */
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < items; item++) run_item(JP, &w, item);
    }
#else
    amx_worker w;
    worker_init(JP, &w, mem);
    for (int64_t f = 0; f < fills; f++) fill_step(JP, w.stage, f);
    for (int64_t item = 0; item < items; item++) run_item(JP, &w, item);
#endif
    tops__thread_buffer_trim(TOPS__SLOT_ATTENTION, KEEP_MAX_BYTES);
    free(seqmem);
    return TOPS_OK;
}
