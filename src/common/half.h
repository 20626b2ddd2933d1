/* SPDX-License-Identifier: BSD-3-Clause */
/* The one definition of fp16 / bf16 <-> fp32 conversion (round to nearest even; a NaN stays a
 * quiet NaN with its sign and upper payload bits, as F16C, NEON and the GPU runtimes convert).
 * Used by the core (container scales), the CPU backend's scalar tiers and the GPU kernels, so the
 * SIMD tiers and the GPU match one scalar definition bit for bit. */
#ifndef KVC_COMMON_HALF_H
#define KVC_COMMON_HALF_H

#include "hd.h"

KVC_HD float kvc_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7FFFu;
    if (em >= 0x7C00u) return kvc_u32_as_f32(sign | 0x7F800000u | ((em & 0x3FFu) << 13)); /* inf, NaN */
    if (em >= 0x0400u) return kvc_u32_as_f32(sign | ((em + ((127u - 15u) << 10)) << 13));  /* normal */
    return kvc_u32_as_f32(sign | kvc_f32_as_u32(kvc_fmul((float)em, 0x1p-24f)));            /* subnormal, exact */
}

/* F. Giesen's float_to_half_fast3_rtne: subnormal results are rounded by the FPU (adding a magic
 * number worth 0.5 in f16 subnormal units), normal ones by integer arithmetic on the bits. */
KVC_HD uint16_t kvc_f32_to_f16(float f)
{
    uint32_t u = kvc_f32_as_u32(f);
    const uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint16_t o;
    if (u >= (127u + 16u) << 23) { /* >= 65536 (smaller values that round to inf carry below) */
        o = u > 0x7F800000u ? (uint16_t)(0x7E00u | ((u >> 13) & 0x3FFu)) : 0x7C00u;
    } else if (u < (113u << 23)) {
        const float magic = kvc_u32_as_f32(((127u - 15u) + (23u - 10u) + 1u) << 23);
        o = (uint16_t)(kvc_f32_as_u32(kvc_fadd(kvc_u32_as_f32(u), magic)) - kvc_f32_as_u32(magic));
    } else {
        const uint32_t mant_odd = (u >> 13) & 1u;
        u += ((uint32_t)(15 - 127) << 23) + 0xFFFu + mant_odd;
        o = (uint16_t)(u >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

KVC_HD float kvc_bf16_to_f32(uint16_t h) { return kvc_u32_as_f32((uint32_t)h << 16); }

KVC_HD uint16_t kvc_f32_to_bf16(float f)
{
    const uint32_t u = kvc_f32_as_u32(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

#endif
