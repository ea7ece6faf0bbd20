/* A format's pack rule for the GPU (src/cuda/pack.c): which decoder family
   of the kernels reads it and where the packer finds its codes, scales and
   mins.  Pure data, like the CPU integer form (core/intform.h): the traits
   row carries one (src/formats/traits.c), the packer reads it, and no file
   of src/cuda switches on a format id. */
#ifndef TOPS_CORE_GPUFORM_H
#define TOPS_CORE_GPUFORM_H

#include <stdint.h>

/* Decoder families (docs/cuda.md, "Kernel families"); 0: the GPU refuses
   the format.  The packer stores codes as its family decodes them. */
enum {
    TOPS__GF_NONE = 0,
    TOPS__GF_U4,   /* 4-bit integers v in -8..7, stored v + 8 (lop3 / 0x6400) */
    TOPS__GF_E2M1, /* 4-bit floats */
    TOPS__GF_I8,   /* 8-bit integers v in -128..127, stored v ^ 0x80 (prmt) */
    TOPS__GF_E4M3, /* 8-bit floats */
    TOPS__GF_F16,  /* plain 16-bit weights */
    TOPS__GF_BF16
};

/* Where the codes and scales come from. */
enum {
    /* The element plane (the element dtype says how a code reads: i4 / i8
       two's complement, e2m1 / e4m3 bits, 16-bit values) and, with
       scale = PLANE, the tensor's scale plane (f16, e8m0 and ue4m3 kept,
       bf16 and f32 as f32). */
    TOPS__GS_PLANE = 0,
    /* Self-contained blocks (the traits row's pack_elems in pack_bytes):
       codes as stored at the CPU form's `header`, the scale's bytes at 0
       (scale = F16 or E8M0). */
    TOPS__GS_BLOCK,
    /* The CPU integer form's q and f32 scale (and min) per sub-block (the
       traits row's sub_block, or block), read by the scalar unpackers:
       super-blocks with sub-scales, codebook values. */
    TOPS__GS_FORM
};

/* The scale plane the kernels stream. */
enum { TOPS__GSC_NONE = 0, TOPS__GSC_PLANE, TOPS__GSC_F16, TOPS__GSC_E8M0, TOPS__GSC_F32 };

/* The relaxed FP8 layout (wgmma_q8.cu) a format may take. */
enum { TOPS__GQ8_NONE = 0, TOPS__GQ8_INT4, TOPS__GQ8_MX };

typedef struct tops__gpu_rule {
    uint8_t family;  /* TOPS__GF_* */
    uint8_t source;  /* TOPS__GS_* */
    uint8_t scale;   /* TOPS__GSC_* */
    uint8_t per_row; /* one scale per row (the -ch formats) */
    /* GS_FORM with mins (element = q * scale - min, q >= 0): codes stored
       as q - offset and a bias plane offset * scale - min per sub-block,
       which the kernels add as bias x (the activations' sum over it). */
    uint8_t offset;
    uint8_t q8;      /* TOPS__GQ8_* */
} tops__gpu_rule;

#endif
