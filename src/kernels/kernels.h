/* The microkernel interface: the function types, layouts and constants
   each kernel family implements (src/kernels/<isa>/), the table that
   holds one kernel per slot (tops__kernels), and the functions each ISA
   file provides.  Kernels see memory only; src/cpu/dispatch.c picks
   them into the table. */
#ifndef TOPS_KERNELS_KERNELS_H
#define TOPS_KERNELS_KERNELS_H

#include "core/intform.h"
#include "internal.h"

#include <string.h>

/* matmul2d microkernel (src/kernels/<isa>/gemm_f32_*.c): C[mr x nr] (+)=
   A-panel * B-panel over kc steps.  a[k * mr + i] and b[k * nr + j] are
   packed, zero-padded panels; c has row stride ldc; accumulate = 0
   overwrites c, 1 adds to it.  Full tiles only: the driver pads. */
typedef void (*tops__gemm_f32_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                  int accumulate);
typedef struct tops__gemm_ukernel {
    int mr, nr;
    tops__gemm_f32_fn run;
    const char *name;
} tops__gemm_ukernel;

/* Quantized weights as small integers (src/kernels/<isa>/unpack_*.c).
   An unpacker sees memory only: the weight's planes, strides and the
   constants of its traits row (lay: its integer form, core/intform.h),
   filled once per call by the layer above (tops__qweight_of,
   formats/qweight.h; the struct: core/intform.h); the table holds one unpacker per form, never per
   format.  Elements [k0, k0 + n) of row `row`
   of a weight stored [N, K] with blocks along K become q[i] (|q| <= qmax,
   0 past K) and one f32 scale per sub-block of `sub` elements, element =
   q * scale.  k0 and n are multiples of sub. */


/* The most activation rows a dot_f32_nibbles_rows call takes. */
enum { TOPS__NIB_ROWS_MAX_M = 4 };
struct tops__nibble_layout;
typedef void (*tops__dot_f32_nibbles_rows_fn)(const uint8_t *blocks, int64_t row_bytes,
                                              const struct tops__nibble_layout *layout, const float *a, int64_t lda,
                                              int m, const float *ws, const float *wm, int64_t ld_ws, int sub,
                                              const float *tables, int64_t nb, float *out);
struct tops__byte_layout;
typedef void (*tops__dot_f32_bytes_rows_fn)(const uint8_t *blocks, int64_t row_bytes,
                                            const struct tops__byte_layout *layout, const float *a, int64_t lda, int m,
                                            const float *ws, int64_t ld_ws, int64_t nb, float *out);
/* The most activation rows a dot_fp8_rows call takes. */
enum { TOPS__FP8_ROWS_MAX_M = 4 };
/* The codes dot_fp8_rows reads (its `kind`): one byte each (e4m3, e5m2),
   or 6-bit codes four in three bytes, lowest first (e2m3, e3m2). */
enum { TOPS__FPROW_E4M3 = 0, TOPS__FPROW_E5M2 = 1, TOPS__FPROW_E2M3 = 2, TOPS__FPROW_E3M2 = 3 };
/* The x86 kernels decode fp6 codes at 2^-14 (e2m3) or 2^-12 (e3m2) of
   their value (kernels/avx2/fp6.h); this is the factor back. */
static inline float tops__fp6_unit(int e3m2) { return e3m2 ? 4096.0f : 16384.0f; }
typedef void (*tops__dot_fp8_rows_fn)(const float *a, int64_t lda, int m, const uint8_t *b, int64_t ldb, int64_t n,
                                      int kind, const float *ws, int64_t ld_ws, float *out);
typedef void (*tops__unpack_fn)(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q, float *scale);
/* The integer form with a per-sub-block offset (q4_1, q4_K, q5_K: element =
   q * scale - min, q >= 0): as tops__unpack_fn, plus min[b] for each
   sub-block (0 past K).  Only the relaxed paths take it: they subtract
   min[b] times the sub-block's activation sum (ascale * its code sum,
   computed once when the activations are quantized). */
typedef void (*tops__unpack_min_fn)(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q,
                                    float *scale, float *min);
/* 4-bit formats read in place by the fused relaxed dot product: blocks of
   32 elements, `header` bytes then 16 bytes of nibbles, every
   `block_bytes`.  split = 1: elements 0..15 in the low nibbles, 16..31 in
   the high (GGUF); 0: element i in byte i / 2, low nibble first.  lut maps
   a code to q + offset (0..255); scales gives one scale per 32. */
typedef void (*tops__scales_fn)(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *scale);
typedef struct tops__nibble_layout {
    int block_bytes; /* 0: no in-place nibble form */
    int header;
    int split;
    int offset;
    uint8_t lut[16];
    int wide; /* an entry above 32 (iq4_nl): only for tops__kernels.nib_wide kernels, four rows at a time */
    tops__scales_fn scales;
    tops__scales_fn mins; /* forms with mins (element = q * scale - min): one min per 32; else NULL */
    /* blocks inside super-blocks (iq4_xs; nib_f32 only): super_blocks
       blocks of 16 code bytes each super_bytes, from `header` on; block b
       at (b / super_blocks) * super_bytes + header + (b % super_blocks) *
       block_bytes.  0: plain blocks every block_bytes. */
    int super_blocks, super_bytes;
    /* the strict rows kernels (a driver's copy of the layout): 1, each
       block's scale is its f16 at byte 0 times hdr_mul, read as the block
       streams (ws unused): q4_0, iq4_nl; 2, its byte 0 as ggml's e8m0
       2^(e - 128) (gguf-mxfp4) */
    int hdr_scale;
    float hdr_mul;
} tops__nibble_layout;

/* The relaxed M <= 4 row stream (tops_pack_right, src/drive/gemv.c):
   rows in groups of TOPS__NIBSTREAM_ROWS, each group one linear stream of
   super-blocks of TOPS__NIBSTREAM_SB blocks of 32 along K.  Lane l of a
   super-block holds its block tops__nibstream_lane(l) (the order in which
   the plain four-row dot's vphaddd tree leaves the blocks, so both sum the
   same way).  A super-block holds the four rows' stored scales, then for
   j = 0..3 per row 32 bytes: byte 4 l + t holds, of lane l's block,
   element 8 j + t in its low nibble and 8 j + 4 + t in its high nibble,
   each through the format's table where its entries fit in 4 bits
   ("coded": int4, q4_0), else as stored.  One vpmaddubsw pair then gives
   each lane 8 products of one block, so a super-block's block sums need no
   shuffle.  Past K the stream is zero.
   Scales (tops__nibstream_form): the format's own bytes, one per block of
   `sub` elements, as [half][row][lane] (sub 32: one half): 2-byte f16,
   1-byte e8m0 (sub 32 only) or 1-byte ue4m3 (nvfp4; sign ignored, 0x7F
   NaN).  sub 16 splits each block in halves: elements 0..15 (j = 0, 1)
   and 16..31 (j = 2, 3), each with its own scale. */
enum { TOPS__NIBSTREAM_ROWS = 4, TOPS__NIBSTREAM_SB = 8 };
enum { TOPS__NIBSTREAM_E8M0 = 1, TOPS__NIBSTREAM_F16 = 2, TOPS__NIBSTREAM_UE4M3 = 3 };
typedef struct tops__nibstream_form {
    int scale;  /* TOPS__NIBSTREAM_E8M0, _F16 or _UE4M3: the stored scale bytes */
    int sub;    /* 32, or 16 (f16, ue4m3): elements per scale */
    int coded;  /* nibbles hold the table's q + offset (tops__nibstream_coded) */
    float mul;  /* weight scale = stored value * mul (tops__qweight_of's) */
} tops__nibstream_form;
static inline int tops__nibstream_lane(int l) { return l < 4 ? 2 * l : 2 * (l - 4) + 1; }
/* The body of a stream kernel's entry point: calls FN(stream, layout,
   form, kind, halves, act, m, nb, out), an always-inline body, with the
   scale kind, half count and m (1..4) as constants, one instance each. */
#define TOPS__NIBSTREAM_ONE_M(FN, M)                                                                              \
    do {                                                                                                        \
        if (form->scale == TOPS__NIBSTREAM_E8M0) FN(stream, layout, form, TOPS__NIBSTREAM_E8M0, 1, act, M, nb, out); \
        else if (form->scale == TOPS__NIBSTREAM_UE4M3) FN(stream, layout, form, TOPS__NIBSTREAM_UE4M3, 2, act, M, nb, out); \
        else if (form->sub == 16) FN(stream, layout, form, TOPS__NIBSTREAM_F16, 2, act, M, nb, out);            \
        else FN(stream, layout, form, TOPS__NIBSTREAM_F16, 1, act, M, nb, out);                                 \
    } while (0)
#define TOPS__NIBSTREAM_INSTANCES(FN)                  \
    do {                                              \
        switch (m) {                                  \
        case 1: TOPS__NIBSTREAM_ONE_M(FN, 1); break;  \
        case 2: TOPS__NIBSTREAM_ONE_M(FN, 2); break;  \
        case 3: TOPS__NIBSTREAM_ONE_M(FN, 3); break;  \
        default: TOPS__NIBSTREAM_ONE_M(FN, 4); break; \
        }                                             \
    } while (0)
/* Scale bytes per row and block of 32. */
static inline int tops__nibstream_scale_span(const tops__nibstream_form *f) {
    return (f->scale == TOPS__NIBSTREAM_F16 ? 2 : 1) * (32 / f->sub);
}
static inline int64_t tops__nibstream_sb_bytes(const tops__nibstream_form *f) {
    return (int64_t)TOPS__NIBSTREAM_ROWS * TOPS__NIBSTREAM_SB * (tops__nibstream_scale_span(f) + 16);
}
/* One activation row as the row stream's kernel reads it, per super-block
   (lanes as above; zero past K): q 256 bytes, for j = 0..3 the 32 codes
   meeting the low nibbles of vector j, then the 32 meeting its high ones;
   scale[8 * halves] the block (sub 16: half-block) scales and corr[8 *
   halves] offset * the same codes' sum, [half][lane]; for e8m0 weights
   also bias[8] = bits(scale * mul) - (127 << 23) and range[16] (lo[8],
   hi[8]): where every stored exponent e of the super-block has lo <= e <=
   hi, bits(ws * as) = bias + (e << 23) exactly (no rounding, no
   subnormal), so the kernel skips the float decode and product. */
