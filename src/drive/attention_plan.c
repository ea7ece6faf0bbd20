/* The attention plan's shared pieces, used by both drivers (the fused
   tile driver, src/drive/attention.c, and the AMX one,
   src/drive/attention_amx.c): which keys a block of queries may see, and
   the sequences of a call in the order they are handed to threads. */
#include "drive/attention.h"

#include <stdlib.h>

/* Keys [lo, hi) that some query at positions [pos_lo, pos_hi] may see in a
   sequence of sk keys. */
void tops__attention_key_range(const tops__attention_plan *p, int64_t sk, int64_t pos_lo, int64_t pos_hi, int64_t *lo,
                               int64_t *hi) {
    int64_t a = 0, b = sk;
    if (p->causal && pos_hi + 1 < b) b = pos_hi + 1;
    if (p->window > 0) {
        if (pos_lo - p->window + 1 > a) a = pos_lo - p->window + 1;
        if (!p->causal && pos_hi + p->window < b) b = pos_hi + p->window;
    }
    *lo = a;
    *hi = b;
}

/* Longest first; ties in a fixed order (the bits never depend on it). */
static int by_cost(const void *a, const void *b) {
    const tops__attn_order *x = a, *y = b;
    if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
    return x->b < y->b ? -1 : x->b > y->b;
}

/* The sequences, and the order they are handed out (longest first; equal
   ones in batch order, so a uniform batch runs b, h, query blocks as
   before), into the outputs (malloc'd as one block, returned); total
   flops into *flops.  NULL when out of memory. */
void *tops__attention_sequences(const tops__attention_plan *p, const tops__attn_seq **seqs_out,
                                const tops__attn_order **order_out, int64_t *items_out, int64_t *nblk_out,
                                double *flops) {
    size_t bytes = (size_t)p->batch * (sizeof(tops__attn_seq) + sizeof(tops__attn_order));
    unsigned char *mem = malloc(bytes);
    if (!mem) return NULL;
    tops__attn_seq *seqs = (tops__attn_seq *)mem;
    tops__attn_order *order = (tops__attn_order *)(mem + (size_t)p->batch * sizeof(tops__attn_seq));
    int64_t nblk = 0;
    *flops = 0;
    for (int64_t b = 0; b < p->batch; b++) {
        tops__attn_seq *s = &seqs[b];
        s->outer = p->varlen ? 0 : b;
        s->q0 = p->varlen ? p->cu_q[b] : 0;
        s->sq = p->varlen ? (int64_t)p->cu_q[b + 1] - p->cu_q[b] : p->sq;
        s->k0 = p->varlen ? p->cu_k[b] : 0;
        s->sk = p->kv_lens ? p->kv_lens[b] : p->varlen ? (int64_t)p->cu_k[b + 1] - p->cu_k[b] : p->sk;
        s->blk0 = nblk;
        s->nblk = tops__ceil_div(s->sk, p->kv_block);
        nblk += s->nblk;
        double f = 2.0 * (double)p->heads * (double)s->sq * (double)s->sk * (double)(p->d + p->dv);
        *flops += p->causal ? f / 2 : f;
        /* Its cost: each query block's rows times the key span they may see. */
        tops__attn_order *r = &order[b];
        r->b = b;
        r->nqb = tops__ceil_div(s->sq, p->q_block);
        r->cost = 0;
        for (int64_t qb = 0; qb < r->nqb; qb++) {
            int64_t i0 = qb * p->q_block, rows = s->sq - i0 < p->q_block ? s->sq - i0 : p->q_block;
            int64_t pos_lo = i0 + s->sk - s->sq, lo, hi;
            tops__attention_key_range(p, s->sk, pos_lo, pos_lo + rows - 1, &lo, &hi);
            r->cost += (double)rows * (double)((hi > lo ? hi - lo : 0) + 1);
        }
    }
    qsort(order, (size_t)p->batch, sizeof *order, by_cost);
    int64_t items = 0;
    for (int64_t k = 0; k < p->batch; k++) {
        order[k].item0 = items;
        items += order[k].nqb * p->heads;
    }
    *seqs_out = seqs;
    *order_out = order;
    *items_out = items;
    *nblk_out = nblk;
    return mem;
}


const tops__attn_seq *tops__attention_item(const tops__attention_plan *p, const tops__attn_seq *seqs,
                                           const tops__attn_order *order, int64_t item, int64_t *h, int64_t *qb) {
    int64_t lo = 0, hi = p->batch - 1;
    while (lo < hi) { /* the last sequence whose items start at or before item */
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (order[mid].item0 <= item)
            lo = mid;
        else
            hi = mid - 1;
    }
    const tops__attn_order *rs = &order[lo];
    const int64_t rem = item - rs->item0;
    *h = rem / rs->nqb;
    *qb = rs->nqb - 1 - rem % rs->nqb;
    return &seqs[rs->b];
}
