/* The CUDA backend as seen from the rest of the library, and the plain-C
   contract between its host side (the .c files of src/cuda) and its kernels
   (the .cu files). */
#ifndef TOPS_CUDA_INTERNAL_H
#define TOPS_CUDA_INTERNAL_H

#include "tensorops.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- entry points for ops (src/ops) and tensors (src/core) ---------------- */

/* tops_matmul2d and tops_pack_right with exec->device = cuda:N; the caller
   has validated exec and the descriptor pointer. */
tops_status tops__cuda_matmul2d(const tops_exec *exec, const tops_matmul2d_desc *desc, const tops_tensor *left,
                                const tops_tensor *right, tops_tensor *dest);
/* tops_matmul2d_path with exec->device = cuda:N: the same checks as the
   call (a plain right is packed to name its kernel, then freed). */
tops_status tops__cuda_matmul2d_path(const tops_exec *exec, const tops_matmul2d_desc *desc, const tops_tensor *left,
                                     const tops_tensor *right, const tops_tensor *dest, char *buf, size_t cap);
tops_status tops__cuda_pack_right(const tops_exec *exec, const tops_matmul2d_desc *desc, const tops_tensor *right,
                                  tops_tensor *packed);
/* Weights [n, k] (a plain tensor in host or device memory, or a GPU pack)
   for a 16-bit GEMM that reads them row-major: dequantized on the device
   into `terms` 16-bit planes of the activations' type (bf16 = 1: bf16)
   whose sum is each weight / unit[n] (matmul.c; tops__cu_dequant_terms).
   Strict: one term where code x scale is exact in it (tops__cu_fold_shift),
   else two f16 terms (within 2^-22 of each weight) or three bf16 ones
   (exact); relaxed: one term, rounded once.  terms = 0: the weights do not
   take this form (16-bit codes, scales or mins that are not finite); then
   nothing is allocated.  tops__cuda_weight_terms_of only
   counts the terms (a plain weight is packed on the host to find out). */
typedef struct tops__cuda_terms {
    int terms;
    void *mem;           /* device workspace on exec->stream (cudaFreeAsync) */
    const uint16_t *w;   /* plane 0: [rows][ldw] */
    int64_t ldw, rows;   /* plane t starts t * rows * ldw elements on */
    const float *unit;   /* [n] */
    float global;        /* multiplies every product (the pack's tensor factor) */
} tops__cuda_terms;
tops_status tops__cuda_weight_terms(const char *fn, const tops_exec *exec, const tops_tensor *right, int relaxed,
                                    int bf16, tops__cuda_terms *out);
tops_status tops__cuda_weight_terms_of(const char *fn, const tops_tensor *right, int relaxed, int bf16, int *terms);
/* True if t is a packed tensor made by tops__cuda_pack_right. */
int tops__cuda_is_packed(const tops_tensor *t);
/* A second device copy of a GPU-packed tensor (the bench rotates copies),
   and the bytes one copy streams. */
tops_status tops__cuda_packed_clone(const tops_tensor *src, tops_tensor *out);
size_t tops__cuda_packed_bytes(const tops_tensor *t);
/* Frees what a cuda:N tensor owns (tops_tensor_destroy calls this). */
void tops__cuda_tensor_release(tops_tensor *t);

/* ---- tuning: one table (tune.c), a few debug overrides -------------------- */

/* The knobs of the GEMM plan and its launchers, of attention and of
   conv2d.  Their settled values are the table in tune.c (tuning[]); the
   ones marked there as debug keys can be overridden for a test or an A/B
   run through TOPS_CUDA_DEBUG ("key=value,key=value", docs/cuda.md), which
   tune.c alone reads. */
