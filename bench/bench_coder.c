/* `kvcore bench coder`: CacheGen cdf / encode / decode / decode_packed in Msym/s on a
 * [32 layers, 256 tokens, 1024 channels] chunk with 32 bins, with 1 and 2 threads (or up to
 * --threads), next to the scalar reference coder of tests/ref measured in the same run; and the
 * coded size against the empirical entropy of the same symbols. Symbols come from quantising
 * synthetic KV-like values (per-channel scales, outlier channels) with kvc_quantise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/ref/cachegen_ref.h"
#include "bench.h"

typedef struct coder_bench {
    kvc_context_t *ctx;
    size_t L, T, C, cap, nbytes;
    unsigned B;
    uint8_t *sym, *out, *streams, *packed;
    uint16_t *cdf;
    int32_t *len;
    int64_t *prefsum;
    size_t ref_layers; /* layers the reference coder runs on (it is slow) */
} coder_bench_t;

static void run_cdf(void *p)
{
    coder_bench_t *b = p;
    kvc_cdf_args_t a = { .symbols = b->sym, .cdf = b->cdf, .layers = b->L, .tokens = b->T, .channels = b->C,
                         .num_bins = b->B };
    if (kvc_cg_cdf(b->ctx, &a) != KVC_OK) abort();
}

static void run_encode(void *p)
{
    coder_bench_t *b = p;
    kvc_encode_args_t a = { .cdf = b->cdf, .symbols = b->sym, .streams = b->streams, .lengths = b->len,
                            .layers = b->L, .tokens = b->T, .channels = b->C, .capacity = b->cap, .num_bins = b->B };
    if (kvc_cg_encode(b->ctx, &a) != KVC_OK) abort();
}

static void run_decode(void *p)
{
    coder_bench_t *b = p;
    kvc_decode_args_t a = { .cdf = b->cdf, .streams = b->streams, .lengths = b->len, .symbols = b->out,
                            .layers = b->L, .tokens = b->T, .channels = b->C, .capacity = b->cap, .num_bins = b->B };
    if (kvc_cg_decode(b->ctx, &a) != KVC_OK) abort();
}

static void run_decode_packed(void *p)
{
    coder_bench_t *b = p;
    kvc_decode_packed_args_t a = { .cdf = b->cdf, .bytes = b->packed, .nbytes = b->nbytes, .prefsum = b->prefsum,
                                   .symbols = b->out, .layers = b->L, .tokens = b->T, .channels = b->C,
                                   .num_bins = b->B };
    if (kvc_cg_decode_packed(b->ctx, &a) != KVC_OK) abort();
}

static void ref_cdf(void *p)
{
    coder_bench_t *b = p;
    ref_cg_cdf(b->sym, b->ref_layers, b->T, b->C, b->B, b->cdf);
}

static void ref_encode(void *p)
{
    coder_bench_t *b = p;
    ref_cg_encode(b->cdf, b->B, b->sym, b->ref_layers, b->T, b->C, b->streams, b->cap, b->len);
}

