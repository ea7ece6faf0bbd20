/* Decode attention on a GPU (few query rows, a long KV cache, maybe
   quantized): the plain-C contract between attention.c (host) and
   attention_decode.cu (kernels).  Apart from attention.h so that a change here
   recompiles only the decode kernel. */
#ifndef TOPS_CUDA_ATTENTION_DECODE_H
#define TOPS_CUDA_ATTENTION_DECODE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* KV element codes. */
enum { TOPS__DEC_KV16 = 0, TOPS__DEC_E4M3 = 1, TOPS__DEC_I8 = 2, TOPS__DEC_I4 = 3 };
/* How a KV tensor's scale plane applies: none; one entry per (row, group of
   `group` along D); one entry per (batch, head, channel d) (a per-channel
   scale, the plane blocked along the sequence). */
enum { TOPS__DEC_SC_NONE = 0, TOPS__DEC_SC_GROUP = 1, TOPS__DEC_SC_CHANNEL = 2 };
/* Scale entry types. */
enum { TOPS__DEC_SF16 = 0, TOPS__DEC_SBF16 = 1, TOPS__DEC_SF32 = 2, TOPS__DEC_SE8M0 = 3 };

typedef struct tops__cu_kv {
    const void *data;      /* data plane */
    int64_t stride[3];     /* bytes: batch, head, sequence (D is contiguous) */
    int mode;              /* TOPS__DEC_SC_* */
    const void *scales;    /* scale plane (mode != NONE) */
    int scale_type;        /* TOPS__DEC_S* */
    int group;             /* GROUP: elements a scale along D (>= 16) */
    int64_t sstride[4];    /* scale entries: batch, head, sequence, group (GROUP) or d (CHANNEL) */
    float tensor_scale;    /* applied on top (1 = none) */
} tops__cu_kv;

typedef struct tops__cu_decode_args {
    int bf16;              /* q, out (and 16-bit KV): 0 f16, 1 bf16 */
    int kind;              /* TOPS__DEC_* for both k and v */
    int d;                 /* head dim of q, k, v, out: 64, 128 or 256 */
    int64_t batch, heads, kv_heads, sq, sk;
    const void *q;
    void *out;
    int64_t q_stride[3], o_stride[3]; /* elements */
    tops__cu_kv k, v;
    int causal;
    int64_t window;
    float scale, softcap;
    int splits;            /* 0: the library's choice */
    /* Sequences of different lengths (host arrays, read during the call):
       kv_lens[b] keys of sequence b; cu_q / cu_k: batch + 1 offsets along
       the sequence dimension of q / out and of k / v (packed batches, whose
       batch stride is 0); sq and sk are then the longest. */
    const int32_t *kv_lens, *cu_q, *cu_k;
    void *stream;
} tops__cu_decode_args;

/* Whether the decode kernel takes a call with sq query rows and head dim d. */
int tops__cu_decode_takes(int64_t sq, int d);
/* One call (the kernel, then the fixed-order merge of the splits); returns a
   cudaError_t. */
int tops__cu_decode_launch(const tops__cu_decode_args *a);
void tops__cu_decode_name(const tops__cu_decode_args *a, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
