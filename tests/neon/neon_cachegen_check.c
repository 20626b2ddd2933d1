/* SPDX-License-Identifier: BSD-3-Clause */
/* The NEON tier's lane-parallel arithmetic coder (cpu_cachegen_neon.c) against the reference coder
 * (bench/ref_coder.c), under qemu-aarch64 (tests/neon/run.sh): the lanes' divide on edge and
 * random pairs against integer division; the encoder's lengths and every stream byte, with room
 * and with capacities from none to the longest stream (the prefix that fits, nothing written past
 * it); both decoders (per-stream slots and packed) on the valid streams and on cut, bit-flipped,
 * extended and random ones, each symbol equal to the oracle's. Channel counts around the lane
 * groups (16, 8, 4) with scalar leftovers, 1-1000 tokens, bins 1-64, channels of very different
 * stream lengths in one group, long underflow runs. Exit 0 and "ok" when all agree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../bench/ref_coder.h"
#include "cpu_cachegen.h"
#include "cpu_cachegen_lanes.h"

static uint64_t rng = 4810;
static uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* kvc_cg_encode_bound (src/core/cachegen.c, not linked here): always enough. */
static size_t encode_bound(size_t tokens) { return 2 * tokens + tokens / 32768 + 4; }

static int failures;
static long checks;

