/* SPDX-License-Identifier: BSD-3-Clause */
/* The NEON tier's rANS encoder and decoder against the portable ones, under qemu-aarch64 (tests/neon/run.sh):
 * streams of 8 channels (one group) and of 32 (four groups through the same 8 states) coded by the
 * portable encoder, then decoded by kvc_rans_decode_stream on the scalar and the neon tier, which
 * must give the same status and write the same bytes (the whole output, also when the stream is
 * damaged), and the original symbols when it is intact; the NEON encoder must write the portable
 * encoder's bytes, and refuse (0) a symbol without frequency or one >= 64 as it does.
 * 64-3000 tokens (the fast path starts at 64), 2-64 bins, skewed and constant channels, a symbol
 * stride of 8, 11 and 35; damage: every cut of the short streams and a sample of the long ones,
 * appended bytes, single-bit flips. Exit 0 and "ok" when all agree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore/backend.h> /* kvc_isa_t */

#include "cpu_rans.h"

static uint32_t rng = 12345;
static uint32_t rnd(void)
{
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

static int failures, checks;

/* Decode in[0, len) on both tiers into fresh buffers; same status and bytes, and want (if given). */
static void agree(const uint8_t *in, size_t len, size_t T, size_t stride, unsigned nch, const uint16_t *cum, unsigned B,
                  const uint8_t *want, const char *what)
{
    uint8_t *copy = malloc(len ? len : 1), *a = malloc(T * stride), *b = malloc(T * stride);
    memcpy(copy, in, len); /* exactly len bytes */
    memset(a, 0xA5, T * stride);
    memset(b, 0xA5, T * stride);
    const kvc_status_t sa = kvc_rans_decode_stream(KVC_ISA_SCALAR, copy, len, T, nch, cum, B, a, stride);
    const kvc_status_t sb = kvc_rans_decode_stream(KVC_ISA_NEON, copy, len, T, nch, cum, B, b, stride);
    checks++;
    if (sa != sb || memcmp(a, b, T * stride) != 0 || (want && (sa != KVC_OK || memcmp(a, want, T * stride) != 0))) {
        if (failures++ < 10)
            fprintf(stderr, "FAIL %s: T %zu B %u nch %u len %zu: scalar %d, neon %d, bytes %s\n", what, T, B, nch, len, (int)sa, (int)sb,
                    memcmp(a, b, T * stride) ? "differ" : "agree");
    }
    free(copy);
    free(a);
    free(b);
}

int main(void)
{
    const size_t Ts[] = { 64, 65, 100, 256, 257, 1000, 3000 };
    const unsigned Bs[] = { 2, 5, 16, 32, 64 };
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
        for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++)
            for (int variant = 0; variant < 3; variant++) {
                const size_t T = Ts[ti], stride = variant == 2 ? 35 : variant ? 11 : 8;
                const unsigned B = Bs[bi], nch = variant == 2 ? 32 : 8;
                uint8_t *sym = calloc(T * stride, 1);
                uint16_t cum[32 * 65];
                for (unsigned i = 0; i < nch; i++) {
                    uint32_t counts[64] = { 0 };
                    const unsigned centre = rnd() % B, spread = 1 + rnd() % (B / 2 + 1);
                    for (size_t t = 0; t < T; t++) {
                        int s = (int)centre;
                        if (!(variant && i == 0)) s += (int)(rnd() % (2 * spread + 1)) - (int)spread;
                        s = s < 0 ? 0 : s >= (int)B ? (int)B - 1 : s;
                        sym[t * stride + i] = (uint8_t)s;
                        counts[s]++;
                    }
                    kvc_rans_cum_from_counts(counts, B, T, cum + i * (B + 1));
                }
                const size_t cap = kvc_rans_bound(nch, T);
                uint8_t *buf = malloc(cap + 8), *nbuf = malloc(cap);
                const size_t len = kvc_rans_encode_stream(KVC_ISA_SCALAR, sym, stride, T, nch, cum, B, buf, cap);
                if (!len) {
                    fprintf(stderr, "FAIL: the encoder refused T %zu B %u\n", T, B);
                    return 1;
                }
                const size_t nlen = kvc_rans_encode_stream(KVC_ISA_NEON, sym, stride, T, nch, cum, B, nbuf, cap);
                checks++;
                if (nlen != len || memcmp(nbuf, buf, len) != 0) {
                    if (failures++ < 10) fprintf(stderr, "FAIL encode: T %zu B %u: %zu bytes, portable %zu\n", T, B, nlen, len);
                }
                /* a symbol without frequency, and one >= 64: both encoders refuse (0) */
                for (int bad = 0; bad < 2; bad++) {
                    const size_t at = (rnd() % T) * stride + rnd() % nch;
                    const uint8_t keep = sym[at];
                    unsigned z = 0;
                    const uint16_t *c = cum + (at % stride) * (B + 1);
                    while (z < B && c[z + 1] > c[z]) z++;
                    sym[at] = (uint8_t)(bad ? 64 + rnd() % 192 : z); /* z == B: no empty bin, then s >= bins */
                    checks++;
                    if (kvc_rans_encode_stream(KVC_ISA_NEON, sym, stride, T, nch, cum, B, nbuf, cap) != 0 ||
                        kvc_rans_encode_stream(KVC_ISA_SCALAR, sym, stride, T, nch, cum, B, nbuf, cap) != 0) {
                        if (failures++ < 10) fprintf(stderr, "FAIL encode: T %zu B %u: symbol %u at %zu not refused\n", T, B, sym[at], at);
                    }
                    sym[at] = keep;
                }
                free(nbuf);
                { /* the backend's task: pairs of streams (B none, partial, whole) on both tiers */
                    const unsigned nbs[3] = { 0, 5, nch }, ps = 2 * nch;
                    uint8_t *pair = calloc(T * ps, 1);
                    uint16_t pcum[64 * 65];
                    for (size_t t = 0; t < T; t++)
                        for (unsigned i = 0; i < ps; i++) pair[t * ps + i] = sym[t * stride + i % nch];
                    memcpy(pcum, cum, nch * (B + 1) * sizeof(uint16_t));
                    memcpy(pcum + nch * (B + 1), cum, nch * (B + 1) * sizeof(uint16_t));
                    uint8_t *o1 = malloc(2 * cap), *o2 = malloc(2 * cap);
                    const uint8_t *const ys[2] = { pair, pair + nch };
                    const uint16_t *const cs[2] = { pcum, pcum + nch * (B + 1) };
                    uint8_t *const out1[2] = { o1, o1 + cap }, *const out2[2] = { o2, o2 + cap };
                    for (int k = 0; k < 3; k++) {
                        size_t l1[2], l2[2];
                        const unsigned nn[2] = { nch, nbs[k] };
                        kvc_rans_encode_pair(KVC_ISA_SCALAR, ys, cs, nn, ps, T, B, out1, cap, l1);
                        kvc_rans_encode_pair(KVC_ISA_NEON, ys, cs, nn, ps, T, B, out2, cap, l2);
                        checks++;
                        if (l1[0] != l2[0] || l1[1] != l2[1] || memcmp(o1, o2, l1[0]) || (nbs[k] && memcmp(o1 + cap, o2 + cap, l1[1]))) {
                            if (failures++ < 10) fprintf(stderr, "FAIL pair: T %zu B %u nch %u nb %u\n", T, B, nch, nbs[k]);
                        }
                    }
                    free(pair);
                    free(o1);
                    free(o2);
                }
                uint8_t *want = calloc(T * stride, 1); /* the decoder writes the stream's channels of each row only */
                memset(want, 0xA5, T * stride);
                for (size_t t = 0; t < T; t++) memcpy(want + t * stride, sym + t * stride, nch);
                agree(buf, len, T, stride, nch, cum, B, want, "intact");
                for (size_t cut = 0; cut < len; cut += T <= 100 ? 1 : 1 + rnd() % 37) agree(buf, cut, T, stride, nch, cum, B, NULL, "cut");
                buf[len] = 0, buf[len + 1] = 0;
                agree(buf, len + 2, T, stride, nch, cum, B, NULL, "two bytes appended");
                for (int f = 0; f < 60; f++) {
                    const size_t at = rnd() % len;
                    const uint8_t bit = (uint8_t)(1u << (rnd() % 8));
                    buf[at] ^= bit;
                    agree(buf, len, T, stride, nch, cum, B, NULL, "bit flip");
                    buf[at] ^= bit;
                }
                free(sym);
                free(want);
                free(buf);
            }
    if (failures) {
        fprintf(stderr, "neon rANS coder: %d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("ok: neon rANS encoder and decoder agree with the portable ones in %d checks\n", checks);
    return 0;
}
