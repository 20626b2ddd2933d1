/* SPDX-License-Identifier: BSD-3-Clause */
/* CacheGen: LMCache golden vectors, docs/LMCACHE.md's reference vectors, the scalar reference coder (tests/ref) on
 * many shapes and distributions, capacity handling, every error status, random and truncated
 * decoder input, the quantiser against a double-precision reference, and real KV round trips.
 * Every coder check runs on each CPU ISA tier the machine has (KVCORE_ISA=scalar, avx2, avx512). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <kvcore.h>

#include "npy_load.h"
#include "ref/cachegen_ref.h"
#include "test_util.h"

/* ------------------------------------------------------------------ helpers */

static double rng_unit(uint64_t *s) { return (double)(kvc_test_rng_next(s) >> 11) * 0x1p-53; }

static void *xcalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    cr_assert_not_null(p);
    return p;
}

/* Packed bytes + inclusive prefix sums from per-stream buffers. Returns the byte count. */
static size_t pack_streams(const uint8_t *streams, size_t cap, const int32_t *lengths, size_t n, uint8_t **bytes,
                           int64_t *prefsum)
{
    size_t total = 0;
    for (size_t k = 0; k < n; k++) total += (size_t)lengths[k];
    uint8_t *p = kvc_test_xmalloc(total);
    size_t at = 0;
    for (size_t k = 0; k < n; k++) {
        memcpy(p + at, streams + k * cap, (size_t)lengths[k]);
        at += (size_t)lengths[k];
        prefsum[k] = (int64_t)at;
    }
    *bytes = p;
    return total;
}

/* ------------------------------------------------------------------ golden vectors (LMCache) */

typedef struct golden {
    test_npy_t symbols, cdf, buffer, lengths, packed, prefsum;
    size_t L, T, C, cap;
    unsigned B;
} golden_t;

static test_npy_t load(const char *name, const char *what, const char *descr)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "golden/%s_%s.npy", name, what);
    test_npy_t a = test_npy_load(kvc_test_data(rel));
    cr_assert_str_eq(a.descr, descr, "%s: dtype %s", rel, a.descr);
    return a;
}

static golden_t golden_load(const char *name)
{
    golden_t g;
    g.symbols = load(name, "symbols", "|u1");
    g.cdf = load(name, "cdf", "<i2");
    g.buffer = load(name, "output_buffer", "|u1");
    g.lengths = load(name, "output_lengths", "<i4");
    g.packed = load(name, "packed_bytes", "|u1");
    g.prefsum = load(name, "lengths_prefsum", "<i8");
    g.L = g.symbols.shape[0];
    g.T = g.symbols.shape[1];
    g.C = g.symbols.shape[2];
    g.B = (unsigned)g.cdf.shape[2] - 1;
    g.cap = g.buffer.shape[2];
    cr_assert_eq(g.cdf.shape[0], g.L);
    cr_assert_eq(g.cdf.shape[1], g.C);
    cr_assert_eq(g.lengths.count, g.L * g.C);
    cr_assert_eq(g.prefsum.count, g.L * g.C);
    return g;
}

static void golden_free(golden_t *g)
{
    test_npy_free(&g->symbols);
    test_npy_free(&g->cdf);
    test_npy_free(&g->buffer);
    test_npy_free(&g->lengths);
    test_npy_free(&g->packed);
    test_npy_free(&g->prefsum);
}

static void golden_check(const char *name)
{
    golden_t g = golden_load(name);
    const size_t nsym = g.L * g.T * g.C, ns = g.L * g.C;
    const int32_t *glen = g.lengths.data;
    /* The reference agrees with LMCache first (so the oracle itself is checked). */
    uint16_t *cdf = kvc_test_xmalloc(g.cdf.count * 2);
    ref_cg_cdf(g.symbols.data, g.L, g.T, g.C, g.B, cdf);
    KVC_TEST_ASSERT_SAME(cdf, g.cdf.data, g.cdf.count * 2, "%s: reference cdf", name);
    uint8_t *streams = xcalloc(ns * g.cap);
    int32_t *len = kvc_test_xmalloc(ns * 4);
    ref_cg_encode(g.cdf.data, g.B, g.symbols.data, g.L, g.T, g.C, streams, g.cap, len);
    KVC_TEST_ASSERT_SAME(len, glen, ns * 4, "%s: reference lengths", name);
    KVC_TEST_ASSERT_SAME(streams, g.buffer.data, ns * g.cap, "%s: reference streams", name);
    cr_assert_eq((size_t)((int64_t *)g.prefsum.data)[ns - 1], g.packed.count);

    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    for (int i = 0; i < nt; i++) {
        const char *isa = kvc_context_isa(ctx[i]);
        memset(cdf, 0xAB, g.cdf.count * 2);
        kvc_cg_cdf_params_t ca = { .symbols = g.symbols.data, .cdf = cdf, .layers = g.L, .tokens = g.T, .channels = g.C,
                              .num_bins = g.B };
        cr_assert_eq(kvc_cg_cdf(ctx[i], &ca), KVC_OK, "%s", kvc_last_error());
        KVC_TEST_ASSERT_SAME(cdf, g.cdf.data, g.cdf.count * 2, "%s/%s: cdf", name, isa);

        memset(streams, 0, ns * g.cap);
        memset(len, 0xFF, ns * 4);
        size_t needed = 0;
        kvc_cg_encode_params_t ea = { .cdf = g.cdf.data, .symbols = g.symbols.data, .streams = streams, .lengths = len,
                                 .layers = g.L, .tokens = g.T, .channels = g.C, .capacity = g.cap, .num_bins = g.B,
                                 .needed = &needed };
        cr_assert_eq(kvc_cg_encode(ctx[i], &ea), KVC_OK, "%s", kvc_last_error());
        KVC_TEST_ASSERT_SAME(len, glen, ns * 4, "%s/%s: lengths", name, isa);
        KVC_TEST_ASSERT_SAME(streams, g.buffer.data, ns * g.cap, "%s/%s: streams", name, isa);
        int32_t longest = 0;
        for (size_t k = 0; k < ns; k++) longest = glen[k] > longest ? glen[k] : longest;
        cr_assert_eq(needed, (size_t)longest);

        uint8_t *out = kvc_test_xmalloc(nsym);
        memset(out, 0xEE, nsym);
        kvc_cg_decode_params_t da = { .cdf = g.cdf.data, .streams = g.buffer.data, .lengths = glen, .symbols = out,
                                 .layers = g.L, .tokens = g.T, .channels = g.C, .capacity = g.cap, .num_bins = g.B };
        cr_assert_eq(kvc_cg_decode(ctx[i], &da), KVC_OK, "%s", kvc_last_error());
        KVC_TEST_ASSERT_SAME(out, g.symbols.data, nsym, "%s/%s: decode", name, isa);

        memset(out, 0xEE, nsym);
        kvc_cg_decode_packed_params_t pa = { .cdf = g.cdf.data, .bytes = g.packed.data, .nbytes = g.packed.count,
                                        .prefsum = g.prefsum.data, .symbols = out, .layers = g.L, .tokens = g.T,
                                        .channels = g.C, .num_bins = g.B };
        cr_assert_eq(kvc_cg_decode_packed(ctx[i], &pa), KVC_OK, "%s", kvc_last_error());
        KVC_TEST_ASSERT_SAME(out, g.symbols.data, nsym, "%s/%s: decode_packed", name, isa);
        free(out);
    }
    kvc_test_destroy_tiers(ctx, nt);
    free(cdf);
    free(streams);
    free(len);
    golden_free(&g);
}

Test(cachegen_golden, coder0_nb16) { golden_check("coder0_nb16"); }
Test(cachegen_golden, coder0_nb32) { golden_check("coder0_nb32"); }
Test(cachegen_golden, coder1_nb16) { golden_check("coder1_nb16"); }
Test(cachegen_golden, coder1_nb32) { golden_check("coder1_nb32"); }

/* ------------------------------------------------------------------ docs/LMCACHE.md's reference vectors */

Test(cachegen_appendix, cdf_0013)
{
    const uint8_t sym[4] = { 0, 0, 1, 3 };
    const uint16_t want[5] = { 0, 32766, 49150, 49151, 65535 };
    uint16_t cdf[5];
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    for (int i = 0; i < nt; i++) {
        kvc_cg_cdf_params_t a = { .symbols = sym, .cdf = cdf, .layers = 1, .tokens = 4, .channels = 1, .num_bins = 4 };
        cr_assert_eq(kvc_cg_cdf(ctx[i], &a), KVC_OK);
        KVC_TEST_ASSERT_SAME(cdf, want, sizeof(want), "cdf");
    }
    kvc_test_destroy_tiers(ctx, nt);
}

