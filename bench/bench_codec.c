/* SPDX-License-Identifier: BSD-3-Clause */
/* `kvcore bench codec`: the CacheGen codec end to end (quantise, CDF, windowed coding, container;
 * and back) on a 7B-class fp16 chunk [2, 32 layers, 256 tokens, 8 x 128], in GB/s of fp16 bytes
 * next to memcpy of the same bytes with the same threads, with 1 thread and then --threads N
 * (default 2). Then the compressed size next to the fp16 chunk and next to the same streams in
 * LMCache's layout (int16 CDF table, int32 lengths, maxima). Rows encode_vs_coder / decode_vs_coder
 * put the codec next to its own arithmetic coder alone on the same chunk's symbols (kvc_cg_encode,
 * kvc_cg_decode_packed), timed interleaved in the same run: ratio = codec / coder throughput, the
 * share of the coder's speed that survives quantisation, CDF and container work. Rows rans_* code the
 * same chunk with the rANS coder (--coder rans): against memcpy, against the same codec with the
 * arithmetic coder (ratio = rANS / ac throughput), and the two container sizes (rans_size_vs_ac).
 * Rows lanes_<isa>_encode / lanes_<isa>_decode (for the avx2 and avx512 tiers the machine has
 * and KVCORE_ISA allows) put the codec on that tier, with its lane-parallel arithmetic coder, next
 * to the same codec on the scalar tier (its per-stream coder and scalar quantiser), same threads.
 * Every row is timed alternately with its
 * baseline (bench_pair). Data: synth_kv.c (per-channel
 * scales, outlier key channels, smooth keys), so the coder sees realistic symbol statistics. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kvcore.h>

#include "../src/cli/synth_kv.h"
#include "bench.h"
#include "suites.h"

#define NL 32
#define NH 8
#define HS 128
#define TOKENS 256

typedef struct {
    kvc_context_t *ctx;
    const kvc_codec_params_t *p;
    const uint16_t *kv;
    const uint8_t *container;
    size_t container_len;
    uint16_t *out;
    size_t out_bytes;
    kvc_status_t status;
} codec_job_t;

static void encode_job(void *arg)
{
    codec_job_t *j = arg;
    uint8_t *buf = NULL;
    size_t len = 0;
    const kvc_status_t st = kvc_codec_encode(j->ctx, j->p, j->kv, &buf, &len);
    if (st != KVC_OK) j->status = st;
    kvc_codec_free(buf);
}

static void decode_job(void *arg)
{
    codec_job_t *j = arg;
    const kvc_status_t st = kvc_codec_decode(j->ctx, j->container, j->container_len, j->out, j->out_bytes, NULL);
    if (st != KVC_OK) j->status = st;
}

/* The coder alone on the chunk's symbols: encode every stream, or decode the packed streams. */
typedef struct {
    kvc_context_t *ctx;
    kvc_cg_encode_params_t enc;
    kvc_cg_decode_packed_params_t dec;
    kvc_status_t status;
} coder_job_t;

static void coder_encode_job(void *arg)
{
    coder_job_t *j = arg;
    const kvc_status_t st = kvc_cg_encode(j->ctx, &j->enc);
    if (st != KVC_OK) j->status = st;
}

static void coder_decode_job(void *arg)
{
    coder_job_t *j = arg;
    const kvc_status_t st = kvc_cg_decode_packed(j->ctx, &j->dec);
    if (st != KVC_OK) j->status = st;
}

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A job wrapped to add up the process CPU seconds of its calls: at 1 thread the figure to trust on a
 * shared machine, since other processes' load does not inflate it. */
typedef struct {
    void (*fn)(void *);
    void *arg;
    double cpu;
    int calls;
} cpu_timed_t;

static void cpu_timed_run(void *arg)
{
    cpu_timed_t *c = arg;
    const double c0 = cpu_now();
    c->fn(c->arg);
    c->cpu += cpu_now() - c0;
    c->calls++;
}

