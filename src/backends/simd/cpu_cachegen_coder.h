/* SPDX-License-Identifier: BSD-3-Clause */
/* The arithmetic coder's per-stream kernels (docs/CACHEGEN.md), compiled once per ISA tier: the
 * including file is built with that tier's flags (docs/ARCHITECTURE.md, "CPU ISA dispatch") and
 * defines:
 *   CG_SEARCH32(tab, count)         number of entries of tab[0..32) that are <= count
 *   CG_SEARCH64(tab, count)         the same over tab[0..64)
 * and then instantiates cg_encode_streams / cg_decode_streams under its own names.
 *
 * How the fast path differs from LMCache's bit-at-a-time loops (same bits out):
 * - Renormalisation in bulk. After a symbol, the loop always shifts n1 = clz(low ^ high) common
 *   leading bits (E1/E2), then n3 underflow steps (E3) while low = 01.. and high = 10..; an E3
 *   step never re-enables E1/E2. n3 is the count of leading ones of (low & ~high) below bit 31
 *   after the n1 shifts. Both updates are then one shift by n = n1 + n3 plus fixed masks.
 * - Encoder: the n1 bits go out as one word, the first of them followed by the pending
 *   underflow bits (b, then `pending` copies of !b, folded into the same word when it fits).
 * - Decoder: it tracks d = value - low (mod 2^32) instead of value. Both E1/E2 and E3 map d to
 *   2d + nextbit, so renormalisation is d = (d << n) | next n bits, read from a 64-bit window.
 *   count = ((d << 16) | 0xFFFF) / range, as LMCache's ((value - low + 1) * 65536 - 1) / range
 *   with LMCache's mod-2^32 difference.
 * - Symbol search: LMCache's binary search returns the number of entries cdf[1..max_sym] that
 *   are <= count (the CDF is strictly increasing), so it is a compare-and-count over a table
 *   padded with 0xFFFF, clamped to max_sym (padding only matches count = 0xFFFF, where every
 *   real entry matches too).
 * - With a strictly increasing CDF, range > 2^30 after renormalisation and a symbol keeps at
 *   least range/65536 of it, so n <= 18 and every shift count below stays in range. */

#include <string.h>

#define CG_INLINE static inline __attribute__((always_inline))

/* ------------------------------------------------------------------ encoder */

typedef struct cg_encst {
    uint32_t low, high;
    uint32_t nbits;   /* bits waiting in acc, < 32 between calls */
    uint64_t pending; /* underflow bits owed after the next decided bit */
    uint64_t acc;
    size_t pos;       /* bytes produced, counted past capacity to report the size needed */
    uint8_t *out;
    size_t cap;
} cg_encst_t;

static void cg_store_tail(uint8_t *out, size_t cap, size_t pos, uint32_t w)
{
    for (size_t i = 0; i < 4; i++)
        if (pos + i < cap) out[pos + i] = (uint8_t)(w >> (24 - 8 * i));
}

/* Append n <= 32 bits (MSB first). */
CG_INLINE void cg_put(cg_encst_t *e, uint32_t bits, unsigned n)
{
    e->acc = (e->acc << n) | bits;
    e->nbits += n;
    if (e->nbits >= 32) {
        e->nbits -= 32;
        const uint32_t w = (uint32_t)(e->acc >> e->nbits);
        if (__builtin_expect(e->pos + 4 <= e->cap, 1)) {
            const uint32_t be = __builtin_bswap32(w);
            memcpy(e->out + e->pos, &be, 4);
        } else {
            cg_store_tail(e->out, e->cap, e->pos, w);
        }
        e->pos += 4;
    }
}

/* The first decided bit b (top bit of `top`, n1 >= 1 bits), `pending` copies of !b, the rest. */
static void cg_emit_long(cg_encst_t *e, uint32_t top, unsigned n1)
{
    const uint32_t b = top >> (n1 - 1);
    cg_put(e, b, 1);
    for (uint64_t left = e->pending; left;) {
        const unsigned k = left >= 32 ? 32 : (unsigned)left;
        cg_put(e, b ? 0u : (uint32_t)(0xFFFFFFFFull >> (32 - k)), k);
        left -= k;
    }
    cg_put(e, top & ((1u << (n1 - 1)) - 1), n1 - 1);
}

CG_INLINE void cg_emit(cg_encst_t *e, uint32_t top, unsigned n1)
{
    const uint64_t p = e->pending;
    if (__builtin_expect(p + n1 <= 32, 1)) {
        const uint32_t b = top >> (n1 - 1);
        const uint32_t first = (uint32_t)(((uint64_t)1 << p) - 1 + b); /* b then p copies of !b */
        cg_put(e, (first << (n1 - 1)) | (top & ((1u << (n1 - 1)) - 1)), (unsigned)p + n1);
    } else {
        cg_emit_long(e, top, n1);
    }
    e->pending = 0;
}

