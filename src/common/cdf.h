/* SPDX-License-Identifier: BSD-3-Clause */
/* The one definition of CacheGen's CDF normalisation (LMCache's, docs/CACHEGEN.md): the counts of
 * one stream over `tokens` symbols become a uint16 CDF of bins + 1 entries,
 *   cdf[s] = floor((65535 - bins) * count(symbol < s) / tokens) + s,   s = 0..bins,
 * so cdf[0] = 0, cdf[bins] = 65535 and the CDF is strictly increasing; tokens = 0 gives cdf[s] = s.
 * The codec (core), the CPU backend and the GPU kernels all call it, so the CDF a container stores
 * and the one the coder uses cannot drift apart. */
#ifndef KVC_COMMON_CDF_H
#define KVC_COMMON_CDF_H

#include "hd.h"

/* floor((65535 - bins) * cum / tokens), 0 when tokens is 0. */
KVC_HD uint32_t kvc_cdf_scaled(uint64_t cum, unsigned bins, uint64_t tokens)
{
    return tokens ? (uint32_t)((uint64_t)(65535u - bins) * cum / tokens) : 0u;
}

/* The CDF from the histogram hist[v * hstride] (v < bins) into cdf[s * cstride]. norm, when not
 * NULL, holds kvc_cdf_scaled(cum, bins, tokens) for cum = 0..tokens (a caller coding many streams
 * of the same token count tabulates the division once). */
KVC_HD void kvc_cdf_from_hist(const uint32_t *hist, unsigned hstride, unsigned bins, uint64_t tokens,
                              const uint16_t *norm, uint16_t *cdf, unsigned cstride)
{
    uint64_t cum = 0;
    for (unsigned s = 0; s <= bins; s++) {
        const uint32_t scaled = norm ? norm[cum] : kvc_cdf_scaled(cum, bins, tokens);
        cdf[s * cstride] = (uint16_t)(scaled + s);
        if (s < bins) cum += hist[s * hstride];
    }
}

#endif
