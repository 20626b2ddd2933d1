/* SPDX-License-Identifier: BSD-3-Clause */
/* The host side of the GPU backend, for tests only (never installed): maps the "gpu" vocabulary
 * the shared kernels and module glue of src/backends/gpu are written in onto a CPU runtime
 * (runtime.cc in this folder), so the very same kernel and glue source, compiled by the host C++
 * compiler, becomes a loadable module (tests/modules/.libs/gpu_host.so, loaded as "cuda").
 *
 *   - kernels: __global__ / __device__ / __shared__ / __launch_bounds__ are plain C++; a launch
 *     (gpuLaunch) queues the kernel on its stream; when the stream runs, every block runs its
 *     threads as fibers on one OS thread, switched only at __syncthreads (a real barrier: no
 *     thread passes it before every live thread of the block has reached it, and threads waiting
 *     at different __syncthreads abort the run). One OS thread runs one block at a time, so a
 *     `static thread_local` array is exactly one block's shared memory.
 *   - memory: device memory comes from an arena mapped twice (docs/GPU.md): the addresses handed
 *     out are inaccessible to the host except while a kernel runs, so host code that dereferences
 *     device memory faults; a kernel argument that points to pageable host memory (neither device
 *     nor registered / page-locked memory) aborts the launch with its name.
 *   - streams: work queued on a stream runs when the host waits for it (stream, event or device
 *     synchronisation, a synchronous copy), in order per stream; results read early are missing.
 * What it cannot show: the device memory model, warp-synchronous behaviour and real timing. */
#ifndef KVC_HOST_GPU_RUNTIME_H
#define KVC_HOST_GPU_RUNTIME_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include <kvcore/backend.h>

typedef enum gpuError {
    gpuSuccess = 0,
    gpuErrorInvalidValue = 1,
    gpuErrorMemoryAllocation = 2,
    gpuErrorInvalidConfiguration = 9,
    gpuErrorNoDevice = 100,
    gpuErrorInvalidDevice = 101,
    gpuErrorInvalidResourceHandle = 400,
    gpuErrorNotReady = 600,
    gpuErrorHostMemoryAlreadyRegistered = 712,
    gpuErrorHostMemoryNotRegistered = 713,
} gpuError_t;

typedef struct gpu_host_stream *gpuStream_t; /* a key only: never dereferenced */
typedef struct gpu_host_event *gpuEvent_t;

typedef enum gpuMemcpyKind {
    gpuMemcpyHostToHost = 0,
    gpuMemcpyHostToDevice = 1,
    gpuMemcpyDeviceToHost = 2,
    gpuMemcpyDeviceToDevice = 3,
    gpuMemcpyDefault = 4,
} gpuMemcpyKind;

enum {
    gpuHostRegisterDefault = 0,
    gpuHostRegisterMapped = 2,
    gpuHostRegisterIoMemory = 4,
    gpuEventDisableTiming = 2,
};

typedef enum gpuDeviceAttr {
    gpuDevAttrMultiProcessorCount = 16,
    gpuDevAttrPageableMemoryAccess = 88,
} gpuDeviceAttr;

gpuError_t gpuGetDeviceCount(int *n);
gpuError_t gpuDriverGetVersion(int *v);
gpuError_t gpuRuntimeGetVersion(int *v);
const char *gpuGetErrorString(gpuError_t e);
const char *gpuGetErrorName(gpuError_t e);
gpuError_t gpuGetLastError(void);
gpuError_t gpuSetDevice(int device);
gpuError_t gpuDeviceGetPCIBusId(char *buf, int len, int device);
gpuError_t gpuDeviceGetAttribute(int *v, gpuDeviceAttr attr, int device);
gpuError_t gpuMalloc(void **p, size_t n);
gpuError_t gpuFree(void *p);
gpuError_t gpuMemcpy(void *dst, const void *src, size_t n, gpuMemcpyKind kind);
gpuError_t gpuMemcpyAsync(void *dst, const void *src, size_t n, gpuMemcpyKind kind, gpuStream_t s);
gpuError_t gpuStreamSynchronize(gpuStream_t s);
gpuError_t gpuDeviceSynchronize(void);
gpuError_t gpuHostRegister(void *p, size_t n, unsigned flags);
gpuError_t gpuHostUnregister(void *p);
gpuError_t gpuHostAlloc(void **p, size_t n);
gpuError_t gpuFreeHost(void *p);
gpuError_t gpuEventCreateWithFlags(gpuEvent_t *e, unsigned flags);
gpuError_t gpuEventRecord(gpuEvent_t e, gpuStream_t s);
gpuError_t gpuEventSynchronize(gpuEvent_t e);
gpuError_t gpuEventQuery(gpuEvent_t e);
gpuError_t gpuEventDestroy(gpuEvent_t e);
#define gpuHostAllocDefault(p, n) gpuHostAlloc((p), (n))

