/*
 * tensorops: quantized matmul and fused attention, with the fastest hardware
 * path picked at run time.  The whole public API; prefix tops_.
 *
 * Conventions
 *   - Every function that can fail returns tops_status.  On failure,
 *     tops_last_error() returns a sentence (thread-local) naming the function,
 *     the argument and the rule broken.  Output arguments are left untouched
 *     or, where a partial write is unavoidable, the status says so.
 *   - Extents are in numpy order (outermost first); strides count elements.
 *   - A tensor never owns memory unless made by tops_tensor_create().
 */
#ifndef TENSOROPS_H
#define TENSOROPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TOPS_API
#else
#define TOPS_API __attribute__((visibility("default")))
#endif

#define TOPS_VERSION_MAJOR 0
#define TOPS_VERSION_MINOR 1
#define TOPS_VERSION_PATCH 0
#define TOPS_VERSION_STRING "0.1.0"

TOPS_API const char *tops_version(void);

/* ------------------------------------------------------------------------ */
/* Status                                                                    */
/* ------------------------------------------------------------------------ */

/* X(enum suffix, short name, description) */
#define TOPS_STATUS_LIST(X)                                                    \
    X(OK, "ok", "success")                                                     \
    X(INVALID_ARGUMENT, "invalid_argument", "an argument breaks a rule")       \
    X(SHAPE_MISMATCH, "shape_mismatch", "tensor extents do not agree")         \
    X(UNSUPPORTED_FORMAT, "unsupported_format",                                \
      "the format or combination of formats is not supported")                 \
    X(UNSUPPORTED_ON_DEVICE, "unsupported_on_device",                          \
      "the operation is not available on this device or ISA")                  \
    X(OUT_OF_MEMORY, "out_of_memory", "an allocation failed")                  \
    X(OVERFLOW, "overflow", "a size does not fit in size_t or int64")          \
    X(IO_ERROR, "io_error", "reading or writing a file failed")                \
    X(PARSE_ERROR, "parse_error", "a file or string is malformed")             \
    X(NOT_FOUND, "not_found", "a named item does not exist")                   \
    X(DEVICE_ERROR, "device_error", "the accelerator runtime reported an error") \
    X(INTERNAL, "internal", "an internal invariant failed")

typedef enum tops_status {
#define TOPS_X_(e, s, d) TOPS_##e,
    TOPS_STATUS_LIST(TOPS_X_)
#undef TOPS_X_
    TOPS_STATUS_COUNT_
} tops_status;

/* Short name of a status ("shape_mismatch"); "unknown_status" if out of range. */
TOPS_API const char *tops_status_str(tops_status status);
/* The sentence describing the last failure on this thread ("" if none). */
TOPS_API const char *tops_last_error(void);
/* Clears this thread's last error. */
TOPS_API void tops_clear_error(void);

/* ------------------------------------------------------------------------ */
/* Element types                                                             */
/* ------------------------------------------------------------------------ */

/* X(enum suffix, name, bits) -- see FORMATS.md section 1. */
#define TOPS_DTYPE_LIST(X)                                                     \
    X(F32, "f32", 32)                                                          \
    X(F16, "f16", 16)                                                          \
    X(BF16, "bf16", 16)                                                        \
    X(E4M3, "e4m3", 8)                                                         \
    X(E5M2, "e5m2", 8)                                                         \
    X(E2M3, "e2m3", 6)                                                         \
    X(E3M2, "e3m2", 6)                                                         \
    X(E2M1, "e2m1", 4)                                                         \
    X(E8M0, "e8m0", 8)                                                         \
    X(UE4M3, "ue4m3", 8)                                                       \
    X(MXINT8, "mxint8", 8)                                                     \
    X(I8, "i8", 8)                                                             \
    X(U8, "u8", 8)                                                             \
    X(I4, "i4", 4)                                                             \
    X(U4, "u4", 4)                                                             \
    X(I2, "i2", 2)                                                             \
    X(U2, "u2", 2)                                                             \
    X(I32, "i32", 32)

typedef enum tops_dtype {
    TOPS_DT_NONE = 0, /* absent plane, or "the format's default" */
#define TOPS_X_(e, s, b) TOPS_DT_##e,
    TOPS_DTYPE_LIST(TOPS_X_)
#undef TOPS_X_
    TOPS_DT_COUNT_
} tops_dtype;

TOPS_API const char *tops_dtype_name(tops_dtype dtype);
TOPS_API int tops_dtype_bits(tops_dtype dtype); /* 0 if out of range */
TOPS_API tops_status tops_dtype_from_name(const char *name, tops_dtype *out);

/* ------------------------------------------------------------------------ */
/* Formats: one traits row each (FORMATS.md sections 1, 2 and 4)             */
/* ------------------------------------------------------------------------ */

/*
 * X(enum suffix, name stem, kind)
 *   The name of a parameterised format adds its group and an optional scale
 *   dtype: "int4-g32", "int4-g128:bf16", "int4-g32:e8m0", "int4-g64-affine".
 */
#define TOPS_FORMAT_LIST(X)                                                    \
    /* plain element formats: data plane only, optional tensor_scale */        \
    X(F32, "f32")                                                              \
    X(F16, "f16")                                                              \
    X(BF16, "bf16")                                                            \
    X(E4M3, "e4m3")                                                            \
    X(E5M2, "e5m2")                                                            \
    X(E2M3, "e2m3")                                                            \
    X(E3M2, "e3m2")                                                            \
    X(E2M1, "e2m1")                                                            \
    X(I8, "i8")                                                                \
    X(U8, "u8")                                                                \
    X(I4, "i4")                                                                \
    X(U4, "u4")                                                                \
    X(I2, "i2")                                                                \
    X(U2, "u2")                                                                \
    /* OCP MX: 32-element blocks, e8m0 scales */                               \
    X(MXFP8, "mxfp8")                                                          \
    X(MXFP8_E5M2, "mxfp8-e5m2")                                                \
    X(MXFP6, "mxfp6")                                                          \
    X(MXFP6_E3M2, "mxfp6-e3m2")                                                \
    X(MXFP4, "mxfp4")                                                          \
    X(MXINT8, "mxint8")                                                        \
    /* NVIDIA: 16-element blocks, ue4m3 scales, one f32 tensor scale */        \
    X(NVFP4, "nvfp4")                                                          \
    /* symmetric integer groups: int8-gG, int4-gG, int2-gG (scale f16 by       \
       default; bf16, f32 or e8m0 with a ":dtype" suffix) */                   \
    X(INT8_G, "int8-g")                                                        \
    X(INT4_G, "int4-g")                                                        \
    X(INT2_G, "int2-g")                                                        \
    /* affine u4 groups, f16 scale and f16 bias per group: int4-gG-affine */   \
    X(INT4_G_AFFINE, "int4-g*-affine")                                         \
    /* 4-bit indices into a 16-entry f16 codebook, per tensor or per row */    \
    X(LUT4, "lut4")                                                            \
    X(LUT4_ROW, "lut4-row")                                                    \
    /* fp8 with one f32 scale per output channel (row) */                      \
    X(E4M3_CH, "e4m3-ch")                                                      \
    X(E5M2_CH, "e5m2-ch")                                                      \
    /* GGUF blocks, byte-exact with ggml (FORMATS.md section 4) */             \
    X(Q4_0, "q4_0")                                                            \
    X(Q4_1, "q4_1")                                                            \
    X(Q8_0, "q8_0")                                                            \
    X(GGUF_MXFP4, "gguf-mxfp4")                                                \
    /* GGUF super-blocks of 256 (k-quants, iq4_xs) and iq4_nl's blocks of 32 */ \
    X(Q4_K, "q4_K")                                                            \
    X(Q5_K, "q5_K")                                                            \
    X(Q6_K, "q6_K")                                                            \
    X(IQ4_NL, "iq4_nl")                                                        \
    X(IQ4_XS, "iq4_xs")                                                        \
    /* opaque, made by tops_pack_right() */                                    \
    X(PACKED, "packed")

