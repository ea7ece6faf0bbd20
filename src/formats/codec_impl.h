/* The formats layer's private hooks: one codec per format family, reached
   through tops__codec_get(id) (codecs.c holds the table), so the generic
   drivers in quantize.c never switch on a format.

   The generic layer walks "lines" along the blocked dimension, gathers
   each block into a contiguous f32 buffer and hands it to the codec, which
   returns one element code per element plus the stored scale (and bias)
   codes; the generic layer packs codes and scales into the planes.
   Self-contained byte blocks (GGUF) use the raw hooks instead. */
#ifndef TOPS_FORMATS_CODEC_IMPL_H
#define TOPS_FORMATS_CODEC_IMPL_H

#include "formats/codec.h"

/* Largest block the generic layer hands a codec in one call, and the
   largest raw (GGUF) block in bytes. */
#define TOPS__MAX_BLOCK 256
#define TOPS__MAX_RAW_BYTES 256

typedef struct tops__qctx {
    tops_format format;          /* resolved */
    const tops_format_info *info;
    tops_dtype scale_dtype;      /* stored scale dtype (resolved) */
    float tensor_scale;          /* nvfp4: S_enc; others: handled generically */
    const uint16_t *codebook;    /* lut: the 16 f16 entries of the current line */
    int lut_iterations;
    float divisor;               /* quantize: the input is divided by this first
                                    (tensor_scale, or 1 where it means S_enc) */
} tops__qctx;

/* Element codes are element_bits wide (the traits row); a block is what
   one scale entry covers (formats without scales: any run of a line). */
typedef struct tops__codec {
    /* Optional: work over the whole tensor before blocks are encoded
       (nvfp4's tensor scale, lut codebooks).  src is f32 host. */
    tops_status (*prepare)(tops__qctx *ctx, const tops_tensor *src, tops_tensor *dst);
    /* Encodes n (1..block) values sharing one scale entry. */
    void (*encode)(const tops__qctx *ctx, const float *x, int64_t n, uint32_t *codes, uint32_t *scale,
                   uint32_t *bias);
    /* Decodes n codes sharing the scale and bias codes given. */
    void (*decode)(const tops__qctx *ctx, const uint32_t *codes, int64_t n, uint32_t scale, uint32_t bias,
                   float *out);
    /* Self-contained byte blocks (GGUF) instead of codes: raw_elems (> 0)
       elements in raw_bytes bytes; encode_raw gets n <= raw_elems values. */
    int raw_elems, raw_bytes;
    void (*encode_raw)(const float *x, int64_t n, uint8_t *block);
    void (*decode_raw)(const uint8_t *block, int64_t lo, int64_t n, float *out);
} tops__codec;

/* The codec of a format id (never NULL for a valid id other than packed). */
const tops__codec *tops__codec_get(tops_format_id id);

/* Family codecs (one file each). */
extern const tops__codec tops__codec_plain;
extern const tops__codec tops__codec_mx;
extern const tops__codec tops__codec_nvfp4;
extern const tops__codec tops__codec_intgroup;
extern const tops__codec tops__codec_affine;
extern const tops__codec tops__codec_channel;
extern const tops__codec tops__codec_lut;
extern const tops__codec tops__codec_q4_0;
extern const tops__codec tops__codec_q4_1;
extern const tops__codec tops__codec_q8_0;
extern const tops__codec tops__codec_gguf_mxfp4;
extern const tops__codec tops__codec_q4_k;
extern const tops__codec tops__codec_q5_k;
extern const tops__codec tops__codec_q6_k;
extern const tops__codec tops__codec_iq4_nl;
extern const tops__codec tops__codec_iq4_xs;

/* Decoded value of every code of a dtype of 8 bits or fewer (elem.c;
   built once, thread-safe): decoders index it instead of branching. */
const float *tops__elem_table(tops_dtype dt);

/* ---- helpers the codecs share (quantize.c) ---------------------------------- */

/* Gathers n f32 elements of src starting at idx, stepping along dim. */
void tops__gather_f32(const tops_tensor *src, const int64_t *idx, int dim, int64_t n, float *out);
/* The same, divided by ctx->divisor: what the codec encodes. */
void tops__gather_input(const tops__qctx *ctx, const tops_tensor *src, const int64_t *idx, int dim, int64_t n,
                        float *out);

/* Calls fn(ctx, idx) for every index of t with idx[skip] = 0 (skip = -1:
   every element index; used to walk lines and rows). */
typedef tops_status (*tops__index_fn)(void *user, const int64_t *idx);
tops_status tops__for_each_index(const int64_t *extent, int rank, int skip, tops__index_fn fn, void *user);

/* Address of the 16 f16 codebook entries that serve element idx of t. */
uint16_t *tops__codebook_at(const tops_tensor *t, const int64_t *idx);

#endif
