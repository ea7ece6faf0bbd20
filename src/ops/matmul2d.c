/* matmul2d: checks every argument, picks a plan, calls the driver.
   Nothing is written to dest unless every check passed. */
#include "ops/matmul2d.h"
#include "cuda/cuda_internal.h"
#include "drive/gemm.h"
#include "formats/traits.h"
#include "core/threads.h"

#include <string.h>

static int is_activation_format(tops_format_id id) {
    return tops__format_is_float(id);
}

/* Bytes of one plane's entries, from its first entry (strides >= 0). */
static size_t plane_span(const tops_plane *p, int rank) {
    if (!p->data) return 0;
    size_t esz = (size_t)((tops_dtype_bits(p->dtype) + 7) / 8), span = esz;
    for (int d = 0; d < rank; d++) span += (size_t)(p->extent[d] - 1) * (size_t)p->stride[d] * esz;
    return span;
}

static int ranges_overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return na && nb && pa < pb + nb && pb < pa + na;
}

/* Every byte range a tensor reads from: data and planes. */
static int tensor_overlaps(const tops_tensor *t, const void *p, size_t n) {
    size_t span;
    if (t->packed_) {
        const tops__packed_right *pk = t->packed_;
        if (pk->in_place) return tensor_overlaps(&pk->copy, p, n) || ranges_overlap(pk->q8_panels, pk->q8_bytes, p, n);
        return ranges_overlap(pk->panels, pk->bytes, p, n);
    }
    if (tops_tensor_data_span(t, &span) != TOPS_OK) return 1;
    return ranges_overlap(t->data, span, p, n) || ranges_overlap(t->scales.data, plane_span(&t->scales, t->rank), p, n) ||
           ranges_overlap(t->bias.data, plane_span(&t->bias, t->rank), p, n) ||
           ranges_overlap(t->codebook.data, plane_span(&t->codebook, t->rank), p, n);
}

static tops_status check_host(const char *fn, const char *arg, const tops_tensor *t) {
    if (t->memory.kind != TOPS_DEVICE_CPU)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "%s lives in cuda:%d memory; the CPU path needs host memory",
                          arg, t->memory.index);
    return TOPS_OK;
}

static tops_status check_exec(const char *fn, const tops_exec *exec, tops_exec *out) {
    *out = exec ? *exec : tops_exec_default();
    if (tops_exec_validate(out) != TOPS_OK) {
        char why[256]; /* the sentence buffer is rewritten by tops__fail */
        snprintf(why, sizeof why, "%s", tops_last_error());
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s", why);
    }
    if (out->device.kind != TOPS_DEVICE_CPU)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "exec.device is cuda:%d; this build runs matmul2d on the CPU",
                          out->device.index);
    return TOPS_OK;
}

static tops_status check_desc(const char *fn, const tops_matmul2d_desc *d) {
    if (!d) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc is NULL");
    if (d->mode != TOPS_MULTIPLY && d->mode != TOPS_MULTIPLY_ACCUMULATE)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.mode is %d; it must be TOPS_MULTIPLY or TOPS_MULTIPLY_ACCUMULATE",
                          (int)d->mode);
    if ((d->transpose_left & ~1) || (d->transpose_right & ~1) || (d->relaxed_precision & ~1))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                          "desc.transpose_left, transpose_right and relaxed_precision must be 0 or 1 (got %d, %d, %d)",
                          d->transpose_left, d->transpose_right, d->relaxed_precision);
    if (d->m_tile < 0 || d->n_tile < 0)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.m_tile and desc.n_tile are hints >= 0 (got %d, %d)",
                          (int)d->m_tile, (int)d->n_tile);
    if (d->k < 0) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.k is %lld; it must be >= 0 (0 = from the tensors)", (long long)d->k);
    return TOPS_OK;
}

/* exec.device = cuda:N goes to the GPU path (src/cuda), which checks the
   tensors itself; exec and desc are checked here for both paths. */
static int wants_cuda(const tops_exec *exec) { return exec && exec->device.kind == TOPS_DEVICE_CUDA; }

static tops_status check_cuda_route(const char *fn, const tops_exec *exec, const tops_matmul2d_desc *desc) {
    if (tops_exec_validate(exec) != TOPS_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", tops_last_error());
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s", why);
    }
    return check_desc(fn, desc);
}

/* Checks a weight tensor (plain, never packed) and returns its K and N. */
static tops_status check_right_plain(const char *fn, const tops_tensor *right, int transposed, int64_t *k, int64_t *n) {
    if (right->rank != 2)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "right has rank %d; matmul2d needs rank 2", right->rank);
    tops_status st = check_host(fn, "right", right);
    if (st != TOPS_OK) return st;
    const int kdim = transposed ? 1 : 0;
    *k = right->extent[kdim];
    *n = right->extent[1 - kdim];
    const tops_format_info *info = tops_format_get_info(right->format.id);
    /* Group blocks (not whole-row scales) must run along K. */
    if (right->scales.data && info->block > 1 && right->scales.block[1 - kdim] > 1)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                          "right's %s blocks run along dimension %d, which is N for transpose_right=%d; blocks must "
                          "run along K (dimension %d)",
                          info->name, 1 - kdim, transposed, kdim);
    return TOPS_OK;
}

static tops_status check_right(const char *fn, const tops_tensor *right, int transposed, int64_t *k, int64_t *n) {
    if (!tops__is_packed(right)) return check_right_plain(fn, right, transposed, k, n);
    const tops__packed_right *pk = right->packed_;
    if (!pk || pk->magic != TOPS_PACKED_MAGIC)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "right has format packed but was not made by tops_pack_right");
    if (pk->transposed != transposed)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                          "right was packed with transpose_right=%d but desc.transpose_right is %d", pk->transposed,
                          transposed);
    *k = pk->k;
    *n = pk->n;
    return TOPS_OK;
}

