/* SPDX-License-Identifier: BSD-3-Clause */
/* Scalar reference CacheGen coder (see ref_coder.h): LMCache's loops, one bit at a time. */
#include "ref_coder.h"

#include <string.h>

void ref_cg_cdf(const uint8_t *symbols, size_t L, size_t T, size_t C, unsigned B, uint16_t *cdf)
{
    for (size_t l = 0; l < L; l++)
        for (size_t c = 0; c < C; c++) {
            uint64_t count[256] = { 0 };
            for (size_t t = 0; t < T; t++) count[symbols[(l * T + t) * C + c]]++;
            uint16_t *out = cdf + (l * C + c) * (B + 1);
            uint64_t cum = 0;
            for (unsigned i = 0; i <= B; i++) {
                out[i] = (uint16_t)(T == 0 ? i : (65535 - B) * cum / T + i);
                if (i < B) cum += count[i];
            }
        }
}

/* ---- bit writer: MSB first, counts bytes past the capacity without writing them ---- */
typedef struct {
    uint8_t *out;
    size_t cap, pos;
    unsigned cur, nbits;
} bitw_t;

static void put_bit(bitw_t *w, unsigned bit)
{
    w->cur = (w->cur << 1) | (bit & 1);
    if (++w->nbits == 8) {
        if (w->pos < w->cap) w->out[w->pos] = (uint8_t)w->cur;
        w->pos++;
        w->cur = 0;
        w->nbits = 0;
    }
}

static void put_bit_plus_pending(bitw_t *w, unsigned bit, uint64_t *pending)
{
    put_bit(w, bit);
    for (; *pending; (*pending)--) put_bit(w, !bit);
}

size_t ref_cg_encode_stream(const uint16_t *cdf, unsigned B, const uint8_t *sym, size_t T, size_t stride,
                            uint8_t *out, size_t cap)
{
    const unsigned max_sym = B - 1;
    uint32_t low = 0, high = 0xFFFFFFFFu;
    uint64_t pending = 0;
    bitw_t w = { out, cap, 0, 0, 0 };
    for (size_t t = 0; t < T; t++) {
        const unsigned s = sym[t * stride];
        const uint64_t range = (uint64_t)high - low + 1;
        const uint64_t c_lo = cdf[s], c_hi = s == max_sym ? 65536 : cdf[s + 1];
        high = (uint32_t)((uint64_t)low - 1 + ((range * c_hi) >> 16));
        low = (uint32_t)((uint64_t)low + ((range * c_lo) >> 16));
        for (;;) {
            if (high < 0x80000000u) {
                put_bit_plus_pending(&w, 0, &pending);
                low = low << 1;
                high = (high << 1) | 1;
            } else if (low >= 0x80000000u) {
                put_bit_plus_pending(&w, 1, &pending);
                low = low << 1;
                high = (high << 1) | 1;
            } else if (low >= 0x40000000u && high < 0xC0000000u) {
                pending++;
                low = (low << 1) & 0x7FFFFFFFu;
                high = (high << 1) | 0x80000001u;
            } else {
                break;
            }
        }
    }
    pending++;
    put_bit_plus_pending(&w, low < 0x40000000u ? 0 : 1, &pending);
    while (w.nbits) put_bit(&w, 0);
    return w.pos;
}

/* ---- decoder ---- */
typedef struct {
    const uint8_t *bytes;
    size_t len, next; /* next byte index */
    unsigned bit;     /* bits of bytes[next] already used */
} bitr_t;

static unsigned byte_at(const bitr_t *r, size_t i) { return i < r->len ? r->bytes[i] : 0; }

static unsigned next_bit(bitr_t *r)
{
    const unsigned b = (byte_at(r, r->next) >> (7 - r->bit)) & 1;
    if (++r->bit == 8) {
        r->bit = 0;
        r->next++;
    }
    return b;
}

static unsigned search(const uint16_t *cdf, unsigned max_sym, uint16_t count)
{
    unsigned left = 0, right = max_sym + 1;
    while (left + 1 < right) {
        const unsigned m = (left + right) / 2;
        if (cdf[m] < count) left = m;
        else if (cdf[m] > count) right = m;
        else return m;
    }
    return left;
}

void ref_cg_decode_stream(const uint16_t *cdf, unsigned B, const uint8_t *bytes, size_t len, size_t T,
                          uint8_t *out, size_t stride)
{
    const unsigned max_sym = B - 1;
    bitr_t r = { bytes, len, 4, 0 };
    uint32_t value = 0;
    for (size_t i = 0; i < 4; i++) value = (value << 8) | byte_at(&r, i);
    uint32_t low = 0, high = 0xFFFFFFFFu;
    for (size_t t = 0; t < T; t++) {
        const uint64_t range = (uint64_t)high - low + 1;
        const uint16_t count = (uint16_t)((((uint64_t)(uint32_t)(value - low) + 1) * 65536 - 1) / range);
        const unsigned s = search(cdf, max_sym, count);
        out[t * stride] = (uint8_t)s;
        if (t == T - 1) break;
        const uint64_t c_lo = cdf[s], c_hi = s == max_sym ? 65536 : cdf[s + 1];
        high = (uint32_t)((uint64_t)low - 1 + ((range * c_hi) >> 16));
        low = (uint32_t)((uint64_t)low + ((range * c_lo) >> 16));
        for (;;) {
            if (low >= 0x80000000u || high < 0x80000000u) {
                low = low << 1;
                high = (high << 1) | 1;
                value = (value << 1) | next_bit(&r);
            } else if (low >= 0x40000000u && high < 0xC0000000u) {
                low = (low << 1) & 0x7FFFFFFFu;
                high = (high << 1) | 0x80000001u;
                value = ((value - 0x40000000u) << 1) | next_bit(&r);
            } else {
                break;
            }
        }
    }
}

void ref_cg_encode(const uint16_t *cdf, unsigned B, const uint8_t *symbols, size_t L, size_t T, size_t C,
                   uint8_t *streams, size_t cap, int32_t *lengths)
{
    for (size_t l = 0; l < L; l++)
        for (size_t c = 0; c < C; c++) {
            const size_t k = l * C + c;
            lengths[k] = (int32_t)ref_cg_encode_stream(cdf + k * (B + 1), B, symbols + l * T * C + c, T, C,
                                                       streams ? streams + k * cap : NULL, cap);
        }
}

void ref_cg_decode(const uint16_t *cdf, unsigned B, const uint8_t *streams, size_t cap, const int32_t *lengths,
                   size_t L, size_t T, size_t C, uint8_t *symbols)
{
    for (size_t l = 0; l < L; l++)
        for (size_t c = 0; c < C; c++) {
            const size_t k = l * C + c;
            ref_cg_decode_stream(cdf + k * (B + 1), B, streams + k * cap, (size_t)lengths[k], T,
                                 symbols + l * T * C + c, C);
        }
}
