/* SPDX-License-Identifier: BSD-3-Clause */
/* The rANS coder (src/backends/simd/cpu_rans.c, docs/CACHEGEN.md "rANS coder"): the frequency normalisation,
 * the stream format against an independent oracle written from docs/FORMAT.md, the decoder's
 * corruption statuses, and the codec's --coder rans containers (format 1.4). */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <criterion/criterion.h>
#include <kvcore.h>
#include <kvcore/backend.h> /* kvc_isa_t */

#include "common/half.h"
#include "backends/simd/cpu_rans.h"
#include "core/bitio.h"
#include "container_edit.h"

static uint32_t rng_state = 1;
static uint32_t rnd(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state >> 8;
}

/* ---- normalisation ---- */

/* The normalisation written out with integer divides: round to nearest, at least 1 for a count,
 * the difference to the first most frequent symbol. */
static void oracle_cum(const uint32_t *counts, unsigned B, uint64_t total, uint16_t *cum)
{
    uint32_t f[64], sum = 0;
    unsigned top = 0;
    for (unsigned s = 0; s < B; s++) {
        f[s] = counts[s] ? (uint32_t)(((uint64_t)counts[s] * 4096 + total / 2) / total) : 0;
        if (counts[s] && !f[s]) f[s] = 1;
        sum += f[s];
        if (counts[s] > counts[top]) top = s;
    }
    f[top] += 4096 - sum;
    cum[0] = 0;
    for (unsigned s = 0; s < B; s++) cum[s + 1] = (uint16_t)(cum[s] + f[s]);
}

static void check_table(const uint32_t *counts, unsigned B, uint64_t total)
{
    uint16_t cum[65], ref[65];
    kvc_rans_cum_from_counts(counts, B, total, cum);
    oracle_cum(counts, B, total, ref);
    cr_assert(memcmp(cum, ref, (B + 1) * sizeof(uint16_t)) == 0, "B %u total %llu: the table differs from the oracle's", B,
              (unsigned long long)total);
    if (total <= KVC_RANS_FREQ_TABLE_MAX) { /* the codec's way for a window's many tables */
        uint16_t *freq = malloc((total + 1) * sizeof(uint16_t)), viat[65];
        kvc_rans_freq_table(total, freq);
        kvc_rans_cum_from_freq_table(counts, B, freq, viat);
        cr_assert(memcmp(viat, ref, (B + 1) * sizeof(uint16_t)) == 0, "B %u total %llu: the frequency-table way differs", B,
                  (unsigned long long)total);
        free(freq);
    }
    cr_assert_eq(cum[0], 0);
    cr_assert_eq(cum[B], 4096);
    for (unsigned s = 0; s < B; s++) {
        const unsigned f = (unsigned)cum[s + 1] - cum[s];
        cr_assert(cum[s + 1] >= cum[s], "cum decreases at %u", s);
        cr_assert_eq(f > 0, counts[s] > 0, "symbol %u: count %u, frequency %u", s, counts[s], f);
        /* Every symbol but the most frequent is the rounded exact share (or 1). */
        const double exact = (double)counts[s] * 4096.0 / (double)total;
        if (counts[s] && f > 1 && exact < 4096.0 / B) cr_assert_leq(f - exact, 0.5 + 1e-9, "symbol %u", s);
    }
}

/* The codec's table of every count's frequency (kvc_rans_freq_table) holds the integer oracle's round(n * 4096 / total), at least 1 for n > 0, at every entry, for
 * totals around the powers of two and the table's limit. */
Test(rans, frequency_table_matches_the_oracle_at_every_count)
{
    static const uint64_t totals[] = { 1, 2, 3, 5, 7, 255, 256, 257, 511, 512, 1000, 4095, 4096, 4097, 8191, 12345, 65535, 65536 };
    uint16_t *freq = malloc((KVC_RANS_FREQ_TABLE_MAX + 1) * sizeof(uint16_t));
    for (size_t i = 0; i < sizeof totals / sizeof totals[0]; i++) {
        const uint64_t T = totals[i];
        kvc_rans_freq_table(T, freq);
        for (uint64_t n = 0; n <= T; n++) {
            const uint64_t want = n ? ((n * 4096 + T / 2) / T ? (n * 4096 + T / 2) / T : 1) : 0;
            cr_assert_eq(freq[n], want, "total %llu, count %llu: %u, the oracle %llu", (unsigned long long)T, (unsigned long long)n,
                         freq[n], (unsigned long long)want);
        }
    }
    free(freq);
}

Test(rans, frequencies_add_up_and_keep_every_symbol)
{
    uint32_t counts[64];
    /* One symbol holds every count. */
    memset(counts, 0, sizeof(counts));
    counts[17] = 256;
    check_table(counts, 32, 256);
    /* All 64 bins used, one dominant: the 63 rare ones are raised to 1 at the dominant's cost. */
    for (unsigned s = 0; s < 64; s++) counts[s] = 1;
    counts[40] = 4000000000u - 63;
    check_table(counts, 64, 4000000000ull);
    /* Uniform over 64 bins, and over 3 bins (4096 is not a multiple of 3). */
    for (unsigned s = 0; s < 64; s++) counts[s] = 1000;
    check_table(counts, 64, 64000);
    counts[0] = counts[1] = counts[2] = 7;
    check_table(counts, 3, 21);
    /* Totals at the frequency table's ends (1 token; KVC_RANS_FREQ_TABLE_MAX tokens), every count. */
    counts[0] = 1;
    check_table(counts, 1, 1);
    for (uint32_t n = 0; n <= KVC_RANS_FREQ_TABLE_MAX; n += 1 + n / 64) {
        counts[0] = n;
        counts[1] = KVC_RANS_FREQ_TABLE_MAX - n;
        check_table(counts, 2, KVC_RANS_FREQ_TABLE_MAX);
    }
    /* Random histograms, many shapes. */
    for (int it = 0; it < 2000; it++) {
        const unsigned B = 2 + rnd() % 63;
        uint64_t total = 0;
        for (unsigned s = 0; s < B; s++) {
            const uint32_t r = rnd();
            counts[s] = r % 4 == 0 ? 0 : r % 4 == 1 ? 1 + rnd() % 3 : rnd() % (1u << (rnd() % (it % 2 ? 12 : 20)));
            total += counts[s];
        }
        if (!total) counts[0] = (uint32_t)(total = 1);
        check_table(counts, B, total);
    }
}

/* ---- the oracle: the stream format written out plainly (docs/FORMAT.md "rANS streams") ---- */

/* The symbols of a stream of g channels (1..32) in decode order: its groups of 8 channels one
 * after another; in a group, token by token, lane by lane; lane i is state i. */
static size_t oracle_order(size_t T, unsigned g, unsigned *ch, size_t *tok)
{
    size_t n = 0;
    for (unsigned k = 0; 8 * k < g; k++)
        for (size_t t = 0; t < T; t++)
            for (unsigned i = 0; i < 8 && 8 * k + i < g; i++) ch[n] = 8 * k + i, tok[n++] = t;
    return n;
}

/* Encoder: symbols in reverse decode order, Giesen's RansWordEncPut per state, words collected in
 * emission order and then reversed. */
static size_t oracle_encode(const uint8_t *sym, size_t stride, size_t T, unsigned g, const uint16_t *cum, unsigned B, uint8_t *out)
{
    uint64_t x[8];
    const unsigned ns = g < 8 ? g : 8;
    uint16_t *words = malloc((T * g + 1) * 2);
    unsigned *ch = malloc((T * g + 1) * sizeof *ch);
    size_t *tok = malloc((T * g + 1) * sizeof *tok), nw = 0;
    for (unsigned i = 0; i < ns; i++) x[i] = 1u << 16;
    for (size_t k = oracle_order(T, g, ch, tok); k-- > 0;) {
        const unsigned c = ch[k], i = c % 8, s = sym[tok[k] * stride + c];
        const uint64_t start = cum[c * (B + 1) + s], freq = cum[c * (B + 1) + s + 1] - start;
        const uint64_t x_max = ((uint64_t)(1u << 16) >> 12 << 16) * freq;
        if (x[i] >= x_max) {
            words[nw++] = (uint16_t)(x[i] & 0xFFFF);
            x[i] >>= 16;
        }
        x[i] = (x[i] / freq << 12) + x[i] % freq + start;
        cr_assert_lt(x[i], 1ull << 32);
    }
    for (unsigned i = 0; i < ns; i++)
        for (int b = 0; b < 4; b++) out[4 * i + b] = (uint8_t)(x[i] >> (8 * b));
    for (size_t w = 0; w < nw; w++) {
        out[4 * ns + 2 * w] = (uint8_t)words[nw - 1 - w];
        out[4 * ns + 2 * w + 1] = (uint8_t)(words[nw - 1 - w] >> 8);
    }
    free(words);
    free(ch);
    free(tok);
    return 4 * ns + 2 * nw;
}

/* Decoder: linear search of the slot, the same order. */
static int oracle_decode(const uint8_t *in, size_t len, size_t T, unsigned g, const uint16_t *cum, unsigned B, uint8_t *sym, size_t stride)
{
    uint64_t x[8];
    const unsigned ns = g < 8 ? g : 8;
    unsigned *ch = malloc((T * g + 1) * sizeof *ch);
    size_t *tok = malloc((T * g + 1) * sizeof *tok), pos = 4 * ns;
    for (unsigned i = 0; i < ns; i++) x[i] = (uint64_t)in[4 * i] | (uint64_t)in[4 * i + 1] << 8 | (uint64_t)in[4 * i + 2] << 16 | (uint64_t)in[4 * i + 3] << 24;
    const size_t n = oracle_order(T, g, ch, tok);
    for (size_t k = 0; k < n; k++) {
        const unsigned c = ch[k], i = c % 8;
        const uint16_t *cc = cum + c * (B + 1);
        const uint64_t slot = x[i] % 4096;
        unsigned s = 0;
        while (!(cc[s] <= slot && slot < cc[s + 1])) s++;
        sym[tok[k] * stride + c] = (uint8_t)s;
        x[i] = (cc[s + 1] - cc[s]) * (x[i] / 4096) + slot - cc[s];
        if (x[i] < (1u << 16)) {
            x[i] = x[i] << 16 | in[pos] | (uint64_t)in[pos + 1] << 8;
            pos += 2;
        }
    }
    free(ch);
    free(tok);
    for (unsigned i = 0; i < ns; i++)
        if (x[i] != 1u << 16) return 0;
    return pos == len;
}

/* A stream of g channels (1..32) of T symbols drawn from skewed per-channel distributions over B
 * bins (channel 0 may be constant), their tables from the counts, coded by kvc_rans_encode_stream
 * and by the oracle. */
typedef struct {
    size_t T, stride, len;
    unsigned g, B;
    uint8_t *sym;
    uint16_t *cum;
    uint8_t *stream; /* exactly len bytes (so ASan sees any read past it) */
} case_t;

static case_t make_case(size_t T, unsigned g, unsigned B, int constant0)
{
    case_t k = { .T = T, .stride = g + 3, .g = g, .B = B };
    k.sym = calloc(T * k.stride, 1);
    k.cum = malloc(g * (B + 1) * sizeof(uint16_t));
    for (unsigned i = 0; i < g; i++) {
        uint32_t counts[64] = { 0 };
        const unsigned centre = rnd() % B, spread = 1 + rnd() % (B / 2 + 1);
        for (size_t t = 0; t < T; t++) {
            int s = (int)centre;
            if (!(constant0 && i == 0)) s += (int)(rnd() % (2 * spread + 1)) - (int)spread + (int)(rnd() % 2) * (int)(rnd() % 2);
            s = s < 0 ? 0 : s >= (int)B ? (int)B - 1 : s;
            k.sym[t * k.stride + i] = (uint8_t)s;
            counts[s]++;
        }
        kvc_rans_cum_from_counts(counts, B, T, k.cum + i * (B + 1));
    }
    const size_t cap = kvc_rans_bound(g, T);
    uint8_t *buf = malloc(cap), *ref = malloc(cap);
    k.len = kvc_rans_encode_stream(KVC_ISA_SCALAR, k.sym, k.stride, T, g, k.cum, B, buf, cap);
    cr_assert_gt(k.len, 0);
    const size_t rlen = oracle_encode(k.sym, k.stride, T, g, k.cum, B, ref);
    cr_assert_eq(k.len, rlen, "T %zu g %u B %u: %zu bytes, the oracle %zu", T, g, B, k.len, rlen);
    cr_assert(memcmp(buf, ref, rlen) == 0, "T %zu g %u B %u: bytes differ from the oracle", T, g, B);
    k.stream = malloc(k.len);
    memcpy(k.stream, buf, k.len);
    free(buf);
    free(ref);
    return k;
}

static void free_case(case_t *k)
{
    free(k->sym);
    free(k->cum);
    free(k->stream);
}

static kvc_status_t decode_case(const case_t *k, const uint8_t *in, size_t len, uint8_t *out)
{
    return kvc_rans_decode_stream(KVC_ISA_SCALAR, in, len, k->T, k->g, k->cum, k->B, out, k->stride);
}

Test(rans, streams_match_the_oracle_and_round_trip)
{
    const size_t Ts[] = { 1, 2, 7, 256, 1000 };
    const unsigned Bs[] = { 2, 4, 32, 64 }, gs[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 24, 29, 32 };
    for (size_t ti = 0; ti < 5; ti++)
        for (size_t gi = 0; gi < sizeof gs / sizeof gs[0]; gi++)
            for (size_t bi = 0; bi < 4; bi++)
                for (int constant0 = 0; constant0 < 2; constant0++) {
                    const unsigned g = gs[gi];
                    case_t k = make_case(Ts[ti], g, Bs[bi], constant0);
                    uint8_t *out = calloc(k.T * k.stride, 1), *ref = calloc(k.T * k.stride, 1);
                    cr_assert_eq(decode_case(&k, k.stream, k.len, out), KVC_OK, "T %zu g %u B %u", k.T, g, k.B);
                    cr_assert(oracle_decode(k.stream, k.len, k.T, g, k.cum, k.B, ref, k.stride));
                    for (size_t t = 0; t < k.T; t++)
                        for (unsigned i = 0; i < g; i++) {
                            cr_assert_eq(out[t * k.stride + i], k.sym[t * k.stride + i], "T %zu g %u B %u: t %zu ch %u", k.T, g, k.B, t, i);
                            cr_assert_eq(ref[t * k.stride + i], k.sym[t * k.stride + i]);
                        }
                    free(out);
                    free(ref);
                    free_case(&k);
                }
}

