/* Tiles: f32 accumulator blocks in caller storage, and the primitives that
   fused kernels are written with (matmul into a tile, a tile as the next
   left input, reductions with an explicit identity, maps that see their
   row's value, store).  Each public function checks its arguments, then
   calls the engine (src/drive/tile.c) that the attention driver shares. */
#include "drive/tile.h"
#include "formats/traits.h"

#include <math.h>
#include <string.h>

static int is_native(tops_format_id id) {
    return tops__format_is_float(id);
}

/* ---- the public API -------------------------------------------------------- */

size_t tops_tile_storage_bytes(int32_t rows, int32_t cols) { return tops__tile_bytes(rows, cols); }

tops_status tops_tile_init(tops_tile *tile, int32_t rows, int32_t cols, void *storage, size_t storage_bytes) {
    static const char fn[] = "tops_tile_init";
    if (!tile) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "tile is NULL");
    if (rows < 1 || rows > TOPS_TILE_MAX_ROWS)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "rows is %d; it must be 1..%d", rows, TOPS_TILE_MAX_ROWS);
    if (cols < 1 || cols > TOPS_TILE_MAX_COLS)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "cols is %d; it must be 1..%d", cols, TOPS_TILE_MAX_COLS);
    if (!storage) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "storage is NULL");
    if ((uintptr_t)storage % TOPS_TILE_ALIGN != 0)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "storage is not %d-byte aligned", TOPS_TILE_ALIGN);
    size_t need = tops_tile_storage_bytes(rows, cols);
    if (storage_bytes < need)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                          "storage_bytes is %zu but a %d x %d tile needs %zu (tops_tile_storage_bytes)",
                          storage_bytes, rows, cols, need);
    tops__tile_make(tile, rows, cols, storage);
    return TOPS_OK;
}

static tops_status check_tile(const char *fn, const char *arg, const tops_tile *t) {
    if (!t) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s is NULL", arg);
    if (t->magic != TOPS_TILE_MAGIC) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s was not made by tops_tile_init", arg);
    if (t->rows < 1 || t->rows > TOPS_TILE_MAX_ROWS || t->cols < 1 || t->cols > TOPS_TILE_MAX_COLS ||
        t->ld != tops__tile_ld(t->cols) || !t->data || t->work_ != t->data + (size_t)t->rows * (size_t)t->ld)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s is corrupt (%d x %d, ld %d); a tile's fields are read-only",
                          arg, t->rows, t->cols, t->ld);
    return TOPS_OK;
}

tops_status tops_tile_fill(tops_tile *tile, float value) {
    tops_status st = check_tile("tops_tile_fill", "tile", tile);
    if (st != TOPS_OK) return st;
    for (int32_t i = 0; i < tile->rows; i++)
        for (int32_t j = 0; j < tile->cols; j++) tile->data[(int64_t)i * tile->ld + j] = value;
    return TOPS_OK;
}

/* A host tensor in a format the tile engine reads (or, for dest, writes). */
static tops_status check_operand(const char *fn, const char *arg, const tops_tensor *t, int writable,
                                 tops__mat *m) {
    tops_status st = tops__check_tensor(fn, arg, t);
    if (st != TOPS_OK) return st;
    if (t->memory.kind != TOPS_DEVICE_CPU)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "%s lives in device memory; tiles run on the host", arg);
    if (tops__is_packed(t))
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "%s is a packed tensor; tiles read plain or block formats", arg);
    if (writable && !is_native(t->format.id)) {
        char name[48];
        return tops__fail(TOPS_UNSUPPORTED_FORMAT, fn, "%s has format %s; a tile is stored as f32, f16 or bf16",
                          arg, tops_format_name(t->format, name, sizeof name));
    }
    return tops__mat_whole(fn, arg, t, m);
}

