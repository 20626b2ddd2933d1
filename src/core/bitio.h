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

static inline uint64_t kvc_br_get(kvc_bitreader_t *r, unsigned n)
{
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

#endif