Test(rans, a_constant_channel_costs_only_its_state)
{
    /* One symbol with every count has frequency 4096: coding it leaves the state unchanged. */
    uint8_t sym[100];
    memset(sym, 5, sizeof(sym));
    uint32_t counts[8] = { 0 };
    counts[5] = 100;
    uint16_t cum[9];
    kvc_rans_cum_from_counts(counts, 8, 100, cum);
    uint8_t out[kvc_rans_bound(1, 100)];
    cr_assert_eq(kvc_rans_encode_stream(KVC_ISA_SCALAR, sym, 1, 100, 1, cum, 8, out, sizeof(out)), 4u);
    cr_assert_eq(out[0] | out[1] << 8 | out[2] << 16 | (uint32_t)out[3] << 24, 1u << 16);
}

Test(rans, size_is_near_the_entropy)
{
    /* Within the table's cross-entropy plus 4 bytes a state: 8 states for 8 channels, and for 32
     * (a stream's 4 groups share them, as in rANS containers). */
    for (unsigned g = 8; g <= 32; g += 24) {
        case_t k = make_case(4096, g, 32, 0);
        double bits = 0;
        for (size_t t = 0; t < k.T; t++)
            for (unsigned i = 0; i < k.g; i++) {
                const uint16_t *c = k.cum + i * (k.B + 1);
                const unsigned s = k.sym[t * k.stride + i];
                bits -= log2(((double)c[s + 1] - c[s]) / 4096.0);
            }
        cr_assert_leq((double)k.len, bits / 8 * 1.002 + 4 * 8 + 2, "%u channels: %zu bytes for %.0f bits of information", g, k.len, bits);
        cr_assert_geq((double)k.len, bits / 8);
        free_case(&k);
    }
}

Test(rans, encoder_refuses_a_symbol_without_frequency)
{
    uint8_t sym[4] = { 0, 1, 2, 3 };
    uint32_t counts[4] = { 1, 1, 2, 0 }; /* symbol 3 has no count */
    uint16_t cum[5];
    kvc_rans_cum_from_counts(counts, 4, 4, cum);
    uint8_t out[kvc_rans_bound(1, 4)];
    cr_assert_eq(kvc_rans_encode_stream(KVC_ISA_SCALAR, sym, 1, 4, 1, cum, 4, out, sizeof(out)), 0u);
    sym[3] = 9; /* outside the table */
    cr_assert_eq(kvc_rans_encode_stream(KVC_ISA_SCALAR, sym, 1, 4, 1, cum, 4, out, sizeof(out)), 0u);
}

/* The same refusals on a full 8-channel group long enough for the encoder's table-driven path:
 * a count-0 symbol, one past the table (< 64) and one far past it, in one lane of one token. */
Test(rans, full_group_encoder_refuses_a_symbol_without_frequency)
{
    enum { T = 64, G = 8 };
    uint8_t sym[T * G];
    uint16_t cum[G * 5];
    for (unsigned i = 0; i < G; i++) {
        const uint32_t counts[4] = { 10, 20, 34, 0 }; /* symbol 3 has no count */
        kvc_rans_cum_from_counts(counts, 4, 64, cum + i * 5);
    }
    for (size_t k = 0; k < T * G; k++) sym[k] = (uint8_t)(rnd() % 3);
    uint8_t out[kvc_rans_bound(G, T)];
    cr_assert_gt(kvc_rans_encode_stream(KVC_ISA_SCALAR, sym, G, T, G, cum, 4, out, sizeof(out)), 0u);
    const uint8_t bad[] = { 3, 4, 63, 64, 200 };
    for (size_t b = 0; b < sizeof(bad); b++) {
        const uint8_t keep = sym[30 * G + 5];
        sym[30 * G + 5] = bad[b];
        cr_assert_eq(kvc_rans_encode_stream(KVC_ISA_SCALAR, sym, G, T, G, cum, 4, out, sizeof(out)), 0u, "symbol %u", bad[b]);
        sym[30 * G + 5] = keep;
    }
}

/* Every frequency 1 .. 4095 (and 4096, a constant lane) codes exactly as the oracle's integer
 * division does: two-symbol tables, 8 lanes a call, symbols drawn with the table's odds. */
Test(rans, every_frequency_matches_the_oracle)
{
    enum { T = 1000, G = 8 };
    uint8_t sym[T * G], got[T * G];
    uint16_t cum[G * 3];
    uint8_t out[kvc_rans_bound(G, T)], ref[kvc_rans_bound(G, T)];
    for (unsigned f0 = 1; f0 <= 4096; f0 += G) {
        for (unsigned i = 0; i < G; i++) {
            const unsigned f = f0 + i > 4096 ? 4096 : f0 + i;
            cum[i * 3] = 0;
            cum[i * 3 + 1] = (uint16_t)f;
            cum[i * 3 + 2] = 4096;
            for (size_t t = 0; t < T; t++) sym[t * G + i] = f == 4096 ? 0 : (uint8_t)(rnd() % 4096 >= f || t == 0);
            if (f < 4096) sym[T / 2 * G + i] = 0; /* both symbols occur */
        }
        const size_t n = kvc_rans_encode_stream(KVC_ISA_SCALAR, sym, G, T, G, cum, 2, out, sizeof(out));
        const size_t rn = oracle_encode(sym, G, T, G, cum, 2, ref);
        cr_assert(n == rn && memcmp(out, ref, n) == 0, "frequencies %u..%u: %zu bytes, the oracle %zu", f0, f0 + G - 1, n, rn);
        cr_assert_eq(kvc_rans_decode_stream(KVC_ISA_SCALAR, out, n, T, G, cum, 2, got, G), KVC_OK);
        cr_assert(memcmp(got, sym, sizeof(sym)) == 0, "frequencies %u..%u", f0, f0 + G - 1);
    }
}

/* The tier kernels (src/backends/simd/cpu_rans.h) against the portable coder, byte for byte:
 * pairs of streams (A of 8, 20 or 32 channels; B absent, partial, one group or four) over 1-1000
 * tokens, 2-64 bins, a constant channel, and a symbol without frequency in either stream; the
 * tier's decoder on A's stream. Run on every tier the CPU has. */
static int tier_available(const char *name)
{
    setenv("KVCORE_ISA", name, 1);
    kvc_context_params_t cp = { .field_mask = KVC_CONTEXT_PARAM_BACKEND, .backend = "cpu" };
    kvc_context_t *ctx = NULL;
    const int ok = kvc_context_create(&cp, &ctx) == KVC_OK && strcmp(kvc_context_isa(ctx), name) == 0;
    kvc_context_destroy(ctx);
    unsetenv("KVCORE_ISA");
    return ok;
}

/* A context on the CPU tier `isa` with `threads` threads (NULL: the tier is not on this machine). */
static kvc_context_t *tier_context(const char *isa, int threads)
{
    if (!tier_available(isa)) return NULL;
    setenv("KVCORE_ISA", isa, 1);
    kvc_context_params_t cp = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | KVC_CONTEXT_PARAM_NUM_THREADS, .backend = "cpu",
                                .num_threads = threads };
    kvc_context_t *ctx = NULL;
    cr_assert_eq(kvc_context_create(&cp, &ctx), KVC_OK, "%s", kvc_last_error());
    unsetenv("KVCORE_ISA");
    return ctx;
}

Test(rans, every_tier_codes_the_same_bytes)
{
    static const struct { const char *name; int isa; } tiers[] = { { "avx2", KVC_ISA_AVX2 }, { "avx512", KVC_ISA_AVX512 },
                                                                   { "neon", KVC_ISA_NEON } };
    int ran = 0;
    for (size_t ti = 0; ti < sizeof(tiers) / sizeof(tiers[0]); ti++) {
        if (!tier_available(tiers[ti].name)) continue;
        ran++;
        const size_t Ts[] = { 1, 2, 7, 16, 256, 1000 };
        const unsigned Bs[] = { 2, 4, 32, 64 }, nas[] = { 8, 20, 32 }, nbs[] = { 0, 3, 8, 32 };
        for (size_t a = 0; a < 6; a++)
            for (size_t b = 0; b < 4; b++)
                for (size_t c = 0; c < 12; c++)
                    for (int bad = 0; bad < 3; bad++) {
                        const size_t T = Ts[a], stride = 70;
                        const unsigned B = Bs[b], na = nas[c / 4], nb = nbs[c % 4];
                        uint8_t *sym = calloc(T * stride, 1);
                        uint16_t *cum = malloc(64 * (B + 1) * sizeof(uint16_t));
                        for (unsigned i = 0; i < na + nb; i++) {
                            uint32_t counts[64] = { 0 };
                            for (size_t t = 0; t < T; t++) {
                                const uint8_t s = i == 2 ? (uint8_t)(B / 2) : (uint8_t)(rnd() % (rnd() % B + 1));
                                sym[t * stride + i] = s;
                                counts[s]++;
                            }
                            kvc_rans_cum_from_counts(counts, B, T, cum + i * (B + 1));
                        }
                        if (bad == 1) sym[(T / 2) * stride + na - 3] = (uint8_t)(B + 7); /* A: outside the table */
                        if (bad == 2 && nb) sym[(T - 1) * stride + na + nb - 1] = 200;  /* B */
                        const size_t cap = kvc_rans_bound(32, T);
                        uint8_t *out = malloc(2 * cap), *ref = malloc(2 * cap);
                        size_t len[2];
                        const uint8_t *const ys[2] = { sym, sym + na };
                        const uint16_t *const cs[2] = { cum, cum + na * (B + 1) };
                        const unsigned nch[2] = { na, nb };
                        uint8_t *const outs[2] = { out, out + cap };
                        kvc_rans_encode_pair(tiers[ti].isa, ys, cs, nch, stride, T, B, outs, cap, len);
                        const size_t ra = kvc_rans_encode_stream(KVC_ISA_SCALAR, sym, stride, T, na, cum, B, ref, cap);
                        const size_t rb = nb ? kvc_rans_encode_stream(KVC_ISA_SCALAR, sym + na, stride, T, nb, cs[1], B, ref + cap, cap) : 0;
                        cr_assert_eq(len[0], ra, "%s T %zu B %u na %u nb %u bad %d: A %zu bytes, portable %zu", tiers[ti].name, T, B, na, nb, bad,
                                     len[0], ra);
                        cr_assert_eq(len[1], rb, "%s T %zu B %u na %u nb %u bad %d: B %zu bytes, portable %zu", tiers[ti].name, T, B, na, nb, bad,
                                     len[1], rb);
                        cr_assert_eq(ra == 0, bad == 1);
                        cr_assert(memcmp(out, ref, ra) == 0 && memcmp(out + cap, ref + cap, rb) == 0, "%s T %zu B %u na %u nb %u: bytes differ",
                                  tiers[ti].name, T, B, na, nb);
                        if (ra) { /* and the tier's decoder (its slot tables) gives the symbols back */
                            uint8_t *got = calloc(T * stride, 1);
                            cr_assert_eq(kvc_rans_decode_stream(tiers[ti].isa, out, ra, T, na, cum, B, got, stride), KVC_OK);
                            for (size_t t = 0; t < T; t++)
                                cr_assert(memcmp(got + t * stride, sym + t * stride, na) == 0, "%s T %zu B %u: token %zu", tiers[ti].name, T, B, t);
                            free(got);
                        }
                        free(sym);
                        free(cum);
                        free(out);
                        free(ref);
                    }
    }
    if (!ran) cr_skip_test("this CPU has no SIMD tier above scalar (AVX2, AVX-512, NEON): nothing to compare");
}

/* Every damage is KVC_ERR_CORRUPT, read from an exact-size copy (ASan: no read past it). */
static kvc_status_t decode_copy(const case_t *k, const uint8_t *src, size_t len, uint8_t *out)
{
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, src, len);
    const kvc_status_t st = decode_case(k, copy, len, out);
    free(copy);
    return st;
}

Test(rans, damaged_streams_are_corrupt)
{
    case_t k = make_case(256, 8, 32, 0);
    uint8_t *out = calloc(k.T * k.stride, 1), *buf = malloc(k.len + 4);
    /* Truncation at every length, and appended bytes. */
    for (size_t n = 0; n < k.len; n++) cr_assert_eq(decode_copy(&k, k.stream, n, out), KVC_ERR_CORRUPT, "cut to %zu of %zu", n, k.len);
    memcpy(buf, k.stream, k.len);
    buf[k.len] = buf[k.len + 1] = buf[k.len + 2] = 0;
    cr_assert_eq(decode_copy(&k, buf, k.len + 1, out), KVC_ERR_CORRUPT);
    cr_assert_eq(decode_copy(&k, buf, k.len + 2, out), KVC_ERR_CORRUPT);
    /* Single-bit flips: the final-state check catches nearly all (not every one: damage to a
     * state's top bits changes the first symbols decoded, after which the states can meet the
     * undamaged path again; the container's CRC-32 is what guarantees detection). What is not
     * caught still decodes to symbols of the table. */
    size_t caught = 0, flips = 0;
    for (size_t i = 0; i < k.len; i++)
        for (int b = 0; b < 8; b += 3, flips++) { /* bits 0, 3 and 6 of every byte */
            memcpy(buf, k.stream, k.len);
            buf[i] ^= (uint8_t)(1u << b);
            const kvc_status_t st = decode_copy(&k, buf, k.len, out);
            cr_assert(st == KVC_OK || st == KVC_ERR_CORRUPT, "bit %d of byte %zu flipped: %d", b, i, st);
            caught += st == KVC_ERR_CORRUPT;
        }
    cr_assert_geq(caught, flips * 99 / 100, "%zu of %zu flips caught", caught, flips);
    /* A state below 2^16 cannot come from the encoder. */
    memcpy(buf, k.stream, k.len);
    buf[4 * 3 + 2] = buf[4 * 3 + 3] = 0;
    cr_assert_eq(decode_copy(&k, buf, k.len, out), KVC_ERR_CORRUPT);
    /* Random bytes of random lengths: a status, and symbols only from the table when OK. Streams of
     * 64 tokens or more take the decoder's unchecked fast path while 16 bytes remain (ASan: the
     * exact-size copies show it never reads past them). */
    buf = realloc(buf, k.len + 4 > 1024 ? k.len + 4 : 1024);
    for (int it = 0; it < 4000; it++) {
        const int fast = it % 4 == 0;
        const size_t n = fast ? 32 + rnd() % 993 : rnd() % 64;
        for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)rnd();
        case_t small = k;
        small.T = fast ? 64 + rnd() % 193 : 1 + rnd() % 4;
        const kvc_status_t st = decode_copy(&small, buf, n, out);
        cr_assert(st == KVC_OK || st == KVC_ERR_CORRUPT);
        if (st == KVC_OK)
            for (size_t t = 0; t < small.T; t++)
                for (unsigned i = 0; i < k.g; i++) {
                    const unsigned s = out[t * k.stride + i];
                    cr_assert(s < k.B && k.cum[i * (k.B + 1) + s + 1] > k.cum[i * (k.B + 1) + s]);
                }
    }
    free(out);
    free(buf);
    free_case(&k);
}

