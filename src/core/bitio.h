/* SPDX-License-Identifier: BSD-3-Clause */
/* MSB-first bit writer/reader over byte buffers, bounds-checked (for the container's coded tables). */
#ifndef KVC_CORE_BITIO_H
#define KVC_CORE_BITIO_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *buf; /* may be NULL: only count bits (sizing pass) */
    size_t cap;   /* bytes */
    size_t bits;  /* bits written so far */
} kvc_bitwriter_t;

typedef struct {
    const uint8_t *buf;
    size_t len;   /* bytes */
    size_t pos;   /* bit position */
    int overrun;  /* set when a read went past the end (reads return zeros) */
} kvc_bitreader_t;

/* n <= 64 bits of v, most significant first; a byte at a time (the table of a 7B-class chunk has
 * ~2 M fields). Bits past cap are counted, not written. */
static inline void kvc_bw_put(kvc_bitwriter_t *w, uint64_t v, unsigned n)
{
    if (!w->buf) {
        w->bits += n;
        return;
    }
    while (n) {
        const size_t byte = w->bits >> 3;
        const unsigned room = 8u - (unsigned)(w->bits & 7), take = n < room ? n : room, sh = room - take;
        const unsigned mask = ((1u << take) - 1u) << sh, chunk = (unsigned)(v >> (n - take)) << sh & mask;
        if (byte < w->cap) w->buf[byte] = (uint8_t)((w->buf[byte] & ~mask) | chunk);
        w->bits += take;
        n -= take;
    }
}

/* The next 57 bits or more at the top of *w (below them zeros), when 8 bytes are left to load:
 * one load instead of a loop a byte (a chunk's coded counts are ~2 M fields). */
static inline int kvc_br_peek57(const kvc_bitreader_t *r, uint64_t *w)
{
    const size_t byte = r->pos >> 3;
    if (r->len < 8 || byte > r->len - 8) return 0;
    const uint8_t *p = r->buf + byte;
    const uint64_t v = (uint64_t)p[0] << 56 | (uint64_t)p[1] << 48 | (uint64_t)p[2] << 40 | (uint64_t)p[3] << 32 |
                       (uint64_t)p[4] << 24 | (uint64_t)p[5] << 16 | (uint64_t)p[6] << 8 | (uint64_t)p[7];
    *w = v << (r->pos & 7);
    return 1;
}

static inline uint64_t kvc_br_get(kvc_bitreader_t *r, unsigned n)
{
    uint64_t w;
    if (n && n <= 57 && kvc_br_peek57(r, &w)) {
        r->pos += n;
        return w >> (64 - n);
    }
    uint64_t v = 0;
    while (n) {
        const size_t byte = r->pos >> 3;
        const unsigned room = 8u - (unsigned)(r->pos & 7), take = n < room ? n : room;
        unsigned chunk = 0;
        if (byte < r->len) chunk = (unsigned)(r->buf[byte] >> (room - take)) & ((1u << take) - 1u);
        else r->overrun = 1;
        v = (v << take) | chunk;
        r->pos += take;
        n -= take;
    }
    return v;
}

/* Rice codes of the container's counts: q = v >> k ones, a zero, the k low bits; q >= 24 is the
 * escape, 24 ones and v in 32 bits. */
#define KVC_RICE_ESCAPE 24u

static inline void kvc_rice_put(kvc_bitwriter_t *w, uint32_t v, unsigned k)
{
    const uint32_t q = v >> k;
    if (q >= KVC_RICE_ESCAPE) {
        kvc_bw_put(w, (1u << KVC_RICE_ESCAPE) - 1, KVC_RICE_ESCAPE);
        kvc_bw_put(w, v, 32);
        return;
    }
    /* q ones, a zero, then k low bits: one put of at most 24 + 31 bits */
    kvc_bw_put(w, ((1ull << (q + 1)) - 2) << k | (v & ((1ull << k) - 1)), q + 1 + k);
}

/* n Rice codes with the same k, as n kvc_rice_put calls (the same bits; bits past cap counted, not
 * written): the codes gathered in a 64-bit accumulator and stored a whole byte at a time (a field
 * at a time, a byte loop each, was 9 % of a rANS encode of real K/V). */