typedef enum tops_format_id {
#define TOPS_X_(e, s) TOPS_FMT_##e,
    TOPS_FORMAT_LIST(TOPS_X_)
#undef TOPS_X_
    TOPS_FMT_COUNT_
} tops_format_id;

/* A format: a traits row plus its parameters. */
typedef struct tops_format {
    tops_format_id id;
    int32_t group;     /* elements per block along K; 0 = the row's default */
    tops_dtype scale;  /* dtype of the scale plane; TOPS_DT_NONE = the default */
} tops_format;

/* Constant facts about a format (one row of the traits table). */
typedef struct tops_format_info {
    const char *name;       /* stem, e.g. "int4-g" or "mxfp4" */
    tops_dtype element;     /* dtype of each data-plane element (u8 for GGUF) */
    int element_bits;       /* bits of one element code */
    int32_t block;          /* default elements per block (1 = no blocks, -1 = whole row) */
    int32_t block_min, block_max; /* accepted group sizes (powers of two) */
    int32_t pack_elems;     /* elements per storage unit of the data plane */
    int32_t pack_bytes;     /* bytes per storage unit */
    tops_dtype scale_default; /* scale-plane dtype (TOPS_DT_NONE if none) */
    uint32_t scale_allowed; /* bitmask of (1u << tops_dtype) accepted as scale */
    int has_bias;           /* a bias plane (same blocks as scales) */
    int codebook;           /* 0 none, 1 one per tensor, 2 one per row; 16 f16 entries */
    int has_tensor_scale;   /* a meaningful per-tensor f32 scale (nvfp4) */
    int gguf;               /* self-contained GGUF blocks in the data plane */
    int gguf_type;          /* ggml's type id of the blocks (GGUF files), -1 if none */
    int32_t sub_block;      /* elements per scale inside a GGUF block (q6_K 16, q4_K 32);
                               0: one scale per block */
} tops_format_info;

/* Format name: "int4-g32", "int4-g32:e8m0", "mxfp4", "q4_0". Writes at most
   cap bytes (NUL included) into buf and returns buf; "?" for a bad format. */
TOPS_API const char *tops_format_name(tops_format format, char *buf, size_t cap);
/* Parses a format name; the inverse of tops_format_name(). */
TOPS_API tops_status tops_format_from_name(const char *name, tops_format *out);
/* The traits row of a format id, or NULL if out of range. */
TOPS_API const tops_format_info *tops_format_get_info(tops_format_id id);
/* Checks a format's parameters; fills defaults (group 0, scale) in *resolved. */
TOPS_API tops_status tops_format_resolve(tops_format format, tops_format *resolved);
/* Plain element format of a dtype: tops_format_of(TOPS_DT_F16). */
TOPS_API tops_format tops_format_of(tops_dtype dtype);
/* Average storage bits per weight for rows of k elements (data + planes). */
TOPS_API double tops_format_bits_per_weight(tops_format format, int64_t k);

/* ------------------------------------------------------------------------ */
/* Execution context and devices                                             */
/* ------------------------------------------------------------------------ */

typedef enum tops_device_kind { TOPS_DEVICE_CPU = 0, TOPS_DEVICE_CUDA = 1 } tops_device_kind;

typedef struct tops_device {
    tops_device_kind kind;
    int index; /* cuda:N; 0 for the CPU */
} tops_device;

typedef struct tops_exec {
    int threads;        /* worker threads; default tops_exec_default_threads() */
    tops_device device; /* where ops run; default the CPU */
    int deterministic;  /* same bits for any thread count */
    void *stream;       /* cudaStream_t when device is CUDA; NULL = default */
    void *scratch;      /* optional caller-owned scratch memory */
    size_t scratch_bytes;
} tops_exec;

TOPS_API tops_exec tops_exec_default(void);
/* The default exec.threads, decided once per process: OMP_NUM_THREADS (a
   positive integer, the first element of a list) if set, else the smaller
   of the CPUs in the affinity mask and the cgroup CPU quota (rounded up).
   A caller's exec.threads overrides both.  `why` (if not NULL) gets a
   sentence naming what decided it.  Calls too small to gain from threads
   run on the calling thread whatever the count. */
TOPS_API int tops_exec_default_threads(char *why, size_t cap);
TOPS_API tops_status tops_exec_validate(const tops_exec *exec);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

#define TOPS_MAX_RANK 4

/* Memory space of a tensor's planes. */
typedef tops_device tops_memory;

/*
 * An auxiliary plane.  Scale and bias planes hold one entry per block of
 * block[d] data elements along each dimension d (for example block =
 * {1, 32}: 32 consecutive elements of a row share an entry); their extents
 * are ceil(extent[d] / block[d]).  A codebook plane holds 16 f16 entries per
 * tensor or per row.
 */
typedef struct tops_plane {
    void *data;                      /* NULL = the plane is absent */
    tops_dtype dtype;                /* NONE = the format's default */
    int64_t block[TOPS_MAX_RANK];    /* all 0 = the format's default */
    int64_t extent[TOPS_MAX_RANK];   /* derived; filled by tops_tensor_view */
    int64_t stride[TOPS_MAX_RANK];   /* entries; all 0 = contiguous */
} tops_plane;

/* What a caller describes to tops_tensor_view(). */
typedef struct tops_tensor_desc {
    tops_format format;
    int rank;                        /* 1..4 */
    int64_t extent[TOPS_MAX_RANK];
    int64_t stride[TOPS_MAX_RANK];   /* elements; all 0 = contiguous */
    void *data;
    size_t data_bytes;               /* capacity from data on; 0 = unchecked */
    tops_plane scales;
    tops_plane bias;
    tops_plane codebook;
    float tensor_scale;              /* per-tensor scale; 0 is read as 1 */
    tops_memory memory;              /* default host */
} tops_tensor_desc;

/*
 * A validated tensor.  Made only by tops_tensor_view(), tops_tensor_create()
 * or tops_tensor_slice(); read its fields freely, change them never.
 * tensor_scale: for nvfp4 the encode scale S_enc (decoded = q * s_b /
 * S_enc, FORMATS.md section 2); for every other format a multiplier on each
 * decoded value.
 */