enum {
    /* M thresholds of the plan (settled, no override) */
    TOPS__CU_T_FP8_MIN_M,
    TOPS__CU_T_H16_MIN_M,
    TOPS__CU_T_Q8_MIN_M,
    TOPS__CU_T_FOLD_MIN_M,
    TOPS__CU_T_S4_MIN_M,
    TOPS__CU_T_S4_SMALL_GROUP_MIN_M,
    TOPS__CU_T_S8_MIN_M,
    TOPS__CU_T_WIDE_MIN_M,
    TOPS__CU_T_DEQUANT_MIN_M,
    TOPS__CU_T_DEQUANT_RELAXED_MIN_M,
    TOPS__CU_T_E4M3_ONCE_MIN_M,
    TOPS__CU_T_RESCALED8_MIN_M,
    TOPS__CU_T_RESCALED4_MIN_M,
    TOPS__CU_T_RESCALED4W_MIN_M,
    /* settled launcher choices (no override) */
    TOPS__CU_T_WARPS_PER_SM,
    TOPS__CU_T_WGMMA_STRICT,
    /* GEMM debug keys */
    TOPS__CU_T_KERNEL, /* TOPS__CU_KERNEL_*: force that family where it applies */
    TOPS__CU_T_PDL,
    TOPS__CU_T_FOLD,
    TOPS__CU_T_BULK_RING,
    TOPS__CU_T_BULK_LOOK,
    TOPS__CU_T_BULK_SPLITS,
    TOPS__CU_T_BULK_XT,
    TOPS__CU_T_BULK_XT3,
    TOPS__CU_T_BULK_XR,
    TOPS__CU_T_BULK_TG,
    TOPS__CU_T_BULK_SCD,
    TOPS__CU_T_BULK_ISSUE,
    TOPS__CU_T_BULK_ARRIVE,
    TOPS__CU_T_WGMMA_SPLITS,
    TOPS__CU_T_WGMMA_TN,
    TOPS__CU_T_WGMMA_CW,
    TOPS__CU_T_WGMMA_PERMUTE,
    TOPS__CU_T_FP8_CTAS,
    TOPS__CU_T_FP8_CLUSTER,
    TOPS__CU_T_FP8_SK,
    TOPS__CU_T_FP8_LAG,
    TOPS__CU_T_FP8_PERSIST,
    TOPS__CU_T_FP8_BN,
    TOPS__CU_T_FP8_QUANT,
    TOPS__CU_T_QUANT_ROWS,
    TOPS__CU_T_Q8_TN,
    TOPS__CU_T_Q8_LOOK,
    TOPS__CU_T_Q8_SPLIT,
    TOPS__CU_T_Q8_ROW,
    TOPS__CU_T_Q8_PAIRS,
    TOPS__CU_T_DEQUANT_ROWS,
    TOPS__CU_T_E4M3_ONCE,
    TOPS__CU_T_RESCALED,
    TOPS__CU_T_FACTORED,
    /* attention debug keys */
    TOPS__CU_T_ATTN_QSPLIT,
    TOPS__CU_T_ATTN_PAIRS,
    TOPS__CU_T_ATTN_PERSIST,
    TOPS__CU_T_ATTN_TAIL,
    TOPS__CU_T_ATTN_PIPE,
    TOPS__CU_T_ATTN_DECODE,
    TOPS__CU_T_ATTN_SPLITS,
    TOPS__CU_T_ATTN_TMA,
    TOPS__CU_T_ATTN_DEPTH,
    TOPS__CU_T_ATTN_RING,
    /* conv2d debug keys */
    TOPS__CU_T_CONV_PATH, /* TOPS__CU_CONV_* */
    TOPS__CU_T_CONV_BN,
    TOPS__CU_T_CONV_SPLITS,
    TOPS__CU_T_CONV_L1,
    TOPS__CU_T_CONV_TMA,
    TOPS__CU_T_CONV_TR,
    TOPS__CU_T_CONV_PN,
    TOPS__CU_T_CONV_DIRECT,
    TOPS__CU_T_COUNT
};
/* Values of TOPS__CU_T_KERNEL (debug key kernel=wbulk|wstream|wgmma|q8|fp8|h16). */
enum {
    TOPS__CU_KERNEL_AUTO = 0,
    TOPS__CU_KERNEL_WBULK,
    TOPS__CU_KERNEL_WSTREAM,
    TOPS__CU_KERNEL_WGMMA,
    TOPS__CU_KERNEL_Q8,
    TOPS__CU_KERNEL_FP8,
    TOPS__CU_KERNEL_H16
};
/* Values of TOPS__CU_T_CONV_PATH (debug key conv_path=auto|mma|im2col):
   mma keeps the wgmma kernels off, im2col sends every format through
   im2col + the GPU matmul. */
