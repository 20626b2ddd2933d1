/* SPDX-License-Identifier: BSD-3-Clause */
/* The lane-parallel decoder's quotient (cpu_cachegen_lanes.h), built with the avx512 tier's flags
 * for tests/unit/test_cachegen_lanes.c, which calls it only when the CPU has that tier. */
#include <stdint.h>

#include "backends/simd/cpu_cachegen_lanes.h"

void cg_lanes_probe_quotient(const uint32_t d[16], const uint32_t r1[16], uint32_t q[16]);

void cg_lanes_probe_quotient(const uint32_t d[16], const uint32_t r1[16], uint32_t q[16])
{
    _mm512_storeu_si512(q, cg_lane_quotient(_mm512_loadu_si512(d), _mm512_loadu_si512(r1)));
}