/* c[s], c[s+1]: the symbol's bounds (c[num_bins] = 65536). */
CG_INLINE void cg_enc_symbol(cg_encst_t *e, const uint32_t *c, unsigned s)
{
    const uint64_t range = (uint64_t)(e->high - e->low) + 1;
    const uint32_t hi = e->low + (uint32_t)((range * c[s + 1]) >> 16) - 1;
    const uint32_t lo = e->low + (uint32_t)((range * c[s]) >> 16);
    const unsigned n1 = (unsigned)__builtin_clz(lo ^ hi);
    const unsigned n3 = (unsigned)__builtin_clz(~((lo & ~hi) << (n1 + 1)));
    if (n1) cg_emit(e, lo >> (32 - n1), n1);
    e->pending += n3;
    const unsigned n = n1 + n3;
    e->low = (lo << n) & 0x7FFFFFFFu;
    e->high = (hi << n) | ((1u << n) - 1) | 0x80000000u;
}

/* Final flush: pending + 1 bits after the bit that picks a point inside [low, high], zero
 * padding to a byte. Returns the stream length. */
CG_INLINE size_t cg_enc_finish(cg_encst_t *e)
{
    e->pending += 1;
    cg_emit(e, e->low >= 0x40000000u, 1);
    const unsigned nbytes = (e->nbits + 7) / 8;
    const uint32_t w = (uint32_t)(e->acc << (32 - e->nbits));
    for (unsigned i = 0; i < nbytes; i++)
        if (e->pos + i < e->cap) e->out[e->pos + i] = (uint8_t)(w >> (24 - 8 * i));
    return e->pos + nbytes;
}

/* K streams (layer l, channels c .. c+K-1) advanced together, token by token. */
CG_INLINE void cg_enc_run(const cg_enc_job_t *j, size_t l, size_t c, const int K)
{
    cg_encst_t e[CG_GROUP];
    uint32_t ct[CG_GROUP][KVC_CG_MAX_BINS + 1];
    const size_t C = j->channels, B = j->num_bins;
    for (int i = 0; i < K; i++) {
        const size_t k = l * C + c + (size_t)i;
        const uint16_t *cdf = j->cdf + k * (B + 1);
        for (size_t s = 0; s < B; s++) ct[i][s] = cdf[s];
        ct[i][B] = 65536;
        e[i].low = 0;
        e[i].high = 0xFFFFFFFFu;
        e[i].nbits = 0;
        e[i].pending = e[i].acc = 0;
        e[i].pos = 0;
        e[i].out = j->streams ? j->streams + k * j->capacity : NULL;
        e[i].cap = j->capacity;
    }
    const uint8_t *row = j->symbols ? j->symbols + l * j->tokens * C + c : NULL;
    for (size_t t = 0; t < j->tokens; t++, row += C) {
        /* Rows are C bytes apart: fetch ahead so the strided reads overlap (the first group of a
         * block misses on every row; the next groups find them in L1). */
        __builtin_prefetch(row + CG_PREFETCH_ROWS * C);
#pragma GCC unroll 8
        for (int i = 0; i < K; i++) cg_enc_symbol(&e[i], ct[i], row[i]);
    }
    for (int i = 0; i < K; i++) j->lengths[l * C + c + (size_t)i] = (int32_t)cg_enc_finish(&e[i]);
}

/* ------------------------------------------------------------------ decoder */

/* 64 bits of the stream from bit position bp, MSB first; bytes past len read as zero. */
CG_INLINE uint64_t cg_peek(const uint8_t *p, size_t len, size_t bp)
{
    const size_t i = bp >> 3;
    uint64_t w;
    if (__builtin_expect(i + 8 <= len, 1)) {
        memcpy(&w, p + i, 8);
        w = __builtin_bswap64(w);
    } else {
        w = 0;
        for (size_t k = 0; k < 8; k++) w = (w << 8) | (i + k < len ? p[i + k] : 0u);
    }
    return w << (bp & 7);
}

CG_INLINE void cg_dec_stream(const cg_dec_job_t *j, size_t k, const uint8_t **p, size_t *len)
{
    size_t start, n;
    if (j->prefsum) {
        start = k ? (size_t)j->prefsum[k - 1] : 0;
        n = (size_t)j->prefsum[k] - start;
    } else {
        start = k * j->stride;
        n = (size_t)j->lengths[k];
    }
    *p = j->base ? j->base + start : NULL;
    *len = n;
}

