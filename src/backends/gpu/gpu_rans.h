/* SPDX-License-Identifier: BSD-3-Clause */
/* Interleaved rANS for one GPU thread (docs/FORMAT.md "rANS streams", docs/GPU.md), written as
 * KVC_HD functions so the same code runs in the kernels (rans.cu) and, on the CPU, in the gpu_host
 * emulator the tests load (tests/modules/gpu_emu.c). One thread codes one stream: a group of up
 * to 8 channels, their states in an array, in the format's order. Written from the format, not
 * from the CPU backend's coder (src/backends/simd/cpu_rans.c), whose bytes and statuses tests
 * compare it with. The data checks the core leaves to backends are here too, one stream or one
 * symbol per call, so kernels and emulator judge alike. */
#ifndef KVC_GPU_RANS_H
#define KVC_GPU_RANS_H

#include "common/rans.h"

/* Count one channel's symbols (token t at sym[t * sym_stride], each < bins) into counts[s * stride]
 * and turn them into its table cum[0..bins] (tokens >= 1). */
KVC_HD void kvc_gpu_rans_table(const uint8_t *sym, uint64_t sym_stride, uint64_t tokens, unsigned bins, uint32_t *counts,
                               unsigned stride, uint16_t *cum)
{
    for (unsigned s = 0; s < bins; s++) counts[s * stride] = 0;
    for (uint64_t t = 0; t < tokens; t++) counts[sym[t * sym_stride] * stride]++;
    kvc_rans_cum_from_counts_strided(counts, stride, bins, tokens, cum);
}

/* A symbol to encode has a frequency in its channel's table (s < bins, cum[s + 1] > cum[s]). */
KVC_HD int kvc_gpu_rans_has_freq(const uint16_t *cum, unsigned bins, unsigned s)
{
    return s < bins && cum[s + 1] > cum[s];
}

/* Encode g (1..8) channels: symbol t of channel i is sym[t * sym_stride + i], coded with the table
 * cum + i * (bins + 1); every symbol has a frequency (checked before). out holds
 * cap >= kvc_rans_bound(g, tokens) bytes: the words are written backwards from its end, then moved
 * behind the states. Returns the stream's length. */
KVC_HD uint64_t kvc_gpu_rans_encode_group(const uint8_t *sym, uint64_t sym_stride, uint64_t tokens, unsigned g,
                                          const uint16_t *cum, unsigned bins, uint8_t *out, uint64_t cap)
{
    uint32_t x[KVC_RANS_GROUP];
    for (unsigned i = 0; i < g; i++) x[i] = KVC_RANS_L;
    uint64_t w = cap;
    for (uint64_t t = tokens; t-- > 0;) {
        const uint8_t *row = sym + t * sym_stride;
        for (unsigned i = g; i-- > 0;) {
            const uint16_t *c = cum + i * (bins + 1);
            const unsigned s = row[i];
            const uint32_t lo = c[s], f = (uint32_t)c[s + 1] - lo;
            if ((uint64_t)x[i] >= (uint64_t)f << (32 - KVC_RANS_PROB_BITS)) { /* coding would leave [2^16, 2^32) */
                w -= 2;
                out[w] = (uint8_t)x[i];
                out[w + 1] = (uint8_t)(x[i] >> 8);
                x[i] >>= 16;
            }
            x[i] = (x[i] / f << KVC_RANS_PROB_BITS) + x[i] % f + lo;
        }
    }
    const uint64_t words = cap - w, head = 4 * (uint64_t)g; /* w >= head: at most 2 g tokens bytes of words */
    for (uint64_t j = 0; j < words; j++) out[head + j] = out[w + j]; /* forwards: the target is below the source */
    for (unsigned i = 0; i < g; i++)
        for (unsigned k = 0; k < 4; k++) out[4 * i + k] = (uint8_t)(x[i] >> (8 * k));
    return head + words;
}

/* The symbol whose interval holds slot: the last s < bins with cum[s] <= slot (a symbol without
 * frequency shares its cum with the next one, so it is never the last). */
KVC_HD unsigned kvc_gpu_rans_find(const uint16_t *c, unsigned bins, uint32_t slot)
{
    unsigned lo = 0, n = bins;
    while (n > 1) { /* the answer is in [lo, lo + n) */
        const unsigned half = n / 2;
        lo = c[lo + half] <= slot ? lo + half : lo;
        n -= half;
    }
    return lo;
}

/* Decode a stream of len bytes (in) of g channels into sym (same indexing as the encoder), reading
 * only in[0, len). Returns 0, or 1 for a stream that is too short for its states or has an odd
 * payload, a state below 2^16, runs out of words, has words left, or does not end in the
 * encoder's initial states (KVC_ERR_CORRUPT). The tables are valid (kvc_rans_table_ok). */
KVC_HD int kvc_gpu_rans_decode_group(const uint8_t *in, uint64_t len, uint64_t tokens, unsigned g, const uint16_t *cum,
                                     unsigned bins, uint8_t *sym, uint64_t sym_stride)
{
    const uint64_t head = 4 * (uint64_t)g;
    if (len < head || (len - head) % 2) return 1;
    uint32_t x[KVC_RANS_GROUP];
    for (unsigned i = 0; i < g; i++) {
        x[i] = (uint32_t)in[4 * i] | (uint32_t)in[4 * i + 1] << 8 | (uint32_t)in[4 * i + 2] << 16 | (uint32_t)in[4 * i + 3] << 24;
        if (x[i] < KVC_RANS_L) return 1;
    }
    uint64_t pos = head;
    for (uint64_t t = 0; t < tokens; t++) {
        uint8_t *row = sym + t * sym_stride;
        for (unsigned i = 0; i < g; i++) {
            const uint16_t *c = cum + i * (bins + 1);
            const uint32_t slot = x[i] & (KVC_RANS_PROB_SCALE - 1);
            const unsigned s = kvc_gpu_rans_find(c, bins, slot);
            row[i] = (uint8_t)s;
            x[i] = ((uint32_t)c[s + 1] - c[s]) * (x[i] >> KVC_RANS_PROB_BITS) + slot - c[s];
            if (x[i] < KVC_RANS_L) {
                if (len - pos < 2) return 1;
                x[i] = x[i] << 16 | (uint32_t)in[pos] | (uint32_t)in[pos + 1] << 8;
                pos += 2;
            }
        }
    }
    if (pos != len) return 1;
    for (unsigned i = 0; i < g; i++)
        if (x[i] != KVC_RANS_L) return 1;
    return 0;
}

/* Stream k's byte range from the end offsets: [ends[k - 1], ends[k]) (0 before the first); bad
 * (nonzero) where the CPU backend's sequential check stops: an end below its predecessor or past
 * nbytes (every end before the first bad one is good, so "predecessor" means the same in both). */
KVC_HD int kvc_gpu_rans_end_bad(const int64_t *ends, uint64_t k, uint64_t nbytes)
{
    const int64_t e = ends[k], prev = k ? ends[k - 1] : 0;
    return e < prev || (uint64_t)e > nbytes;
}

#endif