Test(cachegen_appendix, three_byte_stream)
{
    const uint8_t sym[12] = { 0, 1, 2, 3, 3, 3, 2, 1, 0, 0, 3, 3 };
    const uint16_t want_cdf[5] = { 0, 16383, 27306, 38229, 65535 };
    const uint8_t want[3] = { 0x16, 0x26, 0x8b };
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    for (int i = 0; i < nt; i++) {
        uint16_t cdf[5];
        kvc_cg_cdf_params_t ca = { .symbols = sym, .cdf = cdf, .layers = 1, .tokens = 12, .channels = 1, .num_bins = 4 };
        cr_assert_eq(kvc_cg_cdf(ctx[i], &ca), KVC_OK);
        KVC_TEST_ASSERT_SAME(cdf, want_cdf, sizeof(want_cdf), "cdf");
        uint8_t buf[8] = { 0 };
        int32_t len = 0;
        kvc_cg_encode_params_t ea = { .cdf = cdf, .symbols = sym, .streams = buf, .lengths = &len, .layers = 1,
                                 .tokens = 12, .channels = 1, .capacity = sizeof(buf), .num_bins = 4 };
        cr_assert_eq(kvc_cg_encode(ctx[i], &ea), KVC_OK);
        cr_assert_eq(len, 3);
        KVC_TEST_ASSERT_SAME(buf, want, 3, "stream");
        /* Exactly 3 bytes on the heap: the 4-byte initial window must read the 4th as zero (ASan). */
        uint8_t *exact = kvc_test_xmalloc(3);
        memcpy(exact, want, 3);
        uint8_t out[12];
        int64_t ps = 3;
        kvc_cg_decode_packed_params_t pa = { .cdf = cdf, .bytes = exact, .nbytes = 3, .prefsum = &ps, .symbols = out,
                                        .layers = 1, .tokens = 12, .channels = 1, .num_bins = 4 };
        cr_assert_eq(kvc_cg_decode_packed(ctx[i], &pa), KVC_OK);
        KVC_TEST_ASSERT_SAME(out, sym, 12, "decode_packed");
        kvc_cg_decode_params_t da = { .cdf = cdf, .streams = exact, .lengths = &len, .symbols = out, .layers = 1,
                                 .tokens = 12, .channels = 1, .capacity = 3, .num_bins = 4 };
        memset(out, 0xEE, sizeof(out));
        cr_assert_eq(kvc_cg_decode(ctx[i], &da), KVC_OK);
        KVC_TEST_ASSERT_SAME(out, sym, 12, "decode");
        free(exact);
    }
    kvc_test_destroy_tiers(ctx, nt);
}

/* The cross-backend fixture: L 2, C 4, T 128, Lp 16, un-normalised CDF 0, 6, ..., 90, symbols
 * cycling 0..14, 256-byte buffer; every stream is the 202-byte one. */
Test(cachegen_appendix, cross_backend_202_bytes)
{
    enum { L = 2, C = 4, T = 128, B = 15, CAP = 256 };
    uint16_t cdf[L * C * (B + 1)];
    for (size_t k = 0; k < L * C; k++)
        for (unsigned i = 0; i <= B; i++) cdf[k * (B + 1) + i] = (uint16_t)(6 * i);
    uint8_t sym[L * T * C];
    for (size_t l = 0; l < L; l++)
        for (size_t t = 0; t < T; t++)
            for (size_t c = 0; c < C; c++) sym[(l * T + t) * C + c] = (uint8_t)(t % 15);
    uint8_t want[CAP] = { 0 };
    cr_assert_eq(ref_cg_encode_stream(cdf, B, sym, T, C, want, CAP), 202u);
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    for (int i = 0; i < nt; i++) {
        uint8_t *streams = xcalloc(L * C * CAP);
        int32_t len[L * C];
        kvc_cg_encode_params_t ea = { .cdf = cdf, .symbols = sym, .streams = streams, .lengths = len, .layers = L,
                                 .tokens = T, .channels = C, .capacity = CAP, .num_bins = B };
        cr_assert_eq(kvc_cg_encode(ctx[i], &ea), KVC_OK);
        for (size_t k = 0; k < L * C; k++) {
            cr_assert_eq(len[k], 202);
            KVC_TEST_ASSERT_SAME(streams + k * CAP, want, CAP, "stream %zu", k);
        }
        uint8_t out[L * T * C];
        kvc_cg_decode_params_t da = { .cdf = cdf, .streams = streams, .lengths = len, .symbols = out, .layers = L,
                                 .tokens = T, .channels = C, .capacity = CAP, .num_bins = B };
        cr_assert_eq(kvc_cg_decode(ctx[i], &da), KVC_OK);
        KVC_TEST_ASSERT_SAME(out, sym, sizeof(sym), "decode");
        free(streams);
    }
    kvc_test_destroy_tiers(ctx, nt);
}

/* ------------------------------------------------------------------ against the reference coder */

enum dist { D_SKEWED, D_UNIFORM, D_CONSTANT, D_TWO, D_RANDOM_CDF, D_COUNT };
static const char *dist_name[D_COUNT] = { "skewed", "uniform", "constant", "two-symbol", "random-cdf" };

static void gen_symbols(uint64_t *rng, uint8_t *s, size_t L, size_t T, size_t C, unsigned B, enum dist d)
{
    for (size_t l = 0; l < L; l++)
        for (size_t c = 0; c < C; c++) {
            const double centre = rng_unit(rng) * (B - 1), width = 0.02 + rng_unit(rng) * 0.3 * B;
            const unsigned k = (unsigned)(kvc_test_rng_next(rng) % B);
            for (size_t t = 0; t < T; t++) {
                unsigned v;
                switch (d) {
                case D_SKEWED: {
                    /* rounded Gaussian (Box-Muller), clipped */
                    const double g = sqrt(-2 * log(1 - rng_unit(rng))) * cos(6.283185307179586 * rng_unit(rng));
                    const double x = nearbyint(centre + g * width);
                    v = x < 0 ? 0 : x > B - 1 ? B - 1 : (unsigned)x;
                    break;
                }
                case D_CONSTANT: v = k; break;
                case D_TWO: v = kvc_test_rng_next(rng) & 1 ? B - 1 : 0; break;
                default: v = (unsigned)(kvc_test_rng_next(rng) % B); break;
                }
                s[(l * T + t) * C + c] = (uint8_t)v;
            }
        }
}

/* Fast coder == reference coder (lengths, every byte), both decoders give the symbols back. */
static void check_vs_ref(kvc_context_t *ctx, uint64_t *rng, size_t L, size_t T, size_t C, unsigned B, enum dist d)
{
    const size_t nsym = L * T * C, ns = L * C, cap = kvc_cg_encode_bound(T);
    uint8_t *sym = kvc_test_xmalloc(nsym), *out = kvc_test_xmalloc(nsym);
    uint16_t *cdf = kvc_test_xmalloc(ns * (B + 1) * 2);
    gen_symbols(rng, sym, L, T, C, B, d);
    if (d == D_RANDOM_CDF) kvc_test_random_cdf(rng, cdf, ns, B);
    else ref_cg_cdf(sym, L, T, C, B, cdf);
    uint8_t *want = xcalloc(ns * cap), *got = xcalloc(ns * cap);
    int32_t *wlen = kvc_test_xmalloc(ns * 4), *glen = kvc_test_xmalloc(ns * 4);
    ref_cg_encode(cdf, B, sym, L, T, C, want, cap, wlen);
    if (d != D_RANDOM_CDF) {
        uint16_t *fcdf = kvc_test_xmalloc(ns * (B + 1) * 2);
        kvc_cg_cdf_params_t ca = { .symbols = sym, .cdf = fcdf, .layers = L, .tokens = T, .channels = C, .num_bins = B };
        cr_assert_eq(kvc_cg_cdf(ctx, &ca), KVC_OK);
        KVC_TEST_ASSERT_SAME(fcdf, cdf, ns * (B + 1) * 2, "cdf L%zu T%zu C%zu B%u %s", L, T, C, B, dist_name[d]);
        free(fcdf);
    }
    kvc_cg_encode_params_t ea = { .cdf = cdf, .symbols = sym, .streams = got, .lengths = glen, .layers = L, .tokens = T,
                             .channels = C, .capacity = cap, .num_bins = B };
    cr_assert_eq(kvc_cg_encode(ctx, &ea), KVC_OK, "%s", kvc_last_error());
    KVC_TEST_ASSERT_SAME(glen, wlen, ns * 4, "lengths L%zu T%zu C%zu B%u %s %s", L, T, C, B, dist_name[d], kvc_context_isa(ctx));
    KVC_TEST_ASSERT_SAME(got, want, ns * cap, "streams L%zu T%zu C%zu B%u %s %s", L, T, C, B, dist_name[d], kvc_context_isa(ctx));
    for (size_t k = 0; k < ns; k++) cr_assert_leq((size_t)glen[k], cap);

    kvc_cg_decode_params_t da = { .cdf = cdf, .streams = got, .lengths = glen, .symbols = out, .layers = L, .tokens = T,
                             .channels = C, .capacity = cap, .num_bins = B };
    memset(out, 0xEE, nsym);
    cr_assert_eq(kvc_cg_decode(ctx, &da), KVC_OK, "%s", kvc_last_error());
    KVC_TEST_ASSERT_SAME(out, sym, nsym, "decode L%zu T%zu C%zu B%u %s %s", L, T, C, B, dist_name[d], kvc_context_isa(ctx));

    int64_t *ps = kvc_test_xmalloc(ns * 8);
    uint8_t *packed;
    const size_t nb = pack_streams(got, cap, glen, ns, &packed, ps);
    kvc_cg_decode_packed_params_t pa = { .cdf = cdf, .bytes = packed, .nbytes = nb, .prefsum = ps, .symbols = out,
                                    .layers = L, .tokens = T, .channels = C, .num_bins = B };
    memset(out, 0xEE, nsym);
    cr_assert_eq(kvc_cg_decode_packed(ctx, &pa), KVC_OK, "%s", kvc_last_error());
    KVC_TEST_ASSERT_SAME(out, sym, nsym, "decode_packed L%zu T%zu C%zu B%u %s", L, T, C, B, dist_name[d]);
    free(packed);
    free(ps);
    free(sym);
    free(out);
    free(cdf);
    free(want);
    free(got);
    free(wlen);
    free(glen);
}