static inline void kvc_rice_put_run(kvc_bitwriter_t *w, const uint32_t *v, unsigned n, unsigned k)
{
    if (!w->buf) {
        for (unsigned i = 0; i < n; i++) {
            const uint32_t q = v[i] >> k;
            w->bits += q >= KVC_RICE_ESCAPE ? KVC_RICE_ESCAPE + 32 : q + 1 + k;
        }
        return;
    }
    size_t byte = w->bits >> 3;
    unsigned nacc = (unsigned)(w->bits & 7); /* valid bits at the bottom of acc: the partial byte's first */
    uint64_t acc = nacc && byte < w->cap ? (uint64_t)(w->buf[byte] >> (8 - nacc)) : 0;
    for (unsigned i = 0; i < n; i++) {
        const uint32_t q = v[i] >> k;
        uint64_t code;
        unsigned len; /* <= 56 */
        if (q >= KVC_RICE_ESCAPE) {
            code = ((1ull << KVC_RICE_ESCAPE) - 1) << 32 | v[i];
            len = KVC_RICE_ESCAPE + 32;
        } else {
            code = ((1ull << (q + 1)) - 2) << k | (v[i] & ((1ull << k) - 1));
            len = q + 1 + k;
        }
        if (nacc + len > 64)
            for (; nacc >= 8; byte++) { /* whole bytes out: nacc < 8 after, so nacc + len <= 63 */
                nacc -= 8;
                if (byte < w->cap) w->buf[byte] = (uint8_t)(acc >> nacc);
            }
        acc = acc << len | code;
        nacc += len;
    }
    for (; nacc >= 8; byte++) {
        nacc -= 8;
        if (byte < w->cap) w->buf[byte] = (uint8_t)(acc >> nacc);
    }
    if (nacc && byte < w->cap) /* the top nacc bits of the last byte; its other bits are kept */
        w->buf[byte] = (uint8_t)((w->buf[byte] & (0xFFu >> nacc)) | (unsigned)(acc << (8 - nacc)));
    w->bits = byte * 8 + nacc;
}

/* k <= 31. Past the end: 0 and r->overrun set. */
static inline uint32_t kvc_rice_get(kvc_bitreader_t *r, unsigned k)
{
    uint64_t w;
    if (kvc_br_peek57(r, &w)) { /* the prefix (< 24 ones), its zero and k <= 31 bits: within 57 */
        const unsigned q = (unsigned)__builtin_clzll(~w | 1); /* all ones: 63, the loop below */
        if (q < KVC_RICE_ESCAPE) {
            r->pos += q + 1 + k;
            return (uint32_t)(q << k) | (k ? (uint32_t)(w << (q + 1) >> (64 - k)) : 0u);
        }
    }
    uint32_t q = 0;
    while (q < KVC_RICE_ESCAPE && kvc_br_get(r, 1)) {
        q++;
        if (r->overrun) return 0;
    }
    if (q == KVC_RICE_ESCAPE) return (uint32_t)kvc_br_get(r, 32);
    return (q << k) | (uint32_t)(k ? kvc_br_get(r, k) : 0);
}

/* n Rice codes with the same k into out, as n kvc_rice_get calls; returns their sum. The codes are
 * cut from one 8-byte load while they fit in it (a load per code put the load's latency into the
 * chain from one code's length to the next code's position), and that chain is three operations:
 * the complemented bits shifted to the code, their leading zeros (the prefix), an add. The
 * complement's bit 0 is set and the window ends above it, so the count never sees an all-zero
 * word and a terminator found in the bits below the window fails the fit test. */
static inline uint64_t kvc_rice_get_run(kvc_bitreader_t *r, unsigned k, unsigned n, uint32_t *out)
{
    uint64_t sum = 0, w;
    unsigned i = 0;
    while (i < n && kvc_br_peek57(r, &w)) {
        const unsigned valid = 63u - (unsigned)(r->pos & 7); /* w's bits from the load, less the lowest */
        const uint64_t nw = ~w | 1u;
        unsigned used = 0; /* <= valid <= 63 */
        for (; i < n; i++) {
            const unsigned q = (unsigned)__builtin_clzll(nw << used), end = used + k + 1 + q;
            if (q >= KVC_RICE_ESCAPE || end > valid) break;
            const uint32_t x = (uint32_t)(q << k) | (k ? (uint32_t)(w << (end - k) >> (64 - k)) : 0u);
            out[i] = x;
            sum += x;
            used = end;
        }
        r->pos += used;
        if (!used && i < n) { /* an escape, or a prefix longer than w holds: the slow way */
            out[i] = kvc_rice_get(r, k);
            sum += out[i++];
        }
    }
    for (; i < n; i++) {
        out[i] = kvc_rice_get(r, k);
        sum += out[i];
    }
    return sum;
}

#endif