/* a and b alternately (bench_pair); *ca, *cb: mean process CPU seconds per call. */
static void time_interleaved(void (*a)(void *), void *aa, void (*b)(void *), void *ba, int reps, bench_stat_t *ta, bench_stat_t *tb,
                             double *ca, double *cb)
{
    cpu_timed_t ja = { a, aa, 0, 0 }, jb = { b, ba, 0, 0 };
    bench_pair(cpu_timed_run, &ja, cpu_timed_run, &jb, reps, 0, ta, tb);
    *ca = ja.cpu / ja.calls;
    *cb = jb.cpu / jb.calls;
}

/* Codec vs coder rows (encode_vs_coder, decode_vs_coder). */
static int coder_rows(const bench_opts_t *o, kvc_context_t *ctx, int threads, codec_job_t *j, const kvc_codec_params_t *p,
                      size_t bytes, int reps, const char *params)
{
    const size_t L = 2 * NL, C = NH * HS, S = L * C, cap = kvc_cg_encode_bound(TOKENS);
    const unsigned B = 32; /* LMCache's default bins for 32 layers: 32 and 16, CDF width 32 */
    uint32_t bins[2 * NL];
    kvc_cg_default_bins(NL, bins);
    uint8_t *sym = malloc(L * TOKENS * C), *streams = malloc(S * cap), *packed = malloc(S * cap), *out = malloc(L * TOKENS * C);
    float *scales = malloc(L * TOKENS * sizeof(float));
    uint16_t *cdf = malloc(S * (B + 1) * sizeof(uint16_t));
    int32_t *lens = malloc(S * sizeof(int32_t));
    int64_t *prefsum = malloc(S * sizeof(int64_t));
    int rc = 1;
    if (!sym || !streams || !packed || !out || !scales || !cdf || !lens || !prefsum) goto done;
    kvc_quant_params_t q = { .dtype = KVC_DTYPE_F16, .values = (void *)j->kv, .symbols = sym, .scales = scales, .bins = bins,
                           .layers = L, .tokens = TOKENS, .channels = C };
    kvc_cg_cdf_params_t ca = { .symbols = sym, .cdf = cdf, .layers = L, .tokens = TOKENS, .channels = C, .num_bins = B };
    coder_job_t cj = { .ctx = ctx, .enc = { .cdf = cdf, .symbols = sym, .streams = streams, .lengths = lens, .layers = L,
                                            .tokens = TOKENS, .channels = C, .capacity = cap, .num_bins = B } };
    if (kvc_quantise(ctx, &q) != KVC_OK || kvc_cg_cdf(ctx, &ca) != KVC_OK || kvc_cg_encode(ctx, &cj.enc) != KVC_OK) goto done;
    int64_t sum = 0;
    for (size_t s = 0; s < S; s++) {
        memcpy(packed + sum, streams + s * cap, (size_t)lens[s]);
        prefsum[s] = sum += lens[s];
    }
    cj.dec = (kvc_cg_decode_packed_params_t){ .cdf = cdf, .bytes = packed, .nbytes = (size_t)sum, .prefsum = prefsum, .symbols = out,
                                         .layers = L, .tokens = TOKENS, .channels = C, .num_bins = B };
    bench_stat_t t_codec, t_coder;
    double c_codec, c_coder;
    char prm[512];
    time_interleaved(encode_job, j, coder_encode_job, &cj, reps, &t_codec, &t_coder, &c_codec, &c_coder);
    snprintf(prm, sizeof(prm), "%s,\"cpu_s_codec\":%.4f,\"cpu_s_coder\":%.4f,\"cpu_ratio\":%.4f", params, c_codec, c_coder,
             c_coder / c_codec);
    bench_result_t r = { .suite = "codec", .name = "encode_vs_coder", .unit = "GB/s", .baseline_name = "coder_encode",
                         .threads = threads, .params = prm };
    bench_set_rates(&r, (double)bytes / 1e9, &t_codec, &t_coder);
    bench_report(o, &r);
    time_interleaved(decode_job, j, coder_decode_job, &cj, reps, &t_codec, &t_coder, &c_codec, &c_coder);
    snprintf(prm, sizeof(prm), "%s,\"cpu_s_codec\":%.4f,\"cpu_s_coder\":%.4f,\"cpu_ratio\":%.4f", params, c_codec, c_coder,
             c_coder / c_codec);
    r.name = "decode_vs_coder";
    r.baseline_name = "coder_decode_packed";
    bench_set_rates(&r, (double)bytes / 1e9, &t_codec, &t_coder);
    bench_report(o, &r);
    rc = j->status != KVC_OK || cj.status != KVC_OK;
    (void)p;
done:
    if (rc) fprintf(stderr, "bench codec: coder baseline failed: %s\n", kvc_last_error());
    free(sym); free(streams); free(packed); free(out); free(scales); free(cdf); free(lens); free(prefsum);
    return rc;
}

