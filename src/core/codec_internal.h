/* Shared by the codec (codec.c) and the LMCache interchange (codec_lmcache.c). */
#ifndef KVC_CORE_CODEC_INTERNAL_H
#define KVC_CORE_CODEC_INTERNAL_H

#include <stdint.h>

#define KVC_CODEC_LMCACHE_WINDOW 256u /* LMCache's CACHEGEN_GPU_MAX_TOKENS_PER_CHUNK */

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

#endif