typedef struct tops__nibstream_act {
    const int8_t *q;
    const float *scale;
    const int32_t *corr;
    const int32_t *bias;
    const uint8_t *range;
} tops__nibstream_act;

/* 8-bit formats read in place by the relaxed four-row dot
   (dot_q8_bytes_x4): blocks of 32 int8 codes, `header` bytes into each
   block, one block every `block_bytes` (q8_0: 34 and 2; int8 element
   planes: 32 and 0); scales gives one f32 per 32.  block_bytes 0: none. */
typedef struct tops__byte_layout {
    int block_bytes;
    int header;
    tops__scales_fn scales;
    int hdr_scale;   /* as tops__nibble_layout's: q8_0's f16 at byte 0 times hdr_mul */
    float hdr_mul;
} tops__byte_layout;

/* The relaxed dot of one weight row of super-blocks of 256 read in place,
   over nsb whole super-blocks: aq, as and amin the activations' codes,
   scales and amin (as for gemm_q8) from the first super-block's first
   element.  With mins (q4_K, q5_K: 8 sub-blocks of 32): sub-block j of
   each super-block goes to lane j of eight f32 lanes, super-blocks in
   order: lane = fma(S, as * scale, lane), then lane = fma(-amin, min,
   lane), with S the exact i32 sum of aq * q and scale, min the
   unpacker's values (mul as w->mul); the result is
   ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).  Without mins
   (q6_K: 16 sub-blocks of 16; amin is not read): sixteen lanes, lane =
   fma(S, as * scale, lane), then h_j = l_j + l_{j+8}, g_j = h_j + h_{j+4},
   ((g0 + g2) + (g1 + g3)).  Every level that has one gives the same bits.
   One call takes m (1 to TOPS__SUPER_MAX_M) activation rows, act[i] at
   the first super-block, out[i] row i's dot: the weights are split once. */
enum { TOPS__SUPER_MAX_M = 4 };
typedef struct tops__super_act {
    const int8_t *aq;
    const float *as, *amin;
} tops__super_act;
typedef void (*tops__dot_super_fn)(const tops__int_layout *lay, const uint8_t *blocks, float mul,
                                   const tops__super_act *act, int m, int64_t nsb, float *out);
/* The strict twin for TOPS__IF_SUPER_MIN and _6BIT rows (q4_K, q5_K, q6_K): f32
   activations, row i at a + i * lda from the first super-block, each
   weight decoded in registers from the unpacker's scale and min (q * scale
   - min, one rounding less than the decoder's) and its product summed in
   f32; out[i] row i's dot.  No bits promised across levels (strict: the
   accuracy bound); non-finite values propagate as the decoded weights'. */
typedef void (*tops__dot_super_f32_fn)(const tops__int_layout *lay, const uint8_t *blocks, float mul, const float *a,
                                       int64_t lda, int m, int64_t nsb, float *out);
/* The body of a dot_super entry point: calls FN(lay, blocks, mul, act, M,
   nsb, out), an always-inline body, with m (1..4) as a constant. */
#define TOPS__SUPER_INSTANCES(FN)                                     \
    do {                                                             \
        switch (m) {                                                 \
        case 1: FN(lay, blocks, mul, act, 1, nsb, out); break;       \
        case 2: FN(lay, blocks, mul, act, 2, nsb, out); break;       \
        case 3: FN(lay, blocks, mul, act, 3, nsb, out); break;       \
        default: FN(lay, blocks, mul, act, 4, nsb, out); break;      \
        }                                                            \
    } while (0)

/* What the drivers use for one format (tops__kernels.unpack, filled by
   src/cpu/dispatch.c from the level's forms and the traits rows): the
   entry for its form, masked by its layout (run or run_min), with qmax
   and the in-place layouts made from the layout (nib: 4-bit codes with
   q + qmax in a byte, nib.wide where an entry exceeds 32; byte: 8-bit
   codes). */
typedef struct tops__unpacker {
    tops__unpack_fn run; /* NULL: the format has no integer form */
    tops__unpack_min_fn run_min; /* the relaxed form with mins (run is NULL then), or NULL */
    tops__dot_super_fn dot_super; /* rows of whole super-blocks read in place (relaxed M <= 4), or NULL */
    tops__dot_super_f32_fn dot_super_f32; /* the same for strict calls, or NULL */
    int qmax;            /* largest |q| (128 where the code -128 exists) */
    tops__nibble_layout nib;
    /* The strict f32 rows' layout (dot_f32_nibbles_rows): nib's, and for
       4-bit codes in blocks of 32 with mins (q4_1, int4-gG-affine) theirs,
       with mins set (the relaxed in-place dots take no mins: nib is empty
       for those).  block_bytes 0: none. */
    tops__nibble_layout nib_f32;
    tops__byte_layout byte;
} tops__unpacker;
/* One kernel table entry per form (tops__kernels.forms): the functions
   only; a form's run and run_min read lay to tell its layouts apart.
   scales: one scale per sub-block of 32 for the in-place reads. */
typedef struct tops__form_kernels {
    tops__unpack_fn run;
    tops__unpack_min_fn run_min;
    tops__dot_super_fn dot_super;
    tops__dot_super_f32_fn dot_super_f32;
    tops__scales_fn scales;
    tops__scales_fn mins; /* layouts with mins: one min per sub-block of 32 (as run_min's) */
} tops__form_kernels;

/* Relaxed integer microkernel (src/kernels/<isa>/gemm_q8_*.c): C[mr x 8]
   (+)= over nb sub-blocks of `sub` (16 or 32) k.  a: mr rows of i8
   activations (row stride lda); ascale / acorr: per row and sub-block the
   activation scale and 16 * sum of the block's codes (row stride lds).
   b: per sub-block, sub / 4 groups of 32 bytes, group g holding
   k = 4g..4g+3 of columns 0..7 as (q + 16) (so |q| <= 15); bscale: per
   sub-block 8 column scales.  The i16 sums of four vpmaddubsw steps stay
   below 4 * 2 * 31 * 127 = 31496, so they never saturate.  The narrow
   variant takes weights with |q| <= 8 packed as q + 8 (0..16): eight steps
   (32 k) then stay below 8 * 2 * 16 * 127 = 32512.  Weights with mins
   (tops__unpack_min_fn): bmin per sub-block 8 column mins, amin per row
   and sub-block ascale * the block's code sum (row stride lds); after a
   block's scaled sum each row takes one more FMA, c -= amin * bmin
   (fmaf(-amin, bmin, c)).  bmin NULL: no mins (amin is not read). */
typedef void (*tops__gemm_q8_fn)(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                 const int32_t *acorr, int64_t lds, const uint8_t *b, const float *bscale,
                                 const float *amin, const float *bmin, float *c, int64_t ldc, int accumulate);
typedef struct tops__gemm_q8_ukernel {
    int mr, nr;
    tops__gemm_q8_fn run;
    const char *name;
} tops__gemm_q8_ukernel;
/* The 32-column twin at levels with one (gemm_q8_x4): C[mr x 32] over four
   consecutive 8-column panels of gemm_q8's layout, panel p at b + p *
   bstride bytes, its scales at bscale + p * sstride and its mins at bmin
   + p * sstride; offset the panels' (acorr as above; AVX2 sums in i16 as
   far as it allows, VNNI ignores it).  Every column gets the bits
   of the same level's gemm_q8 run on its panel (same steps, same order),
   so a driver may cover some columns with one and some with the other.
   bstride == 32 selects the group layout instead: step t (4 k) of panel p
   at b + t * 128 + p * 32, sub-block i's scales of panel p at bscale + i *
   32 + p * 8, its mins likewise (sstride unused).  pf: NULL, or memory the
   kernel prefetches while it works, 8 * sub bytes a sub-block (a driver
   passes a share of the weights its next call reads from memory). */
typedef void (*tops__gemm_q8_x4_fn)(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                    const int32_t *acorr, int64_t lds, const uint8_t *b, int64_t bstride,
                                    const float *bscale, int64_t sstride, const float *amin, const float *bmin,
                                    float *c, int64_t ldc, int accumulate, const uint8_t *pf, int offset);
typedef struct tops__gemm_q8_x4_ukernel {
    int mr;
    tops__gemm_q8_x4_fn run; /* NULL: none at this level */
    const char *name;
} tops__gemm_q8_x4_ukernel;
#define TOPS_Q8_OFFSET 16
#define TOPS_Q8_OFFSET_NARROW 8 /* |q| <= 8: gemm_q8_narrow */
/* |q| <= 128 (8-bit weights): gemm_q8_wide takes panels of q + 128 (u8
   0..255) and acorr = 128 * the block's code sum.  The offset is the same
   at every level, so panels packed by one level's table feed any other. */
#define TOPS_Q8_OFFSET_WIDE 128

/* AMX relaxed integer microkernel (src/kernels/amx/gemm_q8_amx.c):
   c[16 mt x 32] (+)= sum over nb sub-blocks b of `sub` k (a multiple of 4,
   at most 32) of as_b[i] * bsX[b * 16 + j] * S_b[i][j], where S_b is the
   exact int32 sum of block b's i8 x i8 products (tdpbssd), mt 1 or 2.
   Activations in tile order: row tile t's block b is 16 rows of sub bytes
   (row stride sub) at a + t * a_next + b * 16 * sub, its 16 row scales at
   as + t * as_next + b * 16 (tile loads then read 16 * sub contiguous
   bytes: rows K bytes apart would share one L1 set and one page each).
   b0 and b1: the panels of columns 0..15 and 16..31 in the tile layout of
   tops__amx_pack_panel, or with lut non-NULL 4-bit panels (the layout of
   tops__amx_nib_expand, sub a multiple of 8) whose blocks the kernel
   expands through lut as it reaches them, prefetching ahead (the weight
   stream overlaps the tile work); bs0 / bs1: per sub-block 16 column
   scales; c: f32, row stride ldc.  Each f32 step is one FMA: c = fma((float)S, as * bs, c),
   blocks in order.  Weights with mins (tops__unpack_min_fn; bm0 non-NULL):
   after each block's step one more, c = fma(-am, bm, c), with am per row
   and block in the layout of as (as * the block's code sum) and bm0 / bm1
   per sub-block 16 column mins as bs0 / bs1.  release ends the thread's
   tile use (tilerelease).  run NULL: no AMX at this level. */