/* rANS rows: the codec with --coder rans next to memcpy and next to itself with ac (j). */
static int rans_rows(const bench_opts_t *o, kvc_context_t *ctx, int threads, codec_job_t *j, const kvc_codec_params_t *p,
                     size_t bytes, int reps, const char *params, int report_size)
{
    kvc_codec_params_t pr = *p;
    pr.field_mask |= KVC_CODEC_PARAM_CODER;
    pr.coder = KVC_CODER_RANS;
    codec_job_t jr = *j;
    jr.p = &pr;
    uint8_t *buf = NULL;
    size_t len = 0;
    if (kvc_codec_encode(ctx, &pr, j->kv, &buf, &len) != KVC_OK) {
        fprintf(stderr, "bench codec: rANS encode failed: %s\n", kvc_last_error());
        return 1;
    }
    jr.container = buf;
    jr.container_len = len;
    bench_memcpy_job_t mj = { .dst = j->out, .src = j->kv, .bytes = bytes, .threads = threads };
    bench_stat_t enc, enc_base, dec, dec_base, enc_ac, dec_ac, enc_r, dec_r;
    bench_pair(encode_job, &jr, bench_memcpy_run, &mj, reps, 0, &enc, &enc_base);
    bench_pair(decode_job, &jr, bench_memcpy_run, &mj, reps, 0, &dec, &dec_base);
    bench_pair(encode_job, &jr, encode_job, j, reps, 0, &enc_r, &enc_ac);
    bench_pair(decode_job, &jr, decode_job, j, reps, 0, &dec_r, &dec_ac);
    int rc = 1;
    if (jr.status != KVC_OK || j->status != KVC_OK) {
        fprintf(stderr, "bench codec: %s\n", kvc_last_error());
        goto done;
    }
    bench_result_t r = { .suite = "codec", .name = "rans_encode", .unit = "GB/s", .baseline_name = "memcpy",
                         .threads = threads, .params = params };
    bench_set_rates(&r, (double)bytes / 1e9, &enc, &enc_base);
    bench_report(o, &r);
    r.name = "rans_decode";
    bench_set_rates(&r, (double)bytes / 1e9, &dec, &dec_base);
    bench_report(o, &r);
    r.name = "rans_encode_vs_ac";
    r.baseline_name = "ac_encode";
    bench_set_rates(&r, (double)bytes / 1e9, &enc_r, &enc_ac);
    bench_report(o, &r);
    r.name = "rans_decode_vs_ac";
    r.baseline_name = "ac_decode";
    bench_set_rates(&r, (double)bytes / 1e9, &dec_r, &dec_ac);
    bench_report(o, &r);
    if (report_size) {
        kvc_codec_info_t ia, ir;
        if (kvc_codec_inspect(j->container, j->container_len, &ia) != KVC_OK || kvc_codec_inspect(buf, len, &ir) != KVC_OK)
            goto done;
        char prm[256];
        snprintf(prm, sizeof(prm), "\"streams\":%zu,\"ac_streams\":%zu,\"lengths\":%zu,\"ac_lengths\":%zu", ir.streams_bytes,
                 ia.streams_bytes, ir.lengths_bytes, ia.lengths_bytes);
        bench_result_t s = { .suite = "codec", .name = "rans_size_vs_ac", .value = (double)len, .unit = "bytes",
                             .baseline_name = "ac_container", .baseline_value = (double)j->container_len, .threads = threads,
                             .params = prm };
        bench_report(o, &s);
    }
    rc = 0;
done:
    kvc_codec_free(buf);
    return rc;
}

static int tier_rank(const char *isa) { return !strcmp(isa, "avx512") ? 2 : !strcmp(isa, "avx2") ? 1 : 0; }