/* dest must not write one element twice (strides that overlap). */
static int dest_strides_overlap(const tops_tensor *t) {
    int64_t e0 = t->extent[0], e1 = t->extent[1], s0 = t->stride[0], s1 = t->stride[1];
    if (e0 == 1 || e1 == 1) return (e0 > 1 && s0 == 0) || (e1 > 1 && s1 == 0);
    if (s0 >= s1) return !(s1 >= 1 && s0 >= e1 * s1);
    return !(s0 >= 1 && s1 >= e0 * s0);
}

typedef struct plan_inputs {
    tops_exec exec;
    int64_t m, n, k;
} plan_inputs;

static tops_status check_all(const char *fn, const tops_exec *exec, const tops_matmul2d_desc *desc,
                             const tops_tensor *left, const tops_tensor *right, const tops_tensor *dest,
                             plan_inputs *out) {
    tops_status st = check_desc(fn, desc);
    if (st == TOPS_OK) st = tops__check_tensor(fn, "left", left);
    if (st == TOPS_OK) st = tops__check_tensor(fn, "right", right);
    if (st == TOPS_OK) st = tops__check_tensor(fn, "dest", dest);
    if (st == TOPS_OK) st = check_exec(fn, exec, &out->exec);
    if (st != TOPS_OK) return st;
    if (left->rank != 2 || dest->rank != 2)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "left has rank %d and dest rank %d; matmul2d needs rank 2",
                          left->rank, dest->rank);
    if ((st = check_host(fn, "left", left)) != TOPS_OK || (st = check_host(fn, "dest", dest)) != TOPS_OK) return st;
    char name[48];
    if (!is_activation_format(left->format.id))
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "left has format %s; activations must be f32, f16 or bf16",
                          tops_format_name(left->format, name, sizeof name));
    if (!is_activation_format(dest->format.id))
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "dest has format %s; it must be f32, f16 or bf16",
                          tops_format_name(dest->format, name, sizeof name));
    if (dest->tensor_scale != 1.0f)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "dest has tensor_scale %g; matmul2d writes plain values, so it must be 1",
                          (double)dest->tensor_scale);
    int64_t kr = 0, n = 0;
    if ((st = check_right(fn, right, desc->transpose_right, &kr, &n)) != TOPS_OK) return st;
    const int64_t m = left->extent[desc->transpose_left ? 1 : 0], kl = left->extent[desc->transpose_left ? 0 : 1];
    if (kl != kr)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "left has K=%lld but right has K=%lld (transpose_left=%d, transpose_right=%d)",
                          (long long)kl, (long long)kr, desc->transpose_left, desc->transpose_right);
    if (desc->k != 0 && desc->k != kl)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "desc.k is %lld but the tensors have K=%lld", (long long)desc->k, (long long)kl);
    if (dest->extent[0] != m || dest->extent[1] != n)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "dest is [%lld, %lld] but left * right is [%lld, %lld]",
                          (long long)dest->extent[0], (long long)dest->extent[1], (long long)m, (long long)n);
    if (dest_strides_overlap(dest))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "dest strides [%lld, %lld] make elements overlap",
                          (long long)dest->stride[0], (long long)dest->stride[1]);
    size_t dspan;
    if ((st = tops_tensor_data_span(dest, &dspan)) != TOPS_OK) return st;
    if (tensor_overlaps(left, dest->data, dspan))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "dest overlaps left in memory; matmul2d does not work in place");
    if (tensor_overlaps(right, dest->data, dspan))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "dest overlaps right in memory; matmul2d does not work in place");
    out->m = m;
    out->n = n;
    out->k = kl;
    return TOPS_OK;
}

static int is_direct_f32(const tops_tensor *t) {
    return tops__float_of(t) == TOPS_DT_F32 && t->stride[1] == 1 && t->tensor_scale == 1.0f;
}
/* The same for f16 / bf16: that dtype, else TOPS_DT_NONE. */
static tops_dtype direct_half(const tops_tensor *t) {
    return tops__is_half(t) && t->stride[1] == 1 && t->tensor_scale == 1.0f ? tops__float_of(t) : TOPS_DT_NONE;
}

/* Rows at or below which quantized weights take the unpack-and-dot driver. */
enum { GEMV_MAX_M = 4 };
/* Rows from which the relaxed integer forms take the AMX tiles (below:
   the rows driver). */
enum { AMX_MIN_M = GEMV_MAX_M + 1 };

static tops__gemm_operand right_operand(const tops__kernels *kern, const tops_tensor *right, int transposed) {
    tops__gemm_operand op = {right, !transposed, tops__read_rect_plain, is_direct_f32(right), NULL, NULL, NULL,
                             direct_half(right)};
    /* Formats without a dedicated reader: the formats layer decodes one
       K-panel at a time (fused: never the whole matrix). */
    if (!is_activation_format(right->format.id)) op.read = tops__read_rect_decode;
    /* Integer forms are unpacked straight from [N, K] rows (blocks along K). */
    if (!tops__is_packed(right) && kern->unpack[right->format.id].run && transposed)
        op.read = tops__read_rect_unpack;
    else if (!tops__is_packed(right) && transposed && tops__has_element_reader(right))
        op.read = tops__read_rect_elements;
    else if (!tops__is_packed(right) && right->codebook.data)
        op.read = tops__read_rect_lut4; /* any layout: codes and codebooks follow rows */
    if (tops__is_packed(right)) {
        op.k_major = 1;
        op.read = tops__read_rect_packed;
        op.direct_f32 = 0;
        op.direct_half = TOPS_DT_NONE;
        op.packed = right->packed_;
    }
    return op;
}

