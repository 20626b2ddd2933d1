/* SPDX-License-Identifier: BSD-3-Clause */
/* Host/device helpers of src/common: KVC_HD marks a function that nvcc/hipcc compile for both the
 * host and the device and that a plain C compiler compiles as static inline. Arithmetic that the CPU
 * backend, the GPU kernels and the core must compute identically is written once on top of these
 * (the headers of src/common), so tests/unit/test_gpu.c can run the exact code the kernels run on the CPU. Only C
 * that nvcc, hipcc and gcc all accept goes in src/common, and nothing here includes a project or
 * vendor header (docs/ARCHITECTURE.md). */
#ifndef KVC_COMMON_HD_H
#define KVC_COMMON_HD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define KVC_HD static inline __host__ __device__
#else
#define KVC_HD static inline
#endif

/* Device pass of nvcc (__CUDA_ARCH__) or hipcc (__HIP_DEVICE_COMPILE__). */
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define KVC_DEVICE_PASS 1
#endif

/* Leading zeros of a nonzero 32-bit word. */
KVC_HD unsigned kvc_clz32(uint32_t x)
{
#ifdef KVC_DEVICE_PASS
    return (unsigned)__clz((int)x);
#else
    return (unsigned)__builtin_clz(x);
#endif
}

/* Binary operations rounded once each, never contracted into an FMA (results must match the CPU
 * backend bit for bit): the host operator, or the device's round-to-nearest intrinsic. fp32 for the
 * kernels' arithmetic, double for the RoPE factors' double fallback (src/common/rope.h). */
#ifdef KVC_DEVICE_PASS
#define KVC_RN_BINARY(name, type, op, intrinsic) \
    KVC_HD type name(type a, type b) { return intrinsic(a, b); }
#else
#define KVC_RN_BINARY(name, type, op, intrinsic) \
    KVC_HD type name(type a, type b) { return a op b; }
#endif
KVC_RN_BINARY(kvc_fmul, float, *, __fmul_rn)
KVC_RN_BINARY(kvc_fdiv, float, /, __fdiv_rn)
KVC_RN_BINARY(kvc_fadd, float, +, __fadd_rn)
KVC_RN_BINARY(kvc_fsub, float, -, __fsub_rn)
KVC_RN_BINARY(kvc_dmul, double, *, __dmul_rn)
KVC_RN_BINARY(kvc_dadd, double, +, __dadd_rn)
KVC_RN_BINARY(kvc_dsub, double, -, __dsub_rn)
KVC_RN_BINARY(kvc_ddiv, double, /, __ddiv_rn)
#undef KVC_RN_BINARY

/* Correctly rounded square root (IEEE 754 on the host; __dsqrt_rn on the device). */
KVC_HD double kvc_dsqrt(double a)
{
#ifdef KVC_DEVICE_PASS
    return __dsqrt_rn(a);
#else
    return __builtin_sqrt(a);
#endif
}

/* fp32 fused multiply-add, rounded once, and the correctly rounded fp32 square root (the RoPE
 * factors, src/common/rope.h). */
KVC_HD float kvc_ffma(float a, float b, float c)
{
#ifdef KVC_DEVICE_PASS
    return __fmaf_rn(a, b, c);
#else
    return __builtin_fmaf(a, b, c);
#endif
}

KVC_HD float kvc_fsqrt(float a)
{
#ifdef KVC_DEVICE_PASS
    return __fsqrt_rn(a);
#else
    return __builtin_sqrtf(a);
#endif
}

/* Round to the nearest integer, ties to even (the default rounding mode). */
KVC_HD float kvc_rint(float y)
{
#ifdef KVC_DEVICE_PASS
    return rintf(y);
#else
    return __builtin_nearbyintf(y);
#endif
}

KVC_HD uint32_t kvc_f32_as_u32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

KVC_HD float kvc_u32_as_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* a / d and a % d, in 32 bits when both fit (64-bit division is a long software sequence on GPUs). */
KVC_HD void kvc_divmod(uint64_t a, uint64_t d, uint64_t *q, uint64_t *r)
{
    if (((a | d) >> 32) == 0) {
        const uint32_t q32 = (uint32_t)a / (uint32_t)d;
        *q = q32;
        *r = (uint32_t)a - q32 * (uint32_t)d;
    } else {
        *q = a / d;
        *r = a - *q * d;
    }
}

#endif
