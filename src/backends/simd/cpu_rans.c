/* SPDX-License-Identifier: BSD-3-Clause */
/* Interleaved rANS: the portable scalar reference (rans.h). Giesen's rans_word (32-bit states,
 * 16-bit words), 8 states a stream. Stream layout (docs/FORMAT.md): the min(8, nch) final encoder
 * states as u32 LE, state 0 first, then the 16-bit words (LE) in the order the decoder reads them.
 * The decoder visits the stream's groups of 8 channels in order, and in each token 0 lane 0,
 * token 0 lane 1, ..., token 1 lane 0 ... (lane i: channel 8k + i of group k, coded by state i);
 * after each symbol a state below 2^16 takes the next word. The encoder runs the same order
 * backwards and writes the words from the end of its buffer. Streams are coded a group at a time
 * so that the SIMD kernels take groups of several streams together. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore/backend.h> /* kvc_isa_t */

#include "cpu_backend.h"
#include "cpu_cachegen.h" /* cg_check_symbols */
#include "cpu_codec.h"
#include "cpu_rans.h"


/* The fast path's 8 x 64-entry table costs about what 16 tokens of 8 divides do. */
#define RANS_ENC_FAST_MIN_TOKENS 16

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
 * stored unconditionally and kept by moving w, so no branch depends on the data. */
static void rans_enc_fast8(kvc_rans_enc_t *st, const uint8_t *sym, size_t stride, size_t tokens, const uint16_t *cum, unsigned bins)
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
    uint32_t x0 = st->x[0], x1 = st->x[1], x2 = st->x[2], x3 = st->x[3], x4 = st->x[4], x5 = st->x[5], x6 = st->x[6], x7 = st->x[7];
    uint32_t seen = 0, flags = 0; /* every symbol or'ed (>= 64: outside the table), every cf or'ed */
    uint8_t *w = st->w;
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
    st->x[0] = x0, st->x[1] = x1, st->x[2] = x2, st->x[3] = x3, st->x[4] = x4, st->x[5] = x5, st->x[6] = x6, st->x[7] = x7;
    st->w = w;
    st->bad |= seen >= 64 || (flags & RANS_ENC_BAD);
}

void kvc_rans_enc_group(kvc_rans_enc_t *st, unsigned g, const uint8_t *sym, size_t stride, size_t tokens, const uint16_t *cum,
                        unsigned bins)
{
    if (g == KVC_RANS_GROUP && bins <= 64 && tokens >= RANS_ENC_FAST_MIN_TOKENS) {
        rans_enc_fast8(st, sym, stride, tokens, cum, bins);
        return;
    }
    uint32_t *x = st->x;
    uint8_t *w = st->w;
    for (size_t t = tokens; t-- > 0;) {
        const uint8_t *row = sym + t * stride;
        for (unsigned i = g; i-- > 0;) {
            const unsigned s = row[i];
            const uint16_t *c = cum + (size_t)i * (bins + 1);
            const uint32_t f = s < bins ? (uint32_t)c[s + 1] - c[s] : 0;
            if (!f) {
                st->bad = 1;
                return;
            }
            /* Emit a word when coding would leave [2^16, 2^32): x_max = (2^16 >> 12 << 16) * f. */
            if ((uint64_t)x[i] >= ((uint64_t)f << (32 - KVC_RANS_PROB_BITS))) {
                w -= 2;
                w[0] = (uint8_t)x[i];
                w[1] = (uint8_t)(x[i] >> 8);
                x[i] >>= 16;
            }
            x[i] = ((x[i] / f) << KVC_RANS_PROB_BITS) + x[i] % f + c[s];
        }
    }
    st->w = w;
}

