/* SPDX-License-Identifier: BSD-3-Clause */
/* The lane-parallel arithmetic coder kernels (16 lanes on the avx512 tier, cpu_cachegen_avx512.c;
 * 8 on the avx2 tier, cpu_cachegen_avx2.c) against the scalar reference coder (bench/ref_coder.c)
 * symbol for symbol and byte for byte, on every CPU ISA tier the machine has: channel counts that
 * fill lane groups of 64 to 8 and leave scalar leftovers, streams of very different lengths in one
 * group, 1 to 1000 tokens, bins 1-64, empty, truncated and damaged streams, and the exactness of
 * the lanes' divide and (avx2) leading-zero count. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <kvcore.h>

#include "../../bench/ref_coder.h"
#include "test_util.h"

#ifdef KVC_HAVE_X86_SIMD
/* cachegen_lanes_probe.c */
void cg_lanes_probe_quotient(const uint32_t d[16], const uint32_t r1[16], uint32_t q[16]);
void cg_lanes_probe_quotient_avx2(const uint32_t d[8], const uint32_t r1[8], uint32_t q[8]);
void cg_lanes_probe_lzcnt_avx2(const uint32_t x[8], uint32_t n[8]);
#endif

/* Per channel a different source, so that the streams of one lane group have very different
 * lengths: constant (a byte or two), two symbols, a narrow and a wide rounded peak, uniform. */
static void mixed_symbols(uint64_t *rng, uint8_t *s, size_t L, size_t T, size_t C, unsigned B)
{
    for (size_t l = 0; l < L; l++)
        for (size_t c = 0; c < C; c++) {
            const unsigned kind = (unsigned)(kvc_test_rng_next(rng) % 5), k = (unsigned)(kvc_test_rng_next(rng) % B);
            for (size_t t = 0; t < T; t++) {
                const uint64_t r = kvc_test_rng_next(rng);
                unsigned v;
                switch (kind) {
                case 0: v = k; break;
                case 1: v = r & 1 ? k : B - 1; break;
                case 2: v = (k + (unsigned)(r % 3)) % B; break;
                case 3: v = (k + (unsigned)(r % 9) + (unsigned)(r >> 8) % 9) % B; break;
                default: v = (unsigned)(r % B); break;
                }
                s[(l * T + t) * C + c] = (uint8_t)v;
            }
        }
}

/* Both decoders of ctx on streams [ns, cap] with lengths len give the oracle's symbols: per-stream
 * slots, and the streams packed into a buffer of exactly their bytes (ASan sees a read past the
 * last one; a read into a neighbour shows as a difference, the oracle reading zeros there). */
static void decode_like_oracle(kvc_context_t *ctx, const uint16_t *cdf, unsigned B, const uint8_t *streams, size_t cap,
                               const int32_t *len, size_t L, size_t T, size_t C, const char *what)
{
    const size_t ns = L * C, nsym = L * T * C;
    uint8_t *want = kvc_test_xmalloc(nsym), *got = kvc_test_xmalloc(nsym);
    ref_cg_decode(cdf, B, streams, cap, len, L, T, C, want);
    kvc_cg_decode_params_t da = { .cdf = cdf, .streams = streams, .lengths = len, .symbols = got, .layers = L,
                                  .tokens = T, .channels = C, .capacity = cap, .num_bins = B };
    memset(got, 0xEE, nsym);
    cr_assert_eq(kvc_cg_decode(ctx, &da), KVC_OK, "%s", kvc_last_error());
    KVC_TEST_ASSERT_SAME(got, want, nsym, "%s: decode T%zu C%zu B%u %s", what, T, C, B, kvc_context_isa(ctx));

    size_t nb = 0;
    for (size_t k = 0; k < ns; k++) nb += (size_t)len[k];
    uint8_t *packed = nb ? kvc_test_xmalloc(nb) : NULL;
    int64_t *ps = kvc_test_xmalloc(ns * 8);
    for (size_t k = 0, at = 0; k < ns; k++) {
        if (len[k]) memcpy(packed + at, streams + k * cap, (size_t)len[k]);
        at += (size_t)len[k];
        ps[k] = (int64_t)at;
    }
    kvc_cg_decode_packed_params_t pa = { .cdf = cdf, .bytes = packed, .nbytes = nb, .prefsum = ps, .symbols = got,
                                         .layers = L, .tokens = T, .channels = C, .num_bins = B };
    memset(got, 0xEE, nsym);
    cr_assert_eq(kvc_cg_decode_packed(ctx, &pa), KVC_OK, "%s", kvc_last_error());
    KVC_TEST_ASSERT_SAME(got, want, nsym, "%s: decode_packed T%zu C%zu B%u %s", what, T, C, B, kvc_context_isa(ctx));
    free(packed);
    free(ps);
    free(want);
    free(got);
}