enum { TOPS__CU_CONV_AUTO = 0, TOPS__CU_CONV_MMA, TOPS__CU_CONV_IM2COL };
/* A table value meaning "the launcher's own rule" (tops__cu_tune_or). */
#define TOPS__CU_RULE LLONG_MIN
/* The knob's value: TOPS_CUDA_DEBUG's override where it sets this debug
   key, else the table's value.  For knobs whose table entry is "the
   launcher's rule", tops__cu_tune_or returns `rule` unless overridden.  An
   item with an unknown key or a value its key does not take is ignored
   here: tops__cu_debug_check refuses it first. */
long long tops__cu_tune(int knob);
long long tops__cu_tune_or(int knob, long long rule);
/* TOPS_OK, or TOPS_INVALID_ARGUMENT (for fn) with a sentence naming the
   first TOPS_CUDA_DEBUG item that is not a debug key with a value it takes.
   Each GPU entry point (matmul, attention, conv2d) calls it first: a typo
   never silently runs the defaults. */
tops_status tops__cu_debug_check(const char *fn);

/* ---- the kernels' contract --------------------------------------------------- */

/* Weight element codes as the kernels decode them (one kernel family each). */
enum {
    TOPS__CU_CODE_U4 = 0,   /* 4-bit integer, stored as q + 8 */
    TOPS__CU_CODE_E2M1 = 1, /* 4-bit float (mxfp4, nvfp4) */
    TOPS__CU_CODE_I8 = 2,   /* 8-bit integer, stored as q ^ 0x80 */
    TOPS__CU_CODE_E4M3 = 3, /* 8-bit float */
    TOPS__CU_CODE_F16 = 4,  /* plain 16-bit weights, same type as the activations */
    TOPS__CU_CODE_BF16 = 5,
    TOPS__CU_CODE_COUNT
};
/* Scale plane encodings kept from the source format (fewer bytes to stream). */
enum { TOPS__CU_SCALE_F32 = 0, TOPS__CU_SCALE_F16 = 1, TOPS__CU_SCALE_E8M0 = 2, TOPS__CU_SCALE_UE4M3 = 3 };

/*
 * Packed weight layout (one 16-row tile of N at a time):
 *   weights[tile][chunk][lane 0..31][16 bytes]: a chunk spans
 *   tops__cu_chunk_k(code) elements of K; lane (g = lane / 4, t = lane % 4)
 *   holds rows g and g + 8 of the tile at the K offsets its mma.sync
 *   fragments need, in the bit order its decoder reads (pack.c).
 *   scales[tile][group][16]: entry 2 * g + h is row g + 8 * h.
 * N is padded to 64 rows and K to 64 elements with zero codes.
 */
static inline int tops__cu_chunk_k(int code) {
    return code <= TOPS__CU_CODE_E2M1 ? 64 : code <= TOPS__CU_CODE_E4M3 ? 32 : 16;
}
static inline int tops__cu_scale_bytes(int kind) {
    return kind == TOPS__CU_SCALE_F32 ? 4 : kind == TOPS__CU_SCALE_F16 ? 2 : 1;
}
#define TOPS__CU_PAD_N 64
#define TOPS__CU_PAD_K 64

