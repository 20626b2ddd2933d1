/* SPDX-License-Identifier: BSD-3-Clause */
/* The rANS coder of the CPU backend (docs/CACHEGEN.md "rANS coder"): the portable coder
 * (cpu_rans.c: scalar reference, checked loops and fast paths), the backend's window ops, and the
 * kernels of the ISA tiers (cpu_rans_avx2.c, cpu_rans_avx512.c), which write the same streams
 * byte for byte and are picked by the context's tier. */
#ifndef KVC_SIMD_CPU_RANS_H
#define KVC_SIMD_CPU_RANS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <kvcore/backend.h>

#include "common/rans.h"

/* The backend's rans_tables / rans_encode / rans_decode slots (backend.h). */
kvc_status_t kvc_cpu_rans_tables(kvc_backend_ctx_t *b, const struct kvc_rans_tables_args *a);
kvc_status_t kvc_cpu_rans_encode(kvc_backend_ctx_t *b, const struct kvc_rans_encode_args *a);
kvc_status_t kvc_cpu_rans_decode(kvc_backend_ctx_t *b, const struct kvc_rans_decode_args *a);

/* Encode g (1..8) channels: symbol t of channel i is sym[t * stride + i], coded with the table
 * cum + i * (bins + 1). out has cap >= kvc_rans_bound(g, tokens) bytes. Returns the stream length,
 * or 0 when a symbol has frequency 0 in its table (the counts do not describe the symbols). */
size_t kvc_rans_encode_group(const uint8_t *sym, size_t stride, size_t tokens, unsigned g, const uint16_t *cum, unsigned bins,
                       uint8_t *out, size_t cap);

/* Two neighbouring groups of a window, on the CPU tier isa (a kvc_isa_t): group A is channels
 * [0, ga) of sym and cum, coded into out; group B channels [8, 8 + gb) (gb = 0: none), into
 * out + cap. len[0], len[1]: kvc_rans_encode_group's results. Full groups take the tier's kernel
 * (below) where it has one; the bytes are those of kvc_rans_encode_group. */
void kvc_rans_encode_pair_isa(int isa, const uint8_t *sym, size_t stride, size_t tokens, unsigned ga, unsigned gb,
                              const uint16_t *cum, unsigned bins, uint8_t *out, size_t cap, size_t len[2]);

/* Decode a stream of len bytes written by kvc_rans_encode_group with the same tables (as made by
 * kvc_rans_cum_from_counts: non-decreasing, cum[bins] = 4096) into sym (same
 * indexing). Reads only in[0, len); KVC_ERR_CORRUPT when the stream is truncated, too long, starts
 * from an impossible state or does not end in the encoder's initial states. The status is returned,
 * not logged (the caller reports it once per chunk). */
kvc_status_t kvc_rans_decode_group(const uint8_t *in, size_t len, size_t tokens, unsigned g, const uint16_t *cum, unsigned bins,
                             uint8_t *sym, size_t stride);

/* kvc_rans_decode_group on the CPU tier isa (a kvc_isa_t): the same symbols and statuses; the tier's
 * kernels where it has them (below). */
kvc_status_t kvc_rans_decode_isa(int isa, const uint8_t *in, size_t len, size_t tokens, unsigned g, const uint16_t *cum,
                                 unsigned bins, uint8_t *sym, size_t stride);

/* The encoders' table of one full group: entry (lane i, symbol s) at i * 64 + s is cum | f << 16,
 * or KVC_RANS_ENC_BAD for a symbol without frequency (count 0, or s >= bins), which the kernels
 * or together and check once at the end. Shared by the tiers' files (one source). */
#define KVC_RANS_ENC_BAD (1u << 31)

static inline void kvc_rans_enc_table(uint32_t *tab, const uint16_t *cum, unsigned bins)
{
    for (unsigned i = 0; i < 8; i++) {
        const uint16_t *c = cum + (size_t)i * (bins + 1);
        for (unsigned s = 0; s < 64; s++) {
            const uint32_t f = s < bins ? (uint32_t)c[s + 1] - c[s] : 0;
            tab[i * 64 + s] = f ? c[s] | f << 16 : KVC_RANS_ENC_BAD;
        }
    }
}