/* Encode with ctx == the oracle's bytes and lengths, and both decoders give the symbols back. */
static void round_trip(kvc_context_t *ctx, uint64_t *rng, size_t L, size_t T, size_t C, unsigned B, int data_cdf)
{
    const size_t nsym = L * T * C, ns = L * C, cap = kvc_cg_encode_bound(T);
    uint8_t *sym = kvc_test_xmalloc(nsym);
    uint16_t *cdf = kvc_test_xmalloc(ns * (B + 1) * 2);
    mixed_symbols(rng, sym, L, T, C, B);
    if (data_cdf) ref_cg_cdf(sym, L, T, C, B, cdf);
    else kvc_test_random_cdf(rng, cdf, ns, B);
    uint8_t *want = calloc(ns * cap, 1), *got = calloc(ns * cap, 1);
    cr_assert(want && got);
    int32_t *wlen = kvc_test_xmalloc(ns * 4), *glen = kvc_test_xmalloc(ns * 4);
    ref_cg_encode(cdf, B, sym, L, T, C, want, cap, wlen);
    kvc_cg_encode_params_t ea = { .cdf = cdf, .symbols = sym, .streams = got, .lengths = glen, .layers = L,
                                  .tokens = T, .channels = C, .capacity = cap, .num_bins = B };
    cr_assert_eq(kvc_cg_encode(ctx, &ea), KVC_OK, "%s", kvc_last_error());
    KVC_TEST_ASSERT_SAME(glen, wlen, ns * 4, "lengths T%zu C%zu B%u %s", T, C, B, kvc_context_isa(ctx));
    KVC_TEST_ASSERT_SAME(got, want, ns * cap, "streams T%zu C%zu B%u %s", T, C, B, kvc_context_isa(ctx));
    decode_like_oracle(ctx, cdf, B, want, cap, wlen, L, T, C, "valid");
    uint8_t *out = kvc_test_xmalloc(nsym);
    kvc_cg_decode_params_t da = { .cdf = cdf, .streams = want, .lengths = wlen, .symbols = out, .layers = L,
                                  .tokens = T, .channels = C, .capacity = cap, .num_bins = B };
    cr_assert_eq(kvc_cg_decode(ctx, &da), KVC_OK, "%s", kvc_last_error());
    KVC_TEST_ASSERT_SAME(out, sym, nsym, "symbols back T%zu C%zu B%u %s", T, C, B, kvc_context_isa(ctx));
    free(out);
    free(sym);
    free(cdf);
    free(want);
    free(got);
    free(wlen);
    free(glen);
}

/* ------------------------------------------------------------------ the divide */

#ifdef KVC_HAVE_X86_SIMD
/* Every divide of the lanes against integer division: `rounds` rounds of 16 (avx512) or 8 (avx2)
 * lanes. The decoder's divisors r1 + 1 lie in (2^30, 2^32]; edge divisors, divisors 65536 m whose
 * quotients sit just below an integer (d = q m - 1: the numerator is one short of q (r1 + 1)),
 * and random pairs. */