static void check(int ok, const char *what, size_t T, size_t C, unsigned B)
{
    checks++;
    if (!ok && failures++ < 10) fprintf(stderr, "FAIL %s: T %zu C %zu B %u\n", what, T, C, B);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

/* Per channel a different source (constant, two symbols, narrow and wide peaks, uniform, or a
 * middle symbol straddling the midpoint: long underflow runs). */
static void symbols(uint8_t *s, size_t T, size_t C, unsigned B)
{
    for (size_t c = 0; c < C; c++) {
        const unsigned kind = (unsigned)(rnd() % 6), k = (unsigned)(rnd() % B);
        for (size_t t = 0; t < T; t++) {
            const uint64_t r = rnd();
            unsigned v;
            switch (kind) {
            case 0: v = k; break;
            case 1: v = r & 1 ? k : B - 1; break;
            case 2: v = (k + (unsigned)(r % 3)) % B; break;
            case 3: v = (k + (unsigned)(r % 9) + (unsigned)(r >> 8) % 9) % B; break;
            case 4: v = B / 2; break;
            default: v = (unsigned)(r % B); break;
            }
            s[t * C + c] = (uint8_t)v;
        }
    }
}

/* Strictly increasing cdf[0..B-1] per channel, cdf[0] possibly above 0, the middle symbol of a
 * channel wide around the midpoint when `mid` (underflow runs). */
static void cdfs(uint16_t *cdf, size_t C, unsigned B, int mid)
{
    for (size_t k = 0; k < C; k++) {
        uint16_t *row = cdf + k * (B + 1);
        unsigned at = (unsigned)(rnd() % 200);
        const unsigned room = (65535 - at) / B;
        for (unsigned i = 0; i < B; i++) {
            row[i] = (uint16_t)at;
            const uint64_t r = rnd();
            at += 1 + (unsigned)(r % 4 == 0 ? 0 : (r >> 8) % room);
        }
        if (mid && B >= 3 && k % 2) {
            for (unsigned i = 0; i < B; i++) row[i] = (uint16_t)(i * 3 + (i > B / 2 ? 49152 : i == B / 2 ? 16384 : 0));
        }
        row[B] = (uint16_t)rnd();
    }
}

static void decode_both(const uint16_t *cdf, unsigned B, const uint8_t *streams, size_t cap, const int32_t *len, size_t T,
                        size_t C, const char *what)
{
    uint8_t *want = xmalloc(T * C), *got = xmalloc(T * C);
    ref_cg_decode(cdf, B, streams, cap, len, 1, T, C, want);
    cg_dec_job_t j = { .cdf = cdf, .base = streams, .stride = cap, .lengths = len, .symbols = got, .tokens = T,
                       .channels = C, .num_bins = B };
    memset(got, 0xEE, T * C);
    cg_kernels_neon.decode(&j, 0, 0, C);
    check(!memcmp(got, want, T * C), what, T, C, B);
    size_t nb = 0;
    for (size_t k = 0; k < C; k++) nb += (size_t)len[k];
    uint8_t *packed = xmalloc(nb); /* exactly the streams' bytes */
    int64_t *ps = xmalloc(C * 8);
    for (size_t k = 0, at = 0; k < C; k++) {
        if (len[k]) memcpy(packed + at, streams + k * cap, (size_t)len[k]);
        at += (size_t)len[k];
        ps[k] = (int64_t)at;
    }
    cg_dec_job_t pj = { .cdf = cdf, .base = nb ? packed : NULL, .prefsum = ps, .symbols = got, .tokens = T,
                        .channels = C, .num_bins = B };
    memset(got, 0xEE, T * C);
    cg_kernels_neon.decode(&pj, 0, 0, C);
    check(!memcmp(got, want, T * C), "packed", T, C, B);
    free(packed);
    free(ps);
    free(want);
    free(got);
}

static void round_trip(size_t T, size_t C, unsigned B, int mid)
{
    const size_t cap = encode_bound(T) + 8;
    uint8_t *sym = xmalloc(T * C), *want = calloc(C * cap, 1), *got = calloc(C * cap, 1);
    uint16_t *cdf = xmalloc(C * (B + 1) * 2);
    int32_t *wlen = xmalloc(C * 4), *glen = xmalloc(C * 4);
    if (!want || !got) abort();
    symbols(sym, T, C, B);
    if (mid || rnd() % 2) cdfs(cdf, C, B, mid);
    else ref_cg_cdf(sym, 1, T, C, B, cdf);
    ref_cg_encode(cdf, B, sym, 1, T, C, want, cap, wlen);
    cg_enc_job_t e = { .cdf = cdf, .symbols = sym, .streams = got, .lengths = glen, .tokens = T, .channels = C,
                       .capacity = cap, .num_bins = B };
    cg_kernels_neon.encode(&e, 0, 0, C);
    check(!memcmp(glen, wlen, C * 4) && !memcmp(got, want, C * cap), "encode", T, C, B);
    decode_both(cdf, B, want, cap, wlen, T, C, "decode");

    /* Capacities below the longest stream: full lengths, each slot's prefix, nothing after it. */
    size_t longest = 0;
    for (size_t k = 0; k < C; k++) longest = (size_t)wlen[k] > longest ? (size_t)wlen[k] : longest;
    const size_t caps[] = { 0, 1, 3, 4, 5, 9, longest / 2, longest > 0 ? longest - 1 : 0 };
    for (size_t ci = 0; ci < sizeof caps / sizeof caps[0] && T <= 300; ci++) {
        const size_t cp = caps[ci];
        uint8_t *buf = xmalloc(C * cp + 16);
        memset(buf, 0x5A, C * cp + 16);
        cg_enc_job_t s = e;
        s.streams = cp ? buf : NULL;
        s.capacity = cp;
        cg_kernels_neon.encode(&s, 0, 0, C);
        int ok = !memcmp(glen, wlen, C * 4);
        for (size_t k = 0; k < C; k++) {
            const size_t n = (size_t)wlen[k] < cp ? (size_t)wlen[k] : cp;
            ok &= !memcmp(buf + k * cp, want + k * cap, n);
            for (size_t b = n; b < cp; b++) ok &= buf[k * cp + b] == 0x5A;
        }
        for (size_t b = 0; b < 16; b++) ok &= buf[C * cp + b] == 0x5A;
        check(ok, "capacity", T, C, B);
        free(buf);
    }

    /* Damaged: cut, flipped, extended by bytes of the slot, random lengths. */
    for (int how = 0; how < 4; how++) {
        uint8_t *dam = xmalloc(C * cap);
        int32_t *len = xmalloc(C * 4);
        memcpy(dam, want, C * cap);
        for (size_t b = 0; b < C * cap; b++)
            if (how == 3) dam[b] = (uint8_t)rnd();
        for (size_t k = 0; k < C; k++) {
            const uint64_t r = rnd();
            switch (how) {
            case 0: len[k] = (int32_t)(r % ((uint64_t)wlen[k] + 1)); break;
            case 1:
                len[k] = wlen[k];
                if (len[k]) dam[k * cap + r % (uint64_t)len[k]] ^= (uint8_t)(1u << (r >> 32) % 8);
                break;
            case 2: len[k] = wlen[k] + (int32_t)(r % 9) < (int32_t)cap ? wlen[k] + (int32_t)(r % 9) : (int32_t)cap; break;
            default: len[k] = (int32_t)(r % (cap + 1)); break;
            }
        }
        decode_both(cdf, B, dam, cap, len, T, C, "damaged");
        free(dam);
        free(len);
    }
    free(sym);
    free(want);
    free(got);
    free(cdf);
    free(wlen);
    free(glen);
}

int main(void)
{
    /* The divide: edge divisors of (2^30, 2^32], quotients just below an integer, random pairs. */
    static const uint32_t r_edge[] = { 0x40000000u, 0x40000001u, 0x7FFFFFFFu, 0x80000000u, 0xBFFFFFFFu,
                                       0xFFFF0000u, 0xFFFFFFFEu, 0xFFFFFFFFu };
    for (int round = 0; round < 200000; round++) {
        uint32_t d[4], r1[4], q[4];
        for (int i = 0; i < 4; i++) {
            const uint64_t x = rnd();
            if ((round + i) % 3 == 0) {
                r1[i] = r_edge[x % 8];
                d[i] = (x >> 8) % 2 ? r1[i] - (uint32_t)(x >> 32) % 3 : (uint32_t)(x >> 32);
            } else if ((round + i) % 3 == 1) {
                const uint32_t m = 16384 + 1 + (uint32_t)(x % 49152);
                r1[i] = 65536u * m - 1;
                d[i] = (uint32_t)((1 + (x >> 20) % 65536) * m - 1 + (x >> 40) % 3 - 1);
            } else {
                r1[i] = 0x40000000u + (uint32_t)(x % 0xC0000000u);
                d[i] = (uint32_t)(x >> 32);
            }
        }
        vst1q_u32(q, cg_lane_quotient(vld1q_u32(d), vld1q_u32(r1)));
        for (int i = 0; i < 4; i++) {
            const uint64_t want = (((uint64_t)d[i] << 16) | 0xFFFF) / ((uint64_t)r1[i] + 1);
            checks++;
            if (q[i] != want && failures++ < 10) fprintf(stderr, "FAIL divide d %#x r1 %#x: %u\n", d[i], r1[i], q[i]);
        }
    }
    static const size_t Cs[] = { 1, 3, 4, 5, 8, 11, 16, 17, 31, 36, 64, 70 };
    static const size_t Ts[] = { 1, 2, 40, 255, 256, 257, 1000 };
    for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++)
        for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
            for (unsigned B = 1; B <= 64; B += (B < 6 ? 1 : 9))
                round_trip(Ts[ti], Cs[ci], B, (int)((ci + ti + B) % 3 == 0));
    if (failures) {
        fprintf(stderr, "%d of %ld checks failed\n", failures, checks);
        return 1;
    }
    printf("ok: neon cachegen lanes, %ld checks\n", checks);
    return 0;
}