typedef struct tops__cuda_packed {
    uint32_t magic;
    int device;
    int code;          /* TOPS__CU_CODE_* */
    int scale_kind;    /* TOPS__CU_SCALE_* */
    int has_scales;    /* 0 for plain weights */
    int per_row;       /* one scale entry per row (or none) */
    int32_t group;     /* K elements per scale entry (k_pad when per row) */
    int64_t n, k;      /* logical extents */
    int64_t n_pad, k_pad;
    int64_t groups;    /* scale entries per row */
    float global_scale; /* multiplies every product (tensor scale, nvfp4's 1 / S_enc) */
    tops_format source; /* the format it was packed from */
    void *weights;     /* device */
    void *scales;      /* device; NULL when has_scales = 0 */
    /* Formats with mins (the traits row's pack rule has an offset: q4_K,
       q5_K, q4_1): element = code x scale + bias, one f32 bias per row and
       group, [n][groups] (device; NULL otherwise); the call adds
       global_scale x sum_g bias x (the activations' sum over group g). */
    void *biases;
    size_t weight_bytes, scale_bytes, bias_bytes;
    /* Row-major layout for fp8_gemm.cu's TMA GEMM on a compute capability
       9.0 device, NULL otherwise: e4m3-ch / e4m3 packed with
       relaxed_precision = 1 (the e4m3 codes [n, k_pad] and the f32 channel
       scales [n], NULL for plain e4m3), or f16 / bf16 weights in either
       mode (the 16-bit values [n, k_pad]), in the same allocation. */
    void *fp8_weights, *fp8_scales;
    size_t fp8_bytes;  /* both, as allocated */
    /* The scale entries' range, scanned at pack time (tops__cu_fold_shift
       decides from it whether code x scale fits the activations' type):
       largest and smallest nonzero magnitude, and whether any is NaN / inf. */
    double scale_absmax, scale_absmin;
    int scale_nonfinite;
    /* The same for the biases (formats with mins; 0 without). */
    double bias_absmax;
    int bias_nonfinite;
    /* Relaxed 4-bit layout for FP8 tensor cores (wgmma_q8.cu; int4-gG with
       G a multiple of 128, or mxfp4 where every 128-K chunk is exact in e4m3,
       packed with relaxed_precision = 1 for a compute capability 9.0
       device): NULL otherwise.  See tops__cuda_pack_q8_host. */
    void *q8_weights;
    size_t q8_bytes;
    int q8_row_factor; /* mxfp4: every chunk of a row has the row's factor (each row fits 15 binades) */
    /* Factored sub-block scales (super-blocks with integer sub-scales:
       q4_K, q5_K): where every super-block's sub-block scales are D x m_i
       with D an f32 and m_i integers small enough that code x m_i is an
       exact f16 (|code x m_i| <= 2048), the scales buffer also holds, at
       fac_d_off, D as f32 entries in groups of fac_group (the super-block,
       fac_groups a row, the scale plane's [tile][group][16] order) and, at
       fac_m_off, m_i as f16 entries per sub-block (`group`, `groups` of
       them, the same order).  fac_groups = 0: not factored.  The strict
       kernels multiply the decoded codes by m_i (exact, f16 activations)
       and scale each super-block's sums by D: 8x fewer scale groups. */
    int32_t fac_group;
    int64_t fac_groups;
    size_t fac_d_off, fac_m_off;
    /* Channel units of the dequantized layouts (dequant.cu; integer, e2m1
       and e4m3 codes, NULL for 16-bit weights): f32 [2][n_pad], inv_n =
       2^-e_n then unit_n = 2^e_n, 2^e_n the power of two that brings the
       channel's max_g (|scale_g| x the family's largest |code| + |bias_g|),
       over the pack's groups in f32 (fmaf), into [2^14, 2^15) (e_n within
       [-120, 120]; 1 where every scale and bias is 0).  tops__cuda_pack_units. */
    void *units;
    size_t unit_bytes;
} tops__cuda_packed;
#define TOPS__CUDA_PACKED_MAGIC 0x43555041u /* "CUPA" */

/* Packs host weights [n, k] (rows along N, blocks along K) into host
   buffers laid out as above, by the pack rule of the format's traits row
   (core/gpuform.h); fills *pk (device pointers left NULL) and returns
   malloc'd weights / scales / biases (NULL where none) that the caller
   frees.  Returns TOPS_UNSUPPORTED_FORMAT for formats whose row has no
   rule. */
tops_status tops__cuda_pack_host(const char *fn, const tops_tensor *right, int transpose_right,
                                 tops__cuda_packed *pk, void **weights, void **scales, void **biases);
/* The channel units (tops__cuda_packed.units) of a host pack: a malloc'd
   [2][n_pad] f32 buffer (*bytes its size), or NULL for 16-bit codes (and
   with *bytes = 0) or when out of memory (*bytes set). */
float *tops__cuda_pack_units(const tops__cuda_packed *pk, const void *scales, const float *biases, size_t *bytes);
/* Whether *pk (packed by tops__cuda_pack_host) also takes the row-major
   layout of the TMA GEMM on a compute capability 9.0 device: f16 / bf16
   weights, e4m3 codes with one scale a row or none. */
