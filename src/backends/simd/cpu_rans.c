/* SPDX-License-Identifier: BSD-3-Clause */
/* Interleaved rANS: the portable scalar reference (rans.h). Giesen's rans_word (32-bit states,
 * 16-bit words), one state per channel of a group. Stream layout (docs/FORMAT.md): the g final
 * encoder states as u32 LE, state of channel 0 first, then the 16-bit words (LE) in the order the
 * decoder reads them. The decoder visits token 0 channel 0, token 0 channel 1, ..., token 1 channel 0
 * ...; after each symbol a state below 2^16 takes the next word. The encoder runs the same order
 * backwards and writes the words from the end of its buffer. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore/backend.h> /* kvc_isa_t */

#include "cpu_backend.h"
#include "cpu_cachegen.h" /* cg_check_symbols */
#include "cpu_rans.h"


/* The fast path's 8 x 64-entry table costs about what 16 tokens of 8 divides do. */
#define RANS_ENC_FAST_MIN_TOKENS 16

static void put_u32le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* What the encoder's fast path needs of one symbol of one lane: 1/f for the division, the state
 * above which coding would leave [2^16, 2^32), and cum | (4096 - f) << 16. A symbol outside the
 * table (s >= bins or f = 0) has cf bit 28 set (4096 - 0 = 2^12), which the path checks once. */
typedef struct {
    double inv;
    uint32_t xmax; /* (f << 20) - 1: a larger state emits a word first (f = 4096: never) */
    uint32_t cf;
} rans_enc_sym_t;

#define RANS_ENC_BAD (1u << 28)

/* A full group's 8 lanes, every token, with the division done in double precision:
 * q = (x + 0.5) * (1 / f) truncated is x / f exactly for x < 2^32 and f <= 2^12 (the product's
 * error is below 2^-20 while x / f + 0.5 / f stays at least 2^-13 from the next integer:
 * docs/CACHEGEN.md), and x / f * 4096 + x % f + cum = x + cum + q * (4096 - f). A 32-bit divide
 * per symbol is the scalar encoder's bound; the multiply pipelines across the 8 lanes. Words are
 * stored unconditionally and kept by moving w, so no branch depends on the data. Needs cap >=
 * kvc_rans_bound(8, tokens) (no room check). Returns the stream length, 0 for a symbol without a
 * frequency. */
