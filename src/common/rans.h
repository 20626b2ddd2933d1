/* SPDX-License-Identifier: BSD-3-Clause */
/* Interleaved rANS, the container's second coder (format 1.2, docs/FORMAT.md "rANS streams",
 * docs/CACHEGEN.md "rANS coder"): the constants and the frequency tables, shared by the codec in
 * the core and the coder in the CPU backend (src/backends/simd/cpu_rans.c). The same quantised
 * symbols and per-(plane, layer, channel) counts as the arithmetic coder; one coded stream per
 * (window, plane and layer, group of up to 8 consecutive channels), one 32-bit state a channel. */
#ifndef KVC_COMMON_RANS_H
#define KVC_COMMON_RANS_H

#include <stddef.h>
#include <stdint.h>

#define KVC_RANS_PROB_BITS 12u                    /* frequencies add up to 2^12 */
#define KVC_RANS_PROB_SCALE (1u << KVC_RANS_PROB_BITS)
#define KVC_RANS_L (1u << 16)                    /* states live in [2^16, 2^32); 16-bit renormalisation */
#define KVC_RANS_GROUP 8u                        /* channels (states) per coded stream */
#define KVC_RANS_MAX_WINDOW (1u << 26)           /* tokens per window: a stream stays below 2^31 bytes */

/* Coded streams per (plane, layer): ceil(C / 8). */
static inline uint64_t kvc_rans_groups(uint64_t channels) { return (channels + KVC_RANS_GROUP - 1) / KVC_RANS_GROUP; }

/* Bytes a stream of g channels and `tokens` symbols each may take (4 bytes of state per channel
 * plus at most one 16-bit word per symbol). */
static inline size_t kvc_rans_bound(size_t g, size_t tokens) { return 4 * g + 2 * g * tokens; }

/* Normalise the counts of one stream (bins symbols adding up to total > 0) to frequencies adding up
 * to 2^12, stored as the cumulative table cum[0..bins] (cum[0] = 0, cum[bins] = 4096): every symbol
 * with a non-zero count keeps a frequency >= 1, a zero count gets 0. Exact integer results. */
static inline void kvc_rans_cum_from_counts(const uint32_t *counts, unsigned bins, uint64_t total, uint16_t *cum)
{
    /* Round to nearest, raise non-zero counts to 1, then give the whole difference to the most
     * frequent symbol (the first one on ties). That symbol stays >= 1: with k <= 64 non-zero symbols
     * each frequency exceeds its exact share by less than 1, so the excess e < k and the largest
     * frequency is >= (4096 + e) / k > e when 4096 > (k - 1)^2 (docs/CACHEGEN.md). */
    uint32_t sum = 0;
    unsigned top = 0;
    /* n / total without a 64-bit divide per bin (a chunk has 64 K tables): n < 2^45 is exact in a
     * double, so the estimate is off by at most one either way, and one step corrects it. */
    const double inv = 1.0 / (double)total;
    for (unsigned s = 0; s < bins; s++) {
        uint32_t f = 0;
        if (counts[s]) {
            const uint64_t n = (uint64_t)counts[s] * KVC_RANS_PROB_SCALE + total / 2;
            uint64_t q = (uint64_t)((double)n * inv);
            q -= q * total > n;          /* estimate one above */
            q += n - q * total >= total; /* estimate one below */
            f = (uint32_t)q;
            if (!f) f = 1;
        }
        cum[s + 1] = (uint16_t)f; /* the frequencies first (f <= 4096), summed in place below */
        sum += f;
        if (counts[s] > counts[top]) top = s;
    }
    cum[top + 1] = (uint16_t)(cum[top + 1] + KVC_RANS_PROB_SCALE - sum); /* in [1, 4096] (above) */
    cum[0] = 0;
    for (unsigned s = 0; s < bins; s++) cum[s + 1] = (uint16_t)(cum[s + 1] + cum[s]);
}

#endif
