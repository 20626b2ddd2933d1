/* SPDX-License-Identifier: BSD-3-Clause */
/* Pieces of the lane-parallel arithmetic decoder (cpu_cachegen_avx512.c) that a test checks on
 * their own: include only from code built with the avx512 tier's flags. */
#ifndef KVC_CPU_CACHEGEN_LANES_H
#define KVC_CPU_CACHEGEN_LANES_H

#include <immintrin.h>

/* floor(((d << 16) | 0xFFFF) / (r1 + 1)) in 16 lanes, for r1 + 1 in (2^30, 2^32] (the decoder's
 * range after renormalisation: low < 2^30 or high >= 3 * 2^30) and any d. The numerator (< 2^48)
 * and the divisor are exact doubles and the quotient q is below 2^18; the correctly rounded
 * double quotient is within q * 2^-53 < 2^-35 of q, while a q that is not an integer is at least
 * 1 / (r1 + 1) >= 2^-32 from the next one, so truncating it gives floor(q) with no correction. */
static inline __attribute__((always_inline)) __m512i cg_lane_quotient(__m512i d, __m512i r1)
{
    const __m512d k16 = _mm512_set1_pd(65536.0), kff = _mm512_set1_pd(65535.0), one = _mm512_set1_pd(1.0);
    const __m512d n0 = _mm512_fmadd_pd(_mm512_cvtepu32_pd(_mm512_castsi512_si256(d)), k16, kff);
    const __m512d n1 = _mm512_fmadd_pd(_mm512_cvtepu32_pd(_mm512_extracti64x4_epi64(d, 1)), k16, kff);
    const __m512d r0 = _mm512_add_pd(_mm512_cvtepu32_pd(_mm512_castsi512_si256(r1)), one);
    const __m512d rh = _mm512_add_pd(_mm512_cvtepu32_pd(_mm512_extracti64x4_epi64(r1, 1)), one);
    const __m256i q0 = _mm512_cvttpd_epu32(_mm512_div_pd(n0, r0)), q1 = _mm512_cvttpd_epu32(_mm512_div_pd(n1, rh));
    return _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
}

#endif