tops_status tops_matmul2d(const tops_exec *exec, const tops_matmul2d_desc *desc, const tops_tensor *left,
                          const tops_tensor *right, tops_tensor *dest) {
    if (wants_cuda(exec)) {
        tops_status st = check_cuda_route("tops_matmul2d", exec, desc);
        return st != TOPS_OK ? st : tops__cuda_matmul2d(exec, desc, left, right, dest);
    }
    const tops__kernels *kern;
    tops_status st = tops__kernels_checked("tops_matmul2d", &kern);
    if (st != TOPS_OK) return st;
    return tops__matmul2d_with(kern, exec, desc, left, right, dest);
}

/* A packed tensor whose kernels read the format in place is its copy. */
static const tops_tensor *unwrap_in_place(const tops_tensor *right) {
    const tops__packed_right *pk = right->packed_;
    return tops__is_packed(right) && pk->in_place ? &pk->copy : right;
}

typedef enum plan_kind {
    PLAN_ROWS,      /* small M: weight rows streamed, dot products */
    PLAN_INTEGER,   /* relaxed: i8 activations, integer microkernel */
    PLAN_AMX,       /* AMX codes in tiles, scaled per block: integer forms, strict or relaxed small M */
    PLAN_AMX_BF16,  /* AMX bf16 terms, any weights (strict: those without an integer form) */
    PLAN_PANELS,    /* f32 panels (decoded per K block) into the f32 microkernel */
} plan_kind;

/* Fills the driver problem from checked arguments and picks the driver. */
static plan_kind plan(const tops__kernels *kern, const plan_inputs *in, const tops_matmul2d_desc *desc,
                      const tops_tensor *left, const tops__gemm_operand *gathered, const tops_tensor *right,
                      tops_tensor *dest, tops__gemm_problem *p) {
    memset(p, 0, sizeof *p);
    p->m = in->m;
    p->n = in->n;
    p->k = in->k;
    p->left = gathered ? *gathered
                       : (tops__gemm_operand){left, desc->transpose_left, tops__read_rect_plain, is_direct_f32(left), NULL, NULL, NULL,
                                              TOPS_DT_NONE};
    p->right = right_operand(kern, right, desc->transpose_right);
    p->dest = dest;
    p->accumulate = desc->mode == TOPS_MULTIPLY_ACCUMULATE;
    p->kern = kern;
    p->threads = in->exec.threads;
    p->n_tile_hint = desc->n_tile;
    p->scratch = in->exec.scratch;
    p->scratch_bytes = in->exec.scratch_bytes;
    p->relaxed = desc->relaxed_precision;
    /* Few rows and weights stored [N, K]: stream the weight rows once.
       Relaxed 8-bit rows (read in place, one dot per activation row) and
       rows with no in-place reader (2-bit codes, mins in blocks of 32) above the level's
       gemv_q8_bytes_max_m take the integer microkernel instead, as from 5;
       not at AMX levels (their panels differ). */
    const int64_t rows_max = kern->amx_bf16t.run ? GEMV_MAX_M : tops__gemv_rows_max_m(p, GEMV_MAX_M);
    if (p->m <= rows_max && !p->right.k_major && !p->right.packed &&
        !(p->m > kern->gemv_q8_bytes_max_m && !kern->amx_bf16t.run &&
          (p->right.read == tops__read_rect_unpack || !kern->unpack[right->format.id].run) &&
          (tops__gemv_bytes_in_place(p) || tops__gemv_unpacks_rows(p)) && tops__gemm_q8_takes(kern, right)))
        return PLAN_ROWS;
    /* AMX from AMX_MIN_M rows: what runs when (measured on the Xeon,
       docs/architecture.md).  Integer forms (sub-blocks dividing 32), the
       codes in tiles with f32 scaling per sub-block: strict unless every
       value is one bf16 term (bf16 tiles, activations hi + lo: 2.4x
       faster there than the bf16 terms for int4-g32); relaxed below the
       level's amx_bf16t.relaxed_min_m (i8 tiles: no weight decode; 8-bit
       weights too, tdpbssd sums i8 x i8 in i32 exactly).  Everything
       else, and strict one-term weights (mxfp4, mxint8, e8m0-scaled int
       groups: the same two products a step with no per-block scaling):
       bf16 terms (strict: activations hi + lo, weights in as many terms as
       their values need; relaxed: one term each), any weight format. */
    if (p->m >= AMX_MIN_M && kern->amx_bf16t.run) {
        /* (the AMX drivers unpack rows [N, K]: weights stored so, not packed to f32 panels) */
        const int fits = !p->right.k_major && tops__gemm_amx_supports(kern, right, p->relaxed);
        if (fits && (p->relaxed ? p->m < kern->amx_bf16t.relaxed_min_m[tops__unpack_sub(right) < 32]
                                : !tops__amx_one_term(kern, right, NULL)))
            return PLAN_AMX;
        return PLAN_AMX_BF16;
    }
    /* Integer forms take the integer microkernel (8-bit ones its wide
       variant: i32 sums with no saturating i16 stage). */
    if (p->right.read == tops__read_rect_unpack && p->relaxed && tops__gemm_q8_takes(kern, right))
        return PLAN_INTEGER;
    /* Integer forms with mins (q4_1, q4_K, q5_K) only where activations are
       quantized: their strict paths decode (at M <= 4 q4_K / q5_K in
       registers, dot_super_f32, on the rows above). */
    if (p->relaxed && !p->right.k_major && !p->right.packed && !tops__is_packed(right) &&
        kern->unpack[right->format.id].run_min && tops__gemm_q8_takes(kern, right))
        return PLAN_INTEGER;
    return PLAN_PANELS;
}

