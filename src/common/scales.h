/* SPDX-License-Identifier: BSD-3-Clause */
/* Quantiser scales judged on their bit patterns: a scale is valid when finite and >= 0 (-0
 * included), that is when its pattern is below +inf's or is the sign bit alone. One definition
 * for the container's parse (core) and the dequantiser (CPU backend); GCC vector extensions
 * (SSE2 / NEON), 4 or 8 values at a time, so a call costs far less than a float compare and
 * branch a value. */
#ifndef KVC_COMMON_SCALES_H
#define KVC_COMMON_SCALES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* 1 when some of the n fp32 values at p (host order) is not a valid scale. */
static inline int kvc_scales_bad32(const void *p, size_t n)
{
    typedef uint32_t v4u __attribute__((vector_size(16)));
    typedef int32_t v4s __attribute__((vector_size(16)));
    const uint8_t *b = (const uint8_t *)p;
    const v4u inf = (v4u){ 0 } + 0x7F800000u, mzero = (v4u){ 0 } + 0x80000000u;
    v4s hit = { 0 };
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        v4u v;
        memcpy(&v, b + 4 * i, 16);
        hit |= (v4s)(v >= inf) & (v4s)(v != mzero);
    }
    uint64_t h[2]; /* the lanes or'ed as two words */
    memcpy(h, &hit, sizeof(h));
    int bad = (h[0] | h[1]) != 0;
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, b + 4 * i, 4);
        bad |= u >= 0x7F800000u && u != 0x80000000u;
    }
    return bad;
}

/* 1 when some of the n 16-bit values at p (little-endian) is not a valid scale; inf is the
 * format's +inf pattern (fp16 0x7C00, bf16 0x7F80). */
static inline int kvc_scales_bad16(const void *p, size_t n, uint16_t inf)
{
    const uint8_t *b = (const uint8_t *)p;
    size_t i = 0;
    int bad = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    typedef uint16_t v8u __attribute__((vector_size(16)));
    typedef int16_t v8s __attribute__((vector_size(16)));
    const v8u lim = (v8u){ 0 } + inf, mzero = (v8u){ 0 } + 0x8000u;
    v8s hit = { 0 };
    for (; i + 8 <= n; i += 8) {
        v8u v;
        memcpy(&v, b + 2 * i, 16);
        hit |= (v8s)(v >= lim) & (v8s)(v != mzero);
    }
    uint64_t h[2];
    memcpy(h, &hit, sizeof(h));
    bad = (h[0] | h[1]) != 0;
#endif
    for (; i < n; i++) {
        const uint16_t u = (uint16_t)(b[2 * i] | b[2 * i + 1] << 8);
        bad |= u >= inf && u != 0x8000u;
    }
    return bad;
}

#endif