typedef struct tops_tensor {
    uint32_t magic;
    tops_format format;              /* resolved: group and scale filled */
    int rank;
    int64_t extent[TOPS_MAX_RANK];
    int64_t stride[TOPS_MAX_RANK];
    void *data;
    tops_plane scales;
    tops_plane bias;
    tops_plane codebook;
    float tensor_scale;
    tops_memory memory;
    void *owner_;                    /* allocation owned by create(); internal */
    const void *packed_;             /* pack descriptor; internal */
} tops_tensor;

/* Wraps caller memory after checking every rule (extents >= 1, no size_t
   overflow, strides that land on whole bytes, planes that match the blocks,
   no NULL planes the format needs). */
TOPS_API tops_status tops_tensor_view(const tops_tensor_desc *desc, tops_tensor *out);

/* Allocates a contiguous tensor (and every plane its format needs), 64-byte
   aligned and zero-filled. */
TOPS_API tops_status tops_tensor_create(tops_format format, int rank, const int64_t *extent,
                                        tops_memory memory, tops_tensor *out);
/* Frees what tops_tensor_create() allocated; a view or slice is left alone. */
TOPS_API void tops_tensor_destroy(tops_tensor *tensor);

/* Slices every plane together: out covers [start[d], stop[d]) of each
   dimension.  Along a blocked dimension start must be a block boundary and
   stop a block boundary or the tensor's end. The slice borrows memory. */
TOPS_API tops_status tops_tensor_slice(const tops_tensor *tensor, const int64_t *start,
                                       const int64_t *stop, tops_tensor *out);

/* Number of elements, and the bytes the data plane spans (first to last
   byte touched, plus one). */
TOPS_API int64_t tops_tensor_numel(const tops_tensor *tensor);
TOPS_API tops_status tops_tensor_data_span(const tops_tensor *tensor, size_t *bytes);

/* ------------------------------------------------------------------------ */
/* CPU features and dispatch                                                 */
/* ------------------------------------------------------------------------ */

/* X(enum suffix, name) */
#define TOPS_CPU_FEATURE_LIST(X)                                               \
    X(SSE42, "sse4.2")                                                         \
    X(AVX, "avx")                                                              \
    X(AVX2, "avx2")                                                            \
    X(FMA, "fma")                                                              \
    X(F16C, "f16c")                                                            \
    X(BMI2, "bmi2")                                                            \
    X(AVX512F, "avx512f")                                                      \
    X(AVX512BW, "avx512bw")                                                    \
    X(AVX512VL, "avx512vl")                                                    \
    X(AVX512DQ, "avx512dq")                                                    \
    X(AVX512_VBMI, "avx512vbmi")                                               \
    X(AVX512_VNNI, "avx512_vnni")                                              \
    X(AVX512_BF16, "avx512_bf16")                                              \
    X(AVX512_FP16, "avx512_fp16")                                              \
    X(AVX_VNNI, "avx_vnni")                                                    \
    X(AMX_TILE, "amx_tile")                                                    \
    X(AMX_INT8, "amx_int8")                                                    \
    X(AMX_BF16, "amx_bf16")                                                    \
    X(NEON, "neon")                                                            \
    X(DOTPROD, "dotprod")                                                      \
    X(I8MM, "i8mm")                                                            \
    X(ARM_BF16, "bf16")                                                        \
    X(SVE, "sve")                                                              \
    X(SVE2, "sve2")

typedef enum tops_cpu_feature {
#define TOPS_X_(e, s) TOPS_CPU_##e,
    TOPS_CPU_FEATURE_LIST(TOPS_X_)
#undef TOPS_X_
    TOPS_CPU_FEATURE_COUNT_
} tops_cpu_feature;

/* Kernel levels, lowest first.  X(enum suffix, name).  A level is listed
   only where kernels for it exist; amx is available only in builds with the
   AMX tile kernels (TOPS_HAVE_AMX_KERNELS).  NEON levels come back with NEON
   kernels (the aarch64 features are detected already). */
#define TOPS_ISA_LIST(X)                                                       \
    X(REF, "ref")                                                              \
    X(AVX2, "avx2")                                                            \
    X(AVX512, "avx512")                                                        \
    X(AVX512_VNNI, "avx512_vnni")                                              \
    X(AMX, "amx")

typedef enum tops_isa {
#define TOPS_X_(e, s) TOPS_ISA_##e,
    TOPS_ISA_LIST(TOPS_X_)
#undef TOPS_X_
    TOPS_ISA_COUNT_
} tops_isa;

TOPS_API const char *tops_cpu_feature_name(tops_cpu_feature feature);
TOPS_API const char *tops_isa_name(tops_isa isa);
TOPS_API tops_status tops_isa_from_name(const char *name, tops_isa *out);

typedef struct tops_cpu_info {
    char arch[16];                 /* "x86_64", "aarch64", ... */
    char vendor[16];
    char model[64];
    int cores_online;
    int cores_configured;
    uint8_t has[TOPS_CPU_FEATURE_COUNT_];  /* 1 = usable (CPU and OS agree) */
    int amx_permission;            /* Linux granted the AMX tile state */
    int64_t cache_bytes[4];        /* L1d, L2, L3 (per the OS); 0 = unknown; [3] unused */
    tops_isa isa_best;             /* the best level this machine supports */
    tops_isa isa;                  /* the level in use (TOPS_ISA may lower it) */
    int isa_forced;                /* 1 if TOPS_ISA chose it */
    char isa_reason[160];          /* why that level */
    uint8_t isa_available[TOPS_ISA_COUNT_]; /* levels this machine can run */
} tops_cpu_info;

/* Detects once (thread-safe) and copies the result.  Returns
   TOPS_INVALID_ARGUMENT with a sentence listing the valid levels if TOPS_ISA
   names an unknown or unavailable level; *out is filled either way. */
TOPS_API tops_status tops_cpu_get_info(tops_cpu_info *out);

/* Build facts: OpenMP and CUDA compiled in. */
typedef struct tops_build_info {
    int openmp;
    int cuda;
    const char *compiler;
    const char *build_type;
} tops_build_info;
TOPS_API tops_build_info tops_get_build_info(void);

/* ======================================================================== */
/* Element casts, quantizers and decoders (FORMATS.md; src/formats/)         */
/* ======================================================================== */

/* Row casts between f32 and any dtype except none/i32.  Sub-byte codes are
   packed as FORMATS.md section 1 says (a row starts on a byte; n counts
   elements).  Floats round to nearest, ties to even, f32 subnormals
   included (ml_dtypes' default cast where it follows that rule); e8m0 is
   the nearest power of two 2^e (-127 <= e <= 127), ties 1.5 * 2^e to the
   even code, 0 / negatives / NaN / Inf -> 0xFF.  Integers (i8, u8, i4, u4,
   i2, u2) truncate toward zero and wrap modulo 2^bits (i4(9.7) = -7), NaN
   and +-Inf -> 0.  saturate = 1 clamps finite overflow to +-max (NaN stays
   NaN where the type has one; e8m0: 0 and negatives -> 0x00); integers
   then round to nearest even and clamp, NaN -> 0. */
TOPS_API tops_status tops_cast_from_f32(tops_dtype dst, void *out, const float *in, int64_t n,
                                        int saturate);
