/* The matmul2d driver: BLIS-style blocking over N, K and M with packed,
   zero-padded f32 panels fed to one microkernel, threads over N blocks.
   The op layer (src/ops/matmul2d.c) checks every argument and fills a
   tops__gemm_problem; nothing here reports user errors except memory. */
#ifndef TOPS_DRIVE_GEMM_H
#define TOPS_DRIVE_GEMM_H

#include "core/threads.h"
#include "cpu/dispatch.h"
#include "formats/qweight.h"

/* Reads rows [r0, r0 + nr) x columns [c0, c0 + nc) of a rank-2 tensor's
   storage into out[i * ld + j] as f32 (every plane applied). */
typedef void (*tops__rect_reader)(const tops__kernels *kern, const tops_tensor *t, int64_t r0, int64_t nr,
                                  int64_t c0, int64_t nc, float *out, int64_t ld);

/* Gathers rows [r0, r0 + nr) x columns [c0, c0 + nc) of a matrix that
   exists only as a rule (conv2d's im2col rows, drive/conv.c) into
   out[i * ld + j] as f32. */
typedef void (*tops__rows_gather)(const void *ctx, const tops__kernels *kern, int64_t r0, int64_t nr, int64_t c0,
                                  int64_t nc, float *out, int64_t ld);

/* One operand as the driver sees it: where the K dimension lies in its
   storage and how to read it. */
typedef struct tops__gemm_operand {
    const tops_tensor *t;
    int k_major;             /* storage is [K, other] (left transposed, right plain) */
    tops__rect_reader read;
    int direct_f32;          /* plain f32, unit column stride, tensor_scale 1: read in place */
    const struct tops__packed_right *packed; /* right only: prepacked panels, or NULL */
    /* Left only: when set, rows come from gather(gather_ctx, ...) and t,
       k_major, read and direct_f32 are not used (the left-packing hook). */
    tops__rows_gather gather;
    const void *gather_ctx;
    /* Right only: TOPS_DT_F16 / BF16 for plain 16-bit floats with unit
       column stride and tensor_scale 1, not packed (the rows driver dots
       them in place), else 0 (TOPS_DT_NONE). */
    int direct_half;
} tops__gemm_operand;

/* Row m of the left operand over [0, k) into out (any left: stored,
   transposed or gathered). */
static inline void tops__left_row(const tops__kernels *kern, const tops__gemm_operand *left, int64_t m, int64_t k,
                                  float *out) {
    if (left->gather) left->gather(left->gather_ctx, kern, m, 1, 0, k, out, k);
    else if (left->k_major) left->read(kern, left->t, 0, k, m, 1, out, 1);
    else left->read(kern, left->t, m, 1, 0, k, out, k);
}

/* Reader for any format through the formats layer (tops__decode_rect). */
void tops__read_rect_decode(const tops__kernels *kern, const tops_tensor *t, int64_t r0, int64_t nr, int64_t c0,
                            int64_t nc, float *out, int64_t ld);
/* Reader for plain f32, f16 and bf16 tensors (any strides). */
void tops__read_rect_plain(const tops__kernels *kern, const tops_tensor *t, int64_t r0, int64_t nr, int64_t c0,
                           int64_t nc, float *out, int64_t ld);

/* The relaxed M <= 4 row stream of packed 4-bit weights (layout in
   kernels/kernels.h, tops__nibstream_sb_bytes): group g of four rows starts
   at data + g * group_bytes.  data NULL: none. */
typedef struct tops__nibstream {
    const uint8_t *data;
    int64_t group_bytes;
    tops__nibstream_form form; /* scales, sub, coded, mul */
} tops__nibstream;

typedef struct tops__gemm_problem {
    int64_t m, n, k;
    tops__gemm_operand left, right;
    tops_tensor *dest;       /* f32, f16 or bf16, any non-overlapping strides */
    int accumulate;          /* dest += left * right */
    int relaxed;             /* may quantize activations (integer dot products) */
    const tops__kernels *kern;
    int threads;
    int64_t n_tile_hint;     /* 0 = choose */
    void *scratch;           /* caller scratch (may be NULL) */
    size_t scratch_bytes;
    /* Relaxed integer driver: the weights' u8 panels and scales prepacked
       by tops_pack_right (layout of tops__pack_q8_panels), or NULL. */
    const uint8_t *q8_panels;
    const float *q8_scales;
    const float *q8_mins;    /* weights with mins: laid out as q8_scales, else NULL */
    int q8_amx;              /* the panels are tops__pack_amx_panels': 1 its i8 ones, 2 its bf16 ones,
                                3 its 4-bit ones (then q8_lut their codes) */
    const int8_t *q8_lut;
    tops__nibstream nib_stream; /* prepacked row stream for M <= 4, or data NULL */
} tops__gemm_problem;

