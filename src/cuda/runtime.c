/* The public CUDA helpers: devices, memory, copies, tensors in device
   memory.  Every runtime error becomes TOPS_DEVICE_ERROR with the runtime's
   own name for it; a missing GPU or driver is TOPS_UNSUPPORTED_ON_DEVICE. */
#include "cuda/runtime.h"

#include "formats/traits.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* core's tops_tensor_destroy frees what a cuda:N tensor owns through the
   release function the backend registers; every path that gives a tensor
   device memory passes tops__cuda_enter first, so registering there (once)
   is early enough, and nothing below src/cuda names the backend. */
static pthread_once_t release_once = PTHREAD_ONCE_INIT;
static void register_release(void) { (void)tops__tensor_set_release(TOPS_DEVICE_CUDA, tops__cuda_tensor_release); }

tops_status tops__cuda_error(const char *fn, int err, const char *what) {
    cudaError_t e = (cudaError_t)err;
    if (e == cudaErrorMemoryAllocation)
        return tops__fail(TOPS_OUT_OF_MEMORY, fn, "%s: the GPU is out of memory (%s)", what, cudaGetErrorName(e));
    return tops__fail(TOPS_DEVICE_ERROR, fn, "%s failed: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

static int count_devices(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no GPU: not sticky, clear it */
        return 0;
    }
    return n;
}

tops_status tops_cuda_device_count(int *count) {
    if (!count) return tops__fail(TOPS_INVALID_ARGUMENT, "tops_cuda_device_count", "count is NULL");
    *count = count_devices();
    return TOPS_OK;
}

tops_status tops__cuda_check_device(const char *fn, const char *what, int device) {
    int n = count_devices();
    if (n == 0)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "%s is cuda:%d but this machine has no usable CUDA device",
                          what, device);
    if (device < 0 || device >= n)
        return tops__fail(TOPS_UNSUPPORTED_ON_DEVICE, fn, "%s is cuda:%d but this machine has %d CUDA device%s (0..%d)",
                          what, device, n, n == 1 ? "" : "s", n - 1);
    return TOPS_OK;
}

tops_status tops__cuda_enter(const char *fn, int device, int *previous) {
    pthread_once(&release_once, register_release);
    if (cudaGetDevice(previous) != cudaSuccess) *previous = -1;
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) return tops__cuda_error(fn, e, "cudaSetDevice");
    return TOPS_OK;
}

void tops__cuda_leave(int previous) {
    if (previous >= 0) (void)cudaSetDevice(previous);
}

tops_status tops_cuda_get_device_info(int device, tops_cuda_device_info *out) {
    static const char fn[] = "tops_cuda_get_device_info";
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out is NULL");
    tops_status st = tops__cuda_check_device(fn, "device", device);
    if (st != TOPS_OK) return st;
    struct cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) return tops__cuda_error(fn, e, "cudaGetDeviceProperties");
    tops_cuda_device_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.name, sizeof info.name, "%s", prop.name);
    info.major = prop.major;
    info.minor = prop.minor;
    info.sm_count = prop.multiProcessorCount;
    info.memory_bytes = (int64_t)prop.totalGlobalMem;
    info.l2_bytes = prop.l2CacheSize;
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, device) == cudaSuccess) info.clock_khz = v;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, device) == cudaSuccess) info.memory_clock_khz = v;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess) info.memory_bus_bits = v;
    (void)cudaGetLastError();
    (void)cudaRuntimeGetVersion(&info.runtime_version);
    (void)cudaDriverGetVersion(&info.driver_version);
    *out = info;
    return TOPS_OK;
}

int tops__cuda_is_sm90a(int device) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return major == 9 && minor == 0;
}

int tops__cuda_sm_count(int device) {
    static _Atomic int count[64];
    if (device < 0 && (cudaGetDevice(&device) != cudaSuccess || device < 0)) {
        (void)cudaGetLastError();
        return 1;
    }
    int v = device < 64 ? atomic_load_explicit(&count[device], memory_order_relaxed) : 0;
    if (v > 0) return v;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || v < 1) {
        (void)cudaGetLastError();
        return 1;
    }
    if (device < 64) atomic_store_explicit(&count[device], v, memory_order_relaxed);
    return v;
}