/* K streams decoded together; W (32 or 64) is the width of the search table. */
CG_INLINE void cg_dec_run(const cg_dec_job_t *j, size_t l, size_t c, const int K, const int W)
{
    uint16_t tab[CG_GROUP][64] __attribute__((aligned(64)));
    uint32_t ct[CG_GROUP][KVC_CG_MAX_BINS + 1];
    uint32_t low[CG_GROUP], high[CG_GROUP], d[CG_GROUP];
    size_t bp[CG_GROUP], len[CG_GROUP];
    const uint8_t *in[CG_GROUP];
    const size_t C = j->channels, B = j->num_bins;
    const unsigned max_sym = (unsigned)B - 1;
    for (int i = 0; i < K; i++) {
        const size_t k = l * C + c + (size_t)i;
        const uint16_t *cdf = j->cdf + k * (B + 1);
        for (size_t s = 0; s < B; s++) ct[i][s] = cdf[s];
        ct[i][B] = 65536;
        for (size_t s = 0; s < 64; s++) tab[i][s] = s < max_sym ? cdf[s + 1] : 0xFFFF;
        cg_dec_stream(j, k, &in[i], &len[i]);
        low[i] = 0;
        high[i] = 0xFFFFFFFFu;
        d[i] = (uint32_t)(cg_peek(in[i], len[i], 0) >> 32);
        bp[i] = 32;
    }
    uint8_t *row = j->symbols ? j->symbols + l * j->tokens * C + c : NULL;
    for (size_t t = 0; t < j->tokens; t++, row += C) {
        __builtin_prefetch(row + CG_PREFETCH_ROWS * C, 1);
#pragma GCC unroll 8
        for (int i = 0; i < K; i++) {
            const uint64_t range = (uint64_t)(high[i] - low[i]) + 1;
            const uint32_t count = (uint32_t)((((uint64_t)d[i] << 16) | 0xFFFFu) / range) & 0xFFFFu;
            unsigned s = W == 32 ? CG_SEARCH32(tab[i], count) : CG_SEARCH64(tab[i], count);
            s = s < max_sym ? s : max_sym;
            row[i] = (uint8_t)s;
            const uint32_t lo_off = (uint32_t)((range * ct[i][s]) >> 16);
            const uint32_t hi = low[i] + (uint32_t)((range * ct[i][s + 1]) >> 16) - 1;
            const uint32_t lo = low[i] + lo_off;
            const unsigned n1 = (unsigned)__builtin_clz(lo ^ hi);
            const unsigned n = n1 + (unsigned)__builtin_clz(~((lo & ~hi) << (n1 + 1)));
            low[i] = (lo << n) & 0x7FFFFFFFu;
            high[i] = (hi << n) | ((1u << n) - 1) | 0x80000000u;
            const uint64_t w = cg_peek(in[i], len[i], bp[i]);
            bp[i] += n;
            d[i] = (uint32_t)(((((uint64_t)(d[i] - lo_off)) << 32 | (w >> 32)) << n) >> 32);
        }
    }
}

/* ------------------------------------------------------------------ entry points */

#define CG_DEFINE_CODER(suffix)                                                                            \
    static void cg_enc_group_##suffix(const cg_enc_job_t *j, size_t l, size_t c)                  \
    {                                                                                                      \
        cg_enc_run(j, l, c, CG_GROUP);                                                                     \
    }                                                                                                      \
    static void cg_enc_one_##suffix(const cg_enc_job_t *j, size_t l, size_t c)                    \
    {                                                                                                      \
        cg_enc_run(j, l, c, 1);                                                                            \
    }                                                                                                      \
    static void cg_encode_streams_##suffix(const cg_enc_job_t *j, size_t l, size_t c0, size_t n)  \
    {                                                                                                      \
        size_t c = c0;                                                                                     \
        for (; c + CG_GROUP <= c0 + n; c += CG_GROUP) cg_enc_group_##suffix(j, l, c);                      \
        for (; c < c0 + n; c++) cg_enc_one_##suffix(j, l, c);                                              \
    }                                                                                                      \
    static void cg_dec_group32_##suffix(const cg_dec_job_t *j, size_t l, size_t c)                \
    {                                                                                                      \
        cg_dec_run(j, l, c, CG_GROUP, 32);                                                                 \
    }                                                                                                      \
    static void cg_dec_one32_##suffix(const cg_dec_job_t *j, size_t l, size_t c)                  \
    {                                                                                                      \
        cg_dec_run(j, l, c, 1, 32);                                                                        \
    }                                                                                                      \
    static void cg_dec_group64_##suffix(const cg_dec_job_t *j, size_t l, size_t c)                \
    {                                                                                                      \
        cg_dec_run(j, l, c, CG_GROUP, 64);                                                                 \
    }                                                                                                      \
    static void cg_dec_one64_##suffix(const cg_dec_job_t *j, size_t l, size_t c)                  \
    {                                                                                                      \
        cg_dec_run(j, l, c, 1, 64);                                                                        \
    }                                                                                                      \
    static void cg_decode_streams_##suffix(const cg_dec_job_t *j, size_t l, size_t c0, size_t n)  \
    {                                                                                                      \
        const int narrow = j->num_bins <= 33; /* cdf[1..num_bins-1] fits 32 entries */                     \
        size_t c = c0;                                                                                     \
        for (; c + CG_GROUP <= c0 + n; c += CG_GROUP)                                                      \
            narrow ? cg_dec_group32_##suffix(j, l, c) : cg_dec_group64_##suffix(j, l, c);                  \
        for (; c < c0 + n; c++) narrow ? cg_dec_one32_##suffix(j, l, c) : cg_dec_one64_##suffix(j, l, c);  \
    }