/* plan() for a call whose right operand may be packed: *right becomes the
   weights the drivers read, and the packed tensor's prepacked forms (integer
   panels, the row stream) go with the problem. */
static plan_kind plan_call(const tops__kernels *kern, const plan_inputs *in, const tops_matmul2d_desc *desc,
                           const tops_tensor *left, const tops__gemm_operand *gathered, const tops_tensor **right,
                           tops_tensor *dest, tops__gemm_problem *p) {
    const tops__packed_right *pk = tops__is_packed(*right) ? (*right)->packed_ : NULL;
    *right = unwrap_in_place(*right);
    plan_kind kind = plan(kern, in, desc, left, gathered, *right, dest, p);
    if (pk) {
        p->q8_panels = pk->q8_panels;
        p->q8_scales = pk->q8_panels ? pk->q8_scales : NULL;
        p->q8_mins = pk->q8_panels ? pk->q8_mins : NULL;
        p->q8_amx = pk->q8_amx;
        p->q8_lut = pk->q8_panels && pk->q8_amx == 3 ? pk->q8_lut : NULL;
        p->nib_stream = pk->nib_stream;
    }
    return kind;
}

static tops_status run_plan(const char *fn, plan_kind kind, const tops__gemm_problem *p) {
    switch (kind) {
    case PLAN_ROWS: return tops__gemv_run(fn, p);
    case PLAN_INTEGER: return tops__gemm_q8_run(fn, p);
    case PLAN_AMX: return tops__gemm_amx_run(fn, p);
    case PLAN_AMX_BF16: return tops__gemm_amx_bf16t_run(fn, p);
    default: return tops__gemm_run(fn, p);
    }
}

tops_status tops__matmul2d_with(const tops__kernels *kern, const tops_exec *exec, const tops_matmul2d_desc *desc,
                                const tops_tensor *left, const tops_tensor *right, tops_tensor *dest) {
    static const char fn[] = "tops_matmul2d";
    plan_inputs in;
    tops_status st = check_all(fn, exec, desc, left, right, dest, &in);
    if (st != TOPS_OK) return st;
    tops__gemm_problem p;
    return run_plan(fn, plan_call(kern, &in, desc, left, NULL, &right, dest, &p), &p);
}

static void describe(const tops__kernels *kern, plan_kind kind, const tops__gemm_problem *pp,
                     const tops_tensor *right, char *buf, size_t cap);
static tops_status path_with(const char *fn, const tops__kernels *kern, const tops_exec *exec,
                             const tops_matmul2d_desc *desc, const tops_tensor *left, const tops_tensor *right,
                             const tops_tensor *dest, char *buf, size_t cap);

tops_status tops__matmul2d_check_right(const char *fn, const tops_tensor *right, int transposed, int64_t *k,
                                       int64_t *n) {
    return check_right(fn, right, transposed, k, n);
}

tops_status tops__matmul2d_gathered(const char *fn, const tops__kernels *kern, const tops_exec *exec,
                                    const tops_matmul2d_desc *desc, const tops__gemm_operand *left, int64_t m,
                                    const tops_tensor *right, tops_tensor *dest, char *path, size_t cap) {
    plan_inputs in;
    tops_status st = check_exec(fn, exec, &in.exec);
    if (st != TOPS_OK) return st;
    in.m = m;
    in.n = dest->extent[1];
    in.k = tops__is_packed(right) ? ((const tops__packed_right *)right->packed_)->k : right->extent[1];
    tops__gemm_problem p;
    plan_kind kind = plan_call(kern, &in, desc, dest, left, &right, dest, &p);
    if (!path) return run_plan(fn, kind, &p);
    describe(kern, kind, &p, right, path, cap);
    return TOPS_OK;
}

tops_status tops_matmul2d_path(const tops_exec *exec, const tops_matmul2d_desc *desc, const tops_tensor *left,
                               const tops_tensor *right, const tops_tensor *dest, char *buf, size_t cap) {
    static const char fn[] = "tops_matmul2d_path";
    if (!buf || cap == 0) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "buf is NULL or cap is 0");
    if (wants_cuda(exec)) {
        tops_status cst = check_cuda_route(fn, exec, desc);
        return cst != TOPS_OK ? cst : tops__cuda_matmul2d_path(exec, desc, left, right, dest, buf, cap);
    }
    const tops__kernels *kern;
    tops_status st = tops__kernels_checked(fn, &kern);
    return st != TOPS_OK ? st : path_with(fn, kern, exec, desc, left, right, dest, buf, cap);
}

tops_status tops__matmul2d_path_with(const tops__kernels *kern, const tops_exec *exec, const tops_matmul2d_desc *desc,
                                     const tops_tensor *left, const tops_tensor *right, const tops_tensor *dest,
                                     char *buf, size_t cap) {
    static const char fn[] = "tops_matmul2d_path";
    if (!buf || cap == 0) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "buf is NULL or cap is 0");
    return path_with(fn, kern, exec, desc, left, right, dest, buf, cap);
}

