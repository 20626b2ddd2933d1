/* SPDX-License-Identifier: BSD-3-Clause */
/* The HIP side of the GPU backend: maps the "gpu" vocabulary the shared kernels and module glue
 * of src/backends/gpu are written in onto the HIP runtime.
 * Its build fragment (src/backends/hip/hip.am) puts this folder on the include path, so
 * src/backends/gpu includes "gpu_runtime.h" without naming a vendor. */
#ifndef KVC_HIP_GPU_RUNTIME_H
#define KVC_HIP_GPU_RUNTIME_H

#include <stdlib.h>

#include <hip/hip_runtime.h>
typedef hipError_t gpuError_t;
typedef hipStream_t gpuStream_t;
#define gpuSuccess hipSuccess
#define gpuErrorNoDevice hipErrorNoDevice
#define gpuErrorMemoryAllocation hipErrorOutOfMemory
#define gpuErrorHostMemoryAlreadyRegistered hipErrorHostMemoryAlreadyRegistered
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuDriverGetVersion hipDriverGetVersion
#define gpuRuntimeGetVersion hipRuntimeGetVersion
#define gpuGetErrorString hipGetErrorString
#define gpuGetErrorName hipGetErrorName
#define gpuGetLastError hipGetLastError
#define gpuSetDevice hipSetDevice
#define gpuDeviceGetPCIBusId hipDeviceGetPCIBusId
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemcpy hipMemcpy
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemcpyDefault hipMemcpyDefault
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemset hipMemset
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuLaunchHostFunc hipLaunchHostFunc
#define gpuHostRegister hipHostRegister
#define gpuHostUnregister hipHostUnregister
#define gpuHostRegisterDefault hipHostRegisterDefault
#define gpuHostRegisterMapped hipHostRegisterMapped
#define gpuHostRegisterIoMemory hipHostRegisterIoMemory
#define gpuHostGetDevicePointer hipHostGetDevicePointer
#define gpuPointerGetAttributes hipPointerGetAttributes
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuMemsetAsync hipMemsetAsync
#define gpuErrorInvalidValue hipErrorInvalidValue
typedef hipEvent_t gpuEvent_t;
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventQuery hipEventQuery
#define gpuErrorNotReady hipErrorNotReady
#define gpuEventDestroy hipEventDestroy
#define gpuHostAllocDefault(p, n) hipHostMalloc((p), (n), hipHostMallocDefault)
#define gpuFreeHost hipHostFree
#define gpuDeviceGetAttribute hipDeviceGetAttribute
#define gpuDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define gpuDevAttrPageableMemoryAccess hipDeviceAttributePageableMemoryAccess
#define KVC_GPU_NAME "hip"
#define KVC_GPU_RUNTIME "HIP"
#define KVC_GPU_PRIORITY KVC_BACKEND_PRIORITY_HIP

#include <kvcore/backend.h>

/* Byte swap of a 32-bit word in device code (big-endian stream words). */
#define gpu_bswap32(x) __builtin_bswap32(x)

/* The device address of p for a kernel: device and managed memory as is, registered host memory
 * through its device mapping; pageable host memory only when the device reads it coherently
 * (pageable != 0), else NULL. */
static inline void *gpu_host_to_device_ptr(const void *p, int pageable)
{
    hipPointerAttribute_t at;
    if (hipPointerGetAttributes(&at, p) != hipSuccess) { /* ROCm: unknown (pageable) host memory */
        (void)hipGetLastError();
        return pageable ? (void *)p : NULL;
    }
    if (at.isManaged || at.memoryType == hipMemoryTypeDevice) return (void *)p;
    if (at.memoryType == hipMemoryTypeHost) return at.devicePointer ? at.devicePointer : (void *)p;
    return pageable ? (void *)p : NULL;
}

/* kvc_residence_kind_t of p, from the pointer attributes (pageable: the device reads pageable
 * memory coherently, so pageable memory is reachable from both sides, like managed memory). */
static inline int gpu_pointer_kind(const void *p, int pageable)
{
    hipPointerAttribute_t at;
    if (hipPointerGetAttributes(&at, p) != hipSuccess) { /* ROCm: unknown (pageable) host memory */
        (void)hipGetLastError();
        return pageable ? KVC_RES_MANAGED : KVC_RES_PAGEABLE;
    }
    if (at.isManaged) return KVC_RES_MANAGED;
    if (at.memoryType == hipMemoryTypeDevice) return KVC_RES_DEVICE;
    if (at.memoryType == hipMemoryTypeHost) return KVC_RES_REGISTERED;
    return pageable ? KVC_RES_MANAGED : KVC_RES_PAGEABLE;
}

/* ROCm 5.x declares hipLaunchHostFunc but does not export it; hipStreamAddCallback is the portable
 * equivalent (the callback runs on a runtime thread once prior work on the stream is done). */
typedef struct {
    kvc_host_fn_t fn;
    void *arg;
} host_cb_t;

static inline void hip_stream_cb(hipStream_t s, hipError_t status, void *user)
{
    (void)s;
    (void)status;
    host_cb_t *cb = (host_cb_t *)user;
    cb->fn(cb->arg);
    free(cb);
}

/* Run fn(arg) on a host thread once the work queued before it on s is done. */
static inline gpuError_t gpu_launch_host_fn(gpuStream_t s, kvc_host_fn_t fn, void *arg)
{
    host_cb_t *cb = (host_cb_t *)malloc(sizeof(*cb));
    if (!cb) return hipErrorOutOfMemory;
    cb->fn = fn;
    cb->arg = arg;
    const hipError_t err = hipStreamAddCallback(s, hip_stream_cb, cb, 0);
    if (err != hipSuccess) free(cb);
    return err;
}

#endif