TOPS_API tops_status tops_cast_to_f32(tops_dtype src, float *out, const void *in, int64_t n);

/* Options of a quantizer; NULL means the defaults of FORMATS.md. */
typedef struct tops_quantize_opts {
    int lut_iterations;  /* k-means iterations for lut4 (0 = default 8) */
    /* 1: a plain element format without scales (e4m3, e5m2, e2m3, e3m2,
       e2m1, i8, u8, i4, u4, i2, u2) gets dst->tensor_scale = amax / (the
       format's largest finite value), amax over the finite inputs (1 when
       that is 0), so the largest weight lands on the largest code instead
       of saturating; the codes are then cast_saturating(x / scale).  0:
       dst->tensor_scale is used as it is.  Other formats ignore it. */
    int scale_from_data;
} tops_quantize_opts;

/* Quantizes src (f32, any rank, blocks along the dimension dst's planes
   say) into dst, a tensor of the same extents in a quantized format (made
   with tops_tensor_create or viewed over caller planes).  Every plane of
   dst is written; for nvfp4 dst->tensor_scale is set (dst is non-const for
   that reason).  A block (lut4: the codebook's row or tensor) holding NaN
   or +-Inf decodes to NaN in every element, through a NaN scale, bias or
   codebook (docs/formats.md, "NaN and Inf"); other blocks are unaffected. */
TOPS_API tops_status tops_quantize(const tops_tensor *src, tops_tensor *dst, const tops_quantize_opts *opts);
/* Decodes src (any format) into dst (f32, f16 or bf16, same extents). */
TOPS_API tops_status tops_dequantize(const tops_tensor *src, tops_tensor *dst);

/* Error of a decoded quantization against its f32 original. */
typedef struct tops_quant_error_stats {
    double rel_l2;   /* ||a - b|| / ||a|| */
    double cos_sim;  /* <a, b> / (||a|| ||b||) */
    double max_abs;  /* max |a - b| */
    double snr_db;   /* 10 log10(||a||^2 / ||a - b||^2) */
} tops_quant_error_stats;
TOPS_API tops_status tops_quant_error(const float *original, const float *decoded, int64_t n,
                                      tops_quant_error_stats *out);

/* ======================================================================== */
/* File I/O: .npy and safetensors (src/io/; layouts in docs/formats.md)      */
/* ======================================================================== */

/*
 * Readers treat their input as untrusted: a malformed or inconsistent file
 * (bad magic or JSON, offsets, sizes, dtypes or shapes that disagree with
 * each other or with the format, overlapping or out-of-file ranges, huge
 * headers) gives TOPS_PARSE_ERROR, a valid file with content tensorops does
 * not read TOPS_UNSUPPORTED_FORMAT, and a failing read or write
 * TOPS_IO_ERROR, each with a sentence; nothing is read outside the input.
 * On success *out is a new tensor (tops_tensor_create; free it with
 * tops_tensor_destroy); on failure *out is untouched.  The _buffer variants
 * parse size bytes at data instead of a file.  Writers take host tensors of
 * any strides and remove the file again if writing fails.
 */

/* A little-endian, C-order .npy file (versions 1.0-3.0) of rank 1..4 holding
   '<f4' (-> an f32 tensor) or '<f2' (-> an f16 tensor). */
TOPS_API tops_status tops_npy_load(const char *path, tops_tensor *out);
TOPS_API tops_status tops_npy_load_buffer(const void *data, size_t size, tops_tensor *out);
/* Writes an f32 ('<f4'), f16 ('<f2') or bf16 tensor as .npy version 1.0;
   numpy has no bf16, so bf16 is written as its '<u2' bit patterns. */
TOPS_API tops_status tops_npy_save(const char *path, const tops_tensor *tensor);

/* One tensor of any format but packed, as the safetensors tensors "weight"
   (the data plane: its element dtype where safetensors has one, else the
   packed bytes as U8), "weight.scales", "weight.biases" and
   "weight.codebook" (where the format has them), with __metadata__
   {"format": name, "shape": "[N, K]", "tensor_scale": "..." (nvfp4, or any
   tensor whose scale is not 1)}. */
TOPS_API tops_status tops_safetensors_save(const char *path, const tops_tensor *tensor);
TOPS_API tops_status tops_safetensors_load(const char *path, tops_tensor *out);
TOPS_API tops_status tops_safetensors_load_buffer(const void *data, size_t size, tops_tensor *out);

/* ======================================================================== */
/* Model files: safetensors and GGUF checkpoints (src/io/model*.c;           */
/* docs/files.md, section 2)                                                 */
/* ======================================================================== */

/*
 * A checkpoint opened read-only and memory-mapped: any safetensors file
 * (any tensors and names, __metadata__ optional) or a GGUF file (versions 2
 * and 3).  The kind is told by the first bytes, never by the name.  Every
 * offset, size, count and string of the file is checked against its size
 * before use (TOPS_PARSE_ERROR with a sentence); nothing is allocated for a
 * count before the bytes it needs are known to be there.  The file must not
 * change while it is open (it is mapped).
 */
typedef struct tops_model tops_model;

typedef enum tops_model_kind { TOPS_MODEL_SAFETENSORS = 1, TOPS_MODEL_GGUF = 2 } tops_model_kind;

#define TOPS_MODEL_MAX_RANK 8

/* One tensor as the file stores it.  Strings live until tops_model_close. */
typedef struct tops_model_tensor_info {
    const char *name;
    const char *dtype;        /* the file's name of its type: "BF16", "F8_E4M3", "Q4_0", "Q4_K" */
    int rank;                 /* 0..TOPS_MODEL_MAX_RANK */
    int64_t shape[TOPS_MODEL_MAX_RANK]; /* elements, numpy order (outermost first; GGUF's ne
                                           reversed); a tensorops tensor's logical shape */
    uint64_t offset;          /* first byte, from the start of the file */
    uint64_t bytes;           /* bytes it spans from offset (a tensorops tensor's other planes
                                 are entries of their own, with plane_of set) */
    const void *data;         /* its first byte in the mapping (read-only; valid until close) */
    int loadable;             /* 1: tops_model_tensor gives a view; 0: it says why not */
    tops_format format;       /* the view's format (when loadable) */
    const char *plane_of;     /* a scale/bias/codebook plane of this tensorops tensor, or NULL */
    int tensorops;            /* 1: stored by tensorops, its format and shape in safetensors metadata */
} tops_model_tensor_info;

/* One metadata entry: a GGUF key/value or a safetensors __metadata__ string.
   Scalars are widened into u, i or f; strings are NUL-terminated copies
   (GGUF strings may hold NUL bytes: string_len counts them). */
typedef enum tops_meta_type {
    TOPS_META_U8 = 0, TOPS_META_I8 = 1, TOPS_META_U16 = 2, TOPS_META_I16 = 3, TOPS_META_U32 = 4,
    TOPS_META_I32 = 5, TOPS_META_F32 = 6, TOPS_META_BOOL = 7, TOPS_META_STRING = 8, TOPS_META_ARRAY = 9,
    TOPS_META_U64 = 10, TOPS_META_I64 = 11, TOPS_META_F64 = 12
} tops_meta_type;   /* the numbers are GGUF's */

