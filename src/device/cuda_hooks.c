/* The CUDA backend's hooks into the layers below it, registered when the
   library is loaded: core's tops_tensor_destroy frees what a cuda:N tensor
   owns (device memory, pack descriptors) through tops__cuda_tensor_release
   (src/cuda/runtime.c).  Static links keep this file through the
   tops__cuda_hooks_anchor symbol that CMakeLists.txt makes the linker pull. */
#include "cuda/cuda_internal.h"
#include "internal.h"

#ifdef TOPS_HAVE_CUDA
__attribute__((constructor)) static void register_cuda_hooks(void) {
    tops__tensor_set_release(TOPS_DEVICE_CUDA, tops__cuda_tensor_release);
}
int tops__cuda_hooks_anchor = 1;
#else
typedef int tops__cuda_hooks_unused; /* no CUDA backend: no device tensor owns anything */
#endif
