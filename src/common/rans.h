/* SPDX-License-Identifier: BSD-3-Clause */
/* Interleaved rANS, the container's second coder (format 1.4, docs/FORMAT.md "rANS streams",
 * docs/CACHEGEN.md "rANS coder"): the constants and the frequency tables, shared by the codec in
 * the core and the coder in the CPU backend (src/backends/simd/cpu_rans.c). The same quantised
 * symbols and per-(plane, layer, channel) counts as the arithmetic coder; one coded stream per
 * (window, plane and layer, 32 consecutive channels), 8 states of 32 bits each coding 4 channels
 * one after another. */
#ifndef KVC_COMMON_RANS_H
#define KVC_COMMON_RANS_H

#include <stdio.h>
#include <stdlib.h>

#include "hd.h"

#define KVC_RANS_PROB_BITS 12u                    /* frequencies add up to 2^12 */
#define KVC_RANS_PROB_SCALE (1u << KVC_RANS_PROB_BITS)
#define KVC_RANS_L (1u << 16)                    /* states live in [2^16, 2^32); 16-bit renormalisation */
#define KVC_RANS_GROUP 8u                        /* states per coded stream: channels per group */
#define KVC_RANS_STREAM_GROUPS 4u                /* groups per stream (rANS containers, the tensor calls) */
#define KVC_RANS_MAX_WINDOW (1u << 24)           /* tokens per window: a stream of 32 channels stays below 2^31 bytes */

/* Coded streams per (plane, layer) of `channels` with `groups` groups of 8 channels a stream. */
KVC_HD uint64_t kvc_rans_streams(uint64_t channels, unsigned groups)
{
    return (channels + (uint64_t)KVC_RANS_GROUP * groups - 1) / ((uint64_t)KVC_RANS_GROUP * groups);
}

/* Bytes a stream of nch channels and `tokens` symbols each may take (4 bytes of state per state,
 * min(8, nch) of them, plus at most one 16-bit word per symbol). */
KVC_HD size_t kvc_rans_bound(size_t nch, size_t tokens)
{
    return 4 * (nch < KVC_RANS_GROUP ? nch : KVC_RANS_GROUP) + 2 * nch * tokens;
}

/* The frequency of a count n of total > 0 before the most frequent symbol takes the difference:
 * round(n * 4096 / total), at least 1 for n > 0. inv = 1.0 / total. n / total without a 64-bit
 * divide (a chunk has 64 K tables): n * 4096 < 2^45 is exact in a double, so the estimate is off
 * by at most one either way, and one step corrects it. */
KVC_HD uint32_t kvc_rans_freq_of(uint64_t count, uint64_t total, double inv)
{
    if (!count) return 0;
    const uint64_t n = count * KVC_RANS_PROB_SCALE + total / 2;
    uint64_t q = (uint64_t)((double)n * inv);
    q -= q * total > n;          /* estimate one above */
    q += n - q * total >= total; /* estimate one below */
    return q ? (uint32_t)q : 1;
}

/* The sum of the frequencies to 2^12 and the cumulative table: give the whole difference to the
 * most frequent symbol (the first one on ties). That symbol stays >= 1: with k <= 64 non-zero
 * symbols each frequency exceeds its exact share by less than 1, so the excess e < k and the
 * largest frequency is >= (4096 + e) / k > e when 4096 > (k - 1)^2 (docs/CACHEGEN.md). cum[s + 1]
 * holds the frequency of s on entry. */
KVC_HD void kvc_rans_cum_finish(unsigned bins, uint32_t sum, unsigned top, uint16_t *cum)
{
    cum[top + 1] = (uint16_t)(cum[top + 1] + KVC_RANS_PROB_SCALE - sum); /* in [1, 4096] (above) */
    cum[0] = 0;
    uint32_t run = 0; /* in a register: cum[s] reloaded would chain a store and a load a bin */
    for (unsigned s = 0; s < bins; s++) cum[s + 1] = (uint16_t)(run += cum[s + 1]);
}

/* Normalise the counts of one stream (bins symbols adding up to total > 0; count s at
 * counts[s * stride]: the GPU kernel keeps its threads' histograms interleaved) to frequencies
 * adding up to 2^12, stored as the cumulative table cum[0..bins] (cum[0] = 0, cum[bins] = 4096):
 * every symbol with a non-zero count keeps a frequency >= 1, a zero count gets 0. Exact integer
 * results. */
KVC_HD void kvc_rans_cum_from_counts_strided(const uint32_t *counts, unsigned stride, unsigned bins, uint64_t total,
                                             uint16_t *cum)
{
    uint32_t sum = 0, best = 0;
    unsigned top = 0;
    const double inv = 1.0 / (double)total;
    for (unsigned s = 0; s < bins; s++) {
        const uint32_t n = counts[(size_t)s * stride];
        const uint32_t f = kvc_rans_freq_of(n, total, inv);
        cum[s + 1] = (uint16_t)f; /* the frequencies first (f <= 4096), summed in place below */
        sum += f;
        top = n > best ? s : top; /* the largest count in a register: counts[top] would chain a load a bin */
        best = n > best ? n : best;
    }
    kvc_rans_cum_finish(bins, sum, top, cum);
}

KVC_HD void kvc_rans_cum_from_counts(const uint32_t *counts, unsigned bins, uint64_t total, uint16_t *cum)
{
    kvc_rans_cum_from_counts_strided(counts, 1, bins, total, cum);
}

