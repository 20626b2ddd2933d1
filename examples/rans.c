/* SPDX-License-Identifier: BSD-3-Clause */
/* kvcore example: quantised KV symbols through kvcore's interleaved rANS coder, next to LMCache's
 * arithmetic coder.
 *
 * kvc_quantise turns a [layers, tokens, channels] chunk into 5-bit symbols (32 bins) and a scale
 * per (layer, token). The arithmetic coder (kvc_cg_*) writes the streams LMCache reads; the rANS
 * coder (kvc_rans_*) codes the same symbols with the same per-(layer, channel) statistics several
 * times faster, one stream per (layer, 32 channels). This program makes the rANS tables,
 * encodes, packs the streams back to back with their end offsets, decodes, checks that the symbols
 * come back, and prints both coders' sizes. With device pointers (kvc_device_alloc on a CUDA or
 * HIP context) the same calls run the GPU module's kernels.
 *
 * Build against an installed kvcore:
 *   cc -std=c11 rans.c $(pkg-config --cflags --libs kvcore) -lm -o rans
 * Exit status 0 when the decoded symbols equal the encoded ones. */
#include <kvcore.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { L = 4, T = 256, C = 256, B = 32 };
#define G ((C + 31) / 32) /* rANS streams per layer */

static int fail(const char *what, kvc_status_t st)
{
    fprintf(stderr, "%s: %s (%s): %s\n", what, kvc_status_string(st), kvc_status_name(st), kvc_last_error());
    return 1;
}

int main(void)
{
    kvc_context_t *ctx = NULL;
    kvc_status_t st = kvc_context_create(NULL, &ctx);
    if (st != KVC_OK) return fail("kvc_context_create", st);
    /* KV-like values: per channel a scale, per token a smooth drift plus noise */
    float *x = malloc(sizeof(float) * L * T * C), *scales = malloc(sizeof(float) * L * T);
    uint8_t *sym = malloc(L * T * C), *back = malloc(L * T * C);
    uint32_t bins[L];
    unsigned seed = 7;
    for (size_t l = 0; l < L; l++) {
        bins[l] = B;
        for (size_t t = 0; t < T; t++)
            for (size_t c = 0; c < C; c++) {
                seed = seed * 1103515245u + 12345u;
                const float noise = (float)(seed >> 8) / 16777216.0f - 0.5f;
                x[(l * T + t) * C + c] = (1.0f + (float)(c % 7)) * (0.3f * sinf(0.01f * (float)t + (float)c) + noise);
            }
    }
    kvc_quant_params_t q = { .dtype = KVC_DTYPE_F32, .values = x, .symbols = sym, .scales = scales, .bins = bins,
                             .layers = L, .tokens = T, .channels = C };
    if ((st = kvc_quantise(ctx, &q)) != KVC_OK) return fail("kvc_quantise", st);

    /* rANS: tables, streams of capacity kvc_rans_encode_bound(T), packed with end offsets */
    uint16_t *cum = malloc(sizeof(uint16_t) * L * C * (B + 1));
    kvc_rans_tables_params_t tp = { .symbols = sym, .cum = cum, .layers = L, .tokens = T, .channels = C, .num_bins = B };
    if ((st = kvc_rans_tables(ctx, &tp)) != KVC_OK) return fail("kvc_rans_tables", st);
    const size_t cap = kvc_rans_encode_bound(T);
    uint8_t *streams = malloc(L * G * cap), *packed = malloc(L * G * cap);
    int32_t lengths[L * G];
    int64_t ends[L * G];
    kvc_rans_encode_params_t ep = { .cum = cum, .symbols = sym, .streams = streams, .lengths = lengths, .layers = L,
                                    .tokens = T, .channels = C, .capacity = cap, .num_bins = B };
    if ((st = kvc_rans_encode(ctx, &ep)) != KVC_OK) return fail("kvc_rans_encode", st);
    size_t nbytes = 0;
    for (size_t k = 0; k < L * G; k++) {
        memcpy(packed + nbytes, streams + k * cap, (size_t)lengths[k]);
        ends[k] = (int64_t)(nbytes += (size_t)lengths[k]);
    }
    kvc_rans_decode_params_t dp = { .cum = cum, .bytes = packed, .nbytes = nbytes, .ends = ends, .symbols = back,
                                    .layers = L, .tokens = T, .channels = C, .num_bins = B };
    if ((st = kvc_rans_decode(ctx, &dp)) != KVC_OK) return fail("kvc_rans_decode", st);
    const int same = memcmp(sym, back, L * T * C) == 0;

    /* the arithmetic coder on the same symbols, lengths only (capacity 0: measure) */
    uint16_t *cdf = malloc(sizeof(uint16_t) * L * C * (B + 1));
    int32_t *ac_len = malloc(sizeof(int32_t) * L * C);
    kvc_cg_cdf_params_t cp = { .symbols = sym, .cdf = cdf, .layers = L, .tokens = T, .channels = C, .num_bins = B };
    if ((st = kvc_cg_cdf(ctx, &cp)) != KVC_OK) return fail("kvc_cg_cdf", st);
    kvc_cg_encode_params_t ap = { .cdf = cdf, .symbols = sym, .lengths = ac_len, .layers = L, .tokens = T, .channels = C,
                                  .num_bins = B };
    st = kvc_cg_encode(ctx, &ap);
    if (st != KVC_ERR_NO_SPACE) return fail("kvc_cg_encode (measure)", st); /* every stream is longer than 0 bytes */
    size_t ac_bytes = 0;
    for (size_t k = 0; k < L * C; k++) ac_bytes += (size_t)ac_len[k];

    const double n = (double)L * T * C;
    printf("%d x %d x %d symbols, %d bins: rANS %zu bytes (%.3f bits/symbol, %d streams), arithmetic coder %zu bytes "
           "(%.3f bits/symbol, %d streams); rANS/ac %.4f; symbols back: %s\n",
           L, T, C, B, nbytes, 8.0 * (double)nbytes / n, L * G, ac_bytes, 8.0 * (double)ac_bytes / n, L * C,
           (double)nbytes / (double)ac_bytes, same ? "yes" : "NO");
    free(x);
    free(scales);
    free(sym);
    free(back);
    free(cum);
    free(streams);
    free(packed);
    free(cdf);
    free(ac_len);
    kvc_context_destroy(ctx);
    return same ? 0 : 1;
}