/* One group of one stream on the tier isa: its kernel for full groups where it has one. */
static void enc_group_isa(int isa, kvc_rans_enc_t *st, unsigned g, const uint8_t *sym, size_t stride, size_t tokens,
                          const uint16_t *cum, unsigned bins)
{
#ifdef KVC_HAVE_X86_SIMD
    if (isa >= KVC_ISA_AVX2 && g == KVC_RANS_GROUP && bins <= 64) {
        kvc_rans_enc_t *const s2[2] = { st, NULL };
        const uint8_t *const y2[2] = { sym, NULL };
        const uint16_t *const c2[2] = { cum, NULL };
        kvc_rans_enc8x2_avx2(s2, y2, c2, stride, tokens, bins);
        return;
    }
#elif defined(KVC_RANS_HAVE_NEON)
    if (isa == KVC_ISA_NEON && g == KVC_RANS_GROUP && bins <= 64) {
        kvc_rans_enc8_neon(st, sym, stride, tokens, cum, bins);
        return;
    }
#else
    (void)isa;
#endif
    kvc_rans_enc_group(st, g, sym, stride, tokens, cum, bins);
}

/* Two streams' groups, last to first, the full groups both have at once through the tier's
 * pair kernel (one register chain serves 16 lanes). nch[1] = 0: one stream. */
static void enc_streams2(int isa, kvc_rans_enc_t st[2], const uint8_t *const sym[2], const uint16_t *const cum[2], const unsigned nch[2],
                         size_t stride, size_t tokens, unsigned bins)
{
    if (!tokens) return; /* the states alone; sym may be NULL */
    const unsigned ga = kvc_rans_stream_groups(nch[0]), gb = kvc_rans_stream_groups(nch[1]);
    for (unsigned k = ga > gb ? ga : gb; k-- > 0;) {
        const unsigned la = k < ga ? kvc_rans_group_lanes(nch[0], k) : 0, lb = k < gb ? kvc_rans_group_lanes(nch[1], k) : 0;
        const uint8_t *const y[2] = { la ? sym[0] + KVC_RANS_GROUP * k : NULL, lb ? sym[1] + KVC_RANS_GROUP * k : NULL };
        const uint16_t *const c[2] = { la ? cum[0] + (size_t)KVC_RANS_GROUP * k * (bins + 1) : NULL,
                                       lb ? cum[1] + (size_t)KVC_RANS_GROUP * k * (bins + 1) : NULL };
#ifdef KVC_HAVE_X86_SIMD
        if (isa >= KVC_ISA_AVX2 && bins <= 64 && la == KVC_RANS_GROUP && lb == KVC_RANS_GROUP) {
            kvc_rans_enc_t *const s2[2] = { &st[0], &st[1] };
            if (isa >= KVC_ISA_AVX512) kvc_rans_enc8x2_avx512(s2, y, c, stride, tokens, bins);
            else kvc_rans_enc8x2_avx2(s2, y, c, stride, tokens, bins);
            continue;
        }
#endif
        if (la) enc_group_isa(isa, &st[0], la, y[0], stride, tokens, c[0], bins);
        if (lb) enc_group_isa(isa, &st[1], lb, y[1], stride, tokens, c[1], bins);
    }
}

void kvc_rans_encode_pair(int isa, const uint8_t *const sym[2], const uint16_t *const cum[2], const unsigned nch[2], size_t stride,
                          size_t tokens, unsigned bins, uint8_t *const out[2], size_t cap, size_t len[2])
{
    kvc_rans_enc_t st[2];
    const unsigned n = nch[1] ? 2 : 1;
    for (unsigned i = 0; i < n; i++) kvc_rans_enc_begin(&st[i], out[i], cap);
    enc_streams2(isa, st, sym, cum, nch, stride, tokens, bins);
    len[1] = 0;
    for (unsigned i = 0; i < n; i++) len[i] = kvc_rans_enc_end(&st[i], nch[i], out[i], cap);
}