/* The SIMD decoders (no slot tables: AVX-512's 2 to 12 groups, AVX2's six, four and two)
 * against the portable decoder, stream by stream: the same symbols, and the same status for every
 * damage (any corrupt stream makes the task corrupt). A task's KVC_RANS_TASK streams of nch
 * channels each (8: one group; 32: four
 * groups, which the kernels take a step at a time; 20: a partial last group, which the portable
 * decoder does). Channels: skewed, constant (frequency 4096), with empty bins inside and at both
 * ends, and one stream of constant channels that is its states alone (the checked end loop with
 * masked loads does all its tokens). Streams in exact-size buffers (ASan). */
typedef struct {
    size_t T, stride;
    unsigned B, nch;
    uint8_t *sym;
    uint16_t *cum;
    uint8_t *st[KVC_RANS_TASK];
    size_t len[KVC_RANS_TASK];
} task_t;

static task_t make_task(size_t T, unsigned B, unsigned nch)
{
    task_t q = { .T = T, .stride = KVC_RANS_TASK * nch + 5, .B = B, .nch = nch };
    q.sym = calloc(T ? T * q.stride : 1, 1);
    q.cum = malloc(KVC_RANS_TASK * nch * (B + 1) * sizeof(uint16_t));
    for (unsigned i = 0; i < KVC_RANS_TASK * nch; i++) {
        uint32_t counts[64] = { 0 };
        const unsigned kind = i / nch == 2 ? 0 : i % 4, centre = rnd() % B;
        for (size_t t = 0; t < T; t++) {
            unsigned s;
            if (kind == 0) s = centre;                                /* constant */
            else if (kind == 1) s = rnd() % (rnd() % B + 1);          /* skewed to 0 */
            else if (kind == 2) s = (B - 1) - (rnd() % 2) * (B / 2); /* two symbols, empty bins between */
            else s = rnd() % B;                                       /* flat */
            q.sym[t * q.stride + i] = (uint8_t)s;
            counts[s]++;
        }
        if (!T) counts[centre] = 1;
        kvc_rans_cum_from_counts(counts, B, T ? T : 1, q.cum + i * (B + 1));
    }
    const size_t cap = kvc_rans_bound(nch, T);
    uint8_t *buf = malloc(cap);
    for (unsigned g = 0; g < KVC_RANS_TASK; g++) {
        q.len[g] = kvc_rans_encode_stream(KVC_ISA_SCALAR, q.sym + nch * g, q.stride, T, nch, q.cum + nch * g * (B + 1), B, buf, cap);
        cr_assert_gt(q.len[g], 0);
        q.st[g] = malloc(q.len[g]);
        memcpy(q.st[g], buf, q.len[g]);
    }
    free(buf);
    return q;
}

static void free_task(task_t *q)
{
    for (unsigned g = 0; g < KVC_RANS_TASK; g++) free(q->st[g]);
    free(q->sym);
    free(q->cum);
}

/* The SIMD decoders under test, through kvc_rans_decode_task on their tier: streams g0 ..
 * g0 + ng - 1 of the task, which the tier takes in its widest kernels first (11 streams on
 * AVX-512: ten in one kernel and one portable group). */
typedef struct {
    const char *tier;
    unsigned g0, ng;
} kernel_t;

static kvc_status_t run_kernel(const kernel_t *kn, const task_t *q, uint8_t *const in[KVC_RANS_TASK], const size_t len[KVC_RANS_TASK],
                               uint8_t *out)
{
    const uint16_t *cum[KVC_RANS_TASK];
    uint8_t *sym[KVC_RANS_TASK];
    unsigned nch[KVC_RANS_TASK];
    for (unsigned g = 0; g < kn->ng; g++) {
        nch[g] = q->nch;
        cum[g] = q->cum + (size_t)q->nch * (kn->g0 + g) * (q->B + 1);
        sym[g] = out + (size_t)q->nch * (kn->g0 + g);
    }
    const int isa = strcmp(kn->tier, "avx512") == 0 ? KVC_ISA_AVX512 : KVC_ISA_AVX2;
    return kvc_rans_decode_task(isa, kn->ng, (const uint8_t *const *)in + kn->g0, len + kn->g0, cum, sym, nch, q->stride, q->T, q->B);
}

/* Decode q's streams as given by in / len with the kernel and with the portable decoder stream by
 * stream; the statuses and (when OK) the symbols of the kernel's streams must agree. Returns the
 * status. */
static kvc_status_t kernel_agrees(const kernel_t *kn, const task_t *q, uint8_t *const in[KVC_RANS_TASK], const size_t len[KVC_RANS_TASK],
                                  const char *what)
{
    const size_t n = q->T ? q->T * q->stride : 1, off = (size_t)q->nch * kn->g0;
    uint8_t *got = calloc(n, 1), *ref = calloc(n, 1);
    const kvc_status_t st = run_kernel(kn, q, in, len, got);
    kvc_status_t want = KVC_OK;
    for (unsigned g = kn->g0; g < kn->g0 + kn->ng; g++)
        if (kvc_rans_decode_stream(KVC_ISA_SCALAR, in[g], len[g], q->T, q->nch, q->cum + q->nch * g * (q->B + 1), q->B, ref + q->nch * g,
                                   q->stride) != KVC_OK)
            want = KVC_ERR_CORRUPT;
    cr_assert_eq(st, want, "%s %s (T %zu B %u nch %u): status %d, the portable decoder's %d", kn->tier, what, q->T, q->B, q->nch, st, want);
    if (st == KVC_OK)
        for (size_t t = 0; t < q->T; t++)
            cr_assert(memcmp(got + t * q->stride + off, ref + t * q->stride + off, q->nch * kn->ng) == 0,
                      "%s %s (T %zu B %u nch %u): token %zu differs", kn->tier, what, q->T, q->B, q->nch, t);
    free(got);
    free(ref);
    return st;
}

static void kernel_suite(const kernel_t *kn, unsigned nch)
{
    const size_t Ts[] = { 0, 1, 2, 7, 16, 64, 256, 1000 };
    const unsigned Bs[] = { 2, 4, 32, 64 };
    for (size_t a = 0; a < 8; a++)
        for (size_t b = 0; b < 4; b++) {
            task_t q = make_task(Ts[a], Bs[b], nch);
            cr_assert_eq(kernel_agrees(kn, &q, q.st, q.len, "as encoded"), KVC_OK);
            uint8_t *got = calloc(q.T ? q.T * q.stride : 1, 1); /* and they are the encoded symbols */
            cr_assert_eq(run_kernel(kn, &q, q.st, q.len, got), KVC_OK);
            const size_t off = (size_t)nch * kn->g0;
            for (size_t t = 0; t < q.T; t++)
                cr_assert(memcmp(got + t * q.stride + off, q.sym + t * q.stride + off, nch * kn->ng) == 0, "%s T %zu B %u nch %u: token %zu",
                          kn->tier, q.T, q.B, nch, t);
            free(got);
            free_task(&q);
        }
    /* Damage to one stream at a time: every cut, bytes appended, a state below 2^16, bit flips. */
    task_t q = make_task(nch > 8 ? 96 : 256, 32, nch);
    for (unsigned g = kn->g0; g < kn->g0 + kn->ng; g++) {
        uint8_t *keep = q.st[g];
        const unsigned klen = (unsigned)q.len[g]; /* unsigned: a size_t klen + 3 that may wrap made GCC's -O2 + ASan build see
                                                    * malloc(SIZE_MAX - 2) below (-Walloc-size-larger-than) */
        size_t len[KVC_RANS_TASK];
        uint8_t *in[KVC_RANS_TASK];
        memcpy(len, q.len, sizeof len);
        memcpy(in, q.st, sizeof in);
        for (unsigned n = 0; n < klen + 3; n++) {
            uint8_t *copy = malloc(n ? n : 1);
            memcpy(copy, keep, n < klen ? n : klen);
            if (n > klen) memset(copy + klen, 0, n - klen);
            in[g] = copy;
            len[g] = n;
            cr_assert_eq(kernel_agrees(kn, &q, in, len, n < klen ? "cut" : "appended"), n == klen ? KVC_OK : KVC_ERR_CORRUPT);
            free(copy);
        }
        uint8_t *copy = malloc(klen);
        in[g] = copy;
        len[g] = klen;
        memcpy(copy, keep, klen);
        copy[4 * 5 + 2] = copy[4 * 5 + 3] = 0;
        cr_assert_eq(kernel_agrees(kn, &q, in, len, "state below 2^16"), KVC_ERR_CORRUPT);
        for (size_t i = 0; i < klen; i += 3) {
            memcpy(copy, keep, klen);
            copy[i] ^= (uint8_t)(1u << (i % 8));
            kernel_agrees(kn, &q, in, len, "bit flip");
        }
        free(copy);
    }
    free_task(&q);
    /* Random bytes in every stream: statuses agree, symbols agree when OK. */
    q = make_task(96, 16, nch);
    for (int it = 0; it < 500; it++) {
        uint8_t *in[KVC_RANS_TASK];
        size_t len[KVC_RANS_TASK];
        for (unsigned g = 0; g < KVC_RANS_TASK; g++) {
            len[g] = it % 2 ? 32 + 2 * (rnd() % 200) : rnd() % 600;
            in[g] = malloc(len[g] ? len[g] : 1);
            for (size_t i = 0; i < len[g]; i++) in[g][i] = (uint8_t)rnd();
        }
        kernel_agrees(kn, &q, in, len, "random bytes");
        for (unsigned g = 0; g < KVC_RANS_TASK; g++) free(in[g]);
    }
    free_task(&q);
}

Test(rans, avx512_decoders_match_the_portable_one)
{
    if (!tier_available("avx512")) cr_skip_test("this CPU has no AVX-512 tier: its decoders cannot run here");
    /* every register count (2R streams, R = 1 .. 6: the kernel is compiled for each; with arrays
     * of the largest R GCC 12 kept one of R = 3's accumulators on the stack): twelve, ten, eight,
     * six, four, streams 2-3 (stream 2: constant channels) as a pair; eleven (ten and one group
     * through the portable decoder) */
    const kernel_t k[] = { { "avx512", 0, 12 }, { "avx512", 0, 10 }, { "avx512", 0, 8 }, { "avx512", 0, 6 },
                           { "avx512", 0, 4 },  { "avx512", 2, 2 },  { "avx512", 1, 11 } };
    for (unsigned nch = 8; nch <= 32; nch += 12)
        for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) kernel_suite(&k[i], nch);
}

Test(rans, avx2_decoders_match_the_portable_one)
{
    if (!tier_available("avx2")) cr_skip_test("this CPU has no AVX2 tier: its decoders cannot run here");
    /* streams 0-1; 2-3 (stream 2: constant channels); four (the two pairs interleaved); six (three
     * pairs); eight (two fours); ten (a six and a four); all twelve (two sixes); eleven (a six,
     * a four and one group through the portable decoder) */
    const kernel_t k[] = { { "avx2", 0, 2 }, { "avx2", 2, 2 },  { "avx2", 0, 4 },  { "avx2", 0, 6 },
                           { "avx2", 0, 8 }, { "avx2", 0, 10 }, { "avx2", 0, 12 }, { "avx2", 1, 11 } };
    for (unsigned nch = 8; nch <= 32; nch += 12)
        for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) kernel_suite(&k[i], nch);
}

/* The SIMD encoders' quotient x / f (a single-precision estimate corrected by the remainder)
 * against integer division, at every f in [1, 4096]: x = k f + r for 257 spread k up to the
 * largest state (x < f << 20) and r at 0, 1, f / 2 and f - 1 (where an estimate off by one
 * shows), and 2^20 random (x, f). */
static void quotient_suite(const char *tier, void (*quot)(const uint32_t *, const uint32_t *, uint32_t *), unsigned lanes)
{
    uint32_t x[16], f[16], q[16];
    unsigned n = 0;
    size_t checked = 0;
    rng_state = 7;
    for (uint64_t it = 0;; it++) {
        const int boundary = it < 4096ull * 257 * 4;
        if (!boundary && it >= 4096ull * 257 * 4 + (1u << 20)) break;
        uint32_t fv;
        uint64_t xv;
        if (boundary) {
            const uint64_t b = it / 4, k = (b % 257) * ((1u << 20) - 1) / 256;
            fv = (uint32_t)(b / 257) + 1;
            const uint32_t rs[4] = { 0, 1, fv / 2, fv - 1 };
            xv = k * fv + rs[it % 4];
        } else {
            fv = rnd() % 4096 + 1;
            xv = ((uint64_t)rnd() << 16 ^ rnd()) % ((uint64_t)fv << 20);
        }
        x[n] = (uint32_t)xv;
        f[n] = fv;
        if (++n < lanes) continue;
        quot(x, f, q);
        for (unsigned i = 0; i < lanes; i++)
            cr_assert_eq(q[i], x[i] / f[i], "%s: %u / %u gave %u", tier, x[i], f[i], q[i]);
        checked += lanes;
        n = 0;
    }
    cr_assert_geq(checked, 4096u * 257 * 4);
}