/* The CPU half of tops_matmul2d_path for one kernel table. */
static tops_status path_with(const char *fn, const tops__kernels *kern, const tops_exec *exec,
                             const tops_matmul2d_desc *desc, const tops_tensor *left, const tops_tensor *right,
                             const tops_tensor *dest, char *buf, size_t cap) {
    plan_inputs in;
    tops_status st = check_all(fn, exec, desc, left, right, dest, &in);
    if (st != TOPS_OK) return st;
    tops__gemm_problem p;
    plan_kind kind = plan_call(kern, &in, desc, left, NULL, &right, (tops_tensor *)dest, &p);
    describe(kern, kind, &p, right, buf, cap);
    return TOPS_OK;
}

/* The sentence of tops_matmul2d_path for a planned call. */
static void describe(const tops__kernels *kern, plan_kind kind, const tops__gemm_problem *pp,
                     const tops_tensor *right, char *buf, size_t cap) {
    const tops__gemm_problem p = *pp;
    const tops__unpacker *up = !tops__is_packed(right) ? &kern->unpack[right->format.id] : NULL;
    const char *isa = tops_isa_name(kern->isa);
    if (kind == PLAN_AMX && p.relaxed) {
        snprintf(buf, cap, "AMX integer tiles (%s), i8 activations: %s (%s)",
                 p.q8_panels && p.q8_amx == 1   ? "prepacked"
                 : p.q8_panels && p.q8_amx == 3 ? "prepacked 4-bit panels"
                                                : "unpacked per K block",
                 kern->amx_q8.name, isa);
    } else if (kind == PLAN_AMX) {
        snprintf(buf, cap, "AMX bf16 code tiles (%s), %s, scaled per block: %s (%s)",
                 p.q8_panels && p.q8_amx == 2 ? "prepacked" : "unpacked per K block",
                 tops__amx_left_terms(&p) == 1 ? "bf16 activations as they are" : "f32 activations as bf16 hi + lo",
                 kern->amx_bf16_name, isa);
    } else if (kind == PLAN_AMX_BF16) {
        const char *src = p.q8_panels && p.q8_amx == 1             ? "prepacked i8 panels"
                          : p.q8_panels && p.q8_amx == 3           ? "prepacked 4-bit panels"
                          : p.right.read == tops__read_rect_unpack ? "integer form unpacked"
                          : tops__amx_bf16t_unpacks_mins(&p)       ? "integer form with mins unpacked"
                          : p.right.packed                         ? "prepacked f32 panels"
                                                                   : "f32 reader";
        snprintf(buf, cap, "AMX bf16 tiles, weights as bf16 terms per K block (%s), activations as %s: %s (%s)",
                 src, p.relaxed ? "bf16" : tops__amx_left_terms(&p) == 1 ? "bf16 as they are" : "bf16 hi + lo",
                 kern->amx_bf16t.name, isa);
    } else if (kind == PLAN_INTEGER) {
        const char *x4 = kern->gemm_q8_x4.run && p.n >= 32 ? kern->gemm_q8_x4.name : NULL;
        snprintf(buf, cap, "integer panels (%s), i8 activations: %s%s%s (%s)",
                 p.q8_panels && !p.q8_amx ? "prepacked" : "unpacked per K block", x4 ? x4 : "",
                 x4 ? ", the rest " : "", tops__gemm_q8_pick(kern, right, NULL)->name, isa);
    } else if (kind == PLAN_ROWS) {
        const int sub = up ? tops__unpack_sub(right) : 0; /* blocks of 16 in place: relaxed, K % 32 == 0 (gemv.c) */
        const int nib = up && up->nib.block_bytes &&
                        (!up->nib.wide || (p.relaxed ? kern->nib_wide && p.k % 32 == 0 : kern->dot_f32_nibbles_rows != NULL)) &&
                        (sub == 32 || (sub == 16 && (p.relaxed || kern->dot_f32_nibbles_rows) && !up->nib.split && p.k % 32 == 0));
        const char *how = up && !up->run && up->run_min && p.relaxed
                              ? (up->dot_super && p.k % 256 == 0 ? "super-blocks with mins in place, i8 dots"
                                                               : "integer rows with mins, i8 dots")
                          : up && !p.relaxed && up->dot_super_f32 && p.k % 256 == 0 ? "super-blocks in place, f32 dots"
                          : up && !p.relaxed && !up->run && up->nib_f32.mins && kern->dot_f32_nibbles_rows &&
                                  tops__unpack_sub(right) == 32 && p.k % 32 == 0
                              ? "4-bit rows with mins in place, f32 dots"
                          : tops__gemv_fp8_rows(&p)
                              ? (tops_format_get_info(right->format.id)->element_bits == 6
                                     ? "fp6 rows in place, f32 dots"
                                     : "fp8 rows in place, f32 dots")
                          : (!up || !up->run) && tops__gemv_lut_rows(&p) ? "codebook rows in place, f32 dots"
                          : !up || !up->run    ? "f32 rows, f32 dots"
                          : !p.relaxed         ? (nib || tops__gemv_super_rows(&p)
                                                      ? "4-bit rows in place, f32 dots"
                                                  : up->byte.block_bytes && kern->dot_f32_bytes_rows && sub == 32 && p.k % 32 == 0
                                                      ? "8-bit rows in place, f32 dots"
                                                      : "integer rows, f32 dots")
                          : up->dot_super && p.k % 256 == 0 ? "super-blocks in place, i8 dots"
                          : tops__gemv_bytes_in_place(&p) ? "8-bit rows in place, i8 dots"
                          : !nib               ? "integer rows, i8 dots"
                          : tops__gemv_streams(&p) ? "4-bit row stream (prepacked), i8 dots"
                                                   : "4-bit rows in place, i8 dots";
        const int64_t rows_max = kern->amx_bf16t.run ? GEMV_MAX_M : tops__gemv_rows_max_m(&p, GEMV_MAX_M);
        snprintf(buf, cap, "rows streamed (M <= %lld): %s (%s)", (long long)rows_max, how, isa);
    } else {
        const char *src = p.right.packed                          ? "prepacked"
                          : p.right.read == tops__read_rect_unpack ? "unpacked per K block"
                          : p.right.read == tops__read_rect_elements ? "element rows per K block"
                          : p.right.read == tops__read_rect_lut4     ? "codebook rows per K block"
                          : p.right.read == tops__read_rect_decode ? "decoded per K block"
                                                                   : "packed per K block";
        snprintf(buf, cap, "f32 panels (%s): %s (%s)", src, kern->gemm_f32.name, isa);
    }
}