/* A context on CPU ISA tier isa with `threads` threads, or NULL where the tier is not available
 * (or above the KVCORE_ISA cap, which `top`, the default context's tier, reflects). */
static kvc_context_t *tier_context(const char *isa, int threads, const char *top)
{
    if (tier_rank(isa) > tier_rank(top)) return NULL;
    const char *cap = getenv("KVCORE_ISA");
    char *saved = cap ? strdup(cap) : NULL;
    setenv("KVCORE_ISA", isa, 1);
    kvc_context_params_t cp = { .field_mask = KVC_CONTEXT_PARAM_NUM_THREADS, .num_threads = threads };
    kvc_context_t *ctx = NULL;
    if (kvc_context_create(&cp, &ctx) == KVC_OK && strcmp(kvc_context_isa(ctx), isa) != 0) {
        kvc_context_destroy(ctx);
        ctx = NULL;
    }
    if (saved) setenv("KVCORE_ISA", saved, 1);
    else unsetenv("KVCORE_ISA");
    free(saved);
    return ctx;
}

/* lanes_<isa>_encode / _decode: the codec on the avx2 and avx512 tiers next to the scalar tier's. */
static int lanes_rows(const bench_opts_t *o, kvc_context_t *ctx, int threads, const codec_job_t *j, size_t bytes,
                      int reps, const char *params)
{
    static const char *const tiers[2] = { "avx2", "avx512" };
    kvc_context_t *scalar = tier_context("scalar", threads, kvc_context_isa(ctx));
    int rc = 0;
    for (int t = 0; t < 2 && scalar && !rc; t++) {
        kvc_context_t *lanes = tier_context(tiers[t], threads, kvc_context_isa(ctx));
        if (!lanes) continue;
        char enc_name[32], dec_name[32];
        snprintf(enc_name, sizeof enc_name, "lanes_%s_encode", tiers[t]);
        snprintf(dec_name, sizeof dec_name, "lanes_%s_decode", tiers[t]);
        codec_job_t jl = *j, js = *j;
        jl.ctx = lanes;
        js.ctx = scalar;
        bench_stat_t enc, enc_base, dec, dec_base;
        bench_pair(encode_job, &jl, encode_job, &js, reps, 0, &enc, &enc_base);
        bench_pair(decode_job, &jl, decode_job, &js, reps, 0, &dec, &dec_base);
        rc = jl.status != KVC_OK || js.status != KVC_OK;
        if (rc) fprintf(stderr, "bench codec: %s\n", kvc_last_error());
        bench_result_t r = { .suite = "codec", .name = enc_name, .unit = "GB/s", .baseline_name = "scalar_tier",
                             .threads = threads, .params = params };
        bench_set_rates(&r, (double)bytes / 1e9, &enc, &enc_base);
        if (!rc) bench_report(o, &r);
        r.name = dec_name;
        bench_set_rates(&r, (double)bytes / 1e9, &dec, &dec_base);
        if (!rc) bench_report(o, &r);
        kvc_context_destroy(lanes);
    }
    kvc_context_destroy(scalar);
    return rc;
}