/* The end of a full group's encode, every path's: 0 when bad (a symbol without frequency); else
 * the 8 final states (u32 LE) at out, the words (written backwards from out + cap down to w)
 * moved right behind them, and the stream length returned. */
static inline size_t kvc_rans_enc_finish(uint8_t *out, size_t cap, const uint8_t *w, const uint32_t *x, int bad)
{
    if (bad) return 0;
    const size_t words = (size_t)(out + cap - w);
    memmove(out + 4 * 8, w, words);
    for (unsigned i = 0; i < 8; i++)
        for (unsigned b = 0; b < 4; b++) out[4 * i + b] = (uint8_t)(x[i] >> (8 * b));
    return 4 * 8 + words;
}

/* AVX-512 (F/BW/DQ/VL): two full groups of the same window at once (the codec's neighbouring
 * streams; kvc_rans_encode_group's arguments with g = 8, bins <= 64, cap >= kvc_rans_bound(8, tokens)):
 * the same bytes as two kvc_rans_encode_group calls; *len_a / *len_b as its return value. */
void kvc_rans_encode8x2_avx512(const uint8_t *sym_a, const uint8_t *sym_b, size_t stride, size_t tokens,
                               const uint16_t *cum_a, const uint16_t *cum_b, unsigned bins, uint8_t *out_a, uint8_t *out_b,
                               size_t cap, size_t *len_a, size_t *len_b);

/* AVX2: like kvc_rans_encode8x2_avx512; sym_b = NULL (out_b, len_b unused) codes group A alone
 * (the AVX-512 tier's lone full groups too). */
void kvc_rans_encode8x2_avx2(const uint8_t *sym_a, const uint8_t *sym_b, size_t stride, size_t tokens, const uint16_t *cum_a,
                             const uint16_t *cum_b, unsigned bins, uint8_t *out_a, uint8_t *out_b, size_t cap, size_t *len_a,
                             size_t *len_b);

/* The SIMD decoders' lookup (docs/CACHEGEN.md "AVX-512 decoder"): the entries of a register's
 * channels (cum rows of bins + 1) transposed, e[s * lanes + lane] = cum << 20 | freq << 7 | s, so
 * that the largest entry <= slot << 20 | 0xFFFFF is the lane's symbol with its freq and cum (a
 * symbol without frequency never is: the next one with a frequency has the same cum and a larger
 * entry, and with none after it cum is 4096, which wraps the entry to s, below every real one).
 * Each tier builds them a register of symbols at a time (dec_entries8 / dec_entries16, a transpose
 * of one register per channel) and gets the symbols with a frequency in some lane as a bit mask
 * `used`; the symbols to scan are then [*lo, *hi]. KVC_ERR_CORRUPT for tables without any
 * frequency (not kvc_rans_cum_from_counts'). */
static inline kvc_status_t kvc_rans_dec_range(uint64_t used, unsigned *lo, unsigned *hi)
{
    if (!used) return KVC_ERR_CORRUPT;
    *lo = (unsigned)__builtin_ctzll(used);
    *hi = 63u - (unsigned)__builtin_clzll(used);
    return KVC_OK;
}

/* The start of n full-group streams for the SIMD decoders: group g's 8 states (u32 LE) into
 * x[8g ..], its words from p[g] to end[g]. KVC_ERR_CORRUPT as kvc_rans_decode_group: a stream shorter
 * than its states or with an odd payload, a state below 2^16. */