/* The public face of a packed weight: owner_ frees everything. */
static tops_tensor packed_tensor(const tops_tensor *right, void *mem, const tops__packed_right *pk, void *data) {
    tops_tensor t;
    memset(&t, 0, sizeof t);
    t.magic = TOPS_TENSOR_MAGIC;
    t.format = tops__packed_format();
    t.rank = 2;
    t.extent[0] = right->extent[0];
    t.extent[1] = right->extent[1];
    t.stride[0] = right->extent[1];
    t.stride[1] = 1;
    t.data = data;
    t.tensor_scale = 1.0f;
    t.owner_ = mem;
    t.packed_ = pk;
    return t;
}

/* Bytes of a contiguous plane (entries of its dtype). */
static size_t plane_bytes(const tops_plane *p, int rank) {
    size_t n = (size_t)((tops_dtype_bits(p->dtype) + 7) / 8);
    for (int d = 0; d < rank; d++) n *= (size_t)p->extent[d];
    return n;
}

static void copy_plane(const tops_plane *src, tops_plane *dst) {
    if (!src->data) return;
    const size_t esz = (size_t)((tops_dtype_bits(src->dtype) + 7) / 8);
    for (int64_t r = 0; r < src->extent[0]; r++)
        for (int64_t c = 0; c < src->extent[1]; c++)
            memcpy((char *)dst->data + (r * dst->stride[0] + c * dst->stride[1]) * (int64_t)esz,
                   (const char *)src->data + (r * src->stride[0] + c * src->stride[1]) * (int64_t)esz, esz);
}

/* The packed form of weights the kernels read in place: one allocation
   holding the descriptor and a contiguous copy (data and planes) of right. */
