/* A format's integer form on the CPU: how its stored codes become small
   integers q with one scale (and, for some layouts, one min) per sub-block,
   element = q * scale (- min).  Pure data, below kernels and formats: the
   traits row carries one (src/formats/traits.c), the drivers hand it to the
   kernels inside a tops__qweight, and the kernels' unpackers are picked by
   `form` and read the rest; no kernel knows a format id. */
#ifndef TOPS_CORE_INTFORM_H
#define TOPS_CORE_INTFORM_H

#include "tensorops.h"

#include <stdint.h>

typedef enum tops__iform {
    TOPS__IF_NONE = 0, /* no integer form: strict paths decode to f32, relaxed ones too */
    /* An element plane: one code of code_bits (8, 6, 4, 2) per element, low
       bits first (6-bit: four in three bytes), plus the scale plane (one
       entry per group; none: every scale is the multiplier) and, with
       has_min, the bias plane (same groups).  8- and 2-bit codes are two's
       complement; 4- and 6-bit codes go through map. */
    TOPS__IF_CODES,
    /* Self-contained blocks of 32 (the traits row's pack_bytes each): the
       scale at byte 0 (scale_enc), with has_min an f16 min m at byte 2
       (element = q * d + m), the codes at byte `header`: 4-bit codes as 16
       bytes, element j in the low nibble of byte j and j + 16 in its high
       nibble, through map; 8-bit codes as 32 i8. */
    TOPS__IF_BLOCKS,
    /* Super-blocks of 256 in 8 sub-blocks of 32 with 6-bit scales and mins
       (12 bytes at 4, f16 d at 0, f16 dmin at 2), codes 0..15 as nibble
       rows, high_bit: a fifth bit plane (qh[32] before the nibbles). */
    TOPS__IF_SUPER_MIN,
    /* Super-blocks of 256 in 16 sub-blocks of 16: 4 low bits in ql[128],
       2 high bits in qh[64], i8 sub-scales, f16 d last; q = code - 32. */
    TOPS__IF_SUPER_6BIT,
    /* Super-blocks of 256 in 8 sub-blocks of 32: f16 d, 6-bit sub-scales
       (ls - 32) split into a u16 of high bits and 4 bytes of low nibbles,
       then 16 bytes of nibbles per sub-block in BLOCKS' order, through map. */
    TOPS__IF_SUPER_SUBSCALE,
    TOPS__IF_COUNT_
} tops__iform;

/* scale_enc of TOPS__IF_BLOCKS: an f16 d, or ggml mxfp4's e8m0 e read as
   2^(e - 128) (its e2m1 values are stored doubled; 0xFF is NaN). */
enum { TOPS__SE_F16 = 0, TOPS__SE_E8M0_HALF = 1 };

typedef struct tops__int_layout {
    uint8_t form;      /* tops__iform */
    uint8_t code_bits; /* CODES, BLOCKS: bits per code */
    uint8_t header;    /* BLOCKS: byte offset of the codes */
    uint8_t scale_enc; /* BLOCKS: TOPS__SE_* */
    uint8_t has_min;   /* BLOCKS: an f16 min at byte 2; CODES: the tensor's bias plane, element =
                          q * scale + bias (SUPER_MIN always has mins) */
    uint8_t high_bit;  /* SUPER_MIN: the fifth bit plane */
    int16_t qmax;      /* largest |q| (128 where the code -128 exists) */
    int8_t map[64];    /* 4-bit (16 entries) or 6-bit code -> q */
    int8_t unit_exp;   /* element = q * 2^unit_exp * scale: e2m1 -1 (doubled), e2m3 -3, mxint8 -6 */
} tops__int_layout;

/* A weight as the unpackers see it: its planes, byte strides, K and its
   traits row's constants, filled by tops__qweight_of (formats/qweight.h). */
typedef struct tops__qweight {
    const uint8_t *data;      /* row 0 of the data plane */
    int64_t row_bytes;        /* data-plane bytes from one row to the next */
    int64_t k;                /* elements per row (K) */
    int sub;                  /* sub-block of the integer form (<= 32) */
    int block_bytes;          /* self-contained blocks (GGUF): bytes per block */
    tops__int_layout lay;     /* the integer form: codes, map, header, scale encoding */
    int64_t group;            /* element planes: elements per scale entry */
    const uint8_t *scales;    /* scale plane at row 0, or NULL: every scale is mul */
    tops_dtype scale_dtype;   /* f16, bf16, f32, e8m0 or ue4m3 */
    int64_t scale_row, scale_step; /* scale plane strides in bytes (row, block) */
    const uint8_t *bias;      /* bias plane at row 0 (CODES with has_min: int4-gG-affine), or NULL */
    tops_dtype bias_dtype;
    int64_t bias_row, bias_step; /* its strides in bytes (row, block) */
    float mul;                /* every scale's multiplier: the layout's unit times the
                                 tensor scale (1 / S_enc where it divides) */
} tops__qweight;

#endif
