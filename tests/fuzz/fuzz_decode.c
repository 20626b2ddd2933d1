/* SPDX-License-Identifier: BSD-3-Clause */
/* CacheGen decoders (kvc_cg_decode, kvc_cg_decode_packed) on arbitrary CDFs, lengths, prefix sums
 * and bytes, every array in a buffer of exactly its documented size. Invariants: no access outside
 * the buffers; the scalar, avx2 and best-ISA kernels agree (status and symbols; the avx2 and avx512
 * tiers run the lane-parallel coder, capped to a lower tier where the CPU lacks one); decoded symbols are
 * below num_bins; in round-trip mode, encode -> decode (both forms) gives the symbols back.
 *
 * Input: flags, layers, channels, tokens (u16), num_bins, then the arrays the flags ask for:
 *   flags bit 0: packed (prefsum) rather than per-stream (capacity, lengths) form
 *   flags bit 1: round trip: the remaining bytes are symbols (mod num_bins), CDF from kvc_cg_cdf
 *   flags bit 2: CDF from per-bin counts (one byte each: always strictly increasing) instead of raw u16
 *   flags bit 3: lengths / prefix sums derived from one u16 per stream instead of raw int32 / int64
 * and the rest of the input is the stream bytes. */
#include "fuzz.h"

/* The tiers compared: scalar (the reference), avx2, best. */
static kvc_context_t *ctx[3];

/* docs/LMCACHE.md normalisation (as kvc_cg_cdf): strictly increasing whatever the counts. */
static void cdf_from_counts(const uint8_t *cnt, unsigned bins, uint16_t *cdf)
{
    uint64_t total = 0, cum = 0;
    for (unsigned i = 0; i < bins; i++) total += cnt[i];
    for (unsigned i = 0; i <= bins; i++) {
        cdf[i] = (uint16_t)(total ? ((65535u - bins) * cum) / total + i : i);
        if (i < bins) cum += cnt[i];
    }
}

typedef struct {
    size_t L, T, C;
    unsigned B;
} dims_t;

static kvc_status_t decode_streams(kvc_context_t *ctx, const dims_t *d, const uint16_t *cdf, const uint8_t *streams,
                                   const int32_t *lengths, size_t capacity, uint8_t *out)
{
    const kvc_cg_decode_params_t a = { .cdf = cdf, .streams = streams, .lengths = lengths, .symbols = out, .layers = d->L,
                                  .tokens = d->T, .channels = d->C, .capacity = capacity, .num_bins = d->B };
    return kvc_cg_decode(ctx, &a);
}

static kvc_status_t decode_packed(kvc_context_t *ctx, const dims_t *d, const uint16_t *cdf, const uint8_t *bytes,
                                  size_t nbytes, const int64_t *prefsum, uint8_t *out)
{
    const kvc_cg_decode_packed_params_t a = { .cdf = cdf, .bytes = bytes, .nbytes = nbytes, .prefsum = prefsum,
                                         .symbols = out, .layers = d->L, .tokens = d->T, .channels = d->C,
                                         .num_bins = d->B };
    return kvc_cg_decode_packed(ctx, &a);
}

static void check_symbols(const dims_t *d, const uint8_t *sym, size_t n)
{
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(sym[i] < d->B, "decoded symbol %u at %zu with num_bins %u", sym[i], i, d->B);
}

/* Encode symbols on every context (the same lengths and bytes), then decode them back in both
 * forms on every context. */
