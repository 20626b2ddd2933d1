/* SPDX-License-Identifier: BSD-3-Clause */
/* Many fp16 / bf16 values (little-endian bytes) to fp32 at once, for the container's scales (10 K in
 * a small chunk's decode, converted one by one with a branch each: 2 % of a rANS decode). The
 * values of kvc_f16_to_f32 / kvc_bf16_to_f32 (common/half.h) for every finite input; 4 at a time
 * with GCC vector extensions (SSE2 / NEON), the rest through those functions. */
#ifndef KVC_COMMON_HALFS_H
#define KVC_COMMON_HALFS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/half.h"

/* n values from p (2 bytes each) to out; bf16 selects bf16, else fp16. Inputs must be finite (the
 * container's scales are validated first): infinities and NaNs are not converted here. */
static inline void kvc_halfs_to_f32(const uint8_t *p, size_t n, int bf16, float *out)
{
    size_t i = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    typedef uint32_t v4u __attribute__((vector_size(16)));
    typedef int32_t v4s __attribute__((vector_size(16)));
    typedef float v4f __attribute__((vector_size(16)));
    typedef uint16_t v4h __attribute__((vector_size(8)));
    for (; i + 4 <= n; i += 4) {
        v4h h16;
        memcpy(&h16, p + 2 * i, 8);
        const v4u h = __builtin_convertvector(h16, v4u);
        v4u bits;
        if (bf16) bits = h << 16;
        else {
            const v4u sign = (h & 0x8000u) << 16, em = h & 0x7FFFu;
            const v4u normal = sign | ((em + ((127u - 15u) << 10)) << 13);
            /* subnormals and zero: em * 2^-24, exact in fp32 */
            const v4f sub = __builtin_convertvector((v4s)em, v4f) * 0x1p-24f;
            v4u subbits;
            memcpy(&subbits, &sub, sizeof(subbits));
            const v4u is_normal = (v4u)(em >= 0x0400u);
            bits = (normal & is_normal) | ((sign | subbits) & ~is_normal);
        }
        memcpy(out + i, &bits, sizeof(bits));
    }
#endif
    for (; i < n; i++) {
        const uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        out[i] = bf16 ? kvc_bf16_to_f32(h) : kvc_f16_to_f32(h);
    }
}

#endif