static int run_threads(const bench_opts_t *o, int threads, const kvc_codec_params_t *p, const uint16_t *kv, size_t bytes,
                       int reps, int report_size)
{
    kvc_context_params_t cp = { .field_mask = KVC_CONTEXT_PARAM_NUM_THREADS, .num_threads = threads };
    kvc_context_t *ctx = NULL;
    if (kvc_context_create(&cp, &ctx) != KVC_OK) {
        fprintf(stderr, "bench codec: %s\n", kvc_last_error());
        return 1;
    }
    codec_job_t j = { .ctx = ctx, .p = p, .kv = kv, .out_bytes = bytes };
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = 1;
    if (kvc_codec_encode(ctx, p, kv, &buf, &len) != KVC_OK || !(j.out = malloc(bytes))) {
        fprintf(stderr, "bench codec: encode failed: %s\n", kvc_last_error());
        goto done;
    }
    j.container = buf;
    j.container_len = len;
    bench_memcpy_job_t mj = { .dst = j.out, .src = kv, .bytes = bytes, .threads = threads };
    bench_stat_t enc, enc_base, dec, dec_base;
    bench_pair(encode_job, &j, bench_memcpy_run, &mj, reps, 0, &enc, &enc_base);
    bench_pair(decode_job, &j, bench_memcpy_run, &mj, reps, 0, &dec, &dec_base);
    if (j.status != KVC_OK) {
        fprintf(stderr, "bench codec: %s\n", kvc_last_error());
        goto done;
    }
    kvc_codec_info_t info;
    if (kvc_codec_inspect(buf, len, &info) != KVC_OK) goto done;
    char params[256];
    snprintf(params, sizeof(params),
             "\"dtype\":\"f16\",\"layers\":%d,\"tokens\":%d,\"heads\":%d,\"head_size\":%d,\"bytes\":%zu,"
             "\"backend\":\"%s\"",
             NL, TOKENS, NH, HS, bytes, kvc_context_backend_name(ctx));
    bench_result_t r = { .suite = "codec", .name = "encode", .unit = "GB/s", .baseline_name = "memcpy",
                         .threads = threads, .params = params };
    bench_set_rates(&r, (double)bytes / 1e9, &enc, &enc_base);
    bench_report(o, &r);
    r.name = "decode";
    bench_set_rates(&r, (double)bytes / 1e9, &dec, &dec_base);
    bench_report(o, &r);
    /* More rounds than the other rows: the ratio is the figure of merit and shared machines are noisy. */
    if (coder_rows(o, ctx, threads, &j, p, bytes, o->quick ? reps : 2 * reps, params)) goto done;
    if (rans_rows(o, ctx, threads, &j, p, bytes, reps, params, report_size)) goto done;
    if (lanes_rows(o, ctx, threads, &j, bytes, reps, params)) goto done;

    if (report_size) {
        /* Sizes: ratio = container / baseline (smaller is better). */
        snprintf(params, sizeof(params),
                 "\"streams\":%zu,\"cdf\":%zu,\"scales\":%zu,\"lengths\":%zu,\"bits_per_element\":%.4f,"
                 "\"compression_vs_fp16\":%.3f",
                 info.streams_bytes, info.cdf_bytes, info.scales_bytes, info.lengths_bytes, 8.0 * (double)len / (double)(bytes / 2),
                 (double)bytes / (double)len);
        bench_result_t s = { .suite = "codec", .name = "size_vs_fp16", .value = (double)len, .unit = "bytes",
                             .baseline_name = "fp16_chunk", .baseline_value = (double)bytes, .threads = threads, .params = params };
        bench_report(o, &s);
        snprintf(params, sizeof(params), "\"lmcache_cdf_bytes\":%zu,\"lmcache_lengths_bytes\":%zu,\"saved_bytes\":%zd",
                 info.lmcache_bytes - info.streams_bytes - info.scales_bytes - (size_t)info.num_windows * 2 * NL * NH * HS * 4,
                 (size_t)info.num_windows * 2 * NL * NH * HS * 4, (ssize_t)info.lmcache_bytes - (ssize_t)len);
        s.name = "size_vs_lmcache_layout";
        s.baseline_name = "lmcache_layout";
        s.baseline_value = (double)info.lmcache_bytes;
        bench_report(o, &s);
    }
    rc = 0;
done:
    free(j.out);
    kvc_codec_free(buf);
    kvc_context_destroy(ctx);
    return rc;
}

int bench_codec_run(const bench_opts_t *o)
{
    const size_t bytes = (size_t)2 * NL * TOKENS * NH * HS * sizeof(uint16_t);
    uint16_t *kv = synth_kv_f16(NL, TOKENS, NH, HS, 42);
    if (!kv) {
        fprintf(stderr, "bench codec: no memory for a %zu-byte chunk\n", bytes);
        return 1;
    }
    const kvc_codec_params_t p = { .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD, .num_layers = NL,
                                   .num_tokens = TOKENS, .num_heads = NH, .head_size = HS };
    const int reps = o->quick ? 2 : 5, threads[2] = { 1, o->threads > 1 ? o->threads : 2 };
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++) rc = run_threads(o, threads[i], &p, kv, bytes, reps, i == 0);
    free(kv);
    return rc;
}
