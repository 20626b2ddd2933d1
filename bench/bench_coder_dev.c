/* SPDX-License-Identifier: BSD-3-Clause */
/* `kvcore bench coder_dev`: the CacheGen ops (quantise, cdf, encode, decode, decode_packed) and the
 * rANS coder's (rans_tables, rans_encode, rans_decode: kvc_rans_*) on the active backend with its own memory (kvc_device_alloc: device memory on a GPU backend), in Msym/s
 * on a [32 layers, 256 tokens, 1024 channels] chunk with 32 bins, next to the CPU backend running
 * the same op on the same data, timed alternately with it. Values are synthetic KV-like rows (log-normal
 * per-channel scales), quantised by the backend itself; the suite checks that decoding gives the
 * symbols back. Each op is also reported in GB/s (bytes read + written) next to a device-to-device
 * copy (kvc_memcpy between two buffers of the active backend) of the fp32 input, in the same run.
 * (`kvcore bench coder` is the CPU coder's own suite with its scalar reference.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "suites.h"

typedef struct side {
    kvc_context_t *ctx;
    float *x, *scales;
    uint8_t *sym, *out, *streams, *packed;
    uint16_t *cdf;
    int32_t *len;
    int64_t *prefsum;
    uint8_t *rstreams, *rpacked; /* rANS: [L, G, rcap] and packed */
    uint16_t *cum;
    int32_t *rlen;
    int64_t *rends;
} side_t;

typedef struct coder_dev {
    size_t L, T, C, cap, nbytes, G, rcap, rbytes;
    unsigned B;
    uint32_t *bins;
    side_t *s;
    int op, failed;
} coder_dev_t;

enum { OP_QUANT, OP_CDF, OP_ENCODE, OP_DECODE, OP_PACKED, OP_RTABLES, OP_RENCODE, OP_RDECODE, OP_COUNT };
static const char *const op_names[OP_COUNT] = { "quantise", "cdf", "encode", "decode", "decode_packed",
                                                "rans_tables", "rans_encode", "rans_decode" };

typedef struct d2d {
    kvc_context_t *ctx;
    void *dst;
    const void *src;
    size_t bytes;
} d2d_t;

static void run_d2d(void *arg)
{
    const d2d_t *d = arg;
    (void)kvc_memcpy(d->ctx, d->dst, d->src, d->bytes);
}

static void run_op(void *arg)
{
    coder_dev_t *b = arg;
    side_t *s = b->s;
    kvc_status_t st = KVC_OK;
    switch (b->op) {
    case OP_QUANT: {
        kvc_quant_params_t a = { .dtype = KVC_DTYPE_F32, .values = s->x, .symbols = s->sym, .scales = s->scales,
                               .bins = b->bins, .layers = b->L, .tokens = b->T, .channels = b->C };
        st = kvc_quantise(s->ctx, &a);
        break;
    }
    case OP_CDF: {
        kvc_cg_cdf_params_t a = { .symbols = s->sym, .cdf = s->cdf, .layers = b->L, .tokens = b->T, .channels = b->C,
                             .num_bins = b->B };
        st = kvc_cg_cdf(s->ctx, &a);
        break;
    }
    case OP_ENCODE: {
        kvc_cg_encode_params_t a = { .cdf = s->cdf, .symbols = s->sym, .streams = s->streams, .lengths = s->len,
                                .layers = b->L, .tokens = b->T, .channels = b->C, .capacity = b->cap,
                                .num_bins = b->B };
        st = kvc_cg_encode(s->ctx, &a);
        break;
    }
    case OP_DECODE: {
        kvc_cg_decode_params_t a = { .cdf = s->cdf, .streams = s->streams, .lengths = s->len, .symbols = s->out,
                                .layers = b->L, .tokens = b->T, .channels = b->C, .capacity = b->cap,
                                .num_bins = b->B };
        st = kvc_cg_decode(s->ctx, &a);
        break;
    }
    case OP_RTABLES: {
        kvc_rans_tables_params_t a = { .symbols = s->sym, .cum = s->cum, .layers = b->L, .tokens = b->T, .channels = b->C,
                                       .num_bins = b->B };
        st = kvc_rans_tables(s->ctx, &a);
        break;
    }
    case OP_RENCODE: {
        kvc_rans_encode_params_t a = { .cum = s->cum, .symbols = s->sym, .streams = s->rstreams, .lengths = s->rlen,
                                       .layers = b->L, .tokens = b->T, .channels = b->C, .capacity = b->rcap,
                                       .num_bins = b->B };
        st = kvc_rans_encode(s->ctx, &a);
        break;
    }
    case OP_RDECODE: {
        kvc_rans_decode_params_t a = { .cum = s->cum, .bytes = s->rpacked, .nbytes = b->rbytes, .ends = s->rends,
                                       .symbols = s->out, .layers = b->L, .tokens = b->T, .channels = b->C,
                                       .num_bins = b->B };
        st = kvc_rans_decode(s->ctx, &a);
        break;
    }
    case OP_PACKED: {
        kvc_cg_decode_packed_params_t a = { .cdf = s->cdf, .bytes = s->packed, .nbytes = b->nbytes, .prefsum = s->prefsum,
                                       .symbols = s->out, .layers = b->L, .tokens = b->T, .channels = b->C,
                                       .num_bins = b->B };
        st = kvc_cg_decode_packed(s->ctx, &a);
        break;
    }
    }
    if (st == KVC_OK) st = kvc_stream_synchronize(s->ctx, NULL);
    if (st != KVC_OK) b->failed = 1;
}

