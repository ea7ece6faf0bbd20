/* matmul2d internals visible to tests: run with a given kernel table
   (one ISA level) instead of the process-wide dispatch. */
#ifndef TOPS_OPS_MATMUL2D_H
#define TOPS_OPS_MATMUL2D_H

#include "cpu/dispatch.h"

tops_status tops__matmul2d_with(const tops__kernels *kern, const tops_exec *exec, const tops_matmul2d_desc *desc,
                                const tops_tensor *left, const tops_tensor *right, tops_tensor *dest);
/* tops_pack_right (CPU) with a given kernel table: its packed forms are the
   ones that table's drivers read. */
tops_status tops__pack_right_with(const tops__kernels *kern, const tops_exec *exec, const tops_matmul2d_desc *desc,
                                  const tops_tensor *right, tops_tensor *packed);

#endif