int tops__cu_rowmajor_layout(const tops__cuda_packed *pk);

/* Whether the wgmma kernel can fold the scales of *pk into its weights for
   bf16 (1) or f16 (0) activations in this precision mode: 0 no, else the
   weight terms a product takes (1, or 2: strict f16 scales split exactly);
   *shift is the power of two the epilogue multiplies back (pack.c says
   when it holds). */
int tops__cu_fold_shift(const tops__cuda_packed *pk, int bf16, int relaxed, int *shift);

/* One launch of the weight-streaming matmul. */
typedef struct tops__cu_matmul_args {
    const void *weights, *scales;
    int code, scale_kind, has_scales;
    int32_t group;
    int64_t groups, n_pad, k_pad;
    float global_scale;
    const void *x;     /* activations [m, k], row stride ldx elements */
    int x_bf16;
    int64_t ldx;
    void *out;         /* [m, n], row stride ldo elements */
    tops_dtype out_dtype;
    int64_t ldo;
    int accumulate;
    int64_t m, n, k;
    void *stream;
    /* wgmma_w.cu only: fold = 1 forms w = code x scale in the activations'
       type, fold = 2 the two exact terms of strict f16 scales
       (tops__cu_fold_shift), 2^fold_shift moved to the epilogue. */
    int fold, fold_shift;
    /* wgmma_q8.cu only: the q8 layout has one factor per row (mxfp4). */
    int q8_row_factor;
    /* Relaxed dequantization only (tops__cu_dequant_relaxed_gemm): the
       pack's biases [n][groups] folded into the weights (NULL: none). */
    const float *biases;
    /* The pack's channel units (tops__cuda_packed.units; NULL: none). */
    const float *units;
    /* Factored sub-block scales (the pack's fac_* view: scales are then D in
       groups of `group`): f16 multipliers per mult_group of K, the scale
       plane's order (NULL: none).  wgmma_w.cu's strict 4-bit pipeline and
       dequant.cu's rescaled groups only, f16 activations. */
    const void *mults;
    int32_t mult_group;
} tops__cu_matmul_args;

/* Launches the kernels (asynchronous); returns a cudaError_t value (0 = ok)
   and, on failure, a short description in *what. */
int tops__cu_matmul_launch(const tops__cu_matmul_args *a, const char **what);
/* The strict wgmma kernel (wgmma_w.cu) for medium and large M on compute
   capability 9.0; returns cudaErrorNotSupported, launching nothing, where
   it does not apply (other parts, activation rows TMA cannot read). */
int tops__cu_wgmma_launch(const tops__cu_matmul_args *a, const char **what);
/* The kernel the calling thread's last launch used (the bench labels rows with it). */
const char *tops__cu_last_kernel(void);

/* Host copy of the row-major layout (fp8_weights above) of weights [n, k]
   already packed into *pk: e4m3 codes [n, k_pad], then (e4m3-ch) f32
   channel scales [n] at *scale_offset, for e4m3-ch or e4m3 weights; the
   16-bit values [n, k_pad] for f16 or bf16 weights (transposed where
   transpose_right = 0); a malloc'd buffer of *bytes bytes.  NULL when out
   of memory or for any other format. */
void *tops__cuda_pack_fp8_host(const tops_tensor *right, int transpose_right, const tops__cuda_packed *pk,
                               size_t *bytes, size_t *scale_offset);

