/* Scalar fp16 / bf16 <-> fp32 conversions (round to nearest even), for the core's own use
 * (container scales). The backends convert in SIMD registers. */
#ifndef KVC_CORE_HALF_H
#define KVC_CORE_HALF_H

#include <stdint.h>
#include <string.h>

static inline float kvc_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t kvc_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float kvc_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return kvc_f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) { /* zero or subnormal: man * 2^-24 exactly */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return kvc_f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t kvc_f32_to_f16(float f)
{
    const uint32_t u = kvc_f32_bits(f), sign = (u >> 16) & 0x8000;
    const uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0)); /* inf / NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);                                 /* overflow -> inf */
    if (a < 0x38800000u) { /* subnormal or zero in fp16: round a * 2^24 to an integer */
        const float v = kvc_f32_from_bits(a) * 16777216.0f;
        uint32_t m = (uint32_t)v;
        const float rem = v - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1))) m++;
        return (uint16_t)(sign | m);
    }
    const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u); /* nearest even at bit 13 */
    return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}

static inline float kvc_bf16_to_f32(uint16_t b) { return kvc_f32_from_bits((uint32_t)b << 16); }

static inline uint16_t kvc_f32_to_bf16(float f)
{
    const uint32_t u = kvc_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#endif