Test(rans, simd_encoders_divide_exactly)
{
    int ran = 0;
#ifdef KVC_HAVE_X86_SIMD
    if (tier_available("avx2")) quotient_suite("avx2", kvc_rans_quotient_avx2, 8), ran++;
    if (tier_available("avx512")) quotient_suite("avx512", kvc_rans_quotient_avx512, 16), ran++;
#endif
    if (!ran) cr_skip_test("this CPU has no AVX2 or AVX-512 tier: their quotients cannot run here");
}

/* ---- containers ---- */

/* A one-thread CPU context: these chunks are tiny, and OpenMP's barriers on a loaded machine (or
 * under a sanitizer) would cost more than the coding; same_bytes_on_every_tier_and_thread_count
 * covers more threads. */
static kvc_context_t *cpu_threads_context(int threads)
{
    kvc_context_params_t cp = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | KVC_CONTEXT_PARAM_NUM_THREADS, .backend = "cpu",
                                .num_threads = threads };
    kvc_context_t *ctx = NULL;
    cr_assert_eq(kvc_context_create(&cp, &ctx), KVC_OK, "%s", kvc_last_error());
    return ctx;
}

static kvc_context_t *one_thread_context(void) { return cpu_threads_context(1); }

static void synth(void *buf, kvc_dtype_t dt, size_t n, unsigned seed)
{
    rng_state = seed;
    for (size_t i = 0; i < n; i++) {
        const float x = (float)((int)(rnd() % 20001) - 10000) / 1000.0f * (i % 7 == 0 ? 8.0f : 1.0f);
        if (dt == KVC_DTYPE_F32) ((float *)buf)[i] = x;
        else if (dt == KVC_DTYPE_F16) ((uint16_t *)buf)[i] = kvc_f32_to_f16(x);
        else ((uint16_t *)buf)[i] = kvc_f32_to_bf16(x);
    }
}

static uint8_t *encode_with(kvc_context_t *ctx, kvc_codec_params_t p, kvc_codec_coder_t coder, const void *kv, size_t *len)
{
    p.field_mask |= KVC_CODEC_PARAM_CODER;
    p.coder = coder;
    uint8_t *buf = NULL;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, len), KVC_OK, "%s", kvc_last_error());
    return buf;
}

/* The rANS container decodes to exactly what the ac container of the same chunk decodes to (the
 * same symbols), and says what it is. */
static void same_as_ac(kvc_context_t *ctx, kvc_codec_params_t p, const void *kv, size_t bytes)
{
    size_t la, lr;
    uint8_t *a = encode_with(ctx, p, KVC_CODER_AC, kv, &la), *r = encode_with(ctx, p, KVC_CODER_RANS, kv, &lr);
    void *da = malloc(bytes), *dr = malloc(bytes);
    kvc_codec_info_t ia, ir;
    cr_assert_eq(kvc_codec_decode(ctx, a, la, da, bytes, &ia), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_codec_decode(ctx, r, lr, dr, bytes, &ir), KVC_OK, "%s", kvc_last_error());
    cr_assert(memcmp(da, dr, bytes) == 0, "rANS and ac decode differently (T %zu, C %zu)", p.num_tokens, p.num_heads * p.head_size);
    cr_assert_eq(ia.coder, KVC_CODER_AC);
    cr_assert_eq(ir.coder, KVC_CODER_RANS);
    cr_assert_eq(ir.version_minor, 4u);
    cr_assert_eq(ir.lmcache_readable, 0);
    /* the same counts, behind the index of format 1.4: a varint a part (at most 64 parts, of at
     * most 10 bytes), and each part padded to a byte */
    cr_assert(ir.cdf_bytes >= ia.cdf_bytes && ir.cdf_bytes <= ia.cdf_bytes + 11 * 64, "CDF bytes %zu, ac's %zu", ir.cdf_bytes,
              ia.cdf_bytes);
    cr_assert_eq(r[12] & 56, 56); /* rANS streams of 32 channels, the CDF index */
    kvc_lmcache_chunk_t o;
    void *storage = NULL;
    cr_assert_eq(kvc_codec_export_lmcache(r, lr, &o, &storage), KVC_ERR_UNSUPPORTED);
    cr_assert(strstr(kvc_last_error(), "rANS"), "%s", kvc_last_error());
    kvc_codec_free(a);
    kvc_codec_free(r);
    free(da);
    free(dr);
}

Test(rans_codec, every_dtype_layout_and_edge_shape)
{
    kvc_context_t *ctx = one_thread_context();
    const kvc_dtype_t dts[] = { KVC_DTYPE_F16, KVC_DTYPE_BF16, KVC_DTYPE_F32 };
    /* T, NH, HS, window: several windows with a short last one, a 9-channel tail group, one token,
     * one channel. */
    const size_t shapes[][4] = { { 300, 2, 12, 64 }, { 40, 3, 3, 256 }, { 1, 2, 4, 256 }, { 17, 1, 1, 8 } };
    const uint32_t bins[6] = { 32, 16, 8, 64, 4, 16 };
    for (int di = 0; di < 3; di++)
        for (int si = 0; si < 4; si++)
            for (int mla = 0; mla < 2; mla++) {
                const size_t nl = 3, T = shapes[si][0], nh = mla ? 1 : shapes[si][1], hs = shapes[si][2] * (mla ? shapes[si][1] : 1);
                const size_t planes = mla ? 1 : 2, n = planes * nl * T * nh * hs, es = kvc_dtype_size(dts[di]);
                void *kv = malloc(n * es);
                synth(kv, dts[di], n, 11u + (unsigned)(di * 8 + si));
                kvc_codec_params_t p = { .field_mask = KVC_CODEC_PARAM_BINS | KVC_CODEC_PARAM_WINDOW, .dtype = dts[di],
                                         .layout = mla ? KVC_CODEC_MLA : KVC_CODEC_KV_2LTD, .num_layers = nl, .num_tokens = T,
                                         .num_heads = nh, .head_size = hs, .bins = bins, .window_tokens = (uint32_t)shapes[si][3] };
                same_as_ac(ctx, p, kv, n * es);
                free(kv);
            }
    kvc_context_destroy(ctx);
}

Test(rans_codec, levels_channel_keys_and_bits_target)
{
    kvc_context_t *ctx = one_thread_context();
    const size_t nl = 2, T = 64, C = 16, n = 2 * nl * T * C;
    uint16_t *kv = malloc(n * 2);
    synth(kv, KVC_DTYPE_F16, n, 5);
    kvc_codec_params_t p = { .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD, .num_layers = nl, .num_tokens = T,
                             .num_heads = 2, .head_size = 8 };
    uint32_t lb[4];
    for (int level = 0; level <= KVC_CODEC_LEVEL_MAX; level++) {
        kvc_codec_params_t q = p;
        cr_assert_eq(kvc_codec_level_params(level, &q, lb), KVC_OK);
        same_as_ac(ctx, q, kv, n * 2);
    }
    kvc_codec_params_t q = p;
    q.field_mask = KVC_CODEC_PARAM_KEY_SCALING;
    q.key_scaling = KVC_CODEC_SCALE_CHANNEL;
    same_as_ac(ctx, q, kv, n * 2);
    q = p;
    q.field_mask = KVC_CODEC_PARAM_BITS;
    q.bits = 3.5;
    size_t len;
    uint8_t *buf = encode_with(ctx, q, KVC_CODER_RANS, kv, &len);
    cr_assert_leq(8.0 * (double)len, 3.5 * (double)n);
    kvc_codec_info_t info;
    cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_OK);
    cr_assert_eq(info.coder, KVC_CODER_RANS);
    kvc_codec_layer_stats_t ls[4];
    cr_assert_eq(kvc_codec_layer_stats(buf, len, ls, 4), KVC_OK);
    for (int l = 0; l < 4; l++) cr_assert(ls[l].bits_per_symbol > 0 && ls[l].bits_per_symbol < 8, "%g", ls[l].bits_per_symbol);
    kvc_codec_free(buf);
    /* A window too long for a rANS stream's length: refused before the chunk is read. */
    kvc_codec_params_t big = { .field_mask = KVC_CODEC_PARAM_CODER | KVC_CODEC_PARAM_WINDOW, .coder = KVC_CODER_RANS,
                               .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_MLA, .num_layers = 1, .num_tokens = (1u << 26) + 1,
                               .num_heads = 1, .head_size = 1, .window_tokens = (1u << 26) + 1 };
    cr_assert_eq(kvc_codec_encode(ctx, &big, kv, &buf, &len), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "rANS windows"), "%s", kvc_last_error());
    /* An unknown coder. */
    q = p;
    q.field_mask = KVC_CODEC_PARAM_CODER;
    q.coder = (kvc_codec_coder_t)2;
    cr_assert_eq(kvc_codec_encode(ctx, &q, kv, &buf, &len), KVC_ERR_INVALID_ARG);
    free(kv);
    kvc_context_destroy(ctx);
}

static kvc_status_t try_decode(kvc_context_t *ctx, const uint8_t *buf, size_t len, size_t out_bytes)
{
    void *out = malloc(out_bytes);
    const kvc_status_t st = kvc_codec_decode(ctx, buf, len, out, out_bytes, NULL);
    free(out);
    return st;
}

Test(rans_codec, damaged_containers_have_exact_statuses)
{
    kvc_context_t *ctx = one_thread_context();
    const size_t nl = 2, T = 40, C = 40, n = 2 * nl * T * C;
    uint16_t *kv = malloc(n * 2);
    synth(kv, KVC_DTYPE_F16, n, 9);
    kvc_codec_params_t p = { .field_mask = KVC_CODEC_PARAM_WINDOW, .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD,
                             .num_layers = nl, .num_tokens = T, .num_heads = 5, .head_size = 8, .window_tokens = 3 };
    size_t len;
    uint8_t *good = encode_with(ctx, p, KVC_CODER_RANS, kv, &len), *buf = malloc(len);
    size_t off[5];
    sections(good, off);
    /* LENGTHS: one varint (of one byte here: streams under 128 bytes) per (window, plane and
     * layer, 32 channels) = 14 * 4 * 2. */
    kvc_codec_info_t info;
    cr_assert_eq(kvc_codec_inspect(good, len, &info), KVC_OK);
    cr_assert_eq(info.lengths_bytes, 14u * 4u * 2u);
    const size_t s0 = off[4] + 16, ns = rd32(good + off[4] + 8);
    /* Bytes of STREAMS flipped (checksum resealed): the rANS decoder's checks catch nearly
     * all (see damaged_streams_are_corrupt); nothing else comes back. */
    size_t caught = 0, tried = 0;
    for (size_t i = 0; i < ns; i += 3, tried++) { /* a third of them: a whole decode each */
        memcpy(buf, good, len);
        buf[s0 + i] ^= 0x24;
        reseal(buf, off[4]);
        const kvc_status_t st = try_decode(ctx, buf, len, n * 2);
        cr_assert(st == KVC_OK || st == KVC_ERR_CORRUPT, "STREAMS byte %zu: %d", i, st);
        caught += st == KVC_ERR_CORRUPT;
    }
    cr_assert_geq(caught, tried * 98 / 100, "%zu of %zu flipped bytes caught", caught, tried);
    /* A damaged stream of window 5 (the 13 full windows are decoded in one call) is named with its
     * window: the top bit of its first state. */
    memcpy(buf, good, len);
    size_t w5 = 0;
    for (size_t k = 0; k < 5 * 4 * 2; k++) w5 += good[off[3] + 16 + k]; /* one-byte varints (above) */
    buf[s0 + w5 + 3] ^= 0x80;
    reseal(buf, off[4]);
    cr_assert_eq(try_decode(ctx, buf, len, n * 2), KVC_ERR_CORRUPT);
    cr_assert(strstr(kvc_last_error(), "window 5: rANS stream 0 (layer 0, channels 0-31) is corrupt"), "%s", kvc_last_error());
    /* Two bytes moved from the first stream to the second (same total). */
    memcpy(buf, good, len);
    uint8_t *lp = buf + off[3] + 16;
    cr_assert(lp[0] > 8 && lp[0] < 0x80 && lp[1] < 0x7e);
    lp[0] -= 2;
    lp[1] += 2;
    reseal(buf, off[3]);
    cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_OK, "the container's structure is intact");
    cr_assert_eq(try_decode(ctx, buf, len, n * 2), KVC_ERR_CORRUPT);
    /* The rANS flag in a format 1.1 header, and with a raw CDF table. */
    memcpy(buf, good, len);
    buf[10] = 1;
    reseal(buf, 48);
    cr_assert_eq(try_decode(ctx, buf, len, n * 2), KVC_ERR_CORRUPT);
    cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_ERR_CORRUPT);
    memcpy(buf, good, len);
    wr32(buf + 12, 8u | 1u);
    reseal(buf, 48);
    cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_ERR_CORRUPT);
    /* Without the flag the same bytes are an arithmetic-coded container with the wrong number of
     * lengths. */
    memcpy(buf, good, len);
    wr32(buf + 12, 0);
    buf[10] = 0;
    reseal(buf, 48);
    cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_ERR_CORRUPT);
    /* A truncated container. */
    cr_assert_eq(try_decode(ctx, good, len - 1, n * 2), KVC_ERR_CORRUPT);
    kvc_codec_free(good);
    free(buf);
    free(kv);
    kvc_context_destroy(ctx);
}

