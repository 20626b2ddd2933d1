/* SPDX-License-Identifier: BSD-3-Clause */
/* Interleaved rANS for one GPU thread (docs/FORMAT.md "rANS streams", docs/GPU.md), written as
 * KVC_HD functions so the same code runs in the kernels (rans.cu) and, on the CPU, in the gpu_host
 * emulator the tests load (tests/modules/gpu_emu.c). One thread codes one stream: up to 32
 * channels, 4 groups of 8 one after another through 8 states in an array, in the format's order. Written from the format, not
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

/* One group of g (1..8) lanes of a stream, states x, words written backwards from out[*w]:
 * symbol t of lane i is sym[t * sym_stride + i], coded with the table cum + i * (bins + 1); every
 * symbol has a frequency (checked before). */
KVC_HD void kvc_gpu_rans_enc_group(uint32_t *x, unsigned g, const uint8_t *sym, uint64_t sym_stride, uint64_t tokens,
                                   const uint16_t *cum, unsigned bins, uint8_t *out, uint64_t *wp)
{
    uint64_t w = *wp;
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
    *wp = w;
}

/* Encode a stream of nch channels (1 .. 32): its groups of 8 channels, last to first, into 8
 * states (state i codes channel 8k + i of group k). out holds cap >= kvc_rans_bound(nch, tokens)
 * bytes: the words are written backwards from its end, then moved behind the min(8, nch) states.
 * Returns the stream's length. */
KVC_HD uint64_t kvc_gpu_rans_encode_stream(const uint8_t *sym, uint64_t sym_stride, uint64_t tokens, unsigned nch,
                                           const uint16_t *cum, unsigned bins, uint8_t *out, uint64_t cap)
{
    uint32_t x[KVC_RANS_GROUP];
    for (unsigned i = 0; i < KVC_RANS_GROUP; i++) x[i] = KVC_RANS_L;
    uint64_t w = cap;
    for (unsigned k = tokens ? (nch + KVC_RANS_GROUP - 1) / KVC_RANS_GROUP : 0; k-- > 0;) {
        const unsigned g = nch - KVC_RANS_GROUP * k < KVC_RANS_GROUP ? nch - KVC_RANS_GROUP * k : KVC_RANS_GROUP;
        const uint8_t *s = sym + KVC_RANS_GROUP * k;
        const uint16_t *c = cum + (uint64_t)KVC_RANS_GROUP * k * (bins + 1);
        /* a constant 8 lets the compiler unroll the lanes and keep the states in registers */
        if (g == KVC_RANS_GROUP) kvc_gpu_rans_enc_group(x, KVC_RANS_GROUP, s, sym_stride, tokens, c, bins, out, &w);
        else kvc_gpu_rans_enc_group(x, g, s, sym_stride, tokens, c, bins, out, &w);
    }
    const unsigned n = nch < KVC_RANS_GROUP ? nch : KVC_RANS_GROUP;
    const uint64_t words = cap - w, head = 4 * (uint64_t)n; /* w >= head: at most 2 nch tokens bytes of words */
    for (uint64_t j = 0; j < words; j++) out[head + j] = out[w + j]; /* forwards: the target is below the source */
    for (unsigned i = 0; i < n; i++)
        for (unsigned b = 0; b < 4; b++) out[4 * i + b] = (uint8_t)(x[i] >> (8 * b));
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

/* One group of g lanes of a stream (states x, words from in[*pos] up to len) into sym (the
 * encoder's indexing). Returns 1 when the stream runs out of words. */
KVC_HD int kvc_gpu_rans_dec_group(uint32_t *x, unsigned g, const uint8_t *in, uint64_t len, uint64_t *posp, uint64_t tokens,
                                  const uint16_t *cum, unsigned bins, uint8_t *sym, uint64_t sym_stride)
{
    uint64_t pos = *posp;
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
    *posp = pos;
    return 0;
}

/* Decode a stream of len bytes (in) of nch channels into sym (same indexing as the encoder),
 * reading only in[0, len). Returns 0, or 1 for a stream that is too short for its states or has
 * an odd payload, a state below 2^16, runs out of words, has words left, or does not end in the
 * encoder's initial states (KVC_ERR_CORRUPT). The tables are valid (kvc_rans_table_ok). */
KVC_HD int kvc_gpu_rans_decode_stream(const uint8_t *in, uint64_t len, uint64_t tokens, unsigned nch, const uint16_t *cum,
                                      unsigned bins, uint8_t *sym, uint64_t sym_stride)
{
    const unsigned n = nch < KVC_RANS_GROUP ? nch : KVC_RANS_GROUP;
    const uint64_t head = 4 * (uint64_t)n;
    if (len < head || (len - head) % 2) return 1;
    uint32_t x[KVC_RANS_GROUP];
    for (unsigned i = 0; i < KVC_RANS_GROUP; i++) {
        x[i] = i < n ? (uint32_t)in[4 * i] | (uint32_t)in[4 * i + 1] << 8 | (uint32_t)in[4 * i + 2] << 16 | (uint32_t)in[4 * i + 3] << 24
                     : KVC_RANS_L;
        if (x[i] < KVC_RANS_L) return 1;
    }
    uint64_t pos = head;
    for (unsigned k = 0, groups = tokens ? (nch + KVC_RANS_GROUP - 1) / KVC_RANS_GROUP : 0; k < groups; k++) {
        const unsigned g = nch - KVC_RANS_GROUP * k < KVC_RANS_GROUP ? nch - KVC_RANS_GROUP * k : KVC_RANS_GROUP;
        const uint16_t *c = cum + (uint64_t)KVC_RANS_GROUP * k * (bins + 1);
        uint8_t *y = sym + KVC_RANS_GROUP * k;
        const int bad = g == KVC_RANS_GROUP ? kvc_gpu_rans_dec_group(x, KVC_RANS_GROUP, in, len, &pos, tokens, c, bins, y, sym_stride)
                                            : kvc_gpu_rans_dec_group(x, g, in, len, &pos, tokens, c, bins, y, sym_stride);
        if (bad) return 1;
    }
    if (pos != len) return 1;
    for (unsigned i = 0; i < KVC_RANS_GROUP; i++)
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