/*
 * Relaxed 4-bit layout for the FP8 tensor cores (wgmma_q8.cu): the weights
 * decode EXACTLY to e4m3 in registers, in wgmma's 8-bit register A layout.
 * N is padded to 128 channels (a CTA's block cb), K to 128 (a chunk c: one
 * scale factor per channel).  Record (cb, c) at ((cb * chunks + c) * rec):
 *   bytes 0..8191: tile tl (0..7, 16 channels), k64 half h, lane (g = lane / 4,
 *     t = lane % 4), 16 bytes at tl * 1024 + h * 512 + lane * 16: word j
 *     (0..3) holds 8 weights of k32 step s = 2 h + j / 2, p = j % 2: weight q
 *     (0..7) is channel 16 tl + g + 8 (q / 4) at K 32 s + 16 p + 4 t + q % 4
 *     (registers 2 p and 2 p + 1 of the step's A fragment).
 *     int4: weight q's value v + 1/2 in the e2m1 bit positions below: its
 *     sign, and its magnitude index i (|v + 1/2| = i + 1/2, i in 0..7) read
 *     through the fixed table TOPS__CU_Q8_HALF_T* (e4m3 of 0.5 .. 7.5, exact;
 *     -8..7 has 9 magnitudes, v + 1/2 eight).  The half is taken back at the
 *     end: see the factor plane below.
 *     e2m1: bits 4q..4q+2 = the magnitude index, the sign of weight q < 4 at
 *     bit 8q + 7, of weight q >= 4 at bit 8(q - 4) + 3 (decode: one byte
 *     permute of a table per 4 weights, the signs ORed in).
 *   8192 + 4 ch: f32 factor of channel ch (0..127) for the chunk: the int4
 *     group scale, or 2^(cmax - 133) for e2m1 (cmax: the chunk's largest
 *     block exponent among blocks with nonzero codes; where every row's
 *     blocks with nonzero codes fit 15 binades, the row's largest, the same
 *     in every chunk: pk->q8_row_factor = 1, the kernel applies it once).
 *   e2m1 only, 8704 + 4 ch: byte b = 8 d, the byte offset of table d (8
 *     bytes each) for k32 block b: the block's codes read as
 *     e4m3(e2m1 x 2^(d - 8)), d = e - cmax + 14 in 0..14.
 * int4 only, after the records: the factor plane, the chunk factors as f16
 * (the layout exists only where every one is exactly an f16) in the A
 * fragments of wgmma m64nNk16 f16, for the end's correction
 * sum_c factor_c x (-S_c / 2) (S_c: a token's e4m3 activations summed over
 * chunk c, from the quantizer).  Per block cb and 32-chunk block b, 8192
 * bytes at (cb x sblocks + b) x 8192 (sblocks = ceil(chunks / 32)): tile tl,
 * k16 half kb (chunks 32 b + 16 kb ..), lane (g, t) 16 bytes at
 * ((tl x 2 + kb) x 32 + lane) x 16: registers {rows g, g + 8} x {chunks 2t,
 * 2t + 1} then the same at chunks + 8 (f16 pairs, the lower chunk low;
 * zero past the last chunk).
 */
#define TOPS__CU_Q8_CHUNK_K 128
#define TOPS__CU_Q8_CH 128
#define TOPS__CU_Q8_WBYTES 8192
#define TOPS__CU_Q8_SBLOCK 32    /* chunks per block of the int4 correction */
#define TOPS__CU_Q8_FBYTES 8192  /* factor-plane bytes per (cb, block) */
/* e4m3 of 0.5, 1.5, .., 7.5: the int4 magnitudes |v + 1/2|, 4 per word */
#define TOPS__CU_Q8_HALF_T0 0x46423C30u
#define TOPS__CU_Q8_HALF_T1 0x4F4D4B49u
static inline int tops__cu_q8_rec_bytes(int code) {
    return TOPS__CU_Q8_WBYTES + 4 * TOPS__CU_Q8_CH * (code == TOPS__CU_CODE_E2M1 ? 2 : 1);
}
/* int4: 32-chunk blocks of the correction, and where the factor plane starts. */
static inline int64_t tops__cu_q8_sblocks(int64_t k) {
    return (k + TOPS__CU_Q8_CHUNK_K * TOPS__CU_Q8_SBLOCK - 1) / (TOPS__CU_Q8_CHUNK_K * TOPS__CU_Q8_SBLOCK);
}
static inline size_t tops__cu_q8_fplane_offset(int code, int64_t n, int64_t k) {
    return (size_t)((n + TOPS__CU_Q8_CH - 1) / TOPS__CU_Q8_CH) *
           (size_t)((k + TOPS__CU_Q8_CHUNK_K - 1) / TOPS__CU_Q8_CHUNK_K) * (size_t)tops__cu_q8_rec_bytes(code);
}

