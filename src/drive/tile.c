/* The tile engine: matmul into a tile (a tile as the next left input),
   row reductions, maps and stores, without argument checks.  The public
   tile functions (src/ops/tile.c) check, then call these; the attention
   driver calls them directly. */
#include "drive/tile.h"

#include "formats/codec.h"
#include "core/numeric.h"

#include <math.h>
#include <string.h>

/* Rows of a tile are padded to whole strips of the widest microkernel, so
   every kernel level can write full strips. */
static int64_t round_strip(int64_t v) { return (v + TOPS_TILE_STRIP - 1) & ~(int64_t)(TOPS_TILE_STRIP - 1); }

/* ---- matrices inside tensors --------------------------------------------- */

static int is_native(tops_format_id id) {
    return tops__format_is_float(id);
}

tops_status tops__mat_whole(const char *fn, const char *arg, const tops_tensor *t, tops__mat *m) {
    memset(m, 0, sizeof *m);
    m->t = t;
    if (t->rank == 1) {
        m->rows = 1;
        m->cols = t->extent[0];
        return TOPS_OK;
    }
    for (int d = 0; d < t->rank - 2; d++)
        if (t->extent[d] != 1)
            return tops__fail(TOPS_SHAPE_MISMATCH, fn,
                              "%s has extent %lld in dimension %d; a matrix operand needs every dimension but "
                              "the last two to be 1 (slice it first)",
                              arg, (long long)t->extent[d], d);
    m->rows = t->extent[t->rank - 2];
    m->cols = t->extent[t->rank - 1];
    return TOPS_OK;
}

/* Element offset of (r, c) inside m, for plain element formats. */
static int64_t mat_offset(const tops__mat *m, int64_t r, int64_t c) {
    const tops_tensor *t = m->t;
    int rank = t->rank;
    int64_t off = (m->c0 + c) * t->stride[rank - 1];
    if (rank >= 2) off += (m->r0 + r) * t->stride[rank - 2];
    for (int d = 0; d < rank - 2; d++) off += m->outer[d] * t->stride[d];
    return off;
}

static float native_at(const tops_tensor *t, int64_t off) {
    switch (tops__float_of(t)) {
    case TOPS_DT_F32: return ((const float *)t->data)[off];
    case TOPS_DT_F16: return tops__f16_to_f32(((const uint16_t *)t->data)[off]);
    default: return tops__bf16_to_f32(((const uint16_t *)t->data)[off]);
    }
}

/* One row segment of a plain-format matrix into dst (contiguous). */
static void native_row(const tops__kernels *kern, const tops__mat *m, int64_t r, int64_t c, int64_t nc, float *dst) {
    const tops_tensor *t = m->t;
    int64_t off = mat_offset(m, r, c), cs = t->stride[t->rank - 1];
    if (cs == 1 || nc == 1) {
        if (tops__float_of(t) == TOPS_DT_F32)
            memcpy(dst, (const float *)t->data + off, (size_t)nc * sizeof(float));
        else if (tops__float_of(t) == TOPS_DT_F16)
            kern->f16_to_f32_row(dst, (const uint16_t *)t->data + off, nc);
        else
            kern->bf16_to_f32_row(dst, (const uint16_t *)t->data + off, nc);
    } else {
        for (int64_t j = 0; j < nc; j++) dst[j] = native_at(t, off + j * cs);
    }
}

/* One row segment of any matrix into dst (contiguous), every plane applied. */
static void read_row(const tops__kernels *kern, const tops__mat *m, int64_t r, int64_t c, int64_t nc, float *dst) {
    const tops_tensor *t = m->t;
    if (is_native(t->format.id)) {
        native_row(kern, m, r, c, nc, dst);
        if (t->tensor_scale != 1.0f)
            for (int64_t j = 0; j < nc; j++) dst[j] *= t->tensor_scale;
    } else {
        tops__decode_rect(t, t->rank > 2 ? m->outer : NULL, m->r0 + r, 1, m->c0 + c, nc, dst, nc);
    }
}

