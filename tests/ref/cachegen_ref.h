/* SPDX-License-Identifier: BSD-3-Clause */
/* Scalar reference (test oracle) for CacheGen, written from the definitions in docs/CACHEGEN.md one
 * bit and one element at a time. The coder half is bench/ref_coder.c (it is also the coder
 * benchmark's baseline, and the installed kvcore binary links no test code). */
#ifndef KVC_CACHEGEN_REF_H
#define KVC_CACHEGEN_REF_H

#include <stddef.h>
#include <stdint.h>

#include "../../bench/ref_coder.h"

/* Number conversions from their definitions (round to nearest even). */
float ref_f16_to_f32(uint16_t h);
uint16_t ref_f32_to_f16(float f);
float ref_bf16_to_f32(uint16_t h);
uint16_t ref_f32_to_bf16(float f);

/* docs/LMCACHE.md for one row of n fp32 values with M = bins/2 - 1, in double precision: returns the
 * scale (largest finite |x|, 0 if none) and writes the exact quotient y = x*M/scale per element
 * (0 for NaN, and for inf when scale is 0; clamped to [-M, M]) and the symbol M + rint(y). */
float ref_quantise_row(const float *x, size_t n, unsigned M, double *y, uint8_t *q);

#endif