/* Host copy of the relaxed 4-bit FP8 layout of right (already packed into
   *pk): a malloc'd buffer of *bytes bytes, or NULL (*oom = 1 when out of
   memory; 0 when the format, a chunk's exponent range (mxfp4) or a factor
   that is not exactly an f16 (int4) does not allow it).
   Sets pk->q8_row_factor. */
void *tops__cuda_pack_q8_host(const tops_tensor *right, tops__cuda_packed *pk, size_t *bytes, int *oom);

/* The relaxed 4-bit FP8 kernel (wgmma_q8.cu): quantizes the activations
   to e4m3 per row (fp8_gemm.cu's quantizer), then the wgmma kernel on the
   q8 layout.  cudaErrorNotSupported, launching nothing, where it does not
   apply (other parts, no tensor-map encoder or memory pools). */
int tops__cu_q8_launch(const tops__cu_matmul_args *a, const void *q8, const char **what);

/* One relaxed FP8 matmul on sm_90a (fp8_gemm.cu): quantizes the activations
   to e4m3 per row, then the wgmma GEMM.  Same return convention. */
typedef struct tops__cu_fp8_args {
    const tops__cu_matmul_args *io; /* activations, output, shapes, mode, stream */
    const void *weights;            /* e4m3 [n, k_pad] */
    const void *ch_scales;          /* f32 [n] or NULL */
    int codes;                      /* tops__cu_h16_launch: weights are e4m3 codes, converted in the kernel (1)
                                       or once into a workspace first (2: the plan's choice at large M) */
} tops__cu_fp8_args;
int tops__cu_fp8_launch(const tops__cu_fp8_args *a, const char **what);
/* Strict f16 / bf16 GEMM on the same TMA machinery (fp8_gemm.cu): the
   activations as they are, the weights row-major [n, k_pad] of their type,
   or (codes = 1) e4m3 codes [n, k_pad] converted to it in shared memory
   (codes = 2: once into a workspace, where memory allows) with f32 channel
   scales (e4m3-ch) in the epilogue.  cudaErrorNotSupported,
   launching nothing, where TMA cannot read the activation rows (16-byte
   aligned rows needed). */
int tops__cu_h16_launch(const tops__cu_fp8_args *a, const char **what);
/* Folded 4-bit weights (io->fold == 1) at large M (dequant.cu): dequantized
   to the activations' 16-bit type in a workspace (exactly where the fold is
   exact), then tops__cu_h16_launch on them.  cudaErrorNotSupported,
   launching nothing, where that GEMM cannot run or memory pools are absent. */
int tops__cu_dequant_gemm(const tops__cu_matmul_args *a, const char **what);
/* Relaxed mode, any code family (4-bit integers, e2m1, 8-bit integers,
   e4m3) with any scale kind and, where a->biases is set, the format's
   biases (mins): each channel's weights (code x scale + bias) / 2^e_n
   rounded once to the activations' 16-bit type in a workspace (2^e_n: the
   channel's largest |weight| brought into [2^14, 2^15)), then
   tops__cu_h16_launch on them with 2^e_n as channel scales.
   cudaErrorNotSupported, launching nothing, where that GEMM cannot run or
   memory pools are absent. */
int tops__cu_dequant_relaxed_gemm(const tops__cu_matmul_args *a, const char **what);
/* conv2d's quantized weights (conv.c through tops__cuda_weight_terms): the
   pack's channels, each (code x scale + bias) / 2^e_n in f32 (2^e_n its
   unit, a->units), as `terms` 16-bit values of the activations' type (f16:
   1 or 2; bf16 (a->x_bf16): 1 or 3) whose sum is it: term 0 its rounding,
   each next one the rounding of what the terms before left.  Term t of
   channel n at out[t * plane + n * ldw + k] (k < k_pad; ldw a multiple of
   4, plane >= n_pad * ldw).  One launch, asynchronous on a->stream. */
int tops__cu_dequant_terms(const tops__cu_matmul_args *a, int terms, uint16_t *out, long long ldw, long long plane,
                           const char **what);