typedef void (*tops__amx_q8_fn)(int mt, int64_t nb, int sub, const int8_t *a, int64_t a_next, const float *as,
                                int64_t as_next, const int8_t *b0, const int8_t *b1, const int8_t *lut,
                                const float *bs0, const float *bs1, const float *am, const float *bm0,
                                const float *bm1, float *c, int64_t ldc, int accumulate);
typedef struct tops__amx_q8_ukernel {
    tops__amx_q8_fn run;
    void (*release)(void);
    const char *name;
} tops__amx_q8_ukernel;
/* AMX strict kernel for integer forms (src/kernels/amx/gemm_bf16_amx.c):
   c[16 mt x 32] (+)= sum over nb sub-blocks b of `sub` k (a multiple of 4,
   at most 32) of bsX[b * 16 + j] * T_b[i][j], T_b = the f32 tile sum
   (tdpbf16ps) of block b's hi * w + lo * w products, each product exact:
   hi and lo the two bf16 terms of an f32 activation (hi = bf16(a), lo =
   bf16(a - hi); lo NULL: one term, the activations' bf16 values), w a
   weight code as bf16.  Activations in tile order as
   for amx_q8 (bf16 elements: row tile t's block b at hi + t * a_next +
   b * 16 * sub, row stride sub elements; lo likewise); b0 / b1 in the
   layout of tops__amx_pack_panel_bf16; c = fma(T, bs, c), blocks in order.
   run >= 1: the blocks go in runs of `run` (the call's last may be
   shorter) that share one scale: T is the f32 tile sum over the run's
   blocks, one fma a run with bs of its first block (run 1: a block).
   Weights with mins (bm0 non-NULL, run 1): after each block's step c = fma(-am,
   bm, c), am per row and block (the block's f32 activation sum) at am +
   t * am_next + b * 16 + row, bm0 / bm1 per block 16 column mins. */
/* AMX relaxed direct conv2d (src/kernels/amx/conv_amx.c): c[16 mt x 16 nt]
   (f32, row stride ldc floats; mt, nt 1 or 2) = the sums over taps t <
   ntaps and 32-channel steps s < csteps of A(t, s) B(t, s): A's row tile
   r is 16 rows of 32 bf16 at (r ? a1 : a0) + toff[t] + 32 s, row stride
   lda bytes; B's column tile j the 16 x 32 bf16 pair-layout tile at (j ?
   b1 : b0) + (t * csteps + s) * 512.  Products in f32 on the tile unit. */
typedef void (*tops__amx_conv_fn)(int mt, int nt, int ntaps, const int64_t *toff, int64_t csteps,
                                  const uint16_t *a0, const uint16_t *a1, int64_t lda, const uint16_t *b0,
                                  const uint16_t *b1, float *c, int64_t ldc);
typedef void (*tops__amx_bf16_fn)(int mt, int64_t nb, int sub, int run, const uint16_t *hi, const uint16_t *lo,
                                  int64_t a_next, const uint16_t *b0, const uint16_t *b1, const float *bs0,
                                  const float *bs1, const float *am, int64_t am_next, const float *bm0,
                                  const float *bm1, float *c, int64_t ldc, int accumulate);
/* The bf16 weight tile layout: 16 columns over kc (even) k,
   panel[(k / 2) * 32 + j * 2 + k % 2] = bf16(rows[j * kc + k]) (exact:
   |q| <= 128).  Sub-block b of `sub` k starts at panel + b * sub * 16. */
static inline void tops__amx_pack_panel_bf16(const int8_t *rows, int64_t kc, uint16_t *panel) {
    for (int64_t k2 = 0; k2 < kc / 2; k2++)
        for (int j = 0; j < 16; j++)
            for (int t = 0; t < 2; t++) {
                const float v = (float)rows[j * kc + k2 * 2 + t];
                uint32_t bits;
                memcpy(&bits, &v, 4);
                panel[k2 * 32 + j * 2 + t] = (uint16_t)(bits >> 16);
            }
}
/* AMX bf16-term kernel (src/kernels/amx/gemm_bf16t_amx.c): c[16 mt x 32]
   (+)= sum over `steps` steps of 32 k and, within a step, over the np term
   pairs p of A_pa[p] . B_pb[p], one tdpbf16ps each (bf16 products exact in
   f32, f32 sums), in that order; no scaling: the operands are the values
   themselves, split into bf16 terms (x = t0 + t1 + ...).  mt 1 or 2.
   Activations: row tile t's step s, term u is 16 rows of 32 bf16 (row
   stride 32) at a + t * a_next + s * a_step + u * 512.  Weights: column
   group g (b0: columns 0..15, b1: 16..31), step s, term u at
   bg + s * b_step + u * 512, in the pair layout (word (k / 2) * 32 + j * 2
   + k % 2 of the step, k < 32, j < 16).  c: f32, row stride ldc, read once
   at the start when accumulate (else zeros) and written once at the end. */
typedef void (*tops__amx_bf16t_fn)(int mt, int64_t steps, const uint16_t *a, int64_t a_next, int64_t a_step,
                                   const uint16_t *b0, const uint16_t *b1, int64_t b_step, int np,
                                   const uint8_t *pa, const uint8_t *pb, float *c, int64_t ldc, int accumulate);
/* Weight terms of one 16-column group over kc k (a multiple of 32) for
   the bf16-term kernel: w = t0 + t1 + t2 + rest, t0 = bf16(w), t1 =
   bf16(w - t0), t2 = bf16(w - t0 - t1) (round to nearest even; input
   subnormals count as 0, as the tile unit reads them), the first nslots
   (1..3) of them written: step s, term u at out + (s * nslots + u) * 512,
   pair layout.  Returns the number of leading terms that hold any
   non-zero (1..nslots): the later ones are all zero.
   terms_q8: w = q * scale, q from an i8 panel in the layout of
   tops__amx_pack_panel over kc, scales per sub-block of `sub` k (4..32)
   16 floats at scales + b * 16 (q * scale exact in f32 for |q| <= 128 and
   scales of <= 16 significant bits).  terms_f32: w = src[k * ld + j]. */
typedef int (*tops__amx_terms_q8_fn)(const int8_t *panel, const float *scales, int sub, int64_t kc, int nslots,
                                     uint16_t *out);
typedef int (*tops__amx_terms_f32_fn)(const float *src, int64_t ld, int64_t kc, int nslots, uint16_t *out);
/* One term (relaxed) of w = q * scale - min, for weights with mins (q4_1,
   q4_K, q5_K): panel and scales as terms_q8's, mins per sub-block 16
   floats at mins + b * 16; q * scale rounded to f32, then min subtracted
   (two roundings), then bf16: step s at out + s * 512, pair layout. */
typedef void (*tops__amx_terms_q8_min_fn)(const int8_t *panel, const float *scales, const float *mins, int sub,
                                          int64_t kc, uint16_t *out);
/* A share of a weight decode that the kernel runs between its tile steps
   so the vector units decode while the tile unit multiplies: terms_q8
   with nslots = 1 of both column groups g, restricted to the panel rows
   (4 k each) [r0, r1): panel[g] and scales[g] as terms_q8's, out[g] its
   output (step s at out + s * 512); the words written are exactly those
   terms_q8 writes for these rows. */
typedef struct tops__amx_decode_job {
    const int8_t *panel[2];
    const float *scales[2];
    uint16_t *out[2];
    int sub;
    int64_t r0, r1;
    /* NULL: panel[g] are i8 panels; else 4-bit panels (tops__amx_nib_expand
       layout, panel[g] their first byte) and lut the code of each nibble. */
    const int8_t *lut;
    /* every scale times smul (f32) before use: terms_q8 on those scales */
    float smul;
    /* relaxed weights with mins: per sub-block 16 column mins, the terms
       those of terms_q8_min (q * scale - min); NULL: none */
    const float *mins[2];
} tops__amx_decode_job;
/* The bf16-term kernel with one weight term that also runs `job` (may be
   NULL): na = 1, one product per step (np = 1, pa = pb = 0: the relaxed
   pair list); na = 2, two (np = 2, pa = {0, 1}, pb = {0, 0}: the strict
   list for one-term weights).  The same sums, bit for bit, as run. */
typedef void (*tops__amx_bf16t_dec_fn)(int mt, int na, int64_t steps, const uint16_t *a, int64_t a_next,
                                       int64_t a_step, const uint16_t *b0, const uint16_t *b1, int64_t b_step,
                                       float *c, int64_t ldc, int accumulate, const tops__amx_decode_job *job);
