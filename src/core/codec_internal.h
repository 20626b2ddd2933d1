/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared by the codec (codec.c) and the LMCache interchange (codec_lmcache.c). */
#ifndef KVC_CORE_CODEC_INTERNAL_H
#define KVC_CORE_CODEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <kvcore/types.h>

#include "container.h"

#define KVC_CODEC_LMCACHE_WINDOW 256u /* LMCache's CACHEGEN_GPU_MAX_TOKENS_PER_CHUNK */
#define KVC_CODEC_LMCACHE_MAX_CDF 64u /* LMCache's GPU decoder: CDF entries per stream (its encoder: 48) */
#define KVC_CODEC_LMCACHE_STREAM_BYTES 256u /* its decoder copies at most 256 bytes of each stream */

/* Non-zero when LMCache's GPU decoder cannot take container c (per-channel key scales, windows over
 * 256 tokens, a CDF of more than 64 entries, a window's stream over the decoder's 256-byte row);
 * why receives the reason. */
int kvc_codec_lmcache_unreadable(const kvc_container_t *c, char *why, size_t n);

/* Rate target (codec_rate.c): bins[L] (each even, in [4, KVC_CODEC_RATE_MAX_BINS]) for the L
 * (plane, layer) slices [T, C] of kv that minimise the squared quantisation error summed over
 * slices, with estimated coded bits (streams and stored counts) within budget_bits; all 4
 * when even that exceeds it. -1 when out of memory. */
#define KVC_CODEC_RATE_MAX_BINS 62 /* LMCache's decoder takes CDFs of up to 64 entries */
int kvc_codec_rate_bins(const void *kv, kvc_dtype_t dt, size_t L, size_t T, size_t C, double budget_bits, int threads,
                        uint32_t *bins);

#endif