static tops_status pack_in_place(const char *fn, const tops__kernels *kern, const tops_exec *ex, int relaxed,
                                 const tops_tensor *right, int64_t k, int64_t n, tops_tensor *packed) {
    tops_memory host = {TOPS_DEVICE_CPU, 0};
    const int pthreads = tops__threads_for(TOPS__WORK_PACK, (double)k * (double)n, ex->threads);
    (void)pthreads; /* without OpenMP */
    tops_tensor tmp;
    tops_status st = tops_tensor_create(right->format, 2, right->extent, host, &tmp);
    if (st != TOPS_OK) return st;
    /* The copy's allocation spans from owner_ to the end of its last plane. */
    const unsigned char *base = tmp.owner_;
    size_t span = 0, end;
    if ((st = tops_tensor_data_span(&tmp, &span)) != TOPS_OK) {
        tops_tensor_destroy(&tmp);
        return st;
    }
    end = (size_t)((const unsigned char *)tmp.data - base) + span;
    const tops_plane *planes[3] = {&tmp.scales, &tmp.bias, &tmp.codebook};
    for (int i = 0; i < 3; i++)
        if (planes[i]->data) {
            size_t e = (size_t)((const unsigned char *)planes[i]->data - base) + plane_bytes(planes[i], 2);
            if (e > end) end = e;
        }
    const size_t head = (sizeof(tops__packed_right) + 63) / 64 * 64; /* descriptor, then the copy */
    /* Relaxed narrow integers: the integer driver's panels and scales after the copy. */
    /* At a level with AMX kernels every integer form gets the AMX panels
       (16-column groups) instead of the 8-column ones. */
    const int amx = tops__gemm_amx_supports(kern, right, relaxed);
    const int q8 = amx || (relaxed && tops__gemm_q8_takes(kern, right));
    const int mins = q8 && !kern->unpack[right->format.id].run; /* q4_1, q4_K, q5_K: their mins too */
    /* strict AMX panels hold bf16 codes, but for one-term weights (the
       bf16 terms decode them): the relaxed ones */
    const int i8_panels = amx && (relaxed || tops__amx_one_term(kern, right, NULL));
    const int width = amx ? 16 : 8, esize = amx && !i8_panels ? 2 : 1;
    /* Relaxed AMX panels of codes with at most 16 values: 4 bits each. */
    int8_t nib_lut[16];
    const int nib = i8_panels && tops__amx_nib_lut(kern, right, nib_lut);
    const int64_t kp = tops__ceil_div(k, 32) * 32, groups = amx ? tops__amx_groups(n) : tops__ceil_div(n, 8);
    const int64_t n_subs = kp / tops__unpack_sub(right);
    size_t copy_end = (end + 63) / 64 * 64, q8_panel_bytes = 0, q8_bytes = 0, total = head + end, scratch_bytes = 0;
    /* Relaxed 4-bit rows: also the M <= 4 row stream, after the panels. */
    tops__nibstream_form stream_form;
    const int stream = relaxed && tops__nibstream_form_of(kern, right, &stream_form);
    const int64_t stream_groups = n / TOPS__NIBSTREAM_ROWS;
    const int64_t group_bytes = stream ? tops__nibstream_group_bytes(right, &stream_form) : 0;
    size_t stream_at = 0, stream_bytes = 0;
    if (q8) {
        size_t scale_bytes;
        if (!tops__mul_size((size_t)groups * (nib ? width / 2 : width * esize), (size_t)kp, &q8_panel_bytes) ||
            !tops__mul_size((size_t)groups * width * sizeof(float) * (1 + mins), (size_t)n_subs, &scale_bytes) ||
            !tops__add_size(q8_panel_bytes, scale_bytes, &q8_bytes) || !tops__add_size(head + copy_end, q8_bytes, &total) ||
            !tops__mul_size((size_t)ex->threads,
                            (size_t)kp * width * (1 + nib) + (size_t)n_subs * width * sizeof(float) * (1 + mins),
                            &scratch_bytes)) {
            tops_tensor_destroy(&tmp);
            return tops__fail(TOPS_OVERFLOW, fn, "the packed size overflows size_t");
        }
    }
    if (stream) {
        stream_at = (total + 63) / 64 * 64;
        if (!tops__mul_size((size_t)stream_groups, (size_t)group_bytes, &stream_bytes) ||
            !tops__add_size(stream_at, stream_bytes, &total)) {
            tops_tensor_destroy(&tmp);
            return tops__fail(TOPS_OVERFLOW, fn, "the packed size overflows size_t");
        }
    }
    unsigned char *mem = tops__aligned_alloc(total);
    unsigned char *scratch = q8 ? tops__aligned_alloc(scratch_bytes) : NULL;
    if (!mem || (q8 && !scratch)) {
        tops__aligned_free(mem);
        tops__aligned_free(scratch);
        tops_tensor_destroy(&tmp);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate %zu bytes for the packed weights", total);
    }
    /* Rebase the copy into our block, then fill it from right. */
    tops_tensor copy = tmp;
    copy.owner_ = NULL;
    copy.data = mem + head + ((unsigned char *)tmp.data - base);
    tops_plane *cp[3] = {&copy.scales, &copy.bias, &copy.codebook};
    for (int i = 0; i < 3; i++)
        if (cp[i]->data) cp[i]->data = mem + head + ((unsigned char *)planes[i]->data - base);
    tops_tensor_destroy(&tmp);
    const tops_format_info *info = tops_format_get_info(right->format.id);
    const size_t row = (size_t)tops__row_bytes(info, right->extent[1]);
    for (int64_t r = 0; r < right->extent[0]; r++)
        memcpy((void *)tops__weight_row(&copy, r), tops__weight_row(right, r), row);
    copy_plane(&right->scales, &copy.scales);
    copy_plane(&right->bias, &copy.bias);
    copy_plane(&right->codebook, &copy.codebook);
    copy.tensor_scale = right->tensor_scale;

    tops__packed_right *pk = (tops__packed_right *)mem;
    memset(pk, 0, sizeof *pk);
    pk->magic = TOPS_PACKED_MAGIC;
    pk->source = right->format;
    pk->k = k;
    pk->n = n;
    pk->transposed = 1;
    pk->in_place = 1;
    pk->copy = copy;
    if (q8) {
        uint8_t *panels = mem + head + copy_end;
        float *scales = (float *)(panels + q8_panel_bytes);
        const size_t per_thread = (size_t)kp * width * (1 + nib) + (size_t)n_subs * width * sizeof(float) * (1 + mins);
        float *qmins = mins ? scales + groups * width * n_subs : NULL;
#ifdef _OPENMP
#pragma omp parallel for num_threads(pthreads) schedule(static) if (pthreads > 1)
#endif
        for (int64_t g = 0; g < groups; g++) {
            const int tid = tops__thread_num();
            TOPS__NOTE_REGION();
            if (nib)
                tops__pack_amx_nib_panels(kern, &pk->copy, nib_lut, kp, g, 1, panels, scales, qmins,
                                          scratch + (size_t)tid * per_thread);
            else if (amx)
                tops__pack_amx_panels(kern, &pk->copy, !i8_panels, kp, g, 1, panels, scales, qmins,
                                      scratch + (size_t)tid * per_thread);
            else
                tops__pack_q8_panels(kern, &pk->copy, kp, g, 1, panels, scales, qmins, scratch + (size_t)tid * per_thread);
        }
        tops__aligned_free(scratch);
        pk->q8_panels = panels;
        pk->q8_scales = scales;
        pk->q8_mins = qmins;
        pk->q8_bytes = q8_bytes;
        pk->q8_amx = nib ? 3 : amx ? (i8_panels ? 1 : 2) : 0;
        if (nib) memcpy(pk->q8_lut, nib_lut, sizeof nib_lut);
    }
    if (stream) {
        uint8_t *data = mem + stream_at;
#ifdef _OPENMP
#pragma omp parallel for num_threads(pthreads) schedule(static) if (pthreads > 1)
#endif
        for (int64_t g = 0; g < stream_groups; g++) {
            TOPS__NOTE_REGION();
            tops__pack_nibstream(kern, &pk->copy, &stream_form, g, 1, data + g * group_bytes);
        }
        pk->nib_stream = (tops__nibstream){data, group_bytes, stream_form};
    }
    *packed = packed_tensor(right, mem, pk, copy.data);
    return TOPS_OK;
}