tops_status tops_tile_matmul(const tops_matmul2d_desc *desc, tops_tile_input left, const tops_tensor *right,
                             tops_tile *tile) {
    static const char fn[] = "tops_tile_matmul";
    if (!desc) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc is NULL");
    if (desc->mode != TOPS_MULTIPLY && desc->mode != TOPS_MULTIPLY_ACCUMULATE)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.mode is %d; it must be TOPS_MULTIPLY or TOPS_MULTIPLY_ACCUMULATE",
                          (int)desc->mode);
    if ((desc->transpose_left != 0 && desc->transpose_left != 1) ||
        (desc->transpose_right != 0 && desc->transpose_right != 1))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.transpose_left and transpose_right must be 0 or 1");
    if (desc->k < 0 || desc->m_tile < 0 || desc->n_tile < 0)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.k, m_tile and n_tile must be >= 0");
    tops_status st = check_tile(fn, "tile", tile);
    if (st != TOPS_OK) return st;
    if ((left.tensor != NULL) == (left.tile != NULL))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "left must hold exactly one of a tensor or a tile");
    int64_t M, K;
    tops__mat lm, rm;
    if (left.tile) {
        st = check_tile(fn, "left tile", left.tile);
        if (st != TOPS_OK) return st;
        if (left.tile == tile || left.tile->data == tile->data)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "left tile is the destination tile; use two tiles");
        M = desc->transpose_left ? left.tile->cols : left.tile->rows;
        K = desc->transpose_left ? left.tile->rows : left.tile->cols;
    } else {
        st = check_operand(fn, "left", left.tensor, 0, &lm);
        if (st != TOPS_OK) return st;
        M = desc->transpose_left ? lm.cols : lm.rows;
        K = desc->transpose_left ? lm.rows : lm.cols;
    }
    st = check_operand(fn, "right", right, 0, &rm);
    if (st != TOPS_OK) return st;
    int64_t K2 = desc->transpose_right ? rm.cols : rm.rows, N = desc->transpose_right ? rm.rows : rm.cols;
    if (K != K2)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "left has K=%lld but right has K=%lld", (long long)K, (long long)K2);
    if (M != tile->rows || N != tile->cols)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "left * right is %lld x %lld but the tile is %d x %d", (long long)M,
                          (long long)N, tile->rows, tile->cols);
    if (desc->k != 0 && desc->k != K)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "desc.k is %lld but the operands have K=%lld", (long long)desc->k,
                          (long long)K);
    if ((desc->m_tile && desc->m_tile != M) || (desc->n_tile && desc->n_tile != N))
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "desc.m_tile/n_tile (%d, %d) must be 0 or the tile's %d x %d",
                          desc->m_tile, desc->n_tile, tile->rows, tile->cols);
    const tops__kernels *kern;
    st = tops__kernels_checked(fn, &kern);
    if (st != TOPS_OK) return st;
    tops__tile_matmul(kern, desc->transpose_left, desc->transpose_right, desc->mode == TOPS_MULTIPLY_ACCUMULATE,
                      left.tile ? NULL : &lm, left.tile, &rm, tile);
    return TOPS_OK;
}

static tops_status check_reduce(const char *fn, const tops_tile *tile, tops_reduce_op op, const float *out) {
    tops_status st = check_tile(fn, "tile", tile);
    if (st != TOPS_OK) return st;
    if (op != TOPS_REDUCE_SUM && op != TOPS_REDUCE_MAX && op != TOPS_REDUCE_MIN)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "op is %d; it must be TOPS_REDUCE_SUM, _MAX or _MIN", (int)op);
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out is NULL");
    return TOPS_OK;
}

tops_status tops_tile_reduce_rows(const tops_tile *tile, tops_reduce_op op, float identity, float *out) {
    static const char fn[] = "tops_tile_reduce_rows";
    tops_status st = check_reduce(fn, tile, op, out);
    if (st != TOPS_OK) return st;
    const tops__kernels *kern;
    st = tops__kernels_checked(fn, &kern);
    if (st != TOPS_OK) return st;
    tops__tile_reduce_rows(kern, tile, op, identity, out);
    return TOPS_OK;
}

tops_status tops_tile_reduce_cols(const tops_tile *tile, tops_reduce_op op, float identity, float *out) {
    tops_status st = check_reduce("tops_tile_reduce_cols", tile, op, out);
    if (st != TOPS_OK) return st;
    tops__tile_reduce_cols(tile, op, identity, out);
    return TOPS_OK;
}

