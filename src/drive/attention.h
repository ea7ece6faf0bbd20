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

/* Bytes of workspace one thread needs. */
size_t tops__attention_thread_bytes(const tops__attention_plan *p);

/* Runs the plan.  Fails only when the workspace cannot be allocated (then
   out is untouched). */
tops_status tops__attention_drive(const tops__kernels *kern, const tops__attention_plan *p, const tops_tensor *q,
                                  const tops_tensor *k, const tops_tensor *v, const tops_tensor *out);

#endif