static void *dalloc(kvc_context_t *ctx, size_t n)
{
    void *p = NULL;
    if (kvc_device_alloc(ctx, n, &p) != KVC_OK) {
        fprintf(stderr, "bench coder_dev: device_alloc(%zu): %s\n", n, kvc_last_error());
        exit(1);
    }
    return p;
}

static void side_init(side_t *s, kvc_context_t *ctx, const coder_dev_t *b, const float *x)
{
    const size_t n = b->L * b->T * b->C, ns = b->L * b->C;
    s->ctx = ctx;
    s->x = dalloc(ctx, 4 * n);
    s->scales = dalloc(ctx, 4 * b->L * b->T);
    s->sym = dalloc(ctx, n);
    s->out = dalloc(ctx, n);
    s->streams = dalloc(ctx, ns * b->cap);
    s->packed = dalloc(ctx, ns * b->cap);
    s->cdf = dalloc(ctx, 2 * ns * (b->B + 1));
    s->len = dalloc(ctx, 4 * ns);
    s->prefsum = dalloc(ctx, 8 * ns);
    s->rstreams = dalloc(ctx, b->L * b->G * b->rcap);
    s->rpacked = dalloc(ctx, b->L * b->G * b->rcap);
    s->cum = dalloc(ctx, 2 * ns * (b->B + 1));
    s->rlen = dalloc(ctx, 4 * b->L * b->G);
    s->rends = dalloc(ctx, 8 * b->L * b->G);
    kvc_memcpy(ctx, s->x, x, 4 * n);
}

/* The packed layout of the encoded streams (built on the host from the side's buffers). */
static int pack(coder_dev_t *b, side_t *s)
{
    const size_t ns = b->L * b->C;
    uint8_t *streams = malloc(ns * b->cap), *packed = malloc(ns * b->cap);
    int32_t *len = malloc(4 * ns);
    int64_t *ps = malloc(8 * ns);
    kvc_memcpy(s->ctx, streams, s->streams, ns * b->cap);
    kvc_memcpy(s->ctx, len, s->len, 4 * ns);
    size_t nb = 0;
    for (size_t k = 0; k < ns; k++) {
        memcpy(packed + nb, streams + k * b->cap, (size_t)len[k]);
        nb += (size_t)len[k];
        ps[k] = (int64_t)nb;
    }
    b->nbytes = nb;
    kvc_memcpy(s->ctx, s->packed, packed, nb);
    kvc_memcpy(s->ctx, s->prefsum, ps, 8 * ns);
    free(streams);
    free(packed);
    free(len);
    free(ps);
    return 0;
}