/* Every driver's first check, before any size arithmetic: the unblocked
   workspace terms (up to M + 32 rows of K elements of up to 16 bytes) fit
   int64, else TOPS_OVERFLOW under fn (the sizes after it are computed in
   int64 and checked again in size_t).  Never depends on memory. */
tops_status tops__gemm_check_size(const char *fn, int64_t m, int64_t k);

/* Runs the problem.  Fails only with TOPS_OUT_OF_MEMORY / TOPS_OVERFLOW
   (named under fn) before anything is written to dest. */
tops_status tops__gemm_run(const char *fn, const tops__gemm_problem *p);

/* The small-M driver: right stored [N, K] in a format with an integer
   form (kern->unpack); any left.  Same failure rules as tops__gemm_run. */
tops_status tops__gemv_run(const char *fn, const tops__gemm_problem *p);

/* Whether w can have a row stream, and its form: relaxed 4-bit layouts
   with blocks of 32 (f16 or e8m0 scales) or of 16 (f16 or ue4m3; split = 0
   codes), K % 32 == 0, N >= 4, a level with the kernel.  0: none. */
int tops__nibstream_form_of(const tops__kernels *kern, const tops_tensor *w, tops__nibstream_form *form);
/* Whether the stream stores each nibble as its table entry (all < 16). */
int tops__nibstream_coded(const tops__nibble_layout *nib);
/* Bytes of one four-row group's stream. */
int64_t tops__nibstream_group_bytes(const tops_tensor *w, const tops__nibstream_form *form);
/* Writes groups [g0, g0 + count) of w's row stream (zeroed first) to out. */
void tops__pack_nibstream(const tops__kernels *kern, const tops_tensor *w, const tops__nibstream_form *form, int64_t g0,
                          int64_t count, uint8_t *out);
/* Whether the row driver reads p's 8-bit weight rows in place (relaxed). */
int tops__gemv_bytes_in_place(const tops__gemm_problem *p);
/* The most rows for which the row driver takes p (usual: the plan's
   default): more where a kernel decodes each weight once for every
   activation row and its chunk of codes stays in L1 across them (plain
   left operands: matmul's weights stream from memory, measured at K =
   4096, N = 12288; conv2d's gathered calls keep the usual bound). */
int64_t tops__gemv_rows_max_m(const tops__gemm_problem *p, int64_t usual);
/* Whether p's relaxed weight rows have no in-place reader (2-bit codes;
   mins without whole super-blocks: q4_1, int4-gG-affine): the row driver
   would unpack and dot them one row at a time. */
int tops__gemv_unpacks_rows(const tops__gemm_problem *p);
/* Whether p's weights are minifloat element rows (e4m3, e5m2, e2m3, e3m2;
   plain, a scale per row: -ch, or per block of 32 along K: MX) that the row driver
   reads in place, four at a time (dot_fp8_rows): each code times its
   block's scale, or each row's sum times its scale, then the tensor scale. */
int tops__gemv_fp8_rows(const tops__gemm_problem *p);
/* Whether p's weights are 4-bit sub-blocks of super-blocks (iq4_xs) that
   the strict row driver reads in place (dot_f32_nibbles_rows, K % 256 == 0). */
int tops__gemv_super_rows(const tops__gemm_problem *p);
/* Whether p's weights are codebook rows (lut4, lut4-row: contiguous 4-bit
   codes, K % 32 == 0) that the row driver reads in place, four at a time
   (dot_f32_nibbles_rows with each row's entries times the tensor scale). */
int tops__gemv_lut_rows(const tops__gemm_problem *p);
/* Whether the row driver reads p's weights from the row stream. */
int tops__gemv_streams(const tops__gemm_problem *p);

/* The relaxed integer driver: right stored [N, K] with an integer form
   that tops__gemm_q8_takes, M above the small-M driver's range. */