void tops__mat_read(const tops__kernels *kern, const tops__mat *m, int64_t r, int64_t nr, int64_t c, int64_t nc,
                    float *out, int64_t ld, int transposed) {
    const tops_tensor *t = m->t;
    if (!transposed) {
        if (!is_native(t->format.id)) {
            tops__decode_rect(t, t->rank > 2 ? m->outer : NULL, m->r0 + r, nr, m->c0 + c, nc, out, ld);
            return;
        }
        for (int64_t i = 0; i < nr; i++) read_row(kern, m, r + i, c, nc, out + i * ld);
        return;
    }
    /* Transposed: contiguous f32 rows go through the transposer; anything
       else is read a row segment at a time and scattered. */
    if (tops__float_of(t) == TOPS_DT_F32 && t->tensor_scale == 1.0f && (t->stride[t->rank - 1] == 1 || nc == 1) &&
        (nr == 1 || t->rank >= 2)) {
        int64_t lds = t->rank >= 2 ? t->stride[t->rank - 2] : 0;
        kern->transpose_f32(out, ld, (const float *)t->data + mat_offset(m, r, c), lds, nr, nc);
        return;
    }
    float tmp[256];
    for (int64_t i = 0; i < nr; i++)
        for (int64_t c0 = 0; c0 < nc; c0 += 256) {
            int64_t n = nc - c0 < 256 ? nc - c0 : 256;
            read_row(kern, m, r + i, c + c0, n, tmp);
            for (int64_t j = 0; j < n; j++) out[(c0 + j) * ld + i] = tmp[j];
        }
}

/* ---- the engine ------------------------------------------------------------ */

void tops__tile_matmul(const tops__kernels *kern, int transpose_left, int transpose_right, int accumulate,
                       const tops__mat *left, const tops_tile *left_tile, const tops__mat *right, tops_tile *tile) {
    const int64_t MR = kern->tile_gemm.mr, NR = kern->tile_gemm.nr;
    const int64_t M = tile->rows, N = tile->cols, Np = tops__round_up(N, NR), ldc = tile->ld;
    const int64_t K = transpose_right ? right->cols : right->rows;
    float *bpanel = tile->work_, *apanel = tile->work_ + (int64_t)TOPS_TILE_KC * tile->ld;
    const tops_tensor *rt = right->t;
    /* A contiguous f32 [K, N] right operand is read in place when whole
       strips exist; everything else is laid out in the workspace. */
    int right_direct = !transpose_right && tops__float_of(rt) == TOPS_DT_F32 && rt->tensor_scale == 1.0f &&
                       N % NR == 0 && rt->stride[rt->rank - 1] == 1 && rt->rank >= 2;
    int left_direct = 0;
    if (left_tile)
        left_direct = !transpose_left;
    else {
        const tops_tensor *lt = left->t;
        left_direct = !transpose_left && tops__float_of(lt) == TOPS_DT_F32 && lt->tensor_scale == 1.0f &&
                      (lt->stride[lt->rank - 1] == 1 || K == 1) && (lt->rank >= 2 || M == 1);
    }
    for (int64_t k0 = 0; k0 < K; k0 += TOPS_TILE_KC) {
        int64_t kc = K - k0 < TOPS_TILE_KC ? K - k0 : TOPS_TILE_KC;
        const float *b, *a;
        int64_t ldb, lda;
        if (right_direct) {
            b = (const float *)rt->data + mat_offset(right, k0, 0);
            ldb = rt->stride[rt->rank - 2];
        } else {
            if (transpose_right)
                tops__mat_read(kern, right, 0, N, k0, kc, bpanel, Np, 1);
            else
                tops__mat_read(kern, right, k0, kc, 0, N, bpanel, Np, 0);
            if (Np > N)
                for (int64_t p = 0; p < kc; p++) memset(bpanel + p * Np + N, 0, (size_t)(Np - N) * sizeof(float));
            b = bpanel;
            ldb = Np;
        }
        if (left_direct && left_tile) {
            a = left_tile->data + k0;
            lda = left_tile->ld;
        } else if (left_direct) {
            const tops_tensor *lt = left->t;
            a = (const float *)lt->data + mat_offset(left, 0, k0);
            lda = lt->rank >= 2 ? lt->stride[lt->rank - 2] : 0;
        } else if (left_tile) {
            kern->transpose_f32(apanel, TOPS_TILE_KC, left_tile->data + k0 * left_tile->ld, left_tile->ld, kc, M);
            a = apanel;
            lda = TOPS_TILE_KC;
        } else {
            if (transpose_left)
                tops__mat_read(kern, left, k0, kc, 0, M, apanel, TOPS_TILE_KC, 1);
            else
                tops__mat_read(kern, left, 0, M, k0, kc, apanel, TOPS_TILE_KC, 0);
            a = apanel;
            lda = TOPS_TILE_KC;
        }
        int acc = accumulate || k0 > 0;
        for (int64_t i = 0; i < M; i += MR) {
            int mr = (int)(M - i < MR ? M - i : MR);
            for (int64_t j = 0; j < Np; j += NR)
                kern->tile_gemm.run(mr, kc, a + i * lda, lda, b + j, ldb, tile->data + i * ldc + j, ldc, acc);
        }
    }
}

