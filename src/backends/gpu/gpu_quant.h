/* SPDX-License-Identifier: BSD-3-Clause */
/* CacheGen quantiser arithmetic per element (cachegen.h, docs/CACHEGEN.md), as KVC_HD functions shared
 * by quant.cu and the CPU-side tests. Bit-exact with the CPU backend's scalar rows
 * (src/backends/simd/cpu_cachegen_quant.c): the same fp16/bf16 conversions (src/common/half.h),
 * the same fp32 operations in the same order, none contracted. */
#ifndef KVC_GPU_QUANT_H
#define KVC_GPU_QUANT_H

#include <kvcore/types.h>

#include "common/half.h"


KVC_HD float kvc_gq_load(int dtype, const void *x, uint64_t i)
{
    if (dtype == KVC_DTYPE_F16) return kvc_f16_to_f32(((const uint16_t *)x)[i]);
    if (dtype == KVC_DTYPE_BF16) return kvc_bf16_to_f32(((const uint16_t *)x)[i]);
    return ((const float *)x)[i];
}

KVC_HD void kvc_gq_store(int dtype, void *x, uint64_t i, float v)
{
    if (dtype == KVC_DTYPE_F16) ((uint16_t *)x)[i] = kvc_f32_to_f16(v);
    else if (dtype == KVC_DTYPE_BF16) ((uint16_t *)x)[i] = kvc_f32_to_bf16(v);
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

KVC_HD uint8_t kvc_gq_quantise(float x, float f, float inv, unsigned m)
{
    const float mf = (float)m;
    float y = kvc_fmul(kvc_fmul(x, f), inv);
    if (y != y) y = 0.0f; /* NaN, or inf in a row whose scale is 0 */
    y = y < -mf ? -mf : y > mf ? mf : y;
    return (uint8_t)((int)kvc_rint(y) + (int)m);
}

KVC_HD float kvc_gq_dequantise(uint8_t q, float step, float unscale, unsigned m)
{
    return kvc_fmul(kvc_fmul((float)((int)q - (int)m), step), unscale);
}

#endif
