/* Shared by the codec (codec.c) and the LMCache interchange (codec_lmcache.c). */
#ifndef KVC_CORE_CODEC_INTERNAL_H
#define KVC_CORE_CODEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "container.h"

#define KVC_CODEC_LMCACHE_WINDOW 256u /* LMCache's CACHEGEN_GPU_MAX_TOKENS_PER_CHUNK */
#define KVC_CODEC_LMCACHE_MAX_CDF 64u /* LMCache's GPU decoder: CDF entries per stream (its encoder: 48) */
#define KVC_CODEC_LMCACHE_STREAM_BYTES 256u /* its decoder copies at most 256 bytes of each stream */

/* SPEC §4.2 normalisation of one stream's counts (over `total` tokens) into a uint16 CDF of
 * bins + 1 entries: cdf[i] = floor((65535 - bins) * cum_i / total) + i. */
static inline void kvc_cdf_from_counts(const uint32_t *cnt, unsigned bins, uint64_t total, uint16_t *cdf)
{
    uint64_t cum = 0;
    for (unsigned i = 0; i <= bins; i++) {
        cdf[i] = (uint16_t)(total ? ((65535u - bins) * cum) / total + i : i);
        if (i < bins) cum += cnt[i];
    }
}

/* Non-zero when LMCache's GPU decoder cannot take container c (per-channel key scales, windows over
 * 256 tokens, a CDF of more than 64 entries, a window's stream over the decoder's 256-byte row);
 * why receives the reason. */
int kvc_codec_lmcache_unreadable(const kvc_container_t *c, char *why, size_t n);

#endif
