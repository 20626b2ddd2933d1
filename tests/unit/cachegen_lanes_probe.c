/* SPDX-License-Identifier: BSD-3-Clause */
/* The lane-parallel coder's divide and (avx2) count of leading zeros (cpu_cachegen_lanes.h), built
 * once with the avx512 tier's flags and once with the avx2 tier's for
 * tests/unit/test_cachegen_lanes.c, which calls each only when the CPU has that tier. */
#include <stdint.h>

#include "backends/simd/cpu_cachegen_lanes.h"

#if defined(__AVX512F__)
void cg_lanes_probe_quotient(const uint32_t d[16], const uint32_t r1[16], uint32_t q[16]);

void cg_lanes_probe_quotient(const uint32_t d[16], const uint32_t r1[16], uint32_t q[16])
{
    _mm512_storeu_si512(q, cg_lane_quotient(_mm512_loadu_si512(d), _mm512_loadu_si512(r1)));
}
#else
void cg_lanes_probe_quotient_avx2(const uint32_t d[8], const uint32_t r1[8], uint32_t q[8]);
void cg_lanes_probe_lzcnt_avx2(const uint32_t x[8], uint32_t n[8]);

void cg_lanes_probe_quotient_avx2(const uint32_t d[8], const uint32_t r1[8], uint32_t q[8])
{
    const __m256i vd = _mm256_loadu_si256((const __m256i *)(const void *)d);
    const __m256i vr = _mm256_loadu_si256((const __m256i *)(const void *)r1);
    _mm256_storeu_si256((__m256i *)(void *)q, cg_lane_quotient(vd, vr));
}

void cg_lanes_probe_lzcnt_avx2(const uint32_t x[8], uint32_t n[8])
{
    _mm256_storeu_si256((__m256i *)(void *)n, cg_lane_lzcnt(_mm256_loadu_si256((const __m256i *)(const void *)x)));
}
#endif