Test(cachegen_ref, bins_1_to_64_all_distributions)
{
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    uint64_t rng = 42;
    for (int i = 0; i < nt; i++)
        for (unsigned B = 1; B <= 64; B++)
            for (int d = 0; d < D_COUNT; d++) check_vs_ref(ctx[i], &rng, 2, 37 + B * 3, 6, B, (enum dist)d);
    kvc_test_destroy_tiers(ctx, nt);
}

Test(cachegen_ref, token_counts_0_to_5000)
{
    static const size_t Ts[] = { 0, 1, 2, 3, 4, 5, 7, 8, 31, 255, 256, 257, 1000, 4096, 5000 };
    static const unsigned Bs[] = { 2, 16, 32, 33, 64 };
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    uint64_t rng = 7;
    for (int i = 0; i < nt; i++)
        for (size_t ti = 0; ti < sizeof(Ts) / sizeof(Ts[0]); ti++)
            for (size_t bi = 0; bi < sizeof(Bs) / sizeof(Bs[0]); bi++)
                for (int d = 0; d < D_COUNT; d++)
                    check_vs_ref(ctx[i], &rng, 1, Ts[ti], Ts[ti] > 1000 ? 5 : 9, Bs[bi], (enum dist)d);
    kvc_test_destroy_tiers(ctx, nt);
}

/* Channel counts around the interleave group and block sizes (tails, single channels). */
Test(cachegen_ref, channel_counts)
{
    static const size_t Cs[] = { 1, 2, 3, 4, 5, 63, 64, 65, 131 };
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    uint64_t rng = 99;
    for (int i = 0; i < nt; i++)
        for (size_t ci = 0; ci < sizeof(Cs) / sizeof(Cs[0]); ci++) {
            check_vs_ref(ctx[i], &rng, 3, 50, Cs[ci], 32, D_SKEWED);
            check_vs_ref(ctx[i], &rng, 2, 20, Cs[ci], 47, D_RANDOM_CDF);
        }
    kvc_test_destroy_tiers(ctx, nt);
}

/* T = 0: cdf[i] = i (LMCache fallback), streams are the bare flush byte 0x40, decoding is a no-op. */
Test(cachegen_ref, empty_input)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    uint16_t cdf[2 * 3 * 17];
    kvc_cg_cdf_params_t ca = { .symbols = NULL, .cdf = cdf, .layers = 2, .tokens = 0, .channels = 3, .num_bins = 16 };
    cr_assert_eq(kvc_cg_cdf(ctx, &ca), KVC_OK, "%s", kvc_last_error());
    for (size_t k = 0; k < 6; k++)
        for (unsigned i = 0; i <= 16; i++) cr_assert_eq(cdf[k * 17 + i], i);
    uint8_t streams[6 * 4] = { 0 };
    int32_t len[6];
    kvc_cg_encode_params_t ea = { .cdf = cdf, .symbols = NULL, .streams = streams, .lengths = len, .layers = 2, .tokens = 0,
                             .channels = 3, .capacity = 4, .num_bins = 16 };
    cr_assert_eq(kvc_cg_encode(ctx, &ea), KVC_OK, "%s", kvc_last_error());
    for (size_t k = 0; k < 6; k++) {
        cr_assert_eq(len[k], 1);
        cr_assert_eq(streams[k * 4], 0x40);
    }
    kvc_cg_decode_params_t da = { .cdf = cdf, .streams = streams, .lengths = len, .symbols = NULL, .layers = 2,
                             .tokens = 0, .channels = 3, .capacity = 4, .num_bins = 16 };
    cr_assert_eq(kvc_cg_decode(ctx, &da), KVC_OK, "%s", kvc_last_error());
    kvc_context_destroy(ctx);
}

/* More than 65,535 tokens of one symbol: LMCache's uint16 histogram would wrap. */
Test(cachegen_ref, long_input_counts)
{
    enum { T = 70000 + 3 };
    uint8_t *sym = kvc_test_xmalloc(T);
    memset(sym, 1, T);
    sym[0] = 0;
    sym[1] = 2;
    sym[2] = 2;
    uint16_t cdf[5], want[5];
    ref_cg_cdf(sym, 1, T, 1, 4, want);
    kvc_context_t *ctx = kvc_test_cpu_context();
    kvc_cg_cdf_params_t ca = { .symbols = sym, .cdf = cdf, .layers = 1, .tokens = T, .channels = 1, .num_bins = 4 };
    cr_assert_eq(kvc_cg_cdf(ctx, &ca), KVC_OK);
    KVC_TEST_ASSERT_SAME(cdf, want, sizeof(cdf), "cdf");
    cr_assert_eq(cdf[1], (uint16_t)((65535 - 4) * 1ull / T + 1));
    cr_assert_eq(cdf[2], (uint16_t)((65535 - 4) * 70001ull / T + 2));
    kvc_context_destroy(ctx);
    free(sym);
}

/* Width-1 symbols (16 bits each): the worst case stays inside kvc_cg_encode_bound. */
Test(cachegen_ref, encode_bound_worst_case)
{
    enum { T = 5000, B = 64 };
    uint16_t cdf[B + 1];
    for (unsigned i = 0; i <= B; i++) cdf[i] = (uint16_t)i;
    uint8_t *sym = kvc_test_xmalloc(T);
    uint64_t rng = 5;
    for (size_t t = 0; t < T; t++) sym[t] = (uint8_t)(kvc_test_rng_next(&rng) % (B - 1));
    const size_t bound = kvc_cg_encode_bound(T);
    uint8_t *buf = kvc_test_xmalloc(bound);
    int32_t len;
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    for (int i = 0; i < nt; i++) {
        kvc_cg_encode_params_t ea = { .cdf = cdf, .symbols = sym, .streams = buf, .lengths = &len, .layers = 1,
                                 .tokens = T, .channels = 1, .capacity = bound, .num_bins = B };
        cr_assert_eq(kvc_cg_encode(ctx[i], &ea), KVC_OK, "%s", kvc_last_error());
        cr_assert_gt((size_t)len, 2 * T - 2, "worst case is ~16 bits/symbol, got %d bytes", len);
        cr_assert_leq((size_t)len, bound);
    }
    cr_assert_eq(kvc_cg_encode_bound(0), 4u);
    cr_assert_eq(kvc_cg_encode_bound((size_t)KVC_CG_MAX_TOKENS + 1), 0u);
    cr_assert_leq(kvc_cg_encode_bound(KVC_CG_MAX_TOKENS), (size_t)INT32_MAX);
    kvc_test_destroy_tiers(ctx, nt);
    free(sym);
    free(buf);
}

/* Results do not depend on the thread count. */
Test(cachegen_ref, threads_deterministic)
{
    enum { L = 3, T = 300, C = 70, B = 32 };
    uint64_t rng = 11;
    uint8_t *sym = kvc_test_xmalloc(L * T * C);
    gen_symbols(&rng, sym, L, T, C, B, D_SKEWED);
    uint16_t *cdf = kvc_test_xmalloc(L * C * (B + 1) * 2);
    ref_cg_cdf(sym, L, T, C, B, cdf);
    const size_t cap = kvc_cg_encode_bound(T);
    uint8_t *s1 = xcalloc(L * C * cap), *s2 = xcalloc(L * C * cap);
    int32_t l1[L * C], l2[L * C];
    for (int th = 1; th <= 2; th++) {
        kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | KVC_CONTEXT_PARAM_NUM_THREADS,
                                   .backend = "cpu", .num_threads = th };
        kvc_context_t *ctx;
        cr_assert_eq(kvc_context_create(&p, &ctx), KVC_OK);
        cr_assert_eq(kvc_context_num_threads(ctx), th);
        kvc_cg_encode_params_t ea = { .cdf = cdf, .symbols = sym, .streams = th == 1 ? s1 : s2, .lengths = th == 1 ? l1 : l2,
                                 .layers = L, .tokens = T, .channels = C, .capacity = cap, .num_bins = B };
        cr_assert_eq(kvc_cg_encode(ctx, &ea), KVC_OK);
        kvc_context_destroy(ctx);
    }
    KVC_TEST_ASSERT_SAME(l1, l2, sizeof(l1), "lengths");
    KVC_TEST_ASSERT_SAME(s1, s2, L * C * cap, "streams");
    free(sym);
    free(cdf);
    free(s1);
    free(s2);
}

/* ------------------------------------------------------------------ capacity */