typedef struct tops_meta_value {
    tops_meta_type type;
    uint64_t u;               /* U8..U64, BOOL */
    int64_t i;                /* I8..I64 */
    double f;                 /* F32, F64 */
    const char *string;       /* STRING */
    uint64_t string_len;
    tops_meta_type array_type;/* ARRAY: the element type */
    uint64_t array_count;     /* ARRAY: elements (tops_model_meta_item reads them) */
} tops_meta_value;

TOPS_API tops_status tops_model_open(const char *path, tops_model **out);
/* The same over size bytes at data, which must outlive the handle (views
   point into it). */
TOPS_API tops_status tops_model_open_buffer(const void *data, size_t size, tops_model **out);
/* Unmaps the file; views from tops_model_tensor are invalid afterwards. NULL is fine. */
TOPS_API void tops_model_close(tops_model *model);

TOPS_API tops_model_kind tops_model_get_kind(const tops_model *model);
TOPS_API int64_t tops_model_count(const tops_model *model);
TOPS_API tops_status tops_model_info(const tops_model *model, int64_t index, tops_model_tensor_info *out);
/* The index of a tensor by name; TOPS_NOT_FOUND with a sentence if none. */
TOPS_API tops_status tops_model_find(const tops_model *model, const char *name, int64_t *index);
/*
 * A view (tops_tensor_view) of the named tensor in place, no copy: valid
 * until tops_model_close.  Read-only memory: never write through it.
 * Formats: safetensors F32, F16, BF16, F8_E4M3, F8_E5M2, I8, U8 as f32 ...
 * u8; GGUF F32, F16, BF16, I8, Q4_0, Q4_1, Q8_0 and MXFP4 as f32, f16,
 * bf16, i8, q4_0, q4_1, q8_0, gguf-mxfp4 (their blocks are the ones
 * matmul2d reads); a tensor tensorops wrote quantized (tops_model_save, or
 * the "weight" of tops_safetensors_save) with all its planes.  A rank-0
 * tensor is viewed as [1].  Anything else is TOPS_UNSUPPORTED_FORMAT with
 * a sentence naming the type (k-quants, iq types, I32, F64, ...), as is a
 * tensor of more than TOPS_MAX_RANK dimensions, an empty one, or one whose
 * data is not aligned to its element size.
 */
TOPS_API tops_status tops_model_tensor(const tops_model *model, const char *name, tops_tensor *out);

TOPS_API int64_t tops_model_meta_count(const tops_model *model);
TOPS_API tops_status tops_model_meta(const tops_model *model, int64_t index, const char **key,
                                     tops_meta_value *value);
TOPS_API tops_status tops_model_meta_find(const tops_model *model, const char *key, int64_t *index);
/* Element j of an ARRAY entry (type is the array's element type); a string
   item points into the file and is not NUL-terminated: use string_len. */
TOPS_API tops_status tops_model_meta_item(const tops_model *model, int64_t index, uint64_t j,
                                          tops_meta_value *value);

/* A tensor to write under a name: a tops_tensor, or (tensor NULL) raw bytes
   of a safetensors dtype ("I64", "BOOL", ...) copied as they are. */
typedef struct tops_named_tensor {
    const char *name;
    const tops_tensor *tensor;
    const char *dtype;        /* raw only */
    int rank;                 /* raw only: 0..TOPS_MODEL_MAX_RANK */
    const int64_t *shape;     /* raw only */
    const void *data;         /* raw only: the bytes the dtype and shape say */
} tops_named_tensor;

/*
 * Writes a safetensors file of many tensors (atomically, as every output:
 * section 1 of docs/files.md).  A tensor of a plain format with a
 * safetensors dtype (f32, f16, bf16, e4m3, e5m2, i8, u8) and tensor_scale 1
 * is stored as that dtype under its name, as any writer would.  Any other
 * (quantized formats, scaled tensors) is stored as its planes NAME,
 * NAME.scales, NAME.biases, NAME.codebook with __metadata__ keys
 * "NAME.format", "NAME.shape" and, when its scale is not 1 (or it is
 * nvfp4), "NAME.tensor_scale"; tops_model_tensor reads it back whole.
 * metadata: meta_count key/value pairs for __metadata__, metadata[2i] the
 * key and metadata[2i + 1] its value (keys must not be ones the writer
 * sets).  Names must be unique, non-empty, not
 * "__metadata__", and no plane name may clash with another tensor.
 */
TOPS_API tops_status tops_model_save(const char *path, const tops_named_tensor *tensors, size_t count,
                                     const char *const *metadata, size_t meta_count);

/* ======================================================================== */
/* matmul2d (src/ops/matmul2d.c -> src/drive/ -> src/kernels/)               */
/* ======================================================================== */

typedef enum tops_matmul_mode {
    TOPS_MULTIPLY = 0,            /* C = A * B */
    TOPS_MULTIPLY_ACCUMULATE = 1  /* C = A * B + C */
} tops_matmul_mode;

/*
 * C[M, N] = A[M, K] * B[K, N], numpy semantics.  transpose_left: left is
 * stored as [K, M]; transpose_right: right is stored as [N, K] (the usual
 * weight layout: rows are output channels, blocks run along K).
 */
typedef struct tops_matmul2d_desc {
    int32_t m_tile;          /* hint; 0 = let the library choose */
    int32_t n_tile;          /* hint; 0 = let the library choose */
    int64_t k;               /* 0 = take K from the tensors (dynamic extent) */
    int transpose_left;
    int transpose_right;
    int relaxed_precision;   /* may quantize activations on the fly */
    tops_matmul_mode mode;
} tops_matmul2d_desc;

/*
 * Runs C = A * B (or C += A * B).  left: f32, f16 or bf16, rank 2; right:
 * any format (or a tensor from tops_pack_right), rank 2, scale blocks
 * along K; dest: f32, f16 or bf16, rank 2, tensor_scale 1, not overlapping
 * left or right.  Any M, N, K >= 1 and any strides.  exec may be NULL
 * (tops_exec_default()); exec.scratch, when large enough, replaces the
 * workspace the calling thread otherwise keeps between calls.  Results are
 * bit-identical for any exec.threads (K is never split across threads),
 * so exec.deterministic holds in every mode.
 *
 * Precision: strict mode accumulates in f32 over the exactly decoded
 * operands (rel-L2 <= 1e-5 against f64 on the tests' data).  Relaxed mode
 * quantizes activations to i8 per block of 32 (16 for 16-blocks) and uses
 * integer dot products where the weights have an integer form (int8/4/2
 * groups, i8/i4/i2, mxfp4, mxint8, nvfp4, q4_0, q8_0, gguf-mxfp4, q6_K,
 * iq4_nl, iq4_xs, and q4_1 / q4_K / q5_K with their per-block mins) stored
 * [N, K].  Measured
 * rel-L2 against f64 of the decoded operands <= 5e-3 on uniform data
 * (tested bound 1e-2).  Everything else runs strict.
 * On failure nothing is written to dest.
 */
TOPS_API tops_status tops_matmul2d(const tops_exec *exec, const tops_matmul2d_desc *desc,
                                   const tops_tensor *left, const tops_tensor *right, tops_tensor *dest);