typedef struct tops__amx_bf16t_ukernel {
    tops__amx_bf16t_fn run; /* NULL: no AMX at this level */
    tops__amx_terms_q8_fn terms_q8;
    tops__amx_terms_f32_fn terms_f32;
    /* Relaxed calls on weights with an integer form take amx_q8 (i8
       tiles, no weight decode) below this M, the bf16 terms from it:
       [0] for sub-blocks of 32, [1] for smaller ones (more scaling steps
       per K for the i8 tiles). */
    int relaxed_min_m[2];
    const char *name;
    /* run for one product per step with a decode share between the
       steps (NULL: the driver decodes, then calls run). */
    tops__amx_bf16t_dec_fn run1_decode;
    /* relaxed weights with mins (NULL: they go through the f32 reader) */
    tops__amx_terms_q8_min_fn terms_q8_min;
} tops__amx_bf16t_ukernel;
/* AMX fused attention (src/kernels/amx/attention_amx.c; the driver is
   src/drive/attention_amx.c): per query block of 32 rows (two row tiles)
   and key block of `steps` x 32 keys, three calls:
   qk: s[i * lds + j] = sum over the np term pairs (pa[p], pb[p]) and the
     nds d-steps of 32 of Q_pa . K_pb (one tdpbf16ps per 16 x 16 x 32,
     f32 sums), i < 32, j < 32 * steps.  Q term u, row tile r, d-step d:
     16 rows x 32 bf16 at q + ((u * 2 + r) * nds + d) * 512.  K: key group
     g (16 keys), term u, d-step d at k + ((g * nk + u) * nds + d) * 512,
     pair layout (word (x / 2) * 32 + j * 2 + x % 2 = key j's element x).
   softmax: rows [0, 32) of s (key j0 + c at column c; columns >= ncols
     and masked pairs give p = 0), the online-softmax update of m, l, and
     P = exp2((y - m_new) * c2) as np_terms bf16 terms (p = t0 + t1 ...)
     in the A-tile layout at p + ((u * 2 + r) * steps + t) * 512 (row i % 16
     of row tile r = i / 16, 32 keys of step t); alpha[i] = exp2((m_old -
     m_new) * c2) (1 when equal); returns whether any alpha != 1.  The
     arithmetic is fixed (tops__amx_attn_args) so that the scalar twin
     (src/kernels/ref/amx_attn.c) gives the same bits.
   pv: o[i * ldo + c] = o * alpha[i] (when alpha is not NULL) + sum over
     the np pairs and the steps of P_pa . V_pb, i < 32, c < 32 * ncg2 (ncg2
     pairs of 16-column groups).  V: key step t, term u, column group c at
     v + ((t * nv + u) * ncg + c) * 512, pair layout (word (x / 2) * 32 + j
     * 2 + x % 2 = V[32 t + x][16 c + j]); ncg = 2 * ncg2. */
typedef struct tops__amx_attn_args {
    int steps;       /* key steps of 32 in this block */
    int64_t ncols;   /* valid key columns (keys past them are padding) */
    int64_t j0;      /* position of column 0 */
    int64_t pos0;    /* position of row 0 (row i sits at pos0 + i) */
    int causal;
    int64_t window;  /* 0 = none */
    float c2;        /* scale * log2(e) (the logits' scale rides on the exp), or log2(e) with softcap */
    float cap, cap_k; /* softcap > 0: y = cap * (1 - 2 / (exp2(x * cap_k) + 1)); 0: y = x */
    int np_terms;    /* 1 or 2 */
} tops__amx_attn_args;
typedef void (*tops__amx_attn_qk_fn)(int nds, int steps, const uint16_t *q, const uint16_t *k, int nk, int np,
                                     const uint8_t *pa, const uint8_t *pb, float *s, int64_t lds);
typedef int (*tops__amx_attn_softmax_fn)(const tops__amx_attn_args *a, float *s, int64_t lds, float *m, float *l,
                                         float *alpha, uint16_t *p);
typedef void (*tops__amx_attn_pv_fn)(int steps, const uint16_t *p, int np_terms_p, const uint16_t *v, int nv,
                                     int ncg2, int np, const uint8_t *pa, const uint8_t *pb, const float *alpha,
                                     float *o, int64_t ldo);
/* Operand packing for them, f32 in, nt (1 or 2) bf16 terms out (t0 =
   bf16(x), t1 = bf16(x - t0); round to nearest even, subnormal inputs as
   zero, as vcvtne2ps2bf16), term u at + u * term_stride:
   pack_a: the A-tile layout: rows i < rows of src (row stride ld), 32
     columns per chunk d < chunks: dst[d * 512 + i * 32 + x] = src[i * ld +
     32 d + x] (rows <= 16).
   pack_b: the pair layout: for row pairs k2 < npairs and 16-column groups
     g < ngroups: dst[g * group_stride + k2 * 32 + j * 2 + t] =
     src[(2 k2 + t) * ld + 16 g + j]. */
typedef void (*tops__amx_attn_pack_a_fn)(const float *src, int64_t ld, int rows, int chunks, int nt,
                                         int64_t term_stride, uint16_t *dst);
typedef void (*tops__amx_attn_pack_b_fn)(const float *src, int64_t ld, int64_t npairs, int ngroups, int nt,
                                         int64_t group_stride, int64_t term_stride, uint16_t *dst);
/* softmax_qk: softmax, with the tile products of the next block's qk
   (next, may be NULL) issued between its rows, so the tile unit works
   while the vector units do the softmax; the same bits as softmax then
   qk.  NULL: the driver calls the two in turn. */
typedef struct tops__amx_attn_qk_job {
    int nds, steps, nk, np;
    const uint16_t *q, *k;
    const uint8_t *pa, *pb;
    float *s;
    int64_t lds;
} tops__amx_attn_qk_job;
typedef int (*tops__amx_attn_softmax_qk_fn)(const tops__amx_attn_args *a, float *s, int64_t lds, float *m, float *l,
                                            float *alpha, uint16_t *p, const tops__amx_attn_qk_job *next);
typedef struct tops__amx_attn_ukernel {
    tops__amx_attn_qk_fn qk; /* NULL: no AMX attention at this level */
    tops__amx_attn_softmax_fn softmax;
    tops__amx_attn_pv_fn pv;
    tops__amx_attn_pack_a_fn pack_a;
    tops__amx_attn_pack_b_fn pack_b;
    tops__amx_attn_softmax_qk_fn softmax_qk;
    const char *name;
} tops__amx_attn_ukernel;
int tops__ref_amx_attn_softmax_qk(const tops__amx_attn_args *a, float *s, int64_t lds, float *m, float *l,
                                  float *alpha, uint16_t *p, const tops__amx_attn_qk_job *next);
void tops__ref_amx_attn_pack_a(const float *src, int64_t ld, int rows, int chunks, int nt, int64_t term_stride,
                               uint16_t *dst);
void tops__ref_amx_attn_pack_b(const float *src, int64_t ld, int64_t npairs, int ngroups, int nt,
                               int64_t group_stride, int64_t term_stride, uint16_t *dst);
void tops__ref_amx_attn_qk(int nds, int steps, const uint16_t *q, const uint16_t *k, int nk, int np,
                           const uint8_t *pa, const uint8_t *pb, float *s, int64_t lds);
int tops__ref_amx_attn_softmax(const tops__amx_attn_args *a, float *s, int64_t lds, float *m, float *l, float *alpha,
                               uint16_t *p);
void tops__ref_amx_attn_pv(int steps, const uint16_t *p, int np_terms_p, const uint16_t *v, int nv, int ncg2, int np,
                           const uint8_t *pa, const uint8_t *pb, const float *alpha, float *o, int64_t ldo);
/* Scalar twins of the term decoders (every level; the tests' reference). */
int tops__ref_amx_terms_q8(const int8_t *panel, const float *scales, int sub, int64_t kc, int nslots, uint16_t *out);
int tops__ref_amx_terms_f32(const float *src, int64_t ld, int64_t kc, int nslots, uint16_t *out);
void tops__ref_amx_terms_q8_min(const int8_t *panel, const float *scales, const float *mins, int sub, int64_t kc,
                                uint16_t *out);
/* The AMX weight tile layout: 16 columns over kc (a multiple of 4) k,
   panel[(k / 4) * 64 + j * 4 + k % 4] = rows[j * kc + k] (rows: 16 rows
   of codes).  Sub-block b of `sub` k starts at panel + b * sub * 16. */
static inline void tops__amx_pack_panel(const int8_t *rows, int64_t kc, int8_t *panel) {
    for (int64_t k4 = 0; k4 < kc / 4; k4++)
        for (int j = 0; j < 16; j++)
            for (int t = 0; t < 4; t++) panel[k4 * 64 + j * 4 + t] = rows[j * kc + k4 * 4 + t];
}
/* The 4-bit form of an i8 panel (relaxed weights whose codes take at most
   16 values: half the bytes to stream): panel rows 2 s and 2 s + 1 (64
   bytes each) share the 64-byte line s, byte x = nibble of row 2 s's byte
   x | nibble of row 2 s + 1's << 4, lut[nibble] = the code.  expand writes
   the i8 panel rows [0, rows) (rows even) of nib to out. */
typedef void (*tops__amx_nib_expand_fn)(const uint8_t *nib, const int8_t *lut, int64_t rows, int8_t *out);
void tops__ref_amx_nib_expand(const uint8_t *nib, const int8_t *lut, int64_t rows, int8_t *out);

/* Tile microkernel: c[mr x nr] = a[mr x k] * b[k x nr] (+ c if accumulate),
   1 <= mr <= MR, k >= 1; rows of a, b and c lie lda, ldb and ldc floats
   apart; b and c hold whole nr-wide strips (the tile pads them). */
typedef void (*tops__tile_gemm_fn)(int mr, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                                   float *c, int64_t ldc, int accumulate);
typedef struct tops__tile_gemm {
    int mr, nr; /* MR and the strip width nr (16 or 32) */
    tops__tile_gemm_fn run;
    const char *name;
} tops__tile_gemm;

/* Depthwise conv2d over one output row (src/kernels/<isa>/conv_dw_f32.c):
   out[x * ldo + ch] = bias[ch] (0 if bias is NULL) + the taps (i, j) in
   order, each one FMA, of rows[i][col * ldx + ch] * w[(i * kw + j) * c + ch]
   with col = x * sw + j * dw - pl, for x < ow and ch < c; rows[i] NULL (a
   padding row) or col outside [0, win) adds nothing.  One FMA per tap at
   every level: every level gives the same bits. */
typedef void (*tops__conv_dw_fn)(const float *const *rows, int64_t ldx, int64_t win, int64_t c, int kh, int kw,
                                 int sw, int dw, int pl, const float *w, const float *bias, int64_t ow, float *out,
                                 int64_t ldo);

