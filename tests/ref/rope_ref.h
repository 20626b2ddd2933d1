/* SPDX-License-Identifier: BSD-3-Clause */
/* Scalar RoPE oracle written from docs/LMCACHE.md, one element at a time, in double precision, with its
 * own dtype conversions (independent of the library's). */
#ifndef KVC_TEST_ROPE_REF_H
#define KVC_TEST_ROPE_REF_H

#include <stddef.h>
#include <stdint.h>

#include <kvcore/rope.h>

/* Element i of a buffer of dtype, as a double (exact). */
double rope_ref_get(const void *p, kvc_dtype_t dt, size_t i);
/* v rounded once to dtype (nearest, ties to even), returned as a double. */
double rope_ref_round(double v, kvc_dtype_t dt);
/* Store rope_ref_round(v) at element i. */
void rope_ref_put(void *p, kvc_dtype_t dt, size_t i, double v);
/* Spacing of dtype values at magnitude |v| (the ulp of the binade holding v; subnormal spacing below). */
double rope_ref_ulp(double v, kvc_dtype_t dt);

/* Element index of component x or y of pair i within a head. */
size_t rope_ref_x(size_t i, size_t rot_dim, int is_neox);
size_t rope_ref_y(size_t i, size_t rot_dim, int is_neox);

/* theta_i = base^(-2i/rot_dim). */
double rope_ref_theta(size_t i, size_t rot_dim, double base);

/* docs/LMCACHE.md fused re-rotation in double for one pair: undo (co, so), apply (cn, sn). */
void rope_ref_fused_pair(double x, double y, double co, double so, double cn, double sn, double *xo, double *yo);

/* kvcore's fused re-rotation: rope_ref_fused_pair divided by the norms of the two table rows,
 * |(co, so)| * |(cn, sn)| (left as is when that product is 0). */
void rope_ref_fused_pair_unit(double x, double y, double co, double so, double cn, double sn, double *xo,
                              double *yo);

/* Rotation of one pair by angle (double, libm). */
void rope_ref_rotate_pair(double x, double y, double angle, double *xo, double *yo);

#endif