/* Names the path tops_matmul2d would take for these arguments (after the
   same checks), e.g. "f32 panels (unpacked per K block):
   tops_gemm_f32_f32_f32_6x16__avx2 (avx2)", into buf (cap bytes, NUL
   included, truncated to fit).  dest is not written.  With exec.device =
   cuda:N it names the GPU kernel, e.g. "cuda:0 wgmma f16/bf16, both
   operands by TMA" (a plain right is packed on the device to decide). */
TOPS_API tops_status tops_matmul2d_path(const tops_exec *exec, const tops_matmul2d_desc *desc,
                                        const tops_tensor *left, const tops_tensor *right,
                                        const tops_tensor *dest, char *buf, size_t cap);
/* Lays right out for the kernel dispatch picks (once per weight, in
   parallel); the result is a TOPS_FMT_PACKED tensor that tops_matmul2d
   accepts in place of right (with the same desc.transpose_right) and that
   tops_tensor_destroy frees.  Weights with an integer form stored [N, K]
   (transpose_right; int groups, i8/i4/i2, mxfp4, mxint8, nvfp4, q4_0,
   q8_0, gguf-mxfp4, q6_K, iq4_nl, iq4_xs; q4_1, q4_K and q5_K when relaxed) pack
   to a contiguous copy in their own layout, which the kernels read in place
   (same bytes as the source); every other format packs to f32 panels for
   the f32 microkernel (4 bytes per weight). */
TOPS_API tops_status tops_pack_right(const tops_exec *exec, const tops_matmul2d_desc *desc,
                                     const tops_tensor *right, tops_tensor *packed);

/* ======================================================================== */
/* conv2d (src/ops/conv2d.c -> src/drive/conv.c, conv_dw.c; docs/conv2d.md) */
/* ======================================================================== */

/*
 * 2-D convolution (cross-correlation, as every DL framework computes it):
 *   dest[n, y, x, o] (+)= bias[o] + sum_{i, j, c} input[n, y * sh + i * dh - pt,
 *                        x * sw + j * dw - pl, g * C/G + c] * weight[o, i, j, c]
 * with g = o / (O/G), zero outside the input.  The fields that count are all
 * int32; a zero field takes its default (noted), a negative one is an error.
 */
typedef struct tops_conv2d_desc {
    int32_t kernel_h, kernel_w;     /* KH, KW: required with rank-2 weights; 0 = from rank-4 ones */
    int32_t stride_h, stride_w;     /* 0 = 1 */
    int32_t dilation_h, dilation_w; /* 0 = 1 */
    int32_t pad_top, pad_bottom, pad_left, pad_right; /* zero rows/columns around the input */
    int same;                       /* 1: pad so that OH = ceil(H / sh) and OW = ceil(W / sw), the odd
                                       pixel at the bottom/right (TF / ONNX SAME_UPPER); the four
                                       paddings must then be 0 */
    int32_t groups;                 /* G, 0 = 1; divides C and O.  G = C is depthwise */
    int relaxed_precision;          /* as tops_matmul2d_desc (same paths and bounds) */
    tops_matmul_mode mode;          /* TOPS_MULTIPLY or TOPS_MULTIPLY_ACCUMULATE into dest */
    const tops_tensor *bias;        /* NULL, or f32/f16/bf16 rank 1 [O] in host memory (a GPU call:
                                       host or device memory) */
} tops_conv2d_desc;

/*
 * Runs the convolution on the CPU, or with exec.device = cuda:N on that GPU
 * (docs/conv2d.md): input and dest in its memory, f16/bf16 input, channels
 * contiguous; weight and bias in host or device memory (or a weight packed
 * by tops_pack_right for that device); queued on exec.stream and returning
 * before the GPU has finished.
 *   input  [N, H, W, C]  f32, f16 or bf16 (NHWC), any strides
 *   weight either rank 2 [O, KH * KW * C/G] in any format tops_matmul2d
 *          takes as right with transpose_right = 1 (f32/f16/bf16, fp8, int
 *          groups, MX, NVFP4, GGUF blocks, lut4, ...): row o is output
 *          channel o's [KH][KW][C/G] taps flattened, quantized along that
 *          reduction; or a tensor from tops_pack_right of such a weight
 *          (transpose_right = 1; groups = 1, or for a GPU pack also depthwise,
 *          groups = C = O); or rank 4 [O, KH, KW, C/G]
 *          in f32/f16/bf16 with its last three dimensions contiguous
 *   dest   [N, OH, OW, O]  f32, f16 or bf16, whose N, OH, OW collapse into
 *          one dimension (stride[0] = OH stride[1], stride[1] = OW stride[2]),
 *          not overlapping input, weight or bias
 * OH = (H + pt + pb - dh (KH - 1) - 1) / sh + 1, likewise OW.  Every bad
 * descriptor or tensor is refused with a status and a sentence before dest
 * is touched.  Precision and threads as tops_matmul2d: strict mode
 * accumulates in f32 over the exactly decoded weights; results are
 * bit-identical for any exec.threads.  Relaxed mode may also run a 3x3
 * stride-1 convolution as Winograd F(2x2, 3x3) in f32 over the decoded
 * weights (rel-L2 about 5e-7 against f64 on random data); a packed weight
 * then keeps its transformed copy (16 floats per output and input channel)
 * from the first such call until tops_tensor_destroy.  With a bias, dest first receives
 * the bias (or it is added to dest), then the sums: a failure after the
 * checks (TOPS_OUT_OF_MEMORY only) may leave dest partly written.
 */
TOPS_API tops_status tops_conv2d(const tops_exec *exec, const tops_conv2d_desc *desc, const tops_tensor *input,
                                 const tops_tensor *weight, tops_tensor *dest);
/* The output extents [N, OH, OW, O] tops_conv2d would need for these
   arguments (after the same checks on desc, input and weight). */
TOPS_API tops_status tops_conv2d_output_shape(const tops_conv2d_desc *desc, const tops_tensor *input,
                                              const tops_tensor *weight, int64_t out_extent[4]);
/* Names the path tops_conv2d would take, e.g. "implicit GEMM (im2col rows
   gathered into the panels), f32 panels ...", into buf (cap bytes). */
TOPS_API tops_status tops_conv2d_path(const tops_exec *exec, const tops_conv2d_desc *desc, const tops_tensor *input,
                                      const tops_tensor *weight, const tops_tensor *dest, char *buf, size_t cap);

/* ======================================================================== */
/* Cooperative tiles and attention (src/ops/attention.c, src/ops/tile.c)     */
/* ======================================================================== */

/*
 * Tiles ("cooperative tensors" in the seed): an R x C block of f32
 * accumulators in caller-provided storage, owned by one thread, that a
 * program composes into its own fused kernel: tile matmul (a tile can be the
 * left input of the next matmul), row/column reductions with an explicit
 * identity, element-wise maps that see their row's value, and a store to a
 * tensor.  docs/tiles.md shows flash attention written with them.
 *
 * Element (i, j) lives at tile->data[i * tile->ld + j].  Columns cols..ld-1
 * are padding that the tile functions may overwrite; never read them.
 * Tile functions are not thread-safe on one tile; distinct tiles may be used
 * by distinct threads at once.
 */
