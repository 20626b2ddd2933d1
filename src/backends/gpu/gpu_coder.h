/* SPDX-License-Identifier: BSD-3-Clause */
/* CacheGen arithmetic coder, one stream per GPU thread (docs/CACHEGEN.md), written as KVC_HD
 * functions so the same code runs in the kernels (cachegen.cu) and, on the CPU, in the tests.
 * Bit-exact with the CPU backend (src/backends/simd/cpu_cachegen_coder.h): the same bulk
 * renormalisation (n1 common bits + n3 underflow steps per symbol), the same length accounting
 * past capacity, the same mod-2^32 decoder difference. The CDF is read through (base, stride) so
 * the kernels can keep it transposed in shared memory: value s is cdf[s * stride]. */
#ifndef KVC_GPU_CODER_H
#define KVC_GPU_CODER_H

#include "common/cdf.h"

/* Bounds of symbol s: cdf[s], and cdf[s + 1] or 65536 for the last symbol. */
KVC_HD uint32_t kvc_cg_bound(const uint16_t *cdf, unsigned stride, unsigned num_bins, unsigned s)
{
    return s < num_bins ? (uint32_t)cdf[s * stride] : 65536u;
}

/* ------------------------------------------------------------------ encoder */

typedef struct kvc_cg_enc {
    uint32_t low, high, nbits;
    uint64_t pending, acc;
    uint64_t pos; /* bytes produced, counted past capacity */
    uint8_t *out;
    uint64_t cap;
} kvc_cg_enc_t;

/* Store a big-endian word at pos, clipped to the capacity. */
KVC_HD void kvc_cg_store_word(kvc_cg_enc_t *e, uint32_t w)
{
    if (e->pos + 4 <= e->cap) {
        uint8_t *p = e->out + e->pos;
#ifdef KVC_DEVICE_PASS
        if (((uintptr_t)p & 3) == 0) {
            *(uint32_t *)p = gpu_bswap32(w);
            return;
        }
#endif
        p[0] = (uint8_t)(w >> 24);
        p[1] = (uint8_t)(w >> 16);
        p[2] = (uint8_t)(w >> 8);
        p[3] = (uint8_t)w;
    } else {
        for (uint64_t i = 0; i < 4; i++)
            if (e->pos + i < e->cap) e->out[e->pos + i] = (uint8_t)(w >> (24 - 8 * i));
    }
}

/* Append n <= 32 bits (MSB first). */
KVC_HD void kvc_cg_put(kvc_cg_enc_t *e, uint32_t bits, unsigned n)
{
    e->acc = (e->acc << n) | bits;
    e->nbits += n;
    if (e->nbits >= 32) {
        e->nbits -= 32;
        kvc_cg_store_word(e, (uint32_t)(e->acc >> e->nbits));
        e->pos += 4;
    }
}

/* The first decided bit b (top bit of `top`, n1 >= 1 bits), `pending` copies of !b, the rest. */
KVC_HD void kvc_cg_emit(kvc_cg_enc_t *e, uint32_t top, unsigned n1)
{
    const uint64_t p = e->pending;
    const uint32_t b = top >> (n1 - 1), rest = top & ((1u << (n1 - 1)) - 1);
    if (p + n1 <= 32) {
        const uint32_t first = (uint32_t)(((uint64_t)1 << p) - 1 + b); /* b then p copies of !b */
        kvc_cg_put(e, (first << (n1 - 1)) | rest, (unsigned)p + n1);
    } else {
        kvc_cg_put(e, b, 1);
        for (uint64_t left = p; left;) {
            const unsigned k = left >= 32 ? 32 : (unsigned)left;
            kvc_cg_put(e, b ? 0u : (uint32_t)(0xFFFFFFFFull >> (32 - k)), k);
            left -= k;
        }
        kvc_cg_put(e, rest, n1 - 1);
    }
    e->pending = 0;
}

KVC_HD void kvc_cg_enc_symbol(kvc_cg_enc_t *e, uint32_t c_lo, uint32_t c_hi)
{
    const uint64_t range = (uint64_t)(e->high - e->low) + 1;
    const uint32_t hi = e->low + (uint32_t)((range * c_hi) >> 16) - 1;
    const uint32_t lo = e->low + (uint32_t)((range * c_lo) >> 16);
    const unsigned n1 = kvc_clz32(lo ^ hi);
    const unsigned n3 = kvc_clz32(~((lo & ~hi) << (n1 + 1)));
    if (n1) kvc_cg_emit(e, lo >> (32 - n1), n1);
    e->pending += n3;
    const unsigned n = n1 + n3;
    e->low = (lo << n) & 0x7FFFFFFFu;
    e->high = (hi << n) | ((1u << n) - 1) | 0x80000000u;
}

/* Encode `tokens` symbols (sym[t * sym_stride]) into out[0, cap); returns the full length, which
 * may exceed cap (only the first cap bytes are written; out may be NULL when cap is 0). */
