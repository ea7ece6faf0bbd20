/* tops_attention's checks and plan, reachable with a chosen kernel table. */
#ifndef TOPS_OPS_ATTENTION_H
#define TOPS_OPS_ATTENTION_H

#include "drive/attention.h"

/* tops_attention with a chosen kernel table (NULL = dispatch's): the
   cross-path tests run every ISA through the same checks and plan. */
tops_status tops__attention_with(const tops__kernels *forced, const tops_exec *exec, const tops_attention_desc *desc,
                                 const tops_tensor *q, const tops_tensor *k, const tops_tensor *v, tops_tensor *out);

#endif
