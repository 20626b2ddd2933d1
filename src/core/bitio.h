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

static inline void kvc_bw_put(kvc_bitwriter_t *w, uint64_t v, unsigned n)
{
    for (unsigned i = n; i-- > 0;) {
        if (w->buf && (w->bits >> 3) < w->cap) {
            uint8_t *b = &w->buf[w->bits >> 3];
            const unsigned sh = 7u - (unsigned)(w->bits & 7);
            *b = (uint8_t)((*b & ~(1u << sh)) | (((v >> i) & 1u) << sh));
        }
        w->bits++;
    }
}

static inline uint64_t kvc_br_get(kvc_bitreader_t *r, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++) {
        unsigned bit = 0;
        if ((r->pos >> 3) < r->len) bit = (r->buf[r->pos >> 3] >> (7u - (unsigned)(r->pos & 7))) & 1u;
        else r->overrun = 1;
        r->pos++;
        v = (v << 1) | bit;
    }
    return v;
}

#endif