Test(cachegen_capacity, no_space_reports_needed_and_stops_writing)
{
    enum { L = 2, T = 256, C = 9, B = 32, CAP = 100, GUARD = 64 };
    uint64_t rng = 3;
    uint8_t sym[L * T * C];
    gen_symbols(&rng, sym, L, T, C, B, D_UNIFORM); /* ~5 bits/symbol: ~160 bytes, above CAP */
    for (size_t t = 0; t < T; t++) sym[t * C] = 3;  /* stream (0, 0) is constant: tiny, fits */
    uint16_t cdf[L * C * (B + 1)];
    ref_cg_cdf(sym, L, T, C, B, cdf);
    const size_t big = kvc_cg_encode_bound(T);
    uint8_t *want = xcalloc(L * C * big);
    int32_t wlen[L * C];
    ref_cg_encode(cdf, B, sym, L, T, C, want, big, wlen);
    size_t longest = 0;
    for (size_t k = 0; k < L * C; k++) longest = (size_t)wlen[k] > longest ? (size_t)wlen[k] : longest;
    cr_assert_gt(longest, (size_t)CAP);
    cr_assert_leq((size_t)wlen[0], (size_t)CAP);
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    for (int i = 0; i < nt; i++) {
        uint8_t *buf = kvc_test_xmalloc(L * C * CAP + GUARD);
        memset(buf, 0x5A, L * C * CAP + GUARD);
        int32_t len[L * C];
        size_t needed = 0;
        kvc_cg_encode_params_t ea = { .cdf = cdf, .symbols = sym, .streams = buf, .lengths = len, .layers = L, .tokens = T,
                                 .channels = C, .capacity = CAP, .num_bins = B, .needed = &needed };
        cr_assert_eq(kvc_cg_encode(ctx[i], &ea), KVC_ERR_NO_SPACE);
        cr_assert(strstr(kvc_last_error(), "needs"), "%s", kvc_last_error());
        cr_assert_eq(needed, longest);
        KVC_TEST_ASSERT_SAME(len, wlen, sizeof(len), "full lengths are reported");
        for (size_t k = 0; k < L * C; k++) {
            const size_t n = (size_t)wlen[k] < CAP ? (size_t)wlen[k] : CAP;
            KVC_TEST_ASSERT_SAME(buf + k * CAP, want + k * big, n, "stream %zu prefix", k);
            for (size_t b = n; b < CAP; b++) cr_assert_eq(buf[k * CAP + b], 0x5A, "stream %zu byte %zu written", k, b);
        }
        for (size_t b = 0; b < GUARD; b++) cr_assert_eq(buf[L * C * CAP + b], 0x5A, "wrote past the buffer");
        /* The stream that fitted decodes. */
        uint8_t out[T];
        int64_t ps = wlen[0];
        kvc_cg_decode_packed_params_t pa = { .cdf = cdf, .bytes = buf, .nbytes = CAP, .prefsum = &ps, .symbols = out,
                                        .layers = 1, .tokens = T, .channels = 1, .num_bins = B };
        cr_assert_eq(kvc_cg_decode_packed(ctx[i], &pa), KVC_OK);
        for (size_t t = 0; t < T; t++) cr_assert_eq(out[t], 3);

        /* Measure only: no buffer, capacity 0. */
        int32_t mlen[L * C];
        size_t mneeded = 0;
        kvc_cg_encode_params_t ma = ea;
        ma.streams = NULL;
        ma.capacity = 0;
        ma.lengths = mlen;
        ma.needed = &mneeded;
        cr_assert_eq(kvc_cg_encode(ctx[i], &ma), KVC_ERR_NO_SPACE);
        cr_assert_eq(mneeded, longest);
        KVC_TEST_ASSERT_SAME(mlen, wlen, sizeof(mlen), "measured lengths");
        free(buf);
    }
    kvc_test_destroy_tiers(ctx, nt);
    free(want);
}

/* ------------------------------------------------------------------ errors */

typedef struct coder_fixture {
    size_t L, T, C, cap;
    unsigned B;
    uint8_t sym[2 * 40 * 5];
    uint16_t cdf[2 * 5 * 17];
    uint8_t streams[2 * 5 * 128];
    int32_t len[10];
} coder_fixture_t;

static void fixture(coder_fixture_t *f)
{
    memset(f, 0, sizeof(*f));
    f->L = 2;
    f->T = 40;
    f->C = 5;
    f->B = 16;
    f->cap = 128;
    uint64_t rng = 1;
    gen_symbols(&rng, f->sym, f->L, f->T, f->C, f->B, D_SKEWED);
    ref_cg_cdf(f->sym, f->L, f->T, f->C, f->B, f->cdf);
    ref_cg_encode(f->cdf, f->B, f->sym, f->L, f->T, f->C, f->streams, f->cap, f->len);
}

Test(cachegen_errors, cdf_symbol_out_of_range)
{
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    for (int i = 0; i < nt; i++) {
        coder_fixture_t f;
        fixture(&f);
        f.sym[123] = 16;
        uint16_t cdf[sizeof(f.cdf) / 2];
        memset(cdf, 0x77, sizeof(cdf));
        kvc_cg_cdf_params_t a = { .symbols = f.sym, .cdf = cdf, .layers = f.L, .tokens = f.T, .channels = f.C,
                             .num_bins = f.B };
        cr_assert_eq(kvc_cg_cdf(ctx[i], &a), KVC_ERR_OUT_OF_RANGE);
        cr_assert(strstr(kvc_last_error(), "symbols[123]"), "%s", kvc_last_error());
        for (size_t k = 0; k < sizeof(cdf) / 2; k++) cr_assert_eq(cdf[k], 0x7777, "cdf written on error");
        f.sym[123] = 255; /* negative as LMCache's int8 */
        f.sym[7] = 200;
        cr_assert_eq(kvc_cg_cdf(ctx[i], &a), KVC_ERR_OUT_OF_RANGE);
        cr_assert(strstr(kvc_last_error(), "symbols[7]"), "the first bad index: %s", kvc_last_error());
    }
    kvc_test_destroy_tiers(ctx, nt);
}

Test(cachegen_errors, encode_rejects_before_writing)
{
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    for (int i = 0; i < nt; i++) {
        coder_fixture_t f;
        fixture(&f);
        uint8_t out[sizeof(f.streams)];
        int32_t len[10];
        memset(out, 0x66, sizeof(out));
        memset(len, 0x66, sizeof(len));
        size_t needed = 12345;
        kvc_cg_encode_params_t a = { .cdf = f.cdf, .symbols = f.sym, .streams = out, .lengths = len, .layers = f.L,
                                .tokens = f.T, .channels = f.C, .capacity = f.cap, .num_bins = f.B, .needed = &needed };
        f.sym[f.L * f.T * f.C - 1] = 16; /* the very last symbol */
        cr_assert_eq(kvc_cg_encode(ctx[i], &a), KVC_ERR_OUT_OF_RANGE);
        cr_assert(strstr(kvc_last_error(), "symbols[399]"), "%s", kvc_last_error());
        f.sym[f.L * f.T * f.C - 1] = 0;
        f.cdf[7 * 17 + 5] = f.cdf[7 * 17 + 4]; /* stream 7 not strictly increasing */
        cr_assert_eq(kvc_cg_encode(ctx[i], &a), KVC_ERR_INVALID_ARG);
        cr_assert(strstr(kvc_last_error(), "stream 7"), "%s", kvc_last_error());
        f.cdf[7 * 17 + 5] = (uint16_t)(f.cdf[7 * 17 + 4] - 1); /* decreasing */
        cr_assert_eq(kvc_cg_encode(ctx[i], &a), KVC_ERR_INVALID_ARG);
        for (size_t k = 0; k < sizeof(out); k++) cr_assert_eq(out[k], 0x66, "stream byte written on error");
        for (size_t k = 0; k < 10; k++) cr_assert_eq(len[k], 0x66666666, "length written on error");
        cr_assert_eq(needed, 12345u);
        /* cdf[B] is never read: garbage there is fine. */
        f.cdf[7 * 17 + 5] = (uint16_t)(f.cdf[7 * 17 + 4] + 1);
        f.cdf[7 * 17 + 16] = 0;
        a.cdf = f.cdf;
        cr_assert_eq(kvc_cg_encode(ctx[i], &a), KVC_OK, "%s", kvc_last_error());
    }
    kvc_test_destroy_tiers(ctx, nt);
}

static void assert_untouched(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) cr_assert_eq(p[i], 0xEE, "output byte %zu written on error", i);
}

Test(cachegen_errors, decode_rejects_corrupt_metadata)
{
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    for (int i = 0; i < nt; i++) {
        coder_fixture_t f;
        fixture(&f);
        uint8_t out[sizeof(f.sym)];
        memset(out, 0xEE, sizeof(out));
        kvc_cg_decode_params_t a = { .cdf = f.cdf, .streams = f.streams, .lengths = f.len, .symbols = out, .layers = f.L,
                                .tokens = f.T, .channels = f.C, .capacity = f.cap, .num_bins = f.B };
        const int32_t keep = f.len[3];
        f.len[3] = (int32_t)f.cap + 1;
        cr_assert_eq(kvc_cg_decode(ctx[i], &a), KVC_ERR_CORRUPT);
        cr_assert(strstr(kvc_last_error(), "lengths[3]"), "%s", kvc_last_error());
        f.len[3] = -1;
        cr_assert_eq(kvc_cg_decode(ctx[i], &a), KVC_ERR_CORRUPT);
        f.len[3] = keep;
        f.cdf[9 * 17 + 1] = f.cdf[9 * 17]; /* zero-width symbol 0 */
        cr_assert_eq(kvc_cg_decode(ctx[i], &a), KVC_ERR_CORRUPT);
        cr_assert(strstr(kvc_last_error(), "stream 9"), "%s", kvc_last_error());
        assert_untouched(out, sizeof(out));
        f.cdf[9 * 17 + 1] = (uint16_t)(f.cdf[9 * 17] + 1);

        /* packed */
        int64_t ps[10];
        uint8_t *packed;
        const size_t nb = pack_streams(f.streams, f.cap, f.len, 10, &packed, ps);
        kvc_cg_decode_packed_params_t p = { .cdf = f.cdf, .bytes = packed, .nbytes = nb, .prefsum = ps, .symbols = out,
                                       .layers = f.L, .tokens = f.T, .channels = f.C, .num_bins = f.B };
        const int64_t k4 = ps[4];
        ps[4] = ps[3] - 1; /* decreasing */
        cr_assert_eq(kvc_cg_decode_packed(ctx[i], &p), KVC_ERR_CORRUPT);
        cr_assert(strstr(kvc_last_error(), "prefsum[4]"), "%s", kvc_last_error());
        ps[4] = k4;
        ps[9] = (int64_t)nb + 1; /* past the end */
        cr_assert_eq(kvc_cg_decode_packed(ctx[i], &p), KVC_ERR_CORRUPT);
        ps[9] = (int64_t)nb;
        ps[0] = -1;
        cr_assert_eq(kvc_cg_decode_packed(ctx[i], &p), KVC_ERR_CORRUPT);
        ps[0] = f.len[0];
        f.cdf[2 * 17 + 16 - 1] = f.cdf[2 * 17 + 16 - 2]; /* last read entry */
        cr_assert_eq(kvc_cg_decode_packed(ctx[i], &p), KVC_ERR_CORRUPT);
        assert_untouched(out, sizeof(out));
        f.cdf[2 * 17 + 16 - 1] = (uint16_t)(f.cdf[2 * 17 + 16 - 2] + 1);
        cr_assert_eq(kvc_cg_decode_packed(ctx[i], &p), KVC_OK, "%s", kvc_last_error());
        free(packed);
    }
    kvc_test_destroy_tiers(ctx, nt);
}

