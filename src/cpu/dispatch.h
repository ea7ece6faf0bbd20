/* The dispatch table: filled once with the best kernel of each slot that
   the machine (and TOPS_ISA) allows.  Every slot always has the scalar
   reference as a fallback, and every fast kernel gives the same bits. */
#ifndef TOPS_CPU_DISPATCH_H
#define TOPS_CPU_DISPATCH_H

#include "internal.h"
#include "kernels/kernels.h"

/* The table for this process (never NULL).  If TOPS_ISA was invalid, the
   table runs the machine's best level and *status (if given) holds the
   error with its sentence recorded via tops__fail under fn. */
const tops__kernels *tops__kernels_get(void);
/* As above, but fails (status + sentence naming fn) when TOPS_ISA was invalid:
   ops call this so a bad override is never silently ignored. */
tops_status tops__kernels_checked(const char *fn, const tops__kernels **out);

/* The table of one specific level (for cross-path tests); NULL if the
   machine cannot run it. */
const tops__kernels *tops__kernels_for_isa(tops_isa isa);

/* Detection (features.c), exposed for dispatch.c. */
void tops__detect_cpu(tops_cpu_info *ci);

#endif
