/* matmul2d internals visible to tests: run with a given kernel table
   (one ISA level) instead of the process-wide dispatch. */
#ifndef TOPS_OPS_MATMUL2D_H
#define TOPS_OPS_MATMUL2D_H

#include "cpu/dispatch.h"

struct tops__gemm_operand;

tops_status tops__matmul2d_with(const tops__kernels *kern, const tops_exec *exec, const tops_matmul2d_desc *desc,
                                const tops_tensor *left, const tops_tensor *right, tops_tensor *dest);
/* tops_matmul2d_path (CPU) with a given kernel table. */
tops_status tops__matmul2d_path_with(const tops__kernels *kern, const tops_exec *exec, const tops_matmul2d_desc *desc,
                                     const tops_tensor *left, const tops_tensor *right, const tops_tensor *dest,
                                     char *buf, size_t cap);
/* tops_pack_right (CPU) with a given kernel table: its packed forms are the
   ones that table's drivers read. */
tops_status tops__pack_right_with(const tops__kernels *kern, const tops_exec *exec, const tops_matmul2d_desc *desc,
                                  const tops_tensor *right, tops_tensor *packed);

/* check_right of tops_matmul2d: right is a rank-2 weight (or packed) whose
   blocks run along K; its K and N. */
tops_status tops__matmul2d_check_right(const char *fn, const tops_tensor *right, int transposed, int64_t *k,
                                       int64_t *n);

/* conv2d's entry: the matmul2d plan and drivers with a gathered left
   operand of m rows (desc, right and dest already checked by the caller;
   dest rank 2 [m, N]).  path NULL: runs it; else names the path into path
   (cap bytes) and runs nothing. */
tops_status tops__matmul2d_gathered(const char *fn, const tops__kernels *kern, const tops_exec *exec,
                                    const tops_matmul2d_desc *desc, const struct tops__gemm_operand *left, int64_t m,
                                    const tops_tensor *right, tops_tensor *dest, char *path, size_t cap);

/* conv2d with a given kernel table (src/ops/conv2d.c), for the tests. */
tops_status tops__conv2d_with(const tops__kernels *kern, const tops_exec *exec, const tops_conv2d_desc *desc,
                              const tops_tensor *input, const tops_tensor *weight, tops_tensor *dest);

#endif