/* The same for the rANS streams: packed back to back, with their end offsets. */
static void pack_rans(coder_dev_t *b, side_t *s)
{
    const size_t ns = b->L * b->G;
    uint8_t *streams = malloc(ns * b->rcap), *packed = malloc(ns * b->rcap);
    int32_t *len = malloc(4 * ns);
    int64_t *ends = malloc(8 * ns);
    kvc_memcpy(s->ctx, streams, s->rstreams, ns * b->rcap);
    kvc_memcpy(s->ctx, len, s->rlen, 4 * ns);
    size_t nb = 0;
    for (size_t k = 0; k < ns; k++) {
        memcpy(packed + nb, streams + k * b->rcap, (size_t)len[k]);
        ends[k] = (int64_t)(nb += (size_t)len[k]);
    }
    b->rbytes = nb;
    kvc_memcpy(s->ctx, s->rpacked, packed, nb);
    kvc_memcpy(s->ctx, s->rends, ends, 8 * ns);
    free(streams);
    free(packed);
    free(len);
    free(ends);
}

static int same_symbols(const coder_dev_t *b, const side_t *s)
{
    const size_t n = b->L * b->T * b->C;
    uint8_t *a = malloc(n), *c = malloc(n);
    kvc_memcpy(s->ctx, a, s->sym, n);
    kvc_memcpy(s->ctx, c, s->out, n);
    const int same = memcmp(a, c, n) == 0;
    free(a);
    free(c);
    return same;
}