void tops__tile_reduce_rows(const tops__kernels *kern, const tops_tile *tile, int op, float identity, float *out) {
    for (int32_t i = 0; i < tile->rows; i++)
        out[i] = kern->reduce_f32_row(tile->data + (int64_t)i * tile->ld, tile->cols, op, identity);
}

void tops__tile_reduce_cols(const tops_tile *tile, int op, float identity, float *out) {
    for (int32_t j = 0; j < tile->cols; j++) {
        float acc = identity;
        int nan = isnan(identity);
        for (int32_t i = 0; i < tile->rows; i++) {
            float v = tile->data[(int64_t)i * tile->ld + j];
            nan |= isnan(v);
            if (op == TOPS_REDUCE_SUM)
                acc += v;
            else if (op == TOPS_REDUCE_MAX)
                acc = v > acc ? v : acc;
            else
                acc = v < acc ? v : acc;
        }
        out[j] = nan ? NAN : acc;
    }
}

/* The columns [lo, hi) of a row that a positional mask keeps. */
static void causal_keep(const tops_tile_map_desc *d, int64_t i, int64_t cols, int64_t *lo, int64_t *hi) {
    int64_t q = d->row_offset + i;
    int64_t first = INT64_MIN, end = INT64_MAX; /* key positions kept: [first, end) */
    if (d->window > 0) {
        first = q - d->window + 1;
        end = q + d->window;
    }
    if (d->causal && q + 1 < end) end = q + 1;
    int64_t jlo = first == INT64_MIN ? 0 : first - d->col_offset;
    int64_t jhi = end == INT64_MAX ? cols : end - d->col_offset;
    *lo = jlo < 0 ? 0 : jlo > cols ? cols : jlo;
    *hi = jhi < *lo ? *lo : jhi > cols ? cols : jhi;
}

