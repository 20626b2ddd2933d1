/* SPDX-License-Identifier: BSD-3-Clause */
#include "rope_ref.h"

#include <math.h>
#include <string.h>

typedef struct {
    int mant_bits; /* explicit fraction bits */
    int emin;      /* exponent of the smallest normal */
    double max;    /* largest finite value */
} fmt_t;

static fmt_t fmt_of(kvc_dtype_t dt)
{
    switch (dt) {
    case KVC_DTYPE_F16: return (fmt_t){ 10, -14, 65504.0 };
    case KVC_DTYPE_BF16: return (fmt_t){ 7, -126, ldexp(2.0 - ldexp(1.0, -7), 127) };
    default: return (fmt_t){ 23, -126, ldexp(2.0 - ldexp(1.0, -23), 127) };
    }
}

double rope_ref_ulp(double v, kvc_dtype_t dt)
{
    const fmt_t f = fmt_of(dt);
    int e = f.emin + 1;
    if (v != 0) frexp(fabs(v), &e);
    const int binade = e - 1 < f.emin ? f.emin : e - 1;
    return ldexp(1.0, binade - f.mant_bits);
}

double rope_ref_round(double v, kvc_dtype_t dt)
{
    if (v == 0 || isnan(v) || isinf(v)) return v;
    const fmt_t f = fmt_of(dt);
    const double q = rope_ref_ulp(v, dt);
    const double r = nearbyint(v / q) * q; /* q is a power of two: the division is exact */
    return fabs(r) > f.max ? copysign(INFINITY, v) : r;
}

double rope_ref_get(const void *p, kvc_dtype_t dt, size_t i)
{
    if (dt == KVC_DTYPE_F32) return ((const float *)p)[i];
    const uint16_t b = ((const uint16_t *)p)[i];
    if (dt == KVC_DTYPE_BF16) {
        const uint32_t w = (uint32_t)b << 16;
        float f;
        memcpy(&f, &w, sizeof(f));
        return f;
    }
    const int sign = b >> 15, exp = (b >> 10) & 31, man = b & 1023;
    double v;
    if (exp == 0) v = ldexp(man, -24);
    else if (exp == 31) v = man ? NAN : INFINITY;
    else v = ldexp(1024 + man, exp - 25);
    return sign ? -v : v;
}

static uint16_t f16_bits(double r) /* r already representable in binary16 */
{
    const uint16_t sign = signbit(r) ? 0x8000 : 0;
    const double a = fabs(r);
    if (a == 0) return sign;
    if (isinf(a)) return sign | 0x7c00;
    if (isnan(a)) return 0x7e00;
    int e;
    frexp(a, &e);
    if (e - 1 < -14) return sign | (uint16_t)ldexp(a, 24);
    return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)(ldexp(a, -(e - 1)) * 1024 - 1024);
}

void rope_ref_put(void *p, kvc_dtype_t dt, size_t i, double v)
{
    const double r = rope_ref_round(v, dt);
    if (dt == KVC_DTYPE_F32) {
        ((float *)p)[i] = (float)r;
    } else if (dt == KVC_DTYPE_BF16) {
        const float f = (float)r;
        uint32_t w;
        memcpy(&w, &f, sizeof(w));
        ((uint16_t *)p)[i] = (uint16_t)(w >> 16);
    } else {
        ((uint16_t *)p)[i] = f16_bits(r);
    }
}

size_t rope_ref_x(size_t i, size_t rot_dim, int is_neox)
{
    (void)rot_dim;
    return is_neox ? i : 2 * i;
}
size_t rope_ref_y(size_t i, size_t rot_dim, int is_neox) { return is_neox ? i + rot_dim / 2 : 2 * i + 1; }

double rope_ref_theta(size_t i, size_t rot_dim, double base) { return pow(base, -(double)(2 * i) / (double)rot_dim); }

void rope_ref_fused_pair(double x, double y, double co, double so, double cn, double sn, double *xo, double *yo)
{
    const double xr = x * co + y * so, yr = y * co - x * so; /* undo the old rotation */
    *xo = xr * cn - yr * sn;                                   /* apply the new one */
    *yo = yr * cn + xr * sn;
}

void rope_ref_fused_pair_unit(double x, double y, double co, double so, double cn, double sn, double *xo,
                              double *yo)
{
    rope_ref_fused_pair(x, y, co, so, cn, sn, xo, yo);
    const double norms = hypot(co, so) * hypot(cn, sn);
    if (norms > 0) {
        *xo /= norms;
        *yo /= norms;
    }
}

void rope_ref_rotate_pair(double x, double y, double angle, double *xo, double *yo)
{
    *xo = x * cos(angle) - y * sin(angle);
    *yo = y * cos(angle) + x * sin(angle);
}
