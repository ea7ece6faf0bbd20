/* The execution context: threads, device, determinism. */
#include "internal.h"

tops_exec tops_exec_default(void) {
    tops_exec e = {0};
    e.threads = tops_exec_default_threads(NULL, 0); /* src/core/threads.c */
    e.device.kind = TOPS_DEVICE_CPU;
    e.device.index = 0;
    return e;
}

tops_status tops_exec_validate(const tops_exec *exec) {
    static const char fn[] = "tops_exec_validate";
    if (!exec) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "exec is NULL");
    if (exec->threads < 1 || exec->threads > 4096)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "exec.threads is %d; it must be 1..4096",
                          exec->threads);
    if (exec->device.kind != TOPS_DEVICE_CPU && exec->device.kind != TOPS_DEVICE_CUDA)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "exec.device.kind is %d; it must be cpu or cuda",
                          (int)exec->device.kind);
    if (exec->device.index < 0)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "exec.device.index is %d; it must be >= 0",
                          exec->device.index);
    if (exec->device.kind == TOPS_DEVICE_CPU && exec->device.index != 0)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "exec.device is cpu:%d; the CPU is device 0",
                          exec->device.index);
    if (exec->scratch_bytes && !exec->scratch)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "exec.scratch is NULL but scratch_bytes is %zu",
                          exec->scratch_bytes);
    return TOPS_OK;
}

tops_build_info tops_get_build_info(void) {
    tops_build_info b;
#ifdef TOPS_HAVE_OPENMP
    b.openmp = 1;
#else
    b.openmp = 0;
#endif
#ifdef TOPS_HAVE_CUDA
    b.cuda = 1;
#else
    b.cuda = 0;
#endif
#if defined(__clang__)
    b.compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
    b.compiler = "gcc " __VERSION__;
#else
    b.compiler = "unknown";
#endif
#ifdef TOPS_BUILD_TYPE
    b.build_type = TOPS_BUILD_TYPE;
#else
    b.build_type = "unknown";
#endif
    return b;
}