tops_status tops__cuda_check_pointer(const char *fn, const char *what, const void *ptr, tops_memory mem) {
    if (mem.kind == TOPS_DEVICE_CPU && mem.index == 0 && count_devices() == 0) return TOPS_OK;
    struct cudaPointerAttributes attr;
    cudaError_t e = cudaPointerGetAttributes(&attr, ptr);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        attr.type = cudaMemoryTypeUnregistered;
        attr.device = -1;
    }
    int on_device = attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
    if (mem.kind == TOPS_DEVICE_CPU) {
        if (attr.type == cudaMemoryTypeDevice)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s is said to be host memory but points into cuda:%d memory",
                              what, attr.device);
        return TOPS_OK;
    }
    if (mem.kind != TOPS_DEVICE_CUDA)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s has memory kind %d, neither host nor cuda", what, (int)mem.kind);
    if (!on_device)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s is said to be cuda:%d memory but points to host memory", what,
                          mem.index);
    if (attr.device != mem.index)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s is said to be cuda:%d memory but lives on cuda:%d", what,
                          mem.index, attr.device);
    return TOPS_OK;
}

tops_status tops__cuda_check_memory(const char *fn, const char *what, const tops_tensor *t, int device) {
    if (t->memory.kind != TOPS_DEVICE_CUDA || t->memory.index != device) {
        if (t->memory.kind == TOPS_DEVICE_CUDA)
            return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s is in cuda:%d memory but exec.device is cuda:%d", what,
                              t->memory.index, device);
        return tops__fail(TOPS_INVALID_ARGUMENT, fn,
                          "%s is in host memory but exec.device is cuda:%d; copy it there with tops_tensor_to", what,
                          device);
    }
    return tops__cuda_check_pointer(fn, what, t->data, t->memory);
}

tops_status tops_cuda_alloc(int device, size_t bytes, void **out) {
    static const char fn[] = "tops_cuda_alloc";
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out is NULL");
    if (bytes == 0) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "bytes is 0; allocate at least one byte");
    tops_status st = tops__cuda_check_device(fn, "device", device);
    if (st != TOPS_OK) return st;
    int prev;
    if ((st = tops__cuda_enter(fn, device, &prev)) != TOPS_OK) return st;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    tops__cuda_leave(prev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return e == cudaErrorMemoryAllocation
                   ? tops__fail(TOPS_OUT_OF_MEMORY, fn, "cuda:%d could not allocate %zu bytes", device, bytes)
                   : tops__cuda_error(fn, e, "cudaMalloc");
    }
    *out = p;
    return TOPS_OK;
}

tops_status tops_cuda_free(int device, void *ptr) {
    static const char fn[] = "tops_cuda_free";
    if (!ptr) return TOPS_OK;
    tops_status st = tops__cuda_check_device(fn, "device", device);
    if (st != TOPS_OK) return st;
    tops_memory mem = {TOPS_DEVICE_CUDA, device};
    if ((st = tops__cuda_check_pointer(fn, "ptr", ptr, mem)) != TOPS_OK) return st;
    int prev;
    if ((st = tops__cuda_enter(fn, device, &prev)) != TOPS_OK) return st;
    cudaError_t e = cudaFree(ptr);
    tops__cuda_leave(prev);
    return e == cudaSuccess ? TOPS_OK : tops__cuda_error(fn, e, "cudaFree");
}

static tops_status check_space(const char *fn, const char *what, tops_memory m) {
    if (m.kind == TOPS_DEVICE_CPU) {
        if (m.index != 0) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s is host:%d; host memory is index 0", what, m.index);
        return TOPS_OK;
    }
    if (m.kind != TOPS_DEVICE_CUDA)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "%s kind is %d, neither host nor cuda", what, (int)m.kind);
    return tops__cuda_check_device(fn, what, m.index);
}

tops_status tops_cuda_copy(void *dst, tops_memory dst_memory, const void *src, tops_memory src_memory, size_t bytes,
                           void *stream) {
    static const char fn[] = "tops_cuda_copy";
    tops_status st;
    if ((st = check_space(fn, "dst_memory", dst_memory)) != TOPS_OK) return st;
    if ((st = check_space(fn, "src_memory", src_memory)) != TOPS_OK) return st;
    if (bytes == 0) return TOPS_OK;
    if (!dst || !src) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "dst and src must not be NULL for %zu bytes", bytes);
    if ((st = tops__cuda_check_pointer(fn, "dst", dst, dst_memory)) != TOPS_OK) return st;
    if ((st = tops__cuda_check_pointer(fn, "src", src, src_memory)) != TOPS_OK) return st;
    int device = dst_memory.kind == TOPS_DEVICE_CUDA ? dst_memory.index : src_memory.index;
    if (dst_memory.kind != TOPS_DEVICE_CUDA && src_memory.kind != TOPS_DEVICE_CUDA) {
        memmove(dst, src, bytes);
        return TOPS_OK;
    }
    int prev;
    if ((st = tops__cuda_enter(fn, device, &prev)) != TOPS_OK) return st;
    cudaError_t e = stream ? cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream)
                           : cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
    tops__cuda_leave(prev);
    return e == cudaSuccess ? TOPS_OK : tops__cuda_error(fn, e, stream ? "cudaMemcpyAsync" : "cudaMemcpy");
}

