/* Threads: the default count (src/core/exec.c) and when a call stays on
   the calling thread (src/core/threads.c).  docs/architecture.md "Threads". */
#ifndef TOPS_CORE_THREADS_H
#define TOPS_CORE_THREADS_H

#include <stddef.h>
#include <stdint.h>

/* cgroup v2 cpu.max ("QUOTA PERIOD" or "max PERIOD"): 1 and *cpus =
   ceil(quota / period) (at least 1) for a limit, 0 for "max" (no limit),
   -1 for anything else. */
int tops__parse_cpu_max(const char *text, int *cpus);
/* cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us, same results (a
   negative quota is no limit). */
int tops__parse_cfs_quota(const char *quota, const char *period, int *cpus);
/* OMP_NUM_THREADS: its first list element if a positive integer (capped at
   4096), else 0. */
int tops__parse_omp_num_threads(const char *text);

/* Work kinds, each with its own crossover below which one thread wins. */
typedef enum tops__work_kind {
    TOPS__WORK_GEMM_F32,   /* f32 panels (tops__gemm_run): flops 2 M N K */
    TOPS__WORK_GEMM_Q8,    /* relaxed integer panels (tops__gemm_q8_run): flops */
    TOPS__WORK_GEMV,       /* the M <= 4 rows path (tops__gemv_run): flops */
    TOPS__WORK_ATTENTION,  /* fused attention: flops 2 B H Sq Sk (D + Dv), causal halved */
    TOPS__WORK_PACK,       /* packing weights (tops_pack_right): elements */
    TOPS__WORK_DEPTHWISE,  /* the direct depthwise conv2d (memory-bound): bytes read + written */
} tops__work_kind;

/* The threads a call of `work` units (flops or elements, per kind) uses:
   1 below the kind's threshold, else `threads`. */
int tops__threads_for(tops__work_kind kind, double work, int threads);

/* Counts work done inside active parallel regions (any thread bumps it,
   once per pass through a region's body): tests check that small calls
   enter none. */
void tops__note_region(void);
long tops__regions_entered(void);
/* In a region's body: counts one pass if the region is active (more than
   one thread).  Any thread counts: with a dynamic schedule thread 0 may run
   no iteration at all when the other threads take them first (seen under
   load).  Regions carry if(threads > 1), so a call
   given one thread runs on the caller with no team started. */
#ifdef _OPENMP
#include <omp.h>
#define TOPS__NOTE_REGION()                                                   \
    do {                                                                      \
        if (omp_in_parallel()) tops__note_region();                            \
    } while (0)
#else
#define TOPS__NOTE_REGION() ((void)0)
#endif

/* The calling thread's number in its OpenMP team (0 outside a team or
   without OpenMP): the index of its per-thread workspace. */
static inline int tops__thread_num(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}



/* Per-thread workspaces kept between calls (fresh pages for every call
   cost more than a small matmul) and freed when the thread exits (a
   pthread key's destructor).  tops__thread_buffer returns this thread's
   buffer of the slot, grown to at least `bytes` (64-byte aligned; its
   contents are not kept when it grows), or NULL if allocation fails;
   tops__thread_buffer_trim frees it if it is larger than keep_max. */
typedef enum tops__thread_slot { TOPS__SLOT_GEMM, TOPS__SLOT_ATTENTION, TOPS__SLOT_COUNT_ } tops__thread_slot;
void *tops__thread_buffer(tops__thread_slot slot, size_t bytes);
void tops__thread_buffer_trim(tops__thread_slot slot, size_t keep_max);

#endif