static inline kvc_status_t kvc_rans_dec_start(const uint8_t *const in[], const size_t len[], unsigned n, uint32_t *x,
                                              const uint8_t **p, const uint8_t **end)
{
    for (unsigned g = 0; g < n; g++) {
        if (len[g] < 4 * KVC_RANS_GROUP || (len[g] - 4 * KVC_RANS_GROUP) % 2) return KVC_ERR_CORRUPT;
        for (unsigned i = 0; i < KVC_RANS_GROUP; i++) {
            const uint8_t *q = in[g] + 4 * i;
            x[g * KVC_RANS_GROUP + i] = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
            if (x[g * KVC_RANS_GROUP + i] < KVC_RANS_L) return KVC_ERR_CORRUPT;
        }
        p[g] = in[g] + 4 * KVC_RANS_GROUP;
        end[g] = in[g] + len[g];
    }
    return KVC_OK;
}

/* How many of the `left` tokens no one of n streams can read past its end in (a group reads 8
 * words a token at most): the SIMD decoders' unchecked runs. */
static inline size_t kvc_rans_dec_run(const uint8_t *const *p, const uint8_t *const *end, unsigned n, size_t left)
{
    for (unsigned g = 0; g < n; g++) {
        const size_t r = (size_t)(end[g] - p[g]) / (2 * KVC_RANS_GROUP);
        if (r < left) left = r;
    }
    return left;
}

/* AVX2: two neighbouring full groups of a window decoded together (in[g], len[g]; channels
 * [8g, 8g + 8) of cum and sym; bins <= 64), one register of 8 states each, the same lookup: the
 * symbols and statuses of two kvc_rans_decode_group calls. */
kvc_status_t kvc_rans_decode8x2_avx2(const uint8_t *const in[2], const size_t len[2], size_t tokens, const uint16_t *cum,
                                     unsigned bins, uint8_t *sym, size_t stride);

/* AVX-512: four neighbouring full groups of a window decoded together (in[g], len[g]: group g's
 * stream; channels [8g, 8g + 8) of cum and sym; bins <= 64), without slot tables: the symbols and
 * statuses of four kvc_rans_decode_group calls (KVC_ERR_CORRUPT when any stream is corrupt). */
kvc_status_t kvc_rans_decode8x4_avx512(const uint8_t *const in[4], const size_t len[4], size_t tokens, const uint16_t *cum,
                                       unsigned bins, uint8_t *sym, size_t stride);

/* NEON (AArch64, cpu_rans_neon.c): the portable decoder's fast path for a full group (rans_decode_fast8 in
 * cpu_rans.c, whose arguments it takes: the slot tables tab, 8 rows of 4096, and the entries cf,
 * 8 rows of 64 `cum | freq << 16`), with the state update and renormalisation on vectors
 * (cpu_rans_neon.c). Decodes the tokens of [0, tokens) that cannot read past the stream, advancing
 * x and *pos; returns how many. */
#if defined(__aarch64__) && defined(__ARM_NEON)
#define KVC_RANS_HAVE_NEON 1
size_t kvc_rans_decode_fast8_neon(const uint8_t *in, size_t len, size_t *pos, size_t tokens, const uint8_t *tab,
                                  const uint32_t *cf, uint32_t *x, uint8_t *sym, size_t stride);
/* NEON: a full group's encode (kvc_rans_encode_group's arguments with g = 8, bins <= 64,
 * cap >= kvc_rans_bound(8, tokens)): the same bytes and return value. */
size_t kvc_rans_encode8_neon(const uint8_t *sym, size_t stride, size_t tokens, const uint16_t *cum, unsigned bins, uint8_t *out,
                             size_t cap);
#endif

/* The decoder's slot tables of g channels (row i at tab + i * 4096: run s of symbol s is cum[s] ..
 * cum[s + 1]) with 64-byte stores; a run's last store may reach 63 bytes past its end, which the
 * next run (or the next row, or the 64 bytes of padding the caller leaves after the last row)
 * takes. A memset call per run cost 15 % of a 256-token decode, this 10 %; aligned stores (a
 * line at a time, a masked add per run boundary) measured slower than these. */
void kvc_rans_fill_tables_avx512(uint8_t *tab, const uint16_t *cum, unsigned g, unsigned bins);

#endif