static void check_quotients(int lanes, int rounds, uint64_t seed)
{
    static const uint32_t r_edge[] = { 0x40000000u, 0x40000001u, 0x4000FFFFu, 0x7FFFFFFFu, 0x80000000u,
                                       0x80000001u, 0xBFFFFFFFu, 0xFFFEFFFFu, 0xFFFF0000u, 0xFFFFFFFEu,
                                       0xFFFFFFFFu };
    uint64_t rng = seed;
    uint32_t d[16], r1[16], q[16];
    size_t checked = 0;
    for (int round = 0; round < rounds; round++) {
        for (int i = 0; i < lanes; i++) {
            const uint64_t x = kvc_test_rng_next(&rng);
            switch ((round + i) % 4) {
            case 0: { /* edge divisor, edge or random numerator */
                r1[i] = r_edge[x % (sizeof r_edge / sizeof r_edge[0])];
                const uint32_t de[] = { 0, 1, 0xFFFF, 0x10000, r1[i] - 1, r1[i], r1[i] + 1, 0x7FFFFFFF,
                                        0x80000000u, 0xFFFFFFFEu, 0xFFFFFFFFu, (uint32_t)(x >> 32) };
                d[i] = de[(x >> 8) % (sizeof de / sizeof de[0])];
                break;
            }
            case 1: { /* r1 + 1 = 65536 m: d = q m - 1 and its neighbours */
                const uint32_t m = 16384 + 1 + (uint32_t)(x % 49152);
                r1[i] = 65536u * m - 1;
                const uint64_t qq = 1 + (x >> 20) % 65536, dd = qq * m - 1 + (x >> 40) % 3 - 1;
                d[i] = (uint32_t)dd;
                break;
            }
            default:
                r1[i] = 0x40000000u + (uint32_t)(x % 0xC0000000u);
                d[i] = (uint32_t)(x >> 32) % ((x & 8) ? r1[i] : 0xFFFFFFFFu);
                break;
            }
        }
        if (lanes == 16) cg_lanes_probe_quotient(d, r1, q);
        else cg_lanes_probe_quotient_avx2(d, r1, q);
        for (int i = 0; i < lanes; i++) {
            const uint64_t want = (((uint64_t)d[i] << 16) | 0xFFFF) / ((uint64_t)r1[i] + 1);
            cr_assert_eq(q[i], want, "%d lanes: d %#x r1 %#x: %u, want %llu", lanes, d[i], r1[i], q[i],
                         (unsigned long long)want);
            checked++;
        }
    }
    cr_assert_eq(checked, (size_t)rounds * (size_t)lanes);
}
#endif

Test(cachegen_lanes, quotient_is_exact)
{
#ifdef KVC_HAVE_X86_SIMD
    if (!kvc_test_has_isa("avx2")) cr_skip_test("no avx2 tier on this CPU");
    check_quotients(8, 400000, 47);
    if (!kvc_test_has_isa("avx512")) cr_skip_test("no avx512 tier on this CPU (the avx2 lanes' divide passed)");
    check_quotients(16, 200000, 48);
#else
    cr_skip_test("no x86 SIMD tiers in this build");
#endif
}

/* The avx2 lanes' leading-zero count (no vplzcntd) against __builtin_clz: every single bit, every
 * run of ones from bit 31 down and from bit k down, and random values of each length. */
Test(cachegen_lanes, avx2_lzcnt_is_exact)
{
#ifdef KVC_HAVE_X86_SIMD
    if (!kvc_test_has_isa("avx2")) cr_skip_test("no avx2 tier on this CPU");
    uint32_t x[8], n[8];
    uint64_t rng = 49;
    size_t checked = 0;
    for (int round = 0; round < 20000; round++) {
        for (int i = 0; i < 8; i++) {
            const uint64_t r = kvc_test_rng_next(&rng);
            const unsigned k = (unsigned)((round * 8 + i) % 33), top = k ? 1u << (k - 1) : 0u;
            switch (round % 4) {
            case 0: x[i] = top; break;
            case 1: x[i] = k ? (uint32_t)(0xFFFFFFFFull >> (33 - k)) | top : 0; break; /* all ones below the top */
            case 2: x[i] = ~(uint32_t)(0xFFFFFFFFull >> k); break;                       /* k ones from bit 31 */
            default: x[i] = k ? top | ((uint32_t)r & (top - 1)) : 0; break;
            }
        }
        cg_lanes_probe_lzcnt_avx2(x, n);
        for (int i = 0; i < 8; i++) {
            const unsigned want = x[i] ? (unsigned)__builtin_clz(x[i]) : 32u;
            cr_assert_eq(n[i], want, "lzcnt(%#x) = %u, want %u", x[i], n[i], want);
            checked++;
        }
    }
    cr_assert_eq(checked, 160000u);
#else
    cr_skip_test("no x86 SIMD tiers in this build");
#endif
}