static void ref_decode(void *p)
{
    coder_bench_t *b = p;
    ref_cg_decode(b->cdf, b->B, b->streams, b->cap, b->len, b->ref_layers, b->T, b->C, b->out);
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double gauss(uint64_t *s)
{
    const double u = ((rng_next(s) >> 11) + 1) * 0x1p-53, v = (rng_next(s) >> 11) * 0x1p-53;
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* KV-like values: per-(layer, channel) log-normal scale, a few outlier channels, then LMCache's
 * quantiser with 32 bins. */
static int make_symbols(kvc_context_t *ctx, coder_bench_t *b)
{
    const size_t n = b->L * b->T * b->C;
    float *x = bench_alloc(n * 4), *scales = bench_alloc(b->L * b->T * 4);
    float *sigma = malloc(b->C * sizeof(float));
    uint32_t *bins = malloc(b->L * sizeof(uint32_t));
    uint64_t rng = 2024;
    for (size_t l = 0; l < b->L; l++) {
        bins[l] = b->B;
        for (size_t c = 0; c < b->C; c++) sigma[c] = (float)(exp(0.7 * gauss(&rng)) * (rng_next(&rng) % 64 == 0 ? 8 : 1));
        for (size_t t = 0; t < b->T; t++)
            for (size_t c = 0; c < b->C; c++) x[(l * b->T + t) * b->C + c] = (float)(sigma[c] * gauss(&rng));
    }
    kvc_quant_args_t q = { .dtype = KVC_CG_F32, .values = x, .symbols = b->sym, .scales = scales, .bins = bins,
                           .layers = b->L, .tokens = b->T, .channels = b->C };
    const kvc_status_t st = kvc_quantise(ctx, &q);
    bench_free(x, n * 4);
    bench_free(scales, b->L * b->T * 4);
    free(sigma);
    free(bins);
    return st == KVC_OK ? 0 : -1;
}

/* Per-stream empirical entropy, and the ideal cost under the 16-bit CDF actually used, in bits. */
static void entropy_bits(const coder_bench_t *b, double *entropy, double *model)
{
    *entropy = *model = 0;
    for (size_t l = 0; l < b->L; l++)
        for (size_t c = 0; c < b->C; c++) {
            size_t count[256] = { 0 };
            for (size_t t = 0; t < b->T; t++) count[b->sym[(l * b->T + t) * b->C + c]]++;
            const uint16_t *cdf = b->cdf + (l * b->C + c) * (b->B + 1);
            for (unsigned s = 0; s < b->B; s++) {
                if (!count[s]) continue;
                const double p = (double)count[s] / (double)b->T;
                const double w = (s + 1 == b->B ? 65536.0 : cdf[s + 1]) - cdf[s];
                *entropy -= (double)count[s] * log2(p);
                *model -= (double)count[s] * log2(w / 65536.0);
            }
        }
}

static void report(const bench_opts_t *o, const char *name, double msym, double ref_msym, int threads,
                   const coder_bench_t *b)
{
    char params[256];
    snprintf(params, sizeof(params), "\"layers\":%zu,\"tokens\":%zu,\"channels\":%zu,\"bins\":%u,\"isa\":\"%s\"", b->L,
             b->T, b->C, b->B, kvc_context_isa(b->ctx));
    const bench_result_t r = { .suite = "coder", .name = name, .value = msym, .unit = "Msym/s",
                               .baseline_name = "ref_scalar_1thr", .baseline_value = ref_msym, .threads = threads,
                               .params = params };
    bench_report(o, &r);
}

int bench_coder_run(const bench_opts_t *o)
{
    coder_bench_t b = { .L = o->quick ? 4 : 32, .T = 256, .C = 1024, .B = 32 };
    b.ref_layers = o->quick ? 1 : 2;
    b.cap = kvc_cg_encode_bound(b.T);
    const size_t n = b.L * b.T * b.C, ns = b.L * b.C;
    const int reps = o->quick ? 2 : 5;
    b.sym = bench_alloc(n);
    b.out = bench_alloc(n);
    b.streams = bench_alloc(ns * b.cap);
    b.cdf = bench_alloc(ns * (b.B + 1) * 2);
    b.len = bench_alloc(ns * 4);
    b.prefsum = bench_alloc(ns * 8);
    b.packed = bench_alloc(ns * b.cap);
    b.ctx = o->ctx;
    if (make_symbols(o->ctx, &b) != 0) {
        fprintf(stderr, "bench coder: quantise failed: %s\n", kvc_last_error());
        return 1;
    }

    /* Reference first, on ref_layers layers (its outputs are then overwritten by kvcore's). */
    const double nref = (double)(b.ref_layers * b.T * b.C);
    const double ref_cdf_ms = nref / bench_time(ref_cdf, &b, 1) / 1e6;
    const double ref_enc_ms = nref / bench_time(ref_encode, &b, 1) / 1e6;
    const double ref_dec_ms = nref / bench_time(ref_decode, &b, 1) / 1e6;

    int max_threads = o->threads > 0 ? o->threads : 1;
    if (max_threads < 2) max_threads = 2;
    for (int th = 1; th <= max_threads; th = th < 2 ? th + 1 : th * 2) {
        kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_NUM_THREADS, .num_threads = th };
        if (kvc_context_create(&p, &b.ctx) != KVC_OK) {
            fprintf(stderr, "bench coder: context: %s\n", kvc_last_error());
            return 1;
        }
        const double t_cdf = bench_time(run_cdf, &b, reps);
        const double t_enc = bench_time(run_encode, &b, reps);
        b.nbytes = 0;
        for (size_t k = 0; k < ns; k++) {
            memcpy(b.packed + b.nbytes, b.streams + k * b.cap, (size_t)b.len[k]);
            b.nbytes += (size_t)b.len[k];
            b.prefsum[k] = (int64_t)b.nbytes;
        }
        const double t_dec = bench_time(run_decode, &b, reps);
        if (memcmp(b.out, b.sym, n) != 0) {
            fprintf(stderr, "bench coder: decode mismatch\n");
            return 1;
        }
        memset(b.out, 0, n);
        const double t_pk = bench_time(run_decode_packed, &b, reps);
        if (memcmp(b.out, b.sym, n) != 0) {
            fprintf(stderr, "bench coder: decode_packed mismatch\n");
            return 1;
        }
        report(o, "cdf", n / t_cdf / 1e6, ref_cdf_ms, th, &b);
        report(o, "encode", n / t_enc / 1e6, ref_enc_ms, th, &b);
        report(o, "decode", n / t_dec / 1e6, ref_dec_ms, th, &b);
        report(o, "decode_packed", n / t_pk / 1e6, ref_dec_ms, th, &b);
        if (th == 1) { /* size, once */
            double entropy, model;
            entropy_bits(&b, &entropy, &model);
            const double coded = 8.0 * (double)b.nbytes;
            char params[320];
            snprintf(params, sizeof(params),
                     "\"overhead_pct\":%.3f,\"cdf_model_bits_per_symbol\":%.5f,\"coded_bytes\":%zu,"
                     "\"streams\":%zu,\"excess_bits_per_stream\":%.2f,\"layers\":%zu,\"tokens\":%zu,\"channels\":%zu",
                     100.0 * (coded / entropy - 1), model / n, b.nbytes, ns, (coded - entropy) / ns, b.L, b.T, b.C);
            const bench_result_t r = { .suite = "coder", .name = "bits_per_symbol", .value = coded / n,
                                       .unit = "bit/sym", .baseline_name = "entropy", .baseline_value = entropy / n,
                                       .threads = 1, .params = params };
            bench_report(o, &r);
        }
        kvc_context_destroy(b.ctx);
    }
    bench_free(b.sym, n);
    bench_free(b.out, n);
    bench_free(b.streams, ns * b.cap);
    bench_free(b.cdf, ns * (b.B + 1) * 2);
    bench_free(b.len, ns * 4);
    bench_free(b.prefsum, ns * 8);
    bench_free(b.packed, ns * b.cap);
    return 0;
}