/* Whole windows (T a multiple of the window, or one window) decode in one backend call that also
 * makes each task's tables from the counts (the windows of a layer in one task share them; with
 * three and five windows a layer's windows fall in two tasks) and dequantises in the same thread
 * team: the values are the ac twin's on every tier at one to three threads, and a damaged stream
 * is KVC_ERR_CORRUPT naming it with the output untouched (the dequantiser does not run). 40
 * channels: streams of 32 and of 8 channels; T = 35, not a multiple of 8, takes the other path. */
Test(rans_codec, whole_windows_decode_in_one_team)
{
    const size_t nl = 3, C = 40, W = 8;
    const size_t windows[] = { 1, 2, 3, 5 };
    static const char *tiers[] = { "scalar", "avx2", "avx512", "neon" };
    for (int wi = 0; wi < 5; wi++) {
        const size_t T = wi < 4 ? W * windows[wi] : 35, n = 2 * nl * T * C;
        uint16_t *kv = malloc(n * 2), *ref = malloc(n * 2), *out = malloc(n * 2);
        synth(kv, KVC_DTYPE_F16, n, 21u + (unsigned)wi);
        kvc_codec_params_t p = { .field_mask = KVC_CODEC_PARAM_WINDOW, .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD,
                                 .num_layers = nl, .num_tokens = T, .num_heads = 5, .head_size = 8, .window_tokens = (uint32_t)W };
        kvc_context_t *one = one_thread_context();
        size_t la, lr;
        uint8_t *a = encode_with(one, p, KVC_CODER_AC, kv, &la), *r = encode_with(one, p, KVC_CODER_RANS, kv, &lr);
        cr_assert_eq(kvc_codec_decode(one, a, la, ref, n * 2, NULL), KVC_OK, "%s", kvc_last_error());
        kvc_context_destroy(one);
        /* the last stream's first state, top bit flipped: below 2^16 after the flip, or a wrong end */
        uint8_t *bad = malloc(lr);
        memcpy(bad, r, lr);
        size_t off[5];
        sections(bad, off);
        const size_t nstreams = 2 * nl * 2 * ((T + W - 1) / W);
        size_t last = 0, q = off[3] + 16;
        for (size_t k = 0; k + 1 < nstreams; k++) /* LENGTHS: a LEB128 varint a stream */
            for (unsigned sh = 0;; sh += 7) {
                const uint8_t byte = bad[q++];
                last += (size_t)(byte & 127u) << sh;
                if (!(byte & 128u)) break;
            }
        bad[off[4] + 16 + last + 3] ^= 0x80;
        reseal(bad, off[4]);
        for (int ti = 0; ti < 4; ti++)
            for (int threads = 1; threads <= 3; threads++) {
                kvc_context_t *ctx = tier_context(tiers[ti], threads);
                if (!ctx) continue; /* this CPU lacks the tier */
                memset(out, 0xA5, n * 2);
                cr_assert_eq(kvc_codec_decode(ctx, r, lr, out, n * 2, NULL), KVC_OK, "%s", kvc_last_error());
                cr_assert(memcmp(out, ref, n * 2) == 0, "T %zu, %s, %d threads: not the ac twin's values", T, tiers[ti], threads);
                memset(out, 0xA5, n * 2);
                cr_assert_eq(kvc_codec_decode(ctx, bad, lr, out, n * 2, NULL), KVC_ERR_CORRUPT, "T %zu, %s, %d threads", T, tiers[ti],
                             threads);
                char want[96];
                snprintf(want, sizeof want, "rANS stream %zu (layer %zu, channels 32-39) is corrupt", 2 * (2 * nl - 1) + 1, 2 * nl - 1);
                cr_assert(strstr(kvc_last_error(), want), "T %zu: %s", T, kvc_last_error());
                for (size_t i = 0; i < n; i++) cr_assert_eq(out[i], 0xA5A5, "T %zu, %s, %d threads: output written", T, tiers[ti], threads);
                kvc_context_destroy(ctx);
            }
        kvc_codec_free(a);
        kvc_codec_free(r);
        free(bad);
        free(kv);
        free(ref);
        free(out);
    }
}

/* The fused decode converts 2-byte scales in its thread team, each block's by the thread that
 * dequantises it (the tier's conversion: F16C on AVX2 and AVX-512). Every finite non-negative
 * fp16 and bf16 pattern (and -0) as a row's scale, written into the SCALES of a rANS container
 * and of its ac twin (whose decode converts them before the dequantiser, common/halfs.h, checked
 * against the reference in test_codec): the same values on every tier at one and two threads.
 * 32 768 rows of 8 channels in windows of 1024 (whole windows: the fused path). */
Test(rans_codec, every_finite_half_scale_converts_in_the_decode_team)
{
    const size_t T = 16384, C = 8, rows = 2 * T, n = rows * C;
    static const char *tiers[] = { "scalar", "avx2", "avx512", "neon" };
    static const kvc_dtype_t dts[] = { KVC_DTYPE_F16, KVC_DTYPE_BF16 };
    uint16_t *kv = malloc(n * 2), *ref = malloc(n * 2), *out = malloc(n * 2);
    for (int d = 0; d < 2; d++) {
        const uint16_t top = d ? 0x7F7Fu : 0x7BFFu; /* the largest finite value */
        synth(kv, dts[d], n, 31u + (unsigned)d);
        kvc_codec_params_t p = { .field_mask = KVC_CODEC_PARAM_WINDOW, .dtype = dts[d], .layout = KVC_CODEC_KV_2LTD,
                                 .num_layers = 1, .num_tokens = T, .num_heads = 1, .head_size = 8, .window_tokens = 1024 };
        kvc_context_t *one = one_thread_context();
        size_t len[2];
        uint8_t *buf[2] = { encode_with(one, p, KVC_CODER_AC, kv, &len[0]), encode_with(one, p, KVC_CODER_RANS, kv, &len[1]) };
        for (int k = 0; k < 2; k++) {
            size_t off[5];
            sections(buf[k], off);
            cr_assert_eq(rd32(buf[k] + off[1] + 8), rows * 2);
            for (size_t r = 0; r < rows; r++) { /* 0 .. top, then -0 */
                const uint16_t h = r <= top ? (uint16_t)r : r == top + 1u ? 0x8000u : (uint16_t)(r % 997u);
                buf[k][off[1] + 16 + 2 * r] = (uint8_t)h;
                buf[k][off[1] + 16 + 2 * r + 1] = (uint8_t)(h >> 8);
            }
            reseal(buf[k], off[1]);
        }
        cr_assert_eq(kvc_codec_decode(one, buf[0], len[0], ref, n * 2, NULL), KVC_OK, "%s", kvc_last_error());
        kvc_context_destroy(one);
        for (int ti = 0; ti < 4; ti++)
            for (int threads = 1; threads <= 2; threads++) {
                kvc_context_t *ctx = tier_context(tiers[ti], threads);
                if (!ctx) continue; /* this CPU lacks the tier */
                memset(out, 0xA5, n * 2);
                cr_assert_eq(kvc_codec_decode(ctx, buf[1], len[1], out, n * 2, NULL), KVC_OK, "%s", kvc_last_error());
                for (size_t i = 0; i < n; i++)
                    cr_assert_eq(out[i], ref[i], "%s, %s, %d threads: value %zu (row %zu) 0x%04x, the ac twin's 0x%04x",
                                 d ? "bf16" : "fp16", tiers[ti], threads, i, i / C, out[i], ref[i]);
                kvc_context_destroy(ctx);
            }
        kvc_codec_free(buf[0]);
        kvc_codec_free(buf[1]);
    }
    free(kv);
    free(ref);
    free(out);
}

/* A rANS container whose counts hold a symbol above its layer's 2M (META's bins of layer 0
 * lowered from 32 to 8, resealed: the encoder counted symbols up to 30 there) is corrupt at the
 * parse, for decode and inspect: the codec's rANS decode relies on it (a symbol without a count
 * has no frequency, so none above 2M can come out, and its dequantiser skips the check). An ac
 * container may have such counts (LMCache's objects, imported, code any symbol below the CDF's
 * width): it parses, and its decode finds the symbols above 2M. */
Test(rans_codec, counts_above_the_quantisers_range_are_corrupt)
{
    kvc_context_t *ctx = one_thread_context();
    const size_t nl = 2, T = 64, C = 16, n = 2 * nl * T * C;
    uint16_t *kv = malloc(n * 2), *out = malloc(n * 2);
    synth(kv, KVC_DTYPE_F16, n, 17);
    kvc_codec_params_t p = { .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD, .num_layers = nl, .num_tokens = T,
                             .num_heads = 2, .head_size = 8 };
    for (int coder = 0; coder < 2; coder++) {
        size_t len;
        uint8_t *buf = encode_with(ctx, p, coder ? KVC_CODER_RANS : KVC_CODER_AC, kv, &len);
        cr_assert_eq(kvc_codec_decode(ctx, buf, len, out, n * 2, NULL), KVC_OK, "%s", kvc_last_error());
        size_t off[5];
        sections(buf, off);
        cr_assert_eq(buf[off[0] + 16 + 32], 32, "layer 0 bins %u", buf[off[0] + 16 + 32]);
        buf[off[0] + 16 + 32] = 8;
        reseal(buf, off[0]);
        cr_assert_eq(kvc_codec_decode(ctx, buf, len, out, n * 2, NULL), KVC_ERR_CORRUPT, "coder %d", coder);
        cr_assert(strstr(kvc_last_error(), coder ? "above 2M = 6 of its 8 bins" : "outside the quantiser's range"), "%s",
                  kvc_last_error());
        kvc_codec_info_t info;
        cr_assert_eq(kvc_codec_inspect(buf, len, &info), coder ? KVC_ERR_CORRUPT : KVC_OK);
        kvc_codec_free(buf);
    }
    free(kv);
    free(out);
    kvc_context_destroy(ctx);
}

/* The arithmetic coder's CDF gives every symbol below the CDF's width some mass, so damaged ac
 * streams (resealed) can decode to a symbol above a layer's 2M (bins 32 and 8, the CDF 32 wide):
 * KVC_ERR_CORRUPT naming it, the output untouched. rANS streams damaged the same way never do
 * (their symbols all have counts; the codec's dequantiser does not look): every value of a
 * damaged rANS stream that decodes is within its row's scale, which a symbol above 2M (up to 9
 * times the scale with 8 bins) would not be. */
Test(rans_codec, symbols_outside_the_quantisers_range_are_corrupt)
{
    kvc_context_t *ctx = one_thread_context();
    const size_t nl = 1, T = 64, C = 16, n = 2 * nl * T * C;
    uint16_t *kv = malloc(n * 2), *out = malloc(n * 2);
    synth(kv, KVC_DTYPE_F16, n, 19);
    float amax = 0;
    for (size_t j = 0; j < n; j++) amax = fmaxf(amax, fabsf(kvc_f16_to_f32(kv[j])));
    const uint32_t bins[2] = { 32, 8 };
    kvc_codec_params_t p = { .field_mask = KVC_CODEC_PARAM_BINS, .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD,
                             .num_layers = nl, .num_tokens = T, .num_heads = 2, .head_size = 8, .bins = bins };
    for (int coder = 0; coder < 2; coder++) {
        size_t len;
        uint8_t *good = encode_with(ctx, p, coder ? KVC_CODER_RANS : KVC_CODER_AC, kv, &len), *buf = malloc(len);
        size_t off[5];
        sections(good, off);
        const size_t s0 = off[4] + 16, ns = rd32(good + off[4] + 8);
        size_t outside = 0;
        for (size_t i = 0; i < ns; i++) {
            memcpy(buf, good, len);
            buf[s0 + i] ^= 0x5A;
            reseal(buf, off[4]);
            memset(out, 0xA5, n * 2);
            const kvc_status_t st = kvc_codec_decode(ctx, buf, len, out, n * 2, NULL);
            cr_assert(st == KVC_OK || st == KVC_ERR_CORRUPT, "coder %d, byte %zu: status %d", coder, i, st);
            if (st == KVC_ERR_CORRUPT && strstr(kvc_last_error(), "outside the quantiser's range")) {
                outside++;
                for (size_t j = 0; j < n; j++) cr_assert_eq(out[j], 0xA5A5, "coder %d, byte %zu: output written", coder, i);
            }
            if (st == KVC_OK)
                for (size_t j = 0; j < n; j++)
                    cr_assert_leq(fabsf(kvc_f16_to_f32(out[j])), amax * 1.001f, "coder %d, byte %zu: value %zu = %g beyond %g", coder, i,
                                  j, (double)kvc_f16_to_f32(out[j]), (double)amax);
        }
        if (coder) cr_assert_eq(outside, 0u, "rANS: %zu symbols above 2M", outside);
        else cr_assert_gt(outside, 0u, "no damaged ac stream of %zu bytes decoded above 2M", ns);
        kvc_codec_free(good);
        free(buf);
    }
    free(kv);
    free(out);
    kvc_context_destroy(ctx);
}

/* Status and message of a decode (the message "" on success). */
static kvc_status_t decode_why(kvc_context_t *ctx, const uint8_t *buf, size_t len, void *out, size_t out_bytes, char *why, size_t n)
{
    const kvc_status_t st = kvc_codec_decode(ctx, buf, len, out, out_bytes, NULL);
    snprintf(why, n, "%s", st == KVC_OK ? "" : kvc_last_error());
    return st;
}

/* The decode parses the counts, LENGTHS and STREAMS' checksum in its decode's thread team (with
 * two threads STREAMS' checksum in pieces beside the counts), then the parse in order only when
 * that fails: every damage must give the status and message of the parse in order
 * (kvc_codec_inspect: one thread, section by section) at one, two and three threads, and leave
 * the output untouched. A chunk whose STREAMS section is large enough for the pieces (>= 32
 * KiB); a byte flipped every 11 bytes, every cut, and two damages at once where the order decides
 * (an edited LENGTHS section, resealed, with a flipped STREAMS byte: LENGTHS first; a LENGTHS edit
 * that moves the lengths' total, with a flipped STREAMS byte: STREAMS' checksum first). */
