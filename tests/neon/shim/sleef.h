/* SPDX-License-Identifier: BSD-3-Clause */
/* Stand-in for SLEEF, which is not installed for AArch64 here: cpu_rope.c's scalar sincos calls
 * Sleef_sincosf_u10. The harness never compares sincos between two implementations (the NEON tier
 * uses the scalar sincos itself), so libm's sinf/cosf (sin/cos for the table build's double
 * Sleef_sincos_u35) is enough to make the delta path run. */
#ifndef KVC_NEON_SHIM_SLEEF_H
#define KVC_NEON_SHIM_SLEEF_H
#include <math.h>
typedef struct {
    float x, y;
} Sleef_float2;
static inline Sleef_float2 Sleef_sincosf_u10(float a)
{
    Sleef_float2 r = { sinf(a), cosf(a) };
    return r;
}
typedef struct {
    double x, y;
} Sleef_double2;
static inline Sleef_double2 Sleef_sincos_u35(double a)
{
    Sleef_double2 r = { sin(a), cos(a) };
    return r;
}
#endif