/* ------------------------------------------------------------------ valid streams */

Test(cachegen_lanes, bins_and_token_counts)
{
    static const size_t Ts[] = { 1, 2, 255, 256, 257, 1000 };
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    uint64_t rng = 4801;
    for (int i = 0; i < nt; i++)
        for (unsigned B = 1; B <= 64; B++)
            for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) /* 48 channels: a group of 32, one of 16 */
                round_trip(ctx[i], &rng, 1, Ts[ti], 48, B, (B + ti) % 2);
    kvc_test_destroy_tiers(ctx, nt);
}

/* Channel counts around the lane groups (64 to 16 on avx512, 32 to 8 on avx2) and the 64-channel
 * blocks: scalar leftovers of 1 to 15 channels, blocks that end in a group of 16 or 8. */
Test(cachegen_lanes, channel_counts)
{
    static const size_t Cs[] = { 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 47, 63, 64, 65, 80, 96, 131 };
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    uint64_t rng = 4802;
    for (int i = 0; i < nt; i++)
        for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++) {
            round_trip(ctx[i], &rng, 2, 300, Cs[ci], 32, 1);
            round_trip(ctx[i], &rng, 1, 77, Cs[ci], 61, 0);
        }
    kvc_test_destroy_tiers(ctx, nt);
}

/* ------------------------------------------------------------------ empty and damaged streams */

/* Streams of no bytes, or one, in lane groups: every stream decodes from zeros like the oracle. */
Test(cachegen_lanes, empty_and_one_byte_streams)
{
    enum { C = 48, CAP = 4 };
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    uint64_t rng = 4803;
    for (int i = 0; i < nt; i++)
        for (unsigned B = 1; B <= 64; B += 9)
            for (size_t T = 1; T <= 300; T += 299) {
                uint16_t *cdf = kvc_test_xmalloc(C * (B + 1) * 2);
                kvc_test_random_cdf(&rng, cdf, C, B);
                uint8_t streams[C * CAP];
                int32_t len[C];
                for (size_t k = 0; k < C; k++) {
                    len[k] = (int32_t)(kvc_test_rng_next(&rng) % 3 == 0 ? 1 : 0);
                    for (size_t b = 0; b < CAP; b++) streams[k * CAP + b] = (uint8_t)kvc_test_rng_next(&rng);
                }
                decode_like_oracle(ctx[i], cdf, B, streams, CAP, len, 1, T, C, "empty");
                free(cdf);
            }
    kvc_test_destroy_tiers(ctx, nt);
}

/* Valid streams of T tokens on C channels cut at random lengths (some to nothing), with single bit
 * flips, appended bytes, or replaced by random bytes (how 0-3): every tier decodes them as the
 * oracle does, status KVC_OK. */
static void damaged_round(kvc_context_t *ctx[3], int nt, uint64_t *rng, size_t C, size_t T, unsigned B, int how)
{
    const size_t cap = kvc_cg_encode_bound(T) + 8;
    uint8_t *sym = kvc_test_xmalloc(T * C), *streams = kvc_test_xmalloc(C * cap);
    uint16_t *cdf = kvc_test_xmalloc(C * (B + 1) * 2);
    int32_t *len = kvc_test_xmalloc(C * 4);
    mixed_symbols(rng, sym, 1, T, C, B);
    kvc_test_random_cdf(rng, cdf, C, B);
    for (size_t b = 0; b < C * cap; b++) streams[b] = (uint8_t)kvc_test_rng_next(rng);
    if (how != 3) ref_cg_encode(cdf, B, sym, 1, T, C, streams, cap, len);
    for (size_t k = 0; k < C; k++) {
        const uint64_t r = kvc_test_rng_next(rng);
        switch (how) {
        case 0: len[k] = (int32_t)(r % ((uint64_t)len[k] + 1)); break; /* cut */
        case 1: if (len[k]) streams[k * cap + r % (uint64_t)len[k]] ^= (uint8_t)(1u << (r >> 32) % 8); break; /* flip */
        case 2: len[k] += (int32_t)(r % 9); break; /* appended */
        default: len[k] = (int32_t)(r % (cap + 1)); break; /* random */
        }
    }
    for (int i = 0; i < nt; i++) decode_like_oracle(ctx[i], cdf, B, streams, cap, len, 1, T, C, "damaged");
    free(sym);
    free(streams);
    free(cdf);
    free(len);
}