static kvc_status_t same_as_the_parse_in_order(kvc_context_t *const ctx[3], const uint8_t *buf, size_t len, uint16_t *out,
                                               size_t n, const char *what, size_t at)
{
    kvc_codec_info_t info;
    kvc_status_t want = kvc_codec_inspect(buf, len, &info);
    char w0[512], w[512];
    snprintf(w0, sizeof w0, "%s", want == KVC_OK ? "" : kvc_last_error());
    static int written = 1; /* out holds something else than 0xA5 bytes */
    for (int t = 0; t < 3; t++) {
        if (written) memset(out, 0xA5, n * 2);
        const kvc_status_t st = decode_why(ctx[t], buf, len, out, n * 2, w, sizeof w);
        written = st == KVC_OK;
        if (want == KVC_OK && t == 0) { /* the parse passes: the streams' damage is the decode's to find, the same on each */
            want = st;
            snprintf(w0, sizeof w0, "%s", w);
        }
        cr_assert_eq(st, want, "%s %zu, %d threads: %d, the parse in order (or one thread) %d", what, at, t + 1, st, want);
        cr_assert_str_eq(w, w0, "%s %zu, %d threads", what, at, t + 1);
        if (st == KVC_OK) continue;
        cr_assert(out[0] == 0xA5A5 && !memcmp(out, out + 1, (n - 1) * 2), "%s %zu, %d threads: output written", what, at, t + 1);
    }
    return want;
}

Test(rans_codec, damage_reads_as_the_parse_in_order_at_any_thread_count)
{
    const size_t nl = 4, T = 256, C = 128, n = 2 * nl * T * C;
    uint16_t *kv = malloc(n * 2), *out = malloc(n * 2);
    synth(kv, KVC_DTYPE_F16, n, 21);
    kvc_codec_params_t p = { .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD, .num_layers = nl, .num_tokens = T,
                             .num_heads = 8, .head_size = 16 };
    kvc_context_t *one = one_thread_context(), *two = cpu_threads_context(2), *three = cpu_threads_context(3);
    kvc_context_t *const all[3] = { one, two, three };
    size_t len;
    uint8_t *good = encode_with(one, p, KVC_CODER_RANS, kv, &len), *buf = malloc(len);
    size_t off[5];
    sections(good, off);
    cr_assert_geq(rd32(good + off[4] + 8), 32u << 10, "STREAMS of %u bytes: too small to take the two-thread path",
                  rd32(good + off[4] + 8));
    char w1[512], w2[512];
    size_t damaged = 0;
    for (size_t cut = 0; cut <= len; cut += cut < 4096 ? 1 : 97) /* every cut through the headers, then spread */
        same_as_the_parse_in_order(all, good, cut, out, n, "cut at", cut);
    for (size_t i = 0; i < len; i += 11) {
        memcpy(buf, good, len);
        buf[i] ^= 0x10;
        damaged += same_as_the_parse_in_order(all, buf, len, out, n, "byte flipped", i) != KVC_OK;
    }
    cr_assert_gt(damaged, len / 11 * 9 / 10, "only %zu of %zu flips were caught", damaged, len / 11);
    /* LENGTHS' first varint made overlong (0x80 then 0x00 is not allowed), resealed; a STREAMS byte flipped. */
    const size_t l0 = off[3] + 16, s0 = off[4] + 16;
    memcpy(buf, good, len);
    buf[l0 + 1] = 0;
    buf[l0] |= 0x80;
    reseal(buf, off[3]);
    buf[s0 + 100] ^= 1;
    cr_assert_eq(decode_why(one, buf, len, out, n * 2, w1, sizeof w1), KVC_ERR_CORRUPT);
    cr_assert_eq(decode_why(two, buf, len, out, n * 2, w2, sizeof w2), KVC_ERR_CORRUPT);
    cr_assert_str_eq(w1, w2);
    cr_assert(strstr(w1, "LENGTHS"), "%s", w1);
    same_as_the_parse_in_order(all, buf, len, out, n, "LENGTHS overlong", 0);
    /* LENGTHS' first length one less (a valid varint, the total off by one), resealed; a STREAMS
     * byte flipped: the checksum comes before the total. */
    memcpy(buf, good, len);
    cr_assert(buf[l0] & 0x7f, "first varint byte 0x%02x: its low bits are 0", buf[l0]);
    buf[l0] -= 1; /* the low 7 bits of the first length, one less */
    reseal(buf, off[3]);
    buf[s0 + 100] ^= 1;
    cr_assert_eq(decode_why(one, buf, len, out, n * 2, w1, sizeof w1), KVC_ERR_CORRUPT);
    cr_assert_eq(decode_why(two, buf, len, out, n * 2, w2, sizeof w2), KVC_ERR_CORRUPT);
    cr_assert_str_eq(w1, w2);
    cr_assert(strstr(w1, "checksum"), "%s", w1);
    same_as_the_parse_in_order(all, buf, len, out, n, "LENGTHS one less, STREAMS flipped", 0);
    /* and without the flip, the total */
    buf[s0 + 100] ^= 1;
    cr_assert_eq(decode_why(two, buf, len, out, n * 2, w2, sizeof w2), KVC_ERR_CORRUPT);
    cr_assert(strstr(w2, "add up to"), "%s", w2);
    same_as_the_parse_in_order(all, buf, len, out, n, "LENGTHS one less", 0);
    kvc_codec_free(good);
    free(buf);
    free(kv);
    free(out);
    kvc_context_destroy(one);
    kvc_context_destroy(two);
    kvc_context_destroy(three);
}

/* ---- format 1.4's CDF index ---- */