Test(cachegen_errors, invalid_arguments)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    coder_fixture_t f;
    fixture(&f);
    uint8_t out[sizeof(f.sym)];
    int32_t len[10];
    const kvc_cg_cdf_params_t c0 = { .symbols = f.sym, .cdf = f.cdf, .layers = f.L, .tokens = f.T, .channels = f.C,
                                .num_bins = f.B };
    kvc_cg_cdf_params_t c = c0;
    cr_assert_eq(kvc_cg_cdf(NULL, &c), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_cg_cdf(ctx, NULL), KVC_ERR_INVALID_ARG);
    c.layers = 0;
    cr_assert_eq(kvc_cg_cdf(ctx, &c), KVC_ERR_INVALID_ARG);
    c = c0, c.channels = 0;
    cr_assert_eq(kvc_cg_cdf(ctx, &c), KVC_ERR_INVALID_ARG);
    c = c0, c.num_bins = 0;
    cr_assert_eq(kvc_cg_cdf(ctx, &c), KVC_ERR_INVALID_ARG);
    c = c0, c.num_bins = 65;
    cr_assert_eq(kvc_cg_cdf(ctx, &c), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "num_bins 65"), "%s", kvc_last_error());
    c = c0, c.tokens = (size_t)KVC_CG_MAX_TOKENS + 1;
    cr_assert_eq(kvc_cg_cdf(ctx, &c), KVC_ERR_INVALID_ARG);
    c = c0, c.symbols = NULL;
    cr_assert_eq(kvc_cg_cdf(ctx, &c), KVC_ERR_INVALID_ARG);
    c = c0, c.cdf = NULL;
    cr_assert_eq(kvc_cg_cdf(ctx, &c), KVC_ERR_INVALID_ARG);
    c = c0, c.layers = SIZE_MAX / 2, c.channels = 4, c.tokens = 1;
    cr_assert_eq(kvc_cg_cdf(ctx, &c), KVC_ERR_INVALID_ARG);
    c = c0, c.field_mask = 1; /* no bit is defined yet: a newer caller's field must not be ignored */
    cr_assert_eq(kvc_cg_cdf(ctx, &c), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "field_mask"), "%s", kvc_last_error());

    const kvc_cg_encode_params_t e0 = { .cdf = f.cdf, .symbols = f.sym, .streams = f.streams, .lengths = len,
                                   .layers = f.L, .tokens = f.T, .channels = f.C, .capacity = f.cap, .num_bins = f.B };
    kvc_cg_encode_params_t e = e0;
    cr_assert_eq(kvc_cg_encode(ctx, NULL), KVC_ERR_INVALID_ARG);
    e.field_mask = 1u << 9;
    cr_assert_eq(kvc_cg_encode(ctx, &e), KVC_ERR_INVALID_ARG);
    e = e0, e.lengths = NULL;
    cr_assert_eq(kvc_cg_encode(ctx, &e), KVC_ERR_INVALID_ARG);
    e = e0, e.cdf = NULL;
    cr_assert_eq(kvc_cg_encode(ctx, &e), KVC_ERR_INVALID_ARG);
    e = e0, e.streams = NULL;
    cr_assert_eq(kvc_cg_encode(ctx, &e), KVC_ERR_INVALID_ARG);
    e = e0, e.capacity = (size_t)INT32_MAX + 1;
    cr_assert_eq(kvc_cg_encode(ctx, &e), KVC_ERR_INVALID_ARG);
    e = e0, e.num_bins = 65;
    cr_assert_eq(kvc_cg_encode(ctx, &e), KVC_ERR_INVALID_ARG);
    e = e0, e.layers = SIZE_MAX / 4, e.tokens = 1, e.channels = 2, e.capacity = 8;
    cr_assert_eq(kvc_cg_encode(ctx, &e), KVC_ERR_INVALID_ARG);

    const kvc_cg_decode_params_t d0 = { .cdf = f.cdf, .streams = f.streams, .lengths = f.len, .symbols = out,
                                   .layers = f.L, .tokens = f.T, .channels = f.C, .capacity = f.cap, .num_bins = f.B };
    kvc_cg_decode_params_t d = d0;
    cr_assert_eq(kvc_cg_decode(ctx, NULL), KVC_ERR_INVALID_ARG);
    d.symbols = NULL;
    cr_assert_eq(kvc_cg_decode(ctx, &d), KVC_ERR_INVALID_ARG);
    d = d0, d.streams = NULL;
    cr_assert_eq(kvc_cg_decode(ctx, &d), KVC_ERR_INVALID_ARG);
    d = d0, d.lengths = NULL;
    cr_assert_eq(kvc_cg_decode(ctx, &d), KVC_ERR_INVALID_ARG);
    d = d0, d.capacity = (size_t)INT32_MAX + 1;
    cr_assert_eq(kvc_cg_decode(ctx, &d), KVC_ERR_INVALID_ARG);
    d = d0, d.num_bins = 0;
    cr_assert_eq(kvc_cg_decode(ctx, &d), KVC_ERR_INVALID_ARG);
    d = d0, d.field_mask = 1;
    cr_assert_eq(kvc_cg_decode(ctx, &d), KVC_ERR_INVALID_ARG);

    int64_t ps[10] = { 0 };
    const kvc_cg_decode_packed_params_t p0 = { .cdf = f.cdf, .bytes = f.streams, .nbytes = 10, .prefsum = ps,
                                          .symbols = out, .layers = f.L, .tokens = f.T, .channels = f.C,
                                          .num_bins = f.B };
    kvc_cg_decode_packed_params_t p = p0;
    cr_assert_eq(kvc_cg_decode_packed(ctx, NULL), KVC_ERR_INVALID_ARG);
    p.prefsum = NULL;
    cr_assert_eq(kvc_cg_decode_packed(ctx, &p), KVC_ERR_INVALID_ARG);
    p = p0, p.bytes = NULL;
    cr_assert_eq(kvc_cg_decode_packed(ctx, &p), KVC_ERR_INVALID_ARG);
    p = p0, p.layers = 0;
    cr_assert_eq(kvc_cg_decode_packed(ctx, &p), KVC_ERR_INVALID_ARG);
    p = p0, p.field_mask = 1;
    cr_assert_eq(kvc_cg_decode_packed(ctx, &p), KVC_ERR_INVALID_ARG);
    /* No bytes at all is valid: every stream is empty and decodes from zeros. */
    p = p0, p.bytes = NULL, p.nbytes = 0;
    cr_assert_eq(kvc_cg_decode_packed(ctx, &p), KVC_OK, "%s", kvc_last_error());

    cr_assert_eq(kvc_cg_default_bins(0, (uint32_t[2]){ 0 }), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_cg_default_bins(4, NULL), KVC_ERR_INVALID_ARG);
    kvc_context_destroy(ctx);
}

/* ------------------------------------------------------------------ hostile decoder input */

/* Random bytes and truncated streams decode like the reference (which reads only the bytes it is
 * given, zeros after): any read past a stream's end into the garbage behind it would show as a
 * difference, and ASan catches reads past the allocation (exact-size heap buffers). */
