/* Host-side helpers shared by the CUDA backend's C files. */
#ifndef TOPS_CUDA_RUNTIME_H
#define TOPS_CUDA_RUNTIME_H

#include "cuda/cuda_internal.h"
#include "internal.h"

#include <cuda_runtime_api.h>

/* A runtime error as a status and sentence ("what failed: name (text)"). */
tops_status tops__cuda_error(const char *fn, int err, const char *what);
/* UNSUPPORTED_ON_DEVICE unless cuda:device exists ("what" names the argument). */
tops_status tops__cuda_check_device(const char *fn, const char *what, int device);
/* Checks that ptr really lives in mem (host, or cuda:N). */
tops_status tops__cuda_check_pointer(const char *fn, const char *what, const void *ptr, tops_memory mem);
/* A call's tensor operand: in cuda:device memory (a sentence naming where it
   is otherwise), its data a pointer of that device. */
tops_status tops__cuda_check_memory(const char *fn, const char *what, const tops_tensor *t, int device);
/* Makes device current, remembering the caller's; tops__cuda_leave restores it. */
tops_status tops__cuda_enter(const char *fn, int device, int *previous);
void tops__cuda_leave(int previous);
/* Whether cuda:device is compute capability 9.0, the one the sm_90a kernels
   (wgmma, TMA) are built for; 0 when it cannot be asked. */
int tops__cuda_is_sm90a(int device);
/* Waits for all work on cuda:device: packed weights must be complete before
   any stream runs a kernel on them (the weight kernels launch as
   programmatic dependents and read weights before their grid-dependency wait). */
tops_status tops__cuda_device_sync(const char *fn, int device);

#endif