tops_status tops__gemm_q8_run(const char *fn, const tops__gemm_problem *p);

/* Whether tops__gemm_q8_run takes right (qmax <= 15, or 8-bit with the
   level's wide kernel). */
int tops__gemm_q8_takes(const tops__kernels *kern, const tops_tensor *w);
/* The integer microkernel for a weight and the offset its panels carry. */
const tops__gemm_q8_ukernel *tops__gemm_q8_pick(const tops__kernels *kern, const tops_tensor *w, int *offset);

/* Prepacked integer panels of a weight stored [N, K] that
   tops__gemm_q8_takes: for each group g of 8 columns, kp / 4 steps of 32 bytes
   (the microkernel's panel over all of kp = K rounded up to 32) at
   panels + g * 8 * kp, and per sub-block 8 column scales at
   scales + g * 8 * (kp / sub).  Fills groups [g0, g0 + count); scratch
   holds 8 * kp bytes + 8 * (kp / sub) floats.  Missing columns: q = 0,
   scale 0.  Same bytes (offset of tops__gemm_q8_pick) as the driver's
   per-call packing.  Weights with mins (run_min): also their mins, laid
   out as the scales at mins (else mins is not written), and scratch holds
   8 * (kp / sub) floats more. */
void tops__pack_q8_panels(const tops__kernels *kern, const tops_tensor *w, int64_t kp, int64_t g0, int64_t count,
                          uint8_t *panels, float *scales, float *mins, void *scratch);

/* The AMX drivers (drive/gemm_amx.c), on a level with AMX kernels.
   Integer-form driver (tops__gemm_amx_run): right stored [N, K] with any
   integer form (kern->unpack) whose sub-block is 4, 8, 16 or 32
   (tops__gemm_amx_supports), codes in tiles, f32 scaling per sub-block:
   relaxed i8 activations on the i8 tiles (kern->amx_q8; forms with mins
   too, their min term one FMA per block and row), strict
   activations as bf16 hi + lo on the bf16 tiles (kern->amx_bf16).
   bf16 terms (tops__gemm_amx_bf16t_run, kern->amx_bf16t): any right
   operand (prepacked i8 panels, an integer form, or any format's f32
   reader), strict (hi + lo activation terms, up to three weight terms) or
   relaxed (one term each); the plan sends it what the integer-form driver
   does not take. */
int tops__gemm_amx_supports(const tops__kernels *kern, const tops_tensor *w, int relaxed);
/* Whether every value q * scale of w's integer form is, up to one factor
   for the whole tensor, exact in one bf16 term: the codes' and the stored
   scales' significant bits sum to at most 8 (mxfp4, mxint8: e8m0 scales;
   nvfp4: e2m1 codes, ue4m3 scales, its f32 tensor scale the factor; int
   groups with e8m0 or ue4m3 scales).  *factor (may be NULL): 1 where the
   scales' multiplier is a power of two, else that multiplier (the
   bf16-term driver decodes q * scale / factor and multiplies the sums by
   factor).  Strict calls on such weights take the bf16 terms (two
   products a step, hi x w and lo x w, no per-block scaling) and
   tops_pack_right stores them the relaxed panels (i8 or 4-bit), which the
   bf16-term kernel decodes between its tile steps. */
int tops__amx_one_term(const tops__kernels *kern, const tops_tensor *w, float *factor);
/* The AMX bf16 drivers' activation terms (bf16 terms and strict code
   tiles): relaxed 1 (rounded once); strict 2 (hi + lo), or 1 where the
   left is stored bf16 without a tensor scale (its lo would be zero, the
   products exact in one term). */
int tops__amx_left_terms(const tops__gemm_problem *p);
tops_status tops__gemm_amx_run(const char *fn, const tops__gemm_problem *p);
tops_status tops__gemm_amx_bf16t_run(const char *fn, const tops__gemm_problem *p);
/* Whether the bf16-term driver reads p's weights through their integer
   form with mins (relaxed q4_1, q4_K, q5_K stored [N, K], plain or the
   copy of an in-place pack): unpacked per 32-column pair and K block
   into the i8 panel layout with scales and mins, one bf16 term each of
   q * scale - min (kern->amx_bf16t.terms_q8_min). */