Test(cachegen_fuzz, random_and_truncated_streams)
{
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    uint64_t rng = 2024;
    for (int round = 0; round < 60; round++) {
        const size_t L = 1 + kvc_test_rng_next(&rng) % 2, C = 1 + kvc_test_rng_next(&rng) % 9, T = 1 + kvc_test_rng_next(&rng) % 300;
        const unsigned B = 1 + (unsigned)(kvc_test_rng_next(&rng) % 64);
        const size_t ns = L * C, cap = 1 + kvc_test_rng_next(&rng) % 64;
        uint16_t *cdf = kvc_test_xmalloc(ns * (B + 1) * 2);
        kvc_test_random_cdf(&rng, cdf, ns, B);
        uint8_t *streams = kvc_test_xmalloc(ns * cap);
        for (size_t i = 0; i < ns * cap; i++) streams[i] = (uint8_t)kvc_test_rng_next(&rng);
        int32_t *len = kvc_test_xmalloc(ns * 4);
        for (size_t k = 0; k < ns; k++) len[k] = (int32_t)(kvc_test_rng_next(&rng) % (cap + 1));
        if (round % 3 == 0) { /* truncated valid streams instead of random bytes */
            uint8_t *sym = kvc_test_xmalloc(L * T * C);
            gen_symbols(&rng, sym, L, T, C, B, D_UNIFORM);
            uint8_t *full = xcalloc(ns * kvc_cg_encode_bound(T));
            int32_t *flen = kvc_test_xmalloc(ns * 4);
            ref_cg_encode(cdf, B, sym, L, T, C, full, kvc_cg_encode_bound(T), flen);
            for (size_t k = 0; k < ns; k++) {
                const size_t keep = (size_t)flen[k] < cap ? (size_t)flen[k] : cap;
                memcpy(streams + k * cap, full + k * kvc_cg_encode_bound(T), keep);
                len[k] = (int32_t)(kvc_test_rng_next(&rng) % (keep + 1));
            }
            free(sym);
            free(full);
            free(flen);
        }
        uint8_t *want = kvc_test_xmalloc(L * T * C), *got = kvc_test_xmalloc(L * T * C);
        ref_cg_decode(cdf, B, streams, cap, len, L, T, C, want);
        for (int i = 0; i < nt; i++) {
            kvc_cg_decode_params_t da = { .cdf = cdf, .streams = streams, .lengths = len, .symbols = got, .layers = L,
                                     .tokens = T, .channels = C, .capacity = cap, .num_bins = B };
            cr_assert_eq(kvc_cg_decode(ctx[i], &da), KVC_OK, "%s", kvc_last_error());
            KVC_TEST_ASSERT_SAME(got, want, L * T * C, "round %d decode %s", round, kvc_context_isa(ctx[i]));
            int64_t *ps = kvc_test_xmalloc(ns * 8);
            uint8_t *packed;
            const size_t nb = pack_streams(streams, cap, len, ns, &packed, ps);
            kvc_cg_decode_packed_params_t pa = { .cdf = cdf, .bytes = nb ? packed : NULL, .nbytes = nb, .prefsum = ps,
                                            .symbols = got, .layers = L, .tokens = T, .channels = C, .num_bins = B };
            memset(got, 0, L * T * C);
            cr_assert_eq(kvc_cg_decode_packed(ctx[i], &pa), KVC_OK, "%s", kvc_last_error());
            KVC_TEST_ASSERT_SAME(got, want, L * T * C, "round %d decode_packed %s", round, kvc_context_isa(ctx[i]));
            free(packed);
            free(ps);
        }
        free(cdf);
        free(streams);
        free(len);
        free(want);
        free(got);
    }
    kvc_test_destroy_tiers(ctx, nt);
}

/* ------------------------------------------------------------------ quantiser */

static size_t esize(kvc_dtype_t dt) { return dt == KVC_DTYPE_F32 ? 4 : 2; }

static float get_value(kvc_dtype_t dt, const void *x, size_t i)
{
    if (dt == KVC_DTYPE_F16) return ref_f16_to_f32(((const uint16_t *)x)[i]);
    if (dt == KVC_DTYPE_BF16) return ref_bf16_to_f32(((const uint16_t *)x)[i]);
    return ((const float *)x)[i];
}

static void set_value(kvc_dtype_t dt, void *x, size_t i, float v)
{
    if (dt == KVC_DTYPE_F16) ((uint16_t *)x)[i] = ref_f32_to_f16(v);
    else if (dt == KVC_DTYPE_BF16) ((uint16_t *)x)[i] = ref_f32_to_bf16(v);
    else ((float *)x)[i] = v;
}

/* Half an ulp of v in dt (the dtype's own rounding of x^). */
static double half_ulp(kvc_dtype_t dt, double v)
{
    const int mant = dt == KVC_DTYPE_F16 ? 10 : dt == KVC_DTYPE_BF16 ? 7 : 23;
    const int emin = dt == KVC_DTYPE_F16 ? -14 : -126;
    int e;
    frexp(fabs(v), &e);
    e = e - 1 < emin ? emin : e - 1;
    return ldexp(1, e - mant - 1);
}

/* Quantise + dequantise one [L, T, C] tensor and check against the reference row by row. */
static void check_quant(kvc_context_t *ctx, kvc_dtype_t dt, const void *x, size_t L, size_t T, size_t C,
                        const uint32_t *bins, uint8_t *sym_out, float *scale_out, void *xhat_out)
{
    const kvc_quant_params_t a = { .dtype = dt, .values = (void *)x, .symbols = sym_out, .scales = scale_out,
                                 .bins = bins, .layers = L, .tokens = T, .channels = C };
    cr_assert_eq(kvc_quantise(ctx, &a), KVC_OK, "%s", kvc_last_error());
    float *row = kvc_test_xmalloc(C * 4);
    double *y = kvc_test_xmalloc(C * 8);
    uint8_t *q = kvc_test_xmalloc(C);
    for (size_t l = 0; l < L; l++)
        for (size_t t = 0; t < T; t++) {
            const size_t r = l * T + t;
            const unsigned M = bins[l] / 2 - 1;
            for (size_t c = 0; c < C; c++) row[c] = get_value(dt, x, r * C + c);
            const float scale = ref_quantise_row(row, C, M, y, q);
            cr_assert_eq(scale_out[r], scale, "scale of row %zu: %g vs %g", r, scale_out[r], scale);
            for (size_t c = 0; c < C; c++) {
                const uint8_t got = sym_out[r * C + c];
                cr_assert_leq(got, 2 * M);
                if (got != q[c]) { /* only at a rounding tie of the exact quotient */
                    const double frac = fabs(y[c]) - floor(fabs(y[c]));
                    cr_assert(fabs(frac - 0.5) < 1e-5 && abs((int)got - (int)q[c]) == 1,
                              "row %zu ch %zu: x %g y %.9f symbol %u vs %u", r, c, row[c], y[c], got, q[c]);
                }
            }
        }
    const kvc_quant_params_t d = { .dtype = dt, .values = xhat_out, .symbols = sym_out, .scales = scale_out,
                                 .bins = bins, .layers = L, .tokens = T, .channels = C };
    cr_assert_eq(kvc_dequantise(ctx, &d), KVC_OK, "%s", kvc_last_error());
    for (size_t l = 0; l < L; l++)
        for (size_t t = 0; t < T; t++) {
            const size_t r = l * T + t;
            const unsigned M = bins[l] / 2 - 1;
            const float scale = scale_out[r];
            const float f = scale < 0x1p-64f ? 0x1p64f : scale > 0x1p64f ? 0x1p-64f : 1.0f, step = scale * f / (float)M;
            for (size_t c = 0; c < C; c++) {
                const size_t i = r * C + c;
                const float xv = get_value(dt, x, i), xh = get_value(dt, xhat_out, i);
                /* exact definition of x^ ... */
                const float want = (float)((int)sym_out[i] - (int)M) * step * (1.0f / f);
                if (dt == KVC_DTYPE_F32) cr_assert_eq(xh, want);
                else if (dt == KVC_DTYPE_F16) cr_assert_eq(((uint16_t *)xhat_out)[i], ref_f32_to_f16(want), "x^ %g", want);
                else cr_assert_eq(((uint16_t *)xhat_out)[i], ref_f32_to_bf16(want), "x^ %g", want);
                /* ... and the error bound for finite inputs */
                if (scale == 0) cr_assert(xh == 0, "row %zu without finite non-zero values: x^ %g", r, xh);
                if (!isfinite(xv)) { /* NaN -> 0; inf -> +-scale, or 0 in a row whose scale is 0 */
                    if (isnan(xv) || scale == 0) cr_assert(xh == 0, "x %g x^ %g", xv, xh);
                    else cr_assert(sym_out[i] == (xv > 0 ? 2 * M : 0) && fabs(fabs(xh) - scale) <= scale * 1e-6 + half_ulp(dt, xh),
                                   "x %g x^ %g scale %g", xv, xh, scale);
                    continue;
                }
                const double bound = scale / (2.0 * M) * (1 + 1e-4) + half_ulp(dt, xh) + 0x1p-149;
                cr_assert_leq(fabs((double)xv - xh), bound, "row %zu ch %zu: x %.9g x^ %.9g scale %g M %u", r, c, xv,
                              xh, scale, M);
            }
        }
    free(row);
    free(y);
    free(q);
}

static void fill_values(uint64_t *rng, kvc_dtype_t dt, void *x, size_t L, size_t T, size_t C)
{
    for (size_t r = 0; r < L * T; r++) {
        const int kind = (int)(r % 9);
        const double mag = kind == 1 ? 1e-30 : kind == 2 ? 1e30 : kind == 3 ? 1e-42 : 3.0;
        for (size_t c = 0; c < C; c++) {
            const double g = sqrt(-2 * log(1 - rng_unit(rng))) * cos(6.283185307179586 * rng_unit(rng));
            float v = (float)(g * mag * (c % 7 == 0 ? 10 : 1)); /* outlier channels */
            if (kind == 4) v = 0.0f;                                 /* all-zero row */
            if (kind == 5 && c % 5 == 1) v = NAN;
            if (kind == 6 && c % 6 == 2) v = c % 12 == 2 ? INFINITY : -INFINITY;
            if (kind == 7) v = c == 3 ? INFINITY : c % 2 ? -0.0f : 0.0f; /* inf, scale 0 */
            if (kind == 8 && c == 0) v = (float)(g > 0 ? 65504 : -65504);
            set_value(dt, x, r * C + c, v);
        }
    }
}