#define TOPS_TILE_MAX_ROWS 256
#define TOPS_TILE_MAX_COLS 1024
#define TOPS_TILE_ALIGN 64 /* bytes: alignment of the storage */

typedef struct tops_tile {
    uint32_t magic;   /* set by tops_tile_init */
    int32_t rows, cols;
    int32_t ld;       /* floats from one row to the next (cols rounded up to 32) */
    float *data;      /* rows x ld accumulators */
    float *work_;     /* matmul workspace inside the same storage; internal */
} tops_tile;

/* Bytes of storage a rows x cols tile needs (accumulators plus the
   workspace tile matmul uses to lay out operands, so tile functions never
   allocate); 0 if rows is not 1..TOPS_TILE_MAX_ROWS or cols not
   1..TOPS_TILE_MAX_COLS. */
TOPS_API size_t tops_tile_storage_bytes(int32_t rows, int32_t cols);
/* Makes a zero-filled rows x cols tile over storage (TOPS_TILE_ALIGN-byte
   aligned, at least tops_tile_storage_bytes(rows, cols) bytes).  The tile
   borrows the storage; there is nothing to destroy. */
TOPS_API tops_status tops_tile_init(tops_tile *tile, int32_t rows, int32_t cols, void *storage,
                                    size_t storage_bytes);
/* Sets every element to value. */
TOPS_API tops_status tops_tile_fill(tops_tile *tile, float value);

/* The left input of tops_tile_matmul: a tensor (slice) or a tile; exactly
   one of the two is non-NULL.  Build it with the helpers below. */
typedef struct tops_tile_input {
    const tops_tensor *tensor;
    const tops_tile *tile;
} tops_tile_input;
static inline tops_tile_input tops_tile_input_tensor(const tops_tensor *t) {
    tops_tile_input in = {t, 0};
    return in;
}
static inline tops_tile_input tops_tile_input_tile(const tops_tile *t) {
    tops_tile_input in = {0, t};
    return in;
}

/*
 * tile[M, N] = left[M, K] * right[K, N]            (desc->mode TOPS_MULTIPLY)
 * tile[M, N] = left[M, K] * right[K, N] + tile     (TOPS_MULTIPLY_ACCUMULATE)
 * M = tile rows, N = tile cols.  A tensor operand is a matrix: its last two
 * dimensions, every other extent 1 (a slice of a bigger tensor), or a rank-1
 * tensor read as one row.  transpose_left: left is stored [K, M];
 * transpose_right: right is stored [N, K] (keys, weights).  left: a tile
 * (not the destination itself) or a tensor in any format; right: a tensor in
 * any format (f32/f16/bf16 read natively, quantized formats decoded block by
 * block, scales applied).  Accumulates in f32.  desc->k: 0 or K;
 * m_tile/n_tile: 0 or the tile's extents; relaxed_precision is accepted and
 * has no effect here.
 */
TOPS_API tops_status tops_tile_matmul(const tops_matmul2d_desc *desc, tops_tile_input left,
                                      const tops_tensor *right, tops_tile *tile);

typedef enum tops_reduce_op { TOPS_REDUCE_SUM = 0, TOPS_REDUCE_MAX = 1, TOPS_REDUCE_MIN = 2 } tops_reduce_op;

/* out[i] = identity (op) tile[i, 0] (op) ... (op) tile[i, cols - 1], left to
   right (rows entries).  The identity is explicit on purpose: max wants
   -INFINITY, sum 0 (or a running value to fold into).  A NaN element makes
   the result NaN for every op. */
TOPS_API tops_status tops_tile_reduce_rows(const tops_tile *tile, tops_reduce_op op, float identity,
                                           float *out);
/* out[j] = identity (op) tile[0, j] (op) ... (op) tile[rows - 1, j] (cols entries). */
TOPS_API tops_status tops_tile_reduce_cols(const tops_tile *tile, tops_reduce_op op, float identity,
                                           float *out);

/* Element-wise built-ins.  r is the element's row value: row_values[i], or
   `value` for every row when row_values is NULL. */
typedef enum tops_tile_map_op {
    TOPS_MAP_SCALE = 0,    /* x * r */
    TOPS_MAP_ADD = 1,      /* x + r */
    TOPS_MAP_SUB_EXP = 2,  /* exp((x - r) * scale); a row whose r is -INFINITY
                              becomes 0 (so a fully masked softmax row never
                              makes NaN); row_sums, if given, gets each row's sum */
    TOPS_MAP_MASK_CAUSAL = 3, /* x = -INFINITY where key > query, or where
                              |key - query| >= window (window > 0); query =
                              row_offset + i, key = col_offset + j */
    TOPS_MAP_MASK = 4,     /* x = -INFINITY where mask[i * mask_ld + j] == 0 */
    TOPS_MAP_CLAMP = 5,    /* min(max(x, lo), hi); NaN stays NaN */
    TOPS_MAP_SOFTCAP = 6   /* r * tanh(x / r) (r > 0): logit soft-capping */
} tops_tile_map_op;

typedef struct tops_tile_map_desc {
    tops_tile_map_op op;
    const float *row_values;  /* one per tile row, or NULL */
    float value;              /* every row's value when row_values is NULL */
    float lo, hi;             /* TOPS_MAP_CLAMP: lo <= hi */
    int64_t row_offset, col_offset; /* TOPS_MAP_MASK_CAUSAL positions (may be < 0) */
    int64_t window;           /* TOPS_MAP_MASK_CAUSAL: 0 = none */
    int causal;               /* TOPS_MAP_MASK_CAUSAL: 1 masks key > query */
    const uint8_t *mask;      /* TOPS_MAP_MASK: rows x cols bytes */
    int64_t mask_ld;          /* TOPS_MAP_MASK: bytes between rows (>= cols) */
    float scale;              /* TOPS_MAP_SUB_EXP: factor on x - r (> 0); 0 = 1 */
    float *row_sums;          /* TOPS_MAP_SUB_EXP: NULL, or rows floats that get
                                 each row's sum of results (the softmax
                                 denominator in the same pass) */
} tops_tile_map_desc;

TOPS_API tops_status tops_tile_map(tops_tile *tile, const tops_tile_map_desc *desc);

/* The callback form: tile[i, j] = fn(tile[i, j], r, i, j, user), with r as
   above (row_values may be NULL: r is then 0). */
typedef float (*tops_tile_map_fn)(float x, float row_value, int32_t i, int32_t j, void *user);
TOPS_API tops_status tops_tile_map_fn_apply(tops_tile *tile, tops_tile_map_fn fn, const float *row_values,
                                            void *user);

/* Writes the tile to dest (a matrix as for tops_tile_matmul, extents rows x
   cols, format f32, f16 or bf16; rounding to nearest even). */
TOPS_API tops_status tops_tile_store(const tops_tile *tile, tops_tensor *dest);