int tops__amx_bf16t_unpacks_mins(const tops__gemm_problem *p);
/* Prepacked AMX panels of a weight stored [N, K]: tops__amx_groups(N)
   groups of 16 columns (N rounded up to 32), group g's codes in the tile
   layout over all of kp = K rounded up to 32 at panels + g * 16 * kp codes
   (relaxed, and strict where tops__amx_one_term: i8,
   tops__amx_pack_panel, read by the i8 tiles and the bf16 terms; other
   strict: bf16, tops__amx_pack_panel_bf16, read by the bf16 code tiles), and per sub-block 16 column scales at scales + g * 16 *
   (kp / sub); relaxed weights with mins (q4_1, q4_K, q5_K, affine int4)
   also their column mins at mins, laid out as the scales (else mins is
   NULL).  Fills groups [g0, g0 + count); scratch holds 16 * kp bytes
   + 16 * (kp / sub) floats (twice that with mins).  Missing columns: q = 0,
   scale 0, min 0.  Same bytes as the drivers' per-call packing. */
int64_t tops__amx_groups(int64_t n);
void tops__pack_amx_panels(const tops__kernels *kern, const tops_tensor *w, int strict, int64_t kp, int64_t g0,
                           int64_t count, void *panels, float *scales, float *mins, void *scratch);
/* Relaxed (or tops__amx_one_term) weights whose codes take at most 16
   values (4-bit codes; with mins q4_1, q4_K, affine int4): the panels in
   their 4-bit form (kernels.h, tops__amx_nib_expand; half the bytes),
   group g at panels + g * 8 * kp, lut the codes of the nibbles, mins
   (weights with mins) as tops__pack_amx_panels lays them out.
   tops__amx_nib_lut fills lut and returns 1 where w qualifies (0
   otherwise); pack_nib needs 16 * kp bytes more scratch than
   tops__pack_amx_panels. */
int tops__amx_nib_lut(const tops__kernels *kern, const tops_tensor *w, int8_t lut[16]);
void tops__pack_amx_nib_panels(const tops__kernels *kern, const tops_tensor *w, const int8_t lut[16], int64_t kp,
                               int64_t g0, int64_t count, uint8_t *panels, float *scales, float *mins,
                               void *scratch);

/* Scratch for a run: the caller's exec.scratch when large enough, else the
   calling thread's cached buffer (kept between calls).  64-byte aligned;
   NULL when out of memory. */
void *tops__workspace_get(const tops__gemm_problem *p, size_t bytes);
/* A driver's workspace: shared bytes, then per_thread bytes for each of
   threads (64-byte aligned); sets *ws, or fails with a sentence (a size
   that overflows, no memory). */
tops_status tops__driver_workspace(const char *fn, const tops__gemm_problem *p, size_t shared, size_t per_thread,
                                   int threads, unsigned char **ws);

/* Balanced block size: splits n into ceil(n / target) nearly equal
   blocks, each a multiple of `unit`. */
int64_t tops__balanced_block(int64_t n, int64_t target, int64_t unit);

/* The N split of the blocked drivers: blocks of about nc_target columns
   (a multiple of nr), an even share per thread, at least one block per
   thread where N allows; *threads drops to the number of blocks. */
void tops__split_n(const tops__gemm_problem *p, int64_t nc_target, int64_t nr, int *threads, int64_t *nc,
                   int64_t *n_blocks);
/* The rows of the M chunk at m0 (m_chunk, but fewer in the last one). */
static inline int64_t tops__chunk_rows(int64_t m, int64_t m0, int64_t m_chunk) { return m - m0 < m_chunk ? m - m0 : m_chunk; }

/* M chunks a round runs side by side (each with its own left operand of
   left_bytes): enough that N's n_blocks give the call's threads a job each
   (conv2d's 64-channel layers: M = 100352, N = 64), at most 256 MiB of
   left operands; *threads the threads the round uses.  Jobs are then
   (chunk, n block) pairs, each computing what it computes alone. */
int64_t tops__m_rounds(const tops__gemm_problem *p, tops__work_kind kind, int64_t n_blocks, int64_t m_chunk,
                       size_t left_bytes, int *threads);

/* Reader of minifloat element formats (e4m3/e5m2, mxfp8, channel fp8;
   e2m3/e3m2, mxfp6) stored [N, K], through the dispatch's element rows;
   whether a tensor's format qualifies; and its codes' kind
   (TOPS__FPROW_*, kernels/kernels.h; -1 for other elements). */