/* conv2d's wide f32 tile (src/kernels/avx512/conv_f32_rows.c): c[i][j]
   for i < 6, j < 64 = (c[i][j] if load_c, else 0) + a[i][k] *
   b0[k * 32 + j] (j < 32) or b1[k * 32 + j - 32] (j >= 32), one FMA per k in
   order; b0, b1 two 32-column f32 panels (tops_pack_right's, the layout
   gemm_f32 reads) at this K offset; b1 NULL:
   columns 0..31 only.  rows (1..6) of the row pointers (a and c) hold
   data; a kernel may compute (and store) fewer than 6 rows then, never
   fewer than rows, the same way for any rows, so the rest of c must still
   point at 64 writable floats.  NULL at levels without one. */
typedef void (*tops__conv_f32_rows_fn)(int64_t kc, int rows, const float *const *a, const float *b0, const float *b1,
                                       float *const *c, int load_c);

/* conv2d's f32 tile over K segments (src/kernels/avx2/conv_f32_segs.c):
   c[i * 16 + j] for i < 6, j < 16 = (c[i * 16 + j] if load_c, else 0) +
   seg[s].a[i][k] * seg[s].b[k * 16 + j] over the segments in order and k <
   seg[s].kc in order, one FMA each (one chain per output); b points into
   a 16-column f32 panel (tops_pack_right's), a[i] at an input pixel's
   channels (or a zero row).  c is 32-byte aligned.  NULL at levels
   without one. */
typedef struct tops__conv_seg {
    const float *a[6];
    const float *b;
    int64_t kc;
} tops__conv_seg;
typedef void (*tops__conv_f32_segs_fn)(int64_t nseg, const tops__conv_seg *seg, float *c, int load_c);

/* conv2d's Winograd F(2x2, 3x3) transforms (src/kernels/<isa>/wino_f32.c).
   Input: d[4 a + b] points at n channels of the tile's input pixel (a, b)
   (row a, column b of its 4 x 4); out[(4 a + b) * ldo + c] = (B^T d B)[a][b]
   for c < n.  Output: m[xi * ldm + j] holds the 16 products of column j
   (xi = 4 a + b); y[(2 a + b) * ldy + j] = (A^T m A)[a][b] + bias[j] (0
   for a NULL bias) for j < n.  Adds and subtractions only, in the same
   order at every level: every level gives the same bits. */
typedef void (*tops__wino_in_fn)(const float *const *d, int64_t n, float *out, int64_t ldo);
typedef void (*tops__wino_out_fn)(const float *m, int64_t ldm, int64_t n, const float *bias, float *y, int64_t ldy);

/* The relaxed twin (conv2d over an input quantized once per call, src/
   kernels/{avx2/gemm_q8_rows,avx512/gemm_q8_rows_vnni}.c): C[6 x 32] (+)= over nb sub-blocks
   of 32 k, per row i and block b, as[i][b] * bs[b][j] * (exact i32 sum of
   a[i][32 b + k] * panel code - acorr[i][b]), blocks in order, one FMA
   each; b[0..3] the four 8-column gemm_q8 panels (q + offset, 32 bytes a
   k step, the next step bstep bytes on: 32 in gemm_q8's panels; where
   b[1] = b[0] + 32 and b[3] = b[2] + 32 the pairs are read as one vector)
   at this K offset, bs[0..3] their 8 scales per sub-block, the next
   sub-block's sstep floats on (8; 32 in the group layout); acorr = offset
   * the block's code sum; offset the panels' (TOPS_Q8_OFFSET*: how far an
   i16 stage may sum).  Each product scaled as c = fma(s * bs, as, c), from
   zero, the old C added at the end: every level gives the same bits.
   NULL at levels without one. */
typedef void (*tops__gemm_q8_rows_fn)(int64_t nb, const int8_t *const *a, const float *const *as,
                                      const int32_t *const *acorr, const uint8_t *const *b, int64_t bstep,
                                      const float *const *bs, int64_t sstep, float *c, int64_t ldc, int accumulate,
                                      int offset);