#define KVC_GPU_NAME "cuda" /* stands in for the CUDA module (loaded as kvcore_cuda.so) */
#define KVC_GPU_RUNTIME "CUDA"
#define KVC_GPU_PRIORITY KVC_BACKEND_PRIORITY_CUDA

/* Byte swap of a 32-bit word in device code (big-endian stream words). */
#define gpu_bswap32(x) __builtin_bswap32(x)

/* The device address of p for a kernel: device memory as is, registered and page-locked host
 * memory as is (unified addressing); pageable host memory only when pageable != 0, else NULL. */
void *gpu_host_to_device_ptr(const void *p, int pageable);
/* kvc_residence_kind_t of p. */
int gpu_pointer_kind(const void *p, int pageable);
/* Queue fn(arg) on s: it runs on the host once the work queued before it on s is done. */
gpuError_t gpu_launch_host_fn(gpuStream_t s, kvc_host_fn_t fn, void *arg);

/* ---------------------------------------------------------------- device code */

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local

/* The simulated thread the calling fiber is. */
typedef struct gpu_host_thread {
    uint3 thread_idx, block_idx, block_dim, grid_dim;
} gpu_host_thread_t;
extern thread_local gpu_host_thread_t *gpu_host_self;
#define threadIdx (gpu_host_self->thread_idx)
#define blockIdx (gpu_host_self->block_idx)
#define blockDim (gpu_host_self->block_dim)
#define gridDim (gpu_host_self->grid_dim)

/* Barrier of the block's threads; `site` names the call (threads waiting at different ones abort). */
void gpu_host_syncthreads(const char *site);
#define GPU_HOST_STR2(x) #x
#define GPU_HOST_STR(x) GPU_HOST_STR2(x)
#define __syncthreads() gpu_host_syncthreads(__FILE__ ":" GPU_HOST_STR(__LINE__))

static inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v)
{
    unsigned long long old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v < old && !__atomic_compare_exchange_n(p, &old, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}

static inline unsigned long long atomicMax(unsigned long long *p, unsigned long long v)
{
    unsigned long long old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v > old && !__atomic_compare_exchange_n(p, &old, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}

/* ---------------------------------------------------------------- launches */

/* Queue body on stream s as a grid of grid x block threads (sets the launch error on a bad
 * configuration). */
void gpu_host_launch(const char *kernel, dim3 grid, dim3 block, gpuStream_t s, std::function<void()> body);
/* Abort when a kernel argument points to host memory the device cannot reach. */
void gpu_host_check_arg(const char *kernel, int index, const void *p);

template <typename T> static inline void gpu_host_check_args(const char *, int, const T &) {}
template <typename T> static inline void gpu_host_check_args(const char *k, int i, T *const &p)
{
    gpu_host_check_arg(k, i, (const void *)p);
}

template <typename... P> struct gpu_host_launcher {
    void (*kernel)(P...);
    const char *name;
    dim3 grid, block;
    gpuStream_t stream;
    void operator()(typename std::decay<P>::type... args) const
    {
        std::tuple<typename std::decay<P>::type...> t(args...);
        int i = 0;
        std::apply([&](const auto &...v) { (gpu_host_check_args(name, i++, v), ...); }, t);
        void (*k)(P...) = kernel;
        gpu_host_launch(name, grid, block, stream, [k, t]() { std::apply(k, t); });
    }
};

template <typename... P>
static inline gpu_host_launcher<P...> gpu_host_launch_of(void (*k)(P...), const char *name, dim3 grid, dim3 block,
                                                         gpuStream_t s)
{
    return gpu_host_launcher<P...>{ k, name, grid, block, s };
}

/* The one launch form of src/backends/gpu: kernel<<<grid, block, 0, stream>>>(args) on a GPU. */
#define gpuLaunch(kernel, grid, block, stream) gpu_host_launch_of(kernel, #kernel, (grid), (block), (stream))

#endif