int tops__has_element_reader(const tops_tensor *t);
int tops__element_kind(const tops_tensor *t);
void tops__read_rect_elements(const tops__kernels *kern, const tops_tensor *t, int64_t r0, int64_t nr, int64_t c0,
                              int64_t nc, float *out, int64_t ld);

/* Reader of lut4 / lut4-row weights (codebook per tensor or per row). */
void tops__read_rect_lut4(const tops__kernels *kern, const tops_tensor *t, int64_t r0, int64_t nr, int64_t c0,
                          int64_t nc, float *out, int64_t ld);

/* Reader of formats with an integer form, for storage [N, K]. */
void tops__read_rect_unpack(const tops__kernels *kern, const tops_tensor *t, int64_t r0, int64_t nr, int64_t c0,
                            int64_t nc, float *out, int64_t ld);

/* Writes acc[i * ld + j] (rows [r0, r0 + nr), columns [c0, c0 + nc) of
   the result) into dest, adding dest's old values when accumulate. */
void tops__store_rect(const tops__kernels *kern, tops_tensor *dest, int64_t r0, int64_t nr, int64_t c0,
                      int64_t nc, const float *acc, int64_t ld, int accumulate);

#endif

/* What tops_pack_right() builds (tops_tensor.packed_ points here; the
   tensor's owner_ allocation holds this header and the panels). */
#define TOPS_PACKED_MAGIC 0x50434b44u /* "PCKD" */
typedef struct tops__packed_right {
    uint32_t magic;
    tops_format source;      /* the weights' format before packing */
    int64_t k, n;            /* logical right extents [K, N] */
    int transposed;          /* packed from [N, K] storage (transpose_right) */
    int nr;                  /* panel width: the microkernel's NR at pack time */
    const float *panels;     /* [ceil(n / nr)][k][nr] f32, zero-padded, planes applied */
    size_t bytes;            /* bytes of the panels */
    /* Formats the kernels read in place (integer forms, [N, K]): instead of
       panels, a contiguous copy in the format's own layout. */
    int in_place;
    tops_tensor copy;
    /* In place and packed for relaxed use with an integer form the integer
       driver takes (tops__gemm_q8_takes):
       also the integer driver's panels (tops__pack_q8_panels), so no call
       unpacks; NULL otherwise.  q8_bytes spans panels and scales. */
    const uint8_t *q8_panels;
    const float *q8_scales;
    const float *q8_mins;    /* weights with mins (q4_1, q4_K, q5_K): as the scales; else NULL */
    size_t q8_bytes;
    int q8_amx; /* packed at a level with AMX kernels: tops__pack_amx_panels'
                   layout (every integer form), not the 8-column one: 1 its
                   i8 panels (relaxed), 2 its bf16 ones (strict), 3 its 4-bit
                   ones (relaxed, codes in q8_lut) */
    int8_t q8_lut[16];
    /* Also packed relaxed, where tops__nibstream_scale_bytes allows: the
       row driver's four-row stream (M <= 4), data NULL otherwise. */
    tops__nibstream nib_stream;
    /* conv2d's prepared weights (a tops__conv_cache, drive/conv.h:
       Winograd's transformed ones or the AMX direct path's bf16 panels),
       made by the first relaxed call that runs on this pack and kept for
       the next ones; NULL until then.  tops_tensor_destroy frees them
       (through the CPU release hook, tops__conv_cache_release). */
    _Atomic(void *) conv_cache;
} tops__packed_right;

/* Reader over packed panels, as if storage were [K, N] (k_major). */
void tops__read_rect_packed(const tops__kernels *kern, const tops_tensor *t, int64_t r0, int64_t nr, int64_t c0,
                            int64_t nc, float *out, int64_t ld);
/* Packs columns [n0, n0 + nn) (whole panels) of an operand into `panels`
   (layout of tops__packed_right) over all of K; tmp holds nr * kc_tmp floats. */
void tops__pack_right_panels(const tops__kernels *kern, const tops__gemm_operand *op, int64_t k, int64_t n,
                             int nr, int64_t panel_first, int64_t panel_count, float *panels, float *tmp,
                             int64_t kc_tmp);
