/* SPDX-License-Identifier: BSD-3-Clause */
/* The fused RoPE call's per-pair combined rotation, shared by the CPU backend (every ISA tier does
 * these operations in this order), the GPU kernels and the GPU emulation, so a GPU context rotates
 * keys exactly like the CPU backend's scalar tier (docs/ROPE.md, "What is computed"). */
#ifndef KVC_COMMON_ROPE_H
#define KVC_COMMON_ROPE_H

#include "hd.h"

/* Combined rotation of one pair for the fused op: undo (co, so), apply (cn, sn).
 *   cd = cn*co + sn*so, sd = sn*co - cn*so   in double: each product of two floats is exact, so
 *                                            sd is exactly 0 when both rows are the same (equal
 *                                            positions), with or without FMA contraction;
 *   h  = sqrt(cd*cd + sd*sd)                 = |row_old| * |row_new| up to double rounding (no
 *                                            overflow or underflow is possible for float inputs);
 *   c = fp32(cd * (1/h)), s = fp32(sd * (1/h)).
 * Normalising removes the rows' norm error (c^2 + s^2 of rounded table entries is not 1), so for
 * old == new the result is exactly c = 1 (sqrt(cd*cd) == cd in binary floating point, and
 * cd * (1/cd) is within 2^-52 of 1, which rounds to 1 in fp32), s = 0: the keys come back
 * bit-identical. A zero row (h == 0) gives c = s = 0, as the textbook two steps would. The SIMD tiers
 * and the GPU kernels do the same operations in the same order (mul, add, sqrt, div, mul; no FMA),
 * so the factors are bit-identical across tiers and backends. */
KVC_HD void kvc_rope_combine1(float co, float so, float cn, float sn, float *c, float *s)
{
    const double cd = kvc_dadd(kvc_dmul((double)cn, (double)co), kvc_dmul((double)sn, (double)so));
    const double sd = kvc_dsub(kvc_dmul((double)sn, (double)co), kvc_dmul((double)cn, (double)so));
    const double h = kvc_dsqrt(kvc_dadd(kvc_dmul(cd, cd), kvc_dmul(sd, sd)));
    const double inv = h == 0 ? 0.0 : kvc_ddiv(1.0, h);
    *c = (float)kvc_dmul(cd, inv);
    *s = (float)kvc_dmul(sd, inv);
}

#endif
