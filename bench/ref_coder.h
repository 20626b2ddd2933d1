/* SPDX-License-Identifier: BSD-3-Clause */
/* Scalar reference CacheGen coder: the CDF, encoder and decoder written one bit at a time from
 * LMCache's definitions (docs/CACHEGEN.md). Deliberately simple and slow: the baseline of the coder
 * benchmark (bench_coder.c) and the oracle of the coder tests (tests/unit/test_cachegen.c). */
#ifndef KVC_BENCH_REF_CODER_H
#define KVC_BENCH_REF_CODER_H

#include <stddef.h>
#include <stdint.h>

/* The CDF (docs/CACHEGEN.md) of the whole [L, T, C] tensor; cdf is [L, C, B+1]. Symbols must be < B. */
void ref_cg_cdf(const uint8_t *symbols, size_t L, size_t T, size_t C, unsigned B, uint16_t *cdf);

/* Encoder (docs/CACHEGEN.md) for one stream: T symbols read at sym[t * stride]. Writes at most
 * cap bytes to out and returns the full stream length (which may exceed cap). */
size_t ref_cg_encode_stream(const uint16_t *cdf, unsigned B, const uint8_t *sym, size_t T, size_t stride,
                            uint8_t *out, size_t cap);

/* Decoder for one stream of len bytes (bytes past len read as zero); symbols to out[t * stride]. */
void ref_cg_decode_stream(const uint16_t *cdf, unsigned B, const uint8_t *bytes, size_t len, size_t T,
                          uint8_t *out, size_t stride);

/* Whole tensors, stream k = l*C + c: streams [L, C, cap], lengths [L, C] (full lengths). */
void ref_cg_encode(const uint16_t *cdf, unsigned B, const uint8_t *symbols, size_t L, size_t T, size_t C,
                   uint8_t *streams, size_t cap, int32_t *lengths);
void ref_cg_decode(const uint16_t *cdf, unsigned B, const uint8_t *streams, size_t cap, const int32_t *lengths,
                   size_t L, size_t T, size_t C, uint8_t *symbols);

#endif
