/* The tile engine (src/drive/tile.c) behind the public tile functions,
   without argument checks, for callers that have checked once: the public
   functions (src/ops/tile.c) after their checks, and the attention driver. */
#ifndef TOPS_DRIVE_TILE_H
#define TOPS_DRIVE_TILE_H

#include "cpu/dispatch.h"

#define TOPS_TILE_MAGIC 0x54494c45u /* "TILE" */
/* K is consumed in chunks of this many: it bounds the operand workspace. */
#define TOPS_TILE_KC 128
/* The widest microkernel strip (floats): tile rows are padded to it. */
#define TOPS_TILE_STRIP 32

/* A rectangle of a tensor's last two dimensions, as stored: rows [r0,
   r0 + rows) and columns [c0, c0 + cols), at the outer indices outer[]
   (rank - 2 of them; a rank-1 tensor is one row). */
typedef struct tops__mat {
    const tops_tensor *t;
    int64_t outer[TOPS_MAX_RANK];
    int64_t r0, c0, rows, cols;
} tops__mat;

/* Fills m with the whole matrix of t, or fails (naming fn and arg) when an
   outer extent is not 1. */
tops_status tops__mat_whole(const char *fn, const char *arg, const tops_tensor *t, tops__mat *m);

/* Reads a rectangle (nr x nc, starting at row r, column c inside m) as f32
   into out[i * ld + j], or transposed into out[j * ld + i]. */
void tops__mat_read(const tops__kernels *kern, const tops__mat *m, int64_t r, int64_t nr, int64_t c, int64_t nc,
                    float *out, int64_t ld, int transposed);

/* Bytes of storage a rows x cols tile needs, 0 when out of range
   (tops_tile_storage_bytes). */
size_t tops__tile_bytes(int32_t rows, int32_t cols);
/* Makes a zero-filled tile over storage; rows, cols and the storage were
   checked (tops_tile_init). */
void tops__tile_make(tops_tile *tile, int32_t rows, int32_t cols, void *storage);
/* The row pitch (floats) of a tile of cols columns. */
int32_t tops__tile_ld(int32_t cols);

/* tile = left * right (+ tile); left is a tile (left_tile) or a matrix. */
void tops__tile_matmul(const tops__kernels *kern, int transpose_left, int transpose_right, int accumulate,
                       const tops__mat *left, const tops_tile *left_tile, const tops__mat *right, tops_tile *tile);
void tops__tile_reduce_rows(const tops__kernels *kern, const tops_tile *tile, int op, float identity, float *out);
void tops__tile_reduce_cols(const tops_tile *tile, int op, float identity, float *out);
void tops__tile_map(const tops__kernels *kern, tops_tile *tile, const tops_tile_map_desc *desc);
void tops__tile_store(const tops__kernels *kern, const tops_tile *tile, const tops__mat *dest);

#endif