void tops__tile_map(const tops__kernels *kern, tops_tile *tile, const tops_tile_map_desc *d) {
    const int64_t cols = tile->cols;
    for (int32_t i = 0; i < tile->rows; i++) {
        float *x = tile->data + (int64_t)i * tile->ld;
        float r = d->row_values ? d->row_values[i] : d->value;
        switch (d->op) {
        case TOPS_MAP_SCALE:
            if (r != 1.0f) kern->scale_f32_row(x, cols, r); /* x * 1 is x: online softmax mostly keeps its max */
            break;
        case TOPS_MAP_ADD:
            for (int64_t j = 0; j < cols; j++) x[j] += r;
            break;
        case TOPS_MAP_SUB_EXP: {
            float sum = 0.0f, f = d->scale == 0.0f ? 1.0f : d->scale;
            if (r == -INFINITY) { /* the whole row is masked: zeros, not NaN */
                for (int64_t j = 0; j < cols; j++) x[j] = 0.0f;
            } else if (r == INFINITY) { /* overflowed logits: the +inf ones share the mass */
                for (int64_t j = 0; j < cols; j++) {
                    x[j] = x[j] == INFINITY ? 1.0f : 0.0f;
                    sum += x[j];
                }
            } else if (isnan(r)) {
                for (int64_t j = 0; j < cols; j++) x[j] = NAN;
                sum = NAN;
            } else {
                sum = kern->exp_sub_f32_row(x, cols, r, f);
            }
            if (d->row_sums) d->row_sums[i] = sum;
            break;
        }
        case TOPS_MAP_MASK_CAUSAL: {
            int64_t lo, hi;
            causal_keep(d, i, cols, &lo, &hi);
            for (int64_t j = 0; j < lo; j++) x[j] = -INFINITY;
            for (int64_t j = hi; j < cols; j++) x[j] = -INFINITY;
            break;
        }
        case TOPS_MAP_MASK: {
            const uint8_t *mk = d->mask + (int64_t)i * d->mask_ld;
            for (int64_t j = 0; j < cols; j++)
                if (!mk[j]) x[j] = -INFINITY;
            break;
        }
        case TOPS_MAP_CLAMP:
            for (int64_t j = 0; j < cols; j++) x[j] = x[j] < d->lo ? d->lo : x[j] > d->hi ? d->hi : x[j];
            break;
        case TOPS_MAP_SOFTCAP: {
            float inv = 1.0f / r;
            for (int64_t j = 0; j < cols; j++) x[j] = r * tanhf(x[j] * inv);
            break;
        }
        }
    }
}

void tops__tile_store(const tops__kernels *kern, const tops_tile *tile, const tops__mat *dest) {
    const tops_tensor *t = dest->t;
    int64_t cs = t->stride[t->rank - 1];
    for (int32_t i = 0; i < tile->rows; i++) {
        const float *x = tile->data + (int64_t)i * tile->ld;
        int64_t off = mat_offset(dest, i, 0);
        if (cs == 1 || tile->cols == 1) {
            if (tops__float_of(t) == TOPS_DT_F32)
                memcpy((float *)t->data + off, x, (size_t)tile->cols * sizeof(float));
            else if (tops__float_of(t) == TOPS_DT_F16)
                kern->f32_to_f16_row((uint16_t *)t->data + off, x, tile->cols);
            else
                kern->f32_to_bf16_row((uint16_t *)t->data + off, x, tile->cols);
            continue;
        }
        for (int32_t j = 0; j < tile->cols; j++) {
            int64_t o = off + j * cs;
            if (tops__float_of(t) == TOPS_DT_F32)
                ((float *)t->data)[o] = x[j];
            else if (tops__float_of(t) == TOPS_DT_F16)
                ((uint16_t *)t->data)[o] = tops__f32_to_f16(x[j]);
            else
                ((uint16_t *)t->data)[o] = tops__f32_to_bf16(x[j]);
        }
    }
}

/* ---- storage ------------------------------------------------------------- */

size_t tops__tile_bytes(int32_t rows, int32_t cols) {
    if (rows < 1 || rows > TOPS_TILE_MAX_ROWS || cols < 1 || cols > TOPS_TILE_MAX_COLS) return 0;
    size_t ld = (size_t)round_strip(cols);
    /* accumulators, a right-operand panel of KC x ld, a left panel of rows x KC */
    return ((size_t)rows * ld + (size_t)TOPS_TILE_KC * ld + (size_t)rows * TOPS_TILE_KC) * sizeof(float);
}

void tops__tile_make(tops_tile *tile, int32_t rows, int32_t cols, void *storage) {
    tops_tile t;
    t.magic = TOPS_TILE_MAGIC;
    t.rows = rows;
    t.cols = cols;
    t.ld = (int32_t)round_strip(cols);
    t.data = storage;
    t.work_ = t.data + (size_t)rows * (size_t)t.ld;
    memset(t.data, 0, (size_t)rows * (size_t)t.ld * sizeof(float));
    *tile = t;
}

int32_t tops__tile_ld(int32_t cols) { return (int32_t)round_strip(cols); }