size_t kvc_rans_encode_stream(int isa, const uint8_t *sym, size_t stride, size_t tokens, unsigned nch, const uint16_t *cum,
                              unsigned bins, uint8_t *out, size_t cap)
{
    const uint8_t *const y[2] = { sym, NULL };
    const uint16_t *const c[2] = { cum, NULL };
    const unsigned n[2] = { nch, 0 };
    uint8_t *const o[2] = { out, NULL };
    size_t len[2];
    kvc_rans_encode_pair(isa, y, c, n, stride, tokens, bins, o, cap, len);
    return len[0];
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

kvc_status_t kvc_rans_dec_group(int isa, kvc_rans_dec_t *st, unsigned g, const uint16_t *cum, uint8_t *sym, size_t stride,
                                size_t tokens, unsigned bins)
{
    /* + 64 bytes: the AVX-512 table fill's last store may reach that far past the last row */
    uint8_t tab[KVC_RANS_GROUP * KVC_RANS_PROB_SCALE + 64];
    uint32_t cf[KVC_RANS_GROUP][64];
    const int use_tab = tokens >= RANS_TABLE_MIN_TOKENS;
    uint32_t *x = st->x;
    const uint8_t *in = st->p;
    const size_t len = (size_t)(st->end - st->p);
    size_t pos = 0, t = 0;
    /* the fast path's packed entries (cf) only for the groups that take it */
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
    /* The checked loop: short groups, partial groups and the last tokens of every group. */
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
    st->p = in + pos;
    return KVC_OK;
}

#ifdef KVC_HAVE_X86_SIMD
/* The full groups fs[0 .. nf) through the tier's kernels: AVX-512 up to twelve at once (a
 * register a pair), AVX2 in sixes, fours and a pair; returns how many were decoded (an odd one
 * is left). */
static unsigned dec_full_groups(int isa, unsigned nf, kvc_rans_dec_t *const *fs, const uint16_t *const *fc, uint8_t *const *fy,
                                size_t stride, size_t tokens, unsigned bins, kvc_status_t *status)
{
    unsigned f = 0;
    if (isa >= KVC_ISA_AVX512)
        for (unsigned m; (m = (nf - f) & ~1u) != 0 && *status == KVC_OK; f += m) {
            if (m > 2 * KVC_RANS_DEC_REGS_AVX512) m = 2 * KVC_RANS_DEC_REGS_AVX512;
            *status = kvc_rans_dec_streams_avx512(m, fs + f, fc + f, fy + f, stride, tokens, bins);
        }
    else if (isa >= KVC_ISA_AVX2) /* sixes, fours, a pair (10 = 6 + 4, 8 = 4 + 4) */
        for (unsigned m; (m = (nf - f) & ~1u) != 0 && *status == KVC_OK; f += m) {
            m = m == 8 || m == 4 ? 4 : m >= 6 ? 6 : 2;
            *status = m == 6   ? kvc_rans_dec_streams6_avx2(fs + f, fc + f, fy + f, stride, tokens, bins)
                      : m == 4 ? kvc_rans_dec_streams4_avx2(fs + f, fc + f, fy + f, stride, tokens, bins)
                               : kvc_rans_dec_streams2_avx2(fs + f, fc + f, fy + f, stride, tokens, bins);
        }
    return f;
}
#endif

/* Up to KVC_RANS_TASK streams (n) whose starts are parsed, group by group: the full groups
 * through the tier's kernels (dec_full_groups), the rest one by one; then every end checked.
 * KVC_ERR_CORRUPT when any stream is. */
static kvc_status_t dec_streams(int isa, unsigned n, kvc_rans_dec_t *st, const uint16_t *const *cum, uint8_t *const *sym,
                                const unsigned *nch, size_t stride, size_t tokens, unsigned bins)
{
    unsigned groups = 0;
    for (unsigned j = 0; j < n; j++) groups = kvc_rans_stream_groups(nch[j]) > groups ? kvc_rans_stream_groups(nch[j]) : groups;
    for (unsigned k = 0; k < groups; k++) {
        unsigned nf = 0;
        kvc_rans_dec_t *fs[KVC_RANS_TASK];
        const uint16_t *fc[KVC_RANS_TASK];
        uint8_t *fy[KVC_RANS_TASK];
        for (unsigned j = 0; j < n; j++) {
            const unsigned g = k < kvc_rans_stream_groups(nch[j]) ? kvc_rans_group_lanes(nch[j], k) : 0;
            if (!g) continue; /* this stream has fewer groups (no pointer past its channels is formed) */
            const uint16_t *c = cum[j] + (size_t)KVC_RANS_GROUP * k * (bins + 1);
            uint8_t *y = sym[j] + KVC_RANS_GROUP * k;
            if (g == KVC_RANS_GROUP && bins <= 64) {
                fs[nf] = &st[j], fc[nf] = c, fy[nf++] = y;
            } else if (kvc_rans_dec_group(isa, &st[j], g, c, y, stride, tokens, bins) != KVC_OK)
                return KVC_ERR_CORRUPT;
        }
        unsigned f = 0;
#ifdef KVC_HAVE_X86_SIMD
        kvc_status_t status = KVC_OK;
        f = dec_full_groups(isa, nf, fs, fc, fy, stride, tokens, bins, &status);
        if (status != KVC_OK) return KVC_ERR_CORRUPT;
#endif
        for (; f < nf; f++)
            if (kvc_rans_dec_group(isa, fs[f], KVC_RANS_GROUP, fc[f], fy[f], stride, tokens, bins) != KVC_OK) return KVC_ERR_CORRUPT;
    }
    for (unsigned j = 0; j < n; j++)
        if (kvc_rans_dec_end(&st[j]) != KVC_OK) return KVC_ERR_CORRUPT;
    return KVC_OK;
}

kvc_status_t kvc_rans_decode_task(int isa, unsigned n, const uint8_t *const *in, const size_t *len, const uint16_t *const *cum,
                                  uint8_t *const *sym, const unsigned *nch, size_t stride, size_t tokens, unsigned bins)
{
    kvc_rans_dec_t st[KVC_RANS_TASK];
    for (unsigned i = 0; i < n; i++)
        if (kvc_rans_dec_begin(&st[i], nch[i], in[i], len[i]) != KVC_OK) return KVC_ERR_CORRUPT;
    if (tokens) return dec_streams(isa, n, st, cum, sym, nch, stride, tokens, bins);
    for (unsigned i = 0; i < n; i++)
        if (kvc_rans_dec_end(&st[i]) != KVC_OK) return KVC_ERR_CORRUPT;
    return KVC_OK;
}

kvc_status_t kvc_rans_decode_stream(int isa, const uint8_t *in, size_t len, size_t tokens, unsigned nch, const uint16_t *cum,
                                    unsigned bins, uint8_t *sym, size_t stride)
{
    return kvc_rans_decode_task(isa, 1, &in, &len, &cum, &sym, &nch, stride, tokens, bins);
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

/* Every symbol to encode (a public call's [layers, tokens, channels]) has a frequency in its
 * channel's table, else KVC_ERR_OUT_OF_RANGE naming the first: one bit per symbol with a
 * frequency, per channel. Run once a kernel has flagged one. */
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
        const uint8_t *row = a->symbols + lt * C;
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
    kvc_rans_symbol_why(first, l, t, c, a->symbols[first], B, why, sizeof why);
    return b->svc->set_error(KVC_ERR_OUT_OF_RANGE, "rans_encode: %s", why);
}

/* End offsets from 0 that never decrease and stay within nbytes, else KVC_ERR_CORRUPT naming the
 * first bad one. */
static kvc_status_t check_ends(kvc_backend_ctx_t *b, const int64_t *ends, size_t n, size_t nbytes, size_t Q)
{
    int64_t prev = 0;
    for (size_t k = 0; k < n; k++) {
        if (ends[k] < prev || (uint64_t)ends[k] > nbytes)
            return b->svc->set_error(KVC_ERR_CORRUPT,
                                     "rans_decode: ends[%zu] (layer %zu, stream %zu) = %lld %s (previous %lld, %zu bytes given)", k,
                                     k / Q, k % Q, (long long)ends[k], ends[k] < prev ? "decreases" : "is past the end",
                                     (long long)prev, nbytes);
        prev = ends[k];
    }
    return KVC_OK;
}

/* ---- the backend's slots: streams over (window, layer, channels of a stream), the arithmetic
 * coder's split over (layer, channel); neighbouring streams go in pairs (encode) or tasks of up to
 * KVC_RANS_TASK (decode), whose groups the SIMD tiers code together. */

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

/* Stream k of a slot call: layer k / Q, channels [c0, c0 + nch) of `span` from k mod Q. */
typedef struct {
    size_t Q, span; /* streams a layer, channels a stream */
} stream_split_t;

static stream_split_t stream_split(size_t C, unsigned groups)
{
    return (stream_split_t){ kvc_rans_streams(C, groups), (size_t)KVC_RANS_GROUP * groups };
}

static void stream_at(const stream_split_t *sp, size_t C, size_t k, size_t *l, size_t *c0, unsigned *nch)
{
    *l = k / sp->Q;
    *c0 = k % sp->Q * sp->span;
    *nch = (unsigned)(C - *c0 < sp->span ? C - *c0 : sp->span);
}

/* Stream i of the layer-major order (layer, window, stream in the layer), which the backend's tasks
 * follow, as its index k in the windows' order (window, layer, stream): a thread's tasks then
 * cover whole layers, as the codec's other phases do (a layer's tables, symbols and values stay
 * in one core's cache; two threads on the real K/V decoded 1.2x faster than in windows' order). */
static size_t stream_of(const stream_split_t *sp, size_t L, size_t W, size_t i)
{
    const size_t lw = i / sp->Q;
    return lw % W * L * sp->Q + lw / W * sp->Q + i % sp->Q;
}

/* Tasks: n units (pairs of streams) spread evenly over a multiple of the thread count of tasks of
 * at most max units each, so that a chunk of few streams still splits evenly (the real K/V's 20
 * streams: two tasks of 10, not 8 + 8 + 4). Task j is units [n * j / tasks, n * (j + 1) / tasks). */
static size_t even_tasks(size_t n, size_t max, int threads)
{
    const size_t thr = threads > 1 ? (size_t)threads : 1, per = thr * max, tasks = (n + per - 1) / per * thr;
    return tasks < n ? tasks : n;
}

/* A public call is one window of [layers, tokens, channels] symbols, checked. */
static struct kvc_cpu_windows one_window(size_t tokens, size_t channels)
{
    return (struct kvc_cpu_windows){ .windows = 1, .window_stride = 0, .layer_stride = tokens * channels };
}

/* The encode of the slot (wins NULL: one window, checked) and of the codec (several, trusted). */
static kvc_status_t rans_encode(kvc_backend_ctx_t *b, const struct kvc_rans_encode_args *a, const struct kvc_cpu_windows *wins)
{
    const int trusted = wins != NULL;
    const struct kvc_cpu_windows wn = trusted ? *wins : one_window(a->tokens, a->channels);
    const size_t L = a->layers, tw = a->tokens, C = a->channels, cap = a->capacity, W = wn.windows ? wn.windows : 1;
    const stream_split_t sp = stream_split(C, KVC_RANS_STREAM_GROUPS);
    const size_t NS = W * L * sp.Q, P = (NS + 1) / 2, ntask = even_tasks(P, KVC_RANS_ENC_TASK, b->num_threads);
    const unsigned B = a->num_bins;
    const int isa = b->isa;
    /* A caller's tables are checked first; its symbols by the kernels, which flag one without a
     * frequency as they go (a check before them cost a quarter of an encode): the lengths wait in
     * scratch until every stream is good, and a failure is then located and named by a scan. */
    int32_t *lens = a->lengths, *scratch = NULL;
    if (!trusted) {
        kvc_status_t st = check_tables(b, "rans_encode", KVC_ERR_INVALID_ARG, a->cum, L, C, B);
        if (st != KVC_OK) return st;
        if (tw && !(lens = scratch = malloc(NS * sizeof *lens)))
            return b->svc->set_error(KVC_ERR_NO_MEMORY, "rans_encode: no memory for %zu lengths", NS);
    }
    int bad = 0;
    /* Tasks of pairs of neighbouring streams in layer-major order (of a layer, or the last of one
     * and the first of the next), which the SIMD tiers code a group of each at a time. */
#pragma omp parallel for schedule(static) num_threads(b->num_threads) reduction(| : bad)
    for (size_t j = 0; j < ntask; j++)
        for (size_t u = P * j / ntask; u < P * (j + 1) / ntask; u++) {
            const unsigned n = NS - 2 * u < 2 ? 1 : 2;
            const uint8_t *sym[2] = { NULL, NULL };
            const uint16_t *cum[2] = { NULL, NULL };
            uint8_t *out[2] = { NULL, NULL };
            unsigned nch[2] = { 0, 0 };
            size_t len[2], ks[2];
            for (unsigned i = 0; i < n; i++) {
                const size_t k = ks[i] = stream_of(&sp, L, W, 2 * u + i), w = k / (L * sp.Q);
                size_t l, c0;
                stream_at(&sp, C, k % (L * sp.Q), &l, &c0, &nch[i]);
                sym[i] = tw ? a->symbols + w * wn.window_stride + l * wn.layer_stride + c0 : NULL; /* no tokens: may be NULL */
                cum[i] = a->cum + (l * C + c0) * (B + 1);
                out[i] = a->streams + k * cap;
            }
            kvc_rans_encode_pair(isa, sym, cum, nch, C, tw, B, out, cap, len);
            for (unsigned i = 0; i < n; i++) {
                lens[ks[i]] = (int32_t)len[i];
                bad |= !len[i];
            }
        }
    kvc_status_t st = KVC_OK;
    if (bad && !scratch) /* the codec's symbols always have a frequency (it counted them) */
        st = b->svc->set_error(KVC_ERR_BACKEND, "rans_encode: a symbol without a rANS frequency (internal error)");
    if (bad && scratch) st = check_encode_symbols(b, a); /* a public call: one window */
    if (st == KVC_OK && bad) st = b->svc->set_error(KVC_ERR_BACKEND, "rans_encode: a stream failed with every symbol in its table");
    if (st == KVC_OK && scratch) memcpy(a->lengths, scratch, NS * sizeof *lens);
    free(scratch);
    return st;
}

kvc_status_t kvc_cpu_rans_encode(kvc_backend_ctx_t *b, const struct kvc_rans_encode_args *a) { return rans_encode(b, a, NULL); }

kvc_status_t kvc_cpu_rans_encode_windows(kvc_backend_ctx_t *b, const struct kvc_rans_encode_args *a,
                                         const struct kvc_cpu_windows *w)
{
    return rans_encode(b, a, w);
}

kvc_status_t kvc_cpu_rans_decode_run(kvc_backend_ctx_t *b, const struct kvc_rans_decode_args *a, const struct kvc_cpu_windows *wins,
                                     const struct kvc_cpu_decode_extras *x, kvc_cpu_then_fn then)
{
    static const struct kvc_cpu_decode_extras no_extras;
    const int trusted = wins != NULL;
    const struct kvc_cpu_windows wn = trusted ? *wins : one_window(a->tokens, a->channels);
    if (!x) x = &no_extras;
    const size_t L = a->layers, tw = a->tokens, C = a->channels, W = wn.windows ? wn.windows : 1;
    const stream_split_t sp = stream_split(C, KVC_RANS_STREAM_GROUPS);
    const size_t NS = W * L * sp.Q, none = NS;
    const unsigned B = a->num_bins;
    const int isa = b->isa;
    if (!trusted) {
        kvc_status_t st = check_tables(b, "rans_decode", KVC_ERR_CORRUPT, a->cum, L, C, B);
        if (st == KVC_OK) st = check_ends(b, a->ends, NS, a->nbytes, sp.Q);
        if (st != KVC_OK) return st;
    }
    if ((!a->cum && (!x->counts || !trusted)) || (x->then_dequantise && !trusted))
        return b->svc->set_error(KVC_ERR_BACKEND, "rans_decode: no tables, or fusions with untrusted args (internal error)");
    const struct kvc_quant_args *dq = x->then_dequantise;
    if (dq && !then) return b->svc->set_error(KVC_ERR_UNSUPPORTED, "rans_decode: no dequantiser to run after it");
    if (x->then_scales && (!dq || dq->dtype == KVC_DTYPE_F32))
        return b->svc->set_error(KVC_ERR_BACKEND, "rans_decode: 2-byte scales without an fp16 / bf16 dequantise (internal error)");
    size_t first = none; /* the first damaged stream */
    int nomem = 0;
    /* Tasks of up to KVC_RANS_TASK streams in layer-major order (stream_of), spread evenly
     * (even_tasks), which the SIMD tiers decode a full group of all at once. A failing task's
     * streams are decoded again one by one to name the stream. Without tokens every stream must
     * be its states alone, and symbols may be NULL (no pointer arithmetic on it). */
    const size_t P = (NS + 1) / 2, ntask = even_tasks(P, KVC_RANS_TASK / 2, b->num_threads);
    const size_t rows = sp.span * (B + 1); /* a stream's tables, counts mode */
#pragma omp parallel num_threads(b->num_threads)
    {
        /* counts mode: this thread's room for a task's tables (the heap: up to 50 KB) */
        uint16_t *own = a->cum ? NULL : malloc(KVC_RANS_TASK * rows * sizeof *own);
#pragma omp for schedule(static) reduction(min : first) reduction(| : nomem)
        for (size_t j = 0; j < ntask; j++) {
            if (!a->cum && !own) {
                nomem = 1;
                continue;
            }
            const size_t i0 = 2 * (P * j / ntask), i1 = 2 * (P * (j + 1) / ntask) < NS ? 2 * (P * (j + 1) / ntask) : NS;
            const unsigned n = (unsigned)(i1 - i0);
            const uint16_t *cum[KVC_RANS_TASK];
            uint8_t *sym[KVC_RANS_TASK];
            const uint8_t *in[KVC_RANS_TASK];
            size_t len[KVC_RANS_TASK];
            unsigned nch[KVC_RANS_TASK];
            size_t ks[KVC_RANS_TASK];
            for (unsigned i = 0; i < n; i++) {
                const size_t k = ks[i] = stream_of(&sp, L, W, i0 + i), w = k / (L * sp.Q), start = k ? (size_t)a->ends[k - 1] : 0;
                size_t l, c0;
                stream_at(&sp, C, k % (L * sp.Q), &l, &c0, &nch[i]);
                unsigned same = i; /* counts mode: an earlier stream of the task with these tables (another window) */
                for (unsigned j = 0; !a->cum && j < i && same == i; j++)
                    if (ks[j] % (L * sp.Q) == k % (L * sp.Q)) same = j;
                if (a->cum) cum[i] = a->cum + (l * C + c0) * (B + 1);
                else if (same < i) cum[i] = cum[same];
                else { /* made here: in this core's cache, no team of their own */
                    uint16_t *t = own + i * rows;
                    const uint32_t *cnt = x->counts + (l * C + c0) * B;
                    for (unsigned ch = 0; ch < nch[i]; ch++) {
                        if (x->freq) kvc_rans_cum_from_freq_table(cnt + ch * B, B, x->freq, t + ch * (B + 1));
                        else kvc_rans_cum_from_counts(cnt + ch * B, B, x->count_total, t + ch * (B + 1));
                    }
                    cum[i] = t;
                }
                sym[i] = tw ? a->symbols + w * wn.window_stride + l * wn.layer_stride + c0 : NULL;
                in[i] = a->bytes + start;
                len[i] = (size_t)a->ends[k] - start;
            }
            if (kvc_rans_decode_task(isa, n, in, len, cum, sym, nch, C, tw, B) != KVC_OK)
                for (unsigned i = 0; i < n; i++)
                    if (kvc_rans_decode_stream(KVC_ISA_SCALAR, in[i], len[i], tw, nch[i], cum[i], B, sym[i], C) != KVC_OK &&
                        ks[i] < first)
                        first = ks[i];
        }
        /* past the loop's barrier: first and nomem reduced, every symbol written */
        if (dq && first == none && !nomem) then(b, dq, x->then_scales);
        free(own);
    }
    if (nomem) return b->svc->set_error(KVC_ERR_NO_MEMORY, "rans_decode: no memory for a thread's rANS tables (%zu bytes)",
                                        KVC_RANS_TASK * rows * sizeof(uint16_t));
    if (first == none) return KVC_OK;
    char why[192];
    kvc_rans_corrupt_why(first % (L * sp.Q), sp.Q, sp.span, C, why, sizeof why);
    if (W > 1) return b->svc->set_error(KVC_ERR_CORRUPT, "window %zu: %s", first / (L * sp.Q), why);
    return b->svc->set_error(KVC_ERR_CORRUPT, "%s", why);
}
