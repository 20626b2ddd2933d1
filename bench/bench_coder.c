/* SPDX-License-Identifier: BSD-3-Clause */
/* `kvcore bench coder`: CacheGen cdf / encode / decode / decode_packed in Msym/s on a
 * [32 layers, 256 tokens, 1024 channels] chunk with 32 bins, with 1 and 2 threads (or up to
 * --threads), next to the scalar reference coder of tests/ref timed alternately with it; and the
 * coded size against the empirical entropy of the same symbols. Symbols come from quantising
 * synthetic KV-like values (log-normal per-channel scales, a few 2x outlier channels) with
 * kvc_quantise: about 3.5 bits/symbol, like LMCache's golden vectors and the real KV in tests/data.
 *
 * Rows tier_<isa>_<op> time encode / decode / decode_packed on each CPU ISA tier the machine has
 * (up to the context's: KVCORE_ISA caps it) next to memcpy of the symbols' bytes with the same
 * threads (a symbol is a byte: Msym/s against MB/s); rows lanes_<isa>_<op> put the lane-parallel
 * kernels of the avx2 (8 lanes) and avx512 (16 lanes) tiers next to the scalar tier's per-stream
 * coder, timed alternately with them (ratio = the lanes' speed-up).
 *
 * Next to the wall-clock value each line carries "msym_per_cpu_s": symbols per second of process
 * CPU time (all threads), i.e. the throughput of one busy thread, which stays meaningful when the
 * machine is shared (wall-clock figures then mostly measure the other tenants). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ref_coder.h"
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

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* fn(arg) and ref(rarg) alternately, after one warm-up of each (the reference writes the same
 * bytes into its first layers as kvcore does, so the two can share the buffers): best wall-clock
 * and best process CPU seconds of each over reps runs. */
static void time_pair2(void (*fn)(void *), void *arg, void (*ref)(void *), void *rarg, int reps, double wall[2],
                       double cpu[2])
{
    void (*const f[2])(void *) = { fn, ref };
    void *const a[2] = { arg, rarg };
    for (int k = 0; k < 2; k++) {
        f[k](a[k]);
        wall[k] = cpu[k] = 1e30;
    }
    for (int i = 0; i < reps; i++)
        for (int k = 0; k < 2; k++) {
            const double w0 = bench_now(), c0 = cpu_seconds();
            f[k](a[k]);
            const double w = bench_now() - w0, c = cpu_seconds() - c0;
            wall[k] = w < wall[k] ? w : wall[k];
            cpu[k] = c < cpu[k] ? c : cpu[k];
        }
}

static void time_pair(void (*fn)(void *), void (*ref)(void *), void *arg, int reps, double wall[2], double cpu[2])
{
    time_pair2(fn, arg, ref, arg, reps, wall, cpu);
}

static void run_cdf(void *p)
{
    coder_bench_t *b = p;
    kvc_cg_cdf_params_t a = { .symbols = b->sym, .cdf = b->cdf, .layers = b->L, .tokens = b->T, .channels = b->C,
                         .num_bins = b->B };
    if (kvc_cg_cdf(b->ctx, &a) != KVC_OK) abort();
}

static void run_encode(void *p)
{
    coder_bench_t *b = p;
    kvc_cg_encode_params_t a = { .cdf = b->cdf, .symbols = b->sym, .streams = b->streams, .lengths = b->len,
                            .layers = b->L, .tokens = b->T, .channels = b->C, .capacity = b->cap, .num_bins = b->B };
    if (kvc_cg_encode(b->ctx, &a) != KVC_OK) abort();
}

static void run_decode(void *p)
{
    coder_bench_t *b = p;
    kvc_cg_decode_params_t a = { .cdf = b->cdf, .streams = b->streams, .lengths = b->len, .symbols = b->out,
                            .layers = b->L, .tokens = b->T, .channels = b->C, .capacity = b->cap, .num_bins = b->B };
    if (kvc_cg_decode(b->ctx, &a) != KVC_OK) abort();
}

