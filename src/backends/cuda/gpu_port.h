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
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuMemsetAsync hipMemsetAsync
#define gpuErrorInvalidValue hipErrorInvalidValue
typedef hipEvent_t gpuEvent_t;
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventDestroy hipEventDestroy
#define gpuHostAllocDefault(p, n) hipHostMalloc((p), (n), hipHostMallocDefault)
#define gpuFreeHost hipHostFree
#define gpuDeviceGetAttribute hipDeviceGetAttribute
#define gpuDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define gpuDevAttrPageableMemoryAccess hipDeviceAttributePageableMemoryAccess
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
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuMemsetAsync cudaMemsetAsync
#define gpuErrorInvalidValue cudaErrorInvalidValue
typedef cudaEvent_t gpuEvent_t;
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventDestroy cudaEventDestroy
#define gpuHostAllocDefault(p, n) cudaHostAlloc((p), (n), cudaHostAllocDefault)
#define gpuFreeHost cudaFreeHost
#define gpuDeviceGetAttribute cudaDeviceGetAttribute
#define gpuDevAttrMultiProcessorCount cudaDevAttrMultiProcessorCount
#define gpuDevAttrPageableMemoryAccess cudaDevAttrPageableMemoryAccess
#define KVC_GPU_NAME "cuda"
#define KVC_GPU_RUNTIME "CUDA"
#define KVC_GPU_PRIORITY KVC_BACKEND_PRIORITY_CUDA
#endif

#include <kvcore/backend.h>

/* Byte swap of a 32-bit word in device code (big-endian stream words). */
#if defined(KVC_GPU_HIP)
#define gpu_bswap32(x) __builtin_bswap32(x)
#else
#define gpu_bswap32(x) __byte_perm((x), 0u, 0x0123u)
#endif

#endif