KVC_HD uint64_t kvc_cg_encode_stream(const uint16_t *cdf, unsigned stride, unsigned num_bins, const uint8_t *sym,
                                     uint64_t sym_stride, uint64_t tokens, uint8_t *out, uint64_t cap)
{
    kvc_cg_enc_t e;
    e.low = 0;
    e.high = 0xFFFFFFFFu;
    e.nbits = 0;
    e.pending = 0;
    e.acc = 0;
    e.pos = 0;
    e.out = out;
    e.cap = cap;
    for (uint64_t t = 0; t < tokens; t++) {
        const unsigned s = sym[t * sym_stride];
        kvc_cg_enc_symbol(&e, kvc_cg_bound(cdf, stride, num_bins, s), kvc_cg_bound(cdf, stride, num_bins, s + 1));
    }
    /* Final flush: pending + 1 bits after the bit that picks a point inside [low, high], then zero
     * padding to a byte. */
    e.pending += 1;
    kvc_cg_emit(&e, e.low >= 0x40000000u, 1);
    const unsigned nbytes = (e.nbits + 7) / 8;
    const uint32_t w = (uint32_t)(e.acc << (32 - e.nbits));
    for (unsigned i = 0; i < nbytes; i++)
        if (e.pos + i < e.cap) e.out[e.pos + i] = (uint8_t)(w >> (24 - 8 * i));
    return e.pos + nbytes;
}

/* ------------------------------------------------------------------ decoder */

/* floor(num / d) for num < 2^48 and 2^30 < d <= 2^32 (the decoder's count): one double division
 * (exact operands, quotient < 2^18, so the rounded quotient is off by at most one) and a
 * correction step, instead of a 64-bit integer division. */
KVC_HD uint64_t kvc_cg_div48(uint64_t num, uint64_t d)
{
    uint64_t q = (uint64_t)((double)num / (double)d);
    const int64_t r = (int64_t)(num - q * d);
    if (r < 0) q--;
    else if ((uint64_t)r >= d) q++;
    return q;
}

/* MSB-first bit reader over len bytes; bytes past len read as zero. */
typedef struct kvc_cg_bits {
    const uint8_t *p;
    uint64_t len, next; /* next byte to load */
    uint64_t buf;       /* unread bits, MSB-aligned */
    unsigned avail;     /* valid bits in buf, >= 57 after a refill */
} kvc_cg_bits_t;

KVC_HD void kvc_cg_refill(kvc_cg_bits_t *r)
{
    while (r->avail <= 56) {
        const uint64_t byte = r->next < r->len ? r->p[r->next] : 0u;
        r->buf |= byte << (56 - r->avail);
        r->next++;
        r->avail += 8;
    }
}

/* Decode `tokens` symbols into sym[t * sym_stride] from in[0, len). The CDF's entries
 * cdf[1 .. num_bins-1] must be strictly increasing (checked before any decoding). */
KVC_HD void kvc_cg_decode_stream(const uint16_t *cdf, unsigned stride, unsigned num_bins, const uint8_t *in,
                                 uint64_t len, uint8_t *sym, uint64_t sym_stride, uint64_t tokens)
{
    const unsigned max_sym = num_bins - 1;
    unsigned top_step = 1; /* largest power of two <= max_sym (for the search) */
    while (top_step * 2 <= max_sym) top_step *= 2;
    kvc_cg_bits_t r;
    r.p = in;
    r.len = len;
    r.next = 0;
    r.buf = 0;
    r.avail = 0;
    kvc_cg_refill(&r);
    /* d = value - low (mod 2^32), as the CPU backend: renormalisation maps it to 2d + next bit. */
    uint32_t d = (uint32_t)(r.buf >> 32), low = 0, high = 0xFFFFFFFFu;
    r.buf <<= 32;
    r.avail -= 32;
    kvc_cg_refill(&r);
    for (uint64_t t = 0; t < tokens; t++) {
        const uint64_t range = (uint64_t)(high - low) + 1;
        const uint32_t count = (uint32_t)kvc_cg_div48(((uint64_t)d << 16) | 0xFFFFu, range) & 0xFFFFu;
        /* s = number of entries of cdf[1 .. max_sym] that are <= count (a prefix: they increase). */
        unsigned s = 0;
        if (max_sym)
            for (unsigned step = top_step; step; step >>= 1)
                if (s + step <= max_sym && cdf[(s + step) * stride] <= count) s += step;
        sym[t * sym_stride] = (uint8_t)s;
        if (t + 1 == tokens) break;
        const uint32_t lo_off = (uint32_t)((range * kvc_cg_bound(cdf, stride, num_bins, s)) >> 16);
        const uint32_t hi = low + (uint32_t)((range * kvc_cg_bound(cdf, stride, num_bins, s + 1)) >> 16) - 1;
        const uint32_t lo = low + lo_off;
        const unsigned n1 = kvc_clz32(lo ^ hi);
        const unsigned n = n1 + kvc_clz32(~((lo & ~hi) << (n1 + 1)));
        low = (lo << n) & 0x7FFFFFFFu;
        high = (hi << n) | ((1u << n) - 1) | 0x80000000u;
        d = (uint32_t)((((uint64_t)(d - lo_off) << 32 | (r.buf >> 32)) << n) >> 32);
        r.buf <<= n;
        r.avail -= n;
        kvc_cg_refill(&r);
    }
}

#endif