/* A table the coders can use (what every decoder and encoder assumes of cum): cum[0] = 0,
 * non-decreasing, cum[bins] = 4096. Tables from kvc_rans_cum_from_counts always are; a caller's
 * own (kvc_rans_encode / kvc_rans_decode in cachegen.h) are checked with this first. */
KVC_HD int kvc_rans_table_ok(const uint16_t *cum, unsigned bins)
{
    unsigned ok = cum[0] == 0 && cum[bins] == KVC_RANS_PROB_SCALE;
    for (unsigned s = 0; s < bins; s++) ok &= cum[s] <= cum[s + 1];
    return (int)ok;
}

/* The words of the data checks' errors, host code shared by the CPU backend and the GPU module so
 * that both say the same (docs/ERRORS.md). Why cum[0..bins] fails kvc_rans_table_ok. */
static inline void kvc_rans_table_why(const uint16_t *c, unsigned bins, char *buf, size_t n)
{
    if (c[0]) {
        snprintf(buf, n, "cum[0] = %u, not 0", c[0]);
    } else if (c[bins] != KVC_RANS_PROB_SCALE) {
        snprintf(buf, n, "cum[%u] = %u, not 4096", bins, c[bins]);
    } else {
        unsigned s = 0;
        while (s + 1 < bins && c[s] <= c[s + 1]) s++;
        snprintf(buf, n, "cum[%u] = %u above cum[%u] = %u (it must not decrease)", s, c[s], s + 1, c[s + 1]);
    }
}

/* Why symbol v at flat index i (layer l, token t, channel c) cannot be encoded with its table. */
static inline void kvc_rans_symbol_why(size_t i, size_t l, size_t t, size_t c, unsigned v, unsigned bins, char *buf, size_t n)
{
    if (v >= bins)
        snprintf(buf, n, "symbols[%zu] (layer %zu, token %zu, channel %zu) = %u is not below num_bins %u", i, l, t, c, v, bins);
    else
        snprintf(buf, n,
                 "symbols[%zu] (layer %zu, token %zu, channel %zu) = %u has frequency 0 in its channel's table "
                 "(cum[%u] = cum[%u]): the tables were not made from these symbols",
                 i, l, t, c, v, v, v + 1);
}

/* The first damaged stream k of Q a layer, each of `span` channels, of `channels`. */
static inline void kvc_rans_corrupt_why(size_t k, size_t Q, size_t span, size_t channels, char *buf, size_t n)
{
    const size_t c = k % Q * span, ce = c + span < channels ? c + span : channels;
    snprintf(buf, n, "rANS stream %zu (layer %zu, channels %zu-%zu) is corrupt: truncated, overlong or not ending in the "
             "encoder's initial states", k, k / Q, c, ce - 1);
}

/* Many streams of one total (a window's channels all count its tokens): freq[n] =
 * kvc_rans_freq_of(n, total) for n in [0, total] once, then a load a bin instead of the division.
 * KVC_RANS_FREQ_TABLE_MAX bounds total (the table's entries). */
#define KVC_RANS_FREQ_TABLE_MAX 65536u

static inline void kvc_rans_freq_table(uint64_t total, uint16_t *freq)
{
    const double inv = 1.0 / (double)total;
    for (uint64_t n = 0; n <= total; n++) freq[n] = (uint16_t)kvc_rans_freq_of(n, total, inv);
}

/* The frequency of every count of `total` tokens (kvc_rans_freq_table) for `bins` bins to
 * normalise, in buf (KVC_RANS_FREQ_STACK entries) or allocated, or NULL (total too large, fewer
 * bins than entries, or no memory: the tables are then made count by count, the same tables).
 * kvc_rans_freq_done frees it. */
#define KVC_RANS_FREQ_STACK 4097
static inline uint16_t *kvc_rans_freq_make(uint64_t total, uint64_t bins, uint16_t *buf)
{
    if (!total || total > KVC_RANS_FREQ_TABLE_MAX || total >= bins) return NULL;
    uint16_t *freq = total < KVC_RANS_FREQ_STACK ? buf : (uint16_t *)malloc((total + 1) * sizeof(uint16_t));
    if (freq) kvc_rans_freq_table(total, freq);
    return freq;
}

static inline void kvc_rans_freq_done(uint16_t *freq, const uint16_t *buf)
{
    if (freq != buf) free(freq);
}

/* kvc_rans_cum_from_counts with freq from kvc_rans_freq_table(total): the same table. Every count
 * is <= total. The running sum is stored as it goes and the most frequent symbol found after it
 * (the first one with the largest count), whose share of the difference is then added to its
 * entry and those above: two short chains instead of the top's compare-and-move chained to the
 * largest count (2.6 cycles a bin before). */
static inline void kvc_rans_cum_from_freq_table(const uint32_t *counts, unsigned bins, const uint16_t *freq, uint16_t *cum)
{
    uint32_t run = 0, best = 0;
    cum[0] = 0;
    for (unsigned s = 0; s < bins; s++) {
        cum[s + 1] = (uint16_t)(run += freq[counts[s]]);
        best = counts[s] > best ? counts[s] : best;
    }
    unsigned top = 0;
    while (counts[top] != best) top++;
    const uint16_t d = (uint16_t)(KVC_RANS_PROB_SCALE - run); /* mod 2^16: the sum may exceed 4096 */
    for (unsigned s = top; s < bins; s++) cum[s + 1] = (uint16_t)(cum[s + 1] + d);
}

#endif