Test(cachegen_lanes, damaged_streams)
{
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    uint64_t rng = 4804;
    for (int round = 0; round < 80; round++) {
        const size_t C = 16 + kvc_test_rng_next(&rng) % 70, T = 1 + kvc_test_rng_next(&rng) % 400;
        damaged_round(ctx, nt, &rng, C, T, 1 + (unsigned)(kvc_test_rng_next(&rng) % 64), round % 4);
    }
    kvc_test_destroy_tiers(ctx, nt);
}

/* Streams too long to be copied side by side (more than 32 KiB for a group: 64 streams of 3000
 * or 6000 tokens) are read in place; the group of 16 after them is copied. Valid and damaged. */
Test(cachegen_lanes, long_streams_read_in_place)
{
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    uint64_t rng = 4808;
    for (int i = 0; i < nt; i++)
        for (size_t T = 3000; T <= 6000; T += 3000) {
            round_trip(ctx[i], &rng, 1, T, 80, 16, 1);
            round_trip(ctx[i], &rng, 1, T, 80, 64, 0);
        }
    for (int how = 0; how < 4; how++) damaged_round(ctx, nt, &rng, 80, 3000, 40, how);
    kvc_test_destroy_tiers(ctx, nt);
}

/* Lengths and prefix sums that cannot be an encoding: KVC_ERR_CORRUPT on every tier, no symbol
 * written. */
Test(cachegen_lanes, corrupt_metadata)
{
    enum { C = 32, T = 40, B = 16, CAP = 64 };
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    uint64_t rng = 4805;
    uint16_t cdf[C * (B + 1)];
    kvc_test_random_cdf(&rng, cdf, C, B);
    uint8_t streams[C * CAP], out[T * C], guard[T * C];
    for (size_t b = 0; b < sizeof streams; b++) streams[b] = (uint8_t)kvc_test_rng_next(&rng);
    memset(guard, 0x5A, sizeof guard);
    int32_t len[C];
    int64_t ps[C];
    for (size_t k = 0; k < C; k++) {
        len[k] = (int32_t)(k % CAP);
        ps[k] = (int64_t)(k * 3);
    }
    for (int i = 0; i < nt; i++) {
        len[17] = CAP + 1;
        memset(out, 0x5A, sizeof out);
        kvc_cg_decode_params_t da = { .cdf = cdf, .streams = streams, .lengths = len, .symbols = out, .layers = 1,
                                      .tokens = T, .channels = C, .capacity = CAP, .num_bins = B };
        cr_assert_eq(kvc_cg_decode(ctx[i], &da), KVC_ERR_CORRUPT, "%s", kvc_context_isa(ctx[i]));
        KVC_TEST_ASSERT_SAME(out, guard, sizeof out, "length past capacity %s", kvc_context_isa(ctx[i]));
        len[17] = 17;
        ps[20] = 2;
        kvc_cg_decode_packed_params_t pa = { .cdf = cdf, .bytes = streams, .nbytes = sizeof streams, .prefsum = ps,
                                             .symbols = out, .layers = 1, .tokens = T, .channels = C, .num_bins = B };
        cr_assert_eq(kvc_cg_decode_packed(ctx[i], &pa), KVC_ERR_CORRUPT, "%s", kvc_context_isa(ctx[i]));
        KVC_TEST_ASSERT_SAME(out, guard, sizeof out, "decreasing prefix sum %s", kvc_context_isa(ctx[i]));
        ps[20] = 60;
    }
    kvc_test_destroy_tiers(ctx, nt);
}

/* ------------------------------------------------------------------ encoder limits */

/* Capacities from none to the full length: the encoder's status (KVC_ERR_NO_SPACE exactly when a
 * stream does not fit), full lengths, *needed, each slot's prefix equal to the oracle's stream,
 * nothing written after it in the slot or past the buffer. */