typedef struct tops__kernels {
    tops_isa isa; /* the level in use */

    /* matmul2d: the f32 microkernel every format can feed (decoded panels). */
    tops__gemm_ukernel gemm_f32;
    /* Panel packing: dst[k * width + j] = src[j * ld + k] for j < valid,
       0 for valid <= j < width (a transpose with zero padding). */
    void (*pack_rows_f32)(const float *src, int64_t ld, int64_t valid, int64_t kc, float *dst, int64_t width);
    /* Integer forms of the quantized weight formats, by form
       (core/intform.h): what the kernel files fill. */
    tops__form_kernels forms[TOPS__IF_COUNT_];
    /* The same by format id, for the drivers: dispatch.c applies each
       traits row's layout to its form's entry (the one place that joins
       formats and kernels). */
    tops__unpacker unpack[TOPS_FMT_COUNT_];
    /* Dot products over n elements (a multiple of sub) of the integer form:
       strict  sum_b scale[b] * sum_{k in b} a[k] * q[k]   (f32 activations)
       relaxed sum_b ascale[b] * scale[b] * sum_{k in b} aq[k] * q[k]. */
    float (*dot_f32_q8)(const float *a, const int8_t *q, const float *scale, int64_t n, int sub);
    float (*dot_q8_q8)(const int8_t *aq, const float *ascale, const int8_t *q, const float *scale, int64_t n,
                       int sub);
    /* Relaxed integer microkernels for weights with |q| <= 15 (panels of
       q + TOPS_Q8_OFFSET) and |q| <= 8 (q + TOPS_Q8_OFFSET_NARROW), and
       their packer: rows[j * kc + k] (8 rows of integer codes, kc a
       multiple of 16) -> panel[(k / 4) * 32 + j * 4 + k % 4] = q + offset. */
    tops__gemm_q8_ukernel gemm_q8, gemm_q8_narrow;
    /* The same for 8-bit weights (|q| <= 128, panels of q +
       TOPS_Q8_OFFSET_WIDE): i32 sums with no saturating stage at any level
       (AVX2: |q| as u8 against the activations carrying q's sign, i16
       pairs <= 2 * 128 * 127 = 32512, then vpmaddwd; VNNI: vpdpbusd on
       q + 128). */
    tops__gemm_q8_ukernel gemm_q8_wide;
    /* Where set, the 32-column twin of all three (they are one kernel at
       that level): every full group of four panels takes it. */
    tops__gemm_q8_x4_ukernel gemm_q8_x4;
    /* AMX relaxed integer kernel for every integer form (|q| <= 128). */
    tops__amx_q8_ukernel amx_q8;
    /* AMX strict kernel for every integer form: codes as bf16, activations
       hi + lo, f32 scaling per sub-block (NULL at levels without). */
    tops__amx_bf16_fn amx_bf16;
    const char *amx_bf16_name;
    /* AMX relaxed direct conv2d (NULL at levels without). */
    tops__amx_conv_fn conv_amx;
    const char *conv_amx_name;
    /* AMX bf16-term kernel and its weight decoders: strict calls on
       weights without an integer form (f32, f16, bf16, fp8...), relaxed
       ones from amx_bf16t.relaxed_min_m rows. */
    tops__amx_bf16t_ukernel amx_bf16t;
    tops__amx_nib_expand_fn amx_nib_expand; /* every level (the packing needs no AMX) */
    /* AMX fused attention on f16/bf16 q, k, v (docs/tiles.md). */
    tops__amx_attn_ukernel amx_attn;
    void (*pack_q8_panel)(const int8_t *rows, int64_t kc, int offset, uint8_t *panel);
    /* Fused relaxed dot product over nb whole blocks of a nibble layout:
       sum_b ws[b] * as[b] * (sum_k lut[code] * aq[k] - acorr[b]), where
       acorr[b] = offset * sum of block b's codes.  For split = 0 layouts
       aq holds each block as its 16 even elements, then the 16 odd ones. */
    float (*dot_q8_nibbles)(const uint8_t *blocks, const tops__nibble_layout *layout, const int8_t *aq,
                            const float *as, const float *acorr, const float *ws, int64_t nb);
    /* dot_f32_q8 over four rows of the integer form (q + r * ldq, scales
       scale + r * ld_scale), out[r] = dot: the activations load once. */
    void (*dot_f32_q8_x4)(const float *a, const int8_t *q, int64_t ldq, const float *scale, int64_t ld_scale,
                          int64_t n, int sub, float *out);
    /* sum_k a[k] * b[k] over n f32 elements (any n). */
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    /* Four rows at once (b + r * ldb, r < 4): four memory streams keep more
       loads in flight when the weights come from DRAM.  out[r] = dot. */
    void (*dot_f32_x4)(const float *a, const float *b, int64_t ldb, int64_t n, float *out);
    /* dot_f32_x4 on f16 (bf16 set: bf16) rows converted as they load: the
       same sums in the same order as dot_f32_x4 on the rows' f32 values,
       so 16-bit weights give the bits of their f32 copy.  NULL: none. */
    void (*dot_half_x4)(const float *a, const uint16_t *b, int64_t ldb, int64_t n, int bf16, float *out);
    /* Four rows of n minifloat codes of `kind` (TOPS__FPROW_*; row r at
       b + r * ldb bytes, its first code on a byte, or for 6-bit codes on a
       three-byte unit) against m <= TOPS__FP8_ROWS_MAX_M activation rows
       (a + i * lda), each code decoded exactly in registers (NaN stays
       NaN) and, with ws, times its block's scale ws[r * ld_ws + k / 32]
       (MX; fp6: the scale times tops__fp6_unit, finite, which the kernel
       decodes the codes without); row scales are the caller's:
       out[4 * i + r].  No byte past the n codes is read.  NULL: none. */
    tops__dot_fp8_rows_fn dot_fp8_rows;
    /* The most M for which the row driver reads fp8 rows (strict) rather
       than the f32 panels, measured per level (Zen 4, e4m3: AVX2 8,
       AVX-512 16). */
    int fp8_rows_max_m;
    /* dot_q8_nibbles over four rows (blocks + r * row_bytes, scales
       ws + r * ld_ws), out[r] = dot.  Summation order (the row stream's
       too): per super-block of 8 blocks, lane l of an f32 vector takes
       block tops__nibstream_lane(l)'s exact integer sum minus acorr, times
       ws * as (0 past nb), one FMA; the eight lanes are added at the end.
       sub 16 (split = 0 layouts only): as, acorr and ws hold one entry per
       half-block, and lane l takes two FMAs per super-block, its block's
       first half, then its second. */
    void (*dot_q8_nibbles_x4)(const uint8_t *blocks, int64_t row_bytes, const tops__nibble_layout *layout,
                              const int8_t *aq, const float *as, const float *acorr, const float *ws, int64_t ld_ws,
                              int64_t nb, int sub, float *out);
    /* 1 where dot_q8_nibbles_x4 and dot_q8_nibstream_x4 take table
       entries up to 255 (no i16 stage: the scalar level, vpdpbusd), so
       layouts with nib.wide read in place four rows at a time. */
    int nib_wide;
    /* Relaxed dot over four rows of 8-bit blocks read in place (layout:
       tops__byte_layout; codes at the first block's codes, rows row_bytes
       apart): out[r] = sum over lanes of acc[r], sixteen lanes, where lane
       8 (b % 2) + j of acc[r] takes, for each block b in order,
       fmaf(the exact i32 sum of elements 4j..4j+3 of aq[b] * q[b],
       ws[r * ld_ws + b] * as[b], that lane) (even blocks in lanes 0..7,
       odd ones in 8..15: one 512-bit vector holds a block pair), and the
       lanes are added as v_j = l_j + l_(8+j), then
       ((v0+v4)+(v2+v6))+((v1+v5)+(v3+v7)). */
    void (*dot_q8_bytes_x4)(const int8_t *codes, int64_t block_bytes, int64_t row_bytes, const int8_t *aq,
                            const float *as, const float *ws, int64_t ld_ws, int64_t nb, float *out);
    /* dot_q8_bytes_x4 over q8_0 blocks (34 bytes: an f16 scale, then 32
       codes; blocks at the first block's scale) with ws[r][b] = that
       scale as f32 times mul, read as the blocks stream: the same bits as
       dot_q8_bytes_x4 after a pass that gathers the scales. */
    void (*dot_q8_hdr_x4)(const uint8_t *blocks, int64_t row_bytes, const int8_t *aq, const float *as, float mul,
                          int64_t nb, float *out);
    /* Both of the above for mm (1..4) activation rows at once, each weight
       block loaded once for all: activation row i at aq + i * lda, its
       scales at as + i * lds; out[4 * i + r] = the bits dot_q8_bytes_x4
       (hdr 0: ws, ld_ws) or dot_q8_hdr_x4 (hdr 1: each block's f16 scale
       at the two bytes before its codes, times mul; ws unused) gives for
       row i and weight row r.  codes: the first block's codes, one block
       every block_bytes. */
    void (*dot_q8_bytes_rows)(const uint8_t *codes, int64_t block_bytes, int64_t row_bytes, int hdr, float mul,
                              const int8_t *aq, int64_t lda, const float *as, int64_t lds, int mm, const float *ws,
                              int64_t ld_ws, int64_t nb, float *out);
    /* Strict twin of dot_q8_nibbles_x4: f32 activations (each block as
       for dot_q8_nibbles), out[r] = sum_b ws[r * ld_ws + b] *
       sum_k a[k] * (lut[code] - offset). */
    void (*dot_f32_nibbles_x4)(const uint8_t *blocks, int64_t row_bytes, const tops__nibble_layout *layout,
                               const float *a, const float *ws, int64_t ld_ws, int64_t nb, float *out);
    /* dot_f32_nibbles_x4 for m <= TOPS__NIB_ROWS_MAX_M activation rows at
       once (a + i * lda): out[4 * i + r].  Its own summation order (each
       weight is its table entry times the block's scale, less the block's
       min where wm is not NULL (laid out as ws), one 16-lane FMA chain per
       output).  sub 16: a scale per half-block (interleaved nibbles, no
       mins; ws two per block).  tables (codebooks: lut4): row r's 16
       weights at tables + 16 r, the layout's table and ws unused.  NULL:
       dot_f32_nibbles_x4 per row. */
    tops__dot_f32_nibbles_rows_fn dot_f32_nibbles_rows;
    /* The same for 8-bit codes in blocks of 32 (a byte layout, blocks +
       r * row_bytes, natural order): out[4 * i + r] = sum_b ws[r * ld_ws +
       b] * q times a.  NULL: the unpacked rows (dot_f32_q8_x4 per row). */
    tops__dot_f32_bytes_rows_fn dot_f32_bytes_rows;
    /* dot_q8_nibbles_x4 over one group of the row stream for m (1 to
       TOPS__NIBSTREAM_ROWS) activation rows act[0..m): `stream` and each
       act at the super-block of the first block, its form as packed;
       out[4 i + r] the dot of row i with weight row r.  Same bits as
       dot_q8_nibbles_x4 on the plain rows (with form->sub).  NULL at
       levels without one (the plain rows are read). */
    void (*dot_q8_nibstream_x4)(const uint8_t *stream, const tops__nibble_layout *layout,
                                const tops__nibstream_form *form, const tops__nibstream_act *act, int m, int64_t nb,
                                float *out);
    /* 4-bit codes through a 16-entry table: dst[i] = table[code i], n codes
       from src (element 0 in the low nibble of src[0]). */
    void (*lut16_row)(float *dst, const uint8_t *src, int64_t n, const float *table);
    /* out[i] = q[i] * scale[i / sub] for n elements (n a multiple of sub). */
    void (*dequant_q8)(const int8_t *q, const float *scale, int64_t n, int sub, float *out);
    /* Relaxed activations: n values (a multiple of sub) to i8 per sub-block,
       scale amax / 127, round to nearest even. */
    void (*quantize_q8)(const float *a, int64_t n, int sub, int8_t *aq, float *ascale);

    /* Element rows (src/kernels/<isa>/convert_*.c): n elements, any n >= 0. */
    void (*f32_to_f16_row)(uint16_t *dst, const float *src, int64_t n);
    void (*f16_to_f32_row)(float *dst, const uint16_t *src, int64_t n);
    void (*f32_to_bf16_row)(uint16_t *dst, const float *src, int64_t n);
    void (*bf16_to_f32_row)(float *dst, const uint16_t *src, int64_t n);
    /* fp8 / fp4 / int4 rows (core/numeric.h semantics; sat as in tops_cast_from_f32). */
    void (*f32_to_e4m3_row)(uint8_t *dst, const float *src, int64_t n, int sat);
    void (*e4m3_to_f32_row)(float *dst, const uint8_t *src, int64_t n);
    void (*f32_to_e5m2_row)(uint8_t *dst, const float *src, int64_t n, int sat);
    void (*e5m2_to_f32_row)(float *dst, const uint8_t *src, int64_t n);
    void (*e2m1_to_f32_row)(float *dst, const uint8_t *src, int64_t n); /* packed nibbles */
    void (*i4_to_f32_row)(float *dst, const uint8_t *src, int64_t n);   /* packed nibbles */
    /* e2m3 (e3m2 set: e3m2) codes four in three bytes from a unit's start */
    void (*fp6_to_f32_row)(float *dst, const uint8_t *src, int64_t n, int e3m2);

    /* Tiles and attention (src/kernels/<isa>/tile_f32.c). */
    tops__tile_gemm tile_gemm;
    /* dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols. */
    void (*transpose_f32)(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols);
    /* x[j] *= r. */
    void (*scale_f32_row)(float *x, int64_t n, float r);
    /* x[j] = exp((x[j] - sub) * scale) for finite sub and scale; exp of -inf
       gives 0.  Returns the sum of the results (a fixed order per level). */
    float (*exp_sub_f32_row)(float *x, int64_t n, float sub, float scale);
    /* identity (op) x[0] (op) ... (op) x[n-1]; op is a tops_reduce_op; NaN
       anywhere gives NaN. */
    float (*reduce_f32_row)(const float *x, int64_t n, int op, float identity);

    /* conv2d's depthwise direct kernel (groups = channels). */
    tops__conv_dw_fn conv_dw_f32;
    const char *conv_dw_name;
    /* conv2d's implicit GEMM without left packing, over prepacked f32
       panels of conv_f32_nr columns (gemm_f32's nr): one of the two per
       level (drive/conv.c runs the wide one where set), else none. */
    int conv_f32_nr;
    tops__conv_f32_rows_fn conv_f32_rows; /* 6 x 64 over two 32-column panels */
    const char *conv_f32_rows_name;
    tops__conv_f32_segs_fn conv_f32_segs; /* 6 x 16 over one 16-column panel */
    const char *conv_f32_segs_name;
    tops__gemm_q8_rows_fn gemm_q8_rows; /* 6 x 32 */
    const char *gemm_q8_rows_name;
    /* 1 where gemm_q8_rows beats f32 Winograd F(2x2, 3x3) for any code
       width (its i8 dot runs at 4x the f32 FMA rate: VNNI); else only 4-bit
       codes on mostly-padding tiles keep it (src/ops/conv2d.c, wino_worth). */
    int gemm_q8_rows_over_wino;
    /* The largest M (at most 4) whose relaxed 8-bit weight rows the row
       driver reads in place (dot_q8_bytes_x4, one pass per activation row,
       or dot_q8_bytes_rows, one for up to four);
       above it the integer microkernel, which reads the weights once for
       every row (src/ops/matmul2d.c, plan). */
    int gemv_q8_bytes_max_m;
    /* conv2d's Winograd F(2x2, 3x3) input and output transforms. */
    tops__wino_in_fn wino_f23_in;
    tops__wino_out_fn wino_f23_out;
} tops__kernels;