static size_t rans_encode_fast8(const uint8_t *sym, size_t stride, size_t tokens, const uint16_t *cum, unsigned bins,
                                uint8_t *out, size_t cap)
{
    rans_enc_sym_t e[KVC_RANS_GROUP][64];
    for (unsigned i = 0; i < KVC_RANS_GROUP; i++) {
        const uint16_t *c = cum + (size_t)i * (bins + 1);
        for (unsigned s = 0; s < bins; s++) {
            const uint32_t f = (uint32_t)c[s + 1] - c[s];
            e[i][s].inv = f ? 1.0 / f : 0.0;
            e[i][s].xmax = f ? (uint32_t)(((uint64_t)f << (32 - KVC_RANS_PROB_BITS)) - 1) : 0;
            e[i][s].cf = c[s] | (KVC_RANS_PROB_SCALE - f) << 16;
        }
        for (unsigned s = bins; s < 64; s++) e[i][s] = (rans_enc_sym_t){ .cf = RANS_ENC_BAD };
    }
    uint32_t x0 = KVC_RANS_L, x1 = KVC_RANS_L, x2 = KVC_RANS_L, x3 = KVC_RANS_L, x4 = KVC_RANS_L, x5 = KVC_RANS_L,
             x6 = KVC_RANS_L, x7 = KVC_RANS_L;
    uint32_t seen = 0, flags = 0; /* every symbol or'ed (>= 64: outside the table), every cf or'ed */
    uint8_t *w = out + cap;         /* words go backwards from the end */
    for (size_t t = tokens; t-- > 0;) {
        const uint8_t *row = sym + t * stride;
#define RANS_ENC(i)                                                                                                    \
    do {                                                                                                               \
        const unsigned s = row[i];                                                                                     \
        const rans_enc_sym_t *d = &e[i][s & 63];                                                                       \
        const uint32_t need = x##i > d->xmax;                                                                          \
        w[-2] = (uint8_t)x##i;                                                                                         \
        w[-1] = (uint8_t)(x##i >> 8);                                                                                  \
        w -= 2 * need;                                                                                                 \
        x##i = need ? x##i >> 16 : x##i;                                                                               \
        const uint32_t q = (uint32_t)(((double)x##i + 0.5) * d->inv);                                                  \
        x##i += (d->cf & 0xFFFF) + q * (d->cf >> 16);                                                                  \
        seen |= s;                                                                                                     \
        flags |= d->cf;                                                                                                \
    } while (0)
        RANS_ENC(7); RANS_ENC(6); RANS_ENC(5); RANS_ENC(4); RANS_ENC(3); RANS_ENC(2); RANS_ENC(1); RANS_ENC(0);
#undef RANS_ENC
    }
    const uint32_t x[KVC_RANS_GROUP] = { x0, x1, x2, x3, x4, x5, x6, x7 };
    return kvc_rans_enc_finish(out, cap, w, x, seen >= 64 || (flags & RANS_ENC_BAD));
}

size_t kvc_rans_encode_group(const uint8_t *sym, size_t stride, size_t tokens, unsigned g, const uint16_t *cum, unsigned bins,
                       uint8_t *out, size_t cap)
{
    if (g == KVC_RANS_GROUP && bins <= 64 && tokens >= RANS_ENC_FAST_MIN_TOKENS && cap >= kvc_rans_bound(g, tokens))
        return rans_encode_fast8(sym, stride, tokens, cum, bins, out, cap);
    uint32_t x[KVC_RANS_GROUP];
    for (unsigned i = 0; i < g; i++) x[i] = KVC_RANS_L;
    size_t w = cap; /* words go backwards from the end */
    for (size_t t = tokens; t-- > 0;) {
        const uint8_t *row = sym + t * stride;
        for (unsigned i = g; i-- > 0;) {
            const unsigned s = row[i];
            const uint16_t *c = cum + (size_t)i * (bins + 1);
            if (s >= bins) return 0;
            const uint32_t f = (uint32_t)c[s + 1] - c[s];
            if (!f) return 0;
            /* Emit a word when coding would leave [2^16, 2^32): x_max = (2^16 >> 12 << 16) * f. */
            if ((uint64_t)x[i] >= ((uint64_t)f << (32 - KVC_RANS_PROB_BITS))) {
                if (w < 4 * (size_t)g + 2) return 0;
                w -= 2;
                out[w] = (uint8_t)x[i];
                out[w + 1] = (uint8_t)(x[i] >> 8);
                x[i] >>= 16;
            }
            x[i] = ((x[i] / f) << KVC_RANS_PROB_BITS) + x[i] % f + c[s];
        }
    }
    const size_t words = cap - w, n = 4 * (size_t)g + words;
    memmove(out + 4 * (size_t)g, out + w, words);
    for (unsigned i = 0; i < g; i++) put_u32le(out + 4 * i, x[i]);
    return n;
}

void kvc_rans_encode_pair_isa(int isa, const uint8_t *sym, size_t stride, size_t tokens, unsigned ga, unsigned gb,
                              const uint16_t *cum, unsigned bins, uint8_t *out, size_t cap, size_t len[2])
{
    const uint16_t *cum_b = gb ? cum + (size_t)KVC_RANS_GROUP * (bins + 1) : NULL; /* formed only when B exists */
    const int full_b = gb == KVC_RANS_GROUP;
    len[1] = 0;
#ifdef KVC_HAVE_X86_SIMD
    if (isa >= KVC_ISA_AVX2 && ga == KVC_RANS_GROUP && bins <= 64 && cap >= kvc_rans_bound(KVC_RANS_GROUP, tokens)) {
        const uint8_t *sym_b = gb ? sym + KVC_RANS_GROUP : NULL;
        if (isa >= KVC_ISA_AVX512 && full_b)
            kvc_rans_encode8x2_avx512(sym, sym_b, stride, tokens, cum, cum_b, bins, out, out + cap, cap, &len[0], &len[1]);
        else /* a lone full group, or the AVX2 tier */
            kvc_rans_encode8x2_avx2(sym, full_b ? sym_b : NULL, stride, tokens, cum, cum_b, bins, out, full_b ? out + cap : NULL, cap,
                                    &len[0], &len[1]);
        if (gb && !full_b) len[1] = kvc_rans_encode_group(sym_b, stride, tokens, gb, cum_b, bins, out + cap, cap);
        return;
    }
#elif defined(KVC_RANS_HAVE_NEON)
    if (isa == KVC_ISA_NEON && bins <= 64 && cap >= kvc_rans_bound(KVC_RANS_GROUP, tokens)) {
        len[0] = ga == KVC_RANS_GROUP ? kvc_rans_encode8_neon(sym, stride, tokens, cum, bins, out, cap)
                                      : kvc_rans_encode_group(sym, stride, tokens, ga, cum, bins, out, cap);
        if (gb)
            len[1] = full_b ? kvc_rans_encode8_neon(sym + KVC_RANS_GROUP, stride, tokens, cum_b, bins, out + cap, cap)
                            : kvc_rans_encode_group(sym + KVC_RANS_GROUP, stride, tokens, gb, cum_b, bins, out + cap, cap);
        return;
    }
#else
    (void)isa;
    (void)full_b;
#endif
    len[0] = kvc_rans_encode_group(sym, stride, tokens, ga, cum, bins, out, cap);
    if (gb) len[1] = kvc_rans_encode_group(sym + KVC_RANS_GROUP, stride, tokens, gb, cum_b, bins, out + cap, cap);
}

/* The symbol whose interval [cum[s], cum[s+1]) holds slot: the last s < bins with cum[s] <= slot
 * (a zero-frequency symbol shares its cum with the next one, so it is never picked). */
static unsigned rans_find(const uint16_t *c, unsigned bins, uint32_t slot)
{
    unsigned lo = 0, hi = bins - 1; /* cum[0] = 0 <= slot; answer in [lo, hi] */
    while (lo < hi) {
        const unsigned mid = (lo + hi + 1) / 2;
        if (c[mid] <= slot) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Long streams look the symbol up in a slot table per channel (4 KiB, filled by runs); short ones
 * search (filling 4096 entries would cost more than the search). Same symbols either way. */
#define RANS_TABLE_MIN_TOKENS 64

/* A little-endian 16-bit word: one load where the host is little-endian. */
static inline uint32_t rans_le16(const uint8_t *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
#else
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
#endif
}

/* A full group's 8 lanes, one token per step, in runs of tokens that cannot reach the end of the
 * stream (a token reads at most 8 words, so (len - pos) / 16 tokens need no bounds check and
 * nothing the checked loop would refuse can happen there). All 8 states are advanced first, then
 * renormalised in channel order without branches: a branch per lane mispredicts on every word
 * read, and a word read after each lane would chain the lanes through the stream position. The
 * run length replaces a per-token bound check, which keeps the 8 states in registers (with it,
 * x86-64 ran out and spilled three). Returns the tokens done; x and *pos advanced. */
static size_t rans_decode_fast8(const uint8_t *in, size_t len, size_t *pos, size_t tokens, const uint8_t (*tab)[KVC_RANS_PROB_SCALE],
                                const uint32_t (*cf)[64], uint32_t *x, uint8_t *sym, size_t stride)
{
    uint32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3], x4 = x[4], x5 = x[5], x6 = x[6], x7 = x[7];
    const uint8_t *ip = in + *pos, *const end = in + len;
    size_t t = 0;
    for (;;) {
        size_t run = kvc_rans_dec_run(&ip, &end, 1, tokens - t);
        if (!run) break;
        uint8_t *row = sym + t * stride;
        t += run;
        for (; run; run--, row += stride) {
            /* cf: cum[s] | freq[s] << 16 */
#define RANS_STEP(i)                                                                                                   \
    do {                                                                                                               \
        const uint32_t slot = x##i & (KVC_RANS_PROB_SCALE - 1), e = cf[i][row[i] = tab[i][slot]];                       \
        x##i = (e >> 16) * (x##i >> KVC_RANS_PROB_BITS) + slot - (e & 0xFFFF);                                          \
    } while (0)
#define RANS_RENORM(i)                                                                                                 \
    do {                                                                                                               \
        const uint32_t need = x##i < KVC_RANS_L, m = 0u - need;                                                        \
        x##i = x##i << (16 & m) | (rans_le16(ip) & m); /* shift and mask, not `need ? :`: GCC makes that a branch */    \
        ip += 2 * need;                                                                                                \
    } while (0)
            RANS_STEP(0); RANS_STEP(1); RANS_STEP(2); RANS_STEP(3); RANS_STEP(4); RANS_STEP(5); RANS_STEP(6); RANS_STEP(7);
            RANS_RENORM(0); RANS_RENORM(1); RANS_RENORM(2); RANS_RENORM(3);
            RANS_RENORM(4); RANS_RENORM(5); RANS_RENORM(6); RANS_RENORM(7);
#undef RANS_STEP
#undef RANS_RENORM
        }
    }
    x[0] = x0, x[1] = x1, x[2] = x2, x[3] = x3, x[4] = x4, x[5] = x5, x[6] = x6, x[7] = x7;
    *pos = (size_t)(ip - in);
    return t;
}

kvc_status_t kvc_rans_decode_group(const uint8_t *in, size_t len, size_t tokens, unsigned g, const uint16_t *cum, unsigned bins,
                             uint8_t *sym, size_t stride)
{
    return kvc_rans_decode_isa(KVC_ISA_SCALAR, in, len, tokens, g, cum, bins, sym, stride);
}

kvc_status_t kvc_rans_decode_isa(int isa, const uint8_t *in, size_t len, size_t tokens, unsigned g, const uint16_t *cum,
                                 unsigned bins, uint8_t *sym, size_t stride)
{
    /* + 64 bytes: the AVX-512 table fill's last store may reach that far past the last row */
    uint8_t tab[KVC_RANS_GROUP * KVC_RANS_PROB_SCALE + 64];
    uint32_t cf[KVC_RANS_GROUP][64];
    const int use_tab = tokens >= RANS_TABLE_MIN_TOKENS;
    uint32_t x[KVC_RANS_GROUP];
    if (len < 4 * (size_t)g || (len - 4 * (size_t)g) % 2) return KVC_ERR_CORRUPT;
    for (unsigned i = 0; i < g; i++) {
        x[i] = (uint32_t)in[4 * i] | (uint32_t)in[4 * i + 1] << 8 | (uint32_t)in[4 * i + 2] << 16 | (uint32_t)in[4 * i + 3] << 24;
        if (x[i] < KVC_RANS_L) return KVC_ERR_CORRUPT;
    }
    size_t pos = 4 * (size_t)g, t = 0;
    /* the fast path's packed entries (cf) only for the streams that take it */
    const int fast = use_tab && g == KVC_RANS_GROUP && bins <= 64;
    if (use_tab) {
#ifdef KVC_HAVE_X86_SIMD
        if (isa >= KVC_ISA_AVX512) kvc_rans_fill_tables_avx512(tab, cum, g, bins);
        else
#else
        (void)isa;
#endif
            for (unsigned i = 0; i < g; i++) {
                const uint16_t *c = cum + (size_t)i * (bins + 1);
                for (unsigned s = 0; s < bins; s++) memset(tab + i * KVC_RANS_PROB_SCALE + c[s], (int)s, (size_t)(c[s + 1] - c[s]));
            }
        for (unsigned i = 0; fast && i < g; i++) {
            const uint16_t *c = cum + (size_t)i * (bins + 1);
            for (unsigned s = 0; s < bins; s++) cf[i][s] = c[s] | (uint32_t)(c[s + 1] - c[s]) << 16;
        }
    }
    if (fast) {
#ifdef KVC_RANS_HAVE_NEON
        if (isa == KVC_ISA_NEON)
            t = kvc_rans_decode_fast8_neon(in, len, &pos, tokens, tab, &cf[0][0], x, sym, stride);
        else
#endif
            t = rans_decode_fast8(in, len, &pos, tokens, (const uint8_t (*)[KVC_RANS_PROB_SCALE])(void *)tab,
                                  (const uint32_t (*)[64])cf, x, sym, stride);
    }
    /* The checked loop: short streams, partial groups and the last tokens of every stream. */
    for (; t < tokens; t++) {
        uint8_t *row = sym + t * stride;
        for (unsigned i = 0; i < g; i++) {
            const uint16_t *c = cum + (size_t)i * (bins + 1);
            const uint32_t slot = x[i] & (KVC_RANS_PROB_SCALE - 1);
            const unsigned s = use_tab ? tab[i * KVC_RANS_PROB_SCALE + slot] : rans_find(c, bins, slot);
            row[i] = (uint8_t)s;
            /* f * (x >> 12) + (slot - cum) < f * 2^20 <= 2^32; >= 16 since x >= 2^16 and f >= 1. */
            x[i] = ((uint32_t)c[s + 1] - c[s]) * (x[i] >> KVC_RANS_PROB_BITS) + slot - c[s];
            if (x[i] < KVC_RANS_L) {
                if (len - pos < 2) return KVC_ERR_CORRUPT;
                x[i] = x[i] << 16 | (uint32_t)in[pos] | (uint32_t)in[pos + 1] << 8;
                pos += 2;
            }
        }
    }
    if (pos != len) return KVC_ERR_CORRUPT;
    for (unsigned i = 0; i < g; i++)
        if (x[i] != KVC_RANS_L) return KVC_ERR_CORRUPT;
    return KVC_OK;
}

/* ---- data checks of the public calls (kvc_rans_*: docs/ERRORS.md). The codec skips them (it
 * counted the tables from the symbols it encodes, and made the tables and end offsets it decodes
 * with from a container it checked): on the real K/V's 256-token windows the decode's cost 6 %. */

/* Every table a rANS table (kvc_rans_table_ok), else `status` naming the first bad one and why. */
static kvc_status_t check_tables(kvc_backend_ctx_t *b, const char *op, kvc_status_t status, const uint16_t *cum, size_t L,
                                 size_t C, unsigned B)
{
    const size_t n = L * C;
    size_t first = n;
#pragma omp parallel for schedule(static) num_threads(b->num_threads) reduction(min : first) if (n * B >= (1u << 15))
    for (size_t k = 0; k < n; k++)
        if (!kvc_rans_table_ok(cum + k * (B + 1), B) && k < first) first = k;
    if (first == n) return KVC_OK;
    char why[96];
    kvc_rans_table_why(cum + first * (B + 1), B, why, sizeof why);
    return b->svc->set_error(status, "%s: cum of layer %zu, channel %zu is not a frequency table: %s", op, first / C,
                             first % C, why);
}

/* Every symbol to encode has a frequency in its channel's table, else KVC_ERR_OUT_OF_RANGE naming
 * the first: one bit per symbol with a frequency, per channel. Run once a kernel has flagged one. */
static kvc_status_t check_encode_symbols(kvc_backend_ctx_t *b, const struct kvc_rans_encode_args *a)
{
    const size_t L = a->layers, T = a->tokens, C = a->channels, n = L * T * C;
    const unsigned B = a->num_bins;
    uint64_t *has = malloc(L * C * sizeof *has);
    if (!has) return b->svc->set_error(KVC_ERR_NO_MEMORY, "rans_encode: no memory for %zu x %zu tables' checks", L, C);
    for (size_t k = 0; k < L * C; k++) {
        uint64_t m = 0;
        for (unsigned s = 0; s < B; s++) m |= (uint64_t)(a->cum[k * (B + 1) + s + 1] > a->cum[k * (B + 1) + s]) << s;
        has[k] = m;
    }
    size_t first = n;
#pragma omp parallel for schedule(static) num_threads(b->num_threads) reduction(min : first) if (n >= (1u << 15))
    for (size_t lt = 0; lt < L * T; lt++) {
        const uint8_t *row = a->symbols + lt / T * a->layer_stride + lt % T * C;
        const uint64_t *h = has + lt / T * C;
        for (size_t c = 0; c < C; c++)
            if (row[c] >= 64 || !(h[c] >> row[c] & 1)) {
                if (lt * C + c < first) first = lt * C + c;
                break;
            }
    }
    free(has);
    if (first == n) return KVC_OK;
    const size_t l = first / C / T, t = first / C % T, c = first % C;
    char why[256];
    kvc_rans_symbol_why(first, l, t, c, a->symbols[l * a->layer_stride + t * C + c], B, why, sizeof why);
    return b->svc->set_error(KVC_ERR_OUT_OF_RANGE, "rans_encode: %s", why);
}

/* End offsets from 0 that never decrease and stay within nbytes, else KVC_ERR_CORRUPT naming the
 * first bad one. */
static kvc_status_t check_ends(kvc_backend_ctx_t *b, const int64_t *ends, size_t n, size_t nbytes, size_t G)
{
    int64_t prev = 0;
    for (size_t k = 0; k < n; k++) {
        if (ends[k] < prev || (uint64_t)ends[k] > nbytes)
            return b->svc->set_error(KVC_ERR_CORRUPT,
                                     "rans_decode: ends[%zu] (layer %zu, group %zu) = %lld %s (previous %lld, %zu bytes given)", k,
                                     k / G, k % G, (long long)ends[k], ends[k] < prev ? "decreases" : "is past the end",
                                     (long long)prev, nbytes);
        prev = ends[k];
    }
    return KVC_OK;
}

/* ---- the backend's slots: streams over (layer, channel group), the arithmetic coder's split over
 * (layer, channel); neighbouring groups go in pairs, which the SIMD tiers code together. */

kvc_status_t kvc_cpu_rans_tables(kvc_backend_ctx_t *b, const struct kvc_rans_tables_args *a)
{
    const size_t L = a->layers, T = a->tokens, C = a->channels, NB = (C + 63) / 64;
    const unsigned B = a->num_bins;
    kvc_status_t st = cg_check_symbols(b, "rans_tables", a->symbols, L, T, C, B);
    if (st != KVC_OK) return st;
    /* Every table divides by the same T: its frequency of each count once (a division per bin was
     * as costly as counting a 256-token channel's symbols). */
    uint16_t *freq = T <= KVC_RANS_FREQ_TABLE_MAX ? malloc((T + 1) * sizeof *freq) : NULL;
    if (freq) kvc_rans_freq_table(T, freq);
    /* Tasks of 64 neighbouring channels of a layer: they share each 64-byte line of a token row. */
#pragma omp parallel for schedule(dynamic, 1) num_threads(b->num_threads)
    for (size_t j = 0; j < L * NB; j++) {
        const size_t l = j / NB, c0 = j % NB * 64, n = C - c0 < 64 ? C - c0 : 64;
        uint32_t cnt[64][KVC_CG_MAX_BINS];
        memset(cnt, 0, sizeof cnt);
        for (size_t t = 0; t < T; t++) {
            const uint8_t *row = a->symbols + (l * T + t) * C + c0;
            for (size_t i = 0; i < n; i++) cnt[i][row[i]]++;
        }
        for (size_t i = 0; i < n; i++) {
            uint16_t *cum = a->cum + (l * C + c0 + i) * (B + 1);
            if (freq) kvc_rans_cum_from_freq_table(cnt[i], B, freq, cum);
            else kvc_rans_cum_from_counts(cnt[i], B, T, cum);
        }
    }
    free(freq);
    return KVC_OK;
}

kvc_status_t kvc_cpu_rans_encode(kvc_backend_ctx_t *b, const struct kvc_rans_encode_args *a)
{
    const size_t L = a->layers, tw = a->tokens, C = a->channels, cap = a->capacity, G = kvc_rans_groups(C), P = (G + 1) / 2;
    const unsigned B = a->num_bins;
    const int isa = b->isa;
    /* A caller's tables are checked first; its symbols by the kernels, which flag one without a
     * frequency as they go (a check before them cost a quarter of an encode): the lengths wait in
     * scratch until every stream is good, and a failure is then located and named by a scan. */
    int32_t *lens = a->lengths, *scratch = NULL;
    if (!a->trusted) {
        kvc_status_t st = check_tables(b, "rans_encode", KVC_ERR_INVALID_ARG, a->cum, L, C, B);
        if (st != KVC_OK) return st;
        if (tw && !(lens = scratch = malloc(L * G * sizeof *lens)))
            return b->svc->set_error(KVC_ERR_NO_MEMORY, "rans_encode: no memory for %zu lengths", L * G);
    }
    if (tw == 0) { /* streams of states alone; symbols may be NULL (no pointer arithmetic on it) */
        for (size_t k = 0; k < L * G; k++) {
            const unsigned g = C - k % G * KVC_RANS_GROUP < KVC_RANS_GROUP ? (unsigned)(C - k % G * KVC_RANS_GROUP) : KVC_RANS_GROUP;
            lens[k] = (int32_t)kvc_rans_encode_group(NULL, C, 0, g, a->cum + (k / G * C + k % G * KVC_RANS_GROUP) * (B + 1), B,
                                                     a->streams + k * cap, cap);
        }
        return KVC_OK;
    }
    int bad = 0;
#pragma omp parallel for schedule(dynamic, 2) num_threads(b->num_threads) reduction(| : bad)
    for (size_t j = 0; j < L * P; j++) {
        const size_t l = j / P, k = l * G + j % P * 2, c0 = (k - l * G) * KVC_RANS_GROUP, cb = c0 + KVC_RANS_GROUP;
        const unsigned ga = C - c0 < KVC_RANS_GROUP ? (unsigned)(C - c0) : KVC_RANS_GROUP;
        const unsigned gb = cb >= C ? 0 : C - cb < KVC_RANS_GROUP ? (unsigned)(C - cb) : KVC_RANS_GROUP;
        size_t n[2];
        kvc_rans_encode_pair_isa(isa, a->symbols + l * a->layer_stride + c0, C, tw, ga, gb, a->cum + (l * C + c0) * (B + 1), B,
                                 a->streams + k * cap, cap, n);
        lens[k] = (int32_t)n[0];
        bad |= !n[0];
        if (gb) {
            lens[k + 1] = (int32_t)n[1];
            bad |= !n[1];
        }
    }
    kvc_status_t st = KVC_OK;
    if (bad) /* the codec's symbols always have a frequency (it counted them) */
        st = scratch ? check_encode_symbols(b, a)
                     : b->svc->set_error(KVC_ERR_BACKEND, "rans_encode: a symbol without a rANS frequency (internal error)");
    if (st == KVC_OK && bad) st = b->svc->set_error(KVC_ERR_BACKEND, "rans_encode: a stream failed with every symbol in its table");
    if (st == KVC_OK && scratch) memcpy(a->lengths, scratch, L * G * sizeof *lens);
    free(scratch);
    return st;
}

kvc_status_t kvc_cpu_rans_decode(kvc_backend_ctx_t *b, const struct kvc_rans_decode_args *a)
{
    const size_t L = a->layers, tw = a->tokens, C = a->channels, G = kvc_rans_groups(C), Q = (G + 3) / 4, none = L * G;
    const unsigned B = a->num_bins;
    const int isa = b->isa;
    if (!a->trusted) {
        kvc_status_t st = check_tables(b, "rans_decode", KVC_ERR_CORRUPT, a->cum, L, C, B);
        if (st == KVC_OK) st = check_ends(b, a->ends, L * G, a->nbytes, G);
        if (st != KVC_OK) return st;
    }
    size_t first = none; /* the first damaged stream */
    if (tw == 0) { /* every stream must be its states alone; symbols may be NULL */
        for (size_t k = 0; k < L * G && first == none; k++) {
            const size_t start = k ? (size_t)a->ends[k - 1] : 0;
            const unsigned g = C - k % G * KVC_RANS_GROUP < KVC_RANS_GROUP ? (unsigned)(C - k % G * KVC_RANS_GROUP) : KVC_RANS_GROUP;
            if (kvc_rans_decode_group(a->bytes + start, (size_t)a->ends[k] - start, 0, g,
                                      a->cum + (k / G * C + k % G * KVC_RANS_GROUP) * (B + 1), B, NULL, C) != KVC_OK)
                first = k;
        }
    }
    const size_t tasks = tw ? L * Q : 0;
    /* Tasks of four neighbouring groups: the AVX-512 tier decodes four full ones at once, the AVX2
     * kernel pairs of full ones (both tiers), the portable decoder the rest; a failing kernel's
     * groups are decoded again one by one to name the stream. */
#pragma omp parallel for schedule(dynamic, 1) num_threads(b->num_threads) reduction(min : first)
    for (size_t j = 0; j < tasks; j++) {
        const size_t l = j / Q, k0 = l * G + j % Q * 4, c0 = (k0 - l * G) * KVC_RANS_GROUP;
        const size_t n = G - (k0 - l * G) < 4 ? G - (k0 - l * G) : 4;
        const uint16_t *cum = a->cum + (l * C + c0) * (B + 1);
        uint8_t *sym = a->symbols + l * a->layer_stride + c0;
        const uint8_t *in[4];
        size_t len[4];
        for (size_t g = 0; g < n; g++) {
            const size_t start = k0 + g ? (size_t)a->ends[k0 + g - 1] : 0;
            in[g] = a->bytes + start;
            len[g] = (size_t)a->ends[k0 + g] - start;
        }
        size_t g = 0;
        int bad = 0;
#ifdef KVC_HAVE_X86_SIMD
        const size_t full = (C - c0) / KVC_RANS_GROUP < n ? (C - c0) / KVC_RANS_GROUP : n; /* full groups of the task */
        if (isa >= KVC_ISA_AVX512 && full == 4 && B <= 64) {
            bad = kvc_rans_decode8x4_avx512(in, len, tw, cum, B, sym, C) != KVC_OK;
            g = 4;
        }
        for (; !bad && isa >= KVC_ISA_AVX2 && B <= 64 && g + 2 <= full; g += 2)
            bad = kvc_rans_decode8x2_avx2(in + g, len + g, tw, cum + g * KVC_RANS_GROUP * (B + 1), B, sym + g * KVC_RANS_GROUP, C) != KVC_OK;
        if (bad) g = 0;
#endif
        for (; g < n; g++) {
            const size_t cg = c0 + g * KVC_RANS_GROUP;
            const unsigned gc = C - cg < KVC_RANS_GROUP ? (unsigned)(C - cg) : KVC_RANS_GROUP;
            if (kvc_rans_decode_isa(bad ? KVC_ISA_SCALAR : isa, in[g], len[g], tw, gc, cum + g * KVC_RANS_GROUP * (B + 1), B,
                                    sym + g * KVC_RANS_GROUP, C) != KVC_OK) {
                if (k0 + g < first) first = k0 + g;
                break;
            }
        }
    }
    if (first == none) return KVC_OK;
    char why[192];
    kvc_rans_corrupt_why(first, G, C, why, sizeof why);
    return b->svc->set_error(KVC_ERR_CORRUPT, "%s", why);
}
