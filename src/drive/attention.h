/* The fused attention driver: blocking over queries and keys, per-thread
   tiles, online softmax.  Arguments were checked by src/ops/attention.c. */
#ifndef TOPS_DRIVE_ATTENTION_H
#define TOPS_DRIVE_ATTENTION_H

#include "drive/tile.h"

typedef struct tops__attention_plan {
    int64_t batch, heads, kv_heads, d, dv;
    int64_t sq, sk;   /* the longest query and key sequence */
    /* Sequences of different lengths (checked by the op): */
    int varlen;                 /* q, k, v, out are packed [T, H, D] */
    const int32_t *kv_lens;     /* NULL, or batch key counts */
    const int32_t *cu_q, *cu_k; /* varlen: batch + 1 row offsets each */
    int causal;
    int64_t window;   /* 0 = none */
    float scale;      /* resolved (never 0) */
    float softcap;    /* 0 = off */
    int32_t q_block, kv_block;
    int threads;
    void *scratch;    /* caller scratch, or NULL */
    size_t scratch_bytes;
} tops__attention_plan;

/* One sequence: where its rows are in the [B, H, S, D] views (packed
   tensors as [1, H, T, D]), and its lengths. */
typedef struct tops__attn_seq {
    int64_t outer;      /* index along dimension 0 (0 for packed tensors) */
    int64_t q0, sq;     /* query rows [q0, q0 + sq) */
    int64_t k0, sk;     /* key rows [k0, k0 + sk) */
    int64_t blk0, nblk; /* its key blocks (of kv_block) among all sequences' */
} tops__attn_seq;
/* A sequence in the order handed out: its work items are [item0, item0 +
   heads * nqb), head-major, query blocks innermost. */
typedef struct tops__attn_order {
    int64_t b, item0, nqb;
    double cost;
} tops__attn_order;

/* (src/drive/attention_plan.c, shared by both drivers:) the sequences of
   a plan (by q_block and kv_block) and the order they are handed out (longest first); returns the malloc'd block holding both
   (free it), NULL when out of memory. */
void *tops__attention_sequences(const tops__attention_plan *p, const tops__attn_seq **seqs,
                                const tops__attn_order **order, int64_t *items, int64_t *nblk, double *flops);
/* Work item `item` of that order: its sequence (returned), head *h and
   query block *qb (the last block first: later blocks see more keys under
   a causal mask). */
const tops__attn_seq *tops__attention_item(const tops__attention_plan *p, const tops__attn_seq *seqs,
                                           const tops__attn_order *order, int64_t item, int64_t *h, int64_t *qb);
/* Keys [lo, hi) that some query at positions [pos_lo, pos_hi] may see in a
   sequence of sk keys. */
void tops__attention_key_range(const tops__attention_plan *p, int64_t sk, int64_t pos_lo, int64_t pos_hi, int64_t *lo,
                               int64_t *hi);

/* The AMX route (src/drive/attention_amx.c): taken when the level has the
   AMX attention kernels and q, k, v are f16 or bf16 (plain). */
int tops__attention_amx_takes(const tops__kernels *kern, const tops_tensor *q, const tops_tensor *k,
                              const tops_tensor *v, const tops_tensor *out);
/* Runs it (tensors as the driver's [B, H, S, D] views); TOPS_UNSUPPORTED_FORMAT
   (nothing written, no error recorded) when its key layout would pass 1 GiB. */
tops_status tops__attention_amx_drive(const tops__kernels *kern, const tops__attention_plan *p, const tops_tensor *q,
                                      const tops_tensor *k, const tops_tensor *v, const tops_tensor *out);
/* The kernel tops_attention runs for these operands at this level. */
const char *tops__attention_kernel_name(const tops__kernels *kern, const tops_tensor *q, const tops_tensor *k,
                                        const tops_tensor *v, const tops_tensor *out);

/* Bytes of workspace one thread needs. */
size_t tops__attention_thread_bytes(const tops__attention_plan *p);

/* Runs the plan.  Fails only when the workspace cannot be allocated (then
   out is untouched). */
tops_status tops__attention_drive(const tops__kernels *kern, const tops__attention_plan *p, const tops_tensor *q,
                                  const tops_tensor *k, const tops_tensor *v, const tops_tensor *out);

#endif
