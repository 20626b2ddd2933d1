/* One kernel source for both vendors: this header maps a small "gpu" vocabulary onto the CUDA or
 * HIP runtime. The same .cu files are compiled by nvcc into kvcore_cuda.so and by hipcc (-x hip,
 * KVC_GPU_HIP defined) into kvcore_hip.so; no hipified copies live in the tree. */
#ifndef KVC_GPU_PORT_H
#define KVC_GPU_PORT_H

#if defined(KVC_GPU_HIP)
#include <hip/hip_runtime.h>
typedef hipError_t gpuError_t;
typedef hipStream_t gpuStream_t;
#define gpuSuccess hipSuccess
#define gpuErrorNoDevice hipErrorNoDevice
#define gpuErrorMemoryAllocation hipErrorOutOfMemory
#define gpuErrorHostMemoryAlreadyRegistered hipErrorHostMemoryAlreadyRegistered
#define gpuGetDeviceCount hipGetDeviceCount
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
#define gpuHostGetDevicePointer hipHostGetDevicePointer
#define gpuPointerGetAttributes hipPointerGetAttributes
#define KVC_GPU_NAME "hip"
#define KVC_GPU_RUNTIME "HIP"
#define KVC_GPU_PRIORITY KVC_BACKEND_PRIORITY_HIP
#else
#include <cuda_runtime.h>
typedef cudaError_t gpuError_t;
typedef cudaStream_t gpuStream_t;
#define gpuSuccess cudaSuccess
#define gpuErrorNoDevice cudaErrorNoDevice
#define gpuErrorMemoryAllocation cudaErrorMemoryAllocation
#define gpuErrorHostMemoryAlreadyRegistered cudaErrorHostMemoryAlreadyRegistered
#define gpuGetDeviceCount cudaGetDeviceCount
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
#define gpuHostGetDevicePointer cudaHostGetDevicePointer
#define gpuPointerGetAttributes cudaPointerGetAttributes
#define KVC_GPU_NAME "cuda"
#define KVC_GPU_RUNTIME "CUDA"
#define KVC_GPU_PRIORITY KVC_BACKEND_PRIORITY_CUDA
#endif

#include <kvcore/backend.h>

/* Per-context state of a GPU backend. The device context is created lazily (first op). */
struct kvc_backend_ctx {
    const kvc_backend_services_t *svc;
    int device;
    int activated; /* gpuSetDevice done on this context's first op */
};

/* The one place that maps a runtime error to a kvcore status (and logs it once, at `level`). */
kvc_status_t kvc_gpu_status(const kvc_backend_services_t *svc, gpuError_t err, const char *what, int level);

#define KVC_GPU_CALL(b, call, level) kvc_gpu_status((b)->svc, (call), #call, (level))

/* Make the context's device current (first use creates the primary context). */
kvc_status_t kvc_gpu_activate(kvc_backend_ctx_t *b);

#endif
