/* CacheGen quantiser arithmetic per element (cachegen.h, SPEC §4.5), as KVC_HD functions shared
 * by quant.cu and the CPU-side tests. Bit-exact with the CPU backend's scalar rows
 * (src/backends/simd/cpu_cachegen_quant.c): the same fp16/bf16 conversions (round to nearest
 * even, quiet NaN), the same fp32 operations in the same order, none contracted. */
#ifndef KVC_GPU_QUANT_H
#define KVC_GPU_QUANT_H

#include <kvcore/types.h>

#include "gpu_hd.h"


KVC_HD float kvc_gq_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7FFFu;
    if (em >= 0x7C00u) return kvc_u32_as_f32(sign | 0x7F800000u | ((em & 0x3FFu) << 13)); /* inf, NaN */
    if (em >= 0x0400u) return kvc_u32_as_f32(sign | ((em + ((127u - 15u) << 10)) << 13));  /* normal */
    return kvc_u32_as_f32(sign | kvc_f32_as_u32(kvc_fmul((float)em, 0x1p-24f)));            /* subnormal, exact */
}

/* Round to nearest even (F. Giesen's float_to_half_fast3_rtne); NaN becomes a quiet NaN. */
KVC_HD uint16_t kvc_gq_f32_to_f16(float f)
{
    uint32_t u = kvc_f32_as_u32(f);
    const uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint16_t o;
    if (u >= (127u + 16u) << 23) {
        o = u > 0x7F800000u ? 0x7E00u : 0x7C00u;
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

KVC_HD float kvc_gq_bf16_to_f32(uint16_t h) { return kvc_u32_as_f32((uint32_t)h << 16); }

KVC_HD uint16_t kvc_gq_f32_to_bf16(float f)
{
    const uint32_t u = kvc_f32_as_u32(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

KVC_HD float kvc_gq_load(int dtype, const void *x, uint64_t i)
{
    if (dtype == KVC_DTYPE_F16) return kvc_gq_f16_to_f32(((const uint16_t *)x)[i]);
    if (dtype == KVC_DTYPE_BF16) return kvc_gq_bf16_to_f32(((const uint16_t *)x)[i]);
    return ((const float *)x)[i];
}

KVC_HD void kvc_gq_store(int dtype, void *x, uint64_t i, float v)
{
    if (dtype == KVC_DTYPE_F16) ((uint16_t *)x)[i] = kvc_gq_f32_to_f16(v);
    else if (dtype == KVC_DTYPE_BF16) ((uint16_t *)x)[i] = kvc_gq_f32_to_bf16(v);
    else ((float *)x)[i] = v;
}

/* |x| when finite, else 0 (NaN and inf do not count towards a row's scale). */
KVC_HD float kvc_gq_abs_finite(float x)
{
    const float a = kvc_u32_as_f32(kvc_f32_as_u32(x) & 0x7FFFFFFFu);
    return a <= 0x1.fffffep127f ? a : 0.0f; /* false for inf and NaN */
}

/* Power-of-two factor f applied to both x and scale (cachegen.h). */
KVC_HD float kvc_gq_prescale(float scale)
{
    if (scale < 0x1p-64f) return 0x1p64f;
    if (scale > 0x1p64f) return 0x1p-64f;
    return 1.0f;
}

/* Per-row factors: quantise multiplies by f then inv; dequantise multiplies by step then unscale. */
KVC_HD float kvc_gq_inv(float scale, unsigned m)
{
    return scale > 0.0f ? kvc_fdiv((float)m, kvc_fmul(scale, kvc_gq_prescale(scale))) : 0.0f;
}

KVC_HD float kvc_gq_step(float scale, unsigned m) { return kvc_fdiv(kvc_fmul(scale, kvc_gq_prescale(scale)), (float)m); }

KVC_HD float kvc_gq_unscale(float scale) { return kvc_fdiv(1.0f, kvc_gq_prescale(scale)); }

KVC_HD float kvc_gq_rint(float y)
{
#ifdef KVC_DEVICE_PASS
    return rintf(y);
#else
    return __builtin_nearbyintf(y);
#endif
}

KVC_HD uint8_t kvc_gq_quantise(float x, float f, float inv, unsigned m)
{
    const float mf = (float)m;
    float y = kvc_fmul(kvc_fmul(x, f), inv);
    if (y != y) y = 0.0f; /* NaN, or inf in a row whose scale is 0 */
    y = y < -mf ? -mf : y > mf ? mf : y;
    return (uint8_t)((int)kvc_gq_rint(y) + (int)m);
}

KVC_HD float kvc_gq_dequantise(uint8_t q, float step, float unscale, unsigned m)
{
    return kvc_fmul(kvc_fmul((float)((int)q - (int)m), step), unscale);
}

#endif
