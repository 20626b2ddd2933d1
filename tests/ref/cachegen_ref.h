/* Scalar reference (test oracle) for CacheGen, written from SPEC.md §4.2-4.5 one bit and one
 * element at a time. Deliberately simple and slow; shared by the tests and the coder benchmark. */
#ifndef KVC_CACHEGEN_REF_H
#define KVC_CACHEGEN_REF_H

#include <stddef.h>
#include <stdint.h>

/* SPEC §4.2 for the whole [L, T, C] tensor; cdf is [L, C, B+1]. Symbols must be < B. */
void ref_cg_cdf(const uint8_t *symbols, size_t L, size_t T, size_t C, unsigned B, uint16_t *cdf);

/* SPEC §4.3 for one stream: T symbols read at sym[t * stride]. Writes at most cap bytes to out
 * and returns the full stream length (which may exceed cap). */
size_t ref_cg_encode_stream(const uint16_t *cdf, unsigned B, const uint8_t *sym, size_t T, size_t stride,
                            uint8_t *out, size_t cap);

/* SPEC §4.4 for one stream of len bytes (bytes past len read as zero); symbols to out[t * stride]. */
void ref_cg_decode_stream(const uint16_t *cdf, unsigned B, const uint8_t *bytes, size_t len, size_t T,
                          uint8_t *out, size_t stride);

/* Whole tensors, stream k = l*C + c: streams [L, C, cap], lengths [L, C] (full lengths). */
void ref_cg_encode(const uint16_t *cdf, unsigned B, const uint8_t *symbols, size_t L, size_t T, size_t C,
                   uint8_t *streams, size_t cap, int32_t *lengths);
void ref_cg_decode(const uint16_t *cdf, unsigned B, const uint8_t *streams, size_t cap, const int32_t *lengths,
                   size_t L, size_t T, size_t C, uint8_t *symbols);

/* Number conversions from their definitions (round to nearest even). */
float ref_f16_to_f32(uint16_t h);
uint16_t ref_f32_to_f16(float f);
float ref_bf16_to_f32(uint16_t h);
uint16_t ref_f32_to_bf16(float f);

/* SPEC §4.5 for one row of n fp32 values with M = bins/2 - 1, in double precision: returns the
 * scale (largest finite |x|, 0 if none) and writes the exact quotient y = x*M/scale per element
 * (0 for NaN, and for inf when scale is 0; clamped to [-M, M]) and the symbol M + rint(y). */
float ref_quantise_row(const float *x, size_t n, unsigned M, double *y, uint8_t *q);

#endif