static size_t put_leb(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    do {
        out[n++] = (uint8_t)((v & 0x7f) | (v >> 7 ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* bits [b0, b1) of src to dst from bit 0 (MSB first), the last byte's rest zero; returns the bytes */
static size_t copy_bits(uint8_t *dst, const uint8_t *src, size_t b0, size_t b1)
{
    const size_t n = (b1 - b0 + 7) / 8;
    memset(dst, 0, n);
    for (size_t b = b0; b < b1; b++)
        if (src[b / 8] >> (7 - b % 8) & 1) dst[(b - b0) / 8] |= (uint8_t)(0x80 >> ((b - b0) % 8));
    return n;
}

/* The CDF payload with an index of `parts` parts of the counts coded in plain (an ac container's
 * section: the same counts, one bit stream), whose S + 1 stream boundaries are at[]; sizes[i] of
 * each part returned (the caller may edit the index). */
static size_t indexed_cdf(const uint8_t *plain, const size_t *at, size_t S, size_t parts, uint8_t *out)
{
    size_t n = put_leb(out, parts), sizes[1024];
    uint8_t *body = malloc(S * 64 + 16);
    size_t m = 0;
    for (size_t i = 0; i < parts; i++) m += sizes[i] = copy_bits(body + m, plain, at[S * i / parts], at[S * (i + 1) / parts]);
    for (size_t i = 0; i + 1 < parts; i++) n += put_leb(out + n, sizes[i]);
    memcpy(out + n, body, m);
    free(body);
    return n + m;
}

/* A rANS container's counts behind any index a reader must take: the writer's (parts of at
 * least 128 streams, at most 64), one part (the counts as an ac container codes them, behind a
 * 1), 3, 7, 64 and one a stream; on one and two threads, to the same values. Then an index that
 * is wrong (no parts, more parts than streams, an overlong or endless varint, a part past the
 * section, a part one byte short or long) or a part that is damaged: KVC_ERR_CORRUPT with the
 * same message on one and two threads, naming the part or the stream. */
Test(rans_codec, cdf_index_any_split_reads_the_same)
{
    const size_t nl = 4, T = 64, C = 128, S = 2 * nl * C, n = 2 * nl * T * C;
    uint16_t *kv = malloc(n * 2), *ref = malloc(n * 2), *out = malloc(n * 2);
    synth(kv, KVC_DTYPE_F16, n, 23);
    kvc_codec_params_t p = { .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD, .num_layers = nl, .num_tokens = T,
                             .num_heads = 8, .head_size = 16 };
    kvc_context_t *one = one_thread_context(), *two = cpu_threads_context(2);
    size_t len, alen, off[5], aoff[5];
    uint8_t *good = encode_with(one, p, KVC_CODER_RANS, kv, &len), *ac = encode_with(one, p, KVC_CODER_AC, kv, &alen);
    cr_assert_eq(good[10], 4, "format 1.4");
    cr_assert_eq(good[12] & 32, 32, "the CDF index flag");
    cr_assert_eq(kvc_codec_decode(one, good, len, ref, n * 2, NULL), KVC_OK, "%s", kvc_last_error());
    sections(good, off);
    sections(ac, aoff);
    cr_assert_eq(good[off[2] + 16], S / 128, "the writer's parts: one per 128 streams");
    /* the stream boundaries of the ac container's counts */
    const uint8_t *plain = ac + aoff[2] + 16;
    const size_t plain_n = rd32(ac + aoff[2] + 8);
    size_t *at = malloc((S + 1) * sizeof(size_t));
    kvc_bitreader_t r = { plain, plain_n, 0, 0 };
    uint32_t cnt[64];
    for (size_t st = 0; st < S; st++) {
        at[st] = r.pos;
        const unsigned lo = (unsigned)kvc_br_get(&r, 6), hi = (unsigned)kvc_br_get(&r, 6), k = (unsigned)kvc_br_get(&r, 5);
        kvc_rice_get_run(&r, k, hi - lo, cnt);
    }
    at[S] = r.pos;
    cr_assert(!r.overrun && (r.pos + 7) / 8 == plain_n);
    uint8_t *cdf = malloc(plain_n + S * 16 + 64);
    char w1[512], w2[512];
    const size_t splits[] = { 1, 3, 7, 8, 64, S };
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        const size_t cn = indexed_cdf(plain, at, S, splits[i], cdf);
        size_t blen;
        uint8_t *b = with_section(good, len, 2, cdf, cn, &blen);
        if (splits[i] == S / 128) cr_assert(blen == len && memcmp(b, good, len) == 0, "%zu parts: not the writer's bytes", splits[i]);
        for (int t = 0; t < 2; t++) {
            memset(out, 0xA5, n * 2);
            cr_assert_eq(decode_why(t ? two : one, b, blen, out, n * 2, w1, sizeof w1), KVC_OK, "%zu parts, %d threads: %s", splits[i], t + 1,
                         w1);
            cr_assert(memcmp(out, ref, n * 2) == 0, "%zu parts, %d threads: other values", splits[i], t + 1);
        }
        free(b);
    }
    /* Wrong indexes and damaged parts, from the index of 3 parts. */
    const size_t cn = indexed_cdf(plain, at, S, 3, cdf);
    const size_t size0 = (at[S / 3] - at[0] + 7) / 8;
    cr_assert((cdf[1] & 0x80) && !(cdf[2] & 0x80) && (cdf[3] & 0x80) && !(cdf[4] & 0x80), "the 3 parts' sizes: two bytes each");
    uint8_t *edit = malloc(cn + 64);
    for (int cs = 0; cs < 8; cs++) {
        size_t en = cn;
        memcpy(edit, cdf, cn);
        const char *want = NULL;
        char name[128];
        switch (cs) {
        case 0: edit[0] = 0; want = "has 0 parts"; break;                                     /* no parts */
        case 1: /* S + 1 parts (two varint bytes: the rest moves one byte on) */
            en = put_leb(edit, S + 1);
            memcpy(edit + en, cdf + 1, cn - 1);
            en += cn - 1;
            want = "has 1025 parts";
            break;
        case 2: /* 3 written in two bytes */
            edit[0] = 0x83;
            edit[1] = 0x00;
            memcpy(edit + 2, cdf + 1, cn - 1);
            en = cn + 1;
            want = "index is truncated or malformed";
            break;
        case 3: memset(edit + 1, 0x80, 12); want = "malformed at part 0"; break; /* a varint without end */
        case 4: /* part 0 as long as the section */
            en = put_leb(edit, 3);
            en += put_leb(edit + en, cn);
            en += put_leb(edit + en, 1);
            memcpy(edit + en, cdf + 1 + 2 * 2, cn - 5); /* sizes of 2 bytes each here */
            en += cn - 5;
            want = "runs past the section";
            break;
        case 5: /* part 0 one byte short: its last stream runs past it */
            cr_assert(size0 >= 128 && size0 < 16384, "part 0 of %zu bytes: two varint bytes expected", size0);
            edit[1] = (uint8_t)(((size0 - 1) & 0x7f) | 0x80);
            edit[2] = (uint8_t)((size0 - 1) >> 7);
            want = "CDF part 0 is truncated at stream";
            break;
        case 6: /* part 0 one byte long: a zero byte after its content */
            edit[1] = (uint8_t)(((size0 + 1) & 0x7f) | 0x80);
            edit[2] = (uint8_t)((size0 + 1) >> 7);
            memcpy(edit + 5 + size0 + 1, cdf + 5 + size0, cn - 5 - size0);
            edit[5 + size0] = 0;
            en = cn + 1;
            snprintf(name, sizeof name, "CDF part 0 has %zu bytes, its content %zu", size0 + 1, size0);
            want = name;
            break;
        case 7: /* the first byte of part 2: its first stream's lo above hi */
            edit[5 + size0 + (at[2 * S / 3] - at[S / 3] + 7) / 8] ^= 0x80;
            snprintf(name, sizeof name, "stream %zu has symbol range", 2 * S / 3);
            want = name;
            break;
        }
        size_t blen;
        uint8_t *b = with_section(good, len, 2, edit, en, &blen);
        const kvc_status_t a = decode_why(one, b, blen, out, n * 2, w1, sizeof w1), c2 = decode_why(two, b, blen, out, n * 2, w2, sizeof w2);
        cr_assert_eq(a, KVC_ERR_CORRUPT, "case %d: %s", cs, w1);
        cr_assert_eq(c2, KVC_ERR_CORRUPT, "case %d (two threads): %s", cs, w2);
        cr_assert_str_eq(w1, w2, "case %d", cs);
        cr_assert(strstr(w1, want), "case %d: \"%s\" does not say \"%s\"", cs, w1, want);
        free(b);
    }
    free(edit);
    free(cdf);
    free(at);
    kvc_codec_free(good);
    kvc_codec_free(ac);
    free(kv);
    free(ref);
    free(out);
    kvc_context_destroy(one);
    kvc_context_destroy(two);
}

/* 60 channels: two streams a layer, of 32 channels (four full groups) and 28 (three full groups
 * and a partial one), so the decoder's tasks span several (plane, layer)s
 * and its steps take four full groups (AVX-512's kernel), or three (a pair for the AVX2 kernel,
 * one for the portable decoder) beside a partial one; every tier and thread count encodes the
 * same bytes and decodes them to the same values. */
static void same_bytes_everywhere(uint32_t window)
{
    const size_t nl = 3, T = 100, C = 60, n = 2 * nl * T * C;
    uint16_t *kv = malloc(n * 2), *out = malloc(n * 2), *ref = malloc(n * 2);
    synth(kv, KVC_DTYPE_F16, n, 13);
    kvc_codec_params_t p = { .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD, .num_layers = nl, .num_tokens = T,
                             .num_heads = 4, .head_size = 15 };
    if (window) {
        p.field_mask |= KVC_CODEC_PARAM_WINDOW;
        p.window_tokens = window;
    }
    uint8_t *first = NULL;
    size_t first_len = 0;
    static const char *tiers[] = { "scalar", "avx2", "avx512", "neon" };
    for (int ti = 0; ti < 4; ti++)
        for (int threads = 1; threads <= 3; threads++) {
            kvc_context_t *ctx = tier_context(tiers[ti], threads);
            if (!ctx) continue; /* this CPU lacks the tier */
            size_t len;
            uint8_t *buf = encode_with(ctx, p, KVC_CODER_RANS, kv, &len);
            if (!first) {
                first = buf;
                first_len = len;
                cr_assert_eq(kvc_codec_decode(ctx, first, first_len, ref, n * 2, NULL), KVC_OK, "%s", kvc_last_error());
            } else {
                cr_assert_eq(len, first_len, "%s, %d threads", tiers[ti], threads);
                cr_assert(memcmp(buf, first, len) == 0, "%s, %d threads", tiers[ti], threads);
                kvc_codec_free(buf);
                memset(out, 0xA5, n * 2);
                cr_assert_eq(kvc_codec_decode(ctx, first, first_len, out, n * 2, NULL), KVC_OK, "%s", kvc_last_error());
                cr_assert(memcmp(out, ref, n * 2) == 0, "%s, %d threads: decoded values differ", tiers[ti], threads);
            }
            kvc_context_destroy(ctx);
        }
    kvc_codec_free(first);
    free(kv);
    free(out);
    free(ref);
}

Test(rans_codec, same_bytes_on_every_tier_and_thread_count)
{
    same_bytes_everywhere(0);
    /* Windows of 16 tokens: six full ones (12 streams each) coded in one backend call, spread over
     * the threads, then the last 4 tokens; decoded as well in one call. */
    same_bytes_everywhere(16);
}

/* ---- the public calls (cachegen.h kvc_rans_tables / kvc_rans_encode / kvc_rans_decode) ---- */

/* Skewed random symbols [L, T, C]: per channel a centre and spread, like KV data. */
static uint8_t *api_symbols(size_t L, size_t T, size_t C, unsigned B, uint32_t seed)
{
    rng_state = seed;
    uint8_t *s = malloc(L * T * C + 1);
    for (size_t l = 0; l < L; l++)
        for (size_t c = 0; c < C; c++) {
            const unsigned centre = rnd() % B, spread = 1 + rnd() % B;
            for (size_t t = 0; t < T; t++) {
                const int v = (int)centre + (int)(rnd() % spread) - (int)(spread / 2);
                s[(l * T + t) * C + c] = (uint8_t)(v < 0 ? 0 : v >= (int)B ? (int)B - 1 : v);
            }
        }
    return s;
}

/* Tables, streams and symbols of one shape through the public calls, each against the oracles of
 * this file: the tables against oracle_cum of the counts, every stream byte for byte against
 * oracle_encode, the packed streams decoded back. */
static void api_case(kvc_context_t *ctx, size_t L, size_t T, size_t C, unsigned B, uint32_t seed)
{
    const size_t G = (C + 31) / 32, nt = L * C * (B + 1), cap = kvc_rans_encode_bound(T);
    uint8_t *sym = api_symbols(L, T ? T : 1, C, B, seed);
    uint16_t *cum = malloc(nt * 2), *ref = malloc(nt * 2);
    kvc_rans_tables_params_t tp = { .symbols = sym, .cum = cum, .layers = L, .tokens = T ? T : 1, .channels = C, .num_bins = B };
    cr_assert_eq(kvc_rans_tables(ctx, &tp), KVC_OK, "%s", kvc_last_error());
    for (size_t l = 0; l < L; l++)
        for (size_t c = 0; c < C; c++) {
            uint32_t counts[64] = { 0 };
            for (size_t t = 0; t < (T ? T : 1); t++) counts[sym[(l * (T ? T : 1) + t) * C + c]]++;
            oracle_cum(counts, B, T ? T : 1, ref + (l * C + c) * (B + 1));
        }
    cr_assert(memcmp(cum, ref, nt * 2) == 0, "L %zu T %zu C %zu B %u: tables differ from the oracle's", L, T, C, B);

    uint8_t *streams = malloc(L * G * cap), *one = malloc(cap);
    int32_t *len = malloc(L * G * 4);
    kvc_rans_encode_params_t ep = { .cum = cum, .symbols = sym, .streams = streams, .lengths = len, .layers = L, .tokens = T,
                                    .channels = C, .capacity = cap, .num_bins = B };
    cr_assert_eq(kvc_rans_encode(ctx, &ep), KVC_OK, "%s", kvc_last_error());
    int64_t *ends = malloc(L * G * 8);
    size_t nbytes = 0;
    for (size_t k = 0; k < L * G; k++) {
        const size_t l = k / G, c0 = k % G * 32;
        const unsigned g = C - c0 < 32 ? (unsigned)(C - c0) : 32;
        const size_t rlen = oracle_encode(sym + l * T * C + c0, C, T, g, cum + (l * C + c0) * (B + 1), B, one);
        cr_assert_eq((size_t)len[k], rlen, "L %zu T %zu C %zu B %u stream %zu: %d bytes, the oracle %zu", L, T, C, B, k, len[k],
                     rlen);
        cr_assert(memcmp(streams + k * cap, one, rlen) == 0, "stream %zu differs from the oracle's", k);
        memmove(streams + nbytes, streams + k * cap, rlen); /* packed in place */
        ends[k] = (int64_t)(nbytes += rlen);
    }
    uint8_t *packed = malloc(nbytes + 1), *out = malloc(L * T * C + 1);
    memcpy(packed, streams, nbytes); /* exactly nbytes: ASan sees a read past them */
    memset(out, 0xEE, L * T * C + 1);
    kvc_rans_decode_params_t dp = { .cum = cum, .bytes = packed, .nbytes = nbytes, .ends = ends, .symbols = out, .layers = L,
                                    .tokens = T, .channels = C, .num_bins = B };
    cr_assert_eq(kvc_rans_decode(ctx, &dp), KVC_OK, "L %zu T %zu C %zu B %u: %s", L, T, C, B, kvc_last_error());
    cr_assert(memcmp(out, sym, L * T * C) == 0, "L %zu T %zu C %zu B %u: decoded symbols differ", L, T, C, B);
    cr_assert_eq(out[L * T * C], 0xEE, "nothing written past the symbols");
    free(sym);
    free(cum);
    free(ref);
    free(streams);
    free(one);
    free(len);
    free(ends);
    free(packed);
    free(out);
}

static const struct {
    size_t L, T, C;
    unsigned B;
} api_shapes[] = {
    { 3, 300, 37, 32 }, { 2, 256, 130, 64 }, { 1, 100, 5, 1 },  { 2, 1000, 9, 16 }, { 1, 0, 4, 8 },
    { 2, 17, 129, 2 },  { 2, 64, 32, 32 },   { 1, 3000, 16, 40 }, { 1, 1, 1, 3 },    { 4, 80, 64, 32 },
};

Test(rans_api, every_tier_matches_the_oracle)
{
    const char *tiers[] = { "scalar", "avx2", "avx512", "neon" };
    for (size_t ti = 0; ti < 4; ti++)
        for (int threads = 1; threads <= 3; threads += 2) {
            kvc_context_t *ctx = tier_context(tiers[ti], threads);
            if (!ctx) continue; /* checked on the tiers this machine has; the codec tests name the skips */
            for (size_t i = 0; i < sizeof api_shapes / sizeof api_shapes[0]; i++)
                api_case(ctx, api_shapes[i].L, api_shapes[i].T, api_shapes[i].C, api_shapes[i].B, 77 + (uint32_t)i);
            kvc_context_destroy(ctx);
        }
}

/* One shape's good tensors for the error tests: L 8, T 50, C 32 (a stream of four full groups a
 * layer; the decoder's tasks take four layers' streams, a full group of each at a time through
 * the AVX-512 kernel), 16 bins. */
typedef struct {
    size_t L, T, C, G, cap, nbytes;
    unsigned B;
    uint8_t *sym, *streams, *packed, *out;
    uint16_t *cum;
    int32_t *len;
    int64_t *ends;
} api_fix_t;

static api_fix_t api_fixture(kvc_context_t *ctx)
{
    api_fix_t f = { .L = 8, .T = 50, .C = 32, .G = 1, .B = 16 };
    f.cap = kvc_rans_encode_bound(f.T);
    f.sym = api_symbols(f.L, f.T, f.C, f.B, 5);
    f.cum = malloc(f.L * f.C * (f.B + 1) * 2);
    kvc_rans_tables_params_t tp = { .symbols = f.sym, .cum = f.cum, .layers = f.L, .tokens = f.T, .channels = f.C, .num_bins = f.B };
    cr_assert_eq(kvc_rans_tables(ctx, &tp), KVC_OK, "%s", kvc_last_error());
    f.streams = malloc(f.L * f.G * f.cap);
    f.len = malloc(f.L * f.G * 4);
    kvc_rans_encode_params_t ep = { .cum = f.cum, .symbols = f.sym, .streams = f.streams, .lengths = f.len, .layers = f.L,
                                    .tokens = f.T, .channels = f.C, .capacity = f.cap, .num_bins = f.B };
    cr_assert_eq(kvc_rans_encode(ctx, &ep), KVC_OK, "%s", kvc_last_error());
    f.ends = malloc(f.L * f.G * 8);
    f.packed = malloc(f.L * f.G * f.cap);
    for (size_t k = 0; k < f.L * f.G; k++) {
        memcpy(f.packed + f.nbytes, f.streams + k * f.cap, (size_t)f.len[k]);
        f.ends[k] = (int64_t)(f.nbytes += (size_t)f.len[k]);
    }
    f.out = malloc(f.L * f.T * f.C);
    return f;
}

static void api_fixture_free(api_fix_t *f)
{
    free(f->sym);
    free(f->streams);
    free(f->packed);
    free(f->out);
    free(f->cum);
    free(f->len);
    free(f->ends);
}

/* status st and a message holding every one of the NULL-ended strings */
static void expect(kvc_status_t got, kvc_status_t st, ...)
{
    cr_assert_eq(got, st, "status %s, expected %s (%s)", kvc_status_name(got), kvc_status_name(st), kvc_last_error());
    va_list ap;
    va_start(ap, st);
    for (const char *w; (w = va_arg(ap, const char *));)
        cr_assert(strstr(kvc_last_error(), w), "the message names \"%s\": %s", w, kvc_last_error());
    va_end(ap);
}

Test(rans_api, arguments_are_checked_before_anything_runs)
{
    kvc_context_t *ctx = one_thread_context();
    api_fix_t f = api_fixture(ctx);
    uint16_t cum[9];
    kvc_rans_tables_params_t tp = { .symbols = f.sym, .cum = cum, .layers = 1, .tokens = 1, .channels = 1, .num_bins = 8 };
    kvc_rans_tables_params_t t2 = tp;
    t2.field_mask = 4;
    expect(kvc_rans_tables(ctx, &t2), KVC_ERR_INVALID_ARG, "field_mask", NULL);
    expect(kvc_rans_tables(NULL, &tp), KVC_ERR_INVALID_ARG, "NULL", NULL);
    expect(kvc_rans_tables(ctx, NULL), KVC_ERR_INVALID_ARG, "NULL", NULL);
    t2 = tp, t2.tokens = 0;
    expect(kvc_rans_tables(ctx, &t2), KVC_ERR_INVALID_ARG, "tokens must be at least 1", NULL);
    t2 = tp, t2.num_bins = 65;
    expect(kvc_rans_tables(ctx, &t2), KVC_ERR_INVALID_ARG, "num_bins 65", NULL);
    t2 = tp, t2.num_bins = 0;
    expect(kvc_rans_tables(ctx, &t2), KVC_ERR_INVALID_ARG, "num_bins 0", NULL);
    t2 = tp, t2.layers = 0;
    expect(kvc_rans_tables(ctx, &t2), KVC_ERR_INVALID_ARG, "layers (0)", NULL);
    t2 = tp, t2.tokens = KVC_RANS_MAX_TOKENS + 1u;
    expect(kvc_rans_tables(ctx, &t2), KVC_ERR_INVALID_ARG, "KVC_RANS_MAX_TOKENS", NULL);
    t2 = tp, t2.cum = NULL;
    expect(kvc_rans_tables(ctx, &t2), KVC_ERR_INVALID_ARG, "must not be NULL", NULL);
    cr_assert_eq(kvc_rans_encode_bound(KVC_RANS_MAX_TOKENS + 1u), 0);
    cr_assert_eq(kvc_rans_encode_bound(10), 32 + 640);

    kvc_rans_encode_params_t ep = { .cum = f.cum, .symbols = f.sym, .streams = f.streams, .lengths = f.len, .layers = f.L,
                                    .tokens = f.T, .channels = f.C, .capacity = f.cap, .num_bins = f.B };
    kvc_rans_encode_params_t e2 = ep;
    e2.capacity = f.cap - 1;
    expect(kvc_rans_encode(ctx, &e2), KVC_ERR_INVALID_ARG, "capacity 3231", "kvc_rans_encode_bound(50 tokens) = 3232", NULL);
    e2 = ep, e2.capacity = (size_t)INT32_MAX + 1;
    expect(kvc_rans_encode(ctx, &e2), KVC_ERR_INVALID_ARG, "INT32_MAX", NULL);
    e2 = ep, e2.lengths = NULL;
    expect(kvc_rans_encode(ctx, &e2), KVC_ERR_INVALID_ARG, "must not be NULL", NULL);
    e2 = ep, e2.field_mask = 1;
    expect(kvc_rans_encode(ctx, &e2), KVC_ERR_INVALID_ARG, "field_mask", NULL);
    kvc_rans_decode_params_t dp = { .cum = f.cum, .bytes = f.packed, .nbytes = f.nbytes, .ends = f.ends, .symbols = f.out,
                                    .layers = f.L, .tokens = f.T, .channels = f.C, .num_bins = f.B };
    kvc_rans_decode_params_t d2 = dp;
    d2.bytes = NULL;
    expect(kvc_rans_decode(ctx, &d2), KVC_ERR_INVALID_ARG, "must not be NULL", NULL);
    d2 = dp, d2.nbytes = (size_t)INT64_MAX + 1;
    expect(kvc_rans_decode(ctx, &d2), KVC_ERR_INVALID_ARG, "INT64_MAX", NULL);
    d2 = dp, d2.tokens = KVC_RANS_MAX_TOKENS + 1u;
    expect(kvc_rans_decode(ctx, &d2), KVC_ERR_INVALID_ARG, "KVC_RANS_MAX_TOKENS", NULL);
    /* no tokens: symbols may be NULL; every stream is its states (2^16 each) */
    e2 = ep, e2.tokens = 0, e2.symbols = NULL, e2.capacity = kvc_rans_encode_bound(0);
    cr_assert_eq(kvc_rans_encode(ctx, &e2), KVC_OK, "%s", kvc_last_error());
    int64_t ends0[8];
    for (size_t k = 0; k < 8; k++) {
        cr_assert_eq(f.len[k], 32);
        cr_assert(memcmp(f.streams + k * 32, "\0\0\1\0\0\0\1\0", 8) == 0, "states of 2^16");
        memmove(f.packed + 32 * k, f.streams + k * 32, 32);
        ends0[k] = 32 * (int64_t)(k + 1);
    }
    d2 = dp, d2.tokens = 0, d2.symbols = NULL, d2.ends = ends0, d2.nbytes = 256;
    cr_assert_eq(kvc_rans_decode(ctx, &d2), KVC_OK, "%s", kvc_last_error());
    ends0[3] += 2, ends0[4] += 2; /* stream 3 has a word, stream 4 starts 2 bytes late */
    expect(kvc_rans_decode(ctx, &d2), KVC_ERR_CORRUPT, "rANS stream 3 ", NULL);
    api_fixture_free(&f);
    kvc_context_destroy(ctx);
}

/* The data checks, on every tier: exact statuses, the first bad index named, nothing written. */
Test(rans_api, bad_data_gets_exact_statuses_on_every_tier)
{
    const char *tiers[] = { "scalar", "avx2", "avx512", "neon" };
    for (size_t ti = 0; ti < 4; ti++) {
        kvc_context_t *ctx = tier_context(tiers[ti], 2);
        if (!ctx) continue;
        api_fix_t f = api_fixture(ctx);
        const size_t nt = f.L * f.C * (f.B + 1);
        uint16_t *cum2 = malloc(nt * 2);
        /* tables: a symbol >= num_bins, the first one named, cum untouched */
        const uint8_t keep1234 = f.sym[1234], keep2000 = f.sym[2000];
        f.sym[1234] = 16;
        f.sym[2000] = 200;
        memset(cum2, 0x5A, nt * 2);
        kvc_rans_tables_params_t tp = { .symbols = f.sym, .cum = cum2, .layers = f.L, .tokens = f.T, .channels = f.C, .num_bins = f.B };
        expect(kvc_rans_tables(ctx, &tp), KVC_ERR_OUT_OF_RANGE, "symbols[1234] (layer 0, token 38, channel 18) = 16 is not below num_bins 16",
               NULL);
        for (size_t i = 0; i < nt; i++) cr_assert_eq(cum2[i], 0x5A5A, "cum untouched");
        /* encode: the same symbol, nothing written */
        memset(f.len, 0x77, f.L * f.G * 4);
        kvc_rans_encode_params_t ep = { .cum = f.cum, .symbols = f.sym, .streams = f.streams, .lengths = f.len, .layers = f.L,
                                        .tokens = f.T, .channels = f.C, .capacity = f.cap, .num_bins = f.B };
        expect(kvc_rans_encode(ctx, &ep), KVC_ERR_OUT_OF_RANGE, "rans_encode: symbols[1234]", "not below num_bins 16", NULL);
        f.sym[1234] = keep1234; /* a symbol >= 64 alone: each tier's kernel flags it (its tables have 64 entries) */
        expect(kvc_rans_encode(ctx, &ep), KVC_ERR_OUT_OF_RANGE, "symbols[2000] (layer 1, token 12, channel 16) = 200 is not below", NULL);
        /* a symbol in range without frequency in its channel's table */
        f.sym[2000] = 0;
        unsigned zero = 0;
        const uint16_t *c18 = f.cum + 18 * (f.B + 1);
        while (c18[zero + 1] > c18[zero]) zero++;
        cr_assert_lt(zero, f.B, "channel 18 of layer 0 has a symbol without frequency");
        f.sym[1234] = (uint8_t)zero;
        char want[128];
        snprintf(want, sizeof want, "symbols[1234] (layer 0, token 38, channel 18) = %u has frequency 0", zero);
        expect(kvc_rans_encode(ctx, &ep), KVC_ERR_OUT_OF_RANGE, want, NULL);
        for (size_t k = 0; k < f.L * f.G; k++) cr_assert_eq((uint32_t)f.len[k], 0x77777777u, "lengths untouched");
        f.sym[1234] = keep1234;
        f.sym[2000] = keep2000;
        /* tables that are not: INVALID_ARG to the encoder, CORRUPT to the decoder, naming the first */
        const struct {
            size_t at;
            uint16_t v;
            const char *why;
        } bad[] = { { 40 * 17 + 0, 1, "layer 1, channel 8 is not a frequency table: cum[0] = 1, not 0" },
                    { 33 * 17 + 16, 4095, "layer 1, channel 1 is not a frequency table: cum[16] = 4095, not 4096" },
                    { 5 * 17 + 16, 4097, "layer 0, channel 5 is not a frequency table: cum[16] = 4097, not 4096" } };
        for (size_t i = 0; i < 3; i++) {
            memcpy(cum2, f.cum, nt * 2);
            cum2[bad[i].at] = bad[i].v;
            ep.cum = cum2;
            expect(kvc_rans_encode(ctx, &ep), KVC_ERR_INVALID_ARG, bad[i].why, NULL);
            kvc_rans_decode_params_t dp = { .cum = cum2, .bytes = f.packed, .nbytes = f.nbytes, .ends = f.ends, .symbols = f.out,
                                            .layers = f.L, .tokens = f.T, .channels = f.C, .num_bins = f.B };
            memset(f.out, 0x33, f.L * f.T * f.C);
            expect(kvc_rans_decode(ctx, &dp), KVC_ERR_CORRUPT, bad[i].why, NULL);
            for (size_t j = 0; j < f.L * f.T * f.C; j++) cr_assert_eq(f.out[j], 0x33, "symbols untouched");
        }
        memcpy(cum2, f.cum, nt * 2); /* a decrease inside: cum[5] > cum[6] */
        cum2[7 * 17 + 5] = (uint16_t)(cum2[7 * 17 + 6] + 1);
        ep.cum = cum2;
        snprintf(want, sizeof want, "layer 0, channel 7 is not a frequency table: cum[5] = %u above cum[6] = %u", cum2[7 * 17 + 5],
                 cum2[7 * 17 + 6]);
        expect(kvc_rans_encode(ctx, &ep), KVC_ERR_INVALID_ARG, want, NULL);
        /* end offsets */
        kvc_rans_decode_params_t dp = { .cum = f.cum, .bytes = f.packed, .nbytes = f.nbytes, .ends = f.ends, .symbols = f.out,
                                        .layers = f.L, .tokens = f.T, .channels = f.C, .num_bins = f.B };
        int64_t *e2 = malloc(f.L * f.G * 8);
        memcpy(e2, f.ends, f.L * f.G * 8);
        dp.ends = e2;
        e2[3] = e2[2] - 1;
        expect(kvc_rans_decode(ctx, &dp), KVC_ERR_CORRUPT, "ends[3] (layer 3, stream 0)", "decreases", NULL);
        memcpy(e2, f.ends, f.L * f.G * 8);
        e2[0] = -2;
        expect(kvc_rans_decode(ctx, &dp), KVC_ERR_CORRUPT, "ends[0] (layer 0, stream 0) = -2 decreases", NULL);
        memcpy(e2, f.ends, f.L * f.G * 8);
        dp.nbytes = f.nbytes - 1;
        expect(kvc_rans_decode(ctx, &dp), KVC_ERR_CORRUPT, "ends[7] (layer 7, stream 0)", "past the end", NULL);
        dp.nbytes = f.nbytes;
        /* damaged streams: the first one named, wherever the tier's kernel decodes it */
        const size_t victims[] = { 6, 1, 7, 4 };
        for (size_t v = 0; v < 4; v++) {
            const size_t k = victims[v], start = k ? (size_t)f.ends[k - 1] : 0;
            uint8_t *p2 = malloc(f.nbytes);
            memcpy(p2, f.packed, f.nbytes);
            p2[start + 3] ^= 0x80; /* state 0's top bit */
            dp.bytes = p2;
            snprintf(want, sizeof want, "rANS stream %zu (layer %zu, channels 0-31) is corrupt", k, k);
            expect(kvc_rans_decode(ctx, &dp), KVC_ERR_CORRUPT, want, NULL);
            memcpy(e2, f.ends, f.L * f.G * 8); /* truncated by 2 bytes: its words run out */
            for (size_t j = k; j < f.L * f.G; j++) e2[j] -= j == k ? 2 : 0;
            dp.bytes = f.packed;
            if (k + 1 < f.L * f.G) {
                /* the next stream starts 2 bytes early: it has 2 bytes too many (overlong) */
                expect(kvc_rans_decode(ctx, &dp), KVC_ERR_CORRUPT, want, NULL);
            }
            memcpy(e2, f.ends, f.L * f.G * 8);
            free(p2);
        }
        dp.bytes = f.packed;
        cr_assert_eq(kvc_rans_decode(ctx, &dp), KVC_OK, "%s", kvc_last_error());
        cr_assert(memcmp(f.out, f.sym, f.L * f.T * f.C) == 0);
        free(e2);
        free(cum2);
        api_fixture_free(&f);
        kvc_context_destroy(ctx);
    }
}

/* Random bytes, end offsets and tables (valid or not) into kvc_rans_decode, in exact-size buffers
 * (the ASan build sees any access outside them): only KVC_OK or KVC_ERR_CORRUPT, and after OK the
 * symbols are below num_bins. */
Test(rans_api, random_input_stays_inside_its_buffers)
{
    kvc_context_t *ctx = one_thread_context();
    rng_state = 99;
    int ok = 0, corrupt = 0;
    for (int it = 0; it < 3000; it++) {
        const size_t L = 1 + rnd() % 2, C = 1 + rnd() % 70, T = rnd() % 24, G = (C + 31) / 32;
        const unsigned B = 1 + rnd() % 64;
        const size_t nbytes = rnd() % (it % 3 ? 200 : 4000);
        uint8_t *bytes = malloc(nbytes + !nbytes), *out = malloc(L * T * C + (L * T * C == 0));
        int64_t *ends = malloc(L * G * 8);
        uint16_t *cum = malloc(L * C * (B + 1) * 2);
        for (size_t i = 0; i < nbytes; i++) bytes[i] = (uint8_t)rnd();
        for (size_t k = 0; k < L * C; k++) { /* a random table: valid 7 times in 8 */
            uint16_t *c = cum + k * (B + 1);
            c[0] = 0;
            for (unsigned s = 1; s < B; s++) c[s] = (uint16_t)(c[s - 1] + rnd() % (2 * 4096 / B + 1));
            for (unsigned s = 1; s < B; s++) c[s] = c[s] > 4096 ? 4096 : c[s];
            c[B] = 4096;
            if (rnd() % 8 == 0) c[rnd() % (B + 1)] = (uint16_t)rnd();
        }
        int64_t e = 0;
        for (size_t k = 0; k < L * G; k++) {
            e += rnd() % 3 ? (int64_t)(32 + 2 * (rnd() % 30)) : (int64_t)(rnd() % 64) - 8;
            ends[k] = e;
        }
        if (rnd() % 2) ends[L * G - 1] = (int64_t)nbytes;
        kvc_rans_decode_params_t dp = { .cum = cum, .bytes = nbytes ? bytes : NULL, .nbytes = nbytes, .ends = ends, .symbols = out,
                                        .layers = L, .tokens = T, .channels = C, .num_bins = B };
        const kvc_status_t st = kvc_rans_decode(ctx, &dp);
        cr_assert(st == KVC_OK || st == KVC_ERR_CORRUPT, "status %s: %s", kvc_status_name(st), kvc_last_error());
        if (st == KVC_OK) {
            ok++;
            for (size_t i = 0; i < L * T * C; i++) cr_assert_lt(out[i], B);
        } else corrupt++;
        free(bytes);
        free(out);
        free(ends);
        free(cum);
    }
    cr_assert_gt(corrupt, 1000, "mostly damaged input");
    kvc_context_destroy(ctx);
    (void)ok;
}