Test(cachegen_lanes, capacity_limits)
{
    enum { T = 300, C = 80, B = 32, GUARD = 64 };
    uint64_t rng = 4806;
    uint8_t *sym = kvc_test_xmalloc(T * C);
    mixed_symbols(&rng, sym, 1, T, C, B);
    uint16_t cdf[C * (B + 1)];
    ref_cg_cdf(sym, 1, T, C, B, cdf);
    const size_t big = kvc_cg_encode_bound(T);
    uint8_t *want = calloc(C * big, 1);
    cr_assert_not_null(want);
    int32_t wlen[C];
    ref_cg_encode(cdf, B, sym, 1, T, C, want, big, wlen);
    size_t longest = 0;
    for (size_t k = 0; k < C; k++) longest = (size_t)wlen[k] > longest ? (size_t)wlen[k] : longest;
    const size_t caps[] = { 0, 1, 2, 3, 4, 5, 7, 8, 9, 33, 100, longest - 1, longest, big };
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    for (int i = 0; i < nt; i++)
        for (size_t ci = 0; ci < sizeof caps / sizeof caps[0]; ci++) {
            const size_t cap = caps[ci];
            uint8_t *buf = kvc_test_xmalloc(C * cap + GUARD);
            memset(buf, 0x5A, C * cap + GUARD);
            int32_t len[C];
            size_t needed = 0;
            kvc_cg_encode_params_t ea = { .cdf = cdf, .symbols = sym, .streams = cap ? buf : NULL, .lengths = len,
                                          .layers = 1, .tokens = T, .channels = C, .capacity = cap, .num_bins = B,
                                          .needed = &needed };
            const kvc_status_t st = kvc_cg_encode(ctx[i], &ea);
            cr_assert_eq(st, longest > cap ? KVC_ERR_NO_SPACE : KVC_OK, "cap %zu %s: %d", cap, kvc_context_isa(ctx[i]), st);
            cr_assert_eq(needed, longest, "cap %zu %s", cap, kvc_context_isa(ctx[i]));
            KVC_TEST_ASSERT_SAME(len, wlen, sizeof len, "lengths cap %zu %s", cap, kvc_context_isa(ctx[i]));
            for (size_t k = 0; k < C; k++) {
                const size_t n = (size_t)wlen[k] < cap ? (size_t)wlen[k] : cap;
                KVC_TEST_ASSERT_SAME(buf + k * cap, want + k * big, n, "stream %zu cap %zu %s", k, cap, kvc_context_isa(ctx[i]));
                for (size_t b = n; b < cap; b++)
                    cr_assert_eq(buf[k * cap + b], 0x5A, "stream %zu byte %zu written, cap %zu %s", k, b, cap,
                                 kvc_context_isa(ctx[i]));
            }
            for (size_t b = 0; b < GUARD; b++) cr_assert_eq(buf[C * cap + b], 0x5A, "wrote past the buffer");
            free(buf);
        }
    kvc_test_destroy_tiers(ctx, nt);
    free(sym);
    free(want);
}

/* A middle symbol from about 1/4 to 3/4 straddles the midpoint: every repeat is an underflow step,
 * so runs of it owe hundreds of bits, which leave after the next decided bit or in the flush
 * (the lanes' lane_emit path), among channels of ordinary symbols. */
