/* SPDX-License-Identifier: BSD-3-Clause */
/* Reference CacheGen numbers (see cachegen_ref.h): conversions and the quantiser from their
 * definitions; the reference coder is bench/ref_coder.c. */
#include "cachegen_ref.h"

#include <math.h>
#include <string.h>

/* ---- numbers ---- */

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float ref_f16_to_f32(uint16_t h)
{
    const int sign = h >> 15, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    double v;
    if (e == 0x1F) return m ? NAN : (sign ? -INFINITY : INFINITY);
    if (e == 0) v = ldexp(m, -24);
    else v = ldexp(1024 + m, e - 25);
    return (float)(sign ? -v : v);
}

float ref_bf16_to_f32(uint16_t h) { return from_bits((uint32_t)h << 16); }

/* Nearest-even rounding of |f| to a binary format with `mant` stored mantissa bits, exponent bias
 * `bias` and `ebits` exponent bits, from the definition: scale to an integer, rint in double. */
static uint32_t round_to_format(float f, int mant, int bias, int ebits)
{
    const uint32_t sign = signbit(f) ? 1u : 0u, sign_bit = sign << (mant + ebits);
    const uint32_t inf = ((1u << ebits) - 1) << mant;
    if (isnan(f)) return sign_bit | inf | (1u << (mant - 1));
    const double a = fabs((double)f);
    if (isinf(f)) return sign_bit | inf;
    if (a == 0) return sign_bit;
    int e;
    frexp(a, &e);
    int E = e - 1; /* a = 1.x * 2^E */
    const int emin = 1 - bias;
    if (E < emin) { /* subnormal: units of 2^(emin - mant) */
        const double m = nearbyint(ldexp(a, mant - emin));
        return sign_bit | (uint32_t)m; /* m == 2^mant rolls into the smallest normal */
    }
    double m = nearbyint(ldexp(a, mant - E)); /* in [2^mant, 2^(mant+1)] */
    if (m == ldexp(1, mant + 1)) {
        m = ldexp(1, mant);
        E++;
    }
    if (E + bias >= (1 << ebits) - 1) return sign_bit | inf;
    return sign_bit | ((uint32_t)(E + bias) << mant) | ((uint32_t)m - (1u << mant));
}

uint16_t ref_f32_to_f16(float f) { return (uint16_t)round_to_format(f, 10, 15, 5); }
uint16_t ref_f32_to_bf16(float f) { return (uint16_t)round_to_format(f, 7, 127, 8); }

float ref_quantise_row(const float *x, size_t n, unsigned M, double *y, uint8_t *q)
{
    float scale = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabsf(x[i]) > scale) scale = fabsf(x[i]);
    for (size_t i = 0; i < n; i++) {
        double v;
        if (isnan(x[i]) || scale == 0) v = 0; /* includes inf in a row without finite non-zero values */
        else if (isinf(x[i])) v = x[i] > 0 ? M : -(double)M;
        else v = (double)x[i] * M / scale;
        y[i] = v;
        q[i] = (uint8_t)(M + nearbyint(v));
    }
    return scale;
}
