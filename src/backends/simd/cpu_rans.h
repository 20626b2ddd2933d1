/* SPDX-License-Identifier: BSD-3-Clause */
/* rANS kernels of the CPU ISA tiers (docs/CACHEGEN.md "rANS coder"): the same streams, byte for
 * byte, as the portable coder in src/core/rans.c, which picks them by the context's tier. */
#ifndef KVC_SIMD_CPU_RANS_H
#define KVC_SIMD_CPU_RANS_H

#include <stddef.h>
#include <stdint.h>

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

/* AVX-512 (F/BW/DQ/VL): encode a full group of 8 channels (kvc_rans_encode's arguments with g = 8,
 * bins <= 64, cap >= kvc_rans_bound(8, tokens)). Returns the stream length, or 0 when a symbol
 * has no frequency in its table. */
size_t kvc_rans_encode8_avx512(const uint8_t *sym, size_t stride, size_t tokens, const uint16_t *cum, unsigned bins,
                               uint8_t *out, size_t cap);

/* Two full groups of the same window at once (the codec's neighbouring streams): the same bytes as
 * two kvc_rans_encode8_avx512 calls; *len_a / *len_b as its return value. */
void kvc_rans_encode8x2_avx512(const uint8_t *sym_a, const uint8_t *sym_b, size_t stride, size_t tokens,
                               const uint16_t *cum_a, const uint16_t *cum_b, unsigned bins, uint8_t *out_a, uint8_t *out_b,
                               size_t cap, size_t *len_a, size_t *len_b);

/* AVX2: like kvc_rans_encode8x2_avx512; sym_b = NULL (out_b, len_b unused) codes group A alone. */
void kvc_rans_encode8x2_avx2(const uint8_t *sym_a, const uint8_t *sym_b, size_t stride, size_t tokens, const uint16_t *cum_a,
                             const uint16_t *cum_b, unsigned bins, uint8_t *out_a, uint8_t *out_b, size_t cap, size_t *len_a,
                             size_t *len_b);

/* The decoder's slot tables of g channels (row i at tab + i * 4096: run s of symbol s is cum[s] ..
 * cum[s + 1]) with 64-byte stores; a run's last store may reach 63 bytes past its end, which the
 * next run (or the next row, or the 64 bytes of padding the caller leaves after the last row)
 * takes. A memset call per run cost 15 % of a 256-token decode, this 10 %; aligned stores (a
 * line at a time, a masked add per run boundary) measured slower than these. */
void kvc_rans_fill_tables_avx512(uint8_t *tab, const uint16_t *cum, unsigned g, unsigned bins);

#endif
