/* SPDX-License-Identifier: BSD-3-Clause */
/* The fused RoPE call's per-pair combined rotation, shared by the CPU backend (every ISA tier does
 * these operations in this order), the GPU kernels and the GPU emulation, so a GPU context rotates
 * keys exactly like the CPU backend's scalar tier (docs/ROPE.md, "What is computed"). */
#ifndef KVC_COMMON_ROPE_H
#define KVC_COMMON_ROPE_H

#include "hd.h"

/* a*b + c*d: RN(a*b + RN(cd)) plus the exact error of RN(cd) (an FMA), rounded: within about one
 * rounding of the exact value. Symmetric in the two products. */
KVC_HD float kvc_rope_sop(float a, float b, float c, float d)
{
    const float w = kvc_fmul(c, d);
    return kvc_fadd(kvc_ffma(a, b, w), kvc_ffma(c, d, -w));
}

/* a*b - c*d as (RN(ab) - RN(cd)) + (err(ab) - err(cd)): antisymmetric (swapping the products
 * negates it exactly, so the factors of new -> old are exactly (c, -s) of old -> new), and exactly
 * 0 when the products are equal. */
KVC_HD float kvc_rope_dop(float a, float b, float c, float d)
{
    const float p = kvc_fmul(a, b), q = kvc_fmul(c, d);
    return kvc_fadd(kvc_fsub(p, q), kvc_fsub(kvc_ffma(a, b, -p), kvc_ffma(c, d, -q)));
}

/* The range of n = |row_old|^2 |row_new|^2 (about) where the fp32 computation is used. */
#define KVC_ROPE_NORM_MIN 0x1p-60f
#define KVC_ROPE_NORM_MAX 0x1p60f

/* The fallback, in double: each product of two floats is exact, so sd is exactly 0 for equal rows;
 * h = sqrt(cd*cd + sd*sd) cannot overflow or underflow; c = fp32(cd * (1/h)), and c = s = 0 for a
 * zero row (h == 0), as the textbook two steps would give. */
KVC_HD void kvc_rope_combine1_f64(float co, float so, float cn, float sn, float *c, float *s)
{
    const double cd = kvc_dadd(kvc_dmul((double)cn, (double)co), kvc_dmul((double)sn, (double)so));
    const double sd = kvc_dsub(kvc_dmul((double)sn, (double)co), kvc_dmul((double)cn, (double)so));
    const double h = kvc_dsqrt(kvc_dadd(kvc_dmul(cd, cd), kvc_dmul(sd, sd)));
    const double inv = h == 0 ? 0.0 : kvc_ddiv(1.0, h);
    *c = (float)kvc_dmul(cd, inv);
    *s = (float)kvc_dmul(sd, inv);
}

/* Combined rotation of one pair for the fused op: undo (co, so), apply (cn, sn), normalised.
 *   cd = cn*co + sn*so, sd = sn*co - cn*so   in fp32 with FMA-corrected products (kvc_rope_sop,
 *                                            kvc_rope_dop): within about one rounding of the exact
 *                                            value; sd is exactly 0 when both rows are the same
 *                                            (the two products are then one real number), and
 *                                            new -> old gives the same cd and exactly -sd;
 *   n = fma(cd, cd, sd*sd), h = sqrt(n)      = |row_old| * |row_new| within ~2 fp32 roundings;
 *   c = cd / h, s = sd / h                   (divisions, not a reciprocal: cd / sqrt(fp32(cd*cd))
 *                                            is exactly 1, so old == new gives c = 1, s = 0).
 * Normalising removes the rows' norm error (c^2 + s^2 of rounded table entries is not 1), so for
 * old == new the keys come back bit-identical. Where n is outside [2^-60, 2^60] (a zero row, rows
 * far from unit length, NaN) the pair takes kvc_rope_combine1_f64 instead, which cannot overflow or
 * underflow. Every CPU tier and the GPU kernels do these operations in this order (all IEEE: FMA,
 * sqrt, division; nothing else contracted), with the same per-lane choice, so the factors are
 * bit-identical across tiers and backends. Until 2026-12-01 the whole computation was the double
 * one: twice the cost on the CPU (a double square root and division per pair). */
KVC_HD void kvc_rope_combine1(float co, float so, float cn, float sn, float *c, float *s)
{
    const float cd = kvc_rope_sop(cn, co, sn, so), sd = kvc_rope_dop(sn, co, cn, so);
    const float n = kvc_ffma(cd, cd, kvc_fmul(sd, sd));
    if (n >= KVC_ROPE_NORM_MIN && n <= KVC_ROPE_NORM_MAX) {
        const float h = kvc_fsqrt(n);
        *c = kvc_fdiv(cd, h);
        *s = kvc_fdiv(sd, h);
    } else {
        kvc_rope_combine1_f64(co, so, cn, sn, c, s);
    }
}

#endif
