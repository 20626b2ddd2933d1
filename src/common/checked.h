/* SPDX-License-Identifier: BSD-3-Clause */
/* Checked size arithmetic: every size computed from caller input goes through these, so an
 * overflow is an error and never a short buffer. Each returns 1 and sets *out on success, 0 on
 * overflow (then *out is unspecified). */
#ifndef KVC_COMMON_CHECKED_H
#define KVC_COMMON_CHECKED_H

#include <stddef.h>
#include <stdint.h>

static inline int kvc_mul_ok(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline int kvc_add_ok(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }

static inline int kvc_mul3_ok(size_t a, size_t b, size_t c, size_t *out)
{
    size_t ab;
    return kvc_mul_ok(a, b, &ab) && kvc_mul_ok(ab, c, out);
}

static inline int kvc_mul_ok_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }

/* a*b (and a*b*c) as int64, or -1 on overflow or a negative operand (the transfer geometry). */
static inline int64_t kvc_mul2(int64_t a, int64_t b)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return -1;
    return r;
}

static inline int64_t kvc_mul3(int64_t a, int64_t b, int64_t c)
{
    const int64_t ab = kvc_mul2(a, b);
    return ab < 0 ? -1 : kvc_mul2(ab, c);
}

#endif