int bench_coder_dev_run(const bench_opts_t *o)
{
    coder_dev_t b = { .L = o->quick ? 4 : 32, .T = 256, .C = 1024, .B = 32 };
    b.cap = kvc_cg_encode_bound(b.T);
    b.G = (b.C + 31) / 32; /* rANS streams a layer: one per 32 channels (cachegen.h, Q) */
    b.rcap = kvc_rans_encode_bound(b.T);
    const size_t n = b.L * b.T * b.C;
    const int reps = o->quick ? 2 : 5;
    float *x = malloc(4 * n);
    b.bins = malloc(4 * b.L);
    uint64_t rng = 2024;
    for (size_t l = 0; l < b.L; l++) {
        b.bins[l] = b.B;
        for (size_t c = 0; c < b.C; c++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            const double sigma = exp(0.3 * ((double)(rng >> 11) * 0x1p-53 - 0.5));
            for (size_t t = 0; t < b.T; t++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                const double u = (double)(rng >> 11) * 0x1p-53;
                x[(l * b.T + t) * b.C + c] = (float)(sigma * (u - 0.5) * (u - 0.5) * (u < 0.5 ? -4 : 4));
            }
        }
    }
    kvc_context_t *cpu = NULL;
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND, .backend = "cpu" };
    if (o->threads > 0) {
        p.field_mask |= KVC_CONTEXT_PARAM_NUM_THREADS;
        p.num_threads = o->threads;
    }
    if (kvc_context_create(&p, &cpu) != KVC_OK) {
        fprintf(stderr, "bench coder_dev: cpu context: %s\n", kvc_last_error());
        return 1;
    }
    side_t sides[2];
    side_init(&sides[0], o->ctx, &b, x);
    side_init(&sides[1], cpu, &b, x);
    bench_stat_t t[2][OP_COUNT]; /* [side][op] */
    int rc = 0;
    for (int op = 0; op < OP_COUNT && !rc; op++) {
        coder_dev_t side_job[2];
        for (int si = 0; si < 2; si++) {
            if (op == OP_DECODE) pack(&b, &sides[si]);
            if (op == OP_RDECODE) pack_rans(&b, &sides[si]);
            side_job[si] = b;
            side_job[si].s = &sides[si];
            side_job[si].op = op;
        }
        /* The backend and the CPU backend alternately. */
        bench_pair(run_op, &side_job[0], run_op, &side_job[1], reps, 0, &t[0][op], &t[1][op]);
        for (int si = 0; si < 2 && !rc; si++) {
            if (side_job[si].failed) {
                fprintf(stderr, "bench coder_dev: %s failed: %s\n", op_names[op], kvc_last_error());
                rc = 1;
            } else if ((op == OP_DECODE || op == OP_PACKED || op == OP_RDECODE) && !same_symbols(&side_job[si], side_job[si].s)) {
                fprintf(stderr, "bench coder_dev: %s did not give the symbols back\n", op_names[op]);
                rc = 1;
            }
        }
    }
    d2d_t copy = { .ctx = o->ctx, .dst = NULL, .src = sides[0].x, .bytes = 4 * n };
    double t_d2d = 0;
    if (!rc && kvc_device_alloc(o->ctx, copy.bytes, &copy.dst) == KVC_OK) {
        bench_stat_t d2d[2]; /* the copy on both sides of the pair: best of all its samples */
        bench_pair(run_d2d, &copy, run_d2d, &copy, reps, 0, &d2d[0], &d2d[1]);
        t_d2d = d2d[0].best < d2d[1].best ? d2d[0].best : d2d[1].best;
        kvc_device_free(o->ctx, copy.dst);
    }
    const size_t ns = b.L * b.C;
    const double moved[OP_COUNT] = { /* bytes read + written by each op */
                                     [OP_QUANT] = 5.0 * n + 4.0 * b.L * b.T,
                                     [OP_CDF] = n + 2.0 * ns * (b.B + 1),
                                     [OP_ENCODE] = n + 2.0 * ns * (b.B + 1) + b.nbytes + 4.0 * ns,
                                     [OP_DECODE] = b.nbytes + 2.0 * ns * (b.B + 1) + 4.0 * ns + n,
                                     [OP_PACKED] = b.nbytes + 2.0 * ns * (b.B + 1) + 8.0 * ns + n,
                                     [OP_RTABLES] = n + 2.0 * ns * (b.B + 1),
                                     [OP_RENCODE] = n + 2.0 * ns * (b.B + 1) + b.rbytes + 4.0 * b.L * b.G,
                                     [OP_RDECODE] = b.rbytes + 2.0 * ns * (b.B + 1) + 8.0 * b.L * b.G + n };
    for (int op = 0; op < OP_COUNT && !rc; op++) {
        char params[256];
        snprintf(params, sizeof(params),
                 "\"backend\":\"%s\",\"layers\":%zu,\"tokens\":%zu,\"channels\":%zu,\"bins\":%u,\"coded_bytes\":%zu,"
                 "\"rans_bytes\":%zu",
                 kvc_context_backend_name(o->ctx), b.L, b.T, b.C, b.B, b.nbytes, b.rbytes);
        bench_result_t r = { .suite = "coder_dev", .name = op_names[op], .unit = "Msym/s", .baseline_name = "cpu_backend",
                             .threads = kvc_context_num_threads(cpu), .params = params };
        bench_set_rates(&r, (double)n / 1e6, &t[0][op], &t[1][op]);
        bench_report(o, &r);
        if (t_d2d > 0) {
            char name[32];
            snprintf(name, sizeof(name), "%s_bw", op_names[op]);
            const bench_result_t w = { .suite = "coder_dev", .name = name, .value = moved[op] / t[0][op].best / 1e9,
                                       .unit = "GB/s", .baseline_name = "d2d_copy",
                                       .baseline_value = (double)copy.bytes / t_d2d / 1e9,
                                       .threads = kvc_context_num_threads(o->ctx), .params = params };
            bench_report(o, &w);
        }
    }
    for (int si = 0; si < 2; si++) {
        side_t *s = &sides[si];
        void *all[] = { s->x, s->scales, s->sym, s->out, s->streams, s->packed, s->cdf, s->len, s->prefsum,
                        s->rstreams, s->rpacked, s->cum, s->rlen, s->rends };
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) kvc_device_free(s->ctx, all[i]);
    }
    kvc_context_destroy(cpu);
    free(x);
    free(b.bins);
    return rc;
}