Test(cachegen_quant, against_reference_all_dtypes)
{
    static const kvc_dtype_t dts[] = { KVC_DTYPE_F16, KVC_DTYPE_BF16, KVC_DTYPE_F32 };
    static const size_t Cs[] = { 1, 7, 8, 16, 32, 37, 256 };
    enum { L = 5, T = 18 };
    const uint32_t bins[L] = { 4, 5, 16, 32, 64 };
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    uint64_t rng = 77;
    for (size_t di = 0; di < 3; di++)
        for (size_t ci = 0; ci < sizeof(Cs) / sizeof(Cs[0]); ci++) {
            const kvc_dtype_t dt = dts[di];
            const size_t C = Cs[ci], n = L * T * C;
            void *x = kvc_test_xmalloc(n * esize(dt));
            fill_values(&rng, dt, x, L, T, C);
            uint8_t *sym[3];
            float *sc[3];
            void *xh[3];
            for (int i = 0; i < nt; i++) {
                sym[i] = kvc_test_xmalloc(n);
                sc[i] = kvc_test_xmalloc(L * T * 4);
                xh[i] = kvc_test_xmalloc(n * esize(dt));
                check_quant(ctx[i], dt, x, L, T, C, bins, sym[i], sc[i], xh[i]);
            }
            for (int i = 1; i < nt; i++) { /* tiers agree bit for bit, ties included */
                KVC_TEST_ASSERT_SAME(sym[0], sym[i], n, "symbols scalar vs %s, dtype %d C %zu", kvc_context_isa(ctx[i]), dt, C);
                KVC_TEST_ASSERT_SAME(sc[0], sc[i], L * T * 4, "scales");
                KVC_TEST_ASSERT_SAME(xh[0], xh[i], n * esize(dt), "dequantised values");
            }
            for (int i = 0; i < nt; i++) {
                free(sym[i]);
                free(sc[i]);
                free(xh[i]);
            }
            free(x);
        }
    kvc_test_destroy_tiers(ctx, nt);
}

/* Every fp16 bit pattern through the scale path: rows of 9 copies (8 in the SIMD body, 1 in the
 * scalar tail). */
Test(cachegen_quant, all_f16_values)
{
    enum { N = 65536, C = 9 };
    uint16_t *x = kvc_test_xmalloc(N * C * 2);
    for (size_t i = 0; i < N * C; i++) x[i] = (uint16_t)(i / C);
    uint8_t *q = kvc_test_xmalloc(N * C);
    float *s = kvc_test_xmalloc(N * 4);
    const uint32_t bins = 32;
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    for (int i = 0; i < nt; i++) {
        kvc_quant_params_t a = { .dtype = KVC_DTYPE_F16, .values = x, .symbols = q, .scales = s, .bins = &bins,
                               .layers = 1, .tokens = N, .channels = C };
        cr_assert_eq(kvc_quantise(ctx[i], &a), KVC_OK);
        for (size_t h = 0; h < N; h++) {
            const float v = ref_f16_to_f32((uint16_t)h);
            cr_assert_eq(s[h], isfinite(v) ? fabsf(v) : 0.0f, "fp16 0x%04zx", h);
            for (size_t c = 0; c < C; c++)
                cr_assert_eq(q[h * C + c], isnan(v) || isinf(v) || v == 0 ? 15 : v > 0 ? 30 : 0, "fp16 0x%04zx", h);
        }
    }
    kvc_test_destroy_tiers(ctx, nt);
    free(x);
    free(q);
    free(s);
}

/* fp32 -> fp16 / bf16 rounding of dequantised values over the whole exponent range (overflow to
 * inf, subnormals, ties) against the reference conversion; rows of 11 (SIMD body + scalar tail). */
Test(cachegen_quant, dequantise_rounding)
{
    enum { R = 4000, C = 11 };
    uint64_t rng = 123;
    float *scales = kvc_test_xmalloc(R * 4);
    uint8_t *q = kvc_test_xmalloc(R * C);
    for (size_t r = 0; r < R; r++) {
        uint32_t u = (uint32_t)kvc_test_rng_next(&rng) & 0x7F7FFFFFu;  /* finite, positive */
        if (r % 4 == 0) u = (u & 0xFFFFE000u) | (1u << 12);  /* fp16 ties at q - M = 15 */
        if (r % 4 == 1) u = (u & 0x07FFFFFFu) | 0x30000000u; /* around the fp16 subnormal range */
        memcpy(&scales[r], &u, 4);
        for (size_t c = 0; c < C; c++) q[r * C + c] = (uint8_t)(c == 0 ? 30 : kvc_test_rng_next(&rng) % 31);
    }
    const uint32_t bins = 32;
    static const kvc_dtype_t dts[] = { KVC_DTYPE_F16, KVC_DTYPE_BF16 };
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    uint16_t *out = kvc_test_xmalloc(R * C * 2);
    for (int i = 0; i < nt; i++)
        for (int di = 0; di < 2; di++) {
            kvc_quant_params_t a = { .dtype = dts[di], .values = out, .symbols = q, .scales = scales, .bins = &bins,
                                   .layers = 1, .tokens = R, .channels = C };
            cr_assert_eq(kvc_dequantise(ctx[i], &a), KVC_OK, "%s", kvc_last_error());
            for (size_t k = 0; k < R * C; k++) {
                const float sc = scales[k / C], f = sc < 0x1p-64f ? 0x1p64f : sc > 0x1p64f ? 0x1p-64f : 1.0f;
                const float v = (float)((int)q[k] - 15) * (sc * f / 15.0f) * (1.0f / f);
                const uint16_t want = dts[di] == KVC_DTYPE_F16 ? ref_f32_to_f16(v) : ref_f32_to_bf16(v);
                cr_assert_eq(out[k], want, "%s dtype %d: %a -> 0x%04x, want 0x%04x", kvc_context_isa(ctx[i]), dts[di],
                             v, out[k], want);
            }
        }
    kvc_test_destroy_tiers(ctx, nt);
    free(scales);
    free(q);
    free(out);
}

Test(cachegen_quant, errors)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    float x[2 * 3 * 4] = { 0 }, s[6] = { 1, 1, 1, 1, 1, 1 };
    uint8_t q[24];
    memset(q, 7, sizeof(q));
    uint32_t bins[2] = { 16, 32 };
    const kvc_quant_params_t a0 = { .dtype = KVC_DTYPE_F32, .values = x, .symbols = q, .scales = s, .bins = bins,
                                  .layers = 2, .tokens = 3, .channels = 4 };
    kvc_quant_params_t a = a0;
    cr_assert_eq(kvc_quantise(NULL, &a), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_dequantise(ctx, NULL), KVC_ERR_INVALID_ARG);
    a.bins = NULL;
    cr_assert_eq(kvc_quantise(ctx, &a), KVC_ERR_INVALID_ARG);
    a = a0, a.dtype = (kvc_dtype_t)7;
    cr_assert_eq(kvc_quantise(ctx, &a), KVC_ERR_INVALID_ARG);
    a = a0, a.field_mask = 2;
    cr_assert_eq(kvc_quantise(ctx, &a), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_dequantise(ctx, &a), KVC_ERR_INVALID_ARG);
    a = a0, a.layers = 0;
    cr_assert_eq(kvc_quantise(ctx, &a), KVC_ERR_INVALID_ARG);
    a = a0, a.values = NULL;
    cr_assert_eq(kvc_dequantise(ctx, &a), KVC_ERR_INVALID_ARG);
    a = a0;
    bins[1] = 3;
    cr_assert_eq(kvc_quantise(ctx, &a), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "bins[1] = 3"), "%s", kvc_last_error());
    bins[1] = 65;
    cr_assert_eq(kvc_dequantise(ctx, &a), KVC_ERR_INVALID_ARG);
    bins[1] = 32;
    /* dequantise: symbol above 2M (layer 0: 16 bins, M = 7, 2M = 14), nothing written */
    for (size_t i = 0; i < 24; i++) x[i] = 42.0f;
    q[5] = 15;
    cr_assert_eq(kvc_dequantise(ctx, &a), KVC_ERR_OUT_OF_RANGE);
    cr_assert(strstr(kvc_last_error(), "symbols[5]"), "%s", kvc_last_error());
    q[5] = 14;
    q[20] = 31; /* layer 1 (32 bins) allows up to 30 */
    cr_assert_eq(kvc_dequantise(ctx, &a), KVC_ERR_OUT_OF_RANGE);
    q[20] = 30;
    s[4] = -1.0f;
    cr_assert_eq(kvc_dequantise(ctx, &a), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "scales[4]"), "%s", kvc_last_error());
    s[4] = NAN;
    cr_assert_eq(kvc_dequantise(ctx, &a), KVC_ERR_INVALID_ARG);
    s[4] = INFINITY;
    cr_assert_eq(kvc_dequantise(ctx, &a), KVC_ERR_INVALID_ARG);
    for (size_t i = 0; i < 24; i++) cr_assert_eq(x[i], 42.0f, "value %zu written on error", i);
    s[4] = 2.0f;
    cr_assert_eq(kvc_dequantise(ctx, &a), KVC_OK, "%s", kvc_last_error());
    kvc_context_destroy(ctx);
}

/* Tall layers: the CPU dequantiser works in blocks of a layer's rows (~8 K values, docs/CACHEGEN.md),
 * so a layer of 700 tokens x 37 channels is four blocks, the last one short. Every value against
 * the definition on every tier; then bad symbols and scales placed in different blocks and
 * layers: the first one (in index order) is the one reported, and nothing is written. */