tops_status tops_tile_map(tops_tile *tile, const tops_tile_map_desc *desc) {
    static const char fn[] = "tops_tile_map";
    tops_status st = check_tile(fn, "tile", tile);
    if (st != TOPS_OK) return st;
    if (!desc) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc is NULL");
    switch (desc->op) {
    case TOPS_MAP_SCALE:
    case TOPS_MAP_ADD:
        break;
    case TOPS_MAP_SUB_EXP:
        if (!isfinite(desc->scale) || desc->scale < 0.0f)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.scale is %g; it must be finite and > 0 (0 = 1)",
                              (double)desc->scale);
        break;
    case TOPS_MAP_SOFTCAP:
        for (int32_t i = 0; i < (desc->row_values ? tile->rows : 1); i++) {
            float r = desc->row_values ? desc->row_values[i] : desc->value;
            if (!(r > 0.0f) || !isfinite(r))
                return tops__fail(TOPS_INVALID_ARGUMENT, fn, "softcap value of row %d is %g; it must be finite and > 0",
                                  i, (double)r);
        }
        break;
    case TOPS_MAP_MASK_CAUSAL:
        if (desc->window < 0)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.window is %lld; it must be >= 0", (long long)desc->window);
        if (desc->causal != 0 && desc->causal != 1)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.causal is %d; it must be 0 or 1", desc->causal);
        if (desc->row_offset < -((int64_t)1 << 60) || desc->row_offset > ((int64_t)1 << 60) ||
            desc->col_offset < -((int64_t)1 << 60) || desc->col_offset > ((int64_t)1 << 60) ||
            desc->window > ((int64_t)1 << 60))
            return tops__fail(TOPS_OVERFLOW, fn, "desc.row_offset, col_offset and window must stay within +-2^60");
        break;
    case TOPS_MAP_MASK:
        if (!desc->mask) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.mask is NULL");
        if (desc->mask_ld < tile->cols && tile->rows > 1)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.mask_ld is %lld; it must be >= the tile's %d columns",
                              (long long)desc->mask_ld, tile->cols);
        break;
    case TOPS_MAP_CLAMP:
        if (!(desc->lo <= desc->hi))
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.lo (%g) must be <= desc.hi (%g), neither NaN",
                              (double)desc->lo, (double)desc->hi);
        break;
    default:
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "desc.op is %d; it is not a tops_tile_map_op", (int)desc->op);
    }
    const tops__kernels *kern;
    st = tops__kernels_checked(fn, &kern);
    if (st != TOPS_OK) return st;
    tops__tile_map(kern, tile, desc);
    return TOPS_OK;
}

tops_status tops_tile_map_fn_apply(tops_tile *tile, tops_tile_map_fn fn_, const float *row_values, void *user) {
    static const char fn[] = "tops_tile_map_fn_apply";
    tops_status st = check_tile(fn, "tile", tile);
    if (st != TOPS_OK) return st;
    if (!fn_) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "fn is NULL");
    for (int32_t i = 0; i < tile->rows; i++) {
        float r = row_values ? row_values[i] : 0.0f;
        float *x = tile->data + (int64_t)i * tile->ld;
        for (int32_t j = 0; j < tile->cols; j++) x[j] = fn_(x[j], r, i, j, user);
    }
    return TOPS_OK;
}

tops_status tops_tile_store(const tops_tile *tile, tops_tensor *dest) {
    static const char fn[] = "tops_tile_store";
    tops_status st = check_tile(fn, "tile", tile);
    if (st != TOPS_OK) return st;
    tops__mat m;
    st = check_operand(fn, "dest", dest, 1, &m);
    if (st != TOPS_OK) return st;
    if (m.rows != tile->rows || m.cols != tile->cols)
        return tops__fail(TOPS_SHAPE_MISMATCH, fn, "dest is %lld x %lld but the tile is %d x %d", (long long)m.rows,
                          (long long)m.cols, tile->rows, tile->cols);
    if (dest->tensor_scale != 1.0f)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "dest has tensor_scale %g; a store writes plain values (1)",
                          (double)dest->tensor_scale);
    const tops__kernels *kern;
    st = tops__kernels_checked(fn, &kern);
    if (st != TOPS_OK) return st;
    tops__tile_store(kern, tile, &m);
    return TOPS_OK;
}