/* Kernels each ISA file provides. */
void tops__ref_f32_to_f16_row(uint16_t *dst, const float *src, int64_t n);
void tops__ref_f16_to_f32_row(float *dst, const uint16_t *src, int64_t n);
void tops__ref_f32_to_bf16_row(uint16_t *dst, const float *src, int64_t n);
void tops__ref_bf16_to_f32_row(float *dst, const uint16_t *src, int64_t n);
void tops__ref_f32_to_e4m3_row(uint8_t *dst, const float *src, int64_t n, int sat);
void tops__ref_e4m3_to_f32_row(float *dst, const uint8_t *src, int64_t n);
void tops__ref_f32_to_e5m2_row(uint8_t *dst, const float *src, int64_t n, int sat);
void tops__ref_e5m2_to_f32_row(float *dst, const uint8_t *src, int64_t n);
void tops__ref_e2m1_to_f32_row(float *dst, const uint8_t *src, int64_t n);
void tops__ref_fp6_to_f32_row(float *dst, const uint8_t *src, int64_t n, int e3m2);
void tops__ref_i4_to_f32_row(float *dst, const uint8_t *src, int64_t n);
void tops__tile_gemm_f32_6x16__ref(int mr, int64_t k, const float *a, int64_t lda, const float *b,
                                      int64_t ldb, float *c, int64_t ldc, int accumulate);
void tops__transpose_f32__ref(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols);
float tops__exp_sub_f32_row__ref(float *x, int64_t n, float sub, float scale);
void tops__scale_f32_row__ref(float *x, int64_t n, float r);
float tops__reduce_f32_row__ref(const float *x, int64_t n, int op, float identity);
void tops_conv_dw_f32__ref(const float *const *rows, int64_t ldx, int64_t win, int64_t c, int kh, int kw, int sw,
                           int dw, int pl, const float *w, const float *bias, int64_t ow, float *out, int64_t ldo);
void tops__ref_pack_rows_f32(const float *src, int64_t ld, int64_t valid, int64_t kc, float *dst, int64_t width);
void tops__wino_f23_in__ref(const float *const *d, int64_t n, float *out, int64_t ldo);
void tops__wino_f23_out__ref(const float *m, int64_t ldm, int64_t n, const float *bias, float *y, int64_t ldy);
void tops_gemm_f32_f32_f32_4x8__ref(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                    int accumulate);
void tops__ref_fill_unpackers(tops__form_kernels *table);
void tops__ref_pack_q8_panel(const int8_t *rows, int64_t kc, int offset, uint8_t *panel);
void tops_gemm_f32_qi8_qu8_4x8__ref(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                    const int32_t *acorr, int64_t lds, const uint8_t *b, const float *bscale,
                                    const float *amin, const float *bmin, float *c,
                                    int64_t ldc, int accumulate);
void tops__ref_dot_q8_bytes_x4(const int8_t *codes, int64_t block_bytes, int64_t row_bytes, const int8_t *aq,
                               const float *as, const float *ws, int64_t ld_ws, int64_t nb, float *out);
void tops__ref_dot_q8_bytes_rows(const uint8_t *codes, int64_t block_bytes, int64_t row_bytes, int hdr, float mul,
                                 const int8_t *aq, int64_t lda, const float *as, int64_t lds, int mm, const float *ws,
                                 int64_t ld_ws, int64_t nb, float *out);
void tops__ref_dot_q8_hdr_x4(const uint8_t *blocks, int64_t row_bytes, const int8_t *aq, const float *as, float mul,
                             int64_t nb, float *out);
void tops_gemm_f32_qi8_qu5_4x8__ref(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                    const int32_t *acorr, int64_t lds, const uint8_t *b, const float *bscale,
                                    const float *amin, const float *bmin, float *c,
                                    int64_t ldc, int accumulate);
void tops__ref_unpack_scales(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *scale);
void tops__ref_unpack_codes(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, int8_t *q);
float tops__ref_dot_f32_q8(const float *a, const int8_t *q, const float *scale, int64_t n, int sub);
void tops__ref_dot_f32_q8_x4(const float *a, const int8_t *q, int64_t ldq, const float *scale, int64_t ld_scale,
                             int64_t n, int sub, float *out);
float tops__ref_dot_q8_q8(const int8_t *aq, const float *ascale, const int8_t *q, const float *scale, int64_t n,
                          int sub);
float tops__ref_dot_f32(const float *a, const float *b, int64_t n);
void tops__ref_lut16_row(float *dst, const uint8_t *src, int64_t n, const float *table);
void tops__ref_dot_f32_x4(const float *a, const float *b, int64_t ldb, int64_t n, float *out);
void tops__ref_dot_q8_nibbles_x4(const uint8_t *blocks, int64_t row_bytes, const tops__nibble_layout *layout,
                                 const int8_t *aq, const float *as, const float *acorr, const float *ws, int64_t ld_ws,
                                 int64_t nb, int sub, float *out);
/* A scale- or bias-plane entry as f32 (f16, bf16, f32, e8m0, ue4m3). */
float tops__ref_scale_entry(tops_dtype dt, const uint8_t *e);
void tops__ref_subscale_scales(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *scale);
void tops__ref_unpack_code_mins(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *min);
void tops__ref_blocks_mins(const tops__qweight *w, int64_t row, int64_t k0, int64_t n, float *min);
void tops__ref_dot_f32_nibbles_x4(const uint8_t *blocks, int64_t row_bytes, const tops__nibble_layout *layout,
                                  const float *a, const float *ws, int64_t ld_ws, int64_t nb, float *out);
void tops__avx2_dot_f32_nibbles_x4(const uint8_t *blocks, int64_t row_bytes, const tops__nibble_layout *layout,
                                   const float *a, const float *ws, int64_t ld_ws, int64_t nb, float *out);
float tops__ref_dot_q8_nibbles(const uint8_t *blocks, const tops__nibble_layout *layout, const int8_t *aq,
                               const float *as, const float *acorr, const float *ws, int64_t nb);
void tops__ref_dequant_q8(const int8_t *q, const float *scale, int64_t n, int sub, float *out);
void tops__ref_quantize_q8(const float *a, int64_t n, int sub, int8_t *aq, float *ascale);
#if defined(TOPS_HAVE_X86_KERNELS)
void tops__avx2_f32_to_f16_row(uint16_t *dst, const float *src, int64_t n);
void tops__avx2_f16_to_f32_row(float *dst, const uint16_t *src, int64_t n);
void tops__avx2_f32_to_bf16_row(uint16_t *dst, const float *src, int64_t n);
void tops__avx2_bf16_to_f32_row(float *dst, const uint16_t *src, int64_t n);
void tops__tile_gemm_f32_6x16__avx2(int mr, int64_t k, const float *a, int64_t lda, const float *b,
                                       int64_t ldb, float *c, int64_t ldc, int accumulate);
void tops__transpose_f32__avx2(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols);
float tops__exp_sub_f32_row__avx2(float *x, int64_t n, float sub, float scale);
void tops__scale_f32_row__avx2(float *x, int64_t n, float r);
float tops__reduce_f32_row__avx2(const float *x, int64_t n, int op, float identity);
void tops__tile_gemm_f32_12x32__avx512(int mr, int64_t k, const float *a, int64_t lda, const float *b,
                                          int64_t ldb, float *c, int64_t ldc, int accumulate);
float tops__exp_sub_f32_row__avx512(float *x, int64_t n, float sub, float scale);
float tops__reduce_f32_row__avx512(const float *x, int64_t n, int op, float identity);
void tops__avx2_f32_to_e4m3_row(uint8_t *dst, const float *src, int64_t n, int sat);
void tops__avx2_e4m3_to_f32_row(float *dst, const uint8_t *src, int64_t n);
void tops__avx2_f32_to_e5m2_row(uint8_t *dst, const float *src, int64_t n, int sat);
void tops__avx2_e5m2_to_f32_row(float *dst, const uint8_t *src, int64_t n);
void tops__avx2_e2m1_to_f32_row(float *dst, const uint8_t *src, int64_t n);
void tops__avx2_fp6_to_f32_row(float *dst, const uint8_t *src, int64_t n, int e3m2);
void tops__avx2_i4_to_f32_row(float *dst, const uint8_t *src, int64_t n);
void tops_gemm_f32_qi8_qu8_6x32_rows__avx512_vnni(int64_t nb, const int8_t *const *a, const float *const *as,
                                                  const int32_t *const *acorr, const uint8_t *const *b, int64_t bstep,
                                                  const float *const *bs, int64_t sstep, float *c, int64_t ldc,
                                                  int accumulate, int offset);
void tops_gemm_f32_qi8_qu8_6x32_rows__avx2(int64_t nb, const int8_t *const *a, const float *const *as,
                                           const int32_t *const *acorr, const uint8_t *const *b, int64_t bstep,
                                           const float *const *bs, int64_t sstep, float *c, int64_t ldc,
                                           int accumulate, int offset);
void tops_conv_dw_f32__avx2(const float *const *rows, int64_t ldx, int64_t win, int64_t c, int kh, int kw, int sw,
                            int dw, int pl, const float *w, const float *bias, int64_t ow, float *out, int64_t ldo);
void tops_conv_f32_6x16_segs__avx2(int64_t nseg, const tops__conv_seg *seg, float *c, int load_c);
void tops_conv_f32_6x64_rows__avx512(int64_t kc, int rows, const float *const *a, const float *b0, const float *b1,
                                     float *const *c, int load_c);
void tops_conv_dw_f32__avx512(const float *const *rows, int64_t ldx, int64_t win, int64_t c, int kh, int kw, int sw,
                              int dw, int pl, const float *w, const float *bias, int64_t ow, float *out, int64_t ldo);
void tops__avx2_pack_rows_f32(const float *src, int64_t ld, int64_t valid, int64_t kc, float *dst, int64_t width);
void tops__wino_f23_in__avx2(const float *const *d, int64_t n, float *out, int64_t ldo);
void tops__wino_f23_out__avx2(const float *m, int64_t ldm, int64_t n, const float *bias, float *y, int64_t ldy);
void tops__avx2_fill_unpackers(tops__form_kernels *table);
void tops__avx2_pack_q8_panel(const int8_t *rows, int64_t kc, int offset, uint8_t *panel);
void tops_gemm_f32_qi8_qs4_4x8__avx2(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                     const int32_t *acorr, int64_t lds, const uint8_t *b, const float *bscale,
                                     const float *amin, const float *bmin, float *c,
                                     int64_t ldc, int accumulate);
void tops_gemm_f32_qi8_qu8_4x8__avx2(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                     const int32_t *acorr, int64_t lds, const uint8_t *b, const float *bscale,
                                     const float *amin, const float *bmin, float *c,
                                     int64_t ldc, int accumulate);