Test(cachegen_quant, dequantise_in_blocks_reports_the_first_bad_value)
{
    static const kvc_dtype_t dts[] = { KVC_DTYPE_F16, KVC_DTYPE_BF16, KVC_DTYPE_F32 };
    enum { L = 3, T = 700, C = 37, N = L * T * C };
    const uint32_t bins[L] = { 16, 5, 64 };
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    uint64_t rng = 5;
    for (size_t di = 0; di < 3; di++)
        for (int i = 0; i < nt; i++) {
            const kvc_dtype_t dt = dts[di];
            void *x = kvc_test_xmalloc(N * esize(dt)), *xh = kvc_test_xmalloc(N * esize(dt));
            uint8_t *sym = kvc_test_xmalloc(N);
            float *sc = kvc_test_xmalloc(L * T * 4);
            fill_values(&rng, dt, x, L, T, C);
            check_quant(ctx[i], dt, x, L, T, C, bins, sym, sc, xh);
            const kvc_quant_params_t d = { .dtype = dt, .values = xh, .symbols = sym, .scales = sc, .bins = bins,
                                           .layers = L, .tokens = T, .channels = C };
            memset(xh, 0x5A, N * esize(dt));
            /* 2M + 1 in layer 2 (last block), layer 1 (second block), layer 0 (fourth block) */
            const size_t at[3] = { (2 * T + 699) * C + 36, (1 * T + 300) * C + 5, (0 * T + 690) * C + 1 };
            const uint8_t was[3] = { sym[at[0]], sym[at[1]], sym[at[2]] };
            char want[64];
            for (int k = 0; k < 3; k++) {
                sym[at[k]] = (uint8_t)(2 * (bins[at[k] / C / T] / 2 - 1) + 1);
                cr_assert_eq(kvc_dequantise(ctx[i], &d), KVC_ERR_OUT_OF_RANGE, "%s", kvc_context_isa(ctx[i]));
                snprintf(want, sizeof(want), "symbols[%zu]", at[k]);
                cr_assert(strstr(kvc_last_error(), want), "%s: %s, want %s", kvc_context_isa(ctx[i]), kvc_last_error(), want);
            }
            for (int k = 0; k < 3; k++) sym[at[k]] = was[k];
            /* a bad scale after a bad symbol: scales are reported first, the earliest one */
            const uint8_t was5 = sym[5];
            sym[5] = 200;
            sc[2 * T + 600] = NAN;
            sc[T + 3] = -1.0f;
            cr_assert_eq(kvc_dequantise(ctx[i], &d), KVC_ERR_INVALID_ARG);
            snprintf(want, sizeof(want), "scales[%d]", T + 3);
            cr_assert(strstr(kvc_last_error(), want), "%s, want %s", kvc_last_error(), want);
            const uint8_t *b = xh;
            for (size_t k = 0; k < N * esize(dt); k++) cr_assert_eq(b[k], 0x5A, "byte %zu written on error", k);
            sym[5] = was5;
            sc[2 * T + 600] = sc[T + 3] = 1.0f;
            /* scales are judged on their bits (-0 and the largest finite are fine), in a block's
             * 4-wide body (row T + 3) and its tail (row 220, the last of a 221-row block) */
            static const uint32_t pat[] = { 0x80000000u, 0x7F7FFFFFu, 0x00000001u, 0x7F800000u, 0xFF800000u,
                                            0x7FC00000u, 0xFFC00001u, 0x80000001u, 0xBF800000u };
            const size_t rows_at[2] = { T + 3, 220 };
            for (size_t pi = 0; pi < sizeof(pat) / sizeof(pat[0]); pi++)
                for (int ri = 0; ri < 2; ri++) {
                    const float keep = sc[rows_at[ri]];
                    memcpy(&sc[rows_at[ri]], &pat[pi], 4);
                    cr_assert_eq(kvc_dequantise(ctx[i], &d), pi < 3 ? KVC_OK : KVC_ERR_INVALID_ARG, "scale bits 0x%08x at row %zu",
                                 pat[pi], rows_at[ri]);
                    sc[rows_at[ri]] = keep;
                }
            free(x);
            free(xh);
            free(sym);
            free(sc);
        }
    kvc_test_destroy_tiers(ctx, nt);
}

Test(cachegen_quant, default_bins)
{
    uint32_t b[64];
    cr_assert_eq(kvc_cg_default_bins(32, b), KVC_OK);
    for (size_t l = 0; l < 32; l++) {
        cr_assert_eq(b[l], l < 10 ? 32u : 16u, "key layer %zu", l);
        cr_assert_eq(b[32 + l], l < 2 ? 32u : 16u, "value layer %zu", l);
    }
    cr_assert_eq(kvc_cg_default_bins(5, b), KVC_OK);
    for (size_t l = 0; l < 10; l++) cr_assert_eq(b[l], 32u, "small model: 32 bins everywhere");
}

/* ------------------------------------------------------------------ real KV data */

/* stories260K K and V ([5, 512, 4, 8] fp16): quantise with LMCache's bins (32 for this small
 * model; also 16), CDF over the chunk, encode, both decoders, dequantise within the bound. */
Test(cachegen_kvdata, round_trip)
{
    test_npy_t k = test_npy_load(kvc_test_data("kvdata/story_prompt_K.npy"));
    test_npy_t v = test_npy_load(kvc_test_data("kvdata/story_prompt_V.npy"));
    cr_assert_str_eq(k.descr, "<f2");
    const size_t NL = k.shape[0], T = k.shape[1], C = k.shape[2] * k.shape[3], L = 2 * NL;
    /* [2NL, T, C] as LMCache's encode_input */
    uint16_t *kv = kvc_test_xmalloc(L * T * C * 2);
    memcpy(kv, k.data, NL * T * C * 2);
    memcpy(kv + NL * T * C, v.data, NL * T * C * 2);
    uint32_t *bins = kvc_test_xmalloc(L * 4);
    kvc_context_t *ctx[3];
    const int nt = kvc_test_tiers(ctx);
    for (int variant = 0; variant < 2; variant++) {
        cr_assert_eq(kvc_cg_default_bins(NL, bins), KVC_OK);
        if (variant == 1)
            for (size_t l = 0; l < L; l++) bins[l] = l % 3 ? 16 : 32;
        const unsigned B = 32; /* CDF bins: max over layers, as LMCache */
        uint8_t *sym = kvc_test_xmalloc(L * T * C), *dec = kvc_test_xmalloc(L * T * C);
        float *scales = kvc_test_xmalloc(L * T * 4);
        uint16_t *xh = kvc_test_xmalloc(L * T * C * 2);
        uint16_t *cdf = kvc_test_xmalloc(L * C * (B + 1) * 2);
        const size_t cap = kvc_cg_encode_bound(T);
        uint8_t *streams = xcalloc(L * C * cap), *want = xcalloc(L * C * cap);
        int32_t *len = kvc_test_xmalloc(L * C * 4), *wlen = kvc_test_xmalloc(L * C * 4);
        for (int i = 0; i < nt; i++) {
            check_quant(ctx[i], KVC_DTYPE_F16, kv, L, T, C, bins, sym, scales, xh);
            kvc_cg_cdf_params_t ca = { .symbols = sym, .cdf = cdf, .layers = L, .tokens = T, .channels = C, .num_bins = B };
            cr_assert_eq(kvc_cg_cdf(ctx[i], &ca), KVC_OK);
            kvc_cg_encode_params_t ea = { .cdf = cdf, .symbols = sym, .streams = streams, .lengths = len, .layers = L,
                                     .tokens = T, .channels = C, .capacity = cap, .num_bins = B };
            cr_assert_eq(kvc_cg_encode(ctx[i], &ea), KVC_OK, "%s", kvc_last_error());
            ref_cg_encode(cdf, B, sym, L, T, C, want, cap, wlen);
            KVC_TEST_ASSERT_SAME(len, wlen, L * C * 4, "lengths");
            KVC_TEST_ASSERT_SAME(streams, want, L * C * cap, "streams");
            size_t total = 0;
            for (size_t s = 0; s < L * C; s++) total += (size_t)len[s];
            cr_assert_lt(total * 8.0 / (L * T * C), 5.0, "real KV codes below 5 bits/symbol");
            kvc_cg_decode_params_t da = { .cdf = cdf, .streams = streams, .lengths = len, .symbols = dec, .layers = L,
                                     .tokens = T, .channels = C, .capacity = cap, .num_bins = B };
            cr_assert_eq(kvc_cg_decode(ctx[i], &da), KVC_OK);
            KVC_TEST_ASSERT_SAME(dec, sym, L * T * C, "decode");
            int64_t *ps = kvc_test_xmalloc(L * C * 8);
            uint8_t *packed;
            const size_t nb = pack_streams(streams, cap, len, L * C, &packed, ps);
            kvc_cg_decode_packed_params_t pa = { .cdf = cdf, .bytes = packed, .nbytes = nb, .prefsum = ps, .symbols = dec,
                                            .layers = L, .tokens = T, .channels = C, .num_bins = B };
            memset(dec, 0, L * T * C);
            cr_assert_eq(kvc_cg_decode_packed(ctx[i], &pa), KVC_OK);
            KVC_TEST_ASSERT_SAME(dec, sym, L * T * C, "decode_packed");
            free(packed);
            free(ps);
        }
        free(sym);
        free(dec);
        free(scales);
        free(xh);
        free(cdf);
        free(streams);
        free(want);
        free(len);
        free(wlen);
    }
    kvc_test_destroy_tiers(ctx, nt);
    free(kv);
    free(bins);
    test_npy_free(&k);
    test_npy_free(&v);
}