Test(cachegen_lanes, long_underflow_runs)
{
    enum { C = 48 };
    static const size_t Ts[] = { 40, 1000 };
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    uint64_t rng = 4807;
    for (int i = 0; i < nt; i++)
        for (unsigned B = 3; B <= 5; B++)
            for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
                const size_t T = Ts[ti], ns = C, cap = kvc_cg_encode_bound(T);
                uint16_t *cdf = kvc_test_xmalloc(ns * (B + 1) * 2);
                uint8_t *sym = kvc_test_xmalloc(T * C);
                kvc_test_random_cdf(&rng, cdf, ns, B);
                for (size_t c = 0; c < C; c++)
                    if (c % 3) { /* symbol 1 in [16385, 49151): its interval straddles the midpoint */
                        uint16_t *row = cdf + c * (B + 1);
                        row[0] = 0;
                        row[1] = 16385;
                        for (unsigned s = 2; s < B; s++) row[s] = (uint16_t)(49151 + (s - 2) * 100);
                    }
                for (size_t c = 0; c < C; c++)
                    for (size_t t = 0, run = 0; t < T; t++) {
                        if (!run) run = 1 + kvc_test_rng_next(&rng) % (c % 2 ? 300 : 40);
                        const uint64_t r = kvc_test_rng_next(&rng);
                        sym[t * C + c] = (uint8_t)(--run && c % 3 ? 1 : r % B);
                    }
                uint8_t *want = calloc(ns * cap, 1), *got = calloc(ns * cap, 1);
                cr_assert(want && got);
                int32_t wlen[C], glen[C];
                ref_cg_encode(cdf, B, sym, 1, T, C, want, cap, wlen);
                kvc_cg_encode_params_t ea = { .cdf = cdf, .symbols = sym, .streams = got, .lengths = glen, .layers = 1,
                                              .tokens = T, .channels = C, .capacity = cap, .num_bins = B };
                cr_assert_eq(kvc_cg_encode(ctx[i], &ea), KVC_OK, "%s", kvc_last_error());
                KVC_TEST_ASSERT_SAME(glen, wlen, sizeof glen, "lengths T%zu B%u %s", T, B, kvc_context_isa(ctx[i]));
                KVC_TEST_ASSERT_SAME(got, want, ns * cap, "streams T%zu B%u %s", T, B, kvc_context_isa(ctx[i]));
                decode_like_oracle(ctx[i], cdf, B, want, cap, wlen, 1, T, C, "underflow runs");
                free(cdf);
                free(sym);
                free(want);
                free(got);
            }
    kvc_test_destroy_tiers(ctx, nt);
}

/* ------------------------------------------------------------------ streams the lanes do not take */

/* A packed stream longer than the lanes take (LANE_MAX_LEN, 2^27 bytes: a lane's byte offsets
 * must stay 32-bit) sends its lane group to the per-stream kernel on every tier: stream 0 of 24
 * claims 2^27 + 1 bytes, a real encoding followed by zeros (calloc: the untouched pages cost
 * nothing), the others are real streams after it. Every symbol equals the oracle's (the test sees
 * the result, not which kernel ran: the lanes would decode these bytes alike). */
Test(cachegen_lanes, oversized_stream_goes_per_stream)
{
    enum { T = 50, C = 24, B = 16 };
    const size_t big = ((size_t)1 << 27) + 1, cap = kvc_cg_encode_bound(T);
    uint64_t rng = 4809;
    uint8_t sym[T * C], want[T * C], got[T * C];
    uint16_t cdf[C * (B + 1)];
    mixed_symbols(&rng, sym, 1, T, C, B);
    ref_cg_cdf(sym, 1, T, C, B, cdf);
    uint8_t *slots = kvc_test_xmalloc(C * cap);
    int32_t len[C];
    ref_cg_encode(cdf, B, sym, 1, T, C, slots, cap, len);
    size_t nbytes = big;
    for (size_t k = 1; k < C; k++) nbytes += (size_t)len[k];
    uint8_t *bytes = calloc(nbytes, 1);
    cr_assert_not_null(bytes);
    int64_t ps[C];
    memcpy(bytes, slots, (size_t)len[0]);
    ps[0] = (int64_t)big;
    for (size_t k = 1; k < C; k++) {
        memcpy(bytes + ps[k - 1], slots + k * cap, (size_t)len[k]);
        ps[k] = ps[k - 1] + len[k];
    }
    for (size_t k = 0; k < C; k++)
        ref_cg_decode_stream(cdf + k * (B + 1), B, bytes + (k ? ps[k - 1] : 0), (size_t)(ps[k] - (k ? ps[k - 1] : 0)), T,
                             want + k, C);
    KVC_TEST_ASSERT_SAME(want, sym, sizeof sym, "the oracle decodes the padded stream");
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    for (int i = 0; i < nt; i++) {
        kvc_cg_decode_packed_params_t pa = { .cdf = cdf, .bytes = bytes, .nbytes = nbytes, .prefsum = ps, .symbols = got,
                                             .layers = 1, .tokens = T, .channels = C, .num_bins = B };
        memset(got, 0xEE, sizeof got);
        cr_assert_eq(kvc_cg_decode_packed(ctx[i], &pa), KVC_OK, "%s", kvc_last_error());
        KVC_TEST_ASSERT_SAME(got, want, sizeof got, "oversized stream %s", kvc_context_isa(ctx[i]));
    }
    kvc_test_destroy_tiers(ctx, nt);
    free(bytes);
    free(slots);
}