void tops__avx2_dot_q8_bytes_x4(const int8_t *codes, int64_t block_bytes, int64_t row_bytes, const int8_t *aq,
                                const float *as, const float *ws, int64_t ld_ws, int64_t nb, float *out);
void tops__avx2_dot_q8_hdr_x4(const uint8_t *blocks, int64_t row_bytes, const int8_t *aq, const float *as, float mul,
                              int64_t nb, float *out);
void tops_gemm_f32_qi8_qu5_4x8__avx2(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                     const int32_t *acorr, int64_t lds, const uint8_t *b, const float *bscale,
                                     const float *amin, const float *bmin, float *c,
                                     int64_t ldc, int accumulate);
float tops__avx2_dot_f32_q8(const float *a, const int8_t *q, const float *scale, int64_t n, int sub);
float tops__avx2_dot_q8_q8(const int8_t *aq, const float *ascale, const int8_t *q, const float *scale, int64_t n,
                           int sub);
float tops__avx2_dot_f32(const float *a, const float *b, int64_t n);
void tops__avx2_lut16_row(float *dst, const uint8_t *src, int64_t n, const float *table);
void tops__avx2_dot_f32_x4(const float *a, const float *b, int64_t ldb, int64_t n, float *out);
void tops__avx2_dot_half_x4(const float *a, const uint16_t *b, int64_t ldb, int64_t n, int bf16, float *out);
void tops__avx2_dot_fp8_rows(const float *a, int64_t lda, int m, const uint8_t *b, int64_t ldb, int64_t n, int kind,
                             const float *ws, int64_t ld_ws, float *out);
void tops__avx512_dot_f32_nibbles_rows(const uint8_t *blocks, int64_t row_bytes, const tops__nibble_layout *layout,
                                       const float *a, int64_t lda, int m, const float *ws, const float *wm,
                                       int64_t ld_ws, int sub, const float *tables, int64_t nb, float *out);
void tops__avx512_dot_f32_bytes_rows(const uint8_t *blocks, int64_t row_bytes, const tops__byte_layout *layout,
                                     const float *a, int64_t lda, int m, const float *ws, int64_t ld_ws, int64_t nb,
                                     float *out);
void tops__avx512_dot_fp8_rows(const float *a, int64_t lda, int m, const uint8_t *b, int64_t ldb, int64_t n, int kind,
                               const float *ws, int64_t ld_ws, float *out);
/* The same with AVX512-VBMI (fp6 64 codes a step; the same bits). */
void tops__avx512vbmi_dot_fp8_rows(const float *a, int64_t lda, int m, const uint8_t *b, int64_t ldb, int64_t n,
                                   int kind, const float *ws, int64_t ld_ws, float *out);
void tops__avx2_dot_q8_nibbles_x4(const uint8_t *blocks, int64_t row_bytes, const tops__nibble_layout *layout,
                                  const int8_t *aq, const float *as, const float *acorr, const float *ws, int64_t ld_ws,
                                  int64_t nb, int sub, float *out);
float tops__avx2_dot_q8_nibbles(const uint8_t *blocks, const tops__nibble_layout *layout, const int8_t *aq,
                                const float *as, const float *acorr, const float *ws, int64_t nb);
void tops__avx2_dot_q8_nibstream_x4(const uint8_t *stream, const tops__nibble_layout *layout,
                                    const tops__nibstream_form *form, const tops__nibstream_act *act, int m,
                                    int64_t nb, float *out);
void tops__avx512_vnni_dot_q8_nibbles_x4(const uint8_t *blocks, int64_t row_bytes, const tops__nibble_layout *layout,
                                         const int8_t *aq, const float *as, const float *acorr, const float *ws,
                                         int64_t ld_ws, int64_t nb, int sub, float *out);
void tops__avx512_vnni_dot_q8_bytes_rows(const uint8_t *codes, int64_t block_bytes, int64_t row_bytes, int hdr,
                                         float mul, const int8_t *aq, int64_t lda, const float *as, int64_t lds,
                                         int mm, const float *ws, int64_t ld_ws, int64_t nb, float *out);
void tops__avx512_vnni_dot_q8_nibstream_x4(const uint8_t *stream, const tops__nibble_layout *layout,
                                           const tops__nibstream_form *form, const tops__nibstream_act *act, int m,
                                           int64_t nb, float *out);
void tops__avx2_dequant_q8(const int8_t *q, const float *scale, int64_t n, int sub, float *out);
void tops__avx2_quantize_q8(const float *a, int64_t n, int sub, int8_t *aq, float *ascale);
void tops__avx2_dot_f32_q8_x4(const float *a, const int8_t *q, int64_t ldq, const float *scale, int64_t ld_scale,
                              int64_t n, int sub, float *out);
void tops_gemm_f32_f32_f32_12x32__avx512(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                         int accumulate);
#if defined(TOPS_HAVE_AMX_KERNELS)
void tops_gemm_f32_qi8_qi8_32x32__amx(int mt, int64_t nb, int sub, const int8_t *a, int64_t a_next, const float *as,
                                      int64_t as_next, const int8_t *b0, const int8_t *b1, const int8_t *lut,
                                      const float *bs0, const float *bs1, const float *am, const float *bm0,
                                      const float *bm1, float *c, int64_t ldc, int accumulate);
void tops__amx_release(void);
void tops__amx_nib_expand__avx512(const uint8_t *nib, const int8_t *lut, int64_t rows, int8_t *out);
void tops_conv_bf16_32x32__amx(int mt, int nt, int ntaps, const int64_t *toff, int64_t csteps, const uint16_t *a0,
                               const uint16_t *a1, int64_t lda, const uint16_t *b0, const uint16_t *b1, float *c,
                               int64_t ldc);
void tops_gemm_f32_bf16x2_bf16_32x32__amx(int mt, int64_t nb, int sub, int run, const uint16_t *hi, const uint16_t *lo,
                                          int64_t a_next, const uint16_t *b0, const uint16_t *b1, const float *bs0,
                                          const float *bs1, const float *am, int64_t am_next, const float *bm0,
                                          const float *bm1, float *c, int64_t ldc, int accumulate);
void tops_gemm_f32_bf16t_bf16t_32x32__amx(int mt, int64_t steps, const uint16_t *a, int64_t a_next, int64_t a_step,
                                          const uint16_t *b0, const uint16_t *b1, int64_t b_step, int np,
                                          const uint8_t *pa, const uint8_t *pb, float *c, int64_t ldc,
                                          int accumulate);
void tops_gemm_f32_bf16t_bf16t_32x32__amx_dec(int mt, int na, int64_t steps, const uint16_t *a, int64_t a_next,
                                              int64_t a_step, const uint16_t *b0, const uint16_t *b1, int64_t b_step,
                                              float *c, int64_t ldc, int accumulate,
                                              const tops__amx_decode_job *job);
int tops__amx_terms_q8__avx512(const int8_t *panel, const float *scales, int sub, int64_t kc, int nslots,
                               uint16_t *out);
int tops__amx_terms_f32__avx512(const float *src, int64_t ld, int64_t kc, int nslots, uint16_t *out);
void tops__amx_terms_q8_min__avx512(const int8_t *panel, const float *scales, const float *mins, int sub, int64_t kc,
                                    uint16_t *out);
void tops__amx_attn_qk__amx(int nds, int steps, const uint16_t *q, const uint16_t *k, int nk, int np,
                            const uint8_t *pa, const uint8_t *pb, float *s, int64_t lds);
int tops__amx_attn_softmax__avx512(const tops__amx_attn_args *a, float *s, int64_t lds, float *m, float *l,
                                   float *alpha, uint16_t *p);
void tops__amx_attn_pack_a__avx512(const float *src, int64_t ld, int rows, int chunks, int nt, int64_t term_stride,
                                   uint16_t *dst);
void tops__amx_attn_pack_b__avx512(const float *src, int64_t ld, int64_t npairs, int ngroups, int nt,
                                   int64_t group_stride, int64_t term_stride, uint16_t *dst);
int tops__amx_attn_softmax_qk__amx(const tops__amx_attn_args *a, float *s, int64_t lds, float *m, float *l,
                                   float *alpha, uint16_t *p, const tops__amx_attn_qk_job *next);
void tops__amx_attn_pv__amx(int steps, const uint16_t *p, int np_terms_p, const uint16_t *v, int nv, int ncg2, int np,
                            const uint8_t *pa, const uint8_t *pb, const float *alpha, float *o, int64_t ldo);
#endif
void tops__avx512_vnni_fill_unpackers(tops__form_kernels *table);
void tops__avx512_dot_super_min_f32(const tops__int_layout *lay, const uint8_t *blocks, float mul, const float *a,
                                    int64_t lda, int m, int64_t nsb, float *out);
void tops__avx512_dot_super_6bit_f32(const tops__int_layout *lay, const uint8_t *blocks, float mul, const float *a,
                                     int64_t lda, int m, int64_t nsb, float *out);
void tops_gemm_f32_qi8_qu8_4x32__avx2(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                      const int32_t *acorr, int64_t lds, const uint8_t *b, int64_t bstride,
                                      const float *bscale, int64_t sstride, const float *amin, const float *bmin,
                                      float *c, int64_t ldc, int accumulate, const uint8_t *pf, int offset);
void tops_gemm_f32_qi8_qu8_4x32__avx512_vnni(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                            const int32_t *acorr, int64_t lds, const uint8_t *b, int64_t bstride,
                                            const float *bscale, int64_t sstride, const float *amin,
                                            const float *bmin, float *c, int64_t ldc, int accumulate, const uint8_t *pf, int offset);
void tops_gemm_f32_qi8_qu5_4x8__avx512_vnni(int64_t nb, int sub, const int8_t *a, int64_t lda, const float *ascale,
                                            const int32_t *acorr, int64_t lds, const uint8_t *b, const float *bscale,
                                            const float *amin, const float *bmin,
                                            float *c, int64_t ldc, int accumulate);
void tops_gemm_f32_f32_f32_6x16__avx2(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                      int accumulate);
#endif

#endif