/*
 * Fused attention: out = softmax(scale * q k^T + mask) v, one pass, online
 * softmax, O(S * D) memory (no Sq x Sk buffer).
 *   q   [B, Hq, Sq, D]   f32, f16 or bf16
 *   k   [B, Hkv, Sk, D]  f32, f16, bf16, or a quantized KV cache (int8-gG,
 *                        mxfp8, e4m3-ch, ... any format whose blocks run
 *                        along D)
 *   v   [B, Hkv, Sk, Dv] as k
 *   out [B, Hq, Sq, Dv]  f32, f16 or bf16; must not overlap q, k or v
 * Hkv divides Hq (grouped / multi-query heads: query head h reads kv head
 * h / (Hq / Hkv)); 16 <= D, Dv <= 256; any strides.  Query i sits at
 * position i + Sk - Sq (bottom-right aligned, as for decoding and chunked
 * prefill).  A query whose every key is masked gets zeros.  The result does
 * not depend on the thread count (exec->deterministic holds always).
 *
 * Sequences of different lengths in one call (docs/tiles.md, "Lengths"):
 *   kv_lens       B key counts: sequence b sees only keys [0, kv_lens[b])
 *                 (a padding mask; positions align to kv_lens[b]).
 *   cu_seqlens_q/k  packed variable-length batches (FlashAttention's varlen
 *                 layout): q and out are [Tq, Hq, D(v)], k and v [Tk, Hkv,
 *                 D(v)]; sequence b owns query rows [cu_q[b], cu_q[b+1]) and
 *                 key rows [cu_k[b], cu_k[b+1]); each array holds batch + 1
 *                 non-decreasing offsets, >= 0, the last within T.  With
 *                 kv_lens too, sequence b sees its first kv_lens[b] keys.
 * Every query row of every sequence is written (zeros where it sees no key,
 * e.g. an empty key sequence); rows outside the sequences are not touched.
 * The arrays live in host memory and are read during the call only.
 *
 * On a cuda:N exec (docs/cuda.md): q and out f16 or bf16 (one type).  Calls
 * whose longest query sequence is 1..16 with D = Dv in {64, 128, 256} run
 * the decode kernel, which also takes the lengths above and a KV cache in
 * q's type, e4m3, e4m3-ch, mxfp8, int8-gG or int4-gG (decoded to q's type);
 * other calls run the prefill kernel (k, v in q's type, whole batches).
 */
typedef struct tops_attention_desc {
    int causal;       /* mask keys after the query's position */
    int64_t window;   /* > 0: mask keys with |key - position| >= window
                         (a sliding window; with causal, the last `window`
                         keys up to the query's own); 0 = no window */
    float scale;      /* logit scale; 0 = 1 / sqrt(D) */
    float softcap;    /* > 0: logits = softcap * tanh(logits / softcap); 0 = off */
    int32_t q_block, kv_block; /* tile hints; 0 = the library's choice */
    const int32_t *kv_lens;      /* NULL, or B (batch) key counts, 0..Sk each */
    const int32_t *cu_seqlens_q; /* NULL, or batch + 1 query offsets (varlen) */
    const int32_t *cu_seqlens_k; /* NULL, or batch + 1 key offsets (with _q) */
    int32_t batch;               /* sequences: required with cu_seqlens (>= 1);
                                    otherwise 0 or q's B */
} tops_attention_desc;

TOPS_API tops_attention_desc tops_attention_desc_default(void);
TOPS_API tops_status tops_attention(const tops_exec *exec, const tops_attention_desc *desc,
                                    const tops_tensor *q, const tops_tensor *k, const tops_tensor *v,
                                    tops_tensor *out);


/* ======================================================================== */
/* CUDA (src/cuda/)                                                         */
/* ======================================================================== */

/*
 * Device memory is memory space cuda:N ({TOPS_DEVICE_CUDA, N}).  A tensor
 * whose planes live on a GPU is viewed with desc.memory = cuda:N, made by
 * tops_tensor_to(), or packed by tops_pack_right() with exec.device = cuda:N.
 * tops_matmul2d() with exec.device = cuda:N runs on that GPU, in order on
 * exec.stream (NULL = the legacy default stream), and returns before the GPU
 * has finished (synchronize the stream to read the result).
 * GPU path (strict and relaxed): left f16, bf16 or f32 [M, K], row-major
 * (f32 runs as 16-bit terms: two f16 in strict mode, about 2^-22 relative;
 * one in relaxed mode; docs/cuda.md); right [N, K] (transpose_right = 1) in int4-gG
 * (G = 16..256; f16, bf16, f32 or e8m0 scales), int8-gG, q4_0, q8_0, mxfp4,
 * gguf-mxfp4, mxfp8, nvfp4, e4m3-ch, i8, i4, e4m3 (tensor scale only), or
 * f16/bf16 of the same type as left or with an f32 left (also [K, N]); dest f32,
 * f16 or bf16 [M, N].  Every operand must be in the memory of exec.device
 * (right may also be on the host: it is then packed on each call, so pack
 * it once with tops_pack_right for speed).
 * Relaxed mode on a compute capability 9.0 GPU with e4m3-ch or e4m3
 * weights and M >= 17 quantizes the activations to e4m3 (one f32 scale
 * per row) and runs FP8 tensor cores: rel-L2 against f64 about 2.6e-2
 * (docs/cuda.md); elsewhere relaxed mode runs the strict GPU kernels.
 * Without CUDA compiled in, or without a GPU, these functions return
 * TOPS_UNSUPPORTED_ON_DEVICE with a sentence (tops_cuda_device_count
 * returns TOPS_OK and 0 then).
 */

/* Number of usable CUDA devices; 0 (and TOPS_OK) without CUDA or a driver. */
TOPS_API tops_status tops_cuda_device_count(int *count);

typedef struct tops_cuda_device_info {
    char name[256];
    int major, minor;          /* compute capability */
    int sm_count;
    int64_t memory_bytes;
    int64_t l2_bytes;
    int clock_khz;             /* SM clock; 0 if the runtime does not say */
    int memory_clock_khz;
    int memory_bus_bits;
    int runtime_version;       /* e.g. 13000 */
    int driver_version;
} tops_cuda_device_info;
TOPS_API tops_status tops_cuda_get_device_info(int device, tops_cuda_device_info *out);

/* Device memory on cuda:device (256-byte aligned); free with tops_cuda_free. */
TOPS_API tops_status tops_cuda_alloc(int device, size_t bytes, void **out);
TOPS_API tops_status tops_cuda_free(int device, void *ptr);
/* Copies bytes between any two of host and cuda:N.  stream NULL: the copy is
   complete on return; otherwise it is queued on the stream (cudaStream_t). */
TOPS_API tops_status tops_cuda_copy(void *dst, tops_memory dst_memory, const void *src, tops_memory src_memory,
                                    size_t bytes, void *stream);
/* Waits until exec->stream (on exec->device) has finished its work. */
TOPS_API tops_status tops_cuda_synchronize(const tops_exec *exec);

/* Copies a tensor, every plane included, into fresh memory in space `to`
   (host or cuda:N); *out owns it (tops_tensor_destroy frees it).  Packed
   tensors cannot be copied. */
TOPS_API tops_status tops_tensor_to(const tops_tensor *src, tops_memory to, tops_tensor *out);

#ifdef __cplusplus
}
#endif

#endif /* TENSOROPS_H */