tops_status tops_cuda_synchronize(const tops_exec *exec) {
    static const char fn[] = "tops_cuda_synchronize";
    tops_status st = tops_exec_validate(exec);
    if (st != TOPS_OK) return st;
    if (exec->device.kind != TOPS_DEVICE_CUDA)
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "exec.device is cpu; there is no GPU stream to wait for");
    if ((st = tops__cuda_check_device(fn, "exec.device", exec->device.index)) != TOPS_OK) return st;
    int prev;
    if ((st = tops__cuda_enter(fn, exec->device.index, &prev)) != TOPS_OK) return st;
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)exec->stream);
    tops__cuda_leave(prev);
    return e == cudaSuccess ? TOPS_OK : tops__cuda_error(fn, e, "cudaStreamSynchronize");
}

tops_status tops__cuda_device_sync(const char *fn, int device) {
    int prev;
    tops_status st = tops__cuda_enter(fn, device, &prev);
    if (st != TOPS_OK) return st;
    cudaError_t e = cudaDeviceSynchronize();
    tops__cuda_leave(prev);
    return e == cudaSuccess ? TOPS_OK : tops__cuda_error(fn, e, "cudaDeviceSynchronize");
}

/* ---- tensors in device memory ------------------------------------------------- */

/* Bytes a plane spans (first entry to last, plus one). */
static size_t plane_span(const tops_plane *p, int rank) {
    size_t esz = (size_t)((tops_dtype_bits(p->dtype) + 7) / 8), last = 0;
    for (int d = 0; d < rank; d++) last += (size_t)(p->extent[d] - 1) * (size_t)p->stride[d];
    return (last + 1) * esz;
}

static size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

tops_status tops_tensor_to(const tops_tensor *src, tops_memory to, tops_tensor *out) {
    static const char fn[] = "tops_tensor_to";
    tops_status st = tops__check_tensor(fn, "src", src);
    if (st != TOPS_OK) return st;
    if (!out) return tops__fail(TOPS_INVALID_ARGUMENT, fn, "out is NULL");
    if (tops__is_packed(src))
        return tops__fail(TOPS_INVALID_ARGUMENT, fn, "src is a packed tensor; pack again for the other device instead");
    if ((st = check_space(fn, "to", to)) != TOPS_OK) return st;
    if ((st = check_space(fn, "src.memory", src->memory)) != TOPS_OK) return st;
    size_t sizes[4] = {0, 0, 0, 0}, offs[4], total = 0;
    if ((st = tops_tensor_data_span(src, &sizes[0])) != TOPS_OK) return st;
    const tops_plane *planes[3] = {&src->scales, &src->bias, &src->codebook};
    for (int p = 0; p < 3; p++)
        if (planes[p]->data) sizes[p + 1] = plane_span(planes[p], src->rank);
    for (int p = 0; p < 4; p++) {
        offs[p] = total;
        if (sizes[p] > SIZE_MAX / 2 || !tops__add_size(total, align256(sizes[p]), &total))
            return tops__fail(TOPS_OVERFLOW, fn, "the tensor's size overflows size_t");
    }
    unsigned char *mem = NULL;
    if (to.kind == TOPS_DEVICE_CUDA) {
        if ((st = tops_cuda_alloc(to.index, total, (void **)&mem)) != TOPS_OK) return st;
    } else {
        mem = tops__aligned_alloc(total);
        if (!mem) return tops__fail(TOPS_OUT_OF_MEMORY, fn, "could not allocate %zu host bytes", total);
    }
    const void *from[4] = {src->data, src->scales.data, src->bias.data, src->codebook.data};
    for (int p = 0; p < 4; p++) {
        if (!from[p]) continue;
        st = tops_cuda_copy(mem + offs[p], to, from[p], src->memory, sizes[p], NULL);
        if (st != TOPS_OK) {
            if (to.kind == TOPS_DEVICE_CUDA) (void)tops_cuda_free(to.index, mem);
            else tops__aligned_free(mem);
            return st;
        }
    }
    tops_tensor t = *src;
    t.data = mem + offs[0];
    if (t.scales.data) t.scales.data = mem + offs[1];
    if (t.bias.data) t.bias.data = mem + offs[2];
    if (t.codebook.data) t.codebook.data = mem + offs[3];
    t.memory = to;
    t.owner_ = mem;
    t.packed_ = NULL;
    *out = t;
    return TOPS_OK;
}

void tops__cuda_tensor_release(tops_tensor *t) {
    int prev;
    if (t->owner_ || t->packed_) {
        if (tops__cuda_enter("tops_tensor_destroy", t->memory.index, &prev) == TOPS_OK) {
            if (t->owner_) (void)cudaFree(t->owner_);
            tops__cuda_leave(prev);
        }
        free((void *)t->packed_);
    }
}