/* tops_pack_right's argument checks (CPU). */
static tops_status pack_checks(const char *fn, const tops_exec *exec, const tops_matmul2d_desc *desc,
                               const tops_tensor *right, const tops_tensor *packed, tops_exec *ex) {
    tops_status st = check_desc(fn, desc);
    if (st == TOPS_OK) st = tops__check_tensor(fn, "right", right);
    if (st == TOPS_OK) st = check_exec(fn, exec, ex);
    if (st != TOPS_OK) return st;
    if (!packed) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "packed is NULL");
    if (tops__is_packed(right)) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "right is already packed");
    return TOPS_OK;
}

static tops_status pack_right_with(const char *fn, const tops__kernels *kern, const tops_exec *exec,
                                   const tops_matmul2d_desc *desc, const tops_tensor *right, tops_tensor *packed);

tops_status tops_pack_right(const tops_exec *exec, const tops_matmul2d_desc *desc, const tops_tensor *right,
                            tops_tensor *packed) {
    static const char fn[] = "tops_pack_right";
    if (wants_cuda(exec)) {
        tops_status st = check_cuda_route(fn, exec, desc);
        return st != TOPS_OK ? st : tops__cuda_pack_right(exec, desc, right, packed);
    }
    tops_exec ex;
    tops_status st = pack_checks(fn, exec, desc, right, packed, &ex);
    if (st != TOPS_OK) return st;
    const tops__kernels *kern;
    if ((st = tops__kernels_checked(fn, &kern)) != TOPS_OK) return st;
    return pack_right_with(fn, kern, &ex, desc, right, packed);
}

tops_status tops__pack_right_with(const tops__kernels *kern, const tops_exec *exec, const tops_matmul2d_desc *desc,
                                  const tops_tensor *right, tops_tensor *packed) {
    static const char fn[] = "tops_pack_right";
    tops_exec ex;
    tops_status st = pack_checks(fn, exec, desc, right, packed, &ex);
    return st != TOPS_OK ? st : pack_right_with(fn, kern, &ex, desc, right, packed);
}

/* tops_pack_right on checked arguments with a given kernel table. */
static tops_status pack_right_with(const char *fn, const tops__kernels *kern, const tops_exec *exec,
                                   const tops_matmul2d_desc *desc, const tops_tensor *right, tops_tensor *packed) {
    const tops_exec ex = *exec;
    tops_status st;
    int64_t k, n;
    if ((st = check_right_plain(fn, right, desc->transpose_right, &k, &n)) != TOPS_OK) return st;

    const tops__unpacker *up = &kern->unpack[right->format.id];
    /* Weights with mins (q4_1, q4_K, q5_K) pack in place for the integer
       kernels at every level, relaxed, and strict at AMX levels (the code
       tiles' panels and mins), so packed and plain give the same bits.  Strict
       minifloats with an integer form (e2m3, mxfp6) take f32 panels, as
       fp8 does, but at AMX levels (their code tiles): their strict rows
       read plain weights, and the integer form unpacked per K block ran
       M = 128 at 86 ms against the panels' 64 (Zen 4, 2 threads). */
    const int element_rows = !desc->relaxed_precision && tops__has_element_reader(right) && !kern->amx_bf16t.run;
    const int mins_in_place = desc->relaxed_precision || tops__gemm_amx_supports(kern, right, 0);
    if ((up->run || (up->run_min && mins_in_place)) && desc->transpose_right && !element_rows)
        return pack_in_place(fn, kern, &ex, desc->relaxed_precision, right, k, n, packed);

    const int nr = kern->gemm_f32.nr;
    const int64_t panels = tops__ceil_div(n, nr);
    enum { KC_TMP = 256 };
    size_t head = (sizeof(tops__packed_right) + 63) / 64 * 64, panel_bytes, tmp_bytes, total;
    if (!tops__mul_size((size_t)panels * (size_t)nr, (size_t)k, &panel_bytes) ||
        !tops__mul_size(panel_bytes, sizeof(float), &panel_bytes) ||
        !tops__mul_size((size_t)ex.threads, (size_t)nr * KC_TMP * sizeof(float), &tmp_bytes) ||
        !tops__add_size(head, panel_bytes, &total))
        return tops__fail(TOPS_OVERFLOW, fn, "the packed size overflows size_t");
    unsigned char *mem = tops__aligned_alloc(total);
    float *tmp = tops__aligned_alloc(tmp_bytes);
    if (!mem || !tmp) {
        tops__aligned_free(mem);
        tops__aligned_free(tmp);
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate %zu bytes for the packed weights", total);
    }
    tops__packed_right *pk = (tops__packed_right *)mem;
    float *data = (float *)(mem + head);
    memset(pk, 0, sizeof *pk);
    pk->magic = TOPS_PACKED_MAGIC;
    pk->source = right->format;
    pk->k = k;
    pk->n = n;
    pk->transposed = desc->transpose_right;
    pk->nr = nr;
    pk->panels = data;
    pk->bytes = panel_bytes;
    tops__gemm_operand op = right_operand(kern, right, desc->transpose_right);
    int threads = tops__threads_for(TOPS__WORK_PACK, (double)k * (double)n, ex.threads);
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
#endif
    for (int64_t g = 0; g < panels; g++) {
        const int tid = tops__thread_num();
        TOPS__NOTE_REGION();
        tops__pack_right_panels(kern, &op, k, n, nr, g, 1, data, tmp + (size_t)tid * nr * KC_TMP, KC_TMP);
    }
    (void)threads;
    tops__aligned_free(tmp);
    *packed = packed_tensor(right, mem, pk, data);
    return TOPS_OK;
}
