/* SPDX-License-Identifier: BSD-3-Clause */
/* Interleaved rANS, the container's second coder (format 1.2, docs/FORMAT.md "rANS streams",
 * docs/CACHEGEN.md "rANS coder"). Portable scalar reference: the same quantised symbols and the same
 * per-(plane, layer, channel) counts as the arithmetic coder; one coded stream per (window, plane and
 * layer, group of up to 8 consecutive channels), one 32-bit state per channel of the group. */
#ifndef KVC_CORE_RANS_H
#define KVC_CORE_RANS_H

#include <stddef.h>
#include <stdint.h>

#include <kvcore/status.h>

#define KVC_RANS_PROB_BITS 12u                    /* frequencies add up to 2^12 */
#define KVC_RANS_PROB_SCALE (1u << KVC_RANS_PROB_BITS)
#define KVC_RANS_L (1u << 16)                    /* states live in [2^16, 2^32); 16-bit renormalisation */
#define KVC_RANS_GROUP 8u                        /* channels (states) per coded stream */
#define KVC_RANS_MAX_WINDOW (1u << 26)           /* tokens per window: a stream stays below 2^31 bytes */

/* Coded streams per (plane, layer): ceil(C / 8). */
static inline uint64_t kvc_rans_groups(uint64_t channels) { return (channels + KVC_RANS_GROUP - 1) / KVC_RANS_GROUP; }

/* Normalise the counts of one stream (bins symbols adding up to total > 0) to frequencies adding up
 * to 2^12, stored as the cumulative table cum[0..bins] (cum[0] = 0, cum[bins] = 4096): every symbol
 * with a non-zero count keeps a frequency >= 1, a zero count gets 0. Integer arithmetic only. */
void kvc_rans_cum_from_counts(const uint32_t *counts, unsigned bins, uint64_t total, uint16_t *cum);

/* Bytes a stream of g channels and `tokens` symbols each may take (4 bytes of state per channel
 * plus at most one 16-bit word per symbol). */
static inline size_t kvc_rans_bound(size_t g, size_t tokens) { return 4 * g + 2 * g * tokens; }

/* Encode g (1..8) channels: symbol t of channel i is sym[t * stride + i], coded with the table
 * cum + i * (bins + 1). out has cap >= kvc_rans_bound(g, tokens) bytes. Returns the stream length,
 * or 0 when a symbol has frequency 0 in its table (the counts do not describe the symbols). */
size_t kvc_rans_encode(const uint8_t *sym, size_t stride, size_t tokens, unsigned g, const uint16_t *cum, unsigned bins,
                       uint8_t *out, size_t cap);

/* Two neighbouring groups of a window, on the CPU tier isa (a kvc_isa_t): group A is channels
 * [0, ga) of sym and cum, coded into out; group B channels [8, 8 + gb) (gb = 0: none), into
 * out + cap. len[0], len[1]: kvc_rans_encode's results. Full groups take the tier's kernel
 * (src/backends/simd/cpu_rans.h) where it has one; the bytes are those of kvc_rans_encode. */
void kvc_rans_encode_pair_isa(int isa, const uint8_t *sym, size_t stride, size_t tokens, unsigned ga, unsigned gb,
                              const uint16_t *cum, unsigned bins, uint8_t *out, size_t cap, size_t len[2]);

/* Decode a stream of len bytes written by kvc_rans_encode with the same tables (as made by
 * kvc_rans_cum_from_counts: non-decreasing, cum[bins] = 4096) into sym (same
 * indexing). Reads only in[0, len); KVC_ERR_CORRUPT when the stream is truncated, too long, starts
 * from an impossible state or does not end in the encoder's initial states. The status is returned,
 * not logged (the caller reports it once per chunk). */
kvc_status_t kvc_rans_decode(const uint8_t *in, size_t len, size_t tokens, unsigned g, const uint16_t *cum, unsigned bins,
                             uint8_t *sym, size_t stride);

/* kvc_rans_decode on the CPU tier isa (a kvc_isa_t): the same symbols and statuses; the tier's
 * kernels where it has them (src/backends/simd/cpu_rans.h). */
kvc_status_t kvc_rans_decode_isa(int isa, const uint8_t *in, size_t len, size_t tokens, unsigned g, const uint16_t *cum,
                                 unsigned bins, uint8_t *sym, size_t stride);

#endif