static void round_trip(const dims_t *d, fuzz_input_t *in)
{
    const size_t n = d->L * d->T * d->C, S = d->L * d->C;
    uint8_t *sym = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) sym[i] = in->n ? (uint8_t)(in->p[i % in->n] % d->B) : 0;
    uint16_t *cdf = malloc(S * (d->B + 1) * sizeof(uint16_t));
    const kvc_cg_cdf_params_t ca = { .symbols = sym, .cdf = cdf, .layers = d->L, .tokens = d->T, .channels = d->C,
                                .num_bins = d->B };
    FUZZ_CHECK(kvc_cg_cdf(ctx[2], &ca) == KVC_OK, "kvc_cg_cdf failed");
    const size_t cap = kvc_cg_encode_bound(d->T);
    uint8_t *streams = malloc(S * cap);
    memset(streams, 0xA5, S * cap); /* a decoder reading past a stream's length would see these, not zeros */
    int32_t *lengths = malloc(S * sizeof(int32_t));
    size_t needed = 0;
    const kvc_cg_encode_params_t ea = { .cdf = cdf, .symbols = sym, .streams = streams, .lengths = lengths,
                                   .layers = d->L, .tokens = d->T, .channels = d->C, .capacity = cap,
                                   .num_bins = d->B, .needed = &needed };
    FUZZ_CHECK(kvc_cg_encode(ctx[0], &ea) == KVC_OK, "encode within kvc_cg_encode_bound failed");
    FUZZ_CHECK(needed <= cap, "needed %zu above the bound %zu", needed, cap);
    uint8_t *again = malloc(S * cap);
    int32_t *again_len = malloc(S * sizeof(int32_t));
    for (int k = 1; k < 3; k++) {
        memset(again, 0xA5, S * cap);
        kvc_cg_encode_params_t ek = ea;
        ek.streams = again;
        ek.lengths = again_len;
        FUZZ_CHECK(kvc_cg_encode(ctx[k], &ek) == KVC_OK, "encode on %s failed", kvc_context_isa(ctx[k]));
        FUZZ_CHECK(!memcmp(again_len, lengths, S * sizeof(int32_t)) && !memcmp(again, streams, S * cap),
                   "the %s encoder's streams differ from the scalar one's", kvc_context_isa(ctx[k]));
    }
    free(again);
    free(again_len);

    int64_t *prefsum = malloc(S * sizeof(int64_t));
    size_t total = 0;
    for (size_t s = 0; s < S; s++) prefsum[s] = (int64_t)(total += (size_t)lengths[s]);
    uint8_t *packed = malloc(total ? total : 1);
    for (size_t s = 0, off = 0; s < S; off += (size_t)lengths[s], s++) memcpy(packed + off, streams + s * cap, (size_t)lengths[s]);

    uint8_t *out = malloc(n ? n : 1);
    for (int c = 0; c < 3; c++) {
        memset(out, 0xEE, n);
        FUZZ_CHECK(decode_streams(ctx[c], d, cdf, streams, lengths, cap, out) == KVC_OK, "decode failed");
        FUZZ_CHECK(!memcmp(out, sym, n), "per-stream round trip differs (context %d)", c);
        memset(out, 0xEE, n);
        FUZZ_CHECK(decode_packed(ctx[c], d, cdf, packed, total, prefsum, out) == KVC_OK, "decode_packed failed");
        FUZZ_CHECK(!memcmp(out, sym, n), "packed round trip differs (context %d)", c);
    }
    free(sym);
    free(cdf);
    free(streams);
    free(lengths);
    free(prefsum);
    free(packed);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ctx[0]) {
        ctx[0] = fuzz_cpu_context("scalar");
        ctx[1] = fuzz_cpu_context("avx2");
        ctx[2] = fuzz_cpu_context("best");
    }
    fuzz_input_t in = { data, size };
    const unsigned flags = fuzz_u8(&in);
    dims_t d;
    d.L = 1 + fuzz_u8(&in) % 3;
    d.C = 1 + fuzz_u8(&in) % 70; /* past one 64-channel work block */
    d.T = (size_t)fuzz_uint(&in, 2) % 600; /* past two 256-token windows */
    const unsigned raw_bins = fuzz_u8(&in);
    const size_t S = d.L * d.C, n = d.L * d.T * d.C;

    if (flags & 2) {
        d.B = 1 + raw_bins % 64;
        round_trip(&d, &in);
        return 0;
    }
    /* Out-of-range num_bins values must be rejected before any array is read. */
    d.B = raw_bins <= 64 ? raw_bins : raw_bins % 2 ? raw_bins : 1 + raw_bins % 64;
    const unsigned width = (d.B >= 1 && d.B <= 64 ? d.B : 1) + 1;
    uint16_t *cdf = malloc(S * width * sizeof(uint16_t));
    if (flags & 4) {
        uint8_t cnt[64];
        for (size_t s = 0; s < S; s++) {
            for (unsigned b = 0; b + 1 < width; b++) cnt[b] = fuzz_u8(&in);
            cdf_from_counts(cnt, width - 1, cdf + s * width);
        }
    } else {
        for (size_t i = 0; i < S * width; i++) cdf[i] = (uint16_t)fuzz_uint(&in, 2);
    }

    uint8_t *out[3];
    kvc_status_t st[3];
    for (int k = 0; k < 3; k++) {
        out[k] = malloc(n ? n : 1);
        memset(out[k], 0xEE, n);
    }
    if (flags & 1) {
        int64_t *prefsum = malloc(S * sizeof(int64_t));
        int64_t sum = 0;
        for (size_t s = 0; s < S; s++)
            prefsum[s] = (flags & 8) ? (sum += (int64_t)fuzz_uint(&in, 2) % 64) : (int64_t)fuzz_uint(&in, 8);
        size_t nbytes = 0;
        uint8_t *bytes = fuzz_take(&in, in.n, &nbytes);
        for (int k = 0; k < 3; k++) st[k] = decode_packed(ctx[k], &d, cdf, bytes, nbytes, prefsum, out[k]);
        free(prefsum);
        free(bytes);
    } else {
        const size_t capacity = (size_t)fuzz_uint(&in, 2) % 2048;
        int32_t *lengths = malloc(S * sizeof(int32_t));
        for (size_t s = 0; s < S; s++)
            lengths[s] = (flags & 8) ? (int32_t)(fuzz_uint(&in, 2) % (capacity + 1)) : (int32_t)fuzz_uint(&in, 4);
        uint8_t *streams = fuzz_take(&in, S * capacity, NULL);
        for (int k = 0; k < 3; k++) st[k] = decode_streams(ctx[k], &d, cdf, streams, lengths, capacity, out[k]);
        free(lengths);
        free(streams);
    }
    for (int k = 1; k < 3; k++) {
        FUZZ_CHECK(st[0] == st[k], "scalar kernel returned %s, %s kernel %s", kvc_status_name(st[0]),
                   kvc_context_isa(ctx[k]), kvc_status_name(st[k]));
        if (st[0] == KVC_OK) {
            FUZZ_CHECK(!memcmp(out[0], out[k], n), "scalar and %s kernels decode different symbols", kvc_context_isa(ctx[k]));
            check_symbols(&d, out[k], n);
        } else {
            for (size_t i = 0; i < n; i++) FUZZ_CHECK(out[k][i] == 0xEE, "failed decode wrote symbol %zu", i);
        }
    }
    free(cdf);
    for (int k = 0; k < 3; k++) free(out[k]);
    return 0;
}