/* Strict integer codes (4- and 8-bit) with f16 / f32 / e8m0 scales in K
   groups of 32 or a multiple of 64, f16 activations, at large M
   (dequant.cu): the codes converted once to f16, the scales to per-group
   ratios, then tops__cu_h16_rescaled_launch; channels whose scales are not
   finite or span more than 2^60 get their sums from a strict per-element
   pass instead.  cudaErrorNotSupported, launching nothing, where it does
   not apply. */
int tops__cu_rescaled_gemm(const tops__cu_matmul_args *a, const char **what);
/* The K groups the rescaled-group GEMM has kernels for: 32 (two a stage) or
   a multiple of 64 (whole stages). */
static inline int tops__cu_rescaled_group_ok(int32_t group) { return group == 32 || (group >= 64 && group % 64 == 0); }
/* The TMA GEMM on f16 integer codes [n, k_pad] (f->weights) whose sums are
   rescaled between K groups: r_g of channel c at ratio[g * ratio_ld + c]
   (ratio_rows rows), the last group's scale as f->ch_scales (fp8_gemm.cu). */
int tops__cu_h16_rescaled_launch(const tops__cu_fp8_args *f, const float *ratio, long long ratio_ld, int ratio_rows,
                                 int group, const char **what);
/* f32 activations for the 16-bit kernels (convert.cu).  Row i of x [m, k]
   (row stride ldx) becomes `terms` rows of out [terms * m, ldo] (f16, or
   bf16 where bf16 = 1; ldo >= k, a multiple of 8, columns k .. ldo - 1
   zeroed): row t * m + i holds term t of x_i * 2^-exps[i], term 0 the
   16-bit rounding of the scaled value, each next term the rounding of what
   the terms before left (0 after a non-finite term).  f16: exps[i] puts the
   row's largest finite magnitude in [2^14, 2^15) (0 for a row without a
   nonzero finite value); bf16: exps[i] = 0 (its range is f32's).
   Asynchronous on stream; returns a cudaError_t value. */
int tops__cu_split_f32(const float *x, int64_t ldx, int64_t m, int64_t k, int terms, int bf16, void *out, int64_t ldo,
                       int *exps, void *stream);
/* out[i, j] = 2^exps[i] x (part[i, j] + part[m + i, j] + ... over `terms`
   rows of part [terms * m, ldp] (f32), summed in that order), plus the old
   out[i, j] where accumulate = 1, rounded once to out_dtype. */
int tops__cu_join_terms(const float *part, int64_t ldp, int64_t m, int64_t n, int terms, const int *exps, void *out,
                        tops_dtype out_dtype, int64_t ldo, int accumulate, void *stream);

/* The bias term of formats with mins (tops__cuda_packed.biases): first
   gsum [m, groups] (f32) = the sums of each row of x [m, k] (f16, bf16 or,
   f32 = 1, f32; row stride ldx) over each group of `group` K elements, in K
   order; then out = part + global_scale x sum_g gsum[i, g] x biases[j, g]
   (g in order), plus the old out where accumulate = 1, rounded once to
   out_dtype.  part [m, n] f32 with row stride ldp.  Asynchronous on
   stream; returns a cudaError_t value. */
typedef struct tops__cu_bias_args {
    const void *x;
    int x_kind; /* 0 f16, 1 bf16, 2 f32 */
    int64_t ldx, m, n, k;
    int32_t group;
    int64_t groups;
    const float *biases;
    float global_scale;
    const float *part;
    int64_t ldp;
    float *gsum; /* workspace [m, groups] */
    void *out;
    tops_dtype out_dtype;
    int64_t ldo;
    int accumulate;
    void *stream;
} tops__cu_bias_args;
int tops__cu_bias_launch(const tops__cu_bias_args *a);

/* Which kernel tops_matmul2d runs for this GPU-packed right at this M and
   precision mode (the bench prints it). */
const char *tops__cuda_matmul_path(const tops_tensor *right, int64_t m, int relaxed);

/* Multiprocessors of cuda:device, or of the current device for device < 0,
   cached per device; 1 when it cannot be asked (grids sized by it stay
   correct, only small).  The one copy the host code and the launchers use. */
int tops__cuda_sm_count(int device);

#ifdef __cplusplus
}
#endif

#endif
