/* SPDX-License-Identifier: BSD-3-Clause */
/* The CUDA side of the GPU backend: maps the "gpu" vocabulary the shared kernels and module glue
 * of src/backends/gpu are written in onto the CUDA runtime.
 * Its build fragment (src/backends/cuda/cuda.am) puts this folder on the include path, so
 * src/backends/gpu includes "gpu_runtime.h" without naming a vendor. */
#ifndef KVC_CUDA_GPU_RUNTIME_H
#define KVC_CUDA_GPU_RUNTIME_H

#include <stdlib.h>

#include <cuda_runtime.h>
typedef cudaError_t gpuError_t;
typedef cudaStream_t gpuStream_t;
#define gpuSuccess cudaSuccess
#define gpuErrorNoDevice cudaErrorNoDevice
#define gpuErrorMemoryAllocation cudaErrorMemoryAllocation
#define gpuErrorHostMemoryAlreadyRegistered cudaErrorHostMemoryAlreadyRegistered
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuDriverGetVersion cudaDriverGetVersion
#define gpuRuntimeGetVersion cudaRuntimeGetVersion
#define gpuGetErrorString cudaGetErrorString
#define gpuGetErrorName cudaGetErrorName
#define gpuGetLastError cudaGetLastError
#define gpuSetDevice cudaSetDevice
#define gpuDeviceGetPCIBusId cudaDeviceGetPCIBusId
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemcpy cudaMemcpy
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemcpyDefault cudaMemcpyDefault
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemset cudaMemset
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuLaunchHostFunc cudaLaunchHostFunc
#define gpuHostRegister cudaHostRegister
#define gpuHostUnregister cudaHostUnregister
#define gpuHostRegisterDefault cudaHostRegisterDefault
#define gpuHostRegisterMapped cudaHostRegisterMapped
#define gpuHostRegisterIoMemory cudaHostRegisterIoMemory
#define gpuHostGetDevicePointer cudaHostGetDevicePointer
#define gpuPointerGetAttributes cudaPointerGetAttributes
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuMemsetAsync cudaMemsetAsync
#define gpuErrorInvalidValue cudaErrorInvalidValue
typedef cudaEvent_t gpuEvent_t;
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventQuery cudaEventQuery
#define gpuErrorNotReady cudaErrorNotReady
#define gpuEventDestroy cudaEventDestroy
#define gpuHostAllocDefault(p, n) cudaHostAlloc((p), (n), cudaHostAllocDefault)
#define gpuFreeHost cudaFreeHost
#define gpuDeviceGetAttribute cudaDeviceGetAttribute
#define gpuDevAttrMultiProcessorCount cudaDevAttrMultiProcessorCount
#define gpuDevAttrPageableMemoryAccess cudaDevAttrPageableMemoryAccess
#define KVC_GPU_NAME "cuda"
#define KVC_GPU_RUNTIME "CUDA"
#define KVC_GPU_PRIORITY KVC_BACKEND_PRIORITY_CUDA

#include <kvcore/backend.h>

/* Byte swap of a 32-bit word in device code (big-endian stream words). */
#define gpu_bswap32(x) __byte_perm((x), 0u, 0x0123u)

/* The device address of p for a kernel: device and managed memory as is, registered host memory
 * through its device mapping; pageable host memory only when the device reads it coherently
 * (pageable != 0), else NULL. */
static inline void *gpu_host_to_device_ptr(const void *p, int pageable)
{
    cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return pageable ? (void *)p : NULL;
    }
    switch (at.type) {
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged: return (void *)p;
    case cudaMemoryTypeHost: return at.devicePointer ? at.devicePointer : (void *)p;
    default: return pageable ? (void *)p : NULL;
    }
}

/* kvc_residence_kind_t of p, from the pointer attributes (pageable: the device reads pageable
 * memory coherently, so pageable memory is reachable from both sides, like managed memory). */
static inline int gpu_pointer_kind(const void *p, int pageable)
{
    cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        (void)cudaGetLastError();
        at.type = cudaMemoryTypeUnregistered;
    }
    switch (at.type) {
    case cudaMemoryTypeDevice: return KVC_RES_DEVICE;
    case cudaMemoryTypeManaged: return KVC_RES_MANAGED;
    case cudaMemoryTypeHost: return KVC_RES_REGISTERED;
    default: return pageable ? KVC_RES_MANAGED : KVC_RES_PAGEABLE;
    }
}

/* Run fn(arg) on a host thread once the work queued before it on s is done. */
static inline gpuError_t gpu_launch_host_fn(gpuStream_t s, kvc_host_fn_t fn, void *arg)
{
    return cudaLaunchHostFunc(s, fn, arg);
}

#endif