static void run_decode_packed(void *p)
{
    coder_bench_t *b = p;
    kvc_cg_decode_packed_params_t a = { .cdf = b->cdf, .bytes = b->packed, .nbytes = b->nbytes, .prefsum = b->prefsum,
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
        for (size_t c = 0; c < b->C; c++) sigma[c] = (float)(exp(0.3 * gauss(&rng)) * (rng_next(&rng) % 64 == 0 ? 2 : 1));
        for (size_t t = 0; t < b->T; t++)
            for (size_t c = 0; c < b->C; c++) x[(l * b->T + t) * b->C + c] = (float)(sigma[c] * gauss(&rng));
    }
    kvc_quant_params_t q = { .dtype = KVC_DTYPE_F32, .values = x, .symbols = b->sym, .scales = scales, .bins = bins,
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

/* wall[0], cpu[0]: kvcore's seconds for n symbols; wall[1], cpu[1]: the reference's for nref. */
static void report(const bench_opts_t *o, const char *name, double n, double nref, const double wall[2],
                   const double cpu[2], int threads, const coder_bench_t *b)
{
    const double ref_wall = nref / wall[1] / 1e6, ref_cpu = nref / cpu[1] / 1e6;
    char params[384];
    snprintf(params, sizeof(params),
             "\"msym_per_cpu_s\":%.1f,\"ref_cpu_msym_s\":%.1f,\"layers\":%zu,\"tokens\":%zu,\"channels\":%zu,"
             "\"bins\":%u",
             n / cpu[0] / 1e6, ref_cpu, b->L, b->T, b->C, b->B);
    const bench_result_t r = { .suite = "coder", .name = name, .value = n / wall[0] / 1e6, .unit = "Msym/s",
                               .baseline_name = "ref_scalar_1thr", .baseline_value = ref_wall, .threads = threads,
                               .params = params };
    bench_report(o, &r);
}

/* One of kvcore's ops on the context of one ISA tier. */
typedef struct tier_job {
    coder_bench_t *b;
    kvc_context_t *ctx;
    void (*op)(void *);
} tier_job_t;

static void run_tier(void *p)
{
    tier_job_t *t = p;
    kvc_context_t *const keep = t->b->ctx;
    t->b->ctx = t->ctx;
    t->op(t->b);
    t->b->ctx = keep;
}

static void report_vs(const bench_opts_t *o, const char *name, const char *baseline, double n, const double wall[2],
                      const double cpu[2], int threads, const coder_bench_t *b)
{
    char params[384];
    snprintf(params, sizeof(params),
             "\"msym_per_cpu_s\":%.1f,\"baseline_cpu_msym_s\":%.1f,\"layers\":%zu,\"tokens\":%zu,\"channels\":%zu,"
             "\"bins\":%u",
             n / cpu[0] / 1e6, n / cpu[1] / 1e6, b->L, b->T, b->C, b->B);
    const bench_result_t r = { .suite = "coder", .name = name, .value = n / wall[0] / 1e6, .unit = "Msym/s",
                               .baseline_name = baseline, .baseline_value = n / wall[1] / 1e6, .threads = threads,
                               .params = params };
    bench_report(o, &r);
}

#define NTIERS 4
static const char *const tier_names[NTIERS] = { "scalar", "neon", "avx2", "avx512" };

/* Contexts with th threads on each tier this machine has, up to the default context's (whose
 * KVCORE_ISA cap is respected); ctx[i] NULL where tier_names[i] is not available. */
static void tier_contexts(int th, kvc_context_t *ctx[NTIERS])
{
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_NUM_THREADS, .num_threads = th };
    kvc_context_t *def = NULL;
    const char *top = kvc_context_create(&p, &def) == KVC_OK ? kvc_context_isa(def) : "scalar";
    const char *cap = getenv("KVCORE_ISA");
    char *saved = cap ? strdup(cap) : NULL;
    int past = 0;
    for (int i = 0; i < NTIERS; i++) {
        ctx[i] = NULL;
        if (past) continue;
        setenv("KVCORE_ISA", tier_names[i], 1);
        if (kvc_context_create(&p, &ctx[i]) == KVC_OK && strcmp(kvc_context_isa(ctx[i]), tier_names[i]) != 0) {
            kvc_context_destroy(ctx[i]);
            ctx[i] = NULL;
        }
        past = strcmp(tier_names[i], top) == 0;
    }
    if (saved) setenv("KVCORE_ISA", saved, 1);
    else unsetenv("KVCORE_ISA");
    free(saved);
    kvc_context_destroy(def);
}

/* tier_<isa>_<op> rows against memcpy, and lanes_<isa>_<op> (the lane-parallel coder of the avx2
 * and avx512 tiers) against the scalar tier's per-stream coder. */
static int tier_rows(const bench_opts_t *o, coder_bench_t *b, int th, int reps)
{
    static const char *const op_names[3] = { "encode", "decode", "decode_packed" };
    void (*const ops[3])(void *) = { run_encode, run_decode, run_decode_packed };
    const size_t n = b->L * b->T * b->C;
    kvc_context_t *ctx[NTIERS];
    tier_contexts(th, ctx);
    bench_memcpy_job_t mj = { .dst = b->out, .src = b->sym, .bytes = n, .threads = th };
    int rc = 0;
    for (int i = 0; i < NTIERS && !rc; i++) {
        if (!ctx[i]) continue;
        for (int k = 0; k < 3 && !rc; k++) {
            char name[64];
            snprintf(name, sizeof(name), "tier_%s_%s", tier_names[i], op_names[k]);
            if (!bench_case_wanted(o, name)) continue;
            tier_job_t t = { b, ctx[i], ops[k] };
            double wall[2], cpu[2];
            time_pair2(run_tier, &t, bench_memcpy_run, &mj, reps, wall, cpu);
            run_tier(&t); /* the last call must be the op: memcpy left the symbols in out */
            if (k && memcmp(b->out, b->sym, n) != 0) {
                fprintf(stderr, "bench coder: %s mismatch\n", name);
                rc = 1;
            }
            report_vs(o, name, "memcpy", (double)n, wall, cpu, th, b);
        }
    }
    for (int i = 2; i < NTIERS && ctx[0] && !rc; i++) /* the lane-parallel tiers, avx2 and avx512 */
        for (int k = 0; k < 3 && ctx[i] && !rc; k++) {
            char name[64];
            snprintf(name, sizeof(name), "lanes_%s_%s", tier_names[i], op_names[k]);
            if (!bench_case_wanted(o, name)) continue;
            tier_job_t lanes = { b, ctx[i], ops[k] }, scalar = { b, ctx[0], ops[k] };
            double wall[2], cpu[2];
            time_pair2(run_tier, &lanes, run_tier, &scalar, reps, wall, cpu);
            report_vs(o, name, "scalar_tier", (double)n, wall, cpu, th, b);
        }
    for (int i = 0; i < NTIERS; i++) kvc_context_destroy(ctx[i]);
    return rc;
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

    /* The reference runs on ref_layers layers (it is slow), alternately with kvcore's op. */
    const double nref = (double)(b.ref_layers * b.T * b.C);

    int max_threads = o->threads > 0 ? o->threads : 1;
    if (max_threads < 2) max_threads = 2;
    for (int th = 1; th <= max_threads; th = th < 2 ? th + 1 : th * 2) {
        kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_NUM_THREADS, .num_threads = th };
        if (kvc_context_create(&p, &b.ctx) != KVC_OK) {
            fprintf(stderr, "bench coder: context: %s\n", kvc_last_error());
            return 1;
        }
        double w_cdf[2], c_cdf[2], w_enc[2], c_enc[2], w_dec[2], c_dec[2], w_pk[2], c_pk[2];
        time_pair(run_cdf, ref_cdf, &b, reps, w_cdf, c_cdf);
        time_pair(run_encode, ref_encode, &b, reps, w_enc, c_enc);
        b.nbytes = 0;
        for (size_t k = 0; k < ns; k++) {
            memcpy(b.packed + b.nbytes, b.streams + k * b.cap, (size_t)b.len[k]);
            b.nbytes += (size_t)b.len[k];
            b.prefsum[k] = (int64_t)b.nbytes;
        }
        time_pair(run_decode, ref_decode, &b, reps, w_dec, c_dec);
        if (memcmp(b.out, b.sym, n) != 0) {
            fprintf(stderr, "bench coder: decode mismatch\n");
            return 1;
        }
        memset(b.out, 0, n);
        time_pair(run_decode_packed, ref_decode, &b, reps, w_pk, c_pk);
        if (memcmp(b.out, b.sym, n) != 0) {
            fprintf(stderr, "bench coder: decode_packed mismatch\n");
            return 1;
        }
        report(o, "cdf", (double)n, nref, w_cdf, c_cdf, th, &b);
        report(o, "encode", (double)n, nref, w_enc, c_enc, th, &b);
        report(o, "decode", (double)n, nref, w_dec, c_dec, th, &b);
        report(o, "decode_packed", (double)n, nref, w_pk, c_pk, th, &b);
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
        b.ctx = o->ctx;
        if (tier_rows(o, &b, th, reps)) return 1;
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
